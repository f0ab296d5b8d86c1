//! The HSA tool: what `OnLoad` and `OnUnload` do (SPEC §9.1), the attached C/C++ or Rust tool,
//! and the backend's diagnostics ([`Backend::state_json`]). The state they write is
//! [`crate::state`]'s.
//!
//! The `#[no_mangle]` entry points themselves live in the one shared object (`replay-ffi`'s
//! `hsa` feature), which calls [`on_load`] and [`on_unload`] under `catch_unwind`.
//!
//! `OnLoad`: [`crate::table::bind`] checks the versions and resolves every needed slot first;
//! any [`TableError`] installs nothing, logs why and answers `false`, so the runtime runs the
//! application untouched. Otherwise the originals are saved (a slot that already holds our
//! wrapper, from an earlier `OnLoad` on the same table, keeps the original saved then), the
//! wrappers of [`crate::tracker`] are written, and the tool named by [`TOOL_ENV`] is attached.
//! Where the table has every queue, signal and interception entry, `hsa_queue_create` and
//! `hsa_queue_destroy` are wrapped as well ([`crate::intercept`]); the interceptor submits to
//! the service given with [`crate::state::set_service`] (none set: every packet passes through).
//!
//! Attaching a C or C++ tool: `KREPLAY_HSA_TOOL=/path/libtool.so` names a shared library that
//! links `libkernel_replay` (so it shares this library's one instance) and exports
//! `int kreplay_tool_init(uint64_t runtime_version)` ([`TOOL_INIT_SYMBOL`]): called once from
//! `OnLoad` after the wrappers are installed, it configures replay through the C ABI
//! (`kreplay_context_create`, `kreplay_configure_replay`, ...) and returns 0, or nonzero to
//! report a failure (logged; the backend stays installed, replay stays unconfigured). An
//! optional `void kreplay_tool_fini(void)` ([`TOOL_FINI_SYMBOL`]) is called from `OnUnload`.
//! The library stays loaded until the process exits.
//!
//! Attaching a Rust tool: a tool built as its own cdylib (linking `replay-ffi` as an rlib, so
//! this code is inside it and `HSA_TOOLS_LIB` names it) defines the same `kreplay_tool_init`
//! there with `kernel_replay::export_c_abi!(hsa_tool = ..)`. When [`TOOL_ENV`] is unset,
//! `OnLoad` finds it in the shared object that holds this code (`dladdr`, then `dlopen` with
//! `RTLD_NOLOAD` and `dlsym`, keeping only a definition inside that object) and calls it the
//! same way; `libkernel_replay.so` does not export one. When both exist, [`TOOL_ENV`] wins.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::json;

use crate::module::kernels;
use crate::result::TableError;
use crate::state::{backend, AttachedTool, Backend, Installed, LoaderFns, Originals, QueueFns};
use crate::sys;
use crate::table::{self, Bound, Slot};
use crate::tracker::{self as wrap, copy_fence};
use crate::{intercept, queue};

/// The environment variable naming the tool library `OnLoad` attaches.
pub const TOOL_ENV: &str = "KREPLAY_HSA_TOOL";
/// The symbol the tool library must export: `int kreplay_tool_init(uint64_t runtime_version)`.
pub const TOOL_INIT_SYMBOL: &str = "kreplay_tool_init";
/// The optional symbol called from `OnUnload`: `void kreplay_tool_fini(void)`.
pub const TOOL_FINI_SYMBOL: &str = "kreplay_tool_fini";

// The diagnostics gather every role's state, so they sit here, at the top, not in `state`.
impl Backend {
    /// The backend's state as JSON, for diagnostics and tests: what is installed, why the last
    /// refusal happened, the tool, the agents, every tracked region and the copies in flight.
    pub fn state_json(&self) -> String {
        let regions: Vec<_> = self
            .tracker
            .agents()
            .into_iter()
            .flat_map(|a| {
                self.tracker.regions(a).into_iter().map(move |r| {
                    json!({
                        "agent": a.0,
                        "base": r.base,
                        "size": r.size,
                        "generation": r.generation,
                        "class": r.class.bits(),
                        "class_names": format!("{:?}", r.class),
                    })
                })
            })
            .collect();
        // The slot is locked while a tool's init runs: a tool asking for the state from its
        // init must not deadlock, so it sees "attaching" then.
        let tool = match self.tool.try_lock() {
            Some(slot) => slot
                .as_ref()
                .map(|t| json!({ "path": t.path, "init_status": t.init_status, "error": t.error })),
            None => Some(json!("attaching")),
        };
        json!({
            "installed": self.installed(),
            "last_refusal": *self.last_refusal.lock(),
            "queues_intercepted": self.originals().is_some_and(|o| o.queue.is_some()),
            "queues": queue::queue_count(),
            "tool": tool,
            "agents": self.agents.all(),
            "regions": regions,
            "copies_submitted": copy_fence().submitted(),
            "copies_recorded": copy_fence().recorded(),
        })
        .to_string()
    }
}

