// cpp-counter-tool: a C++17 profiler-style tool on kernel-replay's C ABI.
//
// It asks for one replay pass per counter group (4), collects one group per pass on the
// simulated GPU, switches a second context ("tracing") off for pass 1 only, and prints per-pass
// results and each dispatch's outcome. It runs the same workload once without replay on another
// simulator and exits non-zero unless the memory after replay is identical: replay must leave
// the application with exactly the result of one execution.
//
// With CPP_COUNTER_TOOL_CAPTURE=DIR it also asks, in the first PASS ENTER of the module's kernel
// (increment_u64: on the simulator only a module's kernels have a code image to capture), for
// a capture of that pass into the new folder DIR (SPEC 13: the format of the replay-capture
// crate), and prints what became of it in CONFIG EXIT.
//
// Everything goes through include/kernel_replay.h; no GPU is needed.
#include <kernel_replay.h>

#include <array>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kGroups = KREPLAY_SIM_COUNTER_GROUP_COUNT;  // one pass per group
constexpr uint32_t kN = 4096;                                  // elements per buffer

// Fails the tool with the library's own description of what went wrong.
void check(kreplay_status_t s, const char* what) {
    if (s != KREPLAY_STATUS_OK) {
        std::fprintf(stderr, "cpp-counter-tool: %s: %s (%s)\n", what, kreplay_status_string(s),
                     kreplay_last_error());
        std::exit(2);
    }
}

const char* outcome_name(kreplay_outcome_kind_t o) {
    switch (o) {
        case KREPLAY_OUTCOME_REPLAYED: return "replayed";
        case KREPLAY_OUTCOME_DECLINED: return "declined";
        case KREPLAY_OUTCOME_TRUNCATED: return "truncated";
        case KREPLAY_OUTCOME_NOT_REQUESTED: return "not_requested";
        default: return "none";
    }
}

const char* reason_name(kreplay_reason_t r) {
    static const char* const names[] = {
        "none", "untracked_memory", "footprint_budget", "snapshot_failed", "queue_drain_stuck",
        "agent_drain_stuck", "copy_fence_stuck", "reentrant_dispatch", "callback_failed",
        "pass_drain_stuck", "pass_limit", "write_outside_scope", "submit_failed",
        "scope_check_failed", "device_error", "agent_busy",
        "unseen_writes"};
    return r < sizeof(names) / sizeof(names[0]) ? names[r] : "unknown";
}

struct PassResult {
    kreplay_sim_counter_group_t group = KREPLAY_SIM_COUNTER_NONE;
    uint64_t value = 0;
    bool tracing = false;
};

// The tool's state, reached through callback_data.
struct Tool {
    kreplay_sim_t sim{};
    kreplay_context_t tracing{};
    std::array<PassResult, kGroups> passes{};
    int replayed = 0;
    int dispatches = 0;
    const char* capture_dir = std::getenv("CPP_COUNTER_TOOL_CAPTURE");
    bool capture_asked = false;
    bool capture_shown = false;
};

// What became of the capture asked for (final by CONFIG EXIT).
void show_capture(const char* dir) {
    kreplay_capture_result_t r{};
    r.size = sizeof(r);
    check(kreplay_capture_result(dir, &r), "kreplay_capture_result");
    char message[4096];
    size_t required = 0;
    check(kreplay_capture_message(dir, message, sizeof(message), &required),
          "kreplay_capture_message");
    std::printf("capture written=%s regions=%u bytes=%" PRIu64 ": %s\n",
                r.state == KREPLAY_CAPTURE_WRITTEN ? "yes" : "no", r.region_count,
                r.captured_bytes, message);
}

// The pass-count callback: one pass per counter group.
uint64_t pass_count(const kreplay_dispatch_info_t*, kreplay_user_data_t) { return kGroups; }

