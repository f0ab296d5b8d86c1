/*
 * kernel_replay.h -- the C ABI of kernel-replay (libkernel_replay).
 *
 * kernel-replay re-executes one GPU kernel dispatch N times inside one application run and
 * restores the device memory the kernel may change between passes, so a profiler can collect
 * one counter group (or timing, PC sampling, thread trace) per pass. This header is the whole
 * interface a C or C++ tool needs; it is C99 and usable from C++.
 *
 * Conventions
 * -----------
 * - Every type and function is prefixed `kreplay_`, every constant `KREPLAY_`.
 * - Every function that can fail returns a kreplay_status_t (KREPLAY_STATUS_OK = 0) and writes
 *   its results through out-parameters. On failure, kreplay_last_error() describes what was
 *   wrong; out-parameters are left untouched unless a function says otherwise.
 * - Handles (kreplay_context_t) are opaque values checked on every call (slot and generation):
 *   a handle used after kreplay_context_destroy() is answered with
 *   KREPLAY_STATUS_INVALID_HANDLE, never undefined behaviour.
 * - Enumerations are passed and stored as fixed-width integers (the `*_t` typedefs below); the
 *   named constants are the valid values. An out-of-range value is KREPLAY_STATUS_BAD_ENUM.
 * - Structs are versioned by a leading `size` field (bytes, as the writer built the struct).
 *   Fields are only ever appended; a field exists for a reader when its offset is below `size`.
 *   A struct the caller passes in must have `size` >= the size of its first version, else
 *   KREPLAY_STATUS_BAD_SIZE.
 * - Thread safety: every function may be called from any thread. Callbacks run on the thread
 *   that runs the replay window (usually the thread that submitted the dispatch, but a runtime
 *   may use a thread of its own); do not assume a particular thread.
 * - Callbacks must not let C++ exceptions escape (that terminates the process).
 * - After kreplay_shutdown(), every function that touches library state returns
 *   KREPLAY_STATUS_SHUT_DOWN. The pure functions (kreplay_status_string, kreplay_last_error,
 *   kreplay_version, kreplay_version_string, kreplay_abi_table, kreplay_abi_layout,
 *   kreplay_sim_counter_group_name) keep working.
 * - The simulated GPU (kreplay_sim_*, at the end of this header) lets a tool be tested without
 *   a GPU: its dispatches go through the same replay service and reach the same callbacks.
 *   Those functions need the library's `sim` feature, on by default (see that section).
 *
 * The contract behind the operations, phases and payload is SPEC section 3 of kernel-replay.
 */
#ifndef KERNEL_REPLAY_H
#define KERNEL_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------------------------------- */
/* Version                                                                                    */
/* ----------------------------------------------------------------------------------------- */

/** Version of this header; kreplay_version() returns the library's. */
#define KREPLAY_VERSION_MAJOR 0
#define KREPLAY_VERSION_MINOR 1
#define KREPLAY_VERSION_PATCH 0

/* ----------------------------------------------------------------------------------------- */
/* Status codes                                                                               */
/* ----------------------------------------------------------------------------------------- */

/** Result of every fallible function: KREPLAY_STATUS_OK (0) or one of the codes below. */
typedef int32_t kreplay_status_t;

enum kreplay_status {
    /** Success. */
    KREPLAY_STATUS_OK = 0,
    /** A required pointer argument was NULL. */
    KREPLAY_STATUS_NULL_POINTER = 1,
    /** A struct's `size` is smaller than its first version. */
    KREPLAY_STATUS_BAD_SIZE = 2,
    /** An enumeration or flag argument has a value outside its range. */
    KREPLAY_STATUS_BAD_ENUM = 3,
    /** A handle is not one the library handed out, or was destroyed (stale generation). Also:
     *  an outcome pointer outside the callback that received it. */
    KREPLAY_STATUS_INVALID_HANDLE = 4,
    /** The replay service is already configured: one context per process owns it, for the
     *  life of the process, even after that context stopped or was destroyed (SPEC 3). */
    KREPLAY_STATUS_ALREADY_CONFIGURED = 5,
    /** Nothing has configured the replay service yet. */
    KREPLAY_STATUS_NOT_CONFIGURED = 6,
    /** The function may not be called from inside a library callback (configure, destroy a
     *  context, set the outcome sink, shutdown). */
    KREPLAY_STATUS_IN_CALLBACK = 7,
    /** A context toggle outside a PASS ENTER callback of an active replay loop (SPEC 5). */
    KREPLAY_STATUS_CONTEXT_ERROR = 8,
    /** A local start of a context that was not active when the replay loop began (SPEC 5). */
    KREPLAY_STATUS_CONTEXT_NOT_STARTED = 9,
    /** A toggle on a context with a participant that cannot honour per-pass overrides. */
    KREPLAY_STATUS_UNSUPPORTED = 10,
    /** A policy variable or filter value was rejected; kreplay_last_error() names it. */
    KREPLAY_STATUS_POLICY_ERROR = 11,
    /** An internal error (a caught panic inside the library); the call had no effect or a
     *  partial one, described by kreplay_last_error(). */
    KREPLAY_STATUS_INTERNAL = 12,
    /** kreplay_shutdown() was called; the library does nothing more. */
    KREPLAY_STATUS_SHUT_DOWN = 13,
    /** An argument is malformed (a string that is not UTF-8, an unknown name, a count out of
     *  range). */
    KREPLAY_STATUS_BAD_ARGUMENT = 14,
    /** The caller's buffer is too small; `*required` holds the size needed. */
    KREPLAY_STATUS_BUFFER_TOO_SMALL = 15,
    /** The thing to create exists already (a participant of that name on the context). */
    KREPLAY_STATUS_ALREADY_EXISTS = 16,
    /** The simulated device reported an error: a kernel's memory fault or trap, a refused
     *  launch, a simulator shut down under the call. */
    KREPLAY_STATUS_DEVICE_ERROR = 17,
    /** The simulated device (or one of its pools) is out of memory. */
    KREPLAY_STATUS_OUT_OF_MEMORY = 18,
    /** Nothing of that name or id exists (a module variable, a counter sample). */
    KREPLAY_STATUS_NOT_FOUND = 19
};

/**
 * The symbolic name of a status code ("KREPLAY_STATUS_OK", ...), or "KREPLAY_STATUS_UNKNOWN"
 * for a value outside the list. Never NULL; the string is static.
 */
const char* kreplay_status_string(kreplay_status_t status);

/**
 * A description of why the last failing call on this thread failed, or "" when the last call
 * on this thread succeeded. Never NULL. The string belongs to the library and stays valid until
 * the next kreplay_ call on this thread.
 */
const char* kreplay_last_error(void);

/**
 * The library's version. All three pointers are required (KREPLAY_STATUS_NULL_POINTER).
 * Compare with KREPLAY_VERSION_* to detect a header/library mismatch.
 */
kreplay_status_t kreplay_version(uint32_t* major, uint32_t* minor, uint32_t* patch);

/** The library's version as "MAJOR.MINOR.PATCH". Never NULL; the string is static. */
const char* kreplay_version_string(void);

/* ----------------------------------------------------------------------------------------- */
/* Enumerations                                                                               */
/* ----------------------------------------------------------------------------------------- */

/** kreplay_operation: which operation a callback reports. */
typedef uint32_t kreplay_operation_t;
enum kreplay_operation {
    KREPLAY_OPERATION_NONE = 0,
    /** Once per candidate dispatch (SPEC 3). */
    KREPLAY_OPERATION_CONFIG = 1,
    /** Once per executed pass. */
    KREPLAY_OPERATION_PASS = 2,
    KREPLAY_OPERATION_LAST = 3
};

/** kreplay_phase: enter or exit of an operation. */
typedef uint32_t kreplay_phase_t;
enum kreplay_phase {
    KREPLAY_PHASE_NONE = 0,
    KREPLAY_PHASE_ENTER = 1,
    KREPLAY_PHASE_EXIT = 2
};

/** kreplay_subscription: bit flags of the operations a replay callback receives. */
typedef uint32_t kreplay_subscription_t;
enum kreplay_subscription {
    /** CONFIG ENTER / EXIT. Required: only a CONFIG subscriber can start replay. */
    KREPLAY_SUBSCRIBE_CONFIG = 1,
    /** PASS ENTER / EXIT. */
    KREPLAY_SUBSCRIBE_PASS = 2
};

/** kreplay_outcome_kind: how a candidate dispatch ended (SPEC 8). */
typedef uint32_t kreplay_outcome_kind_t;
enum kreplay_outcome_kind {
    KREPLAY_OUTCOME_NONE = 0,
    /** Every planned pass ran. */
    KREPLAY_OUTCOME_REPLAYED = 1,
    /** Ran once, unreplayed, for a reason. */
    KREPLAY_OUTCOME_DECLINED = 2,
    /** The loop stopped early, safely. */
    KREPLAY_OUTCOME_TRUNCATED = 3,
    /** The tool asked for no replay. */
    KREPLAY_OUTCOME_NOT_REQUESTED = 4
};

