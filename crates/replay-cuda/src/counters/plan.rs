//! The metric plan (SPEC §12.1): a list of Nsight Compute metric names compiled on the host
//! into one-pass groups of the range profiler and, for SASS-instruction metrics (`__sass_` in
//! the name), one pass of CUPTI's SASS Metrics API; the [`Profiler`] the collection drives,
//! and the errors of both.

/// A library of the profiler was not found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{library}.so not found (tried {}); install CUPTI beside CUDA or set KREPLAY_CUDA_LIB_DIR to the folder holding libcupti.so, libnvperf_host.so and libnvperf_target.so", tried.join(", "))]
pub struct LibraryMissing {
    /// `libcupti`, `libnvperf_host` or `libnvperf_target`.
    pub library: &'static str,
    /// Every path or name tried.
    pub tried: Vec<String>,
}

use std::fmt;

use replay_report_types::MetricInfo;

/// Why counters cannot be collected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CounterError {
    /// A library of the profiler is missing.
    #[error(transparent)]
    Missing(#[from] LibraryMissing),
    /// A library was found but could not be loaded or lacks an entry.
    #[error("cannot load CUPTI: {0}")]
    Load(String),
    /// The list is empty.
    #[error("no metrics given")]
    Empty,
    /// Metrics the chip cannot collect, each with CUPTI's reason.
    #[error("{} cannot be collected on {chip}: {}", if bad.len() == 1 { "metric" } else { "metrics" }, bad.iter().map(|(m, why)| format!("{m:?} ({why})")).collect::<Vec<_>>().join(", "))]
    Metrics {
        /// The chip.
        chip: String,
        /// `(metric, why)`.
        bad: Vec<(String, String)>,
    },
    /// A CUPTI call failed.
    #[error("{call}: {why}")]
    Call {
        /// The entry.
        call: &'static str,
        /// `CUptiResult`.
        code: i32,
        /// CUPTI's text.
        why: String,
    },
    /// The session went wrong in a way CUPTI did not report as an error.
    #[error("{0}")]
    Session(String),
    /// The SASS Metrics API is not there (a libcupti older than CUDA 12.5's, or a profiler
    /// without it); only a list with a SASS metric needs it.
    #[error("no SASS Metrics API: {0}")]
    SassUnavailable(String),
}

/// A configuration image compiled for a set of metrics.
pub struct Config {
    /// The metrics, in the order their values are evaluated.
    pub metrics: Vec<String>,
    /// The image.
    pub image: Vec<u8>,
    /// Passes the image needs (`cuptiProfilerHostGetNumOfPasses`).
    pub passes: u32,
    /// The profiler's own handle for it (the real one: its host object); 0 when none.
    pub handle: u64,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("metrics", &self.metrics)
            .field("image_bytes", &self.image.len())
            .field("passes", &self.passes)
            .finish()
    }
}

