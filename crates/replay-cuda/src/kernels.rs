//! Device code of the backend: the chunk digest of SPEC §7.4 as CUDA C, compiled at run time
//! with NVRTC (no `nvcc` anywhere).
//!
//! It reproduces [`replay_core::digest::digest`] bit for bit. That reference folds the 16-byte
//! words of a chunk *sequentially* (`h1 = rotl(h1 ^ a, 31) * C1 + b`, ...), so one chunk's fold
//! is a serial chain of about 65 536 steps per MiB; only the per-word mixing (`a`, `b`: two
//! `fmix` finalisers, most of the arithmetic) is independent across words. Two kernels:
//!
//! - `kr_digest_warp`: **one block of 32 threads per chunk**. Each lane loads one word of the
//!   next 32 (one coalesced 512-byte load) and mixes it; the fold then takes the 32 mixed pairs
//!   from the lanes by shuffle, in word order. Latency per chunk ≈ the serial chain only, the
//!   best choice when there are fewer chunks than the GPU has warp slots.
//! - `kr_digest_thread`: **one thread per chunk**, 64 chunks per block; each thread mixes and
//!   folds its own chunk, loads double-buffered 128 bytes ahead. Every issued instruction
//!   serves 32 chunks, so throughput is several times higher once there are thousands of
//!   chunks (a dirty-restore comparison or a scope check over gigabytes).
//!
//! [`select`] chooses by the number of digests ([`THREAD_KERNEL_MIN_OPS`]); the environment
//! variable `KREPLAY_CUDA_DIGEST=warp|thread` forces one. Both handle any address alignment
//! (unaligned words are read byte by byte) and any length (the tail word is zero-padded, as
//! in the reference). Inputs: a table of `{addr, len}` pairs and the 128-bit key; output: two
//! 64-bit words per digest, `(high, low)`.
//!
//! The tests below port both kernels' index arithmetic to Rust line by line (lanes simulated
//! in a loop) and check them against the reference on many lengths and alignments; the GPU
//! correctness run compares device digests with the reference on bytes copied back.

/// Name of the warp-per-chunk kernel.
pub const DIGEST_WARP: &str = "kr_digest_warp";
/// Name of the thread-per-chunk kernel.
pub const DIGEST_THREAD: &str = "kr_digest_thread";
/// Threads per block of the thread-per-chunk kernel.
pub const THREAD_BLOCK: u32 = 64;
/// From this many digests in one batch on, the thread-per-chunk kernel is used.
pub const THREAD_KERNEL_MIN_OPS: usize = 1536;

/// Which digest kernel a batch uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum DigestKernel {
    /// One 32-thread block per chunk.
    Warp,
    /// One thread per chunk.
    Thread,
}

/// A forced choice from `KREPLAY_CUDA_DIGEST`, read once.
pub fn forced_kernel() -> Option<DigestKernel> {
    static F: std::sync::OnceLock<Option<DigestKernel>> = std::sync::OnceLock::new();
    *F.get_or_init(|| match std::env::var("KREPLAY_CUDA_DIGEST").as_deref() {
        Ok("warp") => Some(DigestKernel::Warp),
        Ok("thread") => Some(DigestKernel::Thread),
        Ok("auto") | Err(_) => None,
        Ok(other) => {
            log::warn!(
                "[kernel-replay] KREPLAY_CUDA_DIGEST={other:?} is not warp, thread or auto; using auto"
            );
            None
        }
    })
}

/// The kernel for a batch of `ops` digests.
pub fn select(ops: usize, forced: Option<DigestKernel>) -> DigestKernel {
    forced.unwrap_or(if ops >= THREAD_KERNEL_MIN_OPS {
        DigestKernel::Thread
    } else {
        DigestKernel::Warp
    })
}

/// CUDA C source of both digest kernels (no includes: NVRTC compiles it as it is).
pub const DIGEST_SOURCE: &str = r#"
typedef unsigned long long u64;
typedef unsigned int u32;

#define KR_C1 0x9E3779B97F4A7C15ULL
#define KR_C2 0xC2B2AE3D27D4EB4FULL
#define KR_M1 0xFF51AFD7ED558CCDULL
#define KR_M2 0xC4CEB9FE1A85EC53ULL

struct KrOp { u64 addr; u64 len; };
struct alignas(16) KrWord { u64 lo; u64 hi; };

__device__ __forceinline__ u64 kr_fmix(u64 x) {
    x ^= x >> 33;
    x *= KR_M1;
    x ^= x >> 33;
    x *= KR_M2;
    x ^= x >> 33;
    return x;
}

