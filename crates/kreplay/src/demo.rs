//! `kreplay demo`: a small but representative workload on the simulated GPU, run twice — once
//! under replay with a counter-collecting tool, once plainly as the reference — and compared
//! dispatch by dispatch.
//!
//! The workload: two agents; device (coarse), fine-grained, pinned-host and module-variable
//! memory; a fill kernel, a read-modify-write kernel (a missing restore would change its
//! answer), a kernel that writes through a pointer stored in device memory (outside its
//! argument scope), and a reduction scaled by a factor held in pinned host memory. The tool
//! collects one simulated counter group per pass and switches its PC-sampling context off for
//! pass 1 only.
//!
//! A pass's *input digest* covers the memory the kernel's argument words point into (any
//! class) and the agent's module variables, read as the pass begins; the *final digest* covers
//! all application memory of the agent after the dispatch.
//!
//! The policy comes from the demo's defaults ([`demo_defaults`]: short bounds on virtual time),
//! then the `KREPLAY_*` environment (SPEC §8; every malformed variable is reported, and the demo
//! does not run), then the command line (`--scope`, `--restore`, `--inject over-budget`). A
//! kernel filter may leave dispatches out: they run once and are still compared with the
//! reference; a filter that admits none of them is an error that says so.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_context::{Contexts, OverrideSupport};
use replay_core::{
    AgentId, Capture, CaptureRefused, CaptureRequest, ContextControl, ContextId, Digest128, Dim3,
    DispatchId, MemoryClass, Operation, OutcomeRecord, Phase, Policy, ReplayPayload, ReplayService,
    Subscription, UserData,
};
use replay_mock::{
    AgentConfig, CounterGroup, Fault, FaultMode, KernArgs, Kernel, KernelError, ModuleSpec,
    SimConfig, SimRuntime, WeakRuntime,
};
use serde_json::{json, Value};

use crate::cli::DemoArgs;

/// The replay owner's context and the PC-sampling context the tool toggles.
const PROFILER: ContextId = ContextId(1);
const PC_SAMPLING: ContextId = ContextId(2);

/// Demo failures (not faults: those end in outcome records).
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The simulator refused a setup step.
    #[error("simulator: {0}")]
    Sim(String),
    /// Policy variables of the environment were malformed (every one is listed).
    #[error("{}", policy_errors(.0))]
    Policy(Vec<replay_core::PolicyError>),
    /// The kernel filter admitted none of the workload's dispatches.
    #[error("the kernel filter ({filter}) admitted none of the demo's {steps} dispatches (kernels {kernels}); nothing was replayed or checked")]
    NothingAdmitted {
        /// The filter in force.
        filter: String,
        /// Dispatches of the workload.
        steps: usize,
        /// Their kernels.
        kernels: String,
    },
    /// The capture folder could not be made.
    #[error("capture: {0}")]
    Capture(String),
    /// Writing the report failed.
    #[error("output: {0}")]
    Io(#[from] std::io::Error),
}

fn policy_errors(errors: &[replay_core::PolicyError]) -> String {
    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
    list.join("; ")
}

/// The filter in words, for the error that says it admitted nothing.
fn describe_filter(f: &replay_core::filter::KernelFilter) -> String {
    let mut parts = Vec::new();
    if !f.include.is_empty() {
        parts.push(format!("KREPLAY_KERNEL_INCLUDE={}", f.include.join(",")));
    }
    if !f.exclude.is_empty() {
        parts.push(format!("KREPLAY_KERNEL_EXCLUDE={}", f.exclude.join(",")));
    }
    if let Some(r) = &f.range {
        parts.push(format!(
            "KREPLAY_DISPATCH_RANGE={}-{}",
            r.first,
            r.last.map(|l| l.to_string()).unwrap_or_default()
        ));
    }
    if f.skip != 0 {
        parts.push(format!("KREPLAY_KERNEL_SKIP={}", f.skip));
    }
    if let Some(c) = f.count {
        parts.push(format!("KREPLAY_KERNEL_COUNT={c}"));
    }
    if parts.is_empty() {
        "no filter set".into()
    } else {
        parts.join(", ")
    }
}

