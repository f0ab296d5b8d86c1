//! The scope check after every pass (SPEC §7.2): under a hold against frees and unloads, digests
//! the watched regions outside the snapshot that are still live and compares them with their
//! digests before the first pass; the first that changed names where the kernel wrote outside
//! its scope. When a `dirty` restore may follow, the chunk digests it compares are taken in the
//! same batch (one launch and one wait per pass for both: `restore::dirty_ops`).

use replay_core::wait::WaitError;
use replay_core::{BackendError, BackendErrorKind, ScopeCheck, WaitSpec};

use crate::batch::watch_ops;
use crate::restore;
use crate::snapshot::{EngineSnapshot, Watched};

/// Whether a watched region of `snap` changed since capture.
pub(crate) fn check_scope(
    snap: &mut EngineSnapshot,
    wait: &WaitSpec<'_>,
) -> Result<ScopeCheck, BackendError> {
    snap.prefetched = None;
    if snap.watched.is_empty() {
        return Ok(ScopeCheck::Clean);
    }
    let sh = std::sync::Arc::clone(&snap.shared);
    let fused = snap.restore_may_follow && restore::compares(snap);
    let held = snap.watched.iter().map(|w| &w.region);
    let _hold = if fused {
        sh.hold(held.chain(snap.regions.iter().map(|c| &c.region)))
    } else {
        sh.hold(held)
    };
    let mut dops = Vec::new();
    let mut checked: Vec<&Watched> = Vec::new();
    for w in &snap.watched {
        // A region freed meanwhile cannot be compared; its bytes are no one's any more.
        if sh.is_live(&w.region, None) {
            watch_ops(w.region.base, w.region.size, &mut dops);
            checked.push(w);
        }
    }
    let watched_ops = dops.len();
    let dirty = fused.then(|| restore::dirty_ops(snap, &mut dops));
    let now = sh.digest_batch(&dops, wait).map_err(|e| match e {
        WaitError::Backend(b) => b,
        stuck @ WaitError::Stuck { .. } => BackendError::new(
            BackendErrorKind::Other,
            sh.agent,
            "scope check",
            stuck.to_string(),
        ),
    })?;
    let mut changed_at = None;
    for (w, now) in checked.iter().zip(&now[..watched_ops]) {
        if w.digests.first() != Some(now) {
            changed_at = Some(w.region.base);
            break;
        }
    }
    if let Some(base) = changed_at {
        return Ok(ScopeCheck::Changed { base });
    }
    if let Some(plan) = dirty {
        snap.prefetched = Some(restore::split_digests(plan, &now[watched_ops..]));
    }
    Ok(ScopeCheck::Clean)
}
