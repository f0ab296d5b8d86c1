//! Every thread the library starts, so `kreplay_shutdown` can join them (SPEC §10).
//!
//! Two ways in:
//! - [`spawn`]: a thread of this crate's own; its body gets a [`StopSignal`] to poll or wait
//!   on, and is joined at shutdown.
//! - [`on_shutdown`]: a subsystem that owns threads itself (the simulator's copy engine and
//!   completion threads, a backend's event thread) registers a hook that stops and joins them;
//!   hooks run at shutdown, before the threads of [`spawn`] are joined, in reverse order of
//!   registration.
//!
//! After shutdown both refuse. The core starts no thread (SPEC §6: the window runs on the
//! submitting thread); the simulator of the C ABI registers a hook at its first
//! `kreplay_sim_create`, and backends register theirs.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Tells a library thread to finish.
#[derive(Debug, Clone)]
pub struct StopSignal {
    inner: Arc<(Mutex<bool>, Condvar)>,
}

impl StopSignal {
    fn new() -> Self {
        Self {
            inner: Arc::new((Mutex::new(false), Condvar::new())),
        }
    }

    /// Whether shutdown asked the thread to finish.
    pub fn is_stopped(&self) -> bool {
        *self.inner.0.lock()
    }

    /// Waits up to `timeout` for the stop request; `true` when it came.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let (lock, cv) = &*self.inner;
        let mut stopped = lock.lock();
        if !*stopped {
            cv.wait_for(&mut stopped, timeout);
        }
        *stopped
    }

    fn stop(&self) {
        let (lock, cv) = &*self.inner;
        *lock.lock() = true;
        cv.notify_all();
    }
}

/// A hook that stops and joins a subsystem's threads.
pub type ShutdownHook = Box<dyn FnOnce() + Send>;

/// Why a thread could not be registered.
#[derive(Debug)]
pub enum SpawnError {
    /// The library is shut down.
    ShutDown,
    /// The operating system refused the thread.
    Io(std::io::Error),
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ShutDown => f.write_str("the library is shut down"),
            Self::Io(e) => write!(f, "the thread could not be started: {e}"),
        }
    }
}

impl std::error::Error for SpawnError {}

thread_local! {
    /// The registry and serial number of the library thread running here (0 = none). Used
    /// instead of `std::thread::current()`, which would allocate a handle for threads the
    /// library did not start.
    static THIS_THREAD: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

static NEXT_REGISTRY: AtomicU64 = AtomicU64::new(1);

/// A registry of threads and shutdown hooks.
#[derive(Debug)]
pub struct ThreadRegistry {
    id: u64,
    state: Mutex<State>,
    stop: StopSignal,
}

struct State {
    closed: bool,
    next_serial: u64,
    threads: Vec<(String, u64, JoinHandle<()>)>,
    hooks: Vec<(String, ShutdownHook)>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("closed", &self.closed)
            .field(
                "threads",
                &self.threads.iter().map(|(n, _, _)| n).collect::<Vec<_>>(),
            )
            .field(
                "hooks",
                &self.hooks.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// What [`ThreadRegistry::shutdown`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Threads joined.
    pub joined: Vec<String>,
    /// Threads or hooks that panicked.
    pub panicked: Vec<String>,
    /// Threads not joined because shutdown ran on them.
    pub skipped: Vec<String>,
}

impl Default for ThreadRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl ThreadRegistry {
    /// An empty, open registry.
    pub fn new() -> Self {
        Self {
            id: NEXT_REGISTRY.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(State {
                closed: false,
                next_serial: 1,
                threads: Vec::new(),
                hooks: Vec::new(),
            }),
            stop: StopSignal::new(),
        }
    }

    /// Starts a named thread that shutdown joins; `body` should return soon after its
    /// [`StopSignal`] fires.
    pub fn spawn(
        &self,
        name: &str,
        body: impl FnOnce(StopSignal) + Send + 'static,
    ) -> Result<ThreadId, SpawnError> {
        let mut state = self.state.lock();
        if state.closed {
            return Err(SpawnError::ShutDown);
        }
        let stop = self.stop.clone();
        let serial = state.next_serial;
        state.next_serial += 1;
        let registry = self.id;
        let handle = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                THIS_THREAD.with(|t| t.set((registry, serial)));
                body(stop)
            })
            .map_err(SpawnError::Io)?;
        let id = handle.thread().id();
        state.threads.push((name.to_owned(), serial, handle));
        Ok(id)
    }

    /// Registers a hook that shutdown runs (to stop and join threads someone else started).
    pub fn on_shutdown(
        &self,
        name: &str,
        hook: impl FnOnce() + Send + 'static,
    ) -> Result<(), SpawnError> {
        let mut state = self.state.lock();
        if state.closed {
            return Err(SpawnError::ShutDown);
        }
        state.hooks.push((name.to_owned(), Box::new(hook)));
        Ok(())
    }

    /// Threads registered and not yet joined.
    pub fn live_threads(&self) -> usize {
        self.state.lock().threads.len()
    }

    /// Closes the registry, runs the hooks (last registered first), signals the threads and
    /// joins them. A thread that is the caller itself is skipped, not deadlocked on.
    pub fn shutdown(&self) -> ShutdownReport {
        let (threads, hooks) = {
            let mut state = self.state.lock();
            state.closed = true;
            (
                std::mem::take(&mut state.threads),
                std::mem::take(&mut state.hooks),
            )
        };
        let mut report = ShutdownReport::default();
        for (name, hook) in hooks.into_iter().rev() {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(hook)).is_err() {
                report.panicked.push(name);
            }
        }
        self.stop.stop();
        let (registry, me) = THIS_THREAD.try_with(Cell::get).unwrap_or((0, 0));
        for (name, serial, handle) in threads {
            if registry == self.id && serial == me {
                report.skipped.push(name);
                continue;
            }
            match handle.join() {
                Ok(()) => report.joined.push(name),
                Err(_) => report.panicked.push(name),
            }
        }
        report
    }
}

