//! What the fake-driver test binaries share: compiling one of the fake drivers in
//! `tests/fake_driver/` as `libcuda.so.1` and loading it for the process, so the crate's
//! driver loader (which opens the driver by its soname) finds it.

use std::sync::OnceLock;

mod fake_sources;
pub mod vmem;

/// Which fake driver.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)] // each test binary uses one of them
pub enum Fake {
    /// `fake_cuda*.c`: the driver API the library calls itself (library mode).
    Library,
    /// `fake_inject.c` over them: also the entries an application calls, for the interception.
    Inject,
}

/// Compiles and loads `which` once per test binary; `None` (the caller skips) without a C
/// compiler, or where a real driver is present.
pub fn load_fake(which: Fake) -> Option<()> {
    static LOADED: OnceLock<Option<()>> = OnceLock::new();
    *LOADED.get_or_init(|| load_once(which))
}

fn load_once(which: Fake) -> Option<()> {
    // SAFETY: only tries dlopen on the driver's names and closes what it opened.
    if unsafe { replay_cuda::sys::is_culib_present() } {
        eprintln!("skipped: a real CUDA driver is present (cuda_bench covers this machine)");
        return None;
    }
    let (name, inject, extra): (&str, bool, &[&str]) = match which {
        Fake::Library => ("fake_cuda", false, &["-lpthread"]),
        Fake::Inject => (
            "fake_inject",
            true,
            &["-Wl,-Bsymbolic", "-lpthread", "-ldl"],
        ),
    };
    let dir = std::env::temp_dir().join(format!("replay-cuda-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let lib = dir.join("libcuda.so.1");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = std::process::Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg("-Wl,-soname,libcuda.so.1")
        .args(fake_sources::fake_driver_sources(inject))
        .args(extra)
        .status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("skipped: could not compile the fake driver with {cc}");
        return None;
    }
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: our own fake driver, just compiled; it has no initialisers beyond libc's.
    let l = unsafe { Library::open(Some(&lib), RTLD_NOW | RTLD_GLOBAL) }.ok()?;
    // Kept for the process: the backend's open by name resolves to it through its soname, so
    // the file itself is no longer needed.
    std::mem::forget(l);
    let _ = std::fs::remove_dir_all(&dir);
    Some(())
}

/// A started service on the wall clock with `tool` (CONFIG and PASS) becomes the
/// interception's, and the interception is turned on (call once per test binary).
#[allow(dead_code)] // the interception's test binaries
pub fn intercept_with(tool: std::sync::Arc<dyn replay_core::contract::ReplayTool>) {
    use replay_core::{ContextId, NoContextControl, Policy, ReplayService, Subscription};
    let service = std::sync::Arc::new(ReplayService::new(
        Policy::default(),
        std::sync::Arc::new(replay_core::SystemClock::new()),
        std::sync::Arc::new(NoContextControl),
    ));
    service
        .configure(
            ContextId(1),
            Subscription::CONFIG | Subscription::PASS,
            tool,
        )
        .expect("a fresh service");
    service.start().expect("configured");
    replay_cuda::state::set_service(service);
    replay_cuda::state::set_enabled(true);
}

/// The interception's backend of device 0 over the fake driver, its primary context made
/// current on this thread (each test runs on a thread of its own, as an application thread
/// whose runtime made it current).
#[allow(dead_code)] // the interception's test binaries
pub fn bind_device0() -> std::sync::Arc<replay_cuda::CudaBackend> {
    let backend = replay_cuda::state::state()
        .backend(0)
        .expect("backend over the fake driver");
    backend.device().bind().expect("the primary context");
    backend
}

/// Loads `image` through the intercepted `cuModuleLoadFatBinary` (a fat binary, by its magic)
/// or `cuModuleLoadData`, and fetches `name` through the intercepted `cuModuleGetFunction`.
#[allow(dead_code)] // the interception's test binaries
pub fn load_app_function(
    image: &[u8],
    name: &std::ffi::CStr,
) -> (replay_cuda::sys::CUmodule, replay_cuda::sys::CUfunction) {
    use replay_cuda::{intercept, sys};
    let mut m: sys::CUmodule = std::ptr::null_mut();
    let mut f: sys::CUfunction = std::ptr::null_mut();
    let fat = image.starts_with(&0xBA55_ED50u32.to_le_bytes());
    // SAFETY: a complete image in a live buffer; out pointers to live locals.
    unsafe {
        let r = if fat {
            intercept::module_load_fat_binary(&mut m, image.as_ptr().cast())
        } else {
            intercept::module_load_data(&mut m, image.as_ptr().cast())
        };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        assert_eq!(
            intercept::module_get_function(&mut f, m, name.as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    (m, f)
}

/// `f` on one block of `threads` threads on the legacy stream, through the intercepted
/// `cuLaunchKernel`.
///
/// # Safety
/// `args` holds one live pointer per parameter of `f`, each to a value of its size.
#[allow(dead_code)] // the interception's test binaries
pub unsafe fn launch_block(
    f: replay_cuda::sys::CUfunction,
    threads: u32,
    args: &mut [*mut std::ffi::c_void],
) -> replay_cuda::sys::CUresult {
    // SAFETY: the caller's contract; no extra, the legacy stream.
    unsafe {
        replay_cuda::intercept::launch_kernel(
            f,
            1,
            1,
            1,
            threads,
            1,
            1,
            0,
            std::ptr::null_mut(),
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
}

/// `kr_globals(7)` through the intercepted `cuLaunchKernel`: adds one to `kr_counter` and
/// rewrites `kr_table` (and `kr_hidden`) each execution.
#[allow(dead_code)] // the interception's test binaries
pub fn launch_globals(f: replay_cuda::sys::CUfunction) -> replay_cuda::sys::CUresult {
    let mut k: u64 = 7;
    // SAFETY: kr_globals' one 8-byte parameter, a live argument.
    unsafe { launch_block(f, 1, &mut [(&mut k as *mut u64).cast()]) }
}

/// The fake's default device memory, restored after a test that limits it.
#[allow(dead_code)] // the tests that limit the device's memory
pub const FAKE_MEM: u64 = 8 << 30;

/// Sets the fake device's memory (`fake_cuda_set_mem`): an allocation past it fails with out
/// of memory.
#[allow(dead_code)] // the tests that limit the device's memory
pub fn fake_set_mem(bytes: u64) {
    let this = libloading::os::unix::Library::this();
    // SAFETY: the fake driver is loaded globally and exports this setter.
    let f = unsafe { this.get::<unsafe extern "C" fn(u64)>(b"fake_cuda_set_mem\0") }
        .expect("a fake driver export");
    // SAFETY: sets a number under the fake's lock.
    unsafe { f(bytes) }
}

/// The fake device's allocated bytes (`fake_cuda_mem_used`).
#[allow(dead_code)] // the tests that limit the device's memory
pub fn fake_mem_used() -> u64 {
    let this = libloading::os::unix::Library::this();
    // SAFETY: the fake driver is loaded globally and exports this reader.
    let f = unsafe { this.get::<unsafe extern "C" fn() -> u64>(b"fake_cuda_mem_used\0") }
        .expect("a fake driver export");
    // SAFETY: reads a number under the fake's lock.
    unsafe { f() }
}
