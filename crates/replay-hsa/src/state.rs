//! The process-wide state the entry points share (SPEC §9.1): `OnLoad` writes it, the
//! allocation wrappers, the queue wrappers and the write interceptor read it.
//!
//! - [`Originals`] (with [`QueueFns`] and [`LoaderFns`]): the entries `OnLoad` saved before
//!   it wrapped them; everything the backend itself calls goes through these, never through the
//!   wrapped table.
//! - [`Backend`] ([`backend`]): the originals, what the last `OnLoad` installed or why it
//!   refused, the attached tool, the allocation [`Tracker`], the [`Agents`] met so far and the
//!   runtime's timestamp frequency.
//! - The replay service the interceptor submits to ([`set_service`], [`service`]).
//! - The runtime's async-events thread, as recognised ([`on_async_thread`]).
//! - Each GPU agent's memory engine (`engine_of`, [`release_pools`]); [`crate::memory`]
//!   builds them.
//!
//! State that one role owns stays with that role: the intercepted queues and the queues to
//! kick ([`crate::queue`]), the copy fence ([`crate::tracker`]), kernel names
//! ([`crate::module::kernels`]). This file imports only the bottom layer (`sys`, `table`), so
//! every role can read it without importing another role back.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_int, c_void};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::thread::ThreadId;

use parking_lot::{Mutex, RwLock};
use replay_core::{AgentId, ReplayService};
use replay_memory::{MemoryEngine, Tracker};

use crate::sys::{self, hsa_status_t};
use crate::table::Versions;

// ----- The saved originals --------------------------------------------------------------------

/// The original entries, saved by `OnLoad` before the wrappers replaced them. Everything the
/// backend itself calls goes through these, never through the wrapped table.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy)]
pub struct Originals {
    pub agent_get_info: sys::AgentGetInfoFn,
    pub region_get_info: sys::RegionGetInfoFn,
    pub memory_allocate: sys::MemoryAllocateFn,
    pub memory_free: sys::MemoryFreeFn,
    pub signal_load_relaxed: sys::SignalLoadFn,
    pub pool_get_info: sys::PoolGetInfoFn,
    pub pool_allocate: sys::PoolAllocateFn,
    pub pool_free: sys::PoolFreeFn,
    pub async_copy: sys::AsyncCopyFn,
    pub pointer_info: sys::PointerInfoFn,
    pub async_copy_rect: Option<sys::AsyncCopyRectFn>,
    pub async_copy_on_engine: Option<sys::AsyncCopyOnEngineFn>,
    pub vmem_map: Option<sys::VmemMapFn>,
    pub vmem_unmap: Option<sys::VmemUnmapFn>,
    pub vmem_reserve: Option<sys::VmemAddressReserveFn>,
    pub vmem_reserve_align: Option<sys::VmemAddressReserveAlignFn>,
    pub vmem_address_free: Option<sys::VmemAddressFreeFn>,
    pub vmem_handle_create: Option<sys::VmemHandleCreateFn>,
    pub vmem_handle_release: Option<sys::VmemHandleReleaseFn>,
    pub vmem_set_access: Option<sys::VmemSetAccessFn>,
    pub vmem_import: Option<sys::VmemImportShareableFn>,
    pub executable_destroy: Option<sys::ExecutableDestroyFn>,
    pub memory_lock: Option<sys::MemoryLockFn>,
    pub memory_lock_to_pool: Option<sys::MemoryLockToPoolFn>,
    pub memory_unlock: Option<sys::MemoryUnlockFn>,
    pub ipc_attach: Option<sys::IpcMemoryAttachFn>,
    pub ipc_detach: Option<sys::IpcMemoryDetachFn>,
    pub ipc_create: Option<sys::IpcMemoryCreateFn>,
    pub memory_copy: Option<sys::MemoryCopyFn>,
    pub memory_fill: Option<sys::MemoryFillFn>,
    pub iterate_agents: Option<sys::IterateAgentsFn>,
    /// The queue, signal and interception entries, when the table has them all.
    pub queue: Option<QueueFns>,
    /// The module-variable entries, when the table has them all.
    pub loader: Option<LoaderFns>,
}

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

