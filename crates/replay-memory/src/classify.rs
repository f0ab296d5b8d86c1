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
    /// every scope when an argument points into it, else watched by the scope check.
    CapturableUntracked,
    /// IPC-imported or peer memory, or a class nobody described: no snapshot can cover it;
    /// reaching it declines `untracked_memory`.
    Uncapturable,
    /// Virtual-memory mappings: not captured, counted; decline by policy.
    VirtualMapping,
}

/// The treatment of `class`. When several flags are set, the most restrictive wins, in this
/// order: tool-owned and kernarg (never touch), IPC and peer (cannot capture), virtual
/// mappings, read-only (nothing to restore), the capturable-untracked kinds, then coarse device
/// memory and module variables. An empty class is treated as uncapturable: guessing would risk
/// restoring memory nobody described.
pub fn classify(class: MemoryClass) -> Treatment {
    if class.intersects(MemoryClass::TOOL_OWNED | MemoryClass::KERNARG) {
        Treatment::Excluded
    } else if class.intersects(MemoryClass::IPC_IMPORTED | MemoryClass::PEER) {
        Treatment::Uncapturable
    } else if class.contains(MemoryClass::VIRTUAL_MAPPING) {
        Treatment::VirtualMapping
    } else if class.contains(MemoryClass::READ_ONLY) {
        Treatment::Excluded
    } else if class.intersects(MemoryClass::CAPTURABLE_UNTRACKED) {
        Treatment::CapturableUntracked
    } else if class.intersects(MemoryClass::DEVICE_COARSE | MemoryClass::MODULE_VARIABLE) {
        Treatment::Captured
    } else {
        Treatment::Uncapturable
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
            (M::VIRTUAL_MAPPING, T::VirtualMapping),
            (M::VIRTUAL_MAPPING | M::DEVICE_COARSE, T::VirtualMapping),
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
}
