//! Builds the C11 and C++17 consumer tests (`tests/c/abi_test.c`, `tests/cpp/abi_test.cpp`,
//! sharing `tests/common/abi_cases.h`: layout, every bad input, a full replay on the simulated
//! GPU through `kreplay_sim_*`, shutdown) against `include/kernel_replay.h` and the cdylib cargo
//! built for this test run, runs them (the C one also under valgrind, after
//! `kreplay_shutdown()`: no leak, no invalid access, every simulator thread joined), and checks
//! that the library exports exactly the functions the header declares.
//!
//! `tests/c/capture_test.c` and `tests/cpp/capture_test.cpp` (sharing
//! `tests/common/capture_cases.h`) are a tool that asks for a capture in PASS ENTER; each
//! writes one into a folder this harness gives it and reads back with `replay-capture`.
//!
//! `tests/c/abi_bad_input.c` holds the hostile-caller scenarios that need a process each (a
//! malformed environment read at start, a module unloaded from PASS ENTER, shutdown from another
//! thread while a window runs); each runs plainly and under valgrind.
//!
//! Compilers: `$CC` / `$CXX`, else `cc` / `c++`. Valgrind runs when installed; set
//! `KREPLAY_REQUIRE_VALGRIND=1` (CI does) to fail instead of skipping when it is not.
//!
//! Needs the simulated GPU through the C ABI (feature `sim`, on by default).

#![cfg(feature = "sim")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

/// The directory holding `libkernel_replay.so` as cargo built it for this test run: the test
/// executable lives in `target/<profile>/deps`, next to the library's own build output
/// (cargo builds the package's cdylib before its integration tests).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let deps = exe.parent().expect("the test executable is in a directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        if dir.join("libkernel_replay.so").exists() {
            return dir.to_path_buf();
        }
    }
    panic!(
        "libkernel_replay.so was not found in {} or its parent; build it with `cargo build -p replay-ffi`",
        deps.display()
    );
}

fn out_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replay-ffi-c-abi");
    std::fs::create_dir_all(&d).expect("the temporary directory can be created");
    d
}

