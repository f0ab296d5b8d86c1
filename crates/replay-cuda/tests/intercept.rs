//! The interception layer in process, over the fake driver (`tests/fake_driver/fake_inject.c`
//! compiled as `libcuda.so.1` and loaded before anything looks for the driver): the wrappers
//! of `replay_cuda::intercept` called as an application's calls would reach them.
//!
//! - a copy or memset (1D, 2D) issued on another thread while a window is open waits for the
//!   window (the write gate), so no restore undoes it;
//! - a free of captured memory on another thread during a window is recorded first and the
//!   window ends with memory equal to one execution;
//! - a launch of unknown layout that writes pinned host memory is replayed with that memory
//!   captured (not truncated after one pass) and ends equal to one execution;
//! - a kernel whose layout the driver does not describe takes the `.nv.info` table of the
//!   image the application loaded it from;
//! - a kernel of an application image (a fat binary) that writes its module globals is
//!   replayed with them restored, and they leave the registry when the module is unloaded;
//! - inside the library (`Internal`) every wrapper forwards to the driver, no window;
//! - virtual-memory mappings (`cuMemCreate` / `cuMemAddressReserve` / `cuMemMap` /
//!   `cuMemSetAccess`, PyTorch's expandable segments) reached through `dlsym`, as an
//!   application reaches them: a kernel writing one replays with memory equal to one
//!   execution; one unmapped on another thread during the window is never written after; a
//!   mapping of a handle imported from a shareable handle, or one whose access for the
//!   device is withdrawn (`cuMemSetAccess`), declines `untracked_memory`; a
//!   `cuMemAllocFromPoolAsync` allocation is captured until `cuMemFreeAsync` orders its free;
//! - the library's backing gives way to the program: an allocation or array creation that
//!   runs out of memory while backing is pooled is retried after its release, and backing
//!   unused past `pool_idle_release` is released by the next intercepted allocation.
//!
//! Skipped where no C compiler is found, or where a real driver is present.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_cuda::intercept::{self, Internal};
use replay_cuda::state;
use replay_cuda::sys;

mod support;
use support::{
    bind_device0, intercept_with, launch_block, launch_globals, load_app_function, load_fake, Fake,
};

type Hook = Box<dyn Fn(u32) + Send + Sync>;

/// Three passes; `hook` runs in PASS ENTER with the pass index.
#[derive(Default)]
struct Tool {
    hook: Mutex<Option<Hook>>,
    replayed: AtomicU32,
    last: Mutex<String>,
    last_record: Mutex<Option<replay_core::OutcomeRecord>>,
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
                *self.last.lock() = format!("{:?}", p.outcome);
                *self.last_record.lock() = p.outcome.cloned();
                if p.outcome.map(|o| o.executed_passes) == Some(3) {
                    self.replayed.fetch_add(1, Ordering::SeqCst);
                }
            }
            _ => {}
        }
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

/// The application's image of `kr_rmw` and friends, loaded through the intercepted
/// `cuModuleLoadData`: PTX without module globals (the fake driver compiles nothing), so its
/// kernels' globals are known to be none.
const APP_PTX: &std::ffi::CStr =
    c".version 8.4\n.target sm_90\n.address_size 64\n.visible .entry kr_rmw()\n{\n\tret;\n}\n";

struct Setup {
    tool: Arc<Tool>,
    func: sys::CUfunction,
}

