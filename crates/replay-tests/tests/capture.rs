//! Capture of one dispatch from PASS ENTER (SPEC §13), on the simulator: the capture is the
//! pass's snapshot (no extra execution; inputs restored for a later pass, outputs of one
//! execution), it holds only the scope, mapped memory is captured with its class, and every
//! refusal says why without changing the dispatch.

use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::Capabilities;
use replay_core::{
    ArgLayout, Capture, CaptureRefused, CaptureRequest, MemoryClass, Operation, Origin, Outcome,
    Phase, Policy, Reason, ReplayPayload, ReplayService, Scope, Subscription, UserData,
};
use replay_mock::{
    AgentConfig, HandleKind, KernArgs, Kernel, MapAccess, ModuleSpec, SimRuntime, SIM_CAPABILITIES,
};
use replay_tests::{
    fast_policy, grid, rmw_once, runtime, runtime_with, small_agent, RmwApp, A0, RMW_N,
};

type Results = Arc<Mutex<Vec<Result<Capture, CaptureRefused>>>>;

/// Where a capture is asked for: operation, phase, pass.
type At = (Operation, Phase, u32);

/// A tool that asks for `passes` passes and for a capture at `at` of pass `pass`.
fn install(
    rt: &SimRuntime,
    policy: Policy,
    passes: u64,
    at: At,
    max_bytes: u64,
) -> (Arc<ReplayService>, Results) {
    let contexts = Arc::new(replay_context::Contexts::new());
    let ctx = contexts.create_context();
    contexts.activate(ctx).unwrap();
    let svc = Arc::new(ReplayService::new(
        policy,
        rt.clock(),
        contexts as Arc<dyn replay_core::ContextControl>,
    ));
    let results: Results = Arc::default();
    let sink = Arc::clone(&results);
    svc.configure(
        ctx,
        Subscription::CONFIG | Subscription::PASS,
        Arc::new(
            move |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData| {
                if (op, ph) == (Operation::Config, Phase::Enter) {
                    p.replay_pass_count = Some(Arc::new(move |_, _| passes));
                }
                if (op, ph, p.current_pass) == at {
                    let s = Arc::clone(&sink);
                    p.request_capture(
                        CaptureRequest::new(Arc::new(move |c| s.lock().push(c)))
                            .max_bytes(max_bytes),
                    );
                }
            },
        ),
    )
    .unwrap();
    svc.start().unwrap();
    rt.set_service(Some(Arc::clone(&svc)));
    (svc, results)
}

/// The rmw kernel, loaded from a module (so it has a code image).
fn module_rmw(rt: &SimRuntime, app: &RmwApp) -> Kernel {
    let body = app.kernel.body.clone();
    let m = rt
        .load_module(A0, ModuleSpec::new("t.co").kernel("rmw", move |c| body(c)))
        .unwrap();
    m.kernel("rmw").unwrap()
}

fn run(rt: &SimRuntime, kernel: &Kernel, args: &[u8]) -> replay_core::OutcomeRecord {
    let c = rt
        .dispatch(rt.queue(A0, 0), kernel, args, grid(RMW_N as u32))
        .unwrap();
    c.wait().unwrap();
    assert_eq!(c.fired(), 1);
    c.record().unwrap()
}

fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

#[test]
fn a_capture_in_a_later_pass_holds_the_restored_inputs_and_one_executions_outputs() {
    let ordered = AgentConfig {
        capabilities: SIM_CAPABILITIES | Capabilities::ORDERED_RESTORE,
        ..small_agent()
    };
    // Restores waited for on the host, and ordered on the device (the capture waits for the
    // restore before it reads).
    for (scope, agent) in [
        (Scope::All, small_agent()),
        (Scope::Arguments, small_agent()),
        (Scope::All, ordered.clone()),
        (Scope::Arguments, ordered),
    ] {
        let rt = runtime_with(&[agent]);
        let app = RmwApp::setup(&rt);
        let k = module_rmw(&rt, &app);
        let policy = Policy {
            scope,
            ..fast_policy()
        };
        let (_svc, results) = install(&rt, policy, 3, (Operation::Pass, Phase::Enter, 1), 1 << 30);
        let rec = run(&rt, &k, &app.args());
        // The capture is one of the passes: no execution more.
        assert_eq!(
            (rec.outcome, rec.executed_passes),
            (Outcome::Replayed, 3),
            "{rec}"
        );
        assert_eq!(app.inputs.lock().len(), 3);
        let got = results.lock();
        let c = got[0].as_ref().expect("captured");
        assert_eq!(c.pass, 1);
        assert_eq!(c.scope, scope);
        assert_eq!(c.code.format, "sim-module");
        assert_eq!(
            (c.code.module.as_str(), c.code.symbol.as_str()),
            ("t.co", "rmw")
        );
        assert_eq!(c.kernarg, app.args());
        let buf = c.regions.iter().find(|r| r.base == app.buf).expect("buf");
        assert_eq!(u32s(&buf.input), RmwApp::initial());
        assert_eq!(u32s(&buf.output), rmw_once(&RmwApp::initial()));
        // Never the tool's memory; `other` only where the scope is the whole agent.
        assert!(c.regions.iter().all(|r| r.base != app.tool_buf));
        assert_eq!(
            c.regions.iter().any(|r| r.base == app.other),
            scope == Scope::All
        );
        // And the application's memory is one execution's.
        assert_eq!(
            rt.read_u32s(app.buf, RMW_N).unwrap(),
            rmw_once(&RmwApp::initial())
        );
        rt.set_service(None);
        rt.shutdown();
    }
}

