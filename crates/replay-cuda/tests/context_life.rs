//! Context life under interception (SPEC §9.2), over the fake driver
//! (`tests/fake_driver/fake_inject.c`):
//!
//! - a primary-context reset (`cuDevicePrimaryCtxReset_v2`, what `cudaDeviceReset` calls)
//!   forgets the device's allocations, its backend and its modules before the driver's call,
//!   and the next launch replays on a fresh backend;
//! - an allocation made while another context is current is not recorded as the primary
//!   context's memory, a launch there runs once untouched, and its `cuCtxDestroy` is counted;
//! - a launch in another context on another thread while a window is open waits for the
//!   window (the write gate), so no restore undoes what it wrote;
//! - a `cuMemAllocAsync` into a capturing stream (an allocation node of the graph) is not
//!   recorded as live memory; one into an ordinary stream is.
//!
//! Skipped where no C compiler is found, or where a real driver is present.

use std::ffi::c_void;
use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_core::{AgentId, Outcome, OutcomeRecord, Reason};
use replay_cuda::intercept::{self, Internal};
use replay_cuda::state;
use replay_cuda::sys;

mod support;
use support::{bind_device0, intercept_with, launch_block, load_app_function, load_fake, Fake};

type Hook = Box<dyn Fn(u32) + Send + Sync>;

/// Three passes; the last outcome kept; `hook` runs in PASS ENTER with the pass index.
#[derive(Default)]
struct Tool {
    last: Mutex<Option<OutcomeRecord>>,
    hook: Mutex<Option<Hook>>,
}

impl ReplayTool for Tool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                p.replay_pass_count = Some(Arc::new(|_, _| 3));
            }
            (Operation::Config, Phase::Exit) => {
                *self.last.lock() = p.outcome.cloned();
            }
            (Operation::Pass, Phase::Enter) => {
                if let Some(h) = &*self.hook.lock() {
                    h(p.current_pass);
                }
            }
            _ => {}
        }
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

fn setup() -> Option<(parking_lot::MutexGuard<'static, ()>, Arc<Tool>)> {
    let guard = SERIAL.lock();
    load_fake(Fake::Inject)?;
    static TOOL: std::sync::OnceLock<Arc<Tool>> = std::sync::OnceLock::new();
    let tool = Arc::clone(TOOL.get_or_init(|| {
        let tool = Arc::new(Tool::default());
        intercept_with(Arc::clone(&tool) as Arc<dyn ReplayTool>);
        tool
    }));
    bind_device0();
    *tool.last.lock() = None;
    *tool.hook.lock() = None;
    Some((guard, tool))
}

const APP_PTX: &[u8] =
    b".version 8.4\n.target sm_90\n.address_size 64\n.visible .entry kr_rmw()\n{\n\tret;\n}\n\0";

const N: usize = 512;
const AGENT: AgentId = AgentId(0);

fn count(name: &str) -> u64 {
    state::state().counters_json()[name].as_u64().unwrap_or(0)
}

fn rmw_once(v: &[u64], k: u64) -> Vec<u64> {
    v.iter()
        .enumerate()
        .map(|(i, x)| {
            x.wrapping_mul(6364136223846793005)
                .wrapping_add(k ^ i as u64)
        })
        .collect()
}

fn fill(p: u64, seed: u64) -> Vec<u64> {
    let v: Vec<u64> = (0..N as u64).map(|i| i * 17 + seed).collect();
    // SAFETY: `p` is N words of the fake's memory (host memory at the device address).
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p as *mut u64, N) };
    v
}

fn words(p: u64) -> Vec<u64> {
    // SAFETY: as in `fill`.
    unsafe { std::slice::from_raw_parts(p as *const u64, N) }.to_vec()
}

