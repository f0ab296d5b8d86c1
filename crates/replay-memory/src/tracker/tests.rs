//! The inventory's unit tests (SPEC §7.1): frees and unmaps against holds, mappings, liveness.

use super::*;

const A: AgentId = AgentId(0);
const B: AgentId = AgentId(1);
const C: MemoryClass = MemoryClass::DEVICE_COARSE;

#[test]
fn generations_are_never_reused() {
    let t = Tracker::new();
    let other = Tracker::new();
    let g1 = t.record_alloc(A, 0x1000, 64, C);
    let first = t.record_free(A, 0x1000).unwrap();
    assert_eq!(first.generation, g1);
    let g2 = t.record_alloc(A, 0x1000, 64, C);
    let g3 = other.record_alloc(A, 0x1000, 64, C);
    let g4 = t.record_alloc(B, 0x1000, 64, C);
    let mut all = vec![g1, g2, g3, g4];
    assert!(
        all.iter().all(|g| *g > 0),
        "0 is the module-variable generation"
    );
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 4);
    // The region of the first allocation is not live, though the address is again.
    assert!(!t.is_live(A, &first));
    assert!(t.is_live(A, &t.lookup(A, 0x1000).unwrap()));
}

#[test]
fn free_is_recorded_before_release() {
    let t = Tracker::new();
    t.record_alloc(A, 0x1000, 64, C);
    let r = t.lookup(A, 0x1000).unwrap();
    assert!(t.is_live(A, &r));
    assert_eq!(t.record_free(A, 0x1000), Some(r));
    assert!(!t.is_live(A, &r));
    assert_eq!(t.lookup(A, 0x1000), None);
    assert_eq!(t.record_free(A, 0x1000), None, "an unknown free");
    // A shrunk region is another region.
    t.record_alloc(A, 0x1000, 32, C);
    assert!(!t.is_live(A, &r));
}

#[test]
fn lookup_anywhere_inside_and_on_any_agent() {
    let t = Tracker::new();
    t.record_alloc(A, 0x1000, 0x100, C);
    t.record_alloc(A, 0x1100, 0x10, MemoryClass::FINE_GRAINED);
    t.record_alloc(B, 0x9000, 0x100, C);
    assert_eq!(t.lookup(A, 0x0fff), None);
    assert_eq!(t.lookup(A, 0x1000).unwrap().base, 0x1000);
    assert_eq!(t.lookup(A, 0x10ff).unwrap().base, 0x1000);
    let f = t.lookup(A, 0x1100).unwrap();
    assert_eq!((f.base, f.class), (0x1100, MemoryClass::FINE_GRAINED));
    assert_eq!(t.lookup(A, 0x1110), None);
    assert_eq!(t.lookup(A, 0x9010), None);
    let (owner, r) = t.lookup_any(0x9010).unwrap();
    assert_eq!((owner, r.base), (B, 0x9000));
    assert_eq!(t.regions(A).len(), 2);
    assert_eq!(t.agents(), vec![A, B]);
}

#[test]
fn zero_sized_allocations_contain_nothing() {
    let t = Tracker::new();
    t.record_alloc(A, 0x1000, 0, C);
    assert_eq!(t.lookup(A, 0x1000), None);
    assert_eq!(t.regions(A).len(), 1);
}

#[test]
fn overlapping_report_replaces_stale_entries() {
    let t = Tracker::new();
    t.record_alloc(A, 0x1000, 0x100, C);
    t.record_alloc(A, 0x1200, 0x100, C);
    let old = t.lookup(A, 0x1000).unwrap();
    // The free of both was missed; a larger allocation now covers them.
    t.record_alloc(A, 0x1080, 0x200, C);
    assert!(!t.is_live(A, &old));
    let regions = t.regions(A);
    assert_eq!(regions.len(), 1);
    assert_eq!((regions[0].base, regions[0].size), (0x1080, 0x200));
}

