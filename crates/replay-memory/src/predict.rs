//! Scope `predicted` (SPEC §7.2): per-kernel predictions of the digest chunks a
//! dispatch writes inside large regions, learned from what the kernel's earlier dispatches
//! wrote, so a snapshot inside a pooled allocation costs what the kernel writes.
//!
//! - **What is stored.** Per kernel (agent, code object, symbol: [`KernelKey`]), a bounded
//!   list of byte ranges, each relative to an *anchor*: the pointer held by one argument word
//!   (`Arg(i)`: the tensor moves between dispatches, the shape of what the kernel writes
//!   around its pointer mostly does not), or the base of one allocation (`Region`, for writes
//!   where no argument points: through pointers stored in device memory). Ranges are whole
//!   digest chunks as they lay at the dispatch that wrote them; applied to a new pointer they
//!   are rounded out to that region's chunk grid, so a learned range costs at most one chunk
//!   more than it covers.
//! - **First dispatch.** A kernel with no record gets the first rule: for each argument
//!   pointer into a large region, the chunks from the pointer up to the next argument pointer
//!   into the same region, never past the region's end, and at most a window: the device
//!   tier's budget beside the regions captured whole, shared by the pointers into large
//!   regions, and never under [`FIRST_WINDOW_CHUNKS`] chunks. A pooled allocator places a
//!   kernel's tensors one after another, an output usually starts at its pointer, and its
//!   inputs end where the next tensor begins; the window bounds the first snapshot of a kernel
//!   whose last pointer has nothing after it to what a device-to-device copy holds, so a first
//!   dispatch writing gigabytes past its pointer still replays (with 64 chunks it truncated).
//!   The first dispatch's record then replaces the rule with what it saw written.
//! - **Learning.** The scope check after the first pass digests the predicted chunks too:
//!   those that changed are what the kernel wrote. The watched chunks that changed are a miss
//!   (the dispatch truncates `write_outside_scope`, memory equal to one execution). Both are
//!   added to the kernel's ranges, attributed to the argument pointer at or below them in
//!   the same region (the lowest pointer for chunks below every pointer), or to the region.
//!   Ranges only grow (a kernel called with several shapes converges on the largest). After
//!   [`MAX_MISSES`] misses a kernel falls back to `arguments` (`all` when it wrote where no
//!   argument points) until its code object is unloaded.
//! - **Bounds.** At most [`MAX_KERNELS`] kernels per engine (least recently used evicted) ×
//!   [`MAX_RANGES`] ranges each (the closest ranges of one anchor merged, else the smallest
//!   dropped): under 1 MiB per agent (a range is 40 bytes, a kernel with its key and full
//!   ranges under 1 KiB). Forgetting is only ever a cost (a first rule,
//!   or a miss), never a fault: a prediction decides what is copied, the scope check decides
//!   what is safe.
//! - **Forgetting.** Unloads reach the engine through [`Tracker::record_unload`]; before each
//!   plan the predictor drops the kernels of every code object unloaded since it last looked
//!   (all of them when it fell too far behind the tracker's log).

use std::collections::HashMap;

use parking_lot::Mutex;
use replay_core::{AgentId, KernelKey, RegionRef};
use smallvec::SmallVec;

use crate::tracker::Tracker;

/// First rule: chunks predicted after an argument pointer that has no other pointer after it.
pub const FIRST_WINDOW_CHUNKS: u64 = 64;
/// Regions of fewer digest chunks are captured whole (predicting them saves little).
pub const MIN_REGION_CHUNKS: u64 = 128;
/// Kernels one engine keeps predictions for.
pub const MAX_KERNELS: usize = 1024;
/// Ranges one kernel's prediction keeps.
pub const MAX_RANGES: usize = 16;
/// Misses after which a kernel falls back to a region scope.
pub const MAX_MISSES: u32 = 4;

