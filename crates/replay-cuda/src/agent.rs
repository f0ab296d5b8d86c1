//! One CUDA device as the replay window drives it (SPEC §6, §9.2): drains, passes and the
//! ordinary run, with every wait bounded by polling events.
//!
//! - **Drains.** A drain records one event per stream it covers and polls them: the dispatch's
//!   stream (queue drain); every compute queue the backend knows plus the legacy default
//!   stream (agent drain: an event on the legacy stream also waits for every blocking stream
//!   of the context); the copy queues the backend knows plus the memory layer's own copy and
//!   digest streams (copy fence). Streams the application created without registering them
//!   and that are non-blocking are invisible to the agent drain; in library mode every stream
//!   the launch API sees is registered, under interception every stream the wrappers see. A
//!   capturing stream (capture active or invalidated) runs nothing new on the device, so,
//!   where `KREPLAY_CUDA_DRAIN_BESIDE_CAPTURE=1` ([`crate::queue::drain_beside_capture`]; off by
//!   default until a real program's failure beside a capture is explained), the drain waits there on
//!   its pre-capture fence instead, the event the begin-capture hook
//!   recorded just before the capture began ([`crate::queue`], "Pre-capture fence"); no event is
//!   recorded on, and nothing is submitted to, a capturing stream. A capturing stream without
//!   a fence (its capture began before the wrappers saw it, or outside them), or the legacy
//!   stream while a blocking stream captures, declines the drain (see the crate docs, "Stream
//!   capture"). A drain abandoned at its bound remembers the streams whose events had
//!   not completed, with those events: a later drain covering such a stream whose event is
//!   still not complete fails at once (the window declines with the drain's reason) instead
//!   of waiting its bound again; the memo ends when the event completes or the stream is
//!   destroyed.
//! - **Passes** are launched on the application's stream with the captured argument block,
//!   between two timing events; `poll_pass` polls the second and reports the GPU time between
//!   them. The application's completion is not part of a pass.
//! - **Restores ordered on the device** (`ORDERED_RESTORE`, claimed while
//!   [`CudaMemory::ordered_restores`] is on): before a pass, an ordinary run or the cache flush,
//!   the stream it runs on waits on the device for the restore the memory layer enqueued
//!   without waiting (`cuStreamWaitEvent` on each of its fence's events, before the pass's
//!   start event, so the pass's GPU time is the kernel's alone); the pass's own wait then
//!   covers restore and pass, and the host waits once per pass. Where the driver refuses the
//!   stream wait, the call waits for the restore on the host instead.
//! - **After the launch.** Once `cuLaunchKernel` accepted a pass (or an ordinary run), any
//!   failure that follows (the event recorded after it, the caller's completion) is
//!   `BackendErrorKind::AfterSubmit`: the work may run, so the window never submits again.
//! - **Completion.** In library mode the caller's completion is the stream order itself: work
//!   the caller enqueues after `launch` returns runs after the last pass. A caller that wants
//!   an event passes a [`crate::queue::CompletionEvent`]; `signal_completion` records it once
//!   after the last pass, `submit_ordinary` after the ordinary run (never on a pass).
//! - **Abandon.** An abandoned drain or pass drops its events; the driver destroys an event
//!   that has not completed when it completes, so nothing the device still references is
//!   freed early.
//! - **Caches.** NVIDIA GPUs keep copy engines coherent with L2, so restores need no flush
//!   for correctness. For measurements (`cache_control=flush`, as Nsight Compute flushes
//!   before each pass by default) `flush_caches` evicts L2 before each pass: a kernel of the
//!   backend's own (NVRTC, [`FLUSH_SOURCE`]) reads a scratch buffer of three times the L2's
//!   size through L2 only (`ld.global.cg`), on the memory layer's first stream, and the call
//!   waits for it (bounded). Dirty lines (the previous pass's writes, the restore's copies)
//!   are written back during the flush, not during the pass, and the pass finds none of its
//!   data in L2. The L1 caches are not shared across kernels and need nothing. The scratch
//!   (untracked, never captured) is allocated at the first flush and kept. The agent claims
//!   `CACHE_FLUSH`; where NVRTC or the scratch is unavailable the flush fails and the window
//!   logs it and runs the pass. The flush kernel is a kernel: a range profiler in auto range
//!   sees it as a range of its own, before the pass's (see [`crate::counters`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{
    Agent, AgentId, BackendError, BackendErrorKind, Capabilities, Dispatch, DrainTarget,
    PassCompletion, Ticket,
};
use smallvec::SmallVec;

