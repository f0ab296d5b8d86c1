//! The process-wide registry (SPEC §9.1): the C entries carry no context pointer, so every
//! handle (agents, pools, signals, kernel objects, symbols, executables, code object readers,
//! loaded code objects) is a record in one registry, and an agent's record names the instance
//! it belongs to. Here too are that instance's record ([`Instance`]: its agents, its faults,
//! the channels of its two threads) and which instance a thread calls current.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, LazyLock, Weak};
use std::thread::JoinHandle;

use parking_lot::Mutex;
use replay_hsa::sys;

use super::config::SimConfig;
use super::events::{AsyncEvent, CopyJob};
use super::memory::KernelFn;
use super::signals::SignalObj;
use crate::pool::PoolKind;

/// A pool (and the region of the same handle).
#[derive(Debug)]
pub struct PoolRec {
    pub(crate) handle: u64,
    pub(crate) agent: u64,
    pub(crate) kind: PoolKind,
    pub(crate) capacity: usize,
    /// Taken by others: never available to this runtime.
    pub(crate) reserved: usize,
    pub(super) used: Mutex<usize>,
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
    /// A variable placed at an address the application gave
    /// (`hsa_executable_agent_global_variable_define`): its memory is the application's.
    pub(crate) external: bool,
}

/// An executable (one loaded module, or the code objects loaded into it).
#[derive(Debug, Default)]
pub struct ExecRec {
    pub(crate) symbols: Vec<u64>,
    /// Variables the application placed before loading
    /// (`hsa_executable_agent_global_variable_define`): (name, agent, address).
    pub(crate) defined: Vec<(String, u64, u64)>,
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

/// Creates a signal; its handle.
pub fn signal_create(initial: i64) -> u64 {
    let h = next_handle();
    REG.signals
        .lock()
        .insert(h, Arc::new(SignalObj::new(initial)));
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

/// The instance owning agent `handle`.
pub(crate) fn instance_of_agent(handle: u64) -> Option<Arc<Instance>> {
    REG.agents
        .lock()
        .get(&handle)
        .and_then(|a| a.instance.upgrade())
}

/// One runtime instance: its record; its life (creation, modules, shutdown) is in `mod.rs`.
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
    pub(super) async_tx: Mutex<Option<mpsc::Sender<AsyncEvent>>>,
    pub(super) copy_tx: Mutex<Option<mpsc::Sender<CopyJob>>>,
    pub(super) threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance").field("id", &self.id).finish()
    }
}
