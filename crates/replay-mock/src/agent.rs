//! The [`Agent`] implementation: what the replay window (SPEC §6) drives.
//!
//! - Drains are counting completions: a drain of a queue waits until the queue's `completed`
//!   count reaches its write index at `begin_drain`; an agent drain does so for every queue;
//!   the copy fence for the agent's copy engine (application copies in flight).
//! - A pass is the dispatch's kernel queued on the dispatch's queue with no completion signal;
//!   its ticket completes once the execution finished and its counters were stored.
//! - `signal_completion` queues a barrier carrying the application's signal behind every pass
//!   submitted so far (the trailing barrier); `submit_ordinary` queues the dispatch once with
//!   its own signal.
//! - `abandon` releases the injected stall that kept the ticket from completing, so the stalled
//!   work still finishes and the application still completes.
//! - An agent configured with `ORDERED_RESTORE` queues, before a pass or an ordinary run, a
//!   packet that waits for the restore batch the memory layer ordered ahead of it
//!   ([`crate::SimMemory`]'s `order_after`): the restore is ordered on the device.
//!
//! - `graph_node` names the graph node [`with_graph_node`] set on the submitting thread, as a
//!   backend that unrolls a graph does for each kernel node it runs (the test double
//!   `InstantAgent` does the same).
//!
//! The calls also feed the recorder (window-facing events, in call order) and the invariant
//! checker (window open/closed per agent, wait durations on the simulator's clock).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use replay_core::{
    Agent, AgentId, BackendError, BackendErrorKind, Capabilities, Clock, Dispatch, DrainTarget,
    PassCompletion, Ticket,
};

use crate::expect::Event;
use crate::fault::Fault;
use crate::invariant::WaitKind;
use crate::kernel::Role;
use crate::queue::{Hold, KernelWork, Lane, Work};
use crate::state::{AgentShared, GpuShared, Payload, TicketEntry, TicketKind};

pub use crate::state::SIM_CAPABILITIES;

thread_local! {
    static GRAPH_NODE: std::cell::Cell<Option<replay_core::GraphNode>> =
        const { std::cell::Cell::new(None) };
}

/// The tag [`with_graph_node`] set on this thread, if any (the agents' `graph_node`, the
/// test doubles' too).
pub(crate) fn current_graph_node() -> Option<replay_core::GraphNode> {
    GRAPH_NODE.try_with(std::cell::Cell::get).ok().flatten()
}

/// Tags every dispatch this thread submits from now on as `node` of a graph (`None`: no
/// tag), as [`with_graph_node`] does for a closure; returns the tag it replaces.
pub fn set_graph_node(node: Option<replay_core::GraphNode>) -> Option<replay_core::GraphNode> {
    GRAPH_NODE.with(|c| c.replace(node))
}

/// Runs `f` with every dispatch this thread submits meanwhile tagged as `node` of a graph
/// (the record's `graph`), as a backend running a graph node by node tags its nodes' kernels;
/// the previous tag comes back afterwards (also on unwind).
pub fn with_graph_node<R>(node: replay_core::GraphNode, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<replay_core::GraphNode>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = GRAPH_NODE.try_with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(GRAPH_NODE.with(|c| c.replace(Some(node))));
    f()
}

/// One simulated agent as the replay window drives it.
pub struct SimAgent {
    pub(crate) gpu: Arc<GpuShared>,
    pub(crate) agent: Arc<AgentShared>,
}

impl std::fmt::Debug for SimAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimAgent")
            .field("id", &self.agent.id)
            .finish_non_exhaustive()
    }
}

impl SimAgent {
    fn lane(&self, dispatch: &Dispatch, op: &'static str) -> Result<Arc<Lane>, BackendError> {
        if dispatch.info.agent != self.agent.id {
            return Err(BackendError::on(self.agent.id, op).invalid(format!(
                "dispatch for agent {} handed to agent {}",
                dispatch.info.agent, self.agent.id
            )));
        }
        self.agent.queue(dispatch.info.queue).ok_or_else(|| {
            BackendError::on(self.agent.id, op).invalid(format!(
                "queue {} does not exist on this agent",
                dispatch.info.queue
            ))
        })
    }

