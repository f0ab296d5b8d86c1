//! Shared memory: IPC mappings are never captured; NVSHMEM kernels run once, as communication.

use std::sync::atomic::Ordering;

use replay_core::MemoryClass;
use replay_cuda::{intercept, state, sys};

use crate::harness::{
    alloc_filled, during_a_window, free, launch_rmw, read, replay_one, rmw_host, setup, N,
};
use crate::support;

#[test]
fn memory_opened_from_an_ipc_handle_is_ipc_memory_and_never_captured() {
    let Some((_g, s)) = setup() else { return };
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the intercepted open with an out pointer to a live local; the handle's bytes
    // are the fake's to ignore.
    let r = unsafe {
        intercept::ipc_open_mem_handle(&mut p, sys::CUipcMemHandle { reserved: [0; 64] }, 1)
    };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let tracker = &state::state().tracker;
    let (_, region) = tracker.lookup_any(p).expect("recorded");
    assert_eq!(region.class, MemoryClass::IPC_IMPORTED);
    assert_eq!(region.size, 4096);
    // SAFETY: 4 KiB the fake made, host memory at the device address.
    let mut once: Vec<u64> = unsafe { std::slice::from_raw_parts(p as *const u64, N) }.to_vec();
    rmw_host(&mut once, 5);
    assert_eq!(launch_rmw(s.rmw, p, 5), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(s.tool.last(), (1, "untracked_memory".into()));
    assert_eq!(read(p), once, "one execution");
    // A peer writing it during an unrelated kernel's window is not the kernel's write.
    let a = alloc_filled(12);
    let early = during_a_window(&s, a, move || {
        // SAFETY: the mapping, open until closed below.
        unsafe { std::ptr::write_volatile(p as *mut u64, 0xBEEF) };
    });
    assert!(early);
    assert_eq!(s.tool.last(), (3, "none".into()));
    // SAFETY: closes the mapping opened above.
    let r = unsafe { intercept::ipc_close_mem_handle(p) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert!(tracker.lookup_any(p).is_none(), "forgotten at its close");
    free(a);
}

/// A fat binary for sm_90 whose cubin links NVSHMEM's device state (a constant named
/// `nvshmemi_device_state_d`), beside PTX.
fn nvshmem_fatbin() -> Vec<u8> {
    use replay_cuda::module::elf::testing::{info, Builder};
    use replay_cuda::module::image::testing::fatbin;
    let mut b = Builder::new();
    let c = b.section(".nv.constant3", 8, vec![0; 64], 64);
    b.symbol("nvshmemi_device_state_d", info(1, 1), c, 0, 64);
    fatbin(&[(1, 90, b"// ptx\0"), (2, 90, &b.build())])
}

#[test]
fn a_kernel_of_a_module_that_links_nvshmem_runs_once_as_a_communication_kernel() {
    let Some((_g, s)) = setup() else { return };
    let image = nvshmem_fatbin();
    let (_m, f) = support::load_app_function(&image, c"kr_rmw");
    let svc = state::service().unwrap();
    let runs = svc.communication_runs();
    let windows = s.tool.windows.load(Ordering::SeqCst);
    let a = alloc_filled(13);
    let mut once = read(a);
    rmw_host(&mut once, 5);
    assert_eq!(launch_rmw(f, a, 5), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(a), once, "run once");
    assert_eq!(
        svc.communication_runs(),
        runs + 1,
        "counted as communication"
    );
    assert_eq!(s.tool.windows.load(Ordering::SeqCst), windows, "no window");
    // The same kernel name in a module without NVSHMEM is an ordinary candidate.
    replay_one(&s, 14);
    free(a);
}
