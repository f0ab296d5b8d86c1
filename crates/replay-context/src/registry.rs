//! The context registry: contexts, their participants, their global active state, and the
//! [`ContextControl`] the replay window drives.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use replay_core::{ContextControl, ContextError, ContextId};
use smallvec::SmallVec;

use crate::error::RegistryError;
use crate::local::{self, Frame};

/// Whether a participant can honour per-loop overrides of its context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OverrideSupport {
    /// Consults [`Contexts::participates`] (or [`Contexts::override_for`]) before each pass.
    Honours,
    /// Cannot switch per pass (e.g. a trace that is configured once per dispatch): a toggle on
    /// its context answers `unsupported`.
    CannotHonour,
}

/// A service that contributes to passes on behalf of a context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// Its name, e.g. "counters", "pc_sampling", "thread_trace".
    pub name: Arc<str>,
    /// Whether it honours local overrides.
    pub support: OverrideSupport,
}

#[derive(Debug, Default)]
struct Entry {
    active: bool,
    participants: SmallVec<[Participant; 4]>,
}

impl Entry {
    fn honours_overrides(&self) -> bool {
        self.participants
            .iter()
            .all(|p| p.support == OverrideSupport::Honours)
    }
}

/// Distinguishes registries in the thread-local frames.
static NEXT_REGISTRY: AtomicU64 = AtomicU64::new(1);

/// The tool's contexts, their participants and global state, and the per-loop, per-thread
/// overrides of SPEC §5. Share it through an `Arc`; hand that `Arc` to
/// [`replay_core::ReplayService::new`] as its context control.
#[derive(Debug)]
pub struct Contexts {
    /// This registry's key in the thread-local frames.
    id: u64,
    /// Next id [`Contexts::create_context`] tries.
    next_ctx: AtomicU64,
    table: RwLock<HashMap<ContextId, Entry>>,
}

impl Default for Contexts {
    fn default() -> Self {
        Self::new()
    }
}

impl Contexts {
    /// An empty registry.
    pub fn new() -> Self {
        Self {
            id: NEXT_REGISTRY.fetch_add(1, Ordering::Relaxed),
            next_ctx: AtomicU64::new(1),
            table: RwLock::new(HashMap::new()),
        }
    }

    // ----- Contexts and participants -------------------------------------------------------

    /// Creates a context with a fresh id (never 0), inactive and without participants.
    pub fn create_context(&self) -> ContextId {
        let mut table = self.table.write();
        loop {
            let ctx = ContextId(self.next_ctx.fetch_add(1, Ordering::Relaxed));
            if ctx.0 != 0 && !table.contains_key(&ctx) {
                table.insert(ctx, Entry::default());
                return ctx;
            }
        }
    }

    /// Registers a context under an id the tool chose, inactive and without participants.
    pub fn register_context(&self, ctx: ContextId) -> Result<(), RegistryError> {
        let mut table = self.table.write();
        if table.contains_key(&ctx) {
            return Err(RegistryError::AlreadyExists(ctx));
        }
        table.insert(ctx, Entry::default());
        Ok(())
    }

    /// Whether `ctx` is registered.
    pub fn contains(&self, ctx: ContextId) -> bool {
        self.table.read().contains_key(&ctx)
    }

    /// Declares a service that contributes to passes on behalf of `ctx`. Declare participants
    /// before replay loops toggle the context: an override set earlier is not withdrawn.
    pub fn declare_participant(
        &self,
        ctx: ContextId,
        name: impl Into<Arc<str>>,
        support: OverrideSupport,
    ) -> Result<(), RegistryError> {
        let name = name.into();
        let mut table = self.table.write();
        let entry = table
            .get_mut(&ctx)
            .ok_or(RegistryError::UnknownContext(ctx))?;
        if entry.participants.iter().any(|p| p.name == name) {
            return Err(RegistryError::DuplicateParticipant { ctx, name });
        }
        entry.participants.push(Participant { name, support });
        Ok(())
    }

    /// The participants of `ctx`, in declaration order.
    pub fn participants(&self, ctx: ContextId) -> Result<Vec<Participant>, RegistryError> {
        self.table
            .read()
            .get(&ctx)
            .map(|e| e.participants.to_vec())
            .ok_or(RegistryError::UnknownContext(ctx))
    }

    /// Whether every participant of `ctx` honours overrides (so toggles on it can succeed).
    pub fn honours_overrides(&self, ctx: ContextId) -> Result<bool, RegistryError> {
        self.table
            .read()
            .get(&ctx)
            .map(Entry::honours_overrides)
            .ok_or(RegistryError::UnknownContext(ctx))
    }

    // ----- Global state ----------------------------------------------------------------------

    /// Starts `ctx` globally (the tool's own start). Loops that began earlier do not see it as
    /// active at their beginning.
    pub fn activate(&self, ctx: ContextId) -> Result<(), RegistryError> {
        self.set_active(ctx, true)
    }

