//! Laps of one engine step (SPEC §11: where the time goes), logged at `trace` level: where a
//! capture's, a plan's or a check's time goes on a real program (the window's phases say how long
//! the step took, not why).

use std::fmt::Arguments;
use std::time::Instant;

/// Lap times of one step; does nothing unless `trace` logging is on.
pub(crate) struct Stopwatch {
    at: Option<Instant>,
    laps: Vec<(&'static str, f64)>,
}

impl Stopwatch {
    pub(crate) fn new() -> Self {
        let on = log::log_enabled!(log::Level::Trace);
        Self {
            at: on.then(Instant::now),
            laps: Vec::new(),
        }
    }

    /// Ends the current lap under `name`.
    pub(crate) fn lap(&mut self, name: &'static str) {
        if let Some(at) = self.at.as_mut() {
            let now = Instant::now();
            self.laps.push((name, (now - *at).as_secs_f64() * 1e6));
            *at = now;
        }
    }

    /// Logs the laps (microseconds) after `what`.
    pub(crate) fn report(&self, what: Arguments<'_>) {
        if self.at.is_some() {
            let laps: Vec<String> = self
                .laps
                .iter()
                .map(|(n, us)| format!("{n} {us:.0}"))
                .collect();
            log::trace!("[kernel-replay] {what}; us: {}", laps.join(", "));
        }
    }
}
