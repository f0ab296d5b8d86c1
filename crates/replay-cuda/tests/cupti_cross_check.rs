//! The CUPTI cross-check of the launch wrappers against a fake CUPTI that takes one subscriber
//! (`tests/fake_cupti/fake_cupti.c`, compiled as `libcupti.so.13` and loaded first, so the
//! library finds it as a CUPTI the process already loaded): it subscribes only when asked
//! for, and when the program subscribes it steps aside, so the program's profiler gets the
//! one subscription. Skipped without a C compiler.

use replay_cuda::intercept::cupti;

type Subscribe = unsafe extern "C" fn(*mut *mut std::ffi::c_void, usize, usize) -> i32;

fn load_fake_cupti() -> Option<libloading::os::unix::Library> {
    let dir = std::env::temp_dir().join(format!("replay-cuda-fake-cupti-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let lib = dir.join("libcupti.so.13");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = std::process::Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg("-Wl,-soname,libcupti.so.13")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fake_cupti/fake_cupti.c"
        ))
        .arg("-lpthread")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: could not compile the fake CUPTI with {cc}");
        return None;
    }
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: our own fake, just compiled; no initialisers.
    let l = unsafe { Library::open(Some(&lib), RTLD_NOW | RTLD_GLOBAL) }.ok();
    let _ = std::fs::remove_dir_all(&dir);
    l
}

#[test]
fn the_cross_check_subscribes_only_when_asked_for_and_steps_aside_for_the_program() {
    let Some(fake) = load_fake_cupti() else {
        return;
    };
    // SAFETY: the fake's exports with their signatures.
    let (program_subscribe, subscribers) = unsafe {
        (
            *fake.get::<Subscribe>(b"cuptiSubscribe\0").unwrap(),
            *fake
                .get::<unsafe extern "C" fn() -> i32>(b"fake_cupti_subscribers\0")
                .unwrap(),
        )
    };
    // SAFETY: reads a number under the fake's lock.
    let count = || unsafe { subscribers() };

    // This test binary is its own process: the variable is set before anything reads it.
    std::env::set_var(cupti::CUPTI_ENV, "1");
    cupti::subscribe();
    let r = cupti::report();
    assert_eq!(r.status, "subscribed", "{r:?}");
    assert!(r.detail.contains("libcupti.so.13"), "{r:?}");
    assert_eq!(count(), 1);

    // The program's profiler subscribing now would be refused: the library steps aside first.
    let mut h: *mut std::ffi::c_void = std::ptr::null_mut();
    assert!(cupti::step_aside(), "the live subscription is given up");
    assert_eq!(count(), 0);
    // SAFETY: an out pointer to a live local; the fake ignores the callback.
    let r = unsafe { program_subscribe(&mut h, 0, 0) };
    assert_eq!(r, 0, "the program gets CUPTI");
    let r = cupti::report();
    assert_eq!(r.status, "stepped_aside", "{r:?}");
    assert!(!cupti::step_aside(), "nothing left to give up");
    // The library's own cuptiSubscribe forwards to the CUPTI the process loaded.
    assert_eq!(
        cupti::loaded_entry("cuptiSubscribe"),
        Some(program_subscribe as usize)
    );
    cupti::unsubscribe();
    assert_eq!(count(), 1, "the program's subscription is left alone");
}
