//! The raw layer: `#[repr(C)]` types and constants, named and laid out exactly as in
//! `include/kernel_replay.h`. Nothing here has behaviour.
//!
//! Fields that carry enumeration values are plain integers, never Rust enums: C may store any
//! value there, and an out-of-range discriminant in a Rust enum would be undefined behaviour.
//! Function pointers are `Option<...>` so that NULL is a valid, checked value.
//!
//! The layout table ([`crate::abi`]) exports the sizes, offsets and values below so C and C++
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
/// Length of the per-reason arrays of [`kreplay_summary_t`].
pub const KREPLAY_REASON_CAPACITY: kreplay_reason_t = 32;

/// `kreplay_scope_t`.
pub type kreplay_scope_t = u32;
/// `all`.
pub const KREPLAY_SCOPE_ALL: kreplay_scope_t = 0;
/// `arguments`.
pub const KREPLAY_SCOPE_ARGUMENTS: kreplay_scope_t = 1;

/// `kreplay_restore_t`.
pub type kreplay_restore_t = u32;
/// `full`.
pub const KREPLAY_RESTORE_FULL: kreplay_restore_t = 0;
/// `dirty`.
pub const KREPLAY_RESTORE_DIRTY: kreplay_restore_t = 1;

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
/// `KREPLAY_STATUS_BAD_SIZE`. (Today every struct is in its first version.)
pub mod first_version {
    /// `kreplay_summary_t`.
    pub const SUMMARY: usize = std::mem::size_of::<super::kreplay_summary_t>();
    /// `kreplay_kernel_filter_t`.
    pub const KERNEL_FILTER: usize = std::mem::size_of::<super::kreplay_kernel_filter_t>();
}
