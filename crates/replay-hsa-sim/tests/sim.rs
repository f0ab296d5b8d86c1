//! The simulated runtime driven the way a HIP runtime drives the real one: through the API
//! table's entries only (agents, pools, queues, packets, doorbells, signals, interception, the
//! loader extension), then with `replay-hsa`'s `OnLoad` installed on the table.
//!
//! Every wait is bounded (`TIMEOUT`), so a broken simulator fails a test instead of hanging CI.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use replay_hsa::sys::aql;
use replay_hsa::sys::{self, v2, Entry};
use replay_hsa_sim::client::typed;
use replay_hsa_sim::{PoolKind, SimConfig, SimHsa, VariableSpec, ASYNC_THREAD_NAME};

const TIMEOUT: Duration = Duration::from_secs(10);

type IterAgents = unsafe extern "C" fn(
    Option<unsafe extern "C" fn(sys::hsa_agent_t, *mut c_void) -> u32>,
    *mut c_void,
) -> u32;
type IterPools = unsafe extern "C" fn(
    sys::hsa_agent_t,
    Option<unsafe extern "C" fn(sys::hsa_amd_memory_pool_t, *mut c_void) -> u32>,
    *mut c_void,
) -> u32;
type QueueCreate = unsafe extern "C" fn(
    sys::hsa_agent_t,
    u32,
    u32,
    Option<unsafe extern "C" fn(u32, *mut sys::hsa_queue_t, *mut c_void)>,
    *mut c_void,
    u32,
    u32,
    *mut *mut sys::hsa_queue_t,
) -> u32;
type QueueDestroy = unsafe extern "C" fn(*mut sys::hsa_queue_t) -> u32;
type QueueIndex = unsafe extern "C" fn(*const sys::hsa_queue_t) -> u64;
type QueueAddIndex = unsafe extern "C" fn(*const sys::hsa_queue_t, u64) -> u64;
type SignalCreate =
    unsafe extern "C" fn(i64, u32, *const sys::hsa_agent_t, *mut sys::hsa_signal_t) -> u32;
type SignalDestroy = unsafe extern "C" fn(sys::hsa_signal_t) -> u32;
type SignalStore = unsafe extern "C" fn(sys::hsa_signal_t, i64);
type SignalWait = unsafe extern "C" fn(sys::hsa_signal_t, u32, i64, u64, u32) -> i64;
type Writer = Option<unsafe extern "C" fn(*const c_void, u64)>;
type Handler = unsafe extern "C" fn(*const c_void, u64, u64, *mut c_void, Writer);
type InterceptRegister =
    unsafe extern "C" fn(*mut sys::hsa_queue_t, Option<Handler>, *mut c_void) -> u32;

/// The entries a HIP-like client uses, read from a sim's table.
#[derive(Clone, Copy)]
struct Api {
    iterate_agents: IterAgents,
    agent_get_info: sys::AgentGetInfoFn,
    iterate_pools: IterPools,
    pool_get_info: sys::PoolGetInfoFn,
    pool_allocate: sys::PoolAllocateFn,
    pool_free: sys::PoolFreeFn,
    pointer_info: sys::PointerInfoFn,
    async_copy: sys::AsyncCopyFn,
    queue_create: QueueCreate,
    intercept_create: QueueCreate,
    intercept_register: InterceptRegister,
    queue_destroy: QueueDestroy,
    load_write_index: QueueIndex,
    load_read_index: QueueIndex,
    add_write_index: QueueAddIndex,
    signal_create: SignalCreate,
    signal_destroy: SignalDestroy,
    signal_load: sys::SignalLoadFn,
    signal_store_screlease: SignalStore,
    signal_wait_scacquire: SignalWait,
}

/// Aborts the test process if it runs far longer than it should (a deadlock in the simulator
/// must fail CI, not hang it). Every test starts it through [`api`].
fn watchdog() {
    static START: std::sync::Once = std::sync::Once::new();
    START.call_once(|| {
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(120));
            eprintln!("replay-hsa-sim tests: watchdog expired after 120 s, aborting");
            std::process::abort();
        });
    });
}

fn api(sim: &SimHsa) -> Api {
    watchdog();
    let c = sim.core();
    let a = sim.amd();
    // SAFETY: each entry is read as its C signature (hsa.h, hsa_ext_amd.h).
    unsafe {
        Api {
            iterate_agents: typed(c.hsa_iterate_agents_fn),
            agent_get_info: typed(c.hsa_agent_get_info_fn),
            iterate_pools: typed(a.hsa_amd_agent_iterate_memory_pools_fn),
            pool_get_info: typed(a.hsa_amd_memory_pool_get_info_fn),
            pool_allocate: typed(a.hsa_amd_memory_pool_allocate_fn),
            pool_free: typed(a.hsa_amd_memory_pool_free_fn),
            pointer_info: typed(a.hsa_amd_pointer_info_fn),
            async_copy: typed(a.hsa_amd_memory_async_copy_fn),
            queue_create: typed(c.hsa_queue_create_fn),
            intercept_create: typed(a.hsa_amd_queue_intercept_create_fn),
            intercept_register: typed(a.hsa_amd_queue_intercept_register_fn),
            queue_destroy: typed(c.hsa_queue_destroy_fn),
            load_write_index: typed(c.hsa_queue_load_write_index_relaxed_fn),
            load_read_index: typed(c.hsa_queue_load_read_index_scacquire_fn),
            add_write_index: typed(c.hsa_queue_add_write_index_screlease_fn),
            signal_create: typed(c.hsa_signal_create_fn),
            signal_destroy: typed(c.hsa_signal_destroy_fn),
            signal_load: typed(c.hsa_signal_load_relaxed_fn),
            signal_store_screlease: typed(c.hsa_signal_store_screlease_fn),
            signal_wait_scacquire: typed(c.hsa_signal_wait_scacquire_fn),
        }
    }
}

