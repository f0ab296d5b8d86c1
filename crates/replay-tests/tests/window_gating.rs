//! The window against everything else the process does (SPEC §6 step 4): writes that are not
//! replayed (an asynchronous copy, a host memset) issued on another thread while a window is
//! open wait for it, so no restore undoes them; stopping the service inside a window keeps
//! its gate closed; and a pass whose submission fails after the launch reached the device is
//! never submitted again (one execution, one completion).
//!
//! A window is held open from a PASS callback; the other thread's write is started from PASS
//! ENTER of pass 0 and PASS EXIT of pass 0 waits, bounded, to see whether it landed inside the
//! window. That bounded wait decides nothing: what is asserted is the final memory against a
//! plain run where each write happened once, the record, and the simulator's invariants.

use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{MemoryClass, Outcome, Policy, Reason, RestoreMode, Scope};
use replay_mock::{Fault, FaultMode, KernArgs, SimRuntime};
use replay_tests::{
    assert_matches_reference, assert_outcome, fast_policy, finish, grid, mark_kernel, reference,
    rmw_once, runtime, At, Point, RmwApp, ToolScript, Watchdog, A0,
};

const LIMIT: Duration = Duration::from_secs(60);
/// How long PASS EXIT of pass 0 waits (wall time) for the other thread's write to land.
const LOOK: Duration = Duration::from_millis(300);
const LEN: u64 = 4096;

/// `all` with `full`: the restore rewrites every tracked byte, so a write that ran inside the
/// window is undone. The default policy (`auto`: `arguments` on the simulator) instead sees it
/// as a write outside the scope.
fn policies() -> [Policy; 2] {
    [
        Policy {
            scope: Scope::All,
            restore: RestoreMode::Full,
            ..fast_policy()
        },
        fast_policy(),
    ]
}

/// Two more buffers of the application: `src` (filled with `0xab`) and `dst` (zero).
fn buffers(rt: &SimRuntime) -> (u64, u64) {
    let src = rt.alloc(A0, LEN, MemoryClass::DEVICE_COARSE).unwrap();
    rt.fill(src, LEN as usize, 0xab).unwrap();
    let dst = rt.alloc(A0, LEN, MemoryClass::DEVICE_COARSE).unwrap();
    (src, dst)
}

type Other = Arc<Mutex<Option<JoinHandle<()>>>>;

/// Runs the application's kernel (3 passes) while `write` runs on another thread, started
/// from PASS ENTER of pass 0 (after the tool stopped the service there, with `stop`). Returns
/// the record and whether the write was seen done while the window was still open.
fn window_beside(
    rt: &SimRuntime,
    app: &RmwApp,
    policy: Policy,
    stop: bool,
    write: impl Fn(&SimRuntime) + Send + Sync + 'static,
) -> (replay_core::OutcomeRecord, bool) {
    let write = Arc::new(write);
    let other: Other = Arc::default();
    let (tx, rx) = mpsc::channel::<()>();
    let rx = Arc::new(Mutex::new(rx));
    let inside = Arc::new(Mutex::new(false));
    let (o2, i2) = (Arc::clone(&other), Arc::clone(&inside));
    let script = ToolScript::passes_for("rmw", 3)
        .on(At::PassEnter, move |rt, p| {
            if p.current_pass == 0 {
                if stop {
                    // The tool stops replay from inside the window; the window goes on.
                    rt.service().unwrap().stop().unwrap();
                }
                let (rt, write, tx) = (rt.clone(), Arc::clone(&write), tx.clone());
                *o2.lock() = Some(std::thread::spawn(move || {
                    write(&rt);
                    let _ = tx.send(());
                }));
            }
        })
        .on(At::PassExit, move |_, p| {
            if p.current_pass == 0 {
                *i2.lock() = rx.lock().recv_timeout(LOOK).is_ok();
            }
        });
    let replay = script.install(rt, policy);
    let rec = app.run(rt);
    let t = other.lock().take().expect("the other thread was started");
    t.join().expect("the other thread");
    assert_eq!(replay.svc.is_active(), !stop);
    assert_eq!(replay.svc.open_windows(), 0);
    let inside = *inside.lock();
    (rec, inside)
}

