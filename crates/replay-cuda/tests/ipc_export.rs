//! Memory this process exports is shared memory, over the fake driver
//! (`tests/fake_driver/fake_inject.c` as `libcuda.so.1`), as memory it opens from another
//! process's handle is (`streams.rs`):
//!
//! - a device allocation handed out with `cuIpcGetMemHandle`;
//! - a `cuMemCreate` handle exported with `cuMemExportToShareableHandle` (NCCL's and
//!   NVSHMEM's symmetric memory): every range it was mapped at before the export, and every
//!   mapping of it made after.
//!
//! In each case the memory is classed `IPC_IMPORTED` (never captured), a kernel writing it
//! declines `untracked_memory` and runs once (memory equal to one execution), and a peer's
//! write into it during an unrelated kernel's window does not truncate that kernel.
//!
//! Skipped where no C compiler is found, or where a real driver is present.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_core::MemoryClass;
use replay_cuda::intercept;
use replay_cuda::state;
use replay_cuda::sys;

mod support;
use support::vmem::{
    app_entry, device0, AccessFn, CreateFn, ExportFn, MapFn, RangeFn, ReleaseFn, ReserveFn,
    VM_BYTES,
};
use support::{bind_device0, intercept_with, launch_block, load_fake, Fake};

type Hook = Box<dyn Fn(u32) + Send + Sync>;

