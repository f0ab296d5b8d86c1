//! The HSA [`replay_core::Agent`] (SPEC §6, §9.1): [`QueueAgent`] runs the window's passes,
//! drains, ordinary run and completion for one submission on an intercepted queue: it lives for
//! one interceptor call and writes through that call's `writer`. (Which agents the backend
//! knows, and their ids, is process state: [`crate::state::Agents`].)
//!
//! - `submit_pass` writes a copy of the packet with system-scope acquire and release fences and
//!   its completion signal replaced by a signal of its own (value 1); `poll_pass` waits on that
//!   signal directly with `hsa_signal_wait_scacquire`, bounded by the budget (never through an
//!   async handler, which would run on the runtime's async thread); the signal is destroyed once
//!   it fired, and leaked by `abandon` (the device may still decrement it; it stays the queue's
//!   marker until it does).
//! - `submit_ordinary` writes the original packet; `signal_completion` writes a trailing
//!   barrier-AND (barrier bit set) carrying the application's completion signal, so it fires
//!   once, after every pass. **What a tool sees there:** the application's completion signal is
//!   decremented by that barrier, not by a dispatch, so profiling times read from it (e.g.
//!   `hsa_amd_profiling_get_dispatch_time` on the application's signal) are the barrier's: its
//!   start and end fall after the last pass, and span no kernel execution. Per-pass GPU time is
//!   in the outcome record (`pass_gpu_seconds`); a tool that wants device timestamps of a pass
//!   takes them in PASS ENTER / EXIT with its own means.
//! - Drains wait on completion, never on indices and never through another queue's ring: the
//!   queue drain appends a barrier-AND (barrier bit set) through this call's `writer` whose
//!   completion is the queue's counting drain signal (raised by one first) and waits for that
//!   signal to reach 0; the agent drain waits, on every intercepted queue of the agent, for
//!   its drain signal to reach 0 (every signal-less packet complete, see [`crate::queue`])
//!   and for the last packet that carried an application signal to complete. Another queue's
//!   ring is never written, since its interceptor may be busy (its doorbell, rung from here,
//!   would be deferred to the runtime's async thread). The copy fence waits until the stage-1
//!   copy records of the agent are complete.
//! - A window never runs on the runtime's async-events thread: tool work launched from its
//!   callbacks, overflow retries and deferred doorbells all need that thread. A candidate there
//!   declines at its queue drain (before anything is written) and runs once: `agent_busy` when
//!   it was parked behind another window on the agent and is flushed there (two threads
//!   contending for windows: nothing was stuck, see [`crate::intercept`]), `queue_drain_stuck`
//!   when the application submitted it from that thread itself.
//! - Before every `writer` call of a packet the window waits for (a pass, the queue's drain
//!   barrier) the ring's room is checked ([`crate::queue::QueueState::has_room`]: more free
//!   slots than packets, as the runtime needs); no room is an error, which the core turns into
//!   a decline or a truncation. The ordinary run and the trailing completion barrier are
//!   written as the application would write them (a full ring parks them in the runtime until
//!   there is room; nobody here waits for them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::{
    AgentId, BackendError, BackendErrorKind, Capabilities, Dispatch, DrainTarget, PassCompletion,
    Ticket,
};

use crate::queue::{self, Packet, QueueState, WriterFn};
use crate::state::{self, Originals, QueueFns};
use crate::sys::{self, aql};
use crate::tracker;

enum Pending {
    Pass {
        signal: sys::hsa_signal_t,
        mark: u64,
        started: Instant,
    },
    Drain {
        /// Each queue with the mark of its packets with a signal when the drain began.
        queues: Vec<(Arc<QueueState>, u64)>,
    },
    CopyFence,
}

/// The [`replay_core::Agent`] of one submission on an intercepted queue.
pub struct QueueAgent {
    st: Arc<QueueState>,
    o: Arc<Originals>,
    q: QueueFns,
    writer: WriterFn,
    packet: Packet,
    pending: Mutex<HashMap<u64, Pending>>,
    next: AtomicU64,
    /// The submission was parked behind another window and is resumed now.
    resumed: bool,
}

impl std::fmt::Debug for QueueAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueAgent")
            .field("agent", &self.st.agent)
            .finish_non_exhaustive()
    }
}

