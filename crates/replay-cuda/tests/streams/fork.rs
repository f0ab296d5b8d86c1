//! A `fork()`ed child does not block on a lock another thread of the parent held.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use replay_core::AgentId;
use replay_cuda::{intercept, state, sys};

use crate::harness::{alloc_filled, free, setup, wait_for};

#[test]
fn a_forked_child_does_not_block_on_a_lock_another_parent_thread_holds() {
    extern "C" {
        fn fork() -> i32;
        fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
        fn kill(pid: i32, sig: i32) -> i32;
        fn _exit(code: i32) -> !;
    }
    let Some((_g, _s)) = setup() else { return };
    let a = alloc_filled(16);
    // Resolve the free entry in the parent (as any program that freed before forking).
    free(alloc_filled(17));
    let tracker = Arc::clone(&state::state().tracker);
    let (held, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let holder = {
        let (held, release) = (Arc::clone(&held), Arc::clone(&release));
        std::thread::spawn(move || {
            // Holds the tracker's hold lock, as an unload waiting for a restore does.
            tracker.release_with(AgentId(0), &[], || {
                held.store(true, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        })
    };
    assert!(wait_for(&held, Duration::from_secs(5)));
    // SAFETY: the child only calls the free wrapper and _exit.
    let pid = unsafe { fork() };
    if pid == 0 {
        // SAFETY: a free of a live allocation, then the child ends without unwinding.
        unsafe {
            let r = intercept::mem_free(a);
            _exit(if r == sys::CUresult::CUDA_SUCCESS {
                0
            } else {
                2
            });
        }
    }
    assert!(pid > 0, "fork failed");
    let end = Instant::now() + Duration::from_secs(5);
    let mut status = 0;
    let mut exited = false;
    while Instant::now() < end {
        // SAFETY: waits for our own child without blocking (WNOHANG).
        if unsafe { waitpid(pid, &mut status, 1) } == pid {
            exited = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if !exited {
        // SAFETY: kills and reaps our own child.
        unsafe {
            kill(pid, 9);
            waitpid(pid, &mut status, 0);
        }
    }
    release.store(true, Ordering::SeqCst);
    holder.join().unwrap();
    assert!(
        exited,
        "the child blocked on a lock the parent's other thread held"
    );
    assert_eq!(status, 0, "the child's free succeeded");
    free(a);
}
