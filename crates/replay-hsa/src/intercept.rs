//! Queue interception (SPEC §9.1): the `hsa_queue_create` / `hsa_queue_destroy` wrappers and
//! the write interceptor.
//!
//! `hsa_queue_create` is answered with an **intercepting queue** (the original
//! `hsa_amd_queue_intercept_create`) on which [`interceptor`] is registered; if the runtime
//! refuses either step the application gets a plain queue from the original entry, untouched.
//! Each intercepted queue keeps a [`QueueState`]: its agent, its ring size, whether it is a
//! **tool queue**, a **counting drain signal**, an estimate of the hardware ring's occupancy,
//! and the submissions parked while a window ran (below). The per-agent queue list is the
//! registry filtered by agent ([`queues_of`]).
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
//!   [`mark_tool_queue`]) is tool work; it is never gated, never parked and never replayed
//!   (`reentrant_dispatch` for a dispatch), so a tool that waits for its own work in a callback
//!   is never blocked by the window it runs in. Packets on every other queue are the
//!   application's, whenever they arrive. Tool work written into an application queue is not
//!   recognised: it is parked while the window runs, like the application's.
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
//! - **Completion tracking.** Every packet written through `writer` that carries no completion
//!   signal gets the queue's counting drain signal as its completion signal (raised by one
//!   first); a drain barrier the window appends carries it too. So the drain signal counts
//!   exactly the signal-less packets not yet complete, and the last packet that carries the
//!   application's signal marks the rest: when that signal changed, every earlier packet with a
//!   signal counts as complete (exact when packets carry the barrier bit, as HIP's stream
//!   packets do; packets without it may overlap, and an earlier one may still be running).
//!   A signal-less packet with the barrier bit covers every packet before it: once the drain
//!   signal is 0, they are complete too, whatever became of their signals (an application
//!   that re-arms a signal to its old value would otherwise leave its last packet looking
//!   busy). This costs one more completion signal per signal-less packet
//!   while the backend is loaded (on real GPUs an interrupt signal); the application never sees
//!   it, since it passed none.
//! - **Ring space.** `writer` parks packets silently when the hardware ring is full, and the
//!   runtime submits a batch only when more slots are free than it has packets (it keeps one for
//!   its retry barrier), so the backend never waits for a packet that cannot be in the ring:
//!   before every `writer` call of a packet the window waits for, it checks an upper bound of
//!   the ring's occupancy (the drain signal's value plus the packets with a signal not yet
//!   known complete) and needs more free slots than packets. No room: an error, and the core
//!   declines or truncates.
//! - Every entry catches panics. The interceptor's fallback keeps the application whole: if
//!   nothing of the submission ran, its packets are written unchanged; if a pass or the
//!   ordinary run was written but the application's completion was not, a barrier-AND with
//!   that completion signal is written, so the application never hangs.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::thread::ThreadId;

use parking_lot::{Mutex, RwLock};
use replay_core::{
    AgentId, Dim3, Dispatch, DispatchInfo, KernelId, KernelKey, Origin, QueueId, SubmissionKind,
};

use crate::agent::{AgentInfo, QueueAgent};
use crate::queue as aql;
use crate::sys::{self, hsa_status_t};
use crate::tool::{backend, Originals};

/// The original queue, signal and interception entries.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy)]
pub struct QueueFns {
    pub queue_create: sys::QueueCreateFn,
    pub queue_destroy: sys::QueueDestroyFn,
    pub load_read_index: sys::QueueLoadIndexFn,
    pub load_write_index: sys::QueueLoadIndexFn,
    pub add_write_index: sys::QueueAddIndexFn,
    pub cas_write_index: sys::QueueCasIndexFn,
    pub signal_create: sys::SignalCreateFn,
    pub signal_destroy: sys::SignalDestroyFn,
    pub signal_store: sys::SignalUpdateFn,
    pub signal_add: sys::SignalUpdateFn,
    pub signal_subtract: sys::SignalUpdateFn,
    pub signal_wait: sys::SignalWaitFn,
    pub memory_copy: sys::MemoryCopyFn,
    pub iterate_agents: sys::IterateAgentsFn,
    pub iterate_pools: sys::IteratePoolsFn,
    pub intercept_create: sys::QueueCreateFn,
    pub intercept_register: sys::InterceptRegisterFn,
    pub async_function: sys::AsyncFunctionFn,
    pub system_get_info: Option<sys::SystemGetInfoFn>,
    pub allow_access: Option<sys::AllowAccessFn>,
}

