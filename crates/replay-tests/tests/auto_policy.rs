//! `scope=auto` and `restore=auto` (SPEC §7.2, §8, issue 15) through the real window on the
//! simulator: each resolution case, the record and the summary naming what ran, and memory
//! ending equal to one execution.

use replay_core::{
    ArgLayout, Capabilities, Origin, Outcome, OutcomeRecord, Policy, Reason, RestoreMode, Scope,
};
use replay_mock::{AgentConfig, SimRuntime, SIM_CAPABILITIES};
use replay_tests::*;

/// The default policy (`auto` for both) with the fast bounds of these tests.
fn auto_policy() -> Policy {
    Policy {
        scope: Scope::Auto,
        restore: RestoreMode::Auto,
        ..fast_policy()
    }
}

fn agent_with(caps: Capabilities) -> AgentConfig {
    AgentConfig {
        capabilities: caps,
        ..small_agent()
    }
}

/// Runs the read-modify-write application for 3 passes under `policy` on an agent with `caps`,
/// with the argument layout `layout`; checks the replay ended as one execution.
fn run(caps: Capabilities, layout: ArgLayout, policy: Policy) -> (OutcomeRecord, SimRuntime) {
    let cfg = agent_with(caps);
    let reference = reference_with(std::slice::from_ref(&cfg), |rt| {
        RmwApp::setup(rt).run_plain(rt)
    });
    let rt = runtime_with(&[cfg]);
    let replay = ToolScript::passes(3).install(&rt, policy);
    let app = RmwApp::setup(&rt);
    let rec = match layout {
        ArgLayout::Known => app.run(&rt),
        ArgLayout::Unknown => {
            // The simulator always knows its layouts: hand the window a dispatch that says
            // otherwise, through the same service and memory engine.
            let (mut d, c) = rt
                .make_dispatch(
                    rt.queue(A0, 0),
                    &app.kernel,
                    &app.args(),
                    grid(RMW_N as u32),
                    Origin::SubmittingThread,
                )
                .unwrap();
            d.arg_layout = ArgLayout::Unknown;
            let rec = replay
                .svc
                .submit(&*rt.agent(A0), &*rt.engine(A0), d)
                .unwrap()
                .record
                .expect("a record");
            c.wait().unwrap();
            assert_eq!(c.fired(), 1, "one completion");
            rt.forget_dispatch(&c);
            rec
        }
    };
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!(rec.executed_passes, 3, "{rec}");
    let seen = app.seen();
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "same inputs: {rec}");
    assert_matches_reference(&rt, &reference);
    assert_eq!(
        replay.log.outcomes().last(),
        Some(&rec),
        "CONFIG EXIT got it"
    );
    (rec, rt)
}

/// What `all` captures of the application: the buffer, the counter and the 8 KiB it never
/// touches; `arguments` captures the first two.
const ALL_BYTES: u64 = (RMW_N * 4 + 8 + 8192) as u64;
const ARGUMENT_BYTES: u64 = (RMW_N * 4 + 8) as u64;

#[test]
fn auto_resolves_per_capability_and_layout_and_the_record_names_what_ran() {
    let host = SIM_CAPABILITIES.difference(Capabilities::DEVICE_DIGESTS);
    let hsa_like = host.union(Capabilities::AUTO_ARGUMENTS);
    for (caps, layout, scope, restore) in [
        // The simulator as it is: device digests.
        (
            SIM_CAPABILITIES,
            ArgLayout::Known,
            Scope::Arguments,
            RestoreMode::Dirty,
        ),
        (
            SIM_CAPABILITIES,
            ArgLayout::Unknown,
            Scope::All,
            RestoreMode::Dirty,
        ),
        // A host-digest backend that opts in to `arguments` (HSA's rule).
        (
            hsa_like,
            ArgLayout::Known,
            Scope::Arguments,
            RestoreMode::Full,
        ),
        (hsa_like, ArgLayout::Unknown, Scope::All, RestoreMode::Full),
        // Host digests, no opt-in (CUDA without its digest kernels).
        (host, ArgLayout::Known, Scope::All, RestoreMode::Full),
    ] {
        let case = format!("{caps:?} {layout:?}");
        let (rec, rt) = run(caps, layout, auto_policy());
        assert_eq!((rec.scope, rec.restore), (scope, restore), "{case}: {rec}");
        assert!(rec.scope_auto && rec.restore_auto, "{case}: {rec}");
        let captured = if scope == Scope::All {
            ALL_BYTES
        } else {
            ARGUMENT_BYTES
        };
        assert_eq!(rec.captured_bytes, captured, "{case}: {rec}");
        match restore {
            // Every captured byte compared before each of the two later passes.
            RestoreMode::Dirty => assert_eq!(rec.compared_bytes, 2 * captured, "{case}: {rec}"),
            _ => assert_eq!(rec.restored_bytes, 2 * captured, "{case}: {rec}"),
        }
        let line = rec.to_string();
        assert!(
            line.contains(&format!(
                " scope={} scope_auto=1 restore={} restore_auto=1 ",
                scope.as_str(),
                restore.as_str()
            )),
            "{case}: {line}"
        );
        let json = rec.to_json();
        assert!(
            json.contains(&format!(
                r#""scope":"{}","restore":"{}","scope_auto":true,"restore_auto":true"#,
                scope.as_str(),
                restore.as_str()
            )),
            "{case}: {json}"
        );
        let s = rt.service().unwrap().summary();
        let key = format!("{}+{}", scope.as_str(), restore.as_str());
        assert_eq!(
            s.ran,
            [(key.clone(), 1)].into_iter().collect(),
            "{case}: {s}"
        );
        assert_eq!(s.ran_auto, 1, "{case}: {s}");
        assert!(
            s.to_string().contains(&format!(" ran={key}:1 ran_auto=1 ")),
            "{s}"
        );
        rt.shutdown();
    }
}

