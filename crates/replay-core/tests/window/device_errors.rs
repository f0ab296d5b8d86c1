//! Device errors told from stalls and from failed restores: a fault in a pass, a sticky error
//! on a pending ordered restore, a lost context or a drain that cannot run ends the window
//! `device_error` (or `agent_busy`) instead of aborting the process or blaming a stuck queue,
//! and a kernel that merely faulted is replayed next time.

use replay_core::*;
use replay_mock::double::ToolScript;

use crate::harness::{
    agent, agent_with, dispatch, memory, plan_of, push, snap, AgentScript, Harness, Log, MockMemory,
};

/// How [`OrderedSnap`]'s restores end.
#[derive(Debug, Clone, Copy, Default)]
struct RestoreScript {
    /// Restores are ordered on the device (left pending until completed).
    ordered: bool,
    /// `complete_restore` reports an error of this kind.
    complete_fails: Option<BackendErrorKind>,
    /// `restore` (on the host) reports an error of this kind.
    restore_fails: Option<BackendErrorKind>,
}

/// A snapshot whose restores are ordered on the device (or not) and fail as scripted.
struct OrderedSnap {
    log: Log,
    script: RestoreScript,
    ordered: bool,
    pending: bool,
}

impl Snapshot for OrderedSnap {
    fn stats(&self) -> CaptureStats {
        CaptureStats::default()
    }
    fn check_scope(&mut self, _: &WaitSpec<'_>) -> Result<ScopeCheck, BackendError> {
        Ok(ScopeCheck::Clean)
    }
    fn restore(&mut self, _: &WaitSpec<'_>) -> Result<RestoreStats, RestoreError> {
        if let Some(kind) = self.script.restore_fails {
            push(&self.log, "restore failed");
            return Err(RestoreError {
                base: 0x1000,
                size: 64,
                message: "the copy failed".into(),
                cause: Some(kind),
            });
        }
        push(&self.log, "restore");
        self.pending = self.ordered;
        Ok(RestoreStats::default())
    }
    fn order_restores(&mut self, on: bool) -> bool {
        self.ordered = on && self.script.ordered;
        self.ordered
    }
    fn restore_pending(&self) -> bool {
        self.pending
    }
    fn complete_restore(&mut self, _: &WaitSpec<'_>) -> Result<bool, RestoreError> {
        if !std::mem::take(&mut self.pending) {
            return Ok(true);
        }
        match self.script.complete_fails {
            Some(kind) => {
                push(&self.log, "restore fence failed");
                Err(RestoreError {
                    base: 0x1000,
                    size: 64,
                    message: "the fence reported an error".into(),
                    cause: Some(kind),
                })
            }
            None => {
                push(&self.log, "restore complete");
                Ok(true)
            }
        }
    }
}

/// A memory layer whose one capture is an [`OrderedSnap`].
fn ordered_memory(h: &Harness, script: RestoreScript) -> MockMemory {
    let mut m = MockMemory::new();
    m.expect_plan().returning(|_, scope, _| {
        let mut p = plan_of(64);
        p.scope = scope;
        Ok(p)
    });
    let log = h.log.clone();
    m.expect_capture().times(1).returning(move |_, _, _| {
        Ok(Box::new(OrderedSnap {
            log: log.clone(),
            script,
            ordered: false,
            pending: false,
        }))
    });
    m.expect_pooled_peak_bytes().return_const(0u64);
    m
}

fn three_passes() -> Harness {
    Harness::new(ToolScript {
        passes: Some(3),
        ..Default::default()
    })
}

