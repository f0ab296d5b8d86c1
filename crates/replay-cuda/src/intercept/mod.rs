//! Where the runtime hands the backend a submission (SPEC §9.2 "Unmodified applications"):
//! wrappers of the driver entries an unmodified application reaches, and the two ways they
//! are handed out.
//!
//! An application reaches the driver three ways, and each ends in one of these wrappers:
//!
//! - a direct call (a program or Triton's launcher linked with `-lcuda`): the shared object
//!   exports the entries under the driver's names and is loaded first (`LD_PRELOAD`);
//! - `dlsym` on the driver (Triton, NCCL): the shared object's `dlsym` answers a name this
//!   module wraps with the wrapper ([`wrapper_for`]) and forwards every other lookup;
//! - `cuGetProcAddress` (the CUDA runtime resolves every driver entry this way, after one
//!   `dlsym` of `cuGetProcAddress` itself): [`get_proc_address_v2`] asks the real driver, and
//!   when its answer is one of the wrapped entries (by address, else by name, the
//!   per-thread flag and the version asked for: a request for an older ABI than the wrapped
//!   entry's keeps the driver's answer), substitutes the wrapper.
//!
//! A runtime launch (`cudaLaunchKernel`) reaches the driver's launch entry through the pointer
//! `cuGetProcAddress` gave the runtime, so it passes through the wrapper exactly once: a
//! runtime launch and the driver launch beneath it are one dispatch.
//!
//! Every wrapper forwards to the real entry (`dlopen("libcuda.so.1")` and the real `dlsym`)
//! at once when the interception is off ([`crate::state::enabled`]) or when the calling
//! thread is already inside the library ([`Internal`]): the backend's own driver calls (cudarc
//! resolves its entries lazily through `dlsym`, which lands here too) never re-enter the
//! window. Otherwise the wrapper hands the call to its hook, in this folder by API family (the
//! table below), which runs the window (launches) or feeds the tracker (allocations, frees)
//! over the process state of [`crate::state`] and returns the driver's status code.
//! No panic leaves a wrapper: each body runs under `catch_unwind` and, should it panic before
//! the call reached the driver, the call is forwarded once.
//!
//! Copies and memsets run once under the agent's write gate (SPEC §6 step 4): one issued on
//! another thread while a window is open waits for it, so no restore undoes it and no read
//! sees a pass half done. Wrapped: `cuMemcpy`, `cuMemcpy{HtoD,DtoH,DtoD}`, `cuMemcpy2D`,
//! `cuMemcpy2DUnaligned`, `cuMemcpy3D`, `cuMemcpy3DPeer`, `cuMemcpyPeer`, `cuMemsetD8/16/32`,
//! `cuMemsetD2D8/16/32`, each with its `Async` form and the per-thread (`_ptds`, `_ptsz`)
//! forms. Code loads and unloads (`cuModuleLoad`, `cuModuleLoadData`, `cuModuleLoadDataEx`,
//! `cuModuleLoadFatBinary`, `cuLibraryLoadData`, `cuLibraryLoadFromFile`, `cuModuleUnload`,
//! `cuLibraryUnload`) and the lookups that map a function to its image
//! (`cuModuleGetFunction`, `cuLibraryGetKernel`, `cuKernelGetFunction`) are wrapped too (see
//! `code`, over the registry of [`crate::state::images`]). Virtual-memory entries
//! (`cuMemCreate`, `cuMemImportFromShareableHandle`, `cuMemExportToShareableHandle`,
//! `cuMulticastCreate`, `cuMulticastBindMem`, `cuMulticastBindAddr`, `cuMemRelease`,
//! `cuMemAddressReserve`, `cuMemAddressFree`, `cuMemMap`, `cuMemUnmap`, `cuMemSetAccess`) and `cuMemAllocFromPoolAsync` (both forms) feed
//! the tracker (see `vmem` and `memory`), and so do `cuIpcOpenMemHandle`,
//! `cuIpcCloseMemHandle` and `cuIpcGetMemHandle` (an exported allocation is shared memory,
//! as an imported one). `cuStreamCreate` and `cuStreamCreateWithPriority` register the new
//! stream; `cuStreamDestroy` is gated; the begin-capture entries (`cuStreamBeginCapture`,
//! `cuStreamBeginCapture_v2`, `cuStreamBeginCaptureToGraph`, each with its `_ptsz` form) record
//! the stream's pre-capture fence first, and `cuStreamEndCapture` (both forms) tells a capture
//! ended (see `crate::queue`, "Pre-capture fence"). Arrays,
//! surface objects and tensor maps (`cuArrayCreate`, `cuArray3DCreate`,
//! `cuMipmappedArrayCreate`, their destroys, `cuMipmappedArrayGetLevel`, `cuSurfObjectCreate`,
//! `cuSurfObjectDestroy`, `cuTensorMapEncodeTiled`, `cuTensorMapEncodeIm2col`,
//! `cuTensorMapEncodeIm2colWide`, `cuTensorMapReplaceAddress`) feed `crate::state::unseen`; `cuDevicePrimaryCtxReset` (both
//! forms) and `cuCtxDestroy` feed `crate::state::context` (through `context`). Not wrapped
//! yet (they run once, untouched, and a restore would undo what one of them writes during a window on another thread): array copies
//! (`cuMemcpyAtoD` and friends: arrays are not tracked), `cuMemcpyBatchAsync`. See the crate
//! docs.
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | the wrapper table (`entries!`: each driver entry, its real entry resolved once, its wrapper under `catch_unwind`, its hook), [`wrapper_for`], the `cuGetProcAddress` and `dlsym` answers |
//! | `launch` | `run_launch`, the one path of every intercepted launch (graph nodes included), and the hooks of the launch entries (`cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel`, their `_ptsz` forms) |
//! | `memory` | allocation, free and host-register hooks (and arrays' creation), recorded with their class; the out-of-memory retry |
//! | `vmem` | virtual-memory hooks: `cuMemCreate`, imports and exports, multicast, `cuMemMap` / `cuMemUnmap`, `cuMemSetAccess`, `cuMemAddressReserve` / `cuMemAddressFree`, `cuMemRelease` |
//! | `copy` | gated copies and memsets (1D, 2D, 3D, peer) |
//! | `code` | module and library unloads; names the load and get-function hooks of [`crate::state::images`] |
//! | `stream` | stream create and destroy, begin and end capture with the pre-capture fence, the streams a call names registered (`note_stream`) |
//! | `context` | primary-context reset and context destroy, allocations in another context |
//! | `gate` | the write gates a write that is not replayed takes |
//! | `internal`, [`cupti`] | the library's own calls let through ([`Internal`]); CUPTI's count of launches past the wrappers |
//!
//! Graph entries (`cuGraphLaunch`, instantiation, updates) have their hooks in
//! [`crate::state::graph`], array, surface and tensor-map entries in [`crate::state::unseen`],
//! beside the state they model. Adding an entry: a line in `entries!` naming its hook, the hook
//! in its family's file (`unsafe fn(real, &mut reached, args..) -> CUresult`), and, for a launch
//! entry, its name in `cupti::LAUNCH_ENTRIES` (the test below checks it).

