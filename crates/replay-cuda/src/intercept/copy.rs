//! The gated copy and memset hooks (SPEC §6 step 4, §9.2 "Unmodified applications"): 1D,
//! 2D, 3D and peer copies and memsets (see [`crate::intercept`] for the list of entries) run
//! once under the agent's write gate, counted (`gated_writes`), so one issued on another
//! thread while a window is open waits for it and no restore undoes it.
//!
//! - **Peer and UVA copies** take the write gate of the destination's agent too, when the
//!   destination is tracked memory of another device than the current context's
//!   ([`write_gates`]): a 2D / 3D descriptor's destination is read from it ([`gated_desc`]).
//! - The stream a copy or memset is issued on is registered first ([`note_stream`]), so the
//!   agent drain waits for work queued there.

use std::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering;

use cudarc::driver::sys::{self, CUcontext, CUdeviceptr, CUresult, CUstream};

use super::gate::write_gates;
use super::stream::note_stream;
use crate::state::state;

/// Which copy descriptor a 2D / 3D copy entry takes: `CUDA_MEMCPY2D`.
pub(crate) const DESC_2D: u8 = 0;

/// `CUDA_MEMCPY3D`.
pub(crate) const DESC_3D: u8 = 1;

/// `CUDA_MEMCPY3D_PEER`.
pub(crate) const DESC_3D_PEER: u8 = 2;

/// The destination address a copy descriptor of kind `D` names (its host or device address
/// by its memory type; `None` for an array or an unknown type), for [`write_gates`].
///
/// # Safety
/// `p` is null or a valid descriptor of kind `D` (the entry's contract).
unsafe fn desc_dst<const D: u8>(p: *const c_void) -> Option<u64> {
    if p.is_null() {
        return None;
    }
    macro_rules! dst {
        ($t:ty) => {{
            let q = p.cast::<$t>();
            // SAFETY: the caller's contract; the memory type is read as the C enum's integer,
            // so a value this code does not know is no invalid Rust enum.
            let ty = unsafe { std::ptr::addr_of!((*q).dstMemoryType).cast::<u32>().read() };
            match ty {
                // SAFETY: as above; plain fields of a valid descriptor.
                1 => Some(unsafe { (*q).dstHost } as u64),
                // SAFETY: as above.
                2 | 4 => Some(unsafe { (*q).dstDevice }),
                _ => None,
            }
        }};
    }
    match D {
        DESC_2D => dst!(sys::CUDA_MEMCPY2D),
        DESC_3D => dst!(sys::CUDA_MEMCPY3D),
        _ => dst!(sys::CUDA_MEMCPY3D_PEER),
    }
}

/// Gated forward of a 2D / 3D / 3D-peer copy (`D`: its descriptor), gated on the
/// destination's agent too ([`write_gates`]).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn gated_desc<const D: u8>(
    real: unsafe extern "C" fn(*const c_void) -> CUresult,
    reached: &mut bool,
    p: *const c_void,
) -> CUresult {
    // SAFETY: the entry's contract: `p` is its descriptor.
    let _gates = write_gates(unsafe { desc_dst::<D>(p) });
    state()
        .counters
        .gated_writes
        .fetch_add(1, Ordering::Relaxed);
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(p) }
}

/// [`gated_desc`] of the stream-ordered forms; the stream is registered ([`note_stream`]).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn gated_desc_async<const D: u8>(
    real: unsafe extern "C" fn(*const c_void, CUstream) -> CUresult,
    reached: &mut bool,
    p: *const c_void,
    s: CUstream,
) -> CUresult {
    note_stream(s);
    // SAFETY: the entry's contract: `p` is its descriptor.
    let _gates = write_gates(unsafe { desc_dst::<D>(p) });
    state()
        .counters
        .gated_writes
        .fetch_add(1, Ordering::Relaxed);
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(p, s) }
}

/// Hooks that run a copy or memset once under the write gates ([`write_gates`]); the stream
/// it is issued on is registered first ([`note_stream`]).
macro_rules! gated {
    ($( $hook:ident ( $($a:ident : $t:ty),* ) $(to $d:ident)? $(on $s:ident)?; )*) => {$(
        #[doc = concat!("Gated forward (`", stringify!($hook), "`).")]
        ///
        /// # Safety
        /// The entry's contract.
        #[allow(clippy::too_many_arguments)]
        pub(crate) unsafe fn $hook(
            real: unsafe extern "C" fn($($t),*) -> CUresult,
            reached: &mut bool,
            $($a: $t),*
        ) -> CUresult {
            $( note_stream($s); )?
            #[allow(unused_mut, unused_assignments)]
            let mut dst: Option<u64> = None;
            $( dst = Some($d as u64); )?
            let _gates = write_gates(dst);
            state().counters.gated_writes.fetch_add(1, Ordering::Relaxed);
            *reached = true;
            // SAFETY: forwarded as given.
            unsafe { real($($a),*) }
        }
    )*};
}

gated! {
    gated_copy(d: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) to d on s;
    gated_htod(d: CUdeviceptr, src: *const c_void, n: usize, s: CUstream) to d on s;
    gated_dtoh(d: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream) on s;
    gated_memset8(d: CUdeviceptr, v: u8, n: usize, s: CUstream) to d on s;
    gated_memset32(d: CUdeviceptr, v: c_uint, n: usize, s: CUstream) to d on s;
    gated_copy_sync(d: CUdeviceptr, src: CUdeviceptr, n: usize) to d;
    gated_htod_sync(d: CUdeviceptr, src: *const c_void, n: usize) to d;
    gated_dtoh_sync(d: *mut c_void, src: CUdeviceptr, n: usize);
    gated_memset8_sync(d: CUdeviceptr, v: u8, n: usize) to d;
    gated_memset32_sync(d: CUdeviceptr, v: c_uint, n: usize) to d;
    gated_peer(d: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize) to d;
    gated_peer_async(d: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize, s: CUstream) to d on s;
    gated_memset16(d: CUdeviceptr, v: u16, n: usize, s: CUstream) to d on s;
    gated_memset16_sync(d: CUdeviceptr, v: u16, n: usize) to d;
    gated_memset2d8(d: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize, s: CUstream) to d on s;
    gated_memset2d16(d: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize, s: CUstream) to d on s;
    gated_memset2d32(d: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize, s: CUstream) to d on s;
    gated_memset2d8_sync(d: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize) to d;
    gated_memset2d16_sync(d: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize) to d;
    gated_memset2d32_sync(d: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize) to d;
}
