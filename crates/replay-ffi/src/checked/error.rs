//! The checked layer's errors (SPEC §10): every way a call of the C ABI can
//! fail, the status code each maps to, and the message `kreplay_last_error` shows.

use std::fmt;

use replay_context::RegistryError;
use replay_core::{ContextError, PolicyError, ServiceError};

use crate::sys::*;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Error {
    /// A required pointer was NULL.
    NullPointer(&'static str),
    /// A struct's `size` below its first version.
    BadSize {
        what: &'static str,
        got: u64,
        min: usize,
    },
    /// An enumeration or flag out of range.
    BadEnum { what: &'static str, value: i64 },
    /// An unknown or stale handle, or a dead outcome pointer.
    InvalidHandle(String),
    /// The service has its owner already.
    AlreadyConfigured,
    /// The service has no owner.
    NotConfigured,
    /// Not allowed inside a callback.
    InCallback,
    /// A context toggle answered.
    Context(ContextError),
    /// A call valid only inside a PASS ENTER callback (the function's name).
    NotInPassEnter(&'static str),
    /// A policy value was rejected.
    Policy(PolicyError),
    /// Policy variables of the environment were malformed and not set since through the API.
    EnvPolicy(Vec<PolicyError>),
    /// A malformed argument.
    BadArgument(String),
    /// The caller's buffer is too small.
    BufferTooSmall { required: usize, given: usize },
    /// Exists already.
    AlreadyExists(String),
    /// After shutdown.
    ShutDown,
    /// A bug: a caught panic or an impossible state.
    Internal(String),
    /// The simulated device reported an error (a kernel's memory fault, a refused launch).
    Device(String),
    /// The simulated device is out of memory.
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    OutOfMemory(String),
    /// Nothing of that name or id exists.
    #[cfg_attr(not(any(feature = "sim", feature = "cuda")), allow(dead_code))]
    NotFound(String),
    /// What the call needs is missing here (CUPTI, the driver).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    Unavailable(String),
}

impl Error {
    /// The status code of this error.
    pub(crate) fn status(&self) -> kreplay_status_t {
        match self {
            Self::NullPointer(_) => KREPLAY_STATUS_NULL_POINTER,
            Self::BadSize { .. } => KREPLAY_STATUS_BAD_SIZE,
            Self::BadEnum { .. } => KREPLAY_STATUS_BAD_ENUM,
            Self::InvalidHandle(_) => KREPLAY_STATUS_INVALID_HANDLE,
            Self::AlreadyConfigured => KREPLAY_STATUS_ALREADY_CONFIGURED,
            Self::NotConfigured => KREPLAY_STATUS_NOT_CONFIGURED,
            Self::InCallback => KREPLAY_STATUS_IN_CALLBACK,
            Self::Context(ContextError::ContextError) => KREPLAY_STATUS_CONTEXT_ERROR,
            Self::Context(ContextError::ContextNotStarted(_)) => KREPLAY_STATUS_CONTEXT_NOT_STARTED,
            Self::Context(ContextError::Unsupported(_)) => KREPLAY_STATUS_UNSUPPORTED,
            Self::Context(ContextError::UnknownContext(_)) => KREPLAY_STATUS_INVALID_HANDLE,
            Self::NotInPassEnter(_) => KREPLAY_STATUS_CONTEXT_ERROR,
            Self::Policy(_) | Self::EnvPolicy(_) => KREPLAY_STATUS_POLICY_ERROR,
            Self::BadArgument(_) => KREPLAY_STATUS_BAD_ARGUMENT,
            Self::BufferTooSmall { .. } => KREPLAY_STATUS_BUFFER_TOO_SMALL,
            Self::AlreadyExists(_) => KREPLAY_STATUS_ALREADY_EXISTS,
            Self::ShutDown => KREPLAY_STATUS_SHUT_DOWN,
            Self::Internal(_) => KREPLAY_STATUS_INTERNAL,
            Self::Device(_) => KREPLAY_STATUS_DEVICE_ERROR,
            Self::OutOfMemory(_) => KREPLAY_STATUS_OUT_OF_MEMORY,
            Self::NotFound(_) => KREPLAY_STATUS_NOT_FOUND,
            Self::Unavailable(_) => KREPLAY_STATUS_UNSUPPORTED,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NullPointer(what) => write!(f, "`{what}` is NULL"),
            Self::BadSize { what, got, min } => write!(
                f,
                "`{what}->size` is {got}, smaller than the first version of the struct ({min} bytes); set it to sizeof"
            ),
            Self::BadEnum { what, value } => write!(f, "`{what}` = {value} is out of range"),
            Self::InvalidHandle(msg) => f.write_str(msg),
            Self::AlreadyConfigured => f.write_str(
                "the replay service is already configured; a process has one owner, even after it stopped or was destroyed",
            ),
            Self::NotConfigured => f.write_str("the replay service has not been configured"),
            Self::InCallback => f.write_str("not allowed from inside a kernel-replay callback"),
            Self::Context(e) => write!(f, "{e}"),
            Self::NotInPassEnter(what) => write!(
                f,
                "{what} is usable only inside a PASS ENTER callback of an active replay loop"
            ),
            Self::Policy(e) => write!(f, "{e}"),
            Self::EnvPolicy(errors) => {
                write!(
                    f,
                    "the environment's replay policy has {} malformed variable(s): ",
                    errors.len()
                )?;
                for (i, e) in errors.iter().enumerate() {
                    write!(f, "{}{e}", if i == 0 { "" } else { "; " })?;
                }
                f.write_str(
                    ". Well-formed variables are in force; fix these in the environment, or set each \
                     through kreplay_policy_set (the filter's through kreplay_filter_set), before \
                     configuring replay",
                )
            }
            Self::BadArgument(msg) => f.write_str(msg),
            Self::BufferTooSmall { required, given } => {
                write!(f, "the buffer holds {given} bytes; {required} are needed")
            }
            Self::AlreadyExists(msg) => f.write_str(msg),
            Self::ShutDown => f.write_str("kreplay_shutdown() was called; the library is shut down"),
            Self::Internal(msg) => write!(f, "internal error: {msg}"),
            Self::Device(msg) | Self::OutOfMemory(msg) | Self::NotFound(msg) | Self::Unavailable(msg) => {
                f.write_str(msg)
            }
        }
    }
}

impl From<ServiceError> for Error {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::AlreadyConfigured { .. } => Self::AlreadyConfigured,
            ServiceError::NotConfigured => Self::NotConfigured,
            ServiceError::Policy(p) => Self::Policy(p),
        }
    }
}

impl From<RegistryError> for Error {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::UnknownContext(_) => Self::InvalidHandle(e.to_string()),
            RegistryError::AlreadyExists(_) | RegistryError::DuplicateParticipant { .. } => {
                Self::AlreadyExists(e.to_string())
            }
        }
    }
}
