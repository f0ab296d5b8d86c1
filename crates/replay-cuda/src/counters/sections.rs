//! Nsight Compute's sections and sets on Hopper as data: which metrics each section shows,
//! which the range profiler collects, which are derived on the host from collected ones (as
//! ncu derives them), and which CUPTI cannot give at all (named, never silently dropped).
//!
//! What ncu *prints* for each section (labels such as "Duration", units, which metric or
//! formula each row shows) is [`super::display`]; every raw metric a display row reads is
//! among its section's metrics here (a test checks).
//!
//! A set resolves to its sections; a section to raw metrics (handed to [`MetricPlan`]'s
//! packing, so passes are planned as for `--metrics`), derived metrics (computed after the
//! replay from the raw values and device attributes) and not-collectable ones.
//!
//! [`MetricPlan`]: super::MetricPlan

use std::collections::BTreeMap;

/// How a metric of a section is obtained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    /// Collected by the range profiler (or from the launch, `launch__*`).
    Raw,
    /// Computed on the host from other metrics.
    Derived(Formula),
    /// `cuDeviceGetAttribute` of the device (`device__attribute_*`).
    Attribute(i32),
    /// Nsight Compute has it, CUPTI's range profiler does not (instruction-level sampling,
    /// source counters, ncu's own bookkeeping).
    NotCollectable(&'static str),
}

/// A host-side formula over metric values, as Nsight Compute evaluates it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Formula {
    /// `a / b`.
    Ratio(&'static str, &'static str),
    /// `100 * a / b`.
    Pct(&'static str, &'static str),
    /// `a / (duration in seconds)`, the duration being `gpu__time_duration.sum` in ns.
    PerSecond(&'static str),
    /// `a * b`.
    Product(&'static str, &'static str),
}

/// The metric every `PerSecond` divides by (ns).
pub const DURATION: &str = "gpu__time_duration.sum";

impl Formula {
    /// The metrics the formula reads.
    pub fn inputs(&self) -> Vec<&'static str> {
        match *self {
            Formula::Ratio(a, b) | Formula::Pct(a, b) | Formula::Product(a, b) => vec![a, b],
            Formula::PerSecond(a) => vec![a, DURATION],
        }
    }

    /// Evaluates over `values`; `None` when an input is missing or a divisor is 0.
    pub fn eval(&self, values: &BTreeMap<String, f64>) -> Option<f64> {
        let get = |m: &str| values.get(m).copied().filter(|v| v.is_finite());
        let div = |a: f64, b: f64| (b != 0.0).then(|| a / b);
        match *self {
            Formula::Ratio(a, b) => div(get(a)?, get(b)?),
            Formula::Pct(a, b) => div(100.0 * get(a)?, get(b)?),
            Formula::PerSecond(a) => div(get(a)? * 1e9, get(DURATION)?),
            Formula::Product(a, b) => Some(get(a)? * get(b)?),
        }
    }
}

/// One metric shown by a section.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SectionMetric {
    /// Nsight Compute's name.
    pub name: &'static str,
    /// How it is obtained.
    pub source: Source,
}

/// A section: its Nsight Compute identifier and metrics.
#[derive(Debug, Clone, Copy)]
pub struct Section {
    /// ncu's `--section` identifier.
    pub name: &'static str,
    /// Its metrics, in display order.
    pub metrics: &'static [SectionMetric],
}

const fn raw(name: &'static str) -> SectionMetric {
    SectionMetric {
        name,
        source: Source::Raw,
    }
}
const fn derived(name: &'static str, f: Formula) -> SectionMetric {
    SectionMetric {
        name,
        source: Source::Derived(f),
    }
}
const fn attr(name: &'static str, id: i32) -> SectionMetric {
    SectionMetric {
        name,
        source: Source::Attribute(id),
    }
}
const fn none(name: &'static str, why: &'static str) -> SectionMetric {
    SectionMetric {
        name,
        source: Source::NotCollectable(why),
    }
}

