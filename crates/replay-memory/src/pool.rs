//! Backing memory pooled per agent (SPEC §7.3): blocks a capture takes (smallest free block
//! that fits, else largest first plus one new allocation for the rest), gives back when its
//! snapshot is dropped or a capture fails, trims per tier to a keep limit, releases at once
//! when the application runs out of memory or after the pool sat unused for the policy's
//! bound (`release_idle`), and leaks on purpose when an abandoned copy may still write them
//! (quarantine).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use replay_core::{AgentId, BackendError, BackingId, Clock, DeviceMemory, SystemClock, Tier};

/// A backing allocation, in use by a snapshot or free in the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) id: BackingId,
    pub(crate) tier: Tier,
    pub(crate) size: u64,
}

/// The pool's books, under [`BackingPool`]'s lock.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    free: Vec<Block>,
    /// Bytes of every backing allocation not freed: free, in use and quarantined.
    held: u64,
    peak: u64,
    /// Bytes leaked on purpose: an abandoned copy may still write them.
    quarantined: u64,
    /// `release_pools` ran while a snapshot held blocks: free them when they come back.
    release_returning: bool,
    /// When blocks last came back (the pool's clock): the start of its idle time.
    returned_at: Option<Duration>,
}

impl Pool {
    fn free_total(&self) -> u64 {
        self.free.iter().map(|b| b.size).sum()
    }

    /// Free pooled bytes of `tier`.
    pub(crate) fn free_bytes(&self, tier: Tier) -> u64 {
        self.free
            .iter()
            .filter(|b| b.tier == tier)
            .map(|b| b.size)
            .sum()
    }

    /// Takes free blocks of `tier` covering as much of `need` as possible: the smallest single
    /// block that covers it, else the largest blocks first.
    fn take(&mut self, tier: Tier, need: u64) -> Vec<Block> {
        let fit = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.tier == tier && b.size >= need)
            .min_by_key(|(_, b)| b.size)
            .map(|(i, _)| i);
        if let Some(i) = fit {
            return vec![self.free.swap_remove(i)];
        }
        let mut mine: Vec<Block> = Vec::new();
        let mut rest = Vec::with_capacity(self.free.len());
        for b in self.free.drain(..) {
            if b.tier == tier {
                mine.push(b);
            } else {
                rest.push(b);
            }
        }
        mine.sort_by_key(|b| std::cmp::Reverse(b.size));
        let mut got = 0;
        let mut taken = Vec::new();
        for b in mine {
            if got < need {
                got += b.size;
                taken.push(b);
            } else {
                rest.push(b);
            }
        }
        self.free = rest;
        taken
    }

    /// Blocks to free so that each tier's free pool is at most `keep` bytes; the largest
    /// blocks that fit are kept, since they serve the most captures.
    fn trim(&mut self, keep: u64) -> Vec<Block> {
        let mut out = Vec::new();
        for tier in Tier::ALL {
            let mut mine: Vec<Block> = Vec::new();
            self.free.retain(|b| {
                if b.tier == tier {
                    mine.push(*b);
                    false
                } else {
                    true
                }
            });
            mine.sort_by_key(|b| std::cmp::Reverse(b.size));
            let mut kept = 0u64;
            for b in mine {
                if kept + b.size <= keep {
                    kept += b.size;
                    self.free.push(b);
                } else {
                    out.push(b);
                }
            }
        }
        self.held -= out.iter().map(|b| b.size).sum::<u64>();
        out
    }
}

/// One agent's pool of backing blocks, allocated and freed through its [`DeviceMemory`].
pub(crate) struct BackingPool {
    agent: AgentId,
    device: Arc<dyn DeviceMemory>,
    state: Mutex<Pool>,
    /// Measures idle time (the service's clock, so the simulator's virtual time too).
    pub(crate) clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for BackingPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.state.lock().fmt(f)
    }
}

