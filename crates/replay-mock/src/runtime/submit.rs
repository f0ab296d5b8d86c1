//! The runtime's submissions (SPEC §6, §9.1): kernel dispatches, multi-kernel batches,
//! barriers and copies on queues, launches forwarded to the runtime's own thread, and
//! asynchronous copies on an agent's copy engine.
//!
//! - [`SimRuntime::dispatch`] builds a [`Dispatch`] (kernel key, argument block, reserved
//!   completion) and calls [`ReplayService::submit`] on the calling thread, as an intercepted
//!   launch does; without a service (or with an inactive one) the dispatch just runs.
//! - [`SimRuntime::dispatch_forwarded`] hands the submission to the runtime's own thread, which
//!   calls the service with [`Origin::RuntimeThread`] (SPEC §9.1: doorbells rung from inside an
//!   interceptor are deferred to the runtime's thread). From inside a tool callback this is
//!   tool work recognised by the core's per-agent marker.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use replay_core::{
    AgentId, BackendError, Dim3, Dispatch, DispatchInfo, DispatchReport, KernelId, KernelKey,
    Origin, OutcomeRecord, ReplayService, SubmissionKind,
};
use replay_memory::MemoryEngine;
use smallvec::SmallVec;

use super::{Completion, Forward, Forwarder, QueueRef, ReportSlot, SimRuntime};
use crate::agent::SimAgent;
use crate::error::SimError;
use crate::expect::Event;
use crate::fault::Fault;
use crate::heap::agent_of;
use crate::kernel::Kernel;
use crate::queue::{Signal, Work};
use crate::state::{ForeignCopy, GpuShared, Payload, Pending};

impl SimRuntime {
    fn prepare(
        &self,
        queue: QueueRef,
        payload: Payload,
        args: &[u8],
        grid: Dim3,
        origin: Origin,
    ) -> Result<(Dispatch, Completion), SimError> {
        let sh = self.shared();
        if sh.is_shut_down() {
            return Err(SimError::Shutdown);
        }
        let a = sh.agent_or_err(queue.agent)?;
        if a.queue(queue.queue).is_none() {
            return Err(SimError::UnknownQueue {
                agent: queue.agent,
                queue: queue.queue,
            });
        }
        let handle = sh.next_id();
        let signal = Signal::new();
        let (kind, info_kernel) = match &payload {
            Payload::Kernel(k) => (SubmissionKind::KernelDispatch, Some(k.clone())),
            Payload::Barrier => (SubmissionKind::Barrier, None),
            Payload::Batch(_) => (SubmissionKind::MultiPacket, None),
        };
        let name: Arc<str> = match (&info_kernel, &payload) {
            (Some(k), _) => Arc::clone(&k.name),
            (None, Payload::Batch(_)) => Arc::from("<batch>"),
            (None, _) => Arc::from("<barrier>"),
        };
        // The runtime copies the argument block into its kernarg pool, as HSA runtimes do.
        if let Some(pool) = &a.kernarg {
            if !args.is_empty() && (args.len() as u64) <= pool.size {
                let len = args.len() as u64;
                let at = {
                    let mut c = pool.cursor.lock();
                    if *c + len > pool.size {
                        *c = 0;
                    }
                    let at = pool.base + *c;
                    *c = (*c + len).div_ceil(64) * 64;
                    at
                };
                let _ = sh.device_write(queue.agent, at, args, true);
            }
        }
        let info = match &info_kernel {
            Some(k) => DispatchInfo::new(
                queue.agent,
                queue.queue,
                k.id(),
                Arc::clone(&name),
                grid,
                k.workgroup,
            )
            .with_private_segment_size(k.private_segment_size)
            .with_group_segment_size(k.group_segment_size),
            None => DispatchInfo::new(
                queue.agent,
                queue.queue,
                KernelId(0),
                Arc::clone(&name),
                grid,
                Dim3::default(),
            ),
        };
        let kernel = info_kernel
            .as_ref()
            .map(|k| k.key(queue.agent))
            .unwrap_or(KernelKey {
                agent: queue.agent,
                code_object: 0,
                symbol: 0,
            });
        sh.pending.lock().insert(
            handle,
            Pending {
                payload,
                completion: Arc::clone(&signal),
                from_callback: replay_core::locks::thread_in_callback(),
            },
        );
        sh.invariants
            .track_completion(queue.agent, name, handle, Arc::clone(&signal));
        let dispatch = Dispatch {
            info,
            kernel,
            kind,
            kernarg: SmallVec::from_slice(args),
            arg_layout: Default::default(),
            origin,
            handle,
        };
        let completion = Completion {
            signal,
            gpu: Arc::clone(sh),
            report: Arc::new(OnceLock::new()),
            agent: queue.agent,
            queue: Some(queue.queue),
            handle,
        };
        Ok((dispatch, completion))
    }

