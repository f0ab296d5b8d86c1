//! The tool-facing contract (SPEC §3): operations and phases, the payload, the pass-count and
//! continue callbacks, `user_data`, and the context toggles a tool may call in PASS ENTER.
//!
//! `user_data` threading: the value the tool leaves in CONFIG ENTER is the *sequence value*. It
//! is passed to the pass-count callback, to every PASS ENTER and to CONFIG EXIT. Each pass works
//! on its own copy: what PASS ENTER writes is seen by that pass's EXIT and by the continue
//! callback called after it; the next pass starts again from the sequence value.

use std::fmt;
use std::sync::Arc;

use bitflags::bitflags;

use crate::capture::CaptureRequest;
use crate::error::{BackendError, ContextError};
use crate::outcome::OutcomeRecord;
use crate::types::{ContextId, DispatchInfo};

/// The two replay operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Operation {
    /// Once per candidate dispatch.
    Config = 1,
    /// Once per executed pass.
    Pass = 2,
}

/// Enter or exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Phase {
    /// Before.
    Enter = 0,
    /// After.
    Exit = 1,
}

/// The tool's per-dispatch value (a number or a pointer cast to one).
pub type UserData = u64;

/// Asked once after CONFIG ENTER: how many passes (SPEC §4).
pub type PassCountFn = Arc<dyn Fn(&DispatchInfo, UserData) -> u64 + Send + Sync>;

/// Asked after a pass: `(info, current_pass, total_passes, user_data)`. Returns 0 to stop, a
/// positive value to go on; a negative value breaks the contract (`callback_failed`).
pub type ContinueFn = Arc<dyn Fn(&DispatchInfo, u32, u32, UserData) -> i32 + Send + Sync>;

bitflags! {
    /// Operations a context subscribes to.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Subscription: u32 {
        /// CONFIG enter/exit (needed to start replay).
        const CONFIG = 1 << 0;
        /// PASS enter/exit.
        const PASS = 1 << 1;
    }
}

/// The per-loop context toggles (SPEC §5); `replay-context` implements them.
pub trait ContextControl: Send + Sync {
    /// `replay_start_context`.
    fn start(&self, ctx: ContextId) -> Result<(), ContextError>;
    /// `replay_stop_context`.
    fn stop(&self, ctx: ContextId) -> Result<(), ContextError>;
    /// The window begins a replay loop on this thread.
    fn loop_begin(&self);
    /// PASS ENTER callbacks begin (toggles allowed until `pass_enter_end`).
    fn pass_enter_begin(&self);
    /// PASS ENTER callbacks ended.
    fn pass_enter_end(&self);
    /// The loop ended: local overrides vanish.
    fn loop_end(&self);
    /// The local override of `ctx` on this thread, `None` = use the global state.
    fn override_for(&self, ctx: ContextId) -> Option<bool> {
        let _ = ctx;
        None
    }
    /// Whether any local override exists on this thread (the zero-cost fast path).
    fn has_overrides(&self) -> bool {
        false
    }
}

/// Context control for embeddings without `replay-context`: every toggle is refused.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoContextControl;

impl ContextControl for NoContextControl {
    fn start(&self, ctx: ContextId) -> Result<(), ContextError> {
        Err(ContextError::UnknownContext(ctx))
    }
    fn stop(&self, ctx: ContextId) -> Result<(), ContextError> {
        Err(ContextError::UnknownContext(ctx))
    }
    fn loop_begin(&self) {}
    fn pass_enter_begin(&self) {}
    fn pass_enter_end(&self) {}
    fn loop_end(&self) {}
}

/// Waits until the restore ordered on the device before this pass is done there (SPEC §6
/// step 8); the window offers it in PASS ENTER ([`ReplayPayload::sync_memory`]).
pub trait MemorySync: Send + Sync {
    /// Waits, bounded by the policy's drain timeout.
    fn sync(&self) -> Result<(), BackendError>;
}

