//! The simulator's clock (SPEC §6 "Bounded waits"): the wall clock, or virtual time.
//!
//! In virtual mode time is an atomic nanosecond counter that only moves when someone advances
//! it: [`Clock::sleep`] advances it at once, and the simulator's waits advance it when the
//! thing they wait for is blocked (an injected stall, a kernel that "runs" for a modelled
//! duration). Work that runs on the host (kernel bodies, copies) takes no virtual time unless
//! [`crate::SimConfig::advance_clock_for_work`] is set, so a busy pass never looks stuck just
//! because the host is slow.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use replay_core::Clock;

/// Which time the clock keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClockMode {
    /// The wall clock; `sleep` really sleeps.
    Real,
    /// An atomic nanosecond counter; `sleep` advances it instantly.
    Virtual,
}

/// The simulator's [`Clock`]; share one between the simulator and the replay service.
#[derive(Debug)]
pub struct SimClock {
    mode: ClockMode,
    origin: Instant,
    virt_ns: AtomicU64,
    lock: Mutex<()>,
    cv: Condvar,
}

impl SimClock {
    /// A clock of the given mode.
    pub fn new(mode: ClockMode) -> Self {
        Self {
            mode,
            origin: Instant::now(),
            virt_ns: AtomicU64::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// A wall clock, shared.
    pub fn real() -> Arc<Self> {
        Arc::new(Self::new(ClockMode::Real))
    }

    /// A virtual clock starting at zero, shared.
    pub fn virtual_time() -> Arc<Self> {
        Arc::new(Self::new(ClockMode::Virtual))
    }

    /// The mode.
    pub fn mode(&self) -> ClockMode {
        self.mode
    }

    /// Whether time is virtual.
    pub fn is_virtual(&self) -> bool {
        self.mode == ClockMode::Virtual
    }

    /// Advances virtual time by `d` and wakes everything waiting on it. No-op on the wall clock.
    pub fn advance(&self, d: Duration) {
        if self.mode != ClockMode::Virtual || d.is_zero() {
            return;
        }
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.virt_ns.fetch_add(ns, Ordering::AcqRel);
        let _g = self.lock.lock();
        self.cv.notify_all();
    }

    /// Advances virtual time to `t` if it is earlier. No-op on the wall clock.
    pub fn advance_to(&self, t: Duration) {
        if self.mode != ClockMode::Virtual {
            return;
        }
        let ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
        let prev = self.virt_ns.fetch_max(ns, Ordering::AcqRel);
        if prev < ns {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }

    /// Blocks until `now() >= deadline`, `stop()` says so, or `wall_cap` of real time passed.
    /// On the wall clock this sleeps; on virtual time it waits for others to advance the clock.
    /// Returns `true` when the deadline was reached.
    pub(crate) fn wait_until(
        &self,
        deadline: Duration,
        wall_cap: Duration,
        stop: &dyn Fn() -> bool,
    ) -> bool {
        let started = Instant::now();
        loop {
            let now = self.now();
            if now >= deadline {
                return true;
            }
            if stop() || started.elapsed() >= wall_cap {
                return false;
            }
            let slice = Duration::from_millis(5);
            match self.mode {
                ClockMode::Real => std::thread::sleep((deadline - now).min(slice)),
                ClockMode::Virtual => {
                    let mut g = self.lock.lock();
                    if self.now() < deadline {
                        let _ = self.cv.wait_for(&mut g, slice);
                    }
                }
            }
        }
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        match self.mode {
            ClockMode::Real => self.origin.elapsed(),
            ClockMode::Virtual => Duration::from_nanos(self.virt_ns.load(Ordering::Acquire)),
        }
    }

    fn sleep(&self, d: Duration) {
        match self.mode {
            ClockMode::Real => std::thread::sleep(d),
            ClockMode::Virtual => self.advance(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_sleep_advances_instantly() {
        let c = SimClock::virtual_time();
        let wall = Instant::now();
        c.sleep(Duration::from_secs(3600));
        assert_eq!(c.now(), Duration::from_secs(3600));
        assert!(wall.elapsed() < Duration::from_secs(1));
        c.advance_to(Duration::from_secs(10));
        assert_eq!(
            c.now(),
            Duration::from_secs(3600),
            "advance_to never goes back"
        );
    }

    #[test]
    fn virtual_wait_until_wakes_on_advance() {
        let c = SimClock::virtual_time();
        let c2 = Arc::clone(&c);
        let t = std::thread::spawn(move || {
            c2.wait_until(Duration::from_secs(5), Duration::from_secs(10), &|| false)
        });
        std::thread::sleep(Duration::from_millis(10));
        c.advance(Duration::from_secs(5));
        assert!(t.join().unwrap());
    }

    #[test]
    fn real_clock_moves() {
        let c = SimClock::real();
        let a = c.now();
        c.sleep(Duration::from_millis(2));
        assert!(c.now() >= a + Duration::from_millis(2));
        c.advance(Duration::from_secs(100));
        assert!(
            c.now() < Duration::from_secs(100),
            "advance is a no-op on the wall clock"
        );
    }
}
