//! The raw layer of the C ABI (SPEC §10): `#[repr(C)]` types and constants, named and laid out exactly as in
//! `include/kernel_replay.h`. Nothing here has behaviour.
//!
//! Fields that carry enumeration values are plain integers, never Rust enums: C may store any
//! value there, and an out-of-range discriminant in a Rust enum would be undefined behaviour.
//! Function pointers are `Option<...>` so that NULL is a valid, checked value.
//!
//! The layout table (the `abi` module) exports the sizes, offsets and values below so C and C++
//! builds check the header against them.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};

// ----- Version -----------------------------------------------------------------------------

/// Header version, major (the header's `KREPLAY_VERSION_MAJOR`).
pub const KREPLAY_VERSION_MAJOR: u32 = 0;
/// Header version, minor.
pub const KREPLAY_VERSION_MINOR: u32 = 1;
/// Header version, patch.
pub const KREPLAY_VERSION_PATCH: u32 = 0;

// ----- Status codes ------------------------------------------------------------------------

/// `kreplay_status_t`.
pub type kreplay_status_t = i32;

/// Success.
pub const KREPLAY_STATUS_OK: kreplay_status_t = 0;
/// A required pointer was NULL.
pub const KREPLAY_STATUS_NULL_POINTER: kreplay_status_t = 1;
/// A struct's `size` is below its first version.
pub const KREPLAY_STATUS_BAD_SIZE: kreplay_status_t = 2;
/// An enumeration or flag value out of range.
pub const KREPLAY_STATUS_BAD_ENUM: kreplay_status_t = 3;
/// An unknown or stale handle (or a dead outcome pointer).
pub const KREPLAY_STATUS_INVALID_HANDLE: kreplay_status_t = 4;
/// The replay service has its one owner already.
pub const KREPLAY_STATUS_ALREADY_CONFIGURED: kreplay_status_t = 5;
/// The replay service has no owner yet.
pub const KREPLAY_STATUS_NOT_CONFIGURED: kreplay_status_t = 6;
/// Not allowed from inside a library callback.
pub const KREPLAY_STATUS_IN_CALLBACK: kreplay_status_t = 7;
/// A toggle outside PASS ENTER of an active loop.
pub const KREPLAY_STATUS_CONTEXT_ERROR: kreplay_status_t = 8;
/// A local start of a context not active when the loop began.
pub const KREPLAY_STATUS_CONTEXT_NOT_STARTED: kreplay_status_t = 9;
/// A toggle on a context whose participant cannot honour overrides.
pub const KREPLAY_STATUS_UNSUPPORTED: kreplay_status_t = 10;
/// A rejected policy variable or filter.
pub const KREPLAY_STATUS_POLICY_ERROR: kreplay_status_t = 11;
/// A caught panic.
pub const KREPLAY_STATUS_INTERNAL: kreplay_status_t = 12;
/// After `kreplay_shutdown`.
pub const KREPLAY_STATUS_SHUT_DOWN: kreplay_status_t = 13;
/// A malformed argument (not UTF-8, unknown name, count out of range).
pub const KREPLAY_STATUS_BAD_ARGUMENT: kreplay_status_t = 14;
/// The caller's buffer is too small.
pub const KREPLAY_STATUS_BUFFER_TOO_SMALL: kreplay_status_t = 15;
/// The thing to create exists already.
pub const KREPLAY_STATUS_ALREADY_EXISTS: kreplay_status_t = 16;
/// The simulated device reported an error.
pub const KREPLAY_STATUS_DEVICE_ERROR: kreplay_status_t = 17;
/// The simulated device is out of memory.
pub const KREPLAY_STATUS_OUT_OF_MEMORY: kreplay_status_t = 18;
/// Nothing of that name or id exists.
pub const KREPLAY_STATUS_NOT_FOUND: kreplay_status_t = 19;

// ----- Enumerations ------------------------------------------------------------------------

/// `kreplay_operation_t`.
pub type kreplay_operation_t = u32;
/// No operation (never passed to a callback).
pub const KREPLAY_OPERATION_NONE: kreplay_operation_t = 0;
/// CONFIG.
pub const KREPLAY_OPERATION_CONFIG: kreplay_operation_t = 1;
/// PASS.
pub const KREPLAY_OPERATION_PASS: kreplay_operation_t = 2;
/// One past the last operation.
pub const KREPLAY_OPERATION_LAST: kreplay_operation_t = 3;

