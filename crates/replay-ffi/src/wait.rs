//! Bounded waits of shutdown and of a simulator's destroy (SPEC §10: shutdown joins every
//! thread the library started, never under a running replay window): how long they wait for
//! windows still open, and the polling loop on the library's clock.

use std::time::Duration;

use crate::state::Library;

/// How long `kreplay_shutdown` waits for replay windows still open, and how often it looks.
pub(crate) fn window_wait_bounds(lib: &Library) -> (Duration, Duration) {
    let p = lib.service.policy();
    // A window without callbacks runs its remaining passes; each of its waits is bounded by
    // the drain or pass timeout, so one of each bounds the pass in progress and its restore.
    let bound = p.drain_timeout.saturating_add(p.pass_timeout);
    let slice = p
        .poll_slice
        .clamp(Duration::from_millis(1), Duration::from_millis(10));
    (bound, slice)
}

/// Waits, bounded, until `busy` answers `None`; `Err(what it last answered)` at the bound.
/// Polls on the library's clock, with a progress warning per `progress_interval`.
pub(crate) fn wait_until_idle(
    lib: &Library,
    who: &str,
    busy: impl Fn() -> Option<String>,
) -> Result<(), String> {
    let (bound, slice) = window_wait_bounds(lib);
    let clock = &lib.clock;
    let start = replay_core::Clock::now(&**clock);
    let mut warned = start;
    loop {
        let Some(what) = busy() else { return Ok(()) };
        let now = replay_core::Clock::now(&**clock);
        let waited = now.saturating_sub(start);
        if waited >= bound {
            return Err(what);
        }
        if now.saturating_sub(warned) >= lib.service.policy().progress_interval {
            log::warn!(
                "[kernel-replay] {who}: {what}; waiting for them ({:.1} s of at most {:.1} s)",
                waited.as_secs_f64(),
                bound.as_secs_f64()
            );
            warned = now;
        }
        replay_core::Clock::sleep(&**clock, slice);
    }
}
