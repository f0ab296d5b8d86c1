//! Declines: every reason a window gives up before its first pass (admission, planning, stuck
//! drains, a failed capture, failing callbacks, a refused first pass). Each leaves the dispatch
//! to run exactly once, ordinarily: the application must not notice a window that never ran.

use std::sync::Arc;

use replay_core::*;
use replay_mock::double::{FakeClock, ToolScript};

use crate::harness::{
    agent, agent_with, assert_declined, dispatch, memory, plan_of, policy, push, snap, strs,
    two_passes, AgentScript, Harness, Log, MockAgent, MockMemory, MockSnap, AGENT,
};

#[test]
fn admission_declines_before_any_drain() {
    let cases: Vec<(SnapshotPlan, Policy, Reason)> = vec![
        (
            SnapshotPlan {
                unseen_writes: Some("writes a CUDA array through a surface object".into()),
                uncapturable: Some("argument points into IPC memory".into()),
                ..plan_of(10)
            },
            policy(),
            Reason::UnseenWrites,
        ),
        (
            SnapshotPlan {
                uncapturable: Some("argument points into IPC memory".into()),
                ..plan_of(10)
            },
            policy(),
            Reason::UntrackedMemory,
        ),
        (
            SnapshotPlan {
                untracked: UntrackedSummary {
                    vmem_bytes: 4096,
                    vmem_regions: 1,
                    ..Default::default()
                },
                ..plan_of(10)
            },
            // The old behaviour, now asked for: mappings are captured by default.
            Policy {
                decline_on_vmem: true,
                ..policy()
            },
            Reason::UntrackedMemory,
        ),
        (
            SnapshotPlan {
                untracked: UntrackedSummary {
                    bytes: 4096,
                    regions: 1,
                    ..Default::default()
                },
                ..plan_of(10)
            },
            Policy {
                decline_on_untracked: true,
                ..policy()
            },
            Reason::UntrackedMemory,
        ),
        (
            SnapshotPlan {
                capacity_bytes: 9,
                ..plan_of(10)
            },
            policy(),
            Reason::FootprintBudget,
        ),
        (
            plan_of(10),
            Policy {
                max_snapshot_bytes: 9,
                ..policy()
            },
            Reason::FootprintBudget,
        ),
    ];
    for (plan, pol, reason) in cases {
        let h = Harness::with_policy(two_passes(), pol);
        let a = agent(&h);
        let m = memory(&h, plan, None);
        let log = assert_declined(&h, &a, &m, reason);
        assert_eq!(
            log,
            strs(&[
                "CONFIG ENTER",
                "plan all",
                &format!("CONFIG EXIT declined {}", reason.as_str()),
                "ordinary"
            ])
        );
    }
}