pub(crate) mod code;
pub(crate) mod context;
pub(crate) mod copy;
pub mod cupti;
pub(crate) mod gate;
mod internal;
pub(crate) mod launch;
pub(crate) mod memory;
pub(crate) mod stream;
pub(crate) mod vmem;

pub use internal::Internal;

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use cudarc::driver::sys::{
    self, CUcontext, CUdeviceptr, CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUkernel,
    CUlaunchConfig, CUlibrary, CUmemoryPool, CUmodule, CUresult, CUstream,
};

/// `CUDA_ERROR_NOT_FOUND`: what a wrapper answers when the real driver lacks the entry.
const NOT_FOUND: CUresult = CUresult::CUDA_ERROR_NOT_FOUND;

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

extern "C" {
    fn dlvsym(handle: *mut c_void, symbol: *const c_char, version: *const c_char) -> *mut c_void;
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
}

const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;
const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;

/// The C library's `dlsym`, found past this object (`dlvsym(RTLD_NEXT, ..)`), whatever
/// object exports a `dlsym` of its own.
///
/// Found without a lock: a thread holding the loader's lock (a library constructor calling
/// `dlsym`) must never wait here for another thread that waits for the loader's lock inside
/// `dlvsym`. Two first callers may both look it up; they find the same address.
pub fn real_dlsym() -> Option<DlsymFn> {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    let mut p = REAL.load(Ordering::Acquire);
    if p == 0 {
        for v in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: dlvsym with constant NUL-terminated strings; it only looks a symbol up.
            let q = unsafe { dlvsym(RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr()) };
            if !q.is_null() {
                p = q as usize;
                REAL.store(p, Ordering::Release);
                break;
            }
        }
    }
    // SAFETY: a non-null address found as `dlsym` in the C library has dlsym's signature.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

/// A value found once without a lock (see [`real_dlsym`] for why no lock): `0` in the cell
/// means "not yet", anything else is the value plus one. Racing first callers each run `find`
/// and agree on its answer; every later call reads it.
fn found_once(cell: &AtomicUsize, find: impl FnOnce() -> usize) -> usize {
    match cell.load(Ordering::Acquire) {
        0 => {
            let v = find();
            cell.store(v.wrapping_add(1), Ordering::Release);
            v
        }
        v => v.wrapping_sub(1),
    }
}

/// The real driver's handle (`libcuda.so.1`, opened once); null when it cannot be opened.
pub fn driver_handle() -> *mut c_void {
    static H: AtomicUsize = AtomicUsize::new(0);
    found_once(&H, || {
        // The driver's initialisers may look symbols up: those lookups must not come back here.
        let _inside = Internal::enter();
        // SAFETY: dlopen of the driver by its soname: the one already loaded (RTLD_NOLOAD),
        // else loaded now, as the runtime itself would.
        unsafe {
            let h = dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW | RTLD_NOLOAD);
            if h.is_null() {
                dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW) as usize
            } else {
                h as usize
            }
        }
    }) as *mut c_void
}

/// The real driver's entry `name` (null when the driver or the entry is missing).
pub fn real_symbol(name: &CStr) -> *mut c_void {
    let h = driver_handle();
    match real_dlsym() {
        // SAFETY: the real dlsym on the driver's handle with a NUL-terminated name.
        Some(f) if !h.is_null() => unsafe { f(h, name.as_ptr()) },
        _ => std::ptr::null_mut(),
    }
}

/// Declares the wrapped entries: the real entry (resolved once), the wrapper, and the table
/// `dlsym` and `cuGetProcAddress` consult.
macro_rules! entries {
    ($( $name:ident => $wrapper:ident, $real:ident : fn($($a:ident : $t:ty),*), $hook:expr; )*) => {
        $(
            #[doc = concat!("The real `", stringify!($name), "`.")]
            pub fn $real() -> Option<unsafe extern "C" fn($($t),*) -> CUresult> {
                static P: AtomicUsize = AtomicUsize::new(0);
                let p = found_once(&P, || {
                    real_symbol(&std::ffi::CString::new(stringify!($name)).unwrap_or_default())
                        as usize
                });
                // SAFETY: the driver's entry of this name has this signature (the CUDA headers).
                (p != 0).then(|| unsafe {
                    std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> CUresult>(p)
                })
            }

            #[doc = concat!("The wrapper of `", stringify!($name), "` (see the module docs).")]
            ///
            /// # Safety
            /// The driver entry's own contract.
            pub unsafe extern "C" fn $wrapper($($a: $t),*) -> CUresult {
                let Some(real) = $real() else { return NOT_FOUND };
                if Internal::active() || !crate::state::enabled() {
                    // SAFETY: forwarded as given; the caller meets the entry's contract.
                    return unsafe { real($($a),*) };
                }
                let _inside = Internal::enter();
                let mut reached = false;
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let hook: unsafe fn(
                        unsafe extern "C" fn($($t),*) -> CUresult,
                        &mut bool,
                        $($t),*
                    ) -> CUresult = $hook;
                    // SAFETY: the hook forwards the caller's arguments to the real entry.
                    unsafe { hook(real, &mut reached, $($a),*) }
                }));
                match r {
                    Ok(code) => code,
                    Err(_) => {
                        log::error!(
                            "[kernel-replay] {}: caught a panic in the wrapper",
                            stringify!($name)
                        );
                        if reached {
                            CUresult::CUDA_ERROR_UNKNOWN
                        } else {
                            // SAFETY: as above; the call had not reached the driver.
                            unsafe { real($($a),*) }
                        }
                    }
                }
            }
        )*

        /// Every wrapped entry: (driver name, wrapper, real entry).
        pub fn table() -> &'static [(&'static CStr, usize, usize)] {
            // Built without a lock, as `found_once` (the real entries are looked up with the
            // loader's lock): a racing builder's table is dropped, the first one kept.
            static T: AtomicPtr<Vec<(&'static CStr, usize, usize)>> =
                AtomicPtr::new(std::ptr::null_mut());
            let mut t = T.load(Ordering::Acquire);
            if t.is_null() {
                let _inside = Internal::enter();
                let built = Box::into_raw(Box::new(vec![
                $((
                    // SAFETY: a literal without interior NUL.
                    unsafe { CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) },
                    $wrapper as unsafe extern "C" fn($($t),*) -> CUresult as usize,
                    $real().map_or(0, |f| f as usize),
                ),)*
                ]));
                t = match T.compare_exchange(std::ptr::null_mut(), built, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => built,
                    Err(first) => {
                        // SAFETY: `built` came from Box::into_raw above and was never shared.
                        drop(unsafe { Box::from_raw(built) });
                        first
                    }
                };
            }
            // SAFETY: a table stored in `T` is never freed or changed.
            unsafe { &*t }
        }
    };
}

