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
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long u64;

enum {
    OK = 0,
    E_INVALID_VALUE = 1,
    E_OUT_OF_MEMORY = 2,
    E_NOT_INITIALIZED = 3,
    E_NO_DEVICE = 100,
    E_INVALID_DEVICE = 101,
    E_INVALID_HANDLE = 400,
    E_NOT_FOUND = 500,
    E_NOT_READY = 600,
    E_CAPTURE_UNSUPPORTED = 900,
    E_CAPTURE_INVALIDATED = 901,
    E_CAPTURE_UNMATCHED = 903,
    E_CAPTURE_IMPLICIT = 906,
    E_UNKNOWN = 999,
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised;
static u64 mem_total = 8ULL << 30;
static u64 mem_used;
static int ctx_token;
static __thread void* current_ctx;

static u64 now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (u64)ts.tv_sec * 1000000000ULL + (u64)ts.tv_nsec;
}

/* ---- allocations ---------------------------------------------------------------------- */

enum kind { K_DEVICE, K_MANAGED, K_HOST, K_REGISTERED, K_VMM_RESERVE, K_POOL, K_VMM_HANDLE };

struct alloc {
    void* p;
    u64 size;
    int device; /* counts against device memory */
    int kind;
    /* K_VMM_RESERVE: bytes mapped from its start (cuMemMap / cuMemUnmap); a copy into the
     * part not mapped is refused, as the device would fault. */
    u64 mapped;
    /* Placed at a fixed address by mmap (cuMemAddressReserve with an address): unmapped on
     * free. */
    int fixed;
    struct alloc* next;
};
static struct alloc* allocs;

/* The device arena: reserved once, bump-allocated, never reused (freed pages are returned
 * to the system). */
#define ARENA_BYTES (1ULL << 42)
static unsigned char* arena;
static u64 arena_next;

static u64 round_up(u64 x, u64 a) {
    return (x + a - 1) / a * a;
}

static CUresult do_alloc_kind(void** out, u64 size, int device, int kind) {
    if (size == 0) {
        return E_INVALID_VALUE;
    }
    pthread_mutex_lock(&lock);
    if (device && mem_used + size > mem_total) {
        pthread_mutex_unlock(&lock);
        return E_OUT_OF_MEMORY;
    }
    void* p = NULL;
    if (device) {
        if (arena == NULL) {
            void* a = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (a == MAP_FAILED) {
                pthread_mutex_unlock(&lock);
                return E_OUT_OF_MEMORY;
            }
            arena = a;
        }
        /* Small allocations share pages (512-byte granularity), large ones are page-rounded:
         * either way the next allocation starts right after this one. */
        u64 len = size < 65536 ? round_up(size, 512) : round_up(size, 4096);
        if (arena_next + len > ARENA_BYTES) {
            pthread_mutex_unlock(&lock);
            return E_OUT_OF_MEMORY;
        }
        p = arena + arena_next;
        arena_next += len;
    } else if (posix_memalign(&p, 4096, size) != 0 || p == NULL) {
        pthread_mutex_unlock(&lock);
        return E_OUT_OF_MEMORY;
    }
    struct alloc* a = malloc(sizeof *a);
    a->p = p;
    a->size = size;
    a->device = device;
    a->kind = kind;
    a->mapped = 0;
    a->fixed = 0;
    a->next = allocs;
    allocs = a;
    if (device) {
        mem_used += size;
    }
    pthread_mutex_unlock(&lock);
    *out = p;
    return OK;
}

static CUresult do_free(void* p) {
    pthread_mutex_lock(&lock);
    for (struct alloc** pp = &allocs; *pp; pp = &(*pp)->next) {
        if ((*pp)->p == p) {
            struct alloc* a = *pp;
            *pp = a->next;
            if (a->device) {
                mem_used -= a->size;
                /* Zero-fill and release whole pages inside the block (the arena is never
                 * reused, so nothing else lives in them). */
                uintptr_t s0 = ((uintptr_t)a->p + 4095) & ~(uintptr_t)4095;
                uintptr_t e0 = ((uintptr_t)a->p + a->size) & ~(uintptr_t)4095;
                if (e0 > s0) {
                    madvise((void*)s0, e0 - s0, MADV_DONTNEED);
                }
            } else if (a->fixed) {
                munmap(a->p, a->size);
            } else {
                free(a->p);
            }
            free(a);
            pthread_mutex_unlock(&lock);
            return OK;
        }
    }
    pthread_mutex_unlock(&lock);
    return E_INVALID_VALUE;
}

/* ---- streams and events --------------------------------------------------------------- */

#define MAX_NODES 64
#define MAX_DEPS 8
/* CUgraphNodeType values. */
enum { NT_KERNEL = 0, NT_MEMCPY = 1, NT_MEMSET = 2, NT_HOST = 3, NT_GRAPH = 4, NT_EMPTY = 5,
       NT_EVENT_RECORD = 7, NT_CONDITIONAL = 13 };
struct graph;
struct node {
    int type;
    int is_copy; /* a captured or added 1D copy (type NT_MEMCPY) */
    void* f;
    void* kern; /* the kernel a captured launch named, when f is its context's function */
    unsigned gx, bx;
    int nparams;
    u64 vals[8];
    u64 dst, src, n;
    unsigned mvalue, esize; /* memset: value, element size; dst and n (elements) above */
    void (*host_fn)(void*);
    void* host_data;
    struct graph* child;
    void* event;
    int ndeps;
    struct node* deps[MAX_DEPS];
    struct node* origin; /* an executable graph's node: the template node it came from */
    int disabled;
};

struct graph {
    int n;
    struct node* nodes[MAX_NODES];
    u64 flags; /* an executable graph's instantiation flags */
};

enum { CAP_NONE = 0, CAP_ACTIVE = 1, CAP_INVALIDATED = 2 };
enum { MODE_GLOBAL = 0, MODE_THREAD_LOCAL = 1, MODE_RELAXED = 2 };

struct stream {
    u64 busy_until;
    int nonblocking;
    int capture;      /* CAP_* */
    int capture_mode; /* MODE_* */
    pthread_t owner;
    struct graph* graph;
    struct stream* next_stream;
    int records; /* cuEventRecord calls that succeeded on it (fake_cuda_records_on) */
};
static struct stream legacy;
static struct stream* streams; /* every created stream (never the legacy one) */
static __thread int thread_mode = MODE_GLOBAL;
static int blocking_frees;
static char fail_record_after[64];
static int fail_record_armed;
static int fail_default_waits;
static int fail_host_registers;

/* Null, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) are all the one default stream. */
static struct stream* S(void* s) {
    return (uintptr_t)s > 2 ? (struct stream*)s : &legacy;
}

struct event {
    u64 at; /* completes at this time (ns); 0 = never recorded */
    int recorded;
    struct stream* captured; /* recorded into this stream's capture */
    struct stream* on;       /* the stream it was last recorded on */
};

/* cuStreamWaitEvent calls, in order: the waiting stream and the stream the event was recorded
 * on (fake_cuda_stream_waits, fake_cuda_stream_wait_at). */
#define MAX_WAITS 4096
static struct {
    void* stream;
    void* event_stream;
} waits[MAX_WAITS];
static int nwaits;

/* Called with `lock` held: invalidates every capture a prohibited call by this thread would
 * break, and says whether the call is prohibited. */
static int prohibited_locked(void) {
    if (thread_mode == MODE_RELAXED) {
        return 0;
    }
    int hit = 0;
    pthread_t self = pthread_self();
    for (struct stream* st = streams; st; st = st->next_stream) {
        if (st->capture != CAP_ACTIVE) {
            continue;
        }
        int own = pthread_equal(st->owner, self);
        if ((own && st->capture_mode != MODE_RELAXED)
            || (!own && thread_mode == MODE_GLOBAL && st->capture_mode == MODE_GLOBAL)) {
            st->capture = CAP_INVALIDATED;
            hit = 1;
        }
    }
    return hit;
}

/* A potentially unsafe call: E_CAPTURE_UNSUPPORTED (and invalidated captures) if prohibited. */
/* The context's sticky error (0: none), and a fault launched but not yet observed. */
static CUresult sticky_error;
static int fault_launched;
static char fault_kernel[64];
static int fault_after;

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

