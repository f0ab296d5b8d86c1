//! What a simulated runtime is built with (SPEC §9.1): its configuration ([`SimConfig`]: pool
//! capacities, queue sizes, device memory taken by others, the timestamp frequency) and the
//! variables a module is loaded with ([`VariableSpec`]).

/// Configuration of one simulated runtime.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Capacity of each device pool, bytes.
    pub device_pool_bytes: usize,
    /// Capacity of each host pool, bytes.
    pub host_pool_bytes: usize,
    /// Smallest queue size (packets, a power of two).
    pub queue_min_size: u32,
    /// Largest queue size.
    pub queue_max_size: u32,
    /// Device memory taken by others (another process): allocations from each GPU's
    /// coarse-grained pool fail that much earlier, and `HSA_AMD_AGENT_INFO_MEMORY_AVAIL`
    /// reports that much less, while the pool's size stays the same (as on a shared GPU).
    pub device_reserved_bytes: usize,
    /// The system timestamp frequency, Hz (`HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY`): the unit of
    /// `hsa_signal_wait_*` timeout hints. Real systems report e.g. 100 MHz; the default 1 GHz
    /// makes ticks nanoseconds.
    pub timestamp_hz: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            // Accounting only (blocks are allocated on demand); enough that the memory layer's
            // device tier (available minus a 10% + 256 MiB headroom) has room.
            device_pool_bytes: 1 << 30,
            host_pool_bytes: 64 << 20,
            queue_min_size: 2,
            queue_max_size: 4096,
            device_reserved_bytes: 0,
            timestamp_hz: 1_000_000_000,
        }
    }
}

/// A module variable to load.
#[derive(Debug, Clone)]
pub struct VariableSpec {
    /// Symbol name.
    pub name: String,
    /// Size in bytes.
    pub size: u32,
    /// `__constant__` (read-only).
    pub is_const: bool,
}