/** kreplay_reason: why a dispatch was declined or truncated (SPEC 8). */
typedef uint32_t kreplay_reason_t;
enum kreplay_reason {
    KREPLAY_REASON_NONE = 0,
    KREPLAY_REASON_UNTRACKED_MEMORY = 1,
    KREPLAY_REASON_FOOTPRINT_BUDGET = 2,
    KREPLAY_REASON_SNAPSHOT_FAILED = 3,
    KREPLAY_REASON_QUEUE_DRAIN_STUCK = 4,
    KREPLAY_REASON_AGENT_DRAIN_STUCK = 5,
    KREPLAY_REASON_COPY_FENCE_STUCK = 6,
    KREPLAY_REASON_REENTRANT_DISPATCH = 7,
    KREPLAY_REASON_CALLBACK_FAILED = 8,
    KREPLAY_REASON_PASS_DRAIN_STUCK = 9,
    KREPLAY_REASON_PASS_LIMIT = 10,
    KREPLAY_REASON_WRITE_OUTSIDE_SCOPE = 11,
    /** The backend refused to submit a pass. */
    KREPLAY_REASON_SUBMIT_FAILED = 12,
    /** The after-pass scope check could not be made. */
    KREPLAY_REASON_SCOPE_CHECK_FAILED = 13,
    /** A drain, pass or restore reported an error (not a timeout): a fault in the kernel or a
     *  sticky context error. A lost context skips what is left of the restore (no abort); the
     *  application gets the driver's error from its own next call. */
    KREPLAY_REASON_DEVICE_ERROR = 14,
    /** Another window held the agent when the dispatch arrived, and it was resumed where no
     *  window can run (HSA: the runtime's async-events thread): it ran once. */
    KREPLAY_REASON_AGENT_BUSY = 15,
    /** The kernel writes memory no snapshot can see (surfaces, device heap, device printf,
        device-side graph launches, tensor maps outside the scope). */
    KREPLAY_REASON_UNSEEN_WRITES = 16,
    /** Capacity of the per-reason arrays of kreplay_summary_t; reasons stay below it. */
    KREPLAY_REASON_CAPACITY = 32
};

/** kreplay_scope: which memory a snapshot covers (SPEC 7.2). */
typedef uint32_t kreplay_scope_t;
enum kreplay_scope {
    KREPLAY_SCOPE_ALL = 0,
    KREPLAY_SCOPE_ARGUMENTS = 1,
    /** The policy default, resolved per dispatch (SPEC 7.2); an outcome names what ran, never
     *  this (its JSON's scope_auto says that auto chose it). */
    KREPLAY_SCOPE_AUTO = 2,
    /** Predicted chunks inside the regions the arguments reach; what `auto`
     *  resolves to where it would pick `arguments`. */
    KREPLAY_SCOPE_PREDICTED = 3
};

/** kreplay_predict_source: how scope `predicted` chose its chunks. */
typedef uint32_t kreplay_predict_source_t;
enum kreplay_predict_source {
    KREPLAY_PREDICT_SOURCE_NONE = 0,
    KREPLAY_PREDICT_SOURCE_FIRST_RULE = 1,
    KREPLAY_PREDICT_SOURCE_LEARNED = 2
};

/** kreplay_predict_fallback: why scope `predicted` planned a region scope. */
typedef uint32_t kreplay_predict_fallback_t;
enum kreplay_predict_fallback {
    KREPLAY_PREDICT_FALLBACK_NONE = 0,
    KREPLAY_PREDICT_FALLBACK_FITS_DEVICE = 1,
    KREPLAY_PREDICT_FALLBACK_SMALL_REGIONS = 2,
    KREPLAY_PREDICT_FALLBACK_REPEATED_MISSES = 3,
    KREPLAY_PREDICT_FALLBACK_UNKNOWN_LAYOUT = 4,
    /** Capacity of kreplay_summary_t's per-fallback array; fallbacks stay below it. */
    KREPLAY_PREDICT_FALLBACK_CAPACITY = 8
};

/** kreplay_restore: how memory is put back between passes (SPEC 7.4). */
typedef uint32_t kreplay_restore_t;
enum kreplay_restore {
    KREPLAY_RESTORE_FULL = 0,
    KREPLAY_RESTORE_DIRTY = 1,
    /** The policy default, resolved per dispatch (SPEC 8); an outcome names what ran, never
     *  this (its JSON's restore_auto says that auto chose it). */
    KREPLAY_RESTORE_AUTO = 2
};

/** kreplay_override_support: whether a participant honours per-pass overrides (SPEC 5). */
typedef uint32_t kreplay_override_support_t;
enum kreplay_override_support {
    /** Consults kreplay_context_participates() before contributing to each pass. */
    KREPLAY_OVERRIDES_HONOURED = 0,
    /** Cannot switch per pass: a toggle on its context returns KREPLAY_STATUS_UNSUPPORTED. */
    KREPLAY_OVERRIDES_UNSUPPORTED = 1
};

/** Values written by kreplay_context_override(). */
enum kreplay_override {
    /** No local override: use the context's global state. */
    KREPLAY_OVERRIDE_NONE = -1,
    /** Locally stopped for the rest of this loop. */
    KREPLAY_OVERRIDE_STOPPED = 0,
    /** Locally started for the rest of this loop. */
    KREPLAY_OVERRIDE_STARTED = 1
};

/* ----------------------------------------------------------------------------------------- */
/* Basic types                                                                                */
/* ----------------------------------------------------------------------------------------- */

/** The tool's per-dispatch value: a number or a pointer (SPEC 3 `user_data`). */
typedef union kreplay_user_data_t {
    uint64_t value;
    void* ptr;
} kreplay_user_data_t;

/** An opaque context handle. 0 is never a valid handle. */
typedef struct kreplay_context_t {
    uint64_t handle;
} kreplay_context_t;

/** A three-dimensional launch size. */
typedef struct kreplay_dim3_t {
    uint32_t x;
    uint32_t y;
    uint32_t z;
} kreplay_dim3_t;

/** What a tool sees of a dispatch (SPEC 3). Owned by the library; valid during the callback
 *  that received it (and, for the pass-count and continue callbacks, during that call). */
typedef struct kreplay_dispatch_info_t {
    /** sizeof(kreplay_dispatch_info_t) as the library built it. */
    uint64_t size;
    /** Agent (device) that runs the dispatch, as the backend numbers it. */
    uint64_t agent_id;
    /** Queue (HSA queue, CUDA stream) it was submitted to. */
    uint64_t queue_id;
    /** Reserved by the library before CONFIG; the same for every pass and a declined run. */
    uint64_t dispatch_id;
    /** The kernel object (code handle). */
    uint64_t kernel_id;
    /** The kernel's symbol name, NUL-terminated. */
    const char* kernel_name;
    /** Grid size in work-items. */
    kreplay_dim3_t grid;
    /** Workgroup size in work-items. */
    kreplay_dim3_t workgroup;
    /** Private (scratch) segment bytes per work-item. */
    uint32_t private_segment_size;
    /** Group (LDS / shared) segment bytes per workgroup. */
    uint32_t group_segment_size;
} kreplay_dispatch_info_t;

/* ----------------------------------------------------------------------------------------- */
/* Outcome records and the run summary (SPEC 8)                                              */
/* ----------------------------------------------------------------------------------------- */

/** One candidate dispatch's outcome. Owned by the library and valid only during the callback
 *  that received it (CONFIG EXIT, or the outcome sink); copy what you keep. The window's time
 *  by phase and the graph node a dispatch ran as are read through kreplay_outcome_phases()
 *  and kreplay_outcome_graph_node() (versioned structs of their own, so this one keeps its
 *  layout); kreplay_outcome_json() has them too (`phases`, `graph`). */
typedef struct kreplay_outcome_t {
    /** sizeof(kreplay_outcome_t) as the library built it. */
    uint64_t size;
    uint64_t dispatch_id;
    uint64_t agent_id;
    /** Kernel name, NUL-terminated. */
    const char* kernel;
    /** A kreplay_outcome_kind value. */
    kreplay_outcome_kind_t outcome;
    /** A kreplay_reason value (KREPLAY_REASON_NONE when replayed in full). */
    kreplay_reason_t reason;
    /** Passes the tool asked for (0 = open-ended or none), before clamping to max_passes. */
    uint64_t requested_passes;
    /** Passes that ran (1 for a declined or unrequested dispatch). */
    uint32_t executed_passes;
    /** A kreplay_scope value. */
    kreplay_scope_t scope;
    /** A kreplay_restore value. */
    kreplay_restore_t restore;
    uint32_t captured_regions;
    /** All tracked bytes of the agent. */
    uint64_t tracked_bytes;
    uint64_t captured_bytes;
    /** Captured bytes per snapshot tier. */
    uint64_t tier_device_bytes;
    uint64_t tier_pinned_bytes;
    uint64_t tier_pageable_bytes;
    /** Untracked bytes and regions (virtual-memory mappings included). */
    uint64_t untracked_bytes;
    uint32_t untracked_regions;
    /** 1 for tool work launched from inside a callback. */
    uint32_t reentrancy;
    double snap_seconds;
    double restore_seconds;
    /** Totals over the window. */
    uint64_t compared_bytes;
    uint64_t restored_bytes;
    /** GPU seconds of each executed pass: pass_gpu_seconds_count values. */
    const double* pass_gpu_seconds;
    uint64_t pass_gpu_seconds_count;
    /** Bytes restored before each pass (0 before the first): pass_restored_bytes_count values. */
    const uint64_t* pass_restored_bytes;
    uint64_t pass_restored_bytes_count;
    /** Bytes compared (digested) before each pass, for a `dirty` restore and the `arguments`
     *  scope check (0 before the first): pass_compared_bytes_count values. */
    const uint64_t* pass_compared_bytes;
    uint64_t pass_compared_bytes_count;
    /* Scope `predicted`; present when `size` reaches them. */
    /** Bytes captured because the prediction named them. */
    uint64_t predicted_bytes;
    /** Digest chunks found written outside the prediction (the dispatch then truncated). */
    uint32_t prediction_misses;
    /** A kreplay_predict_source value: how the predicted chunks were chosen. */
    kreplay_predict_source_t predict_source;
    /** A kreplay_predict_fallback value: why scope `predicted` planned a region scope. */
    kreplay_predict_fallback_t predict_fallback;
    /** Zero; keeps the struct free of tail padding. */
    uint32_t reserved0;
} kreplay_outcome_t;

