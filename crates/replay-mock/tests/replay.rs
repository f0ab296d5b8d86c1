//! End to end through a real `ReplayService` and `replay-memory`'s engine.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::{
    Agent, AgentId, MemoryClass, Operation, Origin, Outcome, Phase, Reason, ReplayPayload, UserData,
};
use replay_mock::{CounterGroup, Expect, Kernel, ModuleSpec, SimRuntime, Stage, Violation};

const N: usize = 4096;

fn initial() -> Vec<u32> {
    (0..N as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect()
}

/// Sets up a buffer and a module counter; returns (buf, hits).
fn setup(rt: &SimRuntime) -> (u64, u64) {
    let a = AgentId(0);
    let m = rt
        .load_module(a, ModuleSpec::new("app").variable("hits", 8))
        .unwrap();
    let buf = rt
        .alloc(a, (N * 4) as u64, MemoryClass::DEVICE_COARSE)
        .unwrap();
    rt.write_u32s(buf, &initial()).unwrap();
    (buf, m.variable("hits").unwrap())
}

#[test]
fn four_passes_see_identical_inputs_and_memory_ends_as_one_execution() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let weak = rt.downgrade();
    let collected: Arc<Mutex<BTreeMap<u32, (CounterGroup, u64)>>> = Arc::default();
    let sink = Arc::clone(&collected);
    // A demo tool: four passes, one counter group per pass.
    let svc = common::with_tool(
        &rt,
        common::policy(),
        move |op, ph, p: &mut ReplayPayload<'_>, _ud: &mut UserData| {
            let rt = weak.upgrade().expect("runtime alive");
            let counters = rt.gpu().counters();
            match (op, ph) {
                (Operation::Config, Phase::Enter) => {
                    p.replay_pass_count = Some(Arc::new(|_, _| 4));
                }
                (Operation::Pass, Phase::Enter) => {
                    counters.select(
                        p.dispatch_info.agent,
                        CounterGroup::from_index(p.current_pass),
                    );
                }
                (Operation::Pass, Phase::Exit) => {
                    let g = CounterGroup::from_index(p.current_pass).unwrap();
                    let v = counters
                        .read_last(p.dispatch_info.dispatch_id, g)
                        .expect("the pass's counters are there in PASS EXIT");
                    sink.lock().insert(p.current_pass, (g, v));
                }
                _ => {}
            }
        },
    );
    let (buf, hits) = setup(&rt);
    rt.gpu().recorder().clear();

    let inputs: common::Inputs = Arc::default();
    let k = common::rmw_kernel(Arc::clone(&inputs));
    let c = rt
        .dispatch(
            rt.queue(a, 0),
            &k,
            &common::args(buf, hits),
            common::grid(N as u32),
        )
        .unwrap();
    let rec = c.record().expect("an outcome record");
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    assert_eq!(rec.executed_passes, 4);
    c.wait().unwrap();
    assert_eq!(c.fired(), 1);

    // Every pass saw identical input bytes.
    let seen = inputs.lock().clone();
    assert_eq!(seen.len(), 4);
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");

    // Memory holds exactly one execution's result, the atomic counter included.
    assert_eq!(rt.read_u32s(buf, N).unwrap(), common::rmw_once(&initial()));
    assert_eq!(rt.read(hits, 8).unwrap(), 1u64.to_le_bytes());

    // The same as a run with no replay at all.
    let plain = common::runtime(1);
    let (pbuf, phits) = setup(&plain);
    assert_eq!(
        (pbuf, phits),
        (buf, hits),
        "same addresses in a fresh runtime"
    );
    plain
        .dispatch(
            plain.queue(a, 0),
            &k,
            &common::args(pbuf, phits),
            common::grid(N as u32),
        )
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(plain.digest_agent_memory(a), rt.digest_agent_memory(a));

    // One counter group per pass, computed from what the kernel did.
    let got = collected.lock().clone();
    let n = N as u64;
    assert_eq!(got[&0], (CounterGroup::WorkItems, n));
    assert_eq!(got[&1], (CounterGroup::BytesRead, 4 * n + 8));
    assert_eq!(got[&2], (CounterGroup::BytesWritten, 4 * n + 8));
    assert_eq!(got[&3], (CounterGroup::Instructions, 4));
    // A group that was not collected in a pass cannot be read for it.
    let counters = rt.gpu().counters();
    let s1 = counters.read(rec.dispatch_id, 1).unwrap();
    assert_eq!(s1.group, Some(CounterGroup::BytesRead));
    assert_eq!(counters.executions(rec.dispatch_id), 4);

    // The window's calls, in order.
    Expect::new()
        .for_agent(a)
        .window_drains()
        .passes(4)
        .signal()
        .assert_finished(rt.gpu().recorder());

    rt.wait_idle();
    rt.check_invariants().unwrap();
    let st = rt.gpu().invariants().stats();
    assert_eq!(
        (st.windows_opened, st.windows_closed, st.passes_executed),
        (1, 1, 4)
    );
    assert_eq!(svc.summary().replayed, 1);
}

