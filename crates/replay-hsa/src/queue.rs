//! The queues the backend knows (SPEC §9.1) and what a submission looks like on them: the
//! 64-byte AQL [`Packet`], the [`QueueState`] kept per intercepted queue (its agent, its ring
//! size, whether it is a tool queue, a counting drain signal, an estimate of the hardware
//! ring's occupancy, the submissions parked while a window ran), the registry of intercepted
//! queues ([`state_of`], [`queues_of`]: the per-agent queue list is the registry filtered by
//! agent), the queues to kick after a window, and the two ways a packet reaches a ring:
//! through an interceptor call's `writer` (`write`) or as a client would (`submit_to_ring`).
//! The interceptor that fills these is [`crate::intercept`]; the header bits are
//! [`crate::sys::aql`]'s.
//!
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
//!   the ring's occupancy ([`QueueState::has_room`]: the drain signal's value plus the packets
//!   with a signal not yet known complete) and needs more free slots than packets. No room: an
//!   error, and the core declines or truncates.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::{Mutex, RwLock};

use crate::state::{AgentInfo, Originals, QueueFns};
use crate::sys::{self, aql};

/// A packet writer as the runtime passes it.
pub type WriterFn = unsafe extern "C" fn(*const c_void, u64);

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
    /// The state of a queue just created: nothing written, nothing parked; `tool` when a tool
    /// created it (from inside one of its callbacks).
    pub(crate) fn new(
        queue: usize,
        agent: AgentInfo,
        size: u64,
        drain_signal: sys::hsa_signal_t,
        tool: bool,
    ) -> Self {
        Self {
            queue,
            agent,
            size,
            drain_signal,
            tool: AtomicBool::new(tool),
            occupancy: Mutex::new(Occupancy::default()),
            parked: Mutex::new(VecDeque::new()),
        }
    }

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

    /// Parks one submission behind those parked.
    pub(crate) fn park(&self, packets: Vec<Packet>) {
        self.parked.lock().push_back(packets);
    }

    /// The oldest parked submission, taken out.
    pub(crate) fn unpark(&self) -> Option<Vec<Packet>> {
        self.parked.lock().pop_front()
    }

    /// Puts back a submission [`QueueState::unpark`] took that still cannot go: first again.
    pub(crate) fn park_first(&self, packets: Vec<Packet>) {
        self.parked.lock().push_front(packets);
    }
}

/// The intercepted queues, by the application's `hsa_queue_t*`.
static QUEUES: LazyLock<RwLock<HashMap<usize, Arc<QueueState>>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));

/// Queues with parked packets, per agent handle, to kick after a window.
static KICKS: LazyLock<Mutex<HashMap<u64, Vec<Arc<QueueState>>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// What the submission being handled on this thread has done so far, for the panic fallback.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The submission's packets.
    pub(crate) packets: Vec<Packet>,
    /// A pass or the ordinary run was written.
    pub(crate) ran: bool,
    /// The application's completion was written (the ordinary run, or the trailing barrier).
    pub(crate) delivered: bool,
}

thread_local! {
    /// The submission this thread's interceptor call is handling.
    static PROGRESS: RefCell<Option<Progress>> = const { RefCell::new(None) };
}

/// Starts the record of a submission of `packets` on this thread.
pub(crate) fn begin_progress(packets: &[Packet]) {
    PROGRESS.with(|p| {
        *p.borrow_mut() = Some(Progress {
            packets: packets.to_vec(),
            ..Progress::default()
        })
    });
}

/// Whether the submission being handled on this thread ran a pass or the ordinary run.
pub(crate) fn progress_ran() -> bool {
    PROGRESS.with(|p| p.borrow().as_ref().is_some_and(|p| p.ran))
}

/// Ends the record of this thread's submission; what it had done.
pub(crate) fn take_progress() -> Option<Progress> {
    PROGRESS.with(|p| p.borrow_mut().take())
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

/// Lists an intercepted queue.
pub(crate) fn register(st: Arc<QueueState>) {
    QUEUES.write().insert(st.queue, st);
}

/// Forgets the intercepted queue `queue`; its state, if it was listed.
pub(crate) fn unregister(queue: usize) -> Option<Arc<QueueState>> {
    QUEUES.write().remove(&queue)
}

/// The state of the intercepted queue whose `hsa_queue_t*` is `queue`, as an address.
pub(crate) fn lookup(queue: usize) -> Option<Arc<QueueState>> {
    QUEUES.read().get(&queue).cloned()
}

/// The state of the intercepted queue `queue` (the application's pointer).
pub fn state_of(queue: *const sys::hsa_queue_t) -> Option<Arc<QueueState>> {
    lookup(queue as usize)
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

/// Lists `st` (a queue with parked packets) to be kicked once its agent's window ends.
pub(crate) fn list_for_kick(st: &Arc<QueueState>) {
    KICKS
        .lock()
        .entry(st.agent.handle)
        .or_default()
        .push(st.clone());
}

/// Takes the queues of agent `handle` listed to be kicked.
pub(crate) fn take_kick_list(handle: u64) -> Vec<Arc<QueueState>> {
    KICKS.lock().remove(&handle).unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64};

    use super::*;
    use crate::sys::hsa_status_t;

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
