//! Checks of the snapshot's backing memory over its life (SPEC §7.3, §9.2): backing freed behind
//! a spinning kernel only once the device is idle, and pooled backing that gives way to the
//! program's own allocation.

use std::time::{Duration, Instant};

use replay_core::{Outcome, Reason, RestoreMode, Scope};
use replay_cuda::{ArgBlock, DevicePtr, LaunchConfig};
use serde_json::{json, Value};

use super::expect::{expect_outcome, SHORT};
use crate::common::{ensure, record_json, Bench, MIB, WAIT};

/// A pass that spins past its bound: the window truncates within its bound and gives back its
/// backing; the free (`cuMemFree` waits for the whole device) happens later, outside the
/// window, once the device is idle, so the launch returns long before the kernel ends.
pub(super) fn free_behind_spin(b: &Bench) -> Result<Value, String> {
    let flag = b.alloc(8)?;
    let data = b.alloc(256 * MIB)?;
    b.fill(&data, 95)?;
    b.backend
        .memory()
        .write_device(flag.ptr(), &0u64.to_le_bytes(), WAIT)
        .map_err(|e| e.to_string())?;
    b.sync()?;
    b.backend.engine().release_pools();
    b.backend.memory().release_deferred(true);
    let mut p = Bench::policy(Scope::All, RestoreMode::Full);
    p.pool_keep_bytes = 0;
    p.pass_timeout = SHORT;
    b.set_policy(p)?;
    // A module of its own: the stuck-pass check already marked the bench's kr_spin as a kernel
    // not to replay again.
    let module = b
        .backend
        .modules()
        .compile_and_load(crate::common::KERNELS_SRC, "kernels_free.cu", &[])
        .map_err(|e| e.to_string())?;
    let spin_fn = module.function("kr_spin").map_err(|e| e.to_string())?;
    let spin = Duration::from_secs(3);
    let args = ArgBlock::new()
        .arg(spin.as_nanos() as u64)
        .arg(DevicePtr(flag.ptr()));
    let t = Instant::now();
    let run = b.replay(
        "free_behind_spin",
        &spin_fn,
        LaunchConfig::linear(1, 32),
        &args,
        3,
        vec![],
    )?;
    let wall = t.elapsed().as_secs_f64();
    let rec = run.rec()?.clone();
    let deferred = b.backend.memory().deferred_bytes();
    expect_outcome(&rec, Outcome::Truncated, Some(Reason::PassDrainStuck), 1)?;
    ensure(wall < spin.as_secs_f64() / 2.0, || {
        format!("the launch took {wall:.2} s beside a {spin:?} kernel")
    })?;
    ensure(rec.captured_bytes > 0 && deferred > 0, || {
        format!(
            "captured {} bytes, {deferred} bytes deferred",
            rec.captured_bytes
        )
    })?;
    b.sync()?;
    let t = Instant::now();
    let left = b.backend.memory().release_deferred(false);
    let release = t.elapsed().as_secs_f64();
    ensure(left == 0, || {
        format!("{left} bytes still deferred when idle")
    })?;
    Ok(json!({
        "record": record_json(&rec),
        "launch_seconds": wall,
        "deferred_bytes": deferred,
        "release_seconds_when_idle": release,
    }))
}

/// The library's pooled backing gives way to the program: after a replay whose backing stays
/// pooled (the bench's policy keeps it), an allocation of all the free memory plus half of
/// that backing succeeds (out of memory, released, retried), and memory equals one execution.
pub(super) fn backing_gives_way(b: &Bench) -> Result<Value, String> {
    b.backend.release_backing();
    let a = b.alloc(512 * MIB)?;
    let words = a.len() / 8;
    let k = 0x77;
    b.fill(&a, 41)?;
    b.rmw_plain(a.ptr(), words, k)?;
    let reference = b.digests(&[&a])?;
    b.fill(&a, 41)?;
    b.sync()?;
    b.set_policy(Bench::policy(Scope::All, RestoreMode::Full))?;
    let run = b.replay(
        "backing_gives_way",
        &b.k.rmw,
        b.grid(words),
        &Bench::rmw_args(a.ptr(), words, k),
        3,
        vec![],
    )?;
    let rec = run.rec()?.clone();
    expect_outcome(&rec, Outcome::Replayed, None, 3)?;
    let held = b.backend.engine().pooled_bytes() + b.backend.memory().deferred_bytes();
    ensure(held >= a.len(), || format!("{held} bytes of backing held"))?;
    let free = b
        .backend
        .memory()
        .capacity_report()
        .map_err(|e| e.to_string())?
        .device_free;
    let want = free + held / 2;
    let big = b
        .alloc(want)
        .map_err(|e| format!("{want} bytes ({free} free, {held} of backing held): {e}"))?;
    let left = b.backend.engine().pooled_bytes() + b.backend.memory().deferred_bytes();
    drop(big);
    ensure(left == 0, || format!("{left} bytes of backing still held"))?;
    ensure(b.digests(&[&a])? == reference, || {
        "memory after the replay differs from one execution".into()
    })?;
    Ok(json!({ "held_bytes": held, "allocated_bytes": want, "record": record_json(&rec) }))
}
