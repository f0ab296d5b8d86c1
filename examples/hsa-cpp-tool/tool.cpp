// hsa-cpp-tool: a C++17 replay tool for AMD GPUs, attached to kernel-replay's HSA tool library.
//
//   cargo build --release -p replay-ffi --features hsa      (or install.sh, see CMakeLists.txt)
//   HSA_TOOLS_LIB=.../libkernel_replay.so KREPLAY_HSA_TOOL=.../libhsa-cpp-tool.so ./app
//
// The HSA runtime loads libkernel_replay.so (built with `--features hsa`) and calls its OnLoad,
// which wraps the runtime's API table, then dlopens this library and calls kreplay_tool_init.
// This library links libkernel_replay, so it configures that same instance through the C ABI
// (include/kernel_replay.h): one replay pass per counter group. PASS ENTER is where a real
// profiler programs the pass's group, PASS EXIT where it reads it out; this one records which
// group each pass got and each dispatch's outcome. kreplay_tool_fini (called from OnUnload)
// prints a summary to stderr; hsa_cpp_tool_report() hands the same record to tests.
//
// A tool that submits work of its own (a counter read-out kernel, a timestamp barrier) and
// waits for it inside a callback must run it on a queue of its own, declared as the tool's
// with kreplay_hsa_mark_tool_queue (kernel_replay_hsa.h) right after hsa_queue_create, where it
// creates it at start-up: an undeclared queue is an application queue, and work written there
// while a window runs is parked until the window ends (kernel-replay names the queue in a
// warning). This example submits nothing of its own; hsa_cpp_tool_use_queue() shows the call.
//
// Build: CMakeLists.txt next to this file (find_package(kernel_replay)), or
//   c++ -std=c++17 -shared -fPIC -fvisibility=hidden -I<prefix>/include tool.cpp
//       -L<prefix>/lib -lkernel_replay -Wl,-rpath,<prefix>/lib -o libhsa-cpp-tool.so
#include <kernel_replay.h>
#include <kernel_replay_hsa.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#define HSA_CPP_TOOL_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// One pass per group (rocprof counter names).
const char* const kGroups[] = {"SQ_WAVES", "SQ_INSTS_VALU", "TCC_HIT", "TCC_MISS"};
constexpr uint32_t kGroupCount = sizeof(kGroups) / sizeof(kGroups[0]);

struct Dispatch {
    uint64_t id = 0;
    std::string kernel;
    std::vector<std::string> programmed;  // PASS ENTER, in order
    std::vector<std::string> read_out;    // PASS EXIT, in order
    std::string outcome = "none";
    uint32_t executed_passes = 0;
};

// The tool's state. Callbacks run on whatever thread runs the replay window; the report is
// read from another: everything behind one mutex.
struct Tool {
    std::mutex mutex;
    kreplay_context_t context{};
    int init_calls = 0;
    int fini_calls = 0;
    uint64_t runtime_version = 0;
    uint64_t passes = 0;
    std::map<uint64_t, Dispatch> open;  // between CONFIG ENTER and EXIT, by dispatch id
    std::vector<Dispatch> done;
};

Tool& tool() {
    static Tool t;
    return t;
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

uint64_t pass_count(const kreplay_dispatch_info_t*, kreplay_user_data_t) { return kGroupCount; }

void on_replay(kreplay_operation_t op, kreplay_phase_t phase, kreplay_replay_payload_t* p,
               kreplay_user_data_t*, void*) noexcept {
    // No exception may leave a callback (it would cross the C ABI): a failure here only
    // costs this record.
    try {
        Tool& t = tool();
        const kreplay_dispatch_info_t& info = *p->dispatch_info;
        std::lock_guard<std::mutex> lock(t.mutex);
        if (op == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_ENTER) {
            p->replay_pass_count = pass_count;
            Dispatch& d = t.open[info.dispatch_id];
            d.id = info.dispatch_id;
            d.kernel = info.kernel_name ? info.kernel_name : "";
        } else if (op == KREPLAY_OPERATION_PASS && p->current_pass < kGroupCount) {
            Dispatch& d = t.open[info.dispatch_id];
            const char* group = kGroups[p->current_pass];
            if (phase == KREPLAY_PHASE_ENTER) {
                d.programmed.emplace_back(group);  // a real tool programs the group here
            } else {
                d.read_out.emplace_back(group);  // ... and reads it out here
                t.passes++;
            }
        } else if (op == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_EXIT) {
            auto it = t.open.find(info.dispatch_id);
            if (it == t.open.end()) return;
            Dispatch d = std::move(it->second);
            t.open.erase(it);
            if (p->outcome) {
                d.outcome = outcome_name(p->outcome->outcome);
                d.executed_passes = p->outcome->executed_passes;
            }
            t.done.push_back(std::move(d));
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hsa-cpp-tool: callback: %s\n", e.what());
    } catch (...) {
        std::fprintf(stderr, "hsa-cpp-tool: callback: unknown exception\n");
    }
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& g : v) s += (s.empty() ? "" : ",") + g;
    return s;
}

// What the tool saw, one line per fact:
//   tool init_calls=1 runtime_version=7 fini_calls=0 passes=4
//   dispatch id=1 kernel=K outcome=replayed executed_passes=4 programmed=A,B read_out=A,B
std::string report_text() {
    Tool& t = tool();
    std::lock_guard<std::mutex> lock(t.mutex);
    char line[256];
    std::snprintf(line, sizeof(line),
                  "tool init_calls=%d runtime_version=%" PRIu64 " fini_calls=%d passes=%" PRIu64
                  "\n",
                  t.init_calls, t.runtime_version, t.fini_calls, t.passes);
    std::string s = line;
    for (const Dispatch& d : t.done) {
        std::snprintf(line, sizeof(line), "dispatch id=%" PRIu64 " kernel=%s outcome=%s "
                      "executed_passes=%u ", d.id, d.kernel.c_str(), d.outcome.c_str(),
                      d.executed_passes);
        s += line;
        s += "programmed=" + join(d.programmed) + " read_out=" + join(d.read_out) + "\n";
    }
    return s;
}

}  // namespace

