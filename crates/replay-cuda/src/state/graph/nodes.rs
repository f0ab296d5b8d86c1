//! The model of a graph: each node's work as the executable graph holds it (`Work`, `Node`,
//! `Topo`), read from a template through the driver's introspection entries, kernel
//! arguments copied by value while the driver still holds them. Reading is apart from the
//! registry and the launch because it is the one place that knows the driver's node types and
//! parameter structs.

use std::ffi::c_uint;

use cudarc::driver::sys::{self, CUfunction, CUgraph, CUgraphNode, CUresult};

use super::once::RunOnce;
use crate::state::state;

pub(super) const MEMCPY3D_WORDS: usize = std::mem::size_of::<sys::CUDA_MEMCPY3D>().div_ceil(8);

/// One node's work, as the executable graph holds it now.
#[derive(Debug, Clone)]
pub(super) enum Work {
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
pub(super) struct Node {
    /// The template node handles this node answers to (the instantiated template's, then
    /// those of every template it was updated from).
    pub(super) handles: Vec<usize>,
    pub(super) deps: Vec<usize>,
    pub(super) work: Work,
    pub(super) enabled: bool,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Topo {
    pub(super) nodes: Vec<Node>,
}

impl Topo {
    /// A topological order (Kahn's, lowest index first, so the same graph always unrolls the
    /// same way); `None` for a cycle.
    pub(super) fn order(&self) -> Option<Vec<usize>> {
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

    pub(super) fn find_mut(&mut self, handle: usize) -> Option<&mut Node> {
        self.nodes.iter_mut().find(|n| n.handles.contains(&handle))
    }

    /// Whether independent branches exist (some node is not ordered after the one before).
    pub(super) fn has_branches(&self, order: &[usize]) -> bool {
        order
            .windows(2)
            .any(|w| !self.nodes[w[1]].deps.contains(&w[0]))
            || self.nodes.iter().any(|n| match &n.work {
                Work::Child(c) => c.order().is_some_and(|o| c.has_branches(&o)),
                _ => false,
            })
    }

    pub(super) fn has_host_nodes(&self) -> bool {
        self.nodes.iter().any(|n| match &n.work {
            Work::Host { .. } => n.enabled,
            Work::Child(c) => c.has_host_nodes(),
            _ => false,
        })
    }
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
pub(super) unsafe fn read_graph(g: CUgraph, depth: u32) -> Result<Topo, RunOnce> {
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
pub(super) unsafe fn kernel_work(p: &sys::CUDA_KERNEL_NODE_PARAMS) -> Result<Work, RunOnce> {
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
    if !p.ctx.is_null() && p.ctx != crate::state::current_context() {
        return Err(RunOnce::OtherContext);
    }
    if !p.extra.is_null() {
        return Err(RunOnce::LayoutUnknown);
    }
    // A node captured from a launch by a library kernel's handle holds the context's function
    // of that kernel, which the hooks never saw: the kernel maps it to its image.
    crate::state::images::note_node_kernel(func, p.kern);
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

#[cfg(test)]
mod tests {
    use super::*;

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
