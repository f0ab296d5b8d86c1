//! Checks of a replay's passes and restores (SPEC §6, §7.2, §7.4): the read-modify-write kernel
//! under each scope and restore mode, a region freed between passes, and a write outside the
//! `arguments` scope.

use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::{Outcome, Reason, RestoreMode, Scope};
use replay_cuda::{ArgBlock, DevicePtr};
use serde_json::{json, Value};

use super::expect::expect_outcome;
use crate::common::{ensure, record_json, Bench, MIB, WAIT};

/// Replay of the read-modify-write kernel: per-pass inputs identical, final memory equal to one
/// execution, outcome and byte counts as expected.
pub(super) fn replay_rmw(b: &Bench, scope: Scope, restore: RestoreMode) -> Result<Value, String> {
    let passes = 5u64;
    let a = b.alloc(64 * MIB)?;
    let other = b.alloc(32 * MIB)?;
    let third = b.alloc(16 * MIB + 8)?;
    let all = [&a, &other, &third];
    let k = 0x1234;
    let words = a.len() / 8;
    let seed = |x: u64| x * 7 + scope as u64 * 3 + restore as u64;
    for (i, x) in all.iter().enumerate() {
        b.fill(x, seed(i as u64))?;
    }
    b.rmw_plain(a.ptr(), words, k)?;
    let reference = b.digests(&all)?;
    for (i, x) in all.iter().enumerate() {
        b.fill(x, seed(i as u64))?;
    }
    b.sync()?;
    b.set_policy(Bench::policy(scope, restore))?;
    let run = b.replay(
        "replay_rmw",
        &b.k.rmw,
        b.grid(words),
        &Bench::rmw_args(a.ptr(), words, k),
        passes,
        Bench::chunk_ranges(a.ptr(), a.len()),
    )?;
    let rec = run.rec()?.clone();
    ensure(rec.outcome == Outcome::Replayed, || {
        format!(
            "outcome {} reason {}",
            rec.outcome.as_str(),
            rec.reason.as_str()
        )
    })?;
    ensure(u64::from(rec.executed_passes) == passes, || {
        format!("{} passes executed", rec.executed_passes)
    })?;
    run.inputs_identical()?;
    ensure(run.pass_digests.len() as u64 == passes, || {
        format!("{} passes digested", run.pass_digests.len())
    })?;
    let now = b.digests(&all)?;
    ensure(now == reference, || {
        let i = now.iter().zip(&reference).position(|(x, y)| x != y);
        format!("final memory differs from one execution (first chunk {i:?})")
    })?;
    let want_captured = match scope {
        // The checks ask for `all` or `arguments`; `auto` would have resolved to one of them
        // (`predicted` plans `arguments` where the regions fit the device tier, as here).
        Scope::All | Scope::Auto => all.iter().map(|x| x.len()).sum::<u64>(),
        Scope::Arguments | Scope::Predicted => a.len(),
    };
    ensure(rec.captured_bytes == want_captured, || {
        format!(
            "captured {} bytes, expected {want_captured}",
            rec.captured_bytes
        )
    })?;
    if restore == RestoreMode::Dirty {
        let touched = a.len().div_ceil(MIB);
        for (i, &r) in rec.pass_restored_bytes.iter().enumerate() {
            ensure(r <= touched * MIB, || {
                format!("pass {i} restored {r} bytes, more than {touched} touched chunks")
            })?;
        }
    }
    ensure(b.backend.memory().ordered_pending() == 0, || {
        "a restore ordered on the device was left pending".into()
    })?;
    // Restores are ordered on the device by default: the per-pass input digests above were
    // taken in PASS ENTER, after the restore on the digest stream.
    Ok(json!({
        "record": record_json(&rec),
        "wall_s": run.wall,
        "restore_order": if b.backend.memory().ordered_restores() { "device" } else { "host" },
    }))
}

