//! The library's pooled backing gives way to the program: released on out-of-memory and when idle.

use std::time::Duration;

use replay_cuda::intercept;
use replay_cuda::state;
use replay_cuda::sys;

use crate::harness::{
    alloc_filled, global_capture_beside, launch_rmw, read, rmw_host, setup, Setup, N,
};
use crate::support::{bind_device0, fake_mem_used, fake_set_mem, FAKE_MEM};

/// A replayed launch that leaves backing pooled (the policy keeps it), under `idle`.
fn replay_leaving_backing(s: &Setup, idle: Duration) -> (u64, Vec<u64>, u64) {
    let svc = state::service().expect("the interception's service");
    let mut p = (*svc.policy()).clone();
    p.scope = replay_core::Scope::All;
    p.pool_keep_bytes = u64::MAX;
    p.pool_idle_release = idle;
    svc.set_policy(p).unwrap();
    let a = alloc_filled(91);
    let mut once = read(a);
    rmw_host(&mut once, 3);
    assert_eq!(launch_rmw(s.func, a, 3), sys::CUresult::CUDA_SUCCESS);
    assert!(
        s.tool.last.lock().contains("Replayed"),
        "{}",
        s.tool.last.lock()
    );
    let held = bind_device0().engine().pooled_bytes();
    assert!(
        held >= (N * 8) as u64,
        "the snapshot's backing stays pooled: {held}"
    );
    (a, once, held)
}

#[test]
fn an_application_allocation_out_of_memory_while_backing_is_pooled_is_retried_after_its_release() {
    let Some((_g, s)) = setup() else { return };
    let before = state::service().unwrap().policy();
    let (a, once, held) = replay_leaving_backing(&s, Duration::ZERO);
    let backend = bind_device0();
    let retries = state::state().counters_json()["oom_retries"].as_u64();
    // The device has room for the request only once the library's backing is gone.
    fake_set_mem(fake_mem_used() + 1024);
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the wrapper's contract is the driver's: an out pointer.
    let r = unsafe { intercept::mem_alloc(&mut p, held as usize) };
    fake_set_mem(FAKE_MEM);
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "retried after the release");
    assert_eq!(backend.engine().pooled_bytes(), 0);
    assert_eq!(backend.memory().deferred_bytes(), 0);
    if let Some(n) = retries {
        assert_eq!(
            state::state().counters_json()["oom_retries"].as_u64(),
            Some(n + 1)
        );
    }
    assert_eq!(read(a), once, "memory equals one execution");
    state::service()
        .unwrap()
        .set_policy((*before).clone())
        .unwrap();
    // SAFETY: frees the wrappers' allocations.
    unsafe {
        intercept::mem_free(p);
        intercept::mem_free(a);
    }
}

#[test]
fn pooled_backing_unused_past_the_idle_bound_is_released_by_the_next_intercepted_call() {
    let Some((_g, s)) = setup() else { return };
    let before = state::service().unwrap().policy();
    let idle = Duration::from_millis(1000);
    let t0 = std::time::Instant::now();
    let (a, once, _) = replay_leaving_backing(&s, idle);
    let backend = bind_device0();
    // Within the bound an allocation keeps the pool. The pool's idle time is at most the time
    // since `t0`: checked only when that is inside the bound, so a loaded machine cannot fail.
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the wrapper's contract is the driver's: an out pointer.
    let r = unsafe { intercept::mem_alloc(&mut p, 64) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    if t0.elapsed() < idle {
        assert!(
            backend.engine().pooled_bytes() > 0,
            "still within the bound"
        );
    }
    std::thread::sleep(idle + Duration::from_millis(100));
    let mut q: sys::CUdeviceptr = 0;
    // SAFETY: as above.
    let r = unsafe { intercept::mem_alloc(&mut q, 64) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        backend.engine().pooled_bytes(),
        0,
        "released after the bound"
    );
    assert_eq!(
        backend.memory().deferred_bytes(),
        0,
        "freed: no stream is busy"
    );
    assert_eq!(read(a), once, "memory equals one execution");
    state::service()
        .unwrap()
        .set_policy((*before).clone())
        .unwrap();
    // SAFETY: frees the wrappers' allocations.
    unsafe {
        intercept::mem_free(q);
        intercept::mem_free(p);
        intercept::mem_free(a);
    }
}

/// `CUDA_ARRAY_DESCRIPTOR`.
#[repr(C)]
struct ArrayDesc {
    width: usize,
    height: usize,
    format: u32,
    channels: u32,
}

#[test]
fn an_array_creation_out_of_memory_while_backing_is_pooled_is_retried_after_its_release() {
    let Some((_g, s)) = setup() else { return };
    let before = state::service().unwrap().policy();
    let (a, once, held) = replay_leaving_backing(&s, Duration::ZERO);
    let backend = bind_device0();
    fake_set_mem(fake_mem_used() + 1024);
    // One 32-bit channel: `held` bytes, which fit only once the backing is gone.
    let desc = ArrayDesc {
        width: (held / 4) as usize,
        height: 1,
        format: 0x03,
        channels: 1,
    };
    let mut array = 0u64;
    // SAFETY: the wrapper's contract is the driver's: an out pointer and a descriptor.
    let r = unsafe { intercept::array_create(&mut array, (&desc as *const ArrayDesc).cast()) };
    fake_set_mem(FAKE_MEM);
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "retried after the release");
    assert_eq!(backend.engine().pooled_bytes(), 0);
    assert_eq!(read(a), once, "memory equals one execution");
    state::service()
        .unwrap()
        .set_policy((*before).clone())
        .unwrap();
    // SAFETY: the array and the allocation the wrappers made.
    unsafe {
        intercept::array_destroy(array);
        intercept::mem_free(a);
    }
}

