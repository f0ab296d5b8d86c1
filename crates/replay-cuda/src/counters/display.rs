//! What Nsight Compute shows of each section, as data: the rows `ncu --csv` prints for a
//! section (its *Section Name*, each row's *Metric Name* and *Metric Unit*) and how each value
//! comes from the raw metrics [`super::sections`] collects.
//!
//! One [`DisplayMetric`] per row, in the order of the section file's header: the label ncu
//! prints, the unit, and the value: one raw metric, or a [`Formula`] over raw metrics (ncu's
//! `.per_second` metrics, and the ratios its section files define). Units are ncu's *base*
//! units, spelled as `ncu --print-units base` prints them, never scaled: `ns` where ncu's
//! default CSV prints `us` or `ms`, `hz` for its `Ghz`, `byte/s` for its `Mbyte/s`, `%` as a
//! percentage (0–100; "Branch Instructions Ratio" is ncu's fraction under a `%` label, kept as
//! ncu computes it). A reader comparing with ncu's default CSV scales ncu's values to these
//! units first (`bench/real/ncu_sections.sh` does).
//!
//! Section names, labels and units were checked against Nsight Compute 2025.3.1's
//! `--set full --csv --print-units base` on the H200 (launch 0 of it is the fixture
//! `tests/fixtures/ncu_2025.3_h200_full_base_launch0.csv`; a test reads it).
//!
//! [`rows`] evaluates a dispatch's rows from its raw values: a row whose raw metric was not
//! collected (left out on the chip, or the collection failed), or whose formula cannot be
//! evaluated (a zero divisor), is absent, never a made-up 0. Rows ncu has that CUPTI cannot
//! give (the occupancy calculator's block limits, waves per SM, shared-memory sizes of the
//! launch, branch efficiency from SASS ratios) are not in the table; [`super::sections`]
//! names them on the "not collectable" line.
//!
//! [`section_rows`] does it for every dispatch of a [`CounterReport`], each value the one of
//! the pass that collected it ([`CounterReport::values`]), with the passes a row's inputs came
//! from: what the counters CSV writes under ncu's column names
//! (`replay_report::sections_csv`, in `kreplay`'s output step).

use std::collections::{BTreeMap, BTreeSet};

use replay_report_types::{CounterReport, SectionRow, SectionRows};

use super::sections::Formula;

/// How a row's value is obtained from the raw values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// One raw metric, as collected.
    Metric(&'static str),
    /// A formula over raw metrics.
    Formula(Formula),
}

impl Value {
    /// The raw metrics it reads.
    pub fn inputs(&self) -> Vec<&'static str> {
        match self {
            Value::Metric(m) => vec![m],
            Value::Formula(f) => f.inputs(),
        }
    }

    /// The value over `values`; `None` when an input is missing or not finite, or a divisor
    /// is 0.
    pub fn eval(&self, values: &BTreeMap<String, f64>) -> Option<f64> {
        match self {
            Value::Metric(m) => values.get(*m).copied().filter(|v| v.is_finite()),
            Value::Formula(f) => f.eval(values).filter(|v| v.is_finite()),
        }
    }
}

/// One row ncu prints for a section.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DisplayMetric {
    /// ncu's label (its CSV's *Metric Name*).
    pub label: &'static str,
    /// The base unit (*Metric Unit*; empty for plain counts, as ncu leaves it).
    pub unit: &'static str,
    /// How the value is obtained.
    pub value: Value,
}

/// A section as ncu prints it.
#[derive(Debug, Clone, Copy)]
pub struct DisplaySection {
    /// ncu's `--section` identifier (as in [`super::sections::SECTIONS`]).
    pub id: &'static str,
    /// Its display name (the CSV's *Section Name*).
    pub name: &'static str,
    /// Its rows; empty for a section whose header is charts only.
    pub rows: &'static [DisplayMetric],
}

const fn m(label: &'static str, unit: &'static str, metric: &'static str) -> DisplayMetric {
    DisplayMetric {
        label,
        unit,
        value: Value::Metric(metric),
    }
}

const fn f(label: &'static str, unit: &'static str, formula: Formula) -> DisplayMetric {
    DisplayMetric {
        label,
        unit,
        value: Value::Formula(formula),
    }
}

