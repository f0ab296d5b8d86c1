//! # hsa-rust-tool
//!
//! A Rust replay tool for AMD GPUs that ships as its own HSA tool library:
//!
//! ```sh
//! cargo build --release -p hsa-rust-tool
//! HSA_TOOLS_LIB=$PWD/target/release/libhsa_rust_tool.so ./app
//! ```
//!
//! The cdylib links kernel-replay statically (`replay-ffi` as an rlib, with its `hsa`
//! feature), so it exports `OnLoad` / `OnUnload` itself and the runtime needs no other
//! library. [`kernel_replay::export_c_abi!`]`(hsa_tool = init, hsa_tool_fini = fini)` defines
//! its `kreplay_tool_init` / `kreplay_tool_fini`: `OnLoad` finds the former in this same
//! object (no `KREPLAY_HSA_TOOL` needed) and calls [`init`] after installing its wrappers;
//! `OnUnload` calls [`fini`].
//!
//! What it does, profiler-style: one replay pass per counter group (`HSA_RUST_TOOL_GROUPS`,
//! comma-separated; default [`DEFAULT_GROUPS`]). PASS ENTER is where a real tool would program
//! that group, PASS EXIT where it would read it out; this one records which group each pass of
//! each dispatch got, and the dispatch's outcome. [`fini`] prints a summary to stderr;
//! `hsa_rust_tool_report` hands the same record to a test as JSON.

use std::collections::BTreeMap;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use replay_core::{Operation, Phase, ReplayPayload, ReplayTool, Subscription, UserData};
use serde::Serialize;

kernel_replay::export_c_abi!(hsa_tool = init, hsa_tool_fini = fini);

/// The variable listing the counter groups, one replay pass each.
pub const GROUPS_ENV: &str = "HSA_RUST_TOOL_GROUPS";
/// The groups when [`GROUPS_ENV`] is unset (rocprof counter names).
pub const DEFAULT_GROUPS: &[&str] = &["SQ_WAVES", "SQ_INSTS_VALU", "TCC_HIT", "TCC_MISS"];

/// One dispatch as the tool saw it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DispatchRecord {
    /// The id kernel-replay reserved for it.
    pub dispatch_id: u64,
    /// The kernel's name.
    pub kernel: String,
    /// The group programmed in each PASS ENTER, in order.
    pub programmed: Vec<String>,
    /// The group read out in each PASS EXIT, in order.
    pub read_out: Vec<String>,
    /// The outcome (`replayed`, `declined`, ...), from CONFIG EXIT.
    pub outcome: String,
    /// Why, when not replayed in full.
    pub reason: String,
    /// Passes that ran, from CONFIG EXIT.
    pub executed_passes: u32,
}

/// What the tool observed, for the summary and for tests.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// Calls of [`init`] (the runtime calls it once).
    pub init_calls: u32,
    /// The runtime version `OnLoad` passed on.
    pub runtime_version: u64,
    /// The counter groups, one pass each.
    pub groups: Vec<String>,
    /// Finished dispatches (CONFIG EXIT seen), in order.
    pub dispatches: Vec<DispatchRecord>,
    /// Calls of [`fini`].
    pub fini_calls: u32,
}

/// The tool: its groups, and what it saw.
#[derive(Debug)]
struct CounterTool {
    groups: Vec<String>,
    /// Dispatches between CONFIG ENTER and EXIT, by id (windows on several agents may overlap).
    open: Mutex<BTreeMap<u64, DispatchRecord>>,
}

impl ReplayTool for CounterTool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        let info = p.dispatch_info;
        let id = info.dispatch_id.0;
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                let n = self.groups.len() as u64;
                p.replay_pass_count = Some(Arc::new(move |_, _| n));
                self.open.lock().insert(
                    id,
                    DispatchRecord {
                        dispatch_id: id,
                        kernel: info.kernel_name.to_string(),
                        ..DispatchRecord::default()
                    },
                );
            }
            (Operation::Pass, Phase::Enter) | (Operation::Pass, Phase::Exit) => {
                let Some(group) = self.groups.get(p.current_pass as usize) else {
                    return;
                };
                if let Some(r) = self.open.lock().get_mut(&id) {
                    // A real tool programs the group here (ENTER) and reads it out (EXIT).
                    let list = if phase == Phase::Enter {
                        &mut r.programmed
                    } else {
                        &mut r.read_out
                    };
                    list.push(group.clone());
                }
            }
            (Operation::Config, Phase::Exit) => {
                let Some(mut r) = self.open.lock().remove(&id) else {
                    return;
                };
                if let Some(o) = p.outcome {
                    r.outcome = o.outcome.as_str().to_owned();
                    r.reason = o.reason.as_str().to_owned();
                    r.executed_passes = o.executed_passes;
                }
                report().lock().dispatches.push(r);
            }
        }
    }
}

