//! Streams (SPEC §9.2): the queues the backend knows, so drains can reach every stream of the
//! device; the streams it owns; what a stream capture looks like to it (a stream's capture
//! status, the thread's relaxed capture mode, captured graphs, the pre-capture fence); what a
//! copy submitted to a queue looks like; and the events marking points of a stream (a launch's
//! completion, GPU timers).
//!
//! **Pre-capture fence.** A stream that captures runs nothing new on the device: work
//! submitted to it during the capture becomes graph nodes (a graph launched later runs on the
//! stream it is launched on, and is drained as that stream's work), and a capture that was
//! invalidated runs nothing either. Only the work enqueued before the capture began can still
//! be running there. So the interception's hook of every begin-capture entry records one event
//! on a known stream just before the driver's begin-capture call
//! (`Queue::fence_before_capture`); it marks all of the stream's pre-capture work. An agent
//! drain that meets the stream capturing (active or invalidated) waits on that event instead of
//! recording one there (`Queue::capture_fence`): querying an event recorded before a capture
//! is allowed during it (from a thread in relaxed capture mode, as the window's are; see
//! [`RelaxedCapture`]). The fence is dropped when the capture ends (the end-capture hook, or
//! the stream's destruction), and a stream capturing without one (a capture begun before the
//! wrappers saw the stream, or outside them; a stream that joined another stream's capture
//! through an event wait) still declines the drain. The legacy default stream cannot be
//! captured (the driver refuses); the per-thread default stream can, and then implicates the
//! legacy stream as a blocking stream's capture does, so a drain beside it declines (it has no
//! fence: the backend registers neither default stream). The begin-capture hook
//! and the start of a drain (its capture-status checks and the events it records) exclude each
//! other (`capture_begin_lock`), so a drain never records on a stream whose capture, begun
//! through the wrappers, started between its check and its record. Work another thread submits
//! to the stream while its capture begins (the application racing with itself) may land before
//! the capture and after the fence: it is not waited for.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use replay_core::QueueId;

use crate::device::{wait_events, Device, Event};
use crate::error::{CudaError, CudaResult};
use crate::result::{self, DriverCall};
use crate::sys;

/// What a queue is used for: drains of the agent wait for compute queues, the copy fence for
/// copy queues (SPEC §6 step 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueKind {
    /// Kernels (and anything else the application orders there).
    Compute,
    /// Asynchronous copies.
    Copy,
}

/// A stream the backend knows.
#[derive(Debug)]
pub struct Queue {
    raw: sys::CUstream,
    kind: QueueKind,
    _owned: Option<Stream>,
    device: Arc<Device>,
    /// The pre-capture fence (see the module docs): recorded just before a capture of the
    /// stream began, kept until that capture ends.
    pre_capture: Mutex<Option<Arc<Event>>>,
}

// SAFETY: the raw stream is a driver handle, used only in driver calls, which are thread-safe.
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

/// `KREPLAY_CUDA_DRAIN_BESIDE_CAPTURE=1` lets a drain wait on a capturing stream's pre-capture
/// fence; by default (`0`) such a drain declines, as before fences existed, and the
/// begin-capture hooks record none. Off by default until a real program's failure with the
/// fences in use is explained (`BENCHMARKS.md`, "The merged build on real programs").
pub const DRAIN_BESIDE_CAPTURE_ENV: &str = "KREPLAY_CUDA_DRAIN_BESIDE_CAPTURE";

/// 0: not read yet; 1: off; 2: on.
static BESIDE_CAPTURE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether drains wait on pre-capture fences ([`DRAIN_BESIDE_CAPTURE_ENV`], or
/// [`set_drain_beside_capture`]); a value other than `0` or `1` is reported and keeps `0`.
pub fn drain_beside_capture() -> bool {
    use std::sync::atomic::Ordering;
    match BESIDE_CAPTURE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = match std::env::var(DRAIN_BESIDE_CAPTURE_ENV)
                .as_deref()
                .map(str::trim)
            {
                Ok("1") => true,
                Err(_) | Ok("0") | Ok("") => false,
                Ok(v) => {
                    log::warn!(
                        "[kernel-replay] {DRAIN_BESIDE_CAPTURE_ENV}={v:?}: expected 0 or 1; drains beside a capture decline"
                    );
                    false
                }
            };
            BESIDE_CAPTURE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
    }
}

