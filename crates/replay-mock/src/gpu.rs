//! The simulated device (SPEC §2): agents, their queues and copy engines, memory, the clock, and
//! the shared services (recorder, invariant checker, faults, counters, tracker).
//!
//! [`SimGpu`] owns the worker threads and joins them when dropped. Handles ([`SimAgent`],
//! [`SimMemory`]) share its state ([`crate::state`]) and stay usable (answering "device lost")
//! after shutdown. The worker threads live here too: each lane's loop (packets, barriers,
//! stalls, copies and digests, completing in order, SPEC §9.1) and one kernel execution, a
//! panic in the body caught and reported as the dispatch's error. The device is above every
//! role file; only the runtime ([`crate::runtime`]) uses it.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use replay_core::{AgentId, Clock, MemoryClass, QueueId};
use replay_memory::Tracker;

use crate::agent::SimAgent;
use crate::clock::SimClock;
use crate::counters::{CounterStore, CounterValues};
use crate::error::SimError;
use crate::expect::Recorder;
use crate::fault::{Fault, FaultId, FaultMode, Faults};
use crate::heap::{AllocInfo, Area, Heap, Owner, Pool};
use crate::invariant::Invariants;
use crate::kernel::{modelled_seconds, KernelCtx, KernelError, Role, RunResult};
use crate::memory::SimMemory;
use crate::queue::{KernelWork, Lane, LaneKind, Progress, Work, WorkerState};
use crate::state::{AgentConfig, AgentShared, GpuShared, KernargPool, ModuleTable, SimConfig};

thread_local! {
    /// Set on the simulator's worker threads.
    static IS_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Lane counters, for tests that check the read index is not what drains wait on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneIndices {
    /// Write index.
    pub submitted: u64,
    /// Read index (packets taken by the worker).
    pub consumed: u64,
    /// Packets that completed.
    pub completed: u64,
    /// What the worker is doing.
    pub worker: WorkerState,
}

impl LaneIndices {
    fn of(l: &Lane) -> Self {
        Self {
            submitted: l.submitted(),
            consumed: l.consumed(),
            completed: l.completed(),
            worker: l.worker(),
        }
    }
}

impl GpuShared {
    fn spawn_lane(self: &Arc<Self>, agent: &Arc<AgentShared>, lane: &Arc<Lane>) {
        let (g, a, l) = (Arc::clone(self), Arc::clone(agent), Arc::clone(lane));
        let name = match lane.kind {
            LaneKind::Queue(q) => format!("sim-a{}-q{}", agent.id, q),
            LaneKind::Copy => format!("sim-a{}-copy", agent.id),
        };
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                IS_WORKER.with(|w| w.set(true));
                run_lane(g, a, l)
            })
            .expect("spawn a simulator worker thread");
        self.threads.lock().push(h);
    }
}

