//! Process-wide state: the driver library, loaded and initialised once per process, and the
//! answer every entry point shares when it cannot be ([`crate::is_available`]).

use std::sync::OnceLock;

use crate::error::{CudaError, Unavailable};
use crate::result;
use crate::sys;

/// Driver API version this backend needs at least (12.0: stream-ordered and VMM calls, the
/// `_v2` entry points it binds).
pub const MIN_DRIVER_VERSION: i32 = 12000;

static INIT: OnceLock<Result<i32, Unavailable>> = OnceLock::new();

/// Loads libcuda and calls `cuInit` once per process; the error says why CUDA is unusable.
/// Returns the number of devices.
pub(crate) fn init() -> Result<i32, Unavailable> {
    INIT.get_or_init(|| {
        // SAFETY: `is_culib_present` only tries `dlopen` on the candidate names and closes
        // what it opened; loading libcuda runs its initialisers, which is what any CUDA program
        // does. Nothing else of the driver is touched before it answers.
        if !unsafe { sys::is_culib_present() } {
            return Err(Unavailable::NoDriverLibrary {
                tried: cudarc::get_lib_name_candidates("cuda"),
            });
        }
        if let Err(e) = result::init() {
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
        match result::device::get_count() {
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
