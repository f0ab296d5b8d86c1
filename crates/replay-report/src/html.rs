//! The HTML report (SPEC §12): one self-contained page, `--out report.html`. Everything is
//! inline (CSS, SVG, one small script); the page names no network resource, so it opens the
//! same from a disk, a mail attachment or an air-gapped cluster.
//!
//! What it holds:
//! - a header: process (for a report merged from several, [`CounterReport::merge`], each
//!   one's rank and pid), host, device, compute capability, chip, dispatches, passes;
//! - **the kernel table**, one row per dispatch: dispatch id (in a merged report, then its
//!   process's rank and pid), kernel name (as Nsight Compute
//!   spells it, [`crate::names::ncu_demangled`]), grid, block, duration
//!   (`gpu__time_duration.sum`, else the median of the passes' GPU times, else empty), the key
//!   section values where the collection was asked by sections (SM, memory and DRAM throughput,
//!   achieved occupancy, registers per thread), else the first raw metrics, then the roofline's
//!   achieved FLOP/s and arithmetic intensity where any dispatch has them. Every cell keeps
//!   its number in `data-v`; clicking a header sorts by that column (again: the other way),
//!   an empty cell always last; the page opens sorted by duration, longest first;
//! - **the roofline**: one chart (inline SVG, log–log: arithmetic intensity in FLOP per DRAM
//!   byte against achieved FLOP/s) with one point per dispatch and precision
//!   ([`crate::roofline`]: each `<circle>` has `data-dispatch` and `data-precision`), the
//!   memory and compute ceilings drawn where the device's peak values were collected (the
//!   highest each dispatch reached); the dispatches without a point are listed with the
//!   reason; clicking a point opens its dispatch below and marks its row;
//! - **each dispatch's sections** in a collapsible `<details>`: its launch, its own roofline
//!   chart (its own ceilings) or why it has none, each Nsight Compute section's rows
//!   ([`SectionRow`], as the sections CSV writes them: label, base unit, value, replay
//!   passes), then the raw metrics, one row per pass that collected each (`n/a` for one not
//!   collected), units in Nsight Compute's spelling.
//!
//! Numbers are printed as Nsight Compute prints them ([`crate::number`]), in base units; the
//! charts' axes and the FLOP/s column use SI prefixes. All text from the report (kernel
//! names hold `<`, `>`, `&`) is escaped. When the script has run, `<body>` carries
//! `data-ready="N"`, N the overview chart's points it linked to their rows (a test loads the
//! page in a headless browser and checks it).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::csv::ncu_unit;
use crate::number::ncu_value;
use crate::roofline::{rooflines, Ceilings, Precision, Roofline};
use replay_report_types::{CounterDispatch, CounterReport};
use replay_report_types::{SectionRow, SectionRows};

/// The key section values of the kernel table: (section display name, row label, header).
pub const KEY_SECTION_VALUES: &[(&str, &str, &str)] = &[
    (
        "GPU Speed Of Light Throughput",
        "Compute (SM) Throughput",
        "SM %",
    ),
    (
        "GPU Speed Of Light Throughput",
        "Memory Throughput",
        "Memory %",
    ),
    ("GPU Speed Of Light Throughput", "DRAM Throughput", "DRAM %"),
    ("Occupancy", "Achieved Occupancy", "Occupancy %"),
    ("Launch Statistics", "Registers Per Thread", "Registers"),
];

/// How many raw metrics the kernel table shows when no section values are there.
pub const RAW_COLUMNS: usize = 6;

/// The id of the overview chart's `<svg>`.
pub const OVERVIEW_ID: &str = "roofline-all";

/// The page. `sections` are the section rows when the collection was asked by sections (the
/// table's key values and each dispatch's section tables come from them). Call
/// [`CounterReport::check`] first (the file writers do).
pub fn html(report: &CounterReport, sections: Option<&SectionRows>) -> String {
    let empty = SectionRows::new();
    let rows = sections.unwrap_or(&empty);
    let roofs = rooflines(report);
    let mut out = String::with_capacity(16 * 1024);
    let title = if report.process_name.is_empty() {
        "kernel-replay counters".to_string()
    } else {
        format!("kernel-replay counters: {}", report.process_name)
    };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        esc(&title)
    );
    header(&mut out, report, &title);
    kernel_table(&mut out, report, rows, &roofs);
    overview(&mut out, report, &roofs);
    per_dispatch(&mut out, report, rows, &roofs);
    let _ = write!(out, "<script>{SCRIPT}</script>\n</body>\n</html>\n");
    out
}

