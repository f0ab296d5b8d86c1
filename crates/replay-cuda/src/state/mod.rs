//! Process-wide state of the interception (SPEC §9.2 "Unmodified applications"): whether it
//! is on ([`enabled`], off in a `fork()`ed child), the service ([`service`]), one
//! [`CudaBackend`] per device met (opened at its first intercepted launch), the tracker every
//! intercepted allocation feeds, the streams seen (registered with their device's backend, or
//! pending until it opens) and the captures launches went into, the physical handles of
//! virtual-memory mappings (`HandleInfo`) and the ranges each is mapped at, what each function's argument block looks like
//! ([`FuncInfo`], [`LayoutSource`]), and the counts by kind the run summary prints
//! ([`Counters`]). The driver itself is loaded once per process by [`crate::result`].
//!
//! The hooks that read and change this state are [`crate::intercept`]'s, one file per API
//! family (`launch`, `memory`, `vmem`, `copy`, `code`, `stream`, `context`, `gate`); they run
//! on the application's thread with [`crate::intercept::Internal`] held (so the backend's own
//! driver calls go straight to the driver). Beside this file, the state of one concern each,
//! with the hooks that are that concern's alone:
//!
//! - [`graph`]: CUDA graphs modelled at instantiation and update, unrolled node by node or
//!   profiled whole at launch (SPEC §9.2 "Graphs");
//! - [`images`]: the registry of loaded code images (`cuModuleLoad*`, `cuLibraryLoad*`): their
//!   `.nv.info` parameter tables are the second source of layouts (after the driver, before
//!   `extra`), their globals go to the backend's [`crate::ModuleRegistry`] for the memory
//!   engine; its load and lookup hooks are named by `crate::intercept::code`;
//! - [`unseen`]: writes no snapshot sees (surface objects over CUDA arrays, the device heap,
//!   device `printf`, device-side graph launches, tensor maps); such launches decline
//!   `unseen_writes`;
//! - [`context`]: context life (resets and destroys, other contexts' allocations,
//!   allocations into a capturing stream), counted; its hooks are
//!   `crate::intercept::context`'s.
//!
//! Kernel names are the driver's
//! (`cuFuncGetName`), demangled ([`crate::module::demangle`]) for the filter and the output.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self, CUcontext, CUfunction, CUresult, CUstream};
use parking_lot::{Mutex, RwLock};
use replay_core::{AgentId, KernelId, MemoryClass, ReplayService};
use replay_memory::Tracker;
use serde::Serialize;

pub mod context;
pub mod graph;
pub mod images;
pub mod unseen;

use crate::launch::ParamSlot;
use crate::queue::capture_status;
use crate::queue::{Queue, QueueKind};
use crate::{BackendConfig, CudaBackend};

/// Environment variable: a built-in tool (`verify` or `timing`) to attach.
pub const BUILTIN_ENV: &str = "KREPLAY_CUDA_BUILTIN";
/// Environment variable: a C/C++ tool library to attach (its `kreplay_tool_init`).
pub const TOOL_ENV: &str = "KREPLAY_CUDA_TOOL";

static ENABLED: AtomicU8 = AtomicU8::new(0);

