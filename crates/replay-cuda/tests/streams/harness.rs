//! What every stream test shares: the three-pass tool, `setup`, buffers, launches, streams.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_cuda::intercept::{self, Internal};
use replay_cuda::sys;

use crate::support::{bind_device0, intercept_with, launch_block, load_fake, Fake};

/// The fake driver's export `name` (loaded globally by `support::load_fake`).
pub fn fake_export<T: Copy>(name: &[u8]) -> T {
    let this = libloading::os::unix::Library::this();
    // SAFETY: the fake driver exports `name` with type `T` (a function pointer).
    *unsafe { this.get::<T>(name) }.expect("a fake driver export")
}

/// How many events were recorded on `s` (the fake's counter).
pub fn fake_cuda_records_on(s: *mut c_void) -> i32 {
    let f: unsafe extern "C" fn(*mut c_void) -> i32 = fake_export(b"fake_cuda_records_on\0");
    // SAFETY: reads a counter of a live stream.
    unsafe { f(s) }
}

/// What the fake's cuCtxGetDevice answers on this thread.
pub fn fake_cuda_set_thread_device(d: i32) {
    let f: unsafe extern "C" fn(i32) = fake_export(b"fake_cuda_set_thread_device\0");
    // SAFETY: sets a thread-local of the fake.
    unsafe { f(d) }
}

type Hook = Box<dyn Fn(u32) + Send + Sync>;

/// Three passes; `hook` runs in PASS ENTER with the pass index; the last record is kept.
#[derive(Default)]
pub struct Tool {
    pub hook: Mutex<Option<Hook>>,
    last: Mutex<Option<replay_core::OutcomeRecord>>,
    pub windows: AtomicU32,
}

impl ReplayTool for Tool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                p.replay_pass_count = Some(Arc::new(|_, _| 3));
            }
            (Operation::Pass, Phase::Enter) => {
                if let Some(h) = &*self.hook.lock() {
                    h(p.current_pass);
                }
            }
            (Operation::Config, Phase::Exit) => {
                self.windows.fetch_add(1, Ordering::SeqCst);
                *self.last.lock() = p.outcome.cloned();
            }
            _ => {}
        }
    }
}