/// The CUPTI layer as the collection uses it: host compilation, the range profiler of one
/// context, SASS patching (the `sass_*` methods; a profiler without them reports
/// [`CounterError::SassUnavailable`]), and what the driver says of a launch. [`CuptiProfiler`] is the real one; tests
/// use a fake.
pub trait Profiler: Send + Sync + fmt::Debug {
    /// The chip name of device `ordinal` (`cuptiDeviceGetChipName`).
    fn chip(&self, ordinal: u32) -> Result<String, CounterError>;
    /// Compiles `metrics` into one configuration image for `chip`. An unknown metric is
    /// [`CounterError::Metrics`].
    fn compile(&self, chip: &str, metrics: &[String]) -> Result<Config, CounterError>;
    /// Releases a configuration that will not be used.
    fn release(&self, config: Config);
    /// `(unit, description)` of a metric.
    fn describe(&self, chip: &str, metric: &str) -> Result<(String, String), CounterError>;
    /// The context current on this thread (the dispatch's, inside the window).
    fn current_context(&self) -> Result<u64, CounterError>;
    /// Sets `config` on `ctx`'s range profiler with a fresh counter-data image.
    fn begin(&self, ctx: u64, config: &Config) -> Result<(), CounterError>;
    /// `cuptiRangeProfilerStart`.
    fn start(&self, ctx: u64) -> Result<(), CounterError>;
    /// `cuptiRangeProfilerStop`: whether every pass of the configuration was submitted.
    fn stop(&self, ctx: u64) -> Result<bool, CounterError>;
    /// Decodes the session and evaluates `config`'s metrics for its last range.
    fn decode(&self, ctx: u64, config: &Config) -> Result<Vec<f64>, CounterError>;
    /// Registers per thread of the kernel `kernel_id` (a `CUfunction` or `CUkernel`), where
    /// known.
    fn registers(&self, kernel_id: u64) -> Option<u32>;
    /// Enables the range profiler on `ctx` ahead of the first session (where the profiler
    /// instruments code as it loads, code loaded later is covered). Optional.
    fn prepare(&self, _ctx: u64) -> Result<(), CounterError> {
        Ok(())
    }
    /// The SASS metrics of `chip` (`cuptiSassMetricsGetNumOfMetrics`, `GetMetrics`).
    fn sass_metrics(&self, _chip: &str) -> Result<Vec<SassMetricInfo>, CounterError> {
        Err(CounterError::SassUnavailable(
            "this profiler has none".into(),
        ))
    }
    /// Starts SASS collection on `ctx`: the configuration on the context's device (set once
    /// per device and configuration, `cuptiSassMetricsSetConfig`), then patching enabled on
    /// the context, lazily (`cuptiSassMetricsEnable`: a function is patched at its first
    /// launch before [`Self::sass_end`]).
    fn sass_begin(&self, _ctx: u64, _config: &SassConfig) -> Result<(), CounterError> {
        Err(CounterError::SassUnavailable(
            "this profiler has none".into(),
        ))
    }
    /// Ends SASS collection on `ctx`: every record since [`Self::sass_begin`]
    /// (`cuptiSassMetricsGetDataProperties`, `FlushData`), then patching disabled
    /// (`cuptiSassMetricsDisable`, also when the flush failed).
    fn sass_end(&self, _ctx: u64) -> Result<SassRecords, CounterError> {
        Err(CounterError::SassUnavailable(
            "this profiler has none".into(),
        ))
    }
}

/// One metric of the SASS Metrics API on a chip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SassMetricInfo {
    /// CUPTI's id of the metric (what records carry).
    pub id: u64,
    /// The API's name (a base name without rollup, `smsp__sass_inst_executed`).
    pub name: String,
    /// CUPTI's description.
    pub description: String,
}

/// How many values a SASS record holds (`CUpti_SassMetrics_OutputGranularity`). Only whole-GPU
/// records are collected (see [`Rollup`]); the per-SM and per-sub-partition values of the API
/// have no variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SassGranularity {
    /// One value per record: the whole GPU.
    Gpu,
}

impl SassGranularity {
    /// The name in the plan's summary.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gpu => "gpu",
        }
    }
}

/// Nsight Compute's rollups of a metric name. Only `.sum` (the total over every record) is
/// collected for SASS metrics; `.avg`, `.max` and `.min` are recognised so that their
/// refusal can say why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rollup {
    /// `.sum`.
    Sum,
    /// `.avg`.
    Avg,
    /// `.max`.
    Max,
    /// `.min`.
    Min,
}

impl Rollup {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "sum" => Self::Sum,
            "avg" => Self::Avg,
            "max" => Self::Max,
            "min" => Self::Min,
            _ => return None,
        })
    }

    /// The suffix, `sum`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sum => "sum",
            Self::Avg => "avg",
            Self::Max => "max",
            Self::Min => "min",
        }
    }
}

/// What [`Profiler::sass_begin`] configures: the metrics' ids and the records' granularity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SassConfig {
    /// Metric ids, each once.
    pub metric_ids: Vec<u64>,
    /// One granularity for every metric.
    pub granularity: SassGranularity,
}