/// The fake driver, a started service with the tool, interception on, the backend of
/// device 0 open (its primary context current) and `kr_rmw`.
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
    let mut module: sys::CUmodule = std::ptr::null_mut();
    let mut func: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: the fake driver's module and function calls with out pointers to live locals.
    unsafe {
        assert_eq!(
            intercept::module_load_data(&mut module, APP_PTX.as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetFunction(&mut func, module, c"kr_rmw".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    Some((guard, Setup { tool, func }))
}

const N: usize = 512;

/// An intercepted `cuMemAlloc_v2` of `N` words, filled with a pattern.
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
    // SAFETY: as in `alloc_filled`; the fake runs every operation at once.
    unsafe { std::slice::from_raw_parts(p as *const u64, N) }.to_vec()
}

fn rmw_host(v: &mut [u64], k: u64) {
    for (i, x) in v.iter_mut().enumerate() {
        *x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(k ^ i as u64);
    }
}

/// `kr_rmw(p, N, k)` through the intercepted `cuLaunchKernel`.
fn launch_rmw(func: sys::CUfunction, mut p: u64, mut k: u64) -> sys::CUresult {
    let mut n = N as u64;
    let mut args: [*mut std::ffi::c_void; 3] = [
        (&mut p as *mut u64).cast(),
        (&mut n as *mut u64).cast(),
        (&mut k as *mut u64).cast(),
    ];
    // SAFETY: kr_rmw's three 8-byte parameters, live arguments.
    unsafe { launch_block(func, 64, &mut args) }
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

#[test]
fn inside_the_library_every_wrapper_forwards_without_a_window() {
    let Some((_g, s)) = setup() else { return };
    let a = alloc_filled(5);
    let mut once = read(a);
    rmw_host(&mut once, 11);
    let seen = state::state().counters.launches_seen.load(Ordering::SeqCst);
    {
        let _inside = Internal::enter();
        assert_eq!(launch_rmw(s.func, a, 11), sys::CUresult::CUDA_SUCCESS);
    }
    assert_eq!(read(a), once, "one execution");
    assert_eq!(
        state::state().counters.launches_seen.load(Ordering::SeqCst),
        seen,
        "the library's own launch is not an application launch"
    );
    // SAFETY: frees the wrapper's allocation.
    unsafe { intercept::mem_free(a) };
}

#[test]
fn a_launch_of_unknown_layout_into_pinned_memory_is_replayed_with_it_captured() {
    let Some((_g, s)) = setup() else { return };
    let mut opaque: sys::CUfunction = std::ptr::null_mut();
    let mut module: sys::CUmodule = std::ptr::null_mut();
    let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: the fake driver's module calls and the intercepted pinned allocation, with out
    // pointers to live locals.
    unsafe {
        assert_eq!(
            intercept::module_load_data(&mut module, APP_PTX.as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetFunction(&mut opaque, module, c"opaque_kr_rmw".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::mem_host_alloc(&mut host, N * 8, 0),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let p = host as u64;
    let init: Vec<u64> = (0..N as u64).map(|i| i * 3 + 1).collect();
    // SAFETY: `N` words of pinned host memory, just allocated.
    unsafe { std::ptr::copy_nonoverlapping(init.as_ptr(), host.cast::<u64>(), N) };
    let mut once = init.clone();
    rmw_host(&mut once, 13);
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_rmw(opaque, p, 13), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(p), once, "memory equals one execution");
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "three passes, the pinned buffer captured: {}",
        s.tool.last.lock()
    );
    // SAFETY: frees the wrapper's allocation.
    unsafe { intercept::mem_free_host(host) };
}

use replay_cuda::module::elf::testing::{info, Builder};
use replay_cuda::module::image::testing::{fatbin, nv_info};

#[test]
fn a_kernel_the_driver_cannot_describe_takes_its_images_parameter_table() {
    let Some((_g, s)) = setup() else { return };
    let mut b = Builder::new();
    b.section(
        ".nv.info.opaque_kr_rmw",
        0x7000_0000,
        nv_info(&[(0, 8), (8, 8), (16, 8)]),
        0,
    );
    let (m, f) = load_app_function(&b.build(), c"opaque_kr_rmw");
    let a = alloc_filled(21);
    let mut once = read(a);
    rmw_host(&mut once, 4);
    let c = &state::state().counters;
    let (img, unknown) = (
        c.layout_image.load(Ordering::SeqCst),
        c.layout_unknown.load(Ordering::SeqCst),
    );
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_rmw(f, a, 4), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(a), once, "memory equals one execution");
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "{}",
        s.tool.last.lock()
    );
    assert_eq!(
        c.layout_image.load(Ordering::SeqCst),
        img + 1,
        "{}",
        state::state().counters_json()
    );
    assert_eq!(c.layout_unknown.load(Ordering::SeqCst), unknown);
    let unloads = state::state().tracker.unloads_since(0).0;
    // SAFETY: frees the wrapper's allocation; unloads the module.
    unsafe {
        intercept::mem_free(a);
        intercept::module_unload(m);
    }
    // The unload reached the memory engines: predictions of intercepted kernels (keyed by
    // function handle, which a later load may reuse) are forgotten.
    assert!(
        state::state().tracker.unloads_since(0).0 > unloads,
        "the module's unload is recorded for the agent"
    );
}

/// globals.cu's `.nv.global` as the fake driver lays it out, in a fat binary beside PTX.
fn globals_fatbin() -> Vec<u8> {
    let mut b = Builder::new();
    let g = b.section(".nv.global", 8, Vec::new(), 8328);
    b.symbol("kr_counter", info(1, 1), g, 0, 8);
    b.symbol("kr_hidden", info(0, 1), g, 8, 128);
    b.symbol("kr_table", info(1, 1), g, 136, 8192);
    fatbin(&[(1, 90, b"// ptx\0"), (2, 90, &b.build())])
}

/// The fake driver's `kr_counter` (host memory at its device address).
fn counter() -> u64 {
    let (mut p, mut n, mut m): (sys::CUdeviceptr, usize, sys::CUmodule) =
        (0, 0, std::ptr::null_mut());
    // SAFETY: the fake's module and global lookups with out pointers to live locals; its
    // globals are host memory at the device address.
    unsafe {
        let _inside = Internal::enter();
        assert_eq!(
            sys::cuModuleLoadData(&mut m, c"image".as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetGlobal_v2(&mut p, &mut n, m, c"kr_counter".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
        *(p as *const u64)
    }
}

fn registered(name: &str) -> bool {
    use replay_memory::ModuleVariables;
    let backend = state::state().backend(0).unwrap();
    let vars = backend
        .modules()
        .enumerate(replay_core::AgentId(0))
        .unwrap();
    vars.iter().any(|v| v.name == name)
}

#[test]
fn a_library_kernel_writing_its_globals_is_replayed_with_them_restored() {
    let Some((_g, s)) = setup() else { return };
    let fat = globals_fatbin();
    let (mut lib, mut k, mut f): (sys::CUlibrary, sys::CUkernel, sys::CUfunction) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    // SAFETY: a complete image in a live buffer; out pointers to live locals.
    unsafe {
        let n = std::ptr::null_mut();
        assert_eq!(
            intercept::library_load_data(
                &mut lib,
                fat.as_ptr().cast(),
                n,
                n.cast(),
                0,
                n,
                n.cast(),
                0
            ),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::library_get_kernel(&mut k, lib, c"kr_globals".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::kernel_get_function(&mut f, k),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    assert!(
        !registered("kr_counter"),
        "a library's globals wait for one of its kernels"
    );
    let start = counter();
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_globals(f), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "{}",
        s.tool.last.lock()
    );
    assert_eq!(
        counter(),
        start + 1,
        "the global was restored between passes: one execution"
    );
    assert!(registered("kr_table"));
    // SAFETY: unloads the library the test loaded.
    unsafe { intercept::library_unload(lib) };
    assert!(!registered("kr_counter"), "unloaded");
}

#[test]
fn a_kernel_writing_its_fat_binarys_globals_is_replayed_with_them_restored() {
    let Some((_g, s)) = setup() else { return };
    let (m, f) = load_app_function(&globals_fatbin(), c"kr_globals");
    let mut counter: sys::CUdeviceptr = 0;
    let mut bytes = 0usize;
    // SAFETY: the fake's global lookup with out pointers to live locals.
    unsafe {
        assert_eq!(
            sys::cuModuleGetGlobal_v2(&mut counter, &mut bytes, m, c"kr_counter".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    // SAFETY: the fake's globals are host memory at the device address.
    let count = || unsafe { *(counter as *const u64) };
    let start = count();
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_globals(f), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "{}",
        s.tool.last.lock()
    );
    assert_eq!(
        count(),
        start + 1,
        "the global was restored between passes: one execution"
    );
    let backend = state::state().backend(0).unwrap();
    use replay_memory::ModuleVariables;
    let vars = backend
        .modules()
        .enumerate(replay_core::AgentId(0))
        .unwrap();
    assert!(
        vars.iter().any(|v| v.name == "kr_table" && v.size == 8192),
        "{vars:?}"
    );
    assert!(
        vars.iter().any(|v| v.name == "kr_hidden"),
        "resolved through its section: {vars:?}"
    );
    // SAFETY: unloads the module the test loaded.
    unsafe { intercept::module_unload(m) };
    let vars = backend
        .modules()
        .enumerate(replay_core::AgentId(0))
        .unwrap();
    assert!(
        vars.iter().all(|v| v.name != "kr_counter"),
        "unloaded: {vars:?}"
    );
}

// ----- Virtual-memory mappings and stream-ordered pools (issue 14) -------------------------

/// The driver entry `name` as an application that looks it up with `dlsym` gets it: the
/// wrapper when the interception wraps it, else the driver's own.
fn app_entry<T: Copy>(name: &std::ffi::CStr) -> T {
    assert_eq!(
        std::mem::size_of::<T>(),
        std::mem::size_of::<*mut std::ffi::c_void>()
    );
    // SAFETY: dlsym on the driver's handle with a NUL-terminated name.
    let p = unsafe { intercept::dlsym_answer(intercept::driver_handle(), name.as_ptr()) };
    assert!(!p.is_null(), "the driver has {name:?}");
    // SAFETY: `T` is the entry's function-pointer type (the CUDA headers), pointer-sized.
    unsafe { std::mem::transmute_copy::<*mut std::ffi::c_void, T>(&p) }
}

type CreateFn =
    unsafe extern "C" fn(*mut u64, usize, *const sys::CUmemAllocationProp, u64) -> sys::CUresult;
type ImportFn = unsafe extern "C" fn(*mut u64, *mut std::ffi::c_void, u32) -> sys::CUresult;
type ReserveFn = unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> sys::CUresult;
type MapFn = unsafe extern "C" fn(u64, usize, usize, u64, u64) -> sys::CUresult;
type AccessFn =
    unsafe extern "C" fn(u64, usize, *const sys::CUmemAccessDesc, usize) -> sys::CUresult;
type RangeFn = unsafe extern "C" fn(u64, usize) -> sys::CUresult;
type ReleaseFn = unsafe extern "C" fn(u64) -> sys::CUresult;

const VM_BYTES: usize = 2 << 20;

fn device0() -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: 0,
    }
}

/// A physical handle of device 0: created (`cuMemCreate`), or imported from a shareable
/// handle (`cuMemImportFromShareableHandle`).
fn vm_handle(imported: bool) -> u64 {
    let mut h = 0u64;
    let r = if imported {
        let import: ImportFn = app_entry(c"cuMemImportFromShareableHandle");
        // SAFETY: an out pointer to a live local; the fake accepts any OS handle (a file
        // descriptor's worth, here 3).
        unsafe { import(&mut h, 3usize as *mut std::ffi::c_void, 1) }
    } else {
        let create: CreateFn = app_entry(c"cuMemCreate");
        let prop = sys::CUmemAllocationProp {
            type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes: sys::CUmemAllocationHandleType_enum(0),
            location: device0(),
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
                compressionType: 0,
                gpuDirectRDMACapable: 0,
                usage: 0,
                reserved: [0; 4],
            },
        };
        // SAFETY: a fully initialised property block and an out pointer to a live local.
        unsafe { create(&mut h, VM_BYTES, &prop, 0) }
    };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    h
}

/// What an expandable segment does: reserve, map `handle`, grant device 0 read-write; the
/// first `N` words filled with a pattern. Returns the address.
fn vm_map(handle: u64, seed: u64) -> u64 {
    let reserve: ReserveFn = app_entry(c"cuMemAddressReserve");
    let map: MapFn = app_entry(c"cuMemMap");
    let set_access: AccessFn = app_entry(c"cuMemSetAccess");
    let mut p = 0u64;
    let access = sys::CUmemAccessDesc {
        location: device0(),
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: the driver's calls on a range reserved here, the handle made by `vm_handle`.
    unsafe {
        assert_eq!(
            reserve(&mut p, VM_BYTES, 0, 0, 0),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(map(p, VM_BYTES, 0, handle, 0), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(
            set_access(p, VM_BYTES, &access, 1),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let host: Vec<u64> = (0..N as u64).map(|i| i * 5 + seed).collect();
    // SAFETY: the fake's mapped memory is host memory at the device address (unified).
    unsafe { std::ptr::copy_nonoverlapping(host.as_ptr(), p as *mut u64, N) };
    p
}

/// Unmaps (unless `unmapped`), frees the reservation and releases the handle.
fn vm_free(p: u64, handle: u64, unmapped: bool) {
    let unmap: RangeFn = app_entry(c"cuMemUnmap");
    let free: RangeFn = app_entry(c"cuMemAddressFree");
    let release: ReleaseFn = app_entry(c"cuMemRelease");
    // SAFETY: undoes `vm_map` and `vm_handle`, once.
    unsafe {
        if !unmapped {
            assert_eq!(unmap(p, VM_BYTES), sys::CUresult::CUDA_SUCCESS);
        }
        assert_eq!(free(p, VM_BYTES), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(release(handle), sys::CUresult::CUDA_SUCCESS);
    }
}

fn unmapped_copies() -> i32 {
    let this = libloading::os::unix::Library::this();
    // SAFETY: the fake driver is loaded globally and exports this counter reader.
    let f = unsafe { this.get::<unsafe extern "C" fn() -> i32>(b"fake_cuda_unmapped_copies\0") }
        .expect("a fake driver export");
    // SAFETY: no arguments; reads a counter under the fake's lock.
    unsafe { f() }
}

#[test]
fn a_kernel_writing_a_cu_mem_map_mapping_replays_equal_to_one_execution() {
    let Some((_g, s)) = setup() else { return };
    let h = vm_handle(false);
    let a = vm_map(h, 21);
    let mut once = read(a);
    rmw_host(&mut once, 17);
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_rmw(s.func, a, 17), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "three passes over the mapping: {}",
        s.tool.last.lock()
    );
    assert_eq!(read(a), once, "memory equals one execution");
    let tracker = &state::state().tracker;
    assert!(tracker.lookup(replay_core::AgentId(0), a).is_some());
    vm_free(a, h, false);
    assert!(
        tracker.lookup_any(a).is_none(),
        "the unmap ended the mapping in the tracker"
    );
}

#[test]
fn a_mapping_unmapped_on_another_thread_during_a_window_is_never_written_after() {
    let Some((_g, s)) = setup() else { return };
    let h = vm_handle(false);
    let a = vm_map(h, 23);
    let refused = unmapped_copies();
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
                let unmap: RangeFn = app_entry(c"cuMemUnmap");
                // SAFETY: unmaps the mapping the kernel writes, as another application
                // thread might.
                assert_eq!(unsafe { unmap(a, VM_BYTES) }, sys::CUresult::CUDA_SUCCESS);
                d.store(true, Ordering::SeqCst);
            }));
            assert!(
                wait_for(&done, Duration::from_secs(10)),
                "the unmap returned"
            );
        }));
    }
    assert_eq!(launch_rmw(s.func, a, 19), sys::CUresult::CUDA_SUCCESS);
    worker
        .lock()
        .take()
        .expect("the worker ran")
        .join()
        .unwrap();
    *s.tool.hook.lock() = None;
    let last = s.tool.last.lock().clone();
    assert_ne!(
        s.tool.last_record.lock().as_ref().map(|r| r.reason),
        Some(replay_core::Reason::UntrackedMemory),
        "the mapping was captured: {last}"
    );
    let record = s.tool.last_record.lock().clone().expect("an outcome");
    assert_eq!(
        record.pass_restored_bytes.first(),
        Some(&0),
        "nothing to restore before the first pass: {last}"
    );
    assert_eq!(
        record.pass_restored_bytes[1], VM_BYTES as u64,
        "the mapping was restored while it was mapped: {last}"
    );
    assert!(
        record.pass_restored_bytes[2..].iter().all(|&b| b == 0),
        "no restore wrote the range after its unmap: {last}"
    );
    assert_eq!(
        unmapped_copies(),
        refused,
        "no copy reached the unmapped range: {last}"
    );
    vm_free(a, h, true);
}

#[test]
fn a_mapping_of_an_imported_handle_declines_untracked_memory() {
    let Some((_g, s)) = setup() else { return };
    let h = vm_handle(true);
    let a = vm_map(h, 29);
    let mut once = read(a);
    rmw_host(&mut once, 31);
    let tracker = &state::state().tracker;
    let known = tracker.lookup_any(a).map(|(_, r)| r.class);
    assert!(
        known.is_some_and(|c| c.contains(replay_core::MemoryClass::IPC_IMPORTED)),
        "the mapping is known as another process's memory: {known:?}"
    );
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_rmw(s.func, a, 31), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(s.tool.replayed.load(Ordering::SeqCst), before);
    assert_eq!(
        s.tool.last_record.lock().as_ref().map(|r| r.reason),
        Some(replay_core::Reason::UntrackedMemory),
        "{}",
        s.tool.last.lock()
    );
    assert_eq!(read(a), once, "declined: the launch ran once");
    vm_free(a, h, false);
}

#[test]
fn a_pool_allocation_is_captured_until_its_free_is_ordered() {
    let Some((_g, s)) = setup() else { return };
    type PoolAllocFn =
        unsafe extern "C" fn(*mut u64, usize, sys::CUmemoryPool, sys::CUstream) -> sys::CUresult;
    type FreeAsyncFn = unsafe extern "C" fn(u64, sys::CUstream) -> sys::CUresult;
    let alloc: PoolAllocFn = app_entry(c"cuMemAllocFromPoolAsync");
    let free: FreeAsyncFn = app_entry(c"cuMemFreeAsync");
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut a = 0u64;
    // SAFETY: the fake's default pool of device 0 and an allocation from it on the legacy
    // stream, with out pointers to live locals.
    unsafe {
        assert_eq!(
            sys::cuDeviceGetDefaultMemPool(&mut pool, 0),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            alloc(&mut a, N * 8, pool, std::ptr::null_mut()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let init: Vec<u64> = (0..N as u64).map(|i| i * 11 + 2).collect();
    // SAFETY: `N` words of the fake's device memory (host memory), just allocated.
    unsafe { std::ptr::copy_nonoverlapping(init.as_ptr(), a as *mut u64, N) };
    let mut once = init;
    rmw_host(&mut once, 37);
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_rmw(s.func, a, 37), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "three passes over the pool allocation: {}",
        s.tool.last.lock()
    );
    assert_eq!(read(a), once, "memory equals one execution");
    let tracker = &state::state().tracker;
    assert!(tracker.lookup(replay_core::AgentId(0), a).is_some());
    // SAFETY: orders the free of the allocation above on the legacy stream.
    let r = unsafe { free(a, std::ptr::null_mut()) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert!(tracker.lookup_any(a).is_none(), "the ordered free ended it");
}

#[test]
fn a_mapping_whose_access_is_withdrawn_declines_untracked_memory() {
    let Some((_g, s)) = setup() else { return };
    let h = vm_handle(false);
    let a = vm_map(h, 41);
    let before = s.tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_rmw(s.func, a, 43), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "replayed while device 0 may read and write it: {}",
        s.tool.last.lock()
    );
    let set_access: AccessFn = app_entry(c"cuMemSetAccess");
    let none = sys::CUmemAccessDesc {
        location: device0(),
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE,
    };
    // SAFETY: the mapping made above and one access descriptor.
    let r = unsafe { set_access(a, VM_BYTES, &none, 1) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let mut once = read(a);
    rmw_host(&mut once, 47);
    assert_eq!(launch_rmw(s.func, a, 47), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "no snapshot covers memory this device cannot read"
    );
    assert_eq!(
        s.tool.last_record.lock().as_ref().map(|r| r.reason),
        Some(replay_core::Reason::UntrackedMemory),
        "{}",
        s.tool.last.lock()
    );
    assert_eq!(read(a), once, "declined: the launch ran once");
    vm_free(a, h, false);
}

#[test]
fn a_communication_kernel_under_interception_runs_once_counted_by_the_window() {
    let Some((_g, s)) = setup() else { return };
    let svc = state::service().expect("the interception's service");
    let before_policy = svc.policy();
    let mut p = (*before_policy).clone();
    p.filter.communication = vec!["KR_RMW".into()];
    svc.set_policy(p).unwrap();
    let a = alloc_filled(33);
    let mut once = read(a);
    rmw_host(&mut once, 5);
    let replayed = s.tool.replayed.load(Ordering::SeqCst);
    let runs = svc.communication_runs();
    let r = launch_rmw(s.func, a, 5);
    svc.set_policy((*before_policy).clone()).unwrap();
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(a), once, "run once");
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        replayed,
        "not replayed"
    );
    assert_eq!(svc.communication_runs(), runs + 1);
    assert_eq!(
        state::state().counters_json()["communication"],
        serde_json::json!(runs + 1),
        "the report counts it where the window did"
    );
    // SAFETY: frees the wrapper's allocation.
    unsafe { intercept::mem_free(a) };
}

/// Another thread captures in global mode (PyTorch's default) on a stream of its own while an
/// intercepted launch runs its window: the window's driver calls (event queries, snapshot
/// allocations, frees) run in relaxed capture mode, so the capture stays valid and ends, and
/// the launch is replayed equal to one execution.
#[test]
fn an_intercepted_window_beside_another_threads_global_capture_leaves_it_valid() {
    let Some((_g, s)) = setup() else { return };
    // The application's own allocation comes before the capture: made during it, in global
    // mode, it would fail and invalidate the capture without the library too.
    let a = alloc_filled(71);
    let (begun_tx, begun_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let capturer = std::thread::spawn(move || -> Result<(), String> {
        bind_device0();
        let mut st: sys::CUstream = std::ptr::null_mut();
        // SAFETY: plain driver calls on a stream this thread creates and destroys, and a graph
        // owned here.
        unsafe {
            sys::cuStreamCreate(&mut st, 1)
                .result()
                .map_err(|e| e.to_string())?;
            sys::cuStreamBeginCapture_v2(
                st,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            )
            .result()
            .map_err(|e| format!("begin: {e}"))?;
            begun_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            let mut g: sys::CUgraph = std::ptr::null_mut();
            let ended = sys::cuStreamEndCapture(st, &mut g)
                .result()
                .map_err(|e| format!("the capture was invalidated: {e}"));
            if !g.is_null() {
                sys::cuGraphDestroy(g);
            }
            sys::cuStreamDestroy_v2(st);
            ended
        }
    });
    begun_rx.recv().unwrap();
    let mut once = read(a);
    rmw_host(&mut once, 9);
    let before = s.tool.replayed.load(Ordering::SeqCst);
    let r = launch_rmw(s.func, a, 9);
    go_tx.send(()).unwrap();
    let captured = capturer.join().unwrap();
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{}", s.tool.last.lock());
    captured.unwrap_or_else(|e| panic!("{e}; window: {}", s.tool.last.lock()));
    assert_eq!(read(a), once, "memory equals one execution");
    // (The free comes after the capture ended, as the application's would.)
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        before + 1,
        "replayed beside the capture: {}",
        s.tool.last.lock()
    );
    // SAFETY: frees the wrapper's allocation.
    unsafe { intercept::mem_free(a) };
}

/// A kernel of the communication list that waits on the host (as XLA's autotuning
/// `DelayKernel` spins on a host flag the host sets only after enqueuing the launches it
/// times) is still running: a launch meanwhile runs once, untouched, with no window (a window
/// would drain behind the waiting kernel, and the timed launch would be replayed, changing
/// what the autotuner measures). Once the wait has finished, launches are replayed again.
#[test]
fn a_launch_behind_a_running_host_waiting_kernel_runs_once_without_a_window() {
    let Some((_g, s)) = setup() else { return };
    let svc = state::service().expect("the interception's service");
    let before_policy = svc.policy();
    let mut p = (*before_policy).clone();
    p.filter.communication = vec!["kr_spin".into()];
    svc.set_policy(p).unwrap();
    let mut module: sys::CUmodule = std::ptr::null_mut();
    let mut spin: sys::CUfunction = std::ptr::null_mut();
    let mut flag: sys::CUdeviceptr = 0;
    // SAFETY: the fake driver's module calls and an intercepted allocation, with out pointers
    // to live locals.
    unsafe {
        assert_eq!(
            intercept::module_load_data(&mut module, APP_PTX.as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetFunction(&mut spin, module, c"kr_spin".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::mem_alloc(&mut flag, 8),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let a = alloc_filled(19);
    let mut once = read(a);
    rmw_host(&mut once, 4);
    let behind = state::state()
        .counters
        .behind_host_wait
        .load(Ordering::SeqCst);
    // The waiting kernel: keeps the legacy stream busy for 1.5 s.
    let mut ns: u64 = 1_500_000_000;
    let mut fp = flag;
    let mut spin_args: [*mut std::ffi::c_void; 2] =
        [(&mut ns as *mut u64).cast(), (&mut fp as *mut u64).cast()];
    // SAFETY: kr_spin's two 8-byte parameters, live arguments.
    let r = unsafe { launch_block(spin, 1, &mut spin_args) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let communication_record = s.tool.last_record.lock().as_ref().map(|r| r.dispatch_id);
    assert_eq!(launch_rmw(s.func, a, 4), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(a), once, "run once");
    assert_eq!(
        state::state()
            .counters
            .behind_host_wait
            .load(Ordering::SeqCst),
        behind + 1,
        "counted as run behind a host wait"
    );
    assert_eq!(
        s.tool.last_record.lock().as_ref().map(|r| r.dispatch_id),
        communication_record,
        "no window opened for it (a window would have drained behind the waiting kernel): {}",
        s.tool.last.lock()
    );
    // Once the wait is over, the next launch is replayed again.
    std::thread::sleep(Duration::from_millis(1600));
    let replayed = s.tool.replayed.load(Ordering::SeqCst);
    rmw_host(&mut once, 4);
    assert_eq!(launch_rmw(s.func, a, 4), sys::CUresult::CUDA_SUCCESS);
    svc.set_policy((*before_policy).clone()).unwrap();
    assert_eq!(read(a), once, "equal to one execution");
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        replayed + 1,
        "replayed after the wait: {}",
        s.tool.last.lock()
    );
    // SAFETY: frees the wrapper's allocations.
    unsafe {
        intercept::mem_free(a);
        intercept::mem_free(flag);
    }
}

/// While a capture that intercepted launches went into is live on another thread, a launch on
/// another stream runs once without a window (a window could not drain the capturing stream,
/// and would snapshot and restore beside the graph's allocations); the capture ends valid, and
/// once it has ended launches are replayed again.
#[test]
fn a_launch_beside_a_live_capture_of_intercepted_launches_runs_once_without_a_window() {
    let Some((_g, s)) = setup() else { return };
    let a = alloc_filled(23);
    let b = alloc_filled(29);
    let func = s.func as usize;
    let (begun_tx, begun_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let capturer = std::thread::spawn(move || -> Result<(), String> {
        bind_device0();
        let mut st: sys::CUstream = std::ptr::null_mut();
        // SAFETY: driver calls on a stream this thread creates and destroys; kr_rmw's three
        // 8-byte parameters, live arguments, launched through the wrapper into the capture.
        unsafe {
            sys::cuStreamCreate(&mut st, 1)
                .result()
                .map_err(|e| e.to_string())?;
            sys::cuStreamBeginCapture_v2(
                st,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            )
            .result()
            .map_err(|e| format!("begin: {e}"))?;
            let (mut p, mut n, mut k) = (b, N as u64, 2u64);
            let mut args: [*mut std::ffi::c_void; 3] = [
                (&mut p as *mut u64).cast(),
                (&mut n as *mut u64).cast(),
                (&mut k as *mut u64).cast(),
            ];
            let r = intercept::launch_kernel(
                func as sys::CUfunction,
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
            );
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(format!("captured launch: {r:?}"));
            }
            begun_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            // Ended and destroyed through the wrappers, as an application's calls arrive.
            let mut g: sys::CUgraph = std::ptr::null_mut();
            let ended = intercept::stream_end_capture(st, &mut g)
                .result()
                .map_err(|e| format!("the capture was invalidated: {e}"));
            if !g.is_null() {
                sys::cuGraphDestroy(g);
            }
            intercept::stream_destroy(st);
            ended
        }
    });
    begun_rx.recv().unwrap();
    let mut once = read(a);
    rmw_host(&mut once, 6);
    let beside = state::state()
        .counters
        .beside_capture
        .load(Ordering::SeqCst);
    let record = s.tool.last_record.lock().as_ref().map(|r| r.dispatch_id);
    let r = launch_rmw(s.func, a, 6);
    go_tx.send(()).unwrap();
    let captured = capturer.join().unwrap();
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    captured.unwrap_or_else(|e| panic!("{e}; window: {}", s.tool.last.lock()));
    assert_eq!(read(a), once, "run once");
    assert_eq!(
        state::state()
            .counters
            .beside_capture
            .load(Ordering::SeqCst),
        beside + 1,
        "counted as run beside a live capture"
    );
    assert_eq!(
        s.tool.last_record.lock().as_ref().map(|r| r.dispatch_id),
        record,
        "no window beside the capture: {}",
        s.tool.last.lock()
    );
    // The capture has ended (and its stream is gone): replayed again.
    let replayed = s.tool.replayed.load(Ordering::SeqCst);
    rmw_host(&mut once, 6);
    assert_eq!(launch_rmw(s.func, a, 6), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(a), once, "equal to one execution");
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        replayed + 1,
        "{}",
        s.tool.last.lock()
    );
    // SAFETY: frees the wrapper's allocations.
    unsafe {
        intercept::mem_free(a);
        intercept::mem_free(b);
    }
}

use support::{fake_mem_used, fake_set_mem, FAKE_MEM};

/// A replayed launch that leaves backing pooled (the policy keeps it), under `idle`.
fn replay_leaving_backing(s: &Setup, idle: Duration) -> (u64, Vec<u64>, u64) {
    let svc = state::service().expect("the interception's service");
    let mut p = (*svc.policy()).clone();
    p.scope = replay_core::Scope::All;
    p.pool_keep_bytes = u64::MAX;
    p.pool_idle_release = idle;
    svc.set_policy(p).unwrap();
    let a = alloc_filled(91);
    let mut once = read(a);
    rmw_host(&mut once, 3);
    assert_eq!(launch_rmw(s.func, a, 3), sys::CUresult::CUDA_SUCCESS);
    assert!(
        s.tool.last.lock().contains("Replayed"),
        "{}",
        s.tool.last.lock()
    );
    let held = bind_device0().engine().pooled_bytes();
    assert!(
        held >= (N * 8) as u64,
        "the snapshot's backing stays pooled: {held}"
    );
    (a, once, held)
}

#[test]
fn an_application_allocation_out_of_memory_while_backing_is_pooled_is_retried_after_its_release() {
    let Some((_g, s)) = setup() else { return };
    let before = state::service().unwrap().policy();
    let (a, once, held) = replay_leaving_backing(&s, Duration::ZERO);
    let backend = bind_device0();
    let retries = state::state().counters_json()["oom_retries"].as_u64();
    // The device has room for the request only once the library's backing is gone.
    fake_set_mem(fake_mem_used() + 1024);
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the wrapper's contract is the driver's: an out pointer.
    let r = unsafe { intercept::mem_alloc(&mut p, held as usize) };
    fake_set_mem(FAKE_MEM);
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "retried after the release");
    assert_eq!(backend.engine().pooled_bytes(), 0);
    assert_eq!(backend.memory().deferred_bytes(), 0);
    if let Some(n) = retries {
        assert_eq!(
            state::state().counters_json()["oom_retries"].as_u64(),
            Some(n + 1)
        );
    }
    assert_eq!(read(a), once, "memory equals one execution");
    state::service()
        .unwrap()
        .set_policy((*before).clone())
        .unwrap();
    // SAFETY: frees the wrappers' allocations.
    unsafe {
        intercept::mem_free(p);
        intercept::mem_free(a);
    }
}

#[test]
fn pooled_backing_unused_past_the_idle_bound_is_released_by_the_next_intercepted_call() {
    let Some((_g, s)) = setup() else { return };
    let before = state::service().unwrap().policy();
    let idle = Duration::from_millis(1000);
    let t0 = std::time::Instant::now();
    let (a, once, _) = replay_leaving_backing(&s, idle);
    let backend = bind_device0();
    // Within the bound an allocation keeps the pool. The pool's idle time is at most the time
    // since `t0`: checked only when that is inside the bound, so a loaded machine cannot fail.
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the wrapper's contract is the driver's: an out pointer.
    let r = unsafe { intercept::mem_alloc(&mut p, 64) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    if t0.elapsed() < idle {
        assert!(
            backend.engine().pooled_bytes() > 0,
            "still within the bound"
        );
    }
    std::thread::sleep(idle + Duration::from_millis(100));
    let mut q: sys::CUdeviceptr = 0;
    // SAFETY: as above.
    let r = unsafe { intercept::mem_alloc(&mut q, 64) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        backend.engine().pooled_bytes(),
        0,
        "released after the bound"
    );
    assert_eq!(
        backend.memory().deferred_bytes(),
        0,
        "freed: no stream is busy"
    );
    assert_eq!(read(a), once, "memory equals one execution");
    state::service()
        .unwrap()
        .set_policy((*before).clone())
        .unwrap();
    // SAFETY: frees the wrappers' allocations.
    unsafe {
        intercept::mem_free(q);
        intercept::mem_free(p);
        intercept::mem_free(a);
    }
}

/// `CUDA_ARRAY_DESCRIPTOR`.
#[repr(C)]
struct ArrayDesc {
    width: usize,
    height: usize,
    format: u32,
    channels: u32,
}

#[test]
fn an_array_creation_out_of_memory_while_backing_is_pooled_is_retried_after_its_release() {
    let Some((_g, s)) = setup() else { return };
    let before = state::service().unwrap().policy();
    let (a, once, held) = replay_leaving_backing(&s, Duration::ZERO);
    let backend = bind_device0();
    fake_set_mem(fake_mem_used() + 1024);
    // One 32-bit channel: `held` bytes, which fit only once the backing is gone.
    let desc = ArrayDesc {
        width: (held / 4) as usize,
        height: 1,
        format: 0x03,
        channels: 1,
    };
    let mut array = 0u64;
    // SAFETY: the wrapper's contract is the driver's: an out pointer and a descriptor.
    let r = unsafe { intercept::array_create(&mut array, (&desc as *const ArrayDesc).cast()) };
    fake_set_mem(FAKE_MEM);
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "retried after the release");
    assert_eq!(backend.engine().pooled_bytes(), 0);
    assert_eq!(read(a), once, "memory equals one execution");
    state::service()
        .unwrap()
        .set_policy((*before).clone())
        .unwrap();
    // SAFETY: the array and the allocation the wrappers made.
    unsafe {
        intercept::array_destroy(array);
        intercept::mem_free(a);
    }
}