/// The worker loop of one lane.
pub(crate) fn run_lane(gpu: Arc<GpuShared>, agent: Arc<AgentShared>, lane: Arc<Lane>) {
    while let Some((seq, work)) = lane.next(&gpu.progress) {
        gpu.progress.notify();
        match work {
            Work::Kernel(k) => execute(&gpu, &agent, &lane, *k),
            Work::Barrier { completion } => {
                if let Some(c) = completion {
                    gpu.fire(&c, None);
                }
            }
            Work::After { lane: copy, seq } => {
                // A restore ordered ahead of the work behind this packet.
                let _ = gpu.wait_for(&|| copy.completed() >= seq || lane.is_shut_down());
            }
            Work::Hold(h) => {
                lane.set_held(&h);
                gpu.progress.notify();
                gpu.wait_hold(&h);
                lane.set_worker(WorkerState::Running);
            }
            Work::AppCopy {
                dst,
                src,
                len,
                completion,
            } => {
                let r = gpu.app_copy(&agent, dst, src, len);
                gpu.fire(&completion, r.err().map(KernelError::Fault));
            }
            Work::Copies { ops, fail, result } => {
                let r = match fail {
                    Some(msg) => Err(msg),
                    None => gpu.run_copies(&agent, &ops).map(|()| Vec::new()),
                };
                *result.lock() = Some(r);
            }
            Work::Digests {
                ops,
                key,
                fail,
                result,
            } => {
                let r = match fail {
                    Some(msg) => Err(msg),
                    None => gpu.run_digests(&agent, &ops, key),
                };
                *result.lock() = Some(r);
            }
        }
        lane.complete(seq);
        gpu.progress.notify();
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs one kernel execution on a worker thread.
pub(crate) fn execute(gpu: &GpuShared, agent: &AgentShared, lane: &Lane, w: KernelWork) {
    if let Some(h) = &w.pre_hold {
        lane.set_held(h);
        gpu.progress.notify();
        gpu.wait_hold(h);
        lane.set_worker(WorkerState::Running);
        gpu.progress.notify();
    }
    for hook in &w.hooks {
        gpu.run_hook(agent.id, hook);
    }
    gpu.invariants
        .on_execute(agent.id, &w.kernel.name, w.handle, w.role);
    if let Some(d) = w.kernel.duration {
        let deadline = gpu.clock.now() + d;
        lane.set_waiting_virtual(deadline);
        gpu.progress.notify();
        let reached = gpu
            .clock
            .wait_until(deadline, gpu.config.stall_wall_cap, &|| lane.is_shut_down());
        if !reached && !lane.is_shut_down() {
            log::warn!(
                "[replay-mock] agent {}: kernel {:?} waited {:?} of wall time for virtual time to reach {deadline:?}; advancing the clock itself",
                agent.id,
                w.kernel.name,
                gpu.config.stall_wall_cap
            );
            gpu.clock.advance_to(deadline);
        }
        lane.set_worker(WorkerState::Running);
        gpu.progress.notify();
    }
    let mut ctx = KernelCtx::new(
        gpu,
        agent.id,
        &w.kernarg,
        w.grid,
        w.workgroup,
        w.dispatch_id,
    );
    let body = Arc::clone(&w.kernel.body);
    let outcome = catch_unwind(AssertUnwindSafe(|| body(&mut ctx)));
    let error = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(p) => Some(KernelError::Panic {
            kernel: w.kernel.name.to_string(),
            message: panic_message(&*p),
        }),
    };
    if let Some(e) = &error {
        log::warn!(
            "[replay-mock] agent {}: kernel {:?} (dispatch {}): {e}",
            agent.id,
            w.kernel.name,
            w.dispatch_id
        );
    }
    let stats = ctx.stats;
    let counters = CounterValues {
        work_items: ctx.work_items(),
        bytes_read: stats.bytes_read,
        bytes_written: stats.bytes_written,
        instructions: stats.instructions,
    };
    let gpu_seconds = match w.kernel.duration {
        Some(d) => d.as_secs_f64(),
        None => {
            let modelled = modelled_seconds(&counters, agent.config.device_gbps);
            if gpu.config.advance_clock_for_work {
                gpu.clock.advance(Duration::from_secs_f64(modelled));
            }
            modelled
        }
    };
    let pass = match w.role {
        Role::Pass(p) => Some(p),
        Role::Ordinary { .. } => None,
    };
    gpu.counters.record(
        agent.id,
        w.dispatch_id,
        pass,
        w.group,
        counters,
        gpu_seconds,
    );
    let _ = w.result.set(RunResult {
        gpu_seconds,
        counters,
        error: error.clone(),
    });
    if let Some(c) = &w.completion {
        gpu.fire(c, error);
    }
}

/// The simulated GPU. Owns the worker threads; dropping it shuts them down.
pub struct SimGpu {
    pub(crate) shared: Arc<GpuShared>,
}

impl std::fmt::Debug for SimGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimGpu")
            .field("agents", &self.shared.agents.read().len())
            .field("clock", &self.shared.clock.mode())
            .finish_non_exhaustive()
    }
}