/// One SASS record as [`Profiler::sass_end`] returns it: a patched instruction of a function
/// and its values, one per instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SassRecord {
    /// The function's name as CUPTI gives it (the mangled symbol).
    pub function: String,
    /// The instruction's offset in the function.
    pub pc_offset: u32,
    /// `(metric id, value)` per instance, in instance order.
    pub values: Vec<(u64, u64)>,
}

/// Every record of one SASS collection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SassRecords {
    /// Instances per record (1 at GPU granularity).
    pub instances: usize,
    /// The records.
    pub records: Vec<SassRecord>,
    /// Records CUPTI dropped (`numOfDroppedRecords` of the disable).
    pub dropped: usize,
}

/// A metric of the list collected through the SASS Metrics API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SassMetric {
    /// Nsight Compute's name, as asked (`sm__sass_thread_inst_executed_op_ffma_pred_on.sum`).
    pub name: String,
    /// The API's metric it maps to (`smsp__sass_thread_inst_executed_op_ffma_pred_on`).
    pub api_name: String,
    /// The API's id.
    pub id: u64,
    /// The rollup the name asks for (always [`Rollup::Sum`]: the others are refused).
    pub rollup: Rollup,
}

/// The SASS metrics of a plan: one replay pass of their own, after the range profiler's
/// groups (patched code changes what hardware counters see, so no range group shares it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SassGroup {
    /// The replay pass it runs in.
    pub first_pass: u32,
    /// The metrics, in the order asked.
    pub metrics: Vec<SassMetric>,
    /// The records' granularity: the whole GPU.
    pub granularity: SassGranularity,
    /// `smsp__sass_inst_executed`'s id where the chip has it: always collected, so a kernel
    /// that ran patched has records even where an asked metric counts nothing in it (a value
    /// of 0, not a missing kernel).
    pub sentinel: Option<u64>,
}

/// The SASS metric every patched kernel has records of.
pub const SASS_SENTINEL: &str = "smsp__sass_inst_executed";

impl SassGroup {
    /// What [`Profiler::sass_begin`] is given: every metric's id once, the sentinel's too.
    pub fn config(&self) -> SassConfig {
        let mut ids: Vec<u64> = Vec::new();
        for id in self.metrics.iter().map(|m| m.id).chain(self.sentinel) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        SassConfig {
            metric_ids: ids,
            granularity: self.granularity,
        }
    }

    /// The metrics' values for the kernel `kernel` (its mangled name): only the records whose
    /// function is that kernel count (the backend's cache flush and any other kernel patched
    /// in the pass do not). A kernel with no record at all was not patched: an error, not a
    /// value of 0.
    pub fn evaluate(
        &self,
        data: &SassRecords,
        kernel: &str,
    ) -> Result<Vec<(String, f64)>, CounterError> {
        use std::collections::HashMap;
        let demangled = crate::module::demangle::demangle(kernel);
        let mut is_kernel: HashMap<&str, bool> = HashMap::new();
        // metric id -> total over the kernel's records and instances.
        let mut totals: HashMap<u64, u128> = HashMap::new();
        let mut any = false;
        for r in &data.records {
            let ours = *is_kernel.entry(r.function.as_str()).or_insert_with(|| {
                r.function == kernel || crate::module::demangle::demangle(&r.function) == demangled
            });
            if !ours {
                continue;
            }
            any = true;
            for (id, v) in &r.values {
                *totals.entry(*id).or_default() += u128::from(*v);
            }
        }
        if !any {
            let mut seen: Vec<&str> = is_kernel.keys().copied().collect();
            seen.sort_unstable();
            return Err(CounterError::Session(format!(
                "no SASS record of {kernel} in {} records (functions: {}): the kernel was not patched",
                data.records.len(),
                if seen.is_empty() { "none".to_string() } else { seen.join(", ") }
            )));
        }
        Ok(self
            .metrics
            .iter()
            .map(|m| {
                let sum = totals.get(&m.id).copied().unwrap_or(0);
                (m.name.clone(), sum as f64)
            })
            .collect())
    }
}

