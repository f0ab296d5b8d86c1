//! Truncations: a window that fails after a pass ran ends there, with no restore after the
//! last pass, the completion signalled once and no pass submitted twice, and the kernel is
//! remembered where its next window would fail the same way (a stall, a write outside the
//! scope).

use replay_core::*;
use replay_mock::double::ToolScript;

use crate::harness::{
    agent, agent_with, assert_declined, assert_truncated, dispatch, memory, plan_of, policy, push,
    snap, strs, AgentScript, Harness, MockMemory, MockSnap, AGENT, KERNEL,
};

#[test]
fn a_stuck_pass_truncates_and_the_kernel_is_not_replayed_again() {
    let h = Harness::new(ToolScript {
        passes: Some(4),
        ..Default::default()
    });
    let a = agent_with(
        &h,
        AgentScript {
            stuck_pass: Some(1),
            ..Default::default()
        },
    );
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let before = h.clock.now();
    let log = assert_truncated(&h, &a, &m, Reason::PassDrainStuck, 2);
    assert!(h.clock.now() - before >= policy().pass_timeout);
    assert!(log.contains(&"abandon 101".to_string()));
    // A stalled pass gets no PASS EXIT.
    assert!(!log.contains(&"PASS EXIT 1".to_string()), "{log:?}");
    assert_eq!(h.svc.kernel_memo(&KERNEL), Some(KernelMemo::NoReplay));

    // The next dispatch of the kernel declines before any drain.
    let a = agent(&h);
    let mut m = MockMemory::new();
    m.expect_plan().never();
    m.expect_pooled_peak_bytes().return_const(0u64);
    let log = assert_declined(&h, &a, &m, Reason::PassDrainStuck);
    assert!(!log.iter().any(|e| e.starts_with("drain")));
    // Unloading the code object forgets it.
    h.svc.forget_code_object(AGENT, KERNEL.code_object);
    assert_eq!(h.svc.kernel_memo(&KERNEL), None);
}

#[test]
fn callback_failures_after_a_pass_truncate() {
    // PASS EXIT of pass 1 panics: pass 1 ran, nothing is restored after it.
    let h = Harness::new(ToolScript {
        passes: Some(4),
        panic_at: Some(("PASS EXIT", 1)),
        ..Default::default()
    });
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    assert_truncated(&h, &a, &m, Reason::CallbackFailed, 2);

    // The continue callback breaks the contract with a negative answer after pass 0.
    let h = Harness::new(ToolScript {
        passes: Some(4),
        continue_answers: Some(vec![-5]),
        ..Default::default()
    });
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    assert_truncated(&h, &a, &m, Reason::CallbackFailed, 1);
}

#[test]
fn a_pass_enter_failure_after_a_restore_still_runs_the_pass_once() {
    let h = Harness::new(ToolScript {
        passes: Some(4),
        panic_at: Some(("PASS ENTER", 2)),
        ..Default::default()
    });
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let log = assert_truncated(&h, &a, &m, Reason::CallbackFailed, 3);
    // Memory was restored for pass 2, so pass 2 runs, without the tool.
    let i = log.iter().position(|e| e == "PASS ENTER 2").unwrap();
    assert_eq!(log[i + 1], "submit pass 2");
    assert!(!log.contains(&"PASS EXIT 2".to_string()));
}

#[test]
fn a_refused_later_pass_falls_back_to_the_ordinary_run() {
    let h = Harness::new(ToolScript {
        passes: Some(4),
        ..Default::default()
    });
    let a = agent_with(
        &h,
        AgentScript {
            fail_submit_pass: Some(1),
            ..Default::default()
        },
    );
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(
        (rec.outcome, rec.reason),
        (Outcome::Truncated, Reason::SubmitFailed)
    );
    assert_eq!(rec.executed_passes, 2);
    let log = h.log();
    // Restored memory is consumed by the ordinary run, which carries the completion itself.
    let tail = &log[log
        .iter()
        .position(|e| e == "submit pass 1 refused")
        .unwrap()..];
    assert_eq!(
        tail,
        &strs(&[
            "submit pass 1 refused",
            "ordinary",
            "CONFIG EXIT truncated submit_failed"
        ])[..]
    );
}

