//! `kreplay run --backend hsa` end to end on the simulated HSA runtime (`replay-hsa-sim`):
//! the application is this test binary itself (its `application` test, run by `kreplay run`
//! with `APP_ENV` set), which does what the HSA runtime does with `HSA_TOOLS_LIB`: opens the
//! library that variable names and hands its `OnLoad` the runtime's API table, then, as a HIP
//! program would, dispatches through the wrapped table (a deterministic read-modify-write
//! kernel and one whose output changes with every execution) and ends with `OnUnload`.
//! `--tool verify` and `--tool timing` must report as on CUDA: the per-kernel table, and a
//! JSON `--out` with one record per dispatch.

#[allow(dead_code)]
#[path = "../../../examples/hsa-rust-tool/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use replay_hsa_sim::{SimConfig, SimHsa};

/// Set for the test binary `kreplay run` starts: it then is the application.
const APP_ENV: &str = "KREPLAY_TEST_HSA_APP";

/// The library this crate's dev-dependency built, with the HSA entry points.
fn library() -> PathBuf {
    library_dir("libkernel_replay.so").join("libkernel_replay.so")
}

#[test]
fn application() {
    if std::env::var_os(APP_ENV).is_none() {
        return;
    }
    let path = std::env::var_os("HSA_TOOLS_LIB").expect("kreplay run sets HSA_TOOLS_LIB");
    let tool = ToolLibrary::open(Path::new(&path));
    let mut sim = SimHsa::new(SimConfig::default());
    assert!(tool.on_load(&mut sim, 1), "OnLoad: {}", tool.state());
    let client = Client::new(&sim);
    let (value, _, _) = run_rmw_dispatch(&sim, &client, 5);
    // Several passes, one execution.
    assert_eq!(value, rmw(5));
    // Each execution writes how many ran before it: every pass's output differs.
    let runs = Arc::new(AtomicU64::new(0));
    let r = Arc::clone(&runs);
    let racy = sim.register_kernel("racy", move |d| {
        let p = d.arg(0)?;
        d.write_u64(p, r.fetch_add(1, Ordering::SeqCst))?;
        Ok(())
    });
    let q = client.queue(sim.gpu_agents()[0]);
    let (_, args) = buffer_and_args(&sim, &client, 0);
    let done = client.signal(1);
    client.submit(q, dispatch(racy, args, done));
    assert_eq!(client.wait_zero(done), 0);
    client.destroy(q);
    assert!(
        runs.load(Ordering::SeqCst) > 1,
        "the racy kernel was replayed"
    );
    tool.on_unload();
}

/// `kreplay run --backend hsa --tool TOOL --out DIR/TOOL.json -- this test's application`:
/// its stdout and the JSON written.
fn run(tool: &str) -> (String, serde_json::Value) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("kreplay-run-hsa-{tool}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{tool}.json"));
    let me = std::env::current_exe().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(["run", "--backend", "hsa", "--tool", tool, "--passes", "3"])
        .arg("--library")
        .arg(library())
        .arg("--out")
        .arg(&out)
        .arg("--")
        .arg(&me)
        .args(["--exact", "application", "--nocapture", "--test-threads=1"])
        .env(APP_ENV, "1")
        .env_remove("KREPLAY_HSA_TOOL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stdout}\n{stderr}");
    let json = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("{}: {e}\n{stdout}\n{stderr}", out.display()));
    (
        format!("{stdout}{stderr}"),
        serde_json::from_str(&json).unwrap(),
    )
}

fn records(json: &serde_json::Value) -> Vec<serde_json::Value> {
    json["records"].as_array().cloned().unwrap_or_default()
}

#[test]
fn verify_tells_the_deterministic_kernel_from_the_racy_one() {
    let (text, json) = run("verify");
    let recs = records(&json);
    assert_eq!(recs.len(), 2, "{json:#}\n{text}");
    for r in &recs {
        assert_eq!(r["outcome"], "replayed", "{r}");
        assert_eq!(r["executed_passes"], 3, "{r}");
        assert_eq!(r["inputs_identical"], true, "{r}");
        assert!(r["digested_bytes"].as_u64().unwrap() > 0, "{r}");
    }
    assert_eq!(recs[0]["outputs_identical"], true, "{:#}", recs[0]);
    assert_eq!(recs[1]["outputs_identical"], false, "{:#}", recs[1]);
    assert!(!recs[1]["differing_regions"].as_array().unwrap().is_empty());
    assert_eq!(json["tool"], "verify", "{json:#}");
}

#[test]
fn timing_reports_every_passs_gpu_time() {
    let (text, json) = run("timing");
    let recs = records(&json);
    assert_eq!(recs.len(), 2, "{json:#}\n{text}");
    for r in &recs {
        assert_eq!(r["outcome"], "replayed", "{r}");
        let t = r["pass_gpu_seconds"].as_array().unwrap();
        assert_eq!(t.len(), 3, "{r}");
        assert!(t.iter().all(|s| s.as_f64().unwrap() > 0.0), "{r}");
        assert!(r["inputs_identical"].is_null(), "{r}");
    }
    assert_eq!(json["tool"], "timing", "{json:#}");
}
