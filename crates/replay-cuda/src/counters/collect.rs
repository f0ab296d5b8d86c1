//! The collection per replayed dispatch: profiler passes inside replay passes (range-profiler
//! groups, then the SASS pass), values decoded into [`CounterSample`]s keyed by
//! `(dispatch_id, pass)`.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_core::{DispatchId, DispatchInfo, Outcome, OutcomeRecord};
use replay_report_types::{CounterDispatch, CounterReport, CounterSample};

use super::plan::{CounterError, GroupOrder, MetricPlan, Profiler};

/// The fewest registers a thread is allocated, whatever the function's count.
const MIN_REGISTERS: u32 = 16;

/// `launch__registers_per_thread` as Nsight Compute reports it from the function's compiled
/// count (`CU_FUNC_ATTRIBUTE_NUM_REGS`): that count, raised to the allocation's minimum. The
/// per-warp allocation unit (256 registers on sm_90, so 8 per thread) is not applied: ncu
/// reports counts between multiples of 8 as they are (SPEC §12.1).
pub fn registers_as_ncu(compiled: u32) -> u32 {
    compiled.max(MIN_REGISTERS)
}

#[derive(Debug, Default)]
struct Pending {
    ctx: Option<u64>,
    /// The profiler is started (between a pass's ENTER and EXIT).
    started: bool,
    /// A group's configuration is set and its passes are under way.
    in_group: Option<usize>,
    /// SASS patching is enabled on the context (between the SASS pass's ENTER and EXIT).
    sass_started: bool,
    /// The SASS pass's values are in.
    sass_done: bool,
    samples: Vec<CounterSample>,
    groups_done: Vec<usize>,
    failed: Option<String>,
    /// Metrics without a value (the profiler evaluated NaN).
    notes: Vec<String>,
    /// The order this dispatch runs the range groups in, chosen at its first range pass.
    order: Option<GroupOrder>,
}

#[derive(Debug, Default)]
struct Collected {
    dispatches: Vec<CounterDispatch>,
    samples: Vec<CounterSample>,
    errors: Vec<(u64, String)>,
}

/// What the report says of the process and device (the collector knows only dispatches).
#[derive(Debug, Clone, Default)]
pub struct ReportHeader {
    /// Process id.
    pub process_id: u32,
    /// Executable base name.
    pub process_name: String,
    /// Host name.
    pub host_name: String,
    /// Device name.
    pub device_name: String,
    /// Compute capability, `9.0`.
    pub compute_capability: String,
}

/// Collects a [`MetricPlan`]'s metrics for every replayed dispatch. Attach it as the
/// service's tool, or call [`Self::pass_enter`], [`Self::pass_exit`] and [`Self::finish`]
/// from a tool's own callbacks and ask for [`Self::pass_count`] passes.
pub struct CounterCollector {
    plan: Arc<MetricPlan>,
    profiler: Arc<dyn Profiler>,
    min_passes: u32,
    pending: Mutex<HashMap<DispatchId, Pending>>,
    collected: Mutex<Collected>,
    spent: Mutex<Spent>,
    /// The last group begun on each context.
    last_group: Mutex<HashMap<u64, usize>>,
}

/// The profiler's calls by kind: how many, and their wall time (where a pass's time goes; the
/// report logs it at info level).
#[derive(Debug, Default)]
struct Spent {
    calls: [(u64, std::time::Duration); Call::ALL.len()],
}

/// A profiler call [`Spent`] counts.
#[derive(Debug, Clone, Copy)]
enum Call {
    Begin,
    Start,
    Stop,
    Decode,
    SassBegin,
    SassEnd,
}

impl Call {
    const ALL: [Call; 6] = [
        Call::Begin,
        Call::Start,
        Call::Stop,
        Call::Decode,
        Call::SassBegin,
        Call::SassEnd,
    ];

    fn name(self) -> &'static str {
        match self {
            Call::Begin => "begin",
            Call::Start => "start",
            Call::Stop => "stop",
            Call::Decode => "decode",
            Call::SassBegin => "sass_begin",
            Call::SassEnd => "sass_end",
        }
    }
}

