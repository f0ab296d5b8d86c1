//! Outcome records and the run summary (SPEC §8): JSON, the one-line form, enum names and
//! aggregation.

use std::collections::BTreeMap;

use replay_core::policy::{CacheControl, LogLevel};
use replay_core::{
    AgentId, DispatchId, Outcome, OutcomeRecord, PredictFallback, PredictSource, Reason,
    RestoreMode, RunSummary, Scope, Tier, TierBytes,
};
use serde_json::Value;
use smallvec::smallvec;

/// The fields SPEC §8 requires of every outcome record.
const SPEC_FIELDS: &[&str] = &[
    "dispatch_id",
    "agent",
    "kernel",
    "outcome",
    "reason",
    "requested_passes",
    "executed_passes",
    "scope",
    "tracked_bytes",
    "captured_bytes",
    "captured_regions",
    "tier_bytes",
    "untracked_bytes",
    "untracked_regions",
    "snap_seconds",
    "restore_seconds",
    "compared_bytes",
    "restored_bytes",
    "pass_gpu_seconds",
    "pass_restored_bytes",
    "pass_compared_bytes",
    "reentrancy",
];

/// Every `Reason`; the match makes adding a variant without listing it here a compile error.
fn all_reasons() -> Vec<Reason> {
    let all = vec![
        Reason::None,
        Reason::UntrackedMemory,
        Reason::FootprintBudget,
        Reason::SnapshotFailed,
        Reason::QueueDrainStuck,
        Reason::AgentDrainStuck,
        Reason::CopyFenceStuck,
        Reason::ReentrantDispatch,
        Reason::CallbackFailed,
        Reason::PassDrainStuck,
        Reason::PassLimit,
        Reason::WriteOutsideScope,
        Reason::SubmitFailed,
        Reason::ScopeCheckFailed,
        Reason::DeviceError,
        Reason::AgentBusy,
        Reason::UnseenWrites,
    ];
    for r in &all {
        match r {
            Reason::None
            | Reason::UntrackedMemory
            | Reason::FootprintBudget
            | Reason::SnapshotFailed
            | Reason::QueueDrainStuck
            | Reason::AgentDrainStuck
            | Reason::CopyFenceStuck
            | Reason::ReentrantDispatch
            | Reason::CallbackFailed
            | Reason::PassDrainStuck
            | Reason::PassLimit
            | Reason::WriteOutsideScope
            | Reason::SubmitFailed
            | Reason::ScopeCheckFailed
            | Reason::DeviceError
            | Reason::AgentBusy => {}
            Reason::UnseenWrites => {}
        }
    }
    all
}

/// Every `Outcome`, checked for exhaustiveness the same way.
fn all_outcomes() -> Vec<Outcome> {
    let all = vec![
        Outcome::Replayed,
        Outcome::Declined,
        Outcome::Truncated,
        Outcome::NotRequested,
    ];
    for o in &all {
        match o {
            Outcome::Replayed | Outcome::Declined | Outcome::Truncated | Outcome::NotRequested => {}
        }
    }
    all
}

