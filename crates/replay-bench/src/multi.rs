//! `PROG multi` (SPEC §6): two GPUs replayed at once from two threads in library
//! mode. One service, one backend per device, one tracker; each thread fills its own buffer,
//! runs `kr_rmw` over it once outside the service (the reference, on a second buffer) and then
//! `--pooled-dispatches` times under replay with `--passes` passes, and compares the replayed
//! buffer with the reference after every dispatch. The tool records when each window opened
//! (CONFIG ENTER) and closed (CONFIG EXIT) per agent; the figure is how long windows on both
//! agents were open at the same time, against the time either was (each agent has its own
//! lock: the windows need not wait for each other).

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_core::{
    AgentId, ContextId, NoContextControl, Outcome, Policy, ReplayService, Subscription, SystemClock,
};
use replay_cuda::{
    ArgBlock, BackendConfig, CompletionEvent, CudaBackend, DevicePtr, LaunchConfig, LaunchOptions,
    QueueKind,
};
use serde_json::{json, Value};

use crate::common::{progress, KERNELS_SRC, WAIT};

/// What to run on each device.
#[derive(Debug, Clone, Copy)]
pub struct Multi {
    /// Bytes of each device's buffer (the kernel reads and writes all of it).
    pub bytes: u64,
    /// Replayed dispatches per device.
    pub dispatches: u64,
    /// Passes of each.
    pub passes: u64,
}

/// Window spans per agent: (agent, opened, closed), seconds since the start.
#[derive(Default)]
struct Spans {
    start: Option<Instant>,
    open: Vec<(AgentId, f64)>,
    done: Vec<(AgentId, f64, f64)>,
}

struct SpanTool {
    passes: u64,
    spans: Mutex<Spans>,
}

impl ReplayTool for SpanTool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _ud: &mut UserData) {
        if op != Operation::Config {
            return;
        }
        let agent = p.dispatch_info.agent;
        let mut s = self.spans.lock();
        let t = s
            .start
            .get_or_insert_with(Instant::now)
            .elapsed()
            .as_secs_f64();
        match phase {
            Phase::Enter => {
                let n = self.passes;
                p.replay_pass_count = Some(Arc::new(move |_, _| n));
                s.open.push((agent, t));
            }
            Phase::Exit => {
                if let Some(i) = s.open.iter().position(|(a, _)| *a == agent) {
                    let (_, opened) = s.open.swap_remove(i);
                    s.done.push((agent, opened, t));
                }
            }
        }
    }
}

