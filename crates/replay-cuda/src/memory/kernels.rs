//! Device code of the backend: the chunk digest of SPEC §7.4 as CUDA C, compiled at run time
//! with NVRTC (no `nvcc` anywhere).
//!
//! It reproduces [`replay_core::digest::digest`] bit for bit (a batch mixes both: pageable
//! backing is digested on the host, the rest here). That reference is a *sum*: word `i`
//! (16 bytes, halves `lo`/`hi`) adds `(lo ^ k0 ^ i·C1) × (hi ^ k1 ^ i·C2)` to a 128-bit sum `A`
//! (mod 2^128), with the key words from [`replay_core::digest::lane_keys`]; a short tail is
//! zero-padded; `finish(A, len)` (three Feistel rounds keyed by `k2`, `k3` and the length)
//! gives the digest. Sums are order-free, so the device computes them in parallel:
//!
//! - The host splits each digest op into **segments** ([`plan`]): an op no longer than the
//!   segment size ([`segment_bytes`]: about [`TARGET_BLOCKS`] segments per batch, at least
//!   [`MIN_SEGMENT`]) is one segment; a longer op becomes several, each starting at a multiple
//!   of 16 bytes of the op, with the global word index of its first word.
//! - `kr_digest_seg`: **one block of [`BLOCK`] threads per segment**. Each thread accumulates
//!   the products of its strided words (four 16-byte loads in flight, position salts advanced
//!   by additions) into a 128-bit sum held as a `(lo, hi)` u64 pair (`__umul64hi` for the
//!   high half, carries by comparison); a warp-shuffle and shared-memory reduction gives the
//!   block's sum; thread 0 applies `finish` when the op is one segment, or stores the partial
//!   sum (16 bytes) otherwise.
//! - `kr_digest_fin`: one warp per op of several segments (launched only when there is
//!   one): each lane adds a strided share of its segments' partial sums, a warp shuffle adds
//!   the lanes', lane 0 applies `finish` (a thread per op would load a long op's hundreds of
//!   partial sums one after another).
//!
//! The segment table is read, and the results written, by the kernels directly in mapped
//! pinned host memory: one batch is one launch (two with split ops) and one event, with no
//! table upload and no result download. Any address alignment works (16-byte loads when the
//! segment is 16-byte aligned, 8-byte loads when 8-byte aligned, bytes otherwise), and any
//! length (the tail word is zero-padded, as in the reference).
//!
//! The same module holds `kr_copy` ([`COPY_KERNEL`]), a gather copy: one block per piece
//! ([`copy_pieces`], at most [`COPY_PIECE`] bytes, never crossing an op) of a table in mapped
//! pinned memory, with the widest word both ends and the length are aligned to. A batch of
//! many small device-to-device copies (an application's module variables: a thousand runs of a
//! few KiB) is then one launch instead of one `cuMemcpyAsync` each, whose host cost per call
//! outweighs such a copy (`BENCHMARKS.md`, "Cost per dispatch on real programs").
//!
//! The tests below port both kernels to Rust line by line (threads and warps simulated in
//! loops) and check them against the reference on many lengths, alignments and segment sizes;
//! the GPU correctness run compares device digests with the reference on bytes copied back.

use replay_core::DigestKey;

/// Name of the per-segment kernel.
pub const DIGEST_SEG: &str = "kr_digest_seg";
/// Name of the kernel that finishes ops of several segments.
pub const DIGEST_FIN: &str = "kr_digest_fin";
/// Threads per block of `kr_digest_seg` (the source assumes it: `KR_THREADS`).
pub const BLOCK: u32 = 256;
/// Threads per block of `kr_digest_fin` (whole warps: one warp per op).
pub const FIN_BLOCK: u32 = 128;
/// Threads per op of `kr_digest_fin`: one warp.
pub const FIN_LANES: u32 = 32;
/// A batch is split into about this many segments (enough blocks to fill an H200 several
/// times over).
pub const TARGET_BLOCKS: u64 = 4096;
/// The smallest segment an op is split into.
pub const MIN_SEGMENT: u64 = 64 << 10;

