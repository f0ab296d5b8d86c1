//! Stream capture beside a window: pre-capture fences, declines, captures that stay valid.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_cuda::intercept::{self, Internal};
use replay_cuda::sys;

use crate::harness::{
    alloc_filled, destroy, free, function, read, records_on, replay_one, rmw_host, setup, Setup, N,
};
use crate::support::bind_device0;

/// `kr_rmw(a, k)` on `st` through the intercepted `cuLaunchKernel`.
fn launch_rmw_on(
    func: sys::CUfunction,
    st: sys::CUstream,
    mut p: u64,
    mut k: u64,
) -> sys::CUresult {
    let mut n = N as u64;
    let mut args: [*mut c_void; 3] = [
        (&mut p as *mut u64).cast(),
        (&mut n as *mut u64).cast(),
        (&mut k as *mut u64).cast(),
    ];
    // SAFETY: kr_rmw's three 8-byte parameters, live arguments, on a live stream.
    unsafe {
        intercept::launch_kernel(
            func,
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
        )
    }
}

/// Keeps `st` busy for `ns` (the fake's kr_spin), launched by the library's own path so no
/// window runs over it.
fn spin_on(st: sys::CUstream, ns: u64) {
    let spin = function(c"kr_spin").1;
    let flag = Box::leak(Box::new(0u64));
    let (mut ns, mut fp) = (ns, flag as *mut u64 as u64);
    let mut args: [*mut c_void; 2] = [(&mut ns as *mut u64).cast(), (&mut fp as *mut u64).cast()];
    // SAFETY: kr_spin's two 8-byte parameters on a live stream (the flag is leaked, so it
    // outlives the launch).
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
}

fn new_stream() -> sys::CUstream {
    let mut st: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the intercepted stream creation (non-blocking) with an out pointer to a live
    // local.
    let r = unsafe { intercept::stream_create(&mut st, 1) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    st
}

/// A capture of `st` begun in global mode on another thread, through the wrappers (`seen`)
/// or past them; it waits for `go`, then ends the capture through the wrappers and reports
/// whether it ended valid.
fn capture_on_thread(
    st: sys::CUstream,
    seen: bool,
) -> (
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<Result<(), String>>,
) {
    let (begun_tx, begun_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let st = st as usize;
    let capturer = std::thread::spawn(move || -> Result<(), String> {
        bind_device0();
        let st = st as sys::CUstream;
        let global = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL as std::ffi::c_uint;
        // SAFETY: begin and end of a capture of a live stream, and a graph owned here.
        unsafe {
            let r = if seen {
                intercept::stream_begin_capture(st, global)
            } else {
                let _inside = Internal::enter();
                sys::cuStreamBeginCapture_v2(
                    st,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
                )
            };
            r.result().map_err(|e| format!("begin: {e}"))?;
            begun_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            let mut g: sys::CUgraph = std::ptr::null_mut();
            let ended = intercept::stream_end_capture(st, &mut g)
                .result()
                .map_err(|e| format!("the capture was invalidated: {e}"));
            if !g.is_null() {
                sys::cuGraphDestroy(g);
            }
            ended
        }
    });
    (begun_rx, go_tx, capturer)
}

/// Turns waiting on pre-capture fences back off (the default) when a test that turned it on
/// ends, however it ends.
struct Off;

impl Drop for Off {
    fn drop(&mut self) {
        replay_cuda::set_drain_beside_capture(false);
    }
}

/// Another thread captures stream A in global mode, begun through the wrappers after work was
/// queued on A that completes late (the fake's kr_spin keeps A busy for 600 ms, and the
/// "kernel" writes its result into `a` at 300 ms). A window over `kr_rmw(a)` on stream B
/// meanwhile replays: its agent drain waits on A's pre-capture fence (no event is recorded on
/// A), so the snapshot is taken after A's work, and memory ends equal to one execution after
/// it; the capture stays valid. Once the capture ended the fence is dropped and drains record
/// on A again.
#[test]
fn a_window_beside_a_capture_begun_through_the_wrappers_waits_for_its_pre_capture_work() {
    let Some((_g, s)) = setup() else { return };
    replay_cuda::set_drain_beside_capture(true);
    let _off = Off;
    let (stream_a, stream_b) = (new_stream(), new_stream());
    let a = alloc_filled(41);
    // A's pre-capture work: busy for 600 ms, its write landing at 300 ms.
    let written: Vec<u64> = (0..N as u64).map(|i| i * 13 + 5).collect();
    let start = Instant::now();
    spin_on(stream_a, 600_000_000);
    let done_at = start + Duration::from_millis(600);
    let writer = {
        let w = written.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            for (i, v) in w.iter().enumerate() {
                // SAFETY: `N` words of memory the fake made (host memory at the device
                // address), written as A's kernel would write them.
                unsafe { std::ptr::write_volatile((a as *mut u64).add(i), *v) };
            }
        })
    };
    let (begun, go, capturer) = capture_on_thread(stream_a, true);
    begun.recv().unwrap();
    let records_a = records_on(stream_a);
    // A second begin of the capturing stream is refused by the driver, and records nothing
    // into the live capture (its fence stays the one recorded before it began).
    let relaxed = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED as std::ffi::c_uint;
    // SAFETY: a begin-capture call on a live stream.
    let again = unsafe { intercept::stream_begin_capture(stream_a, relaxed) };
    assert_ne!(again, sys::CUresult::CUDA_SUCCESS, "already capturing");
    assert_eq!(
        records_on(stream_a),
        records_a,
        "nothing recorded into the capture"
    );
    let first_pass = Arc::new(Mutex::new(None::<Instant>));
    {
        let fp = Arc::clone(&first_pass);
        *s.tool.hook.lock() = Some(Box::new(move |p| {
            if p == 0 {
                *fp.lock() = Some(Instant::now());
            }
        }));
    }
    let r = launch_rmw_on(s.rmw, stream_b, a, 9);
    *s.tool.hook.lock() = None;
    let last = s.tool.last();
    let records_during = records_on(stream_a);
    go.send(()).unwrap();
    let captured = capturer.join().unwrap();
    writer.join().unwrap();
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    captured.unwrap_or_else(|e| panic!("{e}; window: {last:?}"));
    assert_eq!(last, (3, "none".into()), "replayed beside the capture");
    assert_eq!(
        records_during, records_a,
        "no event was recorded on the capturing stream"
    );
    let first = first_pass.lock().expect("a first pass");
    assert!(
        first >= done_at,
        "the first pass ran {:?} before A's pre-capture work completed",
        done_at - first
    );
    let mut once = written;
    rmw_host(&mut once, 9);
    assert_eq!(
        read(a),
        once,
        "the snapshot was taken after A's pre-capture work: memory equals one execution after it"
    );
    // The capture ended: the fence is gone, and the next window's drain records on A again.
    replay_one(&s, 12);
    assert!(
        records_on(stream_a) > records_during,
        "drained by an event on A"
    );
    destroy(stream_a);
    destroy(stream_b);
    free(a);
}

