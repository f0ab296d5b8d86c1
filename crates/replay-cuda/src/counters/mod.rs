//! Hardware counters of replayed dispatches (SPEC §12.1): CUPTI's range profiler in user
//! replay, auto range, one kernel per range, with kernel-replay's restore where CUPTI's
//! samples use its checkpoint API; SASS-instruction metrics through CUPTI's SASS Metrics API
//! in a replay pass of their own.
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
//! error naming it (all such metrics at once). By default ([`Packing::Single`],
//! `KREPLAY_CUDA_COUNTER_PACKING`) the whole list is then one configuration, scheduled over
//! its passes by the host API as Nsight Compute's is, which the context's range-profiler
//! object keeps from dispatch to dispatch (a kept object evaluates only the configuration
//! first set on it, and a new one costs about 130 ms: `cupti`). With [`Packing::Groups`]
//! the metrics are packed, first fit in the
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
//! ### SASS metrics
//!
//! A name with `__sass_` in it ([`is_sass_metric`]), other than a `.peak_sustained` (a constant
//! of the chip that the range profiler evaluates: the roofline's compute ceilings), counts
//! executed instructions by patching
//! the kernel's code (Nsight Compute instruments for them); the range profiler compiles such
//! names but evaluates them to NaN. They go to a [`SassGroup`]: one replay pass after the
//! range groups, never shared with one (patched code changes what hardware counters see).
//! The chip's SASS metrics are asked on the host (`cuptiSassMetricsGetMetrics` with the chip
//! name; `kreplay run --list-sass` prints them) and each name is mapped to one: the rollup
//! split off (`.sum`, `.avg`, `.max`, `.min`; anything else is an error naming the metric),
//! then the base as it is, with the API's unit `smsp__` (`sm__sass_x.sum` and
//! `smsp__sass_x.sum` are both the GPU's total of `smsp__sass_x`), or with any unit. Only
//! `.sum` is collected: the total over the kernel's whole-GPU records; `.avg`, `.max` and
//! `.min` are refused with the reason (CUPTI's per-SM records were measured not to add up to
//! the kernel's count on an H200). A name the chip lacks,
//! or a libcupti without the API (older than CUDA 12.5's), is an error at compile time
//! naming the metric; lists without SASS metrics never touch the API.
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
//! The SASS pass: its PASS ENTER sets the configuration on the context's device (once per
//! device and configuration) and enables lazy patching on the context; the cache flush and
//! the dispatch's launch run patched; its PASS EXIT flushes the records, disables patching
//! (which unpatches, so the next dispatch patches its kernel again: patching time is part of
//! every SASS pass, not measured here) and sums the records whose function is the
//! dispatch's kernel (its mangled name, or the same demangled name); the flush kernel's and
//! any other's are left out. `smsp__sass_inst_executed` is always configured beside the
//! asked metrics, so a kernel with no record at all was not patched: an error, not a 0.
//!
//! ## Sections
//!
//! [`sections`] resolves Nsight Compute's sections and sets (`--section`, `--set full`) into
//! the raw metrics to collect; [`display`] turns a dispatch's raw values into the rows ncu
//! prints for those sections (display names, base units, ncu's formulas), which `kreplay run`
//! writes as ncu's CSV (`replay_report::sections_csv`, a layer above: this crate has the
//! report's types only, from `replay-report-types`). A row whose raw metric is missing
//! is left out, never invented.
//!
//! CUPTI forbids driver calls inside its callbacks; this runs in the window, inside the
//! library's own launch wrapper, never in a CUPTI callback.
//!
//! ## What the H200 showed (`BENCHMARKS.md`)
//!
//! Launch and instruction counts equal Nsight Compute's; memory traffic of a 16 MiB kernel
//! within 0.04% (L2 sectors of all kinds within 3.2%); time within 10% on 19 of 21 kernels.
//! Known gaps, each reported per dispatch in [`CounterCollector::errors`], never as a value:
//!
//! - SASS-instruction metrics (`*__sass_*`) compile on the range profiler's host but evaluate
//!   to NaN there: they now go through the SASS Metrics API (above), not yet checked against
//!   Nsight Compute on the H200.
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
//! sampling. Clocks: the library leaves them as they are; `kreplay run` locks them to base
//! around the program (`clocks`, NVML) as Nsight Compute does by default. SASS metrics: no per-instruction (source-line) output,
//! only the kernel's totals; ratios and throughputs of SASS metrics (`.pct`, `.ratio`,
//! `.per_second`) are refused; the same kernel launched on the same context by another thread
//! during the SASS pass would be summed with the dispatch (ordinary launches to the agent wait
//! for the window's writer lock; tool work does not). The C ABI exposes the collection as `kreplay_cuda_counters_*`
//! (`replay-ffi`, feature `cuda`).

pub mod clocks;
pub mod sys;

mod collect;
mod cupti;
pub mod display;
mod plan;
pub mod sections;

pub use collect::{CounterCollector, ReportHeader};
pub use cupti::{CuptiProfiler, ObjectLife, OBJECT_ENV};
pub use plan::*;

/// Compiles `names` for device `ordinal` with the real CUPTI (loaded on first use; the driver
/// is initialised to learn the chip). What `kreplay run` calls before the program starts and
/// the built-in tool calls when it attaches.
pub fn plan_for_device(ordinal: u32, names: &[String]) -> Result<MetricPlan, CounterError> {
    let p = CuptiProfiler::global()?;
    let chip = p.chip(ordinal)?;
    MetricPlan::compile(p, &chip, names)
}

/// The chip of device `ordinal` and its SASS metrics, from the real CUPTI (`kreplay run
/// --list-sass`).
pub fn sass_metrics_for_device(
    ordinal: u32,
) -> Result<(String, Vec<SassMetricInfo>), CounterError> {
    let p = CuptiProfiler::global()?;
    let chip = p.chip(ordinal)?;
    let list = p.sass_metrics(&chip)?;
    Ok((chip, list))
}
