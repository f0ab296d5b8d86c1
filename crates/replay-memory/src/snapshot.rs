//! A live snapshot's contents (SPEC §7.2–§7.4): each captured region and where its bytes lie in
//! the backing blocks, the regions the scope check watches with their digests before the first
//! pass, under scope `predicted` what the plan predicted and what the checks found,
//! the blocks it holds, which go back to the pool (or to quarantine, when a restore copy
//! was abandoned) when it is dropped, and a restore ordered on the device and not yet seen
//! complete, with its hold against frees (SPEC §6 step 8, §7.1).

use std::sync::Arc;

use replay_core::policy::{OutsideCheck, RestoreMode};
use replay_core::{BackingId, CaptureStats, CopyOp, Digest128, Fence, MemLoc, RegionRef};
use smallvec::SmallVec;

use crate::pool::Block;
use crate::predict::{Pending, Predictor};
use crate::shared::Shared;
use crate::tracker::OwnedMemoryHold;

/// One contiguous part of a captured region in one backing block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Offset inside the region.
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) backing: BackingId,
    pub(crate) backing_offset: u64,
}

/// A captured region and where its bytes live.
#[derive(Debug, Clone)]
pub(crate) struct CapturedRegion {
    pub(crate) region: RegionRef,
    /// A module variable's code-object load generation at capture.
    pub(crate) load: Option<u64>,
    pub(crate) pieces: SmallVec<[Piece; 2]>,
    /// Chunk digests at capture (restore `dirty`, and the predicted chunks of scope
    /// `predicted`, whose first check learns from them).
    pub(crate) digests: Vec<Digest128>,
    /// Chunks scope `predicted` chose (a part of its allocation).
    pub(crate) predicted: bool,
}

impl CapturedRegion {
    /// Copies from backing to device for region bytes [from, to).
    pub(crate) fn restore_ops(&self, from: u64, to: u64, out: &mut Vec<CopyOp>) {
        for p in &self.pieces {
            let s = from.max(p.offset);
            let e = to.min(p.offset + p.len);
            if s < e {
                out.push(CopyOp {
                    src: MemLoc::Backing {
                        id: p.backing,
                        offset: p.backing_offset + (s - p.offset),
                    },
                    dst: MemLoc::Device {
                        addr: self.region.base + s,
                    },
                    len: e - s,
                });
            }
        }
    }
}

/// A tracked region outside the snapshot (or the part of one outside the predicted chunks),
/// with its digests before the first pass.
#[derive(Debug, Clone)]
pub(crate) struct Watched {
    pub(crate) region: RegionRef,
    /// Base of the allocation `region` is part of.
    pub(crate) alloc_base: u64,
    pub(crate) digests: Vec<Digest128>,
}

/// Scope `predicted`: what the plan predicted, and what the checks found.
pub(crate) struct Prediction {
    pub(crate) predictor: Arc<Predictor>,
    pub(crate) pending: Pending,
    /// The first check learned what the kernel wrote.
    pub(crate) learned: bool,
    /// Watched chunks found changed so far.
    pub(crate) misses: u32,
}

/// `dirty`'s chunk digests taken with a scope check (`restore::dirty_ops`'s batch): per
/// captured region index (the regions live then, ascending) how many, and all of them in that
/// order.
pub(crate) struct Prefetched {
    pub(crate) counts: Vec<(usize, usize)>,
    pub(crate) digests: Vec<Digest128>,
}

/// A restore enqueued and ordered on the device ahead of the next pass, not yet seen complete.
pub(crate) struct PendingRestore {
    pub(crate) fence: Fence,
    /// Frees and unloads of the captured regions wait until the fence completed: this is
    /// dropped only then (or when the fence is abandoned).
    pub(crate) hold: OwnedMemoryHold,
    /// The batch's first region, its region count and bytes (a failure names them).
    pub(crate) first: RegionRef,
    pub(crate) regions: usize,
    pub(crate) bytes: u64,
}

/// A snapshot alive for one window.
pub(crate) struct EngineSnapshot {
    pub(crate) shared: Arc<Shared>,
    pub(crate) regions: Vec<CapturedRegion>,
    pub(crate) blocks: Vec<Block>,
    pub(crate) watched: Vec<Watched>,
    pub(crate) stats: CaptureStats,
    pub(crate) mode: RestoreMode,
    pub(crate) chunk: u64,
    pub(crate) keep: u64,
    /// A restore copy was abandoned: the blocks may still be read by the device.
    pub(crate) poisoned: bool,
    /// Scope `predicted` only.
    pub(crate) prediction: Option<Prediction>,
    /// Whether a restore may follow the next scope check (the window's hint; `true` unless
    /// told otherwise): `dirty`'s digests are then taken in the check's batch.
    pub(crate) restore_may_follow: bool,
    /// When the scope check reads the watched memory (the policy's), and how many checks ran.
    pub(crate) outside: OutsideCheck,
    pub(crate) checks: u32,
    /// The module registry's generation at capture ([`crate::shared::Shared::liveness`]).
    pub(crate) module_stamp: Option<u64>,
    /// `dirty`'s chunk digests taken with the last scope check, per captured region index
    /// (regions live then), for the restore that follows it.
    pub(crate) prefetched: Option<Prefetched>,
    /// Restores are ordered on the device (the window asked and the device has not refused).
    pub(crate) ordered: bool,
    /// The last restore, ordered on the device and not yet seen complete.
    pub(crate) pending: Option<PendingRestore>,
}

impl Drop for EngineSnapshot {
    fn drop(&mut self) {
        // The window completes a pending restore before it drops the snapshot; if it could
        // not (a backend call panicked), the blocks may still be read by the device: leak them
        // unless the fence is done already. The hold ends with it either way.
        if let Some(p) = self.pending.take() {
            let dev = &self.shared.device;
            if !matches!(dev.poll_fence(p.fence, std::time::Duration::ZERO), Ok(true)) {
                dev.abandon_fence(p.fence);
                self.poisoned = true;
            }
            drop(p.hold);
        }
        let blocks = std::mem::take(&mut self.blocks);
        if self.poisoned {
            self.shared.pool.quarantine(&blocks);
        } else {
            self.shared.pool.give_back(blocks, Some(self.keep));
        }
    }
}
