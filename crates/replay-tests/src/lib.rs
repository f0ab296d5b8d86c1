//! # replay-tests: shared fixtures for kernel-replay's integration tests
//!
//! **This library is test support only.** It holds no product code and is not published. The
//! tests live under `tests/`, one file per subject (faults end to end, module variables, tool
//! work, concurrency stress, scopes and `dirty` restore, pools, digests); this library holds
//! only what several of them share:
//!
//! - the simulator set-up: [`runtime`], [`runtime_with`], [`small_agent`], [`sim_config`],
//!   and [`fast_policy`] (short bounds on virtual time, so a stall costs microseconds of wall
//!   time);
//! - a scripted tool builder, [`ToolScript`]: how many passes for which kernel, hooks at
//!   CONFIG and PASS enter/exit (where a tool launches its own kernels), an injected panic at
//!   any callback, and a [`ToolLog`] of every call and every CONFIG EXIT outcome;
//! - workload builders: [`RmwApp`], a small application with a read-modify-write kernel, an
//!   atomic counter, memory the kernel never touches and a tool buffer; kernels
//!   ([`rmw_kernel`], [`mark_kernel`]);
//! - the reference run: [`reference`] runs the same workload once on a fresh runtime without
//!   a replay service and returns the digest of every agent's application memory
//!   ([`replay_mock::SimRuntime::digest_agent_memory`]); [`assert_matches_reference`]
//!   compares;
//! - [`Watchdog`], which aborts the test process when a test runs past a wall-clock limit, so
//!   a deadlock fails CI instead of hanging it;
//! - [`layout`], the workspace's one scan of crates' sources (which file uses which, circles,
//!   layers, top docs naming SPEC sections), run over every crate by
//!   `tests/layout_workspace.rs`;
//! - [`run_child`], which re-executes the test binary to run one scenario in a child process
//!   (for the one path that aborts the process by design).
//!
//! Determinism: a runtime places allocations first-fit per agent, and backing memory lives in
//! its own address area, so two runtimes that make the same allocations in the same order get
//! the same addresses; that is what lets the reference run's digest be compared with the
//! replayed run's.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod layout;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use replay_context::Contexts;
use replay_core::{
    AgentId, ContextId, ContinueFn, Digest128, Dim3, DispatchId, DispatchInfo, MemoryClass,
    Operation, Outcome, OutcomeRecord, Phase, Policy, Reason, ReplayPayload, ReplayService,
    Subscription, UserData,
};
use replay_mock::{
    AgentConfig, Completion, KernArgs, Kernel, KernelCtx, KernelError, SimConfig, SimRuntime,
};

/// The first agent.
pub const A0: AgentId = AgentId(0);
/// The second agent.
pub const A1: AgentId = AgentId(1);

/// Environment variable that selects a scenario in a child process (see [`run_child`]).
pub const CHILD_ENV: &str = "REPLAY_TESTS_CHILD_SCENARIO";

// ----- simulator set-up -----

/// Short bounds on virtual time: 200 ms drains and passes, 10 ms polls, no progress noise.
pub fn fast_policy() -> Policy {
    let p = Policy {
        drain_timeout: Duration::from_millis(200),
        pass_timeout: Duration::from_millis(200),
        poll_slice: Duration::from_millis(10),
        progress_interval: Duration::from_secs(3600),
        // The scenarios here were written for `all` + `full`; `auto` has its own tests.
        scope: replay_core::Scope::All,
        restore: replay_core::RestoreMode::Full,
        ..Policy::default()
    };
    p.validate().expect("the fast policy is valid");
    p
}

/// A small agent: 64 MiB device, 32 MiB pinned, 64 MiB pageable, two queues.
pub fn small_agent() -> AgentConfig {
    AgentConfig {
        device_bytes: 64 << 20,
        pinned_bytes: 32 << 20,
        pageable_bytes: 64 << 20,
        ..AgentConfig::default()
    }
}

