//! The HSA interceptor's threading (SPEC §9.1, issue 11 items 5, 8–13) on the simulated
//! runtime: what reaches the interceptor while a window runs, from which thread, in which order,
//! and what the window may wait for.
//!
//! The backend and the service are process-wide, so the tests of this file run one at a time
//! (`SERIAL`) and share one scripted tool (`replay_mock::double`) whose behaviour each test sets.

// Not every shared helper is used by every test file.
#[allow(dead_code)]
mod common;

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use replay_core::{KernelId, Operation, Outcome, Phase, Policy, Reason, ReplayService};
use replay_hsa::sys;
use replay_mock::double::{at, ScriptedTool, ToolScript};

use common::*;

/// What the scripted tool saw of `kernel`: the outcome and reason of each CONFIG EXIT.
fn outcomes(tool: &ScriptedTool, kernel: u64) -> Vec<(Outcome, Reason)> {
    tool.outcomes_of(KernelId(kernel))
        .iter()
        .map(|r| (r.outcome, r.reason))
        .collect()
}

/// The script every test starts from: one pass (no replay) for every kernel unless a test
/// sets its own.
fn one_pass() -> ToolScript {
    ToolScript {
        passes: Some(1),
        ..Default::default()
    }
}

struct World {
    service: Arc<ReplayService>,
    /// Passes per kernel object, hooks per callback (`replay_mock::double::at`).
    tool: Arc<ScriptedTool>,
}

fn policy() -> Policy {
    Policy {
        drain_timeout: Duration::from_secs(3),
        pass_timeout: Duration::from_secs(3),
        ..Policy::default()
    }
}

fn world() -> (&'static World, MutexGuard<'static, ()>) {
    static SERIAL: Mutex<()> = Mutex::new(());
    static WORLD: OnceLock<World> = OnceLock::new();
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = WORLD.get_or_init(|| {
        let _ = log::set_logger(&PanicLogger);
        log::set_max_level(log::LevelFilter::Warn);
        let tool = ScriptedTool::new(Arc::default(), one_pass());
        let service = install_service(policy(), tool.clone());
        World { service, tool }
    });
    w.service.set_policy(policy()).unwrap();
    w.tool.reset(one_pass());
    *PANIC_ON.lock().unwrap() = None;
    w.service.start().unwrap();
    (w, guard)
}

/// A log line containing this text panics (once): a backend fault in the middle of a window.
static PANIC_ON: Mutex<Option<String>> = Mutex::new(None);

/// Every warning logged, for tests that check what the backend said.
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct PanicLogger;

impl log::Log for PanicLogger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        let line = r.args().to_string();
        eprintln!("{line}");
        LINES.lock().unwrap().push(line.clone());
        let hit = {
            let mut p = PANIC_ON.lock().unwrap();
            let hit = p.as_deref().is_some_and(|t| line.contains(t));
            if hit {
                *p = None;
            }
            hit
        };
        if hit {
            panic!("injected backend fault at: {line}");
        }
    }
    fn flush(&self) {}
}

/// Polls `cond` for at most 5 s; whether it held.
fn eventually(cond: impl Fn() -> bool) -> bool {
    within(Duration::from_secs(5), cond)
}

