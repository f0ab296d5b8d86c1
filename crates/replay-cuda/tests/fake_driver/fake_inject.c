/*
 * The fake driver with the entries an unmodified application and the interception use:
 * fake_cuda*.c (built with it) plus cuGetProcAddress (both forms, answering with this
 * library's own entries, as the real driver does), the _ptsz and Ex launch forms (attributes
 * accepted; a cooperative launch runs like any other), cuLaunchCooperativeKernel,
 * cuFuncGetName / cuKernelGetName / cuKernelGetParamInfo, cuCtxGetDevice, cuMemAllocPitch,
 * cuGraphLaunch_ptsz, cuMemsetD2D32Async, cuModuleLoadFatBinary, cuStreamCreateWithPriority,
 * cuMemcpyPeerAsync, cuMemcpy2DAsync_v2 and cuMemcpy3DPeerAsync (host, device and unified
 * memory; no arrays), cuIpcOpenMemHandle_v2 / cuIpcCloseMemHandle (a 4 KiB allocation stands for the other
 * process's memory), cuIpcGetMemHandle and cuMemExportToShareableHandle (the export side: the
 * handles are made, no other process is), fake_cuda_set_thread_device (what cuCtxGetDevice answers on the calling
 * thread, default 0), the library entries
 * (cuLibraryLoadData, cuLibraryGetKernel, cuKernelGetFunction, cuLibraryGetGlobal,
 * cuLibraryGetModule, cuLibraryUnload: a library is a module, with a module of its own for the
 * context; a kernel's function is another handle than the kernel), cuFuncGetModule (the module
 * each function was fetched from, or its library's module in the context), and the injection call of a real driver: cuInit calls InitializeInjection()
 * of the library named in CUDA_INJECTION64_PATH, once. cuKernelGetLibrary is absent, as in
 * drivers before CUDA 12.5.
 *
 * A function fetched as "opaque_NAME" runs kernel NAME but the driver cannot describe its
 * parameters (cuFuncGetParamInfo answers CUDA_ERROR_NOT_SUPPORTED), as for PyTorch's
 * precompiled kernels on a real driver. cuFuncGetName answers kr_rmw's name mangled, as a
 * real driver answers a C++ kernel's, and cuModuleGetFunction finds it by that name.
 *
 * Build with -Wl,-Bsymbolic: the fake's entries call each other directly, as the real
 * driver's do, not through a library loaded in front of it. Build with -DFAKE_CUDA_INJECT
 * too, every file: fake_cuda_internal.h then renames the base entries this file replaces.
 */
#ifndef FAKE_CUDA_INJECT
#error "build fake_inject.c with -DFAKE_CUDA_INJECT, with every fake_cuda*.c"
#endif
#include "fake_cuda_internal.h"
#undef cuInit
#undef cuModuleGetFunction
#undef cuFuncGetParamInfo

#include <dlfcn.h>

#define E_NOT_SUPPORTED 801

static void* opaque[64];
static int n_opaque;

static int is_opaque(void* f) {
    for (int i = 0; i < n_opaque; ++i) {
        if (opaque[i] == f) {
            return 1;
        }
    }
    return 0;
}

CUresult cuInit(unsigned flags) {
    static int injected;
    CUresult r = fake_base_cuInit(flags);
    const char* path = getenv("CUDA_INJECTION64_PATH");
    if (r == OK && path && *path && !injected) {
        injected = 1;
        void* h = dlopen(path, RTLD_NOW);
        int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
        if (init) {
            init();
        } else {
            fprintf(stderr, "fake_cuda: cannot inject %s\n", path);
        }
    }
    return r;
}

/* Which module each function came from (cuFuncGetModule), the most recent 4096. */
#define N_OWNERS 4096
static void* owner_fn[N_OWNERS];
static void* owner_mod[N_OWNERS];
static unsigned n_owners;
static pthread_mutex_t owners_lock = PTHREAD_MUTEX_INITIALIZER;

CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
    /* The name cuFuncGetName answers finds the function too, as on a real driver. */
    if (strcmp(name, "_Z6kr_rmwPmmm") == 0) {
        name = "kr_rmw";
    }
    int op = strncmp(name, "opaque_", 7) == 0;
    CUresult r = fake_base_cuModuleGetFunction(f, m, op ? name + 7 : name);
    if (r == OK && op && n_opaque < 64) {
        opaque[n_opaque++] = *f;
    }
    if (r == OK) {
        pthread_mutex_lock(&owners_lock);
        owner_fn[n_owners % N_OWNERS] = *f;
        owner_mod[n_owners % N_OWNERS] = m;
        n_owners++;
        pthread_mutex_unlock(&owners_lock);
    }
    return r;
}