/// The demo's own defaults, which the environment and then the command line override: virtual
/// time, so injected stalls resolve at these short bounds without real waiting.
pub fn demo_defaults() -> Policy {
    Policy {
        scope: replay_core::Scope::All,
        restore: replay_core::RestoreMode::Full,
        drain_timeout: Duration::from_millis(250),
        pass_timeout: Duration::from_millis(250),
        poll_slice: Duration::from_millis(10),
        progress_interval: Duration::from_millis(100),
        ..Policy::default()
    }
}

/// Defaults, then the environment, then the command line.
fn demo_policy(args: &DemoArgs) -> Result<Policy, DemoError> {
    let env = Policy::env_over(demo_defaults());
    if !env.errors.is_empty() {
        return Err(DemoError::Policy(env.errors));
    }
    let mut policy = env.policy;
    if let Some(scope) = args.scope {
        policy.scope = scope;
    }
    if let Some(restore) = args.restore {
        policy.restore = restore;
    }
    if args.inject.as_deref() == Some("over-budget") {
        policy.max_snapshot_bytes = 64 << 10;
    }
    if args.inject.as_deref() == Some("untracked-vmem") {
        // Mappings are captured by default now; the fault shows the policy switch that
        // declines every dispatch of an agent with a mapping (SPEC §8).
        policy.decline_on_vmem = true;
    }
    Ok(policy)
}

fn sim<E: std::fmt::Display>(e: E) -> DemoError {
    DemoError::Sim(e.to_string())
}

/// One executed pass as the tool saw it.
#[derive(Debug, Clone)]
struct PassRow {
    dispatch: DispatchId,
    pass: u32,
    group: CounterGroup,
    value: Option<u64>,
    pc_sampling: bool,
    input_digest: Digest128,
}

/// What the tool does beyond collecting counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolFault {
    None,
    Panic,
    Reentrant,
}

/// The demo's profiler: one counter group per pass, PC sampling off for pass 1.
struct DemoTool {
    rt: WeakRuntime,
    contexts: Arc<Contexts>,
    passes: u64,
    fault: ToolFault,
    /// The dispatch the tool misbehaves on (by kernel name).
    target: &'static str,
    probe: Kernel,
    rows: Mutex<Vec<PassRow>>,
    /// The argument block of the dispatch in flight (the tool's view of the launch).
    current_args: Mutex<Vec<u8>>,
    /// `--capture DIR`: where each replayed dispatch's first pass is captured.
    capture: Option<CaptureTarget>,
}

/// What became of one dispatch's capture: the folder written, or why there is none.
type CaptureResult = (DispatchId, String, Result<PathBuf, String>);

/// `--capture DIR` (SPEC §13): one folder per replayed dispatch, `dNNNN-KERNEL`.
struct CaptureTarget {
    dir: PathBuf,
    max_bytes: u64,
    /// Per dispatch: the folder written, or why there is none.
    results: Arc<Mutex<Vec<CaptureResult>>>,
}

impl CaptureTarget {
    fn request(&self, id: DispatchId, kernel: &str) -> CaptureRequest {
        let dir = self.dir.join(format!("d{:04}-{kernel}", id.0));
        let results = Arc::clone(&self.results);
        let kernel = kernel.to_string();
        CaptureRequest::new(Arc::new(move |c: Result<Capture, CaptureRefused>| {
            let r = c
                .map_err(|e| e.to_string())
                .and_then(|c| replay_capture::write(&dir, &c).map_err(|e| e.to_string()))
                .map(|_| dir.clone());
            results.lock().push((id, kernel.clone(), r));
        }))
        .max_bytes(self.max_bytes)
    }
}

