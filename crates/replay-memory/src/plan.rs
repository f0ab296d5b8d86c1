//! Scope planning (SPEC §7.1, §7.2): which regions a snapshot of one dispatch holds
//! under scope `all`, `arguments` or `predicted`: the allocations the argument words reach
//! (tracked, or described by the runtime when the tracker never saw them), under `predicted`
//! the predicted chunks of the large ones instead of the whole, module variables not already
//! covered, the untracked summary, whether anything reached is uncapturable, and the tiers'
//! capacity.

use replay_core::policy::{Policy, PredictWhen, Scope};
use replay_core::{
    ArgLayout, BackendError, BackendErrorKind, Dispatch, MemoryClass, PredictFallback,
    PredictSource, RegionRef, SnapshotPlan, UntrackedSummary,
};
use smallvec::SmallVec;
use std::sync::Arc;

use crate::classify::{classify_under, Treatment};
use crate::modules::{is_bookkeeping, ModuleVariable};
use crate::predict::{self, Pending, Pointer, Predictor, MAX_MISSES, MIN_REGION_CHUNKS};
use crate::shared::{ModuleView, Shared, MODULE_GENERATION, RUNTIME_GENERATION};
use crate::tiers::tier_caps;

/// The plan of a snapshot of `dispatch` under `scope` (`Snapshotter::plan`); `host_available`
/// overrides `/proc/meminfo` for the tier budgets; `predictor` holds the kernels' predictions
/// for scope `predicted`.
pub(crate) fn plan(
    sh: &Shared,
    predictor: &Predictor,
    host_available: Option<u64>,
    dispatch: &Dispatch,
    scope: Scope,
    policy: &Policy,
) -> Result<SnapshotPlan, BackendError> {
    // The window resolves `auto` before planning; a caller that passes it plans `all`.
    let mut scope = if scope == Scope::Auto {
        Scope::All
    } else {
        scope
    };
    // Scope `predicted` needs argument pointers, and a kernel that keeps writing outside its
    // prediction gets a region scope.
    let mut fallback = PredictFallback::None;
    let mut record = None;
    if scope == Scope::Predicted {
        predictor.forget_unloaded(&sh.tracker, sh.agent);
        record = predictor.lookup(&dispatch.kernel);
        if dispatch.arg_layout == ArgLayout::Unknown {
            scope = Scope::All;
            fallback = PredictFallback::UnknownLayout;
        } else if let Some(r) = record.as_ref().filter(|r| r.misses >= MAX_MISSES) {
            scope = if r.missed_outside {
                Scope::All
            } else {
                Scope::Arguments
            };
            fallback = PredictFallback::RepeatedMisses;
        }
    }
    let agent = sh.agent;
    if dispatch.info.agent != agent {
        return Err(BackendError::new(
            BackendErrorKind::InvalidArgument,
            agent,
            "plan snapshot",
            format!(
                "dispatch for agent {} given to the memory engine of agent {agent}",
                dispatch.info.agent
            ),
        ));
    }
    let mut sw = crate::stopwatch::Stopwatch::new();
    let all = sh.tracker.regions(agent);
    sw.lap("regions");
    let vmem = policy.decline_on_vmem;
    let classify = |c: MemoryClass| classify_under(c, vmem);
    let mut plan = SnapshotPlan {
        scope,
        ..SnapshotPlan::default()
    };

    // Module variables first: an argument into one is covered by the enumeration, not
    // asked of the runtime.
    let view = match module_view(sh, agent) {
        Err(why) => {
            plan.uncapturable.get_or_insert_with(|| {
                format!("module variables of agent {agent} could not be enumerated: {why}")
            });
            Arc::new(ModuleView::default())
        }
        Ok(v) => v,
    };
    let var_ranges = &view.ranges;
    sw.lap("module view");

    // Under every scope, the capturable memory the arguments reach is captured, and
    // memory they reach that nothing can capture declines (SPEC §7.1).
    let mut untracked = UntrackedSummary::default();
    let reach = argument_reach(
        sh,
        dispatch,
        var_ranges,
        vmem,
        &mut plan.uncapturable,
        &mut untracked,
    );
    let mut regions: SmallVec<[RegionRef; 8]> = match scope {
        Scope::All | Scope::Auto => {
            let mut v: SmallVec<[RegionRef; 8]> = all
                .iter()
                .filter(|r| classify(r.class) == Treatment::Captured)
                .copied()
                .collect();
            v.extend(
                reach
                    .into_iter()
                    .filter(|r| classify(r.class) != Treatment::Captured),
            );
            v
        }
        Scope::Arguments | Scope::Predicted => reach,
    };
    regions.retain(|r| r.size > 0);
    sw.lap("reach");
    let caps = tier_caps(sh, host_available, policy);
    sw.lap("caps");
    let mut pending = None;
    if scope == Scope::Predicted {
        match predicted(
            dispatch,
            &all,
            &mut regions,
            record.as_ref(),
            caps[0],
            policy,
        ) {
            Ok(p) => {
                plan.predicted_bytes = p.spans.iter().map(|r| r.size).sum();
                plan.predict_source = if record.is_some() {
                    PredictSource::Learned
                } else {
                    PredictSource::FirstRule
                };
                pending = Some(p);
            }
            Err(why) => {
                scope = Scope::Arguments;
                fallback = why;
            }
        }
    }
    plan.scope = scope;
    plan.predict_fallback = fallback;

    for r in &all {
        match classify(r.class) {
            Treatment::Captured => plan.tracked_bytes += r.size,
            Treatment::CapturableUntracked
                if !regions.iter().any(|o| o.generation == r.generation) =>
            {
                untracked.bytes += r.size;
                untracked.regions += 1;
            }
            // Mappings nothing captures (decline_on_vmem, no access, multicast, imported
            // handles) count apart.
            Treatment::Uncapturable | Treatment::VirtualMapping
                if r.class.contains(MemoryClass::VIRTUAL_MAPPING) =>
            {
                untracked.vmem_bytes += r.size;
                untracked.vmem_regions += 1;
            }
            // Counted with the untracked: a kernel may write them and nothing restores them.
            Treatment::Uncapturable | Treatment::VirtualMapping => {
                untracked.bytes += r.size;
                untracked.regions += 1;
            }
            Treatment::CapturableUntracked | Treatment::Excluded => {}
        }
    }
    plan.untracked = untracked;
    sw.lap("predict+summary");

    // Module variables: what the scope does not already cover, each part once. The runs are
    // sorted by base (an application's images give a thousand): the covered list is sorted
    // once, and `done` (where the runs taken so far end) keeps an overlap from counting twice.
    let mut covered: Vec<(u64, u64)> = regions
        .iter()
        .map(|r| (r.base, r.base.saturating_add(r.size)))
        .collect();
    covered.sort_unstable();
    let mut done = 0u64;
    for &(base, end) in &view.runs {
        let start = base.max(done);
        if start >= end {
            continue;
        }
        done = done.max(end);
        let parts = predict::uncovered(start, end - start, &covered);
        for (base, size) in parts {
            regions.push(RegionRef {
                base,
                size,
                generation: MODULE_GENERATION,
                class: MemoryClass::MODULE_VARIABLE,
            });
        }
    }
    regions.sort_by_key(|r| r.base);
    sw.lap("module variables");
    sw.report(format_args!(
        "plan: {} tracked regions, {} argument words, {} variable runs",
        all.len(),
        dispatch.argument_words().count(),
        view.runs.len()
    ));
    plan.captured_bytes = regions.iter().map(|r| r.size).sum();
    plan.regions = regions;
    plan.capacity_bytes = caps.iter().sum();
    if let Some(p) = pending {
        plan.ticket = predictor.stash(p);
    }
    Ok(plan)
}

