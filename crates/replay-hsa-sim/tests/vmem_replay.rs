//! `replay-hsa`'s virtual-memory wrappers (SPEC §7.1 row; issue 14) on the simulated runtime,
//! through `OnLoad`: a kernel writing into a mapped range replays with memory equal to one
//! execution under each scope and restore mode; a range unmapped (whole, or one mapping of
//! several) or remapped between capture and restore is never written; a mapping without access
//! for this agent, and one of an imported handle, decline `untracked_memory`.
//!
//! The backend and the service are process-wide, so the tests of this file run one at a time
//! (`SERIAL`) and share one tool whose state each test resets.

// Not every shared helper is used by every test file.
#[allow(dead_code)]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use replay_core::{
    Operation, Outcome, OutcomeRecord, Phase, Policy, ReplayPayload, ReplayService, ReplayTool,
    RestoreMode, Scope, UserData,
};
use replay_hsa::sys::{self, hsa_status_t};
use replay_hsa_sim::{PoolKind, SimHsa};

use common::*;

type Handle = sys::hsa_amd_vmem_alloc_handle_t;
type Hook = Box<dyn Fn() + Send + Sync>;

const OK: hsa_status_t = sys::HSA_STATUS_SUCCESS;
const CHUNK: usize = 4096;

/// The tool: `passes` passes; `after_pass0` runs in PASS EXIT of pass 0 (between the capture
/// and the first restore).
#[derive(Default)]
struct Tool {
    passes: AtomicU64,
    after_pass0: Mutex<Option<Hook>>,
}

impl ReplayTool for Tool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                let n = self.passes.load(Ordering::SeqCst);
                p.replay_pass_count = Some(Arc::new(move |_, _| n));
            }
            (Operation::Pass, Phase::Exit) if p.current_pass == 0 => {
                if let Some(f) = self.after_pass0.lock().unwrap().take() {
                    f();
                }
            }
            _ => {}
        }
    }
}

struct World {
    service: Arc<ReplayService>,
    tool: Arc<Tool>,
    records: Arc<Mutex<Vec<OutcomeRecord>>>,
}

fn policy(scope: Scope, restore: RestoreMode) -> Policy {
    Policy {
        drain_timeout: Duration::from_secs(5),
        pass_timeout: Duration::from_secs(5),
        scope,
        restore,
        ..Policy::default()
    }
}

fn world(scope: Scope, restore: RestoreMode) -> (&'static World, MutexGuard<'static, ()>) {
    static SERIAL: Mutex<()> = Mutex::new(());
    static WORLD: OnceLock<World> = OnceLock::new();
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = WORLD.get_or_init(|| {
        let tool = Arc::new(Tool::default());
        let service = install_service(policy(Scope::All, RestoreMode::Full), tool.clone());
        let records = Arc::new(Mutex::new(Vec::new()));
        let sink = records.clone();
        service.set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
            sink.lock().unwrap().push(r.clone())
        })));
        World {
            service,
            tool,
            records,
        }
    });
    w.service.set_policy(policy(scope, restore)).unwrap();
    w.tool.passes.store(0, Ordering::SeqCst);
    *w.tool.after_pass0.lock().unwrap() = None;
    w.records.lock().unwrap().clear();
    (w, guard)
}

impl World {
    /// The one outcome record of the test's dispatch.
    fn record(&self) -> OutcomeRecord {
        let r = self.records.lock().unwrap();
        assert_eq!(r.len(), 1, "{r:?}");
        r[0].clone()
    }
}

/// The vmem entries as the application sees them after `OnLoad` (the wrappers).
#[derive(Clone, Copy)]
struct Vmem {
    reserve: unsafe extern "C" fn(*mut *mut std::ffi::c_void, usize, u64, u64) -> hsa_status_t,
    free: sys::VmemAddressFreeFn,
    create: sys::VmemHandleCreateFn,
    release: sys::VmemHandleReleaseFn,
    map: sys::VmemMapFn,
    unmap: sys::VmemUnmapFn,
    set_access: sys::VmemSetAccessFn,
    export: unsafe extern "C" fn(*mut i32, Handle, u64) -> hsa_status_t,
    import: sys::VmemImportShareableFn,
}

fn vmem(sim: &SimHsa) -> Vmem {
    let a = sim.amd();
    // SAFETY: each entry is read as its C signature (hsa_ext_amd.h).
    unsafe {
        Vmem {
            reserve: typed(a.hsa_amd_vmem_address_reserve_fn),
            free: typed(a.hsa_amd_vmem_address_free_fn),
            create: typed(a.hsa_amd_vmem_handle_create_fn),
            release: typed(a.hsa_amd_vmem_handle_release_fn),
            map: typed(a.hsa_amd_vmem_map_fn),
            unmap: typed(a.hsa_amd_vmem_unmap_fn),
            set_access: typed(a.hsa_amd_vmem_set_access_fn),
            export: typed(a.hsa_amd_vmem_export_shareable_handle_fn),
            import: typed(a.hsa_amd_vmem_import_shareable_handle_fn),
        }
    }
}

