//! Correctness on the GPU: each check prints PASS or FAIL and returns a JSON row.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::{
    CopyOp, DeviceMemory, DigestOp, MemLoc, Outcome, Reason, RestoreMode, Scope, Tier,
};
use replay_cuda::{ArgBlock, DevicePtr, LaunchConfig, QueueKind};
use serde_json::{json, Value};

use super::common::{ensure, record_json, Bench, Row, GLOBALS_SRC, MIB, WAIT};

pub fn run_all(b: &Bench, rows: &mut Vec<Row>) {
    const C: &str = "correctness";
    rows.push(Row::check(C, "param_layouts", param_layouts(b)));
    rows.push(Row::check(C, "digest_equivalence", digest_equivalence(b)));
    rows.push(Row::check(C, "copy_tiers", copy_tiers(b)));
    for scope in [Scope::All, Scope::Arguments] {
        for restore in [RestoreMode::Full, RestoreMode::Dirty] {
            rows.push(Row::check(
                C,
                format!("replay_rmw/{}/{}", scope.as_str(), restore.as_str()),
                replay_rmw(b, scope, restore),
            ));
        }
    }
    for scope in [Scope::All, Scope::Arguments] {
        rows.push(Row::check(
            C,
            format!("module_variables/{}", scope.as_str()),
            module_variables(b, scope),
        ));
    }
    for restore in [RestoreMode::Full, RestoreMode::Dirty] {
        rows.push(Row::check(
            C,
            format!("freed_region/{}", restore.as_str()),
            freed_region(b, restore),
        ));
    }
    rows.push(Row::check(C, "write_outside_scope", write_outside_scope(b)));
    rows.push(Row::check(C, "backing_gives_way", backing_gives_way(b)));
    rows.push(Row::check(
        C,
        "managed_argument",
        untracked_argument(b, false),
    ));
    rows.push(Row::check(
        C,
        "pinned_host_argument",
        untracked_argument(b, true),
    ));
    rows.push(Row::check(
        C,
        "capture/virtual_mapping",
        capture_vmm(b, false),
    ));
    rows.push(Row::check(
        C,
        "capture/stream_ordered_pool",
        capture_vmm(b, true),
    ));
    rows.push(Row::check(C, "decline/footprint_budget", decline_budget(b)));
    rows.push(Row::check(
        C,
        "decline/snapshot_failed",
        decline_snapshot(b),
    ));
    rows.push(Row::check(C, "tier_fallback", tier_fallback(b)));
    rows.push(Row::check(
        C,
        "decline/callback_failed",
        decline_callback(b),
    ));
    for which in [Drain::Queue, Drain::Agent, Drain::CopyFence] {
        rows.push(Row::check(
            C,
            format!("decline/{}", which.reason().as_str()),
            decline_drain(b, which),
        ));
    }
    rows.push(Row::check(C, "truncate/pass_drain_stuck", pass_stuck(b)));
    rows.push(Row::check(C, "reentrant_dispatch", reentrant(b)));
    rows.push(Row::check(
        C,
        "capture/launch_into_capturing_stream",
        capture_launch(b),
    ));
    for known in [false, true] {
        rows.push(Row::check(
            C,
            format!(
                "capture/window_beside_global_capture/{}",
                if known {
                    "known_stream"
                } else {
                    "unknown_stream"
                }
            ),
            capture_beside(b, known),
        ));
    }
    rows.push(Row::check(C, "concurrent_copy", concurrent_copy(b)));
    rows.push(Row::check(
        C,
        "free_behind_spinning_kernel",
        free_behind_spin(b),
    ));
    // Leave nothing behind for the measurements.
    b.backend.engine().release_pools();
    let _ = b.set_policy(Bench::policy(Scope::All, RestoreMode::Full));
}

