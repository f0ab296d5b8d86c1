//! The built-in `verify` and `timing` tools (SPEC §12), backend-neutral.
//!
//! - `verify`: in every PASS ENTER the digest of the regions the backend names for the
//!   dispatch's agent ([`ToolDevice::verify_regions`]: the inputs), in every PASS EXIT the
//!   same (the outputs); a dispatch is `identical` when every pass's inputs equal the first
//!   pass's, and `deterministic` when every pass's outputs equal the first pass's; otherwise
//!   the record lists the regions that differed.
//! - `timing`: the GPU time of each pass, from the outcome record.
//!
//! Both ask for the same pass count ([`PASSES_ENV`], default 3) and make one
//! [`DispatchRecord`] per dispatch at CONFIG EXIT, streamed to this process's records file
//! under `kreplay run` ([`crate::job::stream_record`]) or kept in the tool otherwise.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_core::{AgentId, Digest128, DigestKey, DispatchId, RegionRef};
use serde::Serialize;

/// Environment variable: the pass count the built-in tools ask for (the name the CUDA
/// backend gave it first, kept for every backend).
pub const PASSES_ENV: &str = "KREPLAY_CUDA_PASSES";

/// The pass count when [`PASSES_ENV`] is unset.
pub const DEFAULT_PASSES: u64 = 3;

/// What a tool could not get from the device (one enum for this crate's boundary).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The backend has no device for the dispatch's agent.
    #[error("no backend for agent {0}")]
    NoDevice(AgentId),
    /// The device could not digest the regions.
    #[error("{0}")]
    Digest(String),
    /// A tool library could not be loaded (the loader's reason).
    #[error("cannot load it: {0}")]
    LibraryLoad(String),
    /// A tool library lacks its init entry.
    #[error("it does not export {symbol}: {reason}")]
    LibraryInit {
        /// The entry.
        symbol: &'static str,
        /// The loader's reason.
        reason: String,
    },
    /// No tool-library loader is registered (a backend used without the shared object).
    #[error("no tool-library loader is registered")]
    NoLoader,
    /// A variable the tool reads is not what it expects.
    #[error("{name}={value:?} is {expected}")]
    Environment {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it should be.
        expected: &'static str,
    },
}

/// Which built-in tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Input and output digests per pass.
    Verify,
    /// GPU time per pass.
    Timing,
    /// A backend's hardware counters: this crate only asks for the passes, the backend's
    /// [`ToolDevice`] hooks collect.
    Counters,
}

impl ToolKind {
    /// Parses `verify`, `timing` or `counters`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "verify" => Some(Self::Verify),
            "timing" => Some(Self::Timing),
            "counters" => Some(Self::Counters),
            _ => None,
        }
    }
}

/// The pass count [`PASSES_ENV`] asks for ([`DEFAULT_PASSES`] when unset).
pub fn passes_from_env() -> Result<u64, ToolError> {
    match std::env::var(PASSES_ENV) {
        Ok(v) => v.parse::<u64>().map_err(|_| ToolError::Environment {
            name: PASSES_ENV,
            value: v,
            expected: "not a whole number",
        }),
        Err(_) => Ok(DEFAULT_PASSES),
    }
}