/// The nanoseconds-per-tick assumption when the runtime does not answer: 1 GHz.
const DEFAULT_TIMESTAMP_HZ: u64 = 1_000_000_000;

impl QueueFns {
    /// A wait budget as an `hsa_signal_wait_*` timeout hint, which the runtime reads in system
    /// timestamp ticks (`HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY`, e.g. 100 MHz on Instinct GPUs):
    /// passing nanoseconds would make every bounded wait that many times too long. The
    /// frequency is asked once per `OnLoad` ([`crate::tool::Backend::timestamp_hz`]).
    pub fn timeout_hint(&self, budget: std::time::Duration) -> u64 {
        let hz = backend().timestamp_hz(|| {
            let f = self.system_get_info?;
            let mut hz: u64 = 0;
            // SAFETY: the original `hsa_system_get_info`; TIMESTAMP_FREQUENCY is a `uint64_t`.
            let st = unsafe {
                f(
                    sys::HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY,
                    (&mut hz as *mut u64).cast(),
                )
            };
            (st == sys::HSA_STATUS_SUCCESS && hz > 0).then_some(hz)
        });
        ticks(budget, hz.unwrap_or(DEFAULT_TIMESTAMP_HZ))
    }
}

impl QueueFns {
    /// A signal of our own with value `initial` (no consumers), through the original entry;
    /// the runtime's status when it refuses.
    pub fn create_signal(&self, initial: i64) -> Result<sys::hsa_signal_t, hsa_status_t> {
        let mut s = sys::hsa_signal_t::default();
        // SAFETY: the original signal create with a valid out pointer, no consumers.
        let st = unsafe { (self.signal_create)(initial, 0, std::ptr::null(), &mut s) };
        if st == sys::HSA_STATUS_SUCCESS {
            Ok(s)
        } else {
            Err(st)
        }
    }

    /// Waits at most `budget` (a hint: the runtime may return early, and the caller polls
    /// again) for `signal` to reach 0, directly on the calling thread (never through an async
    /// handler). Whether it did.
    pub fn wait_zero(&self, signal: sys::hsa_signal_t, budget: std::time::Duration) -> bool {
        let hint = self.timeout_hint(budget);
        // SAFETY: the original `hsa_signal_wait_scacquire` on a signal the caller keeps alive
        // for the call; the hint is in the runtime's timestamp ticks.
        let v = unsafe {
            (self.signal_wait)(
                signal,
                sys::HSA_SIGNAL_CONDITION_EQ,
                0,
                hint,
                sys::HSA_WAIT_STATE_BLOCKED,
            )
        };
        v == 0
    }
}

/// `budget` in ticks of a `hz` clock, saturating below `u64::MAX` (which means "no timeout").
pub fn ticks(budget: std::time::Duration, hz: u64) -> u64 {
    let t = budget.as_nanos().saturating_mul(u128::from(hz)) / 1_000_000_000;
    u64::try_from(t).unwrap_or(u64::MAX).min(u64::MAX - 1)
}

/// One 64-byte AQL packet, aligned as the ring's slots.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet(pub [u8; 64]);

impl Packet {
    /// The header.
    pub fn header(&self) -> u16 {
        u16::from_le_bytes([self.0[0], self.0[1]])
    }

