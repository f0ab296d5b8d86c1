//! The context-life hooks (SPEC §9.2 "Writes the snapshot cannot see, and context life"):
//! `cuDevicePrimaryCtxReset` (both forms) and `cuCtxDestroy` of a primary context forget the
//! device's backend, its tracked memory, streams and modules first ([`forget_device`]); an
//! allocation made while another context is current is not recorded as the primary
//! context's ([`skip_other_context_alloc`]). What is counted and how a primary context is
//! told apart is [`crate::state::context`]'s.

use cudarc::driver::sys::{CUcontext, CUresult};
use replay_core::{AgentId, MemoryClass};

use super::code::forget_functions;
use crate::state::{context, images};
use crate::state::{current_context, current_device, state};

/// Whether the current context is not the primary context of its device.
fn in_other_context() -> bool {
    let Some(d) = current_device() else {
        return false;
    };
    let ctx = current_context();
    let open = state()
        .backend_of(AgentId(d as u64))
        .map(|b| b.device().raw_context());
    !ctx.is_null() && !context::is_primary(ctx, d, open)
}

/// Whether an allocation is not to be recorded because another context is current (counted).
pub(crate) fn skip_other_context_alloc() -> bool {
    let other = in_other_context();
    if other {
        context::count_other_context_alloc();
    }
    other
}

/// Forgets everything of device `ordinal`'s primary context, before the driver resets it
/// (see [`context`]).
fn forget_device(ordinal: i32) {
    let s = state();
    let agent = AgentId(ordinal as u64);
    let backend = s.close_backend(ordinal);
    if let Some(b) = &backend {
        let ctx = b.device().raw_context();
        s.streams
            .lock()
            .retain(|_, q| q.device().raw_context() != ctx);
    }
    // The reset images' own code objects are never reused: their memos cannot be hit again.
    forget_functions(&images::forget_for_reset(agent), None);
    let mut n = 0;
    for r in s.tracker.regions(agent) {
        if s.tracker.record_free(agent, r.base).is_some() {
            n += 1;
        }
        if r.class.contains(MemoryClass::VIRTUAL_MAPPING) {
            s.tracker.record_unmap(r.base, r.size);
        }
    }
    context::note_reset(n);
    // The backend's own streams, events and memory go with it, while the context still lives.
    drop(backend);
}

/// Hook of `cuDevicePrimaryCtxReset_v2` (and `cuDevicePrimaryCtxReset`): the device's state
/// is forgotten first ([`context`]).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_primary_ctx_reset(
    real: unsafe extern "C" fn(std::ffi::c_int) -> CUresult,
    reached: &mut bool,
    dev: std::ffi::c_int,
) -> CUresult {
    forget_device(dev);
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(dev) }
}

/// Hook of `cuCtxDestroy_v2`: a device's primary context is forgotten as by a reset; another
/// context is counted ([`context`]).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_ctx_destroy(
    real: unsafe extern "C" fn(CUcontext) -> CUresult,
    reached: &mut bool,
    ctx: CUcontext,
) -> CUresult {
    let primary = state().device_of_context(ctx);
    context::note_destroy(ctx, primary.is_some());
    if let Some(ordinal) = primary {
        forget_device(ordinal);
    }
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(ctx) }
}
