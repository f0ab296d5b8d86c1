//! Kernels inside CUDA graphs (SPEC §9.2 "Graphs").
//!
//! The driver offers no way to read an executable graph back, so the interception keeps its
//! own model of each one: at instantiation (`cuGraphInstantiateWithFlags`,
//! `cuGraphInstantiateWithParams`) the template's nodes, their
//! dependencies and their parameters are read through the driver's introspection entries
//! (a graph from `cuStreamEndCapture` is a template like any other), kernel arguments copied
//! by value while the driver still holds them. A kernel node's parameters are read in their
//! v2 form (`cuGraphKernelNodeGetParams_v2`, `CUDA_KERNEL_NODE_PARAMS_v2`): its function
//! runs, and where the driver also gives the node's kernel (`kern`), as for a node captured
//! from a launch by a library kernel's handle whose function is the context's own, the
//! function takes that kernel's image ([`super::images::note_node_kernel`]); else its image
//! is found as any function's ([`super::images`]). Updates of the executable graph change the
//! model: `cuGraphExecKernelNodeSetParams` (both forms) the node's launch,
//! `cuGraphNodeSetEnabled` whether it runs, `cuGraphExecUpdate` (both forms) every node's
//! parameters from the new template, paired node by node (the driver requires the same
//! topology). The other per-node setters of an executable graph are not modelled: after one
//! succeeds the graph runs once, counted `updated_unmodelled`, since its model is stale.
//!
//! At `cuGraphLaunch` the mode decides ([`GRAPH_PROFILING_ENV`], `kreplay run
//! --graph-profiling`):
//!
//! - **node** (the default): the graph's nodes run one after another on the launch stream in
//!   a topological order, so the order the graph expresses is kept and concurrency between
//!   independent branches is lost (the record's `graph_serialized` says so). Kernel nodes
//!   are ordinary intercepted launches (their own window, record and callbacks; the record
//!   names the graph, the node and the launch, [`current_node`]); memcpy nodes run as
//!   `cuMemcpy3DAsync`, memset nodes as `cuMemsetD2D{8,16,32}Async`, host nodes as
//!   `cuLaunchHostFunc`, event record / wait nodes as `cuEventRecord` / `cuStreamWaitEvent`,
//!   child graphs unrolled in place, empty nodes not at all; each non-kernel node under the
//!   agent's write gate.
//! - **graph**: the graph is launched whole, once per pass, inside one window whose scope is
//!   every argument word of every kernel node plus every memcpy and memset destination.
//!   A graph with host nodes runs once there (`host_node`): a host function would run once
//!   per pass, and no snapshot restores what it does.
//! - **off**: every graph launch runs once, as before graphs were modelled.
//!
//! A graph that cannot be unrolled safely runs once, through the real `cuGraphLaunch` under
//! the write gate, counted by its reason (`graph_run_once` in the counts): `unseen_graph`
//! (instantiated before the interception or past it), `device_launch` (instantiated for
//! device launch), `node_type` (conditional, memory alloc/free, external semaphore and batch
//! memory-operation nodes, or types this module does not know), `layout_unknown` (a kernel
//! node whose argument sizes neither the driver nor its image describe, or that passes its
//! arguments through `extra`), `kernel_attributes` (a node with a cluster shape or the
//! cooperative attribute, which a plain relaunch would drop), `other_context` (a kernel node
//! bound to another context than the current one at instantiation), `introspection` (the driver
//! lacks or refused an entry the model needs), `updated_unmodelled`, `capture` (launched
//! into a capturing stream: it becomes a node of that capture), `beside_capture` (another
//! stream's capture is live) and `behind_host_wait`.
//!
//! What an unrolled graph cannot keep: timing between branches, and the graph's single
//! submission (each node is its own). Its memory semantics are the graph's: each node runs
//! once, kernels replayed with memory restored between passes.

use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{
    self, CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUresult, CUstream,
};
use parking_lot::Mutex;
use replay_core::{Dim3, PolicyError};

use super::state;
use crate::intercept::launch::{self as hooks, Intercepted};
use crate::launch::How;

/// Environment variable: how graph launches are profiled (`node`, `graph` or `off`).
pub const GRAPH_PROFILING_ENV: &str = "KREPLAY_GRAPH_PROFILING";

/// How graph launches are profiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphProfiling {
    /// Every kernel node is a dispatch of its own (the default, as Nsight Compute's).
    Node,
    /// The whole graph launch is one workload.
    Graph,
    /// Graph launches run once, untouched.
    Off,
}

impl GraphProfiling {
    /// The mode named `s` (`node`, `graph`, `off`).
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "node" | "" => Ok(Self::Node),
            "graph" => Ok(Self::Graph),
            "off" => Ok(Self::Off),
            _ => Err(PolicyError {
                variable: GRAPH_PROFILING_ENV.into(),
                value: s.into(),
                expected: "node, graph or off",
            }),
        }
    }

    /// The mode the environment names: a bad value is an error.
    pub fn from_env() -> Result<Self, PolicyError> {
        match std::env::var(GRAPH_PROFILING_ENV) {
            Ok(v) => Self::parse(&v),
            Err(_) => Ok(Self::Node),
        }
    }
}

static MODE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// The mode of this process: the one [`set_mode`] gave, else the environment's, read once; a
/// bad value says why once and keeps graphs running once (`off`), the behaviour that cannot
/// corrupt.
pub fn mode() -> GraphProfiling {
    match MODE.load(Ordering::Relaxed) {
        1 => GraphProfiling::Node,
        2 => GraphProfiling::Graph,
        3 => GraphProfiling::Off,
        _ => {
            let m = GraphProfiling::from_env().unwrap_or_else(|e| {
                eprintln!("[kernel-replay] {e}; graph launches run once");
                GraphProfiling::Off
            });
            set_mode(m);
            m
        }
    }
}

/// Sets the mode (an embedding tool; tests).
pub fn set_mode(m: GraphProfiling) {
    let v = match m {
        GraphProfiling::Node => 1,
        GraphProfiling::Graph => 2,
        GraphProfiling::Off => 3,
    };
    MODE.store(v, Ordering::Relaxed);
}

