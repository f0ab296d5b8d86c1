//! # replay-context
//!
//! Localized context control (SPEC §5). Inside a replay loop a tool may switch, for this thread
//! and this loop only, which of its already started contexts take part in the next passes,
//! without touching their global start/stop state: `replay_start_context(ctx)` /
//! `replay_stop_context(ctx)`.
//!
//! [`Contexts`] is the registry a tool fills: it creates contexts, declares the services
//! (participants: "counters", "pc_sampling", "thread_trace") of each one and whether each can
//! honour local overrides, and starts and stops contexts globally ([`Contexts::activate`],
//! [`Contexts::deactivate`]). It implements [`replay_core::ContextControl`], so an
//! `Arc<Contexts>` is what [`replay_core::ReplayService::new`] takes; the replay window then
//! calls `loop_begin`, `pass_enter_begin`, `pass_enter_end` and `loop_end` on the thread that
//! runs the window, and the tool's toggles reach [`ContextControl::start`] /
//! [`ContextControl::stop`].
//!
//! Before it contributes to a pass, a participant asks [`Contexts::participates`] (or
//! [`Contexts::override_for`], `None` meaning "use the global state").
//!
//! Who validates what: this crate validates every toggle (phase, context, participants, the
//! set of contexts active at loop begin) and answers with a [`ContextError`]; a window that
//! calls the loop hooks out of order is a programming error in the core, logged loudly and
//! otherwise ignored, never a panic.
//!
//! Design choices:
//! - Global state (contexts, participants, active flags) lives in one `RwLock`ed table; local
//!   state (one *frame* per loop) lives in thread-locals, keyed by the registry instance, so
//!   several registries in one process (embedders, tests) never see each other's overrides.
//! - Frames form a stack: a nested loop on one thread (which the window never runs) gets its
//!   own frame with its own overrides; ending it uncovers the outer loop's overrides intact.
//! - Fast path: a thread-local count of the overrides on this thread. While it is zero,
//!   [`Contexts::has_overrides`] and [`Contexts::override_for`] read one thread-local cell and
//!   take no lock.
//! - Toggles are checked in this order: phase (`context_error`), context known
//!   (`unknown_context`), every participant honours overrides (`unsupported`), and for a start,
//!   active when the loop began (`context_not_started`). A stop of a context that was not
//!   active at loop begin is accepted: it starts nothing.
//! - Overrides are explicit values: a local start records `Some(true)` even when the context is
//!   globally active, so a global stop later in the loop does not undo it (sticky until the tool
//!   changes it or the loop ends).
//! - Overrides exist only on the window's thread. A participant decides at pass submission
//!   (which runs there) and carries the decision to wherever its read-out runs.

#![forbid(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod error;
mod local;
mod registry;

pub use error::RegistryError;
pub use registry::{Contexts, OverrideSupport, Participant};
pub use replay_core::{ContextControl, ContextError, ContextId};
