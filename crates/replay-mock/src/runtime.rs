//! The application-facing runtime ([`SimRuntime`]): what a GPU application (or a test playing
//! one) calls, and where the replay service is invoked, as a real backend's interception does.
//!
//! - Allocation and free go through the runtime, which reports them to the [`Tracker`] (a free
//!   is recorded before the memory is released). An allocation that fails for lack of device
//!   memory releases the memory layer's pools and is retried once (SPEC §7.3).
//! - [`SimRuntime::dispatch`] builds a [`Dispatch`] (kernel key, argument block, reserved
//!   completion) and calls [`ReplayService::submit`] on the calling thread, as an intercepted
//!   launch does; without a service (or with an inactive one) the dispatch just runs.
//! - [`SimRuntime::dispatch_forwarded`] hands the submission to the runtime's own thread, which
//!   calls the service with [`Origin::RuntimeThread`] (SPEC §9.1: doorbells rung from inside an
//!   interceptor are deferred to the runtime's thread). From inside a tool callback this is
//!   tool work recognised by the core's per-agent marker.
//! - Completions are [`Completion`] handles; waiting on one on virtual time advances the clock
//!   to the next modelled completion when the device is otherwise quiescent.

use std::sync::{Arc, OnceLock, Weak};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use replay_core::{
    AgentId, BackendError, Clock, Digest128, DigestKey, Dim3, Dispatch, DispatchId, DispatchInfo,
    DispatchReport, KernelId, KernelKey, MemoryClass, Origin, OutcomeRecord, Policy, QueueId,
    ReplayService, SubmissionKind, WriteGate,
};
use replay_memory::{MemoryEngine, Tracker};
use smallvec::SmallVec;

