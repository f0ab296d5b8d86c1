//! Failures on the device inside a window: a failure after a pass's launch is reported as
//! one (the pass ran), and a fault in a later pass or in the capture's gather copy ends the
//! window with the driver's own error for the application's next call, never an abort.

use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::{Outcome, Reason, RestoreMode, Scope};

use crate::harness::{
    device_code_image, fake_fn, image, kernel_copies, launch_on, pattern, rmw_args, set_sticky,
    setup, WAIT,
};

#[test]
fn a_failure_after_the_launch_is_reported_as_after_submit() {
    use std::sync::OnceLock;
    /// Collects the backend's warnings (the window logs why a pass could not be submitted).
    struct Lines(Mutex<Vec<String>>);
    impl log::Log for Lines {
        fn enabled(&self, m: &log::Metadata<'_>) -> bool {
            m.level() <= log::Level::Warn
        }
        fn log(&self, r: &log::Record<'_>) {
            self.0.lock().push(r.args().to_string());
        }
        fn flush(&self) {}
    }
    static LINES: OnceLock<&'static Lines> = OnceLock::new();
    let lines = *LINES.get_or_init(|| {
        let l: &'static Lines = Box::leak(Box::new(Lines(Mutex::new(Vec::new()))));
        let _ = log::set_logger(l);
        log::set_max_level(log::LevelFilter::Warn);
        l
    });
    let Some((_serial, cx, _)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let a = cx.backend.allocator().alloc_device(64 << 10).unwrap();
    cx.policy(Scope::All, RestoreMode::Full);
    let input = pattern(a.len() as usize, 8);
    cx.backend
        .memory()
        .write_device(a.ptr(), &input, WAIT)
        .unwrap();
    lines.0.lock().clear();
    // The event recorded after the pass's launch fails: the pass ran (or will).
    let arm: unsafe extern "C" fn(*const std::ffi::c_char) =
        fake_fn(b"fake_cuda_fail_record_after\0");
    // SAFETY: a NUL-terminated kernel name; the fake copies it.
    unsafe { arm(c"kr_rmw".as_ptr()) };
    let legacy = Arc::clone(cx.backend.legacy_queue());
    let rec = launch_on(&cx, &rmw, &legacy, &rmw_args(a.ptr(), a.len(), 2), 4)
        .unwrap()
        .record
        .unwrap();
    // What the window does next is the core's (it never submits again); the backend's part is
    // to say that the launch was made.
    assert!(rec.executed_passes >= 1, "{rec}");
    let logged = lines.0.lock().clone();
    assert!(
        logged
            .iter()
            .any(|l| l.contains("pass 0") && l.contains("AfterSubmit")),
        "the failure after the launch is AfterSubmit: {logged:#?}"
    );
}

/// Arms the fake: the launch of `kernel` after `after` more launches of it faults on the
/// device (the context's sticky error becomes 700 once the host observes the device).
fn fault_launch(kernel: &std::ffi::CStr, after: i32) {
    let f: unsafe extern "C" fn(*const std::ffi::c_char, i32) =
        fake_fn(b"fake_cuda_fault_launch\0");
    // SAFETY: a NUL-terminated kernel name (the fake copies it) and an integer.
    unsafe { f(kernel.as_ptr(), after) }
}

/// The application's own synchronisation of the legacy stream, through the driver.
fn app_sync() -> i32 {
    let f: unsafe extern "C" fn(*mut std::ffi::c_void) -> i32 = fake_fn(b"cuStreamSynchronize\0");
    // SAFETY: the legacy stream (NULL) of the current context.
    unsafe { f(std::ptr::null_mut()) }
}

/// Issue 24 item 6: a device fault in pass 1, with the restore ordered before it still
/// pending, no longer aborts the process with "restore failed": the window truncates
/// `device_error`, skips the restore, and the application gets the driver's sticky error
/// (700) from its own next call, as it would without the library.
#[test]
fn a_fault_in_a_later_pass_returns_the_drivers_error_instead_of_aborting() {
    let Some((_serial, cx, _)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let a = cx.backend.allocator().alloc_device(64 << 10).unwrap();
    let mem = cx.backend.memory();
    mem.set_ordered_restores(true);
    cx.policy(Scope::All, RestoreMode::Full);
    mem.write_device(a.ptr(), &pattern(a.len() as usize, 3), WAIT)
        .unwrap();
    // The second launch (pass 1) faults.
    fault_launch(c"kr_rmw", 1);
    let legacy = Arc::clone(cx.backend.legacy_queue());
    let rec = launch_on(&cx, &rmw, &legacy, &rmw_args(a.ptr(), a.len(), 2), 3)
        .expect("the launch ran")
        .record
        .unwrap();
    let sync = app_sync();
    set_sticky(0);
    assert_eq!(
        (rec.outcome, rec.reason, rec.executed_passes),
        (Outcome::Truncated, Reason::DeviceError, 2),
        "{rec}"
    );
    assert_eq!(
        sync, 700,
        "the application's next call gets the sticky error"
    );
}

/// A gather copy that faults on the device during the capture (the context's sticky error
/// becomes 700): the window declines before any pass, with the capture's failure or the
/// device's as its reason, nothing is replayed, and the application's own next call gets the
/// driver's error, as it would without the library.
#[test]
fn a_gather_copy_that_faults_declines_before_any_pass() {
    let Some((_serial, cx, _)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let mem = cx.backend.memory();
    let _ = mem
        .load_device_code(cx.backend.modules(), &device_code_image())
        .unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let a = cx.backend.allocator().alloc_device(64 << 10).unwrap();
    cx.policy(Scope::Arguments, RestoreMode::Dirty);
    let (launches, _) = kernel_copies();
    // The capture's gather copy (the buffer and the module variables' run) faults.
    fault_launch(c"kr_copy", 0);
    let legacy = Arc::clone(cx.backend.legacy_queue());
    cx.inputs.seen.lock().clear();
    let report = launch_on(&cx, &rmw, &legacy, &rmw_args(a.ptr(), a.len(), 3), 3);
    let sync = app_sync();
    set_sticky(0);
    assert!(kernel_copies().0 > launches, "the gather copy was launched");
    assert!(
        cx.inputs.seen.lock().is_empty(),
        "declined before any pass: no PASS ENTER"
    );
    // The launch then ran once, ordinarily, and got the device's error back.
    let e = report.expect_err("the ordinary run meets the sticky error");
    assert_eq!(
        (e.kind, e.operation),
        (replay_core::BackendErrorKind::DeviceLost, "submit ordinary"),
        "{e}"
    );
    assert_eq!(
        sync, 700,
        "the application's next call gets the sticky error"
    );
}
