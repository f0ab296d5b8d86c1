//! Calls into C (SPEC §10: a misbehaving callback ends the dispatch with `callback_failed`):
//! the replay callback adapted to [`ReplayTool`], the pass-count and continue callbacks adapted
//! to the core's closures, the outcome sink, and the bookkeeping that keeps every pointer
//! handed to C valid for exactly as long as the header promises.
//!
//! - Every call into C runs under a [`Gate`]'s read side and a thread-local callback mark.
//!   Disabling a gate takes its write side: it waits for calls in flight on other threads, and
//!   no call starts after it (so a tool may free its `callback_data` once destroy or shutdown
//!   returned). Entry points that would wait on a gate refuse to run inside a callback
//!   (`KREPLAY_STATUS_IN_CALLBACK`), so a callback never waits on itself.
//! - The C dispatch info of a dispatch is built once, in CONFIG ENTER, and shared (by `Arc`)
//!   with the pass-count and continue closures and every later callback of that dispatch; it
//!   is dropped after CONFIG EXIT.
//! - The continue callback shown in PASS is the C function the tool installed in CONFIG ENTER;
//!   a different value written in PASS EXIT replaces it for that pass only (the core's rule).
//! - Outcome records handed to C are registered as *live* for the duration of the callback, so
//!   `kreplay_outcome_json` (and the phases and graph-node accessors) can check a pointer
//!   before using it. A record whose agent named no graph node gets the one the backend runs
//!   on this thread now (a CUDA graph's kernel node under the `cuda` feature).
//! - A user's tool library named by a backend's variable (`KREPLAY_CUDA_TOOL`,
//!   `KREPLAY_HSA_TOOL`) is opened, and its `kreplay_tool_init` called, by
//!   [`load_tool_library`], the one loader of every backend (registered with
//!   `replay_tools::library` by each backend's entry points).

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use replay_core::{
    ContinueFn, DispatchInfo, MemorySync, Operation, OutcomeRecord, PassCountFn, Phase,
    ReplayPayload, ReplayTool, UserData,
};

use crate::capture::CaptureScope;
use crate::checked::{operation_code, phase_code, CDispatchInfo, COutcome, Error};
use crate::sys::*;

// ----- The PASS ENTER memory sync -----------------------------------------------------------

