//! The counter collection without a GPU (SPEC §12.1): metric lists compiled into one-pass
//! groups over a fake of the CUPTI layer, the pass count the window is asked for, and values
//! decoded into samples keyed by `(dispatch_id, pass)`, through a real replay window on the
//! mock's instant agent.
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
use replay_core::{
    AgentId, Dim3, Dispatch, DispatchId, DispatchInfo, KernelId, KernelKey, NoContextControl,
    Origin, Outcome, Policy, QueueId, ReplayService, SubmissionKind, Subscription, SystemClock,
};
use replay_cuda::counters::{
    metric_set, parse_metric_list, Config, CounterCollector, CounterError, MetricPlan, Profiler,
    ReportHeader, Rollup, SassConfig, SassGranularity, SassMetricInfo, SassRecord, SassRecords,
};
use replay_mock::double::InstantAgent;
use replay_mock::instant::InstantSnapshotter;
use replay_report_types::CounterSample;

const PER_PASS: usize = 4;
const CHIP: &str = "GH100";

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
struct Fake {
    /// The replay pass being submitted (set by the agent's hook), and whether it is a pass.
    current: Arc<AtomicU32>,
    compiles: AtomicU32,
    released: AtomicU32,
    session: Mutex<Option<Session>>,
    calls: Mutex<Vec<String>>,
    /// Fail `start` of this dispatch's pass (by the number of starts so far).
    fail_start_at: Mutex<Option<u32>>,
    starts: AtomicU32,
    /// Sessions complete after one pass, whatever the host API counted.
    finish_early: std::sync::atomic::AtomicBool,
    /// Sessions want one pass more than the host API counted.
    finish_late: std::sync::atomic::AtomicBool,
    /// Every list the host API was asked to compile.
    compiled: Mutex<Vec<Vec<String>>>,
    /// The SASS Metrics API is missing (an older libcupti).
    no_sass_api: std::sync::atomic::AtomicBool,
    /// SASS patching: the configuration while enabled.
    sass: Mutex<Option<SassConfig>>,
    /// Records made while patching was enabled.
    sass_records: Mutex<Vec<SassRecord>>,
    /// Launches patching saw, by kernel name (the dispatch's, then the fake's others).
    sass_seen: Mutex<Vec<String>>,
    /// The dispatch's kernel is not patched (its launches make no records).
    sass_unpatched: std::sync::atomic::AtomicBool,
    /// A chip whose SASS names differ from [`SASS_LIST`].
    sass_list: Mutex<Option<Vec<(u64, &'static str)>>>,
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

    fn launched(&self, kernel: &str) {
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
fn value(metric: &str, pass: u32) -> f64 {
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

/// Each group of `plan` as `(first pass, passes, metrics)`.
fn group_layout(plan: &MetricPlan) -> Vec<(u32, u32, Vec<&str>)> {
    plan.groups
        .iter()
        .map(|g| {
            (
                g.first_pass,
                g.config.passes,
                g.config.metrics.iter().map(String::as_str).collect(),
            )
        })
        .collect()
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn dispatch(kernel: u64) -> Dispatch {
    Dispatch {
        info: DispatchInfo {
            agent: AgentId(0),
            queue: QueueId(0x5eed),
            dispatch_id: DispatchId(0),
            kernel_id: KernelId(kernel),
            kernel_name: "_Z3rmwPdm".into(),
            // Work-items: 80 blocks of 256 threads.
            grid: Dim3::new(80 * 256, 1, 1),
            workgroup: Dim3::new(256, 1, 1),
            private_segment_size: 0,
            group_segment_size: 0,
        },
        kernel: KernelKey {
            agent: AgentId(0),
            code_object: 1,
            symbol: kernel,
        },
        kind: SubmissionKind::KernelDispatch,
        kernarg: Default::default(),
        arg_layout: Default::default(),
        origin: Origin::SubmittingThread,
        handle: 0,
    }
}

struct Rig {
    fake: Arc<Fake>,
    collector: Arc<CounterCollector>,
    svc: ReplayService,
    agent: InstantAgent,
}

fn rig(metrics: &[&str], min_passes: u32) -> Rig {
    let fake = Arc::new(Fake::default());
    let plan = MetricPlan::compile(&*fake, CHIP, &names(metrics)).expect("plan");
    let collector = Arc::new(CounterCollector::new(
        Arc::new(plan),
        Arc::clone(&fake) as Arc<dyn Profiler>,
        min_passes,
    ));
    let svc = ReplayService::new(
        Policy::default(),
        Arc::new(SystemClock::new()),
        Arc::new(NoContextControl),
    );
    svc.configure(
        replay_core::ContextId(1),
        Subscription::CONFIG | Subscription::PASS,
        Arc::clone(&collector) as Arc<dyn replay_core::ReplayTool>,
    )
    .unwrap();
    svc.start().unwrap();
    let (f, cur) = (Arc::clone(&fake), Arc::clone(&fake.current));
    let agent = InstantAgent::new(AgentId(0)).on_submit(move |d, pass| {
        if let Some(p) = pass {
            cur.store(p, Ordering::SeqCst);
            f.launched(&d.info.kernel_name);
        }
    });
    Rig {
        fake,
        collector,
        svc,
        agent,
    }
}

impl Rig {
    fn run(&self, kernel: u64) -> replay_core::OutcomeRecord {
        self.svc
            .submit(
                &self.agent,
                &InstantSnapshotter::default(),
                dispatch(kernel),
            )
            .unwrap()
            .record
            .expect("a candidate has a record")
    }
}

#[test]
fn metrics_the_chip_cannot_collect_are_one_error_naming_each_and_nothing_is_planned() {
    let fake = Fake::default();
    let e = MetricPlan::compile(
        &fake,
        CHIP,
        &names(&[
            "dram__bytes_read.sum",
            "dram__bytes_raed.sum",
            "launch__grid_size",
            "launch__nonsense",
            "sm__nothing.avg",
        ]),
    )
    .unwrap_err();
    let CounterError::Metrics { chip, bad } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(chip, CHIP);
    let bad: Vec<&str> = bad.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        bad,
        [
            "dram__bytes_raed.sum",
            "launch__nonsense",
            "sm__nothing.avg"
        ]
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with("metrics cannot be collected on GH100: \"dram__bytes_raed.sum\" (CUPTI_ERROR_INVALID_METRIC_NAME), \"launch__nonsense\""),
        "{msg}"
    );
    // What was compiled for the good metric was given back.
    assert_eq!(fake.released.load(Ordering::SeqCst), 1);
    assert_eq!(
        MetricPlan::compile(&fake, CHIP, &[]).unwrap_err(),
        CounterError::Empty
    );
}

#[test]
fn metrics_are_packed_first_fit_into_one_pass_groups_and_a_ratio_keeps_its_counters_in_one_pass() {
    let fake = Fake::default();
    let list = [
        "launch__grid_size",
        "smsp__inst_executed.sum",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "lts__t_sector_hit_rate.pct",
        "lts__t_sectors.sum",
        "l1tex__t_sector_hit_rate.pct",
        "big__two_pass.sum",
        "gpu__time_duration.sum",
    ];
    let plan = MetricPlan::compile(&fake, CHIP, &names(&list)).unwrap();
    let groups = group_layout(&plan);
    assert_eq!(
        groups,
        vec![
            // inst, dram_rd, dram_wr fill 3 of 4; the ratio's two counters do not fit beside
            // them, so the ratio opens a group of its own rather than being split, and
            // lts__t_sectors fills the first group's last counter.
            (
                0,
                1,
                vec![
                    "smsp__inst_executed.sum",
                    "dram__bytes_read.sum",
                    "dram__bytes_write.sum",
                    "lts__t_sectors.sum"
                ]
            ),
            (
                1,
                1,
                vec!["lts__t_sector_hit_rate.pct", "l1tex__t_sector_hit_rate.pct"]
            ),
            (2, 2, vec!["big__two_pass.sum"]),
            (4, 1, vec!["gpu__time_duration.sum"]),
        ]
    );
    assert_eq!(plan.passes, 5);
    // The host API's own schedule of the whole list in one image: 14 counters, 4 passes.
    assert_eq!(plan.single_config_passes, 4);
    assert!(plan.passes >= plan.single_config_passes);
    assert_eq!(plan.launch, names(&["launch__grid_size"]));
    // Every metric knows its pass, unit and description, in the order asked.
    let info: Vec<(&str, u32, &str)> = plan
        .metrics
        .iter()
        .map(|m| (m.name.as_str(), m.pass, m.unit.as_str()))
        .collect();
    assert_eq!(info[0], ("launch__grid_size", 0, ""));
    assert_eq!(info[2], ("dram__bytes_read.sum", 0, "byte"));
    assert_eq!(info[5], ("lts__t_sectors.sum", 0, "lts_sector"));
    assert_eq!(info[4], ("lts__t_sector_hit_rate.pct", 1, "%"));
    assert_eq!(info[7], ("big__two_pass.sum", 2, ""));
    assert_eq!(info[8], ("gpu__time_duration.sum", 4, ""));
    assert_eq!(plan.group_at(0), Some((0, 0)));
    assert_eq!(plan.group_at(3), Some((2, 1)));
    assert_eq!(plan.group_at(4), Some((3, 0)));
    assert_eq!(plan.group_at(5), None);
    // Every image the packing tried and dropped was given back.
    assert_eq!(
        fake.compiles.load(Ordering::SeqCst) - fake.released.load(Ordering::SeqCst),
        plan.groups.len() as u32
    );
}

#[test]
fn the_window_asks_for_the_plans_passes_and_each_value_comes_from_the_pass_it_is_keyed_by() {
    let r = rig(
        &[
            "launch__grid_size",
            "launch__registers_per_thread",
            "smsp__inst_executed.sum",
            "lts__t_sector_hit_rate.pct",
            "l1tex__t_sector_hit_rate.pct",
            "dram__bytes_read.sum",
            "big__two_pass.sum",
        ],
        3,
    );
    // Groups: [inst, lts ratio, dram_rd] (4 counters), [l1 ratio], [big over 2 passes].
    assert_eq!(r.collector.plan().passes, 4);
    assert_eq!(r.collector.pass_count(), 4);
    let rec = r.run(3);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    assert_eq!(rec.requested_passes, 4);
    assert_eq!(rec.executed_passes, 4);
    assert_eq!(
        *r.fake.calls.lock(),
        [
            "begin 0xc0 smsp__inst_executed.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum",
            "start",
            "stop",
            "decode",
            "begin 0xc0 l1tex__t_sector_hit_rate.pct",
            "start",
            "stop",
            "decode",
            "begin 0xc0 big__two_pass.sum",
            "start",
            "stop",
            "start",
            "stop",
            "decode",
        ]
    );
    // Where a pass's time goes: every profiler call counted by kind.
    let spent = r.collector.profiler_time();
    for want in ["begin 3x", "start 4x", "stop 4x", "decode 3x"] {
        assert!(spent.contains(want), "{spent}");
    }
    assert!(!spent.contains("sass"), "{spent}");
    let rep = r.collector.report(&ReportHeader {
        process_id: 42,
        process_name: "app".into(),
        ..ReportHeader::default()
    });
    assert!(
        r.collector.errors().is_empty(),
        "{:?}",
        r.collector.errors()
    );
    let d = rec.dispatch_id.0;
    let s = |metric: &str, pass: u32, value: f64| CounterSample {
        dispatch_id: d,
        pass,
        metric: metric.into(),
        value,
    };
    let v = |m: &str, p: u32| value(m, p);
    assert_eq!(
        rep.samples,
        vec![
            s("launch__grid_size", 0, 80.0),
            // The driver's count, as the fake gives it.
            s("launch__registers_per_thread", 0, 30.0),
            s(
                "smsp__inst_executed.sum",
                0,
                v("smsp__inst_executed.sum", 0)
            ),
            s(
                "lts__t_sector_hit_rate.pct",
                0,
                v("lts__t_sector_hit_rate.pct", 0)
            ),
            s(
                "l1tex__t_sector_hit_rate.pct",
                1,
                v("l1tex__t_sector_hit_rate.pct", 1)
            ),
            s("dram__bytes_read.sum", 0, v("dram__bytes_read.sum", 0)),
            s("big__two_pass.sum", 2, v("big__two_pass.sum", 2)),
        ]
    );
    // One sample at a time (what the C ABI's value query reads), the same as the report's.
    for x in &rep.samples {
        assert_eq!(r.collector.sample(d, &x.metric), Some((x.pass, x.value)));
    }
    assert_eq!(r.collector.sample(d, "dram__bytes_write.sum"), None);
    assert_eq!(r.collector.sample(d + 1, "dram__bytes_read.sum"), None);
    assert_eq!(rep.passes, 4);
    assert_eq!(rep.chip, CHIP);
    assert_eq!((rep.process_id, rep.process_name.as_str()), (42, "app"));
    assert_eq!(rep.dispatches.len(), 1);
    let cd = &rep.dispatches[0];
    assert_eq!(cd.dispatch_id, d);
    assert_eq!((cd.grid, cd.block), ([80, 1, 1], [256, 1, 1]));
    assert_eq!((cd.passes, cd.context, cd.stream), (4, 0xc0, 0x5eed));
    assert_eq!(cd.kernel, "_Z3rmwPdm");
    // The window's phases as CONFIG EXIT saw them: they add up to its window, which ends
    // where CONFIG EXIT began, inside the record's whole window.
    let p = cd.phases.expect("the collector records the phases");
    assert!((p.sum() - p.window).abs() <= 1e-9, "{p:?}");
    assert!(
        p.window > 0.0 && p.window <= rec.phases.window,
        "{p:?} {rec:?}"
    );
    assert_eq!((p.drain, p.capture), (rec.phases.drain, rec.phases.capture));
    // Not a graph's node.
    assert_eq!((cd.graph, cd.node, cd.graph_launch), (None, None, None));
    // Round trip through the report's JSON.
    let back: replay_report_types::CounterReport =
        serde_json::from_str(&serde_json::to_string(&rep).unwrap()).unwrap();
    assert_eq!(back, rep);
}

#[test]
fn passes_beyond_the_plan_run_without_the_profiler_and_one_pass_plans_still_replay() {
    let r = rig(&["dram__bytes_read.sum", "dram__bytes_write.sum"], 5);
    assert_eq!(r.collector.plan().passes, 1);
    assert_eq!(r.collector.pass_count(), 5);
    let rec = r.run(1);
    assert_eq!(rec.executed_passes, 5);
    assert_eq!(r.fake.calls.lock().len(), 4, "{:?}", r.fake.calls.lock());
    // A one-pass plan asked alone still asks for two passes: one pass is no replay, and so
    // no PASS callbacks to run the profiler in.
    let r = rig(&["dram__bytes_read.sum"], 1);
    assert_eq!(r.collector.pass_count(), 2);
    let rec = r.run(1);
    assert_eq!(rec.outcome, Outcome::Replayed);
    let rep = r.collector.report(&ReportHeader::default());
    assert_eq!(rep.samples.len(), 1);
    assert_eq!(rep.samples[0].pass, 0);
}

#[test]
fn a_profiler_failure_ends_that_dispatchs_collection_only_and_says_what_is_missing() {
    let r = rig(
        &[
            "smsp__inst_executed.sum",
            "l1tex__t_sector_hit_rate.pct",
            "lts__t_sector_hit_rate.pct",
        ],
        1,
    );
    // Groups: [inst, l1 ratio] (3 counters), then [lts ratio] (3 + 2 > 4).
    assert_eq!(r.collector.plan().passes, 2);
    // The second start (pass 1 of the first dispatch) fails.
    *r.fake.fail_start_at.lock() = Some(1);
    let first = r.run(1);
    assert_eq!(
        first.outcome,
        Outcome::Replayed,
        "the replay itself goes on"
    );
    let second = r.run(1);
    assert_eq!(second.outcome, Outcome::Replayed);
    let rep = r.collector.report(&ReportHeader::default());
    let of = |d: DispatchId| -> Vec<(String, u32)> {
        rep.samples
            .iter()
            .filter(|s| s.dispatch_id == d.0)
            .map(|s| (s.metric.clone(), s.pass))
            .collect()
    };
    assert_eq!(
        of(first.dispatch_id),
        [
            ("smsp__inst_executed.sum".to_string(), 0),
            ("l1tex__t_sector_hit_rate.pct".to_string(), 0)
        ]
    );
    assert_eq!(of(second.dispatch_id).len(), 3);
    let errors = r.collector.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors.iter().all(|(d, _)| *d == first.dispatch_id.0));
    assert!(
        errors[0].1.contains("cuptiRangeProfilerStart"),
        "{errors:?}"
    );
    assert!(
        errors[1].1.contains("not collected") && errors[1].1.contains("lts__t_sector_hit_rate.pct"),
        "{errors:?}"
    );
}

#[test]
fn metric_lists_and_the_basic_set() {
    assert_eq!(
        parse_metric_list(" a.sum, ,b.sum,a.sum ,"),
        names(&["a.sum", "b.sum"])
    );
    let basic = metric_set("basic").unwrap();
    for m in [
        "launch__grid_size",
        "launch__registers_per_thread",
        "smsp__inst_executed.sum",
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "lts__t_sectors.sum",
        "gpu__time_duration.sum",
    ] {
        assert!(basic.contains(&m), "{m}");
    }
    assert!(metric_set("nonsense").is_none());
    // The basic set compiles on the fake (every name is one it knows or a launch metric):
    // five counters in two range passes, then the FFMA count's SASS pass.
    let fake = Fake::default();
    let plan = MetricPlan::compile(&fake, CHIP, &names(basic)).unwrap();
    assert_eq!(plan.passes, 3);
    assert_eq!(plan.sass.as_ref().map(|s| s.first_pass), Some(2));
}

#[test]
fn a_session_the_profiler_completes_early_is_decoded_then_and_its_other_passes_run_without_it() {
    let r = rig(&["big__two_pass.sum", "dram__bytes_read.sum"], 1);
    // Groups: [big] over passes 0-1 (the host API's count), [dram] at pass 2.
    assert_eq!(r.collector.plan().passes, 3);
    r.fake.finish_early.store(true, Ordering::SeqCst);
    let rec = r.run(1);
    assert_eq!(rec.executed_passes, 3);
    assert!(
        r.collector.errors().is_empty(),
        "{:?}",
        r.collector.errors()
    );
    assert_eq!(
        *r.fake.calls.lock(),
        [
            "begin 0xc0 big__two_pass.sum",
            "start",
            "stop",
            "decode",
            "begin 0xc0 dram__bytes_read.sum",
            "start",
            "stop",
            "decode",
        ]
    );
    let rep = r.collector.report(&ReportHeader::default());
    let got: Vec<(&str, u32, f64)> = rep
        .samples
        .iter()
        .map(|s| (s.metric.as_str(), s.pass, s.value))
        .collect();
    assert_eq!(
        got,
        [
            ("big__two_pass.sum", 0, value("big__two_pass.sum", 0)),
            ("dram__bytes_read.sum", 2, value("dram__bytes_read.sum", 2)),
        ]
    );
}

#[test]
fn a_session_the_profiler_wants_more_passes_for_than_planned_is_an_error_and_no_sample() {
    let r = rig(&["big__two_pass.sum", "dram__bytes_read.sum"], 1);
    // Groups: [big] over passes 0-1, [dram] at pass 2.
    assert_eq!(r.collector.plan().passes, 3);
    r.fake.finish_late.store(true, Ordering::SeqCst);
    let rec = r.run(1);
    assert_eq!(rec.outcome, Outcome::Replayed, "the replay itself goes on");
    assert_eq!(rec.executed_passes, 3);
    // Never decoded, and the dispatch's later group is not begun.
    assert_eq!(
        *r.fake.calls.lock(),
        [
            "begin 0xc0 big__two_pass.sum",
            "start",
            "stop",
            "start",
            "stop"
        ]
    );
    let rep = r.collector.report(&ReportHeader::default());
    assert!(rep.samples.is_empty(), "{:?}", rep.samples);
    let errors = r.collector.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0]
            .1
            .contains("the profiler wants more than the 2 passes the host API planned"),
        "{errors:?}"
    );
    assert!(
        errors[1].1.contains("not collected after 3 passes")
            && errors[1]
                .1
                .ends_with(": big__two_pass.sum,dram__bytes_read.sum"),
        "{errors:?}"
    );
}

#[test]
fn a_value_the_profiler_cannot_evaluate_is_an_error_not_a_sample() {
    let r = rig(&["nan__metric.sum", "dram__bytes_read.sum"], 1);
    let rec = r.run(1);
    let rep = r.collector.report(&ReportHeader::default());
    assert!(rep.samples.iter().all(|s| s.value.is_finite()));
    assert_eq!(rep.samples.len(), 1, "{:?}", rep.samples);
    assert_eq!(rep.samples[0].metric, "dram__bytes_read.sum");
    let errors = r.collector.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, rec.dispatch_id.0);
    assert!(
        errors[0]
            .1
            .contains("nan__metric.sum: the profiler evaluated no value"),
        "{errors:?}"
    );
}

