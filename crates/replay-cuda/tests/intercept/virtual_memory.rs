//! Virtual-memory mappings reached through `dlsym` and stream-ordered pool allocations (issue 14).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_cuda::state;
use replay_cuda::sys;

use crate::harness::{launch_rmw, read, rmw_host, setup, wait_for, N};
use crate::support::vmem::{
    app_entry, device0, AccessFn, CreateFn, ImportFn, MapFn, RangeFn, ReleaseFn, ReserveFn,
    VM_BYTES,
};

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