impl SimGpu {
    /// An empty device on `clock`, reporting allocations to `tracker`.
    pub fn new(clock: Arc<SimClock>, config: SimConfig, tracker: Arc<Tracker>) -> Self {
        Self {
            shared: Arc::new(GpuShared {
                clock,
                config,
                agents: RwLock::new(Vec::new()),
                recorder: Recorder::default(),
                invariants: Invariants::default(),
                faults: Faults::default(),
                counters: CounterStore::default(),
                progress: Progress::default(),
                tracker,
                modules: ModuleTable::default(),
                vmem: Mutex::default(),
                pending: Mutex::new(HashMap::new()),
                holds: Mutex::new(HashMap::new()),
                threads: Mutex::new(Vec::new()),
                next_id: AtomicU64::new(1),
                next_queue: AtomicU64::new(0),
                active_polls: AtomicUsize::new(0),
                shutdown: AtomicBool::new(false),
            }),
        }
    }

    /// Adds an agent with its queues, copy engine and kernarg pool; ids count from 0.
    pub fn add_agent(&self, config: AgentConfig) -> AgentId {
        let sh = &self.shared;
        let mut agents = sh.agents.write();
        let id = AgentId(agents.len() as u64);
        let heap = Heap::new(
            id,
            config.alignment,
            [
                config.device_bytes,
                config.pinned_bytes,
                config.pageable_bytes,
            ],
        );
        let kernarg = (config.kernarg_pool_bytes > 0)
            .then(|| {
                heap.alloc(
                    config.kernarg_pool_bytes,
                    MemoryClass::KERNARG,
                    Owner::Runtime,
                    Area::Library,
                    Pool::Device,
                    None,
                )
                .ok()
            })
            .flatten()
            .map(|a| {
                sh.tracker
                    .record_alloc(id, a.base, a.size, MemoryClass::KERNARG);
                KernargPool {
                    base: a.base,
                    size: a.size,
                    cursor: Mutex::new(0),
                }
            });
        let queues: Vec<Arc<Lane>> = (0..config.queues)
            .map(|_| {
                let q = QueueId(sh.next_queue.fetch_add(1, Ordering::Relaxed));
                Lane::new(LaneKind::Queue(q), id)
            })
            .collect();
        let agent = Arc::new(AgentShared {
            id,
            config,
            heap,
            queues: RwLock::new(queues),
            copy: Lane::new(LaneKind::Copy, id),
            tickets: Mutex::new(HashMap::new()),
            fences: Mutex::new(HashMap::new()),
            backings: Mutex::new(HashMap::new()),
            kernarg,
            foreign_copies: Mutex::new(Vec::new()),
            ordered: Mutex::new(Vec::new()),
        });
        agents.push(Arc::clone(&agent));
        drop(agents);
        for l in agent.lanes() {
            sh.spawn_lane(&agent, &l);
        }
        id
    }

    /// Adds a queue to an agent.
    pub fn add_queue(&self, agent: AgentId) -> Result<QueueId, SimError> {
        let a = self.shared.agent_or_err(agent)?;
        let q = QueueId(self.shared.next_queue.fetch_add(1, Ordering::Relaxed));
        let lane = Lane::new(LaneKind::Queue(q), agent);
        a.queues.write().push(Arc::clone(&lane));
        self.shared.spawn_lane(&a, &lane);
        Ok(q)
    }

    /// Agent ids.
    pub fn agents(&self) -> Vec<AgentId> {
        self.shared.agents.read().iter().map(|a| a.id).collect()
    }

