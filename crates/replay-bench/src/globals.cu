// Module-scope variables for the module-variable check (compiled at run time with NVRTC).
typedef unsigned long long u64;
typedef unsigned int u32;

__device__ u64 kr_counter;
__device__ u64 kr_table[1024];
static __device__ u64 kr_hidden[16];
__constant__ u64 kr_const[4] = {1ULL, 2ULL, 3ULL, 4ULL};

extern "C" __global__ void kr_globals(u64 k) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 1024) {
        kr_table[i] = kr_table[i] * 3ULL + k + kr_const[i & 3];
    }
    if (i < 16) {
        kr_hidden[i] = kr_hidden[i] * 5ULL + (u64)i + 1ULL;
    }
    if (i == 0) {
        kr_counter = kr_counter + 1ULL;
    }
}

// Reads the static variable back (it has no name the driver resolves from the host).
extern "C" __global__ void kr_hidden_read(u64* out) {
    u32 i = threadIdx.x;
    if (i < 16) {
        out[i] = kr_hidden[i];
    }
}
