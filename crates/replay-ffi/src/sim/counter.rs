//! The simulator's counters through the C ABI (SPEC §10): one counter group per execution,
//! selected per agent, read per dispatch.

use std::ffi::{c_char, CStr};
use std::mem::size_of;

use replay_core::DispatchId;
use replay_mock::CounterGroup;

use super::convert::{agent_of, decode_group, group_code};
use super::state::runtime;
use crate::checked::{guard, non_null, write_versioned, Error};
use crate::state::library;
use crate::sys::*;

/// Selects the counter group an agent collects from now on.
///
/// # Safety
///
/// No preconditions (the handle and values are checked).
#[no_mangle]
pub extern "C" fn kreplay_sim_counter_select(
    sim: kreplay_sim_t,
    agent: u32,
    group: kreplay_sim_counter_group_t,
) -> kreplay_status_t {
    guard("kreplay_sim_counter_select", || {
        library()?;
        let group = decode_group(group)?;
        let rt = runtime(sim)?;
        let agent = agent_of(&rt, agent)?;
        rt.gpu().counters().select(agent, group);
        Ok(())
    })
}

/// What one execution of a dispatch collected.
///
/// # Safety
///
/// 1. `sample` is NULL (refused) or points to a `kreplay_sim_counter_sample_t` whose `size`
///    field is readable and whose `size` bytes are writable.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_counter_read(
    sim: kreplay_sim_t,
    dispatch_id: u64,
    pass: u32,
    sample: *mut kreplay_sim_counter_sample_t,
) -> kreplay_status_t {
    guard("kreplay_sim_counter_read", || {
        library()?;
        non_null(sample, "sample")?;
        let rt = runtime(sim)?;
        let counters = rt.gpu().counters();
        let id = DispatchId(dispatch_id);
        let found = if pass == KREPLAY_SIM_LAST_EXECUTION {
            counters.last(id)
        } else {
            counters.read(id, pass)
        };
        let s = found.ok_or_else(|| {
            Error::NotFound(if pass == KREPLAY_SIM_LAST_EXECUTION {
                format!("dispatch {dispatch_id} has no execution on this simulator")
            } else {
                format!("dispatch {dispatch_id} has no pass {pass} on this simulator")
            })
        })?;
        let value = kreplay_sim_counter_sample_t {
            size: size_of::<kreplay_sim_counter_sample_t>() as u64,
            agent_id: s.agent.0,
            dispatch_id: s.dispatch.0,
            pass: s.pass.unwrap_or(KREPLAY_SIM_ORDINARY_RUN),
            group: group_code(s.group),
            value: s.value,
            gpu_seconds: s.gpu_seconds,
        };
        // SAFETY: the caller's item 1; `size` is the first field.
        unsafe { write_versioned(sample, "sample", first_version::SIM_COUNTER_SAMPLE, value) }
    })
}

/// The name of a counter group; static, never NULL.
///
/// # Safety
///
/// No preconditions.
#[no_mangle]
pub extern "C" fn kreplay_sim_counter_group_name(
    group: kreplay_sim_counter_group_t,
) -> *const c_char {
    let s: &CStr = match decode_group(group) {
        Ok(Some(CounterGroup::WorkItems)) => c"work_items",
        Ok(Some(CounterGroup::BytesRead)) => c"bytes_read",
        Ok(Some(CounterGroup::BytesWritten)) => c"bytes_written",
        Ok(Some(CounterGroup::Instructions)) => c"instructions",
        Ok(None) => c"none",
        Err(_) => c"unknown",
    };
    s.as_ptr()
}
