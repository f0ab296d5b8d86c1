//! The replay window (SPEC §6), run synchronously on the thread that runs the submission.
//!
//! 1. gate → 2. CONFIG ENTER and plan → 3. tool work → 4. writer lock → 5. admission →
//! 6. drains (queue, agent, copy fence) → 7. snapshot → 8. pass loop → 9. finish.
//!
//! Decline rather than corrupt: every failure before the first pass declines (the dispatch runs
//! once, with its own completion, still under the writer lock); a failure after a pass ran
//! truncates (no restore follows, so memory holds what that pass wrote). Where memory was
//! already restored for a next pass that then cannot run with the tool, the pass still runs
//! once (silently, or as the ordinary run), so memory always ends equal to one execution. Only
//! a failed restore on a healthy context aborts the process.
//!
//! A wait that ends with a backend error is not a timeout: a drain, a pass or a restore whose
//! poll reports an error ends the window `device_error` (declined before the first pass,
//! truncated after it), never `*_stuck`, and the kernel is not remembered as one that stalls.
//! An error of kind [`BackendErrorKind::DeviceLost`] (a sticky error: a fault in a pass, or
//! any context-wide error, such as the driver's teardown while the process exits) marks the
//! context lost: what is left of a restore (one ordered on the device and still pending, or a
//! failed one) is skipped instead of aborting, nothing more is submitted, and the
//! application gets the driver's error from its own next call, as it would without the
//! library. A drain the backend cannot run here because another window held the agent
//! ([`BackendErrorKind::Busy`]) declines `agent_busy`.
//!
//! Where the agent claims [`Capabilities::ORDERED_RESTORE`] and the snapshot agrees
//! ([`Snapshot::order_restores`]), a restore is only enqueued: the next pass (and the cache
//! flush, and the backend's own memory reads) wait for it on the device, and the pass's wait
//! is the host's only wait per pass. The window completes the pending restore
//! ([`Snapshot::complete_restore`]) as soon as that wait returned (an error there aborts, as a
//! failed restore does), and on every way out of the loop before it (a refused, stuck or
//! failed pass); PASS ENTER's payload offers [`ReplayPayload::sync_memory`] to a tool that
//! reads memory by its own means.
//!
//! [`Capabilities::ORDERED_RESTORE`]: crate::backend::Capabilities::ORDERED_RESTORE
//!
//! A submission whose backend error is [`BackendErrorKind::AfterSubmit`] reached the device and
//! may run: the window never submits that dispatch again. A pass that failed so counts as
//! executed and ends the loop (`truncated`, `submit_failed`, no restore); the application's
//! completion is then signalled once, after it.
//!
//! The gate stays closed while a window is open, whether or not the service is still active:
//! the inactive fast path is taken only when no window is open either (one more relaxed load),
//! and once [`ReplayService::stop`] ran, every submission is ordinary and takes the reader side
//! while any window is open. A window counts itself open before it takes the writer lock (a
//! forwarded candidate, at its early `try_write`), then waits, bounded, for gated writes that
//! took no lock because they checked before it was counted (`crate::locks`).
//!
//! Every submission on the inactive path, kernel dispatches as copies, barriers and batches,
//! is counted the same way while it submits, so a kernel that read the service inactive just
//! before [`ReplayService::start`] is waited for by the first window on its agent before its
//! drains (the price: the inactive path counts itself in and out, two atomic operations more).
//!
//! This file holds steps 1–7 and 9 (the gate, CONFIG, admission, drains, snapshot, finish);
//! the pass loop of step 8 is in `passes`, and the capture a tool asks for in PASS ENTER
//! (SPEC §13) in `pass_capture`, both `impl Window` blocks over the window this file defines.

