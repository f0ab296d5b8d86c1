//! Capturing one dispatch on the simulated HSA runtime (SPEC §13), for the standalone-replay
//! tests of this crate and of `kreplay` (which includes this file by path): a fresh simulated
//! runtime with `replay-hsa`'s `OnLoad` installed and the kernels of `replay_hsa_sim::kernels`
//! defined, a code object loaded through a code object reader as a HIP program loads one, the
//! arguments placed in the memory each test names, and a replay service whose tool asks for
//! two passes and a capture of the first.
//!
//! The backend and its service are process-wide: callers hold [`serial`] while they capture
//! and replay.

use std::sync::{Arc, Mutex, MutexGuard};

use replay_core::{Capture, CaptureRequest, Operation, Phase, Policy, Scope};
use replay_hsa::sys;
use replay_hsa_sim::client::{self, dispatch, typed, Client};
use replay_hsa_sim::{CodeObject, PoolKind, SimConfig, SimHsa};

/// One at a time: the backend and the service are the process's.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where an argument's memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// GPU 0's coarse-grained pool.
    DeviceCoarse,
    /// GPU 0's fine-grained pool.
    DeviceFine,
    /// The CPU's fine-grained (pinned host) pool.
    HostFine,
    /// A virtual-memory mapping on GPU 0, read-write for GPU 0, reserved at an address of
    /// its own far from the heap and the libraries' mappings ([`vmem_hint`]), which a later
    /// process (or this one, once [`Captured::release_vmem`] freed it) can have again.
    Vmem,
}

/// One argument word of the kernel.
#[derive(Debug, Clone)]
pub enum Arg {
    /// A 64-byte buffer in `Place` whose first word holds the value.
    Buffer(Place, u64),
    /// The code object's module variable of that name (8 bytes), holding the value.
    Variable(&'static str, u64),
    /// A 64-byte coarse device buffer whose first word points at another 64-byte buffer, in
    /// `Place`, holding the value (a pointer stored in memory, not in the argument block).
    PointerTo(Place, u64),
}

/// A captured dispatch and what the capturing run left alive.
pub struct Captured {
    /// The capture.
    pub capture: Capture,
    /// Per argument: the address its word holds.
    pub addresses: Vec<u64>,
    /// The runtime it ran on (alive: its memory still holds the captured addresses).
    pub sim: SimHsa,
    /// The virtual-memory reservations of `Place::Vmem` arguments: (va, size).
    pub vmem: Vec<(u64, u64)>,
}

impl Captured {
    /// Unmaps and frees the `Place::Vmem` arguments' reservations, so their addresses are
    /// free again in this process.
    pub fn release_vmem(&mut self) {
        let a = self.sim.amd();
        // SAFETY: the AMD table's entries with their C signatures.
        let (unmap, free): (sys::VmemUnmapFn, sys::VmemAddressFreeFn) = unsafe {
            (
                typed(a.hsa_amd_vmem_unmap_fn),
                typed(a.hsa_amd_vmem_address_free_fn),
            )
        };
        for (va, size) in self.vmem.drain(..) {
            // SAFETY: a mapping and reservation this capture made, of this size.
            unsafe {
                assert_eq!(unmap(va as *mut _, size as usize), 0);
                assert_eq!(free(va as *mut _, size as usize), 0);
            }
        }
    }
}

type Loading = (
    unsafe extern "C" fn(*const u8, usize, *mut u64) -> u32,
    unsafe extern "C" fn(u32, u32, *const i8, *mut u64) -> u32,
    unsafe extern "C" fn(u64, sys::hsa_agent_t, u64, *const i8, *mut u64) -> u32,
    unsafe extern "C" fn(u64, *const i8) -> u32,
    unsafe extern "C" fn(u64, *const i8, *const sys::hsa_agent_t, *mut u64) -> u32,
    unsafe extern "C" fn(u64, u32, *mut std::ffi::c_void) -> u32,
);

/// The next address a `Place::Vmem` reservation asks for: a range of this process's own in
/// an area no allocator of the process uses (above the heap, below the mappings).
pub fn vmem_hint() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    0x5e00_0000_0000 + (u64::from(std::process::id()) % 4096) * 0x1_0000_0000 + n * 0x10_0000
}

/// A 64-byte block of `place` on the simulated runtime `sim`.
fn alloc(sim: &SimHsa, api: &Client, place: Place, vmem: &mut Vec<(u64, u64)>) -> u64 {
    let pool = match place {
        Place::DeviceCoarse => sim.pool(0, PoolKind::DeviceCoarse),
        Place::DeviceFine => sim.pool(0, PoolKind::DeviceFine),
        Place::HostFine => sim.pool(0, PoolKind::HostFine),
        Place::Vmem => {
            let a = sim.amd();
            // SAFETY: the AMD table's entries with their C signatures.
            let (reserve, create, map, access): (
                sys::VmemAddressReserveFn,
                sys::VmemHandleCreateFn,
                sys::VmemMapFn,
                sys::VmemSetAccessFn,
            ) = unsafe {
                (
                    typed(a.hsa_amd_vmem_address_reserve_fn),
                    typed(a.hsa_amd_vmem_handle_create_fn),
                    typed(a.hsa_amd_vmem_map_fn),
                    typed(a.hsa_amd_vmem_set_access_fn),
                )
            };
            let size = 4096usize;
            let mut va = std::ptr::null_mut();
            let mut h = sys::hsa_amd_vmem_alloc_handle_t { handle: 0 };
            let desc = sys::hsa_amd_memory_access_desc_t {
                permissions: sys::HSA_ACCESS_PERMISSION_RW,
                agent_handle: sim.gpu_agents()[0],
            };
            // SAFETY: the entries' contracts with live out pointers.
            unsafe {
                assert_eq!(reserve(&mut va, size, vmem_hint(), 0), 0);
                assert_eq!(
                    create(sim.pool(0, PoolKind::DeviceCoarse), size, 0, 0, &mut h),
                    0
                );
                assert_eq!(map(va, size, 0, h, 0), 0);
                assert_eq!(access(va, size, &desc, 1), 0);
            }
            vmem.push((va as u64, size as u64));
            return va as u64;
        }
    };
    api.alloc(pool, 64) as u64
}

