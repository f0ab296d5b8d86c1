//! Kernels of unknown layout: the pinned memory they write is captured, `.nv.info` describes them.

use std::sync::atomic::Ordering;

use replay_cuda::intercept;
use replay_cuda::module::elf::testing::Builder;
use replay_cuda::module::image::testing::nv_info;
use replay_cuda::state;
use replay_cuda::sys;

use crate::harness::{alloc_filled, launch_rmw, read, rmw_host, setup, APP_PTX, N};
use crate::support::load_app_function;

#[test]
fn a_launch_of_unknown_layout_into_pinned_memory_is_replayed_with_it_captured() {
    let Some((_g, s)) = setup() else { return };
    let mut opaque: sys::CUfunction = std::ptr::null_mut();
    let mut module: sys::CUmodule = std::ptr::null_mut();
    let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: the fake driver's module calls and the intercepted pinned allocation, with out
    // pointers to live locals.
    unsafe {
        assert_eq!(
            intercept::module_load_data(&mut module, APP_PTX.as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetFunction(&mut opaque, module, c"opaque_kr_rmw".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::mem_host_alloc(&mut host, N * 8, 0),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let p = host as u64;
    let init: Vec<u64> = (0..N as u64).map(|i| i * 3 + 1).collect();
    // SAFETY: `N` words of pinned host memory, just allocated.
    unsafe { std::ptr::copy_nonoverlapping(init.as_ptr(), host.cast::<u64>(), N) };
    let mut once = init.clone();
    rmw_host(&mut once, 13);
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_rmw(opaque, p, 13), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(p), once, "memory equals one execution");
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "three passes, the pinned buffer captured: {}",
        s.tool.last.lock()
    );
    // SAFETY: frees the wrapper's allocation.
    unsafe { intercept::mem_free_host(host) };
}

#[test]
fn a_kernel_the_driver_cannot_describe_takes_its_images_parameter_table() {
    let Some((_g, s)) = setup() else { return };
    let mut b = Builder::new();
    b.section(
        ".nv.info.opaque_kr_rmw",
        0x7000_0000,
        nv_info(&[(0, 8), (8, 8), (16, 8)]),
        0,
    );
    let (m, f) = load_app_function(&b.build(), c"opaque_kr_rmw");
    let a = alloc_filled(21);
    let mut once = read(a);
    rmw_host(&mut once, 4);
    let c = &state::state().counters;
    let (img, unknown) = (
        c.layout_image.load(Ordering::SeqCst),
        c.layout_unknown.load(Ordering::SeqCst),
    );
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_rmw(f, a, 4), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(a), once, "memory equals one execution");
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "{}",
        s.tool.last.lock()
    );
    assert_eq!(
        c.layout_image.load(Ordering::SeqCst),
        img + 1,
        "{}",
        state::state().counters_json()
    );
    assert_eq!(c.layout_unknown.load(Ordering::SeqCst), unknown);
    let unloads = state::state().tracker.unloads_since(0).0;
    // SAFETY: frees the wrapper's allocation; unloads the module.
    unsafe {
        intercept::mem_free(a);
        intercept::module_unload(m);
    }
    // The unload reached the memory engines: predictions of intercepted kernels (keyed by
    // function handle, which a later load may reuse) are forgotten.
    assert!(
        state::state().tracker.unloads_since(0).0 > unloads,
        "the module's unload is recorded for the agent"
    );
}
