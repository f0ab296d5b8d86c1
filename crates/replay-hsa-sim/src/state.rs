//! The simulator's state (SPEC §9.1): the process-wide registry of handles (agents, pools,
//! signals, executables, kernel objects), host-backed memory, signals with real waiting, and
//! the per-instance async-events and copy-engine threads.
//!
//! Below the queues, the vmem entries and the C entries, which call down into it; it names
//! none of them. What they hang on it is typed here: a mapping's access record
//! ([`MapAccess`]), the queue a doorbell signal rings (`Doorbell`), work a queue hands to
//! the async-events thread (`AsyncEvent::Queue`), and the queues an instance stops when it
//! shuts down (a callback of `Instance::shut_down`).

use std::alloc::Layout;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, LazyLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use replay_hsa::sys;

pub use crate::pool::PoolKind;

/// The name of each instance's async-events thread.
pub const ASYNC_THREAD_NAME: &str = "hsa-sim-async-events";
/// The name of each instance's copy-engine thread.
pub const COPY_THREAD_NAME: &str = "hsa-sim-copy-engine";

/// Configuration of one simulated runtime.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Capacity of each device pool, bytes.
    pub device_pool_bytes: usize,
    /// Capacity of each host pool, bytes.
    pub host_pool_bytes: usize,
    /// Smallest queue size (packets, a power of two).
    pub queue_min_size: u32,
    /// Largest queue size.
    pub queue_max_size: u32,
    /// Device memory taken by others (another process): allocations from each GPU's
    /// coarse-grained pool fail that much earlier, and `HSA_AMD_AGENT_INFO_MEMORY_AVAIL`
    /// reports that much less, while the pool's size stays the same (as on a shared GPU).
    pub device_reserved_bytes: usize,
    /// The system timestamp frequency, Hz (`HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY`): the unit of
    /// `hsa_signal_wait_*` timeout hints. Real systems report e.g. 100 MHz; the default 1 GHz
    /// makes ticks nanoseconds.
    pub timestamp_hz: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            // Accounting only (blocks are allocated on demand); enough that the memory layer's
            // device tier (available minus a 10% + 256 MiB headroom) has room.
            device_pool_bytes: 1 << 30,
            host_pool_bytes: 64 << 20,
            queue_min_size: 2,
            queue_max_size: 4096,
            device_reserved_bytes: 0,
            timestamp_hz: 1_000_000_000,
        }
    }
}

/// A module variable to load.
#[derive(Debug, Clone)]
pub struct VariableSpec {
    /// Symbol name.
    pub name: String,
    /// Size in bytes.
    pub size: u32,
    /// `__constant__` (read-only).
    pub is_const: bool,
}

/// A memory access outside every live allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemFault {
    /// The faulting address.
    pub addr: u64,
    /// The access length.
    pub len: usize,
}

impl std::fmt::Display for MemFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "memory fault at {:#x} ({} bytes)", self.addr, self.len)
    }
}

/// A kernel's body.
pub type KernelFn = Arc<dyn Fn(&mut Dispatch<'_>) -> Result<(), MemFault> + Send + Sync>;

/// What a kernel body sees: its dispatch packet and checked access to simulated memory.
#[derive(Debug)]
pub struct Dispatch<'a> {
    /// The packet (a copy taken when it was consumed).
    pub packet: &'a sys::hsa_kernel_dispatch_packet_t,
    /// The agent running it.
    pub agent: sys::hsa_agent_t,
}

impl Dispatch<'_> {
    /// Reads `buf.len()` bytes at `addr`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        with_range_as(Some((self.agent.handle, false)), addr, buf.len(), |p| {
            // SAFETY: `with_range` hands a pointer to `buf.len()` bytes inside a live
            // allocation, kept alive by the memory map's read lock during the call.
            unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) }
        })
    }

    /// Writes `data` at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        with_range_as(Some((self.agent.handle, true)), addr, data.len(), |p| {
            // SAFETY: as in `read`; the allocation is writable host memory.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) }
        })
    }

    /// Reads a little-endian `u64`.
    pub fn read_u64(&self, addr: u64) -> Result<u64, MemFault> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes a little-endian `u64`.
    pub fn write_u64(&self, addr: u64, v: u64) -> Result<(), MemFault> {
        self.write(addr, &v.to_le_bytes())
    }

    /// The `i`-th 8-byte word of the kernel arguments.
    pub fn arg(&self, i: u64) -> Result<u64, MemFault> {
        self.read_u64(self.packet.kernarg_address + 8 * i)
    }

    /// Adds `v` to the `u64` at `addr` (atomically with respect to other kernels).
    pub fn atomic_add_u64(&self, addr: u64, v: u64) -> Result<u64, MemFault> {
        static ATOMICS: Mutex<()> = Mutex::new(());
        let _g = ATOMICS.lock();
        let old = self.read_u64(addr)?;
        self.write_u64(addr, old.wrapping_add(v))?;
        Ok(old)
    }

    /// Work items in the grid.
    pub fn work_items(&self) -> u64 {
        u64::from(self.packet.grid_size_x)
            * u64::from(self.packet.grid_size_y.max(1))
            * u64::from(self.packet.grid_size_z.max(1))
    }
}