/** Aggregate over the run (SPEC 8). Filled by kreplay_summary_get(). */
typedef struct kreplay_summary_t {
    /** Set by the caller to sizeof(kreplay_summary_t) (at least the first version's 608 bytes,
     *  which end at truncated_by_reason); the library writes back its own size when that is
     *  smaller, and writes no field past the caller's size. */
    uint64_t size;
    /** Candidate dispatches seen (tool work included). */
    uint64_t dispatches;
    uint64_t replayed;
    /** Declined and truncated, all reasons. */
    uint64_t declined;
    uint64_t truncated;
    uint64_t not_requested;
    /** Passes executed. */
    uint64_t passes;
    uint64_t captured_bytes;
    uint64_t compared_bytes;
    uint64_t restored_bytes;
    /** Peak bytes in backing and staging pools. */
    uint64_t peak_pooled_bytes;
    /** Time spent in replay windows. */
    double replay_seconds;
    /** Declines and truncations by reason, indexed by kreplay_reason values. */
    uint64_t declined_by_reason[KREPLAY_REASON_CAPACITY];
    uint64_t truncated_by_reason[KREPLAY_REASON_CAPACITY];
    /* Second version: a caller whose size ends here still gets the fields above. */
    /** Windows that ran passes under scope `predicted`. */
    uint64_t predicted;
    /** Bytes they captured because the prediction named them. */
    uint64_t predicted_bytes;
    /** Windows that found a write outside their prediction (and truncated). */
    uint64_t prediction_misses;
    /** Dispatches whose scope `predicted` planned a region scope, indexed by
     *  kreplay_predict_fallback values. */
    uint64_t predict_fallback_by_reason[KREPLAY_PREDICT_FALLBACK_CAPACITY];
} kreplay_summary_t;

/**
 * Where a dispatch's replay window spent its time (SPEC 11), in seconds on the window's clock
 * (the simulator's and the backends' own clock; wall time on a GPU). Filled by
 * kreplay_outcome_phases(). The window is measured as laps: every boundary between two phases
 * reads the clock once, so `drain` + `plan` + `capture` + `launch` + `wait` + `check` +
 * `restore` + `callbacks` + `finish` equals `window` (up to float rounding); `config_enter`
 * is outside the window. In CONFIG EXIT the phases run up to the start of CONFIG EXIT; the
 * outcome sink's record has the whole window (CONFIG EXIT and the completion signal in
 * `callbacks` and `finish`). A dispatch without a window (not requested, tool work) has
 * zeros but for `config_enter`.
 */
typedef struct kreplay_phases_t {
    /** Set by the caller to sizeof(kreplay_phases_t) (at least the first version's 96 bytes);
     *  the library writes back its own size when that is smaller, and no field past the
     *  caller's size. */
    uint64_t size;
    /** The whole window, from the writer lock to its end: the sum of the nine phases below. */
    double window;
    /** Waiting for writes begun before the window; the queue, agent and copy-fence drains. */
    double drain;
    /** Resolving `auto`, the kernel memo, the snapshot plan and admission. */
    double plan;
    /** The snapshot's capture. */
    double capture;
    /** Every pass's cache flush and submission. */
    double launch;
    /** Every pass's bounded wait for completion. */
    double wait;
    /** The scope checks after the passes (digests of what is watched). */
    double check;
    /** Restores between passes, and completing a restore ordered on the device. */
    double restore;
    /** The tool's callbacks inside the window: PASS ENTER and EXIT, continue, CONFIG EXIT,
     *  and the captures a tool asks for. */
    double callbacks;
    /** Releasing the snapshot, signalling the application's completion, and a declined
     *  dispatch's one ordinary run. */
    double finish;
    /** CONFIG ENTER and the pass-count callback, before the writer lock (not in `window`). */
    double config_enter;
} kreplay_phases_t;

/** `node` of a kreplay_graph_node_t for a whole graph profiled as one workload (CUDA's graph
 *  profiling mode `graph`). */
#define KREPLAY_GRAPH_NODE_NONE 0xFFFFFFFFu

/**
 * The graph node a dispatch ran as: a CUDA graph launched node by node runs each kernel node
 * as a dispatch of its own, through the replay window (SPEC 9.2). Filled by
 * kreplay_outcome_graph_node(). The same numbers as the `graph`, `node` and `graph_launch`
 * columns of the counter outputs.
 */
typedef struct kreplay_graph_node_t {
    /** Set by the caller to sizeof(kreplay_graph_node_t) (at least the first version's 32
     *  bytes); written back as kreplay_phases_t's is. */
    uint64_t size;
    /** The executable graph, numbered from 1 per process in instantiation order. */
    uint64_t graph;
    /** Which launch of that graph, from 0. */
    uint64_t launch;
    /** The node: its position in the order the graph is unrolled (stable across launches);
     *  KREPLAY_GRAPH_NODE_NONE for a whole graph profiled as one workload. */
    uint32_t node;
    /** 1 when branches of the graph that could have run concurrently ran one after another
     *  while it was replayed, else 0. */
    uint32_t serialized;
} kreplay_graph_node_t;

/* ----------------------------------------------------------------------------------------- */
/* The replay contract (SPEC 3, 4)                                                            */
/* ----------------------------------------------------------------------------------------- */

/**
 * Pass-count callback: asked once, after CONFIG ENTER, with the dispatch and the sequence
 * `user_data`. Returns the number of passes (SPEC 4): 0 or 1 = no replay (0 with a continue
 * callback = open-ended); N >= 2 = N passes, clamped to the policy's max_passes.
 *
 * There is no separate closure argument: `user_data` is the closure. Leave a pointer to your
 * state in `user_data` in CONFIG ENTER and it comes back here.
 */
typedef uint64_t (*kreplay_pass_count_callback_t)(const kreplay_dispatch_info_t* dispatch_info,
                                                  kreplay_user_data_t user_data);

/**
 * Continue callback: asked after a pass with that pass's `user_data` (SPEC 4). Returns 0 to
 * stop, a positive value to go on. A negative value breaks the contract: the loop ends with
 * outcome truncated, reason callback_failed.
 */
typedef int32_t (*kreplay_continue_callback_t)(const kreplay_dispatch_info_t* dispatch_info,
                                               uint32_t current_pass, uint32_t total_passes,
                                               kreplay_user_data_t user_data);

/**
 * A context toggle (SPEC 5): kreplay_replay_start_context / kreplay_replay_stop_context.
 * Usable only inside a PASS ENTER callback; elsewhere KREPLAY_STATUS_CONTEXT_ERROR.
 */
typedef kreplay_status_t (*kreplay_context_toggle_t)(kreplay_context_t context);

/**
 * What a replay callback sees (SPEC 3). C layout is ABI: the field order is fixed, fields are
 * only appended, and there is no tail padding (64 bytes on LP64 platforms). A zero-filled
 * payload means "do not replay".
 *
 * `dispatch_info` is a pointer (not an embedded struct) so that the dispatch info can grow,
 * versioned by its own `size`, without moving the payload's later fields.
 */
typedef struct kreplay_replay_payload_t {
    /** sizeof(kreplay_replay_payload_t) as the library built it. */
    uint64_t size;
    /** The dispatch; valid during the callback. */
    const kreplay_dispatch_info_t* dispatch_info;
    /** 0-based index of this pass (0 in CONFIG). */
    uint32_t current_pass;
    /** N for a fixed loop after clamping, 0 for an open-ended loop (0 in CONFIG). */
    uint32_t total_passes;
    /** Written by the tool in CONFIG ENTER (NULL = no replay); NULL and ignored elsewhere. */
    kreplay_pass_count_callback_t replay_pass_count;
    /** Written by the tool in CONFIG ENTER. In PASS the library shows the callback in effect;
     *  a value written in PASS EXIT replaces it for the decision after this pass only (NULL:
     *  a fixed loop goes on, an open-ended loop stops). Ignored in other phases. */
    kreplay_continue_callback_t replay_continue;
    /** Library-provided toggles, usable only inside PASS ENTER (SPEC 5). Never NULL. */
    kreplay_context_toggle_t replay_start_context;
    kreplay_context_toggle_t replay_stop_context;
    /** The outcome, in CONFIG EXIT only (NULL elsewhere); valid during the callback. */
    const kreplay_outcome_t* outcome;
} kreplay_replay_payload_t;

/**
 * The tool's replay callback, called for each operation and phase it subscribed to.
 *
 * `user_data` threading (SPEC 3): the value the tool leaves in CONFIG ENTER is the sequence
 * value. It is passed to the pass-count callback, to every PASS ENTER and to CONFIG EXIT. Each
 * pass works on its own copy: what PASS ENTER writes is seen by that pass's EXIT and by the
 * continue callback called after it; the next pass starts again from the sequence value.
 *
 * `callback_data` is the pointer given to kreplay_configure_replay().
 */
typedef void (*kreplay_replay_callback_t)(kreplay_operation_t operation, kreplay_phase_t phase,
                                          kreplay_replay_payload_t* payload,
                                          kreplay_user_data_t* user_data, void* callback_data);

/** Receives every outcome record (tool work included), on the thread that ran the window. */
typedef void (*kreplay_outcome_sink_t)(const kreplay_outcome_t* outcome, void* data);