/// Issue 24 item 6: a device fault in pass 1 (a sticky error), with the restore ordered
/// before it still pending, ends the window `device_error` instead of aborting with "restore
/// failed": the restore is skipped, the application's completion is signalled once.
#[test]
fn a_fault_in_a_later_pass_with_an_ordered_restore_pending_truncates_without_aborting() {
    let h = three_passes();
    let a = agent_with(
        &h,
        AgentScript {
            caps: Some(Capabilities::ORDERED_RESTORE),
            fail_poll_pass: Some((1, BackendErrorKind::DeviceLost)),
            ..Default::default()
        },
    );
    let m = ordered_memory(
        &h,
        RestoreScript {
            ordered: true,
            complete_fails: Some(BackendErrorKind::DeviceLost),
            ..Default::default()
        },
    );
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(
        (rec.outcome, rec.reason, rec.executed_passes),
        (Outcome::Truncated, Reason::DeviceError, 2)
    );
    let log = h.log();
    assert!(log.contains(&"restore fence failed".to_string()), "{log:?}");
    assert!(!log.iter().any(|l| l == "submit pass 2"), "{log:?}");
    assert_eq!(log.last().unwrap(), "signal completion", "{log:?}");
}

/// Issue 24 item 6: a sticky error reported by the fence of a pending restore (another
/// thread's fault lost the context) after the pass completed does not abort either.
#[test]
fn a_sticky_error_on_a_pending_restore_after_its_pass_completed_does_not_abort() {
    let h = three_passes();
    let a = agent_with(
        &h,
        AgentScript {
            caps: Some(Capabilities::ORDERED_RESTORE),
            ..Default::default()
        },
    );
    let m = ordered_memory(
        &h,
        RestoreScript {
            ordered: true,
            complete_fails: Some(BackendErrorKind::DeviceLost),
            ..Default::default()
        },
    );
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(
        (rec.outcome, rec.reason, rec.executed_passes),
        (Outcome::Truncated, Reason::DeviceError, 2)
    );
    assert!(!h.log().iter().any(|l| l == "submit pass 2"));
}

/// Issue 24 item 6: a restore on the host that fails because the context is lost (the
/// driver's teardown while the process exits reports `DEINITIALIZED`) ends the window: no
/// abort, no further pass.
#[test]
fn a_host_restore_in_a_lost_context_truncates_without_aborting() {
    let h = three_passes();
    let a = agent(&h);
    let m = ordered_memory(
        &h,
        RestoreScript {
            restore_fails: Some(BackendErrorKind::DeviceLost),
            ..Default::default()
        },
    );
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(
        (rec.outcome, rec.reason, rec.executed_passes),
        (Outcome::Truncated, Reason::DeviceError, 1)
    );
    let log = h.log();
    assert!(!log.iter().any(|l| l == "submit pass 1"), "{log:?}");
    assert_eq!(log.last().unwrap(), "signal completion", "{log:?}");
}

/// Issue 24 item 6: a poll that reports an error is not a timeout: `device_error`, not
/// `pass_drain_stuck`, and the kernel is not remembered as one that stalls (its next dispatch
/// replays).
#[test]
fn a_pass_poll_error_is_told_from_a_timeout() {
    let h = three_passes();
    let a = agent_with(
        &h,
        AgentScript {
            fail_poll_pass: Some((1, BackendErrorKind::Other)),
            ..Default::default()
        },
    );
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(
        (rec.outcome, rec.reason, rec.executed_passes),
        (Outcome::Truncated, Reason::DeviceError, 2)
    );
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!((rec.outcome, rec.reason), (Outcome::Replayed, Reason::None));
}

/// Issue 24 item 6 and the HSA contention item: a drain whose backend reports a lost context
/// declines `device_error`, one the backend cannot run because another window held the agent
/// declines `agent_busy`; neither is `queue_drain_stuck`.
#[test]
fn drain_errors_are_told_from_a_stuck_drain() {
    for (kind, reason) in [
        (BackendErrorKind::DeviceLost, Reason::DeviceError),
        (BackendErrorKind::Busy, Reason::AgentBusy),
        (BackendErrorKind::Other, Reason::QueueDrainStuck),
    ] {
        let h = three_passes();
        let a = agent_with(
            &h,
            AgentScript {
                fail_queue_drain: Some(kind),
                ..Default::default()
            },
        );
        let m = memory(&h, plan_of(10), None);
        let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
        assert_eq!(
            (rec.outcome, rec.reason),
            (Outcome::Declined, reason),
            "{kind:?}"
        );
        assert_eq!(h.log().last().unwrap(), "ordinary");
    }
}
