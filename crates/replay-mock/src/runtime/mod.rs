//! The application-facing runtime ([`SimRuntime`]): what a GPU application (or a test playing
//! one) calls, and where the replay service is invoked, as a real backend's interception does.
//!
//! This file is the runtime itself: its builder, its agents, queues and memory engines, what
//! its entry points share (the write gate, the release of idle pools), faults, checks and
//! shutdown, and the [`Completion`] its submissions return. Beside it, each adding methods to
//! [`SimRuntime`]: `memory` (allocation and free reported to the tracker, host reads and
//! writes, digests, code objects) and `submit` (dispatches, batches, barriers, forwarded
//! launches and asynchronous copies, through the replay service).
//!
//! - Completions are [`Completion`] handles; waiting on one on virtual time advances the clock
//!   to the next modelled completion when the device is otherwise quiescent.

mod memory;
mod submit;

use std::sync::{Arc, OnceLock, Weak};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use replay_core::{
    AgentId, BackendError, Clock, DigestKey, Dispatch, OutcomeRecord, Policy, QueueId,
    ReplayService, WriteGate,
};
use replay_memory::{MemoryEngine, Tracker};

use crate::agent::SimAgent;
use crate::clock::SimClock;
use crate::error::SimError;
use crate::fault::{Fault, FaultId, FaultMode};
use crate::gpu::SimGpu;
use crate::invariant::{Violation, WaitBounds};
use crate::kernel::KernelError;
use crate::memory::SimMemory;
use crate::module::SimModuleVariables;
use crate::queue::Signal;
use crate::state::{AgentConfig, GpuShared, SimConfig};

/// A queue of an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueRef {
    /// The agent.
    pub agent: AgentId,
    /// The queue.
    pub queue: QueueId,
}

type ReportSlot = Arc<OnceLock<Result<Option<OutcomeRecord>, BackendError>>>;

/// The completion of one dispatch (or barrier, or asynchronous copy).
#[derive(Clone)]
pub struct Completion {
    signal: Arc<Signal>,
    gpu: Arc<GpuShared>,
    report: ReportSlot,
    /// Agent.
    pub agent: AgentId,
    /// Queue (`None` for a copy).
    pub queue: Option<QueueId>,
    /// The runtime's handle of the submission (`Dispatch::handle`).
    pub handle: u64,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("agent", &self.agent)
            .field("queue", &self.queue)
            .field("handle", &self.handle)
            .field("fired", &self.signal.fired())
            .finish()
    }
}

impl Completion {
    /// Blocks until the completion fired; returns the execution's error, if any. On virtual
    /// time this advances the clock to the next modelled completion when nothing else can
    /// progress (injected stalls end when the window abandons them or at their wall cap).
    pub fn wait(&self) -> Result<(), KernelError> {
        let s = Arc::clone(&self.signal);
        if !self.gpu.wait_for(&move || s.is_done()) {
            return Err(KernelError::Lost);
        }
        self.signal.error().map_or(Ok(()), Err)
    }

    /// Waits up to `timeout` of wall time; `true` once fired.
    pub fn wait_wall(&self, timeout: Duration) -> bool {
        self.signal.wait_wall(timeout)
    }

    /// Whether it fired.
    pub fn is_done(&self) -> bool {
        self.signal.is_done()
    }

    /// How often it fired (exactly once when the simulator and the window behave).
    pub fn fired(&self) -> u32 {
        self.signal.fired()
    }

    /// The error of the execution that completed it.
    pub fn error(&self) -> Option<KernelError> {
        self.signal.error()
    }

    /// Whether the submission reached the service (always, once `dispatch` returned; for a
    /// forwarded one, once the runtime thread handed it over).
    pub fn submitted(&self) -> bool {
        self.report.get().is_some()
    }

    /// The outcome record the service produced (`None` without a service, for an ordinary
    /// submission, or while a forwarded submission is still queued).
    pub fn record(&self) -> Option<OutcomeRecord> {
        self.report
            .get()
            .and_then(|r| r.as_ref().ok().cloned().flatten())
    }

