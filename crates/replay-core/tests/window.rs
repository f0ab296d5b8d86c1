//! The replay window (SPEC §6) against a mocked agent, snapshotter and snapshot (`mockall`) and
//! a fake clock: the order of calls, every decline, truncation and the abort.

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

type Log = ToolLog;

fn push(log: &Log, s: impl Into<String>) {
    log.lock().push(s.into());
}

const AGENT: AgentId = AgentId(7);
const KERNEL: KernelKey = KernelKey {
    agent: AGENT,
    code_object: 11,
    symbol: 12,
};

fn dispatch(name: &str) -> Dispatch {
    Dispatch {
        info: DispatchInfo {
            agent: AGENT,
            queue: QueueId(3),
            dispatch_id: DispatchId(0),
            kernel_id: KernelId(12),
            kernel_name: name.into(),
            grid: Dim3::new(256, 1, 1),
            workgroup: Dim3::new(64, 1, 1),
            private_segment_size: 0,
            group_segment_size: 0,
        },
        kernel: KERNEL,
        kind: SubmissionKind::KernelDispatch,
        kernarg: Default::default(),
        arg_layout: Default::default(),
        origin: Origin::SubmittingThread,
        handle: 99,
    }
}

fn policy() -> Policy {
    Policy {
        drain_timeout: Duration::from_secs(2),
        pass_timeout: Duration::from_secs(3),
        poll_slice: Duration::from_millis(100),
        ..Policy::default()
    }
}

fn plan_of(bytes: u64) -> SnapshotPlan {
    SnapshotPlan {
        scope: Scope::All,
        tracked_bytes: bytes,
        captured_bytes: bytes,
        capacity_bytes: 1 << 40,
        ..Default::default()
    }
}

/// The scripted tool, logging into `log`.
fn tool(log: Log, script: ToolScript) -> Arc<dyn ReplayTool> {
    ScriptedTool::new(log, script)
}

struct Harness {
    svc: Arc<ReplayService>,
    clock: Arc<FakeClock>,
    log: Log,
}

impl Harness {
    fn new(script: ToolScript) -> Self {
        Self::with_policy(script, policy())
    }

    fn with_policy(script: ToolScript, policy: Policy) -> Self {
        Self::custom(policy, |_, log| tool(log, script))
    }

    /// A harness whose tool `make` builds from the service (weakly) and the log.
    fn custom(
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

    fn log(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock())
    }
}

