//! `replay-hsa`'s `OnLoad` on the simulated table: wrappers track pool allocations by class.

use replay_hsa::sys;
use replay_hsa_sim::client::typed;
use replay_hsa_sim::{PoolKind, SimConfig, SimHsa};

use crate::harness::api;

#[test]
fn on_load_installs_wrappers_that_track_pool_allocations_by_class() {
    let mut sim = SimHsa::new(SimConfig::default());
    let before = sim
        .amd()
        .hsa_amd_memory_pool_allocate_fn
        .map(|f| f as usize);
    // SAFETY: the sim's table, alive, not used by other threads during the call.
    let ok = unsafe { replay_hsa::on_load(sim.table().cast(), 1, 0, std::ptr::null()) };
    assert!(ok, "{}", replay_hsa::backend().state_json());
    let after = sim
        .amd()
        .hsa_amd_memory_pool_allocate_fn
        .map(|f| f as usize);
    assert_ne!(before, after, "the pool allocate entry is wrapped");
    let api = api(&sim);
    let coarse = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 4096);
    let fine = api.alloc(sim.pool(1, PoolKind::DeviceFine), 4096);
    let kernarg = api.alloc(sim.pool(0, PoolKind::Kernarg), 4096);
    let host = api.alloc(sim.pool(0, PoolKind::HostFine), 4096);
    // Core `hsa_memory_allocate` from a region (regions mirror pools, same handles).
    let mut region_ptr = std::ptr::null_mut();
    let region = sys::hsa_region_t {
        handle: sim.pool(1, PoolKind::DeviceCoarse).handle,
    };
    // SAFETY: `hsa_memory_allocate`'s signature.
    let memory_allocate: sys::MemoryAllocateFn =
        unsafe { typed(sim.core().hsa_memory_allocate_fn) };
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { memory_allocate(region, 4096, &mut region_ptr) }, 0);
    let region_ptr = region_ptr.cast::<u8>();
    let state: serde_json::Value =
        serde_json::from_str(&replay_hsa::backend().state_json()).unwrap();
    let class_of = |p: *mut u8| {
        state["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["base"].as_u64() == Some(p as u64))
            .map(|r| r["class"].as_u64().unwrap())
    };
    use replay_core::MemoryClass;
    assert_eq!(
        class_of(coarse),
        Some(u64::from(MemoryClass::DEVICE_COARSE.bits()))
    );
    assert_eq!(
        class_of(fine),
        Some(u64::from(MemoryClass::FINE_GRAINED.bits()))
    );
    // Fine-grained system memory: pinned host memory, coherent.
    assert_eq!(
        class_of(host),
        Some(u64::from(
            (MemoryClass::PINNED_HOST | MemoryClass::FINE_GRAINED).bits()
        ))
    );
    assert_eq!(
        class_of(kernarg),
        Some(u64::from(MemoryClass::KERNARG.bits()))
    );
    assert_eq!(
        class_of(region_ptr),
        Some(u64::from(MemoryClass::DEVICE_COARSE.bits()))
    );
    // The free is recorded: the region leaves the tracker.
    // SAFETY: a pointer from the pool allocator, through the wrapped entry.
    assert_eq!(unsafe { (api.pool_free)(coarse.cast()) }, 0);
    let state: serde_json::Value =
        serde_json::from_str(&replay_hsa::backend().state_json()).unwrap();
    assert!(!state["regions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["base"].as_u64() == Some(coarse as u64)));
}
