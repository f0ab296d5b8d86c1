//! The queue wrappers (SPEC §9.1): what `OnLoad` installs on `hsa_queue_create` /
//! `hsa_queue_destroy`, and the write interceptor registered on every queue they create, which
//! runs the replay window (SPEC §6) for a single kernel dispatch.
//!
//! `hsa_queue_create` is answered with an **intercepting queue** (the original
//! `hsa_amd_queue_intercept_create`) on which [`interceptor`] is registered; if the runtime
//! refuses either step the application gets a plain queue from the original entry, untouched.
//! Each intercepted queue keeps a [`QueueState`] in [`crate::queue`]'s registry: its agent,
//! its ring size, whether it is a **tool queue**, a **counting drain signal**, an estimate of
//! the hardware ring's occupancy, and the submissions parked while a window ran (below).
//!
//! ## The interceptor
//!
//! The runtime calls interceptors under the queue's lock, on the ringing thread or on its single
//! async-events thread (doorbells rung from inside an interceptor, overflow retries, device-side
//! enqueues). The interceptor therefore **never blocks**: whatever it cannot do now it parks.
//! The backend learns the async thread's identity by running a function there
//! (`hsa_amd_async_function`, at the first queue creation on each agent); a window never runs
//! there ([`crate::agent`]).
//!
//! - **Tool work** is recognised by where it was written, not by when it arrives: every packet
//!   on a tool queue (one created from inside a tool callback, or declared with
//!   [`crate::queue::mark_tool_queue`]) is tool work; it is never gated, never parked and
//!   never replayed (`reentrant_dispatch` for a dispatch), so a tool that waits for its own
//!   work in a callback is never blocked by the window it runs in. Packets on every other queue are the
//!   application's, whenever they arrive. Tool work written into an application queue is not
//!   recognised: it is parked while the window runs, like the application's; a submission
//!   parked on an application queue while a tool callback of the agent's window runs is named
//!   in a warning (once per queue) that points to `kreplay_hsa_mark_tool_queue`, so a callback
//!   waiting for it does not time out silently.
//! - A single kernel dispatch while the service is active goes to
//!   [`replay_core::ReplayService::submit`] through a [`crate::agent::QueueAgent`] bound to this
//!   call's `writer`, always as a forwarded submission, so the service only tries the agent's
//!   lock: a candidate takes the writer lock without waiting (before CONFIG), an ordinary one
//!   the reader side; while a window holds the agent the service answers `deferred`.
//! - Every other submission (several packets in one call, barriers, any packet while the
//!   service is off but a window may still be open) is written under the reader side of the
//!   agent's gate ([`replay_core::ReplayService::try_enter_write`]), so a restore never undoes
//!   it; while a window holds the gate it is parked.
//! - **Parked submissions** are kept per queue, in order, one entry per interceptor call. A
//!   queue with parked entries parks every later submission behind them (tool work excepted),
//!   so queue order holds. Each interceptor call on that queue first flushes them in order:
//!   a parked candidate goes to the service again (it gets its CONFIG and its outcome record),
//!   anything else is written under the reader side; the flush stops at the first entry that
//!   still cannot go. Two things guarantee a flush after the window: right after parking, the
//!   interceptor checks whether the window already ended and then kicks the queue itself; and
//!   the thread that ran a window, once `submit` returned (the lock released), **kicks** every
//!   queue of that agent with parked entries: it writes a no-op barrier-AND (no dependencies,
//!   no completion signal) into that queue's ring (reserving the slot by compare-and-swap on
//!   the write index, as the runtime's own producers do) and rings its doorbell, so the runtime
//!   calls the interceptor again (on its async thread, since the doorbell is rung from inside
//!   an interceptor). A candidate flushed on the async thread declines there (a window never
//!   runs on that thread, below) and runs once, with its record.
//! - **Completion tracking** and **ring space**: every packet goes through
//!   `queue::write`, which gives signal-less packets the queue's counting drain
//!   signal, and the window checks the ring's room before each packet it waits for
//!   ([`crate::queue`] documents both).
//! - Every entry catches panics. The interceptor's fallback keeps the application whole: if
//!   nothing of the submission ran, its packets are written unchanged; if a pass or the
//!   ordinary run was written but the application's completion was not, a barrier-AND with
//!   that completion signal is written, so the application never hangs.

