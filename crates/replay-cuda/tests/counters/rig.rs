//! The collector as the tool of a real replay service, over the fake, on the mock's instant
//! agent: the agent tells the fake which pass each launch is, so a value names the pass that
//! produced it. Also the plan's groups and metric names as the tests compare them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use replay_core::{
    AgentId, Dim3, Dispatch, DispatchInfo, KernelId, KernelKey, NoContextControl, Origin, Policy,
    QueueId, ReplayService, SubmissionKind, Subscription, SystemClock,
};
use replay_cuda::counters::{CounterCollector, MetricPlan, Profiler};
use replay_mock::double::InstantAgent;
use replay_mock::instant::InstantSnapshotter;

use crate::fake::{Fake, CHIP};

/// Each group of `plan` as `(first pass, passes, metrics)`.
pub fn group_layout(plan: &MetricPlan) -> Vec<(u32, u32, Vec<&str>)> {
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

/// A plan packed in one-pass groups: what these tests lay out (the default, one
/// configuration, has a test of its own).
pub fn groups_plan(
    p: &dyn Profiler,
    chip: &str,
    names: &[String],
) -> Result<MetricPlan, replay_cuda::counters::CounterError> {
    MetricPlan::compile_packed(p, chip, names, replay_cuda::counters::Packing::Groups)
}

pub fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

pub fn dispatch(kernel: u64) -> Dispatch {
    Dispatch {
        info: DispatchInfo::new(
            AgentId(0),
            QueueId(0x5eed),
            KernelId(kernel),
            "_Z3rmwPdm",
            // Work-items: 80 blocks of 256 threads.
            Dim3::new(80 * 256, 1, 1),
            Dim3::new(256, 1, 1),
        ),
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

pub struct Rig {
    pub fake: Arc<Fake>,
    pub collector: Arc<CounterCollector>,
    pub svc: ReplayService,
    pub agent: InstantAgent,
}

pub fn rig(metrics: &[&str], min_passes: u32) -> Rig {
    rig_packed(metrics, min_passes, replay_cuda::counters::Packing::Groups)
}

pub fn rig_packed(
    metrics: &[&str],
    min_passes: u32,
    packing: replay_cuda::counters::Packing,
) -> Rig {
    let fake = Arc::new(Fake::default());
    let plan = MetricPlan::compile_packed(&*fake, CHIP, &names(metrics), packing).expect("plan");
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
    pub fn run(&self, kernel: u64) -> replay_core::OutcomeRecord {
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
