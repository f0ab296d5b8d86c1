//! SPEC §5 rules, driven through the hooks the replay window calls.

use std::sync::{Arc, Barrier};
use std::thread;

use replay_context::{
    ContextControl, ContextError, ContextId, Contexts, OverrideSupport, Participant, RegistryError,
};

/// A registry with two globally started contexts whose participants honour overrides.
fn two_active() -> (Contexts, ContextId, ContextId) {
    let c = Contexts::new();
    let counters = c.create_context();
    let sampling = c.create_context();
    c.declare_participant(counters, "counters", OverrideSupport::Honours)
        .unwrap();
    c.declare_participant(sampling, "pc_sampling", OverrideSupport::Honours)
        .unwrap();
    c.activate(counters).unwrap();
    c.activate(sampling).unwrap();
    (c, counters, sampling)
}

/// Runs `f` as the tool's PASS ENTER callback.
fn pass_enter<R>(c: &Contexts, f: impl FnOnce() -> R) -> R {
    c.pass_enter_begin();
    let r = f();
    c.pass_enter_end();
    r
}

#[test]
fn toggles_before_any_loop_are_context_error() {
    let (c, counters, _) = two_active();
    assert_eq!(c.stop(counters), Err(ContextError::ContextError));
    assert_eq!(c.start(counters), Err(ContextError::ContextError));
    assert!(!c.in_replay_loop());
    assert_eq!(c.override_for(counters), None);
}

#[test]
fn toggles_in_loop_outside_pass_enter_are_context_error() {
    let (c, counters, _) = two_active();
    c.loop_begin();
    assert!(c.in_replay_loop());
    // After loop begin, before the first PASS ENTER (e.g. from CONFIG ENTER's code).
    assert_eq!(c.stop(counters), Err(ContextError::ContextError));
    assert_eq!(c.start(counters), Err(ContextError::ContextError));
    pass_enter(&c, || {});
    // Between PASS ENTER and the next one (PASS EXIT, the continue callback).
    assert_eq!(c.stop(counters), Err(ContextError::ContextError));
    assert_eq!(c.start(counters), Err(ContextError::ContextError));
    assert!(!c.has_overrides(), "a refused toggle must record nothing");
    c.loop_end();
}

#[test]
fn toggles_after_loop_end_are_context_error() {
    let (c, counters, _) = two_active();
    c.loop_begin();
    assert_eq!(pass_enter(&c, || c.stop(counters)), Ok(()));
    c.loop_end();
    assert!(!c.in_replay_loop());
    assert_eq!(c.stop(counters), Err(ContextError::ContextError));
    assert_eq!(c.start(counters), Err(ContextError::ContextError));
    // Even inside a PASS ENTER bracket without a loop (a window out of order): refused.
    assert_eq!(
        pass_enter(&c, || c.start(counters)),
        Err(ContextError::ContextError)
    );
}

#[test]
fn unknown_context_in_pass_enter() {
    let (c, _, _) = two_active();
    let bogus = ContextId(9999);
    c.loop_begin();
    assert_eq!(
        pass_enter(&c, || c.stop(bogus)),
        Err(ContextError::UnknownContext(bogus))
    );
    assert_eq!(
        pass_enter(&c, || c.start(bogus)),
        Err(ContextError::UnknownContext(bogus))
    );
    c.loop_end();
}

#[test]
fn context_inactive_at_loop_begin_cannot_be_started_locally() {
    let (c, counters, _) = two_active();
    let trace = c.create_context();
    c.declare_participant(trace, "thread_trace_lite", OverrideSupport::Honours)
        .unwrap();
    c.loop_begin();
    assert_eq!(
        pass_enter(&c, || c.start(trace)),
        Err(ContextError::ContextNotStarted(trace))
    );
    // Started globally mid-loop: still not active when *this* loop began.
    c.activate(trace).unwrap();
    assert_eq!(
        pass_enter(&c, || c.start(trace)),
        Err(ContextError::ContextNotStarted(trace))
    );
    assert_eq!(c.override_for(trace), None);
    // A local stop starts nothing, so it is accepted; a start after it is still refused.
    assert_eq!(pass_enter(&c, || c.stop(trace)), Ok(()));
    assert!(!c.participates(trace));
    assert_eq!(
        pass_enter(&c, || c.start(trace)),
        Err(ContextError::ContextNotStarted(trace))
    );
    // Contexts that were active at loop begin are unaffected.
    assert_eq!(pass_enter(&c, || c.start(counters)), Ok(()));
    c.loop_end();
    // The next loop sees it active at its beginning.
    c.loop_begin();
    assert_eq!(pass_enter(&c, || c.start(trace)), Ok(()));
    c.loop_end();
}