fn alloc() -> u64 {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: an out pointer to a live local.
    let r = unsafe { intercept::mem_alloc(&mut p, N * 8) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    p
}

/// `f(p, N, k)` (kr_rmw, kr_fill) through the intercepted `cuLaunchKernel`.
fn launch_rmw(f: sys::CUfunction, mut p: u64, mut k: u64) -> sys::CUresult {
    let mut n = N as u64;
    let mut args: [*mut c_void; 3] = [
        (&mut p as *mut u64).cast(),
        (&mut n as *mut u64).cast(),
        (&mut k as *mut u64).cast(),
    ];
    // SAFETY: kr_rmw's three 8-byte parameters, live arguments.
    unsafe { launch_block(f, 64, &mut args) }
}

fn take(tool: &Tool) -> Option<OutcomeRecord> {
    tool.last.lock().take()
}

#[test]
fn a_primary_context_reset_forgets_its_allocations_backend_and_modules() {
    let Some((_g, tool)) = setup() else { return };
    let (_m, f) = load_app_function(APP_PTX, c"kr_rmw");
    let buf = alloc();
    let before = fill(buf, 1);
    assert_eq!(launch_rmw(f, buf, 3), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(take(&tool).map(|r| r.outcome), Some(Outcome::Replayed));
    assert_eq!(words(buf), rmw_once(&before, 3));
    assert!(state::state().tracker.lookup(AGENT, buf).is_some());
    let old = state::state().backend_of(AGENT).expect("open");
    let resets = count("primary_resets");

    // SAFETY: the wrapper's contract is the driver's: a device ordinal.
    let r = unsafe { intercept::primary_ctx_reset(0) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(count("primary_resets"), resets + 1);
    assert!(
        state::state().tracker.lookup(AGENT, buf).is_none(),
        "the reset destroyed it"
    );
    assert!(state::state().backend_of(AGENT).is_none(), "closed");

    // The module died with the context: a launch of its function declines (image unknown).
    let fresh = bind_device0();
    assert!(!Arc::ptr_eq(&old, &fresh), "a new backend");
    let buf = alloc();
    let before = fill(buf, 2);
    assert_eq!(launch_rmw(f, buf, 4), sys::CUresult::CUDA_SUCCESS);
    let rec = take(&tool).expect("an outcome");
    assert_eq!(
        (rec.outcome, rec.reason),
        (Outcome::Declined, Reason::UntrackedMemory),
        "{rec:?}"
    );
    assert_eq!(words(buf), rmw_once(&before, 4));
    // A module loaded after the reset replays on the new backend.
    let (_m, f) = load_app_function(APP_PTX, c"kr_rmw");
    let before = fill(buf, 3);
    assert_eq!(launch_rmw(f, buf, 5), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(take(&tool).map(|r| r.outcome), Some(Outcome::Replayed));
    assert_eq!(words(buf), rmw_once(&before, 5));
}

type CtxCreate = unsafe extern "C" fn(*mut sys::CUcontext, u32, i32) -> sys::CUresult;

#[test]
fn another_contexts_allocations_are_not_the_primarys_and_its_launches_run_once() {
    let Some((_g, tool)) = setup() else { return };
    let (_m, f) = load_app_function(APP_PTX, c"kr_rmw");
    let p = intercept::real_symbol(c"cuCtxCreate_v2");
    assert!(!p.is_null());
    // SAFETY: the fake's cuCtxCreate_v2 has this signature.
    let create = unsafe { std::mem::transmute::<*mut c_void, CtxCreate>(p) };
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: an out pointer to a live local; the fake makes the new context current.
    let r = unsafe { create(&mut ctx, 0, 0) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let (allocs, other) = (count("other_context_allocs"), count("other_context"));
    let buf = alloc();
    assert!(
        state::state().tracker.lookup_any(buf).is_none(),
        "not the primary context's memory"
    );
    assert_eq!(count("other_context_allocs"), allocs + 1);
    let before = fill(buf, 6);
    assert_eq!(launch_rmw(f, buf, 7), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(count("other_context"), other + 1);
    assert!(take(&tool).is_none(), "not a candidate");
    assert_eq!(words(buf), rmw_once(&before, 7));
    let destroyed = count("contexts_destroyed");
    // SAFETY: the context made above.
    let r = unsafe { intercept::ctx_destroy(ctx) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(count("contexts_destroyed"), destroyed + 1);
    assert!(
        state::state().backend_of(AGENT).is_some(),
        "the primary's lives on"
    );

    // Before any backend is open (here: closed by a reset), the driver says which context is
    // primary.
    // SAFETY: the wrapper's contract is the driver's: a device ordinal.
    let r = unsafe { intercept::primary_ctx_reset(0) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert!(state::state().backend_of(AGENT).is_none());
    let ctx = other_context();
    let allocs = count("other_context_allocs");
    let buf = alloc();
    assert!(state::state().tracker.lookup_any(buf).is_none());
    assert_eq!(count("other_context_allocs"), allocs + 1);
    // SAFETY: the context made above.
    let r = unsafe { intercept::ctx_destroy(ctx) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    // In the primary context an allocation is recorded, backend or not.
    let mut primary: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: an out pointer to a live local.
    let r = unsafe { sys::cuDevicePrimaryCtxRetain(&mut primary, 0) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    // SAFETY: the primary context just retained.
    let r = unsafe { sys::cuCtxSetCurrent(primary) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let buf = alloc();
    assert!(state::state().backend_of(AGENT).is_none());
    assert!(state::state().tracker.lookup_any(buf).is_some());
    bind_device0();
}

#[test]
fn an_async_allocation_into_a_capturing_stream_is_not_live_memory() {
    let Some((_g, _tool)) = setup() else { return };
    let mut s: sys::CUstream = std::ptr::null_mut();
    {
        let _inside = Internal::enter();
        // SAFETY: an out pointer to a live local; a non-blocking stream.
        let r = unsafe { sys::cuStreamCreate(&mut s, 1) };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        // SAFETY: the stream made above.
        let r = unsafe {
            sys::cuStreamBeginCapture_v2(
                s,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    }
    let captured = count("alloc_async_captured");
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: an out pointer to a live local and the capturing stream.
    let r = unsafe { intercept::mem_alloc_async(&mut p, N * 8, s) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert!(
        state::state().tracker.lookup_any(p).is_none(),
        "a graph node"
    );
    assert_eq!(count("alloc_async_captured"), captured + 1);
    {
        let _inside = Internal::enter();
        let mut g: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: the capture begun above.
        let r = unsafe { sys::cuStreamEndCapture(s, &mut g) };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    }
    // Outside capture the same call is live memory.
    let mut q: sys::CUdeviceptr = 0;
    // SAFETY: as above, the stream no longer capturing.
    let r = unsafe { intercept::mem_alloc_async(&mut q, N * 8, s) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert!(state::state().tracker.lookup_any(q).is_some());
    // SAFETY: frees of the allocations made above.
    unsafe {
        intercept::mem_free_async(q, s);
        let _inside = Internal::enter();
        sys::cuMemFreeAsync(p, s);
        sys::cuStreamDestroy_v2(s);
    }
}

fn other_context() -> sys::CUcontext {
    let p = intercept::real_symbol(c"cuCtxCreate_v2");
    assert!(!p.is_null());
    // SAFETY: the fake's cuCtxCreate_v2 has this signature.
    let create = unsafe { std::mem::transmute::<*mut c_void, CtxCreate>(p) };
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: an out pointer to a live local; the fake makes the new context current.
    let r = unsafe { create(&mut ctx, 0, 0) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    ctx
}

#[test]
fn a_launch_in_another_context_during_a_window_waits_for_it() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let Some((_g, tool)) = setup() else { return };
    let (_m, rmw) = load_app_function(APP_PTX, c"kr_rmw");
    let (_m2, fill_fn) = load_app_function(APP_PTX, c"kr_fill");
    // What kr_fill(seed 9) leaves, run straight on the driver into a scratch buffer.
    let scratch = alloc();
    {
        let _inside = Internal::enter();
        let (mut p, mut n, mut k) = (scratch, N as u64, 9u64);
        let mut args: [*mut c_void; 3] = [
            (&mut p as *mut u64).cast(),
            (&mut n as *mut u64).cast(),
            (&mut k as *mut u64).cast(),
        ];
        // SAFETY: kr_fill's three 8-byte parameters, live arguments.
        let r = unsafe {
            sys::cuLaunchKernel(
                fill_fn,
                1,
                1,
                1,
                64,
                1,
                1,
                0,
                std::ptr::null_mut(),
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    }
    let filled = words(scratch);
    let a = alloc();
    fill(a, 4);
    let done = Arc::new(AtomicBool::new(false));
    let worker: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
    {
        let (done, worker) = (Arc::clone(&done), Arc::clone(&worker));
        let f = fill_fn as usize;
        *tool.hook.lock() = Some(Box::new(move |pass| {
            if pass != 1 {
                return;
            }
            let d = Arc::clone(&done);
            *worker.lock() = Some(std::thread::spawn(move || {
                let ctx = other_context();
                let r = launch_rmw(f as sys::CUfunction, a, 9);
                assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
                d.store(true, Ordering::SeqCst);
                // SAFETY: the context made above, current on this thread.
                let _ = unsafe { intercept::ctx_destroy(ctx) };
            }));
            // Ungated, the launch lands now, inside the window, and the restore before the
            // next pass undoes it; gated, it waits for the window to end.
            let end = Instant::now() + Duration::from_millis(500);
            while !done.load(Ordering::SeqCst) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(1));
            }
        }));
    }
    assert_eq!(launch_rmw(rmw, a, 5), sys::CUresult::CUDA_SUCCESS);
    let rec = take(&tool).expect("an outcome");
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec:?}");
    worker
        .lock()
        .take()
        .expect("the worker ran")
        .join()
        .unwrap();
    *tool.hook.lock() = None;
    assert!(
        words(a) == filled,
        "the other context's launch ran inside the window and a restore undid it"
    );
}
