//! C views of the core's values (SPEC §10): the dispatch info,
//! the outcome record and the run summary in C layout, each owning the storage its pointers
//! point into.

use std::ffi::CString;
use std::mem::size_of;

use replay_core::{DispatchInfo, OutcomeRecord, PredictFallback, RunSummary};

use super::enums::{
    outcome_code, predict_fallback_code, predict_source_code, reason_code, reason_code_by_name,
    restore_code, scope_code,
};
use super::pointer::{lossy_cstring, ZeroValid};
use crate::sys::*;

/// A dispatch info in C layout with the storage its kernel name points into.
#[derive(Debug)]
pub(crate) struct CDispatchInfo {
    info: kreplay_dispatch_info_t,
    _name: CString,
}

// SAFETY: the only pointer inside, `info.kernel_name`, points into `_name`, which this value
// owns and never changes after construction; sharing or sending it cannot race.
unsafe impl Send for CDispatchInfo {}
// SAFETY: as above; the value is immutable after construction.
unsafe impl Sync for CDispatchInfo {}

impl CDispatchInfo {
    /// The C view of `info`.
    pub(crate) fn new(info: &DispatchInfo) -> Self {
        let name = lossy_cstring(&info.kernel_name);
        let dim = |d: replay_core::Dim3| kreplay_dim3_t {
            x: d.x,
            y: d.y,
            z: d.z,
        };
        Self {
            info: kreplay_dispatch_info_t {
                size: size_of::<kreplay_dispatch_info_t>() as u64,
                agent_id: info.agent.0,
                queue_id: info.queue.0,
                dispatch_id: info.dispatch_id.0,
                kernel_id: info.kernel_id.0,
                // The CString's heap buffer does not move when the CString does.
                kernel_name: name.as_ptr(),
                grid: dim(info.grid),
                workgroup: dim(info.workgroup),
                private_segment_size: info.private_segment_size,
                group_segment_size: info.group_segment_size,
            },
            _name: name,
        }
    }

    /// The pointer handed to C; valid while `self` lives.
    pub(crate) fn as_ptr(&self) -> *const kreplay_dispatch_info_t {
        &self.info
    }
}

/// An outcome record in C layout with the storage its pointers point into.
#[derive(Debug)]
pub(crate) struct COutcome {
    c: kreplay_outcome_t,
    _kernel: CString,
    _gpu_seconds: Box<[f64]>,
    _restored: Box<[u64]>,
    _compared: Box<[u64]>,
    record: OutcomeRecord,
}

// SAFETY: the pointers inside `c` point into the boxed slices and the CString this value owns
// and never changes after construction; sharing or sending it cannot race.
unsafe impl Send for COutcome {}
// SAFETY: as above; the value is immutable after construction.
unsafe impl Sync for COutcome {}

impl COutcome {
    /// The C view of `r`.
    pub(crate) fn new(r: &OutcomeRecord) -> Self {
        let kernel = lossy_cstring(&r.kernel);
        let secs: Box<[f64]> = r.pass_gpu_seconds.iter().copied().collect();
        let restored: Box<[u64]> = r.pass_restored_bytes.iter().copied().collect();
        let compared: Box<[u64]> = r.pass_compared_bytes.iter().copied().collect();
        let c = kreplay_outcome_t {
            size: size_of::<kreplay_outcome_t>() as u64,
            dispatch_id: r.dispatch_id.0,
            agent_id: r.agent.0,
            kernel: kernel.as_ptr(),
            outcome: outcome_code(r.outcome),
            reason: reason_code(r.reason),
            requested_passes: r.requested_passes,
            executed_passes: r.executed_passes,
            scope: scope_code(r.scope),
            restore: restore_code(r.restore),
            captured_regions: r.captured_regions,
            tracked_bytes: r.tracked_bytes,
            captured_bytes: r.captured_bytes,
            tier_device_bytes: r.tier_bytes.device,
            tier_pinned_bytes: r.tier_bytes.pinned,
            tier_pageable_bytes: r.tier_bytes.pageable,
            untracked_bytes: r.untracked_bytes,
            untracked_regions: r.untracked_regions,
            reentrancy: u32::from(r.reentrancy),
            snap_seconds: r.snap_seconds,
            restore_seconds: r.restore_seconds,
            compared_bytes: r.compared_bytes,
            restored_bytes: r.restored_bytes,
            // Boxed slices keep their heap address when the box moves; an empty one gives a
            // dangling but aligned, non-null pointer with count 0.
            pass_gpu_seconds: secs.as_ptr(),
            pass_gpu_seconds_count: secs.len() as u64,
            pass_restored_bytes: restored.as_ptr(),
            pass_restored_bytes_count: restored.len() as u64,
            pass_compared_bytes: compared.as_ptr(),
            pass_compared_bytes_count: compared.len() as u64,
            predicted_bytes: r.predicted_bytes,
            prediction_misses: r.prediction_misses,
            predict_source: predict_source_code(r.predict_source),
            predict_fallback: predict_fallback_code(r.predict_fallback),
            reserved0: 0,
        };
        Self {
            c,
            _kernel: kernel,
            _gpu_seconds: secs,
            _restored: restored,
            _compared: compared,
            record: r.clone(),
        }
    }

