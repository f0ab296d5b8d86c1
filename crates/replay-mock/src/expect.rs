//! The expectation recorder, in the style of `tracing-mock`: what the replay window (SPEC §6)
//! and the memory layer (§7) asked of the simulated GPU.
//!
//! The simulator records what the replay window asked of it, in call order, on the thread that
//! asked: drains begun / completed / abandoned, passes submitted / completed / abandoned, cache
//! flushes, ordinary runs, the completion signal, the memory layer's copy and digest batches,
//! allocations and frees, and injected faults firing. Worker-side execution is not recorded
//! here (its timing is not deterministic); the [`crate::invariant`] checker watches that.
//!
//! An [`Expect`] lists what a test expects, then [`Expect::verify`] (or
//! [`Expect::assert_finished`]) compares it with a [`Recorder`]. Mismatches read
//! `expected X but observed Y`. By default the comparison ignores event kinds that depend on the
//! memory layer's internals or on setup (copy and digest batches, fences, allocations, frees,
//! faults, cache flushes, stalls); naming such an event in the expectation includes its kind.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::{AgentId, DispatchId, DrainTarget, MemoryClass, QueueId};

use crate::fault::Fault;

/// Direction of a copy batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyDirection {
    /// Device → backing (a capture).
    Capture,
    /// Backing → device (a restore).
    Restore,
    /// Anything else, or mixed.
    Other,
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `begin_drain`.
    DrainBegun {
        /// Agent.
        agent: AgentId,
        /// What is drained.
        target: DrainTarget,
    },
    /// A drain's poll answered "complete".
    DrainCompleted {
        /// Agent.
        agent: AgentId,
        /// What was drained.
        target: DrainTarget,
    },
    /// `abandon` of a drain.
    DrainAbandoned {
        /// Agent.
        agent: AgentId,
        /// What was drained.
        target: DrainTarget,
    },
    /// `submit_pass`.
    PassSubmitted {
        /// Agent.
        agent: AgentId,
        /// Dispatch.
        dispatch: DispatchId,
        /// Pass index.
        pass: u32,
    },
    /// A pass's poll answered "complete".
    PassCompleted {
        /// Agent.
        agent: AgentId,
        /// Dispatch.
        dispatch: DispatchId,
        /// Pass index.
        pass: u32,
    },
    /// `abandon` of a pass.
    PassAbandoned {
        /// Agent.
        agent: AgentId,
        /// Dispatch.
        dispatch: DispatchId,
        /// Pass index.
        pass: u32,
    },
    /// `flush_caches`.
    CacheFlushed {
        /// Agent.
        agent: AgentId,
    },
    /// `submit_ordinary`.
    OrdinaryRun {
        /// Agent.
        agent: AgentId,
        /// Dispatch (0 when no replay service reserved one).
        dispatch: DispatchId,
        /// Kernel name (`<barrier>` for a barrier submission).
        kernel: Arc<str>,
        /// Launched from inside a tool callback.
        tool_work: bool,
    },
    /// `signal_completion`.
    CompletionSignalled {
        /// Agent.
        agent: AgentId,
        /// Dispatch.
        dispatch: DispatchId,
    },
    /// `submit_copies`.
    CopyBatch {
        /// Agent.
        agent: AgentId,
        /// Number of copies.
        ops: usize,
        /// Bytes.
        bytes: u64,
        /// Capture, restore or other.
        direction: CopyDirection,
    },
    /// `submit_digests`.
    DigestBatch {
        /// Agent.
        agent: AgentId,
        /// Number of digests.
        ops: usize,
        /// Bytes.
        bytes: u64,
    },
    /// `abandon_fence`.
    FenceAbandoned {
        /// Agent.
        agent: AgentId,
    },
    /// An application's asynchronous copy was submitted.
    AppCopy {
        /// Agent.
        agent: AgentId,
        /// Bytes.
        bytes: u64,
    },
    /// An allocation through the runtime.
    Alloc {
        /// Agent.
        agent: AgentId,
        /// Base.
        base: u64,
        /// Size.
        size: u64,
        /// Class.
        class: MemoryClass,
    },
    /// A free through the runtime.
    Free {
        /// Agent.
        agent: AgentId,
        /// Base.
        base: u64,
    },
    /// An injected fault fired.
    FaultFired {
        /// Agent.
        agent: AgentId,
        /// The fault.
        fault: Fault,
    },
    /// An injected stall hit its wall-clock cap and was released by the simulator.
    StallAutoReleased,
}

