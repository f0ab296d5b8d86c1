//! Kernel names and lifetimes (SPEC §3's dispatch description, the kernel filter of §4 that
//! matches on names, and §7.2's forgetting of unloaded code): an AQL dispatch packet names only
//! a kernel object (the address of its descriptor), so [`KernelNames`] maps kernel objects to
//! the names and executables of the executables' kernel symbols, found through the loader
//! extension and `hsa_executable_iterate_agent_symbols` (the walk of [`crate::module`]), like
//! the module variables.
//!
//! The map is filled per agent on the first dispatch of a kernel object it does not know (an
//! executable loaded since is found then), so the steady state is one read-locked lookup.
//! Names are the symbols' (mangled) names without the `.kd` suffix code-object v3+ descriptors
//! carry. An object no executable defines (or an enumeration that failed) is remembered as
//! `kernel@0x…`, so a failing loader is asked once per kernel object, not once per dispatch.
//! Each symbol also gives its argument block's size ([`kernarg_segment_size`]), so the
//! interceptor reads every word of the block, however long.
//!
//! `hsa_executable_destroy` is wrapped (`crate::intercept::code`): before the runtime
//! destroys an executable, its kernels are forgotten here ([`KernelNames::forget_executable`])
//! and in the service's memo of kernels that wrote outside the `arguments` scope (keyed by
//! executable), because a later executable may get the same kernel-object addresses.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::state::LoaderFns;
use crate::sys;

/// What a dispatch's kernel object resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSymbol {
    /// The kernel's name (or `kernel@0x…` when no symbol names it).
    pub name: Arc<str>,
    /// The executable defining it (0 when unknown).
    pub executable: u64,
    /// Its argument block's size in bytes (`KERNARG_SEGMENT_SIZE`), when the runtime said.
    pub kernarg_size: Option<u32>,
}

/// How much of an argument block is read when the symbol's size is unknown: HIP's limit on a
/// kernel's arguments (the block is also never read past its allocation).
pub const UNKNOWN_KERNARG_BYTES: usize = 4096;

/// How many bytes of `kernel`'s argument block describe the dispatch (SPEC §7.2: every word of
/// the block, hidden arguments included): the symbol's kernarg segment size, else
/// [`UNKNOWN_KERNARG_BYTES`]. The interceptor reads that much (never past the block's
/// allocation).
pub fn kernarg_segment_size(kernel: &KernelSymbol) -> usize {
    kernel
        .kernarg_size
        .map_or(UNKNOWN_KERNARG_BYTES, |n| n as usize)
}

/// Kernel object → kernel symbol, for every agent.
#[derive(Debug, Default)]
pub struct KernelNames {
    symbols: RwLock<HashMap<u64, KernelSymbol>>,
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

    /// The symbol of `kernel_object`, dispatched on `agent`; on a miss the agent's kernel
    /// symbols are enumerated through `loader` (if the table has the entries).
    pub fn lookup(
        &self,
        kernel_object: u64,
        agent: sys::hsa_agent_t,
        loader: Option<&LoaderFns>,
    ) -> KernelSymbol {
        if let Some(k) = self.symbols.read().get(&kernel_object) {
            return k.clone();
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
        let mut symbols = self.symbols.write();
        for (object, symbol) in found {
            symbols.entry(object).or_insert(symbol);
        }
        symbols
            .entry(kernel_object)
            .or_insert_with(|| KernelSymbol {
                name: fallback(kernel_object),
                executable: 0,
                kernarg_size: None,
            })
            .clone()
    }

    /// Forgets the kernels of `executable`; how many.
    pub fn forget_executable(&self, executable: u64) -> usize {
        let mut symbols = self.symbols.write();
        let before = symbols.len();
        symbols.retain(|_, k| k.executable != executable);
        before - symbols.len()
    }

    /// Whether `kernel_object` is known (named or remembered as unnamed).
    pub fn knows(&self, kernel_object: u64) -> bool {
        self.symbols.read().contains_key(&kernel_object)
    }

    /// Kernel objects known, for diagnostics.
    pub fn len(&self) -> usize {
        self.symbols.read().len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `(kernel object, symbol)` of every kernel symbol of `agent`.
fn kernel_symbols(
    l: &LoaderFns,
    agent: sys::hsa_agent_t,
) -> Result<Vec<(u64, KernelSymbol)>, String> {
    let mut out = Vec::new();
    for (executable, sym) in l.agent_symbols(agent)? {
        if l.kind(sym)? != sys::HSA_SYMBOL_KIND_KERNEL {
            continue;
        }
        let name = l.name(sym)?;
        let object = l.kernel_object(sym)?;
        // A runtime that does not answer leaves the size unknown (the reader's fallback).
        let kernarg_size = l.kernarg_segment_size(sym).ok();
        if object != 0 {
            out.push((
                object,
                KernelSymbol {
                    name: Arc::from(display_name(&name)),
                    executable,
                    kernarg_size,
                },
            ));
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
        let s = k.lookup(0x1000, agent, None);
        assert_eq!((&*s.name, s.executable), ("kernel@0x1000", 0));
        assert!(k.knows(0x1000), "a miss is remembered");
        assert_eq!(k.forget_executable(0), 1);
        assert!(!k.knows(0x1000));
    }
}