// ----- Memory ---------------------------------------------------------------------------------

/// One live allocation.
#[derive(Debug, Clone)]
pub struct Alloc {
    pub(crate) size: usize,
    layout: Layout,
    pub(crate) pool: u64,
    pub(crate) agent: u64,
    /// Set for a virtual-memory mapping (the vmem entries): its handle and who may access it.
    pub(crate) vmem: Option<Arc<MapAccess>>,
}

/// `hsa_access_permission_t`: no access.
pub const HSA_ACCESS_PERMISSION_NONE: u32 = 0;
/// `hsa_access_permission_t`: read-only.
pub const HSA_ACCESS_PERMISSION_RO: u32 = 1;
/// `hsa_access_permission_t`: write-only.
pub const HSA_ACCESS_PERMISSION_WO: u32 = 2;
/// `hsa_access_permission_t`: read-write.
pub const HSA_ACCESS_PERMISSION_RW: u32 = 3;

/// Who may access one mapping, read by kernels' accessors under the memory map's lock. The
/// vmem entries create and update it; it is here because the memory map's checks read it.
#[derive(Debug, Default)]
pub struct MapAccess {
    /// The vmem handle mapped.
    pub(crate) handle: u64,
    /// Where in the handle the mapping starts, bytes.
    pub(crate) offset: usize,
    /// `hsa_access_permission_t` by agent handle (none until set).
    pub(crate) perms: Mutex<BTreeMap<u64, u32>>,
}

impl MapAccess {
    /// Whether `agent`'s kernels may read (or, with `write`, write) the mapping.
    pub(crate) fn allows(&self, agent: u64, write: bool) -> bool {
        match self.perms.lock().get(&agent).copied() {
            Some(HSA_ACCESS_PERMISSION_RW) => true,
            Some(HSA_ACCESS_PERMISSION_RO) => !write,
            Some(HSA_ACCESS_PERMISSION_WO) => write,
            _ => false,
        }
    }
}

static MEMORY: LazyLock<RwLock<BTreeMap<u64, Alloc>>> =
    LazyLock::new(|| RwLock::new(BTreeMap::new()));

/// Freed blocks kept for reuse, most recent last: `(address, layout, pool)`. Like the real
/// runtime's allocators, a new allocation of the same size from the same pool gets the block
/// freed last, so an address is reused (a new generation at an old address, which a tool must
/// tell apart from the old one).
static FREED: Mutex<Vec<(u64, Layout, u64)>> = Mutex::new(Vec::new());

/// Freed blocks kept at most (the oldest are released beyond).
const FREED_KEPT: usize = 64;

/// Allocates `size` bytes of zeroed host memory for `pool`.
pub(crate) fn allocate(pool: &PoolRec, size: usize) -> Option<u64> {
    if size == 0 {
        return None;
    }
    {
        let mut used = pool.used.lock();
        if *used + size > pool.capacity - pool.reserved {
            return None;
        }
        *used += size;
    }
    let layout = Layout::from_size_align(size, 4096).ok()?;
    let reused = {
        let mut freed = FREED.lock();
        freed
            .iter()
            .rposition(|(_, l, pl)| *l == layout && *pl == pool.handle)
            .map(|i| freed.remove(i).0)
    };
    let p = match reused {
        Some(p) => {
            // SAFETY: a block of `layout` from `alloc_zeroed`, freed by the application and
            // reachable by nobody (it is in no map), zeroed again as a fresh allocation is.
            unsafe { std::ptr::write_bytes(p as *mut u8, 0, size) };
            p as *mut u8
        }
        // SAFETY: `layout` has a non-zero size.
        None => unsafe { std::alloc::alloc_zeroed(layout) },
    };
    if p.is_null() {
        *pool.used.lock() -= size;
        return None;
    }
    MEMORY.write().insert(
        p as u64,
        Alloc {
            size,
            layout,
            pool: pool.handle,
            agent: pool.agent,
            vmem: None,
        },
    );
    Some(p as u64)
}

