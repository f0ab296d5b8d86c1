//! Fault injection: what can go wrong on a real GPU, on demand, per agent (the fault paths of
//! SPEC §6 and §8: every one ends declined or truncated, with memory equal to one execution).
//!
//! A fault is armed on one agent with [`FaultMode::Once`] (fires at its next occasion, then is
//! spent) or [`FaultMode::Always`] (fires at every occasion until cleared). Each firing is
//! counted ([`crate::SimGpu::fault_hits`]) and recorded as [`crate::Event::FaultFired`].
//!
//! Every injected stall ends: the window releases it when it abandons the wait it stalled
//! (after declining or truncating), [`crate::SimGpu::release_stalls`] releases all, and a stall
//! nobody releases ends by itself after [`crate::SimConfig::stall_wall_cap`] of wall time. So
//! the application always completes.

use std::fmt;

use parking_lot::Mutex;
use replay_core::{AgentId, Tier};

/// A fault the simulator can inject. The "window outcome" notes say what the replay window
/// (SPEC §6, §8) makes of it with `replay-memory` as the memory layer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Fault {
    /// `alloc_backing` fails (any tier) with out-of-memory. Once: the next call fails, and the
    /// capture moves that tier's share to the next tiers with room; Always: every tier fails →
    /// declined `snapshot_failed`. Pools are reused across windows, so inject it before the
    /// agent's first capture (or after `release_pools`) for it to be reached.
    SnapshotOom,
    /// `alloc_backing` fails for this tier only (the others still work): the capture moves
    /// its share to the next tiers with room.
    TierOom(Tier),
    /// The first copy batch of a capture (device → backing) completes with an error: its fence
    /// reports `CopyFailed`. → declined `snapshot_failed`.
    CaptureCopyFail,
    /// The first copy batch of a capture stalls until its fence is abandoned (then it runs).
    /// → the capture's bounded wait ends, declined `snapshot_failed`; the memory layer
    /// quarantines the backing memory.
    CaptureCopyStuck,
    /// The next queue drain does not complete in time: a stall is queued on the drained queue
    /// ahead of the drain's target, released when the window abandons the drain.
    /// → declined `queue_drain_stuck`; the ordinary run executes after the stall ends.
    QueueDrainStuck,
    /// The next agent drain does not complete in time (a stall on the agent's last queue).
    /// → declined `agent_drain_stuck`.
    AgentDrainStuck,
    /// The next copy fence does not complete in time (a stall on the copy engine).
    /// → declined `copy_fence_stuck`.
    CopyFenceStuck,
    /// Pass `pass` exceeds `pass_timeout` but eventually completes: the pass's execution is
    /// held until the window abandons it, then runs. → truncated `pass_drain_stuck`, no
    /// restore, memory ends with that pass's results, the trailing barrier fires the
    /// application's completion after it, and the kernel is not replayed again.
    PassStuck {
        /// Pass index (0-based).
        pass: u32,
    },
    /// `submit_pass` refuses pass `pass`. Pass 0 → declined `submit_failed`; a later pass →
    /// the ordinary run executes once on restored memory, truncated `submit_failed`.
    PassSubmitFail {
        /// Pass index.
        pass: u32,
    },
    /// `submit_pass` hands pass `pass` to the queue (it runs) and then reports an error of
    /// kind `AfterSubmit`, as a runtime does when something after the doorbell fails. The
    /// window must not submit the dispatch again: → truncated `submit_failed` with that pass
    /// counted as executed, no restore, the application's completion signalled once after it.
    PassSubmitAfterLaunch {
        /// Pass index.
        pass: u32,
    },
    /// A copy batch back to application memory (backing → device) fails. Restores are the
    /// only such copies. The memory layer retries a failed batch region by region, so with
    /// [`FaultMode::Once`] the retry succeeds; with [`FaultMode::Always`] the restore fails and
    /// the window aborts the process (SPEC §6) — test that in a child process.
    RestoreFail,
    /// The next digest batch fails (scope check → truncated `scope_check_failed`; a `dirty`
    /// restore → a full restore of every captured byte instead).
    DigestFail,
    /// The module-variable enumeration of the agent is incomplete (`enumerate` answers `Err`).
    /// → declined `untracked_memory`.
    IncompleteModuleEnumeration,
    /// During pass `pass` (on the worker, before the kernel body), the application frees the
    /// allocation at `base`, reporting it to the tracker first. The restore after that pass
    /// must skip it (freed since capture). A kernel touching it faults.
    FreeDuringPass {
        /// Base of the allocation.
        base: u64,
        /// Pass index.
        pass: u32,
    },
    /// During pass `pass`, the allocation at `base` is freed and a new one of the same size and
    /// class is made at the same address (a new generation): the restore must skip it.
    ReallocDuringPass {
        /// Base of the allocation.
        base: u64,
        /// Pass index.
        pass: u32,
    },
    /// `submit_ordinary` refuses the dispatch: `ReplayService::submit` returns the error (the
    /// application sees a failed launch).
    OrdinarySubmitFail,
    /// The next application copy ([`crate::SimRuntime::copy_async`]) on this agent's copy
    /// engine is held until a copy fence that waits for it abandons its wait (or
    /// `release_stalls`, or the wall cap). A window on the agent that owns the copy's
    /// destination waits for it in its copy fence, whichever engine runs it. → declined
    /// `copy_fence_stuck`; the copy then lands once.
    AppCopyStuck,
}

