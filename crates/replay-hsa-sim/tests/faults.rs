//! Faults through `replay-hsa` on the simulated runtime (SPEC §8), with short policy bounds:
//! each ends with its reason and memory equal to one execution (or, for a restore that cannot
//! be repaired, an abort with a message). A process of its own: the backend and the service are
//! process-wide, so the tests of this file run one at a time (`SERIAL`) on one service whose
//! policy bounds are short.
//!
//! The simulator issue's faults (`replay_mock::Fault`), as HSA exposes them:
//!
//! | `replay_mock::Fault`          | here                                                        |
//! |-------------------------------|-------------------------------------------------------------|
//! | `SnapshotOom`                 | both backing pools exhausted → declined `snapshot_failed`   |
//! | `TierOom(Device)`             | device pool exhausted → the snapshot goes to pinned memory  |
//! | `CaptureCopyFail`             | an async copy refused → declined `snapshot_failed`          |
//! | `CaptureCopyStuck`            | copy engine stalled → declined `snapshot_failed`, quarantine|
//! | `QueueDrainStuck`             | a barrier ahead on the queue → declined `queue_drain_stuck` |
//! | `AgentDrainStuck`             | a barrier on another queue → declined `agent_drain_stuck`   |
//! | `CopyFenceStuck`              | an application copy held → declined `copy_fence_stuck`     |
//! | `PassStuck`                   | a pass held → truncated `pass_drain_stuck`                  |
//! | `PassSubmitFail { pass: 1 }`  | `hsa_signal_create` fails → truncated `submit_failed`       |
//! | `RestoreFail` (once / always) | a refused restore copy → retried / abort with a message     |
//! | `DigestFail`                  | `hsa_memory_copy` fails → truncated `scope_check_failed`    |
//! | `IncompleteModuleEnumeration` | loader iteration fails → declined `untracked_memory`        |
//! | `FreeDuringPass`              | the tool frees a region after pass 0 → skipped by restore   |
//! | `ReallocDuringPass`           | freed and reallocated at the same address → skipped         |
//! | `OrdinarySubmitFail`          | not reachable: the interceptor's `writer` cannot fail (a    |
//! |                               | full ring parks packets in the runtime)                     |

// Not every shared helper is used by every test file.
#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use replay_core::{Operation, OutcomeRecord, Phase, Policy, ReplayService, Scope};
use replay_hsa::sys;
use replay_hsa_sim::{FaultMode, PoolKind, SimConfig, SimFault, SimHsa};
use replay_mock::double::{at, ScriptedTool, ToolHook, ToolScript};

use common::*;

/// The policy's drain and pass bounds.
const BOUND: Duration = Duration::from_millis(500);

/// What a test adds to the scripted tool: in PASS EXIT of pass 0 it frees `target` through
/// the wrapped `hsa_amd_memory_pool_free` `func`, once.
#[derive(Default)]
struct FreeAfterPass0 {
    target: AtomicU64,
    func: Mutex<Option<sys::PoolFreeFn>>,
    freed: AtomicU64,
}

impl FreeAfterPass0 {
    fn hook(self: &Arc<Self>) -> ToolHook {
        let me = self.clone();
        at(Operation::Pass, Phase::Exit, move |pass| {
            if pass != 0 {
                return;
            }
            let a = me.target.swap(0, Ordering::SeqCst);
            let free = *me.func.lock().unwrap();
            if let (Some(free), true) = (free, a != 0) {
                // SAFETY: the wrapped free of an allocation the test made.
                assert_eq!(unsafe { free(a as *mut c_void) }, 0);
                me.freed.store(1, Ordering::SeqCst);
            }
        })
    }
}

/// A scripted-tool hook called at every callback with `(operation, phase, pass)`.
fn hook(f: impl Fn(Operation, Phase, u32) + Send + Sync + 'static) -> ToolHook {
    Arc::new(move |op, phase, p, _| f(op, phase, p.current_pass))
}

/// The script every test starts from: a pass-count callback answering 0.
fn no_passes() -> ToolScript {
    ToolScript {
        passes: Some(0),
        ..Default::default()
    }
}

/// The tests' policy: short bounds.
fn policy() -> Policy {
    Policy {
        drain_timeout: BOUND,
        pass_timeout: BOUND,
        // The fault cases capture every tracked region (`auto` would pick `arguments`).
        scope: Scope::All,
        ..Policy::default()
    }
}