/// `kreplay_phase_t`.
pub type kreplay_phase_t = u32;
/// No phase (never passed to a callback).
pub const KREPLAY_PHASE_NONE: kreplay_phase_t = 0;
/// ENTER.
pub const KREPLAY_PHASE_ENTER: kreplay_phase_t = 1;
/// EXIT.
pub const KREPLAY_PHASE_EXIT: kreplay_phase_t = 2;

/// `kreplay_subscription_t` (bit flags).
pub type kreplay_subscription_t = u32;
/// CONFIG ENTER / EXIT.
pub const KREPLAY_SUBSCRIBE_CONFIG: kreplay_subscription_t = 1;
/// PASS ENTER / EXIT.
pub const KREPLAY_SUBSCRIBE_PASS: kreplay_subscription_t = 2;

/// `kreplay_outcome_kind_t`.
pub type kreplay_outcome_kind_t = u32;
/// Not an outcome.
pub const KREPLAY_OUTCOME_NONE: kreplay_outcome_kind_t = 0;
/// Every planned pass ran.
pub const KREPLAY_OUTCOME_REPLAYED: kreplay_outcome_kind_t = 1;
/// Ran once, unreplayed.
pub const KREPLAY_OUTCOME_DECLINED: kreplay_outcome_kind_t = 2;
/// Stopped early, safely.
pub const KREPLAY_OUTCOME_TRUNCATED: kreplay_outcome_kind_t = 3;
/// The tool asked for no replay.
pub const KREPLAY_OUTCOME_NOT_REQUESTED: kreplay_outcome_kind_t = 4;

/// `kreplay_reason_t`.
pub type kreplay_reason_t = u32;
/// `none`.
pub const KREPLAY_REASON_NONE: kreplay_reason_t = 0;
/// `untracked_memory`.
pub const KREPLAY_REASON_UNTRACKED_MEMORY: kreplay_reason_t = 1;
/// `footprint_budget`.
pub const KREPLAY_REASON_FOOTPRINT_BUDGET: kreplay_reason_t = 2;
/// `snapshot_failed`.
pub const KREPLAY_REASON_SNAPSHOT_FAILED: kreplay_reason_t = 3;
/// `queue_drain_stuck`.
pub const KREPLAY_REASON_QUEUE_DRAIN_STUCK: kreplay_reason_t = 4;
/// `agent_drain_stuck`.
pub const KREPLAY_REASON_AGENT_DRAIN_STUCK: kreplay_reason_t = 5;
/// `copy_fence_stuck`.
pub const KREPLAY_REASON_COPY_FENCE_STUCK: kreplay_reason_t = 6;
/// `reentrant_dispatch`.
pub const KREPLAY_REASON_REENTRANT_DISPATCH: kreplay_reason_t = 7;
/// `callback_failed`.
pub const KREPLAY_REASON_CALLBACK_FAILED: kreplay_reason_t = 8;
/// `pass_drain_stuck`.
pub const KREPLAY_REASON_PASS_DRAIN_STUCK: kreplay_reason_t = 9;
/// `pass_limit`.
pub const KREPLAY_REASON_PASS_LIMIT: kreplay_reason_t = 10;
/// `write_outside_scope`.
pub const KREPLAY_REASON_WRITE_OUTSIDE_SCOPE: kreplay_reason_t = 11;
/// `submit_failed`.
pub const KREPLAY_REASON_SUBMIT_FAILED: kreplay_reason_t = 12;
/// `scope_check_failed`.
pub const KREPLAY_REASON_SCOPE_CHECK_FAILED: kreplay_reason_t = 13;
/// `device_error`: a drain, pass or restore reported an error (not a timeout); a lost
/// context skips what is left of the restore.
pub const KREPLAY_REASON_DEVICE_ERROR: kreplay_reason_t = 14;
/// `agent_busy`: another window held the agent; resumed where no window can run.
pub const KREPLAY_REASON_AGENT_BUSY: kreplay_reason_t = 15;
/// `unseen_writes`.
pub const KREPLAY_REASON_UNSEEN_WRITES: kreplay_reason_t = 16;
/// Length of the per-reason arrays of [`kreplay_summary_t`].
pub const KREPLAY_REASON_CAPACITY: kreplay_reason_t = 32;

/// `kreplay_scope_t`.
pub type kreplay_scope_t = u32;
/// `all`.
pub const KREPLAY_SCOPE_ALL: kreplay_scope_t = 0;
/// `arguments`.
pub const KREPLAY_SCOPE_ARGUMENTS: kreplay_scope_t = 1;
/// `auto` (the policy default; never what an outcome names).
pub const KREPLAY_SCOPE_AUTO: kreplay_scope_t = 2;
/// `predicted` (chunks inside the regions the arguments reach).
pub const KREPLAY_SCOPE_PREDICTED: kreplay_scope_t = 3;