/// Maps host memory the simulator does not own (`hsa_amd_memory_lock`) into the memory map for
/// `agent`, without a pool (0), so kernels and copies reach it; [`free`] never releases it.
/// Fails when the range is empty or overlaps a live allocation.
pub(crate) fn map_foreign(base: u64, size: usize, agent: u64) -> bool {
    let Ok(layout) = Layout::from_size_align(size, 1) else {
        return false;
    };
    let mut m = MEMORY.write();
    let end = base.saturating_add(size as u64);
    if size == 0
        || m.range(..end)
            .next_back()
            .is_some_and(|(b, a)| b + a.size as u64 > base)
    {
        return false;
    }
    m.insert(
        base,
        Alloc {
            size,
            layout,
            pool: 0,
            agent,
            vmem: None,
        },
    );
    true
}

/// Removes a mapping of [`map_foreign`] (the memory stays the owner's).
pub(crate) fn unmap_foreign(base: u64) -> bool {
    let mut m = MEMORY.write();
    if m.get(&base).is_some_and(|a| a.pool == 0) {
        m.remove(&base);
        true
    } else {
        false
    }
}

/// Frees the allocation based at `base`.
pub(crate) fn free(base: u64) -> bool {
    // Foreign (locked) memory is the application's, never released here; a mapping is
    // released by its unmap.
    if MEMORY
        .read()
        .get(&base)
        .is_some_and(|a| a.pool == 0 || a.vmem.is_some())
    {
        return false;
    }
    let Some(a) = MEMORY.write().remove(&base) else {
        return false;
    };
    if let Some(pool) = REG.pools.lock().get(&a.pool) {
        *pool.used.lock() -= a.size;
    }
    let mut freed = FREED.lock();
    freed.push((base, a.layout, a.pool));
    if freed.len() > FREED_KEPT {
        let (old, layout, _) = freed.remove(0);
        // SAFETY: `old` came from `alloc_zeroed` with this layout and is in no map any more,
        // so no accessor can reach it (they hold the map's read lock while copying).
        unsafe { std::alloc::dealloc(old as *mut u8, layout) };
    }
    true
}

/// The allocation containing `addr`: `(base, record)`.
pub(crate) fn find(addr: u64) -> Option<(u64, Alloc)> {
    let m = MEMORY.read();
    let (b, a) = m.range(..=addr).next_back()?;
    (addr < b + a.size as u64).then(|| (*b, a.clone()))
}

/// Runs `f` with a pointer to `[addr, addr + len)` if it lies inside one live allocation.
pub(crate) fn with_range(addr: u64, len: usize, f: impl FnOnce(*mut u8)) -> Result<(), MemFault> {
    with_range_as(None, addr, len, f)
}

/// [`with_range`] for a kernel of `agent` (`Some((agent, write))`): a virtual-memory mapping
/// that agent has no access to (or only read access, for a write) faults.
pub(crate) fn with_range_as(
    by: Option<(u64, bool)>,
    addr: u64,
    len: usize,
    f: impl FnOnce(*mut u8),
) -> Result<(), MemFault> {
    let m = MEMORY.read();
    let fault = MemFault { addr, len };
    let (b, a) = m.range(..=addr).next_back().ok_or(fault.clone())?;
    if addr.checked_add(len as u64).ok_or(fault.clone())? > b + a.size as u64 {
        return Err(fault);
    }
    if let (Some((agent, write)), Some(v)) = (by, &a.vmem) {
        if !v.allows(agent, write) {
            return Err(fault);
        }
    }
    f(addr as *mut u8);
    Ok(())
}

/// Inserts a mapping's block (for the vmem entries): `[base, base + size)` of a reservation, which
/// the caller owns; fails when it overlaps a live allocation.
pub(crate) fn insert_mapping(
    base: u64,
    size: usize,
    pool: u64,
    agent: u64,
    access: Arc<MapAccess>,
) -> bool {
    let Ok(layout) = Layout::from_size_align(size, 1) else {
        return false;
    };
    let mut m = MEMORY.write();
    let end = base.saturating_add(size as u64);
    if size == 0
        || m.range(..end)
            .next_back()
            .is_some_and(|(b, a)| b + a.size as u64 > base)
    {
        return false;
    }
    m.insert(
        base,
        Alloc {
            size,
            layout,
            pool,
            agent,
            vmem: Some(access),
        },
    );
    true
}

/// Removes the mapping blocks inside `[base, base + size)` and returns them as (base, record);
/// `None` (nothing removed) when the range cuts one.
pub(crate) fn remove_mappings(base: u64, size: usize) -> Option<Vec<(u64, Alloc)>> {
    let mut m = MEMORY.write();
    let end = base.saturating_add(size as u64);
    let inside: Vec<u64> = m
        .range(..end)
        .filter(|(b, a)| a.vmem.is_some() && **b + a.size as u64 > base)
        .map(|(b, _)| *b)
        .collect();
    if inside
        .iter()
        .any(|b| *b < base || b + m[b].size as u64 > end)
    {
        return None;
    }
    Some(
        inside
            .into_iter()
            .filter_map(|b| m.remove(&b).map(|a| (b, a)))
            .collect(),
    )
}

