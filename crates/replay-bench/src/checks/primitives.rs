//! Checks of the CUDA backend's parts below the window (SPEC §7.4, §9.2): the argument blocks
//! the bench builds against the driver's layouts, device digests against the reference digest,
//! and copies and digests through every tier.

use replay_core::{CopyOp, DeviceMemory, DigestOp, MemLoc, Tier};
use replay_cuda::{ArgBlock, DevicePtr};
use serde_json::{json, Value};

use crate::common::{ensure, Bench, MIB, WAIT};

/// The argument blocks the bench builds have the layout the driver reports for each kernel
/// (`cuFuncGetParamInfo`): what launch capture in intercept mode relies on.
pub(super) fn param_layouts(b: &Bench) -> Result<Value, String> {
    let p = DevicePtr(0);
    let cases = [
        (&b.k.rmw, ArgBlock::new().arg(p).arg(0u64).arg(0u64)),
        (&b.k.fill, ArgBlock::new().arg(p).arg(0u64).arg(0u64)),
        (&b.k.read, ArgBlock::new().arg(p).arg(0u64).arg(p)),
        (&b.k.indirect, ArgBlock::new().arg(p).arg(0u64).arg(0u64)),
        (&b.k.spin, ArgBlock::new().arg(0u64).arg(p)),
        (&b.k.tiny, ArgBlock::new().arg(p)),
    ];
    let mut out = serde_json::Map::new();
    for (f, args) in cases {
        let got = f.param_layout().map_err(|e| format!("{}: {e}", f.name()))?;
        ensure(got == args.params(), || {
            format!(
                "{}: driver layout {got:?}, built {:?}",
                f.name(),
                args.params()
            )
        })?;
        out.insert(
            f.name().to_string(),
            json!(got.iter().map(|s| (s.offset, s.size)).collect::<Vec<_>>()),
        );
    }
    Ok(Value::Object(out))
}

fn cpu_digest(b: &Bench, bytes: &[u8]) -> replay_core::Digest128 {
    replay_core::digest::digest(b.key, bytes)
}

/// Device digests equal the reference on bytes copied back, for odd lengths and alignments,
/// with ops as one segment and split over several blocks, and for a batch of many chunks; and
/// the kernels give the reference's pinned answer for a fixed key (`replay_core::digest`'s
/// known-answer test). Fails when digests run on the host
/// (no NVRTC): then nothing here would compare the kernels with anything.
pub(super) fn digest_equivalence(b: &Bench) -> Result<Value, String> {
    let mem = b.backend.memory();
    ensure(mem.device_digests(), || {
        "digests run on the host (NVRTC not loaded): the device kernels are not checked".into()
    })?;
    let a = b.alloc(8 * MIB + 64)?;
    let fixed = replay_core::DigestKey([
        0x0123_4567_89ab_cdef,
        0xfedc_ba98_7654_3210,
        0x0f1e_2d3c_4b5a_6978,
        0x8796_a5b4_c3d2_e1f0,
    ]);
    let pattern: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37)).collect();
    mem.write_device(a.ptr(), &pattern, WAIT)
        .map_err(|e| e.to_string())?;
    let pinned = replay_core::Digest128(0x4872_6157_823f_4751_6142_3ed6_fb1f_c720);
    for k in [None, Some(16u64)] {
        mem.force_digest_segment(k);
        let got = mem.digest_blocking(&[(a.ptr(), 40)], fixed, WAIT);
        mem.force_digest_segment(None);
        let got = got.map_err(|e| e.to_string())?;
        ensure(got == [pinned], || {
            format!("segment {k:?}: the fixed-key digest is {got:?}, pinned {pinned}")
        })?;
    }
    b.fill(&a, 11)?;
    let host = b.read(a.ptr(), a.len())?;
    let cases: Vec<(u64, u64)> = vec![
        (0, 0),
        (0, 1),
        (0, 15),
        (0, 16),
        (0, 17),
        (0, 4096),
        (0, MIB),
        (0, MIB + 5),
        (4, 100),
        (8, 4096),
        (1, 33),
        (3, MIB - 3),
        (16, 2 * MIB + 7),
        (0, 8 * MIB),
    ];
    let want: Vec<_> = cases
        .iter()
        .map(|&(o, l)| cpu_digest(b, &host[o as usize..(o + l) as usize]))
        .collect();
    let ranges: Vec<(u64, u64)> = cases.iter().map(|&(o, l)| (a.ptr() + o, l)).collect();
    let mut checked = 0;
    for k in [None, Some(16u64), Some(4096), Some(64 << 10)] {
        mem.force_digest_segment(k);
        let got = mem.digest_blocking(&ranges, b.key, WAIT);
        mem.force_digest_segment(None);
        let got = got.map_err(|e| e.to_string())?;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            ensure(g == w, || {
                format!(
                    "segment {k:?}: digest of {:?} is {g}, the reference says {w}",
                    cases[i]
                )
            })?;
            checked += 1;
        }
    }
    // 2048 digests of 4 KiB in one batch.
    let small: Vec<(u64, u64)> = (0..2048u64).map(|i| (a.ptr() + i * 4096, 4096)).collect();
    let got = mem
        .digest_blocking(&small, b.key, WAIT)
        .map_err(|e| e.to_string())?;
    for (i, g) in got.iter().enumerate() {
        let w = cpu_digest(b, &host[i * 4096..(i + 1) * 4096]);
        ensure(*g == w, || format!("batch digest {i}: {g} vs {w}"))?;
        checked += 1;
    }
    Ok(json!({ "digests_compared": checked + 2, "device_digests": true }))
}

