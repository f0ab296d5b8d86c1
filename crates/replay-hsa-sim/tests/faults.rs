//! Faults through `replay-hsa` on the simulated runtime (SPEC §8), with short policy bounds:
//! each ends with its reason and memory equal to one execution. A process of its own: the
//! backend and the service are process-wide, so the tests of this file run one at a time
//! (`SERIAL`) on one service whose policy bounds are short.

// Not every shared helper is used by every test file.
#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use replay_core::{
    ContextId, NoContextControl, Operation, Phase, Policy, ReplayPayload, ReplayService,
    ReplayTool, Subscription, SystemClock, UserData,
};
use replay_hsa::sys;
use replay_hsa_sim::PoolKind;

use common::*;

/// The policy's drain and pass bounds.
const BOUND: Duration = Duration::from_millis(500);

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
