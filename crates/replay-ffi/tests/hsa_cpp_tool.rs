//! `examples/hsa-cpp-tool` attached the way a user runs it,
//! `HSA_TOOLS_LIB=libkernel_replay.so KREPLAY_HSA_TOOL=libhsa-cpp-tool.so ./app`, on the
//! simulated HSA runtime (`replay-hsa-sim`): `tool.cpp` is compiled with `$CXX` (else `c++`)
//! against `include/` and the `libkernel_replay.so` this test run built; that library is
//! opened with `dlopen` and its `OnLoad` gets the sim's API table; then a HIP-like client
//! (shared with the Rust tool example's tests) dispatches a read-modify-write kernel through
//! the wrapped table. Checked through the tool's own `hsa_cpp_tool_report`: its init ran once
//! with the runtime version, each of the 4 passes was given its counter group in PASS ENTER and
//! read out in PASS EXIT, the outcome was `replayed`, and `OnUnload` reached its fini; and on
//! the client's side: every pass saw the same input, the completion fired once, memory equals
//! one execution.
//!
//! Without a C++ compiler the test prints a skip line, or fails when `KREPLAY_REQUIRE_CXX=1`
//! (CI sets it). `OnLoad` state is process-wide, so this file holds one test (its own process,
//! apart from `hsa_tool.rs`, which attaches another tool).
#![cfg(feature = "hsa")]

// The client is the Rust tool example's, so both tools are checked by the same driver.
#[allow(dead_code)]
#[path = "../../../examples/hsa-rust-tool/tests/common/mod.rs"]
mod common;

use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use replay_hsa_sim::{SimConfig, SimHsa};

fn cxx() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned())
}

/// Whether the C++ compiler runs; when it does not, fails under `KREPLAY_REQUIRE_CXX=1`, else
/// prints a skip line.
fn have_cxx() -> bool {
    let found = Command::new(cxx())
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("KREPLAY_REQUIRE_CXX").as_deref() != Ok("1"),
            "KREPLAY_REQUIRE_CXX=1 is set but no C++ compiler (`{}`) runs",
            cxx()
        );
        // Written to the process's stderr, not through eprintln!, so the test harness does not
        // capture it: the skip is visible in a plain `cargo test`.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: no C++ compiler (`{}`); the HSA C++ tool example was not tested \
             (set KREPLAY_REQUIRE_CXX=1 to make this a failure)",
            cxx()
        );
    }
    found
}

/// Builds `examples/hsa-cpp-tool/tool.cpp` as `libhsa-cpp-tool.so`, linking the
/// `libkernel_replay.so` in `lib` (rpath set, so it loads that very instance).
fn build_tool(lib: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay-ffi-hsa-cpp-tool");
    std::fs::create_dir_all(&dir).unwrap();
    let so = dir.join("libhsa-cpp-tool.so");
    let out = Command::new(cxx())
        .args(["-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror"])
        .args(["-shared", "-fPIC", "-fvisibility=hidden", "-I"])
        .arg(root.join("include"))
        .arg(root.join("examples/hsa-cpp-tool/tool.cpp"))
        .arg("-L")
        .arg(lib)
        .arg("-lkernel_replay")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&so)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the C++ tool failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

type ReportFn = unsafe extern "C" fn(*mut c_char, usize) -> usize;

/// The tool's `hsa_cpp_tool_report()` text.
fn report(tool: &libloading::Library) -> String {
    // SAFETY: the signature in tool.cpp.
    let f = unsafe { *tool.get::<ReportFn>(b"hsa_cpp_tool_report").unwrap() };
    // SAFETY: asking for the length with no buffer.
    let n = unsafe { f(std::ptr::null_mut(), 0) };
    assert!(n > 0, "hsa_cpp_tool_report failed");
    let mut buf = vec![0u8; n + 1];
    // SAFETY: a buffer of n + 1 bytes.
    assert_eq!(unsafe { f(buf.as_mut_ptr().cast(), buf.len()) }, n);
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

#[test]
fn the_cpp_tool_attached_through_kreplay_hsa_tool_replays_a_dispatch_on_the_simulated_runtime() {
    if !have_cxx() {
        return;
    }
    let lib_dir = library_dir("libkernel_replay.so");
    let so = build_tool(&lib_dir);
    // SAFETY: before any thread of this process reads the environment through the library
    // (the only test of this binary, and the library is not loaded yet).
    unsafe { std::env::set_var("KREPLAY_HSA_TOOL", &so) };

    let kernel_replay = ToolLibrary::open(&lib_dir.join("libkernel_replay.so"));
    let mut sim = SimHsa::new(SimConfig::default());
    assert!(
        kernel_replay.on_load(&mut sim, 7),
        "{}",
        kernel_replay.state()
    );
    let state = kernel_replay.state();
    assert_eq!(state["queues_intercepted"], true, "{state}");
    assert_eq!(state["tool"]["path"], so.to_str().unwrap(), "{state}");
    assert_eq!(state["tool"]["init_status"], 0, "{state}");

    // The instance OnLoad loaded (same path: dlopen hands back the same object).
    // SAFETY: loaded already; no initialiser runs again.
    let tool = unsafe { libloading::Library::new(&so) }.unwrap();
    assert_eq!(
        report(&tool),
        "tool init_calls=1 runtime_version=7 fini_calls=0 passes=0\n"
    );

    let client = Client::new(&sim);
    // The tool declares a queue it created as its own through the C ABI
    // (kreplay_hsa_mark_tool_queue); a pointer that is no intercepted queue is refused.
    type UseQueueFn = unsafe extern "C" fn(*mut std::ffi::c_void) -> i32;
    // SAFETY: the signature in tool.cpp.
    let use_queue = unsafe { *tool.get::<UseQueueFn>(b"hsa_cpp_tool_use_queue").unwrap() };
    let tq = client.queue(sim.gpu_agents()[0]);
    // SAFETY: the pointers are only compared with the intercepted queues' addresses.
    unsafe {
        assert_eq!(use_queue(tq.cast()), 0, "KREPLAY_STATUS_OK");
        assert_eq!(
            use_queue(std::ptr::null_mut()),
            1,
            "KREPLAY_STATUS_NULL_POINTER"
        );
        let mut not_a_queue = 0u64;
        assert_eq!(
            use_queue((&mut not_a_queue as *mut u64).cast()),
            19,
            "KREPLAY_STATUS_NOT_FOUND"
        );
    }
    let (value, inputs, completion) = run_rmw_dispatch(&sim, &client, 5);
    assert_eq!(inputs, vec![5; 4], "four passes, each on the same input");
    assert_eq!(value, rmw(5), "memory equals one execution");
    assert_eq!(completion, 0, "the completion signal fired exactly once");

    let text = report(&tool);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(
        lines[0], "tool init_calls=1 runtime_version=7 fini_calls=0 passes=4",
        "{text}"
    );
    let groups = "SQ_WAVES,SQ_INSTS_VALU,TCC_HIT,TCC_MISS";
    assert!(
        lines[1].starts_with("dispatch id=")
            && lines[1].ends_with(&format!(
                "outcome=replayed executed_passes=4 programmed={groups} read_out={groups}"
            )),
        "{text}"
    );

    kernel_replay.on_unload();
    assert!(
        report(&tool).starts_with("tool init_calls=1 runtime_version=7 fini_calls=1 "),
        "OnUnload called the tool's fini"
    );
}