/// Copies `len` bytes between two simulated ranges.
pub(crate) fn copy(dst: u64, src: u64, len: usize) -> Result<(), MemFault> {
    let mut tmp = vec![0u8; len];
    with_range(src, len, |p| {
        // SAFETY: `len` readable bytes inside a live allocation (map read-locked).
        unsafe { std::ptr::copy_nonoverlapping(p, tmp.as_mut_ptr(), len) }
    })?;
    with_range(dst, len, |p| {
        // SAFETY: `len` writable bytes inside a live allocation (map read-locked).
        unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr(), p, len) }
    })
}

// ----- Signals --------------------------------------------------------------------------------

/// What a store to a doorbell signal rings: an intercepting queue, which registers itself on
/// its doorbell (the queues are above this file, so the signal knows it only as this).
pub(crate) trait Doorbell: Send + Sync {
    /// The doorbell was stored to (`hsa_signal_store_*`), on the storing thread.
    fn rung(self: Arc<Self>);
}

/// A signal: a value with real waiting. A doorbell signal of an intercepting queue carries the
/// queue it rings.
pub struct SignalObj {
    value: Mutex<i64>,
    cv: Condvar,
    pub(crate) doorbell_of: Mutex<Option<Weak<dyn Doorbell>>>,
}

impl std::fmt::Debug for SignalObj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SignalObj({})", *self.value.lock())
    }
}

impl SignalObj {
    /// The value.
    pub fn load(&self) -> i64 {
        *self.value.lock()
    }

    /// Stores without ringing a doorbell hook.
    pub fn store_silent(&self, v: i64) {
        *self.value.lock() = v;
        self.cv.notify_all();
    }

    /// Applies `f` to the value, returns the previous one.
    pub fn update(&self, f: impl FnOnce(i64) -> i64) -> i64 {
        let mut g = self.value.lock();
        let old = *g;
        *g = f(old);
        drop(g);
        self.cv.notify_all();
        old
    }

    /// After a store (`hsa_signal_store_*`): if this is an intercepting queue's doorbell, runs
    /// the interception.
    pub(crate) fn on_store(&self) {
        let Some(queue) = self.doorbell_of.lock().as_ref().and_then(Weak::upgrade) else {
            return;
        };
        queue.rung();
    }

    /// Waits until `cond(value)` or `timeout`; returns the last value seen.
    pub fn wait(&self, cond: impl Fn(i64) -> bool, timeout: Option<Duration>) -> i64 {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut g = self.value.lock();
        loop {
            if cond(*g) {
                return *g;
            }
            match deadline {
                Some(d) => {
                    if Instant::now() >= d || self.cv.wait_until(&mut g, d).timed_out() {
                        return *g;
                    }
                }
                None => self.cv.wait(&mut g),
            }
        }
    }
}

/// Creates a signal; its handle.
pub fn signal_create(initial: i64) -> u64 {
    let h = next_handle();
    REG.signals.lock().insert(
        h,
        Arc::new(SignalObj {
            value: Mutex::new(initial),
            cv: Condvar::new(),
            doorbell_of: Mutex::new(None),
        }),
    );
    h
}

/// The signal of `handle`.
pub fn signal(handle: u64) -> Option<Arc<SignalObj>> {
    REG.signals.lock().get(&handle).cloned()
}

/// Destroys a signal.
pub fn signal_destroy(handle: u64) -> bool {
    REG.signals.lock().remove(&handle).is_some()
}

// ----- Registry -------------------------------------------------------------------------------

/// A pool (and the region of the same handle).
#[derive(Debug)]
pub struct PoolRec {
    pub(crate) handle: u64,
    pub(crate) agent: u64,
    pub(crate) kind: PoolKind,
    pub(crate) capacity: usize,
    /// Taken by others: never available to this runtime.
    pub(crate) reserved: usize,
    used: Mutex<usize>,
}

impl PoolRec {
    /// Bytes an allocation may still take.
    pub(crate) fn available(&self) -> usize {
        (self.capacity - self.reserved).saturating_sub(*self.used.lock())
    }
}

/// An agent.
#[derive(Debug)]
pub struct AgentRec {
    pub(crate) handle: u64,
    pub(crate) device: sys::hsa_device_type_t,
    pub(crate) name: String,
    pub(crate) node: u32,
    pub(crate) pools: Vec<u64>,
    pub(crate) instance: Weak<Instance>,
}

