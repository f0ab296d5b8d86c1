//! Enumerations across the boundary (SPEC §10): C values decoded into the
//! core's types (an out-of-range value is `BAD_ENUM`, never undefined behaviour) and the C value
//! of each core enumeration.

use replay_context::OverrideSupport;
use replay_core::{
    Operation, Outcome, Phase, PredictFallback, PredictSource, Reason, RestoreMode, Scope,
    Subscription,
};

use super::error::Error;
use crate::sys::*;

/// Decodes a subscription: non-zero, known bits only.
pub(crate) fn decode_subscription(bits: u32) -> Result<Subscription, Error> {
    match Subscription::from_bits(bits) {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(Error::BadEnum {
            what: "subscription",
            value: i64::from(bits),
        }),
    }
}

/// Decodes a participant's override support.
pub(crate) fn decode_support(v: u32) -> Result<OverrideSupport, Error> {
    match v {
        KREPLAY_OVERRIDES_HONOURED => Ok(OverrideSupport::Honours),
        KREPLAY_OVERRIDES_UNSUPPORTED => Ok(OverrideSupport::CannotHonour),
        _ => Err(Error::BadEnum {
            what: "support",
            value: i64::from(v),
        }),
    }
}

/// The C value of an operation.
pub(crate) fn operation_code(op: Operation) -> kreplay_operation_t {
    match op {
        Operation::Config => KREPLAY_OPERATION_CONFIG,
        Operation::Pass => KREPLAY_OPERATION_PASS,
    }
}

/// The C value of a phase.
pub(crate) fn phase_code(phase: Phase) -> kreplay_phase_t {
    match phase {
        Phase::Enter => KREPLAY_PHASE_ENTER,
        Phase::Exit => KREPLAY_PHASE_EXIT,
    }
}

/// The C value of an outcome.
pub(crate) fn outcome_code(o: Outcome) -> kreplay_outcome_kind_t {
    match o {
        Outcome::Replayed => KREPLAY_OUTCOME_REPLAYED,
        Outcome::Declined => KREPLAY_OUTCOME_DECLINED,
        Outcome::Truncated => KREPLAY_OUTCOME_TRUNCATED,
        Outcome::NotRequested => KREPLAY_OUTCOME_NOT_REQUESTED,
    }
}

/// Every reason with its C value.
pub(crate) const REASONS: [(Reason, kreplay_reason_t); 17] = [
    (Reason::None, KREPLAY_REASON_NONE),
    (Reason::UntrackedMemory, KREPLAY_REASON_UNTRACKED_MEMORY),
    (Reason::FootprintBudget, KREPLAY_REASON_FOOTPRINT_BUDGET),
    (Reason::SnapshotFailed, KREPLAY_REASON_SNAPSHOT_FAILED),
    (Reason::QueueDrainStuck, KREPLAY_REASON_QUEUE_DRAIN_STUCK),
    (Reason::AgentDrainStuck, KREPLAY_REASON_AGENT_DRAIN_STUCK),
    (Reason::CopyFenceStuck, KREPLAY_REASON_COPY_FENCE_STUCK),
    (Reason::ReentrantDispatch, KREPLAY_REASON_REENTRANT_DISPATCH),
    (Reason::CallbackFailed, KREPLAY_REASON_CALLBACK_FAILED),
    (Reason::PassDrainStuck, KREPLAY_REASON_PASS_DRAIN_STUCK),
    (Reason::PassLimit, KREPLAY_REASON_PASS_LIMIT),
    (
        Reason::WriteOutsideScope,
        KREPLAY_REASON_WRITE_OUTSIDE_SCOPE,
    ),
    (Reason::SubmitFailed, KREPLAY_REASON_SUBMIT_FAILED),
    (Reason::ScopeCheckFailed, KREPLAY_REASON_SCOPE_CHECK_FAILED),
    (Reason::DeviceError, KREPLAY_REASON_DEVICE_ERROR),
    (Reason::AgentBusy, KREPLAY_REASON_AGENT_BUSY),
    (Reason::UnseenWrites, KREPLAY_REASON_UNSEEN_WRITES),
];

