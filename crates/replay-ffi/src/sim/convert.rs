//! The simulator's limits and conversions for the C ABI (SPEC §10): C enumeration values to the
//! simulator's memory classes, counter groups and faults (out of range is `BAD_ENUM`), the
//! status of a simulator error, and the checks on agents and byte counts.

use replay_core::{AgentId, MemoryClass, Tier};
use replay_mock::{CounterGroup, Fault, FaultMode, SimError};

use crate::checked::{Error, ZeroValid};
use crate::sys::*;

/// Most agents of one simulator.
pub(super) const MAX_AGENTS: u32 = 16;
/// Most bytes of one allocation, host access or module variable.
pub(super) const MAX_BYTES: u64 = 1 << 30;
/// Most bytes of an argument block.
pub(super) const MAX_ARGS: usize = 4096;
/// Most variables or kernels of a module.
pub(super) const MAX_MODULE_ITEMS: u64 = 4096;

// SAFETY: integers only.
unsafe impl ZeroValid for kreplay_sim_fault_t {}
// SAFETY: integers and raw pointers only.
unsafe impl ZeroValid for kreplay_sim_module_desc_t {}
// SAFETY: integers only.
unsafe impl ZeroValid for kreplay_sim_result_t {}
// SAFETY: integers and a float only.
unsafe impl ZeroValid for kreplay_sim_counter_sample_t {}

/// The C ABI's status for a simulator error.
pub(super) fn sim_error(e: SimError) -> Error {
    match e {
        SimError::OutOfMemory { .. } => Error::OutOfMemory(e.to_string()),
        SimError::UnknownAgent(_)
        | SimError::UnknownQueue { .. }
        | SimError::InvalidFree { .. }
        | SimError::AddressInUse { .. }
        | SimError::Fault(_)
        | SimError::Invalid(_) => Error::BadArgument(e.to_string()),
        SimError::Backend(_) | SimError::Shutdown => Error::Device(e.to_string()),
    }
}

/// The class of a `KREPLAY_SIM_MEMORY_*` value, and whether the tracker hears of it.
pub(super) fn decode_memory(v: kreplay_sim_memory_t) -> Result<(MemoryClass, bool), Error> {
    Ok(match v {
        KREPLAY_SIM_MEMORY_DEVICE_COARSE => (MemoryClass::DEVICE_COARSE, true),
        KREPLAY_SIM_MEMORY_FINE_GRAINED => (MemoryClass::FINE_GRAINED, true),
        KREPLAY_SIM_MEMORY_MANAGED => (MemoryClass::MANAGED, true),
        KREPLAY_SIM_MEMORY_PINNED_HOST => (MemoryClass::PINNED_HOST, true),
        KREPLAY_SIM_MEMORY_IPC_IMPORTED => (MemoryClass::IPC_IMPORTED, true),
        KREPLAY_SIM_MEMORY_PEER => (MemoryClass::PEER, true),
        KREPLAY_SIM_MEMORY_VIRTUAL_MAPPING => (MemoryClass::VIRTUAL_MAPPING, true),
        KREPLAY_SIM_MEMORY_KERNARG => (MemoryClass::KERNARG, true),
        KREPLAY_SIM_MEMORY_TOOL_OWNED => {
            (MemoryClass::DEVICE_COARSE | MemoryClass::TOOL_OWNED, true)
        }
        KREPLAY_SIM_MEMORY_UNTRACKED => (MemoryClass::DEVICE_COARSE, false),
        _ => {
            return Err(Error::BadEnum {
                what: "memory",
                value: i64::from(v),
            })
        }
    })
}

/// A counter group value; `None` for `KREPLAY_SIM_COUNTER_NONE`.
pub(super) fn decode_group(v: kreplay_sim_counter_group_t) -> Result<Option<CounterGroup>, Error> {
    if v == KREPLAY_SIM_COUNTER_NONE {
        return Ok(None);
    }
    CounterGroup::from_index(v).map(Some).ok_or(Error::BadEnum {
        what: "group",
        value: i64::from(v),
    })
}