/// The original in a slot: the value there, unless it is our own wrapper (an earlier `OnLoad`
/// on this same table), in which case the original saved then.
///
/// # Safety
///
/// 1. The slot's table is alive.
unsafe fn original<F: Copy>(
    slot: &Slot<F>,
    ours: Option<F>,
    previous: Option<F>,
    as_addr: impl Fn(F) -> usize,
) -> Result<F, TableError> {
    // SAFETY: the caller's item 1; `bind` checked the slot is inside the table and not NULL.
    let current = unsafe { slot.get() }.ok_or(TableError::NullEntry {
        table: "api",
        entry: slot.name,
    })?;
    if ours.is_none_or(|w| as_addr(w) != as_addr(current)) {
        return Ok(current);
    }
    previous.ok_or(TableError::AlreadyWrapped {
        table: "api",
        entry: slot.name,
    })
}

/// Saves the originals of `bound` and installs the wrappers. Nothing is written until every
/// original is known.
///
/// # Safety
///
/// 1. The table `bound` was bound from is alive and not used concurrently.
unsafe fn install(bound: &Bound, runtime_version: u64) -> Result<Installed, TableError> {
    let e = &bound.entries;
    let prev = backend().originals();
    let p = prev.as_deref();
    macro_rules! orig {
        ($slot:expr, $wrapper:expr, $field:ident) => {{
            // SAFETY: the caller's item 1.
            unsafe { original(&$slot, $wrapper, p.map(|o| o.$field), |f| f as usize) }?
        }};
    }
    macro_rules! orig_opt {
        ($slot:expr, $wrapper:expr, $field:ident) => {
            match &$slot {
                Some(s) => Some({
                    // SAFETY: the caller's item 1.
                    unsafe {
                        original(s, Some($wrapper), p.and_then(|o| o.$field), |f| f as usize)
                    }?
                }),
                None => None,
            }
        };
    }
    let mut originals = Originals {
        agent_get_info: orig!(e.agent_get_info, None, agent_get_info),
        region_get_info: orig!(e.region_get_info, None, region_get_info),
        signal_load_relaxed: orig!(e.signal_load_relaxed, None, signal_load_relaxed),
        pool_get_info: orig!(e.pool_get_info, None, pool_get_info),
        pointer_info: orig!(e.pointer_info, None, pointer_info),
        memory_allocate: orig!(
            e.memory_allocate,
            Some(wrap::memory_allocate),
            memory_allocate
        ),
        memory_free: orig!(e.memory_free, Some(wrap::memory_free), memory_free),
        pool_allocate: orig!(e.pool_allocate, Some(wrap::pool_allocate), pool_allocate),
        pool_free: orig!(e.pool_free, Some(wrap::pool_free), pool_free),
        async_copy: orig!(e.async_copy, Some(wrap::async_copy), async_copy),
        async_copy_rect: orig_opt!(e.async_copy_rect, wrap::async_copy_rect, async_copy_rect),
        async_copy_on_engine: orig_opt!(
            e.async_copy_on_engine,
            wrap::async_copy_on_engine,
            async_copy_on_engine
        ),
        vmem_map: orig_opt!(e.vmem_map, wrap::vmem_map, vmem_map),
        vmem_unmap: orig_opt!(e.vmem_unmap, wrap::vmem_unmap, vmem_unmap),
        vmem_reserve: orig_opt!(e.vmem_reserve, wrap::vmem_address_reserve, vmem_reserve),
        vmem_reserve_align: orig_opt!(
            e.vmem_reserve_align,
            wrap::vmem_address_reserve_align,
            vmem_reserve_align
        ),
        vmem_address_free: orig_opt!(
            e.vmem_address_free,
            wrap::vmem_address_free,
            vmem_address_free
        ),
        vmem_handle_create: orig_opt!(
            e.vmem_handle_create,
            wrap::vmem_handle_create,
            vmem_handle_create
        ),
        vmem_handle_release: orig_opt!(
            e.vmem_handle_release,
            wrap::vmem_handle_release,
            vmem_handle_release
        ),
        vmem_set_access: orig_opt!(e.vmem_set_access, wrap::vmem_set_access, vmem_set_access),
        vmem_import: orig_opt!(e.vmem_import, wrap::vmem_import, vmem_import),
        executable_destroy: orig_opt!(
            e.executable_destroy,
            kernels::executable_destroy,
            executable_destroy
        ),
        memory_lock: orig_opt!(e.memory_lock, wrap::memory_lock, memory_lock),
        memory_lock_to_pool: orig_opt!(
            e.memory_lock_to_pool,
            wrap::memory_lock_to_pool,
            memory_lock_to_pool
        ),
        memory_unlock: orig_opt!(e.memory_unlock, wrap::memory_unlock, memory_unlock),
        ipc_attach: orig_opt!(e.ipc_attach, wrap::ipc_attach, ipc_attach),
        ipc_detach: orig_opt!(e.ipc_detach, wrap::ipc_detach, ipc_detach),
        ipc_create: orig_opt!(e.ipc_create, wrap::ipc_create, ipc_create),
        memory_copy: orig_opt!(e.memory_copy, wrap::memory_copy, memory_copy),
        memory_fill: orig_opt!(e.memory_fill, wrap::memory_fill, memory_fill),
        // SAFETY: the caller's item 1; `bind` checked the slot.
        iterate_agents: e.iterate_agents.as_ref().and_then(|s| unsafe { s.get() }),
        queue: match &e.queue {
            None => None,
            Some(q) => {
                let pq = p.and_then(|o| o.queue);
                macro_rules! plain {
                    ($slot:ident) => {{
                        // SAFETY: the caller's item 1; `bind` checked the slot.
                        unsafe { q.$slot.get() }.ok_or(TableError::NullEntry {
                            table: "api",
                            entry: q.$slot.name,
                        })?
                    }};
                }
                Some(QueueFns {
                    // SAFETY: the caller's item 1.
                    queue_create: unsafe {
                        original(
                            &q.queue_create,
                            Some(intercept::queue_create as sys::QueueCreateFn),
                            pq.map(|o| o.queue_create),
                            |f| f as usize,
                        )
                    }?,
                    // SAFETY: the caller's item 1.
                    queue_destroy: unsafe {
                        original(
                            &q.queue_destroy,
                            Some(intercept::queue_destroy as sys::QueueDestroyFn),
                            pq.map(|o| o.queue_destroy),
                            |f| f as usize,
                        )
                    }?,
                    load_read_index: plain!(load_read_index),
                    load_write_index: plain!(load_write_index),
                    add_write_index: plain!(add_write_index),
                    cas_write_index: plain!(cas_write_index),
                    signal_create: plain!(signal_create),
                    signal_destroy: plain!(signal_destroy),
                    signal_store: plain!(signal_store),
                    signal_add: plain!(signal_add),
                    signal_subtract: plain!(signal_subtract),
                    signal_wait: plain!(signal_wait),
                    // Our wrapper once `hsa_memory_copy` is wrapped: the backend's own copies
                    // (digest staging) must reach the original, never the gate.
                    // SAFETY: the caller's item 1.
                    memory_copy: unsafe {
                        original(
                            &q.memory_copy,
                            Some(wrap::memory_copy as sys::MemoryCopyFn),
                            pq.map(|o| o.memory_copy),
                            |f| f as usize,
                        )
                    }?,
                    iterate_agents: plain!(iterate_agents),
                    iterate_pools: plain!(iterate_pools),
                    intercept_create: plain!(intercept_create),
                    intercept_register: plain!(intercept_register),
                    async_function: plain!(async_function),
                    // SAFETY: the caller's item 1; `bind` checked the slot.
                    system_get_info: q.system_get_info.as_ref().and_then(|s| unsafe { s.get() }),
                    // SAFETY: the caller's item 1; `bind` checked the slot.
                    allow_access: q.allow_access.as_ref().and_then(|s| unsafe { s.get() }),
                })
            }
        },
        loader: match &e.loader {
            None => None,
            // SAFETY: (each `get`) the caller's item 1; `bind` checked the slots.
            Some(l) => unsafe {
                match (
                    l.get_extension_table.get(),
                    l.iterate_agent_symbols.get(),
                    l.symbol_get_info.get(),
                ) {
                    (
                        Some(get_extension_table),
                        Some(iterate_agent_symbols),
                        Some(symbol_get_info),
                    ) => Some(LoaderFns {
                        get_extension_table,
                        iterate_agent_symbols,
                        symbol_get_info,
                    }),
                    _ => None,
                }
            },
        },
    };
    // Map, unmap, set-access and address-free are wrapped together or not at all: a mapping
    // recorded without its unmap or the free of its reservation (or the reverse) would leave
    // the inventory wrong, and one without its access would never be captured. Without them
    // none of the group is wrapped, and a mapping an argument reaches is asked of the runtime
    // (`VIRTUAL_MAPPING`: declined). Reserve, handle create / release and import are wrapped
    // where present; a handle the wrappers never saw is taken for an imported one (declined).
    if originals.vmem_map.is_none()
        || originals.vmem_unmap.is_none()
        || originals.vmem_set_access.is_none()
        || originals.vmem_address_free.is_none()
    {
        originals.vmem_map = None;
        originals.vmem_unmap = None;
        originals.vmem_set_access = None;
        originals.vmem_address_free = None;
        originals.vmem_reserve = None;
        originals.vmem_reserve_align = None;
        originals.vmem_handle_create = None;
        originals.vmem_handle_release = None;
        originals.vmem_import = None;
    }
    // Lock and unlock are wrapped together (a lock recorded without its unlock would leave the
    // inventory wrong), as are IPC attach and detach.
    if originals.memory_lock.is_none() || originals.memory_unlock.is_none() {
        originals.memory_lock = None;
        originals.memory_lock_to_pool = None;
        originals.memory_unlock = None;
    }
    if originals.ipc_attach.is_none() || originals.ipc_detach.is_none() {
        originals.ipc_attach = None;
        originals.ipc_detach = None;
    }
    // The originals are visible before the first wrapper is.
    *backend().originals.write() = Some(Arc::new(originals));

    let mut wrapped = Vec::new();
    // SAFETY: (every `set` below) the caller's item 1; each wrapper has the entry's signature.
    unsafe {
        e.memory_allocate.set(wrap::memory_allocate);
        e.memory_free.set(wrap::memory_free);
        e.pool_allocate.set(wrap::pool_allocate);
        e.pool_free.set(wrap::pool_free);
        e.async_copy.set(wrap::async_copy);
        wrapped.extend([
            e.memory_allocate.name,
            e.memory_free.name,
            e.pool_allocate.name,
            e.pool_free.name,
            e.async_copy.name,
        ]);
        if let (Some(s), Some(_)) = (&e.async_copy_rect, originals.async_copy_rect) {
            s.set(wrap::async_copy_rect);
            wrapped.push(s.name);
        }
        if let (Some(s), Some(_)) = (&e.async_copy_on_engine, originals.async_copy_on_engine) {
            s.set(wrap::async_copy_on_engine);
            wrapped.push(s.name);
        }
        if let (Some(m), Some(u), Some(a), Some(f), Some(_)) = (
            &e.vmem_map,
            &e.vmem_unmap,
            &e.vmem_set_access,
            &e.vmem_address_free,
            originals.vmem_map,
        ) {
            m.set(wrap::vmem_map);
            u.set(wrap::vmem_unmap);
            a.set(wrap::vmem_set_access);
            f.set(wrap::vmem_address_free);
            wrapped.extend([m.name, u.name, a.name, f.name]);
            if let (Some(s), Some(_)) = (&e.vmem_reserve, originals.vmem_reserve) {
                s.set(wrap::vmem_address_reserve);
                wrapped.push(s.name);
            }
            if let (Some(s), Some(_)) = (&e.vmem_reserve_align, originals.vmem_reserve_align) {
                s.set(wrap::vmem_address_reserve_align);
                wrapped.push(s.name);
            }
            if let (Some(s), Some(_)) = (&e.vmem_handle_create, originals.vmem_handle_create) {
                s.set(wrap::vmem_handle_create);
                wrapped.push(s.name);
            }
            if let (Some(s), Some(_)) = (&e.vmem_handle_release, originals.vmem_handle_release) {
                s.set(wrap::vmem_handle_release);
                wrapped.push(s.name);
            }
            if let (Some(s), Some(_)) = (&e.vmem_import, originals.vmem_import) {
                s.set(wrap::vmem_import);
                wrapped.push(s.name);
            }
        }
        if let (Some(l), Some(u), Some(_)) =
            (&e.memory_lock, &e.memory_unlock, originals.memory_lock)
        {
            l.set(wrap::memory_lock);
            u.set(wrap::memory_unlock);
            wrapped.extend([l.name, u.name]);
            if let (Some(s), Some(_)) = (&e.memory_lock_to_pool, originals.memory_lock_to_pool) {
                s.set(wrap::memory_lock_to_pool);
                wrapped.push(s.name);
            }
        }
        if let (Some(a), Some(d), Some(_)) = (&e.ipc_attach, &e.ipc_detach, originals.ipc_attach) {
            a.set(wrap::ipc_attach);
            d.set(wrap::ipc_detach);
            wrapped.extend([a.name, d.name]);
        }
        if let (Some(s), Some(_)) = (&e.ipc_create, originals.ipc_create) {
            s.set(wrap::ipc_create);
            wrapped.push(s.name);
        }
        if let (Some(s), Some(_)) = (&e.memory_copy, originals.memory_copy) {
            s.set(wrap::memory_copy);
            wrapped.push(s.name);
        }
        if let (Some(s), Some(_)) = (&e.memory_fill, originals.memory_fill) {
            s.set(wrap::memory_fill);
            wrapped.push(s.name);
        }
        if let (Some(s), Some(_)) = (&e.executable_destroy, originals.executable_destroy) {
            s.set(kernels::executable_destroy);
            wrapped.push(s.name);
        }
        if let (Some(q), Some(_)) = (&e.queue, originals.queue) {
            q.queue_create.set(intercept::queue_create);
            q.queue_destroy.set(intercept::queue_destroy);
            wrapped.extend([q.queue_create.name, q.queue_destroy.name]);
        }
    }
    Ok(Installed {
        versions: bound.versions,
        runtime_version,
        wrapped,
    })
}

