//! The simulated GPU through the C ABI (`kreplay_sim_*`): a C or C++ tool is tested without a
//! GPU, as Rust tools are with `replay-mock`.
//!
//! - A simulator is a [`replay_mock::SimRuntime`] with N agents, built on the library's clock
//!   (the wall clock the one replay service measures on; see `state`), with the one replay
//!   service installed: every `kreplay_sim_dispatch` is submitted through it on the calling
//!   thread, so the tool's replay callback runs there, exactly as an intercepted launch does.
//! - Kernels are built-ins chosen by name (the `builtins` module); modules are code objects with
//!   variables and instances of built-ins.
//! - Handles (simulator, kernel, module, dispatch) are checked like context handles, each type
//!   with its own tag. Destroying a simulator invalidates its kernels, modules and dispatches
//!   and joins its worker threads; `kreplay_shutdown` does the same for every simulator left
//!   (a hook of the [`crate::threads`] registry), once no `kreplay_sim_dispatch` is running
//!   (they are counted, so it can wait for a window running inside one).
//! - A module unloaded from inside a callback goes when the window has closed (see
//!   `kreplay_sim_module_unload`), so no restore writes into unloaded memory.
//! - Counters, faults and digests are the simulator's own: one counter group per execution,
//!   selected per agent (typically in PASS ENTER); faults per agent; a digest of all
//!   application memory of an agent, comparable across simulators.
//!
//! Each entry point follows the checked layer's order: shut down, inside a callback where
//! refused (only destroy), pointers and enumeration values, then handles, then the call.

mod builtins;
mod state;

pub(crate) use state::SimTables;

use std::ffi::{c_char, c_void, CStr};
use std::mem::size_of;
use std::sync::atomic::{AtomicUsize, Ordering};

use replay_core::{AgentId, Dim3, DispatchId, MemoryClass, Tier};
use replay_mock::{CounterGroup, Fault, FaultId, FaultMode, Kernel, ModuleSpec, SimError};

use crate::checked::{
    c_str, check_versioned, guard, non_null, outcome_code, read_versioned, reason_code, write_out,
    write_versioned, Error, ZeroValid,
};
use crate::entry::refuse_in_callback;
use crate::state::library;
use crate::sys::*;
use crate::tool::in_callback;
use state::{ensure_shutdown_hook, full, stale, DispatchEntry, KernelEntry, ModuleEntry};

/// Most agents of one simulator.
const MAX_AGENTS: u32 = 16;
/// Most bytes of one allocation, host access or module variable.
const MAX_BYTES: u64 = 1 << 30;
/// Most bytes of an argument block.
const MAX_ARGS: usize = 4096;
/// Most variables or kernels of a module.
const MAX_MODULE_ITEMS: u64 = 4096;

// SAFETY: integers only.
unsafe impl ZeroValid for kreplay_sim_fault_t {}
// SAFETY: integers and raw pointers only.
unsafe impl ZeroValid for kreplay_sim_module_desc_t {}
// SAFETY: integers only.
unsafe impl ZeroValid for kreplay_sim_result_t {}
// SAFETY: integers and a float only.
unsafe impl ZeroValid for kreplay_sim_counter_sample_t {}

// ----- Conversions -------------------------------------------------------------------------

/// The C ABI's status for a simulator error.
fn sim_error(e: SimError) -> Error {
    match e {
        SimError::OutOfMemory { .. } => Error::OutOfMemory(e.to_string()),
        SimError::UnknownAgent(_)
        | SimError::UnknownQueue { .. }
        | SimError::InvalidFree { .. }
        | SimError::AddressInUse { .. }
        | SimError::Fault(_)
        | SimError::Invalid(_) => Error::BadArgument(e.to_string()),
        SimError::Backend(_) | SimError::Shutdown => Error::Device(e.to_string()),
    }
}