use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use replay_core::{
    AgentId, Dim3, Dispatch, DispatchInfo, KernelId, KernelKey, Origin, QueueId, SubmissionKind,
};

use crate::agent::QueueAgent;
use crate::module::kernels;
use crate::queue::{self, Packet, QueueState, WriterFn};
use crate::state::{self, backend, Originals, QueueFns};
use crate::sys::{self, aql, hsa_status_t};

// ----- Queue creation -------------------------------------------------------------------------

/// Wrapper of `hsa_queue_create`: an intercepting queue with the write interceptor, or the
/// original queue if the runtime refuses interception.
///
/// # Safety
///
/// The runtime's contract for `hsa_queue_create`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn queue_create(
    agent: sys::hsa_agent_t,
    size: u32,
    type_: sys::hsa_queue_type32_t,
    callback: sys::QueueErrorCallback,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut sys::hsa_queue_t,
) -> hsa_status_t {
    let Some((o, q)) = state::queue_fns() else {
        return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let intercepted = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract, forwarded.
        unsafe {
            create_intercepted(
                &o,
                &q,
                agent,
                size,
                type_,
                callback,
                data,
                private_segment_size,
                group_segment_size,
                queue,
            )
        }
    }));
    match intercepted {
        Ok(Some(status)) => status,
        _ => {
            // SAFETY: the original entry with the caller's arguments.
            unsafe {
                (q.queue_create)(
                    agent,
                    size,
                    type_,
                    callback,
                    data,
                    private_segment_size,
                    group_segment_size,
                    queue,
                )
            }
        }
    }
}

/// `Some(status)` when the queue was created as an intercepting queue (or the caller's
/// arguments were refused); `None` to fall back to the original entry.
#[allow(clippy::too_many_arguments)]
unsafe fn create_intercepted(
    o: &Originals,
    q: &QueueFns,
    agent: sys::hsa_agent_t,
    size: u32,
    type_: sys::hsa_queue_type32_t,
    callback: sys::QueueErrorCallback,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    out: *mut *mut sys::hsa_queue_t,
) -> Option<hsa_status_t> {
    if out.is_null() {
        return None;
    }
    state::learn_async_thread(agent.handle, q);
    let mut p: *mut sys::hsa_queue_t = std::ptr::null_mut();
    // SAFETY: the original intercept-create with the caller's arguments and our out pointer.
    let st = unsafe {
        (q.intercept_create)(
            agent,
            size,
            type_,
            callback,
            data,
            private_segment_size,
            group_segment_size,
            &mut p,
        )
    };
    if st != sys::HSA_STATUS_SUCCESS || p.is_null() {
        log::warn!("[kernel-replay] hsa: hsa_amd_queue_intercept_create failed ({st:#x}); this queue is not intercepted");
        return None;
    }
    let (drain, sst) = match q.create_signal(0) {
        Ok(s) => (s, sys::HSA_STATUS_SUCCESS),
        Err(st) => (sys::hsa_signal_t::default(), st),
    };
    // SAFETY: `p` is the queue just created.
    let ring = u64::from(unsafe { (*p).size });
    let info = backend().agent(o, agent);
    let state = Arc::new(QueueState::new(
        p as usize,
        info,
        ring,
        drain,
        // Created by a tool from inside one of its callbacks: a tool queue.
        replay_core::locks::thread_in_callback(),
    ));
    let rst = if sst == sys::HSA_STATUS_SUCCESS {
        queue::register(state);
        // SAFETY: the original register entry on the queue just created; `data` is the
        // queue's address, looked up (never dereferenced) by the interceptor.
        unsafe { (q.intercept_register)(p, Some(interceptor), p.cast()) }
    } else {
        sst
    };
    if rst != sys::HSA_STATUS_SUCCESS {
        log::warn!("[kernel-replay] hsa: registering the interceptor failed ({rst:#x}); this queue is not intercepted");
        queue::unregister(p as usize);
        // SAFETY: the queue was created above and never handed out.
        unsafe { (q.queue_destroy)(p) };
        if sst == sys::HSA_STATUS_SUCCESS {
            // SAFETY: our signal, never used.
            unsafe { (q.signal_destroy)(drain) };
        }
        return None;
    }
    // SAFETY: `out` is non-NULL (checked above).
    unsafe { out.write(p) };
    Some(sys::HSA_STATUS_SUCCESS)
}

