//! Restore between passes (SPEC §7.1, §7.4): under a hold against frees and unloads, re-checks
//! every captured region, then writes back every captured byte (`full`) or the chunks whose
//! digests changed (`dirty`; when the digests fail, every captured byte instead) in one fenced
//! batch; a failed batch is retried region by region to name the failing region, and a stuck
//! fence poisons the snapshot's blocks. `dirty`'s digests are taken with the scope check when
//! there is one (`check` asks [`dirty_ops`] for them and keeps them in the snapshot), so a
//! pass costs one digest batch and one wait for both; without a check the restore takes them
//! itself.
//!
//! **Ordered on the device** (SPEC §6 step 8: the window asks when the agent claims
//! `ORDERED_RESTORE`): the batch is submitted and handed to
//! [`replay_core::DeviceMemory::order_after`], and the restore returns without waiting; the
//! fence and the hold are kept in the snapshot ([`crate::snapshot::PendingRestore`]) until
//! [`complete`] sees the fence done, right after the next pass's wait. Frees and unloads of
//! the captured regions so wait until the copies are done on the device, not until they were
//! enqueued. A fence that reports an error then is a failed restore (the window aborts); one
//! that is not done in time is abandoned and the blocks leak. A device that refuses to order,
//! and a batch whose submission fails (retried region by region), wait on the host as before.

use std::sync::Arc;

use replay_core::policy::RestoreMode;
use replay_core::wait::{bounded, WaitError};
use replay_core::{CopyOp, Digest128, DigestOp, RestoreError, RestoreStats, WaitSpec};

use crate::batch::{chunk_ops, wait_fence};
use crate::snapshot::{CapturedRegion, EngineSnapshot, PendingRestore, Prefetched};

/// Completes `snap`'s pending restore (see the module docs): `Ok(true)` done or none pending,
/// `Ok(false)` not done within `wait` (abandoned, blocks leaked), `Err` the fence failed.
pub(crate) fn complete(
    snap: &mut EngineSnapshot,
    wait: &WaitSpec<'_>,
) -> Result<bool, RestoreError> {
    let Some(p) = snap.pending.take() else {
        return Ok(true);
    };
    let dev = &*snap.shared.device;
    let r = bounded(wait.clock, wait.bounds(), "restore copy fence", |budget| {
        dev.poll_fence(p.fence, budget)
            .map(|done| done.then_some(()))
    });
    // The hold ends here, with `p`, in every case: the copies are done, or abandoned.
    match r {
        Ok(()) => Ok(true),
        Err(WaitError::Stuck { .. }) => {
            dev.abandon_fence(p.fence);
            snap.poisoned = true;
            log::warn!(
                "[kernel-replay] agent {}: the restore ordered on the device ({} regions, {} bytes) did not complete within {:?}; abandoned",
                snap.shared.agent,
                p.regions,
                p.bytes,
                wait.timeout
            );
            Ok(false)
        }
        Err(WaitError::Backend(e)) => Err(RestoreError {
            base: p.first.base,
            size: p.first.size,
            message: format!(
                "the restore ordered on the device failed there: {e} (batch of {} regions, {} bytes, starting with this one)",
                p.regions, p.bytes
            ),
            cause: Some(e.kind),
        }),
    }
}