/// The module variables of `agent`: kept from the last plan while the backend's generation
/// is the same, else enumerated (sorted, runs built) afresh. Failures are never kept.
fn module_view(sh: &Shared, agent: replay_core::AgentId) -> Result<Arc<ModuleView>, String> {
    // Read before enumerating: a change in between makes the next plan enumerate again.
    let generation = sh.modules.generation(agent);
    if let Some(g) = generation {
        if let Some((cg, v)) = &*sh.module_view.lock() {
            if *cg == g {
                return Ok(Arc::clone(v));
            }
        }
    }
    let mut vars = sh.modules.enumerate(agent)?;
    vars.sort_by_key(|v| v.base);
    let view = Arc::new(ModuleView {
        ranges: vars
            .iter()
            .map(|v| (v.base, v.base.saturating_add(v.size)))
            .collect(),
        runs: variable_runs(sh, agent, &vars),
    });
    if let Some(g) = generation {
        *sh.module_view.lock() = Some((g, Arc::clone(&view)));
    }
    Ok(view)
}

/// The allocation alignment of every runtime (CUDA and HSA allocations, and their code
/// objects' data segments, start on multiples of it).
pub(crate) const MODULE_GAP: u64 = 256;

/// Whether a variable ending at `end` and the next one, starting at `next`, may be captured
/// as one run with the bytes between them: no allocation can start in `[end, next]` (it holds
/// no multiple of [`MODULE_GAP`], `next` included: another allocation may begin exactly where
/// a variable ends, and the driver refuses a copy across two allocations), so the gap is
/// padding of the first variable's allocation and lies in mapped pages. Overlapping
/// variables are one allocation.
fn spans_gap(end: u64, next: u64) -> bool {
    next < end || end.div_ceil(MODULE_GAP).saturating_mul(MODULE_GAP) > next
}