#[test]
fn tool_owned_memory_is_marked_either_order_and_forgotten_on_free() {
    let t = Tracker::new();
    t.record_alloc(A, 0x1000, 0x100, C);
    t.mark_tool_owned(A, 0x1000, 0x100);
    assert!(t
        .lookup(A, 0x1000)
        .unwrap()
        .class
        .contains(MemoryClass::TOOL_OWNED));
    // Marked first, reported later.
    t.mark_tool_owned(A, 0x5000, 0x100);
    t.record_alloc(A, 0x5000, 0x100, C);
    assert!(t
        .lookup(A, 0x5000)
        .unwrap()
        .class
        .contains(MemoryClass::TOOL_OWNED));
    // After the free, the address is the application's again.
    t.record_free(A, 0x1000);
    t.record_alloc(A, 0x1000, 0x100, C);
    assert_eq!(t.lookup(A, 0x1000).unwrap().class, C);
    // Other agents are unaffected.
    t.record_alloc(B, 0x5000, 0x100, C);
    assert_eq!(t.lookup(B, 0x5000).unwrap().class, C);
}

/// Waits (bounded, wall time, only as a guard) until `cond` holds.
fn eventually(cond: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("condition not reached");
}

#[test]
fn a_free_waits_for_a_hold_over_its_region() {
    // A free on another thread could release memory between a restore's
    // liveness check and its copy.
    let t = std::sync::Arc::new(Tracker::new());
    t.record_alloc(A, 0x1000, 0x100, C);
    t.record_alloc(A, 0x2000, 0x100, C);
    let r = t.lookup(A, 0x1000).unwrap();
    let hold = t.hold(A, &[(0x1000, 0x100)]);
    // Other memory, and the same range of another agent, are not held.
    assert!(t.record_free(A, 0x2000).is_some());
    t.record_alloc(B, 0x1000, 0x100, C);
    assert!(t.record_free(B, 0x1000).is_some());
    let t2 = std::sync::Arc::clone(&t);
    let freer = std::thread::spawn(move || t2.record_free(A, 0x1000));
    eventually(|| t.waiting_releases() == 1);
    assert!(t.is_live(A, &r), "still live while the hold lasts");
    drop(hold);
    assert_eq!(freer.join().unwrap(), Some(r));
    assert!(!t.is_live(A, &r));
    assert_eq!(t.waiting_releases(), 0);
}

#[test]
fn a_release_waits_for_a_hold_and_runs_with_new_holds_kept_out() {
    let t = std::sync::Arc::new(Tracker::new());
    let hold = t.hold(A, &[(0x7000, 0x80)]);
    // Not overlapping: runs at once.
    assert_eq!(t.release_with(A, &[(0x7080, 0x10)], || 1), 1);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (t2, d2) = (std::sync::Arc::clone(&t), std::sync::Arc::clone(&done));
    let unload = std::thread::spawn(move || {
        t2.release_with(A, &[(0x7040, 0x10)], || {
            d2.store(true, Ordering::SeqCst);
        })
    });
    eventually(|| t.waiting_releases() == 1);
    assert!(!done.load(Ordering::SeqCst), "waits for the hold");
    drop(hold);
    unload.join().unwrap();
    assert!(done.load(Ordering::SeqCst));
}

#[test]
fn a_free_past_the_wait_cap_proceeds() {
    let t = Tracker::new();
    t.set_release_wait_cap(Duration::from_millis(1));
    t.record_alloc(A, 0x1000, 0x100, C);
    let _hold = t.hold(A, &[(0x1000, 0x100)]);
    assert!(t.record_free(A, 0x1000).is_some());
}

const VM: MemoryClass = MemoryClass::VIRTUAL_MAPPING;

fn local(owner: AgentId) -> MappedHandle {
    MappedHandle::Local { owner, class: C }
}

