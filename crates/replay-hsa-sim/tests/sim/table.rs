//! The API table: its versions and entries, agents, pools, allocation, pointer info, signals.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use replay_hsa::sys::{self, v2, Entry};
use replay_hsa_sim::client::typed;
use replay_hsa_sim::{SimConfig, SimHsa};

use crate::harness::api;

#[test]
fn table_has_current_major_versions_and_no_null_entry() {
    let mut sim = SimHsa::new(SimConfig::default());
    let root = sim.table();
    // SAFETY: the sim's root table, alive with `sim`.
    let r = unsafe { *root };
    assert_eq!(r.version.major_id, 3);
    assert_eq!(
        r.version.minor_id as usize,
        std::mem::size_of::<v2::HsaApiTable>()
    );
    // SAFETY: the sub-tables the root points to, alive with `sim`.
    let (core, amd) = unsafe { (&*r.core_, &*r.amd_ext_) };
    assert_eq!(
        (core.version.major_id, core.version.minor_id as usize),
        (2, std::mem::size_of::<v2::CoreApiTable>())
    );
    assert_eq!(
        (amd.version.major_id, amd.version.minor_id as usize),
        (2, std::mem::size_of::<v2::AmdExtTable>())
    );
    let check = |base: *const u8, offsets: Vec<(&str, usize)>| {
        for (name, off) in offsets {
            // SAFETY: `off` is the offset of a nullable function-pointer field.
            let e = unsafe { base.add(off).cast::<Entry>().read() };
            assert!(e.is_some(), "{name} is NULL");
        }
    };
    check(
        (core as *const v2::CoreApiTable).cast(),
        v2::CoreApiTable::entry_offsets(),
    );
    check(
        (amd as *const v2::AmdExtTable).cast(),
        v2::AmdExtTable::entry_offsets(),
    );
    // An entry that is not simulated answers an error status.
    // SAFETY: `hsa_soft_queue_create`'s slot, called with no arguments: the stub ignores them.
    let get_info: unsafe extern "C" fn(u32, *mut c_void) -> u32 =
        unsafe { typed(core.hsa_soft_queue_create_fn) };
    assert_eq!(
        // SAFETY: arguments are ignored by the stub.
        unsafe { get_info(0, std::ptr::null_mut()) },
        replay_hsa_sim::STATUS_NOT_SIMULATED
    );
}

unsafe extern "C" fn collect_agent(a: sys::hsa_agent_t, data: *mut c_void) -> u32 {
    // SAFETY: `data` is the `Vec` the test passed.
    unsafe { (*data.cast::<Vec<sys::hsa_agent_t>>()).push(a) };
    0
}

unsafe extern "C" fn collect_pool(p: sys::hsa_amd_memory_pool_t, data: *mut c_void) -> u32 {
    // SAFETY: `data` is the `Vec` the test passed.
    unsafe { (*data.cast::<Vec<sys::hsa_amd_memory_pool_t>>()).push(p) };
    0
}

#[test]
fn agents_pools_allocation_and_pointer_info() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let mut agents: Vec<sys::hsa_agent_t> = Vec::new();
    // SAFETY: a callback collecting into `agents`.
    let st =
        unsafe { (api.iterate_agents)(Some(collect_agent), (&mut agents as *mut Vec<_>).cast()) };
    assert_eq!(st, 0);
    let devices: Vec<u32> = agents
        .iter()
        .map(|a| {
            let mut d = u32::MAX;
            assert_eq!(
                // SAFETY: HSA_AGENT_INFO_DEVICE writes 4 bytes.
                unsafe {
                    (api.agent_get_info)(
                        *a,
                        sys::HSA_AGENT_INFO_DEVICE,
                        (&mut d as *mut u32).cast(),
                    )
                },
                0
            );
            d
        })
        .collect();
    assert_eq!(
        devices,
        [
            sys::HSA_DEVICE_TYPE_CPU,
            sys::HSA_DEVICE_TYPE_GPU,
            sys::HSA_DEVICE_TYPE_GPU
        ]
    );

    let flags_of = |agent: sys::hsa_agent_t| -> Vec<(sys::hsa_amd_memory_pool_t, u32)> {
        let mut pools: Vec<sys::hsa_amd_memory_pool_t> = Vec::new();
        assert_eq!(
            // SAFETY: a callback collecting into `pools`.
            unsafe {
                (api.iterate_pools)(
                    agent,
                    Some(collect_pool),
                    (&mut pools as *mut Vec<_>).cast(),
                )
            },
            0
        );
        pools
            .into_iter()
            .map(|p| {
                let mut f = 0u32;
                assert_eq!(
                    // SAFETY: GLOBAL_FLAGS writes 4 bytes.
                    unsafe {
                        (api.pool_get_info)(
                            p,
                            sys::HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                            (&mut f as *mut u32).cast(),
                        )
                    },
                    0
                );
                (p, f)
            })
            .collect()
    };
    let cpu = flags_of(agents[0]);
    let gpu = flags_of(agents[1]);
    assert_eq!(
        cpu.iter().map(|x| x.1).collect::<Vec<_>>(),
        [3, 2],
        "kernarg, fine"
    );
    assert_eq!(
        gpu.iter().map(|x| x.1).collect::<Vec<_>>(),
        [4, 2],
        "coarse, fine"
    );

    let p = api.alloc(gpu[0].0, 1000);
    let mut info = sys::hsa_amd_pointer_info_t::default();
    // SAFETY: a valid out-struct with its size set.
    let st = unsafe {
        (api.pointer_info)(
            p.add(10).cast(),
            &mut info,
            None,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(st, 0);
    assert_eq!(info.type_, sys::HSA_EXT_POINTER_TYPE_HSA);
    assert_eq!(info.agentBaseAddress, p.cast());
    assert_eq!(info.sizeInBytes, 1000);
    assert_eq!(info.agentOwner, agents[1]);
    // SAFETY: a pointer from the pool allocator.
    assert_eq!(unsafe { (api.pool_free)(p.cast()) }, 0);
    let mut info = sys::hsa_amd_pointer_info_t::default();
    // SAFETY: as above.
    unsafe {
        (api.pointer_info)(
            p.cast(),
            &mut info,
            None,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(info.type_, sys::HSA_EXT_POINTER_TYPE_UNKNOWN, "freed");
}

#[test]
fn signal_wait_times_out_and_wakes() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let s = api.signal(1);
    let start = Instant::now();
    // SAFETY: a live signal; 20 ms timeout hint.
    let v = unsafe { (api.signal_wait_scacquire)(s, 0, 0, 20_000_000, 0) };
    assert_eq!(v, 1);
    assert!(start.elapsed() >= Duration::from_millis(19));
    let store = api.signal_store_screlease;
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        // SAFETY: a live signal.
        unsafe { store(s, 0) };
    });
    assert_eq!(api.wait_zero(s), 0);
    t.join().unwrap();
    // SAFETY: a live signal.
    assert_eq!(unsafe { (api.signal_destroy)(s) }, 0);
}