impl Api {
    fn signal(&self, v: i64) -> sys::hsa_signal_t {
        let mut s = sys::hsa_signal_t::default();
        assert_eq!(
            // SAFETY: valid out pointer, no consumers.
            unsafe { (self.signal_create)(v, 0, std::ptr::null(), &mut s) },
            0
        );
        s
    }

    fn load(&self, s: sys::hsa_signal_t) -> i64 {
        // SAFETY: a live signal.
        unsafe { (self.signal_load)(s) }
    }

    /// Waits (bounded) until `s == 0`; the value seen.
    fn wait_zero(&self, s: sys::hsa_signal_t) -> i64 {
        // SAFETY: a live signal; condition EQ (0); the timeout hint is nanoseconds here.
        unsafe { (self.signal_wait_scacquire)(s, 0, 0, TIMEOUT.as_nanos() as u64, 0) }
    }

    fn alloc(&self, pool: sys::hsa_amd_memory_pool_t, size: usize) -> *mut u8 {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out pointer.
        assert_eq!(unsafe { (self.pool_allocate)(pool, size, 0, &mut p) }, 0);
        p.cast()
    }

    fn queue(&self, agent: sys::hsa_agent_t, size: u32, intercept: bool) -> *mut sys::hsa_queue_t {
        let mut q = std::ptr::null_mut();
        let create = if intercept {
            self.intercept_create
        } else {
            self.queue_create
        };
        // SAFETY: valid out pointer; no callback.
        let st = unsafe { create(agent, size, 0, None, std::ptr::null_mut(), 0, 0, &mut q) };
        assert_eq!(st, 0);
        q
    }

    /// Writes `packet` at the next write index (body first, header last with release) and,
    /// if `ring`, rings the doorbell.
    fn submit(&self, q: *mut sys::hsa_queue_t, packet: [u8; 64], ring: bool) -> u64 {
        // SAFETY: a live queue.
        let idx = unsafe { (self.add_write_index)(q, 1) };
        // SAFETY: the queue struct is live; the slot `idx % size` lies in its ring and is
        // ours until the header is published.
        unsafe {
            let qs = &*q;
            let slot = qs
                .base_address
                .cast::<u8>()
                .add((idx % u64::from(qs.size)) as usize * 64);
            std::ptr::copy_nonoverlapping(packet[2..].as_ptr(), slot.add(2), 62);
            AtomicU16::from_ptr(slot.cast()).store(
                u16::from_le_bytes([packet[0], packet[1]]),
                Ordering::Release,
            );
        }
        if ring {
            self.ring(q);
        }
        idx
    }

    fn ring(&self, q: *mut sys::hsa_queue_t) {
        // SAFETY: a live queue; the doorbell gets the last write index.
        unsafe {
            let w = (self.load_write_index)(q);
            (self.signal_store_screlease)((*q).doorbell_signal, w as i64 - 1)
        }
    }
}

fn dispatch(
    kernel: u64,
    kernarg: *mut u8,
    completion: sys::hsa_signal_t,
    barrier: bool,
) -> [u8; 64] {
    let p = sys::hsa_kernel_dispatch_packet_t {
        header: aql::header(sys::HSA_PACKET_TYPE_KERNEL_DISPATCH, barrier, 2, 2),
        setup: 1,
        workgroup_size_x: 1,
        workgroup_size_y: 1,
        workgroup_size_z: 1,
        grid_size_x: 1,
        grid_size_y: 1,
        grid_size_z: 1,
        kernel_object: kernel,
        kernarg_address: kernarg as u64,
        completion_signal: completion,
        ..Default::default()
    };
    // SAFETY: a 64-byte plain-integer struct.
    unsafe { std::mem::transmute(p) }
}

fn barrier_and(deps: &[sys::hsa_signal_t], completion: sys::hsa_signal_t) -> [u8; 64] {
    let mut p = sys::hsa_barrier_and_packet_t {
        header: aql::header(sys::HSA_PACKET_TYPE_BARRIER_AND, true, 2, 2),
        completion_signal: completion,
        ..Default::default()
    };
    for (i, d) in deps.iter().enumerate() {
        p.dep_signal[i] = *d;
    }
    // SAFETY: a 64-byte plain-integer struct.
    unsafe { std::mem::transmute(p) }
}

/// A kernel adding `arg1` to the `u64` at `arg0`.
fn add_kernel(sim: &SimHsa) -> u64 {
    sim.register_kernel("add", |d| {
        let p = d.arg(0)?;
        let v = d.arg(1)?;
        d.atomic_add_u64(p, v)?;
        Ok(())
    })
}