impl QueueAgent {
    /// The agent of one interceptor call: `writer` is that call's writer for `st`'s queue and
    /// `packet` the dispatch it received.
    pub fn new(
        st: Arc<QueueState>,
        o: Arc<Originals>,
        q: QueueFns,
        writer: WriterFn,
        packet: Packet,
    ) -> Self {
        Self {
            st,
            o,
            q,
            writer,
            packet,
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            resumed: false,
        }
    }

    /// Marks the submission as resumed from the park (it waited behind another window).
    pub fn resumed(mut self, resumed: bool) -> Self {
        self.resumed = resumed;
        self
    }

    /// Writes through the writer; the mark after the packets. With `check` (packets the
    /// window waits for) the ring's room is checked first and no room is an error; without
    /// it (the ordinary run, the trailing completion barrier: nobody here waits for them) the
    /// packets are written as the application would, and a full ring parks them in the runtime
    /// until there is room. `app`: the packets carry the application's completion signal.
    fn write(
        &self,
        op: &'static str,
        pkts: &[Packet],
        check: bool,
        app: bool,
    ) -> Result<u64, BackendError> {
        if check
            && !self
                .st
                .has_room(self.o.signal_load_relaxed, pkts.len() as u64)
        {
            return Err(BackendError::on(self.st.agent.id, op).error(
                BackendErrorKind::OutOfMemory,
                format!(
                    "the ring has room for {} packets, {} needed (and one slot the runtime keeps)",
                    self.st.space(self.o.signal_load_relaxed),
                    pkts.len()
                ),
            ));
        }
        // SAFETY: `writer` is the writer of the interceptor call running on this thread for
        // this queue (the window runs synchronously inside that call).
        Ok(unsafe { queue::write(&self.st, &self.o, &self.q, self.writer, pkts, app) })
    }

    fn ticket(&self, p: Pending) -> Ticket {
        let t = self.next.fetch_add(1, Ordering::Relaxed);
        self.pending.lock().insert(t, p);
        Ticket(t)
    }

    /// The queue's drain barrier: raises its counting signal, then appends the barrier.
    fn drain_barrier(&self) -> Result<u64, BackendError> {
        let st = &self.st;
        if !st.has_room(self.o.signal_load_relaxed, 1) {
            return Err(BackendError::on(self.st.agent.id, "queue drain")
                .error(BackendErrorKind::OutOfMemory, "the ring is full"));
        }
        let barrier = Packet::barrier_and(st.drain_signal, true);
        // SAFETY: the original add entry on our own counting signal.
        unsafe { (self.q.signal_add)(st.drain_signal, 1) };
        let written = self.write("queue drain", &[barrier], true, false);
        if written.is_err() {
            // SAFETY: undo the raise: no barrier will lower it.
            unsafe { (self.q.signal_subtract)(st.drain_signal, 1) };
        }
        written
    }
}

/// What precedes a GPU's ordinal in a capture's device description.
pub const GPU_ORDINAL: &str = "GPU ordinal ";

unsafe extern "C" fn collect_agent(a: sys::hsa_agent_t, data: *mut std::ffi::c_void) -> u32 {
    // SAFETY: `data` is the `Vec` passed by `gpu_agents`, alive for the iteration.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        (*data.cast::<Vec<sys::hsa_agent_t>>()).push(a)
    }));
    sys::HSA_STATUS_SUCCESS
}

/// The runtime's GPU agents in `hsa_iterate_agents` order (through the original entry), each
/// registered with the backend; empty before `OnLoad` or without the entry.
pub fn gpu_agents() -> Vec<state::AgentInfo> {
    let Some(o) = state::backend().originals() else {
        return Vec::new();
    };
    let Some(iterate) = o.iterate_agents else {
        return Vec::new();
    };
    let mut all: Vec<sys::hsa_agent_t> = Vec::new();
    // SAFETY: the original iteration with a callback of the right type and a live `Vec`.
    unsafe { iterate(Some(collect_agent), (&mut all as *mut Vec<_>).cast()) };
    all.into_iter()
        .map(|a| state::backend().agent(&o, a))
        .filter(|a| a.device == Some(sys::HSA_DEVICE_TYPE_GPU))
        .collect()
}