impl Spent {
    fn line(&self) -> String {
        let parts: Vec<String> = Call::ALL
            .iter()
            .zip(&self.calls)
            .filter(|(_, (n, _))| *n > 0)
            .map(|(c, (n, t))| format!("{} {n}x {:.1} ms", c.name(), t.as_secs_f64() * 1e3))
            .collect();
        parts.join(", ")
    }
}

impl std::fmt::Debug for CounterCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CounterCollector")
            .field("plan", &self.plan)
            .field("min_passes", &self.min_passes)
            .finish_non_exhaustive()
    }
}

impl CounterCollector {
    /// A collector of `plan` over `profiler`, asking for at least `min_passes` passes.
    pub fn new(plan: Arc<MetricPlan>, profiler: Arc<dyn Profiler>, min_passes: u32) -> Self {
        Self {
            plan,
            profiler,
            min_passes,
            pending: Mutex::new(HashMap::new()),
            collected: Mutex::new(Collected::default()),
            spent: Mutex::new(Spent::default()),
            last_group: Mutex::new(HashMap::new()),
        }
    }

    /// Runs one profiler call of kind `call`, adding its wall time to [`Spent`].
    fn timed<T>(&self, call: Call, f: impl FnOnce() -> T) -> T {
        let t = std::time::Instant::now();
        let r = f();
        let mut s = self.spent.lock();
        s.calls[call as usize].0 += 1;
        s.calls[call as usize].1 += t.elapsed();
        r
    }

    /// The profiler's time by call so far (`begin 30x 812.4 ms, start ...`).
    pub fn profiler_time(&self) -> String {
        self.spent.lock().line()
    }

    /// The plan.
    pub fn plan(&self) -> &Arc<MetricPlan> {
        &self.plan
    }

    /// The passes to ask for: the plan's, or `min_passes` if more, and at least 2 (one pass
    /// is no replay, and so no PASS callbacks).
    pub fn pass_count(&self) -> u32 {
        self.plan.passes.max(self.min_passes).max(2)
    }

    fn fail(&self, p: &mut Pending, id: DispatchId, e: CounterError) {
        if p.started {
            if let Some(ctx) = p.ctx {
                let _ = self.profiler.stop(ctx);
            }
            p.started = false;
        }
        self.end_sass(p);
        p.in_group = None;
        let msg = e.to_string();
        log::warn!("[kernel-replay] counters: dispatch {}: {msg}", id.0);
        p.failed = Some(msg);
    }

    /// Ends SASS patching where it is on, discarding its records.
    fn end_sass(&self, p: &mut Pending) {
        if p.sass_started {
            p.sass_started = false;
            if let Some(ctx) = p.ctx {
                let _ = self.profiler.sass_end(ctx);
            }
        }
    }

    fn context(&self, p: &mut Pending) -> Result<u64, CounterError> {
        match p.ctx {
            Some(c) => Ok(c),
            None => {
                let c = self.profiler.current_context()?;
                p.ctx = Some(c);
                Ok(c)
            }
        }
    }

    /// PASS ENTER of the SASS pass: configuration and lazy patching on.
    fn sass_enter(&self, info: &DispatchInfo) {
        let Some(s) = &self.plan.sass else { return };
        let mut all = self.pending.lock();
        let p = all.entry(info.dispatch_id).or_default();
        if p.failed.is_some() || p.sass_done {
            return;
        }
        let r = self.context(p).and_then(|ctx| {
            self.timed(Call::SassBegin, || {
                self.profiler.sass_begin(ctx, &s.config())
            })
        });
        match r {
            Ok(()) => p.sass_started = true,
            Err(e) => self.fail(p, info.dispatch_id, e),
        }
    }

    /// PASS EXIT of the SASS pass: the records flushed, patching off, the dispatch's
    /// function's records summed into samples keyed by `(dispatch_id, the SASS pass)`.
    fn sass_exit(&self, info: &DispatchInfo) {
        let Some(s) = &self.plan.sass else { return };
        let mut all = self.pending.lock();
        let Some(p) = all.get_mut(&info.dispatch_id) else {
            return;
        };
        if p.failed.is_some() || !p.sass_started {
            return;
        }
        p.sass_started = false;
        let ctx = p.ctx.expect("set when started");
        let r = self
            .timed(Call::SassEnd, || self.profiler.sass_end(ctx))
            .and_then(|data| {
                if data.dropped > 0 {
                    log::warn!(
                        "[kernel-replay] counters: dispatch {}: CUPTI dropped {} SASS records",
                        info.dispatch_id.0,
                        data.dropped
                    );
                }
                s.evaluate(&data, &info.kernel_name)
            });
        match r {
            Ok(values) => {
                for (metric, value) in values {
                    p.samples.push(CounterSample {
                        dispatch_id: info.dispatch_id.0,
                        pass: s.first_pass,
                        metric,
                        value,
                    });
                }
                p.sass_done = true;
            }
            Err(e) => self.fail(p, info.dispatch_id, e),
        }
    }

