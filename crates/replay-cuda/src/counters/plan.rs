//! The metric plan (SPEC §12.1): a list of Nsight Compute metric names compiled on the host
//! into one-pass groups, the [`Profiler`] the collection drives, and the errors of both.

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

use replay_report::MetricInfo;

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
/// context, and what the driver says of a launch. [`CuptiProfiler`] is the real one; tests
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
    /// Replay passes the plan needs (at least 1).
    pub passes: u32,
    /// What the host API needs for the whole list in one image (0 when the list has only
    /// launch metrics).
    pub single_config_passes: u32,
}

impl MetricPlan {
    /// Compiles `names` for `chip` (see the module docs). Nothing runs on a device.
    pub fn compile(p: &dyn Profiler, chip: &str, names: &[String]) -> Result<Self, CounterError> {
        if names.is_empty() {
            return Err(CounterError::Empty);
        }
        let mut launch = Vec::new();
        let mut counters: Vec<(String, Config)> = Vec::new();
        let mut bad = Vec::new();
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
        let single_config_passes = if counters.is_empty() {
            0
        } else {
            let all: Vec<String> = counters.iter().map(|(n, _)| n.clone()).collect();
            let c = p.compile(chip, &all)?;
            let n = c.passes;
            p.release(c);
            n
        };
        // First fit, in the order asked: a metric that alone needs one pass goes into one-pass
        // images only (its counters stay in one pass); one that alone needs several goes into
        // a multi-pass image where that costs no pass beyond the larger of the two.
        let mut groups: Vec<Config> = Vec::new();
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
        let passes = first.max(1);
        let mut metrics = Vec::new();
        for n in names {
            let (unit, description, pass) =
                if let Some((_, u, d)) = LAUNCH_METRICS.iter().find(|(l, _, _)| l == n) {
                    (u.to_string(), d.to_string(), 0)
                } else {
                    let pass = groups
                        .iter()
                        .find(|g| g.config.metrics.contains(n))
                        .map_or(0, |g| g.first_pass);
                    let (u, d) = p.describe(chip, n).unwrap_or_default();
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
            passes,
            single_config_passes,
        })
    }

    /// The group replay pass `pass` belongs to, and the pass's index inside it.
    pub fn group_at(&self, pass: u32) -> Option<(usize, u32)> {
        self.groups.iter().enumerate().find_map(|(i, g)| {
            let n = g.config.passes.max(1);
            (pass >= g.first_pass && pass < g.first_pass + n).then(|| (i, pass - g.first_pass))
        })
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
}
