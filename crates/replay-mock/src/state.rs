//! Process-wide state of the simulated device (SPEC §2): what the device, its handles and its
//! worker threads share (the agents with their heaps, lanes, tickets and fences; the recorder,
//! invariant checker, faults and counters; the tracker, loaded code objects, virtual-memory
//! state and pending submissions) and the operations every role needs on it: injected stalls
//! and faults, completion signals, polls with a time budget (SPEC §6), allocation reporting
//! (§7.1).
//!
//! It sits above the data models ([`crate::heap`], [`crate::queue`], [`crate::kernel`]) and
//! below the roles ([`crate::agent`], [`crate::memory`], [`crate::module`], [`crate::vmem`])
//! and the device ([`crate::gpu`]), which use it; it uses none of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use replay_core::{AgentId, Clock, DrainTarget, MemoryClass, QueueId};
use replay_memory::{ModuleVariable, Tracker};

use crate::clock::SimClock;
use crate::counters::CounterStore;
use crate::error::SimError;
use crate::expect::{Event, Recorder};
use crate::fault::{Fault, Faults};
use crate::heap::{placement, Allocation, Heap, Owner, VmemState};
use crate::invariant::Invariants;
use crate::kernel::{Kernel, KernelError, RunResult};
use crate::queue::{BatchResult, Hold, Lane, LaneKind, Progress, Signal};

/// How the simulator behaves.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// An injected stall nobody releases ends after this much wall time, with a warning, so a
    /// test never hangs (the window normally releases it at once by abandoning its wait). A
    /// kernel waiting for virtual time nobody advances advances the clock itself after it.
    pub stall_wall_cap: Duration,
    /// Virtual time: the longest wall time one poll blocks while the awaited work is running.
    /// A poll that hits it answers "not yet" without moving the clock, and the window's wait
    /// then sleeps its slice: a kernel body that runs for a long *wall* time costs one slice
    /// of virtual time per this much wall time.
    pub poll_wall_cap: Duration,
    /// Virtual time: a poll whose work is blocked advances the clock once the whole device is
    /// quiescent, or after this much wall time if other agents keep running.
    pub quiescence_wall_cap: Duration,
    /// Kernels and copies advance the virtual clock by their modelled duration.
    pub advance_clock_for_work: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            stall_wall_cap: Duration::from_secs(10),
            poll_wall_cap: Duration::from_millis(200),
            quiescence_wall_cap: Duration::from_millis(20),
            advance_clock_for_work: false,
        }
    }
}

/// What a simulated agent reports by default ([`crate::AgentConfig::capabilities`]).
///
/// `DEVICE_DIGESTS`: the simulator's digests are device ones. Its copy-engine thread computes
/// them over the simulated device memory where it lives, asynchronously behind a fence, with
/// no staging copy to the host: the shape of CUDA's digest kernels, not of HSA's host digests
/// (which first copy the bytes over the host link). So `scope=auto` resolves to `arguments`
/// and `restore=auto` to `dirty` on the simulator, as on CUDA; an agent configured without it
/// models a host-digest backend.
///
/// `ORDERED_RESTORE` is not among them: an agent configured with it orders its passes and
/// ordinary runs after the restore batches the memory layer hands to `order_after` (a packet
/// on the queue that waits for the copy engine), so the window does not wait for them.
pub const SIM_CAPABILITIES: replay_core::Capabilities = replay_core::Capabilities::CACHE_FLUSH
    .union(replay_core::Capabilities::DEVICE_DIGESTS)
    .union(replay_core::Capabilities::COPY_FENCE)
    .union(replay_core::Capabilities::SYSTEM_SCOPE_FENCES);

