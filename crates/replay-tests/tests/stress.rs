//! Concurrency stress (SPEC §6): several application threads submitting to several agents
//! (three agents, two queues each), a mix of replayed dispatches (the tool replays kernels
//! named `replay_*`, 2–4 passes), dispatches the tool does not replay, dispatches the kernel
//! filter excludes, host writes through the queues (`write_async`), and tool work launched
//! from callbacks on the window's thread and forwarded through the runtime's thread.
//!
//! Afterwards the simulator's invariant checker holds (no ordinary dispatch executed on an
//! agent while a window owned it, tool work excepted; every dispatch completed exactly once;
//! no wait exceeded its bound on the simulator's clock), every pass of every window saw
//! identical inputs, and the final memory of every agent equals a serial execution of the same
//! per-thread programs on a runtime without replay.
//!
//! Each thread owns one buffer and one counter per agent (allocated up front, in a fixed
//! order, so the serial reference has the same addresses) and runs its program in order on
//! one queue per agent, so the serial result is well defined. The programs come from a fixed
//! seed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{
    AgentId, Digest128, DispatchId, MemoryClass, Outcome, OutcomeRecord, Policy, Reason,
};
use replay_mock::{Completion, KernArgs, Kernel, KernelCtx, KernelError, SimRuntime};
use replay_tests::{
    assert_matches_reference, fast_policy, finish, grid, input_key, mark_kernel, reference,
    runtime, At, ToolScript, Watchdog,
};

const AGENTS: usize = 3;
const THREADS: usize = 4;
const ROUNDS: usize = 40;
/// `u32`s per buffer.
const N: usize = 256;
const SEED: u64 = 0x5eed_1234_abcd_0001;

/// Inputs each execution saw, by dispatch id (the same for every pass of a window).
type Seen = Arc<Mutex<HashMap<DispatchId, Vec<Digest128>>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `replay_rmw`: replayed.
    Rmw,
    /// `replay_mix`: replayed, with a modelled run time.
    Mix,
    /// `plain_add`: a candidate the tool does not replay.
    Plain,
    /// `skip_xor`: excluded by the kernel filter.
    Skip,
    /// A host write through the queue.
    Write(u32),
}

impl Op {
    fn replayed(self) -> bool {
        matches!(self, Op::Rmw | Op::Mix)
    }
}

/// A thread's program: (agent, op) per round, from a fixed seed.
fn program(thread: usize) -> Vec<(usize, Op)> {
    let mut x = SEED ^ (thread as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..ROUNDS)
        .map(|_| {
            let r = next();
            let agent = (r % AGENTS as u64) as usize;
            let op = match (r >> 8) % 8 {
                0..=2 => Op::Rmw,
                3 => Op::Mix,
                4 | 5 => Op::Plain,
                6 => Op::Skip,
                _ => Op::Write((r >> 20) as u32),
            };
            (agent, op)
        })
        .collect()
}

struct Kernels {
    rmw: Kernel,
    mix: Kernel,
    plain: Kernel,
    skip: Kernel,
}

fn record_input(seen: &Seen, ctx: &mut KernelCtx<'_>, bytes: &[u8]) {
    seen.lock()
        .entry(ctx.dispatch_id())
        .or_default()
        .push(replay_core::digest::digest(input_key(), bytes));
}

fn kernels(seen: Seen) -> Kernels {
    let s1 = Arc::clone(&seen);
    let rmw = Kernel::new(
        "replay_rmw",
        move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let (buf, counter) = (ctx.word(0), ctx.word(1));
            let mut input = ctx.read_vec(buf, N * 4)?;
            input.extend_from_slice(&ctx.read_vec(counter, 8)?);
            record_input(&s1, ctx, &input);
            let out: Vec<u8> = input[..N * 4]
                .chunks_exact(4)
                .enumerate()
                .flat_map(|(i, c)| {
                    let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    v.wrapping_mul(3).wrapping_add(i as u32 + 1).to_le_bytes()
                })
                .collect();
            ctx.write(buf, &out)?;
            ctx.atomic_add_u64(counter, 1)?;
            Ok(())
        },
    );
    let s2 = Arc::clone(&seen);
    let mix = Kernel::new(
        "replay_mix",
        move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let buf = ctx.word(0);
            let v = ctx.read_u32s(buf, N)?;
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            record_input(&s2, ctx, &bytes);
            let out: Vec<u32> = (0..N)
                .map(|i| v[i].rotate_left(5) ^ v[(i + 1) % N].wrapping_add(0x9E37 * i as u32))
                .collect();
            ctx.write_u32s(buf, &out)?;
            Ok(())
        },
    )
    .with_duration(Duration::from_micros(500));
    let plain = Kernel::new("plain_add", |ctx| {
        let buf = ctx.word(0);
        let v = ctx.read_u32s(buf, N)?;
        let out: Vec<u32> = v
            .iter()
            .enumerate()
            .map(|(i, x)| x.wrapping_add(7 + i as u32))
            .collect();
        ctx.write_u32s(buf, &out)?;
        Ok(())
    });
    let skip = Kernel::new("skip_xor", |ctx| {
        let buf = ctx.word(0);
        let v = ctx.read_u32s(buf, N)?;
        let out: Vec<u32> = v.iter().map(|x| x ^ 0xA5A5_0F0F).collect();
        ctx.write_u32s(buf, &out)?;
        Ok(())
    });
    Kernels {
        rmw,
        mix,
        plain,
        skip,
    }
}

