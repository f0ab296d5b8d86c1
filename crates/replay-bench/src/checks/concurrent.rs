//! Checks of work beside a window (SPEC §3, §6): a kernel the tool launches from PASS ENTER is
//! tool work, run once, and a copy another thread starts during the window waits for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::{Outcome, Reason, RestoreMode, Scope};
use replay_cuda::{ArgBlock, DevicePtr, LaunchConfig, QueueKind};
use serde_json::{json, Value};

use super::expect::expect_outcome;
use crate::common::{ensure, record_json, Bench, MIB, WAIT};

/// A kernel the tool launches from PASS ENTER is tool work: not replayed, run once, recorded as
/// `reentrant_dispatch`; the outer replay goes on.
pub(super) fn reentrant(b: &'_ Bench) -> Result<Value, String> {
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

/// A copy on another stream, through the backend's gated copy, started while a window runs
/// (from PASS ENTER of its first pass, on another thread): it waits for the window, so the
/// restores before the later passes do not undo it (the copy's destination is tracked memory
/// the window captures), and the window still replays.
pub(super) fn concurrent_copy(b: &Bench) -> Result<Value, String> {
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