/// Whether `name` is collected through the SASS Metrics API: every Nsight Compute metric
/// with `__sass_` in its name (the range profiler compiles them, but evaluates them to NaN:
/// they count patched instructions).
pub fn is_sass_metric(name: &str) -> bool {
    // A `.peak_sustained` is a constant of the chip, not a count: the range profiler's host
    // evaluates it without patching (the roofline's compute ceilings, SPEC §12.1).
    name.contains("__sass_") && !name.ends_with(".peak_sustained")
}

/// Maps Nsight Compute's `name` to the chip's SASS metric: the rollup split off (only `.sum`
/// is collected; `.avg`, `.max` and `.min` are refused with the reason), then the base looked
/// up as it is, with the unit `smsp__` (the API's names: `sm__sass_x.sum` is `smsp__sass_x`
/// summed), or with any unit. A bare API name is its `.sum`. `Err` says why not.
fn resolve_sass(name: &str, list: &[SassMetricInfo]) -> Result<SassMetric, String> {
    let (base, rollup) = match name.split_once('.') {
        Some((b, r)) => match Rollup::parse(r) {
            Some(r) => (b, r),
            None => {
                return Err(format!(
                    "a SASS metric takes .sum, .avg, .max or .min, not .{r}"
                ))
            }
        },
        None => (name, Rollup::Sum),
    };
    let rest = base.split_once("__").map_or(base, |(_, r)| r);
    let found = list
        .iter()
        .find(|m| m.name == base)
        .or_else(|| list.iter().find(|m| m.name == format!("smsp__{rest}")))
        .or_else(|| {
            list.iter()
                .find(|m| m.name.split_once("__").is_some_and(|(_, r)| r == rest))
        })
        .or_else(|| {
            // Last: the same counter under another spelling of the unit and the `sass`
            // marker (`sass__x` for `smsp__sass_x`).
            let core = |n: &str| {
                let r = n.split_once("__").map_or(n, |(_, r)| r);
                r.strip_prefix("sass_").unwrap_or(r).to_string()
            };
            let want = core(base);
            list.iter().find(|m| core(&m.name) == want)
        });
    let Some(m) = found else {
        return Err(format!(
            "not among the {} SASS metrics of the chip (`kreplay run --list-sass` lists them)",
            list.len()
        ));
    };
    if rollup == Rollup::Sum && !name.contains('.') && m.name != base {
        return Err("a SASS metric without a rollup must be the API's own name".into());
    }
    // Per-SM and per-sub-partition records were measured not to add up to the kernel's
    // count on an H200 (GH100: 528 instances per record summed to 86% of the hardware count
    // of the same kernel, 106% with more metrics configured), while whole-GPU records equal
    // it exactly: only `.sum` is collected.
    if rollup != Rollup::Sum {
        return Err(format!(
            ".{} of a SASS metric is not collected: CUPTI's per-SM SASS records do not add up to the kernel's count (whole-GPU ones do); ask for .sum",
            rollup.as_str()
        ));
    }
    Ok(SassMetric {
        name: name.to_string(),
        api_name: m.name.clone(),
        id: m.id,
        rollup,
    })
}

/// The `launch__*` metrics taken from the launch, not from counters: `(name, unit,
/// description)`. `launch__registers_per_thread` is what the driver says of the function
/// (`CU_FUNC_ATTRIBUTE_NUM_REGS`); Nsight Compute reports the kernel it profiles, which its
/// own instrumentation can make larger (on an H200: 16 for the bench's kernel of 14).
pub const LAUNCH_METRICS: &[(&str, &str, &str)] = &[
    ("launch__grid_size", "", "Number of blocks in the grid"),
    ("launch__block_size", "", "Number of threads per block"),
    (
        "launch__thread_count",
        "thread",
        "Total number of threads across all blocks",
    ),
    (
        "launch__registers_per_thread",
        "register/thread",
        "Number of registers allocated per thread",
    ),
];