use crate::state as st;

entries! {
    cuModuleLoad => module_load, real_module_load: fn(m: *mut CUmodule, fname: *const c_char), code::hook_module_load;
    cuModuleLoadData => module_load_data, real_module_load_data: fn(m: *mut CUmodule, image: *const c_void), code::hook_module_load_data;
    cuModuleLoadDataEx => module_load_data_ex, real_module_load_data_ex: fn(m: *mut CUmodule, image: *const c_void, n: c_uint, opts: *mut c_void, vals: *mut *mut c_void), code::hook_module_load_data_ex;
    cuModuleLoadFatBinary => module_load_fat_binary, real_module_load_fat_binary: fn(m: *mut CUmodule, fat: *const c_void), code::hook_module_load_data;
    cuModuleUnload => module_unload, real_module_unload: fn(m: CUmodule), code::hook_module_unload;
    cuModuleGetFunction => module_get_function, real_module_get_function: fn(f: *mut CUfunction, m: CUmodule, name: *const c_char), code::hook_module_get_function;
    cuLibraryLoadData => library_load_data, real_library_load_data: fn(l: *mut CUlibrary, code: *const c_void, jo: *mut c_void, jv: *mut *mut c_void, nj: c_uint, lo: *mut c_void, lv: *mut *mut c_void, nl: c_uint), code::hook_library_load_data;
    cuLibraryLoadFromFile => library_load_from_file, real_library_load_from_file: fn(l: *mut CUlibrary, fname: *const c_char, jo: *mut c_void, jv: *mut *mut c_void, nj: c_uint, lo: *mut c_void, lv: *mut *mut c_void, nl: c_uint), code::hook_library_load_file;
    cuLibraryUnload => library_unload, real_library_unload: fn(l: CUlibrary), code::hook_library_unload;
    cuLibraryGetKernel => library_get_kernel, real_library_get_kernel: fn(k: *mut CUkernel, l: CUlibrary, name: *const c_char), code::hook_library_get_kernel;
    cuKernelGetFunction => kernel_get_function, real_kernel_get_function: fn(f: *mut CUfunction, k: CUkernel), code::hook_kernel_get_function;
    cuLaunchKernel => launch_kernel, real_launch_kernel: fn(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, s: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void), launch::hook_launch_kernel::<false>;
    cuLaunchKernel_ptsz => launch_kernel_ptsz, real_launch_kernel_ptsz: fn(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, s: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void), launch::hook_launch_kernel::<true>;
    cuLaunchKernelEx => launch_kernel_ex, real_launch_kernel_ex: fn(c: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void), launch::hook_launch_kernel_ex::<false>;
    cuLaunchKernelEx_ptsz => launch_kernel_ex_ptsz, real_launch_kernel_ex_ptsz: fn(c: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void), launch::hook_launch_kernel_ex::<true>;
    cuLaunchCooperativeKernel => launch_cooperative, real_launch_cooperative: fn(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, s: CUstream, params: *mut *mut c_void), launch::hook_cooperative;
    cuLaunchCooperativeKernel_ptsz => launch_cooperative_ptsz, real_launch_cooperative_ptsz: fn(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, s: CUstream, params: *mut *mut c_void), launch::hook_cooperative;
    cuGraphLaunch => graph_launch, real_graph_launch: fn(g: CUgraphExec, s: CUstream), st::graph::hook_graph_launch::<false>;
    cuGraphLaunch_ptsz => graph_launch_ptsz, real_graph_launch_ptsz: fn(g: CUgraphExec, s: CUstream), st::graph::hook_graph_launch::<true>;
    cuGraphInstantiateWithFlags => graph_instantiate_with_flags, real_graph_instantiate_with_flags: fn(e: *mut CUgraphExec, g: CUgraph, fl: u64), st::graph::hook_instantiate_with_flags;
    cuGraphInstantiateWithParams => graph_instantiate_with_params, real_graph_instantiate_with_params: fn(e: *mut CUgraphExec, g: CUgraph, p: *mut sys::CUDA_GRAPH_INSTANTIATE_PARAMS), st::graph::hook_instantiate_with_params;
    cuGraphExecDestroy => graph_exec_destroy, real_graph_exec_destroy: fn(e: CUgraphExec), st::graph::hook_exec_destroy;
    cuGraphExecKernelNodeSetParams_v2 => graph_exec_kernel_set_v2, real_graph_exec_kernel_set_v2: fn(e: CUgraphExec, n: CUgraphNode, p: *const sys::CUDA_KERNEL_NODE_PARAMS), st::graph::hook_exec_kernel_set::<true>;
    cuGraphExecKernelNodeSetParams => graph_exec_kernel_set, real_graph_exec_kernel_set: fn(e: CUgraphExec, n: CUgraphNode, p: *const sys::CUDA_KERNEL_NODE_PARAMS), st::graph::hook_exec_kernel_set::<false>;
    cuGraphNodeSetEnabled => graph_node_set_enabled, real_graph_node_set_enabled: fn(e: CUgraphExec, n: CUgraphNode, on: c_uint), st::graph::hook_node_set_enabled;
    cuGraphExecUpdate_v2 => graph_exec_update_v2, real_graph_exec_update_v2: fn(e: CUgraphExec, g: CUgraph, info: *mut c_void), st::graph::hook_exec_update_v2;
    cuGraphExecUpdate => graph_exec_update, real_graph_exec_update: fn(e: CUgraphExec, g: CUgraph, err: *mut CUgraphNode, res: *mut c_void), st::graph::hook_exec_update;
    cuGraphExecMemcpyNodeSetParams => graph_exec_memcpy_set, real_graph_exec_memcpy_set: fn(e: CUgraphExec, n: CUgraphNode, p: *const c_void, c: *mut c_void), st::graph::hook_exec_set_unmodelled4;
    cuGraphExecMemsetNodeSetParams => graph_exec_memset_set, real_graph_exec_memset_set: fn(e: CUgraphExec, n: CUgraphNode, p: *const c_void, c: *mut c_void), st::graph::hook_exec_set_unmodelled4;
    cuGraphExecHostNodeSetParams => graph_exec_host_set, real_graph_exec_host_set: fn(e: CUgraphExec, n: CUgraphNode, p: *const c_void), st::graph::hook_exec_set_unmodelled3;
    cuGraphExecChildGraphNodeSetParams => graph_exec_child_set, real_graph_exec_child_set: fn(e: CUgraphExec, n: CUgraphNode, p: *const c_void), st::graph::hook_exec_set_unmodelled3;
    cuGraphExecEventRecordNodeSetEvent => graph_exec_event_record_set, real_graph_exec_event_record_set: fn(e: CUgraphExec, n: CUgraphNode, p: *const c_void), st::graph::hook_exec_set_unmodelled3;
    cuGraphExecEventWaitNodeSetEvent => graph_exec_event_wait_set, real_graph_exec_event_wait_set: fn(e: CUgraphExec, n: CUgraphNode, p: *const c_void), st::graph::hook_exec_set_unmodelled3;
    cuGraphExecNodeSetParams => graph_exec_node_set, real_graph_exec_node_set: fn(e: CUgraphExec, n: CUgraphNode, p: *const c_void), st::graph::hook_exec_set_unmodelled3;
    cuMemAlloc_v2 => mem_alloc, real_mem_alloc: fn(p: *mut CUdeviceptr, n: usize), memory::hook_mem_alloc;
    cuMemAllocPitch_v2 => mem_alloc_pitch, real_mem_alloc_pitch: fn(p: *mut CUdeviceptr, pitch: *mut usize, w: usize, h: usize, e: c_uint), memory::hook_mem_alloc_pitch;
    cuMemAllocManaged => mem_alloc_managed, real_mem_alloc_managed: fn(p: *mut CUdeviceptr, n: usize, fl: c_uint), memory::hook_mem_alloc_managed;
    cuMemAllocHost_v2 => mem_alloc_host, real_mem_alloc_host: fn(p: *mut *mut c_void, n: usize), memory::hook_mem_alloc_host;
    cuMemHostAlloc => mem_host_alloc, real_mem_host_alloc: fn(p: *mut *mut c_void, n: usize, fl: c_uint), memory::hook_mem_host_alloc;
    cuMemHostRegister_v2 => mem_host_register, real_mem_host_register: fn(p: *mut c_void, n: usize, fl: c_uint), memory::hook_mem_host_register;
    cuMemAllocAsync => mem_alloc_async, real_mem_alloc_async: fn(p: *mut CUdeviceptr, n: usize, s: CUstream), memory::hook_mem_alloc_async;
    cuMemAllocAsync_ptsz => mem_alloc_async_ptsz, real_mem_alloc_async_ptsz: fn(p: *mut CUdeviceptr, n: usize, s: CUstream), memory::hook_mem_alloc_async;
    cuIpcOpenMemHandle_v2 => ipc_open_mem_handle, real_ipc_open_mem_handle: fn(p: *mut CUdeviceptr, h: sys::CUipcMemHandle, fl: c_uint), memory::hook_ipc_open_mem_handle;
    cuIpcCloseMemHandle => ipc_close_mem_handle, real_ipc_close_mem_handle: fn(p: CUdeviceptr), memory::hook_ipc_close_mem_handle;
    cuIpcGetMemHandle => ipc_get_mem_handle, real_ipc_get_mem_handle: fn(h: *mut sys::CUipcMemHandle, p: CUdeviceptr), memory::hook_ipc_get_mem_handle;
    cuMemFree_v2 => mem_free, real_mem_free: fn(p: CUdeviceptr), memory::hook_mem_free;
    cuMemFreeHost => mem_free_host, real_mem_free_host: fn(p: *mut c_void), memory::hook_mem_free_host;
    cuMemHostUnregister => mem_host_unregister, real_mem_host_unregister: fn(p: *mut c_void), memory::hook_mem_free_host;
    cuMemFreeAsync => mem_free_async, real_mem_free_async: fn(p: CUdeviceptr, s: CUstream), memory::hook_mem_free_async;
    cuMemFreeAsync_ptsz => mem_free_async_ptsz, real_mem_free_async_ptsz: fn(p: CUdeviceptr, s: CUstream), memory::hook_mem_free_async;
    cuMemAllocFromPoolAsync => mem_alloc_from_pool_async, real_mem_alloc_from_pool_async: fn(p: *mut CUdeviceptr, n: usize, pool: CUmemoryPool, s: CUstream), memory::hook_mem_alloc_from_pool_async;
    cuMemAllocFromPoolAsync_ptsz => mem_alloc_from_pool_async_ptsz, real_mem_alloc_from_pool_async_ptsz: fn(p: *mut CUdeviceptr, n: usize, pool: CUmemoryPool, s: CUstream), memory::hook_mem_alloc_from_pool_async;
    cuMemCreate => mem_create, real_mem_create: fn(h: *mut u64, n: usize, prop: *const c_void, fl: u64), vmem::hook_mem_create;
    cuMemImportFromShareableHandle => mem_import_from_shareable_handle, real_mem_import_from_shareable_handle: fn(h: *mut u64, os: *mut c_void, ty: c_uint), vmem::hook_mem_import;
    cuMemExportToShareableHandle => mem_export_to_shareable_handle, real_mem_export_to_shareable_handle: fn(os: *mut c_void, h: u64, ty: c_uint, fl: u64), vmem::hook_mem_export;
    cuMulticastCreate => multicast_create, real_multicast_create: fn(h: *mut u64, prop: *const c_void), vmem::hook_multicast_create;
    cuMulticastBindMem => multicast_bind_mem, real_multicast_bind_mem: fn(mc: u64, mo: usize, mem: u64, off: usize, n: usize, fl: u64), vmem::hook_multicast_bind_mem;
    cuMulticastBindAddr => multicast_bind_addr, real_multicast_bind_addr: fn(mc: u64, mo: usize, p: CUdeviceptr, n: usize, fl: u64), vmem::hook_multicast_bind_addr;
    cuMemRelease => mem_release, real_mem_release: fn(h: u64), vmem::hook_mem_release;
    cuMemAddressReserve => mem_address_reserve, real_mem_address_reserve: fn(p: *mut CUdeviceptr, n: usize, align: usize, addr: CUdeviceptr, fl: u64), vmem::hook_mem_address_reserve;
    cuMemAddressFree => mem_address_free, real_mem_address_free: fn(p: CUdeviceptr, n: usize), vmem::hook_mem_address_free;
    cuMemMap => mem_map, real_mem_map: fn(p: CUdeviceptr, n: usize, off: usize, h: u64, fl: u64), vmem::hook_mem_map;
    cuMemUnmap => mem_unmap, real_mem_unmap: fn(p: CUdeviceptr, n: usize), vmem::hook_mem_unmap;
    cuMemSetAccess => mem_set_access, real_mem_set_access: fn(p: CUdeviceptr, n: usize, desc: *const c_void, count: usize), vmem::hook_mem_set_access;
    cuStreamDestroy_v2 => stream_destroy, real_stream_destroy: fn(s: CUstream), stream::hook_stream_destroy;
    cuStreamEndCapture => stream_end_capture, real_stream_end_capture: fn(s: CUstream, g: *mut CUgraph), stream::hook_stream_end_capture;
    cuStreamEndCapture_ptsz => stream_end_capture_ptsz, real_stream_end_capture_ptsz: fn(s: CUstream, g: *mut CUgraph), stream::hook_stream_end_capture;
    cuStreamBeginCapture => stream_begin_capture_v1, real_stream_begin_capture_v1: fn(s: CUstream), stream::hook_stream_begin_capture_v1;
    cuStreamBeginCapture_ptsz => stream_begin_capture_v1_ptsz, real_stream_begin_capture_v1_ptsz: fn(s: CUstream), stream::hook_stream_begin_capture_v1;
    cuStreamBeginCapture_v2 => stream_begin_capture, real_stream_begin_capture: fn(s: CUstream, mode: c_uint), stream::hook_stream_begin_capture;
    cuStreamBeginCapture_v2_ptsz => stream_begin_capture_ptsz, real_stream_begin_capture_ptsz: fn(s: CUstream, mode: c_uint), stream::hook_stream_begin_capture;
    cuStreamBeginCaptureToGraph => stream_begin_capture_to_graph, real_stream_begin_capture_to_graph: fn(s: CUstream, g: CUgraph, deps: *const CUgraphNode, data: *const c_void, n: usize, mode: c_uint), stream::hook_stream_begin_capture_to_graph;
    cuStreamBeginCaptureToGraph_ptsz => stream_begin_capture_to_graph_ptsz, real_stream_begin_capture_to_graph_ptsz: fn(s: CUstream, g: CUgraph, deps: *const CUgraphNode, data: *const c_void, n: usize, mode: c_uint), stream::hook_stream_begin_capture_to_graph;
    cuStreamCreate => stream_create, real_stream_create: fn(s: *mut CUstream, fl: c_uint), stream::hook_stream_create;
    cuStreamCreateWithPriority => stream_create_with_priority, real_stream_create_with_priority: fn(s: *mut CUstream, fl: c_uint, prio: c_int), stream::hook_stream_create_with_priority;
    cuMemcpyAsync => memcpy_async, real_memcpy_async: fn(d: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream), copy::gated_copy;
    cuMemcpyAsync_ptsz => memcpy_async_ptsz, real_memcpy_async_ptsz: fn(d: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream), copy::gated_copy;
    cuMemcpyDtoDAsync_v2 => memcpy_dtod_async, real_memcpy_dtod_async: fn(d: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream), copy::gated_copy;
    cuMemcpyDtoDAsync_v2_ptsz => memcpy_dtod_async_ptsz, real_memcpy_dtod_async_ptsz: fn(d: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream), copy::gated_copy;
    cuMemcpyHtoDAsync_v2 => memcpy_htod_async, real_memcpy_htod_async: fn(d: CUdeviceptr, src: *const c_void, n: usize, s: CUstream), copy::gated_htod;
    cuMemcpyHtoDAsync_v2_ptsz => memcpy_htod_async_ptsz, real_memcpy_htod_async_ptsz: fn(d: CUdeviceptr, src: *const c_void, n: usize, s: CUstream), copy::gated_htod;
    cuMemcpyDtoHAsync_v2 => memcpy_dtoh_async, real_memcpy_dtoh_async: fn(d: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream), copy::gated_dtoh;
    cuMemcpyDtoHAsync_v2_ptsz => memcpy_dtoh_async_ptsz, real_memcpy_dtoh_async_ptsz: fn(d: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream), copy::gated_dtoh;
    cuMemsetD8Async => memset_d8_async, real_memset_d8_async: fn(d: CUdeviceptr, v: u8, n: usize, s: CUstream), copy::gated_memset8;
    cuMemsetD8Async_ptsz => memset_d8_async_ptsz, real_memset_d8_async_ptsz: fn(d: CUdeviceptr, v: u8, n: usize, s: CUstream), copy::gated_memset8;
    cuMemsetD32Async => memset_d32_async, real_memset_d32_async: fn(d: CUdeviceptr, v: c_uint, n: usize, s: CUstream), copy::gated_memset32;
    cuMemsetD32Async_ptsz => memset_d32_async_ptsz, real_memset_d32_async_ptsz: fn(d: CUdeviceptr, v: c_uint, n: usize, s: CUstream), copy::gated_memset32;
    cuMemcpy => memcpy_sync, real_memcpy_sync: fn(d: CUdeviceptr, src: CUdeviceptr, n: usize), copy::gated_copy_sync;
    cuMemcpyHtoD_v2 => memcpy_htod, real_memcpy_htod: fn(d: CUdeviceptr, src: *const c_void, n: usize), copy::gated_htod_sync;
    cuMemcpyDtoD_v2 => memcpy_dtod, real_memcpy_dtod: fn(d: CUdeviceptr, src: CUdeviceptr, n: usize), copy::gated_copy_sync;
    cuMemcpyDtoH_v2 => memcpy_dtoh, real_memcpy_dtoh: fn(d: *mut c_void, src: CUdeviceptr, n: usize), copy::gated_dtoh_sync;
    cuMemsetD8_v2 => memset_d8, real_memset_d8: fn(d: CUdeviceptr, v: u8, n: usize), copy::gated_memset8_sync;
    cuMemsetD32_v2 => memset_d32, real_memset_d32: fn(d: CUdeviceptr, v: c_uint, n: usize), copy::gated_memset32_sync;
    cuMemcpy_ptds => memcpy_sync_ptds, real_memcpy_sync_ptds: fn(d: CUdeviceptr, src: CUdeviceptr, n: usize), copy::gated_copy_sync;
    cuMemcpyHtoD_v2_ptds => memcpy_htod_ptds, real_memcpy_htod_ptds: fn(d: CUdeviceptr, src: *const c_void, n: usize), copy::gated_htod_sync;
    cuMemcpyDtoD_v2_ptds => memcpy_dtod_ptds, real_memcpy_dtod_ptds: fn(d: CUdeviceptr, src: CUdeviceptr, n: usize), copy::gated_copy_sync;
    cuMemcpyDtoH_v2_ptds => memcpy_dtoh_ptds, real_memcpy_dtoh_ptds: fn(d: *mut c_void, src: CUdeviceptr, n: usize), copy::gated_dtoh_sync;
    cuMemsetD8_v2_ptds => memset_d8_ptds, real_memset_d8_ptds: fn(d: CUdeviceptr, v: u8, n: usize), copy::gated_memset8_sync;
    cuMemsetD32_v2_ptds => memset_d32_ptds, real_memset_d32_ptds: fn(d: CUdeviceptr, v: c_uint, n: usize), copy::gated_memset32_sync;
    cuMemcpy2D_v2 => memcpy_2d, real_memcpy_2d: fn(p: *const c_void), copy::gated_desc::<{ copy::DESC_2D }>;
    cuMemcpy2D_v2_ptds => memcpy_2d_ptds, real_memcpy_2d_ptds: fn(p: *const c_void), copy::gated_desc::<{ copy::DESC_2D }>;
    cuMemcpy2DUnaligned_v2 => memcpy_2d_unaligned, real_memcpy_2d_unaligned: fn(p: *const c_void), copy::gated_desc::<{ copy::DESC_2D }>;
    cuMemcpy2DUnaligned_v2_ptds => memcpy_2d_unaligned_ptds, real_memcpy_2d_unaligned_ptds: fn(p: *const c_void), copy::gated_desc::<{ copy::DESC_2D }>;
    cuMemcpy2DAsync_v2 => memcpy_2d_async, real_memcpy_2d_async: fn(p: *const c_void, s: CUstream), copy::gated_desc_async::<{ copy::DESC_2D }>;
    cuMemcpy2DAsync_v2_ptsz => memcpy_2d_async_ptsz, real_memcpy_2d_async_ptsz: fn(p: *const c_void, s: CUstream), copy::gated_desc_async::<{ copy::DESC_2D }>;
    cuMemcpy3D_v2 => memcpy_3d, real_memcpy_3d: fn(p: *const c_void), copy::gated_desc::<{ copy::DESC_3D }>;
    cuMemcpy3D_v2_ptds => memcpy_3d_ptds, real_memcpy_3d_ptds: fn(p: *const c_void), copy::gated_desc::<{ copy::DESC_3D }>;
    cuMemcpy3DAsync_v2 => memcpy_3d_async, real_memcpy_3d_async: fn(p: *const c_void, s: CUstream), copy::gated_desc_async::<{ copy::DESC_3D }>;
    cuMemcpy3DAsync_v2_ptsz => memcpy_3d_async_ptsz, real_memcpy_3d_async_ptsz: fn(p: *const c_void, s: CUstream), copy::gated_desc_async::<{ copy::DESC_3D }>;
    cuMemcpy3DPeer => memcpy_3d_peer, real_memcpy_3d_peer: fn(p: *const c_void), copy::gated_desc::<{ copy::DESC_3D_PEER }>;
    cuMemcpy3DPeer_ptds => memcpy_3d_peer_ptds, real_memcpy_3d_peer_ptds: fn(p: *const c_void), copy::gated_desc::<{ copy::DESC_3D_PEER }>;
    cuMemcpy3DPeerAsync => memcpy_3d_peer_async, real_memcpy_3d_peer_async: fn(p: *const c_void, s: CUstream), copy::gated_desc_async::<{ copy::DESC_3D_PEER }>;
    cuMemcpy3DPeerAsync_ptsz => memcpy_3d_peer_async_ptsz, real_memcpy_3d_peer_async_ptsz: fn(p: *const c_void, s: CUstream), copy::gated_desc_async::<{ copy::DESC_3D_PEER }>;
    cuMemcpyPeer => memcpy_peer, real_memcpy_peer: fn(d: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize), copy::gated_peer;
    cuMemcpyPeer_ptds => memcpy_peer_ptds, real_memcpy_peer_ptds: fn(d: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize), copy::gated_peer;
    cuMemcpyPeerAsync => memcpy_peer_async, real_memcpy_peer_async: fn(d: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize, s: CUstream), copy::gated_peer_async;
    cuMemcpyPeerAsync_ptsz => memcpy_peer_async_ptsz, real_memcpy_peer_async_ptsz: fn(d: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize, s: CUstream), copy::gated_peer_async;
    cuMemsetD16_v2 => memset_d16, real_memset_d16: fn(d: CUdeviceptr, v: u16, n: usize), copy::gated_memset16_sync;
    cuMemsetD16_v2_ptds => memset_d16_ptds, real_memset_d16_ptds: fn(d: CUdeviceptr, v: u16, n: usize), copy::gated_memset16_sync;
    cuMemsetD16Async => memset_d16_async, real_memset_d16_async: fn(d: CUdeviceptr, v: u16, n: usize, s: CUstream), copy::gated_memset16;
    cuMemsetD16Async_ptsz => memset_d16_async_ptsz, real_memset_d16_async_ptsz: fn(d: CUdeviceptr, v: u16, n: usize, s: CUstream), copy::gated_memset16;
    cuMemsetD2D8_v2 => memset_2d8, real_memset_2d8: fn(d: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize), copy::gated_memset2d8_sync;
    cuMemsetD2D8_v2_ptds => memset_2d8_ptds, real_memset_2d8_ptds: fn(d: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize), copy::gated_memset2d8_sync;
    cuMemsetD2D16_v2 => memset_2d16, real_memset_2d16: fn(d: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize), copy::gated_memset2d16_sync;
    cuMemsetD2D16_v2_ptds => memset_2d16_ptds, real_memset_2d16_ptds: fn(d: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize), copy::gated_memset2d16_sync;
    cuMemsetD2D32_v2 => memset_2d32, real_memset_2d32: fn(d: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize), copy::gated_memset2d32_sync;
    cuMemsetD2D32_v2_ptds => memset_2d32_ptds, real_memset_2d32_ptds: fn(d: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize), copy::gated_memset2d32_sync;
    cuMemsetD2D8Async => memset_2d8_async, real_memset_2d8_async: fn(d: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize, s: CUstream), copy::gated_memset2d8;
    cuMemsetD2D8Async_ptsz => memset_2d8_async_ptsz, real_memset_2d8_async_ptsz: fn(d: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize, s: CUstream), copy::gated_memset2d8;
    cuMemsetD2D16Async => memset_2d16_async, real_memset_2d16_async: fn(d: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize, s: CUstream), copy::gated_memset2d16;
    cuMemsetD2D16Async_ptsz => memset_2d16_async_ptsz, real_memset_2d16_async_ptsz: fn(d: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize, s: CUstream), copy::gated_memset2d16;
    cuMemsetD2D32Async => memset_2d32_async, real_memset_2d32_async: fn(d: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize, s: CUstream), copy::gated_memset2d32;
    cuMemsetD2D32Async_ptsz => memset_2d32_async_ptsz, real_memset_2d32_async_ptsz: fn(d: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize, s: CUstream), copy::gated_memset2d32;
    cuDevicePrimaryCtxReset_v2 => primary_ctx_reset, real_primary_ctx_reset: fn(d: c_int), context::hook_primary_ctx_reset;
    cuDevicePrimaryCtxReset => primary_ctx_reset_v1, real_primary_ctx_reset_v1: fn(d: c_int), context::hook_primary_ctx_reset;
    cuCtxDestroy_v2 => ctx_destroy, real_ctx_destroy: fn(c: CUcontext), context::hook_ctx_destroy;
    cuArrayCreate_v2 => array_create, real_array_create: fn(a: *mut u64, desc: *const c_void), memory::hook_array_create;
    cuArray3DCreate_v2 => array_3d_create, real_array_3d_create: fn(a: *mut u64, desc: *const c_void), memory::hook_array_create;
    cuMipmappedArrayCreate => mipmapped_array_create, real_mipmapped_array_create: fn(a: *mut u64, desc: *const c_void, levels: c_uint), memory::hook_mipmapped_array_create;
    cuArrayDestroy => array_destroy, real_array_destroy: fn(a: u64), st::unseen::hook_array_destroy;
    cuMipmappedArrayGetLevel => mipmapped_array_get_level, real_mipmapped_array_get_level: fn(a: *mut u64, m: u64, level: c_uint), st::unseen::hook_mipmapped_array_get_level;
    cuMipmappedArrayDestroy => mipmapped_array_destroy, real_mipmapped_array_destroy: fn(a: u64), st::unseen::hook_mipmapped_array_destroy;
    cuSurfObjectCreate => surf_object_create, real_surf_object_create: fn(s: *mut u64, desc: *const c_void), st::unseen::hook_surf_object_create;
    cuSurfObjectDestroy => surf_object_destroy, real_surf_object_destroy: fn(s: u64), st::unseen::hook_surf_object_destroy;
    cuTensorMapEncodeTiled => tensor_map_encode_tiled, real_tensor_map_encode_tiled: fn(m: *mut c_void, dt: c_uint, rank: c_uint, addr: *mut c_void, dims: *const u64, strides: *const u64, boxd: *const u32, estr: *const u32, il: c_uint, sw: c_uint, l2: c_uint, oob: c_uint), st::unseen::hook_tensor_map_tiled;
    cuTensorMapEncodeIm2col => tensor_map_encode_im2col, real_tensor_map_encode_im2col: fn(m: *mut c_void, dt: c_uint, rank: c_uint, addr: *mut c_void, dims: *const u64, strides: *const u64, lower: *const c_int, upper: *const c_int, cpp: c_uint, ppc: c_uint, estr: *const u32, il: c_uint, sw: c_uint, l2: c_uint, oob: c_uint), st::unseen::hook_tensor_map_im2col;
    cuTensorMapEncodeIm2colWide => tensor_map_encode_im2col_wide, real_tensor_map_encode_im2col_wide: fn(m: *mut c_void, dt: c_uint, rank: c_uint, addr: *mut c_void, dims: *const u64, strides: *const u64, lower: c_int, upper: c_int, cpp: c_uint, ppc: c_uint, estr: *const u32, il: c_uint, mode: c_uint, sw: c_uint, l2: c_uint, oob: c_uint), st::unseen::hook_tensor_map_im2col_wide;
    cuTensorMapReplaceAddress => tensor_map_replace_address, real_tensor_map_replace_address: fn(m: *mut c_void, addr: *mut c_void), st::unseen::hook_tensor_map_replace_address;
}