    /// The [`Dispatch`] that [`SimRuntime::dispatch`] would hand to the service, and its
    /// completion, without submitting it: for driving a [`SimAgent`] directly (the agent finds
    /// the kernel and the completion through `Dispatch::handle`). Release it with
    /// [`SimRuntime::forget_dispatch`] when done.
    pub fn make_dispatch(
        &self,
        queue: QueueRef,
        kernel: &Kernel,
        args: &[u8],
        grid: Dim3,
        origin: Origin,
    ) -> Result<(Dispatch, Completion), SimError> {
        let (d, c) = self.prepare(queue, Payload::Kernel(kernel.clone()), args, grid, origin)?;
        let _ = c.report.set(Ok(None));
        Ok((d, c))
    }

    /// Forgets a dispatch made by [`SimRuntime::make_dispatch`] (the agent no longer knows its
    /// handle). If it never completed, it is no longer counted by the invariant checker.
    pub fn forget_dispatch(&self, completion: &Completion) {
        self.shared().pending.lock().remove(&completion.handle);
        if !completion.is_done() {
            self.shared()
                .invariants
                .untrack_completion(completion.handle);
        }
    }

    fn submit_now(
        gpu: &GpuShared,
        agent: &SimAgent,
        engine: &MemoryEngine,
        service: Option<&ReplayService>,
        dispatch: Dispatch,
    ) -> Result<Option<OutcomeRecord>, BackendError> {
        match Self::try_submit(gpu, agent, engine, service, dispatch) {
            Ok(Some(r)) => Ok(r),
            // Only forwarded submissions are deferred, and those go through the runtime thread.
            Ok(None) => Err(BackendError::on(replay_core::Agent::id(agent), "submit")
                .invalid("a submission from the submitting thread was deferred")),
            Err(e) => Err(e),
        }
    }

    /// Submits through the service; `Ok(None)` when the service deferred it (a forwarded
    /// submission while a window holds the agent): the caller resubmits it later.
    fn try_submit(
        gpu: &GpuShared,
        agent: &SimAgent,
        engine: &MemoryEngine,
        service: Option<&ReplayService>,
        dispatch: Dispatch,
    ) -> Result<Option<Option<OutcomeRecord>>, BackendError> {
        use replay_core::Agent as _;
        let handle = dispatch.handle;
        let r = match service {
            Some(s) => match s.submit(agent, engine, dispatch)? {
                DispatchReport { deferred: true, .. } => return Ok(None),
                DispatchReport { record, .. } => Ok(record),
            },
            None => agent.submit_ordinary(&dispatch).map(|()| None),
        };
        gpu.pending.lock().remove(&handle);
        if r.is_err() {
            gpu.invariants.untrack_completion(handle);
        }
        r.map(Some)
    }

    fn launch(
        &self,
        queue: QueueRef,
        payload: Payload,
        args: &[u8],
        grid: Dim3,
    ) -> Result<Completion, SimError> {
        let (dispatch, completion) =
            self.prepare(queue, payload, args, grid, Origin::SubmittingThread)?;
        let agent = self.agent(queue.agent);
        let engine = self.engine(queue.agent);
        let service = self.service();
        let r = Self::submit_now(self.shared(), &agent, &engine, service.as_deref(), dispatch);
        let _ = completion.report.set(r.clone());
        r?;
        self.release_idle(queue.agent);
        Ok(completion)
    }