// CUdevice_attribute values (cuda.h).
const ATTR_SM_COUNT: i32 = 16;
const ATTR_MAX_THREADS_PER_SM: i32 = 39; // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
const ATTR_L2_CACHE_SIZE: i32 = 38;
const ATTR_CLOCK_RATE: i32 = 13;

const LAUNCH_STATS: &[SectionMetric] = &[
    raw("launch__block_size"),
    raw("launch__grid_size"),
    raw("launch__registers_per_thread"),
    raw("launch__thread_count"),
    none(
        "launch__shared_mem_per_block_static",
        "not among the launch's attributes the backend records",
    ),
    none(
        "launch__waves_per_multiprocessor",
        "needs ncu's occupancy calculator",
    ),
    none(
        "launch__shared_mem_per_block_dynamic",
        "not among the launch's attributes the backend records",
    ),
    none(
        "launch__shared_mem_per_block_driver",
        "not among the launch's attributes the backend records",
    ),
    none(
        "launch__shared_mem_config_size",
        "not among the launch's attributes the backend records",
    ),
    none(
        "launch__func_cache_config",
        "not among the launch's attributes the backend records",
    ),
    attr("device__attribute_multiprocessor_count", ATTR_SM_COUNT),
];

const OCCUPANCY: &[SectionMetric] = &[
    raw("sm__warps_active.avg.pct_of_peak_sustained_active"),
    raw("sm__warps_active.avg.per_cycle_active"),
    raw("sm__maximum_warps_per_active_cycle_pct"),
    raw("sm__maximum_warps_avg_per_active_cycle"),
    attr(
        "device__attribute_max_threads_per_multiprocessor",
        ATTR_MAX_THREADS_PER_SM,
    ),
    none(
        "launch__occupancy_limit_registers",
        "needs ncu's occupancy calculator",
    ),
    none(
        "launch__occupancy_limit_shared_mem",
        "needs ncu's occupancy calculator",
    ),
    none(
        "launch__occupancy_limit_warps",
        "needs ncu's occupancy calculator",
    ),
    none(
        "launch__occupancy_limit_blocks",
        "needs ncu's occupancy calculator",
    ),
];