mod pass_capture;
mod passes;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use crate::backend::{Agent, DrainTarget, Snapshot, Snapshotter, WaitSpec};
use crate::capture::{Capture, CaptureSink};
use crate::contract::{ContinueFn, Operation, PassCountFn, Phase, ReplayPayload, UserData};
use crate::error::{BackendError, BackendErrorKind};
use crate::locks::{thread_in_callback, AgentGate, CallbackScope, WindowOpen};
use crate::outcome::{Outcome, OutcomeRecord, Reason};
use crate::phases::{Phase as Ph, PhaseTimer};
use crate::plan::PassPlan;
use crate::policy::{resolve, Policy, RestoreMode, Scope};
use crate::service::{DispatchReport, KernelMemo, Registration, ReplayService};
use crate::types::{Dispatch, DispatchId, Origin, SubmissionKind};
use crate::wait::{bounded, Bounds, WaitError};

impl ReplayService {
    /// Runs one submission: ordinary, tool work, or a replay window (SPEC §6).
    ///
    /// Returns an error only when the backend failed to run the dispatch at all (its ordinary
    /// submission was refused); every replay fault ends in a declined or truncated record.
    pub fn submit(
        &self,
        agent: &dyn Agent,
        memory: &dyn Snapshotter,
        dispatch: Dispatch,
    ) -> Result<DispatchReport, BackendError> {
        submit(self, agent, memory, dispatch)
    }
}

pub(crate) fn submit(
    svc: &ReplayService,
    agent: &dyn Agent,
    memory: &dyn Snapshotter,
    mut dispatch: Dispatch,
) -> Result<DispatchReport, BackendError> {
    // Fast path: the service is off and no window is open. The acquire pairs with `stop`'s
    // release, so a submission that sees the service stopped also sees the window counted
    // before it (and takes the reader side below).
    let active = svc.active.load(Ordering::Acquire);
    if !active && svc.windows_open.load(Ordering::Relaxed) == 0 {
        // Counted while it submits (`crate::locks`), kernels as copies, barriers and batches,
        // so a window that starts meanwhile waits for it; when one just opened, the slow path
        // below takes the reader side.
        if let Ok(_unlocked) = svc.write_gate(agent.id()) {
            agent.submit_ordinary(&dispatch)?;
            return Ok(DispatchReport::done(None));
        }
    }
    let gate = svc.gates.get(agent.id());

    // Step 3 first for every submission: tool work skips the lock so nothing deadlocks.
    let tool_work = thread_in_callback()
        || match dispatch.origin {
            Origin::ForwardedToolWork => true,
            Origin::RuntimeThread => gate.in_callback(),
            Origin::SubmittingThread | Origin::ForwardedApplication => false,
        };
    if tool_work {
        dispatch.info.dispatch_id = reserve(svc);
        let mut rec = OutcomeRecord::new(
            dispatch.info.dispatch_id,
            dispatch.info.agent,
            &dispatch.info.kernel_name,
        );
        rec.outcome = Outcome::Declined;
        rec.reason = Reason::ReentrantDispatch;
        rec.reentrancy = 1;
        rec.executed_passes = 1;
        rec.graph = agent.graph_node();
        agent.submit_ordinary(&dispatch)?;
        svc.emit(&rec, 0.0, 0);
        return Ok(DispatchReport::done(Some(rec)));
    }

    // Stopped while a window is open somewhere: nothing is a candidate, everything waits for
    // the reader side (a stopped service does not open a gate a window holds).
    if !active {
        return ordinary(&gate, agent, &dispatch);
    }

    // Step 1: the gate.
    if dispatch.kind != SubmissionKind::KernelDispatch {
        let bit = 1u32 << (dispatch.kind as u32);
        if svc.warned_kinds.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            log::warn!(
                "[kernel-replay] {} submissions are not replayed; they run once, unchanged",
                dispatch.kind.as_str()
            );
        }
        return ordinary(&gate, agent, &dispatch);
    }
    let Some(owner) = svc.owner.read().clone().filter(|r| {
        r.subscription
            .contains(crate::contract::Subscription::CONFIG)
    }) else {
        return ordinary(&gate, agent, &dispatch);
    };
    let policy = svc.policy();
    // A forwarded candidate takes the writer lock now, without waiting, so the runtime thread
    // never blocks behind a window (it then holds the lock through CONFIG as well). It counts
    // as an open window from here, before the lock, as in `Window::run`.
    let early = if dispatch.origin.is_forwarded() {
        let open = WindowOpen::enter(&svc.windows_open);
        match gate.lock.try_write() {
            Some(g) => Some((g, open)),
            None => return Ok(DispatchReport::deferred()),
        }
    } else {
        None
    };
    // The dispatch id is reserved before CONFIG (and before the filter's range check).
    dispatch.info.dispatch_id = reserve(svc);
    // A communication kernel would spin in every later pass on peers that do not repeat
    // theirs (SPEC §9.2): it is no candidate, whatever the tool asks.
    let communication = policy.filter.is_communication(&dispatch.info.kernel_name)
        || svc
            .communication_code
            .contains_key(&(dispatch.kernel.agent, dispatch.kernel.code_object));
    if communication {
        svc.communication_runs.fetch_add(1, Ordering::Relaxed);
    }
    if communication || !policy.filter.admit(&dispatch.info, &svc.filter_state) {
        return match early {
            Some(_held) => agent
                .submit_ordinary(&dispatch)
                .map(|()| DispatchReport::done(None)),
            None => ordinary(&gate, agent, &dispatch),
        };
    }

    let mut w = Window {
        svc,
        agent,
        memory,
        gate: &gate,
        owner: &owner,
        policy: std::sync::Arc::clone(&policy),
        dispatch: &dispatch,
        seq: 0,
        record: OutcomeRecord::new(
            dispatch.info.dispatch_id,
            dispatch.info.agent,
            &dispatch.info.kernel_name,
        ),
        early: early.is_some(),
        context_lost: false,
        scope_regions: Vec::new(),
        pending_capture: None,
        timer: None,
        current: Ph::Drain,
        config_enter: 0.0,
    };
    // What the policy says until the window resolves `auto` (before planning).
    w.record.scope = policy.scope;
    w.record.restore = policy.restore;
    w.record.outside_check = policy.outside_check;
    w.record.graph = agent.graph_node();
    let rec = w.run(early)?;
    Ok(DispatchReport::done(Some(rec)))
}

