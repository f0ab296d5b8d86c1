//! Capture of one dispatch for standalone replay (SPEC §13), as the window makes it.
//!
//! A tool asks for a capture in PASS ENTER ([`crate::ReplayPayload::request_capture`]). The
//! capture is that pass's snapshot, never an extra execution: memory at PASS ENTER holds the
//! dispatch's inputs (the snapshot was just taken, or restored for this pass), so the window
//! reads every region of the snapshot scope before it submits the pass, and again after the
//! pass completed and the scope check found nothing written outside the scope. What it read
//! goes to the request's sink as a [`Capture`]; the on-disk format is `replay-capture`'s.
//!
//! Refusals ([`CaptureRefused`]) never change the dispatch: the pass runs as it would have,
//! and the sink hears why nothing was captured. Refused: an argument block whose layout the
//! backend does not know (replay could not rebuild it), a scope over the request's byte
//! bound, memory no capture may hold (peer, IPC-imported; multicast and imported mappings are
//! never in a snapshot, SPEC §7.1), a backend that cannot hand over the code image or read its
//! memory, a pass that did not complete, and a kernel that wrote outside its scope (the
//! outputs would be incomplete).

use std::sync::Arc;

use crate::backend::MemoryClass;
use crate::policy::Scope;
use crate::types::{ArgLayout, CodeImage, DeviceDescription, DispatchInfo, KernelKey};

/// The default bound on the bytes a capture holds (inputs; the outputs are as many again).
pub const DEFAULT_CAPTURE_MAX_BYTES: u64 = 4 << 30;

/// What receives a capture (or why none was made). Called on the window's thread, under the
/// agent's writer lock, after the captured pass; a panic inside it is caught and logged.
pub type CaptureSink = Arc<dyn Fn(Result<Capture, CaptureRefused>) + Send + Sync>;

/// A tool's request for a capture of the current dispatch.
#[derive(Clone)]
pub struct CaptureRequest {
    /// Bound on the captured scope's bytes ([`DEFAULT_CAPTURE_MAX_BYTES`] by default).
    pub max_bytes: u64,
    /// Where the capture goes.
    pub sink: CaptureSink,
}

impl std::fmt::Debug for CaptureRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureRequest")
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

impl CaptureRequest {
    /// A request with the default byte bound.
    pub fn new(sink: CaptureSink) -> Self {
        Self {
            max_bytes: DEFAULT_CAPTURE_MAX_BYTES,
            sink,
        }
    }

    /// The same request with another byte bound.
    pub fn max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }
}

/// One region of the snapshot scope: its bytes before and after the captured pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedRegion {
    /// Device address.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
    /// Class (SPEC §7.1).
    pub class: MemoryClass,
    /// Module variable name, for module variables.
    pub symbol: Option<String>,
    /// Bytes when the pass began.
    pub input: Vec<u8>,
    /// Bytes after the pass (one execution).
    pub output: Vec<u8>,
}

/// One dispatch, captured.
#[derive(Debug, Clone, PartialEq)]
pub struct Capture {
    /// The dispatch as tools saw it.
    pub info: DispatchInfo,
    /// Code object and symbol.
    pub kernel: KernelKey,
    /// The argument block, hidden arguments included.
    pub kernarg: Vec<u8>,
    /// Its layout (always known: an unknown one is refused).
    pub arg_layout: ArgLayout,
    /// The scope the snapshot ran with.
    pub scope: Scope,
    /// The pass captured.
    pub pass: u32,
    /// Device and driver.
    pub device: DeviceDescription,
    /// The code image as loaded.
    pub code: CodeImage,
    /// Every region of the snapshot scope, in address order.
    pub regions: Vec<CapturedRegion>,
}

/// Why no capture was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureRefused {
    /// A capture may be asked for in PASS ENTER only.
    #[error("a capture can be requested only in PASS ENTER")]
    NotInPassEnter,
    /// The backend does not know the argument block's layout.
    #[error("the argument block's layout is unknown (the backend guessed its size), so replay could not rebuild it")]
    UnknownLayout,
    /// The scope is larger than the request allows.
    #[error("the snapshot scope holds {bytes} bytes in {regions} regions, over the capture bound of {max} bytes (raise --max-bytes)")]
    TooLarge {
        /// Bytes of the scope.
        bytes: u64,
        /// Regions of the scope.
        regions: usize,
        /// The bound.
        max: u64,
    },
    /// A region of the scope is memory a capture cannot hold.
    #[error("region {base:#x} ({size} bytes) is {why}: it cannot be recreated standalone")]
    Uncapturable {
        /// Base of the region.
        base: u64,
        /// Its size.
        size: u64,
        /// What kind of memory it is.
        why: &'static str,
    },
    /// The backend cannot hand over the code image or read memory.
    #[error("the backend cannot capture: {0}")]
    Backend(String),
    /// The captured pass did not complete.
    #[error("the captured pass did not complete ({0})")]
    PassIncomplete(String),
    /// The kernel wrote outside its scope during the captured pass.
    #[error("the kernel wrote region {base:#x} outside its snapshot scope, so the outputs are incomplete; capture it under scope all")]
    WroteOutsideScope {
        /// Base of the region written.
        base: u64,
    },
}

/// Memory no capture may hold, by class; `None` when the class can be recreated.
pub fn uncapturable_class(class: MemoryClass) -> Option<&'static str> {
    if class.contains(MemoryClass::PEER) {
        Some("a peer agent's memory")
    } else if class.contains(MemoryClass::IPC_IMPORTED) {
        Some("IPC-imported memory")
    } else if class.contains(MemoryClass::KERNARG) {
        Some("kernel-argument memory")
    } else if class.contains(MemoryClass::TOOL_OWNED) {
        Some("a tool's own memory")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_ipc_kernarg_and_tool_memory_cannot_be_captured_and_the_rest_can() {
        for (class, why) in [
            (MemoryClass::PEER, "peer"),
            (MemoryClass::IPC_IMPORTED, "IPC"),
            (MemoryClass::KERNARG, "kernel-argument"),
            (MemoryClass::TOOL_OWNED, "tool"),
            (MemoryClass::DEVICE_COARSE | MemoryClass::PEER, "peer"),
        ] {
            let got = uncapturable_class(class).unwrap_or_default();
            assert!(got.contains(why), "{class:?}: {got}");
        }
        for class in [
            MemoryClass::DEVICE_COARSE,
            MemoryClass::FINE_GRAINED,
            MemoryClass::MANAGED,
            MemoryClass::PINNED_HOST,
            MemoryClass::VIRTUAL_MAPPING,
            MemoryClass::MODULE_VARIABLE,
        ] {
            assert_eq!(uncapturable_class(class), None, "{class:?}");
        }
    }
}
