//! The copy fence (SPEC §6 step 6): asynchronous copies bypass the queues and their lock, so
//! the copy wrappers ([`crate::intercept::copy`]) wrap the async-copy entries and record every
//! copy in flight, with the agents it touches and its completion signal. A drain of an agent
//! ([`crate::agent`]) then waits, bounded, until [`CopyFence::pending`] reports none for it.
//!
//! It sits with the tracker because it is what the tracker is: a record of what the
//! application did to memory, fed by the wrapped entries (here, the async copies) and read by
//! the window. The memory layer's own copies ([`crate::memory`]) go through the original entries
//! and never reach it.
//!
//! A copy decrements its completion signal by one when it finishes. A record is complete when
//! the signal has dropped below the value it had at submission by as many copies as were
//! recorded on it at once (several copies may share one signal), or when the value rose above
//! that value (the application waited and re-armed it). The ambiguous case, a signal re-armed
//! to exactly its old value while a record of it is still here, stays pending: a drain then
//! times out and the dispatch is declined, never corrupted. (Stage 2 retires such records by
//! also wrapping the signal-store entries.)

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use replay_core::AgentId;

#[derive(Debug, Clone)]
struct InFlight {
    ticket: u64,
    agents: Vec<AgentId>,
    signal: u64,
    /// Signal value when the first copy still recorded on this signal was submitted.
    armed_at: i64,
    /// Complete when the signal's value is at most this.
    done_at: i64,
}

/// Asynchronous copies in flight, per agent.
#[derive(Debug, Default)]
pub struct CopyFence {
    records: Mutex<Vec<InFlight>>,
    next: AtomicU64,
    submitted: AtomicU64,
}

impl CopyFence {
    /// An empty fence.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a copy touching `agents` that will decrement `signal` (a handle; 0 = none, not
    /// recorded) whose value is `value` now. Returns a ticket for [`CopyFence::cancel`].
    pub fn record(&self, agents: &[AgentId], signal: u64, value: i64) -> Option<u64> {
        self.submitted.fetch_add(1, Ordering::Relaxed);
        if signal == 0 {
            return None;
        }
        let ticket = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut records = self.records.lock();
        let (armed_at, done_at) = match records
            .iter()
            .filter(|r| r.signal == signal && value <= r.armed_at)
            .map(|r| (r.armed_at, r.done_at))
            .min_by_key(|&(_, d)| d)
        {
            Some((armed, last_done)) => (armed, last_done - 1),
            None => (value, value - 1),
        };
        records.push(InFlight {
            ticket,
            agents: agents.to_vec(),
            signal,
            armed_at,
            done_at,
        });
        Some(ticket)
    }

    /// Forgets a copy the runtime refused.
    pub fn cancel(&self, ticket: Option<u64>) {
        if let Some(t) = ticket {
            self.records.lock().retain(|r| r.ticket != t);
        }
    }

    /// Copies still in flight that touch `agent`, after retiring every complete record;
    /// `load` reads a signal's current value.
    pub fn pending(&self, agent: AgentId, load: impl Fn(u64) -> i64) -> usize {
        let mut records = self.records.lock();
        records.retain(|r| {
            let v = load(r.signal);
            !(v <= r.done_at || v > r.armed_at)
        });
        records.iter().filter(|r| r.agents.contains(&agent)).count()
    }

    /// Records held (complete or not), for diagnostics.
    pub fn recorded(&self) -> usize {
        self.records.lock().len()
    }

    /// Copies submitted through the wrappers since the start.
    pub fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const A: AgentId = AgentId(0);
    const B: AgentId = AgentId(1);

    #[test]
    fn a_copy_is_pending_until_its_signal_drops() {
        let f = CopyFence::new();
        f.record(&[A, B], 7, 1);
        let mut values = HashMap::from([(7u64, 1i64)]);
        assert_eq!(f.pending(A, |s| values[&s]), 1);
        assert_eq!(f.pending(B, |s| values[&s]), 1);
        assert_eq!(f.pending(AgentId(9), |s| values[&s]), 0);
        values.insert(7, 0);
        assert_eq!(f.pending(A, |s| values[&s]), 0);
        assert_eq!(f.recorded(), 0);
        assert_eq!(f.submitted(), 1);
    }

    #[test]
    fn copies_sharing_a_signal_complete_one_decrement_each() {
        let f = CopyFence::new();
        f.record(&[A], 7, 2);
        f.record(&[A], 7, 2);
        assert_eq!(f.pending(A, |_| 1), 1, "one of two finished");
        assert_eq!(f.pending(A, |_| 0), 0);
    }

    #[test]
    fn a_rearmed_signal_retires_old_records_and_no_signal_is_not_recorded() {
        let f = CopyFence::new();
        f.record(&[A], 7, 1);
        assert_eq!(f.pending(A, |_| 5), 0, "re-armed above: the copy finished");
        assert_eq!(f.record(&[A], 0, 0), None);
        assert_eq!(f.recorded(), 0);
        let t = f.record(&[A], 8, 1);
        f.cancel(t);
        assert_eq!(f.pending(A, |_| 1), 0);
        assert_eq!(f.submitted(), 3);
    }
}
