//! Where a window's time goes (SPEC §11: every record splits the window's time into phases).
//!
//! The window measures its phases on the service's [`Clock`](crate::backend::Clock) (virtual time on the simulator),
//! as laps: every phase boundary reads the clock once and the time since the previous boundary
//! goes to the phase that just ended. So the phases partition the window exactly, from the
//! writer lock to the end of the window, and add up to [`PhaseSeconds::window`] within the
//! clock's own resolution (float rounding only). Bookkeeping between two named steps goes to
//! the step after it; nothing is left over.
//!
//! The record a tool sees in CONFIG EXIT has the phases up to the start of CONFIG EXIT; the
//! record the service emits (log line, outcome sink, summary) has the whole window, CONFIG
//! EXIT and the completion signal included, and the summary's `replay_seconds` is the sum of
//! those windows. CONFIG ENTER and the pass-count callback run before the writer lock: their
//! time is `config_enter`, not part of `window`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A window's time by phase, in seconds on the window's clock.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PhaseSeconds {
    /// The whole window, writer lock to its end: the sum of the phases below but
    /// `config_enter`.
    pub window: f64,
    /// Waiting for writes begun before the window, and the queue, agent and copy-fence drains.
    pub drain: f64,
    /// Resolving `auto`, the kernel memo, the snapshot plan and admission.
    pub plan: f64,
    /// The snapshot's capture.
    pub capture: f64,
    /// Every pass's cache flush and submission.
    pub launch: f64,
    /// Every pass's bounded wait for completion.
    pub wait: f64,
    /// The scope checks after the passes (digests of what is watched).
    pub check: f64,
    /// Restores between passes, and completing a restore ordered on the device.
    pub restore: f64,
    /// The tool's callbacks inside the window: PASS ENTER and EXIT, continue, CONFIG EXIT,
    /// and the captures a tool asks for.
    pub callbacks: f64,
    /// Releasing the snapshot, signalling the application's completion, and a declined
    /// dispatch's one ordinary run.
    pub finish: f64,
    /// CONFIG ENTER and the pass-count callback, before the writer lock (not in `window`).
    pub config_enter: f64,
}

impl PhaseSeconds {
    /// The phases of the window, added (`config_enter` is outside it).
    pub fn sum(&self) -> f64 {
        self.drain
            + self.plan
            + self.capture
            + self.launch
            + self.wait
            + self.check
            + self.restore
            + self.callbacks
            + self.finish
    }

    /// Adds `o` phase by phase.
    pub fn add(&mut self, o: &PhaseSeconds) {
        self.window += o.window;
        self.drain += o.drain;
        self.plan += o.plan;
        self.capture += o.capture;
        self.launch += o.launch;
        self.wait += o.wait;
        self.check += o.check;
        self.restore += o.restore;
        self.callbacks += o.callbacks;
        self.finish += o.finish;
        self.config_enter += o.config_enter;
    }

    /// `(name, seconds)` of every phase of the window, in window order (for tables).
    pub fn named(&self) -> [(&'static str, f64); 9] {
        [
            ("drain", self.drain),
            ("plan", self.plan),
            ("capture", self.capture),
            ("launch", self.launch),
            ("wait", self.wait),
            ("check", self.check),
            ("restore", self.restore),
            ("callbacks", self.callbacks),
            ("finish", self.finish),
        ]
    }
}

/// A phase of the window (the fields of [`PhaseSeconds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Drain,
    Plan,
    Capture,
    Launch,
    Wait,
    Check,
    Restore,
    Callbacks,
    Finish,
}

/// Laps on the window's clock, kept in whole nanoseconds so the phases add up exactly.
#[derive(Debug, Clone)]
pub(crate) struct PhaseTimer {
    start: Duration,
    last: Duration,
    acc: [Duration; 9],
}

impl PhaseTimer {
    pub(crate) fn new(now: Duration) -> Self {
        Self {
            start: now,
            last: now,
            acc: [Duration::ZERO; 9],
        }
    }

    /// Gives the time since the last boundary to `phase`; returns it.
    /// `now` is the window's clock read at the boundary.
    pub(crate) fn lap(&mut self, now: Duration, phase: Phase) -> Duration {
        let now = now.max(self.last);
        let d = now - self.last;
        self.last = now;
        self.acc[phase as usize] += d;
        d
    }

    /// The phases so far, `window` up to the last boundary.
    pub(crate) fn seconds(&self, config_enter: f64) -> PhaseSeconds {
        let s = |p: Phase| self.acc[p as usize].as_secs_f64();
        PhaseSeconds {
            window: (self.last - self.start).as_secs_f64(),
            drain: s(Phase::Drain),
            plan: s(Phase::Plan),
            capture: s(Phase::Capture),
            launch: s(Phase::Launch),
            wait: s(Phase::Wait),
            check: s(Phase::Check),
            restore: s(Phase::Restore),
            callbacks: s(Phase::Callbacks),
            finish: s(Phase::Finish),
            config_enter,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock that moves only when told.
    struct Fixed(std::cell::Cell<Duration>);
    impl Fixed {
        fn now(&self) -> Duration {
            self.0.get()
        }
        fn sleep(&self, d: Duration) {
            self.0.set(self.0.get() + d);
        }
    }

    #[test]
    fn laps_partition_the_window_and_go_to_the_phase_that_ended() {
        let c = Fixed(std::cell::Cell::new(Duration::from_millis(5)));
        let mut t = PhaseTimer::new(c.now());
        c.sleep(Duration::from_micros(30));
        t.lap(c.now(), Phase::Drain);
        c.sleep(Duration::from_micros(7));
        assert_eq!(t.lap(c.now(), Phase::Launch), Duration::from_micros(7));
        c.sleep(Duration::from_micros(11));
        t.lap(c.now(), Phase::Launch);
        t.lap(c.now(), Phase::Wait);
        let p = t.seconds(0.25);
        assert_eq!(p.drain, 30e-6);
        assert_eq!(p.launch, 18e-6);
        assert_eq!(p.wait, 0.0);
        assert!((p.window - 48e-6).abs() < 1e-15, "{}", p.window);
        assert!((p.sum() - p.window).abs() < 1e-15);
        assert_eq!(p.config_enter, 0.25);
        let mut total = PhaseSeconds::default();
        total.add(&p);
        total.add(&p);
        assert_eq!(total.launch, 36e-6);
    }
}
