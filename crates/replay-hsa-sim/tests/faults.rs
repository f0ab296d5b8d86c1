//! Faults through `replay-hsa` on the simulated runtime (SPEC §8), with short policy bounds:
//! each ends with its reason and memory equal to one execution. A process of its own: the
//! backend and the service are process-wide, so the tests of this file run one at a time
//! (`SERIAL`) on one service whose policy bounds are short.

// Helpers shared in shape with `replay.rs`; not every one is used here.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use replay_core::{
    ContextId, NoContextControl, Operation, Phase, Policy, ReplayPayload, ReplayService,
    ReplayTool, Subscription, SystemClock, UserData,
};
use replay_hsa::queue as aql;
use replay_hsa::sys::{self, Entry};
use replay_hsa_sim::{PoolKind, SimConfig, SimHsa};

const TIMEOUT: Duration = Duration::from_secs(20);
/// The policy's drain and pass bounds.
const BOUND: Duration = Duration::from_millis(500);

/// A table slot as the entry's C type.
///
/// # Safety
///
/// 1. `F` is the entry's C signature and `S` a nullable function pointer field.
unsafe fn typed<S: Copy, F: Copy>(slot: S) -> F {
    assert_eq!(std::mem::size_of::<S>(), std::mem::size_of::<Entry>());
    // SAFETY: same size; a nullable function pointer (caller, item 1).
    let e: Entry = unsafe { std::mem::transmute_copy(&slot) };
    let f = e.expect("no entry is NULL");
    // SAFETY: same size; `F` is the entry's signature (caller, item 1).
    unsafe { std::mem::transmute_copy(&f) }
}

/// What the tool does besides asking for `passes` passes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    /// Panics in CONFIG ENTER (before the first pass).
    PanicInConfig,
    /// Frees `free_target` through the wrapped `hsa_amd_memory_pool_free` in PASS EXIT of
    /// pass 0.
    FreeAfterPass0,
}

struct Tool {
    passes: AtomicU64,
    mode: Mutex<Mode>,
    free_target: AtomicU64,
    free_fn: Mutex<Option<sys::PoolFreeFn>>,
    freed: AtomicU64,
    pass_exits: AtomicU64,
}

impl ReplayTool for Tool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        let mode = *self.mode.lock().unwrap();
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                if mode == Mode::PanicInConfig {
                    panic!("the tool fails before the first pass");
                }
                let n = self.passes.load(Ordering::SeqCst);
                p.replay_pass_count = Some(Arc::new(move |_, _| n));
            }
            (Operation::Pass, Phase::Exit) => {
                self.pass_exits.fetch_add(1, Ordering::SeqCst);
                if mode == Mode::FreeAfterPass0 && p.current_pass == 0 {
                    let a = self.free_target.swap(0, Ordering::SeqCst);
                    let free = *self.free_fn.lock().unwrap();
                    if let (Some(free), true) = (free, a != 0) {
                        // SAFETY: the wrapped free of an allocation the test made.
                        assert_eq!(unsafe { free(a as *mut c_void) }, 0);
                        self.freed.store(1, Ordering::SeqCst);
                    }
                }
            }
            _ => {}
        }
    }
}

struct World {
    service: Arc<ReplayService>,
    tool: Arc<Tool>,
}

fn world() -> (&'static World, MutexGuard<'static, ()>) {
    static SERIAL: Mutex<()> = Mutex::new(());
    static WORLD: OnceLock<World> = OnceLock::new();
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = WORLD.get_or_init(|| {
        let policy = Policy {
            drain_timeout: BOUND,
            pass_timeout: BOUND,
            ..Policy::default()
        };
        let service = Arc::new(ReplayService::new(
            policy,
            Arc::new(SystemClock::new()),
            Arc::new(NoContextControl),
        ));
        let tool = Arc::new(Tool {
            passes: AtomicU64::new(0),
            mode: Mutex::new(Mode::Plain),
            free_target: AtomicU64::new(0),
            free_fn: Mutex::new(None),
            freed: AtomicU64::new(0),
            pass_exits: AtomicU64::new(0),
        });
        service
            .configure(
                ContextId(1),
                Subscription::CONFIG | Subscription::PASS,
                tool.clone() as Arc<dyn ReplayTool>,
            )
            .unwrap();
        replay_hsa::set_service(service.clone());
        World { service, tool }
    });
    w.tool.passes.store(0, Ordering::SeqCst);
    *w.tool.mode.lock().unwrap() = Mode::Plain;
    w.tool.free_target.store(0, Ordering::SeqCst);
    w.tool.freed.store(0, Ordering::SeqCst);
    w.tool.pass_exits.store(0, Ordering::SeqCst);
    (w, guard)
}