/// A payload's memory sync with its lifetime erased (see [`SyncScope`]).
type SyncPtr = *const (dyn MemorySync + 'static);

thread_local! {
    /// The memory sync of the PASS ENTER payload whose C callback runs on this thread now.
    static PASS_SYNC: Cell<Option<SyncPtr>> = const { Cell::new(None) };
}

/// Offers `payload.memory_sync` to `kreplay_pass_sync` on this thread until dropped (also on
/// unwind), restoring what was offered before (a nested window's callback).
struct SyncScope(Option<SyncPtr>);

impl SyncScope {
    fn enter(sync: Option<&dyn MemorySync>) -> Self {
        // SAFETY: only the lifetime is erased; the pointer is dereferenced only by `pass_sync`
        // on this thread while this scope lives, and the scope is dropped before the payload
        // (a local of the callback that borrows it) goes.
        let p = sync.map(|s| unsafe {
            std::mem::transmute::<*const (dyn MemorySync + '_), SyncPtr>(s as *const _)
        });
        Self(PASS_SYNC.with(|c| c.replace(p)))
    }
}

impl Drop for SyncScope {
    fn drop(&mut self) {
        let _ = PASS_SYNC.try_with(|c| c.set(self.0));
    }
}

/// `kreplay_pass_sync`: inside a PASS ENTER callback, waits until the restore before this pass
/// is done on the device; elsewhere (or with nothing ordered) returns at once.
pub(crate) fn pass_sync() -> Result<(), Error> {
    let Some(p) = PASS_SYNC.try_with(Cell::get).ok().flatten() else {
        return Ok(());
    };
    // SAFETY: set by a `SyncScope` of this thread that is still alive (it is reset when the
    // scope drops), so the payload's memory sync it points to is alive too (`SyncScope::enter`).
    let sync = unsafe { &*p };
    sync.sync().map_err(|e| Error::Device(e.to_string()))
}

// ----- Callback marks and gates ------------------------------------------------------------

thread_local! {
    static CALLBACK_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Marks this thread as inside a library callback until dropped.
struct CallbackMark;

impl CallbackMark {
    fn enter() -> Self {
        let _ = CALLBACK_DEPTH.try_with(|d| d.set(d.get() + 1));
        Self
    }
}

impl Drop for CallbackMark {
    fn drop(&mut self) {
        let _ = CALLBACK_DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Whether this thread is inside a callback of the library (ours, or any tool callback of a
/// replay window).
pub(crate) fn in_callback() -> bool {
    CALLBACK_DEPTH.try_with(|d| d.get() > 0).unwrap_or(false)
        || replay_core::locks::thread_in_callback()
}

/// Fails with `InCallback` inside a library callback.
pub(crate) fn refuse_in_callback() -> Result<(), Error> {
    if in_callback() {
        Err(Error::InCallback)
    } else {
        Ok(())
    }
}

/// Lets calls into C start until disabled; disabling waits for calls in flight.
///
/// An in-flight count rather than a reader/writer lock: entry is recursive (a callback that,
/// through tool work, leads to another call on this thread never waits), and a pending disable
/// is never starved by a stream of new calls (they see it at once and back out).
#[derive(Debug)]
pub(crate) struct Gate {
    enabled: AtomicBool,
    in_flight: AtomicUsize,
    lock: Mutex<()>,
    idle: Condvar,
}

/// A call into C in flight; dropping it ends the call.
#[derive(Debug)]
pub(crate) struct GateCall<'a>(&'a Gate);

impl Drop for GateCall<'_> {
    fn drop(&mut self) {
        let gate = self.0;
        if gate.in_flight.fetch_sub(1, Ordering::SeqCst) == 1
            && !gate.enabled.load(Ordering::SeqCst)
        {
            let _g = gate.lock.lock();
            gate.idle.notify_all();
        }
    }
}

impl Gate {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            enabled: AtomicBool::new(true),
            in_flight: AtomicUsize::new(0),
            lock: Mutex::new(()),
            idle: Condvar::new(),
        })
    }

    /// A pass to call into C, or `None` once disabled.
    pub(crate) fn enter(&self) -> Option<GateCall<'_>> {
        // SeqCst on both sides: either `disable` sees this call in flight, or this call sees
        // the gate disabled.
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let call = GateCall(self);
        self.enabled.load(Ordering::SeqCst).then_some(call)
    }

    /// No call starts after this returns; calls in flight (on other threads) have returned.
    pub(crate) fn disable(&self) {
        self.enabled.store(false, Ordering::SeqCst);
        let mut g = self.lock.lock();
        while self.in_flight.load(Ordering::SeqCst) != 0 {
            // The timeout only guards against a wake-up lost between the check and the wait.
            self.idle.wait_for(&mut g, Duration::from_millis(5));
        }
    }
}

/// A pointer the tool gave us, passed back to its callbacks.
#[derive(Debug, Clone, Copy)]
struct ToolData(*mut c_void);

// SAFETY: the header's contract for `callback_data` and the sink's `data`: the tool passes a
// pointer it lets us hand back to its callbacks from whatever thread runs the window. We never
// dereference it.
unsafe impl Send for ToolData {}
// SAFETY: as above; we only copy the pointer value.
unsafe impl Sync for ToolData {}

impl ToolData {
    /// The pointer (a method, so closures capture the whole `Send` wrapper, not the field).
    fn get(self) -> *mut c_void {
        self.0
    }
}

// ----- Live outcomes -----------------------------------------------------------------------

static LIVE_OUTCOMES: Mutex<Vec<Arc<COutcome>>> = Mutex::new(Vec::new());

/// Keeps an outcome findable by its C pointer until dropped.
struct LiveOutcome(Arc<COutcome>);

/// The graph node the backend runs on this thread now, for a record whose agent named none:
/// under the `cuda` feature, the kernel node of a CUDA graph the interception is unrolling
/// (CONFIG EXIT and the outcome sink run on the thread that runs the node).
fn backend_graph_node() -> Option<replay_core::GraphNode> {
    #[cfg(feature = "cuda")]
    {
        replay_cuda::graph_tag::current_node().map(replay_cuda::graph_tag::NodeTag::to_record)
    }
    #[cfg(not(feature = "cuda"))]
    {
        None
    }
}

impl LiveOutcome {
    fn register(record: &OutcomeRecord) -> Self {
        let o = match backend_graph_node().filter(|_| record.graph.is_none()) {
            Some(g) => {
                let mut r = record.clone();
                r.graph = Some(g);
                Arc::new(COutcome::new(&r))
            }
            None => Arc::new(COutcome::new(record)),
        };
        LIVE_OUTCOMES.lock().push(Arc::clone(&o));
        Self(o)
    }
}

