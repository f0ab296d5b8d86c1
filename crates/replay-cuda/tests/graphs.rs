//! Kernels inside CUDA graphs under the interception, over the fake driver
//! (`tests/fake_driver/fake_inject.c`, whose graphs have kernel, memcpy, memset, host, child
//! graph and event nodes with dependencies, copied at instantiation and updated in place):
//!
//! - node mode: a diamond of kernel, memcpy, memset and host nodes, launched through the
//!   wrapped `cuGraphLaunch`, has each kernel node replayed as a dispatch of its own (records
//!   naming graph, node and launch, branches said to be serialised), the host node run once,
//!   no real graph launch, and memory equal to one launch of the same graph;
//! - an executable graph updated (`cuGraphExecKernelNodeSetParams`, `cuGraphExecUpdate`)
//!   replays the updated parameters;
//! - a child graph is unrolled in place, an event record node records its event, and a node
//!   disabled in the executable graph (`cuGraphNodeSetEnabled`) does not run;
//! - graph mode: one window, the graph launched once per pass, memory equal to one launch; a
//!   graph with a host node runs once there (`host_node`);
//! - a graph launched while another thread captures runs once (`beside_capture`) and leaves
//!   the capture valid;
//! - graphs that cannot be unrolled (a conditional node, device launch, instantiated past the
//!   interception) run once through the driver's `cuGraphLaunch`, counted by reason;
//! - a graph captured from launches of a library kernel by its `CUkernel` handle (as the CUDA
//!   runtime launches), whose nodes hold the context's function of the kernel (a handle no
//!   hook saw), replays node by node with memory equal to one launch: mapped through the
//!   node's `kern`, and, where the driver leaves `kern` null, through the library whose
//!   module in the context (`cuLibraryGetModule`) is the function's (`cuFuncGetModule`);
//! - a node whose function's module no recorded library gives still declines
//!   `untracked_memory`, counted `declined_image_unknown`, the libraries asked once each.
//!
//! Skipped where no C compiler is found, or where a real driver is present.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_core::{Outcome, OutcomeRecord, Reason};
use replay_cuda::state;
use replay_cuda::state::graph::{self, GraphProfiling, NodeTag, RunOnce};
use replay_cuda::{intercept, sys};

mod support;
use support::{bind_device0, intercept_with, load_fake, Fake};

/// Three passes; the graph tag of every dispatch, seen in CONFIG EXIT, and its outcome.
#[derive(Default)]
struct Tool {
    replayed: AtomicU32,
    tags: Mutex<Vec<Option<NodeTag>>>,
    kernels: Mutex<Vec<String>>,
    outcomes: Mutex<Vec<Option<OutcomeRecord>>>,
}

impl ReplayTool for Tool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                p.replay_pass_count = Some(Arc::new(|_, _| 3));
            }
            (Operation::Config, Phase::Exit) => {
                self.tags.lock().push(graph::current_node());
                self.kernels
                    .lock()
                    .push(p.dispatch_info.kernel_name.to_string());
                self.outcomes.lock().push(p.outcome.cloned());
                if p.outcome.map(|o| o.executed_passes) == Some(3) {
                    self.replayed.fetch_add(1, Ordering::SeqCst);
                }
            }
            _ => {}
        }
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

const APP_PTX: &std::ffi::CStr =
    c".version 8.4\n.target sm_90\n.address_size 64\n.visible .entry kr_rmw()\n{\n\tret;\n}\n";

