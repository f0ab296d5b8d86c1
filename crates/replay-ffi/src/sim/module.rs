//! Kernels and code objects of the simulator through the C ABI (SPEC §10): built-in kernels by
//! name, modules with variables and kernel instances, and unloading (deferred, when asked from
//! inside a callback, until the replay window has closed).

use std::ffi::c_char;

use replay_mock::{Kernel, ModuleSpec};

use super::convert::{agent_of, check_bytes, sim_error, MAX_MODULE_ITEMS};
use super::state::{full, runtime, stale, tables, KernelEntry, ModuleEntry};
use crate::checked::{c_str, guard, non_null, read_versioned, write_out, Error};
use crate::state::library;
use crate::sys::*;
use crate::tool::in_callback;

/// A built-in kernel by name.
///
/// # Safety
///
/// 1. `name` is NULL (refused) or a NUL-terminated string.
/// 2. `kernel` is NULL (refused) or valid for a write of a `kreplay_sim_kernel_t`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_kernel_create(
    sim: kreplay_sim_t,
    name: *const c_char,
    kernel: *mut kreplay_sim_kernel_t,
) -> kreplay_status_t {
    guard("kreplay_sim_kernel_create", || {
        let _lib = library()?;
        non_null(kernel, "kernel")?;
        // SAFETY: NULL or NUL-terminated (caller, item 1).
        let name = unsafe { c_str(name, "name")? };
        let body = super::builtins::body(name).ok_or_else(|| super::builtins::unknown(name))?;
        let handle = {
            let mut tables = tables().lock();
            tables.runtime(sim.handle)?;
            tables
                .kernels
                .insert(KernelEntry {
                    sim: sim.handle,
                    kernel: Kernel::from_body(name, body),
                    module: None,
                })
                .map_err(|_| full("kernel"))?
        };
        // SAFETY: non-null (checked) and writable (caller, item 2).
        unsafe { write_out(kernel, "kernel", kreplay_sim_kernel_t { handle }) }
    })
}

/// Reads a module's variables.
///
/// # Safety
///
/// 1. `vars` is NULL or points to `count` readable `kreplay_sim_variable_t`, each with `name`
///    NULL or NUL-terminated and `init` NULL or readable for `size` bytes.
unsafe fn module_spec(
    name: &str,
    vars: *const kreplay_sim_variable_t,
    var_count: u64,
    kernels: *const *const c_char,
    kernel_count: u64,
) -> Result<ModuleSpec, Error> {
    for (what, n) in [
        ("desc->variable_count", var_count),
        ("desc->kernel_count", kernel_count),
    ] {
        if n > MAX_MODULE_ITEMS {
            return Err(Error::BadArgument(format!(
                "`{what}` = {n} exceeds {MAX_MODULE_ITEMS}"
            )));
        }
    }
    let mut spec = ModuleSpec::new(name);
    let mut seen = std::collections::HashSet::new();
    if var_count > 0 {
        non_null(vars, "desc->variables")?;
        // SAFETY: non-null (checked), `var_count` readable entries (caller, item 1); the
        // count is at most MAX_MODULE_ITEMS.
        let vars = unsafe { std::slice::from_raw_parts(vars, var_count as usize) };
        for v in vars {
            // SAFETY: NULL or NUL-terminated (caller, item 1).
            let vname = unsafe { c_str(v.name, "desc->variables[i].name")? };
            if v.size == 0 {
                return Err(Error::BadArgument(format!("variable {vname:?} has size 0")));
            }
            check_bytes("desc->variables[i].size", v.size)?;
            if v.read_only > 1 || v.reserved != 0 {
                return Err(Error::BadArgument(format!(
                    "variable {vname:?}: `read_only` must be 0 or 1 and `reserved` 0"
                )));
            }
            if !seen.insert(vname.to_owned()) {
                return Err(Error::AlreadyExists(format!(
                    "the module lists variable {vname:?} twice"
                )));
            }
            let init: Option<&[u8]> = (!v.init.is_null()).then(|| {
                // SAFETY: non-null, readable for `size` bytes (caller, item 1); size <=
                // MAX_BYTES fits in isize.
                unsafe { std::slice::from_raw_parts(v.init.cast::<u8>(), v.size as usize) }
            });
            spec = match (v.read_only, init) {
                (1, Some(b)) => spec.constant(vname, b),
                (1, None) => spec.constant(vname, &vec![0; v.size as usize]),
                (_, Some(b)) => spec.variable_init(vname, b),
                (_, None) => spec.variable(vname, v.size),
            };
        }
    }
    if kernel_count > 0 {
        non_null(kernels, "desc->kernels")?;
        // SAFETY: non-null (checked), `kernel_count` readable pointers (caller, item 1).
        let names = unsafe { std::slice::from_raw_parts(kernels, kernel_count as usize) };
        let mut seen = std::collections::HashSet::new();
        for &p in names {
            // SAFETY: NULL or NUL-terminated (caller, item 1).
            let kname = unsafe { c_str(p, "desc->kernels[i]")? };
            let body =
                super::builtins::body(kname).ok_or_else(|| super::builtins::unknown(kname))?;
            if !seen.insert(kname) {
                return Err(Error::AlreadyExists(format!(
                    "the module lists kernel {kname:?} twice"
                )));
            }
            spec = spec.kernel(kname, move |ctx| body(ctx));
        }
    }
    Ok(spec)
}

