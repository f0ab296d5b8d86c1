//! End to end: a real `ReplayService` window drives the registry's hooks, the tool toggles
//! through its payload, and a participant (the instant agent's submission hook) sees the result.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use replay_context::{ContextError, Contexts, OverrideSupport};
use replay_core::{
    AgentId, Dim3, Dispatch, DispatchId, DispatchInfo, KernelId, KernelKey, Operation, Origin,
    Outcome, Phase, Policy, QueueId, ReplayPayload, ReplayService, SubmissionKind, Subscription,
    SystemClock, UserData,
};
use replay_mock::double::InstantAgent;
use replay_mock::instant::InstantSnapshotter;

/// What the participant saw when a pass (or the ordinary run) was submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    dispatch: DispatchId,
    pass: Option<u32>,
    counters: bool,
    counters_override: Option<bool>,
    sampling: bool,
}

fn dispatch() -> Dispatch {
    Dispatch {
        info: DispatchInfo::new(
            AgentId(0),
            QueueId(0),
            KernelId(1),
            "saxpy",
            Dim3::new(64, 1, 1),
            Dim3::new(64, 1, 1),
        ),
        kernel: KernelKey {
            agent: AgentId(0),
            code_object: 1,
            symbol: 1,
        },
        kind: SubmissionKind::KernelDispatch,
        kernarg: Default::default(),
        arg_layout: Default::default(),
        origin: Origin::SubmittingThread,
        handle: 0,
    }
}

/// What the tool's toggles answered, by (operation, phase, pass).
type Answers = Mutex<Vec<(Operation, Phase, u32, Result<(), ContextError>)>>;

#[test]
fn stop_in_pass_enter_reaches_participants_for_the_rest_of_the_loop_only() {
    let contexts = Arc::new(Contexts::new());
    let owner = contexts.create_context();
    let counters = contexts.create_context();
    let sampling = contexts.create_context();
    let trace = contexts.create_context();
    contexts
        .declare_participant(counters, "counters", OverrideSupport::Honours)
        .unwrap();
    contexts
        .declare_participant(sampling, "pc_sampling", OverrideSupport::Honours)
        .unwrap();
    contexts
        .declare_participant(trace, "thread_trace", OverrideSupport::CannotHonour)
        .unwrap();
    for c in [owner, counters, sampling, trace] {
        contexts.activate(c).unwrap();
    }

    let svc = ReplayService::new(
        Policy::default(),
        Arc::new(SystemClock::new()),
        Arc::clone(&contexts) as Arc<dyn replay_core::ContextControl>,
    );
    let answers: Arc<Answers> = Arc::default();
    let dispatches = Arc::new(AtomicU32::new(0));
    let tool = {
        let answers = Arc::clone(&answers);
        let dispatches = Arc::clone(&dispatches);
        move |op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _ud: &mut UserData| {
            let first = dispatches.load(Ordering::Relaxed) == 0;
            let note = |r| answers.lock().push((op, phase, p.current_pass, r));
            match (op, phase) {
                (Operation::Config, Phase::Enter) => {
                    p.replay_pass_count = Some(Arc::new(|_, _| 3));
                    note(p.replay_stop_context(counters));
                }
                (Operation::Pass, Phase::Enter) if first && p.current_pass == 1 => {
                    note(p.replay_stop_context(counters));
                    note(p.replay_stop_context(trace));
                }
                (Operation::Pass, Phase::Exit) if first && p.current_pass == 1 => {
                    note(p.replay_start_context(counters));
                }
                (Operation::Config, Phase::Exit) => {
                    dispatches.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
    };
    svc.configure(
        owner,
        Subscription::CONFIG | Subscription::PASS,
        Arc::new(tool),
    )
    .unwrap();
    svc.start().unwrap();

    // Its submissions stand in for the participants, which consult the registry before
    // contributing.
    let submitted: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let (c, log) = (Arc::clone(&contexts), Arc::clone(&submitted));
    let agent = InstantAgent::new(AgentId(0)).on_submit(move |dispatch, pass| {
        log.lock().push(Seen {
            dispatch: dispatch.info.dispatch_id,
            pass,
            counters: c.participates(counters),
            counters_override: c.override_for(counters),
            sampling: c.participates(sampling),
        });
    });

    // First dispatch: the tool stops `counters` in PASS ENTER of pass 1.
    let rec = svc
        .submit(&agent, &InstantSnapshotter::default(), dispatch())
        .unwrap()
        .record
        .expect("a candidate has a record");
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    assert_eq!(rec.executed_passes, 3);
    let d1 = rec.dispatch_id;
    let seen: Vec<_> = submitted.lock().drain(..).collect();
    let pass = |p: u32, counters: bool, counters_override: Option<bool>| Seen {
        dispatch: d1,
        pass: Some(p),
        counters,
        counters_override,
        sampling: true,
    };
    assert_eq!(
        seen,
        vec![
            pass(0, true, None),
            pass(1, false, Some(false)),
            pass(2, false, Some(false)),
        ]
    );
    assert_eq!(
        *answers.lock(),
        vec![
            (
                Operation::Config,
                Phase::Enter,
                0,
                Err(ContextError::ContextError)
            ),
            (Operation::Pass, Phase::Enter, 1, Ok(())),
            (
                Operation::Pass,
                Phase::Enter,
                1,
                Err(ContextError::Unsupported(trace))
            ),
            (
                Operation::Pass,
                Phase::Exit,
                1,
                Err(ContextError::ContextError)
            ),
        ]
    );
    assert_eq!(agent.completions(), 1);

    // After the loop: the override is gone, the global state untouched.
    assert!(!contexts.has_overrides());
    assert_eq!(contexts.override_for(counters), None);
    assert!(contexts.participates(counters));
    assert!(contexts.is_active(counters));

    // Second dispatch: no toggle in any pass; every pass sees `counters` again.
    answers.lock().clear();
    let rec = svc
        .submit(&agent, &InstantSnapshotter::default(), dispatch())
        .unwrap()
        .record
        .expect("a candidate has a record");
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    let d2 = rec.dispatch_id;
    assert_ne!(d1, d2);
    let seen: Vec<_> = submitted.lock().drain(..).collect();
    assert_eq!(
        seen,
        (0..3)
            .map(|p| Seen {
                dispatch: d2,
                pass: Some(p),
                counters: true,
                counters_override: None,
                sampling: true,
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(
        *answers.lock(),
        vec![(
            Operation::Config,
            Phase::Enter,
            0,
            Err(ContextError::ContextError)
        )]
    );
}