/// `after - before` of a per-reason count.
fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>, reason: &str) -> u64 {
    after.get(reason).copied().unwrap_or(0) - before.get(reason).copied().unwrap_or(0)
}

type QueueCreate = sys::QueueCreateFn;

#[derive(Clone, Copy)]
struct Api {
    pool_allocate: sys::PoolAllocateFn,
    queue_create: QueueCreate,
    queue_destroy: sys::QueueDestroyFn,
    load_write_index: sys::QueueLoadIndexFn,
    add_write_index: sys::QueueAddIndexFn,
    signal_create: sys::SignalCreateFn,
    signal_load: sys::SignalLoadFn,
    signal_store: sys::SignalUpdateFn,
    signal_wait: sys::SignalWaitFn,
    async_function: sys::AsyncFunctionFn,
    pool_free: sys::PoolFreeFn,
}

/// A fresh sim with `OnLoad` installed, and the client's entries read from its table after.
fn sim() -> (SimHsa, Api) {
    let mut sim = SimHsa::new(SimConfig::default());
    // SAFETY: the sim's table, alive, not used by other threads during the call.
    let ok = unsafe { replay_hsa::on_load(sim.table().cast(), 1, 0, std::ptr::null()) };
    assert!(ok, "{}", replay_hsa::backend().state_json());
    let c = sim.core();
    let a = sim.amd();
    // SAFETY: each entry is read as its C signature.
    let api = unsafe {
        Api {
            pool_allocate: typed(a.hsa_amd_memory_pool_allocate_fn),
            queue_create: typed(c.hsa_queue_create_fn),
            queue_destroy: typed(c.hsa_queue_destroy_fn),
            load_write_index: typed(c.hsa_queue_load_write_index_relaxed_fn),
            add_write_index: typed(c.hsa_queue_add_write_index_screlease_fn),
            signal_create: typed(c.hsa_signal_create_fn),
            signal_load: typed(c.hsa_signal_load_relaxed_fn),
            signal_store: typed(c.hsa_signal_store_screlease_fn),
            signal_wait: typed(c.hsa_signal_wait_scacquire_fn),
            async_function: typed(a.hsa_amd_async_function_fn),
            pool_free: typed(a.hsa_amd_memory_pool_free_fn),
        }
    };
    (sim, api)
}

impl Api {
    fn signal(&self, v: i64) -> sys::hsa_signal_t {
        let mut s = sys::hsa_signal_t::default();
        // SAFETY: valid out pointer, no consumers.
        let st = unsafe { (self.signal_create)(v, 0, std::ptr::null(), &mut s) };
        assert_eq!(st, 0);
        s
    }

    fn load(&self, s: sys::hsa_signal_t) -> i64 {
        // SAFETY: a live signal.
        unsafe { (self.signal_load)(s) }
    }

    fn wait_zero(&self, s: sys::hsa_signal_t) -> i64 {
        // SAFETY: a live signal; EQ 0; the timeout hint is nanoseconds on the sim.
        unsafe { (self.signal_wait)(s, 0, 0, TIMEOUT.as_nanos() as u64, 0) }
    }

    fn alloc(&self, pool: sys::hsa_amd_memory_pool_t, size: usize) -> *mut u8 {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out pointer.
        assert_eq!(unsafe { (self.pool_allocate)(pool, size, 0, &mut p) }, 0);
        p.cast()
    }

    fn queue(&self, agent: sys::hsa_agent_t) -> *mut sys::hsa_queue_t {
        self.queue_of(agent, 64)
    }

