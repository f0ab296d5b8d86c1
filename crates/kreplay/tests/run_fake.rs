//! `kreplay run` end to end against the fake CUDA driver (SPEC §9.2 "Unmodified
//! applications"): a small C program linked with `-lcuda` (the fake, `replay-cuda`'s
//! `tests/fake_driver/fake_inject.c`) runs plain and under `kreplay run`, which preloads
//! `libkernel_replay.so` (built with its `cuda` feature as this test's dev-dependency). Its
//! output and exit status must be the plain run's, and the report must show every launch
//! entry, allocation class, capture, graph and cooperative launch where it belongs.
//! Skipped where no C compiler is found.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FAKE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../replay-cuda/tests/fake_driver"
);

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Builds the fake driver and the application in a fresh folder; `None` without a compiler.
fn build(tag: &str) -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("kreplay-run-fake-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let lib = dir.join("libcuda.so.1");
    let ok = Command::new(cc())
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .args(["-Wl,-soname,libcuda.so.1", "-Wl,-Bsymbolic"])
        .arg(format!("{FAKE}/fake_inject.c"))
        .args(["-lpthread", "-ldl"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipped: could not compile the fake driver with {}", cc());
        return None;
    }
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).ok()?;
    let ok = Command::new(cc())
        .args(["-O1", "-o"])
        .arg(dir.join("app"))
        .arg(format!("{FAKE}/inject_app.c"))
        .arg(format!("-L{}", dir.display()))
        .args(["-lcuda", "-ldl"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "the fake driver compiled, so the application must");
    Some(dir)
}

/// The shared object this test's dev-dependency built, with the CUDA entries.
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let deps = exe.parent().expect("deps folder");
    let lib = [
        deps.join("libkernel_replay.so"),
        deps.join("../libkernel_replay.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("libkernel_replay.so beside the test (replay-ffi dev-dependency)");
    let bytes = std::fs::read(&lib).expect("read the library");
    assert!(
        bytes.windows(19).any(|w| w == b"InitializeInjection"),
        "{} lacks the cuda feature's entries",
        lib.display()
    );
    lib
}

fn plain(dir: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(dir.join("app"))
        .env("LD_LIBRARY_PATH", dir)
        .envs(env.iter().copied())
        .output()
        .expect("run the application")
}

fn kreplay(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .arg("run")
        .arg("--library")
        .arg(library())
        .args(args)
        .arg("--")
        .arg(dir.join("app"))
        .env("LD_LIBRARY_PATH", dir)
        .env_remove("LD_PRELOAD")
        .envs(env.iter().copied())
        .output()
        .expect("run kreplay")
}

/// Whether a CUPTI library is installed where the library looks for one.
fn cupti_installed() -> bool {
    let Ok(dirs) = std::fs::read_dir("/usr/local") else {
        return false;
    };
    dirs.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("cuda"))
        .flat_map(|e| [e.path().join("lib64"), e.path().join("extras/CUPTI/lib64")])
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(Result::ok)
        .any(|f| f.file_name().to_string_lossy().starts_with("libcupti.so"))
        || std::env::var_os("KREPLAY_CUDA_LIB_DIR").is_some()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn run_under_verify_equals_a_plain_run_and_sees_every_entry() {
    let Some(dir) = build("verify") else { return };
    let reference = plain(&dir, &[]);
    assert_eq!(
        reference.status.code(),
        Some(7),
        "{}",
        text(&reference.stdout)
    );
    let out = dir.join("report.json");
    let run = kreplay(
        &dir,
        &[
            "--tool",
            "verify",
            "--passes",
            "3",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    let stderr = text(&run.stderr);
    assert_eq!(text(&run.stdout), text(&reference.stdout), "{stderr}");
    assert_eq!(
        run.status.code(),
        Some(7),
        "the application's status: {stderr}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("report written")).unwrap();
    let i = &v["interception"];
    // 11 launches: 3 direct entries, 2 through cuGetProcAddress (plain and per-thread),
    // 1 through dlsym, 1 of unknown layout, 2 into managed/pinned memory, 1 into a capture,
    // 1 cooperative; the graph launch is counted apart.
    assert_eq!(i["launches_seen"], 11, "{i}");
    assert_eq!(i["submitted"], 10, "{i}");
    assert_eq!(i["stream_capture"], 1, "{i}");
    assert_eq!(i["graph_launch"], 1, "{i}");
    assert_eq!(i["cooperative"], 1, "{i}");
    assert_eq!(i["layout_unknown"], 1, "{i}");
    assert_eq!(i["layout_driver"], 9, "{i}");
    assert_eq!(i["alloc_device"], 2, "{i}");
    assert_eq!(i["alloc_pitch"], 1, "{i}");
    assert_eq!(i["alloc_managed"], 1, "{i}");
    assert_eq!(i["alloc_host"], 2, "{i}");
    assert_eq!(i["frees"], 6, "{i}");
    assert_eq!(i["fallback_launch"], 0, "{i}");
    // 3 host-to-device and 3 device-to-host copies, each under the write gate.
    assert_eq!(i["gated_writes"], 6, "{i}");
    let s = &v["summary"];
    assert_eq!(s["replayed"], 9, "{s}");
    let recs = v["records"].as_array().expect("records");
    assert_eq!(recs.len(), 9);
    for r in recs {
        assert_eq!(r["outcome"], "replayed", "{r}");
        assert_eq!(r["executed_passes"], 3, "{r}");
        assert_eq!(r["inputs_identical"], true, "{r}");
        assert_eq!(r["outputs_identical"], true, "{r}");
        assert_eq!(r["scope"], "all", "{r}");
    }
    assert_eq!(
        recs.iter().filter(|r| r["layout"] == "unknown").count(),
        1,
        "the opaque kernel's record says its layout is unknown"
    );
    // The managed and pinned buffers reached through arguments were captured too.
    assert!(
        recs.iter()
            .filter(|r| r["kernel"] == "kr_tiny")
            .all(|r| r["captured_bytes"].as_u64().unwrap() > 98304),
        "{recs:?}"
    );
    // The fake driver's world has no CUPTI: the report says the cross-check did not run, and
    // why (on a machine with a CUDA toolkit, whatever it found is said).
    let c = &v["cupti"];
    if !cupti_installed() {
        assert_eq!(c["status"], "unavailable", "{c}");
        assert!(
            stderr.contains("cupti: no cross-check (unavailable"),
            "{stderr}"
        );
    }
    assert!(stderr.contains("\ncupti: "), "{stderr}");
    // The driver names kr_rmw mangled; the records and the table name it demangled.
    const RMW: &str = "kr_rmw(unsigned long*, unsigned long, unsigned long)";
    assert!(recs.iter().any(|r| r["kernel"] == RMW), "{recs:?}");
    assert!(
        recs.iter()
            .all(|r| !r["kernel"].as_str().unwrap().starts_with("_Z")),
        "{recs:?}"
    );
    assert!(
        stderr.contains("kr_rmw(unsigned long*"),
        "the per-kernel table: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn timing_writes_one_csv_row_per_dispatch_and_pass() {
    let Some(dir) = build("timing") else { return };
    let reference = plain(&dir, &[]);
    let out = dir.join("report.csv");
    let run = kreplay(
        &dir,
        &[
            "--tool",
            "timing",
            "--passes",
            "4",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(
        text(&run.stdout),
        text(&reference.stdout),
        "{}",
        text(&run.stderr)
    );
    assert_eq!(run.status.code(), Some(7));
    let csv = std::fs::read_to_string(&out).expect("csv written");
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 9 * 4, "{csv}");
    assert!(rows.iter().all(|r| r.contains(",replayed,")), "{csv}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_program_without_a_usable_driver_runs_untouched_with_one_line() {
    let Some(dir) = build("nodev") else { return };
    let env = [("FAKE_CUDA_NO_DEVICE", "1")];
    let reference = plain(&dir, &env);
    let run = kreplay(&dir, &["--tool", "verify"], &env);
    assert_eq!(text(&run.stdout), text(&reference.stdout));
    assert_eq!(run.status.code(), reference.status.code());
    let stderr = text(&run.stderr);
    assert_eq!(
        stderr.lines().filter(|l| !l.trim().is_empty()).count(),
        1,
        "one clear line: {stderr}"
    );
    assert!(stderr.contains("no replay report"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_expandable_segment_and_a_pool_allocation_are_replayed_equal_to_a_plain_run() {
    let Some(dir) = build("vmem") else { return };
    let env = [("KR_APP_VMEM", "1")];
    let reference = plain(&dir, &env);
    let expected = text(&reference.stdout);
    assert!(
        expected.contains("segment ") && expected.contains("pooled "),
        "{expected}"
    );
    let out = dir.join("report.json");
    let run = kreplay(
        &dir,
        &[
            "--tool",
            "verify",
            "--passes",
            "3",
            "--out",
            out.to_str().unwrap(),
        ],
        &env,
    );
    let stderr = text(&run.stderr);
    assert_eq!(text(&run.stdout), expected, "{stderr}");
    assert_eq!(run.status.code(), Some(7), "{stderr}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("report written")).unwrap();
    // The 9 dispatches of the plain program, then the segment's and the pool allocation's.
    let recs = v["records"].as_array().expect("records");
    assert_eq!(recs.len(), 11, "{recs:?}");
    for r in recs {
        assert_eq!(r["outcome"], "replayed", "{r}");
        assert_eq!(r["executed_passes"], 3, "{r}");
        assert_eq!(r["inputs_identical"], true, "{r}");
        assert_eq!(r["outputs_identical"], true, "{r}");
    }
    let i = &v["interception"];
    assert_eq!(i["vmem_maps"], 1, "{i}");
    assert_eq!(i["vmem_unknown_handle"], 0, "{i}");
    // cuMemUnmap and cuMemAddressFree.
    assert_eq!(i["vmem_unmaps"], 2, "{i}");
    assert_eq!(i["alloc_async"], 1, "{i}");
    assert_eq!(i["frees"], 7, "{i}");
    let _ = std::fs::remove_dir_all(&dir);
}
