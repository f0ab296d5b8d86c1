//! The scope check after every pass (SPEC §7.2): under a hold against frees and
//! unloads, digests the watched regions outside the snapshot that are still live and compares
//! them with their digests before the first pass; the first that changed names where the
//! kernel wrote outside its scope. Under scope `predicted` the first check also digests the
//! predicted chunks, and every chunk found changed (inside the prediction: what the kernel
//! wrote; outside: a miss) goes to the kernel's prediction. When a `dirty` restore may follow,
//! the chunk digests it compares are taken in the same batch (one launch and one wait per pass
//! for both: `restore::dirty_ops`).

use replay_core::wait::WaitError;
use replay_core::{BackendError, BackendErrorKind, ScopeCheck, WaitSpec};

use crate::batch::{chunk_ops, watch_ops};
use crate::predict::Changed;
use crate::restore;
use crate::snapshot::{EngineSnapshot, Prefetched, Watched};

/// Whether a watched region of `snap` changed since capture.
pub(crate) fn check_scope(
    snap: &mut EngineSnapshot,
    wait: &WaitSpec<'_>,
) -> Result<ScopeCheck, BackendError> {
    snap.prefetched = None;
    // The policy may read the memory outside the snapshot after the first pass only, or
    // never (`OutsideCheck`): a check that does not read it still learns and fuses the
    // restore's compare.
    let watch = snap.outside.checks_after(snap.checks);
    snap.checks = snap.checks.saturating_add(1);
    let watched: &[Watched] = if watch { &snap.watched } else { &[] };
    let mut sw = crate::stopwatch::Stopwatch::new();
    // The predicted chunks are digested once, after the first pass: enough to learn what the
    // kernel writes (later passes run on the same inputs).
    let learn = snap.prediction.as_ref().is_some_and(|p| !p.learned);
    if watched.is_empty() && !learn {
        return Ok(ScopeCheck::Clean);
    }
    let sh = std::sync::Arc::clone(&snap.shared);
    let learning: Vec<usize> = if learn {
        (0..snap.regions.len())
            .filter(|&i| snap.regions[i].predicted)
            .collect()
    } else {
        Vec::new()
    };
    let fused = snap.restore_may_follow && restore::compares(snap);
    let held = snap
        .watched
        .iter()
        .map(|w| &w.region)
        .chain(learning.iter().map(|&i| &snap.regions[i].region));
    let _hold = if fused {
        sh.hold(held.chain(snap.regions.iter().map(|c| &c.region)))
    } else {
        sh.hold(held)
    };
    let mut dops = Vec::new();
    let mut checked: Vec<&Watched> = Vec::new();
    // As at capture: one digest per watched region, per chunk under `predicted`.
    let per_chunk = snap.prediction.is_some();
    for w in watched {
        // A region freed meanwhile cannot be compared; its bytes are no one's any more.
        if sh.is_live(&w.region, None) {
            if per_chunk {
                chunk_ops(w.region.base, w.region.size, snap.chunk, &mut dops);
            } else {
                watch_ops(w.region.base, w.region.size, &mut dops);
            }
            checked.push(w);
        }
    }
    let mut learned = Vec::new();
    for &i in &learning {
        let c = &snap.regions[i];
        if sh.is_live(&c.region, None) {
            chunk_ops(c.region.base, c.region.size, snap.chunk, &mut dops);
            learned.push(i);
        }
    }
    let mine = dops.len();
    let dirty = fused.then(|| restore::dirty_ops(snap, &mut dops));
    sw.lap("ops");
    let now = sh.digest_batch(&dops, wait);
    sw.lap("digest");
    sw.report(format_args!(
        "check: {} watched, {} digests ({} of the watched)",
        watched.len(),
        dops.len(),
        mine
    ));
    let now = now.map_err(|e| match e {
        WaitError::Backend(b) => b,
        stuck @ WaitError::Stuck { .. } => BackendError::new(
            BackendErrorKind::Other,
            sh.agent,
            "scope check",
            stuck.to_string(),
        ),
    })?;
    let (ours, rest) = now.split_at(mine.min(now.len()));
    let mut now = ours.iter().copied();
    let mut first: Option<u64> = None;
    let mut missed: Vec<Changed> = Vec::new();
    for w in checked {
        for (k, before) in w.digests.iter().enumerate() {
            if now.next() != Some(*before) {
                first.get_or_insert(w.region.base);
                // One digest for the whole region outside scope `predicted`.
                let span = if w.digests.len() == 1 {
                    w.region.size
                } else {
                    snap.chunk
                };
                let start = w.region.base + k as u64 * span;
                missed.push(Changed {
                    start,
                    end: (start + span).min(w.region.base + w.region.size),
                    alloc_base: w.alloc_base,
                    generation: w.region.generation,
                });
            }
        }
    }
    let mut written: Vec<Changed> = Vec::new();
    for i in learned {
        let c = &snap.regions[i];
        let alloc_base = snap
            .prediction
            .as_ref()
            .and_then(|p| {
                p.pending
                    .predicted
                    .iter()
                    .find(|(r, _)| {
                        r.generation == c.region.generation
                            && r.base <= c.region.base
                            && c.region.base < r.base + r.size
                    })
                    .map(|(r, _)| r.base)
            })
            .unwrap_or(c.region.base);
        for (k, before) in c.digests.iter().enumerate() {
            if now.next() != Some(*before) {
                let start = c.region.base + k as u64 * snap.chunk;
                written.push(Changed {
                    start,
                    end: (start + snap.chunk).min(c.region.base + c.region.size),
                    alloc_base,
                    generation: c.region.generation,
                });
            }
        }
    }
    if let Some(p) = snap.prediction.as_mut() {
        if learn || !missed.is_empty() {
            p.predictor.observe(&p.pending, &written, &missed);
        }
        p.learned = true;
        p.misses += missed.len() as u32;
    }
    if let Some(base) = first {
        return Ok(ScopeCheck::Changed { base });
    }
    if let Some(plan) = dirty {
        snap.prefetched = Some(Prefetched {
            counts: plan,
            digests: rest.to_vec(),
        });
    }
    Ok(ScopeCheck::Clean)
}