/// A buffer `u64` in the GPU's coarse pool and kernargs `(buffer, add)` in the kernarg pool.
fn buffer_and_args(sim: &SimHsa, api: &Api, add: u64) -> (*mut u64, *mut u8) {
    let buf = api
        .alloc(sim.pool(0, PoolKind::DeviceCoarse), 8)
        .cast::<u64>();
    let args = api.alloc(sim.pool(0, PoolKind::Kernarg), 16);
    // SAFETY: 16 fresh bytes of host-visible kernarg memory.
    unsafe {
        args.cast::<u64>().write(buf as u64);
        args.cast::<u64>().add(1).write(add);
    }
    (buf, args)
}

fn read_u64(p: *const u64) -> u64 {
    // SAFETY: a live simulated allocation (host memory) of at least 8 bytes.
    unsafe { std::ptr::read_volatile(p) }
}

fn eventually(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < TIMEOUT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ----- The table ------------------------------------------------------------------------------

#[test]
fn table_has_current_major_versions_and_no_null_entry() {
    let mut sim = SimHsa::new(SimConfig::default());
    let root = sim.table();
    // SAFETY: the sim's root table, alive with `sim`.
    let r = unsafe { *root };
    assert_eq!(r.version.major_id, 3);
    assert_eq!(
        r.version.minor_id as usize,
        std::mem::size_of::<v2::HsaApiTable>()
    );
    // SAFETY: the sub-tables the root points to, alive with `sim`.
    let (core, amd) = unsafe { (&*r.core_, &*r.amd_ext_) };
    assert_eq!(
        (core.version.major_id, core.version.minor_id as usize),
        (2, std::mem::size_of::<v2::CoreApiTable>())
    );
    assert_eq!(
        (amd.version.major_id, amd.version.minor_id as usize),
        (2, std::mem::size_of::<v2::AmdExtTable>())
    );
    let check = |base: *const u8, offsets: Vec<(&str, usize)>| {
        for (name, off) in offsets {
            // SAFETY: `off` is the offset of a nullable function-pointer field.
            let e = unsafe { base.add(off).cast::<Entry>().read() };
            assert!(e.is_some(), "{name} is NULL");
        }
    };
    check(
        (core as *const v2::CoreApiTable).cast(),
        v2::CoreApiTable::entry_offsets(),
    );
    check(
        (amd as *const v2::AmdExtTable).cast(),
        v2::AmdExtTable::entry_offsets(),
    );
    // An entry that is not simulated answers an error status.
    // SAFETY: `hsa_soft_queue_create`'s slot, called with no arguments: the stub ignores them.
    let get_info: unsafe extern "C" fn(u32, *mut c_void) -> u32 =
        unsafe { typed(core.hsa_soft_queue_create_fn) };
    assert_eq!(
        // SAFETY: arguments are ignored by the stub.
        unsafe { get_info(0, std::ptr::null_mut()) },
        replay_hsa_sim::STATUS_NOT_SIMULATED
    );
}

unsafe extern "C" fn collect_agent(a: sys::hsa_agent_t, data: *mut c_void) -> u32 {
    // SAFETY: `data` is the `Vec` the test passed.
    unsafe { (*data.cast::<Vec<sys::hsa_agent_t>>()).push(a) };
    0
}

unsafe extern "C" fn collect_pool(p: sys::hsa_amd_memory_pool_t, data: *mut c_void) -> u32 {
    // SAFETY: `data` is the `Vec` the test passed.
    unsafe { (*data.cast::<Vec<sys::hsa_amd_memory_pool_t>>()).push(p) };
    0
}

#[test]
fn agents_pools_allocation_and_pointer_info() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let mut agents: Vec<sys::hsa_agent_t> = Vec::new();
    // SAFETY: a callback collecting into `agents`.
    let st =
        unsafe { (api.iterate_agents)(Some(collect_agent), (&mut agents as *mut Vec<_>).cast()) };
    assert_eq!(st, 0);
    let devices: Vec<u32> = agents
        .iter()
        .map(|a| {
            let mut d = u32::MAX;
            assert_eq!(
                // SAFETY: HSA_AGENT_INFO_DEVICE writes 4 bytes.
                unsafe {
                    (api.agent_get_info)(
                        *a,
                        sys::HSA_AGENT_INFO_DEVICE,
                        (&mut d as *mut u32).cast(),
                    )
                },
                0
            );
            d
        })
        .collect();
    assert_eq!(
        devices,
        [
            sys::HSA_DEVICE_TYPE_CPU,
            sys::HSA_DEVICE_TYPE_GPU,
            sys::HSA_DEVICE_TYPE_GPU
        ]
    );

    let flags_of = |agent: sys::hsa_agent_t| -> Vec<(sys::hsa_amd_memory_pool_t, u32)> {
        let mut pools: Vec<sys::hsa_amd_memory_pool_t> = Vec::new();
        assert_eq!(
            // SAFETY: a callback collecting into `pools`.
            unsafe {
                (api.iterate_pools)(
                    agent,
                    Some(collect_pool),
                    (&mut pools as *mut Vec<_>).cast(),
                )
            },
            0
        );
        pools
            .into_iter()
            .map(|p| {
                let mut f = 0u32;
                assert_eq!(
                    // SAFETY: GLOBAL_FLAGS writes 4 bytes.
                    unsafe {
                        (api.pool_get_info)(
                            p,
                            sys::HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                            (&mut f as *mut u32).cast(),
                        )
                    },
                    0
                );
                (p, f)
            })
            .collect()
    };
    let cpu = flags_of(agents[0]);
    let gpu = flags_of(agents[1]);
    assert_eq!(
        cpu.iter().map(|x| x.1).collect::<Vec<_>>(),
        [3, 2],
        "kernarg, fine"
    );
    assert_eq!(
        gpu.iter().map(|x| x.1).collect::<Vec<_>>(),
        [4, 2],
        "coarse, fine"
    );

    let p = api.alloc(gpu[0].0, 1000);
    let mut info = sys::hsa_amd_pointer_info_t::default();
    // SAFETY: a valid out-struct with its size set.
    let st = unsafe {
        (api.pointer_info)(
            p.add(10).cast(),
            &mut info,
            None,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(st, 0);
    assert_eq!(info.type_, sys::HSA_EXT_POINTER_TYPE_HSA);
    assert_eq!(info.agentBaseAddress, p.cast());
    assert_eq!(info.sizeInBytes, 1000);
    assert_eq!(info.agentOwner, agents[1]);
    // SAFETY: a pointer from the pool allocator.
    assert_eq!(unsafe { (api.pool_free)(p.cast()) }, 0);
    let mut info = sys::hsa_amd_pointer_info_t::default();
    // SAFETY: as above.
    unsafe {
        (api.pointer_info)(
            p.cast(),
            &mut info,
            None,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(info.type_, sys::HSA_EXT_POINTER_TYPE_UNKNOWN, "freed");
}

#[test]
fn signal_wait_times_out_and_wakes() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let s = api.signal(1);
    let start = Instant::now();
    // SAFETY: a live signal; 20 ms timeout hint.
    let v = unsafe { (api.signal_wait_scacquire)(s, 0, 0, 20_000_000, 0) };
    assert_eq!(v, 1);
    assert!(start.elapsed() >= Duration::from_millis(19));
    let store = api.signal_store_screlease;
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        // SAFETY: a live signal.
        unsafe { store(s, 0) };
    });
    assert_eq!(api.wait_zero(s), 0);
    t.join().unwrap();
    // SAFETY: a live signal.
    assert_eq!(unsafe { (api.signal_destroy)(s) }, 0);
}

// ----- Queues -----------------------------------------------------------------------------------

#[test]
fn dispatch_runs_and_completion_signal_fires() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 42);
    let q = api.queue(sim.gpu_agents()[0], 64, false);
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done, false), true);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 42);
    // SAFETY: a live queue.
    assert_eq!(unsafe { (api.load_read_index)(q) }, 1);
    // SAFETY: a live queue.
    assert_eq!(unsafe { (api.queue_destroy)(q) }, 0);
}

