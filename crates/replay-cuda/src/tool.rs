//! Entry points a runtime calls, and the tools attached there (SPEC §9.2, §12).
//!
//! [`on_injection`] is the body of `InitializeInjection` (the driver calls it at `cuInit` for
//! the library named in `CUDA_INJECTION64_PATH`; the shared object exports it under its `cuda`
//! feature). It only turns the interception on and attaches the tool: no driver call runs
//! inside `cuInit`. The backend itself opens at the first intercepted launch.
//!
//! Attaching, first match wins:
//! - `KREPLAY_CUDA_TOOL=/path/libtool.so`: a C/C++ tool library linking `libkernel_replay`,
//!   whose `int kreplay_tool_init(uint64_t driver_version)` configures replay through the C
//!   ABI (as on HSA);
//! - `KREPLAY_CUDA_BUILTIN=verify|timing|counters`: one of the built-in tools below, which
//!   `kreplay run` selects. They use only the public API: a [`ReplayTool`] configured on the service,
//!   the outcome record, and [`crate::CudaMemory::digest_blocking`].
//!
//! Built-in tools (`KREPLAY_CUDA_PASSES`, default 3, is the pass count they ask for):
//! - `verify`: in every PASS ENTER the digest of every tracked device region of the agent
//!   (the inputs), in every PASS EXIT the same (the outputs); a dispatch is `identical` when
//!   every pass's inputs equal the first pass's, and `deterministic` when every pass's outputs
//!   equal the first pass's; otherwise the record lists the regions that differed.
//! - `timing`: the GPU time of each pass (from the outcome record): min, median, max.
//! - `counters`: hardware metrics of every replayed dispatch ([`crate::counters`]), the
//!   Nsight Compute names in `KREPLAY_CUDA_METRICS` (comma-separated), compiled for the first
//!   device's chip when the tool attaches (a list that cannot be collected attaches no tool
//!   and says which metrics); it asks for the plan's passes, or `KREPLAY_CUDA_PASSES` if more.
//!   Values are measured as the policy leaves the caches: `kreplay run` sets
//!   `KREPLAY_CACHE_CONTROL=flush` (Nsight Compute's default) unless it is set. The report's
//!   `counters` member is a serialized `replay_report_types::CounterReport`; `counter_plan` says
//!   which metrics share which pass, `counter_errors` what could not be collected.
//!
//! Under `kreplay capture` (`KREPLAY_CUDA_CAPTURE_DIR` set) the built-in tool also asks for
//! the chosen launch's capture in its first PASS ENTER ([`crate::capture`]).
//!
//! At exit the records, the per-kernel table, the service's summary, the interception's
//! counts and the CUPTI cross-check ([`crate::intercept::cupti`]) are written as JSON to
//! `KREPLAY_CUDA_OUT` (when set; through a temporary file and a rename). Under `kreplay run`
//! (`KREPLAY_CUDA_OUT_DIR` set) each process instead streams its records to a file of its
//! own as they are made, keeping none, and writes the rest at exit beside it ([`crate::job`]).
//! No driver call runs at exit.

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_core::{ContextId, Digest128, DispatchId, MemoryClass, ReplayService, Subscription};
use serde::Serialize;

use crate::counters::{self, CounterCollector, CuptiProfiler, MetricPlan, Profiler, ReportHeader};
use crate::state::{state, LayoutSource, BUILTIN_ENV, TOOL_ENV};

/// Environment variable: the pass count the built-in tools ask for.
pub const PASSES_ENV: &str = "KREPLAY_CUDA_PASSES";
/// Environment variable: the `counters` tool's metrics (comma-separated).
pub const METRICS_ENV: &str = "KREPLAY_CUDA_METRICS";
/// Environment variable: where the built-in tools' JSON report goes.
pub const OUT_ENV: &str = "KREPLAY_CUDA_OUT";