// Called once by kernel-replay's OnLoad, after its wrappers are installed. 0 = success; any
// other value is logged by kernel-replay and leaves replay unconfigured.
HSA_CPP_TOOL_EXPORT int kreplay_tool_init(uint64_t runtime_version) {
    try {
        Tool& t = tool();
        uint32_t major = 0, minor = 0, patch = 0;
        if (kreplay_version(&major, &minor, &patch) != KREPLAY_STATUS_OK ||
            major != KREPLAY_VERSION_MAJOR || minor != KREPLAY_VERSION_MINOR) {
            std::fprintf(stderr, "hsa-cpp-tool: header %d.%d, library %s\n",
                         KREPLAY_VERSION_MAJOR, KREPLAY_VERSION_MINOR, kreplay_version_string());
            return 1;
        }
        {
            std::lock_guard<std::mutex> lock(t.mutex);
            t.init_calls++;
            t.runtime_version = runtime_version;
        }
        kreplay_context_t ctx{};
        kreplay_status_t s = kreplay_context_create(&ctx);
        if (s == KREPLAY_STATUS_OK)
            s = kreplay_configure_replay(ctx, KREPLAY_SUBSCRIBE_CONFIG | KREPLAY_SUBSCRIBE_PASS,
                                         on_replay, nullptr);
        if (s == KREPLAY_STATUS_OK) s = kreplay_context_start(ctx);
        if (s != KREPLAY_STATUS_OK) {
            std::fprintf(stderr, "hsa-cpp-tool: configuring replay: %s (%s)\n",
                         kreplay_status_string(s), kreplay_last_error());
            return 2;
        }
        t.context = ctx;
        std::fprintf(stderr, "hsa-cpp-tool: runtime %" PRIu64 ", %u passes per dispatch\n",
                     runtime_version, kGroupCount);
        return 0;
    } catch (...) {
        return 3;
    }
}

// Called by kernel-replay's OnUnload: prints what the tool saw and the library's summary.
HSA_CPP_TOOL_EXPORT void kreplay_tool_fini(void) {
    try {
        {
            std::lock_guard<std::mutex> lock(tool().mutex);
            tool().fini_calls++;
        }
        std::fprintf(stderr, "hsa-cpp-tool summary:\n%s", report_text().c_str());
        kreplay_summary_t s{};
        s.size = sizeof(s);
        if (kreplay_summary_get(&s) == KREPLAY_STATUS_OK)
            std::fprintf(stderr,
                         "hsa-cpp-tool: kernel-replay: dispatches=%" PRIu64 " replayed=%" PRIu64
                         " passes=%" PRIu64 "\n",
                         s.dispatches, s.replayed, s.passes);
    } catch (...) {
    }
}

// Declares `queue` (an hsa_queue_t* created with hsa_queue_create) as this tool's own, so its
// work there runs inside replay windows. A real tool calls kreplay_hsa_mark_tool_queue this way
// for each queue it creates in kreplay_tool_init; tests call this with queues they created.
// Returns kernel-replay's status (KREPLAY_STATUS_OK = 0).
HSA_CPP_TOOL_EXPORT int hsa_cpp_tool_use_queue(void* queue) {
    const kreplay_status_t s = kreplay_hsa_mark_tool_queue(queue);
    if (s != KREPLAY_STATUS_OK)
        std::fprintf(stderr, "hsa-cpp-tool: declaring queue %p: %s (%s)\n", queue,
                     kreplay_status_string(s), kreplay_last_error());
    return s;
}

// For tests: copies the report (see report_text) into `buffer` like snprintf (at most
// size - 1 bytes and a NUL) and returns its length; 0 on failure.
HSA_CPP_TOOL_EXPORT size_t hsa_cpp_tool_report(char* buffer, size_t size) {
    try {
        const std::string text = report_text();
        if (buffer && size > 0) {
            const size_t n = text.size() < size - 1 ? text.size() : size - 1;
            std::memcpy(buffer, text.data(), n);
            buffer[n] = '\0';
        }
        return text.size();
    } catch (...) {
        return 0;
    }
}