#[test]
fn a_write_outside_the_scope_truncates_and_forces_scope_all() {
    let h = Harness::with_policy(
        ToolScript {
            passes: Some(4),
            ..Default::default()
        },
        Policy {
            scope: Scope::Arguments,
            ..policy()
        },
    );
    let a = agent(&h);
    let mut s = snap(&h.log, 10);
    s.checkpoint();
    s.expect_stats().return_const(CaptureStats::default());
    let mut n = 0;
    let l = h.log.clone();
    s.expect_check_scope().returning(move |_| {
        n += 1;
        push(&l, "check scope");
        Ok(if n == 2 {
            ScopeCheck::Changed { base: 0xdead000 }
        } else {
            ScopeCheck::Clean
        })
    });
    let l = h.log.clone();
    s.expect_restore().returning(move |_| {
        push(&l, "restore");
        Ok(RestoreStats::default())
    });
    let m = memory(&h, plan_of(10), Some(s));
    let log = assert_truncated(&h, &a, &m, Reason::WriteOutsideScope, 2);
    assert_eq!(log[1], "plan arguments");
    assert_eq!(h.svc.kernel_memo(&KERNEL), Some(KernelMemo::ForceScopeAll));

    // Later dispatches of the kernel are planned with scope all.
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(rec.outcome, Outcome::Replayed);
    assert_eq!(rec.scope, Scope::All);
    assert_eq!(h.log()[1], "plan all");
}

#[test]
fn a_failed_scope_check_truncates() {
    let h = Harness::new(ToolScript {
        passes: Some(3),
        ..Default::default()
    });
    let a = agent(&h);
    let mut s = MockSnap::new();
    s.expect_stats().return_const(CaptureStats::default());
    s.expect_check_scope().returning(|_| {
        Err(BackendError::new(
            BackendErrorKind::CopyFailed,
            AGENT,
            "digest",
            "fence error",
        ))
    });
    s.expect_restore().never();
    let m = memory(&h, plan_of(10), Some(s));
    assert_truncated(&h, &a, &m, Reason::ScopeCheckFailed, 1);
}

#[test]
fn a_pass_that_fails_after_its_launch_is_counted_and_never_submitted_again() {
    for pass in [0u32, 1, 2] {
        let h = Harness::new(ToolScript {
            passes: Some(3),
            ..Default::default()
        });
        let a = agent_with(
            &h,
            AgentScript {
                after_submit_pass: Some(pass),
                ..Default::default()
            },
        );
        let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
        let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
        let log = h.log();
        assert!(!log.iter().any(|e| e.starts_with("ordinary")), "{log:?}");
        let i = log
            .iter()
            .position(|e| e.ends_with("launched, then failed"))
            .unwrap();
        // No PASS EXIT, no restore, no further submission: CONFIG EXIT, then the one
        // completion, ordered after the pass that may be running.
        assert_eq!(
            &log[i + 1..],
            &strs(&["CONFIG EXIT truncated submit_failed", "signal completion"])[..],
            "pass {pass}: {log:?}"
        );
        assert_eq!(
            (rec.outcome, rec.reason, rec.executed_passes),
            (Outcome::Truncated, Reason::SubmitFailed, pass + 1)
        );
        assert_eq!(rec.pass_gpu_seconds.len(), pass as usize);
    }
}

#[test]
fn an_ordinary_run_that_fails_after_its_launch_consumes_the_restored_memory() {
    // A later pass is refused after memory was restored for it; the ordinary run that replaces
    // it reaches the device and then reports failure. It runs with its own completion: no
    // abort, no second submission, no extra completion.
    let h = Harness::new(ToolScript {
        passes: Some(3),
        ..Default::default()
    });
    let a = agent_with(
        &h,
        AgentScript {
            fail_submit_pass: Some(1),
            ordinary_after_submit: true,
            ..Default::default()
        },
    );
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(
        (rec.outcome, rec.reason, rec.executed_passes),
        (Outcome::Truncated, Reason::SubmitFailed, 2)
    );
    let log = h.log();
    let i = log
        .iter()
        .position(|e| e == "submit pass 1 refused")
        .unwrap();
    assert_eq!(
        &log[i..],
        &strs(&[
            "submit pass 1 refused",
            "ordinary launched, then failed",
            "CONFIG EXIT truncated submit_failed"
        ])[..]
    );
}
