/*
 * Checks shared by tests/c/abi_test.c (compiled as C11) and tests/cpp/abi_test.cpp (compiled as
 * C++17), so the header is exercised identically from both languages:
 *
 * - the layout: every sizeof / alignof / offsetof and constant value, compared in both
 *   directions with the table the library exports (a fact missing on either side fails);
 * - every bad input: NULL pointers, a `size` below the first version, out-of-range enumeration
 *   values, made-up and stale handles, a second configure, toggles outside PASS ENTER, calls
 *   after shutdown, and the same for the simulator's functions;
 * - a full replay on the simulator (kr_check_sim_replay): N passes, user_data threading as
 *   SPEC 3, a context stopped in PASS ENTER of pass 1 (kreplay_context_participates), one
 *   counter group per pass, the outcome record, and final memory equal to a run without
 *   replay (digest); a simulator is left alive for kreplay_shutdown() to join.
 *
 * Written in the common subset of C11 and C++17 (no designated initialisers, no compound
 * literals, explicit casts from void*). Each process runs these once: the library is
 * process-wide and kreplay_shutdown() is final.
 */
#ifndef KREPLAY_TEST_ABI_CASES_H
#define KREPLAY_TEST_ABI_CASES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_replay.h"

#include "kr_check.h"

#ifdef __cplusplus
#define KR_ALIGNOF(T) alignof(T)
#else
#define KR_ALIGNOF(T) _Alignof(T)
#endif

/* ----- Layout ------------------------------------------------------------------------------ */

typedef struct kr_fact {
    const char* name;
    uint64_t value;
} kr_fact;

#define KR_SIZE(T) {"sizeof(" #T ")", (uint64_t)sizeof(T)}
#define KR_ALIGN(T) {"alignof(" #T ")", (uint64_t)KR_ALIGNOF(T)}
#define KR_OFF(T, f) {"offsetof(" #T ", " #f ")", (uint64_t)offsetof(T, f)}
#define KR_VAL(c) {#c, (uint64_t)(int64_t)(c)}

