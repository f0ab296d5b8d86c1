//! The allocation, free and host-register hooks (SPEC §7.1, §9.2 "Unmodified applications"):
//! every driver allocation entry is recorded with its class, each under the agent of the
//! current context's device:
//!
//! `cuMemAlloc`, `cuMemAllocPitch` (device), `cuMemAllocManaged` (managed),
//! `cuMemAllocHost`, `cuMemHostAlloc`, `cuMemHostRegister` (pinned host, at the host address
//! kernels use under unified addressing; a range registered `READ_ONLY` is also read-only,
//! one registered `IOMEMORY` is uncapturable: [`host_register_class`]),
//! `cuIpcOpenMemHandle` (another process's memory: `IPC_IMPORTED`, never captured; forgotten
//! at `cuIpcCloseMemHandle`), `cuIpcGetMemHandle` (this process's allocation handed to
//! another: marked `IPC_IMPORTED` from then on, until its free), `cuMemAllocAsync` and `cuMemAllocFromPoolAsync`
//! (stream-ordered: captured like device memory until `cuMemFreeAsync` orders the free;
//! a pool located on the host or imported is not told apart yet), and CUDA arrays
//! (`cuArrayCreate`, `cuMipmappedArrayCreate`, counted by [`crate::state::unseen`]). Frees
//! are recorded before the driver releases. An allocation that fails for lack of memory
//! releases the memory layer's pooled backing and is retried once ([`with_oom_retry`]).
//! Allocations in another context than the device's primary one, and stream-ordered ones
//! into a capturing stream, are not recorded ([`crate::state::context`]).

use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys::{self, CUdeviceptr, CUresult, CUstream};
use replay_core::{AgentId, MemoryClass};

use super::context::skip_other_context_alloc;
use super::stream::note_stream;
use crate::queue::RelaxedCapture;
use crate::state::{context, unseen};
use crate::state::{current_device, service, state};

/// Which backing an allocation competes with: the current device's memory, or the host's
/// page-locked memory (every device's pinned backing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Competes {
    Device,
    Host,
}

/// Calls `alloc` after releasing backing that sat unused past the policy's bound; on
/// out-of-memory releases the backing it competes with (the current device's backend, or every
/// backend for host memory) and calls it once more.
pub(crate) fn with_oom_retry(competes: Competes, mut alloc: impl FnMut() -> CUresult) -> CUresult {
    let s = state();
    let device = current_device().and_then(|d| s.backend_of(AgentId(d as u64)));
    // Not from a tool's callback: a window is open there, and its frees wait for the device.
    let in_window = replay_core::locks::thread_in_callback();
    if let (Some(b), Some(svc), false) = (&device, service(), in_window) {
        // Driver frees only where something waits for release, in relaxed mode there.
        b.release_idle(svc.policy().pool_idle_release);
    }
    let r = alloc();
    if r != CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        return r;
    }
    let holders = match competes {
        Competes::Device => device.into_iter().collect(),
        Competes::Host => s.open_backends(),
    };
    if holders.is_empty() {
        return r;
    }
    let freed: u64 = holders.iter().map(|b| b.release_backing()).sum();
    log::info!(
        "[kernel-replay] an application allocation ran out of memory: released {freed} bytes of backing memory, retrying"
    );
    s.counters.oom_retries.fetch_add(1, Ordering::Relaxed);
    alloc()
}

/// Hook of `cuArrayCreate_v2` and `cuArray3DCreate_v2`: device memory too, so retried
/// after a release on out of memory (`unseen::hook_array_create` counts it).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_array_create(
    real: unsafe extern "C" fn(*mut u64, *const c_void) -> CUresult,
    reached: &mut bool,
    a: *mut u64,
    desc: *const c_void,
) -> CUresult {
    // SAFETY: forwarded as given.
    with_oom_retry(Competes::Device, || unsafe {
        unseen::hook_array_create(real, reached, a, desc)
    })
}

/// Hook of `cuMipmappedArrayCreate`: as [`hook_array_create`].
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mipmapped_array_create(
    real: unsafe extern "C" fn(*mut u64, *const c_void, c_uint) -> CUresult,
    reached: &mut bool,
    a: *mut u64,
    desc: *const c_void,
    levels: c_uint,
) -> CUresult {
    // SAFETY: forwarded as given.
    with_oom_retry(Competes::Device, || unsafe {
        unseen::hook_mipmapped_array_create(real, reached, a, desc, levels)
    })
}

