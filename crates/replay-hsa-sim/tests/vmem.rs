//! The simulated `hsa_amd_vmem_*` entries (SPEC §7.1 row, §9.1; issue 14), called the way a
//! HIP runtime calls them: reserve, handle create / release / retain, map, set and get access,
//! unmap, address free, export / import, the properties of a handle, and what
//! `hsa_amd_pointer_info` and kernels see of each.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use replay_hsa::sys::{self, hsa_status_t};
use replay_hsa_sim::client::{dispatch, typed, Client};
use replay_hsa_sim::vmem::{
    MemoryAccessDesc, HSA_ACCESS_PERMISSION_NONE, HSA_ACCESS_PERMISSION_RO,
    HSA_ACCESS_PERMISSION_RW,
};
use replay_hsa_sim::{PoolKind, SimConfig, SimHsa};

type Handle = sys::hsa_amd_vmem_alloc_handle_t;

/// The vmem entries, typed as `hsa_ext_amd.h` declares them.
struct Vmem {
    reserve: unsafe extern "C" fn(*mut *mut c_void, usize, u64, u64) -> hsa_status_t,
    reserve_align: unsafe extern "C" fn(*mut *mut c_void, usize, u64, u64, u64) -> hsa_status_t,
    free: unsafe extern "C" fn(*mut c_void, usize) -> hsa_status_t,
    create: unsafe extern "C" fn(
        sys::hsa_amd_memory_pool_t,
        usize,
        u32,
        u64,
        *mut Handle,
    ) -> hsa_status_t,
    release: unsafe extern "C" fn(Handle) -> hsa_status_t,
    map: unsafe extern "C" fn(*mut c_void, usize, usize, Handle, u64) -> hsa_status_t,
    unmap: unsafe extern "C" fn(*mut c_void, usize) -> hsa_status_t,
    set_access:
        unsafe extern "C" fn(*mut c_void, usize, *const MemoryAccessDesc, usize) -> hsa_status_t,
    get_access: unsafe extern "C" fn(*mut c_void, *mut u32, sys::hsa_agent_t) -> hsa_status_t,
    export: unsafe extern "C" fn(*mut i32, Handle, u64) -> hsa_status_t,
    import: unsafe extern "C" fn(i32, *mut Handle) -> hsa_status_t,
    retain: unsafe extern "C" fn(*mut Handle, *mut c_void) -> hsa_status_t,
    properties:
        unsafe extern "C" fn(Handle, *mut sys::hsa_amd_memory_pool_t, *mut u32) -> hsa_status_t,
}

fn vmem(sim: &SimHsa) -> Vmem {
    let a = sim.amd();
    // SAFETY: each entry is read as its C signature (hsa_ext_amd.h).
    unsafe {
        Vmem {
            reserve: typed(a.hsa_amd_vmem_address_reserve_fn),
            reserve_align: typed(a.hsa_amd_vmem_address_reserve_align_fn),
            free: typed(a.hsa_amd_vmem_address_free_fn),
            create: typed(a.hsa_amd_vmem_handle_create_fn),
            release: typed(a.hsa_amd_vmem_handle_release_fn),
            map: typed(a.hsa_amd_vmem_map_fn),
            unmap: typed(a.hsa_amd_vmem_unmap_fn),
            set_access: typed(a.hsa_amd_vmem_set_access_fn),
            get_access: typed(a.hsa_amd_vmem_get_access_fn),
            export: typed(a.hsa_amd_vmem_export_shareable_handle_fn),
            import: typed(a.hsa_amd_vmem_import_shareable_handle_fn),
            retain: typed(a.hsa_amd_vmem_retain_alloc_handle_fn),
            properties: typed(a.hsa_amd_vmem_get_alloc_properties_from_handle_fn),
        }
    }
}

const OK: hsa_status_t = sys::HSA_STATUS_SUCCESS;
const CHUNK: usize = 4096;

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

    fn map(&self, va: *mut u8, size: usize, offset: usize, h: Handle) -> hsa_status_t {
        // SAFETY: the entry checks the range and the handle.
        unsafe { (self.map)(va.cast(), size, offset, h, 0) }
    }

    fn unmap(&self, va: *mut u8, size: usize) -> hsa_status_t {
        // SAFETY: the entry checks the range.
        unsafe { (self.unmap)(va.cast(), size) }
    }

    fn set_access(&self, va: *mut u8, size: usize, agent: sys::hsa_agent_t, perms: u32) {
        let d = MemoryAccessDesc {
            permissions: perms,
            agent_handle: agent,
        };
        // SAFETY: one descriptor.
        assert_eq!(unsafe { (self.set_access)(va.cast(), size, &d, 1) }, OK);
    }

    fn get_access(&self, va: *mut u8, agent: sys::hsa_agent_t) -> u32 {
        let mut p = u32::MAX;
        // SAFETY: a valid out pointer.
        assert_eq!(unsafe { (self.get_access)(va.cast(), &mut p, agent) }, OK);
        p
    }
}

