//! The checked layer, as cudarc's: driver calls whose status codes become `Result`s. It is
//! cudarc's `result` module, re-exported, plus how this crate names a failed call
//! (`DriverCall`) and the checked calls it adds.

use std::ffi::c_void;

pub use cudarc::driver::result::*;

use crate::error::{CudaError, CudaResult};
use crate::sys;

/// Names a failed driver call: `result::foo(..).call("cuFoo")?`.
pub(crate) trait DriverCall<T> {
    fn call(self, name: &'static str) -> CudaResult<T>;
}

impl<T> DriverCall<T> for Result<T, cudarc::driver::DriverError> {
    fn call(self, name: &'static str) -> CudaResult<T> {
        self.map_err(|e| CudaError::driver(name, e))
    }
}

impl DriverCall<()> for sys::CUresult {
    fn call(self, name: &'static str) -> CudaResult<()> {
        self.result().call(name)
    }
}

/// The device address of mapped pinned host memory: what `cuMemHostGetDevicePointer` says,
/// else the host address itself (with unified addressing, which every 64-bit Linux device
/// since Fermi has, pinned host memory is accessible from the device at its host address).
pub(crate) fn mapped_pointer(host: *mut c_void) -> u64 {
    let mut dptr: sys::CUdeviceptr = 0;
    // SAFETY: `host` is a live cuMemHostAlloc allocation of the current context; out pointer
    // to a live local.
    let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dptr, host, 0) };
    match r.result() {
        Ok(()) => dptr,
        Err(e) => {
            log::debug!(
                "[kernel-replay] cuMemHostGetDevicePointer: {e}; using the host address (unified addressing)"
            );
            host as u64
        }
    }
}