    /// Queue ids of an agent, in creation order.
    pub fn queues(&self, agent: AgentId) -> Vec<QueueId> {
        self.shared
            .agent_shared(agent)
            .map(|a| {
                a.queues
                    .read()
                    .iter()
                    .filter_map(|l| match l.kind {
                        LaneKind::Queue(q) => Some(q),
                        LaneKind::Copy => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The [`replay_core::Agent`] of an agent.
    pub fn agent(&self, id: AgentId) -> Option<Arc<SimAgent>> {
        self.shared.agent_shared(id).map(|a| {
            Arc::new(SimAgent {
                gpu: Arc::clone(&self.shared),
                agent: a,
            })
        })
    }

    /// The [`replay_core::DeviceMemory`] of an agent.
    pub fn memory(&self, id: AgentId) -> Option<Arc<SimMemory>> {
        self.shared.agent_shared(id).map(|a| {
            Arc::new(SimMemory {
                gpu: Arc::clone(&self.shared),
                agent: a,
            })
        })
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<SimClock> {
        &self.shared.clock
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.shared.config
    }

    /// The event recorder.
    pub fn recorder(&self) -> &Recorder {
        &self.shared.recorder
    }

    /// The invariant checker.
    pub fn invariants(&self) -> &Invariants {
        &self.shared.invariants
    }

    /// The simulated counters.
    pub fn counters(&self) -> &CounterStore {
        &self.shared.counters
    }

    /// The allocation tracker the device reports to.
    pub fn tracker(&self) -> &Arc<Tracker> {
        &self.shared.tracker
    }

    /// Arms a fault on an agent.
    pub fn inject(&self, agent: AgentId, fault: Fault, mode: FaultMode) -> FaultId {
        self.shared.faults.inject(agent, fault, mode)
    }

    /// How often an injected fault fired.
    pub fn fault_hits(&self, id: FaultId) -> u32 {
        self.shared.faults.hits(id)
    }

    /// Disarms every fault.
    pub fn clear_faults(&self) {
        self.shared.faults.clear();
    }

    /// Releases every injected stall now.
    pub fn release_stalls(&self) {
        self.shared.release_holds();
    }

    /// Waits until every queue and copy engine has completed what was submitted so far.
    pub fn wait_idle(&self) {
        self.shared.wait_idle();
    }

    /// Indices of a queue.
    pub fn queue_indices(&self, agent: AgentId, queue: QueueId) -> Option<LaneIndices> {
        self.shared
            .agent_shared(agent)?
            .queue(queue)
            .map(|l| LaneIndices::of(&l))
    }

    /// Indices of an agent's copy engine.
    pub fn copy_engine_indices(&self, agent: AgentId) -> Option<LaneIndices> {
        self.shared
            .agent_shared(agent)
            .map(|a| LaneIndices::of(&a.copy))
    }

    /// Live allocations of an agent (every owner), in address order.
    pub fn allocations(&self, agent: AgentId) -> Vec<AllocInfo> {
        self.shared
            .agent_shared(agent)
            .map(|a| {
                a.heap
                    .all()
                    .iter()
                    .map(|x| AllocInfo {
                        base: x.base,
                        size: x.size,
                        class: x.class,
                        owner: x.owner,
                        pool: x.pool,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Bytes in use in a pool of an agent.
    pub fn pool_used(&self, agent: AgentId, pool: Pool) -> u64 {
        self.shared
            .agent_shared(agent)
            .map(|a| a.heap.used(pool))
            .unwrap_or(0)
    }

    /// Stops every worker thread (releasing injected stalls first) and joins them. Work still
    /// queued is dropped. Idempotent; also run on drop.
    pub fn shutdown(&self) {
        let sh = &self.shared;
        if sh.shutdown.swap(true, Ordering::AcqRel) {
            return;
        }
        sh.release_holds();
        for a in sh.agents.read().iter() {
            for l in a.lanes() {
                l.shut_down();
            }
        }
        // Only a worker can be joining itself; asking other threads for their id would allocate
        // a handle, never freed, on threads Rust did not start (a C tool's main thread).
        let me = IS_WORKER
            .try_with(std::cell::Cell::get)
            .unwrap_or(false)
            .then(|| std::thread::current().id());
        let threads: Vec<_> = sh.threads.lock().drain(..).collect();
        for t in threads {
            if Some(t.thread().id()) != me {
                let _ = t.join();
            }
        }
    }
}

impl Drop for SimGpu {
    fn drop(&mut self) {
        self.shutdown();
    }
}