/// What a learned range is relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Anchor {
    /// The pointer in argument word `i` (byte offset `8 * i` of the argument block).
    Arg(u16),
    /// The base of one allocation (generation included, so a reallocation does not match).
    Region { base: u64, generation: u64 },
}

/// A byte range `[start, end)` relative to its anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Learned {
    pub(crate) anchor: Anchor,
    pub(crate) start: i64,
    pub(crate) end: i64,
}

/// One kernel's prediction.
#[derive(Debug, Clone, Default)]
pub(crate) struct KernelPrediction {
    pub(crate) ranges: SmallVec<[Learned; 4]>,
    /// Dispatches that wrote outside their prediction.
    pub(crate) misses: u32,
    /// One of those wrote where no argument points.
    pub(crate) missed_outside: bool,
    last_use: u64,
}

/// An argument pointer into a predicted region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pointer {
    pub(crate) arg: u16,
    pub(crate) addr: u64,
}

/// What a plan under scope `predicted` hands to its capture and to the snapshot's check.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub(crate) ticket: u64,
    pub(crate) kernel: KernelKey,
    /// The regions whose chunks were predicted (whole allocations), each with the argument
    /// pointers into it.
    pub(crate) predicted: Vec<(RegionRef, SmallVec<[Pointer; 2]>)>,
    /// The predicted parts of those regions that the plan captures.
    pub(crate) spans: Vec<RegionRef>,
}

/// A changed chunk `[start, end)` of the allocation at `alloc_base` with `generation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Changed {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) alloc_base: u64,
    pub(crate) generation: u64,
}

/// The per-kernel predictions of one engine.
#[derive(Debug, Default)]
pub(crate) struct Predictor {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    kernels: HashMap<KernelKey, KernelPrediction>,
    tick: u64,
    unloads_seen: u64,
    pending: Option<Pending>,
    next_ticket: u64,
}

impl Predictor {
    /// Drops the predictions of code objects unloaded from `agent` since the last look.
    pub(crate) fn forget_unloaded(&self, tracker: &Tracker, agent: AgentId) {
        let mut g = self.inner.lock();
        let (seq, list) = tracker.unloads_since(g.unloads_seen);
        if seq == g.unloads_seen {
            return;
        }
        g.unloads_seen = seq;
        match list {
            Some(list) => {
                for (a, code) in list {
                    if a == agent {
                        g.kernels
                            .retain(|k, _| !(k.agent == a && k.code_object == code));
                    }
                }
            }
            None => g.kernels.clear(),
        }
    }

    /// The prediction of `kernel`, if one is kept (marks it used).
    pub(crate) fn lookup(&self, kernel: &KernelKey) -> Option<KernelPrediction> {
        let mut g = self.inner.lock();
        g.tick += 1;
        let t = g.tick;
        g.kernels.get_mut(kernel).map(|p| {
            p.last_use = t;
            p.clone()
        })
    }

    /// Keeps what a plan predicted until its capture takes it; returns its ticket (never 0).
    pub(crate) fn stash(&self, mut pending: Pending) -> u64 {
        let mut g = self.inner.lock();
        g.next_ticket += 1;
        pending.ticket = g.next_ticket;
        let t = pending.ticket;
        g.pending = Some(pending);
        t
    }

    /// What the plan with `ticket` predicted (the latest plan only).
    pub(crate) fn take(&self, ticket: u64) -> Option<Pending> {
        if ticket == 0 {
            return None;
        }
        let mut g = self.inner.lock();
        match &g.pending {
            Some(p) if p.ticket == ticket => g.pending.take(),
            _ => None,
        }
    }