/* ----------------------------------------------------------------------------------------- */
/* Contexts (SPEC 3, 5)                                                                       */
/* ----------------------------------------------------------------------------------------- */

/**
 * Creates a context: inactive, without participants. `*context` receives its handle.
 * Errors: NULL_POINTER, SHUT_DOWN.
 */
kreplay_status_t kreplay_context_create(kreplay_context_t* context);

/**
 * Destroys a context; its handle becomes stale. If it owns the replay service, replay stops,
 * and this call waits until callbacks running on other threads have returned; no callback is
 * made after it returns (so `callback_data` may be freed). The service stays configured:
 * a later kreplay_configure_replay() returns ALREADY_CONFIGURED.
 * Errors: INVALID_HANDLE, IN_CALLBACK, SHUT_DOWN.
 */
kreplay_status_t kreplay_context_destroy(kreplay_context_t context);

/**
 * Starts a context globally. If it owns the replay service, replay becomes active.
 * Errors: INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_context_start(kreplay_context_t context);

/**
 * Stops a context globally. If it owns the replay service, dispatches then run untouched.
 * A local start made earlier in a running loop stays in force for that loop.
 * Errors: INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_context_stop(kreplay_context_t context);

/**
 * `*active` receives 1 when the context is started globally, else 0.
 * Errors: NULL_POINTER, INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_context_is_active(kreplay_context_t context, int32_t* active);

/**
 * Declares a service (participant: "counters", "pc_sampling", ...) that contributes to passes
 * on behalf of `context`, and whether it honours per-pass overrides (SPEC 5). Declare before
 * replay loops toggle the context. `name` is NUL-terminated UTF-8 and copied.
 * Errors: NULL_POINTER, BAD_ARGUMENT (not UTF-8), BAD_ENUM (`support`), ALREADY_EXISTS
 * (a participant of that name), INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_context_declare_participant(kreplay_context_t context, const char* name,
                                                     kreplay_override_support_t support);

/**
 * For participants: the local override of `context` in the replay loop running on this thread.
 * `*value` receives KREPLAY_OVERRIDE_NONE (use the global state), KREPLAY_OVERRIDE_STOPPED or
 * KREPLAY_OVERRIDE_STARTED.
 * Errors: NULL_POINTER, INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_context_override(kreplay_context_t context, int32_t* value);

/**
 * For participants: `*participates` receives 1 when `context` takes part in the pass being
 * prepared on this thread (its local override if any, else its global state), else 0.
 * Errors: NULL_POINTER, INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_context_participates(kreplay_context_t context, int32_t* participates);

/**
 * The fast path for participants: `*any` receives 1 when any local override exists on this
 * thread, else 0 (then every context follows its global state).
 * Errors: NULL_POINTER, SHUT_DOWN.
 */
kreplay_status_t kreplay_has_overrides(int32_t* any);

/* ----------------------------------------------------------------------------------------- */
/* The replay service                                                                         */
/* ----------------------------------------------------------------------------------------- */

/**
 * Makes `context` the owner of the replay service with `callback` (SPEC 3). Exactly one
 * context per process owns it: a second call returns ALREADY_CONFIGURED, even after the owner
 * stopped or was destroyed. Replay is active while the owner is started
 * (kreplay_context_start), whether it was started before or after this call.
 *
 * `subscription` is a combination of KREPLAY_SUBSCRIBE_* flags. Only a CONFIG subscriber can
 * start replay: a subscription without KREPLAY_SUBSCRIBE_CONFIG is accepted but inert.
 * `callback_data` is passed back to every call of `callback`, from whatever thread runs the
 * window; it must stay valid until the context is destroyed or the library shut down.
 * Errors: NULL_POINTER (`callback`), BAD_ENUM (`subscription` 0 or with unknown bits),
 * INVALID_HANDLE, ALREADY_CONFIGURED, IN_CALLBACK, POLICY_ERROR (a policy variable of the
 * environment is malformed and has not been set through the API since: see "The policy from
 * the environment" below; nothing is configured, kreplay_last_error() names every such
 * variable), SHUT_DOWN.
 */
kreplay_status_t kreplay_configure_replay(kreplay_context_t context,
                                          kreplay_subscription_t subscription,
                                          kreplay_replay_callback_t callback,
                                          void* callback_data);

/**
 * `*owner` receives the context that configured the replay service (possibly destroyed since).
 * Errors: NULL_POINTER, NOT_CONFIGURED, SHUT_DOWN.
 */
kreplay_status_t kreplay_replay_owner(kreplay_context_t* owner);

/**
 * `*active` receives 1 when replay is active (configured and its owner started), else 0.
 * Errors: NULL_POINTER, SHUT_DOWN.
 */
kreplay_status_t kreplay_replay_is_active(int32_t* active);

/**
 * `replay_start_context(ctx)` (SPEC 5): inside a PASS ENTER callback, starts `context` for this
 * thread and this loop only (sticky across passes until changed; gone when the loop ends).
 * The payload's `replay_start_context` points here.
 * Errors: INVALID_HANDLE (checked first), CONTEXT_ERROR (outside PASS ENTER of an active loop),
 * UNSUPPORTED (a participant cannot honour overrides), CONTEXT_NOT_STARTED (not active when the
 * loop began), SHUT_DOWN.
 */
kreplay_status_t kreplay_replay_start_context(kreplay_context_t context);

/**
 * `replay_stop_context(ctx)` (SPEC 5): inside a PASS ENTER callback, stops `context` for this
 * thread and this loop only. The payload's `replay_stop_context` points here.
 * Errors: INVALID_HANDLE, CONTEXT_ERROR, UNSUPPORTED, SHUT_DOWN.
 */
kreplay_status_t kreplay_replay_stop_context(kreplay_context_t context);

/**
 * Inside a PASS ENTER callback, before reading device memory by the tool's own means (its own
 * stream, a host mapping): waits, bounded by the drain timeout, until the restore before this
 * pass is done on the device (SPEC 6 step 8). Where the backend orders restores on the device
 * (CUDA, by default) the restore may still run when PASS ENTER is called; the pass, the cache
 * flush and the library's own memory reads are ordered after it without this call. Outside
 * PASS ENTER, or with nothing pending, it returns at once.
 * Errors: DEVICE_ERROR (the restore did not complete in time, or the device failed).
 */
kreplay_status_t kreplay_pass_sync(void);

/* ----------------------------------------------------------------------------------------- */
/* Capture of one dispatch for standalone replay (SPEC 13)                                    */
/* ----------------------------------------------------------------------------------------- */

/**
 * Inside a PASS ENTER callback: asks for a capture of this pass (SPEC 13) into the new folder
 * `dir` (its parent must exist; an existing non-empty folder is never written over), holding
 * at most `max_bytes` of regions (0: 4 GiB; `kreplay capture --max-bytes`). The capture is
 * this pass's snapshot: the inputs of every region of the snapshot scope as the pass begins
 * and its outputs after it, with the code image, the argument block and the launch
 * configuration (the format is documented in the replay-capture crate; `kreplay replay DIR`
 * runs a CUDA or HSA capture again, and on the simulated GPU knows only `kreplay demo`'s
 * module, so a capture made through kreplay_sim_* is one to read with replay-capture). The
 * pass runs as it would; nothing runs for the capture. One request per callback. A capture that cannot be made (scope over max_bytes, peer or IPC memory, an unknown
 * argument layout, a write outside the scope, a pass that did not complete) leaves no folder;
 * kreplay_capture_result() and kreplay_capture_message() then say why (and a warning is
 * logged). A relative `dir` is resolved against the working directory now.
 * Errors: NULL_POINTER (`dir`), BAD_ARGUMENT (`dir` empty or not UTF-8), CONTEXT_ERROR (outside
 * a PASS ENTER callback, PASS EXIT and CONFIG included), ALREADY_EXISTS (a second request in
 * the same callback, which leaves the first in force; `dir` exists and is not an empty folder;
 * another request still waits to write `dir`), NOT_FOUND (the parent of `dir` does not exist),
 * SHUT_DOWN.
 */
kreplay_status_t kreplay_request_capture(const char* dir, uint64_t max_bytes);

/** kreplay_capture_state: what became of a capture asked for with kreplay_request_capture(). */
typedef uint32_t kreplay_capture_state_t;
enum kreplay_capture_state {
    /** Never reported. */
    KREPLAY_CAPTURE_NONE = 0,
    /** Asked for, not decided yet. A refusal found as the pass begins (the bound, memory a
     *  capture cannot hold, the argument layout) is final at once; otherwise the window
     *  decides after the captured pass's scope check, so a capture being made is still
     *  PENDING in that pass's PASS EXIT. Every request is final by the dispatch's CONFIG
     *  EXIT, and once the application saw the dispatch complete. */
    KREPLAY_CAPTURE_PENDING = 1,
    /** The folder is written and complete. */
    KREPLAY_CAPTURE_WRITTEN = 2,
    /** The window made no capture; kreplay_capture_message() says why. No folder. */
    KREPLAY_CAPTURE_REFUSED = 3,
    /** The capture was made but the folder could not be written; the message names the file. */
    KREPLAY_CAPTURE_WRITE_FAILED = 4
};

/**
 * What became of the last capture asked for into one folder (kreplay_capture_result()).
 * Versioned by `size`, set by the caller.
 */
