/*
 * A small "unmodified application" of the fake driver (fake_inject.c), linked with -lcuda:
 * it allocates memory of every class, launches kr_rmw (read-modify-write: a second execution
 * would change the result) through every launch entry and every way of reaching one (a direct
 * call, cuGetProcAddress, dlsym of the driver), a kernel whose layout the driver cannot
 * describe, a launch into a capturing stream and its graph, a cooperative launch, and frees;
 * then prints a digest of every buffer and exits with status 7. Under `kreplay run` its output
 * and status must equal a plain run's. With KR_APP_VMEM set it also does what PyTorch's
 * expandable segments and its cudaMallocAsync backend do (cuMemCreate, cuMemAddressReserve,
 * cuMemMap, cuMemSetAccess; cuMemAllocFromPoolAsync, cuMemFreeAsync) and launches kr_rmw
 * on each. With KR_APP_CRASH set it raises SIGSEGV after its launches.
 */
#include <signal.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shmem;
    void* stream;
    void* attrs;
    unsigned n_attrs;
} launch_config;
typedef struct {
    int id;
    char pad[4];
    union {
        char pad[64];
        int cooperative;
        unsigned dims[3];
    } value;
} launch_attr;

CUresult cuInit(unsigned);
CUresult cuDeviceGet(int*, int);
CUresult cuDevicePrimaryCtxRetain(void**, int);
CUresult cuCtxSetCurrent(void*);
CUresult cuModuleLoadData(void**, const void*);
CUresult cuModuleGetFunction(void**, void*, const char*);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemAllocPitch_v2(CUdeviceptr*, size_t*, size_t, size_t, unsigned);
CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned);
CUresult cuMemAllocHost_v2(void**, size_t);
CUresult cuMemHostAlloc(void**, size_t, unsigned);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFreeHost(void*);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void*, size_t, void*);
CUresult cuMemcpyDtoHAsync_v2(void*, CUdeviceptr, size_t, void*);
CUresult cuStreamCreate(void**, unsigned);
CUresult cuStreamDestroy_v2(void*);
CUresult cuStreamSynchronize(void*);
CUresult cuCtxSynchronize(void);
CUresult cuStreamBeginCapture_v2(void*, int);
CUresult cuStreamEndCapture(void*, void**);
CUresult cuGraphInstantiateWithFlags(void**, void*, unsigned long long);
CUresult cuGraphLaunch(void*, void*);
CUresult cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void*, void**, void**);
CUresult cuLaunchKernel_ptsz(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, void*, void**, void**);
CUresult cuLaunchKernelEx(const launch_config*, void*, void**, void**);
CUresult cuGetProcAddress_v2(const char*, void**, int, unsigned long long, int*);
typedef struct {
    int type, handle_types;
    int location_type, location_id;
    void* win32;
    unsigned char compression, rdma;
    unsigned short usage;
    unsigned char reserved[4];
} alloc_prop;
typedef struct {
    int location_type, location_id, flags;
} access_desc;
CUresult cuMemCreate(unsigned long long*, size_t, const alloc_prop*, unsigned long long);
CUresult cuMemAddressReserve(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long);
CUresult cuMemSetAccess(CUdeviceptr, size_t, const access_desc*, size_t);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemRelease(unsigned long long);
CUresult cuDeviceGetDefaultMemPool(void**, int);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr*, size_t, void*, void*);
CUresult cuMemFreeAsync(CUdeviceptr, void*);

typedef CUresult (*launch_fn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, void*, void**, void**);

#define N 4096
#define CHECK(x)                                                         \
    do {                                                                 \
        CUresult r_ = (x);                                               \
        if (r_ != 0) {                                                   \
            printf("error %d at line %d: %s\n", r_, __LINE__, #x);       \
            return 1;                                                    \
        }                                                                \
    } while (0)

static unsigned long long fnv(const void* p, size_t n) {
    const unsigned char* b = p;
    unsigned long long h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; ++i) {
        h = (h ^ b[i]) * 1099511628211ULL;
    }
    return h;
}

static CUresult rmw(launch_fn f, void* fn, CUdeviceptr p, unsigned long long k, void* s) {
    unsigned long long n = N;
    void* args[] = {&p, &n, &k};
    return f(fn, 1, 1, 1, 64, 1, 1, 0, s, args, NULL);
}

/* An expandable segment (a 2 MiB chunk mapped read-write for device 0) and a pool
 * allocation, each written by kr_rmw; prints their digests. */
