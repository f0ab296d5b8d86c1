/*
 * The capture a C or C++ tool asks for in PASS ENTER (SPEC 13), shared by
 * tests/c/capture_test.c and tests/cpp/capture_test.cpp: on the simulated GPU, a tool asks for
 * a capture of pass 1 of a dispatch into a new folder with kreplay_request_capture() and
 * follows it with kreplay_capture_result() and kreplay_capture_message() (pending in PASS
 * ENTER and PASS EXIT, written by CONFIG EXIT); a second dispatch's capture over its byte
 * bound is refused, naming why; every bad input is answered with its status and a
 * kreplay_last_error() naming it. crates/replay-ffi/tests/c_abi.rs passes the folder to
 * capture into as argv[1], reads the written capture back with the replay-capture crate
 * (inputs and outputs of the counter the kernel adds to) and checks the "N passed, N failed"
 * line.
 */
#ifndef KREPLAY_TEST_CAPTURE_CASES_H
#define KREPLAY_TEST_CAPTURE_CASES_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernel_replay.h"

#include "kr_check.h"

/* The folders of one run, under the harness's folder. */
typedef struct kr_capture_paths {
    char written[1024];  /* the capture that is written */
    char refused[1024];  /* the capture over its bound */
    char file[1024];     /* a plain file: never written over */
    char orphan[1024];   /* a folder whose parent does not exist */
} kr_capture_paths;

/* The tool's state for one dispatch. */
typedef struct kr_capture_tool {
    const kr_capture_paths* paths;
    const char* target;               /* the folder this dispatch's capture goes to */
    uint64_t max_bytes;               /* its bound */
    int bad_inputs;                   /* 1: also every bad request in PASS ENTER */
    kreplay_capture_state_t in_enter; /* the state right after the request */
    kreplay_capture_state_t in_exit;  /* the state in PASS EXIT of the captured pass */
    kreplay_capture_state_t in_config_exit;
    uint32_t requests;                /* requests accepted */
} kr_capture_tool;

static uint64_t kr_capture_three(const kreplay_dispatch_info_t* info, kreplay_user_data_t ud) {
    (void)info;
    (void)ud;
    return 3;
}

/* The state of the capture into `dir` (KREPLAY_CAPTURE_NONE when the query fails). */
static kreplay_capture_state_t kr_capture_state(const char* dir) {
    kreplay_capture_result_t r;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    if (kreplay_capture_result(dir, &r) != KREPLAY_STATUS_OK) {
        return KREPLAY_CAPTURE_NONE;
    }
    return r.state;
}