typedef struct kreplay_capture_result_t {
    uint64_t size;
    /** The dispatch the request was made in. */
    uint64_t dispatch_id;
    /** The byte bound in force (4 GiB where 0 was asked). */
    uint64_t max_bytes;
    /** WRITTEN: bytes of the captured regions (their inputs; the outputs are as many again). */
    uint64_t captured_bytes;
    /** A KREPLAY_CAPTURE_* value. */
    kreplay_capture_state_t state;
    /** The pass the request was made in (the pass captured). */
    uint32_t pass;
    /** WRITTEN: regions in the folder. */
    uint32_t region_count;
    /** Zero. */
    uint32_t reserved0;
} kreplay_capture_result_t;

/**
 * What became of the last capture asked for into `dir` (the same folder as given to
 * kreplay_request_capture(), resolved against the working directory now), from any thread, at
 * any time after the request. The library keeps the last 1024 requests of the process.
 * Errors: NULL_POINTER (`dir`, `result`), BAD_ARGUMENT (`dir` empty or not UTF-8), BAD_SIZE,
 * NOT_FOUND (no request for `dir`, or one older than the last 1024), SHUT_DOWN.
 */
kreplay_status_t kreplay_capture_result(const char* dir, kreplay_capture_result_t* result);

/**
 * The message of the last capture asked for into `dir`, copied into `buffer` as
 * kreplay_policy_json() does: where it was written (WRITTEN), why it was not (REFUSED: scope
 * over the bound, memory a capture cannot hold, an unknown argument layout, a write outside
 * the scope, a pass that did not complete; WRITE_FAILED: the file and the system's error), or
 * that it is still pending.
 * Errors: NULL_POINTER (`dir`, `required`, `buffer` with `buffer_size` > 0), BAD_ARGUMENT,
 * NOT_FOUND, BUFFER_TOO_SMALL, SHUT_DOWN.
 */
kreplay_status_t kreplay_capture_message(const char* dir, char* buffer, size_t buffer_size,
                                         size_t* required);

/* ----------------------------------------------------------------------------------------- */
/* Policy and the kernel filter (SPEC 8, 3)                                                   */
/* ----------------------------------------------------------------------------------------- */

/*
 * The policy from the environment (SPEC 8). The library reads the KREPLAY_* variables (and
 * their upstream ROCPROFILER_KERNEL_REPLAY_* aliases; the KREPLAY_ name wins when both are set)
 * once, when its first function is called. Every well-formed variable is applied. A malformed
 * variable -- a value that does not parse, or that is not valid UTF-8 -- is logged and its
 * setting keeps the default, and the library refuses to start replay on such a policy:
 * kreplay_configure_replay() answers KREPLAY_STATUS_POLICY_ERROR, naming every malformed
 * variable in kreplay_last_error(), until each one has been set through kreplay_policy_set()
 * (under any of its names) or, for the filter's variables (KREPLAY_KERNEL_INCLUDE, _EXCLUDE,
 * KREPLAY_DISPATCH_RANGE, KREPLAY_KERNEL_SKIP, _COUNT), kreplay_filter_set(). The other
 * functions work meanwhile (kreplay_policy_json() shows the policy in force), so a tool can
 * report the problem, fix it, or run without replay. A malformed KREPLAY_LOG leaves the
 * default sink at "info".
 */

/**
 * Sets one policy variable, named as its environment variable: "KREPLAY_MAX_PASSES", its
 * upstream alias "ROCPROFILER_KERNEL_REPLAY_MAX_PASSES", or the bare "MAX_PASSES". Values are
 * parsed as the environment's are (e.g. "16MiB", "500ms", "dirty"). A rejected value leaves the
 * policy unchanged. Setting "KREPLAY_LOG" also changes the level of the library's default
 * stderr log sink. Takes effect from the next dispatch.
 * Errors: NULL_POINTER, BAD_ARGUMENT (not UTF-8), POLICY_ERROR (unknown variable or malformed
 * value; kreplay_last_error() names the variable and what was expected), SHUT_DOWN.
 */
kreplay_status_t kreplay_policy_set(const char* name, const char* value);

/**
 * The policy in force, as JSON, copied into `buffer` with a terminating NUL. `*required`
 * receives the bytes needed (NUL included); when `buffer_size` is smaller, nothing is copied
 * and BUFFER_TOO_SMALL is returned. `buffer` may be NULL when `buffer_size` is 0.
 * Errors: NULL_POINTER, BUFFER_TOO_SMALL, SHUT_DOWN.
 */
kreplay_status_t kreplay_policy_json(char* buffer, size_t buffer_size, size_t* required);

/**
 * The kernel filter (SPEC 3; profilers' -k / -s / -c options). A zero-filled filter (with
 * `size` set) admits every dispatch.
 */
typedef struct kreplay_kernel_filter_t {
    /** Set by the caller to sizeof(kreplay_kernel_filter_t). */
    uint64_t size;
    /** Name patterns to admit (none = all): a pattern with '*' or '?' is a glob over the whole
     *  name, one without matches anywhere in the name. May be NULL when include_count is 0. */
    const char* const* include;
    uint64_t include_count;
    /** Name patterns to refuse; exclusion wins over inclusion. */
    const char* const* exclude;
    uint64_t exclude_count;
    /** Dispatch ids admitted, inclusive: [range_first, range_last]; range_last 0 = no upper
     *  bound (dispatch ids start at 1). */
    uint64_t range_first;
    uint64_t range_last;
    /** Matching dispatches to skip before the first candidate. */
    uint64_t skip;
    /** Most candidates to admit; 0 = no limit. */
    uint64_t count;
} kreplay_kernel_filter_t;

/**
 * Replaces the kernel filter of the policy. Patterns are copied. Counts above 65536 are
 * refused (BAD_ARGUMENT).
 * Errors: NULL_POINTER (`filter`, a pattern array with a non-zero count, or a pattern),
 * BAD_SIZE, BAD_ARGUMENT (not UTF-8, count too large), POLICY_ERROR (an empty pattern,
 * range_last < range_first), SHUT_DOWN.
 */
kreplay_status_t kreplay_filter_set(const kreplay_kernel_filter_t* filter);

/* ----------------------------------------------------------------------------------------- */
/* Outcomes and the summary                                                                   */
/* ----------------------------------------------------------------------------------------- */

/**
 * The outcome record as JSON (the same fields, names as in the log line), copied into
 * `buffer` as kreplay_policy_json() does. `outcome` must be the pointer the library passed to
 * the callback that is running (INVALID_HANDLE otherwise, e.g. a copy, or after it returned).
 * Errors: NULL_POINTER, INVALID_HANDLE, BUFFER_TOO_SMALL, SHUT_DOWN.
 */
kreplay_status_t kreplay_outcome_json(const kreplay_outcome_t* outcome, char* buffer,
                                      size_t buffer_size, size_t* required);

/**
 * The window's time by phase of an outcome (see kreplay_phases_t). Set `phases->size` first.
 * `outcome` must be the pointer the library passed to the callback that is running (CONFIG
 * EXIT, or the outcome sink), as for kreplay_outcome_json().
 * Errors: NULL_POINTER (`outcome` or `phases`), INVALID_HANDLE (`outcome` not live), BAD_SIZE
 * (`phases->size` below 96), BAD_ARGUMENT (`phases` misaligned), SHUT_DOWN.
 */
kreplay_status_t kreplay_outcome_phases(const kreplay_outcome_t* outcome,
                                        kreplay_phases_t* phases);

/**
 * The graph node an outcome's dispatch ran as (see kreplay_graph_node_t). Set `node->size`
 * first. `outcome` as for kreplay_outcome_phases(). A dispatch that did not run from a graph
 * (every dispatch of the simulator, a CUDA launch outside a graph) is NOT_FOUND, and `*node`
 * is left untouched.
 * Errors: NULL_POINTER, INVALID_HANDLE, BAD_SIZE (`node->size` below 32), BAD_ARGUMENT
 * (misaligned), NOT_FOUND (not a graph node), SHUT_DOWN.
 */
kreplay_status_t kreplay_outcome_graph_node(const kreplay_outcome_t* outcome,
                                            kreplay_graph_node_t* node);

/**
 * Installs a function that receives every outcome record (NULL removes it). A previous sink is
 * not called after this returns (the call waits for sink calls running on other threads).
 * Errors: IN_CALLBACK, SHUT_DOWN.
 */
kreplay_status_t kreplay_outcome_sink_set(kreplay_outcome_sink_t sink, void* data);

/**
 * The run summary so far. Set `summary->size = sizeof(kreplay_summary_t)` first. Its counts
 * saturate at UINT64_MAX (a long run's byte totals can get there); they never wrap.
 * Errors: NULL_POINTER, BAD_SIZE, SHUT_DOWN.
 */
kreplay_status_t kreplay_summary_get(kreplay_summary_t* summary);

/**
 * The run summary as JSON, copied into `buffer` as kreplay_policy_json() does.
 * Errors: NULL_POINTER, BUFFER_TOO_SMALL, SHUT_DOWN.
 */
kreplay_status_t kreplay_summary_json(char* buffer, size_t buffer_size, size_t* required);

/* ----------------------------------------------------------------------------------------- */
/* Shutdown                                                                                   */
/* ----------------------------------------------------------------------------------------- */

