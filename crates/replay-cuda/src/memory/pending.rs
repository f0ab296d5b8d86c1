//! What a submitted batch leaves behind until its fence is taken: its events, its digests, the
//! gather table it borrowed. Apart from the fence logic (`fence.rs`), which works on
//! `CudaMemory`, so that the state `CudaMemory` holds does not depend on that logic.

use smallvec::SmallVec;

use super::copy::CopyTable;
use super::digest::DigestJob;
use crate::device::Event;

#[derive(Debug)]
pub(super) struct Pending {
    pub(super) events: SmallVec<[Event; 4]>,
    pub(super) digests: Option<DigestJob>,
    /// The gather copy's table, back to the pool once the fence completed.
    pub(super) table: Option<CopyTable>,
    /// Timing events on the device lane around a copy batch (`trace` level only), its ops
    /// gathered and copied by call, and its bytes.
    pub(super) timing: Option<(Event, Event, usize, usize, u64)>,
    pub(super) done: bool,
}