void on_replay(kreplay_operation_t op, kreplay_phase_t phase, kreplay_replay_payload_t* p,
               kreplay_user_data_t*, void* data) {
    auto& tool = *static_cast<Tool*>(data);
    const kreplay_dispatch_info_t& info = *p->dispatch_info;
    const uint32_t agent = static_cast<uint32_t>(info.agent_id);
    const uint32_t pass = p->current_pass;

    if (op == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_ENTER) {
        p->replay_pass_count = pass_count;
        tool.passes = {};
    } else if (op == KREPLAY_OPERATION_PASS && phase == KREPLAY_PHASE_ENTER && pass < kGroups) {
        // Switch tracing off for pass 1 only (local to this loop, SPEC 5).
        if (pass == 1) check(p->replay_stop_context(tool.tracing), "replay_stop_context");
        if (pass == 2) check(p->replay_start_context(tool.tracing), "replay_start_context");
        int32_t on = 0;
        check(kreplay_context_participates(tool.tracing, &on), "kreplay_context_participates");
        tool.passes[pass].tracing = on != 0;
        if (tool.capture_dir != nullptr && !tool.capture_asked &&
            std::strcmp(info.kernel_name, "increment_u64") == 0) {
            check(kreplay_request_capture(tool.capture_dir, 0), "kreplay_request_capture");
            tool.capture_asked = true;
        }
        // Program this pass's counter group; the pass is submitted after PASS ENTER returns.
        check(kreplay_sim_counter_select(tool.sim, agent, pass), "kreplay_sim_counter_select");
    } else if (op == KREPLAY_OPERATION_PASS && phase == KREPLAY_PHASE_EXIT && pass < kGroups) {
        kreplay_sim_counter_sample_t s{};
        s.size = sizeof(s);
        check(kreplay_sim_counter_read(tool.sim, info.dispatch_id, pass, &s),
              "kreplay_sim_counter_read");
        tool.passes[pass].group = s.group;
        tool.passes[pass].value = s.value;
    } else if (op == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_EXIT) {
        check(kreplay_sim_counter_select(tool.sim, agent, KREPLAY_SIM_COUNTER_NONE),
              "kreplay_sim_counter_select");
        const kreplay_outcome_t& o = *p->outcome;
        tool.dispatches++;
        std::printf("dispatch=%" PRIu64 " kernel=%s\n", info.dispatch_id, info.kernel_name);
        for (uint32_t i = 0; i < o.executed_passes && i < kGroups; i++) {
            const PassResult& r = tool.passes[i];
            std::printf("  pass=%u group=%s value=%" PRIu64 " tracing=%s\n", i,
                        kreplay_sim_counter_group_name(r.group), r.value,
                        r.tracing ? "on" : "off");
        }
        std::printf("outcome dispatch=%" PRIu64 " kernel=%s outcome=%s reason=%s "
                    "requested_passes=%" PRIu64 " executed_passes=%u\n",
                    o.dispatch_id, o.kernel, outcome_name(o.outcome), reason_name(o.reason),
                    o.requested_passes, o.executed_passes);
        if (o.outcome == KREPLAY_OUTCOME_REPLAYED) tool.replayed++;
        if (tool.capture_asked && !tool.capture_shown) {
            show_capture(tool.capture_dir);
            tool.capture_shown = true;
        }
    }
}

// The application: three kernels over two buffers and a module variable, on one agent.
struct App {
    kreplay_sim_t sim{};
    uint64_t x = 0, y = 0, sum = 0, hits = 0;
    kreplay_sim_kernel_t fill{}, axpy{}, reduce{}, inc{};

    explicit App(kreplay_sim_t s) : sim(s) {
        check(kreplay_sim_alloc(sim, 0, kN * 4, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &x), "alloc x");
        check(kreplay_sim_alloc(sim, 0, kN * 4, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &y), "alloc y");
        check(kreplay_sim_alloc(sim, 0, 8, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &sum), "alloc sum");
        std::vector<uint32_t> init(kN);
        for (uint32_t i = 0; i < kN; i++) init[i] = i;
        check(kreplay_sim_write(sim, y, init.data(), init.size() * 4), "write y");

        kreplay_sim_variable_t hits_var{};
        hits_var.name = "g_hits";
        hits_var.size = 8;
        const char* kernels[] = {"increment_u64"};
        kreplay_sim_module_desc_t desc{};
        desc.size = sizeof(desc);
        desc.name = "app.co";
        desc.variables = &hits_var;
        desc.variable_count = 1;
        desc.kernels = kernels;
        desc.kernel_count = 1;
        kreplay_sim_module_t module{};
        check(kreplay_sim_module_load(sim, 0, &desc, &module), "kreplay_sim_module_load");
        check(kreplay_sim_module_variable(module, "g_hits", &hits), "module variable");
        check(kreplay_sim_module_kernel(module, "increment_u64", &inc), "module kernel");
        check(kreplay_sim_kernel_create(sim, "fill_u32", &fill), "kernel fill_u32");
        check(kreplay_sim_kernel_create(sim, "axpy_rmw", &axpy), "kernel axpy_rmw");
        check(kreplay_sim_kernel_create(sim, "reduce_sum_u32", &reduce), "kernel reduce_sum_u32");
    }