/// Whether interception is on: the driver called the injection entry, or the environment
/// names a tool, in a rank `KREPLAY_RANKS` selects ([`crate::job`]). Checked by every wrapper;
/// off means every call is forwarded untouched.
pub fn enabled() -> bool {
    match ENABLED.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = (std::env::var_os(BUILTIN_ENV).is_some()
                || std::env::var_os(TOOL_ENV).is_some())
                && crate::job::this_process_selected();
            if on {
                install_fork_handler();
            }
            ENABLED.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// Turns interception on or off (the injection entry; tests).
pub fn set_enabled(on: bool) {
    if on {
        install_fork_handler();
    }
    ENABLED.store(if on { 1 } else { 2 }, Ordering::Relaxed);
}

extern "C" {
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> std::ffi::c_int;
}

/// In a `fork()`ed child the interception is off: the child has only the forking thread, so a
/// lock another thread of the parent held at the fork (the tracker's, a window's) is never
/// released there, and the driver cannot serve a child anyway. Every wrapper then forwards at
/// once, touching none of the state.
unsafe extern "C" fn after_fork_in_child() {
    ENABLED.store(2, Ordering::Relaxed);
}

fn install_fork_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a child handler that only stores an atomic (async-signal-safe).
        let _ = unsafe { pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

/// Counts by kind (the run summary's "seen / replayed / run once, by kind").
#[derive(Debug, Default, Serialize)]
pub struct Counters {
    /// Launches that reached a launch wrapper.
    pub launches_seen: AtomicU64,
    /// Launches handed to the window (`ReplayService::submit`).
    pub submitted: AtomicU64,
    /// Launches into a capturing stream (run once, into the graph).
    pub stream_capture: AtomicU64,
    /// Graph launches (run once, gated).
    pub graph_launch: AtomicU64,
    /// Cooperative launches (run once, gated).
    pub cooperative: AtomicU64,
    /// Launches on a context that is not the device's primary context (run once, gated).
    pub other_context: AtomicU64,
    /// Launches before a backend could be opened (run once, gated).
    pub no_backend: AtomicU64,
    /// Launches whose layout the driver described.
    pub layout_driver: AtomicU64,
    /// Launches whose block came from `extra`.
    pub layout_extra: AtomicU64,
    /// Launches whose layout came from their image's `.nv.info` table.
    pub layout_image: AtomicU64,
    /// Launches of unknown layout (scope `all`, the application's own `kernelParams`).
    pub layout_unknown: AtomicU64,
    /// Launches the window did not submit and the wrapper submitted once itself.
    pub fallback_launch: AtomicU64,
    /// Allocations recorded, by entry.
    pub alloc_device: AtomicU64,
    /// `cuMemAllocPitch`.
    pub alloc_pitch: AtomicU64,
    /// `cuMemAllocManaged`.
    pub alloc_managed: AtomicU64,
    /// `cuMemAllocHost`, `cuMemHostAlloc`.
    pub alloc_host: AtomicU64,
    /// `cuMemHostRegister`.
    pub host_register: AtomicU64,
    /// `cuIpcOpenMemHandle` mappings recorded (another process's memory, never captured).
    pub ipc_opened: AtomicU64,
    /// Allocations exported by `cuIpcGetMemHandle` and handles by
    /// `cuMemExportToShareableHandle`, marked shared (other processes write them; never
    /// captured).
    pub ipc_exported: AtomicU64,
    /// `cuMemAllocAsync`, `cuMemAllocFromPoolAsync`.
    pub alloc_async: AtomicU64,
    /// `cuMemMap` calls reported to the tracker (a handle the wrappers saw created or
    /// imported).
    pub vmem_maps: AtomicU64,
    /// `cuMemMap` of a handle the wrappers never saw (not reported: an argument into it is
    /// asked of the driver and declines).
    pub vmem_unknown_handle: AtomicU64,
    /// `cuMemUnmap` and `cuMemAddressFree` reported (before the driver's call).
    pub vmem_unmaps: AtomicU64,
    /// Frees recorded (before the driver released).
    pub frees: AtomicU64,
    /// Allocations retried after releasing pooled backing.
    pub oom_retries: AtomicU64,
    /// Copies and memsets run under the write gate.
    pub gated_writes: AtomicU64,
    /// Launches run once, without a window, while a kernel that waits on the host or on
    /// peers (the policy's communication list) still ran on the device: a window's drain
    /// would wait for it, and it waits for the host blocked in that window.
    pub behind_host_wait: AtomicU64,
    /// Launches on other streams run once, without a window, while a stream capture the
    /// library saw launches go into was live (see [`InjectState::beside_live_capture`]).
    pub beside_capture: AtomicU64,
    /// Graph launches run node by node ([`graph`]).
    pub graph_unrolled: AtomicU64,
    /// Kernel nodes launched from them.
    pub graph_node_kernels: AtomicU64,
    /// Graph launches profiled whole (graph mode).
    pub graph_whole: AtomicU64,
}

/// What the library knows of one function's argument block.
#[derive(Debug, Clone)]
pub struct FuncInfo {
    /// The driver's name (`cuFuncGetName`), or a placeholder.
    pub name: Arc<str>,
    /// The layout, when the driver or the image described it (`None`: unknown).
    pub layout: Option<Vec<ParamSlot>>,
    /// Whether `layout` came from the image's `.nv.info` table.
    pub from_image: bool,
}

/// Where a launch's argument block came from (said in the tool's record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayoutSource {
    /// `cuFuncGetParamInfo` / `cuKernelGetParamInfo`.
    Driver,
    /// `extra`'s `CU_LAUNCH_PARAM_BUFFER_POINTER`.
    Extra,
    /// The `.nv.info` parameter table of the kernel's image.
    Image,
    /// Not known: scope `all`, the application's `kernelParams`.
    Unknown,
}

impl LayoutSource {
    /// The name the tools' records give it (its serialized form).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Driver => "driver",
            Self::Extra => "extra",
            Self::Image => "image",
            Self::Unknown => "unknown",
        }
    }
}