static const kr_fact kr_facts[] = {
    KR_VAL(KREPLAY_VERSION_MAJOR),
    KR_VAL(KREPLAY_VERSION_MINOR),
    KR_VAL(KREPLAY_VERSION_PATCH),
    KR_SIZE(kreplay_status_t),
    KR_SIZE(kreplay_operation_t),
    KR_SIZE(kreplay_phase_t),
    KR_SIZE(kreplay_subscription_t),
    KR_SIZE(kreplay_outcome_kind_t),
    KR_SIZE(kreplay_reason_t),
    KR_SIZE(kreplay_scope_t),
    KR_SIZE(kreplay_restore_t),
    KR_SIZE(kreplay_override_support_t),
    KR_SIZE(kreplay_pass_count_callback_t),
    KR_SIZE(kreplay_continue_callback_t),
    KR_SIZE(kreplay_context_toggle_t),
    KR_SIZE(kreplay_replay_callback_t),
    KR_SIZE(kreplay_outcome_sink_t),
    KR_SIZE(kreplay_user_data_t),
    KR_ALIGN(kreplay_user_data_t),
    KR_SIZE(kreplay_context_t),
    KR_ALIGN(kreplay_context_t),
    KR_OFF(kreplay_context_t, handle),
    KR_SIZE(kreplay_dim3_t),
    KR_ALIGN(kreplay_dim3_t),
    KR_OFF(kreplay_dim3_t, x),
    KR_OFF(kreplay_dim3_t, y),
    KR_OFF(kreplay_dim3_t, z),
    KR_SIZE(kreplay_dispatch_info_t),
    KR_ALIGN(kreplay_dispatch_info_t),
    KR_OFF(kreplay_dispatch_info_t, size),
    KR_OFF(kreplay_dispatch_info_t, agent_id),
    KR_OFF(kreplay_dispatch_info_t, queue_id),
    KR_OFF(kreplay_dispatch_info_t, dispatch_id),
    KR_OFF(kreplay_dispatch_info_t, kernel_id),
    KR_OFF(kreplay_dispatch_info_t, kernel_name),
    KR_OFF(kreplay_dispatch_info_t, grid),
    KR_OFF(kreplay_dispatch_info_t, workgroup),
    KR_OFF(kreplay_dispatch_info_t, private_segment_size),
    KR_OFF(kreplay_dispatch_info_t, group_segment_size),
    KR_SIZE(kreplay_outcome_t),
    KR_ALIGN(kreplay_outcome_t),
    KR_OFF(kreplay_outcome_t, size),
    KR_OFF(kreplay_outcome_t, dispatch_id),
    KR_OFF(kreplay_outcome_t, agent_id),
    KR_OFF(kreplay_outcome_t, kernel),
    KR_OFF(kreplay_outcome_t, outcome),
    KR_OFF(kreplay_outcome_t, reason),
    KR_OFF(kreplay_outcome_t, requested_passes),
    KR_OFF(kreplay_outcome_t, executed_passes),
    KR_OFF(kreplay_outcome_t, scope),
    KR_OFF(kreplay_outcome_t, restore),
    KR_OFF(kreplay_outcome_t, captured_regions),
    KR_OFF(kreplay_outcome_t, tracked_bytes),
    KR_OFF(kreplay_outcome_t, captured_bytes),
    KR_OFF(kreplay_outcome_t, tier_device_bytes),
    KR_OFF(kreplay_outcome_t, tier_pinned_bytes),
    KR_OFF(kreplay_outcome_t, tier_pageable_bytes),
    KR_OFF(kreplay_outcome_t, untracked_bytes),
    KR_OFF(kreplay_outcome_t, untracked_regions),
    KR_OFF(kreplay_outcome_t, reentrancy),
    KR_OFF(kreplay_outcome_t, snap_seconds),
    KR_OFF(kreplay_outcome_t, restore_seconds),
    KR_OFF(kreplay_outcome_t, compared_bytes),
    KR_OFF(kreplay_outcome_t, restored_bytes),
    KR_OFF(kreplay_outcome_t, pass_gpu_seconds),
    KR_OFF(kreplay_outcome_t, pass_gpu_seconds_count),
    KR_OFF(kreplay_outcome_t, pass_restored_bytes),
    KR_OFF(kreplay_outcome_t, pass_restored_bytes_count),
    KR_OFF(kreplay_outcome_t, pass_compared_bytes),
    KR_OFF(kreplay_outcome_t, pass_compared_bytes_count),
    KR_OFF(kreplay_outcome_t, predicted_bytes),
    KR_OFF(kreplay_outcome_t, prediction_misses),
    KR_OFF(kreplay_outcome_t, predict_source),
    KR_OFF(kreplay_outcome_t, predict_fallback),
    KR_OFF(kreplay_outcome_t, reserved0),
    KR_SIZE(kreplay_summary_t),
    KR_ALIGN(kreplay_summary_t),
    KR_OFF(kreplay_summary_t, size),
    KR_OFF(kreplay_summary_t, dispatches),
    KR_OFF(kreplay_summary_t, replayed),
    KR_OFF(kreplay_summary_t, declined),
    KR_OFF(kreplay_summary_t, truncated),
    KR_OFF(kreplay_summary_t, not_requested),
    KR_OFF(kreplay_summary_t, passes),
    KR_OFF(kreplay_summary_t, captured_bytes),
    KR_OFF(kreplay_summary_t, compared_bytes),
    KR_OFF(kreplay_summary_t, restored_bytes),
    KR_OFF(kreplay_summary_t, peak_pooled_bytes),
    KR_OFF(kreplay_summary_t, replay_seconds),
    KR_OFF(kreplay_summary_t, declined_by_reason),
    KR_OFF(kreplay_summary_t, truncated_by_reason),
    KR_OFF(kreplay_summary_t, predicted),
    KR_OFF(kreplay_summary_t, predicted_bytes),
    KR_OFF(kreplay_summary_t, prediction_misses),
    KR_OFF(kreplay_summary_t, predict_fallback_by_reason),
    KR_SIZE(kreplay_phases_t),
    KR_ALIGN(kreplay_phases_t),
    KR_OFF(kreplay_phases_t, size),
    KR_OFF(kreplay_phases_t, window),
    KR_OFF(kreplay_phases_t, drain),
    KR_OFF(kreplay_phases_t, plan),
    KR_OFF(kreplay_phases_t, capture),
    KR_OFF(kreplay_phases_t, launch),
    KR_OFF(kreplay_phases_t, wait),
    KR_OFF(kreplay_phases_t, check),
    KR_OFF(kreplay_phases_t, restore),
    KR_OFF(kreplay_phases_t, callbacks),
    KR_OFF(kreplay_phases_t, finish),
    KR_OFF(kreplay_phases_t, config_enter),
    KR_SIZE(kreplay_graph_node_t),
    KR_ALIGN(kreplay_graph_node_t),
    KR_OFF(kreplay_graph_node_t, size),
    KR_OFF(kreplay_graph_node_t, graph),
    KR_OFF(kreplay_graph_node_t, launch),
    KR_OFF(kreplay_graph_node_t, node),
    KR_OFF(kreplay_graph_node_t, serialized),
    KR_VAL(KREPLAY_GRAPH_NODE_NONE),
    KR_SIZE(kreplay_capture_result_t),
    KR_ALIGN(kreplay_capture_result_t),
    KR_OFF(kreplay_capture_result_t, size),
    KR_OFF(kreplay_capture_result_t, dispatch_id),
    KR_OFF(kreplay_capture_result_t, max_bytes),
    KR_OFF(kreplay_capture_result_t, captured_bytes),
    KR_OFF(kreplay_capture_result_t, state),
    KR_OFF(kreplay_capture_result_t, pass),
    KR_OFF(kreplay_capture_result_t, region_count),
    KR_OFF(kreplay_capture_result_t, reserved0),
    KR_VAL(KREPLAY_CAPTURE_NONE),
    KR_VAL(KREPLAY_CAPTURE_PENDING),
    KR_VAL(KREPLAY_CAPTURE_WRITTEN),
    KR_VAL(KREPLAY_CAPTURE_REFUSED),
    KR_VAL(KREPLAY_CAPTURE_WRITE_FAILED),
    KR_SIZE(kreplay_replay_payload_t),
    KR_ALIGN(kreplay_replay_payload_t),
    KR_OFF(kreplay_replay_payload_t, size),
    KR_OFF(kreplay_replay_payload_t, dispatch_info),
    KR_OFF(kreplay_replay_payload_t, current_pass),
    KR_OFF(kreplay_replay_payload_t, total_passes),
    KR_OFF(kreplay_replay_payload_t, replay_pass_count),
    KR_OFF(kreplay_replay_payload_t, replay_continue),
    KR_OFF(kreplay_replay_payload_t, replay_start_context),
    KR_OFF(kreplay_replay_payload_t, replay_stop_context),
    KR_OFF(kreplay_replay_payload_t, outcome),
    KR_SIZE(kreplay_kernel_filter_t),
    KR_ALIGN(kreplay_kernel_filter_t),
    KR_OFF(kreplay_kernel_filter_t, size),
    KR_OFF(kreplay_kernel_filter_t, include),
    KR_OFF(kreplay_kernel_filter_t, include_count),
    KR_OFF(kreplay_kernel_filter_t, exclude),
    KR_OFF(kreplay_kernel_filter_t, exclude_count),
    KR_OFF(kreplay_kernel_filter_t, range_first),
    KR_OFF(kreplay_kernel_filter_t, range_last),
    KR_OFF(kreplay_kernel_filter_t, skip),
    KR_OFF(kreplay_kernel_filter_t, count),
    KR_SIZE(kreplay_abi_entry_t),
    KR_ALIGN(kreplay_abi_entry_t),
    KR_OFF(kreplay_abi_entry_t, name),
    KR_OFF(kreplay_abi_entry_t, value),
    KR_VAL(KREPLAY_STATUS_OK),
    KR_VAL(KREPLAY_STATUS_NULL_POINTER),
    KR_VAL(KREPLAY_STATUS_BAD_SIZE),
    KR_VAL(KREPLAY_STATUS_BAD_ENUM),
    KR_VAL(KREPLAY_STATUS_INVALID_HANDLE),
    KR_VAL(KREPLAY_STATUS_ALREADY_CONFIGURED),
    KR_VAL(KREPLAY_STATUS_NOT_CONFIGURED),
    KR_VAL(KREPLAY_STATUS_IN_CALLBACK),
    KR_VAL(KREPLAY_STATUS_CONTEXT_ERROR),
    KR_VAL(KREPLAY_STATUS_CONTEXT_NOT_STARTED),
    KR_VAL(KREPLAY_STATUS_UNSUPPORTED),
    KR_VAL(KREPLAY_STATUS_POLICY_ERROR),
    KR_VAL(KREPLAY_STATUS_INTERNAL),
    KR_VAL(KREPLAY_STATUS_SHUT_DOWN),
    KR_VAL(KREPLAY_STATUS_BAD_ARGUMENT),
    KR_VAL(KREPLAY_STATUS_BUFFER_TOO_SMALL),
    KR_VAL(KREPLAY_STATUS_ALREADY_EXISTS),
    KR_VAL(KREPLAY_STATUS_DEVICE_ERROR),
    KR_VAL(KREPLAY_STATUS_OUT_OF_MEMORY),
    KR_VAL(KREPLAY_STATUS_NOT_FOUND),
    KR_VAL(KREPLAY_OPERATION_NONE),
    KR_VAL(KREPLAY_OPERATION_CONFIG),
    KR_VAL(KREPLAY_OPERATION_PASS),
    KR_VAL(KREPLAY_OPERATION_LAST),
    KR_VAL(KREPLAY_PHASE_NONE),
    KR_VAL(KREPLAY_PHASE_ENTER),
    KR_VAL(KREPLAY_PHASE_EXIT),
    KR_VAL(KREPLAY_SUBSCRIBE_CONFIG),
    KR_VAL(KREPLAY_SUBSCRIBE_PASS),
    KR_VAL(KREPLAY_OUTCOME_NONE),
    KR_VAL(KREPLAY_OUTCOME_REPLAYED),
    KR_VAL(KREPLAY_OUTCOME_DECLINED),
    KR_VAL(KREPLAY_OUTCOME_TRUNCATED),
    KR_VAL(KREPLAY_OUTCOME_NOT_REQUESTED),
    KR_VAL(KREPLAY_REASON_NONE),
    KR_VAL(KREPLAY_REASON_UNTRACKED_MEMORY),
    KR_VAL(KREPLAY_REASON_FOOTPRINT_BUDGET),
    KR_VAL(KREPLAY_REASON_SNAPSHOT_FAILED),
    KR_VAL(KREPLAY_REASON_QUEUE_DRAIN_STUCK),
    KR_VAL(KREPLAY_REASON_AGENT_DRAIN_STUCK),
    KR_VAL(KREPLAY_REASON_COPY_FENCE_STUCK),
    KR_VAL(KREPLAY_REASON_REENTRANT_DISPATCH),
    KR_VAL(KREPLAY_REASON_CALLBACK_FAILED),
    KR_VAL(KREPLAY_REASON_PASS_DRAIN_STUCK),
    KR_VAL(KREPLAY_REASON_PASS_LIMIT),
    KR_VAL(KREPLAY_REASON_WRITE_OUTSIDE_SCOPE),
    KR_VAL(KREPLAY_REASON_SUBMIT_FAILED),
    KR_VAL(KREPLAY_REASON_SCOPE_CHECK_FAILED),
    KR_VAL(KREPLAY_REASON_DEVICE_ERROR),
    KR_VAL(KREPLAY_REASON_AGENT_BUSY),
    KR_VAL(KREPLAY_REASON_UNSEEN_WRITES),
    KR_VAL(KREPLAY_REASON_CAPACITY),
    KR_VAL(KREPLAY_SCOPE_ALL),
    KR_VAL(KREPLAY_SCOPE_ARGUMENTS),
    KR_VAL(KREPLAY_SCOPE_AUTO),
    KR_VAL(KREPLAY_SCOPE_PREDICTED),
    KR_VAL(KREPLAY_PREDICT_SOURCE_NONE),
    KR_VAL(KREPLAY_PREDICT_SOURCE_FIRST_RULE),
    KR_VAL(KREPLAY_PREDICT_SOURCE_LEARNED),
    KR_VAL(KREPLAY_PREDICT_FALLBACK_NONE),
    KR_VAL(KREPLAY_PREDICT_FALLBACK_FITS_DEVICE),
    KR_VAL(KREPLAY_PREDICT_FALLBACK_SMALL_REGIONS),
    KR_VAL(KREPLAY_PREDICT_FALLBACK_REPEATED_MISSES),
    KR_VAL(KREPLAY_PREDICT_FALLBACK_UNKNOWN_LAYOUT),
    KR_VAL(KREPLAY_PREDICT_FALLBACK_CAPACITY),
    KR_VAL(KREPLAY_RESTORE_FULL),
    KR_VAL(KREPLAY_RESTORE_DIRTY),
    KR_VAL(KREPLAY_RESTORE_AUTO),
    KR_VAL(KREPLAY_OVERRIDES_HONOURED),
    KR_VAL(KREPLAY_OVERRIDES_UNSUPPORTED),
    KR_VAL(KREPLAY_OVERRIDE_NONE),
    KR_VAL(KREPLAY_OVERRIDE_STOPPED),
    KR_VAL(KREPLAY_OVERRIDE_STARTED),
    KR_SIZE(kreplay_sim_t),
    KR_OFF(kreplay_sim_t, handle),
    KR_SIZE(kreplay_sim_kernel_t),
    KR_OFF(kreplay_sim_kernel_t, handle),
    KR_SIZE(kreplay_sim_module_t),
    KR_OFF(kreplay_sim_module_t, handle),
    KR_SIZE(kreplay_sim_dispatch_t),
    KR_OFF(kreplay_sim_dispatch_t, handle),
    KR_SIZE(kreplay_sim_memory_t),
    KR_SIZE(kreplay_sim_counter_group_t),
    KR_SIZE(kreplay_sim_fault_kind_t),
    KR_SIZE(kreplay_sim_fault_mode_t),
    KR_SIZE(kreplay_sim_tier_t),
    KR_SIZE(kreplay_sim_fault_t),
    KR_ALIGN(kreplay_sim_fault_t),
    KR_OFF(kreplay_sim_fault_t, size),
    KR_OFF(kreplay_sim_fault_t, kind),
    KR_OFF(kreplay_sim_fault_t, mode),
    KR_OFF(kreplay_sim_fault_t, pass),
    KR_OFF(kreplay_sim_fault_t, tier),
    KR_OFF(kreplay_sim_fault_t, address),
    KR_SIZE(kreplay_sim_variable_t),
    KR_ALIGN(kreplay_sim_variable_t),
    KR_OFF(kreplay_sim_variable_t, name),
    KR_OFF(kreplay_sim_variable_t, size),
    KR_OFF(kreplay_sim_variable_t, init),
    KR_OFF(kreplay_sim_variable_t, read_only),
    KR_OFF(kreplay_sim_variable_t, reserved),
    KR_SIZE(kreplay_sim_module_desc_t),
    KR_ALIGN(kreplay_sim_module_desc_t),
    KR_OFF(kreplay_sim_module_desc_t, size),
    KR_OFF(kreplay_sim_module_desc_t, name),
    KR_OFF(kreplay_sim_module_desc_t, variables),
    KR_OFF(kreplay_sim_module_desc_t, variable_count),
    KR_OFF(kreplay_sim_module_desc_t, kernels),
    KR_OFF(kreplay_sim_module_desc_t, kernel_count),
    KR_SIZE(kreplay_sim_result_t),
    KR_ALIGN(kreplay_sim_result_t),
    KR_OFF(kreplay_sim_result_t, size),
    KR_OFF(kreplay_sim_result_t, dispatch_id),
    KR_OFF(kreplay_sim_result_t, outcome),
    KR_OFF(kreplay_sim_result_t, reason),
    KR_OFF(kreplay_sim_result_t, executed_passes),
    KR_OFF(kreplay_sim_result_t, completions),
    KR_SIZE(kreplay_sim_counter_sample_t),
    KR_ALIGN(kreplay_sim_counter_sample_t),
    KR_OFF(kreplay_sim_counter_sample_t, size),
    KR_OFF(kreplay_sim_counter_sample_t, agent_id),
    KR_OFF(kreplay_sim_counter_sample_t, dispatch_id),
    KR_OFF(kreplay_sim_counter_sample_t, pass),
    KR_OFF(kreplay_sim_counter_sample_t, group),
    KR_OFF(kreplay_sim_counter_sample_t, value),
    KR_OFF(kreplay_sim_counter_sample_t, gpu_seconds),
    KR_SIZE(kreplay_sim_digest_t),
    KR_OFF(kreplay_sim_digest_t, lo),
    KR_OFF(kreplay_sim_digest_t, hi),
    KR_VAL(KREPLAY_SIM_MEMORY_DEVICE_COARSE),
    KR_VAL(KREPLAY_SIM_MEMORY_FINE_GRAINED),
    KR_VAL(KREPLAY_SIM_MEMORY_MANAGED),
    KR_VAL(KREPLAY_SIM_MEMORY_PINNED_HOST),
    KR_VAL(KREPLAY_SIM_MEMORY_IPC_IMPORTED),
    KR_VAL(KREPLAY_SIM_MEMORY_PEER),
    KR_VAL(KREPLAY_SIM_MEMORY_VIRTUAL_MAPPING),
    KR_VAL(KREPLAY_SIM_MEMORY_KERNARG),
    KR_VAL(KREPLAY_SIM_MEMORY_TOOL_OWNED),
    KR_VAL(KREPLAY_SIM_MEMORY_UNTRACKED),
    KR_VAL(KREPLAY_SIM_COUNTER_WORK_ITEMS),
    KR_VAL(KREPLAY_SIM_COUNTER_BYTES_READ),
    KR_VAL(KREPLAY_SIM_COUNTER_BYTES_WRITTEN),
    KR_VAL(KREPLAY_SIM_COUNTER_INSTRUCTIONS),
    KR_VAL(KREPLAY_SIM_COUNTER_GROUP_COUNT),
    KR_VAL(KREPLAY_SIM_COUNTER_NONE),
    KR_VAL(KREPLAY_SIM_LAST_EXECUTION),
    KR_VAL(KREPLAY_SIM_ORDINARY_RUN),
    KR_VAL(KREPLAY_SIM_FAULT_SNAPSHOT_OOM),
    KR_VAL(KREPLAY_SIM_FAULT_TIER_OOM),
    KR_VAL(KREPLAY_SIM_FAULT_CAPTURE_COPY_FAIL),
    KR_VAL(KREPLAY_SIM_FAULT_CAPTURE_COPY_STUCK),
    KR_VAL(KREPLAY_SIM_FAULT_QUEUE_DRAIN_STUCK),
    KR_VAL(KREPLAY_SIM_FAULT_AGENT_DRAIN_STUCK),
    KR_VAL(KREPLAY_SIM_FAULT_COPY_FENCE_STUCK),
    KR_VAL(KREPLAY_SIM_FAULT_PASS_STUCK),
    KR_VAL(KREPLAY_SIM_FAULT_PASS_SUBMIT_FAIL),
    KR_VAL(KREPLAY_SIM_FAULT_RESTORE_FAIL),
    KR_VAL(KREPLAY_SIM_FAULT_DIGEST_FAIL),
    KR_VAL(KREPLAY_SIM_FAULT_INCOMPLETE_MODULE_ENUMERATION),
    KR_VAL(KREPLAY_SIM_FAULT_FREE_DURING_PASS),
    KR_VAL(KREPLAY_SIM_FAULT_REALLOC_DURING_PASS),
    KR_VAL(KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL),
    KR_VAL(KREPLAY_SIM_FAULT_ONCE),
    KR_VAL(KREPLAY_SIM_FAULT_ALWAYS),
    KR_VAL(KREPLAY_SIM_TIER_DEVICE),
    KR_VAL(KREPLAY_SIM_TIER_PINNED_HOST),
    KR_VAL(KREPLAY_SIM_TIER_PAGEABLE_HOST),
};