CUresult cuFuncGetModule(void** m, void* f) {
    CUresult r = E_INVALID_HANDLE;
    pthread_mutex_lock(&owners_lock);
    for (unsigned i = 0; i < N_OWNERS && i < n_owners; ++i) {
        if (owner_fn[i] == f) {
            *m = owner_mod[i];
            r = OK;
            break;
        }
    }
    pthread_mutex_unlock(&owners_lock);
    return r;
}

CUresult cuFuncGetParamInfo(void* f, size_t index, size_t* offset, size_t* size) {
    if (is_opaque(f)) {
        return E_NOT_SUPPORTED;
    }
    return fake_base_cuFuncGetParamInfo(f, index, offset, size);
}

CUresult cuKernelGetParamInfo(void* k, size_t index, size_t* offset, size_t* size) {
    (void)k;
    (void)index;
    (void)offset;
    (void)size;
    return E_NOT_SUPPORTED;
}

/* kr_rmw's name as a C++ compiler mangles it (the driver reports mangled names). */
CUresult cuFuncGetName(const char** name, void* f) {
    const char* n = ((struct function*)f)->name;
    *name = strcmp(n, "kr_rmw") == 0 ? "_Z6kr_rmwPmmm" : n;
    return OK;
}

CUresult cuKernelGetName(const char** name, void* k) {
    (void)name;
    (void)k;
    return E_INVALID_HANDLE;
}

/* The device cuCtxGetDevice answers on this thread (fake_cuda_set_thread_device): a thread
 * may pose as one whose current context is another device's, for peer copies. */
static __thread int thread_device;

void fake_cuda_set_thread_device(int d) {
    thread_device = d;
}

CUresult cuCtxGetDevice(CUdevice* d) {
    *d = thread_device;
    return OK;
}

/* A peer copy: every device's memory is the one host address space. */
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void* dc, CUdeviceptr src, void* sc, size_t n, void* s) {
    (void)dc;
    (void)sc;
    return cuMemcpyAsync(dst, src, n, s);
}

/* The CUDA headers' 2D and 3D-peer copy descriptors (memory type 1 host, 2 device, 4 unified;
 * arrays are not modelled). Every address is the one host address space. */
typedef struct {
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void* srcHost;
    CUdeviceptr srcDevice;
    void* srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void* dstHost;
    CUdeviceptr dstDevice;
    void* dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} FakeMemcpy2D;

typedef struct {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    int srcMemoryType;
    const void* srcHost;
    CUdeviceptr srcDevice;
    void* srcArray;
    void* srcContext;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    int dstMemoryType;
    void* dstHost;
    CUdeviceptr dstDevice;
    void* dstArray;
    void* dstContext;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} FakeMemcpy3DPeer;

static char* addr_of(int type, const void* host, CUdeviceptr dev) {
    return type == 1 ? (char*)host : (type == 2 || type == 4) ? (char*)(uintptr_t)dev : NULL;
}

static CUresult copy_rows(char* dst, size_t dpitch, const char* src, size_t spitch, size_t w,
                          size_t rows, void* s) {
    if (!dst || !src) {
        return E_INVALID_VALUE;
    }
    CUresult r = submit_to(S(s));
    if (r != OK) {
        return r == CAPTURED ? E_CAPTURE_UNSUPPORTED : r;
    }
    for (size_t y = 0; y < rows; ++y) {
        memmove(dst + y * dpitch, src + y * spitch, w);
    }
    return OK;
}

CUresult cuMemcpy2DAsync_v2(const FakeMemcpy2D* c, void* s) {
    char* src = addr_of(c->srcMemoryType, c->srcHost, c->srcDevice);
    char* dst = addr_of(c->dstMemoryType, c->dstHost, c->dstDevice);
    if (!src || !dst) {
        return E_INVALID_VALUE;
    }
    return copy_rows(dst + c->dstY * c->dstPitch + c->dstXInBytes, c->dstPitch,
                     src + c->srcY * c->srcPitch + c->srcXInBytes, c->srcPitch, c->WidthInBytes,
                     c->Height, s);
}

CUresult cuMemcpy3DPeerAsync(const FakeMemcpy3DPeer* c, void* s) {
    char* src = addr_of(c->srcMemoryType, c->srcHost, c->srcDevice);
    char* dst = addr_of(c->dstMemoryType, c->dstHost, c->dstDevice);
    if (!src || !dst) {
        return E_INVALID_VALUE;
    }
    size_t sslice = c->srcPitch * c->srcHeight, dslice = c->dstPitch * c->dstHeight;
    for (size_t z = 0; z < c->Depth; ++z) {
        CUresult r = copy_rows(
            dst + (c->dstZ + z) * dslice + c->dstY * c->dstPitch + c->dstXInBytes, c->dstPitch,
            src + (c->srcZ + z) * sslice + c->srcY * c->srcPitch + c->srcXInBytes, c->srcPitch,
            c->WidthInBytes, c->Height, s);
        if (r != OK) {
            return r;
        }
    }
    return OK;
}

