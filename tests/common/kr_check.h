/*
 * The check macros of the C and C++ consumer tests (tests/common/abi_cases.h and
 * tests/c/abi_bad_input.c): each check counts as passed or failed, a failure prints its
 * file, line and, for a status, kreplay_last_error(); kr_report() prints the final
 * "N passed, N failed" line the Rust harness reads.
 */
#ifndef KREPLAY_TEST_KR_CHECK_H
#define KREPLAY_TEST_KR_CHECK_H

#include <stdio.h>
#include <string.h>

#include "kernel_replay.h"

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

/* Prints the tally; the process's exit status. */
static int kr_report(void) {
    printf("%d passed, %d failed\n", kr_passed, kr_failed);
    fflush(stdout);
    return kr_failed == 0 ? 0 : 1;
}

#endif /* KREPLAY_TEST_KR_CHECK_H */