/// The kind of an event, for filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// [`Event::DrainBegun`].
    DrainBegun,
    /// [`Event::DrainCompleted`].
    DrainCompleted,
    /// [`Event::DrainAbandoned`].
    DrainAbandoned,
    /// [`Event::PassSubmitted`].
    PassSubmitted,
    /// [`Event::PassCompleted`].
    PassCompleted,
    /// [`Event::PassAbandoned`].
    PassAbandoned,
    /// [`Event::CacheFlushed`].
    CacheFlushed,
    /// [`Event::OrdinaryRun`].
    OrdinaryRun,
    /// [`Event::CompletionSignalled`].
    CompletionSignalled,
    /// [`Event::CopyBatch`].
    CopyBatch,
    /// [`Event::DigestBatch`].
    DigestBatch,
    /// [`Event::FenceAbandoned`].
    FenceAbandoned,
    /// [`Event::AppCopy`].
    AppCopy,
    /// [`Event::Alloc`].
    Alloc,
    /// [`Event::Free`].
    Free,
    /// [`Event::FaultFired`].
    FaultFired,
    /// [`Event::StallAutoReleased`].
    StallAutoReleased,
}

impl EventKind {
    /// Kinds [`Expect`] ignores unless the expectation names one of them.
    pub const DEFAULT_IGNORED: [EventKind; 9] = [
        EventKind::CacheFlushed,
        EventKind::CopyBatch,
        EventKind::DigestBatch,
        EventKind::FenceAbandoned,
        EventKind::AppCopy,
        EventKind::Alloc,
        EventKind::Free,
        EventKind::FaultFired,
        EventKind::StallAutoReleased,
    ];
}

impl Event {
    /// Its kind.
    pub fn kind(&self) -> EventKind {
        match self {
            Self::DrainBegun { .. } => EventKind::DrainBegun,
            Self::DrainCompleted { .. } => EventKind::DrainCompleted,
            Self::DrainAbandoned { .. } => EventKind::DrainAbandoned,
            Self::PassSubmitted { .. } => EventKind::PassSubmitted,
            Self::PassCompleted { .. } => EventKind::PassCompleted,
            Self::PassAbandoned { .. } => EventKind::PassAbandoned,
            Self::CacheFlushed { .. } => EventKind::CacheFlushed,
            Self::OrdinaryRun { .. } => EventKind::OrdinaryRun,
            Self::CompletionSignalled { .. } => EventKind::CompletionSignalled,
            Self::CopyBatch { .. } => EventKind::CopyBatch,
            Self::DigestBatch { .. } => EventKind::DigestBatch,
            Self::FenceAbandoned { .. } => EventKind::FenceAbandoned,
            Self::AppCopy { .. } => EventKind::AppCopy,
            Self::Alloc { .. } => EventKind::Alloc,
            Self::Free { .. } => EventKind::Free,
            Self::FaultFired { .. } => EventKind::FaultFired,
            Self::StallAutoReleased => EventKind::StallAutoReleased,
        }
    }