fn header(out: &mut String, r: &CounterReport, title: &str) {
    let _ = writeln!(out, "<header>\n<h1>{}</h1>", esc(title));
    let mut facts: Vec<String> = Vec::new();
    let mut fact = |k: &str, v: &str| {
        if !v.is_empty() {
            facts.push(format!("<span><b>{}</b> {}</span>", esc(k), esc(v)));
        }
    };
    let origins = r.origins();
    if origins.len() > 1 {
        let list: Vec<String> = origins
            .iter()
            .map(|(p, rank)| match rank {
                Some(k) => format!("rank {k} (pid {p})"),
                None => format!("pid {p}"),
            })
            .collect();
        fact(
            "processes",
            &format!("{} {}: {}", origins.len(), r.process_name, list.join(", ")),
        );
    } else {
        fact("process", &format!("{} ({})", r.process_name, r.process_id));
    }
    fact("host", &r.host_name);
    fact("device", &r.device_name);
    fact("compute capability", &r.compute_capability);
    fact("chip", &r.chip);
    fact("clock control", &r.clock_control);
    fact("dispatches", &r.dispatches.len().to_string());
    fact("profiler passes", &r.passes.to_string());
    fact("metrics", &r.metric_names().len().to_string());
    let _ = writeln!(out, "<p class=\"facts\">{}</p>\n</header>", facts.join(" "));
}

/// The kernel name as the CSV writes it.
fn kernel_name(d: &CounterDispatch) -> String {
    if d.kernel_demangled.is_empty() {
        d.kernel.clone()
    } else {
        crate::names::ncu_demangled(&d.kernel_demangled)
    }
}

/// The duration the table shows (ns).
fn duration(d: &CounterDispatch, values: Option<&BTreeMap<String, (f64, u32)>>) -> Option<f64> {
    if let Some(v) = values
        .and_then(|v| v.get(crate::roofline::DURATION))
        .map(|(v, _)| *v)
        .filter(|v| v.is_finite())
    {
        return Some(v);
    }
    let mut laps: Vec<u64> = d
        .pass_ns
        .iter()
        .filter(|[a, b]| b >= a && *a > 0)
        .map(|[a, b]| b - a)
        .collect();
    laps.sort_unstable();
    // The lower middle, so always a time some pass took.
    laps.get(laps.len().saturating_sub(1) / 2)
        .map(|v| *v as f64)
}

fn dims(v: [u32; 3]) -> String {
    format!("({}, {}, {})", v[0], v[1], v[2])
}

/// One column of the kernel table beyond the fixed ones.
struct Column {
    header: String,
    title: String,
    cell: Box<dyn Fn(u64) -> Option<(f64, String)>>,
}

