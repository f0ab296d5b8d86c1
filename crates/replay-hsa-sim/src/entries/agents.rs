//! The system and agent entries of the simulated core table (SPEC §9.1): `hsa_init`,
//! `hsa_system_get_info`, `hsa_iterate_agents` and `hsa_agent_get_info`.

use std::ffi::c_void;

use replay_hsa::sys::{self, hsa_status_t};

use super::boundary::{guard, put};
use crate::state::{self, REG};

fn name64(s: &str) -> [u8; 64] {
    let mut b = [0u8; 64];
    let n = s.len().min(63);
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
    b
}

pub(super) extern "C" fn hsa_init() -> hsa_status_t {
    sys::HSA_STATUS_SUCCESS
}

/// `hsa_system_get_info`: version (1.1), timestamp and its frequency
/// ([`crate::SimConfig::timestamp_hz`], the unit of timeout hints), the longest signal wait.
pub(super) unsafe extern "C" fn hsa_system_get_info(attr: u32, value: *mut c_void) -> hsa_status_t {
    guard!("hsa_system_get_info", sys::HSA_STATUS_ERROR, {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let hz = state::timestamp_hz();
        let now = (EPOCH
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos()
            * u128::from(hz)
            / 1_000_000_000) as u64;
        // SAFETY: in each arm, `value` points to the attribute's documented type.
        unsafe {
            match attr {
                0 => put(value, 1u16),
                1 => put(value, 1u16),
                2 => put(value, now),
                3 => put(value, hz),
                4 => put(value, u64::MAX),
                _ => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}

type AgentCallback = Option<unsafe extern "C" fn(sys::hsa_agent_t, *mut c_void) -> hsa_status_t>;

pub(super) unsafe extern "C" fn hsa_iterate_agents(
    cb: AgentCallback,
    data: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_iterate_agents", sys::HSA_STATUS_ERROR, {
        let Some(cb) = cb else {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let Some(inst) = state::current() else {
            return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
        };
        for a in &inst.agents {
            // SAFETY: the application's callback with its data.
            let st = unsafe { cb(sys::hsa_agent_t { handle: a.handle }, data) };
            if st != sys::HSA_STATUS_SUCCESS {
                return st;
            }
        }
        sys::HSA_STATUS_SUCCESS
    })
}

pub(super) unsafe extern "C" fn hsa_agent_get_info(
    agent: sys::hsa_agent_t,
    attr: u32,
    value: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_agent_get_info", sys::HSA_STATUS_ERROR, {
        let Some(a) = REG.agents.lock().get(&agent.handle).cloned() else {
            return sys::HSA_STATUS_ERROR_INVALID_AGENT;
        };
        let gpu = a.device == sys::HSA_DEVICE_TYPE_GPU;
        let cfg = a
            .instance
            .upgrade()
            .map(|i| i.config.clone())
            .unwrap_or_default();
        // SAFETY: in each arm, `value` points to the attribute's type (the caller's contract).
        unsafe {
            match attr {
                0 => put(value, name64(&a.name)),
                1 => put(value, name64(if gpu { "AMD" } else { "CPU" })),
                2 => put(value, if gpu { 1u32 } else { 2u32 }),
                6 => put(value, 64u32),
                12 => put(value, if gpu { 128u32 } else { 0 }),
                13 => put(value, if gpu { cfg.queue_min_size } else { 0 }),
                14 => put(value, if gpu { cfg.queue_max_size } else { 0 }),
                15 => put(value, 1u32),
                16 => put(value, a.node),
                sys::HSA_AGENT_INFO_DEVICE => put(value, a.device),
                // One physical memory backs both device pools on a GPU; the simulator keeps
                // their capacities apart and reports the coarse pool's, where device
                // allocations and other processes' use land.
                sys::HSA_AMD_AGENT_INFO_MEMORY_AVAIL if gpu => {
                    let pools = REG.pools.lock();
                    let avail: usize = a
                        .pools
                        .iter()
                        .filter_map(|p| pools.get(p))
                        .filter(|p| p.kind == state::PoolKind::DeviceCoarse)
                        .map(|p| p.available())
                        .sum();
                    put(value, avail as u64)
                }
                _ => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}