fn setup() -> Option<(
    parking_lot::MutexGuard<'static, ()>,
    Arc<Tool>,
    sys::CUfunction,
)> {
    let guard = SERIAL.lock();
    load_fake(Fake::Inject)?;
    static TOOL: std::sync::OnceLock<Arc<Tool>> = std::sync::OnceLock::new();
    let tool = Arc::clone(TOOL.get_or_init(|| {
        let tool = Arc::new(Tool::default());
        intercept_with(Arc::clone(&tool) as Arc<dyn ReplayTool>);
        tool
    }));
    tool.tags.lock().clear();
    tool.kernels.lock().clear();
    tool.outcomes.lock().clear();
    graph::set_mode(GraphProfiling::Node);
    bind_device0();
    let mut module: sys::CUmodule = std::ptr::null_mut();
    let mut func: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: the fake driver's module and function calls with out pointers to live locals.
    unsafe {
        assert_eq!(
            intercept::module_load_data(&mut module, APP_PTX.as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetFunction(&mut func, module, c"kr_rmw".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    Some((guard, tool, func))
}

const N: usize = 512;

fn alloc_filled(seed: u64) -> u64 {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the wrapper's contract is the driver's: an out pointer.
    let r = unsafe { intercept::mem_alloc(&mut p, N * 8) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let host: Vec<u64> = (0..N as u64).map(|i| i * 7 + seed).collect();
    // SAFETY: the fake driver's memory is host memory at the device address (unified).
    unsafe { std::ptr::copy_nonoverlapping(host.as_ptr(), p as *mut u64, N) };
    p
}

fn read(p: u64) -> Vec<u64> {
    // SAFETY: as in `alloc_filled`; the fake runs every operation at once.
    unsafe { std::slice::from_raw_parts(p as *const u64, N) }.to_vec()
}

fn free(ps: &[u64]) {
    for &p in ps {
        // SAFETY: the wrapper's own allocations.
        unsafe { intercept::mem_free(p) };
    }
}

fn ok(r: sys::CUresult) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
}

fn fake<T: Copy>(name: &std::ffi::CStr) -> T {
    // SAFETY: dlsym on the driver's handle with a NUL-terminated name.
    let p = unsafe { intercept::dlsym_answer(intercept::driver_handle(), name.as_ptr()) };
    assert!(!p.is_null(), "the fake driver has {name:?}");
    // SAFETY: `T` is the entry's function-pointer type, pointer-sized.
    unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) }
}

fn real_graph_launches() -> i32 {
    let f = fake::<unsafe extern "C" fn() -> i32>(c"fake_cuda_graph_launches");
    // SAFETY: the fake's counter, no arguments.
    unsafe { f() }
}

/// The kernel node arguments of `kr_rmw(p, count, k)`, kept alive by the caller.
struct RmwArgs {
    vals: Box<[u64; 3]>,
    ptrs: Box<[*mut c_void; 3]>,
}

fn rmw_args(p: u64, count: u64, k: u64) -> RmwArgs {
    let mut vals = Box::new([p, count, k]);
    let ptrs = Box::new([
        (&mut vals[0] as *mut u64).cast(),
        (&mut vals[1] as *mut u64).cast(),
        (&mut vals[2] as *mut u64).cast(),
    ]);
    RmwArgs { vals, ptrs }
}

fn kernel_params(f: sys::CUfunction, a: &mut RmwArgs) -> sys::CUDA_KERNEL_NODE_PARAMS {
    let _ = &a.vals;
    // SAFETY: plain data.
    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    p.func = f;
    p.gridDimX = 1;
    p.gridDimY = 1;
    p.gridDimZ = 1;
    p.blockDimX = 64;
    p.blockDimY = 1;
    p.blockDimZ = 1;
    p.kernelParams = a.ptrs.as_mut_ptr();
    p
}

extern "C" fn bump(data: *mut c_void) {
    // SAFETY: the tests pass a live `AtomicU64`.
    unsafe { &*(data as *const AtomicU64) }.fetch_add(1, Ordering::SeqCst);
}

static HOST_RUNS: AtomicU64 = AtomicU64::new(0);

struct Diamond {
    graph: sys::CUgraph,
    join: sys::CUgraphNode,
}

/// `rmw(a, 3)` → { copy a → b, memset c } → { rmw(b, 5), rmw(c, 9) } → host node (bump).
fn diamond(f: sys::CUfunction, a: u64, b: u64, c: u64, host: bool) -> Diamond {
    let mut g: sys::CUgraph = std::ptr::null_mut();
    let mut args = [
        rmw_args(a, N as u64, 3),
        rmw_args(b, N as u64, 5),
        rmw_args(c, N as u64, 9),
    ];
    let mut k0: sys::CUgraphNode = std::ptr::null_mut();
    let mut cp: sys::CUgraphNode = std::ptr::null_mut();
    let mut ms: sys::CUgraphNode = std::ptr::null_mut();
    let mut k1: sys::CUgraphNode = std::ptr::null_mut();
    let mut k2: sys::CUgraphNode = std::ptr::null_mut();
    let mut h: sys::CUgraphNode = std::ptr::null_mut();
    // SAFETY: the fake driver's graph entries, with parameters that live across each call
    // (the driver copies them).
    unsafe {
        ok(sys::cuGraphCreate(&mut g, 0));
        let p0 = kernel_params(f, &mut args[0]);
        ok(sys::cuGraphAddKernelNode_v2(
            &mut k0,
            g,
            std::ptr::null(),
            0,
            &p0,
        ));
        let null = std::ptr::null_mut();
        let copy = sys::CUDA_MEMCPY3D {
            srcXInBytes: 0,
            srcY: 0,
            srcZ: 0,
            srcLOD: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: null,
            srcDevice: a,
            srcArray: null.cast(),
            reserved0: null,
            srcPitch: 0,
            srcHeight: 0,
            dstXInBytes: 0,
            dstY: 0,
            dstZ: 0,
            dstLOD: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: null,
            dstDevice: b,
            dstArray: null.cast(),
            reserved1: null,
            dstPitch: 0,
            dstHeight: 0,
            WidthInBytes: N * 8,
            Height: 1,
            Depth: 1,
        };
        ok(sys::cuGraphAddMemcpyNode(
            &mut cp,
            g,
            &k0,
            1,
            &copy,
            std::ptr::null_mut(),
        ));
        let set = sys::CUDA_MEMSET_NODE_PARAMS {
            dst: c,
            pitch: 0,
            value: 0x0102_0304,
            elementSize: 4,
            width: N,
            height: 1,
        };
        ok(sys::cuGraphAddMemsetNode(
            &mut ms,
            g,
            &k0,
            1,
            &set,
            std::ptr::null_mut(),
        ));
        let both = [cp, ms];
        let p1 = kernel_params(f, &mut args[1]);
        ok(sys::cuGraphAddKernelNode_v2(
            &mut k1,
            g,
            both.as_ptr(),
            2,
            &p1,
        ));
        let p2 = kernel_params(f, &mut args[2]);
        ok(sys::cuGraphAddKernelNode_v2(
            &mut k2,
            g,
            both.as_ptr(),
            2,
            &p2,
        ));
        if host {
            let hp = sys::CUDA_HOST_NODE_PARAMS {
                fn_: Some(bump),
                userData: (&HOST_RUNS as *const AtomicU64).cast_mut().cast(),
            };
            let ks = [k1, k2];
            ok(sys::cuGraphAddHostNode(&mut h, g, ks.as_ptr(), 2, &hp));
        }
    }
    Diamond { graph: g, join: k1 }
}

fn instantiate(g: sys::CUgraph, flags: u64, seen: bool) -> sys::CUgraphExec {
    let mut e: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: a live template; an out pointer to a live local.
    unsafe {
        if seen {
            ok(intercept::graph_instantiate_with_flags(&mut e, g, flags));
        } else {
            ok(sys::cuGraphInstantiateWithFlags(&mut e, g, flags));
        }
    }
    e
}

fn launch(e: sys::CUgraphExec) -> sys::CUresult {
    // SAFETY: a live executable graph on the legacy stream, through the wrapper.
    unsafe { intercept::graph_launch(e, std::ptr::null_mut()) }
}

/// Three buffers, and three more with the same contents for the plain run.
fn buffers() -> ([u64; 3], [u64; 3]) {
    (
        [alloc_filled(1), alloc_filled(2), alloc_filled(3)],
        [alloc_filled(1), alloc_filled(2), alloc_filled(3)],
    )
}

/// The plain run: the same graph instantiated past the interception, launched once by the
/// driver (as the interception runs a graph it did not see).
fn plain(f: sys::CUfunction, p: [u64; 3], host: bool) {
    let d = diamond(f, p[0], p[1], p[2], host);
    let e = instantiate(d.graph, 0, false);
    ok(launch(e));
}

#[test]
fn a_diamond_replayed_node_by_node_ends_equal_to_one_launch() {
    let Some((_g, tool, f)) = setup() else { return };
    let (r, p) = buffers();
    plain(f, p, true);
    let d = diamond(f, r[0], r[1], r[2], true);
    let e = instantiate(d.graph, 0, true);
    let (replayed, launches, host) = (
        tool.replayed.load(Ordering::SeqCst),
        real_graph_launches(),
        HOST_RUNS.load(Ordering::SeqCst),
    );
    tool.tags.lock().clear();
    ok(launch(e));
    for i in 0..3 {
        assert_eq!(
            read(r[i]),
            read(p[i]),
            "buffer {i} equals one launch of the graph"
        );
    }
    assert_eq!(
        real_graph_launches(),
        launches,
        "node by node, no graph launch"
    );
    assert_eq!(
        HOST_RUNS.load(Ordering::SeqCst),
        host + 1,
        "the host node ran once"
    );
    assert_eq!(
        tool.replayed.load(Ordering::SeqCst),
        replayed + 3,
        "each kernel node replayed: {:?}",
        tool.kernels.lock()
    );
    let tags: Vec<NodeTag> = tool
        .tags
        .lock()
        .iter()
        .map(|t| t.expect("tagged"))
        .collect();
    assert_eq!(tags.len(), 3);
    assert!(tags
        .iter()
        .all(|t| t.graph == tags[0].graph && t.launch == 0 && t.serialized));
    // The kernels' positions in the unrolled order: first, then after copy and memset.
    assert_eq!(
        tags.iter().map(|t| t.node).collect::<Vec<_>>(),
        vec![0, 3, 4]
    );
    // A second launch: launch index 1, memory equal to two launches.
    tool.tags.lock().clear();
    ok(launch(e));
    let pe = instantiate(diamond(f, p[0], p[1], p[2], true).graph, 0, false);
    ok(launch(pe));
    for i in 0..3 {
        assert_eq!(read(r[i]), read(p[i]), "buffer {i} after two launches");
    }
    assert!(tool.tags.lock().iter().all(|t| t.unwrap().launch == 1));
    // The outcome record names the same graph, node and launch as the interception's tag.
    {
        let tags = tool.tags.lock();
        let outcomes = tool.outcomes.lock();
        let n = outcomes.len();
        assert!(n >= 3);
        for (t, o) in tags.iter().zip(outcomes[n - tags.len()..].iter()) {
            let t = t.expect("tagged");
            let g = o
                .as_ref()
                .and_then(|o| o.graph)
                .expect("the record names the node");
            assert_eq!(
                (g.graph, g.node, g.launch),
                (t.graph, Some(t.node), t.launch)
            );
            assert_eq!(g.serialized, t.serialized);
        }
    }
    free(&r);
    free(&p);
}

#[test]
fn an_updated_executable_graph_replays_the_updated_parameters() {
    let Some((_g, tool, f)) = setup() else { return };
    let (r, p) = buffers();
    let dr = diamond(f, r[0], r[1], r[2], false);
    let er = instantiate(dr.graph, 0, true);
    let dp = diamond(f, p[0], p[1], p[2], false);
    let ep = instantiate(dp.graph, 0, false);
    // The join kernel now works on `a` with another constant, in both executable graphs.
    let mut ar = rmw_args(r[0], N as u64, 77);
    let mut ap = rmw_args(p[0], N as u64, 77);
    // SAFETY: live executable graphs and their template's node; live arguments.
    unsafe {
        ok(intercept::graph_exec_kernel_set_v2(
            er,
            dr.join,
            &kernel_params(f, &mut ar),
        ));
        ok(sys::cuGraphExecKernelNodeSetParams_v2(
            ep,
            dp.join,
            &kernel_params(f, &mut ap),
        ));
    }
    let replayed = tool.replayed.load(Ordering::SeqCst);
    ok(launch(er));
    ok(launch(ep));
    for i in 0..3 {
        assert_eq!(read(r[i]), read(p[i]), "buffer {i} after a node update");
    }
    assert_eq!(tool.replayed.load(Ordering::SeqCst), replayed + 3);
    // A whole-graph update from a new template of the same shape (other buffers swapped).
    let ur = diamond(f, r[0], r[2], r[1], false);
    let up = diamond(f, p[0], p[2], p[1], false);
    // SAFETY: live executable graphs and templates of the same topology.
    unsafe {
        ok(intercept::graph_exec_update_v2(
            er,
            ur.graph,
            std::ptr::null_mut(),
        ));
        ok(sys::cuGraphExecUpdate_v2(
            ep,
            up.graph,
            std::ptr::null_mut(),
        ));
    }
    ok(launch(er));
    ok(launch(ep));
    for i in 0..3 {
        assert_eq!(
            read(r[i]),
            read(p[i]),
            "buffer {i} after a whole-graph update"
        );
    }
    assert_eq!(tool.replayed.load(Ordering::SeqCst), replayed + 6);
    free(&r);
    free(&p);
}

#[test]
fn graph_mode_launches_the_whole_graph_once_per_pass_under_one_window() {
    let Some((_g, tool, f)) = setup() else { return };
    graph::set_mode(GraphProfiling::Graph);
    let (r, p) = buffers();
    plain(f, p, false);
    let e = instantiate(diamond(f, r[0], r[1], r[2], false).graph, 0, true);
    let (replayed, launches) = (tool.replayed.load(Ordering::SeqCst), real_graph_launches());
    ok(launch(e));
    for i in 0..3 {
        assert_eq!(read(r[i]), read(p[i]), "buffer {i} equals one launch");
    }
    assert_eq!(
        real_graph_launches(),
        launches + 3,
        "one graph launch per pass"
    );
    assert_eq!(
        tool.replayed.load(Ordering::SeqCst),
        replayed + 1,
        "one window"
    );
    let tag = tool.tags.lock().last().copied().flatten().expect("tagged");
    assert_eq!(tag.node, u32::MAX, "the whole graph, no node");
    let g = tool
        .outcomes
        .lock()
        .last()
        .cloned()
        .flatten()
        .and_then(|o| o.graph)
        .expect("the record names the graph");
    assert_eq!((g.graph, g.node, g.launch), (tag.graph, None, tag.launch));
    // A host function would run once per pass: such a graph runs once.
    let before = graph::run_once_count(RunOnce::HostNode);
    let h = instantiate(diamond(f, r[0], r[1], r[2], true).graph, 0, true);
    let launches = real_graph_launches();
    ok(launch(h));
    assert_eq!(real_graph_launches(), launches + 1);
    assert_eq!(graph::run_once_count(RunOnce::HostNode), before + 1);
    graph::set_mode(GraphProfiling::Node);
    free(&r);
    free(&p);
}

#[test]
fn graphs_that_cannot_be_unrolled_run_once_counted_by_reason() {
    let Some((_g, tool, f)) = setup() else { return };
    type AddCond = unsafe extern "C" fn(
        *mut sys::CUgraphNode,
        sys::CUgraph,
        *const sys::CUgraphNode,
        usize,
    ) -> sys::CUresult;
    let add_conditional: AddCond = fake(c"fake_cuda_add_conditional_node");
    let cases: [(RunOnce, u64, bool, bool); 3] = [
        (RunOnce::NodeType, 0, true, true),
        (RunOnce::DeviceLaunch, 4, true, false),
        (RunOnce::UnseenGraph, 0, false, false),
    ];
    for (why, flags, seen, conditional) in cases {
        let (r, p) = buffers();
        plain(f, p, false);
        let d = diamond(f, r[0], r[1], r[2], false);
        if conditional {
            let mut n: sys::CUgraphNode = std::ptr::null_mut();
            // SAFETY: the fake's entry on a live graph, after its join node.
            ok(unsafe { add_conditional(&mut n, d.graph, &d.join, 1) });
        }
        let e = instantiate(d.graph, flags, seen);
        let (before, launches, replayed) = (
            graph::run_once_count(why),
            real_graph_launches(),
            tool.replayed.load(Ordering::SeqCst),
        );
        ok(launch(e));
        assert_eq!(graph::run_once_count(why), before + 1, "{why:?}");
        assert_eq!(
            real_graph_launches(),
            launches + 1,
            "{why:?}: the driver's launch"
        );
        assert_eq!(
            tool.replayed.load(Ordering::SeqCst),
            replayed,
            "{why:?}: no window"
        );
        for i in 0..3 {
            assert_eq!(
                read(r[i]),
                read(p[i]),
                "{why:?}: buffer {i} equals one launch"
            );
        }
        free(&r);
        free(&p);
    }
    let counts = state::state().counters_json();
    assert!(
        counts["graph_run_once"]["node_type"].as_u64() >= Some(1),
        "{counts}"
    );
}

#[test]
fn a_graph_launched_while_another_thread_captures_runs_once_and_leaves_it_valid() {
    let Some((_g, tool, f)) = setup() else { return };
    let (r, p) = buffers();
    plain(f, p, false);
    let e = instantiate(diamond(f, r[0], r[1], r[2], false).graph, 0, true);
    let b = alloc_filled(9);
    let func = f as usize;
    let (begun_tx, begun_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let capturer = std::thread::spawn(move || -> Result<(), String> {
        bind_device0();
        let mut st: sys::CUstream = std::ptr::null_mut();
        // SAFETY: driver calls on a stream this thread creates and destroys; kr_rmw's three
        // 8-byte parameters, live arguments, launched through the wrapper into the capture.
        unsafe {
            sys::cuStreamCreate(&mut st, 1)
                .result()
                .map_err(|e| e.to_string())?;
            sys::cuStreamBeginCapture_v2(
                st,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            )
            .result()
            .map_err(|e| format!("begin: {e}"))?;
            let mut a = rmw_args(b, N as u64, 2);
            let r = intercept::launch_kernel(
                func as sys::CUfunction,
                1,
                1,
                1,
                64,
                1,
                1,
                0,
                st,
                a.ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            );
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(format!("captured launch: {r:?}"));
            }
            begun_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            let mut g: sys::CUgraph = std::ptr::null_mut();
            let ended = intercept::stream_end_capture(st, &mut g)
                .result()
                .map_err(|e| format!("the capture was invalidated: {e}"));
            intercept::stream_destroy(st);
            ended
        }
    });
    begun_rx.recv().unwrap();
    let (before, replayed) = (
        graph::run_once_count(RunOnce::BesideCapture),
        tool.replayed.load(Ordering::SeqCst),
    );
    let rc = launch(e);
    go_tx.send(()).unwrap();
    let captured = capturer.join().unwrap();
    ok(rc);
    captured.unwrap();
    assert_eq!(graph::run_once_count(RunOnce::BesideCapture), before + 1);
    assert_eq!(
        tool.replayed.load(Ordering::SeqCst),
        replayed,
        "no window beside a capture"
    );
    for i in 0..3 {
        assert_eq!(read(r[i]), read(p[i]), "buffer {i} equals one launch");
    }
    // The capture is over: the graph is unrolled again.
    ok(launch(e));
    assert_eq!(tool.replayed.load(Ordering::SeqCst), replayed + 3);
    free(&r);
    free(&p);
    free(&[b]);
}

#[test]
fn a_child_graph_event_and_disabled_nodes_keep_their_semantics_when_unrolled() {
    let Some((_g, tool, f)) = setup() else { return };
    let (r, p) = buffers();
    // graph: child (the diamond) -> event record -> empty; the child's join kernel disabled.
    let build = |b: [u64; 3], ev: sys::CUevent| -> sys::CUgraph {
        let child = diamond(f, b[0], b[1], b[2], false);
        let mut g: sys::CUgraph = std::ptr::null_mut();
        let (mut c, mut e, mut z): (sys::CUgraphNode, sys::CUgraphNode, sys::CUgraphNode) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        // SAFETY: the fake driver's graph entries on live graphs and a live event.
        unsafe {
            ok(sys::cuGraphCreate(&mut g, 0));
            ok(sys::cuGraphAddChildGraphNode(
                &mut c,
                g,
                std::ptr::null(),
                0,
                child.graph,
            ));
            ok(sys::cuGraphAddEventRecordNode(&mut e, g, &c, 1, ev));
            ok(sys::cuGraphAddEmptyNode(&mut z, g, &e, 1));
        }
        g
    };
    let mut ev: sys::CUevent = std::ptr::null_mut();
    // SAFETY: an out pointer to a live local.
    ok(unsafe { sys::cuEventCreate(&mut ev, 0) });
    let er = instantiate(build(r, ev), 0, true);
    let ep = instantiate(build(p, ev), 0, false);
    let replayed = tool.replayed.load(Ordering::SeqCst);
    ok(launch(er));
    ok(launch(ep));
    for i in 0..3 {
        assert_eq!(
            read(r[i]),
            read(p[i]),
            "buffer {i}: the child graph unrolled in place"
        );
    }
    assert_eq!(tool.replayed.load(Ordering::SeqCst), replayed + 3);
    // SAFETY: the event the graph recorded.
    ok(unsafe { sys::cuEventQuery(ev) });
    // A top-level node disabled in the executable graph does not run: here the child.
    let child_of = |g: sys::CUgraph| -> sys::CUgraphNode {
        let mut n = [std::ptr::null_mut(); 3];
        let mut count = 3usize;
        // SAFETY: a live graph; an array of three handles.
        ok(unsafe { sys::cuGraphGetNodes(g, n.as_mut_ptr(), &mut count) });
        n[0]
    };
    let (gr, gp) = (build(r, ev), build(p, ev));
    let (er, ep) = (instantiate(gr, 0, true), instantiate(gp, 0, false));
    // SAFETY: live executable graphs and their templates' nodes.
    unsafe {
        ok(intercept::graph_node_set_enabled(er, child_of(gr), 0));
        ok(sys::cuGraphNodeSetEnabled(ep, child_of(gp), 0));
    }
    let before = read(r[0]);
    ok(launch(er));
    ok(launch(ep));
    assert_eq!(read(r[0]), before, "the disabled child did not run");
    assert_eq!(tool.replayed.load(Ordering::SeqCst), replayed + 3);
    free(&r);
    free(&p);
}

fn count(name: &str) -> u64 {
    state::state().counters_json()[name].as_u64().unwrap_or(0)
}

fn library_module_calls() -> i32 {
    let f = fake::<unsafe extern "C" fn() -> i32>(c"fake_cuda_library_module_calls");
    // SAFETY: the fake's counter, no arguments.
    unsafe { f() }
}

/// Whether the fake's `cuGraphKernelNodeGetParams_v2` fills `kern`; back to filling it when
/// dropped.
struct NodeKern;

impl NodeKern {
    fn set(on: bool) -> Self {
        let f = fake::<unsafe extern "C" fn(i32)>(c"fake_cuda_node_params_kern");
        // SAFETY: the fake's switch, an int.
        unsafe { f(i32::from(on)) };
        NodeKern
    }
}

impl Drop for NodeKern {
    fn drop(&mut self) {
        let f = fake::<unsafe extern "C" fn(i32)>(c"fake_cuda_node_params_kern");
        // SAFETY: as in `set`.
        unsafe { f(1) };
    }
}

/// kr_rmw's name as the driver reports it, and as the CUDA runtime asks for the kernel.
const RMW_MANGLED: &std::ffi::CStr = c"_Z6kr_rmwPmmm";

/// A library loaded and its kernel fetched through the hooks, as the CUDA runtime does
/// (`cuLibraryLoadData`, `cuLibraryGetKernel` by the mangled name; no `cuKernelGetFunction`).
fn load_library() -> (sys::CUlibrary, sys::CUkernel) {
    let (mut lib, mut k): (sys::CUlibrary, sys::CUkernel) =
        (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: a complete image in a live buffer; out pointers to live locals.
    unsafe {
        let n = std::ptr::null_mut();
        ok(intercept::library_load_data(
            &mut lib,
            APP_PTX.as_ptr().cast(),
            n,
            n.cast(),
            0,
            n,
            n.cast(),
            0,
        ));
        ok(intercept::library_get_kernel(
            &mut k,
            lib,
            RMW_MANGLED.as_ptr(),
        ));
    }
    (lib, k)
}

fn unload_library(lib: sys::CUlibrary) {
    // SAFETY: a library the test loaded through the wrapper.
    ok(unsafe { intercept::library_unload(lib) });
}

/// A graph captured from `rmw(a, 3)` then `rmw(b, 5)`, launched through the wrapper by the
/// kernel's handle cast to a function, as the runtime launches.
fn captured(k: sys::CUkernel, a: u64, b: u64) -> sys::CUgraph {
    let mut st: sys::CUstream = std::ptr::null_mut();
    let mut g: sys::CUgraph = std::ptr::null_mut();
    let mut args = [rmw_args(a, N as u64, 3), rmw_args(b, N as u64, 5)];
    // SAFETY: driver calls on a stream this function creates and destroys; kr_rmw's three
    // 8-byte parameters, live arguments.
    unsafe {
        ok(sys::cuStreamCreate(&mut st, 1));
        ok(sys::cuStreamBeginCapture_v2(
            st,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        ));
        for a in &mut args {
            ok(intercept::launch_kernel(
                k as sys::CUfunction,
                1,
                1,
                1,
                64,
                1,
                1,
                0,
                st,
                a.ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            ));
        }
        ok(intercept::stream_end_capture(st, &mut g));
        intercept::stream_destroy(st);
    }
    assert!(!g.is_null());
    g
}

/// Launches the graph captured from the library kernel on `r` (instantiated through the
/// hooks) and on `p` (past them, run once by the driver), and checks that both kernel nodes
/// replayed, nothing declined, and memory equals one launch. Returns how many times the
/// driver was asked for a library's module meanwhile.
fn replay_captured(tool: &Tool, k: sys::CUkernel) -> i32 {
    let (r, p) = buffers();
    let calls = library_module_calls();
    let (replayed, declined) = (
        tool.replayed.load(Ordering::SeqCst),
        count("declined_image_unknown"),
    );
    let e = instantiate(captured(k, r[0], r[1]), 0, true);
    let pe = instantiate(captured(k, p[0], p[1]), 0, false);
    let launches = real_graph_launches();
    ok(launch(e));
    ok(launch(pe));
    assert_eq!(
        real_graph_launches(),
        launches + 1,
        "only the plain graph ran whole"
    );
    assert_eq!(
        tool.replayed.load(Ordering::SeqCst),
        replayed + 2,
        "both kernel nodes replayed: {:?}",
        tool.outcomes.lock()
    );
    assert!(tool
        .outcomes
        .lock()
        .iter()
        .all(|o| o.as_ref().is_some_and(|o| o.outcome == Outcome::Replayed)));
    assert_eq!(count("declined_image_unknown"), declined);
    for i in 0..2 {
        assert_eq!(read(r[i]), read(p[i]), "buffer {i} equals one launch");
    }
    let asked = library_module_calls() - calls;
    // A second launch maps from what the first remembered.
    ok(launch(e));
    ok(launch(pe));
    assert_eq!(tool.replayed.load(Ordering::SeqCst), replayed + 4);
    for i in 0..2 {
        assert_eq!(read(r[i]), read(p[i]), "buffer {i} after two launches");
    }
    assert_eq!(library_module_calls() - calls, asked, "nothing asked again");
    free(&r);
    free(&p);
    asked
}

#[test]
fn a_graph_captured_from_library_kernel_launches_replays_through_the_nodes_kernel() {
    let Some((_g, tool, _)) = setup() else { return };
    let _kern = NodeKern::set(true);
    let (lib, k) = load_library();
    assert_eq!(
        replay_captured(&tool, k),
        0,
        "the node's `kern` mapped its function: no library was asked for its module"
    );
    unload_library(lib);
}

#[test]
fn a_graph_node_without_its_kernel_maps_through_the_librarys_module_in_the_context() {
    let Some((_g, tool, _)) = setup() else { return };
    let _kern = NodeKern::set(false);
    let (lib, k) = load_library();
    assert_eq!(
        replay_captured(&tool, k),
        1,
        "the one library defining the kernel was asked once"
    );
    unload_library(lib);
}

#[test]
fn a_node_function_whose_module_no_recorded_library_gives_declines_image_unknown() {
    let Some((_g, tool, _)) = setup() else { return };
    // A recorded library defining the kernel's name, and a module loaded outside the hooks
    // whose functions the driver's own entry fetches.
    let (lib, _) = load_library();
    let mut m: sys::CUmodule = std::ptr::null_mut();
    let fetch = |m: sys::CUmodule| {
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: the driver's own entry (no hook sees it); an out pointer to a live local.
        ok(unsafe { sys::cuModuleGetFunction(&mut f, m, RMW_MANGLED.as_ptr()) });
        f
    };
    // SAFETY: the driver's own entry with an image in a live buffer and an out pointer.
    ok(unsafe { sys::cuModuleLoadData(&mut m, APP_PTX.as_ptr().cast()) });
    // One kernel node `rmw(a, 3)` of function `f`.
    let one_node = |f: sys::CUfunction, a: u64| -> sys::CUgraph {
        let mut g: sys::CUgraph = std::ptr::null_mut();
        let mut n: sys::CUgraphNode = std::ptr::null_mut();
        let mut args = rmw_args(a, N as u64, 3);
        let p = kernel_params(f, &mut args);
        // SAFETY: the fake's graph entries; the parameters live across the call.
        unsafe {
            ok(sys::cuGraphCreate(&mut g, 0));
            ok(sys::cuGraphAddKernelNode_v2(
                &mut n,
                g,
                std::ptr::null(),
                0,
                &p,
            ));
        }
        g
    };
    let (r, p) = (alloc_filled(4), alloc_filled(4));
    let check = |e: sys::CUgraphExec, pe: sys::CUgraphExec, declined: u64, asked: i32| {
        tool.outcomes.lock().clear();
        let replayed = tool.replayed.load(Ordering::SeqCst);
        ok(launch(e));
        ok(launch(pe));
        assert_eq!(
            tool.replayed.load(Ordering::SeqCst),
            replayed,
            "not replayed"
        );
        let outcomes = tool.outcomes.lock().clone();
        assert_eq!(outcomes.len(), 1, "{outcomes:?}");
        let rec = outcomes[0].clone().expect("an outcome");
        assert_eq!(rec.outcome, Outcome::Declined, "{rec:?}");
        assert_eq!(rec.reason, Reason::UntrackedMemory, "{rec:?}");
        assert_eq!(count("declined_image_unknown"), declined);
        assert_eq!(library_module_calls(), asked);
        assert_eq!(read(r), read(p), "ran once, as the plain launch");
    };
    let (declined, calls) = (count("declined_image_unknown"), library_module_calls());
    let f = fetch(m);
    let e = instantiate(one_node(f, r), 0, true);
    let pe = instantiate(one_node(f, p), 0, false);
    check(e, pe, declined + 1, calls + 1);
    // Asked once: the next launch asks nothing.
    check(e, pe, declined + 2, calls + 1);
    // Another function of the same module: its module is not looked for again.
    let f2 = fetch(m);
    assert_ne!(f2, f);
    let e2 = instantiate(one_node(f2, r), 0, true);
    let pe2 = instantiate(one_node(f2, p), 0, false);
    check(e2, pe2, declined + 3, calls + 1);
    // A library loaded since is asked (once), the first one not again; still no match.
    let (lib2, _) = load_library();
    check(e2, pe2, declined + 4, calls + 2);
    check(e, pe, declined + 5, calls + 2);
    unload_library(lib2);
    unload_library(lib);
    // SAFETY: the driver's own unload of the module loaded above.
    ok(unsafe { sys::cuModuleUnload(m) });
    free(&[r, p]);
}