    /// The order for a dispatch on `ctx`: reversed where the last group begun there was the
    /// plan's last one (and not its only one), so the kept range-profiler object serves the
    /// dispatch's first group (`cupti`'s object life).
    fn order_after(&self, ctx: u64) -> GroupOrder {
        let n = self.plan.groups.len();
        match self.last_group.lock().get(&ctx) {
            Some(&g) if n > 1 && g == n - 1 => GroupOrder::Reversed,
            _ => GroupOrder::Planned,
        }
    }

    /// PASS ENTER of `pass`: sets the group's configuration on its first pass, then starts
    /// the profiler; the SASS pass enables patching instead. Passes beyond the plan run
    /// without either.
    pub fn pass_enter(&self, info: &DispatchInfo, pass: u32) {
        if self
            .plan
            .sass
            .as_ref()
            .is_some_and(|s| s.first_pass == pass)
        {
            return self.sass_enter(info);
        }
        if self.plan.group_at(pass).is_none() {
            return;
        }
        let mut all = self.pending.lock();
        let p = all.entry(info.dispatch_id).or_default();
        if p.failed.is_some() {
            return;
        }
        let order = match p.order {
            Some(o) => o,
            None => match self.context(p) {
                Ok(ctx) => *p.order.insert(self.order_after(ctx)),
                Err(e) => return self.fail(p, info.dispatch_id, e),
            },
        };
        let Some((g, sub, _)) = self.plan.group_in(pass, order) else {
            return;
        };
        if p.groups_done.contains(&g) {
            // The profiler finished this group in fewer passes than the host API counted:
            // its remaining passes run without it.
            return;
        }
        let r = (|| -> Result<(), CounterError> {
            let ctx = self.context(p)?;
            if sub == 0 {
                let config = &self.plan.groups[g].config;
                self.timed(Call::Begin, || self.profiler.begin(ctx, config))?;
                self.last_group.lock().insert(ctx, g);
                p.in_group = Some(g);
            } else if p.in_group != Some(g) {
                return Err(CounterError::Session(format!(
                    "pass {pass} continues a configuration that was not set"
                )));
            }
            self.timed(Call::Start, || self.profiler.start(ctx))?;
            p.started = true;
            Ok(())
        })();
        if let Err(e) = r {
            self.fail(p, info.dispatch_id, e);
        }
    }

    /// PASS EXIT of `pass`: stops the profiler; after a group's last pass decodes its values
    /// into samples keyed by `(dispatch_id, the group's first pass)`. The SASS pass's values
    /// are keyed by that pass.
    pub fn pass_exit(&self, info: &DispatchInfo, pass: u32) {
        if self
            .plan
            .sass
            .as_ref()
            .is_some_and(|s| s.first_pass == pass)
        {
            return self.sass_exit(info);
        }
        let mut all = self.pending.lock();
        let Some(p) = all.get_mut(&info.dispatch_id) else {
            return;
        };
        let Some((g, sub, first)) = self.plan.group_in(pass, p.order.unwrap_or_default()) else {
            return;
        };
        if p.failed.is_some() || !p.started {
            return;
        }
        let group = &self.plan.groups[g];
        let last = sub + 1 == group.config.passes.max(1);
        let r = (|| -> Result<(), CounterError> {
            let ctx = p.ctx.expect("set when started");
            p.started = false;
            let all_submitted = self.timed(Call::Stop, || self.profiler.stop(ctx))?;
            match (last, all_submitted) {
                (false, false) => return Ok(()),
                // `cuptiProfilerHostGetNumOfPasses` can count more passes than the range
                // profiler takes (seen on an H200: 2 for `lts__t_sector_hit_rate.pct`, whose
                // session was complete after one): decode now.
                (false, true) => {}
                (true, false) => {
                    return Err(CounterError::Session(format!(
                        "the profiler wants more than the {} passes the host API planned",
                        group.config.passes
                    )))
                }
                (true, true) => {}
            }
            let values = self.timed(Call::Decode, || self.profiler.decode(ctx, &group.config))?;
            if values.len() != group.config.metrics.len() {
                return Err(CounterError::Session(format!(
                    "{} values for {} metrics",
                    values.len(),
                    group.config.metrics.len()
                )));
            }
            p.in_group = None;
            for (m, v) in group.config.metrics.iter().zip(values) {
                if !v.is_finite() {
                    p.notes.push(format!(
                        "{m}: the profiler evaluated no value ({v}) for pass {}",
                        first
                    ));
                    continue;
                }
                p.samples.push(CounterSample {
                    dispatch_id: info.dispatch_id.0,
                    pass: first,
                    metric: m.clone(),
                    value: v,
                });
            }
            p.groups_done.push(g);
            Ok(())
        })();
        if let Err(e) = r {
            self.fail(p, info.dispatch_id, e);
        }
    }

