//! The counter report (SPEC §12): what the counter tool collected, every value keyed by
//! `(dispatch_id, pass)`. The writers read these and never combine values of different passes;
//! [`SampleIndex`] is the look-up they build once per report.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::InconsistentReport;

/// One metric's value for one pass of one replayed dispatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterSample {
    /// The replay service's dispatch id (unique in the process).
    pub dispatch_id: u64,
    /// The replay pass (0-based) whose profiler pass produced the value.
    pub pass: u32,
    /// Nsight Compute's metric name, e.g. `dram__bytes_read.sum`.
    pub metric: String,
    /// The value as the profiler evaluated it.
    pub value: f64,
}

/// What the report knows about one replayed dispatch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterDispatch {
    /// The replay service's dispatch id.
    pub dispatch_id: u64,
    /// Kernel name as the program named it (mangled where it is mangled).
    pub kernel: String,
    /// Demangled name (equal to `kernel` for C names).
    pub kernel_demangled: String,
    /// Device ordinal.
    pub device: u32,
    /// Driver context handle.
    pub context: u64,
    /// Stream handle the application launched on.
    pub stream: u64,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Passes the dispatch was executed (replay passes).
    pub passes: u32,
    /// Bytes kernel-replay snapshotted for this dispatch.
    pub snapshot_bytes: u64,
    /// GPU start of the first pass, nanoseconds (0 when unknown).
    pub start_ns: u64,
    /// GPU end of the last pass, nanoseconds (0 when unknown).
    pub end_ns: u64,
    /// GPU `[start, end]` of each pass in nanoseconds, indexed by pass; empty when the collector
    /// does not record them (the rocpd writer then gives every pass the dispatch's
    /// `start_ns`/`end_ns`). Added after the first version of the type, hence the default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_ns: Vec<[u64; 2]>,
    /// The CUDA graph the kernel ran from (numbered from 1 per process), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<u64>,
    /// Its node in that graph (the position in the order the graph was unrolled); `None` for
    /// a kernel outside a graph, or a whole graph profiled as one workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// Which launch of that graph (from 0), for a kernel that ran from a graph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_launch: Option<u64>,
    /// The replay window's time by phase (seconds on the window's clock, as the outcome
    /// record's `phases` has them); `None` when the collector did not record them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<WindowPhases>,
    /// In a report merged from processes ([`CounterReport::merge`]): the process the dispatch
    /// ran in, its rank and its own dispatch id there; `None` in one process's own report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<DispatchOrigin>,
}

/// Where a dispatch of a merged report ran ([`CounterReport::merge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchOrigin {
    /// The process's id.
    pub process: u32,
    /// Its global rank, where a launcher named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The dispatch's id in that process (the merged report's `dispatch_id` is unique over
    /// every process merged, so it may differ).
    pub dispatch_id: u64,
}

/// Where a dispatch's replay window spent its time, in seconds on the window's clock: the
/// outcome record's `phases` (replay-core's `PhaseSeconds`, same member names, so either
/// reads the other's JSON). The phases but `config_enter` add up to `window`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WindowPhases {
    /// The whole window, writer lock to its end.
    pub window: f64,
    /// Drains of queues, agent and copies before the window.
    pub drain: f64,
    /// `auto`, the snapshot plan and admission.
    pub plan: f64,
    /// The snapshot's capture.
    pub capture: f64,
    /// Every pass's cache flush and submission.
    pub launch: f64,
    /// Every pass's wait for completion.
    pub wait: f64,
    /// The scope checks after the passes.
    pub check: f64,
    /// Restores between passes.
    pub restore: f64,
    /// The tool's callbacks inside the window.
    pub callbacks: f64,
    /// Releasing the snapshot and signalling the application's completion.
    pub finish: f64,
    /// CONFIG ENTER and the pass-count callback, before the window (not in `window`).
    pub config_enter: f64,
}

impl WindowPhases {
    /// The names the writers use, in their order: `window`, the window's phases in window
    /// order, then `config_enter`.
    pub const NAMES: [&'static str; 11] = [
        "window",
        "drain",
        "plan",
        "capture",
        "launch",
        "wait",
        "check",
        "restore",
        "callbacks",
        "finish",
        "config_enter",
    ];

    /// The values in the order of [`Self::NAMES`].
    pub fn values(&self) -> [f64; 11] {
        [
            self.window,
            self.drain,
            self.plan,
            self.capture,
            self.launch,
            self.wait,
            self.check,
            self.restore,
            self.callbacks,
            self.finish,
            self.config_enter,
        ]
    }

    /// The window's phases added (`config_enter` is outside the window).
    pub fn sum(&self) -> f64 {
        self.values()[1..10].iter().sum()
    }
}

/// A metric's description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricInfo {
    /// Nsight Compute's metric name.
    pub name: String,
    /// Unit as Nsight Compute prints it (`byte`, `cycle`, `inst`, `nsecond`, ...; empty when none).
    pub unit: String,
    /// One line of description ("" when unknown).
    pub description: String,
    /// The profiler pass (0-based) that collects it.
    pub pass: u32,
}