use crate::device::{wait_events, Device, Event};
use crate::error::CudaError;
use crate::launch::{launch_raw, LaunchConfig, ParamSlot};
use crate::memory::CudaMemory;
use crate::module::CudaModule;
use crate::queue::{
    capture_begin_lock, capture_status, CaptureStatus, CompletionEvent, QueueKind, QueueRegistry,
};
use crate::sys;

/// The L2 flush kernel (CUDA C, compiled with NVRTC at the first flush): every thread reads
/// its words through L2 only and writes nothing unless the xor of everything it read is a
/// constant no data has (so the reads cannot be optimised away).
pub const FLUSH_SOURCE: &str = r#"
extern "C" __global__ void kr_flush_l2(const unsigned long long* p, unsigned long long n,
                                       unsigned long long* sink) {
    unsigned long long acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        acc ^= __ldcg(p + i);
    }
    if (acc == 0x6b72666c757368ull) { sink[0] = acc; }
}
"#;

const FLUSH_WAIT: Duration = Duration::from_secs(10);

/// How long a launch waits on the host for an ordered restore where the driver refused to
/// order its stream after it (the restore's own copies are bounded by the window's policy).
const ORDER_WAIT: Duration = Duration::from_secs(60);

/// What the flush needs: the kernel and the scratch it reads.
struct Flusher {
    _module: Arc<CudaModule>,
    func: sys::CUfunction,
    scratch: sys::CUdeviceptr,
    words: u64,
    blocks: u32,
}

// SAFETY: driver handles and a device address, used only in driver calls.
unsafe impl Send for Flusher {}

/// A launch as the backend captured it: everything needed to submit it again.
#[derive(Debug)]
pub struct CapturedLaunch {
    pub(crate) func: sys::CUfunction,
    pub(crate) cfg: LaunchConfig,
    pub(crate) stream: sys::CUstream,
    pub(crate) layout: SmallVec<[ParamSlot; 16]>,
    /// The caller's completion: recorded once after the last pass, or after the ordinary run.
    pub(crate) completion: Option<Arc<CompletionEvent>>,
    /// Keeps the module (and so the function) loaded while the launch is pending.
    pub(crate) _keep: Option<Arc<CudaModule>>,
    /// An intercepted launch: submits the application's own call again (its `kernelParams`,
    /// `extra` and launch attributes, as given), instead of the captured block.
    pub(crate) relaunch: Option<crate::launch::Relaunch>,
}

// SAFETY: the raw function and stream are driver handles used only in driver calls.
unsafe impl Send for CapturedLaunch {}
// SAFETY: as above.
unsafe impl Sync for CapturedLaunch {}

/// What a drain waits on for one stream.
#[derive(Debug)]
enum Mark {
    /// An event the drain recorded there (back to the pool once complete).
    Own(Event),
    /// The stream's pre-capture fence: the stream captures, and only the work enqueued
    /// before the capture began can still run there (shared with the stream's queue).
    Fence(Arc<Event>),
}

impl Mark {
    fn event(&self) -> &Event {
        match self {
            Self::Own(e) => e,
            Self::Fence(e) => e,
        }
    }
}

/// Where a drain waits for one stream: record a new event, or wait on its pre-capture fence.
enum Plan {
    Record(sys::CUstream),
    Fence(sys::CUstream, Arc<Event>),
}

impl Plan {
    fn stream(&self) -> sys::CUstream {
        match self {
            Self::Record(s) | Self::Fence(s, _) => *s,
        }
    }
}