/// Wrapper of `hsa_queue_destroy`: forgets the queue's state, then destroys it.
///
/// # Safety
///
/// The runtime's contract for `hsa_queue_destroy`.
pub unsafe extern "C" fn queue_destroy(queue: *mut sys::hsa_queue_t) -> hsa_status_t {
    let Some((o, q)) = state::queue_fns() else {
        return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(st) = queue::unregister(queue as usize) {
            // SAFETY: the original load entry on our own signal.
            let outstanding = unsafe { (o.signal_load_relaxed)(st.drain_signal) };
            if outstanding == 0 {
                // SAFETY: our signal; no barrier of ours references it any more.
                unsafe { (q.signal_destroy)(st.drain_signal) };
            }
            let parked = st.parked();
            if parked > 0 {
                log::warn!("[kernel-replay] hsa: a queue was destroyed with {parked} packets parked; they are dropped");
            }
        }
    }));
    // SAFETY: the original entry with the caller's argument.
    unsafe { (q.queue_destroy)(queue) }
}

// ----- The interceptor ------------------------------------------------------------------------

/// The write interceptor registered on every intercepted queue.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_queue_intercept_handler`: `pkts` holds `count` packets,
/// `writer` is the chain's writer for this call, `data` the value registered (the queue).
pub unsafe extern "C" fn interceptor(
    pkts: *const c_void,
    count: u64,
    _user_index: u64,
    data: *mut c_void,
    writer: sys::PacketWriter,
) {
    let Some(writer) = writer else { return };
    if pkts.is_null() || count == 0 {
        return;
    }
    let packets: Vec<Packet> = (0..count as usize)
        .map(|i| {
            // SAFETY: the runtime's contract: `count` 64-byte packets (read unaligned).
            unsafe { pkts.cast::<Packet>().add(i).read_unaligned() }
        })
        .collect();
    let own_done = Cell::new(false);
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `writer` is this call's writer for the queue `data` names.
        unsafe { handle(&packets, data as usize, writer, &own_done) }
    }));
    let left = queue::take_progress();
    if r.is_err() {
        log::error!("[kernel-replay] hsa: the interceptor panicked");
        let st = queue::lookup(data as usize);
        let w = |pk: &[Packet]| {
            // SAFETY: this call's writer with packets of this queue.
            unsafe { writer(pk.as_ptr().cast(), pk.len() as u64) }
        };
        if let Some(p) = left {
            // The submission the panic interrupted.
            if !p.ran {
                w(&p.packets);
            } else if !p.delivered {
                let app = p.packets[0].completion_signal();
                let own = st.as_ref().map(|s| s.drain_signal);
                if app.handle != 0 && Some(app) != own {
                    log::error!("[kernel-replay] hsa: the dispatch's completion is signalled after the panic; its memory may not equal one execution");
                    w(&[Packet::barrier_and(app, true)]);
                }
            }
        }
        if !own_done.get() {
            // The panic came before this call's own packets were handled (flushing parked
            // ones): they run now, unchanged.
            w(&packets);
        }
    }
}

/// Whether the agent's window (if any) is over: its lock is free now.
fn window_over(svc: &replay_core::ReplayService, agent: AgentId) -> bool {
    svc.agent_gate(agent).lock.try_read().is_some()
}

/// What became of one submission.
enum Sent {
    /// Written (or run as the service decided).
    Done,
    /// Not now: a window holds the agent.
    Later,
}