    /// CONFIG EXIT: the dispatch's record, its launch metrics, and what is missing.
    pub fn finish(&self, info: &DispatchInfo, outcome: Option<&OutcomeRecord>) {
        let mut p = self
            .pending
            .lock()
            .remove(&info.dispatch_id)
            .unwrap_or_default();
        if p.started {
            // A pass that never reached its EXIT (the window truncated): end the session.
            if let Some(ctx) = p.ctx {
                let _ = self.profiler.stop(ctx);
            }
        }
        self.end_sass(&mut p);
        let id = info.dispatch_id.0;
        let mut c = self.collected.lock();
        let Some(o) = outcome else { return };
        if o.outcome == Outcome::NotRequested || o.executed_passes == 0 {
            c.errors.push((
                id,
                format!(
                    "{} not replayed ({} {}): no counters",
                    o.kernel,
                    o.outcome.as_str(),
                    o.reason.as_str()
                ),
            ));
            return;
        }
        if let Some(e) = p.failed.take() {
            c.errors.push((id, e));
        }
        for n in p.notes.drain(..) {
            c.errors.push((id, n));
        }
        let mut missing: Vec<String> = (0..self.plan.groups.len())
            .filter(|g| !p.groups_done.contains(g))
            .flat_map(|g| self.plan.groups[g].config.metrics.clone())
            .collect();
        if let Some(s) = self.plan.sass.as_ref().filter(|_| !p.sass_done) {
            missing.extend(s.metrics.iter().map(|m| m.name.clone()));
        }
        if !missing.is_empty() {
            c.errors.push((
                id,
                format!(
                    "not collected after {} passes ({} {}): {}",
                    o.executed_passes,
                    o.outcome.as_str(),
                    o.reason.as_str(),
                    missing.join(",")
                ),
            ));
        }
        let div = |a: u32, b: u32| a.checked_div(b).unwrap_or(a);
        let grid = [
            div(info.grid.x, info.workgroup.x),
            div(info.grid.y, info.workgroup.y),
            div(info.grid.z, info.workgroup.z),
        ];
        let block = [info.workgroup.x, info.workgroup.y, info.workgroup.z];
        for m in &self.plan.launch {
            let blocks = u64::from(grid[0]) * u64::from(grid[1]) * u64::from(grid[2]);
            let threads = u64::from(block[0]) * u64::from(block[1]) * u64::from(block[2]);
            let v = match m.as_str() {
                "launch__grid_size" => Some(blocks as f64),
                "launch__block_size" => Some(threads as f64),
                "launch__thread_count" => Some((blocks * threads) as f64),
                "launch__registers_per_thread" => self
                    .profiler
                    .registers(info.kernel_id.0)
                    .map(|n| f64::from(registers_as_ncu(n))),
                _ => None,
            };
            match v {
                Some(value) => p.samples.push(CounterSample {
                    dispatch_id: id,
                    pass: 0,
                    metric: m.clone(),
                    value,
                }),
                None => c.errors.push((id, format!("{m}: unknown for this launch"))),
            }
        }
        // Samples in the order of the plan's metrics, then by pass.
        let order = |s: &CounterSample| {
            self.plan
                .metrics
                .iter()
                .position(|m| m.name == s.metric)
                .unwrap_or(usize::MAX)
        };
        p.samples.sort_by_key(|s| (order(s), s.pass));
        let tag = crate::state::graph::current_node();
        c.dispatches.push(CounterDispatch {
            dispatch_id: id,
            kernel: info.kernel_name.to_string(),
            kernel_demangled: crate::module::demangle::demangle(&info.kernel_name),
            device: info.agent.0 as u32,
            context: p.ctx.unwrap_or(0),
            stream: info.queue.0,
            grid,
            block,
            passes: o.executed_passes,
            snapshot_bytes: o.captured_bytes,
            start_ns: 0,
            end_ns: 0,
            pass_ns: Vec::new(),
            // CONFIG EXIT runs on the thread that runs a graph's node.
            graph: tag.map(|t| t.graph),
            node: tag.and_then(|t| (t.node != u32::MAX).then_some(t.node)),
            graph_launch: tag.map(|t| t.launch),
            // The window up to CONFIG EXIT (the record this callback sees).
            phases: Some(window_phases(&o.phases)),
            origin: None,
        });
        c.samples.append(&mut p.samples);
    }

