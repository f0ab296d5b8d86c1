//! The simulator's injected faults through the C ABI (SPEC §10): armed per agent, their hit
//! counts, cleared per simulator.

use replay_mock::FaultId;

use super::convert::{agent_of, decode_fault};
use super::state::runtime;
use crate::checked::{guard, non_null, read_versioned, write_out};
use crate::state::library;
use crate::sys::*;

/// Arms a fault on an agent.
///
/// # Safety
///
/// 1. `fault` is NULL (refused) or points to a `kreplay_sim_fault_t` whose `size` bytes are
///    readable.
/// 2. `fault_id` is NULL (not written) or valid for a write of a `u64`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_fault_inject(
    sim: kreplay_sim_t,
    agent: u32,
    fault: *const kreplay_sim_fault_t,
    fault_id: *mut u64,
) -> kreplay_status_t {
    guard("kreplay_sim_fault_inject", || {
        library()?;
        // SAFETY: the caller's item 1.
        let f = unsafe { read_versioned(fault, "fault", first_version::SIM_FAULT)? };
        let (fault, mode) = decode_fault(&f)?;
        let rt = runtime(sim)?;
        let agent = agent_of(&rt, agent)?;
        let id = rt.inject(agent, fault, mode);
        if fault_id.is_null() {
            return Ok(());
        }
        // SAFETY: non-null (checked) and writable (caller, item 2).
        unsafe { write_out(fault_id, "fault_id", id.0) }
    })
}

/// How often an injected fault fired.
///
/// # Safety
///
/// 1. `hits` is NULL (refused) or valid for a write of a `u32`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_fault_hits(
    sim: kreplay_sim_t,
    fault_id: u64,
    hits: *mut u32,
) -> kreplay_status_t {
    guard("kreplay_sim_fault_hits", || {
        library()?;
        non_null(hits, "hits")?;
        let n = runtime(sim)?.fault_hits(FaultId(fault_id));
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(hits, "hits", n) }
    })
}

/// Disarms every fault of the simulator.
///
/// # Safety
///
/// No preconditions (the handle is checked).
#[no_mangle]
pub extern "C" fn kreplay_sim_fault_clear(sim: kreplay_sim_t) -> kreplay_status_t {
    guard("kreplay_sim_fault_clear", || {
        runtime(sim)?.gpu().clear_faults();
        Ok(())
    })
}