/// Runs kernel `kernel` (a body of `replay_hsa_sim::kernels`) once with `args` under scope
/// `scope` and returns its capture. The caller holds [`serial`].
pub fn capture(kernel: &str, args: &[Arg], scope: Scope) -> Captured {
    let results: Arc<Mutex<Vec<Capture>>> = Arc::default();
    let sink = results.clone();
    let tool = move |op: Operation,
                     ph: Phase,
                     p: &mut replay_core::ReplayPayload<'_>,
                     _: &mut replay_core::UserData| {
        match (op, ph) {
            (Operation::Config, Phase::Enter) => {
                p.replay_pass_count = Some(Arc::new(|_, _| 2));
            }
            (Operation::Pass, Phase::Enter) if p.current_pass == 0 => {
                let s = sink.clone();
                p.request_capture(CaptureRequest::new(Arc::new(move |c| match c {
                    Ok(c) => s.lock().unwrap().push(c),
                    Err(why) => panic!("not captured: {why}"),
                })));
            }
            _ => {}
        }
    };
    let svc = client::install_service(
        Policy {
            scope,
            ..Policy::default()
        },
        replay_core::Subscription::CONFIG | replay_core::Subscription::PASS,
        Arc::new(tool),
    );
    svc.start().unwrap();
    let (sim, api) = client::loaded(SimConfig::default());
    replay_hsa_sim::kernels::define(&sim);
    let gpu = sim.gpu_agents()[0];

    let mut co = CodeObject::new().kernel(&format!("{kernel}.kd"), 8 * args.len() as u32);
    for a in args {
        if let Arg::Variable(name, _) = a {
            co = co.variable(name, 8, false);
        }
    }
    let image: &'static [u8] = Box::leak(co.to_bytes().into_boxed_slice());
    // SAFETY: (each `typed`) the core table's entries with their C signatures.
    let (create_reader, create_exec, load, freeze, by_name, sym_info): Loading = unsafe {
        let c = sim.core();
        (
            typed(c.hsa_code_object_reader_create_from_memory_fn),
            typed(c.hsa_executable_create_alt_fn),
            typed(c.hsa_executable_load_agent_code_object_fn),
            typed(c.hsa_executable_freeze_fn),
            typed(c.hsa_executable_get_symbol_by_name_fn),
            typed(c.hsa_executable_symbol_get_info_fn),
        )
    };
    let (mut reader, mut exec, mut sym, mut object) = (0u64, 0u64, 0u64, 0u64);
    let symbol = std::ffi::CString::new(format!("{kernel}.kd")).unwrap();
    // SAFETY: the simulated entries with live out pointers; the image outlives the program.
    unsafe {
        assert_eq!(create_reader(image.as_ptr(), image.len(), &mut reader), 0);
        assert_eq!(create_exec(1, 0, std::ptr::null(), &mut exec), 0);
        assert_eq!(
            load(exec, gpu, reader, std::ptr::null(), std::ptr::null_mut()),
            0
        );
        assert_eq!(freeze(exec, std::ptr::null()), 0);
        assert_eq!(by_name(exec, symbol.as_ptr(), &gpu, &mut sym), 0);
        assert_eq!(
            sym_info(
                sym,
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                (&mut object as *mut u64).cast()
            ),
            0
        );
    }
    let mut vmem = Vec::new();
    let mut addresses: Vec<u64> = Vec::new();
    for a in args {
        let (at, value) = match *a {
            Arg::Buffer(place, v) => (alloc(&sim, &api, place, &mut vmem), v),
            Arg::Variable(name, v) => (sim.variable_address(name).expect("loaded"), v),
            Arg::PointerTo(place, v) => {
                let target = alloc(&sim, &api, place, &mut vmem);
                // SAFETY: simulated memory is host memory; a live block of 64 bytes.
                unsafe { (target as *mut u64).write_volatile(v) };
                (alloc(&sim, &api, Place::DeviceCoarse, &mut vmem), target)
            }
        };
        // SAFETY: simulated memory is host memory; `at` is a live block of at least 8 bytes.
        unsafe { (at as *mut u64).write_volatile(value) };
        addresses.push(at);
    }
    let block = api.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    for (i, w) in addresses.iter().enumerate() {
        // SAFETY: the kernarg block of 64 bytes.
        unsafe { block.cast::<u64>().add(i).write_volatile(*w) };
    }
    let q = api.queue(gpu);
    let done = api.signal(1);
    api.submit(q, dispatch(object, block, done));
    assert_eq!(api.wait_zero(done), 0);
    svc.stop().unwrap();
    let capture = results.lock().unwrap().pop().expect("captured");
    Captured {
        capture,
        addresses,
        sim,
        vmem,
    }
}
