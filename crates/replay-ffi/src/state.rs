//! The library's process-wide state: the one replay service (SPEC §2 "One shared object"), the
//! context registry it uses as its context control, the clock, the handle table, the owner, the
//! outcome sink, and the shut-down flag (the simulators' tables are the `sim` module's own).
//!
//! The service is [`ReplayService::global_with_clock`]'s `Arc`, created once with the registry
//! and with the library's clock: a wall clock. With the `sim` feature it is `SimClock::real()`,
//! the one every simulated runtime of the C ABI is built with, because the simulator's waits and
//! the service's bounded waits must measure the same time (replay-mock: "the replay service must
//! run on the runtime's clock"); without it, the core's `SystemClock`. A real backend in this
//! shared object measures on it too; it is the wall clock.
//!
//! The service holds its context control for the life of the process (a static), so it gets a
//! [`SharedContexts`]: the registry until shutdown, nothing after, so that shutdown frees the
//! registry (no memory stays reachable only through the static, which valgrind would report).
//!
//! Lock order (never taken the other way round): handle table → owner → the registry's and the
//! core's own locks. No lock of this module is held while C code runs, nor while a gate is
//! disabled (which waits for C code that may call back into the library).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};
use replay_context::Contexts;
use replay_core::{
    Clock, ContextControl, ContextError, ContextId, Policy, PolicyError, ReplayService,
};

/// The library's clock: the wall clock, as the simulator's `SimClock` when the simulated GPU is
/// built in (feature `sim`), so its runtimes share it.
#[cfg(feature = "sim")]
pub type LibraryClock = replay_mock::SimClock;
/// The library's clock: the wall clock (without the `sim` feature, the core's).
#[cfg(not(feature = "sim"))]
pub type LibraryClock = replay_core::SystemClock;

use crate::checked::{Error, HandleTable};
use crate::tool::{CTool, Gate};

/// A context as the handle table holds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ContextEntry {
    /// Its id in the registry (ids are never reused).
    pub(crate) id: ContextId,
}

/// The handle table, closed at shutdown.
#[derive(Debug, Default)]
pub(crate) struct Handles {
    pub(crate) table: HandleTable<ContextEntry>,
    pub(crate) closed: bool,
}

impl Handles {
    /// The entry of a live handle.
    pub(crate) fn get(&self, handle: u64) -> Result<ContextEntry, Error> {
        if self.closed {
            return Err(Error::ShutDown);
        }
        self.table.get(handle).copied().ok_or_else(|| stale(handle))
    }
}

/// The error for a handle that is not live.
pub(crate) fn stale(handle: u64) -> Error {
    Error::InvalidHandle(format!(
        "context handle {handle:#x} (slot {}, generation {}) is not a live context: never created, or destroyed",
        handle & 0xffff_ffff,
        handle >> 32
    ))
}

/// The context that configured the service.
#[derive(Debug, Clone)]
pub(crate) struct Owner {
    pub(crate) handle: u64,
    pub(crate) id: ContextId,
    pub(crate) tool: Arc<CTool>,
}

/// The context control the service holds: the registry until shutdown, then none (toggles
/// answer `UnknownContext`, loop hooks do nothing).
#[derive(Debug)]
pub(crate) struct SharedContexts {
    inner: RwLock<Option<Arc<Contexts>>>,
}

impl SharedContexts {
    /// The registry, until shutdown.
    pub(crate) fn get(&self) -> Option<Arc<Contexts>> {
        self.inner.read().clone()
    }

    /// Drops the service's reference to the registry.
    pub(crate) fn release(&self) {
        self.inner.write().take();
    }

    fn with<R>(&self, f: impl FnOnce(&Contexts) -> R) -> Option<R> {
        self.inner.read().as_deref().map(f)
    }
}

impl ContextControl for SharedContexts {
    fn start(&self, ctx: ContextId) -> Result<(), ContextError> {
        self.with(|c| c.start(ctx))
            .unwrap_or(Err(ContextError::UnknownContext(ctx)))
    }
    fn stop(&self, ctx: ContextId) -> Result<(), ContextError> {
        self.with(|c| ContextControl::stop(c, ctx))
            .unwrap_or(Err(ContextError::UnknownContext(ctx)))
    }
    fn loop_begin(&self) {
        self.with(|c| c.loop_begin());
    }
    fn pass_enter_begin(&self) {
        self.with(|c| c.pass_enter_begin());
    }
    fn pass_enter_end(&self) {
        self.with(|c| c.pass_enter_end());
    }
    fn loop_end(&self) {
        self.with(|c| c.loop_end());
    }
    fn override_for(&self, ctx: ContextId) -> Option<bool> {
        self.with(|c| c.override_for(ctx)).flatten()
    }
    fn has_overrides(&self) -> bool {
        self.with(|c| c.has_overrides()).unwrap_or(false)
    }
}

/// The process's replay service (the `Arc` of [`ReplayService::global_with_clock`]), created
/// with the C ABI's context registry as its context control and [`clock()`] as its clock.
/// Backends in this shared object must take the service from here (not from
/// `ReplayService::global()`), so the C ABI and the backends share one core.
pub fn service() -> Arc<ReplayService> {
    Arc::clone(&library_any().service)
}

/// The clock the service measures on: the wall clock; with the `sim` feature, as a
/// `replay_mock::SimClock` so the simulated runtimes of the C ABI (`kreplay_sim_*`) share it,
/// as the simulator requires ([`LibraryClock`]).
pub fn clock() -> Arc<LibraryClock> {
    Arc::clone(&library_any().clock)
}

