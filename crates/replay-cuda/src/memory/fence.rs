//! Fences: a submitted batch's events and what waits on them. New fences, the ordering of a
//! restore on the device ahead of later work (each stream that work runs on waits for the
//! fence's events), and the memory layer's poll, take and abandon of a fence. Apart from the
//! submission so that one file holds every rule on when an event, a gather table or a
//! digest buffer may be reused.

use std::sync::atomic::Ordering;
use std::time::Duration;

use replay_core::{BackendError, BackendErrorKind, DeviceMemory, Digest128, Fence};
use smallvec::SmallVec;

use super::pending::Pending;
use super::CudaMemory;
use crate::device::{wait_events, Event};
use crate::error::CudaResult;
use crate::result::DriverCall;
use crate::sys;

impl CudaMemory {
    /// Makes `stream` wait on the device for every restore ordered and not yet seen complete
    /// (`cuStreamWaitEvent` on each of its fence's events); nothing when none is. Call before
    /// enqueueing work on `stream` (of this device) that reads or writes application memory.
    pub(crate) fn order_stream(&self, stream: sys::CUstream) -> CudaResult<()> {
        // A restore is ordered only by the window's thread, which also submits the work after
        // it; other threads' launches on this agent wait for the window's end at its gate.
        if !self.any_ordered.load(Ordering::Acquire) {
            return Ok(());
        }
        let st = self.state.lock();
        if st.ordered.is_empty() {
            return Ok(());
        }
        self.device.bind()?;
        for (_, events) in &st.ordered {
            for &e in events {
                // SAFETY: `e` is an event of this context that is alive: its entry leaves
                // `ordered` (under this lock) before the event is recycled or destroyed;
                // `stream` is a stream of the current context (the caller bound it).
                unsafe { sys::cuStreamWaitEvent(stream, e, 0) }.call("cuStreamWaitEvent")?;
            }
        }
        Ok(())
    }