#[test]
fn stop_then_start_within_one_loop() {
    let (c, counters, sampling) = two_active();
    c.loop_begin();
    // Pass 0: stop counters.
    assert_eq!(pass_enter(&c, || c.stop(counters)), Ok(()));
    assert_eq!(c.override_for(counters), Some(false));
    assert!(!c.participates(counters));
    assert!(c.participates(sampling));
    assert!(c.is_active(counters), "global state must not change");
    // Pass 1: start it again.
    assert_eq!(pass_enter(&c, || c.start(counters)), Ok(()));
    assert_eq!(c.override_for(counters), Some(true));
    assert!(c.participates(counters));
    // Stop and start within the same PASS ENTER: the last word counts.
    pass_enter(&c, || {
        assert_eq!(c.stop(counters), Ok(()));
        assert_eq!(c.start(counters), Ok(()));
        assert_eq!(c.stop(counters), Ok(()));
    });
    assert_eq!(c.override_for(counters), Some(false));
    c.loop_end();
}

#[test]
fn overrides_are_sticky_across_passes() {
    let (c, counters, sampling) = two_active();
    c.loop_begin();
    assert_eq!(pass_enter(&c, || c.stop(counters)), Ok(()));
    for _pass in 1..4 {
        pass_enter(&c, || {});
        assert_eq!(c.override_for(counters), Some(false));
        assert!(!c.participates(counters));
        assert_eq!(c.override_for(sampling), None);
        assert!(c.participates(sampling));
    }
    c.loop_end();
}

#[test]
fn local_start_outlives_a_global_stop_in_the_same_loop() {
    let (c, counters, _) = two_active();
    c.loop_begin();
    assert_eq!(pass_enter(&c, || c.start(counters)), Ok(()));
    c.deactivate(counters).unwrap();
    pass_enter(&c, || {});
    assert!(c.participates(counters));
    c.loop_end();
    assert!(
        !c.participates(counters),
        "after the loop the global stop rules"
    );
}

#[test]
fn overrides_vanish_when_the_loop_ends() {
    let (c, counters, sampling) = two_active();
    c.loop_begin();
    pass_enter(&c, || {
        c.stop(counters).unwrap();
        c.stop(sampling).unwrap();
    });
    assert!(c.has_overrides());
    c.loop_end();
    assert!(!c.has_overrides());
    assert_eq!(c.override_for(counters), None);
    assert_eq!(c.override_for(sampling), None);
    assert!(c.participates(counters));
    assert!(c.participates(sampling));
    // A new loop starts clean.
    c.loop_begin();
    pass_enter(&c, || {});
    assert!(!c.has_overrides());
    assert!(c.participates(counters));
    c.loop_end();
}

#[test]
fn context_with_a_participant_that_cannot_honour_overrides_is_unsupported() {
    let (c, counters, _) = two_active();
    let tracing = c.create_context();
    c.declare_participant(tracing, "counters", OverrideSupport::Honours)
        .unwrap();
    c.declare_participant(tracing, "thread_trace", OverrideSupport::CannotHonour)
        .unwrap();
    c.activate(tracing).unwrap();
    assert_eq!(c.honours_overrides(tracing), Ok(false));
    assert_eq!(c.honours_overrides(counters), Ok(true));
    c.loop_begin();
    assert_eq!(
        pass_enter(&c, || c.stop(tracing)),
        Err(ContextError::Unsupported(tracing))
    );
    assert_eq!(
        pass_enter(&c, || c.start(tracing)),
        Err(ContextError::Unsupported(tracing))
    );
    assert_eq!(c.override_for(tracing), None, "never silently succeed");
    assert!(c.participates(tracing));
    assert!(!c.has_overrides());
    // Other contexts in the same loop still toggle.
    assert_eq!(pass_enter(&c, || c.stop(counters)), Ok(()));
    c.loop_end();
}

#[test]
fn has_overrides_fast_path() {
    let (c, counters, _) = two_active();
    let (other, other_ctx, _) = two_active();
    assert!(!c.has_overrides());
    c.loop_begin();
    assert!(
        !c.has_overrides(),
        "a loop without toggles has no overrides"
    );
    pass_enter(&c, || {});
    assert!(!c.has_overrides());
    pass_enter(&c, || c.stop(counters).unwrap());
    assert!(c.has_overrides());
    // Another registry on the same thread sees none of them.
    assert!(!other.has_overrides());
    assert_eq!(other.override_for(other_ctx), None);
    assert_eq!(other.override_for(counters), None);
    pass_enter(&c, || c.start(counters).unwrap());
    assert!(c.has_overrides(), "a local start is an override too");
    c.loop_end();
    assert!(!c.has_overrides());
}