enum TicketState {
    /// A drain's marks, each with the stream it covers.
    Drain(SmallVec<[Mark; 4]>, SmallVec<[usize; 4]>),
    Pass {
        start: Event,
        end: Event,
    },
}

/// One CUDA device as an [`Agent`].
pub struct CudaAgent {
    device: Arc<Device>,
    id: AgentId,
    queues: Arc<QueueRegistry>,
    memory: Arc<CudaMemory>,
    launches: Mutex<HashMap<u64, Arc<CapturedLaunch>>>,
    tickets: Mutex<HashMap<u64, TicketState>>,
    next: AtomicU64,
    flusher: Mutex<Option<Result<Flusher, String>>>,
    /// Streams a drain timed out on, with the event it waited for there: a later drain that
    /// covers one whose event is still not complete declines at once instead of waiting its
    /// whole bound again (the memo ends when the event completes, or the stream is forgotten).
    stuck: Mutex<Vec<(usize, Mark)>>,
}

impl std::fmt::Debug for CudaAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaAgent")
            .field("id", &self.id)
            .field("device", &self.device.info().name)
            .finish_non_exhaustive()
    }
}

impl CudaAgent {
    /// Takes `ticket`'s state out when `pick` accepts it (the waits then hold no lock); a
    /// ticket of another kind stays, and the error says what it is not.
    fn take_ticket<T>(
        &self,
        ticket: Ticket,
        op: &'static str,
        what: &str,
        pick: impl FnOnce(TicketState) -> Result<T, TicketState>,
    ) -> Result<T, BackendError> {
        let mut tickets = self.tickets.lock();
        let message = match tickets.remove(&ticket.0).map(pick) {
            Some(Ok(v)) => return Ok(v),
            Some(Err(other)) => {
                tickets.insert(ticket.0, other);
                format!("ticket {} is not {what}", ticket.0)
            }
            None => format!("unknown ticket {}", ticket.0),
        };
        Err(BackendError::on(self.id, op).invalid(message))
    }

    /// The agent of `device`.
    pub fn new(
        device: Arc<Device>,
        id: AgentId,
        queues: Arc<QueueRegistry>,
        memory: Arc<CudaMemory>,
    ) -> Self {
        Self {
            device,
            id,
            queues,
            memory,
            launches: Mutex::new(HashMap::new()),
            tickets: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            flusher: Mutex::new(None),
            stuck: Mutex::new(Vec::new()),
        }
    }

    /// The first of `streams` a drain timed out on before and whose work there is still not
    /// done; memos of streams that caught up are dropped.
    fn still_stuck(&self, streams: &[sys::CUstream]) -> Option<usize> {
        let mut stuck = self.stuck.lock();
        if stuck.is_empty() {
            return None;
        }
        // An event whose query fails is kept: the drain would fail on it too.
        stuck.retain(|(_, e)| !matches!(e.event().query(), Ok(true)));
        stuck
            .iter()
            .map(|(s, _)| *s)
            .find(|s| streams.contains(&(*s as sys::CUstream)))
    }

    /// Forgets the stuck memo of `stream` (it is being destroyed).
    pub(crate) fn forget_stuck(&self, stream: sys::CUstream) {
        self.stuck.lock().retain(|(s, _)| *s != stream as usize);
    }

    /// Registers a captured launch; the returned number is the dispatch's `handle`.
    pub(crate) fn register_launch(&self, l: Arc<CapturedLaunch>) -> u64 {
        let h = self.next.fetch_add(1, Ordering::Relaxed);
        self.launches.lock().insert(h, l);
        h
    }

    /// Forgets a launch once its submission returned.
    pub(crate) fn unregister_launch(&self, handle: u64) {
        self.launches.lock().remove(&handle);
    }

    fn launch_of(
        &self,
        d: &Dispatch,
        op: &'static str,
    ) -> Result<Arc<CapturedLaunch>, BackendError> {
        self.launches.lock().get(&d.handle).cloned().ok_or_else(|| {
            BackendError::on(self.id, op).invalid(format!(
                "dispatch handle {} is not a launch of this backend (kernel {:?})",
                d.handle, d.info.kernel_name
            ))
        })
    }

