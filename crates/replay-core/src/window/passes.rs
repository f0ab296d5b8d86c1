//! The window's pass loop (SPEC §6 step 8): PASS ENTER, the pass submitted and waited for,
//! PASS EXIT, the scope check, the continue decision and the restore before the next pass; a
//! restore ordered on the device completed after the pass that waited for it; and the ways out
//! (stuck, refused or failed passes, a silent last pass, the ordinary run after a restore, the
//! abort when memory cannot be repaired).

use super::pass_capture::deliver_capture;
use super::{LoopEnd, Window};
use crate::backend::{Capabilities, ScopeCheck, Snapshot, Snapshotter, WaitSpec};
use crate::capture::CaptureRefused;
use crate::contract::{ContinueFn, MemorySync, Operation, Phase};
use crate::error::{BackendError, BackendErrorKind};
use crate::outcome::Reason;
use crate::phases::Phase as Ph;
use crate::plan::{PassPlan, Step};
use crate::policy::{CacheControl, Scope};
use crate::service::KernelMemo;
use crate::types::Dispatch;
use crate::wait::{bounded, WaitError};

/// What became of one pass.
enum PassRun {
    /// It completed.
    Completed,
    /// It did not complete in time (abandoned).
    Stuck,
    /// The backend refused it: it does not run.
    Refused(BackendError),
    /// The submission failed after it reached the device: it may run, and is counted.
    Launched,
    /// The wait for it, or the restore ordered before it, reported an error (not a timeout):
    /// it is counted as executed, and nothing follows it.
    Failed(BackendError),
}