/// `kreplay_predict_source_t`.
pub type kreplay_predict_source_t = u32;
/// `none`.
pub const KREPLAY_PREDICT_SOURCE_NONE: kreplay_predict_source_t = 0;
/// `first_rule`.
pub const KREPLAY_PREDICT_SOURCE_FIRST_RULE: kreplay_predict_source_t = 1;
/// `learned`.
pub const KREPLAY_PREDICT_SOURCE_LEARNED: kreplay_predict_source_t = 2;

/// `kreplay_predict_fallback_t`.
pub type kreplay_predict_fallback_t = u32;
/// `none`.
pub const KREPLAY_PREDICT_FALLBACK_NONE: kreplay_predict_fallback_t = 0;
/// `fits_device`.
pub const KREPLAY_PREDICT_FALLBACK_FITS_DEVICE: kreplay_predict_fallback_t = 1;
/// `small_regions`.
pub const KREPLAY_PREDICT_FALLBACK_SMALL_REGIONS: kreplay_predict_fallback_t = 2;
/// `repeated_misses`.
pub const KREPLAY_PREDICT_FALLBACK_REPEATED_MISSES: kreplay_predict_fallback_t = 3;
/// `unknown_layout`.
pub const KREPLAY_PREDICT_FALLBACK_UNKNOWN_LAYOUT: kreplay_predict_fallback_t = 4;
/// `KREPLAY_PREDICT_FALLBACK_CAPACITY`.
pub const KREPLAY_PREDICT_FALLBACK_CAPACITY: kreplay_predict_fallback_t = 8;

/// `kreplay_restore_t`.
pub type kreplay_restore_t = u32;
/// `full`.
pub const KREPLAY_RESTORE_FULL: kreplay_restore_t = 0;
/// `dirty`.
pub const KREPLAY_RESTORE_DIRTY: kreplay_restore_t = 1;
/// `auto` (the policy default; never what an outcome names).
pub const KREPLAY_RESTORE_AUTO: kreplay_restore_t = 2;

/// `kreplay_override_support_t`.
pub type kreplay_override_support_t = u32;
/// The participant honours per-pass overrides.
pub const KREPLAY_OVERRIDES_HONOURED: kreplay_override_support_t = 0;
/// The participant cannot honour them.
pub const KREPLAY_OVERRIDES_UNSUPPORTED: kreplay_override_support_t = 1;

/// No local override.
pub const KREPLAY_OVERRIDE_NONE: i32 = -1;
/// Locally stopped.
pub const KREPLAY_OVERRIDE_STOPPED: i32 = 0;
/// Locally started.
pub const KREPLAY_OVERRIDE_STARTED: i32 = 1;

// ----- Basic types -------------------------------------------------------------------------

/// `kreplay_user_data_t`: a number or a pointer.
#[repr(C)]
#[derive(Clone, Copy)]
pub union kreplay_user_data_t {
    /// As a number.
    pub value: u64,
    /// As a pointer.
    pub ptr: *mut c_void,
}

impl std::fmt::Debug for kreplay_user_data_t {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SAFETY: every bit pattern of the union's 8 bytes is a valid u64; the library only
        // ever builds it from a u64 (`value`), so all 8 bytes are initialised.
        let v = unsafe { self.value };
        write!(f, "kreplay_user_data_t({v:#x})")
    }
}

/// `kreplay_context_t`: an opaque handle (slot in the low 32 bits, generation in the high).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct kreplay_context_t {
    /// The handle; 0 is never valid.
    pub handle: u64,
}

/// `kreplay_dim3_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct kreplay_dim3_t {
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// z.
    pub z: u32,
}

/// `kreplay_dispatch_info_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_dispatch_info_t {
    /// Size as built.
    pub size: u64,
    /// Agent.
    pub agent_id: u64,
    /// Queue.
    pub queue_id: u64,
    /// Reserved dispatch id.
    pub dispatch_id: u64,
    /// Kernel object.
    pub kernel_id: u64,
    /// NUL-terminated kernel name.
    pub kernel_name: *const c_char,
    /// Grid size.
    pub grid: kreplay_dim3_t,
    /// Workgroup size.
    pub workgroup: kreplay_dim3_t,
    /// Private segment bytes per work-item.
    pub private_segment_size: u32,
    /// Group segment bytes per workgroup.
    pub group_segment_size: u32,
}

// ----- Outcomes and the summary --------------------------------------------------------------