/// The malformed policy variables of the environment not set through the API since (SPEC §8),
/// as `kreplay_configure_replay` reports them. A Rust tool that configures
/// [`service()`] directly checks this first: the service's policy has each of them at its
/// default.
pub fn env_policy_errors() -> Vec<replay_core::PolicyError> {
    library_any().env_errors.lock().clone()
}

/// The context registry the service uses (SPEC §5): what C contexts are handles onto.
/// `None` after `kreplay_shutdown`, which releases it.
pub fn contexts() -> Option<Arc<Contexts>> {
    library_any().contexts.get()
}

/// Everything process-wide.
#[derive(Debug)]
pub(crate) struct Library {
    pub(crate) contexts: Arc<SharedContexts>,
    pub(crate) service: Arc<ReplayService>,
    /// The service's clock (the wall clock), shared with every simulated runtime.
    pub(crate) clock: Arc<LibraryClock>,
    pub(crate) handles: Mutex<Handles>,
    pub(crate) owner: Mutex<Option<Owner>>,
    /// The gate of the installed outcome sink.
    pub(crate) sink: Mutex<Option<Arc<Gate>>>,
    /// Serialises read-modify-write updates of the policy.
    pub(crate) policy_lock: Mutex<()>,
    /// Malformed policy variables of the environment (read once, when the library starts),
    /// each removed when the API sets that variable; configure refuses while any is left.
    pub(crate) env_errors: Mutex<Vec<PolicyError>>,
    /// Whether our stderr sink is the process's `log` logger.
    pub(crate) log_sink: bool,
}

static LIBRARY: OnceLock<Library> = OnceLock::new();
static SHUT_DOWN: AtomicBool = AtomicBool::new(false);

impl Library {
    fn init() -> Self {
        let log_sink = install_log_sink();
        let contexts = Arc::new(SharedContexts {
            inner: RwLock::new(Some(Arc::new(Contexts::new()))),
        });
        let ours = Arc::clone(&contexts);
        #[cfg(feature = "sim")]
        let clock = LibraryClock::real();
        #[cfg(not(feature = "sim"))]
        let clock = Arc::new(LibraryClock::new());
        let service_clock = Arc::clone(&clock);
        let service = ReplayService::global_with_clock(move || {
            (
                ours as Arc<dyn ContextControl>,
                service_clock as Arc<dyn Clock>,
            )
        });
        // The service applied every well-formed variable and logged each malformed one; the
        // same reading, kept so configure can refuse while one is left.
        let env_errors = Policy::env_over(Policy::default()).errors;
        let theirs = Arc::as_ptr(service.contexts()).cast::<u8>();
        if !std::ptr::eq(theirs, Arc::as_ptr(&contexts).cast::<u8>()) {
            log::error!(
                "[kernel-replay] the replay service was created before the C ABI with another context control \
                 and clock; context toggles through the C ABI will answer context_error. \
                 Code in this shared object must take the service from kernel_replay::service()"
            );
        }
        Self {
            contexts,
            service,
            clock,
            handles: Mutex::new(Handles::default()),
            owner: Mutex::new(None),
            sink: Mutex::new(None),
            policy_lock: Mutex::new(()),
            env_errors: Mutex::new(env_errors),
            log_sink,
        }
    }

    /// The registry, or `ShutDown` once released.
    pub(crate) fn registry(&self) -> Result<Arc<Contexts>, Error> {
        self.contexts.get().ok_or(Error::ShutDown)
    }

    /// Whether `id` owns the service.
    pub(crate) fn is_owner(&self, id: ContextId) -> bool {
        self.owner.lock().as_ref().is_some_and(|o| o.id == id)
    }

    /// Forgets the environment's error for each variable the API has just set (any of its
    /// names).
    pub(crate) fn env_fixed<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let fixed: Vec<String> = names
            .into_iter()
            .filter_map(Policy::canonical_name)
            .collect();
        self.env_errors
            .lock()
            .retain(|e| Policy::canonical_name(&e.variable).is_none_or(|n| !fixed.contains(&n)));
    }

    /// `EnvPolicy` while a malformed variable of the environment is left.
    pub(crate) fn check_env_policy(&self) -> Result<(), Error> {
        let errors = self.env_errors.lock();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::EnvPolicy(errors.clone()))
        }
    }
}

/// The library, or `ShutDown`.
pub(crate) fn library() -> Result<&'static Library, Error> {
    if SHUT_DOWN.load(Ordering::Acquire) {
        return Err(Error::ShutDown);
    }
    Ok(LIBRARY.get_or_init(Library::init))
}

/// The library, created if needed, even after shutdown (Rust accessors for backends).
pub(crate) fn library_any() -> &'static Library {
    LIBRARY.get_or_init(Library::init)
}

/// The library if it was ever created.
pub(crate) fn library_if_created() -> Option<&'static Library> {
    LIBRARY.get()
}

/// Marks the library shut down; `false` when it already was.
pub(crate) fn mark_shut_down() -> bool {
    !SHUT_DOWN.swap(true, Ordering::AcqRel)
}

/// Installs the core's stderr sink at the level of `KREPLAY_LOG` (or its upstream alias).
/// `false` when the embedding application installed a `log` logger first.
fn install_log_sink() -> bool {
    // Only the log variables, read as the service reads them (a value that is not UTF-8 is
    // malformed, not unset); the service reports them with every other variable.
    let from_env = Policy::lookup_over(Policy::default(), |name| {
        matches!(name, "KREPLAY_LOG" | "ROCPROFILER_KERNEL_REPLAY_LOG")
            .then(|| std::env::var_os(name))
            .flatten()
    });
    let installed = replay_core::log_sink::install(from_env.policy.log_level);
    for e in &from_env.errors {
        log::error!("[kernel-replay] {e}; the log level stays at its default");
    }
    installed
}
