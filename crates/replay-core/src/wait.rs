//! Bounded waits (SPEC §6): every wait has a deadline on the backend's [`Clock`], polls in
//! short slices, and warns at each progress interval. Nothing here holds a lock.

use std::time::Duration;

use crate::backend::Clock;
use crate::error::BackendError;

/// Why a bounded wait ended without its result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// The deadline passed.
    #[error("{what} did not complete within {timeout:?}")]
    Stuck {
        /// What was waited for.
        what: &'static str,
        /// The bound.
        timeout: Duration,
    },
    /// The backend failed while polling.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The bounds of one wait.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Total bound.
    pub timeout: Duration,
    /// Longest single poll.
    pub slice: Duration,
    /// Interval of the progress warning.
    pub progress: Duration,
}

/// Polls until `poll` yields, or the deadline passes. `poll` is given the time it may block.
/// A poll that returns early without the clock moving is followed by a sleep of its budget,
/// so the wait ends on any clock, virtual ones included.
pub fn bounded<T>(
    clock: &dyn Clock,
    bounds: Bounds,
    what: &'static str,
    mut poll: impl FnMut(Duration) -> Result<Option<T>, BackendError>,
) -> Result<T, WaitError> {
    let start = clock.now();
    let mut next_progress = bounds.progress;
    loop {
        let elapsed = clock.now().saturating_sub(start);
        if elapsed >= bounds.timeout {
            return Err(WaitError::Stuck {
                what,
                timeout: bounds.timeout,
            });
        }
        let budget = bounds.slice.min(bounds.timeout - elapsed);
        let before = clock.now();
        if let Some(v) = poll(budget)? {
            return Ok(v);
        }
        if clock.now() == before {
            clock.sleep(budget);
        }
        let elapsed = clock.now().saturating_sub(start);
        if elapsed >= next_progress && elapsed < bounds.timeout {
            log::warn!(
                "[kernel-replay] still waiting for {what} after {elapsed:?} (bound {:?})",
                bounds.timeout
            );
            next_progress += bounds.progress;
        }
    }
}

impl crate::backend::WaitSpec<'_> {
    /// The bounds of a [`crate::wait::bounded`] wait under this spec.
    pub fn bounds(&self) -> Bounds {
        Bounds {
            timeout: self.timeout,
            slice: self.slice,
            progress: self.progress,
        }
    }
}