/**
 * Shuts the library down: replay stops, no callback or sink call is made after this returns
 * (it waits for those running on other threads), every thread the library started is joined,
 * and every handle becomes invalid. Afterwards every stateful function returns SHUT_DOWN
 * (this one too); the library cannot be restarted in this process.
 *
 * Called while other threads are inside the library: a replay window already open on another
 * thread is not cut short (that would leave memory half restored) but runs its remaining
 * passes without the tool -- the callback in progress finishes, no callback starts afterwards,
 * a fixed pass count runs to its end, an open-ended loop stops after the pass in progress --
 * and ends with memory equal to one execution and the application's completion signalled.
 * Shutdown waits for every such window and every kreplay_sim_dispatch() in progress, up to
 * the policy's drain_timeout + pass_timeout (120 s by default), before it shuts the simulators
 * down and releases what they use. Those dispatches return normally (one that keeps a
 * dispatch handle may get SHUT_DOWN instead, the kernel having run). Should a window still be
 * open at that bound, the library is shut down all the same, but its simulators, their
 * threads and the service's tables are left in place (nothing is released under a running
 * window) and DEVICE_ERROR is returned.
 * Errors: IN_CALLBACK, DEVICE_ERROR (a window outlived the bound, see above), SHUT_DOWN.
 */
kreplay_status_t kreplay_shutdown(void);

/* ----------------------------------------------------------------------------------------- */
/* The simulated GPU                                                                          */
/* ----------------------------------------------------------------------------------------- */
/*
 * A simulated runtime ("simulator") with N agents: host-backed device memory of every class of
 * SPEC 7.1, queues and a copy engine with worker threads, built-in kernels, code objects with
 * variables, simulated counters, fault injection. Every kreplay_sim_dispatch() goes through the
 * one replay service of the process on the calling thread, exactly as an intercepted launch on
 * a GPU does: the tool configured with kreplay_configure_replay() gets its CONFIG and PASS
 * callbacks there, and the replay window restores memory between passes.
 *
 * - The simulator runs on the wall clock, the same clock the replay service measures on, so
 *   the policy's timeouts (KREPLAY_PASS_TIMEOUT, ...) are real time.
 * - Addresses are simulated device addresses (64-bit values, not host pointers); move bytes
 *   with kreplay_sim_write() / kreplay_sim_read(). Agent `a` allocates in its own address
 *   range, so two simulators that make the same allocations in the same order get the same
 *   addresses (and comparable digests).
 * - Handles (kreplay_sim_t, kreplay_sim_kernel_t, kreplay_sim_module_t,
 *   kreplay_sim_dispatch_t) are checked like context handles; a handle of one type passed as
 *   another is INVALID_HANDLE. Destroying a simulator invalidates its kernels, modules and
 *   dispatches.
 * - kreplay_shutdown() shuts every simulator left down and joins its worker threads, after
 *   the dispatches in progress on other threads have returned.
 * - Counters never wrap: a simulated counter, a fault's hit count and every kreplay_summary_t
 *   count saturate at the maximum of their type (work_items of a grid whose product exceeds
 *   UINT64_MAX reads UINT64_MAX; hits stop at UINT32_MAX).
 * - These functions may be called from inside replay callbacks (a kernel launched there is
 *   tool work: it runs once, unreplayed), except kreplay_sim_destroy().
 * - Every kreplay_sim_* function below needs the library's `sim` feature, which is on by
 *   default. A library built without it (cargo build -p replay-ffi --no-default-features)
 *   exports none of them; the types and constants of this section stay declared, and stay in
 *   the layout table (kreplay_abi_table), so the header still matches such a library.
 */

/** A simulated runtime. 0 is never a valid handle. */
typedef struct kreplay_sim_t {
    uint64_t handle;
} kreplay_sim_t;

/** A kernel of a simulator (a built-in, or a module's instance of one). */
typedef struct kreplay_sim_kernel_t {
    uint64_t handle;
} kreplay_sim_kernel_t;

/** A code object loaded on one agent of a simulator. */
typedef struct kreplay_sim_module_t {
    uint64_t handle;
} kreplay_sim_module_t;

/** A launched dispatch, until kreplay_sim_wait() releases it. */
typedef struct kreplay_sim_dispatch_t {
    uint64_t handle;
} kreplay_sim_dispatch_t;

/** kreplay_sim_memory: the memory class of a simulated allocation (SPEC 7.1). Module
 *  variables (MODULE_VARIABLE) and constants (READ_ONLY) come from kreplay_sim_module_load. */
typedef uint32_t kreplay_sim_memory_t;
enum kreplay_sim_memory {
    /** Coarse-grained device memory: tracked, captured, restored. */
    KREPLAY_SIM_MEMORY_DEVICE_COARSE = 0,
    /** Fine-grained device memory (host-coherent). */
    KREPLAY_SIM_MEMORY_FINE_GRAINED = 1,
    /** Managed (unified) memory. */
    KREPLAY_SIM_MEMORY_MANAGED = 2,
    /** Pinned host memory, counted against the agent's pinned capacity. */
    KREPLAY_SIM_MEMORY_PINNED_HOST = 3,
    /** Device memory imported from another process: never captured. */
    KREPLAY_SIM_MEMORY_IPC_IMPORTED = 4,
    /** Memory owned by a peer agent, as this agent's tracker sees it. */
    KREPLAY_SIM_MEMORY_PEER = 5,
    /** A virtual-memory mapping (stream-ordered allocator, mapped handle): untracked for
     *  replay; a dispatch that may touch it is declined (untracked_memory) under scope all. */
    KREPLAY_SIM_MEMORY_VIRTUAL_MAPPING = 6,
    /** Kernel-argument memory: excluded from snapshots. */
    KREPLAY_SIM_MEMORY_KERNARG = 7,
    /** Device memory marked as the tool's own: excluded from snapshots. */
    KREPLAY_SIM_MEMORY_TOOL_OWNED = 8,
    /** Device memory the backend never hears of (an unwrapped allocation path): replay
     *  cannot restore it. */
    KREPLAY_SIM_MEMORY_UNTRACKED = 9
};

/** kreplay_sim_counter_group: the simulated counter groups. Like a real counter block, an
 *  execution collects the one group selected on its agent when it was submitted, so a tool
 *  needs one pass per group. */
typedef uint32_t kreplay_sim_counter_group_t;
enum kreplay_sim_counter_group {
    /** Work-items launched (the grid size). */
    KREPLAY_SIM_COUNTER_WORK_ITEMS = 0,
    /** Bytes the kernel loaded. */
    KREPLAY_SIM_COUNTER_BYTES_READ = 1,
    /** Bytes the kernel stored. */
    KREPLAY_SIM_COUNTER_BYTES_WRITTEN = 2,
    /** Modelled instructions (memory accesses plus per-element work). */
    KREPLAY_SIM_COUNTER_INSTRUCTIONS = 3,
    /** Number of groups. */
    KREPLAY_SIM_COUNTER_GROUP_COUNT = 4,
    /** No group: clears the selection; in a sample, nothing was collected. */
    KREPLAY_SIM_COUNTER_NONE = 4
};

/** `pass` argument of kreplay_sim_counter_read(): the latest execution of the dispatch. */
#define KREPLAY_SIM_LAST_EXECUTION 0xFFFFFFFFu
/** `pass` field of a sample taken from the ordinary (unreplayed) run of a dispatch. */
#define KREPLAY_SIM_ORDINARY_RUN 0xFFFFFFFFu

/** kreplay_sim_fault_kind: faults the simulator injects; the comment says what the replay
 *  window makes of each (SPEC 8 reasons). */
typedef uint32_t kreplay_sim_fault_kind_t;
enum kreplay_sim_fault_kind {
    /** Backing memory cannot be allocated in any tier: declined snapshot_failed (with
     *  KREPLAY_SIM_FAULT_ONCE only one allocation fails, and the capture moves that tier's share
     *  to the next tier). */
    KREPLAY_SIM_FAULT_SNAPSHOT_OOM = 0,
    /** Backing memory cannot be allocated in `tier` (the others still work: the capture moves
     *  that tier's share to the next tiers with room). */
    KREPLAY_SIM_FAULT_TIER_OOM = 1,
    /** The first copy batch of a capture fails: declined snapshot_failed. */
    KREPLAY_SIM_FAULT_CAPTURE_COPY_FAIL = 2,
    /** The first copy batch of a capture stalls: declined snapshot_failed. */
    KREPLAY_SIM_FAULT_CAPTURE_COPY_STUCK = 3,
    /** The next queue drain does not complete in time: declined queue_drain_stuck. */
    KREPLAY_SIM_FAULT_QUEUE_DRAIN_STUCK = 4,
    /** The next agent drain does not complete in time: declined agent_drain_stuck. */
    KREPLAY_SIM_FAULT_AGENT_DRAIN_STUCK = 5,
    /** The next copy fence does not complete in time: declined copy_fence_stuck. */
    KREPLAY_SIM_FAULT_COPY_FENCE_STUCK = 6,
    /** Pass `pass` exceeds the pass timeout: truncated pass_drain_stuck. */
    KREPLAY_SIM_FAULT_PASS_STUCK = 7,
    /** Pass `pass` is refused: declined (pass 0) or truncated submit_failed. */
    KREPLAY_SIM_FAULT_PASS_SUBMIT_FAIL = 8,
    /** The first restore copy fails: the replay window aborts the process (SPEC 6). */
    KREPLAY_SIM_FAULT_RESTORE_FAIL = 9,
    /** The next digest batch fails: truncated scope_check_failed (aborts under restore
     *  dirty). */
    KREPLAY_SIM_FAULT_DIGEST_FAIL = 10,
    /** The module-variable enumeration is incomplete: declined untracked_memory. */
    KREPLAY_SIM_FAULT_INCOMPLETE_MODULE_ENUMERATION = 11,
    /** During pass `pass`, the allocation at `address` is freed: the next restore skips it. */
    KREPLAY_SIM_FAULT_FREE_DURING_PASS = 12,
    /** During pass `pass`, the allocation at `address` is freed and made again. */
    KREPLAY_SIM_FAULT_REALLOC_DURING_PASS = 13,
    /** The ordinary submission is refused: kreplay_sim_dispatch() returns DEVICE_ERROR. */
    KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL = 14
};