/// The class of a `KREPLAY_SIM_MEMORY_*` value, and whether the tracker hears of it.
fn decode_memory(v: kreplay_sim_memory_t) -> Result<(MemoryClass, bool), Error> {
    Ok(match v {
        KREPLAY_SIM_MEMORY_DEVICE_COARSE => (MemoryClass::DEVICE_COARSE, true),
        KREPLAY_SIM_MEMORY_FINE_GRAINED => (MemoryClass::FINE_GRAINED, true),
        KREPLAY_SIM_MEMORY_MANAGED => (MemoryClass::MANAGED, true),
        KREPLAY_SIM_MEMORY_PINNED_HOST => (MemoryClass::PINNED_HOST, true),
        KREPLAY_SIM_MEMORY_IPC_IMPORTED => (MemoryClass::IPC_IMPORTED, true),
        KREPLAY_SIM_MEMORY_PEER => (MemoryClass::PEER, true),
        KREPLAY_SIM_MEMORY_VIRTUAL_MAPPING => (MemoryClass::VIRTUAL_MAPPING, true),
        KREPLAY_SIM_MEMORY_KERNARG => (MemoryClass::KERNARG, true),
        KREPLAY_SIM_MEMORY_TOOL_OWNED => {
            (MemoryClass::DEVICE_COARSE | MemoryClass::TOOL_OWNED, true)
        }
        KREPLAY_SIM_MEMORY_UNTRACKED => (MemoryClass::DEVICE_COARSE, false),
        _ => {
            return Err(Error::BadEnum {
                what: "memory",
                value: i64::from(v),
            })
        }
    })
}

/// A counter group value; `None` for `KREPLAY_SIM_COUNTER_NONE`.
fn decode_group(v: kreplay_sim_counter_group_t) -> Result<Option<CounterGroup>, Error> {
    if v == KREPLAY_SIM_COUNTER_NONE {
        return Ok(None);
    }
    CounterGroup::from_index(v).map(Some).ok_or(Error::BadEnum {
        what: "group",
        value: i64::from(v),
    })
}

/// The C value of a counter group.
fn group_code(g: Option<CounterGroup>) -> kreplay_sim_counter_group_t {
    g.map_or(KREPLAY_SIM_COUNTER_NONE, |g| g as u32)
}

/// The simulator's fault for a C description.
fn decode_fault(f: &kreplay_sim_fault_t) -> Result<(Fault, FaultMode), Error> {
    let mode = match f.mode {
        KREPLAY_SIM_FAULT_ONCE => FaultMode::Once,
        KREPLAY_SIM_FAULT_ALWAYS => FaultMode::Always,
        v => {
            return Err(Error::BadEnum {
                what: "fault->mode",
                value: i64::from(v),
            })
        }
    };
    let address = || {
        if f.address == 0 {
            Err(Error::BadArgument(
                "`fault->address` is 0; this fault needs the base of an allocation".to_owned(),
            ))
        } else {
            Ok(f.address)
        }
    };
    let pass = f.pass;
    let fault = match f.kind {
        KREPLAY_SIM_FAULT_SNAPSHOT_OOM => Fault::SnapshotOom,
        KREPLAY_SIM_FAULT_TIER_OOM => Fault::TierOom(match f.tier {
            KREPLAY_SIM_TIER_DEVICE => Tier::Device,
            KREPLAY_SIM_TIER_PINNED_HOST => Tier::PinnedHost,
            KREPLAY_SIM_TIER_PAGEABLE_HOST => Tier::PageableHost,
            v => {
                return Err(Error::BadEnum {
                    what: "fault->tier",
                    value: i64::from(v),
                })
            }
        }),
        KREPLAY_SIM_FAULT_CAPTURE_COPY_FAIL => Fault::CaptureCopyFail,
        KREPLAY_SIM_FAULT_CAPTURE_COPY_STUCK => Fault::CaptureCopyStuck,
        KREPLAY_SIM_FAULT_QUEUE_DRAIN_STUCK => Fault::QueueDrainStuck,
        KREPLAY_SIM_FAULT_AGENT_DRAIN_STUCK => Fault::AgentDrainStuck,
        KREPLAY_SIM_FAULT_COPY_FENCE_STUCK => Fault::CopyFenceStuck,
        KREPLAY_SIM_FAULT_PASS_STUCK => Fault::PassStuck { pass },
        KREPLAY_SIM_FAULT_PASS_SUBMIT_FAIL => Fault::PassSubmitFail { pass },
        KREPLAY_SIM_FAULT_RESTORE_FAIL => Fault::RestoreFail,
        KREPLAY_SIM_FAULT_DIGEST_FAIL => Fault::DigestFail,
        KREPLAY_SIM_FAULT_INCOMPLETE_MODULE_ENUMERATION => Fault::IncompleteModuleEnumeration,
        KREPLAY_SIM_FAULT_FREE_DURING_PASS => Fault::FreeDuringPass {
            base: address()?,
            pass,
        },
        KREPLAY_SIM_FAULT_REALLOC_DURING_PASS => Fault::ReallocDuringPass {
            base: address()?,
            pass,
        },
        KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL => Fault::OrdinarySubmitFail,
        v => {
            return Err(Error::BadEnum {
                what: "fault->kind",
                value: i64::from(v),
            })
        }
    };
    Ok((fault, mode))
}