    void launch(kreplay_sim_kernel_t k, std::vector<uint64_t> args, uint32_t grid) const {
        kreplay_sim_dispatch_t d{};
        check(kreplay_sim_dispatch(sim, 0, 0, k, args.data(), args.size() * 8, {grid, 1, 1}, &d),
              "kreplay_sim_dispatch");
        kreplay_sim_result_t r{};
        r.size = sizeof(r);
        check(kreplay_sim_wait(d, &r), "kreplay_sim_wait");
        if (r.completions != 1) {
            std::fprintf(stderr, "cpp-counter-tool: completion fired %u times\n", r.completions);
            std::exit(1);
        }
    }

    // x = 7; y = 3x + y; sum += y; g_hits += 1.
    void run() const {
        launch(fill, {x, kN, 7}, kN);
        launch(axpy, {x, y, kN, 3}, kN);
        launch(reduce, {y, kN, sum}, kN);
        launch(inc, {hits, 1}, 1);
    }

    std::string digest() const {
        kreplay_sim_digest_t d{};
        check(kreplay_sim_digest(sim, 0, &d), "kreplay_sim_digest");
        char buf[40];
        std::snprintf(buf, sizeof(buf), "%016" PRIx64 "%016" PRIx64, d.hi, d.lo);
        return buf;
    }
};

}  // namespace

int main() {
    uint32_t major = 0, minor = 0, patch = 0;
    check(kreplay_version(&major, &minor, &patch), "kreplay_version");
    if (major != KREPLAY_VERSION_MAJOR || minor != KREPLAY_VERSION_MINOR) {
        std::fprintf(stderr, "cpp-counter-tool: header %d.%d, library %u.%u\n",
                     KREPLAY_VERSION_MAJOR, KREPLAY_VERSION_MINOR, major, minor);
        return 2;
    }
    std::printf("cpp-counter-tool on kernel-replay %s (simulated GPU)\n", kreplay_version_string());

    // Contexts: the tool owns replay; "tracing" is a second service it switches per pass.
    static Tool tool;
    kreplay_context_t owner{}, tracing{};
    check(kreplay_context_create(&owner), "kreplay_context_create");
    check(kreplay_context_create(&tracing), "kreplay_context_create");
    check(kreplay_context_declare_participant(tracing, "pc_sampling", KREPLAY_OVERRIDES_HONOURED),
          "kreplay_context_declare_participant");
    check(kreplay_context_start(tracing), "kreplay_context_start");
    tool.tracing = tracing;
    check(kreplay_configure_replay(owner, KREPLAY_SUBSCRIBE_CONFIG | KREPLAY_SUBSCRIBE_PASS,
                                   on_replay, &tool),
          "kreplay_configure_replay");

    // The reference: the same application, replay off.
    kreplay_sim_t ref_sim{};
    check(kreplay_sim_create(1, &ref_sim), "kreplay_sim_create");
    const App reference(ref_sim);
    reference.run();
    const std::string expected = reference.digest();

    // With replay: every dispatch runs once per counter group.
    check(kreplay_context_start(owner), "kreplay_context_start");
    kreplay_sim_t sim{};
    check(kreplay_sim_create(1, &sim), "kreplay_sim_create");
    tool.sim = sim;
    const App app(sim);
    app.run();
    const std::string got = app.digest();

    kreplay_summary_t s{};
    s.size = sizeof(s);
    check(kreplay_summary_get(&s), "kreplay_summary_get");
    std::printf("summary dispatches=%" PRIu64 " replayed=%" PRIu64 " passes=%" PRIu64 "\n",
                s.dispatches, s.replayed, s.passes);

    const bool same = got == expected;
    if (same) {
        std::printf("memory: identical to the run without replay (digest %s)\n", got.c_str());
    } else {
        std::printf("memory: DIFFERS from the run without replay (%s, expected %s)\n",
                    got.c_str(), expected.c_str());
    }
    check(kreplay_sim_destroy(ref_sim), "kreplay_sim_destroy");
    check(kreplay_sim_destroy(sim), "kreplay_sim_destroy");
    check(kreplay_shutdown(), "kreplay_shutdown");
    return same && tool.replayed == tool.dispatches && tool.dispatches == 4 ? 0 : 1;
}
