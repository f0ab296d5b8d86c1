//! Capture (SPEC §7.2, §7.3): under a hold against frees and unloads, re-checks the plan's
//! regions, places them over the device, pinned-host and pageable-host tiers in address order
//! (a region split where a tier's budget runs out, a tier that cannot allocate handing its
//! share on), copies them to pooled backing memory in one fenced batch, and digests what
//! `dirty` compares, what scope `predicted` learns from, and what the scope check watches
//! (every tracked byte outside the captured parts).

use std::collections::HashMap;
use std::sync::Arc;

use replay_core::policy::{OutsideCheck, Policy, RestoreMode, Scope};
use replay_core::wait::WaitError;
use replay_core::{
    CaptureStats, CopyOp, DigestOp, MemLoc, RegionRef, SnapshotError, SnapshotPlan, Tier, WaitSpec,
};
use smallvec::SmallVec;

use crate::batch::{chunk_ops, watch_ops};
use crate::classify::{classify, Treatment};
use crate::pool::Block;
use crate::predict::{uncovered, Predictor};
use crate::shared::{Shared, MODULE_GENERATION};
use crate::snapshot::{CapturedRegion, EngineSnapshot, Piece, Prediction, Watched};
use crate::tiers::tier_caps;

/// Captures `plan` for the window; `host_available` overrides `/proc/meminfo` for the tier
/// budgets; `predictor` holds what a plan under scope `predicted` predicted.
pub(crate) fn capture(
    sh: &Arc<Shared>,
    predictor: &Arc<Predictor>,
    host_available: Option<u64>,
    plan: &SnapshotPlan,
    policy: &Policy,
    wait: &WaitSpec<'_>,
) -> Result<EngineSnapshot, SnapshotError> {
    let start = wait.clock.now();
    let fail = |message: String| SnapshotError { message };
    let mut sw = crate::stopwatch::Stopwatch::new();

    // Memory outside the scope that the scope check watches (SPEC §7.2): under every
    // scope, every tracked region of a captured or capturable class that is not captured,
    // so a write through a pointer stored in device memory into fine-grained memory is seen
    // like one into coarse memory. Host-resident memory (pinned, registered, managed) is
    // watched only where the plan captures it (an argument reaches it): the host writes it
    // at any time (a loader's pin-memory thread), which is no write of the kernel's, and
    // digesting all of it every pass would cross the host link for nothing.
    // Under scope `predicted` the plan captures parts of an allocation: the rest of it is
    // watched, on the allocation's chunk grid (the parts start and end on it).
    let pending = if plan.scope == Scope::Predicted {
        predictor.take(plan.ticket)
    } else {
        None
    };
    let mut parts: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    for l in &plan.regions {
        parts
            .entry(l.generation)
            .or_default()
            .push((l.base, l.base.saturating_add(l.size)));
    }
    let mut watched: Vec<Watched> = Vec::new();
    for r in sh.tracker.regions(sh.agent) {
        if r.size == 0
            || !matches!(
                classify(r.class),
                Treatment::Captured | Treatment::CapturableUntracked
            )
        {
            continue;
        }
        if crate::classify::host_resident(r.class) && !parts.contains_key(&r.generation) {
            continue;
        }
        match parts.get_mut(&r.generation) {
            None => watched.push(Watched {
                region: r,
                alloc_base: r.base,
                digests: Vec::new(),
            }),
            Some(p) => {
                p.sort_unstable();
                for (base, size) in uncovered(r.base, r.size, p) {
                    watched.push(Watched {
                        region: RegionRef {
                            base,
                            size,
                            generation: r.generation,
                            class: r.class,
                        },
                        alloc_base: r.base,
                        digests: Vec::new(),
                    });
                }
            }
        }
    }

    // A policy that never checks outside the snapshot needs no digests of it before.
    if policy.outside_check == OutsideCheck::Never {
        watched.clear();
    }
    sw.lap("watched");
    // Frees and unloads of this memory wait until the copies and digests below are done;
    // taken before the liveness re-check so that its answer stays true meanwhile.
    let hold = sh.hold(plan.regions.iter().chain(watched.iter().map(|w| &w.region)));
    watched.retain(|w| sh.is_live(&w.region, None));

    // Liveness re-check: the plan may be stale. Read under the hold: a later load or unload
    // changes the stamp, and the restores' liveness then looks each module region up again.
    let module_stamp = sh.modules.generation(sh.agent);
    let mut stats = CaptureStats::default();
    let mut live: Vec<RegionRef> = Vec::with_capacity(plan.regions.len());
    let mut loads: Vec<Option<u64>> = Vec::with_capacity(plan.regions.len());
    for r in &plan.regions {
        let load = if r.generation == MODULE_GENERATION {
            sh.modules.load_generation(sh.agent, r.base)
        } else {
            None
        };
        // A module region is live when its code object is loaded (the load just read).
        let live_now = if r.generation == MODULE_GENERATION {
            load.is_some()
        } else {
            sh.is_live(r, load)
        };
        if live_now {
            live.push(*r);
            loads.push(load);
        } else {
            log::warn!(
                "[kernel-replay] agent {}: region {:#x}+{} was freed or reallocated since planning; not captured",
                sh.agent,
                r.base,
                r.size
            );
            stats.skipped_regions += 1;
        }
    }

    sw.lap("hold+live");
    // Placement: device, then pinned, then pageable, splitting a region where a tier runs out;
    // a tier that fails to allocate hands its share to the later ones.
    let caps = tier_caps(sh, host_available, policy);
    let total: u64 = live.iter().map(|r| r.size).sum();
    if total > caps.iter().sum() {
        return Err(fail(format!(
            "{total} bytes do not fit the tiers (device {}, pinned {}, pageable {} bytes)",
            caps[0], caps[1], caps[2]
        )));
    }
    sw.lap("caps");
    let mut need = [0u64; 3];
    {
        let mut left = total;
        for i in 0..3 {
            need[i] = left.min(caps[i]);
            left -= need[i];
        }
    }
    let mut cursors: [TierCursor; 3] = Default::default();
    for (i, tier) in Tier::ALL.into_iter().enumerate() {
        if need[i] == 0 {
            continue;
        }
        match sh.pool.acquire(tier, need[i]) {
            Ok(b) => {
                cursors[i].blocks = b;
                cursors[i].left = need[i];
            }
            Err(e) => {
                // The tier reported room it could not give (fragmentation, another
                // process): its share moves to the later tiers where their caps allow.
                let mut carry = need[i];
                for j in i + 1..3 {
                    let take = carry.min(caps[j] - need[j]);
                    need[j] += take;
                    carry -= take;
                }
                if carry == 0 {
                    log::info!(
                        "[kernel-replay] agent {}: {} bytes of {} backing memory could not be allocated ({e}); using the next tiers",
                        sh.agent,
                        need[i],
                        tier.as_str()
                    );
                    need[i] = 0;
                    continue;
                }
                let blocks = cursors.into_iter().flat_map(|c| c.blocks).collect();
                sh.pool.give_back(blocks, Some(policy.pool_keep_bytes));
                return Err(fail(format!(
                    "could not allocate {} bytes of {} backing memory, and the later tiers have no room for them: {e}",
                    need[i],
                    tier.as_str()
                )));
            }
        }
    }

    sw.lap("acquire");
    // Assign pieces: regions in order fill the device tier, then pinned, then pageable.
    let mut regions: Vec<CapturedRegion> = Vec::with_capacity(live.len());
    let mut ops: Vec<CopyOp> = Vec::with_capacity(live.len());
    let mut t = 0;
    for r in &live {
        let mut pieces: SmallVec<[Piece; 2]> = SmallVec::new();
        let mut off = 0;
        while off < r.size {
            while cursors[t].left == 0 {
                t += 1;
            }
            let c = &mut cursors[t];
            let b = c.blocks[c.idx];
            if c.used == b.size {
                c.idx += 1;
                c.used = 0;
                continue;
            }
            let len = (r.size - off).min(b.size - c.used).min(c.left);
            pieces.push(Piece {
                offset: off,
                len,
                backing: b.id,
                backing_offset: c.used,
            });
            ops.push(CopyOp {
                src: MemLoc::Device { addr: r.base + off },
                dst: MemLoc::Backing {
                    id: b.id,
                    offset: c.used,
                },
                len,
            });
            stats.tier_bytes.add(b.tier, len);
            c.used += len;
            c.left -= len;
            off += len;
        }
        let predicted = pending.as_ref().is_some_and(|p| p.spans.contains(r));
        regions.push(CapturedRegion {
            region: *r,
            load: None,
            pieces,
            digests: Vec::new(),
            predicted,
        });
    }
    for (c, load) in regions.iter_mut().zip(&loads) {
        c.load = *load;
    }
    let blocks: Vec<Block> = cursors.into_iter().flat_map(|c| c.blocks).collect();

    sw.lap("pieces");
    let copy_failed = |e: WaitError, blocks: Vec<Block>| {
        let message = format!(
            "copying {total} bytes in {} regions to backing memory failed: {e}",
            live.len()
        );
        if matches!(e, WaitError::Stuck { .. }) {
            sh.pool.quarantine(&blocks);
        } else {
            sh.pool.give_back(blocks, Some(policy.pool_keep_bytes));
        }
        fail(message)
    };
    // The copies and the digests below read the same application bytes and write memory of
    // their own: both are in flight at once, and each is waited for once (the copies are
    // usually done when the digests are), instead of a full round trip each.
    let copy_fence = if ops.is_empty() {
        None
    } else {
        match sh.device.submit_copies(&ops) {
            Ok(f) => Some(f),
            Err(e) => return Err(copy_failed(WaitError::Backend(e), blocks)),
        }
    };
    sw.lap("copy submit");

    // Digests before the first pass: of the captured chunks for `dirty` (and of the
    // predicted ones, which the first check learns from), and of every tracked byte outside
    // the snapshot for the scope check.
    let chunk = policy.chunk_bytes.max(1);
    let dirty = policy.restore == RestoreMode::Dirty;
    let mut dops: Vec<DigestOp> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    for c in regions.iter().filter(|c| dirty || c.predicted) {
        counts.push(chunk_ops(c.region.base, c.region.size, chunk, &mut dops));
    }
    // One digest per watched region is enough to see a write outside the scope; under
    // `predicted` each chunk gets its own, so a miss names the chunks the prediction grows by.
    let per_chunk = pending.is_some();
    for w in &watched {
        counts.push(if per_chunk {
            chunk_ops(w.region.base, w.region.size, chunk, &mut dops)
        } else {
            watch_ops(w.region.base, w.region.size, &mut dops)
        });
    }
    sw.lap("digest ops");
    let digest_fence = if dops.is_empty() {
        Ok(None)
    } else {
        sh.device
            .submit_digests(&dops, sh.key)
            .map(Some)
            .map_err(WaitError::Backend)
    };
    sw.lap("digest submit");
    let copied = match copy_fence {
        Some(f) => crate::batch::wait_fence(&*sh.device, f, wait, "snapshot copy fence"),
        None => Ok(()),
    };
    sw.lap("copy wait");
    if let Err(e) = copied {
        // The digests beside the copies are not waited for: they are dropped with them.
        if let Ok(Some(f)) = digest_fence {
            sh.device.abandon_fence(f);
        }
        drop(hold);
        return Err(copy_failed(e, blocks));
    }
    let digested = match digest_fence {
        Ok(Some(f)) => crate::batch::digest_finish(&*sh.device, sh.agent, f, dops.len(), wait),
        Ok(None) => Ok(Vec::new()),
        Err(e) => Err(e),
    };
    sw.lap("digest");
    drop(hold);
    sw.report(format_args!(
        "capture: {} regions ({total} bytes, {} copies), {} watched ({} bytes), {} digests",
        live.len(),
        ops.len(),
        watched.len(),
        watched.iter().map(|w| w.region.size).sum::<u64>(),
        dops.len()
    ));
    match digested {
        Ok(digests) => {
            let mut it = digests.into_iter();
            let mut n = counts.into_iter();
            for c in regions.iter_mut().filter(|c| dirty || c.predicted) {
                c.digests = it.by_ref().take(n.next().unwrap_or(0)).collect();
            }
            for w in &mut watched {
                w.digests = it.by_ref().take(n.next().unwrap_or(0)).collect();
            }
        }
        Err(e) => {
            // Digests read only device memory: the backing is safe to pool.
            sh.pool.give_back(blocks, Some(policy.pool_keep_bytes));
            return Err(fail(format!("digests before the first pass failed: {e}")));
        }
    }

    stats.captured_bytes = total;
    stats.captured_regions = regions.len() as u32;
    stats.seconds = wait.clock.now().saturating_sub(start).as_secs_f64();
    Ok(EngineSnapshot {
        shared: Arc::clone(sh),
        regions,
        blocks,
        watched,
        stats,
        mode: policy.restore,
        chunk,
        keep: policy.pool_keep_bytes,
        poisoned: false,
        prediction: pending.map(|pending| Prediction {
            predictor: Arc::clone(predictor),
            pending,
            learned: false,
            misses: 0,
        }),
        restore_may_follow: true,
        outside: policy.outside_check,
        checks: 0,
        module_stamp,
        prefetched: None,
        ordered: false,
        pending: None,
    })
}

/// Where placement stands in one tier's blocks.
#[derive(Debug, Default)]
struct TierCursor {
    blocks: Vec<Block>,
    idx: usize,
    used: u64,
    /// Bytes still to place in this tier.
    left: u64,
}