#[test]
fn an_async_copy_during_a_window_waits_for_it_and_lands_once() {
    let _dog = Watchdog::new("async_copy_during_a_window", LIMIT);
    let want = reference(1, |rt| {
        let app = RmwApp::setup(rt);
        let (src, dst) = buffers(rt);
        app.run_plain(rt);
        rt.copy_async(A0, dst, src, LEN).unwrap().wait().unwrap();
    });
    for policy in policies() {
        let rt = runtime(1);
        let app = RmwApp::setup(&rt);
        let (src, dst) = buffers(&rt);
        let (rec, inside) = window_beside(&rt, &app, policy, false, move |rt| {
            let c = rt.copy_async(A0, dst, src, LEN).unwrap();
            c.wait().unwrap();
            assert_eq!(c.fired(), 1);
        });
        assert!(
            rt.read(dst, LEN as usize).unwrap() == vec![0xab; LEN as usize],
            "the copy's bytes were lost"
        );
        assert_matches_reference(&rt, &want);
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        assert_eq!(rec.executed_passes, 3);
        assert!(!inside, "the copy completed inside the window");
        finish(&rt);
        rt.shutdown();
    }
}

#[test]
fn a_host_memset_during_a_window_waits_for_it_and_lands_once() {
    let _dog = Watchdog::new("host_memset_during_a_window", LIMIT);
    let want = reference(1, |rt| {
        let app = RmwApp::setup(rt);
        let (_, dst) = buffers(rt);
        app.run_plain(rt);
        rt.fill(dst, LEN as usize, 0xcd).unwrap();
    });
    for policy in policies() {
        let rt = runtime(1);
        let app = RmwApp::setup(&rt);
        let (_, dst) = buffers(&rt);
        let (rec, inside) = window_beside(&rt, &app, policy, false, move |rt| {
            rt.fill(dst, LEN as usize, 0xcd).unwrap();
        });
        assert!(
            rt.read(dst, LEN as usize).unwrap() == vec![0xcd; LEN as usize],
            "the memset's bytes were lost"
        );
        assert_matches_reference(&rt, &want);
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        assert!(!inside, "the memset ran inside the window");
        finish(&rt);
        rt.shutdown();
    }
}

#[test]
fn a_queued_host_write_during_a_window_waits_for_it_and_lands_once() {
    let _dog = Watchdog::new("queued_host_write_during_a_window", LIMIT);
    let want = reference(1, |rt| {
        let app = RmwApp::setup(rt);
        let (_, dst) = buffers(rt);
        app.run_plain(rt);
        rt.fill(dst, LEN as usize, 0x5c).unwrap();
    });
    let rt = runtime(1);
    let app = RmwApp::setup(&rt);
    let (_, dst) = buffers(&rt);
    let (rec, inside) = window_beside(&rt, &app, policies()[0].clone(), false, move |rt| {
        let q = rt.queue(A0, 1);
        rt.write_async(q, dst, &[0x5c; LEN as usize])
            .unwrap()
            .wait()
            .unwrap();
    });
    assert_matches_reference(&rt, &want);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert!(!inside, "the queued write ran inside the window");
    finish(&rt);
}

#[test]
fn stopping_the_service_inside_a_window_keeps_ordinary_dispatches_out_of_it() {
    let _dog = Watchdog::new("stop_inside_a_window", LIMIT);
    let mark = mark_kernel("app_mark");
    let want = reference(1, |rt| {
        let app = RmwApp::setup(rt);
        let x = rt.alloc(A0, 8, MemoryClass::DEVICE_COARSE).unwrap();
        app.run_plain(rt);
        let args = KernArgs::new().ptr(x).build();
        rt.dispatch(rt.queue(A0, 1), &mark, &args, grid(1))
            .unwrap()
            .wait()
            .unwrap();
    });
    for policy in policies() {
        let rt = runtime(1);
        let app = RmwApp::setup(&rt);
        let x = rt.alloc(A0, 8, MemoryClass::DEVICE_COARSE).unwrap();
        let mark = mark.clone();
        let (rec, inside) = window_beside(&rt, &app, policy, true, move |rt| {
            let args = KernArgs::new().ptr(x).build();
            let c = rt.dispatch(rt.queue(A0, 1), &mark, &args, grid(1)).unwrap();
            c.wait().unwrap();
            assert_eq!(c.fired(), 1);
            assert!(c.record().is_none(), "an ordinary dispatch");
        });
        assert_eq!(rt.read(x, 8).unwrap(), 1u64.to_le_bytes());
        assert_matches_reference(&rt, &want);
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        assert_eq!(rec.executed_passes, 3);
        assert!(!inside, "the ordinary dispatch ran inside the window");
        finish(&rt);
        rt.shutdown();
    }
}

