//! Node mode's unrolled launch: a graph's nodes run one after another on the launch stream,
//! kernels as intercepted launches (each its own window), the other nodes as their driver
//! calls under the write gate. Kept apart from the launch's decision (`mod.rs`) because this
//! is the one part that re-issues the nodes' own work.

use std::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering;

use cudarc::driver::sys::{CUfunction, CUresult, CUstream};
use replay_core::Dim3;

use super::nodes::{Topo, Work, MEMCPY3D_WORDS};
use crate::graph_tag::NodeTag;
use crate::intercept::launch::{self as hooks, Intercepted};
use crate::launch::How;
use crate::state::state;

/// Runs `topo` node by node on `stream` (node mode). Returns the first error a node's call
/// returned; the nodes after it do not run (the application sees the error, as it would
/// see the graph's).
///
/// # Safety
/// `stream` is the application's launch stream; the model's handles are live.
pub(super) unsafe fn unroll(
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