/// Polls `cond` for at most `bound`; whether it held.
fn within(bound: Duration, cond: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < bound {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}

fn parked(q: *mut sys::hsa_queue_t) -> usize {
    replay_hsa::intercept::state_of(q).map_or(0, |s| s.parked())
}

/// A queue address that crosses threads.
#[derive(Clone, Copy)]
struct Q(usize);

impl Q {
    fn new(q: *mut sys::hsa_queue_t) -> Self {
        Self(q as usize)
    }
    fn get(self) -> *mut sys::hsa_queue_t {
        self.0 as *mut sys::hsa_queue_t
    }
}

/// Packets an async function submits on the runtime's async-events thread.
struct Forward {
    api: Api,
    queue: Q,
    packets: Vec<[u8; 64]>,
}

unsafe extern "C" fn forward(arg: *mut c_void) {
    // SAFETY: a `Forward` leaked by `on_async_thread` for this call.
    let f = unsafe { Box::from_raw(arg.cast::<Forward>()) };
    f.api.submit_many(f.queue.get(), &f.packets);
}

/// Submits `packets` on `queue` from the runtime's async-events thread (as a completion
/// handler of the application would), without waiting.
fn on_async_thread(api: Api, queue: Q, packets: Vec<[u8; 64]>) {
    let f = Box::into_raw(Box::new(Forward {
        api,
        queue,
        packets,
    }));
    // SAFETY: `forward` has the async function's signature and takes ownership of `f`.
    assert_eq!(unsafe { (api.async_function)(Some(forward), f.cast()) }, 0);
}

static GO: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn hold_async_thread(_: *mut c_void) {
    let start = Instant::now();
    while GO.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A kernel that applies `rmw` to the `u64` at its first argument and counts its runs; on its
/// first run it calls `first` (a pass of the window under test) before writing.
fn kernel_with(
    sim: &replay_hsa_sim::SimHsa,
    name: &str,
    runs: Arc<AtomicU64>,
    first: impl Fn() + Send + Sync + 'static,
) -> u64 {
    sim.register_kernel(name, move |d| {
        if runs.load(Ordering::SeqCst) == 0 {
            first();
        }
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
}

/// Item 5: a submission of several packets during a window holds the reader side, so the
/// window's restore never undoes it: it waits, parked, and runs after the window.
#[test]
fn a_multi_packet_submission_during_a_window_runs_after_it_and_is_not_undone() {
    let (w, _g) = world();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[0];
    let qa = api.queue(gpu);
    let qb = Q::new(api.queue(gpu));
    // The runtime hands interceptors one packet per call; an interceptor above the backend's
    // hands it the two of the batch in one.
    batch_above(&sim, qb.get(), 2);
    let b_runs = Arc::new(AtomicU64::new(0));
    let kb = rmw_kernel(&sim, b_runs.clone(), Duration::ZERO);
    let in_window = Arc::new(AtomicU64::new(0));
    let a_runs = Arc::new(AtomicU64::new(0));
    let ka = {
        let (iw, br) = (in_window.clone(), b_runs.clone());
        kernel_with(&sim, "a", a_runs.clone(), move || {
            iw.store(1, Ordering::SeqCst);
            // Pass 0 lasts until the batch ran (unlocked) or was parked.
            eventually(|| br.load(Ordering::SeqCst) > 0 || parked(qb.get()) > 0);
        })
    };
    let (buf_a, args_a) = buffer_and_args(&sim, &api, 0, 1);
    let (b1, a1) = buffer_and_args(&sim, &api, 0, 10);
    let (b2, a2) = buffer_and_args(&sim, &api, 0, 20);
    w.tool.set_kernel_passes(ka, 3);
    let (d1, d2) = (api.signal(1), api.signal(1));
    let batch = vec![dispatch(kb, a1, d1), dispatch(kb, a2, d2)];
    let submitter = {
        let iw = in_window.clone();
        std::thread::spawn(move || {
            assert!(eventually(|| iw.load(Ordering::SeqCst) == 1));
            api.submit_many(qb.get(), &batch);
        })
    };
    let done = api.signal(1);
    api.submit(qa, dispatch(ka, args_a, done));
    assert_eq!(api.wait_zero(done), 0);
    submitter.join().unwrap();
    assert_eq!(api.wait_zero(d1), 0);
    assert_eq!(api.wait_zero(d2), 0);
    assert_eq!(
        outcomes(&w.tool, ka),
        vec![(Outcome::Replayed, Reason::None)]
    );
    assert_eq!(a_runs.load(Ordering::SeqCst), 3);
    assert_eq!(read(buf_a), rmw(1));
    assert_eq!(b_runs.load(Ordering::SeqCst), 2, "each packet ran once");
    assert_eq!(
        (read(b1), read(b2)),
        (rmw(10), rmw(20)),
        "the batch's writes survived the window's restores"
    );
    assert_eq!(parked(qb.get()), 0);
    w.service.stop().unwrap();
}

/// Item 8: tool work is recognised by its queue (a queue the tool created in a callback), not
/// by the time it reaches the interceptor: work launched in PASS ENTER and intercepted while the
/// pass runs (no callback running) still runs at once, so PASS EXIT can wait for it.
#[test]
fn tool_work_intercepted_after_its_callback_returned_still_runs_inside_the_window() {
    let (w, _g) = world();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[0];
    let qa = api.queue(gpu);
    // The tool's kernel writes no application memory (a restore would revert what it wrote
    // into tracked memory during the pass loop).
    let tool_runs = Arc::new(AtomicU64::new(0));
    let kt = {
        let r = tool_runs.clone();
        sim.register_kernel("tool", move |_| {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    };
    let targs = api.alloc(sim.pool(0, replay_hsa_sim::PoolKind::Kernarg), 64) as usize;
    let tool_done = api.signal(1);
    let tool_queue = Arc::new(AtomicU64::new(0));
    GO.store(0, Ordering::SeqCst);
    let a_runs = Arc::new(AtomicU64::new(0));
    let ka = {
        let tq = tool_queue.clone();
        kernel_with(&sim, "a", a_runs.clone(), move || {
            // The async thread may go on now: the tool's work reaches the interceptor while
            // this pass runs, with no callback running.
            GO.store(1, Ordering::SeqCst);
            let q = Q(tq.load(Ordering::SeqCst) as usize);
            eventually(|| api.load(tool_done) == 0 || parked(q.get()) > 0);
        })
    };
    let (buf, args) = buffer_and_args(&sim, &api, 0, 3);
    w.tool.set_kernel_passes(ka, 2);
    {
        let tq = tool_queue.clone();
        w.tool
            .add_hook(at(Operation::Config, Phase::Enter, move |_| {
                if tq.load(Ordering::SeqCst) == 0 {
                    // The tool's own queue, created from inside its callback.
                    tq.store(api.queue(gpu) as u64, Ordering::SeqCst);
                }
            }));
    }
    {
        let tq = tool_queue.clone();
        w.tool
            .add_hook(at(Operation::Pass, Phase::Enter, move |pass| {
                if pass != 0 {
                    return;
                }
                // The async thread is busy until the pass runs; the doorbell below, rung inside
                // the interceptor, is deferred behind that.
                // SAFETY: `hold_async_thread` has the async function's signature.
                let st =
                    unsafe { (api.async_function)(Some(hold_async_thread), std::ptr::null_mut()) };
                assert_eq!(st, 0);
                let q = tq.load(Ordering::SeqCst) as *mut sys::hsa_queue_t;
                api.submit(q, dispatch(kt, targs as *mut u8, tool_done));
            }));
    }
    let completed_by_pass_exit = Arc::new(AtomicU64::new(0));
    {
        let c = completed_by_pass_exit.clone();
        w.tool
            .add_hook(at(Operation::Pass, Phase::Exit, move |pass| {
                if pass == 0 && eventually(|| api.load(tool_done) == 0) {
                    c.store(1, Ordering::SeqCst);
                }
            }));
    }
    let done = api.signal(1);
    api.submit(qa, dispatch(ka, args, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(api.wait_zero(tool_done), 0);
    assert_eq!(
        completed_by_pass_exit.load(Ordering::SeqCst),
        1,
        "the tool's work completed while PASS EXIT waited for it"
    );
    assert_eq!(tool_runs.load(Ordering::SeqCst), 1, "tool work ran once");
    assert_eq!(
        outcomes(&w.tool, ka),
        vec![(Outcome::Replayed, Reason::None)]
    );
    assert_eq!(read(buf), rmw(3));
    w.service.stop().unwrap();
}

/// Item 8, the other way: an application dispatch that reaches the async thread while a
/// callback runs is the application's: it waits for the window instead of running unlocked
/// inside it (where the next restore would revert it).
#[test]
fn an_application_dispatch_arriving_during_a_callback_waits_for_the_window() {
    let (w, _g) = world();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[0];
    let qa = api.queue(gpu);
    let qb = Q::new(api.queue(gpu));
    let a_runs = Arc::new(AtomicU64::new(0));
    let ka = rmw_kernel(&sim, a_runs.clone(), Duration::ZERO);
    let b_runs = Arc::new(AtomicU64::new(0));
    let kb = rmw_kernel(&sim, b_runs.clone(), Duration::ZERO);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 1);
    let (buf_b, args_b) = buffer_and_args(&sim, &api, 0, 10);
    let args_b = args_b as usize;
    let done_b = api.signal(1);
    w.tool.set_kernel_passes(ka, 3);
    {
        let br = b_runs.clone();
        w.tool
            .add_hook(at(Operation::Pass, Phase::Enter, move |pass| {
                if pass != 0 {
                    return;
                }
                on_async_thread(api, qb, vec![dispatch(kb, args_b as *mut u8, done_b)]);
                // The callback lasts until the dispatch was intercepted.
                eventually(|| br.load(Ordering::SeqCst) > 0 || parked(qb.get()) > 0);
            }));
    }
    let done = api.signal(1);
    api.submit(qa, dispatch(ka, args, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(api.wait_zero(done_b), 0);
    assert_eq!(
        outcomes(&w.tool, ka),
        vec![(Outcome::Replayed, Reason::None)]
    );
    assert_eq!(read(buf), rmw(1));
    assert_eq!(b_runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        read(buf_b),
        rmw(10),
        "the application's dispatch ran once, after the window, and was not reverted"
    );
    w.service.stop().unwrap();
}

/// Item 9: a thread submitting on another queue of the agent while a window runs never blocks
/// inside that queue's interceptor, and the window drains that queue by completion signals: the
/// window replays instead of waiting its whole bound.
#[test]
fn a_submission_on_another_queue_during_the_drains_never_stalls_the_window() {
    let (w, _g) = world();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[1];
    let qa = Q::new(api.queue(gpu));
    let qb = Q::new(api.queue(gpu));
    // A slow kernel ahead of the candidate keeps the window in its queue drain.
    let release = Arc::new(AtomicU64::new(0));
    let slow_runs = Arc::new(AtomicU64::new(0));
    let slow = {
        let r = release.clone();
        kernel_with(&sim, "slow", slow_runs.clone(), move || {
            eventually(|| r.load(Ordering::SeqCst) == 1);
        })
    };
    let a_runs = Arc::new(AtomicU64::new(0));
    let ka = rmw_kernel(&sim, a_runs.clone(), Duration::ZERO);
    let b_runs = Arc::new(AtomicU64::new(0));
    let kb = rmw_kernel(&sim, b_runs.clone(), Duration::ZERO);
    let (sbuf, sargs) = buffer_and_args(&sim, &api, 1, 0);
    let (buf, args) = buffer_and_args(&sim, &api, 1, 1);
    let (buf_b, args_b) = buffer_and_args(&sim, &api, 1, 10);
    let (args, args_b) = (args as usize, args_b as usize);
    w.tool.set_kernel_passes(ka, 3);
    let slow_done = api.signal(1);
    api.submit(qa.get(), dispatch(slow, sargs, slow_done));
    let done = api.signal(1);
    let window = std::thread::spawn(move || {
        api.submit(qa.get(), dispatch(ka, args as *mut u8, done));
    });
    let agent = replay_hsa::intercept::state_of(qa.get()).unwrap().agent.id;
    let gate = w.service.agent_gate(agent);
    assert!(
        eventually(|| gate.lock.try_read().is_none()),
        "the window holds the agent"
    );
    let done_b = api.signal(1);
    let submitted_b = Arc::new(AtomicU64::new(0));
    let other = {
        let s = submitted_b.clone();
        std::thread::spawn(move || {
            api.submit(qb.get(), dispatch(kb, args_b as *mut u8, done_b));
            s.store(1, Ordering::SeqCst);
        })
    };
    // The other thread's interceptor call returns (parked) or stays blocked in it (then the
    // queue drain still completes in time once the slow kernel is released).
    let _ = within(Duration::from_secs(1), || {
        submitted_b.load(Ordering::SeqCst) == 1
    });
    release.store(1, Ordering::SeqCst);
    window.join().unwrap();
    other.join().unwrap();
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(api.wait_zero(done_b), 0);
    assert_eq!(api.wait_zero(slow_done), 0);
    assert_eq!(
        outcomes(&w.tool, ka),
        vec![(Outcome::Replayed, Reason::None)],
        "the agent drain did not wait for the other queue's blocked interceptor"
    );
    assert_eq!(a_runs.load(Ordering::SeqCst), 3);
    assert_eq!((read(sbuf), read(buf)), (rmw(0), rmw(1)));
    assert_eq!(b_runs.load(Ordering::SeqCst), 1);
    assert_eq!(read(buf_b), rmw(10));
    w.service.stop().unwrap();
}

/// Item 10: once a packet is parked on a queue, a dispatch a submitting thread writes on that
/// queue parks behind it: queue order holds.
#[test]
fn a_dispatch_submitted_behind_parked_packets_runs_after_them() {
    let (w, _g) = world();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[0];
    let qa = api.queue(gpu);
    let qb = Q::new(api.queue(gpu));
    let order = Arc::new(Mutex::new(Vec::<&'static str>::new()));
    let first = {
        let o = order.clone();
        sim.register_kernel("first", move |_| {
            o.lock().unwrap().push("first");
            Ok(())
        })
    };
    let second = {
        let o = order.clone();
        sim.register_kernel("second", move |_| {
            o.lock().unwrap().push("second");
            Ok(())
        })
    };
    let in_window = Arc::new(AtomicU64::new(0));
    let a_runs = Arc::new(AtomicU64::new(0));
    let ka = {
        let iw = in_window.clone();
        kernel_with(&sim, "a", a_runs.clone(), move || {
            iw.store(1, Ordering::SeqCst);
            // Pass 0 lasts until both later packets reached queue B's interceptor.
            eventually(|| parked(qb.get()) >= 2);
        })
    };
    let (buf, args) = buffer_and_args(&sim, &api, 0, 1);
    let kernarg = api.alloc(sim.pool(0, replay_hsa_sim::PoolKind::Kernarg), 64) as usize;
    w.tool.set_kernel_passes(ka, 2);
    let (d1, d2) = (api.signal(1), api.signal(1));
    let driver = {
        let iw = in_window.clone();
        std::thread::spawn(move || {
            assert!(eventually(|| iw.load(Ordering::SeqCst) == 1));
            // The first packet reaches the async thread during the window: parked.
            on_async_thread(api, qb, vec![dispatch(first, kernarg as *mut u8, d1)]);
            assert!(eventually(|| parked(qb.get()) >= 1));
            // Then an application thread submits on the same queue.
            std::thread::spawn(move || {
                api.submit(qb.get(), dispatch(second, kernarg as *mut u8, d2))
            })
        })
    };
    let done = api.signal(1);
    api.submit(qa, dispatch(ka, args, done));
    assert_eq!(api.wait_zero(done), 0);
    let t = driver.join().unwrap();
    assert_eq!(api.wait_zero(d1), 0);
    assert_eq!(api.wait_zero(d2), 0);
    t.join().unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        vec!["first", "second"],
        "queue order"
    );
    assert_eq!(
        outcomes(&w.tool, ka),
        vec![(Outcome::Replayed, Reason::None)]
    );
    assert_eq!(read(buf), rmw(1));
    w.service.stop().unwrap();
}

/// Item 12: packets without completion signals retire when they complete, so after more of
/// them than the ring holds an idle ring still has room and the next candidate replays.
#[test]
fn signal_less_packets_retire_and_an_idle_ring_keeps_its_room() {
    let (w, _g) = world();
    let (sim, api) = sim();
    let q = api.queue_of(sim.gpu_agents()[0], 4);
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 0);
    for i in 0..8 {
        api.submit(q, dispatch(k, args, sys::hsa_signal_t::default()));
        assert!(
            eventually(|| runs.load(Ordering::SeqCst) == i + 1),
            "signal-less dispatch {i} ran"
        );
    }
    let a_runs = Arc::new(AtomicU64::new(0));
    let ka = rmw_kernel(&sim, a_runs.clone(), Duration::ZERO);
    let (abuf, aargs) = buffer_and_args(&sim, &api, 0, 5);
    w.tool.set_kernel_passes(ka, 3);
    let done = api.signal(1);
    api.submit(q, dispatch(ka, aargs, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(
        outcomes(&w.tool, ka),
        vec![(Outcome::Replayed, Reason::None)],
        "an idle ring is not full"
    );
    assert_eq!(a_runs.load(Ordering::SeqCst), 3);
    assert_eq!(read(abuf), rmw(5));
    let mut v = 0;
    for _ in 0..8 {
        v = rmw(v);
    }
    assert_eq!(read(buf), v);
    w.service.stop().unwrap();
}

/// Item 13: a candidate parked during a window is handed to the service when it is flushed,
/// so it gets its CONFIG and its outcome record (SPEC §8: one record per candidate).
#[test]
fn a_candidate_flushed_from_the_park_gets_config_and_a_record() {
    let (w, _g) = world();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[0];
    let qa = api.queue(gpu);
    let qb = Q::new(api.queue(gpu));
    let in_window = Arc::new(AtomicU64::new(0));
    let a_runs = Arc::new(AtomicU64::new(0));
    let ka = {
        let iw = in_window.clone();
        kernel_with(&sim, "a", a_runs.clone(), move || {
            iw.store(1, Ordering::SeqCst);
            eventually(|| parked(qb.get()) >= 1);
        })
    };
    let b_runs = Arc::new(AtomicU64::new(0));
    let kb = rmw_kernel(&sim, b_runs.clone(), Duration::ZERO);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 1);
    let (buf_b, args_b) = buffer_and_args(&sim, &api, 0, 10);
    let args_b = args_b as usize;
    w.tool.set_kernel_passes(ka, 2);
    w.tool.set_kernel_passes(kb, 2);
    let done_b = api.signal(1);
    let driver = {
        let iw = in_window.clone();
        std::thread::spawn(move || {
            assert!(eventually(|| iw.load(Ordering::SeqCst) == 1));
            on_async_thread(api, qb, vec![dispatch(kb, args_b as *mut u8, done_b)]);
        })
    };
    let done = api.signal(1);
    api.submit(qa, dispatch(ka, args, done));
    assert_eq!(api.wait_zero(done), 0);
    driver.join().unwrap();
    assert_eq!(api.wait_zero(done_b), 0);
    assert_eq!(
        outcomes(&w.tool, ka),
        vec![(Outcome::Replayed, Reason::None)]
    );
    let b = outcomes(&w.tool, kb);
    assert_eq!(
        b.len(),
        1,
        "one CONFIG EXIT for the flushed candidate: {b:?}"
    );
    assert_eq!(
        b[0],
        (Outcome::Declined, Reason::AgentBusy),
        "flushed on the async thread, where no window runs; nothing was stuck"
    );
    assert_eq!((read(buf), read(buf_b)), (rmw(1), rmw(10)));
    assert_eq!(b_runs.load(Ordering::SeqCst), 1);
    w.service.stop().unwrap();
}

/// Item 13: a backend fault (a panic) after the window wrote its first pass still delivers the
/// application's completion, so the application does not hang.
#[test]
fn a_backend_panic_after_a_pass_was_written_still_signals_the_completion() {
    let (w, _g) = world();
    w.service
        .set_policy(Policy {
            pass_timeout: Duration::from_millis(200),
            ..policy()
        })
        .unwrap();
    let (sim, api) = sim();
    let q = api.queue(sim.gpu_agents()[1]);
    let release = Arc::new(AtomicU64::new(0));
    let runs = Arc::new(AtomicU64::new(0));
    let k = {
        let r = release.clone();
        kernel_with(&sim, "stuck", runs.clone(), move || {
            eventually(|| r.load(Ordering::SeqCst) == 1);
        })
    };
    let (buf, args) = buffer_and_args(&sim, &api, 1, 7);
    w.tool.set_kernel_passes(k, 3);
    // The pass times out; logging that fault panics inside the window.
    *PANIC_ON.lock().unwrap() = Some("pass 0:".into());
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert!(PANIC_ON.lock().unwrap().is_none(), "the fault fired");
    release.store(1, Ordering::SeqCst);
    assert_eq!(api.wait_zero(done), 0, "the application's completion fired");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(done), 0, "once");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the pass ran once");
    assert_eq!(read(buf), rmw(7));
    w.service.stop().unwrap();
}

/// Item 9, completion-based drains: an application that re-arms a completion signal to its
/// old value (as HIP's signal pools do) does not leave its queue looking busy to another
/// queue's window, once a later barrier-bit packet completed there.
#[test]
fn a_rearmed_application_signal_does_not_stall_another_queues_window() {
    let (w, _g) = world();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[0];
    let qa = api.queue(gpu);
    let qb = api.queue(gpu);
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 0);
    let s = api.signal(1);
    api.submit(qb, dispatch(k, args, s));
    assert_eq!(api.wait_zero(s), 0);
    // Re-armed for its next use, which never comes on this queue.
    api.store(s, 1);
    api.submit(qb, dispatch(k, args, sys::hsa_signal_t::default()));
    assert!(eventually(|| runs.load(Ordering::SeqCst) == 2));
    let a_runs = Arc::new(AtomicU64::new(0));
    let ka = rmw_kernel(&sim, a_runs.clone(), Duration::ZERO);
    let (abuf, aargs) = buffer_and_args(&sim, &api, 0, 4);
    w.tool.set_kernel_passes(ka, 2);
    let done = api.signal(1);
    api.submit(qa, dispatch(ka, aargs, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(
        outcomes(&w.tool, ka),
        vec![(Outcome::Replayed, Reason::None)]
    );
    assert_eq!(read(abuf), rmw(4));
    assert_eq!(read(buf), rmw(rmw(0)));
    w.service.stop().unwrap();
}

/// The queue drain's barrier covers everything before it: a re-armed application signal on
/// the dispatch's own queue does not keep that drain waiting.
#[test]
fn a_rearmed_application_signal_does_not_stall_its_own_queues_drain() {
    let (w, _g) = world();
    let (sim, api) = sim();
    let q = api.queue(sim.gpu_agents()[1]);
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let (buf, args) = buffer_and_args(&sim, &api, 1, 0);
    let s = api.signal(1);
    api.submit(q, dispatch(k, args, s));
    assert_eq!(api.wait_zero(s), 0);
    api.store(s, 1);
    let a_runs = Arc::new(AtomicU64::new(0));
    let ka = rmw_kernel(&sim, a_runs.clone(), Duration::ZERO);
    let (abuf, aargs) = buffer_and_args(&sim, &api, 1, 4);
    w.tool.set_kernel_passes(ka, 2);
    let done = api.signal(1);
    api.submit(q, dispatch(ka, aargs, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(
        outcomes(&w.tool, ka),
        vec![(Outcome::Replayed, Reason::None)]
    );
    assert_eq!((read(abuf), read(buf)), (rmw(4), rmw(0)));
    w.service.stop().unwrap();
}

/// Two application threads contend for windows on one agent: the later candidate, parked
/// behind the first window and flushed on the runtime's async thread after it, declines
/// `agent_busy` (nothing was stuck), runs once, and the first window replays.
#[test]
fn two_threads_contending_for_windows_on_one_agent_decline_agent_busy_not_stuck() {
    let (w, _g) = world();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[0];
    let qa = api.queue(gpu);
    let qb = Q::new(api.queue(gpu));
    let in_window = Arc::new(AtomicU64::new(0));
    let a_runs = Arc::new(AtomicU64::new(0));
    let ka = {
        let iw = in_window.clone();
        kernel_with(&sim, "contender_a", a_runs.clone(), move || {
            iw.store(1, Ordering::SeqCst);
            eventually(|| parked(qb.get()) >= 1);
        })
    };
    let b_runs = Arc::new(AtomicU64::new(0));
    let kb = rmw_kernel(&sim, b_runs.clone(), Duration::ZERO);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 1);
    let (buf_b, args_b) = buffer_and_args(&sim, &api, 0, 10);
    let args_b = args_b as usize;
    w.tool.set_kernel_passes(ka, 2);
    w.tool.set_kernel_passes(kb, 2);
    let done_b = api.signal(1);
    // Thread B submits from an application thread of its own while A's window runs.
    let b = {
        let iw = in_window.clone();
        std::thread::spawn(move || {
            assert!(eventually(|| iw.load(Ordering::SeqCst) == 1));
            api.submit(qb.get(), dispatch(kb, args_b as *mut u8, done_b));
        })
    };
    let done = api.signal(1);
    api.submit(qa, dispatch(ka, args, done));
    assert_eq!(api.wait_zero(done), 0);
    b.join().unwrap();
    assert_eq!(api.wait_zero(done_b), 0);
    assert_eq!(
        outcomes(&w.tool, ka),
        vec![(Outcome::Replayed, Reason::None)]
    );
    assert_eq!(
        outcomes(&w.tool, kb),
        vec![(Outcome::Declined, Reason::AgentBusy)]
    );
    assert_eq!((read(buf), read(buf_b)), (rmw(1), rmw(10)));
    assert_eq!(b_runs.load(Ordering::SeqCst), 1);
    w.service.stop().unwrap();
}

/// Issue 24 (HSA): a tool's PASS ENTER work on a queue it created at start-up and did not
/// declare reaches the interceptor on the runtime's async thread (a doorbell rung inside an
/// interceptor is deferred there), is parked as application work until the window ends, and
/// the queue is named in a warning instead of the tool's wait timing out silently. Declared
/// (`mark_tool_queue`, which the C ABI's `kreplay_hsa_mark_tool_queue` calls), the same work
/// runs inside the window and PASS EXIT's wait for it completes.
#[test]
fn tool_work_on_an_undeclared_queue_is_named_and_on_a_declared_one_runs_in_the_window() {
    let (w, _g) = world();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[0];
    let qa = api.queue(gpu);
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let tool_runs = Arc::new(AtomicU64::new(0));
    let kt = rmw_kernel(&sim, tool_runs.clone(), Duration::ZERO);
    w.tool.set_kernel_passes(k, 2);
    w.tool.set_kernel_passes(kt, 1);
    for declared in [false, true] {
        // The tool's queue, created at start-up (outside any callback).
        let qt = Q::new(api.queue(gpu));
        if declared {
            assert!(replay_hsa::intercept::mark_tool_queue(qt.get()));
        }
        let (tbuf, targs) = buffer_and_args(&sim, &api, 0, 100);
        let targs = targs as usize;
        let tool_done = api.signal(1);
        let tool_done_h = tool_done.handle;
        let completed_in_exit = Arc::new(AtomicU64::new(0));
        let c = completed_in_exit.clone();
        w.tool
            .set_hook(Some(at(Operation::Pass, Phase::Enter, move |pass| {
                if pass == 0 {
                    let done = sys::hsa_signal_t {
                        handle: tool_done_h,
                    };
                    on_async_thread(api, qt, vec![dispatch(kt, targs as *mut u8, done)]);
                    // Until the interceptor on the async thread handled it (parked or written).
                    within(Duration::from_secs(2), || {
                        parked(qt.get()) >= 1 || api.load(done) == 0
                    });
                }
            })));
        w.tool
            .add_hook(at(Operation::Pass, Phase::Exit, move |pass| {
                let done = sys::hsa_signal_t {
                    handle: tool_done_h,
                };
                if pass == 0 && within(Duration::from_millis(300), || api.load(done) == 0) {
                    c.store(1, Ordering::SeqCst);
                }
            }));
        LINES.lock().unwrap().clear();
        let (buf, args) = buffer_and_args(&sim, &api, 0, 7);
        let done = api.signal(1);
        api.submit(qa, dispatch(k, args, done));
        assert_eq!(api.wait_zero(done), 0);
        assert_eq!(api.wait_zero(tool_done), 0, "the tool's work ran");
        assert_eq!((read(buf), read(tbuf)), (rmw(7), rmw(100)));
        let named = LINES.lock().unwrap().iter().any(|l| {
            l.contains(&format!("queue {:#x}", qt.0)) && l.contains("kreplay_hsa_mark_tool_queue")
        });
        if declared {
            assert_eq!(
                completed_in_exit.load(Ordering::SeqCst),
                1,
                "declared: the tool's work ran inside the window"
            );
            assert!(!named);
        } else {
            assert_eq!(
                completed_in_exit.load(Ordering::SeqCst),
                0,
                "undeclared: parked until the window ended"
            );
            assert!(
                named,
                "the undeclared queue is named: {:?}",
                LINES.lock().unwrap()
            );
        }
    }
    w.tool.set_hook(None);
    w.service.stop().unwrap();
}