/** kreplay_sim_fault_mode: how often an injected fault fires. */
typedef uint32_t kreplay_sim_fault_mode_t;
enum kreplay_sim_fault_mode {
    /** At its next occasion only. */
    KREPLAY_SIM_FAULT_ONCE = 0,
    /** At every occasion, until kreplay_sim_fault_clear(). */
    KREPLAY_SIM_FAULT_ALWAYS = 1
};

/** kreplay_sim_tier: a snapshot tier (SPEC 7.3), for KREPLAY_SIM_FAULT_TIER_OOM. */
typedef uint32_t kreplay_sim_tier_t;
enum kreplay_sim_tier {
    KREPLAY_SIM_TIER_DEVICE = 0,
    KREPLAY_SIM_TIER_PINNED_HOST = 1,
    KREPLAY_SIM_TIER_PAGEABLE_HOST = 2
};

/** A fault to inject. Zero-fill it, set `size` and `kind`, and the fields the kind uses. */
typedef struct kreplay_sim_fault_t {
    /** Set by the caller to sizeof(kreplay_sim_fault_t). */
    uint64_t size;
    /** A kreplay_sim_fault_kind value. */
    kreplay_sim_fault_kind_t kind;
    /** A kreplay_sim_fault_mode value. */
    kreplay_sim_fault_mode_t mode;
    /** The 0-based pass, for PASS_STUCK, PASS_SUBMIT_FAIL, FREE_ / REALLOC_DURING_PASS. */
    uint32_t pass;
    /** A kreplay_sim_tier value, for TIER_OOM. */
    kreplay_sim_tier_t tier;
    /** Base of an allocation, for FREE_ / REALLOC_DURING_PASS (non-zero). */
    uint64_t address;
} kreplay_sim_fault_t;

/** One variable of a code object (`__device__` / `__constant__` globals). */
typedef struct kreplay_sim_variable_t {
    /** NUL-terminated UTF-8 name, unique in the module. */
    const char* name;
    /** Size in bytes (1 to 2^30). */
    uint64_t size;
    /** `size` initial bytes, or NULL for zeros. Copied. */
    const void* init;
    /** 1 for a constant (kernels cannot store to it; snapshots skip it), else 0. */
    uint32_t read_only;
    /** 0. */
    uint32_t reserved;
} kreplay_sim_variable_t;

/** A code object to load. */
typedef struct kreplay_sim_module_desc_t {
    /** Set by the caller to sizeof(kreplay_sim_module_desc_t). */
    uint64_t size;
    /** NUL-terminated UTF-8 name. */
    const char* name;
    /** `variable_count` variables (at most 4096; may be NULL when 0). */
    const kreplay_sim_variable_t* variables;
    uint64_t variable_count;
    /** `kernel_count` built-in kernel names the module holds (see kreplay_sim_kernel_create;
     *  at most 4096; may be NULL when 0). */
    const char* const* kernels;
    uint64_t kernel_count;
} kreplay_sim_module_desc_t;

/** What became of a dispatch, filled by kreplay_sim_wait(). */
typedef struct kreplay_sim_result_t {
    /** Set by the caller to sizeof(kreplay_sim_result_t). */
    uint64_t size;
    /** The dispatch id the library reserved; 0 without an outcome record (replay inactive,
     *  or filtered out). */
    uint64_t dispatch_id;
    /** A kreplay_outcome_kind value; KREPLAY_OUTCOME_NONE without an outcome record. */
    kreplay_outcome_kind_t outcome;
    /** A kreplay_reason value. */
    kreplay_reason_t reason;
    /** Passes that ran (0 without an outcome record). */
    uint32_t executed_passes;
    /** How often the application's completion fired: 1, whatever replay did. */
    uint32_t completions;
} kreplay_sim_result_t;

/** What one execution of a dispatch collected, filled by kreplay_sim_counter_read(). */
typedef struct kreplay_sim_counter_sample_t {
    /** Set by the caller to sizeof(kreplay_sim_counter_sample_t). */
    uint64_t size;
    uint64_t agent_id;
    uint64_t dispatch_id;
    /** The 0-based pass, or KREPLAY_SIM_ORDINARY_RUN for the ordinary run. */
    uint32_t pass;
    /** The group collected (a kreplay_sim_counter_group value), or KREPLAY_SIM_COUNTER_NONE. */
    kreplay_sim_counter_group_t group;
    /** Its value; 0 when nothing was collected. Saturates at UINT64_MAX (work_items of a
     *  grid whose product is larger); per-execution byte and instruction counts stay far
     *  below it (a built-in kernel touches at most 256 MiB per buffer). */
    uint64_t value;
    /** Modelled GPU time of the execution. */
    double gpu_seconds;
} kreplay_sim_counter_sample_t;

/** A 128-bit digest of memory. */
typedef struct kreplay_sim_digest_t {
    uint64_t lo;
    uint64_t hi;
} kreplay_sim_digest_t;

