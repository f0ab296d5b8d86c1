//! Module-scope device variables (`__device__` globals, SPEC §7.1): found per agent by
//! enumerating the loaded code objects at snapshot time, so a code object loaded after the
//! allocation tracker started is still covered.

use replay_core::AgentId;

/// One module-scope variable of a loaded code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleVariable {
    /// Symbol name.
    pub name: String,
    /// Device address.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
    /// Constant data: never written by a kernel, so never captured.
    pub read_only: bool,
}

/// Enumerates the module variables of an agent (the backend's code-object loader).
pub trait ModuleVariables: Send + Sync {
    /// The variables of every code object loaded on `agent` now; `Err(why)` when the
    /// enumeration is incomplete (the snapshot then declines `untracked_memory`).
    fn enumerate(&self, agent: AgentId) -> Result<Vec<ModuleVariable>, String>;

    /// Identifies the load of the code object whose variable holds `addr` on `agent`: a value
    /// that is never reused, so a variable of a code object unloaded since (and of one loaded
    /// at the same address afterwards) is recognised; `None` when no loaded code object holds
    /// `addr`. The memory layer asks at capture and again under its hold before every restore:
    /// a variable whose answer changed is skipped with a warning, never written. Unloads must
    /// remove the code object from this answer inside [`crate::Tracker::release_with`], so an
    /// unload waits for a restore in flight.
    ///
    /// The default answers `Some(0)` for every address: a backend that cannot tell (or never
    /// unloads) keeps the old rule that variables live as long as their code object.
    fn load_generation(&self, agent: AgentId, addr: u64) -> Option<u64> {
        let _ = (agent, addr);
        Some(0)
    }

    /// A number that changes whenever what [`Self::enumerate`], [`Self::load_generation`] or
    /// [`Self::allocation_of`] answer for `agent` changes (a code object loaded or unloaded),
    /// so the memory layer can keep its view of the variables between dispatches;
    /// applications' images hold thousands. `None` (the default): enumerate for every plan.
    fn generation(&self, agent: AgentId) -> Option<u64> {
        let _ = agent;
        None
    }

    /// The allocation `(base, size)` that holds the variable at `addr` on `agent`, when the
    /// backend can tell. Neighbouring variables of one allocation are captured as one run,
    /// the padding between them included; without an answer two are joined only where no
    /// other allocation can start between them. The default cannot tell.
    fn allocation_of(&self, agent: AgentId, addr: u64) -> Option<(u64, u64)> {
        let _ = (agent, addr);
        None
    }
}

/// No code objects, no variables (backends without module variables, tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoModuleVariables;

impl ModuleVariables for NoModuleVariables {
    fn enumerate(&self, _agent: AgentId) -> Result<Vec<ModuleVariable>, String> {
        Ok(Vec::new())
    }
}

/// Variables a compiler emits for bookkeeping only: one byte each, never written by kernels
/// (`__hip_cuid_*` identifies the compilation unit).
pub fn is_bookkeeping(v: &ModuleVariable) -> bool {
    v.name.starts_with("__hip_cuid_") && v.size <= 1
}