impl Drop for LiveOutcome {
    fn drop(&mut self) {
        let mut live = LIVE_OUTCOMES.lock();
        if let Some(i) = live.iter().rposition(|o| Arc::ptr_eq(o, &self.0)) {
            live.swap_remove(i);
        }
    }
}

/// The live outcome whose C view is at `p`.
pub(crate) fn live_outcome(p: *const kreplay_outcome_t) -> Option<Arc<COutcome>> {
    LIVE_OUTCOMES
        .lock()
        .iter()
        .find(|o| std::ptr::eq(o.as_ptr(), p))
        .cloned()
}

// ----- The replay callback -----------------------------------------------------------------

type CReplayFn = unsafe extern "C" fn(
    kreplay_operation_t,
    kreplay_phase_t,
    *mut kreplay_replay_payload_t,
    *mut kreplay_user_data_t,
    *mut c_void,
);
type CPassCountFn =
    unsafe extern "C" fn(*const kreplay_dispatch_info_t, kreplay_user_data_t) -> u64;
type CContinueFn =
    unsafe extern "C" fn(*const kreplay_dispatch_info_t, u32, u32, kreplay_user_data_t) -> i32;

/// What one dispatch keeps between its callbacks.
#[derive(Debug)]
struct DispatchState {
    info: CDispatchInfo,
    /// The continue callback installed in CONFIG ENTER.
    config_continue: Mutex<Option<CContinueFn>>,
}

impl DispatchState {
    fn new(info: &DispatchInfo) -> Arc<Self> {
        Arc::new(Self {
            info: CDispatchInfo::new(info),
            config_continue: Mutex::new(None),
        })
    }
}

/// A C replay callback as the core's [`ReplayTool`].
#[derive(Debug)]
pub(crate) struct CTool {
    callback: CReplayFn,
    data: ToolData,
    toggles: ContextToggles,
    gate: Arc<Gate>,
    dispatches: Mutex<HashMap<u64, Arc<DispatchState>>>,
}

/// The entry points a payload offers the tool for starting and stopping contexts
/// (`kreplay_replay_start_context` / `kreplay_replay_stop_context`), given by the caller so
/// this module does not name the entry points.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ContextToggles {
    pub(crate) start: kreplay_context_toggle_t,
    pub(crate) stop: kreplay_context_toggle_t,
}

impl CTool {
    /// Adapts `callback` with its `callback_data`; payloads offer `toggles`.
    pub(crate) fn new(
        callback: CReplayFn,
        data: *mut c_void,
        toggles: ContextToggles,
    ) -> Arc<Self> {
        let data = ToolData(data);
        Arc::new(Self {
            callback,
            data,
            toggles,
            gate: Gate::new(),
            dispatches: Mutex::new(HashMap::new()),
        })
    }

    /// No call into the tool starts after this returns; calls in flight have returned.
    pub(crate) fn disable(&self) {
        self.gate.disable();
        // Replaced, not cleared: the table's memory goes too.
        *self.dispatches.lock() = HashMap::new();
    }

    fn state_for(&self, op: Operation, phase: Phase, info: &DispatchInfo) -> Arc<DispatchState> {
        let id = info.dispatch_id.0;
        let mut map = self.dispatches.lock();
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                let s = DispatchState::new(info);
                map.insert(id, Arc::clone(&s));
                s
            }
            (Operation::Config, Phase::Exit) => {
                map.remove(&id).unwrap_or_else(|| DispatchState::new(info))
            }
            _ => Arc::clone(map.entry(id).or_insert_with(|| DispatchState::new(info))),
        }
    }
}

fn pass_count_closure(f: CPassCountFn, state: Arc<DispatchState>, gate: Arc<Gate>) -> PassCountFn {
    Arc::new(move |_info: &DispatchInfo, ud: UserData| -> u64 {
        // Disabled (context destroyed, library shut down): 1 pass is "no replay".
        let Some(_open) = gate.enter() else { return 1 };
        let _mark = CallbackMark::enter();
        // SAFETY: `f` is the tool's pass-count callback (header contract: callable from any
        // thread while the configuration lives, which the gate guarantees); the dispatch info
        // lives in `state`, held by this closure, for the whole call.
        unsafe { f(state.info.as_ptr(), kreplay_user_data_t { value: ud }) }
    })
}