/// The body of `OnLoad`: binds the table, installs the wrappers and attaches the tool named by
/// [`TOOL_ENV`]. `false` (nothing installed, the reason logged) when the table cannot be bound.
///
/// # Safety
///
/// 1. `table` is NULL or the runtime's `HsaApiTable` as `OnLoad` receives it (see
///    [`crate::table::bind`]), alive and not used by other threads during the call.
/// 2. `failed_tool_names` is NULL or points to `failed_tool_count` pointers, each NULL or a
///    NUL-terminated string.
pub unsafe fn on_load(
    table: *mut c_void,
    runtime_version: u64,
    failed_tool_count: u64,
    failed_tool_names: *const *const c_char,
) -> bool {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _serial = INSTALL.lock();
    if failed_tool_count > 0 && !failed_tool_names.is_null() {
        for i in 0..failed_tool_count as usize {
            // SAFETY: `failed_tool_count` readable pointers (caller, item 2).
            let name = unsafe { *failed_tool_names.add(i) };
            if !name.is_null() {
                // SAFETY: NUL-terminated (caller, item 2).
                let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
                log::info!(
                    "[kernel-replay] hsa: the runtime reports that tool {name} failed to load"
                );
            }
        }
    }
    // SAFETY: the caller's item 1.
    let result = unsafe { table::bind(table) }.and_then(|bound| {
        // SAFETY: the caller's item 1.
        unsafe { install(&bound, runtime_version) }
    });
    match result {
        Ok(installed) => {
            log::info!(
                "[kernel-replay] hsa: installed on runtime {runtime_version} (root {:?}, core {:?}, amd_ext {:?}): wrapped {}; queues intercepted: {}",
                installed.versions.root,
                installed.versions.core,
                installed.versions.amd_ext,
                installed.wrapped.join(", "),
                backend().originals().is_some_and(|o| o.queue.is_some())
            );
            *backend().installed.lock() = Some(installed);
            *backend().last_refusal.lock() = None;
            backend().timestamp_hz.store(0, Ordering::Relaxed);
            attach_tool(runtime_version);
            true
        }
        Err(e) => {
            log::warn!(
                "[kernel-replay] hsa: installing nothing, the application runs untouched: {e}"
            );
            *backend().last_refusal.lock() = Some(e.to_string());
            false
        }
    }
}

