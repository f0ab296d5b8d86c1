/* Fakes kernel launches: the tests' and the benchmark's kernels run by name in C. */
#include "fake_cuda_internal.h"

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

CUresult run_kernel(void* f, unsigned gx, unsigned bx, void* s, void** params) {
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

/* Runs at once (every stream's work runs at once here). */
CUresult cuLaunchHostFunc(void* s, void (*fn)(void*), void* data) {
    CUresult r = submit_to(S(s));
    if (r != OK) {
        return r == CAPTURED ? E_CAPTURE_UNSUPPORTED : r;
    }
    fn(data);
    return OK;
}