    /// The completion signal (offset 56 in dispatch and barrier packets).
    pub fn completion_signal(&self) -> sys::hsa_signal_t {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[56..64]);
        sys::hsa_signal_t {
            handle: u64::from_le_bytes(b),
        }
    }

    /// Replaces the completion signal.
    pub fn set_completion_signal(&mut self, s: sys::hsa_signal_t) {
        self.0[56..64].copy_from_slice(&s.handle.to_le_bytes());
    }

    /// Replaces the header.
    pub fn set_header(&mut self, h: u16) {
        self.0[..2].copy_from_slice(&h.to_le_bytes());
    }

    /// The packet as a kernel dispatch.
    pub fn as_dispatch(&self) -> sys::hsa_kernel_dispatch_packet_t {
        // SAFETY: a 64-byte, 64-aligned block read as a plain-integer struct of that size.
        unsafe { std::ptr::read((self as *const Self).cast()) }
    }

    /// A barrier-AND packet: barrier bit set, system-scope fences, no dependencies.
    pub fn barrier_and(completion: sys::hsa_signal_t, barrier: bool) -> Self {
        let p = sys::hsa_barrier_and_packet_t {
            header: aql::header(
                sys::HSA_PACKET_TYPE_BARRIER_AND,
                barrier,
                sys::HSA_FENCE_SCOPE_SYSTEM,
                sys::HSA_FENCE_SCOPE_SYSTEM,
            ),
            completion_signal: completion,
            ..Default::default()
        };
        // SAFETY: a 64-byte plain-integer struct read as 64 bytes.
        Self(unsafe { std::mem::transmute::<sys::hsa_barrier_and_packet_t, [u8; 64]>(p) })
    }
}

/// Occupancy bookkeeping of a queue's hardware ring (see the module docs). Packets without a
/// completion signal of their own are counted by the drain signal; these count the others.
#[derive(Debug, Default, Clone, Copy)]
struct Occupancy {
    /// Packets with a completion signal other than the drain signal written through `writer`.
    written: u64,
    /// Of those, how many are known complete.
    retired: u64,
    /// The last such packet of the application's: `(signal, value before, mark)`.
    marker: Option<(u64, i64, u64)>,
    /// Packets with a signal up to this mark precede a signal-less packet with the barrier bit:
    /// complete once the drain signal is 0.
    covered: u64,
}

/// What the backend keeps per intercepted queue.
#[derive(Debug)]
pub struct QueueState {
    /// The application's `hsa_queue_t*`.
    pub queue: usize,
    /// The queue's agent.
    pub agent: AgentInfo,
    /// Ring size in packets.
    pub size: u64,
    /// The counting drain signal: outstanding drain barriers and signal-less packets.
    pub drain_signal: sys::hsa_signal_t,
    /// A tool's queue: everything on it is tool work.
    tool: AtomicBool,
    occupancy: Mutex<Occupancy>,
    parked: Mutex<VecDeque<Vec<Packet>>>,
}

impl QueueState {
    /// Retires what the marker shows complete; the occupancy bookkeeping after.
    fn refresh(&self, load: sys::SignalLoadFn) -> Occupancy {
        let mut o = self.occupancy.lock();
        if let Some((sig, before, mark)) = o.marker {
            // SAFETY: the original `hsa_signal_load_relaxed` on a signal the application passed
            // in a packet (or a pass's leaked signal). Any change means the packet completed:
            // decremented, or re-armed by an application that waited for it.
            let v = unsafe { load(sys::hsa_signal_t { handle: sig }) };
            if v != before {
                o.retired = o.retired.max(mark);
                o.marker = None;
            }
        }
        if o.covered > o.retired {
            // SAFETY: the original load on our own signal, alive while the queue is.
            if unsafe { load(self.drain_signal) } <= 0 {
                o.retired = o.covered;
                if o.marker.is_some_and(|(_, _, mark)| mark <= o.retired) {
                    o.marker = None;
                }
            }
        }
        *o
    }

    /// Packets written through `writer` whose completion is not known yet: an upper bound of
    /// the hardware ring's occupancy.
    pub fn outstanding(&self, load: sys::SignalLoadFn) -> u64 {
        let o = self.refresh(load);
        // SAFETY: the original load on our own signal, alive while the queue is.
        let untagged = unsafe { load(self.drain_signal) }.max(0) as u64;
        (o.written - o.retired) + untagged
    }

