//! A fake of the CUPTI layer the collector drives (`Profiler`), so that what the collector
//! plans, starts, stops and decodes is seen call by call, without libcupti or a GPU.
//!
//! The fake models the host API's scheduling as counters per pass: each metric needs a set
//! of raw counters, a configuration needs `ceil(distinct counters / PER_PASS)` passes, and its
//! target side records in which replay pass the kernel ran while the profiler was started, so
//! a value tells which pass produced it.
//!
//! Its SASS side lists a chip's SASS metrics (API names, ids) and, while patching is
//! enabled, makes records for every launch: the dispatch's kernel's, and those of the
//! backend's cache flush and of another kernel, which must not count.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use replay_cuda::counters::{
    Config, CounterError, Profiler, SassConfig, SassMetricInfo, SassRecord, SassRecords,
};

const PER_PASS: usize = 4;
pub const CHIP: &str = "GH100";

/// Raw counters of the metrics the fake knows.
fn counters_of(metric: &str) -> Option<Vec<&'static str>> {
    Some(match metric {
        "smsp__inst_executed.sum" => vec!["inst"],
        // The range profiler's host compiles SASS names (and evaluates them to NaN): the
        // plan must not send them there.
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum" => vec!["ffma"],
        "dram__bytes_read.sum" => vec!["dram_rd"],
        "dram__bytes_write.sum" => vec!["dram_wr"],
        "lts__t_sectors.sum" => vec!["lts"],
        "gpu__time_duration.sum" => vec!["time"],
        // A ratio: hits over lookups, two counters that must come from one pass.
        "lts__t_sector_hit_rate.pct" => vec!["lts_hit", "lts_lookup"],
        "l1tex__t_sector_hit_rate.pct" => vec!["l1_hit", "l1_lookup"],
        "l1tex__t_sectors.sum" => vec!["l1"],
        // A metric that alone needs two passes, and one that shares most of its counters.
        "big__two_pass.sum" => vec!["b1", "b2", "b3", "b4", "b5"],
        "big__shares.sum" => vec!["b1", "b2", "b3", "b4", "b5", "b6"],
        // A metric the profiler evaluates to no value.
        "nan__metric.sum" => vec!["nan"],
        _ => return None,
    })
}

#[derive(Debug, Default)]
struct Session {
    metrics: Vec<String>,
    passes: u32,
    started: bool,
    /// Replay passes the kernel ran in while started.
    launches: Vec<u32>,
    stops: u32,
}

#[derive(Debug, Default)]
pub struct Fake {
    /// The replay pass being submitted (set by the agent's hook), and whether it is a pass.
    pub current: Arc<AtomicU32>,
    pub compiles: AtomicU32,
    pub released: AtomicU32,
    session: Mutex<Option<Session>>,
    pub calls: Mutex<Vec<String>>,
    /// Fail `start` of this dispatch's pass (by the number of starts so far).
    pub fail_start_at: Mutex<Option<u32>>,
    starts: AtomicU32,
    /// Sessions complete after one pass, whatever the host API counted.
    pub finish_early: std::sync::atomic::AtomicBool,
    /// Sessions want one pass more than the host API counted.
    pub finish_late: std::sync::atomic::AtomicBool,
    /// Every list the host API was asked to compile.
    pub compiled: Mutex<Vec<Vec<String>>>,
    /// The SASS Metrics API is missing (an older libcupti).
    pub no_sass_api: std::sync::atomic::AtomicBool,
    /// SASS patching: the configuration while enabled.
    pub sass: Mutex<Option<SassConfig>>,
    /// Records made while patching was enabled.
    sass_records: Mutex<Vec<SassRecord>>,
    /// Launches patching saw, by kernel name (the dispatch's, then the fake's others).
    pub sass_seen: Mutex<Vec<String>>,
    /// The dispatch's kernel is not patched (its launches make no records).
    pub sass_unpatched: std::sync::atomic::AtomicBool,
    /// A chip whose SASS names differ from [`SASS_LIST`].
    pub sass_list: Mutex<Option<Vec<(u64, &'static str)>>>,
}

/// The fake chip's SASS metrics: the API's base names.
const SASS_LIST: &[(u64, &str)] = &[
    (11, "smsp__sass_inst_executed"),
    (12, "smsp__sass_thread_inst_executed_op_ffma_pred_on"),
    (13, "smsp__sass_inst_executed_op_global_ld"),
];

/// What a patched instruction of `kernel` counts for metric `id` on the whole GPU: the
/// dispatch's kernel small numbers, the others large ones, so a sum that takes one of theirs
/// shows it.
fn sass_value(kernel: &str, id: u64, pc: u32) -> u64 {
    let base = if kernel == "_Z3rmwPdm" { 1 } else { 1_000_000 };
    base * (id % 10) * (u64::from(pc) + 1)
}

impl Fake {
    fn passes_of(metrics: &[String]) -> Option<u32> {
        let mut all = BTreeSet::new();
        for m in metrics {
            all.extend(counters_of(m)?);
        }
        Some(all.len().div_ceil(PER_PASS) as u32)
    }