#[test]
fn barrier_and_waits_for_its_dependency() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let q = api.queue(sim.gpu_agents()[1], 64, false);
    let dep = api.signal(1);
    let b = api.signal(1);
    let done = api.signal(1);
    api.submit(q, barrier_and(&[dep], b), false);
    api.submit(q, dispatch(k, args, done, false), true);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(api.load(b), 1, "the barrier waits");
    assert_eq!(read_u64(buf), 0, "the dispatch behind it waits");
    // SAFETY: a live queue.
    assert_eq!(unsafe { (api.load_read_index)(q) }, 0, "not consumed yet");
    // SAFETY: a live signal.
    unsafe { (api.signal_store_screlease)(dep, 0) };
    assert_eq!(api.wait_zero(b), 0);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 1);
}

#[test]
fn read_index_moves_on_consume_not_on_completion() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let g = gate.clone();
    let k = sim.register_kernel("blocked", move |_| {
        let (m, cv) = &*g;
        let open = m.lock().unwrap();
        let _open = cv.wait_timeout_while(open, TIMEOUT, |o| !*o).unwrap();
        Ok(())
    });
    let q = api.queue(sim.gpu_agents()[0], 64, false);
    let done = api.signal(1);
    api.submit(q, dispatch(k, std::ptr::null_mut(), done, false), true);
    // SAFETY: a live queue.
    eventually("consumption", || unsafe { (api.load_read_index)(q) } == 1);
    assert_eq!(api.load(done), 1, "consumed, still running");
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    assert_eq!(api.wait_zero(done), 0);
}

#[test]
fn barrier_bit_waits_for_earlier_packets() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    let slow = sim.register_kernel("slow", move |_| {
        std::thread::sleep(Duration::from_millis(30));
        o.lock().unwrap().push("slow");
        Ok(())
    });
    let o = order.clone();
    let fast = sim.register_kernel("fast", move |_| {
        o.lock().unwrap().push("fast");
        Ok(())
    });
    let q = api.queue(sim.gpu_agents()[0], 64, false);
    let s1 = api.signal(1);
    let s2 = api.signal(1);
    api.submit(q, dispatch(slow, std::ptr::null_mut(), s1, false), false);
    api.submit(q, dispatch(fast, std::ptr::null_mut(), s2, true), true);
    assert_eq!(api.wait_zero(s2), 0);
    assert_eq!(api.wait_zero(s1), 0);
    assert_eq!(*order.lock().unwrap(), ["slow", "fast"]);
}

