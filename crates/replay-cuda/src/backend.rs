//! The backend of one device, the library API (SPEC §9.2, "launch under replay"): one
//! [`CudaBackend`] per device ties the agent, the device memory, the memory layer, the
//! allocator, the module registry and the queues together, and [`CudaBackend::launch`] runs a
//! launch through
//! [`ReplayService::submit`], so the window of SPEC §6 runs around it when the service is
//! active and a tool asked for passes.
//!
//! ```text
//! CudaBackend::launch ─► Dispatch { argument block, grid, block, stream } ─► ReplayService::submit
//!     inactive / declined / not requested ─► CudaAgent::submit_ordinary (launch once)
//!     replayed ─► drains (events) ─► MemoryEngine::capture ─► passes (launch + timing events)
//!               ─► restores (copy streams) ─► signal_completion (the caller's event, once)
//! ```
//!
//! `launch` returns when the window is done: the passes completed (they were waited for),
//! the last pass's writes are in memory, and a caller's completion event is recorded after it.
//! An ordinary (not replayed) launch returns at once, asynchronous as usual. Library launches
//! come from the submitting thread (`Origin::SubmittingThread`), so the service never defers
//! them; a launch from inside a tool callback is tool work and runs once.

use std::sync::Arc;

use replay_core::{
    AgentId, BackendError, Dim3, Dispatch, DispatchInfo, DispatchReport, KernelId, KernelKey,
    Origin, ReplayService, SubmissionKind,
};
use replay_memory::{MemoryEngine, Tracker};

use crate::agent::{CapturedLaunch, CudaAgent};
use crate::device::Device;
use crate::error::CudaResult;
use crate::launch::{launch_raw, ArgBlock, LaunchConfig};
use crate::memory::{CudaMemory, TierConfig};
use crate::module::{CudaFunction, ModuleRegistry};
use crate::queue::{
    capture_status, CapturedGraph, CompletionEvent, Queue, QueueKind, QueueRegistry,
    RelaxedCapture, ResolvedCopy,
};
use crate::result::DriverCall;
use crate::sys;
use crate::tracker::CudaAllocator;

/// Options of one launch.
#[derive(Debug, Clone, Default)]
pub struct LaunchOptions {
    /// Recorded once as the launch's completion (after the last pass, or after the ordinary
    /// run). For a launch into a capturing stream the record joins the capture, like any event
    /// recorded there: query it only after the capture ended.
    pub completion: Option<Arc<CompletionEvent>>,
}

/// How a backend is set up.
#[derive(Debug, Clone, Default)]
pub struct BackendConfig {
    /// Tier sizing and copy chunking.
    pub tiers: TierConfig,
}

/// The CUDA backend of one device.
pub struct CudaBackend {
    device: Arc<Device>,
    agent: Arc<CudaAgent>,
    memory: Arc<CudaMemory>,
    engine: Arc<MemoryEngine>,
    allocator: CudaAllocator,
    modules: Arc<ModuleRegistry>,
    queues: Arc<QueueRegistry>,
    legacy: Arc<Queue>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", self.device.info())
            .finish_non_exhaustive()
    }
}