/// `policy` with `auto` resolved for this agent and dispatch ([`crate::policy::resolve`]), so
/// the memory layer only ever sees what runs; the record says what `auto` chose.
fn resolve_auto(
    policy: &std::sync::Arc<Policy>,
    agent: &dyn Agent,
    dispatch: &Dispatch,
    record: &mut OutcomeRecord,
) -> Option<std::sync::Arc<Policy>> {
    if policy.scope != Scope::Auto && policy.restore != RestoreMode::Auto {
        return None;
    }
    let r = resolve(
        policy.scope,
        policy.restore,
        agent.capabilities(),
        dispatch.arg_layout,
    );
    record.scope = r.scope;
    record.restore = r.restore;
    record.scope_auto = r.scope_auto;
    record.restore_auto = r.restore_auto;
    let mut p = Policy::clone(policy);
    p.scope = r.scope;
    p.restore = r.restore;
    Some(std::sync::Arc::new(p))
}

/// Real time a window lets an ungated write finish per poll before its clock moves.
const UNGATED_SPIN: std::time::Duration = std::time::Duration::from_millis(1);

fn reserve(svc: &ReplayService) -> DispatchId {
    DispatchId(svc.next_dispatch.fetch_add(1, Ordering::Relaxed))
}

/// An ordinary submission: the reader lock across the submission only. A forwarded one never
/// waits for it: inside a window it is deferred.
fn ordinary(
    gate: &AgentGate,
    agent: &dyn Agent,
    dispatch: &Dispatch,
) -> Result<DispatchReport, BackendError> {
    let _reader = if dispatch.origin.is_forwarded() {
        match gate.lock.try_read() {
            Some(r) => r,
            None => return Ok(DispatchReport::deferred()),
        }
    } else {
        gate.lock.read()
    };
    agent.submit_ordinary(dispatch)?;
    Ok(DispatchReport::done(None))
}

