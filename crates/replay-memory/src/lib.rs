//! # replay-memory
//!
//! The memory layer of kernel-replay (SPEC §7): it knows which device memory exists, which of it
//! a kernel may change, and how to put it back. It implements [`replay_core::Snapshotter`] over
//! a backend's [`replay_core::DeviceMemory`]; backends feed the [`Tracker`] from their
//! allocation wrappers and hand an engine per agent to the replay window.
//!
//! - [`tracker`] (§7.1): the per-agent inventory with generations that are never reused. A free
//!   is recorded *before* the backend releases the memory, so every later liveness check fails
//!   and no restore writes into released memory.
//! - [`mod@classify`] (§7.1 table): the treatment of each [`replay_core::MemoryClass`].
//! - [`modules`] (§7.1): module-scope variables, enumerated per agent at snapshot time.
//! - [`engine`] (§7.2–§7.4): scopes `all` and `arguments`, placement across the device,
//!   pinned-host and pageable-host tiers within their budgets, pooled backing memory, restore
//!   `full` and `dirty`, and the after-pass check of memory outside an `arguments` scope.
//!
//! Who validates what: the window (in `replay-core`) decides admission from the
//! [`replay_core::SnapshotPlan`] and owns every deadline; this crate waits only through
//! [`replay_core::wait::bounded`] with the [`replay_core::WaitSpec`] it is given. The backend
//! only translates copies, digests and fences. Nothing here is unsafe.
//!
//! ## Design choices
//!
//! - **Batched and fenced.** A capture is one allocation per tier at most (pooled blocks
//!   first), one `submit_copies` batch and one fence wait; a restore is one batch. Digests
//!   (for `dirty` and for the scope check) are one batch per check, one digest per chunk of
//!   `policy.chunk_bytes`.
//! - **Placement.** Regions fill the device tier, then pinned host, then pageable host, in
//!   address order; a region is split where a tier's budget runs out. Budgets (see
//!   `MemoryEngine::tier_caps` in the source for details): device = `device_tier_bytes`, or
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
//!   snapshot holds are freed when it is dropped. `pooled_peak_bytes` counts every backing
//!   allocation held at once.
//! - **Abandoned copies leak on purpose.** A copy whose fence did not complete in time may
//!   still write its backing memory; those blocks are neither freed nor reused (counted by
//!   [`MemoryEngine::quarantined_bytes`]), like an abandoned drain's barrier signal upstream.
//!   Other failures (out of memory, a refused or failed copy) return every block to the pool.
//! - **Liveness.** Capture and every restore re-check each region against the tracker
//!   (base, size and generation): a region freed, shrunk or reallocated meanwhile is skipped
//!   with a warning, never written. Module variables carry generation 0 and are not re-checked:
//!   they live as long as their code object, which the runtime does not unload while its
//!   kernel is in flight.
//! - **Restore failures.** A failed restore batch is retried region by region (rewriting
//!   snapshot bytes is idempotent); that names the failing region in the
//!   [`replay_core::RestoreError`] and rides over a transient failure. A stuck fence names the
//!   first region of the batch.
//! - **Untracked summary.** Capturable-untracked memory outside the scope and uncapturable
//!   memory (IPC, peer mappings, undescribed classes) count in `untracked.bytes/regions`:
//!   a kernel may write them and nothing restores them. Virtual-memory mappings count in
//!   `vmem_bytes/vmem_regions`.
//! - **Scope `arguments`.** Every non-zero 8-byte word of the argument block (hidden arguments
//!   included) that points anywhere inside an allocation of the agent adds it when it is
//!   captured or capturable-untracked (fine-grained, managed, pinned host); one that points into
//!   IPC, virtual-mapping or another agent's memory sets `uncapturable`. A word that happens to
//!   look like an address only makes the snapshot larger (or declines, for peer memory): it
//!   never makes it smaller. Tracked regions outside the scope are digested before the first
//!   pass and compared after every pass (`check_scope`).
//! - **Module variables.** Read-only ones and the one-byte `__hip_cuid_*` markers are skipped;
//!   a variable (or the part of one) already covered by a captured region or an earlier
//!   variable is not captured twice; large ones go through the tiers like any region. An
//!   enumeration error sets `uncapturable`.
//! - **Digests** ([`replay_core::digest`]): keyed per run (process id and time), 128-bit;
//!   a collision (about 2^-128 per comparison) would let `dirty` skip one changed chunk or the
//!   scope check miss one write outside the scope.
//!
//! ## What no scope can see
//!
//! Neither `all` nor `arguments` covers memory nobody tracks: host memory reached through
//! pointers stored on the device, device-side heaps (`malloc` in kernels), textures and surfaces
//! reached through handles, and any allocation the backend's wrappers did not see. Writes by
//! other agents or by host threads while the window is open are not undone either. Atomics
//! (counters, queues in device memory that is not captured) and output streams (`printf`)
//! act once per pass. A kernel that depends on such state sees it change between passes; its
//! results after replay may differ from one execution.

#![forbid(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod classify;
pub mod engine;
pub mod modules;
pub mod tracker;

pub use classify::{classify, Treatment};
pub use engine::MemoryEngine;
pub use modules::{ModuleVariable, ModuleVariables, NoModuleVariables};
pub use tracker::Tracker;