fn record(base: u64, size: u64, class: MemoryClass, counter: &AtomicU64) {
    let Some(d) = current_device() else { return };
    if base == 0 || size == 0 || skip_other_context_alloc() {
        return;
    }
    let g = state()
        .tracker
        .record_alloc(AgentId(d as u64), base, size, class);
    counter.fetch_add(1, Ordering::Relaxed);
    // Diagnostics: with the free's line, the history a digest of freed memory is read against.
    log::debug!(
        "[kernel-replay] recorded {class:?} {base:#x}+{size} (generation {g}) on device {d}"
    );
}

/// After an allocating call: when it succeeded, the address the driver wrote at `out`
/// (converted by `addr`) is recorded as `size` bytes of `class` ([`record`]).
///
/// # Safety
/// `out` is null or the call's out pointer, which the driver wrote when `r` is success.
unsafe fn record_written<T: Copy>(
    r: CUresult,
    out: *const T,
    addr: fn(T) -> u64,
    size: u64,
    class: MemoryClass,
    counter: &AtomicU64,
) {
    if r == CUresult::CUDA_SUCCESS && !out.is_null() {
        // SAFETY: the caller's contract: the driver wrote it.
        record(addr(unsafe { *out }), size, class, counter);
    }
}

/// [`record_written`]'s conversion of a device address.
fn device_addr(p: CUdeviceptr) -> u64 {
    p
}

/// [`record_written`]'s conversion of a host address (unified addressing: kernels use it as
/// is).
fn host_addr(p: *mut c_void) -> u64 {
    p as u64
}

fn record_free(base: u64) {
    let s = state();
    if let Some((agent, r)) = s.tracker.lookup_any(base) {
        // Recording may wait for a pending restore's fence: relaxed, so that wait never
        // disturbs another thread's capture (the application's own free comes after).
        let _relaxed = RelaxedCapture::enter();
        let gone = s.tracker.record_free(agent, base);
        s.counters.frees.fetch_add(1, Ordering::Relaxed);
        log::debug!(
            "[kernel-replay] free of {base:#x} in {:#x}+{} (generation {}): {}",
            r.base,
            r.size,
            r.generation,
            if gone.is_some() {
                "forgotten"
            } else {
                "not an allocation's base, kept"
            }
        );
    } else if base != 0 {
        log::debug!("[kernel-replay] free of {base:#x}: no recorded allocation holds it");
    }
}

/// Hook of `cuMemAlloc_v2`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_alloc(
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize) -> CUresult,
    reached: &mut bool,
    p: *mut CUdeviceptr,
    n: usize,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = with_oom_retry(Competes::Device, || unsafe { real(p, n) });
    let c = &state().counters.alloc_device;
    // SAFETY: `p` is the call's out pointer.
    unsafe { record_written(r, p, device_addr, n as u64, MemoryClass::DEVICE_COARSE, c) };
    r
}

/// Hook of `cuMemAllocPitch_v2` (the allocation is `pitch * height` bytes).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_alloc_pitch(
    real: unsafe extern "C" fn(*mut CUdeviceptr, *mut usize, usize, usize, c_uint) -> CUresult,
    reached: &mut bool,
    p: *mut CUdeviceptr,
    pitch: *mut usize,
    w: usize,
    h: usize,
    e: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = with_oom_retry(Competes::Device, || unsafe { real(p, pitch, w, h, e) });
    if r == CUresult::CUDA_SUCCESS && !p.is_null() && !pitch.is_null() {
        // SAFETY: the driver wrote both.
        let (base, pitch) = unsafe { (*p, *pitch) };
        let size = (pitch as u64).saturating_mul(h as u64);
        record(
            base,
            size,
            MemoryClass::DEVICE_COARSE,
            &state().counters.alloc_pitch,
        );
    }
    r
}

/// Hook of `cuMemAllocManaged`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_alloc_managed(
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize, c_uint) -> CUresult,
    reached: &mut bool,
    p: *mut CUdeviceptr,
    n: usize,
    fl: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = with_oom_retry(Competes::Device, || unsafe { real(p, n, fl) });
    let c = &state().counters.alloc_managed;
    // SAFETY: `p` is the call's out pointer.
    unsafe { record_written(r, p, device_addr, n as u64, MemoryClass::MANAGED, c) };
    r
}

/// Hook of `cuMemAllocHost_v2`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_alloc_host(
    real: unsafe extern "C" fn(*mut *mut c_void, usize) -> CUresult,
    reached: &mut bool,
    p: *mut *mut c_void,
    n: usize,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = with_oom_retry(Competes::Host, || unsafe { real(p, n) });
    let c = &state().counters.alloc_host;
    // SAFETY: `p` is the call's out pointer.
    unsafe { record_written(r, p, host_addr, n as u64, MemoryClass::PINNED_HOST, c) };
    r
}