    /// Learns from one dispatch: `written` are predicted chunks that changed, `missed`
    /// watched chunks that changed (a miss when not empty).
    pub(crate) fn observe(&self, pending: &Pending, written: &[Changed], missed: &[Changed]) {
        let mut g = self.inner.lock();
        g.tick += 1;
        let t = g.tick;
        // A first dispatch's record holds what it saw, never the first rule's window.
        let rec = g.kernels.entry(pending.kernel).or_default();
        rec.last_use = t;
        for c in written.iter().chain(missed) {
            rec.ranges.push(attribute(pending, c).0);
        }
        if !missed.is_empty() {
            rec.misses += 1;
            rec.missed_outside |= missed.iter().any(|c| !attribute(pending, c).1);
        }
        normalize(&mut rec.ranges);
        if g.kernels.len() > MAX_KERNELS {
            if let Some(old) = g
                .kernels
                .iter()
                .min_by_key(|(_, p)| p.last_use)
                .map(|(k, _)| *k)
            {
                g.kernels.remove(&old);
            }
        }
    }

    /// Kernels with a prediction now.
    pub(crate) fn kernels(&self) -> usize {
        self.inner.lock().kernels.len()
    }

    /// The number of ranges of `kernel`'s prediction.
    pub(crate) fn ranges(&self, kernel: &KernelKey) -> Option<usize> {
        self.inner
            .lock()
            .kernels
            .get(kernel)
            .map(|p| p.ranges.len())
    }
}

/// The learned range for changed chunk `c`, and whether it lies in a predicted region (one
/// the arguments reach).
fn attribute(pending: &Pending, c: &Changed) -> (Learned, bool) {
    let region = pending
        .predicted
        .iter()
        .find(|(r, _)| r.generation == c.generation && r.base == c.alloc_base);
    if let Some((_, ptrs)) = region {
        let below = ptrs
            .iter()
            .filter(|p| p.addr < c.end)
            .max_by_key(|p| p.addr);
        let p = below.or_else(|| ptrs.iter().min_by_key(|p| p.addr));
        if let Some(p) = p {
            return (
                Learned {
                    anchor: Anchor::Arg(p.arg),
                    start: c.start.wrapping_sub(p.addr) as i64,
                    end: c.end.wrapping_sub(p.addr) as i64,
                },
                true,
            );
        }
    }
    (
        Learned {
            anchor: Anchor::Region {
                base: c.alloc_base,
                generation: c.generation,
            },
            start: (c.start - c.alloc_base) as i64,
            end: (c.end - c.alloc_base) as i64,
        },
        region.is_some(),
    )
}

/// Sorts and merges ranges of one anchor that touch, then enforces [`MAX_RANGES`].
fn normalize(ranges: &mut SmallVec<[Learned; 4]>) {
    ranges.sort_by_key(|l| (l.anchor, l.start));
    let mut out: SmallVec<[Learned; 4]> = SmallVec::new();
    for l in ranges.drain(..) {
        match out.last_mut() {
            Some(p) if p.anchor == l.anchor && l.start <= p.end => p.end = p.end.max(l.end),
            _ => out.push(l),
        }
    }
    while out.len() > MAX_RANGES {
        // The closest two of one anchor merge (covering the gap between them).
        let best = (1..out.len())
            .filter(|&i| out[i].anchor == out[i - 1].anchor)
            .min_by_key(|&i| out[i].start - out[i - 1].end);
        match best {
            Some(i) => {
                out[i - 1].end = out[i - 1].end.max(out[i].end);
                out.remove(i);
            }
            None => {
                // Every range has its own anchor: the smallest goes (a later miss relearns it).
                let i = (0..out.len())
                    .min_by_key(|&i| out[i].end - out[i].start)
                    .expect("more than MAX_RANGES ranges");
                out.remove(i);
            }
        }
    }
    *ranges = out;
}