/// Memory of the run, allocated in a fixed order on the calling thread.
#[derive(Debug, Clone)]
struct Layout {
    /// Tool-owned counter per agent.
    tool: Vec<u64>,
    /// `[thread][agent]` buffers of `N` u32s.
    bufs: Vec<Vec<u64>>,
    /// `[thread][agent]` u64 counters.
    counters: Vec<Vec<u64>>,
}

fn layout(rt: &SimRuntime) -> Layout {
    let tool = (0..AGENTS)
        .map(|a| {
            rt.alloc(AgentId(a as u64), 64, MemoryClass::TOOL_OWNED)
                .unwrap()
        })
        .collect();
    let mut bufs = vec![Vec::new(); THREADS];
    let mut counters = vec![Vec::new(); THREADS];
    for t in 0..THREADS {
        for a in 0..AGENTS {
            let agent = AgentId(a as u64);
            let b = rt
                .alloc(agent, (N * 4) as u64, MemoryClass::DEVICE_COARSE)
                .unwrap();
            let init: Vec<u32> = (0..N as u32)
                .map(|i| i.wrapping_mul(0x0101_0101 * (t as u32 + 1)) ^ a as u32)
                .collect();
            rt.write_u32s(b, &init).unwrap();
            bufs[t].push(b);
            counters[t].push(rt.alloc(agent, 8, MemoryClass::DEVICE_COARSE).unwrap());
        }
    }
    Layout {
        tool,
        bufs,
        counters,
    }
}

/// Submits one op of thread `t` on its queue of `agent`; returns its completion.
fn submit(rt: &SimRuntime, k: &Kernels, l: &Layout, t: usize, agent: usize, op: Op) -> Completion {
    let q = rt.queue(AgentId(agent as u64), t % 2);
    let buf = l.bufs[t][agent];
    let args = KernArgs::new().ptr(buf).ptr(l.counters[t][agent]).build();
    let g = grid(N as u32);
    match op {
        Op::Rmw => rt.dispatch(q, &k.rmw, &args, g),
        Op::Mix => rt.dispatch(q, &k.mix, &args, g),
        Op::Plain => rt.dispatch(q, &k.plain, &args, g),
        Op::Skip => rt.dispatch(q, &k.skip, &args, g),
        Op::Write(seed) => {
            let at = (seed as usize % (N / 2)) * 4;
            let data: Vec<u8> = (0..64u32)
                .flat_map(|i| (seed ^ i.wrapping_mul(0x0100_0193)).to_le_bytes())
                .collect();
            rt.write_async(q, buf + at as u64, &data)
        }
    }
    .unwrap()
}

