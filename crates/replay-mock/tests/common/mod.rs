//! Helpers shared by the simulator's tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{
    ContextId, Digest128, Dim3, NoContextControl, Operation, Phase, Policy, ReplayPayload,
    ReplayService, Subscription, UserData,
};
use replay_mock::{
    AgentConfig, KernArgs, Kernel, KernelCtx, KernelError, SimClock, SimConfig, SimRuntime,
};

/// Short bounds on virtual time.
pub fn policy() -> Policy {
    Policy {
        drain_timeout: Duration::from_secs(1),
        pass_timeout: Duration::from_secs(1),
        poll_slice: Duration::from_millis(10),
        progress_interval: Duration::from_secs(3600),
        ..Policy::default()
    }
}

/// Small agents, so tests allocate little.
pub fn small_agent() -> AgentConfig {
    AgentConfig {
        device_bytes: 64 << 20,
        pinned_bytes: 32 << 20,
        pageable_bytes: 64 << 20,
        ..AgentConfig::default()
    }
}

pub fn config() -> SimConfig {
    SimConfig {
        stall_wall_cap: Duration::from_secs(5),
        poll_wall_cap: Duration::from_millis(50),
        ..SimConfig::default()
    }
}

/// A runtime on virtual time with `agents` small agents and no service.
pub fn runtime(agents: usize) -> SimRuntime {
    SimRuntime::builder()
        .config(config())
        .agents(agents, small_agent())
        .build()
}

/// A started service on the runtime's clock whose tool asks `passes` passes of every dispatch.
pub fn with_replay(rt: &SimRuntime, passes: u64) -> Arc<ReplayService> {
    with_tool(
        rt,
        policy(),
        move |op, ph, p: &mut ReplayPayload<'_>, _ud: &mut UserData| {
            if op == Operation::Config && ph == Phase::Enter {
                p.replay_pass_count = Some(Arc::new(move |_, _| passes));
            }
        },
    )
}

/// A started service with `tool` as the owner.
pub fn with_tool(
    rt: &SimRuntime,
    policy: Policy,
    tool: impl Fn(Operation, Phase, &mut ReplayPayload<'_>, &mut UserData) + Send + Sync + 'static,
) -> Arc<ReplayService> {
    let svc = Arc::new(ReplayService::new(
        policy,
        rt.clock(),
        Arc::new(NoContextControl),
    ));
    svc.configure(
        ContextId(1),
        Subscription::CONFIG | Subscription::PASS,
        Arc::new(tool),
    )
    .unwrap();
    svc.start().unwrap();
    rt.set_service(Some(Arc::clone(&svc)));
    svc
}

/// What a read-modify-write kernel saw as input, one digest per execution.
pub type Inputs = Arc<Mutex<Vec<Digest128>>>;

/// `buf[i] = buf[i] * 3 + i + 1` over `n` u32s at arg 0, plus `counter += 1` (u64) at arg 1 if
/// non-zero. Records a digest of its input per execution.
pub fn rmw_kernel(inputs: Inputs) -> Kernel {
    Kernel::new(
        "rmw",
        move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let buf = ctx.word(0);
            let counter = ctx.word(1);
            let n = ctx.work_items() as usize;
            let input = ctx.read_vec(buf, n * 4)?;
            inputs.lock().push(replay_core::digest::digest(
                replay_core::digest::key_from_seed(7),
                &input,
            ));
            let out: Vec<u8> = input
                .chunks_exact(4)
                .enumerate()
                .flat_map(|(i, c)| {
                    let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    v.wrapping_mul(3).wrapping_add(i as u32 + 1).to_le_bytes()
                })
                .collect();
            ctx.write(buf, &out)?;
            if counter != 0 {
                ctx.atomic_add_u64(counter, 1)?;
            }
            Ok(())
        },
    )
}

pub fn args(buf: u64, counter: u64) -> Vec<u8> {
    KernArgs::new().ptr(buf).ptr(counter).build()
}

pub fn grid(n: u32) -> Dim3 {
    Dim3::new(n, 1, 1)
}

/// Expected result of one `rmw` execution on `input`.
pub fn rmw_once(input: &[u32]) -> Vec<u32> {
    input
        .iter()
        .enumerate()
        .map(|(i, v)| v.wrapping_mul(3).wrapping_add(i as u32 + 1))
        .collect()
}

/// A runtime on virtual time with the given clock.
pub fn runtime_on(clock: Arc<SimClock>, agents: usize) -> SimRuntime {
    SimRuntime::builder()
        .clock(clock)
        .config(config())
        .agents(agents, small_agent())
        .build()
}
