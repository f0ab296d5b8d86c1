/* Fakes modules: loading, their globals and functions, the kernels' parameter layouts. */
#include "fake_cuda_internal.h"

unsigned char nv_global[8328] __attribute__((aligned(256)));
u64 nv_const[4] = {1, 2, 3, 4};

/* ---- modules and globals -------------------------------------------------------------- */

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

CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
    (void)m;
    struct function* fn = calloc(1, sizeof *fn);
    snprintf(fn->name, sizeof fn->name, "%s", name);
    *f = fn;
    return OK;
}

/* Parameter layouts of the kernels whose parameters are all 8 bytes, and kr_digest_*. */
size_t param_count(const char* n) {
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
