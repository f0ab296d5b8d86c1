//! Restores ordered on the device ahead of the next pass (SPEC §6 step 8, issue 15): the window
//! and the memory engine over an agent that claims `ORDERED_RESTORE` and a fake device memory
//! that orders work after a fence. The host waits once per pass; frees of captured memory wait
//! for the restore's copies on the device; a fence that fails when completed (after a pass, or
//! when the loop ends) aborts, and so does a pass done before its restore; every way out of
//! the loop completes the pending restore; PASS ENTER's sync waits for the device.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::{
    AgentId, Capabilities, Clock, ContextId, Dim3, Dispatch, DispatchInfo, KernelId, KernelKey,
    MemoryClass, NoContextControl, Operation, Origin, Outcome, OutcomeRecord, Phase, Policy,
    QueueId, Reason, ReplayService, ReplayTool, RestoreMode, Scope, SubmissionKind, Subscription,
};
use replay_memory::{MemoryEngine, NoModuleVariables, Tracker};
use replay_mock::double::{
    FakeClock, FakeDeviceMemory, InstantAgent, PassFault, ScriptedTool, ToolHook, ToolScript,
};

const A: AgentId = AgentId(0);
const BASE: u64 = 0x1000_0000;

struct Env {
    clock: Arc<FakeClock>,
    tracker: Arc<Tracker>,
    dev: Arc<FakeDeviceMemory>,
    engine: MemoryEngine,
    svc: ReplayService,
    tool: Arc<ScriptedTool>,
}

fn env(passes: u64) -> Env {
    let clock = Arc::new(FakeClock::default());
    let tracker = Arc::new(Tracker::new());
    let dev = Arc::new(FakeDeviceMemory::new(
        A,
        Arc::clone(&clock),
        [Some(1 << 30), Some(1 << 30), Some(1 << 30)],
    ));
    dev.st.lock().ordering = true;
    dev.app_alloc(&tracker, BASE, 64 << 10, MemoryClass::DEVICE_COARSE);
    let engine = MemoryEngine::new(
        A,
        Arc::clone(&tracker),
        Arc::clone(&dev) as Arc<dyn replay_core::DeviceMemory>,
        Arc::new(NoModuleVariables),
    )
    .with_host_available_bytes(1 << 30);
    let svc = ReplayService::new(
        Policy {
            scope: Scope::All,
            restore: RestoreMode::Full,
            drain_timeout: Duration::from_millis(200),
            pass_timeout: Duration::from_millis(200),
            poll_slice: Duration::from_millis(10),
            ..Policy::default()
        },
        Arc::clone(&clock) as Arc<dyn replay_core::Clock>,
        Arc::new(NoContextControl),
    );
    let tool = ScriptedTool::new(
        Arc::default(),
        ToolScript {
            passes: Some(passes),
            ..Default::default()
        },
    );
    svc.configure(
        ContextId(1),
        Subscription::CONFIG | Subscription::PASS,
        Arc::clone(&tool) as Arc<dyn ReplayTool>,
    )
    .unwrap();
    svc.start().unwrap();
    Env {
        clock,
        tracker,
        dev,
        engine,
        svc,
        tool,
    }
}

fn dispatch() -> Dispatch {
    Dispatch {
        info: DispatchInfo::new(
            A,
            QueueId(1),
            KernelId(5),
            "ordered_kernel",
            Dim3::new(1, 1, 1),
            Dim3::new(1, 1, 1),
        ),
        kernel: KernelKey {
            agent: A,
            code_object: 1,
            symbol: 5,
        },
        kind: SubmissionKind::KernelDispatch,
        kernarg: BASE.to_le_bytes().to_vec().into(),
        arg_layout: Default::default(),
        origin: Origin::SubmittingThread,
        handle: 1,
    }
}

impl Env {
    fn run(&self, agent: &InstantAgent) -> OutcomeRecord {
        self.svc
            .submit(agent, &self.engine, dispatch())
            .unwrap()
            .record
            .expect("a candidate dispatch has a record")
    }

