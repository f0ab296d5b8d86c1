// The C++17 consumer test of kernel_replay.h (issue 5; SPEC 10): the same shared checks as the
// C test, compiled as C++ (so the header is valid C++ with identical layout), plus what only
// C++ can state: the payload types are standard-layout and trivially copyable, enumerators
// convert to the fixed-width typedefs, and a captureless lambda is a valid replay callback.
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
static_assert(c_compatible<kreplay_kernel_filter_t>);
static_assert(c_compatible<kreplay_abi_entry_t>);
static_assert(offsetof(kreplay_replay_payload_t, size) == 0);
static_assert(offsetof(kreplay_replay_payload_t, dispatch_info) == 8);
static_assert(std::is_same_v<kreplay_status_t, std::int32_t>);
static_assert(std::is_same_v<kreplay_operation_t, std::uint32_t>);
static_assert(sizeof(kreplay_user_data_t) == 8);
static_assert(KREPLAY_REASON_SCOPE_CHECK_FAILED < KREPLAY_REASON_CAPACITY);

namespace {

struct ToolState {
    int calls = 0;
};

// A captureless lambda converts to the C callback type.
const kreplay_replay_callback_t on_replay = +[](kreplay_operation_t, kreplay_phase_t,
                                                kreplay_replay_payload_t*,
                                                kreplay_user_data_t*, void* data) {
    static_cast<ToolState*>(data)->calls++;
};

}  // namespace

int main() {
    static ToolState state;
    kr_run_common(on_replay, &state);
    KR_CHECK(state.calls == 0);  // no dispatch reaches it in these checks
    return kr_report();
}