/// `kreplay_outcome_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_outcome_t {
    /// Size as built.
    pub size: u64,
    /// Reserved dispatch id.
    pub dispatch_id: u64,
    /// Agent.
    pub agent_id: u64,
    /// NUL-terminated kernel name.
    pub kernel: *const c_char,
    /// A `KREPLAY_OUTCOME_*` value.
    pub outcome: kreplay_outcome_kind_t,
    /// A `KREPLAY_REASON_*` value.
    pub reason: kreplay_reason_t,
    /// Passes asked for.
    pub requested_passes: u64,
    /// Passes that ran.
    pub executed_passes: u32,
    /// A `KREPLAY_SCOPE_*` value.
    pub scope: kreplay_scope_t,
    /// A `KREPLAY_RESTORE_*` value.
    pub restore: kreplay_restore_t,
    /// Regions captured.
    pub captured_regions: u32,
    /// All tracked bytes of the agent.
    pub tracked_bytes: u64,
    /// Bytes captured.
    pub captured_bytes: u64,
    /// Device tier bytes.
    pub tier_device_bytes: u64,
    /// Pinned-host tier bytes.
    pub tier_pinned_bytes: u64,
    /// Pageable-host tier bytes.
    pub tier_pageable_bytes: u64,
    /// Untracked bytes.
    pub untracked_bytes: u64,
    /// Untracked regions.
    pub untracked_regions: u32,
    /// 1 for tool work.
    pub reentrancy: u32,
    /// Capture time.
    pub snap_seconds: f64,
    /// Restore time over the window.
    pub restore_seconds: f64,
    /// Bytes compared over the window.
    pub compared_bytes: u64,
    /// Bytes restored over the window.
    pub restored_bytes: u64,
    /// Per-pass GPU seconds.
    pub pass_gpu_seconds: *const f64,
    /// Their count.
    pub pass_gpu_seconds_count: u64,
    /// Per-pass restored bytes.
    pub pass_restored_bytes: *const u64,
    /// Their count.
    pub pass_restored_bytes_count: u64,
    /// Per-pass compared bytes (digested for `dirty` and the scope check).
    pub pass_compared_bytes: *const u64,
    /// Their count.
    pub pass_compared_bytes_count: u64,
    /// Bytes captured because scope `predicted`'s prediction named them.
    pub predicted_bytes: u64,
    /// Chunks found written outside the prediction.
    pub prediction_misses: u32,
    /// A `KREPLAY_PREDICT_SOURCE_*` value.
    pub predict_source: kreplay_predict_source_t,
    /// A `KREPLAY_PREDICT_FALLBACK_*` value.
    pub predict_fallback: kreplay_predict_fallback_t,
    /// Zero (no tail padding).
    pub reserved0: u32,
}

/// `kreplay_summary_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_summary_t {
    /// Size set by the caller.
    pub size: u64,
    /// Candidate dispatches seen.
    pub dispatches: u64,
    /// Replayed in full.
    pub replayed: u64,
    /// Declined, all reasons.
    pub declined: u64,
    /// Truncated, all reasons.
    pub truncated: u64,
    /// Not requested.
    pub not_requested: u64,
    /// Passes executed.
    pub passes: u64,
    /// Bytes captured.
    pub captured_bytes: u64,
    /// Bytes compared.
    pub compared_bytes: u64,
    /// Bytes restored.
    pub restored_bytes: u64,
    /// Peak pooled bytes.
    pub peak_pooled_bytes: u64,
    /// Time in replay windows.
    pub replay_seconds: f64,
    /// Declines by reason.
    pub declined_by_reason: [u64; KREPLAY_REASON_CAPACITY as usize],
    /// Truncations by reason.
    pub truncated_by_reason: [u64; KREPLAY_REASON_CAPACITY as usize],
    /// Windows under scope `predicted` (second version).
    pub predicted: u64,
    /// Bytes captured because the prediction named them.
    pub predicted_bytes: u64,
    /// Windows with a write outside their prediction.
    pub prediction_misses: u64,
    /// Region-scope fallbacks of scope `predicted`, by `kreplay_predict_fallback_t`.
    pub predict_fallback_by_reason: [u64; KREPLAY_PREDICT_FALLBACK_CAPACITY as usize],
}

