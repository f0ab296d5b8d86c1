//! The CUDA graph node a thread is running (SPEC §9.2 "Graphs"): `state::graph` sets it around
//! each kernel node's launch (and a whole graph's, in graph mode) while it unrolls a launch;
//! the agent names it in the outcome record ([`replay_core::Agent::graph_node`]) and the tools
//! read it in CONFIG EXIT, on the thread that runs the window. A leaf of its own, so the agent
//! and the graph model need not use each other.

use std::cell::Cell;

/// What a record says of a kernel node dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeTag {
    /// The executable graph, numbered from 1 in instantiation order.
    pub graph: u64,
    /// The node's position in the order the graph is unrolled (stable across launches);
    /// `u32::MAX` for a whole graph profiled as one workload.
    pub node: u32,
    /// Which launch of that graph, from 0.
    pub launch: u64,
    /// Branches that could have run concurrently ran one after another.
    pub serialized: bool,
}

impl NodeTag {
    /// The outcome record's form.
    pub fn to_record(self) -> replay_core::GraphNode {
        replay_core::GraphNode {
            graph: self.graph,
            node: (self.node != u32::MAX).then_some(self.node),
            launch: self.launch,
            serialized: self.serialized,
        }
    }
}

thread_local! {
    static CURRENT: Cell<Option<NodeTag>> = const { Cell::new(None) };
}

/// The graph node whose kernel this thread is running, if any.
pub fn current_node() -> Option<NodeTag> {
    CURRENT.with(|c| c.get())
}

/// Sets this thread's node (`None`: none); the previous one, to put back.
pub(crate) fn replace(tag: Option<NodeTag>) -> Option<NodeTag> {
    CURRENT.with(|c| c.replace(tag))
}
