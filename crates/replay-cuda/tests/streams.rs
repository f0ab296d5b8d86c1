//! What an unmodified program does beside its kernel launches, under the interception, over
//! the fake driver (`tests/fake_driver/fake_inject.c` as `libcuda.so.1`):
//!
//! - streams: a stream that only ever carried a copy, memset, graph launch or stream-ordered
//!   allocation, or that the program created through `cuStreamCreate*`, is covered by the
//!   window's agent drain; a stream destroyed on another thread during a window waits for it;
//!   a drain that timed out on a stream is not waited for again while that stream is stuck;
//! - stream capture beside a window: a capture another thread began through the wrappers
//!   leaves a pre-capture fence, so a window on another stream replays, its drain waiting for
//!   the capturing stream's pre-capture work (and recording nothing there), and the capture
//!   stays valid; a capture begun past the wrappers still declines the window; ending one
//!   capture through the wrappers leaves another thread's global capture valid;
//! - peer and UVA copies issued from another device's context into this device's memory wait
//!   for this device's window;
//! - host-resident memory: a host write into pinned memory during a window does not truncate
//!   an unrelated kernel; `cuMemHostRegister`'s I/O-memory and read-only flags are honoured;
//! - shared memory: `cuIpcOpenMemHandle` mappings are IPC memory (never captured); a kernel of
//!   a module that links NVSHMEM is a communication kernel whatever its name;
//! - each loaded module has its own code object, so an unload forgets only its own memos;
//! - a `fork()`ed child does not block on a lock another thread of the parent held.
//!
//! Skipped where no C compiler is found, or where a real driver is present.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_core::{AgentId, MemoryClass};
use replay_cuda::intercept::{self, Internal};
use replay_cuda::state;
use replay_cuda::sys;

mod support;
use support::{bind_device0, intercept_with, launch_block, load_fake, Fake};

/// The fake driver's export `name` (loaded globally by `support::load_fake`).
fn fake_export<T: Copy>(name: &[u8]) -> T {
    let this = libloading::os::unix::Library::this();
    // SAFETY: the fake driver exports `name` with type `T` (a function pointer).
    *unsafe { this.get::<T>(name) }.expect("a fake driver export")
}

/// How many events were recorded on `s` (the fake's counter).
fn fake_cuda_records_on(s: *mut c_void) -> i32 {
    let f: unsafe extern "C" fn(*mut c_void) -> i32 = fake_export(b"fake_cuda_records_on\0");
    // SAFETY: reads a counter of a live stream.
    unsafe { f(s) }
}

/// What the fake's cuCtxGetDevice answers on this thread.
fn fake_cuda_set_thread_device(d: i32) {
    let f: unsafe extern "C" fn(i32) = fake_export(b"fake_cuda_set_thread_device\0");
    // SAFETY: sets a thread-local of the fake.
    unsafe { f(d) }
}

type Hook = Box<dyn Fn(u32) + Send + Sync>;