/// Copies through every tier round-trip, and digests of backing memory match.
pub(super) fn copy_tiers(b: &Bench) -> Result<Value, String> {
    let mem = b.backend.memory();
    let len = 4 * MIB + 4096;
    let a = b.alloc(len)?;
    b.fill(&a, 21)?;
    let original = b.read(a.ptr(), len)?;
    let mut out = serde_json::Map::new();
    for tier in Tier::ALL {
        let id = mem
            .alloc_backing(tier, len)
            .map_err(|e| format!("{}: {e}", tier.as_str()))?;
        let wait = |f| -> Result<(), String> {
            match mem.poll_fence(f, WAIT) {
                Ok(true) => Ok(()),
                Ok(false) => Err("fence not done".into()),
                Err(e) => Err(e.to_string()),
            }
        };
        let res = (|| -> Result<(), String> {
            // Two ops, the second contiguous with the first (merged by the backend).
            let half = len / 2;
            let ops = [
                CopyOp {
                    src: MemLoc::Device { addr: a.ptr() },
                    dst: MemLoc::Backing { id, offset: 0 },
                    len: half,
                },
                CopyOp {
                    src: MemLoc::Device {
                        addr: a.ptr() + half,
                    },
                    dst: MemLoc::Backing { id, offset: half },
                    len: len - half,
                },
            ];
            wait(mem.submit_copies(&ops).map_err(|e| e.to_string())?)?;
            // Digests of the backing itself, in three pieces.
            let dops = [
                DigestOp {
                    at: MemLoc::Backing { id, offset: 0 },
                    len: MIB,
                },
                DigestOp {
                    at: MemLoc::Backing { id, offset: 5 },
                    len: 1000,
                },
                DigestOp {
                    at: MemLoc::Backing { id, offset: MIB },
                    len: len - MIB,
                },
            ];
            let f = mem
                .submit_digests(&dops, b.key)
                .map_err(|e| e.to_string())?;
            wait(f)?;
            let d = mem.take_digests(f).map_err(|e| e.to_string())?;
            let w = [
                cpu_digest(b, &original[..MIB as usize]),
                cpu_digest(b, &original[5..1005]),
                cpu_digest(b, &original[MIB as usize..]),
            ];
            ensure(d == w, || format!("backing digests differ: {d:?} vs {w:?}"))?;
            // Clobber, restore from backing, compare.
            b.fill(&a, 22)?;
            b.sync()?;
            let back = [CopyOp {
                src: MemLoc::Backing { id, offset: 0 },
                dst: MemLoc::Device { addr: a.ptr() },
                len,
            }];
            wait(mem.submit_copies(&back).map_err(|e| e.to_string())?)?;
            let now = b.read(a.ptr(), len)?;
            ensure(now == original, || "restored bytes differ".into())
        })();
        mem.free_backing(id);
        res.map_err(|e| format!("{}: {e}", tier.as_str()))?;
        out.insert(tier.as_str().into(), json!("ok"));
    }
    Ok(Value::Object(out))
}
