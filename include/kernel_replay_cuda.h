/*
 * kernel_replay_cuda.h: hardware counters of replayed CUDA dispatches through libkernel_replay
 * (SPEC sections 10 and 12.1).
 *
 * Exported only by a library built with replay-ffi's `cuda` feature
 * (`cargo build --release -p replay-ffi --features replay-ffi/cuda`).
 *
 * A tool with its own front end creates a collection from Nsight Compute metric names; the
 * list is compiled for device 0's chip at once (CUPTI's host API), so a metric that cannot be
 * collected fails here (KREPLAY_STATUS_BAD_ARGUMENT, kreplay_last_error names it) and a
 * missing CUPTI library is KREPLAY_STATUS_UNSUPPORTED naming it. The tool returns
 * kreplay_cuda_counters_passes() from its pass-count callback and forwards its PASS ENTER,
 * PASS EXIT and CONFIG EXIT callbacks with kreplay_cuda_counters_callback(); each profiler
 * pass runs inside one replay pass (CUPTI's range profiler, user replay, one kernel per
 * range; metrics with __sass_ in their names in one pass of their own through CUPTI's SASS
 * Metrics API), so every value is keyed by (dispatch_id, pass). Collect with the policy's
 * cache_control=flush (KREPLAY_CACHE_CONTROL=flush) to compare with Nsight Compute.
 */
#ifndef KERNEL_REPLAY_CUDA_H
#define KERNEL_REPLAY_CUDA_H

#include "kernel_replay.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A counter collection (an opaque, checked handle; never 0). */
typedef uint64_t kreplay_counters_t;

/** Compiles `count` metric names (each may itself be a comma-separated list) and creates a
 *  collection asking for at least `min_passes` passes. */
kreplay_status_t kreplay_cuda_counters_create(const char* const* metrics, size_t count,
                                              uint32_t min_passes, kreplay_counters_t* out);

/** The passes a dispatch needs (at least 2: one pass is no replay). */
kreplay_status_t kreplay_cuda_counters_passes(kreplay_counters_t collection, uint32_t* passes);

/** Forwards the tool's callback (PASS ENTER, PASS EXIT, CONFIG EXIT; CONFIG ENTER does
 *  nothing). Call it from inside that callback with the payload the library passed. */
kreplay_status_t kreplay_cuda_counters_callback(kreplay_counters_t collection,
                                                kreplay_operation_t operation,
                                                kreplay_phase_t phase,
                                                const kreplay_replay_payload_t* payload);

/** The value of `metric` for `dispatch_id` and the replay pass that collected it;
 *  KREPLAY_STATUS_NOT_FOUND when there is none (see the report's errors). */
kreplay_status_t kreplay_cuda_counters_value(kreplay_counters_t collection, uint64_t dispatch_id,
                                             const char* metric, uint32_t* pass, double* value);

/** The collection as JSON ({"counters": CounterReport, "plan": ..., "errors": [...]});
 *  `*required` gets the size with the NUL, a smaller buffer is KREPLAY_STATUS_BUFFER_TOO_SMALL. */
kreplay_status_t kreplay_cuda_counters_report_json(kreplay_counters_t collection, char* buffer,
                                                   size_t buffer_size, size_t* required);

/** Destroys a collection. */
kreplay_status_t kreplay_cuda_counters_destroy(kreplay_counters_t collection);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KERNEL_REPLAY_CUDA_H */
