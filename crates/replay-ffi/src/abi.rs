//! The library's own view of the ABI (SPEC §10: the header is checked against the Rust
//! layout): sizes, alignments and field offsets of every struct of `include/kernel_replay.h`,
//! and the value of every constant, named the way C spells them (`sizeof(T)`, `alignof(T)`,
//! `offsetof(T, field)`, `KREPLAY_...`). C and C++ tests build the same table from the header
//! and compare both directions, so a field or constant that drifts, or one missing on either
//! side, fails the build's tests.

use std::ffi::{c_char, CStr};
use std::mem::{align_of, offset_of, size_of};

use crate::sys::*;

macro_rules! entry {
    ($name:expr, $value:expr) => {
        kreplay_abi_entry_t {
            name: concat!($name, "\0").as_ptr().cast::<c_char>(),
            value: $value,
        }
    };
}

macro_rules! size {
    ($t:ident) => {
        entry!(
            concat!("sizeof(", stringify!($t), ")"),
            size_of::<$t>() as u64
        )
    };
}

macro_rules! align {
    ($t:ident) => {
        entry!(
            concat!("alignof(", stringify!($t), ")"),
            align_of::<$t>() as u64
        )
    };
}

macro_rules! offset {
    ($t:ident, $f:ident) => {
        entry!(
            concat!("offsetof(", stringify!($t), ", ", stringify!($f), ")"),
            offset_of!($t, $f) as u64
        )
    };
}

macro_rules! value {
    ($c:ident) => {
        entry!(stringify!($c), ($c as i64) as u64)
    };
}

