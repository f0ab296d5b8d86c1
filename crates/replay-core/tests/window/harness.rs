//! The mocks and the harness every window test builds on: the mocked agent logs each call
//! and checks that the writer lock is held while it drains and runs passes, so a test reads the
//! window's order of calls from one log; the decline and truncation contracts are checked in
//! one place so that every test holds each outcome to the same rules.

use std::sync::Arc;
use std::time::Duration;

use mockall::mock;
use parking_lot::Mutex;
use replay_core::*;
use replay_mock::double::{FakeClock, ScriptedTool, ToolLog, ToolScript};

mock! {
    pub Agent {}
    impl Agent for Agent {
        fn id(&self) -> AgentId;
        fn capabilities(&self) -> Capabilities;
        fn begin_drain(&self, target: DrainTarget) -> Result<Ticket, BackendError>;
        fn poll_drain(&self, ticket: Ticket, budget: Duration) -> Result<bool, BackendError>;
        fn submit_pass(&self, dispatch: &Dispatch, pass: u32) -> Result<Ticket, BackendError>;
        fn poll_pass(&self, ticket: Ticket, budget: Duration) -> Result<Option<PassCompletion>, BackendError>;
        fn abandon(&self, ticket: Ticket);
        fn flush_caches(&self) -> Result<(), BackendError>;
        fn submit_ordinary(&self, dispatch: &Dispatch) -> Result<(), BackendError>;
        fn signal_completion(&self, dispatch: &Dispatch) -> Result<(), BackendError>;
    }
}

mock! {
    pub Memory {}
    impl Snapshotter for Memory {
        fn plan(&self, dispatch: &Dispatch, scope: Scope, policy: &Policy) -> Result<SnapshotPlan, BackendError>;
        fn capture<'a>(&self, plan: &SnapshotPlan, policy: &Policy, wait: &WaitSpec<'a>) -> Result<Box<dyn Snapshot>, SnapshotError>;
        fn pooled_peak_bytes(&self) -> u64;
    }
}

mock! {
    pub Snap {}
    impl Snapshot for Snap {
        fn stats(&self) -> CaptureStats;
        fn check_scope<'a>(&mut self, wait: &WaitSpec<'a>) -> Result<ScopeCheck, BackendError>;
        fn restore<'a>(&mut self, wait: &WaitSpec<'a>) -> Result<RestoreStats, RestoreError>;
    }
}

pub type Log = ToolLog;

pub fn push(log: &Log, s: impl Into<String>) {
    log.lock().push(s.into());
}

pub const AGENT: AgentId = AgentId(7);
pub const KERNEL: KernelKey = KernelKey {
    agent: AGENT,
    code_object: 11,
    symbol: 12,
};

pub fn dispatch(name: &str) -> Dispatch {
    Dispatch {
        info: DispatchInfo::new(
            AGENT,
            QueueId(3),
            KernelId(12),
            name,
            Dim3::new(256, 1, 1),
            Dim3::new(64, 1, 1),
        ),
        kernel: KERNEL,
        kind: SubmissionKind::KernelDispatch,
        kernarg: Default::default(),
        arg_layout: Default::default(),
        origin: Origin::SubmittingThread,
        handle: 99,
    }
}

pub fn policy() -> Policy {
    Policy {
        drain_timeout: Duration::from_secs(2),
        pass_timeout: Duration::from_secs(3),
        poll_slice: Duration::from_millis(100),
        ..Policy::default()
    }
}

pub fn plan_of(bytes: u64) -> SnapshotPlan {
    SnapshotPlan {
        scope: Scope::All,
        tracked_bytes: bytes,
        captured_bytes: bytes,
        capacity_bytes: 1 << 40,
        ..Default::default()
    }
}

/// The scripted tool, logging into `log`.
pub fn tool(log: Log, script: ToolScript) -> Arc<dyn ReplayTool> {
    ScriptedTool::new(log, script)
}

pub struct Harness {
    pub svc: Arc<ReplayService>,
    pub clock: Arc<FakeClock>,
    pub log: Log,
}

impl Harness {
    pub fn new(script: ToolScript) -> Self {
        Self::with_policy(script, policy())
    }

    pub fn with_policy(script: ToolScript, policy: Policy) -> Self {
        Self::custom(policy, |_, log| tool(log, script))
    }

    /// A harness whose tool `make` builds from the service (weakly) and the log.
    pub fn custom(
        policy: Policy,
        make: impl FnOnce(std::sync::Weak<ReplayService>, Log) -> Arc<dyn ReplayTool>,
    ) -> Self {
        let clock = Arc::new(FakeClock::default());
        let svc = Arc::new(ReplayService::new(
            policy,
            clock.clone(),
            Arc::new(NoContextControl),
        ));
        let log: Log = Arc::default();
        svc.configure(
            ContextId(1),
            Subscription::CONFIG | Subscription::PASS,
            make(Arc::downgrade(&svc), log.clone()),
        )
        .unwrap();
        svc.start().unwrap();
        Self { svc, clock, log }
    }