pub use crate::graph_tag::{current_node, NodeTag};

/// Why a graph launch runs once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOnce {
    /// Instantiated where the interception did not see it.
    UnseenGraph,
    /// Instantiated for device launch.
    DeviceLaunch,
    /// A node type that cannot be unrolled.
    NodeType,
    /// A kernel node whose arguments cannot be copied.
    LayoutUnknown,
    /// A kernel node with launch attributes a relaunch would drop.
    KernelAttributes,
    /// The driver lacks or refused an entry the model needs.
    Introspection,
    /// Updated by a setter the model does not follow.
    UpdatedUnmodelled,
    /// Launched into a capturing stream.
    Capture,
    /// Another stream's capture is live.
    BesideCapture,
    /// Behind a running communication kernel.
    BehindHostWait,
    /// Graph mode: the graph has host nodes.
    HostNode,
    /// A kernel node bound to another context than the one it was instantiated on.
    OtherContext,
    /// The mode is `off`.
    Off,
}

impl RunOnce {
    /// The counter's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnseenGraph => "unseen_graph",
            Self::DeviceLaunch => "device_launch",
            Self::NodeType => "node_type",
            Self::LayoutUnknown => "layout_unknown",
            Self::KernelAttributes => "kernel_attributes",
            Self::Introspection => "introspection",
            Self::UpdatedUnmodelled => "updated_unmodelled",
            Self::Capture => "capture",
            Self::BesideCapture => "beside_capture",
            Self::BehindHostWait => "behind_host_wait",
            Self::HostNode => "host_node",
            Self::OtherContext => "other_context",
            Self::Off => "off",
        }
    }
}

const MEMCPY3D_WORDS: usize = std::mem::size_of::<sys::CUDA_MEMCPY3D>().div_ceil(8);

/// One node's work, as the executable graph holds it now.
#[derive(Debug, Clone)]
enum Work {
    Kernel {
        func: CUfunction,
        grid: [u32; 3],
        block: [u32; 3],
        shmem: u32,
        /// The argument block by value and each parameter's offset in it.
        block_bytes: Vec<u8>,
        offsets: Vec<usize>,
    },
    /// `CUDA_MEMCPY3D` as the driver wrote it, kept as words: its memory-type fields are
    /// only read as integers, so no value the driver writes is an invalid enum here.
    Memcpy(Box<[u64; MEMCPY3D_WORDS]>),
    Memset(sys::CUDA_MEMSET_NODE_PARAMS),
    Host {
        func: usize,
        data: usize,
    },
    EventRecord(usize),
    EventWait(usize),
    Child(Box<Topo>),
    Empty,
}

// SAFETY: the raw pointers are driver handles and the application's addresses (device
// memory, host functions and their data), used only in driver calls, never dereferenced here.
unsafe impl Send for Work {}
// SAFETY: as above.
unsafe impl Sync for Work {}

#[derive(Debug, Clone)]
struct Node {
    /// The template node handles this node answers to (the instantiated template's, then
    /// those of every template it was updated from).
    handles: Vec<usize>,
    deps: Vec<usize>,
    work: Work,
    enabled: bool,
}

#[derive(Debug, Clone, Default)]
struct Topo {
    nodes: Vec<Node>,
}

impl Topo {
    /// A topological order (Kahn's, lowest index first, so the same graph always unrolls the
    /// same way); `None` for a cycle.
    fn order(&self) -> Option<Vec<usize>> {
        let n = self.nodes.len();
        let mut done = vec![false; n];
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let next = (0..n).find(|&i| !done[i] && self.nodes[i].deps.iter().all(|&d| done[d]))?;
            done[next] = true;
            out.push(next);
        }
        Some(out)
    }

    fn find_mut(&mut self, handle: usize) -> Option<&mut Node> {
        self.nodes.iter_mut().find(|n| n.handles.contains(&handle))
    }

    /// Whether independent branches exist (some node is not ordered after the one before).
    fn has_branches(&self, order: &[usize]) -> bool {
        order
            .windows(2)
            .any(|w| !self.nodes[w[1]].deps.contains(&w[0]))
            || self.nodes.iter().any(|n| match &n.work {
                Work::Child(c) => c.order().is_some_and(|o| c.has_branches(&o)),
                _ => false,
            })
    }

    fn has_host_nodes(&self) -> bool {
        self.nodes.iter().any(|n| match &n.work {
            Work::Host { .. } => n.enabled,
            Work::Child(c) => c.has_host_nodes(),
            _ => false,
        })
    }
}

/// The model of one executable graph.
#[derive(Debug)]
struct Exec {
    id: u64,
    topo: Mutex<Result<Topo, RunOnce>>,
    launches: AtomicU64,
}

fn execs() -> &'static Mutex<HashMap<usize, Arc<Exec>>> {
    static E: OnceLock<Mutex<HashMap<usize, Arc<Exec>>>> = OnceLock::new();
    E.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The next executable graph's number.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// How many graph launches ran once for `reason` so far.
pub fn run_once_count(reason: RunOnce) -> u64 {
    state()
        .graph_run_once
        .lock()
        .get(reason.as_str())
        .copied()
        .unwrap_or(0)
}

fn count_once(reason: RunOnce) {
    *state()
        .graph_run_once
        .lock()
        .entry(reason.as_str())
        .or_insert(0) += 1;
}

/// A driver entry the model needs that is not wrapped, looked up in the driver itself (never
/// one of the interception's wrappers); `None` where the driver lacks it.
macro_rules! entry {
    ($name:literal : fn($($t:ty),*)) => {
        super::images::optional_entry($name).map(|p| {
            // SAFETY: the driver's entry of this name has this signature (the CUDA headers).
            unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> CUresult>(p) }
        })
    };
}

fn ok(r: CUresult) -> Result<(), RunOnce> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(RunOnce::Introspection)
    }
}