/// The context id the built-in tools configure the service with.
const BUILTIN_CONTEXT: ContextId = ContextId(0x6b72_6370);
const DIGEST_WAIT: Duration = Duration::from_secs(60);

/// Which built-in tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BuiltinKind {
    /// Input and output digests per pass.
    Verify,
    /// GPU time per pass.
    Timing,
    /// Hardware counters per pass (CUPTI's range profiler).
    Counters,
}

impl BuiltinKind {
    /// Parses `verify` or `timing`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "verify" => Some(Self::Verify),
            "timing" => Some(Self::Timing),
            "counters" => Some(Self::Counters),
            _ => None,
        }
    }
}

/// One dispatch's record.
#[derive(Debug, Clone, Serialize)]
pub struct DispatchRecord {
    /// The service's dispatch id.
    pub dispatch_id: u64,
    /// Kernel name.
    pub kernel: String,
    /// `replayed`, `declined`, `truncated` or `not_requested`.
    pub outcome: String,
    /// The reason.
    pub reason: String,
    /// The scope that ran.
    pub scope: String,
    /// Where the argument block came from.
    pub layout: Option<LayoutSource>,
    /// Passes executed.
    pub executed_passes: u32,
    /// GPU seconds per pass.
    pub pass_gpu_seconds: Vec<f64>,
    /// Bytes captured.
    pub captured_bytes: u64,
    /// verify: every pass's inputs equal the first pass's.
    pub inputs_identical: Option<bool>,
    /// verify: every pass's outputs equal the first pass's.
    pub outputs_identical: Option<bool>,
    /// verify: `(base, size)` of regions whose inputs or outputs differed between passes.
    pub differing_regions: Vec<(u64, u64)>,
    /// verify: bytes digested per pass (inputs and outputs each).
    pub digested_bytes: u64,
    /// The executable graph this dispatch ran from (numbered from 1), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph: Option<u64>,
    /// Its node (the position in the order the graph was unrolled); absent for a whole graph
    /// under graph profiling mode `graph`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// Which launch of the graph, from 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_launch: Option<u64>,
    /// Independent branches of the graph ran one after another while it was profiled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_serialized: Option<bool>,
    /// The window's time by phase up to CONFIG EXIT (`replay_core::phases`).
    pub phases: replay_core::PhaseSeconds,
    /// Each pass's launch, seconds on the window's clock.
    pub pass_launch_seconds: Vec<f64>,
    /// Each pass's wait, seconds on the window's clock.
    pub pass_wait_seconds: Vec<f64>,
}

#[derive(Debug, Default)]
struct VerifyState {
    ranges: Vec<(u64, u64)>,
    first_in: Option<Vec<Digest128>>,
    first_out: Option<Vec<Digest128>>,
    inputs_ok: bool,
    outputs_ok: bool,
    differing: Vec<(u64, u64)>,
    failed: Option<String>,
}

/// A built-in tool.
#[derive(Debug)]
pub struct BuiltinTool {
    kind: BuiltinKind,
    passes: u64,
    verify: Mutex<HashMap<DispatchId, VerifyState>>,
    records: Mutex<Vec<DispatchRecord>>,
    counters: Option<Arc<CounterCollector>>,
}

impl BuiltinTool {
    /// A tool of `kind` asking for `passes` passes.
    pub fn new(kind: BuiltinKind, passes: u64) -> Self {
        Self {
            kind,
            passes,
            verify: Mutex::new(HashMap::new()),
            records: Mutex::new(Vec::new()),
            counters: None,
        }
    }

    /// The `counters` tool over `collector`, asking for its pass count.
    pub fn counters(collector: Arc<CounterCollector>) -> Self {
        let mut t = Self::new(BuiltinKind::Counters, u64::from(collector.pass_count()));
        t.counters = Some(collector);
        t
    }

    /// The counter collection of the `counters` tool.
    pub fn collector(&self) -> Option<&Arc<CounterCollector>> {
        self.counters.as_ref()
    }