CUresult cuStreamCreateWithPriority(void** s, unsigned flags, int priority) {
    (void)priority;
    return cuStreamCreate(s, flags);
}

/* IPC: the "other process's" memory is a fresh device allocation; the handle is ignored. */
typedef struct {
    char reserved[64];
} CUipcMemHandle;

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, CUipcMemHandle h, unsigned flags) {
    (void)h;
    (void)flags;
    return cuMemAlloc_v2(p, 4096);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
    return cuMemFree_v2(p);
}

/* The export side: a handle to the device allocation containing p (its base address in the
 * handle's first bytes), and a cuMemCreate handle as an OS handle (a file descriptor's worth,
 * 3); the other process is not modelled. */
CUresult cuIpcGetMemHandle(CUipcMemHandle* h, CUdeviceptr p) {
    u64 base;
    u64 size;
    if (!h || !device_range(p, &base, &size)) {
        return E_INVALID_VALUE;
    }
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, &base, sizeof base);
    return OK;
}

CUresult cuMemExportToShareableHandle(void* os_handle, u64 handle, int type, u64 flags) {
    (void)type;
    (void)flags;
    if (!os_handle || !handle) {
        return E_INVALID_VALUE;
    }
    *(int*)os_handle = 3;
    return OK;
}

CUresult cuLaunchKernel_ptsz(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shmem, void* s, void** params,
                             void** extra) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s ? s : (void*)2, params, extra);
}

typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shmem;
    void* stream;
    void* attrs;
    unsigned n_attrs;
} launch_config;

CUresult cuLaunchKernelEx(const launch_config* c, void* f, void** params, void** extra) {
    return cuLaunchKernel(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->shmem, c->stream,
                          params, extra);
}

CUresult cuLaunchKernelEx_ptsz(const launch_config* c, void* f, void** params, void** extra) {
    return cuLaunchKernel_ptsz(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->shmem,
                               c->stream, params, extra);
}

CUresult cuLaunchCooperativeKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned shmem, void* s,
                                   void** params) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}

CUresult cuGraphLaunch_ptsz(void* exec, void* s) {
    return cuGraphLaunch(exec, s ? s : (void*)2);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t w, size_t h, unsigned e) {
    (void)e;
    *pitch = (w + 255) / 256 * 256;
    return cuMemAlloc_v2(p, *pitch * h);
}

CUresult cuModuleLoadFatBinary(void** m, const void* fat) {
    return cuModuleLoadData(m, fat);
}

/* Libraries are modules here, each with a module of its own for the (one) context, distinct
 * from the library handle (cuLibraryGetModule; fake_cuda_library_module_calls() counts the
 * calls). A kernel is the library's function (cuFuncGetModule answers the library); its
 * context's function (cuKernelGetFunction, and what a captured launch by the kernel's handle
 * puts in its graph node) is another function of the same kernel, made once per kernel, whose
 * module is the library's module in the context, as on a real driver. */
#define N_LIBS 256
static void* lib_handle[N_LIBS];
static void* lib_module[N_LIBS];
static int library_module_calls;
#define N_KFN 1024
static void* kfn_kernel[N_KFN];
static void* kfn_func[N_KFN];
static unsigned n_kfn;

