//! The counter collection without a GPU (SPEC §12.1): metric lists compiled into one-pass
//! groups over a fake of the CUPTI layer, the pass count the window is asked for, and values
//! decoded into samples keyed by `(dispatch_id, pass)`, through a real replay window on the
//! mock's instant agent.
//!
//! The fake models the host API's scheduling as counters per pass: each metric needs a set
//! of raw counters, a configuration needs `ceil(distinct counters / PER_PASS)` passes, and its
//! target side records in which replay pass the kernel ran while the profiler was started, so
//! a value tells which pass produced it.

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
    ReportHeader,
};
use replay_mock::double::InstantAgent;
use replay_mock::instant::InstantSnapshotter;
use replay_report::CounterSample;

const PER_PASS: usize = 4;
const CHIP: &str = "GH100";

/// Raw counters of the metrics the fake knows.
fn counters_of(metric: &str) -> Option<Vec<&'static str>> {
    Some(match metric {
        "smsp__inst_executed.sum" => vec!["inst"],
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
}

impl Fake {
    fn passes_of(metrics: &[String]) -> Option<u32> {
        let mut all = BTreeSet::new();
        for m in metrics {
            all.extend(counters_of(m)?);
        }
        Some(all.len().div_ceil(PER_PASS) as u32)
    }

    fn launched(&self) {
        let pass = self.current.load(Ordering::SeqCst);
        if let Some(s) = self.session.lock().as_mut() {
            if s.started {
                s.launches.push(pass);
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
    let agent = InstantAgent::new(AgentId(0)).on_submit(move |_, pass| {
        if let Some(p) = pass {
            cur.store(p, Ordering::SeqCst);
            f.launched();
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
    let groups: Vec<(u32, u32, Vec<&str>)> = plan
        .groups
        .iter()
        .map(|g| {
            (
                g.first_pass,
                g.config.passes,
                g.config.metrics.iter().map(String::as_str).collect(),
            )
        })
        .collect();
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
    assert_eq!(rep.passes, 4);
    assert_eq!(rep.chip, CHIP);
    assert_eq!((rep.process_id, rep.process_name.as_str()), (42, "app"));
    assert_eq!(rep.dispatches.len(), 1);
    let cd = &rep.dispatches[0];
    assert_eq!(cd.dispatch_id, d);
    assert_eq!((cd.grid, cd.block), ([80, 1, 1], [256, 1, 1]));
    assert_eq!((cd.passes, cd.context, cd.stream), (4, 0xc0, 0x5eed));
    assert_eq!(cd.kernel, "_Z3rmwPdm");
    // Round trip through the report's JSON.
    let back: replay_report::CounterReport =
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
    // The basic set compiles on the fake (every name is one it knows or a launch metric).
    let fake = Fake::default();
    let plan = MetricPlan::compile(&fake, CHIP, &names(basic)).unwrap();
    assert_eq!(plan.passes, 2);
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
    let groups: Vec<(u32, u32, Vec<&str>)> = plan
        .groups
        .iter()
        .map(|g| {
            (
                g.first_pass,
                g.config.passes,
                g.config.metrics.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        vec![
            (0, 2, vec!["big__two_pass.sum", "big__shares.sum"]),
            (2, 1, vec!["dram__bytes_read.sum"]),
        ]
    );
    assert_eq!(plan.passes, 3);
}
