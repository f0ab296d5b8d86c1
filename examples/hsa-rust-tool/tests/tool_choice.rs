//! `KREPLAY_HSA_TOOL` takes precedence over the tool built into the library `HSA_TOOLS_LIB`
//! names: with the variable set, `OnLoad` of `libhsa_rust_tool.so` attaches the library the
//! variable names (here one that does not exist, so the attach fails and says so) and never
//! calls the built-in `kreplay_tool_init`. Replay then stays unconfigured: the wrappers are
//! installed, and a dispatch runs once, untouched.
//!
//! `OnLoad` state is process-wide, so this file holds one test (its own process).

// Not every shared helper is used by every test file.
#[allow(dead_code)]
mod common;

use std::ffi::c_char;

use common::*;
use replay_hsa_sim::{SimConfig, SimHsa};

const LIB: &str = "libhsa_rust_tool.so";

type ReportFn = unsafe extern "C" fn(*mut c_char, usize) -> usize;

fn report(tool: &ToolLibrary) -> serde_json::Value {
    // SAFETY: the signature in src/lib.rs.
    let f = unsafe { *tool.lib.get::<ReportFn>(b"hsa_rust_tool_report").unwrap() };
    let mut buf = vec![0u8; 64 << 10];
    // SAFETY: a buffer of buf.len() bytes.
    let n = unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
    serde_json::from_slice(&buf[..n]).unwrap()
}

#[test]
fn kreplay_hsa_tool_wins_over_the_built_in_tool() {
    let missing = std::env::temp_dir().join("kreplay-no-such-tool/libnothing.so");
    // SAFETY: (set_var) before any thread of this process reads the environment (the only
    // test of this binary, and the library is not loaded yet).
    unsafe { std::env::set_var("KREPLAY_HSA_TOOL", &missing) };
    let tool = ToolLibrary::open(&library_dir(LIB).join(LIB));
    let mut sim = SimHsa::new(SimConfig::default());
    assert!(
        tool.on_load(&mut sim, 7),
        "a tool that fails to load does not undo the install: {}",
        tool.state()
    );
    let state = tool.state();
    assert_eq!(state["queues_intercepted"], true, "{state}");
    assert_eq!(
        state["tool"]["path"],
        missing.to_str().unwrap(),
        "the variable's library was the one attached: {state}"
    );
    assert!(state["tool"]["init_status"].is_null(), "{state}");
    assert!(
        state["tool"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("libnothing.so")),
        "the error names the library (the loader's reason): {state}"
    );
    assert_eq!(
        report(&tool)["init_calls"],
        0,
        "the built-in kreplay_tool_init was not called"
    );

    let client = Client::new(&sim);
    let (value, inputs, completion) = run_rmw_dispatch(&sim, &client, 5);
    assert_eq!(inputs, vec![5], "no tool configured replay: one execution");
    assert_eq!(value, rmw(5));
    assert_eq!(completion, 0);
    assert!(report(&tool)["dispatches"].as_array().unwrap().is_empty());
}
