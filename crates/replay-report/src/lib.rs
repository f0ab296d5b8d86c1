//! # replay-report
//!
//! What kernel-replay's tools write (SPEC §12): hardware-counter values of replayed dispatches,
//! every value keyed by `(dispatch_id, pass)` and never summed across passes. The counter tool
//! (`replay-cuda`'s `counters`) produces a [`CounterReport`]; `kreplay run --tool counters`
//! and tool authors with their own front end write it out. Nothing here touches a GPU.
//!
//! The report's types ([`CounterReport`], [`CounterDispatch`], [`CounterSample`],
//! [`MetricInfo`], [`SectionRow`]) live below the backends in `replay-report-types` and are
//! re-exported here: the collector runs inside `libkernel_replay.so`, which `kreplay run`
//! preloads into every application, and that library must not carry this crate's writers
//! (SQLite above all). No backend depends on this crate; `kreplay` does.
//!
//! The outputs:
//! - [`table`]: the per-kernel table for the terminal (`table`);
//! - [`csv()`]: Nsight Compute's `--csv` column layout plus a `Replay Pass` column (`csv`),
//!   the `Kernel Name` spelled as Nsight Compute demangles it ([`names`], which also gives
//!   the short names `kreplay run`'s table shows); [`sections_csv`]: the same columns for a
//!   collection asked by Nsight Compute sections, each section's rows under ncu's display
//!   names ([`SectionRow`], computed by the counter tool) keyed by the launch's index, then the
//!   raw metrics under the section name `raw`;
//! - [`to_json`] / [`from_json`]: the report as JSON (`json`);
//! - [`write_rocpd`]: an SQLite database in rocprofv3's rocpd layout, schema 3.0.4 with
//!   `replay_pass` (`rocpd`);
//! - [`html()`]: one self-contained HTML page (`html`; inline CSS, SVG and script, no
//!   network reference): the kernels as a table sortable by any column (duration, longest
//!   first, to begin with), a roofline chart of every dispatch and one per dispatch (inline
//!   SVG from [`roofline`]: achieved FLOP/s against FLOP per DRAM byte, the memory and
//!   compute ceilings from the device's peak values where they were collected; a dispatch
//!   without the metrics has no point and the page says which are missing), and each
//!   dispatch's section rows and raw metrics in a collapsible `<details>`;
//! - [`write_counters`]: one of the files by the path's extension (`.csv`, `.json`, `.db` /
//!   `.sqlite` / `.sqlite3`, `.html` / `.htm`), written to a temporary file
//!   beside it and renamed into place, so a failed write never leaves a partial file under
//!   the asked name; [`counters_output`] is `kreplay run`'s whole output step on top of it
//!   (`write`).
//!
//! Every writer first checks the report ([`CounterReport::check`]): a sample of a dispatch
//! the report does not list, or two values for one `(dispatch, pass, metric)`, is an error,
//! not something to guess around. Where several passes of one dispatch collected the same
//! metric, every writer keeps each pass's value apart; where one value per dispatch is
//! needed (the table), it is the one of the pass that collects the metric.

#![forbid(unsafe_code)]

mod csv;
mod error;
mod html;
mod json;
pub mod names;
mod number;
mod rocpd;
pub mod roofline;
mod table;
mod write;

pub use csv::{
    csv, ncu_unit, parse_record, sections_csv, DISPATCH_COLUMNS, HEADER as CSV_HEADER,
    ORIGIN_COLUMNS, RAW_SECTION, SECTION as CSV_SECTION, SECTIONS_HEADER,
};
pub use error::ReportError;
pub use html::{esc as html_escape, html, OVERVIEW_ID as HTML_OVERVIEW_ID};
pub use json::{from_json, from_tool_report, to_json, TOOL_MEMBER};
pub use number::ncu_value;
pub use replay_report_types::{
    ByPass, CounterDispatch, CounterReport, CounterSample, DispatchOrigin, InconsistentReport,
    MetricInfo, SampleIndex, SectionRow, SectionRows, WindowPhases,
};
pub use rocpd::{
    guid_and_uuid, write_rocpd, DISPATCH_CATEGORY, SCHEMA as ROCPD_SCHEMA,
    SCHEMA_VERSION as ROCPD_SCHEMA_VERSION,
};
pub use table::table;
pub use write::{
    counters_output, counters_output_with, write_counters, write_counters_with, Format, RunOutput,
    SectionsOf,
};
