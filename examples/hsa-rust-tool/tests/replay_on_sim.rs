//! `libhsa_rust_tool.so` run as `HSA_TOOLS_LIB=libhsa_rust_tool.so ./app` runs it, on the
//! simulated HSA runtime: the library cargo built is opened with `dlopen`, its own `OnLoad`
//! gets the sim's API table (no `KREPLAY_HSA_TOOL`: `OnLoad` finds the tool's
//! `kreplay_tool_init` in the same object), then a HIP-like client dispatches a
//! read-modify-write kernel through the wrapped table. Checked: the tool was initialised with
//! the runtime version, one pass ran per configured counter group and each saw the same input,
//! the completion signal fired once, memory equals one execution, and `OnUnload` reached the
//! tool's fini.
//!
//! `OnLoad` state is process-wide, so this file holds one test (its own process).

// Not every shared helper is used by every test file.
#[allow(dead_code)]
mod common;

use std::ffi::c_char;
use std::path::Path;

use common::*;
use replay_hsa_sim::{SimConfig, SimHsa};

const LIB: &str = "libhsa_rust_tool.so";

type ReportFn = unsafe extern "C" fn(*mut c_char, usize) -> usize;

/// The tool's own record (`hsa_rust_tool_report`), as JSON.
fn report(tool: &ToolLibrary) -> serde_json::Value {
    // SAFETY: the signature in src/lib.rs.
    let f = unsafe { *tool.lib.get::<ReportFn>(b"hsa_rust_tool_report").unwrap() };
    // SAFETY: asking for the length with no buffer.
    let n = unsafe { f(std::ptr::null_mut(), 0) };
    assert!(n > 0, "hsa_rust_tool_report failed");
    let mut buf = vec![0u8; n + 1];
    // SAFETY: a buffer of n + 1 bytes.
    assert_eq!(unsafe { f(buf.as_mut_ptr().cast(), buf.len()) }, n);
    serde_json::from_slice(&buf[..n]).unwrap()
}

fn same_file(a: &str, b: &Path) -> bool {
    Path::new(a).canonicalize().ok() == b.canonicalize().ok()
}

#[test]
fn the_rust_tool_replays_a_dispatch_once_per_counter_group_on_the_simulated_runtime() {
    // SAFETY: (set_var, remove_var) before any thread of this process reads the environment
    // (the only test of this binary, and the library is not loaded yet).
    unsafe {
        // The variable would take precedence over the built-in tool (tool_choice.rs).
        std::env::remove_var("KREPLAY_HSA_TOOL");
        std::env::set_var("HSA_RUST_TOOL_GROUPS", "SQ_WAVES,SQ_INSTS_VALU,TCC_HIT");
    }
    let path = library_dir(LIB).join(LIB);
    let tool = ToolLibrary::open(&path);
    assert_eq!(
        report(&tool)["init_calls"],
        0,
        "loading alone does not initialise the tool"
    );

    let mut sim = SimHsa::new(SimConfig::default());
    assert!(tool.on_load(&mut sim, 7), "{}", tool.state());
    let state = tool.state();
    assert_eq!(state["queues_intercepted"], true, "{state}");
    assert_eq!(state["tool"]["init_status"], 0, "{state}");
    assert!(
        same_file(state["tool"]["path"].as_str().unwrap(), &path),
        "the attached tool is the library itself: {state}"
    );
    let r = report(&tool);
    assert_eq!(r["init_calls"], 1, "{r}");
    assert_eq!(r["runtime_version"], 7, "{r}");
    let groups = serde_json::json!(["SQ_WAVES", "SQ_INSTS_VALU", "TCC_HIT"]);
    assert_eq!(r["groups"], groups, "{r}");

    let client = Client::new(&sim);
    let (value, inputs, completion) = run_rmw_dispatch(&sim, &client, 5);
    assert_eq!(inputs, vec![5; 3], "three passes, each on the same input");
    assert_eq!(value, rmw(5), "memory equals one execution");
    assert_eq!(completion, 0, "the completion signal fired exactly once");

    let r = report(&tool);
    let d = &r["dispatches"];
    assert_eq!(d.as_array().map(Vec::len), Some(1), "{r}");
    assert_eq!(d[0]["outcome"], "replayed", "{r}");
    assert_eq!(d[0]["reason"], "none", "{r}");
    assert_eq!(d[0]["executed_passes"], 3, "{r}");
    assert_eq!(
        d[0]["programmed"], groups,
        "PASS ENTER, one group each: {r}"
    );
    assert_eq!(d[0]["read_out"], groups, "PASS EXIT, one group each: {r}");

    assert_eq!(r["fini_calls"], 0);
    tool.on_unload();
    assert_eq!(
        report(&tool)["fini_calls"],
        1,
        "OnUnload called the tool's fini"
    );
}