/// A region freed after pass 0 (before the restore) is skipped, never written; the replay
/// completes and the kernel's buffer ends equal to one execution.
pub(super) fn freed_region(b: &Bench, restore: RestoreMode) -> Result<Value, String> {
    let a = b.alloc(8 * MIB)?;
    let doomed = Arc::new(Mutex::new(Some(b.alloc(4 * MIB)?)));
    let doomed_ptr = doomed.lock().as_ref().map(|d| d.ptr()).unwrap_or(0);
    let words = a.len() / 8;
    b.fill(&a, 31)?;
    b.rmw_plain(a.ptr(), words, 3)?;
    let reference = b.digests(&[&a])?;
    b.fill(&a, 31)?;
    if let Some(d) = doomed.lock().as_ref() {
        b.fill(d, 32)?;
    }
    b.sync()?;
    b.set_policy(Bench::policy(Scope::All, restore))?;
    {
        let d = Arc::clone(&doomed);
        b.tool.state.lock().on_pass_exit = Some(Box::new(move |pass| {
            if pass == 0 {
                // Recorded as freed in the tracker first, then cuMemFree.
                d.lock().take();
            }
        }));
    }
    let run = b.replay(
        "freed_region",
        &b.k.rmw,
        b.grid(words),
        &Bench::rmw_args(a.ptr(), words, 3),
        4,
        Bench::chunk_ranges(a.ptr(), a.len()),
    );
    b.tool.state.lock().on_pass_exit = None;
    let run = run?;
    let rec = run.rec()?.clone();
    ensure(doomed.lock().is_none(), || "the hook did not run".into())?;
    expect_outcome(&rec, Outcome::Replayed, None, 4)?;
    ensure(rec.captured_regions == 2, || {
        format!("{} regions captured", rec.captured_regions)
    })?;
    // Restores after the free skip the freed region: never more than the live buffer.
    ensure(
        rec.pass_restored_bytes
            .iter()
            .skip(1)
            .all(|&x| x <= a.len()),
        || {
            format!(
                "restored {:?} bytes per pass, the live buffer has {}",
                rec.pass_restored_bytes,
                a.len()
            )
        },
    )?;
    run.inputs_identical()?;
    ensure(b.digests(&[&a])? == reference, || {
        "final memory differs from one execution".into()
    })?;
    ensure(
        b.backend
            .allocator()
            .tracker()
            .lookup(b.backend.agent_id(), doomed_ptr)
            .is_none(),
        || "the freed region is still tracked".into(),
    )?;
    Ok(json!({ "record": record_json(&rec) }))
}

/// A kernel writing through a pointer stored in device memory, outside its `arguments` scope:
/// truncated after pass 0 with `write_outside_scope`, memory equal to one execution, and the
/// next launch of it replayed with scope `all`.
pub(super) fn write_outside_scope(b: &Bench) -> Result<Value, String> {
    let holder = b.alloc(4096)?;
    let target = b.alloc(8 * MIB)?;
    let words = target.len() / 8;
    let mem = b.backend.memory();
    mem.write_device(holder.ptr(), &target.ptr().to_le_bytes(), WAIT)
        .map_err(|e| e.to_string())?;
    let args = ArgBlock::new()
        .arg(DevicePtr(holder.ptr()))
        .arg(words)
        .arg(5u64);
    let cfg = b.grid(words);
    b.fill(&target, 41)?;
    // SAFETY: kr_indirect(u64* const* holder, u64 n, u64 k) writes n words through holder[0],
    // which points to `target` (n words).
    unsafe {
        b.backend
            .launch_plain(b.service, &b.k.indirect, cfg, &b.queue, &args)
    }
    .map_err(|e| e.to_string())?;
    let reference = b.digests(&[&holder, &target])?;
    b.fill(&target, 41)?;
    b.sync()?;
    b.set_policy(Bench::policy(Scope::Arguments, RestoreMode::Full))?;
    let first = b.replay("write_outside_scope", &b.k.indirect, cfg, &args, 5, vec![])?;
    let rec = first.rec()?.clone();
    expect_outcome(&rec, Outcome::Truncated, Some(Reason::WriteOutsideScope), 1)?;
    ensure(b.digests(&[&holder, &target])? == reference, || {
        "memory after the truncated replay differs from one execution".into()
    })?;
    // Remembered: the next launch uses scope `all` and replays in full.
    b.fill(&target, 41)?;
    b.sync()?;
    let second = b.replay(
        "write_outside_scope/again",
        &b.k.indirect,
        cfg,
        &args,
        5,
        vec![],
    )?;
    let rec2 = second.rec()?.clone();
    ensure(
        rec2.outcome == Outcome::Replayed && rec2.scope == Scope::All && rec2.executed_passes == 5,
        || {
            format!(
                "second launch: outcome {} scope {} passes {}",
                rec2.outcome.as_str(),
                rec2.scope.as_str(),
                rec2.executed_passes
            )
        },
    )?;
    ensure(b.digests(&[&holder, &target])? == reference, || {
        "memory after the second replay differs from one execution".into()
    })?;
    Ok(json!({ "first": record_json(&rec), "second": record_json(&rec2) }))
}