/// `kreplay_phases_t`: a window's time by phase, in seconds on the window's clock.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_phases_t {
    /// Size set by the caller.
    pub size: u64,
    /// The whole window (the sum of drain to finish).
    pub window: f64,
    /// Drains before the passes.
    pub drain: f64,
    /// `auto`, the snapshot plan and admission.
    pub plan: f64,
    /// The snapshot's capture.
    pub capture: f64,
    /// Every pass's cache flush and submission.
    pub launch: f64,
    /// Every pass's wait.
    pub wait: f64,
    /// Scope checks.
    pub check: f64,
    /// Restores.
    pub restore: f64,
    /// The tool's callbacks inside the window.
    pub callbacks: f64,
    /// Snapshot release, the completion signal, a declined dispatch's ordinary run.
    pub finish: f64,
    /// CONFIG ENTER and the pass-count callback, before the window (not in `window`).
    pub config_enter: f64,
}

/// `node` of a `kreplay_graph_node_t` for a whole graph profiled as one workload.
pub const KREPLAY_GRAPH_NODE_NONE: u32 = u32::MAX;

/// `kreplay_graph_node_t`: the graph node a dispatch ran as.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_graph_node_t {
    /// Size set by the caller.
    pub size: u64,
    /// The executable graph, numbered from 1.
    pub graph: u64,
    /// Which launch of it, from 0.
    pub launch: u64,
    /// The node's position in the unrolled order, or `KREPLAY_GRAPH_NODE_NONE`.
    pub node: u32,
    /// 1 when the graph's independent branches ran one after another.
    pub serialized: u32,
}

// ----- The replay contract -----------------------------------------------------------------

/// `kreplay_pass_count_callback_t`.
pub type kreplay_pass_count_callback_t = Option<
    unsafe extern "C" fn(
        dispatch_info: *const kreplay_dispatch_info_t,
        user_data: kreplay_user_data_t,
    ) -> u64,
>;

/// `kreplay_continue_callback_t`.
pub type kreplay_continue_callback_t = Option<
    unsafe extern "C" fn(
        dispatch_info: *const kreplay_dispatch_info_t,
        current_pass: u32,
        total_passes: u32,
        user_data: kreplay_user_data_t,
    ) -> i32,
>;

/// `kreplay_context_toggle_t`.
pub type kreplay_context_toggle_t =
    Option<unsafe extern "C" fn(context: kreplay_context_t) -> kreplay_status_t>;

/// `kreplay_replay_payload_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_replay_payload_t {
    /// Size as built.
    pub size: u64,
    /// The dispatch.
    pub dispatch_info: *const kreplay_dispatch_info_t,
    /// 0-based pass.
    pub current_pass: u32,
    /// N after clamping, 0 for open-ended.
    pub total_passes: u32,
    /// Written by the tool in CONFIG ENTER.
    pub replay_pass_count: kreplay_pass_count_callback_t,
    /// Written by the tool in CONFIG ENTER; shown and replaceable in PASS EXIT.
    pub replay_continue: kreplay_continue_callback_t,
    /// Local start toggle.
    pub replay_start_context: kreplay_context_toggle_t,
    /// Local stop toggle.
    pub replay_stop_context: kreplay_context_toggle_t,
    /// The outcome, in CONFIG EXIT only.
    pub outcome: *const kreplay_outcome_t,
}

/// `kreplay_replay_callback_t`.
pub type kreplay_replay_callback_t = Option<
    unsafe extern "C" fn(
        operation: kreplay_operation_t,
        phase: kreplay_phase_t,
        payload: *mut kreplay_replay_payload_t,
        user_data: *mut kreplay_user_data_t,
        callback_data: *mut c_void,
    ),
>;

/// `kreplay_outcome_sink_t`.
pub type kreplay_outcome_sink_t =
    Option<unsafe extern "C" fn(outcome: *const kreplay_outcome_t, data: *mut c_void)>;

// ----- Capture (SPEC §13) ------------------------------------------------------------------

/// `kreplay_capture_state_t`: what became of a capture asked for in PASS ENTER.
pub type kreplay_capture_state_t = u32;
/// Not a state (never reported).
pub const KREPLAY_CAPTURE_NONE: kreplay_capture_state_t = 0;
/// Asked for; the captured pass has not ended yet.
pub const KREPLAY_CAPTURE_PENDING: kreplay_capture_state_t = 1;
/// The folder is written, complete.
pub const KREPLAY_CAPTURE_WRITTEN: kreplay_capture_state_t = 2;
/// The window made no capture.
pub const KREPLAY_CAPTURE_REFUSED: kreplay_capture_state_t = 3;
/// Made, but the folder could not be written.
pub const KREPLAY_CAPTURE_WRITE_FAILED: kreplay_capture_state_t = 4;