CUresult cuLibraryLoadData(void** lib, const void* code, void* jo, void** jv, unsigned nj,
                           void* lo, void** lv, unsigned nl) {
    (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
    CUresult r = cuModuleLoadData(lib, code);
    if (r != OK) {
        return r;
    }
    pthread_mutex_lock(&owners_lock);
    for (int i = 0; i < N_LIBS; ++i) {
        if (!lib_handle[i]) {
            lib_handle[i] = *lib;
            lib_module[i] = calloc(1, sizeof(struct module));
            break;
        }
    }
    pthread_mutex_unlock(&owners_lock);
    return OK;
}

/* Called with owners_lock held: the library's module in the context, NULL if `lib` is none. */
static void* module_of_library(void* lib) {
    for (int i = 0; lib && i < N_LIBS; ++i) {
        if (lib_handle[i] == lib) {
            return lib_module[i];
        }
    }
    return NULL;
}

CUresult cuLibraryGetModule(void** m, void* lib) {
    __atomic_add_fetch(&library_module_calls, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&owners_lock);
    void* mod = module_of_library(lib);
    pthread_mutex_unlock(&owners_lock);
    if (!mod) {
        return E_INVALID_HANDLE;
    }
    *m = mod;
    return OK;
}

int fake_cuda_library_module_calls(void) {
    return __atomic_load_n(&library_module_calls, __ATOMIC_SEQ_CST);
}

CUresult cuLibraryGetKernel(void** k, void* lib, const char* name) {
    return cuModuleGetFunction(k, lib, name);
}

/* The context's function of library kernel `k` (made at the first call), NULL when `k` is not
 * a library's kernel. */
static void* context_function(void* k) {
    void* f = NULL;
    pthread_mutex_lock(&owners_lock);
    for (unsigned i = 0; i < n_kfn && i < N_KFN; ++i) {
        if (kfn_kernel[i] == k) {
            f = kfn_func[i];
        }
    }
    void* ctx_module = NULL;
    for (unsigned i = 0; !f && i < N_OWNERS && i < n_owners; ++i) {
        if (owner_fn[i] == k) {
            ctx_module = module_of_library(owner_mod[i]);
            break;
        }
    }
    if (!f && ctx_module && n_kfn < N_KFN) {
        struct function* fn = calloc(1, sizeof *fn);
        memcpy(fn, k, sizeof *fn);
        f = fn;
        kfn_kernel[n_kfn] = k;
        kfn_func[n_kfn] = f;
        n_kfn++;
        owner_fn[n_owners % N_OWNERS] = f;
        owner_mod[n_owners % N_OWNERS] = ctx_module;
        n_owners++;
        if (is_opaque(k) && n_opaque < 64) {
            opaque[n_opaque++] = f;
        }
    }
    pthread_mutex_unlock(&owners_lock);
    return f;
}

__attribute__((constructor)) static void install_context_functions(void) {
    context_function_of = context_function;
}

CUresult cuKernelGetFunction(void** f, void* k) {
    void* cf = context_function(k);
    *f = cf ? cf : k;
    return OK;
}

CUresult cuLibraryGetGlobal(CUdeviceptr* p, size_t* bytes, void* lib, const char* name) {
    return cuModuleGetGlobal_v2(p, bytes, lib, name);
}

CUresult cuLibraryUnload(void* lib) {
    pthread_mutex_lock(&owners_lock);
    for (int i = 0; i < N_LIBS; ++i) {
        if (lib_handle[i] == lib) {
            lib_handle[i] = NULL;
            free(lib_module[i]);
            lib_module[i] = NULL;
        }
    }
    pthread_mutex_unlock(&owners_lock);
    return cuModuleUnload(lib);
}

/* A 2D memset of 32-bit words, row by row, at once (every stream of the fake is synchronous). */
CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned v, size_t w, size_t h,
                            void* s) {
    for (size_t row = 0; row < h; ++row) {
        CUresult r = cuMemsetD32Async(dst + row * pitch, v, w, s);
        if (r != OK) {
            return r;
        }
    }
    return OK;
}

struct proc {
    const char* name;
    void* plain;
    void* ptsz;
};

CUresult cuGetProcAddress_v2(const char* sym, void** pfn, int ver, unsigned long long flags,
                             int* status);
CUresult cuGetProcAddress(const char* sym, void** pfn, int ver, unsigned long long flags);

static const struct proc procs[] = {
    {"cuLaunchKernel", (void*)cuLaunchKernel, (void*)cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", (void*)cuLaunchKernelEx, (void*)cuLaunchKernelEx_ptsz},
    {"cuMemAlloc", (void*)cuMemAlloc_v2, NULL},
    {"cuMemFree", (void*)cuMemFree_v2, NULL},
    {"cuMemAllocHost", (void*)cuMemAllocHost_v2, NULL},
    {"cuMemHostAlloc", (void*)cuMemHostAlloc, NULL},
    {"cuMemFreeHost", (void*)cuMemFreeHost, NULL},
    {"cuMemAllocManaged", (void*)cuMemAllocManaged, NULL},
    {"cuGetProcAddress", (void*)cuGetProcAddress_v2, NULL},
};

CUresult cuGetProcAddress_v2(const char* sym, void** pfn, int ver, unsigned long long flags,
                             int* status) {
    (void)ver;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; ++i) {
        if (strcmp(procs[i].name, sym) == 0) {
            *pfn = (flags & 2) && procs[i].ptsz ? procs[i].ptsz : procs[i].plain;
            if (status) {
                *status = 0;
            }
            return OK;
        }
    }
    *pfn = NULL;
    if (status) {
        *status = 1;
    }
    return E_NOT_FOUND;
}

CUresult cuGetProcAddress(const char* sym, void** pfn, int ver, unsigned long long flags) {
    return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}