static CUresult sticky_now(void) {
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

static CUresult unsafe_call(void) {
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
#define CAPTURED (-1)
static CUresult submit_to(struct stream* st) {
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
static void* (*context_function_of)(void* f);

static struct node* add_node(struct stream* st) {
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

static u64 device_busy_until(void) {
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

CUresult cuDevicePrimaryCtxRetain(void** ctx, CUdevice d) {
    (void)d;
    *ctx = &ctx_token;
    return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    (void)d;
    return OK;
}

CUresult cuCtxSetCurrent(void* ctx) {
    current_ctx = ctx;
    return OK;
}

CUresult cuCtxGetCurrent(void** ctx) {
    *ctx = current_ctx;
    return OK;
}

static void wait_until(u64 t) {
    while (now_ns() < t) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

CUresult cuCtxSynchronize(void) {
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    wait_until(device_busy_until());
    return OK;
}

CUresult cuStreamSynchronize(void* s) {
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    wait_until(S(s)->busy_until);
    return OK;
}

CUresult cuStreamQuery(void* s) {
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    struct stream* st = S(s);
    r = submit_to(st);
    if (r == CAPTURED) {
        pthread_mutex_lock(&lock);
        st->capture = CAP_INVALIDATED;
        pthread_mutex_unlock(&lock);
        return E_CAPTURE_UNSUPPORTED;
    }
    if (r != OK) {
        return r;
    }
    return now_ns() >= st->busy_until ? OK : E_NOT_READY;
}

CUresult cuThreadExchangeStreamCaptureMode(int* mode) {
    int m = *mode;
    *mode = thread_mode;
    thread_mode = m;
    return OK;
}

CUresult cuStreamBeginCapture_v2(void* s, int mode) {
    if (!s) {
        return E_CAPTURE_UNSUPPORTED;
    }
    struct stream* st = s;
    pthread_mutex_lock(&lock);
    if (st->capture != CAP_NONE) {
        pthread_mutex_unlock(&lock);
        return E_INVALID_VALUE;
    }
    st->capture = CAP_ACTIVE;
    st->capture_mode = mode;
    st->owner = pthread_self();
    st->graph = calloc(1, sizeof(struct graph));
    pthread_mutex_unlock(&lock);
    return OK;
}

CUresult cuStreamEndCapture(void* s, void** graph) {
    struct stream* st = S(s);
    pthread_mutex_lock(&lock);
    int c = st->capture;
    struct graph* g = st->graph;
    st->capture = CAP_NONE;
    st->graph = NULL;
    pthread_mutex_unlock(&lock);
    if (c == CAP_NONE) {
        return E_CAPTURE_UNMATCHED;
    }
    if (c == CAP_INVALIDATED) {
        free(g);
        *graph = NULL;
        return E_CAPTURE_INVALIDATED;
    }
    *graph = g;
    return OK;
}

CUresult cuStreamIsCapturing(void* s, int* status) {
    pthread_mutex_lock(&lock);
    CUresult r = OK;
    *status = CAP_NONE;
    if ((uintptr_t)s <= 2) {
        for (struct stream* o = streams; o; o = o->next_stream) {
            if (o->capture != CAP_NONE && !o->nonblocking) {
                r = E_CAPTURE_IMPLICIT;
            }
        }
    } else {
        *status = ((struct stream*)s)->capture;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

int fake_cuda_blocking_frees(void) {
    pthread_mutex_lock(&lock);
    int n = blocking_frees;
    pthread_mutex_unlock(&lock);
    return n;
}

void fake_cuda_fail_record_after(const char* kernel) {
    pthread_mutex_lock(&lock);
    snprintf(fail_record_after, sizeof fail_record_after, "%s", kernel);
    fail_record_armed = 0;
    pthread_mutex_unlock(&lock);
}

/* The real cuMemFree and cuMemFreeHost wait for the whole device. */
static void free_waits_for_device(void) {
    u64 b = device_busy_until();
    if (b > now_ns()) {
        pthread_mutex_lock(&lock);
        blocking_frees += 1;
        pthread_mutex_unlock(&lock);
        wait_until(b);
    }
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

CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total) {
    pthread_mutex_lock(&lock);
    *free_b = mem_total - mem_used;
    *total = mem_total;
    pthread_mutex_unlock(&lock);
    return OK;
}

CUresult cuStreamCreate(void** s, unsigned flags) {
    struct stream* st = calloc(1, sizeof *st);
    st->nonblocking = (flags & 1) != 0;
    pthread_mutex_lock(&lock);
    st->next_stream = streams;
    streams = st;
    pthread_mutex_unlock(&lock);
    *s = st;
    return OK;
}

CUresult cuStreamDestroy_v2(void* s) {
    if (s) {
        pthread_mutex_lock(&lock);
        for (struct stream** pp = &streams; *pp; pp = &(*pp)->next_stream) {
            if (*pp == s) {
                *pp = ((struct stream*)s)->next_stream;
                break;
            }
        }
        pthread_mutex_unlock(&lock);
        free(((struct stream*)s)->graph);
        free(s);
    }
    return OK;
}

CUresult cuEventCreate(void** e, unsigned flags) {
    (void)flags;
    *e = calloc(1, sizeof(struct event));
    return OK;
}

CUresult cuEventRecord(void* e, void* s) {
    struct event* ev = e;
    pthread_mutex_lock(&lock);
    int fail = fail_record_armed;
    fail_record_armed = 0;
    pthread_mutex_unlock(&lock);
    if (fail) {
        return E_UNKNOWN;
    }
    struct stream* st = S(s);
    CUresult r = submit_to(st);
    if (r == CAPTURED) {
        ev->captured = st;
        ev->recorded = 1;
        return OK;
    }
    if (r != OK) {
        return r;
    }
    u64 t = now_ns();
    u64 b = st->busy_until;
    ev->at = b > t ? b : t;
    ev->recorded = 1;
    ev->captured = NULL;
    ev->on = st;
    __atomic_add_fetch(&st->records, 1, __ATOMIC_SEQ_CST);
    return OK;
}

/* How many events were recorded on stream `s` (null or a special handle: the default one). */
int fake_cuda_records_on(void* s) {
    return __atomic_load_n(&S(s)->records, __ATOMIC_SEQ_CST);
}

/* Work submitted to `s` later runs after the event's work: the stream is busy until then. */
CUresult cuStreamWaitEvent(void* s, void* e, unsigned flags) {
    (void)flags;
    struct event* ev = e;
    struct stream* st = S(s);
    CUresult sticky = sticky_now();
    if (sticky != OK) {
        return sticky;
    }
    pthread_mutex_lock(&lock);
    if (st == &legacy && fail_default_waits > 0) {
        fail_default_waits--;
        pthread_mutex_unlock(&lock);
        return E_INVALID_VALUE;
    }
    if (ev->at > st->busy_until) {
        st->busy_until = ev->at;
    }
    if (nwaits < MAX_WAITS) {
        waits[nwaits].stream = s;
        waits[nwaits].event_stream = ev->on;
        nwaits++;
    }
    pthread_mutex_unlock(&lock);
    return OK;
}

/* The next n cuStreamWaitEvent calls on the default stream fail; returns how many of the
 * failures armed before were left unused. */
int fake_cuda_fail_default_waits(int n) {
    pthread_mutex_lock(&lock);
    int left = fail_default_waits;
    fail_default_waits = n;
    pthread_mutex_unlock(&lock);
    return left;
}

/* The next n cuMemHostRegister calls fail; returns how many armed before were left unused. */
int fake_cuda_fail_host_registers(int n) {
    pthread_mutex_lock(&lock);
    int left = fail_host_registers;
    fail_host_registers = n;
    pthread_mutex_unlock(&lock);
    return left;
}

int fake_cuda_stream_waits(void) {
    pthread_mutex_lock(&lock);
    int n = nwaits;
    pthread_mutex_unlock(&lock);
    return n;
}

/* The i-th cuStreamWaitEvent: the waiting stream and the event's stream; 0 if out of range. */
int fake_cuda_stream_wait_at(int i, void** stream, void** event_stream) {
    pthread_mutex_lock(&lock);
    int ok = i >= 0 && i < nwaits;
    if (ok) {
        *stream = waits[i].stream;
        *event_stream = waits[i].event_stream;
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

CUresult cuEventQuery(void* e) {
    struct event* ev = e;
    if (ev->captured) {
        /* An event recorded into a capture cannot be queried: the capture is invalidated. */
        pthread_mutex_lock(&lock);
        for (struct stream* st = streams; st; st = st->next_stream) {
            if (st == ev->captured && st->capture == CAP_ACTIVE) {
                st->capture = CAP_INVALIDATED;
            }
        }
        pthread_mutex_unlock(&lock);
        fprintf(stderr, "fake_cuda: query of an event recorded in a stream capture\n");
        return E_CAPTURE_UNSUPPORTED;
    }
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    return now_ns() >= ev->at ? OK : E_NOT_READY;
}

CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) {
    struct event* x = a;
    struct event* y = b;
    *ms = (float)((double)(y->at - x->at) / 1e6);
    return OK;
}

CUresult cuEventDestroy_v2(void* e) {
    free(e);
    return OK;
}

/* ---- memory --------------------------------------------------------------------------- */

static CUresult dev_alloc(CUdeviceptr* p, size_t size, int kind) {
    void* q;
    CUresult r = do_alloc_kind(&q, size, 1, kind);
    if (r == OK) {
        *p = (CUdeviceptr)(uintptr_t)q;
    }
    return r;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t size) {
    CUresult r = unsafe_call();
    return r != OK ? r : dev_alloc(p, size, K_DEVICE);
}

CUresult cuMemFree_v2(CUdeviceptr p) {
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    free_waits_for_device();
    return do_free((void*)(uintptr_t)p);
}

CUresult cuMemAllocManaged(CUdeviceptr* p, size_t size, unsigned flags) {
    (void)flags;
    CUresult r = unsafe_call();
    return r != OK ? r : dev_alloc(p, size, K_MANAGED);
}

/* Stream-ordered: neither unsafe nor waiting for the device. */
CUresult cuMemAllocAsync(CUdeviceptr* p, size_t size, void* s) {
    (void)s;
    return dev_alloc(p, size, K_POOL);
}

/* One pretend pool per process: the default pool of device 0. */
static int default_pool;

CUresult cuDeviceGetDefaultMemPool(void** pool, int dev) {
    if (pool == NULL || dev != 0) {
        return E_INVALID_VALUE;
    }
    *pool = &default_pool;
    return OK;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t size, void* pool, void* s) {
    (void)s;
    if (pool != &default_pool) {
        return E_INVALID_VALUE;
    }
    return dev_alloc(p, size, K_POOL);
}

CUresult cuMemFreeAsync(CUdeviceptr p, void* s) {
    (void)s;
    return do_free((void*)(uintptr_t)p);
}

CUresult cuMemHostAlloc(void** p, size_t size, unsigned flags) {
    (void)flags;
    CUresult r = unsafe_call();
    return r != OK ? r : do_alloc_kind(p, size, 0, K_HOST);
}

CUresult cuMemAllocHost_v2(void** p, size_t size) {
    return cuMemHostAlloc(p, size, 0);
}

CUresult cuMemFreeHost(void* p) {
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    free_waits_for_device();
    return do_free(p);
}

CUresult cuMemHostRegister_v2(void* p, size_t size, unsigned flags) {
    (void)flags;
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    if (p == NULL || size == 0) {
        return E_INVALID_VALUE;
    }
    pthread_mutex_lock(&lock);
    int fail = fail_host_registers > 0;
    if (fail) {
        fail_host_registers--;
    }
    pthread_mutex_unlock(&lock);
    if (fail) {
        return E_OUT_OF_MEMORY;
    }
    struct alloc* a = malloc(sizeof *a);
    a->p = p;
    a->size = size;
    a->device = 0;
    a->kind = K_REGISTERED;
    a->mapped = 0;
    pthread_mutex_lock(&lock);
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&lock);
    return OK;
}

CUresult cuMemHostUnregister(void* p) {
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    pthread_mutex_lock(&lock);
    for (struct alloc** pp = &allocs; *pp; pp = &(*pp)->next) {
        if ((*pp)->p == p && (*pp)->kind == K_REGISTERED) {
            struct alloc* a = *pp;
            *pp = a->next;
            free(a);
            pthread_mutex_unlock(&lock);
            return OK;
        }
    }
    pthread_mutex_unlock(&lock);
    return E_INVALID_VALUE;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned flags) {
    (void)flags;
    *d = (CUdeviceptr)(uintptr_t)p;
    return OK;
}

CUresult cuMemGetAllocationGranularity(size_t* g, const void* prop, int option) {
    (void)prop;
    (void)option;
    *g = 2 << 20;
    return OK;
}

CUresult cuMemCreate(u64* handle, size_t size, const void* prop, u64 flags) {
    (void)prop;
    (void)flags;
    void* q;
    CUresult r = do_alloc_kind(&q, size, 1, K_VMM_HANDLE);
    if (r == OK) {
        *handle = (u64)(uintptr_t)q;
    }
    return r;
}

/* A reserved range is backed by the handle mapped into it: the reservation itself is host
 * memory that cuMemMap does not need to move, so the fake reserves by allocating. An address
 * asked for is a hint, as on the device: honoured where that range is free (mmap without
 * replacing anything), else another range is returned; KR_FAKE_IGNORE_ADDRESS_HINT set
 * ignores every hint, and fake_cuda_max_placed_reserve(bytes) ignores the hint of larger
 * reservations (as a driver does that cannot place one across two of its own chunks; 0, the
 * default: no limit). */
static u64 max_placed_reserve;

void fake_cuda_max_placed_reserve(u64 bytes) {
    pthread_mutex_lock(&lock);
    max_placed_reserve = bytes;
    pthread_mutex_unlock(&lock);
}

CUresult cuMemAddressReserve(CUdeviceptr* p, size_t size, size_t align, CUdeviceptr addr, u64 flags) {
    (void)align;
    (void)flags;
    if (size == 0) {
        return E_INVALID_VALUE;
    }
    pthread_mutex_lock(&lock);
    int too_large = max_placed_reserve != 0 && size > max_placed_reserve;
    pthread_mutex_unlock(&lock);
    if (addr != 0 && addr % 4096 == 0 && !too_large && !getenv("KR_FAKE_IGNORE_ADDRESS_HINT")) {
        void* q = mmap((void*)(uintptr_t)addr, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        if (q != MAP_FAILED && (u64)(uintptr_t)q == addr) {
            struct alloc* a = malloc(sizeof *a);
            pthread_mutex_lock(&lock);
            a->p = q;
            a->size = size;
            a->device = 0;
            a->kind = K_VMM_RESERVE;
            a->mapped = 0;
            a->fixed = 1;
            a->next = allocs;
            allocs = a;
            pthread_mutex_unlock(&lock);
            *p = addr;
            return OK;
        }
        if (q != MAP_FAILED) {
            munmap(q, size);
        }
    }
    void* q;
    CUresult r = do_alloc_kind(&q, size, 0, K_VMM_RESERVE);
    if (r == OK) {
        *p = (CUdeviceptr)(uintptr_t)q;
    }
    return r;
}

/* The reservation that starts at p, under the lock; NULL if none. */
static struct alloc* reservation_at(u64 p) {
    for (struct alloc* a = allocs; a; a = a->next) {
        if ((u64)(uintptr_t)a->p == p && a->kind == K_VMM_RESERVE) {
            return a;
        }
    }
    return NULL;
}

/* Mappings start at their reservation's base (what the backend's allocator makes). */
CUresult cuMemMap(CUdeviceptr p, size_t size, size_t off, u64 handle, u64 flags) {
    (void)off;
    (void)handle;
    (void)flags;
    pthread_mutex_lock(&lock);
    struct alloc* a = reservation_at(p);
    CUresult r = a && size <= a->size ? OK : E_INVALID_VALUE;
    if (r == OK) {
        a->mapped = size;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const void* desc, size_t count) {
    (void)p;
    (void)size;
    (void)desc;
    (void)count;
    return OK;
}

CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
    (void)size;
    pthread_mutex_lock(&lock);
    struct alloc* a = reservation_at(p);
    CUresult r = a && a->mapped ? OK : E_INVALID_VALUE;
    if (r == OK) {
        a->mapped = 0;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* Copies refused because they reached unmapped memory (fake_cuda_unmapped_copies). */
static int unmapped_copies;

/* 0 when [p, p + n) reaches into the unmapped part of a reservation. */
static int mapped_ok(u64 p, u64 n) {
    int ok = 1;
    pthread_mutex_lock(&lock);
    for (struct alloc* a = allocs; a; a = a->next) {
        u64 b = (u64)(uintptr_t)a->p;
        if (a->kind == K_VMM_RESERVE && p < b + a->size && b < p + n) {
            ok = p + n <= b + a->mapped;
            break;
        }
    }
    if (!ok) {
        ++unmapped_copies;
    }
    pthread_mutex_unlock(&lock);
    if (!ok) {
        fprintf(stderr, "fake_cuda: copy of %llu bytes at 0x%llx into unmapped memory\n",
                (unsigned long long)n, (unsigned long long)p);
    }
    return ok;
}

/* Launches of the gather copy kernel and the pieces they copied. */
static u64 kernel_copies;
static u64 kernel_copied_pieces;

/* How many pieces the gather copy kernel (kr_copy) copied so far; *launches gets its launches. */
u64 fake_cuda_kernel_copies(u64* launches) {
    if (launches) {
        *launches = __atomic_load_n(&kernel_copies, __ATOMIC_SEQ_CST);
    }
    return __atomic_load_n(&kernel_copied_pieces, __ATOMIC_SEQ_CST);
}

/* How many copies reached unmapped memory so far (a restore after an unmap would). */
int fake_cuda_unmapped_copies(void) {
    pthread_mutex_lock(&lock);
    int n = unmapped_copies;
    pthread_mutex_unlock(&lock);
    return n;
}

/* Another process's memory: a handle like cuMemCreate's, whatever the OS handle. */
CUresult cuMemImportFromShareableHandle(u64* handle, void* os_handle, int type) {
    (void)os_handle;
    (void)type;
    void* q;
    CUresult r = do_alloc_kind(&q, 1, 0, K_VMM_HANDLE);
    if (r == OK) {
        *handle = (u64)(uintptr_t)q;
    }
    return r;
}

CUresult cuMemRelease(u64 handle) {
    return do_free((void*)(uintptr_t)handle);
}

CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
    (void)size;
    return do_free((void*)(uintptr_t)p);
}

static unsigned char nv_global[8328] __attribute__((aligned(256)));
static u64 nv_const[4] = {1, 2, 3, 4};

/* The device allocation (or module variable) around p: 1 and its bounds, or 0 (host memory). */
static int device_range(u64 p, u64* base, u64* size) {
    static const u64 var_off[3] = {0, 8, 136};
    static const u64 var_len[3] = {8, 128, 8192};
    u64 g = (u64)(uintptr_t)nv_global;
    for (int i = 0; i < 3; ++i) {
        if (p >= g + var_off[i] && p < g + var_off[i] + var_len[i]) {
            *base = g + var_off[i];
            *size = var_len[i];
            return 1;
        }
    }
    u64 c = (u64)(uintptr_t)nv_const;
    if (p >= c && p < c + sizeof nv_const) {
        *base = c;
        *size = sizeof nv_const;
        return 1;
    }
    int found = 0;
    pthread_mutex_lock(&lock);
    for (struct alloc* a = allocs; a; a = a->next) {
        u64 b = (u64)(uintptr_t)a->p;
        if (a->device && p >= b && p < b + a->size) {
            *base = b;
            *size = a->size;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

/* A copy's end must lie inside one allocation when it starts in one (the module's global
 * segment is one allocation, as the driver lays a module's data out: a copy may span the
 * variables in it). */
static int end_ok(u64 p, u64 n) {
    u64 base;
    u64 size;
    u64 g = (u64)(uintptr_t)nv_global;
    if (n != 0 && p >= g && p < g + sizeof nv_global) {
        if (p + n > g + sizeof nv_global) {
            fprintf(stderr, "fake_cuda: copy of %llu bytes at 0x%llx runs past the global segment\n",
                    n, p);
            return 0;
        }
        return 1;
    }
    if (n == 0 || !device_range(p, &base, &size)) {
        return 1;
    }
    if (p + n > base + size) {
        fprintf(stderr,
                "fake_cuda: copy of %llu bytes at 0x%llx runs past its allocation 0x%llx+%llu\n",
                n, p, base, size);
        return 0;
    }
    return 1;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
    u64 b;
    u64 n;
    if (!device_range(p, &b, &n)) {
        return E_NOT_FOUND;
    }
    if (base) {
        *base = b;
    }
    if (size) {
        *size = n;
    }
    return OK;
}

/* A copy on stream s: runs, or becomes a node of its capture. */
static CUresult copy_on(u64 dst, u64 src, size_t n, void* s) {
    if (!end_ok(src, n) || !end_ok(dst, n) || !mapped_ok(src, n) || !mapped_ok(dst, n)) {
        return E_INVALID_VALUE;
    }
    struct stream* st = S(s);
    CUresult r = submit_to(st);
    if (r == CAPTURED) {
        struct node* nd = add_node(st);
        if (!nd) {
            return E_OUT_OF_MEMORY;
        }
        nd->type = NT_MEMCPY;
        nd->is_copy = 1;
        nd->dst = dst;
        nd->src = src;
        nd->n = n;
        return OK;
    }
    if (r != OK) {
        return r;
    }
    memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
    return OK;
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void* s) {
    return copy_on(dst, src, n, s);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* s) {
    return copy_on(dst, (u64)(uintptr_t)src, n, s);
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* s) {
    return copy_on((u64)(uintptr_t)dst, src, n, s);
}

CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, void* s) {
    if (!end_ok(dst, n * 4)) {
        return E_INVALID_VALUE;
    }
    CUresult r = submit_to(S(s));
    if (r != OK) {
        return r == CAPTURED ? E_CAPTURE_UNSUPPORTED : r;
    }
    unsigned* p = (unsigned*)(uintptr_t)dst;
    for (size_t i = 0; i < n; ++i) {
        p[i] = v;
    }
    return OK;
}

/* CU_POINTER_ATTRIBUTE_*: MEMORY_TYPE 2, IS_MANAGED 8, DEVICE_ORDINAL 9, RANGE_START_ADDR 11,
 * RANGE_SIZE 12, MAPPED 13, MEMPOOL_HANDLE 17, MAPPING_SIZE 18, MAPPING_BASE_ADDR 19. Unknown
 * addresses get zeros and CUDA_SUCCESS, as from the real call. */
CUresult cuPointerGetAttributes(unsigned n, int* attrs, void** data, CUdeviceptr p) {
    int found = 0;
    int kind = 0;
    u64 base = 0;
    u64 size = 0;
    pthread_mutex_lock(&lock);
    for (struct alloc* a = allocs; a; a = a->next) {
        u64 b = (u64)(uintptr_t)a->p;
        if (p >= b && p < b + a->size && a->kind != K_VMM_HANDLE) {
            found = 1;
            kind = a->kind;
            base = b;
            size = a->size;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    for (unsigned i = 0; i < n; ++i) {
        u64 v = 0;
        int is_u32 = 1;
        if (found) {
            switch (attrs[i]) {
            case 2: v = (kind == K_HOST || kind == K_REGISTERED) ? 1 : 2; break;
            case 8: v = kind == K_MANAGED; break;
            case 9: v = 0; break;
            case 11: v = base; is_u32 = 0; break;
            case 12: v = size; is_u32 = 0; break;
            case 13: v = kind == K_VMM_RESERVE; break;
            case 17: v = kind == K_POOL ? 0x900d : 0; is_u32 = 0; break;
            case 18: v = kind == K_VMM_RESERVE ? size : 0; is_u32 = 0; break;
            case 19: v = kind == K_VMM_RESERVE ? base : 0; is_u32 = 0; break;
            default: break;
            }
        } else {
            is_u32 = !(attrs[i] == 11 || attrs[i] == 12 || attrs[i] == 17 || attrs[i] == 18
                       || attrs[i] == 19);
        }
        if (is_u32) {
            *(unsigned*)data[i] = (unsigned)v;
        } else {
            *(u64*)data[i] = v;
        }
    }
    return OK;
}

/* ---- modules and globals -------------------------------------------------------------- */

struct module {
    int unused;
};

/* The .nv.global section of globals.cu as NVRTC lays it out: kr_counter at 0 (8 bytes),
 * kr_hidden at 8 (128 bytes), kr_table at 136 (8192 bytes). */
CUresult cuModuleLoadData(void** m, const void* image) {
    (void)image;
    *m = calloc(1, sizeof(struct module));
    return OK;
}

CUresult cuModuleUnload(void* m) {
    free(m);
    return OK;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr* p, size_t* bytes, void* m, const char* name) {
    (void)m;
    if (strcmp(name, "kr_counter") == 0) {
        *p = (CUdeviceptr)(uintptr_t)nv_global;
        *bytes = 8;
    } else if (strcmp(name, "kr_table") == 0) {
        *p = (CUdeviceptr)(uintptr_t)(nv_global + 136);
        *bytes = 8192;
    } else if (strcmp(name, "kr_const") == 0) {
        *p = (CUdeviceptr)(uintptr_t)nv_const;
        *bytes = 32;
    } else {
        return E_NOT_FOUND;
    }
    return OK;
}

struct function {
    char name[64];
};

CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
    (void)m;
    struct function* fn = calloc(1, sizeof *fn);
    snprintf(fn->name, sizeof fn->name, "%s", name);
    *f = fn;
    return OK;
}

/* Parameter layouts of the kernels whose parameters are all 8 bytes, and kr_digest_*. */
static size_t param_count(const char* n) {
    size_t count = 0;
    if (strcmp(n, "kr_rmw") == 0 || strcmp(n, "kr_fill") == 0 || strcmp(n, "kr_indirect") == 0
        || strcmp(n, "kr_read") == 0 || strcmp(n, "kr_surf_rmw") == 0) {
        count = 3;
    } else if (strcmp(n, "kr_spin") == 0) {
        count = 2;
    } else if (strcmp(n, "kr_tiny") == 0 || strcmp(n, "kr_globals") == 0
               || strcmp(n, "kr_hidden_read") == 0) {
        count = 1;
    } else if (strcmp(n, "kr_digest_seg") == 0) {
        count = 8;
    } else if (strcmp(n, "kr_digest_fin") == 0) {
        count = 6;
    } else if (strcmp(n, "kr_copy") == 0) {
        count = 2;
    }
    return count;
}

CUresult cuFuncGetParamInfo(void* f, size_t index, size_t* offset, size_t* size) {
    if (strcmp(((struct function*)f)->name, "kr_tma") == 0) {
        /* (CUtensorMap map, u64 n, u64 k): the map by value, 128 bytes. */
        static const size_t offs[3] = {0, 128, 136};
        static const size_t sizes[3] = {128, 8, 8};
        if (index >= 3) {
            return E_INVALID_VALUE;
        }
        *offset = offs[index];
        *size = sizes[index];
        return OK;
    }
    size_t count = param_count(((struct function*)f)->name);
    if (index >= count) {
        return E_INVALID_VALUE;
    }
    *offset = index * 8;
    *size = 8;
    return OK;
}

CUresult cuFuncGetAttribute(int* v, int attr, void* f) {
    (void)attr;
    (void)f;
    *v = 0;
    return OK;
}

/* ---- CUDA arrays, surface objects, tensor maps, other contexts -------------------------- */
/*
 * An array is host memory of its size (no layout; a 3D array's too, a mipmapped array one
 * array per level); a surface object is a small integer (as on
 * a real driver) naming its array, and kr_surf_rmw(surface, n, k) read-modify-writes the
 * array's first n words through it, as surf2Dread/surf2Dwrite would. A tensor map's 128 bytes
 * hold its address XORed with TMAP_KEY (so no argument word is the address itself, as in a
 * real encoding), its first dimension and its rank; kr_tma(map, n, k) read-modify-writes the
 * first n words of its target. cuCtxCreate makes a context other than the primary one.
 * cuDevicePrimaryCtxReset counts the resets (fake_cuda_primary_resets).
 */
struct fake_array {
    u64 bytes;
    unsigned char* data;
};

#define MAX_SURFACES 64
static struct fake_array* surfaces[MAX_SURFACES + 1];
static int primary_resets;

static u64 format_bytes(unsigned f) {
    switch (f) {
    case 0x01: case 0x08: return 1;
    case 0x02: case 0x09: case 0x10: return 2;
    default: return 4;
    }
}

static CUresult make_array(void** a, u64 w, u64 h, u64 d, unsigned fmt, unsigned ch) {
    if (!a || w == 0) {
        return E_INVALID_VALUE;
    }
    u64 bytes = w * (h ? h : 1) * (d ? d : 1) * format_bytes(fmt) * (ch ? ch : 1);
    /* Arrays are device memory: they count against it as allocations do. */
    pthread_mutex_lock(&lock);
    if (mem_used + bytes > mem_total) {
        pthread_mutex_unlock(&lock);
        return E_OUT_OF_MEMORY;
    }
    mem_used += bytes;
    pthread_mutex_unlock(&lock);
    struct fake_array* arr = calloc(1, sizeof *arr);
    arr->bytes = bytes;
    arr->data = calloc(1, arr->bytes);
    *a = arr;
    return OK;
}

CUresult cuArrayCreate_v2(void** a, const void* desc) {
    const size_t* wh = desc;
    const unsigned* fc = (const unsigned*)(wh + 2);
    return make_array(a, wh[0], wh[1], 1, fc[0], fc[1]);
}

CUresult cuArray3DCreate_v2(void** a, const void* desc) {
    const size_t* whd = desc;
    const unsigned* fc = (const unsigned*)(whd + 3);
    return make_array(a, whd[0], whd[1], whd[2], fc[0], fc[1]);
}

/* A mipmapped array holds one array per level, each half the one before in every dimension
 * (at least 1); cuMipmappedArrayGetLevel answers a level's array, owned by the mipmapped
 * array (destroyed with it). */
#define MAX_LEVELS 16
struct fake_mipmap {
    unsigned levels;
    struct fake_array* level[MAX_LEVELS];
};

CUresult cuArrayDestroy(void* a);

CUresult cuMipmappedArrayCreate(void** a, const void* desc, unsigned levels) {
    const size_t* whd = desc;
    const unsigned* fc = (const unsigned*)(whd + 3);
    if (!a || !desc || levels == 0 || levels > MAX_LEVELS) {
        return E_INVALID_VALUE;
    }
    struct fake_mipmap* m = calloc(1, sizeof *m);
    u64 w = whd[0], h = whd[1], d = whd[2];
    for (unsigned l = 0; l < levels; ++l) {
        CUresult r = make_array((void**)&m->level[l], w, h, d, fc[0], fc[1]);
        if (r != OK) {
            for (unsigned k = 0; k < l; ++k) {
                cuArrayDestroy(m->level[k]);
            }
            free(m);
            return r;
        }
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        d = d > 1 ? d / 2 : d;
    }
    m->levels = levels;
    *a = m;
    return OK;
}

CUresult cuMipmappedArrayGetLevel(void** level_array, void* mipmap, unsigned level) {
    struct fake_mipmap* m = mipmap;
    if (!level_array || !m || level >= m->levels) {
        return E_INVALID_VALUE;
    }
    *level_array = m->level[level];
    return OK;
}

CUresult cuArrayDestroy(void* a) {
    struct fake_array* arr = a;
    if (arr) {
        pthread_mutex_lock(&lock);
        mem_used -= arr->bytes;
        pthread_mutex_unlock(&lock);
        free(arr->data);
        free(arr);
    }
    return OK;
}

CUresult cuMipmappedArrayDestroy(void* a) {
    struct fake_mipmap* m = a;
    if (m) {
        for (unsigned l = 0; l < m->levels; ++l) {
            cuArrayDestroy(m->level[l]);
        }
        free(m);
    }
    return OK;
}

CUresult cuSurfObjectCreate(u64* s, const void* desc) {
    const unsigned* type = desc;
    /* An array resource only, as on the real driver (a mipmapped array's level is one). */
    if (!s || !desc || *type != 0) {
        return E_INVALID_VALUE;
    }
    struct fake_array* arr = *(struct fake_array* const*)((const char*)desc + 8);
    pthread_mutex_lock(&lock);
    for (u64 i = 1; i <= MAX_SURFACES; ++i) {
        if (!surfaces[i]) {
            surfaces[i] = arr;
            *s = i;
            pthread_mutex_unlock(&lock);
            return OK;
        }
    }
    pthread_mutex_unlock(&lock);
    return E_OUT_OF_MEMORY;
}

CUresult cuSurfObjectDestroy(u64 s) {
    if (s == 0 || s > MAX_SURFACES || !surfaces[s]) {
        return E_INVALID_HANDLE;
    }
    surfaces[s] = NULL;
    return OK;
}

#define TMAP_KEY 0x5a5a5a5a5a5a5a5aULL

CUresult cuTensorMapEncodeTiled(void* m, unsigned dt, unsigned rank, void* addr, const u64* dims,
                                const u64* strides, const unsigned* box, const unsigned* estr,
                                unsigned il, unsigned sw, unsigned l2, unsigned oob) {
    (void)dt;
    (void)strides;
    (void)box;
    (void)estr;
    (void)il;
    (void)sw;
    (void)l2;
    (void)oob;
    if (!m || rank == 0 || rank > 5 || ((uintptr_t)addr & 15)) {
        return E_INVALID_VALUE;
    }
    u64* w = m;
    memset(w, 0, 128);
    w[0] = (u64)(uintptr_t)addr ^ TMAP_KEY;
    w[1] = dims[0];
    w[2] = rank;
    return OK;
}

CUresult cuTensorMapEncodeIm2col(void* m, unsigned dt, unsigned rank, void* addr, const u64* dims,
                                 const u64* strides, const int* lower, const int* upper,
                                 unsigned cpp, unsigned ppc, const unsigned* estr, unsigned il,
                                 unsigned sw, unsigned l2, unsigned oob) {
    (void)lower;
    (void)upper;
    (void)cpp;
    (void)ppc;
    return cuTensorMapEncodeTiled(m, dt, rank, addr, dims, strides, NULL, estr, il, sw, l2, oob);
}

CUresult cuTensorMapEncodeIm2colWide(void* m, unsigned dt, unsigned rank, void* addr,
                                     const u64* dims, const u64* strides, int lower, int upper,
                                     unsigned cpp, unsigned ppc, const unsigned* estr,
                                     unsigned il, unsigned mode, unsigned sw, unsigned l2,
                                     unsigned oob) {
    (void)lower;
    (void)upper;
    (void)cpp;
    (void)ppc;
    (void)mode;
    return cuTensorMapEncodeTiled(m, dt, rank, addr, dims, strides, NULL, estr, il, sw, l2, oob);
}

CUresult cuTensorMapReplaceAddress(void* m, void* addr) {
    if (!m || ((uintptr_t)addr & 15)) {
        return E_INVALID_VALUE;
    }
    ((u64*)m)[0] = (u64)(uintptr_t)addr ^ TMAP_KEY;
    return OK;
}

static int other_ctx_token;

CUresult cuCtxCreate_v2(void** ctx, unsigned flags, CUdevice d) {
    (void)flags;
    (void)d;
    *ctx = &other_ctx_token;
    current_ctx = *ctx;
    return OK;
}

CUresult cuCtxDestroy_v2(void* ctx) {
    if (ctx == current_ctx) {
        current_ctx = NULL;
    }
    return OK;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned* flags, int* active) {
    (void)d;
    *flags = 0;
    *active = 1;
    return OK;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
    (void)d;
    pthread_mutex_lock(&lock);
    primary_resets += 1;
    pthread_mutex_unlock(&lock);
    return OK;
}

int fake_cuda_primary_resets(void) {
    return primary_resets;
}

/* ---- kernels -------------------------------------------------------------------------- */

#define C1 0x9E3779B97F4A7C15ULL
#define C2 0xC2B2AE3D27D4EB4FULL
#define M1 0xFF51AFD7ED558CCDULL
#define M2 0xC4CEB9FE1A85EC53ULL

static u64 fmix(u64 x) {
    x ^= x >> 33;
    x *= M1;
    x ^= x >> 33;
    x *= M2;
    x ^= x >> 33;
    return x;
}

static u64 rotl(u64 x, int r) {
    return (x << r) | (x >> (64 - r));
}

static u64 le64(const unsigned char* p) {
    u64 v = 0;
    for (int j = 0; j < 8; ++j) {
        v |= (u64)p[j] << (8 * j);
    }
    return v;
}

typedef unsigned __int128 u128;

/* The reference digest's sum over one segment (SPEC 7.4, replay_core::digest): words of len
 * bytes at p whose first word has index base in its op; each half XOR its key word and
 * position salt, their product summed (mod 2^128). */
static u128 digest_sum(const unsigned char* p, u64 len, u64 base, const u64* k) {
    u128 a = 0;
    u64 nw = (len + 15) / 16;
    for (u64 w = 0; w < nw; ++w) {
        unsigned char buf[16] = {0};
        u64 take = len - w * 16 < 16 ? len - w * 16 : 16;
        memcpy(buf, p + w * 16, take);
        u64 lo = le64(buf);
        u64 hi = le64(buf + 8);
        u64 i = base + w;
        a += (u128)(lo ^ k[0] ^ (i * C1)) * (u128)(hi ^ k[1] ^ (i * C2));
    }
    return a;
}

/* Three Feistel rounds keyed by k2, k3 and the length; out[0] the high half, as kr_finish. */
static void finish(u128 a, u64 len, u64 k2, u64 k3, u64* out) {
    u64 x = (u64)a;
    u64 y = (u64)(a >> 64);
    y ^= fmix(x ^ k2 ^ len);
    x ^= fmix(y ^ k3);
    y ^= fmix(x ^ rotl(len, 32));
    out[0] = x;
    out[1] = y;
}

#define ARG(T, i) (*(T*)params[i])

static size_t param_count(const char* n);

static CUresult run_kernel(void* f, unsigned gx, unsigned bx, void* s, void** params) {
    const char* n = ((struct function*)f)->name;
    if (strcmp(n, "kr_fill") == 0) {
        u64* p = ARG(u64*, 0);
        u64 cnt = ARG(u64, 1);
        u64 seed = ARG(u64, 2);
        for (u64 i = 0; i < cnt; ++i) {
            p[i] = fmix(seed ^ (i * C1));
        }
    } else if (strcmp(n, "kr_rmw") == 0) {
        u64* p = ARG(u64*, 0);
        u64 cnt = ARG(u64, 1);
        u64 k = ARG(u64, 2);
        for (u64 i = 0; i < cnt; ++i) {
            p[i] = p[i] * 6364136223846793005ULL + (k ^ i);
        }
    } else if (strcmp(n, "kr_surf_rmw") == 0) {
        u64 surf = ARG(u64, 0);
        u64 cnt = ARG(u64, 1);
        u64 k = ARG(u64, 2);
        if (surf == 0 || surf > MAX_SURFACES || !surfaces[surf] || cnt * 8 > surfaces[surf]->bytes) {
            return E_INVALID_VALUE;
        }
        u64* p = (u64*)surfaces[surf]->data;
        for (u64 i = 0; i < cnt; ++i) {
            p[i] = p[i] * 6364136223846793005ULL + (k ^ i);
        }
    } else if (strcmp(n, "kr_tma") == 0) {
        const u64* map = params[0];
        u64 cnt = ARG(u64, 1);
        u64 k = ARG(u64, 2);
        u64* p = (u64*)(uintptr_t)(map[0] ^ TMAP_KEY);
        for (u64 i = 0; i < cnt; ++i) {
            p[i] = p[i] * 6364136223846793005ULL + (k ^ i);
        }
    } else if (strcmp(n, "kr_read") == 0) {
        /* nothing observable */
    } else if (strcmp(n, "kr_indirect") == 0) {
        u64** holder = ARG(u64**, 0);
        u64 cnt = ARG(u64, 1);
        u64 k = ARG(u64, 2);
        u64* q = holder[0];
        for (u64 i = 0; i < cnt; ++i) {
            q[i] = q[i] * 3ULL + k;
        }
    } else if (strcmp(n, "kr_spin") == 0) {
        u64 ns = ARG(u64, 0);
        u64* flag = ARG(u64*, 1);
        flag[0] += 1;
        struct stream* st = S(s);
        u64 t = now_ns();
        u64 start = st->busy_until > t ? st->busy_until : t;
        st->busy_until = start + ns;
    } else if (strcmp(n, "kr_tiny") == 0) {
        u64* p = ARG(u64*, 0);
        p[0] = p[0] * 3ULL + 1ULL;
    } else if (strcmp(n, "kr_globals") == 0) {
        u64 k = ARG(u64, 0);
        u64* counter = (u64*)nv_global;
        u64* hidden = (u64*)(nv_global + 8);
        u64* table = (u64*)(nv_global + 136);
        for (unsigned i = 0; i < 1024; ++i) {
            table[i] = table[i] * 3ULL + k + nv_const[i & 3];
        }
        for (unsigned i = 0; i < 16; ++i) {
            hidden[i] = hidden[i] * 5ULL + (u64)i + 1ULL;
        }
        counter[0] += 1;
    } else if (strcmp(n, "kr_hidden_read") == 0) {
        u64* out = ARG(u64*, 0);
        memcpy(out, nv_global + 8, 128);
    } else if (strcmp(n, "kr_digest_seg") == 0) {
        /* struct KrSeg { u64 addr, len, base; u32 op, nseg; } */
        const u64* segs = ARG(const u64*, 0);
        u64 cnt = ARG(u64, 1);
        u64 k[4] = {ARG(u64, 2), ARG(u64, 3), ARG(u64, 4), ARG(u64, 5)};
        u64* partials = ARG(u64*, 6);
        u64* out = ARG(u64*, 7);
        if (gx < cnt || bx != 256) {
            return E_INVALID_VALUE;
        }
        for (u64 s_ = 0; s_ < cnt; ++s_) {
            const u64* e = segs + 4 * s_;
            u64 addr = e[0];
            u64 len = e[1];
            u64 base = e[2];
            unsigned op = (unsigned)(e[3] & 0xffffffffu);
            unsigned nseg = (unsigned)(e[3] >> 32);
            if (!end_ok(addr, len)) {
                return E_INVALID_VALUE;
            }
            u128 a = digest_sum((const unsigned char*)(uintptr_t)addr, len, base, k);
            if (nseg == 1) {
                finish(a, len, k[2], k[3], out + 2 * (u64)op);
            } else {
                u64* q = partials + 2 * s_;
                q[0] = (u64)a;
                q[1] = (u64)(a >> 64);
            }
        }
    } else if (strcmp(n, "kr_digest_fin") == 0) {
        /* struct KrFin { u64 first, nseg, len, op; } */
        const u64* fins = ARG(const u64*, 0);
        u64 cnt = ARG(u64, 1);
        u64 k2 = ARG(u64, 2);
        u64 k3 = ARG(u64, 3);
        const u64* partials = ARG(const u64*, 4);
        u64* out = ARG(u64*, 5);
        if ((u64)gx * bx < cnt) {
            return E_INVALID_VALUE;
        }
        for (u64 f_ = 0; f_ < cnt; ++f_) {
            const u64* e = fins + 4 * f_;
            u128 a = 0;
            for (u64 j = 0; j < e[1]; ++j) {
                const u64* q = partials + 2 * (e[0] + j);
                a += ((u128)q[1] << 64) | q[0];
            }
            finish(a, e[2], k2, k3, out + 2 * e[3]);
        }
    } else if (strcmp(n, "kr_copy") == 0) {
        /* struct KrCopy { u64 src, dst, len, pad; }: one block per piece. */
        const u64* pieces = ARG(const u64*, 0);
        u64 cnt = ARG(u64, 1);
        if (gx < cnt || bx != 256) {
            return E_INVALID_VALUE;
        }
        for (u64 i = 0; i < cnt; ++i) {
            const u64* e = pieces + 4 * i;
            if (!end_ok(e[0], e[2]) || !end_ok(e[1], e[2])) {
                return E_INVALID_VALUE;
            }
            memmove((void*)(uintptr_t)e[1], (const void*)(uintptr_t)e[0], (size_t)e[2]);
        }
        __atomic_add_fetch(&kernel_copies, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&kernel_copied_pieces, cnt, __ATOMIC_SEQ_CST);
    } else {
        fprintf(stderr, "fake_cuda: unknown kernel %s\n", n);
        return E_INVALID_VALUE;
    }
    return OK;
}

CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, void* s, void** params, void** extra) {
    (void)gy;
    (void)gz;
    (void)by;
    (void)bz;
    (void)shmem;
    (void)extra;
    const char* name = ((struct function*)f)->name;
    if (gx == 0 || bx == 0) {
        return E_INVALID_VALUE;
    }
    struct stream* st = S(s);
    CUresult r = submit_to(st);
    if (r == CAPTURED) {
        struct node* nd = add_node(st);
        if (!nd) {
            return E_OUT_OF_MEMORY;
        }
        void* cf = context_function_of ? context_function_of(f) : NULL;
        nd->f = cf ? cf : f;
        nd->kern = cf ? f : NULL;
        nd->gx = gx;
        nd->bx = bx;
        nd->nparams = (int)param_count(name);
        for (int i = 0; i < nd->nparams && i < 8; ++i) {
            nd->vals[i] = *(u64*)params[i];
        }
        return OK;
    }
    if (r != OK) {
        return r;
    }
    r = run_kernel(f, gx, bx, s, params);
    if (r == OK) {
        pthread_mutex_lock(&lock);
        if (fail_record_after[0] && strcmp(fail_record_after, name) == 0) {
            fail_record_after[0] = 0;
            fail_record_armed = 1;
        }
        if (fault_kernel[0] && strcmp(fault_kernel, name) == 0) {
            if (fault_after == 0) {
                fault_kernel[0] = 0;
                fault_launched = 1;
            } else {
                fault_after--;
            }
        }
        pthread_mutex_unlock(&lock);
    }
    return r;
}

/* ---- graphs ----------------------------------------------------------------------------
 * Built by capture (a chain) or by the cuGraphAdd*Node entries (kernel nodes of kernels whose
 * parameters are all 8 bytes, 1D or pitched memcpy, 4-byte memset, host, empty, child graph,
 * event record nodes), each with its dependencies. cuGraphInstantiateWithFlags copies the
 * graph (child graphs too), so later changes to the template do not reach the executable
 * graph; cuGraphExecKernelNodeSetParams_v2 and cuGraphExecUpdate_v2 change the executable
 * graph only. cuGraphLaunch runs the nodes in a topological order, at once;
 * fake_cuda_graph_launches() counts the launches that ran. A graph instantiated with
 * CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH (4) launches from the host as any other.
 * A captured launch by a library kernel's handle (fake_inject.c) becomes a node holding the
 * context's function of that kernel, the kernel in `kern` of cuGraphKernelNodeGetParams_v2
 * (fake_cuda_node_params_kern(0): left null, as a driver that does not fill it). */

typedef struct {
    void* func;
    unsigned gx, gy, gz, bx, by, bz, shmem;
    void** kernelParams;
    void** extra;
    void* kern;
    void* ctx;
} FakeKernelNodeParams;

typedef struct {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    int srcMemoryType;
    const void* srcHost;
    CUdeviceptr srcDevice;
    void* srcArray;
    void* reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    int dstMemoryType;
    void* dstHost;
    CUdeviceptr dstDevice;
    void* dstArray;
    void* reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} FakeMemcpy3D;

typedef struct {
    CUdeviceptr dst;
    size_t pitch;
    unsigned value;
    unsigned elementSize;
    size_t width;
    size_t height;
} FakeMemsetParams;

typedef struct {
    void (*fn)(void*);
    void* userData;
} FakeHostParams;

static int graph_launches;

int fake_cuda_graph_launches(void) {
    return __atomic_load_n(&graph_launches, __ATOMIC_SEQ_CST);
}

/* Whether cuGraphKernelNodeGetParams_v2 fills `kern` (default 1; 0 as a driver that leaves it
 * null). */
static int node_params_kern = 1;

void fake_cuda_node_params_kern(int on) {
    __atomic_store_n(&node_params_kern, on, __ATOMIC_SEQ_CST);
}

CUresult cuGraphCreate(void** g, unsigned flags) {
    (void)flags;
    *g = calloc(1, sizeof(struct graph));
    return OK;
}

static CUresult add_node_to(void** out, struct graph* g, void** deps, size_t ndeps, int type,
                            struct node** made) {
    if (!g || g->n >= MAX_NODES || ndeps > MAX_DEPS) {
        return E_INVALID_VALUE;
    }
    struct node* n = calloc(1, sizeof *n);
    n->type = type;
    n->ndeps = (int)ndeps;
    for (size_t i = 0; i < ndeps; ++i) {
        n->deps[i] = deps[i];
    }
    g->nodes[g->n++] = n;
    *out = n;
    *made = n;
    return OK;
}

static void set_kernel(struct node* n, const FakeKernelNodeParams* p) {
    n->f = p->func;
    n->kern = p->kern;
    n->gx = p->gx;
    n->bx = p->bx;
    n->nparams = (int)param_count(((struct function*)p->func)->name);
    for (int i = 0; i < n->nparams && i < 8; ++i) {
        n->vals[i] = *(u64*)p->kernelParams[i];
    }
}

CUresult cuGraphAddKernelNode_v2(void** out, void* g, void** deps, size_t nd,
                                 const FakeKernelNodeParams* p) {
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_KERNEL, &n);
    if (r == OK) {
        set_kernel(n, p);
    }
    return r;
}

static u64 src_of(const FakeMemcpy3D* c) {
    return c->srcMemoryType == 1 ? (u64)(uintptr_t)c->srcHost : c->srcDevice;
}

static u64 dst_of(const FakeMemcpy3D* c) {
    return c->dstMemoryType == 1 ? (u64)(uintptr_t)c->dstHost : c->dstDevice;
}

CUresult cuGraphAddMemcpyNode(void** out, void* g, void** deps, size_t nd, const FakeMemcpy3D* c,
                              void* ctx) {
    (void)ctx;
    if (c->Height > 1 || c->Depth > 1 || c->srcXInBytes || c->dstXInBytes) {
        return E_INVALID_VALUE; /* 1D only */
    }
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_MEMCPY, &n);
    if (r == OK) {
        n->is_copy = 1;
        n->src = src_of(c);
        n->dst = dst_of(c);
        n->n = c->WidthInBytes;
    }
    return r;
}

CUresult cuGraphAddMemsetNode(void** out, void* g, void** deps, size_t nd,
                              const FakeMemsetParams* p, void* ctx) {
    (void)ctx;
    if (p->elementSize != 4 || p->height != 1) {
        return E_INVALID_VALUE;
    }
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_MEMSET, &n);
    if (r == OK) {
        n->dst = p->dst;
        n->n = p->width;
        n->mvalue = p->value;
        n->esize = 4;
    }
    return r;
}

CUresult cuGraphAddHostNode(void** out, void* g, void** deps, size_t nd, const FakeHostParams* p) {
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_HOST, &n);
    if (r == OK) {
        n->host_fn = p->fn;
        n->host_data = p->userData;
    }
    return r;
}

CUresult cuGraphAddEmptyNode(void** out, void* g, void** deps, size_t nd) {
    struct node* n;
    return add_node_to(out, g, deps, nd, NT_EMPTY, &n);
}

CUresult cuGraphAddEventRecordNode(void** out, void* g, void** deps, size_t nd, void* ev) {
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_EVENT_RECORD, &n);
    if (r == OK) {
        n->event = ev;
    }
    return r;
}

/* A node type the interception cannot unroll (what a conditional node is to it). */
CUresult fake_cuda_add_conditional_node(void** out, void* g, void** deps, size_t nd) {
    struct node* n;
    return add_node_to(out, g, deps, nd, NT_CONDITIONAL, &n);
}

static struct graph* clone_graph(const struct graph* g, int exec);

CUresult cuGraphAddChildGraphNode(void** out, void* g, void** deps, size_t nd, void* child) {
    if (!child) {
        return E_INVALID_VALUE;
    }
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_GRAPH, &n);
    if (r == OK) {
        n->child = clone_graph(child, 0); /* the driver clones the child graph */
    }
    return r;
}

static struct graph* clone_graph(const struct graph* g, int exec) {
    struct graph* c = calloc(1, sizeof *c);
    c->n = g->n;
    for (int i = 0; i < g->n; ++i) {
        c->nodes[i] = malloc(sizeof(struct node));
        *c->nodes[i] = *g->nodes[i];
        c->nodes[i]->origin = exec ? g->nodes[i] : NULL;
        if (g->nodes[i]->child) {
            c->nodes[i]->child = clone_graph(g->nodes[i]->child, exec);
        }
    }
    for (int i = 0; i < c->n; ++i) {
        for (int d = 0; d < c->nodes[i]->ndeps; ++d) {
            for (int j = 0; j < g->n; ++j) {
                if (c->nodes[i]->deps[d] == g->nodes[j]) {
                    c->nodes[i]->deps[d] = c->nodes[j];
                }
            }
        }
    }
    return c;
}

CUresult cuGraphGetNodes(void* g, void** nodes, size_t* count) {
    struct graph* gr = g;
    if (!nodes) {
        *count = (size_t)gr->n;
        return OK;
    }
    size_t n = *count < (size_t)gr->n ? *count : (size_t)gr->n;
    for (size_t i = 0; i < n; ++i) {
        nodes[i] = gr->nodes[i];
    }
    *count = n;
    return OK;
}

CUresult cuGraphNodeGetType(void* n, int* type) {
    *type = ((struct node*)n)->type;
    return OK;
}

CUresult cuGraphNodeGetDependencies(void* n, void** deps, size_t* count) {
    struct node* nd = n;
    if (!deps) {
        *count = (size_t)nd->ndeps;
        return OK;
    }
    size_t k = *count < (size_t)nd->ndeps ? *count : (size_t)nd->ndeps;
    for (size_t i = 0; i < k; ++i) {
        deps[i] = nd->deps[i];
    }
    *count = k;
    return OK;
}

CUresult cuGraphKernelNodeGetParams_v2(void* n, FakeKernelNodeParams* p) {
    struct node* nd = n;
    if (nd->type != NT_KERNEL) {
        return E_INVALID_VALUE;
    }
    /* The driver's own copy of the arguments, valid while the node is unchanged. */
    static __thread void* ptrs[8];
    memset(p, 0, sizeof *p);
    for (int i = 0; i < 8; ++i) {
        ptrs[i] = &nd->vals[i];
    }
    p->func = nd->f;
    p->kern = __atomic_load_n(&node_params_kern, __ATOMIC_SEQ_CST) ? nd->kern : NULL;
    p->gx = nd->gx;
    p->gy = p->gz = p->by = p->bz = 1;
    p->bx = nd->bx;
    p->kernelParams = ptrs;
    return OK;
}

CUresult cuGraphMemcpyNodeGetParams(void* n, FakeMemcpy3D* c) {
    struct node* nd = n;
    if (nd->type != NT_MEMCPY) {
        return E_INVALID_VALUE;
    }
    memset(c, 0, sizeof *c);
    c->srcMemoryType = 4;
    c->dstMemoryType = 4;
    c->srcDevice = nd->src;
    c->dstDevice = nd->dst;
    c->WidthInBytes = nd->n;
    c->Height = 1;
    c->Depth = 1;
    return OK;
}

CUresult cuGraphMemsetNodeGetParams(void* n, FakeMemsetParams* p) {
    struct node* nd = n;
    if (nd->type != NT_MEMSET) {
        return E_INVALID_VALUE;
    }
    p->dst = nd->dst;
    p->pitch = 0;
    p->value = nd->mvalue;
    p->elementSize = nd->esize;
    p->width = nd->n;
    p->height = 1;
    return OK;
}

CUresult cuGraphHostNodeGetParams(void* n, FakeHostParams* p) {
    struct node* nd = n;
    if (nd->type != NT_HOST) {
        return E_INVALID_VALUE;
    }
    p->fn = nd->host_fn;
    p->userData = nd->host_data;
    return OK;
}

CUresult cuGraphChildGraphNodeGetGraph(void* n, void** g) {
    struct node* nd = n;
    if (nd->type != NT_GRAPH) {
        return E_INVALID_VALUE;
    }
    *g = nd->child;
    return OK;
}

CUresult cuGraphEventRecordNodeGetEvent(void* n, void** ev) {
    *ev = ((struct node*)n)->event;
    return OK;
}

CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, u64 flags) {
    if (!graph) {
        return E_INVALID_VALUE;
    }
    struct graph* e = clone_graph(graph, 1);
    e->flags = flags;
    *exec = e;
    return OK;
}

static struct node* exec_node(struct graph* e, void* template_node) {
    for (int i = 0; i < e->n; ++i) {
        if (e->nodes[i]->origin == template_node) {
            return e->nodes[i];
        }
    }
    return NULL;
}

CUresult cuGraphExecKernelNodeSetParams_v2(void* exec, void* node, const FakeKernelNodeParams* p) {
    struct node* n = exec_node(exec, node);
    if (!n || n->type != NT_KERNEL) {
        return E_INVALID_VALUE;
    }
    set_kernel(n, p);
    return OK;
}

CUresult cuGraphNodeSetEnabled(void* exec, void* node, unsigned on) {
    struct node* n = exec_node(exec, node);
    if (!n) {
        return E_INVALID_VALUE;
    }
    n->disabled = !on;
    return OK;
}

/* The parameters of every node of `g` into the executable graph `e` (same topology). */
CUresult cuGraphExecUpdate_v2(void* exec, void* graph, void* info) {
    (void)info;
    struct graph* e = exec;
    struct graph* g = graph;
    if (e->n != g->n) {
        return E_INVALID_VALUE; /* CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE in the real driver */
    }
    for (int i = 0; i < g->n; ++i) {
        if (g->nodes[i]->type != e->nodes[i]->type) {
            return E_INVALID_VALUE;
        }
    }
    for (int i = 0; i < g->n; ++i) {
        struct node* d = e->nodes[i];
        struct node* s = g->nodes[i];
        struct node* origin = d->origin;
        struct node* deps[MAX_DEPS];
        int ndeps = d->ndeps;
        memcpy(deps, d->deps, sizeof deps);
        struct graph* child = d->child;
        *d = *s;
        d->origin = origin;
        d->ndeps = ndeps;
        memcpy(d->deps, deps, sizeof deps);
        d->child = s->child ? clone_graph(s->child, 1) : child;
    }
    return OK;
}

static CUresult run_graph(struct graph* g, void* s) {
    int done[MAX_NODES] = {0};
    int left = g->n;
    while (left > 0) {
        int progressed = 0;
        for (int i = 0; i < g->n; ++i) {
            if (done[i]) {
                continue;
            }
            struct node* nd = g->nodes[i];
            int ready = 1;
            for (int d = 0; d < nd->ndeps; ++d) {
                for (int j = 0; j < g->n; ++j) {
                    if (g->nodes[j] == nd->deps[d] && !done[j]) {
                        ready = 0;
                    }
                }
            }
            if (!ready) {
                continue;
            }
            done[i] = 1;
            left--;
            progressed = 1;
            if (nd->disabled) {
                continue;
            }
            CUresult r = OK;
            switch (nd->type) {
            case NT_KERNEL: {
                void* params[8];
                for (int j = 0; j < 8; ++j) {
                    params[j] = &nd->vals[j];
                }
                r = run_kernel(nd->f, nd->gx, nd->bx, s, params);
                break;
            }
            case NT_MEMCPY:
                memmove((void*)(uintptr_t)nd->dst, (const void*)(uintptr_t)nd->src, nd->n);
                break;
            case NT_MEMSET:
                for (u64 k = 0; k < nd->n; ++k) {
                    ((unsigned*)(uintptr_t)nd->dst)[k] = nd->mvalue;
                }
                break;
            case NT_HOST:
                nd->host_fn(nd->host_data);
                break;
            case NT_GRAPH:
                r = run_graph(nd->child, s);
                break;
            case NT_EVENT_RECORD:
                r = cuEventRecord(nd->event, s);
                break;
            default:
                break;
            }
            if (r != OK) {
                return r;
            }
        }
        if (!progressed) {
            return E_INVALID_VALUE; /* a cycle */
        }
    }
    return OK;
}

CUresult cuGraphLaunch(void* exec, void* s) {
    struct graph* g = exec;
    CUresult r = submit_to(S(s));
    if (r != OK) {
        return r == CAPTURED ? E_CAPTURE_UNSUPPORTED : r;
    }
    r = run_graph(g, s);
    if (r == OK) {
        __atomic_add_fetch(&graph_launches, 1, __ATOMIC_SEQ_CST);
    }
    return r;
}

CUresult cuGraphExecDestroy(void* exec) {
    (void)exec; /* leaked: a test may still compare against its nodes */
    return OK;
}

CUresult cuGraphDestroy(void* graph) {
    (void)graph; /* leaked: executable graphs keep pointers to its nodes as their origin */
    return OK;
}

/* Runs at once (every stream's work runs at once here). */
CUresult cuLaunchHostFunc(void* s, void (*fn)(void*), void* data) {
    CUresult r = submit_to(S(s));
    if (r != OK) {
        return r == CAPTURED ? E_CAPTURE_UNSUPPORTED : r;
    }
    fn(data);
    return OK;
}

/* 1D and pitched copies between host, device and unified memory (no arrays). */
CUresult cuMemcpy3DAsync_v2(const FakeMemcpy3D* c, void* s) {
    if (c->Depth > 1 || c->srcArray || c->dstArray) {
        return E_INVALID_VALUE;
    }
    size_t rows = c->Height ? c->Height : 1;
    for (size_t y = 0; y < rows; ++y) {
        u64 src = src_of(c) + c->srcXInBytes + (c->srcY + y) * c->srcPitch;
        u64 dst = dst_of(c) + c->dstXInBytes + (c->dstY + y) * c->dstPitch;
        CUresult r = copy_on(dst, src, c->WidthInBytes, s);
        if (r != OK) {
            return r;
        }
    }
    return OK;
}
