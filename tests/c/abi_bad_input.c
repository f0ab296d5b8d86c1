/*
 * Hostile-caller cases of the C ABI (issue 19; SPEC 6, 8, 10), one scenario per process, named
 * by the first argument, because each needs a fresh library (the environment is read when the
 * library starts; shutdown is final). Built and run by crates/replay-ffi/tests/c_abi.rs (also
 * under valgrind), which reads the final "N passed, N failed" line.
 *
 * - env: malformed policy variables (a bad value, a value that is not UTF-8, an alias) are
 *   visible to the caller: configure answers KREPLAY_STATUS_POLICY_ERROR naming each one until
 *   each is set through the API; the well-formed variables are in force meanwhile.
 * - unload: kreplay_sim_module_unload() of the running kernel's own module from PASS ENTER
 *   does not abort: the handles go at once, the replay ends normally with memory equal to one
 *   execution, and the code object is gone once the dispatch returned.
 * - shutdown: kreplay_shutdown() from another thread while a replay window runs there waits for
 *   the window, which ends without further callbacks; nothing aborts or stalls.
 * - destroy: the same with kreplay_sim_destroy() of the window's simulator: it waits for the
 *   dispatch, whose window ends normally.
 * - counters: a counter that would overflow saturates (work_items of the largest grid).
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernel_replay.h"

#include "kr_check.h"

static kreplay_dim3_t grid1(uint32_t x) {
    kreplay_dim3_t g;
    g.x = x;
    g.y = 1;
    g.z = 1;
    return g;
}

/* ----- A small tool ------------------------------------------------------------------------- */

typedef struct tool {
    uint64_t passes;                /* asked for in CONFIG ENTER */
    kreplay_sim_module_t unload;    /* unloaded in PASS ENTER of pass `unload_pass` */
    uint32_t unload_pass;
    kreplay_status_t unload_status;
    int pass_enters;
    int config_exits;
    kreplay_outcome_kind_t outcome;
    kreplay_reason_t reason;
    uint32_t executed;
    /* The shutdown scenario: PASS ENTER of pass 0 says the window is open, then waits until the
     * main thread is inside kreplay_shutdown() (or a second has passed). */
    int announce;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int window_open;
    int shutting_down;
} tool;

static tool the_tool;

static uint64_t pass_count(const kreplay_dispatch_info_t* info, kreplay_user_data_t ud) {
    (void)info;
    (void)ud;
    return the_tool.passes;
}

static void wait_for_shutdown_call(tool* t) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 1;
    pthread_mutex_lock(&t->lock);
    t->window_open = 1;
    pthread_cond_broadcast(&t->cond);
    while (!t->shutting_down) {
        if (pthread_cond_timedwait(&t->cond, &t->lock, &deadline) != 0) {
            break;
        }
    }
    pthread_mutex_unlock(&t->lock);
    /* Let kreplay_shutdown() reach its wait for this callback. */
    {
        struct timespec pause;
        pause.tv_sec = 0;
        pause.tv_nsec = 20 * 1000 * 1000;
        nanosleep(&pause, NULL);
    }
}

static void on_replay(kreplay_operation_t operation, kreplay_phase_t phase,
                      kreplay_replay_payload_t* payload, kreplay_user_data_t* user_data,
                      void* callback_data) {
    tool* t = (tool*)callback_data;
    (void)user_data;
    if (operation == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_ENTER) {
        payload->replay_pass_count = pass_count;
    } else if (operation == KREPLAY_OPERATION_PASS && phase == KREPLAY_PHASE_ENTER) {
        t->pass_enters++;
        if (t->unload.handle != 0 && payload->current_pass == t->unload_pass) {
            t->unload_status = kreplay_sim_module_unload(t->unload);
        }
        if (t->announce && payload->current_pass == 0) {
            wait_for_shutdown_call(t);
        }
    } else if (operation == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_EXIT) {
        t->config_exits++;
        if (payload->outcome != NULL) {
            t->outcome = payload->outcome->outcome;
            t->reason = payload->outcome->reason;
            t->executed = payload->outcome->executed_passes;
        }
    }
}