/// Reads template `g` into a model.
///
/// # Safety
/// `g` is a live graph handle.
unsafe fn read_graph(g: CUgraph, depth: u32) -> Result<Topo, RunOnce> {
    if depth > 16 {
        return Err(RunOnce::NodeType);
    }
    let get_nodes = entry!(c"cuGraphGetNodes": fn(CUgraph, *mut CUgraphNode, *mut usize))
        .ok_or(RunOnce::Introspection)?;
    let get_type = entry!(c"cuGraphNodeGetType": fn(CUgraphNode, *mut c_uint))
        .ok_or(RunOnce::Introspection)?;
    let get_deps =
        entry!(c"cuGraphNodeGetDependencies": fn(CUgraphNode, *mut CUgraphNode, *mut usize))
            .ok_or(RunOnce::Introspection)?;
    let mut n = 0usize;
    // SAFETY: the caller's live graph; a null array asks for the count.
    ok(unsafe { get_nodes(g, std::ptr::null_mut(), &mut n) })?;
    let mut handles: Vec<CUgraphNode> = vec![std::ptr::null_mut(); n];
    // SAFETY: an array of `n` handles.
    ok(unsafe { get_nodes(g, handles.as_mut_ptr(), &mut n) })?;
    handles.truncate(n);
    let mut topo = Topo::default();
    for &h in &handles {
        let mut ty: c_uint = 0;
        // SAFETY: a node of the live graph; out pointer to a live local.
        ok(unsafe { get_type(h, &mut ty) })?;
        let mut nd = 0usize;
        // SAFETY: as above; a null array asks for the count.
        ok(unsafe { get_deps(h, std::ptr::null_mut(), &mut nd) })?;
        let mut deps: Vec<CUgraphNode> = vec![std::ptr::null_mut(); nd];
        if nd > 0 {
            // SAFETY: an array of `nd` handles.
            ok(unsafe { get_deps(h, deps.as_mut_ptr(), &mut nd) })?;
        }
        let deps = deps
            .iter()
            .map(|d| handles.iter().position(|x| x == d))
            .collect::<Option<Vec<_>>>()
            .ok_or(RunOnce::Introspection)?;
        // SAFETY: a node of the live graph of type `ty`.
        let work = unsafe { read_node(h, ty, depth) }?;
        topo.nodes.push(Node {
            handles: vec![h as usize],
            deps,
            work,
            enabled: true,
        });
    }
    topo.order().ok_or(RunOnce::Introspection)?;
    Ok(topo)
}

/// One node's work.
///
/// # Safety
/// `h` is a live node of type `ty`.
unsafe fn read_node(h: CUgraphNode, ty: c_uint, depth: u32) -> Result<Work, RunOnce> {
    Ok(match ty {
        0 => {
            let get = entry!(c"cuGraphKernelNodeGetParams_v2": fn(CUgraphNode, *mut sys::CUDA_KERNEL_NODE_PARAMS))
                .ok_or(RunOnce::Introspection)?;
            // SAFETY: plain data the driver fills.
            let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
            // SAFETY: a kernel node; out pointer to a live local.
            ok(unsafe { get(h, &mut p) })?;
            kernel_attributes_ok(h)?;
            // SAFETY: the driver's copy of the arguments, valid until the node changes.
            unsafe { kernel_work(&p) }?
        }
        1 => {
            let get =
                entry!(c"cuGraphMemcpyNodeGetParams": fn(CUgraphNode, *mut [u64; MEMCPY3D_WORDS]))
                    .ok_or(RunOnce::Introspection)?;
            let mut c = Box::new([0u64; MEMCPY3D_WORDS]);
            // SAFETY: a memcpy node; the buffer is at least a CUDA_MEMCPY3D, suitably aligned.
            ok(unsafe { get(h, &mut *c) })?;
            Work::Memcpy(c)
        }
        2 => {
            let get = entry!(c"cuGraphMemsetNodeGetParams": fn(CUgraphNode, *mut sys::CUDA_MEMSET_NODE_PARAMS))
                .ok_or(RunOnce::Introspection)?;
            // SAFETY: plain data the driver fills.
            let mut m: sys::CUDA_MEMSET_NODE_PARAMS = unsafe { std::mem::zeroed() };
            // SAFETY: a memset node; out pointer to a live local.
            ok(unsafe { get(h, &mut m) })?;
            if !matches!(m.elementSize, 1 | 2 | 4) {
                return Err(RunOnce::NodeType);
            }
            Work::Memset(m)
        }
        3 => {
            let get = entry!(c"cuGraphHostNodeGetParams": fn(CUgraphNode, *mut [usize; 2]))
                .ok_or(RunOnce::Introspection)?;
            let mut p = [0usize; 2];
            // SAFETY: a host node; CUDA_HOST_NODE_PARAMS begins with the function and its
            // data (a later field, where the header has one, is not read).
            ok(unsafe { get(h, &mut p) })?;
            Work::Host {
                func: p[0],
                data: p[1],
            }
        }
        4 => {
            let get = entry!(c"cuGraphChildGraphNodeGetGraph": fn(CUgraphNode, *mut CUgraph))
                .ok_or(RunOnce::Introspection)?;
            let mut child: CUgraph = std::ptr::null_mut();
            // SAFETY: a child-graph node; out pointer to a live local.
            ok(unsafe { get(h, &mut child) })?;
            // SAFETY: the driver's handle of the node's child graph.
            Work::Child(Box::new(unsafe { read_graph(child, depth + 1) }?))
        }
        5 => Work::Empty,
        6 | 7 => {
            let get = if ty == 6 {
                entry!(c"cuGraphEventWaitNodeGetEvent": fn(CUgraphNode, *mut usize))
            } else {
                entry!(c"cuGraphEventRecordNodeGetEvent": fn(CUgraphNode, *mut usize))
            }
            .ok_or(RunOnce::Introspection)?;
            let mut e = 0usize;
            // SAFETY: an event node; out pointer to a live local.
            ok(unsafe { get(h, &mut e) })?;
            if ty == 6 {
                Work::EventWait(e)
            } else {
                Work::EventRecord(e)
            }
        }
        _ => return Err(RunOnce::NodeType),
    })
}

