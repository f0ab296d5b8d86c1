/*
 * kernel_replay_hsa.h: the HSA tool entry points of libkernel_replay (SPEC section 9.1).
 *
 * Exported only by a library built with replay-ffi's `hsa` feature
 * (`cargo build --release -p replay-ffi --features hsa`).
 *
 * Running an application under a replay tool:
 *
 *   HSA_TOOLS_LIB=/path/libkernel_replay.so KREPLAY_HSA_TOOL=/path/libmytool.so ./app
 *
 * The runtime calls OnLoad at hsa_init. OnLoad checks the API table's versions (root 1 or 3,
 * core 1 or 2, AMD extension 1 or 2) and installs nothing, logging why, for any other table;
 * otherwise it wraps the allocation, free, virtual-memory and async-copy entries, then loads
 * the library named by KREPLAY_HSA_TOOL, which must export
 *
 *   int kreplay_tool_init(uint64_t runtime_version);   (0 = success)
 *   void kreplay_tool_fini(void);                      (optional, called from OnUnload)
 *
 * and link libkernel_replay, so it configures replay through kernel_replay.h on the same
 * library instance (examples/hsa-cpp-tool is one). Application queues are created as
 * intercepting queues whose write interceptor runs the replay window for single kernel
 * dispatches.
 *
 * A Rust tool instead ships its own shared object carrying these entry points (it links
 * kernel-replay statically) and defines kreplay_tool_init there with
 * `kernel_replay::export_c_abi!(hsa_tool = ..)`:
 *
 *   HSA_TOOLS_LIB=/path/libmytool.so ./app
 *
 * With KREPLAY_HSA_TOOL unset, OnLoad calls the kreplay_tool_init defined in the shared object
 * that holds OnLoad itself (libkernel_replay.so defines none); when both exist, the library
 * named by KREPLAY_HSA_TOOL wins. examples/hsa-rust-tool is such a tool.
 */
#ifndef KERNEL_REPLAY_HSA_H
#define KERNEL_REPLAY_HSA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel_replay.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The HSA runtime's tool entry; `table` is the runtime's HsaApiTable*. */
bool OnLoad(void* table, uint64_t runtime_version, uint64_t failed_tool_count,
            const char* const* failed_tool_names);

/* The HSA runtime's tool exit. */
void OnUnload(void);

/* The HSA backend's state as JSON (installed versions and wrapped entries or the last refusal,
 * the attached tool, agents, tracked allocations with their class, async copies seen).
 * Same buffer protocol as kreplay_policy_json. */
kreplay_status_t kreplay_hsa_state_json(char* buffer, size_t buffer_size, size_t* required);

/* Declares `queue` (an hsa_queue_t* the tool created, typically in kreplay_tool_init) the
 * tool's own: every packet on it is tool work, never gated, parked or replayed, so work the
 * tool submits there in PASS ENTER and waits for in PASS EXIT runs inside the window. Queues
 * created from inside a tool callback are the tool's already; a queue created anywhere else
 * is an application queue, and tool work written there while a window runs is parked until
 * the window ends (a warning names the queue). KREPLAY_STATUS_NULL_POINTER for NULL,
 * KREPLAY_STATUS_NOT_FOUND when `queue` is not an intercepted queue (created before OnLoad).
 * The pointer is never read. */
kreplay_status_t kreplay_hsa_mark_tool_queue(const void* queue);

#ifdef __cplusplus
}
#endif

#endif /* KERNEL_REPLAY_HSA_H */