/* An owner context, configured and started. */
static kreplay_context_t start_owner(tool* t) {
    kreplay_context_t owner;
    owner.handle = 0;
    KR_OK(kreplay_context_create(&owner));
    KR_OK(kreplay_configure_replay(owner, KREPLAY_SUBSCRIBE_CONFIG | KREPLAY_SUBSCRIBE_PASS,
                                   on_replay, t));
    KR_OK(kreplay_context_start(owner));
    return owner;
}

static kreplay_status_t run(kreplay_sim_t sim, kreplay_sim_kernel_t k, uint64_t a0, uint64_t a1,
                            kreplay_sim_result_t* r) {
    uint64_t args[2];
    kreplay_sim_dispatch_t d;
    kreplay_status_t s;
    args[0] = a0;
    args[1] = a1;
    memset(r, 0, sizeof(*r));
    r->size = sizeof(*r);
    s = kreplay_sim_dispatch(sim, 0, 0, k, args, sizeof(args), grid1(1), &d);
    if (s != KREPLAY_STATUS_OK) {
        return s;
    }
    return kreplay_sim_wait(d, r);
}

/* ----- env ---------------------------------------------------------------------------------- */

static int policy_mentions(const char* needle) {
    char buf[4096];
    size_t need = 0;
    if (kreplay_policy_json(buf, sizeof(buf), &need) != KREPLAY_STATUS_OK) {
        return 0;
    }
    return strstr(buf, needle) != NULL;
}

static void scenario_env(void) {
    kreplay_context_t owner;
    kreplay_kernel_filter_t f;
    /* Set before the library's first call: it reads the environment once, when it starts. */
    setenv("KREPLAY_MAX_PASSES", "many", 1);
    setenv("KREPLAY_CHUNK_BYTES", "64\xff" "KiB", 1);
    setenv("ROCPROFILER_KERNEL_REPLAY_KERNEL_COUNT", "zero", 1);
    setenv("KREPLAY_SCOPE", "arguments", 1);
    setenv("KREPLAY_PASS_TIMEOUT", "3s", 1);

    /* The well-formed variables are in force; each malformed one keeps its default. */
    KR_CHECK(policy_mentions("\"scope\":\"arguments\""));
    KR_CHECK(policy_mentions("\"pass_timeout\":{\"secs\":3,"));
    KR_CHECK(policy_mentions("\"max_passes\":1024"));
    KR_CHECK(policy_mentions("\"chunk_bytes\":1048576"));

    KR_OK(kreplay_context_create(&owner));
    KR_EXPECT(kreplay_configure_replay(owner, KREPLAY_SUBSCRIBE_CONFIG, on_replay, &the_tool),
              KREPLAY_STATUS_POLICY_ERROR);
    KR_ERROR_MENTIONS("KREPLAY_MAX_PASSES");
    KR_ERROR_MENTIONS("\"many\"");
    KR_ERROR_MENTIONS("KREPLAY_CHUNK_BYTES");
    KR_ERROR_MENTIONS("UTF-8");
    KR_ERROR_MENTIONS("ROCPROFILER_KERNEL_REPLAY_KERNEL_COUNT");
    KR_ERROR_MENTIONS("kreplay_policy_set");
    {
        kreplay_context_t who;
        KR_EXPECT(kreplay_replay_owner(&who), KREPLAY_STATUS_NOT_CONFIGURED);
    }

    /* Setting a variable through the API replaces the environment's value. */
    KR_OK(kreplay_policy_set("KREPLAY_MAX_PASSES", "8"));
    KR_EXPECT(kreplay_configure_replay(owner, KREPLAY_SUBSCRIBE_CONFIG, on_replay, &the_tool),
              KREPLAY_STATUS_POLICY_ERROR);
    KR_ERROR_MENTIONS("KREPLAY_CHUNK_BYTES");
    {
        const char* e = kreplay_last_error();
        KR_CHECK(strstr(e, "KREPLAY_MAX_PASSES") == NULL);
    }
    /* A rejected value fixes nothing. */
    KR_EXPECT(kreplay_policy_set("KREPLAY_CHUNK_BYTES", "3000"), KREPLAY_STATUS_POLICY_ERROR);
    KR_EXPECT(kreplay_configure_replay(owner, KREPLAY_SUBSCRIBE_CONFIG, on_replay, &the_tool),
              KREPLAY_STATUS_POLICY_ERROR);
    KR_ERROR_MENTIONS("KREPLAY_CHUNK_BYTES");
    /* Any name of the variable will do. */
    KR_OK(kreplay_policy_set("ROCPROFILER_KERNEL_REPLAY_CHUNK_BYTES", "64KiB"));
    KR_EXPECT(kreplay_configure_replay(owner, KREPLAY_SUBSCRIBE_CONFIG, on_replay, &the_tool),
              KREPLAY_STATUS_POLICY_ERROR);
    KR_ERROR_MENTIONS("KERNEL_COUNT");
    /* The filter's variables are set by kreplay_filter_set. */
    memset(&f, 0, sizeof(f));
    f.size = sizeof(f);
    KR_OK(kreplay_filter_set(&f));
    KR_OK(kreplay_configure_replay(owner, KREPLAY_SUBSCRIBE_CONFIG, on_replay, &the_tool));
    KR_CHECK(policy_mentions("\"max_passes\":8"));
    KR_CHECK(policy_mentions("\"chunk_bytes\":65536"));
    KR_CHECK(policy_mentions("\"scope\":\"arguments\""));
    KR_OK(kreplay_shutdown());
}