    /// The agent it concerns, if any.
    pub fn agent(&self) -> Option<AgentId> {
        match self {
            Self::DrainBegun { agent, .. }
            | Self::DrainCompleted { agent, .. }
            | Self::DrainAbandoned { agent, .. }
            | Self::PassSubmitted { agent, .. }
            | Self::PassCompleted { agent, .. }
            | Self::PassAbandoned { agent, .. }
            | Self::CacheFlushed { agent }
            | Self::OrdinaryRun { agent, .. }
            | Self::CompletionSignalled { agent, .. }
            | Self::CopyBatch { agent, .. }
            | Self::DigestBatch { agent, .. }
            | Self::FenceAbandoned { agent }
            | Self::AppCopy { agent, .. }
            | Self::Alloc { agent, .. }
            | Self::Free { agent, .. }
            | Self::FaultFired { agent, .. } => Some(*agent),
            Self::StallAutoReleased => None,
        }
    }

    /// The dispatch it concerns, if any.
    pub fn dispatch(&self) -> Option<DispatchId> {
        match self {
            Self::PassSubmitted { dispatch, .. }
            | Self::PassCompleted { dispatch, .. }
            | Self::PassAbandoned { dispatch, .. }
            | Self::OrdinaryRun { dispatch, .. }
            | Self::CompletionSignalled { dispatch, .. } => Some(*dispatch),
            _ => None,
        }
    }
}

fn target_str(t: &DrainTarget) -> String {
    match t {
        DrainTarget::Queue(q) => format!("queue {q}"),
        DrainTarget::Agent => "agent".into(),
        DrainTarget::CopyFence => "copy fence".into(),
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DrainBegun { agent, target } => {
                write!(f, "drain of {} begun (agent {agent})", target_str(target))
            }
            Self::DrainCompleted { agent, target } => {
                write!(
                    f,
                    "drain of {} completed (agent {agent})",
                    target_str(target)
                )
            }
            Self::DrainAbandoned { agent, target } => {
                write!(
                    f,
                    "drain of {} abandoned (agent {agent})",
                    target_str(target)
                )
            }
            Self::PassSubmitted {
                agent,
                dispatch,
                pass,
            } => {
                write!(
                    f,
                    "pass {pass} submitted (agent {agent}, dispatch {dispatch})"
                )
            }
            Self::PassCompleted {
                agent,
                dispatch,
                pass,
            } => {
                write!(
                    f,
                    "pass {pass} completed (agent {agent}, dispatch {dispatch})"
                )
            }
            Self::PassAbandoned {
                agent,
                dispatch,
                pass,
            } => {
                write!(
                    f,
                    "pass {pass} abandoned (agent {agent}, dispatch {dispatch})"
                )
            }
            Self::CacheFlushed { agent } => write!(f, "cache flush (agent {agent})"),
            Self::OrdinaryRun {
                agent,
                dispatch,
                kernel,
                tool_work,
            } => write!(
                f,
                "{} of {kernel:?} (agent {agent}, dispatch {dispatch})",
                if *tool_work {
                    "tool work"
                } else {
                    "ordinary run"
                }
            ),
            Self::CompletionSignalled { agent, dispatch } => {
                write!(
                    f,
                    "completion signalled (agent {agent}, dispatch {dispatch})"
                )
            }
            Self::CopyBatch {
                agent,
                ops,
                bytes,
                direction,
            } => write!(
                f,
                "{direction:?} copy batch of {ops} copies, {bytes} bytes (agent {agent})"
            ),
            Self::DigestBatch { agent, ops, bytes } => {
                write!(
                    f,
                    "digest batch of {ops} digests, {bytes} bytes (agent {agent})"
                )
            }
            Self::FenceAbandoned { agent } => write!(f, "fence abandoned (agent {agent})"),
            Self::AppCopy { agent, bytes } => {
                write!(f, "application copy of {bytes} bytes (agent {agent})")
            }
            Self::Alloc {
                agent,
                base,
                size,
                class,
            } => write!(f, "allocation {base:#x}+{size} {class:?} (agent {agent})"),
            Self::Free { agent, base } => write!(f, "free of {base:#x} (agent {agent})"),
            Self::FaultFired { agent, fault } => {
                write!(f, "injected fault {fault} fired (agent {agent})")
            }
            Self::StallAutoReleased => f.write_str("an injected stall released by its wall cap"),
        }
    }
}

