//! Launches beside another thread's live capture: replayed, or run once if it holds launches.

use std::sync::atomic::Ordering;

use replay_cuda::intercept;
use replay_cuda::state;
use replay_cuda::sys;

use crate::harness::{alloc_filled, global_capture_beside, launch_rmw, read, rmw_host, setup, N};
use crate::support::bind_device0;

/// Another thread captures in global mode (PyTorch's default) on a stream of its own while an
/// intercepted launch runs its window: the window's driver calls (event queries, snapshot
/// allocations, frees) run in relaxed capture mode, so the capture stays valid and ends, and
/// the launch is replayed equal to one execution.
#[test]
fn an_intercepted_window_beside_another_threads_global_capture_leaves_it_valid() {
    let Some((_g, s)) = setup() else { return };
    // The application's own allocation comes before the capture: made during it, in global
    // mode, it would fail and invalidate the capture without the library too.
    let a = alloc_filled(71);
    let (go_tx, capturer) = global_capture_beside();
    let mut once = read(a);
    rmw_host(&mut once, 9);
    let before = s.tool.replayed.load(Ordering::SeqCst);
    let r = launch_rmw(s.func, a, 9);
    go_tx.send(()).unwrap();
    let captured = capturer.join().unwrap();
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{}", s.tool.last.lock());
    captured.unwrap_or_else(|e| panic!("{e}; window: {}", s.tool.last.lock()));
    assert_eq!(read(a), once, "memory equals one execution");
    // (The free comes after the capture ended, as the application's would.)
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "replayed beside the capture: {}",
        s.tool.last.lock()
    );
    // SAFETY: frees the wrapper's allocation.
    unsafe { intercept::mem_free(a) };
}

/// While a capture that intercepted launches went into is live on another thread, a launch on
/// another stream runs once without a window (a window could not drain the capturing stream,
/// and would snapshot and restore beside the graph's allocations); the capture ends valid, and
/// once it has ended launches are replayed again.
#[test]
fn a_launch_beside_a_live_capture_of_intercepted_launches_runs_once_without_a_window() {
    let Some((_g, s)) = setup() else { return };
    let a = alloc_filled(23);
    let b = alloc_filled(29);
    let func = s.func as usize;
    let (begun_tx, begun_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let capturer = std::thread::spawn(move || -> Result<(), String> {
        bind_device0();
        let mut st: sys::CUstream = std::ptr::null_mut();
        // SAFETY: driver calls on a stream this thread creates and destroys; kr_rmw's three
        // 8-byte parameters, live arguments, launched through the wrapper into the capture.
        unsafe {
            sys::cuStreamCreate(&mut st, 1)
                .result()
                .map_err(|e| e.to_string())?;
            sys::cuStreamBeginCapture_v2(
                st,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            )
            .result()
            .map_err(|e| format!("begin: {e}"))?;
            let (mut p, mut n, mut k) = (b, N as u64, 2u64);
            let mut args: [*mut std::ffi::c_void; 3] = [
                (&mut p as *mut u64).cast(),
                (&mut n as *mut u64).cast(),
                (&mut k as *mut u64).cast(),
            ];
            let r = intercept::launch_kernel(
                func as sys::CUfunction,
                1,
                1,
                1,
                64,
                1,
                1,
                0,
                st,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            );
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(format!("captured launch: {r:?}"));
            }
            begun_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            // Ended and destroyed through the wrappers, as an application's calls arrive.
            let mut g: sys::CUgraph = std::ptr::null_mut();
            let ended = intercept::stream_end_capture(st, &mut g)
                .result()
                .map_err(|e| format!("the capture was invalidated: {e}"));
            if !g.is_null() {
                sys::cuGraphDestroy(g);
            }
            intercept::stream_destroy(st);
            ended
        }
    });
    begun_rx.recv().unwrap();
    let mut once = read(a);
    rmw_host(&mut once, 6);
    let beside = state::state()
        .counters
        .beside_capture
        .load(Ordering::SeqCst);
    let record = s.tool.last_record.lock().as_ref().map(|r| r.dispatch_id);
    let r = launch_rmw(s.func, a, 6);
    go_tx.send(()).unwrap();
    let captured = capturer.join().unwrap();
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    captured.unwrap_or_else(|e| panic!("{e}; window: {}", s.tool.last.lock()));
    assert_eq!(read(a), once, "run once");
    assert_eq!(
        state::state()
            .counters
            .beside_capture
            .load(Ordering::SeqCst),
        beside + 1,
        "counted as run beside a live capture"
    );
    assert_eq!(
        s.tool.last_record.lock().as_ref().map(|r| r.dispatch_id),
        record,
        "no window beside the capture: {}",
        s.tool.last.lock()
    );
    // The capture has ended (and its stream is gone): replayed again.
    let replayed = s.tool.replayed.load(Ordering::SeqCst);
    rmw_host(&mut once, 6);
    assert_eq!(launch_rmw(s.func, a, 6), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(a), once, "equal to one execution");
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        replayed + 1,
        "{}",
        s.tool.last.lock()
    );
    // SAFETY: frees the wrapper's allocations.
    unsafe {
        intercept::mem_free(a);
        intercept::mem_free(b);
    }
}
