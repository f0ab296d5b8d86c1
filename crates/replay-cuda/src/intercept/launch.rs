//! The launch entries' hooks (SPEC §6, §9.2 "Unmodified applications"): what the wrappers of
//! `cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel` (and their `_ptsz`
//! forms) call, and [`run_launch`], the one path every intercepted launch takes (graph
//! launches unrolled node by node come here too, from [`crate::state::graph`]).
//!
//! - **Launches** (`cuLaunchKernel`, `cuLaunchKernelEx`, their `_ptsz` forms): the launch is
//!   captured (function, grid, block, shared memory, stream, the application's own
//!   `kernelParams` / `extra` / launch configuration as given) and run through
//!   [`replay_core::ReplayService::submit`] with the backend's agent and memory layer, so the window of
//!   SPEC §6 runs inside the wrapper, where the library owns the call. Every pass submits the
//!   application's own call again. The argument block for the scope comes from
//!   `cuFuncGetParamInfo` (else `cuKernelGetParamInfo`), else the `.nv.info` table of the
//!   kernel's image, else from `extra`'s buffer; when
//!   neither answers, the layout is *unknown*: the launch is a candidate only while the
//!   policy's scope is `all` (with `arguments` it runs once, counted `layout_unknown`), and its
//!   block names every tracked managed and pinned region, so all of them are captured (see
//!   `capturable_words`) instead of only watched. Launches into a capturing stream are `SubmissionKind::StreamCapture`
//!   (run once by the window's gate rule); cooperative launches (`cuLaunchCooperativeKernel`,
//!   or the cooperative attribute) run once under the agent's write gate, counted by kind;
//!   graph launches are unrolled node by node, profiled whole, or run once by a named reason
//!   ([`crate::state::graph`]); communication kernels (the policy's `filter.communication` list,
//!   `KREPLAY_COMMUNICATION_KERNELS`, and every kernel of a module that links NVSHMEM, whose
//!   code object is declared to the service: `ReplayService::mark_communication_code_object`)
//!   reach the window, whose check runs them once, counted by the service
//!   (`ReplayService::communication_runs`, the report's `communication`). Each image the
//!   application loaded is its own code object in the launch's `KernelKey`, so an unload
//!   forgets only that image's memos and predictions.
//!
//! A launch on a context that is not its device's primary context, or before any backend can
//! be opened, runs once under the device's write gate, counted ([`launch_backend`]). When no
//! backend can be opened at all, one line says why and the program runs untouched.
//!
//! Kernel names are the driver's (`cuFuncGetName`), demangled ([`crate::module::demangle`])
//! for the filter and the output; what is known of each function is kept in
//! [`crate::state::InjectState`].

use std::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUfunction, CUlaunchConfig, CUresult, CUstream};
use replay_core::{
    AgentId, Dim3, Dispatch, DispatchInfo, KernelId, KernelKey, Origin, Scope, SubmissionKind,
};
use replay_memory::Tracker;

use super::gate::gate_agent;
use super::stream::note_stream;
use crate::agent::CapturedLaunch;
use crate::launch::{ArgBlock, LaunchConfig};
use crate::launch::{How, Relaunch};
use crate::queue::{capture_status, RelaxedCapture};
use crate::state::{current_context, current_device, service};
use crate::state::{images, state, unseen, InjectState, LayoutSource};
use crate::CudaBackend;

