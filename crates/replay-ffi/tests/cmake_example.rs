//! Installs the library as a C++ user would (`scripts/install.sh PREFIX`, which builds
//! `cargo build --release -p replay-ffi`) into a temporary prefix, then builds against it:
//!
//! - `examples/cpp-counter-tool` with CMake (`find_package(kernel_replay REQUIRED)`), runs it
//!   and checks its per-pass results, outcome lines and the memory verdict; a project asking
//!   for an incompatible version is refused; the static imported target links and runs;
//! - `examples/hsa-cpp-tool` with CMake against the library installed with its HSA tool
//!   entry points (`KREPLAY_CARGO_FLAGS=--features hsa`): its shared library builds, exports
//!   the HSA tool entry points and loads with every symbol resolved;
//! - a tiny C program through the pkg-config file (`pkg-config --cflags --libs kernel_replay`
//!   with `PKG_CONFIG_PATH`), shared and static (`Libs.private`).
//!
//! Without `cmake` (or `pkg-config`) the test prints a skip line, or fails when
//! `KREPLAY_REQUIRE_CMAKE=1` is set (CI sets it).
//!
//! Needs the simulated GPU through the C ABI (feature `sim`, on by default).

#![cfg(feature = "sim")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

fn work_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replay-ffi-install")
}

/// Runs a command; its success and output. `LD_LIBRARY_PATH` is removed so the programs find
/// the installed library through their rpath, as a user's would.
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

#[track_caller]
fn run_ok(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let (ok, text) = run(cmd);
    assert!(ok, "{shown} failed:\n{text}");
    text
}

/// Whether `tool` runs; when it does not, fails under `KREPLAY_REQUIRE_CMAKE=1`, else prints
/// a skip line.
fn have(tool: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("KREPLAY_REQUIRE_CMAKE").as_deref() != Ok("1"),
            "KREPLAY_REQUIRE_CMAKE=1 is set but `{tool}` is not installed"
        );
        // Written to the process's stderr, not through eprintln!, so the test harness does not
        // capture it: the skip is visible in a plain `cargo test`.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: `{tool}` is not installed; the install check did not run \
             (set KREPLAY_REQUIRE_CMAKE=1 to make this a failure)"
        );
    }
    found
}

/// Serialises the installs: both build `target/release/libkernel_replay.so` (with different
/// features) and copy it from there.
static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `scripts/install.sh` into `work_dir()/NAME` with `KREPLAY_CARGO_FLAGS=flags`; the
/// prefix, checked for every installed file.
fn install(name: &str, flags: &str) -> PathBuf {
    let _one = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = work_dir().join(name);
    let _ = std::fs::remove_dir_all(&prefix);
    let out = run_ok(
        Command::new("bash")
            .arg(repo_root().join("scripts/install.sh"))
            .arg(&prefix)
            .env("KREPLAY_CARGO_FLAGS", flags),
    );
    for f in [
        "lib/libkernel_replay.so",
        "lib/libkernel_replay.a",
        "include/kernel_replay.h",
        "include/kernel_replay_cuda.h",
        "include/kernel_replay_hsa.h",
        "lib/cmake/kernel_replay/kernel_replayConfig.cmake",
        "lib/cmake/kernel_replay/kernel_replayConfigVersion.cmake",
        "lib/pkgconfig/kernel_replay.pc",
    ] {
        assert!(prefix.join(f).is_file(), "{f} is not installed:\n{out}");
    }
    for h in [
        "kernel_replay.h",
        "kernel_replay_cuda.h",
        "kernel_replay_hsa.h",
    ] {
        assert_eq!(
            std::fs::read(prefix.join("include").join(h)).unwrap(),
            std::fs::read(repo_root().join("include").join(h)).unwrap(),
            "the installed {h} is the repository's"
        );
    }
    prefix
}

/// The default library, installed once for this test binary; the prefix.
fn installed() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| install("prefix", ""))
}

