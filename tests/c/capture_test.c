/*
 * A C11 tool asks for a capture of the current dispatch in PASS ENTER (SPEC 13) and follows it
 * through the C ABI (tests/common/capture_cases.h). Built and run by
 * crates/replay-ffi/tests/c_abi.rs with the folder to capture into as argv[1]; it reads the
 * capture back and the final "N passed, N failed" line.
 */
#include "kernel_replay.h"

#include "capture_cases.h"

static void on_replay(kreplay_operation_t operation, kreplay_phase_t phase,
                      kreplay_replay_payload_t* payload, kreplay_user_data_t* user_data,
                      void* callback_data) {
    (void)user_data;
    kr_capture_on_replay(operation, phase, payload, (kr_capture_tool*)callback_data);
}

int main(int argc, char** argv) {
    static kr_capture_tool tool;
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR (an existing, empty folder)\n", argv[0]);
        return 2;
    }
    kr_capture_run(on_replay, &tool, argv[1]);
    return kr_report();
}