static void kr_check_layout(void) {
    const size_t n_facts = sizeof(kr_facts) / sizeof(kr_facts[0]);
    const kreplay_abi_entry_t* table = NULL;
    uint64_t count = 0;
    size_t i;
    uint64_t j;

    KR_EXPECT(kreplay_abi_table(NULL, &count), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_abi_table(&table, NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_OK(kreplay_abi_table(&table, &count));
    KR_CHECK(table != NULL);
    KR_CHECK(count == (uint64_t)n_facts);

    /* Header -> library: every fact of the header has the library's value. */
    for (i = 0; i < n_facts; i++) {
        uint64_t v = 0;
        kreplay_status_t s = kreplay_abi_layout(kr_facts[i].name, &v);
        if (s != KREPLAY_STATUS_OK) {
            kr_failed++;
            fprintf(stderr, "layout: the library has no entry %s (%s)\n", kr_facts[i].name,
                    kreplay_last_error());
        } else if (v != kr_facts[i].value) {
            kr_failed++;
            fprintf(stderr, "layout: %s is %llu in the header but %llu in the library\n",
                    kr_facts[i].name, (unsigned long long)kr_facts[i].value,
                    (unsigned long long)v);
        } else {
            kr_passed++;
        }
    }
    /* Library -> header: every entry of the library is checked here. */
    for (j = 0; table != NULL && j < count; j++) {
        int found = 0;
        for (i = 0; i < n_facts; i++) {
            if (strcmp(table[j].name, kr_facts[i].name) == 0) {
                found = 1;
                break;
            }
        }
        if (found) {
            kr_passed++;
        } else {
            kr_failed++;
            fprintf(stderr, "layout: the library exports %s, which this test does not check\n",
                    table[j].name);
        }
    }

    /* Pinned by the contract (UPSTREAM): size at 0, dispatch_info at 8, no tail padding. */
    KR_CHECK(offsetof(kreplay_replay_payload_t, size) == 0);
    KR_CHECK(offsetof(kreplay_replay_payload_t, dispatch_info) == 8);
    KR_CHECK(offsetof(kreplay_replay_payload_t, outcome) + sizeof(const kreplay_outcome_t*) ==
             sizeof(kreplay_replay_payload_t));
    KR_CHECK(offsetof(kreplay_dispatch_info_t, group_segment_size) + sizeof(uint32_t) ==
             sizeof(kreplay_dispatch_info_t));
    KR_CHECK(offsetof(kreplay_outcome_t, reserved0) + sizeof(uint32_t) ==
             sizeof(kreplay_outcome_t));

    {
        uint64_t v = 0;
        KR_EXPECT(kreplay_abi_layout(NULL, &v), KREPLAY_STATUS_NULL_POINTER);
        KR_EXPECT(kreplay_abi_layout("sizeof(kreplay_context_t)", NULL),
                  KREPLAY_STATUS_NULL_POINTER);
        KR_EXPECT(kreplay_abi_layout("sizeof(no_such_type)", &v), KREPLAY_STATUS_BAD_ARGUMENT);
        KR_ERROR_MENTIONS("no_such_type");
    }
}

/* ----- Version, status strings, last error ------------------------------------------------- */

static void kr_check_version_and_strings(void) {
    uint32_t major = 99, minor = 99, patch = 99;
    char expected[64];
    kreplay_status_t s;
    const char* names[KREPLAY_STATUS_NOT_FOUND + 1];
    int i, j;

    KR_EXPECT(kreplay_version(NULL, &minor, &patch), KREPLAY_STATUS_NULL_POINTER);
    KR_ERROR_MENTIONS("kreplay_version");
    KR_ERROR_MENTIONS("major");
    KR_EXPECT(kreplay_version(&major, NULL, &patch), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_version(&major, &minor, NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_CHECK(major == 99); /* untouched on failure */
    KR_OK(kreplay_version(&major, &minor, &patch));
    KR_CHECK(strcmp(kreplay_last_error(), "") == 0); /* cleared by a success */
    KR_CHECK(major == KREPLAY_VERSION_MAJOR);
    KR_CHECK(minor == KREPLAY_VERSION_MINOR);
    KR_CHECK(patch == KREPLAY_VERSION_PATCH);
    snprintf(expected, sizeof(expected), "%u.%u.%u", (unsigned)major, (unsigned)minor,
             (unsigned)patch);
    KR_CHECK(kreplay_version_string() != NULL);
    KR_CHECK(strcmp(kreplay_version_string(), expected) == 0);

    /* Every status has its own name; unknown values have a name too. */
    for (s = KREPLAY_STATUS_OK; s <= KREPLAY_STATUS_NOT_FOUND; s++) {
        names[s] = kreplay_status_string(s);
        KR_CHECK(names[s] != NULL && strncmp(names[s], "KREPLAY_STATUS_", 15) == 0);
        KR_CHECK(strcmp(names[s], "KREPLAY_STATUS_UNKNOWN") != 0);
    }
    for (i = 0; i <= KREPLAY_STATUS_NOT_FOUND; i++) {
        for (j = i + 1; j <= KREPLAY_STATUS_NOT_FOUND; j++) {
            KR_CHECK(strcmp(names[i], names[j]) != 0);
        }
    }
    KR_CHECK(strcmp(kreplay_status_string(KREPLAY_STATUS_CONTEXT_ERROR),
                    "KREPLAY_STATUS_CONTEXT_ERROR") == 0);
    KR_CHECK(strcmp(kreplay_status_string(-1), "KREPLAY_STATUS_UNKNOWN") == 0);
    KR_CHECK(strcmp(kreplay_status_string(9999), "KREPLAY_STATUS_UNKNOWN") == 0);
}

/* ----- Contexts and handles --------------------------------------------------------------- */

typedef struct kr_contexts {
    kreplay_context_t owner;       /* will configure the service */
    kreplay_context_t counters;    /* participant honours overrides */
    kreplay_context_t trace;       /* participant cannot honour overrides */
    kreplay_context_t destroyed;   /* a stale handle */
} kr_contexts;

static void kr_expect_invalid_everywhere(kreplay_context_t bad, const char* what) {
    int32_t v = 0;
    fprintf(stderr, "  (invalid handle checks: %s)\n", what);
    KR_EXPECT(kreplay_context_start(bad), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_context_stop(bad), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_context_is_active(bad, &v), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_context_declare_participant(bad, "x", KREPLAY_OVERRIDES_HONOURED),
              KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_context_override(bad, &v), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_context_participates(bad, &v), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_replay_start_context(bad), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_replay_stop_context(bad), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_context_destroy(bad), KREPLAY_STATUS_INVALID_HANDLE);
}

static void kr_check_contexts(kr_contexts* c) {
    kreplay_context_t reused, made_up;
    int32_t v = 7;

    KR_EXPECT(kreplay_context_create(NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_OK(kreplay_context_create(&c->owner));
    KR_OK(kreplay_context_create(&c->counters));
    KR_OK(kreplay_context_create(&c->trace));
    KR_OK(kreplay_context_create(&c->destroyed));
    KR_CHECK(c->owner.handle != 0);
    KR_CHECK(c->owner.handle != c->counters.handle);

    KR_EXPECT(kreplay_context_is_active(c->owner, NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_OK(kreplay_context_is_active(c->owner, &v));
    KR_CHECK(v == 0);

    /* Participants. */
    KR_EXPECT(kreplay_context_declare_participant(c->counters, NULL, KREPLAY_OVERRIDES_HONOURED),
              KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_context_declare_participant(c->counters, "counters", 2),
              KREPLAY_STATUS_BAD_ENUM);
    KR_EXPECT(kreplay_context_declare_participant(c->counters, "counters", 0xffffffffu),
              KREPLAY_STATUS_BAD_ENUM);
    KR_EXPECT(kreplay_context_declare_participant(c->counters, "\xff\xfe", 0),
              KREPLAY_STATUS_BAD_ARGUMENT);
    KR_OK(kreplay_context_declare_participant(c->counters, "counters",
                                              KREPLAY_OVERRIDES_HONOURED));
    KR_EXPECT(kreplay_context_declare_participant(c->counters, "counters",
                                                  KREPLAY_OVERRIDES_HONOURED),
              KREPLAY_STATUS_ALREADY_EXISTS);
    KR_OK(kreplay_context_declare_participant(c->trace, "thread_trace",
                                              KREPLAY_OVERRIDES_UNSUPPORTED));

    /* Global start / stop. */
    KR_OK(kreplay_context_start(c->counters));
    KR_OK(kreplay_context_is_active(c->counters, &v));
    KR_CHECK(v == 1);
    KR_OK(kreplay_context_stop(c->counters));
    KR_OK(kreplay_context_is_active(c->counters, &v));
    KR_CHECK(v == 0);
    KR_OK(kreplay_context_start(c->counters));
    KR_OK(kreplay_context_start(c->trace));

    /* What participants consult, outside any loop: the global state. */
    KR_EXPECT(kreplay_context_override(c->counters, NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_OK(kreplay_context_override(c->counters, &v));
    KR_CHECK(v == KREPLAY_OVERRIDE_NONE);
    KR_EXPECT(kreplay_context_participates(c->counters, NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_OK(kreplay_context_participates(c->counters, &v));
    KR_CHECK(v == 1);
    KR_OK(kreplay_context_participates(c->owner, &v));
    KR_CHECK(v == 0);
    KR_EXPECT(kreplay_has_overrides(NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_OK(kreplay_has_overrides(&v));
    KR_CHECK(v == 0);

    /* Made-up handles. */
    made_up.handle = 0;
    kr_expect_invalid_everywhere(made_up, "zero");
    made_up.handle = c->owner.handle ^ ((uint64_t)1 << 40);
    kr_expect_invalid_everywhere(made_up, "wrong generation");
    made_up.handle = c->owner.handle + 1000;
    kr_expect_invalid_everywhere(made_up, "unused slot");
    KR_ERROR_MENTIONS("not a live context");

    /* Use after destroy: stale, even once the slot is reused. */
    KR_OK(kreplay_context_destroy(c->destroyed));
    kr_expect_invalid_everywhere(c->destroyed, "destroyed");
    KR_OK(kreplay_context_create(&reused));
    KR_CHECK((reused.handle & 0xffffffffu) == (c->destroyed.handle & 0xffffffffu));
    KR_CHECK(reused.handle != c->destroyed.handle);
    kr_expect_invalid_everywhere(c->destroyed, "destroyed, slot reused");
    KR_OK(kreplay_context_is_active(reused, &v));
    KR_OK(kreplay_context_destroy(reused));
}

/* ----- Configure ----------------------------------------------------------------------------- */

static void kr_check_configure(kr_contexts* c, kreplay_replay_callback_t callback, void* data) {
    kreplay_context_t owner;
    int32_t active = 7;

    KR_EXPECT(kreplay_replay_owner(NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_replay_owner(&owner), KREPLAY_STATUS_NOT_CONFIGURED);
    KR_EXPECT(kreplay_replay_is_active(NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_OK(kreplay_replay_is_active(&active));
    KR_CHECK(active == 0);

    KR_EXPECT(kreplay_configure_replay(c->owner, KREPLAY_SUBSCRIBE_CONFIG, NULL, data),
              KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_configure_replay(c->owner, 0, callback, data), KREPLAY_STATUS_BAD_ENUM);
    KR_EXPECT(kreplay_configure_replay(c->owner, 4, callback, data), KREPLAY_STATUS_BAD_ENUM);
    KR_EXPECT(kreplay_configure_replay(c->owner, 0xffffffffu, callback, data),
              KREPLAY_STATUS_BAD_ENUM);
    KR_EXPECT(kreplay_configure_replay(c->destroyed,
                                       KREPLAY_SUBSCRIBE_CONFIG | KREPLAY_SUBSCRIBE_PASS,
                                       callback, data),
              KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_replay_owner(&owner), KREPLAY_STATUS_NOT_CONFIGURED);

    KR_OK(kreplay_configure_replay(c->owner, KREPLAY_SUBSCRIBE_CONFIG | KREPLAY_SUBSCRIBE_PASS,
                                   callback, data));
    KR_OK(kreplay_replay_owner(&owner));
    KR_CHECK(owner.handle == c->owner.handle);
    KR_OK(kreplay_replay_is_active(&active));
    KR_CHECK(active == 0); /* configured, not started */
    KR_OK(kreplay_context_start(c->owner));
    KR_OK(kreplay_replay_is_active(&active));
    KR_CHECK(active == 1);
    KR_OK(kreplay_context_stop(c->owner));
    KR_OK(kreplay_replay_is_active(&active));
    KR_CHECK(active == 0);
    KR_OK(kreplay_context_start(c->owner));

    /* One owner per process. */
    KR_EXPECT(kreplay_configure_replay(c->owner, KREPLAY_SUBSCRIBE_CONFIG, callback, data),
              KREPLAY_STATUS_ALREADY_CONFIGURED);
    KR_EXPECT(kreplay_configure_replay(c->counters, KREPLAY_SUBSCRIBE_CONFIG, callback, data),
              KREPLAY_STATUS_ALREADY_CONFIGURED);
    KR_ERROR_MENTIONS("already configured");
}

/* ----- Toggles outside PASS ENTER ------------------------------------------------------------ */

static void kr_check_toggles_outside_pass_enter(kr_contexts* c) {
    KR_EXPECT(kreplay_replay_start_context(c->counters), KREPLAY_STATUS_CONTEXT_ERROR);
    KR_ERROR_MENTIONS("PASS ENTER");
    KR_EXPECT(kreplay_replay_stop_context(c->counters), KREPLAY_STATUS_CONTEXT_ERROR);
    /* The phase is checked before the participants. */
    KR_EXPECT(kreplay_replay_stop_context(c->trace), KREPLAY_STATUS_CONTEXT_ERROR);
    KR_EXPECT(kreplay_replay_start_context(c->owner), KREPLAY_STATUS_CONTEXT_ERROR);
    /* The handle is checked before the phase. */
    KR_EXPECT(kreplay_replay_start_context(c->destroyed), KREPLAY_STATUS_INVALID_HANDLE);
}

/* ----- Policy and the filter ----------------------------------------------------------------- */

static char* kr_policy_json(void) {
    size_t need = 0;
    char* buf;
    KR_EXPECT(kreplay_policy_json(NULL, 0, &need), KREPLAY_STATUS_BUFFER_TOO_SMALL);
    KR_CHECK(need > 2);
    buf = (char*)malloc(need);
    if (buf == NULL) {
        return NULL;
    }
    KR_OK(kreplay_policy_json(buf, need, &need));
    return buf;
}

static void kr_check_policy(void) {
    size_t need = 0;
    char small[4];
    char* json;

    KR_EXPECT(kreplay_policy_set(NULL, "8"), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_policy_set("KREPLAY_MAX_PASSES", NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_policy_set("KREPLAY_NO_SUCH_VARIABLE", "1"), KREPLAY_STATUS_POLICY_ERROR);
    KR_ERROR_MENTIONS("KREPLAY_NO_SUCH_VARIABLE");
    KR_EXPECT(kreplay_policy_set("KREPLAY_MAX_PASSES", "zero"), KREPLAY_STATUS_POLICY_ERROR);
    KR_ERROR_MENTIONS("KREPLAY_MAX_PASSES");
    KR_EXPECT(kreplay_policy_set("KREPLAY_MAX_PASSES", "0"), KREPLAY_STATUS_POLICY_ERROR);
    KR_EXPECT(kreplay_policy_set("KREPLAY_SCOPE", "everything"), KREPLAY_STATUS_POLICY_ERROR);
    KR_EXPECT(kreplay_policy_set("KREPLAY_MAX_PASSES", "\xff"), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_policy_set("\xff", "1"), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_OK(kreplay_policy_set("KREPLAY_MAX_PASSES", "8"));
    KR_OK(kreplay_policy_set("ROCPROFILER_KERNEL_REPLAY_WARN_SECONDS", "3"));
    KR_OK(kreplay_policy_set("RESTORE", "dirty"));
    KR_OK(kreplay_policy_set("KREPLAY_CHUNK_BYTES", "64KiB"));
    KR_OK(kreplay_policy_set("KREPLAY_LOG", "warn"));

    KR_EXPECT(kreplay_policy_json(NULL, 0, NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_policy_json(NULL, 16, &need), KREPLAY_STATUS_NULL_POINTER);
    memset(small, 'x', sizeof(small));
    KR_EXPECT(kreplay_policy_json(small, sizeof(small), &need), KREPLAY_STATUS_BUFFER_TOO_SMALL);
    KR_CHECK(need > sizeof(small));
    KR_CHECK(small[0] == 'x'); /* untouched */
    json = kr_policy_json();
    KR_CHECK(json != NULL && strstr(json, "\"max_passes\":8") != NULL);
    KR_CHECK(json != NULL && strstr(json, "\"restore\":\"dirty\"") != NULL);
    KR_CHECK(json != NULL && strstr(json, "\"warn_seconds\":3.0") != NULL);
    KR_CHECK(json != NULL && strstr(json, "\"chunk_bytes\":65536") != NULL);
    KR_CHECK(json != NULL && strstr(json, "\"log_level\":\"warn\"") != NULL);
    free(json);
}

static void kr_check_filter(void) {
    kreplay_kernel_filter_t f;
    const char* one_null[1];
    const char* empty[1];
    const char* not_utf8[1];
    const char* include[2];
    const char* exclude[1];
    char* json;

    one_null[0] = NULL;
    empty[0] = "";
    not_utf8[0] = "\xff";
    include[0] = "saxpy";
    include[1] = "gemm_*";
    exclude[0] = "copy";

    KR_EXPECT(kreplay_filter_set(NULL), KREPLAY_STATUS_NULL_POINTER);
    memset(&f, 0, sizeof(f));
    KR_EXPECT(kreplay_filter_set(&f), KREPLAY_STATUS_BAD_SIZE); /* size 0 */
    f.size = 8;
    KR_EXPECT(kreplay_filter_set(&f), KREPLAY_STATUS_BAD_SIZE);
    KR_ERROR_MENTIONS("size");
    f.size = sizeof(f);
    f.include_count = 1;
    KR_EXPECT(kreplay_filter_set(&f), KREPLAY_STATUS_NULL_POINTER); /* include NULL */
    f.include = one_null;
    KR_EXPECT(kreplay_filter_set(&f), KREPLAY_STATUS_NULL_POINTER); /* include[0] NULL */
    f.include = empty;
    KR_EXPECT(kreplay_filter_set(&f), KREPLAY_STATUS_POLICY_ERROR);
    f.include = not_utf8;
    KR_EXPECT(kreplay_filter_set(&f), KREPLAY_STATUS_BAD_ARGUMENT);
    f.include = include;
    f.include_count = (uint64_t)1 << 40;
    KR_EXPECT(kreplay_filter_set(&f), KREPLAY_STATUS_BAD_ARGUMENT);
    f.include_count = 2;
    f.exclude = exclude;
    f.exclude_count = 1;
    f.range_first = 10;
    f.range_last = 5;
    KR_EXPECT(kreplay_filter_set(&f), KREPLAY_STATUS_POLICY_ERROR);
    KR_ERROR_MENTIONS("range");
    f.range_first = 3;
    f.range_last = 0; /* open-ended */
    f.skip = 1;
    f.count = 2;
    KR_OK(kreplay_filter_set(&f));
    json = kr_policy_json();
    KR_CHECK(json != NULL && strstr(json, "\"include\":[\"saxpy\",\"gemm_*\"]") != NULL);
    KR_CHECK(json != NULL && strstr(json, "\"exclude\":[\"copy\"]") != NULL);
    KR_CHECK(json != NULL && strstr(json, "\"range\":{\"first\":3,\"last\":null}") != NULL);
    KR_CHECK(json != NULL && strstr(json, "\"skip\":1") != NULL);
    KR_CHECK(json != NULL && strstr(json, "\"count\":2") != NULL);
    free(json);

    /* A zero-filled filter admits everything. */
    memset(&f, 0, sizeof(f));
    f.size = sizeof(f);
    KR_OK(kreplay_filter_set(&f));
    json = kr_policy_json();
    KR_CHECK(json != NULL && strstr(json, "\"include\":[]") != NULL);
    KR_CHECK(json != NULL && strstr(json, "\"range\":null") != NULL);
    KR_CHECK(json != NULL && strstr(json, "\"count\":null") != NULL);
    free(json);
}

/* ----- Summary and outcomes ------------------------------------------------------------------ */

static void kr_sink(const kreplay_outcome_t* outcome, void* data) {
    (void)outcome;
    (void)data;
}

static void kr_check_summary_and_outcomes(void) {
    kreplay_summary_t s;
    kreplay_outcome_t fake;
    size_t need = 0;
    char buf[512];

    KR_EXPECT(kreplay_summary_get(NULL), KREPLAY_STATUS_NULL_POINTER);
    memset(&s, 0xab, sizeof(s));
    s.size = 8;
    KR_EXPECT(kreplay_summary_get(&s), KREPLAY_STATUS_BAD_SIZE);
    /* The first version ended at truncated_by_reason: smaller is refused, that size is served
     * (and nothing past it written), the whole struct too. */
    s.size = offsetof(kreplay_summary_t, predicted) - 8;
    KR_EXPECT(kreplay_summary_get(&s), KREPLAY_STATUS_BAD_SIZE);
    s.size = offsetof(kreplay_summary_t, predicted);
    KR_OK(kreplay_summary_get(&s));
    KR_CHECK(s.size == offsetof(kreplay_summary_t, predicted));
    KR_CHECK(s.predicted == 0xababababababababULL);
    s.size = sizeof(s);
    KR_OK(kreplay_summary_get(&s));
    KR_CHECK(s.size == sizeof(s));
    KR_CHECK(s.predicted == 0 && s.prediction_misses == 0);
    KR_CHECK(s.predict_fallback_by_reason[KREPLAY_PREDICT_FALLBACK_CAPACITY - 1] == 0);
    KR_CHECK(s.dispatches == 0 && s.replayed == 0 && s.declined == 0 && s.truncated == 0);
    KR_CHECK(s.declined_by_reason[KREPLAY_REASON_CAPACITY - 1] == 0);

    KR_EXPECT(kreplay_summary_json(buf, sizeof(buf), NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_summary_json(NULL, 1, &need), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_summary_json(NULL, 0, &need), KREPLAY_STATUS_BUFFER_TOO_SMALL);
    KR_CHECK(need > 2 && need <= sizeof(buf));
    KR_OK(kreplay_summary_json(buf, sizeof(buf), &need));
    KR_CHECK(strlen(buf) + 1 == need);
    KR_CHECK(strstr(buf, "\"dispatches\":0") != NULL);

    /* An outcome exists only during its callback: anything else is refused, never read. */
    memset(&fake, 0, sizeof(fake));
    fake.size = sizeof(fake);
    KR_EXPECT(kreplay_outcome_json(NULL, buf, sizeof(buf), &need), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_outcome_json(&fake, buf, sizeof(buf), &need),
              KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_outcome_json((const kreplay_outcome_t*)(uintptr_t)0x10, buf, sizeof(buf),
                                   &need),
              KREPLAY_STATUS_INVALID_HANDLE);

    {
        kreplay_phases_t p;
        kreplay_graph_node_t g;
        memset(&p, 0, sizeof(p));
        p.size = sizeof(p);
        memset(&g, 0, sizeof(g));
        g.size = sizeof(g);
        KR_EXPECT(kreplay_outcome_phases(NULL, &p), KREPLAY_STATUS_NULL_POINTER);
        KR_EXPECT(kreplay_outcome_phases(&fake, NULL), KREPLAY_STATUS_NULL_POINTER);
        KR_EXPECT(kreplay_outcome_phases(&fake, &p), KREPLAY_STATUS_INVALID_HANDLE);
        KR_ERROR_MENTIONS("outcome");
        KR_EXPECT(kreplay_outcome_graph_node(NULL, &g), KREPLAY_STATUS_NULL_POINTER);
        KR_EXPECT(kreplay_outcome_graph_node(&fake, NULL), KREPLAY_STATUS_NULL_POINTER);
        KR_EXPECT(kreplay_outcome_graph_node(&fake, &g), KREPLAY_STATUS_INVALID_HANDLE);
        KR_CHECK(p.size == sizeof(p) && p.window == 0.0 && g.graph == 0);
    }

    KR_OK(kreplay_outcome_sink_set(kr_sink, NULL));
    KR_OK(kreplay_outcome_sink_set(kr_sink, &s));
    KR_OK(kreplay_outcome_sink_set(NULL, NULL));
}

/* ----- Replay on the simulator ---------------------------------------------------------------- */
/*
 * A tool in C (shared by both languages): CONFIG ENTER leaves 100 in user_data and asks for
 * `passes` passes with a continue callback; PASS ENTER selects counter group `pass` on the
 * dispatch's agent, stops the toggled context in pass 1 and starts it again in pass 3, records
 * what the participants would see, and leaves 1000 + pass; PASS EXIT reads the pass's counter
 * sample; CONFIG EXIT keeps the outcome. Its callback_data is the kr_tool.
 */

#define KR_MAX_PASSES 8
#define KR_N 1024u /* elements of the workload's buffers */

typedef struct kr_tool {
    kreplay_sim_t sim;           /* where counters are selected and read */
    kreplay_context_t toggled;   /* stopped in PASS ENTER of pass 1, started in pass 3 */
    uint64_t passes;             /* asked for in CONFIG ENTER; 0: no replay */
    /* What the callbacks saw, since kr_tool_reset(). */
    int calls;
    int config_enters;
    int config_exits;
    int pass_count_calls;
    uint64_t pass_count_ud;
    int continue_calls;
    uint64_t continue_ud[KR_MAX_PASSES];
    int passes_entered;
    int passes_exited;
    uint64_t enter_ud[KR_MAX_PASSES];
    uint32_t enter_total[KR_MAX_PASSES];
    uint64_t exit_ud[KR_MAX_PASSES];
    int32_t participates[KR_MAX_PASSES];
    int32_t participates_exit[KR_MAX_PASSES];
    kreplay_status_t stop_status;
    kreplay_status_t start_status;
    kreplay_status_t sim_destroy_status;
    kreplay_status_t sample_status[KR_MAX_PASSES];
    kreplay_sim_counter_sample_t sample[KR_MAX_PASSES];
    uint64_t dispatch_id;
    uint64_t config_exit_ud;
    kreplay_outcome_kind_t outcome;
    kreplay_reason_t reason;
    uint64_t requested;
    uint32_t executed;
    /* CONFIG EXIT: the window's phases, a too small phases struct, the graph node. */
    kreplay_status_t phases_status;
    kreplay_phases_t phases;
    kreplay_status_t phases_small_status;
    kreplay_status_t graph_status;
    kreplay_graph_node_t graph;
    int bad_payload;
} kr_tool;

/* The pass-count and continue callbacks get no callback_data. */
static kr_tool* kr_the_tool = NULL;

static void kr_tool_reset(kr_tool* t) {
    kreplay_sim_t sim = t->sim;
    kreplay_context_t toggled = t->toggled;
    uint64_t passes = t->passes;
    memset(t, 0, sizeof(*t));
    t->sim = sim;
    t->toggled = toggled;
    t->passes = passes;
    kr_the_tool = t;
}

static uint64_t kr_pass_count(const kreplay_dispatch_info_t* info, kreplay_user_data_t ud) {
    (void)info;
    kr_the_tool->pass_count_calls++;
    kr_the_tool->pass_count_ud = ud.value;
    return kr_the_tool->passes;
}

static int32_t kr_continue(const kreplay_dispatch_info_t* info, uint32_t current_pass,
                           uint32_t total_passes, kreplay_user_data_t ud) {
    (void)info;
    (void)total_passes;
    if (current_pass < KR_MAX_PASSES) {
        kr_the_tool->continue_ud[current_pass] = ud.value;
    }
    kr_the_tool->continue_calls++;
    return 1;
}

/* The replay callback's body; each language's callback forwards here. */
static void kr_tool_on_replay(kreplay_operation_t operation, kreplay_phase_t phase,
                              kreplay_replay_payload_t* payload, kreplay_user_data_t* user_data,
                              kr_tool* t) {
    const kreplay_dispatch_info_t* info = payload->dispatch_info;
    uint32_t pass = payload->current_pass;
    uint32_t agent = (uint32_t)info->agent_id;
    t->calls++;
    if (payload->size != sizeof(*payload) || info == NULL || info->size != sizeof(*info) ||
        payload->replay_start_context == NULL || payload->replay_stop_context == NULL) {
        t->bad_payload++;
        return;
    }
    if (operation == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_ENTER) {
        t->config_enters++;
        t->dispatch_id = info->dispatch_id;
        user_data->value = 100;
        t->sim_destroy_status = kreplay_sim_destroy(t->sim); /* refused here */
        if (t->passes > 0) {
            payload->replay_pass_count = kr_pass_count;
            payload->replay_continue = kr_continue;
        }
    } else if (operation == KREPLAY_OPERATION_PASS && phase == KREPLAY_PHASE_ENTER) {
        t->passes_entered++;
        if (pass < KR_MAX_PASSES) {
            t->enter_ud[pass] = user_data->value;
            t->enter_total[pass] = payload->total_passes;
            if (pass == 1) {
                t->stop_status = payload->replay_stop_context(t->toggled);
            }
            if (pass == 3) {
                t->start_status = payload->replay_start_context(t->toggled);
            }
            if (kreplay_context_participates(t->toggled, &t->participates[pass]) !=
                KREPLAY_STATUS_OK) {
                t->participates[pass] = -1;
            }
            /* One counter group per pass; the pass is submitted after this returns. */
            if (kreplay_sim_counter_select(t->sim, agent,
                                           pass % KREPLAY_SIM_COUNTER_GROUP_COUNT) !=
                KREPLAY_STATUS_OK) {
                t->bad_payload++;
            }
        }
        user_data->value = 1000 + pass;
    } else if (operation == KREPLAY_OPERATION_PASS && phase == KREPLAY_PHASE_EXIT) {
        t->passes_exited++;
        if (pass < KR_MAX_PASSES) {
            t->exit_ud[pass] = user_data->value;
            kreplay_context_participates(t->toggled, &t->participates_exit[pass]);
            t->sample[pass].size = sizeof(t->sample[pass]);
            t->sample_status[pass] =
                kreplay_sim_counter_read(t->sim, info->dispatch_id, pass, &t->sample[pass]);
        }
    } else if (operation == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_EXIT) {
        t->config_exits++;
        t->config_exit_ud = user_data->value;
        if (payload->outcome != NULL) {
            t->outcome = payload->outcome->outcome;
            t->reason = payload->outcome->reason;
            t->requested = payload->outcome->requested_passes;
            t->executed = payload->outcome->executed_passes;
            t->phases.size = sizeof(t->phases);
            t->phases_status = kreplay_outcome_phases(payload->outcome, &t->phases);
            {
                kreplay_phases_t small;
                memset(&small, 0, sizeof(small));
                small.size = offsetof(kreplay_phases_t, config_enter);
                t->phases_small_status = kreplay_outcome_phases(payload->outcome, &small);
            }
            /* The simulator runs no graphs: NOT_FOUND, the struct left as it was. */
            memset(&t->graph, 0xab, sizeof(t->graph));
            t->graph.size = sizeof(t->graph);
            t->graph_status = kreplay_outcome_graph_node(payload->outcome, &t->graph);
        }
        kreplay_sim_counter_select(t->sim, agent, KREPLAY_SIM_COUNTER_NONE);
    }
}

/* The workload: buffers, a code object, four kernels. */
typedef struct kr_work {
    uint64_t x, y, sum, hits, scale;
    kreplay_sim_kernel_t fill, axpy, reduce, inc;
    kreplay_sim_module_t module;
} kr_work;

static kreplay_dim3_t kr_grid(uint32_t x) {
    kreplay_dim3_t g;
    g.x = x;
    g.y = 1;
    g.z = 1;
    return g;
}

static void kr_work_setup(kreplay_sim_t sim, kr_work* w) {
    kreplay_sim_variable_t vars[2];
    const char* kernels[1];
    kreplay_sim_module_desc_t desc;
    uint32_t init[KR_N];
    uint32_t scale = 3;
    uint32_t i;

    memset(w, 0, sizeof(*w));
    KR_OK(kreplay_sim_alloc(sim, 0, KR_N * 4, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &w->x));
    KR_OK(kreplay_sim_alloc(sim, 0, KR_N * 4, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &w->y));
    KR_OK(kreplay_sim_alloc(sim, 0, 8, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &w->sum));
    for (i = 0; i < KR_N; i++) {
        init[i] = i;
    }
    KR_OK(kreplay_sim_write(sim, w->y, init, sizeof(init)));

    memset(vars, 0, sizeof(vars));
    vars[0].name = "g_hits";
    vars[0].size = 8;
    vars[1].name = "c_scale";
    vars[1].size = 4;
    vars[1].init = &scale;
    vars[1].read_only = 1;
    kernels[0] = "increment_u64";
    memset(&desc, 0, sizeof(desc));
    desc.size = sizeof(desc);
    desc.name = "kr_test.co";
    desc.variables = vars;
    desc.variable_count = 2;
    desc.kernels = kernels;
    desc.kernel_count = 1;
    KR_OK(kreplay_sim_module_load(sim, 0, &desc, &w->module));
    KR_OK(kreplay_sim_module_variable(w->module, "g_hits", &w->hits));
    KR_OK(kreplay_sim_module_variable(w->module, "c_scale", &w->scale));
    KR_OK(kreplay_sim_module_kernel(w->module, "increment_u64", &w->inc));
    KR_OK(kreplay_sim_kernel_create(sim, "fill_u32", &w->fill));
    KR_OK(kreplay_sim_kernel_create(sim, "axpy_rmw", &w->axpy));
    KR_OK(kreplay_sim_kernel_create(sim, "reduce_sum_u32", &w->reduce));
}

/* Launches one kernel with up to four argument words and waits for it. */
static kreplay_status_t kr_run(kreplay_sim_t sim, kreplay_sim_kernel_t k, uint64_t a0,
                               uint64_t a1, uint64_t a2, uint64_t a3, uint32_t grid,
                               kreplay_sim_result_t* result) {
    uint64_t args[4];
    kreplay_sim_dispatch_t d;
    kreplay_status_t s;
    args[0] = a0;
    args[1] = a1;
    args[2] = a2;
    args[3] = a3;
    memset(result, 0, sizeof(*result));
    result->size = sizeof(*result);
    s = kreplay_sim_dispatch(sim, 0, 0, k, args, sizeof(args), kr_grid(grid), &d);
    if (s != KREPLAY_STATUS_OK) {
        return s;
    }
    return kreplay_sim_wait(d, result);
}

/* fill x with 7, y = 3x + y, sum += y, g_hits += 5. With a tool, `*seen` receives what the
 * tool saw of axpy_rmw alone. */
static void kr_work_run(kreplay_sim_t sim, const kr_work* w, kr_tool* t,
                        kreplay_sim_result_t results[4], kr_tool* seen) {
    KR_OK(kr_run(sim, w->fill, w->x, KR_N, 7, 0, KR_N, &results[0]));
    if (t != NULL) {
        kr_tool_reset(t);
    }
    KR_OK(kr_run(sim, w->axpy, w->x, w->y, KR_N, 3, KR_N, &results[1]));
    if (t != NULL && seen != NULL) {
        *seen = *t;
    }
    KR_OK(kr_run(sim, w->reduce, w->y, KR_N, w->sum, 0, KR_N, &results[2]));
    KR_OK(kr_run(sim, w->inc, w->hits, 5, 0, 0, 1, &results[3]));
}

/* What one execution of the workload leaves in memory. */
static void kr_work_check_memory(kreplay_sim_t sim, const kr_work* w) {
    uint32_t y[KR_N];
    uint64_t sum = 0, hits = 0, expected = 0;
    uint32_t i, bad = 0;
    KR_OK(kreplay_sim_read(sim, w->y, y, sizeof(y)));
    for (i = 0; i < KR_N; i++) {
        bad += y[i] != 21 + i;
        expected += 21 + i;
    }
    KR_CHECK(bad == 0);
    KR_OK(kreplay_sim_read(sim, w->sum, &sum, sizeof(sum)));
    KR_CHECK(sum == expected);
    KR_OK(kreplay_sim_read(sim, w->hits, &hits, sizeof(hits)));
    KR_CHECK(hits == 5);
}

static void kr_check_sim_memory(kreplay_sim_t sim) {
    uint64_t addr[10];
    uint64_t a = 0;
    unsigned char out[16], in[16];
    kreplay_sim_memory_t m;
    int i, j;

    for (i = 0; i < 16; i++) {
        out[i] = (unsigned char)(0xa0 + i);
    }
    for (m = KREPLAY_SIM_MEMORY_DEVICE_COARSE; m <= KREPLAY_SIM_MEMORY_UNTRACKED; m++) {
        addr[m] = 0;
        KR_OK(kreplay_sim_alloc(sim, 0, 4096, m, &addr[m]));
        KR_CHECK(addr[m] != 0);
        KR_OK(kreplay_sim_write(sim, addr[m], out, sizeof(out)));
        memset(in, 0, sizeof(in));
        KR_OK(kreplay_sim_read(sim, addr[m], in, sizeof(in)));
        KR_CHECK(memcmp(in, out, sizeof(in)) == 0);
    }
    for (i = 0; i < 10; i++) {
        for (j = i + 1; j < 10; j++) {
            KR_CHECK(addr[i] != addr[j]);
        }
    }
    /* Agent 1 allocates in its own range. */
    KR_OK(kreplay_sim_alloc(sim, 1, 64, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &a));
    KR_CHECK(a > addr[0]);
    KR_OK(kreplay_sim_free(sim, a));

    /* Bad allocations. */
    KR_EXPECT(kreplay_sim_alloc(sim, 0, 64, KREPLAY_SIM_MEMORY_DEVICE_COARSE, NULL),
              KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_sim_alloc(sim, 0, 64, KREPLAY_SIM_MEMORY_UNTRACKED + 1, &a),
              KREPLAY_STATUS_BAD_ENUM);
    KR_EXPECT(kreplay_sim_alloc(sim, 0, 64, 0xffffffffu, &a), KREPLAY_STATUS_BAD_ENUM);
    KR_EXPECT(kreplay_sim_alloc(sim, 0, 0, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &a),
              KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_sim_alloc(sim, 2, 64, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &a),
              KREPLAY_STATUS_BAD_ARGUMENT);
    KR_ERROR_MENTIONS("agent 2");
    KR_EXPECT(kreplay_sim_alloc(sim, 0, ((uint64_t)1 << 30) + 1,
                                KREPLAY_SIM_MEMORY_DEVICE_COARSE, &a),
              KREPLAY_STATUS_OUT_OF_MEMORY);
    KR_EXPECT(kreplay_sim_alloc(sim, 0, (uint64_t)1 << 62, KREPLAY_SIM_MEMORY_IPC_IMPORTED, &a),
              KREPLAY_STATUS_OUT_OF_MEMORY);
    /* Pinned host memory has 256 MiB. */
    KR_EXPECT(kreplay_sim_alloc(sim, 0, (uint64_t)512 << 20, KREPLAY_SIM_MEMORY_PINNED_HOST, &a),
              KREPLAY_STATUS_OUT_OF_MEMORY);
    KR_ERROR_MENTIONS("pinned");

    /* Bad host accesses. */
    KR_EXPECT(kreplay_sim_write(sim, addr[0], NULL, 4), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_sim_read(sim, addr[0], NULL, 4), KREPLAY_STATUS_NULL_POINTER);
    KR_OK(kreplay_sim_write(sim, addr[0], NULL, 0));
    KR_OK(kreplay_sim_read(sim, addr[0], NULL, 0));
    KR_EXPECT(kreplay_sim_write(sim, 8, out, sizeof(out)), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_sim_read(sim, addr[0] + 4090, in, sizeof(in)), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_sim_write(sim, addr[0], out, ((size_t)1 << 30) + 1),
              KREPLAY_STATUS_BAD_ARGUMENT);

    /* Frees. */
    for (m = KREPLAY_SIM_MEMORY_DEVICE_COARSE; m <= KREPLAY_SIM_MEMORY_UNTRACKED; m++) {
        KR_OK(kreplay_sim_free(sim, addr[m]));
    }
    KR_EXPECT(kreplay_sim_free(sim, addr[0]), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_sim_free(sim, 0), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_sim_read(sim, addr[0], in, 4), KREPLAY_STATUS_BAD_ARGUMENT);
}

static void kr_check_sim_modules(kreplay_sim_t sim) {
    kreplay_sim_variable_t vars[2];
    const char* kernels[2];
    const char* names[4];
    kreplay_sim_module_desc_t desc;
    kreplay_sim_module_t module, stale;
    kreplay_sim_kernel_t k;
    uint64_t a = 0;
    uint32_t v = 0;
    int i;

    names[0] = "fill_u32";
    names[1] = "axpy_rmw";
    names[2] = "increment_u64";
    names[3] = "reduce_sum_u32";
    for (i = 0; i < 4; i++) {
        KR_OK(kreplay_sim_kernel_create(sim, names[i], &k));
        KR_CHECK(k.handle != 0);
    }
    KR_EXPECT(kreplay_sim_kernel_create(sim, NULL, &k), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_sim_kernel_create(sim, "fill_u32", NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_sim_kernel_create(sim, "no_such_kernel", &k), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_ERROR_MENTIONS("reduce_sum_u32"); /* the error lists the built-ins */
    KR_EXPECT(kreplay_sim_kernel_create(sim, "\xff", &k), KREPLAY_STATUS_BAD_ARGUMENT);

    memset(vars, 0, sizeof(vars));
    vars[0].name = "g_counter";
    vars[0].size = 8;
    vars[1].name = "c_table";
    vars[1].size = 4;
    vars[1].init = &v;
    vars[1].read_only = 1;
    kernels[0] = "increment_u64";
    kernels[1] = "fill_u32";
    memset(&desc, 0, sizeof(desc));
    KR_EXPECT(kreplay_sim_module_load(sim, 0, NULL, &module), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &module), KREPLAY_STATUS_BAD_SIZE);
    desc.size = 8;
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &module), KREPLAY_STATUS_BAD_SIZE);
    desc.size = sizeof(desc);
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &module), KREPLAY_STATUS_NULL_POINTER);
    desc.name = "kr_modules.co";
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, NULL), KREPLAY_STATUS_NULL_POINTER);
    desc.variable_count = 2;
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &module), KREPLAY_STATUS_NULL_POINTER);
    desc.variables = vars;
    desc.kernel_count = 2;
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &module), KREPLAY_STATUS_NULL_POINTER);
    desc.kernels = kernels;
    desc.variable_count = 5000;
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &module), KREPLAY_STATUS_BAD_ARGUMENT);
    desc.variable_count = 2;
    vars[0].size = 0;
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &module), KREPLAY_STATUS_BAD_ARGUMENT);
    vars[0].size = 8;
    vars[1].read_only = 2;
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &module), KREPLAY_STATUS_BAD_ARGUMENT);
    vars[1].read_only = 1;
    vars[1].name = "g_counter";
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &module), KREPLAY_STATUS_ALREADY_EXISTS);
    vars[1].name = "c_table";
    kernels[1] = "nope";
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &module), KREPLAY_STATUS_BAD_ARGUMENT);
    kernels[1] = "increment_u64";
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &module), KREPLAY_STATUS_ALREADY_EXISTS);
    kernels[1] = "fill_u32";
    KR_EXPECT(kreplay_sim_module_load(sim, 5, &desc, &module), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_OK(kreplay_sim_module_load(sim, 1, &desc, &module));

    KR_OK(kreplay_sim_module_variable(module, "g_counter", &a));
    KR_CHECK(a != 0);
    KR_OK(kreplay_sim_module_variable(module, "c_table", &a));
    KR_EXPECT(kreplay_sim_module_variable(module, "g_other", &a), KREPLAY_STATUS_NOT_FOUND);
    KR_EXPECT(kreplay_sim_module_variable(module, NULL, &a), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_sim_module_variable(module, "g_counter", NULL),
              KREPLAY_STATUS_NULL_POINTER);
    KR_OK(kreplay_sim_module_kernel(module, "fill_u32", &k));
    KR_EXPECT(kreplay_sim_module_kernel(module, "axpy_rmw", &k), KREPLAY_STATUS_NOT_FOUND);
    KR_EXPECT(kreplay_sim_module_kernel(module, "fill_u32", NULL), KREPLAY_STATUS_NULL_POINTER);

    KR_OK(kreplay_sim_module_kernel(module, "increment_u64", &k));
    stale = module;
    KR_OK(kreplay_sim_module_unload(module));
    KR_EXPECT(kreplay_sim_module_unload(stale), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_module_variable(stale, "g_counter", &a), KREPLAY_STATUS_INVALID_HANDLE);
    /* The module's kernels went with it. */
    KR_EXPECT(kreplay_sim_dispatch(sim, 1, 0, k, NULL, 0, kr_grid(1), NULL),
              KREPLAY_STATUS_INVALID_HANDLE);
}

static void kr_check_sim_faults_and_counters(kreplay_sim_t sim, const kr_work* w, kr_tool* t,
                                             uint64_t axpy_id) {
    kreplay_sim_fault_t f;
    kreplay_sim_counter_sample_t sample;
    kreplay_sim_result_t r;
    uint64_t id = 0;
    uint32_t hits = 99, y5 = 0;

    /* Counter selection and reads. */
    KR_EXPECT(kreplay_sim_counter_select(sim, 0, KREPLAY_SIM_COUNTER_NONE + 1),
              KREPLAY_STATUS_BAD_ENUM);
    KR_EXPECT(kreplay_sim_counter_select(sim, 9, KREPLAY_SIM_COUNTER_BYTES_READ),
              KREPLAY_STATUS_BAD_ARGUMENT);
    KR_OK(kreplay_sim_counter_select(sim, 0, KREPLAY_SIM_COUNTER_NONE));
    memset(&sample, 0, sizeof(sample));
    KR_EXPECT(kreplay_sim_counter_read(sim, axpy_id, 0, NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_sim_counter_read(sim, axpy_id, 0, &sample), KREPLAY_STATUS_BAD_SIZE);
    sample.size = sizeof(sample);
    KR_EXPECT(kreplay_sim_counter_read(sim, 999999, 0, &sample), KREPLAY_STATUS_NOT_FOUND);
    KR_EXPECT(kreplay_sim_counter_read(sim, axpy_id, 7, &sample),
              KREPLAY_STATUS_NOT_FOUND);
    KR_OK(kreplay_sim_counter_read(sim, axpy_id, 2, &sample));
    KR_CHECK(sample.pass == 2 && sample.group == KREPLAY_SIM_COUNTER_BYTES_WRITTEN);
    KR_CHECK(sample.value == KR_N * 4);
    KR_OK(kreplay_sim_counter_read(sim, axpy_id, KREPLAY_SIM_LAST_EXECUTION, &sample));
    KR_CHECK(sample.dispatch_id == axpy_id);
    KR_CHECK(strcmp(kreplay_sim_counter_group_name(KREPLAY_SIM_COUNTER_WORK_ITEMS),
                    "work_items") == 0);
    KR_CHECK(strcmp(kreplay_sim_counter_group_name(KREPLAY_SIM_COUNTER_INSTRUCTIONS),
                    "instructions") == 0);
    KR_CHECK(strcmp(kreplay_sim_counter_group_name(KREPLAY_SIM_COUNTER_NONE), "none") == 0);
    KR_CHECK(strcmp(kreplay_sim_counter_group_name(99), "unknown") == 0);

    /* Bad fault descriptions. */
    memset(&f, 0, sizeof(f));
    KR_EXPECT(kreplay_sim_fault_inject(sim, 0, NULL, &id), KREPLAY_STATUS_NULL_POINTER);
    f.size = 4;
    KR_EXPECT(kreplay_sim_fault_inject(sim, 0, &f, &id), KREPLAY_STATUS_BAD_SIZE);
    f.size = sizeof(f);
    f.kind = KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL + 1;
    KR_EXPECT(kreplay_sim_fault_inject(sim, 0, &f, &id), KREPLAY_STATUS_BAD_ENUM);
    f.kind = KREPLAY_SIM_FAULT_TIER_OOM;
    f.tier = 3;
    KR_EXPECT(kreplay_sim_fault_inject(sim, 0, &f, &id), KREPLAY_STATUS_BAD_ENUM);
    KR_ERROR_MENTIONS("tier");
    f.tier = KREPLAY_SIM_TIER_PINNED_HOST;
    f.mode = 2;
    KR_EXPECT(kreplay_sim_fault_inject(sim, 0, &f, &id), KREPLAY_STATUS_BAD_ENUM);
    f.mode = KREPLAY_SIM_FAULT_ONCE;
    f.kind = KREPLAY_SIM_FAULT_FREE_DURING_PASS;
    KR_EXPECT(kreplay_sim_fault_inject(sim, 0, &f, &id), KREPLAY_STATUS_BAD_ARGUMENT);
    f.kind = KREPLAY_SIM_FAULT_PASS_SUBMIT_FAIL;
    f.pass = 2;
    KR_EXPECT(kreplay_sim_fault_inject(sim, 4, &f, &id), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_sim_fault_hits(sim, 1, NULL), KREPLAY_STATUS_NULL_POINTER);

    /* Pass 2 is refused: truncated submit_failed after passes 0 and 1 and the ordinary run on
     * restored memory (3 executions); memory is still one execution (y = 3 * 7 + y once more). */
    KR_OK(kreplay_sim_fault_inject(sim, 0, &f, &id));
    KR_OK(kreplay_sim_fault_hits(sim, id, &hits));
    KR_CHECK(hits == 0);
    KR_OK(kr_run(sim, w->axpy, w->x, w->y, KR_N, 3, KR_N, &r));
    KR_CHECK(r.outcome == KREPLAY_OUTCOME_TRUNCATED);
    KR_CHECK(r.reason == KREPLAY_REASON_SUBMIT_FAILED);
    KR_CHECK(r.executed_passes == 3);
    KR_CHECK(r.completions == 1);
    KR_OK(kreplay_sim_fault_hits(sim, id, &hits));
    KR_CHECK(hits == 1);
    KR_OK(kreplay_sim_read(sim, w->y + 5 * 4, &y5, sizeof(y5)));
    KR_CHECK(y5 == 42 + 5);

    /* A refused launch is the caller's error. */
    memset(&f, 0, sizeof(f));
    f.size = sizeof(f);
    f.kind = KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL;
    f.mode = KREPLAY_SIM_FAULT_ALWAYS;
    KR_OK(kreplay_sim_fault_inject(sim, 0, &f, NULL));
    t->passes = 0;
    KR_EXPECT(kr_run(sim, w->inc, w->hits, 1, 0, 0, 1, &r), KREPLAY_STATUS_DEVICE_ERROR);
    KR_OK(kreplay_sim_fault_clear(sim));
    KR_OK(kr_run(sim, w->inc, w->hits, 1, 0, 0, 1, &r));
    KR_CHECK(r.outcome == KREPLAY_OUTCOME_NOT_REQUESTED && r.executed_passes == 1);
    t->passes = 4;
}

static void kr_check_sim_dispatch_inputs(kreplay_sim_t sim, kreplay_sim_t other,
                                         const kr_work* w, kr_tool* t) {
    kreplay_sim_kernel_t foreign, made_up;
    kreplay_sim_dispatch_t d, stale;
    kreplay_sim_result_t r;
    uint64_t args[3];
    kreplay_status_t s;
    unsigned char big[4097];

    KR_OK(kreplay_sim_kernel_create(other, "fill_u32", &foreign));
    args[0] = w->x;
    args[1] = KR_N;
    args[2] = 7;
    KR_EXPECT(kreplay_sim_dispatch(sim, 0, 0, foreign, args, sizeof(args), kr_grid(1), &d),
              KREPLAY_STATUS_INVALID_HANDLE);
    KR_ERROR_MENTIONS("another simulator");
    made_up.handle = w->fill.handle + 1000;
    KR_EXPECT(kreplay_sim_dispatch(sim, 0, 0, made_up, args, sizeof(args), kr_grid(1), &d),
              KREPLAY_STATUS_INVALID_HANDLE);
    made_up.handle = sim.handle; /* a simulator handle is not a kernel handle */
    KR_EXPECT(kreplay_sim_dispatch(sim, 0, 0, made_up, args, sizeof(args), kr_grid(1), &d),
              KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_dispatch(sim, 2, 0, w->fill, args, sizeof(args), kr_grid(1), &d),
              KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_sim_dispatch(sim, 0, 2, w->fill, args, sizeof(args), kr_grid(1), &d),
              KREPLAY_STATUS_BAD_ARGUMENT);
    KR_ERROR_MENTIONS("queue");
    KR_EXPECT(kreplay_sim_dispatch(sim, 0, 0, w->fill, args, sizeof(args), kr_grid(0), &d),
              KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_sim_dispatch(sim, 0, 0, w->fill, NULL, 8, kr_grid(1), &d),
              KREPLAY_STATUS_NULL_POINTER);
    memset(big, 0, sizeof(big));
    KR_EXPECT(kreplay_sim_dispatch(sim, 0, 0, w->fill, big, sizeof(big), kr_grid(1), &d),
              KREPLAY_STATUS_BAD_ARGUMENT);
    /* A module's kernel runs on the module's agent only. */
    KR_EXPECT(kreplay_sim_dispatch(sim, 1, 0, w->inc, args, sizeof(args), kr_grid(1), &d),
              KREPLAY_STATUS_BAD_ARGUMENT);

    /* Without replay: the kernel faults on a bad address; wait reports it, completion once. */
    t->passes = 0;
    args[0] = 8;
    KR_OK(kreplay_sim_dispatch(sim, 0, 1, w->fill, args, sizeof(args), kr_grid(1), &d));
    memset(&r, 0, sizeof(r));
    r.size = 8;
    KR_EXPECT(kreplay_sim_wait(d, &r), KREPLAY_STATUS_BAD_SIZE); /* the handle is kept */
    r.size = sizeof(r);
    KR_EXPECT(kreplay_sim_wait(d, &r), KREPLAY_STATUS_DEVICE_ERROR);
    KR_ERROR_MENTIONS("memory fault");
    KR_CHECK(r.completions == 1);
    KR_CHECK(r.outcome == KREPLAY_OUTCOME_NOT_REQUESTED);
    stale = d;
    KR_EXPECT(kreplay_sim_wait(stale, &r), KREPLAY_STATUS_INVALID_HANDLE);
    /* Too large a count traps. */
    args[0] = w->x;
    args[1] = (uint64_t)1 << 40;
    KR_OK(kreplay_sim_dispatch(sim, 0, 0, w->fill, args, sizeof(args), kr_grid(1), &d));
    KR_EXPECT(kreplay_sim_wait(d, NULL), KREPLAY_STATUS_DEVICE_ERROR);
    KR_ERROR_MENTIONS("trapped");
    /* A dispatch not kept; then the whole simulator is waited for. */
    args[1] = 0;
    KR_OK(kreplay_sim_dispatch(sim, 0, 0, w->fill, args, sizeof(args), kr_grid(1), NULL));
    KR_OK(kreplay_sim_synchronize(sim));
    s = kreplay_sim_dispatch(sim, 0, 0, w->fill, args, sizeof(args), kr_grid(1), &d);
    KR_CHECK(s == KREPLAY_STATUS_OK);
    KR_OK(kreplay_sim_wait(d, NULL));
    t->passes = 4;
}

/* Runs the workload on `sim` without replay (the owner stopped): the reference. */
static void kr_reference(kr_contexts* c, kreplay_sim_t sim, kr_tool* t, kr_work* w,
                         kreplay_sim_digest_t* digest) {
    kreplay_sim_result_t results[4];
    kreplay_sim_counter_sample_t sample;
    int32_t active = 7;
    int i;

    KR_OK(kreplay_context_stop(c->owner));
    KR_OK(kreplay_replay_is_active(&active));
    KR_CHECK(active == 0);
    kr_work_setup(sim, w);
    kr_tool_reset(t);
    kr_work_run(sim, w, NULL, results, NULL);
    KR_CHECK(t->calls == 0);
    for (i = 0; i < 4; i++) {
        KR_CHECK(results[i].outcome == KREPLAY_OUTCOME_NONE);
        KR_CHECK(results[i].dispatch_id == 0);
        KR_CHECK(results[i].completions == 1);
    }
    kr_work_check_memory(sim, w);
    /* The ordinary runs were not seen by the service: dispatch id 0, no group selected. */
    memset(&sample, 0, sizeof(sample));
    sample.size = sizeof(sample);
    KR_OK(kreplay_sim_counter_read(sim, 0, KREPLAY_SIM_LAST_EXECUTION, &sample));
    KR_CHECK(sample.pass == KREPLAY_SIM_ORDINARY_RUN);
    KR_CHECK(sample.group == KREPLAY_SIM_COUNTER_NONE && sample.value == 0);
    KR_EXPECT(kreplay_sim_digest(sim, 0, NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_sim_digest(sim, 2, digest), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_OK(kreplay_sim_digest(sim, 0, digest));
    KR_OK(kreplay_context_start(c->owner));
    KR_OK(kreplay_replay_is_active(&active));
    KR_CHECK(active == 1);
}

/* A full replay through the C ABI on the simulator. Returns the simulator left alive for
 * kreplay_shutdown() to shut down. */
static kreplay_sim_t kr_check_sim_replay(kr_contexts* c, kr_tool* t) {
    kreplay_sim_t scratch, ref, sim, as_sim, stale_sim;
    kreplay_context_t as_context;
    kreplay_sim_digest_t ref_digest, digest;
    kreplay_sim_result_t results[4];
    kreplay_sim_kernel_t stale_kernel;
    kreplay_sim_module_t stale_module;
    kreplay_sim_dispatch_t pending;
    kr_work w, rw;
    kr_tool seen_storage;
    kr_tool* seen = &seen_storage;
    uint64_t expected[4];
    uint64_t args[2];
    uint64_t a = 0;
    int i;

    /* Creation. */
    KR_EXPECT(kreplay_sim_create(1, NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_sim_create(0, &scratch), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_sim_create(17, &scratch), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_OK(kreplay_sim_create(2, &scratch));
    KR_CHECK(scratch.handle != 0);
    /* Handles of one type are refused as another. */
    as_sim.handle = c->owner.handle;
    KR_EXPECT(kreplay_sim_synchronize(as_sim), KREPLAY_STATUS_INVALID_HANDLE);
    as_context.handle = scratch.handle;
    KR_EXPECT(kreplay_context_start(as_context), KREPLAY_STATUS_INVALID_HANDLE);
    as_sim.handle = 0;
    KR_EXPECT(kreplay_sim_synchronize(as_sim), KREPLAY_STATUS_INVALID_HANDLE);
    KR_ERROR_MENTIONS("simulator");

    kr_check_sim_memory(scratch);
    kr_check_sim_modules(scratch);

    /* The reference: the same workload on a fresh simulator, replay off. */
    KR_OK(kreplay_sim_create(2, &ref));
    kr_reference(c, ref, t, &rw, &ref_digest);

    /* With replay: four passes of every dispatch. */
    KR_OK(kreplay_sim_create(2, &sim));
    t->sim = sim;
    t->toggled = c->counters;
    t->passes = 4;
    kr_work_setup(sim, &w);
    KR_CHECK(w.x == rw.x && w.y == rw.y && w.hits == rw.hits); /* same addresses */
    kr_work_run(sim, &w, t, results, seen);
    for (i = 0; i < 4; i++) {
        KR_CHECK(results[i].outcome == KREPLAY_OUTCOME_REPLAYED);
        KR_CHECK(results[i].reason == KREPLAY_REASON_NONE);
        KR_CHECK(results[i].executed_passes == 4);
        KR_CHECK(results[i].completions == 1);
        KR_CHECK(results[i].dispatch_id != 0);
    }
    KR_CHECK(results[1].dispatch_id == seen->dispatch_id);

    /* What the tool saw of axpy_rmw: SPEC 3 user_data threading, the plan, toggles. */
    KR_CHECK(seen->bad_payload == 0);
    KR_CHECK(seen->config_enters == 1 && seen->config_exits == 1);
    KR_CHECK(seen->passes_entered == 4 && seen->passes_exited == 4);
    KR_CHECK(seen->calls == 2 + 2 * 4);
    KR_CHECK(seen->pass_count_calls == 1 && seen->pass_count_ud == 100);
    KR_CHECK(seen->continue_calls == 3); /* asked after passes 0..N-2 */
    for (i = 0; i < 4; i++) {
        KR_CHECK(seen->enter_ud[i] == 100);
        KR_CHECK(seen->enter_total[i] == 4);
        KR_CHECK(seen->exit_ud[i] == 1000 + (uint64_t)i);
        if (i < 3) {
            KR_CHECK(seen->continue_ud[i] == 1000 + (uint64_t)i);
        }
    }
    KR_CHECK(seen->config_exit_ud == 100);
    KR_EXPECT(seen->stop_status, KREPLAY_STATUS_OK);
    KR_EXPECT(seen->start_status, KREPLAY_STATUS_OK);
    KR_EXPECT(seen->sim_destroy_status, KREPLAY_STATUS_IN_CALLBACK);
    KR_CHECK(seen->participates[0] == 1);
    KR_CHECK(seen->participates[1] == 0); /* stopped in PASS ENTER of pass 1 */
    KR_CHECK(seen->participates[2] == 0); /* sticky for the rest of the loop */
    KR_CHECK(seen->participates[3] == 1); /* started again in pass 3 */
    KR_CHECK(seen->participates_exit[1] == 0 && seen->participates_exit[3] == 1);
    KR_CHECK(seen->outcome == KREPLAY_OUTCOME_REPLAYED);
    KR_CHECK(seen->reason == KREPLAY_REASON_NONE);
    KR_CHECK(seen->requested == 4 && seen->executed == 4);
    /* The window's phases add up to the window, on the window's clock; four passes waited. */
    KR_EXPECT(seen->phases_status, KREPLAY_STATUS_OK);
    KR_CHECK(seen->phases.size == sizeof(kreplay_phases_t));
    {
        const kreplay_phases_t* p = &seen->phases;
        double sum = p->drain + p->plan + p->capture + p->launch + p->wait + p->check +
                     p->restore + p->callbacks + p->finish;
        double tol = 1e-9 * (p->window > 1.0 ? p->window : 1.0);
        KR_CHECK(p->window > 0.0);
        KR_CHECK(sum - p->window <= tol && p->window - sum <= tol);
        KR_CHECK(p->wait > 0.0 && p->launch > 0.0 && p->capture > 0.0);
        KR_CHECK(p->drain >= 0.0 && p->plan >= 0.0 && p->check >= 0.0 && p->restore >= 0.0 &&
                 p->callbacks > 0.0 && p->finish >= 0.0 && p->config_enter >= 0.0);
        KR_CHECK(p->wait <= p->window && p->capture <= p->window);
    }
    /* The first version is the whole struct: one byte less is refused. */
    KR_EXPECT(seen->phases_small_status, KREPLAY_STATUS_BAD_SIZE);
    KR_EXPECT(seen->graph_status, KREPLAY_STATUS_NOT_FOUND);
    KR_CHECK(seen->graph.graph == 0xababababababababULL && seen->graph.node == 0xababababu);
    /* One counter group per pass: work-items, bytes read (x, then y in the update), bytes
     * written, instructions (3 accesses + 2 per element). */
    expected[0] = KR_N;
    expected[1] = 2 * KR_N * 4;
    expected[2] = KR_N * 4;
    expected[3] = 3 + 2 * KR_N;
    for (i = 0; i < 4; i++) {
        KR_EXPECT(seen->sample_status[i], KREPLAY_STATUS_OK);
        KR_CHECK(seen->sample[i].pass == (uint32_t)i);
        KR_CHECK(seen->sample[i].group == (uint32_t)i);
        KR_CHECK(seen->sample[i].value == expected[i]);
        KR_CHECK(seen->sample[i].dispatch_id == seen->dispatch_id);
        KR_CHECK(seen->sample[i].agent_id == 0);
        KR_CHECK(seen->sample[i].gpu_seconds > 0.0);
    }
    /* After the loop the override is gone. */
    {
        int32_t v = 7;
        KR_OK(kreplay_context_participates(c->counters, &v));
        KR_CHECK(v == 1);
    }

    /* Final memory: one execution, the same as without replay. */
    kr_work_check_memory(sim, &w);
    KR_OK(kreplay_sim_digest(sim, 0, &digest));
    KR_CHECK(digest.lo == ref_digest.lo && digest.hi == ref_digest.hi);
    KR_CHECK(digest.lo != 0 || digest.hi != 0);

    kr_check_sim_dispatch_inputs(sim, scratch, &w, t);
    kr_check_sim_faults_and_counters(sim, &w, t, seen->dispatch_id);

    /* A dispatch tagged as a graph's node: CONFIG EXIT reads its graph, node and launch. */
    {
        kreplay_graph_node_t node;
        kreplay_sim_result_t r;
        kreplay_sim_kernel_t k;
        uint64_t cell = 0;
        KR_OK(kreplay_sim_kernel_create(scratch, "increment_u64", &k));
        KR_OK(kreplay_sim_alloc(scratch, 0, 8, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &cell));
        memset(&node, 0, sizeof(node));
        node.size = sizeof(node);
        KR_EXPECT(kreplay_sim_graph_node_set(&node), KREPLAY_STATUS_BAD_ARGUMENT); /* graph 0 */
        KR_ERROR_MENTIONS("graph");
        node.graph = 3;
        node.node = 5;
        node.launch = 2;
        node.serialized = 2;
        KR_EXPECT(kreplay_sim_graph_node_set(&node), KREPLAY_STATUS_BAD_ARGUMENT);
        node.serialized = 1;
        node.size = 8;
        KR_EXPECT(kreplay_sim_graph_node_set(&node), KREPLAY_STATUS_BAD_SIZE);
        node.size = sizeof(node);
        KR_OK(kreplay_sim_graph_node_set(&node));
        kr_tool_reset(t);
        KR_OK(kr_run(scratch, k, cell, 1, 0, 0, 1, &r));
        KR_OK(kreplay_sim_graph_node_set(NULL));
        KR_CHECK(r.outcome == KREPLAY_OUTCOME_REPLAYED && r.executed_passes == 4);
        KR_EXPECT(t->graph_status, KREPLAY_STATUS_OK);
        KR_CHECK(t->graph.size == sizeof(node) && t->graph.graph == 3 && t->graph.node == 5 &&
                 t->graph.launch == 2 && t->graph.serialized == 1);
        /* A whole graph as one workload: no node. */
        node.node = KREPLAY_GRAPH_NODE_NONE;
        node.serialized = 0;
        KR_OK(kreplay_sim_graph_node_set(&node));
        kr_tool_reset(t);
        KR_OK(kr_run(scratch, k, cell, 1, 0, 0, 1, &r));
        KR_OK(kreplay_sim_graph_node_set(NULL));
        KR_EXPECT(t->graph_status, KREPLAY_STATUS_OK);
        KR_CHECK(t->graph.node == KREPLAY_GRAPH_NODE_NONE && t->graph.serialized == 0);
        /* Untagged again: not a graph node. */
        kr_tool_reset(t);
        KR_OK(kr_run(scratch, k, cell, 1, 0, 0, 1, &r));
        KR_EXPECT(t->graph_status, KREPLAY_STATUS_NOT_FOUND);
        KR_EXPECT(t->phases_status, KREPLAY_STATUS_OK);
        {
            uint64_t v = 0;
            KR_OK(kreplay_sim_read(scratch, cell, &v, sizeof(v)));
            KR_CHECK(v == 3); /* three dispatches, each one execution's worth */
        }
    }

    /* Destroy: every handle of the simulator goes stale. */
    KR_OK(kreplay_sim_kernel_create(scratch, "increment_u64", &stale_kernel));
    KR_OK(kreplay_sim_alloc(scratch, 0, 8, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &a));
    args[0] = a;
    args[1] = 1;
    t->passes = 0;
    KR_OK(kreplay_sim_dispatch(scratch, 0, 0, stale_kernel, args, sizeof(args), kr_grid(1),
                               &pending));
    t->passes = 4;
    {
        kreplay_sim_module_desc_t desc;
        memset(&desc, 0, sizeof(desc));
        desc.size = sizeof(desc);
        desc.name = "empty.co";
        KR_OK(kreplay_sim_module_load(scratch, 0, &desc, &stale_module));
    }
    stale_sim = scratch;
    KR_OK(kreplay_sim_destroy(scratch));
    KR_EXPECT(kreplay_sim_destroy(stale_sim), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_synchronize(stale_sim), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_alloc(stale_sim, 0, 8, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &a),
              KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_write(stale_sim, a, &a, sizeof(a)), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_wait(pending, NULL), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_module_unload(stale_module), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_module_kernel(stale_module, "x", &stale_kernel),
              KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_dispatch(sim, 0, 0, stale_kernel, args, sizeof(args), kr_grid(1), NULL),
              KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_counter_select(stale_sim, 0, 0), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_fault_clear(stale_sim), KREPLAY_STATUS_INVALID_HANDLE);
    KR_OK(kreplay_sim_destroy(ref));
    return sim; /* left for kreplay_shutdown() */
}

/* After the owner was destroyed, dispatches run untouched and the tool is never called. */
static void kr_check_sim_after_owner_destroyed(kreplay_sim_t sim, kr_tool* t) {
    kreplay_sim_kernel_t k;
    kreplay_sim_result_t r;
    uint64_t a = 0;
    KR_OK(kreplay_sim_kernel_create(sim, "increment_u64", &k));
    KR_OK(kreplay_sim_alloc(sim, 0, 8, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &a));
    kr_tool_reset(t);
    KR_OK(kr_run(sim, k, a, 1, 0, 0, 1, &r));
    KR_CHECK(r.outcome == KREPLAY_OUTCOME_NONE && r.completions == 1);
    KR_CHECK(t->calls == 0);
}

/* Every simulator function after kreplay_shutdown(). */
static void kr_check_sim_after_shutdown(kreplay_sim_t sim) {
    kreplay_sim_t s2;
    kreplay_sim_kernel_t k;
    kreplay_sim_module_t m;
    kreplay_sim_module_desc_t desc;
    kreplay_sim_dispatch_t d;
    kreplay_sim_counter_sample_t sample;
    kreplay_sim_fault_t f;
    kreplay_sim_digest_t digest;
    uint64_t a = 0;
    uint32_t hits = 0;
    memset(&desc, 0, sizeof(desc));
    desc.size = sizeof(desc);
    desc.name = "late.co";
    memset(&sample, 0, sizeof(sample));
    sample.size = sizeof(sample);
    memset(&f, 0, sizeof(f));
    f.size = sizeof(f);
    k.handle = 1;
    m.handle = 1;
    d.handle = 1;
    KR_EXPECT(kreplay_sim_create(1, &s2), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_destroy(sim), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_synchronize(sim), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_alloc(sim, 0, 8, 0, &a), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_free(sim, a), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_write(sim, a, &a, 8), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_read(sim, a, &a, 8), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_digest(sim, 0, &digest), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_kernel_create(sim, "fill_u32", &k), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_module_load(sim, 0, &desc, &m), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_module_variable(m, "x", &a), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_module_kernel(m, "x", &k), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_module_unload(m), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_dispatch(sim, 0, 0, k, NULL, 0, kr_grid(1), &d),
              KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_wait(d, NULL), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_counter_select(sim, 0, 0), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_counter_read(sim, 1, 0, &sample), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_fault_inject(sim, 0, &f, NULL), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_fault_hits(sim, 1, &hits), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_sim_fault_clear(sim), KREPLAY_STATUS_SHUT_DOWN);
    KR_CHECK(strcmp(kreplay_sim_counter_group_name(1), "bytes_read") == 0);
}

/* ----- Destroying the owner ------------------------------------------------------------------ */

static void kr_check_destroy_owner(kr_contexts* c, kreplay_replay_callback_t callback) {
    kreplay_context_t owner;
    int32_t active = 7;
    KR_OK(kreplay_context_destroy(c->owner));
    KR_OK(kreplay_replay_is_active(&active));
    KR_CHECK(active == 0);
    /* The service keeps its one owner, even destroyed. */
    KR_OK(kreplay_replay_owner(&owner));
    KR_CHECK(owner.handle == c->owner.handle);
    KR_EXPECT(kreplay_configure_replay(c->counters, KREPLAY_SUBSCRIBE_CONFIG, callback, NULL),
              KREPLAY_STATUS_ALREADY_CONFIGURED);
    KR_EXPECT(kreplay_context_start(c->owner), KREPLAY_STATUS_INVALID_HANDLE);
}

/* ----- Shutdown ------------------------------------------------------------------------------ */

static void kr_check_shutdown(kr_contexts* c, kreplay_replay_callback_t callback) {
    kreplay_context_t ctx;
    kreplay_kernel_filter_t f;
    kreplay_summary_t s;
    kreplay_outcome_t fake;
    int32_t v = 0;
    size_t need = 0;
    uint32_t major, minor, patch;
    uint64_t value = 0;
    char buf[64];

    KR_OK(kreplay_shutdown());
    KR_EXPECT(kreplay_shutdown(), KREPLAY_STATUS_SHUT_DOWN);
    KR_ERROR_MENTIONS("shut down");

    memset(&f, 0, sizeof(f));
    f.size = sizeof(f);
    memset(&s, 0, sizeof(s));
    s.size = sizeof(s);
    memset(&fake, 0, sizeof(fake));

    KR_EXPECT(kreplay_context_create(&ctx), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_context_destroy(c->counters), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_context_start(c->counters), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_context_stop(c->counters), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_context_is_active(c->counters, &v), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_context_declare_participant(c->counters, "late", 0),
              KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_context_override(c->counters, &v), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_context_participates(c->counters, &v), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_has_overrides(&v), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_configure_replay(c->counters, KREPLAY_SUBSCRIBE_CONFIG, callback, NULL),
              KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_replay_owner(&ctx), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_replay_is_active(&v), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_replay_start_context(c->counters), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_replay_stop_context(c->counters), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_policy_set("KREPLAY_MAX_PASSES", "4"), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_policy_json(buf, sizeof(buf), &need), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_filter_set(&f), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_outcome_json(&fake, buf, sizeof(buf), &need), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_outcome_sink_set(kr_sink, NULL), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_summary_get(&s), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_summary_json(buf, sizeof(buf), &need), KREPLAY_STATUS_SHUT_DOWN);

    /* The pure functions keep working. */
    KR_OK(kreplay_version(&major, &minor, &patch));
    KR_CHECK(strcmp(kreplay_status_string(KREPLAY_STATUS_SHUT_DOWN),
                    "KREPLAY_STATUS_SHUT_DOWN") == 0);
    KR_OK(kreplay_abi_layout("sizeof(kreplay_replay_payload_t)", &value));
    KR_CHECK(value == sizeof(kreplay_replay_payload_t));
    KR_CHECK(strcmp(kreplay_last_error(), "") == 0);
}

/* Runs every shared check, in order; `callback` is a replay callback in the test's language
 * that forwards to kr_tool_on_replay() with `tool` as its callback_data. */
static void kr_run_common(kreplay_replay_callback_t callback, kr_tool* tool) {
    kr_contexts c;
    kreplay_sim_t left;
    memset(&c, 0, sizeof(c));
    memset(tool, 0, sizeof(*tool));
    kr_the_tool = tool;
    kr_check_layout();
    kr_check_version_and_strings();
    kr_check_contexts(&c);
    kr_check_configure(&c, callback, tool);
    kr_check_toggles_outside_pass_enter(&c);
    kr_check_policy();
    kr_check_filter();
    kr_check_summary_and_outcomes();
    left = kr_check_sim_replay(&c, tool);
    kr_check_destroy_owner(&c, callback);
    kr_check_sim_after_owner_destroyed(left, tool);
    kr_check_shutdown(&c, callback);
    kr_check_sim_after_shutdown(left);
}

#endif /* KREPLAY_TEST_ABI_CASES_H */
