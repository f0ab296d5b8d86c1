//! Module globals of an application's image or library: restored between passes, unloaded.

use std::sync::atomic::Ordering;

use replay_cuda::intercept::{self, Internal};
use replay_cuda::module::elf::testing::{info, Builder};
use replay_cuda::module::image::testing::fatbin;
use replay_cuda::state;
use replay_cuda::sys;

use crate::harness::setup;
use crate::support::{launch_globals, load_app_function};

/// globals.cu's `.nv.global` as the fake driver lays it out, in a fat binary beside PTX.
fn globals_fatbin() -> Vec<u8> {
    let mut b = Builder::new();
    let g = b.section(".nv.global", 8, Vec::new(), 8328);
    b.symbol("kr_counter", info(1, 1), g, 0, 8);
    b.symbol("kr_hidden", info(0, 1), g, 8, 128);
    b.symbol("kr_table", info(1, 1), g, 136, 8192);
    fatbin(&[(1, 90, b"// ptx\0"), (2, 90, &b.build())])
}

/// The fake driver's `kr_counter` (host memory at its device address).
fn counter() -> u64 {
    let (mut p, mut n, mut m): (sys::CUdeviceptr, usize, sys::CUmodule) =
        (0, 0, std::ptr::null_mut());
    // SAFETY: the fake's module and global lookups with out pointers to live locals; its
    // globals are host memory at the device address.
    unsafe {
        let _inside = Internal::enter();
        assert_eq!(
            sys::cuModuleLoadData(&mut m, c"image".as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetGlobal_v2(&mut p, &mut n, m, c"kr_counter".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
        *(p as *const u64)
    }
}

fn registered(name: &str) -> bool {
    use replay_memory::ModuleVariables;
    let backend = state::state().backend(0).unwrap();
    let vars = backend
        .modules()
        .enumerate(replay_core::AgentId(0))
        .unwrap();
    vars.iter().any(|v| v.name == name)
}

#[test]
fn a_library_kernel_writing_its_globals_is_replayed_with_them_restored() {
    let Some((_g, s)) = setup() else { return };
    let fat = globals_fatbin();
    let (mut lib, mut k, mut f): (sys::CUlibrary, sys::CUkernel, sys::CUfunction) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    // SAFETY: a complete image in a live buffer; out pointers to live locals.
    unsafe {
        let n = std::ptr::null_mut();
        assert_eq!(
            intercept::library_load_data(
                &mut lib,
                fat.as_ptr().cast(),
                n,
                n.cast(),
                0,
                n,
                n.cast(),
                0
            ),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::library_get_kernel(&mut k, lib, c"kr_globals".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::kernel_get_function(&mut f, k),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    assert!(
        !registered("kr_counter"),
        "a library's globals wait for one of its kernels"
    );
    let start = counter();
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_globals(f), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "{}",
        s.tool.last.lock()
    );
    assert_eq!(
        counter(),
        start + 1,
        "the global was restored between passes: one execution"
    );
    assert!(registered("kr_table"));
    // SAFETY: unloads the library the test loaded.
    unsafe { intercept::library_unload(lib) };
    assert!(!registered("kr_counter"), "unloaded");
}

#[test]
fn a_kernel_writing_its_fat_binarys_globals_is_replayed_with_them_restored() {
    let Some((_g, s)) = setup() else { return };
    let (m, f) = load_app_function(&globals_fatbin(), c"kr_globals");
    let mut counter: sys::CUdeviceptr = 0;
    let mut bytes = 0usize;
    // SAFETY: the fake's global lookup with out pointers to live locals.
    unsafe {
        assert_eq!(
            sys::cuModuleGetGlobal_v2(&mut counter, &mut bytes, m, c"kr_counter".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    // SAFETY: the fake's globals are host memory at the device address.
    let count = || unsafe { *(counter as *const u64) };
    let start = count();
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_globals(f), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "{}",
        s.tool.last.lock()
    );
    assert_eq!(
        count(),
        start + 1,
        "the global was restored between passes: one execution"
    );
    let backend = state::state().backend(0).unwrap();
    use replay_memory::ModuleVariables;
    let vars = backend
        .modules()
        .enumerate(replay_core::AgentId(0))
        .unwrap();
    assert!(
        vars.iter().any(|v| v.name == "kr_table" && v.size == 8192),
        "{vars:?}"
    );
    assert!(
        vars.iter().any(|v| v.name == "kr_hidden"),
        "resolved through its section: {vars:?}"
    );
    // SAFETY: unloads the module the test loaded.
    unsafe { intercept::module_unload(m) };
    let vars = backend
        .modules()
        .enumerate(replay_core::AgentId(0))
        .unwrap();
    assert!(
        vars.iter().all(|v| v.name != "kr_counter"),
        "unloaded: {vars:?}"
    );
}
