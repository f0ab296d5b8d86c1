//! The counter collection through the C ABI (feature `cuda`, SPEC §10, §12.1;
//! `include/kernel_replay_cuda.h`): a tool with its own front end creates a collection from a
//! metric list (compiled for device 0's chip at once, so a list that cannot be collected fails
//! here, naming the metrics), asks its pass count, forwards its PASS ENTER, PASS EXIT and
//! CONFIG EXIT callbacks to it, and reads values per `(dispatch, pass)` or the whole report as
//! JSON. Over [`replay_cuda::counters`]; handles are checked (slot, generation and tag), every
//! entry catches panics.

use std::ffi::{c_char, CStr};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use replay_core::{
    AgentId, Dim3, DispatchId, DispatchInfo, KernelId, Outcome, OutcomeRecord, QueueId,
};
use replay_cuda::counters::{CounterCollector, CuptiProfiler, MetricPlan, Profiler, ReportHeader};

use crate::checked::{
    c_str, copy_out_str, guard, non_null, write_out, Error, HandleTable, REASONS,
};
use crate::sys::{
    kreplay_dispatch_info_t, kreplay_operation_t, kreplay_outcome_t, kreplay_phase_t,
    kreplay_replay_payload_t, kreplay_status_t, KREPLAY_OPERATION_CONFIG, KREPLAY_OPERATION_PASS,
    KREPLAY_OUTCOME_DECLINED, KREPLAY_OUTCOME_NOT_REQUESTED, KREPLAY_OUTCOME_REPLAYED,
    KREPLAY_OUTCOME_TRUNCATED, KREPLAY_PHASE_ENTER, KREPLAY_PHASE_EXIT,
};

/// The handles' tag (the simulator's tables use 1 to 4).
const TAG_COUNTERS: u8 = 0x43;

fn table() -> &'static Mutex<HandleTable<Arc<CounterCollector>>> {
    static T: OnceLock<Mutex<HandleTable<Arc<CounterCollector>>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HandleTable::tagged(TAG_COUNTERS)))
}

fn get(handle: u64) -> Result<Arc<CounterCollector>, Error> {
    table()
        .lock()
        .get(handle)
        .cloned()
        .ok_or_else(|| Error::InvalidHandle(format!("counter collection {handle:#x}")))
}

/// The dispatch a C payload describes.
///
/// # Safety
///
/// `info` is NULL or points to a dispatch info the library built (valid during the callback).
unsafe fn dispatch_of(info: *const kreplay_dispatch_info_t) -> Result<DispatchInfo, Error> {
    non_null(info, "payload->dispatch_info")?;
    // SAFETY: non-null (checked), valid during the callback (caller).
    let d = unsafe { &*info };
    let name = if d.kernel_name.is_null() {
        String::new()
    } else {
        // SAFETY: the library's NUL-terminated kernel name.
        unsafe { CStr::from_ptr(d.kernel_name) }
            .to_string_lossy()
            .into_owned()
    };
    Ok(DispatchInfo::new(
        AgentId(d.agent_id),
        QueueId(d.queue_id),
        KernelId(d.kernel_id),
        name,
        Dim3::new(d.grid.x, d.grid.y, d.grid.z),
        Dim3::new(d.workgroup.x, d.workgroup.y, d.workgroup.z),
    )
    .with_dispatch_id(DispatchId(d.dispatch_id))
    .with_private_segment_size(d.private_segment_size)
    .with_group_segment_size(d.group_segment_size))
}

/// What the collection reads of a C outcome: kind, reason (the collection's messages name
/// both), passes and captured bytes.
fn record_of(info: &DispatchInfo, o: &kreplay_outcome_t) -> Result<OutcomeRecord, Error> {
    let mut r = OutcomeRecord::new(info.dispatch_id, info.agent, &info.kernel_name);
    r.outcome = match o.outcome {
        KREPLAY_OUTCOME_REPLAYED => Outcome::Replayed,
        KREPLAY_OUTCOME_DECLINED => Outcome::Declined,
        KREPLAY_OUTCOME_TRUNCATED => Outcome::Truncated,
        KREPLAY_OUTCOME_NOT_REQUESTED => Outcome::NotRequested,
        v => {
            return Err(Error::BadEnum {
                what: "payload->outcome->outcome",
                value: i64::from(v),
            })
        }
    };
    r.reason = REASONS
        .iter()
        .find(|&&(_, c)| c == o.reason)
        .map(|&(reason, _)| reason)
        .ok_or(Error::BadEnum {
            what: "payload->outcome->reason",
            value: i64::from(o.reason),
        })?;
    r.executed_passes = o.executed_passes;
    r.requested_passes = o.requested_passes;
    r.captured_bytes = o.captured_bytes;
    Ok(r)
}