#[test]
fn multi_pass_metrics_share_an_image_where_it_costs_no_pass_and_one_pass_metrics_never_join_them() {
    let fake = Fake::default();
    let plan = MetricPlan::compile(
        &fake,
        CHIP,
        &names(&[
            "big__two_pass.sum",
            "dram__bytes_read.sum",
            "big__shares.sum",
        ]),
    )
    .unwrap();
    let groups = group_layout(&plan);
    assert_eq!(
        groups,
        vec![
            (0, 2, vec!["big__two_pass.sum", "big__shares.sum"]),
            (2, 1, vec!["dram__bytes_read.sum"]),
        ]
    );
    assert_eq!(plan.passes, 3);
}

#[test]
fn sass_metrics_get_a_pass_of_their_own_after_the_range_groups_mapped_to_the_chips_names() {
    let fake = Fake::default();
    let plan = MetricPlan::compile(
        &fake,
        CHIP,
        &names(&[
            "launch__grid_size",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "smsp__inst_executed.sum",
            "dram__bytes_read.sum",
            "smsp__sass_inst_executed_op_global_ld.sum",
        ]),
    )
    .unwrap();
    // The range profiler's host never saw a SASS name.
    assert!(
        fake.compiled
            .lock()
            .iter()
            .flatten()
            .all(|m| !m.contains("__sass_")),
        "{:?}",
        fake.compiled.lock()
    );
    let groups: Vec<Vec<&str>> = plan
        .groups
        .iter()
        .map(|g| g.config.metrics.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        groups,
        [vec!["smsp__inst_executed.sum", "dram__bytes_read.sum"]]
    );
    let s = plan.sass.as_ref().expect("a SASS pass");
    assert_eq!(s.first_pass, 1);
    assert_eq!(plan.passes, 2, "the SASS pass is counted");
    assert_eq!(plan.single_config_passes, 1, "the range metrics alone");
    let mapped: Vec<(&str, &str, u64, Rollup)> = s
        .metrics
        .iter()
        .map(|m| (m.name.as_str(), m.api_name.as_str(), m.id, m.rollup))
        .collect();
    assert_eq!(
        mapped,
        [
            (
                "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
                "smsp__sass_thread_inst_executed_op_ffma_pred_on",
                12,
                Rollup::Sum
            ),
            (
                "smsp__sass_inst_executed_op_global_ld.sum",
                "smsp__sass_inst_executed_op_global_ld",
                13,
                Rollup::Sum
            ),
        ]
    );
    assert_eq!(s.granularity, SassGranularity::Gpu);
    assert_eq!(s.sentinel, Some(11));
    assert_eq!(s.config().metric_ids, [12, 13, 11]);
    let info: Vec<(&str, u32, &str)> = plan
        .metrics
        .iter()
        .map(|m| (m.name.as_str(), m.pass, m.description.as_str()))
        .collect();
    assert_eq!(
        info[1],
        (
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            1,
            "sass smsp__sass_thread_inst_executed_op_ffma_pred_on"
        )
    );
    assert_eq!(info[3].1, 0);
    let j = plan.summary();
    assert_eq!(j["sass"]["first_pass"], 1);
    assert_eq!(
        j["sass"]["metrics"][0]["api_name"],
        "smsp__sass_thread_inst_executed_op_ffma_pred_on"
    );
    // A list of SASS metrics only: one pass, the SASS one.
    let plan = MetricPlan::compile(
        &fake,
        CHIP,
        &names(&["smsp__sass_inst_executed.sum", "launch__grid_size"]),
    )
    .unwrap();
    assert!(plan.groups.is_empty());
    assert_eq!(plan.passes, 1);
    let s = plan.sass.unwrap();
    assert_eq!(
        (s.first_pass, s.granularity, s.metrics[0].rollup),
        (0, SassGranularity::Gpu, Rollup::Sum)
    );
    // The sentinel is the asked metric itself: configured once.
    assert_eq!(s.config().metric_ids, [11]);
}