/// One simulated agent's shape.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Queues created with the agent.
    pub queues: usize,
    /// Device memory capacity.
    pub device_bytes: u64,
    /// Pinned host memory capacity (pinned allocations and the pinned tier).
    pub pinned_bytes: u64,
    /// Pageable host memory capacity (the pageable tier).
    pub pageable_bytes: u64,
    /// Modelled device-memory bandwidth, GB/s.
    pub device_gbps: f64,
    /// Modelled pinned host-link bandwidth, GB/s.
    pub pinned_gbps: f64,
    /// Modelled pageable copy bandwidth, GB/s.
    pub pageable_gbps: f64,
    /// Size of the runtime's kernarg pool (a `KERNARG` allocation reported to the tracker);
    /// 0 for none.
    pub kernarg_pool_bytes: u64,
    /// Allocation alignment (a power of two).
    pub alignment: u64,
    /// What the agent reports (`Agent::capabilities`); default [`SIM_CAPABILITIES`].
    /// Tests clear `DEVICE_DIGESTS` (and may set `AUTO_ARGUMENTS`) to model a host-digest
    /// backend; only the `auto` policy reads these two.
    pub capabilities: replay_core::Capabilities,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            queues: 2,
            device_bytes: 1 << 30,
            pinned_bytes: 256 << 20,
            pageable_bytes: 1 << 30,
            device_gbps: 1000.0,
            pinned_gbps: 25.0,
            pageable_gbps: 6.0,
            kernarg_pool_bytes: 64 << 10,
            alignment: 4096,
            capabilities: SIM_CAPABILITIES,
        }
    }
}

/// What an agent needs to run a dispatch it is handed by the core.
pub(crate) enum Payload {
    Kernel(Kernel),
    Barrier,
    /// Several kernel dispatches in one submission (`SubmissionKind::MultiPacket`), each with
    /// its argument block and grid; the completion follows the last.
    Batch(Vec<(Kernel, Vec<u8>, replay_core::Dim3)>),
}

/// A submission the runtime handed to the service and the agent may be asked to run.
pub(crate) struct Pending {
    pub payload: Payload,
    pub completion: Arc<Signal>,
    /// Launched from inside a tool callback (tool work).
    pub from_callback: bool,
}

pub(crate) struct KernargPool {
    pub base: u64,
    pub size: u64,
    pub cursor: Mutex<u64>,
}

/// One agent's shared state.
pub(crate) struct AgentShared {
    pub id: AgentId,
    pub config: AgentConfig,
    pub heap: Heap,
    pub queues: RwLock<Vec<Arc<Lane>>>,
    pub copy: Arc<Lane>,
    pub tickets: Mutex<HashMap<u64, TicketEntry>>,
    pub fences: Mutex<HashMap<u64, FenceEntry>>,
    pub backings: Mutex<HashMap<u64, Arc<Allocation>>>,
    pub kernarg: Option<KernargPool>,
    /// Application copies into this agent's memory run by another agent's copy engine (or held
    /// by an injected stall), not known complete yet: the copy fence waits for them too (SPEC §6
    /// step 6).
    pub foreign_copies: Mutex<Vec<ForeignCopy>>,
    /// Copy-engine batches ordered ahead of the agent's later work (`order_after`, agents
    /// configured with `ORDERED_RESTORE`): (fence, sequence number on the copy engine), until
    /// a poll sees them complete.
    pub ordered: Mutex<Vec<(u64, u64)>>,
}

/// An application copy into an agent's memory on another agent's copy engine.
pub(crate) struct ForeignCopy {
    /// The engine that runs it and the copy's sequence number there.
    pub lane: Arc<Lane>,
    pub seq: u64,
    /// The injected stall holding it, if any (released when a fence abandons it).
    pub hold: Option<Arc<Hold>>,
}

impl AgentShared {
    /// The copy-engine sequence number the agent's next work must wait for, if a batch is
    /// ordered ahead of it.
    pub fn ordered_seq(&self) -> Option<u64> {
        self.ordered.lock().iter().map(|&(_, seq)| seq).max()
    }

