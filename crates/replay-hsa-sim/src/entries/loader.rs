//! The loader extension of the simulated runtime (SPEC §9.1): `hsa_ven_amd_loader` 1.03 as a
//! table ([`LoaderTable`]), handed out by `hsa_system_get_major_extension_table`, with its
//! host-address and executable queries and the iteration over executables.

use std::ffi::c_void;

use replay_hsa::sys::{self, hsa_status_t, Entry};

use super::boundary::guard;
use crate::fault::SimFault;
use crate::state::{self, REG};
use crate::table::{erase, not_simulated};

/// `HSA_EXTENSION_AMD_LOADER`.
pub const HSA_EXTENSION_AMD_LOADER: u16 = 0x201;

/// `hsa_ven_amd_loader_1_03_pfn_t`: the loader extension table (major 1, minor 3). Only the
/// host-address query, the executable query and `hsa_ven_amd_loader_iterate_executables` are
/// simulated; the others answer [`STATUS_NOT_SIMULATED`](crate::table::STATUS_NOT_SIMULATED).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LoaderTable {
    /// `hsa_ven_amd_loader_query_host_address(const void*, const void**)`.
    pub query_host_address: Entry,
    /// `hsa_ven_amd_loader_query_segment_descriptors`.
    pub query_segment_descriptors: Entry,
    /// `hsa_ven_amd_loader_query_executable(const void*, hsa_executable_t*)`.
    pub query_executable: Entry,
    /// `hsa_ven_amd_loader_executable_iterate_loaded_code_objects`.
    pub executable_iterate_loaded_code_objects: Entry,
    /// `hsa_ven_amd_loader_loaded_code_object_get_info`.
    pub loaded_code_object_get_info: Entry,
    /// `hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size`.
    pub code_object_reader_create_from_file_with_offset_size: Entry,
    /// `hsa_ven_amd_loader_iterate_executables(callback(hsa_executable_t, void*), void*)`.
    pub iterate_executables: Entry,
}

fn loader_table() -> LoaderTable {
    let stub = erase(not_simulated as *const ());
    LoaderTable {
        query_host_address: erase(loader_query_host_address as *const ()),
        query_segment_descriptors: stub,
        query_executable: erase(loader_query_executable as *const ()),
        executable_iterate_loaded_code_objects: stub,
        loaded_code_object_get_info: stub,
        code_object_reader_create_from_file_with_offset_size: stub,
        iterate_executables: erase(loader_iterate_executables as *const ()),
    }
}

pub(super) unsafe extern "C" fn hsa_system_major_extension_supported(
    extension: u16,
    major: u16,
    minor: *mut u16,
    result: *mut bool,
) -> hsa_status_t {
    guard!(
        "hsa_system_major_extension_supported",
        sys::HSA_STATUS_ERROR,
        {
            if result.is_null() {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            let ok = extension == HSA_EXTENSION_AMD_LOADER && major == 1;
            // SAFETY: non-NULL out pointers of the documented types.
            unsafe {
                result.write(ok);
                if ok && !minor.is_null() {
                    minor.write(3);
                }
            }
            sys::HSA_STATUS_SUCCESS
        }
    )
}

pub(super) unsafe extern "C" fn hsa_system_get_major_extension_table(
    extension: u16,
    major: u16,
    length: usize,
    table: *mut c_void,
) -> hsa_status_t {
    guard!(
        "hsa_system_get_major_extension_table",
        sys::HSA_STATUS_ERROR,
        {
            if extension != HSA_EXTENSION_AMD_LOADER || major != 1 || table.is_null() {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            let t = loader_table();
            let n = length.min(std::mem::size_of::<LoaderTable>());
            // SAFETY: the caller gives `length` writable bytes; at most the table's size is copied.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&t as *const LoaderTable).cast::<u8>(),
                    table.cast(),
                    n,
                )
            };
            sys::HSA_STATUS_SUCCESS
        }
    )
}

unsafe extern "C" fn loader_query_host_address(
    device: *const c_void,
    host: *mut *const c_void,
) -> hsa_status_t {
    guard!(
        "hsa_ven_amd_loader_query_host_address",
        sys::HSA_STATUS_ERROR,
        {
            if host.is_null() || state::find(device as u64).is_none() {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: non-NULL out pointer; simulated memory is host memory.
            unsafe { host.write(device) };
            sys::HSA_STATUS_SUCCESS
        }
    )
}

unsafe extern "C" fn loader_query_executable(device: *const c_void, out: *mut u64) -> hsa_status_t {
    guard!(
        "hsa_ven_amd_loader_query_executable",
        sys::HSA_STATUS_ERROR,
        {
            if out.is_null() {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            let syms = REG.symbols.lock();
            let ex = REG.executables.lock();
            for (h, e) in ex.iter() {
                for s in e.symbols.iter().filter_map(|s| syms.get(s)) {
                    let a = device as u64;
                    if !s.is_kernel && a >= s.address && a < s.address + u64::from(s.size.max(1)) {
                        // SAFETY: non-NULL out pointer to an `hsa_executable_t`.
                        unsafe { out.write(*h) };
                        return sys::HSA_STATUS_SUCCESS;
                    }
                }
            }
            sys::HSA_STATUS_ERROR_INVALID_ARGUMENT
        }
    )
}

type ExecCallback = Option<unsafe extern "C" fn(u64, *mut c_void) -> hsa_status_t>;

unsafe extern "C" fn loader_iterate_executables(
    cb: ExecCallback,
    data: *mut c_void,
) -> hsa_status_t {
    guard!(
        "hsa_ven_amd_loader_iterate_executables",
        sys::HSA_STATUS_ERROR,
        {
            let Some(cb) = cb else {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            let Some(inst) = state::current() else {
                return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
            };
            if inst.injected.fire(SimFault::LoaderIterationFails) {
                return sys::HSA_STATUS_ERROR;
            }
            let execs = inst.executables.lock().clone();
            for e in execs {
                // SAFETY: the application's callback with its data.
                let st = unsafe { cb(e, data) };
                if st != sys::HSA_STATUS_SUCCESS {
                    return st;
                }
            }
            sys::HSA_STATUS_SUCCESS
        }
    )
}
