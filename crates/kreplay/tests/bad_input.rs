//! `kreplay` with hostile input (issue 19): arguments and `KREPLAY_*` values that are not UTF-8,
//! output that cannot be written, the order defaults → environment → command line, and a kernel
//! filter that admits nothing. Every case ends with a status of our own (never 101, the status
//! of a panic) and a message that names the problem.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn kreplay() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kreplay"));
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("KREPLAY_") || k.starts_with("ROCPROFILER_KERNEL_REPLAY_") {
            c.env_remove(k);
        }
    }
    c
}

fn output(c: &mut Command) -> Output {
    c.output().expect("kreplay runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn not_utf8(prefix: &str) -> OsString {
    let mut v = prefix.as_bytes().to_vec();
    v.extend_from_slice(b"\xff\xfe");
    OsString::from_vec(v)
}

#[track_caller]
fn assert_no_panic(o: &Output) {
    assert_ne!(o.status.code(), Some(101), "a panic: {}", stderr(o));
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

#[test]
fn an_argument_that_is_not_utf8_is_a_usage_error_not_a_panic() {
    for args in [
        vec![OsString::from("demo"), not_utf8("--scope=")],
        vec![not_utf8("demo")],
        vec![
            OsString::from("bench"),
            OsString::from("--backend"),
            not_utf8("cu"),
        ],
    ] {
        let o = output(kreplay().args(&args));
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("not valid UTF-8"), "{}", stderr(&o));
    }
}

#[test]
fn a_policy_value_that_is_not_utf8_is_an_error_naming_the_variable() {
    for name in [
        "KREPLAY_LOG",
        "KREPLAY_SCOPE",
        "ROCPROFILER_KERNEL_REPLAY_MAX_PASSES",
        "KREPLAY_KERNEL_INCLUDE",
    ] {
        let o = output(kreplay().arg("demo").env(name, not_utf8("all")));
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(name), "{name}: {e}");
        assert!(e.contains("UTF-8"), "{name}: {e}");
    }
}

#[test]
fn every_malformed_variable_is_named_at_once() {
    let o = output(
        kreplay()
            .arg("demo")
            .env("KREPLAY_MAX_PASSES", "many")
            .env("KREPLAY_RESTORE", "partial"),
    );
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("KREPLAY_MAX_PASSES") && e.contains("KREPLAY_RESTORE"),
        "{e}"
    );
}

/// A pipe whose reading end is already closed: writing to it fails with EPIPE.
fn closed_pipe() -> Stdio {
    let mut reader = Command::new("true")
        .stdin(Stdio::piped())
        .spawn()
        .expect("`true` runs");
    let write_end = reader.stdin.take().expect("a pipe");
    // `true` exits without reading: the pipe's only reading end is gone once it is reaped.
    reader.wait().expect("`true` exits");
    Stdio::from(write_end)
}

fn dev_full() -> Stdio {
    Stdio::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full exists"),
    )
}

#[test]
fn an_error_whose_stderr_cannot_be_written_ends_with_our_status() {
    for (what, make) in [
        ("closed pipe", closed_pipe as fn() -> Stdio),
        ("full device", dev_full),
    ] {
        // A usage error.
        let o = output(kreplay().args(["demo", "--fast"]).stderr(make()));
        assert_eq!(o.status.code(), Some(2), "{what}");
        // A malformed variable.
        let o = output(
            kreplay()
                .arg("demo")
                .env("KREPLAY_MAX_PASSES", "many")
                .stderr(make()),
        );
        assert_eq!(o.status.code(), Some(2), "{what}");
        // Output that cannot be written either.
        let o = output(kreplay().arg("demo").stdout(make()).stderr(make()));
        assert_eq!(o.status.code(), Some(1), "{what}");
        let o = output(kreplay().arg("--help").stdout(make()).stderr(make()));
        assert_eq!(o.status.code(), Some(1), "{what}");
        // The CUDA bench's messages (none reach a GPU-less machine's stderr here).
        let o = output(
            kreplay()
                .args(["bench", "--backend", "cuda", "check"])
                .stdout(make())
                .stderr(make()),
        );
        assert_ne!(o.status.code(), Some(101), "{what}");
        // A failed restore still aborts (SIGABRT), also when its message cannot be written.
        let o = output(
            kreplay()
                .args(["demo", "--inject", "restore-fail"])
                .stdout(Stdio::null())
                .stderr(make()),
        );
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(o.status.signal(), Some(6), "{what}: {:?}", o.status);
        }
        // The panic hook of the demo's deliberately panicking tool writes to stderr too.
        let o = output(
            kreplay()
                .args(["demo", "--inject", "callback-panic"])
                .stderr(make()),
        );
        assert_eq!(o.status.code(), Some(0), "{what}");
    }
}