/// The built-in metric sets (`kreplay run --set NAME`).
pub const METRIC_SETS: &[(&str, &[&str])] = &[
    (
        "basic",
        &[
            "launch__grid_size",
            "launch__registers_per_thread",
            "smsp__inst_executed.sum",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "dram__bytes_read.sum",
            "dram__bytes_write.sum",
            "lts__t_sectors.sum",
            "gpu__time_duration.sum",
        ],
    ),
    (
        "memory",
        &[
            "dram__bytes_read.sum",
            "dram__bytes_write.sum",
            "lts__t_sectors_op_read.sum",
            "lts__t_sectors_op_write.sum",
            "lts__t_sector_hit_rate.pct",
            "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
            "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
            "l1tex__t_sector_hit_rate.pct",
        ],
    ),
];

/// The metrics of the built-in set `name`.
pub fn metric_set(name: &str) -> Option<&'static [&'static str]> {
    METRIC_SETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, m)| *m)
}

/// Splits a comma-separated list: names trimmed, empty ones dropped, repeats removed (the
/// first kept).
pub fn parse_metric_list(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for m in s.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        if !out.iter().any(|o| o == m) {
            out.push(m.to_string());
        }
    }
    out
}

/// One configuration image and the replay passes it runs in.
#[derive(Debug)]
pub struct Group {
    /// The image (and its metrics).
    pub config: Config,
    /// The first replay pass it runs in.
    pub first_pass: u32,
}

/// The order a dispatch runs the plan's range groups in. A dispatch that follows one whose
/// last group was the plan's last group runs them reversed, so the context's kept
/// range-profiler object (which serves only the configuration first set on it) serves the
/// dispatch's first group too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupOrder {
    /// The plan's order ([`Group::first_pass`]).
    #[default]
    Planned,
    /// Last group first.
    Reversed,
}

/// `KREPLAY_CUDA_COUNTER_PACKING`: how a plan packs its range-profiler metrics.
pub const PACKING_ENV: &str = "KREPLAY_CUDA_COUNTER_PACKING";

/// How a plan packs its range-profiler metrics into configurations.
///
/// Measured on an H200 (BENCHMARKS.md, "The counters tool's time"): `--set full` on 15
/// launches took 22 passes and 37 s as groups, 12 passes and 7.7 s as one configuration
/// (Nsight Compute: 33 s), its values as close to Nsight Compute's; 11 metrics on 30 GPT-2
/// kernels added 4.2 s against ncu's 12.7 s, 14 s as groups. Hence the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Packing {
    /// The whole list in one configuration as the host API schedules it (`single`, the
    /// default), as Nsight Compute collects a list: never more passes than `groups`, usually
    /// fewer, and one configuration that the context's range-profiler object keeps from
    /// dispatch to dispatch (a new object costs about 130 ms more per dispatch); every value
    /// is keyed by the configuration's first pass, and which pass counted a metric's counters
    /// is the host API's choice.
    #[default]
    Single,
    /// One-pass groups, first fit, each metric's counters in one replay pass, the value keyed
    /// by that pass (`groups`): no ratio's two counters from different executions, at a new
    /// range-profiler object per group.
    Groups,
}

impl Packing {
    /// The value named in [`PACKING_ENV`]; `Err` names what was expected.
    pub fn parse(v: &str) -> Result<Self, String> {
        match v.trim() {
            "" | "single" => Ok(Self::Single),
            "groups" => Ok(Self::Groups),
            other => Err(format!(
                "{PACKING_ENV}={other:?}: expected single or groups"
            )),
        }
    }