/// The process-wide interception state.
pub struct InjectState {
    /// Every allocation the wrappers saw.
    pub tracker: Arc<Tracker>,
    pub(crate) backends: Mutex<HashMap<i32, Result<Arc<CudaBackend>, String>>>,
    pub(crate) streams: Mutex<HashMap<usize, Arc<Queue>>>,
    /// Streams seen (device ordinal, handle, context current then) before that device's
    /// backend was opened.
    pub(crate) pending_streams: Mutex<Vec<(i32, usize, usize)>>,
    pub(crate) funcs: RwLock<HashMap<usize, Arc<FuncInfo>>>,
    /// Layout source per kernel id of the last launch of it.
    pub(crate) sources: Mutex<HashMap<u64, LayoutSource>>,
    /// Physical handles the wrappers saw created, imported or bound into a multicast object,
    /// by handle, with what a mapping of them is (SPEC §7.1 mapping row).
    pub(crate) handles: Mutex<HashMap<u64, HandleInfo>>,
    /// The `cuMemMap` ranges of the handles in `handles`, by base: (size, handle), so an
    /// export of a handle finds every address it is mapped at.
    pub(crate) mapped: Mutex<std::collections::BTreeMap<u64, (u64, u64)>>,
    /// The counts.
    pub counters: Counters,
    /// Kernels of the policy's communication list still running, by agent: an event recorded
    /// on the stream after each (see [`InjectState::behind_host_wait`]).
    host_waits: Mutex<Vec<(AgentId, crate::device::Event)>>,
    /// Streams launches were captured into, by agent, until their capture is seen ended.
    pub(crate) captures: Mutex<Vec<(AgentId, usize)>>,
    /// Graph launches run once, by reason ([`graph`]).
    graph_run_once: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    service: RwLock<Option<Arc<ReplayService>>>,
    source: OnceLock<fn() -> Arc<ReplayService>>,
    on_first: OnceLock<fn(&Arc<ReplayService>)>,
    pub(crate) told_unavailable: AtomicBool,
}

impl std::fmt::Debug for InjectState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InjectState")
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// The state (created on first use).
pub fn state() -> &'static InjectState {
    static S: OnceLock<InjectState> = OnceLock::new();
    S.get_or_init(|| InjectState {
        tracker: Arc::new(Tracker::new()),
        backends: Mutex::new(HashMap::new()),
        streams: Mutex::new(HashMap::new()),
        pending_streams: Mutex::new(Vec::new()),
        funcs: RwLock::new(HashMap::new()),
        sources: Mutex::new(HashMap::new()),
        handles: Mutex::new(HashMap::new()),
        mapped: Mutex::new(std::collections::BTreeMap::new()),
        counters: Counters::default(),
        host_waits: Mutex::new(Vec::new()),
        captures: Mutex::new(Vec::new()),
        graph_run_once: Mutex::new(std::collections::BTreeMap::new()),
        service: RwLock::new(None),
        source: OnceLock::new(),
        on_first: OnceLock::new(),
        told_unavailable: AtomicBool::new(false),
    })
}

