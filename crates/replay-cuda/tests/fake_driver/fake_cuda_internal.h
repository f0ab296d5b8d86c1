/* The fake driver's shared types, state and helpers; each global is defined in one .c. */
#ifndef FAKE_CUDA_INTERNAL_H
#define FAKE_CUDA_INTERNAL_H

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

/* The device arena: reserved once, bump-allocated, never reused (freed pages are returned
 * to the system). */
#define ARENA_BYTES (1ULL << 42)

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

struct event {
    u64 at; /* completes at this time (ns); 0 = never recorded */
    int recorded;
    struct stream* captured; /* recorded into this stream's capture */
    struct stream* on;       /* the stream it was last recorded on */
};

/* submit_to: the submission becomes a node of the stream's capture. */
#define CAPTURED (-1)

struct module {
    int unused;
};

struct function {
    char name[64];
};

struct fake_array {
    u64 bytes;
    unsigned char* data;
};

#define MAX_SURFACES 64
#define TMAP_KEY 0x5a5a5a5a5a5a5a5aULL

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

#ifdef FAKE_CUDA_INJECT
/* Built into fake_inject.c's driver, which defines these entries over the base ones (calling
 * them by these names). */
#define cuInit fake_base_cuInit
#define cuModuleGetFunction fake_base_cuModuleGetFunction
#define cuFuncGetParamInfo fake_base_cuFuncGetParamInfo
#endif

/* Internal to the library: not exported. */
#pragma GCC visibility push(hidden)
/* fake_cuda.c */
extern pthread_mutex_t lock;
extern u64 mem_total;
extern u64 mem_used;
extern int ctx_token;
extern __thread void* current_ctx;
u64 now_ns(void);
extern int fault_launched;
extern char fault_kernel[64];
extern int fault_after;
CUresult sticky_now(void);
CUresult unsafe_call(void);
CUresult submit_to(struct stream* st);
extern void* (*context_function_of)(void* f);
struct node* add_node(struct stream* st);
u64 device_busy_until(void);

/* fake_cuda_memory.c */
extern struct alloc* allocs;
CUresult do_alloc_kind(void** out, u64 size, int device, int kind);
CUresult do_free(void* p);

/* fake_cuda_stream.c */
extern struct stream legacy;
extern struct stream* streams;
extern int blocking_frees;
extern char fail_record_after[64];
extern int fail_record_armed;
extern int fail_host_registers;
struct stream* S(void* s);
int prohibited_locked(void);
void wait_until(u64 t);

/* fake_cuda_vmem.c */
int mapped_ok(u64 p, u64 n);

/* fake_cuda_launch.c */
CUresult run_kernel(void* f, unsigned gx, unsigned bx, void* s, void** params);

/* fake_cuda_code.c */
extern unsigned char nv_global[8328];
extern u64 nv_const[4];
size_t param_count(const char* n);

/* fake_cuda_copy.c */
int device_range(u64 p, u64* base, u64* size);
int end_ok(u64 p, u64 n);

/* fake_cuda_arrays.c */
extern struct fake_array* surfaces[MAX_SURFACES + 1];

/* fake_cuda_graph.c */
u64 src_of(const FakeMemcpy3D* c);
u64 dst_of(const FakeMemcpy3D* c);
#pragma GCC visibility pop

/* Entries called from another file than their own. */
/* fake_cuda.c */
CUresult cuInit(unsigned flags);

/* fake_cuda_memory.c */
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t size);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemAllocManaged(CUdeviceptr* p, size_t size, unsigned flags);
CUresult cuMemHostAlloc(void** p, size_t size, unsigned flags);
CUresult cuMemAllocHost_v2(void** p, size_t size);
CUresult cuMemFreeHost(void* p);

/* fake_cuda_stream.c */
CUresult cuStreamCreate(void** s, unsigned flags);
CUresult cuEventRecord(void* e, void* s);

/* fake_cuda_launch.c */
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, void* s, void** params, void** extra);

/* fake_cuda_code.c */
CUresult cuModuleLoadData(void** m, const void* image);
CUresult cuModuleUnload(void* m);
CUresult cuModuleGetGlobal_v2(CUdeviceptr* p, size_t* bytes, void* m, const char* name);
CUresult cuModuleGetFunction(void** f, void* m, const char* name);
CUresult cuFuncGetParamInfo(void* f, size_t index, size_t* offset, size_t* size);

/* fake_cuda_copy.c */
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void* s);
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, void* s);

/* fake_cuda_graph.c */
CUresult cuGraphLaunch(void* exec, void* s);

#endif
