//! The loader extension of the simulated runtime (SPEC §9.1): `hsa_ven_amd_loader` 1.03 as a
//! table ([`LoaderTable`]), handed out by `hsa_system_get_major_extension_table`, with its
//! host-address and executable queries, the iteration over executables, and each
//! executable's loaded code objects with where the loader read them from (SPEC §13: the
//! memory the application handed to its code object reader).

use std::ffi::c_void;

use replay_hsa::sys::{self, hsa_status_t, Entry};

use super::boundary::{guard, put};
use crate::fault::SimFault;
use crate::state::{self, REG};
use crate::table::{erase, not_simulated};

/// `HSA_EXTENSION_AMD_LOADER`.
pub const HSA_EXTENSION_AMD_LOADER: u16 = 0x201;

/// `hsa_ven_amd_loader_1_03_pfn_t`: the loader extension table (major 1, minor 3). The
/// host-address query, the executable query, `hsa_ven_amd_loader_iterate_executables` and the
/// loaded code objects' iteration and queries are simulated; the others answer [`STATUS_NOT_SIMULATED`](crate::table::STATUS_NOT_SIMULATED).
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
        executable_iterate_loaded_code_objects: erase(
            loader_executable_iterate_loaded_code_objects as *const (),
        ),
        loaded_code_object_get_info: erase(loader_loaded_code_object_get_info as *const ()),
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

type LoadedCallback = Option<unsafe extern "C" fn(u64, *mut c_void) -> hsa_status_t>;

unsafe extern "C" fn loader_executable_iterate_loaded_code_objects(
    exec: u64,
    cb: LoadedCallback,
    data: *mut c_void,
) -> hsa_status_t {
    guard!(
        "hsa_ven_amd_loader_executable_iterate_loaded_code_objects",
        sys::HSA_STATUS_ERROR,
        {
            let Some(cb) = cb else {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            if !REG.executables.lock().contains_key(&exec) {
                return crate::table::HSA_STATUS_ERROR_INVALID_EXECUTABLE;
            }
            let mut loaded: Vec<u64> = REG
                .loaded
                .lock()
                .iter()
                .filter(|(_, l)| l.executable == exec)
                .map(|(h, _)| *h)
                .collect();
            loaded.sort_unstable();
            for l in loaded {
                // SAFETY: the application's callback with its data.
                let st = unsafe { cb(l, data) };
                if st != sys::HSA_STATUS_SUCCESS {
                    return st;
                }
            }
            sys::HSA_STATUS_SUCCESS
        }
    )
}

/// `hsa_ven_amd_loader_loaded_code_object_get_info`: executable (0), kind (1: agent), agent
/// (2), storage type (3: memory), storage memory base (4) and size (5), the URI's length (10)
/// and the URI (11, `memory://PID#offset=BASE&size=SIZE`, as the real loader names code
/// objects loaded from memory).
unsafe extern "C" fn loader_loaded_code_object_get_info(
    loaded: u64,
    attr: u32,
    value: *mut c_void,
) -> hsa_status_t {
    guard!(
        "hsa_ven_amd_loader_loaded_code_object_get_info",
        sys::HSA_STATUS_ERROR,
        {
            let Some(l) = REG.loaded.lock().get(&loaded).cloned() else {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            let uri = format!(
                "memory://{}#offset={:#x}&size={}",
                std::process::id(),
                l.base,
                l.size
            );
            // SAFETY: in each arm `value` points to the attribute's documented type; the URI
            // gets URI_LENGTH bytes, not NUL-terminated, as in the real loader.
            unsafe {
                match attr {
                    0 => put(value, l.executable),
                    1 => put(value, 1u32),
                    2 => put(value, sys::hsa_agent_t { handle: l.agent }),
                    3 => put(value, 1u32),
                    4 => put(value, l.base),
                    5 => put(value, l.size),
                    10 => put(value, uri.len() as u32),
                    11 => {
                        if value.is_null() {
                            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
                        }
                        std::ptr::copy_nonoverlapping(uri.as_ptr(), value.cast(), uri.len());
                        sys::HSA_STATUS_SUCCESS
                    }
                    _ => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
                }
            }
        }
    )
}