/// `kreplay_capture_result_t`: what became of the capture asked for into one folder.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_capture_result_t {
    /// Size set by the caller.
    pub size: u64,
    /// The dispatch the request was made in.
    pub dispatch_id: u64,
    /// The byte bound in force.
    pub max_bytes: u64,
    /// Bytes of the captured regions (each's inputs; the outputs are as many again).
    pub captured_bytes: u64,
    /// A `KREPLAY_CAPTURE_*` value.
    pub state: kreplay_capture_state_t,
    /// The pass the request was made in (the one captured).
    pub pass: u32,
    /// Regions in the folder.
    pub region_count: u32,
    /// Zero.
    pub reserved0: u32,
}

// ----- Policy ------------------------------------------------------------------------------

/// `kreplay_kernel_filter_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_kernel_filter_t {
    /// Size set by the caller.
    pub size: u64,
    /// Include patterns.
    pub include: *const *const c_char,
    /// Their count.
    pub include_count: u64,
    /// Exclude patterns.
    pub exclude: *const *const c_char,
    /// Their count.
    pub exclude_count: u64,
    /// First dispatch id admitted.
    pub range_first: u64,
    /// Last dispatch id admitted; 0 = no upper bound.
    pub range_last: u64,
    /// Matching dispatches to skip.
    pub skip: u64,
    /// Most candidates; 0 = no limit.
    pub count: u64,
}

// ----- The simulator ---------------------------------------------------------------------

/// `kreplay_sim_t`: a simulated runtime.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct kreplay_sim_t {
    /// The handle; 0 is never valid.
    pub handle: u64,
}

/// `kreplay_sim_kernel_t`: a kernel of a simulated runtime.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct kreplay_sim_kernel_t {
    /// The handle; 0 is never valid.
    pub handle: u64,
}

/// `kreplay_sim_module_t`: a loaded code object.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct kreplay_sim_module_t {
    /// The handle; 0 is never valid.
    pub handle: u64,
}

/// `kreplay_sim_dispatch_t`: a launched dispatch, until waited for.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct kreplay_sim_dispatch_t {
    /// The handle; 0 is never valid.
    pub handle: u64,
}

/// `kreplay_sim_memory_t`: the memory class of a simulated allocation (SPEC §7.1).
pub type kreplay_sim_memory_t = u32;
/// Coarse-grained device memory.
pub const KREPLAY_SIM_MEMORY_DEVICE_COARSE: kreplay_sim_memory_t = 0;
/// Fine-grained device memory.
pub const KREPLAY_SIM_MEMORY_FINE_GRAINED: kreplay_sim_memory_t = 1;
/// Managed (unified) memory.
pub const KREPLAY_SIM_MEMORY_MANAGED: kreplay_sim_memory_t = 2;
/// Pinned host memory.
pub const KREPLAY_SIM_MEMORY_PINNED_HOST: kreplay_sim_memory_t = 3;
/// IPC-imported device memory.
pub const KREPLAY_SIM_MEMORY_IPC_IMPORTED: kreplay_sim_memory_t = 4;
/// Memory owned by a peer agent.
pub const KREPLAY_SIM_MEMORY_PEER: kreplay_sim_memory_t = 5;
/// A virtual-memory mapping.
pub const KREPLAY_SIM_MEMORY_VIRTUAL_MAPPING: kreplay_sim_memory_t = 6;
/// Kernel-argument memory.
pub const KREPLAY_SIM_MEMORY_KERNARG: kreplay_sim_memory_t = 7;
/// Device memory marked as the tool's own.
pub const KREPLAY_SIM_MEMORY_TOOL_OWNED: kreplay_sim_memory_t = 8;
/// Device memory the backend never hears of.
pub const KREPLAY_SIM_MEMORY_UNTRACKED: kreplay_sim_memory_t = 9;

/// `kreplay_sim_counter_group_t`.
pub type kreplay_sim_counter_group_t = u32;
/// Work-items launched.
pub const KREPLAY_SIM_COUNTER_WORK_ITEMS: kreplay_sim_counter_group_t = 0;
/// Bytes loaded.
pub const KREPLAY_SIM_COUNTER_BYTES_READ: kreplay_sim_counter_group_t = 1;
/// Bytes stored.
pub const KREPLAY_SIM_COUNTER_BYTES_WRITTEN: kreplay_sim_counter_group_t = 2;
/// Modelled instructions.
pub const KREPLAY_SIM_COUNTER_INSTRUCTIONS: kreplay_sim_counter_group_t = 3;
/// Number of groups.
pub const KREPLAY_SIM_COUNTER_GROUP_COUNT: kreplay_sim_counter_group_t = 4;
/// No group (selection cleared, or nothing collected).
pub const KREPLAY_SIM_COUNTER_NONE: kreplay_sim_counter_group_t = 4;

