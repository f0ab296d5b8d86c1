//! User-mode queues, their packet processors, and intercepting queues (SPEC §9.1).
//!
//! A hardware queue ([`HwQueue`]) is a ring of 64-byte AQL packets in host memory, a read and a
//! write index, and a doorbell signal; its packet-processor thread waits for the doorbell,
//! consumes the packet at the read index once its header is valid (the read index moves
//! then, before the work completes) and:
//! - kernel dispatch: launches the kernel (the Rust closure registered under the packet's
//!   kernel object) on a thread of its own; when it returns, the completion signal is
//!   decremented;
//! - barrier-AND / barrier-OR: waits for its dependency signals, then decrements its completion
//!   signal;
//! - the barrier bit: before launching, waits until every earlier packet of the queue completed.
//!
//! An intercepting queue ([`InterceptQueue`]) is what the application sees: a proxy ring whose
//! doorbell, when rung, makes the ringing thread take the queue's lock and hand the new packets
//! to the registered interceptors, most recent first, one packet per call (as the real runtime
//! does; an interceptor sees several packets in one call only when one above it writes several). `writer` (one C function with no context,
//! so the chain position is a thread-local cursor, as in the real runtime) passes packets down;
//! at the bottom it copies them into the hardware ring and rings the hardware doorbell on the
//! calling thread, or, when the ring has no room, parks them silently: they are retried on the
//! next doorbell and by the async-events thread. A doorbell rung from inside an interceptor is
//! deferred to the async-events thread.
//!
//! Ring space follows the real runtime's intercept queue (`InterceptQueue::Submit`): a batch is
//! written only when more slots are free than it has packets, since one slot is kept for a
//! **retry barrier** (unless one is still pending in the ring); a batch larger than the ring
//! is written in part. Whatever is not written is parked, a retry barrier-AND (barrier bit, no
//! completion signal) is written into the kept slot, and the async-events thread retries once
//! it was consumed. While parked packets remain after a retry, a doorbell writes no new ones
//! (the runtime returns early), so queue order holds.
//!
//! Above the state (signals, the registry, the async-events thread, to which it hands its
//! deferred doorbells and retries as jobs) and the table's status codes; the C entries and the
//! client call down into it. An intercepting queue hangs itself on its proxy doorbell as the
//! state's `Doorbell`, so a store to that signal reaches it without the state naming it.

use std::alloc::Layout;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use replay_hsa::sys;
use replay_hsa::sys::aql;

use crate::state::{self, AsyncEvent, Dispatch, Instance};

/// Packet-processor threads are named this prefix and the queue id.
pub const PROCESSOR_THREAD_PREFIX: &str = "hsa-sim-cp-";

/// One AQL packet slot.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy)]
pub struct Packet(pub [u8; 64]);

impl Packet {
    fn header(&self) -> u16 {
        u16::from_le_bytes([self.0[0], self.0[1]])
    }
    fn u64_at(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[off..off + 8]);
        u64::from_le_bytes(b)
    }
    fn completion_signal(&self) -> u64 {
        self.u64_at(56)
    }
}

/// `hsa_queue_error_callback`.
pub type QueueCallback =
    Option<unsafe extern "C" fn(sys::hsa_status_t, *mut sys::hsa_queue_t, *mut c_void)>;

/// `hsa_amd_queue_intercept_packet_writer`.
pub type PacketWriter = Option<unsafe extern "C" fn(*const c_void, u64)>;

/// `hsa_amd_queue_intercept_handler`.
pub type InterceptHandler =
    Option<unsafe extern "C" fn(*const c_void, u64, u64, *mut c_void, PacketWriter)>;

/// The queue struct handed to the application and the ring it points to.
struct QueueMem {
    hsa: Box<sys::hsa_queue_t>,
    ring: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the ring is a heap block owned by this struct, accessed only through atomics (the
// header) and after an acquire of the header (the body), like the memory a real packet
// processor shares with the host; `hsa_queue_t` is read-only after creation.
unsafe impl Send for QueueMem {}
// SAFETY: as above.
unsafe impl Sync for QueueMem {}

impl Drop for QueueMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `HwQueue::new` with this layout; dropped once.
        unsafe { std::alloc::dealloc(self.ring.as_ptr(), self.layout) };
    }
}

