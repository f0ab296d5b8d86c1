//! The backend end to end over a fake CUDA driver, on a machine without a GPU.
//!
//! `tests/fake_driver/fake_cuda*.c` is compiled with the system C compiler into a
//! `libcuda.so.1` and loaded before the backend looks for the driver; cudarc's open by name
//! then resolves to it through its soname. The fake keeps device memory in host memory, runs
//! every operation at once, emulates the kernels by name and can keep a stream busy, so the
//! real code paths of this crate run: driver loading, contexts, streams, events and bounded
//! waits, tracked allocation of every class, module globals from a cubin's symbol table, the
//! window's drains, passes, restores and digests (host digests where NVRTC is absent, as in
//! CI). What it cannot show (timing, real kernels, real copies) is the GPU run's job
//! (`cuda_bench`). Skipped where no C compiler is found, or where a real driver is present.
//!
//! One test binary, its tests by subject in `tests/library_mode/` over the shared `harness`.
//! The exit test stays at the root: it re-runs itself in a child process by its exact name,
//! which a module would prefix.

mod support;

#[path = "library_mode/harness.rs"]
mod harness;

#[path = "library_mode/faults.rs"]
mod faults;
#[path = "library_mode/memory.rs"]
mod memory;
#[path = "library_mode/replay.rs"]
mod replay;
#[path = "library_mode/restores.rs"]
mod restores;

use std::sync::Arc;
use std::time::Duration;

use replay_core::contract::{Operation, Phase};
use replay_core::{RestoreMode, Scope};
use replay_mock::double::at;

use crate::harness::{image, launch_on, rmw_args, set_sticky, setup};

/// Issue 24 item 6: a process that exits while another thread is inside a window exits with
/// its own status, not SIGABRT. The exit's handler plays the driver's teardown (every call
/// then answers `CUDA_ERROR_DEINITIALIZED`, as once `_dl_fini` ran) and lets the window's
/// thread reach its restore before the process ends.
#[test]
fn exiting_while_a_window_runs_exits_with_the_processs_own_status() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const CHILD: &str = "KREPLAY_EXIT_CHILD";
    static IN_WINDOW: AtomicBool = AtomicBool::new(false);
    static TORN_DOWN: AtomicBool = AtomicBool::new(false);
    static WINDOW_DONE: AtomicBool = AtomicBool::new(false);
    fn bounded_until(flag: &AtomicBool) {
        let start = std::time::Instant::now();
        while !flag.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    extern "C" fn teardown() {
        set_sticky(4);
        TORN_DOWN.store(true, Ordering::SeqCst);
        bounded_until(&WINDOW_DONE);
    }
    extern "C" {
        fn atexit(f: extern "C" fn()) -> i32;
    }
    if std::env::var_os(CHILD).is_some() {
        let Some((_serial, cx, _)) = setup() else {
            std::process::exit(7);
        };
        let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
        let rmw = module.function("kr_rmw").unwrap();
        let a = cx.backend.allocator().alloc_device(64 << 10).unwrap();
        cx.policy(Scope::All, RestoreMode::Full);
        cx.tool.add_hook(at(Operation::Pass, Phase::Exit, |pass| {
            if pass == 0 {
                IN_WINDOW.store(true, Ordering::SeqCst);
                bounded_until(&TORN_DOWN);
            }
        }));
        let (ptr, len) = (a.ptr(), a.len());
        std::mem::forget(a);
        let cx = Arc::new(cx);
        let window = {
            let cx = Arc::clone(&cx);
            std::thread::spawn(move || {
                let legacy = Arc::clone(cx.backend.legacy_queue());
                let _ = launch_on(&cx, &rmw, &legacy, &rmw_args(ptr, len, 2), 3);
                WINDOW_DONE.store(true, Ordering::SeqCst);
            })
        };
        bounded_until(&IN_WINDOW);
        // SAFETY: registers a plain function to run at exit.
        assert_eq!(unsafe { atexit(teardown) }, 0);
        std::mem::forget(window);
        std::process::exit(7);
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "exiting_while_a_window_runs_exits_with_the_processs_own_status",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("FATAL"), "{stderr}");
}
