//! Errors at the core's boundaries: what backends report, and what callers of the service get.

use crate::types::{AgentId, ContextId};

/// What went wrong in a backend call, in categories the window acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendErrorKind {
    /// Device or host memory could not be allocated.
    OutOfMemory,
    /// A copy was refused or failed.
    CopyFailed,
    /// The device went away or reported a fatal error: on CUDA a sticky error, after which
    /// every call in the context fails the same way. The window treats the context as lost:
    /// it skips what is left of a restore instead of aborting (SPEC §6).
    DeviceLost,
    /// The backend cannot do this on this agent.
    Unsupported,
    /// A handle or argument the backend does not know (a programming error in the caller).
    InvalidArgument,
    /// The submission was handed to the device (the work may run) and something after it
    /// failed: submitting again could execute the dispatch twice, so the window never falls
    /// back to another submission after this error.
    AfterSubmit,
    /// The agent cannot run a window here and now (another window held it, and the backend
    /// resumed the submission where no window may run): the window declines `agent_busy`.
    Busy,
    /// Anything else.
    Other,
}

/// An error reported by a backend (agent or device memory), with the context a user needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation} failed on agent {agent}: {message} ({kind:?})")]
pub struct BackendError {
    /// Category.
    pub kind: BackendErrorKind,
    /// Agent the call was for.
    pub agent: AgentId,
    /// The operation, e.g. "submit pass", "copy fence".
    pub operation: &'static str,
    /// What the backend said.
    pub message: String,
}

impl BackendError {
    /// Builds an error.
    pub fn new(
        kind: BackendErrorKind,
        agent: AgentId,
        operation: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            agent,
            operation,
            message: message.into(),
        }
    }

    /// The one constructor backends report through: where the error happened (the agent an
    /// `Agent` or `DeviceMemory` serves, and the operation), then what happened.
    ///
    /// ```
    /// use replay_core::{AgentId, BackendError, BackendErrorKind};
    /// let e = BackendError::on(AgentId(2), "submit pass").error(BackendErrorKind::Other, "ring full");
    /// assert_eq!(e.to_string(), "submit pass failed on agent 2: ring full (Other)");
    /// assert_eq!(BackendError::on(AgentId(2), "poll").invalid("unknown ticket").kind,
    ///            BackendErrorKind::InvalidArgument);
    /// ```
    pub fn on(agent: AgentId, operation: &'static str) -> BackendErrorAt {
        BackendErrorAt { agent, operation }
    }
}

/// Where a [`BackendError`] happened, waiting for what happened ([`BackendError::on`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an error site builds an error with `error` or `invalid`"]
pub struct BackendErrorAt {
    /// Agent the call was for.
    pub agent: AgentId,
    /// The operation, e.g. "submit pass", "copy fence".
    pub operation: &'static str,
}

impl BackendErrorAt {
    /// The error: its category and what the backend says. Cold: errors are the rare path.
    #[cold]
    pub fn error(self, kind: BackendErrorKind, message: impl Into<String>) -> BackendError {
        BackendError::new(kind, self.agent, self.operation, message)
    }

    /// Misuse of the backend (a handle or argument it does not know): `InvalidArgument`.
    #[cold]
    pub fn invalid(self, message: impl Into<String>) -> BackendError {
        self.error(BackendErrorKind::InvalidArgument, message)
    }
}

/// Errors from the replay service's API (registration, policy).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// SPEC §3: exactly one context per process owns the replay service.
    #[error("the replay service is already configured (owned by context {owner}); a process has one owner, even after it stops")]
    AlreadyConfigured {
        /// The context that configured it first.
        owner: ContextId,
    },
    /// `start` or `stop` before `configure`.
    #[error("the replay service has not been configured")]
    NotConfigured,
    /// A policy value was rejected.
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
}

/// Answers of the local context toggles (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ContextError {
    /// Called outside a PASS ENTER callback of an active loop.
    #[error("context toggles are usable only inside PASS ENTER of an active replay loop")]
    ContextError,
    /// The context was not active when the loop began.
    #[error("context {0} was not active when the replay loop began and cannot be started locally")]
    ContextNotStarted(ContextId),
    /// A participant of the context cannot honour local overrides.
    #[error("context {0} has a participant that cannot honour per-pass overrides")]
    Unsupported(ContextId),
    /// The context id is not known.
    #[error("context {0} is not known")]
    UnknownContext(ContextId),
}
