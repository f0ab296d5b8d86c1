//! `SimMemory` as the memory layer drives it: tiers, backing memory, fenced copies, digests.

mod common;

use std::time::Duration;

use replay_core::digest::{digest, key_from_seed};
use replay_core::{AgentId, CopyOp, DeviceMemory, DigestOp, Fence, MemLoc, MemoryClass, Tier};
use replay_mock::{CopyDirection, Event, EventKind};

fn wait(mem: &dyn DeviceMemory, f: Fence) {
    for _ in 0..10_000 {
        if mem.poll_fence(f, Duration::from_millis(10)).unwrap() {
            return;
        }
    }
    panic!("fence {f:?} never completed");
}

#[test]
fn tiers_report_capacity_and_bandwidth() {
    let rt = common::runtime(1);
    let mem = rt.memory(AgentId(0));
    let dev = mem.tier_info(Tier::Device).unwrap();
    let pinned = mem.tier_info(Tier::PinnedHost).unwrap();
    let pageable = mem.tier_info(Tier::PageableHost).unwrap();
    assert!(dev.gbps > pinned.gbps && pinned.gbps > pageable.gbps);
    assert_eq!(pinned.available_bytes, 32 << 20);
    assert_eq!(pageable.available_bytes, 64 << 20);

    let b = mem.alloc_backing(Tier::Device, 1 << 20).unwrap();
    assert_eq!(
        mem.tier_info(Tier::Device).unwrap().available_bytes,
        dev.available_bytes - (1 << 20)
    );
    // Backing memory is never reported to the tracker.
    let tracked: u64 = rt
        .tracker()
        .regions(AgentId(0))
        .iter()
        .map(|r| r.size)
        .sum();
    assert!(tracked < 1 << 20);
    mem.free_backing(b);
    assert_eq!(
        mem.tier_info(Tier::Device).unwrap().available_bytes,
        dev.available_bytes
    );
    // Exhausting a tier fails with out-of-memory.
    let e = mem.alloc_backing(Tier::PinnedHost, 33 << 20).unwrap_err();
    assert_eq!(e.kind, replay_core::BackendErrorKind::OutOfMemory);
}

#[test]
fn copies_and_digests_run_on_the_copy_engine() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let mem = rt.memory(a);
    let n = 3 << 20;
    let buf = rt.alloc(a, n, MemoryClass::DEVICE_COARSE).unwrap();
    let bytes: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    rt.write(buf, &bytes).unwrap();

    let dev = mem.alloc_backing(Tier::Device, 1 << 20).unwrap();
    let pinned = mem.alloc_backing(Tier::PinnedHost, 1 << 20).unwrap();
    let pageable = mem.alloc_backing(Tier::PageableHost, 1 << 20).unwrap();
    let ops: Vec<CopyOp> = [dev, pinned, pageable]
        .iter()
        .enumerate()
        .map(|(i, &id)| CopyOp {
            src: MemLoc::Device {
                addr: buf + (i as u64) * (1 << 20),
            },
            dst: MemLoc::Backing { id, offset: 0 },
            len: 1 << 20,
        })
        .collect();
    rt.gpu().recorder().clear();
    let f = mem.submit_copies(&ops).unwrap();
    wait(&*mem, f);

    // Digests of device memory and of each backing match the reference digest of the bytes.
    let key = key_from_seed(42);
    let mut dops = vec![DigestOp {
        at: MemLoc::Device { addr: buf + 5 },
        len: 1000,
    }];
    for id in [dev, pinned, pageable] {
        dops.push(DigestOp {
            at: MemLoc::Backing { id, offset: 0 },
            len: 1 << 20,
        });
    }
    let df = mem.submit_digests(&dops, key).unwrap();
    wait(&*mem, df);
    let got = mem.take_digests(df).unwrap();
    assert_eq!(got.len(), 4);
    assert_eq!(got[0], digest(key, &bytes[5..1005]));
    for i in 0..3 {
        let lo = i << 20;
        assert_eq!(
            got[i + 1],
            digest(key, &bytes[lo..lo + (1 << 20)]),
            "tier {i}"
        );
    }
    assert!(mem.take_digests(df).is_err(), "taken once");

    // Restore: clobber the device, copy back, compare.
    rt.fill(buf, n as usize, 0).unwrap();
    let back: Vec<CopyOp> = ops
        .iter()
        .map(|o| CopyOp {
            src: o.dst,
            dst: o.src,
            len: o.len,
        })
        .collect();
    let f = mem.submit_copies(&back).unwrap();
    wait(&*mem, f);
    assert_eq!(rt.read(buf, n as usize).unwrap(), bytes);

    let dirs: Vec<CopyDirection> = rt
        .gpu()
        .recorder()
        .of_kind(EventKind::CopyBatch)
        .into_iter()
        .map(|e| match e {
            Event::CopyBatch { direction, .. } => direction,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(dirs, vec![CopyDirection::Capture, CopyDirection::Restore]);
}

#[test]
fn bad_copies_are_errors() {
    let rt = common::runtime(1);
    let mem = rt.memory(AgentId(0));
    let b = mem.alloc_backing(Tier::PageableHost, 4096).unwrap();
    // Unknown backing: refused at submission.
    let bad = CopyOp {
        src: MemLoc::Backing {
            id: replay_core::BackingId(999_999),
            offset: 0,
        },
        dst: MemLoc::Backing { id: b, offset: 0 },
        len: 16,
    };
    assert!(mem.submit_copies(&[bad]).is_err());
    // An unmapped device address: the fence reports the copy engine's error.
    let unmapped = CopyOp {
        src: MemLoc::Device {
            addr: 0x1000_0000_0000 + 0x0700_0000_0000,
        },
        dst: MemLoc::Backing { id: b, offset: 0 },
        len: 16,
    };
    let f = mem.submit_copies(&[unmapped]).unwrap();
    let e = loop {
        match mem.poll_fence(f, Duration::from_millis(10)) {
            Ok(true) => panic!("copy from unmapped memory succeeded"),
            Ok(false) => continue,
            Err(e) => break e,
        }
    };
    assert_eq!(e.kind, replay_core::BackendErrorKind::CopyFailed);
    assert!(e.message.contains("address not mapped"), "{e}");
    // Past the end of a backing allocation.
    let long = CopyOp {
        src: MemLoc::Backing {
            id: b,
            offset: 4000,
        },
        dst: MemLoc::Backing { id: b, offset: 0 },
        len: 200,
    };
    let f = mem.submit_copies(&[long]).unwrap();
    assert!(loop {
        match mem.poll_fence(f, Duration::from_millis(10)) {
            Ok(false) => continue,
            other => break other.is_err(),
        }
    });
    assert!(mem.poll_fence(Fence(123_456_789), Duration::ZERO).is_err());
}