/// Turns waiting on pre-capture fences on or off for the process (library users, tests).
pub fn set_drain_beside_capture(on: bool) {
    BESIDE_CAPTURE.store(if on { 2 } else { 1 }, std::sync::atomic::Ordering::Relaxed);
}

impl Queue {
    /// The raw stream (null for the legacy default stream).
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// The queue id the window sees: the stream handle as a number (0 = legacy default).
    pub fn id(&self) -> QueueId {
        QueueId(self.raw as u64)
    }

    /// What the queue is used for.
    pub fn kind(&self) -> QueueKind {
        self.kind
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Records the pre-capture fence (see the module docs) on the stream, replacing any
    /// earlier one: called just before the driver's begin-capture call on it, on the
    /// capturing thread, with the stream's context current. Made in relaxed capture mode (the
    /// thread's own mode is restored before the caller begins the capture), so another
    /// thread's global capture is never disturbed.
    pub(crate) fn fence_before_capture(&self) -> CudaResult<()> {
        let _relaxed = RelaxedCapture::enter();
        let e = self.device.event(false)?;
        if let Err(err) = e.record(self.raw) {
            self.device.recycle_event(e);
            return Err(err);
        }
        self.set_fence(Some(Arc::new(e)));
        Ok(())
    }

    /// Drops the pre-capture fence (the capture ended, or did not begin): a drain that meets
    /// the stream capturing again without a new fence declines.
    pub(crate) fn drop_capture_fence(&self) {
        self.set_fence(None);
    }

    fn set_fence(&self, fence: Option<Arc<Event>>) {
        // Called on application threads (the end-capture hook): the query below must not
        // invalidate a capture another thread runs in global mode.
        let _relaxed = RelaxedCapture::enter();
        let old = std::mem::replace(&mut *self.pre_capture.lock(), fence);
        // A completed fence no drain holds any more goes back to the pool; otherwise the last
        // holder destroys it (the driver releases an event still pending when it completes).
        if let Some(e) = old.and_then(|a| Arc::try_unwrap(a).ok()) {
            if matches!(e.query(), Ok(true)) {
                self.device.recycle_event(e);
            }
        }
    }

    /// The pre-capture fence, while the capture it was recorded for has not been seen ending.
    pub(crate) fn capture_fence(&self) -> Option<Arc<Event>> {
        if !drain_beside_capture() {
            return None;
        }
        self.pre_capture.lock().clone()
    }

    /// Enqueues one copy on the queue (benchmarks measuring copy ceilings, tools outside a
    /// window). Not gated: a copy that may run while the service is active goes through
    /// [`crate::CudaBackend::copy`].
    ///
    /// # Safety
    /// Both ends must be valid for `c.len` bytes (device memory, or host memory for the host
    /// end of a host copy) until the copy completed, and must not be freed or reused before.
    pub unsafe fn copy_async(&self, c: &ResolvedCopy) -> CudaResult<()> {
        self.device.bind()?;
        // SAFETY: the caller guarantees both ends; the context is current. `cuMemcpyAsync`
        // infers the kind of each end from the unified address space.
        unsafe { sys::cuMemcpyAsync(c.dst, c.src, c.len as usize, self.raw) }.call("cuMemcpyAsync")
    }

    /// Waits, unbounded, for everything submitted to the queue. For applications and
    /// benchmarks outside a window; the window never calls it.
    pub fn synchronize(&self) -> CudaResult<()> {
        self.device.bind()?;
        // SAFETY: the stream is alive (owned, registered by a caller who guarantees it, or the
        // legacy stream).
        unsafe { result::stream::synchronize(self.raw) }.call("cuStreamSynchronize")
    }
}

/// Every queue of one device that the backend knows, by weak reference, and the stream
/// captures begun through the backend's API.
#[derive(Debug, Default)]
pub struct QueueRegistry {
    queues: Mutex<Vec<Weak<Queue>>>,
    /// Captures begun through [`crate::CudaBackend::begin_capture`] and not yet ended.
    api_captures: AtomicU32,
}

impl QueueRegistry {
    /// Creates a non-blocking stream and registers it.
    pub fn create(&self, device: &Arc<Device>, kind: QueueKind) -> CudaResult<Arc<Queue>> {
        let s = Stream::non_blocking(device)?;
        let q = Arc::new(Queue {
            raw: s.raw(),
            kind,
            _owned: Some(s),
            device: Arc::clone(device),
            pre_capture: Mutex::new(None),
        });
        self.queues.lock().push(Arc::downgrade(&q));
        Ok(q)
    }

