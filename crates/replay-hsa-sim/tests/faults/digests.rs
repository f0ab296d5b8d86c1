//! Digests: a failed scope-check digest, host digests restoring only the chunks a pass changed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use replay_core::{Operation, Phase, Policy, Scope};
use replay_hsa_sim::{FaultMode, PoolKind, SimFault};

use crate::common::{dispatch, read, rmw, rmw_kernel, sim};
use crate::harness::{delta, hook, policy, world, Case};

#[test]
fn a_failed_scope_check_digest_truncates_scope_check_failed() {
    let (w, _g) = world();
    w.service
        .set_policy(Policy {
            scope: Scope::Arguments,
            ..policy()
        })
        .unwrap();
    w.service.start().unwrap();
    let c = Case::new(0, 30);
    // A tracked region outside the arguments' scope: the check digests it after each pass.
    let outside = c.api.alloc(c.sim.pool(0, PoolKind::DeviceCoarse), 4096);
    assert!(!outside.is_null());
    let inj = c.sim.injector();
    w.tool.add_hook(hook(move |op, phase, pass| {
        if (op, phase, pass) == (Operation::Pass, Phase::Exit, 0) {
            inj.inject(SimFault::MemoryCopyFails, FaultMode::Always);
        }
    }));
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    let s = w.service.summary();
    assert_eq!(
        delta(&s.truncated, &before.truncated, "scope_check_failed"),
        1,
        "{s:?}"
    );
    assert!(c.sim.fired("memory_copy_fails") >= 1);
    // The check failed after pass 0: that pass's results stand, nothing ran again.
    assert_eq!(c.runs.load(Ordering::SeqCst), 1);
    assert_eq!(read(c.buf), rmw(30), "memory equals one execution");
    w.service.stop().unwrap();
}

#[test]
fn host_digests_restore_only_the_chunks_a_pass_changed_and_check_the_scope_in_slices() {
    let (w, _g) = world();
    w.service
        .set_policy(Policy {
            scope: Scope::Arguments,
            restore: replay_core::RestoreMode::Dirty,
            ..policy()
        })
        .unwrap();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    // 8 MiB argument buffer (more than one 4 MiB staging slice); the kernel changes its
    // first word only. A 9 MiB region outside the scope is digested by the scope check.
    let mib = 1usize << 20;
    let buf = api
        .alloc(sim.pool(0, PoolKind::DeviceCoarse), 8 * mib)
        .cast::<u64>();
    let outside = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 9 * mib);
    let args = api.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    // SAFETY: fresh host-visible simulated allocations.
    unsafe {
        buf.write_volatile(35);
        outside.write_bytes(7, 9 * mib);
        args.cast::<u64>().write(buf as u64);
    }
    let q = api.queue(sim.gpu_agents()[0]);
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read(buf), rmw(35), "memory equals one execution");
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
    let o = w
        .tool
        .outcomes()
        .last()
        .cloned()
        .expect("CONFIG EXIT has the outcome");
    assert_eq!(
        o.captured_bytes,
        8 * mib as u64,
        "the arguments' region only: {o:?}"
    );
    assert_eq!(
        o.pass_restored_bytes.as_slice(),
        &[0, mib as u64, mib as u64],
        "one changed 1 MiB chunk restored before each later pass: {o:?}"
    );
    assert_eq!(
        o.pass_compared_bytes.as_slice(),
        &[0, 8 * mib as u64, 8 * mib as u64],
        "the captured chunks were compared before each later pass: {o:?}"
    );
    // A kernel that also writes the outside region's last slice (past the first 4 MiB
    // staging slice): the scope check after pass 0 must see it.
    let r = runs.clone();
    let far = outside as u64 + 9 * mib as u64 - 8;
    let k2 = sim.register_kernel("rmw-and-outside", move |d| {
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        d.write_u64(far, v)?;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    runs.store(0, Ordering::SeqCst);
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(k2, args, done));
    assert_eq!(api.wait_zero(done), 0);
    let s = w.service.summary();
    assert_eq!(
        delta(&s.truncated, &before.truncated, "write_outside_scope"),
        1,
        "{s:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "nothing ran after the offending pass"
    );
    assert_eq!(read(buf), rmw(rmw(35)), "memory equals one execution");
    assert_eq!(read(far as *const u64), rmw(35));
    w.service.stop().unwrap();
}
