//! The copy wrappers (SPEC §6 steps 4 and 6): what `OnLoad` installs on the async-copy
//! entries, core `hsa_memory_copy` and AMD `hsa_amd_memory_fill`, and the copy fence they
//! record on ([`crate::tracker::copy_fence`]).
//!
//! | entry | reported |
//! |---|---|
//! | AMD `hsa_amd_memory_async_copy` (and `_on_engine`, `_rect`) | a copy in flight on the copy fence ([`crate::tracker::fence`], [`copy_fence`]), submitted holding the reader side of every GPU agent it writes |
//! | core `hsa_memory_copy`, AMD `hsa_amd_memory_fill` | nothing recorded; the call runs holding the reader side of every GPU agent it writes |
//!
//! **Writes that are not replayed** (SPEC §6 step 4): copies and fills take
//! [`replay_core::ReplayService::enter_write`] for each GPU agent they write (the destination's
//! owner, and every GPU for host memory or an unknown destination) across their submission, so
//! one started while a window holds that agent waits for the window to end (an asynchronous
//! copy's completion signal fires later, a synchronous call returns later), and the copy fence
//! sees the asynchronous ones until they complete. Tool work is not gated: a tool callback's
//! own thread, and the async-events thread while a callback of that agent's window runs; so a
//! tool callback must not wait for a copy another thread starts on that agent (it waits for the
//! window, which waits for the callback). Not gated either, because no entry of this table
//! sees them: device work written to a queue created before `OnLoad` (not intercepted) and
//! writes by other processes.

use std::ffi::c_void;

use replay_core::{AgentId, MemoryClass};

use super::entry::{original_entry, originals, quietly};
use crate::state::{self, backend, Originals};
use crate::sys::{self, hsa_status_t};
use crate::tracker::{agent, copy_fence, gpu_agents};