    fn ticket(&self, t: TicketState) -> Ticket {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.tickets.lock().insert(n, t);
        Ticket(n)
    }

    /// Launches `l` once with the block `kernarg` (its first `layout` bytes are the block).
    fn launch(&self, l: &CapturedLaunch, kernarg: &[u8]) -> Result<(), CudaError> {
        self.device.bind()?;
        if let Some(r) = &l.relaunch {
            return r.launch();
        }
        // SAFETY: the launch was captured by `CudaBackend::launch`, whose caller guaranteed
        // (unsafe contract) that function, argument block and stream match and that the memory
        // the kernel reaches is valid; the module is kept loaded by the captured launch; the
        // context is current (bound above). `kernarg` is the captured block, padded with zero
        // bytes past the last parameter, which the layout never reads.
        unsafe { launch_raw(l.func, &l.cfg, l.stream, &l.layout, kernarg) }
    }

    /// Where a drain of `target` waits, stream by stream. A capturing stream among them
    /// (capture active or invalidated) is waited for on its pre-capture fence (see the module
    /// docs): an event recorded there would join the capture instead of marking the stream's
    /// progress, and querying it would invalidate the capture. A capturing stream without a
    /// fence, or the legacy stream implicated in a blocking stream's capture, declines the
    /// drain: the work submitted there before the capture began cannot be waited for
    /// otherwise.
    fn plan_for(&self, target: DrainTarget) -> Result<SmallVec<[Plan; 8]>, BackendError> {
        let mut v: SmallVec<[sys::CUstream; 8]> = SmallVec::new();
        match target {
            DrainTarget::Queue(q) => v.push(q.0 as sys::CUstream),
            DrainTarget::Agent => {
                v.push(std::ptr::null_mut()); // legacy default stream
                v.extend(self.queues.live(QueueKind::Compute).iter().map(|q| q.raw()));
                v.extend(self.launches.lock().values().map(|l| l.stream));
            }
            DrainTarget::CopyFence => {
                v.extend(self.queues.live(QueueKind::Copy).iter().map(|q| q.raw()));
                v.extend(self.memory.internal_streams());
            }
        }
        let op = target.as_str();
        let mut plan: SmallVec<[Plan; 8]> = SmallVec::new();
        for s in v {
            if plan.iter().any(|p| p.stream() == s) {
                continue;
            }
            let status = capture_status(s).map_err(|e| e.to_backend(self.id, op))?;
            let fence = match status {
                CaptureStatus::None => None,
                CaptureStatus::Active | CaptureStatus::Invalidated => self.queues.capture_fence(s),
                CaptureStatus::ImplicitLegacy => None,
            };
            match (status, fence) {
                (CaptureStatus::None, _) => plan.push(Plan::Record(s)),
                (_, Some(f)) => plan.push(Plan::Fence(s, f)),
                (st, None) => {
                    let why = if st == CaptureStatus::ImplicitLegacy {
                        "a blocking stream's capture holds the legacy default stream"
                    } else {
                        "no pre-capture fence was recorded for it (its capture began before the stream was known, or past the interception's begin-capture hooks)"
                    };
                    return Err(BackendError::on(self.id, op).error(
                        BackendErrorKind::Unsupported,
                        format!(
                            "stream {:#x} is capturing ({st:?}): {why}; its earlier work cannot be waited for without invalidating the capture",
                            s as u64
                        ),
                    ));
                }
            }
        }
        Ok(plan)
    }

    fn make_flusher(&self) -> Result<Flusher, CudaError> {
        let info = self.device.info();
        let cubin = crate::module::compile_cubin(
            FLUSH_SOURCE,
            "kr_flush.cu",
            info.compute_capability,
            &[],
        )?;
        let m = crate::module::ModuleRegistry::new(self.id, Arc::clone(&self.device))
            .load_private(&cubin, "kr_flush")?;
        let func = m.function("kr_flush_l2")?.raw();
        let l2 = if info.l2_bytes > 0 {
            info.l2_bytes
        } else {
            64 << 20
        };
        let bytes = (3 * l2).next_multiple_of(1 << 20);
        // SAFETY: a plain device allocation in the bound context (bound by the caller); it is
        // the backend's own, never tracked or captured, and kept for the agent's life.
        let scratch = unsafe { crate::result::malloc_sync(bytes as usize) }
            .map_err(|e| CudaError::driver("cuMemAlloc", e))?;
        Ok(Flusher {
            _module: m,
            func,
            scratch,
            words: bytes / 8,
            blocks: (info.multiprocessors.max(1) as u32) * 4,
        })
    }