/// Brackets a pass loop for the context layer (SPEC §5).
struct LoopScope<'a>(&'a dyn crate::contract::ContextControl);

impl<'a> LoopScope<'a> {
    fn begin(c: &'a dyn crate::contract::ContextControl) -> Self {
        c.loop_begin();
        Self(c)
    }
}

impl Drop for LoopScope<'_> {
    fn drop(&mut self) {
        self.0.loop_end();
    }
}

/// How the loop ended.
enum LoopEnd {
    /// Ran as planned (or the tool stopped it).
    Complete,
    /// Stopped early, safely.
    Truncated(Reason),
    /// Nothing ran yet: decline and run the dispatch once.
    Decline(Reason),
    /// The application's completion was already delivered by an ordinary run.
    TruncatedDelivered(Reason),
}

struct Window<'a> {
    svc: &'a ReplayService,
    agent: &'a dyn Agent,
    memory: &'a dyn Snapshotter,
    gate: &'a AgentGate,
    owner: &'a Registration,
    /// The service's policy; from planning on, with `auto` resolved.
    policy: std::sync::Arc<Policy>,
    dispatch: &'a Dispatch,
    /// The sequence `user_data` (SPEC §3).
    seq: UserData,
    record: OutcomeRecord,
    /// The writer lock was taken before CONFIG (a forwarded submission); the read-locked
    /// paths must not lock again.
    early: bool,
    /// The backend reported the context lost (a sticky error): restores are skipped, not
    /// aborted on.
    context_lost: bool,
    /// The regions the snapshot plan names: what a capture reads (SPEC §13).
    scope_regions: Vec<crate::backend::RegionRef>,
    /// A capture asked for in this pass's PASS ENTER, its inputs read.
    pending_capture: Option<PendingCapture>,
    /// The window's phases, from the writer lock on (`crate::phases`).
    timer: Option<PhaseTimer>,
    /// The phase in progress.
    current: Ph,
    /// Seconds of CONFIG ENTER and the pass-count callback, before the lock.
    config_enter: f64,
}

/// A capture whose inputs were read when its pass began; its outputs are read after the pass.
struct PendingCapture {
    sink: CaptureSink,
    capture: Capture,
}

