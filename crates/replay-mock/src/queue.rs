//! The `queue` role: the queues the simulator knows and the copy engine: FIFO lanes, each with its own worker thread (SPEC §9.1 facts the
//! simulator keeps), and the work items they hold. The workers' loop is the device's
//! ([`crate::gpu`]); this file holds the lanes' data and uses only the kernel's types.
//!
//! A lane counts three things: `submitted` (the write index), `consumed` (the read index: moves
//! when the worker *takes* a packet) and `completed` (moves when the packet *finished*). Drains
//! and passes wait on `completed`, never on `consumed`, as SPEC §9.1 requires of real backends.
//!
//! Each worker reports its state (idle, running, held by an injected stall, waiting for virtual
//! time) so that waits on virtual time know when nothing can progress without the clock moving.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use replay_core::{AgentId, CopyOp, Digest128, DigestKey, DigestOp, Dim3, DispatchId, QueueId};

use crate::counters::CounterGroup;
use crate::fault::Fault;
use crate::kernel::{Kernel, KernelError, Role, RunResult};

/// A completion signal: fired once by the packet that completes the dispatch (or copy).
///
/// Counts how often it fired, so the simulator can check "every dispatch completes exactly
/// once".
#[derive(Debug, Default)]
pub struct Signal {
    state: Mutex<SignalState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct SignalState {
    fired: u32,
    error: Option<KernelError>,
}

impl Signal {
    /// A signal that has not fired.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// How often it fired (1 once complete; more is a bug the invariant checker reports).
    pub fn fired(&self) -> u32 {
        self.state.lock().fired
    }

    /// Whether it fired.
    pub fn is_done(&self) -> bool {
        self.fired() > 0
    }

    /// The error of the execution that fired it.
    pub fn error(&self) -> Option<KernelError> {
        self.state.lock().error.clone()
    }

    /// Fires; returns the new count.
    pub(crate) fn fire(&self, error: Option<KernelError>) -> u32 {
        let mut s = self.state.lock();
        s.fired += 1;
        if s.error.is_none() {
            s.error = error;
        }
        self.cv.notify_all();
        s.fired
    }

    /// Waits up to `timeout` of wall time; `true` once fired.
    pub fn wait_wall(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.state.lock();
        while s.fired == 0 {
            if self.cv.wait_until(&mut s, deadline).timed_out() {
                return s.fired > 0;
            }
        }
        true
    }
}

/// An injected stall: parks a lane until released (by `abandon` of the wait it stalls, by
/// [`crate::SimGpu::release_stalls`], or after the configured wall-clock cap).
#[derive(Debug)]
pub(crate) struct Hold {
    pub id: u64,
    pub what: &'static str,
    released: Mutex<bool>,
    cv: Condvar,
}

impl Hold {
    pub fn new(id: u64, what: &'static str) -> Arc<Self> {
        Arc::new(Self {
            id,
            what,
            released: Mutex::new(false),
            cv: Condvar::new(),
        })
    }

    pub fn release(&self) {
        *self.released.lock() = true;
        self.cv.notify_all();
    }

    pub fn is_released(&self) -> bool {
        *self.released.lock()
    }