#[test]
fn sass_names_that_cannot_be_collected_are_named_with_the_reason() {
    let fake = Fake::default();
    let e = MetricPlan::compile(
        &fake,
        CHIP,
        &names(&[
            "sm__sass_inst_executed_op_nothing.sum",
            "smsp__sass_inst_executed.pct",
            "smsp__sass_inst_executed.sum.per_second",
            "sm__sass_inst_executed.avg",
            "smsp__sass_inst_executed_op_global_ld.max",
            "l1tex__sass_inst_executed.avg",
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "dram__bytes_raed.sum",
        ]),
    )
    .unwrap_err();
    let CounterError::Metrics { chip, bad } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(chip, CHIP);
    let why = |m: &str| {
        bad.iter()
            .find(|(n, _)| n == m)
            .map(|(_, w)| w.as_str())
            .unwrap_or_else(|| panic!("{m} not named: {bad:?}"))
    };
    assert!(
        why("sm__sass_inst_executed_op_nothing.sum")
            .contains("not among the 3 SASS metrics of the chip"),
        "{bad:?}"
    );
    assert!(
        why("sm__sass_inst_executed_op_nothing.sum").contains("--list-sass"),
        "{bad:?}"
    );
    assert!(
        why("smsp__sass_inst_executed.pct").contains(".sum, .avg, .max or .min, not .pct"),
        "{bad:?}"
    );
    assert!(
        why("smsp__sass_inst_executed.sum.per_second").contains("not .sum.per_second"),
        "{bad:?}"
    );
    // Rollups over SMs are refused: their records do not add up on the hardware.
    for m in [
        "sm__sass_inst_executed.avg",
        "smsp__sass_inst_executed_op_global_ld.max",
        "l1tex__sass_inst_executed.avg",
    ] {
        assert!(why(m).contains("ask for .sum"), "{m}: {bad:?}");
    }
    // The good SASS metric and the range metric the host knows are not named.
    assert_eq!(bad.len(), 7, "{bad:?}");
    assert!(e
        .to_string()
        .contains("sm__sass_inst_executed_op_nothing.sum"));

    // An older libcupti: the SASS metrics are named, the rest of the list plans as before.
    let old = Fake::default();
    old.no_sass_api.store(true, Ordering::SeqCst);
    let e = MetricPlan::compile(
        &old,
        CHIP,
        &names(&[
            "dram__bytes_read.sum",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
        ]),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("\"sm__sass_thread_inst_executed_op_ffma_pred_on.sum\" (no SASS Metrics API: libcupti.so lacks cuptiSassMetricsGetNumOfMetrics)"),
        "{msg}"
    );
    assert!(!msg.contains("dram__bytes_read.sum"), "{msg}");
    let plan = MetricPlan::compile(&old, CHIP, &names(&["dram__bytes_read.sum"])).unwrap();
    assert!(plan.sass.is_none());
}

