//! The HSA tool: what `OnLoad` and `OnUnload` do (SPEC §9.1), the attached C/C++ or Rust tool,
//! and the backend's diagnostics ([`Backend::state_json`]). The state they write is
//! [`crate::state`]'s.
//!
//! The `#[no_mangle]` entry points themselves live in the one shared object (`replay-ffi`'s
//! `hsa` feature), which calls [`on_load`] and [`on_unload`] under `catch_unwind`.
//!
//! `OnLoad`: [`crate::table::bind`] checks the versions and resolves every needed slot first;
//! any [`crate::result::TableError`] installs nothing, logs why and answers `false`, so the
//! runtime runs the application untouched. Otherwise `crate::intercept::install` saves the
//! originals (a slot that already holds our wrapper, from an earlier `OnLoad` on the same
//! table, keeps the original saved then) and writes the wrappers of [`crate::intercept`], and
//! the tool named by [`TOOL_ENV`] is attached. Where the table has every queue, signal and
//! interception entry, `hsa_queue_create` and `hsa_queue_destroy` are wrapped as well
//! ([`crate::intercept::queue`]); the interceptor submits to the service given with
//! [`crate::state::set_service`] (none set: every packet passes through).
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
//!
//! The built-in tools of `kreplay run --backend hsa`: with [`TOOL_ENV`] unset,
//! `KREPLAY_HSA_BUILTIN=verify|timing` ([`BUILTIN_ENV`]) attaches `replay-tools`' tool of that
//! name to the service, over this backend's [`HsaTools`] (the agent's tracked coarse-grained
//! device regions, digested through its memory engine's `DeviceMemory`), asking for
//! `KREPLAY_CUDA_PASSES` passes (default 3). Its records stream to the job's files as on CUDA
//! (`replay_tools::job`); `OnUnload` writes the report (or to `KREPLAY_HSA_OUT`, [`OUT_ENV`],
//! outside `kreplay run`). Each pass's GPU time is the agent's (`poll_pass`).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::Ordering;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{
    AgentId, ContextId, Digest128, DigestKey, DigestOp, MemLoc, MemoryClass, RegionRef,
    Subscription,
};
use replay_tools::{ToolDevice, ToolError, ToolKind};
use serde_json::json;

use crate::state::{backend, AttachedTool, Backend};
use crate::table;
use crate::tracker::copy_fence;
use crate::{intercept, queue};

/// The environment variable naming the tool library `OnLoad` attaches.
pub const TOOL_ENV: &str = "KREPLAY_HSA_TOOL";
/// The symbol the tool library must export: `int kreplay_tool_init(uint64_t runtime_version)`;
/// the optional one called from `OnUnload`: `void kreplay_tool_fini(void)`.
pub use replay_tools::library::{TOOL_FINI_SYMBOL, TOOL_INIT_SYMBOL};
/// The environment variable naming the built-in tool `OnLoad` attaches (`verify`, `timing`).
pub const BUILTIN_ENV: &str = "KREPLAY_HSA_BUILTIN";
/// The environment variable naming where the built-in tool's report goes outside `kreplay run`.
pub const OUT_ENV: &str = "KREPLAY_HSA_OUT";

/// The context id the built-in tools configure the service with (CUDA's too).
const BUILTIN_CONTEXT: ContextId = ContextId(0x6b72_6370);
/// How long a `verify` digest may take.
const DIGEST_WAIT: Duration = Duration::from_secs(60);

/// A built-in tool of this backend.
pub type BuiltinTool = replay_tools::BuiltinTool<HsaTools>;

static BUILTIN: OnceLock<Arc<BuiltinTool>> = OnceLock::new();

/// The built-in tool attached, if any.
pub fn builtin() -> Option<&'static Arc<BuiltinTool>> {
    BUILTIN.get()
}

/// What the built-in tools need of the HSA backend.
#[derive(Debug, Default)]
pub struct HsaTools;

impl ToolDevice for HsaTools {
    fn verify_regions(&self, agent: AgentId) -> Vec<RegionRef> {
        backend()
            .tracker
            .regions(agent)
            .into_iter()
            .filter(|r| r.class == MemoryClass::DEVICE_COARSE && r.size > 0)
            .collect()
    }

    fn digest(
        &self,
        agent: AgentId,
        regions: &[RegionRef],
        key: DigestKey,
    ) -> Result<Vec<Option<Digest128>>, ToolError> {
        let info = backend()
            .agents
            .all()
            .into_iter()
            .find(|a| a.id == agent && !a.is_cpu())
            .ok_or(ToolError::NoDevice(agent))?;
        // The engine needs the queue entries (a window ran, so they are installed).
        if backend().originals().is_none_or(|o| o.queue.is_none()) {
            return Err(ToolError::NoDevice(agent));
        }
        let mem = Arc::clone(crate::memory::engine(&info).device_memory());
        // Under the hold, after the liveness check: another thread's free waits meanwhile.
        backend().tracker.read_live(agent, regions, |live| {
            let ops: Vec<DigestOp> = live
                .iter()
                .map(|r| DigestOp {
                    at: MemLoc::Device { addr: r.base },
                    len: r.size,
                })
                .collect();
            let err = |e: replay_core::BackendError| ToolError::Digest(e.to_string());
            let fence = mem.submit_digests(&ops, key).map_err(err)?;
            if !mem.poll_fence(fence, DIGEST_WAIT).map_err(err)? {
                mem.abandon_fence(fence);
                return Err(ToolError::Digest(format!(
                    "the digests did not complete within {DIGEST_WAIT:?}"
                )));
            }
            mem.take_digests(fence).map_err(err)
        })
    }
}

