//! The host digest (`replay_core::digest`, what the simulator and HSA's host digests compute)
//! beside a plain one-core read of the same buffer, in the same run (SPEC §11, issue 15: at
//! least 85% of the read). No timing is asserted anywhere; this prints figures.
//!
//! `cargo bench -p replay-core --bench digest` (optional argument: buffer MiB, default 256).

use std::hint::black_box;
use std::time::Instant;

use replay_core::digest::{digest, key_from_seed};

/// Median seconds of `runs` calls of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm: pages touched, threads' stacks mapped
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[runs / 2]
}

/// The ceiling: every 8-byte word read once and summed, on one core.
fn read(d: &[u8]) -> u64 {
    d.chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .fold(0u64, u64::wrapping_add)
}

fn main() {
    let mib: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(256);
    let len = mib << 20;
    let data: Vec<u8> = (0..len).map(|i| (i.wrapping_mul(31) % 251) as u8).collect();
    let key = key_from_seed(7);
    let gbs = |s: f64| len as f64 / s / 1e9;
    let runs = 7;
    println!(
        "digest vs plain read, {mib} MiB, median of {runs}, {} hardware threads",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let r = median(runs, || {
        black_box(read(black_box(&data)));
    });
    println!(
        "  plain read (sum of u64, one core), ceiling: {:6.2} GB/s",
        gbs(r)
    );
    for (what, chunk) in [
        ("256 KiB chunks (one thread each)", 256 << 10),
        ("1 MiB chunks (the default chunk_bytes)", 1 << 20),
        ("64 MiB pieces", 64 << 20),
        ("whole buffer in one call", len),
    ] {
        let d = median(runs, || {
            for c in black_box(&data).chunks(chunk) {
                black_box(digest(key, c));
            }
        });
        println!(
            "  digest, {what:<40} {:6.2} GB/s = {:3.0}% of the read",
            gbs(d),
            100.0 * r / d
        );
    }
}
