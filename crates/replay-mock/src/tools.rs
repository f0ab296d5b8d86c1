//! The simulator's side of the built-in tools ([`replay_tools::ToolDevice`]), as every
//! backend has one: `verify` digests the agent's tracked coarse-grained device regions, read
//! from the simulated heap and digested with the reference digest.

use replay_core::{AgentId, Digest128, DigestKey, MemoryClass};
use replay_tools::{ToolDevice, ToolError};

use crate::runtime::WeakRuntime;

/// [`ToolDevice`] over a [`crate::SimRuntime`] (held weakly: the tool, which the service
/// keeps, must not keep the runtime alive).
#[derive(Debug, Clone)]
pub struct SimTools {
    runtime: WeakRuntime,
}

impl SimTools {
    /// The tools' side of `runtime`.
    pub fn new(runtime: &crate::SimRuntime) -> Self {
        Self {
            runtime: runtime.downgrade(),
        }
    }
}

impl ToolDevice for SimTools {
    fn verify_regions(&self, agent: AgentId) -> Vec<(u64, u64)> {
        let Some(rt) = self.runtime.upgrade() else {
            return Vec::new();
        };
        rt.tracker()
            .regions(agent)
            .iter()
            .filter(|r| r.class == MemoryClass::DEVICE_COARSE && r.size > 0)
            .map(|r| (r.base, r.size))
            .collect()
    }

    fn digest(
        &self,
        agent: AgentId,
        ranges: &[(u64, u64)],
        key: DigestKey,
    ) -> Result<Vec<Digest128>, ToolError> {
        let rt = self.runtime.upgrade().ok_or(ToolError::NoDevice(agent))?;
        ranges
            .iter()
            .map(|&(base, size)| {
                let len = usize::try_from(size).map_err(|e| ToolError::Digest(e.to_string()))?;
                let bytes = rt
                    .read(base, len)
                    .map_err(|e| ToolError::Digest(e.to_string()))?;
                Ok(replay_core::digest::digest(key, &bytes))
            })
            .collect()
    }
}