/// One segment as `kr_digest_seg` reads it (32 bytes, `KrSeg`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    /// Device address of the segment's first byte.
    pub addr: u64,
    /// Bytes in the segment.
    pub len: u64,
    /// Word index (within the op) of the segment's first word.
    pub base: u64,
    /// The op's index in the batch.
    pub op: u32,
    /// How many segments the op has (1: the block finishes the op itself).
    pub nseg: u32,
}

/// One op of several segments as `kr_digest_fin` reads it (32 bytes, `KrFin`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fin {
    /// Index of the op's first segment (its segments are consecutive).
    pub first: u64,
    /// Number of segments.
    pub nseg: u64,
    /// The op's length in bytes.
    pub len: u64,
    /// The op's index in the batch.
    pub op: u64,
}

/// The segment size for a batch of `total` bytes: about [`TARGET_BLOCKS`] segments, at least
/// [`MIN_SEGMENT`], a multiple of 16 KiB.
pub fn segment_bytes(total: u64) -> u64 {
    (total / TARGET_BLOCKS)
        .next_multiple_of(16 << 10)
        .max(MIN_SEGMENT)
}

/// Splits ops `(addr, len)` into segments of at most `seg` bytes (rounded down to a multiple
/// of 16, at least 16) and lists the ops of several segments.
pub fn plan(ops: &[(u64, u64)], seg: u64) -> (Vec<Seg>, Vec<Fin>) {
    let seg = (seg & !15).max(16);
    let mut segs = Vec::with_capacity(ops.len());
    let mut fins = Vec::new();
    for (i, &(addr, len)) in ops.iter().enumerate() {
        let nseg = len.div_ceil(seg).max(1);
        let nseg32 = u32::try_from(nseg).expect("fewer than 2^32 segments per op");
        if nseg > 1 {
            fins.push(Fin {
                first: segs.len() as u64,
                nseg,
                len,
                op: i as u64,
            });
        }
        for j in 0..nseg {
            let off = j * seg;
            segs.push(Seg {
                addr: addr + off,
                len: seg.min(len - off),
                base: off / 16,
                op: i as u32,
                nseg: nseg32,
            });
        }
    }
    (segs, fins)
}

/// The four lane key words the kernels take, from the run's key.
pub fn kernel_keys(key: DigestKey) -> [u64; 4] {
    replay_core::digest::lane_keys(key)
}

/// Name of the gather-copy kernel in [`DIGEST_SOURCE`].
pub const COPY_KERNEL: &str = "kr_copy";
/// Device-to-device copies of at most this many bytes go through [`COPY_KERNEL`] (one launch
/// for the whole batch) rather than one `cuMemcpyAsync` each: below it a call's few
/// microseconds of host cost outweigh the copy (an application's images hold a thousand small
/// module-variable runs, captured on every dispatch).
pub const KERNEL_COPY_MAX: u64 = 1 << 20;
/// The pieces [`COPY_KERNEL`]'s blocks copy: one block per piece of at most this many bytes.
pub const COPY_PIECE: u64 = 64 << 10;

/// One piece as `kr_copy` reads it (32 bytes, `KrCopy`): both ends are device addresses
/// inside one op's ends, so a piece never crosses an allocation.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyPiece {
    /// Source device address.
    pub src: u64,
    /// Destination device address.
    pub dst: u64,
    /// Bytes.
    pub len: u64,
    /// Unused (keeps the entry 32 bytes).
    pub pad: u64,
}

/// Splits device-to-device copies `(src, dst, len)` into pieces of at most [`COPY_PIECE`]
/// bytes, each inside its op.
pub fn copy_pieces(ops: &[(u64, u64, u64)]) -> Vec<CopyPiece> {
    let mut out = Vec::with_capacity(ops.len());
    for &(src, dst, len) in ops {
        let mut off = 0;
        while off < len {
            let l = COPY_PIECE.min(len - off);
            out.push(CopyPiece {
                src: src + off,
                dst: dst + off,
                len: l,
                pad: 0,
            });
            off += l;
        }
    }
    out
}

