//! Errors of the registry's own API (the toggles answer with [`replay_core::ContextError`]).

use std::sync::Arc;

use replay_core::ContextId;

/// What went wrong creating a context, declaring a participant or starting a context globally.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The context id is not registered.
    #[error("context {0} is not known")]
    UnknownContext(ContextId),
    /// [`crate::Contexts::register_context`] with an id already in use.
    #[error("context {0} already exists")]
    AlreadyExists(ContextId),
    /// A participant of this name was already declared on the context.
    #[error("context {ctx} already has a participant named {name:?}")]
    DuplicateParticipant {
        /// The context.
        ctx: ContextId,
        /// The participant's name.
        name: Arc<str>,
    },
}