/// A symbol of an executable.
#[derive(Debug, Clone)]
pub struct SymbolRec {
    pub(crate) name: String,
    pub(crate) agent: u64,
    pub(crate) is_kernel: bool,
    pub(crate) address: u64,
    pub(crate) size: u32,
    pub(crate) is_const: bool,
}

/// An executable (one loaded module, or the code objects loaded into it).
#[derive(Debug, Default)]
pub struct ExecRec {
    pub(crate) symbols: Vec<u64>,
}

/// A code object loaded into an executable for one agent
/// (`hsa_executable_load_agent_code_object`): where the loader read it from, the memory the
/// application handed to its code object reader, as the real loader reports it
/// (`hsa_ven_amd_loader_loaded_code_object_get_info`).
#[derive(Debug, Clone)]
pub struct LoadedRec {
    pub(crate) executable: u64,
    pub(crate) agent: u64,
    pub(crate) base: u64,
    pub(crate) size: u64,
}

pub(crate) struct Registry {
    next: AtomicU64,
    pub(crate) agents: Mutex<HashMap<u64, Arc<AgentRec>>>,
    pub(crate) pools: Mutex<HashMap<u64, Arc<PoolRec>>>,
    signals: Mutex<HashMap<u64, Arc<SignalObj>>>,
    pub(crate) kernels: Mutex<HashMap<u64, (String, KernelFn)>>,
    pub(crate) symbols: Mutex<HashMap<u64, SymbolRec>>,
    pub(crate) executables: Mutex<HashMap<u64, ExecRec>>,
    /// Kernel bodies by name, which code objects name ([`crate::SimHsa::define_kernel`]).
    pub(crate) library: Mutex<HashMap<String, KernelFn>>,
    /// Code object readers: the application's memory `(base, size)`.
    pub(crate) readers: Mutex<HashMap<u64, (u64, u64)>>,
    /// Loaded code objects.
    pub(crate) loaded: Mutex<HashMap<u64, LoadedRec>>,
    pub(crate) instances: Mutex<Vec<Weak<Instance>>>,
}

pub(crate) static REG: LazyLock<Registry> = LazyLock::new(|| Registry {
    next: AtomicU64::new(0x1_0000),
    agents: Mutex::new(HashMap::new()),
    pools: Mutex::new(HashMap::new()),
    signals: Mutex::new(HashMap::new()),
    kernels: Mutex::new(HashMap::new()),
    symbols: Mutex::new(HashMap::new()),
    executables: Mutex::new(HashMap::new()),
    library: Mutex::new(HashMap::new()),
    readers: Mutex::new(HashMap::new()),
    loaded: Mutex::new(HashMap::new()),
    instances: Mutex::new(Vec::new()),
});

/// A fresh handle, unique in the process (never 0).
pub fn next_handle() -> u64 {
    REG.next.fetch_add(0x40, Ordering::Relaxed)
}

/// Registers a kernel body; its kernel object.
pub fn register_kernel(name: &str, body: KernelFn) -> u64 {
    let h = next_handle();
    REG.kernels.lock().insert(h, (name.to_owned(), body));
    h
}

thread_local! {
    static CURRENT: RefCell<Weak<Instance>> = const { RefCell::new(Weak::new()) };
}

/// Makes `inst` the calling thread's current instance.
pub(crate) fn set_current(inst: &Arc<Instance>) {
    CURRENT.with(|c| *c.borrow_mut() = Arc::downgrade(inst));
}

/// Every live instance.
pub(crate) fn instances() -> Vec<Arc<Instance>> {
    REG.instances
        .lock()
        .iter()
        .filter_map(Weak::upgrade)
        .collect()
}

/// The calling thread's instance, else the last one created that is alive.
pub(crate) fn current() -> Option<Arc<Instance>> {
    CURRENT
        .with(|c| c.borrow().upgrade())
        .or_else(|| REG.instances.lock().iter().rev().find_map(Weak::upgrade))
}

/// Work a queue hands to the async-events thread (a doorbell rung from inside an interceptor,
/// a retry of packets parked on a full ring). It answers whether the thread then polls its
/// armed handlers, as it does after every other event (a retry that is still waiting for its
/// barrier, and posted itself again, does not).
pub(crate) type QueueJob = Box<dyn FnOnce() -> bool + Send>;

/// Work for the async-events thread.
pub(crate) enum AsyncEvent {
    /// Work of an intercepting queue.
    Queue(QueueJob),
    /// `hsa_amd_signal_async_handler`: call `handler(value, arg)` when the condition holds;
    /// it stays armed while the handler answers true.
    Handler(AsyncHandler),
    /// `hsa_amd_async_function`: call `f(arg)` once.
    Function(AsyncFunction),
}

