//! The HSA tool entry points of `libkernel_replay` (feature `hsa`), exercised the way the HSA
//! runtime uses them: the shared object this test run built is opened with `dlopen` and its
//! `OnLoad` is called with synthetic API tables whose original entries are this file's fake
//! functions. Covered: an unknown major and a short table install nothing (entries unchanged,
//! `OnLoad` answers false, the reason is in `kreplay_hsa_state_json`); the current major
//! (root 3, core 2, AMD 2) and major 1 install the wrappers; wrapped allocations reach the
//! tracker with the SPEC §7.1 class, a free is recorded before the original runs, copies reach
//! the copy fence; the tool named by `KREPLAY_HSA_TOOL` (a C library built here, linking
//! `libkernel_replay`) is initialised and configures the same library instance.
//!
//! A second test runs the real HSA runtime (`libhsa-runtime64`) with `HSA_TOOLS_LIB` naming
//! the library: `hsa_init` on a machine without an AMD GPU must end cleanly. It skips when the
//! runtime or its headers are missing, unless `KREPLAY_REQUIRE_HSA=1` (CI sets it).
#![cfg(feature = "hsa")]

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::mem::size_of;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use kernel_replay::replay_hsa::sys::{self, v1, v2, ApiTableVersion};

// ----- The built library ---------------------------------------------------------------------

fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let deps = exe.parent().expect("the test executable is in a directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        if dir.join("libkernel_replay.so").exists() {
            return dir.to_path_buf();
        }
    }
    panic!(
        "libkernel_replay.so was not found next to {}",
        deps.display()
    );
}

type OnLoadFn = unsafe extern "C" fn(*mut c_void, u64, u64, *const *const c_char) -> bool;
type JsonFn = unsafe extern "C" fn(*mut c_char, usize, *mut usize) -> i32;

struct Lib {
    on_load: OnLoadFn,
    state_json: JsonFn,
    policy_json: JsonFn,
    _lib: libloading::Library,
}

fn lib() -> &'static Lib {
    static LIB: OnceLock<Lib> = OnceLock::new();
    LIB.get_or_init(|| {
        let path = library_dir().join("libkernel_replay.so");
        // SAFETY: loading the library this test run built; its initialisers are Rust's.
        let lib = unsafe { libloading::Library::new(&path) }.expect("dlopen libkernel_replay.so");
        // SAFETY: the symbols have these signatures (include/kernel_replay_hsa.h and
        // include/kernel_replay.h).
        unsafe {
            Lib {
                on_load: *lib.get::<OnLoadFn>(b"OnLoad").unwrap(),
                state_json: *lib.get::<JsonFn>(b"kreplay_hsa_state_json").unwrap(),
                policy_json: *lib.get::<JsonFn>(b"kreplay_policy_json").unwrap(),
                _lib: lib,
            }
        }
    })
}

fn json(f: JsonFn) -> serde_json::Value {
    let mut required = 0usize;
    // SAFETY: asking for the size with no buffer.
    unsafe { f(std::ptr::null_mut(), 0, &mut required) };
    let mut buf = vec![0u8; required];
    // SAFETY: a buffer of `required` bytes.
    let st = unsafe { f(buf.as_mut_ptr().cast(), buf.len(), &mut required) };
    assert_eq!(st, 0);
    let s = std::ffi::CStr::from_bytes_until_nul(&buf)
        .unwrap()
        .to_str()
        .unwrap();
    serde_json::from_str(s).unwrap()
}

fn state() -> serde_json::Value {
    json(lib().state_json)
}

fn on_load(root: *mut c_void) -> bool {
    // SAFETY: synthetic tables built below: versions, sizes and sub-table pointers consistent.
    unsafe { (lib().on_load)(root, 42, 0, std::ptr::null()) }
}

// ----- Fake originals ------------------------------------------------------------------------

const GPU: u64 = 0x6000;
const CPU: u64 = 0xc000;
/// Pool handles: owner agent << 8 | global flags.
const GPU_COARSE_POOL: u64 = GPU << 8 | 4;
const GPU_FINE_POOL: u64 = GPU << 8 | 2;
const CPU_KERNARG_POOL: u64 = CPU << 8 | 2 | 1;
const CPU_FINE_POOL: u64 = CPU << 8 | 2;