/// Loads a code object.
///
/// # Safety
///
/// 1. `desc` is NULL (refused) or points to a `kreplay_sim_module_desc_t` whose `size` bytes
///    are readable, whose `name` is NULL or NUL-terminated, whose `variables` point to
///    `variable_count` entries (each `name` NUL-terminated, `init` NULL or `size` readable
///    bytes) and whose `kernels` point to `kernel_count` NUL-terminated strings.
/// 2. `module` is NULL (refused) or valid for a write of a `kreplay_sim_module_t`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_module_load(
    sim: kreplay_sim_t,
    agent: u32,
    desc: *const kreplay_sim_module_desc_t,
    module: *mut kreplay_sim_module_t,
) -> kreplay_status_t {
    guard("kreplay_sim_module_load", || {
        let _lib = library()?;
        non_null(module, "module")?;
        // SAFETY: the caller's item 1.
        let d = unsafe { read_versioned(desc, "desc", first_version::SIM_MODULE_DESC)? };
        // SAFETY: NULL or NUL-terminated (caller, item 1).
        let name = unsafe { c_str(d.name, "desc->name")? };
        // SAFETY: the caller's item 1.
        let spec = unsafe {
            module_spec(
                name,
                d.variables,
                d.variable_count,
                d.kernels,
                d.kernel_count,
            )?
        };
        let rt = runtime(sim)?;
        let agent = agent_of(&rt, agent)?;
        let loaded = rt.load_module(agent, spec).map_err(sim_error)?;
        let inserted = {
            let mut tables = tables().lock();
            match tables.runtime(sim.handle) {
                Ok(_) => tables
                    .modules
                    .insert(ModuleEntry {
                        sim: sim.handle,
                        module: loaded.clone(),
                    })
                    .map_err(|_| full("module")),
                Err(e) => Err(e),
            }
        };
        let handle = match inserted {
            Ok(h) => h,
            Err(e) => {
                let _ = rt.unload_module(&loaded);
                return Err(e);
            }
        };
        // SAFETY: non-null (checked) and writable (caller, item 2).
        unsafe { write_out(module, "module", kreplay_sim_module_t { handle }) }
    })
}

/// The device address of a module variable.
///
/// # Safety
///
/// 1. `name` is NULL (refused) or a NUL-terminated string.
/// 2. `address` is NULL (refused) or valid for a write of a `u64`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_module_variable(
    module: kreplay_sim_module_t,
    name: *const c_char,
    address: *mut u64,
) -> kreplay_status_t {
    guard("kreplay_sim_module_variable", || {
        let _lib = library()?;
        non_null(address, "address")?;
        // SAFETY: NULL or NUL-terminated (caller, item 1).
        let name = unsafe { c_str(name, "name")? };
        let base = {
            let tables = tables().lock();
            let m = tables
                .open()?
                .modules
                .get(module.handle)
                .ok_or_else(|| stale("module", module.handle))?;
            m.module.variable(name).ok_or_else(|| {
                Error::NotFound(format!(
                    "module {:?} has no variable {name:?}",
                    m.module.name
                ))
            })?
        };
        // SAFETY: non-null (checked) and writable (caller, item 2).
        unsafe { write_out(address, "address", base) }
    })
}