/// A handler armed by `hsa_amd_signal_async_handler`.
pub(crate) struct AsyncHandler {
    pub(crate) signal: u64,
    pub(crate) cond: u32,
    pub(crate) value: i64,
    pub(crate) handler: unsafe extern "C" fn(i64, *mut std::ffi::c_void) -> bool,
    pub(crate) arg: usize,
}

/// A function queued by `hsa_amd_async_function`.
pub(crate) struct AsyncFunction {
    pub(crate) f: unsafe extern "C" fn(*mut std::ffi::c_void),
    pub(crate) arg: usize,
}

/// Whether `v` satisfies `hsa_signal_condition_t` `cond` against `compare`.
pub(crate) fn condition(cond: u32, v: i64, compare: i64) -> bool {
    match cond {
        0 => v == compare,
        1 => v != compare,
        2 => v < compare,
        _ => v >= compare,
    }
}

/// An asynchronous copy.
pub(crate) struct CopyJob {
    pub(crate) dst: u64,
    pub(crate) src: u64,
    pub(crate) len: usize,
    pub(crate) deps: Vec<u64>,
    pub(crate) completion: u64,
}

/// One runtime instance.
pub struct Instance {
    pub(crate) id: u64,
    pub(crate) config: SimConfig,
    /// `[cpu, gpu0, gpu1]`.
    pub(crate) agents: Vec<Arc<AgentRec>>,
    pub(crate) executables: Mutex<Vec<u64>>,
    pub(crate) faults: Mutex<Vec<String>>,
    /// Injected faults ([`crate::SimHsa::inject`]).
    pub(crate) injected: crate::fault::Faults,
    pub(crate) shutdown: AtomicBool,
    async_tx: Mutex<Option<mpsc::Sender<AsyncEvent>>>,
    copy_tx: Mutex<Option<mpsc::Sender<CopyJob>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance").field("id", &self.id).finish()
    }
}

impl Instance {
    pub(crate) fn new(config: SimConfig) -> Arc<Self> {
        let inst = Arc::new_cyclic(|weak: &Weak<Instance>| {
            let mut agents = Vec::new();
            for (i, (device, name)) in [
                (sys::HSA_DEVICE_TYPE_CPU, "sim-cpu"),
                (sys::HSA_DEVICE_TYPE_GPU, "gfx942-sim0"),
                (sys::HSA_DEVICE_TYPE_GPU, "gfx942-sim1"),
            ]
            .into_iter()
            .enumerate()
            {
                let handle = next_handle();
                let kinds: &[PoolKind] = if device == sys::HSA_DEVICE_TYPE_CPU {
                    &[PoolKind::Kernarg, PoolKind::HostFine]
                } else {
                    &[PoolKind::DeviceCoarse, PoolKind::DeviceFine]
                };
                let mut pools = Vec::new();
                for &kind in kinds {
                    let ph = next_handle();
                    let capacity = if device == sys::HSA_DEVICE_TYPE_CPU {
                        config.host_pool_bytes
                    } else {
                        config.device_pool_bytes
                    };
                    REG.pools.lock().insert(
                        ph,
                        Arc::new(PoolRec {
                            handle: ph,
                            agent: handle,
                            kind,
                            capacity,
                            reserved: if kind == PoolKind::DeviceCoarse {
                                config.device_reserved_bytes.min(capacity)
                            } else {
                                0
                            },
                            used: Mutex::new(0),
                        }),
                    );
                    pools.push(ph);
                }
                let rec = Arc::new(AgentRec {
                    handle,
                    device,
                    name: name.to_owned(),
                    node: i as u32,
                    pools,
                    instance: weak.clone(),
                });
                REG.agents.lock().insert(handle, rec.clone());
                agents.push(rec);
            }
            Instance {
                id: next_handle(),
                config,
                agents,
                executables: Mutex::new(Vec::new()),
                faults: Mutex::new(Vec::new()),
                injected: crate::fault::Faults::default(),
                shutdown: AtomicBool::new(false),
                async_tx: Mutex::new(None),
                copy_tx: Mutex::new(None),
                threads: Mutex::new(Vec::new()),
            }
        });
        REG.instances.lock().push(Arc::downgrade(&inst));
        TIMESTAMP_HZ.store(inst.config.timestamp_hz.max(1), Ordering::SeqCst);
        set_current(&inst);
        let (atx, arx) = mpsc::channel::<AsyncEvent>();
        let (ctx, crx) = mpsc::channel::<CopyJob>();
        let w = Arc::downgrade(&inst);
        let async_thread = std::thread::Builder::new()
            .name(ASYNC_THREAD_NAME.into())
            .spawn(move || async_events_loop(w, arx))
            .expect("spawn the async-events thread");
        let w = Arc::downgrade(&inst);
        let copy_thread = std::thread::Builder::new()
            .name(COPY_THREAD_NAME.into())
            .spawn(move || copy_engine_loop(w, crx))
            .expect("spawn the copy-engine thread");
        *inst.async_tx.lock() = Some(atx);
        *inst.copy_tx.lock() = Some(ctx);
        inst.threads.lock().extend([async_thread, copy_thread]);
        inst
    }

