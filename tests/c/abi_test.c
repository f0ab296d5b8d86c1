/*
 * The C11 consumer test of kernel_replay.h (issue 5; SPEC 10): layout and constants checked
 * against the library's own table, every bad input, a full replay on the simulated GPU through
 * the C ABI, shutdown. Built and run by crates/replay-ffi/tests/c_abi.rs (also under valgrind,
 * which checks that kreplay_shutdown() leaves no leak and joins every simulator thread), which
 * reads the final "N passed, N failed" line.
 */
#include "kernel_replay.h"

#include "abi_cases.h"

/* The replay callback in C: the shared tool does the work. */
static void on_replay(kreplay_operation_t operation, kreplay_phase_t phase,
                      kreplay_replay_payload_t* payload, kreplay_user_data_t* user_data,
                      void* callback_data) {
    kr_tool_on_replay(operation, phase, payload, user_data, (kr_tool*)callback_data);
}

int main(void) {
    static kr_tool tool;
    kr_run_common(on_replay, &tool);
    return kr_report();
}
