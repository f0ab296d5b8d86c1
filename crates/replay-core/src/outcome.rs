//! Outcome records and the run summary (SPEC §8).
//!
//! Every candidate dispatch produces one [`OutcomeRecord`]: logged as one
//! `[kernel-replay] key=value ...` line through the `log` facade (target `kernel_replay`),
//! handed to the tool in CONFIG EXIT, and serialisable as JSON.
//!
//! `scope` and `restore` name what ran, never `auto`, once the window planned a snapshot;
//! `scope_auto` and `restore_auto` say that the policy's `auto` chose them (JSON
//! `true`/`false`, `1`/`0` in the line). A dispatch that never got that far (not requested,
//! declined by a CONFIG-time callback, tool work) carries the policy's values as they are,
//! `auto` included, with both flags false. The summary
//! counts the windows that ran passes by `scope+restore` (`ran`), and how many of them `auto`
//! chose in part or in full (`ran_auto`).
//!
//! Scope `predicted` adds four fields, in JSON and at the end of the line:
//! `predicted_bytes` (bytes captured because the prediction named them, inside the large
//! regions it predicts; the rest of `captured_bytes` is whole small regions and module
//! variables), `prediction_misses` (digest chunks the scope check found written outside the
//! prediction: non-zero means the dispatch truncated `write_outside_scope` and the kernel's
//! prediction grew by those chunks), `predict_source` (how the chunks were chosen: `none`,
//! `first_rule`, `learned`) and `predict_fallback` (why scope `predicted` planned a region
//! scope instead: `none`, `fits_device`, `small_regions`, `repeated_misses`,
//! `unknown_layout`). The summary counts the windows that ran `predicted` (`predicted`),
//! their predicted bytes, the windows with a miss (`prediction_misses`) and the fallbacks by
//! reason (`predict_fallback`).
//!
//! Every record has the window's time by phase (`phases`, [`crate::phases`]), and a dispatch
//! the backend ran as a node of a graph (a CUDA graph unrolled node by node) names it
//! (`graph`, a [`GraphNode`]: graph, node, graph launch; absent in JSON otherwise), where
//! its agent names it through [`crate::Agent::graph_node`] when the window opens (the
//! simulator does; the CUDA interception keeps its node tag on the running thread, which its
//! built-in tools, its counter collection and the C ABI's outcome views read).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::phases::PhaseSeconds;
use crate::policy::{OutsideCheck, RestoreMode, Scope};
use crate::types::Tier;
use crate::types::{AgentId, DispatchId};

/// How a candidate dispatch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every planned pass ran.
    Replayed,
    /// Ran once, unreplayed, for a reason.
    Declined,
    /// The loop stopped early, safely.
    Truncated,
    /// The tool asked for no replay.
    NotRequested,
}

impl Outcome {
    /// Name in logs and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Replayed => "replayed",
            Self::Declined => "declined",
            Self::Truncated => "truncated",
            Self::NotRequested => "not_requested",
        }
    }
}

/// Why a dispatch was declined or truncated (SPEC §8), plus two the core adds where a backend
/// call fails in a way the SPEC list does not name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Replayed in full, or not requested.
    None,
    /// The scope reaches memory the snapshot cannot cover.
    UntrackedMemory,
    /// The planned snapshot exceeds the budget.
    FootprintBudget,
    /// The capture failed.
    SnapshotFailed,
    /// The dispatch's queue did not drain in time.
    QueueDrainStuck,
    /// The agent's queues did not drain in time, or a write to the agent's memory that checked
    /// the gate before the window opened did not finish its submission in time.
    AgentDrainStuck,
    /// In-flight asynchronous copies did not finish in time.
    CopyFenceStuck,
    /// Tool work launched from inside a callback.
    ReentrantDispatch,
    /// A callback panicked or broke the contract.
    CallbackFailed,
    /// A pass did not complete in time.
    PassDrainStuck,
    /// An open-ended loop reached `max_passes`.
    PassLimit,
    /// The kernel wrote outside its snapshot scope.
    WriteOutsideScope,
    /// The backend refused to submit a pass (before the first pass: declined; the ordinary run
    /// then executes instead), or a pass's submission failed after it reached the device
    /// (`truncated`: that pass counts as executed, first pass included, and nothing is
    /// submitted again).
    SubmitFailed,
    /// The after-pass scope check could not be made, so no further pass is risked.
    ScopeCheckFailed,
    /// The device reported an error (not a timeout) for a drain, a pass, the wait on it, or a
    /// restore: a fault in the kernel, or a context-wide (sticky) error. Nothing more is
    /// submitted or restored; where the context is lost the application gets the driver's
    /// error from its own next call, as it would without the library.
    DeviceError,
    /// Another window held the agent when the dispatch arrived, and where the backend resumed
    /// it no window can run (HSA: the runtime's async-events thread): it ran once. Nothing
    /// was stuck.
    AgentBusy,
    /// The kernel writes memory no snapshot can see (a CUDA array through a surface object,
    /// the device-side heap, device `printf`, a device-side graph launch, a tensor map whose
    /// target the scope does not cover), so a replay would leave N executions' effects.
    UnseenWrites,
}