    /// Posts work to the async-events thread.
    pub(crate) fn post_async(&self, ev: AsyncEvent) {
        if let Some(tx) = self.async_tx.lock().as_ref() {
            let _ = tx.send(ev);
        }
    }

    /// Submits a copy to the copy engine.
    pub(crate) fn submit_copy(&self, job: CopyJob) -> bool {
        self.copy_tx
            .lock()
            .as_ref()
            .is_some_and(|tx| tx.send(job).is_ok())
    }

    pub(crate) fn pool_handle(&self, gpu: usize, kind: PoolKind) -> u64 {
        let agent = match kind {
            PoolKind::Kernarg | PoolKind::HostFine => &self.agents[0],
            _ => &self.agents[1 + gpu.min(1)],
        };
        let pools = REG.pools.lock();
        agent
            .pools
            .iter()
            .copied()
            .find(|p| pools.get(p).is_some_and(|r| r.kind == kind))
            .unwrap_or(0)
    }

    pub(crate) fn load_module(
        &self,
        gpu: usize,
        variables: &[VariableSpec],
        kernels: &[(&str, KernelFn)],
    ) -> u64 {
        let agent = self.agents[1 + gpu.min(1)].handle;
        let kernels: Vec<(String, KernelFn)> = kernels
            .iter()
            .map(|(n, b)| ((*n).to_owned(), b.clone()))
            .collect();
        let (symbols, _) = self.define_symbols(agent, variables, &kernels);
        let exec = next_handle();
        REG.executables.lock().insert(exec, ExecRec { symbols });
        self.executables.lock().push(exec);
        exec
    }

    /// Adds the symbols of `variables` (allocated from the agent's coarse-grained pool,
    /// zeroed) and `kernels` (each registered as a new kernel object) for agent `agent`; the
    /// symbol handles, and each kernel's object in order.
    pub(crate) fn define_symbols(
        &self,
        agent: u64,
        variables: &[VariableSpec],
        kernels: &[(String, KernelFn)],
    ) -> (Vec<u64>, Vec<u64>) {
        let gpu = self.agents[1..]
            .iter()
            .position(|a| a.handle == agent)
            .unwrap_or(0);
        let handle = self.pool_handle(gpu, PoolKind::DeviceCoarse);
        let pool = REG
            .pools
            .lock()
            .get(&handle)
            .cloned()
            .expect("the coarse pool exists");
        let mut symbols = Vec::new();
        let mut objects = Vec::new();
        for v in variables {
            let address = allocate(&pool, v.size.max(1) as usize).unwrap_or(0);
            let h = next_handle();
            REG.symbols.lock().insert(
                h,
                SymbolRec {
                    name: v.name.clone(),
                    agent,
                    is_kernel: false,
                    address,
                    size: v.size,
                    is_const: v.is_const,
                },
            );
            symbols.push(h);
        }
        for (name, body) in kernels {
            let object = register_kernel(name, body.clone());
            let h = next_handle();
            REG.symbols.lock().insert(
                h,
                SymbolRec {
                    name: name.clone(),
                    agent,
                    is_kernel: true,
                    address: object,
                    size: 0,
                    is_const: false,
                },
            );
            symbols.push(h);
            objects.push(object);
        }
        (symbols, objects)
    }

    /// Lists `exec` among this instance's executables (the loader extension reports it).
    pub(crate) fn add_executable(&self, exec: u64) {
        let mut execs = self.executables.lock();
        if !execs.contains(&exec) {
            execs.push(exec);
        }
    }

    pub(crate) fn kernel_object(&self, name: &str) -> Option<u64> {
        self.symbol(name, true)
    }

    pub(crate) fn variable_address(&self, name: &str) -> Option<u64> {
        self.symbol(name, false)
    }

    fn symbol(&self, name: &str, kernel: bool) -> Option<u64> {
        let execs = self.executables.lock().clone();
        let ex = REG.executables.lock();
        let syms = REG.symbols.lock();
        execs
            .iter()
            .filter_map(|e| ex.get(e))
            .flat_map(|e| e.symbols.iter())
            .filter_map(|s| syms.get(s))
            .find(|s| s.is_kernel == kernel && s.name == name)
            .map(|s| s.address)
    }