impl Fault {
    /// Stable name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::SnapshotOom => "snapshot_oom",
            Self::TierOom(_) => "tier_oom",
            Self::CaptureCopyFail => "capture_copy_fail",
            Self::CaptureCopyStuck => "capture_copy_stuck",
            Self::QueueDrainStuck => "queue_drain_stuck",
            Self::AgentDrainStuck => "agent_drain_stuck",
            Self::CopyFenceStuck => "copy_fence_stuck",
            Self::PassStuck { .. } => "pass_stuck",
            Self::PassSubmitFail { .. } => "pass_submit_fail",
            Self::PassSubmitAfterLaunch { .. } => "pass_submit_after_launch",
            Self::RestoreFail => "restore_fail",
            Self::DigestFail => "digest_fail",
            Self::IncompleteModuleEnumeration => "incomplete_module_enumeration",
            Self::FreeDuringPass { .. } => "free_during_pass",
            Self::ReallocDuringPass { .. } => "realloc_during_pass",
            Self::OrdinarySubmitFail => "ordinary_submit_fail",
            Self::AppCopyStuck => "app_copy_stuck",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TierOom(t) => write!(f, "tier_oom({})", t.as_str()),
            Self::PassStuck { pass }
            | Self::PassSubmitFail { pass }
            | Self::PassSubmitAfterLaunch { pass } => {
                write!(f, "{}(pass {pass})", self.name())
            }
            Self::FreeDuringPass { base, pass } | Self::ReallocDuringPass { base, pass } => {
                write!(f, "{}({base:#x}, pass {pass})", self.name())
            }
            _ => f.write_str(self.name()),
        }
    }
}

/// Whether a fault fires once or every time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FaultMode {
    /// At its next occasion only.
    #[default]
    Once,
    /// At every occasion until cleared.
    Always,
}

/// Handle of an armed fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultId(pub u64);

#[derive(Debug)]
struct Armed {
    id: u64,
    agent: AgentId,
    fault: Fault,
    mode: FaultMode,
    hits: u32,
    spent: bool,
}

/// The armed faults of a device.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    armed: Mutex<Vec<Armed>>,
    next: std::sync::atomic::AtomicU64,
}

impl Faults {
    pub fn inject(&self, agent: AgentId, fault: Fault, mode: FaultMode) -> FaultId {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.armed.lock().push(Armed {
            id,
            agent,
            fault,
            mode,
            hits: 0,
            spent: false,
        });
        FaultId(id)
    }

    pub fn hits(&self, id: FaultId) -> u32 {
        self.armed
            .lock()
            .iter()
            .find(|a| a.id == id.0)
            .map(|a| a.hits)
            .unwrap_or(0)
    }

    pub fn clear(&self) {
        for a in self.armed.lock().iter_mut() {
            a.spent = true;
        }
    }

    /// Fires the first armed fault of `agent` that matches.
    pub fn take(&self, agent: AgentId, pred: impl Fn(&Fault) -> bool) -> Option<Fault> {
        let mut armed = self.armed.lock();
        let a = armed
            .iter_mut()
            .find(|a| !a.spent && a.agent == agent && pred(&a.fault))?;
        a.hits = a.hits.saturating_add(1);
        if a.mode == FaultMode::Once {
            a.spent = true;
        }
        Some(a.fault.clone())
    }

    /// Fires every armed fault of `agent` that matches, once each.
    pub fn take_all(&self, agent: AgentId, pred: impl Fn(&Fault) -> bool) -> Vec<Fault> {
        let mut out = Vec::new();
        let mut armed = self.armed.lock();
        for a in armed
            .iter_mut()
            .filter(|a| !a.spent && a.agent == agent && pred(&a.fault))
        {
            a.hits = a.hits.saturating_add(1);
            if a.mode == FaultMode::Once {
                a.spent = true;
            }
            out.push(a.fault.clone());
        }
        out
    }
}
