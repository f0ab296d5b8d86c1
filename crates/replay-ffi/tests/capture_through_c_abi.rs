//! `kreplay_request_capture` (SPEC §13) as a C tool calls it: inside PASS ENTER it captures that
//! pass of a dispatch on the simulated GPU into a folder `replay-capture` reads back (inputs
//! restored for the pass, outputs of one execution), which `kreplay_capture_result` reports as
//! written; outside PASS ENTER it is `CONTEXT_ERROR`.
//!
//! One test: the library is process-wide and shutdown is final.

#![cfg(feature = "sim")]

use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::OnceLock;

use kernel_replay::entry::*;
use kernel_replay::sim::*;
use kernel_replay::sys::*;

fn dir() -> &'static CString {
    static DIR: OnceLock<CString> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("kreplay-ffi-capture-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        CString::new(d.to_str().unwrap()).unwrap()
    })
}

static STATUS_IN_PASS_ENTER: std::sync::Mutex<Vec<kreplay_status_t>> =
    std::sync::Mutex::new(Vec::new());
static STATUS_IN_PASS_EXIT: std::sync::Mutex<Vec<kreplay_status_t>> =
    std::sync::Mutex::new(Vec::new());

unsafe extern "C" fn three(_: *const kreplay_dispatch_info_t, _: kreplay_user_data_t) -> u64 {
    3
}

unsafe extern "C" fn tool(
    op: kreplay_operation_t,
    phase: kreplay_phase_t,
    p: *mut kreplay_replay_payload_t,
    _: *mut kreplay_user_data_t,
    _: *mut c_void,
) {
    // SAFETY: the library passes a valid payload for the call.
    let p = unsafe { &mut *p };
    match (op, phase) {
        (KREPLAY_OPERATION_CONFIG, KREPLAY_PHASE_ENTER) => p.replay_pass_count = Some(three),
        (KREPLAY_OPERATION_PASS, KREPLAY_PHASE_ENTER) if p.current_pass == 1 => {
            // SAFETY: a NUL-terminated string that outlives the call.
            let s = unsafe { kreplay_request_capture(dir().as_ptr(), 0) };
            STATUS_IN_PASS_ENTER.lock().unwrap().push(s);
        }
        (KREPLAY_OPERATION_PASS, KREPLAY_PHASE_EXIT) if p.current_pass == 0 => {
            // SAFETY: as above.
            let s = unsafe { kreplay_request_capture(dir().as_ptr(), 0) };
            STATUS_IN_PASS_EXIT.lock().unwrap().push(s);
        }
        _ => {}
    }
}

fn ok(s: kreplay_status_t, what: &str) {
    assert_eq!(s, KREPLAY_STATUS_OK, "{what}");
}

#[test]
fn a_c_tool_captures_one_pass_and_is_refused_elsewhere() {
    // SAFETY: every call below gets valid pointers to locals and NUL-terminated strings that
    // outlive it; the zeroed result struct is plain integers.
    unsafe {
        assert_eq!(
            kreplay_request_capture(dir().as_ptr(), 0),
            KREPLAY_STATUS_CONTEXT_ERROR
        );
        assert_eq!(
            kreplay_request_capture(ptr::null(), 0),
            KREPLAY_STATUS_NULL_POINTER
        );
        let mut owner = kreplay_context_t::default();
        ok(kreplay_context_create(&mut owner), "context");
        ok(
            kreplay_configure_replay(
                owner,
                KREPLAY_SUBSCRIBE_CONFIG | KREPLAY_SUBSCRIBE_PASS,
                Some(tool),
                ptr::null_mut(),
            ),
            "configure",
        );
        ok(kreplay_context_start(owner), "start");
        let mut sim = kreplay_sim_t::default();
        ok(kreplay_sim_create(1, &mut sim), "sim");
        let mut counter = 0u64;
        ok(
            kreplay_sim_alloc(sim, 0, 8, KREPLAY_SIM_MEMORY_DEVICE_COARSE, &mut counter),
            "alloc",
        );
        let name = CString::new("cap.co").unwrap();
        let k = CString::new("increment_u64").unwrap();
        let kernels = [k.as_ptr()];
        let desc = kreplay_sim_module_desc_t {
            size: std::mem::size_of::<kreplay_sim_module_desc_t>() as u64,
            name: name.as_ptr(),
            variables: ptr::null(),
            variable_count: 0,
            kernels: kernels.as_ptr(),
            kernel_count: 1,
        };
        let mut module = kreplay_sim_module_t::default();
        ok(
            kreplay_sim_module_load(sim, 0, &desc, &mut module),
            "module",
        );
        let mut kernel = kreplay_sim_kernel_t::default();
        ok(
            kreplay_sim_module_kernel(module, k.as_ptr(), &mut kernel),
            "kernel",
        );
        let args = [counter, 5u64];
        let mut d = kreplay_sim_dispatch_t::default();
        ok(
            kreplay_sim_dispatch(
                sim,
                0,
                0,
                kernel,
                args.as_ptr().cast(),
                16,
                kreplay_dim3_t { x: 1, y: 1, z: 1 },
                &mut d,
            ),
            "dispatch",
        );
        let mut r: kreplay_sim_result_t = std::mem::zeroed();
        r.size = std::mem::size_of::<kreplay_sim_result_t>() as u64;
        ok(kreplay_sim_wait(d, &mut r), "wait");
        assert_eq!(
            (r.outcome, r.executed_passes),
            (KREPLAY_OUTCOME_REPLAYED, 3)
        );
        let mut after = [0u8; 8];
        ok(
            kreplay_sim_read(sim, counter, after.as_mut_ptr().cast(), 8),
            "read",
        );
        assert_eq!(u64::from_le_bytes(after), 5, "one execution");
        let mut got: kreplay_capture_result_t = std::mem::zeroed();
        got.size = std::mem::size_of::<kreplay_capture_result_t>() as u64;
        ok(kreplay_capture_result(dir().as_ptr(), &mut got), "result");
        assert_eq!(
            (got.state, got.pass, got.dispatch_id),
            (KREPLAY_CAPTURE_WRITTEN, 1, r.dispatch_id)
        );
        ok(kreplay_sim_destroy(sim), "destroy");
        ok(kreplay_shutdown(), "shutdown");
    }
    assert_eq!(
        *STATUS_IN_PASS_ENTER.lock().unwrap(),
        vec![KREPLAY_STATUS_OK]
    );
    assert_eq!(
        *STATUS_IN_PASS_EXIT.lock().unwrap(),
        vec![KREPLAY_STATUS_CONTEXT_ERROR]
    );
    let path = std::path::PathBuf::from(dir().to_str().unwrap());
    let c = replay_capture::read(&path).expect("the capture folder");
    assert_eq!(c.manifest.pass, 1);
    assert_eq!(c.manifest.kernel.name, "increment_u64");
    assert_eq!(c.manifest.kernel.module, "cap.co");
    let i = c
        .manifest
        .regions
        .iter()
        .position(|r| r.base == counter_base(&c))
        .expect("the counter is captured");
    assert_eq!(c.data[i].0, 0u64.to_le_bytes(), "restored input");
    assert_eq!(c.data[i].1, 5u64.to_le_bytes(), "one execution's output");
    let _ = std::fs::remove_dir_all(&path);
}

/// The region the argument block's first word points into.
fn counter_base(c: &replay_capture::LoadedCapture) -> u64 {
    let p = &c.manifest.arguments.pointers[0];
    assert_eq!(p.offset, 0);
    c.manifest.regions[p.region].base
}
