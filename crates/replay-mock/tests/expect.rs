//! The expectation recorder: matching rules and mismatch messages.

use std::sync::Arc;

use replay_core::{AgentId, DispatchId, DrainTarget, QueueId};
use replay_mock::{CopyDirection, Event, EventKind, Expect, ExpectError, Fault, Recorder};

fn window(passes: u32) -> Vec<Event> {
    let a = AgentId(0);
    let d = DispatchId(7);
    let mut v = Vec::new();
    for target in [
        DrainTarget::Queue(QueueId(3)),
        DrainTarget::Agent,
        DrainTarget::CopyFence,
    ] {
        v.push(Event::DrainBegun { agent: a, target });
        v.push(Event::DrainCompleted { agent: a, target });
    }
    v.push(Event::CopyBatch {
        agent: a,
        ops: 1,
        bytes: 64,
        direction: CopyDirection::Capture,
    });
    for pass in 0..passes {
        v.push(Event::PassSubmitted {
            agent: a,
            dispatch: d,
            pass,
        });
        v.push(Event::PassCompleted {
            agent: a,
            dispatch: d,
            pass,
        });
    }
    v.push(Event::CompletionSignalled {
        agent: a,
        dispatch: d,
    });
    v
}

#[test]
fn a_matching_expectation_passes_and_ignores_copies_by_default() {
    let r = Recorder::default();
    for e in window(2) {
        r.record(e);
    }
    Expect::new()
        .window_drains()
        .passes(2)
        .signal()
        .assert_finished(&r);
    Expect::new()
        .drain(DrainTarget::Queue(QueueId(3)))
        .drain(DrainTarget::Agent)
        .drain(DrainTarget::CopyFence)
        .copy_batch(CopyDirection::Capture)
        .passes(2)
        .signal()
        .for_agent(AgentId(0))
        .verify(&r)
        .unwrap();
    // Another agent's events are not compared when the expectation is for one agent.
    r.record(Event::CacheFlushed { agent: AgentId(1) });
    r.record(Event::OrdinaryRun {
        agent: AgentId(1),
        dispatch: DispatchId(0),
        kernel: Arc::from("k"),
        tool_work: false,
    });
    Expect::new()
        .for_agent(AgentId(0))
        .window_drains()
        .passes(2)
        .signal()
        .verify(&r)
        .unwrap();
}

#[test]
fn a_different_event_reads_expected_but_observed() {
    let r = Recorder::default();
    for e in window(2) {
        r.record(e);
    }
    let e = Expect::new()
        .window_drains()
        .passes(3)
        .signal()
        .verify(&r)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "expected pass 2 submitted but observed completion signalled (agent 0, dispatch 7) (event 10 of the compared recording)"
    );
    assert!(matches!(e, ExpectError::Mismatch { index: 10, .. }));

    let e = Expect::new()
        .drain(DrainTarget::Agent)
        .verify(&r)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "expected drain of agent begun but observed drain of queue 3 begun (agent 0) (event 0 of the compared recording)"
    );
}

#[test]
fn missing_and_extra_events_are_reported() {
    let r = Recorder::default();
    for e in window(1) {
        r.record(e);
    }
    let e = Expect::new()
        .window_drains()
        .pass(0)
        .signal()
        .ordinary()
        .verify(&r)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "expected ordinary run but observed nothing (the compared recording ended after 9 events)"
    );

    let e = Expect::new()
        .window_drains()
        .pass(0)
        .verify(&r)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "expected nothing more but observed completion signalled (agent 0, dispatch 7) (event 8 of the compared recording)"
    );
    Expect::new()
        .window_drains()
        .pass(0)
        .allow_more()
        .verify(&r)
        .unwrap();
}

#[test]
fn strict_compares_everything_and_faults_can_be_expected() {
    let r = Recorder::default();
    r.record(Event::FaultFired {
        agent: AgentId(0),
        fault: Fault::QueueDrainStuck,
    });
    r.record(Event::DrainBegun {
        agent: AgentId(0),
        target: DrainTarget::Queue(QueueId(0)),
    });
    Expect::new()
        .fault(&Fault::QueueDrainStuck)
        .event(replay_mock::Pattern::kind(EventKind::DrainBegun))
        .verify(&r)
        .unwrap();
    let e = Expect::new()
        .strict()
        .event(replay_mock::Pattern::kind(EventKind::DrainBegun))
        .verify(&r)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "expected drain of anything begun but observed injected fault queue_drain_stuck fired (agent 0) (event 0 of the compared recording)"
    );
}

#[test]
#[should_panic(expected = "expected pass 1 completed but observed pass 1 submitted")]
fn assert_finished_panics_with_the_message() {
    let r = Recorder::default();
    r.record(Event::PassSubmitted {
        agent: AgentId(0),
        dispatch: DispatchId(1),
        pass: 1,
    });
    r.record(Event::PassSubmitted {
        agent: AgentId(0),
        dispatch: DispatchId(1),
        pass: 1,
    });
    Expect::new().pass(1).assert_finished(&r);
}
