//! Simulated runtimes through the C ABI (SPEC §10): `kreplay_sim_create`, `_destroy` (which
//! waits, bounded, for dispatches running on the simulator) and `_synchronize`.

use std::sync::atomic::Ordering;

use super::convert::MAX_AGENTS;
use super::state::{ensure_shutdown_hook, full, runtime, tables, SimEntry};
use crate::checked::{guard, non_null, write_out, Error};
use crate::state::library;
use crate::sys::*;
use crate::tool::refuse_in_callback;

use super::module::run_pending_unloads;
use crate::wait::{wait_until_idle, window_wait_bounds};

/// Creates a simulated runtime.
///
/// # Safety
///
/// 1. `sim` is NULL (refused) or valid for a write of a `kreplay_sim_t`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_create(
    agent_count: u32,
    sim: *mut kreplay_sim_t,
) -> kreplay_status_t {
    guard("kreplay_sim_create", || {
        let lib = library()?;
        non_null(sim, "sim")?;
        if agent_count == 0 || agent_count > MAX_AGENTS {
            return Err(Error::BadArgument(format!(
                "`agent_count` = {agent_count}; a simulator has 1 to {MAX_AGENTS} agents"
            )));
        }
        {
            let mut tables = tables().lock();
            tables.open()?;
            ensure_shutdown_hook(&mut tables)?;
        }
        let rt = replay_mock::SimRuntime::builder()
            .clock(std::sync::Arc::clone(&lib.clock))
            .agents(agent_count as usize, replay_mock::AgentConfig::default())
            .service(std::sync::Arc::clone(&lib.service))
            .build();
        let inserted = {
            let mut tables = tables().lock();
            if tables.closed {
                Err(Error::ShutDown)
            } else {
                tables
                    .sims
                    .insert(SimEntry {
                        rt: rt.clone(),
                        in_flight: Default::default(),
                    })
                    .map_err(|_| full("simulator"))
            }
        };
        let handle = match inserted {
            Ok(h) => h,
            Err(e) => {
                rt.shutdown();
                return Err(e);
            }
        };
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(sim, "sim", kreplay_sim_t { handle }) }
    })
}

/// Destroys a simulated runtime: its kernels, modules and dispatches become invalid and its
/// worker threads are joined. A `kreplay_sim_dispatch` on it running on another thread (a
/// replay window inside it) is waited for first, bounded as shutdown's wait is: shutting the
/// runtime down under a window would fail its restore, which aborts.
///
/// # Safety
///
/// No preconditions (the handle is checked).
#[no_mangle]
pub extern "C" fn kreplay_sim_destroy(sim: kreplay_sim_t) -> kreplay_status_t {
    guard("kreplay_sim_destroy", || {
        let lib = library()?;
        refuse_in_callback()?;
        let (rt, in_flight) = tables().lock().remove_sim(sim.handle)?;
        // No lock is held while waiting: the dispatches' callbacks may call in.
        let idle = wait_until_idle(lib, "kreplay_sim_destroy", || {
            let n = in_flight.load(Ordering::SeqCst);
            (n != 0).then(|| format!("{n} dispatch(es) on the simulator still running"))
        });
        if let Err(what) = idle {
            let (bound, _) = window_wait_bounds(lib);
            // Shut down with the others at kreplay_shutdown, never under a running window.
            tables().lock().stragglers.push(rt);
            return Err(Error::Device(format!(
                "kreplay_sim_destroy waited {:.1} s and {what}; the handle is gone, the runtime \
                 is shut down at kreplay_shutdown()",
                bound.as_secs_f64()
            )));
        }
        // Joining waits for the workers, whose kernels never call in.
        rt.shutdown();
        Ok(())
    })
}

/// Waits until every queue and copy engine of the simulator completed what was submitted.
///
/// # Safety
///
/// No preconditions (the handle is checked).
#[no_mangle]
pub extern "C" fn kreplay_sim_synchronize(sim: kreplay_sim_t) -> kreplay_status_t {
    guard("kreplay_sim_synchronize", || {
        runtime(sim)?.wait_idle();
        run_pending_unloads(library()?);
        Ok(())
    })
}