#[test]
fn async_copy_runs_on_the_copy_engine() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let src = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 256);
    let dst = api.alloc(sim.pool(1, PoolKind::DeviceCoarse), 256);
    // SAFETY: 256 bytes of simulated (host) memory.
    unsafe { std::ptr::write_bytes(src, 0xab, 256) };
    let dep = api.signal(1);
    let done = api.signal(1);
    let gpus = sim.gpu_agents();
    // SAFETY: live ranges, one dependency.
    let st =
        unsafe { (api.async_copy)(dst.cast(), gpus[1], src.cast(), gpus[0], 256, 1, &dep, done) };
    assert_eq!(st, 0);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(api.load(done), 1, "waits for its dependency");
    // SAFETY: a live signal.
    unsafe { (api.signal_store_screlease)(dep, 0) };
    assert_eq!(api.wait_zero(done), 0);
    // SAFETY: 256 bytes of simulated memory.
    assert!(unsafe { std::slice::from_raw_parts(dst, 256) }
        .iter()
        .all(|b| *b == 0xab));
}

// ----- Interception -------------------------------------------------------------------------------

struct Seen {
    calls: AtomicU64,
    writes: u64,
    threads: Mutex<Vec<(String, std::thread::ThreadId)>>,
    /// For the deferred-doorbell test: a packet to submit from inside the first call.
    inner: Mutex<Option<(Api, *mut sys::hsa_queue_t, [u8; 64])>>,
}

// SAFETY: the raw queue pointer is only used through the simulator's thread-safe entries.
unsafe impl Send for Seen {}
// SAFETY: as above.
unsafe impl Sync for Seen {}

impl Seen {
    fn new(writes: u64) -> Self {
        Seen {
            calls: AtomicU64::new(0),
            writes,
            threads: Mutex::new(Vec::new()),
            inner: Mutex::new(None),
        }
    }
}

unsafe extern "C" fn interceptor(
    pkts: *const c_void,
    count: u64,
    _user_index: u64,
    data: *mut c_void,
    writer: Writer,
) {
    // SAFETY: `data` is the test's `Seen`, alive for the queue's life.
    let seen = unsafe { &*data.cast::<Seen>() };
    seen.calls.fetch_add(1, Ordering::SeqCst);
    let t = std::thread::current();
    seen.threads
        .lock()
        .unwrap()
        .push((t.name().unwrap_or("").to_owned(), t.id()));
    for _ in 0..seen.writes {
        // SAFETY: the runtime's writer with the packets it gave.
        unsafe { writer.unwrap()(pkts, count) };
    }
    let inner = seen.inner.lock().unwrap().take();
    if let Some((api, q, p)) = inner {
        // Tool work from inside the interceptor: its doorbell is deferred.
        api.submit(q, p, true);
    }
}

fn intercepted(api: &Api, sim: &SimHsa, size: u32, seen: &Seen) -> *mut sys::hsa_queue_t {
    let q = api.queue(sim.gpu_agents()[0], size, true);
    // SAFETY: a live intercepting queue; `seen` outlives it in each test.
    let st = unsafe {
        (api.intercept_register)(
            q,
            Some(interceptor),
            (seen as *const Seen).cast_mut().cast(),
        )
    };
    assert_eq!(st, 0);
    q
}

#[test]
fn pass_through_interceptor_runs_the_packet_on_the_ringing_thread() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(1);
    let q = intercepted(&api, &sim, 64, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 5);
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done, false), true);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 5);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        seen.threads.lock().unwrap()[0].1,
        std::thread::current().id()
    );
    // SAFETY: a live queue (the proxy's read index moved when intercepted).
    assert_eq!(unsafe { (api.load_read_index)(q) }, 1);
    // SAFETY: a live queue.
    assert_eq!(unsafe { (api.queue_destroy)(q) }, 0);
}

#[test]
fn interceptor_writing_twice_runs_the_packet_twice() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(2);
    let q = intercepted(&api, &sim, 64, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 3);
    let done = api.signal(2);
    api.submit(q, dispatch(k, args, done, false), true);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 6);
}

#[test]
fn interceptors_chain_most_recent_first() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let first = Seen::new(1);
    let second = Seen::new(2);
    let q = intercepted(&api, &sim, 64, &first);
    // SAFETY: a live intercepting queue; `second` outlives it.
    unsafe {
        (api.intercept_register)(
            q,
            Some(interceptor),
            (&second as *const Seen).cast_mut().cast(),
        )
    };
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let done = api.signal(2);
    api.submit(q, dispatch(k, args, done, false), true);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 2);
    assert_eq!(
        second.calls.load(Ordering::SeqCst),
        1,
        "the most recent sees it first"
    );
    assert_eq!(
        first.calls.load(Ordering::SeqCst),
        2,
        "once per write of the one above"
    );
}