    /// As the environment sets it; a bad value is reported and keeps the default.
    pub fn from_env() -> Self {
        match std::env::var(PACKING_ENV) {
            Err(_) => Self::default(),
            Ok(v) => Self::parse(&v).unwrap_or_else(|e| {
                log::warn!("[kernel-replay] {e}; the default (single) is used");
                Self::default()
            }),
        }
    }
}

/// A metric list compiled for one chip.
#[derive(Debug)]
pub struct MetricPlan {
    /// The chip.
    pub chip: String,
    /// Every metric in the order asked, with its unit, description and pass.
    pub metrics: Vec<MetricInfo>,
    /// The `launch__*` metrics asked for.
    pub launch: Vec<String>,
    /// The configuration images, in pass order.
    pub groups: Vec<Group>,
    /// The SASS metrics' pass, after the groups; `None` when none is asked.
    pub sass: Option<SassGroup>,
    /// Replay passes the plan needs (at least 1), the SASS pass included.
    pub passes: u32,
    /// What the host API needs for the list's range-profiler metrics in one image (0 when
    /// the list has none).
    pub single_config_passes: u32,
}

impl MetricPlan {
    /// Compiles `names` for `chip` (see the module docs), packed as [`PACKING_ENV`] says.
    /// Nothing runs on a device.
    pub fn compile(p: &dyn Profiler, chip: &str, names: &[String]) -> Result<Self, CounterError> {
        Self::compile_packed(p, chip, names, Packing::from_env())
    }