/// The library with the HSA tool entry points (`--features hsa`), as an HSA tool deploys it:
/// the example tool calls `kreplay_hsa_mark_tool_queue`, which only that build exports.
fn installed_hsa() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| install("prefix-hsa", "--features hsa"))
}

/// Configures and builds a CMake project against the prefix; the build directory, or the
/// configure output when it failed.
fn cmake_build(source: &Path, build: &Path, prefix: &Path) -> Result<PathBuf, String> {
    let _ = std::fs::remove_dir_all(build);
    let (ok, text) = run(Command::new("cmake")
        .arg("-S")
        .arg(source)
        .arg("-B")
        .arg(build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .arg("-DCMAKE_BUILD_TYPE=Release"));
    if !ok {
        return Err(text);
    }
    run_ok(Command::new("cmake").arg("--build").arg(build));
    Ok(build.to_path_buf())
}

/// The lines of the example's output for one dispatch: its pass lines and outcome line.
fn dispatch_block<'a>(out: &'a str, kernel: &str) -> (Vec<&'a str>, &'a str) {
    let header = format!("kernel={kernel}");
    let mut lines = out
        .lines()
        .skip_while(|l| !(l.starts_with("dispatch=") && l.ends_with(&header)));
    assert!(lines.next().is_some(), "no block for {kernel}:\n{out}");
    let passes: Vec<&str> = lines
        .clone()
        .take_while(|l| l.starts_with("  pass="))
        .map(str::trim)
        .collect();
    let outcome = lines
        .find(|l| l.starts_with("outcome "))
        .unwrap_or_else(|| panic!("no outcome line for {kernel}:\n{out}"));
    (passes, outcome)
}

#[test]
fn the_cpp_counter_tool_builds_with_cmake_against_the_installed_package() {
    if !have("cmake") {
        return;
    }
    let prefix = installed();
    let root = repo_root();
    let build = cmake_build(
        &root.join("examples/cpp-counter-tool"),
        &work_dir().join("build-cpp-counter-tool"),
        prefix,
    )
    .unwrap_or_else(|e| panic!("configuring the example failed:\n{e}"));
    let exe = build.join("cpp-counter-tool");
    let capture = work_dir().join("cpp-counter-tool-capture");
    let _ = std::fs::remove_dir_all(&capture);
    let (ok, out) = run(Command::new(&exe).env("CPP_COUNTER_TOOL_CAPTURE", &capture));
    assert!(ok, "the example failed:\n{out}");
    println!("{out}");
    // Its capture of the first dispatch's first pass, reported in CONFIG EXIT.
    assert!(out.contains("capture written=yes regions="), "{out}");
    let c = replay_capture::read(&capture).expect("the example's capture");
    assert_eq!(c.manifest.pass, 0);

    // One pass per counter group, tracing off in pass 1 only, values of axpy_rmw over 4096
    // elements: work-items, bytes read (x, then y), bytes written, 3 accesses + 2 per element.
    let (passes, outcome) = dispatch_block(&out, "axpy_rmw");
    assert_eq!(
        passes,
        vec![
            "pass=0 group=work_items value=4096 tracing=on",
            "pass=1 group=bytes_read value=32768 tracing=off",
            "pass=2 group=bytes_written value=16384 tracing=on",
            "pass=3 group=instructions value=8195 tracing=on",
        ],
        "{out}"
    );
    assert!(
        outcome.contains("outcome=replayed reason=none requested_passes=4 executed_passes=4"),
        "{outcome}"
    );
    for kernel in ["fill_u32", "reduce_sum_u32", "increment_u64"] {
        let (passes, outcome) = dispatch_block(&out, kernel);
        assert_eq!(passes.len(), 4, "{kernel}:\n{out}");
        for (i, p) in passes.iter().enumerate() {
            assert!(p.starts_with(&format!("pass={i} ")), "{p}");
            assert_eq!(p.ends_with("tracing=off"), i == 1, "{p}");
        }
        assert!(
            outcome.contains("outcome=replayed reason=none requested_passes=4 executed_passes=4"),
            "{outcome}"
        );
    }
    assert!(
        out.contains("summary dispatches=4 replayed=4 passes=16"),
        "{out}"
    );
    assert!(
        out.contains("memory: identical to the run without replay"),
        "{out}"
    );

    // The package's version file refuses an incompatible request.
    let probe = work_dir().join("version-probe");
    let _ = std::fs::remove_dir_all(&probe);
    std::fs::create_dir_all(&probe).unwrap();
    std::fs::write(
        probe.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.16)\nproject(probe LANGUAGES C)\n\
         find_package(kernel_replay 1.0 REQUIRED)\n",
    )
    .unwrap();
    let refused = cmake_build(&probe, &probe.join("build"), prefix).unwrap_err();
    assert!(
        refused.contains("kernel_replay") && refused.contains("0.1.0"),
        "{refused}"
    );

    // The static imported target links on its own (its system libraries come with it).
    let stat = work_dir().join("static-probe");
    let _ = std::fs::remove_dir_all(&stat);
    std::fs::create_dir_all(&stat).unwrap();
    std::fs::write(stat.join("probe.c"), TINY_C).unwrap();
    std::fs::write(
        stat.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.16)\nproject(probe LANGUAGES C)\n\
         find_package(kernel_replay 0.1 REQUIRED)\nadd_executable(probe probe.c)\n\
         target_link_libraries(probe PRIVATE kernel_replay::kernel_replay_static)\n",
    )
    .unwrap();
    let b = cmake_build(&stat, &stat.join("build"), prefix)
        .unwrap_or_else(|e| panic!("configuring the static probe failed:\n{e}"));
    let out = run_ok(&mut Command::new(b.join("probe")));
    assert!(out.contains("probe ok 0.1.0"), "{out}");
}