/// CUDA C source of the digest kernels (no includes: NVRTC compiles it as it is).
pub const DIGEST_SOURCE: &str = r#"
typedef unsigned long long u64;
typedef unsigned int u32;

#define KR_THREADS 256
#define KR_C1 0x9E3779B97F4A7C15ULL
#define KR_C2 0xC2B2AE3D27D4EB4FULL
#define KR_M1 0xFF51AFD7ED558CCDULL
#define KR_M2 0xC4CEB9FE1A85EC53ULL

struct KrSeg { u64 addr; u64 len; u64 base; u32 op; u32 nseg; };
struct KrFin { u64 first; u64 nseg; u64 len; u64 op; };

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

/* (hi:lo) += (hi2:lo2) mod 2^128 */
__device__ __forceinline__ void kr_add128(u64& lo, u64& hi, u64 lo2, u64 hi2) {
    u64 l = lo + lo2;
    hi += hi2 + (l < lo ? 1ULL : 0ULL);
    lo = l;
}

/* (hi:lo) += a * b mod 2^128 */
__device__ __forceinline__ void kr_mac(u64& lo, u64& hi, u64 a, u64 b) {
    kr_add128(lo, hi, a * b, __umul64hi(a, b));
}

/* The sum; s1, s2 are the word's position salts i*C1, i*C2. */
struct KrAcc { u64 alo; u64 ahi; };