/// The id of agent `agent` of `rt`, or `BadArgument`.
fn agent_of(rt: &replay_mock::SimRuntime, agent: u32) -> Result<AgentId, Error> {
    let n = rt.agents().len();
    if (agent as usize) < n {
        Ok(AgentId(u64::from(agent)))
    } else {
        Err(Error::BadArgument(format!(
            "agent {agent} does not exist; the simulator has {n} agent(s), numbered from 0"
        )))
    }
}

/// Checks a byte count against [`MAX_BYTES`].
fn check_bytes(what: &str, n: u64) -> Result<(), Error> {
    if n > MAX_BYTES {
        Err(Error::BadArgument(format!(
            "`{what}` = {n} exceeds the simulator's limit of {MAX_BYTES} bytes"
        )))
    } else {
        Ok(())
    }
}

/// `kreplay_sim_dispatch` calls running now: a replay window runs inside one, on its thread,
/// so `kreplay_shutdown` waits for them before it shuts the simulators down.
static DISPATCHES_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// One `kreplay_sim_dispatch` in flight until dropped.
struct DispatchInFlight;

impl DispatchInFlight {
    /// Counted before the call checks for shutdown (SeqCst, with the fence in
    /// `kreplay_shutdown`): either shutdown sees this call, or this call sees shutdown.
    fn enter() -> Self {
        DISPATCHES_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        Self
    }
}

impl Drop for DispatchInFlight {
    fn drop(&mut self) {
        DISPATCHES_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Number of `kreplay_sim_dispatch` calls running now.
pub(crate) fn dispatches_in_flight() -> usize {
    DISPATCHES_IN_FLIGHT.load(Ordering::SeqCst)
}

/// The simulator runtime of a live handle.
fn runtime(sim: kreplay_sim_t) -> Result<replay_mock::SimRuntime, Error> {
    library()?.sims.lock().runtime(sim.handle)
}

// ----- Simulators --------------------------------------------------------------------------

/// Creates a simulated runtime.
///
/// # Safety
///
/// 1. `sim` is NULL (refused) or valid for a write of a `kreplay_sim_t`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_create(
    agent_count: u32,
    sim: *mut kreplay_sim_t,
) -> kreplay_status_t {
    guard("kreplay_sim_create", || {
        let lib = library()?;
        non_null(sim, "sim")?;
        if agent_count == 0 || agent_count > MAX_AGENTS {
            return Err(Error::BadArgument(format!(
                "`agent_count` = {agent_count}; a simulator has 1 to {MAX_AGENTS} agents"
            )));
        }
        {
            let mut tables = lib.sims.lock();
            tables.open()?;
            ensure_shutdown_hook(&mut tables)?;
        }
        let rt = replay_mock::SimRuntime::builder()
            .clock(std::sync::Arc::clone(&lib.clock))
            .agents(agent_count as usize, replay_mock::AgentConfig::default())
            .service(std::sync::Arc::clone(&lib.service))
            .build();
        let inserted = {
            let mut tables = lib.sims.lock();
            if tables.closed {
                Err(Error::ShutDown)
            } else {
                tables
                    .sims
                    .insert(state::SimEntry {
                        rt: rt.clone(),
                        in_flight: Default::default(),
                    })
                    .map_err(|_| full("simulator"))
            }
        };
        let handle = match inserted {
            Ok(h) => h,
            Err(e) => {
                rt.shutdown();
                return Err(e);
            }
        };
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(sim, "sim", kreplay_sim_t { handle }) }
    })
}