/// A cluster shape or the cooperative attribute would be lost by a plain relaunch. A driver
/// without the entry has no attributes to lose.
fn kernel_attributes_ok(h: CUgraphNode) -> Result<(), RunOnce> {
    let Some(get) =
        entry!(c"cuGraphKernelNodeGetAttribute": fn(CUgraphNode, c_uint, *mut [u8; 64]))
    else {
        return Ok(());
    };
    // CU_LAUNCH_ATTRIBUTE_COOPERATIVE (2): an int; CLUSTER_DIMENSION (4): three unsigned ints.
    let mut v = [0u8; 64];
    // SAFETY: a kernel node; the attribute value union is 64 bytes.
    if unsafe { get(h, 2, &mut v) } == CUresult::CUDA_SUCCESS && v[..4] != [0; 4] {
        return Err(RunOnce::KernelAttributes);
    }
    let mut v = [0u8; 64];
    // SAFETY: as above.
    if unsafe { get(h, 4, &mut v) } == CUresult::CUDA_SUCCESS {
        let dim = |i: usize| u32::from_le_bytes([v[i], v[i + 1], v[i + 2], v[i + 3]]);
        if (dim(0), dim(4), dim(8)) != (0, 0, 0) && (dim(0), dim(4), dim(8)) != (1, 1, 1) {
            return Err(RunOnce::KernelAttributes);
        }
    }
    Ok(())
}

/// A kernel node's launch, its arguments copied by value.
///
/// # Safety
/// `p.kernelParams` holds one live pointer per parameter of the function (the driver's or
/// the application's contract for node parameters).
unsafe fn kernel_work(p: &sys::CUDA_KERNEL_NODE_PARAMS) -> Result<Work, RunOnce> {
    let func = if p.func.is_null() {
        // A CUkernel may stand where a CUfunction is expected.
        p.kern as CUfunction
    } else {
        p.func
    };
    if func.is_null() {
        return Err(RunOnce::Introspection);
    }
    // The unrolled launch runs on the launch's context; a node bound elsewhere would not.
    if !p.ctx.is_null() && p.ctx != super::current_context() {
        return Err(RunOnce::OtherContext);
    }
    if !p.extra.is_null() {
        return Err(RunOnce::LayoutUnknown);
    }
    // A node captured from a launch by a library kernel's handle holds the context's function
    // of that kernel, which the hooks never saw: the kernel maps it to its image.
    super::images::note_node_kernel(func, p.kern);
    let info = state().func_info(func);
    let layout = info.layout.as_ref().ok_or(RunOnce::LayoutUnknown)?;
    if !layout.is_empty() && p.kernelParams.is_null() {
        return Err(RunOnce::LayoutUnknown);
    }
    let end = layout
        .iter()
        .map(|s| s.offset as usize + s.size as usize)
        .max()
        .unwrap_or(0);
    let mut block_bytes = vec![0u8; end.next_multiple_of(8)];
    let mut offsets = Vec::with_capacity(layout.len());
    for (i, s) in layout.iter().enumerate() {
        // SAFETY: the caller's contract: parameter `i` points to `s.size` bytes.
        let src = unsafe { *p.kernelParams.add(i) } as *const u8;
        if src.is_null() {
            return Err(RunOnce::LayoutUnknown);
        }
        let o = s.offset as usize;
        // SAFETY: as above; the destination lies inside `block_bytes` (its end is the max).
        unsafe {
            std::ptr::copy_nonoverlapping(src, block_bytes.as_mut_ptr().add(o), s.size as usize)
        };
        offsets.push(o);
    }
    Ok(Work::Kernel {
        func,
        grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
        block: [p.blockDimX, p.blockDimY, p.blockDimZ],
        shmem: p.sharedMemBytes,
        block_bytes,
        offsets,
    })
}

/// CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.
const DEVICE_LAUNCH: u64 = 4;

/// Records a new executable graph.
///
/// # Safety
/// `g` is the live template `exec` was just instantiated from.
unsafe fn record(exec: CUgraphExec, g: CUgraph, flags: u64) {
    let topo = if flags & DEVICE_LAUNCH != 0 {
        Err(RunOnce::DeviceLaunch)
    } else {
        // SAFETY: the caller's contract.
        unsafe { read_graph(g, 0) }
    };
    let e = Arc::new(Exec {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        topo: Mutex::new(topo),
        launches: AtomicU64::new(0),
    });
    execs().lock().insert(exec as usize, e);
}

fn lookup(exec: CUgraphExec) -> Option<Arc<Exec>> {
    execs().lock().get(&(exec as usize)).cloned()
}

/// Hook of `cuGraphInstantiateWithFlags`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_instantiate_with_flags(
    real: unsafe extern "C" fn(*mut CUgraphExec, CUgraph, u64) -> CUresult,
    reached: &mut bool,
    out: *mut CUgraphExec,
    g: CUgraph,
    flags: u64,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(out, g, flags) };
    if r == CUresult::CUDA_SUCCESS && !out.is_null() {
        // SAFETY: the driver wrote the new executable graph; `g` is the caller's template.
        unsafe { record(*out, g, flags) };
    }
    r
}

/// Hook of `cuGraphInstantiateWithParams`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_instantiate_with_params(
    real: unsafe extern "C" fn(
        *mut CUgraphExec,
        CUgraph,
        *mut sys::CUDA_GRAPH_INSTANTIATE_PARAMS,
    ) -> CUresult,
    reached: &mut bool,
    out: *mut CUgraphExec,
    g: CUgraph,
    p: *mut sys::CUDA_GRAPH_INSTANTIATE_PARAMS,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(out, g, p) };
    if r == CUresult::CUDA_SUCCESS && !out.is_null() {
        let flags = if p.is_null() {
            0
        } else {
            // SAFETY: the caller's parameters (read after the call, as the driver left them).
            unsafe { (*p).flags }
        };
        // SAFETY: as in `hook_instantiate_with_flags`.
        unsafe { record(*out, g, flags) };
    }
    r
}

