/* Fakes allocations (device, managed, pool, host), host registration and pointer queries. */
#include "fake_cuda_internal.h"

struct alloc* allocs;

static unsigned char* arena;
static u64 arena_next;

static u64 round_up(u64 x, u64 a) {
    return (x + a - 1) / a * a;
}

CUresult do_alloc_kind(void** out, u64 size, int device, int kind) {
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

CUresult do_free(void* p) {
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

CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total) {
    pthread_mutex_lock(&lock);
    *free_b = mem_total - mem_used;
    *total = mem_total;
    pthread_mutex_unlock(&lock);
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