    fn live(&self, op: &'static str) -> Result<(), BackendError> {
        if self.gpu.is_shut_down() {
            Err(BackendError::on(self.agent.id, op)
                .error(BackendErrorKind::DeviceLost, "the simulator was shut down"))
        } else {
            Ok(())
        }
    }

    fn push(&self, lane: &Lane, work: Work, op: &'static str) -> Result<u64, BackendError> {
        lane.push(work).ok_or_else(|| {
            BackendError::on(self.agent.id, op)
                .error(BackendErrorKind::DeviceLost, "the simulator was shut down")
        })
    }

    fn ticket(
        &self,
        kind: TicketKind,
        waits: Vec<(Arc<Lane>, u64)>,
        holds: Vec<Arc<Hold>>,
    ) -> Ticket {
        let id = self.gpu.next_id();
        self.agent.tickets.lock().insert(
            id,
            TicketEntry {
                kind,
                waits,
                holds,
                begun: self.gpu.clock.now(),
            },
        );
        Ticket(id)
    }

    fn waits_of(&self, t: Ticket, op: &'static str) -> Result<Vec<(Arc<Lane>, u64)>, BackendError> {
        self.agent
            .tickets
            .lock()
            .get(&t.0)
            .map(|e| e.waits.clone())
            .ok_or_else(|| {
                BackendError::on(self.agent.id, op).invalid(format!("unknown ticket {}", t.0))
            })
    }

    /// Queues on `lane` a wait for the restore batch ordered ahead of the agent's next work,
    /// if there is one (agents with `ORDERED_RESTORE`).
    fn order_after_restore(&self, lane: &Lane, op: &'static str) -> Result<(), BackendError> {
        if let Some(seq) = self.agent.ordered_seq() {
            let copy = Arc::clone(&self.agent.copy);
            self.push(lane, Work::After { lane: copy, seq }, op)?;
        }
        Ok(())
    }

    /// Takes a stall fault and queues a hold on `lane`.
    fn stall(
        &self,
        lane: &Lane,
        what: &'static str,
        pred: impl Fn(&Fault) -> bool,
    ) -> Option<Arc<Hold>> {
        self.gpu.take_fault(self.agent.id, pred)?;
        let h = self.gpu.new_hold(what);
        let _ = lane.push(Work::Hold(Arc::clone(&h)));
        Some(h)
    }

    fn pending_completion(
        &self,
        dispatch: &Dispatch,
        op: &'static str,
    ) -> Result<
        (
            Option<crate::kernel::Kernel>,
            Arc<crate::queue::Signal>,
            bool,
        ),
        BackendError,
    > {
        let p = self.gpu.pending.lock();
        let e = p.get(&dispatch.handle).ok_or_else(|| {
            BackendError::on(self.agent.id, op)
                .invalid(format!("unknown dispatch handle {}", dispatch.handle))
        })?;
        let k = match &e.payload {
            Payload::Kernel(k) => Some(k.clone()),
            Payload::Barrier | Payload::Batch(_) => None,
        };
        Ok((k, Arc::clone(&e.completion), e.from_callback))
    }
}

impl Agent for SimAgent {
    fn id(&self) -> AgentId {
        self.agent.id
    }

    fn code_image(&self, dispatch: &Dispatch) -> Result<replay_core::CodeImage, BackendError> {
        const OP: &str = "code image";
        let (kernel, _, _) = self.pending_completion(dispatch, OP)?;
        let kernel = kernel
            .ok_or_else(|| BackendError::on(self.agent.id, OP).invalid("not a kernel dispatch"))?;
        let loaded = self.gpu.modules.loaded.read();
        let m = loaded
            .iter()
            .find(|m| m.code_object == kernel.code_object)
            .ok_or_else(|| {
                BackendError::on(self.agent.id, OP).error(
                    replay_core::BackendErrorKind::Unsupported,
                    format!(
                        "kernel {:?} belongs to no loaded module (made outside one)",
                        kernel.name
                    ),
                )
            })?;
        Ok(replay_core::CodeImage {
            format: "sim-module".into(),
            module: m.name.clone(),
            symbol: kernel.name.to_string(),
            bytes: m.image.clone().into_bytes(),
            launch_attributes: Vec::new(),
            variables: m
                .variables
                .iter()
                .filter(|v| !v.read_only)
                .map(|v| replay_core::CodeVariable {
                    name: v.name.clone(),
                    base: v.base,
                    size: v.size,
                })
                .collect(),
        })
    }

