//! The CUDA entry points of the one shared object (feature `cuda`, SPEC §9.2 "Unmodified
//! applications").
//!
//! - `InitializeInjection`: the driver calls it at `cuInit` for the library named in
//!   `CUDA_INJECTION64_PATH`; it turns interception on ([`replay_cuda::tool::on_injection`]).
//! - `dlsym`, `cuGetProcAddress`, `cuGetProcAddress_v2` and the wrapped driver entries under
//!   the driver's own names, for a library loaded first (`LD_PRELOAD`, which `kreplay run`
//!   sets): each forwards to [`replay_cuda::intercept`], which forwards to the real driver
//!   untouched unless interception is on (see there).
//!
//! Every entry first names this library's one service ([`crate::service`]) as the one the
//! interception submits to; it is created only when an intercepted launch needs it. The
//! bodies never unwind (the wrappers catch panics).

use std::ffi::{c_char, c_int, c_uint, c_void};

use replay_cuda::intercept as ic;
use replay_cuda::sys::{
    CUcontext, CUdeviceptr, CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUipcMemHandle,
    CUkernel, CUlaunchConfig, CUlibrary, CUmemoryPool, CUmodule, CUresult, CUstream,
};

fn source() {
    replay_cuda::state::set_service_source(crate::service);
    replay_tools::library::register_loader(crate::tool::load_tool_library);
    replay_cuda::state::set_on_first_service(replay_cuda::tool::attach_from_env);
}

/// The driver's tool-injection entry: turns interception on; 1 on success.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> c_int {
    source();
    std::panic::catch_unwind(replay_cuda::tool::on_injection).unwrap_or(0)
}

/// `dlsym`, answering wrapped driver entries with their wrappers (see
/// [`replay_cuda::intercept::dlsym_answer`]).
///
/// A lookup with `RTLD_NEXT` means "the next object after the caller": the C library finds the
/// caller by the return address, so on x86-64 this entry is a few instructions that jump to
/// the C library's `dlsym` with the caller's return address in place (the lookup is answered
/// exactly as without this library, never substituted); every other lookup goes to
/// [`dlsym_wrapped`]. Elsewhere `RTLD_NEXT` is answered relative to this library (documented
/// in [`replay_cuda::intercept::dlsym_answer`]).
///
/// # Safety
/// `dlsym`'s contract.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // rdi: handle, rsi: name. RTLD_NEXT is (void *)-1. The stack is 8 past a 16-byte boundary
    // on entry; the two pushes and the 8-byte adjustment realign it for the call.
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "jne {wrapped}",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {real}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "jmp rax",
        "2:",
        "ret",
        wrapped = sym dlsym_wrapped,
        real = sym real_dlsym_address,
    )
}

/// The C library's `dlsym` as an address (0 when it cannot be found), for [`dlsym`]'s jump.
extern "C" fn real_dlsym_address() -> usize {
    std::panic::catch_unwind(|| ic::real_dlsym().map_or(0, |f| f as usize)).unwrap_or(0)
}

/// `dlsym` elsewhere than x86-64: every lookup through [`dlsym_wrapped`].
///
/// # Safety
/// `dlsym`'s contract.
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { dlsym_wrapped(handle, name) }
}

/// Every `dlsym` lookup but `RTLD_NEXT` on x86-64 (see [`dlsym`]).
///
/// # Safety
/// `dlsym`'s contract.
unsafe extern "C" fn dlsym_wrapped(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    source();
    // SAFETY: the caller's contract.
    unsafe { ic::dlsym_answer(handle, name) }
}