impl Vmem {
    fn reserve(&self, size: usize) -> *mut u8 {
        let mut va = std::ptr::null_mut();
        // SAFETY: a valid out pointer.
        assert_eq!(unsafe { (self.reserve)(&mut va, size, 0, 0) }, OK);
        va.cast()
    }

    fn create(&self, pool: sys::hsa_amd_memory_pool_t, size: usize) -> Handle {
        let mut h = Handle::default();
        // SAFETY: a valid out pointer.
        assert_eq!(unsafe { (self.create)(pool, size, 0, 0, &mut h) }, OK);
        h
    }

    fn map(&self, va: *mut u8, size: usize, h: Handle) {
        // SAFETY: the entry checks the range and the handle.
        assert_eq!(unsafe { (self.map)(va.cast(), size, 0, h, 0) }, OK);
    }

    fn unmap(&self, va: *mut u8, size: usize) {
        // SAFETY: the entry checks the range.
        assert_eq!(unsafe { (self.unmap)(va.cast(), size) }, OK);
    }

    fn set_access(&self, va: *mut u8, size: usize, agent: sys::hsa_agent_t, perms: u32) {
        let d = sys::hsa_amd_memory_access_desc_t {
            permissions: perms,
            agent_handle: agent,
        };
        // SAFETY: one descriptor.
        assert_eq!(unsafe { (self.set_access)(va.cast(), size, &d, 1) }, OK);
    }

    /// A fresh chunk of GPU `gpu`'s coarse pool mapped at `va`, read-write for that GPU,
    /// holding `init`.
    fn map_rw(&self, sim: &SimHsa, gpu: usize, va: *mut u8, init: u64) -> Handle {
        let h = self.create(sim.pool(gpu, PoolKind::DeviceCoarse), CHUNK);
        self.map(va, CHUNK, h);
        let agent = sim.gpu_agents()[gpu];
        self.set_access(va, CHUNK, agent, sys::HSA_ACCESS_PERMISSION_RW);
        write(va, init);
        h
    }

    fn free(&self, va: *mut u8, size: usize, handles: &[Handle]) {
        // SAFETY: the reservation's base and size; live handles.
        unsafe {
            assert_eq!((self.free)(va.cast(), size), OK);
            for &h in handles {
                assert_eq!((self.release)(h), OK);
            }
        }
    }
}

fn write(p: *mut u8, v: u64) {
    // SAFETY: the test's mapped (host) memory of at least 8 bytes, or a live allocation.
    unsafe { std::ptr::write_volatile(p.cast::<u64>(), v) }
}

fn peek(p: *const u8) -> u64 {
    // SAFETY: the test's reserved (host) memory of at least 8 bytes: mapped or not, it stays
    // allocated while the reservation lives.
    unsafe { std::ptr::read_volatile(p.cast::<u64>()) }
}

/// Kernel arguments `words` from the CPU's kernarg pool.
fn args(sim: &SimHsa, api: &Api, words: &[u64]) -> *mut u8 {
    let a = api.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    for (i, w) in words.iter().enumerate() {
        // SAFETY: 64 bytes of host-visible kernarg memory, at most 8 words.
        unsafe { a.cast::<u64>().add(i).write(*w) };
    }
    a
}

/// `rmw` on the `u64` at each of the first `n` arguments; argument `i` only while
/// `mapped[i]` holds, where it is given (a range the tool unmaps is not touched again, as a
/// kernel that faulted would not be replayed).
fn rmw_all(sim: &SimHsa, n: u64, mapped: Vec<Arc<AtomicBool>>) -> u64 {
    sim.register_kernel("vmem_rmw", move |d| {
        for i in 0..n {
            if mapped
                .get(i as usize)
                .is_some_and(|m| !m.load(Ordering::SeqCst))
            {
                continue;
            }
            let p = d.arg(i)?;
            let v = d.read_u64(p)?;
            d.write_u64(p, rmw(v))?;
        }
        Ok(())
    })
}

/// Dispatches `kernel` with `args` on GPU `gpu` with `passes` passes; the outcome record.
fn run(
    w: &World,
    sim: &SimHsa,
    api: &Api,
    gpu: usize,
    kernel: u64,
    args: *mut u8,
    passes: u64,
) -> OutcomeRecord {
    w.tool.passes.store(passes, Ordering::SeqCst);
    let q = api.queue(sim.gpu_agents()[gpu]);
    let done = api.signal(1);
    api.submit(q, dispatch(kernel, args, done));
    assert_eq!(api.wait_zero(done), 0);
    api.destroy(q);
    assert!(sim.faults().is_empty(), "{:?}", sim.faults());
    w.record()
}

