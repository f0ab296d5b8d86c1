//! What one agent's engine and its live snapshot share (SPEC §7.1): the tracker, the device, the
//! module enumeration, the digest key and the backing pool; the liveness check of a planned or
//! captured region, and the hold against frees and unloads that every copy runs under.

use std::sync::Arc;

use replay_core::wait::WaitError;
use replay_core::{
    AgentId, CopyOp, DeviceMemory, Digest128, DigestKey, DigestOp, RegionRef, WaitSpec,
};

use crate::batch;
use crate::modules::ModuleVariables;
use crate::pool::BackingPool;
use crate::tracker::{MemoryHold, OwnedMemoryHold, Tracker};

/// Generation of module-variable regions: they are not allocations the tracker knows; their
/// liveness is the load of their code object ([`ModuleVariables::load_generation`]).
/// Generations from the tracker start at 1.
pub(crate) const MODULE_GENERATION: u64 = 0;

/// Generation of an allocation the tracker never saw and the runtime described
/// ([`DeviceMemory::query_pointer`]): its liveness is the runtime's answer, asked again.
pub(crate) const RUNTIME_GENERATION: u64 = u64::MAX;

/// State shared by the engine and its live snapshot.
pub(crate) struct Shared {
    pub(crate) agent: AgentId,
    pub(crate) tracker: Arc<Tracker>,
    pub(crate) device: Arc<dyn DeviceMemory>,
    pub(crate) modules: Arc<dyn ModuleVariables>,
    pub(crate) key: DigestKey,
    pub(crate) pool: BackingPool,
    /// The module variables as the last plan saw them, under the backend's generation.
    pub(crate) module_view: parking_lot::Mutex<Option<(u64, Arc<ModuleView>)>>,
}

/// What a plan needs of the module variables: every variable's range (sorted), and the
/// writable ones as runs to capture.
#[derive(Debug, Default)]
pub(crate) struct ModuleView {
    pub(crate) ranges: Vec<(u64, u64)>,
    pub(crate) runs: Vec<(u64, u64)>,
}

impl Shared {
    /// Whether `r` is still the memory it was when planned or captured; `load` is the load
    /// generation of a module variable's code object at capture. A tracked `r` may be a part
    /// of its allocation (scope `predicted` captures chunks): it is live while the allocation
    /// holding its base has its generation and still contains it. Call under a hold
    /// ([`Tracker::hold`]) so that the answer stays true until the copies are done.
    /// A liveness test for many regions of one step: [`Shared::is_live`], except that module
    /// variables need no lookup while the module registry's generation is still `stamp` (no
    /// load or unload since it was read: every load a region was captured under still
    /// stands). A thousand module-variable runs otherwise cost two index lookups each, per
    /// pass.
    pub(crate) fn liveness(
        &self,
        stamp: Option<u64>,
    ) -> impl Fn(&RegionRef, Option<u64>) -> bool + '_ {
        let same = stamp.is_some() && self.modules.generation(self.agent) == stamp;
        move |r, load| {
            (same && r.generation == MODULE_GENERATION && load.is_some()) || self.is_live(r, load)
        }
    }

    pub(crate) fn is_live(&self, r: &RegionRef, load: Option<u64>) -> bool {
        match r.generation {
            MODULE_GENERATION => match load {
                Some(g) => self.modules.load_generation(self.agent, r.base) == Some(g),
                None => true,
            },
            RUNTIME_GENERATION => matches!(
                self.device.query_pointer(r.base),
                Ok(Some(i)) if i.base == r.base && i.size == r.size && i.class == r.class
            ),
            _ => {
                self.tracker.is_live(self.agent, r)
                    || self.tracker.lookup(self.agent, r.base).is_some_and(|a| {
                        a.generation == r.generation
                            && r.base.saturating_add(r.size) <= a.base.saturating_add(a.size)
                    })
            }
        }
    }

    /// Holds `regions` against frees and unloads while the caller reads or writes them.
    pub(crate) fn hold<'r>(&self, regions: impl Iterator<Item = &'r RegionRef>) -> MemoryHold<'_> {
        let ranges: Vec<(u64, u64)> = regions.map(|r| (r.base, r.size)).collect();
        self.tracker.hold(self.agent, &ranges)
    }

    /// [`Shared::hold`] with a guard that can outlive the call (a restore ordered on the
    /// device keeps it until its fence completed).
    pub(crate) fn hold_owned<'r>(
        &self,
        regions: impl Iterator<Item = &'r RegionRef>,
    ) -> OwnedMemoryHold {
        let ranges: Vec<(u64, u64)> = regions.map(|r| (r.base, r.size)).collect();
        self.tracker.hold_owned(self.agent, &ranges)
    }

    /// Submits copies as one batch on this agent's device and waits for its fence.
    pub(crate) fn copy_batch(
        &self,
        ops: &[CopyOp],
        wait: &WaitSpec<'_>,
        what: &'static str,
    ) -> Result<(), WaitError> {
        batch::copy_batch(&*self.device, ops, wait, what)
    }

    /// Submits digests under this engine's key as one batch, waits, and takes them.
    pub(crate) fn digest_batch(
        &self,
        ops: &[DigestOp],
        wait: &WaitSpec<'_>,
    ) -> Result<Vec<Digest128>, WaitError> {
        batch::digest_batch(&*self.device, self.key, self.agent, ops, wait)
    }
}