static int vmem_part(void* f_rmw, const unsigned long long* init) {
    size_t bytes = N * 8, chunk = 2 << 20;
    alloc_prop prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;          /* CU_MEM_ALLOCATION_TYPE_PINNED */
    prop.location_type = 1; /* CU_MEM_LOCATION_TYPE_DEVICE */
    access_desc acc = {1, 0, 3}; /* device 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
    unsigned long long h;
    CUdeviceptr seg, pooled;
    void* pool;
    CHECK(cuMemCreate(&h, chunk, &prop, 0));
    CHECK(cuMemAddressReserve(&seg, chunk, 0, 0, 0));
    CHECK(cuMemMap(seg, chunk, 0, h, 0));
    CHECK(cuMemSetAccess(seg, chunk, &acc, 1));
    CHECK(cuMemcpyHtoDAsync_v2(seg, init, bytes, NULL));
    CHECK(rmw(cuLaunchKernel, f_rmw, seg, 10, NULL));
    CHECK(cuDeviceGetDefaultMemPool(&pool, 0));
    CHECK(cuMemAllocFromPoolAsync(&pooled, bytes, pool, NULL));
    CHECK(cuMemcpyHtoDAsync_v2(pooled, init, bytes, NULL));
    CHECK(rmw(cuLaunchKernel, f_rmw, pooled, 11, NULL));
    CHECK(cuCtxSynchronize());
    unsigned long long* out = malloc(bytes);
    CHECK(cuMemcpyDtoHAsync_v2(out, seg, bytes, NULL));
    printf("segment %016llx\n", fnv(out, bytes));
    CHECK(cuMemcpyDtoHAsync_v2(out, pooled, bytes, NULL));
    printf("pooled %016llx\n", fnv(out, bytes));
    free(out);
    CHECK(cuMemFreeAsync(pooled, NULL));
    CHECK(cuMemUnmap(seg, chunk));
    CHECK(cuMemAddressFree(seg, chunk));
    CHECK(cuMemRelease(h));
    return 0;
}

int main(void) {
    CUresult r = cuInit(0);
    if (r != 0) {
        printf("no CUDA device (cuInit: %d)\n", r);
        return 7;
    }
    int dev;
    void* ctx;
    void* mod;
    void *f_rmw, *f_opaque, *f_tiny;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    /* PTX text without module globals (the fake driver compiles nothing). */
    CHECK(cuModuleLoadData(&mod, ".version 8.4\n.target sm_90\n.address_size 64\n"
                                 ".visible .entry kr_rmw(.param .u64 p, .param .u64 n, .param .u64 k)\n"
                                 "{\n\tret;\n}\n"));
    CHECK(cuModuleGetFunction(&f_rmw, mod, "kr_rmw"));
    CHECK(cuModuleGetFunction(&f_opaque, mod, "opaque_kr_rmw"));
    CHECK(cuModuleGetFunction(&f_tiny, mod, "kr_tiny"));

    size_t bytes = N * 8, pitch = 0;
    CUdeviceptr a, b, pitched, managed;
    void *host, *pinned;
    CHECK(cuMemAlloc_v2(&a, bytes));
    CHECK(cuMemAlloc_v2(&b, bytes));
    CHECK(cuMemAllocPitch_v2(&pitched, &pitch, bytes, 1, 8));
    CHECK(cuMemAllocManaged(&managed, 64, 1));
    CHECK(cuMemAllocHost_v2(&host, bytes));
    CHECK(cuMemHostAlloc(&pinned, 64, 0));
    unsigned long long* h = host;
    for (unsigned i = 0; i < N; ++i) {
        h[i] = i * 2654435761ULL + 17;
    }
    void* s;
    CHECK(cuStreamCreate(&s, 1));
    CHECK(cuMemcpyHtoDAsync_v2(a, host, bytes, NULL));
    CHECK(cuMemcpyHtoDAsync_v2(b, host, bytes, NULL));
    CHECK(cuMemcpyHtoDAsync_v2(pitched, host, bytes, NULL));
    memset((void*)(uintptr_t)managed, 3, 64);
    memset(pinned, 5, 64);
    CHECK(cuCtxSynchronize());

    /* Every launch entry, directly. */
    CHECK(rmw(cuLaunchKernel, f_rmw, a, 1, NULL));
    CHECK(rmw(cuLaunchKernel_ptsz, f_rmw, b, 2, NULL));
    {
        unsigned long long n = N, k = 3;
        void* args[] = {&pitched, &n, &k};
        /* A cluster of one block: an attribute a capture keeps and a replay applies again. */
        launch_attr at;
        memset(&at, 0, sizeof at);
        at.id = 4; /* CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION */
        at.value.dims[0] = at.value.dims[1] = at.value.dims[2] = 1;
        launch_config c = {1, 1, 1, 64, 1, 1, 0, s, &at, 1};
        CHECK(cuLaunchKernelEx(&c, f_rmw, args, NULL));
    }
    /* Through cuGetProcAddress, as the runtime reaches the driver. */
    {
        void* p = NULL;
        int st = 0;
        CHECK(cuGetProcAddress_v2("cuLaunchKernel", &p, 12000, 0, &st));
        CHECK(rmw((launch_fn)p, f_rmw, a, 4, s));
        CHECK(cuGetProcAddress_v2("cuLaunchKernel", &p, 12000, 2, &st));
        CHECK(rmw((launch_fn)p, f_rmw, b, 5, NULL));
    }
    /* Through dlsym of the driver, as Triton does. */
    {
        void* lib = dlopen("libcuda.so.1", RTLD_NOW);
        launch_fn p = lib ? (launch_fn)dlsym(lib, "cuLaunchKernel") : NULL;
        if (!p) {
            printf("dlsym failed\n");
            return 1;
        }
        CHECK(rmw(p, f_rmw, a, 6, NULL));
    }
    /* A kernel whose layout the driver cannot describe. */
    CHECK(rmw(cuLaunchKernel, f_opaque, b, 7, s));
    /* Managed and pinned memory reached through arguments. */
    {
        void* args[] = {&managed};
        CHECK(cuLaunchKernel(f_tiny, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        CUdeviceptr pp = (CUdeviceptr)(uintptr_t)pinned;
        void* args2[] = {&pp};
        CHECK(cuLaunchKernel(f_tiny, 1, 1, 1, 1, 1, 1, 0, NULL, args2, NULL));
    }
    /* A capturing stream, then its graph. */
    {
        void *g, *exec;
        CHECK(cuStreamBeginCapture_v2(s, 2));
        CHECK(rmw(cuLaunchKernel, f_rmw, a, 8, s));
        CHECK(cuStreamEndCapture(s, &g));
        CHECK(cuGraphInstantiateWithFlags(&exec, g, 0));
        CHECK(cuGraphLaunch(exec, s));
    }
    /* A cooperative launch. */
    {
        unsigned long long n = N, k = 9;
        void* args[] = {&b, &n, &k};
        launch_attr at;
        memset(&at, 0, sizeof at);
        at.id = 2; /* CU_LAUNCH_ATTRIBUTE_COOPERATIVE */
        at.value.cooperative = 1;
        launch_config c = {1, 1, 1, 64, 1, 1, 0, s, &at, 1};
        CHECK(cuLaunchKernelEx(&c, f_rmw, args, NULL));
    }
    CHECK(cuCtxSynchronize());
    if (getenv("KR_APP_CRASH")) {
        /* A program that dies by a signal after its launches (kreplay run's crash report). */
        fflush(stdout);
        raise(SIGSEGV);
    }
    if (getenv("KR_APP_VMEM") && vmem_part(f_rmw, h) != 0) {
        return 1;
    }

    unsigned long long* out = malloc(bytes);
    CHECK(cuMemcpyDtoHAsync_v2(out, a, bytes, NULL));
    printf("a %016llx\n", fnv(out, bytes));
    CHECK(cuMemcpyDtoHAsync_v2(out, b, bytes, NULL));
    printf("b %016llx\n", fnv(out, bytes));
    CHECK(cuMemcpyDtoHAsync_v2(out, pitched, bytes, NULL));
    printf("pitched %016llx\n", fnv(out, bytes));
    printf("managed %016llx\n", fnv((void*)(uintptr_t)managed, 64));
    printf("pinned %016llx\n", fnv(pinned, 64));
    free(out);

    CHECK(cuStreamDestroy_v2(s));
    CHECK(cuMemFree_v2(a));
    CHECK(cuMemFree_v2(b));
    CHECK(cuMemFree_v2(pitched));
    CHECK(cuMemFree_v2(managed));
    CHECK(cuMemFreeHost(host));
    CHECK(cuMemFreeHost(pinned));
    printf("done\n");
    return 7;
}
