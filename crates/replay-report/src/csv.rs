//! CSV in the column layout of `ncu --csv --page details` (SPEC §12), so scripts that read
//! Nsight Compute's CSV read ours: one row per launch, metric and pass.
//!
//! Checked against a real `ncu --csv --metrics ...` file of Nsight Compute 2025.3 on the
//! H200 (rows of it are the test fixture `tests/fixtures/ncu_2025.3_h200_head.csv`; our
//! rendering of the same launches is `ours_ncu_layout.csv`): the columns are its fifteen, in
//! its order, every field quoted (`"` doubled inside), `\n` line ends, values printed as it
//! prints them ([`crate::number`]: `4,096`, `n/a`), block and grid as `(x, y, z)`, the section
//! `Command line profiler metrics` (what `--metrics` reports under), a launch's metrics sorted
//! by name as it sorts them, units in its spelling (`ns`, `byte`, `register/thread`, empty for
//! counts; the long time units a collector may pass, `nsecond` and the like, are shortened to
//! its). Then one column of ours, `Replay Pass`, last so that scripts reading the columns by
//! name or by position up to `Metric Value` are unaffected. It is there because the values
//! are per pass: each value is the one the named replay pass collected, and a metric that
//! several passes collected has one row per pass (never a sum). After it `Graph`, `Node` and
//! `Graph Launch` (the CUDA graph, node and launch a kernel ran from; empty outside a graph)
//! and the dispatch's replay window by phase in seconds ([`DISPATCH_COLUMNS`]: `Window
//! Seconds`, then drain, plan, capture, launch, wait, check, restore, callbacks and finish,
//! which add up to the window, then `Config Enter Seconds`, outside it), the same on every
//! row of the dispatch. A metric asked for but absent
//! on a dispatch gets one row whose value is `n/a`, as Nsight Compute writes an unavailable
//! metric, with an empty pass.
//!
//! Where our values differ in kind from Nsight Compute's: `ID` is kernel-replay's dispatch id
//! (unique in the process, as ncu's result ids are, but not necessarily contiguous from 0:
//! only replayed dispatches are listed); `Context` and `Stream` are the values the
//! collector recorded (driver handles), where ncu prints its own small ids; values are in
//! the metric's base unit, never scaled to `Kbyte` or `us` (the reference file's are
//! unscaled too).
//!
//! A report merged from several processes ([`CounterReport::merge`]) has each dispatch's own
//! process under `Process ID`, and two more columns after all the others
//! ([`ORIGIN_COLUMNS`]: `Rank`, `Process Dispatch ID`); its `ID` is the merged report's id,
//! unique over the processes.
//!
//! A collection asked by Nsight Compute's sections (`--set full`) is written by
//! [`sections_csv`] instead, as `ncu --set full --csv` lays it out: `ID` the launch's index
//! from 0 in launch order (ncu's numbering, so rows join on `(ID, Section Name, Metric Name)`),
//! each section's rows ([`SectionRow`](replay_report_types::SectionRow), which the counter tool derives from its raw metrics)
//! under ncu's section and metric display names, then the raw metrics under the section
//! [`RAW_SECTION`] (`raw`), one row per pass as above; after ncu's fifteen columns come
//! `Replay Pass`, `Graph`, `Node`, `Dispatch ID` (kernel-replay's id), `Passes` and the
//! [`DISPATCH_COLUMNS`] (graph launch, window phases) as above. Section
//! values are in base units too (`ns`, `hz`, `byte/s`, as `--print-units base` spells them), where ncu's CSV scales
//! them by default (`us`, `Ghz`, `Mbyte/s`).

use crate::number::ncu_value;
use replay_report_types::{CounterDispatch, CounterReport, SectionRows};

/// The header row, with its line end.
pub const HEADER: &str = "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\
\"Context\",\"Stream\",\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\
\"Metric Name\",\"Metric Unit\",\"Metric Value\",\"Replay Pass\",\"Graph\",\"Node\",\
\"Graph Launch\",\"Window Seconds\",\"Drain Seconds\",\"Plan Seconds\",\"Capture Seconds\",\
\"Launch Seconds\",\"Wait Seconds\",\"Check Seconds\",\"Restore Seconds\",\
\"Callbacks Seconds\",\"Finish Seconds\",\"Config Enter Seconds\"\n";

/// The columns after `Node` (after `Passes` in [`sections_csv`]) that every row of a dispatch
/// repeats: which launch of its graph it ran in, then its replay window's time by phase in
/// seconds ([`crate::WindowPhases`], in the order of `WindowPhases::NAMES`). Empty where the
/// report does not have them.
pub const DISPATCH_COLUMNS: [&str; 12] = [
    "Graph Launch",
    "Window Seconds",
    "Drain Seconds",
    "Plan Seconds",
    "Capture Seconds",
    "Launch Seconds",
    "Wait Seconds",
    "Check Seconds",
    "Restore Seconds",
    "Callbacks Seconds",
    "Finish Seconds",
    "Config Enter Seconds",
];