impl Reason {
    /// Name in logs and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::UntrackedMemory => "untracked_memory",
            Self::FootprintBudget => "footprint_budget",
            Self::SnapshotFailed => "snapshot_failed",
            Self::QueueDrainStuck => "queue_drain_stuck",
            Self::AgentDrainStuck => "agent_drain_stuck",
            Self::CopyFenceStuck => "copy_fence_stuck",
            Self::ReentrantDispatch => "reentrant_dispatch",
            Self::CallbackFailed => "callback_failed",
            Self::PassDrainStuck => "pass_drain_stuck",
            Self::PassLimit => "pass_limit",
            Self::WriteOutsideScope => "write_outside_scope",
            Self::SubmitFailed => "submit_failed",
            Self::ScopeCheckFailed => "scope_check_failed",
            Self::DeviceError => "device_error",
            Self::AgentBusy => "agent_busy",
            Self::UnseenWrites => "unseen_writes",
        }
    }
}

/// How scope `predicted` chose the chunks it captured.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PredictSource {
    /// No prediction: the scope was not `predicted`, or it planned a region scope.
    #[default]
    None,
    /// The kernel was seen for the first time (or forgotten): a window of chunks at each
    /// argument pointer into a large region.
    FirstRule,
    /// From the chunks the kernel's earlier dispatches wrote, relative to its argument
    /// pointers.
    Learned,
}

impl PredictSource {
    /// Name in logs and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::FirstRule => "first_rule",
            Self::Learned => "learned",
        }
    }
}

/// Why scope `predicted` planned a region scope (`arguments` or `all`) for a dispatch
/// instead of predicted chunks.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PredictFallback {
    /// It did not fall back (or the scope was not `predicted`).
    #[default]
    None,
    /// Policy `predict=spill`: the regions the arguments reach fit the device tier whole, so
    /// it planned `arguments`.
    FitsDevice,
    /// No region the arguments reach is large enough to predict (128 digest chunks): it
    /// planned `arguments`.
    SmallRegions,
    /// The kernel wrote outside its prediction too often: it plans `arguments` from now on
    /// (`all` when it wrote where no argument points), until its code object is unloaded.
    RepeatedMisses,
    /// The argument block's layout is unknown, so there are no pointers to predict from:
    /// it planned `all`.
    UnknownLayout,
}

impl PredictFallback {
    /// Name in logs and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::FitsDevice => "fits_device",
            Self::SmallRegions => "small_regions",
            Self::RepeatedMisses => "repeated_misses",
            Self::UnknownLayout => "unknown_layout",
        }
    }
}

/// Bytes per snapshot tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TierBytes {
    /// Device tier.
    pub device: u64,
    /// Pinned-host tier.
    pub pinned: u64,
    /// Pageable-host tier.
    pub pageable: u64,
}

impl TierBytes {
    /// Adds `bytes` to `tier`.
    pub fn add(&mut self, tier: Tier, bytes: u64) {
        match tier {
            Tier::Device => self.device += bytes,
            Tier::PinnedHost => self.pinned += bytes,
            Tier::PageableHost => self.pageable += bytes,
        }
    }
    /// Sum over tiers.
    pub fn total(&self) -> u64 {
        self.device + self.pinned + self.pageable
    }
}