impl DemoTool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _ud: &mut UserData) {
        let Some(rt) = self.rt.upgrade() else { return };
        let info = p.dispatch_info;
        let agent = info.agent;
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                let n = self.passes;
                p.replay_pass_count = Some(Arc::new(move |_, _| n));
            }
            (Operation::Pass, Phase::Enter) => {
                if let (Some(t), 0) = (&self.capture, p.current_pass) {
                    p.request_capture(t.request(info.dispatch_id, &info.kernel_name));
                }
                let group = CounterGroup::ALL[p.current_pass as usize % CounterGroup::ALL.len()];
                rt.gpu().counters().select(agent, Some(group));
                // Localized control: PC sampling sits out pass 1 only.
                match p.current_pass {
                    1 => {
                        let _ = p.replay_stop_context(PC_SAMPLING);
                    }
                    2 => {
                        let _ = p.replay_start_context(PC_SAMPLING);
                    }
                    _ => {}
                }
                let on_target =
                    agent == A0 && &*info.kernel_name == self.target && p.current_pass == 0;
                if on_target && self.fault == ToolFault::Panic {
                    panic!("the demo tool fails on purpose in PASS ENTER");
                }
                if on_target && self.fault == ToolFault::Reentrant {
                    // Tool work: a probe launched from inside the callback runs once.
                    let q = rt.queue(agent, 1);
                    if let Ok(c) = rt.dispatch(q, &self.probe, &[], Dim3::new(64, 1, 1)) {
                        let _ = c.wait();
                    }
                }
                self.rows.lock().push(PassRow {
                    dispatch: info.dispatch_id,
                    pass: p.current_pass,
                    group,
                    value: None,
                    pc_sampling: self.contexts.participates(PC_SAMPLING),
                    input_digest: input_digest(&rt, agent, &self.current_args.lock()),
                });
            }
            (Operation::Pass, Phase::Exit) => {
                let mut rows = self.rows.lock();
                if let Some(row) = rows
                    .iter_mut()
                    .rev()
                    .find(|r| r.dispatch == info.dispatch_id && r.pass == p.current_pass)
                {
                    row.value = rt.gpu().counters().read_last(info.dispatch_id, row.group);
                }
            }
            (Operation::Config, Phase::Exit) => {
                rt.gpu().counters().select(agent, None);
            }
        }
    }
}

/// Digest of the memory `args` point into and of the agent's module variables.
fn input_digest(rt: &SimRuntime, agent: AgentId, args: &[u8]) -> Digest128 {
    let mut bases = std::collections::BTreeSet::new();
    for w in args.chunks_exact(8) {
        let word = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        if let Some(r) = rt.tracker().lookup(agent, word) {
            bases.insert((r.base, r.size));
        }
    }
    if let Ok(vars) = replay_memory::ModuleVariables::enumerate(&*rt.module_variables(), agent) {
        for v in vars {
            bases.insert((v.base, v.size));
        }
    }
    let mut buf = Vec::new();
    for (base, size) in bases {
        buf.extend_from_slice(&base.to_le_bytes());
        if let Ok(bytes) = rt.read(base, size as usize) {
            buf.extend_from_slice(&bytes);
        }
    }
    replay_core::digest::digest(replay_mock::FINAL_DIGEST_KEY, &buf)
}

/// Buffers and kernels of the workload on one runtime.
struct Workload {
    kernels: BTreeMap<String, Kernel>,
    x: u64,
    y: u64,
    side: u64,
    params: u64,
    host_scale: u64,
    result: u64,
    scratch: u64,
    y1: u64,
    hits: u64,
}

const X_BYTES: u64 = 4 << 20;
const Y_BYTES: u64 = 4 << 20;
const RMW_BYTES: u64 = 64 << 10;
const SIDE_BYTES: u64 = 1 << 20;
const A0: AgentId = AgentId(0);
const A1: AgentId = AgentId(1);

/// The workload's code object: its kernels, a variable and a constant. `kreplay replay` finds
/// it by its name when it replays a capture of the demo.
pub fn demo_module() -> ModuleSpec {
    let mut spec = ModuleSpec::new("demo.co")
        .variable("g_hits", 8)
        .constant("c_scale", &2u32.to_le_bytes());
    for k in kernels() {
        let body = k.body.clone();
        spec = spec.kernel(&k.name, move |ctx| body(ctx));
    }
    spec
}

