/* Fakes CUDA arrays, mipmapped arrays, surface objects and tensor maps. */
#include "fake_cuda_internal.h"

/* ---- CUDA arrays, surface objects, tensor maps ----------------------------------------- */
/*
 * An array is host memory of its size (no layout; a 3D array's too, a mipmapped array one
 * array per level); a surface object is a small integer (as on
 * a real driver) naming its array, and kr_surf_rmw(surface, n, k) read-modify-writes the
 * array's first n words through it, as surf2Dread/surf2Dwrite would. A tensor map's 128 bytes
 * hold its address XORed with TMAP_KEY (so no argument word is the address itself, as in a
 * real encoding), its first dimension and its rank; kr_tma(map, n, k) read-modify-writes the
 * first n words of its target.
 */
struct fake_array* surfaces[MAX_SURFACES + 1];

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
