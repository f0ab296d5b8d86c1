//! Faults the simulated runtime can inject (per instance; SPEC §9.1, the fault paths of §8),
//! so that every fault path of `replay-hsa` is reached through the runtime's own entries, the
//! way it would be on a real system: an entry answers an error status, or the copy engine
//! stops making progress.
//!
//! They mirror `replay-mock`'s faults at the level where HSA exposes them (see the table in
//! the crate's tests, `tests/faults.rs`): a snapshot that cannot get backing memory is a pool
//! that answers `HSA_STATUS_ERROR_OUT_OF_RESOURCES`; a failed capture or restore copy is an
//! `hsa_amd_memory_async_copy` that refuses the copy; a stuck copy is a stalled copy engine; a
//! failed digest is a failed `hsa_memory_copy` into staging; an incomplete module enumeration
//! is a loader iteration answering an error; a refused pass is an `hsa_signal_create` that
//! fails.
//!
//! Above the pools only: the state holds each instance's armed faults and the entries fire
//! them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::pool::PoolKind;

/// A fault of the simulated runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimFault {
    /// Allocations from the pools of this kind (`hsa_amd_memory_pool_allocate`,
    /// `hsa_memory_allocate`) answer `HSA_STATUS_ERROR_OUT_OF_RESOURCES`.
    PoolExhausted(PoolKind),
    /// `hsa_amd_memory_async_copy` (and `_on_engine`) refuse the copy with
    /// `HSA_STATUS_ERROR_OUT_OF_RESOURCES`; nothing is copied, the completion signal is not
    /// touched.
    AsyncCopyRefused,
    /// The copy engine accepts copies but runs none while the fault is armed (whatever its
    /// mode); clearing it lets the held copies run in order.
    CopyEngineStalled,
    /// `hsa_memory_copy` answers `HSA_STATUS_ERROR` without copying.
    MemoryCopyFails,
    /// `hsa_signal_create` (and `hsa_amd_signal_create`) answer
    /// `HSA_STATUS_ERROR_OUT_OF_RESOURCES`.
    SignalCreateFails,
    /// `hsa_ven_amd_loader_iterate_executables` answers `HSA_STATUS_ERROR`.
    LoaderIterationFails,
    /// `hsa_amd_agents_allow_access` answers `HSA_STATUS_ERROR`.
    AllowAccessFails,
    /// `hsa_amd_pointer_info` answers `HSA_STATUS_ERROR` (the runtime cannot say what an
    /// address is).
    PointerInfoFails,
}

impl SimFault {
    /// Stable name (the key of [`crate::SimHsa::fired`]).
    pub fn name(&self) -> &'static str {
        match self {
            Self::PoolExhausted(_) => "pool_exhausted",
            Self::AsyncCopyRefused => "async_copy_refused",
            Self::CopyEngineStalled => "copy_engine_stalled",
            Self::MemoryCopyFails => "memory_copy_fails",
            Self::SignalCreateFails => "signal_create_fails",
            Self::LoaderIterationFails => "loader_iteration_fails",
            Self::AllowAccessFails => "allow_access_fails",
            Self::PointerInfoFails => "pointer_info_fails",
        }
    }
}

/// The same modes and handles as the simulated GPU's faults.
pub use replay_mock::fault::{FaultId, FaultMode};

#[derive(Debug)]
struct Armed {
    id: u64,
    fault: SimFault,
    mode: FaultMode,
    /// Occasions still let through before the fault fires.
    skip: u32,
}

/// The armed faults of one instance and how often each fired.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    armed: Mutex<Vec<Armed>>,
    fired: Mutex<BTreeMap<&'static str, u64>>,
    next: AtomicU64,
}

impl Faults {
    /// Arms `fault` to fire after `skip` occasions have passed untouched.
    pub(crate) fn arm(&self, fault: SimFault, mode: FaultMode, skip: u32) -> FaultId {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.armed.lock().push(Armed {
            id,
            fault,
            mode,
            skip,
        });
        FaultId(id)
    }

    pub(crate) fn clear(&self, id: FaultId) {
        self.armed.lock().retain(|a| a.id != id.0);
    }

    /// Fires the first armed fault equal to `fault`: counts it and disarms it if it was
    /// armed once. Whether one fired.
    pub(crate) fn fire(&self, fault: SimFault) -> bool {
        let mut armed = self.armed.lock();
        let Some(i) = armed.iter().position(|a| a.fault == fault) else {
            return false;
        };
        if armed[i].skip > 0 {
            armed[i].skip -= 1;
            return false;
        }
        if armed[i].mode == FaultMode::Once {
            armed.remove(i);
        }
        drop(armed);
        *self.fired.lock().entry(fault.name()).or_default() += 1;
        true
    }

    /// Whether `fault` is armed (not consumed: for states such as a stalled engine).
    pub(crate) fn armed(&self, fault: SimFault) -> bool {
        self.armed.lock().iter().any(|a| a.fault == fault)
    }

    /// Counts an occasion of a state fault (see [`Faults::armed`]).
    pub(crate) fn count(&self, fault: SimFault) {
        *self.fired.lock().entry(fault.name()).or_default() += 1;
    }

    pub(crate) fn fired(&self, name: &str) -> u64 {
        self.fired.lock().get(name).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_fires_once_always_until_cleared() {
        let f = Faults::default();
        f.arm(SimFault::MemoryCopyFails, FaultMode::Once, 0);
        assert!(!f.fire(SimFault::AsyncCopyRefused));
        assert!(f.fire(SimFault::MemoryCopyFails));
        assert!(!f.fire(SimFault::MemoryCopyFails));
        let id = f.arm(SimFault::AsyncCopyRefused, FaultMode::Always, 0);
        assert!(f.fire(SimFault::AsyncCopyRefused));
        assert!(f.fire(SimFault::AsyncCopyRefused));
        f.clear(id);
        assert!(!f.fire(SimFault::AsyncCopyRefused));
        assert_eq!(f.fired("memory_copy_fails"), 1);
        assert_eq!(f.fired("async_copy_refused"), 2);
        let pool = SimFault::PoolExhausted(PoolKind::DeviceCoarse);
        f.arm(pool, FaultMode::Once, 0);
        assert!(!f.fire(SimFault::PoolExhausted(PoolKind::HostFine)));
        assert!(f.armed(pool));
        assert!(f.fire(pool));
        assert!(!f.armed(pool));
        f.arm(SimFault::SignalCreateFails, FaultMode::Once, 2);
        assert!(!f.fire(SimFault::SignalCreateFails));
        assert!(!f.fire(SimFault::SignalCreateFails));
        assert!(f.fire(SimFault::SignalCreateFails), "the third occasion");
        assert!(!f.fire(SimFault::SignalCreateFails));
    }
}