/// Hook of `cuGraphExecDestroy`: the model is forgotten first.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_exec_destroy(
    real: unsafe extern "C" fn(CUgraphExec) -> CUresult,
    reached: &mut bool,
    exec: CUgraphExec,
) -> CUresult {
    execs().lock().remove(&(exec as usize));
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(exec) }
}

/// Hook of `cuGraphExecKernelNodeSetParams` (both forms: the older struct is a prefix of the
/// newer and only that prefix is read when `V2` is false).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_exec_kernel_set<const V2: bool>(
    real: unsafe extern "C" fn(
        CUgraphExec,
        CUgraphNode,
        *const sys::CUDA_KERNEL_NODE_PARAMS,
    ) -> CUresult,
    reached: &mut bool,
    exec: CUgraphExec,
    node: CUgraphNode,
    p: *const sys::CUDA_KERNEL_NODE_PARAMS,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(exec, node, p) };
    if r != CUresult::CUDA_SUCCESS || p.is_null() {
        return r;
    }
    let Some(e) = lookup(exec) else { return r };
    // SAFETY: the caller's parameters, valid for the call: the first fields always, `kern`
    // and `ctx` only in the newer form.
    let params = unsafe {
        let mut q: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
        std::ptr::copy_nonoverlapping(
            p.cast::<u8>(),
            (&mut q as *mut sys::CUDA_KERNEL_NODE_PARAMS).cast::<u8>(),
            if V2 {
                std::mem::size_of::<sys::CUDA_KERNEL_NODE_PARAMS>()
            } else {
                std::mem::offset_of!(sys::CUDA_KERNEL_NODE_PARAMS, kern)
            },
        );
        q
    };
    // SAFETY: the caller's kernelParams, live for the call.
    let work = unsafe { kernel_work(&params) };
    let mut t = e.topo.lock();
    let updated = match (&mut *t, work) {
        (Ok(topo), Ok(w)) => match topo.find_mut(node as usize) {
            Some(n) => {
                n.work = w;
                Ok(())
            }
            None => Err(RunOnce::UpdatedUnmodelled),
        },
        (Ok(_), Err(why)) => Err(why),
        (Err(_), _) => Ok(()),
    };
    if let Err(why) = updated {
        *t = Err(why);
    }
    r
}

/// Hook of `cuGraphNodeSetEnabled`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_node_set_enabled(
    real: unsafe extern "C" fn(CUgraphExec, CUgraphNode, c_uint) -> CUresult,
    reached: &mut bool,
    exec: CUgraphExec,
    node: CUgraphNode,
    on: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(exec, node, on) };
    if r == CUresult::CUDA_SUCCESS {
        if let Some(e) = lookup(exec) {
            let mut t = e.topo.lock();
            if let Ok(topo) = &mut *t {
                match topo.find_mut(node as usize) {
                    Some(n) => n.enabled = on != 0,
                    None => *t = Err(RunOnce::UpdatedUnmodelled),
                }
            }
        }
    }
    r
}

/// After a successful whole-graph update: every node's work from template `g`, paired in
/// order with the model's nodes.
///
/// # Safety
/// `g` is the live template the update took.
unsafe fn updated_from(exec: CUgraphExec, g: CUgraph) {
    let Some(e) = lookup(exec) else { return };
    // SAFETY: the caller's contract.
    let fresh = unsafe { read_graph(g, 0) };
    let mut t = e.topo.lock();
    let merged = match (&*t, fresh) {
        (Ok(old), Ok(mut new)) if old.nodes.len() == new.nodes.len() => {
            for (n, o) in new.nodes.iter_mut().zip(&old.nodes) {
                let mut h = o.handles.clone();
                h.extend(n.handles.iter().copied());
                n.handles = h;
                n.enabled = o.enabled;
            }
            Ok(new)
        }
        (Ok(_), Ok(_)) => Err(RunOnce::UpdatedUnmodelled),
        (Ok(_), Err(why)) => Err(why),
        (Err(why), _) => Err(*why),
    };
    *t = merged;
}

/// Hook of `cuGraphExecUpdate_v2`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_exec_update_v2(
    real: unsafe extern "C" fn(CUgraphExec, CUgraph, *mut c_void) -> CUresult,
    reached: &mut bool,
    exec: CUgraphExec,
    g: CUgraph,
    info: *mut c_void,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(exec, g, info) };
    if r == CUresult::CUDA_SUCCESS {
        // SAFETY: the caller's live template.
        unsafe { updated_from(exec, g) };
    }
    r
}

/// Hook of the older `cuGraphExecUpdate` (error node and result out).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_exec_update(
    real: unsafe extern "C" fn(CUgraphExec, CUgraph, *mut CUgraphNode, *mut c_void) -> CUresult,
    reached: &mut bool,
    exec: CUgraphExec,
    g: CUgraph,
    err: *mut CUgraphNode,
    result: *mut c_void,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(exec, g, err, result) };
    if r == CUresult::CUDA_SUCCESS {
        // SAFETY: the caller's live template.
        unsafe { updated_from(exec, g) };
    }
    r
}

/// Hook of the per-node setters the model does not follow (memcpy, memset, host, child
/// graph, event, the generic `cuGraphExecNodeSetParams`): after one succeeded the graph runs
/// once.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_exec_set_unmodelled3(
    real: unsafe extern "C" fn(CUgraphExec, CUgraphNode, *const c_void) -> CUresult,
    reached: &mut bool,
    exec: CUgraphExec,
    node: CUgraphNode,
    p: *const c_void,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(exec, node, p) };
    if r == CUresult::CUDA_SUCCESS {
        taint(exec);
    }
    r
}

/// As [`hook_exec_set_unmodelled3`], for the setters that also take a context.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_exec_set_unmodelled4(
    real: unsafe extern "C" fn(CUgraphExec, CUgraphNode, *const c_void, *mut c_void) -> CUresult,
    reached: &mut bool,
    exec: CUgraphExec,
    node: CUgraphNode,
    p: *const c_void,
    ctx: *mut c_void,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(exec, node, p, ctx) };
    if r == CUresult::CUDA_SUCCESS {
        taint(exec);
    }
    r
}

