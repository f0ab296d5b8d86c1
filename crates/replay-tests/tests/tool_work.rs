//! Tool work (SPEC §6 step 3): a tool that launches its own kernels from inside its callbacks
//! (CONFIG ENTER, PASS ENTER, PASS EXIT, CONFIG EXIT), on the window's thread and forwarded
//! through the runtime's thread. Every launch runs exactly once, is recorded as
//! `reentrant_dispatch`, skips the agent's lock, and the window completes; nothing deadlocks.
//! Each test is bounded by a wall-clock watchdog so a deadlock fails instead of hanging CI.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::{MemoryClass, Operation, Outcome, OutcomeRecord, Phase, Policy, Reason};
use replay_mock::{Completion, KernArgs, Kernel, SimRuntime};
use replay_tests::{
    assert_matches_reference, assert_outcome, fast_policy, finish, grid, reference, runtime, At,
    Replay, RmwApp, ToolScript, Watchdog, A0, RMW_N,
};

const LIMIT: Duration = Duration::from_secs(30);

/// Collects every outcome record the service emits (windows and tool work).
fn sink(replay: &Replay) -> Arc<Mutex<Vec<OutcomeRecord>>> {
    let all: Arc<Mutex<Vec<OutcomeRecord>>> = Arc::default();
    let s = Arc::clone(&all);
    replay
        .svc
        .set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
            s.lock().push(r.clone())
        })));
    all
}

/// Launches the tool's kernel on `queue` of agent 0, on this thread and forwarded, and
/// waits for both inside the callback.
fn launch_both(rt: &SimRuntime, app: &RmwApp, queue: usize, launched: &AtomicU64) {
    let q = rt.queue(A0, queue);
    let args = app.tool_args();
    let same = rt.dispatch(q, &app.tool_kernel, &args, grid(1)).unwrap();
    let fwd = rt
        .dispatch_forwarded(q, &app.tool_kernel, &args, grid(1))
        .unwrap();
    fwd.wait_submitted().unwrap();
    same.wait().unwrap();
    fwd.wait().unwrap();
    assert_eq!((same.fired(), fwd.fired()), (1, 1));
    launched.fetch_add(2, Ordering::SeqCst);
}

#[test]
fn tool_work_from_every_callback_runs_once_and_the_window_completes() {
    let _dog = Watchdog::new("tool_work_from_every_callback", LIMIT);
    let rt = runtime(1);
    let app = RmwApp::setup(&rt);
    let launched = Arc::new(AtomicU64::new(0));
    let mut script = ToolScript::passes_for("rmw", 3);
    for (at, queue) in [
        (At::ConfigEnter, 0),
        (At::PassEnter, 1),
        (At::PassExit, 0),
        (At::ConfigExit, 1),
    ] {
        let (app, launched) = (app.clone(), Arc::clone(&launched));
        script = script.on(at, move |rt, p| {
            if &*p.dispatch_info.kernel_name == "rmw" {
                launch_both(rt, &app, queue, &launched);
            }
        });
    }
    let replay = script.install(&rt, fast_policy());
    let records = sink(&replay);
    let rec = app.run(&rt);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!(rec.executed_passes, 3);

    // CONFIG ENTER and EXIT once, PASS ENTER and EXIT three times each: 8 callbacks, 2
    // launches each.
    let n = replay_tests::get(&launched);
    assert_eq!(n, 16);
    assert_eq!(app.tool_count(&rt), n, "every launch ran exactly once");
    let records = records.lock().clone();
    let tool: Vec<_> = records.iter().filter(|r| r.kernel == "tool_mark").collect();
    assert_eq!(tool.len() as u64, n);
    for r in &tool {
        assert_outcome(r, Outcome::Declined, Reason::ReentrantDispatch);
        assert_eq!((r.executed_passes, r.reentrancy), (1, 1));
    }
    assert_eq!(
        records.iter().filter(|r| r.kernel == "rmw").count(),
        1,
        "tool work is never a window of its own"
    );
    // Only the application's dispatch reached CONFIG: tool work gets no callbacks.
    assert_eq!(replay.log.count(Operation::Config, Phase::Enter), 1);

    let seen = app.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(
        rt.read_u32s(app.buf, RMW_N).unwrap(),
        replay_tests::rmw_once(&RmwApp::initial())
    );
    assert_matches_reference(&rt, &reference(1, |rt| RmwApp::setup(rt).run_plain(rt)));
    finish(&rt);
    // PASS ENTER/EXIT launches and CONFIG EXIT's ran while the window owned the agent.
    assert_eq!(rt.gpu().invariants().stats().tool_work_in_window, 14);
}