#[test]
fn without_a_service_or_inactive_the_dispatch_just_runs() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let (buf, hits) = setup(&rt);
    let inputs: common::Inputs = Arc::default();
    let k = common::rmw_kernel(Arc::clone(&inputs));
    rt.gpu().recorder().clear();
    let c = rt
        .dispatch(
            rt.queue(a, 0),
            &k,
            &common::args(buf, hits),
            common::grid(N as u32),
        )
        .unwrap();
    c.wait().unwrap();
    assert!(c.record().is_none());
    let svc = common::with_replay(&rt, 4);
    svc.stop().unwrap();
    rt.dispatch(
        rt.queue(a, 0),
        &k,
        &common::args(buf, hits),
        common::grid(N as u32),
    )
    .unwrap()
    .wait()
    .unwrap();
    assert_eq!(inputs.lock().len(), 2);
    Expect::new()
        .ordinary_of("rmw")
        .ordinary_of("rmw")
        .assert_finished(rt.gpu().recorder());
    rt.wait_idle();
    rt.check_invariants().unwrap();
}

#[test]
fn tool_work_from_a_callback_runs_once_on_the_same_thread_and_forwarded() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let weak = rt.downgrade();
    let tool_buf = rt.alloc(a, 64, MemoryClass::TOOL_OWNED).unwrap();
    let records = Arc::new(Mutex::new(Vec::new()));
    let recs = Arc::clone(&records);
    let mark = Kernel::new("tool_mark", |ctx| {
        let b = ctx.word(0);
        ctx.atomic_add_u64(b, 1)?;
        Ok(())
    });
    common::with_tool(
        &rt,
        common::policy(),
        move |op, ph, p: &mut ReplayPayload<'_>, _ud: &mut UserData| {
            if op == Operation::Config && ph == Phase::Enter {
                if p.dispatch_info.kernel_name.as_ref() == "rmw" {
                    p.replay_pass_count = Some(Arc::new(|_, _| 2));
                }
                return;
            }
            if op == Operation::Pass && ph == Phase::Enter && p.current_pass == 0 {
                let rt = weak.upgrade().unwrap();
                let q = rt.queue(AgentId(0), 1);
                let args = common::args(tool_buf, 0);
                let same = rt.dispatch(q, &mark, &args, common::grid(1)).unwrap();
                let fwd = rt
                    .dispatch_forwarded(q, &mark, &args, common::grid(1))
                    .unwrap();
                fwd.wait_submitted().unwrap();
                same.wait().unwrap();
                fwd.wait().unwrap();
                recs.lock().push(same.record().unwrap());
                recs.lock().push(fwd.record().unwrap());
            }
        },
    );
    let (buf, hits) = setup(&rt);
    rt.gpu().recorder().clear();
    let k = common::rmw_kernel(Arc::default());
    let c = rt
        .dispatch(
            rt.queue(a, 0),
            &k,
            &common::args(buf, hits),
            common::grid(N as u32),
        )
        .unwrap();
    c.wait().unwrap();
    assert_eq!(c.record().unwrap().outcome, Outcome::Replayed);
    let recs = records.lock().clone();
    assert_eq!(recs.len(), 2);
    for r in &recs {
        assert_eq!(r.reason, Reason::ReentrantDispatch, "{r}");
        assert_eq!(r.executed_passes, 1);
    }
    // Tool work ran once each, and its memory is the tool's (not restored).
    assert_eq!(rt.read(tool_buf, 8).unwrap(), 2u64.to_le_bytes());
    Expect::new()
        .window_drains()
        .tool_work()
        .tool_work()
        .passes(2)
        .signal()
        .assert_finished(rt.gpu().recorder());
    rt.wait_idle();
    rt.check_invariants().unwrap();
    assert_eq!(rt.gpu().invariants().stats().tool_work_in_window, 2);
}

