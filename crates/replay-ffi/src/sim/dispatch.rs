//! Dispatches on the simulator through the C ABI (SPEC §10): `kreplay_sim_dispatch` submits
//! through the one replay service on the calling thread, `kreplay_sim_wait` waits and reports;
//! dispatches in flight are counted so shutdown can wait for a window running inside one.

use std::ffi::c_void;
use std::mem::size_of;
use std::sync::atomic::{AtomicUsize, Ordering};

use replay_core::Dim3;

use super::convert::{agent_of, sim_error, MAX_ARGS};
use super::state::{full, stale, tables, DispatchEntry};
use crate::checked::{
    check_versioned, guard, non_null, outcome_code, read_versioned, reason_code, write_out,
    write_versioned, Error,
};
use crate::state::library;
use crate::sys::*;

use super::module::run_pending_unloads;

/// `kreplay_sim_dispatch` calls running now: a replay window runs inside one, on its thread,
/// so `kreplay_shutdown` waits for them before it shuts the simulators down.
static DISPATCHES_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// One `kreplay_sim_dispatch` in flight until dropped.
struct DispatchInFlight;

impl DispatchInFlight {
    /// Counted before the call checks for shutdown (SeqCst, with the fence in
    /// `kreplay_shutdown`): either shutdown sees this call, or this call sees shutdown.
    fn enter() -> Self {
        DISPATCHES_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        Self
    }
}

impl Drop for DispatchInFlight {
    fn drop(&mut self) {
        DISPATCHES_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Number of `kreplay_sim_dispatch` calls running now.
pub(crate) fn dispatches_in_flight() -> usize {
    DISPATCHES_IN_FLIGHT.load(Ordering::SeqCst)
}

/// Tags the simulator dispatches this thread makes from now on as a node of a graph (NULL:
/// no tag), as a backend unrolling a graph does for its kernel nodes.
///
/// # Safety
///
/// 1. `node` is NULL or points to a `kreplay_graph_node_t` whose `size` field is readable and
///    whose `size` bytes are readable.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_graph_node_set(
    node: *const kreplay_graph_node_t,
) -> kreplay_status_t {
    guard("kreplay_sim_graph_node_set", || {
        library()?;
        let tag = if node.is_null() {
            None
        } else {
            // SAFETY: the caller's item 1 (not NULL here).
            let n: kreplay_graph_node_t =
                unsafe { read_versioned(node, "node", first_version::GRAPH_NODE)? };
            if n.graph == 0 {
                return Err(Error::BadArgument(
                    "`node->graph` is 0; graphs are numbered from 1".into(),
                ));
            }
            if n.serialized > 1 {
                return Err(Error::BadArgument(format!(
                    "`node->serialized` is {}; 0 or 1",
                    n.serialized
                )));
            }
            Some(replay_core::GraphNode {
                graph: n.graph,
                node: (n.node != KREPLAY_GRAPH_NODE_NONE).then_some(n.node),
                launch: n.launch,
                serialized: n.serialized == 1,
            })
        };
        replay_mock::set_graph_node(tag);
        Ok(())
    })
}

/// Launches a kernel through the replay service on this thread.
///
/// # Safety
///
/// 1. `args` is NULL (refused unless `args_size` is 0) or valid for reads of `args_size`
///    bytes.
/// 2. `dispatch` is NULL (the dispatch is not kept) or valid for a write of a
///    `kreplay_sim_dispatch_t`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kreplay_sim_dispatch(
    sim: kreplay_sim_t,
    agent: u32,
    queue: u32,
    kernel: kreplay_sim_kernel_t,
    args: *const c_void,
    args_size: usize,
    grid: kreplay_dim3_t,
    dispatch: *mut kreplay_sim_dispatch_t,
) -> kreplay_status_t {
    guard("kreplay_sim_dispatch", || {
        let _in_flight = DispatchInFlight::enter();
        let lib = library()?;
        if args_size > 0 {
            non_null(args, "args")?;
        }
        if args_size > MAX_ARGS {
            return Err(Error::BadArgument(format!(
                "`args_size` = {args_size} exceeds {MAX_ARGS} bytes"
            )));
        }
        if grid.x == 0 || grid.y == 0 || grid.z == 0 {
            return Err(Error::BadArgument(format!(
                "`grid` = {}x{}x{}; every dimension must be at least 1",
                grid.x, grid.y, grid.z
            )));
        }
        let (rt, _busy, k) = {
            let tables = tables().lock();
            let (rt, busy) = tables.dispatching(sim.handle)?;
            let k = tables
                .kernels
                .get(kernel.handle)
                .ok_or_else(|| stale("kernel", kernel.handle))?;
            if k.sim != sim.handle {
                return Err(Error::InvalidHandle(format!(
                    "kernel handle {:#x} belongs to another simulator",
                    kernel.handle
                )));
            }
            if let Some((_, a)) = k.module {
                if a.0 != u64::from(agent) {
                    return Err(Error::BadArgument(format!(
                        "kernel {:?} belongs to a module loaded on agent {a}; it cannot run on agent {agent}",
                        k.kernel.name
                    )));
                }
            }
            (rt, busy, k.kernel.clone())
        };
        let agent_id = agent_of(&rt, agent)?;
        let q = rt
            .queues(agent_id)
            .get(queue as usize)
            .copied()
            .ok_or_else(|| {
                Error::BadArgument(format!(
                    "agent {agent} has no queue {queue} ({} queues, numbered from 0)",
                    rt.queues(agent_id).len()
                ))
            })?;
        let bytes: &[u8] = if args_size == 0 {
            &[]
        } else {
            // SAFETY: non-null (checked) and readable for `args_size` bytes (caller, item 1);
            // args_size <= MAX_ARGS.
            unsafe { std::slice::from_raw_parts(args.cast::<u8>(), args_size) }
        };
        // No lock is held: the replay window runs here and calls the tool, which may call in.
        let completion = rt.dispatch(q, &k, bytes, Dim3::new(grid.x, grid.y, grid.z));
        // The window (if any) has closed: modules its callbacks unloaded go now.
        run_pending_unloads(lib);
        let completion = completion.map_err(sim_error)?;
        if dispatch.is_null() {
            return Ok(());
        }
        let record = completion.record();
        let handle = {
            let mut tables = tables().lock();
            tables.runtime(sim.handle)?;
            tables
                .dispatches
                .insert(DispatchEntry {
                    sim: sim.handle,
                    completion,
                    record,
                })
                .map_err(|_| full("dispatch"))?
        };
        // SAFETY: non-null (checked) and writable (caller, item 2).
        unsafe { write_out(dispatch, "dispatch", kreplay_sim_dispatch_t { handle }) }
    })
}