    /// Whether the last fence made (at a pass's submission: its restore's) is ordered and was
    /// never waited for on the host.
    fn last_fence_unwaited(&self) -> bool {
        let st = self.dev.st.lock();
        st.ordered.contains(&st.last_fence) && !st.polls.contains(&st.last_fence)
    }

    fn ordered_left(&self) -> usize {
        self.dev.st.lock().ordered.len()
    }
}

fn ordered_agent() -> InstantAgent {
    InstantAgent::new(A).capabilities(Capabilities::ORDERED_RESTORE)
}

#[test]
fn the_host_waits_once_per_pass_when_the_agent_orders_restores() {
    let e = Arc::new(env(4));
    // At each pass after the first, its restore's fence is ordered and not waited for.
    let seen: Arc<Mutex<Vec<(u32, bool)>>> = Arc::default();
    let (s, e2) = (Arc::clone(&seen), Arc::clone(&e));
    let agent = ordered_agent().on_submit(move |_, pass| {
        if let Some(p) = pass.filter(|&p| p > 0) {
            s.lock().push((p, e2.last_fence_unwaited()));
        }
    });
    let rec = e.run(&agent);
    assert_eq!(
        (rec.outcome, rec.executed_passes),
        (Outcome::Replayed, 4),
        "{rec}"
    );
    assert_eq!(*seen.lock(), vec![(1, true), (2, true), (3, true)]);
    assert_eq!(rec.restored_bytes, 3 * (64 << 10));
    assert_eq!(e.ordered_left(), 0, "each ordered restore was completed");
    // Each restore fence was polled after its pass: once, and done.
    let st = e.dev.st.lock();
    let copies = st.polls.iter().filter(|f| st.ordered.contains(f)).count();
    assert_eq!(copies, 0);
    drop(st);

    // Without the capability the same loop waits for each restore before its pass.
    let e = Arc::new(env(4));
    let seen: Arc<Mutex<Vec<(u32, bool)>>> = Arc::default();
    let (s, e2) = (Arc::clone(&seen), Arc::clone(&e));
    let agent = InstantAgent::new(A).on_submit(move |_, pass| {
        if let Some(p) = pass.filter(|&p| p > 0) {
            s.lock().push((p, e2.last_fence_unwaited()));
        }
    });
    let rec = e.run(&agent);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    assert_eq!(*seen.lock(), vec![(1, false), (2, false), (3, false)]);
}

#[test]
fn a_device_that_cannot_order_leaves_restores_on_the_host() {
    let e = Arc::new(env(3));
    e.dev.st.lock().ordering = false;
    let seen: Arc<Mutex<Vec<bool>>> = Arc::default();
    let (s, e2) = (Arc::clone(&seen), Arc::clone(&e));
    let agent = ordered_agent().on_submit(move |_, pass| {
        if pass.is_some_and(|p| p > 0) {
            let st = e2.dev.st.lock();
            s.lock().push(st.polls.contains(&st.last_fence));
        }
    });
    let rec = e.run(&agent);
    assert_eq!(
        (rec.outcome, rec.executed_passes),
        (Outcome::Replayed, 3),
        "{rec}"
    );
    assert_eq!(*seen.lock(), vec![true, true], "waited for on the host");
}

