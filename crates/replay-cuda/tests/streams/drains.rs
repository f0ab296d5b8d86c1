//! The agent drain: which streams it covers, a destroy during a window, a stuck stream.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use replay_cuda::intercept::{self, Internal};
use replay_cuda::{state, sys};

use crate::harness::{
    alloc_filled, destroy, during_a_window, free, function, launch_rmw, raw_stream, read,
    records_on, replay_one, rmw_host, setup,
};

#[test]
fn a_stream_that_only_carried_copies_memsets_graphs_or_pool_allocations_is_drained() {
    let Some((_g, s)) = setup() else { return };
    type Issue = fn(sys::CUstream, u64);
    let issues: [(&str, Issue); 4] = [
        ("copy", |st, a| {
            let host = [5u64; 8];
            // SAFETY: 64 bytes of a live tracked buffer from a live host array.
            let r = unsafe { intercept::memcpy_htod_async(a, host.as_ptr().cast(), 64, st) };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
        ("memset", |st, a| {
            // SAFETY: 16 words of a live tracked buffer.
            let r = unsafe { intercept::memset_d32_async(a, 7, 16, st) };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
        ("pool allocation", |st, _| {
            let mut p: sys::CUdeviceptr = 0;
            // SAFETY: a stream-ordered allocation and its free on a live stream.
            unsafe {
                assert_eq!(
                    intercept::mem_alloc_async(&mut p, 256, st),
                    sys::CUresult::CUDA_SUCCESS
                );
                assert_eq!(
                    intercept::mem_free_async(p, st),
                    sys::CUresult::CUDA_SUCCESS
                );
            }
        }),
        ("graph launch", |st, _| {
            let (mut g, mut exec): (sys::CUgraph, sys::CUgraphExec) =
                (std::ptr::null_mut(), std::ptr::null_mut());
            // SAFETY: an empty graph captured on the fake's own stream, launched on `st`
            // through the intercepted entry.
            unsafe {
                let c = {
                    let _inside = Internal::enter();
                    let c = raw_stream();
                    assert_eq!(
                        sys::cuStreamBeginCapture_v2(
                            c,
                            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED
                        ),
                        sys::CUresult::CUDA_SUCCESS
                    );
                    assert_eq!(
                        sys::cuStreamEndCapture(c, &mut g),
                        sys::CUresult::CUDA_SUCCESS
                    );
                    assert_eq!(
                        sys::cuGraphInstantiateWithFlags(&mut exec, g, 0),
                        sys::CUresult::CUDA_SUCCESS
                    );
                    c
                };
                assert_eq!(
                    intercept::graph_launch(exec, st),
                    sys::CUresult::CUDA_SUCCESS
                );
                destroy(c);
            }
        }),
    ];
    for (what, issue) in issues {
        let st = raw_stream();
        let a = alloc_filled(2);
        issue(st, a);
        let before = records_on(st);
        replay_one(&s, 3);
        assert!(
            records_on(st) > before,
            "the agent drain did not cover a stream that only carried a {what}"
        );
        destroy(st);
        free(a);
    }
}

#[test]
fn a_stream_created_through_the_wrappers_is_drained_before_it_carries_anything() {
    let Some((_g, s)) = setup() else { return };
    let (mut a, mut b): (sys::CUstream, sys::CUstream) =
        (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the intercepted stream creations with out pointers to live locals.
    unsafe {
        assert_eq!(
            intercept::stream_create(&mut a, 1),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::stream_create_with_priority(&mut b, 1, -1),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let before = (records_on(a), records_on(b));
    replay_one(&s, 4);
    assert!(records_on(a) > before.0, "cuStreamCreate's stream");
    assert!(
        records_on(b) > before.1,
        "cuStreamCreateWithPriority's stream"
    );
    destroy(a);
    destroy(b);
}

#[test]
fn a_stream_destroyed_on_another_thread_during_a_window_waits_for_it() {
    let Some((_g, s)) = setup() else { return };
    let mut st: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the intercepted stream creation with an out pointer to a live local.
    let r = unsafe { intercept::stream_create(&mut st, 1) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let a = alloc_filled(6);
    let st_addr = st as usize;
    let early = during_a_window(&s, a, move || destroy(st_addr as sys::CUstream));
    assert!(!early, "the destroy did not wait for the window");
    assert_eq!(s.tool.last().0, 3);
    free(a);
}

#[test]
fn a_drain_that_timed_out_on_a_stream_is_not_waited_for_again_while_it_is_stuck() {
    let Some((_g, s)) = setup() else { return };
    let svc = state::service().expect("the interception's service");
    let before_policy = svc.policy();
    let mut p = (*before_policy).clone();
    p.drain_timeout = Duration::from_millis(300);
    svc.set_policy(p).unwrap();
    let mut st: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the intercepted stream creation with an out pointer to a live local.
    let r = unsafe { intercept::stream_create(&mut st, 1) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    // The stream is busy for 2.5 s (the fake's kr_spin), launched by the library's own path
    // so no window runs over it.
    let spin = function(c"kr_spin").1;
    let mut flag = 0u64;
    let (mut ns, mut fp) = (2_500_000_000u64, &mut flag as *mut u64 as u64);
    let mut args: [*mut c_void; 2] = [(&mut ns as *mut u64).cast(), (&mut fp as *mut u64).cast()];
    let busy_until = Instant::now() + Duration::from_millis(2500);
    // SAFETY: kr_spin's two 8-byte parameters on a live stream.
    unsafe {
        let _inside = Internal::enter();
        assert_eq!(
            intercept::launch_kernel(
                spin,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                st,
                args.as_mut_ptr(),
                std::ptr::null_mut()
            ),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let a = alloc_filled(8);
    let mut once = read(a);
    let t = Instant::now();
    assert_eq!(launch_rmw(s.rmw, a, 5), sys::CUresult::CUDA_SUCCESS);
    let first = t.elapsed();
    rmw_host(&mut once, 5);
    assert_eq!(s.tool.last(), (1, "agent_drain_stuck".into()));
    assert_eq!(read(a), once);
    assert!(
        first >= Duration::from_millis(300),
        "waited its bound: {first:?}"
    );
    let t = Instant::now();
    assert_eq!(launch_rmw(s.rmw, a, 6), sys::CUresult::CUDA_SUCCESS);
    let second = t.elapsed();
    rmw_host(&mut once, 6);
    assert_eq!(s.tool.last(), (1, "agent_drain_stuck".into()));
    assert_eq!(read(a), once);
    assert!(
        second < Duration::from_millis(250),
        "the stuck stream cost the next window its bound again: {second:?}"
    );
    // Once the stream caught up, windows replay again.
    std::thread::sleep(
        busy_until.saturating_duration_since(Instant::now()) + Duration::from_millis(50),
    );
    svc.set_policy((*before_policy).clone()).unwrap();
    replay_one(&s, 9);
    destroy(st);
    free(a);
}
