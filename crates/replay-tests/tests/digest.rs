//! Digest properties (SPEC §7.4, issue 4) of `replay_core::digest::digest`, the reference chunk
//! digest that host backends and the simulator compute and device implementations must match:
//!
//! - a permutation of a chunk's bytes changes the digest;
//! - a single flipped bit, at any position, changes it;
//! - equal content at different positions changes it: the same bytes placed at another offset
//!   within the chunk, and two different sub-blocks swapped (the fold is ordered).
//!
//! "Position" is within the digested bytes: a chunk's digest does not mix in the chunk's
//! address, so two chunks of equal content at different chunk indices have equal digests. That
//! is sound because `dirty` restore and the scope check compare each chunk with the *same*
//! chunk's earlier digest, in a fixed order; the end-to-end tests at the bottom show that a
//! permutation inside a chunk and a swap of two chunks are both caught and restored.

use proptest::prelude::*;
use replay_core::digest::{digest, key_from_seed};
use replay_core::{DigestKey, MemoryClass, Outcome, Policy, Reason, RestoreMode};
use replay_mock::{KernArgs, Kernel, KernelCtx, KernelError};
use replay_tests::{
    assert_matches_reference, assert_outcome, fast_policy, finish, grid, reference, runtime,
    ToolScript, A0,
};

fn key() -> DigestKey {
    key_from_seed(0x00D1_6E57)
}

fn chunk(len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), len..=len)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Swapping two different bytes anywhere in the chunk.
    #[test]
    fn a_permutation_within_a_chunk_changes_the_digest(
        data in chunk(4096),
        i in 0usize..4096,
        j in 0usize..4096,
    ) {
        prop_assume!(data[i] != data[j]);
        let mut p = data.clone();
        p.swap(i, j);
        prop_assert_ne!(digest(key(), &data), digest(key(), &p));
    }

    /// Rotations and reversal: every byte moves.
    #[test]
    fn moving_every_byte_changes_the_digest(data in chunk(1024), by in 1usize..1024) {
        let mut r = data.clone();
        r.rotate_left(by);
        prop_assume!(r != data);
        prop_assert_ne!(digest(key(), &data), digest(key(), &r));
        let mut rev = data.clone();
        rev.reverse();
        prop_assume!(rev != data);
        prop_assert_ne!(digest(key(), &data), digest(key(), &rev));
    }

    /// One bit, anywhere, in chunks of any length (partial last words included).
    #[test]
    fn a_single_flipped_bit_at_any_position_changes_the_digest(
        len in 1usize..=4096,
        seed in any::<u64>(),
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let data: Vec<u8> = (0..len)
            .map(|i| (seed.rotate_left(i as u32 % 64) ^ i as u64) as u8)
            .collect();
        let pos = at.index(len);
        let mut f = data.clone();
        f[pos] ^= 1 << bit;
        prop_assert_ne!(digest(key(), &data), digest(key(), &f), "bit {} of byte {}", bit, pos);
    }

    /// The same bytes at two different offsets of an otherwise equal chunk.
    #[test]
    fn the_same_bytes_at_another_position_in_the_chunk_change_the_digest(
        pattern in prop::collection::vec(any::<u8>(), 1..64),
        fill in any::<u8>(),
        a in 0usize..4000,
        b in 0usize..4000,
    ) {
        let place = |at: usize| {
            let mut c = vec![fill; 4096];
            c[at..at + pattern.len()].copy_from_slice(&pattern);
            c
        };
        let (x, y) = (place(a), place(b));
        prop_assume!(x != y);
        prop_assert_ne!(digest(key(), &x), digest(key(), &y));
    }

    /// Two different sub-blocks swapped: [A, B] against [B, A].
    #[test]
    fn swapped_sub_blocks_change_the_digest(
        a in prop::collection::vec(any::<u8>(), 16..=512),
        seed in any::<u8>(),
    ) {
        let b: Vec<u8> = a.iter().map(|x| x.wrapping_add(seed | 1)).collect();
        let ab = [a.clone(), b.clone()].concat();
        let ba = [b, a].concat();
        prop_assert_ne!(digest(key(), &ab), digest(key(), &ba));
    }

    /// Equal chunks keyed per run: another key gives another digest.
    #[test]
    fn digests_are_keyed(data in chunk(256), s1 in any::<u64>(), s2 in any::<u64>()) {
        prop_assume!(s1 != s2);
        prop_assert_ne!(digest(key_from_seed(s1), &data), digest(key_from_seed(s2), &data));
    }
}