    /// Shuts the instance down: marks it stopping, lets `stop_queues` stop the queues of this
    /// instance's id (the queues live above this file), then ends and joins its threads.
    pub(crate) fn shut_down(&self, stop_queues: impl FnOnce(u64)) {
        self.shutdown.store(true, Ordering::SeqCst);
        stop_queues(self.id);
        *self.async_tx.lock() = None;
        *self.copy_tx.lock() = None;
        let threads: Vec<_> = self.threads.lock().drain(..).collect();
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

/// The timestamp frequency of the instance created last (signal entries carry no instance).
static TIMESTAMP_HZ: AtomicU64 = AtomicU64::new(1_000_000_000);

/// The system timestamp frequency, Hz.
pub(crate) fn timestamp_hz() -> u64 {
    TIMESTAMP_HZ.load(Ordering::SeqCst)
}

/// A duration in timestamp ticks (saturating below `u64::MAX`, which means "no timeout").
pub(crate) fn duration_to_ticks(d: Duration) -> u64 {
    let t = d.as_nanos().saturating_mul(u128::from(timestamp_hz())) / 1_000_000_000;
    u64::try_from(t).unwrap_or(u64::MAX).min(u64::MAX - 1)
}

/// A timeout hint in timestamp ticks as a duration (`u64::MAX`: none).
pub(crate) fn ticks_to_duration(ticks: u64) -> Option<Duration> {
    if ticks == u64::MAX {
        return None;
    }
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(timestamp_hz());
    Some(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
}

/// The instance owning agent `handle`.
pub(crate) fn instance_of_agent(handle: u64) -> Option<Arc<Instance>> {
    REG.agents
        .lock()
        .get(&handle)
        .and_then(|a| a.instance.upgrade())
}

/// The async-events thread: queue work (deferred doorbells, retries of parked packets),
/// signal handlers and async functions.
fn async_events_loop(inst: Weak<Instance>, rx: mpsc::Receiver<AsyncEvent>) {
    if let Some(i) = inst.upgrade() {
        set_current(&i);
    }
    let mut armed: Vec<AsyncHandler> = Vec::new();
    loop {
        let ev = if armed.is_empty() {
            match rx.recv() {
                Ok(ev) => Some(ev),
                Err(_) => return,
            }
        } else {
            match rx.recv_timeout(Duration::from_micros(500)) {
                Ok(ev) => Some(ev),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        };
        // Whether the armed handlers are polled after this event (a queue's job says).
        let poll = match ev {
            None => true,
            Some(AsyncEvent::Queue(job)) => job(),
            Some(AsyncEvent::Handler(h)) => {
                armed.push(h);
                true
            }
            Some(AsyncEvent::Function(f)) => {
                let call = std::panic::AssertUnwindSafe(|| {
                    // SAFETY: the function and argument given to `hsa_amd_async_function`,
                    // called once on this thread as the runtime does.
                    unsafe { (f.f)(f.arg as *mut c_void) }
                });
                if std::panic::catch_unwind(call).is_err() {
                    log::error!("hsa-sim: an async function panicked");
                }
                true
            }
        };
        if !poll {
            continue;
        }
        armed.retain(|h| {
            let Some(sig) = signal(h.signal) else {
                return false;
            };
            let v = sig.load();
            if !condition(h.cond, v, h.value) {
                return true;
            }
            let call = std::panic::AssertUnwindSafe(|| {
                // SAFETY: the handler and argument given to `hsa_amd_signal_async_handler`,
                // called on this thread with the value that satisfied its condition.
                unsafe { (h.handler)(v, h.arg as *mut c_void) }
            });
            std::panic::catch_unwind(call).unwrap_or(false)
        });
    }
}

fn copy_engine_loop(inst: Weak<Instance>, rx: mpsc::Receiver<CopyJob>) {
    if let Some(i) = inst.upgrade() {
        set_current(&i);
    }
    while let Ok(job) = rx.recv() {
        if let Some(i) = inst.upgrade() {
            let stall = crate::fault::SimFault::CopyEngineStalled;
            if i.injected.armed(stall) {
                i.injected.count(stall);
                while i.injected.armed(stall) && !i.shutdown.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        for d in &job.deps {
            if let Some(s) = signal(*d) {
                loop {
                    if s.wait(|v| v == 0, Some(Duration::from_millis(20))) == 0 {
                        break;
                    }
                    if inst
                        .upgrade()
                        .is_none_or(|i| i.shutdown.load(Ordering::SeqCst))
                    {
                        return;
                    }
                }
            }
        }
        if let Err(e) = copy(job.dst, job.src, job.len) {
            if let Some(i) = inst.upgrade() {
                i.faults.lock().push(format!("async copy: {e}"));
            }
        }
        if let Some(s) = signal(job.completion) {
            s.update(|v| v - 1);
        }
    }
}