/// A window over `kr_rmw(a, k)` on stream B while another thread captures stream A (begun
/// through the wrappers or past them, `wrapped`): it declines `agent_drain_stuck` and runs
/// once, nothing is recorded on A, the capture ends valid and memory equals one execution.
fn declines_beside_capture(s: &Setup, seed: u64, k: u64, wrapped: bool) {
    let (stream_a, stream_b) = (new_stream(), new_stream());
    let a = alloc_filled(seed);
    let mut once = read(a);
    rmw_host(&mut once, k);
    let (begun, go, capturer) = capture_on_thread(stream_a, wrapped);
    begun.recv().unwrap();
    let records_a = records_on(stream_a);
    let r = launch_rmw_on(s.rmw, stream_b, a, k);
    let last = s.tool.last();
    let records_during = records_on(stream_a);
    go.send(()).unwrap();
    let captured = capturer.join().unwrap();
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    captured.unwrap_or_else(|e| panic!("{e}; window: {last:?}"));
    assert_eq!(last, (1, "agent_drain_stuck".into()), "declined, run once");
    assert_eq!(records_during, records_a, "nothing recorded on the capture");
    assert_eq!(read(a), once, "memory equals one execution");
    destroy(stream_a);
    destroy(stream_b);
    free(a);
}

/// A capture of a known stream begun past the wrappers (no pre-capture fence was recorded):
/// a window beside it still declines (`agent_drain_stuck`) rather than record on the capturing
/// stream or guess, runs the launch once, and the capture stays valid.
#[test]
fn a_window_beside_a_capture_begun_outside_the_wrappers_sight_still_declines() {
    let Some((_g, s)) = setup() else { return };
    declines_beside_capture(&s, 43, 4, false);
}

/// By default (`KREPLAY_CUDA_DRAIN_BESIDE_CAPTURE` unset) a window beside a capture begun
/// through the wrappers records no fence and declines, as before fences existed: the launch runs once, the
/// capture stays valid and memory equals one execution.
#[test]
fn by_default_a_window_beside_a_capture_with_a_fence_declines_and_runs_once() {
    let Some((_g, s)) = setup() else { return };
    replay_cuda::set_drain_beside_capture(false);
    assert!(!replay_cuda::drain_beside_capture());
    declines_beside_capture(&s, 47, 6, true);
}

/// Two threads capture in global mode, both begun through the wrappers: the first one's end
/// (its hook drops the stream's pre-capture fence, querying it) leaves the other's capture
/// valid.
#[test]
fn ending_one_capture_through_the_wrappers_leaves_another_threads_global_capture_valid() {
    let Some((_g, _s)) = setup() else { return };
    // Fences recorded, so the first end's hook drops (queries) one.
    replay_cuda::set_drain_beside_capture(true);
    let _off = Off;
    let (stream_a, stream_c) = (new_stream(), new_stream());
    let (begun_a, go_a, first) = capture_on_thread(stream_a, true);
    begun_a.recv().unwrap();
    let (begun_c, go_c, second) = capture_on_thread(stream_c, true);
    begun_c.recv().unwrap();
    go_a.send(()).unwrap();
    let first = first.join().unwrap();
    go_c.send(()).unwrap();
    let second = second.join().unwrap();
    first.expect("the first capture ended valid");
    second.expect("the second capture ended valid after the first one's end");
    destroy(stream_a);
    destroy(stream_c);
}