/// Dispatches `kernel` with `args` on a fresh queue of `agent`; true when it completed, false
/// when it faulted (the queue's error path: its completion signal is never decremented).
fn run(sim: &SimHsa, api: &Client, agent: sys::hsa_agent_t, kernel: u64, args: &[u64]) -> bool {
    let kernarg = api.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    for (i, a) in args.iter().enumerate() {
        // SAFETY: 64 bytes of host-visible kernarg memory, at most 8 words.
        unsafe { kernarg.cast::<u64>().add(i).write(*a) };
    }
    let faults = sim.faults().len();
    let q = api.queue(agent);
    let done = api.signal(1);
    api.submit(q, dispatch(kernel, kernarg, done));
    let start = Instant::now();
    loop {
        if api.load(done) == 0 {
            return true;
        }
        if sim.faults().len() > faults {
            return false;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the kernel ran");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A kernel adding `arg1` to the `u64` at `arg0`.
fn add_kernel(sim: &SimHsa) -> u64 {
    sim.register_kernel("vmem_add", |d| {
        let p = d.arg(0)?;
        let v = d.arg(1)?;
        let old = d.read_u64(p)?;
        d.write_u64(p, old + v)?;
        Ok(())
    })
}

/// A kernel reading the `u64` at `arg0` into the `u64` at `arg1`.
fn load_kernel(sim: &SimHsa) -> u64 {
    sim.register_kernel("vmem_load", |d| {
        let v = d.read_u64(d.arg(0)?)?;
        d.write_u64(d.arg(1)?, v)?;
        Ok(())
    })
}

fn read(p: *const u8) -> u64 {
    // SAFETY: the test's mapped (host) memory, at least 8 bytes, mapped now.
    unsafe { std::ptr::read_volatile(p.cast::<u64>()) }
}

#[test]
fn reserve_map_access_unmap_remap_and_free() {
    let sim = SimHsa::new(SimConfig::default());
    let api = Client::new(&sim);
    let v = vmem(&sim);
    let gpu = sim.gpu_agents()[0];
    let pool = sim.pool(0, PoolKind::DeviceCoarse);
    let va = v.reserve(2 * CHUNK);
    // Reserved, nothing mapped.
    let info = api.pointer_info(va);
    assert_eq!(info.type_, sys::HSA_EXT_POINTER_TYPE_RESERVED_ADDR);
    assert_eq!(
        (info.agentBaseAddress as usize, info.sizeInBytes),
        (va as usize, 2 * CHUNK)
    );
    let h = v.create(pool, CHUNK);
    let (mut p, mut t) = (sys::hsa_amd_memory_pool_t::default(), u32::MAX);
    // SAFETY: valid out pointers.
    assert_eq!(unsafe { (v.properties)(h, &mut p, &mut t) }, OK);
    assert_eq!((p, t), (pool, 0));
    // Outside the reservation, or past the handle: refused.
    // SAFETY: only the runtime's bookkeeping is touched.
    assert_ne!(v.map(unsafe { va.add(CHUNK + 8) }, CHUNK, 0, h), OK);
    assert_ne!(v.map(va, CHUNK, 8, h), OK);
    assert_eq!(v.map(va, CHUNK, 0, h), OK);
    let info = api.pointer_info(va);
    assert_eq!(info.type_, sys::HSA_EXT_POINTER_TYPE_HSA_VMEM);
    assert_eq!(
        (info.agentBaseAddress as usize, info.sizeInBytes),
        (va as usize, CHUNK)
    );
    assert_eq!(info.agentOwner, gpu);
    assert_eq!(
        info.global_flags,
        sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
    );
    // No access until set.
    assert_eq!(v.get_access(va, gpu), HSA_ACCESS_PERMISSION_NONE);
    let add = add_kernel(&sim);
    assert!(!run(&sim, &api, gpu, add, &[va as u64, 5]), "faults");
    v.set_access(va, CHUNK, gpu, HSA_ACCESS_PERMISSION_RW);
    assert_eq!(v.get_access(va, gpu), HSA_ACCESS_PERMISSION_RW);
    assert!(run(&sim, &api, gpu, add, &[va as u64, 5]));
    assert_eq!(read(va), 5);
    // The handle keeps its bytes across an unmap and a map elsewhere in the range.
    let mut retained = Handle::default();
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { (v.retain)(&mut retained, va.cast()) }, OK);
    assert_eq!(retained, h);
    // A range that cuts the mapping is refused; the whole one is unmapped.
    assert_ne!(v.unmap(va, CHUNK / 2), OK);
    assert_eq!(v.unmap(va, CHUNK), OK);
    assert_eq!(
        api.pointer_info(va).type_,
        sys::HSA_EXT_POINTER_TYPE_RESERVED_ADDR
    );
    assert_ne!(v.unmap(va, CHUNK), OK, "nothing mapped there");
    // SAFETY: inside the reservation.
    let second = unsafe { va.add(CHUNK) };
    assert_eq!(v.map(second, CHUNK, 0, h), OK);
    assert_eq!(
        v.get_access(second, gpu),
        HSA_ACCESS_PERMISSION_NONE,
        "new mapping"
    );
    v.set_access(second, CHUNK, gpu, HSA_ACCESS_PERMISSION_RW);
    assert_eq!(read(second), 5, "the handle's bytes");
    // Released twice (created, retained) while mapped: the memory lives until unmapped.
    // SAFETY: live handles.
    unsafe {
        assert_eq!((v.release)(h), OK);
        assert_eq!((v.release)(h), OK);
    }
    assert!(run(&sim, &api, gpu, add, &[second as u64, 1]));
    assert_eq!(read(second), 6);
    // Freeing the reservation unmaps what is left; the handle is gone with it.
    // SAFETY: the reservation's base and size.
    assert_eq!(unsafe { (v.free)(va.cast(), 2 * CHUNK) }, OK);
    assert_eq!(
        api.pointer_info(va).type_,
        sys::HSA_EXT_POINTER_TYPE_UNKNOWN
    );
    // SAFETY: a released handle: the entry answers an error.
    assert_ne!(unsafe { (v.release)(h) }, OK);
    // Aligned reservations.
    let mut aligned = std::ptr::null_mut();
    // SAFETY: a valid out pointer.
    let st = unsafe { (v.reserve_align)(&mut aligned, CHUNK, 0, 1 << 16, 0) };
    assert_eq!(st, OK);
    assert_eq!(aligned as usize % (1 << 16), 0);
    // SAFETY: its base and size.
    assert_eq!(unsafe { (v.free)(aligned, CHUNK) }, OK);
}

#[test]
fn kernels_of_an_agent_without_access_fault() {
    let sim = SimHsa::new(SimConfig::default());
    let api = Client::new(&sim);
    let v = vmem(&sim);
    let gpus = sim.gpu_agents();
    let va = v.reserve(CHUNK);
    let h = v.create(sim.pool(1, PoolKind::DeviceFine), CHUNK);
    assert_eq!(v.map(va, CHUNK, 0, h), OK);
    assert_eq!(
        api.pointer_info(va).global_flags,
        sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
    );
    // Read-write for the second GPU only, read-only for the first.
    v.set_access(va, CHUNK, gpus[1], HSA_ACCESS_PERMISSION_RW);
    let add = add_kernel(&sim);
    let load = load_kernel(&sim);
    let out = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 8);
    assert!(!run(&sim, &api, gpus[0], add, &[va as u64, 1]), "no access");
    assert!(run(&sim, &api, gpus[1], add, &[va as u64, 7]));
    v.set_access(va, CHUNK, gpus[0], HSA_ACCESS_PERMISSION_RO);
    assert_eq!(v.get_access(va, gpus[0]), HSA_ACCESS_PERMISSION_RO);
    assert!(!run(&sim, &api, gpus[0], add, &[va as u64, 1]), "read-only");
    assert!(run(&sim, &api, gpus[0], load, &[va as u64, out as u64]));
    assert_eq!(read(out), 7);
    assert_eq!(read(va), 7, "the faulting kernels wrote nothing");
    assert_eq!(v.unmap(va, CHUNK), OK);
    // SAFETY: the reservation's base; the handle is live.
    unsafe {
        assert_eq!((v.free)(va.cast(), CHUNK), OK);
        assert_eq!((v.release)(h), OK);
    }
}

#[test]
fn an_imported_handle_holds_the_exporters_bytes() {
    let sim = SimHsa::new(SimConfig::default());
    let api = Client::new(&sim);
    let v = vmem(&sim);
    let gpu = sim.gpu_agents()[0];
    let pool = sim.pool(0, PoolKind::DeviceCoarse);
    let va = v.reserve(2 * CHUNK);
    let h = v.create(pool, CHUNK);
    assert_eq!(v.map(va, CHUNK, 0, h), OK);
    v.set_access(va, CHUNK, gpu, HSA_ACCESS_PERMISSION_RW);
    assert!(run(&sim, &api, gpu, add_kernel(&sim), &[va as u64, 9]));
    assert_eq!(v.unmap(va, CHUNK), OK);
    let mut fd = -1;
    // SAFETY: a valid out pointer, a live handle.
    assert_eq!(unsafe { (v.export)(&mut fd, h, 0) }, OK);
    let mut imported = Handle::default();
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { (v.import)(fd, &mut imported) }, OK);
    assert_ne!(imported, h);
    // SAFETY: inside the reservation.
    let at = unsafe { va.add(CHUNK) };
    assert_eq!(v.map(at, CHUNK, 0, imported), OK);
    v.set_access(at, CHUNK, gpu, HSA_ACCESS_PERMISSION_RW);
    assert_eq!(read(at), 9);
    // SAFETY: an unknown descriptor: the entry answers an error.
    assert_ne!(unsafe { (v.import)(-1, &mut imported) }, OK);
    // SAFETY: the reservation's base and size; live handles.
    unsafe {
        assert_eq!((v.free)(va.cast(), 2 * CHUNK), OK);
        assert_eq!((v.release)(h), OK);
        assert_eq!((v.release)(imported), OK);
    }
}