fn report() -> &'static Mutex<Report> {
    static REPORT: OnceLock<Mutex<Report>> = OnceLock::new();
    REPORT.get_or_init(|| Mutex::new(Report::default()))
}

/// The counter groups from [`GROUPS_ENV`] (default [`DEFAULT_GROUPS`]).
fn groups_from_env() -> Result<Vec<String>, String> {
    let Some(v) = std::env::var_os(GROUPS_ENV) else {
        return Ok(DEFAULT_GROUPS.iter().map(|g| (*g).to_owned()).collect());
    };
    let v = v
        .into_string()
        .map_err(|_| format!("{GROUPS_ENV} is not UTF-8"))?;
    let groups: Vec<String> = v
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_owned)
        .collect();
    if groups.is_empty() {
        return Err(format!("{GROUPS_ENV}={v:?} names no counter group"));
    }
    Ok(groups)
}

/// The tool's initialisation, called once by `OnLoad` (through the `kreplay_tool_init` that
/// `export_c_abi!` defines) after kernel-replay's wrappers are installed: configures and
/// starts the process's replay service with the counter tool. An `Err` is logged by
/// kernel-replay and leaves replay unconfigured; the application runs untouched.
pub fn init(runtime_version: u64) -> Result<(), String> {
    let groups = groups_from_env()?;
    {
        let mut r = report().lock();
        r.init_calls += 1;
        r.runtime_version = runtime_version;
        r.groups = groups.clone();
    }
    // The service of this shared object (kernel_replay::service(), not
    // ReplayService::global()): the one `OnLoad` gave the HSA backend.
    let service = kernel_replay::service();
    let contexts = kernel_replay::contexts().ok_or("kernel-replay was shut down")?;
    let ctx = contexts.create_context();
    contexts.activate(ctx).map_err(|e| e.to_string())?;
    let tool = Arc::new(CounterTool {
        groups: groups.clone(),
        open: Mutex::new(BTreeMap::new()),
    });
    service
        .configure(ctx, Subscription::CONFIG | Subscription::PASS, tool)
        .map_err(|e| e.to_string())?;
    service.start().map_err(|e| e.to_string())?;
    log::info!(
        "[hsa-rust-tool] runtime {runtime_version}: one replay pass per counter group: {}",
        groups.join(", ")
    );
    Ok(())
}

/// The tool's exit, called by `OnUnload`: prints what it saw and the run summary to stderr.
pub fn fini() {
    let text = {
        let mut r = report().lock();
        r.fini_calls += 1;
        let mut text = String::new();
        for d in &r.dispatches {
            text += &format!(
                "[hsa-rust-tool] dispatch={} kernel={} outcome={} passes={} groups={}\n",
                d.dispatch_id,
                d.kernel,
                d.outcome,
                d.executed_passes,
                d.read_out.join(",")
            );
        }
        text
    };
    eprint!("{text}");
    eprintln!("[hsa-rust-tool] {}", kernel_replay::service().summary());
}

/// The [`Report`] as JSON.
pub fn report_json() -> String {
    serde_json::to_string(&*report().lock()).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// The [`Report`] as JSON, for tests that load this library with `dlopen`: copies at most
/// `size - 1` bytes and a NUL into `buffer` (nothing when it is NULL or `size` is 0) and
/// returns the JSON's length, like `snprintf`. Returns 0 if anything panicked.
///
/// # Safety
///
/// 1. `buffer` is NULL or valid for writes of `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn hsa_rust_tool_report(buffer: *mut c_char, size: usize) -> usize {
    catch_unwind(AssertUnwindSafe(|| {
        let json = report_json();
        if !buffer.is_null() && size > 0 {
            let n = json.len().min(size - 1);
            // SAFETY: `buffer` holds `size` > `n` writable bytes (caller, item 1).
            unsafe {
                std::ptr::copy_nonoverlapping(json.as_ptr().cast::<c_char>(), buffer, n);
                buffer.add(n).write(0);
            }
        }
        json.len()
    }))
    .unwrap_or(0)
}