fn global() -> &'static ThreadRegistry {
    static GLOBAL: std::sync::OnceLock<ThreadRegistry> = std::sync::OnceLock::new();
    GLOBAL.get_or_init(ThreadRegistry::new)
}

/// Starts a library thread that `kreplay_shutdown` joins.
pub fn spawn(
    name: &str,
    body: impl FnOnce(StopSignal) + Send + 'static,
) -> Result<ThreadId, SpawnError> {
    global().spawn(name, body)
}

/// Registers a hook `kreplay_shutdown` runs to stop and join a subsystem's threads.
pub fn on_shutdown(name: &str, hook: impl FnOnce() + Send + 'static) -> Result<(), SpawnError> {
    global().on_shutdown(name, hook)
}

/// Runs the global registry's shutdown.
pub(crate) fn shutdown_all() -> ShutdownReport {
    global().shutdown()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn shutdown_runs_hooks_in_reverse_then_joins_signalled_threads() {
        let reg = ThreadRegistry::new();
        let order = Arc::new(Mutex::new(Vec::new()));
        let loops = Arc::new(AtomicU32::new(0));
        for i in 0..3 {
            let loops = Arc::clone(&loops);
            reg.spawn(&format!("worker-{i}"), move |stop| {
                while !stop.wait_timeout(Duration::from_millis(5)) {
                    loops.fetch_add(1, Ordering::Relaxed);
                }
            })
            .unwrap();
        }
        for name in ["first", "second"] {
            let order = Arc::clone(&order);
            reg.on_shutdown(name, move || order.lock().push(name))
                .unwrap();
        }
        reg.on_shutdown("broken", || panic!("hook fails")).unwrap();
        assert_eq!(reg.live_threads(), 3);
        let report = reg.shutdown();
        assert_eq!(*order.lock(), vec!["second", "first"]);
        assert_eq!(report.joined.len(), 3);
        assert_eq!(report.panicked, vec!["broken".to_owned()]);
        assert_eq!(reg.live_threads(), 0);
        assert!(matches!(
            reg.spawn("late", |_| {}),
            Err(SpawnError::ShutDown)
        ));
        assert!(matches!(
            reg.on_shutdown("late", || {}),
            Err(SpawnError::ShutDown)
        ));
    }

    #[test]
    fn shutdown_on_a_library_thread_skips_that_thread() {
        let reg = Arc::new(ThreadRegistry::new());
        let (tx, rx) = std::sync::mpsc::channel();
        let r = Arc::clone(&reg);
        reg.spawn("self", move |_| tx.send(r.shutdown()).unwrap())
            .unwrap();
        let report = rx.recv().unwrap();
        assert_eq!(report.skipped, vec!["self".to_owned()]);
    }

    #[test]
    fn a_panicking_thread_is_reported() {
        let reg = ThreadRegistry::new();
        reg.spawn("panics", |_| panic!("thread fails")).unwrap();
        let report = reg.shutdown();
        assert_eq!(report.panicked, vec!["panics".to_owned()]);
    }
}