/// The fields of [`DISPATCH_COLUMNS`] for `d`: seconds as Rust prints an `f64` (the shortest
/// text that reads back as the same number, never an exponent).
fn dispatch_fields(d: &CounterDispatch) -> Vec<String> {
    let mut out = Vec::with_capacity(DISPATCH_COLUMNS.len());
    out.push(d.graph_launch.map(|l| l.to_string()).unwrap_or_default());
    match &d.phases {
        Some(p) => out.extend(p.values().iter().map(|v| v.to_string())),
        None => out.extend(std::iter::repeat_n(String::new(), 11)),
    }
    out
}

/// The columns a report merged from processes ([`CounterReport::merge`]) has after all the
/// others, in [`csv`] and [`sections_csv`] alike: the process's rank (empty where no launcher
/// named one) and the dispatch's id in its process. `Process ID` is then each dispatch's own
/// process. One process's own report has neither column.
pub const ORIGIN_COLUMNS: [&str; 2] = ["Rank", "Process Dispatch ID"];

/// `header` with the [`ORIGIN_COLUMNS`] when the report is merged.
fn header_for(header: &str, report: &CounterReport) -> String {
    if !report.is_merged() {
        return header.to_string();
    }
    let mut h = header.trim_end().to_string();
    for c in ORIGIN_COLUMNS {
        h.push_str(&format!(",\"{c}\""));
    }
    h.push('\n');
    h
}

/// The fields of [`ORIGIN_COLUMNS`] for `d` of a merged report; none otherwise.
fn origin_fields(report: &CounterReport, d: &CounterDispatch) -> Vec<String> {
    if !report.is_merged() {
        return Vec::new();
    }
    match d.origin {
        Some(o) => vec![
            o.rank.map(|r| r.to_string()).unwrap_or_default(),
            o.dispatch_id.to_string(),
        ],
        None => vec![String::new(), d.dispatch_id.to_string()],
    }
}

/// The section Nsight Compute files `--metrics` values under.
pub const SECTION: &str = "Command line profiler metrics";

/// The whole CSV text. Call [`CounterReport::check`] first (the file writers do): samples of
/// unlisted dispatches are not written.
pub fn csv(report: &CounterReport) -> String {
    let index = report.index();
    let mut names = report.metric_names();
    names.sort_unstable();
    let units: Vec<&str> = names
        .iter()
        .map(|n| ncu_unit(report.metric(n).map_or("", |m| m.unit.as_str())))
        .collect();
    let mut out = header_for(HEADER, report);
    for d in &report.dispatches {
        let mut extra = dispatch_fields(d);
        extra.extend(origin_fields(report, d));
        let id = d.dispatch_id.to_string();
        let mut row = |metric: &str, unit: &str, value: &str, pass: &str| {
            let at = Row {
                id: &id,
                section: SECTION,
                metric,
                unit,
                value,
                pass,
            };
            write_row(&mut out, report, d, &at, &extra);
        };
        for (name, unit) in names.iter().zip(&units) {
            match index.by_pass(d.dispatch_id, name) {
                Some(passes) if !passes.is_empty() => {
                    for (pass, s) in passes {
                        row(name, unit, &ncu_value(s.value), &pass.to_string());
                    }
                }
                _ => row(name, unit, "n/a", ""),
            }
        }
    }
    out
}

/// The fields of a row that are not the dispatch's.
struct Row<'a> {
    id: &'a str,
    section: &'a str,
    metric: &'a str,
    unit: &'a str,
    value: &'a str,
    pass: &'a str,
}

/// One record: ncu's fifteen columns, `Replay Pass`, `Graph`, `Node`, then `extra` (ours).
fn write_row(
    out: &mut String,
    r: &CounterReport,
    d: &CounterDispatch,
    at: &Row<'_>,
    extra: &[String],
) {
    // As Nsight Compute spells it, so rows join with ncu's.
    let kernel = &if d.kernel_demangled.is_empty() {
        d.kernel.clone()
    } else {
        crate::names::ncu_demangled(&d.kernel_demangled)
    };
    let graph = d.graph.map(|g| g.to_string()).unwrap_or_default();
    let node = d.node.map(|n| n.to_string()).unwrap_or_default();
    let fields: [&str; 18] = [
        at.id,
        &d.origin.map_or(r.process_id, |o| o.process).to_string(),
        &r.process_name,
        &r.host_name,
        kernel,
        &d.context.to_string(),
        &d.stream.to_string(),
        &dims(d.block),
        &dims(d.grid),
        &d.device.to_string(),
        &r.compute_capability,
        at.section,
        at.metric,
        at.unit,
        at.value,
        at.pass,
        &graph,
        &node,
    ];
    for (i, f) in fields
        .iter()
        .copied()
        .chain(extra.iter().map(String::as_str))
        .enumerate()
    {
        if i > 0 {
            out.push(',');
        }
        quote(out, f);
    }
    out.push('\n');
}