/// Destroys a simulated runtime: its kernels, modules and dispatches become invalid and its
/// worker threads are joined. A `kreplay_sim_dispatch` on it running on another thread (a
/// replay window inside it) is waited for first, bounded as shutdown's wait is: shutting the
/// runtime down under a window would fail its restore, which aborts.
///
/// # Safety
///
/// No preconditions (the handle is checked).
#[no_mangle]
pub extern "C" fn kreplay_sim_destroy(sim: kreplay_sim_t) -> kreplay_status_t {
    guard("kreplay_sim_destroy", || {
        let lib = library()?;
        refuse_in_callback()?;
        let (rt, in_flight) = lib.sims.lock().remove_sim(sim.handle)?;
        // No lock is held while waiting: the dispatches' callbacks may call in.
        let idle = crate::entry::wait_until_idle(lib, "kreplay_sim_destroy", || {
            let n = in_flight.load(Ordering::SeqCst);
            (n != 0).then(|| format!("{n} dispatch(es) on the simulator still running"))
        });
        if let Err(what) = idle {
            let (bound, _) = crate::entry::window_wait_bounds(lib);
            // Shut down with the others at kreplay_shutdown, never under a running window.
            lib.sims.lock().stragglers.push(rt);
            return Err(Error::Device(format!(
                "kreplay_sim_destroy waited {:.1} s and {what}; the handle is gone, the runtime \
                 is shut down at kreplay_shutdown()",
                bound.as_secs_f64()
            )));
        }
        // Joining waits for the workers, whose kernels never call in.
        rt.shutdown();
        Ok(())
    })
}

/// Waits until every queue and copy engine of the simulator completed what was submitted.
///
/// # Safety
///
/// No preconditions (the handle is checked).
#[no_mangle]
pub extern "C" fn kreplay_sim_synchronize(sim: kreplay_sim_t) -> kreplay_status_t {
    guard("kreplay_sim_synchronize", || {
        runtime(sim)?.wait_idle();
        run_pending_unloads(library()?);
        Ok(())
    })
}

// ----- Memory ------------------------------------------------------------------------------

/// Allocates simulated memory of a class.
///
/// # Safety
///
/// 1. `address` is NULL (refused) or valid for a write of a `u64`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_alloc(
    sim: kreplay_sim_t,
    agent: u32,
    size: u64,
    memory: kreplay_sim_memory_t,
    address: *mut u64,
) -> kreplay_status_t {
    guard("kreplay_sim_alloc", || {
        library()?;
        non_null(address, "address")?;
        let (class, tracked) = decode_memory(memory)?;
        if size == 0 {
            return Err(Error::BadArgument("`size` is 0".to_owned()));
        }
        if size > MAX_BYTES {
            return Err(Error::OutOfMemory(format!(
                "{size} bytes requested; one simulated allocation holds at most {MAX_BYTES} bytes"
            )));
        }
        let rt = runtime(sim)?;
        let agent = agent_of(&rt, agent)?;
        let base = if tracked {
            rt.alloc(agent, size, class)
        } else {
            rt.alloc_untracked(agent, size, class)
        }
        .map_err(sim_error)?;
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(address, "address", base) }
    })
}

/// Frees simulated memory.
///
/// # Safety
///
/// No preconditions (the handle and the address are checked).
#[no_mangle]
pub extern "C" fn kreplay_sim_free(sim: kreplay_sim_t, address: u64) -> kreplay_status_t {
    guard("kreplay_sim_free", || {
        let rt = runtime(sim)?;
        let agent = replay_mock::agent_of(address).ok_or_else(|| {
            Error::BadArgument(format!("{address:#x} is not a simulated device address"))
        })?;
        rt.free(agent, address).map_err(sim_error)
    })
}

/// Copies host bytes into simulated memory.
///
/// # Safety
///
/// 1. `data` is NULL (refused unless `size` is 0) or valid for reads of `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_write(
    sim: kreplay_sim_t,
    address: u64,
    data: *const c_void,
    size: usize,
) -> kreplay_status_t {
    guard("kreplay_sim_write", || {
        library()?;
        if size > 0 {
            non_null(data, "data")?;
        }
        check_bytes("size", size as u64)?;
        let rt = runtime(sim)?;
        let bytes: &[u8] = if size == 0 {
            &[]
        } else {
            // SAFETY: non-null (checked) and readable for `size` bytes (caller, item 1);
            // size <= MAX_BYTES fits in isize.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }
        };
        rt.write(address, bytes).map_err(sim_error)
    })
}