/// A hardware queue (or, without a processor, the proxy ring of an intercepting queue).
pub struct HwQueue {
    mem: QueueMem,
    pub(crate) size: u64,
    pub(crate) write: AtomicU64,
    pub(crate) read: AtomicU64,
    doorbell: u64,
    agent: u64,
    instance: Weak<Instance>,
    shutdown: AtomicBool,
    inflight: Mutex<usize>,
    inflight_cv: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
    callback: QueueCallback,
    callback_data: usize,
}

impl std::fmt::Debug for HwQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwQueue")
            .field("id", &self.mem.hsa.id)
            .field("read", &self.read)
            .field("write", &self.write)
            .finish_non_exhaustive()
    }
}

impl HwQueue {
    fn new(
        inst: &Arc<Instance>,
        agent: u64,
        size: u32,
        callback: QueueCallback,
        callback_data: usize,
    ) -> Option<Arc<Self>> {
        let layout = Layout::from_size_align(size as usize * 64, 64).ok()?;
        // SAFETY: non-zero size (size >= 1 checked by the caller).
        let ring = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        for i in 0..size as usize {
            // SAFETY: slot `i` lies inside the fresh ring; no one else sees it yet.
            unsafe {
                ring.as_ptr()
                    .add(i * 64)
                    .cast::<u16>()
                    .write(sys::HSA_PACKET_TYPE_INVALID)
            };
        }
        let doorbell = state::signal_create(-1);
        let id = state::next_handle();
        let hsa = Box::new(sys::hsa_queue_t {
            type_: 0,
            features: 1,
            base_address: ring.as_ptr().cast(),
            doorbell_signal: sys::hsa_signal_t { handle: doorbell },
            size,
            reserved1: 0,
            id,
        });
        Some(Arc::new(HwQueue {
            mem: QueueMem { hsa, ring, layout },
            size: u64::from(size),
            write: AtomicU64::new(0),
            read: AtomicU64::new(0),
            doorbell,
            agent,
            instance: Arc::downgrade(inst),
            shutdown: AtomicBool::new(false),
            inflight: Mutex::new(0),
            inflight_cv: Condvar::new(),
            thread: Mutex::new(None),
            callback,
            callback_data,
        }))
    }

    /// The pointer the application holds.
    pub(crate) fn hsa_ptr(&self) -> *mut sys::hsa_queue_t {
        (&*self.mem.hsa as *const sys::hsa_queue_t).cast_mut()
    }

    fn slot(&self, index: u64) -> *mut u8 {
        // SAFETY: `index % size` is a slot of the ring (size slots of 64 bytes).
        unsafe {
            self.mem
                .ring
                .as_ptr()
                .add((index % self.size) as usize * 64)
        }
    }

    fn header_atomic(&self, index: u64) -> &AtomicU16 {
        // SAFETY: the slot is 64-byte aligned and lives as long as `self`; every concurrent
        // access to the header goes through atomics (the application's publication store is
        // an atomic store in any correct AQL producer).
        unsafe { AtomicU16::from_ptr(self.slot(index).cast()) }
    }

    /// The packet at `index` if its header is valid (acquire).
    fn packet(&self, index: u64) -> Option<Packet> {
        let h = self.header_atomic(index).load(Ordering::Acquire);
        if aql::packet_type(h) == sys::HSA_PACKET_TYPE_INVALID {
            return None;
        }
        let mut p = Packet([0; 64]);
        // SAFETY: 64 readable bytes of the slot; published by the header's release store.
        unsafe { std::ptr::copy_nonoverlapping(self.slot(index), p.0.as_mut_ptr(), 64) };
        p.0[..2].copy_from_slice(&h.to_le_bytes());
        Some(p)
    }

    /// Marks the packet at `index` consumed: header invalid, read index moved past it.
    fn consume(&self, index: u64) {
        self.header_atomic(index)
            .store(sys::HSA_PACKET_TYPE_INVALID, Ordering::Release);
        self.read.store(index + 1, Ordering::Release);
    }

    /// Copies `p` into the ring at the next write index (body first, header last).
    fn push(&self, p: &Packet) {
        let idx = self.write.fetch_add(1, Ordering::AcqRel);
        // SAFETY: bytes 2..64 of a slot the processor does not read before the header is valid.
        unsafe { std::ptr::copy_nonoverlapping(p.0[2..].as_ptr(), self.slot(idx).add(2), 62) };
        self.header_atomic(idx).store(p.header(), Ordering::Release);
    }

