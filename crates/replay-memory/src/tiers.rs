//! Tier budgets (SPEC §7.3): what the device, pinned-host and pageable-host tiers may hold now,
//! from the policy's budgets, what the backend reports available, the host's available memory
//! and the free pooled blocks. Their sum is a plan's capacity; placement fills them in order.

use replay_core::policy::Policy;
use replay_core::Tier;

use crate::shared::Shared;

/// Automatic device-tier headroom: the application keeps this fraction of what the device
/// reports available ...
pub const DEVICE_HEADROOM_DIVISOR: u64 = 10;
/// ... plus this many bytes, so its next allocations still succeed while a snapshot is held.
pub const DEVICE_HEADROOM_BYTES: u64 = 256 << 20;

/// What each tier may hold now, within its budget (index: position in [`Tier::ALL`]).
///
/// - device: `device_tier_bytes`, or when 0 the available bytes less a headroom of a tenth
///   of them plus [`DEVICE_HEADROOM_BYTES`]; never more than is available;
/// - pinned: only where the backend has the tier; `pinned_tier_bytes`, or when 0 half of
///   what the backend reports (page-locked memory cannot be reclaimed by the host);
/// - pageable: `pageable_tier_bytes`, or when 0 half of the host's available memory
///   (`host_available` when given, else `MemAvailable`; the backend's report where procfs is
///   missing); never more than the backend reports available.
///
/// Free pooled blocks count as available: they are reused first.
pub(crate) fn tier_caps(sh: &Shared, host_available: Option<u64>, policy: &Policy) -> [u64; 3] {
    let dev = &*sh.device;
    let pool = sh.pool.lock();
    let mut caps = [0u64; 3];
    for (i, tier) in Tier::ALL.into_iter().enumerate() {
        let Some(info) = dev.tier_info(tier) else {
            continue;
        };
        let pooled = pool.free_bytes(tier);
        let avail = info.available_bytes.saturating_add(pooled);
        let (budget, auto) = match tier {
            Tier::Device => (
                policy.device_tier_bytes,
                info.available_bytes.saturating_sub(
                    info.available_bytes / DEVICE_HEADROOM_DIVISOR + DEVICE_HEADROOM_BYTES,
                ) + pooled,
            ),
            Tier::PinnedHost => (policy.pinned_tier_bytes, info.available_bytes / 2 + pooled),
            Tier::PageableHost => (
                policy.pageable_tier_bytes,
                host_memory(host_available, info.available_bytes) / 2 + pooled,
            ),
        };
        caps[i] = if budget == 0 { auto } else { budget }.min(avail);
    }
    caps
}

/// The host's available memory: `given` (tests, hosts without procfs), else `MemAvailable`
/// from `/proc/meminfo`, else what the backend reports for the pageable tier.
fn host_memory(given: Option<u64>, tier_reported: u64) -> u64 {
    given.or_else(mem_available).unwrap_or(tier_reported)
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