/// A kernel of a module.
///
/// # Safety
///
/// 1. `name` is NULL (refused) or a NUL-terminated string.
/// 2. `kernel` is NULL (refused) or valid for a write of a `kreplay_sim_kernel_t`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_module_kernel(
    module: kreplay_sim_module_t,
    name: *const c_char,
    kernel: *mut kreplay_sim_kernel_t,
) -> kreplay_status_t {
    guard("kreplay_sim_module_kernel", || {
        let _lib = library()?;
        non_null(kernel, "kernel")?;
        // SAFETY: NULL or NUL-terminated (caller, item 1).
        let name = unsafe { c_str(name, "name")? };
        let handle = {
            let mut tables = tables().lock();
            let m = tables
                .open()?
                .modules
                .get(module.handle)
                .ok_or_else(|| stale("module", module.handle))?;
            let k = m.module.kernel(name).ok_or_else(|| {
                Error::NotFound(format!("module {:?} has no kernel {name:?}", m.module.name))
            })?;
            let entry = KernelEntry {
                sim: m.sim,
                kernel: k,
                module: Some((module.handle, m.module.agent)),
            };
            tables.kernels.insert(entry).map_err(|_| full("kernel"))?
        };
        // SAFETY: non-null (checked) and writable (caller, item 2).
        unsafe { write_out(kernel, "kernel", kreplay_sim_kernel_t { handle }) }
    })
}

/// Unloads a code object: its variables are freed and its kernel handles become invalid.
///
/// The handles go at once. On the device, an unload must never pull memory from under a replay
/// window that captured the module's variables (its restore would write into memory that is
/// gone, SPEC §7.1), so: from a thread outside any callback it waits until no window is open on
/// the module's agent (the agent's write gate, as for any write that is not replayed) and then
/// unloads; from inside a callback (a window on this thread, which cannot be waited for) it is
/// recorded and carried out when that window has closed, before the `kreplay_sim_dispatch` that
/// ran it returns. The remaining passes of that dispatch see the module as it was captured.
///
/// # Safety
///
/// No preconditions (the handle is checked).
#[no_mangle]
pub extern "C" fn kreplay_sim_module_unload(module: kreplay_sim_module_t) -> kreplay_status_t {
    guard("kreplay_sim_module_unload", || {
        let lib = library()?;
        let (rt, m) = {
            let mut tables = tables().lock();
            tables.open()?;
            let entry = tables
                .modules
                .remove(module.handle)
                .ok_or_else(|| stale("module", module.handle))?;
            tables
                .kernels
                .remove_where(|k| k.module.is_some_and(|(h, _)| h == module.handle));
            let rt = tables.runtime(entry.sim)?;
            if in_callback() {
                tables.pending_unloads.push((entry.sim, entry.module));
                return Ok(());
            }
            (rt, entry.module)
        };
        // No lock of ours is held while waiting for a window.
        let _gate = lib.service.enter_write(m.agent);
        rt.unload_module(&m).map_err(sim_error)
    })
}

/// Carries out the unloads recorded inside callbacks, once this thread is outside every
/// callback (so no window of this thread is open); each waits for windows of other threads on
/// its agent, as a direct unload does.
pub(super) fn run_pending_unloads(lib: &crate::state::Library) {
    if in_callback() {
        return;
    }
    let pending: Vec<_> = {
        let mut tables = tables().lock();
        let taken = std::mem::take(&mut tables.pending_unloads);
        taken
            .into_iter()
            .filter_map(|(sim, m)| tables.runtime(sim).ok().map(|rt| (rt, m)))
            .collect()
    };
    for (rt, m) in pending {
        let _gate = lib.service.enter_write(m.agent);
        if let Err(e) = rt.unload_module(&m) {
            log::error!(
                "[kernel-replay] sim: unloading module {:?} after the replay window failed: {e}",
                m.name
            );
        }
    }
}
