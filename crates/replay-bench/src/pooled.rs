//! The `pooled` case: one large allocation carved into sub-buffers as a pooled
//! allocator makes them (PyTorch's caching allocator, JAX's preallocation), and `kr_rmw`
//! read-modify-writing `--kernel-mib` of one sub-buffer, dispatched `--pooled-dispatches`
//! times (default 20) with the sub-buffer moving inside the pool, under scope `predicted`
//! (and `restore=dirty`). Reported per dispatch: outcome, passes, wall time, snapshot time,
//! captured and predicted bytes, misses and how the scope was chosen; then the first dispatch
//! against the steady state (the median of the last half), and the memory check: the pool
//! after all dispatches equals a plain run of the same dispatches (digests of every chunk).
//! Then Nsight Compute on the same program in the same run: `PROG app --alloc-gib N
//! --kernel-mib M --buffers 1` (one allocation, the kernel over its first M MiB), alone and
//! under `ncu` (see `ncu.rs`), after the pool is freed.

use std::time::{Duration, Instant};

use replay_core::{Outcome, Policy, RestoreMode, Scope};
use serde_json::{json, Value};

use super::common::{progress, record_json, Bench, Row, GIB, MIB};

/// Options of the pooled case.
#[derive(Debug, Clone)]
pub struct Pooled {
    pub alloc_gib: u64,
    pub kernel_mib: u64,
    pub dispatches: u64,
    pub passes: u64,
}

/// Where dispatch `i` finds its sub-buffer: `dispatches` sub-buffers spread over the pool,
/// each at a 512-byte boundary (the caching allocator's block size) that is not a chunk
/// boundary, so predictions learned at one alignment are applied at another.
pub fn offsets(pool: u64, kernel: u64, dispatches: u64) -> Vec<u64> {
    let span = pool.saturating_sub(kernel + 2 * MIB);
    let n = dispatches.max(1);
    (0..n)
        .map(|i| {
            let at = span / n * i + MIB;
            let jitter = (i * 7 + 3) % 2048 * 512;
            (at + jitter) & !511
        })
        .collect()
}

fn policy() -> Policy {
    Bench::policy(Scope::Predicted, RestoreMode::Dirty)
}

