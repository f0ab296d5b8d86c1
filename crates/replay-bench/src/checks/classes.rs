//! Checks of the memory classes a replay captures besides plain device allocations (SPEC
//! §7.1): module variables from the cubin, managed and pinned host memory an argument points
//! into, virtual-memory mappings and stream-ordered pool memory.

use replay_core::{Outcome, Reason, RestoreMode, Scope};
use replay_cuda::{ArgBlock, DevicePtr, LaunchConfig};
use serde_json::{json, Value};

use super::expect::{expect_once, expect_outcome};
use crate::common::{ensure, record_json, Bench, GLOBALS_SRC, MIB, WAIT};

/// Module variables are enumerated from the cubin, captured and restored.
pub(super) fn module_variables(b: &Bench, scope: Scope) -> Result<Value, String> {
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

/// Managed or pinned host memory an argument points into is captured by `arguments`.
pub(super) fn untracked_argument(b: &Bench, pinned: bool) -> Result<Value, String> {
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

/// A virtual-memory mapping (`cuMemCreate` / `cuMemMap` / `cuMemSetAccess`) or stream-ordered
/// pool memory (`cuMemAllocAsync`) on the device (SPEC §7.1 row): with `decline_on_vmem=true`
/// a dispatch declines `untracked_memory` while one is live (run once); under the default
/// policy (`decline_on_vmem` off) a kernel writing into it replays, under `all` and
/// `arguments`, with memory equal to one execution.
pub(super) fn capture_vmm(b: &Bench, pool: bool) -> Result<Value, String> {
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