fn assert_replayed(r: &OutcomeRecord, passes: u32) {
    assert_eq!(
        (r.outcome, r.reason.as_str(), r.executed_passes),
        (Outcome::Replayed, "none", passes),
        "{r:?}"
    );
}

fn a_kernel_writing_a_mapping_replays(scope: Scope, restore: RestoreMode) {
    let (w, _g) = world(scope, restore);
    w.service.start().unwrap();
    let (sim, api) = sim();
    let v = vmem(&sim);
    // Two chunks of one reserved range (an expandable segment); the kernel writes both.
    let va = v.reserve(2 * CHUNK);
    // SAFETY: inside the reservation.
    let second = unsafe { va.add(CHUNK) };
    let h1 = v.map_rw(&sim, 0, va, 5);
    let h2 = v.map_rw(&sim, 0, second, 8);
    let k = rmw_all(&sim, 2, Vec::new());
    let a = args(&sim, &api, &[va as u64, second as u64]);
    let r = run(w, &sim, &api, 0, k, a, 4);
    assert_replayed(&r, 4);
    assert_eq!(r.scope, scope);
    assert_eq!(
        (peek(va), peek(second)),
        (rmw(5), rmw(8)),
        "memory equals one execution"
    );
    assert!(r.captured_regions >= 2, "both mappings captured: {r:?}");
    v.free(va, 2 * CHUNK, &[h1, h2]);
    w.service.stop().unwrap();
}

#[test]
fn a_kernel_writing_a_mapping_replays_under_all_full() {
    a_kernel_writing_a_mapping_replays(Scope::All, RestoreMode::Full);
}

#[test]
fn a_kernel_writing_a_mapping_replays_under_all_dirty() {
    a_kernel_writing_a_mapping_replays(Scope::All, RestoreMode::Dirty);
}

#[test]
fn a_kernel_writing_a_mapping_replays_under_arguments_full() {
    a_kernel_writing_a_mapping_replays(Scope::Arguments, RestoreMode::Full);
}

#[test]
fn a_kernel_writing_a_mapping_replays_under_arguments_dirty() {
    a_kernel_writing_a_mapping_replays(Scope::Arguments, RestoreMode::Dirty);
}

/// How the tool changes the mapping at `second` after pass 0.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    /// The whole reservation's mappings are unmapped (both chunks).
    UnmapAll,
    /// Only the second chunk's mapping (one of the run) is unmapped.
    UnmapOne,
    /// The second chunk is unmapped and another handle mapped there, read-write.
    Remap,
}

fn a_mapping_changed_after_capture_is_never_written(change: Change) {
    let (w, _g) = world(Scope::All, RestoreMode::Full);
    w.service.start().unwrap();
    let (sim, api) = sim();
    let v = vmem(&sim);
    let gpu = sim.gpu_agents()[0];
    let (buf, _) = buffer_and_args(&sim, &api, 0, 3);
    let va = v.reserve(2 * CHUNK);
    // SAFETY: inside the reservation.
    let second = unsafe { va.add(CHUNK) };
    let h1 = v.map_rw(&sim, 0, va, 5);
    let h2 = v.map_rw(&sim, 0, second, 8);
    let h3 = v.create(sim.pool(0, PoolKind::DeviceCoarse), CHUNK);
    let flags: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::new(AtomicBool::new(true))).collect();
    let k = rmw_all(&sim, 3, flags.clone());
    // `buf` first: written every pass; the mappings while they are mapped.
    let a = args(&sim, &api, &[buf as u64, va as u64, second as u64]);
    let (va_at, second_at) = (va as u64, second as u64);
    *w.tool.after_pass0.lock().unwrap() = Some(Box::new(move || {
        let (va, second) = (va_at as *mut u8, second_at as *mut u8);
        flags[2].store(false, Ordering::SeqCst);
        match change {
            Change::UnmapAll => {
                flags[1].store(false, Ordering::SeqCst);
                v.unmap(va, CHUNK);
                v.unmap(second, CHUNK);
            }
            Change::UnmapOne => v.unmap(second, CHUNK),
            Change::Remap => {
                v.unmap(second, CHUNK);
                v.map(second, CHUNK, h3);
                v.set_access(second, CHUNK, gpu, sys::HSA_ACCESS_PERMISSION_RW);
            }
        }
    }));
    let r = run(w, &sim, &api, 0, k, a, 3);
    assert_replayed(&r, 3);
    assert_eq!(read(buf), rmw(3), "memory equals one execution");
    // What pass 0 wrote to a range changed after it stays: no restore wrote the old contents
    // back; what stayed mapped was restored and written once more.
    match change {
        Change::UnmapAll => {
            assert_eq!((peek(va), peek(second)), (rmw(5), rmw(8)));
        }
        Change::UnmapOne => {
            assert_eq!((peek(va), peek(second)), (rmw(5), rmw(8)));
            v.unmap(va, CHUNK);
        }
        Change::Remap => {
            assert_eq!(peek(second), 0, "the new mapping holds its handle's bytes");
            assert_eq!(peek(va), rmw(5));
            v.unmap(second, CHUNK);
            v.unmap(va, CHUNK);
        }
    }
    // The handles unmapped hold what pass 0 wrote.
    v.map(va, CHUNK, h2);
    v.set_access(va, CHUNK, gpu, sys::HSA_ACCESS_PERMISSION_RW);
    assert_eq!(peek(va), rmw(8), "the unmapped handle was never written");
    v.free(va, 2 * CHUNK, &[h1, h2, h3]);
    w.service.stop().unwrap();
}

