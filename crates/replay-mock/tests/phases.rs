//! The window's phase split (`replay_core::phases`) on the simulator's virtual clock: the
//! phases add up to the window, each pass's wait covers the kernel's virtual run time, and
//! the summary sums the records.

mod common;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{
    AgentId, MemoryClass, Operation, Outcome, OutcomeRecord, Phase, Policy, Reason, ReplayPayload,
    RestoreMode, Scope, UserData,
};
use replay_mock::SimRuntime;

const N: usize = 4096;
const KERNEL: Duration = Duration::from_micros(40);

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Runs one `rmw` dispatch of `KERNEL` virtual time under `passes` passes and `policy`;
/// returns the record CONFIG EXIT showed and the record the service emitted.
fn run(rt: &SimRuntime, policy: Policy, passes: u64) -> (OutcomeRecord, OutcomeRecord) {
    let shown: Arc<Mutex<Option<OutcomeRecord>>> = Arc::default();
    let emitted: Arc<Mutex<Option<OutcomeRecord>>> = Arc::default();
    let s = Arc::clone(&shown);
    let svc = common::with_tool(
        rt,
        policy,
        move |op, ph, p: &mut ReplayPayload<'_>, _: &mut UserData| match (op, ph) {
            (Operation::Config, Phase::Enter) => {
                p.replay_pass_count = Some(Arc::new(move |_, _| passes));
            }
            (Operation::Config, Phase::Exit) => *s.lock() = p.outcome.cloned(),
            _ => {}
        },
    );
    let e = Arc::clone(&emitted);
    svc.set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
        *e.lock() = Some(r.clone())
    })));
    let a = AgentId(0);
    let buf = rt
        .alloc(a, (N * 4) as u64, MemoryClass::DEVICE_COARSE)
        .unwrap();
    rt.write_u32s(buf, &vec![7u32; N]).unwrap();
    let k = common::rmw_kernel(Arc::default()).with_duration(KERNEL);
    rt.dispatch(
        rt.queue(a, 0),
        &k,
        &common::args(buf, 0),
        common::grid(N as u32),
    )
    .unwrap()
    .wait()
    .unwrap();
    let summary = svc.summary();
    let emitted = emitted.lock().clone().expect("an emitted record");
    // The summary's window time is the sum of the records' windows, and so are its phases.
    assert!(
        close(summary.phases.window, summary.replay_seconds),
        "{summary:?}"
    );
    assert!(
        close(summary.phases.sum(), summary.replay_seconds),
        "{summary:?}"
    );
    let shown = shown.lock().clone().expect("CONFIG EXIT's record");
    (shown, emitted)
}

fn check_adds_up(r: &OutcomeRecord) {
    let p = &r.phases;
    assert!(close(p.sum(), p.window), "{p:?}");
    for (name, v) in p.named() {
        assert!(v >= 0.0 && v <= p.window + 1e-12, "{name}={v} of {p:?}");
    }
}

#[test]
fn phases_add_up_to_the_window_and_waits_cover_each_pass() {
    for (scope, restore) in [
        (Scope::All, RestoreMode::Full),
        (Scope::Arguments, RestoreMode::Dirty),
    ] {
        let rt = common::runtime(1);
        let policy = Policy {
            scope,
            restore,
            ..common::policy()
        };
        let (shown, r) = run(&rt, policy, 5);
        assert_eq!(r.outcome, Outcome::Replayed, "{r}");
        check_adds_up(&r);
        check_adds_up(&shown);
        // CONFIG EXIT saw the window up to itself; the emitted record has all of it.
        assert!(shown.phases.window <= r.phases.window, "{shown:?} {r:?}");
        assert_eq!(r.pass_launch_seconds.len(), 5);
        assert_eq!(r.pass_wait_seconds.len(), 5);
        // Each pass's wait on the virtual clock holds the kernel's whole run.
        for w in &r.pass_wait_seconds {
            assert!(
                *w >= KERNEL.as_secs_f64() - 1e-12,
                "{:?}",
                r.pass_wait_seconds
            );
        }
        let waits: f64 = r.pass_wait_seconds.iter().sum();
        let launches: f64 = r.pass_launch_seconds.iter().sum();
        assert!(close(waits, r.phases.wait), "{r:?}");
        assert!(close(launches, r.phases.launch), "{r:?}");
        assert!(
            r.phases.wait >= 5.0 * KERNEL.as_secs_f64() - 1e-12,
            "{:?}",
            r.phases
        );
        // Nothing in the window is left unattributed: the passes' GPU time is inside it.
        let gpu: f64 = r.pass_gpu_seconds.iter().sum();
        assert!(r.phases.window >= gpu - 1e-12, "{r:?}");
        rt.wait_idle();
    }
}

#[test]
fn a_declined_dispatch_has_no_pass_phases_and_still_adds_up() {
    let rt = common::runtime(1);
    let policy = Policy {
        scope: Scope::All,
        restore: RestoreMode::Full,
        max_snapshot_bytes: 64,
        ..common::policy()
    };
    let (shown, r) = run(&rt, policy, 3);
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Declined, Reason::FootprintBudget),
        "{r}"
    );
    check_adds_up(&r);
    check_adds_up(&shown);
    assert_eq!(r.phases.launch, 0.0);
    assert_eq!(r.phases.wait, 0.0);
    assert_eq!(r.phases.capture, 0.0);
    assert!(r.pass_launch_seconds.is_empty() && r.pass_wait_seconds.is_empty());
    rt.wait_idle();
}