/// The argument blocks the bench builds have the layout the driver reports for each kernel
/// (`cuFuncGetParamInfo`): what launch capture in intercept mode relies on.
fn param_layouts(b: &Bench) -> Result<Value, String> {
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
fn digest_equivalence(b: &Bench) -> Result<Value, String> {
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
fn copy_tiers(b: &Bench) -> Result<Value, String> {
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

/// Replay of the read-modify-write kernel: per-pass inputs identical, final memory equal to one
/// execution, outcome and byte counts as expected.
fn replay_rmw(b: &Bench, scope: Scope, restore: RestoreMode) -> Result<Value, String> {
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

/// Module variables are enumerated from the cubin, captured and restored.
fn module_variables(b: &Bench, scope: Scope) -> Result<Value, String> {
    use replay_memory::ModuleVariables;
    let m = b
        .backend
        .modules()
        .compile_and_load(GLOBALS_SRC, "globals.cu", &[])
        .map_err(|e| e.to_string())?;
    let vars = b
        .backend
        .modules()
        .enumerate(b.backend.agent_id())
        .map_err(|e| format!("enumeration: {e}"))?;
    let find = |n: &str| vars.iter().find(|v| v.name.contains(n)).cloned();
    let counter = find("kr_counter").ok_or("kr_counter not enumerated")?;
    let table = find("kr_table").ok_or("kr_table not enumerated")?;
    let hidden = find("kr_hidden").ok_or("the static kr_hidden not enumerated")?;
    let konst = find("kr_const").ok_or("kr_const not enumerated")?;
    ensure(
        counter.size == 8 && table.size == 8192 && hidden.size == 128,
        || format!("sizes {} {} {}", counter.size, table.size, hidden.size),
    )?;
    ensure(konst.read_only && !table.read_only, || {
        "read-only flags".into()
    })?;
    let (caddr, _) = m.global("kr_counter").map_err(|e| e.to_string())?;
    ensure(caddr == counter.base, || "kr_counter address".into())?;

    let mem = b.backend.memory();
    let set = |seed: u64| -> Result<(), String> {
        let t: Vec<u8> = (0..1024u64)
            .flat_map(|i| ((i * 2654435761) ^ seed).to_le_bytes())
            .collect();
        let h: Vec<u8> = (0..16u64).flat_map(|i| (i + seed).to_le_bytes()).collect();
        mem.write_device(table.base, &t, WAIT)
            .and_then(|()| mem.write_device(hidden.base, &h, WAIT))
            .and_then(|()| mem.write_device(counter.base, &100u64.to_le_bytes(), WAIT))
            .map_err(|e| e.to_string())
    };
    let func = m.function("kr_globals").map_err(|e| e.to_string())?;
    let args = ArgBlock::new().arg(7u64);
    let cfg = LaunchConfig::linear(4, 256);
    let snapshot = |b: &Bench| -> Result<Vec<u8>, String> {
        let mut v = b.read(table.base, 8192)?;
        v.extend(b.read(hidden.base, 128)?);
        v.extend(b.read(counter.base, 8)?);
        Ok(v)
    };
    // The static variable's resolved address is where the kernel really keeps it.
    set(5)?;
    let out = b.alloc(128)?;
    let read_fn = m.function("kr_hidden_read").map_err(|e| e.to_string())?;
    // SAFETY: kr_hidden_read(u64* out) writes 16 words to `out`, 128 bytes we own.
    unsafe {
        b.backend.launch_plain(
            b.service,
            &read_fn,
            LaunchConfig::linear(1, 32),
            &b.queue,
            &ArgBlock::new().arg(DevicePtr(out.ptr())),
        )
    }
    .map_err(|e| e.to_string())?;
    ensure(b.read(out.ptr(), 128)? == b.read(hidden.base, 128)?, || {
        "the enumerated address of kr_hidden is not where the kernel keeps it".into()
    })?;
    drop(out);

    // SAFETY: kr_globals(u64 k) touches only the module's own globals.
    unsafe {
        b.backend
            .launch_plain(b.service, &func, cfg, &b.queue, &args)
    }
    .map_err(|e| e.to_string())?;
    let reference = snapshot(b)?;
    set(5)?;
    b.set_policy(Bench::policy(scope, RestoreMode::Full))?;
    let run = b.replay(
        "module_variables",
        &func,
        cfg,
        &args,
        4,
        vec![(table.base, 8192), (hidden.base, 128), (counter.base, 8)],
    )?;
    let rec = run.rec()?.clone();
    expect_outcome(&rec, Outcome::Replayed, None, 4)?;
    run.inputs_identical()?;
    let now = snapshot(b)?;
    ensure(now == reference, || {
        "module variables differ from one execution".into()
    })?;
    let counter_now = u64::from_le_bytes(now[now.len() - 8..].try_into().unwrap_or_default());
    ensure(counter_now == 101, || {
        format!("kr_counter = {counter_now}, expected 101")
    })?;
    drop(func);
    drop(read_fn);
    drop(m);
    let after = b
        .backend
        .modules()
        .enumerate(b.backend.agent_id())
        .map_err(|e| format!("enumeration after unload: {e}"))?;
    ensure(!after.iter().any(|v| v.name.contains("kr_counter")), || {
        "the unloaded module's variables are still enumerated".into()
    })?;
    Ok(json!({
        "variables": vars.iter().map(|v| json!({"name": v.name, "size": v.size, "read_only": v.read_only})).collect::<Vec<_>>(),
        "record": record_json(&rec),
    }))
}

/// A region freed after pass 0 (before the restore) is skipped, never written; the replay
/// completes and the kernel's buffer ends equal to one execution.
fn freed_region(b: &Bench, restore: RestoreMode) -> Result<Value, String> {
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
fn write_outside_scope(b: &Bench) -> Result<Value, String> {
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

/// Managed or pinned host memory an argument points into is captured by `arguments`.
fn untracked_argument(b: &Bench, pinned: bool) -> Result<Value, String> {
    let alloc = b.backend.allocator();
    let len = 4 * MIB;
    let m = if pinned {
        alloc.alloc_pinned_host(len)
    } else {
        alloc.alloc_managed(len)
    }
    .map_err(|e| e.to_string())?;
    let words = len / 8;
    let read = |b: &Bench| -> Result<Vec<u8>, String> {
        b.sync()?;
        match m.host_ptr() {
            Some(h) => {
                // SAFETY: pinned host memory of `len` bytes we own; the GPU is idle (synced).
                let s = unsafe { std::slice::from_raw_parts(h as *const u8, len as usize) };
                Ok(s.to_vec())
            }
            None => b.read(m.ptr(), len),
        }
    };
    b.fill_words(m.ptr(), words, 51)?;
    b.rmw_plain(m.ptr(), words, 9)?;
    let reference = read(b)?;
    b.fill_words(m.ptr(), words, 51)?;
    b.sync()?;
    b.set_policy(Bench::policy(Scope::Arguments, RestoreMode::Full))?;
    let run = b.replay(
        if pinned {
            "pinned_argument"
        } else {
            "managed_argument"
        },
        &b.k.rmw,
        b.grid(words),
        &Bench::rmw_args(m.ptr(), words, 9),
        4,
        Bench::chunk_ranges(m.ptr(), len),
    )?;
    let rec = run.rec()?.clone();
    ensure(
        rec.outcome == Outcome::Replayed && rec.captured_bytes == len,
        || {
            format!(
                "outcome {} reason {} captured {}",
                rec.outcome.as_str(),
                rec.reason.as_str(),
                rec.captured_bytes
            )
        },
    )?;
    run.inputs_identical()?;
    ensure(read(b)? == reference, || {
        "final memory differs from one execution".into()
    })?;
    Ok(json!({ "record": record_json(&rec) }))
}

/// The common shape of a decline check: the kernel runs exactly once and memory equals one
/// execution.
fn expect_once(
    b: &Bench,
    label: &str,
    want: (Outcome, Reason),
    prepare: impl FnOnce(&Bench) -> Result<(), String>,
    undo: impl FnOnce(&Bench),
) -> Result<Value, String> {
    let a = b.alloc(8 * MIB)?;
    let words = a.len() / 8;
    b.fill(&a, 61)?;
    b.rmw_plain(a.ptr(), words, 2)?;
    let reference = b.digests(&[&a])?;
    b.fill(&a, 61)?;
    b.sync()?;
    let r = prepare(b).and_then(|()| {
        b.replay(
            label,
            &b.k.rmw,
            b.grid(words),
            &Bench::rmw_args(a.ptr(), words, 2),
            4,
            vec![],
        )
    });
    undo(b);
    let run = r?;
    let rec = run.rec()?.clone();
    ensure((rec.outcome, rec.reason) == want, || {
        format!(
            "outcome {} reason {}, expected {} {}",
            rec.outcome.as_str(),
            rec.reason.as_str(),
            want.0.as_str(),
            want.1.as_str()
        )
    })?;
    ensure(rec.executed_passes == 1, || {
        format!("{} executions", rec.executed_passes)
    })?;
    ensure(b.digests(&[&a])? == reference, || {
        "memory differs from one execution".into()
    })?;
    Ok(json!({ "record": record_json(&rec) }))
}

/// A virtual-memory mapping (`cuMemCreate` / `cuMemMap` / `cuMemSetAccess`) or stream-ordered
/// pool memory (`cuMemAllocAsync`) on the device (SPEC §7.1 row): with `decline_on_vmem=true`
/// a dispatch declines `untracked_memory` while one is live (run once); under the default
/// policy (`decline_on_vmem` off) a kernel writing into it replays, under `all` and
/// `arguments`, with memory equal to one execution.
fn capture_vmm(b: &Bench, pool: bool) -> Result<Value, String> {
    let alloc = b.backend.allocator();
    let v = if pool {
        alloc.alloc_async(2 * MIB, &b.queue)
    } else {
        alloc.alloc_virtual(2 * MIB)
    }
    .map_err(|e| e.to_string())?;
    let declined = expect_once(
        b,
        "capture_vmm/decline_on_vmem",
        (Outcome::Declined, Reason::UntrackedMemory),
        |b| {
            let mut p = Bench::policy(Scope::All, RestoreMode::Full);
            p.decline_on_vmem = true;
            b.set_policy(p)
        },
        |_| {},
    )?;
    let words = v.len() / 8;
    b.fill_words(v.ptr(), words, 62)?;
    b.rmw_plain(v.ptr(), words, 4)?;
    let reference = b.read(v.ptr(), v.len())?;
    let mut out = serde_json::Map::new();
    out.insert("decline_on_vmem".into(), declined);
    for scope in [Scope::All, Scope::Arguments] {
        b.fill_words(v.ptr(), words, 62)?;
        b.sync()?;
        b.set_policy(Bench::policy(scope, RestoreMode::Full))?;
        let run = b.replay(
            "capture_vmm/argument",
            &b.k.rmw,
            b.grid(words),
            &Bench::rmw_args(v.ptr(), words, 4),
            4,
            vec![],
        )?;
        let rec = run.rec()?.clone();
        ensure(
            rec.outcome == Outcome::Replayed && rec.executed_passes == 4,
            || {
                format!(
                    "{}: outcome {} reason {} after {} passes",
                    scope.as_str(),
                    rec.outcome.as_str(),
                    rec.reason.as_str(),
                    rec.executed_passes
                )
            },
        )?;
        ensure(b.read(v.ptr(), v.len())? == reference, || {
            format!("{}: memory differs from one execution", scope.as_str())
        })?;
        out.insert(scope.as_str().into(), record_json(&rec));
    }
    b.sync()?;
    drop(v);
    b.sync()?;
    Ok(Value::Object(out))
}

fn decline_budget(b: &Bench) -> Result<Value, String> {
    expect_once(
        b,
        "decline_budget",
        (Outcome::Declined, Reason::FootprintBudget),
        |b| {
            let mut p = Bench::policy(Scope::All, RestoreMode::Full);
            p.max_snapshot_bytes = MIB;
            b.set_policy(p)
        },
        |_| {},
    )
}

fn decline_snapshot(b: &Bench) -> Result<Value, String> {
    let mem = b.backend.memory();
    expect_once(
        b,
        "decline_snapshot",
        (Outcome::Declined, Reason::SnapshotFailed),
        |b| {
            b.backend.engine().release_pools();
            mem.inject_alloc_failure(&Tier::ALL);
            b.set_policy(Bench::policy(Scope::All, RestoreMode::Full))
        },
        |_| mem.inject_alloc_failure(&[]),
    )
}

/// Device backing memory that cannot be allocated (though the driver reported it free): the
/// snapshot moves to the host tiers and the replay completes.
fn tier_fallback(b: &Bench) -> Result<Value, String> {
    let mem = b.backend.memory();
    let a = b.alloc(8 * MIB)?;
    let words = a.len() / 8;
    b.fill(&a, 67)?;
    b.rmw_plain(a.ptr(), words, 5)?;
    let reference = b.digests(&[&a])?;
    b.fill(&a, 67)?;
    b.sync()?;
    b.backend.engine().release_pools();
    mem.inject_alloc_failure(&[Tier::Device]);
    let run = b
        .set_policy(Bench::policy(Scope::All, RestoreMode::Full))
        .and_then(|()| {
            b.replay(
                "tier_fallback",
                &b.k.rmw,
                b.grid(words),
                &Bench::rmw_args(a.ptr(), words, 5),
                3,
                vec![(a.ptr(), a.len())],
            )
        });
    mem.inject_alloc_failure(&[]);
    b.backend.engine().release_pools();
    let run = run?;
    let rec = run.rec()?.clone();
    expect_outcome(&rec, Outcome::Replayed, Some(Reason::None), 3)?;
    ensure(
        rec.tier_bytes.device == 0
            && rec.tier_bytes.pinned + rec.tier_bytes.pageable == rec.captured_bytes,
        || {
            format!(
                "tiers {:?} for {} bytes",
                rec.tier_bytes, rec.captured_bytes
            )
        },
    )?;
    run.inputs_identical()?;
    ensure(b.digests(&[&a])? == reference, || {
        "memory differs from one execution".into()
    })?;
    Ok(record_json(&rec))
}

fn decline_callback(b: &Bench) -> Result<Value, String> {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = expect_once(
        b,
        "decline_callback",
        (Outcome::Declined, Reason::CallbackFailed),
        |b| {
            b.tool.state.lock().panic_in_config = true;
            b.set_policy(Bench::policy(Scope::All, RestoreMode::Full))
        },
        |b| b.tool.state.lock().panic_in_config = false,
    );
    std::panic::set_hook(prev);
    r
}

#[derive(Debug, Clone, Copy)]
enum Drain {
    Queue,
    Agent,
    CopyFence,
}

impl Drain {
    fn reason(self) -> Reason {
        match self {
            Self::Queue => Reason::QueueDrainStuck,
            Self::Agent => Reason::AgentDrainStuck,
            Self::CopyFence => Reason::CopyFenceStuck,
        }
    }
}

const SPIN: Duration = Duration::from_millis(1500);
const SHORT: Duration = Duration::from_millis(300);

/// A kernel spinning on the dispatch's stream, another compute stream, or a copy stream makes
/// the matching drain time out: declined, run once.
fn decline_drain(b: &Bench, which: Drain) -> Result<Value, String> {
    let flag = b.alloc(8)?;
    let other = match which {
        Drain::Queue => Arc::clone(&b.queue),
        Drain::Agent => b
            .backend
            .create_queue(QueueKind::Compute)
            .map_err(|e| e.to_string())?,
        Drain::CopyFence => b
            .backend
            .create_queue(QueueKind::Copy)
            .map_err(|e| e.to_string())?,
    };
    let t = Instant::now();
    let r = expect_once(
        b,
        "decline_drain",
        (Outcome::Declined, which.reason()),
        |b| {
            let mut p = Bench::policy(Scope::All, RestoreMode::Full);
            p.drain_timeout = SHORT;
            b.set_policy(p)?;
            let args = ArgBlock::new()
                .arg(SPIN.as_nanos() as u64)
                .arg(DevicePtr(flag.ptr()));
            // SAFETY: kr_spin(u64 ns, u64* flag) writes one word to `flag` (8 bytes we own).
            unsafe {
                b.backend.launch_plain(
                    b.service,
                    &b.k.spin,
                    LaunchConfig::linear(1, 32),
                    &other,
                    &args,
                )
            }
            .map_err(|e| e.to_string())
        },
        |_| {},
    );
    b.sync_queue(&other)?;
    let spent = t.elapsed().as_secs_f64();
    r.map(|v| json!({ "result": v, "seconds": spent }))
}

/// A pass that does not finish within `pass_timeout`: truncated, no restore, one execution;
/// the kernel is not replayed again.
fn pass_stuck(b: &Bench) -> Result<Value, String> {
    let flag = b.alloc(8)?;
    b.backend
        .memory()
        .write_device(flag.ptr(), &0u64.to_le_bytes(), WAIT)
        .map_err(|e| e.to_string())?;
    let mut p = Bench::policy(Scope::All, RestoreMode::Full);
    p.pass_timeout = SHORT;
    b.set_policy(p)?;
    let args = ArgBlock::new()
        .arg(SPIN.as_nanos() as u64)
        .arg(DevicePtr(flag.ptr()));
    let cfg = LaunchConfig::linear(1, 32);
    let run = b.replay("pass_stuck", &b.k.spin, cfg, &args, 3, vec![])?;
    let rec = run.rec()?.clone();
    expect_outcome(&rec, Outcome::Truncated, Some(Reason::PassDrainStuck), 1)?;
    let count = |b: &Bench| -> Result<u64, String> {
        let v = b.read(flag.ptr(), 8)?;
        Ok(u64::from_le_bytes(v.try_into().unwrap_or_default()))
    };
    ensure(count(b)? == 1, || "the kernel ran other than once".into())?;
    let again = b.replay("pass_stuck/again", &b.k.spin, cfg, &args, 3, vec![])?;
    let rec2 = again.rec()?.clone();
    ensure(
        rec2.outcome == Outcome::Declined && rec2.reason == Reason::PassDrainStuck,
        || {
            format!(
                "second launch: outcome {} reason {}",
                rec2.outcome.as_str(),
                rec2.reason.as_str()
            )
        },
    )?;
    ensure(count(b)? == 2, || {
        "the second launch ran other than once".into()
    })?;
    Ok(json!({ "first": record_json(&rec), "second": record_json(&rec2) }))
}

/// A kernel the tool launches from PASS ENTER is tool work: not replayed, run once, recorded as
/// `reentrant_dispatch`; the outer replay goes on.
fn reentrant(b: &'_ Bench) -> Result<Value, String> {
    let tool_buf = b.alloc(4096)?;
    // The tool's own memory: never captured, so the outer restores do not undo its work.
    b.backend
        .allocator()
        .mark_tool_owned(tool_buf.ptr(), tool_buf.len());
    b.backend
        .memory()
        .write_device(tool_buf.ptr(), &10u64.to_le_bytes(), WAIT)
        .map_err(|e| e.to_string())?;
    type Nested = Vec<Result<Option<replay_core::OutcomeRecord>, String>>;
    let nested: Arc<Mutex<Nested>> = Arc::new(Mutex::new(Vec::new()));
    {
        // The hook needs the backend, the service and the kernel; they outlive the replay.
        let backend = Arc::clone(&b.backend);
        let service = b.service;
        let tiny = b.k.tiny.clone();
        let queue = Arc::clone(&b.queue);
        let ptr = tool_buf.ptr();
        let out = Arc::clone(&nested);
        b.tool.state.lock().on_pass_enter = Some(Box::new(move |pass| {
            if pass == 0 {
                // SAFETY: kr_tiny(u64* p) updates one word at p, the tool's 4 KiB buffer.
                let r = unsafe {
                    backend.launch(
                        service,
                        &tiny,
                        LaunchConfig::linear(1, 32),
                        &queue,
                        &ArgBlock::new().arg(DevicePtr(ptr)),
                        Default::default(),
                    )
                };
                out.lock()
                    .push(r.map(|rep| rep.record).map_err(|e| e.to_string()));
            }
        }));
    }
    let r = expect_once_replayed(b);
    b.tool.state.lock().on_pass_enter = None;
    let outer = r?;
    let nested = nested.lock().clone();
    ensure(nested.len() == 1, || {
        format!("{} nested launches", nested.len())
    })?;
    let rec = nested[0]
        .clone()?
        .ok_or("the nested launch has no outcome record")?;
    ensure(
        rec.reason == Reason::ReentrantDispatch && rec.reentrancy == 1,
        || {
            format!(
                "nested: outcome {} reason {}",
                rec.outcome.as_str(),
                rec.reason.as_str()
            )
        },
    )?;
    let v = b.read(tool_buf.ptr(), 8)?;
    let now = u64::from_le_bytes(v.try_into().unwrap_or_default());
    ensure(now == 31, || {
        format!("tool buffer holds {now}, expected 31 (one execution)")
    })?;
    Ok(json!({ "outer": outer, "nested": record_json(&rec) }))
}

/// The outer replay of the reentrancy check: replayed in full, memory equal to one execution.
fn expect_once_replayed(b: &Bench) -> Result<Value, String> {
    let a = b.alloc(8 * MIB)?;
    let words = a.len() / 8;
    b.fill(&a, 71)?;
    b.rmw_plain(a.ptr(), words, 6)?;
    let reference = b.digests(&[&a])?;
    b.fill(&a, 71)?;
    b.sync()?;
    b.set_policy(Bench::policy(Scope::All, RestoreMode::Full))?;
    let run = b.replay(
        "reentrant",
        &b.k.rmw,
        b.grid(words),
        &Bench::rmw_args(a.ptr(), words, 6),
        3,
        vec![],
    )?;
    let rec = run.rec()?.clone();
    ensure(
        rec.outcome == Outcome::Replayed && rec.executed_passes == 3,
        || {
            format!(
                "outer: outcome {} reason {}",
                rec.outcome.as_str(),
                rec.reason.as_str()
            )
        },
    )?;
    ensure(b.digests(&[&a])? == reference, || {
        "outer memory differs from one execution".into()
    })?;
    Ok(record_json(&rec))
}

/// Checks a record's outcome, reason (when given) and executed passes.
fn expect_outcome(
    rec: &replay_core::OutcomeRecord,
    outcome: Outcome,
    reason: Option<Reason>,
    passes: u32,
) -> Result<(), String> {
    ensure(
        rec.outcome == outcome
            && reason.is_none_or(|r| rec.reason == r)
            && rec.executed_passes == passes,
        || {
            format!(
                "outcome {} reason {} passes {}",
                rec.outcome.as_str(),
                rec.reason.as_str(),
                rec.executed_passes
            )
        },
    )
}

/// A launch into a stream that captures a graph runs once, into the graph: not replayed, the
/// capture still valid, and the graph, launched, applies the kernel once.
fn capture_launch(b: &Bench) -> Result<Value, String> {
    let a = b.alloc(8 * MIB)?;
    let words = a.len() / 8;
    b.fill(&a, 81)?;
    b.rmw_plain(a.ptr(), words, 4)?;
    let reference = b.digests(&[&a])?;
    b.fill(&a, 81)?;
    let filled = b.digests(&[&a])?;
    b.set_policy(Bench::policy(Scope::All, RestoreMode::Full))?;
    let q = b
        .backend
        .create_queue(QueueKind::Compute)
        .map_err(|e| e.to_string())?;
    b.backend
        .begin_capture(&q, replay_cuda::CaptureMode::Global)
        .map_err(|e| e.to_string())?;
    let run = b.replay_on(
        "capture_launch",
        &b.k.rmw,
        b.grid(words),
        &q,
        &Bench::rmw_args(a.ptr(), words, 4),
        4,
        vec![],
    );
    let graph = b.backend.end_capture(&q);
    let run = run?;
    let graph = graph.map_err(|e| format!("the capture did not survive: {e}"))?;
    ensure(run.record.is_none(), || {
        "the captured launch was a replay candidate".into()
    })?;
    ensure(b.digests(&[&a])? == filled, || {
        "the captured launch ran at capture time".into()
    })?;
    // SAFETY: the graph's one kernel updates `a`, alive until the end of this function.
    unsafe { b.backend.launch_graph(b.service, &graph, &q) }.map_err(|e| e.to_string())?;
    b.sync_queue(&q)?;
    ensure(b.digests(&[&a])? == reference, || {
        "the graph did not apply the kernel exactly once".into()
    })?;
    Ok(json!({ "graph_launched": true }))
}

/// Another thread captures in global mode (PyTorch's default) while a window runs. On a
/// stream the backend does not know, the window runs beside it (its driver calls in relaxed
/// mode); on a stream it knows, the window cannot drain that stream without touching the
/// capture and declines. Either way the capture stays valid and its graph runs once.
fn capture_beside(b: &Bench, known: bool) -> Result<Value, String> {
    use replay_cuda::sys;
    let a = b.alloc(8 * MIB)?;
    let words = a.len() / 8;
    let counter = b.alloc(8)?;
    b.backend
        .memory()
        .write_device(counter.ptr(), &5u64.to_le_bytes(), WAIT)
        .map_err(|e| e.to_string())?;
    b.fill(&a, 83)?;
    b.rmw_plain(a.ptr(), words, 5)?;
    let reference = b.digests(&[&a])?;
    b.fill(&a, 83)?;
    b.sync()?;
    let mut p = Bench::policy(Scope::All, RestoreMode::Full);
    p.pool_keep_bytes = 0;
    p.drain_timeout = SHORT;
    b.set_policy(p)?;
    let known_queue = if known {
        Some(
            b.backend
                .create_queue(QueueKind::Compute)
                .map_err(|e| e.to_string())?,
        )
    } else {
        None
    };
    let stream_raw = known_queue.as_ref().map(|q| q.raw() as u64);
    let (begun_tx, begun_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let counter_ptr = counter.ptr();
    let tiny_raw = b.k.tiny.raw() as u64;
    let device = Arc::clone(b.backend.device());
    let capturer = std::thread::spawn(move || -> Result<(), String> {
        device.bind().map_err(|e| e.to_string())?;
        let mut s: sys::CUstream = match stream_raw {
            Some(r) => r as sys::CUstream,
            None => std::ptr::null_mut(),
        };
        // SAFETY: driver calls on a non-blocking stream this thread creates (or the bench's
        // known stream), kr_tiny(u64* p) on an 8-byte buffer the bench owns, and a graph owned
        // here.
        unsafe {
            let begin = (|| -> Result<(), String> {
                if stream_raw.is_none() {
                    sys::cuStreamCreate(&mut s, 1)
                        .result()
                        .map_err(|e| e.to_string())?;
                }
                sys::cuStreamBeginCapture_v2(
                    s,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
                )
                .result()
                .map_err(|e| format!("begin capture: {e}"))
            })();
            let failed = begin.is_err();
            let _ = begun_tx.send(begin);
            if failed {
                return Err("no capture".into());
            }
            let _ = go_rx.recv();
            let mut ptr = counter_ptr;
            let mut params = [&mut ptr as *mut u64 as *mut std::ffi::c_void];
            let launched = sys::cuLaunchKernel(
                tiny_raw as sys::CUfunction,
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                s,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
            .result();
            let mut g: sys::CUgraph = std::ptr::null_mut();
            let ended = sys::cuStreamEndCapture(s, &mut g).result();
            launched.map_err(|e| format!("captured launch: {e}"))?;
            ended.map_err(|e| format!("the capture was invalidated: {e}"))?;
            let mut exec: sys::CUgraphExec = std::ptr::null_mut();
            sys::cuGraphInstantiateWithFlags(&mut exec, g, 0)
                .result()
                .map_err(|e| e.to_string())?;
            sys::cuGraphLaunch(exec, s)
                .result()
                .map_err(|e| e.to_string())?;
            sys::cuStreamSynchronize(s)
                .result()
                .map_err(|e| e.to_string())?;
            sys::cuGraphExecDestroy(exec);
            sys::cuGraphDestroy(g);
            if stream_raw.is_none() {
                sys::cuStreamDestroy_v2(s);
            }
        }
        Ok(())
    });
    begun_rx.recv().map_err(|e| e.to_string())??;
    let run = b.replay(
        "capture_beside",
        &b.k.rmw,
        b.grid(words),
        &Bench::rmw_args(a.ptr(), words, 5),
        3,
        vec![],
    );
    let _ = go_tx.send(());
    let captured = capturer
        .join()
        .map_err(|_| "the capturing thread panicked".to_string())?;
    let run = run?;
    let rec = run.rec()?.clone();
    captured.map_err(|e| format!("{e}; window: {rec}"))?;
    let want = if known {
        (Outcome::Declined, Reason::AgentDrainStuck, 1)
    } else {
        (Outcome::Replayed, Reason::None, 3)
    };
    expect_outcome(&rec, want.0, Some(want.1), want.2)?;
    ensure(b.digests(&[&a])? == reference, || {
        "memory differs from one execution".into()
    })?;
    let v = b.read(counter.ptr(), 8)?;
    let now = u64::from_le_bytes(v.try_into().unwrap_or_default());
    ensure(now == 16, || {
        format!("the captured kernel's buffer holds {now}, expected 16 (one run)")
    })?;
    b.backend.memory().release_deferred(true);
    Ok(json!({ "record": record_json(&rec) }))
}

/// A copy on another stream, through the backend's gated copy, started while a window runs
/// (from PASS ENTER of its first pass, on another thread): it waits for the window, so the
/// restores before the later passes do not undo it (the copy's destination is tracked memory
/// the window captures), and the window still replays.
fn concurrent_copy(b: &Bench) -> Result<Value, String> {
    let a = b.alloc(64 * MIB)?;
    let words = a.len() / 8;
    let src = b.alloc(64 * MIB)?;
    let dst = b.alloc(64 * MIB)?;
    b.fill(&a, 91)?;
    b.rmw_plain(a.ptr(), words, 8)?;
    let reference = b.digests(&[&a])?;
    b.fill(&a, 91)?;
    b.fill(&src, 92)?;
    b.fill(&dst, 93)?;
    let want_dst = b.digests(&[&src])?;
    b.set_policy(Bench::policy(Scope::All, RestoreMode::Full))?;
    let copyq = b
        .backend
        .create_queue(QueueKind::Copy)
        .map_err(|e| e.to_string())?;
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let copier = {
        let backend = Arc::clone(&b.backend);
        let service = b.service;
        let q = Arc::clone(&copyq);
        let (s, d, len) = (src.ptr(), dst.ptr(), src.len());
        std::thread::spawn(move || -> Result<f64, String> {
            go_rx.recv().map_err(|e| e.to_string())?;
            let t = Instant::now();
            let c = replay_cuda::memory::ResolvedCopy {
                dir: replay_cuda::memory::Direction::DeviceToDevice,
                src: s,
                dst: d,
                len,
            };
            // SAFETY: both ends are 64 MiB device allocations the bench keeps alive until this
            // thread is joined and the copy queue drained.
            unsafe { backend.copy(service, &q, &c) }.map_err(|e| e.to_string())?;
            Ok(t.elapsed().as_secs_f64())
        })
    };
    b.tool.state.lock().on_pass_enter = Some(Box::new(move |pass| {
        if pass == 0 {
            let _ = go_tx.send(());
            // Give the other thread time to submit its copy inside the window.
            std::thread::sleep(Duration::from_millis(200));
        }
    }));
    let run = b.replay(
        "concurrent_copy",
        &b.k.rmw,
        b.grid(words),
        &Bench::rmw_args(a.ptr(), words, 8),
        8,
        vec![],
    );
    b.tool.state.lock().on_pass_enter = None;
    let waited = copier
        .join()
        .map_err(|_| "the copying thread panicked".to_string())??;
    b.sync_queue(&copyq)?;
    let rec = run?.rec()?.clone();
    expect_outcome(&rec, Outcome::Replayed, Some(Reason::None), 8)?;
    ensure(b.digests(&[&a])? == reference, || {
        "memory differs from one execution".into()
    })?;
    ensure(b.digests(&[&dst])? == want_dst, || {
        "the copy made beside the window was undone by a restore".into()
    })?;
    Ok(json!({ "record": record_json(&rec), "copy_submit_waited_seconds": waited }))
}

/// A pass that spins past its bound: the window truncates within its bound and gives back its
/// backing; the free (`cuMemFree` waits for the whole device) happens later, outside the
/// window, once the device is idle, so the launch returns long before the kernel ends.
fn free_behind_spin(b: &Bench) -> Result<Value, String> {
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
        .compile_and_load(super::common::KERNELS_SRC, "kernels_free.cu", &[])
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
fn backing_gives_way(b: &Bench) -> Result<Value, String> {
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
