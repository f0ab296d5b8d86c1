//! The memory pools of the simulated agents (SPEC §9.1: the runtime's pools, whose global
//! flags tell the backend each allocation's class, §7.1). Below every other file: the state,
//! the faults (an exhausted pool) and the entries name pools.

use replay_hsa::sys;

/// The memory pools of the simulated agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// GPU: coarse-grained device memory (global flags coarse).
    DeviceCoarse,
    /// GPU: fine-grained device memory (global flags fine).
    DeviceFine,
    /// CPU: the kernarg pool (global flags kernarg-init | fine).
    Kernarg,
    /// CPU: fine-grained system memory (pinned host).
    HostFine,
}

impl PoolKind {
    /// `HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS`.
    pub fn global_flags(self) -> u32 {
        match self {
            PoolKind::DeviceCoarse => sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
            PoolKind::DeviceFine | PoolKind::HostFine => {
                sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
            }
            PoolKind::Kernarg => {
                sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT
                    | sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
            }
        }
    }
}