    /// Waits until the submission was handed to the service; its record, or the error the
    /// service returned.
    pub fn wait_submitted(&self) -> Result<Option<OutcomeRecord>, BackendError> {
        let r = Arc::clone(&self.report);
        self.gpu.wait_for(&move || r.get().is_some());
        self.report.get().cloned().unwrap_or_else(|| {
            Err(BackendError::on(self.agent, "forward submission").error(
                replay_core::BackendErrorKind::DeviceLost,
                "the simulator was shut down before the runtime thread submitted it",
            ))
        })
    }
}

/// Builds a [`SimRuntime`].
#[derive(Debug, Default)]
pub struct SimRuntimeBuilder {
    clock: Option<Arc<SimClock>>,
    config: SimConfig,
    agents: Vec<AgentConfig>,
    service: Option<Arc<ReplayService>>,
    digest_key: Option<DigestKey>,
    tracker: Option<Arc<Tracker>>,
}

impl SimRuntimeBuilder {
    /// The clock (default: a fresh virtual clock). Give the replay service the same one.
    pub fn clock(mut self, clock: Arc<SimClock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Simulator behaviour.
    pub fn config(mut self, config: SimConfig) -> Self {
        self.config = config;
        self
    }

    /// Adds an agent.
    pub fn agent(mut self, config: AgentConfig) -> Self {
        self.agents.push(config);
        self
    }

    /// Adds `n` agents of the same shape.
    pub fn agents(mut self, n: usize, config: AgentConfig) -> Self {
        self.agents.extend(std::iter::repeat_n(config, n));
        self
    }

    /// The replay service dispatches go through.
    pub fn service(mut self, service: Arc<ReplayService>) -> Self {
        self.service = Some(service);
        self
    }

    /// A fixed digest key for the memory engines (reproducible digests).
    pub fn digest_key(mut self, key: DigestKey) -> Self {
        self.digest_key = Some(key);
        self
    }

    /// A tracker to share (default: a fresh one).
    pub fn tracker(mut self, tracker: Arc<Tracker>) -> Self {
        self.tracker = Some(tracker);
        self
    }

    /// Builds the runtime (one default agent when none was added).
    pub fn build(self) -> SimRuntime {
        let clock = self.clock.unwrap_or_else(SimClock::virtual_time);
        let tracker = self.tracker.unwrap_or_default();
        let gpu = SimGpu::new(clock, self.config, Arc::clone(&tracker));
        let modules = Arc::new(SimModuleVariables {
            gpu: Arc::clone(&gpu.shared),
        });
        let rt = SimRuntime {
            inner: Arc::new(RuntimeInner {
                gpu,
                tracker,
                engines: RwLock::new(Vec::new()),
                modules,
                service: RwLock::new(self.service),
                forwarder: Mutex::new(None),
                digest_key: self.digest_key,
            }),
        };
        let agents = if self.agents.is_empty() {
            vec![AgentConfig::default()]
        } else {
            self.agents
        };
        for a in agents {
            rt.add_agent(a);
        }
        rt
    }
}

struct Forward {
    agent: Arc<SimAgent>,
    engine: Arc<MemoryEngine>,
    service: Option<Arc<ReplayService>>,
    dispatch: Dispatch,
    report: ReportSlot,
}

struct Forwarder {
    tx: std::sync::mpsc::Sender<Forward>,
    thread: JoinHandle<()>,
    id: ThreadId,
}

struct RuntimeInner {
    gpu: SimGpu,
    tracker: Arc<Tracker>,
    engines: RwLock<Vec<Arc<MemoryEngine>>>,
    modules: Arc<SimModuleVariables>,
    service: RwLock<Option<Arc<ReplayService>>>,
    forwarder: Mutex<Option<Forwarder>>,
    digest_key: Option<DigestKey>,
}

impl RuntimeInner {
    fn shutdown(&self) {
        if let Some(f) = self.forwarder.lock().take() {
            drop(f.tx);
            if f.id != std::thread::current().id() {
                let _ = f.thread.join();
            }
        }
        self.gpu.shutdown();
    }
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The simulated GPU runtime. Cheap to clone; the device shuts down when the last clone is
/// dropped (or at [`SimRuntime::shutdown`]). A tool callback should hold a [`WeakRuntime`]:
/// the service holds the tool, and the runtime holds the service.
#[derive(Clone)]
pub struct SimRuntime {
    inner: Arc<RuntimeInner>,
}

impl std::fmt::Debug for SimRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimRuntime")
            .field("gpu", &self.inner.gpu)
            .field("service", &self.inner.service.read().is_some())
            .finish_non_exhaustive()
    }
}

