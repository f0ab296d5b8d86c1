//! A window that runs to its end (SPEC §6): the calls in the spec's order, when no window
//! opens at all, and how the pass count, the continue callback, cache flushes and `auto`
//! decide what runs. The contract a tool relies on when nothing fails.

use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::*;
use replay_mock::double::{FakeClock, ToolScript};

use crate::harness::{
    agent, agent_with, assert_truncated, dispatch, memory, plan_of, policy, push, snap, strs, tool,
    two_passes, AgentScript, Harness, Log, MockAgent, MockMemory, AGENT,
};

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