struct World {
    service: Arc<ReplayService>,
    tool: Arc<ScriptedTool>,
    free: Arc<FreeAfterPass0>,
}

fn world() -> (&'static World, MutexGuard<'static, ()>) {
    static SERIAL: Mutex<()> = Mutex::new(());
    static WORLD: OnceLock<World> = OnceLock::new();
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = WORLD.get_or_init(|| {
        let tool = ScriptedTool::new(Arc::default(), no_passes());
        let service = install_service(policy(), tool.clone());
        World {
            service,
            tool,
            free: Arc::default(),
        }
    });
    w.tool.reset(no_passes());
    w.service.set_policy(policy()).unwrap();
    w.free.target.store(0, Ordering::SeqCst);
    *w.free.func.lock().unwrap() = None;
    w.free.freed.store(0, Ordering::SeqCst);
    w.tool.add_hook(w.free.hook());
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
    w.tool.set_script(ToolScript {
        passes: Some(3),
        panic_at: Some(("CONFIG ENTER", 0)),
        ..Default::default()
    });
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
    assert_eq!(w.tool.count("PASS EXIT"), 0, "no pass ran");
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
    w.tool.set_passes(Some(3));
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
    assert_eq!(w.tool.count("PASS EXIT"), 0, "no PASS EXIT");
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
    w.tool.set_passes(Some(3));
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
    let free = w.free.clone();
    let (r, sc) = (runs.clone(), scratch as u64);
    let k = sim.register_kernel("rmw-and-scratch", move |d| {
        if free.freed.load(Ordering::SeqCst) == 0 {
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
    w.tool.set_passes(Some(3));
    *w.free.func.lock().unwrap() = Some(api.pool_free);
    w.free.target.store(scratch as u64, Ordering::SeqCst);
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(done), 0, "the completion signal fired once");
    assert_eq!(w.free.freed.load(Ordering::SeqCst), 1, "the tool freed it");
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

// ----- The simulator's faults through the backend ------------------------------------------

/// One application set-up on GPU `gpu`: the `rmw` kernel, a queue, a buffer holding `init`.
struct Case {
    sim: SimHsa,
    api: Api,
    runs: Arc<AtomicU64>,
    kernel: u64,
    queue: *mut sys::hsa_queue_t,
    buf: *mut u64,
    args: *mut u8,
    init: u64,
}

impl Case {
    fn new(gpu: usize, init: u64) -> Self {
        Self::with(SimConfig::default(), gpu, init)
    }

    fn with(config: SimConfig, gpu: usize, init: u64) -> Self {
        let (sim, api) = sim_with(config);
        let runs = Arc::new(AtomicU64::new(0));
        let kernel = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
        let queue = api.queue(sim.gpu_agents()[gpu]);
        let (buf, args) = buffer_and_args(&sim, &api, gpu, init);
        Self {
            sim,
            api,
            runs,
            kernel,
            queue,
            buf,
            args,
            init,
        }
    }

    /// Submits the dispatch; its completion signal.
    fn dispatch(&self) -> sys::hsa_signal_t {
        let done = self.api.signal(1);
        self.api
            .submit(self.queue, dispatch(self.kernel, self.args, done));
        done
    }

    /// [`ends_once`] for this case.
    fn ends_once(&self, done: sys::hsa_signal_t) {
        ends_once(&self.api, done, &self.runs, self.buf, self.init);
    }
}

/// Runs one dispatch of `case` asking for 3 passes; checks it ended once with one declined
/// (or truncated) dispatch of `reason`; the outcome record.
fn expect(w: &World, case: &Case, declined: bool, reason: &str) -> Option<OutcomeRecord> {
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = case.dispatch();
    case.ends_once(done);
    let s = w.service.summary();
    let (now, then) = if declined {
        (&s.declined, &before.declined)
    } else {
        (&s.truncated, &before.truncated)
    };
    assert_eq!(delta(now, then, reason), 1, "{reason}: {s:?}");
    assert_eq!(s.replayed, before.replayed, "not replayed: {s:?}");
    let outcome = w.tool.outcomes().last().cloned();
    if let Some(o) = &outcome {
        assert_eq!(o.reason.as_str(), reason, "{o:?}");
    }
    outcome
}

#[test]
fn snapshot_memory_the_runtime_cannot_allocate_declines_snapshot_failed() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 21);
    let dev = c.sim.inject(
        SimFault::PoolExhausted(PoolKind::DeviceCoarse),
        FaultMode::Always,
    );
    let host = c.sim.inject(
        SimFault::PoolExhausted(PoolKind::HostFine),
        FaultMode::Always,
    );
    let o = expect(w, &c, true, "snapshot_failed").expect("CONFIG EXIT has the outcome");
    assert_eq!(o.captured_bytes, 0, "{o:?}");
    assert!(c.sim.fired("pool_exhausted") >= 2, "both tiers were tried");
    c.sim.clear(dev);
    c.sim.clear(host);
    // The pools work again: the next dispatch is replayed from device backing memory.
    w.tool.set_passes(Some(3));
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(read(c.buf), rmw(rmw(21)));
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert!(o.tier_bytes.device >= 64, "{o:?}");
    w.service.stop().unwrap();
}

#[test]
fn a_device_pool_that_cannot_allocate_leaves_the_snapshot_to_pinned_host_memory() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 20);
    let dev = c.sim.inject(
        SimFault::PoolExhausted(PoolKind::DeviceCoarse),
        FaultMode::Always,
    );
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(read(c.buf), rmw(20), "memory equals one execution");
    assert_eq!(c.runs.load(Ordering::SeqCst), 3);
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
    assert!(
        c.sim.fired("pool_exhausted") >= 1,
        "the device tier was tried first"
    );
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert_eq!(o.tier_bytes.device, 0, "{o:?}");
    assert!(
        o.tier_bytes.pinned >= 64,
        "captured in pinned host memory: {o:?}"
    );
    c.sim.clear(dev);
    w.service.stop().unwrap();
}