    /// Waits until released or `cap` of wall time; `true` when released by someone.
    pub fn wait(&self, cap: Duration, stop: &dyn Fn() -> bool) -> bool {
        let deadline = Instant::now() + cap;
        let mut r = self.released.lock();
        while !*r {
            if stop() || Instant::now() >= deadline {
                return false;
            }
            let _ = self.cv.wait_for(&mut r, Duration::from_millis(20));
        }
        true
    }
}

/// Where a copy-engine batch leaves its outcome: digests (empty for copies) or the error.
pub(crate) type BatchResult = Arc<Mutex<Option<Result<Vec<Digest128>, String>>>>;

/// A kernel execution queued on a lane.
pub(crate) struct KernelWork {
    pub kernel: Kernel,
    pub kernarg: Vec<u8>,
    pub grid: Dim3,
    pub workgroup: Dim3,
    pub dispatch_id: DispatchId,
    pub handle: u64,
    pub role: Role,
    pub completion: Option<Arc<Signal>>,
    /// Parks the lane before the execution until released (an injected stall).
    pub pre_hold: Option<Arc<Hold>>,
    /// Injected faults that run on the worker before the body.
    pub hooks: Vec<Fault>,
    /// Counter group collected for this execution.
    pub group: Option<CounterGroup>,
    pub result: Arc<OnceLock<RunResult>>,
}

/// What a lane executes.
pub(crate) enum Work {
    /// A kernel execution (dispatch, pass or tool work).
    Kernel(Box<KernelWork>),
    /// A barrier packet; fires `completion` when reached (the trailing barrier of a window).
    Barrier { completion: Option<Arc<Signal>> },
    /// An injected stall.
    Hold(Arc<Hold>),
    /// Waits until `lane` (the copy engine) completed `seq`: a restore ordered on the device
    /// ahead of the work queued after it.
    After { lane: Arc<Lane>, seq: u64 },
    /// An application's asynchronous copy (copy engine).
    AppCopy {
        dst: u64,
        src: u64,
        len: u64,
        completion: Arc<Signal>,
    },
    /// A batch of the memory layer's copies (copy engine).
    Copies {
        ops: Vec<CopyOp>,
        fail: Option<String>,
        result: BatchResult,
    },
    /// A batch of the memory layer's digests (copy engine).
    Digests {
        ops: Vec<DigestOp>,
        key: DigestKey,
        fail: Option<String>,
        result: BatchResult,
    },
}

/// What a worker is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkerState {
    /// Nothing to do.
    Idle,
    /// Executing a packet.
    Running,
    /// Parked by an injected stall.
    Held,
    /// Waiting for the clock to reach a modelled completion time.
    WaitingVirtual,
}

/// Which lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LaneKind {
    Queue(QueueId),
    Copy,
}

#[derive(Default)]
struct LaneState {
    items: VecDeque<(u64, Work)>,
    submitted: u64,
    consumed: u64,
    completed: u64,
    worker: Option<WorkerState>,
    /// While waiting for virtual time: the time waited for.
    deadline: Option<Duration>,
    /// While held: the stall.
    hold: Option<Arc<Hold>>,
}

/// A FIFO lane with a worker thread: a queue or an agent's copy engine.
pub(crate) struct Lane {
    pub kind: LaneKind,
    pub agent: AgentId,
    state: Mutex<LaneState>,
    cv: Condvar,
    shutdown: AtomicBool,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        f.debug_struct("Lane")
            .field("kind", &self.kind)
            .field("agent", &self.agent)
            .field("submitted", &s.submitted)
            .field("consumed", &s.consumed)
            .field("completed", &s.completed)
            .field("worker", &s.worker)
            .finish()
    }
}

impl Lane {
    pub fn new(kind: LaneKind, agent: AgentId) -> Arc<Self> {
        Arc::new(Self {
            kind,
            agent,
            state: Mutex::new(LaneState {
                worker: Some(WorkerState::Idle),
                ..LaneState::default()
            }),
            cv: Condvar::new(),
            shutdown: AtomicBool::new(false),
        })
    }

    /// Appends work; returns its sequence number (1-based), or `None` after shutdown.
    pub fn push(&self, work: Work) -> Option<u64> {
        if self.is_shut_down() {
            return None;
        }
        let mut s = self.state.lock();
        s.submitted += 1;
        let seq = s.submitted;
        s.items.push_back((seq, work));
        self.cv.notify_all();
        Some(seq)
    }

    /// The write index: a drain waits until `completed` reaches it.
    pub fn submitted(&self) -> u64 {
        self.state.lock().submitted
    }

    /// The read index: packets the worker took.
    pub fn consumed(&self) -> u64 {
        self.state.lock().consumed
    }

