//! A small concurrent run: several application threads on two agents, a replaying tool that
//! launches tool work, one injected stall; the invariants hold and every buffer ends with
//! exactly one execution per dispatch.

mod common;

use std::sync::Arc;
use std::time::Duration;

use replay_core::{AgentId, MemoryClass, Operation, Phase, Policy, ReplayPayload, UserData};
use replay_mock::{Fault, FaultMode, Kernel};

const N: usize = 256;
const ROUNDS: usize = 12;

#[test]
fn concurrent_windows_keep_the_invariants() {
    let rt = common::runtime(2);
    let weak = rt.downgrade();
    let tool_buf = rt.alloc(AgentId(0), 64, MemoryClass::TOOL_OWNED).unwrap();
    let mark = Kernel::new("tool_mark", |ctx| {
        let b = ctx.word(0);
        ctx.atomic_add_u64(b, 1)?;
        Ok(())
    });
    let policy = Policy {
        pass_timeout: Duration::from_secs(30),
        ..common::policy()
    };
    common::with_tool(
        &rt,
        policy,
        move |op, ph, p: &mut ReplayPayload<'_>, _ud: &mut UserData| {
            if op == Operation::Config && ph == Phase::Enter {
                p.replay_pass_count = Some(Arc::new(|_, _| 3));
            }
            if op == Operation::Pass && ph == Phase::Exit && p.current_pass == 1 {
                let rt = weak.upgrade().unwrap();
                let q = rt.queue(AgentId(0), 1);
                rt.dispatch(q, &mark, &common::args(tool_buf, 0), common::grid(1))
                    .unwrap()
                    .wait()
                    .unwrap();
            }
        },
    );
    rt.inject(AgentId(1), Fault::QueueDrainStuck, FaultMode::Once);

    let threads: Vec<_> = (0..4)
        .map(|t| {
            let rt = rt.clone();
            std::thread::spawn(move || {
                let a = AgentId(t as u64 % 2);
                let q = rt.queue(a, t / 2);
                let buf = rt
                    .alloc(a, (N * 4) as u64, MemoryClass::DEVICE_COARSE)
                    .unwrap();
                let init: Vec<u32> = (0..N as u32).map(|i| i * (t as u32 + 1)).collect();
                // Through the queue (a Copy submission): a host write could land inside
                // another thread's window on this agent and be undone by its restore.
                let bytes: Vec<u8> = init.iter().flat_map(|v| v.to_le_bytes()).collect();
                rt.write_async(q, buf, &bytes).unwrap().wait().unwrap();
                let k = common::rmw_kernel(Arc::default());
                let mut expect = init;
                for _ in 0..ROUNDS {
                    rt.dispatch(q, &k, &common::args(buf, 0), common::grid(N as u32))
                        .unwrap()
                        .wait()
                        .unwrap();
                    expect = common::rmw_once(&expect);
                }
                assert_eq!(rt.read_u32s(buf, N).unwrap(), expect, "thread {t}");
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    rt.wait_idle();
    rt.check_invariants().unwrap();
    let st = rt.gpu().invariants().stats();
    assert_eq!(st.windows_opened, st.windows_closed);
    assert_eq!(st.windows_opened, 4 * ROUNDS as u64);
    assert!(st.tool_work_in_window > 0);
    let summary = rt.service().unwrap().summary();
    assert_eq!(summary.replayed, 4 * ROUNDS as u64 - 1);
    assert_eq!(
        summary.declined.get("queue_drain_stuck"),
        Some(&1),
        "{summary:?}"
    );
    assert_eq!(
        summary.declined.get("reentrant_dispatch"),
        Some(&(4 * ROUNDS as u64 - 1)),
        "one tool launch per replayed dispatch"
    );
}