    fn ring_doorbell(&self) {
        if let Some(s) = state::signal(self.doorbell) {
            s.store_silent(self.write.load(Ordering::Acquire) as i64 - 1);
        }
    }

    fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
            || self
                .instance
                .upgrade()
                .is_none_or(|i| i.shutdown.load(Ordering::SeqCst))
    }

    fn wait_idle(&self) -> bool {
        let mut n = self.inflight.lock();
        while *n > 0 {
            if self.stopping() {
                return false;
            }
            self.inflight_cv.wait_for(&mut n, Duration::from_millis(10));
        }
        true
    }

    fn wait_signals(&self, deps: &[u64], any: bool) -> bool {
        let deps: Vec<_> = deps
            .iter()
            .filter(|d| **d != 0)
            .filter_map(|d| state::signal(*d))
            .collect();
        if deps.is_empty() {
            return true;
        }
        loop {
            let done = if any {
                deps.iter().any(|s| s.load() == 0)
            } else {
                deps.iter().all(|s| s.load() == 0)
            };
            if done {
                return true;
            }
            if self.stopping() {
                return false;
            }
            if let Some(s) = deps.iter().find(|s| s.load() != 0) {
                s.wait(|v| v == 0, Some(Duration::from_millis(2)));
            }
        }
    }

    fn error(&self, status: sys::hsa_status_t, what: String) {
        if let Some(i) = self.instance.upgrade() {
            i.faults.lock().push(what);
        }
        if let Some(cb) = self.callback {
            // SAFETY: the callback and its data were given to `hsa_queue_create` for exactly
            // this use; the queue pointer is alive.
            unsafe { cb(status, self.hsa_ptr(), self.callback_data as *mut c_void) };
        }
    }

    fn processor_loop(self: Arc<Self>) {
        if let Some(i) = self.instance.upgrade() {
            state::set_current(&i);
        }
        let Some(doorbell) = state::signal(self.doorbell) else {
            return;
        };
        loop {
            if self.stopping() {
                return;
            }
            let r = self.read.load(Ordering::Acquire);
            if doorbell.load() < r as i64 {
                doorbell.wait(|v| v >= r as i64, Some(Duration::from_millis(5)));
                continue;
            }
            let Some(p) = self.packet(r) else {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            };
            let h = p.header();
            if aql::barrier(h) && !self.wait_idle() {
                return;
            }
            match aql::packet_type(h) {
                sys::HSA_PACKET_TYPE_KERNEL_DISPATCH => {
                    *self.inflight.lock() += 1;
                    self.consume(r);
                    let q = self.clone();
                    let spawned = std::thread::Builder::new()
                        .name(format!("hsa-sim-dispatch-{}", self.mem.hsa.id))
                        .spawn(move || q.run_dispatch(p));
                    if spawned.is_err() {
                        *self.inflight.lock() -= 1;
                        self.error(sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES, "spawn".into());
                    }
                }
                t @ (sys::HSA_PACKET_TYPE_BARRIER_AND | sys::HSA_PACKET_TYPE_BARRIER_OR) => {
                    let deps: Vec<u64> = (0..5).map(|i| p.u64_at(8 + 8 * i)).collect();
                    if !self.wait_signals(&deps, t == sys::HSA_PACKET_TYPE_BARRIER_OR) {
                        return;
                    }
                    self.consume(r);
                    release_fence(h);
                    decrement(p.completion_signal());
                }
                other => {
                    self.consume(r);
                    self.error(
                        sys::HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
                        format!("queue {}: unsupported packet type {other}", self.mem.hsa.id),
                    );
                }
            }
        }
    }

    fn run_dispatch(self: Arc<Self>, p: Packet) {
        if let Some(i) = self.instance.upgrade() {
            state::set_current(&i);
        }
        // SAFETY: `Packet` is 64 bytes aligned to 64 with no invalid bit patterns for the
        // all-integer `hsa_kernel_dispatch_packet_t` of the same size and alignment.
        let packet: sys::hsa_kernel_dispatch_packet_t =
            unsafe { std::mem::transmute::<Packet, sys::hsa_kernel_dispatch_packet_t>(p) };
        let kernel = state::REG
            .kernels
            .lock()
            .get(&packet.kernel_object)
            .map(|(_, k)| k.clone());
        let result = match kernel {
            None => Err(format!("unknown kernel object {:#x}", packet.kernel_object)),
            Some(k) => {
                let mut d = Dispatch {
                    packet: &packet,
                    agent: sys::hsa_agent_t { handle: self.agent },
                };
                std::sync::atomic::fence(Ordering::Acquire);
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| k(&mut d))) {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(f)) => Err(f.to_string()),
                    Err(_) => Err("kernel panicked".into()),
                }
            }
        };
        match result {
            Ok(()) => {
                release_fence(packet.header);
                decrement(packet.completion_signal.handle);
            }
            Err(e) => self.error(
                crate::table::HSA_STATUS_ERROR_EXCEPTION,
                format!("queue {}: dispatch failed: {e}", self.mem.hsa.id),
            ),
        }
        let mut n = self.inflight.lock();
        *n -= 1;
        self.inflight_cv.notify_all();
    }

    fn stop(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        if let Some(s) = state::signal(self.doorbell) {
            s.update(|v| v);
        }
        let t = self.thread.lock().take();
        if let Some(t) = t {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        state::signal_destroy(self.doorbell);
    }
}

