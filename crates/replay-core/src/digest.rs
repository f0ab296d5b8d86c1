//! The reference chunk digest (SPEC §7.4): 128-bit, keyed per run, position-dependent, and
//! built so that a GPU can compute it at memory speed: every 16-byte word is mixed on its own
//! and the results are *summed*, so words can be processed in any order and in parallel (one
//! block per chunk on a device, one pass over the bytes on a host) and still give exactly this
//! value. Host-digest backends and the simulator compute exactly this; device implementations
//! must produce the same value for the same bytes and key (the CUDA backend digests pageable
//! backing on the host and everything else on the device, in one batch).
//!
//! Word `i` of a chunk, as two little-endian 64-bit halves `(lo, hi)`, contributes one 128-bit
//! product of key- and position-salted halves:
//!
//! ```text
//! A += (lo ^ k0 ^ i·C1) × (hi ^ k1 ^ i·C2)      (mod 2^128)
//! ```
//!
//! A tail shorter than 16 bytes is zero-padded; the length enters the final mix, three Feistel
//! rounds keyed by `k2`, `k3` and the length that turn `A` into the 128-bit digest (a bijection
//! of `A` for a given length and key, so it adds no collisions). Swapping two words, or two
//! bytes of one word, changes the salts their bytes meet, so the digest is position-dependent.
//!
//! **Keys.** The four key words are independent: [`random_key`] reads them from the operating
//! system's random source (`/dev/urandom`) once per engine, so the data a kernel writes cannot
//! be chosen against them. [`key_from_seed`] derives four words from a 64-bit seed through
//! SplitMix64 (distinct, well-mixed, but only 64 bits of entropy in all): for reproducible
//! tests, not for the bound below.
//!
//! **Collision probability, per comparison** (one chunk compared with its digest before the
//! pass). The sum is shaped like NH (Black et al., UMAC): a multiply-accumulate of key-masked
//! 64-bit halves. It is not NH, in two ways, and neither is covered by NH's proof:
//!
//! - NH masks by *addition* mod 2^64 (`(lo + k) × (hi + k')`); its lemma, that
//!   `(a + u)(b + v) ≡ (a' + u)(b' + v) + c (mod 2^128)` holds for at most a 2^-64 fraction of
//!   uniform `(u, v)` whenever `(a, b) ≠ (a', b')`, is about that masking. This digest masks by
//!   XOR; we know of no proof of the same bound for `(a ^ u)(b ^ v)`, so even two chunks that
//!   differ in one word are expected, not proven, to collide with probability about 2^-64.
//! - NH draws an independent key word for every half of the message; here every word's key
//!   words are the same `k0, k1` with public position salts, so for chunks that differ in
//!   several words nothing is proven, and data built against the salts collides under every
//!   key: two words `i`, `j` whose high halves XOR to `i·C2 ^ j·C2` meet equal masked high
//!   halves, and flipping the same low bit `t` of both low halves, where bit `t` of
//!   `lo_i ^ lo_j ^ i·C1 ^ j·C1` is set, adds `2^t` to one masked low half and takes it from
//!   the other, so the sum does not change (a test below builds such a pair; additive masking
//!   has the same weakness). The salts make such relations as unlikely in data not built
//!   against them as any other fixed 64-bit coincidence; for such data we expect about 2^-64
//!   per comparison, as an expectation, not a bound.
//!
//! A run that compares `n` changed chunks then misses one with probability about `n`·2^-64
//! (10^6 changed chunks: about 5·10^-14). Under [`key_from_seed`] an adversary who knows the
//! seed can do far better. (An earlier digest's second, independently keyed lane gave about
//! 2^-127; it doubled the multiplies, and one host core then digested at a third of its read
//! speed.)
//!
//! **What a collision costs.** `dirty` restore skips one changed chunk: the next pass starts
//! with that chunk as the previous pass left it, and when that pass is the last one, the
//! application's final memory differs from one execution (digests do decide it: a chunk missed
//! before the last pass changes that pass's inputs). The scope check misses one write outside
//! the scope: nothing undoes it, and later passes (and the final memory) include it.
//!
//! **Speed on a host** (at least 85% of a one-core read). One 64×64→128 product per
//! 16-byte word is what one core's multiplier sustains at about the speed it reads
//! (`BENCHMARKS.md`); `replay-core` has no `unsafe` for SIMD intrinsics, and baseline x86-64
//! has no vector 64-bit multiply. The host loop masks a block of eight words in vector
//! registers (both halves of a word in one register: XOR with the key, XOR with the word's
//! salts, salts advanced by one add) and then multiplies and sums the masked halves on the
//! scalar side into one accumulator ([`blocks`]); an input of 16 MiB or more is also split
//! across threads (`std::thread::scope`, up to the machine's parallelism): the sums are
//! order-free, so the value is the same whichever thread sums which word.