/// What the built-in tools need of a backend. Called on the thread that runs the window.
pub trait ToolDevice: Send + Sync + 'static {
    /// The regions `verify` digests for dispatches on `agent` (read once per dispatch, in its
    /// first PASS ENTER).
    fn verify_regions(&self, agent: AgentId) -> Vec<RegionRef>;

    /// The digests of `regions` of `agent`'s memory as they are now (the pass's work before
    /// PASS ENTER, or after PASS EXIT, complete), one per region, with `key`; `None` for a
    /// region the application freed since it was listed. Other threads of the application
    /// free memory while a window runs: a region is read only under the tracker's hold after
    /// a liveness check (`replay_memory::Tracker::read_live`), never once freed.
    fn digest(
        &self,
        agent: AgentId,
        regions: &[RegionRef],
        key: DigestKey,
    ) -> Result<Vec<Option<Digest128>>, ToolError>;

    /// Backend work at PASS ENTER, before `verify`'s input digest (it may ask for the pass's
    /// capture: `ReplayPayload::request_capture`).
    fn pass_enter(&self, _p: &mut ReplayPayload<'_>) {}

    /// Backend work at PASS EXIT, before `verify`'s output digest.
    fn pass_exit(&self, _p: &ReplayPayload<'_>) {}

    /// Backend work at CONFIG EXIT, before the record is made.
    fn config_exit(&self, _p: &ReplayPayload<'_>) {}

    /// What the backend adds to a dispatch's record (the argument layout's source, the graph
    /// node), at CONFIG EXIT.
    fn annotate(&self, _p: &ReplayPayload<'_>, _record: &mut DispatchRecord) {}
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
    /// Where the argument block came from, where the backend knows (`driver`, `extra`,
    /// `image`, `unknown`).
    pub layout: Option<String>,
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
    /// verify: regions the application freed while the window ran (another thread's free):
    /// compared only while they were allocated.
    #[serde(skip_serializing_if = "is_zero")]
    pub freed_regions: u64,
    /// The executable graph this dispatch ran from (numbered from 1), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph: Option<u64>,
    /// Its node (the position in the order the graph was unrolled); absent for a whole graph
    /// profiled as one dispatch.
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

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Default)]
struct VerifyState {
    ranges: Vec<RegionRef>,
    first_in: Option<Vec<Option<Digest128>>>,
    first_out: Option<Vec<Option<Digest128>>>,
    /// Regions found freed by some digest.
    freed: Vec<bool>,
    inputs_ok: bool,
    outputs_ok: bool,
    differing: Vec<(u64, u64)>,
    failed: Option<ToolError>,
}

/// A built-in tool over a backend's [`ToolDevice`].
#[derive(Debug)]
pub struct BuiltinTool<D> {
    kind: ToolKind,
    passes: u64,
    device: D,
    verify: Mutex<HashMap<DispatchId, VerifyState>>,
    records: Mutex<Vec<DispatchRecord>>,
    watch: Option<crate::collective::ReplayTimeWatch>,
}

/// The key every `verify` digest uses (any fixed key: only equality across passes matters).
fn verify_key() -> DigestKey {
    replay_core::digest::key_from_seed(0x6b72)
}

impl<D: ToolDevice> BuiltinTool<D> {
    /// A tool of `kind` asking for `passes` passes, over `device`; in a process that is one
    /// rank of several, its replay time watched against the collective timeout in force
    /// ([`crate::collective::ReplayTimeWatch::from_env`]).
    pub fn new(kind: ToolKind, passes: u64, device: D) -> Self {
        Self {
            kind,
            passes,
            device,
            verify: Mutex::new(HashMap::new()),
            records: Mutex::new(Vec::new()),
            watch: crate::collective::ReplayTimeWatch::from_env(),
        }
    }

    /// The tool with `watch` in place of the one the environment gave (`None`: no watch).
    pub fn with_watch(mut self, watch: Option<crate::collective::ReplayTimeWatch>) -> Self {
        self.watch = watch;
        self
    }

    /// Which tool.
    pub fn kind(&self) -> ToolKind {
        self.kind
    }

    /// The passes it asks for.
    pub fn passes(&self) -> u64 {
        self.passes
    }

    /// The backend's side.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The records kept so far (none while they are streamed to a records file).
    pub fn records(&self) -> Vec<DispatchRecord> {
        self.records.lock().clone()
    }

    /// The report's members this crate owns: `tool`, `passes`, `kernels` (the per-kernel
    /// table of the records kept), `records`, and in a rank of several `collective_timeout`
    /// (the timeout in force, the replay time, the warnings given:
    /// [`crate::collective::ReplayTimeWatch::report`]). The backend adds its own beside them.
    pub fn report_members(&self) -> serde_json::Map<String, serde_json::Value> {
        let records = self.records();
        let mut m = serde_json::Map::new();
        m.insert("tool".into(), serde_json::json!(self.kind));
        m.insert("passes".into(), self.passes.into());
        if let Some(w) = &self.watch {
            m.insert("collective_timeout".into(), w.report());
        }
        m.insert("kernels".into(), serde_json::json!(kernel_rows(&records)));
        m.insert("records".into(), serde_json::json!(records));
        m
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
            st.ranges = self.device.verify_regions(info.agent);
        }
        let ranges = st.ranges.clone();
        drop(v);
        // Digested outside the lock: another window's tool calls may run meanwhile.
        let d = self.device.digest(info.agent, &ranges, verify_key());
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
        st.freed.resize(d.len(), false);
        for (f, x) in st.freed.iter_mut().zip(&d) {
            *f |= x.is_none();
        }
        match first {
            None => *first = Some(d),
            Some(f) => {
                // A region freed meanwhile (`None` on either side) is not compared.
                for (i, (a, b)) in f.iter().zip(&d).enumerate() {
                    if let (Some(a), Some(b)) = (a, b) {
                        if a != b {
                            *ok = false;
                            let r = (ranges[i].base, ranges[i].size);
                            if !st.differing.contains(&r) {
                                st.differing.push(r);
                            }
                        }
                    }
                }
            }
        }
    }

    fn config_exit(&self, p: &ReplayPayload<'_>) {
        self.device.config_exit(p);
        let Some(o) = p.outcome else { return };
        if let Some(w) = &self.watch {
            for line in w.observe(o.dispatch_id.0, &o.kernel, o.phases.window) {
                log::warn!("[kernel-replay] warning: {line}");
            }
        }
        let v = self.verify.lock().remove(&o.dispatch_id);
        let (inputs, outputs, differing, digested, freed) = match v {
            Some(v) if v.failed.is_none() && v.first_in.is_some() => (
                Some(v.inputs_ok),
                Some(v.outputs_ok),
                v.differing,
                v.ranges.iter().map(|r| r.size).sum(),
                v.freed.iter().filter(|&&f| f).count() as u64,
            ),
            Some(v) => {
                if let Some(e) = v.failed {
                    log::warn!("[kernel-replay] verify: digest failed: {e}");
                }
                (None, None, Vec::new(), 0, 0)
            }
            None => (None, None, Vec::new(), 0, 0),
        };
        let mut record = DispatchRecord {
            dispatch_id: o.dispatch_id.0,
            kernel: o.kernel.clone(),
            outcome: o.outcome.as_str().to_string(),
            reason: o.reason.as_str().to_string(),
            scope: format!("{:?}", o.scope).to_ascii_lowercase(),
            layout: None,
            executed_passes: o.executed_passes,
            pass_gpu_seconds: o.pass_gpu_seconds.to_vec(),
            captured_bytes: o.captured_bytes,
            inputs_identical: inputs,
            outputs_identical: outputs,
            differing_regions: differing,
            digested_bytes: digested,
            freed_regions: freed,
            graph: None,
            node: None,
            graph_launch: None,
            graph_serialized: None,
            phases: o.phases,
            pass_launch_seconds: o.pass_launch_seconds.to_vec(),
            pass_wait_seconds: o.pass_wait_seconds.to_vec(),
        };
        self.device.annotate(p, &mut record);
        // Under `kreplay run` each record goes to disk as it is made and is not kept.
        if !crate::job::stream_record(record.dispatch_id, &record) {
            self.records.lock().push(record);
        }
    }
}

impl<D: ToolDevice> ReplayTool for BuiltinTool<D> {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                let n = self.passes;
                p.replay_pass_count = Some(Arc::new(move |_, _| n));
            }
            (Operation::Pass, Phase::Enter) => {
                self.device.pass_enter(p);
                if self.kind == ToolKind::Verify {
                    self.pass_digest(p, false);
                }
            }
            (Operation::Pass, Phase::Exit) => {
                self.device.pass_exit(p);
                if self.kind == ToolKind::Verify {
                    self.pass_digest(p, true);
                }
            }
            (Operation::Config, Phase::Exit) => self.config_exit(p),
        }
    }
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

/// The per-kernel table of `records`.
pub fn kernel_rows(records: &[DispatchRecord]) -> BTreeMap<String, KernelRow> {
    let mut kernels: BTreeMap<String, KernelRow> = BTreeMap::new();
    for r in records {
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
    kernels
}
