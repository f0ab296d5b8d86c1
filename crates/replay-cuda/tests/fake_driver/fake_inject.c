/*
 * The fake driver with the entries an unmodified application and the interception use:
 * fake_cuda.c (included whole) plus cuGetProcAddress (both forms, answering with this
 * library's own entries, as the real driver does), the _ptsz and Ex launch forms (attributes
 * accepted; a cooperative launch runs like any other), cuLaunchCooperativeKernel,
 * cuFuncGetName / cuKernelGetName / cuKernelGetParamInfo, cuCtxGetDevice, cuMemAllocPitch,
 * cuGraphLaunch_ptsz, cuMemsetD2D32Async, cuModuleLoadFatBinary, the library entries
 * (cuLibraryLoadData, cuLibraryGetKernel, cuKernelGetFunction, cuLibraryGetGlobal,
 * cuLibraryUnload: a library is a module), cuFuncGetModule (the module each function was
 * fetched from), and the injection call of a real driver: cuInit calls InitializeInjection()
 * of the library named in CUDA_INJECTION64_PATH, once. cuKernelGetLibrary is absent, as in
 * drivers before CUDA 12.5.
 *
 * A function fetched as "opaque_NAME" runs kernel NAME but the driver cannot describe its
 * parameters (cuFuncGetParamInfo answers CUDA_ERROR_NOT_SUPPORTED), as for PyTorch's
 * precompiled kernels on a real driver. cuFuncGetName answers kr_rmw's name mangled, as a
 * real driver answers a C++ kernel's.
 *
 * Build with -Wl,-Bsymbolic: the fake's entries call each other directly, as the real
 * driver's do, not through a library loaded in front of it.
 */
#define cuInit fake_base_cuInit
#define cuModuleGetFunction fake_base_cuModuleGetFunction
#define cuFuncGetParamInfo fake_base_cuFuncGetParamInfo
#include "fake_cuda.c"
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

CUresult cuCtxGetDevice(CUdevice* d) {
    *d = 0;
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

/* Libraries are modules here: a kernel is the module's function, its function itself. */
CUresult cuLibraryLoadData(void** lib, const void* code, void* jo, void** jv, unsigned nj,
                           void* lo, void** lv, unsigned nl) {
    (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
    return cuModuleLoadData(lib, code);
}

CUresult cuLibraryGetKernel(void** k, void* lib, const char* name) {
    return cuModuleGetFunction(k, lib, name);
}

CUresult cuKernelGetFunction(void** f, void* k) {
    *f = k;
    return OK;
}

CUresult cuLibraryGetGlobal(CUdeviceptr* p, size_t* bytes, void* lib, const char* name) {
    return cuModuleGetGlobal_v2(p, bytes, lib, name);
}

CUresult cuLibraryUnload(void* lib) {
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