    /// [`Self::compile`] with the packing given.
    pub fn compile_packed(
        p: &dyn Profiler,
        chip: &str,
        names: &[String],
        packing: Packing,
    ) -> Result<Self, CounterError> {
        if names.is_empty() {
            return Err(CounterError::Empty);
        }
        let mut launch = Vec::new();
        let mut counters: Vec<(String, Config)> = Vec::new();
        let mut bad = Vec::new();
        let mut sass: Vec<SassMetric> = Vec::new();
        let mut sass_list: Option<Result<Vec<SassMetricInfo>, CounterError>> = None;
        for n in names {
            if LAUNCH_METRICS.iter().any(|(l, _, _)| l == n) {
                launch.push(n.clone());
                continue;
            }
            if n.starts_with("launch__") {
                bad.push((
                    n.clone(),
                    "not a launch metric this tool computes".to_string(),
                ));
                continue;
            }
            if is_sass_metric(n) {
                // The chip's list once, and only when a SASS metric is asked for.
                let list = sass_list.get_or_insert_with(|| p.sass_metrics(chip));
                let list = match list {
                    Ok(l) => l,
                    Err(e) => {
                        bad.push((n.clone(), e.to_string()));
                        continue;
                    }
                };
                match resolve_sass(n, list) {
                    Ok(m) => sass.push(m),
                    Err(why) => bad.push((n.clone(), why)),
                }
                continue;
            }
            match p.compile(chip, std::slice::from_ref(n)) {
                Ok(c) => counters.push((n.clone(), c)),
                Err(CounterError::Metrics { bad: b, .. }) => bad.extend(b),
                Err(e) => bad.push((n.clone(), e.to_string())),
            }
        }
        if !bad.is_empty() {
            for (_, c) in counters {
                p.release(c);
            }
            return Err(CounterError::Metrics {
                chip: chip.to_string(),
                bad,
            });
        }
        let mut single = if counters.is_empty() {
            None
        } else {
            let all: Vec<String> = counters.iter().map(|(n, _)| n.clone()).collect();
            Some(p.compile(chip, &all)?)
        };
        let single_config_passes = single.as_ref().map_or(0, |c| c.passes);
        if packing == Packing::Single {
            // The host API's own schedule of the whole list, as Nsight Compute collects it.
            for (_, c) in counters.drain(..) {
                p.release(c);
            }
        } else if let Some(c) = single.take() {
            p.release(c);
        }
        // First fit, in the order asked: a metric that alone needs one pass goes into one-pass
        // images only (its counters stay in one pass); one that alone needs several goes into
        // a multi-pass image where that costs no pass beyond the larger of the two.
        let mut groups: Vec<Config> = single.into_iter().collect();
        for (name, alone) in counters {
            let mut placed = None;
            for (i, g) in groups.iter().enumerate() {
                if (g.passes == 1) != (alone.passes == 1) {
                    continue;
                }
                let mut m = g.metrics.clone();
                m.push(name.clone());
                let c = p.compile(chip, &m)?;
                if c.passes <= g.passes.max(alone.passes) {
                    placed = Some((i, c));
                    break;
                }
                p.release(c);
            }
            match placed {
                Some((i, c)) => {
                    let old = std::mem::replace(&mut groups[i], c);
                    p.release(old);
                    p.release(alone);
                }
                None => groups.push(alone),
            }
        }
        let mut first = 0u32;
        let groups: Vec<Group> = groups
            .into_iter()
            .map(|config| {
                let g = Group {
                    first_pass: first,
                    config,
                };
                first += g.config.passes.max(1);
                g
            })
            .collect();
        let sass = (!sass.is_empty()).then(|| {
            let list = sass_list.and_then(Result::ok).unwrap_or_default();
            let g = SassGroup {
                first_pass: first,
                metrics: sass,
                granularity: SassGranularity::Gpu,
                sentinel: list.iter().find(|m| m.name == SASS_SENTINEL).map(|m| m.id),
            };
            first += 1;
            (g, list)
        });
        let (sass, sass_list) = match sass {
            Some((g, l)) => (Some(g), l),
            None => (None, Vec::new()),
        };
        let passes = first.max(1);
        let mut metrics = Vec::new();
        for n in names {
            let (unit, description, pass) =
                if let Some((_, u, d)) = LAUNCH_METRICS.iter().find(|(l, _, _)| l == n) {
                    (u.to_string(), d.to_string(), 0)
                } else if let Some(m) = sass
                    .as_ref()
                    .and_then(|g| g.metrics.iter().find(|m| &m.name == n))
                {
                    // The range profiler's host knows these names and their units; the
                    // SASS API's description where it has one.
                    let (u, d) = p.describe(chip, n).unwrap_or_default();
                    let api = sass_list
                        .iter()
                        .find(|i| i.id == m.id)
                        .map(|i| i.description.clone())
                        .unwrap_or_default();
                    let u = if u.is_empty() && n.contains("inst_executed") {
                        "inst".to_string()
                    } else {
                        u
                    };
                    let d = if api.is_empty() { d } else { api };
                    (u, d, sass.as_ref().map_or(0, |g| g.first_pass))
                } else {
                    let pass = groups
                        .iter()
                        .find(|g| g.config.metrics.contains(n))
                        .map_or(0, |g| g.first_pass);
                    let (u, d) = p.describe(chip, n).unwrap_or_default();
                    // The sector's unit is the counter's own (`l1tex__t_sectors*` counts L1/TEX
                    // sectors): CUPTI's dimension unit was seen naming L2's for them.
                    let u = super::sections::unit_of(n)
                        .filter(|x| x.ends_with("sector"))
                        .map_or(u, str::to_string);
                    (u, d, pass)
                };
            metrics.push(MetricInfo {
                name: n.clone(),
                unit,
                description,
                pass,
            });
        }
        Ok(Self {
            chip: chip.to_string(),
            metrics,
            launch,
            groups,
            sass,
            passes,
            single_config_passes,
        })
    }

    /// The group replay pass `pass` belongs to, and the pass's index inside it.
    pub fn group_at(&self, pass: u32) -> Option<(usize, u32)> {
        self.group_in(pass, GroupOrder::Planned)
            .map(|(g, sub, _)| (g, sub))
    }