    pub fn log(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock())
    }
}

/// Faults the mocked agent plays.
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentScript {
    pub stuck_drain: Option<u64>,
    pub stuck_pass: Option<u32>,
    pub fail_submit_pass: Option<u32>,
    /// `submit_pass` of this pass reaches the device, then fails (`AfterSubmit`).
    pub after_submit_pass: Option<u32>,
    pub fail_ordinary: bool,
    /// `submit_ordinary` reaches the device, then fails (`AfterSubmit`).
    pub ordinary_after_submit: bool,
    pub flush: bool,
    /// What `capabilities` answers (default: none).
    pub caps: Option<Capabilities>,
    /// The wait for this pass reports an error of this kind (not a timeout).
    pub fail_poll_pass: Option<(u32, BackendErrorKind)>,
    /// The queue drain cannot begin: an error of this kind.
    pub fail_queue_drain: Option<BackendErrorKind>,
}

fn drain_ticket(t: DrainTarget) -> u64 {
    match t {
        DrainTarget::Queue(_) => 1,
        DrainTarget::Agent => 2,
        DrainTarget::CopyFence => 3,
    }
}

/// An agent whose drains and passes complete at once, logging every call; checks the writer
/// lock is held while it drains and runs passes.
pub fn agent(h: &Harness) -> MockAgent {
    agent_with(h, AgentScript::default())
}

pub fn agent_with(h: &Harness, s: AgentScript) -> MockAgent {
    let mut a = MockAgent::new();
    a.expect_id().return_const(AGENT);
    a.expect_capabilities()
        .return_const(s.caps.unwrap_or(Capabilities::empty()));
    let (log, gate) = (h.log.clone(), h.svc.agent_gate(AGENT));
    a.expect_begin_drain().returning(move |t| {
        assert!(
            gate.lock.is_locked_exclusive(),
            "drain without the writer lock"
        );
        push(&log, format!("drain {}", t.as_str()));
        if let (DrainTarget::Queue(_), Some(kind)) = (t, s.fail_queue_drain) {
            return Err(BackendError::new(kind, AGENT, "queue drain", "scripted"));
        }
        Ok(Ticket(drain_ticket(t)))
    });
    let slice = policy().poll_slice;
    a.expect_poll_drain().returning(move |t, budget| {
        assert!(budget <= slice, "a poll longer than the slice");
        Ok(Some(t.0) != s.stuck_drain)
    });
    let (log, gate) = (h.log.clone(), h.svc.agent_gate(AGENT));
    a.expect_submit_pass().returning(move |d, pass| {
        assert!(
            gate.lock.is_locked_exclusive(),
            "pass without the writer lock"
        );
        assert_eq!(d.handle, 99);
        if s.fail_submit_pass == Some(pass) {
            push(&log, format!("submit pass {pass} refused"));
            return Err(BackendError::new(
                BackendErrorKind::Other,
                AGENT,
                "submit pass",
                "ring full",
            ));
        }
        if s.after_submit_pass == Some(pass) {
            push(&log, format!("submit pass {pass} launched, then failed"));
            return Err(BackendError::new(
                BackendErrorKind::AfterSubmit,
                AGENT,
                "submit pass",
                "the doorbell was rung, then the completion setup failed",
            ));
        }
        push(&log, format!("submit pass {pass}"));
        Ok(Ticket(100 + u64::from(pass)))
    });
    a.expect_poll_pass().returning(move |t, _| {
        let pass = (t.0 - 100) as u32;
        if s.stuck_pass == Some(pass) {
            return Ok(None);
        }
        if let Some((p, kind)) = s.fail_poll_pass {
            if p == pass {
                return Err(BackendError::new(
                    kind,
                    AGENT,
                    "poll pass",
                    "an illegal memory access was encountered",
                ));
            }
        }
        Ok(Some(PassCompletion {
            gpu_seconds: f64::from(pass + 1) * 1e-3,
        }))
    });
    let log = h.log.clone();
    a.expect_submit_ordinary().returning(move |_| {
        if s.fail_ordinary {
            push(&log, "ordinary refused");
            return Err(BackendError::new(
                BackendErrorKind::Other,
                AGENT,
                "submit",
                "ring full",
            ));
        }
        if s.ordinary_after_submit {
            push(&log, "ordinary launched, then failed");
            return Err(BackendError::new(
                BackendErrorKind::AfterSubmit,
                AGENT,
                "submit",
                "the doorbell was rung, then the bookkeeping failed",
            ));
        }
        push(&log, "ordinary");
        Ok(())
    });
    let log = h.log.clone();
    a.expect_signal_completion().returning(move |_| {
        push(&log, "signal completion");
        Ok(())
    });
    let log = h.log.clone();
    if s.stuck_drain.is_some() || s.stuck_pass.is_some() || s.fail_poll_pass.is_some() {
        a.expect_abandon().times(1).returning(move |t| {
            push(&log, format!("abandon {}", t.0));
        });
    } else {
        a.expect_abandon().never();
    }
    let log = h.log.clone();
    if s.flush {
        a.expect_flush_caches().returning(move || {
            push(&log, "flush");
            Ok(())
        });
    } else {
        a.expect_flush_caches().never();
    }
    a
}