fn kernels() -> Vec<Kernel> {
    vec![
        // x[i] = 3i + 1 over word 1 bytes at word 0.
        Kernel::new("fill_x", |ctx| {
            let (x, n) = (ctx.word(0), ctx.word(1) as usize);
            ctx.update(x, n, |b| {
                for (i, w) in b.chunks_exact_mut(4).enumerate() {
                    w.copy_from_slice(&(3 * i as u32 + 1).to_le_bytes());
                }
            })?;
            Ok(())
        }),
        // y[i] = 2 y[i] + x[i] over the first word-2 bytes; hits += 1 (a module variable).
        Kernel::new("axpy_rmw", |ctx| {
            let (x, y, n, hits) = (ctx.word(0), ctx.word(1), ctx.word(2) as usize, ctx.word(3));
            let xs = ctx.read_vec(x, n)?;
            ctx.update(y, n, |b| {
                for (w, xw) in b.chunks_exact_mut(4).zip(xs.chunks_exact(4)) {
                    let yv = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    let xv = u32::from_le_bytes([xw[0], xw[1], xw[2], xw[3]]);
                    w.copy_from_slice(&yv.wrapping_mul(2).wrapping_add(xv).to_le_bytes());
                }
            })?;
            let h = ctx.read_u64(hits)?;
            ctx.write_u64(hits, h + 1)?;
            Ok(())
        }),
        // Reads a table pointer from `params` (fine-grained) and increments the first words of
        // the buffer it names: a write outside the argument scope.
        Kernel::new("scatter_via_table", |ctx| {
            let params = ctx.word(0);
            let target = ctx.read_u64(params)?;
            ctx.update(target, 4096, |b| {
                for w in b.chunks_exact_mut(4) {
                    let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    w.copy_from_slice(&v.wrapping_add(7).to_le_bytes());
                }
            })?;
            Ok(())
        }),
        // Sums the first RMW_BYTES of y, scaled by a factor read from pinned host memory, into
        // a device result.
        Kernel::new("reduce_scaled", |ctx| {
            let (y, n, scale, out) = (ctx.word(0), ctx.word(1) as usize, ctx.word(2), ctx.word(3));
            let ys = ctx.read_vec(y, n)?;
            let k = u64::from(ctx.read_u32(scale)?);
            let s: u64 = ys
                .chunks_exact(4)
                .map(|w| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
                .sum();
            let prev = ctx.read_u64(out)?;
            ctx.write_u64(out, prev.wrapping_add(s.wrapping_mul(k)))?;
            Ok(())
        }),
    ]
}

impl Workload {
    fn setup(rt: &SimRuntime) -> Result<Self, DemoError> {
        let module = rt.load_module(A0, demo_module()).map_err(sim)?;
        let ks: BTreeMap<String, Kernel> = module
            .kernels()
            .iter()
            .map(|k| (k.name.to_string(), k.clone()))
            .collect();
        let hits = module
            .variable("g_hits")
            .ok_or_else(|| sim("g_hits missing"))?;
        let x = rt
            .alloc(A0, X_BYTES, MemoryClass::DEVICE_COARSE)
            .map_err(sim)?;
        let y = rt
            .alloc(A0, Y_BYTES, MemoryClass::DEVICE_COARSE)
            .map_err(sim)?;
        let side = rt
            .alloc(A0, SIDE_BYTES, MemoryClass::DEVICE_COARSE)
            .map_err(sim)?;
        let params = rt.alloc(A0, 4096, MemoryClass::FINE_GRAINED).map_err(sim)?;
        let host_scale = rt.alloc(A0, 4096, MemoryClass::PINNED_HOST).map_err(sim)?;
        let result = rt
            .alloc(A0, 4096, MemoryClass::DEVICE_COARSE)
            .map_err(sim)?;
        let scratch = rt
            .alloc(A0, 256 << 10, MemoryClass::DEVICE_COARSE)
            .map_err(sim)?;
        let y1 = rt
            .alloc(A1, Y_BYTES, MemoryClass::DEVICE_COARSE)
            .map_err(sim)?;
        rt.fill(y, Y_BYTES as usize, 1).map_err(sim)?;
        rt.fill(y1, Y_BYTES as usize, 2).map_err(sim)?;
        rt.fill(side, SIDE_BYTES as usize, 5).map_err(sim)?;
        rt.fill(scratch, 256 << 10, 9).map_err(sim)?;
        rt.write(params, &side.to_le_bytes()).map_err(sim)?;
        rt.write(host_scale, &3u32.to_le_bytes()).map_err(sim)?;
        Ok(Self {
            kernels: ks,
            x,
            y,
            side,
            params,
            host_scale,
            result,
            scratch,
            y1,
            hits,
        })
    }

    /// The kernels of [`Workload::steps`], in order.
    fn step_kernels() -> Vec<&'static str> {
        vec![
            "fill_x",
            "axpy_rmw",
            "scatter_via_table",
            "reduce_scaled",
            "axpy_rmw",
        ]
    }

    /// The dispatches, in order: (agent, queue index, kernel, arguments, grid).
    fn steps(&self) -> Vec<(AgentId, usize, &'static str, Vec<u8>)> {
        let _ = self.side;
        vec![
            (
                A0,
                0,
                "fill_x",
                KernArgs::new().ptr(self.x).u64(X_BYTES).build(),
            ),
            (
                A0,
                0,
                "axpy_rmw",
                KernArgs::new()
                    .ptr(self.x)
                    .ptr(self.y)
                    .u64(RMW_BYTES)
                    .ptr(self.hits)
                    .build(),
            ),
            (
                A0,
                1,
                "scatter_via_table",
                KernArgs::new().ptr(self.params).build(),
            ),
            (
                A0,
                0,
                "reduce_scaled",
                KernArgs::new()
                    .ptr(self.y)
                    .u64(RMW_BYTES)
                    .ptr(self.host_scale)
                    .ptr(self.result)
                    .build(),
            ),
            (
                A1,
                0,
                "axpy_rmw",
                KernArgs::new()
                    .ptr(self.y1)
                    .ptr(self.y1)
                    .u64(RMW_BYTES)
                    .ptr(self.y1 + Y_BYTES - 8)
                    .build(),
            ),
        ]
    }
}

