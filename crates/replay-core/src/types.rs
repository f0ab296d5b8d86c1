//! Identifiers and the description of one dispatch (SPEC §3 `dispatch_info`).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

macro_rules! id_type {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_type!(
    /// A GPU agent (device) as the backend numbers it.
    AgentId
);
id_type!(
    /// A queue (HSA queue, CUDA stream) of one agent.
    QueueId
);
id_type!(
    /// Reserved by the library before CONFIG; the same for every pass and for a declined run.
    DispatchId
);
id_type!(
    /// The kernel object (code handle) as the backend identifies it.
    KernelId
);
id_type!(
    /// A tool context (SPEC §3 single owner, §5 local control).
    ContextId
);

/// Three-dimensional launch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Dim3 {
    /// Extent in x.
    pub x: u32,
    /// Extent in y.
    pub y: u32,
    /// Extent in z.
    pub z: u32,
}

impl Dim3 {
    /// A launch size.
    pub const fn new(x: u32, y: u32, z: u32) -> Self {
        Self { x, y, z }
    }
}

/// What the tool sees of a dispatch (SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchInfo {
    /// Agent that runs the dispatch.
    pub agent: AgentId,
    /// Queue it was submitted to.
    pub queue: QueueId,
    /// Reserved by the library before CONFIG ENTER.
    pub dispatch_id: DispatchId,
    /// Kernel object.
    pub kernel_id: KernelId,
    /// Kernel (symbol) name.
    pub kernel_name: Arc<str>,
    /// Grid size in work-items.
    pub grid: Dim3,
    /// Workgroup size in work-items.
    pub workgroup: Dim3,
    /// Private (scratch) segment bytes per work-item.
    pub private_segment_size: u32,
    /// Group (LDS / shared) segment bytes per workgroup.
    pub group_segment_size: u32,
}

impl DispatchInfo {
    /// A dispatch of `kernel_name` on `agent`'s `queue`, `grid` and `workgroup` in work-items.
    ///
    /// `dispatch_id` starts at zero (the library overwrites it with its reservation) and the
    /// segment sizes at zero; the `with_` setters give them.
    pub fn new(
        agent: AgentId,
        queue: QueueId,
        kernel_id: KernelId,
        kernel_name: impl Into<Arc<str>>,
        grid: Dim3,
        workgroup: Dim3,
    ) -> Self {
        Self {
            agent,
            queue,
            dispatch_id: DispatchId::default(),
            kernel_id,
            kernel_name: kernel_name.into(),
            grid,
            workgroup,
            private_segment_size: 0,
            group_segment_size: 0,
        }
    }

    /// The same dispatch with this id.
    #[must_use]
    pub fn with_dispatch_id(mut self, dispatch_id: DispatchId) -> Self {
        self.dispatch_id = dispatch_id;
        self
    }

    /// The same dispatch with this private (scratch) segment size, in bytes per work-item.
    #[must_use]
    pub fn with_private_segment_size(mut self, bytes: u32) -> Self {
        self.private_segment_size = bytes;
        self
    }

    /// The same dispatch with this group (LDS / shared) segment size, in bytes per workgroup.
    #[must_use]
    pub fn with_group_segment_size(mut self, bytes: u32) -> Self {
        self.group_segment_size = bytes;
        self
    }
}

/// Identity of a kernel for the library's memory of misbehaving kernels: per agent, code object
/// and symbol, so that unloading the code object forgets it (SPEC §7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelKey {
    /// Agent the code object is loaded on.
    pub agent: AgentId,
    /// Loaded code object (executable) handle.
    pub code_object: u64,
    /// Kernel symbol handle within the code object.
    pub symbol: u64,
}

/// What a submission holds; only [`SubmissionKind::KernelDispatch`] is a replay candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubmissionKind {
    /// Exactly one kernel dispatch.
    KernelDispatch,
    /// A barrier packet or stream wait.
    Barrier,
    /// A copy or fill.
    Copy,
    /// Several packets in one submission.
    MultiPacket,
    /// A graph launch.
    GraphLaunch,
    /// A launch while a stream is being captured.
    StreamCapture,
    /// Anything else the backend does not understand.
    Other,
}

impl SubmissionKind {
    /// Stable name for logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::KernelDispatch => "kernel_dispatch",
            Self::Barrier => "barrier",
            Self::Copy => "copy",
            Self::MultiPacket => "multi_packet",
            Self::GraphLaunch => "graph_launch",
            Self::StreamCapture => "stream_capture",
            Self::Other => "other",
        }
    }
}

/// The thread a submission arrived on, and what the backend knows of where it came from.
///
/// A runtime may forward submissions to a thread of its own (SPEC §9.1). There a thread-local
/// cannot tell tool work (launched from inside a tool callback) from the application's work:
/// a backend that knows says so ([`Origin::ForwardedToolWork`],
/// [`Origin::ForwardedApplication`]); one that does not ([`Origin::RuntimeThread`]) leaves it
/// to the per-agent marker, which treats anything forwarded while a callback of a window on
/// that agent runs as tool work. A forwarded submission never blocks on an agent's lock: when a
/// window holds it, the service answers `deferred` and the backend resubmits later, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The thread that submitted (rang the doorbell, called launch).
    #[default]
    SubmittingThread,
    /// A runtime thread, provenance unknown.
    RuntimeThread,
    /// A runtime thread; a tool callback launched it.
    ForwardedToolWork,
    /// A runtime thread; the application launched it.
    ForwardedApplication,
}

