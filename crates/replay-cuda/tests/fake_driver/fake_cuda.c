/*
 * A fake CUDA driver (libcuda.so.1) for testing replay-cuda's host side without a GPU.
 *
 * Device memory is host memory (pointers are unified, as on a real 64-bit system); every
 * asynchronous operation runs at once on the calling thread; the kernels replay-cuda and its
 * benchmark use are emulated by name in C. A stream made busy by `kr_spin` completes events
 * recorded on it only when its busy time has passed, so bounded waits and drain timeouts can be
 * exercised. Globals: `kr_counter` and `kr_table` resolve by name, the static `kr_hidden` does
 * not (as a test of section-base resolution), laid out as NVRTC lays out globals.cu.
 *
 * Device allocations (cuMemAlloc and friends) are carved one after another out of one reserved
 * arena, so consecutive allocations are adjacent in the address space as on a real GPU, and a
 * copy whose device end runs from one allocation (or one module variable) into the next fails
 * with CUDA_ERROR_INVALID_VALUE, as the real driver's does. cuMemGetAddressRange reports the
 * allocation around a pointer.
 *
 * Stream capture is modelled with the rules a tool must respect: a launch or copy into a
 * capturing stream becomes a graph node (run by cuGraphLaunch), not work; recording an event on
 * a capturing stream joins the capture, and querying that event invalidates it; anything
 * submitted to the legacy stream while a blocking stream captures invalidates that capture
 * (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT); and a "potentially unsafe" call (allocation, free,
 * event or stream query, synchronisation) made by a thread in global capture mode while
 * another thread captures in global mode (or by a thread with its own non-relaxed capture)
 * fails and invalidates those captures, unless the calling thread exchanged its mode for
 * relaxed (cuThreadExchangeStreamCaptureMode). cuMemFree and cuMemFreeHost wait for every
 * stream, as the real ones wait for the device; fake_cuda_blocking_frees() counts those that
 * had to wait. cuPointerGetAttributes answers from the allocation list. Fault injection:
 * fake_cuda_fail_record_after(name) makes the first cuEventRecord after the next launch of
 * kernel `name` fail. cuStreamWaitEvent makes the stream busy until the event's time and is
 * logged (fake_cuda_stream_waits, fake_cuda_stream_wait_at); fake_cuda_fail_default_waits(n)
 * makes the next n of them on the default stream fail (CUDA_ERROR_INVALID_VALUE, not logged);
 * fake_cuda_fail_host_registers(n) makes the next n cuMemHostRegister calls fail (out of memory).
 * Sticky errors: fake_cuda_fault_launch(name, after) makes the launch of kernel `name` after
 * `after` more launches of it fault on the device: the launch itself succeeds, as a real one
 * does, and the next call that observes the device (an event or stream query, a
 * synchronisation) makes CUDA_ERROR_ILLEGAL_ADDRESS (700) the context's sticky error, which
 * every later query, synchronisation, record, copy, stream wait and launch returns;
 * fake_cuda_set_sticky(code) sets it at once (4, CUDA_ERROR_DEINITIALIZED, is what the driver
 * answers once its teardown ran at process exit), and 0 clears it.
 * fake_cuda_records_on(s) counts the events recorded on stream s (which streams a drain covers).
 *
 * fake_cuda_set_mem(bytes) sets the device's memory (an allocation past it fails with out of
 * memory) and fake_cuda_mem_used() says how much is allocated.
 * Environment: FAKE_CUDA_MEM (device bytes, default 8 GiB), FAKE_CUDA_NO_DEVICE=1 (cuInit
 * fails with CUDA_ERROR_NO_DEVICE), KR_FAKE_INIT_RESERVE=ADDR:BYTES (cuInit maps BYTES of
 * inaccessible memory with ADDR as a hint, as the real driver makes reservations of its own
 * when it starts, and says on stderr where it went), KR_FAKE_IGNORE_ADDRESS_HINT (see
 * cuMemAddressReserve).
 *
 * This file holds the shared state and helpers, the initialisation, the device queries and the
 * error names; the other entries are in fake_cuda_*.c by API family, over the types, state and
 * helpers of fake_cuda_internal.h. Build every fake_cuda*.c together.
 */
