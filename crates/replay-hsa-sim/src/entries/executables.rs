//! The executable and symbol entries of the simulated core table (SPEC §9.1):
//! `hsa_executable_destroy`, `hsa_executable_iterate_agent_symbols` and
//! `hsa_executable_symbol_get_info` (a kernel's argument block size included), over the
//! modules loaded with [`crate::SimHsa::load_module`]; and loading as a HIP runtime does it
//! (SPEC §13 captures what it loaded): `hsa_code_object_reader_create_from_memory` /
//! `_destroy`, `hsa_executable_create_alt`, `hsa_executable_load_agent_code_object` (a
//! [`crate::code_object`] whose kernels are the bodies defined by name),
//! `hsa_executable_freeze` and `hsa_executable_get_symbol_by_name`.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::LazyLock;

use parking_lot::Mutex;

use replay_hsa::sys::{self, hsa_status_t};

use super::boundary::{guard, put};
use crate::code_object::CodeObject;
use crate::state::{self, KernelFn, LoadedRec, REG};
use crate::table::{
    HSA_STATUS_ERROR_INVALID_CODE_OBJECT, HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER,
    HSA_STATUS_ERROR_INVALID_EXECUTABLE, HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL,
    HSA_STATUS_ERROR_INVALID_SYMBOL_NAME, HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED,
};

/// Argument block sizes of kernel symbols, by kernel object ([`crate::SimHsa::set_kernarg_segment_size`]).
pub(crate) static KERNARG_SIZES: LazyLock<Mutex<HashMap<u64, u32>>> =
    LazyLock::new(Default::default);

/// What a kernel symbol reports as its argument block's size when none was set.
pub const DEFAULT_KERNARG_SEGMENT_SIZE: u32 = 256;

/// `hsa_executable_destroy`: the executable and its symbols disappear, its variables' memory
/// is released (as the real loader unloads the code object's segments).
pub(super) unsafe extern "C" fn hsa_executable_destroy(exec: u64) -> hsa_status_t {
    guard!("hsa_executable_destroy", sys::HSA_STATUS_ERROR, {
        let Some(rec) = REG.executables.lock().remove(&exec) else {
            return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
        };
        for inst in state::instances() {
            inst.executables.lock().retain(|e| *e != exec);
        }
        REG.loaded.lock().retain(|_, l| l.executable != exec);
        let mut symbols = REG.symbols.lock();
        for s in rec.symbols {
            if let Some(sym) = symbols.remove(&s) {
                if !sym.is_kernel && !sym.external && sym.address != 0 {
                    state::free(sym.address);
                }
            }
        }
        sys::HSA_STATUS_SUCCESS
    })
}

type SymbolCallback =
    Option<unsafe extern "C" fn(u64, sys::hsa_agent_t, u64, *mut c_void) -> hsa_status_t>;