    pub fn launched(&self, kernel: &str) {
        let pass = self.current.load(Ordering::SeqCst);
        if let Some(s) = self.session.lock().as_mut() {
            if s.started {
                s.launches.push(pass);
            }
        }
        let cfg = self.sass.lock().clone();
        if let Some(cfg) = cfg {
            // The backend's flush kernel and another kernel run patched in the pass too.
            let mut kernels = vec!["kreplay_flush_l2", "_Z5otherv"];
            if !self.sass_unpatched.load(Ordering::SeqCst) {
                kernels.insert(1, kernel);
            }
            for k in kernels {
                self.sass_seen.lock().push(k.to_string());
                // Three instructions; one record per instruction and metric, one value each
                // (whole-GPU records).
                for pc in 0..3u32 {
                    for &id in &cfg.metric_ids {
                        self.sass_records.lock().push(SassRecord {
                            function: k.to_string(),
                            pc_offset: pc * 16,
                            values: vec![(id, sass_value(k, id, pc))],
                        });
                    }
                }
            }
        }
    }
}

/// A value that names the metric and the pass the kernel ran in.
pub fn value(metric: &str, pass: u32) -> f64 {
    let m = metric.bytes().map(u64::from).sum::<u64>();
    (m * 100 + u64::from(pass)) as f64
}

impl Profiler for Fake {
    fn chip(&self, _: u32) -> Result<String, CounterError> {
        Ok(CHIP.into())
    }
    fn compile(&self, chip: &str, metrics: &[String]) -> Result<Config, CounterError> {
        self.compiles.fetch_add(1, Ordering::SeqCst);
        self.compiled.lock().push(metrics.to_vec());
        let bad: Vec<(String, String)> = metrics
            .iter()
            .filter(|m| counters_of(m).is_none())
            .map(|m| (m.clone(), "CUPTI_ERROR_INVALID_METRIC_NAME".into()))
            .collect();
        if !bad.is_empty() {
            return Err(CounterError::Metrics {
                chip: chip.into(),
                bad,
            });
        }
        Ok(Config {
            metrics: metrics.to_vec(),
            image: vec![1, 2, 3],
            passes: Self::passes_of(metrics).expect("checked"),
            handle: 7,
        })
    }
    fn release(&self, _: Config) {
        self.released.fetch_add(1, Ordering::SeqCst);
    }
    fn describe(&self, _: &str, metric: &str) -> Result<(String, String), CounterError> {
        let unit = if metric.starts_with("dram__bytes") {
            "byte"
        } else if metric.ends_with(".pct") {
            "%"
        } else if metric.contains("__t_sectors") {
            // As the real host API was seen labelling L1/TEX sectors too.
            "l2_sector"
        } else {
            ""
        };
        Ok((unit.into(), format!("about {metric}")))
    }
    fn current_context(&self) -> Result<u64, CounterError> {
        Ok(0xc0)
    }
    fn begin(&self, ctx: u64, config: &Config) -> Result<(), CounterError> {
        let mut s = self.session.lock();
        if s.as_ref().is_some_and(|s| s.started) {
            return Err(CounterError::Session("begin while started".into()));
        }
        self.calls
            .lock()
            .push(format!("begin {ctx:#x} {}", config.metrics.join(",")));
        *s = Some(Session {
            metrics: config.metrics.clone(),
            passes: config.passes,
            ..Session::default()
        });
        Ok(())
    }
    fn start(&self, _: u64) -> Result<(), CounterError> {
        let n = self.starts.fetch_add(1, Ordering::SeqCst);
        if *self.fail_start_at.lock() == Some(n) {
            return Err(CounterError::Call {
                call: "cuptiRangeProfilerStart",
                code: 7,
                why: "CUPTI_ERROR_INVALID_OPERATION".into(),
            });
        }
        let mut s = self.session.lock();
        let s = s
            .as_mut()
            .ok_or_else(|| CounterError::Session("start without a configuration".into()))?;
        assert!(!s.started, "started twice");
        s.started = true;
        self.calls.lock().push("start".into());
        Ok(())
    }
    fn stop(&self, _: u64) -> Result<bool, CounterError> {
        let mut s = self.session.lock();
        let s = s
            .as_mut()
            .ok_or_else(|| CounterError::Session("stop without a session".into()))?;
        assert!(s.started, "stopped while not started");
        s.started = false;
        s.stops += 1;
        self.calls.lock().push("stop".into());
        if self.finish_early.load(Ordering::SeqCst) {
            s.passes = 1;
        }
        if self.finish_late.load(Ordering::SeqCst) {
            s.passes = s.passes.max(s.stops + 1);
        }
        Ok(s.stops >= s.passes)
    }
    fn decode(&self, _: u64, config: &Config) -> Result<Vec<f64>, CounterError> {
        let s = self
            .session
            .lock()
            .take()
            .ok_or_else(|| CounterError::Session("decode without a session".into()))?;
        assert_eq!(s.metrics, config.metrics);
        self.calls.lock().push("decode".into());
        if s.launches.len() as u32 != s.passes {
            return Err(CounterError::Session(format!(
                "{} launches in a session of {} passes",
                s.launches.len(),
                s.passes
            )));
        }
        // The value of the session's first pass (where a multi-pass metric starts).
        Ok(config
            .metrics
            .iter()
            .map(|m| {
                if m.starts_with("nan__") {
                    f64::NAN
                } else {
                    value(m, s.launches[0])
                }
            })
            .collect())
    }
    fn registers(&self, kernel_id: u64) -> Option<u32> {
        Some(kernel_id as u32 * 10)
    }
    fn sass_metrics(&self, chip: &str) -> Result<Vec<SassMetricInfo>, CounterError> {
        assert_eq!(chip, CHIP);
        if self.no_sass_api.load(Ordering::SeqCst) {
            return Err(CounterError::SassUnavailable(
                "libcupti.so lacks cuptiSassMetricsGetNumOfMetrics".into(),
            ));
        }
        let list = self
            .sass_list
            .lock()
            .clone()
            .unwrap_or_else(|| SASS_LIST.to_vec());
        Ok(list
            .iter()
            .map(|(id, n)| SassMetricInfo {
                id: *id,
                name: n.to_string(),
                description: format!("sass {n}"),
            })
            .collect())
    }
    fn sass_begin(&self, ctx: u64, config: &SassConfig) -> Result<(), CounterError> {
        let mut s = self.sass.lock();
        assert!(s.is_none(), "patching enabled twice");
        if self.session.lock().as_ref().is_some_and(|s| s.started) {
            return Err(CounterError::Session(
                "SASS beside a started range profiler".into(),
            ));
        }
        self.calls.lock().push(format!(
            "sass_begin {ctx:#x} {:?} {}",
            config.metric_ids,
            config.granularity.as_str()
        ));
        *s = Some(config.clone());
        Ok(())
    }
    fn sass_end(&self, _: u64) -> Result<SassRecords, CounterError> {
        self.sass
            .lock()
            .take()
            .ok_or_else(|| CounterError::Session("SASS end without a begin".into()))?;
        self.calls.lock().push("sass_end".into());
        Ok(SassRecords {
            instances: 1,
            records: std::mem::take(&mut *self.sass_records.lock()),
            dropped: 0,
        })
    }
}
