//! Code objects on HSA: the loader walk, module variables (SPEC §7.1) and, in [`kernels`],
//! kernel names, argument-block sizes and executable lifetimes (SPEC §3, §4, §7.2).
//!
//! The walk ([`LoaderFns::agent_symbols`], then the symbol queries) enumerates the loaded
//! executables through the AMD loader extension (`hsa_system_get_major_extension_table` for
//! `HSA_EXTENSION_AMD_LOADER` 1.03, `hsa_ven_amd_loader_iterate_executables`) and each
//! executable's symbols for the agent (`hsa_executable_iterate_agent_symbols`,
//! `hsa_executable_symbol_get_info`), so an executable loaded after the tool started is
//! covered. [`HsaModules`], the [`ModuleVariables`] of one GPU agent, walks at every snapshot;
//! [`kernels`] on the first dispatch of a kernel object it does not know.
//!
//! Kept: variable symbols with an address and a size. Skipped: 1-byte `__hip_cuid_*`
//! bookkeeping, read-only (`__constant__`) variables and variables above [`MAX_VARIABLE`]. Any
//! failure of the enumeration (no loader extension, an entry returning an error) is an `Err`,
//! and the memory layer then declines `untracked_memory` rather than replay with a variable it
//! cannot restore.

pub mod kernels;

use std::ffi::c_void;

use replay_core::AgentId;
use replay_memory::{ModuleVariable, ModuleVariables};

use crate::state::LoaderFns;
use crate::sys;

/// Variables larger than this are not captured (1 GiB).
pub const MAX_VARIABLE: u64 = 1 << 30;

/// The module variables of one GPU agent.
#[derive(Debug, Clone, Copy)]
pub struct HsaModules {
    agent: sys::hsa_agent_t,
    loader: Option<LoaderFns>,
}

impl HsaModules {
    /// The variables of agent `agent` (runtime handle), enumerated through `loader`; without
    /// the entries every enumeration fails.
    pub fn new(agent: u64, loader: Option<LoaderFns>) -> Self {
        Self {
            agent: sys::hsa_agent_t { handle: agent },
            loader,
        }
    }
}

fn ok(st: sys::hsa_status_t, what: &str) -> Result<(), String> {
    if st == sys::HSA_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} returned {st:#x}"))
    }
}

unsafe extern "C" fn collect_exec(exec: u64, data: *mut c_void) -> sys::hsa_status_t {
    // SAFETY: `data` is the `Vec` passed by `enumerate`, alive for the iteration.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        (*data.cast::<Vec<u64>>()).push(exec)
    }));
    sys::HSA_STATUS_SUCCESS
}

unsafe extern "C" fn collect_symbol(
    _exec: u64,
    _agent: sys::hsa_agent_t,
    sym: u64,
    data: *mut c_void,
) -> sys::hsa_status_t {
    // SAFETY: `data` is the `Vec` passed by `enumerate`, alive for the iteration.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        (*data.cast::<Vec<u64>>()).push(sym)
    }));
    sys::HSA_STATUS_SUCCESS
}

impl LoaderFns {
    /// Every symbol of `agent` in every loaded executable, with its executable: the loader
    /// extension's executables (`hsa_ven_amd_loader_iterate_executables`), then each one's
    /// agent symbols. Any failure is an `Err` naming the entry.
    pub fn agent_symbols(&self, agent: sys::hsa_agent_t) -> Result<Vec<(u64, u64)>, String> {
        let mut table = std::mem::MaybeUninit::<sys::LoaderTable103>::zeroed();
        // SAFETY: the original entry with a writable buffer of the length given.
        let st = unsafe {
            (self.get_extension_table)(
                sys::HSA_EXTENSION_AMD_LOADER,
                1,
                std::mem::size_of::<sys::LoaderTable103>(),
                table.as_mut_ptr().cast(),
            )
        };
        ok(st, "hsa_system_get_major_extension_table(AMD loader 1)")?;
        // SAFETY: zero-initialised, then (partly) written with nullable function pointers.
        let table = unsafe { table.assume_init() };
        let iterate = table
            .iterate_executables
            .ok_or("the AMD loader lacks hsa_ven_amd_loader_iterate_executables")?;
        // SAFETY: the loader's `hsa_ven_amd_loader_iterate_executables` (1.03 layout).
        let iterate: sys::IterateExecutablesFn = unsafe { std::mem::transmute(iterate) };
        let mut execs: Vec<u64> = Vec::new();
        // SAFETY: a callback of the right type and a live `Vec`.
        let st = unsafe { iterate(Some(collect_exec), (&mut execs as *mut Vec<u64>).cast()) };
        ok(st, "hsa_ven_amd_loader_iterate_executables")?;
        let mut out = Vec::new();
        for exec in execs {
            let mut syms: Vec<u64> = Vec::new();
            // SAFETY: a callback of the right type and a live `Vec`.
            let st = unsafe {
                (self.iterate_agent_symbols)(
                    exec,
                    agent,
                    Some(collect_symbol),
                    (&mut syms as *mut Vec<u64>).cast(),
                )
            };
            ok(st, "hsa_executable_iterate_agent_symbols")?;
            out.extend(syms.into_iter().map(|s| (exec, s)));
        }
        Ok(out)
    }