/// A record with every field set to a distinct, non-default value. Floats are dyadic so that
/// they survive a JSON round trip exactly.
fn full_record() -> OutcomeRecord {
    OutcomeRecord {
        dispatch_id: DispatchId(42),
        agent: AgentId(3),
        kernel: "gemm_kernel".to_owned(),
        outcome: Outcome::Truncated,
        reason: Reason::PassLimit,
        requested_passes: 0,
        executed_passes: 4,
        scope: Scope::Arguments,
        restore: RestoreMode::Dirty,
        scope_auto: true,
        restore_auto: false,
        tracked_bytes: 1 << 30,
        captured_bytes: 12_288,
        captured_regions: 3,
        tier_bytes: TierBytes {
            device: 8192,
            pinned: 4096,
            pageable: 0,
        },
        untracked_bytes: 512,
        untracked_regions: 1,
        snap_seconds: 0.5,
        restore_seconds: 0.25,
        compared_bytes: 36_864,
        restored_bytes: 8192,
        pass_gpu_seconds: smallvec![0.125, 0.0625, 0.03125, 1.5],
        pass_restored_bytes: smallvec![0, 4096, 0, 4096],
        pass_compared_bytes: smallvec![0, 12_288, 12_288, 12_288],
        reentrancy: 1,
        predicted_bytes: 8192,
        prediction_misses: 2,
        predict_source: PredictSource::Learned,
        predict_fallback: PredictFallback::None,
        phases: replay_core::PhaseSeconds {
            window: 0.75,
            drain: 0.125,
            capture: 0.5,
            wait: 0.125,
            config_enter: 0.0625,
            ..replay_core::PhaseSeconds::default()
        },
        pass_launch_seconds: smallvec![0.25, 0.5, 0.125, 0.0625],
        pass_wait_seconds: smallvec![0.125, 0.0625, 0.03125, 1.5],
        graph: Some(replay_core::GraphNode {
            graph: 3,
            node: Some(5),
            launch: 2,
            serialized: true,
        }),
        outside_check: replay_core::OutsideCheck::First,
    }
}