/// The body of `OnUnload`: calls the tool's `kreplay_tool_fini` if it has one. The table is
/// not touched (the runtime is shutting down); the wrappers keep passing calls to the saved
/// originals.
pub fn on_unload() {
    let tool = backend().tool.lock();
    let Some(lib) = tool.as_ref().and_then(|t| t.library.as_ref()) else {
        return;
    };
    // SAFETY: looking up a symbol of the loaded tool; if present it has the documented
    // signature `void kreplay_tool_fini(void)`.
    if let Ok(fini) = unsafe { lib.get::<unsafe extern "C" fn()>(TOOL_FINI_SYMBOL.as_bytes()) } {
        // SAFETY: the documented signature; the tool is loaded.
        unsafe { fini() };
    }
}

/// Attaches the tool, once per process: the library named by [`TOOL_ENV`], else the
/// [`TOOL_INIT_SYMBOL`] exported by the shared object that holds this code (a Rust tool's own
/// cdylib, through `kernel_replay::export_c_abi!(hsa_tool = ..)`), else none. When both exist
/// the variable wins: it is how a user picks a tool at run time. Nothing attached leaves the
/// slot empty, so a later `OnLoad` may still attach one.
fn attach_tool(runtime_version: u64) {
    let mut slot = backend().tool.lock();
    if let Some(t) = slot.as_ref() {
        log::debug!(
            "[kernel-replay] hsa: tool {} is already attached; not attaching again",
            t.path
        );
        return;
    }
    let own = own_tool_hook();
    if let Some(path) = std::env::var_os(TOOL_ENV) {
        if let Ok(Some((own_path, _, _))) = &own {
            log::info!("[kernel-replay] hsa: {TOOL_ENV} is set: it takes precedence over the {TOOL_INIT_SYMBOL} exported by {own_path}, which is not called");
        }
        *slot = Some(load_named_tool(&path, runtime_version));
        return;
    }
    match own {
        Ok(Some((path, init, library))) => {
            log::info!("[kernel-replay] hsa: {TOOL_ENV} is unset; initialising the tool built into {path} (it exports {TOOL_INIT_SYMBOL})");
            let mut tool = AttachedTool {
                path,
                init_status: None,
                error: None,
                library: Some(library),
            };
            // SAFETY: the documented signature; the object is this code's own, loaded for as
            // long as this code runs, and its handle is kept in the slot.
            unsafe { run_tool_init(&mut tool, init, runtime_version) };
            *slot = Some(tool);
        }
        Ok(None) => log::info!("[kernel-replay] hsa: no tool attached: {TOOL_ENV} is unset and this library exports no {TOOL_INIT_SYMBOL}; replay stays unconfigured unless the application configures it"),
        Err(why) => log::info!("[kernel-replay] hsa: no tool attached: {TOOL_ENV} is unset and the built-in {TOOL_INIT_SYMBOL} cannot be looked up ({why}); replay stays unconfigured unless the application configures it"),
    }
}