/// # Safety
///
/// 1. `writer` is the writer of the interceptor call running on this thread for queue `key`.
unsafe fn handle(packets: &[Packet], key: usize, writer: WriterFn, own_done: &Cell<bool>) {
    let Some(st) = queue::lookup(key) else {
        own_done.set(true);
        // SAFETY: item 1.
        unsafe { writer(packets.as_ptr().cast(), packets.len() as u64) };
        return;
    };
    let Some((o, q)) = state::queue_fns() else {
        own_done.set(true);
        // SAFETY: item 1.
        unsafe { writer(packets.as_ptr().cast(), packets.len() as u64) };
        return;
    };
    let svc = state::service();
    let tool = st.is_tool() || replay_core::locks::thread_in_callback();

    // Parked submissions first, in order, as far as they can go now.
    let mut blocked = false;
    while let Some(next) = st.unpark() {
        // SAFETY: item 1.
        match unsafe { send(&st, &o, &q, writer, &next, svc.as_deref(), false, true) } {
            Sent::Done => {}
            Sent::Later => {
                st.park_first(next);
                blocked = true;
                break;
            }
        }
    }
    if blocked && !tool {
        // Queue order: behind what is parked.
        own_done.set(true);
        park(&st, packets, svc.as_deref());
        return;
    }
    // From here the panic fallback knows this submission's progress.
    own_done.set(true);
    // SAFETY: item 1.
    let sent = unsafe { send(&st, &o, &q, writer, packets, svc.as_deref(), tool, false) };
    if let Sent::Later = sent {
        park(&st, packets, svc.as_deref());
    }
    // A window that ran here is over and its lock released: kick the queues of this agent
    // that parked packets meanwhile. While another window holds the agent, its end kicks them
    // (a kick now would only park the kick).
    if svc.as_deref().is_none_or(|s| window_over(s, st.agent.id)) {
        kick(st.agent.handle, &q);
    }
}

/// Submits one submission (one interceptor call's packets) on `st` without waiting: a single
/// dispatch to the service, anything else under the reader side of the agent's gate.
/// `resumed`: it was parked behind another window (a candidate then declines `agent_busy`
/// where no window can run, not `queue_drain_stuck`).
///
/// # Safety
///
/// 1. `writer` is the writer of the interceptor call running on this thread for `st`'s queue.
#[allow(clippy::too_many_arguments)]
unsafe fn send(
    st: &Arc<QueueState>,
    o: &Arc<Originals>,
    q: &QueueFns,
    writer: WriterFn,
    packets: &[Packet],
    svc: Option<&replay_core::ReplayService>,
    tool: bool,
    resumed: bool,
) -> Sent {
    queue::begin_progress(packets);
    let pass = |gate: Option<replay_core::WriteGate>| {
        queue::progress(|p| {
            p.ran = true;
            p.delivered = true;
        });
        // SAFETY: item 1.
        unsafe { queue::write(st, o, q, writer, packets, true) };
        drop(gate);
        Sent::Done
    };
    let Some(svc) = svc else {
        return pass(None);
    };
    let headers: Vec<u16> = packets.iter().map(Packet::header).collect();
    if !(aql::is_single_dispatch(&headers) && svc.is_active()) {
        if tool {
            return pass(None);
        }
        return match svc.try_enter_write(st.agent.id) {
            Some(gate) => pass(Some(gate)),
            None => Sent::Later,
        };
    }
    // Forwarded in every case: the service only tries the agent's lock (never block here).
    let origin = if tool {
        Origin::ForwardedToolWork
    } else {
        Origin::ForwardedApplication
    };
    let packet = packets[0];
    let dispatch = describe(st, o, &packet, origin);
    let agent = QueueAgent::new(st.clone(), o.clone(), *q, writer, packet).resumed(resumed);
    let engine = crate::memory::engine(&st.agent);
    match svc.submit(&agent, &*engine, dispatch) {
        Ok(report) if report.deferred => Sent::Later,
        Ok(_) => Sent::Done,
        Err(e) => {
            log::warn!("[kernel-replay] hsa: the dispatch could not be submitted: {e}");
            if !queue::progress_ran() {
                pass(None);
            }
            Sent::Done
        }
    }
}

/// Parks `packets` on `st` (behind what is parked), then kicks the queue at once if the window
/// already ended (the kick at its end may have run before the queue was listed), or lists the
/// queue for that kick.
fn park(st: &Arc<QueueState>, packets: &[Packet], svc: Option<&replay_core::ReplayService>) {
    st.park(packets.to_vec());
    if let Some(s) = svc {
        name_undeclared_tool_queue(st, s);
    }
    queue::list_for_kick(st);
    if svc.is_none_or(|s| window_over(s, st.agent.id)) {
        if let Some((_, q)) = state::queue_fns() {
            kick(st.agent.handle, &q);
        }
    }
}