    /// Stops `ctx` globally (the tool's own stop). A local start made earlier in a running loop
    /// stays in force for that loop.
    pub fn deactivate(&self, ctx: ContextId) -> Result<(), RegistryError> {
        self.set_active(ctx, false)
    }

    /// Forgets `ctx` (its handle was destroyed). A loop that began with it active keeps its
    /// snapshot of that fact until the loop ends; toggles on it then answer `UnknownContext`.
    pub fn remove_context(&self, ctx: ContextId) -> Result<(), RegistryError> {
        let mut table = self.table.write();
        table
            .remove(&ctx)
            .map(|_| ())
            .ok_or(RegistryError::UnknownContext(ctx))?;
        table.shrink_to_fit();
        Ok(())
    }

    fn set_active(&self, ctx: ContextId, active: bool) -> Result<(), RegistryError> {
        let mut table = self.table.write();
        let entry = table
            .get_mut(&ctx)
            .ok_or(RegistryError::UnknownContext(ctx))?;
        entry.active = active;
        Ok(())
    }

    /// The global state of `ctx`; `false` for an unknown context.
    pub fn is_active(&self, ctx: ContextId) -> bool {
        self.table.read().get(&ctx).is_some_and(|e| e.active)
    }

    // ----- What participants consult ---------------------------------------------------------

    /// Whether a local override exists on this thread for this registry. Costs one
    /// thread-local read when no override exists on this thread.
    #[inline]
    pub fn has_overrides(&self) -> bool {
        local::any_overrides()
            && local::with_frame(self.id, |f| f.is_some_and(|f| f.has_overrides()))
    }

    /// The local override of `ctx` in the loop running on this thread: `None` means "use the
    /// global state" (no loop here, or no override of `ctx` in it).
    #[inline]
    pub fn override_for(&self, ctx: ContextId) -> Option<bool> {
        if !local::any_overrides() {
            return None;
        }
        local::with_frame(self.id, |f| f.and_then(|f| f.get(ctx)))
    }

    /// Whether `ctx` takes part in the pass being prepared on this thread: its override if any,
    /// else its global state (`false` for an unknown context).
    #[inline]
    pub fn participates(&self, ctx: ContextId) -> bool {
        self.override_for(ctx)
            .unwrap_or_else(|| self.is_active(ctx))
    }

    /// Whether a replay loop of this registry runs on this thread.
    pub fn in_replay_loop(&self) -> bool {
        local::with_frame(self.id, |f| f.is_some())
    }

    // ----- Toggles ---------------------------------------------------------------------------

    fn toggle(&self, ctx: ContextId, on: bool) -> Result<(), ContextError> {
        local::with_frame(self.id, |frame| {
            let Some(frame) = frame.filter(|f| f.in_pass_enter) else {
                return Err(ContextError::ContextError);
            };
            {
                let table = self.table.read();
                let entry = table.get(&ctx).ok_or(ContextError::UnknownContext(ctx))?;
                if !entry.honours_overrides() {
                    return Err(ContextError::Unsupported(ctx));
                }
            }
            if on && !frame.began_active.contains(&ctx) {
                return Err(ContextError::ContextNotStarted(ctx));
            }
            frame.set(ctx, on);
            log::debug!(
                "[kernel-replay] context {ctx} locally {} for the rest of this loop",
                if on { "started" } else { "stopped" }
            );
            Ok(())
        })
    }
}

impl ContextControl for Contexts {
    fn start(&self, ctx: ContextId) -> Result<(), ContextError> {
        self.toggle(ctx, true)
    }

    fn stop(&self, ctx: ContextId) -> Result<(), ContextError> {
        self.toggle(ctx, false)
    }

    fn loop_begin(&self) {
        let began_active = self
            .table
            .read()
            .iter()
            .filter(|(_, e)| e.active)
            .map(|(&c, _)| c)
            .collect();
        let outer = local::push(Frame::new(self.id, began_active));
        if outer > 0 {
            log::warn!(
                "[kernel-replay] a replay loop began inside another one on this thread ({outer} outer); the inner loop starts without the outer loop's overrides"
            );
        }
    }

    fn pass_enter_begin(&self) {
        let known = local::with_frame(self.id, |f| f.map(|f| f.in_pass_enter = true).is_some());
        if !known {
            log::error!(
                "[kernel-replay] internal error: PASS ENTER began outside a replay loop; context toggles stay refused"
            );
        }
    }

    fn pass_enter_end(&self) {
        let was = local::with_frame(self.id, |f| {
            f.map(|f| std::mem::replace(&mut f.in_pass_enter, false))
        });
        if was != Some(true) {
            log::error!("[kernel-replay] internal error: PASS ENTER ended without having begun");
        }
    }

    fn override_for(&self, ctx: ContextId) -> Option<bool> {
        Contexts::override_for(self, ctx)
    }

    fn has_overrides(&self) -> bool {
        Contexts::has_overrides(self)
    }

    fn loop_end(&self) {
        if !local::pop(self.id) {
            log::error!(
                "[kernel-replay] internal error: a replay loop ended that never began on this thread"
            );
        }
    }
}