/* ----- unload ------------------------------------------------------------------------------- */

static void scenario_unload(void) {
    kreplay_sim_t sim;
    kreplay_sim_variable_t var;
    const char* kernels[1];
    kreplay_sim_module_desc_t desc;
    kreplay_sim_module_t module;
    kreplay_sim_kernel_t inc, plain;
    kreplay_sim_result_t r;
    uint64_t out = 0, hits = 0, value = 0;

    start_owner(&the_tool);
    KR_OK(kreplay_sim_create(1, &sim));
    KR_OK(kreplay_sim_alloc(sim, 0, 8, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &out));
    memset(&var, 0, sizeof(var));
    var.name = "g_hits";
    var.size = 8;
    kernels[0] = "increment_u64";
    memset(&desc, 0, sizeof(desc));
    desc.size = sizeof(desc);
    desc.name = "unload.co";
    desc.variables = &var;
    desc.variable_count = 1;
    desc.kernels = kernels;
    desc.kernel_count = 1;

    /* The module's own kernel increments a buffer; its module variable is captured (scope all)
     * and the module is unloaded in PASS ENTER of pass 1. */
    KR_OK(kreplay_sim_module_load(sim, 0, &desc, &module));
    KR_OK(kreplay_sim_module_variable(module, "g_hits", &hits));
    KR_OK(kreplay_sim_write(sim, hits, &value, sizeof(value)));
    KR_OK(kreplay_sim_module_kernel(module, "increment_u64", &inc));
    the_tool.passes = 4;
    the_tool.unload = module;
    the_tool.unload_pass = 1;
    the_tool.unload_status = -1;
    KR_OK(run(sim, inc, out, 3, &r));
    KR_EXPECT(the_tool.unload_status, KREPLAY_STATUS_OK);
    KR_CHECK(r.outcome == KREPLAY_OUTCOME_REPLAYED);
    KR_CHECK(r.reason == KREPLAY_REASON_NONE);
    KR_CHECK(r.executed_passes == 4);
    KR_CHECK(r.completions == 1);
    KR_OK(kreplay_sim_read(sim, out, &value, sizeof(value)));
    KR_CHECK(value == 3); /* one execution */
    /* The handles went at once, the code object with the dispatch. */
    KR_EXPECT(kreplay_sim_module_unload(module), KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_module_variable(module, "g_hits", &value),
              KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_dispatch(sim, 0, 0, inc, NULL, 0, grid1(1), NULL),
              KREPLAY_STATUS_INVALID_HANDLE);
    KR_EXPECT(kreplay_sim_read(sim, hits, &value, sizeof(value)), KREPLAY_STATUS_BAD_ARGUMENT);

    /* The module's kernel increments its own variable; unloaded in PASS ENTER of pass 0. */
    KR_OK(kreplay_sim_module_load(sim, 0, &desc, &module));
    KR_OK(kreplay_sim_module_variable(module, "g_hits", &hits));
    KR_OK(kreplay_sim_module_kernel(module, "increment_u64", &inc));
    the_tool.unload = module;
    the_tool.unload_pass = 0;
    the_tool.unload_status = -1;
    KR_OK(run(sim, inc, hits, 5, &r));
    KR_EXPECT(the_tool.unload_status, KREPLAY_STATUS_OK);
    KR_CHECK(r.outcome == KREPLAY_OUTCOME_REPLAYED && r.executed_passes == 4);
    KR_CHECK(r.completions == 1);
    KR_EXPECT(kreplay_sim_read(sim, hits, &value, sizeof(value)), KREPLAY_STATUS_BAD_ARGUMENT);

    /* Outside a callback an unload is immediate, and replay goes on. */
    KR_OK(kreplay_sim_module_load(sim, 0, &desc, &module));
    KR_OK(kreplay_sim_module_variable(module, "g_hits", &hits));
    KR_OK(kreplay_sim_module_unload(module));
    KR_EXPECT(kreplay_sim_read(sim, hits, &value, sizeof(value)), KREPLAY_STATUS_BAD_ARGUMENT);
    the_tool.unload.handle = 0;
    KR_OK(kreplay_sim_kernel_create(sim, "increment_u64", &plain));
    KR_OK(run(sim, plain, out, 1, &r));
    KR_CHECK(r.outcome == KREPLAY_OUTCOME_REPLAYED && r.executed_passes == 4);
    KR_OK(kreplay_sim_read(sim, out, &value, sizeof(value)));
    KR_CHECK(value == 4);
    KR_OK(kreplay_shutdown());
}

