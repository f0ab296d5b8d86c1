//! What every simulator test shares: the table's entries as `Api`, packets, kernels, buffers, waits.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use replay_hsa::sys;
use replay_hsa::sys::aql;
use replay_hsa_sim::client::typed;
use replay_hsa_sim::{PoolKind, SimHsa};

pub const TIMEOUT: Duration = Duration::from_secs(10);

pub type IterAgents = unsafe extern "C" fn(
    Option<unsafe extern "C" fn(sys::hsa_agent_t, *mut c_void) -> u32>,
    *mut c_void,
) -> u32;

pub type IterPools = unsafe extern "C" fn(
    sys::hsa_agent_t,
    Option<unsafe extern "C" fn(sys::hsa_amd_memory_pool_t, *mut c_void) -> u32>,
    *mut c_void,
) -> u32;

pub type QueueCreate = unsafe extern "C" fn(
    sys::hsa_agent_t,
    u32,
    u32,
    Option<unsafe extern "C" fn(u32, *mut sys::hsa_queue_t, *mut c_void)>,
    *mut c_void,
    u32,
    u32,
    *mut *mut sys::hsa_queue_t,
) -> u32;

pub type QueueDestroy = unsafe extern "C" fn(*mut sys::hsa_queue_t) -> u32;

pub type QueueIndex = unsafe extern "C" fn(*const sys::hsa_queue_t) -> u64;

pub type QueueAddIndex = unsafe extern "C" fn(*const sys::hsa_queue_t, u64) -> u64;

pub type SignalCreate =
    unsafe extern "C" fn(i64, u32, *const sys::hsa_agent_t, *mut sys::hsa_signal_t) -> u32;

pub type SignalDestroy = unsafe extern "C" fn(sys::hsa_signal_t) -> u32;

pub type SignalStore = unsafe extern "C" fn(sys::hsa_signal_t, i64);

pub type SignalWait = unsafe extern "C" fn(sys::hsa_signal_t, u32, i64, u64, u32) -> i64;

pub type Writer = Option<unsafe extern "C" fn(*const c_void, u64)>;

pub type Handler = unsafe extern "C" fn(*const c_void, u64, u64, *mut c_void, Writer);

pub type InterceptRegister =
    unsafe extern "C" fn(*mut sys::hsa_queue_t, Option<Handler>, *mut c_void) -> u32;

/// The entries a HIP-like client uses, read from a sim's table.
#[derive(Clone, Copy)]
pub struct Api {
    pub iterate_agents: IterAgents,
    pub agent_get_info: sys::AgentGetInfoFn,
    pub iterate_pools: IterPools,
    pub pool_get_info: sys::PoolGetInfoFn,
    pub pool_allocate: sys::PoolAllocateFn,
    pub pool_free: sys::PoolFreeFn,
    pub pointer_info: sys::PointerInfoFn,
    pub async_copy: sys::AsyncCopyFn,
    pub queue_create: QueueCreate,
    pub intercept_create: QueueCreate,
    pub intercept_register: InterceptRegister,
    pub queue_destroy: QueueDestroy,
    pub load_write_index: QueueIndex,
    pub load_read_index: QueueIndex,
    pub add_write_index: QueueAddIndex,
    pub signal_create: SignalCreate,
    pub signal_destroy: SignalDestroy,
    pub signal_load: sys::SignalLoadFn,
    pub signal_store_screlease: SignalStore,
    pub signal_wait_scacquire: SignalWait,
}

/// Aborts the test process if it runs far longer than it should (a deadlock in the simulator
/// must fail CI, not hang it). Every test starts it through [`api`].
pub fn watchdog() {
    static START: std::sync::Once = std::sync::Once::new();
    START.call_once(|| {
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(120));
            eprintln!("replay-hsa-sim tests: watchdog expired after 120 s, aborting");
            std::process::abort();
        });
    });
}

pub fn api(sim: &SimHsa) -> Api {
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
    pub fn signal(&self, v: i64) -> sys::hsa_signal_t {
        let mut s = sys::hsa_signal_t::default();
        assert_eq!(
            // SAFETY: valid out pointer, no consumers.
            unsafe { (self.signal_create)(v, 0, std::ptr::null(), &mut s) },
            0
        );
        s
    }

    pub fn load(&self, s: sys::hsa_signal_t) -> i64 {
        // SAFETY: a live signal.
        unsafe { (self.signal_load)(s) }
    }

    /// Waits (bounded) until `s == 0`; the value seen.
    pub fn wait_zero(&self, s: sys::hsa_signal_t) -> i64 {
        // SAFETY: a live signal; condition EQ (0); the timeout hint is nanoseconds here.
        unsafe { (self.signal_wait_scacquire)(s, 0, 0, TIMEOUT.as_nanos() as u64, 0) }
    }

    pub fn alloc(&self, pool: sys::hsa_amd_memory_pool_t, size: usize) -> *mut u8 {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out pointer.
        assert_eq!(unsafe { (self.pool_allocate)(pool, size, 0, &mut p) }, 0);
        p.cast()
    }

    pub fn queue(
        &self,
        agent: sys::hsa_agent_t,
        size: u32,
        intercept: bool,
    ) -> *mut sys::hsa_queue_t {
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
    pub fn submit(&self, q: *mut sys::hsa_queue_t, packet: [u8; 64], ring: bool) -> u64 {
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

    pub fn ring(&self, q: *mut sys::hsa_queue_t) {
        // SAFETY: a live queue; the doorbell gets the last write index.
        unsafe {
            let w = (self.load_write_index)(q);
            (self.signal_store_screlease)((*q).doorbell_signal, w as i64 - 1)
        }
    }
}

pub fn dispatch(
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

pub fn barrier_and(deps: &[sys::hsa_signal_t], completion: sys::hsa_signal_t) -> [u8; 64] {
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
pub fn add_kernel(sim: &SimHsa) -> u64 {
    sim.register_kernel("add", |d| {
        let p = d.arg(0)?;
        let v = d.arg(1)?;
        d.atomic_add_u64(p, v)?;
        Ok(())
    })
}

/// A buffer `u64` in the GPU's coarse pool and kernargs `(buffer, add)` in the kernarg pool.
pub fn buffer_and_args(sim: &SimHsa, api: &Api, add: u64) -> (*mut u64, *mut u8) {
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

pub fn read_u64(p: *const u64) -> u64 {
    // SAFETY: a live simulated allocation (host memory) of at least 8 bytes.
    unsafe { std::ptr::read_volatile(p) }
}

pub fn eventually(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < TIMEOUT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
