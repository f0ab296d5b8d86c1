//! Errors of the simulator's application-facing API (SPEC §2: misuse of the simulated GPU is an
//! error, never a panic).

use replay_core::{AgentId, BackendError, QueueId};

use crate::kernel::MemFault;

/// What went wrong in a call of the simulated runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A memory pool of the agent is full.
    #[error("agent {agent}: out of {pool} memory: {requested} bytes requested, {available} bytes available")]
    OutOfMemory {
        /// The agent.
        agent: AgentId,
        /// Which pool ("device", "pinned host", "pageable host").
        pool: &'static str,
        /// Bytes asked for (rounded up to the alignment).
        requested: u64,
        /// Bytes still free in the pool.
        available: u64,
    },
    /// No such agent.
    #[error("agent {0} does not exist")]
    UnknownAgent(AgentId),
    /// No such queue on the agent.
    #[error("queue {queue} of agent {agent} does not exist")]
    UnknownQueue {
        /// The agent.
        agent: AgentId,
        /// The queue.
        queue: QueueId,
    },
    /// `free` of an address that is not the base of a live allocation.
    #[error("agent {agent}: {addr:#x} is not the base of a live allocation")]
    InvalidFree {
        /// The agent.
        agent: AgentId,
        /// The address.
        addr: u64,
    },
    /// An allocation at a fixed address overlaps a live one.
    #[error("agent {agent}: {addr:#x}+{size} overlaps a live allocation")]
    AddressInUse {
        /// The agent.
        agent: AgentId,
        /// The address asked for.
        addr: u64,
        /// The size asked for.
        size: u64,
    },
    /// A host access to device memory hit no allocation.
    #[error(transparent)]
    Fault(#[from] MemFault),
    /// The replay service or the simulated agent refused the submission.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The simulator was shut down.
    #[error("the simulator was shut down")]
    Shutdown,
    /// A misuse of the API, described.
    #[error("{0}")]
    Invalid(String),
}