use crate::backend::{Digest128, DigestKey};

/// Position salt of the low half.
pub const C1: u64 = 0x9E37_79B9_7F4A_7C15;
/// Position salt of the high half.
pub const C2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const M1: u64 = 0xFF51_AFD7_ED55_8CCD;
const M2: u64 = 0xC4CE_B9FE_1A85_EC53;

/// The 64-bit finaliser (a bijection) used to derive keys and to finish.
#[inline]
pub fn fmix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(M1);
    x ^= x >> 33;
    x = x.wrapping_mul(M2);
    x ^= x >> 33;
    x
}

/// The four key words (`k0, k1` mask the halves, `k2, k3` key the final rounds): the key's
/// words as they are, since they are drawn independently.
#[inline]
pub fn lane_keys(key: DigestKey) -> [u64; 4] {
    key.0
}

/// Word `i`'s position salts.
#[inline(always)]
fn salts(i: u64) -> [u64; 2] {
    [i.wrapping_mul(C1), i.wrapping_mul(C2)]
}

/// One word's contribution to the sum.
#[inline(always)]
fn word(k: &[u64; 4], i: u64, lo: u64, hi: u64) -> u128 {
    let s = salts(i);
    u128::from(lo ^ k[0] ^ s[0]) * u128::from(hi ^ k[1] ^ s[1])
}

/// Turns the sum and the length into the digest: three Feistel rounds over its two halves,
/// keyed by `k2`, `k3` and the length (a bijection of `a` for a given length and key).
#[inline]
pub fn finish(k: &[u64; 4], a: u128, len: u64) -> Digest128 {
    let (mut x, mut y) = (a as u64, (a >> 64) as u64);
    y ^= fmix(x ^ k[2] ^ len);
    x ^= fmix(y ^ k[3]);
    y ^= fmix(x ^ len.rotate_left(32));
    Digest128((u128::from(x) << 64) | u128::from(y))
}

/// Digest of `data` under `key`.
pub fn digest(key: DigestKey, data: &[u8]) -> Digest128 {
    let mut s = DigestStream::new(key);
    s.update(data);
    s.finish()
}

/// A digest computed over consecutive pieces of one range, for hosts that see the range
/// through a bounded staging buffer: every piece but the last must be a multiple of 16 bytes
/// (whole words), and the result equals [`digest`] of the concatenation.
#[derive(Debug, Clone)]
pub struct DigestStream {
    k: [u64; 4],
    a: u128,
    len: u64,
}

impl DigestStream {
    /// An empty stream under `key`.
    pub fn new(key: DigestKey) -> Self {
        Self {
            k: lane_keys(key),
            a: 0,
            len: 0,
        }
    }

    /// Feeds the next piece.
    ///
    /// # Panics
    ///
    /// If an earlier piece was not a multiple of 16 bytes (the words would be misaligned).
    pub fn update(&mut self, data: &[u8]) {
        assert!(
            self.len % 16 == 0,
            "a digest piece of {} bytes that is not a multiple of 16 was not the last",
            self.len
        );
        let a = sums_parallel(&self.k, self.len / 16, data);
        self.a = self.a.wrapping_add(a);
        self.len += data.len() as u64;
    }

    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was fed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The digest of everything fed.
    pub fn finish(self) -> Digest128 {
        finish(&self.k, self.a, self.len)
    }
}

/// Inputs at least this long are split across threads ([`sums_parallel`]). Shorter ones (the
/// memory layer's default 1 MiB chunks, HSA's 4 MiB staging slices) stay on one thread: on a
/// busy 2-core machine the scope's join waits until every helper was scheduled at least
/// once, which cost a 4 MiB slice more than the second core saved (28–33% of a read threaded,
/// against 73–80% on one thread, same run); one core alone digests at about 80% of its read.
const PARALLEL_MIN_BYTES: usize = 16 << 20;
/// Each thread takes at least this much, so a spawn (tens of microseconds) stays a small part
/// of its share.
const PER_THREAD_MIN_BYTES: usize = 4 << 20;
/// At most this many threads per input.
const MAX_THREADS: usize = 8;

