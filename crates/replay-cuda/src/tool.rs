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
//!   ABI (as on HSA), loaded by the shared object's one loader
//!   ([`replay_tools::library`]);
//! - `KREPLAY_CUDA_BUILTIN=verify|timing|counters`: one of the built-in tools below, which
//!   `kreplay run` selects. They use only the public API: a [`ReplayTool`] configured on the service,
//!   the outcome record, and [`crate::CudaMemory::digest_blocking`].
//!
//! Built-in tools (`KREPLAY_CUDA_PASSES`, default 3, is the pass count they ask for):
//! - `verify` and `timing`: `replay_tools`' [`replay_tools::BuiltinTool`], over this backend's
//!   [`CudaTools`] (the tracked device regions of the agent, digested by
//!   [`crate::CudaMemory::digest_blocking`] under the tracker's hold, only those still live:
//!   `replay_memory::Tracker::read_live`); each record also says where the argument block
//!   came from and which graph node the dispatch ran as.
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

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use replay_core::contract::ReplayPayload;
use replay_core::{
    AgentId, ContextId, Digest128, DigestKey, MemoryClass, RegionRef, ReplayService, Subscription,
};
pub use replay_tools::{DispatchRecord, KernelRow, ToolKind as BuiltinKind, PASSES_ENV};
use replay_tools::{ToolDevice, ToolError};

use crate::counters::{self, CounterCollector, CuptiProfiler, MetricPlan, Profiler, ReportHeader};
use crate::state::{state, BUILTIN_ENV, TOOL_ENV};

/// Environment variable: the `counters` tool's metrics (comma-separated).
pub const METRICS_ENV: &str = "KREPLAY_CUDA_METRICS";
/// Environment variable: where the built-in tools' JSON report goes.
pub const OUT_ENV: &str = "KREPLAY_CUDA_OUT";

/// The context id the built-in tools configure the service with.
const BUILTIN_CONTEXT: ContextId = ContextId(0x6b72_6370);
const DIGEST_WAIT: Duration = Duration::from_secs(60);

/// A built-in tool of this backend.
pub type BuiltinTool = replay_tools::BuiltinTool<CudaTools>;

/// What the built-in tools need of the CUDA backend, and what it adds to them: the capture
/// `kreplay capture` asks for, and the `counters` tool's collection.
#[derive(Debug, Default)]
pub struct CudaTools {
    counters: Option<Arc<CounterCollector>>,
}

impl CudaTools {
    /// The `counters` tool's side, over `collector`.
    pub fn counters(collector: Arc<CounterCollector>) -> Self {
        Self {
            counters: Some(collector),
        }
    }

    /// The counter collection of the `counters` tool.
    pub fn collector(&self) -> Option<&Arc<CounterCollector>> {
        self.counters.as_ref()
    }
}

impl ToolDevice for CudaTools {
    fn verify_regions(&self, agent: AgentId) -> Vec<RegionRef> {
        state()
            .tracker
            .regions(agent)
            .into_iter()
            .filter(|r| r.class == MemoryClass::DEVICE_COARSE && r.size > 0)
            .collect()
    }

    fn digest(
        &self,
        agent: AgentId,
        regions: &[RegionRef],
        key: DigestKey,
    ) -> Result<Vec<Option<Digest128>>, ToolError> {
        let b = state()
            .backend_of(agent)
            .ok_or(ToolError::NoDevice(agent))?;
        // Under the hold, after the liveness check: another thread's free waits meanwhile.
        state().tracker.read_live(agent, regions, |live| {
            let ranges: Vec<(u64, u64)> = live.iter().map(|r| (r.base, r.size)).collect();
            b.memory()
                .digest_blocking(&ranges, key, DIGEST_WAIT)
                .map_err(|e| ToolError::Digest(e.to_string()))
        })
    }

    fn pass_enter(&self, p: &mut ReplayPayload<'_>) {
        // `kreplay capture`: the chosen launch's first pass is also its capture.
        crate::capture::pass_enter(p);
        if let Some(c) = &self.counters {
            c.pass_enter(p.dispatch_info, p.current_pass);
        }
    }