/// What a callback sees (SPEC §3). The C ABI maps it field by field onto its versioned struct
/// (`memory_sync` is `kreplay_pass_sync` there).
pub struct ReplayPayload<'a> {
    /// The dispatch.
    pub dispatch_info: &'a DispatchInfo,
    /// 0-based pass index (0 in CONFIG).
    pub current_pass: u32,
    /// N for a fixed loop after clamping, 0 for an open-ended loop (0 in CONFIG).
    pub total_passes: u32,
    /// Written by the tool in CONFIG ENTER; `None` in PASS.
    pub replay_pass_count: Option<PassCountFn>,
    /// Written by the tool in CONFIG ENTER; in PASS EXIT shows the callback in effect, and the
    /// tool may replace it for this pass only.
    pub replay_continue: Option<ContinueFn>,
    /// `replay_start_context` / `replay_stop_context`; usable only in PASS ENTER.
    pub contexts: &'a dyn ContextControl,
    /// The outcome, in CONFIG EXIT only.
    pub outcome: Option<&'a OutcomeRecord>,
    /// In PASS ENTER: the wait for a restore ordered on the device ([`Self::sync_memory`]).
    pub memory_sync: Option<&'a dyn MemorySync>,
    /// Set by the tool in PASS ENTER ([`Self::request_capture`]): capture this pass to its
    /// sink (SPEC §13). Set elsewhere, its sink hears [`crate::CaptureRefused::NotInPassEnter`].
    pub capture: Option<CaptureRequest>,
}

impl fmt::Debug for ReplayPayload<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayPayload")
            .field("dispatch_info", &self.dispatch_info)
            .field("current_pass", &self.current_pass)
            .field("total_passes", &self.total_passes)
            .field("replay_pass_count", &self.replay_pass_count.is_some())
            .field("replay_continue", &self.replay_continue.is_some())
            .field("outcome", &self.outcome)
            .field("memory_sync", &self.memory_sync.is_some())
            .field("capture", &self.capture)
            .finish()
    }
}

impl ReplayPayload<'_> {
    /// `replay_start_context`.
    pub fn replay_start_context(&self, ctx: ContextId) -> Result<(), ContextError> {
        self.contexts.start(ctx)
    }
    /// `replay_stop_context`.
    pub fn replay_stop_context(&self, ctx: ContextId) -> Result<(), ContextError> {
        self.contexts.stop(ctx)
    }

    /// In PASS ENTER: asks for a capture of this dispatch (SPEC §13): the inputs of every
    /// region of the snapshot scope as this pass begins, and the outputs after it, delivered to
    /// the request's sink after the pass ([`crate::capture`]). The pass runs as it would;
    /// nothing is executed for the capture. A later request in the same callback replaces an
    /// earlier one.
    pub fn request_capture(&mut self, request: CaptureRequest) {
        self.capture = Some(request);
    }

    /// In PASS ENTER, before reading device memory by the tool's own means (its own stream, a
    /// host mapping): waits until the restore before this pass is done on the device. Where
    /// the backend orders restores on the device ([`crate::Capabilities::ORDERED_RESTORE`])
    /// the restore may still run when PASS ENTER is called; the pass itself, the cache flush
    /// and the library's own memory reads and digests are ordered after it without this
    /// call. Elsewhere (and outside PASS ENTER) it returns at once.
    pub fn sync_memory(&self) -> Result<(), BackendError> {
        self.memory_sync.map_or(Ok(()), |s| s.sync())
    }
}

/// A tool's replay callback. A panic inside it ends the dispatch safely (`callback_failed`).
pub trait ReplayTool: Send + Sync {
    /// Called for each operation and phase the tool subscribed to.
    fn callback(
        &self,
        operation: Operation,
        phase: Phase,
        payload: &mut ReplayPayload<'_>,
        user_data: &mut UserData,
    );
}

impl<F> ReplayTool for F
where
    F: Fn(Operation, Phase, &mut ReplayPayload<'_>, &mut UserData) + Send + Sync,
{
    fn callback(
        &self,
        operation: Operation,
        phase: Phase,
        payload: &mut ReplayPayload<'_>,
        user_data: &mut UserData,
    ) {
        self(operation, phase, payload, user_data)
    }
}
