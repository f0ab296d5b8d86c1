//! # replay-report
//!
//! What kernel-replay's tools write (SPEC §12): hardware-counter values of replayed dispatches,
//! every value keyed by `(dispatch_id, pass)` and never summed across passes. The counter tool
//! (`replay-cuda`'s `counters`) produces a [`CounterReport`]; `kreplay run --tool counters`
//! and tool authors with their own front end write it out. Nothing here touches a GPU.

use serde::{Deserialize, Serialize};

/// One metric's value for one pass of one replayed dispatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterSample {
    /// The replay service's dispatch id (unique in the process).
    pub dispatch_id: u64,
    /// The replay pass (0-based) whose profiler pass produced the value.
    pub pass: u32,
    /// Nsight Compute's metric name, e.g. `dram__bytes_read.sum`.
    pub metric: String,
    /// The value as the profiler evaluated it.
    pub value: f64,
}

/// What the report knows about one replayed dispatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterDispatch {
    /// The replay service's dispatch id.
    pub dispatch_id: u64,
    /// Kernel name as the program named it (mangled where it is mangled).
    pub kernel: String,
    /// Demangled name (equal to `kernel` for C names).
    pub kernel_demangled: String,
    /// Device ordinal.
    pub device: u32,
    /// Driver context handle.
    pub context: u64,
    /// Stream handle the application launched on.
    pub stream: u64,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Passes the dispatch was executed (replay passes).
    pub passes: u32,
    /// Bytes kernel-replay snapshotted for this dispatch.
    pub snapshot_bytes: u64,
    /// GPU start of the first pass, nanoseconds (0 when unknown).
    pub start_ns: u64,
    /// GPU end of the last pass, nanoseconds (0 when unknown).
    pub end_ns: u64,
}

/// A metric's description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricInfo {
    /// Nsight Compute's metric name.
    pub name: String,
    /// Unit as Nsight Compute prints it (`byte`, `cycle`, `inst`, `nsecond`, ...; empty when none).
    pub unit: String,
    /// One line of description ("" when unknown).
    pub description: String,
    /// The profiler pass (0-based) that collects it.
    pub pass: u32,
}

/// The whole output of one counter collection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterReport {
    /// Process id of the profiled application.
    pub process_id: u32,
    /// Process name (executable base name).
    pub process_name: String,
    /// Host name.
    pub host_name: String,
    /// Device name (e.g. `NVIDIA H200`).
    pub device_name: String,
    /// Compute capability, e.g. `9.0`.
    pub compute_capability: String,
    /// Chip name (e.g. `GH100`).
    pub chip: String,
    /// Profiler passes the metric list needs.
    pub passes: u32,
    /// The metrics, in the order asked.
    pub metrics: Vec<MetricInfo>,
    /// Replayed dispatches, in dispatch order.
    pub dispatches: Vec<CounterDispatch>,
    /// Every value, keyed by `(dispatch_id, pass)`.
    pub samples: Vec<CounterSample>,
}
