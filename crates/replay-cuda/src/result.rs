//! The checked layer, as cudarc's: driver calls whose status codes become `Result`s. It is
//! cudarc's `result` module, re-exported, plus how this crate names a failed call
//! (`DriverCall`) and the checked calls it adds, and the driver library loaded and initialised
//! once per process ([`init_driver`]: the answer every entry point shares when it cannot be,
//! [`crate::is_available`]).

use std::ffi::c_void;
use std::sync::OnceLock;

pub use cudarc::driver::result::*;

use crate::error::{CudaError, CudaResult, Unavailable};
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

/// Driver API version this backend needs at least (12.0: stream-ordered and VMM calls, the
/// `_v2` entry points it binds).
pub const MIN_DRIVER_VERSION: i32 = 12000;

static INIT: OnceLock<Result<i32, Unavailable>> = OnceLock::new();

/// Loads libcuda and calls `cuInit` once per process; the error says why CUDA is unusable.
/// Returns the number of devices.
pub(crate) fn init_driver() -> Result<i32, Unavailable> {
    INIT.get_or_init(|| {
        // SAFETY: `is_culib_present` only tries `dlopen` on the candidate names and closes
        // what it opened; loading libcuda runs its initialisers, which is what any CUDA program
        // does. Nothing else of the driver is touched before it answers.
        if !unsafe { sys::is_culib_present() } {
            return Err(Unavailable::NoDriverLibrary {
                tried: cudarc::get_lib_name_candidates("cuda"),
            });
        }
        if let Err(e) = cudarc::driver::result::init() {
            let err = CudaError::driver("cuInit", e);
            return Err(match err {
                CudaError::Driver {
                    name, description, ..
                } => Unavailable::InitFailed { name, description },
                other => Unavailable::InitFailed {
                    name: other.to_string(),
                    description: String::new(),
                },
            });
        }
        let mut version: i32 = 0;
        // SAFETY: the library is loaded and initialised; the out pointer is a live local.
        let r = unsafe { sys::cuDriverGetVersion(&mut version) };
        if r.result().is_ok() && version < MIN_DRIVER_VERSION {
            return Err(Unavailable::DriverTooOld { version });
        }
        match cudarc::driver::result::device::get_count() {
            Ok(n) if n > 0 => Ok(n),
            Ok(_) => Err(Unavailable::NoDevice),
            Err(e) => {
                let err = CudaError::driver("cuDeviceGetCount", e);
                Err(Unavailable::InitFailed {
                    name: err.to_string(),
                    description: String::new(),
                })
            }
        }
    })
    .clone()
}