static NEXT_ADDR: AtomicU64 = AtomicU64::new(0x7000_0000);
/// address -> (owner agent, pointer type)
static OWNERS: Mutex<Option<HashMap<u64, (u64, u32)>>> = Mutex::new(None);
/// (address freed, was it still tracked when the original free ran)
static FREES: Mutex<Vec<(u64, bool)>> = Mutex::new(Vec::new());
static COPIES: AtomicU64 = AtomicU64::new(0);

fn new_addr(owner: u64, ty: u32) -> u64 {
    let a = NEXT_ADDR.fetch_add(0x10_0000, Ordering::Relaxed);
    OWNERS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(a, (owner, ty));
    a
}

fn tracked(addr: u64) -> bool {
    state()["regions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["base"].as_u64() == Some(addr))
}

unsafe extern "C" fn fake_agent_get_info(a: sys::hsa_agent_t, attr: u32, v: *mut c_void) -> u32 {
    if attr != sys::HSA_AGENT_INFO_DEVICE {
        return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let t = if a.handle == CPU {
        sys::HSA_DEVICE_TYPE_CPU
    } else {
        sys::HSA_DEVICE_TYPE_GPU
    };
    // SAFETY: the caller passes 4 writable bytes for this attribute.
    unsafe { v.cast::<u32>().write(t) };
    0
}
unsafe extern "C" fn fake_region_get_info(r: sys::hsa_region_t, attr: u32, v: *mut c_void) -> u32 {
    let value = match attr {
        sys::HSA_REGION_INFO_SEGMENT => sys::HSA_REGION_SEGMENT_GLOBAL,
        sys::HSA_REGION_INFO_GLOBAL_FLAGS => (r.handle & 0xff) as u32,
        _ => return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
    };
    // SAFETY: 4 writable bytes for these attributes.
    unsafe { v.cast::<u32>().write(value) };
    0
}
unsafe extern "C" fn fake_pool_get_info(
    p: sys::hsa_amd_memory_pool_t,
    attr: u32,
    v: *mut c_void,
) -> u32 {
    let value = match attr {
        sys::HSA_AMD_MEMORY_POOL_INFO_SEGMENT => sys::HSA_AMD_SEGMENT_GLOBAL,
        sys::HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS => (p.handle & 0xff) as u32,
        _ => return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
    };
    // SAFETY: 4 writable bytes for these attributes.
    unsafe { v.cast::<u32>().write(value) };
    0
}
unsafe extern "C" fn fake_memory_allocate(
    r: sys::hsa_region_t,
    _size: usize,
    p: *mut *mut c_void,
) -> u32 {
    // SAFETY: the caller's out-pointer.
    unsafe { p.write(new_addr(r.handle >> 8, 1) as *mut c_void) };
    0
}
unsafe extern "C" fn fake_pool_allocate(
    pool: sys::hsa_amd_memory_pool_t,
    _size: usize,
    _flags: u32,
    p: *mut *mut c_void,
) -> u32 {
    // SAFETY: the caller's out-pointer.
    unsafe { p.write(new_addr(pool.handle >> 8, 1) as *mut c_void) };
    0
}
unsafe extern "C" fn fake_free(p: *mut c_void) -> u32 {
    FREES.lock().unwrap().push((p as u64, tracked(p as u64)));
    0
}
unsafe extern "C" fn fake_signal_load(_: sys::hsa_signal_t) -> i64 {
    1
}
unsafe extern "C" fn fake_pointer_info(
    p: *const c_void,
    info: *mut sys::hsa_amd_pointer_info_t,
    _: Option<unsafe extern "C" fn(usize) -> *mut c_void>,
    _: *mut u32,
    _: *mut *mut sys::hsa_agent_t,
) -> u32 {
    let Some(&(owner, ty)) = OWNERS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .get(&(p as u64))
    else {
        return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    // SAFETY: the caller's out-struct, `size` set.
    unsafe {
        (*info).type_ = ty;
        (*info).agentOwner = sys::hsa_agent_t { handle: owner };
        (*info).agentBaseAddress = p.cast_mut();
    }
    0
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn fake_async_copy(
    _: *mut c_void,
    _: sys::hsa_agent_t,
    _: *const c_void,
    _: sys::hsa_agent_t,
    _: usize,
    _: u32,
    _: *const sys::hsa_signal_t,
    _: sys::hsa_signal_t,
) -> u32 {
    COPIES.fetch_add(1, Ordering::Relaxed);
    0
}
unsafe extern "C" fn fake_vmem_map(
    va: *mut c_void,
    _: usize,
    _: usize,
    _: sys::hsa_amd_vmem_alloc_handle_t,
    _: u64,
) -> u32 {
    OWNERS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(va as u64, (GPU, 6));
    0
}
unsafe extern "C" fn fake_vmem_unmap(va: *mut c_void, _: usize) -> u32 {
    FREES.lock().unwrap().push((va as u64, tracked(va as u64)));
    0
}

unsafe extern "C" fn fake_vmem_set_access(
    _: *mut c_void,
    _: usize,
    _: *const sys::hsa_amd_memory_access_desc_t,
    _: usize,
) -> u32 {
    0
}

unsafe extern "C" fn fake_vmem_address_free(_: *mut c_void, _: usize) -> u32 {
    0
}

// ----- Synthetic tables ----------------------------------------------------------------------

fn version<T>(major: u32) -> ApiTableVersion {
    ApiTableVersion {
        major_id: major,
        minor_id: size_of::<T>() as u32,
        step_id: 0,
        reserved: 0,
    }
}

macro_rules! fill_core {
    ($c:expr) => {{
        $c.hsa_agent_get_info_fn = Some(fake_agent_get_info);
        $c.hsa_region_get_info_fn = Some(fake_region_get_info);
        $c.hsa_memory_allocate_fn = Some(fake_memory_allocate);
        $c.hsa_memory_free_fn = Some(fake_free);
        $c.hsa_signal_load_relaxed_fn = Some(fake_signal_load);
    }};
}
macro_rules! fill_amd {
    ($a:expr) => {{
        $a.hsa_amd_memory_pool_get_info_fn = Some(fake_pool_get_info);
        $a.hsa_amd_memory_pool_allocate_fn = Some(fake_pool_allocate);
        $a.hsa_amd_memory_pool_free_fn = Some(fake_free);
        $a.hsa_amd_memory_async_copy_fn = Some(fake_async_copy);
        $a.hsa_amd_pointer_info_fn = Some(fake_pointer_info);
    }};
}

struct Current {
    root: Box<v2::HsaApiTable>,
    core: Box<v2::CoreApiTable>,
    amd: Box<v2::AmdExtTable>,
}

fn current_tables() -> Current {
    let mut core = Box::new(v2::CoreApiTable::empty(version::<v2::CoreApiTable>(2)));
    fill_core!(core);
    let mut amd = Box::new(v2::AmdExtTable::empty(version::<v2::AmdExtTable>(2)));
    fill_amd!(amd);
    amd.hsa_amd_vmem_map_fn = Some(fake_vmem_map);
    amd.hsa_amd_vmem_unmap_fn = Some(fake_vmem_unmap);
    // Map, unmap, set-access and address-free are wrapped together or not at all.
    amd.hsa_amd_vmem_set_access_fn = Some(fake_vmem_set_access);
    amd.hsa_amd_vmem_address_free_fn = Some(fake_vmem_address_free);
    let mut t = Current {
        root: Box::new(v2::HsaApiTable {
            version: ApiTableVersion {
                major_id: 3,
                minor_id: 64,
                step_id: 1,
                reserved: 0,
            },
            core_: std::ptr::null_mut(),
            amd_ext_: std::ptr::null_mut(),
            finalizer_ext_: std::ptr::null_mut(),
            image_ext_: std::ptr::null_mut(),
            tools_: std::ptr::null_mut(),
            pc_sampling_ext_: std::ptr::null_mut(),
        }),
        core,
        amd,
    };
    t.root.core_ = &mut *t.core;
    t.root.amd_ext_ = &mut *t.amd;
    t
}

fn addr<F>(f: Option<F>) -> usize
where
    F: Copy,
{
    // SAFETY: `F` is a function pointer type (pointer-sized); reading its bits as an address.
    f.map(|f| unsafe { std::mem::transmute_copy::<F, usize>(&f) })
        .unwrap_or(0)
}

fn last_refusal() -> String {
    state()["last_refusal"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

// ----- Tests ---------------------------------------------------------------------------------

/// One process, one library instance, one backend: the steps run in order in one test.
#[test]
fn on_load_refuses_unknown_tables_and_wraps_known_ones() {
    // The tool: a C library that links libkernel_replay and configures it from its init.
    let tool = build_tool();
    // SAFETY: set before any thread of this test binary reads the environment through the
    // library (the only test in this binary that loads it).
    unsafe { std::env::set_var("KREPLAY_HSA_TOOL", &tool) };

    // 1. Unknown root major: nothing installed, entries unchanged.
    let mut t = current_tables();
    t.root.version.major_id = 4;
    let before = addr(t.amd.hsa_amd_memory_pool_allocate_fn);
    assert!(!on_load((&mut *t.root as *mut v2::HsaApiTable).cast()));
    assert_eq!(addr(t.amd.hsa_amd_memory_pool_allocate_fn), before);
    assert_eq!(
        addr(t.core.hsa_memory_allocate_fn),
        fake_memory_allocate as *const () as usize
    );
    assert!(
        last_refusal().contains("major version 4"),
        "{}",
        last_refusal()
    );
    assert!(state()["installed"].is_null());
    assert!(
        state()["tool"].is_null(),
        "no tool is attached when nothing is installed"
    );

    // 2. Unknown AMD extension major.
    let mut t = current_tables();
    t.amd.version.major_id = 3;
    assert!(!on_load((&mut *t.root as *mut v2::HsaApiTable).cast()));
    assert_eq!(
        addr(t.amd.hsa_amd_memory_pool_allocate_fn),
        fake_pool_allocate as *const () as usize
    );
    assert!(
        last_refusal().contains("amd_ext table has major version 3"),
        "{}",
        last_refusal()
    );

    // 3. A table too small for an entry the backend needs (pointer info).
    let mut t = current_tables();
    t.amd.version.minor_id = std::mem::offset_of!(v2::AmdExtTable, hsa_amd_pointer_info_fn) as u32;
    assert!(!on_load((&mut *t.root as *mut v2::HsaApiTable).cast()));
    assert_eq!(
        addr(t.amd.hsa_amd_memory_pool_allocate_fn),
        fake_pool_allocate as *const () as usize
    );
    assert_eq!(
        addr(t.core.hsa_memory_free_fn),
        fake_free as *const () as usize
    );
    assert!(
        last_refusal().contains("too small for hsa_amd_pointer_info"),
        "{}",
        last_refusal()
    );

    // 4. A root table too small for the sub-table pointers, and a NULL table.
    let mut t = current_tables();
    t.root.version.minor_id = 16;
    assert!(!on_load((&mut *t.root as *mut v2::HsaApiTable).cast()));
    assert!(!on_load(std::ptr::null_mut()));
    assert!(last_refusal().contains("NULL"), "{}", last_refusal());

    // 5. The current major: the wrappers are installed.
    let mut t = current_tables();
    assert!(on_load((&mut *t.root as *mut v2::HsaApiTable).cast()));
    for (name, now, fake) in [
        (
            "memory_allocate",
            addr(t.core.hsa_memory_allocate_fn),
            fake_memory_allocate as *const () as usize,
        ),
        (
            "memory_free",
            addr(t.core.hsa_memory_free_fn),
            fake_free as *const () as usize,
        ),
        (
            "pool_allocate",
            addr(t.amd.hsa_amd_memory_pool_allocate_fn),
            fake_pool_allocate as *const () as usize,
        ),
        (
            "pool_free",
            addr(t.amd.hsa_amd_memory_pool_free_fn),
            fake_free as *const () as usize,
        ),
        (
            "async_copy",
            addr(t.amd.hsa_amd_memory_async_copy_fn),
            fake_async_copy as *const () as usize,
        ),
        (
            "vmem_map",
            addr(t.amd.hsa_amd_vmem_map_fn),
            fake_vmem_map as *const () as usize,
        ),
        (
            "vmem_unmap",
            addr(t.amd.hsa_amd_vmem_unmap_fn),
            fake_vmem_unmap as *const () as usize,
        ),
    ] {
        assert!(now != 0 && now != fake, "{name} was not wrapped");
    }
    // Entries the backend only queries stay the originals.
    assert_eq!(
        addr(t.amd.hsa_amd_pointer_info_fn),
        fake_pointer_info as *const () as usize
    );
    let s = state();
    assert_eq!(s["installed"]["versions"]["root"][0], 3);
    assert_eq!(s["installed"]["versions"]["amd_ext"][0], 2);
    assert_eq!(s["queues_intercepted"], false);
    // The tool was attached and configured this very library instance.
    assert_eq!(s["tool"]["init_status"], 0, "{s}");
    assert_eq!(json(lib().policy_json)["max_passes"], 7);

    let allocs = exercise(&t.core.hsa_memory_allocate_fn, &t.amd, true);
    let classes = region_classes();
    assert_eq!(classes[&allocs[0]], 1, "GPU coarse pool: DEVICE_COARSE");
    assert_eq!(classes[&allocs[1]], 4, "GPU fine pool: FINE_GRAINED");
    assert_eq!(classes[&allocs[2]], 2, "kernarg-init pool: KERNARG");
    assert_eq!(classes[&allocs[3]], 2, "executable flag: KERNARG");
    assert_eq!(
        classes[&allocs[4]], 20,
        "CPU fine pool: PINNED_HOST | FINE_GRAINED"
    );
    assert_eq!(
        classes[&allocs[5]], 1,
        "coarse region on the GPU: DEVICE_COARSE"
    );
    assert_eq!(classes[&allocs[6]], 128, "vmem map: VIRTUAL_MAPPING");
    free_all(&t.core.hsa_memory_free_fn, &t.amd, &allocs, true);

    // 6. A second OnLoad on the same (already wrapped) table keeps the saved originals.
    assert!(on_load((&mut *t.root as *mut v2::HsaApiTable).cast()));
    let again = exercise(&t.core.hsa_memory_allocate_fn, &t.amd, true);
    free_all(&t.core.hsa_memory_free_fn, &t.amd, &again, true);

    // 7. Major 1 (Debian's layout): wrapped too, no virtual-memory entries.
    let mut core = Box::new(v1::CoreApiTable::empty(version::<v1::CoreApiTable>(1)));
    fill_core!(core);
    let mut amd = Box::new(v1::AmdExtTable::empty(version::<v1::AmdExtTable>(1)));
    fill_amd!(amd);
    let mut root = Box::new(v1::HsaApiTable {
        version: ApiTableVersion {
            major_id: 1,
            minor_id: 48,
            step_id: 0,
            reserved: 0,
        },
        core_: &mut *core,
        amd_ext_: &mut *amd,
        finalizer_ext_: std::ptr::null_mut(),
        image_ext_: std::ptr::null_mut(),
    });
    assert!(on_load((&mut *root as *mut v1::HsaApiTable).cast()));
    assert_ne!(
        addr(amd.hsa_amd_memory_pool_allocate_fn),
        fake_pool_allocate as *const () as usize
    );
    assert_ne!(
        addr(core.hsa_memory_allocate_fn),
        fake_memory_allocate as *const () as usize
    );
    let wrapped = state()["installed"]["wrapped"].to_string();
    assert!(!wrapped.contains("vmem"), "{wrapped}");
    let v1_allocs = exercise_v1(&core, &amd);
    let classes = region_classes();
    assert_eq!(classes[&v1_allocs[0]], 1);
    assert_eq!(
        classes[&v1_allocs[1]], 20,
        "CPU fine pool: PINNED_HOST | FINE_GRAINED"
    );
    for (i, &a) in v1_allocs.iter().enumerate() {
        let free = if i == 0 {
            amd.hsa_amd_memory_pool_free_fn
        } else {
            core.hsa_memory_free_fn
        };
        // SAFETY: our wrapper over `fake_free`.
        assert_eq!(unsafe { free.unwrap()(a as *mut c_void) }, 0);
        assert!(!tracked(a));
    }
    let frees = FREES.lock().unwrap();
    assert_eq!(
        frees.len(),
        16,
        "7 + 7 frees on the current major, 2 on major 1"
    );
    assert!(
        frees.iter().all(|&(_, still)| !still),
        "a free reached the original while its region was still tracked: {frees:?}"
    );
}

fn region_classes() -> HashMap<u64, u64> {
    state()["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["base"].as_u64().unwrap(), r["class"].as_u64().unwrap()))
        .collect()
}

/// Allocates through the wrapped entries of a current-major table; returns the addresses:
/// GPU coarse, GPU fine, kernarg pool, executable flag, CPU fine, region, vmem mapping.
fn exercise(
    memory_allocate: &Option<sys::MemoryAllocateFn>,
    amd: &v2::AmdExtTable,
    vmem: bool,
) -> Vec<u64> {
    let mut out = Vec::new();
    let pool_alloc = amd.hsa_amd_memory_pool_allocate_fn.unwrap();
    for (pool, flags) in [
        (GPU_COARSE_POOL, 0),
        (GPU_FINE_POOL, 0),
        (CPU_KERNARG_POOL, 0),
        (GPU_COARSE_POOL, sys::HSA_AMD_MEMORY_POOL_EXECUTABLE_FLAG),
        (CPU_FINE_POOL, 0),
    ] {
        let mut p = std::ptr::null_mut();
        // SAFETY: our wrapper over `fake_pool_allocate`, with a valid out-pointer.
        let st = unsafe {
            pool_alloc(
                sys::hsa_amd_memory_pool_t { handle: pool },
                4096,
                flags,
                &mut p,
            )
        };
        assert_eq!(st, 0);
        assert!(
            tracked(p as u64),
            "allocation from pool {pool:#x} not tracked"
        );
        out.push(p as u64);
    }
    let mut p = std::ptr::null_mut();
    // SAFETY: our wrapper over `fake_memory_allocate`.
    let st = unsafe {
        memory_allocate.unwrap()(
            sys::hsa_region_t {
                handle: GPU << 8 | 4,
            },
            512,
            &mut p,
        )
    };
    assert_eq!(st, 0);
    out.push(p as u64);
    if vmem {
        let va = NEXT_ADDR.fetch_add(0x10_0000, Ordering::Relaxed);
        // SAFETY: our wrapper over `fake_vmem_map`.
        let st = unsafe {
            amd.hsa_amd_vmem_map_fn.unwrap()(va as *mut c_void, 8192, 0, Default::default(), 0)
        };
        assert_eq!(st, 0);
        out.push(va);
    }
    // A copy reaches the copy fence and the original.
    let before = (
        COPIES.load(Ordering::Relaxed),
        state()["copies_submitted"].as_u64().unwrap(),
    );
    // SAFETY: our wrapper over `fake_async_copy` (which touches nothing).
    let st = unsafe {
        amd.hsa_amd_memory_async_copy_fn.unwrap()(
            out[0] as *mut c_void,
            sys::hsa_agent_t { handle: GPU },
            out[4] as *const c_void,
            sys::hsa_agent_t { handle: CPU },
            64,
            0,
            std::ptr::null(),
            sys::hsa_signal_t { handle: 0x5151 },
        )
    };
    assert_eq!(st, 0);
    assert_eq!(COPIES.load(Ordering::Relaxed), before.0 + 1);
    assert_eq!(state()["copies_submitted"].as_u64().unwrap(), before.1 + 1);
    out
}

fn free_all(
    memory_free: &Option<sys::MemoryFreeFn>,
    amd: &v2::AmdExtTable,
    allocs: &[u64],
    vmem: bool,
) {
    let pools = if vmem {
        &allocs[..allocs.len() - 2]
    } else {
        &allocs[..allocs.len() - 1]
    };
    for &a in pools {
        // SAFETY: our wrapper over `fake_free`.
        let st = unsafe { amd.hsa_amd_memory_pool_free_fn.unwrap()(a as *mut c_void) };
        assert_eq!(st, 0);
        assert!(!tracked(a));
    }
    let region = allocs[pools.len()];
    // SAFETY: our wrapper over `fake_free`.
    assert_eq!(unsafe { memory_free.unwrap()(region as *mut c_void) }, 0);
    assert!(!tracked(region));
    if vmem {
        let va = *allocs.last().unwrap();
        // SAFETY: our wrapper over `fake_vmem_unmap`.
        let st = unsafe { amd.hsa_amd_vmem_unmap_fn.unwrap()(va as *mut c_void, 8192) };
        assert_eq!(st, 0);
        assert!(!tracked(va));
    }
}

fn exercise_v1(core: &v1::CoreApiTable, amd: &v1::AmdExtTable) -> Vec<u64> {
    let mut a = std::ptr::null_mut();
    // SAFETY: our wrapper over `fake_pool_allocate`.
    let st = unsafe {
        amd.hsa_amd_memory_pool_allocate_fn.unwrap()(
            sys::hsa_amd_memory_pool_t {
                handle: GPU_COARSE_POOL,
            },
            4096,
            0,
            &mut a,
        )
    };
    assert_eq!(st, 0);
    let mut b = std::ptr::null_mut();
    // SAFETY: our wrapper over `fake_memory_allocate`.
    let st = unsafe {
        core.hsa_memory_allocate_fn.unwrap()(
            sys::hsa_region_t {
                handle: CPU << 8 | 2,
            },
            64,
            &mut b,
        )
    };
    assert_eq!(st, 0);
    vec![a as u64, b as u64]
}

/// Builds the C tool: `kreplay_tool_init` reads the backend's state (which must answer while
/// the tool attaches) and sets `KREPLAY_MAX_PASSES=7` through the C ABI.
fn build_tool() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay-ffi-hsa");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("tool.c");
    std::fs::write(
        &src,
        "#include <stdint.h>\n#include <string.h>\n#include \"kernel_replay_hsa.h\"\n\
         int kreplay_tool_init(uint64_t runtime_version) {\n\
           char state[65536]; size_t need = 0;\n\
           if (runtime_version != 42) return 2;\n\
           /* Asking for the backend's state from init must answer, not deadlock. */\n\
           if (kreplay_hsa_state_json(state, sizeof state, &need) != KREPLAY_STATUS_OK) return 3;\n\
           if (!strstr(state, \"\\\"tool\\\":\\\"attaching\\\"\")) return 4;\n\
           return kreplay_policy_set(\"KREPLAY_MAX_PASSES\", \"7\") == KREPLAY_STATUS_OK ? 0 : 1;\n\
         }\n",
    )
    .unwrap();
    let so = dir.join("libtesttool.so");
    let lib = library_dir();
    let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c11", "-Wall", "-Werror", "-shared", "-fPIC", "-I"])
        .arg(root.join("include"))
        .arg(&src)
        .arg("-L")
        .arg(&lib)
        .arg("-lkernel_replay")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&so)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the tool failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

/// The real HSA runtime with `HSA_TOOLS_LIB` naming the library, on a machine without an
/// AMD GPU: `hsa_init` fails (no `/dev/kfd`) or succeeds, but the program ends cleanly.
#[test]
fn real_runtime_hsa_init_ends_cleanly() {
    let have = Path::new("/usr/include/hsa/hsa.h").exists()
        && [
            "/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so",
            "/usr/lib64/libhsa-runtime64.so",
            "/opt/rocm/lib/libhsa-runtime64.so",
        ]
        .iter()
        .any(|p| Path::new(p).exists());
    if !have {
        assert!(
            std::env::var_os("KREPLAY_REQUIRE_HSA").is_none(),
            "KREPLAY_REQUIRE_HSA is set but the HSA runtime or its headers are missing (apt-get install libhsa-runtime-dev libhsa-runtime64-1)"
        );
        eprintln!("the HSA runtime is not installed; skipping");
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay-ffi-hsa");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("hsa_init.c");
    std::fs::write(
        &src,
        "#include <hsa/hsa.h>\n#include <stdio.h>\n\
         int main(void) {\n\
           hsa_status_t s = hsa_init();\n\
           printf(\"hsa_init=%d\\n\", (int)s);\n\
           if (s == HSA_STATUS_SUCCESS) { s = hsa_shut_down(); printf(\"hsa_shut_down=%d\\n\", (int)s); }\n\
           printf(\"clean exit\\n\");\n\
           return 0;\n\
         }\n",
    )
    .unwrap();
    let exe = dir.join("hsa_init");
    let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c11", "-Wall", "-Werror"])
        .arg(&src)
        .args(["-lhsa-runtime64", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the hsa_init program failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe)
        .env("HSA_TOOLS_LIB", library_dir().join("libkernel_replay.so"))
        .env("KREPLAY_LOG", "debug")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        run.status.success(),
        "the program did not end cleanly ({:?}):\n{text}",
        run.status
    );
    assert!(text.contains("clean exit"), "{text}");
    println!("{text}");
}