/// The wrapper of the entry named `name`, when it is wrapped and the real driver has it.
pub fn wrapper_for(name: &CStr) -> Option<*mut c_void> {
    table()
        .iter()
        .find(|(n, _, real)| *n == name && *real != 0)
        .map(|(_, w, _)| *w as *mut c_void)
}

/// What `cuGetProcAddress` answered, with a wrapper substituted for a wrapped entry: by the
/// address the driver gave (the entry `dlsym` finds), else by the base name the runtime asks
/// for and the per-thread-default-stream flag.
fn substitute(symbol: &CStr, found: *mut c_void, flags: u64, version: c_int) -> *mut c_void {
    substitute_in(table(), symbol, found, flags, version)
}

/// The CUDA version that introduced the wrapped entry `name` (its ABI): a request for an
/// older version gets the driver's older entry, whose arguments may differ, untouched. The
/// `_v2` forms of the memory entries came with CUDA 3.2; the others listed by their release.
fn entry_version(name: &[u8]) -> c_int {
    let base = name
        .strip_suffix(b"_ptsz")
        .or_else(|| name.strip_suffix(b"_ptds"))
        .unwrap_or(name);
    match base {
        b"cuStreamDestroy_v2" => 4000,
        b"cuMemHostRegister_v2" => 6050,
        b"cuIpcOpenMemHandle_v2" => 11000,
        b"cuMemcpy3DPeer" | b"cuMemcpyPeer" | b"cuMemcpyPeerAsync" | b"cuMemcpy3DPeerAsync" => 4000,
        b"cuLaunchKernel" | b"cuMemcpyAsync" | b"cuMemcpy" => 4000,
        b"cuStreamBeginCapture" => 10000,
        b"cuStreamBeginCapture_v2" => 10010,
        b"cuStreamBeginCaptureToGraph" => 12030,
        // Graph entries whose `_v2` came with CUDA 12 (the older form keeps its own wrapper).
        b"cuGraphExecKernelNodeSetParams_v2" | b"cuGraphExecUpdate_v2" => 12000,
        b if b.ends_with(b"_v2") => 3020,
        _ => 0,
    }
}