/// The backend for a launch on the current context, or why it runs untouched.
pub(crate) fn launch_backend(s: &InjectState) -> Option<Arc<CudaBackend>> {
    let Some(ord) = current_device() else {
        s.counters.no_backend.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    let before = current_context();
    match s.backend(ord) {
        Ok(b) => {
            if before != b.device().raw_context() {
                // Opening the backend made the primary context current: give the application
                // its own back, and leave its launch alone.
                if !before.is_null() {
                    // SAFETY: the context that was current on this thread a moment ago.
                    let _ = unsafe { sys::cuCtxSetCurrent(before) };
                }
                s.counters.other_context.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            s.adopt_pending_streams(&b, ord);
            Some(b)
        }
        Err(why) => {
            if !s.told_unavailable.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "[kernel-replay] CUDA replay unavailable ({why}); the program runs untouched"
                );
            }
            s.counters.no_backend.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// The block from `extra` (`CU_LAUNCH_PARAM_BUFFER_POINTER` / `_SIZE`), if it has one.
///
/// # Safety
/// `extra` is null or the driver's `extra` array (pairs ending with `CU_LAUNCH_PARAM_END`).
unsafe fn extra_block(extra: *mut *mut c_void) -> Option<Vec<u8>> {
    if extra.is_null() {
        return None;
    }
    let (mut buf, mut size): (*const u8, usize) = (std::ptr::null(), 0);
    let mut i = 0;
    loop {
        // SAFETY: the caller's contract: pairs until END (0).
        let key = unsafe { *extra.add(i) } as usize;
        match key {
            0 => break,
            // SAFETY: as above; the value follows its key.
            1 => buf = unsafe { *extra.add(i + 1) } as *const u8,
            // SAFETY: as above; the value points to a size_t.
            2 => size = unsafe { *(*extra.add(i + 1) as *const usize) },
            _ => {}
        }
        i += 2;
        if i > 64 {
            return None;
        }
    }
    if buf.is_null() || size == 0 || size > 32 * 1024 {
        return None;
    }
    // SAFETY: the driver reads `size` bytes there too.
    Some(unsafe { std::slice::from_raw_parts(buf, size) }.to_vec())
}

/// The block given to the memory engine for a launch of unknown layout: the base address of
/// every tracked managed, pinned-host or fine-grained region of `agent`, one 8-byte word each.
///
/// Scope `all` captures every coarse device region whatever the block says, but captures
/// capturable host-visible memory only where an argument word reaches it; with no words
/// known, such memory would be left to the scope check (which does not watch host-resident
/// memory at all, `replay_memory::host_resident`), and a kernel writing it would go unseen or
/// truncate after one pass. Naming every region makes the engine capture them all, which is safe whichever of
/// them the kernel really reaches: a word that is not an argument only enlarges the snapshot.
/// The driver still receives the application's own `kernelParams`.
fn capturable_words(tracker: &Tracker, agent: AgentId) -> smallvec::SmallVec<[u8; 256]> {
    let mut k = smallvec::SmallVec::new();
    for r in tracker.regions(agent) {
        if replay_memory::classify(r.class) == replay_memory::Treatment::CapturableUntracked {
            k.extend_from_slice(&r.base.to_le_bytes());
        }
    }
    k
}

/// One intercepted launch, as the hooks give it.
pub(crate) struct Intercepted {
    pub(crate) f: CUfunction,
    pub(crate) grid: Dim3,
    pub(crate) block: Dim3,
    pub(crate) shmem: u32,
    /// The stream the launch goes to, as a handle valid for the backend's own calls (the
    /// per-thread default stream spelled `CU_STREAM_PER_THREAD`).
    pub(crate) stream: CUstream,
    pub(crate) params: *mut *mut c_void,
    pub(crate) extra: *mut *mut c_void,
    pub(crate) cooperative: bool,
}

/// Runs one intercepted launch; `direct` submits the application's call once, as given.
///
/// # Safety
/// The arguments are the application's, valid for its launch call.
pub(crate) unsafe fn run_launch(l: Intercepted, how: How, reached: &mut bool) -> CUresult {
    let s = state();
    s.counters.launches_seen.fetch_add(1, Ordering::Relaxed);
    let relaunch = Relaunch::new(how);
    let direct = |reached: &mut bool| -> CUresult {
        *reached = true;
        match relaunch.launch() {
            Ok(()) => CUresult::CUDA_SUCCESS,
            Err(_) => *relaunch.last.lock(),
        }
    };
    let Some(service) = service() else {
        return direct(reached);
    };
    // Everything from here on (opening a backend, the window's drains, snapshots, event
    // queries, frees of its backing) must not disturb a capture another thread runs in global
    // mode; the application's own launch is not a call that mode prohibits.
    let _relaxed = RelaxedCapture::enter();
    crate::intercept::cupti::subscribe();
    let Some(backend) = launch_backend(s) else {
        // Run once, but never inside another thread's window on the device (`context`).
        let _gate = gate_agent().map(|(svc, a)| svc.enter_write(a));
        return direct(reached);
    };
    let agent = backend.agent_id();
    let info = s.func_info(l.f);
    // Communication kernels (the policy's list, SPEC §9.2) reach the window, which runs them
    // once and counts them, as for every backend.
    if l.cooperative {
        s.counters.cooperative.fetch_add(1, Ordering::Relaxed);
        let _gate = service.enter_write(agent);
        return direct(reached);
    }
    s.register_stream(&backend, l.stream);
    let capture = capture_status(l.stream)
        .map(|c| c.is_live())
        .unwrap_or(false);
    let communication = service.policy().filter.is_communication(&info.name);
    if capture {
        s.note_capture(agent, l.stream);
    } else if s.beside_live_capture(agent) {
        s.counters.beside_capture.fetch_add(1, Ordering::Relaxed);
        let _gate = service.enter_write(agent);
        return direct(reached);
    }
    if !capture && s.behind_host_wait(agent) {
        s.counters.behind_host_wait.fetch_add(1, Ordering::Relaxed);
        let _gate = service.enter_write(agent);
        let r = direct(reached);
        if communication && r == CUresult::CUDA_SUCCESS {
            s.note_host_wait(agent, l.stream);
        }
        return r;
    }
    let image = images::launch_image(l.f);
    if image.links_nvshmem() {
        // Its kernels wait on peers that do not repeat their side: the window runs them once.
        service.mark_communication_code_object(agent, image.code_object());
    }
    images::globals::resolve_globals(agent, &image, backend.modules(), &s.tracker);
    // An image whose globals are unknown declines in the window's admission (`images`).
    let unknown = images::globals::unknown_globals(&image, &info.name);
    // SAFETY: the application's kernelParams/extra, as valid as the driver requires.
    let (kernarg, source) = match (&info.layout, unsafe { extra_block(l.extra) }) {
        (_, Some(bytes)) => {
            let mut k: smallvec::SmallVec<[u8; 256]> = smallvec::SmallVec::from_vec(bytes);
            k.resize(k.len().next_multiple_of(8), 0);
            (k, LayoutSource::Extra)
        }
        (Some(layout), None) if !l.params.is_null() || layout.is_empty() => {
            // SAFETY: the driver described `layout` for this function; `kernelParams` has one
            // pointer per parameter, each to at least its size (cuLaunchKernel's contract).
            let a = unsafe { ArgBlock::capture(layout, l.params as *const *const c_void) };
            let src = if info.from_image {
                LayoutSource::Image
            } else {
                LayoutSource::Driver
            };
            (a.kernarg(), src)
        }
        _ => (capturable_words(&s.tracker, agent), LayoutSource::Unknown),
    };
    match source {
        LayoutSource::Driver => &s.counters.layout_driver,
        LayoutSource::Extra => &s.counters.layout_extra,
        LayoutSource::Image => &s.counters.layout_image,
        LayoutSource::Unknown => &s.counters.layout_unknown,
    }
    .fetch_add(1, Ordering::Relaxed);
    s.sources.lock().insert(l.f as u64, source);
    if source == LayoutSource::Unknown && service.policy().scope == Scope::Arguments {
        // The scope would be computed from an empty block: run once instead. Under `auto` the
        // window resolves an unknown layout to `all` (`Dispatch::arg_layout` below).
        let _gate = service.enter_write(agent);
        return direct(reached);
    }
    if capture {
        s.counters.stream_capture.fetch_add(1, Ordering::Relaxed);
    }
    // Writes no snapshot sees (`unseen`): a reason to decline, or tensor-map targets the
    // scope must reach (their addresses join the words it reads).
    let unseen = unseen::check(
        &kernarg,
        source != LayoutSource::Unknown,
        &image,
        &info.name,
    );
    let mut kernarg = kernarg;
    for w in unseen.target_words() {
        kernarg.extend_from_slice(&w);
    }
    let captured = Arc::new(CapturedLaunch {
        func: l.f,
        cfg: LaunchConfig {
            grid: l.grid,
            block: l.block,
            shared_mem_bytes: l.shmem,
        },
        stream: l.stream,
        layout: smallvec::SmallVec::new(),
        completion: None,
        _keep: None,
        relaunch: Some(relaunch),
    });
    let handle = backend.agent().register_launch(Arc::clone(&captured));
    let dispatch = Dispatch {
        info: DispatchInfo::new(
            agent,
            replay_core::QueueId(l.stream as u64),
            KernelId(l.f as u64),
            Arc::clone(&info.name),
            Dim3::new(
                l.grid.x.saturating_mul(l.block.x),
                l.grid.y.saturating_mul(l.block.y),
                l.grid.z.saturating_mul(l.block.z),
            ),
            l.block,
        )
        .with_group_segment_size(l.shmem),
        kernel: KernelKey {
            agent,
            code_object: image.code_object(),
            symbol: l.f as u64,
        },
        kind: if capture {
            SubmissionKind::StreamCapture
        } else {
            SubmissionKind::KernelDispatch
        },
        kernarg,
        origin: Origin::SubmittingThread,
        handle,
        arg_layout: if source == LayoutSource::Unknown {
            replay_core::ArgLayout::Unknown
        } else {
            replay_core::ArgLayout::Known
        },
    };
    s.counters.submitted.fetch_add(1, Ordering::Relaxed);
    *reached = true;
    let globals = images::globals::GlobalsGate::new(&**backend.engine(), unknown);
    let memory = unseen::UnseenGate::new(&globals, unseen);
    let r = service.submit(&**backend.agent(), &memory, dispatch);
    backend.agent().unregister_launch(handle);
    backend.release_idle(service.policy().pool_idle_release);
    let rl = captured.relaunch.as_ref().expect("set above");
    if rl.launches.load(Ordering::Relaxed) == 0 {
        // The window returned without submitting (an error before any launch): the
        // application's launch still runs, once.
        if let Err(e) = &r {
            log::warn!("[kernel-replay] {}: {e}; launching once", info.name);
        }
        s.counters.fallback_launch.fetch_add(1, Ordering::Relaxed);
        return match rl.launch() {
            Ok(()) => CUresult::CUDA_SUCCESS,
            Err(_) => *rl.last.lock(),
        };
    }
    let last = *rl.last.lock();
    if let Err(e) = &r {
        log::warn!("[kernel-replay] {}: {e}", info.name);
    }
    if communication && !capture && last == CUresult::CUDA_SUCCESS {
        s.note_host_wait(agent, l.stream);
    }
    last
}

/// Per-thread streams: a `_ptsz` entry's null stream is the calling thread's default stream.
pub(crate) fn effective_stream<const PTSZ: bool>(s: CUstream) -> CUstream {
    if PTSZ && s.is_null() {
        2usize as CUstream // CU_STREAM_PER_THREAD
    } else {
        s
    }
}

type LaunchFn = unsafe extern "C" fn(
    CUfunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CUstream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CUresult;

/// Hook of `cuLaunchKernel` (`PTSZ`: `cuLaunchKernel_ptsz`).
///
/// # Safety
/// The entry's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn hook_launch_kernel<const PTSZ: bool>(
    real: LaunchFn,
    reached: &mut bool,
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shmem: c_uint,
    s: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let l = Intercepted {
        f,
        grid: Dim3::new(gx, gy, gz),
        block: Dim3::new(bx, by, bz),
        shmem,
        stream: effective_stream::<PTSZ>(s),
        params,
        extra,
        cooperative: false,
    };
    let how = How::Kernel {
        real,
        f,
        grid: [gx, gy, gz],
        block: [bx, by, bz],
        shmem,
        stream: s,
        params,
        extra,
    };
    // SAFETY: the caller's contract.
    unsafe { run_launch(l, how, reached) }
}

type LaunchExFn = unsafe extern "C" fn(
    *const CUlaunchConfig,
    CUfunction,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CUresult;

/// Hook of `cuLaunchKernelEx` (`PTSZ`: `cuLaunchKernelEx_ptsz`). Attributes are kept as
/// given (every pass submits the same configuration); a cooperative one runs once.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_launch_kernel_ex<const PTSZ: bool>(
    real: LaunchExFn,
    reached: &mut bool,
    c: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    if c.is_null() {
        *reached = true;
        // SAFETY: forwarded; the driver rejects it.
        return unsafe { real(c, f, params, extra) };
    }
    // SAFETY: the caller's contract: a valid configuration.
    let cfg = unsafe { &*c };
    let mut cooperative = false;
    if !cfg.attrs.is_null() {
        for i in 0..cfg.numAttrs as usize {
            // SAFETY: `numAttrs` attributes at `attrs` (the entry's contract).
            let a = unsafe { &*cfg.attrs.add(i) };
            // The id as the C enum's 32 bits: an id newer than the bindings is no value of
            // their Rust enum, and reading it as one would be undefined behaviour.
            // SAFETY: `id` is the attribute's first member, a 4-byte C enum.
            let id = unsafe { std::ptr::addr_of!(a.id).cast::<u32>().read() };
            if id == sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE as u32
                // SAFETY: the cooperative attribute's value is the `cooperative` member.
                && unsafe { a.value.cooperative } != 0
            {
                cooperative = true;
            }
        }
    }
    let l = Intercepted {
        f,
        grid: Dim3::new(cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
        block: Dim3::new(cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ),
        shmem: cfg.sharedMemBytes,
        stream: effective_stream::<PTSZ>(cfg.hStream),
        params,
        extra,
        cooperative,
    };
    let how = How::Ex {
        real,
        config: c,
        f,
        params,
        extra,
    };
    // SAFETY: the caller's contract.
    unsafe { run_launch(l, how, reached) }
}

type CoopFn = unsafe extern "C" fn(
    CUfunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CUstream,
    *mut *mut c_void,
) -> CUresult;

/// Hook of `cuLaunchCooperativeKernel` (both forms): runs once under the write gate, counted.
///
/// # Safety
/// The entry's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn hook_cooperative(
    real: CoopFn,
    reached: &mut bool,
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shmem: c_uint,
    s: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    let st = state();
    st.counters.launches_seen.fetch_add(1, Ordering::Relaxed);
    st.counters.cooperative.fetch_add(1, Ordering::Relaxed);
    note_stream(s);
    let _gate = gate_agent().map(|(svc, a)| svc.enter_write(a));
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(f, gx, gy, gz, bx, by, bz, shmem, s, params) }
}