    fn queue_of(&self, agent: sys::hsa_agent_t, size: u32) -> *mut sys::hsa_queue_t {
        let mut q = std::ptr::null_mut();
        // SAFETY: valid out pointer; no callback.
        let st = unsafe {
            (self.queue_create)(agent, size, 0, None, std::ptr::null_mut(), 0, 0, &mut q)
        };
        assert_eq!(st, 0);
        q
    }

    /// Writes `packet` at the next write index (header last, release) and rings the doorbell.
    fn submit(&self, q: *mut sys::hsa_queue_t, packet: [u8; 64]) {
        // SAFETY: a live queue; the slot is ours until the header is published.
        unsafe {
            let idx = (self.add_write_index)(q, 1);
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
            let w = (self.load_write_index)(q);
            (self.signal_store)(qs.doorbell_signal, w as i64 - 1);
        }
    }
}

fn dispatch(kernel: u64, kernarg: *mut u8, completion: sys::hsa_signal_t) -> [u8; 64] {
    let p = sys::hsa_kernel_dispatch_packet_t {
        header: aql::header(sys::HSA_PACKET_TYPE_KERNEL_DISPATCH, true, 1, 1),
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

/// `x = 3x + 1` on the `u64` at `arg0` (read-modify-write: a replay that does not restore
/// shows).
fn rmw(x: u64) -> u64 {
    x.wrapping_mul(3).wrapping_add(1)
}

fn rmw_kernel(sim: &SimHsa, runs: Arc<AtomicU64>, delay: Duration) -> u64 {
    sim.register_kernel("rmw", move |d| {
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        std::thread::sleep(delay);
        d.write_u64(p, rmw(v))?;
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
}

/// A coarse device buffer holding `init` and kernargs `(buffer)` on GPU `gpu`.
fn buffer_and_args(sim: &SimHsa, api: &Api, gpu: usize, init: u64) -> (*mut u64, *mut u8) {
    let buf = api
        .alloc(sim.pool(gpu, PoolKind::DeviceCoarse), 64)
        .cast::<u64>();
    let args = api.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    // SAFETY: fresh host-visible simulated allocations.
    unsafe {
        buf.write_volatile(init);
        args.cast::<u64>().write(buf as u64);
    }
    (buf, args)
}

fn read(p: *const u64) -> u64 {
    // SAFETY: a live simulated allocation.
    unsafe { std::ptr::read_volatile(p) }
}

fn barrier_on(dep: sys::hsa_signal_t, completion: sys::hsa_signal_t) -> [u8; 64] {
    let mut p = sys::hsa_barrier_and_packet_t {
        header: aql::header(sys::HSA_PACKET_TYPE_BARRIER_AND, true, 2, 2),
        completion_signal: completion,
        ..Default::default()
    };
    p.dep_signal[0] = dep;
    // SAFETY: a 64-byte plain-integer struct.
    unsafe { std::mem::transmute::<sys::hsa_barrier_and_packet_t, [u8; 64]>(p) }
}

// TESTS
/// Waits (bounded) until `done` is 0, then checks it stays 0, the kernel ran once and the
/// buffer holds one execution.
fn ends_once(api: &Api, done: sys::hsa_signal_t, runs: &AtomicU64, buf: *const u64, init: u64) {
    assert_eq!(api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(done), 0, "the completion signal fired once");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the dispatch ran once");
    assert_eq!(read(buf), rmw(init), "memory equals one execution");
}

#[test]
fn a_tool_panicking_before_the_first_pass_declines_callback_failed() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let q = api.queue(sim.gpu_agents()[0]);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 6);
    w.tool.passes.store(3, Ordering::SeqCst);
    *w.tool.mode.lock().unwrap() = Mode::PanicInConfig;
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    ends_once(&api, done, &runs, buf, 6);
    let s = w.service.summary();
    assert_eq!(
        delta(&s.declined, &before.declined, "callback_failed"),
        1,
        "{s:?}"
    );
    assert_eq!(s.replayed, before.replayed);
    assert_eq!(w.tool.pass_exits.load(Ordering::SeqCst), 0, "no pass ran");
    w.service.stop().unwrap();
}

#[test]
fn a_pass_that_does_not_complete_in_time_truncates_pass_drain_stuck() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    // The first execution waits on `gate`, which the test releases after the window ended.
    let gate = api.signal(1);
    let first = Arc::new(AtomicU64::new(1));
    let (r, f) = (runs.clone(), first.clone());
    let k = sim.register_kernel("stalls-once", move |d| {
        if f.swap(0, Ordering::SeqCst) == 1 {
            let g = replay_hsa_sim::state::signal(gate.handle).expect("a live signal");
            g.wait(|v| v == 0, Some(TIMEOUT));
        }
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    let q = api.queue(sim.gpu_agents()[0]);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 8);
    w.tool.passes.store(3, Ordering::SeqCst);
    let before = w.service.summary();
    let done = api.signal(1);
    let start = Instant::now();
    api.submit(q, dispatch(k, args, done));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the window gave up after the pass bound"
    );
    let s = w.service.summary();
    assert_eq!(
        delta(&s.truncated, &before.truncated, "pass_drain_stuck"),
        1,
        "{s:?}"
    );
    assert_eq!(w.tool.pass_exits.load(Ordering::SeqCst), 0, "no PASS EXIT");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(api.load(done), 1, "no completion before the pass finished");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // SAFETY: a live signal: releases the stalled pass.
    unsafe { (api.signal_store)(gate, 0) };
    ends_once(&api, done, &runs, buf, 8);
    w.service.stop().unwrap();
}

#[test]
fn a_queue_drain_that_does_not_complete_in_time_declines_queue_drain_stuck() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let q = api.queue(sim.gpu_agents()[1]);
    let (buf, args) = buffer_and_args(&sim, &api, 1, 9);
    // A barrier-AND ahead in the same queue waits on an unsignalled dependency.
    let hold = api.signal(1);
    let barrier_done = api.signal(1);
    api.submit(q, barrier_on(hold, barrier_done));
    w.tool.passes.store(3, Ordering::SeqCst);
    let before = w.service.summary();
    let done = api.signal(1);
    let start = Instant::now();
    api.submit(q, dispatch(k, args, done));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the window gave up after the drain bound"
    );
    let s = w.service.summary();
    assert_eq!(
        delta(&s.declined, &before.declined, "queue_drain_stuck"),
        1,
        "{s:?}"
    );
    assert_eq!(s.replayed, before.replayed);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "still behind the barrier");
    // SAFETY: a live signal: releases the barrier.
    unsafe { (api.signal_store)(hold, 0) };
    assert_eq!(api.wait_zero(barrier_done), 0);
    ends_once(&api, done, &runs, buf, 9);
    w.service.stop().unwrap();
}

