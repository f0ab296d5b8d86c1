//! # replay-report-types
//!
//! The counter report's data types (SPEC §12), below the backends: what a counter collector
//! fills (`replay-cuda`'s `counters`, SPEC §12.1) and what `replay-report`'s writers read.
//! Every value is keyed by `(dispatch_id, pass)` and never summed across passes.
//!
//! Why a crate of its own: the collector runs inside `libkernel_replay.so`, which `kreplay run`
//! preloads into every application, and that library must carry nothing it does not need
//! there. The writers (`replay-report`: the terminal table, Nsight Compute's CSV, JSON and
//! rocprofv3's rocpd SQLite) stay above, in what `kreplay` links; a backend needs only these
//! types. So this crate depends on `serde` and `thiserror` and nothing of kernel-replay, and
//! `replay-report` re-exports every name here, so its users name them as before.
//!
//! - [`CounterReport`] (with [`CounterDispatch`], [`CounterSample`], [`MetricInfo`]): one
//!   collection, its look-ups ([`CounterReport::value`]: the value of the pass that collects the
//!   metric, never a combination), the consistency check every writer runs first
//!   ([`CounterReport::check`], [`InconsistentReport`]) and the index the writers build once
//!   ([`SampleIndex`]) (`report`);
//! - [`CounterReport::merge`]: the reports of several processes as one, each dispatch with its
//!   [`DispatchOrigin`] (process, rank, its own dispatch id), which the writers show as
//!   process and rank columns (`merge`);
//! - [`SectionRow`] / [`SectionRows`]: Nsight Compute's section rows of a dispatch as the
//!   counter tool derives them from its raw metrics, which the sections CSV writes
//!   (`section`).
//!
//! No GPU, no unsafe, no I/O.

#![forbid(unsafe_code)]

mod error;
mod merge;
mod report;
mod section;

pub use error::InconsistentReport;
pub use report::{
    ByPass, CounterDispatch, CounterReport, CounterSample, DispatchOrigin, MetricInfo, SampleIndex,
    WindowPhases,
};
pub use section::{SectionRow, SectionRows};
