// A C++17 tool asks for a capture of the current dispatch in PASS ENTER (SPEC 13): the checks
// of the C test (tests/common/capture_cases.h) with a captureless lambda as the replay
// callback, and what only C++ states: the result struct is standard-layout and trivially
// copyable. Built and run by crates/replay-ffi/tests/c_abi.rs with the folder to capture into
// as argv[1]; it reads the capture back and the final "N passed, N failed" line.
#include "kernel_replay.h"

#include <type_traits>

#include "capture_cases.h"

static_assert(std::is_standard_layout_v<kreplay_capture_result_t> &&
              std::is_trivially_copyable_v<kreplay_capture_result_t>);
static_assert(std::is_same_v<kreplay_capture_state_t, uint32_t>);

namespace {

const kreplay_replay_callback_t on_replay =
    +[](kreplay_operation_t operation, kreplay_phase_t phase, kreplay_replay_payload_t* payload,
        kreplay_user_data_t*, void* data) {
        kr_capture_on_replay(operation, phase, payload, static_cast<kr_capture_tool*>(data));
    };

}  // namespace

int main(int argc, char** argv) {
    static kr_capture_tool tool;
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR (an existing, empty folder)\n", argv[0]);
        return 2;
    }
    kr_capture_run(on_replay, &tool, argv[1]);
    return kr_report();
}