    /// Launches `kernel` on `queue` with argument block `args` over `grid` work-items, through
    /// the replay service on this thread. Returns when the service is done with it (after
    /// the whole replay window, if there was one); the kernel completes asynchronously.
    pub fn dispatch(
        &self,
        queue: QueueRef,
        kernel: &Kernel,
        args: &[u8],
        grid: Dim3,
    ) -> Result<Completion, SimError> {
        self.launch(queue, Payload::Kernel(kernel.clone()), args, grid)
    }

    /// An application's host-to-device copy on a queue (`hipMemcpyAsync` on a stream): a
    /// [`SubmissionKind::Copy`] submission, which the service runs once under the agent's
    /// reader lock, so it never lands inside a replay window. Executes in queue order.
    pub fn write_async(
        &self,
        queue: QueueRef,
        addr: u64,
        data: &[u8],
    ) -> Result<Completion, SimError> {
        let data: Arc<[u8]> = Arc::from(data);
        let copy = Kernel::new("<host-to-device copy>", move |ctx| {
            ctx.write(addr, &data)?;
            Ok(())
        });
        let (dispatch, completion) = self.prepare(
            queue,
            Payload::Kernel(copy),
            &[],
            Dim3::new(1, 1, 1),
            Origin::SubmittingThread,
        )?;
        let dispatch = Dispatch {
            kind: SubmissionKind::Copy,
            ..dispatch
        };
        let agent = self.agent(queue.agent);
        let engine = self.engine(queue.agent);
        let service = self.service();
        let r = Self::submit_now(self.shared(), &agent, &engine, service.as_deref(), dispatch);
        let _ = completion.report.set(r.clone());
        r?;
        Ok(completion)
    }

    /// Several kernel dispatches in one submission on `queue` (as an HSA runtime hands an
    /// interceptor every packet of one doorbell): a [`SubmissionKind::MultiPacket`] submission,
    /// never replayed, which the service runs once under the agent's reader side. The kernels
    /// run in order; the completion fires after the last.
    pub fn dispatch_batch(
        &self,
        queue: QueueRef,
        kernels: &[(&Kernel, &[u8], Dim3)],
    ) -> Result<Completion, SimError> {
        let batch = kernels
            .iter()
            .map(|(k, a, g)| ((*k).clone(), a.to_vec(), *g))
            .collect();
        self.launch(queue, Payload::Batch(batch), &[], Dim3::new(1, 1, 1))
    }

    /// A barrier submission (not a replay candidate: it runs once).
    pub fn barrier(&self, queue: QueueRef) -> Result<Completion, SimError> {
        self.launch(queue, Payload::Barrier, &[], Dim3::default())
    }

