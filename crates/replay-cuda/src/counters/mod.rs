//! Hardware counters of replayed dispatches (SPEC §12.1): CUPTI's range profiler in user
//! replay, auto range, one kernel per range, with kernel-replay's restore where CUPTI's
//! samples use its checkpoint API.
//!
//! Layers, as the rest of the crate: [`sys`] (the parameter structs of the CUPTI headers and
//! libcupti loaded at run time, with one typed error naming a missing library), the checked
//! calls in `cupti` ([`CuptiProfiler`], the [`Profiler`] over the real library), and the safe
//! API on top: a [`MetricPlan`] compiled on the host and a [`CounterCollector`] that a tool
//! calls from its PASS ENTER / PASS EXIT (or attaches as its [`replay_core::ReplayTool`]).
//!
//! ## The plan (host only, before anything runs)
//!
//! [`MetricPlan::compile`] turns a list of Nsight Compute metric names into configuration
//! images for a chip. Each metric is first compiled alone: one CUPTI cannot schedule is an
//! error naming it (all such metrics at once). Then the metrics are packed, first fit in the
//! order given, into *groups*, each one configuration image that
//! `cuptiProfilerHostGetNumOfPasses` says needs one pass; a metric that alone needs k > 1
//! passes is a group of its own over k passes. Group g runs in replay passes
//! `first_pass .. first_pass + passes`, so every value is known to come from exactly one
//! replay pass, the one its sample is keyed by (`(dispatch_id, pass)`), and every metric's
//! raw counters are in one pass: the two counters of a ratio are never taken from different
//! executions (which on short kernels can give ratios above 100%). The host API itself
//! would schedule a whole list into one multi-pass image; its pass count is kept as
//! [`MetricPlan::single_config_passes`] for comparison, and the plan needs at least that
//! many passes. `launch__*` metrics are not hardware counters: they are taken from the launch
//! itself ([`LAUNCH_METRICS`]) and keyed by pass 0.
//!
//! ## A dispatch (target)
//!
//! Per replayed dispatch, with the window asking for at least the plan's passes: PASS ENTER of
//! a group's first pass sets the group's configuration on the dispatch's context (a fresh
//! counter-data image, `cuptiRangeProfilerSetConfig`: auto range, user replay); every PASS
//! ENTER of the group starts the range profiler and its PASS EXIT stops it
//! (`cuptiRangeProfilerStop` reports whether every pass of the configuration was submitted);
//! after the group's last pass the data is decoded and evaluated
//! (`cuptiRangeProfilerDecodeData`, `cuptiProfilerHostEvaluateToGpuValues`). Passes beyond
//! the plan run without the profiler. The window's PASS ENTER comes before the cache flush
//! (`cache_control=flush`, which launches a kernel of the backend's own), so a pass may hold
//! two ranges: the flush's and the dispatch's; the dispatch's is the last one, and that is the
//! one evaluated. A failure of the profiler ends the collection for that dispatch (recorded in
//! [`CounterCollector::errors`]); the replay itself goes on and memory stays that of one
//! execution.
//!
//! CUPTI forbids driver calls inside its callbacks; this runs in the window, inside the
//! library's own launch wrapper, never in a CUPTI callback.
//!
//! ## What the H200 showed (`BENCHMARKS.md`, issue 16)
//!
//! Launch and instruction counts equal Nsight Compute's; memory traffic of a 16 MiB kernel
//! within 0.04% (L2 sectors of all kinds within 3.2%); time within 10% on 19 of 21 kernels.
//! Known gaps, each reported per dispatch in [`CounterCollector::errors`], never as a value:
//!
//! - SASS-instruction metrics (`*__sass_*`) compile on the host but evaluate to NaN: the range
//!   profiler does not instrument code for them here (CUPTI's SASS-metrics API would).
//! - Metrics that alone need several passes (`sm__throughput.*`,
//!   `lts__t_sector_hit_rate.pct`): the range profiler reports every pass submitted after the
//!   first and the values are NaN. The collector decodes when the profiler says the session
//!   is complete, whatever the host API counted.
//! - Tiny kernels read less from L2 and DRAM than under Nsight Compute: the backend's flush
//!   evicts L2 by reading a scratch buffer, where Nsight Compute invalidates caches through the
//!   driver.
//!
//! ## Not covered
//!
//! One device's chip per plan (the first device's in `kreplay run`); metrics of a dispatch that
//! was declined or truncated before a group ran are missing (the errors say which); no PM
//! sampling; clocks are left as they are (Nsight Compute locks them to base by default, so
//! compare with `--clock-control none`). The C ABI exposes the collection as
//! `kreplay_cuda_counters_*` (`replay-ffi`, feature `cuda`).

pub mod sys;

mod collect;
mod cupti;

use std::fmt;

pub use collect::{CounterCollector, ReportHeader};
pub use cupti::CuptiProfiler;
pub use sys::LibraryMissing;

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

/// Compiles `names` for device `ordinal` with the real CUPTI (loaded on first use; the driver
/// is initialised to learn the chip). What `kreplay run` calls before the program starts and
/// the built-in tool calls when it attaches.
pub fn plan_for_device(ordinal: u32, names: &[String]) -> Result<MetricPlan, CounterError> {
    let p = CuptiProfiler::global()?;
    let chip = p.chip(ordinal)?;
    MetricPlan::compile(p, &chip, names)
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
