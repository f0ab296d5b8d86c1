/*
 * The C11 consumer test of kernel_replay.h (issue 5; SPEC 10): layout and constants checked
 * against the library's own table, every bad input, shutdown. Built and run by
 * crates/replay-ffi/tests/c_abi.rs (also under valgrind), which reads the final
 * "N passed, N failed" line.
 */
#include "kernel_replay.h"

#include "abi_cases.h"

/* A replay callback. No dispatch reaches it in these checks: the simulator's C entry points
 * (phase 2 of issue 5) will drive full replays through it. */
static void on_replay(kreplay_operation_t operation, kreplay_phase_t phase,
                      kreplay_replay_payload_t* payload, kreplay_user_data_t* user_data,
                      void* callback_data) {
    (void)operation;
    (void)phase;
    (void)payload;
    (void)user_data;
    (void)callback_data;
}

int main(void) {
    static int tool_state;
    kr_run_common(on_replay, &tool_state);
    return kr_report();
}