    /// The records so far.
    pub fn records(&self) -> Vec<DispatchRecord> {
        self.records.lock().clone()
    }

    fn digest(
        &self,
        agent: replay_core::AgentId,
        ranges: &[(u64, u64)],
    ) -> Result<Vec<Digest128>, String> {
        let b = state()
            .backend_of(agent)
            .ok_or_else(|| format!("no backend for agent {agent}"))?;
        let key = replay_core::digest::key_from_seed(0x6b72);
        b.memory()
            .digest_blocking(ranges, key, DIGEST_WAIT)
            .map_err(|e| e.to_string())
    }

    fn pass_digest(&self, p: &ReplayPayload<'_>, output: bool) {
        let info = p.dispatch_info;
        let mut v = self.verify.lock();
        let st = v.entry(info.dispatch_id).or_insert_with(|| VerifyState {
            inputs_ok: true,
            outputs_ok: true,
            ..VerifyState::default()
        });
        if st.failed.is_some() {
            return;
        }
        if st.ranges.is_empty() {
            st.ranges = state()
                .tracker
                .regions(info.agent)
                .iter()
                .filter(|r| r.class == MemoryClass::DEVICE_COARSE && r.size > 0)
                .map(|r| (r.base, r.size))
                .collect();
        }
        let ranges = st.ranges.clone();
        drop(v);
        let d = self.digest(info.agent, &ranges);
        let mut v = self.verify.lock();
        let Some(st) = v.get_mut(&info.dispatch_id) else {
            return;
        };
        let d = match d {
            Ok(d) => d,
            Err(e) => {
                st.failed = Some(e);
                return;
            }
        };
        let (first, ok) = if output {
            (&mut st.first_out, &mut st.outputs_ok)
        } else {
            (&mut st.first_in, &mut st.inputs_ok)
        };
        match first {
            None => *first = Some(d),
            Some(f) => {
                for (i, (a, b)) in f.iter().zip(&d).enumerate() {
                    if a != b {
                        *ok = false;
                        if !st.differing.contains(&ranges[i]) {
                            st.differing.push(ranges[i]);
                        }
                    }
                }
            }
        }
    }
}

impl ReplayTool for BuiltinTool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        if (op, phase) == (Operation::Pass, Phase::Enter) {
            // `kreplay capture`: the chosen launch's first pass is also its capture.
            crate::capture::pass_enter(p);
        }
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                let n = self.passes;
                p.replay_pass_count = Some(Arc::new(move |_, _| n));
            }
            (Operation::Pass, Phase::Enter) if self.kind == BuiltinKind::Verify => {
                self.pass_digest(p, false);
            }
            (Operation::Pass, Phase::Exit) if self.kind == BuiltinKind::Verify => {
                self.pass_digest(p, true);
            }
            (Operation::Pass, Phase::Enter) => {
                if let Some(c) = &self.counters {
                    c.pass_enter(p.dispatch_info, p.current_pass);
                }
            }
            (Operation::Pass, Phase::Exit) => {
                if let Some(c) = &self.counters {
                    c.pass_exit(p.dispatch_info, p.current_pass);
                }
            }
            (Operation::Config, Phase::Exit) => {
                if let Some(c) = &self.counters {
                    c.finish(p.dispatch_info, p.outcome);
                }
                let Some(o) = p.outcome else { return };
                let v = self.verify.lock().remove(&o.dispatch_id);
                let (inputs, outputs, differing, digested) = match v {
                    Some(v) if v.failed.is_none() && v.first_in.is_some() => (
                        Some(v.inputs_ok),
                        Some(v.outputs_ok),
                        v.differing,
                        v.ranges.iter().map(|r| r.1).sum(),
                    ),
                    Some(v) => {
                        if let Some(e) = v.failed {
                            log::warn!("[kernel-replay] verify: digest failed: {e}");
                        }
                        (None, None, Vec::new(), 0)
                    }
                    None => (None, None, Vec::new(), 0),
                };
                // CONFIG EXIT runs on the thread that runs the graph's node.
                let tag = crate::state::graph::current_node();
                let record = DispatchRecord {
                    dispatch_id: o.dispatch_id.0,
                    kernel: o.kernel.clone(),
                    outcome: o.outcome.as_str().to_string(),
                    reason: o.reason.as_str().to_string(),
                    scope: format!("{:?}", o.scope).to_ascii_lowercase(),
                    layout: state().layout_source(p.dispatch_info.kernel_id),
                    executed_passes: o.executed_passes,
                    pass_gpu_seconds: o.pass_gpu_seconds.to_vec(),
                    captured_bytes: o.captured_bytes,
                    inputs_identical: inputs,
                    outputs_identical: outputs,
                    differing_regions: differing,
                    digested_bytes: digested,
                    graph: tag.map(|t| t.graph),
                    node: tag.and_then(|t| (t.node != u32::MAX).then_some(t.node)),
                    graph_launch: tag.map(|t| t.launch),
                    graph_serialized: tag.map(|t| t.serialized),
                    phases: o.phases,
                    pass_launch_seconds: o.pass_launch_seconds.to_vec(),
                    pass_wait_seconds: o.pass_wait_seconds.to_vec(),
                };
                // Under `kreplay run` each record goes to disk as it is made and is not kept.
                if !crate::job::stream_record(record.dispatch_id, &record) {
                    self.records.lock().push(record);
                }
            }
        }
    }
}

