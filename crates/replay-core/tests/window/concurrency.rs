//! Other threads and the tool's own work around a window: nothing deadlocks on the writer
//! lock, the tool's launches run at once, forwarded application work is deferred rather than
//! blocked or run inside the window, and a write gate taken before a window opens holds it
//! off.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::*;
use replay_mock::double::ToolScript;

use crate::harness::{
    agent, dispatch, memory, plan_of, policy, push, snap, strs, two_passes, Backend, Harness, Log,
    Log3, MockAgent, MockMemory, AGENT,
};

#[test]
fn tool_work_from_a_callback_runs_once_without_the_lock() {
    // The tool launches a kernel from PASS ENTER, on its own thread and through a runtime
    // thread (forwarded origin). Neither may deadlock on the window's writer lock.
    let backend: Backend = Arc::default();
    let b2 = backend.clone();
    let h = Harness::custom(policy(), move |weak, l| {
        Arc::new(
            move |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData| {
                if (op, ph) == (Operation::Config, Phase::Enter) {
                    p.replay_pass_count = Some(Arc::new(|_, _| 2));
                }
                if (op, ph) == (Operation::Pass, Phase::Enter) && p.current_pass == 0 {
                    let svc = weak.upgrade().unwrap();
                    let (a, m) = b2.lock().clone().unwrap();
                    let r = svc.submit(&*a, &*m, dispatch("tool_kernel")).unwrap();
                    push(&l, format!("same thread: {:?}", r.record.map(|r| r.reason)));
                    let r = std::thread::spawn(move || {
                        let mut d = dispatch("tool_kernel");
                        d.origin = Origin::RuntimeThread;
                        svc.submit(&*a, &*m, d).unwrap()
                    })
                    .join()
                    .unwrap();
                    push(&l, format!("forwarded: {:?}", r.record.map(|r| r.reason)));
                }
            },
        )
    });
    let a = Arc::new(agent(&h));
    let m = Arc::new(memory(&h, plan_of(10), Some(snap(&h.log, 10))));
    *backend.lock() = Some((a.clone(), m.clone()));
    let rec = h
        .svc
        .submit(&*a, &*m, dispatch("k"))
        .unwrap()
        .record
        .unwrap();
    *backend.lock() = None;
    assert_eq!(rec.outcome, Outcome::Replayed);
    let log = h.log();
    let i = log.iter().position(|e| e == "capture").unwrap();
    assert_eq!(
        &log[i + 1..i + 6],
        &strs(&[
            "ordinary",
            "same thread: Some(ReentrantDispatch)",
            "ordinary",
            "forwarded: Some(ReentrantDispatch)",
            "submit pass 0",
        ])[..]
    );
    let s = h.svc.summary();
    assert_eq!(s.declined.get("reentrant_dispatch"), Some(&2));
    assert_eq!(s.replayed, 1);
}

#[test]
fn ordinary_dispatches_from_other_threads_wait_for_the_window() {
    let h = Arc::new(Harness::new(ToolScript {
        passes: Some(3),
        ..Default::default()
    }));
    let a = Arc::new(agent(&h));
    // The other thread's submission is not a candidate: it never reaches the memory layer.
    let m = Arc::new(MockMemory::new());
    let other: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
    // A second service user: the application's other thread submits while pass 0 runs.
    let (h2, a2, m2, o2) = (h.clone(), a.clone(), m.clone(), other.clone());
    let log = h.log.clone();
    let mut s = snap(&h.log, 10);
    s.checkpoint();
    s.expect_stats().return_const(CaptureStats::default());
    let mut first = true;
    s.expect_check_scope().returning(move |_| {
        if std::mem::take(&mut first) {
            let (h3, a3, m3) = (h2.clone(), a2.clone(), m2.clone());
            *o2.lock() = Some(std::thread::spawn(move || {
                // Not a candidate (a copy), so it is an ordinary submission.
                let mut d = dispatch("other");
                d.kind = SubmissionKind::Copy;
                h3.svc.submit(&*a3, &*m3, d).unwrap();
            }));
            std::thread::sleep(Duration::from_millis(20));
        }
        push(&log, "check scope");
        Ok(ScopeCheck::Clean)
    });
    let l = h.log.clone();
    s.expect_restore().returning(move |_| {
        push(&l, "restore");
        Ok(RestoreStats::default())
    });
    let m = memory(&h, plan_of(10), Some(s));
    h.svc.submit(&*a, &m, dispatch("k")).unwrap();
    other.lock().take().unwrap().join().unwrap();
    let log = h.log();
    assert_eq!(log.last().unwrap(), "ordinary", "{log:?}");
    assert_eq!(log[log.len() - 2], "signal completion", "{log:?}");
}