/// The table `kreplay_abi_table` returns.
pub static ABI_TABLE: &[kreplay_abi_entry_t] = &[
    // Versions.
    value!(KREPLAY_VERSION_MAJOR),
    value!(KREPLAY_VERSION_MINOR),
    value!(KREPLAY_VERSION_PATCH),
    // Scalar typedefs.
    size!(kreplay_status_t),
    size!(kreplay_operation_t),
    size!(kreplay_phase_t),
    size!(kreplay_subscription_t),
    size!(kreplay_outcome_kind_t),
    size!(kreplay_reason_t),
    size!(kreplay_scope_t),
    size!(kreplay_restore_t),
    size!(kreplay_override_support_t),
    size!(kreplay_pass_count_callback_t),
    size!(kreplay_continue_callback_t),
    size!(kreplay_context_toggle_t),
    size!(kreplay_replay_callback_t),
    size!(kreplay_outcome_sink_t),
    // kreplay_user_data_t
    size!(kreplay_user_data_t),
    align!(kreplay_user_data_t),
    // kreplay_context_t
    size!(kreplay_context_t),
    align!(kreplay_context_t),
    offset!(kreplay_context_t, handle),
    // kreplay_dim3_t
    size!(kreplay_dim3_t),
    align!(kreplay_dim3_t),
    offset!(kreplay_dim3_t, x),
    offset!(kreplay_dim3_t, y),
    offset!(kreplay_dim3_t, z),
    // kreplay_dispatch_info_t
    size!(kreplay_dispatch_info_t),
    align!(kreplay_dispatch_info_t),
    offset!(kreplay_dispatch_info_t, size),
    offset!(kreplay_dispatch_info_t, agent_id),
    offset!(kreplay_dispatch_info_t, queue_id),
    offset!(kreplay_dispatch_info_t, dispatch_id),
    offset!(kreplay_dispatch_info_t, kernel_id),
    offset!(kreplay_dispatch_info_t, kernel_name),
    offset!(kreplay_dispatch_info_t, grid),
    offset!(kreplay_dispatch_info_t, workgroup),
    offset!(kreplay_dispatch_info_t, private_segment_size),
    offset!(kreplay_dispatch_info_t, group_segment_size),
    // kreplay_outcome_t
    size!(kreplay_outcome_t),
    align!(kreplay_outcome_t),
    offset!(kreplay_outcome_t, size),
    offset!(kreplay_outcome_t, dispatch_id),
    offset!(kreplay_outcome_t, agent_id),
    offset!(kreplay_outcome_t, kernel),
    offset!(kreplay_outcome_t, outcome),
    offset!(kreplay_outcome_t, reason),
    offset!(kreplay_outcome_t, requested_passes),
    offset!(kreplay_outcome_t, executed_passes),
    offset!(kreplay_outcome_t, scope),
    offset!(kreplay_outcome_t, restore),
    offset!(kreplay_outcome_t, captured_regions),
    offset!(kreplay_outcome_t, tracked_bytes),
    offset!(kreplay_outcome_t, captured_bytes),
    offset!(kreplay_outcome_t, tier_device_bytes),
    offset!(kreplay_outcome_t, tier_pinned_bytes),
    offset!(kreplay_outcome_t, tier_pageable_bytes),
    offset!(kreplay_outcome_t, untracked_bytes),
    offset!(kreplay_outcome_t, untracked_regions),
    offset!(kreplay_outcome_t, reentrancy),
    offset!(kreplay_outcome_t, snap_seconds),
    offset!(kreplay_outcome_t, restore_seconds),
    offset!(kreplay_outcome_t, compared_bytes),
    offset!(kreplay_outcome_t, restored_bytes),
    offset!(kreplay_outcome_t, pass_gpu_seconds),
    offset!(kreplay_outcome_t, pass_gpu_seconds_count),
    offset!(kreplay_outcome_t, pass_restored_bytes),
    offset!(kreplay_outcome_t, pass_restored_bytes_count),
    offset!(kreplay_outcome_t, pass_compared_bytes),
    offset!(kreplay_outcome_t, pass_compared_bytes_count),
    offset!(kreplay_outcome_t, predicted_bytes),
    offset!(kreplay_outcome_t, prediction_misses),
    offset!(kreplay_outcome_t, predict_source),
    offset!(kreplay_outcome_t, predict_fallback),
    offset!(kreplay_outcome_t, reserved0),
    // kreplay_summary_t
    size!(kreplay_summary_t),
    align!(kreplay_summary_t),
    offset!(kreplay_summary_t, size),
    offset!(kreplay_summary_t, dispatches),
    offset!(kreplay_summary_t, replayed),
    offset!(kreplay_summary_t, declined),
    offset!(kreplay_summary_t, truncated),
    offset!(kreplay_summary_t, not_requested),
    offset!(kreplay_summary_t, passes),
    offset!(kreplay_summary_t, captured_bytes),
    offset!(kreplay_summary_t, compared_bytes),
    offset!(kreplay_summary_t, restored_bytes),
    offset!(kreplay_summary_t, peak_pooled_bytes),
    offset!(kreplay_summary_t, replay_seconds),
    offset!(kreplay_summary_t, declined_by_reason),
    offset!(kreplay_summary_t, truncated_by_reason),
    offset!(kreplay_summary_t, predicted),
    offset!(kreplay_summary_t, predicted_bytes),
    offset!(kreplay_summary_t, prediction_misses),
    offset!(kreplay_summary_t, predict_fallback_by_reason),
    // kreplay_phases_t
    size!(kreplay_phases_t),
    align!(kreplay_phases_t),
    offset!(kreplay_phases_t, size),
    offset!(kreplay_phases_t, window),
    offset!(kreplay_phases_t, drain),
    offset!(kreplay_phases_t, plan),
    offset!(kreplay_phases_t, capture),
    offset!(kreplay_phases_t, launch),
    offset!(kreplay_phases_t, wait),
    offset!(kreplay_phases_t, check),
    offset!(kreplay_phases_t, restore),
    offset!(kreplay_phases_t, callbacks),
    offset!(kreplay_phases_t, finish),
    offset!(kreplay_phases_t, config_enter),
    // kreplay_graph_node_t
    size!(kreplay_graph_node_t),
    align!(kreplay_graph_node_t),
    offset!(kreplay_graph_node_t, size),
    offset!(kreplay_graph_node_t, graph),
    offset!(kreplay_graph_node_t, launch),
    offset!(kreplay_graph_node_t, node),
    offset!(kreplay_graph_node_t, serialized),
    value!(KREPLAY_GRAPH_NODE_NONE),
    // kreplay_replay_payload_t
    size!(kreplay_replay_payload_t),
    align!(kreplay_replay_payload_t),
    offset!(kreplay_replay_payload_t, size),
    offset!(kreplay_replay_payload_t, dispatch_info),
    offset!(kreplay_replay_payload_t, current_pass),
    offset!(kreplay_replay_payload_t, total_passes),
    offset!(kreplay_replay_payload_t, replay_pass_count),
    offset!(kreplay_replay_payload_t, replay_continue),
    offset!(kreplay_replay_payload_t, replay_start_context),
    offset!(kreplay_replay_payload_t, replay_stop_context),
    offset!(kreplay_replay_payload_t, outcome),
    // kreplay_capture_result_t and the capture states
    size!(kreplay_capture_result_t),
    align!(kreplay_capture_result_t),
    offset!(kreplay_capture_result_t, size),
    offset!(kreplay_capture_result_t, dispatch_id),
    offset!(kreplay_capture_result_t, max_bytes),
    offset!(kreplay_capture_result_t, captured_bytes),
    offset!(kreplay_capture_result_t, state),
    offset!(kreplay_capture_result_t, pass),
    offset!(kreplay_capture_result_t, region_count),
    offset!(kreplay_capture_result_t, reserved0),
    value!(KREPLAY_CAPTURE_NONE),
    value!(KREPLAY_CAPTURE_PENDING),
    value!(KREPLAY_CAPTURE_WRITTEN),
    value!(KREPLAY_CAPTURE_REFUSED),
    value!(KREPLAY_CAPTURE_WRITE_FAILED),
    // kreplay_kernel_filter_t
    size!(kreplay_kernel_filter_t),
    align!(kreplay_kernel_filter_t),
    offset!(kreplay_kernel_filter_t, size),
    offset!(kreplay_kernel_filter_t, include),
    offset!(kreplay_kernel_filter_t, include_count),
    offset!(kreplay_kernel_filter_t, exclude),
    offset!(kreplay_kernel_filter_t, exclude_count),
    offset!(kreplay_kernel_filter_t, range_first),
    offset!(kreplay_kernel_filter_t, range_last),
    offset!(kreplay_kernel_filter_t, skip),
    offset!(kreplay_kernel_filter_t, count),
    // kreplay_abi_entry_t
    size!(kreplay_abi_entry_t),
    align!(kreplay_abi_entry_t),
    offset!(kreplay_abi_entry_t, name),
    offset!(kreplay_abi_entry_t, value),
    // Status codes.
    value!(KREPLAY_STATUS_OK),
    value!(KREPLAY_STATUS_NULL_POINTER),
    value!(KREPLAY_STATUS_BAD_SIZE),
    value!(KREPLAY_STATUS_BAD_ENUM),
    value!(KREPLAY_STATUS_INVALID_HANDLE),
    value!(KREPLAY_STATUS_ALREADY_CONFIGURED),
    value!(KREPLAY_STATUS_NOT_CONFIGURED),
    value!(KREPLAY_STATUS_IN_CALLBACK),
    value!(KREPLAY_STATUS_CONTEXT_ERROR),
    value!(KREPLAY_STATUS_CONTEXT_NOT_STARTED),
    value!(KREPLAY_STATUS_UNSUPPORTED),
    value!(KREPLAY_STATUS_POLICY_ERROR),
    value!(KREPLAY_STATUS_INTERNAL),
    value!(KREPLAY_STATUS_SHUT_DOWN),
    value!(KREPLAY_STATUS_BAD_ARGUMENT),
    value!(KREPLAY_STATUS_BUFFER_TOO_SMALL),
    value!(KREPLAY_STATUS_ALREADY_EXISTS),
    value!(KREPLAY_STATUS_DEVICE_ERROR),
    value!(KREPLAY_STATUS_OUT_OF_MEMORY),
    value!(KREPLAY_STATUS_NOT_FOUND),
    // Operations and phases.
    value!(KREPLAY_OPERATION_NONE),
    value!(KREPLAY_OPERATION_CONFIG),
    value!(KREPLAY_OPERATION_PASS),
    value!(KREPLAY_OPERATION_LAST),
    value!(KREPLAY_PHASE_NONE),
    value!(KREPLAY_PHASE_ENTER),
    value!(KREPLAY_PHASE_EXIT),
    value!(KREPLAY_SUBSCRIBE_CONFIG),
    value!(KREPLAY_SUBSCRIBE_PASS),
    // Outcomes and reasons.
    value!(KREPLAY_OUTCOME_NONE),
    value!(KREPLAY_OUTCOME_REPLAYED),
    value!(KREPLAY_OUTCOME_DECLINED),
    value!(KREPLAY_OUTCOME_TRUNCATED),
    value!(KREPLAY_OUTCOME_NOT_REQUESTED),
    value!(KREPLAY_REASON_NONE),
    value!(KREPLAY_REASON_UNTRACKED_MEMORY),
    value!(KREPLAY_REASON_FOOTPRINT_BUDGET),
    value!(KREPLAY_REASON_SNAPSHOT_FAILED),
    value!(KREPLAY_REASON_QUEUE_DRAIN_STUCK),
    value!(KREPLAY_REASON_AGENT_DRAIN_STUCK),
    value!(KREPLAY_REASON_COPY_FENCE_STUCK),
    value!(KREPLAY_REASON_REENTRANT_DISPATCH),
    value!(KREPLAY_REASON_CALLBACK_FAILED),
    value!(KREPLAY_REASON_PASS_DRAIN_STUCK),
    value!(KREPLAY_REASON_PASS_LIMIT),
    value!(KREPLAY_REASON_WRITE_OUTSIDE_SCOPE),
    value!(KREPLAY_REASON_SUBMIT_FAILED),
    value!(KREPLAY_REASON_SCOPE_CHECK_FAILED),
    value!(KREPLAY_REASON_DEVICE_ERROR),
    value!(KREPLAY_REASON_AGENT_BUSY),
    value!(KREPLAY_REASON_UNSEEN_WRITES),
    value!(KREPLAY_REASON_CAPACITY),
    value!(KREPLAY_PREDICT_FALLBACK_CAPACITY),
    // Policy enumerations.
    value!(KREPLAY_SCOPE_ALL),
    value!(KREPLAY_SCOPE_ARGUMENTS),
    value!(KREPLAY_SCOPE_AUTO),
    value!(KREPLAY_SCOPE_PREDICTED),
    value!(KREPLAY_PREDICT_SOURCE_NONE),
    value!(KREPLAY_PREDICT_SOURCE_FIRST_RULE),
    value!(KREPLAY_PREDICT_SOURCE_LEARNED),
    value!(KREPLAY_PREDICT_FALLBACK_NONE),
    value!(KREPLAY_PREDICT_FALLBACK_FITS_DEVICE),
    value!(KREPLAY_PREDICT_FALLBACK_SMALL_REGIONS),
    value!(KREPLAY_PREDICT_FALLBACK_REPEATED_MISSES),
    value!(KREPLAY_PREDICT_FALLBACK_UNKNOWN_LAYOUT),
    value!(KREPLAY_RESTORE_FULL),
    value!(KREPLAY_RESTORE_DIRTY),
    value!(KREPLAY_RESTORE_AUTO),
    // Context control.
    value!(KREPLAY_OVERRIDES_HONOURED),
    value!(KREPLAY_OVERRIDES_UNSUPPORTED),
    value!(KREPLAY_OVERRIDE_NONE),
    value!(KREPLAY_OVERRIDE_STOPPED),
    value!(KREPLAY_OVERRIDE_STARTED),
    // The simulator: handles.
    size!(kreplay_sim_t),
    offset!(kreplay_sim_t, handle),
    size!(kreplay_sim_kernel_t),
    offset!(kreplay_sim_kernel_t, handle),
    size!(kreplay_sim_module_t),
    offset!(kreplay_sim_module_t, handle),
    size!(kreplay_sim_dispatch_t),
    offset!(kreplay_sim_dispatch_t, handle),
    // Its scalar typedefs.
    size!(kreplay_sim_memory_t),
    size!(kreplay_sim_counter_group_t),
    size!(kreplay_sim_fault_kind_t),
    size!(kreplay_sim_fault_mode_t),
    size!(kreplay_sim_tier_t),
    // kreplay_sim_fault_t
    size!(kreplay_sim_fault_t),
    align!(kreplay_sim_fault_t),
    offset!(kreplay_sim_fault_t, size),
    offset!(kreplay_sim_fault_t, kind),
    offset!(kreplay_sim_fault_t, mode),
    offset!(kreplay_sim_fault_t, pass),
    offset!(kreplay_sim_fault_t, tier),
    offset!(kreplay_sim_fault_t, address),
    // kreplay_sim_variable_t
    size!(kreplay_sim_variable_t),
    align!(kreplay_sim_variable_t),
    offset!(kreplay_sim_variable_t, name),
    offset!(kreplay_sim_variable_t, size),
    offset!(kreplay_sim_variable_t, init),
    offset!(kreplay_sim_variable_t, read_only),
    offset!(kreplay_sim_variable_t, reserved),
    // kreplay_sim_module_desc_t
    size!(kreplay_sim_module_desc_t),
    align!(kreplay_sim_module_desc_t),
    offset!(kreplay_sim_module_desc_t, size),
    offset!(kreplay_sim_module_desc_t, name),
    offset!(kreplay_sim_module_desc_t, variables),
    offset!(kreplay_sim_module_desc_t, variable_count),
    offset!(kreplay_sim_module_desc_t, kernels),
    offset!(kreplay_sim_module_desc_t, kernel_count),
    // kreplay_sim_result_t
    size!(kreplay_sim_result_t),
    align!(kreplay_sim_result_t),
    offset!(kreplay_sim_result_t, size),
    offset!(kreplay_sim_result_t, dispatch_id),
    offset!(kreplay_sim_result_t, outcome),
    offset!(kreplay_sim_result_t, reason),
    offset!(kreplay_sim_result_t, executed_passes),
    offset!(kreplay_sim_result_t, completions),
    // kreplay_sim_counter_sample_t
    size!(kreplay_sim_counter_sample_t),
    align!(kreplay_sim_counter_sample_t),
    offset!(kreplay_sim_counter_sample_t, size),
    offset!(kreplay_sim_counter_sample_t, agent_id),
    offset!(kreplay_sim_counter_sample_t, dispatch_id),
    offset!(kreplay_sim_counter_sample_t, pass),
    offset!(kreplay_sim_counter_sample_t, group),
    offset!(kreplay_sim_counter_sample_t, value),
    offset!(kreplay_sim_counter_sample_t, gpu_seconds),
    // kreplay_sim_digest_t
    size!(kreplay_sim_digest_t),
    offset!(kreplay_sim_digest_t, lo),
    offset!(kreplay_sim_digest_t, hi),
    // Simulator constants.
    value!(KREPLAY_SIM_MEMORY_DEVICE_COARSE),
    value!(KREPLAY_SIM_MEMORY_FINE_GRAINED),
    value!(KREPLAY_SIM_MEMORY_MANAGED),
    value!(KREPLAY_SIM_MEMORY_PINNED_HOST),
    value!(KREPLAY_SIM_MEMORY_IPC_IMPORTED),
    value!(KREPLAY_SIM_MEMORY_PEER),
    value!(KREPLAY_SIM_MEMORY_VIRTUAL_MAPPING),
    value!(KREPLAY_SIM_MEMORY_KERNARG),
    value!(KREPLAY_SIM_MEMORY_TOOL_OWNED),
    value!(KREPLAY_SIM_MEMORY_UNTRACKED),
    value!(KREPLAY_SIM_COUNTER_WORK_ITEMS),
    value!(KREPLAY_SIM_COUNTER_BYTES_READ),
    value!(KREPLAY_SIM_COUNTER_BYTES_WRITTEN),
    value!(KREPLAY_SIM_COUNTER_INSTRUCTIONS),
    value!(KREPLAY_SIM_COUNTER_GROUP_COUNT),
    value!(KREPLAY_SIM_COUNTER_NONE),
    value!(KREPLAY_SIM_LAST_EXECUTION),
    value!(KREPLAY_SIM_ORDINARY_RUN),
    value!(KREPLAY_SIM_FAULT_SNAPSHOT_OOM),
    value!(KREPLAY_SIM_FAULT_TIER_OOM),
    value!(KREPLAY_SIM_FAULT_CAPTURE_COPY_FAIL),
    value!(KREPLAY_SIM_FAULT_CAPTURE_COPY_STUCK),
    value!(KREPLAY_SIM_FAULT_QUEUE_DRAIN_STUCK),
    value!(KREPLAY_SIM_FAULT_AGENT_DRAIN_STUCK),
    value!(KREPLAY_SIM_FAULT_COPY_FENCE_STUCK),
    value!(KREPLAY_SIM_FAULT_PASS_STUCK),
    value!(KREPLAY_SIM_FAULT_PASS_SUBMIT_FAIL),
    value!(KREPLAY_SIM_FAULT_RESTORE_FAIL),
    value!(KREPLAY_SIM_FAULT_DIGEST_FAIL),
    value!(KREPLAY_SIM_FAULT_INCOMPLETE_MODULE_ENUMERATION),
    value!(KREPLAY_SIM_FAULT_FREE_DURING_PASS),
    value!(KREPLAY_SIM_FAULT_REALLOC_DURING_PASS),
    value!(KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL),
    value!(KREPLAY_SIM_FAULT_ONCE),
    value!(KREPLAY_SIM_FAULT_ALWAYS),
    value!(KREPLAY_SIM_TIER_DEVICE),
    value!(KREPLAY_SIM_TIER_PINNED_HOST),
    value!(KREPLAY_SIM_TIER_PAGEABLE_HOST),
];

