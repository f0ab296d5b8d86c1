//! The shapes the correctness checks share (SPEC §6, §8): a record's outcome, reason and
//! executed passes as expected, a decline that runs the kernel exactly once with memory equal
//! to one execution, and the short bound the drain and pass checks set.

use std::time::Duration;

use replay_core::{Outcome, Reason};
use serde_json::{json, Value};

use crate::common::{ensure, record_json, Bench, MIB};

pub(super) const SHORT: Duration = Duration::from_millis(300);

/// The common shape of a decline check: the kernel runs exactly once and memory equals one
/// execution.
pub(super) fn expect_once(
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

/// Checks a record's outcome, reason (when given) and executed passes.
pub(super) fn expect_outcome(
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