/// The original entries the loader walk uses (the walk itself: [`crate::module`]).
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy)]
pub struct LoaderFns {
    pub get_extension_table: sys::GetExtensionTableFn,
    pub iterate_agent_symbols: sys::IterateAgentSymbolsFn,
    pub symbol_get_info: sys::SymbolGetInfoFn,
}

/// The nanoseconds-per-tick assumption when the runtime does not answer: 1 GHz.
const DEFAULT_TIMESTAMP_HZ: u64 = 1_000_000_000;

impl QueueFns {
    /// A wait budget as an `hsa_signal_wait_*` timeout hint, which the runtime reads in system
    /// timestamp ticks (`HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY`, e.g. 100 MHz on Instinct GPUs):
    /// passing nanoseconds would make every bounded wait that many times too long. The
    /// frequency is asked once per `OnLoad` ([`Backend::timestamp_hz`]).
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

// ----- Agents ---------------------------------------------------------------------------------

/// What the backend knows of one agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AgentInfo {
    /// The core's name for it.
    pub id: AgentId,
    /// The runtime's handle.
    pub handle: u64,
    /// `hsa_device_type_t` (CPU 0, GPU 1, DSP 2), when the runtime answered.
    pub device: Option<u32>,
}

impl AgentInfo {
    /// Whether the agent is a CPU (its memory is host memory).
    pub fn is_cpu(&self) -> bool {
        self.device == Some(sys::HSA_DEVICE_TYPE_CPU)
    }
}

/// The agents seen so far: each `hsa_agent_t` handle the backend meets gets an [`AgentId`]
/// (ordinals in first-seen order, never reused) and its device type, queried once.
#[derive(Debug, Default)]
pub struct Agents {
    by_handle: RwLock<HashMap<u64, AgentInfo>>,
}

impl Agents {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The agent of `handle`, registered on first sight; `device` is asked (once, until it
    /// answers) for the device type.
    pub fn get(&self, handle: u64, device: impl FnOnce() -> Option<u32>) -> AgentInfo {
        if let Some(a) = self.by_handle.read().get(&handle) {
            if a.device.is_some() {
                return *a;
            }
        }
        let dev = device();
        let mut map = self.by_handle.write();
        let next = map.len() as u64;
        let a = map.entry(handle).or_insert(AgentInfo {
            id: AgentId(next),
            handle,
            device: None,
        });
        if a.device.is_none() {
            a.device = dev;
        }
        *a
    }

    /// Every agent seen, by id.
    pub fn all(&self) -> Vec<AgentInfo> {
        let mut v: Vec<_> = self.by_handle.read().values().copied().collect();
        v.sort_by_key(|a| a.id);
        v
    }
}

// ----- The backend ----------------------------------------------------------------------------

/// What the last successful `OnLoad` installed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Installed {
    /// The table versions received.
    pub versions: Versions,
    /// The runtime version `OnLoad` was given.
    pub runtime_version: u64,
    /// The entries now wrapped, by C name.
    pub wrapped: Vec<&'static str>,
}