#[test]
fn a_free_during_an_ordered_restore_waits_for_its_copies_on_the_device() {
    let e = Arc::new(env(3));
    // The restore's copies stay in flight on the device until the test lets them finish.
    e.dev.st.lock().stuck_ordered = true;
    let checked = Arc::new(AtomicBool::new(false));
    let (e2, c2) = (Arc::clone(&e), Arc::clone(&checked));
    let agent = ordered_agent().on_submit(move |_, pass| {
        if pass != Some(1) {
            return;
        }
        // Another thread frees the captured region while the restore before pass 1 runs.
        let freed = Arc::new(AtomicBool::new(false));
        let (e3, f3) = (Arc::clone(&e2), Arc::clone(&freed));
        let t = std::thread::spawn(move || {
            e3.dev.app_free(&e3.tracker, BASE);
            f3.store(true, Ordering::SeqCst);
        });
        let until = Instant::now() + Duration::from_secs(10);
        while e2.tracker.waiting_releases() == 0 && Instant::now() < until {
            std::thread::yield_now();
        }
        assert_eq!(e2.tracker.waiting_releases(), 1, "the free waits");
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !freed.load(Ordering::SeqCst),
            "not before the copies are done"
        );
        // The copies complete on the device: the free proceeds, before the window has
        // polled the fence (the pass has not even run).
        e2.dev.st.lock().stuck_ordered = false;
        t.join().unwrap();
        assert!(freed.load(Ordering::SeqCst));
        assert!(
            e2.last_fence_unwaited(),
            "the window has not completed the restore"
        );
        c2.store(true, Ordering::SeqCst);
    });
    let rec = e.run(&agent);
    assert!(checked.load(Ordering::SeqCst), "the hook ran at pass 1");
    assert_eq!(
        (rec.outcome, rec.executed_passes),
        (Outcome::Replayed, 3),
        "{rec}"
    );
    // The freed region is not restored again.
    assert_eq!(
        rec.pass_restored_bytes.to_vec(),
        vec![0, 64 << 10, 0],
        "{rec}"
    );
    assert_eq!(e.ordered_left(), 0);
}

#[test]
fn every_way_out_of_the_loop_completes_the_pending_restore() {
    for (fault, reason, passes) in [
        (PassFault::Refused, Reason::SubmitFailed, 3),
        (PassFault::AfterSubmit, Reason::SubmitFailed, 3),
        (PassFault::Stuck, Reason::PassDrainStuck, 3),
    ] {
        let e = env(4);
        let agent = ordered_agent().fail_pass(2, fault);
        let rec = e.run(&agent);
        assert_eq!(
            (rec.outcome, rec.reason, rec.executed_passes),
            (Outcome::Truncated, reason, passes),
            "{fault:?}: {rec}"
        );
        assert_eq!(e.ordered_left(), 0, "{fault:?}: completed");
        let st = e.dev.st.lock();
        assert!(st.polls.contains(&st.last_fence), "{fault:?}: polled");
        drop(st);
        if fault == PassFault::Refused {
            assert_eq!(agent.ordinary(), 1, "the ordinary run consumed the restore");
        }
        // Nothing holds the region any more: a free does not wait.
        assert!(!free_waits(&e), "{fault:?}");
    }

    // PASS ENTER fails after a restore: the silent pass runs and completes it.
    let e = env(4);
    e.tool.set_script(ToolScript {
        passes: Some(4),
        panic_at: Some(("PASS ENTER", 2)),
        ..Default::default()
    });
    let rec = e.run(&ordered_agent());
    assert_eq!(
        (rec.outcome, rec.reason, rec.executed_passes),
        (Outcome::Truncated, Reason::CallbackFailed, 3),
        "{rec}"
    );
    assert_eq!(e.ordered_left(), 0);

    // A stuck restore behind a stuck pass: abandoned, bounded, and the truncation stands.
    let e = env(4);
    let e = Arc::new(e);
    let e2 = Arc::clone(&e);
    let agent = ordered_agent()
        .fail_pass(1, PassFault::Stuck)
        .on_submit(move |_, pass| {
            if pass == Some(1) {
                e2.dev.st.lock().stuck_ordered = true;
            }
        });
    let start = e.clock.now();
    let rec = e.run(&agent);
    assert_eq!(
        (rec.outcome, rec.reason, rec.executed_passes),
        (Outcome::Truncated, Reason::PassDrainStuck, 2),
        "{rec}"
    );
    assert_eq!(
        e.dev.st.lock().abandoned,
        1,
        "the restore's fence is abandoned"
    );
    assert!(e.clock.now() - start < Duration::from_secs(1), "bounded");
    assert_eq!(e.engine.quarantined_bytes(), 64 << 10, "its blocks leak");
}

