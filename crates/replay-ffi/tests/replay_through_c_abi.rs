//! Full replays driven through the C ABI: the tool is a set of `extern "C"` functions
//! configured with `kreplay_configure_replay`, exactly as a C tool's would be, and a fake
//! synchronous agent submits dispatches through `kernel_replay::service()`, so every step of
//! the window is deterministic (the C and C++ tests drive full replays on the simulator through
//! `kreplay_sim_*`). Its pass submission stands in for the participants, which consult
//! `kreplay_context_participates` before contributing.
//!
//! Checked: payload fields per phase, `user_data` threading (SPEC §3), the pass plan from C
//! callbacks (fixed, clamped 2^63, open-ended, continue replaced or removed in PASS EXIT,
//! negative continue), toggles and what participants see (SPEC §5), calls refused inside a
//! callback, tool work and the outcome sink, outcome structs and JSON, the summary, destroying
//! the owner, shutdown.
//!
//! One test: the library is process-wide and shutdown is final.
//!
//! Needs the simulated GPU through the C ABI (feature `sim`, on by default).

#![cfg(feature = "sim")]

use std::ffi::{c_char, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use kernel_replay::entry::*;
use kernel_replay::sys::*;
use parking_lot::Mutex;
use replay_core::{
    AgentId, Dim3, Dispatch, DispatchInfo, KernelId, KernelKey, Origin, QueueId, SubmissionKind,
};
use replay_mock::double::InstantAgent;
use replay_mock::instant::InstantSnapshotter;

// ----- What the tool and the participants saw ----------------------------------------------

#[derive(Debug, Clone, PartialEq)]
struct Call {
    op: u32,
    phase: u32,
    pass: u32,
    total: u32,
    ud: u64,
}

#[derive(Debug, Clone, PartialEq)]
struct Seen {
    pass: Option<u32>,
    counters: i32,
    counters_override: i32,
    any_override: i32,
}

#[derive(Debug, Clone, PartialEq)]
struct OutcomeSeen {
    dispatch_id: u64,
    kernel: String,
    outcome: u32,
    reason: u32,
    requested: u64,
    executed: u32,
    gpu_seconds: Vec<f64>,
    restored: Vec<u64>,
    compared: Vec<u64>,
    reentrancy: u32,
    json: String,
    /// `kreplay_outcome_phases`, in `kreplay_phases_t`'s order from `window`.
    phases: [f64; 11],
    /// `kreplay_outcome_graph_node`: `(graph, node, launch, serialized)`; `None` when it
    /// answered NOT_FOUND.
    graph: Option<(u64, u32, u64, u32)>,
}

#[derive(Debug, Default)]
struct Log {
    calls: Vec<Call>,
    pass_count_ud: Vec<u64>,
    continues: Vec<(u32, u32, u64)>,
    toggles: Vec<(&'static str, kreplay_status_t)>,
    seen: Vec<Seen>,
    config_exits: Vec<OutcomeSeen>,
    sink: Vec<OutcomeSeen>,
    /// An outcome pointer kept past its callback.
    stale_outcome: usize,
    /// The continue callback shown in PASS EXIT.
    shown_continue: Vec<Option<usize>>,
}

static LOG: Mutex<Log> = Mutex::new(Log {
    calls: Vec::new(),
    pass_count_ud: Vec::new(),
    continues: Vec::new(),
    toggles: Vec::new(),
    seen: Vec::new(),
    config_exits: Vec::new(),
    sink: Vec::new(),
    stale_outcome: 0,
    shown_continue: Vec::new(),
});

/// What the tool does with the next dispatch.
static SCENARIO: AtomicU32 = AtomicU32::new(0);
const FIXED_THREE: u32 = 1;
const HUGE: u32 = 2;
const NEGATIVE_CONTINUE: u32 = 3;
const OPEN_REPLACED: u32 = 4;
const OPEN_REMOVED: u32 = 5;
const NO_COUNT: u32 = 6;
const ZERO_NO_CONTINUE: u32 = 7;

/// The handles the tool and the agent use.
#[derive(Debug, Clone, Copy)]
struct Handles {
    owner: kreplay_context_t,
    counters: kreplay_context_t,
    trace: kreplay_context_t,
    late: kreplay_context_t,
    stale: kreplay_context_t,
}

static HANDLES: OnceLock<Handles> = OnceLock::new();
static AGENT: OnceLock<InstantAgent> = OnceLock::new();
/// Restores report 64 bytes written back and 32 compared, so the outcome's per-pass arrays
/// can be checked through the C ABI.
static SNAPSHOTTER: InstantSnapshotter = InstantSnapshotter {
    footprint_bytes: 0,
    restored_bytes: 64,
    compared_bytes: 32,
    sync_fails: false,
};
static TOOL_DATA: u64 = 0x5eed;

fn handles() -> Handles {
    *HANDLES.get().expect("set up")
}

fn status_name(s: kreplay_status_t) -> String {
    // SAFETY: kreplay_status_string returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(kreplay_status_string(s)) }
        .to_string_lossy()
        .into_owned()
}

fn last_error() -> String {
    // SAFETY: kreplay_last_error returns a NUL-terminated string valid until the next call.
    unsafe { CStr::from_ptr(kreplay_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[track_caller]
fn ok(s: kreplay_status_t) {
    assert_eq!(s, KREPLAY_STATUS_OK, "{}: {}", status_name(s), last_error());
}

/// Reads an outcome the library passed in; JSON through the accessor.
///
/// # Safety
///
/// `o` is the live outcome of the running callback.
unsafe fn read_outcome(o: *const kreplay_outcome_t) -> OutcomeSeen {
    // SAFETY: live for the callback (caller).
    let r = unsafe { &*o };
    assert_eq!(r.size as usize, std::mem::size_of::<kreplay_outcome_t>());
    let mut need = 0usize;
    // SAFETY: a NULL buffer with size 0 asks for the size; `need` is writable.
    let s = unsafe { kreplay_outcome_json(o, ptr::null_mut(), 0, &mut need) };
    assert_eq!(s, KREPLAY_STATUS_BUFFER_TOO_SMALL, "{}", last_error());
    let mut buf = vec![0 as c_char; need];
    // SAFETY: `buf` holds `need` bytes.
    ok(unsafe { kreplay_outcome_json(o, buf.as_mut_ptr(), need, &mut need) });
    // SAFETY: the arrays hold their counts of values for the callback (header contract).
    let (secs, restored, compared) = unsafe {
        (
            std::slice::from_raw_parts(r.pass_gpu_seconds, r.pass_gpu_seconds_count as usize),
            std::slice::from_raw_parts(r.pass_restored_bytes, r.pass_restored_bytes_count as usize),
            std::slice::from_raw_parts(r.pass_compared_bytes, r.pass_compared_bytes_count as usize),
        )
    };
    let mut p = kreplay_phases_t {
        size: std::mem::size_of::<kreplay_phases_t>() as u64,
        window: -1.0,
        drain: -1.0,
        plan: -1.0,
        capture: -1.0,
        launch: -1.0,
        wait: -1.0,
        check: -1.0,
        restore: -1.0,
        callbacks: -1.0,
        finish: -1.0,
        config_enter: -1.0,
    };
    // SAFETY: `o` is live (caller); `p` is a local with its size set.
    ok(unsafe { kreplay_outcome_phases(o, &mut p) });
    assert_eq!(p.size as usize, std::mem::size_of::<kreplay_phases_t>());
    let mut g = kreplay_graph_node_t {
        size: std::mem::size_of::<kreplay_graph_node_t>() as u64,
        graph: 0,
        launch: 0,
        node: 0,
        serialized: 0,
    };
    // SAFETY: as above.
    let graph = match unsafe { kreplay_outcome_graph_node(o, &mut g) } {
        KREPLAY_STATUS_OK => Some((g.graph, g.node, g.launch, g.serialized)),
        KREPLAY_STATUS_NOT_FOUND => {
            assert!(
                last_error().contains("not run as a node of a graph"),
                "{}",
                last_error()
            );
            assert_eq!((g.graph, g.node, g.launch), (0, 0, 0), "left untouched");
            None
        }
        s => panic!("kreplay_outcome_graph_node: {s} {}", last_error()),
    };
    OutcomeSeen {
        phases: [
            p.window,
            p.drain,
            p.plan,
            p.capture,
            p.launch,
            p.wait,
            p.check,
            p.restore,
            p.callbacks,
            p.finish,
            p.config_enter,
        ],
        graph,
        dispatch_id: r.dispatch_id,
        // SAFETY: a NUL-terminated string owned by the outcome.
        kernel: unsafe { CStr::from_ptr(r.kernel) }
            .to_string_lossy()
            .into_owned(),
        outcome: r.outcome,
        reason: r.reason,
        requested: r.requested_passes,
        executed: r.executed_passes,
        gpu_seconds: secs.to_vec(),
        restored: restored.to_vec(),
        compared: compared.to_vec(),
        reentrancy: r.reentrancy,
        // SAFETY: the accessor wrote a NUL-terminated string.
        json: unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    }
}

// ----- The C tool ----------------------------------------------------------------------------

unsafe extern "C" fn pass_count_three(
    info: *const kreplay_dispatch_info_t,
    ud: kreplay_user_data_t,
) -> u64 {
    // SAFETY: the library passes a valid dispatch info; the union holds a number.
    let (info, ud) = unsafe { (&*info, ud.value) };
    // SAFETY: a NUL-terminated string owned by the dispatch info.
    assert_eq!(unsafe { CStr::from_ptr(info.kernel_name) }, c"saxpy");
    LOG.lock().pass_count_ud.push(ud);
    3
}

unsafe extern "C" fn pass_count_huge(
    _: *const kreplay_dispatch_info_t,
    _: kreplay_user_data_t,
) -> u64 {
    1 << 63
}

unsafe extern "C" fn pass_count_four(
    _: *const kreplay_dispatch_info_t,
    _: kreplay_user_data_t,
) -> u64 {
    4
}

unsafe extern "C" fn pass_count_zero(
    _: *const kreplay_dispatch_info_t,
    _: kreplay_user_data_t,
) -> u64 {
    0
}

unsafe extern "C" fn continue_negative(
    _: *const kreplay_dispatch_info_t,
    _: u32,
    _: u32,
    _: kreplay_user_data_t,
) -> i32 {
    -1
}

unsafe extern "C" fn continue_yes(
    _: *const kreplay_dispatch_info_t,
    pass: u32,
    total: u32,
    ud: kreplay_user_data_t,
) -> i32 {
    // SAFETY: the union holds a number.
    LOG.lock()
        .continues
        .push((pass, total, unsafe { ud.value }));
    1
}

unsafe extern "C" fn continue_stop(
    _: *const kreplay_dispatch_info_t,
    pass: u32,
    total: u32,
    ud: kreplay_user_data_t,
) -> i32 {
    // SAFETY: the union holds a number.
    LOG.lock()
        .continues
        .push((pass, total, unsafe { ud.value }));
    0
}

fn toggle(name: &'static str, s: kreplay_status_t) {
    LOG.lock().toggles.push((name, s));
}

unsafe extern "C" fn on_replay(
    op: kreplay_operation_t,
    phase: kreplay_phase_t,
    payload: *mut kreplay_replay_payload_t,
    user_data: *mut kreplay_user_data_t,
    data: *mut c_void,
) {
    assert_eq!(data as *const u64, &TOOL_DATA as *const u64);
    // SAFETY: the library passes valid payload and user data for the callback.
    let (p, ud) = unsafe { (&mut *payload, &mut *user_data) };
    // SAFETY: the library initialised the union with a number.
    let ud_in = unsafe { ud.value };
    assert_eq!(
        p.size as usize,
        std::mem::size_of::<kreplay_replay_payload_t>()
    );
    // SAFETY: valid for the callback.
    let info = unsafe { &*p.dispatch_info };
    assert_eq!(
        info.size as usize,
        std::mem::size_of::<kreplay_dispatch_info_t>()
    );
    assert_eq!((info.grid.x, info.workgroup.x), (256, 64));
    assert!(
        p.replay_pass_count.is_none(),
        "the library never shows a pass count"
    );
    assert!(p.replay_start_context.is_some() && p.replay_stop_context.is_some());
    assert_eq!(
        p.outcome.is_null(),
        !(op == KREPLAY_OPERATION_CONFIG && phase == KREPLAY_PHASE_EXIT)
    );
    LOG.lock().calls.push(Call {
        op,
        phase,
        pass: p.current_pass,
        total: p.total_passes,
        ud: ud_in,
    });
    let h = handles();
    let start = p.replay_start_context.unwrap();
    let stop = p.replay_stop_context.unwrap();
    let scenario = SCENARIO.load(Ordering::Relaxed);

    match (op, phase) {
        (KREPLAY_OPERATION_CONFIG, KREPLAY_PHASE_ENTER) => {
            assert_eq!((p.current_pass, p.total_passes), (0, 0));
            ud.value = 100;
            // SAFETY: the library's own toggle.
            toggle("config enter start", unsafe { start(h.counters) });
            // Refused inside a callback.
            // SAFETY: arguments are valid; the call is refused before using them.
            toggle("configure in callback", unsafe {
                kreplay_configure_replay(
                    h.counters,
                    KREPLAY_SUBSCRIBE_CONFIG,
                    Some(on_replay),
                    ptr::null_mut(),
                )
            });
            toggle("shutdown in callback", kreplay_shutdown());
            toggle("destroy in callback", kreplay_context_destroy(h.late));
            // SAFETY: as above.
            toggle("sink in callback", unsafe {
                kreplay_outcome_sink_set(None, ptr::null_mut())
            });
            let (count, cont): (kreplay_pass_count_callback_t, kreplay_continue_callback_t) =
                match scenario {
                    FIXED_THREE => (Some(pass_count_three), None),
                    HUGE => (Some(pass_count_huge), None),
                    NEGATIVE_CONTINUE => (Some(pass_count_four), Some(continue_negative)),
                    OPEN_REPLACED | OPEN_REMOVED => (Some(pass_count_zero), Some(continue_yes)),
                    NO_COUNT => (None, Some(continue_yes)),
                    ZERO_NO_CONTINUE => (Some(pass_count_zero), None),
                    _ => (None, None),
                };
            p.replay_pass_count = count;
            p.replay_continue = cont;
        }
        (KREPLAY_OPERATION_PASS, KREPLAY_PHASE_ENTER) => {
            ud.value = 1000 + u64::from(p.current_pass);
            if scenario == FIXED_THREE && p.current_pass == 0 {
                // Tool work: a kernel launched from inside a callback runs once, unreplayed.
                let agent = AGENT.get().unwrap();
                let report = kernel_replay::service()
                    .submit(agent, &SNAPSHOTTER, dispatch("tool_kernel"))
                    .unwrap();
                assert!(report.record.is_some());
            }
            if scenario == FIXED_THREE && p.current_pass == 1 {
                // SAFETY: the library's own toggles.
                unsafe {
                    toggle("pass1 stop counters", stop(h.counters));
                    toggle("pass1 stop trace", stop(h.trace));
                    toggle("pass1 start late", start(h.late));
                    toggle("pass1 stop stale", stop(h.stale));
                }
            }
        }
        (KREPLAY_OPERATION_PASS, KREPLAY_PHASE_EXIT) => {
            LOG.lock()
                .shown_continue
                .push(p.replay_continue.map(|f| f as usize));
            // SAFETY: the library's own toggle.
            toggle("pass exit start", unsafe { start(h.counters) });
            if scenario == OPEN_REPLACED && p.current_pass == 2 {
                p.replay_continue = Some(continue_stop);
            }
            if scenario == OPEN_REMOVED && p.current_pass == 1 {
                p.replay_continue = None;
            }
        }
        (KREPLAY_OPERATION_CONFIG, KREPLAY_PHASE_EXIT) => {
            // SAFETY: the live outcome of this callback.
            let seen = unsafe { read_outcome(p.outcome) };
            let mut log = LOG.lock();
            log.config_exits.push(seen);
            log.stale_outcome = p.outcome as usize;
        }
        other => panic!("unexpected operation/phase {other:?}"),
    }
}

unsafe extern "C" fn on_outcome(o: *const kreplay_outcome_t, data: *mut c_void) {
    assert!(data.is_null());
    // SAFETY: the live outcome of this sink call.
    let seen = unsafe { read_outcome(o) };
    LOG.lock().sink.push(seen);
}

// ----- A synchronous agent and an empty snapshotter ----------------------------------------

/// The agent: drains and passes complete at once; pass `i` reports `(i + 1)` ms of GPU time,
/// and each pass submission consults the participants.
fn agent() -> InstantAgent {
    InstantAgent::new(AgentId(0))
        .pass_seconds(0.001)
        .on_submit(|_, pass| {
            if pass.is_some() {
                consult_participants(pass);
            }
        })
}

/// What a participant does before contributing to a pass.
fn consult_participants(pass: Option<u32>) {
    let h = handles();
    let (mut part, mut over, mut any) = (-9, -9, -9);
    // SAFETY: out-pointers are valid locals.
    unsafe {
        ok(kreplay_context_participates(h.counters, &mut part));
        ok(kreplay_context_override(h.counters, &mut over));
        ok(kreplay_has_overrides(&mut any));
    }
    LOG.lock().seen.push(Seen {
        pass,
        counters: part,
        counters_override: over,
        any_override: any,
    });
}

fn dispatch(kernel: &str) -> Dispatch {
    Dispatch {
        info: DispatchInfo::new(
            AgentId(0),
            QueueId(0),
            KernelId(1),
            kernel,
            Dim3::new(256, 1, 1),
            Dim3::new(64, 1, 1),
        ),
        kernel: KernelKey {
            agent: AgentId(0),
            code_object: 1,
            symbol: 1,
        },
        kind: SubmissionKind::KernelDispatch,
        kernarg: Default::default(),
        arg_layout: Default::default(),
        origin: Origin::SubmittingThread,
        handle: 0,
    }
}

fn run(scenario: u32) -> replay_core::OutcomeRecord {
    SCENARIO.store(scenario, Ordering::Relaxed);
    let mut log = LOG.lock();
    *log = Log::default();
    drop(log);
    kernel_replay::service()
        .submit(AGENT.get().unwrap(), &SNAPSHOTTER, dispatch("saxpy"))
        .unwrap()
        .record
        .expect("a candidate has a record")
}

fn passes(log: &Log) -> Vec<(u32, u32, u32, u64)> {
    log.calls
        .iter()
        .filter(|c| c.op == KREPLAY_OPERATION_PASS)
        .map(|c| (c.phase, c.pass, c.total, c.ud))
        .collect()
}

// ----- The test ------------------------------------------------------------------------------

#[test]
fn full_replays_through_the_c_abi() {
    AGENT.get_or_init(agent);
    let mut h = Handles {
        owner: kreplay_context_t::default(),
        counters: kreplay_context_t::default(),
        trace: kreplay_context_t::default(),
        late: kreplay_context_t::default(),
        stale: kreplay_context_t::default(),
    };
    // SAFETY: out-pointers are valid locals; names are NUL-terminated literals; the callback
    // and its data live for the whole process.
    unsafe {
        for c in [
            &mut h.owner,
            &mut h.counters,
            &mut h.trace,
            &mut h.late,
            &mut h.stale,
        ] {
            ok(kreplay_context_create(c));
        }
        ok(kreplay_context_destroy(h.stale));
        ok(kreplay_context_declare_participant(
            h.counters,
            c"counters".as_ptr(),
            KREPLAY_OVERRIDES_HONOURED,
        ));
        ok(kreplay_context_declare_participant(
            h.trace,
            c"thread_trace".as_ptr(),
            KREPLAY_OVERRIDES_UNSUPPORTED,
        ));
        HANDLES.set(h).unwrap();
        for c in [h.owner, h.counters, h.trace] {
            ok(kreplay_context_start(c));
        }
        ok(kreplay_configure_replay(
            h.owner,
            KREPLAY_SUBSCRIBE_CONFIG | KREPLAY_SUBSCRIBE_PASS,
            Some(on_replay),
            &TOOL_DATA as *const u64 as *mut c_void,
        ));
        ok(kreplay_outcome_sink_set(Some(on_outcome), ptr::null_mut()));
        let mut active = 0;
        ok(kreplay_replay_is_active(&mut active));
        assert_eq!(active, 1, "the owner was started before configure");
    }
    let agent = AGENT.get().unwrap();

    // --- A fixed loop of 3: user_data threading, toggles, participants, tool work. ---------
    let rec = run(FIXED_THREE);
    let log = LOG.lock();
    assert_eq!(
        (rec.outcome.as_str(), rec.executed_passes),
        ("replayed", 3),
        "{rec}"
    );
    assert_eq!(
        log.pass_count_ud,
        vec![100],
        "the pass count gets the sequence value"
    );
    assert_eq!(
        passes(&log),
        vec![
            (KREPLAY_PHASE_ENTER, 0, 3, 100),
            (KREPLAY_PHASE_EXIT, 0, 3, 1000),
            (KREPLAY_PHASE_ENTER, 1, 3, 100),
            (KREPLAY_PHASE_EXIT, 1, 3, 1001),
            (KREPLAY_PHASE_ENTER, 2, 3, 100),
            (KREPLAY_PHASE_EXIT, 2, 3, 1002),
        ],
        "each PASS ENTER starts from the sequence value; its EXIT sees what ENTER wrote"
    );
    let config_exit = log.calls.last().unwrap();
    assert_eq!(
        (config_exit.op, config_exit.phase, config_exit.ud),
        (KREPLAY_OPERATION_CONFIG, KREPLAY_PHASE_EXIT, 100)
    );
    let toggles: Vec<_> = log
        .toggles
        .iter()
        .map(|&(n, s)| (n, status_name(s)))
        .collect();
    let expect = |n, s: kreplay_status_t| (n, status_name(s));
    assert_eq!(
        toggles,
        vec![
            expect("config enter start", KREPLAY_STATUS_CONTEXT_ERROR),
            expect("configure in callback", KREPLAY_STATUS_IN_CALLBACK),
            expect("shutdown in callback", KREPLAY_STATUS_IN_CALLBACK),
            expect("destroy in callback", KREPLAY_STATUS_IN_CALLBACK),
            expect("sink in callback", KREPLAY_STATUS_IN_CALLBACK),
            expect("pass exit start", KREPLAY_STATUS_CONTEXT_ERROR),
            expect("pass1 stop counters", KREPLAY_STATUS_OK),
            expect("pass1 stop trace", KREPLAY_STATUS_UNSUPPORTED),
            expect("pass1 start late", KREPLAY_STATUS_CONTEXT_NOT_STARTED),
            expect("pass1 stop stale", KREPLAY_STATUS_INVALID_HANDLE),
            expect("pass exit start", KREPLAY_STATUS_CONTEXT_ERROR),
            expect("pass exit start", KREPLAY_STATUS_CONTEXT_ERROR),
        ]
    );
    let seen = |pass, counters, over, any| Seen {
        pass: Some(pass),
        counters,
        counters_override: over,
        any_override: any,
    };
    assert_eq!(
        log.seen,
        vec![
            seen(0, 1, KREPLAY_OVERRIDE_NONE, 0),
            seen(1, 0, KREPLAY_OVERRIDE_STOPPED, 1),
            seen(2, 0, KREPLAY_OVERRIDE_STOPPED, 1),
        ],
        "a stop in PASS ENTER of pass 1 holds for the rest of the loop"
    );
    assert_eq!(log.shown_continue, vec![None, None, None]);
    // The outcome, in CONFIG EXIT and through the sink (which also saw the tool work first).
    let exit = &log.config_exits[0];
    assert_eq!(exit.dispatch_id, rec.dispatch_id.0);
    assert_eq!(exit.kernel, "saxpy");
    assert_eq!(
        (exit.outcome, exit.reason),
        (KREPLAY_OUTCOME_REPLAYED, KREPLAY_REASON_NONE)
    );
    assert_eq!((exit.requested, exit.executed), (3, 3));
    assert_eq!(exit.gpu_seconds, vec![0.001, 0.002, 0.003]);
    assert_eq!(exit.restored, vec![0, 64, 64]);
    assert_eq!(exit.compared, vec![0, 32, 32]);
    assert!(
        exit.json.contains("\"outcome\":\"replayed\""),
        "{}",
        exit.json
    );
    assert!(exit.json.contains("\"kernel\":\"saxpy\""), "{}", exit.json);
    assert_eq!(log.sink.len(), 2);
    let tool_work = &log.sink[0];
    assert_eq!(tool_work.kernel, "tool_kernel");
    assert_eq!(
        (tool_work.outcome, tool_work.reason, tool_work.reentrancy),
        (
            KREPLAY_OUTCOME_DECLINED,
            KREPLAY_REASON_REENTRANT_DISPATCH,
            1
        )
    );
    // The sink's record is the one the tool saw in CONFIG EXIT, but for the phases: those
    // the tool saw stop where CONFIG EXIT began, the sink's cover the whole window.
    let phases = |json: &str| {
        let mut v: serde_json::Value = serde_json::from_str(json).expect("the record is JSON");
        let p = v.as_object_mut().unwrap().remove("phases").expect("phases");
        (
            v,
            p["window"].as_f64().unwrap(),
            p["drain"].as_f64().unwrap(),
        )
    };
    let (sink_rest, sink_window, sink_drain) = phases(&log.sink[1].json);
    let (exit_rest, exit_window, exit_drain) = phases(&exit.json);
    assert_eq!(sink_rest, exit_rest);
    assert!(sink_window >= exit_window, "{sink_window} < {exit_window}");
    assert_eq!(sink_drain, exit_drain);
    // The C accessor's phases are the JSON's, and add up to the window.
    for seen in [exit, &log.sink[1]] {
        let v: serde_json::Value = serde_json::from_str(&seen.json).unwrap();
        let names = [
            "window",
            "drain",
            "plan",
            "capture",
            "launch",
            "wait",
            "check",
            "restore",
            "callbacks",
            "finish",
            "config_enter",
        ];
        for (name, got) in names.iter().zip(seen.phases) {
            assert_eq!(v["phases"][name].as_f64(), Some(got), "{name}");
        }
        let sum: f64 = seen.phases[1..10].iter().sum();
        assert!((sum - seen.phases[0]).abs() <= 1e-9, "{:?}", seen.phases);
        assert!(seen.phases[0] > 0.0 && seen.phases.iter().all(|p| *p >= 0.0));
        assert_eq!(seen.graph, None, "not a graph node");
        assert!(v.get("graph").is_none());
    }
    assert!(log.sink[1].phases[0] >= exit.phases[0]);
    let mut same = exit.clone();
    same.json.clone_from(&log.sink[1].json);
    same.phases = log.sink[1].phases;
    assert_eq!(log.sink[1], same);
    let stale = log.stale_outcome as *const kreplay_outcome_t;
    drop(log);
    let mut need = 0usize;
    // SAFETY: the stale pointer is only compared, never read (the call's contract).
    let s = unsafe { kreplay_outcome_json(stale, ptr::null_mut(), 0, &mut need) };
    assert_eq!(
        s, KREPLAY_STATUS_INVALID_HANDLE,
        "an outcome dies with its callback"
    );
    // After the loop: no override is left.
    consult_participants(None);
    assert_eq!(
        LOG.lock().seen.last().unwrap(),
        &Seen {
            pass: None,
            counters: 1,
            counters_override: KREPLAY_OVERRIDE_NONE,
            any_override: 0
        }
    );
    assert_eq!(agent.completions(), 1);

    // --- A nonsense pass count (2^63) is clamped by max_passes. -----------------------------
    // SAFETY: NUL-terminated literals.
    ok(unsafe { kreplay_policy_set(c"KREPLAY_MAX_PASSES".as_ptr(), c"5".as_ptr()) });
    let rec = run(HUGE);
    assert_eq!(
        (rec.outcome.as_str(), rec.executed_passes),
        ("replayed", 5),
        "{rec}"
    );
    assert_eq!(rec.requested_passes, 1 << 63);
    assert!(passes(&LOG.lock())
        .iter()
        .all(|&(_, _, total, _)| total == 5));
    assert_eq!(LOG.lock().config_exits[0].requested, 1 << 63);

    // --- A negative continue answer breaks the contract: truncated, callback_failed. --------
    let rec = run(NEGATIVE_CONTINUE);
    assert_eq!(
        (
            rec.outcome.as_str(),
            rec.reason.as_str(),
            rec.executed_passes
        ),
        ("truncated", "callback_failed", 1),
        "{rec}"
    );

    // --- Open-ended; the continue callback replaced in PASS EXIT of pass 2. -----------------
    let rec = run(OPEN_REPLACED);
    let log = LOG.lock();
    assert_eq!(
        (rec.outcome.as_str(), rec.executed_passes),
        ("replayed", 3),
        "{rec}"
    );
    assert_eq!(rec.requested_passes, 0);
    assert!(passes(&log).iter().all(|&(_, _, total, _)| total == 0));
    assert_eq!(
        log.continues,
        vec![(0, 0, 1000), (1, 0, 1001), (2, 0, 1002)],
        "the continue callback gets each pass's own user_data"
    );
    let yes = continue_yes as unsafe extern "C" fn(_, _, _, _) -> _ as usize;
    assert_eq!(
        log.shown_continue,
        vec![Some(yes); 3],
        "PASS EXIT shows the callback in effect"
    );
    drop(log);

    // --- Open-ended; the continue callback removed in PASS EXIT of pass 1: the loop stops. --
    let rec = run(OPEN_REMOVED);
    assert_eq!(
        (rec.outcome.as_str(), rec.executed_passes),
        ("replayed", 2),
        "{rec}"
    );
    assert_eq!(LOG.lock().continues, vec![(0, 0, 1000)]);

    // --- No pass count, or 0 without a continue callback: no replay, no PASS. ---------------
    for scenario in [NO_COUNT, ZERO_NO_CONTINUE] {
        let before = agent.ordinary();
        let rec = run(scenario);
        assert_eq!(
            (rec.outcome.as_str(), rec.executed_passes),
            ("not_requested", 1),
            "{rec}"
        );
        assert!(passes(&LOG.lock()).is_empty());
        assert_eq!(agent.ordinary(), before + 1);
    }

    // --- The summary. ----------------------------------------------------------------------
    let mut s: kreplay_summary_t = {
        // SAFETY: all-zero is a valid kreplay_summary_t (integers, a float, arrays).
        unsafe { std::mem::zeroed() }
    };
    s.size = std::mem::size_of::<kreplay_summary_t>() as u64;
    // SAFETY: `s` is a valid summary with its size set.
    ok(unsafe { kreplay_summary_get(&mut s) });
    assert_eq!(s.dispatches, 8, "7 candidates and 1 tool work");
    assert_eq!(s.replayed, 4);
    assert_eq!(s.not_requested, 2);
    assert_eq!(s.declined, 1);
    assert_eq!(
        s.declined_by_reason[KREPLAY_REASON_REENTRANT_DISPATCH as usize],
        1
    );
    assert_eq!(s.truncated, 1);
    assert_eq!(
        s.truncated_by_reason[KREPLAY_REASON_CALLBACK_FAILED as usize],
        1
    );
    assert_eq!(s.passes, 3 + 1 + 5 + 1 + 3 + 2 + 1 + 1);

    // --- A graph node's dispatch: CONFIG EXIT and the sink read its graph, node, launch. ----
    let node = replay_core::GraphNode {
        graph: 2,
        node: Some(7),
        launch: 4,
        serialized: true,
    };
    let rec = replay_mock::with_graph_node(node, || run(FIXED_THREE));
    assert_eq!(rec.graph, Some(node), "{rec}");
    {
        let log = LOG.lock();
        assert_eq!(log.config_exits.len(), 1);
        assert_eq!(log.config_exits[0].graph, Some((2, 7, 4, 1)));
        assert_eq!(log.sink.last().unwrap().graph, Some((2, 7, 4, 1)));
        let v: serde_json::Value = serde_json::from_str(&log.config_exits[0].json).unwrap();
        assert_eq!(
            v["graph"],
            serde_json::json!({"graph": 2, "node": 7, "launch": 4, "serialized": true})
        );
    }
    // A whole graph profiled as one workload has no node.
    let whole = replay_core::GraphNode {
        node: None,
        serialized: false,
        ..node
    };
    replay_mock::with_graph_node(whole, || run(FIXED_THREE));
    assert_eq!(
        LOG.lock().config_exits[0].graph,
        Some((2, KREPLAY_GRAPH_NODE_NONE, 4, 0))
    );
    // Outside the graph again: none.
    run(FIXED_THREE);
    assert_eq!(LOG.lock().config_exits[0].graph, None);

    // --- Destroying the owner: replay stops, its callbacks are never called again. ----------
    ok(kreplay_context_destroy(h.owner));
    LOG.lock().calls.clear();
    let report = kernel_replay::service()
        .submit(agent, &SNAPSHOTTER, dispatch("saxpy"))
        .unwrap();
    assert!(report.record.is_none(), "the service is inactive");
    assert!(LOG.lock().calls.is_empty());
    // SAFETY: arguments are valid.
    let s = unsafe {
        kreplay_configure_replay(
            h.counters,
            KREPLAY_SUBSCRIBE_CONFIG,
            Some(on_replay),
            ptr::null_mut(),
        )
    };
    assert_eq!(s, KREPLAY_STATUS_ALREADY_CONFIGURED);

    // --- Shutdown. ---------------------------------------------------------------------------
    ok(kreplay_shutdown());
    assert!(
        kernel_replay::contexts().is_none(),
        "the registry is released"
    );
    let mut c = kreplay_context_t::default();
    // SAFETY: a valid out-pointer.
    let status = unsafe { kreplay_context_create(&mut c) };
    assert_eq!(status, KREPLAY_STATUS_SHUT_DOWN);
    assert_eq!(kreplay_context_start(h.counters), KREPLAY_STATUS_SHUT_DOWN);
    assert!(!kernel_replay::service().is_active());
}