    /// The foreign copies still in flight (completed ones are forgotten).
    pub fn foreign_in_flight(&self) -> Vec<(Arc<Lane>, u64, Option<Arc<Hold>>)> {
        let mut v = self.foreign_copies.lock();
        v.retain(|c| c.lane.completed() < c.seq);
        v.iter()
            .map(|c| (Arc::clone(&c.lane), c.seq, c.hold.clone()))
            .collect()
    }
}

impl AgentShared {
    pub fn queue(&self, q: QueueId) -> Option<Arc<Lane>> {
        self.queues
            .read()
            .iter()
            .find(|l| l.kind == LaneKind::Queue(q))
            .cloned()
    }

    pub fn lanes(&self) -> Vec<Arc<Lane>> {
        let mut v = self.queues.read().clone();
        v.push(Arc::clone(&self.copy));
        v
    }
}

/// State shared by the device, its handles and its worker threads.
pub(crate) struct GpuShared {
    pub clock: Arc<SimClock>,
    pub config: SimConfig,
    pub agents: RwLock<Vec<Arc<AgentShared>>>,
    pub recorder: Recorder,
    pub invariants: Invariants,
    pub faults: Faults,
    pub counters: CounterStore,
    pub progress: Progress,
    pub tracker: Arc<Tracker>,
    pub modules: ModuleTable,
    pub vmem: Mutex<VmemState>,
    pub pending: Mutex<HashMap<u64, Pending>>,
    pub(crate) holds: Mutex<HashMap<u64, Arc<Hold>>>,
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) next_id: AtomicU64,
    pub(crate) next_queue: AtomicU64,
    pub(crate) active_polls: AtomicUsize,
    pub(crate) shutdown: AtomicBool,
}

impl GpuShared {
    pub fn agent_shared(&self, id: AgentId) -> Option<Arc<AgentShared>> {
        usize::try_from(id.0)
            .ok()
            .and_then(|i| self.agents.read().get(i).cloned())
    }

