//! The API tables' slots and the status codes the simulated entries answer (SPEC §9.1): an
//! entry is written into a slot whatever the binding's Rust type for it, and every slot left
//! empty answers [`STATUS_NOT_SIMULATED`]. Below the entry files (`entries`, `vmem`) and the
//! queues (a kernel fault's status), which all use it; it uses no file of the crate.

use replay_hsa::sys::{self, hsa_status_t, Entry};

/// What an entry that is not simulated answers: `HSA_STATUS_ERROR`.
pub const STATUS_NOT_SIMULATED: hsa_status_t = sys::HSA_STATUS_ERROR;

/// `HSA_STATUS_ERROR_INVALID_CODE_OBJECT`.
pub const HSA_STATUS_ERROR_INVALID_CODE_OBJECT: hsa_status_t = 0x1010;
/// `HSA_STATUS_ERROR_INVALID_EXECUTABLE`.
pub const HSA_STATUS_ERROR_INVALID_EXECUTABLE: hsa_status_t = 0x1011;
/// `HSA_STATUS_ERROR_INVALID_SYMBOL_NAME`.
pub const HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: hsa_status_t = 0x1013;
/// `HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED`.
pub const HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED: hsa_status_t = 0x1014;
/// `HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER`.
pub const HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER: hsa_status_t = 0x101A;
/// `HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL`.
pub const HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL: hsa_status_t = 0x1018;
/// `HSA_STATUS_ERROR_EXCEPTION`: what a queue's error callback receives for a kernel fault.
pub const HSA_STATUS_ERROR_EXCEPTION: hsa_status_t = 0x1016;

/// Erases an entry's signature for an untyped slot.
pub(crate) fn erase(f: *const ()) -> Entry {
    // SAFETY: `f` is an `extern "C"` entry of this crate; the slot's C type is that
    // function's type, and the table's readers cast it back before calling.
    Some(unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>(f) })
}

/// Writes the entry `f` into `slot`, whatever the binding's Rust type for that slot is (an
/// untyped [`Entry`] or a typed `Option<fn>`): only its size (one nullable function pointer)
/// is relied upon, so the table keeps building when `replay-hsa` types more of its slots.
pub(crate) fn set<T>(slot: &mut T, f: *const ()) {
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<Entry>());
    // SAFETY: `slot` is a table field of pointer size holding a nullable `extern "C"`
    // function pointer (checked size; every slot of the bound tables is such a field), and
    // `f` is the entry of that C signature.
    unsafe { (slot as *mut T).cast::<Entry>().write(erase(f)) };
}

/// The answer of every entry that is not simulated.
pub extern "C" fn not_simulated() -> hsa_status_t {
    STATUS_NOT_SIMULATED
}

/// Fills every empty slot of a table with [`not_simulated`].
pub(crate) fn fill_stubs<T>(table: &mut T, offsets: &[(&'static str, usize)]) {
    let base = (table as *mut T).cast::<u8>();
    for (_, off) in offsets {
        // SAFETY: `off` is the offset of a pointer-sized nullable function-pointer field of
        // `T` (from `entry_offsets()`); every such field has the layout of `Entry`.
        unsafe {
            let slot = base.add(*off).cast::<Entry>();
            if slot.read().is_none() {
                slot.write(erase(not_simulated as *const ()));
            }
        }
    }
}

/// A table's version: `major`, and the table's size as its minor (as the runtime fills it).
pub(crate) fn version<T>(major: u32) -> sys::ApiTableVersion {
    sys::ApiTableVersion {
        major_id: major,
        minor_id: std::mem::size_of::<T>() as u32,
        step_id: 0,
        reserved: 0,
    }
}