/// The C value of a counter group.
pub(super) fn group_code(g: Option<CounterGroup>) -> kreplay_sim_counter_group_t {
    g.map_or(KREPLAY_SIM_COUNTER_NONE, |g| g as u32)
}

/// The simulator's fault for a C description.
pub(super) fn decode_fault(f: &kreplay_sim_fault_t) -> Result<(Fault, FaultMode), Error> {
    let mode = match f.mode {
        KREPLAY_SIM_FAULT_ONCE => FaultMode::Once,
        KREPLAY_SIM_FAULT_ALWAYS => FaultMode::Always,
        v => {
            return Err(Error::BadEnum {
                what: "fault->mode",
                value: i64::from(v),
            })
        }
    };
    let address = || {
        if f.address == 0 {
            Err(Error::BadArgument(
                "`fault->address` is 0; this fault needs the base of an allocation".to_owned(),
            ))
        } else {
            Ok(f.address)
        }
    };
    let pass = f.pass;
    let fault = match f.kind {
        KREPLAY_SIM_FAULT_SNAPSHOT_OOM => Fault::SnapshotOom,
        KREPLAY_SIM_FAULT_TIER_OOM => Fault::TierOom(match f.tier {
            KREPLAY_SIM_TIER_DEVICE => Tier::Device,
            KREPLAY_SIM_TIER_PINNED_HOST => Tier::PinnedHost,
            KREPLAY_SIM_TIER_PAGEABLE_HOST => Tier::PageableHost,
            v => {
                return Err(Error::BadEnum {
                    what: "fault->tier",
                    value: i64::from(v),
                })
            }
        }),
        KREPLAY_SIM_FAULT_CAPTURE_COPY_FAIL => Fault::CaptureCopyFail,
        KREPLAY_SIM_FAULT_CAPTURE_COPY_STUCK => Fault::CaptureCopyStuck,
        KREPLAY_SIM_FAULT_QUEUE_DRAIN_STUCK => Fault::QueueDrainStuck,
        KREPLAY_SIM_FAULT_AGENT_DRAIN_STUCK => Fault::AgentDrainStuck,
        KREPLAY_SIM_FAULT_COPY_FENCE_STUCK => Fault::CopyFenceStuck,
        KREPLAY_SIM_FAULT_PASS_STUCK => Fault::PassStuck { pass },
        KREPLAY_SIM_FAULT_PASS_SUBMIT_FAIL => Fault::PassSubmitFail { pass },
        KREPLAY_SIM_FAULT_RESTORE_FAIL => Fault::RestoreFail,
        KREPLAY_SIM_FAULT_DIGEST_FAIL => Fault::DigestFail,
        KREPLAY_SIM_FAULT_INCOMPLETE_MODULE_ENUMERATION => Fault::IncompleteModuleEnumeration,
        KREPLAY_SIM_FAULT_FREE_DURING_PASS => Fault::FreeDuringPass {
            base: address()?,
            pass,
        },
        KREPLAY_SIM_FAULT_REALLOC_DURING_PASS => Fault::ReallocDuringPass {
            base: address()?,
            pass,
        },
        KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL => Fault::OrdinarySubmitFail,
        v => {
            return Err(Error::BadEnum {
                what: "fault->kind",
                value: i64::from(v),
            })
        }
    };
    Ok((fault, mode))
}

/// The id of agent `agent` of `rt`, or `BadArgument`.
pub(super) fn agent_of(rt: &replay_mock::SimRuntime, agent: u32) -> Result<AgentId, Error> {
    let n = rt.agents().len();
    if (agent as usize) < n {
        Ok(AgentId(u64::from(agent)))
    } else {
        Err(Error::BadArgument(format!(
            "agent {agent} does not exist; the simulator has {n} agent(s), numbered from 0"
        )))
    }
}