/// Splits a `[kernel-replay] key=value ...` line into its pairs (values without spaces).
fn pairs(line: &str) -> BTreeMap<String, String> {
    let rest = line
        .strip_prefix("[kernel-replay] ")
        .unwrap_or_else(|| panic!("{line:?} lacks the prefix"));
    rest.split_whitespace()
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("{kv:?} in {line:?} is not key=value"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// JSON

#[test]
fn json_has_every_spec_field() {
    let r = full_record();
    let v: Value = serde_json::from_str(&r.to_json()).unwrap();
    let obj = v.as_object().expect("a JSON object");
    for field in SPEC_FIELDS {
        assert!(obj.contains_key(*field), "JSON lacks {field}: {v}");
    }
    assert!(obj.contains_key("restore"));
    assert_eq!(v["dispatch_id"], 42);
    assert_eq!(v["agent"], 3);
    assert_eq!(v["kernel"], "gemm_kernel");
    assert_eq!(v["outcome"], "truncated");
    assert_eq!(v["reason"], "pass_limit");
    assert_eq!(v["requested_passes"], 0);
    assert_eq!(v["executed_passes"], 4);
    assert_eq!(v["scope"], "arguments");
    assert_eq!(v["restore"], "dirty");
    assert_eq!(v["scope_auto"], true);
    assert_eq!(v["restore_auto"], false);
    assert_eq!(v["tracked_bytes"], 1u64 << 30);
    assert_eq!(v["captured_bytes"], 12_288);
    assert_eq!(v["captured_regions"], 3);
    assert_eq!(
        v["tier_bytes"],
        serde_json::json!({"device": 8192, "pinned": 4096, "pageable": 0})
    );
    assert_eq!(v["untracked_bytes"], 512);
    assert_eq!(v["untracked_regions"], 1);
    assert_eq!(v["snap_seconds"], 0.5);
    assert_eq!(v["restore_seconds"], 0.25);
    assert_eq!(v["compared_bytes"], 36_864);
    assert_eq!(v["restored_bytes"], 8192);
    assert_eq!(
        v["pass_gpu_seconds"],
        serde_json::json!([0.125, 0.0625, 0.03125, 1.5])
    );
    assert_eq!(
        v["pass_restored_bytes"],
        serde_json::json!([0, 4096, 0, 4096])
    );
    assert_eq!(
        v["pass_compared_bytes"],
        serde_json::json!([0, 12_288, 12_288, 12_288])
    );
    assert_eq!(v["reentrancy"], 1);
    assert_eq!(
        v["graph"],
        serde_json::json!({"graph": 3, "node": 5, "launch": 2, "serialized": true})
    );
    assert_eq!(v["phases"]["window"], 0.75);
    assert_eq!(v["phases"]["capture"], 0.5);
}

#[test]
fn a_record_outside_a_graph_has_no_graph_member() {
    let r = OutcomeRecord::new(DispatchId(1), AgentId(0), "k");
    let v: Value = serde_json::from_str(&r.to_json()).unwrap();
    assert!(v.get("graph").is_none(), "{v}");
    // A whole graph profiled as one workload has a graph and a launch but no node.
    let mut whole = r.clone();
    whole.graph = Some(replay_core::GraphNode {
        graph: 1,
        node: None,
        launch: 0,
        serialized: false,
    });
    let v: Value = serde_json::from_str(&whole.to_json()).unwrap();
    assert_eq!(
        v["graph"],
        serde_json::json!({"graph": 1, "launch": 0, "serialized": false})
    );
    let back: OutcomeRecord = serde_json::from_str(&whole.to_json()).unwrap();
    assert_eq!(back, whole);
}

#[test]
fn json_round_trips() {
    for r in [
        full_record(),
        OutcomeRecord::new(DispatchId(0), AgentId(0), ""),
        OutcomeRecord::new(
            DispatchId(u64::MAX),
            AgentId(7),
            "void k<float, 4>(\"x\")\n",
        ),
    ] {
        let json = r.to_json();
        assert_eq!(json, serde_json::to_string(&r).unwrap());
        assert!(!json.contains('\n'), "JSON must be one line: {json}");
        let back: OutcomeRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        let pretty = serde_json::to_string_pretty(&r).unwrap();
        let back: OutcomeRecord = serde_json::from_str(&pretty).unwrap();
        assert_eq!(back, r);
    }
}

#[test]
fn new_record_is_empty() {
    let r = OutcomeRecord::new(DispatchId(9), AgentId(2), "k");
    assert_eq!(r.dispatch_id, DispatchId(9));
    assert_eq!(r.agent, AgentId(2));
    assert_eq!(r.kernel, "k");
    assert_eq!(r.outcome, Outcome::NotRequested);
    assert_eq!(r.reason, Reason::None);
    assert_eq!(r.requested_passes, 0);
    assert_eq!(r.executed_passes, 0);
    assert_eq!(r.scope, Scope::All);
    assert_eq!(r.restore, RestoreMode::Full);
    assert!(!r.scope_auto && !r.restore_auto);
    assert_eq!(r.tier_bytes, TierBytes::default());
    assert_eq!(r.captured_bytes + r.compared_bytes + r.restored_bytes, 0);
    assert!(r.pass_gpu_seconds.is_empty());
    assert!(r.pass_restored_bytes.is_empty());
    assert_eq!(r.reentrancy, 0);
}

// ---------------------------------------------------------------------------------------------
// The one-line form

#[test]
fn display_line_has_every_field_as_key_value() {
    let r = full_record();
    let line = r.to_string();
    assert!(line.starts_with("[kernel-replay] "), "{line}");
    assert!(!line.contains('\n'), "{line}");
    let kv = pairs(&line);
    for field in SPEC_FIELDS {
        assert!(kv.contains_key(*field), "{field} missing from {line}");
    }
    for (k, v) in [
        ("dispatch_id", "42"),
        ("agent", "3"),
        ("kernel", "\"gemm_kernel\""),
        ("outcome", "truncated"),
        ("reason", "pass_limit"),
        ("requested_passes", "0"),
        ("executed_passes", "4"),
        ("scope", "arguments"),
        ("scope_auto", "1"),
        ("restore", "dirty"),
        ("restore_auto", "0"),
        ("tracked_bytes", "1073741824"),
        ("captured_bytes", "12288"),
        ("captured_regions", "3"),
        ("tier_bytes", "device:8192,pinned:4096,pageable:0"),
        ("untracked_bytes", "512"),
        ("untracked_regions", "1"),
        ("snap_seconds", "0.500000"),
        ("restore_seconds", "0.250000"),
        ("compared_bytes", "36864"),
        ("restored_bytes", "8192"),
        ("pass_gpu_seconds", "0.125000,0.062500,0.031250,1.500000"),
        ("pass_restored_bytes", "0,4096,0,4096"),
        ("pass_compared_bytes", "0,12288,12288,12288"),
        ("reentrancy", "1"),
        ("predicted_bytes", "8192"),
        ("prediction_misses", "2"),
        ("predict_source", "learned"),
        ("predict_fallback", "none"),
    ] {
        assert_eq!(kv.get(k).map(String::as_str), Some(v), "{k} in {line}");
    }
    // The first key follows the prefix directly.
    assert!(
        line.starts_with("[kernel-replay] dispatch_id=42 "),
        "{line}"
    );
}

#[test]
fn display_line_of_an_empty_record() {
    let line = OutcomeRecord::new(DispatchId(1), AgentId(0), "k").to_string();
    let kv = pairs(&line);
    for field in SPEC_FIELDS {
        assert!(kv.contains_key(*field), "{field} missing from {line}");
    }
    assert_eq!(kv["outcome"], "not_requested");
    assert_eq!(kv["reason"], "none");
    assert_eq!(kv["pass_gpu_seconds"], "");
    assert_eq!(kv["pass_restored_bytes"], "");
    assert_eq!(kv["tier_bytes"], "device:0,pinned:0,pageable:0");
}

#[test]
fn display_line_quotes_awkward_kernel_names() {
    let name = "void gemm<float, 4>(float*)\nnext=1";
    let line = OutcomeRecord::new(DispatchId(1), AgentId(0), name).to_string();
    assert!(
        !line.contains('\n'),
        "a kernel name must not break the line: {line}"
    );
    assert!(line.contains(&format!("kernel={name:?} ")), "{line}");
}

// ---------------------------------------------------------------------------------------------
// Enum names

fn is_snake_case(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
        && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')
}

#[test]
fn reasons_serialise_as_their_names() {
    let reasons = all_reasons();
    let mut seen = std::collections::BTreeSet::new();
    for r in &reasons {
        let name = r.as_str();
        assert!(is_snake_case(name), "{r:?} -> {name:?}");
        assert!(seen.insert(name), "{name} used twice");
        assert_eq!(serde_json::to_value(r).unwrap(), Value::from(name), "{r:?}");
        let back: Reason = serde_json::from_value(Value::from(name)).unwrap();
        assert_eq!(back, *r);
    }
    // SPEC §8's declines and truncations all exist.
    for name in [
        "untracked_memory",
        "footprint_budget",
        "snapshot_failed",
        "queue_drain_stuck",
        "agent_drain_stuck",
        "copy_fence_stuck",
        "reentrant_dispatch",
        "callback_failed",
        "pass_drain_stuck",
        "pass_limit",
        "write_outside_scope",
        "none",
    ] {
        assert!(seen.contains(name), "SPEC reason {name} missing");
    }
    assert!(serde_json::from_value::<Reason>(Value::from("PassLimit")).is_err());
}

#[test]
fn outcomes_serialise_as_their_names() {
    let mut names = Vec::new();
    for o in all_outcomes() {
        let name = o.as_str();
        assert!(is_snake_case(name), "{o:?} -> {name:?}");
        assert_eq!(serde_json::to_value(o).unwrap(), Value::from(name));
        let back: Outcome = serde_json::from_value(Value::from(name)).unwrap();
        assert_eq!(back, o);
        names.push(name);
    }
    assert_eq!(
        names,
        ["replayed", "declined", "truncated", "not_requested"]
    );
}

#[test]
fn policy_enums_serialise_in_snake_case() {
    for s in [Scope::All, Scope::Arguments] {
        assert_eq!(serde_json::to_value(s).unwrap(), Value::from(s.as_str()));
    }
    for m in [RestoreMode::Full, RestoreMode::Dirty] {
        assert_eq!(serde_json::to_value(m).unwrap(), Value::from(m.as_str()));
    }
    for (c, name) in [(CacheControl::Flush, "flush"), (CacheControl::None, "none")] {
        assert_eq!(serde_json::to_value(c).unwrap(), Value::from(name));
    }
    for (l, name) in [
        (LogLevel::Off, "off"),
        (LogLevel::Error, "error"),
        (LogLevel::Warn, "warn"),
        (LogLevel::Info, "info"),
        (LogLevel::Debug, "debug"),
        (LogLevel::Trace, "trace"),
    ] {
        assert_eq!(serde_json::to_value(l).unwrap(), Value::from(name));
    }
}

// ---------------------------------------------------------------------------------------------
// Tier bytes

#[test]
fn tier_bytes_add_and_total() {
    let mut t = TierBytes::default();
    assert_eq!(t.total(), 0);
    t.add(Tier::Device, 10);
    t.add(Tier::PinnedHost, 20);
    t.add(Tier::PageableHost, 30);
    t.add(Tier::Device, 5);
    assert_eq!(
        t,
        TierBytes {
            device: 15,
            pinned: 20,
            pageable: 30
        }
    );
    assert_eq!(t.total(), 65);
}

// ---------------------------------------------------------------------------------------------
// Run summary

fn record(outcome: Outcome, reason: Reason, passes: u32, bytes: u64) -> OutcomeRecord {
    let mut r = OutcomeRecord::new(DispatchId(0), AgentId(0), "k");
    r.outcome = outcome;
    r.reason = reason;
    r.executed_passes = passes;
    r.captured_bytes = bytes;
    r.compared_bytes = 2 * bytes;
    r.restored_bytes = 3 * bytes;
    r
}

fn sample_summary() -> RunSummary {
    let mut s = RunSummary::default();
    let records = [
        (record(Outcome::Replayed, Reason::None, 5, 100), 0.5),
        (record(Outcome::Replayed, Reason::None, 3, 10), 0.25),
        (
            record(Outcome::Declined, Reason::FootprintBudget, 1, 0),
            0.0,
        ),
        (
            record(Outcome::Declined, Reason::FootprintBudget, 1, 0),
            0.0,
        ),
        (
            record(Outcome::Declined, Reason::UntrackedMemory, 1, 0),
            0.125,
        ),
        (record(Outcome::Truncated, Reason::PassLimit, 1024, 7), 1.0),
        (
            record(Outcome::Truncated, Reason::CallbackFailed, 2, 1),
            0.125,
        ),
        (record(Outcome::NotRequested, Reason::None, 1, 0), 0.0),
    ];
    for (r, secs) in &records {
        s.add(r, *secs);
    }
    s
}

#[test]
fn summary_aggregates_records() {
    let s = sample_summary();
    assert_eq!(s.dispatches, 8);
    assert_eq!(s.replayed, 2);
    assert_eq!(s.not_requested, 1);
    assert_eq!(
        s.declined,
        BTreeMap::from([
            ("footprint_budget".to_owned(), 2),
            ("untracked_memory".to_owned(), 1)
        ])
    );
    assert_eq!(
        s.truncated,
        BTreeMap::from([
            ("callback_failed".to_owned(), 1),
            ("pass_limit".to_owned(), 1)
        ])
    );
    assert_eq!(s.declined_total(), 3);
    assert_eq!(s.truncated_total(), 2);
    assert_eq!(
        s.replayed + s.declined_total() + s.truncated_total() + s.not_requested,
        s.dispatches
    );
    assert_eq!(s.passes, 5 + 3 + 1 + 1 + 1 + 1024 + 2 + 1);
    assert_eq!(s.captured_bytes, 118);
    assert_eq!(s.compared_bytes, 236);
    assert_eq!(s.restored_bytes, 354);
    assert_eq!(s.replay_seconds, 2.0);
    assert_eq!(s.peak_pooled_bytes, 0, "add does not touch the pool peak");
}

#[test]
fn summary_display_line() {
    let mut s = sample_summary();
    s.peak_pooled_bytes = 4096;
    let line = s.to_string();
    assert!(!line.contains('\n'), "{line}");
    assert_eq!(
        line,
        "[kernel-replay] summary dispatches=8 replayed=2 \
         declined=3 (footprint_budget:2,untracked_memory:1) \
         truncated=2 (callback_failed:1,pass_limit:1) not_requested=1 passes=1038 \
         captured_bytes=118 compared_bytes=236 restored_bytes=354 peak_pooled_bytes=4096 \
         ran=all+full:4 ran_auto=0 predicted=0 predicted_bytes=0 prediction_misses=0 \
         predict_fallback=- replay_seconds=2.000000"
    );
}

#[test]
fn empty_summary_display_line() {
    let line = RunSummary::default().to_string();
    assert!(line.starts_with("[kernel-replay] summary "), "{line}");
    assert!(line.contains(" dispatches=0 "), "{line}");
    assert!(line.contains(" declined=0 (-) "), "{line}");
    assert!(line.contains(" truncated=0 (-) "), "{line}");
    assert!(line.ends_with(" replay_seconds=0.000000"), "{line}");
}

#[test]
fn summary_json_round_trips() {
    let mut s = sample_summary();
    s.peak_pooled_bytes = 1 << 20;
    let json = serde_json::to_string(&s).unwrap();
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["declined"]["footprint_budget"], 2);
    assert_eq!(v["truncated"]["pass_limit"], 1);
    let back: RunSummary = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);
}

