//! The stream and capture hooks (SPEC §6 step 6 drains, §9.2 "Unmodified applications",
//! "Graphs"): streams are registered with the backend, so the agent drain sees them.
//!
//! Every stream `cuStreamCreate` / `cuStreamCreateWithPriority` make, and every stream a
//! launch, copy, memset, graph launch or stream-ordered allocation (or free) is issued on, is
//! registered ([`note_stream`]; one seen before its device's backend opened is registered
//! when it opens, if it belongs to the primary context). `cuStreamDestroy` waits for a window
//! in progress (the write gate), then the stream is forgotten before the driver destroys it.
//! Every begin-capture entry (`cuStreamBeginCapture`, `cuStreamBeginCapture_v2`,
//! `cuStreamBeginCaptureToGraph`, each with its `_ptsz` form) registers the stream and records
//! its pre-capture fence just before the driver's call (on a stream not capturing yet; with
//! the library's own driver calls, in relaxed capture mode); `cuStreamEndCapture` (both forms)
//! and `cuStreamDestroy` drop it. An agent drain waits on that fence for a capturing stream
//! instead of declining ([`crate::queue`], "Pre-capture fence").

use std::ffi::{c_uint, c_void};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult, CUstream};
use replay_core::AgentId;

use super::gate::write_gates;
use crate::queue::{capture_status, Queue};
use crate::state::{current_agent, current_context, current_device, is_special_stream, state};

/// Hook of `cuStreamDestroy_v2`: waits for a window in progress on the current device (the
/// write gate), then the stream is forgotten first, so no drain records on it.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_stream_destroy(
    real: unsafe extern "C" fn(CUstream) -> CUresult,
    reached: &mut bool,
    s: CUstream,
) -> CUresult {
    // Gated: a window in progress may be draining this stream; it is forgotten once the
    // window ended, before the driver destroys it.
    let _gates = write_gates(None);
    let st = state();
    let q = st.streams.lock().remove(&(s as usize));
    st.pending_streams
        .lock()
        .retain(|&(_, p, _)| p != s as usize);
    if let Some(b) = current_agent().and_then(|a| st.backend_of(a)) {
        b.agent().forget_stuck(s);
    }
    if let Some(q) = &q {
        q.drop_capture_fence();
    }
    drop(q);
    st.captures.lock().retain(|&(_, c)| c != s as usize);
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(s) }
}

/// Hook of `cuStreamEndCapture` (and its `_ptsz` form): the stream's capture is over,
/// whatever the call returns, so launches beside it are replayed again (see
/// [`crate::state::InjectState::beside_live_capture`]) and its pre-capture fence is dropped
/// (drains record on the stream again).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_stream_end_capture(
    real: unsafe extern "C" fn(CUstream, *mut sys::CUgraph) -> CUresult,
    reached: &mut bool,
    s: CUstream,
    g: *mut sys::CUgraph,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(s, g) };
    let st = state();
    st.captures.lock().retain(|&(_, c)| c != s as usize);
    let q = st.streams.lock().get(&(s as usize)).cloned();
    if let Some(q) = q {
        // A capture that is still live after the call (the end was refused: another thread's
        // capture, say) keeps its fence.
        if !capture_status(s).map(|c| c.is_live()).unwrap_or(false) {
            q.drop_capture_fence();
        }
    }
    r
}

/// Before the driver's begin-capture call on `s` (registered first: [`note_stream`]): when it
/// is a known stream that does not capture yet, records its pre-capture fence
/// ([`Queue::fence_before_capture`]), which marks all the work enqueued there before the
/// capture. Returns the queue whose fence was recorded. The legacy stream cannot be captured
/// and the per-thread default stream is not a stream the backend registers: neither gets a
/// fence (a drain declines beside a capture of the per-thread stream, which implicates the
/// legacy stream). Nothing is recorded while drains do not wait on fences
/// ([`crate::queue::drain_beside_capture`]): the application's begin-capture call then costs
/// no driver call of ours.
fn fence_before_capture(s: CUstream) -> Option<Arc<Queue>> {
    if is_special_stream(s) || !crate::queue::drain_beside_capture() {
        return None;
    }
    let q = state().streams.lock().get(&(s as usize)).cloned()?;
    // Recording on a stream that already captures would add a node to that capture; its
    // begin-capture call is refused anyway, and the fence of its live capture stays.
    match capture_status(s) {
        Ok(crate::queue::CaptureStatus::None) => {}
        _ => return None,
    }
    match q.fence_before_capture() {
        Ok(()) => Some(q),
        Err(e) => {
            log::debug!(
                "[kernel-replay] the pre-capture fence of stream {:#x}: {e}",
                s as usize
            );
            q.drop_capture_fence();
            None
        }
    }
}