/// Copies simulated memory into host bytes.
///
/// # Safety
///
/// 1. `data` is NULL (refused unless `size` is 0) or valid for writes of `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_read(
    sim: kreplay_sim_t,
    address: u64,
    data: *mut c_void,
    size: usize,
) -> kreplay_status_t {
    guard("kreplay_sim_read", || {
        library()?;
        if size > 0 {
            non_null(data, "data")?;
        }
        check_bytes("size", size as u64)?;
        let rt = runtime(sim)?;
        let bytes = rt.read(address, size).map_err(sim_error)?;
        if size > 0 {
            // SAFETY: `data` is non-null (checked) and writable for `size` bytes (caller,
            // item 1); `bytes` holds `size` bytes in a distinct Rust allocation.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.cast::<u8>(), size) };
        }
        Ok(())
    })
}

/// A digest of all application memory of an agent.
///
/// # Safety
///
/// 1. `digest` is NULL (refused) or valid for a write of a `kreplay_sim_digest_t`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_digest(
    sim: kreplay_sim_t,
    agent: u32,
    digest: *mut kreplay_sim_digest_t,
) -> kreplay_status_t {
    guard("kreplay_sim_digest", || {
        library()?;
        non_null(digest, "digest")?;
        let rt = runtime(sim)?;
        let d = rt.digest_agent_memory(agent_of(&rt, agent)?).0;
        let value = kreplay_sim_digest_t {
            lo: d as u64,
            hi: (d >> 64) as u64,
        };
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(digest, "digest", value) }
    })
}

