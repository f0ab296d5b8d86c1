//! The invariant checker a stress test runs against (SPEC §6).
//!
//! The simulator knows when a replay window is open on an agent from the calls the window
//! makes: it opens at the window's first drain (`begin_drain`) and closes at its completion
//! signal (`signal_completion`) or its own ordinary run (`submit_ordinary` from the window's
//! thread, outside a callback). Once its agent drain completed, the window owns the agent:
//! from then until it closes, no ordinary dispatch may execute there. Tool work (launched from
//! a callback, on the window's thread or forwarded) is exempt.
//!
//! Checked:
//! - no ordinary dispatch is submitted while a window is open, or executes while a window owns
//!   its agent ([`Violation::OrdinaryDuringWindow`]);
//! - windows of one agent never overlap ([`Violation::OverlappingWindows`]);
//! - every dispatch launched through the runtime completes exactly once
//!   ([`Violation::CompletionCount`]; call after everything finished, e.g. after
//!   [`crate::SimRuntime::wait_idle`]);
//! - no wait (drain, pass, memory-layer fence) lasted longer than its bound on the simulator's
//!   clock ([`Violation::WaitOverBound`]);
//! - no window was left open ([`Violation::WindowNotClosed`]).
//!
//! A test that drives a [`crate::SimAgent`] directly opens a "window" with its first drain
//! too; such tests should not expect [`Invariants::check`] to pass unless they also end it
//! (with `signal_completion` or `submit_ordinary` from the same thread).

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{AgentId, Policy};

use crate::kernel::Role;
use crate::queue::Signal;

/// What a recorded wait was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitKind {
    /// A drain (queue, agent, copy fence).
    Drain,
    /// A replay pass.
    Pass,
    /// A memory-layer copy or digest batch.
    Fence,
}

/// When an ordinary dispatch was seen during a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Handed to the agent while a window was open.
    Submitted,
    /// Executed while a window owned the agent.
    Executed,
}

/// A broken invariant.
#[derive(Debug, Clone, PartialEq)]
pub enum Violation {
    /// An ordinary (non-tool) dispatch ran into an open window.
    OrdinaryDuringWindow {
        /// Agent.
        agent: AgentId,
        /// Kernel name.
        kernel: String,
        /// The runtime's dispatch handle.
        handle: u64,
        /// Submission or execution.
        stage: Stage,
    },
    /// A window began while another was open on the agent.
    OverlappingWindows {
        /// Agent.
        agent: AgentId,
    },
    /// A dispatch's completion fired other than once.
    CompletionCount {
        /// Agent.
        agent: AgentId,
        /// Kernel name.
        kernel: String,
        /// The runtime's dispatch handle.
        handle: u64,
        /// Times it fired.
        fired: u32,
    },
    /// A wait lasted longer than its bound.
    WaitOverBound {
        /// Agent.
        agent: AgentId,
        /// What was waited for.
        kind: WaitKind,
        /// How long, on the simulator's clock.
        waited: Duration,
        /// The bound (plus tolerance).
        bound: Duration,
    },
    /// A window is still open.
    WindowNotClosed {
        /// Agent.
        agent: AgentId,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OrdinaryDuringWindow {
                agent,
                kernel,
                handle,
                stage,
            } => write!(
                f,
                "ordinary dispatch {handle} of {kernel:?} {} on agent {agent} while a replay window was open",
                match stage {
                    Stage::Submitted => "was submitted",
                    Stage::Executed => "executed",
                }
            ),
            Self::OverlappingWindows { agent } => {
                write!(f, "two replay windows were open on agent {agent} at once")
            }
            Self::CompletionCount {
                agent,
                kernel,
                handle,
                fired,
            } => write!(
                f,
                "dispatch {handle} of {kernel:?} on agent {agent} completed {fired} times (expected exactly once)"
            ),
            Self::WaitOverBound {
                agent,
                kind,
                waited,
                bound,
            } => write!(
                f,
                "a {kind:?} wait on agent {agent} lasted {waited:?}, over its bound of {bound:?}"
            ),
            Self::WindowNotClosed { agent } => {
                write!(f, "a replay window on agent {agent} was never closed")
            }
        }
    }
}