/// Gives the interception the service it submits to.
pub fn set_service(service: Arc<ReplayService>) {
    *state().service.write() = Some(service);
}

/// Names where the service comes from when first needed (the shared object's one service);
/// the first call wins. Called by every exported entry, so it must be cheap.
pub fn set_service_source(f: fn() -> Arc<ReplayService>) {
    let _ = state().source.set(f);
}

/// The service: the one set, else the one from the source (set then), running what
/// [`set_on_first_service`] named the first time.
pub fn service() -> Option<Arc<ReplayService>> {
    let s = state();
    if let Some(svc) = s.service.read().clone() {
        return Some(svc);
    }
    let f = s.source.get()?;
    let svc = f();
    {
        let mut w = s.service.write();
        if w.is_none() {
            *w = Some(Arc::clone(&svc));
        } else {
            return w.clone();
        }
    }
    if let Some(f) = s.on_first.get() {
        f(&svc);
    }
    Some(svc)
}

/// Names what runs once on the service when it is first created (the shared object attaches
/// the tool the environment names: [`crate::tool::attach_from_env`]); the first call wins.
/// Cheap: called by every exported entry.
pub fn set_on_first_service(f: fn(&Arc<ReplayService>)) {
    let _ = state().on_first.set(f);
}

impl InjectState {
    /// The backend of device `ordinal`, opened on first use; the error says why not.
    pub fn backend(&self, ordinal: i32) -> Result<Arc<CudaBackend>, String> {
        let mut b = self.backends.lock();
        b.entry(ordinal)
            .or_insert_with(|| {
                CudaBackend::new(ordinal, Arc::clone(&self.tracker), BackendConfig::default())
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
    }

    /// Closes the backend of device `ordinal` (a context reset): the next launch opens a new
    /// one. Returns it, so the caller drops it while the context still lives.
    pub(crate) fn close_backend(&self, ordinal: i32) -> Option<Arc<CudaBackend>> {
        self.backends.lock().remove(&ordinal)?.ok()
    }

    /// The device whose open backend uses `ctx` (its primary context), if any.
    pub(crate) fn device_of_context(&self, ctx: CUcontext) -> Option<i32> {
        self.backends.lock().iter().find_map(|(&d, b)| {
            b.as_ref()
                .ok()
                .filter(|b| b.device().raw_context() == ctx)
                .map(|_| d)
        })
    }

    /// Every backend opened.
    pub fn open_backends(&self) -> Vec<Arc<CudaBackend>> {
        let b = self.backends.lock();
        b.values()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect()
    }

    /// The backend of `agent`, if opened.
    pub fn backend_of(&self, agent: AgentId) -> Option<Arc<CudaBackend>> {
        let b = self.backends.lock();
        b.get(&(agent.0 as i32))
            .and_then(|r| r.as_ref().ok().cloned())
    }

    /// How the last launch of kernel `id` had its block.
    pub fn layout_source(&self, id: KernelId) -> Option<LayoutSource> {
        self.sources.lock().get(&id.0).copied()
    }

    /// The counts as JSON.
    pub fn counters_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.counters).unwrap_or_default();
        if let (Some(o), serde_json::Value::Object(i)) =
            (v.as_object_mut(), images::counters_json())
        {
            o.extend(i);
        }
        for extra in [unseen::counters_json(), context::counters_json()] {
            if let (Some(o), serde_json::Value::Object(u)) = (v.as_object_mut(), extra) {
                o.extend(u);
            }
        }
        if let Some(o) = v.as_object_mut() {
            let once: serde_json::Map<String, serde_json::Value> = self
                .graph_run_once
                .lock()
                .iter()
                .map(|(k, n)| ((*k).to_string(), (*n).into()))
                .collect();
            o.insert("graph_run_once".into(), once.into());
        }
        if let Some(o) = v.as_object_mut() {
            // Run once by the window's check (SPEC §9.2), counted by the service.
            let n = service().map_or(0, |s| s.communication_runs());
            o.insert("communication".into(), n.into());
        }
        v
    }