pub fn pooled(b: &Bench, rows: &mut Vec<Row>, o: &Pooled) -> Result<(), String> {
    let bytes = o.alloc_gib * GIB;
    let kbytes = o.kernel_mib * MIB;
    let words = kbytes / 8;
    let t = Instant::now();
    let pool = b.alloc(bytes)?;
    progress(&format!(
        "pooled: {} GiB in one allocation in {:.2} s",
        o.alloc_gib,
        t.elapsed().as_secs_f64()
    ));
    let offs = offsets(bytes, kbytes, o.dispatches);
    // The reference: the same dispatches, once each, without replay.
    b.fill(&pool, 300)?;
    b.sync()?;
    for &off in &offs {
        b.rmw_plain(pool.ptr() + off, words, 13)?;
    }
    let refd = b.digests(&[&pool])?;
    b.fill(&pool, 300)?;
    b.sync()?;
    b.set_policy(policy())?;
    let mut per = Vec::new();
    for (i, &off) in offs.iter().enumerate() {
        let ptr = pool.ptr() + off;
        let args = Bench::rmw_args(ptr, words, 13);
        let label = format!("pooled/{}gib/{}mib/{i}", o.alloc_gib, o.kernel_mib);
        let run = b.replay(
            &label,
            &b.k.rmw,
            b.grid(words),
            &args,
            o.passes,
            Bench::chunk_ranges(ptr, kbytes),
        )?;
        let rec = run.rec()?.clone();
        let inputs = if rec.outcome == Outcome::Replayed {
            run.inputs_identical().err()
        } else {
            None
        };
        let passes = u64::from(rec.executed_passes.max(1));
        let v = json!({
            "dispatch": i,
            "offset": off,
            "outcome": rec.outcome.as_str(),
            "reason": rec.reason.as_str(),
            "passes": rec.executed_passes,
            "wall_s": run.wall,
            "snap_s": rec.snap_seconds,
            "per_pass_ms": (run.wall - rec.snap_seconds) / passes as f64 * 1e3,
            "captured_bytes": rec.captured_bytes,
            "predicted_bytes": rec.predicted_bytes,
            "written_bytes": kbytes,
            "captured_over_written": rec.captured_bytes as f64 / kbytes as f64,
            "prediction_misses": rec.prediction_misses,
            "predict_source": rec.predict_source.as_str(),
            "predict_fallback": rec.predict_fallback.as_str(),
            "scope": rec.scope.as_str(),
            "compared_bytes": rec.compared_bytes,
            "restored_bytes": rec.restored_bytes,
            "inputs_error": inputs,
            "record": record_json(&rec),
        });
        progress(&format!(
            "{label}: {} {} passes ({}), {:.3} s, captured {:.1} MiB (predicted {:.1} MiB), misses {}",
            rec.outcome.as_str(),
            rec.executed_passes,
            rec.predict_source.as_str(),
            run.wall,
            rec.captured_bytes as f64 / MIB as f64,
            rec.predicted_bytes as f64 / MIB as f64,
            rec.prediction_misses
        ));
        per.push(v);
    }
    let now = b.digests(&[&pool])?;
    let equal = now == refd;
    let first_diff = now.iter().zip(&refd).position(|(x, y)| x != y);
    let f = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    let steady: Vec<&Value> = per[per.len() / 2..].iter().collect();
    let median = |k: &str| {
        let mut xs: Vec<f64> = steady.iter().map(|v| f(v, k)).collect();
        xs.sort_by(f64::total_cmp);
        xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let misses: u64 = per
        .iter()
        .map(|v| v["prediction_misses"].as_u64().unwrap_or(0))
        .sum();
    let summary = json!({
        "alloc_gib": o.alloc_gib,
        "kernel_mib": o.kernel_mib,
        "dispatches": o.dispatches,
        "passes": o.passes,
        "first_wall_s": f(&per[0], "wall_s"),
        "first_captured_bytes": per[0]["captured_bytes"],
        "first_outcome": per[0]["outcome"],
        "steady_wall_s": median("wall_s"),
        "steady_per_pass_ms": median("per_pass_ms"),
        "steady_captured_bytes": median("captured_bytes"),
        "steady_captured_over_written": median("captured_over_written"),
        "misses": misses,
        "truncated": per.iter().filter(|v| v["outcome"] == "truncated").count(),
        "memory_equals_one_execution": equal,
        "first_differing_chunk": first_diff,
        "dispatch": per,
    });
    rows.push(Row::check(
        "pooled",
        format!("{}gib/{}mib/memory", o.alloc_gib, o.kernel_mib),
        if equal {
            Ok(json!({}))
        } else {
            Err(format!(
                "the pool after {} dispatches differs from one execution each (chunk {first_diff:?})",
                o.dispatches
            ))
        },
    ));
    rows.push(Row::measure(
        "pooled",
        format!("{}gib/{}mib", o.alloc_gib, o.kernel_mib),
        summary,
    ));
    drop(pool);
    // Nsight Compute's process comes next: the pool's backing and what waits for release
    // both go, or its allocation of the same footprint runs out of memory.
    b.backend.release_backing();
    let _ = b.sync();
    std::thread::sleep(Duration::from_millis(50));
    Ok(())
}

/// One line of the table for a `pooled` row.
pub fn table_line(name: &str, d: &Value) -> String {
    let f = |k: &str| d.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    format!(
        "{name:<20} first {:>7.3} s ({}, captured {:>8.1} MiB)  steady {:>7.3} s ({:>7.3} ms/pass, captured {:>7.1} MiB = {:.2}x written)  misses {}  truncated {}",
        f("first_wall_s"),
        d["first_outcome"].as_str().unwrap_or("?"),
        f("first_captured_bytes") / MIB as f64,
        f("steady_wall_s"),
        f("steady_per_pass_ms"),
        f("steady_captured_bytes") / MIB as f64,
        f("steady_captured_over_written"),
        d["misses"],
        d["truncated"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_buffers_move_inside_the_pool_off_the_chunk_grid() {
        let pool = 100 * GIB;
        let k = 16 * MIB;
        let offs = offsets(pool, k, 20);
        assert_eq!(offs.len(), 20);
        for w in offs.windows(2) {
            assert!(w[1] >= w[0] + k, "{w:?} overlap");
        }
        for &o in &offs {
            assert_eq!(o % 512, 0);
            assert_ne!(o % MIB, 0, "{o} is on the chunk grid");
            assert!(o + k <= pool);
        }
    }
}
