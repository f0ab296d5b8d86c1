//! The simulator's side of the built-in tools ([`replay_tools::ToolDevice`]), as every
//! backend has one: `verify` digests the agent's tracked coarse-grained device regions, read
//! from the simulated heap and digested with the reference digest.

use replay_core::{AgentId, Digest128, DigestKey, MemoryClass, RegionRef};
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
    fn verify_regions(&self, agent: AgentId) -> Vec<RegionRef> {
        let Some(rt) = self.runtime.upgrade() else {
            return Vec::new();
        };
        rt.tracker()
            .regions(agent)
            .into_iter()
            .filter(|r| r.class == MemoryClass::DEVICE_COARSE && r.size > 0)
            .collect()
    }

    fn digest(
        &self,
        agent: AgentId,
        regions: &[RegionRef],
        key: DigestKey,
    ) -> Result<Vec<Option<Digest128>>, ToolError> {
        let rt = self.runtime.upgrade().ok_or(ToolError::NoDevice(agent))?;
        // As on a GPU: a freed region is not read (the simulated heap would answer an error).
        rt.tracker().read_live(agent, regions, |live| {
            live.iter()
                .map(|r| {
                    let len =
                        usize::try_from(r.size).map_err(|e| ToolError::Digest(e.to_string()))?;
                    let bytes = rt
                        .read(r.base, len)
                        .map_err(|e| ToolError::Digest(e.to_string()))?;
                    Ok(replay_core::digest::digest(key, &bytes))
                })
                .collect()
        })
    }
}