    fn flush(&self) -> Result<(), CudaError> {
        self.device.bind()?;
        let mut f = self.flusher.lock();
        if f.is_none() {
            *f = Some(self.make_flusher().map_err(|e| e.to_string()));
        }
        let fl = match f.as_ref().expect("set above") {
            Ok(fl) => fl,
            Err(why) => {
                return Err(CudaError::InvalidArgument(format!(
                    "the cache flush is unavailable: {why}"
                )))
            }
        };
        let stream = self.memory.internal_streams()[0];
        // After a restore ordered on the device: the flush evicts what the restore wrote too.
        self.memory
            .order_stream(stream)
            .map_err(|e| CudaError::InvalidArgument(format!("ordering the flush: {e}")))?;
        let args = crate::launch::ArgBlock::new()
            .arg(crate::launch::DevicePtr(fl.scratch))
            .arg(fl.words)
            .arg(crate::launch::DevicePtr(fl.scratch));
        // SAFETY: `kr_flush_l2(const u64*, u64, u64*)` reads `words` words of the scratch the
        // flusher owns and writes at most its first word; the module stays loaded in the
        // flusher; the context is current (bound above).
        unsafe {
            launch_raw(
                fl.func,
                &LaunchConfig::linear(fl.blocks, 256),
                stream,
                args.params(),
                args.bytes(),
            )?;
        }
        drop(f);
        let done = self.device.event(false)?;
        done.record(stream)?;
        let r = wait_events(&[&done], FLUSH_WAIT)?;
        self.device.recycle_event(done);
        if r {
            Ok(())
        } else {
            Err(CudaError::InvalidArgument(format!(
                "the cache flush did not complete within {FLUSH_WAIT:?}"
            )))
        }
    }

    /// Live tickets (tests and diagnostics).
    pub fn pending_tickets(&self) -> usize {
        self.tickets.lock().len()
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }
}

impl Agent for CudaAgent {
    fn id(&self) -> AgentId {
        self.id
    }

    /// The graph node the interception is running on this thread (the window's), if any.
    fn graph_node(&self) -> Option<replay_core::GraphNode> {
        crate::graph_tag::current_node().map(crate::graph_tag::NodeTag::to_record)
    }

    /// The image the hooks kept (only while a capture is armed, [`crate::capture`]) for the
    /// launch's code object, and the driver's name of its function.
    fn code_image(&self, dispatch: &Dispatch) -> Result<replay_core::CodeImage, BackendError> {
        const OP: &str = "code image";
        let l = self.launch_of(dispatch, OP)?;
        let kept =
            crate::state::images::code_image(dispatch.kernel.code_object, l.func).ok_or_else(
                || {
                    BackendError::on(self.id, OP).error(
                        replay_core::BackendErrorKind::Unsupported,
                        format!(
                            "the code image of kernel {:?} was not kept (loaded before the capture was armed, or unreadable)",
                            dispatch.info.kernel_name
                        ),
                    )
                },
            )?;
        Ok(replay_core::CodeImage {
            format: crate::capture::code_format(&kept.code).into(),
            module: kept.name,
            symbol: kept.symbol.to_string(),
            bytes: kept.code.to_vec(),
            launch_attributes: crate::capture::attributes_of(l.relaunch.as_ref()),
            variables: kept
                .variables
                .into_iter()
                .map(|v| replay_core::CodeVariable {
                    name: v.name,
                    base: v.base,
                    size: v.size,
                })
                .collect(),
        })
    }