/// Three passes; `hook` runs in PASS ENTER with the pass index; the last record is kept.
#[derive(Default)]
struct Tool {
    hook: Mutex<Option<Hook>>,
    last: Mutex<Option<replay_core::OutcomeRecord>>,
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
    let (mut module, mut rmw): (sys::CUmodule, sys::CUfunction) =
        (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the intercepted module load and function lookup with out pointers to live
    // locals.
    unsafe {
        assert_eq!(
            intercept::module_load_data(&mut module, APP_PTX.as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::module_get_function(&mut rmw, module, c"kr_rmw".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    Some((guard, Setup { tool, rmw }))
}

fn fill(p: u64, seed: u64) {
    let host: Vec<u64> = (0..N as u64).map(|i| i * 7 + seed).collect();
    // SAFETY: the fake driver's memory is host memory at the device address (unified), at
    // least `N` words from `p`.
    unsafe { std::ptr::copy_nonoverlapping(host.as_ptr(), p as *mut u64, N) };
}

fn alloc_filled(seed: u64) -> u64 {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the wrapper's contract is the driver's: an out pointer.
    let r = unsafe { intercept::mem_alloc(&mut p, N * 8) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    fill(p, seed);
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

fn exported() -> u64 {
    state::state().counters_json()["ipc_exported"]
        .as_u64()
        .unwrap_or(0)
}

/// The class the tracker knows `p` by.
fn class_of(p: u64) -> MemoryClass {
    state::state()
        .tracker
        .lookup_any(p)
        .map(|(_, r)| r.class)
        .expect("recorded")
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

/// A kernel writing the exported memory at `p` declines `untracked_memory` and runs once;
/// a peer writing it during an unrelated kernel's window does not truncate that kernel.
fn exported_memory_is_never_captured(s: &Setup, p: u64, seed: u64) {
    let mut once = read(p);
    rmw_host(&mut once, seed);
    assert_eq!(launch_rmw(s.rmw, p, seed), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(s.tool.last(), (1, "untracked_memory".into()));
    assert_eq!(read(p), once, "one execution");

    let a = alloc_filled(seed + 1);
    let mut a_once = read(a);
    rmw_host(&mut a_once, 5);
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
                // SAFETY: the exported memory, live until the test releases it; a peer's
                // write as another process would make it.
                unsafe { std::ptr::write_volatile(p as *mut u64, 0xBEEF) };
                d.store(true, Ordering::SeqCst);
            }));
            assert!(wait_for(&done, Duration::from_secs(10)), "the write landed");
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
    assert_eq!(
        s.tool.last(),
        (3, "none".into()),
        "the peer's write is not the kernel's"
    );
    assert_eq!(
        read(a),
        a_once,
        "the unrelated kernel replayed: one execution"
    );
    // SAFETY: the exported memory, still live.
    let first = unsafe { std::ptr::read_volatile(p as *const u64) };
    assert_eq!(first, 0xBEEF, "no restore undid the peer's write");
    free(a);
}

#[test]
fn a_device_allocation_exported_through_an_ipc_handle_is_shared_and_never_captured() {
    let Some((_g, s)) = setup() else { return };
    let p = alloc_filled(3);
    assert_eq!(class_of(p), MemoryClass::DEVICE_COARSE);
    let before = exported();
    let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: the intercepted export with an out pointer to a live local, of a live
    // allocation (an address inside it, as the driver accepts).
    let r = unsafe { intercept::ipc_get_mem_handle(&mut h, p + 64) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert!(
        class_of(p).contains(MemoryClass::IPC_IMPORTED),
        "the whole allocation is shared: {:?}",
        class_of(p)
    );
    assert_eq!(exported(), before + 1);
    exported_memory_is_never_captured(&s, p, 7);
    free(p);
    // A later allocation at the address is this process's own again.
    let q = alloc_filled(4);
    assert_eq!(class_of(q), MemoryClass::DEVICE_COARSE);
    free(q);
}

// ----- cuMemCreate handles exported -----------------------------------------------------

/// A physical handle of device 0 (`cuMemCreate`), exportable as a file descriptor.
fn vm_handle() -> u64 {
    let create: CreateFn = app_entry(c"cuMemCreate");
    let prop = sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType_enum(1),
        location: device0(),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    };
    let mut h = 0u64;
    // SAFETY: a fully initialised property block and an out pointer to a live local.
    let r = unsafe { create(&mut h, VM_BYTES, &prop, 0) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    h
}

/// Reserves a range, maps `handle` over it and grants device 0 read-write; filled with a
/// pattern. Returns the address.
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
    fill(p, seed);
    p
}

/// Unmaps the range and frees its reservation.
fn vm_unmap(p: u64) {
    let unmap: RangeFn = app_entry(c"cuMemUnmap");
    let free: RangeFn = app_entry(c"cuMemAddressFree");
    // SAFETY: undoes `vm_map`, once.
    unsafe {
        assert_eq!(unmap(p, VM_BYTES), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(free(p, VM_BYTES), sys::CUresult::CUDA_SUCCESS);
    }
}

#[test]
fn a_cu_mem_create_handle_exported_is_shared_at_every_address_it_is_mapped_at() {
    let Some((_g, s)) = setup() else { return };
    let h = vm_handle();
    // Mapped at two addresses before the export, as symmetric memory maps a peer's too.
    let (a, b) = (vm_map(h, 11), vm_map(h, 13));
    let local = MemoryClass::VIRTUAL_MAPPING | MemoryClass::DEVICE_COARSE;
    assert_eq!(class_of(a), local);
    let before = exported();
    let export: ExportFn = app_entry(c"cuMemExportToShareableHandle");
    let mut fd: i32 = -1;
    // SAFETY: an out pointer to a live int (a POSIX file descriptor's type, 1), the handle
    // made above.
    let r = unsafe { export((&mut fd as *mut i32).cast(), h, 1, 0) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(exported(), before + 1);
    let shared = MemoryClass::VIRTUAL_MAPPING | MemoryClass::IPC_IMPORTED;
    assert_eq!(class_of(a), shared, "the first mapping");
    assert_eq!(class_of(b), shared, "the second mapping");
    // A mapping made after the export is shared too.
    let c = vm_map(h, 17);
    assert_eq!(class_of(c), shared, "a later mapping");
    exported_memory_is_never_captured(&s, a, 19);
    exported_memory_is_never_captured(&s, c, 23);
    for p in [a, b, c] {
        vm_unmap(p);
        assert!(
            state::state().tracker.lookup_any(p).is_none(),
            "unmapped, forgotten"
        );
    }
    let release: ReleaseFn = app_entry(c"cuMemRelease");
    // SAFETY: the handle made above, every mapping of it gone.
    let r = unsafe { release(h) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    // A fresh handle mapped at a reused address is local again.
    let h2 = vm_handle();
    let d = vm_map(h2, 29);
    assert_eq!(class_of(d), local);
    vm_unmap(d);
    // SAFETY: as above.
    let r = unsafe { release(h2) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
}