/// Work parked on an application queue while a callback of the agent's window runs is most
/// likely the tool's own, written into a queue it created outside a callback and did not
/// declare: a callback that waits for it would time out with no word why. Said once per queue.
fn name_undeclared_tool_queue(st: &QueueState, svc: &replay_core::ReplayService) {
    static WARNED: parking_lot::Mutex<Vec<u64>> = parking_lot::Mutex::new(Vec::new());
    if st.is_tool() || !svc.agent_gate(st.agent.id).in_callback() {
        return;
    }
    let queue = st.queue as u64;
    {
        let mut warned = WARNED.lock();
        if warned.contains(&queue) {
            return;
        }
        warned.push(queue);
    }
    log::warn!(
        "[kernel-replay] hsa: a submission on queue {queue:#x} (agent {}) is parked until the window ends: the queue is an application queue, and a tool callback is running. If this is the tool's own work, declare the queue with kreplay_hsa_mark_tool_queue (Rust: replay_hsa::intercept::mark_tool_queue) when it is created; a callback that waits for it now waits until its own timeout",
        st.agent.id
    );
}

/// Kicks every listed queue of agent `handle`: a no-op barrier into its ring and its doorbell,
/// so the runtime calls the interceptor again and the parked packets are written.
fn kick(handle: u64, q: &QueueFns) {
    let victims = queue::take_kick_list(handle);
    let mut seen = std::collections::HashSet::new();
    for st in victims {
        if !seen.insert(st.queue) || st.parked() == 0 {
            continue;
        }
        let noop = Packet::barrier_and(sys::hsa_signal_t::default(), false);
        if let Err(e) = queue::submit_to_ring(st.queue as *mut sys::hsa_queue_t, q, &noop) {
            log::warn!("[kernel-replay] hsa: cannot kick a queue with parked packets: {e}");
            queue::list_for_kick(&st);
        }
    }
}

/// The core's description of a dispatch packet.
fn describe(st: &QueueState, o: &Originals, packet: &Packet, origin: Origin) -> Dispatch {
    let d = packet.as_dispatch();
    let agent = sys::hsa_agent_t {
        handle: st.agent.handle,
    };
    let kernel = kernels::global().lookup(d.kernel_object, agent, o.loader.as_ref());
    let kernarg = read_kernarg(d.kernarg_address, kernels::kernarg_segment_size(&kernel));
    Dispatch {
        info: DispatchInfo::new(
            st.agent.id,
            QueueId(st.queue as u64),
            KernelId(d.kernel_object),
            kernel.name,
            Dim3::new(d.grid_size_x, d.grid_size_y, d.grid_size_z),
            Dim3::new(
                u32::from(d.workgroup_size_x),
                u32::from(d.workgroup_size_y),
                u32::from(d.workgroup_size_z),
            ),
        )
        .with_private_segment_size(d.private_segment_size)
        .with_group_segment_size(d.group_segment_size),
        kernel: KernelKey {
            agent: st.agent.id,
            code_object: kernel.executable,
            symbol: d.kernel_object,
        },
        kind: SubmissionKind::KernelDispatch,
        kernarg,
        // Known even without the symbol's size: the read then covers the rest of the kernarg
        // allocation, a superset of the block's words.
        arg_layout: replay_core::ArgLayout::Known,
        origin,
        handle: st.queue as u64,
    }
}

/// The first `max` bytes of the argument block (kernarg memory is host-visible), never past its
/// allocation, or none when the tracker does not know the block's extent.
fn read_kernarg(addr: u64, max: usize) -> smallvec::SmallVec<[u8; 256]> {
    let mut out = smallvec::SmallVec::new();
    if addr == 0 {
        return out;
    }
    let Some((_, region)) = backend().tracker.lookup_any(addr) else {
        return out;
    };
    let len = (region.base + region.size - addr).min(max as u64) as usize;
    out.resize(len, 0);
    // SAFETY: `[addr, addr+len)` lies inside a live kernarg allocation the tracker recorded;
    // kernarg memory is host-visible system memory, and the application finished writing it
    // before it published the packet.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), len) };
    out
}