pub(super) unsafe extern "C" fn hsa_executable_iterate_agent_symbols(
    exec: u64,
    agent: sys::hsa_agent_t,
    cb: SymbolCallback,
    data: *mut c_void,
) -> hsa_status_t {
    guard!(
        "hsa_executable_iterate_agent_symbols",
        sys::HSA_STATUS_ERROR,
        {
            let Some(cb) = cb else {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            let Some(symbols) = REG.executables.lock().get(&exec).map(|e| e.symbols.clone()) else {
                return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
            };
            for s in symbols {
                let same = REG
                    .symbols
                    .lock()
                    .get(&s)
                    .is_some_and(|r| r.agent == agent.handle);
                if same {
                    // SAFETY: the application's callback with its data.
                    let st = unsafe { cb(exec, agent, s, data) };
                    if st != sys::HSA_STATUS_SUCCESS {
                        return st;
                    }
                }
            }
            sys::HSA_STATUS_SUCCESS
        }
    )
}

pub(super) unsafe extern "C" fn hsa_executable_symbol_get_info(
    sym: u64,
    attr: u32,
    value: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_executable_symbol_get_info", sys::HSA_STATUS_ERROR, {
        let Some(s) = REG.symbols.lock().get(&sym).cloned() else {
            return HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
        };
        // SAFETY: in each arm, `value` points to the attribute's documented type; NAME gets
        // NAME_LENGTH bytes (not NUL-terminated), as in the real runtime.
        unsafe {
            match attr {
                0 => put(value, u32::from(s.is_kernel)),
                1 => put(value, s.name.len() as u32),
                2 => {
                    if value.is_null() {
                        return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
                    }
                    std::ptr::copy_nonoverlapping(s.name.as_ptr(), value.cast(), s.name.len());
                    sys::HSA_STATUS_SUCCESS
                }
                5 => put(value, 0u32),
                6 => put(value, 0u32),
                7 => put(value, 0u32),
                8 => put(value, 16u32),
                9 => put(value, s.size),
                10 => put(value, s.is_const),
                17 => put(value, true),
                11 if s.is_kernel => put(
                    value,
                    KERNARG_SIZES
                        .lock()
                        .get(&s.address)
                        .copied()
                        .unwrap_or(DEFAULT_KERNARG_SEGMENT_SIZE),
                ),
                20 => put(value, sys::hsa_agent_t { handle: s.agent }),
                21 if !s.is_kernel => put(value, s.address),
                22 if s.is_kernel => put(value, s.address),
                _ => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}

/// `hsa_code_object_reader_create_from_memory`: the reader remembers the application's memory,
/// which must stay valid while it is used (as with the real runtime).
pub(super) unsafe extern "C" fn hsa_code_object_reader_create_from_memory(
    code_object: *const c_void,
    size: usize,
    reader: *mut u64,
) -> hsa_status_t {
    guard!(
        "hsa_code_object_reader_create_from_memory",
        sys::HSA_STATUS_ERROR,
        {
            if code_object.is_null() || size == 0 || reader.is_null() {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            let h = state::next_handle();
            REG.readers
                .lock()
                .insert(h, (code_object as u64, size as u64));
            // SAFETY: a non-NULL out pointer to an `hsa_code_object_reader_t`.
            unsafe { put(reader.cast(), h) }
        }
    )
}

/// `hsa_code_object_reader_destroy`.
pub(super) unsafe extern "C" fn hsa_code_object_reader_destroy(reader: u64) -> hsa_status_t {
    guard!("hsa_code_object_reader_destroy", sys::HSA_STATUS_ERROR, {
        match REG.readers.lock().remove(&reader) {
            Some(_) => sys::HSA_STATUS_SUCCESS,
            None => HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER,
        }
    })
}

/// `hsa_executable_create_alt(profile, rounding mode, options, executable)`: an empty
/// executable, listed by the loader extension once a code object is loaded into it.
pub(super) unsafe extern "C" fn hsa_executable_create_alt(
    _profile: u32,
    _rounding: u32,
    _options: *const std::ffi::c_char,
    exec: *mut u64,
) -> hsa_status_t {
    guard!("hsa_executable_create_alt", sys::HSA_STATUS_ERROR, {
        if exec.is_null() {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let h = state::next_handle();
        REG.executables.lock().insert(h, state::ExecRec::default());
        // SAFETY: a non-NULL out pointer to an `hsa_executable_t`.
        unsafe { put(exec.cast(), h) }
    })
}

/// `hsa_executable_load_agent_code_object(executable, agent, reader, options, loaded)`: the
/// reader's bytes parsed as a [`CodeObject`]; each kernel's body is the one defined under its
/// name, each variable allocated on the agent.
pub(super) unsafe extern "C" fn hsa_executable_load_agent_code_object(
    exec: u64,
    agent: sys::hsa_agent_t,
    reader: u64,
    _options: *const std::ffi::c_char,
    loaded: *mut u64,
) -> hsa_status_t {
    guard!(
        "hsa_executable_load_agent_code_object",
        sys::HSA_STATUS_ERROR,
        {
            if !REG.executables.lock().contains_key(&exec) {
                return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
            }
            let Some(inst) = state::instance_of_agent(agent.handle) else {
                return sys::HSA_STATUS_ERROR_INVALID_AGENT;
            };
            let Some((base, size)) = REG.readers.lock().get(&reader).copied() else {
                return HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER;
            };
            // SAFETY: the reader's memory, which the application keeps valid while it is used.
            let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, size as usize) };
            let Some(co) = CodeObject::parse(bytes) else {
                return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
            };
            let library = REG.library.lock().clone();
            let mut kernels: Vec<(String, KernelFn)> = Vec::new();
            for k in &co.kernels {
                let key = k.name.strip_suffix(".kd").unwrap_or(&k.name);
                let Some(body) = library.get(key).or_else(|| library.get(&k.name)) else {
                    log::warn!(
                        "hsa-sim: code object kernel {:?} has no defined body",
                        k.name
                    );
                    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
                };
                kernels.push((k.name.clone(), body.clone()));
            }
            let defined = REG
                .executables
                .lock()
                .get(&exec)
                .map(|e| e.defined.clone())
                .unwrap_or_default();
            let (symbols, objects) =
                inst.define_symbols(agent.handle, &co.variables, &kernels, &defined);
            for (object, k) in objects.iter().zip(&co.kernels) {
                KERNARG_SIZES.lock().insert(*object, k.kernarg_size);
            }
            if let Some(e) = REG.executables.lock().get_mut(&exec) {
                e.symbols.extend(symbols);
            }
            inst.add_executable(exec);
            let h = state::next_handle();
            REG.loaded.lock().insert(
                h,
                LoadedRec {
                    executable: exec,
                    agent: agent.handle,
                    base,
                    size,
                },
            );
            if loaded.is_null() {
                return sys::HSA_STATUS_SUCCESS;
            }
            // SAFETY: a non-NULL out pointer to an `hsa_loaded_code_object_t`.
            unsafe { put(loaded.cast(), h) }
        }
    )
}

/// `hsa_executable_agent_global_variable_define(executable, agent, name, address)`: the
/// variable `name` of the code objects loaded for `agent` from now on lives at `address`, memory
/// the application allocated (the loader neither allocates nor frees it). The real loader
/// accepts it for variables the code object declares external; the simulator's code objects do
/// not mark them, so any variable may be placed (a standalone replay places the captured ones
/// where the capture had them, SPEC §13). A name defined twice for an agent, or a NULL name or
/// address, is refused.
pub(super) unsafe extern "C" fn hsa_executable_agent_global_variable_define(
    exec: u64,
    agent: sys::hsa_agent_t,
    name: *const std::ffi::c_char,
    address: *mut c_void,
) -> hsa_status_t {
    guard!(
        "hsa_executable_agent_global_variable_define",
        sys::HSA_STATUS_ERROR,
        {
            if name.is_null() || address.is_null() {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            if state::instance_of_agent(agent.handle).is_none() {
                return sys::HSA_STATUS_ERROR_INVALID_AGENT;
            }
            // SAFETY: a NUL-terminated name from the application.
            let name = unsafe { std::ffi::CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
            let mut execs = REG.executables.lock();
            let Some(e) = execs.get_mut(&exec) else {
                return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
            };
            if e.defined
                .iter()
                .any(|(n, a, _)| *n == name && *a == agent.handle)
            {
                return HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED;
            }
            e.defined.push((name, agent.handle, address as u64));
            sys::HSA_STATUS_SUCCESS
        }
    )
}

/// `hsa_executable_freeze`: nothing to resolve in the simulator.
pub(super) unsafe extern "C" fn hsa_executable_freeze(
    exec: u64,
    _options: *const std::ffi::c_char,
) -> hsa_status_t {
    guard!("hsa_executable_freeze", sys::HSA_STATUS_ERROR, {
        if REG.executables.lock().contains_key(&exec) {
            sys::HSA_STATUS_SUCCESS
        } else {
            HSA_STATUS_ERROR_INVALID_EXECUTABLE
        }
    })
}

/// `hsa_executable_get_symbol_by_name(executable, name, agent, symbol)`.
pub(super) unsafe extern "C" fn hsa_executable_get_symbol_by_name(
    exec: u64,
    name: *const std::ffi::c_char,
    agent: *const sys::hsa_agent_t,
    sym: *mut u64,
) -> hsa_status_t {
    guard!(
        "hsa_executable_get_symbol_by_name",
        sys::HSA_STATUS_ERROR,
        {
            if name.is_null() || sym.is_null() {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: a NUL-terminated name from the application.
            let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
            // SAFETY: NULL or the application's agent.
            let agent = unsafe { agent.as_ref() }.map(|a| a.handle);
            let Some(symbols) = REG.executables.lock().get(&exec).map(|e| e.symbols.clone()) else {
                return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
            };
            let table = REG.symbols.lock();
            let found = symbols.into_iter().find(|s| {
                table
                    .get(s)
                    .is_some_and(|r| r.name == name && agent.is_none_or(|a| a == r.agent))
            });
            match found {
                // SAFETY: a non-NULL out pointer to an `hsa_executable_symbol_t`.
                Some(s) => unsafe { put(sym.cast(), s) },
                None => HSA_STATUS_ERROR_INVALID_SYMBOL_NAME,
            }
        }
    )
}