/// Records events in call order.
#[derive(Debug)]
pub struct Recorder {
    events: Mutex<Vec<Event>>,
    enabled: std::sync::atomic::AtomicBool,
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            events: Mutex::new(Vec::new()),
            enabled: std::sync::atomic::AtomicBool::new(true),
        }
    }
}

impl Recorder {
    /// Appends an event (unless recording is off).
    pub fn record(&self, e: Event) {
        if !self.enabled.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        log::trace!("[replay-mock] {e}");
        self.events.lock().push(e);
    }

    /// Turns recording on or off (long stress runs need no event log; it grows with every
    /// window).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Everything recorded so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().clone()
    }

    /// Events of one kind.
    pub fn of_kind(&self, kind: EventKind) -> Vec<Event> {
        self.events
            .lock()
            .iter()
            .filter(|e| e.kind() == kind)
            .cloned()
            .collect()
    }

    /// How many events of a kind were recorded.
    pub fn count(&self, kind: EventKind) -> usize {
        self.events
            .lock()
            .iter()
            .filter(|e| e.kind() == kind)
            .count()
    }

    /// Takes everything recorded so far, leaving the recorder empty.
    pub fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock())
    }

    /// Forgets everything recorded so far (call after setup).
    pub fn clear(&self) {
        self.events.lock().clear();
    }
}

/// Which queue a drain pattern matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetPattern {
    /// A queue drain; `None` matches any queue.
    Queue(Option<QueueId>),
    /// The agent drain.
    Agent,
    /// The copy fence.
    CopyFence,
}

impl TargetPattern {
    fn matches(&self, t: &DrainTarget) -> bool {
        match (self, t) {
            (Self::Queue(None), DrainTarget::Queue(_)) => true,
            (Self::Queue(Some(q)), DrainTarget::Queue(r)) => q == r,
            (Self::Agent, DrainTarget::Agent) => true,
            (Self::CopyFence, DrainTarget::CopyFence) => true,
            _ => false,
        }
    }
}

impl From<DrainTarget> for TargetPattern {
    fn from(t: DrainTarget) -> Self {
        match t {
            DrainTarget::Queue(q) => Self::Queue(Some(q)),
            DrainTarget::Agent => Self::Agent,
            DrainTarget::CopyFence => Self::CopyFence,
        }
    }
}

impl fmt::Display for TargetPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Queue(None) => f.write_str("a queue"),
            Self::Queue(Some(q)) => write!(f, "queue {q}"),
            Self::Agent => f.write_str("agent"),
            Self::CopyFence => f.write_str("copy fence"),
        }
    }
}

/// An expected event: a kind and the fields that must match (unset fields match anything).
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    /// Kind.
    pub kind: EventKind,
    /// Agent, if it matters.
    pub agent: Option<AgentId>,
    /// Dispatch, if it matters.
    pub dispatch: Option<DispatchId>,
    /// Pass index, if it matters.
    pub pass: Option<u32>,
    /// Drain target, if it matters.
    pub target: Option<TargetPattern>,
    /// Tool work or not, if it matters.
    pub tool_work: Option<bool>,
    /// Kernel name, if it matters.
    pub kernel: Option<String>,
    /// Copy direction, if it matters.
    pub direction: Option<CopyDirection>,
    /// Fault name, if it matters.
    pub fault: Option<&'static str>,
}

impl Pattern {
    /// Any event of `kind`.
    pub fn kind(kind: EventKind) -> Self {
        Self {
            kind,
            agent: None,
            dispatch: None,
            pass: None,
            target: None,
            tool_work: None,
            kernel: None,
            direction: None,
            fault: None,
        }
    }