impl Origin {
    /// Whether a runtime thread delivered it (it must not block on an agent's lock).
    pub const fn is_forwarded(self) -> bool {
        !matches!(self, Self::SubmittingThread)
    }
}

/// Whether the backend knows where the argument block's words are (SPEC §7.2, §9.2): the
/// block's size from the caller, the function's parameter info or the code object. Where it
/// does not (a guessed size, the application's own parameter array), `scope=auto` resolves to
/// `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgLayout {
    /// `kernarg` holds the whole argument block, hidden arguments included.
    #[default]
    Known,
    /// `kernarg` may be partial or padded.
    Unknown,
}

/// One submission as the backend hands it to the core.
#[derive(Debug, Clone)]
pub struct Dispatch {
    /// What the tool sees; `dispatch_id` is overwritten by the library's reservation.
    pub info: DispatchInfo,
    /// Code object and symbol of the kernel.
    pub kernel: KernelKey,
    /// What the submission holds.
    pub kind: SubmissionKind,
    /// The captured argument block, hidden arguments included (read by scope `arguments`).
    pub kernarg: SmallVec<[u8; 256]>,
    /// Whether `kernarg`'s layout is known (`scope=auto` picks `all` where it is not).
    pub arg_layout: ArgLayout,
    /// Which thread delivered the submission.
    pub origin: Origin,
    /// Opaque to the core: the backend's own reference to the packet or launch.
    pub handle: u64,
}

impl Dispatch {
    /// The 8-byte-aligned words of the argument block (SPEC §7.2).
    pub fn argument_words(&self) -> impl Iterator<Item = u64> + '_ {
        self.kernarg.chunks_exact(8).map(|w| {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            u64::from_le_bytes(b)
        })
    }
}

/// Where a snapshot copy lives (SPEC §7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// A backing copy on the same agent.
    Device,
    /// Page-locked host memory.
    PinnedHost,
    /// Ordinary host memory, the last resort.
    PageableHost,
}

impl Tier {
    /// All tiers in the order they are tried.
    pub const ALL: [Tier; 3] = [Tier::Device, Tier::PinnedHost, Tier::PageableHost];
    /// Name used in logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Device => "device",
            Self::PinnedHost => "pinned",
            Self::PageableHost => "pageable",
        }
    }
}

bitflags::bitflags! {
    /// What an agent can do beyond the required operations.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Capabilities: u32 {
        /// `flush_caches` does something (policy `cache_control=flush`).
        const CACHE_FLUSH = 1 << 0;
        /// Digests run on the device (or, on the simulator, where its device memory lives),
        /// at memory speed: `scope=auto` may pick `arguments` and `restore=auto` picks `dirty`
        /// (SPEC §7.2, §8; [`crate::policy`]).
        const DEVICE_DIGESTS = 1 << 1;
        /// The backend sees asynchronous copies and can fence them.
        const COPY_FENCE = 1 << 2;
        /// Passes carry system-scope acquire and release fences.
        const SYSTEM_SCOPE_FENCES = 1 << 3;
        /// `scope=auto` resolves to `arguments` (for a dispatch whose argument layout is known)
        /// although digests are host ones: HSA, by the policy's design (see
        /// [`crate::policy`]); `restore=auto` still resolves to `full` without
        /// `DEVICE_DIGESTS`.
        const AUTO_ARGUMENTS = 1 << 4;
        /// Restores may be ordered on the device (SPEC §6 step 8): every pass, ordinary run
        /// and cache flush the agent submits waits on the device for the fences its memory
        /// was asked to order ([`crate::DeviceMemory::order_after`]), so the window does not
        /// wait on the host between a restore and the next pass.
        const ORDERED_RESTORE = 1 << 5;
    }
}

/// The code the dispatch ran, as the backend loaded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeImage {
    /// What the bytes are: `"sim-module"` (the simulator's module description),
    /// `"hsa-code-object"`, `"cubin"`, `"fatbin"`.
    pub format: String,
    /// The code object's name as loaded (a file name, or the simulator module's name).
    pub module: String,
    /// The kernel's symbol in it.
    pub symbol: String,
    /// The image.
    pub bytes: Vec<u8>,
    /// The launch attributes the dispatch was submitted with, handed over with the image
    /// (CUDA's `cuLaunchKernelEx` attributes; empty elsewhere).
    #[serde(default)]
    pub launch_attributes: Vec<LaunchAttribute>,
    /// The image's writable variables where this load placed them, so a capture names the
    /// regions that are the kernel's own module variables (a standalone replay finds them by
    /// name in the image it loads). Empty where the backend does not know them.
    #[serde(default)]
    pub variables: Vec<CodeVariable>,
}

/// One variable of a loaded code image: its symbol and where the load placed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeVariable {
    /// The symbol's name in the image.
    pub name: String,
    /// Device address.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
}

/// One launch attribute of a captured dispatch: CUDA's `CUlaunchAttribute`, its id and the
/// first words of its value (cluster dimensions, a priority, a policy).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchAttribute {
    /// The attribute's name (`cluster_dimension`, `priority`, ...; `id N` when unknown).
    pub name: String,
    /// The backend's id of it.
    pub id: u32,
    /// The value's first 32-bit words.
    pub value: Vec<u32>,
}

/// What a backend says about the device and its driver, for the manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceDescription {
    /// Backend name: `"sim"`, `"hsa"`, `"cuda"`.
    pub backend: String,
    /// Device name.
    pub device: String,
    /// Driver or runtime version.
    pub driver: String,
}