    /// Packets that finished.
    pub fn completed(&self) -> u64 {
        self.state.lock().completed
    }

    /// The worker's state.
    pub fn worker(&self) -> WorkerState {
        self.state.lock().worker.unwrap_or(WorkerState::Idle)
    }

    pub fn set_worker(&self, w: WorkerState) {
        let mut s = self.state.lock();
        s.worker = Some(w);
        s.deadline = None;
        s.hold = None;
    }

    /// The worker is parked on `hold`.
    pub fn set_held(&self, hold: &Arc<Hold>) {
        let mut s = self.state.lock();
        s.worker = Some(WorkerState::Held);
        s.hold = Some(Arc::clone(hold));
    }

    /// The worker waits for the clock to reach `deadline`.
    pub fn set_waiting_virtual(&self, deadline: Duration) {
        let mut s = self.state.lock();
        s.worker = Some(WorkerState::WaitingVirtual);
        s.deadline = Some(deadline);
    }

    /// The time the worker waits for, if it does.
    pub fn virtual_deadline(&self) -> Option<Duration> {
        self.state.lock().deadline
    }

    /// `seq` completed, or the lane cannot progress without a release or the clock moving
    /// past `now`.
    pub fn settled(&self, seq: u64, now: Duration) -> bool {
        let s = self.state.lock();
        s.completed >= seq || Self::blocked(&s, now)
    }

    /// Held by an unreleased stall, or waiting for a time later than `now`. (A released stall
    /// or a reached deadline is runnable: its worker is about to wake.)
    fn blocked(s: &LaneState, now: Duration) -> bool {
        match s.worker {
            Some(WorkerState::Held) => s.hold.as_ref().is_none_or(|h| !h.is_released()),
            Some(WorkerState::WaitingVirtual) => s.deadline.is_none_or(|d| d > now),
            _ => false,
        }
    }

    /// Whether the lane can progress on its own now.
    pub fn busy(&self, now: Duration) -> bool {
        let s = self.state.lock();
        match s.worker {
            Some(WorkerState::Running) => true,
            Some(WorkerState::Idle) | None => !s.items.is_empty(),
            Some(WorkerState::Held) | Some(WorkerState::WaitingVirtual) => !Self::blocked(&s, now),
        }
    }

    pub fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    pub fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Release);
        let _g = self.state.lock();
        self.cv.notify_all();
    }

    /// Takes the next item; `None` at shutdown.
    pub(crate) fn next(&self, progress: &Progress) -> Option<(u64, Work)> {
        let mut s = self.state.lock();
        loop {
            if self.is_shut_down() {
                return None;
            }
            if let Some(item) = s.items.pop_front() {
                s.consumed += 1;
                s.worker = Some(WorkerState::Running);
                return Some(item);
            }
            if s.worker != Some(WorkerState::Idle) {
                s.worker = Some(WorkerState::Idle);
                drop(s);
                progress.notify();
                s = self.state.lock();
                continue;
            }
            self.cv.wait_for(&mut s, Duration::from_millis(100));
        }
    }

    pub(crate) fn complete(&self, seq: u64) {
        let mut s = self.state.lock();
        s.completed = s.completed.max(seq);
        s.worker = Some(if s.items.is_empty() {
            WorkerState::Idle
        } else {
            WorkerState::Running
        });
    }
}

/// A GPU-wide "something changed" notification, for waits that watch several lanes.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    epoch: Mutex<u64>,
    cv: Condvar,
}

impl Progress {
    pub fn notify(&self) {
        let mut e = self.epoch.lock();
        *e = e.wrapping_add(1);
        self.cv.notify_all();
    }

    pub fn epoch(&self) -> u64 {
        *self.epoch.lock()
    }

    /// Waits until the epoch differs from `seen`, or `timeout` of wall time.
    pub fn wait(&self, seen: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut e = self.epoch.lock();
        while *e == seen {
            if self.cv.wait_until(&mut e, deadline).timed_out() {
                return;
            }
        }
    }
}