/// `int kreplay_tool_init(uint64_t runtime_version)`.
type ToolInitFn = unsafe extern "C" fn(u64) -> c_int;

/// Loads the library named by [`TOOL_ENV`] and calls its [`TOOL_INIT_SYMBOL`].
fn load_named_tool(path: &std::ffi::OsStr, runtime_version: u64) -> AttachedTool {
    let path_s = path.to_string_lossy().into_owned();
    let mut tool = AttachedTool {
        path: path_s.clone(),
        init_status: None,
        error: None,
        library: None,
    };
    // SAFETY: loading the library the user named runs its initialisers; that is the purpose
    // of the variable.
    match unsafe { libloading::Library::new(path) } {
        Err(e) => {
            let e = describe(&e);
            log::error!("[kernel-replay] hsa: {TOOL_ENV}={path_s}: cannot load it: {e}");
            tool.error = Some(e);
        }
        Ok(lib) => {
            // SAFETY: the documented signature `int kreplay_tool_init(uint64_t)`.
            let init = unsafe { lib.get::<ToolInitFn>(TOOL_INIT_SYMBOL.as_bytes()) }.map(|s| *s);
            match init {
                Err(e) => {
                    let e = describe(&e);
                    log::error!("[kernel-replay] hsa: {TOOL_ENV}={path_s} does not export {TOOL_INIT_SYMBOL}: {e}");
                    tool.error = Some(e);
                }
                // SAFETY: the documented signature; the library stays loaded (kept below).
                Ok(init) => unsafe { run_tool_init(&mut tool, init, runtime_version) },
            }
            tool.library = Some(lib);
        }
    }
    tool
}