impl CudaBackend {
    /// Opens device `ordinal` as agent `AgentId(ordinal)`, reporting allocations to `tracker`.
    /// Fails with [`crate::CudaError::Unavailable`] where CUDA cannot be used.
    pub fn new(ordinal: i32, tracker: Arc<Tracker>, config: BackendConfig) -> CudaResult<Self> {
        let device = Device::open(ordinal)?;
        let id = AgentId(ordinal as u64);
        let modules = Arc::new(ModuleRegistry::new(id, Arc::clone(&device)));
        let memory = Arc::new(CudaMemory::new(&device, id, &modules, config.tiers)?);
        let queues = Arc::new(QueueRegistry::default());
        memory.set_queues(Arc::clone(&queues));
        let agent = Arc::new(CudaAgent::new(
            Arc::clone(&device),
            id,
            Arc::clone(&queues),
            Arc::clone(&memory),
        ));
        let engine = Arc::new(MemoryEngine::new(
            id,
            Arc::clone(&tracker),
            Arc::clone(&memory) as Arc<dyn replay_core::DeviceMemory>,
            Arc::clone(&modules) as Arc<dyn replay_memory::ModuleVariables>,
        ));
        let allocator = CudaAllocator::new(Arc::clone(&device), id, tracker);
        {
            let weak = Arc::downgrade(&engine);
            let mem = Arc::downgrade(&memory);
            allocator.set_oom_hook(Some(Arc::new(move || {
                let _relaxed = RelaxedCapture::enter();
                if let Some(e) = weak.upgrade() {
                    e.release_pools();
                }
                // The application needs the memory now: released even behind busy streams.
                if let Some(m) = mem.upgrade() {
                    m.release_deferred(true);
                }
            })));
        }
        // SAFETY: the legacy default stream (null) exists for as long as the context does.
        let legacy =
            unsafe { queues.register_raw(&device, std::ptr::null_mut(), QueueKind::Compute) };
        Ok(Self {
            device,
            agent,
            memory,
            engine,
            allocator,
            modules,
            queues,
            legacy,
        })
    }