#[test]
fn a_device_pool_without_room_places_the_snapshot_in_pinned_host_memory() {
    let (w, _g) = world();
    w.service.start().unwrap();
    // 64 MiB of device memory is less than the headroom the memory layer leaves free.
    let c = Case::with(
        SimConfig {
            device_pool_bytes: 64 << 20,
            ..SimConfig::default()
        },
        1,
        22,
    );
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(read(c.buf), rmw(22), "memory equals one execution");
    assert_eq!(c.runs.load(Ordering::SeqCst), 3);
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert_eq!(o.tier_bytes.device, 0, "{o:?}");
    assert!(
        o.tier_bytes.pinned >= 64,
        "captured in pinned host memory: {o:?}"
    );
    w.service.stop().unwrap();
}

#[test]
fn pinned_backing_the_gpu_cannot_be_given_access_to_declines_snapshot_failed() {
    let (w, _g) = world();
    w.service.start().unwrap();
    // Device memory below the headroom: the snapshot would go to pinned host memory, which
    // the GPU must be allowed to reach; the runtime refuses that.
    let c = Case::with(
        SimConfig {
            device_pool_bytes: 64 << 20,
            ..SimConfig::default()
        },
        0,
        39,
    );
    let f = c.sim.inject(SimFault::AllowAccessFails, FaultMode::Always);
    let info = replay_hsa::backend()
        .agents
        .get(c.sim.gpu_agents()[0].handle, || None);
    let engine = replay_hsa::memory::engine(&info);
    expect(w, &c, true, "snapshot_failed");
    assert!(c.sim.fired("allow_access_fails") >= 1);
    assert_eq!(
        engine.pooled_bytes(),
        0,
        "the refused block was freed, not kept"
    );
    c.sim.clear(f);
    w.service.stop().unwrap();
}

#[test]
fn a_refused_capture_copy_declines_snapshot_failed() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 23);
    c.sim.inject(SimFault::AsyncCopyRefused, FaultMode::Once);
    expect(w, &c, true, "snapshot_failed");
    assert_eq!(c.sim.fired("async_copy_refused"), 1);
    w.service.stop().unwrap();
}

