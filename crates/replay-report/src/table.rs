//! The terminal table of `kreplay run --tool counters` (SPEC §12): one block per kernel (in the
//! order kernels first ran), one line per metric.
//!
//! A dispatch's value of a metric is the one of the pass that collected it
//! ([`CounterReport::value`]), never a sum or mean across passes. A kernel launched once shows
//! that value; a kernel launched several times shows the minimum, the median (the lower middle
//! value for an even count, so always a value some dispatch had) and the maximum over its
//! dispatches. A metric some dispatches lack says over how many it was taken. A report merged
//! from several processes has one block per process and kernel, named by its rank and pid.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::csv::ncu_unit;
use crate::number::ncu_value;
use replay_report_types::{CounterDispatch, CounterReport};

/// The per-kernel table, ending in a newline.
pub fn table(report: &CounterReport) -> String {
    let index = report.index();
    let names = report.metric_names();
    // A merged report's kernels by process: one block per process and kernel.
    let process = |d: &CounterDispatch| d.origin.map(|o| o.process);
    let mut kernels: Vec<(&str, Vec<&CounterDispatch>)> = Vec::new();
    for d in &report.dispatches {
        match kernels
            .iter_mut()
            .find(|(k, l)| *k == d.kernel && process(l[0]) == process(d))
        {
            Some((_, list)) => list.push(d),
            None => kernels.push((&d.kernel, vec![d])),
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "kernel-replay counters: {} kernel(s), {} dispatch(es), {} metric(s) in {} pass(es){}",
        kernels.len(),
        report.dispatches.len(),
        names.len(),
        report.passes,
        match (
            report.device_name.as_str(),
            report.compute_capability.as_str()
        ) {
            ("", _) => String::new(),
            (d, "") => format!(" on {d}"),
            (d, cc) => format!(" on {d} (CC {cc})"),
        }
    );
    let origins = report.origins();
    if origins.len() > 1 {
        let list: Vec<String> = origins.iter().map(|(p, r)| who(*p, *r)).collect();
        let _ = writeln!(out, "{} processes: {}", origins.len(), list.join(", "));
    }
    match report.clock_control.as_str() {
        "" => {}
        "base" => {
            let _ = writeln!(
                out,
                "clocks: locked to base for the run (--clock-control base)"
            );
        }
        c => {
            let _ = writeln!(out, "clocks: as the GPU chose (--clock-control {c})");
        }
    }
    let _ = writeln!(
        out,
        "each dispatch: the value of the pass that collected the metric (never a sum of passes); \
         several dispatches: min / median / max over them"
    );
    for (kernel, list) in &kernels {
        let shown = match list[0].kernel_demangled.as_str() {
            "" => kernel,
            d => d,
        };
        let from = match list[0].origin {
            Some(o) => format!("{}: ", who(o.process, o.rank)),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "\n{from}{shown}  ({} dispatch{}, {} pass{})",
            list.len(),
            if list.len() == 1 { "" } else { "es" },
            list[0].passes,
            if list[0].passes == 1 { "" } else { "es" },
        );
        let mut head: Vec<String> = ["metric", "unit", "pass"].map(String::from).to_vec();
        if list.len() == 1 {
            head.push("value".into());
        } else {
            head.extend(["min", "median", "max"].map(String::from));
        }
        let mut rows = vec![head];
        for name in &names {
            let mut values = Vec::new();
            let mut passes = BTreeSet::new();
            for d in list {
                if let Some(s) = index.value(d.dispatch_id, name) {
                    values.push(s.value);
                    passes.insert(s.pass);
                }
            }
            let mut label = (*name).to_owned();
            if !values.is_empty() && values.len() < list.len() {
                let _ = write!(label, " [{} of {}]", values.len(), list.len());
            }
            let unit = ncu_unit(report.metric(name).map_or("", |m| m.unit.as_str())).to_owned();
            let pass = passes
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(",");
            let mut row = vec![label, unit, if pass.is_empty() { "-".into() } else { pass }];
            values.sort_by(f64::total_cmp);
            if values.is_empty() {
                row.extend(std::iter::repeat_n(
                    "n/a".to_owned(),
                    if list.len() == 1 { 1 } else { 3 },
                ));
            } else if list.len() == 1 {
                row.push(ncu_value(values[0]));
            } else {
                let median = values[(values.len() - 1) / 2];
                row.push(ncu_value(values[0]));
                row.push(ncu_value(median));
                row.push(ncu_value(values[values.len() - 1]));
            }
            rows.push(row);
        }
        render(&mut out, &rows);
    }
    out
}

/// A process of a merged report as the table names it: `rank 1 (pid 4242)`, or `pid 4242`
/// without a rank.
fn who(process: u32, rank: Option<u32>) -> String {
    match rank {
        Some(r) => format!("rank {r} (pid {process})"),
        None => format!("pid {process}"),
    }
}

/// Writes `rows` as aligned columns: text columns (the first two) to the left, numbers to the
/// right.
fn render(out: &mut String, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = String::from("  ");
        for (c, cell) in r.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            if c < 2 {
                let _ = write!(line, "{cell:<w$}", w = width[c]);
            } else {
                let _ = write!(line, "{cell:>w$}", w = width[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}