/// Compiles `count` metric names for device 0's chip and creates a collection that asks for
/// at least `min_passes` passes. A metric the chip cannot collect is
/// `KREPLAY_STATUS_BAD_ARGUMENT` naming it (kreplay_last_error); CUPTI or the driver missing
/// is `KREPLAY_STATUS_UNSUPPORTED` naming the library.
///
/// # Safety
///
/// 1. `metrics` is valid for reads of `count` pointers, each a NUL-terminated string.
/// 2. `out` is NULL (refused) or valid for a write of a `u64`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_cuda_counters_create(
    metrics: *const *const c_char,
    count: usize,
    min_passes: u32,
    out: *mut u64,
) -> kreplay_status_t {
    guard("kreplay_cuda_counters_create", || {
        non_null(out, "out")?;
        non_null(metrics, "metrics")?;
        if count == 0 || count > 4096 {
            return Err(Error::BadArgument(format!("{count} metrics (1 to 4096)")));
        }
        let mut names = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: `metrics` holds `count` pointers (caller, item 1).
            let p = unsafe { *metrics.add(i) };
            // SAFETY: a NUL-terminated string or NULL (refused) (caller, item 1).
            let s = unsafe { c_str(p, "metrics[i]")? };
            names.extend(replay_cuda::counters::parse_metric_list(s));
        }
        let profiler = CuptiProfiler::global().map_err(|e| Error::Unavailable(e.to_string()))?;
        let chip = profiler
            .chip(0)
            .map_err(|e| Error::Unavailable(e.to_string()))?;
        let plan = MetricPlan::compile(profiler, &chip, &names).map_err(|e| match e {
            e @ (replay_cuda::counters::CounterError::Metrics { .. }
            | replay_cuda::counters::CounterError::Empty) => Error::BadArgument(e.to_string()),
            e => Error::Unavailable(e.to_string()),
        })?;
        let c = Arc::new(CounterCollector::new(
            Arc::new(plan),
            Arc::new(profiler),
            min_passes,
        ));
        let h = table()
            .lock()
            .insert(c)
            .map_err(|_| Error::Internal("too many counter collections".into()))?;
        // SAFETY: non-null (checked), writable (caller, item 2).
        unsafe { write_out(out, "out", h) }
    })
}

/// The passes a dispatch needs for the collection (what the tool's pass-count callback
/// returns).
///
/// # Safety
///
/// `passes` is NULL (refused) or valid for a write of a `u32`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_cuda_counters_passes(
    collection: u64,
    passes: *mut u32,
) -> kreplay_status_t {
    guard("kreplay_cuda_counters_passes", || {
        non_null(passes, "passes")?;
        let c = get(collection)?;
        // SAFETY: non-null (checked), writable (caller).
        unsafe { write_out(passes, "passes", c.pass_count()) }
    })
}

/// Forwards one of the tool's replay callbacks: PASS ENTER runs the profiler's start (and the
/// configuration of a group's first pass), PASS EXIT its stop and decoding, CONFIG EXIT the
/// dispatch's record; CONFIG ENTER does nothing (the tool sets its pass count).
///
/// # Safety
///
/// `payload` is NULL (refused) or the payload the library passed to the callback, used during
/// that callback.
#[no_mangle]
pub unsafe extern "C" fn kreplay_cuda_counters_callback(
    collection: u64,
    operation: kreplay_operation_t,
    phase: kreplay_phase_t,
    payload: *const kreplay_replay_payload_t,
) -> kreplay_status_t {
    guard("kreplay_cuda_counters_callback", || {
        non_null(payload, "payload")?;
        let c = get(collection)?;
        // SAFETY: non-null (checked), the library's payload (caller).
        let p = unsafe { &*payload };
        // SAFETY: the payload's dispatch info (caller).
        let info = unsafe { dispatch_of(p.dispatch_info)? };
        match (operation, phase) {
            (KREPLAY_OPERATION_PASS, KREPLAY_PHASE_ENTER) => c.pass_enter(&info, p.current_pass),
            (KREPLAY_OPERATION_PASS, KREPLAY_PHASE_EXIT) => c.pass_exit(&info, p.current_pass),
            (KREPLAY_OPERATION_CONFIG, KREPLAY_PHASE_EXIT) => {
                non_null(p.outcome, "payload->outcome")?;
                // SAFETY: non-null (checked), the library's outcome (caller).
                let r = record_of(&info, unsafe { &*p.outcome })?;
                c.finish(&info, Some(&r));
            }
            (KREPLAY_OPERATION_CONFIG, KREPLAY_PHASE_ENTER) => {}
            (op, ph) => {
                return Err(Error::BadEnum {
                    what: "operation and phase",
                    value: i64::from(op) << 8 | i64::from(ph),
                })
            }
        }
        Ok(())
    })
}

