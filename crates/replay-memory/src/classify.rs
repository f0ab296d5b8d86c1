//! The treatment of each memory class (SPEC §7.1 table).

use replay_core::MemoryClass;

/// What the memory layer does with a region of a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Treatment {
    /// Tracked, captured by scope `all`, restored.
    Captured,
    /// Never captured, never counted: kernel-argument memory, executable pools, read-only
    /// data, tool-owned and library memory. Restoring it would clobber in-flight arguments or
    /// the tool's own results.
    Excluded,
    /// Fine-grained, managed or pinned host memory: not in `all` by itself; captured under
    /// every scope when an argument points into it, else watched by the scope check (only
    /// fine-grained memory: host-resident memory is never watched, [`host_resident`]).
    CapturableUntracked,
    /// IPC-imported or peer memory, or a class nobody described: no snapshot can cover it;
    /// reaching it declines `untracked_memory`.
    Uncapturable,
    /// A virtual-memory mapping nothing captures: no device class behind it for this agent
    /// (no access, a multicast object), or any mapping or stream-ordered allocation under
    /// `decline_on_vmem` ([`classify_under`]). Not captured, counted apart; reaching it
    /// declines `untracked_memory`, and under `decline_on_vmem` so does its mere presence.
    VirtualMapping,
}

/// The treatment of `class`. When several flags are set, the most restrictive wins, in this
/// order: tool-owned and kernarg (never touch), IPC and peer (cannot capture), read-only
/// (nothing to restore), the capturable-untracked kinds, then coarse device memory and module
/// variables. An empty class is treated as uncapturable: guessing would risk restoring memory
/// nobody described.
///
/// A virtual-memory mapping or stream-ordered allocation ([`MemoryClass::VIRTUAL_MAPPING`],
/// SPEC §7.1) is treated like the memory behind it, which the tracker adds to the class: a
/// mapping of a coarse device handle with read-write access is captured; one of an imported
/// handle carries `IPC_IMPORTED` (uncapturable); read-only access carries `READ_ONLY`
/// (excluded: the kernel cannot change it); a mapping with no device class (no access for
/// this agent, a multicast object) is [`Treatment::VirtualMapping`]. [`classify_under`]
/// applies `decline_on_vmem`.
pub fn classify(class: MemoryClass) -> Treatment {
    if class.intersects(MemoryClass::TOOL_OWNED | MemoryClass::KERNARG) {
        Treatment::Excluded
    } else if class.intersects(MemoryClass::IPC_IMPORTED | MemoryClass::PEER) {
        Treatment::Uncapturable
    } else if class.contains(MemoryClass::READ_ONLY) {
        Treatment::Excluded
    } else if class.contains(MemoryClass::VIRTUAL_MAPPING)
        && !class.intersects(MemoryClass::CAPTURABLE_UNTRACKED | MemoryClass::DEVICE_COARSE)
    {
        Treatment::VirtualMapping
    } else if class.intersects(MemoryClass::CAPTURABLE_UNTRACKED) {
        Treatment::CapturableUntracked
    } else if class.intersects(MemoryClass::DEVICE_COARSE | MemoryClass::MODULE_VARIABLE) {
        Treatment::Captured
    } else {
        Treatment::Uncapturable
    }
}

/// Whether `class` is host-resident memory (pinned, registered or managed): the host may write
/// it during a window, so the scope check never watches it outside the snapshot (SPEC §7.2);
/// it is captured where an argument reaches it.
pub fn host_resident(class: MemoryClass) -> bool {
    class.intersects(MemoryClass::PINNED_HOST | MemoryClass::MANAGED)
}

/// [`classify`] under the policy switch `decline_on_vmem` (SPEC §8): when set, every
/// virtual-memory mapping and stream-ordered allocation that is not excluded is
/// [`Treatment::VirtualMapping`] (not captured, counted apart, declined by the window), the
/// behaviour before mappings were captured.
pub fn classify_under(class: MemoryClass, decline_on_vmem: bool) -> Treatment {
    let t = classify(class);
    if decline_on_vmem && class.contains(MemoryClass::VIRTUAL_MAPPING) && t != Treatment::Excluded {
        Treatment::VirtualMapping
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_per_the_table() {
        use MemoryClass as M;
        use Treatment as T;
        let cases = [
            (M::DEVICE_COARSE, T::Captured),
            (M::MODULE_VARIABLE, T::Captured),
            (M::KERNARG, T::Excluded),
            (M::KERNARG | M::DEVICE_COARSE, T::Excluded),
            (M::FINE_GRAINED, T::CapturableUntracked),
            (M::MANAGED, T::CapturableUntracked),
            (M::PINNED_HOST, T::CapturableUntracked),
            (M::IPC_IMPORTED, T::Uncapturable),
            (M::PEER, T::Uncapturable),
            (M::PEER | M::DEVICE_COARSE, T::Uncapturable),
            // A mapping is treated like the memory behind it; none (no access, multicast)
            // is a mapping nothing captures.
            (M::VIRTUAL_MAPPING, T::VirtualMapping),
            (M::VIRTUAL_MAPPING | M::DEVICE_COARSE, T::Captured),
            (M::VIRTUAL_MAPPING | M::FINE_GRAINED, T::CapturableUntracked),
            (M::VIRTUAL_MAPPING | M::IPC_IMPORTED, T::Uncapturable),
            (
                M::VIRTUAL_MAPPING | M::DEVICE_COARSE | M::READ_ONLY,
                T::Excluded,
            ),
            (M::READ_ONLY | M::DEVICE_COARSE, T::Excluded),
            (M::READ_ONLY | M::MODULE_VARIABLE, T::Excluded),
            (M::TOOL_OWNED | M::DEVICE_COARSE, T::Excluded),
            (M::TOOL_OWNED | M::IPC_IMPORTED, T::Excluded),
            (M::empty(), T::Uncapturable),
        ];
        for (class, want) in cases {
            assert_eq!(classify(class), want, "{class:?}");
        }
    }

    #[test]
    fn decline_on_vmem_keeps_mappings_out() {
        use MemoryClass as M;
        let m = M::VIRTUAL_MAPPING | M::DEVICE_COARSE;
        assert_eq!(classify_under(m, false), Treatment::Captured);
        assert_eq!(classify_under(m, true), Treatment::VirtualMapping);
        assert_eq!(
            classify_under(M::VIRTUAL_MAPPING, true),
            Treatment::VirtualMapping
        );
        assert_eq!(classify_under(m | M::TOOL_OWNED, true), Treatment::Excluded);
        assert_eq!(classify_under(M::DEVICE_COARSE, true), Treatment::Captured);
    }
}