#[test]
fn summary_names_what_ran_and_what_auto_chose() {
    let mut s = RunSummary::default();
    let mut by_auto = record(Outcome::Replayed, Reason::None, 4, 1);
    by_auto.scope = Scope::Arguments;
    by_auto.restore = RestoreMode::Dirty;
    by_auto.scope_auto = true;
    by_auto.restore_auto = true;
    let mut restore_only = record(Outcome::Truncated, Reason::WriteOutsideScope, 1, 1);
    restore_only.restore_auto = true;
    let explicit = record(Outcome::Replayed, Reason::None, 2, 1);
    // Declined and unrequested dispatches ran no window's passes: not counted in `ran`.
    let mut declined = record(Outcome::Declined, Reason::FootprintBudget, 1, 0);
    declined.scope_auto = true;
    for r in [&by_auto, &by_auto, &restore_only, &explicit, &declined] {
        s.add(r, 0.0);
    }
    assert_eq!(
        s.ran,
        BTreeMap::from([
            ("all+full".to_owned(), 2),
            ("arguments+dirty".to_owned(), 2)
        ])
    );
    assert_eq!(s.ran_auto, 3);
    let line = s.to_string();
    assert!(
        line.contains(" ran=all+full:2,arguments+dirty:2 ran_auto=3 "),
        "{line}"
    );
    let v: Value = serde_json::to_value(&s).unwrap();
    assert_eq!(v["ran"]["arguments+dirty"], 2);
    assert_eq!(v["ran_auto"], 3);
    // Summaries written before these fields existed still parse.
    let mut old = v.as_object().unwrap().clone();
    old.remove("ran");
    old.remove("ran_auto");
    let back: RunSummary = serde_json::from_value(Value::Object(old)).unwrap();
    assert!(back.ran.is_empty() && back.ran_auto == 0);
}

#[test]
fn records_without_the_auto_flags_still_parse() {
    let v: Value = serde_json::from_str(&full_record().to_json()).unwrap();
    let mut old = v.as_object().unwrap().clone();
    old.remove("scope_auto");
    old.remove("restore_auto");
    let back: OutcomeRecord = serde_json::from_value(Value::Object(old)).unwrap();
    assert!(!back.scope_auto && !back.restore_auto);
    assert_eq!(back.scope, Scope::Arguments);
}