#[test]
fn a_multi_kernel_submission_during_a_window_waits_for_it_even_after_stop() {
    let _dog = Watchdog::new("batch_during_a_window", LIMIT);
    let mark = mark_kernel("app_mark");
    let batch = |rt: &SimRuntime, mark: &replay_mock::Kernel, x: u64, y: u64| {
        let (ax, ay) = (
            KernArgs::new().ptr(x).build(),
            KernArgs::new().ptr(y).build(),
        );
        let c = rt
            .dispatch_batch(
                rt.queue(A0, 1),
                &[
                    (mark, &ax[..], grid(1)),
                    (mark, &ay[..], grid(1)),
                    (mark, &ax[..], grid(1)),
                ],
            )
            .unwrap();
        c.wait().unwrap();
        assert_eq!(c.fired(), 1);
    };
    let want = reference(1, |rt| {
        let app = RmwApp::setup(rt);
        let x = rt.alloc(A0, 8, MemoryClass::DEVICE_COARSE).unwrap();
        let y = rt.alloc(A0, 8, MemoryClass::DEVICE_COARSE).unwrap();
        app.run_plain(rt);
        batch(rt, &mark, x, y);
    });
    for stop in [false, true] {
        let rt = runtime(1);
        let app = RmwApp::setup(&rt);
        let x = rt.alloc(A0, 8, MemoryClass::DEVICE_COARSE).unwrap();
        let y = rt.alloc(A0, 8, MemoryClass::DEVICE_COARSE).unwrap();
        let mark = mark.clone();
        let (rec, inside) = window_beside(&rt, &app, policies()[0].clone(), stop, move |rt| {
            batch(rt, &mark, x, y)
        });
        assert_eq!(
            (rt.read(x, 8).unwrap(), rt.read(y, 8).unwrap()),
            (2u64.to_le_bytes().to_vec(), 1u64.to_le_bytes().to_vec()),
            "stop={stop}"
        );
        assert_matches_reference(&rt, &want);
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        assert!(!inside, "stop={stop}: the batch ran inside the window");
        finish(&rt);
        rt.shutdown();
    }
}

/// The application's kernel once, on a fresh runtime without replay.
fn one_execution() -> Vec<replay_core::Digest128> {
    reference(1, |rt| RmwApp::setup(rt).run_plain(rt))
}

#[test]
fn a_pass_that_fails_after_its_launch_is_never_submitted_again() {
    let _dog = Watchdog::new("pass_fails_after_launch", LIMIT);
    let want = one_execution();
    for pass in [0u32, 1, 2] {
        let rt = runtime(1);
        let app = RmwApp::setup(&rt);
        let _replay = ToolScript::passes_for("rmw", 3).install(&rt, policies()[0].clone());
        let f = rt.inject(A0, Fault::PassSubmitAfterLaunch { pass }, FaultMode::Once);
        let rec = app.run(&rt);
        assert_eq!(rt.fault_hits(f), 1);
        rt.wait_idle();
        assert_eq!(app.counter_value(&rt), 1, "pass {pass}: one execution");
        assert!(
            rt.read_u32s(app.buf, replay_tests::RMW_N).unwrap() == rmw_once(&RmwApp::initial()),
            "pass {pass}: the buffer holds more than one execution"
        );
        assert_matches_reference(&rt, &want);
        assert_outcome(&rec, Outcome::Truncated, Reason::SubmitFailed);
        // The failed pass ran: it is counted, and it is the dispatch's one execution.
        assert_eq!(rec.executed_passes, pass + 1, "pass {pass}: {rec}");
        finish(&rt);
        rt.shutdown();
    }
}