#[test]
fn concurrent_windows_keep_the_invariants_and_memory_equals_serial_execution() {
    let _dog = Watchdog::new("stress", Duration::from_secs(60));
    let rt = runtime(AGENTS);
    let l = layout(&rt);
    let seen: Seen = Arc::default();
    let k = Arc::new(kernels(Arc::clone(&seen)));

    let tool_launches = Arc::new(AtomicU64::new(0));
    let (tool_bufs, n1, n2) = (
        l.tool.clone(),
        Arc::clone(&tool_launches),
        Arc::clone(&tool_launches),
    );
    let tool_bufs2 = tool_bufs.clone();
    let (open, most) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (g1, g2, m1) = (Arc::clone(&open), Arc::clone(&open), Arc::clone(&most));
    let mark = mark_kernel("tool_mark");
    let mark2 = mark.clone();
    let mut policy = Policy {
        drain_timeout: Duration::from_secs(2),
        pass_timeout: Duration::from_secs(2),
        ..fast_policy()
    };
    policy.filter.exclude = vec!["skip_*".into()];
    let replay = ToolScript::by_kernel(|info| {
        info.kernel_name
            .starts_with("replay_")
            .then_some(2 + info.dispatch_id.0 % 3)
    })
    // Tool work on the window's thread, in PASS EXIT of pass 1.
    .on(At::PassExit, move |rt, p| {
        if p.current_pass == 1 {
            let a = p.dispatch_info.agent;
            let args = KernArgs::new().ptr(tool_bufs[a.0 as usize]).build();
            rt.dispatch(rt.queue(a, 1), &mark, &args, grid(1))
                .unwrap()
                .wait()
                .unwrap();
            n1.fetch_add(1, Ordering::SeqCst);
        }
    })
    // Tool work forwarded through the runtime thread, in PASS ENTER of pass 0 of some windows.
    .on(At::PassEnter, move |rt, p| {
        if p.current_pass == 0 && p.dispatch_info.dispatch_id.0 % 3 == 0 {
            let a = p.dispatch_info.agent;
            let args = KernArgs::new().ptr(tool_bufs2[a.0 as usize]).build();
            let c = rt
                .dispatch_forwarded(rt.queue(a, 0), &mark2, &args, grid(1))
                .unwrap();
            c.wait_submitted().unwrap();
            c.wait().unwrap();
            n2.fetch_add(1, Ordering::SeqCst);
        }
    })
    // A gauge of windows open at once across agents (printed, not asserted: timing).
    .on(At::PassEnter, move |_, p| {
        if p.current_pass == 0 {
            let now = g1.fetch_add(1, Ordering::SeqCst) + 1;
            m1.fetch_max(now, Ordering::SeqCst);
        }
    })
    .on(At::ConfigExit, move |_, p| {
        if p.outcome.is_some_and(|r| r.executed_passes > 1) {
            g2.fetch_sub(1, Ordering::SeqCst);
        }
    })
    .install(&rt, policy);
    let records: Arc<Mutex<Vec<OutcomeRecord>>> = Arc::default();
    let sink = Arc::clone(&records);
    replay
        .svc
        .set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
            sink.lock().push(r.clone())
        })));

    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (rt, k, l) = (rt.clone(), Arc::clone(&k), l.clone());
            std::thread::Builder::new()
                .name(format!("app-{t}"))
                .spawn(move || {
                    let mut pending = Vec::new();
                    for (agent, op) in program(t) {
                        let c = submit(&rt, &k, &l, t, agent, op);
                        if op.replayed() {
                            let r = c.record().expect("a replay candidate has a record");
                            assert_eq!(r.outcome, Outcome::Replayed, "{r}");
                        }
                        pending.push(c);
                    }
                    for c in pending {
                        c.wait().unwrap();
                        assert_eq!(c.fired(), 1);
                    }
                })
                .unwrap()
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    finish(&rt);

    // What ran.
    let ops: Vec<Op> = (0..THREADS)
        .flat_map(|t| program(t).into_iter().map(|x| x.1))
        .collect();
    let count = |f: fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count() as u64;
    let replayed = count(|o| o.replayed());
    let plain = count(|o| *o == Op::Plain);
    assert!(replayed >= 10 && plain >= 4, "the seed gives a real mix");
    let launches = replay_tests::get(&tool_launches);
    let summary = replay.svc.summary();
    assert_eq!(summary.replayed, replayed, "{summary:?}");
    assert_eq!(summary.not_requested, plain, "{summary:?}");
    assert_eq!(summary.truncated_total(), 0, "{summary:?}");
    assert_eq!(
        summary
            .declined
            .get("reentrant_dispatch")
            .copied()
            .unwrap_or(0),
        launches,
        "{summary:?}"
    );
    assert_eq!(summary.declined_total(), launches, "{summary:?}");
    assert_eq!(summary.dispatches, replayed + plain + launches);
    let tool_total: u64 = l
        .tool
        .iter()
        .map(|&b| u64::from_le_bytes(rt.read(b, 8).unwrap().try_into().unwrap()))
        .sum();
    assert_eq!(tool_total, launches, "every tool launch ran exactly once");
    let st = rt.gpu().invariants().stats();
    assert_eq!((st.windows_opened, st.windows_closed), (replayed, replayed));
    assert_eq!(st.tool_work_in_window, launches);

    // Every pass of every window saw the same inputs.
    let passes: u64 = records
        .lock()
        .iter()
        .filter(|r| r.outcome == Outcome::Replayed)
        .map(|r| {
            let s = seen.lock();
            let inputs = &s[&r.dispatch_id];
            assert_eq!(inputs.len(), r.executed_passes as usize, "{r}");
            assert!(inputs.windows(2).all(|w| w[0] == w[1]), "{r}");
            assert!((2..=4).contains(&r.executed_passes), "{r}");
            assert_eq!(r.reason, Reason::None);
            u64::from(r.executed_passes)
        })
        .sum();
    assert_eq!(st.passes_executed, passes);

    // Memory equals the serial execution of the same programs.
    let reference = reference(AGENTS, |rt| {
        let l = layout(rt);
        let k = kernels(Arc::default());
        for t in 0..THREADS {
            for (agent, op) in program(t) {
                submit(rt, &k, &l, t, agent, op).wait().unwrap();
            }
        }
    });
    assert_matches_reference(&rt, &reference);
    let longest = rt
        .gpu()
        .invariants()
        .waits()
        .iter()
        .map(|w| w.waited)
        .max()
        .unwrap_or_default();
    eprintln!(
        "stress: {replayed} windows (at most {} open at once), {launches} tool launches, \
         longest wait {longest:?} of virtual time",
        replay_tests::get(&most)
    );
}