__device__ __forceinline__ u64 kr_rotl(u64 x, int r) {
    return (x << r) | (x >> (64 - r));
}

/* Reads n (<= 16) bytes at p into a zero-padded little-endian word. */
__device__ __forceinline__ void kr_load_bytes(const unsigned char* p, u32 n, u64& lo, u64& hi) {
    lo = 0;
    hi = 0;
    for (u32 j = 0; j < n; ++j) {
        u64 b = (u64)p[j];
        if (j < 8) {
            lo |= b << (8 * j);
        } else {
            hi |= b << (8 * (j - 8));
        }
    }
}

__device__ __forceinline__ void kr_fold(u64& h1, u64& h2, u64 a, u64 b) {
    h1 = kr_rotl(h1 ^ a, 31) * KR_C1 + b;
    h2 = kr_rotl(h2 ^ b, 27) * KR_C2 + a;
}

__device__ __forceinline__ void kr_step(u64& h1, u64& h2, u64 lo, u64 hi, u64 i, u64 k0, u64 k1) {
    u64 a = kr_fmix(lo ^ k0 ^ (i * KR_C1));
    u64 b = kr_fmix(hi ^ k1 ^ (i * KR_C2));
    kr_fold(h1, h2, a, b);
}

__device__ __forceinline__ void kr_finish(u64 h1, u64 h2, u64* out, u32 op) {
    u64 a = kr_fmix(h1 ^ kr_rotl(h2, 17));
    u64 b = kr_fmix(h2 ^ a);
    out[2 * (u64)op] = a;
    out[2 * (u64)op + 1] = b;
}

/* One block of 32 threads per digest. */
extern "C" __global__ void kr_digest_warp(const KrOp* ops, u32 n, u64 k0, u64 k1, u64* out) {
    u32 op = blockIdx.x;
    if (op >= n) {
        return;
    }
    u32 lane = threadIdx.x;
    const unsigned char* p = (const unsigned char*)ops[op].addr;
    u64 len = ops[op].len;
    u64 nfull = len >> 4;
    bool aligned = (ops[op].addr & 15ULL) == 0;
    u64 h1 = k0 ^ kr_fmix(len + KR_C1);
    u64 h2 = k1 ^ kr_fmix(len + KR_C2);
    for (u64 base = 0; base < nfull; base += 32) {
        u64 w = base + lane;
        u64 a = 0;
        u64 b = 0;
        if (w < nfull) {
            u64 lo;
            u64 hi;
            if (aligned) {
                KrWord v = ((const KrWord*)p)[w];
                lo = v.lo;
                hi = v.hi;
            } else {
                kr_load_bytes(p + w * 16, 16, lo, hi);
            }
            a = kr_fmix(lo ^ k0 ^ (w * KR_C1));
            b = kr_fmix(hi ^ k1 ^ (w * KR_C2));
        }
        u64 left = nfull - base;
        u32 cnt = left < 32 ? (u32)left : 32u;
        for (u32 j = 0; j < cnt; ++j) {
            u64 aj = __shfl_sync(0xffffffffu, a, (int)j);
            u64 bj = __shfl_sync(0xffffffffu, b, (int)j);
            kr_fold(h1, h2, aj, bj);
        }
    }
    if (lane == 0) {
        u32 rem = (u32)(len & 15ULL);
        if (rem != 0) {
            u64 lo;
            u64 hi;
            kr_load_bytes(p + nfull * 16, rem, lo, hi);
            kr_step(h1, h2, lo, hi, nfull, k0, k1);
        }
        kr_finish(h1, h2, out, op);
    }
}