/// The writable variables of `vars` (sorted by base) as runs `(start, end)`: neighbours of the
/// same code-object load are one run when the backend names one allocation holding both
/// ([`ModuleVariables::allocation_of`]), or, where it cannot tell, when only padding lies
/// between them ([`spans_gap`]). Applications' images hold thousands of small globals; one
/// region (one copy, one digest, one liveness answer) per variable cost about a millisecond
/// per pass on the H200.
fn variable_runs(
    sh: &Shared,
    agent: replay_core::AgentId,
    vars: &[ModuleVariable],
) -> Vec<(u64, u64)> {
    type Run = (u64, u64, Option<u64>, Option<(u64, u64)>);
    let mut runs: Vec<Run> = Vec::new();
    for v in vars {
        if v.read_only || v.size == 0 || is_bookkeeping(v) {
            continue;
        }
        let end = v.base.saturating_add(v.size);
        let load = sh.modules.load_generation(agent, v.base);
        let alloc = sh
            .modules
            .allocation_of(agent, v.base)
            .filter(|&(b, s)| b <= v.base && end <= b.saturating_add(s));
        let joins = |e: u64, prev: Option<(u64, u64)>| match (prev, alloc) {
            (Some(a), Some(b)) => a == b,
            _ => spans_gap(e, v.base),
        };
        match runs.last_mut() {
            Some((_, e, l, a)) if *l == load && joins(*e, *a) => {
                *e = (*e).max(end);
            }
            _ => runs.push((v.base, end, load, alloc)),
        }
    }
    runs.into_iter().map(|(s, e, _, _)| (s, e)).collect()
}