/// Waits for a dispatch to complete and releases its handle.
///
/// # Safety
///
/// 1. `result` is NULL (not written) or points to a `kreplay_sim_result_t` whose `size` field
///    is readable and whose `size` bytes are writable.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_wait(
    dispatch: kreplay_sim_dispatch_t,
    result: *mut kreplay_sim_result_t,
) -> kreplay_status_t {
    guard("kreplay_sim_wait", || {
        let _lib = library()?;
        if !result.is_null() {
            // Checked before the handle is consumed, so a bad `size` leaves it usable.
            // SAFETY: the caller's item 1.
            unsafe { check_versioned(result, "result", first_version::SIM_RESULT)? };
        }
        let entry = {
            let mut tables = tables().lock();
            tables.open()?;
            tables
                .dispatches
                .remove(dispatch.handle)
                .ok_or_else(|| stale("dispatch", dispatch.handle))?
        };
        // No lock is held while waiting.
        let waited = entry.completion.wait();
        if !result.is_null() {
            let r = entry.record.as_ref();
            let value = kreplay_sim_result_t {
                size: size_of::<kreplay_sim_result_t>() as u64,
                dispatch_id: r.map_or(0, |r| r.dispatch_id.0),
                outcome: r.map_or(KREPLAY_OUTCOME_NONE, |r| outcome_code(r.outcome)),
                reason: r.map_or(KREPLAY_REASON_NONE, |r| reason_code(r.reason)),
                executed_passes: r.map_or(0, |r| r.executed_passes),
                completions: entry.completion.fired(),
            };
            // SAFETY: the caller's item 1; `size` is the first field.
            unsafe {
                write_versioned(result, "result", first_version::SIM_RESULT, value)?;
            }
        }
        waited.map_err(|e| Error::Device(format!("the kernel failed: {e}")))
    })
}