impl Window<'_> {
    /// Runs one pass and waits for it; a restore ordered on the device ahead of it is
    /// completed as soon as the wait returned (its hold against frees ends there).
    fn run_pass(&mut self, pass: u32, snapshot: &mut dyn Snapshot) -> PassRun {
        self.phase(Ph::Launch);
        if self.policy.cache_control == CacheControl::Flush {
            if let Err(e) = self.agent.flush_caches() {
                log::warn!("[kernel-replay] cache flush before pass {pass} failed: {e}");
            }
        }
        let ticket = match self.agent.submit_pass(self.dispatch, pass) {
            Ok(t) => t,
            Err(e) if e.kind == BackendErrorKind::AfterSubmit => {
                // It may be running: counted, never submitted again, nothing to wait on.
                log::warn!(
                    "[kernel-replay] dispatch {}: pass {pass} reached the device and then failed ({e}); it may run, so the dispatch is not submitted again",
                    self.record.dispatch_id
                );
                self.record.executed_passes += 1;
                let launch = self.phase(Ph::Callbacks);
                self.record.pass_launch_seconds.push(launch.as_secs_f64());
                return PassRun::Launched;
            }
            Err(e) => return PassRun::Refused(e),
        };
        let launch = self.phase(Ph::Wait);
        self.record.pass_launch_seconds.push(launch.as_secs_f64());
        let waited = bounded(
            &*self.svc.clock,
            self.bounds(self.policy.pass_timeout),
            "replay pass",
            |budget| self.agent.poll_pass(ticket, budget),
        );
        self.record.executed_passes += 1;
        let wait = self.phase(Ph::Callbacks);
        self.record.pass_wait_seconds.push(wait.as_secs_f64());
        match waited {
            Ok(done) => {
                self.record.pass_gpu_seconds.push(done.gpu_seconds);
                if snapshot.restore_pending() {
                    self.phase(Ph::Restore);
                    // The pass waited for the restore on the device: its fence is done, or the
                    // restore failed and the pass ran on what it left.
                    match snapshot.complete_restore(&self.wait_spec()) {
                        Ok(true) => {}
                        // Another thread's fault (or the driver's teardown) lost the context
                        // while the restore was pending: the pass ran on what it left.
                        Err(e) if e.context_lost() => {
                            self.context_lost = true;
                            self.skip_restore(&e);
                            return PassRun::Failed(BackendError::new(
                                BackendErrorKind::DeviceLost,
                                self.dispatch.info.agent,
                                "restore",
                                e.to_string(),
                            ));
                        }
                        Ok(false) => fatal(&format!(
                            "[kernel-replay] FATAL: dispatch {} (kernel {:?}, agent {}): pass {pass} completed but the restore ordered before it did not; device memory cannot be trusted, aborting",
                            self.dispatch.info.dispatch_id,
                            self.dispatch.info.kernel_name,
                            self.dispatch.info.agent
                        )),
                        Err(e) => abort_restore(self.dispatch, &e),
                    }
                }
                self.phase(Ph::Callbacks);
                PassRun::Completed
            }
            // A poll error is not a stall: the kernel is not remembered as one.
            Err(WaitError::Backend(e)) => {
                self.agent.abandon(ticket);
                PassRun::Failed(e)
            }
            Err(e) => {
                log::warn!(
                    "[kernel-replay] dispatch {}: pass {pass}: {e}",
                    self.record.dispatch_id
                );
                self.agent.abandon(ticket);
                self.svc
                    .memo
                    .insert(self.dispatch.kernel, KernelMemo::NoReplay);
                PassRun::Stuck
            }
        }
    }

    /// The pass loop; a restore still pending when it ends (the next pass was refused,
    /// stuck, or failed after its launch) is completed before the snapshot goes.
    pub(super) fn pass_loop(
        &mut self,
        plan: &PassPlan,
        continue_fn: Option<ContinueFn>,
        snapshot: &mut dyn Snapshot,
    ) -> LoopEnd {
        // Restores ordered on the device ahead of the next pass (SPEC §6 step 8), where the
        // agent orders its work after its memory's fences and the snapshot can leave one
        // pending; otherwise each restore waits on the host, as before.
        let ordered = self
            .agent
            .capabilities()
            .contains(Capabilities::ORDERED_RESTORE)
            && snapshot.order_restores(true);
        let end = self.run_passes(plan, continue_fn, snapshot, ordered);
        if self.pending_capture.is_some() {
            let why = match &end {
                LoopEnd::Truncated(r) | LoopEnd::Decline(r) | LoopEnd::TruncatedDelivered(r) => {
                    r.as_str()
                }
                LoopEnd::Complete => "the loop ended",
            };
            self.capture_finish(Err(CaptureRefused::PassIncomplete(why.to_string())));
        }
        if snapshot.restore_pending() {
            let stuck = matches!(end, LoopEnd::Truncated(Reason::PassDrainStuck));
            self.phase(Ph::Restore);
            self.settle_restore(snapshot, stuck);
        }
        end
    }

    /// Completes a restore the loop left pending. After a stuck pass the restore had that
    /// pass's bound already: it gets one poll slice more, then its fence is abandoned (the
    /// snapshot's blocks leak, as a stuck restore's do). A fence that reports an error aborts.
    fn settle_restore(&mut self, snapshot: &mut dyn Snapshot, after_stuck_pass: bool) {
        let mut wait = self.wait_spec();
        if after_stuck_pass {
            wait.timeout = self.policy.poll_slice;
        }
        match snapshot.complete_restore(&wait) {
            Ok(true) => {}
            Ok(false) => log::warn!(
                "[kernel-replay] dispatch {}: the restore ordered before the last pass did not complete within {:?}; its fence is abandoned",
                self.record.dispatch_id,
                wait.timeout
            ),
            Err(e) if self.context_lost || e.context_lost() => {
                self.context_lost = true;
                self.skip_restore(&e);
            }
            Err(e) => abort_restore(self.dispatch, &e),
        }
    }

    /// The context is lost: what is left of a restore is skipped (nothing can run there any
    /// more, the application's own next call fails as it would without the library).
    fn skip_restore(&self, e: &crate::backend::RestoreError) {
        log::warn!(
            "[kernel-replay] dispatch {} (kernel {:?}): the context is lost ({e}); the restore is skipped and the application gets the driver's error",
            self.record.dispatch_id,
            self.info().kernel_name
        );
    }

    fn run_passes(
        &mut self,
        plan: &PassPlan,
        continue_fn: Option<ContinueFn>,
        snapshot: &mut dyn Snapshot,
        ordered: bool,
    ) -> LoopEnd {
        let total = plan.total_passes();
        let mut pass: u32 = 0;
        // Nothing is restored before the first pass.
        self.record.pass_restored_bytes.push(0);
        self.record.pass_compared_bytes.push(0);
        loop {
            // PASS ENTER on this pass's own copy of the sequence value.
            self.phase(Ph::Callbacks);
            let mut ud = self.seq;
            let entered = {
                let sync = PassSync {
                    memory: self.memory,
                    wait: self.wait_spec(),
                };
                let mut p = self.payload(pass, total);
                p.replay_continue = continue_fn.clone();
                if ordered && pass > 0 {
                    p.memory_sync = Some(&sync);
                }
                self.svc.contexts.pass_enter_begin();
                let r = self.call(Operation::Pass, Phase::Enter, &mut p, &mut ud);
                self.svc.contexts.pass_enter_end();
                let request = p.capture.take();
                drop(p);
                if let Some(request) = request {
                    if r.is_ok() {
                        self.capture_begin(request, pass, ordered);
                    } else {
                        let why = CaptureRefused::PassIncomplete("callback_failed".into());
                        deliver_capture(
                            self.gate,
                            self.record.dispatch_id,
                            &request.sink,
                            Err(why),
                        );
                    }
                }
                r.is_ok()
            };
            if !entered {
                if pass == 0 {
                    return LoopEnd::Decline(Reason::CallbackFailed);
                }
                // Memory was restored for this pass: it must still run once.
                return self.final_silent_pass(pass, Reason::CallbackFailed, snapshot);
            }
            match self.run_pass(pass, snapshot) {
                PassRun::Completed => {}
                PassRun::Stuck => return LoopEnd::Truncated(Reason::PassDrainStuck),
                // Pass 0 too: it is the dispatch's one execution (no ordinary run follows).
                PassRun::Launched => return LoopEnd::Truncated(Reason::SubmitFailed),
                PassRun::Failed(e) => return self.pass_failed(pass, &e),
                PassRun::Refused(e) => {
                    log::warn!(
                        "[kernel-replay] dispatch {}: pass {pass} could not be submitted: {e}",
                        self.record.dispatch_id
                    );
                    if pass == 0 {
                        return LoopEnd::Decline(Reason::SubmitFailed);
                    }
                    return self.ordinary_after_restore(Reason::SubmitFailed);
                }
            }

            // PASS EXIT: shows the continue callback in effect; a replacement is for this pass.
            let mut p = self.payload(pass, total);
            p.replay_continue = continue_fn.clone();
            let exited = self.call(Operation::Pass, Phase::Exit, &mut p, &mut ud);
            let pass_continue = p.replay_continue.take();
            let misplaced = p.capture.take();
            drop(p);
            self.refuse_misplaced(misplaced);
            if exited.is_err() {
                return LoopEnd::Truncated(Reason::CallbackFailed);
            }

            // Scope check (SPEC §7.2); the memory layer takes what a restore would compare in
            // the same batch unless no restore can follow (the last pass).
            self.phase(Ph::Check);
            snapshot.restore_may_follow(plan.after_pass(pass, Some(true)) == Step::Next);
            let checked = snapshot.check_scope(&self.wait_spec());
            self.phase(Ph::Callbacks);
            match &checked {
                Ok(ScopeCheck::Clean) => self.capture_finish(Ok(())),
                Ok(ScopeCheck::Changed { base }) => {
                    self.capture_finish(Err(CaptureRefused::WroteOutsideScope { base: *base }))
                }
                Err(_) => {}
            }
            match checked {
                Ok(ScopeCheck::Clean) => {}
                Ok(ScopeCheck::Changed { base }) if self.record.scope == Scope::Predicted => {
                    // The memory layer grew the kernel's prediction by what changed.
                    self.record.prediction_misses = snapshot.prediction_misses();
                    log::info!(
                        "[kernel-replay] dispatch {}: kernel {:?} wrote {} chunks outside its predicted scope (first in region {base:#x}); its prediction grows",
                        self.record.dispatch_id,
                        self.info().kernel_name,
                        self.record.prediction_misses
                    );
                    return LoopEnd::Truncated(Reason::WriteOutsideScope);
                }
                Ok(ScopeCheck::Changed { base }) => {
                    log::warn!(
                        "[kernel-replay] dispatch {}: kernel {:?} wrote region {base:#x} outside its scope; later dispatches use scope all",
                        self.record.dispatch_id,
                        self.info().kernel_name
                    );
                    self.svc
                        .memo
                        .insert(self.dispatch.kernel, KernelMemo::ForceScopeAll);
                    return LoopEnd::Truncated(Reason::WriteOutsideScope);
                }
                Err(e) if e.kind == BackendErrorKind::DeviceLost => {
                    return self.pass_failed(pass, &e);
                }
                Err(e) => {
                    log::warn!(
                        "[kernel-replay] dispatch {}: scope check failed: {e}",
                        self.record.dispatch_id
                    );
                    return LoopEnd::Truncated(Reason::ScopeCheckFailed);
                }
            }

            // Continue decision.
            let answer = if plan.asks_continue_after(pass) {
                match &pass_continue {
                    Some(f) => match self.ask_continue(f, pass, total, ud) {
                        Ok(a) => Some(a),
                        Err(()) => return LoopEnd::Truncated(Reason::CallbackFailed),
                    },
                    // Removed for this pass: a fixed loop goes on, an open loop stops.
                    None if matches!(plan, PassPlan::OpenEnded { .. }) => Some(false),
                    None => None,
                }
            } else {
                None
            };
            match plan.after_pass(pass, answer) {
                Step::Done => return LoopEnd::Complete,
                Step::PassLimit => return LoopEnd::Truncated(Reason::PassLimit),
                Step::Next => {}
            }

            // Restore before the next pass; a failure here cannot be repaired.
            self.phase(Ph::Restore);
            match snapshot.restore(&self.wait_spec()) {
                Ok(st) => {
                    self.record.compared_bytes += st.compared_bytes;
                    self.record.restored_bytes += st.restored_bytes;
                    self.record.restore_seconds += st.seconds;
                    self.record.pass_restored_bytes.push(st.restored_bytes);
                    self.record.pass_compared_bytes.push(st.compared_bytes);
                }
                Err(e) if e.context_lost() => {
                    self.context_lost = true;
                    self.skip_restore(&e);
                    return LoopEnd::Truncated(Reason::DeviceError);
                }
                Err(e) => abort_restore(self.dispatch, &e),
            }
            pass += 1;
        }
    }

    /// Pass `pass` (or the check after it) reported an error rather than a timeout: the loop
    /// ends `device_error`; a lost context is remembered, so a pending restore is skipped.
    fn pass_failed(&mut self, pass: u32, e: &BackendError) -> LoopEnd {
        if e.kind == BackendErrorKind::DeviceLost {
            self.context_lost = true;
        }
        log::warn!(
            "[kernel-replay] dispatch {}: pass {pass} failed on the device: {e}{}",
            self.record.dispatch_id,
            if self.context_lost {
                "; the context is lost, nothing more is submitted or restored"
            } else {
                ""
            }
        );
        LoopEnd::Truncated(Reason::DeviceError)
    }

    /// Memory was restored for `pass` but the tool cannot take part: run it once more without
    /// callbacks, so memory ends equal to one execution.
    fn final_silent_pass(
        &mut self,
        pass: u32,
        reason: Reason,
        snapshot: &mut dyn Snapshot,
    ) -> LoopEnd {
        match self.run_pass(pass, snapshot) {
            PassRun::Completed | PassRun::Launched => LoopEnd::Truncated(reason),
            PassRun::Stuck => LoopEnd::Truncated(Reason::PassDrainStuck),
            PassRun::Failed(e) => self.pass_failed(pass, &e),
            PassRun::Refused(e) => {
                log::warn!(
                    "[kernel-replay] dispatch {}: pass {pass} could not be submitted: {e}",
                    self.record.dispatch_id
                );
                self.ordinary_after_restore(Reason::SubmitFailed)
            }
        }
    }

    /// Memory holds restored inputs and no pass can be submitted: the ordinary run executes the
    /// dispatch once and delivers its completion. If even that fails, memory cannot be repaired.
    fn ordinary_after_restore(&mut self, reason: Reason) -> LoopEnd {
        match self.agent.submit_ordinary(self.dispatch) {
            Ok(()) => {
                self.record.executed_passes += 1;
                LoopEnd::TruncatedDelivered(reason)
            }
            // It reached the device with its own completion: it consumes the restored memory.
            Err(e) if e.kind == BackendErrorKind::AfterSubmit => {
                log::warn!(
                    "[kernel-replay] dispatch {}: the ordinary run reached the device and then failed ({e}); not submitted again",
                    self.record.dispatch_id
                );
                self.record.executed_passes += 1;
                LoopEnd::TruncatedDelivered(reason)
            }
            // Nothing runs in a lost context: the application's next call gets the error.
            Err(e) if e.kind == BackendErrorKind::DeviceLost => {
                self.context_lost = true;
                log::warn!(
                    "[kernel-replay] dispatch {}: the context is lost ({e}); the dispatch cannot run again",
                    self.record.dispatch_id
                );
                LoopEnd::Truncated(Reason::DeviceError)
            }
            Err(e) => {
                let msg = format!(
                    "[kernel-replay] FATAL: dispatch {} (kernel {:?}, agent {}): memory was restored for another pass, but neither the pass nor the ordinary run could be submitted ({e}); device memory cannot be repaired, aborting",
                    self.dispatch.info.dispatch_id, self.dispatch.info.kernel_name, self.dispatch.info.agent
                );
                fatal(&msg)
            }
        }
    }
}