#[test]
fn a_capture_copy_refused_part_way_waits_for_the_copies_already_submitted() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 38);
    // A second region, so the capture is one batch of two copies; the runtime accepts the
    // first and refuses the second, and its copy engine holds the accepted one.
    let other = c.api.alloc(c.sim.pool(0, PoolKind::DeviceCoarse), 4096);
    assert!(!other.is_null());
    let info = replay_hsa::backend()
        .agents
        .get(c.sim.gpu_agents()[0].handle, || None);
    let engine = replay_hsa::memory::engine(&info);
    let stall = c.sim.inject(SimFault::CopyEngineStalled, FaultMode::Always);
    c.sim
        .inject_after(SimFault::AsyncCopyRefused, FaultMode::Once, 1);
    expect(w, &c, true, "snapshot_failed");
    assert_eq!(
        c.sim.fired("async_copy_refused"),
        1,
        "the second copy was refused"
    );
    // The failure is not reported while the accepted copy may still write into the backing:
    // the fence waits for it, gives up at the bound, and the backing is quarantined rather
    // than handed to the next capture.
    assert!(
        engine.quarantined_bytes() > 0,
        "backing an accepted copy may still write is never reused"
    );
    c.sim.clear(stall);
    w.service.stop().unwrap();
}

#[test]
fn a_stuck_capture_copy_declines_snapshot_failed_and_quarantines_its_backing() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 24);
    let agent = c.sim.gpu_agents()[0];
    let info = replay_hsa::backend().agents.get(agent.handle, || None);
    let engine = replay_hsa::memory::engine(&info);
    let stall = c.sim.inject(SimFault::CopyEngineStalled, FaultMode::Always);
    let start = Instant::now();
    expect(w, &c, true, "snapshot_failed");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the capture gave up"
    );
    assert!(
        engine.quarantined_bytes() > 0,
        "backing a stuck copy may still write is never reused"
    );
    c.sim.clear(stall);
    w.service.stop().unwrap();
}

#[test]
fn an_agent_drain_that_does_not_complete_in_time_declines_agent_drain_stuck() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 25);
    // Work on another queue of the same agent waits on an unsignalled dependency.
    let other = c.api.queue(c.sim.gpu_agents()[0]);
    let hold = c.api.signal(1);
    let barrier_done = c.api.signal(1);
    c.api.submit(other, barrier_on(hold, barrier_done));
    expect(w, &c, true, "agent_drain_stuck");
    // SAFETY: a live signal: releases the barrier.
    unsafe { (c.api.signal_store)(hold, 0) };
    assert_eq!(c.api.wait_zero(barrier_done), 0);
    w.service.stop().unwrap();
}

#[test]
fn an_application_copy_that_does_not_finish_in_time_declines_copy_fence_stuck() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 26);
    let agent = c.sim.gpu_agents()[0];
    let src = c.api.alloc(c.sim.pool(0, PoolKind::HostFine), 64);
    let dst = c.api.alloc(c.sim.pool(0, PoolKind::DeviceCoarse), 64);
    let hold = c.api.signal(1);
    let copied = c.api.signal(1);
    c.api.copy_after(agent, dst, src, 64, hold, copied);
    expect(w, &c, true, "copy_fence_stuck");
    assert_eq!(c.api.load(copied), 1, "the copy is still held");
    // SAFETY: a live signal: lets the copy run.
    unsafe { (c.api.signal_store)(hold, 0) };
    assert_eq!(c.api.wait_zero(copied), 0);
    w.service.stop().unwrap();
}

#[test]
fn the_window_waits_for_an_application_copy_in_flight_and_every_pass_sees_its_result() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let agent = sim.gpu_agents()[0];
    let (k, seen) = recording_rmw_kernel(&sim);
    let q = api.queue(agent);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 1);
    // The application copies 77 into the buffer; the copy waits on `hold`, which a thread
    // releases shortly after the dispatch was submitted (well inside the drain bound).
    let src = api.alloc(sim.pool(0, PoolKind::HostFine), 64);
    // SAFETY: a fresh host-visible simulated allocation.
    unsafe { src.cast::<u64>().write_volatile(77) };
    let hold = api.signal(1);
    let copied = api.signal(1);
    api.copy_after(agent, buf.cast(), src, 8, hold, copied);
    let before = w.service.summary();
    dispatch_while_held(w, &api, q, dispatch(k, args, api.signal(1)), hold);
    assert_eq!(
        api.load(copied),
        0,
        "the copy finished before the window captured"
    );
    replayed_on(w, &before, &seen, buf, 77);
    w.service.stop().unwrap();
}