#[test]
fn a_region_freed_by_the_tool_after_pass_0_is_skipped_by_restore() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let gpu = 0;
    let (buf, args) = buffer_and_args(&sim, &api, gpu, 11);
    // A second region the kernel writes while it is alive (the kernel skips it once freed).
    let scratch = api
        .alloc(sim.pool(gpu, PoolKind::DeviceCoarse), 4096)
        .cast::<u64>();
    // SAFETY: a fresh host-visible simulated allocation.
    unsafe { scratch.write_volatile(1) };
    let tool = w.tool.clone();
    let (r, sc) = (runs.clone(), scratch as u64);
    let k = sim.register_kernel("rmw-and-scratch", move |d| {
        if tool.freed.load(Ordering::SeqCst) == 0 {
            let v = d.read_u64(sc)?;
            d.write_u64(sc, v + 1)?;
        }
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    let q = api.queue(sim.gpu_agents()[gpu]);
    w.tool.passes.store(3, Ordering::SeqCst);
    *w.tool.mode.lock().unwrap() = Mode::FreeAfterPass0;
    *w.tool.free_fn.lock().unwrap() = Some(api.pool_free);
    w.tool.free_target.store(scratch as u64, Ordering::SeqCst);
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(done), 0, "the completion signal fired once");
    assert_eq!(w.tool.freed.load(Ordering::SeqCst), 1, "the tool freed it");
    assert_eq!(runs.load(Ordering::SeqCst), 3, "three passes ran");
    assert_eq!(read(buf), rmw(11), "memory equals one execution");
    assert!(sim.faults().is_empty(), "{:?}", sim.faults());
    let s = w.service.summary();
    assert_eq!(
        s.replayed - before.replayed,
        1,
        "the window completed: {s:?}"
    );
    w.service.stop().unwrap();
}