    /// Registers a stream the application created.
    ///
    /// # Safety
    /// 1. `stream` must be a stream of `device`'s primary context (or null, the legacy default
    ///    stream).
    /// 2. It must stay alive until the returned queue is dropped.
    pub unsafe fn register_raw(
        &self,
        device: &Arc<Device>,
        stream: sys::CUstream,
        kind: QueueKind,
    ) -> Arc<Queue> {
        let q = Arc::new(Queue {
            raw: stream,
            kind,
            _owned: None,
            device: Arc::clone(device),
            pre_capture: Mutex::new(None),
        });
        self.queues.lock().push(Arc::downgrade(&q));
        q
    }

    /// A stream capture live on the device as far as the backend can tell: one begun through
    /// its API and not ended, a known stream capturing, or the legacy default stream reporting
    /// that a blocking stream captures. `Some(description)` names it. Streams the application
    /// created without registering them, and that are non-blocking, cannot be seen. The context
    /// must be current.
    pub fn live_capture(&self) -> CudaResult<Option<String>> {
        let n = self.api_captures.load(Ordering::Acquire);
        if n > 0 {
            return Ok(Some(format!(
                "{n} stream capture(s) begun through the backend are not ended"
            )));
        }
        self.capturing_stream(&self.all_streams())
    }

    /// The first of `streams` that is capturing (or the legacy stream implicated in a
    /// capture), described.
    pub(crate) fn capturing_stream(&self, streams: &[sys::CUstream]) -> CudaResult<Option<String>> {
        for &s in streams {
            let st = capture_status(s)?;
            if st.is_live() {
                return Ok(Some(format!(
                    "stream {:#x} is capturing ({st:?})",
                    s as u64
                )));
            }
        }
        Ok(None)
    }

    /// The pre-capture fence of the known stream `stream` (see the module docs), if one is
    /// kept.
    pub(crate) fn capture_fence(&self, stream: sys::CUstream) -> Option<Arc<Event>> {
        let qs = self.queues.lock();
        qs.iter()
            .filter_map(Weak::upgrade)
            .filter(|q| q.raw == stream)
            .find_map(|q| q.capture_fence())
    }

    /// Every known stream, the legacy default stream first.
    pub(crate) fn known_streams(&self) -> Vec<sys::CUstream> {
        self.all_streams()
    }

    fn all_streams(&self) -> Vec<sys::CUstream> {
        let mut v = vec![std::ptr::null_mut()];
        let mut qs = self.queues.lock();
        qs.retain(|w| w.strong_count() > 0);
        for q in qs.iter().filter_map(Weak::upgrade) {
            if !v.contains(&q.raw) {
                v.push(q.raw);
            }
        }
        v
    }

    pub(crate) fn capture_begun(&self) {
        self.api_captures.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn capture_ended(&self) {
        self.api_captures.fetch_sub(1, Ordering::AcqRel);
    }

    /// Live queues of `kind`, pruning dropped ones.
    pub fn live(&self, kind: QueueKind) -> Vec<Arc<Queue>> {
        let mut qs = self.queues.lock();
        qs.retain(|w| w.strong_count() > 0);
        qs.iter()
            .filter_map(Weak::upgrade)
            .filter(|q| q.kind == kind)
            .collect()
    }
}

/// An owned, non-blocking stream: it neither waits for nor orders against the legacy default
/// stream (GPU.md).
#[derive(Debug)]
pub struct Stream {
    raw: sys::CUstream,
    device: Arc<Device>,
}

// SAFETY: a CUstream is a driver handle usable from any thread with the context current;
// `Stream` only passes it to driver calls.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Stream {
    /// Creates a non-blocking stream on `device`.
    pub fn non_blocking(device: &Arc<Device>) -> CudaResult<Self> {
        device.bind()?;
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking)
            .call("cuStreamCreate")?;
        Ok(Self {
            raw,
            device: Arc::clone(device),
        })
    }