fn release_fence(header: u16) {
    if aql::release_scope(header) != sys::HSA_FENCE_SCOPE_NONE {
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

fn decrement(signal: u64) {
    if signal != 0 {
        if let Some(s) = state::signal(signal) {
            s.update(|v| v - 1);
        }
    }
}

/// An intercepting queue: the proxy ring the application writes, the hardware queue below,
/// the interceptor chain, the queue's lock and the parked (overflowed) packets.
pub struct InterceptQueue {
    pub(crate) proxy: Arc<HwQueue>,
    hw: Arc<HwQueue>,
    lock: Mutex<()>,
    handlers: Mutex<Vec<(InterceptHandler, usize)>>,
    overflow: Mutex<VecDeque<Packet>>,
    retry_posted: AtomicBool,
    /// Hardware index of the last retry barrier (0 before the first, as in the runtime).
    retry_index: AtomicU64,
    instance: Weak<Instance>,
}

impl std::fmt::Debug for InterceptQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterceptQueue")
            .field("proxy", &self.proxy)
            .field("hw", &self.hw)
            .finish_non_exhaustive()
    }
}

/// A queue the application holds.
#[derive(Debug, Clone)]
pub(crate) enum QueueEntry {
    Hw(Arc<HwQueue>),
    Intercept(Arc<InterceptQueue>),
}

impl QueueEntry {
    /// The ring whose indices the application's index entries act on.
    pub(crate) fn indices(&self) -> &Arc<HwQueue> {
        match self {
            QueueEntry::Hw(q) => q,
            QueueEntry::Intercept(i) => &i.proxy,
        }
    }

    fn instance_id(&self) -> Option<u64> {
        self.indices().instance.upgrade().map(|i| i.id)
    }
}

static QUEUES: LazyLock<Mutex<HashMap<usize, QueueEntry>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The queue behind the application's pointer.
pub(crate) fn lookup(q: *const sys::hsa_queue_t) -> Option<QueueEntry> {
    QUEUES.lock().get(&(q as usize)).cloned()
}

/// Creates a hardware queue with its processor thread.
pub(crate) fn create(
    agent: u64,
    size: u32,
    callback: QueueCallback,
    data: usize,
) -> Result<*mut sys::hsa_queue_t, sys::hsa_status_t> {
    let q = create_hw(agent, size, callback, data)?;
    let p = q.hsa_ptr();
    QUEUES.lock().insert(p as usize, QueueEntry::Hw(q));
    Ok(p)
}

