//! The dispatch these tests plan for; the fake device memory and clock they run on are the
//! shared test doubles (`replay_mock::double`).

use std::sync::Arc;

use replay_core::{
    AgentId, Dim3, Dispatch, DispatchId, DispatchInfo, KernelId, KernelKey, Origin, QueueId,
    SubmissionKind,
};

/// A dispatch of kernel `k` on `agent` whose argument block is `words`.
pub fn dispatch(agent: AgentId, words: &[u64]) -> Dispatch {
    Dispatch {
        info: DispatchInfo {
            agent,
            queue: QueueId(0),
            dispatch_id: DispatchId(1),
            kernel_id: KernelId(1),
            kernel_name: Arc::from("k"),
            grid: Dim3::new(1, 1, 1),
            workgroup: Dim3::new(1, 1, 1),
            private_segment_size: 0,
            group_segment_size: 0,
        },
        kernel: KernelKey {
            agent,
            code_object: 1,
            symbol: 1,
        },
        kind: SubmissionKind::KernelDispatch,
        kernarg: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        arg_layout: Default::default(),
        origin: Origin::SubmittingThread,
        handle: 0,
    }
}