    /// The raw handle.
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// The handle as a number (the `QueueId` of the stream).
    pub fn id(&self) -> u64 {
        self.raw as u64
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: created by cuStreamCreate and destroyed once; the driver lets pending
            // work finish before it releases the stream.
            if let Err(e) = unsafe { result::stream::destroy(self.raw) } {
                log::warn!("[kernel-replay] cuStreamDestroy: {e}");
            }
        }
    }
}

/// Held across the begin-capture hook (fence and the driver's call) and across the start of a
/// drain (capture-status checks and the events recorded): neither waits inside (a drain's
/// polling happens after), and nothing else is locked before it.
pub(crate) fn capture_begin_lock() -> parking_lot::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
}

/// What `cuStreamIsCapturing` says about a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureStatus {
    /// Not capturing: work submitted there runs.
    None,
    /// Capturing a graph: work submitted there is recorded, not run, and an event recorded
    /// there must not be queried.
    Active,
    /// A capture that was invalidated and not yet ended.
    Invalidated,
    /// The legacy default stream while a blocking stream of the context captures: anything
    /// submitted to the legacy stream would join (and invalidate) that capture.
    ImplicitLegacy,
}

impl CaptureStatus {
    /// Whether submitting to (or recording an event on) the stream would touch a capture.
    pub fn is_live(self) -> bool {
        self != Self::None
    }
}

/// The capture status of `stream` (null: the legacy default stream). The query itself is
/// allowed during any capture and never invalidates one.
pub(crate) fn capture_status(stream: sys::CUstream) -> CudaResult<CaptureStatus> {
    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: `stream` is a live stream of the current context or null; out pointer to a live
    // local.
    let r = unsafe { sys::cuStreamIsCapturing(stream, &mut st) };
    if r == sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT {
        return Ok(CaptureStatus::ImplicitLegacy);
    }
    r.call("cuStreamIsCapturing")?;
    Ok(match st {
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::None,
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
        _ => CaptureStatus::Invalidated,
    })
}

/// Puts the calling thread in the relaxed stream-capture mode until dropped, then restores the
/// mode it had (`cuThreadExchangeStreamCaptureMode`).
///
/// In the default (global) mode, a "potentially unsafe" driver call (an allocation, a free, an
/// event or stream query, a synchronisation) made on any thread while another thread captures
/// in global mode (PyTorch's default) fails and invalidates that capture. The window's own
/// driver calls run under this guard, so they never disturb another thread's capture; the
/// window itself never submits to, records on or queries a capturing stream (see
/// [`crate::agent`]).
#[derive(Debug)]
pub struct RelaxedCapture {
    previous: Option<sys::CUstreamCaptureMode>,
}

impl RelaxedCapture {
    /// Enters the relaxed mode on this thread.
    pub fn enter() -> Self {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a thread-local exchange of the capture mode; out/in pointer to a live local.
        let r = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
        match r.result() {
            Ok(()) => Self {
                previous: Some(mode),
            },
            Err(e) => {
                log::debug!("[kernel-replay] cuThreadExchangeStreamCaptureMode: {e}");
                Self { previous: None }
            }
        }
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        if let Some(mut mode) = self.previous.take() {
            // SAFETY: restores the mode this thread had when the guard was entered.
            let r = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
            if let Err(e) = r.result() {
                log::warn!("[kernel-replay] restoring the thread's stream-capture mode: {e}");
            }
        }
    }
}

/// Direction of one copy: it picks the stream lane. The copy itself is a `cuMemcpyAsync`,
/// which infers both ends from the unified address space (device, managed, mapped pinned or
/// pageable memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Device (or managed, or mapped) memory to device memory.
    DeviceToDevice,
    /// Device memory to a host pointer.
    DeviceToHost,
    /// A host pointer to device memory.
    HostToDevice,
}

/// A copy with both ends resolved to addresses (device addresses, or host pointers as
/// numbers, per [`Direction`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResolvedCopy {
    /// Direction.
    pub dir: Direction,
    /// Source address.
    pub src: u64,
    /// Destination address.
    pub dst: u64,
    /// Bytes.
    pub len: u64,
}

/// A graph captured from a stream ([`crate::CudaBackend::end_capture`]), instantiated and
/// ready to launch ([`crate::CudaBackend::launch_graph`]).
#[derive(Debug)]
pub struct CapturedGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    device: Arc<Device>,
}