/// Three passes; `hook` runs in PASS ENTER with the pass index; the last record is kept.
#[derive(Default)]
struct Tool {
    hook: Mutex<Option<Hook>>,
    last: Mutex<Option<replay_core::OutcomeRecord>>,
    windows: AtomicU32,
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
    fn last(&self) -> (u32, String) {
        let r = self.last.lock().clone().expect("a window ran");
        (r.executed_passes, r.reason.as_str().to_string())
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

const APP_PTX: &std::ffi::CStr =
    c".version 8.4\n.target sm_90\n.address_size 64\n.visible .entry kr_rmw()\n{\n\tret;\n}\n";

const N: usize = 512;

struct Setup {
    tool: Arc<Tool>,
    rmw: sys::CUfunction,
}

fn setup() -> Option<(parking_lot::MutexGuard<'static, ()>, Setup)> {
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
fn function(name: &std::ffi::CStr) -> (sys::CUmodule, sys::CUfunction) {
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

fn alloc_filled(seed: u64) -> u64 {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the wrapper's contract is the driver's: an out pointer.
    let r = unsafe { intercept::mem_alloc(&mut p, N * 8) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let host: Vec<u64> = (0..N as u64).map(|i| i * 7 + seed).collect();
    // SAFETY: the fake driver's memory is host memory at the device address (unified).
    unsafe { std::ptr::copy_nonoverlapping(host.as_ptr(), p as *mut u64, N) };
    p
}

fn read(p: u64) -> Vec<u64> {
    // SAFETY: `N` words of memory the fake made (host memory at the device address).
    unsafe { std::slice::from_raw_parts(p as *const u64, N) }.to_vec()
}

fn free(p: u64) {
    // SAFETY: frees the wrapper's allocation.
    let r = unsafe { intercept::mem_free(p) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
}

fn rmw_host(v: &mut [u64], k: u64) {
    for (i, x) in v.iter_mut().enumerate() {
        *x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(k ^ i as u64);
    }
}

fn launch_rmw(func: sys::CUfunction, mut p: u64, mut k: u64) -> sys::CUresult {
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
fn raw_stream() -> sys::CUstream {
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the fake driver's stream creation with an out pointer to a live local.
    unsafe {
        let _inside = Internal::enter();
        assert_eq!(sys::cuStreamCreate(&mut s, 1), sys::CUresult::CUDA_SUCCESS);
    }
    s
}

fn records_on(s: sys::CUstream) -> i32 {
    fake_cuda_records_on(s.cast())
}

fn destroy(s: sys::CUstream) {
    // SAFETY: the intercepted destroy of a live stream.
    let r = unsafe { intercept::stream_destroy(s) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
}

/// A window over `kr_rmw` on the legacy stream that replays with three passes, its memory
/// equal to one execution.
fn replay_one(s: &Setup, seed: u64) {
    let a = alloc_filled(seed);
    let mut once = read(a);
    rmw_host(&mut once, seed);
    assert_eq!(launch_rmw(s.rmw, a, seed), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(s.tool.last(), (3, "none".into()), "replayed");
    assert_eq!(read(a), once, "memory equals one execution");
    free(a);
}

#[test]
fn a_stream_that_only_carried_copies_memsets_graphs_or_pool_allocations_is_drained() {
    let Some((_g, s)) = setup() else { return };
    type Issue = fn(sys::CUstream, u64);
    let issues: [(&str, Issue); 4] = [
        ("copy", |st, a| {
            let host = [5u64; 8];
            // SAFETY: 64 bytes of a live tracked buffer from a live host array.
            let r = unsafe { intercept::memcpy_htod_async(a, host.as_ptr().cast(), 64, st) };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
        ("memset", |st, a| {
            // SAFETY: 16 words of a live tracked buffer.
            let r = unsafe { intercept::memset_d32_async(a, 7, 16, st) };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
        ("pool allocation", |st, _| {
            let mut p: sys::CUdeviceptr = 0;
            // SAFETY: a stream-ordered allocation and its free on a live stream.
            unsafe {
                assert_eq!(
                    intercept::mem_alloc_async(&mut p, 256, st),
                    sys::CUresult::CUDA_SUCCESS
                );
                assert_eq!(
                    intercept::mem_free_async(p, st),
                    sys::CUresult::CUDA_SUCCESS
                );
            }
        }),
        ("graph launch", |st, _| {
            let (mut g, mut exec): (sys::CUgraph, sys::CUgraphExec) =
                (std::ptr::null_mut(), std::ptr::null_mut());
            // SAFETY: an empty graph captured on the fake's own stream, launched on `st`
            // through the intercepted entry.
            unsafe {
                let c = {
                    let _inside = Internal::enter();
                    let c = raw_stream();
                    assert_eq!(
                        sys::cuStreamBeginCapture_v2(
                            c,
                            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED
                        ),
                        sys::CUresult::CUDA_SUCCESS
                    );
                    assert_eq!(
                        sys::cuStreamEndCapture(c, &mut g),
                        sys::CUresult::CUDA_SUCCESS
                    );
                    assert_eq!(
                        sys::cuGraphInstantiateWithFlags(&mut exec, g, 0),
                        sys::CUresult::CUDA_SUCCESS
                    );
                    c
                };
                assert_eq!(
                    intercept::graph_launch(exec, st),
                    sys::CUresult::CUDA_SUCCESS
                );
                destroy(c);
            }
        }),
    ];
    for (what, issue) in issues {
        let st = raw_stream();
        let a = alloc_filled(2);
        issue(st, a);
        let before = records_on(st);
        replay_one(&s, 3);
        assert!(
            records_on(st) > before,
            "the agent drain did not cover a stream that only carried a {what}"
        );
        destroy(st);
        free(a);
    }
}

#[test]
fn a_stream_created_through_the_wrappers_is_drained_before_it_carries_anything() {
    let Some((_g, s)) = setup() else { return };
    let (mut a, mut b): (sys::CUstream, sys::CUstream) =
        (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the intercepted stream creations with out pointers to live locals.
    unsafe {
        assert_eq!(
            intercept::stream_create(&mut a, 1),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::stream_create_with_priority(&mut b, 1, -1),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let before = (records_on(a), records_on(b));
    replay_one(&s, 4);
    assert!(records_on(a) > before.0, "cuStreamCreate's stream");
    assert!(
        records_on(b) > before.1,
        "cuStreamCreateWithPriority's stream"
    );
    destroy(a);
    destroy(b);
}

/// Waits (bounded) for `flag`.
fn wait_for(flag: &AtomicBool, budget: Duration) -> bool {
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
fn during_a_window(s: &Setup, a: u64, issue: impl FnOnce() + Send + 'static) -> bool {
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

#[test]
fn a_stream_destroyed_on_another_thread_during_a_window_waits_for_it() {
    let Some((_g, s)) = setup() else { return };
    let mut st: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the intercepted stream creation with an out pointer to a live local.
    let r = unsafe { intercept::stream_create(&mut st, 1) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let a = alloc_filled(6);
    let st_addr = st as usize;
    let early = during_a_window(&s, a, move || destroy(st_addr as sys::CUstream));
    assert!(!early, "the destroy did not wait for the window");
    assert_eq!(s.tool.last().0, 3);
    free(a);
}

#[test]
fn a_copy_from_another_devices_context_into_this_devices_memory_waits_for_its_window() {
    let Some((_g, s)) = setup() else { return };
    type Copy = fn(u64);
    let copies: [(&str, Copy); 2] = [
        ("UVA copy", |a| {
            let host = vec![0xABu8; N * 8];
            // SAFETY: the whole live tracked buffer from a live host vector.
            let r = unsafe {
                intercept::memcpy_htod_async(a, host.as_ptr().cast(), N * 8, std::ptr::null_mut())
            };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
        ("peer copy", |a| {
            let host = vec![0xABu8; N * 8];
            let ctx = std::ptr::null_mut();
            // SAFETY: as above, the source a live host vector at its unified address.
            let r = unsafe {
                intercept::memcpy_peer_async(
                    a,
                    ctx,
                    host.as_ptr() as u64,
                    ctx,
                    N * 8,
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
    ];
    let described: [(&str, Copy); 2] = [
        ("2D copy", |a| {
            let host = vec![0xABu8; N * 8];
            let c = sys::CUDA_MEMCPY2D {
                srcXInBytes: 0,
                srcY: 0,
                srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
                srcHost: host.as_ptr().cast(),
                srcDevice: 0,
                srcArray: std::ptr::null_mut(),
                srcPitch: 512,
                dstXInBytes: 0,
                dstY: 0,
                dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: a,
                dstArray: std::ptr::null_mut(),
                dstPitch: 512,
                WidthInBytes: 512,
                Height: N * 8 / 512,
            };
            // SAFETY: the descriptor names the live buffer and host vector.
            let r = unsafe {
                intercept::memcpy_2d_async(
                    (&c as *const sys::CUDA_MEMCPY2D).cast(),
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
        ("3D peer copy", |a| {
            let host = vec![0xABu8; N * 8];
            let c = sys::CUDA_MEMCPY3D_PEER {
                srcXInBytes: 0,
                srcY: 0,
                srcZ: 0,
                srcLOD: 0,
                srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
                srcHost: std::ptr::null(),
                srcDevice: host.as_ptr() as u64,
                srcArray: std::ptr::null_mut(),
                srcContext: std::ptr::null_mut(),
                srcPitch: 512,
                srcHeight: 4,
                dstXInBytes: 0,
                dstY: 0,
                dstZ: 0,
                dstLOD: 0,
                dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: a,
                dstArray: std::ptr::null_mut(),
                dstContext: std::ptr::null_mut(),
                dstPitch: 512,
                dstHeight: 4,
                WidthInBytes: 512,
                Height: 4,
                Depth: N * 8 / 2048,
            };
            // SAFETY: as above.
            let r = unsafe {
                intercept::memcpy_3d_peer_async(
                    (&c as *const sys::CUDA_MEMCPY3D_PEER).cast(),
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        }),
    ];
    for (what, copy) in copies.into_iter().chain(described) {
        let a = alloc_filled(7);
        let early = during_a_window(&s, a, move || {
            // This thread's current context is device 1's: the copy's own device is not the
            // one whose window is open.
            fake_cuda_set_thread_device(1);
            copy(a);
        });
        assert!(
            !early,
            "the {what} did not wait for the destination's window"
        );
        assert!(
            read(a).iter().all(|&w| w == 0xABAB_ABAB_ABAB_ABAB),
            "the {what} was undone by a restore"
        );
        free(a);
    }
}

#[test]
fn a_drain_that_timed_out_on_a_stream_is_not_waited_for_again_while_it_is_stuck() {
    let Some((_g, s)) = setup() else { return };
    let svc = state::service().expect("the interception's service");
    let before_policy = svc.policy();
    let mut p = (*before_policy).clone();
    p.drain_timeout = Duration::from_millis(300);
    svc.set_policy(p).unwrap();
    let mut st: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the intercepted stream creation with an out pointer to a live local.
    let r = unsafe { intercept::stream_create(&mut st, 1) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    // The stream is busy for 2.5 s (the fake's kr_spin), launched by the library's own path
    // so no window runs over it.
    let spin = function(c"kr_spin").1;
    let mut flag = 0u64;
    let (mut ns, mut fp) = (2_500_000_000u64, &mut flag as *mut u64 as u64);
    let mut args: [*mut c_void; 2] = [(&mut ns as *mut u64).cast(), (&mut fp as *mut u64).cast()];
    let busy_until = Instant::now() + Duration::from_millis(2500);
    // SAFETY: kr_spin's two 8-byte parameters on a live stream.
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
    let a = alloc_filled(8);
    let mut once = read(a);
    let t = Instant::now();
    assert_eq!(launch_rmw(s.rmw, a, 5), sys::CUresult::CUDA_SUCCESS);
    let first = t.elapsed();
    rmw_host(&mut once, 5);
    assert_eq!(s.tool.last(), (1, "agent_drain_stuck".into()));
    assert_eq!(read(a), once);
    assert!(
        first >= Duration::from_millis(300),
        "waited its bound: {first:?}"
    );
    let t = Instant::now();
    assert_eq!(launch_rmw(s.rmw, a, 6), sys::CUresult::CUDA_SUCCESS);
    let second = t.elapsed();
    rmw_host(&mut once, 6);
    assert_eq!(s.tool.last(), (1, "agent_drain_stuck".into()));
    assert_eq!(read(a), once);
    assert!(
        second < Duration::from_millis(250),
        "the stuck stream cost the next window its bound again: {second:?}"
    );
    // Once the stream caught up, windows replay again.
    std::thread::sleep(
        busy_until.saturating_duration_since(Instant::now()) + Duration::from_millis(50),
    );
    svc.set_policy((*before_policy).clone()).unwrap();
    replay_one(&s, 9);
    destroy(st);
    free(a);
}

/// `N` words of host memory registered through the wrapper with `flags`, filled.
fn registered_host(flags: u32) -> Vec<u64> {
    let mut v: Vec<u64> = (0..N as u64).map(|i| i * 11 + 3).collect();
    // SAFETY: the intercepted registration of a live vector's buffer.
    let r = unsafe { intercept::mem_host_register(v.as_mut_ptr().cast(), N * 8, flags) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    v
}

fn unregister(v: &mut [u64]) {
    // SAFETY: unregisters a buffer registered by `registered_host`.
    let r = unsafe { intercept::mem_host_unregister(v.as_mut_ptr().cast()) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
}

#[test]
fn a_host_write_into_pinned_memory_during_a_window_does_not_truncate_an_unrelated_kernel() {
    let Some((_g, s)) = setup() else { return };
    let mut pinned = registered_host(0);
    let p = pinned.as_mut_ptr() as usize;
    let a = alloc_filled(10);
    let mut once = read(a);
    rmw_host(&mut once, 5);
    // A pin-memory thread fills the buffer while the kernel's window is open.
    let early = during_a_window(&s, a, move || {
        // SAFETY: the registered buffer, alive until unregistered below.
        unsafe { std::ptr::write_volatile((p as *mut u64).add(3), 0xFEED) };
    });
    assert!(early, "a host write is no driver call: nothing gates it");
    assert_eq!(s.tool.last(), (3, "none".into()), "replayed, not truncated");
    assert_eq!(read(a), once, "memory equals one execution");
    assert_eq!(pinned[3], 0xFEED, "the host's write stays");
    unregister(&mut pinned);
    free(a);
}

#[test]
fn host_memory_registered_as_io_memory_or_read_only_is_never_captured() {
    let Some((_g, s)) = setup() else { return };
    let tracker = &state::state().tracker;
    const IOMEMORY: u32 = 0x04;
    const READ_ONLY: u32 = 0x08;
    for (flags, class) in [
        (IOMEMORY, MemoryClass::PINNED_HOST | MemoryClass::PEER),
        (READ_ONLY, MemoryClass::PINNED_HOST | MemoryClass::READ_ONLY),
        (0, MemoryClass::PINNED_HOST),
    ] {
        let mut v = registered_host(flags);
        let (_, r) = tracker.lookup_any(v.as_ptr() as u64).expect("recorded");
        assert_eq!(r.class, class, "flags {flags:#x}");
        unregister(&mut v);
    }
    // A kernel given I/O memory runs once: nothing can be captured or restored there.
    let mut io = registered_host(IOMEMORY);
    let mut once = io.clone();
    rmw_host(&mut once, 5);
    assert_eq!(
        launch_rmw(s.rmw, io.as_mut_ptr() as u64, 5),
        sys::CUresult::CUDA_SUCCESS
    );
    assert_eq!(s.tool.last(), (1, "untracked_memory".into()));
    assert_eq!(io, once, "one execution");
    unregister(&mut io);
}

#[test]
fn memory_opened_from_an_ipc_handle_is_ipc_memory_and_never_captured() {
    let Some((_g, s)) = setup() else { return };
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the intercepted open with an out pointer to a live local; the handle's bytes
    // are the fake's to ignore.
    let r = unsafe {
        intercept::ipc_open_mem_handle(&mut p, sys::CUipcMemHandle { reserved: [0; 64] }, 1)
    };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let tracker = &state::state().tracker;
    let (_, region) = tracker.lookup_any(p).expect("recorded");
    assert_eq!(region.class, MemoryClass::IPC_IMPORTED);
    assert_eq!(region.size, 4096);
    // SAFETY: 4 KiB the fake made, host memory at the device address.
    let mut once: Vec<u64> = unsafe { std::slice::from_raw_parts(p as *const u64, N) }.to_vec();
    rmw_host(&mut once, 5);
    assert_eq!(launch_rmw(s.rmw, p, 5), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(s.tool.last(), (1, "untracked_memory".into()));
    assert_eq!(read(p), once, "one execution");
    // A peer writing it during an unrelated kernel's window is not the kernel's write.
    let a = alloc_filled(12);
    let early = during_a_window(&s, a, move || {
        // SAFETY: the mapping, open until closed below.
        unsafe { std::ptr::write_volatile(p as *mut u64, 0xBEEF) };
    });
    assert!(early);
    assert_eq!(s.tool.last(), (3, "none".into()));
    // SAFETY: closes the mapping opened above.
    let r = unsafe { intercept::ipc_close_mem_handle(p) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert!(tracker.lookup_any(p).is_none(), "forgotten at its close");
    free(a);
}

/// A fat binary for sm_90 whose cubin links NVSHMEM's device state (a constant named
/// `nvshmemi_device_state_d`), beside PTX.
fn nvshmem_fatbin() -> Vec<u8> {
    use replay_cuda::module::elf::testing::{info, Builder};
    use replay_cuda::module::image::testing::fatbin;
    let mut b = Builder::new();
    let c = b.section(".nv.constant3", 8, vec![0; 64], 64);
    b.symbol("nvshmemi_device_state_d", info(1, 1), c, 0, 64);
    fatbin(&[(1, 90, b"// ptx\0"), (2, 90, &b.build())])
}

#[test]
fn a_kernel_of_a_module_that_links_nvshmem_runs_once_as_a_communication_kernel() {
    let Some((_g, s)) = setup() else { return };
    let image = nvshmem_fatbin();
    let (_m, f) = support::load_app_function(&image, c"kr_rmw");
    let svc = state::service().unwrap();
    let runs = svc.communication_runs();
    let windows = s.tool.windows.load(Ordering::SeqCst);
    let a = alloc_filled(13);
    let mut once = read(a);
    rmw_host(&mut once, 5);
    assert_eq!(launch_rmw(f, a, 5), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(a), once, "run once");
    assert_eq!(
        svc.communication_runs(),
        runs + 1,
        "counted as communication"
    );
    assert_eq!(s.tool.windows.load(Ordering::SeqCst), windows, "no window");
    // The same kernel name in a module without NVSHMEM is an ordinary candidate.
    replay_one(&s, 14);
    free(a);
}

#[test]
fn each_loaded_module_has_its_own_code_object_and_an_unload_forgets_only_its_own() {
    let Some((_g, s)) = setup() else { return };
    let (ma, fa) = function(c"kr_rmw");
    let (mb, fb) = function(c"kr_rmw");
    let a = alloc_filled(15);
    assert_eq!(launch_rmw(fa, a, 1), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(launch_rmw(fb, a, 1), sys::CUresult::CUDA_SUCCESS);
    let tracker = &state::state().tracker;
    let unload = |m: sys::CUmodule| -> u64 {
        let (now, _) = tracker.unloads_since(0);
        // SAFETY: unloads a module loaded above.
        let r = unsafe { intercept::module_unload(m) };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        let (_, list) = tracker.unloads_since(now);
        let list = list.expect("kept");
        assert_eq!(list.len(), 1, "one agent, one code object: {list:?}");
        assert_eq!(list[0].0, AgentId(0));
        list[0].1
    };
    let ca = unload(ma);
    let cb = unload(mb);
    assert_ne!(ca, 0, "a module the hooks saw is not code object 0");
    assert_ne!(cb, 0);
    assert_ne!(ca, cb, "two modules, two code objects");
    let _ = (fa, fb, &s);
    free(a);
}

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

/// Another thread captures stream A in global mode, begun through the wrappers after work was
/// queued on A that completes late (the fake's kr_spin keeps A busy for 600 ms, and the
/// "kernel" writes its result into `a` at 300 ms). A window over `kr_rmw(a)` on stream B
/// meanwhile replays: its agent drain waits on A's pre-capture fence (no event is recorded on
/// A), so the snapshot is taken after A's work, and memory ends equal to one execution after
/// it; the capture stays valid. Once the capture ended the fence is dropped and drains record
/// on A again.
/// Turns waiting on pre-capture fences back off (the default) when a test that turned it on
/// ends, however it ends.
struct Off;

impl Drop for Off {
    fn drop(&mut self) {
        replay_cuda::set_drain_beside_capture(false);
    }
}

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