/// A begin-capture hook's body: `s` registered, the pre-capture fence recorded with no drain
/// starting in between ([`crate::queue::capture_begin_lock`]), then the driver's `call`; a
/// capture that did not begin keeps no fence.
fn begin_capture(s: CUstream, reached: &mut bool, call: impl FnOnce() -> CUresult) -> CUresult {
    note_stream(s);
    let _no_drain_starts = crate::queue::capture_begin_lock();
    let q = fence_before_capture(s);
    *reached = true;
    let r = call();
    if let Some(q) = q {
        if r != CUresult::CUDA_SUCCESS {
            q.drop_capture_fence();
        }
    }
    r
}

/// Hook of `cuStreamBeginCapture` and `cuStreamBeginCapture_ptsz` (the CUDA 10.0 form,
/// global mode): the pre-capture fence, then the driver's call ([`fence_before_capture`]).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_stream_begin_capture_v1(
    real: unsafe extern "C" fn(CUstream) -> CUresult,
    reached: &mut bool,
    s: CUstream,
) -> CUresult {
    // SAFETY: forwarded as given.
    begin_capture(s, reached, || unsafe { real(s) })
}

/// Hook of `cuStreamBeginCapture_v2` and its `_ptsz` form: the pre-capture fence, then the
/// driver's call ([`fence_before_capture`]).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_stream_begin_capture(
    real: unsafe extern "C" fn(CUstream, c_uint) -> CUresult,
    reached: &mut bool,
    s: CUstream,
    mode: c_uint,
) -> CUresult {
    // SAFETY: forwarded as given.
    begin_capture(s, reached, || unsafe { real(s, mode) })
}

/// Hook of `cuStreamBeginCaptureToGraph` and its `_ptsz` form: the pre-capture fence, then
/// the driver's call ([`fence_before_capture`]).
///
/// # Safety
/// The entry's contract.
#[allow(clippy::too_many_arguments)] // the driver entry's arguments, as given
pub(crate) unsafe fn hook_stream_begin_capture_to_graph(
    real: unsafe extern "C" fn(
        CUstream,
        sys::CUgraph,
        *const sys::CUgraphNode,
        *const c_void,
        usize,
        c_uint,
    ) -> CUresult,
    reached: &mut bool,
    s: CUstream,
    g: sys::CUgraph,
    deps: *const sys::CUgraphNode,
    data: *const c_void,
    n: usize,
    mode: c_uint,
) -> CUresult {
    // SAFETY: forwarded as given.
    begin_capture(s, reached, || unsafe { real(s, g, deps, data, n, mode) })
}

/// A stream a copy, memset, graph launch or stream-ordered allocation was issued on: registered
/// with the current device's backend (when it is open and the stream belongs to its primary
/// context), so the window's agent drain waits for the work queued there too, not only for
/// streams that carried an intercepted launch. Before the backend is opened the stream is
/// remembered and registered when it opens
/// ([`crate::state::InjectState::adopt_pending_streams`]).
pub(crate) fn note_stream(s: CUstream) {
    if is_special_stream(s) {
        return;
    }
    let st = state();
    if st.streams.lock().contains_key(&(s as usize)) {
        return;
    }
    let Some(d) = current_device() else { return };
    match st.backend_of(AgentId(d as u64)) {
        Some(b) if current_context() == b.device().raw_context() => st.register_stream(&b, s),
        Some(_) => {}
        None => {
            let seen = (d, s as usize, current_context() as usize);
            let mut p = st.pending_streams.lock();
            if !p.contains(&seen) {
                p.push(seen);
            }
        }
    }
}

/// Hook of `cuStreamCreate`: the new stream is registered at once ([`note_stream`]), so work
/// the application queues there through an entry the interception does not wrap is drained
/// too.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_stream_create(
    real: unsafe extern "C" fn(*mut CUstream, c_uint) -> CUresult,
    reached: &mut bool,
    s: *mut CUstream,
    flags: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(s, flags) };
    if r == CUresult::CUDA_SUCCESS && !s.is_null() {
        // SAFETY: the driver wrote the new stream there.
        note_stream(unsafe { *s });
    }
    r
}

/// Hook of `cuStreamCreateWithPriority`: as [`hook_stream_create`].
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_stream_create_with_priority(
    real: unsafe extern "C" fn(*mut CUstream, c_uint, std::ffi::c_int) -> CUresult,
    reached: &mut bool,
    s: *mut CUstream,
    flags: c_uint,
    priority: std::ffi::c_int,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(s, flags, priority) };
    if r == CUresult::CUDA_SUCCESS && !s.is_null() {
        // SAFETY: the driver wrote the new stream there.
        note_stream(unsafe { *s });
    }
    r
}