impl Tool {
    /// The last window's record as (executed passes, reason).
    pub fn last(&self) -> (u32, String) {
        let r = self.last.lock().clone().expect("a window ran");
        (r.executed_passes, r.reason.as_str().to_string())
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

const APP_PTX: &std::ffi::CStr =
    c".version 8.4\n.target sm_90\n.address_size 64\n.visible .entry kr_rmw()\n{\n\tret;\n}\n";

pub const N: usize = 512;

pub struct Setup {
    pub tool: Arc<Tool>,
    pub rmw: sys::CUfunction,
}

pub fn setup() -> Option<(parking_lot::MutexGuard<'static, ()>, Setup)> {
    let guard = SERIAL.lock();
    load_fake(Fake::Inject)?;
    static TOOL: std::sync::OnceLock<Arc<Tool>> = std::sync::OnceLock::new();
    let tool = Arc::clone(TOOL.get_or_init(|| {
        let tool = Arc::new(Tool::default());
        intercept_with(Arc::clone(&tool) as Arc<dyn ReplayTool>);
        tool
    }));
    *tool.hook.lock() = None;
    bind_device0();
    let rmw = function(c"kr_rmw").1;
    Some((guard, Setup { tool, rmw }))
}

/// A module of the application (loaded through the hooks) and its function `name`.
pub fn function(name: &std::ffi::CStr) -> (sys::CUmodule, sys::CUfunction) {
    let mut module: sys::CUmodule = std::ptr::null_mut();
    let mut func: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: the intercepted module load and function lookup with out pointers to live
    // locals.
    unsafe {
        assert_eq!(
            intercept::module_load_data(&mut module, APP_PTX.as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::module_get_function(&mut func, module, name.as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    (module, func)
}

pub fn alloc_filled(seed: u64) -> u64 {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the wrapper's contract is the driver's: an out pointer.
    let r = unsafe { intercept::mem_alloc(&mut p, N * 8) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let host: Vec<u64> = (0..N as u64).map(|i| i * 7 + seed).collect();
    // SAFETY: the fake driver's memory is host memory at the device address (unified).
    unsafe { std::ptr::copy_nonoverlapping(host.as_ptr(), p as *mut u64, N) };
    p
}

pub fn read(p: u64) -> Vec<u64> {
    // SAFETY: `N` words of memory the fake made (host memory at the device address).
    unsafe { std::slice::from_raw_parts(p as *const u64, N) }.to_vec()
}

pub fn free(p: u64) {
    // SAFETY: frees the wrapper's allocation.
    let r = unsafe { intercept::mem_free(p) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
}

pub fn rmw_host(v: &mut [u64], k: u64) {
    for (i, x) in v.iter_mut().enumerate() {
        *x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(k ^ i as u64);
    }
}

pub fn launch_rmw(func: sys::CUfunction, mut p: u64, mut k: u64) -> sys::CUresult {
    let mut n = N as u64;
    let mut args: [*mut c_void; 3] = [
        (&mut p as *mut u64).cast(),
        (&mut n as *mut u64).cast(),
        (&mut k as *mut u64).cast(),
    ];
    // SAFETY: kr_rmw's three 8-byte parameters, live arguments.
    unsafe { launch_block(func, 64, &mut args) }
}

/// A stream the interception never saw created (made by the driver directly).
pub fn raw_stream() -> sys::CUstream {
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the fake driver's stream creation with an out pointer to a live local.
    unsafe {
        let _inside = Internal::enter();
        assert_eq!(sys::cuStreamCreate(&mut s, 1), sys::CUresult::CUDA_SUCCESS);
    }
    s
}

pub fn records_on(s: sys::CUstream) -> i32 {
    fake_cuda_records_on(s.cast())
}

pub fn destroy(s: sys::CUstream) {
    // SAFETY: the intercepted destroy of a live stream.
    let r = unsafe { intercept::stream_destroy(s) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
}

/// A window over `kr_rmw` on the legacy stream that replays with three passes, its memory
/// equal to one execution.
pub fn replay_one(s: &Setup, seed: u64) {
    let a = alloc_filled(seed);
    let mut once = read(a);
    rmw_host(&mut once, seed);
    assert_eq!(launch_rmw(s.rmw, a, seed), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(s.tool.last(), (3, "none".into()), "replayed");
    assert_eq!(read(a), once, "memory equals one execution");
    free(a);
}

/// Waits (bounded) for `flag`.
pub fn wait_for(flag: &AtomicBool, budget: Duration) -> bool {
    let end = Instant::now() + budget;
    while Instant::now() < end {
        if flag.load(Ordering::SeqCst) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    flag.load(Ordering::SeqCst)
}

/// Runs a replayed window over `kr_rmw(a)` during whose pass 1 `issue` runs on another thread;
/// returns whether `issue` had returned before the window ended, and joins it.
pub fn during_a_window(s: &Setup, a: u64, issue: impl FnOnce() + Send + 'static) -> bool {
    let done = Arc::new(AtomicBool::new(false));
    let early = Arc::new(AtomicBool::new(false));
    let worker: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
    let issue = Arc::new(Mutex::new(Some(issue)));
    {
        let (done, early, worker) = (Arc::clone(&done), Arc::clone(&early), Arc::clone(&worker));
        *s.tool.hook.lock() = Some(Box::new(move |pass| {
            if pass == 1 {
                let Some(f) = issue.lock().take() else { return };
                let d = Arc::clone(&done);
                *worker.lock() = Some(std::thread::spawn(move || {
                    f();
                    d.store(true, Ordering::SeqCst);
                }));
                // Ungated, it lands now, inside the window; gated, it waits for the window.
                early.store(
                    wait_for(&done, Duration::from_millis(300)),
                    Ordering::SeqCst,
                );
            }
        }));
    }
    assert_eq!(launch_rmw(s.rmw, a, 5), sys::CUresult::CUDA_SUCCESS);
    *s.tool.hook.lock() = None;
    worker
        .lock()
        .take()
        .expect("the worker ran")
        .join()
        .unwrap();
    assert!(done.load(Ordering::SeqCst));
    early.load(Ordering::SeqCst)
}