fn continue_closure(f: CContinueFn, state: Arc<DispatchState>, gate: Arc<Gate>) -> ContinueFn {
    Arc::new(
        move |_info: &DispatchInfo, pass: u32, total: u32, ud: UserData| -> i32 {
            // Disabled: stop the loop.
            let Some(_open) = gate.enter() else { return 0 };
            let _mark = CallbackMark::enter();
            // SAFETY: as for the pass-count callback: the tool's function, called while the
            // gate is open, with dispatch info owned by `state` for the whole call.
            unsafe {
                f(
                    state.info.as_ptr(),
                    pass,
                    total,
                    kreplay_user_data_t { value: ud },
                )
            }
        },
    )
}

impl ReplayTool for CTool {
    fn callback(
        &self,
        operation: Operation,
        phase: Phase,
        payload: &mut ReplayPayload<'_>,
        user_data: &mut UserData,
    ) {
        let Some(_open) = self.gate.enter() else {
            return;
        };
        let state = self.state_for(operation, phase, payload.dispatch_info);
        let shown: Option<CContinueFn> =
            if operation == Operation::Pass && payload.replay_continue.is_some() {
                *state.config_continue.lock()
            } else {
                None
            };
        let outcome = match (operation, phase, payload.outcome) {
            (Operation::Config, Phase::Exit, Some(r)) => Some(LiveOutcome::register(r)),
            _ => None,
        };
        let mut c = kreplay_replay_payload_t {
            size: std::mem::size_of::<kreplay_replay_payload_t>() as u64,
            dispatch_info: state.info.as_ptr(),
            current_pass: payload.current_pass,
            total_passes: payload.total_passes,
            replay_pass_count: None,
            replay_continue: shown,
            replay_start_context: self.toggles.start,
            replay_stop_context: self.toggles.stop,
            outcome: outcome.as_ref().map_or(std::ptr::null(), |o| o.0.as_ptr()),
        };
        let mut ud = kreplay_user_data_t { value: *user_data };
        let mut capture = CaptureScope::enter(
            (operation, phase) == (Operation::Pass, Phase::Enter),
            payload.dispatch_info.dispatch_id.0,
            payload.current_pass,
        );
        {
            let _mark = CallbackMark::enter();
            let _sync = SyncScope::enter(payload.memory_sync);
            // SAFETY: `callback` is the tool's function, non-NULL (checked at configure) and
            // callable from any thread while the configuration lives (header contract; the
            // gate is open). The payload, user data, dispatch info and outcome are valid for
            // the whole call: locals, or owned by `state` / `outcome`, which outlive it.
            unsafe {
                (self.callback)(
                    operation_code(operation),
                    phase_code(phase),
                    &mut c,
                    &mut ud,
                    self.data.get(),
                )
            };
        }
        // SAFETY: the union was initialised through `value` (all 8 bytes); the tool may have
        // stored a pointer, which overwrites some or all of them with initialised bytes, so
        // reading 8 bytes as a u64 reads initialised memory.
        *user_data = unsafe { ud.value };
        drop(outcome);
        if let Some(request) = capture.take() {
            payload.request_capture(request);
        }
        drop(capture);

        match (operation, phase) {
            (Operation::Config, Phase::Enter) => {
                payload.replay_pass_count = c
                    .replay_pass_count
                    .map(|f| pass_count_closure(f, Arc::clone(&state), Arc::clone(&self.gate)));
                *state.config_continue.lock() = c.replay_continue;
                payload.replay_continue = c
                    .replay_continue
                    .map(|f| continue_closure(f, Arc::clone(&state), Arc::clone(&self.gate)));
            }
            // Compared by address: the tool replaced the callback for this pass.
            (Operation::Pass, Phase::Exit)
                if c.replay_continue.map(|f| f as usize) != shown.map(|f| f as usize) =>
            {
                payload.replay_continue = c
                    .replay_continue
                    .map(|f| continue_closure(f, Arc::clone(&state), Arc::clone(&self.gate)));
            }
            // Writes in other phases are ignored (header contract).
            _ => {}
        }
    }
}

// ----- The outcome sink --------------------------------------------------------------------

type CSinkFn = unsafe extern "C" fn(*const kreplay_outcome_t, *mut c_void);

/// A C outcome sink as the core's sink closure, with the gate that disables it.
pub(crate) fn sink_closure(
    f: CSinkFn,
    data: *mut c_void,
) -> (replay_core::service::OutcomeSink, Arc<Gate>) {
    let gate = Gate::new();
    let data = ToolData(data);
    let g = Arc::clone(&gate);
    let sink = Arc::new(move |record: &OutcomeRecord| {
        let Some(_open) = g.enter() else { return };
        let live = LiveOutcome::register(record);
        let _mark = CallbackMark::enter();
        // SAFETY: `f` is the tool's sink, callable from any thread until replaced (header
        // contract; the gate is open); the outcome lives in `live` for the whole call.
        unsafe { f(live.0.as_ptr(), data.get()) };
    });
    (sink, gate)
}