    pub fn agent_or_err(&self, id: AgentId) -> Result<Arc<AgentShared>, SimError> {
        self.agent_shared(id).ok_or(SimError::UnknownAgent(id))
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// A new injected stall, registered so `release_stalls` and shutdown can end it.
    pub fn new_hold(&self, what: &'static str) -> Arc<Hold> {
        let h = Hold::new(self.next_id(), what);
        self.holds.lock().insert(h.id, Arc::clone(&h));
        h
    }

    /// Parks the calling worker on `h` until released or the wall cap.
    pub fn wait_hold(&self, h: &Hold) {
        let released = h.wait(self.config.stall_wall_cap, &|| self.is_shut_down());
        if !released && !self.is_shut_down() {
            log::warn!(
                "[replay-mock] an injected {} stall was not released within {:?} of wall time; releasing it",
                h.what,
                self.config.stall_wall_cap
            );
            self.recorder.record(Event::StallAutoReleased);
        }
        self.holds.lock().remove(&h.id);
    }

    /// Releases every injected stall.
    pub fn release_holds(&self) {
        let holds: Vec<_> = self.holds.lock().values().cloned().collect();
        for h in holds {
            h.release();
        }
    }

    /// Fires the first armed fault of `agent` matching `pred`, and records it.
    pub fn take_fault(&self, agent: AgentId, pred: impl Fn(&Fault) -> bool) -> Option<Fault> {
        let f = self.faults.take(agent, pred)?;
        self.fault_fired(agent, &f);
        Some(f)
    }

    /// Fires every armed fault of `agent` matching `pred` once, and records them.
    pub fn take_faults(&self, agent: AgentId, pred: impl Fn(&Fault) -> bool) -> Vec<Fault> {
        let v = self.faults.take_all(agent, pred);
        for f in &v {
            self.fault_fired(agent, f);
        }
        v
    }

    fn fault_fired(&self, agent: AgentId, f: &Fault) {
        log::info!("[replay-mock] agent {agent}: injected fault {f} fires");
        self.recorder.record(Event::FaultFired {
            agent,
            fault: f.clone(),
        });
    }

    /// Fires a completion signal; a second firing is an invariant violation.
    pub fn fire(&self, s: &Signal, error: Option<KernelError>) {
        let n = s.fire(error);
        if n > 1 {
            log::error!("[replay-mock] a completion signal fired {n} times");
        }
        self.progress.notify();
    }

    /// Whether no lane of any agent can progress without a release or the clock moving.
    pub fn quiescent(&self) -> bool {
        let now = self.clock.now();
        self.agents
            .read()
            .iter()
            .all(|a| a.lanes().iter().all(|l| !l.busy(now)))
    }

    /// The earliest modelled completion time a lane waits for.
    fn earliest_virtual_deadline(&self) -> Option<Duration> {
        self.agents
            .read()
            .iter()
            .flat_map(|a| a.lanes())
            .filter_map(|l| l.virtual_deadline())
            .min()
    }

    /// Waits at most `budget` until every `(lane, seq)` completed (SPEC §6 bounded polls).
    ///
    /// Wall clock: blocks up to `budget` on the progress condition. Virtual time: blocks (in
    /// wall time) while the awaited work runs; once it cannot progress (held by a stall, or
    /// waiting for virtual time) and the device is quiescent, advances the clock by `budget`
    /// and answers.
    pub fn poll_waits(&self, waits: &[(Arc<Lane>, u64)], budget: Duration) -> bool {
        let done = || waits.iter().all(|(l, s)| l.completed() >= *s);
        let settled = || {
            let now = self.clock.now();
            waits.iter().all(|(l, s)| l.settled(*s, now))
        };
        if done() {
            return true;
        }
        if !self.clock.is_virtual() {
            let deadline = Instant::now() + budget;
            loop {
                let e = self.progress.epoch();
                if done() {
                    return true;
                }
                let now = Instant::now();
                if now >= deadline {
                    return false;
                }
                self.progress.wait(e, deadline - now);
            }
        }
        self.active_polls.fetch_add(1, Ordering::AcqRel);
        let started = Instant::now();
        let mut settled_since: Option<Instant> = None;
        let r = loop {
            let e = self.progress.epoch();
            if done() {
                break true;
            }
            if settled() {
                let since = *settled_since.get_or_insert_with(Instant::now);
                if self.quiescent() || since.elapsed() >= self.config.quiescence_wall_cap {
                    self.clock.advance(budget);
                    break done();
                }
            } else {
                settled_since = None;
            }
            if started.elapsed() >= self.config.poll_wall_cap {
                break false;
            }
            self.progress.wait(e, Duration::from_millis(2));
        };
        self.active_polls.fetch_sub(1, Ordering::AcqRel);
        r
    }

    /// Blocks until `cond()` holds (`true`) or the device shut down (`false`); on virtual
    /// time, advances the clock to the next modelled completion when the device is quiescent
    /// and no window is polling.
    pub fn wait_for(&self, cond: &dyn Fn() -> bool) -> bool {
        loop {
            let e = self.progress.epoch();
            if cond() {
                return true;
            }
            if self.is_shut_down() {
                return cond();
            }
            if self.clock.is_virtual()
                && self.active_polls.load(Ordering::Acquire) == 0
                && self.quiescent()
            {
                if let Some(d) = self.earliest_virtual_deadline() {
                    if d > self.clock.now() {
                        self.clock.advance_to(d);
                        continue;
                    }
                }
            }
            self.progress.wait(e, Duration::from_millis(5));
        }
    }

    /// Waits until every lane of every agent has completed what was submitted.
    pub fn wait_idle(&self) {
        let lanes: Vec<(Arc<Lane>, u64)> = self
            .agents
            .read()
            .iter()
            .flat_map(|a| a.lanes())
            .map(|l| {
                let s = l.submitted();
                (l, s)
            })
            .collect();
        let _ = self.wait_for(&|| lanes.iter().all(|(l, s)| l.completed() >= *s));
    }

    /// Allocates application (or tool, or unreported) memory and reports it to the tracker.
    pub fn alloc_mem(
        &self,
        agent: AgentId,
        size: u64,
        class: MemoryClass,
        report: bool,
        at: Option<u64>,
    ) -> Result<u64, SimError> {
        let a = self.agent_or_err(agent)?;
        let (area, pool) = placement(class);
        let owner = if class.contains(MemoryClass::TOOL_OWNED) {
            Owner::Tool
        } else if report {
            Owner::App
        } else {
            Owner::Unreported
        };
        let alloc = a.heap.alloc(size, class, owner, area, pool, at)?;
        let base = alloc.base;
        if owner == Owner::Tool {
            self.tracker.record_alloc(agent, base, size, class);
            self.tracker.mark_tool_owned(agent, base, size);
        } else if report {
            self.tracker.record_alloc(agent, base, size, class);
        }
        self.recorder.record(Event::Alloc {
            agent,
            base,
            size,
            class,
        });
        Ok(base)
    }

    /// Frees memory made by [`GpuShared::alloc_mem`]: the tracker hears of it first.
    pub fn free_mem(&self, agent: AgentId, base: u64) -> Result<(), SimError> {
        let a = self.agent_or_err(agent)?;
        let alloc = a
            .heap
            .get(base)
            // A mapping ends with its unmap (`SimRuntime::vmem_unmap`), never with a free.
            .filter(|x| {
                matches!(x.owner, Owner::App | Owner::Unreported | Owner::Tool) && x.map.is_none()
            })
            .ok_or(SimError::InvalidFree { agent, addr: base })?;
        if alloc.owner != Owner::Unreported {
            // SPEC §7.1: recorded before the memory is released.
            self.tracker.record_free(agent, base);
        }
        a.heap.remove(base);
        self.recorder.record(Event::Free { agent, base });
        Ok(())
    }

    /// Runs an injected hook on a worker, during a pass.
    pub fn run_hook(&self, agent: AgentId, hook: &Fault) {
        let r = match *hook {
            Fault::FreeDuringPass { base, .. } => self.free_mem(agent, base),
            Fault::ReallocDuringPass { base, .. } => {
                let info = self
                    .agent_shared(agent)
                    .and_then(|a| a.heap.get(base))
                    .map(|x| (x.size, x.class, x.owner == Owner::App));
                match info {
                    Some((size, class, report)) => self
                        .free_mem(agent, base)
                        .and_then(|()| self.alloc_mem(agent, size, class, report, Some(base)))
                        .map(|_| ()),
                    None => Err(SimError::InvalidFree { agent, addr: base }),
                }
            }
            _ => Ok(()),
        };
        if let Err(e) = r {
            log::warn!("[replay-mock] agent {agent}: injected {hook} could not run: {e}");
        }
    }
}

pub(crate) enum TicketKind {
    Drain {
        target: DrainTarget,
    },
    Pass {
        dispatch: replay_core::DispatchId,
        pass: u32,
        result: Arc<OnceLock<RunResult>>,
    },
}

/// An operation the window waits for.
pub(crate) struct TicketEntry {
    pub(crate) kind: TicketKind,
    pub(crate) waits: Vec<(Arc<Lane>, u64)>,
    pub(crate) holds: Vec<Arc<Hold>>,
    pub(crate) begun: Duration,
}

/// A submitted batch of copies or digests.
#[derive(Debug)]
pub(crate) struct FenceEntry {
    pub(crate) seq: u64,
    pub(crate) digests: bool,
    pub(crate) result: BatchResult,
    pub(crate) begun: Duration,
    pub(crate) hold: Option<Arc<Hold>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    pub(crate) agent: AgentId,
    pub(crate) code_object: u64,
    pub(crate) variables: Vec<ModuleVariable>,
    /// The module's name and description ([`crate::ModuleSpec::describe`]): its code image.
    pub(crate) name: String,
    pub(crate) image: String,
}

/// Code objects loaded on the device.
#[derive(Debug, Default)]
pub(crate) struct ModuleTable {
    pub(crate) loaded: RwLock<Vec<Loaded>>,
}
