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