/// A stream-ordered allocation (permitted beside another thread's global capture) runs out of
/// memory while backing is pooled, as another thread captures in global mode: the library's
/// release of that backing (frees the real driver prohibits there) runs in relaxed capture
/// mode, so the capture ends valid, and the allocation is retried and succeeds.
#[test]
fn an_out_of_memory_release_of_pooled_backing_leaves_another_threads_global_capture_valid() {
    let Some((_g, s)) = setup() else { return };
    let before = state::service().unwrap().policy();
    let (a, once, held) = replay_leaving_backing(&s, Duration::ZERO);
    let backend = bind_device0();
    let (go, capturer) = global_capture_beside();
    fake_set_mem(fake_mem_used() + 1024);
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the wrapper's contract is the driver's: an out pointer, the legacy stream.
    let r = unsafe { intercept::mem_alloc_async(&mut p, held as usize, std::ptr::null_mut()) };
    fake_set_mem(FAKE_MEM);
    go.send(()).unwrap();
    let captured = capturer.join().unwrap();
    captured.unwrap_or_else(|e| panic!("{e}: the release ran in global mode"));
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "retried after the release");
    assert_eq!(backend.engine().pooled_bytes(), 0, "released");
    assert_eq!(read(a), once, "memory equals one execution");
    state::service()
        .unwrap()
        .set_policy((*before).clone())
        .unwrap();
    // SAFETY: frees the wrappers' allocations, the capture over.
    unsafe {
        intercept::mem_free_async(p, std::ptr::null_mut());
        intercept::mem_free(a);
    }
}

/// Backing pooled past the idle bound is released by the next intercepted allocation while
/// another thread captures in global mode: the release (its stream queries and frees) runs in
/// relaxed capture mode, so the capture ends valid.
#[test]
fn an_idle_release_of_pooled_backing_leaves_another_threads_global_capture_valid() {
    let Some((_g, s)) = setup() else { return };
    let before = state::service().unwrap().policy();
    let idle = Duration::from_millis(200);
    let (a, once, _) = replay_leaving_backing(&s, idle);
    let backend = bind_device0();
    std::thread::sleep(idle + Duration::from_millis(100));
    let (go, capturer) = global_capture_beside();
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the wrapper's contract is the driver's: an out pointer, the legacy stream.
    let r = unsafe { intercept::mem_alloc_async(&mut p, 64, std::ptr::null_mut()) };
    go.send(()).unwrap();
    let captured = capturer.join().unwrap();
    captured.unwrap_or_else(|e| panic!("{e}: the release ran in global mode"));
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        backend.engine().pooled_bytes(),
        0,
        "released past the bound"
    );
    assert_eq!(
        backend.memory().deferred_bytes(),
        0,
        "freed: no stream is busy"
    );
    assert_eq!(read(a), once, "memory equals one execution");
    state::service()
        .unwrap()
        .set_policy((*before).clone())
        .unwrap();
    // SAFETY: frees the wrappers' allocations, the capture over.
    unsafe {
        intercept::mem_free_async(p, std::ptr::null_mut());
        intercept::mem_free(a);
    }
}