/// Hook of `cuMemHostAlloc`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_host_alloc(
    real: unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CUresult,
    reached: &mut bool,
    p: *mut *mut c_void,
    n: usize,
    fl: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = with_oom_retry(Competes::Host, || unsafe { real(p, n, fl) });
    let c = &state().counters.alloc_host;
    // SAFETY: `p` is the call's out pointer.
    unsafe { record_written(r, p, host_addr, n as u64, MemoryClass::PINNED_HOST, c) };
    r
}

/// `CU_MEMHOSTREGISTER_IOMEMORY`: the range is a device's I/O memory (a BAR), not RAM.
const HOST_REGISTER_IOMEMORY: c_uint = 0x04;

/// `CU_MEMHOSTREGISTER_READ_ONLY`: the device only reads the range.
const HOST_REGISTER_READ_ONLY: c_uint = 0x08;

/// The class of a `cuMemHostRegister` range under its flags: read-only memory is excluded
/// (the kernel cannot change it: never digested, captured or restored); I/O memory is another
/// device's registers or memory, where a read may have effects and a write cannot be undone:
/// never digested, captured or restored, and an argument into it declines
/// (`PINNED_HOST | PEER`, uncapturable).
pub fn host_register_class(flags: c_uint) -> MemoryClass {
    if flags & HOST_REGISTER_IOMEMORY != 0 {
        MemoryClass::PINNED_HOST | MemoryClass::PEER
    } else if flags & HOST_REGISTER_READ_ONLY != 0 {
        MemoryClass::PINNED_HOST | MemoryClass::READ_ONLY
    } else {
        MemoryClass::PINNED_HOST
    }
}

/// Hook of `cuMemHostRegister_v2`, recorded with [`host_register_class`].
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_host_register(
    real: unsafe extern "C" fn(*mut c_void, usize, c_uint) -> CUresult,
    reached: &mut bool,
    p: *mut c_void,
    n: usize,
    fl: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = with_oom_retry(Competes::Host, || unsafe { real(p, n, fl) });
    if r == CUresult::CUDA_SUCCESS {
        record(
            p as u64,
            n as u64,
            host_register_class(fl),
            &state().counters.host_register,
        );
    }
    r
}

/// Hook of `cuMemAllocAsync` (both forms): a stream-ordered allocation of device memory,
/// recorded as such (`tracker::report_async_alloc`: `VIRTUAL_MAPPING | DEVICE_COARSE`): captured like device memory unless `decline_on_vmem` (SPEC §7.1); its free is
/// recorded where it is ordered (`hook_mem_free_async`).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_alloc_async(
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize, CUstream) -> CUresult,
    reached: &mut bool,
    p: *mut CUdeviceptr,
    n: usize,
    s: CUstream,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = with_oom_retry(Competes::Device, || unsafe { real(p, n, s) });
    note_stream(s);
    if r == CUresult::CUDA_SUCCESS && !context::skip_captured_alloc(s) {
        // SAFETY: `p` is the call's out pointer.
        unsafe { record_stream_ordered(r, p, n) };
    }
    r
}

/// Hook of `cuIpcOpenMemHandle_v2`: another process's device memory, which it writes during
/// any window: recorded as `IPC_IMPORTED` (never watched nor captured; an argument into it
/// declines `untracked_memory`), with the size the driver gives for the mapping.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_ipc_open_mem_handle(
    real: unsafe extern "C" fn(*mut CUdeviceptr, sys::CUipcMemHandle, c_uint) -> CUresult,
    reached: &mut bool,
    p: *mut CUdeviceptr,
    handle: sys::CUipcMemHandle,
    flags: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(p, handle, flags) };
    if r == CUresult::CUDA_SUCCESS && !p.is_null() {
        // SAFETY: the driver wrote the mapping's address.
        let base = unsafe { *p };
        let (mut b, mut size) = (0 as CUdeviceptr, 0usize);
        // SAFETY: out pointers to live locals; an address the driver just mapped.
        let q = unsafe { sys::cuMemGetAddressRange_v2(&mut b, &mut size, base) };
        if q == CUresult::CUDA_SUCCESS && b == base {
            record(
                base,
                size as u64,
                MemoryClass::IPC_IMPORTED,
                &state().counters.ipc_opened,
            );
        }
    }
    r
}