/// A snapshot that captures `bytes` and restores them.
pub fn snap(log: &Log, bytes: u64) -> MockSnap {
    let mut s = MockSnap::new();
    s.expect_stats().return_const(CaptureStats {
        captured_bytes: bytes,
        captured_regions: 2,
        tier_bytes: TierBytes {
            device: bytes,
            ..Default::default()
        },
        skipped_regions: 0,
        seconds: 0.5,
    });
    let l = log.clone();
    s.expect_check_scope().returning(move |_| {
        push(&l, "check scope");
        Ok(ScopeCheck::Clean)
    });
    let l = log.clone();
    s.expect_restore().returning(move |_| {
        push(&l, "restore");
        Ok(RestoreStats {
            compared_bytes: 0,
            restored_bytes: bytes,
            seconds: 0.25,
        })
    });
    s
}

/// A memory layer that plans `plan` and captures a [`snap`].
pub fn memory(h: &Harness, plan: SnapshotPlan, snapshot: Option<MockSnap>) -> MockMemory {
    let mut m = MockMemory::new();
    let (log, gate) = (h.log.clone(), h.svc.agent_gate(AGENT));
    m.expect_plan().returning(move |_, scope, _| {
        assert!(
            gate.lock.is_locked_exclusive(),
            "admission without the writer lock"
        );
        push(&log, format!("plan {}", scope.as_str()));
        let mut p = plan.clone();
        p.scope = scope;
        Ok(p)
    });
    let log = h.log.clone();
    match snapshot {
        None => {
            m.expect_capture().never();
        }
        Some(snapshot) => {
            let snapshot = Mutex::new(Some(snapshot));
            m.expect_capture().times(1).returning(move |_, _, _| {
                push(&log, "capture");
                Ok(Box::new(snapshot.lock().take().expect("one capture")))
            });
        }
    }
    m.expect_pooled_peak_bytes().return_const(4096u64);
    m
}

pub fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Runs one dispatch expected to decline; checks the common decline contract.
pub fn assert_declined(h: &Harness, a: &MockAgent, m: &MockMemory, reason: Reason) -> Vec<String> {
    let rec = h.svc.submit(a, m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!((rec.outcome, rec.reason), (Outcome::Declined, reason));
    assert_eq!(rec.executed_passes, 1);
    let log = h.log();
    let exit = format!("CONFIG EXIT declined {}", reason.as_str());
    assert_eq!(
        log.iter().filter(|e| *e == "ordinary").count(),
        1,
        "exactly one ordinary run: {log:?}"
    );
    assert!(!log.iter().any(|e| e == "signal completion"), "{log:?}");
    assert_eq!(log[log.len() - 2], exit, "{log:?}");
    assert_eq!(log.last().unwrap(), "ordinary");
    assert!(!h.svc.agent_gate(AGENT).lock.is_locked());
    assert_eq!(h.svc.summary().declined.get(reason.as_str()), Some(&1));
    log
}

pub fn two_passes() -> ToolScript {
    ToolScript {
        passes: Some(2),
        ..Default::default()
    }
}

/// Runs one dispatch expected to truncate; the completion is signalled exactly once, after
/// CONFIG EXIT, and no restore follows the last executed pass.
pub fn assert_truncated(
    h: &Harness,
    a: &MockAgent,
    m: &MockMemory,
    reason: Reason,
    executed: u32,
) -> Vec<String> {
    let rec = h.svc.submit(a, m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!((rec.outcome, rec.reason), (Outcome::Truncated, reason));
    assert_eq!(rec.executed_passes, executed);
    let log = h.log();
    let last_pass = log
        .iter()
        .rposition(|e| e.starts_with("submit pass"))
        .unwrap();
    assert!(
        !log[last_pass..].iter().any(|e| e == "restore"),
        "a restore after the last pass: {log:?}"
    );
    assert_eq!(log.iter().filter(|e| *e == "signal completion").count(), 1);
    assert_eq!(
        &log[log.len() - 2..],
        &[
            format!("CONFIG EXIT truncated {}", reason.as_str()),
            "signal completion".to_string()
        ][..]
    );
    assert!(!log.iter().any(|e| e == "ordinary"), "{log:?}");
    assert_eq!(h.svc.summary().truncated.get(reason.as_str()), Some(&1));
    log
}

pub type Backend = Arc<Mutex<Option<(Arc<MockAgent>, Arc<MockMemory>)>>>;
/// (kernel, deferred, reason) per forwarded submission.
pub type Log3 = Arc<Mutex<Vec<(String, bool, Option<Reason>)>>>;