/// [`substitute`] over `t` (the table; tests give their own).
fn substitute_in(
    t: &[(&'static CStr, usize, usize)],
    symbol: &CStr,
    found: *mut c_void,
    flags: u64,
    version: c_int,
) -> *mut c_void {
    if found.is_null() {
        return found;
    }
    if let Some((_, w, _)) = t.iter().find(|(_, _, real)| *real == found as usize) {
        return *w as *mut c_void;
    }
    const PER_THREAD: u64 = 1 << 1; // CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                    // The runtime asks by base name; the driver's exported forms add `_v2` (the current
                                    // ABI) and, for the per-thread default stream, `_ptsz` (stream-ordered entries) or
                                    // `_ptds` (synchronous ones).
    let base = symbol.to_bytes();
    let suffixes: &[&[u8]] = if flags & PER_THREAD != 0 {
        &[b"_v2_ptsz", b"_ptsz", b"_v2_ptds", b"_ptds", b"_v2", b""]
    } else {
        &[b"_v2", b""]
    };
    let candidates = suffixes.iter().map(|sfx| [base, sfx].concat());
    // A name match is trusted only when the driver's answer is not some other wrapped
    // entry's real address (it was not, above) and it agrees with the real entry of that
    // name, or the driver answers with an internal address for it.
    // Only the entry of the version asked for: a request for an older ABI than the wrapped
    // entry's (`cuMemAlloc` before CUDA 3.2) keeps the driver's answer.
    for c in candidates {
        if let Some((_, w, real)) = t.iter().find(|(n, _, _)| n.to_bytes() == c.as_slice()) {
            if *real != 0 && version >= entry_version(&c) {
                return *w as *mut c_void;
            }
        }
    }
    found
}

type GetProcV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CUresult;
type GetProcV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;

fn real_get_proc(name: &CStr) -> usize {
    real_symbol(name) as usize
}

/// The wrapper of `cuGetProcAddress` (the 4-argument form).
///
/// # Safety
/// The driver entry's contract: `symbol` is a NUL-terminated string, `pfn` writable.
pub unsafe extern "C" fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CUresult {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    let p = found_once(&REAL, || real_get_proc(c"cuGetProcAddress"));
    if p == 0 {
        return NOT_FOUND;
    }
    // SAFETY: the driver's cuGetProcAddress has this signature.
    let real = unsafe { std::mem::transmute::<usize, GetProcV1>(p) };
    // SAFETY: forwarded as given.
    let r = unsafe { real(symbol, pfn, version, flags) };
    if r == CUresult::CUDA_SUCCESS && !symbol.is_null() && !pfn.is_null() && intercepting() {
        // SAFETY: the caller's contract; the driver wrote `*pfn`.
        unsafe { *pfn = answer(CStr::from_ptr(symbol), *pfn, flags, version) };
    }
    r
}

/// The wrapper of `cuGetProcAddress_v2` (with the symbol status).
///
/// # Safety
/// The driver entry's contract.
pub unsafe extern "C" fn get_proc_address_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    let p = found_once(&REAL, || real_get_proc(c"cuGetProcAddress_v2"));
    if p == 0 {
        return NOT_FOUND;
    }
    // SAFETY: the driver's cuGetProcAddress_v2 has this signature.
    let real = unsafe { std::mem::transmute::<usize, GetProcV2>(p) };
    // SAFETY: forwarded as given.
    let r = unsafe { real(symbol, pfn, version, flags, status) };
    if r == CUresult::CUDA_SUCCESS && !symbol.is_null() && !pfn.is_null() && intercepting() {
        // SAFETY: the caller's contract; the driver wrote `*pfn`.
        unsafe { *pfn = answer(CStr::from_ptr(symbol), *pfn, flags, version) };
    }
    r
}

fn intercepting() -> bool {
    !Internal::active() && crate::state::enabled()
}

/// `cuGetProcAddress` answers itself with our wrappers too, so the runtime's later lookups
/// come back here.
fn answer(symbol: &CStr, found: *mut c_void, flags: u64, version: c_int) -> *mut c_void {
    match symbol.to_bytes() {
        b"cuGetProcAddress" if !found.is_null() => {
            // The runtime asks for the newest form it knows; both have a wrapper.
            let v2 = real_get_proc(c"cuGetProcAddress_v2");
            if found as usize == v2 {
                get_proc_address_v2 as *mut c_void
            } else {
                get_proc_address as *mut c_void
            }
        }
        _ => substitute(symbol, found, flags, version),
    }
}

/// What the shared object's `dlsym` answers: a wrapper for a wrapped driver entry (or for
/// `cuGetProcAddress`), when interception is on and the lookup does not come from inside the
/// library; else the real `dlsym`'s answer.
///
/// A lookup with `RTLD_NEXT` reaching this function is resolved relative to this library, not
/// to its caller: the shared object's x86-64 `dlsym` sends those straight to the C library with
/// the caller's return address instead, so they never arrive here there.
///
/// # Safety
/// `dlsym`'s contract.
pub unsafe fn dlsym_answer(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let Some(real) = real_dlsym() else {
        return std::ptr::null_mut();
    };
    // SAFETY: forwarded as given.
    let found = unsafe { real(handle, name) };
    if found.is_null() || name.is_null() || !intercepting() {
        return found;
    }
    // SAFETY: `name` is NUL-terminated (dlsym's contract).
    let n = unsafe { CStr::from_ptr(name) };
    let b = n.to_bytes();
    if !b.starts_with(b"cu") {
        return found;
    }
    match b {
        b"cuGetProcAddress" => get_proc_address as *mut c_void,
        b"cuGetProcAddress_v2" => get_proc_address_v2 as *mut c_void,
        _ => match table().iter().find(|(_, _, real)| *real == found as usize) {
            Some((_, w, _)) => *w as *mut c_void,
            None => found,
        },
    }
}

/// `sys` re-exported for the hooks' signatures.
pub use sys::CUlaunchAttributeID;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_match_substitutes_only_for_the_version_the_wrapper_wraps() {
        // The driver answers with internal addresses (no table entry's), so only the name
        // path can match.
        let t: Vec<(&'static CStr, usize, usize)> = vec![
            (c"cuMemAlloc_v2", 0x1000, 0x9000),
            (c"cuStreamDestroy_v2", 0x2000, 0x9100),
            (c"cuLaunchKernel", 0x3000, 0x9200),
        ];
        let internal = 0x7777 as *mut c_void;
        let s = |name: &CStr, v: c_int| substitute_in(&t, name, internal, 0, v) as usize;
        assert_eq!(s(c"cuMemAlloc", 12000), 0x1000);
        assert_eq!(s(c"cuMemAlloc", 3020), 0x1000);
        assert_eq!(
            s(c"cuMemAlloc", 3000),
            0x7777,
            "the v1 ABI is not the wrapper's"
        );
        assert_eq!(s(c"cuStreamDestroy", 3020), 0x7777);
        assert_eq!(s(c"cuStreamDestroy", 4000), 0x2000);
        assert_eq!(s(c"cuLaunchKernel", 4000), 0x3000);
        // The driver's answer is a wrapped entry's own address: that entry, whatever version.
        assert_eq!(
            substitute_in(&t, c"cuMemAlloc", 0x9000 as *mut c_void, 0, 3000) as usize,
            0x1000
        );
    }

    #[test]
    fn the_runtime_asking_for_begin_capture_gets_the_wrapper_of_the_abi_it_asked_for() {
        let t: Vec<(&'static CStr, usize, usize)> = vec![
            (c"cuStreamBeginCapture", 0x1000, 0x9000),
            (c"cuStreamBeginCapture_v2", 0x2000, 0x9100),
            (c"cuStreamBeginCapture_v2_ptsz", 0x3000, 0x9200),
            (c"cuStreamBeginCaptureToGraph", 0x4000, 0x9300),
        ];
        let internal = 0x7777 as *mut c_void;
        let s = |name: &CStr, flags: u64, v: c_int| {
            substitute_in(&t, name, internal, flags, v) as usize
        };
        // CUDA 10.0's one-argument form, before the mode argument came with 10.1.
        assert_eq!(s(c"cuStreamBeginCapture", 0, 10000), 0x1000);
        assert_eq!(s(c"cuStreamBeginCapture", 0, 12000), 0x2000);
        assert_eq!(
            s(c"cuStreamBeginCapture", 1 << 1, 12000),
            0x3000,
            "per-thread"
        );
        assert_eq!(s(c"cuStreamBeginCaptureToGraph", 0, 12030), 0x4000);
        assert_eq!(
            s(c"cuStreamBeginCaptureToGraph", 0, 12000),
            0x7777,
            "older than the entry"
        );
    }

    #[test]
    fn every_entry_the_wrappers_cover_is_cross_checked() {
        for name in [
            "cuLaunchKernel",
            "cuLaunchKernel_ptsz",
            "cuLaunchKernelEx",
            "cuLaunchKernelEx_ptsz",
            "cuLaunchCooperativeKernel",
            "cuLaunchCooperativeKernel_ptsz",
            "cuGraphLaunch",
            "cuGraphLaunch_ptsz",
        ] {
            assert!(
                cupti::LAUNCH_ENTRIES.iter().any(|(_, n)| *n == name),
                "{name} is not cross-checked"
            );
            assert!(
                table()
                    .iter()
                    .any(|(n, _, _)| n.to_bytes() == name.as_bytes()),
                "{name} has no wrapper"
            );
        }
    }
}