/* One thread per digest. */
extern "C" __global__ void kr_digest_thread(const KrOp* ops, u32 n, u64 k0, u64 k1, u64* out) {
    u32 op = blockIdx.x * blockDim.x + threadIdx.x;
    if (op >= n) {
        return;
    }
    const unsigned char* p = (const unsigned char*)ops[op].addr;
    u64 len = ops[op].len;
    u64 nfull = len >> 4;
    u64 h1 = k0 ^ kr_fmix(len + KR_C1);
    u64 h2 = k1 ^ kr_fmix(len + KR_C2);
    u64 w = 0;
    if ((ops[op].addr & 15ULL) == 0) {
        const KrWord* q = (const KrWord*)p;
        if (nfull >= 8) {
            KrWord cur[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                cur[j] = q[j];
            }
            for (; w + 8 <= nfull; w += 8) {
                KrWord nxt[8];
                bool more = w + 16 <= nfull;
                if (more) {
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        nxt[j] = q[w + 8 + j];
                    }
                }
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    kr_step(h1, h2, cur[j].lo, cur[j].hi, w + j, k0, k1);
                }
                if (more) {
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        cur[j] = nxt[j];
                    }
                }
            }
        }
        for (; w < nfull; ++w) {
            KrWord v = q[w];
            kr_step(h1, h2, v.lo, v.hi, w, k0, k1);
        }
    } else {
        for (; w < nfull; ++w) {
            u64 lo;
            u64 hi;
            kr_load_bytes(p + w * 16, 16, lo, hi);
            kr_step(h1, h2, lo, hi, w, k0, k1);
        }
    }
    u32 rem = (u32)(len & 15ULL);
    if (rem != 0) {
        u64 lo;
        u64 hi;
        kr_load_bytes(p + nfull * 16, rem, lo, hi);
        kr_step(h1, h2, lo, hi, nfull, k0, k1);
    }
    kr_finish(h1, h2, out, op);
}
"#;

#[cfg(test)]
mod tests {
    //! Line-by-line Rust ports of the two kernels, checked against the reference digest.

    use super::*;
    use replay_core::digest::{digest, key_from_seed};
    use replay_core::{Digest128, DigestKey};

    const C1: u64 = 0x9E37_79B9_7F4A_7C15;
    const C2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const M1: u64 = 0xFF51_AFD7_ED55_8CCD;
    const M2: u64 = 0xC4CE_B9FE_1A85_EC53;

    fn fmix(mut x: u64) -> u64 {
        x ^= x >> 33;
        x = x.wrapping_mul(M1);
        x ^= x >> 33;
        x = x.wrapping_mul(M2);
        x ^= x >> 33;
        x
    }
    /// `kr_rotl`: `(x << r) | (x >> (64 - r))`.
    fn rotl(x: u64, r: u32) -> u64 {
        x.rotate_left(r)
    }
    fn load_bytes(p: &[u8], n: usize) -> (u64, u64) {
        let (mut lo, mut hi) = (0u64, 0u64);
        for (j, &byte) in p.iter().enumerate().take(n) {
            let b = u64::from(byte);
            if j < 8 {
                lo |= b << (8 * j);
            } else {
                hi |= b << (8 * (j - 8));
            }
        }
        (lo, hi)
    }
    fn fold(h1: &mut u64, h2: &mut u64, a: u64, b: u64) {
        *h1 = rotl(*h1 ^ a, 31).wrapping_mul(C1).wrapping_add(b);
        *h2 = rotl(*h2 ^ b, 27).wrapping_mul(C2).wrapping_add(a);
    }
    #[allow(clippy::too_many_arguments)]
    fn step(h1: &mut u64, h2: &mut u64, lo: u64, hi: u64, i: u64, k0: u64, k1: u64) {
        let a = fmix(lo ^ k0 ^ i.wrapping_mul(C1));
        let b = fmix(hi ^ k1 ^ i.wrapping_mul(C2));
        fold(h1, h2, a, b);
    }
    fn finish(h1: u64, h2: u64) -> Digest128 {
        let a = fmix(h1 ^ rotl(h2, 17));
        let b = fmix(h2 ^ a);
        Digest128((u128::from(a) << 64) | u128::from(b))
    }
    /// A word as the aligned path loads it (`KrWord`: lo then hi, little-endian).
    fn word(p: &[u8], w: u64) -> (u64, u64) {
        let o = w as usize * 16;
        (
            u64::from_le_bytes(p[o..o + 8].try_into().unwrap()),
            u64::from_le_bytes(p[o + 8..o + 16].try_into().unwrap()),
        )
    }

    /// `kr_digest_warp` with its 32 lanes simulated.
    fn warp_port(key: DigestKey, p: &[u8], aligned: bool) -> Digest128 {
        let [k0, k1] = key.0;
        let len = p.len() as u64;
        let nfull = len >> 4;
        let mut h1 = k0 ^ fmix(len.wrapping_add(C1));
        let mut h2 = k1 ^ fmix(len.wrapping_add(C2));
        let mut base = 0u64;
        while base < nfull {
            let mut a = [0u64; 32];
            let mut b = [0u64; 32];
            for lane in 0..32u64 {
                let w = base + lane;
                if w < nfull {
                    let (lo, hi) = if aligned {
                        word(p, w)
                    } else {
                        load_bytes(&p[w as usize * 16..], 16)
                    };
                    a[lane as usize] = fmix(lo ^ k0 ^ w.wrapping_mul(C1));
                    b[lane as usize] = fmix(hi ^ k1 ^ w.wrapping_mul(C2));
                }
            }
            let left = nfull - base;
            let cnt = if left < 32 { left as u32 } else { 32 };
            for j in 0..cnt {
                fold(&mut h1, &mut h2, a[j as usize], b[j as usize]);
            }
            base += 32;
        }
        let rem = (len & 15) as usize;
        if rem != 0 {
            let (lo, hi) = load_bytes(&p[nfull as usize * 16..], rem);
            step(&mut h1, &mut h2, lo, hi, nfull, k0, k1);
        }
        finish(h1, h2)
    }