static BUILTIN: OnceLock<Arc<BuiltinTool>> = OnceLock::new();
static ATTACHED: AtomicBool = AtomicBool::new(false);

/// The built-in tool attached, if any.
pub fn builtin() -> Option<&'static Arc<BuiltinTool>> {
    BUILTIN.get()
}

/// The body of `InitializeInjection`: turns interception on. The tool is attached when the
/// service is first needed ([`crate::state::service`]), outside `cuInit`. Returns 1 (the
/// driver's "success").
pub fn on_injection() -> c_int {
    // A rank `KREPLAY_RANKS` leaves out runs untouched.
    crate::state::set_enabled(crate::job::this_process_selected());
    // Another tool's injection the program had runs after ours (`kreplay run` chains it).
    crate::job::chain_injection();
    1
}

/// Attaches the tool the environment names to `service` (once per process).
pub fn attach_from_env(service: &Arc<ReplayService>) {
    if ATTACHED.swap(true, Ordering::SeqCst) {
        return;
    }
    if let Some(path) = std::env::var_os(TOOL_ENV) {
        attach_library(&path);
    } else if let Ok(name) = std::env::var(BUILTIN_ENV) {
        let Some(kind) = BuiltinKind::parse(&name) else {
            eprintln!(
                "[kernel-replay] {BUILTIN_ENV}={name:?} is not verify, timing or counters; no tool attached"
            );
            return;
        };
        let passes = match std::env::var(PASSES_ENV) {
            Ok(v) => match v.parse::<u64>() {
                Ok(n) => n,
                Err(_) => {
                    eprintln!("[kernel-replay] {PASSES_ENV}={v:?} is not a whole number; no tool attached");
                    return;
                }
            },
            Err(_) => 3,
        };
        let tool = if kind == BuiltinKind::Counters {
            match counters_from_env(passes) {
                Ok(c) => Arc::new(BuiltinTool::counters(c)),
                Err(e) => {
                    eprintln!("[kernel-replay] counters: {e}; no tool attached");
                    return;
                }
            }
        } else {
            Arc::new(BuiltinTool::new(kind, passes))
        };
        let _ = BUILTIN.set(Arc::clone(&tool));
        if let Err(e) = service.configure(
            BUILTIN_CONTEXT,
            Subscription::CONFIG | Subscription::PASS,
            tool,
        ) {
            eprintln!("[kernel-replay] the built-in tool could not be attached: {e}");
            return;
        }
        if let Err(e) = service.start() {
            eprintln!("[kernel-replay] the built-in tool could not start: {e}");
        }
    }
    register_exit_report();
}