/// The C value of a reason.
pub(crate) fn reason_code(r: Reason) -> kreplay_reason_t {
    // Exhaustive on purpose: a reason added to the core must get a C value here.
    match r {
        Reason::None => KREPLAY_REASON_NONE,
        Reason::UntrackedMemory => KREPLAY_REASON_UNTRACKED_MEMORY,
        Reason::FootprintBudget => KREPLAY_REASON_FOOTPRINT_BUDGET,
        Reason::SnapshotFailed => KREPLAY_REASON_SNAPSHOT_FAILED,
        Reason::QueueDrainStuck => KREPLAY_REASON_QUEUE_DRAIN_STUCK,
        Reason::AgentDrainStuck => KREPLAY_REASON_AGENT_DRAIN_STUCK,
        Reason::CopyFenceStuck => KREPLAY_REASON_COPY_FENCE_STUCK,
        Reason::ReentrantDispatch => KREPLAY_REASON_REENTRANT_DISPATCH,
        Reason::CallbackFailed => KREPLAY_REASON_CALLBACK_FAILED,
        Reason::PassDrainStuck => KREPLAY_REASON_PASS_DRAIN_STUCK,
        Reason::PassLimit => KREPLAY_REASON_PASS_LIMIT,
        Reason::WriteOutsideScope => KREPLAY_REASON_WRITE_OUTSIDE_SCOPE,
        Reason::SubmitFailed => KREPLAY_REASON_SUBMIT_FAILED,
        Reason::ScopeCheckFailed => KREPLAY_REASON_SCOPE_CHECK_FAILED,
        Reason::DeviceError => KREPLAY_REASON_DEVICE_ERROR,
        Reason::AgentBusy => KREPLAY_REASON_AGENT_BUSY,
        Reason::UnseenWrites => KREPLAY_REASON_UNSEEN_WRITES,
    }
}

/// The C value of a reason named as in logs and JSON.
pub(crate) fn reason_code_by_name(name: &str) -> Option<kreplay_reason_t> {
    REASONS
        .iter()
        .find(|(r, _)| r.as_str() == name)
        .map(|&(_, c)| c)
}

/// The C value of a scope.
pub(crate) fn scope_code(s: Scope) -> kreplay_scope_t {
    match s {
        Scope::All => KREPLAY_SCOPE_ALL,
        Scope::Arguments => KREPLAY_SCOPE_ARGUMENTS,
        Scope::Auto => KREPLAY_SCOPE_AUTO,
        Scope::Predicted => KREPLAY_SCOPE_PREDICTED,
    }
}

/// The C value of a scope `predicted` source.
pub(crate) fn predict_source_code(s: PredictSource) -> kreplay_predict_source_t {
    match s {
        PredictSource::None => KREPLAY_PREDICT_SOURCE_NONE,
        PredictSource::FirstRule => KREPLAY_PREDICT_SOURCE_FIRST_RULE,
        PredictSource::Learned => KREPLAY_PREDICT_SOURCE_LEARNED,
    }
}

/// The C value of a scope `predicted` fallback.
pub(crate) fn predict_fallback_code(f: PredictFallback) -> kreplay_predict_fallback_t {
    match f {
        PredictFallback::None => KREPLAY_PREDICT_FALLBACK_NONE,
        PredictFallback::FitsDevice => KREPLAY_PREDICT_FALLBACK_FITS_DEVICE,
        PredictFallback::SmallRegions => KREPLAY_PREDICT_FALLBACK_SMALL_REGIONS,
        PredictFallback::RepeatedMisses => KREPLAY_PREDICT_FALLBACK_REPEATED_MISSES,
        PredictFallback::UnknownLayout => KREPLAY_PREDICT_FALLBACK_UNKNOWN_LAYOUT,
    }
}

/// The C value of a restore mode.
pub(crate) fn restore_code(r: RestoreMode) -> kreplay_restore_t {
    match r {
        RestoreMode::Full => KREPLAY_RESTORE_FULL,
        RestoreMode::Dirty => KREPLAY_RESTORE_DIRTY,
        RestoreMode::Auto => KREPLAY_RESTORE_AUTO,
    }
}

#[cfg(test)]
mod tests {
    use super::super::pointer::{c_str, lossy_cstring};
    use super::*;

    #[test]
    fn strings_and_enums_are_checked() {
        // SAFETY: NULL is refused before use; the literals are NUL-terminated.
        unsafe {
            assert_eq!(
                c_str(std::ptr::null(), "name").unwrap_err().status(),
                KREPLAY_STATUS_NULL_POINTER
            );
            assert_eq!(c_str(c"ok".as_ptr(), "name").unwrap(), "ok");
            assert_eq!(
                c_str(c"\xff".as_ptr(), "name").unwrap_err().status(),
                KREPLAY_STATUS_BAD_ARGUMENT
            );
        }
        assert!(decode_subscription(0).is_err());
        assert!(decode_subscription(4).is_err());
        assert_eq!(
            decode_subscription(3).unwrap(),
            Subscription::CONFIG | Subscription::PASS
        );
        assert_eq!(
            decode_support(2).unwrap_err().status(),
            KREPLAY_STATUS_BAD_ENUM
        );
        assert_eq!(lossy_cstring("a\0b").as_bytes(), "a\u{fffd}b".as_bytes());
        for (r, c) in REASONS {
            assert_eq!(reason_code(r), c);
            assert_eq!(reason_code_by_name(r.as_str()), Some(c));
            assert!(c < KREPLAY_REASON_CAPACITY);
        }
    }
}