    /// The symbol's kind (`hsa_symbol_kind_t`).
    pub fn kind(&self, sym: u64) -> Result<u32, String> {
        self.info(sym, sys::HSA_EXECUTABLE_SYMBOL_INFO_TYPE, "symbol type")
    }

    /// The symbol's name (the runtime writes `NAME_LENGTH` bytes, not NUL-terminated).
    pub fn name(&self, sym: u64) -> Result<String, String> {
        let len: u32 = self.info(
            sym,
            sys::HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH,
            "name length",
        )?;
        let mut name = vec![0u8; len as usize];
        // SAFETY: NAME writes NAME_LENGTH bytes into a buffer of that size.
        let st = unsafe {
            (self.symbol_get_info)(
                sym,
                sys::HSA_EXECUTABLE_SYMBOL_INFO_NAME,
                name.as_mut_ptr().cast(),
            )
        };
        ok(st, "symbol name")?;
        if let Some(nul) = name.iter().position(|&b| b == 0) {
            name.truncate(nul);
        }
        Ok(String::from_utf8_lossy(&name).into_owned())
    }

    /// A kernel symbol's kernel object (what dispatch packets name).
    pub fn kernel_object(&self, sym: u64) -> Result<u64, String> {
        self.info(
            sym,
            sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
            "kernel object",
        )
    }

    /// A kernel symbol's argument block size in bytes, hidden arguments included
    /// (`HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE`).
    pub fn kernarg_segment_size(&self, sym: u64) -> Result<u32, String> {
        self.info(
            sym,
            sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
            "kernarg segment size",
        )
    }

    fn info<T: Default>(&self, sym: u64, attr: u32, what: &str) -> Result<T, String> {
        let mut v = T::default();
        // SAFETY: the original symbol query; `T` is the attribute's documented type.
        let st = unsafe { (self.symbol_get_info)(sym, attr, (&mut v as *mut T).cast()) };
        ok(st, what)?;
        Ok(v)
    }

    /// The variables of `executable` for `agent` that a snapshot captures ([`captured`]):
    /// what a capture names its module-variable regions by (SPEC §13).
    pub fn variables_of(
        &self,
        executable: u64,
        agent: sys::hsa_agent_t,
    ) -> Result<Vec<ModuleVariable>, String> {
        let mut out = Vec::new();
        for (exec, sym) in self.agent_symbols(agent)? {
            if exec != executable {
                continue;
            }
            if let Some(v) = self.variable(sym)? {
                if captured(&v) {
                    out.push(v);
                }
            }
        }
        Ok(out)
    }

    fn variable(&self, sym: u64) -> Result<Option<ModuleVariable>, String> {
        if self.kind(sym)? != sys::HSA_SYMBOL_KIND_VARIABLE {
            return Ok(None);
        }
        let name = self.name(sym)?;
        let base: u64 = self.info(
            sym,
            sys::HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
            "variable address",
        )?;
        let size: u32 = self.info(
            sym,
            sys::HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE,
            "variable size",
        )?;
        let read_only: bool = self.info(
            sym,
            sys::HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST,
            "variable is_const",
        )?;
        Ok(Some(ModuleVariable {
            name,
            base,
            size: u64::from(size),
            read_only,
        }))
    }
}

unsafe extern "C" fn collect_loaded(loaded: u64, data: *mut c_void) -> sys::hsa_status_t {
    // SAFETY: `data` is the `Vec` passed by `code_object`, alive for the iteration.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        (*data.cast::<Vec<u64>>()).push(loaded)
    }));
    sys::HSA_STATUS_SUCCESS
}

