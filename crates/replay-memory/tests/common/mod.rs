//! The dispatch these tests plan for; the fake device memory and clock they run on are the
//! shared test doubles (`replay_mock::double`).

use replay_core::{
    AgentId, Dim3, Dispatch, DispatchId, DispatchInfo, KernelId, KernelKey, Origin, QueueId,
    SubmissionKind,
};

/// A dispatch of kernel `k` on `agent` whose argument block is `words`.
pub fn dispatch(agent: AgentId, words: &[u64]) -> Dispatch {
    Dispatch {
        info: DispatchInfo::new(
            agent,
            QueueId(0),
            KernelId(1),
            "k",
            Dim3::new(1, 1, 1),
            Dim3::new(1, 1, 1),
        )
        .with_dispatch_id(DispatchId(1)),
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
