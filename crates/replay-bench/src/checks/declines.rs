//! Checks of the window's declines and truncations (SPEC §6, §8): a footprint over budget, a
//! snapshot that cannot be placed, device backing that falls back to the host tiers, a tool
//! callback that panics, drains that time out, and a pass that does not finish.

use std::sync::Arc;
use std::time::{Duration, Instant};

use replay_core::{Outcome, Reason, RestoreMode, Scope, Tier};
use replay_cuda::{ArgBlock, DevicePtr, LaunchConfig, QueueKind};
use serde_json::{json, Value};

use super::expect::{expect_once, expect_outcome, SHORT};
use crate::common::{ensure, record_json, Bench, MIB, WAIT};

pub(super) fn decline_budget(b: &Bench) -> Result<Value, String> {
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

pub(super) fn decline_snapshot(b: &Bench) -> Result<Value, String> {
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
pub(super) fn tier_fallback(b: &Bench) -> Result<Value, String> {
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

pub(super) fn decline_callback(b: &Bench) -> Result<Value, String> {
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
pub(super) enum Drain {
    Queue,
    Agent,
    CopyFence,
}

impl Drain {
    pub(super) fn reason(self) -> Reason {
        match self {
            Self::Queue => Reason::QueueDrainStuck,
            Self::Agent => Reason::AgentDrainStuck,
            Self::CopyFence => Reason::CopyFenceStuck,
        }
    }
}

const SPIN: Duration = Duration::from_millis(1500);

/// A kernel spinning on the dispatch's stream, another compute stream, or a copy stream makes
/// the matching drain time out: declined, run once.
pub(super) fn decline_drain(b: &Bench, which: Drain) -> Result<Value, String> {
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
pub(super) fn pass_stuck(b: &Bench) -> Result<Value, String> {
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
