//! Per-agent gates (SPEC §6 steps 3–4): a reader/writer lock per agent, held for writing by a
//! replay window and for reading by ordinary dispatches across their own submission, and the
//! markers that recognise tool work launched from inside a callback.
//!
//! A gated write ([`WriteGate`]) that finds the service inactive and no window open takes no
//! lock, but it is counted on its agent's gate first (`ungated`); a window counts itself open
//! first (`windows_open`) and then, holding the writer lock, waits for that count to reach
//! zero. Both sides use sequentially consistent operations, so either the writer sees the
//! window and takes the reader side, or the window sees the writer and waits for it: a write
//! that checked just before a window started never lands inside it.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use parking_lot::{ArcRwLockReadGuard, RawRwLock, RwLock};

use crate::types::AgentId;

/// One agent's lock and tool-work marker.
#[derive(Debug, Default)]
pub struct AgentGate {
    /// Writer: a replay window. Reader: an ordinary submission, and every other write to the
    /// agent's memory the backend can gate ([`WriteGate`]), while the service is active or a
    /// window is open.
    pub lock: Arc<RwLock<()>>,
    /// Number of tool callbacks running inside a window on this agent. A runtime that forwards
    /// submissions to its own thread (SPEC §9.1) cannot use a thread-local, so it checks this.
    marker: AtomicU32,
    /// Gated writes in progress that took no lock (the service was inactive and no window was
    /// open when they checked); a window waits for them before it drains.
    ungated: AtomicU32,
}

impl AgentGate {
    /// Whether a callback of a window on this agent is running now.
    pub fn in_callback(&self) -> bool {
        self.marker.load(Ordering::Acquire) > 0
    }

    /// Gated writes in progress on this agent that hold no lock (see the module docs).
    pub fn ungated_writes(&self) -> u32 {
        self.ungated.load(Ordering::SeqCst)
    }
}

/// The gates of every agent seen, created on first use.
#[derive(Debug, Default)]
pub struct Gates {
    map: DashMap<AgentId, Arc<AgentGate>>,
}

impl Gates {
    /// Forgets every gate (shutdown only: no window may be running).
    pub fn clear(&self) {
        self.map.clear();
        self.map.shrink_to_fit();
    }

    /// The gate of `agent`.
    pub fn get(&self, agent: AgentId) -> Arc<AgentGate> {
        if let Some(g) = self.map.get(&agent) {
            return Arc::clone(&g);
        }
        Arc::clone(&self.map.entry(agent).or_default())
    }
}

thread_local! {
    static CALLBACK_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Whether this thread is inside a tool callback of any window.
pub fn thread_in_callback() -> bool {
    CALLBACK_DEPTH.with(|d| d.get() > 0)
}

/// Marks this thread and the agent as inside a tool callback until dropped.
#[derive(Debug)]
pub struct CallbackScope<'a> {
    gate: &'a AgentGate,
}

impl<'a> CallbackScope<'a> {
    /// Enters a callback.
    pub fn enter(gate: &'a AgentGate) -> Self {
        CALLBACK_DEPTH.with(|d| d.set(d.get() + 1));
        gate.marker.fetch_add(1, Ordering::AcqRel);
        Self { gate }
    }
}

impl Drop for CallbackScope<'_> {
    fn drop(&mut self) {
        self.gate.marker.fetch_sub(1, Ordering::AcqRel);
        CALLBACK_DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// Held by a path that may write an agent's memory without being replayed (copies, memsets,
/// multi-packet batches, launches the backend does not replay) across its own submission, so a
/// window's restore never undoes it (SPEC §6 step 4). Obtained from
/// [`crate::ReplayService::enter_write`] or [`crate::ReplayService::try_enter_write`].
///
/// Hold it across the submission only (the write's work may complete later: the window's
/// drains wait for it), never across a launch that may itself open a window on the agent.
#[must_use = "the gate is released when this is dropped"]
pub enum WriteGate {
    /// Nothing is held: the caller is tool work inside a window's callback (which must never
    /// wait for that window).
    Open,
    /// The agent's reader side, released on drop.
    Held(ArcRwLockReadGuard<RawRwLock, ()>),
    /// No lock: the service was inactive and no window open. Counted on the agent's gate until
    /// dropped, so a window that starts meanwhile waits for this write before it drains.
    Unlocked(Unlocked),
}

/// The count of an ungated write ([`WriteGate::Unlocked`]), given back on drop.
pub struct Unlocked(Arc<AgentGate>);

impl Unlocked {
    /// Counts a write on `gate`; the caller then checks whether a window may be open.
    pub(crate) fn enter(gate: Arc<AgentGate>) -> Self {
        gate.ungated.fetch_add(1, Ordering::SeqCst);
        Self(gate)
    }
}

impl Drop for Unlocked {
    fn drop(&mut self) {
        self.0.ungated.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Unlocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Unlocked")
    }
}

impl std::fmt::Debug for WriteGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Open => f.write_str("WriteGate::Open"),
            Self::Held(_) => f.write_str("WriteGate::Held"),
            Self::Unlocked(_) => f.write_str("WriteGate::Unlocked"),
        }
    }
}

impl WriteGate {
    /// Whether the reader side is held.
    pub fn is_held(&self) -> bool {
        matches!(self, Self::Held(_))
    }
}

/// Counts a window as open from just before it takes an agent's writer lock until it released
/// it, so that ordinary dispatches and writes gated by [`WriteGate`] keep waiting for it even
/// after the service is stopped. Sequentially consistent: see the module docs.
#[derive(Debug)]
pub(crate) struct WindowOpen<'a>(&'a AtomicU32);

impl<'a> WindowOpen<'a> {
    pub(crate) fn enter(count: &'a AtomicU32) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for WindowOpen<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