/// Submits `packet` (3 passes asked) while `hold` keeps work the window must wait for from
/// finishing; a thread releases `hold` 100 ms later (well inside the drain bound). Waits for the
/// packet's completion signal.
fn dispatch_while_held(
    w: &World,
    api: &Api,
    q: *mut sys::hsa_queue_t,
    packet: [u8; 64],
    hold: sys::hsa_signal_t,
) {
    let store = api.signal_store;
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: a live signal.
        unsafe { store(hold, 0) };
    });
    w.tool.set_passes(Some(3));
    // The completion signal sits in the packet's last 8 bytes.
    let done = sys::hsa_signal_t {
        handle: u64::from_le_bytes(packet[56..64].try_into().unwrap()),
    };
    api.submit(q, packet);
    releaser.join().unwrap();
    assert_eq!(api.wait_zero(done), 0);
}

/// The dispatch was replayed once, every pass read `input`, and memory holds one execution.
fn replayed_on(
    w: &World,
    before: &replay_core::RunSummary,
    seen: &Mutex<Vec<u64>>,
    buf: *const u64,
    input: u64,
) {
    assert_eq!(*seen.lock().unwrap(), vec![input; 3], "identical inputs");
    assert_eq!(read(buf), rmw(input), "memory equals one execution");
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
}

/// An `rmw` kernel that records the value each execution read.
fn recording_rmw_kernel(sim: &SimHsa) -> (u64, Arc<Mutex<Vec<u64>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let k = sim.register_kernel("rmw-recording", move |d| {
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        s2.lock().unwrap().push(v);
        d.write_u64(p, rmw(v))
    });
    (k, seen)
}

#[test]
fn a_pass_the_runtime_refuses_after_a_restore_truncates_submit_failed_and_runs_once() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 27);
    let inj = c.sim.injector();
    w.tool.add_hook(hook(move |op, phase, pass| {
        if (op, phase, pass) == (Operation::Pass, Phase::Enter, 1) {
            inj.inject(SimFault::SignalCreateFails, FaultMode::Once);
        }
    }));
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(c.api.load(done), 0, "the completion signal fired once");
    let s = w.service.summary();
    assert_eq!(
        delta(&s.truncated, &before.truncated, "submit_failed"),
        1,
        "{s:?}"
    );
    assert_eq!(c.sim.fired("signal_create_fails"), 1);
    // Pass 0, then the ordinary run on restored memory.
    assert_eq!(c.runs.load(Ordering::SeqCst), 2);
    assert_eq!(read(c.buf), rmw(27), "memory equals one execution");
    w.service.stop().unwrap();
}

#[test]
fn a_restore_copy_refused_once_is_retried_and_the_replay_completes() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(1, 28);
    let inj = c.sim.injector();
    w.tool.add_hook(hook(move |op, phase, pass| {
        if (op, phase, pass) == (Operation::Pass, Phase::Exit, 0) {
            inj.inject(SimFault::AsyncCopyRefused, FaultMode::Once);
        }
    }));
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(
        c.sim.fired("async_copy_refused"),
        1,
        "the restore met the fault"
    );
    assert_eq!(c.runs.load(Ordering::SeqCst), 3);
    assert_eq!(read(c.buf), rmw(28), "memory equals one execution");
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
    w.service.stop().unwrap();
}

#[test]
fn a_restore_the_runtime_always_refuses_aborts_with_a_message() {
    if std::env::var_os("KREPLAY_TEST_CHILD_RESTORE").is_some() {
        let (w, _g) = world();
        w.service.start().unwrap();
        let c = Case::new(0, 29);
        let inj = c.sim.injector();
        w.tool.add_hook(hook(move |op, phase, pass| {
            if (op, phase, pass) == (Operation::Pass, Phase::Exit, 0) {
                inj.inject(SimFault::AsyncCopyRefused, FaultMode::Always);
            }
        }));
        w.tool.set_passes(Some(3));
        let done = c.dispatch();
        c.api.wait_zero(done);
        unreachable!("a restore that cannot be repaired must abort");
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_restore_the_runtime_always_refuses_aborts_with_a_message",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KREPLAY_TEST_CHILD_RESTORE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(6), "SIGABRT expected: {stderr}");
    }
    assert!(stderr.contains("FATAL: restore failed"), "{stderr}");
    assert!(stderr.contains("hsa_amd_memory_async_copy"), "{stderr}");
}