/// `pass` argument of `kreplay_sim_counter_read`: the latest execution of the dispatch.
pub const KREPLAY_SIM_LAST_EXECUTION: u32 = u32::MAX;
/// `pass` field of a sample taken from the ordinary (unreplayed) run.
pub const KREPLAY_SIM_ORDINARY_RUN: u32 = u32::MAX;

/// `kreplay_sim_fault_kind_t`.
pub type kreplay_sim_fault_kind_t = u32;
/// `alloc_backing` fails with out-of-memory.
pub const KREPLAY_SIM_FAULT_SNAPSHOT_OOM: kreplay_sim_fault_kind_t = 0;
/// `alloc_backing` fails for one tier.
pub const KREPLAY_SIM_FAULT_TIER_OOM: kreplay_sim_fault_kind_t = 1;
/// The first capture copy batch fails.
pub const KREPLAY_SIM_FAULT_CAPTURE_COPY_FAIL: kreplay_sim_fault_kind_t = 2;
/// The first capture copy batch stalls.
pub const KREPLAY_SIM_FAULT_CAPTURE_COPY_STUCK: kreplay_sim_fault_kind_t = 3;
/// The next queue drain stalls.
pub const KREPLAY_SIM_FAULT_QUEUE_DRAIN_STUCK: kreplay_sim_fault_kind_t = 4;
/// The next agent drain stalls.
pub const KREPLAY_SIM_FAULT_AGENT_DRAIN_STUCK: kreplay_sim_fault_kind_t = 5;
/// The next copy fence stalls.
pub const KREPLAY_SIM_FAULT_COPY_FENCE_STUCK: kreplay_sim_fault_kind_t = 6;
/// Pass `pass` exceeds the pass timeout.
pub const KREPLAY_SIM_FAULT_PASS_STUCK: kreplay_sim_fault_kind_t = 7;
/// Pass `pass` is refused.
pub const KREPLAY_SIM_FAULT_PASS_SUBMIT_FAIL: kreplay_sim_fault_kind_t = 8;
/// The first restore copy fails (the window aborts the process).
pub const KREPLAY_SIM_FAULT_RESTORE_FAIL: kreplay_sim_fault_kind_t = 9;
/// The next digest batch fails.
pub const KREPLAY_SIM_FAULT_DIGEST_FAIL: kreplay_sim_fault_kind_t = 10;
/// The module-variable enumeration is incomplete.
pub const KREPLAY_SIM_FAULT_INCOMPLETE_MODULE_ENUMERATION: kreplay_sim_fault_kind_t = 11;
/// The allocation at `address` is freed during pass `pass`.
pub const KREPLAY_SIM_FAULT_FREE_DURING_PASS: kreplay_sim_fault_kind_t = 12;
/// The allocation at `address` is freed and made again during pass `pass`.
pub const KREPLAY_SIM_FAULT_REALLOC_DURING_PASS: kreplay_sim_fault_kind_t = 13;
/// The ordinary submission is refused.
pub const KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL: kreplay_sim_fault_kind_t = 14;

/// `kreplay_sim_fault_mode_t`.
pub type kreplay_sim_fault_mode_t = u32;
/// Fires at its next occasion only.
pub const KREPLAY_SIM_FAULT_ONCE: kreplay_sim_fault_mode_t = 0;
/// Fires at every occasion.
pub const KREPLAY_SIM_FAULT_ALWAYS: kreplay_sim_fault_mode_t = 1;

/// `kreplay_sim_tier_t`: a snapshot tier (SPEC §7.3).
pub type kreplay_sim_tier_t = u32;
/// Device memory.
pub const KREPLAY_SIM_TIER_DEVICE: kreplay_sim_tier_t = 0;
/// Pinned host memory.
pub const KREPLAY_SIM_TIER_PINNED_HOST: kreplay_sim_tier_t = 1;
/// Pageable host memory.
pub const KREPLAY_SIM_TIER_PAGEABLE_HOST: kreplay_sim_tier_t = 2;

/// `kreplay_sim_fault_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_sim_fault_t {
    /// Size set by the caller.
    pub size: u64,
    /// A `KREPLAY_SIM_FAULT_*` kind.
    pub kind: kreplay_sim_fault_kind_t,
    /// `KREPLAY_SIM_FAULT_ONCE` or `_ALWAYS`.
    pub mode: kreplay_sim_fault_mode_t,
    /// The pass, for the pass faults.
    pub pass: u32,
    /// The tier, for `TIER_OOM`.
    pub tier: kreplay_sim_tier_t,
    /// The allocation, for `FREE_DURING_PASS` and `REALLOC_DURING_PASS`.
    pub address: u64,
}

