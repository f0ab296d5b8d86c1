// The C++17 consumer test of kernel_replay.h (issue 5; SPEC 10): the same shared checks as the
// C test (layout, bad inputs, a full replay on the simulated GPU), compiled as C++ (so the
// header is valid C++ with identical layout), plus what only C++ can state: the payload types
// are standard-layout and trivially copyable, enumerators convert to the fixed-width typedefs,
// and a captureless lambda is a valid replay callback.
// Built and run by crates/replay-ffi/tests/c_abi.rs, which reads the final
// "N passed, N failed" line.
#include "kernel_replay.h"

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "abi_cases.h"

template <typename T>
constexpr bool c_compatible = std::is_standard_layout_v<T> && std::is_trivially_copyable_v<T>;

static_assert(c_compatible<kreplay_user_data_t>);
static_assert(c_compatible<kreplay_context_t>);
static_assert(c_compatible<kreplay_dim3_t>);
static_assert(c_compatible<kreplay_dispatch_info_t>);
static_assert(c_compatible<kreplay_replay_payload_t>);
static_assert(c_compatible<kreplay_outcome_t>);
static_assert(c_compatible<kreplay_summary_t>);
static_assert(c_compatible<kreplay_phases_t>);
static_assert(c_compatible<kreplay_graph_node_t>);
static_assert(offsetof(kreplay_phases_t, window) == 8);
static_assert(offsetof(kreplay_graph_node_t, serialized) + sizeof(std::uint32_t) ==
              sizeof(kreplay_graph_node_t));
static_assert(KREPLAY_GRAPH_NODE_NONE == UINT32_MAX);
static_assert(c_compatible<kreplay_kernel_filter_t>);
static_assert(c_compatible<kreplay_abi_entry_t>);
static_assert(c_compatible<kreplay_sim_t>);
static_assert(c_compatible<kreplay_sim_fault_t>);
static_assert(c_compatible<kreplay_sim_variable_t>);
static_assert(c_compatible<kreplay_sim_module_desc_t>);
static_assert(c_compatible<kreplay_sim_result_t>);
static_assert(c_compatible<kreplay_sim_counter_sample_t>);
static_assert(c_compatible<kreplay_sim_digest_t>);
static_assert(std::is_same_v<kreplay_sim_memory_t, std::uint32_t>);
static_assert(KREPLAY_SIM_LAST_EXECUTION == UINT32_MAX);
static_assert(offsetof(kreplay_replay_payload_t, size) == 0);
static_assert(offsetof(kreplay_replay_payload_t, dispatch_info) == 8);
static_assert(std::is_same_v<kreplay_status_t, std::int32_t>);
static_assert(std::is_same_v<kreplay_operation_t, std::uint32_t>);
static_assert(sizeof(kreplay_user_data_t) == 8);
static_assert(KREPLAY_REASON_SCOPE_CHECK_FAILED < KREPLAY_REASON_CAPACITY);
static_assert(KREPLAY_REASON_AGENT_BUSY < KREPLAY_REASON_CAPACITY);
static_assert(KREPLAY_REASON_UNSEEN_WRITES < KREPLAY_REASON_CAPACITY);

namespace {

int lambda_calls = 0;

// A captureless lambda converts to the C callback type; the shared tool does the work.
const kreplay_replay_callback_t on_replay =
    +[](kreplay_operation_t operation, kreplay_phase_t phase, kreplay_replay_payload_t* payload,
        kreplay_user_data_t* user_data, void* data) {
        lambda_calls++;
        kr_tool_on_replay(operation, phase, payload, user_data, static_cast<kr_tool*>(data));
    };

}  // namespace

int main() {
    static kr_tool tool;
    kr_run_common(on_replay, &tool);
    // The simulator's dispatches reached the lambda (4 replayed dispatches of 10 calls each,
    // and more).
    KR_CHECK(lambda_calls >= 40);
    return kr_report();
}