/// Seconds covered by the union of `spans`.
fn union(mut spans: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (s, e) in spans {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

fn length(spans: &[(f64, f64)]) -> f64 {
    spans.iter().map(|(s, e)| e - s).sum()
}

/// Seconds both unions cover.
fn overlap(a: &[(f64, f64)], b: &[(f64, f64)]) -> f64 {
    let mut t = 0.0;
    for &(s0, e0) in a {
        for &(s1, e1) in b {
            t += (e0.min(e1) - s0.max(s1)).max(0.0);
        }
    }
    t
}

/// One device's share: returns its per-dispatch records and whether memory always equalled
/// one execution.
fn on_device(backend: &CudaBackend, service: &ReplayService, m: &Multi) -> Result<Value, String> {
    let module = backend
        .modules()
        .compile_and_load(KERNELS_SRC, "kernels.cu", &[])
        .map_err(|e| e.to_string())?;
    let f = |n: &str| module.function(n).map_err(|e| e.to_string());
    let (fill, rmw) = (f("kr_fill")?, f("kr_rmw")?);
    let queue = backend
        .create_queue(QueueKind::Compute)
        .map_err(|e| e.to_string())?;
    let done = CompletionEvent::new(backend.device()).map_err(|e| e.to_string())?;
    let sync = || -> Result<(), String> {
        done.record(&queue).map_err(|e| e.to_string())?;
        match done.wait(WAIT) {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!("the GPU did not finish within {WAIT:?}")),
            Err(e) => Err(e.to_string()),
        }
    };
    let alloc = |n: u64| {
        backend
            .allocator()
            .alloc_device(n)
            .map_err(|e| format!("cuMemAlloc of {n} bytes: {e}"))
    };
    let (a, reference) = (alloc(m.bytes)?, alloc(m.bytes)?);
    let words = m.bytes / 8;
    let sms = u64::from(backend.device().info().multiprocessors.max(1) as u32);
    let cfg = LaunchConfig::linear(words.div_ceil(256).clamp(1, sms * 32) as u32, 256);
    let seed = 0x5eed ^ backend.agent_id().0;
    let plain = |func: &replay_cuda::CudaFunction, args: &ArgBlock| -> Result<(), String> {
        // SAFETY: kr_fill(u64* p, u64 n, u64 seed) and kr_rmw(u64* p, u64 n, u64 k) touch the
        // n words at p, which this function allocated.
        unsafe { backend.launch_plain(service, func, cfg, &queue, args) }.map_err(|e| e.to_string())
    };
    let read = |p: u64| {
        backend
            .memory()
            .read_device(p, m.bytes, WAIT)
            .map_err(|e| e.to_string())
    };
    plain(
        &fill,
        &ArgBlock::new().arg(DevicePtr(a.ptr())).arg(words).arg(seed),
    )?;
    plain(
        &fill,
        &ArgBlock::new()
            .arg(DevicePtr(reference.ptr()))
            .arg(words)
            .arg(seed),
    )?;
    let mut records = Vec::new();
    let mut equal = true;
    for k in 0..m.dispatches {
        let args = ArgBlock::new()
            .arg(DevicePtr(a.ptr()))
            .arg(words)
            .arg(k + 1);
        plain(
            &rmw,
            &ArgBlock::new()
                .arg(DevicePtr(reference.ptr()))
                .arg(words)
                .arg(k + 1),
        )?;
        // SAFETY: as above; `a` lives for the whole replay.
        let report =
            unsafe { backend.launch(service, &rmw, cfg, &queue, &args, LaunchOptions::default()) }
                .map_err(|e| e.to_string())?;
        sync()?;
        let same = read(a.ptr())? == read(reference.ptr())?;
        equal &= same;
        let rec = report.record.ok_or("no outcome record")?;
        records.push(json!({
            "dispatch": k,
            "outcome": rec.outcome.as_str(),
            "reason": rec.reason.as_str(),
            "passes": rec.executed_passes,
            "captured_bytes": rec.captured_bytes,
            "memory_equals_one_execution": same,
        }));
        if rec.outcome != Outcome::Replayed {
            equal = false;
        }
    }
    Ok(json!({
        "agent": backend.agent_id().0,
        "records": records,
        "all_replayed_and_equal": equal,
    }))
}

/// Runs the case on devices 0 and 1. Exit status: 0 when every dispatch on both devices
/// replayed with memory equal to one execution, 1 when not, 2 when there are not two devices.
pub fn multi(m: Multi, out: &std::path::Path) -> i32 {
    let n = match replay_cuda::is_available() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("multi: CUDA is not available: {e}");
            return 2;
        }
    };
    if n < 2 {
        eprintln!("multi: needs two CUDA devices, found {n}");
        return 2;
    }
    let tracker = Arc::new(replay_memory::Tracker::new());
    let mut backends = Vec::new();
    for d in 0..2 {
        match CudaBackend::new(d, Arc::clone(&tracker), BackendConfig::default()) {
            Ok(b) => backends.push(b),
            Err(e) => {
                eprintln!("multi: device {d}: {e}");
                return 2;
            }
        }
    }
    let service = ReplayService::new(
        Policy::default(),
        Arc::new(SystemClock::new()),
        Arc::new(NoContextControl),
    );
    let tool = Arc::new(SpanTool {
        passes: m.passes,
        spans: Mutex::new(Spans::default()),
    });
    if let Err(e) = service
        .configure(
            ContextId(1),
            Subscription::CONFIG,
            Arc::clone(&tool) as Arc<dyn ReplayTool>,
        )
        .and_then(|()| service.start())
    {
        eprintln!("multi: {e}");
        return 2;
    }
    progress(&format!(
        "multi: {} dispatches x {} passes of kr_rmw over {} MiB on each of two devices",
        m.dispatches,
        m.passes,
        m.bytes >> 20
    ));
    let t = Instant::now();
    let results: Vec<Result<Value, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = backends
            .iter()
            .map(|b| {
                let service = &service;
                s.spawn(move || on_device(b, service, &m))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the thread panicked".into()))
            })
            .collect()
    });
    let wall = t.elapsed().as_secs_f64();
    let spans = std::mem::take(&mut tool.spans.lock().done);
    let of = |a: u64| {
        union(
            spans
                .iter()
                .filter(|(x, _, _)| x.0 == a)
                .map(|&(_, s, e)| (s, e))
                .collect(),
        )
    };
    let (s0, s1) = (of(0), of(1));
    let either = length(&union(s0.iter().chain(&s1).copied().collect()));
    let both = overlap(&s0, &s1);
    let ok = results.iter().all(|r| {
        r.as_ref()
            .is_ok_and(|v| v["all_replayed_and_equal"] == true)
    });
    let v = json!({
        "case": "multi",
        "bytes": m.bytes,
        "dispatches": m.dispatches,
        "passes": m.passes,
        "wall_s": wall,
        "windows_open_s": { "agent0": length(&s0), "agent1": length(&s1), "either": either, "both": both },
        "overlap_of_either": if either > 0.0 { both / either } else { 0.0 },
        "devices": results.iter().map(|r| match r {
            Ok(v) => v.clone(),
            Err(e) => json!({ "error": e }),
        }).collect::<Vec<_>>(),
        "pass": ok,
    });
    let text = serde_json::to_string_pretty(&v).unwrap_or_default();
    if let Err(e) = std::fs::write(out, text) {
        eprintln!("multi: writing {}: {e}", out.display());
    }
    println!(
        "multi: {} windows open {:.3} s on agent 0, {:.3} s on agent 1, both at once {:.3} s ({:.0}% of the {:.3} s either was); memory equal to one execution on both: {}",
        if ok { "PASS" } else { "FAIL" },
        length(&s0),
        length(&s1),
        both,
        if either > 0.0 { 100.0 * both / either } else { 0.0 },
        either,
        ok
    );
    i32::from(!ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_counts_only_what_both_cover() {
        let a = union(vec![(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]);
        assert_eq!(a, vec![(0.0, 2.0), (3.0, 4.0)]);
        let b = union(vec![(1.5, 3.5)]);
        assert!((overlap(&a, &b) - 1.0).abs() < 1e-12, "0.5 + 0.5");
        assert!((length(&a) - 3.0).abs() < 1e-12);
        assert_eq!(
            overlap(&a, &[(2.0, 3.0)]),
            0.0,
            "touching is not overlapping"
        );
    }
}
