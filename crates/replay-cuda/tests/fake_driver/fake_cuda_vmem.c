/* Fakes virtual memory: physical handles, address reservations, maps, unmaps, imports. */
#include "fake_cuda_internal.h"

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
int mapped_ok(u64 p, u64 n) {
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