#[test]
fn untracked_memory_is_admitted_unless_the_policy_declines_it() {
    let h = Harness::with_policy(
        two_passes(),
        Policy {
            decline_on_vmem: false,
            ..policy()
        },
    );
    let a = agent(&h);
    let plan = SnapshotPlan {
        untracked: UntrackedSummary {
            bytes: 10,
            regions: 1,
            vmem_bytes: 20,
            vmem_regions: 2,
        },
        ..plan_of(10)
    };
    let m = memory(&h, plan, Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(rec.outcome, Outcome::Replayed);
    assert_eq!((rec.untracked_bytes, rec.untracked_regions), (30, 3));
}

#[test]
fn planning_failure_declines_snapshot_failed() {
    let h = Harness::new(two_passes());
    let a = agent(&h);
    let mut m = MockMemory::new();
    m.expect_plan().returning(|_, _, _| {
        Err(BackendError::new(
            BackendErrorKind::Other,
            AGENT,
            "enumerate",
            "loader busy",
        ))
    });
    m.expect_capture().never();
    m.expect_pooled_peak_bytes().return_const(0u64);
    assert_declined(&h, &a, &m, Reason::SnapshotFailed);
}

#[test]
fn stuck_drains_decline_at_their_deadline_on_virtual_time() {
    for (ticket, reason, drains) in [
        (1, Reason::QueueDrainStuck, 1),
        (2, Reason::AgentDrainStuck, 2),
        (3, Reason::CopyFenceStuck, 3),
    ] {
        let h = Harness::new(two_passes());
        let a = agent_with(
            &h,
            AgentScript {
                stuck_drain: Some(ticket),
                ..Default::default()
            },
        );
        let m = memory(&h, plan_of(10), None);
        let before = h.clock.now();
        let log = assert_declined(&h, &a, &m, reason);
        let waited = h.clock.now() - before;
        // The bound is the policy's drain timeout, measured on the fake clock.
        assert!(waited >= policy().drain_timeout, "{waited:?}");
        assert!(
            waited <= policy().drain_timeout + policy().poll_slice,
            "{waited:?}"
        );
        assert_eq!(
            log.iter().filter(|e| e.starts_with("drain ")).count(),
            drains
        );
        assert!(log.contains(&format!("abandon {ticket}")), "{log:?}");
    }
}

#[test]
fn capture_failure_declines_snapshot_failed() {
    let h = Harness::new(two_passes());
    let a = agent(&h);
    let mut m = MockMemory::new();
    m.expect_plan().returning(|_, _, _| Ok(plan_of(10)));
    m.expect_capture().times(1).returning(|_, _, _| {
        Err(SnapshotError {
            message: "out of backing memory".into(),
        })
    });
    m.expect_pooled_peak_bytes().return_const(0u64);
    let log = assert_declined(&h, &a, &m, Reason::SnapshotFailed);
    assert_eq!(log.iter().filter(|e| e.starts_with("drain")).count(), 3);
}

#[test]
fn callback_failures_before_the_first_pass_decline() {
    for (panic_at, passes) in [(("CONFIG ENTER", 0), Some(2)), (("PASS ENTER", 0), Some(2))] {
        let h = Harness::new(ToolScript {
            passes,
            panic_at: Some(panic_at),
            ..Default::default()
        });
        let a = agent(&h);
        let snapshot = (panic_at.0 == "PASS ENTER").then(|| {
            let mut s = MockSnap::new();
            s.expect_stats().return_const(CaptureStats::default());
            s.expect_restore().never();
            s
        });
        let m = memory(&h, plan_of(10), snapshot);
        if panic_at.0 == "CONFIG ENTER" {
            let mut m = MockMemory::new();
            m.expect_plan().never();
            assert_declined(&h, &a, &m, Reason::CallbackFailed);
        } else {
            assert_declined(&h, &a, &m, Reason::CallbackFailed);
        }
    }
}

#[test]
fn a_panicking_pass_count_callback_declines() {
    let clock = Arc::new(FakeClock::default());
    let svc = ReplayService::new(policy(), clock, Arc::new(NoContextControl));
    let log: Log = Arc::default();
    let l = log.clone();
    let t: Arc<dyn ReplayTool> = Arc::new(
        move |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData| {
            if (op, ph) == (Operation::Config, Phase::Enter) {
                p.replay_pass_count = Some(Arc::new(|_, _| panic!("bad pass count")));
            }
            if let Some(o) = p.outcome {
                push(&l, format!("exit {}", o.reason.as_str()));
            }
        },
    );
    svc.configure(ContextId(1), Subscription::CONFIG, t)
        .unwrap();
    svc.start().unwrap();
    let mut a = MockAgent::new();
    a.expect_id().return_const(AGENT);
    a.expect_submit_ordinary().times(1).returning(|_| Ok(()));
    let mut m = MockMemory::new();
    m.expect_plan().never();
    let rec = svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(
        (rec.outcome, rec.reason),
        (Outcome::Declined, Reason::CallbackFailed)
    );
    assert_eq!(*log.lock(), strs(&["exit callback_failed"]));
}

#[test]
fn a_refused_first_pass_declines_and_runs_once() {
    let h = Harness::new(two_passes());
    let a = agent_with(
        &h,
        AgentScript {
            fail_submit_pass: Some(0),
            ..Default::default()
        },
    );
    let mut s = MockSnap::new();
    s.expect_stats().return_const(CaptureStats::default());
    s.expect_restore().never();
    let m = memory(&h, plan_of(10), Some(s));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(
        (rec.outcome, rec.reason),
        (Outcome::Declined, Reason::SubmitFailed)
    );
    let log = h.log();
    assert_eq!(
        &log[log.len() - 2..],
        &strs(&["CONFIG EXIT declined submit_failed", "ordinary"])[..]
    );
}
