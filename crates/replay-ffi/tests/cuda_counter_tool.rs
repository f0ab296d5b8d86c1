//! `examples/cuda-counter-tool` (SPEC §10, §12.1) compiles against `include/kernel_replay_cuda.h`
//! and links `libkernel_replay` as a user builds it; with the `cuda` feature the library
//! exports every function the tool calls. It cannot run without a GPU: the collection is
//! tested over a fake of CUPTI in `replay-cuda/tests/counters.rs`, and the entries' argument
//! checks below (no GPU needed: they fail before CUPTI is loaded).

use std::path::{Path, PathBuf};
use std::process::Command;

fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let deps = exe.parent().expect("the test executable is in a directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        if dir.join("libkernel_replay.so").exists() {
            return dir.to_path_buf();
        }
    }
    panic!("libkernel_replay.so was not found in {}", deps.display());
}

#[test]
fn the_cuda_counter_tool_example_builds_against_the_library() {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned());
    if !Command::new(&cxx)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        assert!(
            std::env::var("KREPLAY_REQUIRE_CXX").as_deref() != Ok("1"),
            "KREPLAY_REQUIRE_CXX=1 is set but no C++ compiler (`{cxx}`) runs"
        );
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: no C++ compiler (`{cxx}`); the CUDA counter tool example was not built"
        );
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lib = library_dir();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay-ffi-cuda-counter-tool");
    std::fs::create_dir_all(&dir).unwrap();
    let so = dir.join("libcuda-counter-tool.so");
    let mut cmd = Command::new(&cxx);
    cmd.args(["-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror"])
        .args(["-shared", "-fPIC", "-fvisibility=hidden", "-I"])
        .arg(root.join("include"))
        .arg(root.join("examples/cuda-counter-tool/tool.cpp"))
        .arg("-L")
        .arg(&lib)
        .arg("-lkernel_replay")
        .arg(format!("-Wl,-rpath,{}", lib.display()));
    // With the `cuda` feature every symbol the tool uses must resolve in the library.
    if cfg!(feature = "cuda") {
        cmd.arg("-Wl,--no-undefined");
    }
    let out = cmd.arg("-o").arg(&so).output().unwrap();
    assert!(
        out.status.success(),
        "building the CUDA counter tool failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output();
    if let Ok(o) = nm {
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("kreplay_tool_init"), "{text}");
    }
}

#[cfg(feature = "cuda")]
mod entries {
    use std::ffi::CStr;

    use kernel_replay::counters::*;
    use kernel_replay::entry::kreplay_last_error;
    use kernel_replay::sys::*;

    fn last_error() -> String {
        // SAFETY: the library's thread-local, NUL-terminated message.
        unsafe { CStr::from_ptr(kreplay_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn bad_input_is_a_clear_status_and_a_stale_handle_is_invalid() {
        let mut h = 0u64;
        // SAFETY: null metrics are refused before they are read.
        let s = unsafe { kreplay_cuda_counters_create(std::ptr::null(), 1, 2, &mut h) };
        assert_eq!(s, KREPLAY_STATUS_NULL_POINTER, "{}", last_error());
        let names = [c"dram__bytes_read.sum".as_ptr()];
        // SAFETY: a count of 0 is refused before the array is read.
        let s = unsafe { kreplay_cuda_counters_create(names.as_ptr(), 0, 2, &mut h) };
        assert_eq!(s, KREPLAY_STATUS_BAD_ARGUMENT, "{}", last_error());
        // SAFETY: a valid array of one name, a null out pointer (refused).
        let s = unsafe { kreplay_cuda_counters_create(names.as_ptr(), 1, 2, std::ptr::null_mut()) };
        assert_eq!(s, KREPLAY_STATUS_NULL_POINTER);
        let mut n = 0u32;
        // SAFETY: a writable out pointer; the handle is made up.
        let s = unsafe { kreplay_cuda_counters_passes(0x1234, &mut n) };
        assert_eq!(s, KREPLAY_STATUS_INVALID_HANDLE, "{}", last_error());
        assert!(
            last_error().contains("counter collection"),
            "{}",
            last_error()
        );
        assert_eq!(
            kreplay_cuda_counters_destroy(0x1234),
            KREPLAY_STATUS_INVALID_HANDLE
        );
        // Without CUPTI (CI) the list cannot be compiled: UNSUPPORTED naming the library; with
        // it, an unknown metric is a BAD_ARGUMENT naming the metric.
        let bad = [c"no__such_metric.sum".as_ptr()];
        // SAFETY: a valid array of one name and a writable out pointer.
        let s = unsafe { kreplay_cuda_counters_create(bad.as_ptr(), 1, 2, &mut h) };
        let e = last_error();
        match s {
            KREPLAY_STATUS_UNSUPPORTED => assert!(
                ["libcupti", "libnvperf", "CUDA"]
                    .iter()
                    .any(|l| e.contains(l)),
                "{e}"
            ),
            KREPLAY_STATUS_BAD_ARGUMENT => assert!(e.contains("no__such_metric.sum"), "{e}"),
            other => panic!("status {other}: {e}"),
        }
    }

    #[test]
    fn a_mixed_list_of_range_and_sass_metrics_is_one_collection() {
        // Range-profiler and SASS metrics in one list, one of them inside a comma list. The
        // SASS metric is one an H200 has (GH100's SASS Metrics API has no per-opcode thread
        // counts).
        let names = [
            c"dram__bytes_read.sum".as_ptr(),
            c"smsp__inst_executed.sum,smsp__sass_inst_executed.sum".as_ptr(),
        ];
        let mut h = 0u64;
        // SAFETY: a valid array of two names and a writable out pointer.
        let s = unsafe { kreplay_cuda_counters_create(names.as_ptr(), 2, 1, &mut h) };
        let e = last_error();
        match s {
            // CI: no CUPTI, so nothing is compiled; the list itself was not refused.
            KREPLAY_STATUS_UNSUPPORTED => assert!(
                ["libcupti", "libnvperf", "CUDA"]
                    .iter()
                    .any(|l| e.contains(l)),
                "{e}"
            ),
            // A GPU: the range group and the SASS pass of their own.
            KREPLAY_STATUS_OK => {
                let mut n = 0u32;
                // SAFETY: a writable out pointer; the handle was just made.
                let s = unsafe { kreplay_cuda_counters_passes(h, &mut n) };
                assert_eq!(s, KREPLAY_STATUS_OK);
                assert!(n >= 2, "{n}");
                assert_eq!(kreplay_cuda_counters_destroy(h), KREPLAY_STATUS_OK);
            }
            other => panic!("status {other}: {e}"),
        }
    }
}