/// Scope `predicted` over `regions` (what the arguments reach, whole): replaces each large
/// region by its predicted chunks, and adds the chunks the kernel's record names in regions
/// no argument reaches; the plan's [`Pending`] on success, else why it plans `arguments`.
/// `all` is the agent's tracked regions, `device_cap` the device tier's budget.
fn predicted(
    dispatch: &Dispatch,
    all: &[RegionRef],
    regions: &mut SmallVec<[RegionRef; 8]>,
    record: Option<&predict::KernelPrediction>,
    device_cap: u64,
    policy: &Policy,
) -> Result<Pending, PredictFallback> {
    let chunk = policy.chunk_bytes.max(1);
    let large = |r: &RegionRef| {
        classify_under(r.class, policy.decline_on_vmem) == Treatment::Captured
            && r.generation != MODULE_GENERATION
            && r.generation != RUNTIME_GENERATION
            && r.size >= MIN_REGION_CHUNKS.saturating_mul(chunk)
    };
    if !regions.iter().any(large) {
        return Err(PredictFallback::SmallRegions);
    }
    let whole: u64 = regions.iter().map(|r| r.size).sum();
    if policy.predict == PredictWhen::Spill && whole <= device_cap {
        return Err(PredictFallback::FitsDevice);
    }
    let words: SmallVec<[u64; 32]> = dispatch.argument_words().collect();
    let mut out: SmallVec<[RegionRef; 8]> = SmallVec::new();
    let mut pending = Pending {
        ticket: 0,
        kernel: dispatch.kernel,
        predicted: Vec::new(),
        spans: Vec::new(),
    };
    let pointers = |r: &RegionRef| -> SmallVec<[Pointer; 2]> {
        let end = r.base.saturating_add(r.size);
        let mut ptrs: SmallVec<[Pointer; 2]> = words
            .iter()
            .enumerate()
            .filter(|&(_, &w)| r.base <= w && w < end)
            .map(|(i, &w)| Pointer {
                arg: i as u16,
                addr: w,
            })
            .collect();
        ptrs.sort_by_key(|p| p.addr);
        ptrs
    };
    // The pointers into each large region, found once: the first rule's window counts them
    // and the spans are built from them.
    let ptrs: SmallVec<[Option<SmallVec<[Pointer; 2]>>; 8]> = regions
        .iter()
        .map(|r| large(r).then(|| pointers(r)))
        .collect();
    // The first rule's window: what the device tier holds beside the regions captured
    // whole, shared by the pointers into large regions (a capture there costs a
    // device-to-device copy, and a first dispatch that writes past its window truncates),
    // never under FIRST_WINDOW_CHUNKS chunks.
    let window = if record.is_none() {
        let whole_small: u64 = regions.iter().filter(|r| !large(r)).map(|r| r.size).sum();
        let n = ptrs
            .iter()
            .flatten()
            .map(|p| p.len() as u64)
            .sum::<u64>()
            .max(1);
        let share = device_cap.saturating_sub(whole_small) / n / chunk * chunk;
        share.max(predict::FIRST_WINDOW_CHUNKS.saturating_mul(chunk))
    } else {
        0
    };
    let push_spans = |r: &RegionRef,
                      ptrs: SmallVec<[Pointer; 2]>,
                      out: &mut SmallVec<[RegionRef; 8]>,
                      pending: &mut Pending| {
        for (s, e) in predict::spans(r, &ptrs, record, chunk, window) {
            let span = RegionRef {
                base: s,
                size: e - s,
                generation: r.generation,
                class: r.class,
            };
            out.push(span);
            pending.spans.push(span);
        }
        pending.predicted.push((*r, ptrs));
    };
    for (r, p) in regions.iter().zip(ptrs) {
        match p {
            Some(p) => push_spans(r, p, &mut out, &mut pending),
            None => out.push(*r),
        }
    }
    // Regions no argument reaches that the kernel wrote before (through stored pointers).
    if let Some(rec) = record {
        for r in all {
            let named = rec.ranges.iter().any(|l| {
                l.anchor
                    == predict::Anchor::Region {
                        base: r.base,
                        generation: r.generation,
                    }
            });
            if named
                && classify_under(r.class, policy.decline_on_vmem) == Treatment::Captured
                && !regions.iter().any(|o| o.generation == r.generation)
            {
                push_spans(r, SmallVec::new(), &mut out, &mut pending);
            }
        }
    }
    *regions = out;
    Ok(pending)
}