/// Threads for an input of `len` bytes: 1 below [`PARALLEL_MIN_BYTES`], else up to the
/// machine's parallelism, each with at least [`PER_THREAD_MIN_BYTES`].
fn threads_for(len: usize) -> usize {
    if len < PARALLEL_MIN_BYTES {
        return 1;
    }
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = *CORES.get_or_init(|| {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
    });
    cores.min(len / PER_THREAD_MIN_BYTES).max(1)
}

/// Pieces the threads of [`sums_parallel`] take one at a time (a multiple of 16 bytes).
const PIECE_BYTES: usize = 256 << 10;

/// [`sums`] of a large input on several threads (`std::thread::scope`): the calling thread
/// and its helpers take pieces of [`PIECE_BYTES`] from a shared counter until none is left,
/// each summed from its own first word index, and the order-free sums are added. On a busy
/// machine a helper that is not scheduled takes few pieces and the calling thread the rest,
/// so it waits for at most the one piece a helper holds, not for half the input. A helper
/// that cannot be started does nothing; one that failed has its work redone on the calling
/// thread, so the value never depends on them.
fn sums_parallel(k: &[u64; 4], first: u64, data: &[u8]) -> u128 {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = threads_for(data.len());
    if threads <= 1 {
        return sums(k, first, data);
    }
    let pieces = data.len().div_ceil(PIECE_BYTES);
    let next = AtomicUsize::new(0);
    let work = || {
        let mut a = 0u128;
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= pieces {
                return a;
            }
            let start = i * PIECE_BYTES;
            let piece = &data[start..(start + PIECE_BYTES).min(data.len())];
            a = a.wrapping_add(sums(k, first + (start / 16) as u64, piece));
        }
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("kreplay-digest".into())
                    .spawn_scoped(scope, work)
                    .ok()
            })
            .collect();
        let mut a = work();
        for h in helpers {
            match h.join() {
                Ok(x) => a = a.wrapping_add(x),
                // Its pieces are lost: sum everything here instead.
                Err(_) => return sums(k, first, data),
            }
        }
        a
    })
}

/// Words per block of [`blocks`]: eight salt pairs and the key in vector registers leave
/// room for the loads (sixteen pairs and the key did not fit the sixteen registers of
/// baseline x86-64, and were no faster).
const BLOCK_WORDS: usize = 8;

/// The sum of `data`, whose first word is word `first` of its range: whole blocks in
/// [`blocks`], then the tail word by word.
fn sums(k: &[u64; 4], first: u64, data: &[u8]) -> u128 {
    let whole = data.len() / (16 * BLOCK_WORDS) * (16 * BLOCK_WORDS);
    let (body, rest) = data.split_at(whole);
    let mut a = blocks(k, first, body);
    let next = first + (whole / 16) as u64;
    for (i, w) in (next..).zip(rest.chunks(16)) {
        let mut buf = [0u8; 16];
        buf[..w.len()].copy_from_slice(w);
        a = a.wrapping_add(word(k, i, le(&buf[..8]), le(&buf[8..])));
    }
    a
}

/// The sum of `data` (whole blocks of [`BLOCK_WORDS`] words), whose first word is word
/// `first` of its range.
///
/// Fast on one core, in two steps per block of 128 bytes. First every word's two
/// halves XOR the key and XOR the word's salts (one salt pair per position in the block, each
/// advanced by `BLOCK_WORDS·C` per block) into a small buffer: pairs of 64-bit operations,
/// which the compiler does two at a time in vector registers. Then the products, each `mul`
/// reading its operands from that buffer, into one accumulator (an add and an add-with-carry),
/// so the scalar side is left with the multiply and the accumulation. Masking in the same loop
/// as the products, with eight accumulators, ran at 71–82% of a one-core read on the
/// development machine, this shape at 82–102% (`BENCHMARKS.md`). `black_box` keeps the buffer in
/// memory: without it the compiler moves the masked halves from vector to scalar registers
/// one by one, slower than no vectors at all (a hint only; the value does not depend on it).
/// The value is the same sum as [`word`] over every word (the tests check both against a loop
/// of their own).
#[inline(never)]
fn blocks(k: &[u64; 4], first: u64, data: &[u8]) -> u128 {
    let mut s = [[0u64; 2]; BLOCK_WORDS];
    for (i, s) in (first..).zip(s.iter_mut()) {
        *s = salts(i);
    }
    let step = salts(BLOCK_WORDS as u64);
    let mut masked = [[0u64; 2]; BLOCK_WORDS];
    let mut acc = 0u128;
    for blk in data.chunks_exact(16 * BLOCK_WORDS) {
        for ((w, s), x) in blk.chunks_exact(16).zip(&mut s).zip(&mut masked) {
            *x = [le(&w[..8]) ^ k[0] ^ s[0], le(&w[8..]) ^ k[1] ^ s[1]];
            *s = [s[0].wrapping_add(step[0]), s[1].wrapping_add(step[1])];
        }
        for x in std::hint::black_box(&masked) {
            acc = acc.wrapping_add(u128::from(x[0]) * u128::from(x[1]));
        }
    }
    acc
}

