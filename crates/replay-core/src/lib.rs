//! # replay-core
//!
//! The hardware-agnostic heart of kernel-replay. It owns the tool-facing contract
//! ([`contract`], SPEC §3), the pass plan ([`plan`], §4), the replay window state machine
//! ([`window`] via [`ReplayService::submit`], §6), policy ([`policy`], §8), the kernel filter
//! ([`filter`], §3) and outcome records ([`outcome`], §8), and the capture of one dispatch a
//! tool asks for in PASS ENTER ([`capture`], §13; the format on disk is `replay-capture`'s).
//! It defines every trait the window needs from below ([`backend`]): an object-safe [`Agent`], [`DeviceMemory`] with batched,
//! fenced asynchronous operations, a [`Clock`] so bounded waits can run on virtual time, and the
//! [`Snapshotter`] that `replay-memory` implements over device memory.
//!
//! Who validates what: the core validates every transition and owns every deadline; backends
//! only translate. Nothing here is unsafe or touches hardware.
//!
//! Design choices:
//! - The window runs on the submitting thread; there is no worker thread.
//! - Per-agent reader/writer locks live in a `dashmap`; an inactive service with no window open
//!   costs two atomic loads per kernel dispatch (the service flag, then the count of open
//!   windows, so a stopped service never opens a gate a window still holds). Writes that are not
//!   replayed take [`ReplayService::enter_write`]; inactive, it counts them on their agent's
//!   gate instead of locking, and a window starting meanwhile waits for them ([`locks`]).
//! - A backend error of kind [`BackendErrorKind::AfterSubmit`] means the submission reached the
//!   device: the window never submits that dispatch again (the failed pass counts as executed,
//!   the loop ends `truncated`).
//! - Tool callbacks run under `catch_unwind`; a panic declines (before the first pass) or
//!   truncates (after). Only a failed restore between passes on a healthy context aborts: a
//!   context the backend reports lost ([`BackendErrorKind::DeviceLost`], a sticky error) ends
//!   the window `device_error` with what is left of the restore skipped.
//! - Reasons beyond SPEC §8's list: `submit_failed` (the backend refused a pass, or one failed
//!   after its launch), `scope_check_failed` (the after-pass check could not be made),
//!   `device_error` (a drain, pass or restore reported an error, not a timeout),
//!   `agent_busy` (another window held the agent and the submission was resumed where no
//!   window can run) and `unseen_writes` (the memory layer knows the kernel writes memory no
//!   snapshot sees, SPEC §9.2 "Writes the snapshot cannot see"); all end safely.
//! - A pass that stalls gets no PASS EXIT; CONFIG EXIT reports `pass_drain_stuck`. The kernel
//!   is then remembered, and its later dispatches are declined with that same reason (the
//!   record names why it is not replayed) until its code object is unloaded.
//! - Submissions a runtime forwards from a thread of its own never block on an agent's lock:
//!   inside a window they come back `deferred` for the backend to resubmit in order
//!   ([`types::Origin`]).

#![forbid(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod backend;
pub mod capture;
pub mod contract;
pub mod digest;
pub mod error;
pub mod filter;
pub mod locks;
pub mod log_sink;
pub mod outcome;
pub mod phases;
pub mod plan;
pub mod policy;
pub mod service;
pub mod types;
pub mod wait;
mod window;

pub use backend::{
    Agent, BackingId, Capabilities, CaptureStats, Clock, CopyOp, DeviceMemory, Digest128,
    DigestKey, DigestOp, DrainTarget, Fence, MemLoc, MemoryClass, PassCompletion, PointerInfo,
    RegionRef, RestoreError, RestoreStats, ScopeCheck, Snapshot, SnapshotError, SnapshotPlan,
    Snapshotter, SystemClock, Ticket, Tier, TierInfo, UntrackedSummary, WaitSpec,
};
pub use capture::{
    Capture, CaptureRefused, CaptureRequest, CaptureSink, CapturedRegion, DEFAULT_CAPTURE_MAX_BYTES,
};
pub use contract::{
    ContextControl, ContinueFn, MemorySync, NoContextControl, Operation, PassCountFn, Phase,
    ReplayPayload, ReplayTool, Subscription, UserData,
};
pub use error::{BackendError, BackendErrorAt, BackendErrorKind, ContextError, ServiceError};
pub use locks::WriteGate;
pub use outcome::{
    GraphNode, Outcome, OutcomeRecord, PredictFallback, PredictSource, Reason, RunSummary,
    TierBytes,
};
pub use phases::PhaseSeconds;
pub use plan::PassPlan;
pub use policy::{
    CacheControl, OutsideCheck, Policy, PolicyError, PredictWhen, RestoreMode, Scope,
};
pub use service::{DispatchReport, KernelMemo, ReplayService};
pub use types::*;
