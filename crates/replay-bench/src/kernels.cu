// Kernels of the CUDA benchmark and correctness run (compiled at run time with NVRTC).
typedef unsigned long long u64;
typedef unsigned int u32;

struct alignas(16) KbWord { u64 lo; u64 hi; };

__device__ __forceinline__ u64 kb_mix(u64 x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    x ^= x >> 33;
    return x;
}

__device__ __forceinline__ u64 kb_tid() {
    return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ u64 kb_stride() {
    return (u64)gridDim.x * blockDim.x;
}

// A deterministic pattern: p[i] = mix(seed ^ i * golden).
extern "C" __global__ void kr_fill(u64* p, u64 n, u64 seed) {
    for (u64 i = kb_tid(); i < n; i += kb_stride()) {
        p[i] = kb_mix(seed ^ (i * 0x9E3779B97F4A7C15ULL));
    }
}

// The read-modify-write kernel under test: not idempotent, so a pass on unrestored input
// gives a different result.
extern "C" __global__ void kr_rmw(u64* p, u64 n, u64 k) {
    for (u64 i = kb_tid(); i < n; i += kb_stride()) {
        p[i] = p[i] * 6364136223846793005ULL + (k ^ i);
    }
}

// Streaming read (the read-bandwidth ceiling for digests).
extern "C" __global__ void kr_read(const KbWord* p, u64 n, u64* sink) {
    u64 acc = 0;
    for (u64 i = kb_tid(); i < n; i += kb_stride()) {
        KbWord w = p[i];
        acc ^= w.lo + w.hi;
    }
    if (acc == 0x0123456789ABCDEFULL) {
        sink[0] = acc;
    }
}

// Writes through a pointer stored in device memory (outside an `arguments` scope).
extern "C" __global__ void kr_indirect(u64* const* holder, u64 n, u64 k) {
    u64* q = holder[0];
    for (u64 i = kb_tid(); i < n; i += kb_stride()) {
        q[i] = q[i] * 3ULL + k;
    }
}

// Spins for `ns` nanoseconds of the global timer, then bumps flag[0].
extern "C" __global__ void kr_spin(u64 ns, u64* flag) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        u64 t0;
        u64 t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        t = t0;
        while (t - t0 < ns) {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        }
        flag[0] = flag[0] + 1ULL;
    }
}

// A tiny kernel: one read-modify-write of one word.
extern "C" __global__ void kr_tiny(u64* p) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        p[0] = p[0] * 3ULL + 1ULL;
    }
}