    fn graph_node(&self) -> Option<replay_core::GraphNode> {
        current_graph_node()
    }

    fn device_description(&self) -> replay_core::DeviceDescription {
        replay_core::DeviceDescription {
            backend: "sim".into(),
            device: format!("simulated agent {}", self.agent.id),
            driver: format!("replay-mock {}", env!("CARGO_PKG_VERSION")),
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.agent.config.capabilities
    }

    fn begin_drain(&self, target: DrainTarget) -> Result<Ticket, BackendError> {
        const OP: &str = "begin drain";
        self.live(OP)?;
        let id = self.agent.id;
        let mut holds = Vec::new();
        let lanes: Vec<Arc<Lane>> = match target {
            DrainTarget::Queue(q) => {
                let lane = self.agent.queue(q).ok_or_else(|| {
                    BackendError::on(self.agent.id, OP)
                        .invalid(format!("queue {q} does not exist on this agent"))
                })?;
                holds.extend(self.stall(&lane, "queue drain", |f| *f == Fault::QueueDrainStuck));
                vec![lane]
            }
            DrainTarget::Agent => {
                let lanes = self.agent.queues.read().clone();
                if let Some(last) = lanes.last() {
                    holds.extend(self.stall(last, "agent drain", |f| *f == Fault::AgentDrainStuck));
                }
                lanes
            }
            DrainTarget::CopyFence => {
                let lane = Arc::clone(&self.agent.copy);
                holds.extend(self.stall(&lane, "copy fence", |f| *f == Fault::CopyFenceStuck));
                vec![lane]
            }
        };
        let mut waits: Vec<(Arc<Lane>, u64)> = lanes
            .into_iter()
            .map(|l| {
                let s = l.submitted();
                (l, s)
            })
            .collect();
        if target == DrainTarget::CopyFence {
            // Copies into this agent's memory on other agents' engines (SPEC §6 step 6: every
            // in-flight copy touching the agent).
            for (lane, seq, hold) in self.agent.foreign_in_flight() {
                waits.push((lane, seq));
                holds.extend(hold);
            }
        }
        self.gpu.invariants.drain_begun(id);
        self.gpu
            .recorder
            .record(Event::DrainBegun { agent: id, target });
        Ok(self.ticket(TicketKind::Drain { target }, waits, holds))
    }

    fn poll_drain(&self, ticket: Ticket, budget: Duration) -> Result<bool, BackendError> {
        let waits = self.waits_of(ticket, "poll drain")?;
        if !self.gpu.poll_waits(&waits, budget) {
            return Ok(false);
        }
        let Some(e) = self.agent.tickets.lock().remove(&ticket.0) else {
            return Ok(true);
        };
        let id = self.agent.id;
        let now = self.gpu.clock.now();
        self.gpu
            .invariants
            .record_wait(id, WaitKind::Drain, e.begun, now, false);
        if let TicketKind::Drain { target } = e.kind {
            if target == DrainTarget::Agent {
                self.gpu.invariants.agent_drained(id);
            }
            self.gpu
                .recorder
                .record(Event::DrainCompleted { agent: id, target });
        }
        Ok(true)
    }

    fn submit_pass(&self, dispatch: &Dispatch, pass: u32) -> Result<Ticket, BackendError> {
        const OP: &str = "submit pass";
        self.live(OP)?;
        let id = self.agent.id;
        if let Some(f) = self.gpu.take_fault(
            id,
            |f| matches!(f, Fault::PassSubmitFail { pass: p } if *p == pass),
        ) {
            return Err(BackendError::on(self.agent.id, OP).error(
                BackendErrorKind::Other,
                format!("injected {f}: the queue refused the packet"),
            ));
        }
        let (kernel, _, _) = self.pending_completion(dispatch, OP)?;
        let kernel = kernel.ok_or_else(|| {
            BackendError::on(self.agent.id, OP).invalid("the submission is not a kernel dispatch")
        })?;
        let lane = self.lane(dispatch, OP)?;
        let pre_hold = self
            .gpu
            .take_fault(
                id,
                |f| matches!(f, Fault::PassStuck { pass: p } if *p == pass),
            )
            .map(|_| self.gpu.new_hold("pass"));
        let hooks = self.gpu.take_faults(id, |f| {
            matches!(f, Fault::FreeDuringPass { pass: p, .. } | Fault::ReallocDuringPass { pass: p, .. } if *p == pass)
        });
        let result = Arc::new(OnceLock::new());
        let work = KernelWork {
            kernel,
            kernarg: dispatch.kernarg.to_vec(),
            grid: dispatch.info.grid,
            workgroup: dispatch.info.workgroup,
            dispatch_id: dispatch.info.dispatch_id,
            handle: dispatch.handle,
            role: Role::Pass(pass),
            completion: None,
            pre_hold: pre_hold.clone(),
            hooks,
            group: self.gpu.counters.selected(id),
            result: Arc::clone(&result),
        };
        let after_launch = self.gpu.take_fault(
            id,
            |f| matches!(f, Fault::PassSubmitAfterLaunch { pass: p } if *p == pass),
        );
        self.order_after_restore(&lane, OP)?;
        let seq = self.push(&lane, Work::Kernel(Box::new(work)), OP)?;
        self.gpu.recorder.record(Event::PassSubmitted {
            agent: id,
            dispatch: dispatch.info.dispatch_id,
            pass,
        });
        if let Some(f) = after_launch {
            // The packet is in the queue and runs; only the call reports failure.
            return Err(BackendError::on(self.agent.id, OP).error(
                BackendErrorKind::AfterSubmit,
                format!("injected {f}: the pass was queued, then the submission failed"),
            ));
        }
        Ok(self.ticket(
            TicketKind::Pass {
                dispatch: dispatch.info.dispatch_id,
                pass,
                result,
            },
            vec![(lane, seq)],
            pre_hold.into_iter().collect(),
        ))
    }

    fn poll_pass(
        &self,
        ticket: Ticket,
        budget: Duration,
    ) -> Result<Option<PassCompletion>, BackendError> {
        let waits = self.waits_of(ticket, "poll pass")?;
        if !self.gpu.poll_waits(&waits, budget) {
            return Ok(None);
        }
        let e = self.agent.tickets.lock().remove(&ticket.0).ok_or_else(|| {
            BackendError::on(self.agent.id, "poll pass").invalid("ticket vanished")
        })?;
        let TicketKind::Pass {
            dispatch,
            pass,
            result,
        } = e.kind
        else {
            return Err(BackendError::on(self.agent.id, "poll pass")
                .invalid(format!("ticket {} is a drain", ticket.0)));
        };
        let id = self.agent.id;
        self.gpu
            .invariants
            .record_wait(id, WaitKind::Pass, e.begun, self.gpu.clock.now(), false);
        self.gpu.recorder.record(Event::PassCompleted {
            agent: id,
            dispatch,
            pass,
        });
        let gpu_seconds = result.get().map(|r| r.gpu_seconds).unwrap_or(0.0);
        Ok(Some(PassCompletion { gpu_seconds }))
    }

    fn abandon(&self, ticket: Ticket) {
        let Some(e) = self.agent.tickets.lock().remove(&ticket.0) else {
            log::warn!(
                "[replay-mock] agent {}: abandon of unknown ticket {}",
                self.agent.id,
                ticket.0
            );
            return;
        };
        let id = self.agent.id;
        let now = self.gpu.clock.now();
        let (kind, event) = match e.kind {
            TicketKind::Drain { target } => {
                (WaitKind::Drain, Event::DrainAbandoned { agent: id, target })
            }
            TicketKind::Pass { dispatch, pass, .. } => (
                WaitKind::Pass,
                Event::PassAbandoned {
                    agent: id,
                    dispatch,
                    pass,
                },
            ),
        };
        self.gpu
            .invariants
            .record_wait(id, kind, e.begun, now, true);
        self.gpu.recorder.record(event);
        // The window gave up: the injected stall ends, so the work still completes.
        for h in &e.holds {
            h.release();
        }
    }

    fn flush_caches(&self) -> Result<(), BackendError> {
        self.live("flush caches")?;
        self.gpu.recorder.record(Event::CacheFlushed {
            agent: self.agent.id,
        });
        Ok(())
    }

    fn submit_ordinary(&self, dispatch: &Dispatch) -> Result<(), BackendError> {
        const OP: &str = "submit dispatch";
        self.live(OP)?;
        let id = self.agent.id;
        if let Some(f) = self
            .gpu
            .take_fault(id, |f| matches!(f, Fault::OrdinarySubmitFail))
        {
            return Err(BackendError::on(self.agent.id, OP).error(
                BackendErrorKind::Other,
                format!("injected {f}: the queue refused the packet"),
            ));
        }
        let (kernel, completion, from_callback) = self.pending_completion(dispatch, OP)?;
        let batch = match self
            .gpu
            .pending
            .lock()
            .get(&dispatch.handle)
            .map(|e| &e.payload)
        {
            Some(Payload::Batch(b)) => Some(b.clone()),
            _ => None,
        };
        let lane = self.lane(dispatch, OP)?;
        self.order_after_restore(&lane, OP)?;
        // Tool work: launched inside a callback on this thread (the core's thread-local), or
        // forwarded from one. The window's own ordinary run (a decline) closes its window.
        let same_thread_tool = replay_core::locks::thread_in_callback();
        let closes = !same_thread_tool && self.gpu.invariants.is_window_thread(id);
        let tool_work = same_thread_tool || (!closes && from_callback);
        let name = kernel
            .as_ref()
            .map(|k| Arc::clone(&k.name))
            .unwrap_or_else(|| Arc::clone(&dispatch.info.kernel_name));
        self.gpu
            .invariants
            .ordinary_submitted(id, &name, dispatch.handle, tool_work, closes);
        if let Some(batch) = batch {
            // One packet per kernel, in order; the last carries the completion (the queue is
            // FIFO, so it fires after all of them).
            let n = batch.len();
            for (i, (kernel, kernarg, grid)) in batch.into_iter().enumerate() {
                let work = KernelWork {
                    workgroup: kernel.workgroup,
                    kernel,
                    kernarg,
                    grid,
                    dispatch_id: dispatch.info.dispatch_id,
                    handle: dispatch.handle,
                    role: Role::Ordinary { tool_work },
                    completion: (i + 1 == n).then(|| Arc::clone(&completion)),
                    pre_hold: None,
                    hooks: Vec::new(),
                    group: self.gpu.counters.selected(id),
                    result: Arc::new(OnceLock::new()),
                };
                self.push(&lane, Work::Kernel(Box::new(work)), OP)?;
            }
            if n == 0 {
                self.push(
                    &lane,
                    Work::Barrier {
                        completion: Some(completion),
                    },
                    OP,
                )?;
            }
            self.gpu.recorder.record(Event::OrdinaryRun {
                agent: id,
                dispatch: dispatch.info.dispatch_id,
                kernel: name,
                tool_work,
            });
            return Ok(());
        }
        let work = match kernel {
            Some(kernel) => Work::Kernel(Box::new(KernelWork {
                kernel,
                kernarg: dispatch.kernarg.to_vec(),
                grid: dispatch.info.grid,
                workgroup: dispatch.info.workgroup,
                dispatch_id: dispatch.info.dispatch_id,
                handle: dispatch.handle,
                role: Role::Ordinary { tool_work },
                completion: Some(completion),
                pre_hold: None,
                hooks: Vec::new(),
                group: self.gpu.counters.selected(id),
                result: Arc::new(OnceLock::new()),
            })),
            None => Work::Barrier {
                completion: Some(completion),
            },
        };
        self.push(&lane, work, OP)?;
        self.gpu.recorder.record(Event::OrdinaryRun {
            agent: id,
            dispatch: dispatch.info.dispatch_id,
            kernel: name,
            tool_work,
        });
        Ok(())
    }

    fn signal_completion(&self, dispatch: &Dispatch) -> Result<(), BackendError> {
        const OP: &str = "signal completion";
        self.live(OP)?;
        let id = self.agent.id;
        let (_, completion, _) = self.pending_completion(dispatch, OP)?;
        let lane = self.lane(dispatch, OP)?;
        self.push(
            &lane,
            Work::Barrier {
                completion: Some(completion),
            },
            OP,
        )?;
        self.gpu.invariants.window_closed(id);
        self.gpu.recorder.record(Event::CompletionSignalled {
            agent: id,
            dispatch: dispatch.info.dispatch_id,
        });
        Ok(())
    }
}