/// A weak handle to a [`SimRuntime`], for tool callbacks.
#[derive(Clone, Debug)]
pub struct WeakRuntime(Weak<RuntimeInner>);

impl std::fmt::Debug for RuntimeInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeInner").finish_non_exhaustive()
    }
}

impl WeakRuntime {
    /// The runtime, if it is still alive.
    pub fn upgrade(&self) -> Option<SimRuntime> {
        self.0.upgrade().map(|inner| SimRuntime { inner })
    }
}

/// A fixed key for [`SimRuntime::digest_agent_memory`], so digests compare across runtimes.
pub const FINAL_DIGEST_KEY: DigestKey = DigestKey([
    0x6b72_6570_6c61_7921,
    0x7369_6d75_6c61_7465,
    0x6669_6e61_6c5f_6b65,
    0x795f_6f66_5f73_696d,
]);

impl SimRuntime {
    /// A builder.
    pub fn builder() -> SimRuntimeBuilder {
        SimRuntimeBuilder::default()
    }

    /// One default agent on virtual time, no service.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A weak handle.
    pub fn downgrade(&self) -> WeakRuntime {
        WeakRuntime(Arc::downgrade(&self.inner))
    }

    pub(crate) fn shared(&self) -> &Arc<GpuShared> {
        &self.inner.gpu.shared
    }

    /// The device.
    pub fn gpu(&self) -> &SimGpu {
        &self.inner.gpu
    }

    /// The clock.
    pub fn clock(&self) -> Arc<SimClock> {
        Arc::clone(self.inner.gpu.clock())
    }

    /// The tracker allocations are reported to.
    pub fn tracker(&self) -> Arc<Tracker> {
        Arc::clone(&self.inner.tracker)
    }

    /// The module-variable enumeration the memory engines use.
    pub fn module_variables(&self) -> Arc<SimModuleVariables> {
        Arc::clone(&self.inner.modules)
    }

    /// The replay service, if any.
    pub fn service(&self) -> Option<Arc<ReplayService>> {
        self.inner.service.read().clone()
    }

    /// Installs (or removes) the replay service.
    pub fn set_service(&self, service: Option<Arc<ReplayService>>) {
        *self.inner.service.write() = service;
    }

    /// Adds an agent, its queues, copy engine and memory engine.
    pub fn add_agent(&self, config: AgentConfig) -> AgentId {
        let pageable = config.pageable_bytes;
        let id = self.inner.gpu.add_agent(config);
        let memory = self.inner.gpu.memory(id).expect("agent just added");
        let mut engine = MemoryEngine::new(
            id,
            Arc::clone(&self.inner.tracker),
            memory,
            Arc::clone(&self.inner.modules) as Arc<dyn replay_memory::ModuleVariables>,
        )
        .with_host_available_bytes(pageable)
        .with_clock(Arc::clone(self.inner.gpu.clock()) as Arc<dyn replay_core::Clock>);
        if let Some(k) = self.inner.digest_key {
            engine = engine.with_digest_key(k);
        }
        let mut engines = self.inner.engines.write();
        debug_assert_eq!(engines.len() as u64, id.0);
        engines.push(Arc::new(engine));
        id
    }