/**
 * Creates a simulator with `agent_count` agents (1 to 16), numbered from 0, each with 2 queues
 * (numbered from 0), 1 GiB of device memory, 256 MiB of pinned and 1 GiB of pageable host
 * memory. Its dispatches go through the replay service. `*sim` receives its handle.
 * Errors: NULL_POINTER, BAD_ARGUMENT (`agent_count`), SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_create(uint32_t agent_count, kreplay_sim_t* sim);

/**
 * Destroys a simulator: its kernels, modules and dispatches become invalid, work still queued
 * is dropped, and its worker threads are joined before this returns. A kreplay_sim_dispatch()
 * on it running on another thread (a replay window inside it, with its callbacks) is waited
 * for first, up to the policy's drain_timeout + pass_timeout; past that bound the handle is
 * gone all the same, the runtime is left running until kreplay_shutdown() and DEVICE_ERROR is
 * returned.
 * Errors: INVALID_HANDLE, IN_CALLBACK, DEVICE_ERROR (see above), SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_destroy(kreplay_sim_t sim);

/**
 * Waits until every queue and copy engine of the simulator completed what was submitted.
 * Errors: INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_synchronize(kreplay_sim_t sim);

/**
 * Allocates `size` bytes (1 to 2^30) of class `memory` on `agent`; `*address` receives the
 * simulated device address. Memory is zero-filled.
 * Sizes refused: 0 is BAD_ARGUMENT; above 2^30 (one simulated allocation's limit) is
 * OUT_OF_MEMORY, as is a size the class's pool cannot hold now. Each allocation takes its
 * size rounded up to 4 KiB from its agent's pool: PINNED_HOST from the 256 MiB pinned pool;
 * IPC_IMPORTED and PEER from none (only the 2^30 limit applies); every other class, MANAGED
 * included, from the 1 GiB device pool, which also holds the agent's 64 KiB kernel-argument
 * pool, module variables and the replay's device-tier snapshot backing (pooled between
 * windows), so a size below 1 GiB may still be refused.
 * Errors: NULL_POINTER, BAD_ENUM (`memory`), BAD_ARGUMENT (`size` 0, `agent` out of range),
 * OUT_OF_MEMORY (see above; kreplay_last_error() names the pool), INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_alloc(kreplay_sim_t sim, uint32_t agent, uint64_t size,
                                   kreplay_sim_memory_t memory, uint64_t* address);

/**
 * Frees an allocation made by kreplay_sim_alloc() (`address` is its base).
 * Errors: BAD_ARGUMENT (not the base of a live allocation), INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_free(kreplay_sim_t sim, uint64_t address);

/**
 * Copies `size` bytes (at most 2^30) from `data` to simulated memory at `address`,
 * synchronously (setup and checks; constants included). `data` may be NULL when `size` is 0.
 * Errors: NULL_POINTER, BAD_ARGUMENT (unmapped or out-of-bounds range, size too large),
 * INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_write(kreplay_sim_t sim, uint64_t address, const void* data,
                                   size_t size);

/**
 * Copies `size` bytes (at most 2^30) of simulated memory at `address` to `data`,
 * synchronously. `data` may be NULL when `size` is 0.
 * Errors: NULL_POINTER, BAD_ARGUMENT, INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_read(kreplay_sim_t sim, uint64_t address, void* data, size_t size);

/**
 * `*digest` receives a digest of all application memory of `agent`: every allocation made
 * through the simulator (tracked or not) and every module variable, with its address and size;
 * never kernel-argument, tool or backing memory. Equal memory at equal addresses gives equal
 * digests, across simulators: compare a run with replay against one without.
 * Errors: NULL_POINTER, BAD_ARGUMENT (`agent`), INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_digest(kreplay_sim_t sim, uint32_t agent,
                                    kreplay_sim_digest_t* digest);

/**
 * A built-in kernel by name; `*kernel` receives its handle (valid until the simulator is
 * destroyed). Argument blocks are 8-byte little-endian words, counts in elements:
 *   "fill_u32"        (dst, count, value)   dst[i] = value                      (u32)
 *   "axpy_rmw"        (x, y, count, a)      y[i] = a * x[i] + y[i]   (u32, wrapping;
 *                                           a read-modify-write: replay needs the restore)
 *   "increment_u64"   (ptr, delta)          *ptr += delta            (atomic u64; also on
 *                                           module variables)
 *   "reduce_sum_u32"  (src, count, out)     *out += sum of src[0..count)   (u64 total)
 * A count above 2^26 elements traps; a bad address is a memory fault. Both complete the
 * dispatch with an error that kreplay_sim_wait() reports as DEVICE_ERROR.
 * Errors: NULL_POINTER, BAD_ARGUMENT (unknown name; kreplay_last_error() lists the names),
 * INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_kernel_create(kreplay_sim_t sim, const char* name,
                                           kreplay_sim_kernel_t* kernel);

/**
 * Loads a code object on `agent`: allocates its variables (class MODULE_VARIABLE, READ_ONLY
 * for constants; found by the memory layer at snapshot time) and makes its kernels.
 * `*module` receives its handle.
 * Variables take their size (1 to 2^30; 0 or more than 2^30 is BAD_ARGUMENT) from the agent's 1 GiB
 * device pool: OUT_OF_MEMORY when it cannot hold them, and then nothing is loaded.
 * Errors: NULL_POINTER, BAD_SIZE, BAD_ARGUMENT (agent, a variable of size 0 or above 2^30,
 * read_only not 0/1, reserved not 0, an unknown kernel name, counts above 4096, not UTF-8),
 * ALREADY_EXISTS (a name listed twice), OUT_OF_MEMORY, INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_module_load(kreplay_sim_t sim, uint32_t agent,
                                         const kreplay_sim_module_desc_t* desc,
                                         kreplay_sim_module_t* module);

/**
 * `*address` receives the device address of a module variable.
 * Errors: NULL_POINTER, NOT_FOUND, INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_module_variable(kreplay_sim_module_t module, const char* name,
                                             uint64_t* address);

/**
 * `*kernel` receives a handle to a kernel of a module (it runs only on the module's agent).
 * Errors: NULL_POINTER, NOT_FOUND, INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_module_kernel(kreplay_sim_module_t module, const char* name,
                                           kreplay_sim_kernel_t* kernel);

/**
 * Unloads a code object: its variables are freed, its kernel handles become invalid, and the
 * replay service forgets what it learnt about its kernels.
 * The module's handles (and its kernels') are invalid as soon as this returns. Memory a
 * replay window captured is never pulled from under it: called from a thread outside any
 * callback, this waits until no window is open on the module's agent, then unloads. Called
 * from inside a callback (PASS ENTER of a dispatch of this very module, say), it cannot wait
 * for the window it runs in: the unload is recorded and carried out when that window has
 * closed, before the kreplay_sim_dispatch() that ran it returns. The dispatch's remaining
 * passes therefore see the module as it was captured, and it ends with memory equal to one
 * execution; afterwards the variables' addresses are unmapped (BAD_ARGUMENT to
 * kreplay_sim_read()).
 * Errors: INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_module_unload(kreplay_sim_module_t module);

/**
 * Launches `kernel` on queue `queue` of `agent` over `grid` work-items (every dimension at
 * least 1) with the argument block `args` (`args_size` bytes, at most 4096; copied). The
 * launch goes through the replay service on this thread and returns after the replay window,
 * if there was one (the tool's callbacks ran here); the kernel completes asynchronously.
 * `*dispatch` receives a handle for kreplay_sim_wait(); pass NULL not to keep one.
 * Errors: NULL_POINTER (`args` with a non-zero size), BAD_ARGUMENT (agent, queue, grid, size,
 * a module kernel on another agent), INVALID_HANDLE (`sim`, `kernel`, or a kernel of another
 * simulator), DEVICE_ERROR (the launch was refused), SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_dispatch(kreplay_sim_t sim, uint32_t agent, uint32_t queue,
                                      kreplay_sim_kernel_t kernel, const void* args,
                                      size_t args_size, kreplay_dim3_t grid,
                                      kreplay_sim_dispatch_t* dispatch);

/**
 * Waits until a dispatch completed and releases its handle (a second wait is
 * INVALID_HANDLE). When `result` is not NULL (set `result->size` first) it receives what
 * became of the dispatch, also when the kernel failed.
 * Errors: BAD_SIZE (`result`; the handle is then kept), DEVICE_ERROR (the kernel faulted or
 * trapped, or the simulator was destroyed meanwhile), INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_wait(kreplay_sim_dispatch_t dispatch, kreplay_sim_result_t* result);

/**
 * Tags every kreplay_sim_dispatch() this thread makes from now on, on any simulator, as the
 * graph node `*node` (copied; NULL removes the tag), as a GPU backend unrolling a graph does
 * for each kernel node: the dispatches' outcomes then answer kreplay_outcome_graph_node()
 * with it, and their JSON has it as `graph`. Lets a tool test its graph handling without a GPU.
 * Errors: BAD_SIZE, BAD_ARGUMENT (`graph` 0, `serialized` not 0/1, misaligned), SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_graph_node_set(const kreplay_graph_node_t* node);

/**
 * Selects the counter group executions on `agent` collect from now on
 * (KREPLAY_SIM_COUNTER_NONE: none). A tool calls it in PASS ENTER with the group of that pass:
 * the pass is submitted after PASS ENTER returns.
 * Errors: BAD_ENUM (`group`), BAD_ARGUMENT (`agent`), INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_counter_select(kreplay_sim_t sim, uint32_t agent,
                                            kreplay_sim_counter_group_t group);

/**
 * `*sample` (set `sample->size` first) receives what pass `pass` of dispatch `dispatch_id`
 * collected (KREPLAY_SIM_LAST_EXECUTION: its latest execution, the ordinary run included).
 * Results are stored before the pass completes, so PASS EXIT of a pass can read it.
 * `dispatch_id` is the payload's dispatch_info->dispatch_id (0 for dispatches made while
 * replay was inactive).
 * Errors: NULL_POINTER, BAD_SIZE, NOT_FOUND, INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_counter_read(kreplay_sim_t sim, uint64_t dispatch_id, uint32_t pass,
                                          kreplay_sim_counter_sample_t* sample);

/** The name of a counter group ("work_items", "bytes_read", "bytes_written", "instructions",
 *  "none"), or "unknown". Never NULL; the string is static. */
const char* kreplay_sim_counter_group_name(kreplay_sim_counter_group_t group);

/**
 * Arms a fault on `agent`. `*fault_id` receives its id when `fault_id` is not NULL.
 * Errors: NULL_POINTER, BAD_SIZE, BAD_ENUM (kind, mode, tier), BAD_ARGUMENT (`agent`, a zero
 * address), INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_fault_inject(kreplay_sim_t sim, uint32_t agent,
                                          const kreplay_sim_fault_t* fault, uint64_t* fault_id);

/**
 * `*hits` receives how often the fault `fault_id` fired (0 for an unknown id), saturating at
 * UINT32_MAX.
 * Errors: NULL_POINTER, INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_fault_hits(kreplay_sim_t sim, uint64_t fault_id, uint32_t* hits);

/**
 * Disarms every fault of the simulator.
 * Errors: INVALID_HANDLE, SHUT_DOWN.
 */
kreplay_status_t kreplay_sim_fault_clear(kreplay_sim_t sim);

/* ----------------------------------------------------------------------------------------- */
/* ABI self-check                                                                             */
/* ----------------------------------------------------------------------------------------- */

/** One fact about the library's own view of this ABI. */
typedef struct kreplay_abi_entry_t {
    /** "sizeof(T)", "alignof(T)", "offsetof(T, field)" or a constant's name. */
    const char* name;
    /** Its value as the library was compiled (negative constants as two's complement). */
    uint64_t value;
} kreplay_abi_entry_t;

/**
 * The library's table of sizes, alignments, field offsets and constant values, so a C or C++
 * build can check this header against the library it links. `*entries` receives a static
 * array of `*count` entries.
 * Errors: NULL_POINTER.
 */
kreplay_status_t kreplay_abi_table(const kreplay_abi_entry_t** entries, uint64_t* count);

/**
 * One entry of that table by name (e.g. "offsetof(kreplay_replay_payload_t, outcome)").
 * Errors: NULL_POINTER, BAD_ARGUMENT (no such entry).
 */
kreplay_status_t kreplay_abi_layout(const char* name, uint64_t* value);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* Compile-time checks of the LP64 layout, where the compiler can make them. */
#if UINTPTR_MAX == 0xffffffffffffffffu
#if defined(__cplusplus) && __cplusplus >= 201103L
static_assert(sizeof(kreplay_replay_payload_t) == 64, "kreplay_replay_payload_t layout");
static_assert(sizeof(kreplay_dispatch_info_t) == 80, "kreplay_dispatch_info_t layout");
static_assert(sizeof(kreplay_outcome_t) == 224, "kreplay_outcome_t layout");
static_assert(sizeof(kreplay_sim_counter_sample_t) == 48, "kreplay_sim_counter_sample_t layout");
static_assert(sizeof(kreplay_phases_t) == 96, "kreplay_phases_t layout");
static_assert(sizeof(kreplay_graph_node_t) == 32, "kreplay_graph_node_t layout");
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(kreplay_replay_payload_t) == 64, "kreplay_replay_payload_t layout");
_Static_assert(sizeof(kreplay_dispatch_info_t) == 80, "kreplay_dispatch_info_t layout");
_Static_assert(sizeof(kreplay_outcome_t) == 224, "kreplay_outcome_t layout");
_Static_assert(sizeof(kreplay_sim_counter_sample_t) == 48, "kreplay_sim_counter_sample_t layout");
_Static_assert(sizeof(kreplay_phases_t) == 96, "kreplay_phases_t layout");
_Static_assert(sizeof(kreplay_graph_node_t) == 32, "kreplay_graph_node_t layout");
#endif
#endif

#endif /* KERNEL_REPLAY_H */
