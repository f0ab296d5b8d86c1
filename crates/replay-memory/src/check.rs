//! The scope check after every pass (SPEC §7.2): under a hold against frees and unloads, digests
//! the watched regions outside the snapshot that are still live and compares them with their
//! digests before the first pass; the first that changed names where the kernel wrote outside
//! its scope.

use replay_core::wait::WaitError;
use replay_core::{BackendError, BackendErrorKind, ScopeCheck, WaitSpec};

use crate::batch::chunk_ops;
use crate::snapshot::{EngineSnapshot, Watched};

/// Whether a watched region of `snap` changed since capture.
pub(crate) fn check_scope(
    snap: &EngineSnapshot,
    wait: &WaitSpec<'_>,
) -> Result<ScopeCheck, BackendError> {
    if snap.watched.is_empty() {
        return Ok(ScopeCheck::Clean);
    }
    let sh = &*snap.shared;
    let _hold = sh.hold(snap.watched.iter().map(|w| &w.region));
    let mut dops = Vec::new();
    let mut checked: Vec<&Watched> = Vec::new();
    for w in &snap.watched {
        // A region freed meanwhile cannot be compared; its bytes are no one's any more.
        if sh.is_live(&w.region, None) {
            chunk_ops(w.region.base, w.region.size, snap.chunk, &mut dops);
            checked.push(w);
        }
    }
    let now = sh.digest_batch(&dops, wait).map_err(|e| match e {
        WaitError::Backend(b) => b,
        stuck @ WaitError::Stuck { .. } => BackendError::new(
            BackendErrorKind::Other,
            sh.agent,
            "scope check",
            stuck.to_string(),
        ),
    })?;
    let mut now = now.into_iter();
    for w in checked {
        let mut changed = false;
        for before in &w.digests {
            changed |= now.next() != Some(*before);
        }
        if changed {
            return Ok(ScopeCheck::Changed {
                base: w.region.base,
            });
        }
    }
    Ok(ScopeCheck::Clean)
}