/// Checks a byte count against [`MAX_BYTES`].
pub(super) fn check_bytes(what: &str, n: u64) -> Result<(), Error> {
    if n > MAX_BYTES {
        Err(Error::BadArgument(format!(
            "`{what}` = {n} exceeds the simulator's limit of {MAX_BYTES} bytes"
        )))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use super::*;

    #[test]
    fn enumerations_decode_and_reject_out_of_range_values() {
        for v in 0..=KREPLAY_SIM_MEMORY_UNTRACKED {
            assert!(decode_memory(v).is_ok(), "{v}");
        }
        assert_eq!(
            decode_memory(KREPLAY_SIM_MEMORY_UNTRACKED + 1)
                .unwrap_err()
                .status(),
            KREPLAY_STATUS_BAD_ENUM
        );
        assert_eq!(
            decode_memory(KREPLAY_SIM_MEMORY_TOOL_OWNED).unwrap(),
            (MemoryClass::DEVICE_COARSE | MemoryClass::TOOL_OWNED, true)
        );
        assert!(!decode_memory(KREPLAY_SIM_MEMORY_UNTRACKED).unwrap().1);
        for g in 0..KREPLAY_SIM_COUNTER_GROUP_COUNT {
            assert_eq!(group_code(decode_group(g).unwrap()), g);
        }
        assert_eq!(decode_group(KREPLAY_SIM_COUNTER_NONE).unwrap(), None);
        assert!(decode_group(5).is_err());

        let mut f = kreplay_sim_fault_t::zeroed();
        f.size = size_of::<kreplay_sim_fault_t>() as u64;
        for kind in 0..=KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL {
            f.kind = kind;
            f.address = 0x1000_0000_0000;
            f.pass = 2;
            let (fault, mode) = decode_fault(&f).unwrap();
            assert_eq!(mode, FaultMode::Once);
            if kind == KREPLAY_SIM_FAULT_PASS_SUBMIT_FAIL {
                assert_eq!(fault, Fault::PassSubmitFail { pass: 2 });
            }
        }
        f.kind = KREPLAY_SIM_FAULT_ORDINARY_SUBMIT_FAIL + 1;
        assert_eq!(
            decode_fault(&f).unwrap_err().status(),
            KREPLAY_STATUS_BAD_ENUM
        );
        f.kind = KREPLAY_SIM_FAULT_TIER_OOM;
        f.tier = 3;
        assert_eq!(
            decode_fault(&f).unwrap_err().status(),
            KREPLAY_STATUS_BAD_ENUM
        );
        f.tier = KREPLAY_SIM_TIER_PAGEABLE_HOST;
        assert_eq!(
            decode_fault(&f).unwrap().0,
            Fault::TierOom(Tier::PageableHost)
        );
        f.mode = 2;
        assert_eq!(
            decode_fault(&f).unwrap_err().status(),
            KREPLAY_STATUS_BAD_ENUM
        );
        f.mode = KREPLAY_SIM_FAULT_ALWAYS;
        f.kind = KREPLAY_SIM_FAULT_FREE_DURING_PASS;
        f.address = 0;
        assert_eq!(
            decode_fault(&f).unwrap_err().status(),
            KREPLAY_STATUS_BAD_ARGUMENT
        );
    }

    #[test]
    fn simulator_errors_map_to_statuses() {
        let oom = SimError::OutOfMemory {
            agent: AgentId(0),
            pool: "device",
            requested: 1,
            available: 0,
        };
        assert_eq!(sim_error(oom).status(), KREPLAY_STATUS_OUT_OF_MEMORY);
        assert_eq!(
            sim_error(SimError::Shutdown).status(),
            KREPLAY_STATUS_DEVICE_ERROR
        );
        assert_eq!(
            sim_error(SimError::UnknownAgent(AgentId(3))).status(),
            KREPLAY_STATUS_BAD_ARGUMENT
        );
    }
}