/// What a PASS ENTER callback waits on before it reads device memory by its own means
/// ([`ReplayPayload::sync_memory`](crate::contract::ReplayPayload::sync_memory)).
struct PassSync<'a> {
    memory: &'a dyn Snapshotter,
    wait: WaitSpec<'a>,
}

impl MemorySync for PassSync<'_> {
    fn sync(&self) -> Result<(), crate::error::BackendError> {
        self.memory.sync_ordered(&self.wait)
    }
}

/// A restore failed between passes: memory cannot be repaired. Logs, prints and aborts.
fn abort_restore(dispatch: &Dispatch, e: &crate::backend::RestoreError) -> ! {
    let msg = format!(
        "[kernel-replay] FATAL: restore failed between passes of dispatch {} (kernel {:?}, agent {}): region {:#x} ({} bytes): {}; device memory cannot be repaired, aborting",
        dispatch.info.dispatch_id,
        dispatch.info.kernel_name,
        dispatch.info.agent,
        e.base,
        e.size,
        e.message
    );
    fatal(&msg)
}

fn fatal(msg: &str) -> ! {
    // Always on stderr; through the facade too unless the facade is that same stderr sink.
    if !crate::log_sink::is_installed() {
        log::error!("{msg}");
    }
    // Not `eprintln!`: a stderr that cannot be written (closed, full) would panic here and
    // unwind past the abort with memory that cannot be repaired.
    {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{msg}");
    }
    std::process::abort()
}