    fn device_description(&self) -> replay_core::DeviceDescription {
        let info = self.device.info();
        replay_core::DeviceDescription {
            backend: "cuda".into(),
            device: format!(
                "{} (sm_{}{}, device {})",
                info.name, info.compute_capability.0, info.compute_capability.1, info.ordinal
            ),
            driver: format!(
                "CUDA driver {}.{}",
                info.driver_version / 1000,
                (info.driver_version % 1000) / 10
            ),
        }
    }

    /// `DEVICE_DIGESTS` once the digest kernels compiled: `auto` then resolves to
    /// `arguments` + `dirty` (`all` for a launch whose argument layout is unknown); without
    /// them, to `all` + `full` (`replay_core::policy`). `ORDERED_RESTORE` while the memory
    /// orders restores on the device (the default).
    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::COPY_FENCE | Capabilities::CACHE_FLUSH;
        if self.memory.device_digests() {
            c |= Capabilities::DEVICE_DIGESTS;
        }
        if self.memory.ordered_restores() {
            c |= Capabilities::ORDERED_RESTORE;
        }
        c
    }

    fn begin_drain(&self, target: DrainTarget) -> Result<Ticket, BackendError> {
        let op = target.as_str();
        self.device.bind().map_err(|e| e.to_backend(self.id, op))?;
        // No capture begins through the wrappers between the checks and the records.
        let _no_capture_begins = capture_begin_lock();
        let plan = self.plan_for(target)?;
        let streams: SmallVec<[sys::CUstream; 8]> = plan.iter().map(Plan::stream).collect();
        if let Some(s) = self.still_stuck(&streams) {
            return Err(BackendError::on(self.id, op).error(
                BackendErrorKind::Other,
                format!(
                    "stream {s:#x} did not drain within the bound at an earlier window and its work there is still not done; not waited for again"
                ),
            ));
        }
        let mut events = SmallVec::new();
        let mut on = SmallVec::new();
        for p in plan {
            let s = p.stream();
            match p {
                Plan::Record(s) => {
                    let e = self
                        .device
                        .event(false)
                        .map_err(|e| e.to_backend(self.id, op))?;
                    e.record(s).map_err(|e| e.to_backend(self.id, op))?;
                    events.push(Mark::Own(e));
                }
                Plan::Fence(_, f) => events.push(Mark::Fence(f)),
            }
            on.push(s as usize);
        }
        Ok(self.ticket(TicketState::Drain(events, on)))
    }

    fn poll_drain(&self, ticket: Ticket, budget: Duration) -> Result<bool, BackendError> {
        const OP: &str = "poll drain";
        let (events, on) = self.take_ticket(ticket, OP, "a drain", |t| match t {
            TicketState::Drain(e, on) => Ok((e, on)),
            other => Err(other),
        })?;
        // The wait holds no lock.
        let r = self.device.bind().and_then(|()| {
            wait_events(&events.iter().map(Mark::event).collect::<Vec<_>>(), budget)
        });
        match r {
            Ok(true) => {
                for m in events {
                    if let Mark::Own(e) = m {
                        self.device.recycle_event(e);
                    }
                }
                Ok(true)
            }
            Ok(false) => {
                self.tickets
                    .lock()
                    .insert(ticket.0, TicketState::Drain(events, on));
                Ok(false)
            }
            Err(e) => {
                self.tickets
                    .lock()
                    .insert(ticket.0, TicketState::Drain(events, on));
                Err(e.to_backend(self.id, OP))
            }
        }
    }

    fn submit_pass(&self, dispatch: &Dispatch, _pass: u32) -> Result<Ticket, BackendError> {
        const OP: &str = "submit pass";
        let l = self.launch_of(dispatch, OP)?;
        self.device.bind().map_err(|e| e.to_backend(self.id, OP))?;
        // The restore before this pass, if it was left to the device, runs first.
        self.memory.order_stream_or_wait(l.stream, ORDER_WAIT)?;
        let (start, end) = (|| -> Result<(Event, Event), CudaError> {
            let start = self.device.event(true)?;
            let end = self.device.event(true)?;
            start.record(l.stream)?;
            Ok((start, end))
        })()
        .map_err(|e| e.to_backend(self.id, OP))?;
        self.launch(&l, &dispatch.kernarg)
            .map_err(|e| e.to_backend(self.id, OP))?;
        // The launch was accepted: the pass may run. Whatever fails from here on must not
        // lead to another submission (SPEC §6: one execution at most per pass).
        if let Err(e) = end.record(l.stream) {
            return Err(BackendError::on(self.id, OP).error(
                BackendErrorKind::AfterSubmit,
                format!("the pass was launched, then: {e}"),
            ));
        }
        Ok(self.ticket(TicketState::Pass { start, end }))
    }

    fn poll_pass(
        &self,
        ticket: Ticket,
        budget: Duration,
    ) -> Result<Option<PassCompletion>, BackendError> {
        const OP: &str = "poll pass";
        let (start, end) = self.take_ticket(ticket, OP, "a pass", |t| match t {
            TicketState::Pass { start, end } => Ok((start, end)),
            other => Err(other),
        })?;
        let r = self
            .device
            .bind()
            .and_then(|()| wait_events(&[&end], budget));
        match r {
            Ok(true) => {
                let ms = Event::elapsed_ms(&start, &end).unwrap_or_else(|e| {
                    log::debug!("[kernel-replay] pass time unavailable: {e}");
                    0.0
                });
                self.device.recycle_event(start);
                self.device.recycle_event(end);
                Ok(Some(PassCompletion {
                    gpu_seconds: f64::from(ms) / 1e3,
                }))
            }
            Ok(false) => {
                self.tickets
                    .lock()
                    .insert(ticket.0, TicketState::Pass { start, end });
                Ok(None)
            }
            Err(e) => {
                self.tickets
                    .lock()
                    .insert(ticket.0, TicketState::Pass { start, end });
                Err(e.to_backend(self.id, OP))
            }
        }
    }

    fn abandon(&self, ticket: Ticket) {
        // Dropping the events is safe while the device still works on them: the driver
        // destroys them when they complete. A drain's events not complete yet are memoised
        // with their streams (`still_stuck`).
        let t = self.tickets.lock().remove(&ticket.0);
        if let Some(TicketState::Drain(events, on)) = t {
            let mut stuck = self.stuck.lock();
            for (e, s) in events.into_iter().zip(on) {
                if !matches!(e.event().query(), Ok(true)) {
                    stuck.retain(|(o, _)| *o != s);
                    stuck.push((s, e));
                }
            }
        }
    }

    fn flush_caches(&self) -> Result<(), BackendError> {
        self.flush()
            .map_err(|e| e.to_backend(self.id, "flush caches"))
    }

    fn submit_ordinary(&self, dispatch: &Dispatch) -> Result<(), BackendError> {
        const OP: &str = "submit ordinary";
        let l = self.launch_of(dispatch, OP)?;
        // After a restore ordered on the device (the window's ordinary run after a refused
        // pass), the run consumes restored memory. (No restore pending: one lock, no call.)
        self.memory.order_stream_or_wait(l.stream, ORDER_WAIT)?;
        self.launch(&l, &dispatch.kernarg)
            .map_err(|e| e.to_backend(self.id, OP))?;
        if let Some(c) = &l.completion {
            // The launch was accepted: a failure here must not lead to another submission.
            c.event.record(l.stream).map_err(|e| {
                BackendError::on(self.id, OP).error(
                    BackendErrorKind::AfterSubmit,
                    format!("the launch was made, then its completion failed: {e}"),
                )
            })?;
        }
        Ok(())
    }

    fn signal_completion(&self, dispatch: &Dispatch) -> Result<(), BackendError> {
        const OP: &str = "signal completion";
        let l = self.launch_of(dispatch, OP)?;
        if let Some(c) = &l.completion {
            self.device.bind().map_err(|e| e.to_backend(self.id, OP))?;
            // Recorded on the application's stream after every pass submitted so far.
            c.event
                .record(l.stream)
                .map_err(|e| e.to_backend(self.id, OP))?;
        }
        Ok(())
    }
}