/* ----- shutdown ----------------------------------------------------------------------------- */

typedef struct launch {
    kreplay_sim_t sim;
    kreplay_sim_kernel_t k;
    uint64_t x, y;
    kreplay_status_t status;
} launch;

static void* launch_thread(void* p) {
    launch* l = (launch*)p;
    uint64_t args[4];
    args[0] = l->x;
    args[1] = l->y;
    args[2] = 1u << 18; /* elements: 1 MiB per buffer, restored before every pass */
    args[3] = 3;
    l->status = kreplay_sim_dispatch(l->sim, 0, 0, l->k, args, sizeof(args), grid1(1024), NULL);
    return NULL;
}

/* `destroy`: kreplay_sim_destroy() of the window's simulator instead of kreplay_shutdown(). */
static void scenario_shutdown(uint64_t passes, int destroy) {
    launch l;
    pthread_t thread;
    int opened, enters_at_return;
    memset(&l, 0, sizeof(l));
    pthread_mutex_init(&the_tool.lock, NULL);
    pthread_cond_init(&the_tool.cond, NULL);
    the_tool.announce = 1;
    the_tool.passes = passes;
    /* A pass that never completes (its simulator shut down under it) would hold the window for
     * this long: the harness gives the whole run far less, so such a stall fails the test. */
    setenv("KREPLAY_PASS_TIMEOUT", "3600", 1);

    start_owner(&the_tool);
    KR_OK(kreplay_sim_create(1, &l.sim));
    KR_OK(kreplay_sim_alloc(l.sim, 0, 1u << 20, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &l.x));
    KR_OK(kreplay_sim_alloc(l.sim, 0, 1u << 20, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &l.y));
    KR_OK(kreplay_sim_kernel_create(l.sim, "axpy_rmw", &l.k));
    l.status = -1;
    KR_CHECK(pthread_create(&thread, NULL, launch_thread, &l) == 0);

    pthread_mutex_lock(&the_tool.lock);
    while (!the_tool.window_open) {
        pthread_cond_wait(&the_tool.cond, &the_tool.lock);
    }
    opened = the_tool.window_open;
    the_tool.shutting_down = 1;
    pthread_cond_broadcast(&the_tool.cond);
    pthread_mutex_unlock(&the_tool.lock);
    KR_CHECK(opened == 1);

    if (destroy) {
        /* Destroy waits for the dispatch running the window, which keeps its callbacks. */
        KR_OK(kreplay_sim_destroy(l.sim));
        KR_CHECK(the_tool.config_exits == 1);
        KR_CHECK(the_tool.outcome == KREPLAY_OUTCOME_REPLAYED);
        KR_CHECK(the_tool.executed == (uint32_t)passes);
        KR_CHECK(pthread_join(thread, NULL) == 0);
        KR_EXPECT(l.status, KREPLAY_STATUS_OK);
        KR_EXPECT(kreplay_sim_synchronize(l.sim), KREPLAY_STATUS_INVALID_HANDLE);
        KR_OK(kreplay_shutdown());
        pthread_cond_destroy(&the_tool.cond);
        pthread_mutex_destroy(&the_tool.lock);
        return;
    }
    /* The window on the other thread is open: shutdown waits for it. */
    KR_OK(kreplay_shutdown());
    enters_at_return = the_tool.pass_enters;
    KR_CHECK(pthread_join(thread, NULL) == 0);
    /* The dispatch ran: its handle was not kept (NULL), so it returns OK. */
    KR_EXPECT(l.status, KREPLAY_STATUS_OK);
    /* No callback after shutdown began waiting: pass 0's was the last. */
    KR_CHECK(enters_at_return == 1);
    KR_CHECK(the_tool.pass_enters == 1);
    KR_CHECK(the_tool.config_exits == 0);
    KR_EXPECT(kreplay_sim_synchronize(l.sim), KREPLAY_STATUS_SHUT_DOWN);
    pthread_cond_destroy(&the_tool.cond);
    pthread_mutex_destroy(&the_tool.lock);
}