/// The simulated device both runs use (and `kreplay replay`): two agents.
pub fn runtime() -> SimRuntime {
    // Copies and kernels advance virtual time by their modelled duration, so snapshot and
    // restore times are the simulator's, not zero.
    let config = SimConfig {
        advance_clock_for_work: true,
        ..SimConfig::default()
    };
    SimRuntime::builder()
        .config(config)
        .agents(2, AgentConfig::default())
        .build()
}

/// Maps `--inject` to what the demo arranges before the target dispatch.
fn plan_fault(name: Option<&str>) -> (Option<Fault>, ToolFault) {
    match name {
        Some("snapshot-oom") => (Some(Fault::SnapshotOom), ToolFault::None),
        Some("capture-copy-fail") => (Some(Fault::CaptureCopyFail), ToolFault::None),
        Some("queue-drain-stuck") => (Some(Fault::QueueDrainStuck), ToolFault::None),
        Some("agent-drain-stuck") => (Some(Fault::AgentDrainStuck), ToolFault::None),
        Some("copy-fence-stuck") => (Some(Fault::CopyFenceStuck), ToolFault::None),
        Some("pass-stuck") => (Some(Fault::PassStuck { pass: 1 }), ToolFault::None),
        Some("restore-fail") => (Some(Fault::RestoreFail), ToolFault::None),
        Some("reentrant") => (None, ToolFault::Reentrant),
        Some("callback-panic") => (None, ToolFault::Panic),
        _ => (None, ToolFault::None),
    }
}

/// The dispatch a fault targets.
const TARGET: &str = "axpy_rmw";

