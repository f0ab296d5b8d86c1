//! The replay window (SPEC §6) against a mocked agent, snapshotter and snapshot (`mockall`) and
//! a fake clock: the order of calls, every decline, truncation and the abort.
//!
//! One test binary, its tests by subject in `tests/window/` over the shared `harness`. The two
//! abort tests stay at the root: each re-runs itself in a child process by its exact name,
//! which a module would prefix.

#[path = "window/harness.rs"]
mod harness;

#[path = "window/concurrency.rs"]
mod concurrency;
#[path = "window/declines.rs"]
mod declines;
#[path = "window/device_errors.rs"]
mod device_errors;
#[path = "window/passes.rs"]
mod passes;
#[path = "window/truncation.rs"]
mod truncation;
#[path = "window/user_data.rs"]
mod user_data;

use replay_core::*;
use replay_mock::double::ToolScript;

use crate::harness::{
    agent, agent_with, dispatch, memory, plan_of, snap, AgentScript, Harness, MockSnap,
};

/// Runs test `name` of this binary in a child process with `env` set (the child's part of the
/// test then runs and must abort); checks it died of SIGABRT and returns its stderr.
fn abort_in_child(name: &str, env: &str) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(env, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{stderr}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(6), "SIGABRT expected: {stderr}");
    }
    stderr
}

#[test]
fn restore_failure_aborts_naming_dispatch_and_region() {
    if std::env::var_os("KREPLAY_TEST_CHILD").is_some() {
        let h = Harness::new(ToolScript {
            passes: Some(3),
            ..Default::default()
        });
        let a = agent(&h);
        let mut s = MockSnap::new();
        s.expect_stats().return_const(CaptureStats::default());
        s.expect_check_scope().returning(|_| Ok(ScopeCheck::Clean));
        s.expect_restore().returning(|_| {
            Err(RestoreError {
                base: 0x7f00_1000,
                size: 4096,
                message: "copy engine error".into(),
                cause: Some(BackendErrorKind::CopyFailed),
            })
        });
        let m = memory(&h, plan_of(10), Some(s));
        let _ = h.svc.submit(&a, &m, dispatch("rmw_kernel"));
        unreachable!("a failed restore must abort");
    }
    let stderr = abort_in_child(
        "restore_failure_aborts_naming_dispatch_and_region",
        "KREPLAY_TEST_CHILD",
    );
    assert!(stderr.contains("FATAL: restore failed"), "{stderr}");
    assert!(stderr.contains("dispatch 1"), "{stderr}");
    assert!(stderr.contains("rmw_kernel"), "{stderr}");
    assert!(
        stderr.contains("region 0x7f001000 (4096 bytes)"),
        "{stderr}"
    );
}

#[test]
fn restored_memory_that_nothing_can_consume_aborts() {
    // A later pass is refused after memory was restored for it, and the ordinary run that
    // would consume the restored inputs is refused too: memory cannot be repaired.
    if std::env::var_os("KREPLAY_TEST_CHILD_UNREPAIRABLE").is_some() {
        let h = Harness::new(ToolScript {
            passes: Some(3),
            ..Default::default()
        });
        let a = agent_with(
            &h,
            AgentScript {
                fail_submit_pass: Some(1),
                fail_ordinary: true,
                ..Default::default()
            },
        );
        let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
        let _ = h.svc.submit(&a, &m, dispatch("rmw_kernel"));
        unreachable!("unrepairable memory must abort");
    }
    let stderr = abort_in_child(
        "restored_memory_that_nothing_can_consume_aborts",
        "KREPLAY_TEST_CHILD_UNREPAIRABLE",
    );
    assert!(stderr.contains("FATAL: dispatch 1"), "{stderr}");
    assert!(stderr.contains("rmw_kernel"), "{stderr}");
    assert!(stderr.contains("cannot be repaired"), "{stderr}");
}