impl Window<'_> {
    fn info(&self) -> &crate::types::DispatchInfo {
        &self.dispatch.info
    }

    /// Ends the phase in progress and starts `next`; returns how long the ended one took.
    fn phase(&mut self, next: Ph) -> std::time::Duration {
        let d = match &mut self.timer {
            Some(t) => t.lap(self.svc.clock.now(), self.current),
            None => std::time::Duration::ZERO,
        };
        self.current = next;
        d
    }

    /// Ends the phase in progress and writes the phases so far into the record.
    fn stamp_phases(&mut self) {
        let cur = self.current;
        self.phase(cur);
        if let Some(t) = &self.timer {
            self.record.phases = t.seconds(self.config_enter);
        } else {
            self.record.phases.config_enter = self.config_enter;
        }
    }

    /// Calls the tool with the markers set; `Err(())` when it panicked.
    fn call(
        &self,
        op: Operation,
        phase: Phase,
        payload: &mut ReplayPayload<'_>,
        user_data: &mut UserData,
    ) -> Result<(), ()> {
        if op == Operation::Pass
            && !self
                .owner
                .subscription
                .contains(crate::contract::Subscription::PASS)
        {
            return Ok(());
        }
        let _scope = CallbackScope::enter(self.gate);
        let tool = &self.owner.tool;
        catch_unwind(AssertUnwindSafe(|| {
            tool.callback(op, phase, payload, user_data)
        }))
        .map_err(|_| {
            log::error!(
                "[kernel-replay] dispatch {}: the tool's {op:?} {phase:?} callback panicked",
                self.record.dispatch_id
            );
        })
    }

    fn payload(&self, pass: u32, total: u32) -> ReplayPayload<'_> {
        ReplayPayload {
            dispatch_info: self.info(),
            current_pass: pass,
            total_passes: total,
            replay_pass_count: None,
            replay_continue: None,
            contexts: &*self.svc.contexts,
            outcome: None,
            memory_sync: None,
            capture: None,
        }
    }

    fn wait_spec(&self) -> WaitSpec<'_> {
        WaitSpec {
            clock: &*self.svc.clock,
            timeout: self.policy.drain_timeout,
            slice: self.policy.poll_slice,
            progress: self.policy.progress_interval,
        }
    }

    fn bounds(&self, timeout: std::time::Duration) -> Bounds {
        Bounds {
            timeout,
            slice: self.policy.poll_slice,
            progress: self.policy.progress_interval,
        }
    }

    fn run(
        &mut self,
        early: Option<(parking_lot::RwLockWriteGuard<'_, ()>, WindowOpen<'_>)>,
    ) -> Result<OutcomeRecord, BackendError> {
        // Step 2: CONFIG ENTER, then the pass-count callback, then the plan.
        let config_at = self.svc.clock.now();
        let mut seq: UserData = 0;
        let (pass_count_fn, continue_fn, entered) = {
            let mut p = self.payload(0, 0);
            let ok = self
                .call(Operation::Config, Phase::Enter, &mut p, &mut seq)
                .is_ok();
            self.refuse_misplaced(p.capture.take());
            (p.replay_pass_count.take(), p.replay_continue.take(), ok)
        };
        self.seq = seq;
        if !entered {
            return self.run_once(Outcome::Declined, Reason::CallbackFailed);
        }
        let count = match pass_count_fn.as_ref().map(|f| self.ask_pass_count(f)) {
            None => None,
            Some(Ok(n)) => Some(n),
            Some(Err(())) => return self.run_once(Outcome::Declined, Reason::CallbackFailed),
        };
        let plan = PassPlan::new(count, continue_fn.is_some(), self.policy.max_passes);
        self.config_enter = self.svc.clock.now().saturating_sub(config_at).as_secs_f64();
        self.record.requested_passes = plan.requested();
        if let PassPlan::NoReplay {
            zero_without_continue,
        } = plan
        {
            if zero_without_continue && !self.svc.warned_zero.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "[kernel-replay] a pass count of 0 needs a continue callback; not replaying"
                );
            }
            return self.run_once(Outcome::NotRequested, Reason::None);
        }
        if let PassPlan::Fixed {
            requested, total, ..
        } = plan
        {
            if u64::from(total) < requested {
                log::warn!(
                    "[kernel-replay] dispatch {}: {requested} passes requested, clamped to max_passes={total}",
                    self.record.dispatch_id
                );
            }
        }

        // Step 4: the writer lock, for the whole window.
        let gate = self.gate;
        // Counted before the lock is taken, so a writer that sees no open window and no active
        // service cannot slip in between (it would then wait on the lock like any reader).
        let (_writer, _open) = match early {
            Some(held) => held,
            None => {
                let open = WindowOpen::enter(&self.svc.windows_open);
                (gate.lock.write(), open)
            }
        };
        let locked_at = self.svc.clock.now();
        self.timer = Some(PhaseTimer::new(locked_at));
        self.current = Ph::Drain;
        // Gated writes that checked before the window was counted took no lock: let them finish
        // their submission, so the drains below see their work.
        if let Err(e) = self.wait_ungated_writes() {
            log::warn!("[kernel-replay] dispatch {}: {e}", self.record.dispatch_id);
            return self.decline_locked(Reason::AgentDrainStuck, locked_at);
        }

        // `auto` resolved for this agent and dispatch, before anything below reads the policy.
        self.phase(Ph::Plan);
        if let Some(p) = resolve_auto(&self.policy, self.agent, self.dispatch, &mut self.record) {
            self.policy = p;
        }

        // Remembered kernels.
        let memo = self.svc.kernel_memo(&self.dispatch.kernel);
        if memo == Some(KernelMemo::NoReplay) {
            return self.decline_locked(Reason::PassDrainStuck, locked_at);
        }
        let scope = if memo == Some(KernelMemo::ForceScopeAll) {
            Scope::All
        } else {
            self.policy.scope
        };
        self.record.scope = scope;

        // Step 5: admission.
        let snap_plan = match self.memory.plan(self.dispatch, scope, &self.policy) {
            Ok(p) => p,
            Err(e) => {
                log::warn!(
                    "[kernel-replay] dispatch {}: planning failed: {e}",
                    self.record.dispatch_id
                );
                return self.decline_locked(Reason::SnapshotFailed, locked_at);
            }
        };
        self.record.scope = snap_plan.scope;
        self.record.predicted_bytes = snap_plan.predicted_bytes;
        self.record.predict_source = snap_plan.predict_source;
        self.record.predict_fallback = snap_plan.predict_fallback;
        self.record.tracked_bytes = snap_plan.tracked_bytes;
        self.record.untracked_bytes = snap_plan.untracked.bytes + snap_plan.untracked.vmem_bytes;
        self.record.untracked_regions =
            snap_plan.untracked.regions + snap_plan.untracked.vmem_regions;
        if let Some(why) = &snap_plan.unseen_writes {
            log::warn!(
                "[kernel-replay] dispatch {}: {why}",
                self.record.dispatch_id
            );
            return self.decline_locked(Reason::UnseenWrites, locked_at);
        }
        if let Some(why) = &snap_plan.uncapturable {
            log::warn!(
                "[kernel-replay] dispatch {}: {why}",
                self.record.dispatch_id
            );
            return self.decline_locked(Reason::UntrackedMemory, locked_at);
        }
        if (snap_plan.untracked.vmem_regions > 0 && self.policy.decline_on_vmem)
            || (snap_plan.untracked.regions > 0 && self.policy.decline_on_untracked)
        {
            return self.decline_locked(Reason::UntrackedMemory, locked_at);
        }
        let bound = self.policy.snapshot_bound(snap_plan.capacity_bytes);
        if snap_plan.captured_bytes > bound.min(snap_plan.capacity_bytes) {
            log::warn!(
                "[kernel-replay] dispatch {}: snapshot of {} bytes exceeds the budget of {} bytes",
                self.record.dispatch_id,
                snap_plan.captured_bytes,
                bound.min(snap_plan.capacity_bytes)
            );
            return self.decline_locked(Reason::FootprintBudget, locked_at);
        }
        let projected = snap_plan.captured_bytes as f64 / (self.policy.assumed_gbps * 1e9);
        if projected > self.policy.warn_seconds {
            log::warn!(
                "[kernel-replay] dispatch {}: snapshot of {} bytes projected to take {projected:.1} s",
                self.record.dispatch_id,
                snap_plan.captured_bytes
            );
        }

        // Step 6: the three drains.
        self.phase(Ph::Drain);
        for (target, reason) in [
            (
                DrainTarget::Queue(self.info().queue),
                Reason::QueueDrainStuck,
            ),
            (DrainTarget::Agent, Reason::AgentDrainStuck),
            (DrainTarget::CopyFence, Reason::CopyFenceStuck),
        ] {
            if let Err(e) = self.drain(target) {
                log::warn!("[kernel-replay] dispatch {}: {e}", self.record.dispatch_id);
                // A timeout is the target's `*_stuck`; a poll error is not.
                let reason = match &e {
                    WaitError::Backend(b) if b.kind == BackendErrorKind::Busy => Reason::AgentBusy,
                    WaitError::Backend(b) if b.kind == BackendErrorKind::DeviceLost => {
                        self.context_lost = true;
                        Reason::DeviceError
                    }
                    _ => reason,
                };
                return self.decline_locked(reason, locked_at);
            }
        }

        // Step 7: the snapshot.
        self.phase(Ph::Capture);
        let mut snapshot = match self
            .memory
            .capture(&snap_plan, &self.policy, &self.wait_spec())
        {
            Ok(s) => s,
            Err(e) => {
                log::warn!("[kernel-replay] dispatch {}: {e}", self.record.dispatch_id);
                return self.decline_locked(Reason::SnapshotFailed, locked_at);
            }
        };
        self.scope_regions = snap_plan.regions.to_vec();
        let stats = snapshot.stats();
        self.record.captured_bytes = stats.captured_bytes;
        self.record.captured_regions = stats.captured_regions;
        self.record.tier_bytes = stats.tier_bytes;
        self.record.snap_seconds = stats.seconds;

        // Step 8: the pass loop.
        let end = {
            // Local overrides vanish with the loop, even if a backend call panics inside it.
            let _loop = LoopScope::begin(&*self.svc.contexts);
            self.pass_loop(&plan, continue_fn, &mut *snapshot)
        };
        // Releasing the snapshot returns its backing to the pools.
        self.phase(Ph::Finish);
        drop(snapshot);

        // Step 9: finish.
        match end {
            LoopEnd::Decline(reason) => self.decline_locked(reason, locked_at),
            LoopEnd::Complete => self.finish(Outcome::Replayed, Reason::None, true, locked_at),
            LoopEnd::Truncated(r) => self.finish(Outcome::Truncated, r, true, locked_at),
            LoopEnd::TruncatedDelivered(r) => self.finish(Outcome::Truncated, r, false, locked_at),
        }
    }

    fn ask_pass_count(&self, f: &PassCountFn) -> Result<u64, ()> {
        let _scope = CallbackScope::enter(self.gate);
        let seq = self.seq;
        let info = self.info();
        catch_unwind(AssertUnwindSafe(|| f(info, seq))).map_err(|_| {
            log::error!(
                "[kernel-replay] dispatch {}: the pass-count callback panicked",
                self.record.dispatch_id
            );
        })
    }

    /// Asks the continue callback; `Err` when it panicked or returned a negative value.
    fn ask_continue(
        &self,
        f: &ContinueFn,
        pass: u32,
        total: u32,
        ud: UserData,
    ) -> Result<bool, ()> {
        let _scope = CallbackScope::enter(self.gate);
        let info = self.info();
        match catch_unwind(AssertUnwindSafe(|| f(info, pass, total, ud))) {
            Ok(v) if v >= 0 => Ok(v > 0),
            Ok(v) => {
                log::error!(
                    "[kernel-replay] dispatch {}: the continue callback returned {v}; 0 stops, positive continues",
                    self.record.dispatch_id
                );
                Err(())
            }
            Err(_) => {
                log::error!(
                    "[kernel-replay] dispatch {}: the continue callback panicked",
                    self.record.dispatch_id
                );
                Err(())
            }
        }
    }

    /// Waits, bounded, until no gated write without a lock is in progress on the agent.
    fn wait_ungated_writes(&self) -> Result<(), WaitError> {
        if self.gate.ungated_writes() == 0 {
            return Ok(());
        }
        bounded(
            &*self.svc.clock,
            self.bounds(self.policy.drain_timeout),
            "writes begun before the window",
            |budget| {
                // Such a write holds its count across its own submission only: give it a moment
                // of real time before the clock moves, so a virtual clock does not run out the
                // bound while the writer's thread merely waits for a core.
                let until = std::time::Instant::now() + budget.min(UNGATED_SPIN);
                loop {
                    if self.gate.ungated_writes() == 0 {
                        return Ok(Some(()));
                    }
                    if std::time::Instant::now() >= until {
                        return Ok(None);
                    }
                    std::thread::yield_now();
                }
            },
        )
    }

    fn drain(&self, target: DrainTarget) -> Result<(), WaitError> {
        let ticket = self.agent.begin_drain(target)?;
        let r = bounded(
            &*self.svc.clock,
            self.bounds(self.policy.drain_timeout),
            target.as_str(),
            |budget| {
                self.agent
                    .poll_drain(ticket, budget)
                    .map(|done| done.then_some(()))
            },
        );
        if r.is_err() {
            self.agent.abandon(ticket);
        }
        r
    }

    fn config_exit(&mut self) {
        let mut seq = self.seq;
        let rec = self.record.clone();
        let mut p = self.payload(0, 0);
        p.outcome = Some(&rec);
        let r = self.call(Operation::Config, Phase::Exit, &mut p, &mut seq);
        let misplaced = p.capture.take();
        drop(p);
        self.refuse_misplaced(misplaced);
        if r.is_err() {
            log::error!(
                "[kernel-replay] dispatch {}: CONFIG EXIT panicked; the outcome stands",
                self.record.dispatch_id
            );
        }
    }

    /// No window: the tool asked for no replay (`NotRequested`), or a CONFIG-time callback
    /// failed (`Declined`). CONFIG EXIT, then the ordinary run under the reader lock.
    fn run_once(
        &mut self,
        outcome: Outcome,
        reason: Reason,
    ) -> Result<OutcomeRecord, BackendError> {
        self.record.outcome = outcome;
        self.record.reason = reason;
        self.record.executed_passes = 1;
        self.config_exit();
        // Under the reader lock, or under the writer lock a forwarded submission already holds.
        let _reader = (!self.early).then(|| self.gate.lock.read());
        self.agent.submit_ordinary(self.dispatch)?;
        self.record.phases.config_enter = self.config_enter;
        self.svc.emit(&self.record, 0.0, 0);
        Ok(self.record.clone())
    }

    /// A decline under the writer lock: CONFIG EXIT, then the dispatch runs once, unchanged.
    fn decline_locked(
        &mut self,
        reason: Reason,
        locked_at: std::time::Duration,
    ) -> Result<OutcomeRecord, BackendError> {
        self.record.outcome = Outcome::Declined;
        self.record.reason = reason;
        self.record.executed_passes = 1;
        self.record.pass_gpu_seconds.clear();
        self.record.pass_restored_bytes.clear();
        self.record.pass_compared_bytes.clear();
        self.record.pass_launch_seconds.clear();
        self.record.pass_wait_seconds.clear();
        self.phase(Ph::Callbacks);
        self.stamp_phases();
        self.config_exit();
        self.phase(Ph::Finish);
        let r = self.agent.submit_ordinary(self.dispatch);
        self.emit_window(locked_at);
        r.map(|()| self.record.clone())
    }

    fn finish(
        &mut self,
        outcome: Outcome,
        reason: Reason,
        signal: bool,
        locked_at: std::time::Duration,
    ) -> Result<OutcomeRecord, BackendError> {
        self.record.outcome = outcome;
        self.record.reason = reason;
        self.phase(Ph::Callbacks);
        self.stamp_phases();
        self.config_exit();
        self.phase(Ph::Finish);
        if signal {
            if let Err(e) = self.agent.signal_completion(self.dispatch) {
                log::error!(
                    "[kernel-replay] dispatch {}: signalling the application's completion failed: {e}",
                    self.record.dispatch_id
                );
            }
        }
        self.emit_window(locked_at);
        Ok(self.record.clone())
    }

    /// Ends the window's last phase and emits the record with the whole window's phases; the
    /// summary's `replay_seconds` gets the same window.
    fn emit_window(&mut self, locked_at: std::time::Duration) {
        self.stamp_phases();
        let secs = match &self.timer {
            Some(_) => self.record.phases.window,
            None => (self.svc.clock.now().saturating_sub(locked_at)).as_secs_f64(),
        };
        self.svc
            .emit(&self.record, secs, self.memory.pooled_peak_bytes());
    }
}

// The traits the window drives are object-safe: backends are chosen at run time.
const _: fn(&dyn Agent, &dyn Snapshotter, Box<dyn Snapshot>) = |_, _, _| {};