/// The tool library `OnLoad` attached ([`crate::tool`]).
#[derive(Debug)]
pub(crate) struct AttachedTool {
    pub(crate) path: String,
    pub(crate) init_status: Option<c_int>,
    pub(crate) error: Option<String>,
    /// Its `kreplay_tool_fini`, called from `OnUnload`.
    pub(crate) fini: Option<unsafe extern "C" fn()>,
    /// The handle keeping it loaded.
    pub(crate) handle: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// The process-wide HSA backend state.
#[derive(Debug)]
pub struct Backend {
    pub(crate) originals: RwLock<Option<Arc<Originals>>>,
    pub(crate) installed: Mutex<Option<Installed>>,
    pub(crate) last_refusal: Mutex<Option<String>>,
    pub(crate) tool: Mutex<Option<AttachedTool>>,
    /// Every allocation the wrappers saw (SPEC §7.1); each agent's memory engine is built over
    /// it.
    pub tracker: Arc<Tracker>,
    /// The agents met so far.
    pub agents: Agents,
    /// The runtime's timestamp frequency in Hz; 0 until asked after the last `OnLoad`,
    /// `u64::MAX` when the runtime did not answer.
    pub(crate) timestamp_hz: AtomicU64,
}

/// The process's backend (created on first use).
pub fn backend() -> &'static Backend {
    static BACKEND: OnceLock<Backend> = OnceLock::new();
    BACKEND.get_or_init(|| Backend {
        originals: RwLock::new(None),
        installed: Mutex::new(None),
        last_refusal: Mutex::new(None),
        tool: Mutex::new(None),
        tracker: Arc::new(Tracker::new()),
        agents: Agents::new(),
        timestamp_hz: AtomicU64::new(0),
    })
}

impl Backend {
    /// The runtime's timestamp frequency (Hz), asked with `ask` once per `OnLoad` (lazily: the
    /// runtime answers system queries only once `hsa_init` returned). `None` when it did not
    /// answer (logged once).
    pub fn timestamp_hz(&self, ask: impl FnOnce() -> Option<u64>) -> Option<u64> {
        match self.timestamp_hz.load(Ordering::Relaxed) {
            0 => {
                let hz = ask();
                if hz.is_none() {
                    log::warn!(
                        "[kernel-replay] hsa: hsa_system_get_info(TIMESTAMP_FREQUENCY) did not answer; signal-wait timeouts assume 1 GHz ticks"
                    );
                }
                self.timestamp_hz
                    .store(hz.unwrap_or(u64::MAX), Ordering::Relaxed);
                hz
            }
            u64::MAX => None,
            hz => Some(hz),
        }
    }

    /// The saved originals, once `OnLoad` installed the wrappers.
    pub fn originals(&self) -> Option<Arc<Originals>> {
        self.originals.read().clone()
    }

    /// What the last successful `OnLoad` installed.
    pub fn installed(&self) -> Option<Installed> {
        self.installed.lock().clone()
    }

    /// The agent record of `handle`, with its device type asked through the original entry.
    pub fn agent(&self, o: &Originals, handle: sys::hsa_agent_t) -> AgentInfo {
        self.agents.get(handle.handle, || {
            let mut device: u32 = u32::MAX;
            // SAFETY: the original `hsa_agent_get_info`; HSA_AGENT_INFO_DEVICE writes a 4-byte
            // `hsa_device_type_t` into `device`.
            let st = unsafe {
                (o.agent_get_info)(
                    handle,
                    sys::HSA_AGENT_INFO_DEVICE,
                    (&mut device as *mut u32).cast(),
                )
            };
            (st == sys::HSA_STATUS_SUCCESS).then_some(device)
        })
    }
}

/// The originals and their queue entries, once `OnLoad` installed both.
pub(crate) fn queue_fns() -> Option<(Arc<Originals>, QueueFns)> {
    let o = backend().originals()?;
    let q = o.queue?;
    Some((o, q))
}

// ----- The service ----------------------------------------------------------------------------

/// The replay service the interceptor submits to. The shared object (`replay-ffi`) sets its
/// one service before `OnLoad`; tests set their own. Until one is set, every packet passes
/// through untouched.
static SERVICE: RwLock<Option<Arc<ReplayService>>> = RwLock::new(None);

/// Gives the backend the service its interceptor submits dispatches to (first call wins for the
/// process's lifetime is not enforced: a later call replaces it for later submissions).
pub fn set_service(service: Arc<ReplayService>) {
    *SERVICE.write() = Some(service);
}

/// The service set by [`set_service`].
pub fn service() -> Option<Arc<ReplayService>> {
    SERVICE.read().clone()
}

// ----- The runtime's async-events thread ------------------------------------------------------