/// The graph node a dispatch ran as (a CUDA graph launched node by node), as its backend
/// names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GraphNode {
    /// The executable graph, numbered from 1 per process in instantiation order.
    pub graph: u64,
    /// The node: its position in the order the graph is unrolled (stable across launches);
    /// `None` for a whole graph profiled as one workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// Which launch of that graph, from 0.
    pub launch: u64,
    /// Branches of the graph that could have run concurrently ran one after another.
    #[serde(default)]
    pub serialized: bool,
}

/// One candidate dispatch's outcome (SPEC §8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutcomeRecord {
    /// Reserved dispatch id.
    pub dispatch_id: DispatchId,
    /// Agent.
    pub agent: AgentId,
    /// Kernel name.
    pub kernel: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Why (`none` when replayed in full).
    pub reason: Reason,
    /// Passes the tool asked for (0 = open-ended).
    pub requested_passes: u64,
    /// Passes that ran.
    pub executed_passes: u32,
    /// Scope that ran (what `auto` resolved to, when the policy said `auto`).
    pub scope: Scope,
    /// Restore mode that ran (likewise).
    pub restore: RestoreMode,
    /// The policy's scope was `auto`, which chose `scope`.
    #[serde(default)]
    pub scope_auto: bool,
    /// The policy's restore mode was `auto`, which chose `restore`.
    #[serde(default)]
    pub restore_auto: bool,
    /// All tracked bytes of the agent.
    pub tracked_bytes: u64,
    /// Bytes captured.
    pub captured_bytes: u64,
    /// Regions captured.
    pub captured_regions: u32,
    /// Captured bytes per tier.
    pub tier_bytes: TierBytes,
    /// Untracked bytes (virtual-memory mappings included).
    pub untracked_bytes: u64,
    /// Untracked regions (virtual-memory mappings included).
    pub untracked_regions: u32,
    /// Time to capture.
    pub snap_seconds: f64,
    /// Time restoring, over the window (restores ordered on the device: the host's time to
    /// enqueue them, their copies run inside the passes' waits).
    pub restore_seconds: f64,
    /// Bytes compared by digest, over the window.
    pub compared_bytes: u64,
    /// Bytes restored, over the window.
    pub restored_bytes: u64,
    /// GPU time of each executed pass.
    pub pass_gpu_seconds: SmallVec<[f64; 8]>,
    /// Bytes restored before each pass (0 before the first).
    pub pass_restored_bytes: SmallVec<[u64; 8]>,
    /// Bytes compared by digest before each pass (0 before the first, and for `full`).
    pub pass_compared_bytes: SmallVec<[u64; 8]>,
    /// 1 for tool work launched from inside a callback.
    pub reentrancy: u8,
    /// Scope `predicted`: bytes captured because the prediction named them.
    #[serde(default)]
    pub predicted_bytes: u64,
    /// Scope `predicted`: chunks found written outside the prediction (the dispatch then
    /// truncated `write_outside_scope`).
    #[serde(default)]
    pub prediction_misses: u32,
    /// How the predicted chunks were chosen.
    #[serde(default)]
    pub predict_source: PredictSource,
    /// Why scope `predicted` planned a region scope instead.
    #[serde(default)]
    pub predict_fallback: PredictFallback,
    /// Where the window's time went, by phase ([`crate::phases`]).
    #[serde(default)]
    pub phases: PhaseSeconds,
    /// Each executed pass's launch (cache flush and submission), seconds on the window's clock.
    #[serde(default)]
    pub pass_launch_seconds: SmallVec<[f64; 8]>,
    /// Each completed pass's wait, seconds on the window's clock.
    #[serde(default)]
    pub pass_wait_seconds: SmallVec<[f64; 8]>,
    /// The graph node the dispatch ran as, if the backend ran it from a graph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphNode>,
    /// When the scope check read the memory outside the snapshot (the policy's
    /// `outside_check`): anything but `every` is an opt-in trade the record names.
    #[serde(default)]
    pub outside_check: OutsideCheck,
}