/// A loader error with its causes: libloading's own message is only "dlopen failed", the
/// loader's reason (`dlerror`: which file, why) is its source.
fn describe(e: &libloading::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text += &format!(": {c}");
        cause = c.source();
    }
    text
}

/// Calls a tool's init and records its status.
///
/// # Safety
///
/// 1. `init` has the signature of [`TOOL_INIT_SYMBOL`] and its library stays loaded.
unsafe fn run_tool_init(tool: &mut AttachedTool, init: ToolInitFn, runtime_version: u64) {
    // SAFETY: the caller's item 1.
    let status = unsafe { init(runtime_version) };
    if status != 0 {
        log::error!(
            "[kernel-replay] hsa: tool {}: {TOOL_INIT_SYMBOL} returned {status}; replay stays unconfigured",
            tool.path
        );
    } else {
        log::info!("[kernel-replay] hsa: attached tool {}", tool.path);
    }
    tool.init_status = Some(status);
}

/// The shared object holding this code (its path, from `dladdr` on one of our functions), and,
/// when that object itself defines [`TOOL_INIT_SYMBOL`], the function and a handle keeping the
/// object loaded. `Ok(None)`: it does not (as `libkernel_replay.so` does not). `Err`: why it
/// could not be looked up.
#[cfg(unix)]
fn own_tool_hook() -> Result<Option<(String, ToolInitFn, libloading::Library)>, String> {
    use std::os::unix::ffi::OsStrExt as _;

    /// The path of the object containing `addr` (copied out) and its load base, from `dladdr`.
    fn object_of(addr: *const c_void) -> Option<(std::ffi::OsString, usize)> {
        // SAFETY: `Dl_info` is plain pointers; all-zero is a valid value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: `dladdr` only inspects the loader's tables and writes `info`.
        let found = unsafe { libc::dladdr(addr, &mut info) };
        if found == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated path owned by the loader, valid while that object stays
        // loaded, which it does during this call (it holds `addr`); copied out at once.
        let name = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
        Some((
            std::ffi::OsStr::from_bytes(name).to_owned(),
            info.dli_fbase as usize,
        ))
    }

    let (name, base) = object_of(own_tool_hook as *const c_void)
        .ok_or("dladdr does not know the object holding replay-hsa's code")?;
    let path = name.to_string_lossy().into_owned();
    let flags = libc::RTLD_NOLOAD | libc::RTLD_LAZY;
    // SAFETY: RTLD_NOLOAD never loads anything: it only returns a handle to this object, which
    // is loaded (it runs this code), so no initialiser runs.
    let lib = unsafe { libloading::os::unix::Library::open(Some(&name), flags) }.map_err(|e| {
        format!(
            "{path} cannot be reopened with RTLD_NOLOAD: {}",
            describe(&e)
        )
    })?;
    // SAFETY: the documented signature `int kreplay_tool_init(uint64_t)`; checked below to be
    // defined in this very object.
    let Ok(init) = (unsafe { lib.get::<ToolInitFn>(TOOL_INIT_SYMBOL.as_bytes()) }).map(|s| *s)
    else {
        return Ok(None);
    };
    // `dlsym` on a handle also searches the object's dependencies (for the main program, the
    // global scope): only a definition inside this very object is this code's tool.
    match object_of(init as *const c_void) {
        Some((_, b)) if b == base => Ok(Some((path, init, libloading::Library::from(lib)))),
        other => {
            log::debug!(
                "[kernel-replay] hsa: the {TOOL_INIT_SYMBOL} found from {path} is defined in {}, not in it; ignored",
                other.map_or_else(|| "an unknown object".into(), |(n, _)| n.to_string_lossy().into_owned())
            );
            Ok(None)
        }
    }
}

/// Without `dladdr`, no built-in tool is looked up.
#[cfg(not(unix))]
fn own_tool_hook() -> Result<Option<(String, ToolInitFn, libloading::Library)>, String> {
    Err("not supported on this platform".into())
}