/// The runtime's async-events threads (one per runtime; several only where a process holds
/// several simulated runtimes).
static ASYNC_THREADS: LazyLock<RwLock<HashSet<ThreadId>>> =
    LazyLock::new(|| RwLock::new(HashSet::new()));
/// Agents whose runtime was asked for its async thread.
static ASYNC_ASKED: LazyLock<Mutex<HashSet<u64>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// Whether the calling thread is the runtime's async-events thread.
pub fn on_async_thread() -> bool {
    ASYNC_THREADS.read().contains(&std::thread::current().id())
}

unsafe extern "C" fn record_async_thread(_arg: *mut c_void) {
    let _ = catch_unwind(|| {
        ASYNC_THREADS.write().insert(std::thread::current().id());
    });
}

/// Learns the async-events thread of agent `handle`'s runtime, once per agent: a function run
/// there (`hsa_amd_async_function`) records its thread.
pub(crate) fn learn_async_thread(handle: u64, q: &QueueFns) {
    if ASYNC_ASKED.lock().insert(handle) {
        // SAFETY: the original `hsa_amd_async_function` with a function of the right type.
        let st = unsafe { (q.async_function)(Some(record_async_thread), std::ptr::null_mut()) };
        if st != sys::HSA_STATUS_SUCCESS {
            log::warn!("[kernel-replay] hsa: hsa_amd_async_function failed ({st:#x}); the async-events thread is not recognised");
        }
    }
}

// ----- Memory engines -------------------------------------------------------------------------

/// Each GPU agent's memory engine, by agent handle.
static ENGINES: LazyLock<Mutex<HashMap<u64, Arc<MemoryEngine>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The memory engine of agent `handle`, made by `make` on first use.
pub(crate) fn engine_of(handle: u64, make: impl FnOnce() -> MemoryEngine) -> Arc<MemoryEngine> {
    ENGINES
        .lock()
        .entry(handle)
        .or_insert_with(|| Arc::new(make()))
        .clone()
}

/// Frees the pooled backing memory of every agent's memory engine (blocks a live snapshot
/// holds are freed when it ends); the bytes freed now. For the allocation wrappers when an
/// application allocation fails for lack of memory (SPEC §7.3).
pub fn release_pools() -> u64 {
    let engines: Vec<Arc<MemoryEngine>> = ENGINES.lock().values().cloned().collect();
    engines
        .iter()
        .map(|e| {
            let before = e.pooled_bytes();
            e.release_pools();
            before.saturating_sub(e.pooled_bytes())
        })
        .sum()
}

/// Frees the pooled backing of every agent's engine that sat unused for the service's
/// `pool_idle_release` (SPEC §7.3); the allocation wrappers call it before each application
/// allocation, so a process that stopped replaying gives the memory back. The bytes freed.
pub fn release_idle() -> u64 {
    let Some(after) = service().map(|s| s.policy().pool_idle_release) else {
        return 0;
    };
    let engines: Vec<Arc<MemoryEngine>> = ENGINES.lock().values().cloned().collect();
    engines.iter().map(|e| e.release_idle(after)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_first_seen_ordinals_and_device_is_asked_until_known() {
        let agents = Agents::new();
        let gpu = agents.get(0xabc, || None);
        assert_eq!((gpu.id, gpu.device), (AgentId(0), None));
        let gpu = agents.get(0xabc, || Some(sys::HSA_DEVICE_TYPE_GPU));
        assert_eq!((gpu.id, gpu.device), (AgentId(0), Some(1)));
        // Known now: not asked again.
        let again = agents.get(0xabc, || panic!("asked twice"));
        assert_eq!(again, gpu);
        let cpu = agents.get(0x1, || Some(sys::HSA_DEVICE_TYPE_CPU));
        assert_eq!(cpu.id, AgentId(1));
        assert!(cpu.is_cpu() && !gpu.is_cpu());
        assert_eq!(agents.all(), vec![gpu, cpu]);
    }
}