#include "fake_cuda_internal.h"

pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised;
u64 mem_total = 8ULL << 30;
u64 mem_used;
int ctx_token;
__thread void* current_ctx;

u64 now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (u64)ts.tv_sec * 1000000000ULL + (u64)ts.tv_nsec;
}

/* The context's sticky error (0: none), and a fault launched but not yet observed. */
static CUresult sticky_error;
int fault_launched;
char fault_kernel[64];
int fault_after;

/* The sticky error, once the host observes the device (a faulted launch becomes it). */
static CUresult sticky_observed(void) {
    pthread_mutex_lock(&lock);
    if (fault_launched && sticky_error == OK) {
        sticky_error = 700;
    }
    fault_launched = 0;
    CUresult r = sticky_error;
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult sticky_now(void) {
    pthread_mutex_lock(&lock);
    CUresult r = sticky_error;
    pthread_mutex_unlock(&lock);
    return r;
}

void fake_cuda_fault_launch(const char* kernel, int after) {
    pthread_mutex_lock(&lock);
    snprintf(fault_kernel, sizeof fault_kernel, "%s", kernel);
    fault_after = after;
    pthread_mutex_unlock(&lock);
}

void fake_cuda_set_sticky(int code) {
    pthread_mutex_lock(&lock);
    sticky_error = code;
    fault_launched = 0;
    fault_kernel[0] = 0;
    pthread_mutex_unlock(&lock);
}

/* A potentially unsafe call: E_CAPTURE_UNSUPPORTED (and invalidated captures) if prohibited. */
CUresult unsafe_call(void) {
    CUresult sticky = sticky_observed();
    if (sticky != OK) {
        return sticky;
    }
    pthread_mutex_lock(&lock);
    int p = prohibited_locked();
    pthread_mutex_unlock(&lock);
    if (p) {
        fprintf(stderr, "fake_cuda: a potentially unsafe call during a stream capture\n");
    }
    return p ? E_CAPTURE_UNSUPPORTED : OK;
}

/* Submitting to `st`: OK (runs), CAPTURED (becomes a node), or an error (the legacy stream
 * while a blocking stream captures: that capture is invalidated). */
CUresult submit_to(struct stream* st) {
    CUresult sticky = sticky_now();
    if (sticky != OK) {
        return sticky;
    }
    pthread_mutex_lock(&lock);
    CUresult r = OK;
    if (st == &legacy) {
        for (struct stream* o = streams; o; o = o->next_stream) {
            if (o->capture == CAP_ACTIVE && !o->nonblocking) {
                o->capture = CAP_INVALIDATED;
                r = E_CAPTURE_IMPLICIT;
            }
        }
    } else if (st->capture == CAP_ACTIVE) {
        r = CAPTURED;
    } else if (st->capture == CAP_INVALIDATED) {
        r = E_CAPTURE_INVALIDATED;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* The context's function of a launch handle that is a library's kernel, NULL for a plain
 * function (fake_inject.c sets it): a captured launch's node holds that function. */
void* (*context_function_of)(void* f);

struct node* add_node(struct stream* st) {
    pthread_mutex_lock(&lock);
    struct node* n = NULL;
    if (st->graph && st->graph->n < MAX_NODES) {
        n = calloc(1, sizeof *n);
        /* A capture orders everything on its stream: each node follows the one before. */
        if (st->graph->n > 0) {
            n->deps[0] = st->graph->nodes[st->graph->n - 1];
            n->ndeps = 1;
        }
        st->graph->nodes[st->graph->n++] = n;
    }
    pthread_mutex_unlock(&lock);
    return n;
}

u64 device_busy_until(void) {
    pthread_mutex_lock(&lock);
    u64 b = legacy.busy_until;
    for (struct stream* st = streams; st; st = st->next_stream) {
        if (st->busy_until > b) {
            b = st->busy_until;
        }
    }
    pthread_mutex_unlock(&lock);
    return b;
}

void fake_cuda_set_mem(u64 bytes) {
    pthread_mutex_lock(&lock);
    mem_total = bytes;
    pthread_mutex_unlock(&lock);
}

u64 fake_cuda_mem_used(void) {
    pthread_mutex_lock(&lock);
    u64 u = mem_used;
    pthread_mutex_unlock(&lock);
    return u;
}

/* ---- the initialisation and device queries -------------------------------------------- */

CUresult cuInit(unsigned flags) {
    (void)flags;
    if (getenv("FAKE_CUDA_NO_DEVICE")) {
        return E_NO_DEVICE;
    }
    const char* m = getenv("FAKE_CUDA_MEM");
    if (m) {
        mem_total = strtoull(m, NULL, 10);
    }
    /* The driver's own reservations at start-up: where the hint is free, they take it. */
    const char* r = getenv("KR_FAKE_INIT_RESERVE");
    static int reserved;
    if (r && !reserved) {
        char* end = NULL;
        u64 want = strtoull(r, &end, 0);
        u64 len = end && *end == ':' ? strtoull(end + 1, NULL, 0) : 0;
        if (len) {
            void* q = mmap((void*)(uintptr_t)want, len, PROT_NONE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            fprintf(stderr, "fake_cuda: own reservation of %llu bytes at 0x%llx (hint 0x%llx)\n",
                    (unsigned long long)len, (unsigned long long)(uintptr_t)q,
                    (unsigned long long)want);
            reserved = 1;
        }
    }
    initialised = 1;
    return OK;
}

/* NVRTC opens libcuda.so.1 itself and asks for NVIDIA's private tables; the fake has none. */
CUresult cuGetExportTable(const void** table, const void* id) {
    (void)id;
    *table = NULL;
    return 801; /* CUDA_ERROR_NOT_SUPPORTED */
}

CUresult cuDriverGetVersion(int* v) {
    *v = 13000;
    return OK;
}

CUresult cuDeviceGetCount(int* n) {
    *n = initialised ? 1 : 0;
    return initialised ? OK : E_NOT_INITIALIZED;
}

CUresult cuDeviceGet(CUdevice* d, int ordinal) {
    if (ordinal != 0) {
        return E_INVALID_DEVICE;
    }
    *d = 0;
    return OK;
}

CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
    (void)d;
    switch (attr) {
    case 75: *v = 9; break;                /* compute capability major */
    case 76: *v = 0; break;                /* minor */
    case 16: *v = 4; break;                /* multiprocessors */
    case 38: *v = 50 << 20; break;         /* L2 */
    case 115: case 102: case 83: case 41: *v = 1; break;
    default: *v = 0; break;
    }
    return OK;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
    (void)d;
    snprintf(name, (size_t)len, "Fake CUDA device");
    return OK;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
    (void)d;
    *bytes = mem_total;
    return OK;
}

static const char* err_name(CUresult e) {
    switch (e) {
    case OK: return "CUDA_SUCCESS";
    case E_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case E_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case E_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case E_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case E_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case E_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case E_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case E_NOT_READY: return "CUDA_ERROR_NOT_READY";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case E_CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case E_CAPTURE_INVALIDATED: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case E_CAPTURE_UNMATCHED: return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED";
    case E_CAPTURE_IMPLICIT: return "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT";
    default: return "CUDA_ERROR_UNKNOWN";
    }
}

CUresult cuGetErrorName(CUresult e, const char** s) {
    *s = err_name(e);
    return OK;
}

CUresult cuGetErrorString(CUresult e, const char** s) {
    *s = err_name(e);
    return OK;
}
