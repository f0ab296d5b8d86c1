//! `kreplay demo --capture DIR` then `kreplay replay DIR` (SPEC §13), on the simulated GPU:
//! every scope and the demo's memory classes (device, fine-grained, pinned host, module
//! variables, a second agent); damaged folders and other versions refused naming the file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn kreplay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(args)
        .env_remove("KREPLAY_LOG")
        .output()
        .expect("kreplay runs")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kreplay-capture-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs the demo with `--capture`; returns its JSON `captures`.
fn capture(dir: &Path, extra: &[&str]) -> Vec<Value> {
    let d = dir.to_str().unwrap();
    let mut args = vec!["demo", "--json", "--passes", "2", "--capture", d];
    args.extend_from_slice(extra);
    let out = kreplay(&args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    // The capture changes nothing: every dispatch still ends equal to the reference run.
    for d in doc["dispatches"].as_array().unwrap() {
        assert_eq!(d["final_digest"], d["reference_digest"], "{d}");
    }
    doc["captures"].as_array().expect("captures").clone()
}

fn replay(dir: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["replay", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = kreplay(&args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn folder(captures: &[Value], kernel: &str) -> PathBuf {
    let c = captures
        .iter()
        .find(|c| c["kernel"] == kernel && c["folder"].is_string())
        .unwrap_or_else(|| panic!("{kernel} captured: {captures:?}"));
    PathBuf::from(c["folder"].as_str().unwrap())
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

fn classes(dir: &Path) -> Vec<String> {
    manifest(dir)["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["class"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn scope_all_captures_every_dispatch_and_each_replays_equal() {
    let d = scratch("all");
    let caps = capture(&d, &["--scope", "all"]);
    assert_eq!(caps.len(), 5, "{caps:?}");
    assert!(caps.iter().all(|c| c["folder"].is_string()), "{caps:?}");
    // The memory classes the demo uses are in its captures.
    let all: Vec<String> = caps
        .iter()
        .flat_map(|c| classes(Path::new(c["folder"].as_str().unwrap())))
        .collect();
    for class in [
        "DEVICE_COARSE",
        "FINE_GRAINED",
        "PINNED_HOST",
        "MODULE_VARIABLE",
    ] {
        assert!(all.iter().any(|c| c.contains(class)), "{class}: {all:?}");
    }
    // The second agent's dispatch.
    let a1 = folder(&caps[4..], "axpy_rmw");
    assert_eq!(manifest(&a1)["agent"], 1);
    let (code, out, err) = replay(&d, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        out.matches("the outputs of every pass equal to the captured ones")
            .count(),
        5,
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn scope_arguments_and_predicted_capture_only_the_scope_and_refuse_a_write_outside_it() {
    for scope in ["arguments", "predicted", "auto"] {
        let d = scratch(scope);
        let caps = capture(&d, &["--scope", scope]);
        // fill_x's scope is its one buffer and the module variable, never the whole agent.
        let fill = folder(&caps, "fill_x");
        let m = manifest(&fill);
        assert_eq!(m["regions"].as_array().unwrap().len(), 2, "{m}");
        assert_eq!(
            m["arguments"]["pointers"].as_array().unwrap().len(),
            1,
            "{m}"
        );
        // scatter_via_table writes through a stored pointer outside its argument scope.
        let scatter = caps
            .iter()
            .find(|c| c["kernel"] == "scatter_via_table")
            .unwrap();
        assert!(
            scatter["refused"]
                .as_str()
                .is_some_and(|r| r.contains("outside its snapshot scope")),
            "{scatter}"
        );
        let (code, out, err) = replay(&d, &["--passes", "2"]);
        assert_eq!(code, 0, "{scope}: {out}\n{err}");
        assert_eq!(
            out.matches("equal to the captured ones").count(),
            4,
            "{out}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn a_replay_whose_outputs_differ_names_the_regions() {
    let d = scratch("differ");
    let caps = capture(&d, &["--scope", "all"]);
    let axpy = folder(&caps, "axpy_rmw");
    // Swap the recorded outputs of the module variable (g_hits) for its inputs: the file is
    // consistent with a manifest edited to match, so only the comparison can tell.
    let mut m = manifest(&axpy);
    let regions = m["regions"].as_array_mut().unwrap();
    let hits = regions
        .iter_mut()
        .find(|r| r["class"].as_str().unwrap().contains("MODULE_VARIABLE"))
        .unwrap();
    hits["output"] = hits["input"].clone();
    let index = hits["index"].as_u64().unwrap();
    std::fs::write(axpy.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
    let (code, out, err) = replay(&axpy, &[]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains(&format!("region {index} at")), "{out}");
    assert!(out.contains("DIFFER"), "{out}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn timing_prints_the_passes_gpu_time() {
    let d = scratch("timing");
    let caps = capture(&d, &["--scope", "all"]);
    let (code, out, err) = replay(
        &folder(&caps, "fill_x"),
        &["--tool", "timing", "--passes", "5"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("timing over 5 passes: min"), "{out}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_scope_over_max_bytes_is_not_captured_and_says_why() {
    let d = scratch("max-bytes");
    let caps = capture(&d, &["--scope", "all", "--max-bytes", "65536"]);
    assert_eq!(caps.len(), 5);
    for c in &caps {
        let why = c["refused"].as_str().unwrap_or_else(|| panic!("{c}"));
        assert!(
            why.contains("over the capture bound of 65536 bytes"),
            "{why}"
        );
        assert!(why.contains("--max-bytes"), "{why}");
    }
    let (code, _, err) = replay(&d, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("no capture here"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_truncated_or_corrupted_capture_is_refused_naming_the_file() {
    let d = scratch("damaged");
    let caps = capture(&d, &["--scope", "all"]);
    let fill = folder(&caps, "fill_x");
    let file = fill.join("regions/0001.in.zst");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
    let (code, out, err) = replay(&fill, &[]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("regions/0001.in.zst"), "{err}");
    assert!(err.contains("truncated"), "{err}");
    // A damaged folder among several stops the command before anything is replayed.
    let (code, out, err) = replay(&d, &[]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.is_empty(), "{out}");
    let mut flipped = bytes.clone();
    let n = flipped.len();
    flipped[n / 2] ^= 0xff;
    std::fs::write(&file, &flipped).unwrap();
    let (code, _, err) = replay(&fill, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("regions/0001.in.zst"), "{err}");
    assert!(
        err.contains("corrupted") || err.contains("truncated"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn another_format_version_is_refused() {
    let d = scratch("version");
    let caps = capture(&d, &["--scope", "all"]);
    let fill = folder(&caps, "fill_x");
    let mut m = manifest(&fill);
    m["version"] = serde_json::json!(99);
    std::fs::write(fill.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
    let (code, _, err) = replay(&fill, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("manifest.json"), "{err}");
    assert!(err.contains("version 99"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_region_whose_address_cannot_be_had_is_named() {
    let d = scratch("address");
    let caps = capture(&d, &["--scope", "all"]);
    let fill = folder(&caps, "fill_x");
    // The second agent's buffer: an address the first agent cannot have.
    let a1 = manifest(&folder(&caps[4..], "axpy_rmw"))["regions"][0]["base"]
        .as_u64()
        .unwrap();
    let mut m = manifest(&fill);
    let last = m["regions"].as_array().unwrap().len() - 1;
    assert!(m["regions"][last]["base"].as_u64().unwrap() < a1);
    m["regions"][last]["base"] = serde_json::json!(a1);
    m["arguments"]["pointers"] = serde_json::json!([]);
    std::fs::write(fill.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
    let (code, out, err) = replay(&fill, &[]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(&format!("region {last} at {a1:#x}")) && err.contains("cannot be recreated"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