fn demo_json(envs: &[(&str, &str)], args: &[&str]) -> Value {
    let mut c = kreplay();
    c.args(["demo", "--json"]).args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    let o = output(&mut c);
    assert!(o.status.success(), "{envs:?} {args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("one JSON document")
}

#[test]
fn the_environment_overrides_the_demos_defaults_and_options_override_the_environment() {
    let env = [("KREPLAY_SCOPE", "arguments"), ("KREPLAY_RESTORE", "dirty")];
    let doc = demo_json(&env, &[]);
    let first = &doc["dispatches"][0];
    assert_eq!(first["scope"], "arguments", "{first}");
    assert_eq!(first["restore"], "dirty", "{first}");
    let doc = demo_json(&env, &["--scope", "all", "--restore", "full"]);
    let first = &doc["dispatches"][0];
    assert_eq!(first["scope"], "all", "{first}");
    assert_eq!(first["restore"], "full", "{first}");

    // A stalled pass waits the pass timeout in force, on the simulator's virtual clock: the
    // demo's 250 ms, or the environment's.
    let stalled = |envs: &[(&str, &str)]| -> f64 {
        let doc = demo_json(envs, &["--inject", "pass-stuck"]);
        doc["summary"]["replay_seconds"].as_f64().expect("seconds")
    };
    let short = stalled(&[]);
    let long = stalled(&[("KREPLAY_PASS_TIMEOUT", "30s")]);
    assert!(short < 10.0, "{short}");
    assert!(long >= 30.0, "{long}");
}

#[test]
fn a_kernel_filter_that_admits_nothing_says_so() {
    let o = output(
        kreplay()
            .arg("demo")
            .env("KREPLAY_KERNEL_INCLUDE", "no_such_kernel"),
    );
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("admitted none"), "{e}");
    assert!(e.contains("KREPLAY_KERNEL_INCLUDE=no_such_kernel"), "{e}");
    assert!(e.contains("axpy_rmw"), "{e}");
}

#[test]
fn a_kernel_filter_that_admits_some_checks_the_rest_as_single_runs() {
    let doc = demo_json(&[("KREPLAY_KERNEL_INCLUDE", "axpy_rmw")], &[]);
    let ds = doc["dispatches"].as_array().unwrap();
    assert_eq!(ds.len(), 2, "{doc}");
    for d in ds {
        assert_eq!(d["kernel"], "axpy_rmw");
        assert_eq!(d["outcome"], "replayed");
        assert_eq!(d["final_digest"], d["reference_digest"], "{d}");
    }
    let left_out = doc["not_candidates"].as_array().unwrap();
    assert_eq!(left_out.len(), 3, "{doc}");
    for s in left_out {
        assert_eq!(s["final_digest"], s["reference_digest"], "{s}");
    }
}

#[test]
fn demo_help_prints_the_usage() {
    for args in [&["demo", "--help"][..], &["demo", "-h"]] {
        let o = output(kreplay().args(args));
        assert!(o.status.success(), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stdout).contains("usage:"));
    }
}

#[test]
fn kreplay_run_with_an_unwritable_stderr_still_ends_with_the_applications_status() {
    for (what, make) in [
        ("closed pipe", closed_pipe as fn() -> Stdio),
        ("full device", dev_full),
    ] {
        // The program makes no CUDA launch: `kreplay run` says so on stderr, which cannot take
        // it, and still ends with the program's exit status.
        let o = output(
            kreplay()
                .args(["run", "--", "sh", "-c", "exit 7"])
                .stderr(make()),
        );
        assert_eq!(o.status.code(), Some(7), "{what}");
    }
}

#[test]
fn kreplay_run_with_a_library_that_does_not_exist_is_a_usage_error_naming_it() {
    let o = output(kreplay().args([
        "run",
        "--library",
        "/nonexistent/libkernel_replay.so",
        "--",
        "sh",
        "-c",
        "exit 7",
    ]));
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("--library /nonexistent/libkernel_replay.so: no such file"),
        "{e}"
    );
    let o = output(
        kreplay()
            .args(["run", "--", "sh", "-c", "exit 7"])
            .env("KREPLAY_LIBRARY", "/nonexistent/lib.so"),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("KREPLAY_LIBRARY /nonexistent/lib.so"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_clock_lock_that_cannot_be_had_stops_the_run_before_the_program_starts() {
    // Asked for explicitly, a base-clock lock is a promise about every number the run reports:
    // without NVML (this machine has no NVIDIA driver) or without root it is an error naming
    // why, and the program does not run (it would write the marker file).
    let dir = std::env::temp_dir().join(format!("kreplay-clock-{}", std::process::id()));
    let _ = std::fs::remove_file(&dir);
    let o = output(kreplay().args([
        "run",
        "--tool",
        "timing",
        "--clock-control",
        "base",
        "--",
        "sh",
        "-c",
        &format!("touch {}", dir.display()),
    ]));
    assert_no_panic(&o);
    let e = stderr(&o);
    if o.status.code() == Some(2) {
        assert!(
            e.contains("--clock-control base:") && e.contains("the program was not started"),
            "{e}"
        );
        assert!(e.contains("NVML") || e.contains("nvml"), "{e}");
        assert!(!dir.exists(), "the program ran");
    } else {
        // A GPU machine run as root: the clocks were locked, and said so.
        assert!(e.contains("locked to base"), "{e}");
        let _ = std::fs::remove_file(&dir);
    }
    let o = output(kreplay().args(["run", "--clock-control", "turbo", "--", "true"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("\"turbo\" is not one of base, none"),
        "{}",
        stderr(&o)
    );
}