    /// Hands the launch to the runtime's own thread, which calls the service with
    /// [`Origin::RuntimeThread`]. Returns at once; [`Completion::wait_submitted`] waits for the
    /// hand-over. Launched from inside a tool callback, it is tool work as long as the callback
    /// is still running when the runtime thread submits it (wait for it inside the callback).
    /// Like the HSA runtime's single async thread, the runtime thread submits one launch at a
    /// time: a forwarded ordinary launch blocked by a replay window delays those behind it.
    pub fn dispatch_forwarded(
        &self,
        queue: QueueRef,
        kernel: &Kernel,
        args: &[u8],
        grid: Dim3,
    ) -> Result<Completion, SimError> {
        // The simulated runtime knows whether a tool callback launched it, as a runtime that
        // tags packets written from callback threads would.
        let origin = if replay_core::locks::thread_in_callback() {
            Origin::ForwardedToolWork
        } else {
            Origin::ForwardedApplication
        };
        let (dispatch, completion) =
            self.prepare(queue, Payload::Kernel(kernel.clone()), args, grid, origin)?;
        let fwd = Forward {
            agent: self.agent(queue.agent),
            engine: self.engine(queue.agent),
            service: self.service(),
            dispatch,
            report: Arc::clone(&completion.report),
        };
        let mut f = self.inner.forwarder.lock();
        if f.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<Forward>();
            let gpu = Arc::clone(self.shared());
            let thread = std::thread::Builder::new()
                .name("sim-runtime".into())
                .spawn(move || {
                    // Like the HSA runtime's async thread, it never blocks on a replay window:
                    // a deferred launch waits here, in order, while later work (tool work
                    // launched from that window's callbacks among it) goes on.
                    let mut deferred: std::collections::VecDeque<Forward> = Default::default();
                    loop {
                        let next = if deferred.is_empty() {
                            match rx.recv() {
                                Ok(w) => Some(w),
                                Err(_) => break,
                            }
                        } else {
                            match rx.recv_timeout(Duration::from_micros(200)) {
                                Ok(w) => Some(w),
                                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
                                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
                            }
                        };
                        let mut work: Vec<Forward> = Vec::new();
                        // Retry the oldest deferred launches first, keeping their order.
                        work.extend(deferred.drain(..));
                        work.extend(next);
                        for w in work {
                            let blocked_queue = deferred.iter().any(|d| {
                                d.dispatch.info.queue == w.dispatch.info.queue
                                    && d.dispatch.info.agent == w.dispatch.info.agent
                            });
                            if blocked_queue && w.dispatch.origin != Origin::ForwardedToolWork {
                                // Keep queue order behind an earlier deferred launch.
                                deferred.push_back(w);
                                continue;
                            }
                            match Self::try_submit(
                                &gpu,
                                &w.agent,
                                &w.engine,
                                w.service.as_deref(),
                                w.dispatch.clone(),
                            ) {
                                Ok(None) => deferred.push_back(w),
                                Ok(Some(r)) => {
                                    let _ = w.report.set(Ok(r));
                                    gpu.progress.notify();
                                }
                                Err(e) => {
                                    let _ = w.report.set(Err(e));
                                    gpu.progress.notify();
                                }
                            }
                        }
                        if deferred.is_empty() && gpu.is_shut_down() {
                            break;
                        }
                    }
                })
                .expect("spawn the simulated runtime thread");
            let id = thread.thread().id();
            *f = Some(Forwarder { tx, thread, id });
        }
        let sent = f.as_ref().map(|f| f.tx.send(fwd).is_ok()).unwrap_or(false);
        drop(f);
        if !sent {
            self.shared().pending.lock().remove(&completion.handle);
            self.shared()
                .invariants
                .untrack_completion(completion.handle);
            return Err(SimError::Shutdown);
        }
        Ok(completion)
    }

    /// An application's asynchronous copy of `len` bytes on `agent`'s copy engine (what the
    /// window's copy fence waits for). It takes the reader side of the gate of the agent that
    /// owns `dst` across its submission, so while a window is open there it waits for the
    /// window's end; from inside a tool callback it is submitted at once.
    pub fn copy_async(
        &self,
        agent: AgentId,
        dst: u64,
        src: u64,
        len: u64,
    ) -> Result<Completion, SimError> {
        let sh = self.shared();
        let a = sh.agent_or_err(agent)?;
        // The agent whose memory it writes; held across the submission (SPEC §6 step 4).
        let written = agent_of(dst).unwrap_or(agent);
        let _gate = self.write_gate(written);
        let signal = Signal::new();
        let handle = sh.next_id();
        sh.invariants
            .track_completion(agent, Arc::from("<copy>"), handle, Arc::clone(&signal));
        let hold = sh
            .take_fault(agent, |f| *f == Fault::AppCopyStuck)
            .map(|_| {
                let h = sh.new_hold("application copy");
                let _ = a.copy.push(Work::Hold(Arc::clone(&h)));
                h
            });
        let seq = a
            .copy
            .push(Work::AppCopy {
                dst,
                src,
                len,
                completion: Arc::clone(&signal),
            })
            .ok_or(SimError::Shutdown)?;
        // Another agent's engine is not in the written agent's copy fence by itself; a held
        // copy is recorded too, so a fence that gives up on it releases it.
        if written != agent || hold.is_some() {
            if let Some(w) = sh.agent_shared(written) {
                w.foreign_copies.lock().push(ForeignCopy {
                    lane: Arc::clone(&a.copy),
                    seq,
                    hold,
                });
            }
        }
        sh.recorder.record(Event::AppCopy { agent, bytes: len });
        let report: ReportSlot = Arc::new(OnceLock::new());
        let _ = report.set(Ok(None));
        Ok(Completion {
            signal,
            gpu: Arc::clone(sh),
            report,
            agent,
            queue: None,
            handle,
        })
    }
}
