//! Writes and frees on another thread during a window: writes wait for it, frees come first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_cuda::intercept;
use replay_cuda::state;
use replay_cuda::sys;

use crate::harness::{alloc_filled, launch_rmw, read, rmw_host, setup, wait_for, N};

/// A write `issue(a)` on another thread while a window over `kr_rmw(a)` is open must wait
/// for the window, and then fill every word with `0xABAB_ABAB_ABAB_ABAB`.
fn a_write_on_another_thread_during_a_window_waits_for_it(issue: fn(u64) -> sys::CUresult) {
    let Some((_g, s)) = setup() else { return };
    let a = alloc_filled(1);
    let mut expect = read(a);
    rmw_host(&mut expect, 5);
    let done = Arc::new(AtomicBool::new(false));
    let worker: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
    {
        let (done, worker) = (Arc::clone(&done), Arc::clone(&worker));
        *s.tool.hook.lock() = Some(Box::new(move |pass| {
            if pass != 1 {
                return;
            }
            let d = Arc::clone(&done);
            *worker.lock() = Some(std::thread::spawn(move || {
                assert_eq!(issue(a), sys::CUresult::CUDA_SUCCESS);
                d.store(true, Ordering::SeqCst);
            }));
            // Ungated, the write lands now, inside the window, and the restore before the
            // next pass undoes it; gated, it waits for the window to end.
            let _ = wait_for(&done, Duration::from_millis(500));
        }));
    }
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_rmw(s.func, a, 5), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "replayed with 3 passes: {} {}",
        s.tool.last.lock(),
        state::state().counters_json()
    );
    worker
        .lock()
        .take()
        .expect("the worker ran")
        .join()
        .unwrap();
    *s.tool.hook.lock() = None;
    // The write ran after the window: every word is its value, whatever the kernel wrote.
    let got = read(a);
    assert!(
        got.iter().all(|&w| w == 0xABAB_ABAB_ABAB_ABAB),
        "the write issued during the window was undone by a restore: {:x?}",
        &got[..4]
    );
    assert_ne!(got, expect);
    // SAFETY: frees the wrapper's allocation.
    unsafe { intercept::mem_free(a) };
}

#[test]
fn a_memset_on_another_thread_during_a_window_waits_for_it() {
    a_write_on_another_thread_during_a_window_waits_for_it(|a| {
        // SAFETY: a memset of the tracked buffer on the legacy stream.
        unsafe { intercept::memset_d32_async(a, 0xABAB_ABAB, N * 2, std::ptr::null_mut()) }
    });
}

#[test]
fn a_2d_memset_on_another_thread_during_a_window_waits_for_it() {
    a_write_on_another_thread_during_a_window_waits_for_it(|a| {
        // SAFETY: 8 rows of 64 words, pitch 512 bytes: the whole tracked buffer.
        unsafe { intercept::memset_2d32_async(a, 512, 0xABAB_ABAB, 128, 8, std::ptr::null_mut()) }
    });
}

#[test]
fn a_free_on_another_thread_during_a_window_is_recorded_first() {
    let Some((_g, s)) = setup() else { return };
    let a = alloc_filled(3);
    let b = alloc_filled(4);
    let mut expect = read(a);
    rmw_host(&mut expect, 9);
    let worker: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
    {
        let worker = Arc::clone(&worker);
        *s.tool.hook.lock() = Some(Box::new(move |pass| {
            if pass == 1 {
                *worker.lock() = Some(std::thread::spawn(move || {
                    // SAFETY: frees the other tracked buffer, which the kernel does not use.
                    let r = unsafe { intercept::mem_free(b) };
                    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
                }));
            }
        }));
    }
    let tracker = &state::state().tracker;
    let agent = replay_core::AgentId(0);
    assert!(tracker.lookup(agent, b).is_some());
    assert_eq!(launch_rmw(s.func, a, 9), sys::CUresult::CUDA_SUCCESS);
    worker
        .lock()
        .take()
        .expect("the worker ran")
        .join()
        .unwrap();
    *s.tool.hook.lock() = None;
    assert!(tracker.lookup(agent, b).is_none(), "the free was recorded");
    assert_eq!(read(a), expect, "memory equals one execution");
    // SAFETY: frees the wrapper's allocation.
    unsafe { intercept::mem_free(a) };
}