/// Runs the workload; `tool` is `None` for the reference run. Returns the final digest of the
/// agent after each dispatch and, with `records`, how many records had arrived by then (so a
/// step's records, tool work included, are those that arrived during it).
fn run_workload(
    rt: &SimRuntime,
    args: &DemoArgs,
    tool: Option<&DemoTool>,
    records: Option<&Mutex<Vec<OutcomeRecord>>>,
) -> Result<(Vec<Digest128>, Vec<usize>), DemoError> {
    let replay = tool.is_some();
    let w = Workload::setup(rt)?;
    let (fault, _) = plan_fault(args.inject.as_deref());
    let inject = args.inject.as_deref();
    if inject == Some("untracked-vmem") {
        rt.alloc(A0, 64 << 10, MemoryClass::VIRTUAL_MAPPING)
            .map_err(sim)?;
    }
    if inject == Some("copy-fence-stuck") {
        // An application copy in flight on the agent's copy engine when the window opens.
        rt.copy_async(A0, w.scratch, w.side, 4096).map_err(sim)?;
    }
    let mut finals = Vec::new();
    let mut seen = Vec::new();
    for (agent, q, name, kargs) in w.steps() {
        let target = agent == A0 && name == TARGET;
        if let Some(t) = tool {
            t.current_args.lock().clone_from(&kargs);
        }
        if replay && target {
            if inject == Some("snapshot-oom") {
                // Backing memory is pooled across windows: empty the pool so the capture
                // has to allocate.
                rt.engine(A0).release_pools();
            }
            if let Some(f) = fault.clone() {
                // A restore batch is retried region by region, and a tier that cannot allocate
                // hands its share to the next: fail every attempt of this dispatch.
                let mode = if matches!(f, Fault::RestoreFail | Fault::SnapshotOom) {
                    FaultMode::Always
                } else {
                    FaultMode::Once
                };
                rt.inject(A0, f, mode);
            }
            if inject == Some("freed-region") {
                rt.inject(
                    A0,
                    Fault::FreeDuringPass {
                        base: w.scratch,
                        pass: 1,
                    },
                    FaultMode::Once,
                );
            }
        }
        let kernel = w.kernels[name].clone();
        let c = rt
            .dispatch(rt.queue(agent, q), &kernel, &kargs, Dim3::new(1024, 1, 1))
            .map_err(sim)?;
        c.wait().map_err(sim)?;
        if replay && target && inject == Some("snapshot-oom") {
            rt.gpu().clear_faults();
        }
        if !replay && target && inject == Some("freed-region") {
            // The reference frees the same region, after the dispatch.
            rt.free(A0, w.scratch).map_err(sim)?;
        }
        rt.wait_idle();
        finals.push(rt.digest_agent_memory(agent));
        seen.push(records.map_or(0, |r| r.lock().len()));
    }
    Ok((finals, seen))
}