/// The whole output of one counter collection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterReport {
    /// Process id of the profiled application.
    pub process_id: u32,
    /// Process name (executable base name).
    pub process_name: String,
    /// Host name.
    pub host_name: String,
    /// Device name (e.g. `NVIDIA H200`).
    pub device_name: String,
    /// Compute capability, e.g. `9.0`.
    pub compute_capability: String,
    /// Chip name (e.g. `GH100`).
    pub chip: String,
    /// How the GPU clocks were held while counting: `base` (locked to base for the run, as
    /// Nsight Compute's default), `none` (as the GPU chose), or empty where not said.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub clock_control: String,
    /// Profiler passes the metric list needs.
    pub passes: u32,
    /// The metrics, in the order asked.
    pub metrics: Vec<MetricInfo>,
    /// Replayed dispatches, in dispatch order.
    pub dispatches: Vec<CounterDispatch>,
    /// Every value, keyed by `(dispatch_id, pass)`.
    pub samples: Vec<CounterSample>,
}

/// The samples of one dispatch and metric, by pass (a pass appears once).
pub type ByPass<'a> = BTreeMap<u32, &'a CounterSample>;

impl CounterReport {
    /// The metric's description, if the report lists it.
    pub fn metric(&self, name: &str) -> Option<&MetricInfo> {
        self.metrics.iter().find(|m| m.name == name)
    }

    /// The dispatch with this id, if the report lists it.
    pub fn dispatch(&self, dispatch_id: u64) -> Option<&CounterDispatch> {
        self.dispatches
            .iter()
            .find(|d| d.dispatch_id == dispatch_id)
    }

    /// The value that stands for `metric` on one dispatch: the sample of the pass that collects
    /// the metric (`MetricInfo::pass`); where that pass has none (a metric the report does not
    /// describe, or a collector that put it elsewhere), the sample of the lowest pass that has
    /// one. Never a combination of passes.
    pub fn value(&self, dispatch_id: u64, metric: &str) -> Option<&CounterSample> {
        let mine = || {
            self.samples
                .iter()
                .filter(move |s| s.dispatch_id == dispatch_id && s.metric == metric)
        };
        let want = self.metric(metric).map(|m| m.pass);
        want.and_then(|p| mine().find(|s| s.pass == p))
            .or_else(|| mine().min_by_key(|s| s.pass))
    }

    /// Checks what every writer relies on: dispatch ids are unique, every sample names a
    /// listed dispatch, and no `(dispatch_id, pass, metric)` has two values (a writer could only
    /// pick one or add them, and both would misreport).
    pub fn check(&self) -> Result<(), InconsistentReport> {
        let mut ids = BTreeMap::new();
        for d in &self.dispatches {
            if ids.insert(d.dispatch_id, ()).is_some() {
                return Err(InconsistentReport(format!(
                    "dispatch {} is listed twice",
                    d.dispatch_id
                )));
            }
        }
        let mut seen: BTreeMap<(u64, u32, &str), ()> = BTreeMap::new();
        for s in &self.samples {
            if !ids.contains_key(&s.dispatch_id) {
                return Err(InconsistentReport(format!(
                    "a sample of {} names dispatch {}, which the report does not list",
                    s.metric, s.dispatch_id
                )));
            }
            if seen
                .insert((s.dispatch_id, s.pass, &s.metric), ())
                .is_some()
            {
                return Err(InconsistentReport(format!(
                    "dispatch {} pass {} has two values of {}",
                    s.dispatch_id, s.pass, s.metric
                )));
            }
        }
        Ok(())
    }

    /// The metric names in the order they are written: the described ones as asked, then any
    /// that only samples name, in the order first seen.
    pub fn metric_names(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.metrics.iter().map(|m| m.name.as_str()).collect();
        for s in &self.samples {
            if !out.contains(&s.metric.as_str()) {
                out.push(&s.metric);
            }
        }
        out
    }

    /// Every dispatch's metrics with the value that stands for each ([`Self::value`]: the
    /// collecting pass's) and that pass, by dispatch id; a dispatch without samples is absent.
    /// Built in one go (for every dispatch at once, where [`Self::value`] scans).
    pub fn values(&self) -> BTreeMap<u64, BTreeMap<String, (f64, u32)>> {
        let index = self.index();
        let mut out: BTreeMap<u64, BTreeMap<String, (f64, u32)>> = BTreeMap::new();
        for (id, metrics) in &index.by {
            let mine = out.entry(*id).or_default();
            for name in metrics.keys() {
                if let Some(s) = index.value(*id, name) {
                    mine.insert(name.to_string(), (s.value, s.pass));
                }
            }
        }
        out
    }