/// The GPU agents whose replay windows a write to `dst` must not overlap (SPEC §6 step 4): a
/// restore there would undo it. `dst`'s owner where the tracker knows it, a GPU the caller
/// names for it, and every GPU agent for host memory (any GPU's window may capture host memory
/// an argument points into) or for an address nobody knows.
fn written_agents(o: &Originals, dst: Option<u64>, named: &[sys::hsa_agent_t]) -> Vec<AgentId> {
    let tracker = &backend().tracker;
    let mut ids: Vec<AgentId> = Vec::new();
    let mut host = dst.is_none();
    if let Some(dst) = dst {
        for a in tracker.agents() {
            if let Some(r) = tracker.lookup(a, dst) {
                host |= r.class.contains(MemoryClass::PINNED_HOST);
                ids.push(a);
            }
        }
    }
    for &h in named {
        let info = agent(o, h);
        match info.device {
            Some(sys::HSA_DEVICE_TYPE_GPU) => ids.push(info.id),
            _ => host = true,
        }
    }
    if host || ids.is_empty() {
        ids.extend(gpu_agents(o));
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The reader side of every agent in `ids` (in id order), held by the caller across a write
/// that is not replayed. Blocks while a window holds one of them (the write then lands after
/// that window, never inside it where a restore would undo it). Tool work is never blocked: a
/// thread inside a tool callback gets an open gate from the service, and so does the runtime's
/// async-events thread while a callback of that agent's window runs (work a tool launched
/// reaches it there, as its dispatches do).
fn enter_writes(ids: &[AgentId]) -> Vec<replay_core::WriteGate> {
    let Some(svc) = state::service() else {
        return Vec::new();
    };
    if !svc.is_active() && svc.open_windows() == 0 {
        return Vec::new();
    }
    let on_async = state::on_async_thread();
    ids.iter()
        .filter(|&&id| !(on_async && svc.agent_gate(id).in_callback()))
        .map(|&id| svc.enter_write(id))
        .collect()
}

/// The agents a write to `dst` is gated on ([`written_agents`]) and their gates, held by the
/// caller; none when the bookkeeping panicked (logged; the call goes through).
fn gate_write(
    o: &Originals,
    what: &str,
    dst: Option<u64>,
    named: &[sys::hsa_agent_t],
) -> (Vec<AgentId>, Vec<replay_core::WriteGate>) {
    let mut out = (Vec::new(), Vec::new());
    quietly(what, || {
        let ids = written_agents(o, dst, named);
        let gates = enter_writes(&ids);
        out = (ids, gates);
    });
    out
}

/// Wrapper of core `hsa_memory_copy` (synchronous): the copy runs holding the reader side of
/// every agent it writes, so no window's restore undoes it.
///
/// # Safety
///
/// The runtime's contract for `hsa_memory_copy`.
pub(crate) unsafe extern "C" fn memory_copy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
) -> hsa_status_t {
    let (o, copy) = match original_entry(|o| o.memory_copy) {
        Ok(v) => v,
        Err(st) => return st,
    };
    let _gates = gate_write(&o, "hsa_memory_copy", Some(dst as u64), &[]);
    // SAFETY: the original entry with the caller's arguments.
    unsafe { copy(dst, src, size) }
}

/// Wrapper of AMD `hsa_amd_memory_fill` (synchronous): gated as [`memory_copy`].
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_fill`.
pub(crate) unsafe extern "C" fn memory_fill(
    ptr: *mut c_void,
    value: u32,
    count: usize,
) -> hsa_status_t {
    let (o, fill) = match original_entry(|o| o.memory_fill) {
        Ok(v) => v,
        Err(st) => return st,
    };
    let _gates = gate_write(&o, "hsa_amd_memory_fill", Some(ptr as u64), &[]);
    // SAFETY: the original entry with the caller's arguments.
    unsafe { fill(ptr, value, count) }
}

/// Records a copy on the fence before it is submitted (with the agents it touches and those
/// it writes); returns the ticket.
fn fence_record(
    o: &Originals,
    agents: &[sys::hsa_agent_t],
    written: &[AgentId],
    signal: sys::hsa_signal_t,
) -> Option<u64> {
    let mut ticket = None;
    quietly("an async copy", || {
        let mut ids: Vec<AgentId> = agents.iter().map(|&a| agent(o, a).id).collect();
        ids.extend_from_slice(written);
        ids.sort_unstable();
        ids.dedup();
        let value = if signal.handle == 0 {
            0
        } else {
            // SAFETY: the original `hsa_signal_load_relaxed` on the caller's (valid) signal.
            unsafe { (o.signal_load_relaxed)(signal) }
        };
        ticket = copy_fence().record(&ids, signal.handle, value);
    });
    ticket
}

/// Forgets a copy the runtime refused.
fn fence_cancel(st: hsa_status_t, ticket: Option<u64>) {
    if st != sys::HSA_STATUS_SUCCESS {
        quietly("a refused async copy", || copy_fence().cancel(ticket));
    }
}

/// Submits an async copy through `submit`: gated on the agents it writes ([`gate_write`] on
/// `dst` and `agents[0]`), which are held across the submission, and recorded on the fence
/// with `agents` first, so the fence sees the copy until it ends; forgotten if refused.
fn submit_copy(
    o: &Originals,
    dst: Option<u64>,
    agents: &[sys::hsa_agent_t],
    signal: sys::hsa_signal_t,
    submit: impl FnOnce() -> hsa_status_t,
) -> hsa_status_t {
    let (written, _gates) = gate_write(o, "an async copy", dst, &agents[..1]);
    let ticket = fence_record(o, agents, &written, signal);
    let st = submit();
    fence_cancel(st, ticket);
    st
}

/// Wrapper of AMD `hsa_amd_memory_async_copy`: the copy is recorded on the copy fence.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_async_copy`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn async_copy(
    dst: *mut c_void,
    dst_agent: sys::hsa_agent_t,
    src: *const c_void,
    src_agent: sys::hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const sys::hsa_signal_t,
    completion_signal: sys::hsa_signal_t,
) -> hsa_status_t {
    let o = match originals() {
        Ok(o) => o,
        Err(st) => return st,
    };
    let agents = [dst_agent, src_agent];
    // SAFETY: the original entry with the caller's arguments.
    let submit = || unsafe {
        (o.async_copy)(
            dst,
            dst_agent,
            src,
            src_agent,
            size,
            num_dep_signals,
            dep_signals,
            completion_signal,
        )
    };
    submit_copy(&o, Some(dst as u64), &agents, completion_signal, submit)
}

/// Wrapper of AMD `hsa_amd_memory_async_copy_on_engine` (major 2).
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_async_copy_on_engine`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn async_copy_on_engine(
    dst: *mut c_void,
    dst_agent: sys::hsa_agent_t,
    src: *const c_void,
    src_agent: sys::hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const sys::hsa_signal_t,
    completion_signal: sys::hsa_signal_t,
    engine_id: u32,
    force_copy_on_sdma: bool,
) -> hsa_status_t {
    let (o, copy) = match original_entry(|o| o.async_copy_on_engine) {
        Ok(v) => v,
        Err(st) => return st,
    };
    let agents = [dst_agent, src_agent];
    // SAFETY: the original entry with the caller's arguments.
    let submit = || unsafe {
        copy(
            dst,
            dst_agent,
            src,
            src_agent,
            size,
            num_dep_signals,
            dep_signals,
            completion_signal,
            engine_id,
            force_copy_on_sdma,
        )
    };
    submit_copy(&o, Some(dst as u64), &agents, completion_signal, submit)
}

/// Wrapper of AMD `hsa_amd_memory_async_copy_rect`.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_async_copy_rect`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn async_copy_rect(
    dst: *const c_void,
    dst_offset: *const c_void,
    src: *const c_void,
    src_offset: *const c_void,
    range: *const c_void,
    copy_agent: sys::hsa_agent_t,
    dir: u32,
    num_dep_signals: u32,
    dep_signals: *const sys::hsa_signal_t,
    completion_signal: sys::hsa_signal_t,
) -> hsa_status_t {
    let (o, copy) = match original_entry(|o| o.async_copy_rect) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // The destination sits in an opaque pitched pointer: every GPU agent is gated.
    // SAFETY: the original entry with the caller's arguments.
    let submit = || unsafe {
        copy(
            dst,
            dst_offset,
            src,
            src_offset,
            range,
            copy_agent,
            dir,
            num_dep_signals,
            dep_signals,
            completion_signal,
        )
    };
    submit_copy(&o, None, &[copy_agent], completion_signal, submit)
}