// SAFETY: graph handles are driver handles used only in driver calls, which are thread-safe.
unsafe impl Send for CapturedGraph {}
// SAFETY: as above.
unsafe impl Sync for CapturedGraph {}

impl CapturedGraph {
    /// Instantiates `graph` (owned from here on). The context must be current.
    pub(crate) fn instantiate(device: &Arc<Device>, graph: sys::CUgraph) -> CudaResult<Self> {
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` came from cuStreamEndCapture; out pointer to a live local.
        let r = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
        if let Err(e) = r.call("cuGraphInstantiateWithFlags") {
            // SAFETY: the graph is ours and not instantiated.
            let _ = unsafe { sys::cuGraphDestroy(graph) };
            return Err(e);
        }
        Ok(Self {
            graph,
            exec,
            device: Arc::clone(device),
        })
    }

    /// Launches the graph on `stream`.
    ///
    /// # Safety
    /// Every pointer the captured work uses is still valid; `stream` is a stream of the
    /// graph's context; the context is current.
    pub(crate) unsafe fn launch_raw(&self, stream: sys::CUstream) -> CudaResult<()> {
        // SAFETY: forwarded contract; the executable graph is alive.
        unsafe { sys::cuGraphLaunch(self.exec, stream) }.call("cuGraphLaunch")
    }
}

impl Drop for CapturedGraph {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: both handles are ours, destroyed once; the driver keeps a launched graph
            // alive until its work completes.
            unsafe {
                let _ = sys::cuGraphExecDestroy(self.exec);
                let _ = sys::cuGraphDestroy(self.graph);
            }
        }
    }
}

/// An event the caller waits on as the launch's completion (library mode): the backend
/// records it exactly once, after every pass of a replay, or after the ordinary run.
#[derive(Debug)]
pub struct CompletionEvent {
    pub(crate) event: Event,
    device: Arc<Device>,
}

impl CompletionEvent {
    /// Creates an unrecorded event.
    pub fn new(device: &Arc<Device>) -> CudaResult<Arc<Self>> {
        device.bind()?;
        Ok(Arc::new(Self {
            event: Event::create(false)?,
            device: Arc::clone(device),
        }))
    }

    /// Whether the completion has happened (an unrecorded event counts as complete, as in
    /// CUDA).
    pub fn query(&self) -> CudaResult<bool> {
        self.device.bind()?;
        self.event.query()
    }

    /// Waits at most `budget`.
    pub fn wait(&self, budget: std::time::Duration) -> CudaResult<bool> {
        self.device.bind()?;
        wait_events(&[&self.event], budget)
    }

    /// Records the event on `queue` now (tools and benchmarks marking a point in a stream;
    /// the backend records it itself as a launch's completion).
    pub fn record(&self, queue: &Queue) -> CudaResult<()> {
        self.device.bind()?;
        self.event.record(queue.raw())
    }
}

/// GPU time between two points of one stream (timing events).
#[derive(Debug)]
pub struct GpuTimer {
    device: Arc<Device>,
    stream: sys::CUstream,
    start: Event,
    end: Event,
}

// SAFETY: the raw stream is a driver handle used only in driver calls; events are Send/Sync.
unsafe impl Send for GpuTimer {}

impl GpuTimer {
    /// Records the start on `queue`.
    pub fn start(queue: &Queue) -> CudaResult<Self> {
        let device = Arc::clone(queue.device());
        device.bind()?;
        let start = Event::create(true)?;
        let end = Event::create(true)?;
        start.record(queue.raw())?;
        Ok(Self {
            device,
            stream: queue.raw(),
            start,
            end,
        })
    }

    /// Records the end on the same stream.
    pub fn stop(&self) -> CudaResult<()> {
        self.device.bind()?;
        self.end.record(self.stream)
    }

    /// Seconds between start and end, waiting at most `timeout` for the end.
    pub fn seconds(&self, timeout: std::time::Duration) -> CudaResult<f64> {
        self.device.bind()?;
        if !wait_events(&[&self.end], timeout)? {
            return Err(CudaError::InvalidArgument(format!(
                "timed region not finished within {timeout:?}"
            )));
        }
        Ok(f64::from(Event::elapsed_ms(&self.start, &self.end)?) / 1e3)
    }
}