    /// Adds a queue to an agent.
    pub fn add_queue(&self, agent: AgentId) -> Result<QueueRef, SimError> {
        let queue = self.inner.gpu.add_queue(agent)?;
        Ok(QueueRef { agent, queue })
    }

    /// Agent ids.
    pub fn agents(&self) -> Vec<AgentId> {
        self.inner.gpu.agents()
    }

    /// The queues of an agent.
    pub fn queues(&self, agent: AgentId) -> Vec<QueueRef> {
        self.inner
            .gpu
            .queues(agent)
            .into_iter()
            .map(|queue| QueueRef { agent, queue })
            .collect()
    }

    /// The `index`-th queue of an agent. Panics when it does not exist (a test's mistake).
    pub fn queue(&self, agent: AgentId, index: usize) -> QueueRef {
        *self
            .queues(agent)
            .get(index)
            .unwrap_or_else(|| panic!("agent {agent} has no queue {index}"))
    }

    /// The [`replay_core::Agent`] of an agent. Panics for an unknown agent.
    pub fn agent(&self, id: AgentId) -> Arc<SimAgent> {
        self.inner
            .gpu
            .agent(id)
            .unwrap_or_else(|| panic!("agent {id} does not exist"))
    }

    /// The [`replay_core::DeviceMemory`] of an agent. Panics for an unknown agent.
    pub fn memory(&self, id: AgentId) -> Arc<SimMemory> {
        self.inner
            .gpu
            .memory(id)
            .unwrap_or_else(|| panic!("agent {id} does not exist"))
    }

    /// The memory engine (the [`replay_core::Snapshotter`]) of an agent. Panics for an unknown
    /// agent.
    pub fn engine(&self, id: AgentId) -> Arc<MemoryEngine> {
        usize::try_from(id.0)
            .ok()
            .and_then(|i| self.inner.engines.read().get(i).cloned())
            .unwrap_or_else(|| panic!("agent {id} does not exist"))
    }

    // ----- what the entry points share -----

    /// Releases `agent`'s pooled backing when it sat unused for the service's
    /// `pool_idle_release`, as a backend does from its entry points.
    fn release_idle(&self, agent: AgentId) {
        if let (Some(svc), Some(engine)) = (
            self.service(),
            usize::try_from(agent.0)
                .ok()
                .and_then(|i| self.inner.engines.read().get(i).cloned()),
        ) {
            engine.release_idle(svc.policy().pool_idle_release);
        }
    }

    /// The reader side of `agent`'s gate for a write the service does not replay (SPEC §6 step
    /// 4), waiting while a window holds it; nothing without a service.
    fn write_gate(&self, agent: AgentId) -> Option<WriteGate> {
        self.service().map(|s| s.enter_write(agent))
    }

    // ----- faults, checks, lifecycle -----

    /// Arms a fault on an agent.
    pub fn inject(&self, agent: AgentId, fault: Fault, mode: FaultMode) -> FaultId {
        self.inner.gpu.inject(agent, fault, mode)
    }

    /// How often an injected fault fired.
    pub fn fault_hits(&self, id: FaultId) -> u32 {
        self.inner.gpu.fault_hits(id)
    }

    /// Waits until every queue and copy engine completed everything submitted so far.
    pub fn wait_idle(&self) {
        self.inner.gpu.wait_idle();
    }

    /// Runs the invariant checks with the service's bounds (the default policy's without a
    /// service). Call after [`SimRuntime::wait_idle`].
    pub fn check_invariants(&self) -> Result<(), Vec<Violation>> {
        let policy = self
            .service()
            .map(|s| s.policy())
            .unwrap_or_else(|| Arc::new(Policy::default()));
        self.inner
            .gpu
            .invariants()
            .check(&WaitBounds::from_policy(&policy))
    }

    /// Time on the simulator's clock.
    pub fn now(&self) -> Duration {
        self.inner.gpu.clock().now()
    }

    /// Stops the runtime thread and the device's workers. Later calls fail with
    /// [`SimError::Shutdown`].
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

impl Default for SimRuntime {
    fn default() -> Self {
        Self::new()
    }
}