    /// [`CudaMemory::order_stream`], or, where the driver refuses, a host wait (bounded by
    /// `timeout`) for the ordered restores: the work after it then still sees restored memory.
    pub(crate) fn order_stream_or_wait(
        &self,
        stream: sys::CUstream,
        timeout: Duration,
    ) -> Result<(), BackendError> {
        const OP: &str = "order after the restore";
        if let Err(e) = self.order_stream(stream) {
            log::warn!(
                "[kernel-replay] agent {}: ordering a stream after the restore failed ({e}); waiting for it on the host",
                self.agent
            );
            if !self.wait_ordered(timeout)? {
                return Err(BackendError::on(self.agent, OP).error(
                    BackendErrorKind::Other,
                    format!(
                        "the restore ordered on the device did not complete within {timeout:?}"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Ordered restores not yet seen complete (tests and diagnostics).
    pub fn ordered_pending(&self) -> usize {
        self.state.lock().ordered.len()
    }

    pub(super) fn new_fence(&self, p: Pending) -> Fence {
        let mut st = self.state.lock();
        st.next_fence += 1;
        let id = st.next_fence;
        st.fences.insert(id, p);
        Fence(id)
    }

    /// Records one event per stream in `streams` (fences for what was enqueued there).
    pub(super) fn fence_events(
        &self,
        streams: &[sys::CUstream],
    ) -> CudaResult<SmallVec<[Event; 4]>> {
        let mut evs = SmallVec::new();
        for &s in streams {
            let e = self.device.event(false)?;
            e.record(s)?;
            evs.push(e);
        }
        Ok(evs)
    }

    /// [`DeviceMemory::order_after`]: later work of the agent waits on the device for the
    /// fence's events, until `poll_fence` sees them complete.
    pub(super) fn order_after_fence(&self, fence: Fence) -> Result<(), BackendError> {
        const OP: &str = "order after fence";
        if !self.ordered_restores() {
            return Err(BackendError::on(self.agent, OP).error(
                BackendErrorKind::Unsupported,
                "restores are set to wait on the host",
            ));
        }
        let mut st = self.state.lock();
        let p = st.fences.get(&fence.0).ok_or_else(|| {
            BackendError::on(self.agent, OP).invalid(format!("unknown fence {}", fence.0))
        })?;
        if p.done || p.events.is_empty() {
            return Ok(());
        }
        let events = p.events.iter().map(Event::raw).collect();
        st.ordered.push((fence.0, events));
        self.any_ordered.store(true, Ordering::Release);
        Ok(())
    }

    /// [`DeviceMemory::wait_ordered`]: waits on the host, within `budget`, for every restore
    /// ordered and not yet seen complete.
    pub(super) fn wait_for_ordered(&self, budget: Duration) -> Result<bool, BackendError> {
        const OP: &str = "wait for the ordered restore";
        let start = std::time::Instant::now();
        self.device
            .bind()
            .map_err(|e| e.to_backend(self.agent, OP))?;
        loop {
            {
                // Queried under the lock: no event of the list is recycled meanwhile.
                let st = self.state.lock();
                let mut all = true;
                for &e in st.ordered.iter().flat_map(|(_, evs)| evs.iter()) {
                    // SAFETY: an alive event of this context (see `State::ordered`).
                    let r = unsafe { sys::cuEventQuery(e) };
                    if r == sys::CUresult::CUDA_ERROR_NOT_READY {
                        all = false;
                        break;
                    }
                    r.call("cuEventQuery")
                        .map_err(|e| e.to_backend(self.agent, OP))?;
                }
                if all {
                    return Ok(true);
                }
            }
            if !crate::device::back_off(start, budget) {
                return Ok(false);
            }
        }
    }

    /// [`DeviceMemory::poll_fence`]: waits within `budget` for the fence's events, then
    /// recycles them and gives its gather table back.
    pub(super) fn poll(&self, fence: Fence, budget: Duration) -> Result<bool, BackendError> {
        const OP: &str = "poll fence";
        // Take the events out so the wait holds no lock (SPEC §6: a wait never holds a lock).
        let (events, is_digest) = {
            let mut st = self.state.lock();
            let p = st.fences.get_mut(&fence.0).ok_or_else(|| {
                BackendError::on(self.agent, OP).invalid(format!("unknown fence {}", fence.0))
            })?;
            if p.done {
                return Ok(true);
            }
            (std::mem::take(&mut p.events), p.digests.is_some())
        };
        let bound = self.device.bind();
        let refs: Vec<&Event> = events.iter().collect();
        let r = bound.and_then(|()| wait_events(&refs, budget));
        let mut st = self.state.lock();
        let done = matches!(r, Ok(true));
        if done {
            // Before its events are recycled: no stream is ordered after them any more.
            st.ordered.retain(|(id, _)| *id != fence.0);
            self.any_ordered
                .store(!st.ordered.is_empty(), Ordering::Release);
        }
        match st.fences.get_mut(&fence.0) {
            Some(p) if done => {
                p.done = true;
                let table = p.table.take();
                if let Some((a, b, gathered, called, bytes)) = p.timing.take() {
                    if let Ok(ms) = Event::elapsed_ms(&a, &b) {
                        log::trace!(
                            "[kernel-replay] copy batch: {gathered} gathered, {called} by call, {bytes} bytes: {:.1} us on the device lane",
                            ms * 1000.0
                        );
                    }
                }
                drop(refs);
                for e in events {
                    self.device.recycle_event(e);
                }
                if !is_digest {
                    st.fences.remove(&fence.0);
                }
                if let Some(t) = table {
                    Self::give_table(&mut st, t);
                }
            }
            Some(p) => p.events = events,
            None => {} // abandoned meanwhile: the events drop (destroyed when done)
        }
        r.map_err(|e| e.to_backend(self.agent, OP))
    }

    /// [`DeviceMemory::take_digests`]: a completed digest batch's results; its buffers go
    /// back to the pool.
    pub(super) fn take_fence_digests(&self, fence: Fence) -> Result<Vec<Digest128>, BackendError> {
        const OP: &str = "take digests";
        let p = {
            let mut st = self.state.lock();
            match st.fences.get(&fence.0) {
                Some(p) if p.done && p.digests.is_some() => {}
                Some(_) => {
                    return Err(BackendError::on(self.agent, OP)
                        .invalid(format!("fence {} is not a completed digest batch", fence.0)))
                }
                None => {
                    return Err(BackendError::on(self.agent, OP)
                        .invalid(format!("unknown fence {}", fence.0)))
                }
            }
            st.fences.remove(&fence.0).expect("checked above")
        };
        let job = p.digests.expect("checked above");
        let (out, scratch, staging) = job.finish();
        if let Some(scratch) = scratch {
            self.give_scratch(scratch);
        }
        if let Some(staging) = staging {
            self.state.lock().deferred_staging.push(staging);
        }
        Ok(out)
    }

    /// [`DeviceMemory::abandon_fence`]: forgets the fence, leaking what the device may still
    /// read or write.
    pub(super) fn abandon(&self, fence: Fence) {
        let p = {
            let mut st = self.state.lock();
            st.ordered.retain(|(id, _)| *id != fence.0);
            self.any_ordered
                .store(!st.ordered.is_empty(), Ordering::Release);
            st.fences.remove(&fence.0)
        };
        if let Some(mut p) = p {
            if let Some(t) = p.table.take() {
                // The device may still read it: leak, never reuse.
                std::mem::forget(t);
            }
            if let Some(mut job) = p.digests {
                // The device may still write them: leak, never reuse (as the memory layer does
                // with backing blocks of an abandoned copy).
                if let Some(s) = job.scratch.take() {
                    std::mem::forget(s);
                }
                if let Some(s) = job.staging.take() {
                    std::mem::forget(s);
                }
            }
            // Events of an incomplete batch are destroyed; the driver releases them when done.
        }
    }
}