#[test]
fn the_sass_pass_sums_only_the_dispatchs_function_records_keyed_by_its_own_pass() {
    let r = rig(
        &[
            "smsp__inst_executed.sum",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "smsp__sass_inst_executed_op_global_ld.sum",
            "dram__bytes_read.sum",
        ],
        4,
    );
    assert_eq!(r.collector.plan().passes, 2);
    assert_eq!(r.collector.pass_count(), 4);
    let rec = r.run(1);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    assert_eq!(rec.executed_passes, 4);
    assert!(
        r.collector.errors().is_empty(),
        "{:?}",
        r.collector.errors()
    );
    // The range group in pass 0, the SASS pass alone in pass 1, nothing in passes 2 and 3.
    assert_eq!(
        *r.fake.calls.lock(),
        [
            "begin 0xc0 smsp__inst_executed.sum,dram__bytes_read.sum",
            "start",
            "stop",
            "decode",
            "sass_begin 0xc0 [12, 13, 11] gpu",
            "sass_end",
        ]
    );
    // Patching saw the flush and another kernel beside the dispatch's, in pass 1 only.
    assert_eq!(
        *r.fake.sass_seen.lock(),
        ["kreplay_flush_l2", "_Z3rmwPdm", "_Z5otherv"]
    );
    let rep = r.collector.report(&ReportHeader::default());
    let got: Vec<(&str, u32, f64)> = rep
        .samples
        .iter()
        .map(|s| (s.metric.as_str(), s.pass, s.value))
        .collect();
    // The dispatch's three instructions: (pc + 1) * (id % 10), one instance.
    let sum = |id: u64| ((1..=3).map(|pc| pc * (id % 10)).sum::<u64>()) as f64;
    assert_eq!(
        got,
        [
            (
                "smsp__inst_executed.sum",
                0,
                value("smsp__inst_executed.sum", 0)
            ),
            (
                "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
                1,
                sum(12)
            ),
            ("smsp__sass_inst_executed_op_global_ld.sum", 1, sum(13)),
            ("dram__bytes_read.sum", 0, value("dram__bytes_read.sum", 0)),
        ]
    );
    // A second dispatch patches again and gets its own values.
    let rec2 = r.run(1);
    let rep = r.collector.report(&ReportHeader::default());
    assert_eq!(
        rep.samples
            .iter()
            .filter(|s| s.dispatch_id == rec2.dispatch_id.0 && s.pass == 1)
            .count(),
        2
    );
    assert_eq!(
        r.fake
            .calls
            .lock()
            .iter()
            .filter(|c| c.starts_with("sass_begin"))
            .count(),
        2
    );
}

