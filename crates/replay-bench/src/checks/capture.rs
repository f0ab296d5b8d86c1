//! Checks of windows and CUDA stream capture (SPEC §6, §9.2): a launch into a capturing stream
//! runs once, into the graph, and a window beside another thread's global-mode capture leaves
//! that capture valid.

use std::sync::Arc;

use replay_core::{Outcome, Reason, RestoreMode, Scope};
use replay_cuda::QueueKind;
use serde_json::{json, Value};

use super::expect::{expect_outcome, SHORT};
use crate::common::{ensure, record_json, Bench, MIB, WAIT};

/// A launch into a stream that captures a graph runs once, into the graph: not replayed, the
/// capture still valid, and the graph, launched, applies the kernel once.
pub(super) fn capture_launch(b: &Bench) -> Result<Value, String> {
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
pub(super) fn capture_beside(b: &Bench, known: bool) -> Result<Value, String> {
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