    /// The group replay pass `pass` belongs to when a dispatch runs the groups in `order`, the
    /// pass's index inside it, and the group's first pass in that order. Either order fills
    /// the same passes (the SASS pass stays after them).
    pub fn group_in(&self, pass: u32, order: GroupOrder) -> Option<(usize, u32, u32)> {
        let mut first = 0;
        let mut at = |i: usize| {
            let n = self.groups[i].config.passes.max(1);
            let f = first;
            first += n;
            (pass >= f && pass < f + n).then_some((i, pass - f, f))
        };
        match order {
            GroupOrder::Planned => (0..self.groups.len()).find_map(&mut at),
            GroupOrder::Reversed => (0..self.groups.len()).rev().find_map(&mut at),
        }
    }

    /// A JSON summary: chip, passes, groups with their passes and metrics.
    pub fn summary(&self) -> serde_json::Value {
        serde_json::json!({
            "chip": self.chip,
            "passes": self.passes,
            "single_config_passes": self.single_config_passes,
            "launch_metrics": self.launch,
            "groups": self.groups.iter().map(|g| serde_json::json!({
                "first_pass": g.first_pass,
                "passes": g.config.passes,
                "metrics": g.config.metrics,
            })).collect::<Vec<_>>(),
            "sass": self.sass.as_ref().map(|g| serde_json::json!({
                "first_pass": g.first_pass,
                "granularity": g.granularity.as_str(),
                "metrics": g.metrics.iter().map(|m| serde_json::json!({
                    "name": m.name,
                    "api_name": m.api_name,
                    "rollup": m.rollup.as_str(),
                })).collect::<Vec<_>>(),
            })),
        })
    }
}

/// A profiler that lives for the process (the real one) is a profiler.
impl<T: Profiler + ?Sized> Profiler for &'static T {
    fn chip(&self, ordinal: u32) -> Result<String, CounterError> {
        (**self).chip(ordinal)
    }
    fn compile(&self, chip: &str, metrics: &[String]) -> Result<Config, CounterError> {
        (**self).compile(chip, metrics)
    }
    fn release(&self, config: Config) {
        (**self).release(config)
    }
    fn describe(&self, chip: &str, metric: &str) -> Result<(String, String), CounterError> {
        (**self).describe(chip, metric)
    }
    fn current_context(&self) -> Result<u64, CounterError> {
        (**self).current_context()
    }
    fn begin(&self, ctx: u64, config: &Config) -> Result<(), CounterError> {
        (**self).begin(ctx, config)
    }
    fn start(&self, ctx: u64) -> Result<(), CounterError> {
        (**self).start(ctx)
    }
    fn stop(&self, ctx: u64) -> Result<bool, CounterError> {
        (**self).stop(ctx)
    }
    fn decode(&self, ctx: u64, config: &Config) -> Result<Vec<f64>, CounterError> {
        (**self).decode(ctx, config)
    }
    fn registers(&self, kernel_id: u64) -> Option<u32> {
        (**self).registers(kernel_id)
    }
    fn prepare(&self, ctx: u64) -> Result<(), CounterError> {
        (**self).prepare(ctx)
    }
    fn sass_metrics(&self, chip: &str) -> Result<Vec<SassMetricInfo>, CounterError> {
        (**self).sass_metrics(chip)
    }
    fn sass_begin(&self, ctx: u64, config: &SassConfig) -> Result<(), CounterError> {
        (**self).sass_begin(ctx, config)
    }
    fn sass_end(&self, ctx: u64) -> Result<SassRecords, CounterError> {
        (**self).sass_end(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::is_sass_metric;
    use crate::counters::sections::resolve;

    #[test]
    fn the_roofline_peaks_go_to_the_range_profiler_not_the_sass_pass() {
        let r = resolve(&["roofline".to_owned()], &[]).unwrap();
        let peaks: Vec<&String> = r
            .raw
            .iter()
            .filter(|m| m.ends_with(".peak_sustained"))
            .collect();
        assert!(peaks.len() >= 4, "{peaks:?}");
        for p in peaks {
            assert!(!is_sass_metric(p), "{p}");
        }
        // The counts those peaks bound are SASS metrics.
        assert!(is_sass_metric(
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
        ));
    }
}