/// `kreplay_sim_variable_t`: one variable of a code object.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_sim_variable_t {
    /// NUL-terminated name.
    pub name: *const c_char,
    /// Size in bytes.
    pub size: u64,
    /// `size` initial bytes, or NULL for zeros.
    pub init: *const c_void,
    /// 1 for a constant, else 0.
    pub read_only: u32,
    /// 0.
    pub reserved: u32,
}

/// `kreplay_sim_module_desc_t`: a code object to load.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_sim_module_desc_t {
    /// Size set by the caller.
    pub size: u64,
    /// NUL-terminated name.
    pub name: *const c_char,
    /// Variables.
    pub variables: *const kreplay_sim_variable_t,
    /// Their count.
    pub variable_count: u64,
    /// Built-in kernel names.
    pub kernels: *const *const c_char,
    /// Their count.
    pub kernel_count: u64,
}

/// `kreplay_sim_result_t`: what became of a dispatch.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_sim_result_t {
    /// Size set by the caller.
    pub size: u64,
    /// The library's dispatch id; 0 without an outcome record.
    pub dispatch_id: u64,
    /// A `KREPLAY_OUTCOME_*` value; `KREPLAY_OUTCOME_NONE` without a record.
    pub outcome: kreplay_outcome_kind_t,
    /// A `KREPLAY_REASON_*` value.
    pub reason: kreplay_reason_t,
    /// Passes that ran (0 without a record).
    pub executed_passes: u32,
    /// How often the application's completion fired.
    pub completions: u32,
}

/// `kreplay_sim_counter_sample_t`: what one execution collected.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_sim_counter_sample_t {
    /// Size set by the caller.
    pub size: u64,
    /// Agent.
    pub agent_id: u64,
    /// Dispatch id.
    pub dispatch_id: u64,
    /// Pass index, or `KREPLAY_SIM_ORDINARY_RUN`.
    pub pass: u32,
    /// Group collected, or `KREPLAY_SIM_COUNTER_NONE`.
    pub group: kreplay_sim_counter_group_t,
    /// Its value (0 when none was collected).
    pub value: u64,
    /// Modelled GPU seconds of the execution.
    pub gpu_seconds: f64,
}

/// `kreplay_sim_digest_t`: a 128-bit digest.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct kreplay_sim_digest_t {
    /// Low 64 bits.
    pub lo: u64,
    /// High 64 bits.
    pub hi: u64,
}

// ----- ABI self-check ----------------------------------------------------------------------

/// `kreplay_abi_entry_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kreplay_abi_entry_t {
    /// NUL-terminated, static.
    pub name: *const c_char,
    /// The value.
    pub value: u64,
}

// SAFETY: entries are immutable and their names point into static, immutable C-string literals,
// so sharing them between threads cannot race.
unsafe impl Sync for kreplay_abi_entry_t {}

/// The first version's size of each struct the caller passes in: a smaller `size` is
/// `KREPLAY_STATUS_BAD_SIZE`. (`kreplay_summary_t` is in its second version, which added the
/// prediction counts at its end; every other struct is in its first.)
pub mod first_version {
    /// `kreplay_summary_t`: its first version ended at `truncated_by_reason`.
    pub const SUMMARY: usize = std::mem::offset_of!(super::kreplay_summary_t, predicted);
    /// `kreplay_phases_t`.
    pub const PHASES: usize = std::mem::size_of::<super::kreplay_phases_t>();
    /// `kreplay_graph_node_t`.
    pub const GRAPH_NODE: usize = std::mem::size_of::<super::kreplay_graph_node_t>();
    /// `kreplay_kernel_filter_t`.
    pub const KERNEL_FILTER: usize = std::mem::size_of::<super::kreplay_kernel_filter_t>();
    /// `kreplay_capture_result_t`.
    pub const CAPTURE_RESULT: usize = std::mem::size_of::<super::kreplay_capture_result_t>();
    /// `kreplay_sim_fault_t`.
    pub const SIM_FAULT: usize = std::mem::size_of::<super::kreplay_sim_fault_t>();
    /// `kreplay_sim_module_desc_t`.
    pub const SIM_MODULE_DESC: usize = std::mem::size_of::<super::kreplay_sim_module_desc_t>();
    /// `kreplay_sim_result_t`.
    pub const SIM_RESULT: usize = std::mem::size_of::<super::kreplay_sim_result_t>();
    /// `kreplay_sim_counter_sample_t`.
    pub const SIM_COUNTER_SAMPLE: usize =
        std::mem::size_of::<super::kreplay_sim_counter_sample_t>();
}