/// Bounds the waits are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitBounds {
    /// Drains.
    pub drain: Duration,
    /// Passes.
    pub pass: Duration,
    /// Memory-layer fences.
    pub fence: Duration,
    /// Slack added to each bound (time other threads advanced the clock meanwhile).
    pub tolerance: Duration,
}

impl WaitBounds {
    /// The bounds a policy sets (fences use the drain timeout, as the window's wait spec does);
    /// tolerance: one poll slice.
    pub fn from_policy(p: &Policy) -> Self {
        Self {
            drain: p.drain_timeout,
            pass: p.pass_timeout,
            fence: p.drain_timeout,
            tolerance: p.poll_slice,
        }
    }

    fn of(&self, k: WaitKind) -> Duration {
        let b = match k {
            WaitKind::Drain => self.drain,
            WaitKind::Pass => self.pass,
            WaitKind::Fence => self.fence,
        };
        b + self.tolerance
    }
}

/// One finished wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitRecord {
    /// Agent.
    pub agent: AgentId,
    /// What for.
    pub kind: WaitKind,
    /// How long, on the simulator's clock.
    pub waited: Duration,
    /// Given up.
    pub abandoned: bool,
}

/// Counts, for tests that want to see the stress actually stressed something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InvariantStats {
    /// Windows opened (first drain seen).
    pub windows_opened: u64,
    /// Windows closed.
    pub windows_closed: u64,
    /// Passes executed.
    pub passes_executed: u64,
    /// Ordinary executions (tool work included).
    pub ordinary_executed: u64,
    /// Tool-work executions while a window owned the agent.
    pub tool_work_in_window: u64,
    /// Dispatches whose completion is tracked.
    pub completions_tracked: u64,
}

/// A number unique to the calling thread for the life of the process (0 only during thread
/// teardown). Used instead of `std::thread::current().id()`, which allocates a handle for a
/// thread Rust did not start (a C or C++ tool's main thread) that is never freed.
fn thread_key() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static KEY: Cell<u64> = const { Cell::new(0) };
    }
    KEY.try_with(|k| {
        if k.get() == 0 {
            k.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        k.get()
    })
    .unwrap_or(0)
}

#[derive(Debug)]
struct Window {
    thread: u64,
    exclusive: bool,
}

struct Tracked {
    agent: AgentId,
    kernel: Arc<str>,
    handle: u64,
    signal: Arc<Signal>,
}

#[derive(Default)]
struct Inner {
    windows: HashMap<AgentId, Window>,
    violations: Vec<Violation>,
    waits: Vec<WaitRecord>,
    completions: Vec<Tracked>,
    stats: InvariantStats,
}

/// Watches windows, completions and waits of one device.
#[derive(Default)]
pub struct Invariants {
    inner: Mutex<Inner>,
}

impl fmt::Debug for Invariants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.inner.lock();
        f.debug_struct("Invariants")
            .field("open_windows", &i.windows.len())
            .field("violations", &i.violations.len())
            .field("stats", &i.stats)
            .finish()
    }
}

impl Invariants {
    pub(crate) fn drain_begun(&self, agent: AgentId) {
        let me = thread_key();
        let mut i = self.inner.lock();
        match i.windows.get(&agent) {
            Some(w) if w.thread == me => {}
            Some(_) => i.violations.push(Violation::OverlappingWindows { agent }),
            None => {
                i.windows.insert(
                    agent,
                    Window {
                        thread: me,
                        exclusive: false,
                    },
                );
                i.stats.windows_opened += 1;
            }
        }
    }

    pub(crate) fn agent_drained(&self, agent: AgentId) {
        if let Some(w) = self.inner.lock().windows.get_mut(&agent) {
            w.exclusive = true;
        }
    }

    /// Whether the calling thread runs the window open on `agent`.
    pub(crate) fn is_window_thread(&self, agent: AgentId) -> bool {
        let me = thread_key();
        self.inner
            .lock()
            .windows
            .get(&agent)
            .is_some_and(|w| w.thread == me)
    }

    pub(crate) fn window_closed(&self, agent: AgentId) {
        let mut i = self.inner.lock();
        if i.windows.remove(&agent).is_some() {
            i.stats.windows_closed += 1;
        }
    }