/// The HSA C++ tool example's CMakeLists builds its shared library against the installed
/// package, exporting the tool entry points and linking `libkernel_replay.so`; it loads with
/// every symbol resolved (`RTLD_NOW`). (Its replay on the simulated HSA runtime is
/// `hsa_cpp_tool.rs`.)
#[test]
fn the_hsa_cpp_tool_builds_with_cmake_against_the_installed_package() {
    if !have("cmake") {
        return;
    }
    let prefix = installed_hsa();
    let build = cmake_build(
        &repo_root().join("examples/hsa-cpp-tool"),
        &work_dir().join("build-hsa-cpp-tool"),
        prefix,
    )
    .unwrap_or_else(|e| panic!("configuring the HSA C++ tool failed:\n{e}"));
    let so = build.join("libhsa-cpp-tool.so");
    assert!(so.is_file(), "{} was not built", so.display());
    // Loaded in a process of its own, without this test's LD_LIBRARY_PATH (which names cargo's
    // default-feature build of the library): the tool must find the installed one through its
    // rpath, and RTLD_NOW resolves every undefined symbol against it now.
    let loader = work_dir().join("load-hsa-cpp-tool");
    std::fs::write(loader.with_extension("c"), LOADER_C).unwrap();
    run_ok(
        Command::new("cc")
            .arg(loader.with_extension("c"))
            .arg("-o")
            .arg(&loader)
            .arg("-ldl"),
    );
    let out = run_ok(Command::new(&loader).arg(&so).args([
        "kreplay_tool_init",
        "kreplay_tool_fini",
        "hsa_cpp_tool_report",
    ]));
    assert!(out.contains("loaded 3 symbols"), "{out}");
    let (_, needed) = run(Command::new("readelf").arg("-d").arg(&so));
    if !needed.is_empty() {
        assert!(
            needed.contains("[libkernel_replay.so]"),
            "the tool links the installed library:\n{needed}"
        );
    }
}

/// Loads argv[1] with RTLD_NOW and looks up every further argument; prints "loaded N symbols".
const LOADER_C: &str = r#"
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    for (int i = 2; i < argc; i++) {
        if (!dlsym(h, argv[i])) {
            fprintf(stderr, "%s is not exported\n", argv[i]);
            return 1;
        }
    }
    printf("loaded %d symbols\n", argc - 2);
    return 0;
}
"#;

