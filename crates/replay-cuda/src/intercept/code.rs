//! The code-image hooks (SPEC §7.1 module globals, §9.2 "Unmodified applications"): module
//! and library loads and unloads, and the lookups that map a function to its image.
//!
//! Loads (`cuModuleLoad*`, `cuLibraryLoad*`) and lookups (`cuModuleGetFunction`,
//! `cuLibraryGetKernel`, `cuKernelGetFunction`) are [`crate::state::images`]' hooks,
//! re-exported here: that module is the registry of loaded images (their `.nv.info` parameter
//! tables, the second source of layouts after the driver and before `extra`, and their
//! globals for the backend's [`crate::ModuleRegistry`]). Unloads (`cuModuleUnload`,
//! `cuLibraryUnload`) are here: the image leaves the registry, then what was cached of its
//! functions and every memo of its code object is forgotten ([`forget_functions`]).

use cudarc::driver::sys::{self, CUresult};
use replay_core::AgentId;

pub(crate) use crate::state::images::hooks::{
    hook_kernel_get_function, hook_library_get_kernel, hook_library_load_data,
    hook_library_load_file, hook_module_get_function, hook_module_load, hook_module_load_data,
    hook_module_load_data_ex,
};
use crate::state::{images, service, state};

/// Hook of `cuModuleUnload`: the image's globals are forgotten first, then what was cached of
/// its functions ([`forget_functions`]).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_module_unload(
    real: unsafe extern "C" fn(sys::CUmodule) -> CUresult,
    reached: &mut bool,
    m: sys::CUmodule,
) -> CUresult {
    let code = images::code_object_of(Some(m as usize), None);
    forget_functions(&images::forget_module(m as usize), code);
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(m) }
}

/// Hook of `cuLibraryUnload`: as [`hook_module_unload`].
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_library_unload(
    real: unsafe extern "C" fn(sys::CUlibrary) -> CUresult,
    reached: &mut bool,
    l: sys::CUlibrary,
) -> CUresult {
    let code = images::code_object_of(None, Some(l as usize));
    forget_functions(&images::forget_library(l as usize), code);
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(l) }
}

/// Before an image's unload: its functions' cached names and argument layouts are dropped (a
/// later load may hand out the same function handles for other kernels, whose layouts must be
/// asked afresh), and the service's per-kernel memos and the memory engines' predictions of
/// the image's own code object (`code`, each loaded image has its own) are forgotten on every
/// agent; other images' memos stay. An image the hooks never saw (`None`) has its kernels
/// under code object 0, which is forgotten then.
pub(crate) fn forget_functions(gone: &[usize], code: Option<u64>) {
    let code = code.unwrap_or(0);
    let s = state();
    if !gone.is_empty() {
        let mut f = s.funcs.write();
        for g in gone {
            f.remove(g);
        }
    }
    let agents: Vec<AgentId> = s
        .backends
        .lock()
        .values()
        .filter_map(|b| b.as_ref().ok().map(|b| b.agent_id()))
        .collect();
    for a in agents {
        if let Some(svc) = service() {
            svc.forget_code_object(a, code);
        }
        s.tracker.record_unload(a, code);
    }
}
