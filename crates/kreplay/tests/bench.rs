//! `kreplay bench`: the backend choice, CUDA's absence on a machine without a GPU (CI), and
//! merging result files, which needs no GPU.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{json, Value};

#[path = "../../replay-cuda/tests/support/fake_sources.rs"]
mod fake_sources;

fn kreplay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(args)
        .env_remove("KREPLAY_LOG")
        .output()
        .expect("kreplay runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kreplay-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn bench_without_backend_is_a_usage_error_naming_the_accepted_values() {
    for args in [
        &["bench"][..],
        &["bench", "run", "--out", "x.json"],
        &["bench", "check"],
    ] {
        let out = kreplay(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let e = stderr(&out);
        assert!(e.contains("needs --backend"), "{e}");
        assert!(e.contains("cuda"), "{e}");
        assert!(e.contains("cargo bench -p replay-mock"), "{e}");
    }
}

#[test]
fn bench_with_an_unknown_backend_is_a_usage_error() {
    for args in [
        &["bench", "--backend", "mock"][..],
        &["bench", "--backend=hsa", "run"],
    ] {
        let out = kreplay(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let e = stderr(&out);
        assert!(e.contains("--backend"), "{e}");
        assert!(e.contains("expected cuda"), "{e}");
        assert!(e.contains("cargo bench -p replay-mock"), "{e}");
    }
    let out = kreplay(&["bench", "--backend"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--backend needs a value"));
}

#[test]
fn bench_bad_options_are_reported_by_the_bench() {
    let out = kreplay(&["bench", "--backend", "cuda", "--cases", "bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(e.contains("unknown case bogus"), "{e}");
    assert!(e.contains("kreplay bench --backend cuda check"), "{e}");
}

#[test]
fn bench_check_without_cuda_says_why_and_fails() {
    if let Ok(n) = replay_cuda::is_available() {
        eprintln!("skipped: CUDA is available here ({n} devices)");
        return;
    }
    let why = replay_cuda::is_available().unwrap_err().to_string();
    let out = kreplay(&["bench", "--backend", "cuda", "check"]);
    assert!(!out.status.success());
    assert_eq!(
        out.status.code(),
        Some(2),
        "an exit status, not a signal or a panic"
    );
    let e = stderr(&out);
    assert!(e.contains("CUDA is not available"), "{e}");
    assert!(e.contains(&why), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn bench_merge_combines_result_files_without_a_gpu() {
    let dir = temp_dir("merge");
    let a = dir.join("a.json");
    let b = dir.join("b.json");
    let all = dir.join("all.json");
    std::fs::write(
        &a,
        json!({ "tool": "cuda_bench", "args": ["run"], "results": [
            { "case": "overhead", "name": "tiny", "per_pass_us": 20.0 },
            { "case": "correctness", "name": "rmw", "pass": true },
        ] })
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        &b,
        json!({ "tool": "cuda_bench", "args": ["run", "--cases", "ncu"], "results": [
            { "case": "ncu", "name": "1gib/16mib", "ncu_s": 3.5 },
        ] })
        .to_string(),
    )
    .unwrap();
    let out = kreplay(&[
        "bench",
        "--backend",
        "cuda",
        "merge",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--out",
        all.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("3 results from 2 runs"),
        "{}",
        stderr(&out)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&all).unwrap()).unwrap();
    assert_eq!(v["merged"], true);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["file"], b.to_str().unwrap());
    assert!(runs[0].get("results").is_none());
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(
        results
            .iter()
            .map(|r| r["run"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![0, 0, 1]
    );
    assert_eq!(results[2]["name"], "1gib/16mib");

    // A file that is not JSON is an error naming it.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "not json").unwrap();
    let out = kreplay(&[
        "bench",
        "--backend",
        "cuda",
        "merge",
        bad.to_str().unwrap(),
        "--out",
        all.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("bad.json"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With the fake driver of `replay-cuda`'s tests on the loader path, `check` finds its device
/// and gets as far as the bench's kernels (NVRTC, absent in CI), failing with a message instead
/// of a panic. Skipped without a C compiler or where a real driver is present.
#[test]
fn bench_check_reaches_the_fake_driver() {
    // SAFETY: only tries dlopen on the driver's names and closes what it opened.
    if unsafe { replay_cuda::sys::is_culib_present() } {
        eprintln!("skipped: a real CUDA driver is present");
        return;
    }
    let dir = temp_dir("fake");
    let lib = dir.join("libcuda.so.1");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg("-Wl,-soname,libcuda.so.1")
        .args(fake_sources::fake_driver_sources(false))
        .arg("-lpthread")
        .status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("skipped: could not compile the fake driver with {cc}");
        return;
    }
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(["bench", "--backend", "cuda", "check", "--out"])
        .arg(dir.join("check.json"))
        .env_remove("KREPLAY_LOG")
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .expect("kreplay runs");
    let e = stderr(&out);
    assert!(e.contains("1 CUDA device(s)"), "{e}");
    assert!(e.contains("Fake CUDA device"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(out.status.code().is_some(), "{e}");
    if replay_cuda::nvrtc_available().is_err() {
        assert_eq!(out.status.code(), Some(2), "{e}");
        assert!(e.contains("NVRTC"), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