#[test]
fn fire_and_forget_tool_work_on_the_dispatch_queue() {
    let _dog = Watchdog::new("fire_and_forget_tool_work", LIMIT);
    let rt = runtime(1);
    let app = RmwApp::setup(&rt);
    let pending: Arc<Mutex<Vec<Completion>>> = Arc::default();
    let (tool_app, keep) = (app.clone(), Arc::clone(&pending));
    let launch = move |rt: &SimRuntime| {
        // Queued ahead of the pass on the dispatch's own queue; not waited for.
        let c = rt
            .dispatch(
                rt.queue(A0, 0),
                &tool_app.tool_kernel,
                &tool_app.tool_args(),
                grid(1),
            )
            .unwrap();
        keep.lock().push(c);
    };
    let l2 = launch.clone();
    let replay = ToolScript::passes(4)
        .on(At::PassEnter, move |rt, _| launch(rt))
        .on(At::PassExit, move |rt, _| l2(rt))
        .install(&rt, fast_policy());
    let rec = app.run(&rt);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    for c in pending.lock().iter() {
        c.wait().unwrap();
        assert_eq!(c.fired(), 1);
    }
    assert_eq!(app.tool_count(&rt), 8);
    assert_eq!(
        replay.svc.summary().declined.get("reentrant_dispatch"),
        Some(&8)
    );
    assert_matches_reference(&rt, &reference(1, |rt| RmwApp::setup(rt).run_plain(rt)));
    finish(&rt);
}