/// The value of `metric` for `dispatch_id`, and the pass that collected it.
/// `KREPLAY_STATUS_NOT_FOUND` when there is none (not replayed, not collected yet, or the
/// profiler evaluated no value: the report's `errors` say why).
///
/// # Safety
///
/// `metric` is a NUL-terminated string; `pass` and `value` are NULL (refused) or writable.
#[no_mangle]
pub unsafe extern "C" fn kreplay_cuda_counters_value(
    collection: u64,
    dispatch_id: u64,
    metric: *const c_char,
    pass: *mut u32,
    value: *mut f64,
) -> kreplay_status_t {
    guard("kreplay_cuda_counters_value", || {
        non_null(pass, "pass")?;
        non_null(value, "value")?;
        // SAFETY: NULL (refused) or NUL-terminated (caller).
        let m = unsafe { c_str(metric, "metric")? };
        let c = get(collection)?;
        // One sample looked up, not the whole report copied for it.
        let (p, v) = c
            .sample(dispatch_id, m)
            .ok_or_else(|| Error::NotFound(format!("{m} of dispatch {dispatch_id}")))?;
        // SAFETY: both non-null (checked), writable (caller).
        unsafe {
            write_out(pass, "pass", p)?;
            write_out(value, "value", v)
        }
    })
}

/// The collection so far as JSON: `{"counters": CounterReport, "plan": ..., "errors": [...]}`.
/// `*required` gets the size needed (with the NUL); a smaller buffer is
/// `KREPLAY_STATUS_BUFFER_TOO_SMALL` and left untouched.
///
/// # Safety
///
/// `buffer` is NULL or valid for `buffer_size` bytes; `required` is NULL (refused) or writable.
#[no_mangle]
pub unsafe extern "C" fn kreplay_cuda_counters_report_json(
    collection: u64,
    buffer: *mut c_char,
    buffer_size: usize,
    required: *mut usize,
) -> kreplay_status_t {
    guard("kreplay_cuda_counters_report_json", || {
        let c = get(collection)?;
        let header = ReportHeader {
            process_id: std::process::id(),
            ..ReportHeader::default()
        };
        let json = serde_json::json!({
            "counters": c.report(&header),
            "plan": c.plan().summary(),
            "errors": c.errors().into_iter()
                .map(|(d, e)| serde_json::json!({"dispatch_id": d, "error": e}))
                .collect::<Vec<_>>(),
        })
        .to_string();
        // SAFETY: the caller's buffer and out pointer (forwarded contract).
        unsafe { copy_out_str(&json, buffer, buffer_size, required) }
    })
}

/// Destroys a collection; the handle is invalid afterwards.
///
/// # Safety
///
/// No preconditions: a stale or made-up handle is `KREPLAY_STATUS_INVALID_HANDLE`.
#[no_mangle]
pub extern "C" fn kreplay_cuda_counters_destroy(collection: u64) -> kreplay_status_t {
    guard("kreplay_cuda_counters_destroy", || {
        table()
            .lock()
            .remove(collection)
            .map(drop)
            .ok_or_else(|| Error::InvalidHandle(format!("counter collection {collection:#x}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checked::COutcome;
    use replay_core::Reason;

    #[test]
    fn a_c_outcome_keeps_its_reason_for_the_collections_messages() {
        let mut rec = OutcomeRecord::new(DispatchId(7), AgentId(0), "_Z3rmwPdm");
        rec.outcome = Outcome::Truncated;
        rec.reason = Reason::PassDrainStuck;
        rec.executed_passes = 1;
        rec.requested_passes = 3;
        rec.captured_bytes = 4096;
        let c = COutcome::new(&rec);
        let info = DispatchInfo::new(
            AgentId(0),
            QueueId(1),
            KernelId(2),
            "_Z3rmwPdm",
            Dim3::new(1, 1, 1),
            Dim3::new(1, 1, 1),
        )
        .with_dispatch_id(DispatchId(7));
        // SAFETY: the C view `c` owns, live for the call.
        let r = record_of(&info, unsafe { &*c.as_ptr() }).unwrap();
        assert_eq!(
            (
                r.outcome,
                r.reason,
                r.executed_passes,
                r.requested_passes,
                r.captured_bytes
            ),
            (Outcome::Truncated, Reason::PassDrainStuck, 1, 3, 4096)
        );
        // SAFETY: as above; a copy of the plain C struct.
        let mut bad = unsafe { *c.as_ptr() };
        bad.reason = 0xffff;
        assert!(matches!(record_of(&info, &bad), Err(Error::BadEnum { .. })));
    }
}