/// Attaches the built-in tool `name` to the service; what went wrong otherwise.
fn attach_builtin(name: &str) -> Result<(), String> {
    let kind = ToolKind::parse(name)
        .filter(|k| *k != ToolKind::Counters)
        .ok_or_else(|| format!("{BUILTIN_ENV}={name:?} is not verify or timing"))?;
    let passes = replay_tools::builtin::passes_from_env().map_err(|e| e.to_string())?;
    let service = crate::state::service().ok_or("no replay service is set")?;
    let tool = Arc::new(BuiltinTool::new(kind, passes, HsaTools));
    let _ = BUILTIN.set(Arc::clone(&tool));
    service
        .configure(
            BUILTIN_CONTEXT,
            Subscription::CONFIG | Subscription::PASS,
            tool,
        )
        .map_err(|e| format!("the built-in tool could not be attached: {e}"))?;
    service
        .start()
        .map_err(|e| format!("the built-in tool could not start: {e}"))
}

/// The built-in tool's report: its records and per-kernel table, the service's summary.
pub fn report_json() -> serde_json::Value {
    let mut o = builtin().map(|t| t.report_members()).unwrap_or_default();
    let summary = crate::state::service()
        .map(|s| serde_json::to_value(s.summary()).unwrap_or_default())
        .unwrap_or_default();
    o.insert("summary".into(), summary);
    o.insert("backend".into(), "hsa".into());
    serde_json::Value::Object(o)
}

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
        unsafe { intercept::install(&bound, runtime_version) }
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
    if builtin().is_some() {
        let out = std::env::var_os(OUT_ENV).map(std::path::PathBuf::from);
        replay_tools::job::write_exit_report(report_json(), out.as_deref());
    }
    let tool = backend().tool.lock();
    if let Some(fini) = tool.as_ref().and_then(|t| t.fini) {
        // SAFETY: the tool's `void kreplay_tool_fini(void)`; its library is kept loaded by
        // the slot's handle.
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
    if let Ok(name) = std::env::var(BUILTIN_ENV) {
        let mut tool = AttachedTool {
            path: format!("built-in {name}"),
            init_status: None,
            error: None,
            fini: None,
            handle: None,
        };
        match attach_builtin(&name) {
            Ok(()) => {
                log::info!("[kernel-replay] hsa: attached the built-in tool {name}");
                tool.init_status = Some(0);
            }
            Err(e) => {
                log::error!("[kernel-replay] hsa: {e}; no tool attached");
                tool.error = Some(e);
            }
        }
        *slot = Some(tool);
        return;
    }
    match own {
        Ok(Some((path, init, library))) => {
            log::info!("[kernel-replay] hsa: {TOOL_ENV} is unset; initialising the tool built into {path} (it exports {TOOL_INIT_SYMBOL})");
            // SAFETY: the documented signature `void kreplay_tool_fini(void)`, if present.
            let fini = unsafe { library.get::<unsafe extern "C" fn()>(TOOL_FINI_SYMBOL.as_bytes()) }
                .ok()
                .map(|f| *f);
            let mut tool = AttachedTool {
                path,
                init_status: None,
                error: None,
                fini,
                handle: Some(Box::new(library)),
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

/// Loads the library named by [`TOOL_ENV`] and calls its [`TOOL_INIT_SYMBOL`], through the
/// shared object's one loader ([`replay_tools::library::load`]).
fn load_named_tool(path: &std::ffi::OsStr, runtime_version: u64) -> AttachedTool {
    let path_s = path.to_string_lossy().into_owned();
    let mut tool = AttachedTool {
        path: path_s.clone(),
        init_status: None,
        error: None,
        fini: None,
        handle: None,
    };
    match replay_tools::library::load(path, runtime_version) {
        Err(e) => {
            log::error!("[kernel-replay] hsa: {TOOL_ENV}={path_s}: {e}");
            tool.error = Some(match e {
                ToolError::LibraryLoad(why) => why,
                ToolError::LibraryInit { reason, .. } => reason,
                other => other.to_string(),
            });
        }
        Ok(lib) => {
            report_init_status(&path_s, lib.init_status);
            tool.init_status = Some(lib.init_status);
            tool.fini = lib.fini;
            tool.handle = Some(lib.handle);
        }
    }
    tool
}

/// Logs what a tool's init returned.
fn report_init_status(path: &str, status: c_int) {
    if status != 0 {
        log::error!(
            "[kernel-replay] hsa: tool {path}: {TOOL_INIT_SYMBOL} returned {status}; replay stays unconfigured"
        );
    } else {
        log::info!("[kernel-replay] hsa: attached tool {path}");
    }
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
    report_init_status(&tool.path, status);
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