    pub(crate) fn func_info(&self, f: CUfunction) -> Arc<FuncInfo> {
        if let Some(i) = self.funcs.read().get(&(f as usize)) {
            return Arc::clone(i);
        }
        let (layout, from_image) = match param_layout(f) {
            Some(l) => (Some(l), false),
            None => match images::image_layout(f) {
                Some(l) => (Some(l), true),
                None => (None, false),
            },
        };
        let info = Arc::new(FuncInfo {
            name: func_name(f),
            layout,
            from_image,
        });
        self.funcs.write().insert(f as usize, Arc::clone(&info));
        info
    }

    /// Whether a kernel that waits on the host or on peers (a communication kernel, such as
    /// XLA's autotuning `DelayKernel`, which spins on a host flag the host sets only after it
    /// has enqueued the launches it times) still runs on `agent`'s device. A window would
    /// drain behind it and time out, and the timed launches would be replayed instead of
    /// timed once; so launches meanwhile run once, untouched. Finished waits are forgotten.
    pub(crate) fn behind_host_wait(&self, agent: AgentId) -> bool {
        let mut w = self.host_waits.lock();
        // An error querying counts as finished: the drain then reports what it finds.
        w.retain(|(_, e)| !e.query().unwrap_or(true));
        w.iter().any(|(a, _)| *a == agent)
    }

    /// Remembers that a communication kernel was just submitted to `stream` (not capturing).
    pub(crate) fn note_host_wait(&self, agent: AgentId, stream: CUstream) {
        let event = crate::device::Event::create(false).and_then(|e| e.record(stream).map(|()| e));
        match event {
            Ok(e) => self.host_waits.lock().push((agent, e)),
            Err(e) => log::debug!("[kernel-replay] marking a communication kernel's end: {e}"),
        }
    }

    /// Whether a stream capture on `agent`'s device that launches were seen going into is
    /// still live. A window beside it cannot drain the capturing stream (an event recorded
    /// there joins the capture), and its snapshot, checks and restores would run while the
    /// capturing thread's allocator hands out and frees the graph's memory: launches on other
    /// streams run once, untouched, until the capture ends. Ended captures are forgotten.
    pub(crate) fn beside_live_capture(&self, agent: AgentId) -> bool {
        let mut c = self.captures.lock();
        if c.is_empty() {
            return false;
        }
        c.retain(|&(_, st)| {
            capture_status(st as CUstream)
                .map(|x| x.is_live())
                .unwrap_or(false)
        });
        c.iter().any(|(a, _)| *a == agent)
    }

    pub(crate) fn note_capture(&self, agent: AgentId, stream: CUstream) {
        let mut c = self.captures.lock();
        if !c.iter().any(|&(a, st)| a == agent && st == stream as usize) {
            c.push((agent, stream as usize));
        }
    }

    /// Registers the streams [`crate::intercept::stream::note_stream`] saw on device `ord`
    /// before its backend opened.
    pub(crate) fn adopt_pending_streams(&self, backend: &CudaBackend, ord: i32) {
        let mine: Vec<usize> = {
            let mut p = self.pending_streams.lock();
            if p.is_empty() {
                return;
            }
            let (mine, rest): (Vec<_>, Vec<_>) = p.drain(..).partition(|&(d, _, _)| d == ord);
            *p = rest;
            // Only the primary context's streams (the backend's): another context's stream
            // cannot carry the backend's events.
            let primary = backend.device().raw_context() as usize;
            mine.into_iter()
                .filter(|&(_, _, c)| c == primary)
                .map(|(_, s, _)| s)
                .collect()
        };
        for s in mine {
            self.register_stream(backend, s as CUstream);
        }
    }

    pub(crate) fn register_stream(&self, backend: &CudaBackend, s: CUstream) {
        if is_special_stream(s) {
            return;
        }
        let mut m = self.streams.lock();
        m.entry(s as usize).or_insert_with(|| {
            // SAFETY: an application stream of this device's primary context (the caller
            // checked the context), kept until the application destroys it (the
            // cuStreamDestroy wrapper forgets it first).
            unsafe { backend.register_stream(s, QueueKind::Compute) }
        });
    }
}