fn taint(exec: CUgraphExec) {
    if let Some(e) = lookup(exec) {
        *e.topo.lock() = Err(RunOnce::UpdatedUnmodelled);
    }
}

/// What `cuGraphLaunch` does with `exec` under the current mode: `Err` runs it once.
fn plan(exec: CUgraphExec) -> Result<(u64, u64, Topo), RunOnce> {
    if mode() == GraphProfiling::Off {
        return Err(RunOnce::Off);
    }
    let e = lookup(exec).ok_or(RunOnce::UnseenGraph)?;
    let topo = e.topo.lock().clone()?;
    if mode() == GraphProfiling::Graph && topo.has_host_nodes() {
        return Err(RunOnce::HostNode);
    }
    Ok((e.id, e.launches.fetch_add(1, Ordering::Relaxed), topo))
}

/// Runs `topo` node by node on `stream` (node mode). Returns the first error a node's call
/// returned; the nodes after it do not run (the application sees the error, as it would
/// see the graph's).
///
/// # Safety
/// `stream` is the application's launch stream; the model's handles are live.
unsafe fn unroll(
    topo: &Topo,
    graph: u64,
    launch: u64,
    stream: CUstream,
    reached: &mut bool,
) -> CUresult {
    state()
        .counters
        .graph_unrolled
        .fetch_add(1, Ordering::Relaxed);
    let Some(order) = topo.order() else {
        return CUresult::CUDA_ERROR_INVALID_VALUE;
    };
    let serialized = topo.has_branches(&order);
    let mut position = 0u32;
    // SAFETY: the caller's contract.
    unsafe {
        run_nodes(
            topo,
            &order,
            graph,
            launch,
            serialized,
            stream,
            &mut position,
            reached,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn run_nodes(
    topo: &Topo,
    order: &[usize],
    graph: u64,
    launch: u64,
    serialized: bool,
    stream: CUstream,
    position: &mut u32,
    reached: &mut bool,
) -> CUresult {
    for &i in order {
        let node = &topo.nodes[i];
        let here = *position;
        *position += 1;
        if !node.enabled {
            continue;
        }
        let r = match &node.work {
            Work::Kernel {
                func,
                grid,
                block,
                shmem,
                block_bytes,
                offsets,
            } => {
                let Some(real) = entry!(c"cuLaunchKernel": fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void))
                else {
                    return CUresult::CUDA_ERROR_NOT_FOUND;
                };
                // The arguments of this launch: a copy, since a pass may launch it again.
                let mut bytes = block_bytes.clone();
                let mut params: Vec<*mut c_void> = offsets
                    .iter()
                    // SAFETY: each offset lies inside the block (kernel_work).
                    .map(|&o| unsafe { bytes.as_mut_ptr().add(o) }.cast())
                    .collect();
                let pp = if params.is_empty() {
                    std::ptr::null_mut()
                } else {
                    params.as_mut_ptr()
                };
                let l = Intercepted {
                    f: *func,
                    grid: Dim3::new(grid[0], grid[1], grid[2]),
                    block: Dim3::new(block[0], block[1], block[2]),
                    shmem: *shmem,
                    stream,
                    params: pp,
                    extra: std::ptr::null_mut(),
                    cooperative: false,
                };
                let how = How::Kernel {
                    real,
                    f: *func,
                    grid: *grid,
                    block: *block,
                    shmem: *shmem,
                    stream,
                    params: pp,
                    extra: std::ptr::null_mut(),
                };
                state()
                    .counters
                    .graph_node_kernels
                    .fetch_add(1, Ordering::Relaxed);
                let previous = crate::graph_tag::replace(Some(NodeTag {
                    graph,
                    node: here,
                    launch,
                    serialized,
                }));
                // SAFETY: the arguments live in `bytes` until the launch returns.
                let r = unsafe { hooks::run_launch(l, how, reached) };
                crate::graph_tag::replace(previous);
                drop(params);
                drop(bytes);
                r
            }
            Work::Child(child) => {
                let Some(o) = child.order() else {
                    return CUresult::CUDA_ERROR_INVALID_VALUE;
                };
                // SAFETY: the caller's contract.
                unsafe {
                    run_nodes(
                        child, &o, graph, launch, serialized, stream, position, reached,
                    )
                }
            }
            // SAFETY: the node's recorded parameters, on the caller's stream.
            other => unsafe { run_plain(other, stream, reached) },
        };
        if r != CUresult::CUDA_SUCCESS {
            return r;
        }
    }
    CUresult::CUDA_SUCCESS
}

/// A node that is not a kernel, once, under the agent's write gate (a window on another
/// thread must not restore over it).
///
/// # Safety
/// The node's parameters are as the driver gave them; `stream` the application's.
unsafe fn run_plain(w: &Work, stream: CUstream, reached: &mut bool) -> CUresult {
    let _gate = crate::intercept::gate::gate_agent().map(|(svc, a)| svc.enter_write(a));
    *reached = true;
    let missing = CUresult::CUDA_ERROR_NOT_FOUND;
    match w {
        Work::Memcpy(c) => {
            match entry!(c"cuMemcpy3DAsync_v2": fn(*const [u64; MEMCPY3D_WORDS], CUstream)) {
                // SAFETY: the node's copy as the driver described it.
                Some(f) => unsafe { f(&**c, stream) },
                None => missing,
            }
        }
        Work::Memset(m) => {
            let pitch = m.pitch.max(m.width * m.elementSize as usize);
            let d8 = entry!(c"cuMemsetD2D8Async": fn(u64, usize, u8, usize, usize, CUstream));
            let d16 = entry!(c"cuMemsetD2D16Async": fn(u64, usize, u16, usize, usize, CUstream));
            let d32 = entry!(c"cuMemsetD2D32Async": fn(u64, usize, c_uint, usize, usize, CUstream));
            let (dst, v, w, h) = (m.dst, m.value, m.width, m.height);
            // SAFETY: the node's memset as the driver described it (element size checked).
            unsafe {
                match (m.elementSize, d8, d16, d32) {
                    (1, Some(f), _, _) => f(dst, pitch, v as u8, w, h, stream),
                    (2, _, Some(f), _) => f(dst, pitch, v as u16, w, h, stream),
                    (4, _, _, Some(f)) => f(dst, pitch, v, w, h, stream),
                    _ => missing,
                }
            }
        }
        Work::Host { func, data } => {
            match entry!(c"cuLaunchHostFunc": fn(CUstream, usize, usize)) {
                // SAFETY: the application's host function and its data, as the node held them.
                Some(f) => unsafe { f(stream, *func, *data) },
                None => missing,
            }
        }
        Work::EventRecord(e) => match entry!(c"cuEventRecord": fn(usize, CUstream)) {
            // SAFETY: the node's event, on the launch stream.
            Some(f) => unsafe { f(*e, stream) },
            None => missing,
        },
        Work::EventWait(e) => match entry!(c"cuStreamWaitEvent": fn(CUstream, usize, c_uint)) {
            // SAFETY: as above.
            Some(f) => unsafe { f(stream, *e, 0) },
            None => missing,
        },
        Work::Empty | Work::Kernel { .. } | Work::Child(_) => CUresult::CUDA_SUCCESS,
    }
}

/// Every 8-byte word a graph-mode window's scope reads: each kernel node's argument block,
/// and the destination of each memcpy and memset node.
fn scope_words(topo: &Topo, out: &mut smallvec::SmallVec<[u8; 256]>) {
    for n in topo.nodes.iter().filter(|n| n.enabled) {
        match &n.work {
            Work::Kernel { block_bytes, .. } => out.extend_from_slice(block_bytes),
            Work::Memcpy(c) => {
                let word = |off: usize| c[off / 8];
                let host = word(std::mem::offset_of!(sys::CUDA_MEMCPY3D, dstMemoryType)) as u32
                    == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32;
                let d = if host {
                    word(std::mem::offset_of!(sys::CUDA_MEMCPY3D, dstHost))
                } else {
                    word(std::mem::offset_of!(sys::CUDA_MEMCPY3D, dstDevice))
                };
                out.extend_from_slice(&d.to_le_bytes());
            }
            Work::Memset(m) => out.extend_from_slice(&m.dst.to_le_bytes()),
            Work::Child(c) => scope_words(c, out),
            _ => {}
        }
    }
}

/// Whether every kernel node's layout is known (always, once modelled: unknown layouts are
/// not modelled), and the first kernel node's function, which names a graph-mode dispatch.
fn first_kernel(topo: &Topo) -> Option<CUfunction> {
    topo.nodes.iter().find_map(|n| match &n.work {
        Work::Kernel { func, .. } => Some(*func),
        Work::Child(c) => first_kernel(c),
        _ => None,
    })
}

/// Hook of `cuGraphLaunch` (`PTSZ`: `cuGraphLaunch_ptsz`): counted, then as the mode says
/// (node by node, whole inside one window, or once under the write gate).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_graph_launch<const PTSZ: bool>(
    real: unsafe extern "C" fn(CUgraphExec, CUstream) -> CUresult,
    reached: &mut bool,
    g: CUgraphExec,
    s: CUstream,
) -> CUresult {
    state()
        .counters
        .graph_launch
        .fetch_add(1, Ordering::Relaxed);
    crate::intercept::stream::note_stream(s);
    // SAFETY: the caller's contract.
    unsafe { launch(real, reached, g, s, hooks::effective_stream::<PTSZ>(s)) }
}

/// `cuGraphLaunch` of `exec` on `stream` (`effective`: the same, with the per-thread default
/// stream spelled out for the library's own calls).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn launch(
    real: unsafe extern "C" fn(CUgraphExec, CUstream) -> CUresult,
    reached: &mut bool,
    exec: CUgraphExec,
    stream: CUstream,
    effective: CUstream,
) -> CUresult {
    let once = |why: Option<RunOnce>, reached: &mut bool| {
        if let Some(why) = why {
            count_once(why);
        }
        let _gate = crate::intercept::gate::gate_agent().map(|(svc, a)| svc.enter_write(a));
        *reached = true;
        // SAFETY: forwarded as given.
        unsafe { real(exec, stream) }
    };
    let Some(service) = super::service() else {
        *reached = true;
        // SAFETY: forwarded as given.
        return unsafe { real(exec, stream) };
    };
    // As for a launch: nothing the library does here may disturb another thread's capture.
    let _relaxed = crate::queue::RelaxedCapture::enter();
    let s = state();
    if crate::queue::capture_status(effective).is_ok_and(|c| c.is_live()) {
        // It becomes a node of the capture, replayed when that graph is launched.
        return once(Some(RunOnce::Capture), reached);
    }
    let Some(backend) = hooks::launch_backend(s) else {
        return once(None, reached);
    };
    let agent = backend.agent_id();
    s.register_stream(&backend, effective);
    if s.beside_live_capture(agent) {
        return once(Some(RunOnce::BesideCapture), reached);
    }
    if s.behind_host_wait(agent) {
        return once(Some(RunOnce::BehindHostWait), reached);
    }
    let (id, n, topo) = match plan(exec) {
        Ok(p) => p,
        Err(why) => return once(Some(why), reached),
    };
    match mode() {
        // SAFETY: the caller's contract; the model's handles belong to `exec`.
        GraphProfiling::Node => unsafe { unroll(&topo, id, n, effective, reached) },
        // SAFETY: as above.
        _ => unsafe {
            whole(
                &service, &backend, &topo, id, n, real, exec, stream, effective, reached,
            )
        },
    }
}

