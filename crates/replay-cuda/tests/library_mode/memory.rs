//! The memory a window must know to restore it, and the library's own: what the driver
//! describes that the tracker never saw; pinned, registered, managed and virtual memory and
//! pool allocations captured and replayed; blocks freed inside a window left alone; an
//! application image's variables; and the backing the library keeps, released outside the
//! window and given back when the application runs short.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase};
use replay_core::{MemoryClass, Outcome, Policy, Reason, RestoreMode, Scope};
use replay_cuda::module::elf::STB_GLOBAL;
use replay_cuda::{ArgBlock, DevicePtr, QueueKind};
use replay_memory::ModuleVariables;
use replay_mock::double::at;

use crate::harness::{fake_fn, image, launch_on, pattern, rmw_args, rmw_host, setup, WAIT};
use crate::support;

fn blocking_frees() -> i32 {
    let f: unsafe extern "C" fn() -> i32 = fake_fn(b"fake_cuda_blocking_frees\0");
    // SAFETY: no arguments; reads a counter under the fake's lock.
    unsafe { f() }
}

#[test]
fn backing_is_released_outside_the_window_once_the_device_is_idle() {
    let Some((_serial, cx, _)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let spin = module.function("kr_spin").unwrap();
    let mem = cx.backend.memory();
    let flag = cx.backend.allocator().alloc_device(8).unwrap();
    let _data = cx.backend.allocator().alloc_device(1 << 20).unwrap();
    cx.service
        .set_policy(Policy {
            scope: Scope::All,
            restore: RestoreMode::Full,
            pool_keep_bytes: 0,
            drain_timeout: Duration::from_millis(300),
            pass_timeout: Duration::from_millis(300),
            ..Policy::default()
        })
        .unwrap();
    let legacy = Arc::clone(cx.backend.legacy_queue());
    let before = blocking_frees();
    // A pass that spins past its bound: truncated, and the window gives its backing back while
    // the kernel still runs. Freeing it then would wait for the whole device, under the lock.
    let args = ArgBlock::new()
        .arg(1_500_000_000u64)
        .arg(DevicePtr(flag.ptr()));
    let rec = launch_on(&cx, &spin, &legacy, &args, 3)
        .unwrap()
        .record
        .unwrap();
    assert_eq!(
        (rec.outcome, rec.reason),
        (Outcome::Truncated, Reason::PassDrainStuck),
        "{rec}"
    );
    assert!(rec.captured_bytes > 0, "a snapshot was taken: {rec}");
    assert_eq!(
        blocking_frees(),
        before,
        "no free waited for the device inside the window"
    );
    assert!(mem.deferred_bytes() > 0, "released later, not now");
    legacy.synchronize().unwrap();
    assert_eq!(mem.release_deferred(false), 0, "released once idle");
    assert_eq!(blocking_frees(), before);
}

#[test]
fn the_driver_describes_memory_the_tracker_never_saw() {
    use replay_core::DeviceMemory;
    use replay_cuda::sys;
    let Some((_serial, cx, tracker)) = setup() else {
        return;
    };
    let mem = cx.backend.memory();
    let agent = cx.backend.agent_id();
    // Allocated behind the backend's back, as an application's own driver calls would.
    let mut dev: sys::CUdeviceptr = 0;
    let mut managed: sys::CUdeviceptr = 0;
    let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: plain allocations, freed below.
    unsafe {
        sys::cuMemAlloc_v2(&mut dev, 8192).result().unwrap();
        sys::cuMemAllocManaged(&mut managed, 4096, 1)
            .result()
            .unwrap();
        sys::cuMemHostAlloc(&mut host, 4096, 0).result().unwrap();
    }
    let host = host as u64;
    for (addr, base, size, class, owner) in [
        (
            dev + 100,
            dev,
            8192,
            MemoryClass::DEVICE_COARSE,
            Some(agent),
        ),
        (
            managed + 8,
            managed,
            4096,
            MemoryClass::MANAGED,
            Some(agent),
        ),
        (host + 4000, host, 4096, MemoryClass::PINNED_HOST, None),
    ] {
        assert!(tracker.lookup(agent, addr).is_none());
        let info = mem
            .query_pointer(addr)
            .unwrap()
            .expect("known to the driver");
        assert_eq!(
            (info.base, info.size, info.class, info.owner),
            (base, size, class, owner),
            "{addr:#x}"
        );
    }
    // Pageable host memory (and any word that is no pointer) is unknown to CUDA.
    let stack = 0u64;
    assert_eq!(
        mem.query_pointer(&stack as *const u64 as u64).unwrap(),
        None
    );
    assert_eq!(mem.query_pointer(12345).unwrap(), None);
    // Stream-ordered pool memory is a virtual mapping.
    let q = cx.backend.create_queue(QueueKind::Compute).unwrap();
    let pool = cx.backend.allocator().alloc_async(4096, &q).unwrap();
    let info = mem.query_pointer(pool.ptr()).unwrap().unwrap();
    assert_eq!(info.class, MemoryClass::VIRTUAL_MAPPING);
    // SAFETY: frees what was allocated above, once.
    unsafe {
        sys::cuMemFree_v2(dev).result().unwrap();
        sys::cuMemFree_v2(managed).result().unwrap();
        sys::cuMemFreeHost(host as *mut std::ffi::c_void)
            .result()
            .unwrap();
    }
}

#[test]
fn pinned_registered_and_managed_memory_are_tracked_and_captured() {
    let Some((_serial, cx, tracker)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let alloc = cx.backend.allocator();
    let agent = cx.backend.agent_id();
    let len = 64u64 << 10;
    let mut own = vec![0u64; (len / 8) as usize];
    // SAFETY: `own` is `len` bytes, not registered, and outlives the registration (dropped
    // at the end of the test, after `reg`).
    let reg = unsafe { alloc.register_host(own.as_mut_ptr().cast(), len) }.unwrap();
    let allocs = [
        alloc.alloc_managed(len).unwrap(),
        alloc.alloc_pinned_host(len).unwrap(),
        alloc.alloc_host(len).unwrap(),
        reg,
    ];
    let classes = [
        MemoryClass::MANAGED,
        MemoryClass::PINNED_HOST,
        MemoryClass::PINNED_HOST,
        MemoryClass::PINNED_HOST,
    ];
    let legacy = Arc::clone(cx.backend.legacy_queue());
    cx.policy(Scope::Arguments, RestoreMode::Full);
    for (a, class) in allocs.iter().zip(classes) {
        assert_eq!(tracker.lookup(agent, a.ptr()).unwrap().class, class);
        let input = pattern(len as usize, a.ptr());
        let mem = cx.backend.memory();
        mem.write_device(a.ptr(), &input, WAIT).unwrap();
        *cx.inputs.ranges.lock() = vec![(a.ptr(), len)];
        let rec = cx.launch(&rmw, &rmw_args(a.ptr(), len, 4), 3, vec![(a.ptr(), len)]);
        assert_eq!(
            (rec.outcome, rec.executed_passes, rec.captured_bytes),
            (Outcome::Replayed, 3, len + 8328),
            "{class:?}: {rec}"
        );
        cx.inputs_identical(3);
        let mut want = input.clone();
        rmw_host(&mut want, 4);
        assert_eq!(
            mem.read_device(a.ptr(), len, WAIT).unwrap(),
            want,
            "{class:?}"
        );
    }
    drop(legacy);
    drop(allocs);
    drop(own);
}

/// Reads `len` bytes at `p` in the fake's memory (device memory is host memory there).
fn raw(p: u64, len: usize) -> Vec<u8> {
    // SAFETY: the fake's device arena is mapped for the whole process and never unmapped;
    // a freed block reads as zeros there.
    unsafe { std::slice::from_raw_parts(p as *const u8, len) }.to_vec()
}

#[test]
fn a_kernel_writing_a_mapping_and_a_pool_allocation_replays() {
    let Some((_serial, cx, tracker)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let alloc = cx.backend.allocator();
    let agent = cx.backend.agent_id();
    let mem = cx.backend.memory();
    let q = cx.backend.create_queue(QueueKind::Compute).unwrap();
    let len = 64u64 << 10;
    let v = alloc.alloc_virtual(len).unwrap();
    let s = alloc.alloc_async(len, &q).unwrap();
    let pool = alloc.default_pool().unwrap();
    let f = alloc.alloc_from_pool_async(len, &pool, &q).unwrap();
    for a in [&v, &s, &f] {
        let r = tracker.lookup(agent, a.ptr()).unwrap();
        assert_eq!(
            r.class,
            MemoryClass::VIRTUAL_MAPPING | MemoryClass::DEVICE_COARSE,
            "{:?}",
            a.kind()
        );
    }
    for scope in [Scope::All, Scope::Arguments] {
        for restore in [RestoreMode::Full, RestoreMode::Dirty] {
            for a in [&v, &s, &f] {
                let input = pattern(len as usize, a.ptr() ^ scope as u64 ^ restore as u64);
                mem.write_device(a.ptr(), &input, WAIT).unwrap();
                cx.policy(scope, restore);
                let rec = cx.launch(&rmw, &rmw_args(a.ptr(), len, 6), 4, vec![(a.ptr(), len)]);
                assert_eq!(
                    (rec.outcome, rec.executed_passes),
                    (Outcome::Replayed, 4),
                    "{:?} {scope:?}/{restore:?}: {rec}",
                    a.kind()
                );
                cx.inputs_identical(4);
                let mut want = input;
                rmw_host(&mut want, 6);
                assert_eq!(mem.read_device(a.ptr(), len, WAIT).unwrap(), want);
            }
        }
    }
    // decline_on_vmem keeps the old behaviour: declined, run once.
    for a in [&v, &s, &f] {
        let input = pattern(len as usize, 3);
        mem.write_device(a.ptr(), &input, WAIT).unwrap();
        cx.service
            .set_policy(Policy {
                decline_on_vmem: true,
                ..Policy::default()
            })
            .unwrap();
        let rec = cx.launch(&rmw, &rmw_args(a.ptr(), len, 6), 4, vec![]);
        assert_eq!(
            (rec.outcome, rec.reason),
            (Outcome::Declined, Reason::UntrackedMemory),
            "{rec}"
        );
        let mut want = input;
        rmw_host(&mut want, 6);
        assert_eq!(mem.read_device(a.ptr(), len, WAIT).unwrap(), want);
    }
    drop((v, s, f));
    drop(q);
}

#[test]
fn a_mapping_and_a_pool_allocation_freed_during_a_window_are_not_restored() {
    let Some((_serial, cx, tracker)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let alloc = cx.backend.allocator();
    let agent = cx.backend.agent_id();
    let mem = cx.backend.memory();
    let q = cx.backend.create_queue(QueueKind::Compute).unwrap();
    let len = 256u64 << 10;
    let a = alloc.alloc_device(len).unwrap();
    let v = alloc.alloc_virtual(len).unwrap();
    let s = alloc.alloc_async(len, &q).unwrap();
    let input = pattern(len as usize, 17);
    for p in [a.ptr(), v.ptr(), s.ptr()] {
        mem.write_device(p, &input, WAIT).unwrap();
    }
    let (vp, sp) = (v.ptr(), s.ptr());
    // Captured under `all` (the kernel writes only `a`); the tool frees both before pass 1:
    // the unmap and the ordered free are recorded before the driver's calls, so the restores
    // that follow skip them.
    let freed = Arc::new(Mutex::new(Some((v, s))));
    let f = Arc::clone(&freed);
    cx.tool
        .add_hook(at(Operation::Pass, Phase::Enter, move |pass| {
            if pass == 1 {
                drop(f.lock().take());
            }
        }));
    cx.policy(Scope::All, RestoreMode::Full);
    let rec = cx.launch(&rmw, &rmw_args(a.ptr(), len, 2), 3, vec![]);
    cx.tool.set_hook(Some(cx.inputs.hook()));
    assert!(freed.lock().is_none(), "the tool freed them");
    assert_eq!(
        (rec.outcome, rec.executed_passes),
        (Outcome::Replayed, 3),
        "{rec}"
    );
    assert!(rec.captured_bytes >= 3 * len, "all three captured: {rec}");
    let mut want = input.clone();
    rmw_host(&mut want, 2);
    assert_eq!(mem.read_device(a.ptr(), len, WAIT).unwrap(), want);
    assert!(tracker.lookup(agent, vp).is_none() && tracker.lookup(agent, sp).is_none());
    // The pool block's whole pages were released by the free and were never written again.
    let page = (sp + 4095) & !4095;
    assert!(
        raw(page, 64 << 10).iter().all(|&b| b == 0),
        "no restore wrote the freed pool block"
    );
    drop(q);
}

#[test]
fn an_application_images_variables_name_their_section_as_their_block() {
    let Some((_g, ctx, _t)) = setup() else {
        return;
    };
    ctx.backend.device().bind().unwrap();
    use replay_cuda::module::elf::GlobalSymbol;
    let sym = |name: &str, section: usize, offset: u64| GlobalSymbol {
        name: name.into(),
        section_name: format!(".nv.global.{section}"),
        section,
        offset,
        size: 8,
        read_only: false,
        binding: STB_GLOBAL,
    };
    // Section 5 at 0x7000_0000, section 6 at 0x7000_1000 (where the driver put them; the
    // fake's pointer attributes know no allocation there).
    let at = |name: &str| -> Option<(u64, u64)> {
        match name {
            "a" => Some((0x7000_00f8, 8)),
            "b" => Some((0x7000_0100, 8)),
            "c" => Some((0x7000_1000, 8)),
            _ => None,
        }
    };
    let reg = ctx.backend.modules();
    assert!(reg.add_foreign(
        0xabc,
        vec![sym("a", 5, 0xf8), sym("b", 5, 0x100), sym("c", 6, 0)],
        at,
        |_| None
    ));
    let agent = replay_core::AgentId(0);
    let a = reg.allocation_of(agent, 0x7000_00f8);
    assert_eq!(
        a,
        Some((0x7000_0000, 0x108)),
        "a's section, as far as its symbols reach"
    );
    assert_eq!(
        reg.allocation_of(agent, 0x7000_0100),
        a,
        "b: the same section"
    );
    assert_eq!(
        reg.allocation_of(agent, 0x7000_1000),
        Some((0x7000_1000, 8))
    );
    assert!(reg.remove_foreign(0xabc));
    assert_eq!(reg.allocation_of(agent, 0x7000_00f8), None);
}

/// Arms the fake's next `n` failing `cuMemHostRegister` calls; returns how many of those armed
/// before were not reached.
fn fail_host_registers(n: i32) -> i32 {
    let f: unsafe extern "C" fn(i32) -> i32 = fake_fn(b"fake_cuda_fail_host_registers\0");
    // SAFETY: an integer argument; sets a counter under the fake's lock.
    unsafe { f(n) }
}

#[test]
fn a_large_pinned_block_whose_registration_fails_comes_from_cu_mem_host_alloc() {
    let Some((_serial, cx, _)) = setup() else {
        return;
    };
    use replay_core::{DeviceMemory, Tier};
    let mem = cx.backend.memory();
    // The tier's threshold for pinning by registration after a parallel first touch.
    const LARGE: u64 = 256 << 20;
    mem.set_pin_threads(replay_cuda::memory::TierConfig::default().pin_threads);
    // Registered, then unregistered and freed.
    let id = mem.alloc_backing(Tier::PinnedHost, LARGE).unwrap();
    mem.free_backing(id);
    mem.release_deferred(true);
    fail_host_registers(1);
    // A small block never tries to register.
    let small = mem.alloc_backing(Tier::PinnedHost, 1 << 20).unwrap();
    assert_eq!(fail_host_registers(1), 1, "a small block: cuMemHostAlloc");
    let id = mem
        .alloc_backing(Tier::PinnedHost, LARGE)
        .expect("the registration refused, cuMemHostAlloc instead");
    assert_eq!(fail_host_registers(0), 0, "the registration was tried");
    mem.free_backing(id);
    mem.free_backing(small);
    mem.release_deferred(true);
}

/// Library mode: backing the library pooled after a replay (the policy keeps it) gives way to
/// an application allocation that runs out of memory, and is released by the next launch
/// once it sat unused past the idle bound; memory equals one execution of each launch.
#[test]
fn library_mode_backing_gives_way_to_the_application_and_is_released_when_idle() {
    let Some((_serial, cx, _tracker)) = setup() else {
        return;
    };
    let backend = Arc::clone(&cx.backend);
    let module = backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let alloc = backend.allocator();
    let a = alloc.alloc_device(1 << 20).unwrap();
    let words = a.len() / 8;
    let mut expect = pattern(a.len() as usize, 77);
    backend
        .memory()
        .write_device(a.ptr(), &expect, WAIT)
        .unwrap();
    let policy = |idle: Duration| Policy {
        scope: Scope::All,
        restore: RestoreMode::Full,
        pool_keep_bytes: u64::MAX,
        pool_idle_release: idle,
        drain_timeout: Duration::from_millis(300),
        pass_timeout: Duration::from_millis(300),
        ..Policy::default()
    };
    let run = |k: u64, passes: u64, expect: &mut Vec<u8>| {
        let args = ArgBlock::new().arg(DevicePtr(a.ptr())).arg(words).arg(k);
        let rec = cx.launch(&rmw, &args, passes, Vec::new());
        rmw_host(expect, k);
        rec
    };
    cx.service.set_policy(policy(Duration::ZERO)).unwrap();
    let rec = run(5, 3, &mut expect);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    let held = backend.engine().pooled_bytes();
    assert!(
        held >= a.len(),
        "the snapshot's backing stays pooled: {held}"
    );

    // Out of memory unless the backing goes: released, then the allocation retried.
    support::fake_set_mem(support::fake_mem_used() + 1024);
    let b = alloc.alloc_device(held);
    support::fake_set_mem(support::FAKE_MEM);
    let b = b.expect("retried after the library's backing was released");
    assert_eq!(backend.engine().pooled_bytes(), 0);
    assert_eq!(backend.memory().deferred_bytes(), 0);
    drop(b);

    // Idle release: kept within the bound, released by the first launch after it.
    // The pool's idle time at the second launch is at most the time since `t0`: the "kept"
    // check runs only when that is inside the bound, so a loaded machine cannot fail it.
    let idle = Duration::from_millis(1000);
    cx.service.set_policy(policy(idle)).unwrap();
    let t0 = std::time::Instant::now();
    let rec = run(6, 3, &mut expect);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    run(7, 1, &mut expect);
    if t0.elapsed() < idle {
        assert!(
            backend.engine().pooled_bytes() >= a.len(),
            "within the bound the pool stays"
        );
    }
    std::thread::sleep(idle + Duration::from_millis(100));
    run(8, 1, &mut expect);
    assert_eq!(
        backend.engine().pooled_bytes(),
        0,
        "released after the bound"
    );
    assert_eq!(backend.memory().deferred_bytes(), 0);
    let now = backend
        .memory()
        .read_device(a.ptr(), a.len(), WAIT)
        .unwrap();
    assert!(now == expect, "memory equals one execution of each launch");
}