/// The legacy (null, `CU_STREAM_LEGACY`) and per-thread (`CU_STREAM_PER_THREAD`) handles.
pub(crate) fn is_special_stream(s: CUstream) -> bool {
    (s as usize) <= 2
}

fn func_name(f: CUfunction) -> Arc<str> {
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: `f` is the application's function handle; out pointer to a live local.
    let mut r = unsafe { sys::cuFuncGetName(&mut p, f) };
    if r != CUresult::CUDA_SUCCESS || p.is_null() {
        // SAFETY: a CUkernel may be passed where a CUfunction is expected (CUDA 12).
        r = unsafe { sys::cuKernelGetName(&mut p, f as sys::CUkernel) };
    }
    if r == CUresult::CUDA_SUCCESS && !p.is_null() {
        // SAFETY: the driver returns a NUL-terminated name it owns.
        let raw = unsafe { CStr::from_ptr(p) }.to_string_lossy();
        // Demangled for the filter and the output (the driver's name is mangled).
        Arc::from(crate::module::demangle::demangle(&raw).as_str())
    } else {
        Arc::from(format!("<function {:#x}>", f as usize).as_str())
    }
}

fn param_layout(f: CUfunction) -> Option<Vec<ParamSlot>> {
    let try_with = |kernel: bool| -> Option<Vec<ParamSlot>> {
        let mut out = Vec::new();
        for i in 0..1024usize {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: the application's handle; out pointers to live locals.
            let r = unsafe {
                if kernel {
                    sys::cuKernelGetParamInfo(f as sys::CUkernel, i, &mut offset, &mut size)
                } else {
                    sys::cuFuncGetParamInfo(f, i, &mut offset, &mut size)
                }
            };
            match r {
                CUresult::CUDA_SUCCESS => out.push(ParamSlot {
                    offset: offset as u32,
                    size: size as u32,
                }),
                CUresult::CUDA_ERROR_INVALID_VALUE if i > 0 => return Some(out),
                _ => return None,
            }
        }
        None
    };
    try_with(false).or_else(|| try_with(true))
}

/// The current context's device ordinal.
pub(crate) fn current_device() -> Option<i32> {
    let mut d: sys::CUdevice = 0;
    // SAFETY: out pointer to a live local.
    let r = unsafe { sys::cuCtxGetDevice(&mut d) };
    (r == CUresult::CUDA_SUCCESS).then_some(d)
}

pub(crate) fn current_context() -> sys::CUcontext {
    let mut c: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: out pointer to a live local.
    let _ = unsafe { sys::cuCtxGetCurrent(&mut c) };
    c
}

/// What a mapping of a physical handle is, remembered from the call that made the handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandleInfo {
    /// `cuMemCreate`: memory of `owner` (its location's device; the creating context's device
    /// for host memory) of `class` (`DEVICE_COARSE`, or `PINNED_HOST` for host locations).
    Local { owner: AgentId, class: MemoryClass },
    /// `cuMemImportFromShareableHandle`: another process's memory.
    Imported { owner: AgentId },
    /// A `cuMemCreate` handle exported (`cuMemExportToShareableHandle`): this process's
    /// memory, which other processes write; mapped as shared memory, like an imported one.
    Exported { owner: AgentId },
    /// `cuMulticastCreate`, or memory bound into a multicast object.
    Multicast { owner: AgentId },
}

impl HandleInfo {
    pub(crate) fn mapped(self) -> replay_memory::MappedHandle {
        use replay_memory::MappedHandle as M;
        match self {
            Self::Local { owner, class } => M::Local { owner, class },
            Self::Imported { owner } | Self::Exported { owner } => M::Imported { owner },
            Self::Multicast { owner } => M::Multicast { owner },
        }
    }
}

pub(crate) fn current_agent() -> Option<AgentId> {
    current_device().map(|d| AgentId(d as u64))
}
