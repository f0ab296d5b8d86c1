//! HSA agents as the core names them: each `hsa_agent_t` handle the backend meets gets an
//! [`AgentId`] (ordinals in first-seen order, never reused) and its device type, queried once.
//!
//! Stage 2 implements [`replay_core::Agent`] here for GPU agents (queues, drains, passes).

use std::collections::HashMap;

use parking_lot::RwLock;
use replay_core::AgentId;

use crate::sys;

/// What the backend knows of one agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AgentInfo {
    /// The core's name for it.
    pub id: AgentId,
    /// The runtime's handle.
    pub handle: u64,
    /// `hsa_device_type_t` (CPU 0, GPU 1, DSP 2), when the runtime answered.
    pub device: Option<u32>,
}

impl AgentInfo {
    /// Whether the agent is a CPU (its memory is host memory).
    pub fn is_cpu(&self) -> bool {
        self.device == Some(sys::HSA_DEVICE_TYPE_CPU)
    }
}

/// The agents seen so far.
#[derive(Debug, Default)]
pub struct Agents {
    by_handle: RwLock<HashMap<u64, AgentInfo>>,
}

impl Agents {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The agent of `handle`, registered on first sight; `device` is asked (once, until it
    /// answers) for the device type.
    pub fn get(&self, handle: u64, device: impl FnOnce() -> Option<u32>) -> AgentInfo {
        if let Some(a) = self.by_handle.read().get(&handle) {
            if a.device.is_some() {
                return *a;
            }
        }
        let dev = device();
        let mut map = self.by_handle.write();
        let next = map.len() as u64;
        let a = map.entry(handle).or_insert(AgentInfo {
            id: AgentId(next),
            handle,
            device: None,
        });
        if a.device.is_none() {
            a.device = dev;
        }
        *a
    }

    /// Every agent seen, by id.
    pub fn all(&self) -> Vec<AgentInfo> {
        let mut v: Vec<_> = self.by_handle.read().values().copied().collect();
        v.sort_by_key(|a| a.id);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_first_seen_ordinals_and_device_is_asked_until_known() {
        let agents = Agents::new();
        let gpu = agents.get(0xabc, || None);
        assert_eq!((gpu.id, gpu.device), (AgentId(0), None));
        let gpu = agents.get(0xabc, || Some(sys::HSA_DEVICE_TYPE_GPU));
        assert_eq!((gpu.id, gpu.device), (AgentId(0), Some(1)));
        // Known now: not asked again.
        let again = agents.get(0xabc, || panic!("asked twice"));
        assert_eq!(again, gpu);
        let cpu = agents.get(0x1, || Some(sys::HSA_DEVICE_TYPE_CPU));
        assert_eq!(cpu.id, AgentId(1));
        assert!(cpu.is_cpu() && !gpu.is_cpu());
        assert_eq!(agents.all(), vec![gpu, cpu]);
    }
}