#[test]
fn tool_work_while_application_threads_submit() {
    let _dog = Watchdog::new("tool_work_while_application_threads_submit", LIMIT);
    const ROUNDS: usize = 6;
    let workload = |rt: &SimRuntime| {
        let app = RmwApp::setup(rt);
        let extra: Vec<u64> = (0..2)
            .map(|_| rt.alloc(A0, 4096, MemoryClass::DEVICE_COARSE).unwrap())
            .collect();
        (app, extra)
    };
    let bump = Kernel::new("plain_bump", |ctx| {
        let at = ctx.word(0);
        let v = ctx.read_u64(at)?;
        ctx.write_u64(at, v.wrapping_mul(3).wrapping_add(1))?;
        Ok(())
    });
    let rt = runtime(1);
    let (app, extra) = workload(&rt);
    let launched = Arc::new(AtomicU64::new(0));
    let (tool_app, l) = (app.clone(), Arc::clone(&launched));
    let replay = ToolScript::passes_for("rmw", 3)
        .on(At::PassExit, move |rt, _| launch_both(rt, &tool_app, 1, &l))
        .install(&rt, fast_policy());
    let threads: Vec<_> = extra
        .iter()
        .enumerate()
        .map(|(i, &buf)| {
            let (rt, bump) = (rt.clone(), bump.clone());
            std::thread::spawn(move || {
                let q = rt.queue(A0, i);
                for _ in 0..ROUNDS {
                    rt.dispatch(q, &bump, &KernArgs::new().ptr(buf).build(), grid(1))
                        .unwrap()
                        .wait()
                        .unwrap();
                }
            })
        })
        .collect();
    for _ in 0..ROUNDS {
        assert_outcome(&app.run(&rt), Outcome::Replayed, Reason::None);
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(app.tool_count(&rt), replay_tests::get(&launched));
    assert_eq!(
        replay_tests::get(&launched),
        (ROUNDS * 3 * 2) as u64,
        "two launches per PASS EXIT"
    );
    let reference = reference(1, |rt| {
        let (app, extra) = workload(rt);
        for &buf in &extra {
            for _ in 0..ROUNDS {
                rt.dispatch(
                    rt.queue(A0, 0),
                    &bump,
                    &KernArgs::new().ptr(buf).build(),
                    grid(1),
                )
                .unwrap()
                .wait()
                .unwrap();
            }
        }
        for _ in 0..ROUNDS {
            app.run_plain(rt);
        }
    });
    assert_matches_reference(&rt, &reference);
    assert_eq!(replay.svc.summary().replayed, ROUNDS as u64);
    finish(&rt);
}

/// An application dispatch that reaches the service on the runtime's thread while a window's
/// callback runs is the application's, not tool work: it must not run inside the window.
/// (Regression: the core once recognised forwarded tool work by the per-agent marker alone,
/// so such a dispatch skipped the lock and a restore undid its write.)
#[test]
fn a_forwarded_application_dispatch_during_a_callback_is_not_tool_work() {
    let _dog = Watchdog::new("forwarded_application_dispatch", LIMIT);
    let workload = |rt: &SimRuntime| {
        let app = RmwApp::setup(rt);
        let mine = rt.alloc(A0, 4096, MemoryClass::DEVICE_COARSE).unwrap();
        (app, mine)
    };
    let bump = Kernel::new("app_bump", |ctx| {
        let at = ctx.word(0);
        let v = ctx.read_u64(at)?;
        ctx.write_u64(at, v.wrapping_mul(3).wrapping_add(1))?;
        Ok(())
    });
    let rt = runtime(1);
    let (app, mine) = workload(&rt);
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<Completion>();
    let go_tx = Mutex::new(Some(go_tx));
    let done_rx = Mutex::new(done_rx);
    ToolScript::passes_for("rmw", 3)
        .on(At::PassEnter, move |_rt, p| {
            if p.current_pass == 0 {
                // Another application thread forwards a launch now; the callback lasts until
                // the runtime thread handed it to the service.
                if let Some(tx) = go_tx.lock().take() {
                    tx.send(()).unwrap();
                }
                let c: Completion = done_rx.lock().recv_timeout(Duration::from_secs(5)).unwrap();
                let t = Instant::now();
                while !c.submitted() && t.elapsed() < Duration::from_secs(1) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
        .install(&rt, fast_policy());
    let other = {
        let (rt, bump) = (rt.clone(), bump.clone());
        std::thread::spawn(move || {
            go_rx.recv().unwrap();
            let c = rt
                .dispatch_forwarded(
                    rt.queue(A0, 1),
                    &bump,
                    &KernArgs::new().ptr(mine).build(),
                    grid(1),
                )
                .unwrap();
            done_tx.send(c.clone()).unwrap();
            c.wait().unwrap();
            c.wait_submitted().unwrap()
        })
    };
    assert_outcome(&app.run(&rt), Outcome::Replayed, Reason::None);
    let record = other.join().unwrap();
    rt.wait_idle();
    // Both dispatches ran once: the application's write must not be undone by a restore.
    let v = u64::from_le_bytes(rt.read(mine, 8).unwrap().try_into().unwrap());
    assert_eq!(
        v, 1,
        "the application's write was lost to a restore ({record:?})"
    );
    assert!(
        record
            .as_ref()
            .is_none_or(|r| r.reason != Reason::ReentrantDispatch),
        "the application's forwarded dispatch was taken for tool work: {record:?}"
    );
    let reference = reference(1, |rt| {
        let (app, mine) = workload(rt);
        rt.dispatch(
            rt.queue(A0, 1),
            &bump,
            &KernArgs::new().ptr(mine).build(),
            grid(1),
        )
        .unwrap()
        .wait()
        .unwrap();
        app.run_plain(rt);
    });
    assert_matches_reference(&rt, &reference);
    finish(&rt);
}

/// Forwarded tool work must not queue behind an application dispatch that the runtime's
/// thread is holding while it waits for the agent's lock (SPEC §6 step 3: "nothing
/// deadlocks"). The tool waits for its hand-over inside the callback, as the simulator's docs
/// advise, but with a bound, so the test reports instead of hanging.
#[test]
fn forwarded_tool_work_does_not_wait_behind_a_blocked_forwarded_dispatch() {
    let _dog = Watchdog::new("forwarded_tool_work_behind_blocked", LIMIT);
    let rt = runtime(1);
    let app = RmwApp::setup(&rt);
    let mine = rt.alloc(A0, 4096, MemoryClass::DEVICE_COARSE).unwrap();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_tx = Mutex::new(Some(go_tx));
    let first = Arc::new(AtomicBool::new(true));
    // Pass 0 of the application's kernel runs for a while of wall time: the window is then
    // inside its pass wait, holding the lock, in no callback.
    let slow = {
        let inner = app.kernel.clone();
        let first = Arc::clone(&first);
        Kernel::new("rmw", move |ctx| {
            if first.swap(false, Ordering::SeqCst) {
                if let Some(tx) = go_tx.lock().take() {
                    tx.send(()).unwrap();
                }
                std::thread::sleep(Duration::from_millis(300));
            }
            (inner.body)(ctx)
        })
    };
    let handed_over = Arc::new(AtomicBool::new(false));
    let (tool_app, seen) = (app.clone(), Arc::clone(&handed_over));
    ToolScript::passes_for("rmw", 2)
        .on(At::PassExit, move |rt, p| {
            if p.current_pass != 0 {
                return;
            }
            let fwd = rt
                .dispatch_forwarded(
                    rt.queue(A0, 1),
                    &tool_app.tool_kernel,
                    &tool_app.tool_args(),
                    grid(1),
                )
                .unwrap();
            let t = Instant::now();
            while !fwd.submitted() && t.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(1));
            }
            seen.store(fwd.submitted(), Ordering::SeqCst);
        })
        .install(
            &rt,
            Policy {
                pass_timeout: Duration::from_secs(5),
                ..fast_policy()
            },
        );
    let other = {
        let rt = rt.clone();
        let k = replay_tests::mark_kernel("app_mark");
        std::thread::spawn(move || {
            go_rx.recv().unwrap();
            let c = rt
                .dispatch_forwarded(
                    rt.queue(A0, 1),
                    &k,
                    &KernArgs::new().ptr(mine).build(),
                    grid(1),
                )
                .unwrap();
            c.wait().unwrap();
        })
    };
    let c = rt
        .dispatch(rt.queue(A0, 0), &slow, &app.args(), grid(RMW_N as u32))
        .unwrap();
    c.wait().unwrap();
    other.join().unwrap();
    finish(&rt);
    assert!(
        handed_over.load(Ordering::SeqCst),
        "forwarded tool work was not handed over within 2 s: the runtime thread was blocked on \
         the agent's lock by an application dispatch (a tool that waits without a bound deadlocks)"
    );
}
