//! The simulator's worker threads through the C ABI: `kreplay_sim_destroy` joins a simulator's
//! threads, and `kreplay_shutdown` joins those of every simulator left (the threads registry's
//! hook), counted by name in `/proc/self/task`. Also: the one service is the process-wide
//! `Arc` on the library's wall clock, which the simulators share.
//!
//! One test: the library is process-wide and shutdown is final.
//!
//! Needs the simulated GPU through the C ABI (feature `sim`, on by default).

#![cfg(feature = "sim")]

use std::sync::Arc;

use kernel_replay::sim::*;
use kernel_replay::sys::*;
use replay_core::ReplayService;

/// Threads of this process whose name is a simulator worker's (`sim-a<agent>-q<queue>`,
/// `sim-a<agent>-copy`).
fn sim_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return usize::MAX;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("sim-a"))
        .count()
}

/// Waits (up to 5 s) until exactly `n` simulator threads are listed: a new thread takes its name
/// only once it runs, and a joined thread's task entry can linger a moment after the join
/// returns (the kernel clears the thread id before it reaps the task).
#[track_caller]
fn expect_threads(n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while sim_threads() != n && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(sim_threads(), n);
}

#[track_caller]
fn ok(s: kreplay_status_t) {
    assert_eq!(s, KREPLAY_STATUS_OK, "{}", last_error());
}

fn last_error() -> String {
    // SAFETY: a NUL-terminated string valid until the next call on this thread.
    unsafe { std::ffi::CStr::from_ptr(kernel_replay::entry::kreplay_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn create(agents: u32) -> kreplay_sim_t {
    let mut sim = kreplay_sim_t::default();
    // SAFETY: a valid out-pointer.
    ok(unsafe { kreplay_sim_create(agents, &mut sim) });
    sim
}

#[test]
fn destroy_and_shutdown_join_the_simulator_threads() {
    if sim_threads() == usize::MAX {
        eprintln!("/proc/self/task is not readable; skipping");
        return;
    }
    assert_eq!(sim_threads(), 0);

    // The one service: the process-wide Arc, on the library's wall clock.
    let service = kernel_replay::service();
    assert!(ReplayService::global_exists());
    let global = ReplayService::global_with_clock(|| unreachable!("created by the library"));
    assert!(Arc::ptr_eq(&service, &global));
    assert!(!kernel_replay::clock().is_virtual());

    // Each agent has two queues and a copy engine, each a worker thread.
    let a = create(2);
    expect_threads(6);
    ok(kreplay_sim_destroy(a));
    // Destroy joins the simulator's threads.
    expect_threads(0);

    let b = create(1);
    let c = create(3);
    expect_threads(3 + 9);
    // Leave work behind on `c`: a dispatch nobody waits for.
    let mut kernel = kreplay_sim_kernel_t::default();
    let mut addr = 0u64;
    // SAFETY: valid out-pointers and a NUL-terminated name; `args` holds 16 bytes.
    unsafe {
        ok(kreplay_sim_alloc(
            c,
            2,
            8,
            KREPLAY_SIM_MEMORY_DEVICE_COARSE,
            &mut addr,
        ));
        ok(kreplay_sim_kernel_create(
            c,
            c"increment_u64".as_ptr(),
            &mut kernel,
        ));
        let args = [addr, 1u64];
        let mut d = kreplay_sim_dispatch_t::default();
        ok(kreplay_sim_dispatch(
            c,
            2,
            1,
            kernel,
            args.as_ptr().cast(),
            16,
            kreplay_dim3_t { x: 1, y: 1, z: 1 },
            &mut d,
        ));
    }

    ok(kernel_replay::entry::kreplay_shutdown());
    // Shutdown joins every simulator's threads.
    expect_threads(0);
    assert_eq!(kreplay_sim_destroy(b), KREPLAY_STATUS_SHUT_DOWN);
    let mut sim = kreplay_sim_t::default();
    // SAFETY: a valid out-pointer.
    let status = unsafe { kreplay_sim_create(1, &mut sim) };
    assert_eq!(status, KREPLAY_STATUS_SHUT_DOWN);
    assert_eq!(sim_threads(), 0);
}