/// What the kernel's arguments reach (SPEC §7.1, §7.2): every allocation an 8-byte-aligned
/// argument word points into, anywhere inside it. Tracked captured and capturable memory
/// (fine-grained, managed, pinned host) is returned; a word the tracker does not know, and
/// that no module variable in `vars` (sorted (start, end) ranges) holds, is asked of the
/// runtime ([`replay_core::DeviceMemory::query_pointer`]). Memory no snapshot can cover sets
/// `uncapturable`; what the tracker does not count already is added to `untracked`.
///
/// What the runtime describes: capturable memory is returned with [`RUNTIME_GENERATION`]
/// (captured like tracked memory; its liveness is asked of the runtime again); coarse
/// device memory the tracker never saw is uncapturable, because the library would not hear
/// of its free, so a restore could write it after the application released it; IPC, peer,
/// virtual-memory and undescribed memory is uncapturable; excluded classes (kernarg pools,
/// read-only, tool memory) are skipped. A failed query is uncapturable: the word may point
/// at memory the kernel writes. `Ok(None)`: not reachable, skipped.
///
/// A word into a captured virtual-memory mapping adds the mappings directly before and after
/// it too (the run of contiguous mappings of a reserved range: an expandable segment grows by
/// mapping chunks next to each other, and one tensor may span several). `vmem` is the policy's
/// `decline_on_vmem`.
fn argument_reach(
    sh: &Shared,
    dispatch: &Dispatch,
    vars: &[(u64, u64)],
    vmem: bool,
    uncapturable: &mut Option<String>,
    untracked: &mut UntrackedSummary,
) -> SmallVec<[RegionRef; 8]> {
    let agent = sh.agent;
    let tracker = &*sh.tracker;
    let classify = |c: MemoryClass| classify_under(c, vmem);
    let mut out: SmallVec<[RegionRef; 8]> = SmallVec::new();
    // Untracked allocations already counted, as (start, end).
    let mut counted: SmallVec<[(u64, u64); 4]> = SmallVec::new();
    let count = |counted: &mut SmallVec<[(u64, u64); 4]>,
                 base: u64,
                 size: u64,
                 class: MemoryClass,
                 u: &mut UntrackedSummary| {
        let end = base.saturating_add(size);
        if counted.iter().any(|&(s, e)| s == base && e == end) {
            return;
        }
        counted.push((base, end));
        if class.contains(MemoryClass::VIRTUAL_MAPPING) {
            u.vmem_bytes += size;
            u.vmem_regions += 1;
        } else {
            u.bytes += size;
            u.regions += 1;
        }
    };
    for (i, word) in dispatch.argument_words().enumerate() {
        if word == 0 {
            continue;
        }
        let offset = i * 8;
        if out
            .iter()
            .any(|o| o.base <= word && word < o.base.saturating_add(o.size))
            || counted.iter().any(|&(s, e)| s <= word && word < e)
        {
            continue;
        }
        if let Some(r) = tracker.lookup(agent, word) {
            match classify(r.class) {
                Treatment::Captured if r.class.contains(MemoryClass::VIRTUAL_MAPPING) => {
                    for m in tracker.mapping_run(agent, &r) {
                        if classify(m.class) == Treatment::Captured
                            && !out.iter().any(|o| o.base == m.base)
                        {
                            out.push(m);
                        }
                    }
                }
                Treatment::Captured | Treatment::CapturableUntracked => out.push(r),
                Treatment::Excluded => {}
                Treatment::Uncapturable | Treatment::VirtualMapping => {
                    uncapturable.get_or_insert_with(|| {
                        format!(
                            "argument at offset {offset} ({word:#x}) points into {:?} memory {:#x}+{} that no snapshot can cover",
                            r.class, r.base, r.size
                        )
                    });
                }
            }
            continue;
        }
        if let Some((owner, r)) = tracker.lookup_any(word) {
            if classify(r.class) != Treatment::Excluded {
                count(&mut counted, r.base, r.size, r.class, untracked);
                uncapturable.get_or_insert_with(|| {
                    if r.class.contains(MemoryClass::VIRTUAL_MAPPING) {
                        format!(
                            "argument at offset {offset} ({word:#x}) points into a virtual-memory mapping {:#x}+{} of agent {owner} that agent {agent} has no access to",
                            r.base, r.size
                        )
                    } else {
                        format!(
                            "argument at offset {offset} ({word:#x}) points into memory {:#x}+{} of agent {owner}; peer memory cannot be captured",
                            r.base, r.size
                        )
                    }
                });
            }
            continue;
        }
        let k = vars.partition_point(|&(s, _)| s <= word);
        if k > 0 && word < vars[k - 1].1 {
            // A module variable: covered (or skipped as constant) by the enumeration.
            continue;
        }
        if !may_be_address(word) {
            // A scalar sharing the block (a count, a size, packed floats): not asked of the
            // runtime, which would cost a driver call per word and dispatch.
            continue;
        }
        let info = match sh.device.query_pointer(word) {
            Ok(None) => continue,
            Ok(Some(info)) => info,
            Err(e) => {
                uncapturable.get_or_insert_with(|| {
                    format!(
                        "argument at offset {offset} ({word:#x}) is unknown to the tracker and the runtime could not describe it: {e}"
                    )
                });
                continue;
            }
        };
        let inside = info.base <= word && word < info.base.saturating_add(info.size);
        let peer = info.owner.is_some_and(|o| o != agent)
            && !info
                .class
                .intersects(MemoryClass::PINNED_HOST | MemoryClass::MANAGED);
        let why = match classify(info.class) {
            _ if !inside => Some(format!(
                "the runtime described it as {:#x}+{}, which does not contain it",
                info.base, info.size
            )),
            Treatment::Excluded => None,
            _ if peer => Some(format!(
                "it is {:?} memory {:#x}+{} of agent {}; peer memory cannot be captured",
                info.class,
                info.base,
                info.size,
                info.owner.map_or(agent, |o| o)
            )),
            Treatment::CapturableUntracked => {
                out.push(RegionRef {
                    base: info.base,
                    size: info.size,
                    generation: RUNTIME_GENERATION,
                    class: info.class,
                });
                None
            }
            Treatment::Captured => Some(format!(
                "it is {:?} memory {:#x}+{} whose allocation the tracker never saw, so its free would not be seen either",
                info.class, info.base, info.size
            )),
            Treatment::Uncapturable | Treatment::VirtualMapping => Some(format!(
                "it is {:?} memory {:#x}+{} that no snapshot can cover",
                info.class, info.base, info.size
            )),
        };
        if let Some(why) = why {
            count(&mut counted, info.base, info.size, info.class, untracked);
            uncapturable.get_or_insert_with(|| {
                format!(
                    "argument at offset {offset} ({word:#x}) points into untracked memory: {why}"
                )
            });
        }
    }
    out
}

/// Whether `word` could be an address a kernel reaches. User-space virtual addresses on the
/// 64-bit systems the backends run on lie above the first page (never mapped) and below 2^57
/// (the largest user half, with 5-level paging); device memory under unified addressing lives
/// in that range too. Small counts, negative integers and packed floats fall outside.
fn may_be_address(word: u64) -> bool {
    (1u64 << 12..1u64 << 57).contains(&word)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_words_in_the_user_address_range_are_asked_of_the_runtime() {
        for scalar in [
            1u64,
            4095,
            0x3f80_0000_3f80_0000,
            u64::MAX,
            (-2i64) as u64,
            1 << 57,
        ] {
            assert!(!super::may_be_address(scalar), "{scalar:#x}");
        }
        for addr in [
            1u64 << 12,
            0x9000,
            0x7f12_3456_7000,
            0x1000_0000_0000,
            (1 << 57) - 1,
        ] {
            assert!(super::may_be_address(addr), "{addr:#x}");
        }
    }
}
