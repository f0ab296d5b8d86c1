//! Signals (SPEC §9.1): a value with real waiting (a mutex and a condition variable per
//! signal), the doorbell hook a store to an intercepting queue's doorbell runs, and the
//! conditions of `hsa_signal_condition_t`. Their handles are the registry's.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// What a store to a doorbell signal rings: an intercepting queue, which registers itself on
/// its doorbell (the queues are above this file, so the signal knows it only as this).
pub(crate) trait Doorbell: Send + Sync {
    /// The doorbell was stored to (`hsa_signal_store_*`), on the storing thread.
    fn rung(self: Arc<Self>);
}

/// A signal: a value with real waiting. A doorbell signal of an intercepting queue carries the
/// queue it rings.
pub struct SignalObj {
    value: Mutex<i64>,
    cv: Condvar,
    pub(crate) doorbell_of: Mutex<Option<Weak<dyn Doorbell>>>,
}

impl std::fmt::Debug for SignalObj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SignalObj({})", *self.value.lock())
    }
}

impl SignalObj {
    /// A signal holding `initial`, ringing no doorbell.
    pub(super) fn new(initial: i64) -> Self {
        Self {
            value: Mutex::new(initial),
            cv: Condvar::new(),
            doorbell_of: Mutex::new(None),
        }
    }

    /// The value.
    pub fn load(&self) -> i64 {
        *self.value.lock()
    }

    /// Stores without ringing a doorbell hook.
    pub fn store_silent(&self, v: i64) {
        *self.value.lock() = v;
        self.cv.notify_all();
    }

    /// Applies `f` to the value, returns the previous one.
    pub fn update(&self, f: impl FnOnce(i64) -> i64) -> i64 {
        let mut g = self.value.lock();
        let old = *g;
        *g = f(old);
        drop(g);
        self.cv.notify_all();
        old
    }

    /// After a store (`hsa_signal_store_*`): if this is an intercepting queue's doorbell, runs
    /// the interception.
    pub(crate) fn on_store(&self) {
        let Some(queue) = self.doorbell_of.lock().as_ref().and_then(Weak::upgrade) else {
            return;
        };
        queue.rung();
    }

    /// Waits until `cond(value)` or `timeout`; returns the last value seen.
    pub fn wait(&self, cond: impl Fn(i64) -> bool, timeout: Option<Duration>) -> i64 {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut g = self.value.lock();
        loop {
            if cond(*g) {
                return *g;
            }
            match deadline {
                Some(d) => {
                    if Instant::now() >= d || self.cv.wait_until(&mut g, d).timed_out() {
                        return *g;
                    }
                }
                None => self.cv.wait(&mut g),
            }
        }
    }
}

/// Whether `v` satisfies `hsa_signal_condition_t` `cond` against `compare`.
pub(crate) fn condition(cond: u32, v: i64, compare: i64) -> bool {
    match cond {
        0 => v == compare,
        1 => v != compare,
        2 => v < compare,
        _ => v >= compare,
    }
}