/// Restores `snap`'s live regions before the next pass.
pub(crate) fn restore(
    snap: &mut EngineSnapshot,
    wait: &WaitSpec<'_>,
) -> Result<RestoreStats, RestoreError> {
    // An earlier restore the window did not complete (it always does): its copies first.
    if !complete(snap, wait)? {
        let (base, size) = snap
            .regions
            .first()
            .map_or((0, 0), |c| (c.region.base, c.region.size));
        return Err(RestoreError {
            base,
            size,
            message: "the previous restore ordered on the device did not complete".into(),
            cause: None,
        });
    }
    let sh = Arc::clone(&snap.shared);
    let start = wait.clock.now();
    let mut stats = RestoreStats::default();
    // Frees and unloads of captured memory wait until the copies are done, and the
    // liveness re-check in `restore_plan` runs under the same hold: check and copy are one
    // step (SPEC §7.1). Ordered on the device, the hold lasts until the fence completed.
    let hold = sh.hold_owned(snap.regions.iter().map(|c| &c.region));
    let prefetched = snap.prefetched.take();
    let per_region = restore_plan(snap, prefetched, wait, &mut stats)?;
    let all: Vec<CopyOp> = per_region
        .iter()
        .flat_map(|(_, o)| o.iter().copied())
        .collect();
    let bytes: u64 = all.iter().map(|o| o.len).sum();
    let waited = if all.is_empty() {
        Ok(())
    } else {
        match sh.device.submit_copies(&all) {
            Ok(fence) if snap.ordered => match sh.device.order_after(fence) {
                Ok(()) => {
                    // A free of these regions now waits for the copies on the device, not for
                    // the window (which may be the thread that frees, in PASS ENTER).
                    let dev = Arc::clone(&sh.device);
                    hold.done_when(Arc::new(move |budget| {
                        matches!(dev.wait_ordered(budget), Ok(true))
                    }));
                    let (i, _) = per_region.first().expect("a non-empty batch has a region");
                    snap.pending = Some(PendingRestore {
                        fence,
                        hold,
                        first: snap.regions[*i].region,
                        regions: per_region.len(),
                        bytes,
                    });
                    stats.restored_bytes = bytes;
                    stats.seconds = wait.clock.now().saturating_sub(start).as_secs_f64();
                    return Ok(stats);
                }
                Err(e) => {
                    log::info!(
                        "[kernel-replay] agent {}: restores wait on the host: the device cannot order them ({e})",
                        sh.agent
                    );
                    snap.ordered = false;
                    wait_fence(&*sh.device, fence, wait, "restore copy fence")
                }
            },
            Ok(fence) => wait_fence(&*sh.device, fence, wait, "restore copy fence"),
            Err(e) => Err(WaitError::Backend(e)),
        }
    };
    match waited {
        Ok(()) => {}
        Err(stuck @ WaitError::Stuck { .. }) => {
            snap.poisoned = true;
            let r = per_region
                .first()
                .map(|(i, _)| snap.regions[*i].region)
                .expect("a non-empty batch has a region");
            return Err(RestoreError {
                base: r.base,
                size: r.size,
                message: format!(
                    "{stuck} (batch of {} regions, {bytes} bytes, starting with this one)",
                    per_region.len()
                ),
                cause: None,
            });
        }
        Err(WaitError::Backend(batch_err)) => {
            // Rewriting snapshot bytes is idempotent: retry region by region, which both
            // names the failing region and rides over a transient failure.
            log::warn!(
                "[kernel-replay] agent {}: restore batch failed ({batch_err}); retrying region by region",
                sh.agent
            );
            // A lost context fails every copy: the retry would only repeat the error.
            if batch_err.kind == replay_core::BackendErrorKind::DeviceLost {
                let (i, _) = per_region.first().expect("a non-empty batch has a region");
                let r = snap.regions[*i].region;
                return Err(RestoreError {
                    base: r.base,
                    size: r.size,
                    message: batch_err.to_string(),
                    cause: Some(batch_err.kind),
                });
            }
            for (i, ops) in &per_region {
                let r = snap.regions[*i].region;
                if let Err(e) = sh.copy_batch(ops, wait, "restore copy fence") {
                    let cause = match &e {
                        WaitError::Stuck { .. } => {
                            snap.poisoned = true;
                            None
                        }
                        WaitError::Backend(b) => Some(b.kind),
                    };
                    return Err(RestoreError {
                        base: r.base,
                        size: r.size,
                        message: e.to_string(),
                        cause,
                    });
                }
            }
        }
    }
    stats.restored_bytes = bytes;
    stats.seconds = wait.clock.now().saturating_sub(start).as_secs_f64();
    Ok(stats)
}

/// Whether restores of `snap` compare digests (`dirty`), which the scope check can take for
/// them.
pub(crate) fn compares(snap: &EngineSnapshot) -> bool {
    snap.mode == RestoreMode::Dirty && !snap.regions.is_empty()
}

/// Appends `dirty`'s chunk digest operations of `snap`'s live regions to `out` (call under a
/// hold of those regions); returns, per region, its index and how many ops it added.
pub(crate) fn dirty_ops(snap: &EngineSnapshot, out: &mut Vec<DigestOp>) -> Vec<(usize, usize)> {
    let live = snap.shared.liveness(snap.module_stamp);
    let mut plan = Vec::with_capacity(snap.regions.len());
    for (i, c) in snap.regions.iter().enumerate() {
        if live(&c.region, c.load) {
            plan.push((i, chunk_ops(c.region.base, c.region.size, snap.chunk, out)));
        }
    }
    plan
}

impl Prefetched {
    /// The digests of the regions `live` (indices ascending), in that order, if the check
    /// took them for every one. Usually the same regions are live: the digests as they are.
    fn for_live(self, live: &[usize]) -> Option<Vec<Digest128>> {
        if self.counts.len() == live.len() && self.counts.iter().zip(live).all(|(c, l)| c.0 == *l) {
            return Some(self.digests);
        }
        // A region was freed since the check: the live ones' digests only.
        let mut out = Vec::new();
        let mut want = live.iter().peekable();
        let mut it = self.digests.iter().copied();
        for &(i, n) in &self.counts {
            if want.peek() == Some(&&i) {
                want.next();
                out.extend(it.by_ref().take(n));
            } else {
                it.by_ref().take(n).for_each(drop);
            }
        }
        want.peek().is_none().then_some(out)
    }
}