impl replay_core::Agent for QueueAgent {
    /// The code object as the application loaded it, from the loader's record of it
    /// ([`crate::module`]); an unknown one is an `Unsupported` error naming why (SPEC §13).
    fn code_image(&self, dispatch: &Dispatch) -> Result<replay_core::CodeImage, BackendError> {
        let unsupported = |why: String| {
            BackendError::on(self.st.agent.id, "code image")
                .error(BackendErrorKind::Unsupported, why)
        };
        let loader = self
            .o
            .loader
            .ok_or_else(|| unsupported("the runtime's table lacks the loader entries".into()))?;
        let agent = sys::hsa_agent_t {
            handle: self.st.agent.handle,
        };
        let bytes = loader
            .code_object(dispatch.kernel.code_object, agent)
            .map_err(|why| {
                unsupported(format!(
                    "no code object of kernel {:?}: {why}",
                    dispatch.info.kernel_name
                ))
            })?;
        // The executable's variables where its load placed them, so the capture names each
        // module-variable region by its symbol (a standalone replay places it by name).
        let variables = loader
            .variables_of(dispatch.kernel.code_object, agent)
            .map_err(|why| {
                unsupported(format!(
                    "the variables of kernel {:?}'s executable: {why}",
                    dispatch.info.kernel_name
                ))
            })?
            .into_iter()
            .map(|v| replay_core::CodeVariable {
                name: v.name,
                base: v.base,
                size: v.size,
            })
            .collect();
        Ok(replay_core::CodeImage {
            format: "hsa-code-object".into(),
            module: format!("executable@{:#x}", dispatch.kernel.code_object),
            symbol: dispatch.info.kernel_name.to_string(),
            bytes,
            launch_attributes: Vec::new(),
            variables,
        })
    }

    /// Names the agent's ordinal among the runtime's GPU agents ([`gpu_agents`]), what a
    /// standalone replay picks its GPU by (ids and handles are this process's).
    fn device_description(&self) -> replay_core::DeviceDescription {
        let ordinal = gpu_agents()
            .iter()
            .position(|a| a.handle == self.st.agent.handle)
            .map_or_else(String::new, |i| format!(", {GPU_ORDINAL}{i}"));
        replay_core::DeviceDescription {
            backend: "hsa".into(),
            device: format!(
                "HSA GPU agent {} ({:#x}){ordinal}",
                self.st.agent.id, self.st.agent.handle
            ),
            driver: "HSA runtime".into(),
        }
    }

    fn id(&self) -> AgentId {
        self.st.agent.id
    }

    /// Host digests (no `DEVICE_DIGESTS`), and `AUTO_ARGUMENTS`: by the policy's design,
    /// `scope=auto` resolves to `arguments` here, with `restore=auto` resolving to `full`,
    /// until digests run on the device (`replay_core::policy`).
    fn capabilities(&self) -> Capabilities {
        Capabilities::COPY_FENCE | Capabilities::SYSTEM_SCOPE_FENCES | Capabilities::AUTO_ARGUMENTS
    }

    fn begin_drain(&self, target: DrainTarget) -> Result<Ticket, BackendError> {
        match target {
            DrainTarget::Queue(_) => {
                if state::on_async_thread() {
                    let at = BackendError::on(self.st.agent.id, "queue drain");
                    if self.resumed {
                        return Err(at.error(BackendErrorKind::Busy, "another window held the agent when this dispatch arrived, and it is resumed on the runtime's async-events thread, where no window can run"));
                    }
                    return Err(at.error(BackendErrorKind::Unsupported, "a window cannot run on the runtime's async-events thread (tool work, retries and deferred doorbells need it)"));
                }
                let mark = self.drain_barrier()?;
                Ok(self.ticket(Pending::Drain {
                    queues: vec![(self.st.clone(), mark)],
                }))
            }
            DrainTarget::Agent => {
                let queues = queue::queues_of(self.st.agent.handle)
                    .into_iter()
                    .map(|st| {
                        let mark = st.mark();
                        (st, mark)
                    })
                    .collect();
                Ok(self.ticket(Pending::Drain { queues }))
            }
            DrainTarget::CopyFence => Ok(self.ticket(Pending::CopyFence)),
        }
    }