#[test]
fn sass_rollups_over_sms_are_refused_and_sums_use_whole_gpu_records() {
    for m in [
        "smsp__sass_inst_executed_op_global_ld.avg",
        "smsp__sass_inst_executed_op_global_ld.max",
        "sm__sass_inst_executed_op_global_ld.min",
    ] {
        let e = MetricPlan::compile(
            &Fake::default(),
            CHIP,
            &names(&["smsp__sass_inst_executed_op_global_ld.sum", m]),
        )
        .unwrap_err();
        let CounterError::Metrics { bad, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].0, m);
        assert!(bad[0].1.contains("do not add up"), "{bad:?}");
    }
    let r = rig(&["smsp__sass_inst_executed_op_global_ld.sum"], 1);
    let rec = r.run(1);
    assert_eq!(rec.executed_passes, 2);
    assert!(
        r.fake.calls.lock()[0].ends_with(" gpu"),
        "whole-GPU records: {:?}",
        r.fake.calls.lock()
    );
}

#[test]
fn a_kernel_that_was_not_patched_is_an_error_not_a_zero_and_other_dispatches_go_on() {
    let r = rig(
        &[
            "dram__bytes_read.sum",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
        ],
        1,
    );
    r.fake.sass_unpatched.store(true, Ordering::SeqCst);
    let first = r.run(1);
    assert_eq!(
        first.outcome,
        Outcome::Replayed,
        "the replay itself goes on"
    );
    r.fake.sass_unpatched.store(false, Ordering::SeqCst);
    let second = r.run(1);
    let rep = r.collector.report(&ReportHeader::default());
    let of = |d: DispatchId| -> Vec<&str> {
        rep.samples
            .iter()
            .filter(|s| s.dispatch_id == d.0)
            .map(|s| s.metric.as_str())
            .collect()
    };
    assert_eq!(of(first.dispatch_id), ["dram__bytes_read.sum"]);
    assert_eq!(of(second.dispatch_id).len(), 2);
    let errors = r.collector.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors.iter().all(|(d, _)| *d == first.dispatch_id.0));
    assert!(
        errors[0].1.contains("no SASS record of _Z3rmwPdm")
            && errors[0].1.contains("kreplay_flush_l2")
            && errors[0].1.contains("not patched"),
        "{errors:?}"
    );
    assert!(
        errors[1].1.contains("not collected")
            && errors[1]
                .1
                .contains("sm__sass_thread_inst_executed_op_ffma_pred_on.sum"),
        "{errors:?}"
    );
    // Patching was turned off after each dispatch's SASS pass.
    assert!(r.fake.sass.lock().is_none());
}

