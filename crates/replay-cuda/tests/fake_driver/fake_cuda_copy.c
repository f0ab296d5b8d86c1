/* Fakes copies and memsets, checked against the device allocations around them. */
#include "fake_cuda_internal.h"

/* The device allocation (or module variable) around p: 1 and its bounds, or 0 (host memory). */
int device_range(u64 p, u64* base, u64* size) {
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
int end_ok(u64 p, u64 n) {
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
