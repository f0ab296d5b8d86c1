//! A rank's replay time against the collective timeout, end to end on the simulated GPU with
//! virtual time: windows long enough warn once each kind, with the numbers, in the report's
//! `collective_timeout`; short ones say nothing.

use std::sync::Arc;
use std::time::Duration;

use replay_core::{
    AgentId, ContextId, Dim3, MemoryClass, NoContextControl, Policy, ReplayService, Subscription,
};
use replay_mock::{
    AgentConfig, KernArgs, Kernel, KernelCtx, KernelError, SimClock, SimRuntime, SimTools,
};
use replay_tools::collective::{timeout_in_force, ReplayTimeWatch};
use replay_tools::{BuiltinTool, ToolKind};

fn rank_of_two(timeout: &'static str) -> ReplayTimeWatch {
    let env = move |v: &str| match v {
        "WORLD_SIZE" => Some("2".to_string()),
        "GLOO_TIMEOUT_SECONDS" => Some(timeout.to_string()),
        _ => None,
    };
    ReplayTimeWatch::for_env(&env).expect("a rank of two")
}

fn attach(rt: &SimRuntime, watch: ReplayTimeWatch) -> Arc<BuiltinTool<SimTools>> {
    let policy = Policy {
        drain_timeout: Duration::from_secs(10_000),
        pass_timeout: Duration::from_secs(10_000),
        ..Policy::default()
    };
    let svc = Arc::new(ReplayService::new(
        policy,
        rt.clock(),
        Arc::new(NoContextControl),
    ));
    let tool =
        Arc::new(BuiltinTool::new(ToolKind::Timing, 3, SimTools::new(rt)).with_watch(Some(watch)));
    svc.configure(
        ContextId(1),
        Subscription::CONFIG | Subscription::PASS,
        Arc::clone(&tool) as Arc<dyn replay_core::ReplayTool>,
    )
    .unwrap();
    svc.start().unwrap();
    rt.set_service(Some(svc));
    tool
}

fn touch(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let buf = ctx.word(0);
    ctx.write(buf, &[1, 2, 3, 4])?;
    Ok(())
}

#[test]
fn a_ranks_long_replay_warns_once_with_the_timeout_and_its_variable() {
    let rt = SimRuntime::builder()
        .agents(1, AgentConfig::default())
        .clock(SimClock::virtual_time())
        .build();
    // 100 s of timeout: a window of three 20 s passes is 60 s, past half of it.
    let tool = attach(&rt, rank_of_two("100"));
    let buf = rt
        .alloc(AgentId(0), 64, MemoryClass::DEVICE_COARSE)
        .unwrap();
    let args = KernArgs::new().ptr(buf).build();
    let short = Kernel::new("short", touch).with_duration(Duration::from_millis(10));
    let long = Kernel::new("long", touch).with_duration(Duration::from_secs(20));
    let run = |k: &Kernel| {
        rt.dispatch(rt.queue(AgentId(0), 0), k, &args, Dim3::new(1, 1, 1))
            .unwrap()
            .wait()
            .unwrap();
    };
    run(&short);
    let r = &tool.report_members()["collective_timeout"];
    assert_eq!(r["timeout_seconds"], 100.0, "{r}");
    assert_eq!(r["source"], "GLOO_TIMEOUT_SECONDS=100", "{r}");
    assert!(r["warnings"].as_array().unwrap().is_empty(), "{r}");
    run(&long);
    run(&long);
    let r = &tool.report_members()["collective_timeout"];
    let warnings: Vec<&str> = r["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    // The window and the total each warn once, though the second window passes both again.
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("one replay window took 60."),
        "{warnings:?}"
    );
    assert!(warnings[0].contains("long"), "{warnings:?}");
    assert!(
        warnings
            .iter()
            .all(|w| w.contains("100 s (GLOO_TIMEOUT_SECONDS=100)")),
        "{warnings:?}"
    );
    assert!(warnings[1].contains("in 2 windows"), "{warnings:?}");
    assert_eq!(r["windows"], 3, "{r}");
    assert!(r["replay_seconds"].as_f64().unwrap() >= 120.0, "{r}");
}

#[test]
fn a_single_process_is_not_watched() {
    assert!(ReplayTimeWatch::for_env(&|_| None).is_none());
    assert_eq!(timeout_in_force(&|_| None).seconds, 600.0);
}