/// Simulator behaviour for tests: stalls nobody releases end after 5 s of wall time; polls
/// give up after 50 ms of wall time.
pub fn sim_config() -> SimConfig {
    SimConfig {
        stall_wall_cap: Duration::from_secs(5),
        poll_wall_cap: Duration::from_millis(50),
        ..SimConfig::default()
    }
}

/// A runtime on virtual time with `agents` small agents and no replay service.
pub fn runtime(agents: usize) -> SimRuntime {
    runtime_with(&vec![small_agent(); agents])
}

/// A runtime on virtual time with these agents and no replay service.
pub fn runtime_with(agents: &[AgentConfig]) -> SimRuntime {
    let mut b = SimRuntime::builder().config(sim_config());
    for a in agents {
        b = b.agent(a.clone());
    }
    b.build()
}

/// Waits until the device is idle, then checks the simulator's invariants (SPEC §6): no
/// ordinary dispatch inside a window, every completion fired exactly once, no wait over its
/// bound, no window left open.
pub fn finish(rt: &SimRuntime) {
    rt.wait_idle();
    if let Err(v) = rt.check_invariants() {
        let lines: Vec<String> = v.iter().map(ToString::to_string).collect();
        panic!("invariants broken:\n  {}", lines.join("\n  "));
    }
}

// ----- the scripted tool -----

/// Where a [`ToolScript`] hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum At {
    /// CONFIG ENTER (before the pass count is asked).
    ConfigEnter,
    /// PASS ENTER, every pass.
    PassEnter,
    /// PASS EXIT, every pass.
    PassExit,
    /// CONFIG EXIT.
    ConfigExit,
}

/// A callback point where a [`ToolScript`] can panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// CONFIG ENTER.
    ConfigEnter,
    /// The pass-count callback.
    PassCount,
    /// PASS ENTER of this pass.
    PassEnter(u32),
    /// PASS EXIT of this pass.
    PassExit(u32),
    /// The continue callback asked after this pass.
    Continue(u32),
    /// CONFIG EXIT.
    ConfigExit,
}

/// A hook: the runtime (alive while the tool runs) and the payload of the callback.
pub type Hook = Arc<dyn Fn(&SimRuntime, &ReplayPayload<'_>) + Send + Sync>;

/// Decides the pass count of a dispatch (`None`: no replay).
pub type PassRule = Arc<dyn Fn(&DispatchInfo) -> Option<u64> + Send + Sync>;

/// One tool callback as the [`ToolLog`] saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Operation.
    pub op: Operation,
    /// Phase.
    pub phase: Phase,
    /// `current_pass` of the payload.
    pub pass: u32,
    /// Dispatch.
    pub dispatch: DispatchId,
    /// Kernel name.
    pub kernel: String,
}

/// What the scripted tool saw.
#[derive(Debug, Default)]
pub struct ToolLog {
    /// Every callback, in order.
    pub calls: Mutex<Vec<Call>>,
    /// The outcome of every CONFIG EXIT, in order.
    pub outcomes: Mutex<Vec<OutcomeRecord>>,
}

impl ToolLog {
    /// The outcomes handed to CONFIG EXIT so far.
    pub fn outcomes(&self) -> Vec<OutcomeRecord> {
        self.outcomes.lock().clone()
    }

    /// Callbacks of one kind seen so far.
    pub fn count(&self, op: Operation, phase: Phase) -> usize {
        self.calls
            .lock()
            .iter()
            .filter(|c| c.op == op && c.phase == phase)
            .count()
    }
}

/// A replay service installed on a runtime, with its tool's log and context registry.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The service (also installed on the runtime).
    pub svc: Arc<ReplayService>,
    /// What the tool saw.
    pub log: Arc<ToolLog>,
    /// The context registry the service uses (SPEC §5); the tool's context is active.
    pub contexts: Arc<Contexts>,
    /// The tool's context.
    pub context: ContextId,
}