#[test]
fn a_sass_pass_the_window_never_reaches_leaves_patching_off_and_says_what_is_missing() {
    // A range group that fails leaves the SASS pass to run, but the dispatch's collection
    // has ended: nothing is enabled, and the SASS metrics are named as missing.
    let r = rig(
        &[
            "dram__bytes_read.sum",
            "smsp__sass_inst_executed_op_global_ld.sum",
        ],
        1,
    );
    *r.fake.fail_start_at.lock() = Some(0);
    let rec = r.run(1);
    assert_eq!(rec.executed_passes, 2);
    assert!(
        r.fake
            .calls
            .lock()
            .iter()
            .all(|c| !c.starts_with("sass_begin")),
        "{:?}",
        r.fake.calls.lock()
    );
    let errors = r.collector.errors();
    assert!(
        errors.iter().any(|(_, e)| e.contains("not collected")
            && e.contains("dram__bytes_read.sum")
            && e.contains("smsp__sass_inst_executed_op_global_ld.sum")),
        "{errors:?}"
    );
    // Asked for one pass only (a tool's own front end may): the SASS pass never runs, and
    // its metrics are missing from the dispatch.
    let c = CounterCollector::new(
        Arc::clone(r.collector.plan()),
        Arc::clone(&r.fake) as Arc<dyn Profiler>,
        1,
    );
    let d = dispatch(1).info;
    let pass = |c: &CounterCollector, n: u32| {
        c.pass_enter(&d, n);
        r.fake.current.store(n, Ordering::SeqCst);
        r.fake.launched(&d.kernel_name);
        c.pass_exit(&d, n);
    };
    pass(&c, 0);
    let mut o = replay_core::OutcomeRecord::new(d.dispatch_id, d.agent, &d.kernel_name);
    o.outcome = Outcome::Truncated;
    o.executed_passes = 1;
    o.requested_passes = 2;
    c.finish(&d, Some(&o));
    assert_eq!(c.errors().len(), 1, "{:?}", c.errors());
    assert!(
        c.errors()[0].1.contains("not collected after 1 passes")
            && c.errors()[0]
                .1
                .ends_with(": smsp__sass_inst_executed_op_global_ld.sum"),
        "{:?}",
        c.errors()
    );
    // A SASS pass whose EXIT never came (truncated inside it): CONFIG EXIT turns patching
    // off.
    let c = CounterCollector::new(
        Arc::clone(r.collector.plan()),
        Arc::clone(&r.fake) as Arc<dyn Profiler>,
        1,
    );
    *r.fake.fail_start_at.lock() = None;
    pass(&c, 0);
    c.pass_enter(&d, 1);
    assert!(r.fake.sass.lock().is_some());
    o.executed_passes = 2;
    c.finish(&d, Some(&o));
    assert!(r.fake.sass.lock().is_none(), "patching left on");
}