    /// Free slots of the hardware ring, as a lower bound.
    pub fn space(&self, load: sys::SignalLoadFn) -> u64 {
        self.size.saturating_sub(self.outstanding(load))
    }

    /// Whether the runtime's `writer` would put `n` packets into the ring now rather than park
    /// them: the runtime needs more free slots than packets (one stays free for its retry
    /// barrier).
    pub fn has_room(&self, load: sys::SignalLoadFn, n: u64) -> bool {
        self.space(load) > n
    }

    /// The mark of the packets with a signal written so far.
    pub fn mark(&self) -> u64 {
        self.occupancy.lock().written
    }

    /// Whether every packet with a signal up to `mark` is known complete.
    pub fn retired_to(&self, load: sys::SignalLoadFn, mark: u64) -> bool {
        self.refresh(load).retired >= mark
    }

    /// Everything with a signal up to `mark` is known complete.
    pub fn retire(&self, mark: u64) {
        let mut o = self.occupancy.lock();
        o.retired = o.retired.max(mark.min(o.written));
    }

    /// `signal` (value `before` now) completes the packets with a signal up to `mark`.
    pub fn set_marker(&self, signal: u64, before: i64, mark: u64) {
        self.occupancy.lock().marker = Some((signal, before, mark));
    }

    /// Packets parked now.
    pub fn parked(&self) -> usize {
        self.parked.lock().iter().map(Vec::len).sum()
    }

    /// Whether this is a tool's queue.
    pub fn is_tool(&self) -> bool {
        self.tool.load(Ordering::Acquire)
    }
}

static QUEUES: LazyLock<RwLock<HashMap<usize, Arc<QueueState>>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));

/// Queues with parked packets, per agent handle, to kick after a window.
static KICKS: LazyLock<Mutex<HashMap<u64, Vec<Arc<QueueState>>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The runtime's async-events threads (one per runtime; several only where a process holds
/// several simulated runtimes).
static ASYNC_THREADS: LazyLock<RwLock<HashSet<ThreadId>>> =
    LazyLock::new(|| RwLock::new(HashSet::new()));
/// Agents whose runtime was asked for its async thread.
static ASYNC_ASKED: LazyLock<Mutex<HashSet<u64>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// What the submission being handled on this thread has done so far, for the panic fallback.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The submission's packets.
    packets: Vec<Packet>,
    /// A pass or the ordinary run was written.
    pub(crate) ran: bool,
    /// The application's completion was written (the ordinary run, or the trailing barrier).
    pub(crate) delivered: bool,
}

thread_local! {
    /// The submission this thread's interceptor call is handling.
    pub(crate) static PROGRESS: RefCell<Option<Progress>> = const { RefCell::new(None) };
}

/// Records progress of the submission being handled on this thread.
pub(crate) fn progress(f: impl FnOnce(&mut Progress)) {
    PROGRESS.with(|p| {
        if let Some(p) = p.borrow_mut().as_mut() {
            f(p);
        }
    });
}

/// Intercepted queues alive.
pub fn queue_count() -> usize {
    QUEUES.read().len()
}

/// The state of the intercepted queue `queue` (the application's pointer).
pub fn state_of(queue: *const sys::hsa_queue_t) -> Option<Arc<QueueState>> {
    QUEUES.read().get(&(queue as usize)).cloned()
}

/// Declares `queue` a tool's queue: everything submitted on it is tool work, never gated,
/// parked or replayed. Queues created from inside a tool callback are tool queues already; a
/// tool that creates its queues elsewhere (at start-up) declares them here. Whether `queue` is
/// an intercepted queue.
pub fn mark_tool_queue(queue: *const sys::hsa_queue_t) -> bool {
    state_of(queue).is_some_and(|st| {
        st.tool.store(true, Ordering::Release);
        true
    })
}

/// The intercepted queues of agent `handle` (the per-agent queue list).
pub fn queues_of(handle: u64) -> Vec<Arc<QueueState>> {
    QUEUES
        .read()
        .values()
        .filter(|q| q.agent.handle == handle)
        .cloned()
        .collect()
}