/// Builds a tool the way a profiler would write one, for tests: a pass count per kernel,
/// optional continue callback, hooks at each callback, an optional injected panic.
pub struct ToolScript {
    rule: PassRule,
    continue_fn: Option<ContinueFn>,
    hooks: Vec<(At, Hook)>,
    panic_at: Option<Point>,
}

impl std::fmt::Debug for ToolScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolScript")
            .field("hooks", &self.hooks.iter().map(|h| h.0).collect::<Vec<_>>())
            .field("panic_at", &self.panic_at)
            .finish_non_exhaustive()
    }
}

impl ToolScript {
    /// `n` passes of every dispatch.
    pub fn passes(n: u64) -> Self {
        Self::by_kernel(move |_| Some(n))
    }

    /// `n` passes of the kernels whose name matches `pattern` (a glob with `*`/`?`, else a
    /// substring, as the kernel filter reads it); other kernels are not replayed.
    pub fn passes_for(pattern: &str, n: u64) -> Self {
        let pattern = pattern.to_owned();
        Self::by_kernel(move |info| {
            replay_core::filter::pattern_matches(&pattern, &info.kernel_name).then_some(n)
        })
    }

    /// The pass count from a function of the dispatch.
    pub fn by_kernel(rule: impl Fn(&DispatchInfo) -> Option<u64> + Send + Sync + 'static) -> Self {
        Self {
            rule: Arc::new(rule),
            continue_fn: None,
            hooks: Vec::new(),
            panic_at: None,
        }
    }

    /// Installs a continue callback in CONFIG ENTER.
    pub fn with_continue(mut self, f: ContinueFn) -> Self {
        self.continue_fn = Some(f);
        self
    }

