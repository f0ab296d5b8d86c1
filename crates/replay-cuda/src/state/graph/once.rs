//! Why a graph launch runs once instead of being unrolled or profiled whole: the reasons the
//! model, the node reader and the launch share, each with the counter name `kreplay run` prints.

/// Why a graph launch runs once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOnce {
    /// Instantiated where the interception did not see it.
    UnseenGraph,
    /// Instantiated for device launch.
    DeviceLaunch,
    /// A node type that cannot be unrolled.
    NodeType,
    /// A kernel node whose arguments cannot be copied.
    LayoutUnknown,
    /// A kernel node with launch attributes a relaunch would drop.
    KernelAttributes,
    /// The driver lacks or refused an entry the model needs.
    Introspection,
    /// Updated by a setter the model does not follow.
    UpdatedUnmodelled,
    /// Launched into a capturing stream.
    Capture,
    /// Another stream's capture is live.
    BesideCapture,
    /// Behind a running communication kernel.
    BehindHostWait,
    /// Graph mode: the graph has host nodes.
    HostNode,
    /// A kernel node bound to another context than the one it was instantiated on.
    OtherContext,
    /// The mode is `off`.
    Off,
}

impl RunOnce {
    /// The counter's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnseenGraph => "unseen_graph",
            Self::DeviceLaunch => "device_launch",
            Self::NodeType => "node_type",
            Self::LayoutUnknown => "layout_unknown",
            Self::KernelAttributes => "kernel_attributes",
            Self::Introspection => "introspection",
            Self::UpdatedUnmodelled => "updated_unmodelled",
            Self::Capture => "capture",
            Self::BesideCapture => "beside_capture",
            Self::BehindHostWait => "behind_host_wait",
            Self::HostNode => "host_node",
            Self::OtherContext => "other_context",
            Self::Off => "off",
        }
    }
}