// ----- Kernels and modules -----------------------------------------------------------------

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
        let lib = library()?;
        non_null(kernel, "kernel")?;
        // SAFETY: NULL or NUL-terminated (caller, item 1).
        let name = unsafe { c_str(name, "name")? };
        let body = builtins::body(name).ok_or_else(|| builtins::unknown(name))?;
        let handle = {
            let mut tables = lib.sims.lock();
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
            let body = builtins::body(kname).ok_or_else(|| builtins::unknown(kname))?;
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
        let lib = library()?;
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
            let mut tables = lib.sims.lock();
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
        let lib = library()?;
        non_null(address, "address")?;
        // SAFETY: NULL or NUL-terminated (caller, item 1).
        let name = unsafe { c_str(name, "name")? };
        let base = {
            let tables = lib.sims.lock();
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
        let lib = library()?;
        non_null(kernel, "kernel")?;
        // SAFETY: NULL or NUL-terminated (caller, item 1).
        let name = unsafe { c_str(name, "name")? };
        let handle = {
            let mut tables = lib.sims.lock();
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
            let mut tables = lib.sims.lock();
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
fn run_pending_unloads(lib: &crate::state::Library) {
    if in_callback() {
        return;
    }
    let pending: Vec<_> = {
        let mut tables = lib.sims.lock();
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

// ----- Dispatches --------------------------------------------------------------------------

/// Launches a kernel through the replay service on this thread.
///
/// # Safety
///
/// 1. `args` is NULL (refused unless `args_size` is 0) or valid for reads of `args_size`
///    bytes.
/// 2. `dispatch` is NULL (the dispatch is not kept) or valid for a write of a
///    `kreplay_sim_dispatch_t`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kreplay_sim_dispatch(
    sim: kreplay_sim_t,
    agent: u32,
    queue: u32,
    kernel: kreplay_sim_kernel_t,
    args: *const c_void,
    args_size: usize,
    grid: kreplay_dim3_t,
    dispatch: *mut kreplay_sim_dispatch_t,
) -> kreplay_status_t {
    guard("kreplay_sim_dispatch", || {
        let _in_flight = DispatchInFlight::enter();
        let lib = library()?;
        if args_size > 0 {
            non_null(args, "args")?;
        }
        if args_size > MAX_ARGS {
            return Err(Error::BadArgument(format!(
                "`args_size` = {args_size} exceeds {MAX_ARGS} bytes"
            )));
        }
        if grid.x == 0 || grid.y == 0 || grid.z == 0 {
            return Err(Error::BadArgument(format!(
                "`grid` = {}x{}x{}; every dimension must be at least 1",
                grid.x, grid.y, grid.z
            )));
        }
        let (rt, _busy, k) = {
            let tables = lib.sims.lock();
            let (rt, busy) = tables.dispatching(sim.handle)?;
            let k = tables
                .kernels
                .get(kernel.handle)
                .ok_or_else(|| stale("kernel", kernel.handle))?;
            if k.sim != sim.handle {
                return Err(Error::InvalidHandle(format!(
                    "kernel handle {:#x} belongs to another simulator",
                    kernel.handle
                )));
            }
            if let Some((_, a)) = k.module {
                if a.0 != u64::from(agent) {
                    return Err(Error::BadArgument(format!(
                        "kernel {:?} belongs to a module loaded on agent {a}; it cannot run on agent {agent}",
                        k.kernel.name
                    )));
                }
            }
            (rt, busy, k.kernel.clone())
        };
        let agent_id = agent_of(&rt, agent)?;
        let q = rt
            .queues(agent_id)
            .get(queue as usize)
            .copied()
            .ok_or_else(|| {
                Error::BadArgument(format!(
                    "agent {agent} has no queue {queue} ({} queues, numbered from 0)",
                    rt.queues(agent_id).len()
                ))
            })?;
        let bytes: &[u8] = if args_size == 0 {
            &[]
        } else {
            // SAFETY: non-null (checked) and readable for `args_size` bytes (caller, item 1);
            // args_size <= MAX_ARGS.
            unsafe { std::slice::from_raw_parts(args.cast::<u8>(), args_size) }
        };
        // No lock is held: the replay window runs here and calls the tool, which may call in.
        let completion = rt.dispatch(q, &k, bytes, Dim3::new(grid.x, grid.y, grid.z));
        // The window (if any) has closed: modules its callbacks unloaded go now.
        run_pending_unloads(lib);
        let completion = completion.map_err(sim_error)?;
        if dispatch.is_null() {
            return Ok(());
        }
        let record = completion.record();
        let handle = {
            let mut tables = lib.sims.lock();
            tables.runtime(sim.handle)?;
            tables
                .dispatches
                .insert(DispatchEntry {
                    sim: sim.handle,
                    completion,
                    record,
                })
                .map_err(|_| full("dispatch"))?
        };
        // SAFETY: non-null (checked) and writable (caller, item 2).
        unsafe { write_out(dispatch, "dispatch", kreplay_sim_dispatch_t { handle }) }
    })
}

/// Waits for a dispatch to complete and releases its handle.
///
/// # Safety
///
/// 1. `result` is NULL (not written) or points to a `kreplay_sim_result_t` whose `size` field
///    is readable and whose `size` bytes are writable.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_wait(
    dispatch: kreplay_sim_dispatch_t,
    result: *mut kreplay_sim_result_t,
) -> kreplay_status_t {
    guard("kreplay_sim_wait", || {
        let lib = library()?;
        if !result.is_null() {
            // Checked before the handle is consumed, so a bad `size` leaves it usable.
            // SAFETY: the caller's item 1.
            unsafe { check_versioned(result, "result", first_version::SIM_RESULT)? };
        }
        let entry = {
            let mut tables = lib.sims.lock();
            tables.open()?;
            tables
                .dispatches
                .remove(dispatch.handle)
                .ok_or_else(|| stale("dispatch", dispatch.handle))?
        };
        // No lock is held while waiting.
        let waited = entry.completion.wait();
        if !result.is_null() {
            let r = entry.record.as_ref();
            let value = kreplay_sim_result_t {
                size: size_of::<kreplay_sim_result_t>() as u64,
                dispatch_id: r.map_or(0, |r| r.dispatch_id.0),
                outcome: r.map_or(KREPLAY_OUTCOME_NONE, |r| outcome_code(r.outcome)),
                reason: r.map_or(KREPLAY_REASON_NONE, |r| reason_code(r.reason)),
                executed_passes: r.map_or(0, |r| r.executed_passes),
                completions: entry.completion.fired(),
            };
            // SAFETY: the caller's item 1; `size` is the first field.
            unsafe {
                write_versioned(result, "result", first_version::SIM_RESULT, value)?;
            }
        }
        waited.map_err(|e| Error::Device(format!("the kernel failed: {e}")))
    })
}

// ----- Counters ----------------------------------------------------------------------------

/// Selects the counter group an agent collects from now on.
///
/// # Safety
///
/// No preconditions (the handle and values are checked).
#[no_mangle]
pub extern "C" fn kreplay_sim_counter_select(
    sim: kreplay_sim_t,
    agent: u32,
    group: kreplay_sim_counter_group_t,
) -> kreplay_status_t {
    guard("kreplay_sim_counter_select", || {
        library()?;
        let group = decode_group(group)?;
        let rt = runtime(sim)?;
        let agent = agent_of(&rt, agent)?;
        rt.gpu().counters().select(agent, group);
        Ok(())
    })
}

/// What one execution of a dispatch collected.
///
/// # Safety
///
/// 1. `sample` is NULL (refused) or points to a `kreplay_sim_counter_sample_t` whose `size`
///    field is readable and whose `size` bytes are writable.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_counter_read(
    sim: kreplay_sim_t,
    dispatch_id: u64,
    pass: u32,
    sample: *mut kreplay_sim_counter_sample_t,
) -> kreplay_status_t {
    guard("kreplay_sim_counter_read", || {
        library()?;
        non_null(sample, "sample")?;
        let rt = runtime(sim)?;
        let counters = rt.gpu().counters();
        let id = DispatchId(dispatch_id);
        let found = if pass == KREPLAY_SIM_LAST_EXECUTION {
            counters.last(id)
        } else {
            counters.read(id, pass)
        };
        let s = found.ok_or_else(|| {
            Error::NotFound(if pass == KREPLAY_SIM_LAST_EXECUTION {
                format!("dispatch {dispatch_id} has no execution on this simulator")
            } else {
                format!("dispatch {dispatch_id} has no pass {pass} on this simulator")
            })
        })?;
        let value = kreplay_sim_counter_sample_t {
            size: size_of::<kreplay_sim_counter_sample_t>() as u64,
            agent_id: s.agent.0,
            dispatch_id: s.dispatch.0,
            pass: s.pass.unwrap_or(KREPLAY_SIM_ORDINARY_RUN),
            group: group_code(s.group),
            value: s.value,
            gpu_seconds: s.gpu_seconds,
        };
        // SAFETY: the caller's item 1; `size` is the first field.
        unsafe { write_versioned(sample, "sample", first_version::SIM_COUNTER_SAMPLE, value) }
    })
}

/// The name of a counter group; static, never NULL.
///
/// # Safety
///
/// No preconditions.
#[no_mangle]
pub extern "C" fn kreplay_sim_counter_group_name(
    group: kreplay_sim_counter_group_t,
) -> *const c_char {
    let s: &CStr = match decode_group(group) {
        Ok(Some(CounterGroup::WorkItems)) => c"work_items",
        Ok(Some(CounterGroup::BytesRead)) => c"bytes_read",
        Ok(Some(CounterGroup::BytesWritten)) => c"bytes_written",
        Ok(Some(CounterGroup::Instructions)) => c"instructions",
        Ok(None) => c"none",
        Err(_) => c"unknown",
    };
    s.as_ptr()
}

// ----- Faults ------------------------------------------------------------------------------

/// Arms a fault on an agent.
///
/// # Safety
///
/// 1. `fault` is NULL (refused) or points to a `kreplay_sim_fault_t` whose `size` bytes are
///    readable.
/// 2. `fault_id` is NULL (not written) or valid for a write of a `u64`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_fault_inject(
    sim: kreplay_sim_t,
    agent: u32,
    fault: *const kreplay_sim_fault_t,
    fault_id: *mut u64,
) -> kreplay_status_t {
    guard("kreplay_sim_fault_inject", || {
        library()?;
        // SAFETY: the caller's item 1.
        let f = unsafe { read_versioned(fault, "fault", first_version::SIM_FAULT)? };
        let (fault, mode) = decode_fault(&f)?;
        let rt = runtime(sim)?;
        let agent = agent_of(&rt, agent)?;
        let id = rt.inject(agent, fault, mode);
        if fault_id.is_null() {
            return Ok(());
        }
        // SAFETY: non-null (checked) and writable (caller, item 2).
        unsafe { write_out(fault_id, "fault_id", id.0) }
    })
}

/// How often an injected fault fired.
///
/// # Safety
///
/// 1. `hits` is NULL (refused) or valid for a write of a `u32`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_fault_hits(
    sim: kreplay_sim_t,
    fault_id: u64,
    hits: *mut u32,
) -> kreplay_status_t {
    guard("kreplay_sim_fault_hits", || {
        library()?;
        non_null(hits, "hits")?;
        let n = runtime(sim)?.fault_hits(FaultId(fault_id));
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(hits, "hits", n) }
    })
}