/// Runs the demo, writing the report to `out`. Returns the process exit code.
pub fn run(args: &DemoArgs, out: &mut dyn Write) -> Result<u8, DemoError> {
    let policy = demo_policy(args)?;
    let (scope, restore) = (policy.scope, policy.restore);
    let filter = policy.filter.clone();

    // The reference: the same workload, once, without replay.
    let reference_rt = runtime();
    let (reference, _) = run_workload(&reference_rt, args, None, None)?;
    reference_rt.shutdown();

    // The replayed run.
    let rt = runtime();
    let contexts = Arc::new(Contexts::new());
    for (ctx, participant) in [(PROFILER, "counters"), (PC_SAMPLING, "pc_sampling")] {
        contexts.register_context(ctx).map_err(sim)?;
        contexts
            .declare_participant(ctx, participant, OverrideSupport::Honours)
            .map_err(sim)?;
        contexts.activate(ctx).map_err(sim)?;
    }
    let svc = Arc::new(ReplayService::new(
        policy,
        rt.clock(),
        contexts.clone() as Arc<dyn ContextControl>,
    ));
    let (_, tool_fault) = plan_fault(args.inject.as_deref());
    let tool = Arc::new(DemoTool {
        rt: rt.downgrade(),
        contexts,
        passes: args.passes,
        fault: tool_fault,
        target: TARGET,
        probe: Kernel::new("tool_probe", |ctx| {
            ctx.instructions(64);
            Ok::<(), KernelError>(())
        }),
        rows: Mutex::default(),
        current_args: Mutex::default(),
        capture: match &args.capture {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| DemoError::Capture(format!("{}: {e}", dir.display())))?;
                Some(CaptureTarget {
                    dir: dir.clone(),
                    max_bytes: args.max_bytes,
                    results: Arc::default(),
                })
            }
            None => None,
        },
    });
    let t2 = tool.clone();
    svc.configure(
        PROFILER,
        Subscription::CONFIG | Subscription::PASS,
        Arc::new(
            move |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, ud: &mut UserData| {
                t2.callback(op, ph, p, ud)
            },
        ),
    )
    .map_err(sim)?;
    svc.start().map_err(sim)?;
    rt.set_service(Some(svc.clone()));
    if !args.json {
        writeln!(
            out,
            "kernel-replay demo on the simulated GPU (no hardware): 2 agents, virtual time, \
             {} passes per dispatch, scope {}, restore {}{}",
            args.passes,
            scope.as_str(),
            restore.as_str(),
            args.inject
                .as_deref()
                .map(|f| format!(", injected fault: {f}"))
                .unwrap_or_default()
        )?;
        out.flush()?;
    }
    // Every record, tool work included, in the order the service produced them.
    let records: Arc<Mutex<Vec<OutcomeRecord>>> = Arc::default();
    let sink = records.clone();
    svc.set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
        sink.lock().push(r.clone())
    })));
    let (finals, seen) = run_workload(&rt, args, Some(&tool), Some(&records))?;
    rt.set_service(None);
    rt.shutdown();

    let records = records.lock().clone();
    let rows = tool.rows.lock().clone();
    let captures = tool
        .capture
        .as_ref()
        .map(|c| c.results.lock().clone())
        .unwrap_or_default();
    let summary = svc.summary();
    // Pair each record with the workload step it arrived during: tool work (reentrancy=1)
    // belongs to the window it ran in. A step without a record was not a candidate (the kernel
    // filter left it out): it ran once and is compared all the same.
    let mut paired: Vec<(OutcomeRecord, Option<Digest128>, Option<Digest128>)> = Vec::new();
    let mut not_candidates: Vec<(usize, &'static str)> = Vec::new();
    let steps = Workload::step_kernels();
    let mut from = 0;
    for (step, &to) in seen.iter().enumerate() {
        for r in &records[from..to] {
            paired.push((
                r.clone(),
                finals.get(step).copied(),
                reference.get(step).copied(),
            ));
        }
        if to == from {
            not_candidates.push((step, steps.get(step).copied().unwrap_or("?")));
        }
        from = to;
    }
    if records.is_empty() {
        let mut kernels: Vec<&str> = steps.clone();
        kernels.dedup();
        return Err(DemoError::NothingAdmitted {
            filter: describe_filter(&filter),
            steps: steps.len(),
            kernels: kernels.join(", "),
        });
    }
    let all_equal = finals == reference
        && finals.len() == steps.len()
        && paired.iter().all(|(_, f, re)| f.is_some() && f == re);

    if args.json {
        let dispatches: Vec<Value> = paired
            .iter()
            .map(|(r, f, re)| {
                let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
                let passes: Vec<Value> = rows
                    .iter()
                    .filter(|p| p.dispatch == r.dispatch_id)
                    .map(|p| json!({"pass": p.pass, "input_digest": p.input_digest.to_string()}))
                    .collect();
                if let Value::Object(m) = &mut v {
                    m.insert("passes".into(), Value::Array(passes));
                    m.insert("final_digest".into(), json!(f.map(|d| d.to_string())));
                    m.insert("reference_digest".into(), json!(re.map(|d| d.to_string())));
                }
                v
            })
            .collect();
        let left_out: Vec<Value> = not_candidates
            .iter()
            .map(|(step, kernel)| {
                json!({
                    "step": step,
                    "kernel": kernel,
                    "final_digest": finals.get(*step).map(|d| d.to_string()),
                    "reference_digest": reference.get(*step).map(|d| d.to_string()),
                })
            })
            .collect();
        let captures: Vec<Value> = captures
            .iter()
            .map(|(id, kernel, r)| match r {
                Ok(dir) => json!({"dispatch_id": id.0, "kernel": kernel, "folder": dir.display().to_string()}),
                Err(why) => json!({"dispatch_id": id.0, "kernel": kernel, "refused": why}),
            })
            .collect();
        let mut doc =
            json!({"dispatches": dispatches, "not_candidates": left_out, "summary": summary});
        if tool.capture.is_some() {
            doc["captures"] = Value::Array(captures);
        }
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        )?;
    } else {
        writeln!(out)?;
        writeln!(
            out,
            "{:>8}  {:<18} {:>4}  {:<13} {:>10}  {:<11} {:<16} {:>8}  {:>10}",
            "dispatch",
            "kernel",
            "pass",
            "counter",
            "value",
            "pc_sampling",
            "input digest",
            "gpu µs",
            "restored"
        )?;
        for (r, _, _) in &paired {
            for row in rows.iter().filter(|p| p.dispatch == r.dispatch_id) {
                let i = row.pass as usize;
                writeln!(
                    out,
                    "{:>8}  {:<18} {:>4}  {:<13} {:>10}  {:<11} {:<16} {:>8.1}  {:>10}",
                    r.dispatch_id.0,
                    r.kernel,
                    row.pass,
                    row.group.as_str(),
                    row.value
                        .map(|v| v.to_string())
                        .unwrap_or_else(|| "-".into()),
                    if row.pc_sampling { "on" } else { "off" },
                    &row.input_digest.to_string()[..16],
                    r.pass_gpu_seconds.get(i).copied().unwrap_or(0.0) * 1e6,
                    r.pass_restored_bytes.get(i).copied().unwrap_or(0)
                )?;
            }
        }
        writeln!(out)?;
        for (r, _, _) in &paired {
            writeln!(out, "{r}")?;
        }
        writeln!(out)?;
        for (r, f, re) in &paired {
            let passes: Vec<&PassRow> = rows
                .iter()
                .filter(|p| p.dispatch == r.dispatch_id)
                .collect();
            let same_inputs = passes
                .windows(2)
                .all(|w| w[0].input_digest == w[1].input_digest);
            writeln!(
                out,
                "check dispatch {:>2} {:<18} {:<9} {:<20} passes {:>2}  identical inputs: {:<3}  final == reference: {}",
                r.dispatch_id.0,
                r.kernel,
                r.outcome.as_str(),
                r.reason.as_str(),
                r.executed_passes,
                if same_inputs { "yes" } else { "NO" },
                if f.is_some() && f == re { "yes" } else { "NO" }
            )?;
        }
        for (step, kernel) in &not_candidates {
            let (f, re) = (finals.get(*step), reference.get(*step));
            writeln!(
                out,
                "check step     {:>2} {:<18} not a candidate (kernel filter): ran once  final == reference: {}",
                step,
                kernel,
                if f.is_some() && f == re { "yes" } else { "NO" }
            )?;
        }
        writeln!(out)?;
        writeln!(out, "{summary}")?;
        if tool.capture.is_some() {
            writeln!(out)?;
            for (id, kernel, r) in &captures {
                match r {
                    Ok(dir) => writeln!(
                        out,
                        "capture dispatch {:>2} {:<18} {}",
                        id.0,
                        kernel,
                        dir.display()
                    )?,
                    Err(why) => writeln!(
                        out,
                        "capture dispatch {:>2} {:<18} not captured: {why}",
                        id.0, kernel
                    )?,
                }
            }
        }
    }
    Ok(if all_equal { 0 } else { 1 })
}
