//! The reference chunk digest (SPEC §7.4): 128-bit, keyed per run, position-dependent, folded
//! over 16-byte words in address order. Host-digest backends and the simulator compute exactly
//! this; device implementations must produce the same value for the same bytes and key.
//!
//! Each 8-byte lane of word `i` is salted with the key and `i`, passed through a 64-bit
//! finaliser (a bijection), and folded into its own 64-bit accumulator by rotate-multiply, so a
//! permutation of words or bytes changes the result. The two accumulators use independent keys.
//! Treating the output as uniform, two different chunks collide with probability about 2^-128
//! per comparison; a collision would make `dirty` restore skip one changed chunk (a wrong input
//! for the next pass), or the scope check miss one write outside the scope.

use crate::backend::{Digest128, DigestKey};

const C1: u64 = 0x9E37_79B9_7F4A_7C15;
const C2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const M1: u64 = 0xFF51_AFD7_ED55_8CCD;
const M2: u64 = 0xC4CE_B9FE_1A85_EC53;

#[inline]
fn fmix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(M1);
    x ^= x >> 33;
    x = x.wrapping_mul(M2);
    x ^= x >> 33;
    x
}

/// Digest of `data` under `key`.
pub fn digest(key: DigestKey, data: &[u8]) -> Digest128 {
    let [k0, k1] = key.0;
    let len = data.len() as u64;
    let mut h1 = k0 ^ fmix(len.wrapping_add(C1));
    let mut h2 = k1 ^ fmix(len.wrapping_add(C2));
    let mut words = data.chunks_exact(16);
    let mut i: u64 = 0;
    let mut step = |lo: u64, hi: u64, i: u64| {
        let a = fmix(lo ^ k0 ^ i.wrapping_mul(C1));
        let b = fmix(hi ^ k1 ^ i.wrapping_mul(C2));
        h1 = (h1 ^ a).rotate_left(31).wrapping_mul(C1).wrapping_add(b);
        h2 = (h2 ^ b).rotate_left(27).wrapping_mul(C2).wrapping_add(a);
    };
    for w in words.by_ref() {
        let lo = u64::from_le_bytes(w[..8].try_into().expect("8 bytes"));
        let hi = u64::from_le_bytes(w[8..].try_into().expect("8 bytes"));
        step(lo, hi, i);
        i += 1;
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 16];
        buf[..rest.len()].copy_from_slice(rest);
        let lo = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
        let hi = u64::from_le_bytes(buf[8..].try_into().expect("8 bytes"));
        step(lo, hi, i);
    }
    let a = fmix(h1 ^ h2.rotate_left(17));
    let b = fmix(h2 ^ a);
    Digest128((u128::from(a) << 64) | u128::from(b))
}

/// A per-run key from a seed (the process id and time at start, or a test's constant).
pub fn key_from_seed(seed: u64) -> DigestKey {
    DigestKey([fmix(seed ^ C1), fmix(seed.rotate_left(32) ^ C2)])
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
    }
}
