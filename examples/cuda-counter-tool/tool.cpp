// cuda-counter-tool: a C++17 tool that collects NVIDIA hardware counters of every replayed
// kernel through kernel-replay's C ABI (include/kernel_replay_cuda.h), in two metric groups.
//
//   cargo build --release -p replay-ffi --features replay-ffi/cuda
//   LD_PRELOAD=.../libkernel_replay.so CUDA_INJECTION64_PATH=.../libkernel_replay.so
//     KREPLAY_CUDA_TOOL=.../libcuda-counter-tool.so KREPLAY_CACHE_CONTROL=flush ./app
//
// libkernel_replay's injection loads this library and calls kreplay_tool_init. The tool
// creates two collections, one per metric group (instructions, memory traffic), and gives
// even dispatches to the first and odd ones to the second: its pass-count callback asks for
// the collection's passes, its replay callback forwards PASS ENTER, PASS EXIT and CONFIG EXIT
// to it, and at exit it prints every value with the pass that collected it, then each
// collection's JSON report (replay_report's CounterReport) to stderr. It needs a GPU to run;
// CI compiles it against the library (crates/replay-ffi/tests/cuda_counter_tool.rs).
//
// Build: CMakeLists.txt next to this file, or
//   c++ -std=c++17 -shared -fPIC -fvisibility=hidden -I<prefix>/include tool.cpp
//       -L<prefix>/lib -lkernel_replay -Wl,-rpath,<prefix>/lib -o libcuda-counter-tool.so
#include <kernel_replay_cuda.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#define CUDA_COUNTER_TOOL_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

const char* const kInstructions[] = {"launch__grid_size", "smsp__inst_executed.sum",
                                     "gpu__time_duration.sum"};
const char* const kMemory[] = {"dram__bytes_read.sum", "dram__bytes_write.sum",
                               "lts__t_sectors.sum"};

struct Group {
    const char* name;
    const char* const* metrics;
    size_t count;
    kreplay_counters_t collection = 0;
    std::vector<uint64_t> dispatches;
};

struct Tool {
    std::mutex mutex;
    kreplay_context_t context{};
    Group groups[2] = {{"instructions", kInstructions, 3, 0, {}}, {"memory", kMemory, 3, 0, {}}};
};

Tool& tool() {
    static Tool t;
    return t;
}

Group& group_of(uint64_t dispatch_id) { return tool().groups[dispatch_id % 2]; }

void complain(const char* what, kreplay_status_t s) {
    std::fprintf(stderr, "cuda-counter-tool: %s: %s: %s\n", what, kreplay_status_string(s),
                 kreplay_last_error());
}

uint64_t pass_count(const kreplay_dispatch_info_t* info, kreplay_user_data_t) {
    uint32_t n = 0;
    kreplay_status_t s = kreplay_cuda_counters_passes(group_of(info->dispatch_id).collection, &n);
    if (s != KREPLAY_STATUS_OK) {
        complain("passes", s);
        return 0;  // no replay
    }
    return n;
}

void on_replay(kreplay_operation_t op, kreplay_phase_t phase, kreplay_replay_payload_t* p,
               kreplay_user_data_t*, void*) noexcept {
    try {
        Group& g = group_of(p->dispatch_info->dispatch_id);
        if (op == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_ENTER) {
            p->replay_pass_count = pass_count;
            return;
        }
        kreplay_status_t s = kreplay_cuda_counters_callback(g.collection, op, phase, p);
        if (s != KREPLAY_STATUS_OK) complain("callback", s);
        if (op == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_EXIT) {
            std::lock_guard<std::mutex> lock(tool().mutex);
            g.dispatches.push_back(p->dispatch_info->dispatch_id);
        }
    } catch (...) {
        // Nothing may unwind into the library.
    }
}

void report() {
    Tool& t = tool();
    std::lock_guard<std::mutex> lock(t.mutex);
    for (Group& g : t.groups) {
        for (uint64_t d : g.dispatches) {
            for (size_t i = 0; i < g.count; ++i) {
                uint32_t pass = 0;
                double value = 0;
                kreplay_status_t s =
                    kreplay_cuda_counters_value(g.collection, d, g.metrics[i], &pass, &value);
                if (s == KREPLAY_STATUS_OK)
                    std::fprintf(stderr, "cuda-counter-tool: %s dispatch %" PRIu64 " pass %u %s = %g\n",
                                 g.name, d, pass, g.metrics[i], value);
                else
                    std::fprintf(stderr, "cuda-counter-tool: %s dispatch %" PRIu64 " %s: %s\n",
                                 g.name, d, g.metrics[i], kreplay_last_error());
            }
        }
        size_t need = 0;
        kreplay_cuda_counters_report_json(g.collection, nullptr, 0, &need);
        std::string json(need, '\0');
        if (need > 0 && kreplay_cuda_counters_report_json(g.collection, &json[0], json.size(),
                                                          &need) == KREPLAY_STATUS_OK)
            std::fprintf(stderr, "cuda-counter-tool: %s report %s\n", g.name, json.c_str());
        kreplay_cuda_counters_destroy(g.collection);
        g.collection = 0;
    }
}

}  // namespace

CUDA_COUNTER_TOOL_EXPORT int kreplay_tool_init(uint64_t driver_version) {
    try {
        Tool& t = tool();
        std::fprintf(stderr, "cuda-counter-tool: driver %" PRIu64 ", library %s\n",
                     driver_version, kreplay_version_string());
        for (Group& g : t.groups) {
            kreplay_status_t s = kreplay_cuda_counters_create(g.metrics, g.count, 2, &g.collection);
            if (s != KREPLAY_STATUS_OK) {
                complain(g.name, s);
                return 1;
            }
        }
        kreplay_status_t s = kreplay_context_create(&t.context);
        if (s == KREPLAY_STATUS_OK)
            s = kreplay_configure_replay(t.context, KREPLAY_SUBSCRIBE_CONFIG | KREPLAY_SUBSCRIBE_PASS,
                                         on_replay, nullptr);
        if (s == KREPLAY_STATUS_OK) s = kreplay_context_start(t.context);
        if (s != KREPLAY_STATUS_OK) {
            complain("configure", s);
            return 1;
        }
        std::atexit(report);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cuda-counter-tool: %s\n", e.what());
        return 1;
    }
}