    fn pass_exit(&self, p: &ReplayPayload<'_>) {
        if let Some(c) = &self.counters {
            c.pass_exit(p.dispatch_info, p.current_pass);
        }
    }

    fn config_exit(&self, p: &ReplayPayload<'_>) {
        if let Some(c) = &self.counters {
            c.finish(p.dispatch_info, p.outcome);
        }
    }

    fn annotate(&self, p: &ReplayPayload<'_>, r: &mut DispatchRecord) {
        r.layout = state()
            .layout_source(p.dispatch_info.kernel_id)
            .map(|l| l.as_str().to_string());
        // CONFIG EXIT runs on the thread that runs the graph's node.
        if let Some(t) = crate::state::graph::current_node() {
            r.graph = Some(t.graph);
            r.node = (t.node != u32::MAX).then_some(t.node);
            r.graph_launch = Some(t.launch);
            r.graph_serialized = Some(t.serialized);
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
        let passes = match replay_tools::builtin::passes_from_env() {
            Ok(n) => n,
            Err(e) => {
                eprintln!("[kernel-replay] {e}; no tool attached");
                return;
            }
        };
        let device = if kind == BuiltinKind::Counters {
            match counters_from_env(passes) {
                Ok(c) => CudaTools::counters(c),
                Err(e) => {
                    eprintln!("[kernel-replay] counters: {e}; no tool attached");
                    return;
                }
            }
        } else {
            CudaTools::default()
        };
        let passes = match device.collector() {
            Some(c) => u64::from(c.pass_count()),
            None => passes,
        };
        let tool = Arc::new(BuiltinTool::new(kind, passes, device));
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

/// Loads the tool library at `path` through the shared object's one loader
/// ([`replay_tools::library::load`]) and calls its init with the driver's version.
fn attach_library(path: &std::ffi::OsStr) {
    let mut version: i32 = 0;
    // SAFETY: out pointer to a live local.
    let _ = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
    match replay_tools::library::load(path, version.max(0) as u64) {
        Ok(lib) => {
            if lib.init_status != 0 {
                eprintln!(
                    "[kernel-replay] {TOOL_ENV}: kreplay_tool_init returned {}",
                    lib.init_status
                );
            }
            // The tool stays loaded until the process exits.
            std::mem::forget(lib);
        }
        Err(e) => eprintln!("[kernel-replay] {TOOL_ENV}={path:?}: {e}"),
    }
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
        let out = std::env::var_os(OUT_ENV).map(std::path::PathBuf::from);
        crate::job::write_exit_report(report_json(), out.as_deref());
    });
}

/// The report: records, per-kernel table, the service's summary, the interception's counts.
pub fn report_json() -> serde_json::Value {
    let summary = crate::state::service()
        .map(|s| serde_json::to_value(s.summary()).unwrap_or_default())
        .unwrap_or_default();
    let mut o = match builtin() {
        Some(t) => t.report_members(),
        None => {
            let mut m = serde_json::Map::new();
            for k in ["tool", "passes"] {
                m.insert(k.into(), serde_json::Value::Null);
            }
            m.insert("kernels".into(), serde_json::json!({}));
            m.insert("records".into(), serde_json::json!([]));
            m
        }
    };
    o.insert("interception".into(), state().counters_json());
    o.insert(
        "cupti".into(),
        serde_json::json!(crate::intercept::cupti::report()),
    );
    o.insert("summary".into(), summary);
    if let Some(c) = builtin().and_then(|t| t.device().collector()) {
        let header = report_header();
        o.insert("counters".into(), serde_json::json!(c.report(&header)));
        o.insert("counter_plan".into(), serde_json::json!(c.plan().summary()));
        o.insert(
            "counter_errors".into(),
            c.errors()
                .into_iter()
                .map(|(d, e)| serde_json::json!({"dispatch_id": d, "error": e}))
                .collect(),
        );
    }
    serde_json::Value::Object(o)
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