#[test]
fn ordinary_work_inside_a_window_is_flagged() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let weak = rt.downgrade();
    let intruder = Kernel::new("intruder", |_| Ok(()));
    common::with_tool(
        &rt,
        common::policy(),
        move |op, ph, p: &mut ReplayPayload<'_>, _ud: &mut UserData| {
            if op == Operation::Config && ph == Phase::Enter {
                p.replay_pass_count = Some(Arc::new(|_, _| 2));
            }
            if op == Operation::Pass && ph == Phase::Enter && p.current_pass == 1 {
                // Another thread bypasses the service's lock and submits straight to the agent.
                let rt = weak.upgrade().unwrap();
                let intruder = intruder.clone();
                std::thread::spawn(move || {
                    let q = rt.queue(AgentId(0), 1);
                    let (d, c) = rt
                        .make_dispatch(q, &intruder, &[], common::grid(1), Origin::SubmittingThread)
                        .unwrap();
                    rt.agent(AgentId(0)).submit_ordinary(&d).unwrap();
                    c.wait().unwrap();
                    rt.forget_dispatch(&c);
                })
                .join()
                .unwrap();
            }
        },
    );
    let (buf, hits) = setup(&rt);
    let k = common::rmw_kernel(Arc::default());
    rt.dispatch(
        rt.queue(a, 0),
        &k,
        &common::args(buf, hits),
        common::grid(N as u32),
    )
    .unwrap()
    .wait()
    .unwrap();
    rt.wait_idle();
    let v = rt.check_invariants().unwrap_err();
    let stages: Vec<Stage> = v
        .iter()
        .filter_map(|x| match x {
            Violation::OrdinaryDuringWindow { kernel, stage, .. } if kernel == "intruder" => {
                Some(*stage)
            }
            _ => None,
        })
        .collect();
    assert_eq!(stages, vec![Stage::Submitted, Stage::Executed], "{v:?}");
    assert!(v[0].to_string().contains("while a replay window was open"));
}

#[test]
fn a_pass_of_a_barrier_submission_is_never_attempted() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    common::with_replay(&rt, 4);
    rt.gpu().recorder().clear();
    let c = rt.barrier(rt.queue(a, 0)).unwrap();
    c.wait().unwrap();
    Expect::new()
        .event(replay_mock::Pattern {
            kernel: Some("<barrier>".into()),
            ..replay_mock::Pattern::kind(replay_mock::EventKind::OrdinaryRun)
        })
        .assert_finished(rt.gpu().recorder());
}

#[test]
fn a_forwarded_dispatch_runs_its_window_on_the_runtime_thread() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let threads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&threads);
    common::with_tool(
        &rt,
        common::policy(),
        move |op, ph, p: &mut ReplayPayload<'_>, _ud: &mut UserData| {
            if op == Operation::Config && ph == Phase::Enter {
                p.replay_pass_count = Some(Arc::new(|_, _| 2));
                seen.lock()
                    .push(std::thread::current().name().map(String::from));
            }
        },
    );
    let (buf, hits) = setup(&rt);
    let inputs: common::Inputs = Arc::default();
    let k = common::rmw_kernel(Arc::clone(&inputs));
    let c = rt
        .dispatch_forwarded(
            rt.queue(a, 0),
            &k,
            &common::args(buf, hits),
            common::grid(N as u32),
        )
        .unwrap();
    let rec = c.wait_submitted().unwrap().expect("a record");
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    c.wait().unwrap();
    assert_eq!(rt.read_u32s(buf, N).unwrap(), common::rmw_once(&initial()));
    assert_eq!(*threads.lock(), vec![Some("sim-runtime".to_string())]);
    rt.wait_idle();
    rt.check_invariants().unwrap();
}
