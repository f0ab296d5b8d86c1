//! Snapshot memory: pools without room or access, failed capture copies, pooled backing memory.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use replay_hsa_sim::{FaultMode, PoolKind, SimConfig, SimFault};

use crate::common::{dispatch, read, rmw};
use crate::harness::{expect, world, Case};

#[test]
fn snapshot_memory_the_runtime_cannot_allocate_declines_snapshot_failed() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 21);
    let dev = c.sim.inject(
        SimFault::PoolExhausted(PoolKind::DeviceCoarse),
        FaultMode::Always,
    );
    let host = c.sim.inject(
        SimFault::PoolExhausted(PoolKind::HostFine),
        FaultMode::Always,
    );
    let o = expect(w, &c, true, "snapshot_failed").expect("CONFIG EXIT has the outcome");
    assert_eq!(o.captured_bytes, 0, "{o:?}");
    assert!(c.sim.fired("pool_exhausted") >= 2, "both tiers were tried");
    c.sim.clear(dev);
    c.sim.clear(host);
    // The pools work again: the next dispatch is replayed from device backing memory.
    w.tool.set_passes(Some(3));
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(read(c.buf), rmw(rmw(21)));
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert!(o.tier_bytes.device >= 64, "{o:?}");
    w.service.stop().unwrap();
}

#[test]
fn a_device_pool_that_cannot_allocate_leaves_the_snapshot_to_pinned_host_memory() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 20);
    let dev = c.sim.inject(
        SimFault::PoolExhausted(PoolKind::DeviceCoarse),
        FaultMode::Always,
    );
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(read(c.buf), rmw(20), "memory equals one execution");
    assert_eq!(c.runs.load(Ordering::SeqCst), 3);
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
    assert!(
        c.sim.fired("pool_exhausted") >= 1,
        "the device tier was tried first"
    );
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert_eq!(o.tier_bytes.device, 0, "{o:?}");
    assert!(
        o.tier_bytes.pinned >= 64,
        "captured in pinned host memory: {o:?}"
    );
    c.sim.clear(dev);
    w.service.stop().unwrap();
}

#[test]
fn a_device_pool_without_room_places_the_snapshot_in_pinned_host_memory() {
    let (w, _g) = world();
    w.service.start().unwrap();
    // 64 MiB of device memory is less than the headroom the memory layer leaves free.
    let c = Case::with(
        SimConfig {
            device_pool_bytes: 64 << 20,
            ..SimConfig::default()
        },
        1,
        22,
    );
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(read(c.buf), rmw(22), "memory equals one execution");
    assert_eq!(c.runs.load(Ordering::SeqCst), 3);
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert_eq!(o.tier_bytes.device, 0, "{o:?}");
    assert!(
        o.tier_bytes.pinned >= 64,
        "captured in pinned host memory: {o:?}"
    );
    w.service.stop().unwrap();
}

#[test]
fn pinned_backing_the_gpu_cannot_be_given_access_to_declines_snapshot_failed() {
    let (w, _g) = world();
    w.service.start().unwrap();
    // Device memory below the headroom: the snapshot would go to pinned host memory, which
    // the GPU must be allowed to reach; the runtime refuses that.
    let c = Case::with(
        SimConfig {
            device_pool_bytes: 64 << 20,
            ..SimConfig::default()
        },
        0,
        39,
    );
    let f = c.sim.inject(SimFault::AllowAccessFails, FaultMode::Always);
    let info = replay_hsa::backend()
        .agents
        .get(c.sim.gpu_agents()[0].handle, || None);
    let engine = replay_hsa::memory::engine(&info);
    expect(w, &c, true, "snapshot_failed");
    assert!(c.sim.fired("allow_access_fails") >= 1);
    assert_eq!(
        engine.pooled_bytes(),
        0,
        "the refused block was freed, not kept"
    );
    c.sim.clear(f);
    w.service.stop().unwrap();
}

#[test]
fn a_refused_capture_copy_declines_snapshot_failed() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 23);
    c.sim.inject(SimFault::AsyncCopyRefused, FaultMode::Once);
    expect(w, &c, true, "snapshot_failed");
    assert_eq!(c.sim.fired("async_copy_refused"), 1);
    w.service.stop().unwrap();
}