    /// Whether `e` matches.
    pub fn matches(&self, e: &Event) -> bool {
        if e.kind() != self.kind {
            return false;
        }
        if self.agent.is_some() && e.agent() != self.agent {
            return false;
        }
        if self.dispatch.is_some() && e.dispatch() != self.dispatch {
            return false;
        }
        match e {
            Event::DrainBegun { target, .. }
            | Event::DrainCompleted { target, .. }
            | Event::DrainAbandoned { target, .. } => self.target.is_none_or(|t| t.matches(target)),
            Event::PassSubmitted { pass, .. }
            | Event::PassCompleted { pass, .. }
            | Event::PassAbandoned { pass, .. } => self.pass.is_none_or(|p| p == *pass),
            Event::OrdinaryRun {
                kernel, tool_work, ..
            } => {
                self.tool_work.is_none_or(|t| t == *tool_work)
                    && self.kernel.as_deref().is_none_or(|k| k == &**kernel)
            }
            Event::CopyBatch { direction, .. } => self.direction.is_none_or(|d| d == *direction),
            Event::FaultFired { fault, .. } => self.fault.is_none_or(|n| n == fault.name()),
            _ => true,
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let any_pass = || {
            self.pass
                .map(|p| format!("pass {p}"))
                .unwrap_or_else(|| "a pass".into())
        };
        let target = || {
            self.target
                .map(|t| t.to_string())
                .unwrap_or_else(|| "anything".into())
        };
        match self.kind {
            EventKind::DrainBegun => write!(f, "drain of {} begun", target())?,
            EventKind::DrainCompleted => write!(f, "drain of {} completed", target())?,
            EventKind::DrainAbandoned => write!(f, "drain of {} abandoned", target())?,
            EventKind::PassSubmitted => write!(f, "{} submitted", any_pass())?,
            EventKind::PassCompleted => write!(f, "{} completed", any_pass())?,
            EventKind::PassAbandoned => write!(f, "{} abandoned", any_pass())?,
            EventKind::CacheFlushed => f.write_str("cache flush")?,
            EventKind::OrdinaryRun => {
                f.write_str(match self.tool_work {
                    Some(true) => "tool work",
                    Some(false) => "ordinary run",
                    None => "ordinary run or tool work",
                })?;
                if let Some(k) = &self.kernel {
                    write!(f, " of {k:?}")?;
                }
            }
            EventKind::CompletionSignalled => f.write_str("completion signalled")?,
            EventKind::CopyBatch => match self.direction {
                Some(d) => write!(f, "{d:?} copy batch")?,
                None => f.write_str("copy batch")?,
            },
            EventKind::DigestBatch => f.write_str("digest batch")?,
            EventKind::FenceAbandoned => f.write_str("fence abandoned")?,
            EventKind::AppCopy => f.write_str("application copy")?,
            EventKind::Alloc => f.write_str("allocation")?,
            EventKind::Free => f.write_str("free")?,
            EventKind::FaultFired => match self.fault {
                Some(n) => write!(f, "injected fault {n} fired")?,
                None => f.write_str("an injected fault fired")?,
            },
            EventKind::StallAutoReleased => f.write_str("a stall released by its wall cap")?,
        }
        let mut extra = Vec::new();
        if let Some(a) = self.agent {
            extra.push(format!("agent {a}"));
        }
        if let Some(d) = self.dispatch {
            extra.push(format!("dispatch {d}"));
        }
        if !extra.is_empty() {
            write!(f, " ({})", extra.join(", "))?;
        }
        Ok(())
    }
}

/// A mismatch between an expectation and a recording.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExpectError {
    /// An event differs.
    #[error(
        "expected {expected} but observed {observed} (event {index} of the compared recording)"
    )]
    Mismatch {
        /// Position among the compared events (0-based).
        index: usize,
        /// What was expected.
        expected: String,
        /// What was recorded.
        observed: String,
    },
    /// The recording ended early.
    #[error("expected {expected} but observed nothing (the compared recording ended after {matched} events)")]
    Missing {
        /// What was expected next.
        expected: String,
        /// Events that matched before.
        matched: usize,
    },
    /// The recording has more events.
    #[error(
        "expected nothing more but observed {observed} (event {index} of the compared recording)"
    )]
    Unexpected {
        /// Position.
        index: usize,
        /// What was recorded.
        observed: String,
    },
}

