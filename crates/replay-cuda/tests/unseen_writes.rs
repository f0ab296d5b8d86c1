//! Writes the snapshot cannot see (SPEC §9.2), over the fake driver
//! (`tests/fake_driver/fake_inject.c`): each declines `unseen_writes` instead of replaying, and
//! the application's memory ends equal to one execution.
//!
//! - a kernel that read-modify-writes a CUDA array through a surface object passed as an
//!   argument (surf2Dread/surf2Dwrite); once the surface object is destroyed, the same word in
//!   another launch no longer declines; likewise over a 3D array (`cuArray3DCreate`) and over a
//!   level of a mipmapped array (`cuMipmappedArrayGetLevel`, the level known as part of its
//!   mipmapped array until that is destroyed);
//! - kernels of an image whose code calls the device heap (`malloc`/`free`), device `printf`
//!   (`vprintf`) or a device-side graph launch (`cudaGraphLaunch`), from a cubin's symbols or
//!   a PTX image's `.extern .func` declarations; the same image without them replays;
//! - a tensor map passed by value (tiled, im2col-wide, moved by `cuTensorMapReplaceAddress`):
//!   under scope `arguments` its target joins the scope (the kernel is replayed with it
//!   restored); a map over memory nobody tracks declines.
//!
//! Skipped where no C compiler is found, or where a real driver is present.

use std::ffi::c_void;
use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_core::{Outcome, OutcomeRecord, Policy, Reason, Scope};
use replay_cuda::intercept::{self, Internal};
use replay_cuda::module::elf::testing::{info, Builder};
use replay_cuda::module::image::testing::nv_info;
use replay_cuda::state;
use replay_cuda::sys;

mod support;
use support::{bind_device0, intercept_with, launch_block, load_app_function, load_fake, Fake};

/// Three passes; the last outcome kept.
#[derive(Default)]
struct Tool {
    last: Mutex<Option<OutcomeRecord>>,
}

impl ReplayTool for Tool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                p.replay_pass_count = Some(Arc::new(|_, _| 3));
            }
            (Operation::Config, Phase::Exit) => {
                *self.last.lock() = p.outcome.cloned();
            }
            _ => {}
        }
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

fn setup() -> Option<(parking_lot::MutexGuard<'static, ()>, Arc<Tool>)> {
    let guard = SERIAL.lock();
    load_fake(Fake::Inject)?;
    static TOOL: std::sync::OnceLock<Arc<Tool>> = std::sync::OnceLock::new();
    let tool = Arc::clone(TOOL.get_or_init(|| {
        let tool = Arc::new(Tool::default());
        intercept_with(Arc::clone(&tool) as Arc<dyn ReplayTool>);
        tool
    }));
    bind_device0();
    *tool.last.lock() = None;
    Some((guard, tool))
}

/// An application image without globals (the fake compiles nothing).
const APP_PTX: &[u8] =
    b".version 8.4\n.target sm_90\n.address_size 64\n.visible .entry kr_rmw()\n{\n\tret;\n}\n\0";

const N: usize = 512;

fn count(name: &str) -> u64 {
    state::state().counters_json()[name].as_u64().unwrap_or(0)
}

fn last(tool: &Tool) -> OutcomeRecord {
    tool.last.lock().clone().expect("an outcome")
}

fn assert_declined_unseen(rec: &OutcomeRecord, what: &str) {
    assert_eq!(rec.outcome, Outcome::Declined, "{what}: {rec:?}");
    assert_eq!(rec.reason, Reason::UnseenWrites, "{what}: {rec:?}");
    assert_eq!(rec.executed_passes, 1, "{what}: {rec:?}");
}

/// What one execution of the fake's read-modify-write kernels does with `k`.
fn rmw_once(v: &[u64], k: u64) -> Vec<u64> {
    v.iter()
        .enumerate()
        .map(|(i, x)| {
            x.wrapping_mul(6364136223846793005)
                .wrapping_add(k ^ i as u64)
        })
        .collect()
}

fn fill(p: *mut u64, seed: u64) -> Vec<u64> {
    let v: Vec<u64> = (0..N as u64).map(|i| i * 13 + seed).collect();
    // SAFETY: `p` is N words of the fake's memory (host memory at the device address).
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, N) };
    v
}