#[test]
fn a_capture_copy_refused_part_way_waits_for_the_copies_already_submitted() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 38);
    // A second region, so the capture is one batch of two copies; the runtime accepts the
    // first and refuses the second, and its copy engine holds the accepted one.
    let other = c.api.alloc(c.sim.pool(0, PoolKind::DeviceCoarse), 4096);
    assert!(!other.is_null());
    let info = replay_hsa::backend()
        .agents
        .get(c.sim.gpu_agents()[0].handle, || None);
    let engine = replay_hsa::memory::engine(&info);
    let stall = c.sim.inject(SimFault::CopyEngineStalled, FaultMode::Always);
    c.sim
        .inject_after(SimFault::AsyncCopyRefused, FaultMode::Once, 1);
    expect(w, &c, true, "snapshot_failed");
    assert_eq!(
        c.sim.fired("async_copy_refused"),
        1,
        "the second copy was refused"
    );
    // The failure is not reported while the accepted copy may still write into the backing:
    // the fence waits for it, gives up at the bound, and the backing is quarantined rather
    // than handed to the next capture.
    assert!(
        engine.quarantined_bytes() > 0,
        "backing an accepted copy may still write is never reused"
    );
    c.sim.clear(stall);
    w.service.stop().unwrap();
}

#[test]
fn a_stuck_capture_copy_declines_snapshot_failed_and_quarantines_its_backing() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 24);
    let agent = c.sim.gpu_agents()[0];
    let info = replay_hsa::backend().agents.get(agent.handle, || None);
    let engine = replay_hsa::memory::engine(&info);
    let stall = c.sim.inject(SimFault::CopyEngineStalled, FaultMode::Always);
    let start = Instant::now();
    expect(w, &c, true, "snapshot_failed");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the capture gave up"
    );
    assert!(
        engine.quarantined_bytes() > 0,
        "backing a stuck copy may still write is never reused"
    );
    c.sim.clear(stall);
    w.service.stop().unwrap();
}

#[test]
fn device_memory_another_process_uses_is_left_to_it() {
    let (w, _g) = world();
    w.service.start().unwrap();
    // A GPU whose 1 GiB coarse pool is mostly used by another process: the device tier sees
    // what is free (HSA_AMD_AGENT_INFO_MEMORY_AVAIL, 200 MiB, less than the 10% + 256 MiB the
    // memory layer leaves to the application), not the pool's size.
    let c = Case::with(
        SimConfig {
            device_pool_bytes: 1 << 30,
            device_reserved_bytes: 824 << 20,
            ..SimConfig::default()
        },
        0,
        36,
    );
    w.tool.set_passes(Some(3));
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(read(c.buf), rmw(36));
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert_eq!(o.tier_bytes.device, 0, "no device memory taken: {o:?}");
    assert!(o.tier_bytes.pinned >= 64, "{o:?}");
    w.service.stop().unwrap();
}

#[test]
fn pooled_backing_memory_yields_to_an_application_allocation() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let mib = 1usize << 20;
    let c = Case::new(0, 37);
    let agent = c.sim.gpu_agents()[0];
    let info = replay_hsa::backend().agents.get(agent.handle, || None);
    let engine = replay_hsa::memory::engine(&info);
    // A snapshot of a 32 MiB buffer stays pooled in device memory after its window (small
    // enough that its simulated copies finish well inside the bound on a loaded machine)...
    let coarse = c.sim.pool(0, PoolKind::DeviceCoarse);
    let big = c.api.alloc(coarse, 32 * mib).cast::<u64>();
    // SAFETY: a fresh host-visible simulated allocation.
    unsafe { big.write_volatile(37) };
    let args = c.api.alloc(c.sim.pool(0, PoolKind::Kernarg), 64);
    // SAFETY: as above.
    unsafe { args.cast::<u64>().write(big as u64) };
    w.tool.set_passes(Some(3));
    let done = c.api.signal(1);
    c.api.submit(c.queue, dispatch(c.kernel, args, done));
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(read(big), rmw(37));
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert!(o.tier_bytes.device >= 32 * mib as u64, "{o:?}");
    let pooled = engine.pooled_bytes();
    assert!(
        pooled >= 32 * mib as u64,
        "the backing stays pooled: {pooled}"
    );
    // ...and the application then asks for all the rest of the 1 GiB pool: it gets it,
    // because the pooled backing memory is released for it.
    let rest = 1024 - 32 - 1;
    let all_else = c.api.alloc(coarse, rest * mib);
    assert!(!all_else.is_null());
    assert!(
        engine.pooled_bytes() < pooled,
        "pooled backing memory was released for the application"
    );
    c.api.free(all_else);
    w.service.stop().unwrap();
}