#[inline(always)]
fn le(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}

/// SplitMix64's increment and output mix: consecutive outputs of distinct states.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A reproducible key from a seed (tests, reproducible runs): four SplitMix64 outputs, so each
/// key word comes from its own state and no lane's keys are computed from the other's. Only
/// 64 bits of entropy: use [`random_key`] for the bound in the module docs.
pub fn key_from_seed(seed: u64) -> DigestKey {
    let mut s = seed;
    DigestKey([
        splitmix(&mut s),
        splitmix(&mut s),
        splitmix(&mut s),
        splitmix(&mut s),
    ])
}

/// A per-run key of four independent words from the operating system's random source
/// (`/dev/urandom`). Where it cannot be read, falls back (with a warning) to SplitMix64 over
/// the time, the process id, a per-process counter and an address, which is unpredictable
/// enough for data that does not attack the digest but carries no guarantee.
pub fn random_key() -> DigestKey {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    match read {
        Ok(()) => {
            let w =
                |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            DigestKey([w(0), w(1), w(2), w(3)])
        }
        Err(e) => {
            static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            log::warn!(
                "[kernel-replay] /dev/urandom could not be read ({e}); digest keys come from the time and process id"
            );
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let local = 0u8;
            let addr = std::ptr::addr_of!(local) as u64;
            let seed = fmix(nanos) ^ fmix(u64::from(std::process::id()) ^ n.rotate_left(17)) ^ addr;
            key_from_seed(seed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_and_position_dependent() {
        let k = key_from_seed(1);
        let mut a = vec![0u8; 64];
        a[0] = 1;
        let mut b = vec![0u8; 64];
        b[16] = 1; // the same word content, at another position
        assert_ne!(digest(k, &a), digest(k, &b));
        let mut c = vec![0u8; 64];
        c[1] = 1; // a byte permutation inside the word
        assert_ne!(digest(k, &a), digest(k, &c));
        assert_ne!(digest(k, &a), digest(key_from_seed(2), &a));
        assert_eq!(digest(k, &a), digest(k, &a.clone()));
        // Length matters even for zero tails.
        assert_ne!(digest(k, &[0u8; 15]), digest(k, &[0u8; 16]));
        // Swapping the two halves of a word changes it.
        let mut d = vec![0u8; 16];
        d[0] = 7;
        let mut e = vec![0u8; 16];
        e[8] = 7;
        assert_ne!(digest(k, &d), digest(k, &e));
    }

    #[test]
    fn every_key_word_matters() {
        for seed in [0u64, 1, 42, u64::MAX] {
            let mut words = lane_keys(key_from_seed(seed)).to_vec();
            words.sort_unstable();
            words.dedup();
            assert_eq!(words.len(), 4, "seed {seed}: four distinct key words");
        }
        // k0, k1 mask the halves; k2, k3 key the final rounds: changing any one changes it.
        let data = [0x5au8; 64];
        let base = DigestKey([1, 2, 3, 4]);
        for w in 0..4 {
            let mut other = base;
            other.0[w] ^= 1 << 17;
            assert_ne!(digest(base, &data), digest(other, &data), "key word {w}");
        }
        // Keys from the OS source differ from run to run (here: from call to call).
        assert_ne!(random_key(), random_key());
    }

    #[test]
    fn words_may_be_summed_in_any_order() {
        // What a parallel implementation relies on: the sum is order-free.
        let k = lane_keys(key_from_seed(9));
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut parts: Vec<u128> = data
            .chunks_exact(16)
            .enumerate()
            .map(|(i, w)| {
                word(
                    &k,
                    i as u64,
                    u64::from_le_bytes(w[..8].try_into().unwrap()),
                    u64::from_le_bytes(w[8..].try_into().unwrap()),
                )
            })
            .collect();
        parts.reverse();
        let a = parts.iter().fold(0u128, |a, x| a.wrapping_add(*x));
        assert_eq!(
            finish(&k, a, data.len() as u64),
            digest(key_from_seed(9), &data)
        );
    }

    /// The definition, one word at a time: what the GPU kernels compute too.
    fn reference(key: DigestKey, data: &[u8]) -> Digest128 {
        let k = lane_keys(key);
        let mut a = 0u128;
        for (i, w) in data.chunks(16).enumerate() {
            let mut buf = [0u8; 16];
            buf[..w.len()].copy_from_slice(w);
            a = a.wrapping_add(word(&k, i as u64, le(&buf[..8]), le(&buf[8..])));
        }
        finish(&k, a, data.len() as u64)
    }

    /// The formula written out on its own (not through `word`, `salts`, `finish` or the
    /// module's constants), one word at a time: what any implementation must equal.
    fn by_hand(k: [u64; 4], data: &[u8]) -> Digest128 {
        let (c1, c2) = (0x9E37_79B9_7F4A_7C15u64, 0xC2B2_AE3D_27D4_EB4Fu64);
        let mix = |mut x: u64| {
            x ^= x >> 33;
            x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
            x ^= x >> 33;
            x = x.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
            x ^ (x >> 33)
        };
        let mut a = 0u128;
        for (i, w) in data.chunks(16).enumerate() {
            let mut buf = [0u8; 16];
            buf[..w.len()].copy_from_slice(w);
            let i = i as u64;
            let lo = u64::from_le_bytes(buf[..8].try_into().unwrap());
            let hi = u64::from_le_bytes(buf[8..].try_into().unwrap());
            let lo = lo ^ k[0] ^ i.wrapping_mul(c1);
            let hi = hi ^ k[1] ^ i.wrapping_mul(c2);
            a = a.wrapping_add(u128::from(lo) * u128::from(hi));
        }
        let len = data.len() as u64;
        let (mut x, mut y) = (a as u64, (a >> 64) as u64);
        y ^= mix(x ^ k[2] ^ len);
        x ^= mix(y ^ k[3]);
        y ^= mix(x ^ len.rotate_left(32));
        Digest128((u128::from(x) << 64) | u128::from(y))
    }

    /// The fixed key of the known answers (also in the CUDA kernels' port test and in
    /// `cuda_bench check`'s `digest_equivalence`, which pin the same numbers).
    const FIXED: [u64; 4] = [
        0x0123_4567_89ab_cdef,
        0xfedc_ba98_7654_3210,
        0x0f1e_2d3c_4b5a_6978,
        0x8796_a5b4_c3d2_e1f0,
    ];

    /// `len` bytes of a fixed pattern.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(37)).collect()
    }

    #[test]
    fn the_digest_is_one_salted_product_per_word_and_keyed_feistel_rounds() {
        // The formula with a known answer, so any implementation that computes
        // something else (the former second product per word, another masking) fails. The
        // pinned values are what `by_hand` gives; the CUDA kernels' ports and the GPU check
        // pin the same numbers.
        let data = pattern(40);
        let want = Digest128(0x4872_6157_823f_4751_6142_3ed6_fb1f_c720);
        assert_eq!(by_hand(FIXED, &data), want);
        assert_eq!(digest(DigestKey(FIXED), &data), want);
        assert_eq!(
            digest(DigestKey(FIXED), &[]),
            Digest128(0xf224_7794_99d0_141d_ecd8_59ea_fcdb_53d8)
        );
        // The final rounds are a bijection: distinct sums give distinct digests.
        assert_ne!(finish(&FIXED, 1, 16), finish(&FIXED, 2, 16));
        assert_ne!(finish(&FIXED, 1 << 64, 16), finish(&FIXED, 1, 16));
    }

    #[test]
    fn data_built_against_the_public_salts_collides_under_every_key() {
        // What the module docs say is not proven, shown: words 0 and 1 whose high halves
        // differ by C2 (XOR) meet equal masked high halves under every key, and flipping bit
        // 0 of both low halves, where bit 0 of lo0 ^ lo1 ^ C1 is set, adds 1 to one masked
        // low half and takes 1 from the other.
        let hi0 = 77u64;
        let words = |lo0: u64, lo1: u64| {
            let mut d = Vec::with_capacity(32);
            for (lo, hi) in [(lo0, hi0), (lo1, hi0 ^ C2)] {
                d.extend_from_slice(&lo.to_le_bytes());
                d.extend_from_slice(&hi.to_le_bytes());
            }
            d
        };
        assert_eq!((4 ^ 8 ^ C1) & 1, 1);
        let (a, b) = (words(4, 8), words(5, 9));
        assert_ne!(a, b);
        for seed in 0..64 {
            let key = key_from_seed(seed);
            assert_eq!(digest(key, &a), digest(key, &b), "seed {seed}");
        }
    }

    #[test]
    fn the_host_loop_equals_the_formula_for_every_length_to_257_and_across_threads() {
        // The fast loop (blocks masked in a buffer, then multiplied; the tail word by
        // word; threads over large inputs) against the per-word loop of `by_hand`.
        let data = pattern(257 + 16);
        for len in 0..=257 {
            for start in [0usize, 16] {
                let d = &data[start..start + len];
                assert_eq!(
                    digest(DigestKey(FIXED), d),
                    by_hand(FIXED, d),
                    "len {len} at word {}",
                    start / 16
                );
            }
        }
        // A multi-MiB buffer, split across threads where the machine has more than one
        // core, and the same bytes as a stream of staging-sized pieces.
        let mut x = 0x1234_5678_9abc_def0u64;
        let big: Vec<u8> = (0..PARALLEL_MIN_BYTES + (3 << 20) + 21)
            .map(|_| {
                x = fmix(x.wrapping_add(C1));
                x as u8
            })
            .collect();
        let want = by_hand(FIXED, &big);
        assert_eq!(digest(DigestKey(FIXED), &big), want);
        let mut s = DigestStream::new(DigestKey(FIXED));
        for p in big.chunks(4 << 20) {
            s.update(p);
        }
        assert_eq!(s.finish(), want);
    }

    #[test]
    fn the_blocked_digest_equals_the_word_by_word_definition() {
        let key = key_from_seed(77);
        let mut x = 0x1234_5678_9abc_def0u64;
        let data: Vec<u8> = (0..40_000)
            .map(|_| {
                x = fmix(x.wrapping_add(C1));
                x as u8
            })
            .collect();
        // Every length around the block size, tails of every size, and long inputs.
        let lens = (0..=3 * 16 * BLOCK_WORDS + 17).chain([4096, 4097, 12_345, 40_000]);
        for len in lens {
            for start in [0usize, 16, 48, 7] {
                let d = &data[start..start + len.min(data.len() - start)];
                assert_eq!(
                    digest(key, d),
                    reference(key, d),
                    "len {} at {start}",
                    d.len()
                );
            }
        }
        // A stream whose pieces start at odd word positions within a block.
        let mut s = DigestStream::new(key);
        for p in data[..10_000].chunks(16 * 3) {
            s.update(p);
        }
        assert_eq!(s.finish(), reference(key, &data[..10_000]));
    }

    #[test]
    fn large_inputs_split_across_threads_give_the_same_digest() {
        let key = key_from_seed(5);
        let data: Vec<u8> = (0..PARALLEL_MIN_BYTES + (3 << 20) + 21)
            .map(|i: usize| (i * 131 / 7) as u8)
            .collect();
        assert!(threads_for(data.len()) >= 1);
        for (first, len) in [
            (0u64, data.len()),
            (3, 1 << 20),
            (1 << 40, PARALLEL_MIN_BYTES + 5),
            (7, PARALLEL_MIN_BYTES + PIECE_BYTES - 16),
        ] {
            let d = &data[..len];
            assert_eq!(
                sums_parallel(&lane_keys(key), first, d),
                sums(&lane_keys(key), first, d),
                "first {first}, {len} bytes"
            );
        }
        assert_eq!(digest(key, &data), reference(key, &data));
    }

    #[test]
    fn a_stream_of_whole_word_pieces_equals_the_one_shot_digest() {
        let key = key_from_seed(42);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for piece in [16, 32, 48, 160, 992] {
            let mut s = DigestStream::new(key);
            for p in data.chunks(piece) {
                s.update(p);
            }
            assert_eq!(s.len(), 1000);
            assert_eq!(s.finish(), digest(key, &data), "pieces of {piece}");
        }
        assert!(DigestStream::new(key).is_empty());
        assert_eq!(DigestStream::new(key).finish(), digest(key, &[]));
    }

    #[test]
    #[should_panic(expected = "not a multiple of 16")]
    fn a_misaligned_piece_before_the_last_is_refused() {
        let mut s = DigestStream::new(key_from_seed(1));
        s.update(&[0u8; 20]);
        s.update(&[0u8; 16]);
    }
}