fn words(p: *const u64) -> Vec<u64> {
    // SAFETY: as in `fill`.
    unsafe { std::slice::from_raw_parts(p, N) }.to_vec()
}

/// A tracked device buffer of N words (the intercepted `cuMemAlloc`).
fn tracked_buffer() -> u64 {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: an out pointer to a live local.
    let r = unsafe { intercept::mem_alloc(&mut p, N * 8) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    p
}

/// Three 8-byte arguments through the intercepted `cuLaunchKernel`.
fn launch3(f: sys::CUfunction, mut a: u64, mut b: u64, mut c: u64) -> sys::CUresult {
    let mut args: [*mut c_void; 3] = [
        (&mut a as *mut u64).cast(),
        (&mut b as *mut u64).cast(),
        (&mut c as *mut u64).cast(),
    ];
    // SAFETY: three live 8-byte arguments, as the fake's kernels take.
    unsafe { launch_block(f, 64, &mut args) }
}

/// `CUDA_ARRAY_DESCRIPTOR`.
#[repr(C)]
struct ArrayDesc {
    width: usize,
    height: usize,
    format: u32,
    channels: u32,
}

/// `CUDA_RESOURCE_DESC` for an array resource.
#[repr(C)]
struct ResourceDesc {
    res_type: u32,
    _pad: u32,
    array: u64,
    _reserved: [u64; 15],
    flags: u32,
    _pad2: u32,
}

/// The fake's array: its size, then its storage.
#[repr(C)]
struct FakeArray {
    _bytes: u64,
    data: *mut u64,
}

#[test]
fn a_kernel_writing_a_cuda_array_through_a_surface_object_declines_unseen_writes() {
    let Some((_g, tool)) = setup() else { return };
    let (_m, surf_rmw) = load_app_function(APP_PTX, c"kr_surf_rmw");
    let (_m2, rmw) = load_app_function(APP_PTX, c"kr_rmw");
    // N words: N elements of two 32-bit channels.
    let desc = ArrayDesc {
        width: N,
        height: 1,
        format: 0x20,
        channels: 2,
    };
    let mut array = 0u64;
    // SAFETY: the wrapper's contract is the driver's: an out pointer and a descriptor.
    let r = unsafe { intercept::array_create(&mut array, (&desc as *const ArrayDesc).cast()) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    // SAFETY: the fake's array handle is its `FakeArray`.
    let data = unsafe { (*(array as *const FakeArray)).data };
    let before = fill(data, 3);
    let res = ResourceDesc {
        res_type: 0,
        _pad: 0,
        array,
        _reserved: [0; 15],
        flags: 0,
        _pad2: 0,
    };
    let mut surf = 0u64;
    // SAFETY: an out pointer and a resource descriptor of the array.
    let r =
        unsafe { intercept::surf_object_create(&mut surf, (&res as *const ResourceDesc).cast()) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let declined = count("declined_surface");

    assert_eq!(
        launch3(surf_rmw, surf, N as u64, 5),
        sys::CUresult::CUDA_SUCCESS
    );
    assert_declined_unseen(&last(&tool), "surface");
    assert_eq!(
        words(data),
        rmw_once(&before, 5),
        "the array saw one execution"
    );
    assert_eq!(count("declined_surface"), declined + 1);

    // Destroyed, its handle is an ordinary word again: a launch carrying it replays.
    // SAFETY: the surface object made above.
    let r = unsafe { intercept::surf_object_destroy(surf) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let buf = tracked_buffer();
    let b0 = fill(buf as *mut u64, 9);
    assert_eq!(
        launch3(rmw, buf, N as u64, surf),
        sys::CUresult::CUDA_SUCCESS
    );
    let rec = last(&tool);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec:?}");
    assert_eq!(words(buf as *const u64), rmw_once(&b0, surf));
    assert!(count("arrays_created") >= 1 && count("surfaces_created") >= 1);
    // SAFETY: the array made above, no surface over it left.
    unsafe { intercept::array_destroy(array) };
}

/// `CUDA_ARRAY3D_DESCRIPTOR`.
#[repr(C)]
struct Array3DDesc {
    width: usize,
    height: usize,
    depth: usize,
    format: u32,
    channels: u32,
    flags: u32,
}

/// A surface object over `array` (the intercepted `cuSurfObjectCreate`).
fn surface_over(array: u64) -> u64 {
    let res = ResourceDesc {
        res_type: 0,
        _pad: 0,
        array,
        _reserved: [0; 15],
        flags: 0,
        _pad2: 0,
    };
    let mut surf = 0u64;
    // SAFETY: an out pointer and a resource descriptor of the array.
    let r =
        unsafe { intercept::surf_object_create(&mut surf, (&res as *const ResourceDesc).cast()) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    surf
}

/// `kr_surf_rmw` through a surface object over `array` (the fake's, its first N words filled)
/// declines `unseen_writes` and the array sees one execution; the surface is destroyed after.
fn a_surface_over_declines(tool: &Tool, array: u64, seed: u64, what: &str) {
    let (_m, surf_rmw) = load_app_function(APP_PTX, c"kr_surf_rmw");
    // SAFETY: the fake's array handle is its `FakeArray`.
    let data = unsafe { (*(array as *const FakeArray)).data };
    let before = fill(data, seed);
    let surf = surface_over(array);
    let declined = count("declined_surface");
    assert_eq!(
        launch3(surf_rmw, surf, N as u64, seed),
        sys::CUresult::CUDA_SUCCESS
    );
    assert_declined_unseen(&last(tool), what);
    assert_eq!(
        words(data),
        rmw_once(&before, seed),
        "{what}: the array saw one execution"
    );
    assert_eq!(count("declined_surface"), declined + 1, "{what}");
    // SAFETY: the surface object made above.
    let r = unsafe { intercept::surf_object_destroy(surf) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
}

#[test]
fn a_kernel_writing_a_3d_array_through_a_surface_object_declines_unseen_writes() {
    let Some((_g, tool)) = setup() else { return };
    // N / 16 elements of two 32-bit channels per row, 4 rows, 4 layers: N words.
    let desc = Array3DDesc {
        width: N / 16,
        height: 4,
        depth: 4,
        format: 0x20,
        channels: 2,
        flags: 0x02, // CUDA_ARRAY3D_SURFACE_LDST
    };
    let created = count("arrays_created");
    let mut array = 0u64;
    // SAFETY: the wrapper's contract is the driver's: an out pointer and a descriptor.
    let r = unsafe { intercept::array_3d_create(&mut array, (&desc as *const Array3DDesc).cast()) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(count("arrays_created"), created + 1, "counted");
    a_surface_over_declines(&tool, array, 21, "3D array");
    // SAFETY: the array made above, no surface over it left.
    let r = unsafe { intercept::array_destroy(array) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
}

#[test]
fn a_kernel_writing_a_mipmapped_arrays_level_through_a_surface_object_declines_unseen_writes() {
    let Some((_g, tool)) = setup() else { return };
    // Level 0 of 2N elements of two 32-bit channels, 2D (depth 0); level 1 holds N words.
    let desc = Array3DDesc {
        width: 2 * N,
        height: 1,
        depth: 0,
        format: 0x20,
        channels: 2,
        flags: 0x02, // CUDA_ARRAY3D_SURFACE_LDST
    };
    let (created, levels) = (count("arrays_created"), count("mipmap_levels"));
    let mut mipmap = 0u64;
    // SAFETY: an out pointer and a descriptor, three levels.
    let r = unsafe {
        intercept::mipmapped_array_create(&mut mipmap, (&desc as *const Array3DDesc).cast(), 3)
    };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(count("arrays_created"), created + 1, "counted");
    let mut level = 0u64;
    // SAFETY: an out pointer, the mipmapped array made above and one of its levels.
    let r = unsafe { intercept::mipmapped_array_get_level(&mut level, mipmap, 1) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(count("mipmap_levels"), levels + 1);
    assert_eq!(
        state::unseen::mipmap_level(level),
        Some((mipmap, 1)),
        "the level array is known as part of its mipmapped array"
    );
    a_surface_over_declines(&tool, level, 23, "mipmapped array level");
    // SAFETY: the mipmapped array made above (its levels with it), no surface left.
    let r = unsafe { intercept::mipmapped_array_destroy(mipmap) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        state::unseen::mipmap_level(level),
        None,
        "forgotten with it"
    );
}

/// A cubin with kr_rmw's parameter table, and `symbol` (when given) as an undefined function.
fn cubin_calling(symbol: Option<&str>) -> Vec<u8> {
    let mut b = Builder::new();
    b.section(
        ".nv.info.kr_rmw",
        0x7000_0000,
        nv_info(&[(0, 8), (8, 8), (16, 8)]),
        0,
    );
    if let Some(s) = symbol {
        b.symbol(s, info(1, 2), 0, 0, 0); // GLOBAL FUNC, undefined (the driver links it)
    }
    b.build()
}

#[test]
fn kernels_of_an_image_calling_the_device_heap_printf_or_a_graph_launch_decline_unseen_writes() {
    let Some((_g, tool)) = setup() else { return };
    let ptx_printf = b".version 8.4\n.target sm_90\n.address_size 64\n\
        .extern .func  (.param .b32 func_retval0) vprintf\n(\n\t.param .b64 vprintf_param_0,\n\
        \t.param .b64 vprintf_param_1\n)\n;\n.visible .entry kr_rmw()\n{\n\tret;\n}\n\0"
        .to_vec();
    let cases: [(&str, Vec<u8>); 5] = [
        ("malloc", cubin_calling(Some("malloc"))),
        ("free", cubin_calling(Some("free"))),
        ("vprintf", cubin_calling(Some("vprintf"))),
        ("cudaGraphLaunch", cubin_calling(Some("cudaGraphLaunch"))),
        ("PTX vprintf", ptx_printf),
    ];
    let buf = tracked_buffer();
    for (what, image) in cases {
        let (m, f) = load_app_function(&image, c"kr_rmw");
        let before = fill(buf as *mut u64, 1);
        let declined = count("declined_device_service");
        assert_eq!(launch3(f, buf, N as u64, 11), sys::CUresult::CUDA_SUCCESS);
        assert_declined_unseen(&last(&tool), what);
        assert_eq!(words(buf as *const u64), rmw_once(&before, 11), "{what}");
        assert_eq!(count("declined_device_service"), declined + 1, "{what}");
        // SAFETY: the module loaded above.
        unsafe { intercept::module_unload(m) };
    }
    // The same image without those calls replays.
    let (m, f) = load_app_function(&cubin_calling(None), c"kr_rmw");
    let before = fill(buf as *mut u64, 2);
    assert_eq!(launch3(f, buf, N as u64, 11), sys::CUresult::CUDA_SUCCESS);
    let rec = last(&tool);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec:?}");
    assert_eq!(words(buf as *const u64), rmw_once(&before, 11));
    // SAFETY: the module loaded above.
    unsafe { intercept::module_unload(m) };
}

/// `kr_tma(map, N, k)` through the intercepted `cuLaunchKernel`: the map by value.
fn launch_tma(f: sys::CUfunction, map: &mut [u64; 16], k: u64) -> sys::CUresult {
    let (mut n, mut k) = (N as u64, k);
    let mut args: [*mut c_void; 3] = [
        map.as_mut_ptr().cast(),
        (&mut n as *mut u64).cast(),
        (&mut k as *mut u64).cast(),
    ];
    // SAFETY: kr_tma's parameters: a 128-byte map, two 8-byte words, all live.
    unsafe { launch_block(f, 64, &mut args) }
}

/// A one-dimensional map of N 8-byte elements at `addr` (the intercepted encode entry).
fn encode(addr: u64) -> [u64; 16] {
    let mut map = [0u64; 16];
    let dims = [N as u64];
    let boxd = [64u32];
    let estr = [1u32];
    // SAFETY: a 128-byte map, rank 1 (no strides), arrays of one element each.
    let r = unsafe {
        intercept::tensor_map_encode_tiled(
            map.as_mut_ptr().cast(),
            4, // CU_TENSOR_MAP_DATA_TYPE_UINT64
            1,
            addr as *mut c_void,
            dims.as_ptr(),
            std::ptr::null(),
            boxd.as_ptr(),
            estr.as_ptr(),
            0,
            0,
            0,
            0,
        )
    };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    map
}

/// An im2col-wide map of rank 3 (N x 1 x 1 elements of 8 bytes) at `addr`.
fn encode_wide(addr: u64) -> [u64; 16] {
    let mut map = [0u64; 16];
    let dims = [N as u64, 1, 1];
    let strides = [(N * 8) as u64, (N * 8) as u64];
    let estr = [1u32; 3];
    // SAFETY: a 128-byte map, rank 3 with its two strides, three element strides.
    let r = unsafe {
        intercept::tensor_map_encode_im2col_wide(
            map.as_mut_ptr().cast(),
            4, // CU_TENSOR_MAP_DATA_TYPE_UINT64
            3,
            addr as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            0,
            0,
            1,
            64,
            estr.as_ptr(),
            0,
            0,
            0,
            0,
            0,
        )
    };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    map
}

#[test]
fn a_tensor_maps_target_joins_the_scope_and_one_over_untracked_memory_declines() {
    let Some((_g, tool)) = setup() else { return };
    let svc = state::service().expect("the service");
    let old = (*svc.policy()).clone();
    svc.set_policy(Policy {
        scope: Scope::Arguments,
        ..old.clone()
    })
    .expect("a valid policy");
    let (_m, tma) = load_app_function(APP_PTX, c"kr_tma");

    let buf = tracked_buffer();
    let before = fill(buf as *mut u64, 4);
    let mut map = encode(buf);
    let launches = count("tensor_map_launches");
    assert_eq!(launch_tma(tma, &mut map, 6), sys::CUresult::CUDA_SUCCESS);
    let rec = last(&tool);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec:?}");
    assert!(rec.captured_bytes >= (N * 8) as u64, "{rec:?}");
    assert_eq!(words(buf as *const u64), rmw_once(&before, 6));
    assert_eq!(count("tensor_map_launches"), launches + 1);

    // An im2col-wide map (rank 3: N x 1 x 1) over a second buffer, then the same map moved
    // back to the first one by cuTensorMapReplaceAddress: each replays with its target
    // restored.
    let buf2 = tracked_buffer();
    let before2 = fill(buf2 as *mut u64, 5);
    let mut wide = encode_wide(buf2);
    assert_eq!(launch_tma(tma, &mut wide, 8), sys::CUresult::CUDA_SUCCESS);
    let rec = last(&tool);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec:?}");
    assert_eq!(words(buf2 as *const u64), rmw_once(&before2, 8));
    let before = words(buf as *const u64);
    // SAFETY: a map the encode entry wrote; a 16-byte-aligned address.
    let r = unsafe {
        intercept::tensor_map_replace_address(wide.as_mut_ptr().cast(), buf as *mut c_void)
    };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(launch_tma(tma, &mut wide, 9), sys::CUresult::CUDA_SUCCESS);
    let rec = last(&tool);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec:?}");
    assert_eq!(words(buf as *const u64), rmw_once(&before, 9));
    assert_eq!(count("tensor_map_launches"), launches + 3);

    // Memory the interception never saw allocated.
    let mut hidden: sys::CUdeviceptr = 0;
    {
        let _inside = Internal::enter();
        // SAFETY: an out pointer to a live local; inside the library, so no hook records it.
        let r = unsafe { sys::cuMemAlloc_v2(&mut hidden, N * 8) };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    }
    let before = fill(hidden as *mut u64, 8);
    let mut map = encode(hidden);
    let declined = count("declined_tensor_map");
    assert_eq!(launch_tma(tma, &mut map, 7), sys::CUresult::CUDA_SUCCESS);
    assert_declined_unseen(&last(&tool), "untracked target");
    assert_eq!(words(hidden as *const u64), rmw_once(&before, 7));
    assert_eq!(count("declined_tensor_map"), declined + 1);
    svc.set_policy(old).expect("the old policy");
}