#[test]
fn records_without_a_window_have_no_window_phases() {
    let rt = common::runtime(1);
    let (_, r) = run(&rt, common::policy(), 1);
    assert_eq!(r.outcome, Outcome::NotRequested, "{r}");
    assert_eq!(r.phases.window, 0.0);
    assert_eq!(r.phases.sum(), 0.0);
    rt.wait_idle();
}

/// Every dispatch of a run, replayed under different pass counts, scopes and restores, some
/// as nodes of a graph: each emitted record's phases add up to its window on the window's
/// clock, its passes' launches and waits are its `launch` and `wait`, its capture and
/// restores fit inside their phases, and the run summary's window time is the sum of the
/// records' windows. The graph node a dispatch ran as is in its records, CONFIG EXIT's too.
#[test]
fn every_replayed_dispatch_adds_up_and_names_its_graph_node() {
    let rt = common::runtime(1);
    let shown: Arc<Mutex<Vec<OutcomeRecord>>> = Arc::default();
    let emitted: Arc<Mutex<Vec<OutcomeRecord>>> = Arc::default();
    let s = Arc::clone(&shown);
    let svc = common::with_tool(
        &rt,
        Policy {
            scope: Scope::Arguments,
            restore: RestoreMode::Dirty,
            ..common::policy()
        },
        move |op, ph, p: &mut ReplayPayload<'_>, _: &mut UserData| match (op, ph) {
            (Operation::Config, Phase::Enter) => {
                // 2, 3, 4, ... passes by dispatch.
                let n = 1 + p.dispatch_info.dispatch_id.0 % 4 + 1;
                p.replay_pass_count = Some(Arc::new(move |_, _| n));
            }
            (Operation::Config, Phase::Exit) => s.lock().extend(p.outcome.cloned()),
            _ => {}
        },
    );
    let e = Arc::clone(&emitted);
    svc.set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
        e.lock().push(r.clone())
    })));
    let a = AgentId(0);
    let buf = rt
        .alloc(a, (N * 4) as u64, MemoryClass::DEVICE_COARSE)
        .unwrap();
    rt.write_u32s(buf, &vec![7u32; N]).unwrap();
    let k = common::rmw_kernel(Arc::default()).with_duration(KERNEL);
    let launch = || {
        rt.dispatch(
            rt.queue(a, 0),
            &k,
            &common::args(buf, 0),
            common::grid(N as u32),
        )
        .unwrap()
        .wait()
        .unwrap();
    };
    let node = |graph, node, launch| replay_core::GraphNode {
        graph,
        node: Some(node),
        launch,
        serialized: false,
    };
    launch();
    for l in 0..2 {
        for n in 0..2 {
            replay_mock::with_graph_node(node(1, n, l), launch);
        }
    }
    launch();
    rt.wait_idle();

    let emitted = emitted.lock().clone();
    let shown = shown.lock().clone();
    assert_eq!(emitted.len(), 6, "{emitted:?}");
    assert_eq!(shown.len(), 6);
    let mut windows = 0.0;
    for (r, seen) in emitted.iter().zip(&shown) {
        assert_eq!(r.outcome, Outcome::Replayed, "{r}");
        assert_eq!(r.dispatch_id, seen.dispatch_id);
        assert_eq!(
            u64::from(r.executed_passes),
            1 + r.dispatch_id.0 % 4 + 1,
            "{r}"
        );
        check_adds_up(r);
        check_adds_up(seen);
        let p = &r.phases;
        assert!(p.window > 0.0, "{p:?}");
        assert!(seen.phases.window <= p.window + 1e-12, "{seen:?} {r:?}");
        let waits: f64 = r.pass_wait_seconds.iter().sum();
        let launches: f64 = r.pass_launch_seconds.iter().sum();
        assert!(close(waits, p.wait) && close(launches, p.launch), "{r:?}");
        let gpu: f64 = r.pass_gpu_seconds.iter().sum();
        assert!(gpu >= f64::from(r.executed_passes) * KERNEL.as_secs_f64() - 1e-12);
        assert!(p.wait + p.launch >= gpu - 1e-12, "{r:?}");
        assert!(p.window >= gpu - 1e-12, "{r:?}");
        windows += p.window;
        // The graph tag is the same in both records.
        assert_eq!(r.graph, seen.graph);
    }
    let s = svc.summary();
    assert!(close(s.replay_seconds, windows), "{s:?} vs {windows}");
    assert!(close(s.phases.sum(), windows), "{s:?}");
    let tags: Vec<_> = emitted.iter().map(|r| r.graph).collect();
    assert_eq!(
        tags,
        vec![
            None,
            Some(node(1, 0, 0)),
            Some(node(1, 1, 0)),
            Some(node(1, 0, 1)),
            Some(node(1, 1, 1)),
            None
        ]
    );
}