/// The header of [`sections_csv`], with its line end: Nsight Compute's fifteen columns, then
/// ours.
pub const SECTIONS_HEADER: &str = "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\
\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\
\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\",\"Replay Pass\",\"Graph\",\
\"Node\",\"Dispatch ID\",\"Passes\",\"Graph Launch\",\"Window Seconds\",\"Drain Seconds\",\
\"Plan Seconds\",\"Capture Seconds\",\"Launch Seconds\",\"Wait Seconds\",\"Check Seconds\",\
\"Restore Seconds\",\"Callbacks Seconds\",\"Finish Seconds\",\"Config Enter Seconds\"\n";

/// The *Section Name* of the raw metrics in [`sections_csv`].
pub const RAW_SECTION: &str = "raw";

/// The CSV of a collection asked by Nsight Compute sections (`--set full`, `--section X`),
/// laid out as `ncu --set full --csv` prints it, so rows join with ncu's on
/// `(ID, Section Name, Metric Name)`: per dispatch, first its `rows` (each section's display
/// rows under the section's display name), then every raw metric as [`csv`] writes it, under
/// the *Section Name* [`RAW_SECTION`]. `ID` is the dispatch's index in the report, from 0 in
/// launch order (ncu numbers its results so), not the dispatch id; the columns after ncu's
/// fifteen are `Replay Pass` (a section row's: the passes of its inputs, `;`-separated),
/// `Graph`, `Node`, `Dispatch ID` (kernel-replay's), `Passes` (the replay passes the
/// dispatch ran) and the [`DISPATCH_COLUMNS`]. A dispatch without rows in `rows` has only its raw rows. Call
/// [`CounterReport::check`] first (the file writers do).
pub fn sections_csv(report: &CounterReport, rows: &SectionRows) -> String {
    let index = report.index();
    let mut names = report.metric_names();
    names.sort_unstable();
    let units: Vec<&str> = names
        .iter()
        .map(|n| ncu_unit(report.metric(n).map_or("", |m| m.unit.as_str())))
        .collect();
    let mut out = header_for(SECTIONS_HEADER, report);
    for (i, d) in report.dispatches.iter().enumerate() {
        let id = i.to_string();
        let mut extra = vec![d.dispatch_id.to_string(), d.passes.to_string()];
        extra.extend(dispatch_fields(d));
        extra.extend(origin_fields(report, d));
        for r in rows.get(&d.dispatch_id).into_iter().flatten() {
            let passes: Vec<String> = r.passes.iter().map(u32::to_string).collect();
            let at = Row {
                id: &id,
                section: &r.section,
                metric: &r.name,
                unit: &r.unit,
                value: &ncu_value(r.value),
                pass: &passes.join(";"),
            };
            write_row(&mut out, report, d, &at, &extra);
        }
        for (name, unit) in names.iter().zip(&units) {
            let mut raw = |value: &str, pass: &str| {
                let at = Row {
                    id: &id,
                    section: RAW_SECTION,
                    metric: name,
                    unit,
                    value,
                    pass,
                };
                write_row(&mut out, report, d, &at, &extra);
            };
            match index.by_pass(d.dispatch_id, name) {
                Some(passes) if !passes.is_empty() => {
                    for (pass, s) in passes {
                        raw(&ncu_value(s.value), &pass.to_string());
                    }
                }
                _ => raw("n/a", ""),
            }
        }
    }
    out
}

/// A unit in Nsight Compute's spelling: the long time units of the metrics API shortened as
/// `ncu` prints them; anything else as given.
pub fn ncu_unit(unit: &str) -> &str {
    match unit {
        "nsecond" => "ns",
        "usecond" => "us",
        "msecond" => "ms",
        u => u,
    }
}

/// `(x, y, z)`, as Nsight Compute writes block and grid sizes.
fn dims(v: [u32; 3]) -> String {
    format!("({}, {}, {})", v[0], v[1], v[2])
}

/// `f` as one quoted CSV field (RFC 4180: `"` doubled; commas and line ends stay inside the
/// quotes).
fn quote(out: &mut String, f: &str) {
    out.push('"');
    for c in f.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    out.push('"');
}

/// One CSV record split into its fields (the inverse of the quoting above), for tests and for
/// tools that read our files back without a CSV library.
pub fn parse_record(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    fields.push(cur);
    fields
}