    /// The pointer handed to C; valid while `self` lives (and `self` does not move: keep it
    /// boxed or behind an `Arc`).
    pub(crate) fn as_ptr(&self) -> *const kreplay_outcome_t {
        &self.c
    }

    /// The record as JSON.
    pub(crate) fn json(&self) -> String {
        self.record.to_json()
    }

    /// The record's dispatch id.
    pub(crate) fn dispatch_id(&self) -> u64 {
        self.record.dispatch_id.0
    }

    /// The record's phases in C layout.
    pub(crate) fn phases(&self) -> kreplay_phases_t {
        let p = &self.record.phases;
        kreplay_phases_t {
            size: size_of::<kreplay_phases_t>() as u64,
            window: p.window,
            drain: p.drain,
            plan: p.plan,
            capture: p.capture,
            launch: p.launch,
            wait: p.wait,
            check: p.check,
            restore: p.restore,
            callbacks: p.callbacks,
            finish: p.finish,
            config_enter: p.config_enter,
        }
    }

    /// The graph node the record's dispatch ran as, in C layout; `None` outside a graph.
    pub(crate) fn graph_node(&self) -> Option<kreplay_graph_node_t> {
        self.record.graph.map(|g| kreplay_graph_node_t {
            size: size_of::<kreplay_graph_node_t>() as u64,
            graph: g.graph,
            launch: g.launch,
            node: g.node.unwrap_or(KREPLAY_GRAPH_NODE_NONE),
            serialized: u32::from(g.serialized),
        })
    }
}