#[test]
fn loops_on_other_threads_are_isolated() {
    let (c, counters, sampling) = two_active();
    let c = Arc::new(c);
    let toggled = Arc::new(Barrier::new(2));
    let checked = Arc::new(Barrier::new(2));

    // Every barrier is passed before any assertion, so a failure cannot hang the other thread.
    let a = {
        let (c, toggled, checked) = (Arc::clone(&c), Arc::clone(&toggled), Arc::clone(&checked));
        thread::spawn(move || {
            c.loop_begin();
            let stopped = pass_enter(&c, || c.stop(counters));
            toggled.wait();
            checked.wait();
            let seen = (
                c.override_for(counters),
                c.override_for(sampling),
                c.participates(sampling),
            );
            let restarted = pass_enter(&c, || c.start(counters));
            c.loop_end();
            (stopped, seen, restarted)
        })
    };

    let b = {
        let c = Arc::clone(&c);
        thread::spawn(move || {
            toggled.wait();
            // Thread A holds an override; this thread has no loop and sees the global state.
            let before = (
                c.has_overrides(),
                c.override_for(counters),
                c.participates(counters),
                c.in_replay_loop(),
                c.start(counters),
            );
            // Its own loop toggles something else and ends.
            c.loop_begin();
            let stopped = pass_enter(&c, || c.stop(sampling));
            let inside = (c.participates(sampling), c.override_for(counters));
            c.loop_end();
            checked.wait();
            (before, stopped, inside)
        })
    };
    let (a_stopped, a_seen, a_restarted) = a.join().unwrap();
    let (b_before, b_stopped, b_inside) = b.join().unwrap();

    assert_eq!(a_stopped, Ok(()));
    assert_eq!(
        b_before,
        (false, None, true, false, Err(ContextError::ContextError)),
        "thread B must not see thread A's loop"
    );
    assert_eq!(b_stopped, Ok(()));
    assert_eq!(b_inside, (false, None));
    assert_eq!(
        a_seen,
        (Some(false), None, true),
        "thread B's loop must not disturb thread A's"
    );
    assert_eq!(a_restarted, Ok(()));
    assert!(!c.has_overrides());
}

#[test]
fn nested_loops_do_not_corrupt_state() {
    let (c, counters, sampling) = two_active();
    c.loop_begin();
    pass_enter(&c, || c.stop(counters).unwrap());
    c.loop_begin(); // logged; cannot happen with the real window
    assert!(
        !c.has_overrides(),
        "the inner loop starts without overrides"
    );
    assert!(c.participates(counters));
    pass_enter(&c, || c.stop(sampling).unwrap());
    assert!(!c.participates(sampling));
    c.loop_end();
    // The outer loop's override is intact, the inner one gone.
    assert_eq!(c.override_for(counters), Some(false));
    assert_eq!(c.override_for(sampling), None);
    // The outer loop is not in PASS ENTER (the inner one consumed nothing of its state).
    assert_eq!(c.start(counters), Err(ContextError::ContextError));
    c.loop_end();
    assert!(!c.in_replay_loop());
    assert!(!c.has_overrides());
}

#[test]
fn unbalanced_hooks_are_survived() {
    let (c, counters, _) = two_active();
    // A window out of order: logged, never a panic, and nothing left behind.
    c.loop_end();
    c.pass_enter_end();
    c.pass_enter_begin();
    assert_eq!(c.stop(counters), Err(ContextError::ContextError));
    c.loop_begin();
    assert_eq!(pass_enter(&c, || c.stop(counters)), Ok(()));
    c.loop_end();
    assert!(!c.has_overrides());
}

#[test]
fn registry_errors() {
    let c = Contexts::new();
    let ctx = c.create_context();
    assert_ne!(ctx, ContextId(0));
    assert_eq!(
        c.register_context(ctx),
        Err(RegistryError::AlreadyExists(ctx))
    );
    c.register_context(ContextId(42)).unwrap();
    assert!(c.contains(ContextId(42)));
    let fresh = c.create_context();
    assert!(fresh != ctx && fresh != ContextId(42));

    let unknown = ContextId(7777);
    assert_eq!(
        c.declare_participant(unknown, "counters", OverrideSupport::Honours),
        Err(RegistryError::UnknownContext(unknown))
    );
    assert_eq!(
        c.activate(unknown),
        Err(RegistryError::UnknownContext(unknown))
    );
    assert_eq!(
        c.deactivate(unknown),
        Err(RegistryError::UnknownContext(unknown))
    );
    assert!(!c.is_active(unknown));
    assert!(!c.participates(unknown));

    c.declare_participant(ctx, "counters", OverrideSupport::Honours)
        .unwrap();
    assert!(matches!(
        c.declare_participant(ctx, "counters", OverrideSupport::CannotHonour),
        Err(RegistryError::DuplicateParticipant { ctx: x, ref name }) if x == ctx && &**name == "counters"
    ));
    assert_eq!(
        c.participants(ctx).unwrap(),
        vec![Participant {
            name: "counters".into(),
            support: OverrideSupport::Honours
        }]
    );

    assert!(!c.is_active(ctx));
    c.activate(ctx).unwrap();
    assert!(c.is_active(ctx));
    c.deactivate(ctx).unwrap();
    assert!(!c.is_active(ctx));
}

#[test]
fn create_context_skips_ids_the_tool_registered() {
    let c = Contexts::new();
    c.register_context(ContextId(1)).unwrap();
    c.register_context(ContextId(2)).unwrap();
    let fresh = c.create_context();
    assert_eq!(fresh, ContextId(3));
}

#[test]
fn removed_contexts_are_forgotten() {
    let c = Contexts::new();
    let ctx = c.create_context();
    c.activate(ctx).unwrap();
    assert!(c.contains(ctx));
    c.remove_context(ctx).unwrap();
    assert!(!c.contains(ctx));
    assert!(!c.is_active(ctx));
    assert!(c.remove_context(ctx).is_err());
}
