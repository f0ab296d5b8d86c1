//! # replay-memory
//!
//! The memory layer of kernel-replay (SPEC §7): it knows which device memory exists, which of it
//! a kernel may change, and how to put it back. It implements [`replay_core::Snapshotter`] over
//! a backend's [`replay_core::DeviceMemory`]; backends feed the [`Tracker`] from their
//! allocation wrappers and hand an engine per agent to the replay window.
//!
//! - [`tracker`] (§7.1): the per-agent inventory with generations that are never reused. A free
//!   is recorded *before* the backend releases the memory, so every later liveness check fails
//!   and no restore writes into released memory; a free (or an unload) of memory a capture,
//!   restore or scope check is copying waits, bounded, until it is done ([`tracker::MemoryHold`];
//!   for a restore ordered on the device, until its copies are done there:
//!   [`tracker::OwnedMemoryHold::done_when`]).
//! - [`mod@classify`] (§7.1 table): the treatment of each [`replay_core::MemoryClass`].
//! - [`modules`] (§7.1): module-scope variables, enumerated per agent at snapshot time.
//! - [`engine`] (§7.2–§7.4): [`MemoryEngine`], the [`replay_core::Snapshotter`] of one agent,
//!   gluing the steps below, each in a private file of its own:
//!   - `plan` (§7.1, §7.2): scopes `all`, `arguments` and `predicted`, what the argument words
//!     reach (and the runtime's answer for words the tracker never saw), module variables,
//!     the untracked summary;
//!   - `capture` (§7.2, §7.3): placement across the tiers and the capture copies and digests;
//!   - `check` (§7.2): the after-pass check of memory outside the snapshot, and what scope
//!     `predicted` learns from it;
//!   - `restore` (§7.4): restore `full` and `dirty`, the dirty fallback, the per-region retry;
//!   - `tiers` (§7.3): the budgets of the device, pinned-host and pageable-host tiers;
//!   - `snapshot` (§7.2–§7.4): a live snapshot's captured regions, watched regions and blocks;
//!   - `predict` (§7.2): the per-kernel predictions of scope `predicted`: the first
//!     rule, learning, the bounds, forgetting on unload;
//!   - `shared` (§7.1): the state an engine and its snapshot share, the liveness check and the
//!     hold;
//!   - `pool` (§7.3): pooled backing memory, trim, release and quarantine;
//!   - `batch` (§7.2, §7.4): one fenced batch of copies or digests.
//!
//!   Each file uses only files listed after it (and `tracker`, `modules`, `classify`); none
//!   uses a file that uses it.
//!
//! Who validates what: the window (in `replay-core`) decides admission from the
//! [`replay_core::SnapshotPlan`] and owns every deadline; this crate waits only through
//! [`replay_core::wait::bounded`] with the [`replay_core::WaitSpec`] it is given. The backend
//! only translates copies, digests and fences. Nothing here is unsafe.
//!
//! ## Design choices
//!
//! - **Batched and fenced.** A capture is one allocation per tier at most (pooled blocks
//!   first), one `submit_copies` batch and, submitted right after it and in flight beside it,
//!   the digests before the first pass (both read the application's bytes; one wait each, the
//!   copies' first, whose failure abandons the digests too); a restore is one batch. Digests
//!   are one digest per chunk of `policy.chunk_bytes` for what `dirty` compares and one per
//!   region for what the scope check watches (it asks only whether a region changed). After a
//!   pass both are **one batch**: the scope check takes `dirty`'s digests with its own (one
//!   launch and one wait per pass on a GPU, SPEC §11's one read of the footprint), and the
//!   restore that follows uses them; after the last pass, which no restore follows (the
//!   window says so through `Snapshot::restore_may_follow`), only the check's are taken.
//! - **Restores ordered on the device** (SPEC §6 step 8). Where the agent claims
//!   `Capabilities::ORDERED_RESTORE` the window asks (`Snapshot::order_restores`), and a
//!   restore submits its batch, hands the fence to [`replay_core::DeviceMemory::order_after`]
//!   and returns: the next pass, flush and the backend's own reads and digests wait for it on
//!   the device, and the host waits once per pass. The snapshot keeps the fence and the
//!   tracker hold ([`tracker::OwnedMemoryHold`]) until `Snapshot::complete_restore`, which
//!   the window calls as soon as the next pass's wait returned and on every way out of the
//!   loop; a free or unload of the captured regions meanwhile waits (bounded) for the copies
//!   on the device ([`replay_core::DeviceMemory::wait_ordered`]), not for the window, so a
//!   tool freeing in PASS ENTER does not wait for itself. A fence that reports an error then
//!   is a failed restore (the window aborts); one not done in time after a stuck pass is
//!   abandoned, its blocks leaked. A device that refuses to order, and a batch whose
//!   submission fails (retried region by region), wait on the host as before. The restore's
//!   `seconds` are then the host's enqueue time.
//! - **Placement.** Regions fill the device tier, then pinned host, then pageable host, in
//!   address order; a region is split where a tier's budget runs out. Budgets (see
//!   `tiers::tier_caps` in the source for details): device = `device_tier_bytes`, or
//!   when 0 what the device reports available less a tenth of it and 256 MiB
//!   ([`engine::DEVICE_HEADROOM_BYTES`]) so the application's next allocations still succeed;
//!   pinned = only where the backend has the tier, `pinned_tier_bytes` or when 0 half of what
//!   it reports; pageable = `pageable_tier_bytes` or when 0 half of `MemAvailable` from
//!   `/proc/meminfo` (the backend's own report where procfs is missing). No tier is given more
//!   than the backend reports available; free pooled blocks count as available. The sum is
//!   `SnapshotPlan::capacity_bytes`. A tier whose allocation fails anyway (its report was
//!   optimistic: fragmentation, another process) hands its share to the later tiers within
//!   their budgets; only when they cannot take it does the capture fail.
//! - **Pools.** Backing blocks are pooled per agent and reused by the next capture (smallest
//!   block that fits, else largest first plus one new block for the rest). When a snapshot is
//!   dropped its blocks return to the pool, which is then trimmed per tier to
//!   `policy.pool_keep_bytes` (largest blocks kept). [`MemoryEngine::release_pools`] frees the
//!   pool at once when an application allocation fails for lack of memory; blocks a live
//!   snapshot holds are freed when it is dropped. [`MemoryEngine::release_idle`] frees it once
//!   no block came back for `policy.pool_idle_release` (default 5 s, on the clock given with
//!   [`MemoryEngine::with_clock`]): there is no thread of the library's own, so the backend
//!   calls it from its entry points (launches, allocations), and another process sharing the
//!   device finds the memory free. `pooled_peak_bytes` counts every backing
//!   allocation held at once.
//! - **Abandoned copies leak on purpose.** A copy whose fence did not complete in time may
//!   still write its backing memory; those blocks are neither freed nor reused (counted by
//!   [`MemoryEngine::quarantined_bytes`]), like an abandoned drain's barrier signal upstream.
//!   Other failures (out of memory, a refused or failed copy) return every block to the pool.
//! - **Liveness.** Capture and every restore re-check each region (base, size and generation
//!   against the tracker; a module variable's code-object load against
//!   [`ModuleVariables::load_generation`]; memory only the runtime knows against a new
//!   [`replay_core::DeviceMemory::query_pointer`]): a region freed, shrunk, reallocated or
//!   unloaded meanwhile is skipped with a warning, never written. The check and the copies are
//!   one step: they run under a hold on the tracker, and a free or an unload overlapping it
//!   waits (bounded) for the hold to end. Backends must report frees through
//!   [`Tracker::record_free`] and unloads through [`Tracker::release_with`] for that; memory
//!   only the runtime knows is freed without the library hearing of it, so for it the re-check
//!   narrows the race but cannot close it.
//! - **Restore failures.** A failed restore batch is retried region by region (rewriting
//!   snapshot bytes is idempotent); that names the failing region in the
//!   [`replay_core::RestoreError`] and rides over a transient failure. A stuck fence names the
//!   first region of the batch. A `dirty` restore whose digest batch fails (digests only read,
//!   so memory is as the pass left it) restores every captured byte instead, with a warning;
//!   only a failure of that restore is fatal.
//! - **Untracked summary.** Capturable-untracked memory outside the scope and uncapturable
//!   memory (IPC, peer mappings, undescribed classes) count in `untracked.bytes/regions`:
//!   a kernel may write them and nothing restores them. Virtual-memory mappings nothing
//!   captures (no access for this agent, multicast objects, imported handles, and every
//!   mapping and stream-ordered allocation under `decline_on_vmem`) count in
//!   `vmem_bytes/vmem_regions`.
//! - **Mappings and stream-ordered allocations** (SPEC §7.1 row). The tracker keeps a region
//!   per mapped range ([`Tracker::record_map`]), in the inventory of every agent with access
//!   ([`Tracker::record_access`]) and of the handle's owner, classed `VIRTUAL_MAPPING` plus
//!   what is behind it for that agent: the handle's device class with read-write access
//!   (captured and restored like device memory, on the agent whose kernel runs), `READ_ONLY`
//!   with read access (excluded), nothing without access or for a multicast object, and
//!   `IPC_IMPORTED` for an imported handle (both uncapturable: an argument into them declines
//!   `untracked_memory`). An unmap, a lowered access and the release of a reservation are
//!   frees (recorded first, waiting for a restore in flight); what a cut leaves mapped, and
//!   every remap, is a new generation. An argument into a mapping captures the run of mappings
//!   contiguous with it (one tensor may span several chunks of an expandable segment).
//!   Stream-ordered allocations ([`Tracker::record_async_alloc`]) are regions of their
//!   device class marked `VIRTUAL_MAPPING`, freed when their free is ordered
//!   ([`Tracker::record_async_free`]). [`classify_under`] with `decline_on_vmem` keeps the old
//!   behaviour: none of them captured, the window declines.
//! - **What arguments reach, under every scope.** Every non-zero 8-byte word of the argument
//!   block (hidden arguments included) that points anywhere inside an allocation of the agent
//!   adds it when it is captured or capturable-untracked (fine-grained, managed, pinned host):
//!   scope `arguments` is exactly those regions (plus module variables), scope `all` is every
//!   coarse region plus the capturable ones reached. A word into IPC, an uncapturable
//!   mapping or another agent's memory sets `uncapturable` (declines `untracked_memory`).
//! - **Memory the tracker never saw.** A word the tracker does not know, and that no module
//!   variable holds, is asked of the runtime ([`replay_core::DeviceMemory::query_pointer`]).
//!   Fine-grained, managed or pinned memory it describes is captured like tracked memory of
//!   those classes. Coarse device memory it describes declines: the library would not hear of
//!   its free, so a restore could write it after the application released it (deciding that
//!   it stays allocated for the window is not possible). IPC, peer, virtual-memory and
//!   undescribed memory declines too, and so does a failed query; each declined allocation is
//!   counted in `untracked.bytes/regions`. `Ok(None)` (not reachable: pageable host memory or
//!   a scalar) is skipped. A word that happens to look like an address only makes the
//!   snapshot larger (or declines): it never makes it smaller.
//! - **Scope check.** Under every scope, tracked coarse and fine-grained regions outside the
//!   snapshot are digested before the first pass and compared after every pass
//!   (`check_scope`), so a write through a pointer stored in device memory into them
//!   truncates `write_outside_scope` instead of applying once per pass. Under `all` only
//!   capturable regions no argument reached are watched; every coarse region is captured.
//!   Host-resident memory (pinned, registered, managed: [`host_resident`]) is never watched
//!   outside the snapshot: the host writes it whenever it likes (a loader's pin-memory
//!   thread), and such a write is no kernel's, so it must neither truncate an unrelated
//!   kernel nor force scope `all` on it; nor is all of it digested over the host link every
//!   pass. It is captured where an argument reaches it. The cost: a kernel that writes
//!   host-resident memory only through a pointer stored elsewhere is not seen.
//!   When the compare runs is the policy's [`replay_core::OutsideCheck`]: after every pass
//!   (the default), after the first pass only, or never (no digests taken at capture either);
//!   the last two trade the guarantee for a device-sized pool's cost and every record names
//!   them (`outside_check`).
//! - **Scope `predicted`**. A scope finer than a region, for pooled allocations (a
//!   framework's one large pool, in which `arguments` would capture the whole pool per
//!   dispatch). Under it the plan replaces each region of at least
//!   [`engine::MIN_REGION_CHUNKS`] digest chunks that the arguments reach by the chunks the
//!   kernel is predicted to write there (and adds the chunks its record names in regions no
//!   argument reaches); everything else of those regions is watched by the scope check's
//!   chunk digests like any memory outside the scope, so a write outside the prediction
//!   truncates `write_outside_scope` with memory equal to one execution, and the chunks that
//!   changed (the check's digests name them) grow the kernel's prediction instead of forcing
//!   scope `all` on it. Predictions are per kernel ([`replay_core::KernelKey`]), stored as
//!   byte ranges relative to the argument pointer at or below them (or to an allocation),
//!   learned from the first check of each dispatch (which digests the predicted chunks too),
//!   bounded at [`engine::MAX_KERNELS`] kernels (least recently used evicted) ×
//!   [`engine::MAX_RANGES`] ranges (40 bytes each; under 1 MiB per agent), and forgotten
//!   when the code object is unloaded ([`Tracker::record_unload`]). A kernel seen for the
//!   first time gets the first rule (from each pointer to the next pointer into the same
//!   region, at most its share of the device tier's budget and at least
//!   [`engine::FIRST_WINDOW_CHUNKS`] chunks); one that missed
//!   [`engine::MAX_MISSES`] times gets `arguments` (`all` when it wrote where no argument
//!   points). With the policy's `predict=spill` (the default) regions are predicted only
//!   when the regions the arguments reach would not fit the device tier whole, else the plan
//!   is `arguments`; the record says which (`predict_source`, `predict_fallback`). Captured
//!   parts of an allocation are regions of their own with the allocation's generation: their
//!   liveness is that the allocation holding them has that generation and still contains
//!   them. A chunk rewritten with the bytes it held is not seen as written (nothing needs
//!   restoring there), so a kernel that sometimes writes identical values may miss later.
//! - **Module variables.** Read-only ones and the one-byte `__hip_cuid_*` markers are skipped;
//!   a variable (or the part of one) already covered by a captured region or an earlier
//!   variable is not captured twice; large ones go through the tiers like any region. An
//!   enumeration error sets `uncapturable`.
//! - **Digests** ([`replay_core::digest`]): 128-bit, keyed per engine with four independent
//!   words from the OS's random source; about 2^-64 collision probability per comparison. A
//!   collision would let `dirty` skip one changed chunk or the scope check miss one write
//!   outside the scope; either changes the next pass's inputs, and when that is the last pass,
//!   the application's final memory: digests do decide it, with that probability.
//!
//! - **The cost floor** (SPEC §11). Under the strict default each pass reads what the scope
//!   check watches (every tracked byte outside the snapshot) and what `dirty` compares (the
//!   captured bytes), once, in one batch; each dispatch adds one copy of the captured bytes and
//!   one read of the watched ones before the first pass. The watched read cannot move out of
//!   the loop without giving up the guarantee: a kernel whose writes differ between passes
//!   (races, atomics, clocks) may write outside its scope in any pass, and only a check before
//!   the next pass keeps a repeat from landing. On an application with a thousand small
//!   module-variable runs the floor's other half is host work per region: the runs' liveness
//!   is looked up once per capture and reused while no code object loads or unloads
//!   (`Shared::liveness`), and the backend copies small runs with one launch rather than a
//!   call each. Measured splits: `BENCHMARKS.md`, "Cost per dispatch on real programs".
//! ## What no scope can see
//!
//! No scope (`all`, `arguments`, `predicted`) covers memory nobody tracks: host memory reached through
//! pointers stored on the device, device-side heaps (`malloc` in kernels), textures and surfaces
//! reached through handles, and allocations the backend's wrappers did not see that no argument
//! points into (an argument into one is asked of the runtime, above). Writes by
//! other agents or by host threads while the window is open are not undone either. Atomics
//! (counters, queues in device memory that is not captured) and output streams (`printf`)
//! act once per pass. A kernel that depends on such state sees it change between passes; its
//! results after replay may differ from one execution.

#![forbid(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod batch;
mod capture;
mod check;
pub mod classify;
pub mod engine;
pub mod modules;
mod plan;
mod pool;
mod predict;
mod restore;
mod shared;
mod snapshot;
mod stopwatch;
mod tiers;
pub mod tracker;

pub use classify::{classify, classify_under, host_resident, Treatment};
pub use engine::MemoryEngine;
pub use modules::{ModuleVariable, ModuleVariables, NoModuleVariables};
pub use tracker::{MapAccess, MappedHandle, Tracker};