    pub(crate) fn ordinary_submitted(
        &self,
        agent: AgentId,
        kernel: &str,
        handle: u64,
        tool_work: bool,
        closes: bool,
    ) {
        if closes {
            self.window_closed(agent);
            return;
        }
        if tool_work {
            return;
        }
        let mut i = self.inner.lock();
        if i.windows.contains_key(&agent) {
            i.violations.push(Violation::OrdinaryDuringWindow {
                agent,
                kernel: kernel.to_string(),
                handle,
                stage: Stage::Submitted,
            });
        }
    }

    pub(crate) fn on_execute(&self, agent: AgentId, kernel: &str, handle: u64, role: Role) {
        let mut i = self.inner.lock();
        let owned = i.windows.get(&agent).is_some_and(|w| w.exclusive);
        match role {
            Role::Pass(_) => i.stats.passes_executed += 1,
            Role::Ordinary { tool_work } => {
                i.stats.ordinary_executed += 1;
                if owned && tool_work {
                    i.stats.tool_work_in_window += 1;
                } else if owned {
                    i.violations.push(Violation::OrdinaryDuringWindow {
                        agent,
                        kernel: kernel.to_string(),
                        handle,
                        stage: Stage::Executed,
                    });
                }
            }
        }
    }

    pub(crate) fn record_wait(
        &self,
        agent: AgentId,
        kind: WaitKind,
        begun: Duration,
        ended: Duration,
        abandoned: bool,
    ) {
        self.inner.lock().waits.push(WaitRecord {
            agent,
            kind,
            waited: ended.saturating_sub(begun),
            abandoned,
        });
    }

    pub(crate) fn track_completion(
        &self,
        agent: AgentId,
        kernel: Arc<str>,
        handle: u64,
        signal: Arc<Signal>,
    ) {
        let mut i = self.inner.lock();
        i.stats.completions_tracked += 1;
        i.completions.push(Tracked {
            agent,
            kernel,
            handle,
            signal,
        });
    }

    /// Stops tracking a submission that was refused (it will never complete).
    pub(crate) fn untrack_completion(&self, handle: u64) {
        let mut i = self.inner.lock();
        let before = i.completions.len();
        i.completions.retain(|t| t.handle != handle);
        let removed = (before - i.completions.len()) as u64;
        i.stats.completions_tracked -= removed;
    }

    /// Violations seen as they happened (window overlap, ordinary work in a window).
    pub fn violations(&self) -> Vec<Violation> {
        self.inner.lock().violations.clone()
    }

    /// Every finished wait.
    pub fn waits(&self) -> Vec<WaitRecord> {
        self.inner.lock().waits.clone()
    }

    /// Counts.
    pub fn stats(&self) -> InvariantStats {
        self.inner.lock().stats
    }

    /// Agents with an open window now.
    pub fn open_windows(&self) -> Vec<AgentId> {
        self.inner.lock().windows.keys().copied().collect()
    }

    /// Every check: the violations seen so far, completion counts (run it once everything
    /// finished), waits against `bounds`, and windows left open.
    pub fn check(&self, bounds: &WaitBounds) -> Result<(), Vec<Violation>> {
        let i = self.inner.lock();
        let mut v = i.violations.clone();
        for t in &i.completions {
            let fired = t.signal.fired();
            if fired != 1 {
                v.push(Violation::CompletionCount {
                    agent: t.agent,
                    kernel: t.kernel.to_string(),
                    handle: t.handle,
                    fired,
                });
            }
        }
        for w in &i.waits {
            let bound = bounds.of(w.kind);
            if w.waited > bound {
                v.push(Violation::WaitOverBound {
                    agent: w.agent,
                    kind: w.kind,
                    waited: w.waited,
                    bound,
                });
            }
        }
        let mut open: Vec<AgentId> = i.windows.keys().copied().collect();
        open.sort();
        v.extend(
            open.into_iter()
                .map(|agent| Violation::WindowNotClosed { agent }),
        );
        if v.is_empty() {
            Ok(())
        } else {
            Err(v)
        }
    }
}
