//! The simulators' handle tables and the shutdown hook that stops their worker threads (SPEC
//! §10: handles checked on every call, shutdown joins every thread the library started).
//!
//! Every handle type has its own table (and tag, so a handle of one type is never taken for
//! another). Kernels, modules and dispatches remember the simulator they belong to; destroying
//! a simulator (or unloading a module) removes them too, so their handles go stale with it.
//!
//! Lock order: the library's handle table → these tables → the thread registry. No lock of this
//! module is held while a runtime runs a dispatch (the replay callback may call back in), waits,
//! or shuts down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

use replay_core::{AgentId, OutcomeRecord};
use replay_mock::{Completion, Kernel, Module, SimRuntime};

use crate::checked::{Error, HandleTable};
use crate::state::library;
use crate::sys::kreplay_sim_t;

/// Handle tags (bits 24..32 of a handle); contexts have 0.
const TAG_SIM: u8 = 1;
const TAG_KERNEL: u8 = 2;
const TAG_MODULE: u8 = 3;
const TAG_DISPATCH: u8 = 4;

/// A simulated runtime.
#[derive(Debug)]
pub(crate) struct SimEntry {
    pub(crate) rt: SimRuntime,
    /// `kreplay_sim_dispatch` calls on it now (a replay window runs inside one), so destroy
    /// waits for them before it shuts the runtime down.
    pub(crate) in_flight: Arc<AtomicUsize>,
}

/// One `kreplay_sim_dispatch` on a simulator, until dropped.
#[derive(Debug)]
pub(crate) struct SimBusy(Arc<AtomicUsize>);

impl Drop for SimBusy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A kernel of a simulator: a built-in, or a module's instance of one.
#[derive(Debug)]
pub(crate) struct KernelEntry {
    pub(crate) sim: u64,
    pub(crate) kernel: Kernel,
    /// The module it belongs to, and that module's agent (it runs only there).
    pub(crate) module: Option<(u64, AgentId)>,
}

/// A loaded code object.
#[derive(Debug)]
pub(crate) struct ModuleEntry {
    pub(crate) sim: u64,
    pub(crate) module: Module,
}

/// A launched dispatch, until waited for.
#[derive(Debug)]
pub(crate) struct DispatchEntry {
    pub(crate) sim: u64,
    pub(crate) completion: Completion,
    pub(crate) record: Option<OutcomeRecord>,
}

/// Everything the simulator part of the C ABI holds.
#[derive(Debug)]
pub(crate) struct SimTables {
    /// Set by the shutdown hook: nothing is created afterwards.
    pub(crate) closed: bool,
    /// Whether the shutdown hook is registered.
    pub(crate) hook: bool,
    pub(crate) sims: HandleTable<SimEntry>,
    pub(crate) kernels: HandleTable<KernelEntry>,
    pub(crate) modules: HandleTable<ModuleEntry>,
    pub(crate) dispatches: HandleTable<DispatchEntry>,
    /// Modules unloaded from inside a callback: their handles are gone, their code objects
    /// are unloaded on the device once the window has closed (by the outermost
    /// `kreplay_sim_dispatch` that returns; see `kreplay_sim_module_unload`).
    pub(crate) pending_unloads: Vec<(u64, Module)>,
    /// Destroyed simulators whose dispatches outlived destroy's bound: shut down with the rest
    /// at `kreplay_shutdown`.
    pub(crate) stragglers: Vec<SimRuntime>,
}

impl Default for SimTables {
    fn default() -> Self {
        Self {
            closed: false,
            hook: false,
            sims: HandleTable::tagged(TAG_SIM),
            kernels: HandleTable::tagged(TAG_KERNEL),
            modules: HandleTable::tagged(TAG_MODULE),
            dispatches: HandleTable::tagged(TAG_DISPATCH),
            pending_unloads: Vec::new(),
            stragglers: Vec::new(),
        }
    }
}

/// The simulators' tables, process-wide like the library's state (and emptied by the shutdown
/// hook, so nothing stays reachable only through the static).
static TABLES: LazyLock<Mutex<SimTables>> = LazyLock::new(Mutex::default);