#[test]
fn equal_words_at_every_position_give_distinct_digests() {
    // One non-zero 16-byte word moved through every word position of a 4 KiB chunk, and one
    // byte through every byte position: all distinct.
    let mut seen = std::collections::HashSet::new();
    for w in 0..256 {
        let mut c = vec![0u8; 4096];
        c[w * 16..w * 16 + 16].copy_from_slice(b"kernel-replay!!!");
        assert!(seen.insert(digest(key(), &c)), "word position {w}");
    }
    for i in 0..4096 {
        let mut c = vec![0u8; 4096];
        c[i] = 0x80;
        assert!(seen.insert(digest(key(), &c)), "byte position {i}");
    }
    // Length matters even when the tail is zero.
    assert_ne!(digest(key(), &[0u8; 4095]), digest(key(), &[0u8; 4096]));
}

/// A kernel that permutes data without changing the multiset of bytes: it swaps the two
/// 16-byte words at `a` and `b` (offsets in the buffer at argument 0).
fn swapper(a: u64, b: u64, len: usize) -> Kernel {
    Kernel::new(
        "swap",
        move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let buf = ctx.word(0);
            let x = ctx.read_vec(buf + a, len)?;
            let y = ctx.read_vec(buf + b, len)?;
            ctx.write(buf + a, &y)?;
            ctx.write(buf + b, &x)?;
            Ok(())
        },
    )
}

#[test]
fn dirty_restore_catches_permutations_within_and_across_chunks() {
    const CHUNK: u64 = 4096;
    // (a, b, len, chunks restored per restore)
    for (a, b, len, chunks) in [
        (16, 48, 16, 1),                       // two words of chunk 0
        (CHUNK, 2 * CHUNK, CHUNK as usize, 2), // chunks 1 and 2 swapped whole
    ] {
        let workload = |rt: &replay_mock::SimRuntime| {
            let buf = rt.alloc(A0, 4 * CHUNK, MemoryClass::DEVICE_COARSE).unwrap();
            let bytes: Vec<u8> = (0..4 * CHUNK).map(|i| (i * 13 % 251) as u8).collect();
            rt.write(buf, &bytes).unwrap();
            buf
        };
        let rt = runtime(1);
        // An even number of passes: without the restores, the swaps would cancel out.
        ToolScript::passes(4).install(
            &rt,
            Policy {
                restore: RestoreMode::Dirty,
                chunk_bytes: CHUNK,
                ..fast_policy()
            },
        );
        let buf = workload(&rt);
        let k = swapper(a, b, len);
        let done = rt
            .dispatch(
                rt.queue(A0, 0),
                &k,
                &KernArgs::new().ptr(buf).build(),
                grid(1),
            )
            .unwrap();
        done.wait().unwrap();
        let rec = done.record().unwrap();
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        assert_eq!(
            &rec.pass_restored_bytes[..],
            &[0, chunks * CHUNK, chunks * CHUNK, chunks * CHUNK],
            "{rec}"
        );
        // Memory holds one swap, as one execution.
        let reference = reference(1, |rt| {
            let buf = workload(rt);
            rt.dispatch(
                rt.queue(A0, 0),
                &k,
                &KernArgs::new().ptr(buf).build(),
                grid(1),
            )
            .unwrap()
            .wait()
            .unwrap();
        });
        assert_matches_reference(&rt, &reference);
        finish(&rt);
    }
}