#[test]
fn full_ring_parks_packets_until_there_is_room() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(1);
    let q = intercepted(&api, &sim, 4, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let dep = api.signal(1);
    let b = api.signal(1);
    let done = api.signal(3);
    // A barrier that blocks the hardware ring, then two dispatches: three of the ring's four
    // slots are taken, and the runtime keeps the last one for its retry barrier.
    api.submit(q, barrier_and(&[dep], b), false);
    for _ in 0..2 {
        api.submit(q, dispatch(k, args, done, false), false);
    }
    api.ring(q);
    assert_eq!(sim.parked(q), 0);
    // One more: one slot free is not more than one packet, so `writer` parks it silently and
    // the retry barrier takes the last slot.
    api.submit(q, dispatch(k, args, done, false), true);
    assert_eq!(sim.parked(q), 1);
    assert_eq!(
        seen.calls.load(Ordering::SeqCst),
        4,
        "one interceptor call per packet"
    );
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(read_u64(buf), 0);
    // SAFETY: a live signal.
    unsafe { (api.signal_store_screlease)(dep, 0) };
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 3);
    assert_eq!(sim.parked(q), 0);
}

#[test]
fn the_runtime_hands_interceptors_one_packet_per_call_in_order() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(1);
    let q = intercepted(&api, &sim, 64, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let done = api.signal(3);
    // Three packets written, one doorbell: three calls, as `InterceptQueue::StoreRelaxed`
    // loops over the valid packets.
    for _ in 0..3 {
        api.submit(q, dispatch(k, args, done, false), false);
    }
    api.ring(q);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 3);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 3);
}

#[test]
fn doorbell_rung_inside_an_interceptor_runs_on_the_async_thread() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(1);
    let q = intercepted(&api, &sim, 64, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let outer = api.signal(1);
    let inner = api.signal(1);
    *seen.inner.lock().unwrap() = Some((api, q, dispatch(k, args, inner, false)));
    api.submit(q, dispatch(k, args, outer, false), true);
    assert_eq!(api.wait_zero(outer), 0);
    assert_eq!(api.wait_zero(inner), 0);
    assert_eq!(read_u64(buf), 2);
    let threads = seen.threads.lock().unwrap().clone();
    assert_eq!(threads.len(), 2);
    assert_eq!(
        threads[0].1,
        std::thread::current().id(),
        "first on the ringing thread"
    );
    assert_eq!(
        threads[1].0, ASYNC_THREAD_NAME,
        "the deferred doorbell on the async thread"
    );
    assert_ne!(threads[1].1, std::thread::current().id());
}

// ----- Loader extension ---------------------------------------------------------------------------

#[test]
fn loader_extension_and_executable_symbols_report_module_variables() {
    let sim = SimHsa::new(SimConfig::default());
    let vars = [
        VariableSpec {
            name: "table".into(),
            size: 256,
            is_const: false,
        },
        VariableSpec {
            name: "__hip_cuid_abc".into(),
            size: 1,
            is_const: false,
        },
        VariableSpec {
            name: "coeffs".into(),
            size: 64,
            is_const: true,
        },
    ];
    let exec = sim.load_module(1, &vars, &[]);
    let core = sim.core();
    type GetExt = unsafe extern "C" fn(u16, u16, usize, *mut c_void) -> u32;
    // SAFETY: `hsa_system_get_major_extension_table`'s signature.
    let get_ext: GetExt = unsafe { typed(core.hsa_system_get_major_extension_table_fn) };
    let mut loader = std::mem::MaybeUninit::<replay_hsa_sim::LoaderTable>::zeroed();
    // SAFETY: a buffer of the table's size.
    let st = unsafe {
        get_ext(
            0x201,
            1,
            std::mem::size_of::<replay_hsa_sim::LoaderTable>(),
            loader.as_mut_ptr().cast(),
        )
    };
    assert_eq!(st, 0);
    // SAFETY: filled by the call above.
    let loader = unsafe { loader.assume_init() };
    type IterExecs = unsafe extern "C" fn(
        Option<unsafe extern "C" fn(u64, *mut c_void) -> u32>,
        *mut c_void,
    ) -> u32;
    unsafe extern "C" fn collect_exec(e: u64, data: *mut c_void) -> u32 {
        // SAFETY: the test's `Vec`.
        unsafe { (*data.cast::<Vec<u64>>()).push(e) };
        0
    }
    // SAFETY: the loader's `iterate_executables` signature.
    let iter: IterExecs = unsafe { typed(loader.iterate_executables) };
    let mut execs: Vec<u64> = Vec::new();
    assert_eq!(
        // SAFETY: a collecting callback.
        unsafe { iter(Some(collect_exec), (&mut execs as *mut Vec<u64>).cast()) },
        0
    );
    assert_eq!(execs, [exec]);

    type IterSyms = unsafe extern "C" fn(
        u64,
        sys::hsa_agent_t,
        Option<unsafe extern "C" fn(u64, sys::hsa_agent_t, u64, *mut c_void) -> u32>,
        *mut c_void,
    ) -> u32;
    type SymInfo = unsafe extern "C" fn(u64, u32, *mut c_void) -> u32;
    unsafe extern "C" fn collect_sym(
        _e: u64,
        _a: sys::hsa_agent_t,
        s: u64,
        data: *mut c_void,
    ) -> u32 {
        // SAFETY: the test's `Vec`.
        unsafe { (*data.cast::<Vec<u64>>()).push(s) };
        0
    }
    // SAFETY: the entries' signatures.
    let (iter_syms, info): (IterSyms, SymInfo) = unsafe {
        (
            typed(core.hsa_executable_iterate_agent_symbols_fn),
            typed(core.hsa_executable_symbol_get_info_fn),
        )
    };
    let mut syms: Vec<u64> = Vec::new();
    assert_eq!(
        // SAFETY: a collecting callback.
        unsafe {
            iter_syms(
                exec,
                sim.gpu_agents()[1],
                Some(collect_sym),
                (&mut syms as *mut Vec<u64>).cast(),
            )
        },
        0
    );
    assert_eq!(syms.len(), 3);
    let mut other: Vec<u64> = Vec::new();
    // SAFETY: as above, for the other GPU.
    unsafe {
        iter_syms(
            exec,
            sim.gpu_agents()[0],
            Some(collect_sym),
            (&mut other as *mut Vec<u64>).cast(),
        )
    };
    assert!(other.is_empty());
    let mut got = Vec::new();
    for s in syms {
        let (mut len, mut size, mut addr, mut konst) = (0u32, 0u32, 0u64, false);
        // SAFETY: NAME_LENGTH (1), VARIABLE_SIZE (9), VARIABLE_ADDRESS (21), IS_CONST (10).
        unsafe {
            assert_eq!(info(s, 1, (&mut len as *mut u32).cast()), 0);
            assert_eq!(info(s, 9, (&mut size as *mut u32).cast()), 0);
            assert_eq!(info(s, 21, (&mut addr as *mut u64).cast()), 0);
            assert_eq!(info(s, 10, (&mut konst as *mut bool).cast()), 0);
        }
        let mut name = vec![0u8; len as usize];
        // SAFETY: NAME (2) writes `len` bytes.
        assert_eq!(unsafe { info(s, 2, name.as_mut_ptr().cast()) }, 0);
        got.push((String::from_utf8(name).unwrap(), size, konst));
        assert_eq!(Some(addr), sim.variable_address(&got.last().unwrap().0));
    }
    assert_eq!(
        got,
        [
            ("table".to_owned(), 256, false),
            ("__hip_cuid_abc".to_owned(), 1, false),
            ("coeffs".to_owned(), 64, true)
        ]
    );
}