use crate::agent::SimAgent;
use crate::clock::SimClock;
use crate::error::SimError;
use crate::expect::Event;
use crate::fault::{Fault, FaultId, FaultMode};
use crate::gpu::SimGpu;
use crate::heap::{agent_of, Owner};
use crate::invariant::{Violation, WaitBounds};
use crate::kernel::{Kernel, KernelError};
use crate::memory::SimMemory;
use crate::module::{Module, ModuleSpec, SimModuleVariables};
use crate::queue::{Signal, Work};
use crate::state::{AgentConfig, ForeignCopy, GpuShared, Payload, Pending, SimConfig};

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

    // ----- memory -----

    /// Allocates `size` bytes of `class` on `agent` and reports it to the tracker.
    /// `TOOL_OWNED` memory is marked as the tool's. When the device is full, the memory layer's
    /// pools are released and the allocation retried once.
    pub fn alloc(&self, agent: AgentId, size: u64, class: MemoryClass) -> Result<u64, SimError> {
        self.release_idle(agent);
        match self.shared().alloc_mem(agent, size, class, true, None) {
            Err(SimError::OutOfMemory { .. }) if self.shared().agent_shared(agent).is_some() => {
                self.engine(agent).release_pools();
                self.shared().alloc_mem(agent, size, class, true, None)
            }
            r => r,
        }
    }

    /// Allocates `size` bytes of `class` on `agent` at the address `base` (standalone replay of
    /// a capture, SPEC §13: pointers stored in the data stay valid), reported to the tracker.
    /// An address in use, or one of another agent, is [`SimError::AddressInUse`].
    pub fn alloc_at(
        &self,
        agent: AgentId,
        base: u64,
        size: u64,
        class: MemoryClass,
    ) -> Result<u64, SimError> {
        self.shared()
            .alloc_mem(agent, size, class, true, Some(base))
    }

    /// Allocates memory the backend does not see (never reported to the tracker): a
    /// virtual-memory mapping made through an unwrapped path, a device-side heap. The runtime
    /// still knows it ([`SimMemory`]'s `query_pointer`): an argument into it is captured when it
    /// is fine-grained, managed or pinned, and declines `untracked_memory` otherwise (SPEC
    /// §7.1); memory no argument points into is not restored.
    pub fn alloc_untracked(
        &self,
        agent: AgentId,
        size: u64,
        class: MemoryClass,
    ) -> Result<u64, SimError> {
        self.shared().alloc_mem(agent, size, class, false, None)
    }

    /// Frees memory made by [`SimRuntime::alloc`] or [`SimRuntime::alloc_untracked`]; the
    /// tracker hears of it before the memory is released.
    pub fn free(&self, agent: AgentId, base: u64) -> Result<(), SimError> {
        self.shared().free_mem(agent, base)
    }

    /// Makes another agent's allocation at `base` accessible to `agent`: reported to the
    /// tracker for `agent` as `PEER` memory.
    pub fn map_peer(&self, agent: AgentId, base: u64) -> Result<(), SimError> {
        let owner = agent_of(base).ok_or(SimError::InvalidFree { agent, addr: base })?;
        let a = self
            .shared()
            .agent_or_err(owner)?
            .heap
            .get(base)
            .ok_or(SimError::InvalidFree { agent, addr: base })?;
        self.inner
            .tracker
            .record_alloc(agent, base, a.size, MemoryClass::PEER);
        Ok(())
    }

    /// Ends a peer mapping made by [`SimRuntime::map_peer`].
    pub fn unmap_peer(&self, agent: AgentId, base: u64) {
        self.inner.tracker.record_free(agent, base);
    }

    /// Writes device memory from the host (synchronous; read-only memory included). It takes
    /// the reader side of the agent's gate ([`ReplayService::enter_write`]) across the write,
    /// so while a replay window is open on that agent it waits for the window's end, and no
    /// restore undoes it; from inside a tool callback (tool work) it writes at once.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), SimError> {
        let agent = agent_of(addr).unwrap_or_default();
        let _gate = self.write_gate(agent);
        Ok(self.shared().device_write(agent, addr, data, true)?)
    }

    /// The reader side of `agent`'s gate for a write the service does not replay (SPEC §6 step
    /// 4), waiting while a window holds it; nothing without a service.
    fn write_gate(&self, agent: AgentId) -> Option<WriteGate> {
        self.service().map(|s| s.enter_write(agent))
    }

    /// Reads device memory to the host (synchronous).
    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, SimError> {
        let agent = agent_of(addr).unwrap_or_default();
        let mut v = vec![0u8; len];
        self.shared().device_read(agent, addr, &mut v, true)?;
        Ok(v)
    }

    /// Writes `u32`s.
    pub fn write_u32s(&self, addr: u64, v: &[u32]) -> Result<(), SimError> {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.write(addr, &b)
    }

    /// Reads `n` `u32`s.
    pub fn read_u32s(&self, addr: u64, n: usize) -> Result<Vec<u32>, SimError> {
        Ok(self
            .read(addr, n * 4)?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Fills `len` bytes with `byte`.
    pub fn fill(&self, addr: u64, len: usize, byte: u8) -> Result<(), SimError> {
        self.write(addr, &vec![byte; len])
    }

    /// Digest of all application memory of an agent: every allocation made through the runtime
    /// (tracked or not) and every module variable, in address order, with base and size; never
    /// the kernarg pool, tool memory or backing memory. Keyed with [`FINAL_DIGEST_KEY`], so
    /// two runtimes holding the same bytes at the same addresses give the same digest.
    pub fn digest_agent_memory(&self, agent: AgentId) -> Digest128 {
        let mut buf = Vec::new();
        if let Some(a) = self.shared().agent_shared(agent) {
            for x in a.heap.all() {
                if matches!(x.owner, Owner::App | Owner::Unreported | Owner::Module) {
                    buf.extend_from_slice(&x.base.to_le_bytes());
                    buf.extend_from_slice(&x.size.to_le_bytes());
                    buf.extend_from_slice(&x.data.read());
                }
            }
        }
        replay_core::digest::digest(FINAL_DIGEST_KEY, &buf)
    }

    // ----- code objects -----

    /// Loads a code object on an agent: allocates its variables, makes its kernels.
    pub fn load_module(&self, agent: AgentId, spec: ModuleSpec) -> Result<Module, SimError> {
        self.shared().load_module(agent, spec)
    }

    /// Unloads a code object: frees its variables and makes the service forget its kernels.
    pub fn unload_module(&self, module: &Module) -> Result<(), SimError> {
        self.shared()
            .unload_module(module.agent, module.code_object)?;
        self.inner
            .tracker
            .record_unload(module.agent, module.code_object);
        if let Some(s) = self.service() {
            s.forget_code_object(module.agent, module.code_object);
        }
        Ok(())
    }

    // ----- submissions -----

    fn prepare(
        &self,
        queue: QueueRef,
        payload: Payload,
        args: &[u8],
        grid: Dim3,
        origin: Origin,
    ) -> Result<(Dispatch, Completion), SimError> {
        let sh = self.shared();
        if sh.is_shut_down() {
            return Err(SimError::Shutdown);
        }
        let a = sh.agent_or_err(queue.agent)?;
        if a.queue(queue.queue).is_none() {
            return Err(SimError::UnknownQueue {
                agent: queue.agent,
                queue: queue.queue,
            });
        }
        let handle = sh.next_id();
        let signal = Signal::new();
        let (kind, info_kernel) = match &payload {
            Payload::Kernel(k) => (SubmissionKind::KernelDispatch, Some(k.clone())),
            Payload::Barrier => (SubmissionKind::Barrier, None),
            Payload::Batch(_) => (SubmissionKind::MultiPacket, None),
        };
        let name: Arc<str> = match (&info_kernel, &payload) {
            (Some(k), _) => Arc::clone(&k.name),
            (None, Payload::Batch(_)) => Arc::from("<batch>"),
            (None, _) => Arc::from("<barrier>"),
        };
        // The runtime copies the argument block into its kernarg pool, as HSA runtimes do.
        if let Some(pool) = &a.kernarg {
            if !args.is_empty() && (args.len() as u64) <= pool.size {
                let len = args.len() as u64;
                let at = {
                    let mut c = pool.cursor.lock();
                    if *c + len > pool.size {
                        *c = 0;
                    }
                    let at = pool.base + *c;
                    *c = (*c + len).div_ceil(64) * 64;
                    at
                };
                let _ = sh.device_write(queue.agent, at, args, true);
            }
        }
        let info = DispatchInfo {
            agent: queue.agent,
            queue: queue.queue,
            dispatch_id: DispatchId(0),
            kernel_id: info_kernel.as_ref().map(Kernel::id).unwrap_or(KernelId(0)),
            kernel_name: Arc::clone(&name),
            grid,
            workgroup: info_kernel
                .as_ref()
                .map(|k| k.workgroup)
                .unwrap_or_default(),
            private_segment_size: info_kernel
                .as_ref()
                .map(|k| k.private_segment_size)
                .unwrap_or(0),
            group_segment_size: info_kernel
                .as_ref()
                .map(|k| k.group_segment_size)
                .unwrap_or(0),
        };
        let kernel = info_kernel
            .as_ref()
            .map(|k| k.key(queue.agent))
            .unwrap_or(KernelKey {
                agent: queue.agent,
                code_object: 0,
                symbol: 0,
            });
        sh.pending.lock().insert(
            handle,
            Pending {
                payload,
                completion: Arc::clone(&signal),
                from_callback: replay_core::locks::thread_in_callback(),
            },
        );
        sh.invariants
            .track_completion(queue.agent, name, handle, Arc::clone(&signal));
        let dispatch = Dispatch {
            info,
            kernel,
            kind,
            kernarg: SmallVec::from_slice(args),
            arg_layout: Default::default(),
            origin,
            handle,
        };
        let completion = Completion {
            signal,
            gpu: Arc::clone(sh),
            report: Arc::new(OnceLock::new()),
            agent: queue.agent,
            queue: Some(queue.queue),
            handle,
        };
        Ok((dispatch, completion))
    }

    /// The [`Dispatch`] that [`SimRuntime::dispatch`] would hand to the service, and its
    /// completion, without submitting it: for driving a [`SimAgent`] directly (the agent finds
    /// the kernel and the completion through `Dispatch::handle`). Release it with
    /// [`SimRuntime::forget_dispatch`] when done.
    pub fn make_dispatch(
        &self,
        queue: QueueRef,
        kernel: &Kernel,
        args: &[u8],
        grid: Dim3,
        origin: Origin,
    ) -> Result<(Dispatch, Completion), SimError> {
        let (d, c) = self.prepare(queue, Payload::Kernel(kernel.clone()), args, grid, origin)?;
        let _ = c.report.set(Ok(None));
        Ok((d, c))
    }

    /// Forgets a dispatch made by [`SimRuntime::make_dispatch`] (the agent no longer knows its
    /// handle). If it never completed, it is no longer counted by the invariant checker.
    pub fn forget_dispatch(&self, completion: &Completion) {
        self.shared().pending.lock().remove(&completion.handle);
        if !completion.is_done() {
            self.shared()
                .invariants
                .untrack_completion(completion.handle);
        }
    }

    fn submit_now(
        gpu: &GpuShared,
        agent: &SimAgent,
        engine: &MemoryEngine,
        service: Option<&ReplayService>,
        dispatch: Dispatch,
    ) -> Result<Option<OutcomeRecord>, BackendError> {
        match Self::try_submit(gpu, agent, engine, service, dispatch) {
            Ok(Some(r)) => Ok(r),
            // Only forwarded submissions are deferred, and those go through the runtime thread.
            Ok(None) => Err(BackendError::on(replay_core::Agent::id(agent), "submit")
                .invalid("a submission from the submitting thread was deferred")),
            Err(e) => Err(e),
        }
    }

    /// Submits through the service; `Ok(None)` when the service deferred it (a forwarded
    /// submission while a window holds the agent): the caller resubmits it later.
    fn try_submit(
        gpu: &GpuShared,
        agent: &SimAgent,
        engine: &MemoryEngine,
        service: Option<&ReplayService>,
        dispatch: Dispatch,
    ) -> Result<Option<Option<OutcomeRecord>>, BackendError> {
        use replay_core::Agent as _;
        let handle = dispatch.handle;
        let r = match service {
            Some(s) => match s.submit(agent, engine, dispatch)? {
                DispatchReport { deferred: true, .. } => return Ok(None),
                DispatchReport { record, .. } => Ok(record),
            },
            None => agent.submit_ordinary(&dispatch).map(|()| None),
        };
        gpu.pending.lock().remove(&handle);
        if r.is_err() {
            gpu.invariants.untrack_completion(handle);
        }
        r.map(Some)
    }

    fn launch(
        &self,
        queue: QueueRef,
        payload: Payload,
        args: &[u8],
        grid: Dim3,
    ) -> Result<Completion, SimError> {
        let (dispatch, completion) =
            self.prepare(queue, payload, args, grid, Origin::SubmittingThread)?;
        let agent = self.agent(queue.agent);
        let engine = self.engine(queue.agent);
        let service = self.service();
        let r = Self::submit_now(self.shared(), &agent, &engine, service.as_deref(), dispatch);
        let _ = completion.report.set(r.clone());
        r?;
        self.release_idle(queue.agent);
        Ok(completion)
    }

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

    /// Launches `kernel` on `queue` with argument block `args` over `grid` work-items, through
    /// the replay service on this thread. Returns when the service is done with it (after
    /// the whole replay window, if there was one); the kernel completes asynchronously.
    pub fn dispatch(
        &self,
        queue: QueueRef,
        kernel: &Kernel,
        args: &[u8],
        grid: Dim3,
    ) -> Result<Completion, SimError> {
        self.launch(queue, Payload::Kernel(kernel.clone()), args, grid)
    }

    /// An application's host-to-device copy on a queue (`hipMemcpyAsync` on a stream): a
    /// [`SubmissionKind::Copy`] submission, which the service runs once under the agent's
    /// reader lock, so it never lands inside a replay window. Executes in queue order.
    pub fn write_async(
        &self,
        queue: QueueRef,
        addr: u64,
        data: &[u8],
    ) -> Result<Completion, SimError> {
        let data: Arc<[u8]> = Arc::from(data);
        let copy = Kernel::new("<host-to-device copy>", move |ctx| {
            ctx.write(addr, &data)?;
            Ok(())
        });
        let (dispatch, completion) = self.prepare(
            queue,
            Payload::Kernel(copy),
            &[],
            Dim3::new(1, 1, 1),
            Origin::SubmittingThread,
        )?;
        let dispatch = Dispatch {
            kind: SubmissionKind::Copy,
            ..dispatch
        };
        let agent = self.agent(queue.agent);
        let engine = self.engine(queue.agent);
        let service = self.service();
        let r = Self::submit_now(self.shared(), &agent, &engine, service.as_deref(), dispatch);
        let _ = completion.report.set(r.clone());
        r?;
        Ok(completion)
    }

    /// Several kernel dispatches in one submission on `queue` (as an HSA runtime hands an
    /// interceptor every packet of one doorbell): a [`SubmissionKind::MultiPacket`] submission,
    /// never replayed, which the service runs once under the agent's reader side. The kernels
    /// run in order; the completion fires after the last.
    pub fn dispatch_batch(
        &self,
        queue: QueueRef,
        kernels: &[(&Kernel, &[u8], Dim3)],
    ) -> Result<Completion, SimError> {
        let batch = kernels
            .iter()
            .map(|(k, a, g)| ((*k).clone(), a.to_vec(), *g))
            .collect();
        self.launch(queue, Payload::Batch(batch), &[], Dim3::new(1, 1, 1))
    }

    /// A barrier submission (not a replay candidate: it runs once).
    pub fn barrier(&self, queue: QueueRef) -> Result<Completion, SimError> {
        self.launch(queue, Payload::Barrier, &[], Dim3::default())
    }

    /// Hands the launch to the runtime's own thread, which calls the service with
    /// [`Origin::RuntimeThread`]. Returns at once; [`Completion::wait_submitted`] waits for the
    /// hand-over. Launched from inside a tool callback, it is tool work as long as the callback
    /// is still running when the runtime thread submits it (wait for it inside the callback).
    /// Like the HSA runtime's single async thread, the runtime thread submits one launch at a
    /// time: a forwarded ordinary launch blocked by a replay window delays those behind it.
    pub fn dispatch_forwarded(
        &self,
        queue: QueueRef,
        kernel: &Kernel,
        args: &[u8],
        grid: Dim3,
    ) -> Result<Completion, SimError> {
        // The simulated runtime knows whether a tool callback launched it, as a runtime that
        // tags packets written from callback threads would.
        let origin = if replay_core::locks::thread_in_callback() {
            Origin::ForwardedToolWork
        } else {
            Origin::ForwardedApplication
        };
        let (dispatch, completion) =
            self.prepare(queue, Payload::Kernel(kernel.clone()), args, grid, origin)?;
        let fwd = Forward {
            agent: self.agent(queue.agent),
            engine: self.engine(queue.agent),
            service: self.service(),
            dispatch,
            report: Arc::clone(&completion.report),
        };
        let mut f = self.inner.forwarder.lock();
        if f.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<Forward>();
            let gpu = Arc::clone(self.shared());
            let thread = std::thread::Builder::new()
                .name("sim-runtime".into())
                .spawn(move || {
                    // Like the HSA runtime's async thread, it never blocks on a replay window:
                    // a deferred launch waits here, in order, while later work (tool work
                    // launched from that window's callbacks among it) goes on.
                    let mut deferred: std::collections::VecDeque<Forward> = Default::default();
                    loop {
                        let next = if deferred.is_empty() {
                            match rx.recv() {
                                Ok(w) => Some(w),
                                Err(_) => break,
                            }
                        } else {
                            match rx.recv_timeout(Duration::from_micros(200)) {
                                Ok(w) => Some(w),
                                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
                                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
                            }
                        };
                        let mut work: Vec<Forward> = Vec::new();
                        // Retry the oldest deferred launches first, keeping their order.
                        work.extend(deferred.drain(..));
                        work.extend(next);
                        for w in work {
                            let blocked_queue = deferred.iter().any(|d| {
                                d.dispatch.info.queue == w.dispatch.info.queue
                                    && d.dispatch.info.agent == w.dispatch.info.agent
                            });
                            if blocked_queue && w.dispatch.origin != Origin::ForwardedToolWork {
                                // Keep queue order behind an earlier deferred launch.
                                deferred.push_back(w);
                                continue;
                            }
                            match Self::try_submit(
                                &gpu,
                                &w.agent,
                                &w.engine,
                                w.service.as_deref(),
                                w.dispatch.clone(),
                            ) {
                                Ok(None) => deferred.push_back(w),
                                Ok(Some(r)) => {
                                    let _ = w.report.set(Ok(r));
                                    gpu.progress.notify();
                                }
                                Err(e) => {
                                    let _ = w.report.set(Err(e));
                                    gpu.progress.notify();
                                }
                            }
                        }
                        if deferred.is_empty() && gpu.is_shut_down() {
                            break;
                        }
                    }
                })
                .expect("spawn the simulated runtime thread");
            let id = thread.thread().id();
            *f = Some(Forwarder { tx, thread, id });
        }
        let sent = f.as_ref().map(|f| f.tx.send(fwd).is_ok()).unwrap_or(false);
        drop(f);
        if !sent {
            self.shared().pending.lock().remove(&completion.handle);
            self.shared()
                .invariants
                .untrack_completion(completion.handle);
            return Err(SimError::Shutdown);
        }
        Ok(completion)
    }

    /// An application's asynchronous copy of `len` bytes on `agent`'s copy engine (what the
    /// window's copy fence waits for). It takes the reader side of the gate of the agent that
    /// owns `dst` across its submission, so while a window is open there it waits for the
    /// window's end; from inside a tool callback it is submitted at once.
    pub fn copy_async(
        &self,
        agent: AgentId,
        dst: u64,
        src: u64,
        len: u64,
    ) -> Result<Completion, SimError> {
        let sh = self.shared();
        let a = sh.agent_or_err(agent)?;
        // The agent whose memory it writes; held across the submission (SPEC §6 step 4).
        let written = agent_of(dst).unwrap_or(agent);
        let _gate = self.write_gate(written);
        let signal = Signal::new();
        let handle = sh.next_id();
        sh.invariants
            .track_completion(agent, Arc::from("<copy>"), handle, Arc::clone(&signal));
        let hold = sh
            .take_fault(agent, |f| *f == Fault::AppCopyStuck)
            .map(|_| {
                let h = sh.new_hold("application copy");
                let _ = a.copy.push(Work::Hold(Arc::clone(&h)));
                h
            });
        let seq = a
            .copy
            .push(Work::AppCopy {
                dst,
                src,
                len,
                completion: Arc::clone(&signal),
            })
            .ok_or(SimError::Shutdown)?;
        // Another agent's engine is not in the written agent's copy fence by itself; a held
        // copy is recorded too, so a fence that gives up on it releases it.
        if written != agent || hold.is_some() {
            if let Some(w) = sh.agent_shared(written) {
                w.foreign_copies.lock().push(ForeignCopy {
                    lane: Arc::clone(&a.copy),
                    seq,
                    hold,
                });
            }
        }
        sh.recorder.record(Event::AppCopy { agent, bytes: len });
        let report: ReportSlot = Arc::new(OnceLock::new());
        let _ = report.set(Ok(None));
        Ok(Completion {
            signal,
            gpu: Arc::clone(sh),
            report,
            agent,
            queue: None,
            handle,
        })
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