#[test]
fn sass_names_map_by_the_api_name_itself_and_by_other_spellings_of_the_unit() {
    let fake = Fake::default();
    // The API's own base name is its `.sum`; an unknown bare name is not guessed at.
    let plan = MetricPlan::compile(
        &fake,
        CHIP,
        &names(&["smsp__sass_inst_executed_op_global_ld"]),
    )
    .unwrap();
    let m = &plan.sass.unwrap().metrics[0];
    assert_eq!((m.id, m.rollup), (13, Rollup::Sum));
    assert!(MetricPlan::compile(
        &fake,
        CHIP,
        &names(&["sm__sass_inst_executed_op_global_ld"])
    )
    .is_err());
    // A chip that spells the unit otherwise: `sm__sass_x.sum` still finds `sass__x`, and
    // without `smsp__sass_inst_executed` there is no sentinel.
    *fake.sass_list.lock() = Some(vec![
        (21, "sass__thread_inst_executed_op_ffma_pred_on"),
        (22, "sm__sass_inst_executed_op_global_ld"),
    ]);
    let plan = MetricPlan::compile(
        &fake,
        CHIP,
        &names(&[
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "smsp__sass_inst_executed_op_global_ld.sum",
        ]),
    )
    .unwrap();
    let s = plan.sass.unwrap();
    let got: Vec<(&str, u64)> = s
        .metrics
        .iter()
        .map(|m| (m.api_name.as_str(), m.id))
        .collect();
    assert_eq!(
        got,
        [
            ("sass__thread_inst_executed_op_ffma_pred_on", 21),
            ("sm__sass_inst_executed_op_global_ld", 22)
        ]
    );
    assert_eq!(s.sentinel, None);
    assert_eq!(s.config().metric_ids, [21, 22]);
}

#[test]
fn registers_per_thread_read_as_allocated_at_least_sixteen() {
    // The fake's function `k` has 10 * k registers.
    let r = rig(&["launch__registers_per_thread", "launch__grid_size"], 1);
    r.run(1);
    r.run(3);
    let rep = r.collector.report(&ReportHeader::default());
    let regs: Vec<f64> = rep
        .samples
        .iter()
        .filter(|s| s.metric == "launch__registers_per_thread")
        .map(|s| s.value)
        .collect();
    assert_eq!(regs, [16.0, 30.0]);
}

#[test]
fn a_sectors_unit_is_the_counters_own_whatever_the_host_api_labels_it() {
    let fake = Fake::default();
    let l1 = MetricPlan::compile(&fake, CHIP, &names(&["l1tex__t_sectors.sum"])).unwrap();
    assert_eq!(l1.metrics[0].unit, "l1tex_sector");
}
