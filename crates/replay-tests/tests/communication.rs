//! Communication kernels (SPEC §9.2) on the simulator: a kernel the policy's communication list
//! names runs once, whatever the tool asks, and is counted; with the list empty it is replayed
//! like any kernel, and a pass that spins (a peer that does not repeat its side, modelled by a
//! pass that never completes) truncates at the pass bound with memory equal to one execution.

use std::time::{Duration, Instant};

use replay_core::{KernelMemo, Outcome, Policy, Reason};
use replay_mock::{Fault, FaultMode, SimRuntime};
use replay_tests::{
    assert_matches_reference, assert_outcome, fast_policy, finish, reference, rmw_kernel, runtime,
    Replay, RmwApp, ToolScript, A0, RMW_N,
};

const ALLREDUCE: &str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL";

fn once() -> Vec<replay_core::Digest128> {
    reference(1, |rt| comm_app(rt).run_plain(rt))
}

fn comm_app(rt: &SimRuntime) -> RmwApp {
    let mut app = RmwApp::setup(rt);
    app.kernel = rmw_kernel(ALLREDUCE, app.inputs.clone());
    app
}

fn setup(policy: Policy) -> (SimRuntime, Replay, RmwApp) {
    let rt = runtime(1);
    let replay = ToolScript::passes(3).install(&rt, policy);
    let app = comm_app(&rt);
    rt.gpu().recorder().clear();
    (rt, replay, app)
}

fn memory_is_one_execution(rt: &SimRuntime, app: &RmwApp) {
    assert_eq!(
        rt.read_u32s(app.buf, RMW_N).unwrap(),
        replay_tests::rmw_once(&RmwApp::initial())
    );
    assert_eq!(app.counter_value(rt), 1, "the kernel's atomic moved once");
    assert_matches_reference(rt, &once());
}

#[test]
fn a_communication_kernel_runs_once_and_is_counted() {
    let (rt, replay, app) = setup(fast_policy());
    let c = app.launch(&rt);
    c.wait().unwrap();
    assert_eq!(c.fired(), 1);
    assert_eq!(c.record(), None, "no window opened for it");
    assert_eq!(app.seen().len(), 1, "executed once");
    assert!(replay.log.outcomes().is_empty(), "the tool saw no CONFIG");
    assert_eq!(replay.svc.communication_runs(), 1);
    memory_is_one_execution(&rt, &app);
    finish(&rt);
}

fn env(pairs: &'static [(&'static str, &'static str)]) -> replay_core::policy::EnvPolicy {
    Policy::lookup_over(Policy::default(), move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| std::ffi::OsString::from(*v))
    })
}

#[test]
fn the_list_comes_from_the_environment_and_none_empties_it() {
    let p = env(&[("KREPLAY_COMMUNICATION_KERNELS", "none")]).policy;
    assert!(p.filter.communication.is_empty());
    let p = env(&[("KREPLAY_COMMUNICATION_KERNELS", "mpi_*, shmem")]).policy;
    assert_eq!(p.filter.communication, vec!["mpi_*", "shmem"]);
    assert!(p.filter.is_communication("MPI_allgather"));
    let e = env(&[("KREPLAY_COMMUNICATION_KERNELS", "nccl,,x")]);
    assert_eq!(
        e.errors.len(),
        1,
        "an empty pattern is an error: {:?}",
        e.errors
    );
    assert_eq!(e.errors[0].variable, "KREPLAY_COMMUNICATION_KERNELS");
    assert_eq!(
        e.policy.filter.communication,
        Policy::default().filter.communication,
        "a bad value keeps the default list"
    );
}

#[test]
fn with_the_list_empty_it_is_replayed_like_any_kernel() {
    let mut policy = fast_policy();
    policy.filter.communication.clear();
    let (rt, replay, app) = setup(policy);
    let rec = app.run(&rt);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!(rec.executed_passes, 3);
    assert_eq!(replay.svc.communication_runs(), 0);
    memory_is_one_execution(&rt, &app);
    finish(&rt);
}

#[test]
fn replayed_anyway_a_spinning_pass_truncates_at_the_bound_and_nothing_hangs() {
    let mut policy = fast_policy();
    policy.filter.communication.clear();
    let (rt, replay, app) = setup(policy);
    // The second pass spins: its peers ran their side once.
    rt.inject(A0, Fault::PassStuck { pass: 1 }, FaultMode::Once);
    let wall = Instant::now();
    let rec = app.run(&rt);
    assert!(wall.elapsed() < Duration::from_secs(5), "bounded");
    assert_outcome(&rec, Outcome::Truncated, Reason::PassDrainStuck);
    assert_eq!(
        replay.svc.kernel_memo(&app.kernel.key(A0)),
        Some(KernelMemo::NoReplay),
        "its later dispatches are not replayed"
    );
    rt.wait_idle();
    memory_is_one_execution(&rt, &app);
    finish(&rt);
}

#[test]
fn a_kernel_of_a_code_object_declared_communication_runs_once_whatever_its_name() {
    // A backend that sees a module link NVSHMEM declares its code object: its kernels run
    // once though no name on the list matches; forgetting the code object (its unload) ends it.
    let rt = runtime(1);
    let replay = ToolScript::passes(3).install(&rt, fast_policy());
    let mut app = RmwApp::setup(&rt);
    app.kernel = rmw_kernel("put_signal_block", app.inputs.clone());
    app.kernel.code_object = 0x77;
    rt.gpu().recorder().clear();
    replay.svc.mark_communication_code_object(A0, 0x77);
    assert!(replay
        .svc
        .is_communication(&app.kernel.key(A0), "put_signal_block"));
    let c = app.launch(&rt);
    c.wait().unwrap();
    assert_eq!(c.record(), None, "no window opened for it");
    assert_eq!(app.seen().len(), 1, "executed once");
    assert_eq!(replay.svc.communication_runs(), 1);
    assert_eq!(
        rt.read_u32s(app.buf, RMW_N).unwrap(),
        replay_tests::rmw_once(&RmwApp::initial())
    );
    replay.svc.forget_code_object(A0, 0x77);
    assert!(!replay
        .svc
        .is_communication(&app.kernel.key(A0), "put_signal_block"));
    let c = app.launch(&rt);
    c.wait().unwrap();
    assert_outcome(
        &c.record().expect("a window"),
        Outcome::Replayed,
        Reason::None,
    );
    assert_eq!(replay.svc.communication_runs(), 1);
    finish(&rt);
}