/// Graph mode: the whole launch under one window, each pass one launch of the graph.
///
/// # Safety
/// As [`launch`].
#[allow(clippy::too_many_arguments)]
unsafe fn whole(
    service: &Arc<replay_core::ReplayService>,
    backend: &Arc<crate::CudaBackend>,
    topo: &Topo,
    id: u64,
    n: u64,
    real: unsafe extern "C" fn(CUgraphExec, CUstream) -> CUresult,
    exec: CUgraphExec,
    stream: CUstream,
    effective: CUstream,
    reached: &mut bool,
) -> CUresult {
    use replay_core::{
        Dispatch, DispatchId, DispatchInfo, KernelId, KernelKey, Origin, SubmissionKind,
    };
    state().counters.graph_whole.fetch_add(1, Ordering::Relaxed);
    let s = state();
    let agent = backend.agent_id();
    let mut kernarg = smallvec::SmallVec::<[u8; 256]>::new();
    scope_words(topo, &mut kernarg);
    // Every kernel node's image: its globals join the scope, its unseen writes decline.
    let mut unknown = None;
    let mut unseen = super::unseen::Check::default();
    let mut code_object = 0;
    for_each_kernel(topo, &mut |func, block| {
        let image = super::images::launch_image(func);
        let info = s.func_info(func);
        super::images::resolve_globals(agent, &image, backend.modules(), &s.tracker);
        if unknown.is_none() {
            unknown = super::images::unknown_globals(&image, &info.name);
        }
        unseen = std::mem::take(&mut unseen)
            .merge(super::unseen::check(block, true, &image, &info.name));
        if code_object == 0 {
            code_object = image.code_object();
        }
    });
    for w in unseen.target_words() {
        kernarg.extend_from_slice(&w);
    }
    let name: Arc<str> = match first_kernel(topo) {
        Some(f) => Arc::from(format!("graph {id} ({})", s.func_info(f).name).as_str()),
        None => Arc::from(format!("graph {id}").as_str()),
    };
    let relaunch = crate::launch::Relaunch::new(How::Graph { real, exec, stream });
    let captured = Arc::new(crate::agent::CapturedLaunch {
        func: std::ptr::null_mut(),
        cfg: crate::launch::LaunchConfig {
            grid: Dim3::new(1, 1, 1),
            block: Dim3::new(1, 1, 1),
            shared_mem_bytes: 0,
        },
        stream: effective,
        layout: smallvec::SmallVec::new(),
        completion: None,
        _keep: None,
        relaunch: Some(relaunch),
    });
    let handle = backend.agent().register_launch(Arc::clone(&captured));
    let dispatch = Dispatch {
        info: DispatchInfo {
            agent,
            queue: replay_core::QueueId(effective as u64),
            dispatch_id: DispatchId(0),
            kernel_id: KernelId(exec as u64),
            kernel_name: name,
            grid: Dim3::new(1, 1, 1),
            workgroup: Dim3::new(1, 1, 1),
            private_segment_size: 0,
            group_segment_size: 0,
        },
        kernel: KernelKey {
            agent,
            code_object,
            symbol: exec as u64,
        },
        kind: SubmissionKind::KernelDispatch,
        kernarg,
        origin: Origin::SubmittingThread,
        handle,
        arg_layout: replay_core::ArgLayout::Known,
    };
    s.counters.submitted.fetch_add(1, Ordering::Relaxed);
    *reached = true;
    let globals = super::images::GlobalsGate::new(&**backend.engine(), unknown);
    let memory = super::unseen::UnseenGate::new(&globals, unseen);
    let previous = crate::graph_tag::replace(Some(NodeTag {
        graph: id,
        node: u32::MAX,
        launch: n,
        serialized: false,
    }));
    let r = service.submit(&**backend.agent(), &memory, dispatch);
    crate::graph_tag::replace(previous);
    backend.agent().unregister_launch(handle);
    backend.memory().release_deferred(false);
    let rl = captured.relaunch.as_ref().expect("set above");
    if rl.launches.load(Ordering::Relaxed) == 0 {
        if let Err(e) = &r {
            log::warn!("[kernel-replay] graph {id}: {e}; launching once");
        }
        s.counters.fallback_launch.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as given, once.
        return unsafe { real(exec, stream) };
    }
    if let Err(e) = &r {
        log::warn!("[kernel-replay] graph {id}: {e}");
    }
    let last = *rl.last.lock();
    last
}