/// The `counters` tool's collection: `KREPLAY_CUDA_METRICS` compiled for device 0.
fn counters_from_env(passes: u64) -> Result<Arc<CounterCollector>, String> {
    let list = std::env::var(METRICS_ENV).map_err(|_| format!("{METRICS_ENV} is not set"))?;
    let names = counters::parse_metric_list(&list);
    let profiler = CuptiProfiler::global().map_err(|e| e.to_string())?;
    let chip = profiler.chip(0).map_err(|e| e.to_string())?;
    let plan = MetricPlan::compile(profiler, &chip, &names).map_err(|e| e.to_string())?;
    log::info!(
        "[kernel-replay] counters: {} metrics for {chip} in {} passes",
        names.len(),
        plan.passes
    );
    // The range profiler on the application's context now, before the kernels it will
    // launch are loaded (lazy loading loads them at their first launch).
    match profiler.current_context() {
        Ok(ctx) => {
            if let Err(e) = profiler.prepare(ctx) {
                log::warn!("[kernel-replay] counters: enabling the range profiler early: {e}");
            }
        }
        Err(e) => log::debug!("[kernel-replay] counters: {e}"),
    }
    let min = u32::try_from(passes).unwrap_or(u32::MAX);
    Ok(Arc::new(CounterCollector::new(
        Arc::new(plan),
        Arc::new(profiler),
        min,
    )))
}

fn attach_library(path: &std::ffi::OsStr) {
    // SAFETY: the user named this tool library; loading it runs its initialisers, as any
    // tool library's loading does.
    let lib = match unsafe { libloading::Library::new(path) } {
        Ok(l) => l,
        Err(e) => {
            eprintln!("[kernel-replay] {TOOL_ENV}: cannot load {path:?}: {e}");
            return;
        }
    };
    type Init = unsafe extern "C" fn(u64) -> c_int;
    // SAFETY: the tool's documented entry has this signature.
    let init = match unsafe { lib.get::<Init>(b"kreplay_tool_init\0") } {
        Ok(f) => *f,
        Err(e) => {
            eprintln!("[kernel-replay] {TOOL_ENV}: {path:?} has no kreplay_tool_init: {e}");
            return;
        }
    };
    let mut version: i32 = 0;
    // SAFETY: out pointer to a live local.
    let _ = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
    // SAFETY: the tool's entry, called once.
    let r = unsafe { init(version.max(0) as u64) };
    if r != 0 {
        eprintln!("[kernel-replay] {TOOL_ENV}: kreplay_tool_init returned {r}");
    }
    // The tool stays loaded until the process exits.
    std::mem::forget(lib);
}

extern "C" {
    fn atexit(f: extern "C" fn()) -> c_int;
}

/// Gives up the CUPTI cross-check's subscription when dropped (after the report is written).
fn scopeguard_unsubscribe() -> impl Drop {
    struct G;
    impl Drop for G {
        fn drop(&mut self) {
            crate::intercept::cupti::unsubscribe();
        }
    }
    G
}

fn register_exit_report() {
    if std::env::var_os(OUT_ENV).is_none() && crate::job::out_dir().is_none() {
        return;
    }
    // SAFETY: registers a function without arguments that never unwinds (it catches panics).
    unsafe { atexit(exit_report) };
}