impl OutcomeRecord {
    /// A record with nothing done yet.
    pub fn new(dispatch_id: DispatchId, agent: AgentId, kernel: &str) -> Self {
        Self {
            dispatch_id,
            agent,
            kernel: kernel.to_owned(),
            outcome: Outcome::NotRequested,
            reason: Reason::None,
            requested_passes: 0,
            executed_passes: 0,
            scope: Scope::All,
            restore: RestoreMode::Full,
            scope_auto: false,
            restore_auto: false,
            tracked_bytes: 0,
            captured_bytes: 0,
            captured_regions: 0,
            tier_bytes: TierBytes::default(),
            untracked_bytes: 0,
            untracked_regions: 0,
            snap_seconds: 0.0,
            restore_seconds: 0.0,
            compared_bytes: 0,
            restored_bytes: 0,
            pass_gpu_seconds: SmallVec::new(),
            pass_restored_bytes: SmallVec::new(),
            pass_compared_bytes: SmallVec::new(),
            reentrancy: 0,
            predicted_bytes: 0,
            prediction_misses: 0,
            predict_source: PredictSource::None,
            predict_fallback: PredictFallback::None,
            phases: PhaseSeconds::default(),
            pass_launch_seconds: SmallVec::new(),
            pass_wait_seconds: SmallVec::new(),
            graph: None,
            outside_check: OutsideCheck::Every,
        }
    }

    /// JSON text of the record.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("outcome records always serialise")
    }
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    let parts: Vec<String> = items.iter().map(|x| x.to_string()).collect();
    parts.join(",")
}

impl fmt::Display for OutcomeRecord {
    /// The one-line form: `[kernel-replay] dispatch_id=... outcome=... ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs: Vec<String> = self
            .pass_gpu_seconds
            .iter()
            .map(|s| format!("{s:.6}"))
            .collect();
        write!(
            f,
            "[kernel-replay] dispatch_id={} agent={} kernel={:?} outcome={} reason={} \
             requested_passes={} executed_passes={} scope={} scope_auto={} restore={} \
             restore_auto={} tracked_bytes={} \
             captured_bytes={} captured_regions={} tier_bytes=device:{},pinned:{},pageable:{} \
             untracked_bytes={} untracked_regions={} snap_seconds={:.6} restore_seconds={:.6} \
             compared_bytes={} restored_bytes={} pass_gpu_seconds={} pass_restored_bytes={} \
             pass_compared_bytes={} reentrancy={} predicted_bytes={} prediction_misses={} \
             predict_source={} predict_fallback={}",
            self.dispatch_id,
            self.agent,
            self.kernel,
            self.outcome.as_str(),
            self.reason.as_str(),
            self.requested_passes,
            self.executed_passes,
            self.scope.as_str(),
            u8::from(self.scope_auto),
            self.restore.as_str(),
            u8::from(self.restore_auto),
            self.tracked_bytes,
            self.captured_bytes,
            self.captured_regions,
            self.tier_bytes.device,
            self.tier_bytes.pinned,
            self.tier_bytes.pageable,
            self.untracked_bytes,
            self.untracked_regions,
            self.snap_seconds,
            self.restore_seconds,
            self.compared_bytes,
            self.restored_bytes,
            secs.join(","),
            join(&self.pass_restored_bytes),
            join(&self.pass_compared_bytes),
            self.reentrancy,
            self.predicted_bytes,
            self.prediction_misses,
            self.predict_source.as_str(),
            self.predict_fallback.as_str(),
        )?;
        // Named only when it is not the strict default, so the line says the trade.
        if self.outside_check != OutsideCheck::Every {
            write!(f, " outside_check={}", self.outside_check.as_str())?;
        }
        Ok(())
    }
}

/// Aggregate over a run (SPEC §8).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunSummary {
    /// Candidate dispatches seen (tool work included).
    pub dispatches: u64,
    /// Replayed in full.
    pub replayed: u64,
    /// Declined, by reason.
    pub declined: BTreeMap<String, u64>,
    /// Truncated, by reason.
    pub truncated: BTreeMap<String, u64>,
    /// Not requested by the tool.
    pub not_requested: u64,
    /// Passes executed.
    pub passes: u64,
    /// Bytes captured.
    pub captured_bytes: u64,
    /// Bytes compared.
    pub compared_bytes: u64,
    /// Bytes restored.
    pub restored_bytes: u64,
    /// Peak bytes in backing and staging pools.
    pub peak_pooled_bytes: u64,
    /// Time spent in replay windows (snapshot, passes, restores).
    pub replay_seconds: f64,
    /// Windows that ran passes (replayed or truncated), by what ran: `scope+restore`, such as
    /// `arguments+dirty`.
    #[serde(default)]
    pub ran: BTreeMap<String, u64>,
    /// Of those, the windows whose scope or restore mode `auto` chose.
    #[serde(default)]
    pub ran_auto: u64,
    /// Windows that ran passes under scope `predicted`.
    #[serde(default)]
    pub predicted: u64,
    /// Bytes they captured because the prediction named them.
    #[serde(default)]
    pub predicted_bytes: u64,
    /// Windows that found a write outside their prediction (and truncated).
    #[serde(default)]
    pub prediction_misses: u64,
    /// Dispatches whose scope `predicted` planned a region scope, by reason.
    #[serde(default)]
    pub predict_fallback: BTreeMap<String, u64>,
    /// The windows' time by phase, summed over every record; `phases.window` is
    /// `replay_seconds` where every window was timed by the service's own records.
    #[serde(default)]
    pub phases: PhaseSeconds,
}