/// Disarms every fault of the simulator.
///
/// # Safety
///
/// No preconditions (the handle is checked).
#[no_mangle]
pub extern "C" fn kreplay_sim_fault_clear(sim: kreplay_sim_t) -> kreplay_status_t {
    guard("kreplay_sim_fault_clear", || {
        runtime(sim)?.gpu().clear_faults();
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enumerations_decode_and_reject_out_of_range_values() {
        for v in 0..=KREPLAY_SIM_MEMORY_UNTRACKED {
            assert!(decode_memory(v).is_ok(), "{v}");
        }
        assert_eq!(
            decode_memory(KREPLAY_SIM_MEMORY_UNTRACKED + 1)
                .unwrap_err()
                .status(),
            KREPLAY_STATUS_BAD_ENUM
        );
        assert_eq!(
            decode_memory(KREPLAY_SIM_MEMORY_TOOL_OWNED).unwrap(),
            (MemoryClass::DEVICE_COARSE | MemoryClass::TOOL_OWNED, true)
        );
        assert!(!decode_memory(KREPLAY_SIM_MEMORY_UNTRACKED).unwrap().1);
        for g in 0..KREPLAY_SIM_COUNTER_GROUP_COUNT {
            assert_eq!(group_code(decode_group(g).unwrap()), g);
        }
        assert_eq!(decode_group(KREPLAY_SIM_COUNTER_NONE).unwrap(), None);
        assert!(decode_group(5).is_err());

        let mut f = kreplay_sim_fault_t::zeroed();
        f.size = size_of::<kreplay_sim_fault_t>() as u64;
        for kind in 0..=KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL {
            f.kind = kind;
            f.address = 0x1000_0000_0000;
            f.pass = 2;
            let (fault, mode) = decode_fault(&f).unwrap();
            assert_eq!(mode, FaultMode::Once);
            if kind == KREPLAY_SIM_FAULT_PASS_SUBMIT_FAIL {
                assert_eq!(fault, Fault::PassSubmitFail { pass: 2 });
            }
        }
        f.kind = KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL + 1;
        assert_eq!(
            decode_fault(&f).unwrap_err().status(),
            KREPLAY_STATUS_BAD_ENUM
        );
        f.kind = KREPLAY_SIM_FAULT_TIER_OOM;
        f.tier = 3;
        assert_eq!(
            decode_fault(&f).unwrap_err().status(),
            KREPLAY_STATUS_BAD_ENUM
        );
        f.tier = KREPLAY_SIM_TIER_PAGEABLE_HOST;
        assert_eq!(
            decode_fault(&f).unwrap().0,
            Fault::TierOom(Tier::PageableHost)
        );
        f.mode = 2;
        assert_eq!(
            decode_fault(&f).unwrap_err().status(),
            KREPLAY_STATUS_BAD_ENUM
        );
        f.mode = KREPLAY_SIM_FAULT_ALWAYS;
        f.kind = KREPLAY_SIM_FAULT_FREE_DURING_PASS;
        f.address = 0;
        assert_eq!(
            decode_fault(&f).unwrap_err().status(),
            KREPLAY_STATUS_BAD_ARGUMENT
        );
    }

    #[test]
    fn simulator_errors_map_to_statuses() {
        let oom = SimError::OutOfMemory {
            agent: AgentId(0),
            pool: "device",
            requested: 1,
            available: 0,
        };
        assert_eq!(sim_error(oom).status(), KREPLAY_STATUS_OUT_OF_MEMORY);
        assert_eq!(
            sim_error(SimError::Shutdown).status(),
            KREPLAY_STATUS_DEVICE_ERROR
        );
        assert_eq!(
            sim_error(SimError::UnknownAgent(AgentId(3))).status(),
            KREPLAY_STATUS_BAD_ARGUMENT
        );
    }
}