#[test]
fn a_silent_pass_that_fails_after_its_launch_is_never_submitted_again() {
    // PASS ENTER of pass 1 panics after memory was restored for it: the window runs pass 1
    // without the tool, and that submission fails after the launch.
    let _dog = Watchdog::new("silent_pass_fails_after_launch", LIMIT);
    let want = one_execution();
    let rt = runtime(1);
    let app = RmwApp::setup(&rt);
    let _replay = ToolScript::passes_for("rmw", 3)
        .panic_at(Point::PassEnter(1))
        .install(&rt, policies()[0].clone());
    rt.inject(
        A0,
        Fault::PassSubmitAfterLaunch { pass: 1 },
        FaultMode::Once,
    );
    let rec = app.run(&rt);
    rt.wait_idle();
    assert_eq!(app.counter_value(&rt), 1, "one execution");
    assert_matches_reference(&rt, &want);
    assert_eq!(rec.outcome, Outcome::Truncated, "{rec}");
    assert_eq!(rec.executed_passes, 2, "{rec}");
    finish(&rt);
}

#[test]
fn a_copy_in_flight_on_another_agents_engine_is_in_the_copy_fence() {
    // Before the window, agent 1's copy engine starts a copy into agent 0's memory, held there.
    // The window on agent 0 must wait for it in its copy fence; here it never finishes in
    // time, so the window declines and the copy lands once. Without that, the window would
    // replay while the copy is pending, and the copy released after pass 0 would be undone by
    // the restore.
    let _dog = Watchdog::new("foreign_copy_in_the_fence", LIMIT);
    let setup = |rt: &SimRuntime| {
        let app = RmwApp::setup(rt);
        let src = rt
            .alloc(replay_tests::A1, LEN, MemoryClass::DEVICE_COARSE)
            .unwrap();
        rt.fill(src, LEN as usize, 0xab).unwrap();
        let dst = rt.alloc(A0, LEN, MemoryClass::DEVICE_COARSE).unwrap();
        (app, src, dst)
    };
    let want = reference(2, |rt| {
        let (app, src, dst) = setup(rt);
        let c = rt.copy_async(replay_tests::A1, dst, src, LEN).unwrap();
        app.run_plain(rt);
        c.wait().unwrap();
    });
    let rt = runtime(2);
    let (app, src, dst) = setup(&rt);
    let released = Arc::new(Mutex::new(false));
    let pending: Arc<Mutex<Option<replay_mock::Completion>>> = Arc::default();
    let (r2, p2) = (Arc::clone(&released), Arc::clone(&pending));
    let _replay = ToolScript::passes_for("rmw", 3)
        .on(At::PassExit, move |rt, p| {
            if p.current_pass == 0 {
                // Let the pending copy land now, before the restore.
                rt.gpu().release_stalls();
                if let Some(c) = p2.lock().as_ref() {
                    c.wait_wall(LOOK);
                }
                *r2.lock() = true;
            }
        })
        .install(&rt, policies()[0].clone());
    let f = rt.inject(replay_tests::A1, Fault::AppCopyStuck, FaultMode::Once);
    let copy = rt.copy_async(replay_tests::A1, dst, src, LEN).unwrap();
    *pending.lock() = Some(copy.clone());
    let rec = app.run(&rt);
    copy.wait().unwrap();
    assert_eq!((rt.fault_hits(f), copy.fired()), (1, 1));
    assert!(
        rt.read(dst, LEN as usize).unwrap() == vec![0xab; LEN as usize],
        "the copy's bytes were lost"
    );
    assert_matches_reference(&rt, &want);
    assert_outcome(&rec, Outcome::Declined, Reason::CopyFenceStuck);
    assert!(!*released.lock(), "a pass ran while the copy was pending");
    finish(&rt);
}