const SPEED_OF_LIGHT: &[DisplayMetric] = &[
    m(
        "Compute (SM) Throughput",
        "%",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    m("Duration", "ns", "gpu__time_duration.sum"),
    m(
        "Memory Throughput",
        "%",
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    m("Elapsed Cycles", "cycle", "gpc__cycles_elapsed.max"),
    m(
        "L1/TEX Cache Throughput",
        "%",
        "l1tex__throughput.avg.pct_of_peak_sustained_active",
    ),
    m("SM Active Cycles", "cycle", "sm__cycles_active.avg"),
    m(
        "L2 Cache Throughput",
        "%",
        "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    // gpc__cycles_elapsed.avg.per_second.
    f(
        "SM Frequency",
        "hz",
        Formula::PerSecond("gpc__cycles_elapsed.avg"),
    ),
    m(
        "DRAM Throughput",
        "%",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    // dram__cycles_elapsed.avg.per_second.
    f(
        "DRAM Frequency",
        "hz",
        Formula::PerSecond("dram__cycles_elapsed.avg"),
    ),
];

const LAUNCH_STATS: &[DisplayMetric] = &[
    m("Grid Size", "", "launch__grid_size"),
    m(
        "Registers Per Thread",
        "register/thread",
        "launch__registers_per_thread",
    ),
    m("Block Size", "", "launch__block_size"),
    m("Threads", "thread", "launch__thread_count"),
];

const OCCUPANCY: &[DisplayMetric] = &[
    m(
        "Theoretical Occupancy",
        "%",
        "sm__maximum_warps_per_active_cycle_pct",
    ),
    m(
        "Theoretical Active Warps per SM",
        "warp",
        "sm__maximum_warps_avg_per_active_cycle",
    ),
    m(
        "Achieved Occupancy",
        "%",
        "sm__warps_active.avg.pct_of_peak_sustained_active",
    ),
    m(
        "Achieved Active Warps Per SM",
        "warp",
        "sm__warps_active.avg.per_cycle_active",
    ),
];

const COMPUTE_WORKLOAD: &[DisplayMetric] = &[
    m(
        "Executed Ipc Elapsed",
        "inst/cycle",
        "sm__inst_executed.avg.per_cycle_elapsed",
    ),
    m(
        "SM Busy",
        "%",
        "sm__instruction_throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    m(
        "Executed Ipc Active",
        "inst/cycle",
        "sm__inst_executed.avg.per_cycle_active",
    ),
    m(
        "Issue Slots Busy",
        "%",
        "sm__inst_issued.avg.pct_of_peak_sustained_elapsed",
    ),
    m(
        "Issued Ipc Active",
        "inst/cycle",
        "sm__inst_issued.avg.per_cycle_active",
    ),
];

const MEMORY_WORKLOAD: &[DisplayMetric] = &[
    // dram__bytes.sum.per_second.
    f(
        "Memory Throughput",
        "byte/s",
        Formula::PerSecond("dram__bytes.sum"),
    ),
    m(
        "Mem Busy",
        "%",
        "gpu__compute_memory_access_throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    m("L1/TEX Hit Rate", "%", "l1tex__t_sector_hit_rate.pct"),
    m(
        "Max Bandwidth",
        "%",
        "gpu__compute_memory_request_throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    m("L2 Hit Rate", "%", "lts__t_sector_hit_rate.pct"),
    m(
        "Mem Pipes Busy",
        "%",
        "sm__memory_throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    m(
        "L2 Compression Input Sectors",
        "sector",
        "lrc__ilc_input_sectors.sum",
    ),
    m(
        "L2 Compression Success Rate",
        "%",
        "lrc__average_ilc_input_sector_success_rate.pct",
    ),
    m(
        "L2 Compression Ratio",
        "%",
        "lrc__average_ilc_output_sector_compression_achieved_rate.pct",
    ),
];

const SCHEDULER_STATS: &[DisplayMetric] = &[
    m(
        "Active Warps Per Scheduler",
        "warp",
        "smsp__warps_active.avg.per_cycle_active",
    ),
    // smsp__issue_inst0.avg.pct_of_peak_sustained_active.
    f(
        "No Eligible",
        "%",
        Formula::Pct(
            "smsp__issue_inst0.avg.per_cycle_active",
            "smsp__issue_inst0.avg.peak_sustained",
        ),
    ),
    m(
        "Eligible Warps Per Scheduler",
        "warp",
        "smsp__warps_eligible.avg.per_cycle_active",
    ),
    m(
        "One or More Eligible",
        "%",
        "smsp__issue_active.avg.pct_of_peak_sustained_active",
    ),
    m(
        "Issued Warp Per Scheduler",
        "",
        "smsp__issue_active.avg.per_cycle_active",
    ),
];

const WARP_STATE_STATS: &[DisplayMetric] = &[
    m(
        "Warp Cycles Per Issued Instruction",
        "cycle",
        "smsp__average_warp_latency_per_inst_issued.ratio",
    ),
    // smsp__thread_inst_executed_per_inst_executed.ratio.
    f(
        "Avg. Active Threads Per Warp",
        "",
        Formula::Ratio("smsp__thread_inst_executed.sum", "smsp__inst_executed.sum"),
    ),
    m(
        "Warp Cycles Per Executed Instruction",
        "cycle",
        "smsp__average_warps_active_per_inst_executed.ratio",
    ),
    // smsp__thread_inst_executed_pred_on_per_inst_executed.ratio.
    f(
        "Avg. Not Predicated Off Threads Per Warp",
        "",
        Formula::Ratio(
            "smsp__thread_inst_executed_pred_on.sum",
            "smsp__inst_executed.sum",
        ),
    ),
];

const INSTRUCTION_STATS: &[DisplayMetric] = &[
    m("Executed Instructions", "inst", "smsp__inst_executed.sum"),
    m(
        "Avg. Executed Instructions Per Scheduler",
        "inst",
        "smsp__inst_executed.avg",
    ),
    m("Issued Instructions", "inst", "smsp__inst_issued.sum"),
    m(
        "Avg. Issued Instructions Per Scheduler",
        "inst",
        "smsp__inst_issued.avg",
    ),
];

const SOURCE_COUNTERS: &[DisplayMetric] = &[
    m(
        "Branch Instructions",
        "inst",
        "smsp__inst_executed_op_branch.sum",
    ),
    // derived__smsp__inst_executed_op_branch_pct: a fraction, under ncu's % label.
    f(
        "Branch Instructions Ratio",
        "%",
        Formula::Ratio(
            "smsp__inst_executed_op_branch.sum",
            "smsp__inst_executed.sum",
        ),
    ),
];

const WORKLOAD_DISTRIBUTION: &[DisplayMetric] = &[
    m("Average SM Active Cycles", "cycle", "sm__cycles_active.avg"),
    m(
        "Average L1 Active Cycles",
        "cycle",
        "l1tex__cycles_active.avg",
    ),
    m(
        "Average L2 Active Cycles",
        "cycle",
        "lts__cycles_active.avg",
    ),
    m(
        "Average SMSP Active Cycles",
        "cycle",
        "smsp__cycles_active.avg",
    ),
    m(
        "Average DRAM Active Cycles",
        "cycle",
        "dram__cycles_active.avg",
    ),
    m("Total SM Elapsed Cycles", "cycle", "sm__cycles_elapsed.sum"),
    m(
        "Total L1 Elapsed Cycles",
        "cycle",
        "l1tex__cycles_elapsed.sum",
    ),
    m(
        "Total L2 Elapsed Cycles",
        "cycle",
        "lts__cycles_elapsed.sum",
    ),
    m(
        "Total SMSP Elapsed Cycles",
        "cycle",
        "smsp__cycles_elapsed.sum",
    ),
    m(
        "Total DRAM Elapsed Cycles",
        "cycle",
        "dram__cycles_elapsed.sum",
    ),
];

/// Every section of [`super::sections::SECTIONS`] as ncu prints it.
pub const DISPLAY: &[DisplaySection] = &[
    DisplaySection {
        id: "LaunchStats",
        name: "Launch Statistics",
        rows: LAUNCH_STATS,
    },
    DisplaySection {
        id: "Occupancy",
        name: "Occupancy",
        rows: OCCUPANCY,
    },
    DisplaySection {
        id: "SpeedOfLight",
        name: "GPU Speed Of Light Throughput",
        rows: SPEED_OF_LIGHT,
    },
    // Charts only: ncu's CSV has no rows of it.
    DisplaySection {
        id: "SpeedOfLight_RooflineChart",
        name: "GPU Speed Of Light Roofline Chart",
        rows: &[],
    },
    DisplaySection {
        id: "MemoryWorkloadAnalysis",
        name: "Memory Workload Analysis",
        rows: MEMORY_WORKLOAD,
    },
    DisplaySection {
        id: "ComputeWorkloadAnalysis",
        name: "Compute Workload Analysis",
        rows: COMPUTE_WORKLOAD,
    },
    DisplaySection {
        id: "SchedulerStats",
        name: "Scheduler Statistics",
        rows: SCHEDULER_STATS,
    },
    DisplaySection {
        id: "WarpStateStats",
        name: "Warp State Statistics",
        rows: WARP_STATE_STATS,
    },
    DisplaySection {
        id: "InstructionStats",
        name: "Instruction Statistics",
        rows: INSTRUCTION_STATS,
    },
    DisplaySection {
        id: "SourceCounters",
        name: "Source Counters",
        rows: SOURCE_COUNTERS,
    },
    DisplaySection {
        id: "WorkloadDistribution",
        name: "GPU and Memory Workload Distribution",
        rows: WORKLOAD_DISTRIBUTION,
    },
];

/// A section's display by its `--section` identifier.
pub fn display_section(id: &str) -> Option<&'static DisplaySection> {
    DISPLAY.iter().find(|s| s.id == id)
}

/// One evaluated row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The section's display name.
    pub section: &'static str,
    /// The row's label.
    pub name: &'static str,
    /// Its unit.
    pub unit: &'static str,
    /// Its value.
    pub value: f64,
    /// The raw metrics it was computed from.
    pub inputs: Vec<&'static str>,
}

/// The rows of `sections` (identifiers, in order; unknown ones have none) over one dispatch's
/// raw `values`: rows that cannot be evaluated are left out.
pub fn rows(sections: &[&str], values: &BTreeMap<String, f64>) -> Vec<Row> {
    let mut out = Vec::new();
    for s in sections.iter().filter_map(|id| display_section(id)) {
        for d in s.rows {
            if let Some(value) = d.value.eval(values) {
                out.push(Row {
                    section: s.name,
                    name: d.label,
                    unit: d.unit,
                    value,
                    inputs: d.value.inputs(),
                });
            }
        }
    }
    out
}

/// The rows of `sections` for every dispatch of `report`, by dispatch id, each with the
/// replay passes its inputs were collected in.
pub fn section_rows(report: &CounterReport, sections: &[&str]) -> SectionRows {
    report
        .values()
        .into_iter()
        .map(|(id, by_metric)| {
            let plain: BTreeMap<String, f64> = by_metric
                .iter()
                .map(|(name, (value, _))| (name.clone(), *value))
                .collect();
            let rows = rows(sections, &plain)
                .into_iter()
                .map(|r| SectionRow {
                    section: r.section.to_string(),
                    name: r.name.to_string(),
                    unit: r.unit.to_string(),
                    value: r.value,
                    passes: r
                        .inputs
                        .iter()
                        .filter_map(|m| by_metric.get(*m).map(|(_, pass)| *pass))
                        .collect::<BTreeSet<u32>>()
                        .into_iter()
                        .collect(),
                })
                .collect();
            (id, rows)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::sections::{resolve, SECTIONS, SECTION_SETS};
    use replay_report_types::{CounterDispatch, CounterSample, MetricInfo};

    fn values(v: &[(&str, f64)]) -> BTreeMap<String, f64> {
        v.iter().map(|(k, x)| (k.to_string(), *x)).collect()
    }

    fn find<'a>(rows: &'a [Row], section: &str, name: &str) -> Option<&'a Row> {
        rows.iter().find(|r| r.section == section && r.name == name)
    }

    #[test]
    fn every_section_has_a_display_and_every_input_is_collected() {
        for s in SECTIONS {
            let d = display_section(s.name).unwrap_or_else(|| panic!("{} has no display", s.name));
            let r = resolve(&[], &[s.name.to_string()]).unwrap();
            for row in d.rows {
                for i in row.value.inputs() {
                    assert!(
                        r.raw.iter().any(|x| x == i),
                        "{}: {} reads {i}, which the section does not collect",
                        s.name,
                        row.label
                    );
                }
            }
        }
        assert_eq!(DISPLAY.len(), SECTIONS.len());
        // Labels are unique within a section (the CSV's key is section and label).
        for d in DISPLAY {
            let mut l: Vec<&str> = d.rows.iter().map(|r| r.label).collect();
            l.sort_unstable();
            l.dedup();
            assert_eq!(l.len(), d.rows.len(), "{}", d.id);
        }
        let full = SECTION_SETS.iter().find(|(n, _)| *n == "full").unwrap().1;
        assert!(full.contains(&"WorkloadDistribution"));
    }

    /// Nsight Compute 2025.3.1's `--set full --csv --print-units base` of one launch on the
    /// H200.
    const NCU_FULL: &str =
        include_str!("../../tests/fixtures/ncu_2025.3_h200_full_base_launch0.csv");

    /// One CSV record's fields (RFC 4180 as ncu writes it: every field quoted, `""` a quote
    /// inside one; commas inside quotes are the field's).
    fn fields(line: &str) -> Vec<String> {
        let mut out = vec![String::new()];
        let (mut quoted, mut chars) = (false, line.chars().peekable());
        while let Some(c) = chars.next() {
            let field = out.last_mut().expect("one field at least");
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                ('"', _) => quoted = !quoted,
                (',', false) => out.push(String::new()),
                _ => field.push(c),
            }
        }
        out
    }

    #[test]
    fn fields_reads_quotes_and_commas_inside_them() {
        let line = r#""a","(1, 2)","say ""hi""","""#;
        assert_eq!(fields(line), ["a", "(1, 2)", r#"say "hi""#, ""]);
    }

    #[test]
    fn every_row_is_named_and_united_as_nsight_compute_prints_it() {
        let mut lines = NCU_FULL.lines();
        let header = fields(lines.next().unwrap());
        let col = |n: &str| header.iter().position(|h| h == n).unwrap();
        let (sec, name, unit) = (col("Section Name"), col("Metric Name"), col("Metric Unit"));
        let ncu: BTreeMap<(String, String), String> = lines
            .map(fields)
            .map(|f| ((f[sec].clone(), f[name].clone()), f[unit].clone()))
            .collect();
        let mut ours = 0;
        for d in DISPLAY {
            for row in d.rows {
                let key = (d.name.to_string(), row.label.to_string());
                let u = ncu
                    .get(&key)
                    .unwrap_or_else(|| panic!("{} / {}: not in ncu's CSV", d.name, row.label));
                assert_eq!(u, row.unit, "{} / {}", d.name, row.label);
                ours += 1;
            }
        }
        // Every section ncu printed rows for that we know has its display name here.
        for (s, _) in ncu.keys() {
            if ncu.keys().any(|(x, l)| x == s && !l.is_empty()) {
                let known = DISPLAY.iter().any(|d| d.name == s);
                let others = ["PM Sampling"];
                assert!(known || others.contains(&s.as_str()), "section {s:?}");
            }
        }
        assert!(ours >= 50, "{ours}");
    }

    #[test]
    fn rows_take_their_raw_metric_and_name_it_as_ncu_does() {
        let v = values(&[
            ("gpu__time_duration.sum", 2_144.0),
            ("gpc__cycles_elapsed.max", 4_000.0),
            ("launch__registers_per_thread", 16.0),
        ]);
        let r = rows(&["SpeedOfLight", "LaunchStats"], &v);
        let d = find(&r, "GPU Speed Of Light Throughput", "Duration").unwrap();
        assert_eq!((d.unit, d.value), ("ns", 2_144.0));
        assert_eq!(d.inputs, ["gpu__time_duration.sum"]);
        let e = find(&r, "GPU Speed Of Light Throughput", "Elapsed Cycles").unwrap();
        assert_eq!((e.unit, e.value), ("cycle", 4_000.0));
        let g = find(&r, "Launch Statistics", "Registers Per Thread").unwrap();
        assert_eq!((g.unit, g.value), ("register/thread", 16.0));
        // Nothing else was given, so nothing else is there.
        assert_eq!(r.len(), 3, "{r:?}");
    }

    #[test]
    fn derived_rows_compute_ratios_and_rates_from_their_inputs() {
        let v = values(&[
            ("gpu__time_duration.sum", 2_000.0),
            ("gpc__cycles_elapsed.avg", 3_960.0),
            ("dram__bytes.sum", 4_000_000.0),
            ("smsp__thread_inst_executed.sum", 6_400.0),
            ("smsp__inst_executed.sum", 256.0),
            ("smsp__inst_executed_op_branch.sum", 32.0),
            ("smsp__issue_inst0.avg.per_cycle_active", 0.25),
            ("smsp__issue_inst0.avg.peak_sustained", 1.0),
        ]);
        let r = rows(
            &[
                "SpeedOfLight",
                "MemoryWorkloadAnalysis",
                "WarpStateStats",
                "SourceCounters",
                "SchedulerStats",
            ],
            &v,
        );
        // 3960 cycles in 2 µs: 1.98 GHz.
        let sm = find(&r, "GPU Speed Of Light Throughput", "SM Frequency").unwrap();
        assert_eq!((sm.unit, sm.value), ("hz", 1.98e9));
        // 4 MB in 2 µs: 2 TB/s.
        let bw = find(&r, "Memory Workload Analysis", "Memory Throughput").unwrap();
        assert_eq!((bw.unit, bw.value), ("byte/s", 2.0e12));
        assert_eq!(bw.inputs, ["dram__bytes.sum", "gpu__time_duration.sum"]);
        let t = find(&r, "Warp State Statistics", "Avg. Active Threads Per Warp").unwrap();
        assert_eq!(t.value, 25.0);
        let b = find(&r, "Source Counters", "Branch Instructions Ratio").unwrap();
        assert_eq!((b.unit, b.value), ("%", 0.125));
        let n = find(&r, "Scheduler Statistics", "No Eligible").unwrap();
        assert_eq!(n.value, 25.0);
    }

    #[test]
    fn a_row_whose_input_is_missing_or_unusable_is_absent() {
        // The pred-on count is missing: its ratio is absent, the other ratio over the same
        // divisor is there.
        let v = values(&[
            ("smsp__thread_inst_executed.sum", 64.0),
            ("smsp__inst_executed.sum", 2.0),
        ]);
        let r = rows(&["WarpStateStats"], &v);
        assert!(find(&r, "Warp State Statistics", "Avg. Active Threads Per Warp").is_some());
        assert!(find(
            &r,
            "Warp State Statistics",
            "Avg. Not Predicated Off Threads Per Warp"
        )
        .is_none());
        // A zero duration gives no frequency; a NaN value is no value.
        let v = values(&[
            ("gpu__time_duration.sum", 0.0),
            ("gpc__cycles_elapsed.avg", 10.0),
            ("gpc__cycles_elapsed.max", f64::NAN),
        ]);
        let r = rows(&["SpeedOfLight"], &v);
        assert!(r
            .iter()
            .all(|x| x.name != "SM Frequency" && x.name != "Elapsed Cycles"));
        assert_eq!(r.len(), 1, "{r:?}"); // Duration itself.
                                         // A section that is charts only, or unknown, has no rows.
        assert!(rows(&["SpeedOfLight_RooflineChart", "Nope"], &v).is_empty());
    }

    #[test]
    fn section_rows_use_each_dispatchs_collecting_pass() {
        let info = |name: &str, pass| MetricInfo {
            name: name.into(),
            unit: String::new(),
            description: String::new(),
            pass,
        };
        let sample = |id, pass, metric: &str, value| CounterSample {
            dispatch_id: id,
            pass,
            metric: metric.into(),
            value,
        };
        let dispatch = |id| CounterDispatch {
            dispatch_id: id,
            kernel: "k".into(),
            kernel_demangled: "k".into(),
            device: 0,
            context: 1,
            stream: 2,
            grid: [1, 1, 1],
            block: [32, 1, 1],
            passes: 3,
            snapshot_bytes: 0,
            start_ns: 0,
            end_ns: 0,
            pass_ns: vec![],
            graph: None,
            node: None,
            graph_launch: None,
            phases: None,
            origin: None,
        };
        let r = CounterReport {
            metrics: vec![
                info("dram__bytes.sum", 1),
                info("gpu__time_duration.sum", 2),
            ],
            dispatches: vec![dispatch(7), dispatch(9)],
            samples: vec![
                sample(7, 1, "dram__bytes.sum", 1_000.0),
                sample(7, 2, "gpu__time_duration.sum", 1_000.0),
                // Another pass's duration is not the one that stands for the metric.
                sample(7, 0, "gpu__time_duration.sum", 500.0),
                sample(9, 2, "gpu__time_duration.sum", 10.0),
            ],
            ..CounterReport::default()
        };
        let by = section_rows(&r, &["MemoryWorkloadAnalysis", "SpeedOfLight"]);
        let seven = &by[&7];
        let bw = seven
            .iter()
            .find(|x| x.name == "Memory Throughput")
            .unwrap();
        assert_eq!(bw.section, "Memory Workload Analysis");
        assert_eq!(bw.value, 1.0e9);
        assert_eq!(bw.passes, [1, 2]);
        let d = seven.iter().find(|x| x.name == "Duration").unwrap();
        assert_eq!((d.value, d.passes.as_slice()), (1_000.0, &[2][..]));
        // Dispatch 9 has no DRAM bytes: no bandwidth row.
        assert!(by[&9].iter().all(|x| x.name != "Memory Throughput"));
        assert!(by[&9].iter().any(|x| x.name == "Duration"));
    }
}