    /// The samples indexed by dispatch and metric, built once by the writers (the look-ups
    /// above scan the samples, which is fine for one question, not for a whole report).
    pub fn index(&self) -> SampleIndex<'_> {
        let mut by: BTreeMap<u64, BTreeMap<&str, ByPass<'_>>> = BTreeMap::new();
        for s in &self.samples {
            by.entry(s.dispatch_id)
                .or_default()
                .entry(s.metric.as_str())
                .or_default()
                .insert(s.pass, s);
        }
        let pass_of = self
            .metrics
            .iter()
            .map(|m| (m.name.as_str(), m.pass))
            .collect();
        SampleIndex { by, pass_of }
    }
}

/// [`CounterReport::index`]: samples by `(dispatch_id, metric)`, then by pass.
#[derive(Debug)]
pub struct SampleIndex<'a> {
    by: BTreeMap<u64, BTreeMap<&'a str, ByPass<'a>>>,
    pass_of: BTreeMap<&'a str, u32>,
}

impl<'a> SampleIndex<'a> {
    /// One dispatch's samples of one metric, by pass.
    pub fn by_pass(&self, dispatch_id: u64, metric: &str) -> Option<&ByPass<'a>> {
        self.by.get(&dispatch_id)?.get(metric)
    }

    /// As [`CounterReport::value`].
    pub fn value(&self, dispatch_id: u64, metric: &str) -> Option<&'a CounterSample> {
        let all = self.by_pass(dispatch_id, metric)?;
        self.pass_of
            .get(metric)
            .and_then(|p| all.get(p))
            .or_else(|| all.values().next())
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::{CounterDispatch, CounterReport, CounterSample, MetricInfo};

    fn s(pass: u32, value: f64) -> CounterSample {
        CounterSample {
            dispatch_id: 1,
            pass,
            metric: "m".into(),
            value,
        }
    }

    #[test]
    fn the_value_is_the_collecting_passes_else_the_lowest_passes() {
        let mut r = CounterReport {
            metrics: vec![MetricInfo {
                name: "m".into(),
                unit: String::new(),
                description: String::new(),
                pass: 1,
            }],
            samples: vec![s(2, 20.0), s(1, 10.0), s(0, 5.0)],
            ..CounterReport::default()
        };
        assert_eq!(r.value(1, "m").map(|s| s.value), Some(10.0));
        assert_eq!(r.index().value(1, "m").map(|s| s.value), Some(10.0));
        r.samples.retain(|x| x.pass != 1);
        assert_eq!(r.value(1, "m").map(|s| s.value), Some(5.0));
        assert_eq!(r.index().value(1, "m").map(|s| s.value), Some(5.0));
        assert!(r.value(2, "m").is_none() && r.index().value(1, "other").is_none());
    }

    fn dispatch(id: u64) -> CounterDispatch {
        CounterDispatch {
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
        }
    }

    #[test]
    fn check_names_each_contradiction() {
        let ok = CounterReport {
            dispatches: vec![dispatch(1), dispatch(2)],
            samples: vec![s(0, 1.0), s(1, 2.0)],
            ..CounterReport::default()
        };
        assert_eq!(ok.check(), Ok(()));

        let mut twice = ok.clone();
        twice.dispatches.push(dispatch(2));
        let e = twice.check().unwrap_err();
        assert_eq!(e.0, "dispatch 2 is listed twice");
        assert_eq!(
            e.to_string(),
            "the counter report is inconsistent: dispatch 2 is listed twice"
        );

        let mut unlisted = ok.clone();
        unlisted.dispatches.retain(|d| d.dispatch_id != 1);
        let e = unlisted.check().unwrap_err();
        assert!(e.0.contains("names dispatch 1"), "{e}");

        let mut two_values = ok;
        two_values.samples.push(s(1, 3.0));
        let e = two_values.check().unwrap_err();
        assert_eq!(e.0, "dispatch 1 pass 1 has two values of m");
    }

    #[test]
    fn values_keep_the_collecting_pass_per_dispatch() {
        let r = CounterReport {
            metrics: vec![MetricInfo {
                name: "m".into(),
                unit: String::new(),
                description: String::new(),
                pass: 1,
            }],
            dispatches: vec![dispatch(1)],
            samples: vec![s(0, 5.0), s(1, 10.0)],
            ..CounterReport::default()
        };
        let v = r.values();
        assert_eq!(v[&1]["m"], (10.0, 1));
        assert_eq!(r.index().by_pass(1, "m").map(|b| b.len()), Some(2));
        assert_eq!(r.metric_names(), ["m"]);
    }

    #[test]
    fn a_dispatch_written_before_the_later_fields_still_reads() {
        let old = r#"{"dispatch_id":4,"kernel":"k","kernel_demangled":"k","device":0,
            "context":1,"stream":2,"grid":[1,1,1],"block":[32,1,1],"passes":3,
            "snapshot_bytes":0,"start_ns":0,"end_ns":0}"#;
        let d: CounterDispatch = serde_json::from_str(old).unwrap();
        assert_eq!(d, dispatch(4));
        // And the optional fields are left out when empty, so the old form is what is written.
        let back = serde_json::to_string(&d).unwrap();
        assert!(
            !back.contains("pass_ns") && !back.contains("graph"),
            "{back}"
        );
    }
}