fn compiler(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// Runs a command. `LD_LIBRARY_PATH` is removed: cargo points it at `target/<profile>`, whose
/// uplifted copy of the library may be older than the one in `deps` this run built, and it
/// would outrank the executables' rpath.
fn run(cmd: &mut Command) -> (bool, String) {
    cmd.env_remove("LD_LIBRARY_PATH");
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not run {shown}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Compiles one consumer test and returns the executable.
fn build(language: &str, source: &str, exe_name: &str) -> PathBuf {
    build_with(language, source, exe_name, &[])
}

/// Like [`build`], with extra compiler arguments.
fn build_with(language: &str, source: &str, exe_name: &str, extra: &[&str]) -> PathBuf {
    let root = repo_root();
    let lib = library_dir();
    let exe = out_dir().join(exe_name);
    let (cc, std) = match language {
        "c" => (compiler("CC", "cc"), "-std=c11"),
        _ => (compiler("CXX", "c++"), "-std=c++17"),
    };
    let mut cmd = Command::new(&cc);
    cmd.arg(std)
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-g"])
        .arg("-I")
        .arg(root.join("include"))
        .arg("-I")
        .arg(root.join("tests/common"))
        .arg(root.join(source))
        .args(extra)
        .arg("-L")
        .arg(&lib)
        .arg("-lkernel_replay")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe);
    let (ok, text) = run(&mut cmd);
    assert!(ok, "compiling {source} failed:\n{text}");
    exe
}

/// Checks the "N passed, N failed" tally the consumer tests print last.
fn assert_tally(name: &str, ok: bool, output: &str) {
    assert_tally_at_least(name, ok, output, 501);
}

/// Like [`assert_tally`], with at least `min` checks passed.
fn assert_tally_at_least(name: &str, ok: bool, output: &str, min: u32) {
    let tally = output
        .lines()
        .rev()
        .find_map(|l| {
            let (p, f) = l.trim().split_once(" passed, ")?;
            Some((
                p.parse::<u32>().ok()?,
                f.strip_suffix(" failed")?.parse::<u32>().ok()?,
            ))
        })
        .unwrap_or_else(|| panic!("{name} printed no tally:\n{output}"));
    assert!(
        ok && tally.1 == 0,
        "{name} failed ({} passed, {} failed):\n{output}",
        tally.0,
        tally.1
    );
    assert!(
        tally.0 >= min,
        "{name} ran too few checks ({}):\n{output}",
        tally.0
    );
    println!("{name}: {} passed, 0 failed", tally.0);
}

#[test]
fn c11_consumer_test_passes() {
    let exe = build("c", "tests/c/abi_test.c", "abi_test_c");
    let (ok, out) = run(&mut Command::new(&exe));
    assert_tally("tests/c/abi_test.c", ok, &out);
}

#[test]
fn cpp17_consumer_test_passes() {
    let exe = build("cpp", "tests/cpp/abi_test.cpp", "abi_test_cpp");
    let (ok, out) = run(&mut Command::new(&exe));
    assert_tally("tests/cpp/abi_test.cpp", ok, &out);
}

#[test]
fn c11_consumer_test_is_clean_under_valgrind() {
    if !have_valgrind() {
        return;
    }
    let exe = build("c", "tests/c/abi_test.c", "abi_test_c_valgrind");
    let (ok, out) = run(Command::new("valgrind")
        .args(["--error-exitcode=1", "--leak-check=full"])
        .arg(&exe));
    assert!(
        out.contains("ERROR SUMMARY: 0 errors"),
        "valgrind reported errors:\n{out}"
    );
    assert_tally("tests/c/abi_test.c under valgrind", ok, &out);
}

/// Runs a capture consumer test (`tests/common/capture_cases.h`: a tool asks for a capture of
/// pass 1 in PASS ENTER, follows it, and every bad request) with a fresh folder, and reads the
/// capture it wrote back with `replay-capture`: the counter's input restored for the pass, its
/// output after one execution; the refused capture left no folder.
fn capture_consumer(language: &str, source: &str, exe_name: &str, valgrind: bool) {
    let exe = build(language, source, exe_name);
    let dir = out_dir().join(format!("{exe_name}-captures"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = if valgrind {
        let mut c = Command::new("valgrind");
        c.args(["--error-exitcode=1", "--leak-check=full"])
            .arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    let (ok, out) = run(cmd.arg(&dir));
    if valgrind {
        assert!(
            out.contains("ERROR SUMMARY: 0 errors"),
            "valgrind reported errors:\n{out}"
        );
    }
    assert_tally_at_least(source, ok, &out, 80);
    let c = replay_capture::read(&dir.join("written")).expect("the capture folder");
    assert_eq!(c.manifest.pass, 1);
    assert_eq!(c.manifest.kernel.name, "increment_u64");
    assert_eq!(c.manifest.kernel.module, "capture.co");
    let p = &c.manifest.arguments.pointers[0];
    assert_eq!(p.offset, 0);
    assert_eq!(c.data[p.region].0, 0u64.to_le_bytes(), "restored input");
    assert_eq!(
        c.data[p.region].1,
        5u64.to_le_bytes(),
        "one execution's output"
    );
    assert!(
        !dir.join("refused").exists(),
        "a refused capture leaves no folder"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_c11_tool_captures_the_current_dispatch_from_pass_enter() {
    capture_consumer("c", "tests/c/capture_test.c", "capture_test_c", false);
}

#[test]
fn a_cpp17_tool_captures_the_current_dispatch_from_pass_enter() {
    capture_consumer(
        "cpp",
        "tests/cpp/capture_test.cpp",
        "capture_test_cpp",
        false,
    );
}

#[test]
fn the_c11_capture_test_is_clean_under_valgrind() {
    if !have_valgrind() {
        return;
    }
    capture_consumer(
        "c",
        "tests/c/capture_test.c",
        "capture_test_c_valgrind",
        true,
    );
}

/// How long a bad-input scenario may run before it counts as hung. A scenario takes seconds
/// (minutes under valgrind); one that stalls waits out a pass timeout of an hour.
const HANG_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Like [`run`], killing the process if it has not finished after `limit` (a hang guard: the
/// scenario then fails, naming the limit).
fn run_bounded(cmd: &mut Command, limit: std::time::Duration) -> (bool, String) {
    use std::io::Read;
    use std::process::Stdio;
    cmd.env_remove("LD_LIBRARY_PATH");
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("could not run {shown}: {e}"));
    // Drained on their own threads, so a chatty child never blocks on a full pipe.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("the child can be waited for") {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.join().unwrap()),
        String::from_utf8_lossy(&err.join().unwrap())
    );
    match status {
        Some(s) => (s.success(), text),
        None => panic!("{shown} was still running after {limit:?} (hung):\n{text}"),
    }
}

/// Whether valgrind runs here (or is required and missing: a failure).
fn have_valgrind() -> bool {
    let have = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var_os("KREPLAY_REQUIRE_VALGRIND").is_none(),
            "KREPLAY_REQUIRE_VALGRIND is set but valgrind is not installed"
        );
        eprintln!("valgrind is not installed; skipping (set KREPLAY_REQUIRE_VALGRIND=1 to fail)");
    }
    have
}

/// Runs one scenario of `tests/c/abi_bad_input.c` in its own process and checks its tally
/// (and, under valgrind, a clean report).
fn bad_input(scenario: &str, args: &[&str], valgrind: bool) {
    // One executable per scenario and mode: the tests run in parallel.
    let exe_name = format!(
        "abi_bad_input_{scenario}{}",
        if valgrind { "_vg" } else { "" }
    );
    let exe = build_with("c", "tests/c/abi_bad_input.c", &exe_name, &["-pthread"]);
    let mut cmd = if valgrind {
        let mut c = Command::new("valgrind");
        c.args(["--error-exitcode=1", "--leak-check=full"])
            .arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    // The scenarios set their own variables; none of the caller's may leak in.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("KREPLAY_") || k.starts_with("ROCPROFILER_KERNEL_REPLAY_") {
            cmd.env_remove(&*k);
        }
    }
    let (ok, out) = run_bounded(cmd.arg(scenario).args(args), HANG_LIMIT);
    let name = format!(
        "abi_bad_input {scenario}{}",
        if valgrind { " under valgrind" } else { "" }
    );
    if valgrind {
        assert!(
            out.contains("ERROR SUMMARY: 0 errors"),
            "{name}: valgrind reported errors:\n{out}"
        );
    }
    let tally = out
        .lines()
        .rev()
        .find_map(|l| {
            let (p, f) = l.trim().split_once(" passed, ")?;
            Some((
                p.parse::<u32>().ok()?,
                f.strip_suffix(" failed")?.parse::<u32>().ok()?,
            ))
        })
        .unwrap_or_else(|| panic!("{name} printed no tally (did it abort?):\n{out}"));
    assert!(
        ok && tally.1 == 0 && tally.0 >= 5,
        "{name} failed ({tally:?}):\n{out}"
    );
    println!("{name}: {} passed, 0 failed", tally.0);
}

#[test]
fn a_malformed_environment_is_a_policy_error_at_configure_naming_every_variable() {
    bad_input("env", &[], false);
}

#[test]
fn unloading_the_running_kernels_module_from_pass_enter_does_not_abort() {
    bad_input("unload", &[], false);
}

#[test]
fn shutdown_from_another_thread_waits_for_the_open_window() {
    bad_input("shutdown", &[], false);
}

#[test]
fn destroying_the_simulator_from_another_thread_waits_for_the_open_window() {
    bad_input("destroy", &[], false);
}

#[test]
fn a_counter_that_would_overflow_saturates() {
    bad_input("counters", &[], false);
}

#[test]
fn the_bad_input_scenarios_are_clean_under_valgrind() {
    if !have_valgrind() {
        return;
    }
    bad_input("env", &[], true);
    bad_input("unload", &[], true);
    bad_input("shutdown", &["8"], true);
    bad_input("destroy", &["8"], true);
    bad_input("counters", &[], true);
}

#[test]
fn header_compiles_as_c99_and_as_cpp11() {
    let root = repo_root();
    let src = out_dir().join("header_only.c");
    std::fs::write(
        &src,
        "#include \"kernel_replay.h\"\nint kreplay_header_only;\n",
    )
    .unwrap();
    for (cc, std, lang) in [
        (compiler("CC", "cc"), "-std=c99", "c"),
        (compiler("CXX", "c++"), "-std=c++11", "c++"),
    ] {
        let (ok, text) = run(Command::new(&cc)
            .arg(std)
            .args([
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
                "-x",
                lang,
            ])
            .arg("-I")
            .arg(root.join("include"))
            .arg(&src));
        assert!(ok, "the header does not compile with {cc} {std}:\n{text}");
    }
}

/// Function names declared in the header: `name(` at the start of a declaration.
fn header_functions() -> BTreeSet<String> {
    let mut header = std::fs::read_to_string(repo_root().join("include/kernel_replay.h")).unwrap();
    // The HSA entry points are exported only with the `hsa` feature.
    if cfg!(feature = "hsa") {
        header.push_str(
            &std::fs::read_to_string(repo_root().join("include/kernel_replay_hsa.h")).unwrap(),
        );
    }
    // The counter collection only with the `cuda` feature.
    if cfg!(feature = "cuda") {
        header.push_str(
            &std::fs::read_to_string(repo_root().join("include/kernel_replay_cuda.h")).unwrap(),
        );
    }
    let mut names = BTreeSet::new();
    for line in header.lines() {
        let line = line.trim_start();
        if line.starts_with('*') || line.starts_with("/*") || line.starts_with("typedef") {
            continue;
        }
        if let Some(open) = line.find('(') {
            let before = &line[..open];
            if let Some(name) = before
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next_back()
            {
                if name.starts_with("kreplay_") {
                    names.insert(name.to_owned());
                }
            }
        }
    }
    names
}

#[test]
fn the_library_exports_exactly_the_header_functions() {
    let declared = header_functions();
    assert!(
        declared.len() >= 49,
        "too few declarations parsed: {declared:?}"
    );
    let so = library_dir().join("libkernel_replay.so");
    let out = match Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
    {
        Ok(o) if o.status.success() => o,
        _ => {
            eprintln!("nm is not available; skipping the export check");
            return;
        }
    };
    let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("kreplay_"))
        .map(str::to_owned)
        .collect();
    let missing: Vec<_> = declared.difference(&exported).collect();
    let extra: Vec<_> = exported.difference(&declared).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "declared but not exported: {missing:?}; exported but not declared: {extra:?} \
         (only the `hsa` entry points differ? cargo writes the cdylib of every feature set of \
         replay-ffi to the same path, and examples/hsa-rust-tool turns `hsa` on in workspace \
         builds: after building with other features, touch crates/replay-ffi/src/lib.rs)"
    );
}
