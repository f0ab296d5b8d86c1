//! Peer and UVA copies from another device's context wait for this device's window.

use replay_cuda::{intercept, sys};

use crate::harness::{
    alloc_filled, during_a_window, fake_cuda_set_thread_device, free, read, setup, N,
};

#[test]
fn a_copy_from_another_devices_context_into_this_devices_memory_waits_for_its_window() {
    let Some((_g, s)) = setup() else { return };
    type Copy = fn(u64);
    let copies: [(&str, Copy); 2] = [
        ("UVA copy", |a| {
            let host = vec![0xABu8; N * 8];
            // SAFETY: the whole live tracked buffer from a live host vector.
            let r = unsafe {
                intercept::memcpy_htod_async(a, host.as_ptr().cast(), N * 8, std::ptr::null_mut())
            };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
        ("peer copy", |a| {
            let host = vec![0xABu8; N * 8];
            let ctx = std::ptr::null_mut();
            // SAFETY: as above, the source a live host vector at its unified address.
            let r = unsafe {
                intercept::memcpy_peer_async(
                    a,
                    ctx,
                    host.as_ptr() as u64,
                    ctx,
                    N * 8,
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
    ];
    let described: [(&str, Copy); 2] = [
        ("2D copy", |a| {
            let host = vec![0xABu8; N * 8];
            let c = sys::CUDA_MEMCPY2D {
                srcXInBytes: 0,
                srcY: 0,
                srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
                srcHost: host.as_ptr().cast(),
                srcDevice: 0,
                srcArray: std::ptr::null_mut(),
                srcPitch: 512,
                dstXInBytes: 0,
                dstY: 0,
                dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: a,
                dstArray: std::ptr::null_mut(),
                dstPitch: 512,
                WidthInBytes: 512,
                Height: N * 8 / 512,
            };
            // SAFETY: the descriptor names the live buffer and host vector.
            let r = unsafe {
                intercept::memcpy_2d_async(
                    (&c as *const sys::CUDA_MEMCPY2D).cast(),
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
        ("3D peer copy", |a| {
            let host = vec![0xABu8; N * 8];
            let c = sys::CUDA_MEMCPY3D_PEER {
                srcXInBytes: 0,
                srcY: 0,
                srcZ: 0,
                srcLOD: 0,
                srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
                srcHost: std::ptr::null(),
                srcDevice: host.as_ptr() as u64,
                srcArray: std::ptr::null_mut(),
                srcContext: std::ptr::null_mut(),
                srcPitch: 512,
                srcHeight: 4,
                dstXInBytes: 0,
                dstY: 0,
                dstZ: 0,
                dstLOD: 0,
                dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: a,
                dstArray: std::ptr::null_mut(),
                dstContext: std::ptr::null_mut(),
                dstPitch: 512,
                dstHeight: 4,
                WidthInBytes: 512,
                Height: 4,
                Depth: N * 8 / 2048,
            };
            // SAFETY: as above.
            let r = unsafe {
                intercept::memcpy_3d_peer_async(
                    (&c as *const sys::CUDA_MEMCPY3D_PEER).cast(),
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
    ];
    for (what, copy) in copies.into_iter().chain(described) {
        let a = alloc_filled(7);
        let early = during_a_window(&s, a, move || {
            // This thread's current context is device 1's: the copy's own device is not the
            // one whose window is open.
            fake_cuda_set_thread_device(1);
            copy(a);
        });
        assert!(
            !early,
            "the {what} did not wait for the destination's window"
        );
        assert!(
            read(a).iter().all(|&w| w == 0xABAB_ABAB_ABAB_ABAB),
            "the {what} was undone by a restore"
        );
        free(a);
    }
}