/* ----- counters ----------------------------------------------------------------------------- */

/* Counters saturate instead of wrapping: work_items of the largest grid is UINT64_MAX. */
static void scenario_counters(void) {
    kreplay_sim_t sim;
    kreplay_sim_kernel_t k;
    kreplay_sim_counter_sample_t sample;
    kreplay_sim_result_t r;
    kreplay_sim_dispatch_t d;
    kreplay_dim3_t g;
    uint64_t a = 0, args[2];
    KR_OK(kreplay_sim_create(1, &sim));
    KR_OK(kreplay_sim_alloc(sim, 0, 8, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &a));
    KR_OK(kreplay_sim_kernel_create(sim, "increment_u64", &k));
    KR_OK(kreplay_sim_counter_select(sim, 0, KREPLAY_SIM_COUNTER_WORK_ITEMS));
    args[0] = a;
    args[1] = 1;
    g.x = UINT32_MAX;
    g.y = UINT32_MAX;
    g.z = UINT32_MAX;
    KR_OK(kreplay_sim_dispatch(sim, 0, 0, k, args, sizeof(args), g, &d));
    memset(&r, 0, sizeof(r));
    r.size = sizeof(r);
    KR_OK(kreplay_sim_wait(d, &r));
    memset(&sample, 0, sizeof(sample));
    sample.size = sizeof(sample);
    KR_OK(kreplay_sim_counter_read(sim, 0, KREPLAY_SIM_LAST_EXECUTION, &sample));
    KR_CHECK(sample.value == UINT64_MAX);
    KR_CHECK(sample.group == KREPLAY_SIM_COUNTER_WORK_ITEMS);
    /* The next grid is counted exactly again. */
    g.y = 2;
    g.z = 1;
    KR_OK(kreplay_sim_dispatch(sim, 0, 0, k, args, sizeof(args), g, &d));
    KR_OK(kreplay_sim_wait(d, &r));
    KR_OK(kreplay_sim_counter_read(sim, 0, KREPLAY_SIM_LAST_EXECUTION, &sample));
    KR_CHECK(sample.value == 2 * (uint64_t)UINT32_MAX);
    KR_OK(kreplay_shutdown());
}

int main(int argc, char** argv) {
    const char* which = argc > 1 ? argv[1] : "";
    memset(&the_tool, 0, sizeof(the_tool));
    if (strcmp(which, "env") == 0) {
        scenario_env();
    } else if (strcmp(which, "counters") == 0) {
        scenario_counters();
    } else if (strcmp(which, "unload") == 0) {
        scenario_unload();
    } else if (strcmp(which, "shutdown") == 0) {
        /* Passes of the window shutdown meets (fewer under valgrind). */
        scenario_shutdown(argc > 2 ? strtoull(argv[2], NULL, 10) : 64, 0);
    } else if (strcmp(which, "destroy") == 0) {
        scenario_shutdown(argc > 2 ? strtoull(argv[2], NULL, 10) : 64, 1);
    } else {
        fprintf(stderr, "usage: %s env|unload|shutdown|destroy|counters [PASSES]\n", argv[0]);
        return 2;
    }
    return kr_report();
}