/// Whether the calling thread is the runtime's async-events thread.
pub fn on_async_thread() -> bool {
    ASYNC_THREADS.read().contains(&std::thread::current().id())
}

unsafe extern "C" fn record_async_thread(_arg: *mut c_void) {
    let _ = catch_unwind(|| {
        ASYNC_THREADS.write().insert(std::thread::current().id());
    });
}

fn fns() -> Option<(Arc<Originals>, QueueFns)> {
    let o = backend().originals()?;
    let q = o.queue?;
    Some((o, q))
}

/// Writes `pkts` through `writer`, recording them (module docs, completion tracking): a packet
/// without a completion signal gets the drain signal; with `marker`, the last packet with an
/// application signal becomes the queue's marker. The mark after the packets.
///
/// # Safety
///
/// 1. `writer` is the writer of the interceptor call running on this thread, for `st`'s queue.
pub(crate) unsafe fn write(
    st: &QueueState,
    o: &Originals,
    q: &QueueFns,
    writer: WriterFn,
    pkts: &[Packet],
    marker: bool,
) -> u64 {
    if pkts.is_empty() {
        return st.mark();
    }
    let mut out = pkts.to_vec();
    let mut tagged = 0i64;
    let mut signalled = 0u64;
    // Signalled packets of this batch before its last signal-less barrier-bit packet.
    let mut covers = None;
    let mut last = None;
    for p in &mut out {
        let s = p.completion_signal();
        if s.handle == 0 {
            p.set_completion_signal(st.drain_signal);
            tagged += 1;
            if aql::barrier(p.header()) {
                covers = Some(signalled);
            }
        } else if s != st.drain_signal {
            signalled += 1;
            last = Some(s);
        } else if aql::barrier(p.header()) {
            // A drain barrier: everything before it is complete once it is.
            covers = Some(signalled);
        }
    }
    if tagged > 0 {
        // SAFETY: the original add entry on our own counting signal, raised before the packets
        // that lower it are written.
        unsafe { (q.signal_add)(st.drain_signal, tagged) };
    }
    // SAFETY: the original load on the application's signal.
    let before = last.map(|s| (s, unsafe { (o.signal_load_relaxed)(s) }));
    let mark = {
        let mut occ = st.occupancy.lock();
        if let Some(c) = covers {
            occ.covered = occ.covered.max(occ.written + c);
        }
        occ.written += signalled;
        occ.written
    };
    if let (true, Some((s, v))) = (marker, before) {
        st.set_marker(s.handle, v, mark);
    }
    // SAFETY: the caller's item 1; `out` holds `len` packets alive for the call.
    unsafe { writer(out.as_ptr().cast(), out.len() as u64) };
    mark
}

