//! Errors of the CUDA backend, and their mapping onto the core's [`BackendError`].

use crate::sys;
use replay_core::{AgentId, BackendError, BackendErrorKind};

/// Why CUDA cannot be used in this process (see [`crate::is_available`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The driver library could not be loaded.
    #[error("the CUDA driver library (libcuda) could not be loaded; tried {tried:?}. Is an NVIDIA driver installed, and is its directory on the loader path?")]
    NoDriverLibrary {
        /// The names the loader was asked for.
        tried: Vec<String>,
    },
    /// `cuInit` failed (no device, driver too old, insufficient permissions, ...).
    #[error("cuInit failed: {name}: {description}")]
    InitFailed {
        /// The driver's name of the error, e.g. `CUDA_ERROR_NO_DEVICE`.
        name: String,
        /// The driver's description.
        description: String,
    },
    /// The driver loaded but reports no device.
    #[error("the CUDA driver reports no device")]
    NoDevice,
    /// The driver is older than the CUDA 12.0 API this backend calls.
    #[error("the CUDA driver supports API version {version}; this backend needs 12000 or later")]
    DriverTooOld {
        /// `cuDriverGetVersion`.
        version: i32,
    },
}

/// NVRTC could not be loaded (device digests then fall back to host digests).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NVRTC (libnvrtc) could not be loaded; tried {tried:?} on the loader path and in {dirs:?}. Put the CUDA installation's lib64 on LD_LIBRARY_PATH or set CUDA_HOME")]
pub struct NvrtcUnavailable {
    /// Library names asked for.
    pub tried: Vec<String>,
    /// Directories searched by absolute path.
    pub dirs: Vec<String>,
}

/// An error of the CUDA backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// CUDA cannot be used at all.
    #[error("CUDA is not available: {0}")]
    Unavailable(#[from] Unavailable),
    /// A driver call failed.
    #[error("{call} failed: {name} ({code}): {description}")]
    Driver {
        /// The driver entry point.
        call: &'static str,
        /// `CUresult` value.
        code: u32,
        /// Its name, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
        name: String,
        /// The driver's description.
        description: String,
    },
    /// NVRTC is missing.
    #[error(transparent)]
    NvrtcUnavailable(#[from] NvrtcUnavailable),
    /// NVRTC rejected a program.
    #[error("NVRTC could not compile {program}: {message}\n{log}")]
    Compile {
        /// Program name.
        program: String,
        /// NVRTC's status.
        message: String,
        /// The compiler log.
        log: String,
    },
    /// An image handed to the module loader is not a usable cubin.
    #[error("cubin image: {0}")]
    Elf(#[from] crate::module::elf::ElfError),
    /// The caller passed something this backend does not accept (a programming error).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Host memory for a pageable backing block could not be allocated.
    #[error("host allocation of {bytes} bytes failed")]
    HostOutOfMemory {
        /// Bytes asked for.
        bytes: u64,
    },
}

impl CudaError {
    /// Builds the error of a failed driver call.
    pub fn driver(call: &'static str, e: cudarc::driver::DriverError) -> Self {
        let name = e
            .error_name()
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("CUresult {}", e.0 as u32));
        let description = e
            .error_string()
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self::Driver {
            call,
            code: e.0 as u32,
            name,
            description,
        }
    }

    /// Whether this is the driver's out-of-memory error.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Self::Driver { code, .. } if *code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY as u32)
            || matches!(self, Self::HostOutOfMemory { .. })
    }

    /// The category the window acts on. The driver's sticky errors (a fault in a kernel, the
    /// driver's teardown at exit: every later call in the context fails the same way) are
    /// `DeviceLost`, so the window skips a restore instead of aborting on it.
    pub fn kind(&self) -> BackendErrorKind {
        match self {
            Self::Unavailable(_) | Self::NvrtcUnavailable(_) => BackendErrorKind::Unsupported,
            Self::HostOutOfMemory { .. } => BackendErrorKind::OutOfMemory,
            Self::InvalidArgument(_) | Self::Elf(_) | Self::Compile { .. } => {
                BackendErrorKind::InvalidArgument
            }
            Self::Driver { code, .. } => {
                use sys::CUresult as R;
                let c = *code;
                if c == R::CUDA_ERROR_OUT_OF_MEMORY as u32 {
                    BackendErrorKind::OutOfMemory
                } else if c == R::CUDA_ERROR_INVALID_VALUE as u32
                    || c == R::CUDA_ERROR_INVALID_HANDLE as u32
                {
                    BackendErrorKind::InvalidArgument
                } else if c == R::CUDA_ERROR_ILLEGAL_ADDRESS as u32
                    || c == R::CUDA_ERROR_LAUNCH_FAILED as u32
                    || c == R::CUDA_ERROR_ECC_UNCORRECTABLE as u32
                    || c == R::CUDA_ERROR_HARDWARE_STACK_ERROR as u32
                    || c == R::CUDA_ERROR_ILLEGAL_INSTRUCTION as u32
                    || c == R::CUDA_ERROR_MISALIGNED_ADDRESS as u32
                    || c == R::CUDA_ERROR_INVALID_ADDRESS_SPACE as u32
                    || c == R::CUDA_ERROR_INVALID_PC as u32
                    || c == R::CUDA_ERROR_ASSERT as u32
                    || c == R::CUDA_ERROR_LAUNCH_TIMEOUT as u32
                    || c == R::CUDA_ERROR_DEINITIALIZED as u32
                    || c == R::CUDA_ERROR_CONTEXT_IS_DESTROYED as u32
                {
                    BackendErrorKind::DeviceLost
                } else if c == R::CUDA_ERROR_NOT_SUPPORTED as u32 {
                    BackendErrorKind::Unsupported
                } else {
                    BackendErrorKind::Other
                }
            }
        }
    }

    /// The core's error for `operation` on `agent`.
    pub fn to_backend(&self, agent: AgentId, operation: &'static str) -> BackendError {
        BackendError::on(agent, operation).error(self.kind(), self.to_string())
    }
}

/// `Result` with [`CudaError`].
pub type CudaResult<T> = Result<T, CudaError>;