#[test]
fn a_mapping_is_an_agents_memory_from_map_and_access() {
    let t = Tracker::new();
    t.record_map(0x10_0000, 0x1000, local(A));
    // Mapped, no access yet: the owner knows it as a mapping it cannot capture.
    assert_eq!(t.lookup(A, 0x10_0010).unwrap().class, VM);
    assert_eq!(t.lookup(B, 0x10_0010), None);
    t.record_access(0x10_0000, 0x1000, A, MapAccess::ReadWrite);
    let a = t.lookup(A, 0x10_0010).unwrap();
    assert_eq!((a.base, a.size, a.class), (0x10_0000, 0x1000, VM | C));
    // Access for another agent: its own region; the first keeps its generation.
    t.record_access(0x10_0000, 0x1000, B, MapAccess::ReadWrite);
    let b = t.lookup(B, 0x10_0010).unwrap();
    assert_eq!(b.class, VM | C);
    assert!(t.is_live(A, &a));
    // Read-only access: nothing a kernel of that agent can change.
    t.record_access(0x10_0000, 0x1000, B, MapAccess::Read);
    assert!(!t.is_live(B, &b));
    assert_eq!(
        t.lookup(B, 0x10_0010).unwrap().class,
        VM | C | MemoryClass::READ_ONLY
    );
    t.record_access(0x10_0000, 0x1000, B, MapAccess::None);
    assert_eq!(t.lookup(B, 0x10_0010), None);
    // Imported handles and multicast objects carry no capturable class.
    t.record_map(0x20_0000, 0x1000, MappedHandle::Imported { owner: A });
    t.record_access(0x20_0000, 0x1000, A, MapAccess::ReadWrite);
    assert_eq!(
        t.lookup(A, 0x20_0000).unwrap().class,
        VM | MemoryClass::IPC_IMPORTED
    );
    t.record_map(0x30_0000, 0x1000, MappedHandle::Multicast { owner: A });
    t.record_access(0x30_0000, 0x1000, A, MapAccess::ReadWrite);
    assert_eq!(t.lookup(A, 0x30_0000).unwrap().class, VM);
}

#[test]
fn a_mapping_of_an_exported_handle_is_shared_with_its_access_kept() {
    let t = Tracker::new();
    t.record_map(0x10_0000, 0x1000, local(A));
    t.record_access(0x10_0000, 0x1000, A, MapAccess::ReadWrite);
    t.record_access(0x10_0000, 0x1000, B, MapAccess::Read);
    let before = t.lookup(A, 0x10_0000).unwrap();
    t.mark_mappings_shared(0x10_0000, 0x1000);
    assert!(
        !t.is_live(A, &before),
        "a new region: no old snapshot is written back"
    );
    let ipc = MemoryClass::IPC_IMPORTED;
    assert_eq!(t.lookup(A, 0x10_0010).unwrap().class, VM | ipc);
    assert_eq!(
        t.lookup(B, 0x10_0010).unwrap().class,
        VM | ipc | MemoryClass::READ_ONLY
    );
    // Access given later keeps it shared.
    t.record_access(0x10_0000, 0x1000, B, MapAccess::ReadWrite);
    assert_eq!(t.lookup(B, 0x10_0010).unwrap().class, VM | ipc);
    // Mappings outside the range are untouched.
    t.record_map(0x20_0000, 0x1000, local(A));
    t.record_access(0x20_0000, 0x1000, A, MapAccess::ReadWrite);
    t.mark_mappings_shared(0x10_0000, 0x1000);
    assert_eq!(t.lookup(A, 0x20_0000).unwrap().class, VM | C);
}

#[test]
fn partial_unmaps_and_remaps_of_a_reserved_range() {
    let t = Tracker::new();
    // Three chunks of one reserved range, mapped next to each other.
    for i in 0..3u64 {
        t.record_map(0x10_0000 + i * 0x1000, 0x1000, local(A));
    }
    t.record_access(0x10_0000, 0x3000, A, MapAccess::ReadWrite);
    let chunks: Vec<RegionRef> = (0..3u64)
        .map(|i| t.lookup(A, 0x10_0000 + i * 0x1000).unwrap())
        .collect();
    assert_eq!(t.mapping_run(A, &chunks[1]), chunks);
    // Unmapping the last chunk leaves the others as they were.
    t.record_unmap(0x10_2000, 0x1000);
    assert!(t.is_live(A, &chunks[0]) && t.is_live(A, &chunks[1]));
    assert!(!t.is_live(A, &chunks[2]));
    assert_eq!(t.lookup(A, 0x10_2000), None);
    assert_eq!(t.mapping_run(A, &chunks[0]), chunks[..2].to_vec());
    // Remapped: a new region at the same address.
    t.record_map(0x10_2000, 0x1000, local(A));
    t.record_access(0x10_2000, 0x1000, A, MapAccess::ReadWrite);
    let remapped = t.lookup(A, 0x10_2000).unwrap();
    assert_ne!(remapped.generation, chunks[2].generation);
    assert!(!t.is_live(A, &chunks[2]));
    // A range that cuts a mapping: what stays mapped is a new region.
    t.record_unmap(0x10_0800, 0x800);
    assert!(!t.is_live(A, &chunks[0]));
    let rest = t.lookup(A, 0x10_0000).unwrap();
    assert_eq!(
        (rest.base, rest.size, rest.class),
        (0x10_0000, 0x800, VM | C)
    );
    assert_eq!(t.lookup(A, 0x10_0800), None);
    // Releasing the reservation unmaps the rest.
    t.record_release_reservation(0x10_0000, 0x4000);
    assert!(t.regions(A).is_empty());
    // Not mappings: a run of one.
    t.record_alloc(A, 0x50_0000, 0x100, C);
    let r = t.lookup(A, 0x50_0000).unwrap();
    assert_eq!(t.mapping_run(A, &r), vec![r]);
}