/// Hook of `cuIpcGetMemHandle`: once the driver handed out a handle to the allocation
/// containing `p`, another process may open it and write it during any window, so the
/// allocation is shared from now on: marked `IPC_IMPORTED` on every device that tracks it
/// ([`replay_memory::Tracker::mark_shared`]; never captured, an argument into it declines
/// `untracked_memory`), as memory opened from a handle is. The mark dies with the
/// allocation's free.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_ipc_get_mem_handle(
    real: unsafe extern "C" fn(*mut sys::CUipcMemHandle, CUdeviceptr) -> CUresult,
    reached: &mut bool,
    handle: *mut sys::CUipcMemHandle,
    p: CUdeviceptr,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(handle, p) };
    if r == CUresult::CUDA_SUCCESS {
        let st = state();
        if let Some((_, region)) = st.tracker.lookup_any(p) {
            for agent in st.tracker.agents() {
                st.tracker.mark_shared(agent, region.base, region.size);
            }
            st.counters.ipc_exported.fetch_add(1, Ordering::Relaxed);
        }
    }
    r
}

/// Hook of `cuIpcCloseMemHandle`: the mapping is forgotten before the driver closes it.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_ipc_close_mem_handle(
    real: unsafe extern "C" fn(CUdeviceptr) -> CUresult,
    reached: &mut bool,
    p: CUdeviceptr,
) -> CUresult {
    record_free(p);
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(p) }
}

/// Hook of `cuMemFree_v2`: the free is recorded before the driver releases.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_free(
    real: unsafe extern "C" fn(CUdeviceptr) -> CUresult,
    reached: &mut bool,
    p: CUdeviceptr,
) -> CUresult {
    record_free(p);
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(p) }
}

/// Hook of `cuMemFreeHost` and `cuMemHostUnregister`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_free_host(
    real: unsafe extern "C" fn(*mut c_void) -> CUresult,
    reached: &mut bool,
    p: *mut c_void,
) -> CUresult {
    record_free(p as u64);
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(p) }
}

/// Hook of `cuMemFreeAsync` (both forms): the free of a `cuMemAllocAsync` /
/// `cuMemAllocFromPoolAsync` allocation is recorded where it is ordered, before the driver's
/// call, though the driver releases the memory only when the stream reaches it.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_free_async(
    real: unsafe extern "C" fn(CUdeviceptr, CUstream) -> CUresult,
    reached: &mut bool,
    p: CUdeviceptr,
    s: CUstream,
) -> CUresult {
    note_stream(s);
    let st = state();
    if let Some((agent, _)) = st.tracker.lookup_any(p) {
        crate::tracker::report_async_free(&st.tracker, agent, p);
        st.counters.frees.fetch_add(1, Ordering::Relaxed);
    }
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(p, s) }
}

/// Hook of `cuMemAllocFromPoolAsync` (both forms): a stream-ordered allocation from a pool,
/// recorded like `cuMemAllocAsync`'s (`hook_mem_alloc_async`) under the current device's
/// agent; `hook_mem_free_async` ends it. A pool located elsewhere (host, imported) is not
/// told apart yet: it is recorded as this device's memory.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_alloc_from_pool_async(
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize, sys::CUmemoryPool, CUstream) -> CUresult,
    reached: &mut bool,
    p: *mut CUdeviceptr,
    n: usize,
    pool: sys::CUmemoryPool,
    s: CUstream,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = with_oom_retry(Competes::Device, || unsafe { real(p, n, pool, s) });
    note_stream(s);
    if r == CUresult::CUDA_SUCCESS && !context::skip_captured_alloc(s) {
        // SAFETY: `p` is the call's out pointer.
        unsafe { record_stream_ordered(r, p, n) };
    }
    r
}

/// Both stream-ordered allocation hooks: the region is recorded through
/// `tracker::report_async_alloc`, as library mode records it.
///
/// # Safety
/// As [`record_written`].
unsafe fn record_stream_ordered(r: CUresult, p: *const CUdeviceptr, n: usize) {
    if r != CUresult::CUDA_SUCCESS || p.is_null() {
        return;
    }
    // SAFETY: the caller's contract: the driver wrote it.
    let base = unsafe { *p };
    if let Some(d) = current_device().filter(|_| base != 0 && n != 0 && !skip_other_context_alloc())
    {
        let st = state();
        crate::tracker::report_async_alloc(&st.tracker, AgentId(d as u64), base, n as u64);
        st.counters.alloc_async.fetch_add(1, Ordering::Relaxed);
    }
}