impl LoaderFns {
    /// The bytes of the code object loaded into `executable` for `agent`, as the application
    /// handed them to its code object reader (SPEC §13): the loader extension's loaded code
    /// objects and the memory each was read from. An `Err` says why there is none (no such
    /// entries, an executable no loader reports, a code object read from a file).
    pub fn code_object(&self, executable: u64, agent: sys::hsa_agent_t) -> Result<Vec<u8>, String> {
        if executable == 0 {
            return Err("the kernel object belongs to no executable the loader reports (an unknown code object)".into());
        }
        let table = self.loader_table()?;
        let (Some(iterate), Some(info)) = (
            table.executable_iterate_loaded_code_objects,
            table.loaded_code_object_get_info,
        ) else {
            return Err("the AMD loader lacks the loaded code object queries".into());
        };
        // SAFETY: the loader's entries of the 1.03 layout, with their C signatures.
        let iterate: sys::IterateLoadedCodeObjectsFn = unsafe { std::mem::transmute(iterate) };
        // SAFETY: as above.
        let info: sys::LoadedCodeObjectGetInfoFn = unsafe { std::mem::transmute(info) };
        let mut loaded: Vec<u64> = Vec::new();
        // SAFETY: a callback of the right type and a live `Vec`.
        let st = unsafe {
            iterate(
                executable,
                Some(collect_loaded),
                (&mut loaded as *mut Vec<u64>).cast(),
            )
        };
        ok(
            st,
            "hsa_ven_amd_loader_executable_iterate_loaded_code_objects",
        )?;
        fn get<T: Default>(
            info: sys::LoadedCodeObjectGetInfoFn,
            l: u64,
            attr: u32,
        ) -> Result<T, String> {
            let mut v = T::default();
            // SAFETY: the loader's query; `T` is the attribute's documented type.
            let st = unsafe { info(l, attr, (&mut v as *mut T).cast()) };
            ok(st, "hsa_ven_amd_loader_loaded_code_object_get_info")?;
            Ok(v)
        }
        for l in loaded {
            let owner: sys::hsa_agent_t = get(info, l, sys::LOADED_CODE_OBJECT_INFO_AGENT)?;
            if owner.handle != agent.handle {
                continue;
            }
            let storage: u32 = get(info, l, sys::LOADED_CODE_OBJECT_INFO_STORAGE_TYPE)?;
            if storage != sys::LOADED_CODE_OBJECT_STORAGE_MEMORY {
                return Err(format!(
                    "the code object of executable {executable:#x} was not loaded from memory (storage type {storage}), so its bytes are not at hand"
                ));
            }
            let base: u64 = get(info, l, sys::LOADED_CODE_OBJECT_INFO_STORAGE_MEMORY_BASE)?;
            let size: u64 = get(info, l, sys::LOADED_CODE_OBJECT_INFO_STORAGE_MEMORY_SIZE)?;
            if base == 0 || size == 0 {
                return Err(format!(
                    "the loader names no memory for the code object of executable {executable:#x}"
                ));
            }
            // SAFETY: the memory the loader read the code object from; the executable is
            // alive (its kernel is being dispatched) and HIP keeps its code objects' memory
            // for the program's life.
            let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, size as usize) };
            return Ok(bytes.to_vec());
        }
        Err(format!(
            "the loader reports no code object of executable {executable:#x} for this agent (loaded some other way)"
        ))
    }

    fn loader_table(&self) -> Result<sys::LoaderTable103, String> {
        let mut table = std::mem::MaybeUninit::<sys::LoaderTable103>::zeroed();
        // SAFETY: the original entry with a writable buffer of the length given.
        let st = unsafe {
            (self.get_extension_table)(
                sys::HSA_EXTENSION_AMD_LOADER,
                1,
                std::mem::size_of::<sys::LoaderTable103>(),
                table.as_mut_ptr().cast(),
            )
        };
        ok(st, "hsa_system_get_major_extension_table(AMD loader 1)")?;
        // SAFETY: zero-initialised, then (partly) written with nullable function pointers.
        Ok(unsafe { table.assume_init() })
    }
}

/// Whether a variable is captured (see the module documentation).
pub fn captured(v: &ModuleVariable) -> bool {
    !(v.read_only
        || v.base == 0
        || v.size == 0
        || v.size > MAX_VARIABLE
        || replay_memory::modules::is_bookkeeping(v))
}

impl ModuleVariables for HsaModules {
    fn enumerate(&self, _agent: AgentId) -> Result<Vec<ModuleVariable>, String> {
        let l = self
            .loader
            .ok_or("the table lacks the loader and executable-symbol entries")?;
        let mut out = Vec::new();
        for (_, sym) in l.agent_symbols(self.agent)? {
            if let Some(v) = l.variable(sym)? {
                if captured(&v) {
                    out.push(v);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str, size: u64, read_only: bool) -> ModuleVariable {
        ModuleVariable {
            name: name.into(),
            base: 0x1000,
            size,
            read_only,
        }
    }

    #[test]
    fn bookkeeping_read_only_and_huge_variables_are_not_captured() {
        assert!(captured(&var("counter", 8, false)));
        assert!(captured(&var("__hip_cuid_1234", 8, false)));
        assert!(captured(&var("big", MAX_VARIABLE, false)));
        assert!(!captured(&var("__hip_cuid_1234", 1, false)));
        assert!(!captured(&var("table", 64, true)));
        assert!(!captured(&var("huge", MAX_VARIABLE + 1, false)));
        assert!(!captured(&var("empty", 0, false)));
    }

    #[test]
    fn without_the_loader_entries_enumeration_is_an_error() {
        let m = HsaModules::new(1, None);
        assert!(m.enumerate(AgentId(0)).is_err());
    }
}