impl BackingPool {
    pub(crate) fn new(agent: AgentId, device: Arc<dyn DeviceMemory>) -> Self {
        Self {
            agent,
            device,
            state: Mutex::new(Pool::default()),
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// The books, locked (tier budgets read several tiers' free bytes at once).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Pool> {
        self.state.lock()
    }

    /// Free pooled blocks covering `need` bytes of `tier`, plus one new allocation for the rest.
    pub(crate) fn acquire(&self, tier: Tier, need: u64) -> Result<Vec<Block>, BackendError> {
        let mut blocks = self.state.lock().take(tier, need);
        let have: u64 = blocks.iter().map(|b| b.size).sum();
        if have < need {
            let size = need - have;
            match self.device.alloc_backing(tier, size) {
                Ok(id) => {
                    let mut pool = self.state.lock();
                    pool.held += size;
                    pool.peak = pool.peak.max(pool.held);
                    blocks.push(Block { id, tier, size });
                }
                Err(e) => {
                    self.give_back(blocks, None);
                    return Err(e);
                }
            }
        }
        Ok(blocks)
    }

    /// Returns blocks to the pool, then trims it to `keep` (when given).
    pub(crate) fn give_back(&self, blocks: Vec<Block>, keep: Option<u64>) {
        let now = self.clock.now();
        let to_free = {
            let mut pool = self.state.lock();
            pool.free.extend(blocks);
            pool.returned_at = Some(now);
            if std::mem::take(&mut pool.release_returning) {
                pool.trim(0)
            } else {
                keep.map(|k| pool.trim(k)).unwrap_or_default()
            }
        };
        // Free outside the lock: the backend may take its time.
        for b in to_free {
            self.device.free_backing(b.id);
        }
    }

    /// Leaks blocks an abandoned copy may still write: freeing or reusing them could corrupt
    /// whatever uses the memory next.
    pub(crate) fn quarantine(&self, blocks: &[Block]) {
        let bytes: u64 = blocks.iter().map(|b| b.size).sum();
        if bytes > 0 {
            log::warn!(
                "[kernel-replay] agent {}: leaking {bytes} bytes of backing memory that an abandoned copy may still write",
                self.agent
            );
            self.state.lock().quarantined += bytes;
        }
    }

    /// Frees every free block now; blocks in use are freed when they come back.
    pub(crate) fn release(&self) {
        let to_free = {
            let mut pool = self.state.lock();
            let in_use = pool.held - pool.quarantined - pool.free_total();
            pool.release_returning = in_use > 0;
            pool.trim(0)
        };
        for b in to_free {
            self.device.free_backing(b.id);
        }
    }

    /// Frees every free block when no snapshot holds any and none came back for `after` or
    /// longer; zero `after` never does. Returns the bytes freed.
    pub(crate) fn release_idle(&self, after: Duration) -> u64 {
        if after.is_zero() {
            return 0;
        }
        let now = self.clock.now();
        let to_free = {
            let mut pool = self.state.lock();
            let free = pool.free_total();
            let in_use = pool.held - pool.quarantined - free;
            let idle = pool
                .returned_at
                .is_some_and(|t| now.saturating_sub(t) >= after);
            if free == 0 || in_use > 0 || !idle {
                return 0;
            }
            pool.trim(0)
        };
        let bytes = to_free.iter().map(|b| b.size).sum();
        log::debug!(
            "[kernel-replay] agent {}: releasing {bytes} bytes of backing memory unused for {after:?}",
            self.agent
        );
        for b in to_free {
            self.device.free_backing(b.id);
        }
        bytes
    }

    /// Backing bytes held now: pooled, in use, and quarantined.
    pub(crate) fn held(&self) -> u64 {
        self.state.lock().held
    }

    /// The most backing bytes held at once.
    pub(crate) fn peak(&self) -> u64 {
        self.state.lock().peak
    }

    /// Backing bytes leaked because an abandoned copy may still write them.
    pub(crate) fn quarantined(&self) -> u64 {
        self.state.lock().quarantined
    }
}