__device__ __forceinline__ void kr_word(KrAcc& c, u64 lo, u64 hi, u64 k0, u64 k1, u64 s1,
                                        u64 s2) {
    kr_mac(c.alo, c.ahi, lo ^ k0 ^ s1, hi ^ k1 ^ s2);
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

/* Three Feistel rounds over the sum's halves, keyed by k2, k3 and the length. */
__device__ __forceinline__ void kr_finish(u64 alo, u64 ahi, u64 len, u64 k2, u64 k3, u64* out,
                                          u64 op) {
    u64 x = alo;
    u64 y = ahi;
    y ^= kr_fmix(x ^ k2 ^ len);
    x ^= kr_fmix(y ^ k3);
    y ^= kr_fmix(x ^ kr_rotl(len, 32));
    out[2 * op] = x;
    out[2 * op + 1] = y;
}

__device__ __forceinline__ void kr_shfl_add(KrAcc& c, int o) {
    u64 alo = __shfl_down_sync(0xffffffffu, c.alo, o);
    u64 ahi = __shfl_down_sync(0xffffffffu, c.ahi, o);
    kr_add128(c.alo, c.ahi, alo, ahi);
}

/* One block of KR_THREADS threads per segment. */
extern "C" __global__ void __launch_bounds__(KR_THREADS)
kr_digest_seg(const KrSeg* segs, u64 nsegs, u64 k0, u64 k1, u64 k2, u64 k3, u64* partials,
              u64* out) {
    __shared__ KrSeg sg;
    __shared__ u64 red[KR_THREADS / 32][2];
    u64 s = blockIdx.x;
    if (s >= nsegs) {
        return;
    }
    u32 t = threadIdx.x;
    if (t == 0) {
        sg = segs[s];
    }
    __syncthreads();
    const u64 addr = sg.addr;
    const u64 len = sg.len;
    const u64 base = sg.base;
    const u64 n = len >> 4;
    KrAcc c = {0, 0};
    /* Word w of the segment is word base + w of the op; its salts advance by additions. */
    u64 w = t;
    u64 i = base + w;
    u64 s1 = i * KR_C1, s2 = i * KR_C2;
    const u64 d1 = (u64)KR_THREADS * KR_C1, d2 = (u64)KR_THREADS * KR_C2;
    if ((addr & 15ULL) == 0) {
        const ulonglong2* q = (const ulonglong2*)addr;
        for (; w + 3 * KR_THREADS < n; w += 4 * KR_THREADS) {
            ulonglong2 v0 = __ldg(&q[w]);
            ulonglong2 v1 = __ldg(&q[w + KR_THREADS]);
            ulonglong2 v2 = __ldg(&q[w + 2 * KR_THREADS]);
            ulonglong2 v3 = __ldg(&q[w + 3 * KR_THREADS]);
            kr_word(c, v0.x, v0.y, k0, k1, s1, s2);
            s1 += d1; s2 += d2;
            kr_word(c, v1.x, v1.y, k0, k1, s1, s2);
            s1 += d1; s2 += d2;
            kr_word(c, v2.x, v2.y, k0, k1, s1, s2);
            s1 += d1; s2 += d2;
            kr_word(c, v3.x, v3.y, k0, k1, s1, s2);
            s1 += d1; s2 += d2;
        }
        for (; w < n; w += KR_THREADS) {
            ulonglong2 v = __ldg(&q[w]);
            kr_word(c, v.x, v.y, k0, k1, s1, s2);
            s1 += d1; s2 += d2;
        }
    } else if ((addr & 7ULL) == 0) {
        const u64* q = (const u64*)addr;
        for (; w < n; w += KR_THREADS) {
            u64 lo = __ldg(&q[2 * w]);
            u64 hi = __ldg(&q[2 * w + 1]);
            kr_word(c, lo, hi, k0, k1, s1, s2);
            s1 += d1; s2 += d2;
        }
    } else {
        const unsigned char* p = (const unsigned char*)addr;
        for (; w < n; w += KR_THREADS) {
            u64 lo;
            u64 hi;
            kr_load_bytes(p + w * 16, 16, lo, hi);
            kr_word(c, lo, hi, k0, k1, s1, s2);
            s1 += d1; s2 += d2;
        }
    }
    u32 rem = (u32)(len & 15ULL);
    if (t == 0 && rem != 0) {
        u64 lo;
        u64 hi;
        kr_load_bytes((const unsigned char*)addr + n * 16, rem, lo, hi);
        u64 j = base + n;
        kr_word(c, lo, hi, k0, k1, j * KR_C1, j * KR_C2);
    }
    for (int o = 16; o > 0; o >>= 1) {
        kr_shfl_add(c, o);
    }
    u32 lane = t & 31;
    u32 warp = t >> 5;
    if (lane == 0) {
        red[warp][0] = c.alo;
        red[warp][1] = c.ahi;
    }
    __syncthreads();
    if (warp != 0) {
        return;
    }
    if (lane < KR_THREADS / 32) {
        c.alo = red[lane][0];
        c.ahi = red[lane][1];
    } else {
        c.alo = 0;
        c.ahi = 0;
    }
    for (int o = 16; o > 0; o >>= 1) {
        kr_shfl_add(c, o);
    }
    if (lane == 0) {
        if (sg.nseg == 1) {
            kr_finish(c.alo, c.ahi, len, k2, k3, out, sg.op);
        } else {
            partials[2 * s] = c.alo;
            partials[2 * s + 1] = c.ahi;
        }
    }
}

/* One thread per op of several segments: adds their partial sums and finishes. */
/* One warp per op of several segments (the block holds whole warps, so a warp shares its op):
   each lane adds a strided share of the op's partial sums, the warp adds the lanes' (the sum
   is order-free), lane 0 finishes. A thread per op would wait out hundreds of dependent
   loads for a long op. */
extern "C" __global__ void kr_digest_fin(const KrFin* fins, u64 nfins, u64 k2, u64 k3,
                                         const u64* partials, u64* out) {
    u64 f = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    u32 lane = threadIdx.x & 31;
    if (f >= nfins) {
        return;
    }
    KrFin e = fins[f];
    KrAcc c = {0, 0};
    for (u64 j = lane; j < e.nseg; j += 32) {
        const u64* p = partials + 2 * (e.first + j);
        kr_add128(c.alo, c.ahi, p[0], p[1]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        kr_shfl_add(c, o);
    }
    if (lane == 0) {
        kr_finish(c.alo, c.ahi, e.len, k2, k3, out, e.op);
    }
}

struct KrCopy { u64 src; u64 dst; u64 len; u64 pad; };

/* One block per piece: the widest word both ends and the length are aligned to. */
extern "C" __global__ void __launch_bounds__(KR_THREADS)
kr_copy(const KrCopy* pieces, u64 npieces) {
    u64 b = blockIdx.x;
    if (b >= npieces) {
        return;
    }
    const KrCopy c = pieces[b];
    const u64 a = c.src | c.dst | c.len;
    const u64 t = threadIdx.x;
    if ((a & 15ULL) == 0) {
        const ulonglong2* p = (const ulonglong2*)c.src;
        ulonglong2* q = (ulonglong2*)c.dst;
        for (u64 i = t; i < (c.len >> 4); i += KR_THREADS) {
            q[i] = p[i];
        }
    } else if ((a & 7ULL) == 0) {
        const u64* p = (const u64*)c.src;
        u64* q = (u64*)c.dst;
        for (u64 i = t; i < (c.len >> 3); i += KR_THREADS) {
            q[i] = p[i];
        }
    } else if ((a & 3ULL) == 0) {
        const u32* p = (const u32*)c.src;
        u32* q = (u32*)c.dst;
        for (u64 i = t; i < (c.len >> 2); i += KR_THREADS) {
            q[i] = p[i];
        }
    } else {
        const unsigned char* p = (const unsigned char*)c.src;
        unsigned char* q = (unsigned char*)c.dst;
        for (u64 i = t; i < c.len; i += KR_THREADS) {
            q[i] = p[i];
        }
    }
}
"#;

#[cfg(test)]
mod copy_tests {
    use super::*;

    #[test]
    fn pieces_cover_each_op_exactly_and_never_cross_one() {
        let ops = [
            (0x1000, 0x9000, 10),
            (0x2000, 0xa000, 2 * COPY_PIECE + 3),
            (0x50, 0x60, 0),
        ];
        let p = copy_pieces(&ops);
        assert_eq!(p.len(), 1 + 3);
        assert_eq!((p[0].src, p[0].dst, p[0].len), (0x1000, 0x9000, 10));
        assert_eq!((p[1].src, p[1].dst, p[1].len), (0x2000, 0xa000, COPY_PIECE));
        assert_eq!(p[2].src, 0x2000 + COPY_PIECE);
        assert_eq!(p[2].dst, 0xa000 + COPY_PIECE);
        assert_eq!(p[3].len, 3);
        assert_eq!(
            p.iter().map(|c| c.len).sum::<u64>(),
            10 + 2 * COPY_PIECE + 3
        );
        assert_eq!(std::mem::size_of::<CopyPiece>(), 32);
    }

    #[test]
    fn the_copy_kernel_is_in_the_source_with_its_table_layout() {
        assert!(DIGEST_SOURCE.contains(&format!(
            "void __launch_bounds__(KR_THREADS)\n{COPY_KERNEL}("
        )));
        assert!(DIGEST_SOURCE.contains("struct KrCopy { u64 src; u64 dst; u64 len; u64 pad; };"));
    }
}

#[cfg(test)]
mod tests {
    //! Line-by-line Rust ports of the two kernels (threads and warps simulated), checked
    //! against the reference digest.

    use super::*;
    use replay_core::digest::{digest, key_from_seed};
    use replay_core::Digest128;

    const C1: u64 = 0x9E37_79B9_7F4A_7C15;
    const C2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const M1: u64 = 0xFF51_AFD7_ED55_8CCD;
    const M2: u64 = 0xC4CE_B9FE_1A85_EC53;
    const T: u64 = BLOCK as u64;

    /// Simulated device memory: `bytes` at address `BASE` (16-byte aligned).
    const BASE: u64 = 0x7f00_0000_0000;
    struct Mem<'a>(&'a [u8]);
    impl Mem<'_> {
        fn u64_at(&self, addr: u64) -> u64 {
            assert_eq!(addr % 8, 0, "aligned load");
            let o = (addr - BASE) as usize;
            u64::from_le_bytes(self.0[o..o + 8].try_into().unwrap())
        }
        fn byte(&self, addr: u64) -> u8 {
            self.0[(addr - BASE) as usize]
        }
    }

    fn fmix(mut x: u64) -> u64 {
        x ^= x >> 33;
        x = x.wrapping_mul(M1);
        x ^= x >> 33;
        x = x.wrapping_mul(M2);
        x ^= x >> 33;
        x
    }
    fn rotl(x: u64, r: u32) -> u64 {
        x.rotate_left(r)
    }
    fn umul64hi(a: u64, b: u64) -> u64 {
        ((u128::from(a) * u128::from(b)) >> 64) as u64
    }
    /// `kr_add128`.
    fn add128(lo: &mut u64, hi: &mut u64, lo2: u64, hi2: u64) {
        let l = lo.wrapping_add(lo2);
        *hi = hi.wrapping_add(hi2).wrapping_add(u64::from(l < *lo));
        *lo = l;
    }
    /// `kr_mac`.
    fn mac(lo: &mut u64, hi: &mut u64, a: u64, b: u64) {
        add128(lo, hi, a.wrapping_mul(b), umul64hi(a, b));
    }
    #[derive(Clone, Copy, Default)]
    struct Acc {
        alo: u64,
        ahi: u64,
    }
    /// `kr_word`.
    fn word(c: &mut Acc, lo: u64, hi: u64, k: &[u64; 4], s: [u64; 2]) {
        mac(&mut c.alo, &mut c.ahi, lo ^ k[0] ^ s[0], hi ^ k[1] ^ s[1]);
    }
    fn load_bytes(m: &Mem<'_>, p: u64, n: u32) -> (u64, u64) {
        let (mut lo, mut hi) = (0u64, 0u64);
        for j in 0..n {
            let b = u64::from(m.byte(p + u64::from(j)));
            if j < 8 {
                lo |= b << (8 * j);
            } else {
                hi |= b << (8 * (j - 8));
            }
        }
        (lo, hi)
    }
    /// `kr_finish`: writes `(x, y)` = (high, low) at `out[2 op..]`.
    fn finish(c: Acc, len: u64, k2: u64, k3: u64, out: &mut [u64], op: u64) {
        let mut x = c.alo;
        let mut y = c.ahi;
        y ^= fmix(x ^ k2 ^ len);
        x ^= fmix(y ^ k3);
        y ^= fmix(x ^ rotl(len, 32));
        out[2 * op as usize] = x;
        out[2 * op as usize + 1] = y;
    }
    /// `kr_shfl_add` over a warp's 32 lanes: lane l adds lane l+o (lanes past 31 read their
    /// own value, which `__shfl_down_sync` returns; only lane 0's result is used).
    fn shfl_add(lanes: &mut [Acc; 32], o: usize) {
        let snapshot = *lanes;
        for (l, c) in lanes.iter_mut().enumerate() {
            let src = if l + o < 32 {
                snapshot[l + o]
            } else {
                snapshot[l]
            };
            add128(&mut c.alo, &mut c.ahi, src.alo, src.ahi);
        }
    }
    fn warp_reduce(lanes: &mut [Acc; 32]) -> Acc {
        let mut o = 16;
        while o > 0 {
            shfl_add(lanes, o);
            o >>= 1;
        }
        lanes[0]
    }

    /// `kr_digest_seg`, one block (its threads simulated in a loop).
    fn seg_port(
        m: &Mem<'_>,
        sg: &Seg,
        s: usize,
        k: &[u64; 4],
        partials: &mut [u64],
        out: &mut [u64],
    ) {
        let (addr, len, base) = (sg.addr, sg.len, sg.base);
        let n = len >> 4;
        let mut threads = vec![Acc::default(); T as usize];
        for t in 0..T {
            let c = &mut threads[t as usize];
            let mut w = t;
            let i = base + w;
            let mut st = [i.wrapping_mul(C1), i.wrapping_mul(C2)];
            let d = [T.wrapping_mul(C1), T.wrapping_mul(C2)];
            let adv = |st: &mut [u64; 2]| {
                for j in 0..2 {
                    st[j] = st[j].wrapping_add(d[j]);
                }
            };
            if addr & 15 == 0 {
                let q = |w: u64| (m.u64_at(addr + 16 * w), m.u64_at(addr + 16 * w + 8));
                while w + 3 * T < n {
                    let v = [q(w), q(w + T), q(w + 2 * T), q(w + 3 * T)];
                    for (lo, hi) in v {
                        word(c, lo, hi, k, st);
                        adv(&mut st);
                    }
                    w += 4 * T;
                }
                while w < n {
                    let (lo, hi) = q(w);
                    word(c, lo, hi, k, st);
                    adv(&mut st);
                    w += T;
                }
            } else if addr & 7 == 0 {
                while w < n {
                    let lo = m.u64_at(addr + 8 * (2 * w));
                    let hi = m.u64_at(addr + 8 * (2 * w + 1));
                    word(c, lo, hi, k, st);
                    adv(&mut st);
                    w += T;
                }
            } else {
                while w < n {
                    let (lo, hi) = load_bytes(m, addr + w * 16, 16);
                    word(c, lo, hi, k, st);
                    adv(&mut st);
                    w += T;
                }
            }
            let rem = (len & 15) as u32;
            if t == 0 && rem != 0 {
                let (lo, hi) = load_bytes(m, addr + n * 16, rem);
                let j = base + n;
                word(c, lo, hi, k, [j.wrapping_mul(C1), j.wrapping_mul(C2)]);
            }
        }
        let mut red = Vec::new();
        for warp in threads.chunks_exact(32) {
            let mut lanes: [Acc; 32] = warp.try_into().unwrap();
            red.push(warp_reduce(&mut lanes));
        }
        let mut lanes = [Acc::default(); 32];
        lanes[..red.len()].copy_from_slice(&red);
        let c = warp_reduce(&mut lanes);
        if sg.nseg == 1 {
            finish(c, len, k[2], k[3], out, u64::from(sg.op));
        } else {
            partials[2 * s..2 * s + 2].copy_from_slice(&[c.alo, c.ahi]);
        }
    }

    /// `kr_digest_fin`, one warp (its lanes simulated in a loop).
    fn fin_port(e: &Fin, k2: u64, k3: u64, partials: &[u64], out: &mut [u64]) {
        let mut lanes = [Acc::default(); 32];
        for (lane, c) in lanes.iter_mut().enumerate() {
            let mut j = lane as u64;
            while j < e.nseg {
                let p = &partials[2 * (e.first + j) as usize..];
                add128(&mut c.alo, &mut c.ahi, p[0], p[1]);
                j += 32;
            }
        }
        let c = warp_reduce(&mut lanes);
        finish(c, e.len, k2, k3, out, e.op);
    }

    /// A batch as the backend runs it: plan, one block per segment, then the finishers.
    fn batch_port(m: &Mem<'_>, key: DigestKey, ops: &[(u64, u64)], seg: u64) -> Vec<Digest128> {
        let k = kernel_keys(key);
        let (segs, fins) = plan(ops, seg);
        let mut partials = vec![0u64; 2 * segs.len()];
        let mut out = vec![0u64; 2 * ops.len()];
        for (s, sg) in segs.iter().enumerate() {
            seg_port(m, sg, s, &k, &mut partials, &mut out);
        }
        for e in &fins {
            fin_port(e, k[2], k[3], &partials, &mut out);
        }
        (0..ops.len())
            .map(|i| Digest128((u128::from(out[2 * i]) << 64) | u128::from(out[2 * i + 1])))
            .collect()
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
        let data = bytes((1 << 20) + 4096, 3);
        let m = Mem(&data);
        let lens = [
            0u64, 1, 7, 8, 15, 16, 17, 31, 32, 33, 100, 127, 128, 129, 255, 256, 257, 511, 512,
            513, 1000, 4096, 4099, 8191, 16_384, 16_400, 65_536, 65_541, 200_003,
        ];
        for &len in &lens {
            for off in [0u64, 1, 3, 8, 12, 16, 24] {
                let want = digest(key, &data[off as usize..(off + len) as usize]);
                for seg in [16u64, 48, 4096, 16 << 10, 1 << 20] {
                    if len / seg > 2_000 {
                        continue; // slow in a simulated block
                    }
                    let got = batch_port(&m, key, &[(BASE + off, len)], seg);
                    assert_eq!(got[0], want, "len {len} offset {off} segment {seg}");
                }
            }
        }
        // A full default chunk, and a batch of many ops of mixed alignment.
        let mib = &data[..1 << 20];
        assert_eq!(
            batch_port(&m, key, &[(BASE, 1 << 20)], segment_bytes(1 << 20)),
            vec![digest(key, mib)]
        );
        let ops: Vec<(u64, u64)> = (0..64u64)
            .map(|i| (BASE + i * 16_411 % 7919, 1000 + i * 977))
            .collect();
        let want: Vec<Digest128> = ops
            .iter()
            .map(|&(a, l)| digest(key, &data[(a - BASE) as usize..(a - BASE + l) as usize]))
            .collect();
        assert_eq!(batch_port(&m, key, &ops, 4096), want);
        assert_eq!(batch_port(&m, key, &ops, 1 << 20), want);
    }

    #[test]
    fn the_ports_give_the_pinned_answer() {
        // The known answer of `replay_core::digest`'s own test (a fixed key, 40 bytes
        // `i * 37`), here through the ports of the kernels, in one segment and split; the GPU
        // check (`cuda_bench check`, `digest_equivalence`) pins the same number on the device.
        let key = DigestKey([
            0x0123_4567_89ab_cdef,
            0xfedc_ba98_7654_3210,
            0x0f1e_2d3c_4b5a_6978,
            0x8796_a5b4_c3d2_e1f0,
        ]);
        let data: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(37)).collect();
        let m = Mem(&data);
        let want = Digest128(0x4872_6157_823f_4751_6142_3ed6_fb1f_c720);
        for seg in [16u64, 32, 4096] {
            assert_eq!(batch_port(&m, key, &[(BASE, 40)], seg), vec![want], "{seg}");
        }
    }

    #[test]
    fn planning() {
        assert_eq!(segment_bytes(0), MIN_SEGMENT);
        assert_eq!(segment_bytes(4 << 30), 1 << 20);
        assert_eq!(segment_bytes(100 << 30), 25 << 20);
        let (segs, fins) = plan(&[(0x1000, 0), (0x2000, 100), (0x3001, 250)], 96);
        assert_eq!(segs.len(), 1 + 2 + 3);
        assert_eq!(
            segs[0],
            Seg {
                addr: 0x1000,
                len: 0,
                base: 0,
                op: 0,
                nseg: 1
            }
        );
        assert_eq!(
            (segs[2].addr, segs[2].len, segs[2].base),
            (0x2000 + 96, 4, 6)
        );
        assert_eq!(
            (segs[5].addr, segs[5].len, segs[5].base),
            (0x3001 + 192, 58, 12)
        );
        assert_eq!(
            fins,
            vec![
                Fin {
                    first: 1,
                    nseg: 2,
                    len: 100,
                    op: 1
                },
                Fin {
                    first: 3,
                    nseg: 3,
                    len: 250,
                    op: 2
                }
            ]
        );
        assert_eq!(std::mem::size_of::<Seg>(), 32);
        assert_eq!(std::mem::size_of::<Fin>(), 32);
    }

    #[test]
    fn source_names_the_kernels_and_uses_no_includes() {
        assert!(DIGEST_SOURCE.contains(&format!("{DIGEST_SEG}(")));
        assert!(DIGEST_SOURCE.contains(&format!("void {DIGEST_FIN}(")));
        assert!(DIGEST_SOURCE.contains(&format!("#define KR_THREADS {BLOCK}")));
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