#[test]
fn the_defaults_are_auto_and_explicit_values_still_win() {
    // A user who changes nothing gets auto: on the simulator, arguments + dirty.
    let (rec, rt) = run(
        SIM_CAPABILITIES,
        ArgLayout::Known,
        Policy::from_lookup(|name| match name {
            "KREPLAY_DRAIN_TIMEOUT" | "KREPLAY_PASS_TIMEOUT" => Some("200ms".into()),
            _ => None,
        })
        .unwrap(),
    );
    assert_eq!(
        (rec.scope, rec.restore),
        (Scope::Arguments, RestoreMode::Dirty),
        "{rec}"
    );
    assert!(rec.scope_auto && rec.restore_auto, "{rec}");
    rt.shutdown();
    // Explicit values pass through, and are not marked as chosen by auto.
    for (scope, restore) in [
        (Scope::All, RestoreMode::Full),
        (Scope::All, RestoreMode::Dirty),
        (Scope::Arguments, RestoreMode::Full),
    ] {
        let (rec, rt) = run(
            SIM_CAPABILITIES,
            ArgLayout::Known,
            Policy {
                scope,
                restore,
                ..fast_policy()
            },
        );
        assert_eq!((rec.scope, rec.restore), (scope, restore), "{rec}");
        assert!(!rec.scope_auto && !rec.restore_auto, "{rec}");
        assert_eq!(rt.service().unwrap().summary().ran_auto, 0);
        rt.shutdown();
    }
    // One of each: the explicit scope stays, auto picks the restore.
    let (rec, rt) = run(
        SIM_CAPABILITIES,
        ArgLayout::Known,
        Policy {
            scope: Scope::All,
            restore: RestoreMode::Auto,
            ..fast_policy()
        },
    );
    assert_eq!(
        (rec.scope, rec.restore),
        (Scope::All, RestoreMode::Dirty),
        "{rec}"
    );
    assert!(!rec.scope_auto && rec.restore_auto, "{rec}");
    rt.shutdown();
}

#[test]
fn a_kernel_caught_writing_outside_auto_arguments_runs_under_all_next_time() {
    // `auto` picked `arguments`; the kernel writes memory no argument reaches: truncated at
    // the first pass, and the next dispatch of that kernel runs under `all`, still by auto.
    let rt = runtime(1);
    let _replay = ToolScript::passes(3).install(&rt, auto_policy());
    let app = RmwApp::setup(&rt);
    let stray = app.other;
    let k = replay_mock::Kernel::new(
        "stray",
        move |cx: &mut replay_mock::KernelCtx<'_>| -> Result<(), replay_mock::KernelError> {
            let v = cx.read_u32(stray)?;
            cx.write_u32(stray, v ^ 1)?;
            Ok(())
        },
    );
    let args = replay_mock::KernArgs::new().ptr(app.buf).build();
    let launch = || {
        let c = rt.dispatch(rt.queue(A0, 0), &k, &args, grid(1)).unwrap();
        c.wait().unwrap();
        c.record().unwrap()
    };
    let first = launch();
    assert_outcome(&first, Outcome::Truncated, Reason::WriteOutsideScope);
    assert_eq!(
        (first.scope, first.scope_auto),
        (Scope::Arguments, true),
        "{first}"
    );
    let second = launch();
    assert_outcome(&second, Outcome::Replayed, Reason::None);
    assert_eq!(
        (second.scope, second.scope_auto),
        (Scope::All, true),
        "{second}"
    );
    assert_eq!(second.restore, RestoreMode::Dirty, "{second}");
    rt.shutdown();
}
