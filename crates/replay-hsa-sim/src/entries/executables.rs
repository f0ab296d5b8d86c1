//! The executable and symbol entries of the simulated core table (SPEC §9.1):
//! `hsa_executable_destroy`, `hsa_executable_iterate_agent_symbols` and
//! `hsa_executable_symbol_get_info` (a kernel's argument block size included), over the
//! modules loaded with [`crate::SimHsa::load_module`].

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::LazyLock;

use parking_lot::Mutex;

use replay_hsa::sys::{self, hsa_status_t};

use super::boundary::{guard, put};
use crate::state::{self, REG};
use crate::table::{
    HSA_STATUS_ERROR_INVALID_EXECUTABLE, HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL,
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
        let mut symbols = REG.symbols.lock();
        for s in rec.symbols {
            if let Some(sym) = symbols.remove(&s) {
                if !sym.is_kernel && sym.address != 0 {
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