impl RunSummary {
    /// Adds one record; `window_seconds` is the time the window held the agent. Counts
    /// saturate at `u64::MAX` (byte totals of a long run can get there), never wrap.
    pub fn add(&mut self, r: &OutcomeRecord, window_seconds: f64) {
        fn bump(n: &mut u64, by: u64) {
            *n = n.saturating_add(by);
        }
        bump(&mut self.dispatches, 1);
        match r.outcome {
            Outcome::Replayed => bump(&mut self.replayed, 1),
            Outcome::Declined => bump(
                self.declined.entry(r.reason.as_str().into()).or_default(),
                1,
            ),
            Outcome::Truncated => bump(
                self.truncated.entry(r.reason.as_str().into()).or_default(),
                1,
            ),
            Outcome::NotRequested => bump(&mut self.not_requested, 1),
        }
        if matches!(r.outcome, Outcome::Replayed | Outcome::Truncated) {
            let key = format!("{}+{}", r.scope.as_str(), r.restore.as_str());
            bump(self.ran.entry(key).or_default(), 1);
            if r.scope_auto || r.restore_auto {
                bump(&mut self.ran_auto, 1);
            }
            if r.scope == Scope::Predicted {
                bump(&mut self.predicted, 1);
                bump(&mut self.predicted_bytes, r.predicted_bytes);
                if r.prediction_misses > 0 {
                    bump(&mut self.prediction_misses, 1);
                }
            }
        }
        if r.predict_fallback != PredictFallback::None {
            bump(
                self.predict_fallback
                    .entry(r.predict_fallback.as_str().into())
                    .or_default(),
                1,
            );
        }
        bump(&mut self.passes, u64::from(r.executed_passes));
        bump(&mut self.captured_bytes, r.captured_bytes);
        bump(&mut self.compared_bytes, r.compared_bytes);
        bump(&mut self.restored_bytes, r.restored_bytes);
        self.replay_seconds += window_seconds;
        self.phases.add(&r.phases);
    }

    /// Declines of all reasons (saturating).
    pub fn declined_total(&self) -> u64 {
        self.declined.values().fold(0, |a, n| a.saturating_add(*n))
    }

    /// Truncations of all reasons (saturating).
    pub fn truncated_total(&self) -> u64 {
        self.truncated.values().fold(0, |a, n| a.saturating_add(*n))
    }
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let by = |m: &BTreeMap<String, u64>| {
            if m.is_empty() {
                "-".to_owned()
            } else {
                m.iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            }
        };
        write!(
            f,
            "[kernel-replay] summary dispatches={} replayed={} declined={} ({}) truncated={} ({}) \
             not_requested={} passes={} captured_bytes={} compared_bytes={} restored_bytes={} \
             peak_pooled_bytes={} ran={} ran_auto={} predicted={} predicted_bytes={} \
             prediction_misses={} predict_fallback={} replay_seconds={:.6}",
            self.dispatches,
            self.replayed,
            self.declined_total(),
            by(&self.declined),
            self.truncated_total(),
            by(&self.truncated),
            self.not_requested,
            self.passes,
            self.captured_bytes,
            self.compared_bytes,
            self.restored_bytes,
            self.peak_pooled_bytes,
            by(&self.ran),
            self.ran_auto,
            self.predicted,
            self.predicted_bytes,
            self.prediction_misses,
            by(&self.predict_fallback),
            self.replay_seconds,
        )
    }
}
