//! `kreplay run` end to end against the fake CUDA driver (SPEC §9.2 "Unmodified
//! applications"): a small C program linked with `-lcuda` (the fake, `replay-cuda`'s
//! `tests/fake_driver/fake_inject.c`) runs plain and under `kreplay run`, which preloads
//! `libkernel_replay.so` (built with its `cuda` feature as this test's dev-dependency). Its
//! output and exit status must be the plain run's, and the report must show every launch
//! entry, allocation class, capture, graph and cooperative launch where it belongs.
//! Skipped where no C compiler is found.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support;
use support::{cc, library, text};

fn build(tag: &str) -> Option<PathBuf> {
    support::build("kreplay-run-fake", tag)
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
            "--check-launches",
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
    // 12 launches: 3 direct entries, 2 through cuGetProcAddress (plain and per-thread),
    // 1 through dlsym, 1 of unknown layout, 2 into managed/pinned memory, 1 into a capture,
    // 1 cooperative, and the graph's kernel node, unrolled at its launch (node mode).
    assert_eq!(i["launches_seen"], 12, "{i}");
    assert_eq!(i["submitted"], 11, "{i}");
    assert_eq!(i["stream_capture"], 1, "{i}");
    assert_eq!(i["graph_launch"], 1, "{i}");
    assert_eq!(i["cooperative"], 1, "{i}");
    assert_eq!(i["layout_unknown"], 1, "{i}");
    assert_eq!(i["layout_driver"], 10, "{i}");
    assert_eq!(i["alloc_device"], 2, "{i}");
    assert_eq!(i["alloc_pitch"], 1, "{i}");
    assert_eq!(i["alloc_managed"], 1, "{i}");
    assert_eq!(i["alloc_host"], 2, "{i}");
    assert_eq!(i["frees"], 6, "{i}");
    assert_eq!(i["fallback_launch"], 0, "{i}");
    // 3 host-to-device and 3 device-to-host copies, each under the write gate.
    assert_eq!(i["gated_writes"], 6, "{i}");
    let s = &v["summary"];
    assert_eq!(s["replayed"], 10, "{s}");
    let recs = v["records"].as_array().expect("records");
    assert_eq!(recs.len(), 10);
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
    // The graph's kernel node is a dispatch of its own, named by its graph and node.
    let nodes: Vec<_> = recs.iter().filter(|r| !r["graph"].is_null()).collect();
    assert_eq!(nodes.len(), 1, "{recs:?}");
    assert!(!nodes[0]["node"].is_null(), "{:?}", nodes[0]);
    assert_eq!(i["graph_unrolled"], 1, "{i}");
    assert_eq!(i["graph_node_kernels"], 1, "{i}");
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
    // The table names it by its function name (Nsight Compute's short name).
    assert!(
        stderr
            .lines()
            .any(|l| l.split_whitespace().nth(2) == Some("kr_rmw")),
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
    assert_eq!(rows.len(), 10 * 4, "{csv}");
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
    // The 10 dispatches of the plain program, then the segment's and the pool allocation's.
    let recs = v["records"].as_array().expect("records");
    assert_eq!(recs.len(), 12, "{recs:?}");
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

/// `kreplay run` of `sh -c SCRIPT` (no driver needed), started but not waited for.
fn kreplay_sh(script: &str, dir: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .arg("run")
        .arg("--library")
        .arg(library())
        .args(["--", "sh", "-c", script])
        .current_dir(dir)
        .env_remove("LD_PRELOAD")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start kreplay")
}

fn wait_for(path: &Path) {
    let t0 = std::time::Instant::now();
    while !path.exists() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn signals_sent_to_kreplay_reach_the_program_which_keeps_its_exit_status() {
    let dir = std::env::temp_dir().join(format!("kreplay-signals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, (sig, num)) in [("INT", 2), ("TERM", 15), ("HUP", 1), ("QUIT", 3)]
        .into_iter()
        .enumerate()
    {
        let ready = dir.join(format!("ready-{sig}"));
        let done = dir.join(format!("trapped-{sig}"));
        // The program traps the signal and exits with a status of its own.
        let child = kreplay_sh(
            &format!(
                "trap 'touch {}; exit {}' {sig}; touch {}; while :; do sleep 0.05; done",
                done.display(),
                40 + i,
                ready.display()
            ),
            &dir,
        );
        wait_for(&ready);
        let ok = Command::new("kill")
            .arg(format!("-{num}"))
            .arg(child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{num}");
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert!(done.exists(), "the program got SIG{sig}: {stderr}");
        assert_eq!(out.status.code(), Some(40 + i as i32), "SIG{sig}: {stderr}");
        assert!(
            stderr.contains(&format!("SIG{sig} passed on to the program")),
            "{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_program_killed_by_a_signal_is_reported_as_such() {
    let dir = std::env::temp_dir().join(format!("kreplay-killed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = kreplay_sh("kill -SEGV $$", &dir)
        .wait_with_output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(128 + 11),
        "as a shell says: {stderr}"
    );
    assert!(stderr.contains("killed by SIGSEGV"), "{stderr}");
    assert!(!stderr.contains("made no CUDA launch"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_program_that_crashes_after_its_launches_keeps_the_records_it_made() {
    let Some(dir) = build("crash") else { return };
    let out = dir.join("crash.json");
    let run = kreplay(
        &dir,
        &["--tool", "verify", "--out", out.to_str().unwrap()],
        &[("KR_APP_CRASH", "1")],
    );
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(128 + 11), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("the program was killed by SIGSEGV after"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("report written")).unwrap();
    let recs = v["records"].as_array().expect("records");
    assert_eq!(
        recs.len(),
        10,
        "every replayed launch before the crash: {stderr}"
    );
    let last = recs.last().unwrap()["dispatch_id"].as_u64().unwrap();
    assert!(
        line.ends_with(&format!("after 10 launches; records up to dispatch {last}")),
        "{line}"
    );
    assert_eq!(v["processes"][0]["report"], false, "{}", v["processes"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sh -c` running the fake application twice at once, as ranks 0 and 1; the shell exits
/// with rank 0's status.
fn two_ranks(dir: &Path) -> String {
    let app = dir.join("app");
    format!(
        "RANK=1 {a} > {d}/r1.out & RANK=0 {a} > {d}/r0.out; s=$?; wait; exit $s",
        a = app.display(),
        d = dir.display()
    )
}

fn kreplay_two_ranks(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .arg("run")
        .arg("--library")
        .arg(library())
        .args(args)
        .args(["--", "sh", "-c", &two_ranks(dir)])
        .env("LD_LIBRARY_PATH", dir)
        .env_remove("LD_PRELOAD")
        .env_remove("RANK")
        .output()
        .expect("run kreplay")
}

#[test]
fn two_processes_write_two_reports_merged_into_one_with_process_and_rank() {
    let Some(dir) = build("ranks") else { return };
    let out = dir.join("merged.json");
    let run = kreplay_two_ranks(&dir, &["--out", out.to_str().unwrap()]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(7), "{stderr}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("report written")).unwrap();
    let procs = v["processes"].as_array().expect("processes");
    assert_eq!(procs.len(), 2, "{procs:?}");
    let mut ranks: Vec<u64> = procs.iter().map(|p| p["rank"].as_u64().unwrap()).collect();
    ranks.sort();
    assert_eq!(ranks, vec![0, 1]);
    assert!(procs.iter().all(|p| p["report"] == true), "{procs:?}");
    let recs = v["records"].as_array().expect("records");
    assert_eq!(recs.len(), 20, "10 per process");
    for rank in [0, 1] {
        let mine: Vec<_> = recs.iter().filter(|r| r["rank"] == rank).collect();
        assert_eq!(mine.len(), 10, "rank {rank}");
        let pid = &mine[0]["process"];
        assert!(mine.iter().all(|r| &r["process"] == pid));
    }
    // The summaries add up.
    assert_eq!(v["summary"]["replayed"], 20, "{}", v["summary"]);
    assert_eq!(
        v["interception"]["launches_seen"], 24,
        "{}",
        v["interception"]
    );
    assert!(stderr.contains("2 processes"), "{stderr}");
    // The table has a row per process and kernel, with its rank and pid.
    let rows: Vec<&str> = stderr
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("kr_rmw"))
        .collect();
    assert_eq!(rows.len(), 2, "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_out_template_gives_each_rank_its_file_and_ranks_selects_who_replays() {
    let Some(dir) = build("template") else { return };
    let tpl = dir.join("r-%rank%-%q{KR_TAG}.csv");
    let run = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .arg("run")
        .arg("--library")
        .arg(library())
        .args(["--tool", "timing", "--passes", "2", "--ranks", "1", "--out"])
        .arg(&tpl)
        .args(["--", "sh", "-c", &two_ranks(&dir)])
        .env("LD_LIBRARY_PATH", &dir)
        .env("KR_TAG", "x")
        .env_remove("LD_PRELOAD")
        .env_remove("RANK")
        .output()
        .unwrap();
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(7), "{stderr}");
    // Rank 0 ran untouched: no records, no file; its output is a plain run's.
    assert!(!dir.join("r-0-x.csv").exists(), "{stderr}");
    let reference = plain(&dir, &[]);
    assert_eq!(
        std::fs::read_to_string(dir.join("r0.out")).unwrap(),
        text(&reference.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("r1.out")).unwrap(),
        text(&reference.stdout)
    );
    let csv = std::fs::read_to_string(dir.join("r-1-x.csv")).expect("rank 1's file");
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("process,rank,dispatch_id,kernel,"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 10 * 2, "{csv}");
    assert!(
        rows.iter().all(|r| r.split(',').nth(1) == Some("1")),
        "{csv}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_existing_injection_is_chained_after_ours_or_refused_never_dropped() {
    let Some(dir) = build("chain") else { return };
    let src = dir.join("theirs.c");
    let mark = dir.join("theirs-ran");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\nint InitializeInjection(void) {{ FILE* f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\\n\", f); fclose(f); }} return 1; }}\n",
            mark.display()
        ),
    )
    .unwrap();
    let theirs = dir.join("libtheirs.so");
    assert!(Command::new(cc())
        .args(["-shared", "-fPIC", "-o"])
        .arg(&theirs)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let out = dir.join("chain.json");
    let run = kreplay(
        &dir,
        &["--out", out.to_str().unwrap()],
        &[("CUDA_INJECTION64_PATH", theirs.to_str().unwrap())],
    );
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(7), "{stderr}");
    assert!(mark.exists(), "their InitializeInjection ran: {stderr}");
    assert!(stderr.contains("is chained"), "{stderr}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["summary"]["replayed"], 10, "ours ran too: {stderr}");
    // One that names no file: refused, the program not started.
    let run = kreplay(
        &dir,
        &[],
        &[("CUDA_INJECTION64_PATH", "/nonexistent/libx.so")],
    );
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("/nonexistent/libx.so") && stderr.contains("not dropped"),
        "{stderr}"
    );
    assert!(text(&run.stdout).is_empty(), "the program did not start");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_program_on_a_terminal_still_reads_it_from_its_own_process_group() {
    // `script` gives kreplay a terminal; skipped where it is missing.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no script(1)");
        return;
    }
    let inner = format!(
        "{} run --library {} -- sh -c 'read x; echo got \\$x'",
        env!("CARGO_BIN_EXE_kreplay"),
        library().display()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "(printf 'hello\\n'; sleep 2) | timeout 30 script -qec \"{inner}\" /dev/null"
        ))
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    // Without the terminal the program would be stopped (SIGTTIN) and kreplay wait forever.
    assert!(
        stdout.contains("got hello"),
        "{stdout}{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}");
}

#[test]
fn a_terminal_gets_a_progress_line_of_dispatches_seen_and_replayed() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no script(1)");
        return;
    }
    let Some(dir) = build("progress") else { return };
    // The application, then a pause during which the line shows its 10 dispatches.
    let inner = format!(
        "LD_LIBRARY_PATH={d} {k} run --library {l} -- sh -c '{d}/app > /dev/null; sleep 1'",
        d = dir.display(),
        k = env!("CARGO_BIN_EXE_kreplay"),
        l = library().display()
    );
    let out = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env_remove("LD_PRELOAD")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let all = text(&out.stdout);
    assert!(
        all.contains("kreplay run: 10 dispatches seen, 10 replayed (1 processes)"),
        "{all}"
    );
    // Without a terminal (every other test), no such line.
    let plain = kreplay(&dir, &[], &[]);
    assert!(!text(&plain.stderr).contains("dispatches seen"));
    let _ = std::fs::remove_dir_all(&dir);
}
