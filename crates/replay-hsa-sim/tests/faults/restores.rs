//! Restores: regions freed or reallocated during a pass are skipped, a refused copy is retried.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use replay_core::{Operation, Phase};
use replay_hsa_sim::{FaultMode, PoolKind, SimFault};

use crate::common::{buffer_and_args, dispatch, read, rmw, sim};
use crate::harness::{hook, world, Case};

#[test]
fn a_region_freed_by_the_tool_after_pass_0_is_skipped_by_restore() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let gpu = 0;
    let (buf, args) = buffer_and_args(&sim, &api, gpu, 11);
    // A second region the kernel writes while it is alive (the kernel skips it once freed).
    let scratch = api
        .alloc(sim.pool(gpu, PoolKind::DeviceCoarse), 4096)
        .cast::<u64>();
    // SAFETY: a fresh host-visible simulated allocation.
    unsafe { scratch.write_volatile(1) };
    let free = w.free.clone();
    let (r, sc) = (runs.clone(), scratch as u64);
    let k = sim.register_kernel("rmw-and-scratch", move |d| {
        if free.freed.load(Ordering::SeqCst) == 0 {
            let v = d.read_u64(sc)?;
            d.write_u64(sc, v + 1)?;
        }
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    let q = api.queue(sim.gpu_agents()[gpu]);
    w.tool.set_passes(Some(3));
    *w.free.func.lock().unwrap() = Some(api.pool_free);
    w.free.target.store(scratch as u64, Ordering::SeqCst);
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(done), 0, "the completion signal fired once");
    assert_eq!(w.free.freed.load(Ordering::SeqCst), 1, "the tool freed it");
    assert_eq!(runs.load(Ordering::SeqCst), 3, "three passes ran");
    assert_eq!(read(buf), rmw(11), "memory equals one execution");
    assert!(sim.faults().is_empty(), "{:?}", sim.faults());
    let s = w.service.summary();
    assert_eq!(
        s.replayed - before.replayed,
        1,
        "the window completed: {s:?}"
    );
    w.service.stop().unwrap();
}

#[test]
fn a_restore_copy_refused_once_is_retried_and_the_replay_completes() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(1, 28);
    let inj = c.sim.injector();
    w.tool.add_hook(hook(move |op, phase, pass| {
        if (op, phase, pass) == (Operation::Pass, Phase::Exit, 0) {
            inj.inject(SimFault::AsyncCopyRefused, FaultMode::Once);
        }
    }));
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(
        c.sim.fired("async_copy_refused"),
        1,
        "the restore met the fault"
    );
    assert_eq!(c.runs.load(Ordering::SeqCst), 3);
    assert_eq!(read(c.buf), rmw(28), "memory equals one execution");
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
    w.service.stop().unwrap();
}

#[test]
fn a_region_reallocated_at_the_same_address_during_a_pass_is_not_restored() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 32);
    let pool = c.sim.pool(0, PoolKind::DeviceCoarse);
    let old = c.api.alloc(pool, 4096);
    // SAFETY: a fresh host-visible simulated allocation.
    unsafe { old.cast::<u64>().write_volatile(5) };
    let (free, alloc) = (c.api.pool_free, c.api.pool_allocate);
    let again = Arc::new(AtomicU64::new(0));
    let a2 = again.clone();
    let old_addr = old as u64;
    w.tool.add_hook(hook(move |op, phase, pass| {
        if (op, phase, pass) == (Operation::Pass, Phase::Exit, 0) {
            let mut p = std::ptr::null_mut();
            // SAFETY: the wrapped free and allocate of the application's entries; the new
            // block is written as the application's new data.
            unsafe {
                assert_eq!(free(old_addr as *mut c_void), 0);
                assert_eq!(alloc(pool, 4096, 0, &mut p), 0);
                p.cast::<u64>().write_volatile(0xdead);
            }
            a2.store(p as u64, Ordering::SeqCst);
        }
    }));
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    assert_eq!(
        again.load(Ordering::SeqCst),
        old_addr,
        "the runtime reused the address (what this test is about)"
    );
    assert_eq!(
        read(old.cast()),
        0xdead,
        "the new allocation's data was not overwritten"
    );
    assert_eq!(read(c.buf), rmw(32), "memory equals one execution");
    assert_eq!(c.runs.load(Ordering::SeqCst), 3);
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
    w.service.stop().unwrap();
}