const SPEED_OF_LIGHT: &[SectionMetric] = &[
    raw("gpu__time_duration.sum"),
    raw("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    raw("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
    raw("l1tex__throughput.avg.pct_of_peak_sustained_active"),
    raw("lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    raw("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    raw("sm__cycles_elapsed.avg"),
    raw("sm__cycles_active.avg"),
    raw("gpc__cycles_elapsed.max"),
    raw("dram__cycles_elapsed.avg"),
    // "SM Frequency": the GPC clock, as ncu's section names it.
    derived(
        "gpc__cycles_elapsed.avg.per_second",
        Formula::PerSecond("gpc__cycles_elapsed.avg"),
    ),
    derived(
        "dram__cycles_elapsed.avg.per_second",
        Formula::PerSecond("dram__cycles_elapsed.avg"),
    ),
    attr("device__attribute_clock_rate", ATTR_CLOCK_RATE),
];

// What ncu's roofline charts read on Hopper: the achieved work per precision (SASS counts of
// the add, multiply and fused multiply-add of each precision), the DRAM traffic and duration,
// and the ceilings: each precision's FMA peak per SM cycle (times 2) at the SM clock, the DRAM
// peak per DRAM cycle at the DRAM clock. The peaks are the range profiler's (chip constants).
const ROOFLINE: &[SectionMetric] = &[
    raw("sm__sass_thread_inst_executed_op_ffma_pred_on.sum"),
    raw("sm__sass_thread_inst_executed_op_fadd_pred_on.sum"),
    raw("sm__sass_thread_inst_executed_op_fmul_pred_on.sum"),
    raw("sm__sass_thread_inst_executed_op_dfma_pred_on.sum"),
    raw("sm__sass_thread_inst_executed_op_dadd_pred_on.sum"),
    raw("sm__sass_thread_inst_executed_op_dmul_pred_on.sum"),
    raw("sm__sass_thread_inst_executed_op_hfma_pred_on.sum"),
    raw("sm__sass_thread_inst_executed_op_hadd_pred_on.sum"),
    raw("sm__sass_thread_inst_executed_op_hmul_pred_on.sum"),
    raw("dram__bytes.sum"),
    raw("gpu__time_duration.sum"),
    raw("sm__cycles_elapsed.avg"),
    raw("dram__cycles_elapsed.avg"),
    raw("sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"),
    raw("sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained"),
    raw("sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained"),
    raw("dram__bytes.sum.peak_sustained"),
    derived(
        "dram__bytes.sum.per_second",
        Formula::PerSecond("dram__bytes.sum"),
    ),
    derived(
        "sm__cycles_elapsed.avg.per_second",
        Formula::PerSecond("sm__cycles_elapsed.avg"),
    ),
    derived(
        "dram__cycles_elapsed.avg.per_second",
        Formula::PerSecond("dram__cycles_elapsed.avg"),
    ),
];

const MEMORY_WORKLOAD: &[SectionMetric] = &[
    raw("dram__bytes_read.sum"),
    raw("dram__bytes_write.sum"),
    raw("dram__bytes.sum"),
    raw("lts__t_sectors_op_read.sum"),
    raw("lts__t_sectors_op_write.sum"),
    raw("lts__t_sectors.sum"),
    raw("lts__t_sector_hit_rate.pct"),
    raw("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
    raw("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
    raw("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
    raw("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
    raw("l1tex__t_sector_hit_rate.pct"),
    raw("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
    raw("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
    raw("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    raw("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    raw("gpu__compute_memory_access_throughput.avg.pct_of_peak_sustained_elapsed"),
    raw("gpu__compute_memory_request_throughput.avg.pct_of_peak_sustained_elapsed"),
    raw("sm__memory_throughput.avg.pct_of_peak_sustained_elapsed"),
    // L2 compression on Hopper (ncu's options for CC 9.0).
    raw("lrc__ilc_input_sectors.sum"),
    raw("lrc__average_ilc_input_sector_success_rate.pct"),
    raw("lrc__average_ilc_output_sector_compression_achieved_rate.pct"),
    raw("gpu__time_duration.sum"),
    derived(
        "dram__bytes.sum.per_second",
        Formula::PerSecond("dram__bytes.sum"),
    ),
    // Table "sectors per request" of the L1/TEX table, as ncu divides them.
    derived(
        "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
        Formula::Ratio(
            "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
            "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
        ),
    ),
    derived(
        "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio",
        Formula::Ratio(
            "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
            "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
        ),
    ),
    attr("device__attribute_l2_cache_size", ATTR_L2_CACHE_SIZE),
    none(
        "derived__local_spilling_requests",
        "SASS register-spilling counts (sass__*), not the range profiler's",
    ),
    none(
        "launch__persisting_l2_cache_size",
        "not among the launch's attributes the backend records",
    ),
];

const COMPUTE_WORKLOAD: &[SectionMetric] = &[
    raw("sm__inst_executed.avg.per_cycle_elapsed"),
    raw("sm__inst_executed.avg.per_cycle_active"),
    raw("sm__instruction_throughput.avg.pct_of_peak_sustained_active"),
    raw("sm__instruction_throughput.avg.pct_of_peak_sustained_elapsed"),
    raw("sm__inst_issued.avg.per_cycle_active"),
    raw("sm__inst_issued.avg.pct_of_peak_sustained_elapsed"),
    raw("sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"),
    raw("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
    raw("sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active"),
    raw("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
    raw("sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"),
];

const SCHEDULER_STATS: &[SectionMetric] = &[
    raw("smsp__issue_active.avg.per_cycle_active"),
    raw("smsp__issue_active.avg.pct_of_peak_sustained_active"),
    raw("smsp__inst_issued.avg.per_cycle_active"),
    raw("smsp__warps_active.avg.per_cycle_active"),
    raw("smsp__warps_eligible.avg.per_cycle_active"),
    raw("smsp__maximum_warps_avail_per_scheduler"),
    derived(
        "smsp__issue_inst0.avg.pct_of_peak_sustained_active",
        Formula::Pct(
            "smsp__issue_inst0.avg.per_cycle_active",
            "smsp__issue_inst0.avg.peak_sustained",
        ),
    ),
];

const WARP_STATE_STATS: &[SectionMetric] = &[
    raw("smsp__average_warp_latency_per_inst_issued.ratio"),
    raw("smsp__average_warps_active_per_inst_executed.ratio"),
    raw("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"),
    raw("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"),
    raw("smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio"),
    raw("smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio"),
    raw("smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"),
    raw("smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio"),
    derived(
        "smsp__thread_inst_executed_per_inst_executed.ratio",
        Formula::Ratio("smsp__thread_inst_executed.sum", "smsp__inst_executed.sum"),
    ),
    derived(
        "smsp__thread_inst_executed_pred_on_per_inst_executed.ratio",
        Formula::Ratio(
            "smsp__thread_inst_executed_pred_on.sum",
            "smsp__inst_executed.sum",
        ),
    ),
    derived(
        "smsp__cycles_per_issue_active.ratio",
        Formula::Ratio("smsp__cycles_active.sum", "smsp__issue_active.sum"),
    ),
    none(
        "smsp__pcsamp_warps_issue_stalled_*",
        "PC sampling, not the range profiler",
    ),
];

const INSTRUCTION_STATS: &[SectionMetric] = &[
    raw("smsp__inst_executed.sum"),
    raw("smsp__inst_executed.avg"),
    raw("smsp__inst_issued.sum"),
    raw("smsp__inst_issued.avg"),
    raw("smsp__thread_inst_executed.sum"),
    derived(
        "smsp__thread_inst_executed_per_inst_executed.ratio",
        Formula::Ratio("smsp__thread_inst_executed.sum", "smsp__inst_executed.sum"),
    ),
    none(
        "sass__inst_executed_per_opcode",
        "an instanced metric per opcode; the range profiler has none",
    ),
];

const SOURCE_COUNTERS: &[SectionMetric] = &[
    raw("smsp__inst_executed_op_branch.sum"),
    raw("smsp__inst_executed.sum"),
    // ncu's "Branch Instructions Ratio": a fraction, though ncu labels it %.
    derived(
        "derived__smsp__inst_executed_op_branch_pct",
        Formula::Ratio(
            "smsp__inst_executed_op_branch.sum",
            "smsp__inst_executed.sum",
        ),
    ),
    none(
        "smsp__sass_average_branch_targets_threads_uniform.pct",
        "a ratio of SASS metrics, which the SASS path refuses",
    ),
    none(
        "smsp__sass_branch_targets_threads_divergent.avg",
        "a per-unit average of a SASS metric, which the SASS path refuses",
    ),
    none(
        "source counters (per-instruction SASS)",
        "kernel totals only: no per-instruction output",
    ),
];

const WORKLOAD_DISTRIBUTION: &[SectionMetric] = &[
    raw("sm__cycles_active.avg"),
    raw("l1tex__cycles_active.avg"),
    raw("lts__cycles_active.avg"),
    raw("smsp__cycles_active.avg"),
    raw("dram__cycles_active.avg"),
    raw("sm__cycles_elapsed.sum"),
    raw("l1tex__cycles_elapsed.sum"),
    raw("lts__cycles_elapsed.sum"),
    raw("smsp__cycles_elapsed.sum"),
    raw("dram__cycles_elapsed.sum"),
];

/// Nsight Compute's sections kreplay knows, by ncu's identifiers.
pub const SECTIONS: &[Section] = &[
    Section {
        name: "LaunchStats",
        metrics: LAUNCH_STATS,
    },
    Section {
        name: "Occupancy",
        metrics: OCCUPANCY,
    },
    Section {
        name: "SpeedOfLight",
        metrics: SPEED_OF_LIGHT,
    },
    Section {
        name: "SpeedOfLight_RooflineChart",
        metrics: ROOFLINE,
    },
    Section {
        name: "MemoryWorkloadAnalysis",
        metrics: MEMORY_WORKLOAD,
    },
    Section {
        name: "ComputeWorkloadAnalysis",
        metrics: COMPUTE_WORKLOAD,
    },
    Section {
        name: "SchedulerStats",
        metrics: SCHEDULER_STATS,
    },
    Section {
        name: "WarpStateStats",
        metrics: WARP_STATE_STATS,
    },
    Section {
        name: "InstructionStats",
        metrics: INSTRUCTION_STATS,
    },
    Section {
        name: "SourceCounters",
        metrics: SOURCE_COUNTERS,
    },
    Section {
        name: "WorkloadDistribution",
        metrics: WORKLOAD_DISTRIBUTION,
    },
];

/// ncu's sets by their sections.
pub const SECTION_SETS: &[(&str, &[&str])] = &[
    (
        "basic",
        &[
            "LaunchStats",
            "Occupancy",
            "SpeedOfLight",
            "WorkloadDistribution",
        ],
    ),
    (
        "detailed",
        &[
            "LaunchStats",
            "Occupancy",
            "SpeedOfLight",
            "ComputeWorkloadAnalysis",
            "MemoryWorkloadAnalysis",
            "SourceCounters",
            "SpeedOfLight_RooflineChart",
            "WorkloadDistribution",
        ],
    ),
    (
        "full",
        &[
            "LaunchStats",
            "Occupancy",
            "SpeedOfLight",
            "SpeedOfLight_RooflineChart",
            "ComputeWorkloadAnalysis",
            "MemoryWorkloadAnalysis",
            "SchedulerStats",
            "WarpStateStats",
            "InstructionStats",
            "SourceCounters",
            "WorkloadDistribution",
        ],
    ),
    (
        "roofline",
        &[
            "SpeedOfLight",
            "SpeedOfLight_RooflineChart",
            "WorkloadDistribution",
        ],
    ),
];

/// A section name ncu has that is not here, or an unknown set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SectionError {
    /// Unknown `--section`.
    #[error("unknown section {0:?} (known: {1})")]
    Section(String, String),
    /// Unknown `--set`.
    #[error("unknown set {0:?} (known: {1})")]
    Set(String, String),
}

/// What a list of sets and sections asks: every metric accounted for exactly once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolved {
    /// The sections, in order, without repeats.
    pub sections: Vec<&'static str>,
    /// Metrics for the range profiler (and the launch), including a derived metric's inputs.
    pub raw: Vec<String>,
    /// Derived metrics and their formulas.
    pub derived: Vec<(&'static str, Formula)>,
    /// Device attributes.
    pub attributes: Vec<(&'static str, i32)>,
    /// Metrics CUPTI cannot give, with why.
    pub not_collectable: Vec<(&'static str, &'static str)>,
}

impl Resolved {
    /// The one line of output naming what cannot be collected; `None` when all can.
    pub fn not_collectable_line(&self) -> Option<String> {
        (!self.not_collectable.is_empty()).then(|| {
            format!(
                "not collectable through CUPTI ({}): {}",
                self.not_collectable.len(),
                self.not_collectable
                    .iter()
                    .map(|(m, why)| format!("{m} ({why})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }

    /// Every derived metric evaluated over `values` (raw values and attributes by name).
    pub fn derive(&self, values: &BTreeMap<String, f64>) -> Vec<(&'static str, Option<f64>)> {
        self.derived
            .iter()
            .map(|(m, f)| (*m, f.eval(values)))
            .collect()
    }
}

/// A section by ncu's identifier.
pub fn section(name: &str) -> Option<&'static Section> {
    SECTIONS.iter().find(|s| s.name == name)
}

/// The sections of set `name`.
pub fn section_set(name: &str) -> Option<&'static [&'static str]> {
    SECTION_SETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// Resolves `sets` then `sections` into what to collect, derive and name as missing.
pub fn resolve(sets: &[String], sections: &[String]) -> Result<Resolved, SectionError> {
    let mut names: Vec<&'static str> = Vec::new();
    for s in sets {
        let list = section_set(s).ok_or_else(|| {
            SectionError::Set(
                s.clone(),
                SECTION_SETS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        })?;
        names.extend(list.iter().copied());
    }
    for s in sections {
        let sec = section(s).ok_or_else(|| {
            SectionError::Section(
                s.clone(),
                SECTIONS
                    .iter()
                    .map(|s| s.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        })?;
        names.push(sec.name);
    }
    let mut r = Resolved::default();
    let push_raw = |r: &mut Resolved, m: &str| {
        if !r.raw.iter().any(|x| x == m) {
            r.raw.push(m.to_string());
        }
    };
    for n in names {
        if r.sections.contains(&n) {
            continue;
        }
        r.sections.push(n);
        for m in section(n).map(|s| s.metrics).unwrap_or_default() {
            match m.source {
                Source::Raw => push_raw(&mut r, m.name),
                Source::Derived(f) => {
                    if !r.derived.iter().any(|(d, _)| *d == m.name) {
                        for i in f.inputs() {
                            push_raw(&mut r, i);
                        }
                        r.derived.push((m.name, f));
                    }
                }
                Source::Attribute(id) => {
                    if !r.attributes.iter().any(|(a, _)| *a == m.name) {
                        r.attributes.push((m.name, id));
                    }
                }
                Source::NotCollectable(why) => {
                    if !r.not_collectable.iter().any(|(a, _)| *a == m.name) {
                        r.not_collectable.push((m.name, why));
                    }
                }
            }
        }
    }
    Ok(r)
}

/// The unit of a metric from its name, as ncu labels it: the counter's own unit, the first
/// part of the name (`l1tex__t_sectors` counts L1/TEX sectors, not L2's).
pub fn unit_of(metric: &str) -> Option<&'static str> {
    let (unit, rest) = metric.split_once("__")?;
    if rest.ends_with(".pct") || rest.contains("pct_of_peak") {
        return Some("%");
    }
    if rest.contains(".per_second") {
        return None;
    }
    if rest.contains("bytes") {
        return Some("byte");
    }
    if rest.contains("sectors") && !rest.contains("per_request") {
        return Some(match unit {
            "lts" => "lts_sector",
            "l1tex" => "l1tex_sector",
            _ => "sector",
        });
    }
    if rest.contains("time_duration") {
        return Some("ns");
    }
    if rest.starts_with("cycles") && !rest.contains("per_") {
        return Some("cycle");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn every_metric_of_every_set_is_accounted_for() {
        for (set, secs) in SECTION_SETS {
            let r = resolve(&s(&[set]), &[]).unwrap();
            assert_eq!(r.sections, secs.to_vec());
            for sec in *secs {
                for m in section(sec).unwrap().metrics {
                    let found = r.raw.iter().any(|x| x == m.name)
                        || r.derived.iter().any(|(d, _)| *d == m.name)
                        || r.attributes.iter().any(|(a, _)| *a == m.name)
                        || r.not_collectable.iter().any(|(a, _)| *a == m.name);
                    assert!(found, "{set}: {} unaccounted", m.name);
                }
            }
            for (_, f) in &r.derived {
                for i in f.inputs() {
                    assert!(
                        r.raw.iter().any(|x| x == i),
                        "{set}: input {i} not collected"
                    );
                }
            }
        }
    }

    #[test]
    fn sets_nest_and_repeats_are_dropped() {
        let basic = resolve(&s(&["basic"]), &[]).unwrap();
        let full = resolve(&s(&["full"]), &[]).unwrap();
        for m in &basic.raw {
            assert!(full.raw.contains(m), "{m} in basic, not full");
        }
        let twice = resolve(&s(&["basic"]), &s(&["LaunchStats", "Occupancy"])).unwrap();
        assert_eq!(twice, basic);
        let mut sorted = full.raw.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), full.raw.len());
    }

    #[test]
    fn unknown_names_are_errors_naming_the_known_ones() {
        let e = resolve(&s(&["fast"]), &[]).unwrap_err();
        assert!(e.to_string().contains("roofline"), "{e}");
        let e = resolve(&[], &s(&["Nope"])).unwrap_err();
        assert!(e.to_string().contains("WarpStateStats"), "{e}");
    }

    #[test]
    fn derived_formulas_match_hand_computed_values() {
        let mut v = BTreeMap::new();
        v.insert(DURATION.to_string(), 2_000.0); // 2 µs
        v.insert("dram__bytes.sum".to_string(), 4_000_000.0);
        v.insert("sm__cycles_elapsed.avg".to_string(), 3_960.0);
        v.insert(
            "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum".into(),
            1_024.0,
        );
        v.insert(
            "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum".into(),
            256.0,
        );
        // 4 MB in 2 µs = 2 TB/s.
        assert_eq!(Formula::PerSecond("dram__bytes.sum").eval(&v), Some(2.0e12));
        // 3960 cycles in 2 µs = 1.98 GHz (the H200's boost clock).
        assert_eq!(
            Formula::PerSecond("sm__cycles_elapsed.avg").eval(&v),
            Some(1.98e9)
        );
        assert_eq!(
            Formula::Ratio(
                "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
            )
            .eval(&v),
            Some(4.0)
        );
        assert_eq!(
            Formula::Pct("dram__bytes.sum", "dram__bytes.sum").eval(&v),
            Some(100.0)
        );
        // A missing input or a zero divisor is no value, not 0 or inf.
        assert_eq!(Formula::Ratio("dram__bytes.sum", "absent").eval(&v), None);
        v.insert(DURATION.to_string(), 0.0);
        assert_eq!(Formula::PerSecond("dram__bytes.sum").eval(&v), None);
    }

    #[test]
    fn the_roofline_set_collects_every_count_peak_and_clock_of_ncus_roofline_charts() {
        for set in ["roofline", "full", "detailed"] {
            let r = resolve(&s(&[set]), &[]).unwrap();
            for op in [
                "ffma", "fadd", "fmul", "dfma", "dadd", "dmul", "hfma", "hadd", "hmul",
            ] {
                let m = format!("sm__sass_thread_inst_executed_op_{op}_pred_on.sum");
                assert!(r.raw.contains(&m), "{set}: {m}");
                if op.ends_with("fma") {
                    let peak = format!("{m}.peak_sustained");
                    assert!(r.raw.contains(&peak), "{set}: {peak}");
                }
            }
            for m in [
                "dram__bytes.sum",
                "dram__bytes.sum.peak_sustained",
                "gpu__time_duration.sum",
                "sm__cycles_elapsed.avg",
                "dram__cycles_elapsed.avg",
            ] {
                assert!(r.raw.iter().any(|x| x == m), "{set}: {m}");
            }
            for d in [
                "sm__cycles_elapsed.avg.per_second",
                "dram__cycles_elapsed.avg.per_second",
                "dram__bytes.sum.per_second",
            ] {
                assert!(r.derived.iter().any(|(x, _)| *x == d), "{set}: {d}");
            }
        }
        let only = resolve(&[], &s(&["SpeedOfLight_RooflineChart"])).unwrap();
        assert_eq!(only.not_collectable_line(), None);
    }

    #[test]
    fn not_collectable_is_one_line() {
        let r = resolve(&s(&["full"]), &[]).unwrap();
        let line = r.not_collectable_line().unwrap();
        assert!(!line.contains('\n'));
        assert!(line.contains("sass__inst_executed_per_opcode"));
        let lc = resolve(&[], &s(&["ComputeWorkloadAnalysis"])).unwrap();
        assert_eq!(lc.not_collectable_line(), None);
    }

    #[test]
    fn units_name_the_counters_own_unit() {
        assert_eq!(
            unit_of("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
            Some("l1tex_sector")
        );
        assert_eq!(unit_of("lts__t_sectors_op_read.sum"), Some("lts_sector"));
        assert_eq!(unit_of("dram__bytes_read.sum"), Some("byte"));
        assert_eq!(unit_of("lts__t_sector_hit_rate.pct"), Some("%"));
        assert_eq!(unit_of("gpu__time_duration.sum"), Some("ns"));
    }
}