/// Simulated runtimes and their kernels, modules and dispatches.
pub(crate) fn tables() -> &'static Mutex<SimTables> {
    &TABLES
}

/// The simulator runtime of a live handle (`ShutDown` after `kreplay_shutdown`).
pub(crate) fn runtime(sim: kreplay_sim_t) -> Result<SimRuntime, Error> {
    library()?;
    tables().lock().runtime(sim.handle)
}

/// The error for a handle that is not live.
pub(crate) fn stale(what: &str, handle: u64) -> Error {
    Error::InvalidHandle(format!(
        "{what} handle {handle:#x} is not a live {what}: never created, of another type, or destroyed"
    ))
}

/// The error when a table is full.
pub(crate) fn full(what: &str) -> Error {
    Error::BadArgument(format!(
        "too many live {what} handles ({}); release some first",
        crate::checked::MAX_SLOTS
    ))
}

impl SimTables {
    /// Fails with `ShutDown` once the hook ran.
    pub(crate) fn open(&self) -> Result<&Self, Error> {
        if self.closed {
            Err(Error::ShutDown)
        } else {
            Ok(self)
        }
    }

    /// The runtime of a live simulator.
    pub(crate) fn runtime(&self, sim: u64) -> Result<SimRuntime, Error> {
        self.open()?
            .sims
            .get(sim)
            .map(|e| e.rt.clone())
            .ok_or_else(|| stale("simulator", sim))
    }

    /// The runtime of a live simulator, counted busy until the guard drops (a dispatch).
    pub(crate) fn dispatching(&self, sim: u64) -> Result<(SimRuntime, SimBusy), Error> {
        let entry = self
            .open()?
            .sims
            .get(sim)
            .ok_or_else(|| stale("simulator", sim))?;
        // Under the tables' lock: destroy removes the entry under it, so once it has, no
        // dispatch is counted any more.
        entry.in_flight.fetch_add(1, Ordering::SeqCst);
        Ok((entry.rt.clone(), SimBusy(Arc::clone(&entry.in_flight))))
    }

    /// Removes a simulator with its kernels, modules and dispatches; its runtime, to shut down
    /// once no lock is held and its dispatches in flight (the counter) have returned.
    pub(crate) fn remove_sim(&mut self, sim: u64) -> Result<(SimRuntime, Arc<AtomicUsize>), Error> {
        if self.closed {
            return Err(Error::ShutDown);
        }
        let entry = self
            .sims
            .remove(sim)
            .ok_or_else(|| stale("simulator", sim))?;
        self.kernels.remove_where(|k| k.sim == sim);
        self.modules.remove_where(|m| m.sim == sim);
        self.dispatches.remove_where(|d| d.sim == sim);
        // Its code objects go with the runtime.
        self.pending_unloads.retain(|(s, _)| *s != sim);
        Ok((entry.rt, entry.in_flight))
    }

    /// Closes the tables and takes every runtime (the shutdown hook); the tables' memory goes.
    pub(crate) fn close(&mut self) -> Vec<SimRuntime> {
        let mut runtimes: Vec<SimRuntime> = self
            .sims
            .remove_where(|_| true)
            .into_iter()
            .map(|e| e.rt)
            .collect();
        runtimes.append(&mut self.stragglers);
        *self = Self {
            closed: true,
            hook: true,
            ..Self::default()
        };
        runtimes
    }
}

/// Registers, once, the hook `kreplay_shutdown` runs: it closes the tables and shuts every
/// simulated runtime down, which joins its worker threads (queues and copy engine).
pub(crate) fn ensure_shutdown_hook(open: &mut SimTables) -> Result<(), Error> {
    if open.hook {
        return Ok(());
    }
    crate::threads::on_shutdown("simulator", || {
        let runtimes = tables().lock().close();
        for rt in runtimes {
            rt.shutdown();
        }
    })
    .map_err(|_| Error::ShutDown)?;
    open.hook = true;
    Ok(())
}
