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
//!
//! This file holds the mode, the run-once reasons, the registry of executable graphs with the
//! hooks that keep it, what `cuGraphLaunch` decides and graph mode's whole launch; `nodes.rs`
//! reads a template into the model, `run.rs` runs the unrolled nodes of node mode.

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
use crate::intercept::launch as hooks;
use crate::launch::How;
use nodes::{kernel_work, read_graph, Topo, Work};
use run::unroll;

/// A driver entry the model needs that is not wrapped, looked up in the driver itself (never
/// one of the interception's wrappers); `None` where the driver lacks it.
macro_rules! entry {
    ($name:literal : fn($($t:ty),*)) => {
        $crate::state::images::optional_entry($name).map(|p| {
            // SAFETY: the driver's entry of this name has this signature (the CUDA headers).
            unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> CUresult>(p) }
        })
    };
}

// Declared after `entry!`, which they use.
mod nodes;
mod once;
mod run;

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
pub use once::RunOnce;

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
    use replay_core::{Dispatch, DispatchInfo, KernelId, KernelKey, Origin, SubmissionKind};
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
        super::images::globals::resolve_globals(agent, &image, backend.modules(), &s.tracker);
        if unknown.is_none() {
            unknown = super::images::globals::unknown_globals(&image, &info.name);
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
        info: DispatchInfo::new(
            agent,
            replay_core::QueueId(effective as u64),
            KernelId(exec as u64),
            name,
            Dim3::new(1, 1, 1),
            Dim3::new(1, 1, 1),
        ),
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
    let globals = super::images::globals::GlobalsGate::new(&**backend.engine(), unknown);
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
}
