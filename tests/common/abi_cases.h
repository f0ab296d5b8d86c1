/*
 * Checks shared by tests/c/abi_test.c (compiled as C11) and tests/cpp/abi_test.cpp (compiled as
 * C++17), so the header is exercised identically from both languages:
 *
 * - the layout: every sizeof / alignof / offsetof and constant value, compared in both
 *   directions with the table the library exports (a fact missing on either side fails);
 * - every bad input: NULL pointers, a `size` below the first version, out-of-range enumeration
 *   values, made-up and stale handles, a second configure, toggles outside PASS ENTER, calls
 *   after shutdown.
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

#ifdef __cplusplus
#define KR_ALIGNOF(T) alignof(T)
#else
#define KR_ALIGNOF(T) _Alignof(T)
#endif

static int kr_passed = 0;
static int kr_failed = 0;

#define KR_CHECK(cond)                                                                   \
    do {                                                                                 \
        if (cond) {                                                                      \
            kr_passed++;                                                                 \
        } else {                                                                         \
            kr_failed++;                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
        }                                                                                \
    } while (0)

#define KR_EXPECT(call, expected)                                                        \
    do {                                                                                 \
        kreplay_status_t kr_s_ = (call);                                                 \
        if (kr_s_ == (expected)) {                                                       \
            kr_passed++;                                                                 \
        } else {                                                                         \
            kr_failed++;                                                                 \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (last error: %s)\n",     \
                    __FILE__, __LINE__, #call, kreplay_status_string(kr_s_),             \
                    kreplay_status_string(expected), kreplay_last_error());              \
        }                                                                                \
    } while (0)

#define KR_OK(call) KR_EXPECT(call, KREPLAY_STATUS_OK)

/* The last error mentions `needle`. */
#define KR_ERROR_MENTIONS(needle)                                                        \
    do {                                                                                 \
        const char* kr_e_ = kreplay_last_error();                                        \
        if (kr_e_ != NULL && strstr(kr_e_, (needle)) != NULL) {                          \
            kr_passed++;                                                                 \
        } else {                                                                         \
            kr_failed++;                                                                 \
            fprintf(stderr, "%s:%d: last error %s does not mention %s\n", __FILE__,       \
                    __LINE__, kr_e_ ? kr_e_ : "(null)", (needle));                       \
        }                                                                                \
    } while (0)

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
    KR_VAL(KREPLAY_REASON_CAPACITY),
    KR_VAL(KREPLAY_SCOPE_ALL),
    KR_VAL(KREPLAY_SCOPE_ARGUMENTS),
    KR_VAL(KREPLAY_RESTORE_FULL),
    KR_VAL(KREPLAY_RESTORE_DIRTY),
    KR_VAL(KREPLAY_OVERRIDES_HONOURED),
    KR_VAL(KREPLAY_OVERRIDES_UNSUPPORTED),
    KR_VAL(KREPLAY_OVERRIDE_NONE),
    KR_VAL(KREPLAY_OVERRIDE_STOPPED),
    KR_VAL(KREPLAY_OVERRIDE_STARTED),
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
    KR_CHECK(offsetof(kreplay_outcome_t, pass_restored_bytes_count) + sizeof(uint64_t) ==
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
    const char* names[17];
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
    for (s = KREPLAY_STATUS_OK; s <= KREPLAY_STATUS_ALREADY_EXISTS; s++) {
        names[s] = kreplay_status_string(s);
        KR_CHECK(names[s] != NULL && strncmp(names[s], "KREPLAY_STATUS_", 15) == 0);
        KR_CHECK(strcmp(names[s], "KREPLAY_STATUS_UNKNOWN") != 0);
    }
    for (i = 0; i < 17; i++) {
        for (j = i + 1; j < 17; j++) {
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
    s.size = sizeof(s) - 8;
    KR_EXPECT(kreplay_summary_get(&s), KREPLAY_STATUS_BAD_SIZE);
    s.size = sizeof(s);
    KR_OK(kreplay_summary_get(&s));
    KR_CHECK(s.size == sizeof(s));
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

    KR_OK(kreplay_outcome_sink_set(kr_sink, NULL));
    KR_OK(kreplay_outcome_sink_set(kr_sink, &s));
    KR_OK(kreplay_outcome_sink_set(NULL, NULL));
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

/* Runs every shared check, in order; `callback` is a replay callback in the test's language. */
static void kr_run_common(kreplay_replay_callback_t callback, void* data) {
    kr_contexts c;
    memset(&c, 0, sizeof(c));
    kr_check_layout();
    kr_check_version_and_strings();
    kr_check_contexts(&c);
    kr_check_configure(&c, callback, data);
    kr_check_toggles_outside_pass_enter(&c);
    kr_check_policy();
    kr_check_filter();
    kr_check_summary_and_outcomes();
    kr_check_destroy_owner(&c, callback);
    kr_check_shutdown(&c, callback);
}

/* Prints the tally; the process's exit status. */
static int kr_report(void) {
    printf("%d passed, %d failed\n", kr_passed, kr_failed);
    return kr_failed == 0 ? 0 : 1;
}

#endif /* KREPLAY_TEST_ABI_CASES_H */