#[test]
fn a_failed_scope_check_digest_truncates_scope_check_failed() {
    let (w, _g) = world();
    w.service
        .set_policy(Policy {
            scope: Scope::Arguments,
            ..policy()
        })
        .unwrap();
    w.service.start().unwrap();
    let c = Case::new(0, 30);
    // A tracked region outside the arguments' scope: the check digests it after each pass.
    let outside = c.api.alloc(c.sim.pool(0, PoolKind::DeviceCoarse), 4096);
    assert!(!outside.is_null());
    let inj = c.sim.injector();
    w.tool.add_hook(hook(move |op, phase, pass| {
        if (op, phase, pass) == (Operation::Pass, Phase::Exit, 0) {
            inj.inject(SimFault::MemoryCopyFails, FaultMode::Always);
        }
    }));
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    let s = w.service.summary();
    assert_eq!(
        delta(&s.truncated, &before.truncated, "scope_check_failed"),
        1,
        "{s:?}"
    );
    assert!(c.sim.fired("memory_copy_fails") >= 1);
    // The check failed after pass 0: that pass's results stand, nothing ran again.
    assert_eq!(c.runs.load(Ordering::SeqCst), 1);
    assert_eq!(read(c.buf), rmw(30), "memory equals one execution");
    w.service.stop().unwrap();
}

#[test]
fn a_module_enumeration_that_fails_declines_untracked_memory() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 31);
    let f = c
        .sim
        .inject(SimFault::LoaderIterationFails, FaultMode::Always);
    expect(w, &c, true, "untracked_memory");
    c.sim.clear(f);
    w.service.stop().unwrap();
}

#[test]
fn a_region_reallocated_at_the_same_address_during_a_pass_is_not_restored() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 32);
    let pool = c.sim.pool(0, PoolKind::DeviceCoarse);
    let old = c.api.alloc(pool, 4096);
    // SAFETY: a fresh host-visible simulated allocation.
    unsafe { old.cast::<u64>().write_volatile(5) };
    let (free, alloc) = (c.api.pool_free, c.api.pool_allocate);
    let again = Arc::new(AtomicU64::new(0));
    let a2 = again.clone();
    let old_addr = old as u64;
    w.tool.add_hook(hook(move |op, phase, pass| {
        if (op, phase, pass) == (Operation::Pass, Phase::Exit, 0) {
            let mut p = std::ptr::null_mut();
            // SAFETY: the wrapped free and allocate of the application's entries; the new
            // block is written as the application's new data.
            unsafe {
                assert_eq!(free(old_addr as *mut c_void), 0);
                assert_eq!(alloc(pool, 4096, 0, &mut p), 0);
                p.cast::<u64>().write_volatile(0xdead);
            }
            a2.store(p as u64, Ordering::SeqCst);
        }
    }));
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(
        again.load(Ordering::SeqCst),
        old_addr,
        "the runtime reused the address (what this test is about)"
    );
    assert_eq!(
        read(old.cast()),
        0xdead,
        "the new allocation's data was not overwritten"
    );
    assert_eq!(read(c.buf), rmw(32), "memory equals one execution");
    assert_eq!(c.runs.load(Ordering::SeqCst), 3);
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
    w.service.stop().unwrap();
}