/// A builder of expected events, compared in order with a [`Recorder`].
///
/// ```
/// use replay_core::DrainTarget;
/// use replay_mock::Expect;
/// let e = Expect::new()
///     .window_drains()
///     .pass(0)
///     .pass(1)
///     .signal();
/// # let _ = e;
/// ```
#[derive(Debug, Clone, Default)]
pub struct Expect {
    items: Vec<Pattern>,
    agent: Option<AgentId>,
    /// Kinds ignored on request.
    ignored: BTreeSet<EventKind>,
    /// Default-ignored kinds the expectation named, hence compared.
    included: BTreeSet<EventKind>,
    strict: bool,
    prefix: bool,
}

impl Expect {
    /// An empty expectation.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(mut self, mut p: Pattern) -> Self {
        if p.agent.is_none() {
            p.agent = self.agent;
        }
        self.items.push(p);
        self
    }

    /// Compares only events of `agent` (and sets it on the patterns that follow).
    pub fn for_agent(mut self, agent: AgentId) -> Self {
        self.agent = Some(agent);
        self
    }

    /// Compares every event kind (nothing ignored by default).
    pub fn strict(mut self) -> Self {
        self.strict = true;
        self
    }

    /// Also ignores `kind`.
    pub fn ignore(mut self, kind: EventKind) -> Self {
        self.ignored.insert(kind);
        self
    }

    /// Allows further events after the expected ones.
    pub fn allow_more(mut self) -> Self {
        self.prefix = true;
        self
    }

    /// Any pattern.
    pub fn event(self, p: Pattern) -> Self {
        self.push(p)
    }

    /// A drain begun and completed.
    pub fn drain(self, target: impl Into<TargetPattern>) -> Self {
        let t = target.into();
        self.push(Pattern {
            target: Some(t),
            ..Pattern::kind(EventKind::DrainBegun)
        })
        .push(Pattern {
            target: Some(t),
            ..Pattern::kind(EventKind::DrainCompleted)
        })
    }

    /// A drain begun and abandoned (it did not complete in time).
    pub fn drain_abandoned(self, target: impl Into<TargetPattern>) -> Self {
        let t = target.into();
        self.push(Pattern {
            target: Some(t),
            ..Pattern::kind(EventKind::DrainBegun)
        })
        .push(Pattern {
            target: Some(t),
            ..Pattern::kind(EventKind::DrainAbandoned)
        })
    }

    /// The three drains of a window, completed: any queue, the agent, the copy fence.
    pub fn window_drains(self) -> Self {
        self.drain(TargetPattern::Queue(None))
            .drain(TargetPattern::Agent)
            .drain(TargetPattern::CopyFence)
    }

    /// Pass `pass` submitted and completed.
    pub fn pass(self, pass: u32) -> Self {
        self.push(Pattern {
            pass: Some(pass),
            ..Pattern::kind(EventKind::PassSubmitted)
        })
        .push(Pattern {
            pass: Some(pass),
            ..Pattern::kind(EventKind::PassCompleted)
        })
    }

    /// Passes `0..n` submitted and completed.
    pub fn passes(self, n: u32) -> Self {
        (0..n).fold(self, |e, p| e.pass(p))
    }

    /// Pass `pass` submitted and abandoned.
    pub fn pass_abandoned(self, pass: u32) -> Self {
        self.push(Pattern {
            pass: Some(pass),
            ..Pattern::kind(EventKind::PassSubmitted)
        })
        .push(Pattern {
            pass: Some(pass),
            ..Pattern::kind(EventKind::PassAbandoned)
        })
    }

    /// A cache flush (includes the kind in the comparison).
    pub fn cache_flush(mut self) -> Self {
        self.unignore(EventKind::CacheFlushed);
        self.push(Pattern::kind(EventKind::CacheFlushed))
    }

    /// An ordinary run that is not tool work.
    pub fn ordinary(self) -> Self {
        self.push(Pattern {
            tool_work: Some(false),
            ..Pattern::kind(EventKind::OrdinaryRun)
        })
    }

    /// An ordinary run of the named kernel that is not tool work.
    pub fn ordinary_of(self, kernel: &str) -> Self {
        self.push(Pattern {
            tool_work: Some(false),
            kernel: Some(kernel.to_string()),
            ..Pattern::kind(EventKind::OrdinaryRun)
        })
    }

    /// Tool work launched from a callback.
    pub fn tool_work(self) -> Self {
        self.push(Pattern {
            tool_work: Some(true),
            ..Pattern::kind(EventKind::OrdinaryRun)
        })
    }

    /// The application's completion signalled after the passes.
    pub fn signal(self) -> Self {
        self.push(Pattern::kind(EventKind::CompletionSignalled))
    }

    /// A copy batch in `direction` (includes copy batches in the comparison).
    pub fn copy_batch(mut self, direction: CopyDirection) -> Self {
        self.unignore(EventKind::CopyBatch);
        self.push(Pattern {
            direction: Some(direction),
            ..Pattern::kind(EventKind::CopyBatch)
        })
    }

    /// A digest batch (includes digest batches in the comparison).
    pub fn digest_batch(mut self) -> Self {
        self.unignore(EventKind::DigestBatch);
        self.push(Pattern::kind(EventKind::DigestBatch))
    }

    /// An injected fault firing (includes faults in the comparison).
    pub fn fault(mut self, fault: &Fault) -> Self {
        self.unignore(EventKind::FaultFired);
        self.push(Pattern {
            fault: Some(fault.name()),
            ..Pattern::kind(EventKind::FaultFired)
        })
    }

    fn unignore(&mut self, kind: EventKind) {
        self.included.insert(kind);
    }

    fn ignored(&self) -> BTreeSet<EventKind> {
        let mut s = self.ignored.clone();
        if !self.strict {
            s.extend(
                EventKind::DEFAULT_IGNORED
                    .into_iter()
                    .filter(|k| !self.included.contains(k)),
            );
        }
        s
    }

    /// The events of `events` this expectation compares.
    pub fn compared(&self, events: &[Event]) -> Vec<Event> {
        let ignored = self.ignored();
        events
            .iter()
            .filter(|e| !ignored.contains(&e.kind()))
            .filter(|e| self.agent.is_none() || e.agent().is_none() || e.agent() == self.agent)
            .cloned()
            .collect()
    }

    /// Compares with a list of events.
    pub fn verify_events(&self, events: &[Event]) -> Result<(), ExpectError> {
        let observed = self.compared(events);
        for (i, p) in self.items.iter().enumerate() {
            match observed.get(i) {
                None => {
                    return Err(ExpectError::Missing {
                        expected: p.to_string(),
                        matched: i,
                    })
                }
                Some(e) if !p.matches(e) => {
                    return Err(ExpectError::Mismatch {
                        index: i,
                        expected: p.to_string(),
                        observed: e.to_string(),
                    })
                }
                Some(_) => {}
            }
        }
        if !self.prefix {
            if let Some(e) = observed.get(self.items.len()) {
                return Err(ExpectError::Unexpected {
                    index: self.items.len(),
                    observed: e.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Compares with what `recorder` holds.
    pub fn verify(&self, recorder: &Recorder) -> Result<(), ExpectError> {
        self.verify_events(&recorder.events())
    }

    /// Compares with what `recorder` holds; panics with the mismatch and the recording.
    #[track_caller]
    pub fn assert_finished(&self, recorder: &Recorder) {
        let events = recorder.events();
        if let Err(e) = self.verify_events(&events) {
            let shown: Vec<String> = self
                .compared(&events)
                .iter()
                .enumerate()
                .map(|(i, e)| format!("  {i}: {e}"))
                .collect();
            panic!("{e}\ncompared recording:\n{}", shown.join("\n"));
        }
    }
}
