//! `kreplay demo` end to end: the main job, every injected fault, and bad command lines.

use std::process::{Command, Output};

use serde_json::Value;

fn kreplay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(args)
        .env_remove("KREPLAY_LOG")
        .output()
        .expect("kreplay runs")
}

fn json(args: &[&str]) -> Value {
    let mut all = vec!["demo", "--json"];
    all.extend_from_slice(args);
    let out = kreplay(&all);
    assert!(
        out.status.success(),
        "{all:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

fn dispatches(doc: &Value) -> &Vec<Value> {
    doc["dispatches"].as_array().expect("dispatches")
}

/// Every dispatch ends equal to the reference run.
fn assert_all_equal(doc: &Value) {
    for d in dispatches(doc) {
        assert!(d["final_digest"].is_string(), "{d}");
        assert_eq!(d["final_digest"], d["reference_digest"], "{d}");
    }
}

/// Per-pass input digests of a dispatch are identical.
fn assert_identical_inputs(d: &Value) {
    let passes = d["passes"].as_array().unwrap();
    assert_eq!(
        passes.len() as u64,
        d["executed_passes"].as_u64().unwrap(),
        "{d}"
    );
    for p in passes {
        assert_eq!(p["input_digest"], passes[0]["input_digest"], "{d}");
    }
}

#[test]
fn five_passes_replay_with_identical_inputs_and_final_equal_to_reference() {
    let doc = json(&["--passes", "5"]);
    let ds = dispatches(&doc);
    assert_eq!(ds.len(), 5);
    for d in ds {
        assert_eq!(d["outcome"], "replayed", "{d}");
        assert_eq!(d["executed_passes"], 5);
        assert_identical_inputs(d);
        for field in [
            "dispatch_id",
            "agent",
            "kernel",
            "reason",
            "requested_passes",
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
            "reentrancy",
        ] {
            assert!(d.get(field).is_some(), "{field} missing in {d}");
        }
    }
    assert_all_equal(&doc);
    assert_eq!(doc["summary"]["replayed"], 5);
    assert_eq!(doc["summary"]["passes"], 25);
}

#[test]
fn scope_arguments_and_dirty_restore_fewer_bytes_and_truncate_the_out_of_scope_kernel() {
    let full = json(&[]);
    let doc = json(&["--scope", "arguments", "--restore", "dirty"]);
    assert_all_equal(&doc);
    let ds = dispatches(&doc);
    let rmw = &ds[1];
    assert_eq!(rmw["kernel"], "axpy_rmw");
    assert_eq!(rmw["outcome"], "replayed");
    assert_identical_inputs(rmw);
    let (captured, restored) = (
        rmw["captured_bytes"].as_u64().unwrap(),
        rmw["restored_bytes"].as_u64().unwrap(),
    );
    assert!(restored * 2 < captured * 3, "{restored} of {captured}");
    assert!(rmw["compared_bytes"].as_u64().unwrap() > 0);
    let full_restored = dispatches(&full)[1]["restored_bytes"].as_u64().unwrap();
    assert!(
        restored * 4 < full_restored,
        "{restored} vs {full_restored}"
    );
    let scatter = &ds[2];
    assert_eq!(scatter["kernel"], "scatter_via_table");
    assert_eq!(scatter["outcome"], "truncated");
    assert_eq!(scatter["reason"], "write_outside_scope");
}

#[test]
fn every_injected_fault_ends_with_its_reason_and_memory_equal_to_one_execution() {
    for (fault, outcome, reason) in [
        ("snapshot-oom", "declined", "snapshot_failed"),
        ("capture-copy-fail", "declined", "snapshot_failed"),
        ("queue-drain-stuck", "declined", "queue_drain_stuck"),
        ("agent-drain-stuck", "declined", "agent_drain_stuck"),
        ("copy-fence-stuck", "declined", "copy_fence_stuck"),
        ("pass-stuck", "truncated", "pass_drain_stuck"),
        ("reentrant", "declined", "reentrant_dispatch"),
        ("untracked-vmem", "declined", "untracked_memory"),
        ("over-budget", "declined", "footprint_budget"),
        ("callback-panic", "declined", "callback_failed"),
        ("freed-region", "replayed", "none"),
    ] {
        let doc = json(&["--inject", fault]);
        assert_all_equal(&doc);
        let hit = dispatches(&doc)
            .iter()
            .find(|d| d["outcome"] == outcome && d["reason"] == reason);
        assert!(hit.is_some(), "{fault}: no {outcome}/{reason} in {doc}");
        if fault != "untracked-vmem" && fault != "over-budget" {
            // The fault targets one dispatch; the others replay.
            assert!(
                dispatches(&doc).iter().any(|d| d["outcome"] == "replayed"),
                "{fault}"
            );
        }
    }
}

#[test]
fn a_failed_restore_aborts_naming_the_dispatch_and_region() {
    let out = kreplay(&["demo", "--inject", "restore-fail"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("FATAL: restore failed"), "{err}");
    assert!(err.contains("dispatch 2"), "{err}");
    assert!(err.contains("region 0x"), "{err}");
    assert_eq!(err.matches("FATAL").count(), 1, "said once: {err}");
}

#[test]
fn the_table_says_it_is_simulated_and_ends_with_the_summary() {
    let out = kreplay(&["demo"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap();
    assert!(first.contains("simulated GPU"), "{first}");
    assert!(text.contains("pc_sampling"));
    // PC sampling sits out pass 1 only.
    assert!(text
        .lines()
        .any(|l| l.contains(" 1  bytes_read") && l.contains(" off ")));
    assert!(text.trim_end().lines().last().unwrap().contains("summary"));
    assert!(!text.contains("NO"), "{text}");
}

#[test]
fn bad_command_lines_are_clear_errors() {
    for (args, needle) in [
        (&["demo", "--passes", "zero"][..], "--passes"),
        (&["demo", "--inject", "meteor"][..], "restore-fail"),
        (&["demo", "--scope"][..], "--scope needs a value"),
        (&["fly"][..], "unknown command"),
    ] {
        let out = kreplay(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(["demo"])
        .env("KREPLAY_MAX_PASSES", "many")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("KREPLAY_MAX_PASSES"));
}
