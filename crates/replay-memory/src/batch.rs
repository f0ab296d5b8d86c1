//! One batch of device work behind one fence (SPEC §7.2, §7.4): copies submitted together and
//! waited for, bounded (or, for a restore ordered on the device, waited for later:
//! [`wait_fence`]), or digests submitted together, waited for and taken; a fence that does
//! not complete in time is abandoned. Digests are one per chunk of device memory for what
//! `dirty` compares, and one per region for what the scope check watches (it asks only
//! whether a region changed: one op per region keeps a check of 75 GiB at three ops instead
//! of 76 800, whose planning and results cost the host milliseconds per pass).

use replay_core::wait::{bounded, WaitError};
use replay_core::{
    AgentId, BackendError, BackendErrorKind, CopyOp, DeviceMemory, Digest128, DigestKey, DigestOp,
    Fence, MemLoc, WaitSpec,
};

/// Submits copies as one batch and waits for its fence.
pub(crate) fn copy_batch(
    dev: &dyn DeviceMemory,
    ops: &[CopyOp],
    wait: &WaitSpec<'_>,
    what: &'static str,
) -> Result<(), WaitError> {
    if ops.is_empty() {
        return Ok(());
    }
    let fence = dev.submit_copies(ops)?;
    wait_fence(dev, fence, wait, what)
}

/// Waits, bounded, for the copy batch `fence`; abandons it when it does not complete in time.
pub(crate) fn wait_fence(
    dev: &dyn DeviceMemory,
    fence: Fence,
    wait: &WaitSpec<'_>,
    what: &'static str,
) -> Result<(), WaitError> {
    let r = bounded(wait.clock, wait.bounds(), what, |budget| {
        dev.poll_fence(fence, budget).map(|done| done.then_some(()))
    });
    if matches!(r, Err(WaitError::Stuck { .. })) {
        dev.abandon_fence(fence);
    }
    r
}

/// Waits, bounded, for the digest batch `fence` of `n` ops and takes its digests; abandons it
/// when it does not complete in time.
pub(crate) fn digest_finish(
    dev: &dyn DeviceMemory,
    agent: AgentId,
    fence: Fence,
    n: usize,
    wait: &WaitSpec<'_>,
) -> Result<Vec<Digest128>, WaitError> {
    let r = bounded(wait.clock, wait.bounds(), "digest fence", |budget| {
        dev.poll_fence(fence, budget).map(|done| done.then_some(()))
    });
    match r {
        Ok(()) => {
            let d = dev.take_digests(fence)?;
            if d.len() != n {
                return Err(WaitError::Backend(BackendError::new(
                    BackendErrorKind::Other,
                    agent,
                    "take digests",
                    format!("{} digests for {n} operations", d.len()),
                )));
            }
            Ok(d)
        }
        Err(e) => {
            if matches!(e, WaitError::Stuck { .. }) {
                dev.abandon_fence(fence);
            }
            Err(e)
        }
    }
}

/// Submits digests keyed with `key` as one batch, waits, and takes them.
pub(crate) fn digest_batch(
    dev: &dyn DeviceMemory,
    key: DigestKey,
    agent: AgentId,
    ops: &[DigestOp],
    wait: &WaitSpec<'_>,
) -> Result<Vec<Digest128>, WaitError> {
    if ops.is_empty() {
        return Ok(Vec::new());
    }
    let fence = dev.submit_digests(ops, key)?;
    digest_finish(dev, agent, fence, ops.len(), wait)
}

/// Digest operations over `len` bytes of device memory at `base`, one per chunk.
pub(crate) fn chunk_ops(base: u64, len: u64, chunk: u64, out: &mut Vec<DigestOp>) -> usize {
    let mut off = 0;
    let mut n = 0;
    while off < len {
        let l = chunk.min(len - off);
        out.push(DigestOp {
            at: MemLoc::Device { addr: base + off },
            len: l,
        });
        off += l;
        n += 1;
    }
    n
}

/// The digest operation of a watched region: one op for the whole region (the scope check
/// only asks whether it changed; a backend splits a long op across its digest units).
pub(crate) fn watch_ops(base: u64, len: u64, out: &mut Vec<DigestOp>) -> usize {
    chunk_ops(base, len, len.max(1), out)
}