/// A packet writer as the runtime passes it.
pub type WriterFn = unsafe extern "C" fn(*const c_void, u64);

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
    let Some((o, q)) = fns() else {
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
    if ASYNC_ASKED.lock().insert(agent.handle) {
        // SAFETY: the original `hsa_amd_async_function` with a function of the right type.
        let st = unsafe { (q.async_function)(Some(record_async_thread), std::ptr::null_mut()) };
        if st != sys::HSA_STATUS_SUCCESS {
            log::warn!("[kernel-replay] hsa: hsa_amd_async_function failed ({st:#x}); the async-events thread is not recognised");
        }
    }
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
    let info = crate::tracker::agent_info(o, agent);
    let state = Arc::new(QueueState {
        queue: p as usize,
        agent: info,
        size: ring,
        drain_signal: drain,
        // Created by a tool from inside one of its callbacks: a tool queue.
        tool: AtomicBool::new(replay_core::locks::thread_in_callback()),
        occupancy: Mutex::new(Occupancy::default()),
        parked: Mutex::new(VecDeque::new()),
    });
    let rst = if sst == sys::HSA_STATUS_SUCCESS {
        QUEUES.write().insert(p as usize, state);
        // SAFETY: the original register entry on the queue just created; `data` is the
        // queue's address, looked up (never dereferenced) by the interceptor.
        unsafe { (q.intercept_register)(p, Some(interceptor), p.cast()) }
    } else {
        sst
    };
    if rst != sys::HSA_STATUS_SUCCESS {
        log::warn!("[kernel-replay] hsa: registering the interceptor failed ({rst:#x}); this queue is not intercepted");
        QUEUES.write().remove(&(p as usize));
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
    let Some((o, q)) = fns() else {
        return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(st) = QUEUES.write().remove(&(queue as usize)) {
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
    let left = PROGRESS.with(|p| p.borrow_mut().take());
    if r.is_err() {
        log::error!("[kernel-replay] hsa: the interceptor panicked");
        let st = QUEUES.read().get(&(data as usize)).cloned();
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
    let Some(st) = QUEUES.read().get(&key).cloned() else {
        own_done.set(true);
        // SAFETY: item 1.
        unsafe { writer(packets.as_ptr().cast(), packets.len() as u64) };
        return;
    };
    let Some((o, q)) = fns() else {
        own_done.set(true);
        // SAFETY: item 1.
        unsafe { writer(packets.as_ptr().cast(), packets.len() as u64) };
        return;
    };
    let svc = crate::tool::service();
    let tool = st.is_tool() || replay_core::locks::thread_in_callback();

    // Parked submissions first, in order, as far as they can go now.
    let mut blocked = false;
    loop {
        let Some(next) = st.parked.lock().pop_front() else {
            break;
        };
        // SAFETY: item 1.
        match unsafe { send(&st, &o, &q, writer, &next, svc.as_deref(), false) } {
            Sent::Done => {}
            Sent::Later => {
                st.parked.lock().push_front(next);
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
    let sent = unsafe { send(&st, &o, &q, writer, packets, svc.as_deref(), tool) };
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
///
/// # Safety
///
/// 1. `writer` is the writer of the interceptor call running on this thread for `st`'s queue.
unsafe fn send(
    st: &Arc<QueueState>,
    o: &Arc<Originals>,
    q: &QueueFns,
    writer: WriterFn,
    packets: &[Packet],
    svc: Option<&replay_core::ReplayService>,
    tool: bool,
) -> Sent {
    PROGRESS.with(|p| {
        *p.borrow_mut() = Some(Progress {
            packets: packets.to_vec(),
            ..Progress::default()
        })
    });
    let pass = |gate: Option<replay_core::WriteGate>| {
        progress(|p| {
            p.ran = true;
            p.delivered = true;
        });
        // SAFETY: item 1.
        unsafe { write(st, o, q, writer, packets, true) };
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
    let agent = QueueAgent::new(st.clone(), o.clone(), *q, writer, packet);
    let engine = crate::memory::engine(&st.agent);
    match svc.submit(&agent, &*engine, dispatch) {
        Ok(report) if report.deferred => Sent::Later,
        Ok(_) => Sent::Done,
        Err(e) => {
            log::warn!("[kernel-replay] hsa: the dispatch could not be submitted: {e}");
            let ran = PROGRESS.with(|p| p.borrow().as_ref().is_some_and(|p| p.ran));
            if !ran {
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
    st.parked.lock().push_back(packets.to_vec());
    KICKS
        .lock()
        .entry(st.agent.handle)
        .or_default()
        .push(st.clone());
    if svc.is_none_or(|s| window_over(s, st.agent.id)) {
        if let Some((_, q)) = fns() {
            kick(st.agent.handle, &q);
        }
    }
}

/// Kicks every listed queue of agent `handle`: a no-op barrier into its ring and its doorbell,
/// so the runtime calls the interceptor again and the parked packets are written.
fn kick(handle: u64, q: &QueueFns) {
    let victims = KICKS.lock().remove(&handle).unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    for st in victims {
        if !seen.insert(st.queue) || st.parked() == 0 {
            continue;
        }
        let noop = Packet::barrier_and(sys::hsa_signal_t::default(), false);
        if let Err(e) = submit_to_ring(st.queue as *mut sys::hsa_queue_t, q, &noop) {
            log::warn!("[kernel-replay] hsa: cannot kick a queue with parked packets: {e}");
            KICKS.lock().entry(handle).or_default().push(st.clone());
        }
    }
}

/// Writes `packet` into the application-visible ring of `queue` as a client would (reserve a
/// slot by compare-and-swap on the write index, as `hsa_queue_cas_write_index` is meant for on
/// multi-producer rings; body; header last with release) and rings its doorbell. Fails when the
/// ring is full.
pub(crate) fn submit_to_ring(
    queue: *mut sys::hsa_queue_t,
    q: &QueueFns,
    packet: &Packet,
) -> Result<(), String> {
    // SAFETY: `queue` is an intercepted queue alive in the registry (callers look it up).
    let (size, base, doorbell) = unsafe {
        let qs = &*queue;
        (u64::from(qs.size), qs.base_address, qs.doorbell_signal)
    };
    let idx = loop {
        // SAFETY: original index entries on a live queue.
        let (w, r) = unsafe { ((q.load_write_index)(queue), (q.load_read_index)(queue)) };
        if w.wrapping_sub(r) >= size {
            return Err("the ring is full".into());
        }
        // SAFETY: original index entry on a live queue; it moves the index only if it still
        // is `w`, so no other producer's slot is taken.
        if unsafe { (q.cas_write_index)(queue, w, w + 1) } == w {
            break w;
        }
    };
    // SAFETY: slot `idx % size` of the ring, ours until its header is published; the header is
    // stored last with release ordering, as the AQL protocol requires.
    unsafe {
        let slot = base.cast::<u8>().add((idx % size) as usize * 64);
        std::ptr::copy_nonoverlapping(packet.0[2..].as_ptr(), slot.add(2), 62);
        std::sync::atomic::AtomicU16::from_ptr(slot.cast())
            .store(packet.header(), Ordering::Release);
        (q.signal_store)(doorbell, idx as i64);
    }
    Ok(())
}

/// The core's description of a dispatch packet.
fn describe(st: &QueueState, o: &Originals, packet: &Packet, origin: Origin) -> Dispatch {
    let d = packet.as_dispatch();
    let agent = sys::hsa_agent_t {
        handle: st.agent.handle,
    };
    let kernel = crate::kernels::global().lookup(d.kernel_object, agent, o.loader.as_ref());
    let kernarg = read_kernarg(
        d.kernarg_address,
        crate::kernels::kernarg_segment_size(&kernel),
    );
    Dispatch {
        info: DispatchInfo {
            agent: st.agent.id,
            queue: QueueId(st.queue as u64),
            dispatch_id: Default::default(),
            kernel_id: KernelId(d.kernel_object),
            kernel_name: kernel.name,
            grid: Dim3::new(d.grid_size_x, d.grid_size_y, d.grid_size_z),
            workgroup: Dim3::new(
                u32::from(d.workgroup_size_x),
                u32::from(d.workgroup_size_y),
                u32::from(d.workgroup_size_z),
            ),
            private_segment_size: d.private_segment_size,
            group_segment_size: d.group_segment_size,
        },
        kernel: KernelKey {
            agent: st.agent.id,
            code_object: kernel.executable,
            symbol: d.kernel_object,
        },
        kind: SubmissionKind::KernelDispatch,
        kernarg,
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64};

    use super::*;

    // A ring of four slots with indices another producer moves, through fake entries.
    static WRITE: AtomicU64 = AtomicU64::new(0);
    static READ: AtomicU64 = AtomicU64::new(0);
    /// When set, the next read-index load lets another producer take a slot first.
    static RACE: AtomicBool = AtomicBool::new(false);

    unsafe extern "C" fn load_write(_: *const sys::hsa_queue_t) -> u64 {
        WRITE.load(Ordering::SeqCst)
    }
    unsafe extern "C" fn load_read(_: *const sys::hsa_queue_t) -> u64 {
        if RACE.swap(false, Ordering::SeqCst) {
            WRITE.fetch_add(1, Ordering::SeqCst);
        }
        READ.load(Ordering::SeqCst)
    }
    unsafe extern "C" fn add_write(_: *const sys::hsa_queue_t, n: u64) -> u64 {
        WRITE.fetch_add(n, Ordering::SeqCst)
    }
    unsafe extern "C" fn cas_write(_: *const sys::hsa_queue_t, expected: u64, v: u64) -> u64 {
        match WRITE.compare_exchange(expected, v, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(x) | Err(x) => x,
        }
    }
    unsafe extern "C" fn create(
        _: sys::hsa_agent_t,
        _: u32,
        _: sys::hsa_queue_type32_t,
        _: sys::QueueErrorCallback,
        _: *mut c_void,
        _: u32,
        _: u32,
        _: *mut *mut sys::hsa_queue_t,
    ) -> hsa_status_t {
        1
    }
    unsafe extern "C" fn destroy(_: *mut sys::hsa_queue_t) -> hsa_status_t {
        1
    }
    unsafe extern "C" fn signal_create(
        _: i64,
        _: u32,
        _: *const sys::hsa_agent_t,
        _: *mut sys::hsa_signal_t,
    ) -> hsa_status_t {
        1
    }
    unsafe extern "C" fn signal_destroy(_: sys::hsa_signal_t) -> hsa_status_t {
        1
    }
    unsafe extern "C" fn signal_update(_: sys::hsa_signal_t, _: i64) {}
    unsafe extern "C" fn signal_wait(_: sys::hsa_signal_t, _: u32, _: i64, _: u64, _: u32) -> i64 {
        0
    }
    unsafe extern "C" fn memory_copy(_: *mut c_void, _: *const c_void, _: usize) -> hsa_status_t {
        1
    }
    unsafe extern "C" fn iterate_agents(_: sys::AgentIterCallback, _: *mut c_void) -> hsa_status_t {
        1
    }
    unsafe extern "C" fn iterate_pools(
        _: sys::hsa_agent_t,
        _: sys::PoolIterCallback,
        _: *mut c_void,
    ) -> hsa_status_t {
        1
    }
    unsafe extern "C" fn register(
        _: *mut sys::hsa_queue_t,
        _: sys::InterceptHandler,
        _: *mut c_void,
    ) -> hsa_status_t {
        1
    }
    unsafe extern "C" fn async_function(
        _: Option<unsafe extern "C" fn(*mut c_void)>,
        _: *mut c_void,
    ) -> hsa_status_t {
        1
    }

    fn fake() -> QueueFns {
        QueueFns {
            queue_create: create,
            queue_destroy: destroy,
            load_read_index: load_read,
            load_write_index: load_write,
            add_write_index: add_write,
            cas_write_index: cas_write,
            signal_create,
            signal_destroy,
            signal_store: signal_update,
            signal_add: signal_update,
            signal_subtract: signal_update,
            signal_wait,
            memory_copy,
            iterate_agents,
            iterate_pools,
            intercept_create: create,
            intercept_register: register,
            async_function,
            system_get_info: None,
            allow_access: None,
        }
    }

    #[test]
    fn a_kick_never_takes_a_slot_another_producer_reserved_meanwhile() {
        let mut ring = vec![Packet([0; 64]); 4];
        // Slot 0 holds the application's packet, not consumed yet.
        ring[0].set_header(7);
        let mut q = sys::hsa_queue_t {
            type_: 0,
            features: 0,
            base_address: ring.as_mut_ptr().cast(),
            doorbell_signal: sys::hsa_signal_t::default(),
            size: 4,
            reserved1: 0,
            id: 1,
        };
        // One slot free (indices 0..3 taken), and the application takes it while the kick
        // checks for room.
        WRITE.store(3, Ordering::SeqCst);
        READ.store(0, Ordering::SeqCst);
        RACE.store(true, Ordering::SeqCst);
        let noop = Packet::barrier_and(sys::hsa_signal_t::default(), false);
        let r = submit_to_ring(&mut q, &fake(), &noop);
        assert!(r.is_err(), "the ring became full: no slot for the kick");
        assert_eq!(
            WRITE.load(Ordering::SeqCst),
            4,
            "only the other producer's slot"
        );
        assert_eq!(
            ring[0].header(),
            7,
            "the unconsumed packet was not overwritten"
        );
    }
}