    /// The agent id.
    pub fn agent_id(&self) -> AgentId {
        self.agent.id_value()
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The agent (for [`ReplayService::submit`]).
    pub fn agent(&self) -> &Arc<CudaAgent> {
        &self.agent
    }

    /// The device memory.
    pub fn memory(&self) -> &Arc<CudaMemory> {
        &self.memory
    }

    /// The memory layer (the window's `Snapshotter`).
    pub fn engine(&self) -> &Arc<MemoryEngine> {
        &self.engine
    }

    /// The tracked allocator.
    pub fn allocator(&self) -> &CudaAllocator {
        &self.allocator
    }

    /// The module registry (compile, load, enumerate).
    pub fn modules(&self) -> &Arc<ModuleRegistry> {
        &self.modules
    }

    /// A new non-blocking stream, registered with the agent.
    pub fn create_queue(&self, kind: QueueKind) -> CudaResult<Arc<Queue>> {
        self.queues.create(&self.device, kind)
    }

    /// The legacy default stream.
    pub fn legacy_queue(&self) -> &Arc<Queue> {
        &self.legacy
    }

    /// Registers a stream the application created (see [`QueueRegistry::register_raw`]).
    ///
    /// # Safety
    /// As [`QueueRegistry::register_raw`]: the stream belongs to this device's primary context
    /// and outlives the returned queue.
    pub unsafe fn register_stream(&self, stream: sys::CUstream, kind: QueueKind) -> Arc<Queue> {
        // SAFETY: forwarded contract.
        unsafe { self.queues.register_raw(&self.device, stream, kind) }
    }

    /// Builds the window's dispatch for a launch.
    fn dispatch(
        &self,
        func: &CudaFunction,
        cfg: &LaunchConfig,
        queue: &Queue,
        args: &ArgBlock,
        handle: u64,
    ) -> Dispatch {
        let id = self.agent_id();
        Dispatch {
            info: DispatchInfo::new(
                id,
                queue.id(),
                KernelId(func.raw() as u64),
                Arc::clone(func.name()),
                Dim3::new(
                    cfg.grid.x.saturating_mul(cfg.block.x),
                    cfg.grid.y.saturating_mul(cfg.block.y),
                    cfg.grid.z.saturating_mul(cfg.block.z),
                ),
                cfg.block,
            )
            .with_private_segment_size(func.local_bytes())
            .with_group_segment_size(func.static_shared_bytes() + cfg.shared_mem_bytes),
            kernel: KernelKey {
                agent: id,
                code_object: func.module().load_id(),
                symbol: func.raw() as u64,
            },
            kind: SubmissionKind::KernelDispatch,
            kernarg: args.kernarg(),
            // The caller passes the block's size: its layout is known.
            arg_layout: Default::default(),
            origin: Origin::SubmittingThread,
            handle,
        }
    }

    /// Launches `func` **under replay**: builds the dispatch and hands it to `service`, which
    /// runs it once (service inactive, filtered out, not requested, declined) or runs the
    /// replay window around it. Returns the service's report (its outcome record, for a
    /// candidate). An error means the launch itself could not be made.
    ///
    /// # Safety
    /// 1. `args` matches `func`'s parameter list (sizes and offsets).
    /// 2. Every device pointer in `args` is valid for everything the kernel does with it, for
    ///    every pass.
    /// 3. `queue` is a stream of this backend's device (created or registered here).
    pub unsafe fn launch(
        &self,
        service: &ReplayService,
        func: &CudaFunction,
        cfg: LaunchConfig,
        queue: &Arc<Queue>,
        args: &ArgBlock,
        options: LaunchOptions,
    ) -> Result<DispatchReport, BackendError> {
        // The window's driver calls (allocations, frees, event queries) must not disturb a
        // capture another thread runs in global mode.
        let _relaxed = RelaxedCapture::enter();
        let kind = self.submission_kind(queue)?;
        let captured = Arc::new(CapturedLaunch {
            func: func.raw(),
            cfg,
            stream: queue.raw(),
            layout: args.params().into(),
            completion: options.completion,
            _keep: Some(Arc::clone(func.module())),
            relaunch: None,
        });
        let handle = self.agent.register_launch(captured);
        let mut dispatch = self.dispatch(func, &cfg, queue, args, handle);
        dispatch.kind = kind;
        let r = service.submit(&*self.agent, &*self.engine, dispatch);
        self.agent.unregister_launch(handle);
        // Backing the window gave back is released here, outside it, once nothing is running.
        self.release_idle(service.policy().pool_idle_release);
        r
    }

    /// Frees the backing memory the library holds for this device, now: the memory layer's
    /// pool (blocks a live snapshot holds follow when it ends) and what waits for release,
    /// even behind busy streams. What an application allocation that ran out of memory calls
    /// before its retry, and what a tool calls before handing the device to another process.
    /// Returns the bytes that were pooled or waiting.
    pub fn release_backing(&self) -> u64 {
        let held = self.engine.pooled_bytes() + self.memory.deferred_bytes();
        // The library's frees must not invalidate another thread's capture.
        let _relaxed = RelaxedCapture::enter();
        self.engine.release_pools();
        self.memory.release_deferred(true);
        held
    }

    /// Outside a window: the pool is released when it sat unused for `after`
    /// (`Policy::pool_idle_release`; zero: never), and backing given back is freed once no
    /// stream the backend knows has work (a free waits for the whole device).
    pub fn release_idle(&self, after: std::time::Duration) {
        self.engine.release_idle(after);
        self.memory.release_deferred(false);
    }

    /// What a launch into `queue` is for the window: a kernel dispatch, or (the stream is
    /// capturing a graph, or is the legacy stream implicated in a capture) a stream capture,
    /// which runs once, unchanged, into the graph (SPEC §6 step 1).
    fn submission_kind(&self, queue: &Queue) -> Result<SubmissionKind, BackendError> {
        const OP: &str = "launch";
        let agent = self.agent_id();
        self.device.bind().map_err(|e| e.to_backend(agent, OP))?;
        let status = capture_status(queue.raw()).map_err(|e| e.to_backend(agent, OP))?;
        Ok(if status.is_live() {
            SubmissionKind::StreamCapture
        } else {
            SubmissionKind::KernelDispatch
        })
    }

    /// Begins capturing `queue` into a graph (`cuStreamBeginCapture`, in `mode`). While any
    /// capture the backend knows is live, windows decline rather than record on, wait for or
    /// allocate beside it; launches into the capturing stream run once, into the graph.
    pub fn begin_capture(&self, queue: &Queue, mode: CaptureMode) -> CudaResult<()> {
        self.device.bind()?;
        let m = match mode {
            CaptureMode::Global => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => {
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            }
            CaptureMode::Relaxed => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        };
        // SAFETY: `queue` is a live stream of this device's context, which is current.
        unsafe { sys::cuStreamBeginCapture_v2(queue.raw(), m) }.call("cuStreamBeginCapture")?;
        self.queues.capture_begun();
        Ok(())
    }

    /// Ends the capture on `queue` and instantiates the graph. Fails (the capture counts as
    /// ended) when the capture was invalidated.
    pub fn end_capture(&self, queue: &Queue) -> CudaResult<CapturedGraph> {
        self.device.bind()?;
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: `queue` is a live stream of this device's context; out pointer to a live
        // local.
        let r = unsafe { sys::cuStreamEndCapture(queue.raw(), &mut graph) };
        self.queues.capture_ended();
        r.call("cuStreamEndCapture")?;
        CapturedGraph::instantiate(&self.device, graph)
    }

    /// Launches a captured graph on `queue`, once, under the agent's gate (SPEC §6 step 4): it
    /// waits while a window is open, so no restore undoes what the graph writes.
    ///
    /// # Safety
    /// Every pointer the captured work uses is still valid for what it does.
    pub unsafe fn launch_graph(
        &self,
        service: &ReplayService,
        graph: &CapturedGraph,
        queue: &Queue,
    ) -> CudaResult<()> {
        let _gate = service.enter_write(self.agent_id());
        self.device.bind()?;
        // SAFETY: forwarded contract; the context is current and `queue` is of this device.
        unsafe { graph.launch_raw(queue.raw()) }
    }

    /// Enqueues one copy on `queue` under the agent's gate (SPEC §6 step 4): it waits while a
    /// window is open, so no restore undoes it; a window that starts later waits for it in its
    /// drains (for a copy queue, the copy fence).
    ///
    /// # Safety
    /// As [`Queue::copy_async`].
    pub unsafe fn copy(
        &self,
        service: &ReplayService,
        queue: &Queue,
        c: &ResolvedCopy,
    ) -> CudaResult<()> {
        let _gate = service.enter_write(self.agent_id());
        // SAFETY: forwarded contract.
        unsafe { queue.copy_async(c) }
    }

    /// Sets `count` 32-bit words at `addr` to `value` on `queue`, under the agent's gate (as
    /// [`CudaBackend::copy`]).
    ///
    /// # Safety
    /// `addr` is device memory valid for `4 * count` bytes until the memset completed.
    pub unsafe fn memset_d32(
        &self,
        service: &ReplayService,
        queue: &Queue,
        addr: u64,
        value: u32,
        count: usize,
    ) -> CudaResult<()> {
        let _gate = service.enter_write(self.agent_id());
        self.device.bind()?;
        // SAFETY: forwarded contract; the context is current and `queue` is of this device.
        unsafe { sys::cuMemsetD32Async(addr, value, count, queue.raw()) }.call("cuMemsetD32Async")
    }

    /// Launches `func` once, not replayed (reference runs, fills, tool work), under the
    /// agent's gate (SPEC §6 step 4): it waits while a window is open on another thread, so no
    /// restore undoes it; tool work inside a window's callback runs at once.
    ///
    /// # Safety
    /// As [`CudaBackend::launch`].
    pub unsafe fn launch_plain(
        &self,
        service: &ReplayService,
        func: &CudaFunction,
        cfg: LaunchConfig,
        queue: &Queue,
        args: &ArgBlock,
    ) -> CudaResult<()> {
        let _gate = service.enter_write(self.agent_id());
        self.device.bind()?;
        // SAFETY: forwarded contract; the context is current.
        unsafe { launch_raw(func.raw(), &cfg, queue.raw(), args.params(), args.bytes()) }
    }
}

/// How a capture begun through [`CudaBackend::begin_capture`] restricts the driver calls of
/// other threads (`CUstreamCaptureMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureMode {
    /// Potentially unsafe calls on any thread in global mode fail (PyTorch's default).
    Global,
    /// Only this thread's unsafe calls fail.
    ThreadLocal,
    /// No restriction.
    Relaxed,
}

impl CudaAgent {
    fn id_value(&self) -> AgentId {
        replay_core::Agent::id(self)
    }
}