    fn poll_drain(&self, ticket: Ticket, budget: Duration) -> Result<bool, BackendError> {
        let deadline = Instant::now() + budget;
        let mut pending = self.pending.lock();
        let load = self.o.signal_load_relaxed;
        let done = match pending.get(&ticket.0) {
            Some(Pending::Drain { queues }) => {
                let mut all = true;
                for (st, mark) in queues {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if !self.q.wait_zero(st.drain_signal, left) {
                        all = false;
                        break;
                    }
                    // The signal-less packets (and drain barriers) are complete; the last
                    // application signal shows the others.
                    loop {
                        if st.retired_to(load, *mark) {
                            break;
                        }
                        if Instant::now() >= deadline {
                            all = false;
                            break;
                        }
                        std::thread::sleep(Duration::from_micros(200).min(budget));
                    }
                    if !all {
                        break;
                    }
                }
                if all {
                    for (st, mark) in queues {
                        st.retire(*mark);
                    }
                }
                all
            }
            Some(Pending::CopyFence) => {
                let count = |_: ()| {
                    tracker::copy_fence().pending(self.st.agent.id, |s| {
                        // SAFETY: the original load on a signal the application passed to a copy.
                        unsafe { load(sys::hsa_signal_t { handle: s }) }
                    })
                };
                loop {
                    if count(()) == 0 {
                        break true;
                    }
                    if Instant::now() >= deadline {
                        break false;
                    }
                    std::thread::sleep(Duration::from_micros(200).min(budget));
                }
            }
            _ => {
                return Err(
                    BackendError::on(self.st.agent.id, "poll drain").invalid("unknown ticket")
                )
            }
        };
        if done {
            pending.remove(&ticket.0);
        }
        Ok(done)
    }

    fn submit_pass(&self, _dispatch: &Dispatch, _pass: u32) -> Result<Ticket, BackendError> {
        if !self.st.has_room(self.o.signal_load_relaxed, 1) {
            return Err(BackendError::on(self.st.agent.id, "submit pass")
                .error(BackendErrorKind::OutOfMemory, "the ring is full"));
        }
        let signal = self.q.create_signal(1).map_err(|st| {
            BackendError::on(self.st.agent.id, "submit pass").error(
                BackendErrorKind::OutOfMemory,
                format!("hsa_signal_create returned {st:#x}"),
            )
        })?;
        let mut p = self.packet;
        p.set_header(aql::replay_pass_header(self.packet.header()));
        p.set_completion_signal(signal);
        let mark = match self.write("submit pass", &[p], true, false) {
            Ok(m) => {
                queue::progress(|p| p.ran = true);
                m
            }
            Err(e) => {
                // SAFETY: our signal, never written into a ring.
                unsafe { (self.q.signal_destroy)(signal) };
                return Err(e);
            }
        };
        Ok(self.ticket(Pending::Pass {
            signal,
            mark,
            started: Instant::now(),
        }))
    }

    fn poll_pass(
        &self,
        ticket: Ticket,
        budget: Duration,
    ) -> Result<Option<PassCompletion>, BackendError> {
        let (signal, mark, started) = match self.pending.lock().get(&ticket.0) {
            Some(Pending::Pass {
                signal,
                mark,
                started,
            }) => (*signal, *mark, *started),
            _ => {
                return Err(
                    BackendError::on(self.st.agent.id, "poll pass").invalid("unknown ticket")
                )
            }
        };
        if !self.q.wait_zero(signal, budget) {
            return Ok(None);
        }
        self.pending.lock().remove(&ticket.0);
        self.st.retire(mark);
        // SAFETY: our signal; the packet that referenced it completed.
        unsafe { (self.q.signal_destroy)(signal) };
        Ok(Some(PassCompletion {
            gpu_seconds: started.elapsed().as_secs_f64(),
        }))
    }

    fn abandon(&self, ticket: Ticket) {
        // A pass's signal or a drain barrier may still be decremented by the device: leaked.
        // An abandoned pass stays in the ring's bookkeeping until its signal fires.
        if let Some(Pending::Pass { signal, mark, .. }) = self.pending.lock().remove(&ticket.0) {
            self.st.set_marker(signal.handle, 1, mark);
        }
    }

    fn flush_caches(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn submit_ordinary(&self, _dispatch: &Dispatch) -> Result<(), BackendError> {
        queue::progress(|p| {
            p.ran = true;
            p.delivered = true;
        });
        self.write("submit ordinary", &[self.packet], false, true)
            .map(|_| ())
    }

    fn signal_completion(&self, _dispatch: &Dispatch) -> Result<(), BackendError> {
        queue::progress(|p| p.delivered = true);
        let app = self.packet.completion_signal();
        if app.handle == 0 {
            return Ok(());
        }
        self.write(
            "signal completion",
            &[Packet::barrier_and(app, true)],
            false,
            true,
        )
        .map(|_| ())
    }
}
