//! Kernel names (SPEC §3's dispatch description, and the kernel filter of §4 that matches on
//! them): an AQL dispatch packet names only a kernel object (the address of its descriptor),
//! so [`KernelNames`] maps kernel objects to the names of the executables' kernel symbols,
//! found through the loader extension and `hsa_executable_iterate_agent_symbols` like the
//! module variables of [`crate::module`].
//!
//! The map is filled per agent on the first dispatch of a kernel object it does not know (an
//! executable loaded since is found then), so the steady state is one read-locked lookup.
//! Names are the symbols' (mangled) names without the `.kd` suffix code-object v3+ descriptors
//! carry. An object no executable defines (or an enumeration that failed) is remembered as
//! `kernel@0x…`, so a failing loader is asked once per kernel object, not once per dispatch.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::module::LoaderFns;
use crate::sys;

/// Kernel object → kernel name, for every agent.
#[derive(Debug, Default)]
pub struct KernelNames {
    names: RwLock<HashMap<u64, Arc<str>>>,
}

/// The process's map (kernel objects are process-wide addresses).
pub fn global() -> &'static KernelNames {
    static NAMES: std::sync::OnceLock<KernelNames> = std::sync::OnceLock::new();
    NAMES.get_or_init(KernelNames::new)
}

/// The name a dispatch gets when no symbol names its kernel object.
pub fn fallback(kernel_object: u64) -> Arc<str> {
    Arc::from(format!("kernel@{kernel_object:#x}"))
}

/// A symbol name as the user knows the kernel: without the descriptor's `.kd` suffix.
pub fn display_name(symbol: &str) -> &str {
    symbol.strip_suffix(".kd").unwrap_or(symbol)
}

impl KernelNames {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The name of `kernel_object`, dispatched on `agent`; on a miss the agent's kernel
    /// symbols are enumerated through `loader` (if the table has the entries).
    pub fn name(
        &self,
        kernel_object: u64,
        agent: sys::hsa_agent_t,
        loader: Option<&LoaderFns>,
    ) -> Arc<str> {
        if let Some(n) = self.names.read().get(&kernel_object) {
            return n.clone();
        }
        let found = match loader.map(|l| kernel_symbols(l, agent)) {
            Some(Ok(found)) => found,
            Some(Err(why)) => {
                log::warn!(
                    "[kernel-replay] hsa: kernel names of agent {:#x} are unavailable: {why}",
                    agent.handle
                );
                Vec::new()
            }
            None => Vec::new(),
        };
        let mut names = self.names.write();
        for (object, name) in found {
            names.entry(object).or_insert(name);
        }
        names
            .entry(kernel_object)
            .or_insert_with(|| fallback(kernel_object))
            .clone()
    }

    /// Names known, for diagnostics.
    pub fn len(&self) -> usize {
        self.names.read().len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `(kernel object, name)` of every kernel symbol of `agent`.
fn kernel_symbols(l: &LoaderFns, agent: sys::hsa_agent_t) -> Result<Vec<(u64, Arc<str>)>, String> {
    let mut out = Vec::new();
    for (_, sym) in l.agent_symbols(agent)? {
        if l.kind(sym)? != sys::HSA_SYMBOL_KIND_KERNEL {
            continue;
        }
        let name = l.name(sym)?;
        let object = l.kernel_object(sym)?;
        if object != 0 {
            out.push((object, Arc::from(display_name(&name))));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_suffix_is_dropped_and_unknown_objects_fall_back() {
        assert_eq!(display_name("_Z4axpyPfS_f.kd"), "_Z4axpyPfS_f");
        assert_eq!(display_name("plain"), "plain");
        let k = KernelNames::new();
        assert!(k.is_empty());
        let agent = sys::hsa_agent_t { handle: 1 };
        assert_eq!(&*k.name(0x1000, agent, None), "kernel@0x1000");
        assert_eq!(k.len(), 1, "a miss is remembered");
    }
}