    /// `kr_digest_thread`, one thread.
    fn thread_port(key: DigestKey, p: &[u8], aligned: bool) -> Digest128 {
        let [k0, k1] = key.0;
        let len = p.len() as u64;
        let nfull = len >> 4;
        let mut h1 = k0 ^ fmix(len.wrapping_add(C1));
        let mut h2 = k1 ^ fmix(len.wrapping_add(C2));
        let mut w = 0u64;
        if aligned {
            if nfull >= 8 {
                let mut cur: [(u64, u64); 8] = core::array::from_fn(|j| word(p, j as u64));
                while w + 8 <= nfull {
                    let mut nxt = [(0u64, 0u64); 8];
                    let more = w + 16 <= nfull;
                    if more {
                        for (j, n) in nxt.iter_mut().enumerate() {
                            *n = word(p, w + 8 + j as u64);
                        }
                    }
                    for (j, c) in cur.iter().enumerate() {
                        step(&mut h1, &mut h2, c.0, c.1, w + j as u64, k0, k1);
                    }
                    if more {
                        cur = nxt;
                    }
                    w += 8;
                }
            }
            while w < nfull {
                let (lo, hi) = word(p, w);
                step(&mut h1, &mut h2, lo, hi, w, k0, k1);
                w += 1;
            }
        } else {
            while w < nfull {
                let (lo, hi) = load_bytes(&p[w as usize * 16..], 16);
                step(&mut h1, &mut h2, lo, hi, w, k0, k1);
                w += 1;
            }
        }
        let rem = (len & 15) as usize;
        if rem != 0 {
            let (lo, hi) = load_bytes(&p[nfull as usize * 16..], rem);
            step(&mut h1, &mut h2, lo, hi, nfull, k0, k1);
        }
        finish(h1, h2)
    }

    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn ports_match_the_reference() {
        let key = key_from_seed(0x5eed);
        let lens = [
            0usize, 1, 7, 8, 15, 16, 17, 31, 32, 33, 100, 127, 128, 129, 255, 256, 257, 511, 512,
            513, 1000, 4096, 4099, 8191, 65_536, 65_541,
        ];
        for &n in &lens {
            let data = bytes(n, n as u64 + 1);
            let want = digest(key, &data);
            for aligned in [true, false] {
                assert_eq!(warp_port(key, &data, aligned), want, "warp, {n} bytes");
                assert_eq!(thread_port(key, &data, aligned), want, "thread, {n} bytes");
            }
        }
        // A full default chunk.
        let mib = bytes(1 << 20, 9);
        assert_eq!(thread_port(key, &mib, true), digest(key, &mib));
        assert_eq!(warp_port(key, &mib, true), digest(key, &mib));
    }

    #[test]
    fn selection() {
        assert_eq!(select(1, None), DigestKernel::Warp);
        assert_eq!(select(THREAD_KERNEL_MIN_OPS - 1, None), DigestKernel::Warp);
        assert_eq!(select(THREAD_KERNEL_MIN_OPS, None), DigestKernel::Thread);
        assert_eq!(select(1, Some(DigestKernel::Thread)), DigestKernel::Thread);
    }

    #[test]
    fn source_names_the_kernels_and_uses_no_includes() {
        assert!(DIGEST_SOURCE.contains(&format!("void {DIGEST_WARP}(")));
        assert!(DIGEST_SOURCE.contains(&format!("void {DIGEST_THREAD}(")));
        assert!(!DIGEST_SOURCE.contains("#include"));
        // The constants are the reference's.
        for c in [
            "9E3779B97F4A7C15",
            "C2B2AE3D27D4EB4F",
            "FF51AFD7ED558CCD",
            "C4CEB9FE1A85EC53",
        ] {
            assert!(DIGEST_SOURCE.contains(c), "{c}");
        }
    }
}