#[test]
fn a_range_unmapped_whole_after_capture_is_never_written() {
    a_mapping_changed_after_capture_is_never_written(Change::UnmapAll);
}

#[test]
fn a_range_unmapped_in_part_after_capture_is_never_written() {
    a_mapping_changed_after_capture_is_never_written(Change::UnmapOne);
}

#[test]
fn a_range_remapped_after_capture_is_never_written() {
    a_mapping_changed_after_capture_is_never_written(Change::Remap);
}

fn assert_declined(r: &OutcomeRecord) {
    assert_eq!(
        (r.outcome, r.reason.as_str()),
        (Outcome::Declined, "untracked_memory"),
        "{r:?}"
    );
}

#[test]
fn a_mapping_without_access_for_this_agent_declines() {
    let (w, _g) = world(Scope::Arguments, RestoreMode::Full);
    w.service.start().unwrap();
    let (sim, api) = sim();
    let v = vmem(&sim);
    let gpus = sim.gpu_agents();
    let va = v.reserve(CHUNK);
    // GPU 1's memory, read-write for GPU 1 and read-only for GPU 0; GPU 0's kernel only
    // reads it (into `out`).
    let h = v.create(sim.pool(1, PoolKind::DeviceCoarse), CHUNK);
    v.map(va, CHUNK, h);
    v.set_access(va, CHUNK, gpus[1], sys::HSA_ACCESS_PERMISSION_RW);
    v.set_access(va, CHUNK, gpus[0], sys::HSA_ACCESS_PERMISSION_NONE);
    write(va, 4);
    let (out, _) = buffer_and_args(&sim, &api, 0, 0);
    let k = sim.register_kernel("vmem_peek", |d| {
        let _ = d.arg(0)?;
        let v = d.read_u64(d.arg(1)?)?;
        d.write_u64(d.arg(1)?, v + 1)?;
        Ok(())
    });
    let a = args(&sim, &api, &[va as u64, out as u64]);
    let r = run(w, &sim, &api, 0, k, a, 3);
    assert_declined(&r);
    assert_eq!(read(out), 1, "ran once");
    v.unmap(va, CHUNK);
    v.free(va, CHUNK, &[h]);
    w.service.stop().unwrap();
}

#[test]
fn a_mapping_of_an_imported_handle_declines() {
    let (w, _g) = world(Scope::Arguments, RestoreMode::Full);
    w.service.start().unwrap();
    let (sim, api) = sim();
    let v = vmem(&sim);
    let va = v.reserve(CHUNK);
    let h = v.create(sim.pool(0, PoolKind::DeviceCoarse), CHUNK);
    let mut fd = -1;
    // SAFETY: a valid out pointer, a live handle.
    assert_eq!(unsafe { (v.export)(&mut fd, h, 0) }, OK);
    let mut imported = Handle::default();
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { (v.import)(fd, &mut imported) }, OK);
    v.map(va, CHUNK, imported);
    v.set_access(
        va,
        CHUNK,
        sim.gpu_agents()[0],
        sys::HSA_ACCESS_PERMISSION_RW,
    );
    write(va, 6);
    let k = rmw_all(&sim, 1, Vec::new());
    let a = args(&sim, &api, &[va as u64]);
    let r = run(w, &sim, &api, 0, k, a, 3);
    assert_declined(&r);
    assert_eq!(peek(va), rmw(6), "ran once");
    v.unmap(va, CHUNK);
    v.free(va, CHUNK, &[h, imported]);
    w.service.stop().unwrap();
}