    /// Runs `hook` at `at`.
    pub fn on(
        mut self,
        at: At,
        hook: impl Fn(&SimRuntime, &ReplayPayload<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.hooks.push((at, Arc::new(hook)));
        self
    }

    /// Panics at `point` (every dispatch that reaches it).
    pub fn panic_at(mut self, point: Point) -> Self {
        self.panic_at = Some(point);
        self
    }

    /// Creates a service with `policy` on the runtime's clock, makes this tool its owner
    /// (subscribed to CONFIG and PASS), starts it and installs it on the runtime.
    pub fn install(self, rt: &SimRuntime, policy: Policy) -> Replay {
        let contexts = Arc::new(Contexts::new());
        let context = contexts.create_context();
        contexts
            .declare_participant(
                context,
                "counters",
                replay_context::OverrideSupport::Honours,
            )
            .expect("a fresh context");
        contexts.activate(context).expect("a fresh context");
        let svc = Arc::new(ReplayService::new(
            policy,
            rt.clock(),
            Arc::clone(&contexts) as Arc<dyn replay_core::ContextControl>,
        ));
        let log = Arc::new(ToolLog::default());
        let weak = rt.downgrade();
        let Self {
            rule,
            continue_fn,
            hooks,
            panic_at,
        } = self;
        let tool_log = Arc::clone(&log);
        let tool = move |op: Operation,
                         phase: Phase,
                         p: &mut ReplayPayload<'_>,
                         _ud: &mut UserData| {
            tool_log.calls.lock().push(Call {
                op,
                phase,
                pass: p.current_pass,
                dispatch: p.dispatch_info.dispatch_id,
                kernel: p.dispatch_info.kernel_name.to_string(),
            });
            let (at, point) = match (op, phase) {
                (Operation::Config, Phase::Enter) => (At::ConfigEnter, Point::ConfigEnter),
                (Operation::Config, Phase::Exit) => (At::ConfigExit, Point::ConfigExit),
                (Operation::Pass, Phase::Enter) => {
                    (At::PassEnter, Point::PassEnter(p.current_pass))
                }
                (Operation::Pass, Phase::Exit) => (At::PassExit, Point::PassExit(p.current_pass)),
            };
            if panic_at == Some(point) {
                panic!("scripted tool panic at {point:?}");
            }
            if at == At::ConfigEnter {
                if let Some(n) = rule(p.dispatch_info) {
                    let panics = panic_at == Some(Point::PassCount);
                    p.replay_pass_count = Some(Arc::new(move |_, _| {
                        if panics {
                            panic!("scripted tool panic in the pass-count callback");
                        }
                        n
                    }));
                    if let Some(f) = &continue_fn {
                        let f = Arc::clone(f);
                        let panic_after = match panic_at {
                            Some(Point::Continue(k)) => Some(k),
                            _ => None,
                        };
                        p.replay_continue = Some(Arc::new(move |info, pass, total, ud| {
                            if panic_after == Some(pass) {
                                panic!("scripted tool panic in the continue callback");
                            }
                            f(info, pass, total, ud)
                        }));
                    }
                }
            }
            if at == At::ConfigExit {
                if let Some(rec) = p.outcome {
                    tool_log.outcomes.lock().push(rec.clone());
                }
            }
            let Some(rt) = weak.upgrade() else {
                return;
            };
            for (when, hook) in &hooks {
                if *when == at {
                    hook(&rt, p);
                }
            }
        };
        svc.configure(
            context,
            Subscription::CONFIG | Subscription::PASS,
            Arc::new(tool),
        )
        .expect("a fresh service");
        svc.start().expect("configured");
        rt.set_service(Some(Arc::clone(&svc)));
        Replay {
            svc,
            log,
            contexts,
            context,
        }
    }
}

// ----- kernels and workloads -----

/// What a kernel saw as input, one digest per execution.
pub type Inputs = Arc<Mutex<Vec<Digest128>>>;

/// Digest key of the [`Inputs`] recordings.
pub fn input_key() -> replay_core::DigestKey {
    replay_core::digest::key_from_seed(0x1u64 << 40 | 7)
}

/// A read-modify-write kernel named `name`: `buf[i] = buf[i] * 3 + i + 1` over `grid.x`
/// `u32`s at argument word 0, and `counter += 1` (an atomic `u64`) at word 1 when non-zero.
/// It records a digest of its input bytes (and of the counter) per execution, so a missing or
/// wrong restore shows as a changed input and a changed result.
pub fn rmw_kernel(name: &str, inputs: Inputs) -> Kernel {
    Kernel::new(
        name,
        move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let buf = ctx.word(0);
            let counter = ctx.word(1);
            let n = ctx.work_items() as usize;
            let mut input = ctx.read_vec(buf, n * 4)?;
            if counter != 0 {
                input.extend_from_slice(&ctx.read_vec(counter, 8)?);
            }
            inputs
                .lock()
                .push(replay_core::digest::digest(input_key(), &input));
            let out: Vec<u8> = input[..n * 4]
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

/// The result of one [`rmw_kernel`] execution on `input`.
pub fn rmw_once(input: &[u32]) -> Vec<u32> {
    input
        .iter()
        .enumerate()
        .map(|(i, v)| v.wrapping_mul(3).wrapping_add(i as u32 + 1))
        .collect()
}

/// A tool's kernel: atomically adds 1 to the `u64` at argument word 0.
pub fn mark_kernel(name: &str) -> Kernel {
    Kernel::new(name, |ctx| {
        let at = ctx.word(0);
        ctx.atomic_add_u64(at, 1)?;
        Ok(())
    })
}

/// A one-dimensional grid.
pub fn grid(n: u32) -> Dim3 {
    Dim3::new(n, 1, 1)
}

/// Elements of [`RmwApp`]'s buffer.
pub const RMW_N: usize = 1024;

/// A small application on one agent: a buffer the [`rmw_kernel`] rewrites, an atomic counter
/// it bumps, 8 KiB it never touches (`other`, filled with `0x77`) and a 64-byte tool-owned
/// buffer for tool work. Set up identically on any runtime.
#[derive(Debug, Clone)]
pub struct RmwApp {
    /// The agent.
    pub agent: AgentId,
    /// `RMW_N` `u32`s.
    pub buf: u64,
    /// A `u64` counter.
    pub counter: u64,
    /// 8 KiB the kernel never touches.
    pub other: u64,
    /// 64 bytes of tool-owned memory (not application memory: never captured or digested).
    pub tool_buf: u64,
    /// The kernel's input digest per execution.
    pub inputs: Inputs,
    /// The application's kernel, named `rmw`.
    pub kernel: Kernel,
    /// The tool's kernel, named `tool_mark`.
    pub tool_kernel: Kernel,
}

impl RmwApp {
    /// The buffer's initial contents.
    pub fn initial() -> Vec<u32> {
        (0..RMW_N as u32)
            .map(|i| i.wrapping_mul(2_654_435_761) ^ 0x5a5a)
            .collect()
    }

    /// Allocates and fills the application's memory on agent 0.
    pub fn setup(rt: &SimRuntime) -> Self {
        Self::setup_on(rt, A0)
    }

    /// Allocates and fills the application's memory on `agent`.
    pub fn setup_on(rt: &SimRuntime, agent: AgentId) -> Self {
        let buf = rt
            .alloc(agent, (RMW_N * 4) as u64, MemoryClass::DEVICE_COARSE)
            .expect("alloc buf");
        rt.write_u32s(buf, &Self::initial()).expect("fill buf");
        let counter = rt
            .alloc(agent, 8, MemoryClass::DEVICE_COARSE)
            .expect("alloc counter");
        let other = rt
            .alloc(agent, 8192, MemoryClass::DEVICE_COARSE)
            .expect("alloc other");
        rt.fill(other, 8192, 0x77).expect("fill other");
        let tool_buf = rt
            .alloc(agent, 64, MemoryClass::TOOL_OWNED)
            .expect("alloc tool buffer");
        let inputs: Inputs = Arc::default();
        Self {
            agent,
            buf,
            counter,
            other,
            tool_buf,
            kernel: rmw_kernel("rmw", Arc::clone(&inputs)),
            inputs,
            tool_kernel: mark_kernel("tool_mark"),
        }
    }

    /// The argument block of the application's kernel.
    pub fn args(&self) -> Vec<u8> {
        KernArgs::new().ptr(self.buf).ptr(self.counter).build()
    }

    /// The argument block of the tool's kernel.
    pub fn tool_args(&self) -> Vec<u8> {
        KernArgs::new().ptr(self.tool_buf).build()
    }

    /// Launches the application's kernel on queue 0 of its agent.
    pub fn launch(&self, rt: &SimRuntime) -> Completion {
        rt.dispatch(
            rt.queue(self.agent, 0),
            &self.kernel,
            &self.args(),
            grid(RMW_N as u32),
        )
        .expect("dispatch rmw")
    }

    /// Launches, waits, checks the application saw exactly one completion, and returns the
    /// outcome record (panics when the service produced none).
    pub fn run(&self, rt: &SimRuntime) -> OutcomeRecord {
        let c = self.launch(rt);
        c.wait().expect("rmw completes without a fault");
        assert_eq!(c.fired(), 1, "the application sees exactly one completion");
        c.record().expect("an outcome record")
    }

    /// Launches and waits, without a service (the reference run).
    pub fn run_plain(&self, rt: &SimRuntime) {
        let c = self.launch(rt);
        c.wait().expect("rmw completes without a fault");
    }

    /// The tool's counter.
    pub fn tool_count(&self, rt: &SimRuntime) -> u64 {
        let b = rt.read(self.tool_buf, 8).expect("read tool buffer");
        u64::from_le_bytes(b.try_into().expect("8 bytes"))
    }

    /// The application counter.
    pub fn counter_value(&self, rt: &SimRuntime) -> u64 {
        let b = rt.read(self.counter, 8).expect("read counter");
        u64::from_le_bytes(b.try_into().expect("8 bytes"))
    }

    /// The input digests the kernel recorded so far.
    pub fn seen(&self) -> Vec<Digest128> {
        self.inputs.lock().clone()
    }
}

// ----- reference runs -----

/// Digest of every agent's application memory, in agent order.
pub fn digests(rt: &SimRuntime) -> Vec<Digest128> {
    rt.agents()
        .into_iter()
        .map(|a| rt.digest_agent_memory(a))
        .collect()
}

/// Runs `workload` once on a fresh runtime of `agents` small agents without a replay
/// service, waits for the device, and returns every agent's memory digest.
pub fn reference(agents: usize, workload: impl FnOnce(&SimRuntime)) -> Vec<Digest128> {
    reference_with(&vec![small_agent(); agents], workload)
}

/// [`reference`] with these agents.
pub fn reference_with(
    agents: &[AgentConfig],
    workload: impl FnOnce(&SimRuntime),
) -> Vec<Digest128> {
    let rt = runtime_with(agents);
    workload(&rt);
    rt.wait_idle();
    assert!(rt.service().is_none(), "the reference runs without replay");
    let d = digests(&rt);
    rt.shutdown();
    d
}

/// Asserts that the replayed run's memory equals the reference run's, agent by agent.
pub fn assert_matches_reference(rt: &SimRuntime, reference: &[Digest128]) {
    rt.wait_idle();
    let got = digests(rt);
    assert_eq!(
        got.len(),
        reference.len(),
        "the reference has the same agents"
    );
    for (i, (g, r)) in got.iter().zip(reference).enumerate() {
        assert_eq!(
            g, r,
            "agent {i}: final memory digest {g} differs from the reference run's {r}"
        );
    }
}

/// Asserts an outcome and reason, printing the record on failure.
pub fn assert_outcome(r: &OutcomeRecord, outcome: Outcome, reason: Reason) {
    assert_eq!((r.outcome, r.reason), (outcome, reason), "{r}");
}

// ----- watchdog and child processes -----

/// Aborts the whole test process if it is still alive after `limit` of wall time, so a
/// deadlock fails instead of hanging CI. Dropping it disarms it.
#[derive(Debug)]
pub struct Watchdog {
    disarm: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Arms a watchdog for the test `name`.
    pub fn new(name: &str, limit: Duration) -> Self {
        let (tx, rx) = mpsc::channel::<()>();
        let name = name.to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("watchdog-{name}"))
            .spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                    eprintln!(
                        "watchdog: test {name} still running after {limit:?} of wall time (deadlock?); aborting"
                    );
                    std::process::abort();
                }
            })
            .expect("spawn the watchdog");
        Self {
            disarm: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(tx) = self.disarm.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The scenario this process runs as a child, if it is one ([`CHILD_ENV`]).
pub fn child_scenario() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

/// Re-executes this test binary to run only the test `test` (an exact name), with
/// [`CHILD_ENV`] set to `scenario`; returns its exit status and output.
pub fn run_child(test: &str, scenario: &str) -> std::process::Output {
    let exe = std::env::current_exe().expect("the test binary's path");
    std::process::Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, scenario)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run the test binary as a child")
}

/// What a child that must have aborted left: its stdout, its stderr and a context line for
/// messages. Asserts it died of SIGABRT (on unix) and never printed `NOT ABORTED`, the line a
/// child prints when the abort did not come.
pub fn assert_aborted(out: &std::process::Output) -> (String, String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let context = format!(
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(!out.status.success(), "{context}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(6), "SIGABRT expected; {context}");
    }
    assert!(!stdout.contains("NOT ABORTED"), "{context}");
    (stdout, stderr, context)
}

// ----- small helpers -----

/// Reads a shared counter.
pub fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::SeqCst)
}