#[test]
fn pass_enter_can_wait_for_the_ordered_restore() {
    let e = Arc::new(env(3));
    let seen: Arc<Mutex<Vec<(u32, bool, bool)>>> = Arc::default();
    let (s, e2) = (Arc::clone(&seen), Arc::clone(&e));
    let hook: ToolHook = Arc::new(move |op, ph, p, _| {
        if (op, ph) != (Operation::Pass, Phase::Enter) {
            return;
        }
        // Still in flight: the sync times out (bounded) and says so.
        e2.dev.st.lock().stuck_ordered = p.current_pass > 0;
        let stuck = p.sync_memory().is_err();
        e2.dev.st.lock().stuck_ordered = false;
        let done = p.sync_memory().is_ok();
        s.lock().push((p.current_pass, stuck, done));
    });
    e.tool.set_hook(Some(hook));
    let rec = e.run(&ordered_agent());
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    assert_eq!(
        *seen.lock(),
        vec![(0, false, true), (1, true, true), (2, true, true)]
    );
}

#[test]
fn a_snapshot_dropped_with_a_restore_pending_ends_its_hold() {
    use replay_core::{Snapshot, Snapshotter};
    for stuck in [false, true] {
        let e = env(2);
        let policy = Policy {
            scope: Scope::All,
            restore: RestoreMode::Full,
            ..Policy::default()
        };
        let wait = e.clock.wait();
        let plan = e.engine.plan(&dispatch(), Scope::All, &policy).unwrap();
        let mut snap: Box<dyn Snapshot> = e.engine.capture(&plan, &policy, &wait).unwrap();
        assert!(snap.order_restores(true));
        e.dev.st.lock().stuck_ordered = stuck;
        snap.restore(&wait).unwrap();
        assert!(snap.restore_pending());
        // Dropped without completing it (a backend call panicked in the loop, say).
        drop(snap);
        assert_eq!(e.ordered_left(), 0, "stuck={stuck}");
        let leaked = if stuck { 64 << 10 } else { 0 };
        assert_eq!(e.engine.quarantined_bytes(), leaked, "stuck={stuck}");
        assert!(!free_waits(&e), "stuck={stuck}: no hold is left");
    }
}

/// Frees the captured region on another thread: whether the free had to wait for a hold.
fn free_waits(e: &Env) -> bool {
    e.tracker.set_release_wait_cap(Duration::from_secs(2));
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            e.dev.app_free(&e.tracker, BASE);
            done.store(true, Ordering::SeqCst);
        });
        let until = Instant::now() + Duration::from_secs(5);
        while !done.load(Ordering::SeqCst) && Instant::now() < until {
            if e.tracker.waiting_releases() > 0 {
                return true;
            }
            std::thread::yield_now();
        }
        false
    })
}

const ABORT_TEST: &str = "a_restore_fence_that_fails_when_completed_aborts";

#[test]
fn a_restore_fence_that_fails_when_completed_aborts() {
    if replay_tests::child_scenario().as_deref() == Some("ordered_fence_fail") {
        let e = env(3);
        e.dev.st.lock().fail_ordered_poll = true;
        let _ = e.run(&ordered_agent());
        println!("NOT ABORTED");
        std::process::exit(3);
    }
    let (_, stderr, context) =
        replay_tests::assert_aborted(&replay_tests::run_child(ABORT_TEST, "ordered_fence_fail"));
    assert!(stderr.contains("FATAL: restore failed"), "{context}");
    assert!(
        stderr.contains("dispatch 1 (kernel \"ordered_kernel\""),
        "{context}"
    );
    assert!(stderr.contains(&format!("region {BASE:#x}")), "{context}");
    assert!(stderr.contains("failed there"), "{context}");
}

const SETTLE_ABORT_TEST: &str = "a_restore_fence_that_fails_after_the_loop_ends_aborts";