// ----- replay-hsa's OnLoad on the simulated table ------------------------------------------------

#[test]
fn on_load_installs_wrappers_that_track_pool_allocations_by_class() {
    let mut sim = SimHsa::new(SimConfig::default());
    let before = sim
        .amd()
        .hsa_amd_memory_pool_allocate_fn
        .map(|f| f as usize);
    // SAFETY: the sim's table, alive, not used by other threads during the call.
    let ok = unsafe { replay_hsa::on_load(sim.table().cast(), 1, 0, std::ptr::null()) };
    assert!(ok, "{}", replay_hsa::backend().state_json());
    let after = sim
        .amd()
        .hsa_amd_memory_pool_allocate_fn
        .map(|f| f as usize);
    assert_ne!(before, after, "the pool allocate entry is wrapped");
    let api = api(&sim);
    let coarse = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 4096);
    let fine = api.alloc(sim.pool(1, PoolKind::DeviceFine), 4096);
    let kernarg = api.alloc(sim.pool(0, PoolKind::Kernarg), 4096);
    let host = api.alloc(sim.pool(0, PoolKind::HostFine), 4096);
    // Core `hsa_memory_allocate` from a region (regions mirror pools, same handles).
    let mut region_ptr = std::ptr::null_mut();
    let region = sys::hsa_region_t {
        handle: sim.pool(1, PoolKind::DeviceCoarse).handle,
    };
    // SAFETY: `hsa_memory_allocate`'s signature.
    let memory_allocate: sys::MemoryAllocateFn =
        unsafe { typed(sim.core().hsa_memory_allocate_fn) };
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { memory_allocate(region, 4096, &mut region_ptr) }, 0);
    let region_ptr = region_ptr.cast::<u8>();
    let state: serde_json::Value =
        serde_json::from_str(&replay_hsa::backend().state_json()).unwrap();
    let class_of = |p: *mut u8| {
        state["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["base"].as_u64() == Some(p as u64))
            .map(|r| r["class"].as_u64().unwrap())
    };
    use replay_core::MemoryClass;
    assert_eq!(
        class_of(coarse),
        Some(u64::from(MemoryClass::DEVICE_COARSE.bits()))
    );
    assert_eq!(
        class_of(fine),
        Some(u64::from(MemoryClass::FINE_GRAINED.bits()))
    );
    // Fine-grained system memory: pinned host memory, coherent.
    assert_eq!(
        class_of(host),
        Some(u64::from(
            (MemoryClass::PINNED_HOST | MemoryClass::FINE_GRAINED).bits()
        ))
    );
    assert_eq!(
        class_of(kernarg),
        Some(u64::from(MemoryClass::KERNARG.bits()))
    );
    assert_eq!(
        class_of(region_ptr),
        Some(u64::from(MemoryClass::DEVICE_COARSE.bits()))
    );
    // The free is recorded: the region leaves the tracker.
    // SAFETY: a pointer from the pool allocator, through the wrapped entry.
    assert_eq!(unsafe { (api.pool_free)(coarse.cast()) }, 0);
    let state: serde_json::Value =
        serde_json::from_str(&replay_hsa::backend().state_json()).unwrap();
    assert!(!state["regions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["base"].as_u64() == Some(coarse as u64)));
}

unsafe extern "C" fn queue_error(status: u32, _q: *mut sys::hsa_queue_t, data: *mut c_void) {
    // SAFETY: `data` is the test's `AtomicU64`.
    unsafe { (*data.cast::<AtomicU64>()).store(u64::from(status), Ordering::SeqCst) };
}

#[test]
fn kernel_memory_fault_reaches_the_queue_callback() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let k = sim.register_kernel("wild", |d| d.write_u64(0x10, 1));
    let status = AtomicU64::new(0);
    let mut q = std::ptr::null_mut();
    // SAFETY: a valid out pointer; the callback's data outlives the queue.
    let st = unsafe {
        (api.queue_create)(
            sim.gpu_agents()[0],
            64,
            0,
            Some(queue_error),
            (&status as *const AtomicU64).cast_mut().cast(),
            0,
            0,
            &mut q,
        )
    };
    assert_eq!(st, 0);
    let done = api.signal(1);
    api.submit(q, dispatch(k, std::ptr::null_mut(), done, false), true);
    eventually("the error callback", || status.load(Ordering::SeqCst) != 0);
    assert_eq!(
        status.load(Ordering::SeqCst),
        u64::from(replay_hsa_sim::entries::HSA_STATUS_ERROR_EXCEPTION)
    );
    assert!(sim
        .faults()
        .iter()
        .any(|f| f.contains("memory fault at 0x10")));
    assert_eq!(api.load(done), 1, "a faulting dispatch does not complete");
    // SAFETY: a live queue.
    assert_eq!(unsafe { (api.queue_destroy)(q) }, 0);
}

#[test]
fn two_gpu_agents_run_concurrently() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let flag = Arc::new(AtomicU64::new(0));
    let f = flag.clone();
    // GPU 0's kernel finishes only once GPU 1's kernel ran: both must be in flight together.
    let waiter = sim.register_kernel("waiter", move |_| {
        let start = Instant::now();
        while f.load(Ordering::SeqCst) == 0 && start.elapsed() < TIMEOUT {
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(())
    });
    let f = flag.clone();
    let setter = sim.register_kernel("setter", move |_| {
        f.store(1, Ordering::SeqCst);
        Ok(())
    });
    let gpus = sim.gpu_agents();
    let (q0, q1) = (api.queue(gpus[0], 64, false), api.queue(gpus[1], 64, true));
    let (s0, s1) = (api.signal(1), api.signal(1));
    api.submit(q0, dispatch(waiter, std::ptr::null_mut(), s0, false), true);
    api.submit(q1, dispatch(setter, std::ptr::null_mut(), s1, false), true);
    assert_eq!(api.wait_zero(s1), 0);
    assert_eq!(api.wait_zero(s0), 0);
    assert_eq!(flag.load(Ordering::SeqCst), 1);
}

struct Launch {
    api: Api,
    q: *mut sys::hsa_queue_t,
    packet: [u8; 64],
    handler_thread: Mutex<Option<String>>,
}

unsafe extern "C" fn launch_from_callback(value: i64, arg: *mut c_void) -> bool {
    // SAFETY: `arg` is the test's `Launch`, alive until the test ends.
    let l = unsafe { &*arg.cast::<Launch>() };
    assert_eq!(value, 0);
    *l.handler_thread.lock().unwrap() = std::thread::current().name().map(str::to_owned);
    l.api.submit(l.q, l.packet, true);
    false
}

#[test]
fn work_launched_from_an_async_handler_reaches_the_interceptor_on_the_async_thread() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(1);
    let q = intercepted(&api, &sim, 64, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let first = api.signal(1);
    let second = api.signal(1);
    let launch = Launch {
        api,
        q,
        packet: dispatch(k, args, second, false),
        handler_thread: Mutex::new(None),
    };
    type AsyncHandler = unsafe extern "C" fn(
        sys::hsa_signal_t,
        u32,
        i64,
        Option<unsafe extern "C" fn(i64, *mut c_void) -> bool>,
        *mut c_void,
    ) -> u32;
    // SAFETY: `hsa_amd_signal_async_handler`'s signature.
    let register: AsyncHandler = unsafe { typed(sim.amd().hsa_amd_signal_async_handler_fn) };
    // SAFETY: a live signal; `launch` outlives the handler (it runs before `second` fires).
    let st = unsafe {
        register(
            first,
            0,
            0,
            Some(launch_from_callback),
            (&launch as *const Launch).cast_mut().cast(),
        )
    };
    assert_eq!(st, 0);
    api.submit(q, dispatch(k, args, first, false), true);
    assert_eq!(api.wait_zero(first), 0);
    assert_eq!(api.wait_zero(second), 0);
    assert_eq!(read_u64(buf), 2);
    assert_eq!(
        launch.handler_thread.lock().unwrap().as_deref(),
        Some(ASYNC_THREAD_NAME)
    );
    let threads = seen.threads.lock().unwrap().clone();
    assert_eq!(threads.len(), 2);
    assert_eq!(threads[1].0, ASYNC_THREAD_NAME, "tool work from a callback");
}