fn check(agent: u64, size: u32) -> Result<Arc<Instance>, sys::hsa_status_t> {
    let inst = state::instance_of_agent(agent).ok_or(sys::HSA_STATUS_ERROR_INVALID_AGENT)?;
    let a = state::REG.agents.lock().get(&agent).cloned();
    if a.is_none_or(|a| a.device != sys::HSA_DEVICE_TYPE_GPU) {
        return Err(sys::HSA_STATUS_ERROR_INVALID_AGENT);
    }
    if !size.is_power_of_two()
        || size < inst.config.queue_min_size
        || size > inst.config.queue_max_size
    {
        return Err(sys::HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    Ok(inst)
}

fn create_hw(
    agent: u64,
    size: u32,
    callback: QueueCallback,
    data: usize,
) -> Result<Arc<HwQueue>, sys::hsa_status_t> {
    let inst = check(agent, size)?;
    let q = HwQueue::new(&inst, agent, size, callback, data)
        .ok_or(sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES)?;
    let q2 = q.clone();
    let t = std::thread::Builder::new()
        .name(format!("{PROCESSOR_THREAD_PREFIX}{}", q.mem.hsa.id))
        .spawn(move || q2.processor_loop())
        .map_err(|_| sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES)?;
    *q.thread.lock() = Some(t);
    Ok(q)
}

/// Creates an intercepting queue: a proxy ring for the application over a hardware queue.
/// Like the runtime, it needs at least 3 slots (a packet, a new retry barrier and one being
/// processed).
pub(crate) fn create_intercept(
    agent: u64,
    size: u32,
    callback: QueueCallback,
    data: usize,
) -> Result<*mut sys::hsa_queue_t, sys::hsa_status_t> {
    if size < 3 {
        return Err(sys::HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    let hw = create_hw(agent, size, callback, data)?;
    let inst = check(agent, size)?;
    let proxy = HwQueue::new(&inst, agent, size, callback, data)
        .ok_or(sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES)?;
    let iq = Arc::new(InterceptQueue {
        proxy,
        hw,
        lock: Mutex::new(()),
        handlers: Mutex::new(Vec::new()),
        overflow: Mutex::new(VecDeque::new()),
        retry_posted: AtomicBool::new(false),
        retry_index: AtomicU64::new(0),
        instance: Arc::downgrade(&inst),
    });
    if let Some(s) = state::signal(iq.proxy.doorbell) {
        let rings: Weak<InterceptQueue> = Arc::downgrade(&iq);
        *s.doorbell_of.lock() = Some(rings);
    }
    let p = iq.proxy.hsa_ptr();
    QUEUES.lock().insert(p as usize, QueueEntry::Intercept(iq));
    Ok(p)
}

/// Registers an interceptor on an intercepting queue.
pub(crate) fn register(
    q: *const sys::hsa_queue_t,
    handler: InterceptHandler,
    data: usize,
) -> sys::hsa_status_t {
    match lookup(q) {
        Some(QueueEntry::Intercept(iq)) if handler.is_some() => {
            let _g = iq.lock.lock();
            iq.handlers.lock().push((handler, data));
            sys::HSA_STATUS_SUCCESS
        }
        Some(_) => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
        None => sys::HSA_STATUS_ERROR_INVALID_QUEUE,
    }
}

/// Destroys a queue (and, for an intercepting one, its hardware queue).
pub(crate) fn destroy(q: *const sys::hsa_queue_t) -> sys::hsa_status_t {
    let Some(e) = QUEUES.lock().remove(&(q as usize)) else {
        return sys::HSA_STATUS_ERROR_INVALID_QUEUE;
    };
    stop_entry(e);
    sys::HSA_STATUS_SUCCESS
}

fn stop_entry(e: QueueEntry) {
    match e {
        QueueEntry::Hw(q) => q.stop(),
        QueueEntry::Intercept(iq) => {
            iq.hw.stop();
            iq.proxy.stop();
        }
    }
}

/// Destroys every queue of instance `id`.
pub(crate) fn destroy_instance_queues(id: u64) {
    let victims: Vec<QueueEntry> = {
        let mut m = QUEUES.lock();
        let keys: Vec<usize> = m
            .iter()
            .filter(|(_, e)| e.instance_id().is_none_or(|i| i == id))
            .map(|(k, _)| *k)
            .collect();
        keys.into_iter().filter_map(|k| m.remove(&k)).collect()
    };
    victims.into_iter().for_each(stop_entry);
}

/// Parked packets of an intercepting queue.
pub(crate) fn parked(q: *const sys::hsa_queue_t) -> usize {
    match lookup(q) {
        Some(QueueEntry::Intercept(iq)) => iq.overflow.lock().len(),
        _ => 0,
    }
}

// ----- Interception ---------------------------------------------------------------------------

struct Cursor {
    iq: Arc<InterceptQueue>,
    handlers: Vec<(InterceptHandler, usize)>,
    level: usize,
    user_index: u64,
}

thread_local! {
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    static CURSORS: RefCell<Vec<Cursor>> = const { RefCell::new(Vec::new()) };
}

impl state::Doorbell for InterceptQueue {
    /// A store to the proxy doorbell runs the interception on the storing thread; rung from
    /// inside an interceptor, it is deferred to the async-events thread.
    fn rung(self: Arc<Self>) {
        if DEPTH.with(Cell::get) > 0 {
            if let Some(i) = self.instance.upgrade() {
                let w = Arc::downgrade(&self);
                i.post_async(AsyncEvent::Queue(Box::new(move || {
                    if let Some(iq) = w.upgrade() {
                        process(&iq);
                    }
                    true
                })));
            }
            return;
        }
        process(&self);
    }
}

/// Under the queue's lock: retries parked packets, then hands the packets written before the
/// doorbell rang (up to the first invalid header) to the interceptor chain **one packet per
/// call**, in order, as the runtime's `InterceptQueue::StoreRelaxed` does; it stops after a
/// packet whose rewrite was parked (one rewrite at most waits in the overflow buffer).
/// Several packets reach an interceptor in one call only when an interceptor above it writes
/// several.
fn process(iq: &Arc<InterceptQueue>) {
    let _g = iq.lock.lock();
    if flush_overflow(iq) > 0 {
        // No room for the parked packets, so none for new ones: the retry comes back here.
        return;
    }
    let handlers = iq.handlers.lock().clone();
    // One pass over what was written when the doorbell rang: packets written from inside an
    // interceptor are handled by their own (deferred) doorbell.
    let w = iq.proxy.write.load(Ordering::Acquire);
    let mut i = iq.proxy.read.load(Ordering::Acquire);
    while i < w {
        let Some(p) = iq.proxy.packet(i) else {
            break;
        };
        iq.proxy.consume(i);
        let pkts = [p];
        if handlers.is_empty() {
            bottom_write(iq, &pkts);
        } else {
            let top = handlers.len() - 1;
            let (h, data) = handlers[top];
            CURSORS.with(|c| {
                c.borrow_mut().push(Cursor {
                    iq: iq.clone(),
                    handlers: handlers.clone(),
                    level: top,
                    user_index: i,
                })
            });
            DEPTH.with(|d| d.set(d.get() + 1));
            if let Some(h) = h {
                // SAFETY: the handler and its data were registered for this queue with
                // `hsa_amd_queue_intercept_register`; `pkts` holds one packet alive for the
                // call.
                unsafe {
                    h(
                        pkts.as_ptr().cast(),
                        1,
                        i,
                        data as *mut c_void,
                        Some(writer),
                    )
                };
            }
            DEPTH.with(|d| d.set(d.get() - 1));
            CURSORS.with(|c| c.borrow_mut().pop());
        }
        i += 1;
        if !iq.overflow.lock().is_empty() {
            break;
        }
    }
}

/// `writer`: passes packets to the next interceptor down, or into the hardware ring.
unsafe extern "C" fn writer(pkts: *const c_void, count: u64) {
    let r = std::panic::catch_unwind(|| {
        if pkts.is_null() || count == 0 {
            return;
        }
        let packets: Vec<Packet> = (0..count as usize)
            .map(|i| {
                // SAFETY: the writer's contract: `pkts` points to `count` 64-byte packets
                // (possibly unaligned, so read unaligned).
                unsafe { pkts.cast::<Packet>().add(i).read_unaligned() }
            })
            .collect();
        let Some((iq, level, next)) = CURSORS.with(|c| {
            c.borrow().last().map(|c| {
                (
                    c.iq.clone(),
                    c.level,
                    c.level
                        .checked_sub(1)
                        .map(|l| (l, c.handlers[l], c.user_index)),
                )
            })
        }) else {
            log::error!("hsa-sim: writer called outside an interceptor");
            return;
        };
        match next {
            None => bottom_write(&iq, &packets),
            Some((l, (h, data), user_index)) => {
                CURSORS.with(|c| {
                    if let Some(top) = c.borrow_mut().last_mut() {
                        top.level = l;
                    }
                });
                if let Some(h) = h {
                    // SAFETY: a registered handler with its data; `packets` alive for the call.
                    unsafe {
                        h(
                            packets.as_ptr().cast(),
                            count,
                            user_index,
                            data as *mut c_void,
                            Some(writer),
                        )
                    };
                }
                CURSORS.with(|c| {
                    if let Some(top) = c.borrow_mut().last_mut() {
                        top.level = level;
                    }
                });
            }
        }
    });
    if r.is_err() {
        log::error!("hsa-sim: writer panicked");
    }
}

/// The bottom of the chain: into the hardware ring and its doorbell, or parked when full.
fn bottom_write(iq: &Arc<InterceptQueue>, packets: &[Packet]) {
    let mut ov = iq.overflow.lock();
    let written = if ov.is_empty() {
        submit_hw(iq, packets)
    } else {
        0
    };
    if written < packets.len() {
        ov.extend(packets[written..].iter().copied());
        drop(ov);
        post_retry(iq);
    }
}

/// The runtime's `InterceptQueue::Submit`: writes what the ring takes of `packets` (all of
/// them, or none unless they cannot fit even in an empty ring), keeping a slot for a retry
/// barrier, and writes that barrier when some are left over. The number written.
fn submit_hw(iq: &Arc<InterceptQueue>, packets: &[Packet]) -> usize {
    let hw = &iq.hw;
    let count = packets.len() as u64;
    if count == 0 {
        return 0;
    }
    let w = hw.write.load(Ordering::Acquire);
    let r = hw.read.load(Ordering::Acquire);
    let free = hw.size - (w - r);
    let pending_retry = iq.retry_index.load(Ordering::Acquire) > r;
    let keep = u64::from(!pending_retry);
    let n = if count >= hw.size {
        free.saturating_sub(keep)
    } else if free < count + keep {
        0
    } else {
        count
    };
    if n < count && !pending_retry && free >= 1 {
        let retry = sys::hsa_barrier_and_packet_t {
            header: aql::header(
                sys::HSA_PACKET_TYPE_BARRIER_AND,
                true,
                sys::HSA_FENCE_SCOPE_NONE,
                sys::HSA_FENCE_SCOPE_NONE,
            ),
            ..Default::default()
        };
        // SAFETY: a 64-byte plain-integer struct read as a packet.
        let retry = Packet(unsafe {
            std::mem::transmute::<sys::hsa_barrier_and_packet_t, [u8; 64]>(retry)
        });
        iq.retry_index.store(w, Ordering::Release);
        hw.push(&retry);
        hw.ring_doorbell();
    }
    for p in &packets[..n as usize] {
        hw.push(p);
    }
    if n > 0 {
        hw.ring_doorbell();
    }
    n as usize
}

fn post_retry(iq: &Arc<InterceptQueue>) {
    if !iq.retry_posted.swap(true, Ordering::SeqCst) {
        if let Some(i) = iq.instance.upgrade() {
            let w = Arc::downgrade(iq);
            i.post_async(AsyncEvent::Queue(Box::new(move || retry(&w))));
        }
    }
}

/// On the async-events thread: retries the parked packets of `w` once its retry barrier was
/// consumed, else waits a little and posts itself again. Whether the thread goes on to poll
/// its armed handlers (not when the queue is gone or stopping, nor while waiting).
fn retry(w: &Weak<InterceptQueue>) -> bool {
    let Some(iq) = w.upgrade() else {
        return false;
    };
    if iq.hw.stopping() {
        return false;
    }
    // The runtime retries when its retry barrier completed (its completion signal is the
    // queue's async doorbell); until then, wait here.
    let ri = iq.retry_index.load(Ordering::Acquire);
    if iq.hw.read.load(Ordering::Acquire) <= ri {
        std::thread::sleep(Duration::from_millis(1));
        iq.retry_posted.store(false, Ordering::SeqCst);
        post_retry(&iq);
        return false;
    }
    iq.retry_posted.store(false, Ordering::SeqCst);
    // As the doorbell the runtime rings then: parked packets first, then new ones.
    process(&iq);
    true
}

/// Moves parked packets into the hardware ring as the runtime would; the number left.
fn flush_overflow(iq: &Arc<InterceptQueue>) -> usize {
    let mut ov = iq.overflow.lock();
    if ov.is_empty() {
        return 0;
    }
    let pending: Vec<Packet> = ov.iter().copied().collect();
    let n = submit_hw(iq, &pending);
    ov.drain(..n);
    let left = ov.len();
    drop(ov);
    if left > 0 {
        post_retry(iq);
    }
    left
}