/// `cuptiSubscribe` as the program calls it (its own profiler: PyTorch's Kineto): the
/// launch cross-check gives up its subscription first
/// ([`replay_cuda::intercept::cupti::step_aside`]), so the program gets the one CUPTI allows;
/// then the call goes on to CUPTI (the next object defining it). `CUPTI_ERROR_UNKNOWN` (999)
/// when none does.
///
/// # Safety
/// CUPTI's contract for `cuptiSubscribe`.
#[no_mangle]
pub unsafe extern "C" fn cuptiSubscribe(
    subscriber: *mut *mut c_void,
    callback: *mut c_void,
    userdata: *mut c_void,
) -> c_int {
    type Subscribe = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *mut c_void) -> c_int;
    let next = std::panic::catch_unwind(|| {
        replay_cuda::intercept::cupti::step_aside();
        let dlsym = ic::real_dlsym()?;
        // RTLD_NEXT from here: the next object after this library, CUPTI itself.
        const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;
        // SAFETY: the C library's dlsym with a NUL-terminated name.
        let p = unsafe { dlsym(RTLD_NEXT, c"cuptiSubscribe".as_ptr()) };
        if !p.is_null() {
            return Some(p as usize);
        }
        // A CUPTI loaded locally (a Python extension's dependency) is not in the global
        // scope RTLD_NEXT searches.
        replay_cuda::intercept::cupti::loaded_entry("cuptiSubscribe")
    });
    match next {
        Ok(Some(p)) => {
            // SAFETY: CUPTI's cuptiSubscribe, which has this signature.
            let f: Subscribe = unsafe { std::mem::transmute::<usize, Subscribe>(p) };
            // SAFETY: the caller's arguments, forwarded.
            unsafe { f(subscriber, callback, userdata) }
        }
        _ => 999,
    }
}

/// `cuGetProcAddress` (4 arguments).
///
/// # Safety
/// The driver entry's contract.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CUresult {
    source();
    // SAFETY: the caller's contract.
    unsafe { ic::get_proc_address(symbol, pfn, version, flags) }
}

/// `cuGetProcAddress_v2`.
///
/// # Safety
/// The driver entry's contract.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    source();
    // SAFETY: the caller's contract.
    unsafe { ic::get_proc_address_v2(symbol, pfn, version, flags, status) }
}

macro_rules! exports {
    ($( $name:ident => $wrapper:ident ( $($a:ident : $t:ty),* ); )*) => {$(
        #[doc = concat!("`", stringify!($name), "`, through [`replay_cuda::intercept`].")]
        ///
        /// # Safety
        /// The driver entry's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> CUresult {
            source();
            // SAFETY: the caller's contract.
            unsafe { ic::$wrapper($($a),*) }
        }
    )*};
}

