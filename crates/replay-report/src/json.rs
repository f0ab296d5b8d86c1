//! The JSON form (SPEC §12): the report exactly as serde writes [`CounterReport`], pretty
//! printed. It is also what the counter tool puts under the member `counters` of the injected
//! library's report, so the two read alike.
//!
//! Stable layout (members in this order; new members only ever added, with defaults):
//! `process_id`, `process_name`, `host_name`, `device_name`, `compute_capability`, `chip`,
//! `passes`; `metrics`: `[{name, unit, description, pass}]` in the order asked; `dispatches`:
//! `[{dispatch_id, kernel, kernel_demangled, device, context, stream, grid: [x, y, z],
//! block: [x, y, z], passes, snapshot_bytes, start_ns, end_ns, pass_ns?, graph?, node?,
//! graph_launch?, phases?}]` in dispatch order (`pass_ns`: `[[start, end], ...]` by pass,
//! absent when not recorded; `graph`, `node`, `graph_launch`: the CUDA graph, node and
//! launch of the graph a kernel ran from, absent outside a graph; `phases`: the replay
//! window's time by phase in seconds, `{window, drain, plan, capture, launch, wait, check,
//! restore, callbacks, finish, config_enter}` as the outcome record's `phases`, absent when
//! not recorded); `samples`:
//! `[{dispatch_id, pass, metric, value}]`, one per value, never merged across passes.

use crate::error::ReportError;
use replay_report_types::CounterReport;

/// The member of the counter tool's JSON report that holds the [`CounterReport`].
pub const TOOL_MEMBER: &str = "counters";

/// The report as pretty-printed JSON, ending in a newline.
pub fn to_json(report: &CounterReport) -> Result<String, ReportError> {
    let mut s = serde_json::to_string_pretty(report)?;
    s.push('\n');
    Ok(s)
}

/// Parses what [`to_json`] wrote.
pub fn from_json(text: &str) -> Result<CounterReport, ReportError> {
    Ok(serde_json::from_str(text)?)
}

/// The [`CounterReport`] inside a tool's whole JSON report (member [`TOOL_MEMBER`]): `None`
/// when the report has none (another tool ran), an error when it has one that does not parse.
pub fn from_tool_report(v: &serde_json::Value) -> Option<Result<CounterReport, ReportError>> {
    let c = v.get(TOOL_MEMBER)?;
    if c.is_null() {
        return None;
    }
    Some(<CounterReport as serde::Deserialize>::deserialize(c).map_err(ReportError::from))
}