/// A tiny C program: version, a simulator, one kernel, shutdown.
const TINY_C: &str = r#"
#include <kernel_replay.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    kreplay_sim_t sim;
    kreplay_sim_kernel_t k;
    kreplay_sim_dispatch_t d;
    kreplay_dim3_t grid;
    uint64_t addr = 0, args[2], value = 0;
    grid.x = 1;
    grid.y = 1;
    grid.z = 1;
    if (kreplay_sim_create(1, &sim) != KREPLAY_STATUS_OK ||
        kreplay_sim_alloc(sim, 0, 8, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &addr) != 0 ||
        kreplay_sim_kernel_create(sim, "increment_u64", &k) != 0) {
        fprintf(stderr, "setup failed: %s\n", kreplay_last_error());
        return 1;
    }
    args[0] = addr;
    args[1] = 41;
    if (kreplay_sim_dispatch(sim, 0, 0, k, args, sizeof(args), grid, &d) != 0 ||
        kreplay_sim_wait(d, NULL) != 0 || kreplay_sim_read(sim, addr, &value, 8) != 0 ||
        value != 41 || kreplay_shutdown() != 0) {
        fprintf(stderr, "run failed: %s\n", kreplay_last_error());
        return 1;
    }
    printf("probe ok %s\n", kreplay_version_string());
    return strcmp(kreplay_version_string(), "0.1.0") == 0 ? 0 : 1;
}
"#;

#[test]
fn the_pkg_config_file_builds_a_c_program() {
    if !have("pkg-config") {
        return;
    }
    let prefix = installed();
    let pc_path = prefix.join("lib/pkgconfig");
    let pkg = |args: &[&str]| {
        run_ok(
            Command::new("pkg-config")
                .env("PKG_CONFIG_PATH", &pc_path)
                .args(args)
                .arg("kernel_replay"),
        )
        .trim()
        .to_owned()
    };
    assert_eq!(pkg(&["--modversion"]), "0.1.0");
    let flags = pkg(&["--cflags", "--libs"]);
    let include = format!("-I{}", prefix.join("include").display());
    let libdir = format!("-L{}", prefix.join("lib").display());
    assert!(flags.contains(&include), "{flags}");
    assert!(flags.contains(&libdir), "{flags}");
    assert!(flags.contains("-lkernel_replay"), "{flags}");
    let rpath = format!("-Wl,-rpath,{}", pkg(&["--variable=libdir"]));

    let dir = work_dir().join("pkg-config-probe");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    std::fs::write(&src, TINY_C).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());

    // Shared, as the pkg-config file says.
    let exe = dir.join("probe-shared");
    run_ok(
        Command::new(&cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
            .arg(&src)
            .args(flags.split_whitespace())
            .arg(&rpath)
            .arg("-o")
            .arg(&exe),
    );
    let out = run_ok(&mut Command::new(&exe));
    assert!(out.contains("probe ok 0.1.0"), "{out}");
    let (_, needed) = run(Command::new("readelf").arg("-d").arg(&exe));
    if !needed.is_empty() {
        assert!(
            needed.contains("[libkernel_replay.so]"),
            "the program records the library's SONAME:\n{needed}"
        );
    }

    // Static: the archive plus the private libraries the file lists.
    let private = pkg(&["--static", "--libs-only-l"]);
    assert!(
        private.contains("-lpthread") && private.contains("-ldl"),
        "{private}"
    );
    let exe = dir.join("probe-static");
    run_ok(
        Command::new(&cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
            .arg(&src)
            .args(pkg(&["--cflags"]).split_whitespace())
            .arg(prefix.join("lib/libkernel_replay.a"))
            .args(
                private
                    .split_whitespace()
                    .filter(|f| *f != "-lkernel_replay"),
            )
            .arg("-o")
            .arg(&exe),
    );
    let out = run_ok(&mut Command::new(&exe));
    assert!(out.contains("probe ok 0.1.0"), "{out}");
}