#[test]
fn read_live_skips_freed_regions_and_keeps_frees_waiting_while_it_reads() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::Arc;
    let t = Arc::new(Tracker::new());
    t.record_alloc(A, 0x1000, 0x100, C);
    t.record_alloc(A, 0x2000, 0x100, C);
    t.record_alloc(A, 0x3000, 0x100, C);
    let regions = t.regions(A);
    t.record_free(A, 0x2000);
    // Reallocated at the same address: a new generation, not the region listed.
    t.record_alloc(A, 0x2000, 0x100, C);
    let freed = Arc::new(AtomicBool::new(false));
    let mut free = None;
    let got = t.read_live(A, &regions, |live| {
        let (t2, f2) = (Arc::clone(&t), Arc::clone(&freed));
        free = Some(std::thread::spawn(move || {
            t2.record_free(A, 0x3000);
            f2.store(true, SeqCst);
        }));
        std::thread::sleep(Duration::from_millis(30));
        // Still reading: the free of a region being read waits for the hold.
        assert!(!freed.load(SeqCst));
        Ok::<_, ()>(live.iter().map(|r| r.base).collect())
    });
    assert_eq!(got, Ok(vec![Some(0x1000), None, Some(0x3000)]));
    free.unwrap().join().unwrap();
    assert!(freed.load(SeqCst));
    // Once freed, nothing is read.
    let got = t.read_live(A, &regions[2..], |_| -> Result<Vec<u64>, ()> {
        panic!("nothing live to read")
    });
    assert_eq!(got, Ok(vec![None]));
}

#[test]
fn an_unmap_and_a_lowered_access_wait_for_a_hold() {
    let t = std::sync::Arc::new(Tracker::new());
    t.record_map(0x10_0000, 0x1000, local(A));
    t.record_access(0x10_0000, 0x1000, A, MapAccess::ReadWrite);
    let r = t.lookup(A, 0x10_0000).unwrap();
    for lower in [true, false] {
        let hold = t.hold(A, &[(0x10_0000, 0x1000)]);
        let t2 = std::sync::Arc::clone(&t);
        let worker = std::thread::spawn(move || {
            if lower {
                t2.record_access(0x10_0000, 0x1000, A, MapAccess::None);
            } else {
                t2.record_unmap(0x10_0000, 0x1000);
            }
        });
        eventually(|| t.waiting_releases() == 1);
        assert!(t.is_live(A, &t.lookup(A, 0x10_0000).unwrap()));
        drop(hold);
        worker.join().unwrap();
        assert_eq!(t.waiting_releases(), 0);
        if lower {
            assert!(!t.is_live(A, &r));
            assert_eq!(t.lookup(A, 0x10_0000).unwrap().class, VM, "no access");
        } else {
            assert_eq!(t.lookup(A, 0x10_0000), None);
        }
    }
}

#[test]
fn stream_ordered_allocations_are_marked_and_freed_like_any() {
    let t = Tracker::new();
    t.record_async_alloc(A, 0x1000, 0x100, C);
    let r = t.lookup(A, 0x1000).unwrap();
    assert_eq!(r.class, VM | C);
    assert_eq!(t.record_async_free(A, 0x1000), Some(r));
    assert!(!t.is_live(A, &r));
}

#[test]
fn tracker_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Tracker>();
}