#[test]
fn a_restore_fence_that_fails_after_the_loop_ends_aborts() {
    // The loop ends with a restore pending (pass 2 fails after its launch); the fence of that
    // restore reports an error when the window settles it: abort, not a truncation.
    if replay_tests::child_scenario().as_deref() == Some("ordered_settle_fail") {
        let e = Arc::new(env(4));
        let e2 = Arc::clone(&e);
        let agent = ordered_agent()
            .fail_pass(2, PassFault::AfterSubmit)
            .on_submit(move |_, pass| {
                if pass == Some(2) {
                    e2.dev.st.lock().fail_ordered_poll = true;
                }
            });
        let _ = e.run(&agent);
        println!("NOT ABORTED");
        std::process::exit(3);
    }
    let (_, stderr, context) = replay_tests::assert_aborted(&replay_tests::run_child(
        SETTLE_ABORT_TEST,
        "ordered_settle_fail",
    ));
    assert!(stderr.contains("FATAL: restore failed"), "{context}");
    assert!(
        stderr.contains("dispatch 1 (kernel \"ordered_kernel\""),
        "{context}"
    );
    assert!(stderr.contains(&format!("region {BASE:#x}")), "{context}");
}

const UNFINISHED_ABORT_TEST: &str = "a_pass_done_before_its_ordered_restore_aborts";

#[test]
fn a_pass_done_before_its_ordered_restore_aborts() {
    // The device reports pass 1 complete while the restore ordered before it is not: the
    // pass ran on memory no one can vouch for.
    if replay_tests::child_scenario().as_deref() == Some("ordered_unfinished") {
        let e = Arc::new(env(3));
        let e2 = Arc::clone(&e);
        let agent = ordered_agent().on_submit(move |_, pass| {
            if pass == Some(1) {
                e2.dev.st.lock().stuck_ordered = true;
            }
        });
        let _ = e.run(&agent);
        println!("NOT ABORTED");
        std::process::exit(3);
    }
    let (_, stderr, context) = replay_tests::assert_aborted(&replay_tests::run_child(
        UNFINISHED_ABORT_TEST,
        "ordered_unfinished",
    ));
    assert!(
        stderr.contains("FATAL: dispatch 1 (kernel \"ordered_kernel\""),
        "{context}"
    );
    assert!(
        stderr.contains("pass 1 completed but the restore ordered before it did not"),
        "{context}"
    );
}

// ----- On the simulator: real asynchrony ---------------------------------------------------

mod simulator {
    use super::*;
    use replay_mock::{AgentConfig, SIM_CAPABILITIES};
    use replay_tests::{
        assert_matches_reference, fast_policy, finish, reference, runtime_with, small_agent,
        RmwApp, ToolScript, A0,
    };

    #[test]
    fn memory_equals_one_execution_with_restores_ordered_on_the_device() {
        let once = reference(1, |rt| RmwApp::setup(rt).run_plain(rt));
        for restore in [RestoreMode::Full, RestoreMode::Dirty] {
            let agent = AgentConfig {
                capabilities: SIM_CAPABILITIES | Capabilities::ORDERED_RESTORE,
                ..small_agent()
            };
            let rt = runtime_with(&[agent]);
            let replay = ToolScript::passes(5).install(
                &rt,
                Policy {
                    restore,
                    ..fast_policy()
                },
            );
            let app = RmwApp::setup(&rt);
            // The copy engine takes its time over the first restore: a pass not ordered after
            // it would run on what the pass before it left.
            rt.memory(A0)
                .on_next_restore(|| std::thread::sleep(Duration::from_millis(30)));
            let rec = app.run(&rt);
            assert_eq!(
                (rec.outcome, rec.executed_passes),
                (Outcome::Replayed, 5),
                "{restore:?}: {rec}"
            );
            assert_eq!(replay.log.outcomes().last(), Some(&rec));
            let seen = app.seen();
            assert_eq!(seen.len(), 5, "{restore:?}");
            assert!(
                seen.windows(2).all(|w| w[0] == w[1]),
                "{restore:?}: every pass saw the restored inputs"
            );
            assert_eq!(
                rt.read_u32s(app.buf, replay_tests::RMW_N).unwrap(),
                replay_tests::rmw_once(&RmwApp::initial())
            );
            assert_eq!(app.counter_value(&rt), 1, "the atomic counter moved once");
            assert_matches_reference(&rt, &once);
            finish(&rt);
        }
    }
}