/// The chunks of `region` to capture for a dispatch whose pointers into it are `ptrs`
/// (sorted by address): from `rec` when the kernel has a prediction, else the first rule
/// with at most `window` bytes after each pointer. Returned as merged `[start, end)`
/// absolute ranges on the region's chunk grid.
pub(crate) fn spans(
    region: &RegionRef,
    ptrs: &[Pointer],
    rec: Option<&KernelPrediction>,
    chunk: u64,
    window: u64,
) -> SmallVec<[(u64, u64); 4]> {
    let base = region.base;
    let end = base.saturating_add(region.size);
    let mut raw: SmallVec<[(u64, u64); 4]> = SmallVec::new();
    match rec {
        Some(rec) => {
            for l in &rec.ranges {
                let at = match l.anchor {
                    Anchor::Arg(i) => match ptrs.iter().find(|p| p.arg == i) {
                        Some(p) => p.addr,
                        None => continue,
                    },
                    Anchor::Region {
                        base: b,
                        generation,
                    } if b == base && generation == region.generation => base,
                    Anchor::Region { .. } => continue,
                };
                let s = offset(at, l.start).clamp(base, end);
                let e = offset(at, l.end).clamp(base, end);
                if s < e {
                    raw.push((s, e));
                }
            }
        }
        None => {
            for (k, p) in ptrs.iter().enumerate() {
                let next = ptrs[k + 1..]
                    .iter()
                    .map(|q| q.addr)
                    .find(|&a| a > p.addr)
                    .unwrap_or(end);
                let cap = p.addr.saturating_add(window);
                let e = next.min(cap).min(end).max(p.addr + 1);
                raw.push((p.addr, e));
            }
        }
    }
    // Onto the region's chunk grid, merged.
    for r in raw.iter_mut() {
        r.0 = base + (r.0 - base) / chunk * chunk;
        r.1 = (base + (r.1 - base).div_ceil(chunk) * chunk).min(end);
    }
    raw.sort_unstable();
    let mut out: SmallVec<[(u64, u64); 4]> = SmallVec::new();
    for (s, e) in raw {
        match out.last_mut() {
            Some(l) if s <= l.1 => l.1 = l.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Parts of [base, base+size) not covered by `covered` (sorted, non-overlapping intervals).
pub(crate) fn uncovered(base: u64, size: u64, covered: &[(u64, u64)]) -> SmallVec<[(u64, u64); 2]> {
    let mut out = SmallVec::new();
    let end = base.saturating_add(size);
    let mut at = base;
    for &(s, e) in covered {
        if e <= at {
            continue;
        }
        if s >= end {
            break;
        }
        if s > at {
            out.push((at, s - at));
        }
        at = at.max(e);
        if at >= end {
            break;
        }
    }
    if at < end {
        out.push((at, end - at));
    }
    out
}

/// `at + off`, saturating at the ends of the address space.
fn offset(at: u64, off: i64) -> u64 {
    if off >= 0 {
        at.saturating_add(off as u64)
    } else {
        at.saturating_sub(off.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_core::MemoryClass;

    const C: u64 = 4096;

    fn region() -> RegionRef {
        RegionRef {
            base: 0x10_0000,
            size: 1024 * C,
            generation: 7,
            class: MemoryClass::DEVICE_COARSE,
        }
    }

    fn key(symbol: u64) -> KernelKey {
        KernelKey {
            agent: AgentId(0),
            code_object: 1,
            symbol,
        }
    }

    #[test]
    fn first_rule_ends_at_the_next_pointer_or_the_window() {
        let r = region();
        let ptrs = [
            Pointer {
                arg: 0,
                addr: r.base + 10 * C + 100,
            },
            Pointer {
                arg: 1,
                addr: r.base + 20 * C,
            },
        ];
        let s = spans(&r, &ptrs, None, C, FIRST_WINDOW_CHUNKS * C);
        // [chunk 10, chunk 20) then [20, 20 + window); touching, so merged.
        assert_eq!(
            s.as_slice(),
            &[(r.base + 10 * C, r.base + (20 + FIRST_WINDOW_CHUNKS) * C)]
        );
    }

    #[test]
    fn learned_ranges_follow_the_pointer_and_round_out_to_chunks() {
        let r = region();
        let first = Pending {
            ticket: 1,
            kernel: key(1),
            predicted: vec![(
                r,
                SmallVec::from_slice(&[Pointer {
                    arg: 2,
                    addr: r.base + 5 * C + 8,
                }]),
            )],
            spans: Vec::new(),
        };
        let p = Predictor::default();
        let written = [Changed {
            start: r.base + 5 * C,
            end: r.base + 7 * C,
            alloc_base: r.base,
            generation: 7,
        }];
        p.observe(&first, &written, &[]);
        let rec = p.lookup(&key(1)).unwrap();
        // Moved by half a chunk: the same two chunks' bytes now straddle three.
        let moved = [Pointer {
            arg: 2,
            addr: r.base + 100 * C + C / 2,
        }];
        let s = spans(&r, &moved, Some(&rec), C, 0);
        assert_eq!(s.as_slice(), &[(r.base + 100 * C, r.base + 103 * C)]);
    }

    #[test]
    fn at_most_max_kernels_are_kept_least_recently_used_first_out() {
        let r = region();
        let p = Predictor::default();
        let written = [Changed {
            start: r.base,
            end: r.base + C,
            alloc_base: r.base,
            generation: 7,
        }];
        for sym in 0..(MAX_KERNELS as u64 + 50) {
            let pending = Pending {
                ticket: 1,
                kernel: key(sym),
                predicted: vec![(r, SmallVec::new())],
                spans: Vec::new(),
            };
            p.observe(&pending, &written, &[]);
            // Kernel 0 stays in use, so it is never the one evicted.
            assert!(p.lookup(&key(0)).is_some(), "after {sym}");
        }
        assert_eq!(p.kernels(), MAX_KERNELS);
        assert!(p.lookup(&key(1)).is_none(), "the least recently used went");
    }

    #[test]
    fn unloads_forget_their_kernels_only() {
        let r = region();
        let p = Predictor::default();
        let t = Tracker::new();
        let written = [Changed {
            start: r.base,
            end: r.base + C,
            alloc_base: r.base,
            generation: 7,
        }];
        for code in [1, 2] {
            let pending = Pending {
                ticket: 1,
                kernel: KernelKey {
                    agent: AgentId(0),
                    code_object: code,
                    symbol: 9,
                },
                predicted: vec![(r, SmallVec::new())],
                spans: Vec::new(),
            };
            p.observe(&pending, &written, &[]);
        }
        t.record_unload(AgentId(1), 2);
        p.forget_unloaded(&t, AgentId(0));
        assert_eq!(p.kernels(), 2, "another agent's unload");
        t.record_unload(AgentId(0), 2);
        p.forget_unloaded(&t, AgentId(0));
        assert_eq!(p.kernels(), 1);
        // Fallen behind the tracker's log: everything goes.
        for _ in 0..300 {
            t.record_unload(AgentId(0), 99);
        }
        p.forget_unloaded(&t, AgentId(0));
        assert_eq!(p.kernels(), 0);
    }

    #[test]
    fn a_kernel_costs_under_a_kibibyte() {
        assert!(std::mem::size_of::<Learned>() <= 40);
        let per_kernel = std::mem::size_of::<KernelKey>()
            + std::mem::size_of::<KernelPrediction>()
            + MAX_RANGES * std::mem::size_of::<Learned>();
        assert!(per_kernel < 1024, "{per_kernel} bytes");
    }

    #[test]
    fn ranges_stay_bounded() {
        let mut v: SmallVec<[Learned; 4]> = (0..100)
            .map(|i| Learned {
                anchor: Anchor::Arg((i % 3) as u16),
                start: i * 10_000,
                end: i * 10_000 + 10,
            })
            .collect();
        normalize(&mut v);
        assert!(v.len() <= MAX_RANGES);
        let mut w: SmallVec<[Learned; 4]> = (0..100)
            .map(|i| Learned {
                anchor: Anchor::Region {
                    base: i,
                    generation: 1,
                },
                start: 0,
                end: 10 + i as i64,
            })
            .collect();
        normalize(&mut w);
        assert_eq!(w.len(), MAX_RANGES);
    }
}