extern "C" fn exit_report() {
    let _inside = crate::intercept::Internal::enter();
    let _ = std::panic::catch_unwind(|| {
        // CUPTI is not kept past the program's end (the report keeps the counts).
        let _g = scopeguard_unsubscribe();
        if let Some(dir) = crate::job::out_dir() {
            let path = crate::job::report_path(&dir, std::process::id());
            let mut json = report_json();
            let (records, last) = crate::job::streamed();
            if let Some(o) = json.as_object_mut() {
                // The records are in the process's records file.
                o.remove("records");
                o.remove("kernels");
                o.insert("process".into(), serde_json::json!(crate::job::header()));
                o.insert("records_written".into(), records.into());
                o.insert("last_dispatch".into(), serde_json::json!(last));
            }
            if let Err(e) = crate::job::write_atomically(&path, json.to_string().as_bytes()) {
                eprintln!("[kernel-replay] cannot write {}: {e}", path.display());
            }
        } else if let Some(path) = std::env::var_os(OUT_ENV) {
            let json = report_json();
            let path = std::path::PathBuf::from(path);
            if let Err(e) = crate::job::write_atomically(&path, json.to_string().as_bytes()) {
                eprintln!("[kernel-replay] cannot write {}: {e}", path.display());
            }
        }
    });
}

/// Per-kernel aggregate of the report.
#[derive(Debug, Default, Serialize)]
pub struct KernelRow {
    /// Dispatches seen by the tool.
    pub dispatches: u64,
    /// Replayed in full.
    pub replayed: u64,
    /// Declined or truncated, by reason.
    pub not_replayed: BTreeMap<String, u64>,
    /// verify: dispatches whose inputs differed between passes.
    pub inputs_differed: u64,
    /// verify: dispatches whose outputs differed between passes (non-deterministic).
    pub outputs_differed: u64,
    /// timing: GPU seconds of every pass.
    pub pass_seconds: Vec<f64>,
}

/// The report: records, per-kernel table, the service's summary, the interception's counts.
pub fn report_json() -> serde_json::Value {
    let records = builtin().map(|t| t.records()).unwrap_or_default();
    let mut kernels: BTreeMap<String, KernelRow> = BTreeMap::new();
    for r in &records {
        let k = kernels.entry(r.kernel.clone()).or_default();
        k.dispatches += 1;
        if r.outcome == "replayed" {
            k.replayed += 1;
        } else {
            *k.not_replayed
                .entry(format!("{}:{}", r.outcome, r.reason))
                .or_default() += 1;
        }
        if r.inputs_identical == Some(false) {
            k.inputs_differed += 1;
        }
        if r.outputs_identical == Some(false) {
            k.outputs_differed += 1;
        }
        k.pass_seconds.extend(&r.pass_gpu_seconds);
    }
    let summary = crate::state::service()
        .map(|s| serde_json::to_value(s.summary()).unwrap_or_default())
        .unwrap_or_default();
    let collector = builtin().and_then(|t| t.collector());
    let counters = collector.map(|c| {
        let header = report_header();
        serde_json::json!({
            "counters": c.report(&header),
            "counter_plan": c.plan().summary(),
            "counter_errors": c.errors().into_iter().map(|(d, e)| serde_json::json!({"dispatch_id": d, "error": e})).collect::<Vec<_>>(),
        })
    });
    let mut v = serde_json::json!({
        "tool": builtin().map(|t| t.kind),
        "passes": builtin().map(|t| t.passes),
        "interception": state().counters_json(),
        "cupti": crate::intercept::cupti::report(),
        "summary": summary,
        "kernels": kernels,
        "records": records,
    });
    if let (Some(serde_json::Value::Object(c)), Some(o)) = (counters, v.as_object_mut()) {
        o.extend(c);
    }
    v
}

/// Process, host and device of the counter report (no driver call: the device's info was
/// read when its backend opened).
fn report_header() -> ReportHeader {
    let exe = std::env::current_exe().ok();
    let info = state()
        .backend_of(replay_core::AgentId(0))
        .map(|b| b.device().info().clone());
    ReportHeader {
        process_id: std::process::id(),
        process_name: exe
            .as_ref()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        host_name: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        device_name: info.as_ref().map(|i| i.name.clone()).unwrap_or_default(),
        compute_capability: info
            .map(|i| format!("{}.{}", i.compute_capability.0, i.compute_capability.1))
            .unwrap_or_default(),
    }
}
