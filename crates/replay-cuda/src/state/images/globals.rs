//! What becomes of a loaded image's globals at a launch: resolved to addresses and given to
//! the backend's module registry, or, where nobody knows them, the launch's plan declined
//! (unless `KREPLAY_CUDA_ALLOW_UNKNOWN_GLOBALS` allows it). Apart from the registry, which
//! only records what each image gave.

use std::ffi::CString;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};
use replay_core::{
    AgentId, BackendError, Dispatch, Policy, Scope, Snapshot, SnapshotError, SnapshotPlan,
    Snapshotter, WaitSpec,
};
use replay_memory::Tracker;

use super::{images, key, take_pending, Handle, Image, LaunchImage};
use crate::module::ModuleRegistry;

/// Environment variable: `1` replays kernels of images whose globals are unknown (default `0`).
pub const ALLOW_UNKNOWN_GLOBALS_ENV: &str = "KREPLAY_CUDA_ALLOW_UNKNOWN_GLOBALS";

/// Why a kernel is not to be replayed blind (the module docs' "Globals unknown").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unknown {
    /// Its image was read, but not its globals.
    Globals(String),
    /// Its function maps to no image the hooks saw loaded.
    Image(String),
}

/// Whether launches of an image (`kernel` names the launch) meet unknown globals, and why.
pub(crate) fn unknown_globals(image: &LaunchImage, kernel: &str) -> Option<Unknown> {
    let Some((_, img)) = &image.0 else {
        return Some(Unknown::Image(format!(
            "the image of kernel {kernel} is unknown (its function was obtained outside the \
             hooks of the code-loading entries), so its module globals are unknown"
        )));
    };
    let why = img.unknown.as_ref()?;
    Some(Unknown::Globals(format!(
        "globals of {} unknown ({why}): kernel {kernel} is not replayed blind",
        img.name
    )))
}

static ALLOW: AtomicU8 = AtomicU8::new(0);

/// What `KREPLAY_CUDA_ALLOW_UNKNOWN_GLOBALS` says: `Ok(allow)` or why the value is malformed.
pub fn parse_allow(value: Option<&std::ffi::OsStr>) -> Result<bool, String> {
    let Some(v) = value else { return Ok(false) };
    match v.to_str().map(str::trim) {
        Some("" | "0" | "false" | "no" | "off") => Ok(false),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        _ => Err(format!(
            "{ALLOW_UNKNOWN_GLOBALS_ENV}={v:?} is not 0/1/true/false/yes/no/on/off"
        )),
    }
}

/// Whether kernels of images whose globals are unknown replay anyway (the environment, read
/// once, or [`set_allow_unknown_globals`]).
pub fn allow_unknown_globals() -> bool {
    match ALLOW.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let allow = match parse_allow(std::env::var_os(ALLOW_UNKNOWN_GLOBALS_ENV).as_deref()) {
                Ok(a) => a,
                Err(why) => {
                    eprintln!(
                        "[kernel-replay] {why}; kernels of images whose globals are unknown decline"
                    );
                    false
                }
            };
            ALLOW.store(if allow { 2 } else { 1 }, Ordering::Relaxed);
            allow
        }
    }
}

/// Sets what [`allow_unknown_globals`] answers (an embedding tool; tests).
pub fn set_allow_unknown_globals(allow: bool) {
    ALLOW.store(if allow { 2 } else { 1 }, Ordering::Relaxed);
}

/// The memory engine of a launch whose kernel may meet unknown globals: its plan names them
/// uncapturable (so the window declines `untracked_memory` with the reason), unless the user
/// allows it.
pub(crate) struct GlobalsGate<'a> {
    inner: &'a dyn Snapshotter,
    unknown: Option<Unknown>,
}

impl<'a> GlobalsGate<'a> {
    /// `inner` planning for a launch with `unknown` globals (from [`unknown_globals`]).
    pub(crate) fn new(inner: &'a dyn Snapshotter, unknown: Option<Unknown>) -> Self {
        Self { inner, unknown }
    }
}