/// Copy operations of one restore, per region, after the liveness re-check (and, for
/// `dirty`, the digest comparison, with the digests the scope check took when it did).
fn restore_plan(
    snap: &EngineSnapshot,
    prefetched: Option<Prefetched>,
    wait: &WaitSpec<'_>,
    stats: &mut RestoreStats,
) -> Result<Vec<(usize, Vec<CopyOp>)>, RestoreError> {
    let sh = &*snap.shared;
    let is_live = sh.liveness(snap.module_stamp);
    let mut live: Vec<usize> = Vec::with_capacity(snap.regions.len());
    for (i, c) in snap.regions.iter().enumerate() {
        if is_live(&c.region, c.load) {
            live.push(i);
        } else {
            log::warn!(
                "[kernel-replay] agent {}: region {:#x}+{} was freed, shrunk, reallocated or unloaded since capture; not restored",
                sh.agent,
                c.region.base,
                c.region.size
            );
        }
    }
    let full = |live: Vec<usize>| {
        let mut out = Vec::with_capacity(live.len());
        for i in live {
            let c: &CapturedRegion = &snap.regions[i];
            let mut ops = Vec::with_capacity(c.pieces.len());
            c.restore_ops(0, c.region.size, &mut ops);
            out.push((i, ops));
        }
        out
    };
    let mut out = Vec::with_capacity(live.len());
    match snap.mode {
        // `auto` is resolved by the window; handed here directly it restores everything.
        RestoreMode::Full | RestoreMode::Auto => out = full(live),
        RestoreMode::Dirty => {
            let compared: u64 = live.iter().map(|&i| snap.regions[i].region.size).sum();
            // Digests the scope check took after this pass, for every region still live (a
            // region is never live again once it was not: generations are not reused).
            let taken = prefetched.and_then(|pre| pre.for_live(&live));
            let digested = match taken {
                Some(d) => Ok(d),
                None => {
                    let mut dops = Vec::new();
                    for &i in &live {
                        let r = &snap.regions[i].region;
                        chunk_ops(r.base, r.size, snap.chunk, &mut dops);
                    }
                    sh.digest_batch(&dops, wait)
                }
            };
            let now = match digested {
                Ok(d) => d,
                Err(e) => {
                    // The digests only read: memory is as the pass left it, and writing
                    // every captured byte back repairs it as well as `dirty` would.
                    log::warn!(
                        "[kernel-replay] agent {}: digests of {} regions before a dirty restore failed ({e}); restoring them in full",
                        sh.agent,
                        live.len()
                    );
                    return Ok(full(live));
                }
            };
            stats.compared_bytes += compared;
            let mut now = now.into_iter();
            for i in live {
                let c = &snap.regions[i];
                let mut ops = Vec::new();
                // Neighbouring changed chunks are one copy: a kernel that rewrites gigabytes
                // would otherwise cost one copy call per chunk (16 GiB in 1 MiB chunks: 76 ms
                // per pass on the H200, a tenth of the copy ceiling).
                let mut run: Option<(u64, u64)> = None;
                for (k, before) in c.digests.iter().enumerate() {
                    let changed = now.next() != Some(*before);
                    let from = k as u64 * snap.chunk;
                    let to = (from + snap.chunk).min(c.region.size);
                    run = match (run, changed) {
                        (Some((s, _)), true) => Some((s, to)),
                        (None, true) => Some((from, to)),
                        (Some((s, e)), false) => {
                            c.restore_ops(s, e, &mut ops);
                            None
                        }
                        (None, false) => None,
                    };
                }
                if let Some((s, e)) = run {
                    c.restore_ops(s, e, &mut ops);
                }
                if !ops.is_empty() {
                    out.push((i, ops));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetched_digests_are_picked_for_the_regions_still_live() {
        let pre = || Prefetched {
            counts: vec![(0, 2), (2, 1), (3, 2)],
            digests: (0..5).map(Digest128).collect(),
        };
        let d = |v: &[u128]| v.iter().copied().map(Digest128).collect::<Vec<_>>();
        assert_eq!(pre().for_live(&[0, 2, 3]), Some(d(&[0, 1, 2, 3, 4])));
        // Region 2 freed since the check: its digest is skipped, the others stay aligned.
        assert_eq!(pre().for_live(&[0, 3]), Some(d(&[0, 1, 3, 4])));
        assert_eq!(pre().for_live(&[3]), Some(d(&[3, 4])));
        // A region the check did not digest: digested again by the restore.
        assert_eq!(pre().for_live(&[0, 1]), None);
        assert_eq!(pre().for_live(&[4]), None);
    }
}