#[test]
fn timeouts_follow_the_runtimes_timestamp_frequency() {
    // At 1 kHz a hint in nanoseconds would be a million times too long: the 500 ms pass bound
    // would become days, and this test would hang instead of truncating.
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::with(
        SimConfig {
            timestamp_hz: 1_000,
            ..SimConfig::default()
        },
        0,
        33,
    );
    let gate = c.api.signal(1);
    let first = Arc::new(AtomicU64::new(1));
    let (r, f) = (c.runs.clone(), first.clone());
    let k = c.sim.register_kernel("stalls-once-khz", move |d| {
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
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.api.signal(1);
    let start = Instant::now();
    c.api.submit(c.queue, dispatch(k, c.args, done));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the pass bound held"
    );
    let s = w.service.summary();
    assert_eq!(
        delta(&s.truncated, &before.truncated, "pass_drain_stuck"),
        1,
        "{s:?}"
    );
    // SAFETY: a live signal: releases the stalled pass.
    unsafe { (c.api.signal_store)(gate, 0) };
    c.ends_once(done);
    w.service.stop().unwrap();
}

#[test]
fn dispatches_carry_the_kernel_symbols_name() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let r = runs.clone();
    let body: replay_hsa_sim::KernelFn = Arc::new(move |d| {
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    let exec = sim.load_module(0, &[], &[("_Z3rmwPm.kd", body)]);
    let object = sim
        .kernel_object("_Z3rmwPm.kd")
        .expect("the module's kernel");
    let q = api.queue(sim.gpu_agents()[0]);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 34);
    w.tool.set_passes(Some(2));
    let done = api.signal(1);
    api.submit(q, dispatch(object, args, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read(buf), rmw(34));
    assert_eq!(w.tool.config_kernels(), vec!["_Z3rmwPm".to_owned()]);
    // The kernel filter matches that name: excluded, the next dispatch is not replayed.
    w.service
        .set_policy(Policy {
            filter: replay_core::filter::KernelFilter {
                exclude: vec!["_Z3rmw*".into()],
                ..Default::default()
            },
            ..policy()
        })
        .unwrap();
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(object, args, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read(buf), rmw(rmw(34)));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "two passes, then one ordinary run"
    );
    assert_eq!(w.service.summary().replayed, before.replayed);
    // Destroying the executable through the (wrapped) entry forgets its kernels, whose
    // kernel-object addresses a later executable may reuse.
    let state: serde_json::Value =
        serde_json::from_str(&replay_hsa::backend().state_json()).unwrap();
    assert!(
        state["installed"]["wrapped"]
            .as_array()
            .unwrap()
            .contains(&"hsa_executable_destroy".into()),
        "{state}"
    );
    assert!(replay_hsa::kernels::global().knows(object));
    // SAFETY: the core table's entry as its C signature.
    let destroy: sys::ExecutableDestroyFn = unsafe { typed(sim.core().hsa_executable_destroy_fn) };
    // SAFETY: the executable loaded above, idle.
    assert_eq!(unsafe { destroy(exec) }, 0);
    assert!(!replay_hsa::kernels::global().knows(object), "forgotten");
    assert_eq!(
        sim.kernel_object("_Z3rmwPm.kd"),
        None,
        "the runtime destroyed it too"
    );
    w.service.stop().unwrap();
}

#[test]
fn the_window_waits_for_work_on_the_agents_other_queues() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let agent = sim.gpu_agents()[0];
    let (k, seen) = recording_rmw_kernel(&sim);
    let set = sim.register_kernel("set-50", |d| {
        let p = d.arg(0)?;
        d.write_u64(p, 50)
    });
    let (buf, args) = buffer_and_args(&sim, &api, 0, 1);
    // Another queue of the agent: a barrier held until shortly after the dispatch was
    // submitted, then a kernel that sets the buffer to 50.
    let other = api.queue(agent);
    let hold = api.signal(1);
    api.submit(other, barrier_on(hold, sys::hsa_signal_t::default()));
    let set_done = api.signal(1);
    api.submit(other, dispatch(set, args, set_done));
    let q = api.queue(agent);
    let before = w.service.summary();
    dispatch_while_held(w, &api, q, dispatch(k, args, api.signal(1)), hold);
    assert_eq!(
        api.load(set_done),
        0,
        "the other queue's work finished first"
    );
    replayed_on(w, &before, &seen, buf, 50);
    w.service.stop().unwrap();
}