impl Snapshotter for GlobalsGate<'_> {
    fn plan(
        &self,
        dispatch: &Dispatch,
        scope: Scope,
        policy: &Policy,
    ) -> Result<SnapshotPlan, BackendError> {
        let mut plan = self.inner.plan(dispatch, scope, policy)?;
        let Some(u) = &self.unknown else {
            return Ok(plan);
        };
        let c = &images().counters;
        if allow_unknown_globals() {
            c.allowed_globals_unknown.fetch_add(1, Ordering::Relaxed);
        } else if plan.uncapturable.is_none() {
            let (counter, why) = match u {
                Unknown::Globals(w) => (&c.declined_globals_unknown, w),
                Unknown::Image(w) => (&c.declined_image_unknown, w),
            };
            counter.fetch_add(1, Ordering::Relaxed);
            plan.uncapturable = Some(format!(
                "{why} (set {ALLOW_UNKNOWN_GLOBALS_ENV}=1 to replay it anyway)"
            ));
        }
        Ok(plan)
    }

    fn capture(
        &self,
        plan: &SnapshotPlan,
        policy: &Policy,
        wait: &WaitSpec<'_>,
    ) -> Result<Box<dyn Snapshot>, SnapshotError> {
        self.inner.capture(plan, policy, wait)
    }

    fn pooled_peak_bytes(&self) -> u64 {
        self.inner.pooled_peak_bytes()
    }

    // A capture's reads (SPEC §13) go to the memory layer under the gate.
    fn read_to_host(&self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.inner.read_to_host(addr, out)
    }

    // A tool's `sync_memory()` in PASS ENTER waits for the memory layer's ordered restores.
    fn sync_ordered(&self, wait: &WaitSpec<'_>) -> Result<(), BackendError> {
        self.inner.sync_ordered(wait)
    }
}

/// Resolves the globals of every loaded module, and of the library `f` belongs to, into
/// `registry` (the backend of `agent`, where a launch is about to run).
pub(crate) fn resolve_globals(
    agent: AgentId,
    image: &LaunchImage,
    registry: &Arc<ModuleRegistry>,
    tracker: &Arc<Tracker>,
) {
    let s = images();
    let own = image.0.as_ref().map(|(h, _)| *h);
    // Most launches find nothing to resolve: no module pending and their own image (a
    // library's globals wait for its first launch) resolved already.
    let own_pending = image
        .0
        .as_ref()
        .is_some_and(|(h, i)| matches!(h, Handle::Library(_)) && i.pending.lock().is_some());
    if !own_pending && s.pending_modules.load(Ordering::Acquire) == 0 {
        return;
    }
    let todo: Vec<(Handle, Arc<Image>)> = s
        .images
        .lock()
        .iter()
        .filter(|(h, i)| {
            (matches!(h, Handle::Module(_)) || Some(**h) == own) && i.pending.lock().is_some()
        })
        .map(|(h, i)| (*h, Arc::clone(i)))
        .collect();
    for (h, img) in todo {
        let Some(syms) = take_pending(h, &img) else {
            continue;
        };
        let lookup = |name: &str| -> Option<(u64, u64)> {
            let c = CString::new(name).ok()?;
            let (mut p, mut n): (sys::CUdeviceptr, usize) = (0, 0);
            // SAFETY: a loaded module/library handle of the application; out pointers to
            // live locals.
            let r = unsafe {
                match h {
                    Handle::Module(m) => {
                        sys::cuModuleGetGlobal_v2(&mut p, &mut n, m as sys::CUmodule, c.as_ptr())
                    }
                    Handle::Library(l) => {
                        sys::cuLibraryGetGlobal(&mut p, &mut n, l as sys::CUlibrary, c.as_ptr())
                    }
                }
            };
            (r == CUresult::CUDA_SUCCESS).then_some((p, n as u64))
        };
        // The allocation holding a variable, as the driver's pointer attributes name it.
        let allocation_at = |addr: u64| -> Option<(u64, u64)> {
            let (base, size) = crate::memory::PointerAttributes::query(addr).ok()?.range;
            (size > 0 && base <= addr && addr - base < size).then_some((base, size))
        };
        if registry.add_foreign(key(h), syms, lookup, allocation_at) {
            s.counters
                .image_globals_resolved
                .fetch_add(1, Ordering::Relaxed);
        } else {
            s.counters
                .image_globals_failed
                .fetch_add(1, Ordering::Relaxed);
        }
        *img.registered.lock() = Some((agent, Arc::clone(registry), Arc::clone(tracker)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_forwards_a_tools_wait_for_ordered_restores() {
        use replay_mock::instant::InstantSnapshotter;
        let clock = replay_core::SystemClock::new();
        let wait = WaitSpec {
            clock: &clock,
            timeout: std::time::Duration::from_millis(10),
            slice: std::time::Duration::from_millis(1),
            progress: std::time::Duration::from_secs(1),
        };
        let failing = InstantSnapshotter {
            sync_fails: true,
            ..InstantSnapshotter::default()
        };
        assert!(GlobalsGate::new(&failing, None)
            .sync_ordered(&wait)
            .is_err());
        let fine = InstantSnapshotter::default();
        assert!(GlobalsGate::new(&fine, None).sync_ordered(&wait).is_ok());
    }
}