/* Every request a tool can get wrong, inside PASS ENTER: none of them is in force after. */
static void kr_capture_bad_requests(const kr_capture_paths* p) {
    KR_EXPECT(kreplay_request_capture(NULL, 0), KREPLAY_STATUS_NULL_POINTER);
    KR_ERROR_MENTIONS("`dir` is NULL");
    KR_EXPECT(kreplay_request_capture("\xff\xfe", 0), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_ERROR_MENTIONS("UTF-8");
    KR_EXPECT(kreplay_request_capture("", 0), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_ERROR_MENTIONS("empty");
    KR_EXPECT(kreplay_request_capture(p->file, 0), KREPLAY_STATUS_ALREADY_EXISTS);
    KR_ERROR_MENTIONS("never written over");
    KR_EXPECT(kreplay_request_capture(p->orphan, 0), KREPLAY_STATUS_NOT_FOUND);
    KR_ERROR_MENTIONS("parent folder");
    /* Refused requests leave nothing to look up. */
    KR_CHECK(kr_capture_state(p->orphan) == KREPLAY_CAPTURE_NONE);
    KR_CHECK(kr_capture_state(p->file) == KREPLAY_CAPTURE_NONE);
    KR_EXPECT(kreplay_capture_result(p->orphan, NULL), KREPLAY_STATUS_NULL_POINTER);
}

static void kr_capture_on_replay(kreplay_operation_t operation, kreplay_phase_t phase,
                                 kreplay_replay_payload_t* payload, kr_capture_tool* t) {
    if (operation == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_ENTER) {
        payload->replay_pass_count = kr_capture_three;
        /* CONFIG ENTER is not PASS ENTER. */
        KR_EXPECT(kreplay_request_capture(t->target, 0), KREPLAY_STATUS_CONTEXT_ERROR);
        KR_ERROR_MENTIONS("PASS ENTER");
    } else if (operation == KREPLAY_OPERATION_PASS && phase == KREPLAY_PHASE_ENTER &&
               payload->current_pass == 1) {
        kreplay_capture_result_t r;
        if (t->bad_inputs) {
            kr_capture_bad_requests(t->paths);
        }
        KR_OK(kreplay_request_capture(t->target, t->max_bytes));
        t->requests++;
        /* One request per callback; the first stays in force. */
        KR_EXPECT(kreplay_request_capture(t->paths->refused, 0), KREPLAY_STATUS_ALREADY_EXISTS);
        KR_ERROR_MENTIONS("already asked for");
        memset(&r, 0, sizeof r);
        r.size = sizeof r;
        KR_OK(kreplay_capture_result(t->target, &r));
        KR_CHECK(r.size == sizeof r);
        KR_CHECK(r.state == KREPLAY_CAPTURE_PENDING);
        KR_CHECK(r.pass == 1);
        KR_CHECK(r.dispatch_id == payload->dispatch_info->dispatch_id);
        KR_CHECK(r.max_bytes == (t->max_bytes == 0 ? (uint64_t)4 << 30 : t->max_bytes));
        t->in_enter = r.state;
    } else if (operation == KREPLAY_OPERATION_PASS && phase == KREPLAY_PHASE_EXIT) {
        /* PASS EXIT is not PASS ENTER either. */
        KR_EXPECT(kreplay_request_capture(t->target, 0), KREPLAY_STATUS_CONTEXT_ERROR);
        KR_ERROR_MENTIONS("PASS ENTER");
        if (payload->current_pass == 0) {
            /* Not asked for yet. */
            kreplay_capture_result_t r;
            memset(&r, 0, sizeof r);
            r.size = sizeof r;
            KR_EXPECT(kreplay_capture_result(t->target, &r), KREPLAY_STATUS_NOT_FOUND);
            KR_ERROR_MENTIONS("no capture was asked for");
        } else if (payload->current_pass == 1) {
            t->in_exit = kr_capture_state(t->target);
        }
    } else if (operation == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_EXIT) {
        t->in_config_exit = kr_capture_state(t->target);
    }
}

/* The message of the capture into `dir`, into `buffer` (checking the two-call protocol). */
static void kr_capture_message(const char* dir, char* buffer, size_t size) {
    size_t required = 0;
    KR_EXPECT(kreplay_capture_message(dir, NULL, 0, NULL), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_capture_message(dir, NULL, 4, &required), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_capture_message(dir, NULL, 0, &required), KREPLAY_STATUS_BUFFER_TOO_SMALL);
    KR_CHECK(required > 1 && required <= size);
    buffer[0] = 'x';
    KR_EXPECT(kreplay_capture_message(dir, buffer, required - 1, &required),
              KREPLAY_STATUS_BUFFER_TOO_SMALL);
    KR_CHECK(buffer[0] == 'x');
    KR_OK(kreplay_capture_message(dir, buffer, size, &required));
    KR_CHECK(strlen(buffer) + 1 == required);
}

/* One dispatch of `increment_u64` (adds 5 to the counter) through the tool; its result. */
static void kr_capture_dispatch(kreplay_sim_t sim, kreplay_sim_kernel_t kernel,
                                uint64_t counter, kreplay_sim_result_t* result) {
    uint64_t args[2];
    kreplay_dim3_t grid = {1, 1, 1};
    kreplay_sim_dispatch_t d;
    memset(&d, 0, sizeof d);
    args[0] = counter;
    args[1] = 5;
    KR_OK(kreplay_sim_dispatch(sim, 0, 0, kernel, args, sizeof args, grid, &d));
    memset(result, 0, sizeof *result);
    result->size = sizeof *result;
    KR_OK(kreplay_sim_wait(d, result));
    KR_CHECK(result->outcome == KREPLAY_OUTCOME_REPLAYED);
    KR_CHECK(result->executed_passes == 3);
}

/* The whole scenario: `dir` is the harness's (existing, empty) folder. */
static void kr_capture_run(kreplay_replay_callback_t callback, kr_capture_tool* t,
                           const char* dir) {
    static kr_capture_paths p;
    kreplay_context_t owner;
    kreplay_sim_t sim;
    kreplay_sim_module_t module;
    kreplay_sim_kernel_t kernel;
    kreplay_sim_module_desc_t desc;
    kreplay_sim_result_t result;
    kreplay_capture_result_t r;
    const char* kernels[1] = {"increment_u64"};
    uint64_t counter = 0;
    uint64_t after = 0;
    char message[4096];
    size_t required = 0;
    FILE* f;

    snprintf(p.written, sizeof p.written, "%s/written", dir);
    snprintf(p.refused, sizeof p.refused, "%s/refused", dir);
    snprintf(p.file, sizeof p.file, "%s/a-file", dir);
    snprintf(p.orphan, sizeof p.orphan, "%s/missing/capture", dir);
    f = fopen(p.file, "w");
    KR_CHECK(f != NULL);
    if (f != NULL) {
        fputs("not a capture\n", f);
        fclose(f);
    }
    memset(t, 0, sizeof *t);
    t->paths = &p;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;

    /* Outside any callback. */
    KR_EXPECT(kreplay_request_capture(p.written, 0), KREPLAY_STATUS_CONTEXT_ERROR);
    KR_ERROR_MENTIONS("kreplay_request_capture is usable only inside a PASS ENTER callback");
    KR_EXPECT(kreplay_request_capture(NULL, 0), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_capture_result(NULL, &r), KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_capture_result("", &r), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_capture_result("\xff", &r), KREPLAY_STATUS_BAD_ARGUMENT);
    KR_EXPECT(kreplay_capture_message(NULL, message, sizeof message, NULL),
              KREPLAY_STATUS_NULL_POINTER);
    KR_EXPECT(kreplay_capture_result(p.written, &r), KREPLAY_STATUS_NOT_FOUND);
    KR_ERROR_MENTIONS("no capture was asked for");

    memset(&owner, 0, sizeof owner);
    KR_OK(kreplay_context_create(&owner));
    KR_OK(kreplay_configure_replay(owner, KREPLAY_SUBSCRIBE_CONFIG | KREPLAY_SUBSCRIBE_PASS,
                                   callback, t));
    KR_OK(kreplay_context_start(owner));
    memset(&sim, 0, sizeof sim);
    KR_OK(kreplay_sim_create(1, &sim));
    KR_OK(kreplay_sim_alloc(sim, 0, 8, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &counter));
    memset(&desc, 0, sizeof desc);
    desc.size = sizeof desc;
    desc.name = "capture.co";
    desc.kernels = kernels;
    desc.kernel_count = 1;
    memset(&module, 0, sizeof module);
    KR_OK(kreplay_sim_module_load(sim, 0, &desc, &module));
    memset(&kernel, 0, sizeof kernel);
    KR_OK(kreplay_sim_module_kernel(module, "increment_u64", &kernel));

    /* Dispatch 1: captured, with every bad request first. */
    t->target = p.written;
    t->max_bytes = 0;
    t->bad_inputs = 1;
    kr_capture_dispatch(sim, kernel, counter, &result);
    KR_CHECK(t->requests == 1);
    KR_CHECK(t->in_enter == KREPLAY_CAPTURE_PENDING);
    /* Written after the captured pass's scope check: still pending in its PASS EXIT. */
    KR_CHECK(t->in_exit == KREPLAY_CAPTURE_PENDING);
    KR_CHECK(t->in_config_exit == KREPLAY_CAPTURE_WRITTEN);
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    KR_OK(kreplay_capture_result(p.written, &r));
    KR_CHECK(r.state == KREPLAY_CAPTURE_WRITTEN);
    KR_CHECK(r.dispatch_id == result.dispatch_id);
    KR_CHECK(r.pass == 1);
    KR_CHECK(r.max_bytes == (uint64_t)4 << 30);
    KR_CHECK(r.region_count >= 1);
    KR_CHECK(r.captured_bytes >= 8);
    KR_CHECK(r.reserved0 == 0);
    kr_capture_message(p.written, message, sizeof message);
    KR_CHECK(strstr(message, "increment_u64") != NULL);
    KR_CHECK(strstr(message, p.written) != NULL);
    KR_OK(kreplay_sim_read(sim, counter, &after, sizeof after));
    KR_CHECK(after == 5); /* one execution, captured or not */
    /* Versioned by `size`: below the first version refused, a later version's tail kept. */
    {
        struct {
            kreplay_capture_result_t r;
            uint64_t tail;
        } later;
        memset(&later, 0, sizeof later);
        later.r.size = 8;
        KR_EXPECT(kreplay_capture_result(p.written, &later.r), KREPLAY_STATUS_BAD_SIZE);
        KR_ERROR_MENTIONS("sizeof");
        later.r.size = sizeof later;
        later.tail = 77;
        KR_OK(kreplay_capture_result(p.written, &later.r));
        KR_CHECK(later.r.size == sizeof(kreplay_capture_result_t));
        KR_CHECK(later.r.state == KREPLAY_CAPTURE_WRITTEN && later.tail == 77);
    }

    /* Dispatch 2: a bound of 1 byte refuses the capture when its pass begins. */
    t->target = p.refused;
    t->max_bytes = 1;
    t->bad_inputs = 0;
    t->in_exit = KREPLAY_CAPTURE_NONE;
    kr_capture_dispatch(sim, kernel, counter, &result);
    KR_CHECK(t->requests == 2);
    KR_CHECK(t->in_exit == KREPLAY_CAPTURE_REFUSED);
    KR_CHECK(t->in_config_exit == KREPLAY_CAPTURE_REFUSED);
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    KR_OK(kreplay_capture_result(p.refused, &r));
    KR_CHECK(r.state == KREPLAY_CAPTURE_REFUSED);
    KR_CHECK(r.max_bytes == 1 && r.region_count == 0 && r.captured_bytes == 0);
    kr_capture_message(p.refused, message, sizeof message);
    KR_CHECK(strstr(message, "over the capture bound of 1 bytes") != NULL);
    f = fopen(p.refused, "r");
    KR_CHECK(f == NULL); /* no folder */
    if (f != NULL) {
        fclose(f);
    }
    KR_OK(kreplay_sim_read(sim, counter, &after, sizeof after));
    KR_CHECK(after == 10);

    KR_OK(kreplay_sim_destroy(sim));
    KR_OK(kreplay_shutdown());
    KR_EXPECT(kreplay_capture_result(p.written, &r), KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_capture_message(p.written, message, sizeof message, &required),
              KREPLAY_STATUS_SHUT_DOWN);
    KR_EXPECT(kreplay_request_capture(p.refused, 0), KREPLAY_STATUS_SHUT_DOWN);
}

#endif /* KREPLAY_TEST_CAPTURE_CASES_H */