#[test]
fn forwarded_submissions_never_block_on_a_window() {
    // While a window holds the agent, a forwarded application dispatch (ordinary or candidate)
    // is deferred, not submitted and not blocked; forwarded tool work runs at once.
    let seen: Log3 = Arc::default();
    let backend: Backend = Arc::default();
    let (b2, s2) = (backend.clone(), seen.clone());
    let h = Harness::custom(policy(), move |weak, _| {
        Arc::new(
            move |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData| {
                if (op, ph) == (Operation::Config, Phase::Enter)
                    && &*p.dispatch_info.kernel_name == "k"
                {
                    p.replay_pass_count = Some(Arc::new(|_, _| 2));
                }
                if (op, ph) == (Operation::Pass, Phase::Enter) && p.current_pass == 0 {
                    let svc = weak.upgrade().unwrap();
                    let Some((a, m)) = b2.lock().clone() else {
                        return;
                    };
                    let s3 = s2.clone();
                    std::thread::spawn(move || {
                        for (name, kind, origin) in [
                            ("copy", SubmissionKind::Copy, Origin::ForwardedApplication),
                            (
                                "cand",
                                SubmissionKind::KernelDispatch,
                                Origin::ForwardedApplication,
                            ),
                            (
                                "tool",
                                SubmissionKind::KernelDispatch,
                                Origin::ForwardedToolWork,
                            ),
                        ] {
                            let mut d = dispatch(name);
                            d.kind = kind;
                            d.origin = origin;
                            let r = svc.submit(&*a, &*m, d).unwrap();
                            s3.lock().push((
                                name.to_string(),
                                r.deferred,
                                r.record.map(|r| r.reason),
                            ));
                        }
                    })
                    .join()
                    .unwrap();
                }
            },
        )
    });
    let a = Arc::new(agent(&h));
    let m = Arc::new(memory(&h, plan_of(10), Some(snap(&h.log, 10))));
    *backend.lock() = Some((a.clone(), m.clone()));
    let rec = h
        .svc
        .submit(&*a, &*m, dispatch("k"))
        .unwrap()
        .record
        .unwrap();
    *backend.lock() = None;
    assert_eq!(rec.outcome, Outcome::Replayed);
    assert_eq!(
        *seen.lock(),
        vec![
            ("copy".to_string(), true, None),
            ("cand".to_string(), true, None),
            ("tool".to_string(), false, Some(Reason::ReentrantDispatch)),
        ]
    );
    // Only the tool work ran inside the window.
    assert_eq!(h.log().iter().filter(|e| *e == "ordinary").count(), 1);
    // Once the window is over, a forwarded candidate runs its own window.
    let mut d = dispatch("k");
    d.origin = Origin::ForwardedApplication;
    let r = h
        .svc
        .submit(&*a, &memory(&h, plan_of(10), Some(snap(&h.log, 10))), d)
        .unwrap();
    assert!(!r.deferred);
    assert_eq!(r.record.unwrap().outcome, Outcome::Replayed);
}

#[test]
fn a_write_gate_taken_while_inactive_holds_off_a_window_that_starts_meanwhile() {
    // A write checked the gate while the service was off (no lock taken), then the service
    // started and a window opened before the write finished its submission: the window waits
    // for it before planning and draining.
    let h = Harness::new(two_passes());
    h.svc.stop().unwrap();
    thread_local! {
        static WRITE: std::cell::RefCell<Option<WriteGate>> = const { std::cell::RefCell::new(None) };
    }
    let write = h.svc.enter_write(AGENT);
    assert!(!write.is_held());
    WRITE.with(|w| *w.borrow_mut() = Some(write));
    h.svc.start().unwrap();
    let log = h.log.clone();
    // The window waits on this thread: its first sleep ends the write.
    h.clock.on_sleep(move || {
        push(&log, "write submitted");
        WRITE.with(|w| w.borrow_mut().take());
    });
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(rec.outcome, Outcome::Replayed);
    let log = h.log();
    let at = |e: &str| log.iter().position(|x| x == e);
    assert!(
        at("write submitted").is_some(),
        "the window did not wait: {log:?}"
    );
    assert!(at("write submitted") < at("plan all"), "{log:?}");
    assert!(at("plan all") < at("drain queue drain"), "{log:?}");
}

#[test]
fn a_write_that_never_finishes_declines_the_window_before_any_drain() {
    let h = Harness::new(two_passes());
    h.svc.stop().unwrap();
    let write = h.svc.enter_write(AGENT);
    h.svc.start().unwrap();
    let a = agent(&h);
    let m = memory(&h, plan_of(10), None);
    let before = h.clock.now();
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    drop(write);
    assert_eq!(
        (rec.outcome, rec.reason, rec.executed_passes),
        (Outcome::Declined, Reason::AgentDrainStuck, 1)
    );
    assert!(h.clock.now() - before >= policy().drain_timeout);
    let log = h.log();
    assert!(!log.iter().any(|e| e.starts_with("drain")), "{log:?}");
    assert_eq!(log.last().unwrap(), "ordinary", "{log:?}");
}