fn kernel_table(out: &mut String, r: &CounterReport, rows: &SectionRows, roofs: &[Roofline]) {
    let values = r.values();
    let mut cols: Vec<Column> = Vec::new();
    for (section, label, head) in KEY_SECTION_VALUES {
        let found: BTreeMap<u64, (f64, String)> = rows
            .iter()
            .filter_map(|(id, list)| {
                list.iter()
                    .find(|x| x.section == *section && x.name == *label)
                    .map(|x| (*id, (x.value, ncu_value(x.value))))
            })
            .collect();
        if !found.is_empty() {
            cols.push(Column {
                header: (*head).to_string(),
                title: format!("{section}: {label}"),
                cell: Box::new(move |id| found.get(&id).cloned()),
            });
        }
    }
    if cols.is_empty() {
        for name in r
            .metric_names()
            .into_iter()
            // Not the duration (a column already) nor device peaks (constants).
            .filter(|n| *n != crate::roofline::DURATION && !n.ends_with(".peak_sustained"))
            .take(RAW_COLUMNS)
        {
            let unit = ncu_unit(r.metric(name).map_or("", |m| m.unit.as_str())).to_string();
            let found: BTreeMap<u64, (f64, String)> = values
                .iter()
                .filter_map(|(id, m)| m.get(name).map(|(v, _)| (*id, (*v, ncu_value(*v)))))
                .collect();
            cols.push(Column {
                header: if unit.is_empty() {
                    name.to_string()
                } else {
                    format!("{name} ({unit})")
                },
                title: name.to_string(),
                cell: Box::new(move |id| found.get(&id).cloned()),
            });
        }
    }
    let by_id: BTreeMap<u64, &Roofline> = roofs.iter().map(|x| (x.dispatch_id, x)).collect();
    if roofs.iter().any(|x| !x.points.is_empty()) {
        let flops: BTreeMap<u64, (f64, String)> = roofs
            .iter()
            .filter_map(|x| Some((x.dispatch_id, x.achieved()?)))
            .map(|(id, v)| (id, (v, si(v, "FLOP/s"))))
            .collect();
        let ai: BTreeMap<u64, (f64, String)> = roofs
            .iter()
            .filter_map(|x| Some((x.dispatch_id, x.intensity()?)))
            .map(|(id, v)| (id, (v, ncu_value(v))))
            .collect();
        cols.push(Column {
            header: "FLOP/s".into(),
            title: "achieved FP32 + FP64 + FP16 operations per second (roofline)".into(),
            cell: Box::new(move |id| flops.get(&id).cloned()),
        });
        cols.push(Column {
            header: "FLOP/byte".into(),
            title: "arithmetic intensity: FP32 + FP64 + FP16 operations per DRAM byte (roofline)"
                .into(),
            cell: Box::new(move |id| ai.get(&id).cloned()),
        });
    }
    out.push_str(
        "<section id=\"kernels\">\n<h2>Kernels</h2>\n\
         <p class=\"note\">One row per replayed dispatch; click a column's header to sort by it.</p>\n\
         <table id=\"kernels-table\" class=\"sortable\">\n<thead><tr>",
    );
    let merged = r.is_merged();
    let mut fixed = vec![
        ("ID", "num", "kernel-replay's dispatch id"),
        ("Kernel", "text", "kernel name"),
        ("Grid", "text", "grid size"),
        ("Block", "text", "block size"),
        (
            "Duration (ns)",
            "num",
            "gpu__time_duration.sum, else the median pass's GPU time",
        ),
    ];
    if merged {
        // A report merged from processes: each dispatch's rank and process after its id.
        fixed.insert(1, ("Rank", "num", "the process's rank (empty: none named)"));
        fixed.insert(2, ("Process", "num", "the process's id"));
    }
    for (h, kind, title) in &fixed {
        let default = if h.starts_with("Duration") {
            " data-default=\"descending\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<th data-type=\"{kind}\" title=\"{}\"{default}>{}</th>",
            esc(title),
            esc(h)
        );
    }
    for c in &cols {
        let _ = write!(
            out,
            "<th data-type=\"num\" title=\"{}\">{}</th>",
            esc(&c.title),
            esc(&c.header)
        );
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for d in &r.dispatches {
        let id = d.dispatch_id;
        let name = kernel_name(d);
        let _ = write!(
            out,
            "<tr data-dispatch=\"{id}\"><td data-v=\"{id}\"><a href=\"#d-{id}\">{id}</a></td>"
        );
        if merged {
            let o = d.origin;
            num_cell(
                out,
                o.and_then(|o| o.rank)
                    .map(|k| (f64::from(k), k.to_string())),
            );
            num_cell(
                out,
                o.map(|o| (f64::from(o.process), o.process.to_string())),
            );
        }
        let _ = write!(
            out,
            "<td class=\"name\" title=\"{0}\">{0}</td><td class=\"dims\">{1}</td><td class=\"dims\">{2}</td>",
            esc(&name),
            dims(d.grid),
            dims(d.block)
        );
        num_cell(out, duration(d, values.get(&id)).map(|v| (v, ncu_value(v))));
        for c in &cols {
            num_cell(out, (c.cell)(id));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    if by_id.values().all(|x| x.points.is_empty()) && !r.dispatches.is_empty() {
        out.push_str("<p class=\"note\">No dispatch has the roofline's metrics (see below).</p>\n");
    }
    out.push_str("</section>\n");
}

fn num_cell(out: &mut String, v: Option<(f64, String)>) {
    match v {
        Some((v, text)) if v.is_finite() => {
            let _ = write!(
                out,
                "<td class=\"num\" data-v=\"{v:e}\">{}</td>",
                esc(&text)
            );
        }
        _ => out.push_str("<td class=\"num na\" data-v=\"\"></td>"),
    }
}

fn overview(out: &mut String, r: &CounterReport, roofs: &[Roofline]) {
    out.push_str("<section id=\"roofline\">\n<h2>Roofline</h2>\n");
    let names: BTreeMap<u64, String> = r
        .dispatches
        .iter()
        .map(|d| (d.dispatch_id, kernel_name(d)))
        .collect();
    let with: Vec<&Roofline> = roofs.iter().filter(|x| !x.points.is_empty()).collect();
    if with.is_empty() {
        out.push_str(
            "<p class=\"note\">No chart: no dispatch has the metrics a roofline point needs \
             (the FP32, FP64 or FP16 add, multiply and FMA thread-instruction counts, \
             <code>dram__bytes.sum</code> and <code>gpu__time_duration.sum</code>: \
             <code>--set roofline</code> asks for them, where the GPU can count them).</p>\n",
        );
    } else {
        let ceilings = Ceilings::max(with.iter().map(|x| &x.ceilings));
        out.push_str(
            "<p class=\"note\">One point per dispatch and precision; the ceilings are the highest \
             any dispatch reached. Click a point to open its dispatch.</p>\n",
        );
        chart(out, ChartId::Overview, &with, &names, &ceilings);
        ceiling_note(out, &ceilings);
    }
    let without: Vec<&Roofline> = roofs.iter().filter(|x| x.points.is_empty()).collect();
    if !without.is_empty() && !with.is_empty() {
        out.push_str("<p>Dispatches without a point:</p>\n<ul class=\"no-point\">\n");
        for x in without {
            let _ = writeln!(
                out,
                "<li data-dispatch=\"{0}\"><a href=\"#d-{0}\">{0}</a> {1}: {2}</li>",
                x.dispatch_id,
                esc(names.get(&x.dispatch_id).map_or("", String::as_str)),
                esc(x.no_point.as_deref().unwrap_or(""))
            );
        }
        out.push_str("</ul>\n");
    } else if !without.is_empty() {
        // Every dispatch lacks a point: one line per distinct reason.
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for x in &without {
            *reasons
                .entry(x.no_point.as_deref().unwrap_or(""))
                .or_default() += 1;
        }
        out.push_str("<ul class=\"no-point\">\n");
        for (why, n) in reasons {
            let _ = writeln!(out, "<li>{n} dispatch(es): {}</li>", esc(why));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</section>\n");
}

fn ceiling_note(out: &mut String, c: &Ceilings) {
    if !c.missing.is_empty() {
        let list: Vec<String> = c
            .missing
            .iter()
            .map(|m| format!("<code>{}</code>", esc(m)))
            .collect();
        let _ = writeln!(
            out,
            "<p class=\"note ceilings\">Ceilings not drawn{}: not collected: {}.</p>",
            match (c.memory, c.single, c.double, c.half) {
                (None, None, None, None) => String::new(),
                _ => " (some)".to_string(),
            },
            list.join(", ")
        );
    }
}

#[derive(Clone, Copy)]
enum ChartId {
    Overview,
    Dispatch(u64),
}

const W: f64 = 640.0;
const H: f64 = 380.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 46.0;

/// A log10 range in whole decades.
#[derive(Clone, Copy)]
struct Axis {
    lo: f64,
    hi: f64,
}

impl Axis {
    fn over(values: impl IntoIterator<Item = f64>) -> Axis {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.into_iter().filter(|v| v.is_finite() && *v > 0.0) {
            lo = lo.min(v.log10());
            hi = hi.max(v.log10());
        }
        if !lo.is_finite() {
            return Axis { lo: -1.0, hi: 2.0 };
        }
        // A margin, so that no point sits on the frame.
        let (mut lo, mut hi) = ((lo - 0.15).floor(), (hi + 0.15).ceil());
        // At least two decades.
        while hi - lo < 2.0 {
            lo -= 1.0;
            if hi - lo < 2.0 {
                hi += 1.0;
            }
        }
        Axis { lo, hi }
    }

    /// Where `v` falls, 0..1.
    fn at(&self, v: f64) -> f64 {
        (v.log10() - self.lo) / (self.hi - self.lo)
    }
}

fn chart(
    out: &mut String,
    which: ChartId,
    roofs: &[&Roofline],
    names: &BTreeMap<u64, String>,
    c: &Ceilings,
) {
    let points: Vec<(u64, &crate::roofline::Point)> = roofs
        .iter()
        .flat_map(|x| x.points.iter().map(move |p| (x.dispatch_id, p)))
        .collect();
    let peaks: Vec<f64> = [c.single, c.double, c.half].into_iter().flatten().collect();
    let ridges: Vec<f64> = c
        .memory
        .map(|bw| peaks.iter().map(|p| p / bw).collect())
        .unwrap_or_default();
    let x = Axis::over(
        points
            .iter()
            .map(|(_, p)| p.intensity())
            .chain(ridges.iter().copied()),
    );
    let mut ys: Vec<f64> = points.iter().map(|(_, p)| p.achieved()).collect();
    ys.extend(peaks.iter().copied());
    if let (Some(bw), true) = (c.memory, peaks.is_empty()) {
        ys.extend(points.iter().map(|(_, p)| bw * p.intensity()));
    }
    let y = Axis::over(ys);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let px = |v: f64| LEFT + x.at(v) * pw;
    let py = |v: f64| TOP + (1.0 - y.at(v)) * ph;
    let (id_attr, label) = match which {
        ChartId::Overview => (
            format!("id=\"{OVERVIEW_ID}\""),
            "roofline of every dispatch".to_string(),
        ),
        ChartId::Dispatch(id) => (
            format!("data-of=\"{id}\""),
            format!("roofline of dispatch {id}"),
        ),
    };
    let _ = writeln!(
        out,
        "<svg class=\"roofline\" {id_attr} viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" \
         role=\"img\" aria-label=\"{}\">",
        esc(&label)
    );
    let _ = writeln!(
        out,
        "<rect class=\"frame\" x=\"{LEFT}\" y=\"{TOP}\" width=\"{pw}\" height=\"{ph}\"/>"
    );
    // Decade grid and labels.
    let mut d = x.lo;
    while d <= x.hi + 1e-9 {
        let v = 10f64.powf(d);
        let gx = px(v);
        let _ = writeln!(
            out,
            "<line class=\"grid\" x1=\"{gx:.1}\" y1=\"{TOP}\" x2=\"{gx:.1}\" y2=\"{:.1}\"/>\
             <text class=\"tick\" x=\"{gx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            TOP + ph,
            TOP + ph + 16.0,
            esc(&si(v, ""))
        );
        d += 1.0;
    }
    let mut d = y.lo;
    while d <= y.hi + 1e-9 {
        let v = 10f64.powf(d);
        let gy = py(v);
        let _ = writeln!(
            out,
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{gy:.1}\" x2=\"{:.1}\" y2=\"{gy:.1}\"/>\
             <text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT + pw,
            LEFT - 6.0,
            gy + 4.0,
            esc(&si(v, ""))
        );
        d += 1.0;
    }
    let _ = writeln!(
        out,
        "<text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">arithmetic intensity \
         (FLOP/byte, DRAM)</text>\
         <text class=\"axis\" transform=\"translate(14 {:.1}) rotate(-90)\" \
         text-anchor=\"middle\">achieved FLOP/s</text>",
        LEFT + pw / 2.0,
        H - 8.0,
        TOP + ph / 2.0
    );
    // Ceilings: the memory roof up to each compute roof's ridge, the compute roofs after it.
    let (x_lo, x_hi) = (10f64.powf(x.lo), 10f64.powf(x.hi));
    let (y_lo, y_hi) = (10f64.powf(y.lo), 10f64.powf(y.hi));
    if let Some(bw) = c.memory {
        let top = peaks.iter().copied().fold(f64::NAN, f64::max);
        let x_end = if top.is_finite() {
            (top / bw).min(x_hi)
        } else {
            x_hi.min(y_hi / bw)
        };
        let x_start = x_lo.max(y_lo / bw);
        if x_start < x_end {
            let _ = writeln!(
                out,
                "<path class=\"roof mem\" d=\"M{:.1} {:.1}L{:.1} {:.1}\"><title>DRAM peak {}</title></path>\
                 <text class=\"roof-label\" x=\"{:.1}\" y=\"{:.1}\">DRAM {}</text>",
                px(x_start),
                py(bw * x_start),
                px(x_end),
                py(bw * x_end),
                esc(&si(bw, "B/s")),
                px(x_start) + 4.0,
                py(bw * x_start) - 6.0,
                esc(&si(bw, "B/s"))
            );
        }
    }
    // Each roof's label below its line, moved down past the one before where they would meet.
    let mut last_label = f64::NEG_INFINITY;
    for p in Precision::ALL {
        let Some(peak) = c.compute(p) else { continue };
        let start = c.memory.map_or(x_lo, |bw| (peak / bw).max(x_lo));
        if start < x_hi {
            let label_y = (py(peak) + 14.0).max(last_label + 14.0);
            last_label = label_y;
            let _ = writeln!(
                out,
                "<path class=\"roof {0}\" d=\"M{1:.1} {2:.1}L{3:.1} {2:.1}\"><title>{4} peak {5}</title></path>\
                 <text class=\"roof-label\" x=\"{3:.1}\" y=\"{6:.1}\" text-anchor=\"end\">{4} {5}</text>",
                p.tag(),
                px(start),
                py(peak),
                px(x_hi) - 4.0,
                p.label(),
                esc(&si(peak, "FLOP/s")),
                label_y
            );
        }
    }
    // The legend: the precisions drawn.
    let mut lx = LEFT + 10.0;
    for p in Precision::ALL {
        if points.iter().any(|(_, q)| q.precision == p) {
            let _ = writeln!(
                out,
                "<rect class=\"key {0}\" x=\"{1:.1}\" y=\"{2:.1}\" width=\"8\" height=\"8\"/>\
                 <text class=\"tick\" x=\"{3:.1}\" y=\"{4:.1}\">{5}</text>",
                p.tag(),
                lx,
                TOP + 8.0,
                lx + 12.0,
                TOP + 16.0,
                p.label()
            );
            lx += 52.0;
        }
    }
    for (id, p) in &points {
        let name = names.get(id).map_or("", String::as_str);
        let tip = format!(
            "dispatch {id} {}: {} {}, {} FLOP/byte{}",
            name,
            p.precision.label(),
            si(p.achieved(), "FLOP/s"),
            ncu_value(p.intensity()),
            c.compute(p.precision)
                .map(|peak| format!(", {:.1}% of peak", 100.0 * p.achieved() / peak))
                .unwrap_or_default()
        );
        let _ = writeln!(
            out,
            "<circle class=\"pt {}\" data-dispatch=\"{id}\" data-precision=\"{}\" cx=\"{:.1}\" \
             cy=\"{:.1}\" r=\"5\"><title>{}</title></circle>",
            p.precision.tag(),
            p.precision.tag(),
            px(p.intensity()),
            py(p.achieved()),
            esc(&tip)
        );
    }
    out.push_str("</svg>\n");
}

fn per_dispatch(out: &mut String, r: &CounterReport, rows: &SectionRows, roofs: &[Roofline]) {
    out.push_str(
        "<section id=\"sections\">\n<h2>Dispatches</h2>\n\
         <p class=\"note\">Each dispatch's sections (as the sections CSV writes them: base \
         units, the replay passes the values came from) and raw metrics, one row per pass.</p>\n",
    );
    let index = r.index();
    let mut names = r.metric_names();
    names.sort_unstable();
    let by_id: BTreeMap<u64, &Roofline> = roofs.iter().map(|x| (x.dispatch_id, x)).collect();
    let kernel_names: BTreeMap<u64, String> = r
        .dispatches
        .iter()
        .map(|d| (d.dispatch_id, kernel_name(d)))
        .collect();
    for d in &r.dispatches {
        let id = d.dispatch_id;
        let name = kernel_names.get(&id).map_or("", String::as_str);
        let _ = writeln!(
            out,
            "<details id=\"d-{id}\" data-dispatch=\"{id}\">\n<summary><b>{id}</b> {}</summary>",
            esc(name)
        );
        let mut launch = format!(
            "grid {}, block {}, device {}, stream {}, {} replay pass(es), {} snapshotted",
            dims(d.grid),
            dims(d.block),
            d.device,
            d.stream,
            d.passes,
            si(d.snapshot_bytes as f64, "B")
        );
        if let Some(g) = d.graph {
            let _ = write!(launch, ", graph {g}");
            if let Some(n) = d.node {
                let _ = write!(launch, " node {n}");
            }
        }
        if let Some(o) = d.origin {
            if let Some(k) = o.rank {
                let _ = write!(launch, ", rank {k}");
            }
            let _ = write!(
                launch,
                ", process {} (its dispatch {})",
                o.process, o.dispatch_id
            );
        }
        let _ = writeln!(out, "<p class=\"launch\">{}</p>", esc(&launch));
        if let Some(x) = by_id.get(&id) {
            if x.points.is_empty() {
                let _ = writeln!(
                    out,
                    "<p class=\"note no-point\">No roofline point: {}.</p>",
                    esc(x.no_point.as_deref().unwrap_or(""))
                );
            } else {
                chart(out, ChartId::Dispatch(id), &[x], &kernel_names, &x.ceilings);
                ceiling_note(out, &x.ceilings);
            }
        }
        let mine: &[SectionRow] = rows.get(&id).map_or(&[], Vec::as_slice);
        let mut order: Vec<&str> = Vec::new();
        for s in mine {
            if !order.contains(&s.section.as_str()) {
                order.push(&s.section);
            }
        }
        for section in order {
            let _ = writeln!(
                out,
                "<h3>{}</h3>\n<table class=\"section\"><thead><tr><th>Metric Name</th>\
                 <th>Metric Unit</th><th>Metric Value</th><th>Replay Pass</th></tr></thead><tbody>",
                esc(section)
            );
            for s in mine.iter().filter(|s| s.section == section) {
                let passes: Vec<String> = s.passes.iter().map(u32::to_string).collect();
                let _ = writeln!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                    esc(&s.name),
                    esc(&s.unit),
                    esc(&ncu_value(s.value)),
                    esc(&passes.join(";"))
                );
            }
            out.push_str("</tbody></table>\n");
        }
        out.push_str(
            "<h3>raw</h3>\n<table class=\"section raw\"><thead><tr><th>Metric Name</th>\
             <th>Metric Unit</th><th>Metric Value</th><th>Replay Pass</th></tr></thead><tbody>\n",
        );
        for m in &names {
            let unit = ncu_unit(r.metric(m).map_or("", |x| x.unit.as_str()));
            let mut line = |value: &str, pass: &str| {
                let _ = writeln!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                    esc(m),
                    esc(unit),
                    esc(value),
                    esc(pass)
                );
            };
            match index.by_pass(id, m) {
                Some(passes) if !passes.is_empty() => {
                    for (pass, s) in passes {
                        line(&ncu_value(s.value), &pass.to_string());
                    }
                }
                _ => line("n/a", ""),
            }
        }
        out.push_str("</tbody></table>\n</details>\n");
    }
    out.push_str("</section>\n");
}

/// `text` for HTML text and attribute values: `&`, `<`, `>`, `"` and `'` as entities.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `v` with an SI prefix and three significant digits: `1.23 TFLOP/s`, `4.8 TB/s`, `0.01`.
pub fn si(v: f64, unit: &str) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    const UP: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    const DOWN: [&str; 3] = ["m", "µ", "n"];
    let a = v.abs();
    let (scaled, prefix) = if a == 0.0 {
        (0.0, "")
    } else if a >= 1.0 {
        let k = ((a.log10() / 3.0).floor() as usize).min(UP.len() - 1);
        (v / 1e3f64.powi(k as i32), UP[k])
    } else if a >= 0.01 {
        (v, "")
    } else {
        let k = ((-a.log10() / 3.0).ceil() as usize).clamp(1, DOWN.len());
        (v * 1e3f64.powi(k as i32), DOWN[k - 1])
    };
    let digits = if scaled.abs() >= 100.0 {
        0
    } else if scaled.abs() >= 10.0 {
        1
    } else {
        2
    };
    let mut n = format!("{scaled:.digits$}");
    if n.contains('.') {
        while n.ends_with('0') {
            n.pop();
        }
        if n.ends_with('.') {
            n.pop();
        }
    }
    let sep = if prefix.is_empty() && unit.is_empty() {
        ""
    } else {
        " "
    };
    format!("{n}{sep}{prefix}{unit}")
}

const CSS: &str = "
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em;color:#1d1d1f;background:#fff}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.15em;margin:1.4em 0 .4em}h3{font-size:1em;margin:1em 0 .3em}
.facts span{display:inline-block;margin-right:1.2em}.note{color:#555}
table{border-collapse:collapse;margin:.3em 0}th,td{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f5}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}td.dims{white-space:nowrap}
table.sortable th{cursor:pointer;user-select:none;white-space:nowrap}
table.sortable th[aria-sort=ascending]::after{content:' \\25B2'}table.sortable th[aria-sort=descending]::after{content:' \\25BC'}
td.name{max-width:44em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;font-family:ui-monospace,monospace;font-size:.92em}
tr.marked td{background:#fff4c2}
details{border:1px solid #ddd;border-radius:4px;margin:.4em 0;padding:.3em .6em}details[open]{background:#fcfcfd}
summary{cursor:pointer;font-family:ui-monospace,monospace;font-size:.92em;overflow-wrap:anywhere}
svg.roofline{display:block;max-width:100%;height:auto;margin:.5em 0;font-size:11px}
svg .frame{fill:#fff;stroke:#999}svg .grid{stroke:#eee}svg .tick{fill:#555}svg .axis{fill:#333;font-size:12px}
svg .roof{fill:none;stroke-width:2}svg .roof.mem{stroke:#2a7}svg .roof.fp32{stroke:#36c}svg .roof.fp64{stroke:#c63}svg .roof.fp16{stroke:#939}
svg .roof-label{fill:#333}
svg .pt{stroke:#fff;stroke-width:1;cursor:pointer}svg .pt.fp32{fill:#36c}svg .pt.fp64{fill:#c63}svg .pt.fp16{fill:#939}
svg .pt:hover,svg .pt.marked{stroke:#000;stroke-width:2}svg .key.fp32{fill:#36c}svg .key.fp64{fill:#c63}svg .key.fp16{fill:#939}
code{font-size:.92em}
";

/// Sorting, and points linked to their rows. Data comes from the DOM only (no report text is
/// inside the script).
const SCRIPT: &str = r#"
(function () {
  'use strict';
  var table = document.getElementById('kernels-table');
  var body = table.tBodies[0];
  var heads = table.tHead.rows[0].cells;
  function key(row, i, num) {
    var c = row.cells[i];
    if (!num) { return c.textContent; }
    var v = c.getAttribute('data-v');
    return v === null || v === '' ? null : parseFloat(v);
  }
  function idOf(row) { return parseFloat(row.getAttribute('data-dispatch')); }
  function sortBy(i, desc) {
    var num = heads[i].getAttribute('data-type') === 'num';
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a, i, num), y = key(b, i, num), c;
      if (x === null || y === null) {
        c = x === y ? 0 : (x === null ? 1 : -1);
        return c !== 0 ? c : idOf(a) - idOf(b);
      }
      c = num ? x - y : (x < y ? -1 : (x > y ? 1 : 0));
      if (desc) { c = -c; }
      return c !== 0 ? c : idOf(a) - idOf(b);
    });
    rows.forEach(function (r) { body.appendChild(r); });
    for (var j = 0; j < heads.length; j++) {
      heads[j].setAttribute('aria-sort', j === i ? (desc ? 'descending' : 'ascending') : 'none');
    }
  }
  Array.prototype.forEach.call(heads, function (h, i) {
    h.addEventListener('click', function () {
      var now = h.getAttribute('aria-sort');
      var desc = now === 'descending' ? false :
        (now === 'ascending' ? true : h.getAttribute('data-type') === 'num');
      sortBy(i, desc);
    });
  });
  var first = -1;
  for (var i = 0; i < heads.length; i++) {
    if (heads[i].hasAttribute('data-default')) { first = i; }
  }
  if (first >= 0) { sortBy(first, heads[first].getAttribute('data-default') === 'descending'); }
  function rowOf(id) { return body.querySelector('tr[data-dispatch="' + id + '"]'); }
  function show(id) {
    Array.prototype.forEach.call(document.querySelectorAll('.marked'), function (e) {
      e.classList.remove('marked');
    });
    var row = rowOf(id);
    if (row) { row.classList.add('marked'); }
    Array.prototype.forEach.call(
      document.querySelectorAll('circle[data-dispatch="' + id + '"]'),
      function (c) { c.classList.add('marked'); });
    var d = document.getElementById('d-' + id);
    if (d) { d.open = true; d.scrollIntoView({block: 'nearest'}); }
  }
  var linked = 0;
  Array.prototype.forEach.call(document.querySelectorAll('svg.roofline circle[data-dispatch]'),
    function (c) {
      var id = c.getAttribute('data-dispatch');
      c.addEventListener('click', function () { show(id); });
      if (c.closest('#roofline-all') && rowOf(id)) { linked += 1; }
    });
  document.body.setAttribute('data-ready', String(linked));
})();
"#;