/// The C view of a run summary.
pub(crate) fn summary_to_c(s: &RunSummary) -> kreplay_summary_t {
    let mut c = kreplay_summary_t::zeroed();
    c.size = size_of::<kreplay_summary_t>() as u64;
    c.dispatches = s.dispatches;
    c.replayed = s.replayed;
    c.declined = s.declined_total();
    c.truncated = s.truncated_total();
    c.not_requested = s.not_requested;
    c.passes = s.passes;
    c.captured_bytes = s.captured_bytes;
    c.compared_bytes = s.compared_bytes;
    c.restored_bytes = s.restored_bytes;
    c.peak_pooled_bytes = s.peak_pooled_bytes;
    c.replay_seconds = s.replay_seconds;
    for (map, out) in [
        (&s.declined, &mut c.declined_by_reason),
        (&s.truncated, &mut c.truncated_by_reason),
    ] {
        for (name, n) in map {
            match reason_code_by_name(name) {
                Some(code) if (code as usize) < out.len() => {
                    out[code as usize] = out[code as usize].saturating_add(*n)
                }
                _ => log::warn!("[kernel-replay] summary reason {name:?} has no C value"),
            }
        }
    }
    c.predicted = s.predicted;
    c.predicted_bytes = s.predicted_bytes;
    c.prediction_misses = s.prediction_misses;
    for (name, n) in &s.predict_fallback {
        let code = [
            PredictFallback::FitsDevice,
            PredictFallback::SmallRegions,
            PredictFallback::RepeatedMisses,
            PredictFallback::UnknownLayout,
        ]
        .into_iter()
        .find(|f| f.as_str() == name)
        .map(predict_fallback_code);
        match code {
            Some(code) if (code as usize) < c.predict_fallback_by_reason.len() => {
                let slot = &mut c.predict_fallback_by_reason[code as usize];
                *slot = slot.saturating_add(*n);
            }
            _ => log::warn!("[kernel-replay] summary fallback {name:?} has no C value"),
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::super::pointer::write_versioned;
    use super::*;
    use replay_core::{Outcome, Reason};

    #[test]
    fn write_versioned_writes_up_to_the_callers_size() {
        let mut s = kreplay_summary_t::zeroed();
        s.size = 8;
        // SAFETY: `s` is a valid summary.
        let r = unsafe {
            write_versioned(
                &mut s,
                "summary",
                first_version::SUMMARY,
                summary_to_c(&RunSummary::default()),
            )
        };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_BAD_SIZE);

        let mut rs = RunSummary {
            dispatches: 4,
            replayed: 1,
            ..RunSummary::default()
        };
        rs.declined.insert("footprint_budget".into(), 2);
        rs.truncated.insert("pass_limit".into(), 1);
        s.size = size_of::<kreplay_summary_t>() as u64 + 64;
        // SAFETY: the caller states a larger size than it has here, but only our size is
        // written, which `s` holds.
        unsafe { write_versioned(&mut s, "summary", first_version::SUMMARY, summary_to_c(&rs)) }
            .unwrap();
        assert_eq!(s.size, size_of::<kreplay_summary_t>() as u64);
        assert_eq!(s.dispatches, 4);
        assert_eq!(s.declined, 2);
        assert_eq!(s.truncated, 1);
        assert_eq!(
            s.declined_by_reason[KREPLAY_REASON_FOOTPRINT_BUDGET as usize],
            2
        );
        assert_eq!(s.truncated_by_reason[KREPLAY_REASON_PASS_LIMIT as usize], 1);
    }

    #[test]
    fn the_prediction_counts_reach_a_second_version_caller_and_never_a_first_version_one() {
        let mut rs = RunSummary {
            dispatches: 3,
            predicted: 2,
            predicted_bytes: 1 << 20,
            prediction_misses: 1,
            ..RunSummary::default()
        };
        rs.predict_fallback.insert("fits_device".into(), 5);
        rs.predict_fallback.insert("repeated_misses".into(), 1);
        let mut s = kreplay_summary_t::zeroed();
        s.size = size_of::<kreplay_summary_t>() as u64;
        // SAFETY: `s` is a valid summary of the size it states.
        unsafe { write_versioned(&mut s, "summary", first_version::SUMMARY, summary_to_c(&rs)) }
            .unwrap();
        assert_eq!(
            (s.predicted, s.predicted_bytes, s.prediction_misses),
            (2, 1 << 20, 1)
        );
        let by = |f: kreplay_predict_fallback_t| s.predict_fallback_by_reason[f as usize];
        assert_eq!(by(KREPLAY_PREDICT_FALLBACK_FITS_DEVICE), 5);
        assert_eq!(by(KREPLAY_PREDICT_FALLBACK_REPEATED_MISSES), 1);
        assert_eq!(by(KREPLAY_PREDICT_FALLBACK_SMALL_REGIONS), 0);

        // A caller built with the first version: its 608 bytes are filled, nothing past them.
        let mut old = kreplay_summary_t::zeroed();
        old.size = first_version::SUMMARY as u64;
        old.predicted = 77;
        // SAFETY: `old` is larger than the size it states.
        unsafe {
            write_versioned(
                &mut old,
                "summary",
                first_version::SUMMARY,
                summary_to_c(&rs),
            )
        }
        .unwrap();
        assert_eq!(old.size, 608);
        assert_eq!(old.dispatches, 3);
        assert_eq!(
            old.predicted, 77,
            "past the caller's size nothing is written"
        );
    }

    #[test]
    fn summary_counters_saturate_instead_of_wrapping() {
        use replay_core::{AgentId, DispatchId};
        let mut rs = RunSummary {
            dispatches: u64::MAX,
            restored_bytes: u64::MAX - 1,
            ..RunSummary::default()
        };
        rs.declined.insert("footprint_budget".into(), u64::MAX);
        rs.declined.insert("snapshot_failed".into(), 3);
        let mut r = OutcomeRecord::new(DispatchId(1), AgentId(0), "k");
        r.outcome = Outcome::Declined;
        r.reason = Reason::FootprintBudget;
        r.restored_bytes = 10;
        rs.add(&r, 0.0);
        assert_eq!(rs.dispatches, u64::MAX);
        assert_eq!(rs.restored_bytes, u64::MAX);
        assert_eq!(rs.declined["footprint_budget"], u64::MAX);
        let c = summary_to_c(&rs);
        assert_eq!(c.declined, u64::MAX, "the total saturates too");
        assert_eq!(
            c.declined_by_reason[KREPLAY_REASON_FOOTPRINT_BUDGET as usize],
            u64::MAX
        );
        assert_eq!(
            c.declined_by_reason[KREPLAY_REASON_SNAPSHOT_FAILED as usize],
            3
        );
    }
}