fn for_each_kernel(topo: &Topo, f: &mut dyn FnMut(CUfunction, &[u8])) {
    for n in topo.nodes.iter().filter(|n| n.enabled) {
        match &n.work {
            Work::Kernel {
                func, block_bytes, ..
            } => f(*func, block_bytes),
            Work::Child(c) => for_each_kernel(c, f),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_variable_takes_three_values_and_names_a_bad_one() {
        assert_eq!(GraphProfiling::parse("node"), Ok(GraphProfiling::Node));
        assert_eq!(GraphProfiling::parse("Graph"), Ok(GraphProfiling::Graph));
        assert_eq!(GraphProfiling::parse("off"), Ok(GraphProfiling::Off));
        let e = GraphProfiling::parse("nodes").unwrap_err();
        assert_eq!(e.variable, GRAPH_PROFILING_ENV);
        assert!(e.to_string().contains("node, graph or off"), "{e}");
    }

    fn node(deps: &[usize]) -> Node {
        Node {
            handles: vec![],
            deps: deps.to_vec(),
            work: Work::Empty,
            enabled: true,
        }
    }

    #[test]
    fn a_diamond_unrolls_in_dependency_order_and_says_it_was_serialised() {
        // 2 -> {0, 3} -> 1, listed out of order.
        let t = Topo {
            nodes: vec![node(&[2]), node(&[3, 0]), node(&[]), node(&[2])],
        };
        let o = t.order().unwrap();
        assert_eq!(o, vec![2, 0, 3, 1]);
        assert!(t.has_branches(&o));
        let chain = Topo {
            nodes: vec![node(&[]), node(&[0]), node(&[1])],
        };
        assert!(!chain.has_branches(&chain.order().unwrap()));
        let cycle = Topo {
            nodes: vec![node(&[1]), node(&[0])],
        };
        assert!(cycle.order().is_none());
    }
}
