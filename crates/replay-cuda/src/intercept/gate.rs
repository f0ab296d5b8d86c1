//! The write gates a write that is not replayed takes (SPEC §6 step 4): the current device's
//! agent ([`gate_agent`]: cooperative launches, launches in another context, graph launches
//! run once) and, for a copy, memset or stream destroy, the destination's agent too
//! ([`write_gates`]).

use std::sync::Arc;

use replay_core::{AgentId, ReplayService};

use crate::state::{current_device, service, state};

/// The agent of the current context, for gating a write that is not replayed.
pub(crate) fn gate_agent() -> Option<(Arc<ReplayService>, AgentId)> {
    let svc = service()?;
    let ord = current_device()?;
    Some((svc, AgentId(ord as u64)))
}

/// The write gates a copy or memset takes (SPEC §6 step 4): the current device's agent and,
/// when the destination is tracked memory of another agent (a peer copy, or a UVA copy into
/// another device's memory), that agent's too, taken in ascending agent order so two such
/// copies never wait on each other crosswise.
pub(crate) fn write_gates(dst: Option<u64>) -> smallvec::SmallVec<[replay_core::WriteGate; 2]> {
    let mut out = smallvec::SmallVec::new();
    let Some(svc) = service() else { return out };
    let mut agents: smallvec::SmallVec<[AgentId; 2]> = smallvec::SmallVec::new();
    if let Some(d) = current_device() {
        agents.push(AgentId(d as u64));
    }
    if let Some((owner, _)) = dst
        .filter(|&d| d != 0)
        .and_then(|d| state().tracker.lookup_any(d))
    {
        if !agents.contains(&owner) {
            agents.push(owner);
        }
    }
    agents.sort_unstable_by_key(|a| a.0);
    for a in agents {
        out.push(svc.enter_write(a));
    }
    out
}