#[test]
fn host_digests_restore_only_the_chunks_a_pass_changed_and_check_the_scope_in_slices() {
    let (w, _g) = world();
    w.service
        .set_policy(Policy {
            scope: Scope::Arguments,
            restore: replay_core::RestoreMode::Dirty,
            ..policy()
        })
        .unwrap();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    // 8 MiB argument buffer (more than one 4 MiB staging slice); the kernel changes its
    // first word only. A 9 MiB region outside the scope is digested by the scope check.
    let mib = 1usize << 20;
    let buf = api
        .alloc(sim.pool(0, PoolKind::DeviceCoarse), 8 * mib)
        .cast::<u64>();
    let outside = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 9 * mib);
    let args = api.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    // SAFETY: fresh host-visible simulated allocations.
    unsafe {
        buf.write_volatile(35);
        outside.write_bytes(7, 9 * mib);
        args.cast::<u64>().write(buf as u64);
    }
    let q = api.queue(sim.gpu_agents()[0]);
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read(buf), rmw(35), "memory equals one execution");
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert_eq!(
        o.captured_bytes,
        8 * mib as u64,
        "the arguments' region only: {o:?}"
    );
    assert_eq!(
        o.pass_restored_bytes.as_slice(),
        &[0, mib as u64, mib as u64],
        "one changed 1 MiB chunk restored before each later pass: {o:?}"
    );
    assert_eq!(
        o.pass_compared_bytes.as_slice(),
        &[0, 8 * mib as u64, 8 * mib as u64],
        "the captured chunks were compared before each later pass: {o:?}"
    );
    // A kernel that also writes the outside region's last slice (past the first 4 MiB
    // staging slice): the scope check after pass 0 must see it.
    let r = runs.clone();
    let far = outside as u64 + 9 * mib as u64 - 8;
    let k2 = sim.register_kernel("rmw-and-outside", move |d| {
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        d.write_u64(far, v)?;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    runs.store(0, Ordering::SeqCst);
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(k2, args, done));
    assert_eq!(api.wait_zero(done), 0);
    let s = w.service.summary();
    assert_eq!(
        delta(&s.truncated, &before.truncated, "write_outside_scope"),
        1,
        "{s:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "nothing ran after the offending pass"
    );
    assert_eq!(read(buf), rmw(rmw(35)), "memory equals one execution");
    assert_eq!(read(far as *const u64), rmw(35));
    w.service.stop().unwrap();
}

#[test]
fn device_memory_another_process_uses_is_left_to_it() {
    let (w, _g) = world();
    w.service.start().unwrap();
    // A GPU whose 1 GiB coarse pool is mostly used by another process: the device tier sees
    // what is free (HSA_AMD_AGENT_INFO_MEMORY_AVAIL, 200 MiB, less than the 10% + 256 MiB the
    // memory layer leaves to the application), not the pool's size.
    let c = Case::with(
        SimConfig {
            device_pool_bytes: 1 << 30,
            device_reserved_bytes: 824 << 20,
            ..SimConfig::default()
        },
        0,
        36,
    );
    w.tool.set_passes(Some(3));
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(read(c.buf), rmw(36));
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert_eq!(o.tier_bytes.device, 0, "no device memory taken: {o:?}");
    assert!(o.tier_bytes.pinned >= 64, "{o:?}");
    w.service.stop().unwrap();
}

#[test]
fn pooled_backing_memory_yields_to_an_application_allocation() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let mib = 1usize << 20;
    let c = Case::new(0, 37);
    let agent = c.sim.gpu_agents()[0];
    let info = replay_hsa::backend().agents.get(agent.handle, || None);
    let engine = replay_hsa::memory::engine(&info);
    // A snapshot of a 32 MiB buffer stays pooled in device memory after its window (small
    // enough that its simulated copies finish well inside the bound on a loaded machine)...
    let coarse = c.sim.pool(0, PoolKind::DeviceCoarse);
    let big = c.api.alloc(coarse, 32 * mib).cast::<u64>();
    // SAFETY: a fresh host-visible simulated allocation.
    unsafe { big.write_volatile(37) };
    let args = c.api.alloc(c.sim.pool(0, PoolKind::Kernarg), 64);
    // SAFETY: as above.
    unsafe { args.cast::<u64>().write(big as u64) };
    w.tool.set_passes(Some(3));
    let done = c.api.signal(1);
    c.api.submit(c.queue, dispatch(c.kernel, args, done));
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(read(big), rmw(37));
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert!(o.tier_bytes.device >= 32 * mib as u64, "{o:?}");
    let pooled = engine.pooled_bytes();
    assert!(
        pooled >= 32 * mib as u64,
        "the backing stays pooled: {pooled}"
    );
    // ...and the application then asks for all the rest of the 1 GiB pool: it gets it,
    // because the pooled backing memory is released for it.
    let rest = 1024 - 32 - 1;
    let all_else = c.api.alloc(coarse, rest * mib);
    assert!(!all_else.is_null());
    assert!(
        engine.pooled_bytes() < pooled,
        "pooled backing memory was released for the application"
    );
    c.api.free(all_else);
    w.service.stop().unwrap();
}