#[test]
fn mapped_memory_is_captured_with_its_class() {
    let rt = runtime(1);
    let va = rt.vmem_reserve(A0, 4096).unwrap();
    let h = rt.vmem_create(A0, 4096, HandleKind::Device).unwrap();
    rt.vmem_map(va, h).unwrap();
    rt.vmem_set_access(va, 4096, A0, MapAccess::ReadWrite)
        .unwrap();
    rt.fill(va, 4096, 3).unwrap();
    let m = rt
        .load_module(
            A0,
            ModuleSpec::new("v.co").kernel("inc", |ctx| {
                let at = ctx.word(0);
                ctx.update(at, 4096, |b| b.iter_mut().for_each(|x| *x += 1))?;
                Ok(())
            }),
        )
        .unwrap();
    let policy = Policy {
        scope: Scope::Arguments,
        ..fast_policy()
    };
    let (_svc, results) = install(&rt, policy, 2, (Operation::Pass, Phase::Enter, 0), 1 << 30);
    let rec = run(
        &rt,
        &m.kernel("inc").unwrap(),
        &KernArgs::new().ptr(va).build(),
    );
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    let got = results.lock();
    let c = got[0].as_ref().expect("captured");
    assert_eq!(c.regions.len(), 1);
    assert!(c.regions[0].class.contains(MemoryClass::VIRTUAL_MAPPING));
    assert_eq!(c.regions[0].input, vec![3; 4096]);
    assert_eq!(c.regions[0].output, vec![4; 4096]);
    rt.set_service(None);
    rt.shutdown();
}

#[test]
fn refusals_say_why_and_leave_the_dispatch_as_it_was() {
    // (name, where the capture is asked, its byte bound, the kernel from a module)
    let cases: [(&str, At, u64, bool); 4] = [
        ("too large", (Operation::Pass, Phase::Enter, 0), 64, true),
        (
            "in PASS EXIT",
            (Operation::Pass, Phase::Exit, 0),
            1 << 30,
            true,
        ),
        (
            "in CONFIG EXIT",
            (Operation::Config, Phase::Exit, 0),
            1 << 30,
            true,
        ),
        (
            "no code image",
            (Operation::Pass, Phase::Enter, 0),
            1 << 30,
            false,
        ),
    ];
    for (name, at, max, from_module) in cases {
        let rt = runtime(1);
        let app = RmwApp::setup(&rt);
        let k = if from_module {
            module_rmw(&rt, &app)
        } else {
            app.kernel.clone()
        };
        let (_svc, results) = install(&rt, fast_policy(), 2, at, max);
        let rec = run(&rt, &k, &app.args());
        assert_eq!(
            (rec.outcome, rec.reason),
            (Outcome::Replayed, Reason::None),
            "{name}: {rec}"
        );
        assert_eq!(rec.executed_passes, 2, "{name}");
        let got = results.lock();
        assert_eq!(got.len(), 1, "{name}");
        let e = got[0].as_ref().expect_err(name);
        match name {
            "too large" => assert!(matches!(e, CaptureRefused::TooLarge { max: 64, .. }), "{e}"),
            "no code image" => assert!(
                matches!(e, CaptureRefused::Backend(m) if m.contains("no loaded module")),
                "{e}"
            ),
            _ => assert_eq!(*e, CaptureRefused::NotInPassEnter),
        }
        assert_eq!(
            rt.read_u32s(app.buf, RMW_N).unwrap(),
            rmw_once(&RmwApp::initial()),
            "{name}"
        );
        rt.set_service(None);
        rt.shutdown();
    }
}

#[test]
fn an_unknown_argument_layout_is_refused() {
    let rt = runtime(1);
    let app = RmwApp::setup(&rt);
    let k = module_rmw(&rt, &app);
    let (svc, results) = install(
        &rt,
        Policy {
            scope: Scope::All,
            ..fast_policy()
        },
        2,
        (Operation::Pass, Phase::Enter, 0),
        1 << 30,
    );
    let (mut d, c) = rt
        .make_dispatch(
            rt.queue(A0, 0),
            &k,
            &app.args(),
            grid(RMW_N as u32),
            Origin::SubmittingThread,
        )
        .unwrap();
    d.arg_layout = ArgLayout::Unknown;
    let report = svc.submit(&*rt.agent(A0), &*rt.engine(A0), d).unwrap();
    let rec = report.record.unwrap();
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    rt.wait_idle();
    rt.forget_dispatch(&c);
    assert_eq!(*results.lock(), vec![Err(CaptureRefused::UnknownLayout)]);
    rt.set_service(None);
    rt.shutdown();
}

#[test]
fn a_peer_agents_memory_is_never_in_a_capture() {
    // Scope all covers the agent's own memory: a peer mapping is outside every snapshot
    // (SPEC §7.1), so a capture never holds it.
    let rt = runtime(2);
    let app = RmwApp::setup(&rt);
    let k = module_rmw(&rt, &app);
    let peer = rt
        .alloc(replay_tests::A1, 4096, MemoryClass::DEVICE_COARSE)
        .unwrap();
    rt.map_peer(A0, peer).unwrap();
    let (_svc, results) = install(
        &rt,
        Policy {
            scope: Scope::All,
            ..fast_policy()
        },
        2,
        (Operation::Pass, Phase::Enter, 0),
        1 << 30,
    );
    let rec = run(&rt, &k, &app.args());
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    let got = results.lock();
    let c = got[0]
        .as_ref()
        .map_err(|e| e.to_string())
        .expect("captured");
    let bases: Vec<u64> = c.regions.iter().map(|r| r.base).collect();
    assert!(
        bases.contains(&app.buf) && bases.contains(&app.other),
        "{bases:x?}"
    );
    assert!(!bases.contains(&peer), "{bases:x?}");
    assert!(c
        .regions
        .iter()
        .all(|r| replay_core::capture::uncapturable_class(r.class).is_none()));
    rt.set_service(None);
    rt.shutdown();
}