/// Faults the mocked agent plays.
#[derive(Debug, Clone, Copy, Default)]
struct AgentScript {
    stuck_drain: Option<u64>,
    stuck_pass: Option<u32>,
    fail_submit_pass: Option<u32>,
    /// `submit_pass` of this pass reaches the device, then fails (`AfterSubmit`).
    after_submit_pass: Option<u32>,
    fail_ordinary: bool,
    /// `submit_ordinary` reaches the device, then fails (`AfterSubmit`).
    ordinary_after_submit: bool,
    flush: bool,
    /// What `capabilities` answers (default: none).
    caps: Option<Capabilities>,
    /// The wait for this pass reports an error of this kind (not a timeout).
    fail_poll_pass: Option<(u32, BackendErrorKind)>,
    /// The queue drain cannot begin: an error of this kind.
    fail_queue_drain: Option<BackendErrorKind>,
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
fn agent(h: &Harness) -> MockAgent {
    agent_with(h, AgentScript::default())
}

fn agent_with(h: &Harness, s: AgentScript) -> MockAgent {
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
fn snap(log: &Log, bytes: u64) -> MockSnap {
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
fn memory(h: &Harness, plan: SnapshotPlan, snapshot: Option<MockSnap>) -> MockMemory {
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

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn full_replay_calls_in_spec_order() {
    let h = Harness::new(ToolScript {
        passes: Some(3),
        ..Default::default()
    });
    let a = agent(&h);
    let m = memory(&h, plan_of(1 << 20), Some(snap(&h.log, 1 << 20)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(
        h.log(),
        strs(&[
            "CONFIG ENTER",
            "plan all",
            "drain queue drain",
            "drain agent drain",
            "drain copy fence",
            "capture",
            "PASS ENTER 0",
            "submit pass 0",
            "PASS EXIT 0",
            "check scope",
            "restore",
            "PASS ENTER 1",
            "submit pass 1",
            "PASS EXIT 1",
            "check scope",
            "restore",
            "PASS ENTER 2",
            "submit pass 2",
            "PASS EXIT 2",
            "check scope",
            "CONFIG EXIT replayed none",
            "signal completion",
        ])
    );
    assert_eq!(rec.outcome, Outcome::Replayed);
    assert_eq!(rec.reason, Reason::None);
    assert_eq!(rec.requested_passes, 3);
    assert_eq!(rec.executed_passes, 3);
    assert_eq!(rec.captured_bytes, 1 << 20);
    assert_eq!(rec.captured_regions, 2);
    assert_eq!(rec.restored_bytes, 2 << 20);
    assert_eq!(
        rec.pass_restored_bytes.as_slice(),
        &[0, 1 << 20, 1 << 20][..]
    );
    assert_eq!(rec.pass_gpu_seconds.len(), 3);
    assert!((rec.restore_seconds - 0.5).abs() < 1e-12);
    assert_eq!(rec.reentrancy, 0);
    let s = h.svc.summary();
    assert_eq!((s.dispatches, s.replayed, s.passes), (1, 1, 3));
    assert_eq!(s.peak_pooled_bytes, 4096);
    assert!(!h.svc.agent_gate(AGENT).lock.is_locked(), "lock released");
}

#[test]
fn no_pass_count_means_one_ordinary_run_without_snapshot() {
    for script in [
        ToolScript::default(),
        ToolScript {
            passes: Some(1),
            continue_answers: Some(vec![1]),
            ..Default::default()
        },
        ToolScript {
            passes: Some(0),
            ..Default::default()
        },
    ] {
        let h = Harness::new(script);
        let a = agent(&h);
        let mut m = MockMemory::new();
        m.expect_plan().never();
        m.expect_capture().never();
        let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
        assert_eq!(
            h.log(),
            strs(&["CONFIG ENTER", "CONFIG EXIT not_requested none", "ordinary"])
        );
        assert_eq!(rec.outcome, Outcome::NotRequested);
        assert_eq!(rec.executed_passes, 1);
    }
}

#[test]
fn inactive_service_filter_and_non_kernels_run_untouched() {
    let h = Harness::new(ToolScript {
        passes: Some(4),
        ..Default::default()
    });
    let a = agent(&h);
    let mut m = MockMemory::new();
    m.expect_plan().never();
    // A barrier is not a candidate.
    let mut d = dispatch("k");
    d.kind = SubmissionKind::Barrier;
    assert_eq!(h.svc.submit(&a, &m, d).unwrap().record, None);
    // Excluded by the filter.
    let mut p = policy();
    p.filter.exclude = vec!["skip_me".into()];
    h.svc.set_policy(p).unwrap();
    assert_eq!(
        h.svc.submit(&a, &m, dispatch("skip_me")).unwrap().record,
        None
    );
    // Inactive.
    h.svc.stop().unwrap();
    assert_eq!(h.svc.submit(&a, &m, dispatch("k")).unwrap().record, None);
    assert_eq!(h.log(), strs(&["ordinary", "ordinary", "ordinary"]));
    assert_eq!(h.svc.summary().dispatches, 0);
}

#[test]
fn only_one_owner_even_after_stop() {
    let h = Harness::new(ToolScript::default());
    h.svc.stop().unwrap();
    let err = h
        .svc
        .configure(
            ContextId(2),
            Subscription::CONFIG,
            tool(h.log.clone(), ToolScript::default()),
        )
        .unwrap_err();
    assert_eq!(
        err,
        ServiceError::AlreadyConfigured {
            owner: ContextId(1)
        }
    );
    assert!(err.to_string().contains("already configured"));
    let fresh = ReplayService::new(
        Policy::default(),
        Arc::new(FakeClock::default()),
        Arc::new(NoContextControl),
    );
    assert_eq!(fresh.start(), Err(ServiceError::NotConfigured));
}

#[test]
fn a_context_without_config_subscription_cannot_start_replay() {
    let clock = Arc::new(FakeClock::default());
    let svc = ReplayService::new(policy(), clock, Arc::new(NoContextControl));
    let log: Log = Arc::default();
    svc.configure(
        ContextId(1),
        Subscription::PASS,
        tool(
            log.clone(),
            ToolScript {
                passes: Some(3),
                ..Default::default()
            },
        ),
    )
    .unwrap();
    svc.start().unwrap();
    let mut a = MockAgent::new();
    a.expect_id().return_const(AGENT);
    a.expect_submit_ordinary().times(1).returning(|_| Ok(()));
    let m = MockMemory::new();
    assert_eq!(svc.submit(&a, &m, dispatch("k")).unwrap().record, None);
    assert!(log.lock().is_empty());
}

#[test]
fn cache_flush_precedes_each_pass_when_asked() {
    let h = Harness::with_policy(
        ToolScript {
            passes: Some(2),
            ..Default::default()
        },
        Policy {
            cache_control: CacheControl::Flush,
            ..policy()
        },
    );
    let a = agent_with(
        &h,
        AgentScript {
            flush: true,
            ..Default::default()
        },
    );
    let m = memory(&h, plan_of(64), Some(snap(&h.log, 64)));
    h.svc.submit(&a, &m, dispatch("k")).unwrap();
    let log = h.log();
    let flushes: Vec<usize> = (0..log.len()).filter(|&i| log[i] == "flush").collect();
    assert_eq!(flushes.len(), 2, "{log:?}");
    for i in flushes {
        assert!(log[i + 1].starts_with("submit pass"), "{log:?}");
    }
}

/// Runs one dispatch expected to decline; checks the common decline contract.
fn assert_declined(h: &Harness, a: &MockAgent, m: &MockMemory, reason: Reason) -> Vec<String> {
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

fn two_passes() -> ToolScript {
    ToolScript {
        passes: Some(2),
        ..Default::default()
    }
}

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

/// Runs one dispatch expected to truncate; the completion is signalled exactly once, after
/// CONFIG EXIT, and no restore follows the last executed pass.
fn assert_truncated(
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
fn an_open_ended_loop_stops_at_max_passes() {
    let h = Harness::with_policy(
        ToolScript {
            passes: Some(0),
            continue_answers: Some(vec![]),
            ..Default::default()
        },
        Policy {
            max_passes: 5,
            ..policy()
        },
    );
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let log = assert_truncated(&h, &a, &m, Reason::PassLimit, 5);
    // Asked after every pass, the last one included.
    assert_eq!(log.iter().filter(|e| e.starts_with("continue?")).count(), 5);
}

#[test]
fn the_continue_callback_stops_a_fixed_loop_and_is_not_asked_after_the_last_pass() {
    let h = Harness::new(ToolScript {
        passes: Some(3),
        continue_answers: Some(vec![1, 1, 1]),
        ..Default::default()
    });
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(rec.executed_passes, 3);
    let log = h.log();
    let asked: Vec<&String> = log.iter().filter(|e| e.starts_with("continue?")).collect();
    assert_eq!(asked, ["continue? 0", "continue? 1"]);

    let h = Harness::new(ToolScript {
        passes: Some(6),
        continue_answers: Some(vec![1, 0]),
        ..Default::default()
    });
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!((rec.outcome, rec.executed_passes), (Outcome::Replayed, 2));
    assert_eq!(rec.requested_passes, 6);
}

#[test]
fn a_fixed_count_above_max_passes_is_clamped() {
    let h = Harness::with_policy(
        ToolScript {
            passes: Some(1 << 63),
            ..Default::default()
        },
        Policy {
            max_passes: 3,
            ..policy()
        },
    );
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(rec.requested_passes, 1 << 63);
    assert_eq!(rec.executed_passes, 3);
}

#[test]
fn pass_exit_may_replace_the_continue_callback_for_its_pass_only() {
    let h = Harness::custom(policy(), |_, l| {
        Arc::new(
            move |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData| match (
                op, ph,
            ) {
                (Operation::Config, Phase::Enter) => {
                    p.replay_pass_count = Some(Arc::new(|_, _| 5));
                    let l = l.clone();
                    p.replay_continue = Some(Arc::new(move |_, pass, _, _| {
                        push(&l, format!("original {pass}"));
                        1
                    }));
                }
                (Operation::Pass, Phase::Exit) => {
                    assert!(p.replay_continue.is_some(), "PASS EXIT shows the callback");
                    if p.current_pass == 0 {
                        let l = l.clone();
                        p.replay_continue = Some(Arc::new(move |_, pass, _, _| {
                            push(&l, format!("replacement {pass}"));
                            1
                        }));
                    }
                    if p.current_pass == 2 {
                        p.replay_continue = Some(Arc::new(|_, _, _, _| 0));
                    }
                }
                _ => {}
            },
        )
    });
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(rec.executed_passes, 3);
    let calls: Vec<String> = h
        .log()
        .into_iter()
        .filter(|e| e.starts_with("original") || e.starts_with("replacement"))
        .collect();
    assert_eq!(calls, strs(&["replacement 0", "original 1"]));
}

type Backend = Arc<Mutex<Option<(Arc<MockAgent>, Arc<MockMemory>)>>>;
/// (kernel, deferred, reason) per forwarded submission.
type Log3 = Arc<Mutex<Vec<(String, bool, Option<Reason>)>>>;

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

mod user_data {
    use super::*;
    use proptest::prelude::*;

    /// Runs a window whose tool checks SPEC §3 `user_data` threading; returns violations.
    fn run(seed: u64, passes: u64, stop_after: Option<u32>) -> (Vec<String>, OutcomeRecord) {
        let bad: Log = Arc::default();
        let b = bad.clone();
        let h = Harness::custom(policy(), move |_, _| {
            Arc::new(
                move |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, ud: &mut UserData| {
                    let pass = u64::from(p.current_pass);
                    match (op, ph) {
                        (Operation::Config, Phase::Enter) => {
                            *ud = seed;
                            let b2 = b.clone();
                            p.replay_pass_count = Some(Arc::new(move |_, u| {
                                if u != seed {
                                    push(&b2, format!("pass count saw {u}"));
                                }
                                passes
                            }));
                            if stop_after.is_some() {
                                let b3 = b.clone();
                                p.replay_continue = Some(Arc::new(move |_, pass, _, u| {
                                    if u != 0xdead ^ u64::from(pass) {
                                        push(&b3, format!("continue {pass} saw {u}"));
                                    }
                                    i32::from(Some(pass) != stop_after)
                                }));
                            }
                        }
                        (Operation::Pass, Phase::Enter) => {
                            if *ud != seed {
                                push(&b, format!("PASS ENTER {pass} saw {ud}"));
                            }
                            *ud = seed ^ (pass + 1);
                        }
                        (Operation::Pass, Phase::Exit) => {
                            if *ud != seed ^ (pass + 1) {
                                push(&b, format!("PASS EXIT {pass} saw {ud}"));
                            }
                            // The continue callback sees this; the next pass must not.
                            *ud = 0xdead ^ pass;
                        }
                        (Operation::Config, Phase::Exit) => {
                            if *ud != seed {
                                push(&b, format!("CONFIG EXIT saw {ud}"));
                            }
                        }
                    }
                },
            )
        });
        let a = agent(&h);
        let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
        let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
        let v = bad.lock().clone();
        (v, rec)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn threading_follows_spec(seed in any::<u64>(), passes in 2u64..9, stop in proptest::option::of(0u32..9)) {
            let (violations, rec) = run(seed, passes, stop);
            prop_assert!(violations.is_empty(), "{:?}", violations);
            let expect = match stop { Some(s) if u64::from(s) + 1 < passes => s + 1, _ => passes as u32 };
            prop_assert_eq!(rec.executed_passes, expect);
            prop_assert_eq!(rec.outcome, Outcome::Replayed);
        }
    }
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

#[test]
fn a_panicking_outcome_sink_drops_the_record_but_not_the_dispatch() {
    let h = Harness::new(two_passes());
    h.svc
        .set_outcome_sink(Some(Arc::new(|_: &OutcomeRecord| panic!("sink fails"))));
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    assert_eq!(rec.outcome, Outcome::Replayed);
    assert_eq!(
        h.log().iter().filter(|e| *e == "signal completion").count(),
        1
    );
    assert_eq!(h.svc.summary().replayed, 1);
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
fn auto_is_resolved_before_the_memory_layer_and_the_record_names_what_ran() {
    // (capabilities, layout, policy scope, policy restore) -> what the memory layer is handed
    // and the record names, and whether auto chose it.
    let device = Capabilities::DEVICE_DIGESTS;
    let hsa = Capabilities::AUTO_ARGUMENTS;
    let cases = [
        (
            device,
            ArgLayout::Known,
            Scope::Auto,
            RestoreMode::Auto,
            Scope::Predicted,
            RestoreMode::Dirty,
        ),
        (
            device,
            ArgLayout::Unknown,
            Scope::Auto,
            RestoreMode::Auto,
            Scope::All,
            RestoreMode::Dirty,
        ),
        (
            hsa,
            ArgLayout::Known,
            Scope::Auto,
            RestoreMode::Auto,
            Scope::Predicted,
            RestoreMode::Full,
        ),
        (
            Capabilities::empty(),
            ArgLayout::Known,
            Scope::Auto,
            RestoreMode::Auto,
            Scope::All,
            RestoreMode::Full,
        ),
        (
            device,
            ArgLayout::Known,
            Scope::All,
            RestoreMode::Full,
            Scope::All,
            RestoreMode::Full,
        ),
        (
            Capabilities::empty(),
            ArgLayout::Known,
            Scope::Arguments,
            RestoreMode::Dirty,
            Scope::Arguments,
            RestoreMode::Dirty,
        ),
    ];
    for (caps, layout, scope, restore, want_scope, want_restore) in cases {
        let case = format!("{caps:?} {layout:?} {scope:?}+{restore:?}");
        let h = Harness::with_policy(
            ToolScript {
                passes: Some(2),
                ..Default::default()
            },
            Policy {
                scope,
                restore,
                ..policy()
            },
        );
        let a = agent_with(
            &h,
            AgentScript {
                caps: Some(caps),
                ..Default::default()
            },
        );
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut m = MockMemory::new();
        let s = seen.clone();
        m.expect_plan().returning(move |_, scope, p| {
            s.lock()
                .push(format!("plan {} {}", scope.as_str(), p.scope.as_str()));
            let mut plan = plan_of(4096);
            plan.scope = scope;
            Ok(plan)
        });
        let s = seen.clone();
        let snapshot = Mutex::new(Some(snap(&h.log, 4096)));
        m.expect_capture().returning(move |_, p, _| {
            s.lock().push(format!(
                "capture {} {}",
                p.scope.as_str(),
                p.restore.as_str()
            ));
            Ok(Box::new(snapshot.lock().take().expect("one capture")))
        });
        m.expect_pooled_peak_bytes().return_const(0u64);
        let mut d = dispatch("k");
        d.arg_layout = layout;
        let rec = h.svc.submit(&a, &m, d).unwrap().record.unwrap();
        assert_eq!(rec.outcome, Outcome::Replayed, "{case}");
        assert_eq!(
            *seen.lock(),
            vec![
                format!("plan {} {}", want_scope.as_str(), want_scope.as_str()),
                format!("capture {} {}", want_scope.as_str(), want_restore.as_str()),
            ],
            "{case}: the memory layer never sees auto"
        );
        assert_eq!(
            (rec.scope, rec.restore),
            (want_scope, want_restore),
            "{case}"
        );
        assert_eq!(
            (rec.scope_auto, rec.restore_auto),
            (scope == Scope::Auto, restore == RestoreMode::Auto),
            "{case}"
        );
        let line = rec.to_string();
        assert!(
            line.contains(&format!(
                " scope={} scope_auto={} restore={} restore_auto={} ",
                want_scope.as_str(),
                u8::from(scope == Scope::Auto),
                want_restore.as_str(),
                u8::from(restore == RestoreMode::Auto)
            )),
            "{case}: {line}"
        );
        let s = h.svc.summary();
        let key = format!("{}+{}", want_scope.as_str(), want_restore.as_str());
        assert_eq!(s.ran.get(&key), Some(&1), "{case}");
        assert_eq!(s.ran_auto, u64::from(scope == Scope::Auto), "{case}");
        // The service keeps the policy as given: `auto` is resolved per window.
        assert_eq!(
            (h.svc.policy().scope, h.svc.policy().restore),
            (scope, restore)
        );
    }
}

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