    /// Problems so far: `(dispatch_id, what)`.
    pub fn errors(&self) -> Vec<(u64, String)> {
        self.collected.lock().errors.clone()
    }

    /// The pass and value of `metric` for `dispatch_id`, once that dispatch is finished;
    /// `None` where there is none (the errors say why).
    pub fn sample(&self, dispatch_id: u64, metric: &str) -> Option<(u32, f64)> {
        self.collected
            .lock()
            .samples
            .iter()
            .find(|s| s.dispatch_id == dispatch_id && s.metric == metric)
            .map(|s| (s.pass, s.value))
    }

    /// The report so far.
    pub fn report(&self, h: &ReportHeader) -> CounterReport {
        let spent = self.profiler_time();
        if !spent.is_empty() {
            log::info!("[kernel-replay] counters: profiler calls: {spent}");
        }
        let c = self.collected.lock();
        CounterReport {
            process_id: h.process_id,
            process_name: h.process_name.clone(),
            host_name: h.host_name.clone(),
            device_name: h.device_name.clone(),
            compute_capability: h.compute_capability.clone(),
            chip: self.plan.chip.clone(),
            // What `kreplay run` held around the program; not said when attached otherwise.
            clock_control: std::env::var(super::clocks::CLOCK_ENV).unwrap_or_default(),
            passes: self.plan.passes,
            metrics: self.plan.metrics.clone(),
            dispatches: c.dispatches.clone(),
            samples: c.samples.clone(),
        }
    }
}

/// The outcome record's phases as the report writes them.
fn window_phases(p: &replay_core::PhaseSeconds) -> replay_report_types::WindowPhases {
    replay_report_types::WindowPhases {
        window: p.window,
        drain: p.drain,
        plan: p.plan,
        capture: p.capture,
        launch: p.launch,
        wait: p.wait,
        check: p.check,
        restore: p.restore,
        callbacks: p.callbacks,
        finish: p.finish,
        config_enter: p.config_enter,
    }
}

impl ReplayTool for CounterCollector {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                let n = u64::from(self.pass_count());
                p.replay_pass_count = Some(Arc::new(move |_, _| n));
            }
            (Operation::Pass, Phase::Enter) => self.pass_enter(p.dispatch_info, p.current_pass),
            (Operation::Pass, Phase::Exit) => self.pass_exit(p.dispatch_info, p.current_pass),
            (Operation::Config, Phase::Exit) => self.finish(p.dispatch_info, p.outcome),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::registers_as_ncu;

    #[test]
    fn registers_read_as_ncu_reports_them_at_least_sixteen_and_not_rounded() {
        for (compiled, ncu) in [(0, 16), (11, 16), (16, 16), (18, 18), (22, 22), (24, 24)] {
            assert_eq!(registers_as_ncu(compiled), ncu, "{compiled}");
        }
        assert_eq!(registers_as_ncu(27), 27);
        assert_eq!(registers_as_ncu(255), 255);
    }
}