exports! {
    cuLaunchKernel => launch_kernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, s: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void);
    cuLaunchKernel_ptsz => launch_kernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, s: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void);
    cuLaunchKernelEx => launch_kernel_ex(c: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void);
    cuLaunchKernelEx_ptsz => launch_kernel_ex_ptsz(c: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void);
    cuLaunchCooperativeKernel => launch_cooperative(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, s: CUstream, params: *mut *mut c_void);
    cuLaunchCooperativeKernel_ptsz => launch_cooperative_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, s: CUstream, params: *mut *mut c_void);
    cuGraphLaunch => graph_launch(g: CUgraphExec, s: CUstream);
    cuGraphLaunch_ptsz => graph_launch_ptsz(g: CUgraphExec, s: CUstream);
    cuGraphInstantiateWithFlags => graph_instantiate_with_flags(e: *mut CUgraphExec, g: CUgraph, fl: u64);
    cuGraphInstantiateWithParams => graph_instantiate_with_params(e: *mut CUgraphExec, g: CUgraph, p: *mut replay_cuda::sys::CUDA_GRAPH_INSTANTIATE_PARAMS);
    cuGraphExecDestroy => graph_exec_destroy(e: CUgraphExec);
    cuGraphExecKernelNodeSetParams_v2 => graph_exec_kernel_set_v2(e: CUgraphExec, n: replay_cuda::sys::CUgraphNode, p: *const replay_cuda::sys::CUDA_KERNEL_NODE_PARAMS);
    cuGraphExecKernelNodeSetParams => graph_exec_kernel_set(e: CUgraphExec, n: replay_cuda::sys::CUgraphNode, p: *const replay_cuda::sys::CUDA_KERNEL_NODE_PARAMS);
    cuGraphNodeSetEnabled => graph_node_set_enabled(e: CUgraphExec, n: replay_cuda::sys::CUgraphNode, on: c_uint);
    cuGraphExecUpdate_v2 => graph_exec_update_v2(e: CUgraphExec, g: CUgraph, info: *mut c_void);
    cuGraphExecUpdate => graph_exec_update(e: CUgraphExec, g: CUgraph, err: *mut replay_cuda::sys::CUgraphNode, res: *mut c_void);
    cuGraphExecMemcpyNodeSetParams => graph_exec_memcpy_set(e: CUgraphExec, n: replay_cuda::sys::CUgraphNode, p: *const c_void, c: *mut c_void);
    cuGraphExecMemsetNodeSetParams => graph_exec_memset_set(e: CUgraphExec, n: replay_cuda::sys::CUgraphNode, p: *const c_void, c: *mut c_void);
    cuGraphExecHostNodeSetParams => graph_exec_host_set(e: CUgraphExec, n: replay_cuda::sys::CUgraphNode, p: *const c_void);
    cuGraphExecChildGraphNodeSetParams => graph_exec_child_set(e: CUgraphExec, n: replay_cuda::sys::CUgraphNode, p: *const c_void);
    cuGraphExecEventRecordNodeSetEvent => graph_exec_event_record_set(e: CUgraphExec, n: replay_cuda::sys::CUgraphNode, p: *const c_void);
    cuGraphExecEventWaitNodeSetEvent => graph_exec_event_wait_set(e: CUgraphExec, n: replay_cuda::sys::CUgraphNode, p: *const c_void);
    cuGraphExecNodeSetParams => graph_exec_node_set(e: CUgraphExec, n: replay_cuda::sys::CUgraphNode, p: *const c_void);
    cuMemAlloc_v2 => mem_alloc(p: *mut CUdeviceptr, n: usize);
    cuMemAllocPitch_v2 => mem_alloc_pitch(p: *mut CUdeviceptr, pitch: *mut usize, w: usize, h: usize, e: c_uint);
    cuMemAllocManaged => mem_alloc_managed(p: *mut CUdeviceptr, n: usize, fl: c_uint);
    cuMemAllocHost_v2 => mem_alloc_host(p: *mut *mut c_void, n: usize);
    cuMemHostAlloc => mem_host_alloc(p: *mut *mut c_void, n: usize, fl: c_uint);
    cuMemHostRegister_v2 => mem_host_register(p: *mut c_void, n: usize, fl: c_uint);
    cuMemAllocAsync => mem_alloc_async(p: *mut CUdeviceptr, n: usize, s: CUstream);
    cuMemAllocAsync_ptsz => mem_alloc_async_ptsz(p: *mut CUdeviceptr, n: usize, s: CUstream);
    cuMemFree_v2 => mem_free(p: CUdeviceptr);
    cuMemFreeHost => mem_free_host(p: *mut c_void);
    cuMemHostUnregister => mem_host_unregister(p: *mut c_void);
    cuMemFreeAsync => mem_free_async(p: CUdeviceptr, s: CUstream);
    cuMemFreeAsync_ptsz => mem_free_async_ptsz(p: CUdeviceptr, s: CUstream);
    cuMemAllocFromPoolAsync => mem_alloc_from_pool_async(p: *mut CUdeviceptr, n: usize, pool: CUmemoryPool, s: CUstream);
    cuMemAllocFromPoolAsync_ptsz => mem_alloc_from_pool_async_ptsz(p: *mut CUdeviceptr, n: usize, pool: CUmemoryPool, s: CUstream);
    cuMemCreate => mem_create(h: *mut u64, n: usize, prop: *const c_void, fl: u64);
    cuMemImportFromShareableHandle => mem_import_from_shareable_handle(h: *mut u64, os: *mut c_void, ty: c_uint);
    cuMulticastCreate => multicast_create(h: *mut u64, prop: *const c_void);
    cuMulticastBindMem => multicast_bind_mem(mc: u64, mo: usize, mem: u64, off: usize, n: usize, fl: u64);
    cuMulticastBindAddr => multicast_bind_addr(mc: u64, mo: usize, p: CUdeviceptr, n: usize, fl: u64);
    cuMemRelease => mem_release(h: u64);
    cuMemAddressReserve => mem_address_reserve(p: *mut CUdeviceptr, n: usize, align: usize, addr: CUdeviceptr, fl: u64);
    cuMemAddressFree => mem_address_free(p: CUdeviceptr, n: usize);
    cuMemMap => mem_map(p: CUdeviceptr, n: usize, off: usize, h: u64, fl: u64);
    cuMemUnmap => mem_unmap(p: CUdeviceptr, n: usize);
    cuMemExportToShareableHandle => mem_export_to_shareable_handle(os: *mut c_void, h: u64, ty: c_uint, fl: u64);
    cuMemSetAccess => mem_set_access(p: CUdeviceptr, n: usize, desc: *const c_void, count: usize);
    cuStreamDestroy_v2 => stream_destroy(s: CUstream);
    cuStreamEndCapture => stream_end_capture(s: CUstream, g: *mut CUgraph);
    cuStreamEndCapture_ptsz => stream_end_capture_ptsz(s: CUstream, g: *mut CUgraph);
    cuStreamBeginCapture => stream_begin_capture_v1(s: CUstream);
    cuStreamBeginCapture_ptsz => stream_begin_capture_v1_ptsz(s: CUstream);
    cuStreamBeginCapture_v2 => stream_begin_capture(s: CUstream, mode: c_uint);
    cuStreamBeginCapture_v2_ptsz => stream_begin_capture_ptsz(s: CUstream, mode: c_uint);
    cuStreamBeginCaptureToGraph => stream_begin_capture_to_graph(s: CUstream, g: CUgraph, deps: *const CUgraphNode, data: *const c_void, n: usize, mode: c_uint);
    cuStreamBeginCaptureToGraph_ptsz => stream_begin_capture_to_graph_ptsz(s: CUstream, g: CUgraph, deps: *const CUgraphNode, data: *const c_void, n: usize, mode: c_uint);
    cuDevicePrimaryCtxReset_v2 => primary_ctx_reset(d: c_int);
    cuDevicePrimaryCtxReset => primary_ctx_reset_v1(d: c_int);
    cuCtxDestroy_v2 => ctx_destroy(c: CUcontext);
    cuArrayCreate_v2 => array_create(a: *mut u64, desc: *const c_void);
    cuArray3DCreate_v2 => array_3d_create(a: *mut u64, desc: *const c_void);
    cuMipmappedArrayCreate => mipmapped_array_create(a: *mut u64, desc: *const c_void, levels: c_uint);
    cuMipmappedArrayGetLevel => mipmapped_array_get_level(a: *mut u64, m: u64, level: c_uint);
    cuArrayDestroy => array_destroy(a: u64);
    cuMipmappedArrayDestroy => mipmapped_array_destroy(a: u64);
    cuSurfObjectCreate => surf_object_create(s: *mut u64, desc: *const c_void);
    cuSurfObjectDestroy => surf_object_destroy(s: u64);
    cuTensorMapEncodeTiled => tensor_map_encode_tiled(m: *mut c_void, dt: c_uint, rank: c_uint, addr: *mut c_void, dims: *const u64, strides: *const u64, boxd: *const u32, estr: *const u32, il: c_uint, sw: c_uint, l2: c_uint, oob: c_uint);
    cuTensorMapEncodeIm2col => tensor_map_encode_im2col(m: *mut c_void, dt: c_uint, rank: c_uint, addr: *mut c_void, dims: *const u64, strides: *const u64, lower: *const c_int, upper: *const c_int, cpp: c_uint, ppc: c_uint, estr: *const u32, il: c_uint, sw: c_uint, l2: c_uint, oob: c_uint);
    cuTensorMapEncodeIm2colWide => tensor_map_encode_im2col_wide(m: *mut c_void, dt: c_uint, rank: c_uint, addr: *mut c_void, dims: *const u64, strides: *const u64, lower: c_int, upper: c_int, cpp: c_uint, ppc: c_uint, estr: *const u32, il: c_uint, mode: c_uint, sw: c_uint, l2: c_uint, oob: c_uint);
    cuTensorMapReplaceAddress => tensor_map_replace_address(m: *mut c_void, addr: *mut c_void);
    cuStreamCreate => stream_create(s: *mut CUstream, fl: c_uint);
    cuStreamCreateWithPriority => stream_create_with_priority(s: *mut CUstream, fl: c_uint, prio: c_int);
    cuIpcOpenMemHandle_v2 => ipc_open_mem_handle(p: *mut CUdeviceptr, h: CUipcMemHandle, fl: c_uint);
    cuIpcGetMemHandle => ipc_get_mem_handle(h: *mut CUipcMemHandle, p: CUdeviceptr);
    cuIpcCloseMemHandle => ipc_close_mem_handle(p: CUdeviceptr);
    cuMemcpyAsync => memcpy_async(d: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream);
    cuMemcpyAsync_ptsz => memcpy_async_ptsz(d: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream);
    cuMemcpyDtoDAsync_v2 => memcpy_dtod_async(d: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream);
    cuMemcpyDtoDAsync_v2_ptsz => memcpy_dtod_async_ptsz(d: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream);
    cuMemcpyHtoDAsync_v2 => memcpy_htod_async(d: CUdeviceptr, src: *const c_void, n: usize, s: CUstream);
    cuMemcpyHtoDAsync_v2_ptsz => memcpy_htod_async_ptsz(d: CUdeviceptr, src: *const c_void, n: usize, s: CUstream);
    cuMemcpyDtoHAsync_v2 => memcpy_dtoh_async(d: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream);
    cuMemcpyDtoHAsync_v2_ptsz => memcpy_dtoh_async_ptsz(d: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream);
    cuMemsetD8Async => memset_d8_async(d: CUdeviceptr, v: u8, n: usize, s: CUstream);
    cuMemsetD8Async_ptsz => memset_d8_async_ptsz(d: CUdeviceptr, v: u8, n: usize, s: CUstream);
    cuMemsetD32Async => memset_d32_async(d: CUdeviceptr, v: c_uint, n: usize, s: CUstream);
    cuMemsetD32Async_ptsz => memset_d32_async_ptsz(d: CUdeviceptr, v: c_uint, n: usize, s: CUstream);
    cuMemcpy => memcpy_sync(d: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpyHtoD_v2 => memcpy_htod(d: CUdeviceptr, src: *const c_void, n: usize);
    cuMemcpyDtoD_v2 => memcpy_dtod(d: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpyDtoH_v2 => memcpy_dtoh(d: *mut c_void, src: CUdeviceptr, n: usize);
    cuMemsetD8_v2 => memset_d8(d: CUdeviceptr, v: u8, n: usize);
    cuMemsetD32_v2 => memset_d32(d: CUdeviceptr, v: c_uint, n: usize);
    cuModuleLoad => module_load(m: *mut CUmodule, fname: *const c_char);
    cuModuleLoadData => module_load_data(m: *mut CUmodule, image: *const c_void);
    cuModuleLoadDataEx => module_load_data_ex(m: *mut CUmodule, image: *const c_void, n: c_uint, opts: *mut c_void, vals: *mut *mut c_void);
    cuModuleLoadFatBinary => module_load_fat_binary(m: *mut CUmodule, fat: *const c_void);
    cuModuleUnload => module_unload(m: CUmodule);
    cuModuleGetFunction => module_get_function(f: *mut CUfunction, m: CUmodule, name: *const c_char);
    cuLibraryLoadData => library_load_data(l: *mut CUlibrary, code: *const c_void, jo: *mut c_void, jv: *mut *mut c_void, nj: c_uint, lo: *mut c_void, lv: *mut *mut c_void, nl: c_uint);
    cuLibraryLoadFromFile => library_load_from_file(l: *mut CUlibrary, fname: *const c_char, jo: *mut c_void, jv: *mut *mut c_void, nj: c_uint, lo: *mut c_void, lv: *mut *mut c_void, nl: c_uint);
    cuLibraryUnload => library_unload(l: CUlibrary);
    cuLibraryGetKernel => library_get_kernel(k: *mut CUkernel, l: CUlibrary, name: *const c_char);
    cuKernelGetFunction => kernel_get_function(f: *mut CUfunction, k: CUkernel);
    cuMemcpy_ptds => memcpy_sync_ptds(d: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpyHtoD_v2_ptds => memcpy_htod_ptds(d: CUdeviceptr, src: *const c_void, n: usize);
    cuMemcpyDtoD_v2_ptds => memcpy_dtod_ptds(d: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpyDtoH_v2_ptds => memcpy_dtoh_ptds(d: *mut c_void, src: CUdeviceptr, n: usize);
    cuMemsetD8_v2_ptds => memset_d8_ptds(d: CUdeviceptr, v: u8, n: usize);
    cuMemsetD32_v2_ptds => memset_d32_ptds(d: CUdeviceptr, v: c_uint, n: usize);
    cuMemcpy2D_v2 => memcpy_2d(p: *const c_void);
    cuMemcpy2D_v2_ptds => memcpy_2d_ptds(p: *const c_void);
    cuMemcpy2DUnaligned_v2 => memcpy_2d_unaligned(p: *const c_void);
    cuMemcpy2DUnaligned_v2_ptds => memcpy_2d_unaligned_ptds(p: *const c_void);
    cuMemcpy2DAsync_v2 => memcpy_2d_async(p: *const c_void, s: CUstream);
    cuMemcpy2DAsync_v2_ptsz => memcpy_2d_async_ptsz(p: *const c_void, s: CUstream);
    cuMemcpy3D_v2 => memcpy_3d(p: *const c_void);
    cuMemcpy3D_v2_ptds => memcpy_3d_ptds(p: *const c_void);
    cuMemcpy3DAsync_v2 => memcpy_3d_async(p: *const c_void, s: CUstream);
    cuMemcpy3DAsync_v2_ptsz => memcpy_3d_async_ptsz(p: *const c_void, s: CUstream);
    cuMemcpy3DPeer => memcpy_3d_peer(p: *const c_void);
    cuMemcpy3DPeer_ptds => memcpy_3d_peer_ptds(p: *const c_void);
    cuMemcpy3DPeerAsync => memcpy_3d_peer_async(p: *const c_void, s: CUstream);
    cuMemcpy3DPeerAsync_ptsz => memcpy_3d_peer_async_ptsz(p: *const c_void, s: CUstream);
    cuMemcpyPeer => memcpy_peer(d: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize);
    cuMemcpyPeer_ptds => memcpy_peer_ptds(d: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize);
    cuMemcpyPeerAsync => memcpy_peer_async(d: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize, s: CUstream);
    cuMemcpyPeerAsync_ptsz => memcpy_peer_async_ptsz(d: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize, s: CUstream);
    cuMemsetD16_v2 => memset_d16(d: CUdeviceptr, v: u16, n: usize);
    cuMemsetD16_v2_ptds => memset_d16_ptds(d: CUdeviceptr, v: u16, n: usize);
    cuMemsetD16Async => memset_d16_async(d: CUdeviceptr, v: u16, n: usize, s: CUstream);
    cuMemsetD16Async_ptsz => memset_d16_async_ptsz(d: CUdeviceptr, v: u16, n: usize, s: CUstream);
    cuMemsetD2D8_v2 => memset_2d8(d: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize);
    cuMemsetD2D8_v2_ptds => memset_2d8_ptds(d: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize);
    cuMemsetD2D16_v2 => memset_2d16(d: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize);
    cuMemsetD2D16_v2_ptds => memset_2d16_ptds(d: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize);
    cuMemsetD2D32_v2 => memset_2d32(d: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize);
    cuMemsetD2D32_v2_ptds => memset_2d32_ptds(d: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize);
    cuMemsetD2D8Async => memset_2d8_async(d: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize, s: CUstream);
    cuMemsetD2D8Async_ptsz => memset_2d8_async_ptsz(d: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize, s: CUstream);
    cuMemsetD2D16Async => memset_2d16_async(d: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize, s: CUstream);
    cuMemsetD2D16Async_ptsz => memset_2d16_async_ptsz(d: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize, s: CUstream);
    cuMemsetD2D32Async => memset_2d32_async(d: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize, s: CUstream);
    cuMemsetD2D32Async_ptsz => memset_2d32_async_ptsz(d: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize, s: CUstream);
}