/// The entry named `name`.
pub fn lookup(name: &str) -> Option<u64> {
    ABI_TABLE.iter().find_map(|e| {
        // SAFETY: every name in the table is a static, NUL-terminated literal (`entry!`).
        let n = unsafe { CStr::from_ptr(e.name) };
        (n.to_bytes() == name.as_bytes()).then_some(e.value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_and_the_lp64_layout_is_the_documented_one() {
        let mut seen = HashSet::new();
        for e in ABI_TABLE {
            // SAFETY: static NUL-terminated literals.
            let n = unsafe { CStr::from_ptr(e.name) }.to_str().unwrap();
            assert!(seen.insert(n), "duplicate entry {n}");
        }
        if cfg!(target_pointer_width = "64") {
            assert_eq!(lookup("sizeof(kreplay_replay_payload_t)"), Some(64));
            assert_eq!(
                lookup("offsetof(kreplay_replay_payload_t, dispatch_info)"),
                Some(8)
            );
            assert_eq!(
                lookup("offsetof(kreplay_replay_payload_t, outcome)"),
                Some(56)
            );
            assert_eq!(lookup("sizeof(kreplay_dispatch_info_t)"), Some(80));
            assert_eq!(lookup("sizeof(kreplay_outcome_t)"), Some(224));
            assert_eq!(lookup("sizeof(kreplay_summary_t)"), Some(696));
            // The first version ended here (callers built with it pass size 608).
            assert_eq!(lookup("offsetof(kreplay_summary_t, predicted)"), Some(608));
            assert_eq!(lookup("sizeof(kreplay_kernel_filter_t)"), Some(72));
            assert_eq!(lookup("sizeof(kreplay_capture_result_t)"), Some(48));
            assert_eq!(lookup("sizeof(kreplay_sim_fault_t)"), Some(32));
            assert_eq!(lookup("sizeof(kreplay_sim_variable_t)"), Some(32));
            assert_eq!(lookup("sizeof(kreplay_sim_module_desc_t)"), Some(48));
            assert_eq!(lookup("sizeof(kreplay_sim_result_t)"), Some(32));
            assert_eq!(lookup("sizeof(kreplay_sim_counter_sample_t)"), Some(48));
        }
        assert_eq!(lookup("KREPLAY_OVERRIDE_NONE"), Some(u64::MAX));
        assert_eq!(lookup("no such entry"), None);
    }

    #[test]
    fn the_payload_has_no_tail_padding() {
        // The last field ends where the struct ends.
        assert_eq!(
            offset_of!(kreplay_replay_payload_t, outcome) + size_of::<*const kreplay_outcome_t>(),
            size_of::<kreplay_replay_payload_t>()
        );
        assert_eq!(
            offset_of!(kreplay_dispatch_info_t, group_segment_size) + size_of::<u32>(),
            size_of::<kreplay_dispatch_info_t>()
        );
        assert_eq!(
            offset_of!(kreplay_outcome_t, reserved0) + size_of::<u32>(),
            size_of::<kreplay_outcome_t>()
        );
    }

    #[test]
    fn the_header_version_matches_the_package_version() {
        assert_eq!(
            KREPLAY_VERSION_MAJOR.to_string(),
            env!("CARGO_PKG_VERSION_MAJOR")
        );
        assert_eq!(
            KREPLAY_VERSION_MINOR.to_string(),
            env!("CARGO_PKG_VERSION_MINOR")
        );
        assert_eq!(
            KREPLAY_VERSION_PATCH.to_string(),
            env!("CARGO_PKG_VERSION_PATCH")
        );
    }
}