#[test]
fn stopping_inside_a_forwarded_candidates_window_keeps_its_gate_closed() {
    // A forwarded candidate holds the writer lock from before CONFIG ENTER. The tool stops the
    // service there; other threads then find the gate closed: a gated write gets no gate, and
    // a forwarded copy is deferred rather than run inside the window.
    let seen: Log = Arc::default();
    let backend: Backend = Arc::default();
    let (b2, s2) = (backend.clone(), seen.clone());
    let h = Harness::custom(policy(), move |weak, _| {
        Arc::new(
            move |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData| {
                if (op, ph) != (Operation::Config, Phase::Enter)
                    || &*p.dispatch_info.kernel_name != "k"
                {
                    return;
                }
                p.replay_pass_count = Some(Arc::new(|_, _| 2));
                let svc = weak.upgrade().unwrap();
                svc.stop().unwrap();
                let Some((a, m)) = b2.lock().clone() else {
                    return;
                };
                let s3 = s2.clone();
                std::thread::spawn(move || {
                    let gate = svc.try_enter_write(AGENT).map(|g| g.is_held());
                    push(&s3, format!("write gate: {gate:?}"));
                    let mut d = dispatch("copy");
                    d.kind = SubmissionKind::Copy;
                    d.origin = Origin::ForwardedApplication;
                    let r = svc.submit(&*a, &*m, d).unwrap();
                    push(&s3, format!("copy deferred: {}", r.deferred));
                })
                .join()
                .unwrap();
            },
        )
    });
    let a = Arc::new(agent(&h));
    let m = Arc::new(memory(&h, plan_of(10), Some(snap(&h.log, 10))));
    *backend.lock() = Some((a.clone(), m.clone()));
    let mut d = dispatch("k");
    d.origin = Origin::ForwardedApplication;
    let r = h.svc.submit(&*a, &*m, d).unwrap();
    *backend.lock() = None;
    assert!(!r.deferred);
    assert_eq!(r.record.unwrap().outcome, Outcome::Replayed);
    assert_eq!(
        *seen.lock(),
        strs(&["write gate: None", "copy deferred: true"])
    );
    assert!(!h.log().iter().any(|e| e == "ordinary"));
    assert_eq!(h.svc.open_windows(), 0);
}

#[test]
fn a_kernel_submitted_while_inactive_holds_off_a_window_that_starts_meanwhile() {
    // A kernel read the service off and is still inside its ordinary submission when the
    // service starts and a window opens on its agent: the window waits for that submission
    // before planning and draining, so the drain covers the kernel (before, the kernel's
    // inactive path was not counted and the window went on without it).
    let h = Harness::new(two_passes());
    h.svc.stop().unwrap();
    let (inside_tx, inside_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release = Arc::new(Mutex::new(Some(release_tx)));
    let mut slow = MockAgent::new();
    slow.expect_id().return_const(AGENT);
    slow.expect_capabilities()
        .return_const(Capabilities::empty());
    let log = h.log.clone();
    slow.expect_submit_ordinary().returning(move |_| {
        inside_tx.send(()).unwrap();
        release_rx.recv().unwrap();
        push(&log, "kernel submitted");
        Ok(())
    });
    let quiet = memory(&h, plan_of(10), None);
    std::thread::scope(|s| {
        let early = s.spawn(|| {
            h.svc
                .submit(&slow, &quiet, dispatch("early"))
                .unwrap()
                .record
        });
        inside_rx.recv().unwrap();
        h.svc.start().unwrap();
        // The window waits on this thread: its first sleep lets the kernel's submission end.
        let r = Arc::clone(&release);
        h.clock.on_sleep(move || {
            if let Some(tx) = r.lock().take() {
                tx.send(()).unwrap();
            }
        });
        let a = agent(&h);
        let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
        let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
        assert_eq!(rec.outcome, Outcome::Replayed);
        // Without the wait the kernel is still blocked here: let it end so the test ends.
        if let Some(tx) = release.lock().take() {
            tx.send(()).unwrap();
        }
        assert!(
            early.join().unwrap().is_none(),
            "an ordinary dispatch has no record"
        );
    });
    let log = h.log();
    let at = |e: &str| log.iter().position(|x| x == e);
    assert!(at("kernel submitted").is_some(), "{log:?}");
    assert!(
        at("kernel submitted") < at("plan all"),
        "the window did not wait for the kernel: {log:?}"
    );
    assert!(at("plan all") < at("drain queue drain"), "{log:?}");
}