// ----- Tool libraries -------------------------------------------------------------------------

/// A loader error with its causes: libloading's own message is only "dlopen failed", the
/// loader's reason (`dlerror`: which file, why) is its source.
#[cfg(any(feature = "cuda", feature = "hsa"))]
fn describe(e: &libloading::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text += &format!(": {c}");
        cause = c.source();
    }
    text
}

/// Opens the tool library at `path`, calls its `kreplay_tool_init(version)` once and looks up
/// its optional `kreplay_tool_fini`; the library stays loaded as long as the handle returned.
#[cfg(any(feature = "cuda", feature = "hsa"))]
pub(crate) fn load_tool_library(
    path: &std::ffi::OsStr,
    version: u64,
) -> Result<replay_tools::library::LoadedLibrary, replay_tools::ToolError> {
    use replay_tools::library::{LoadedLibrary, TOOL_FINI_SYMBOL, TOOL_INIT_SYMBOL};
    use replay_tools::ToolError;
    type Init = unsafe extern "C" fn(u64) -> std::ffi::c_int;
    type Fini = unsafe extern "C" fn();
    // SAFETY: loading the library the user named runs its initialisers; that is the purpose
    // of the variable that names it.
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| ToolError::LibraryLoad(describe(&e)))?;
    // SAFETY: the documented signature `int kreplay_tool_init(uint64_t)`.
    let init = unsafe { lib.get::<Init>(TOOL_INIT_SYMBOL.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| ToolError::LibraryInit {
            symbol: TOOL_INIT_SYMBOL,
            reason: describe(&e),
        })?;
    // SAFETY: the documented signature `void kreplay_tool_fini(void)`, if present.
    let fini = unsafe { lib.get::<Fini>(TOOL_FINI_SYMBOL.as_bytes()) }
        .ok()
        .map(|s| *s);
    // SAFETY: the documented signature; the library stays loaded (its handle is returned).
    let init_status = unsafe { init(version) };
    Ok(LoadedLibrary {
        init_status,
        fini,
        handle: Box::new(lib),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct CountingSync(AtomicUsize, bool);

    impl MemorySync for CountingSync {
        fn sync(&self) -> Result<(), replay_core::BackendError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            if self.1 {
                return Err(replay_core::BackendError::new(
                    replay_core::BackendErrorKind::Other,
                    replay_core::AgentId(0),
                    "sync memory",
                    "not done",
                ));
            }
            Ok(())
        }
    }

    #[test]
    fn the_pass_sync_reaches_the_payloads_sync_only_while_its_callback_runs() {
        let ok = CountingSync(AtomicUsize::new(0), false);
        let stuck = CountingSync(AtomicUsize::new(0), true);
        assert!(
            pass_sync().is_ok(),
            "outside a callback: nothing to wait for"
        );
        {
            let _outer = SyncScope::enter(Some(&ok));
            assert!(pass_sync().is_ok());
            {
                // A nested window's callback offers its own, then the outer one is back.
                let _inner = SyncScope::enter(Some(&stuck));
                assert!(matches!(pass_sync(), Err(Error::Device(_))));
            }
            assert!(pass_sync().is_ok());
            // Another thread is not inside this callback.
            std::thread::scope(|s| {
                s.spawn(|| assert!(pass_sync().is_ok()));
            });
        }
        assert!(pass_sync().is_ok());
        assert_eq!(ok.0.load(Ordering::SeqCst), 2);
        assert_eq!(stuck.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_disabled_gate_refuses_and_disable_waits_for_calls_in_flight() {
        let gate = Gate::new();
        let g = gate.enter().expect("open");
        let g2 = gate.enter().expect("recursive entry is allowed");
        assert_eq!(gate.in_flight.load(Ordering::SeqCst), 2);
        let t = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || gate.disable())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!t.is_finished(), "disable waits for the calls in flight");
        drop(g2);
        drop(g);
        t.join().unwrap();
        assert!(gate.enter().is_none());
        assert_eq!(
            gate.in_flight.load(Ordering::SeqCst),
            0,
            "a refused entry backs out"
        );
    }

    #[test]
    fn callback_marks_nest() {
        assert!(!in_callback());
        {
            let _a = CallbackMark::enter();
            let _b = CallbackMark::enter();
            assert!(in_callback());
        }
        assert!(!in_callback());
    }
}
