//! Code images the interception reads, over the fake driver (`tests/fake_driver/fake_inject.c`
//! compiled as `libcuda.so.1`), through the wrappers an application's calls reach (SPEC §7.1
//! module variables, §9.2 code):
//!
//! - a fat binary whose cubin is LZ4-compressed, and one whose cubin is ZSTD-compressed: the
//!   global is found and restored between passes (memory equals one execution), and the
//!   `.nv.info` parameter table is read (the driver cannot describe the kernel);
//! - PTX text with globals: they are resolved and restored likewise;
//! - a kernel of an image whose globals are unknown (unreadable, an inconsistent compressed
//!   entry, PTX that does not parse) declines `untracked_memory`, runs once, and is counted;
//!   `set_allow_unknown_globals` replays it anyway;
//! - a function the hooks did not see fetched is mapped to its image through
//!   `cuFuncGetModule`; one of a module loaded outside the hooks declines.
//!
//! Skipped where no C compiler is found, or where a real driver is present.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_core::{Outcome, OutcomeRecord, Reason};
use replay_cuda::intercept::{self, Internal};
use replay_cuda::module::elf::testing::{info, Builder};
use replay_cuda::module::image::testing::{fatbin_compressed, nv_info, ptx};
use replay_cuda::module::image::Compression;
use replay_cuda::state::{self, images};
use replay_cuda::sys;

mod support;
use support::{
    bind_device0, intercept_with, launch_block, launch_globals, load_app_function, load_fake, Fake,
};

/// Three passes; the last outcome kept.
#[derive(Default)]
struct Tool {
    replayed: AtomicU32,
    last: Mutex<Option<OutcomeRecord>>,
}

impl ReplayTool for Tool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                p.replay_pass_count = Some(Arc::new(|_, _| 3));
            }
            (Operation::Config, Phase::Exit) => {
                if p.outcome.map(|o| o.executed_passes) == Some(3) {
                    self.replayed.fetch_add(1, Ordering::SeqCst);
                }
                *self.last.lock() = p.outcome.cloned();
            }
            _ => {}
        }
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

/// The fake driver, a started service with the tool, interception on, the backend of device 0
/// open with its primary context current on this thread.
fn setup() -> Option<(parking_lot::MutexGuard<'static, ()>, Arc<Tool>)> {
    let guard = SERIAL.lock();
    load_fake(Fake::Inject)?;
    static TOOL: std::sync::OnceLock<Arc<Tool>> = std::sync::OnceLock::new();
    let tool = Arc::clone(TOOL.get_or_init(|| {
        let tool = Arc::new(Tool::default());
        intercept_with(Arc::clone(&tool) as Arc<dyn ReplayTool>);
        tool
    }));
    images::globals::set_allow_unknown_globals(false);
    bind_device0();
    Some((guard, tool))
}

/// The fake's `kr_counter` and `kr_table` (host memory at their device addresses).
fn globals_now() -> (u64, Vec<u64>) {
    let (mut p, mut n, mut m): (sys::CUdeviceptr, usize, sys::CUmodule) =
        (0, 0, std::ptr::null_mut());
    let (mut t, mut tn): (sys::CUdeviceptr, usize) = (0, 0);
    // SAFETY: the fake's module and global lookups with out pointers to live locals, inside
    // the library so no hook sees them; its globals are host memory at the device address.
    unsafe {
        let _inside = Internal::enter();
        assert_eq!(
            sys::cuModuleLoadData(&mut m, c"lookup".as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetGlobal_v2(&mut p, &mut n, m, c"kr_counter".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetGlobal_v2(&mut t, &mut tn, m, c"kr_table".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
        let table = std::slice::from_raw_parts(t as *const u64, tn / 8).to_vec();
        let _ = sys::cuModuleUnload(m);
        (*(p as *const u64), table)
    }
}

fn unload(m: sys::CUmodule) {
    // SAFETY: unloads a module the test loaded through the wrapper.
    unsafe { intercept::module_unload(m) };
}

fn count(name: &str) -> u64 {
    state::state().counters_json()[name].as_u64().unwrap_or(0)
}

/// The cubin of `kr_globals` (named `opaque_kr_globals`, so the driver cannot describe its
/// parameters): its `.nv.info` table, and globals.cu's `.nv.global` as the fake lays it out.
fn globals_cubin() -> Vec<u8> {
    let mut b = Builder::new();
    b.section(
        ".nv.info.opaque_kr_globals",
        0x7000_0000,
        nv_info(&[(0, 8)]),
        0,
    );
    let g = b.section(".nv.global", 8, Vec::new(), 8328);
    b.symbol("kr_counter", info(1, 1), g, 0, 8);
    b.symbol("kr_hidden", info(0, 1), g, 8, 128);
    b.symbol("kr_table", info(1, 1), g, 136, 8192);
    b.build()
}

/// Runs `kr_globals` of `image` once under three passes; returns the counter's and the
/// table's change and the outcome.
fn run_globals(image: &[u8], name: &std::ffi::CStr, tool: &Tool) -> (u64, bool, OutcomeRecord) {
    let (m, f) = load_app_function(image, name);
    let (c0, t0) = globals_now();
    assert_eq!(launch_globals(f), sys::CUresult::CUDA_SUCCESS);
    let (c1, t1) = globals_now();
    // What one execution of kr_globals(7) does to the table.
    let once: Vec<u64> = t0
        .iter()
        .enumerate()
        .map(|(i, x)| {
            x.wrapping_mul(3)
                .wrapping_add(7)
                .wrapping_add(u64::from(fake_const(i)))
        })
        .collect();
    let rec = tool.last.lock().clone().expect("an outcome");
    unload(m);
    (c1 - c0, t1 == once, rec)
}

/// The fake's `nv_const[i & 3]` as kr_globals reads it (its constant bank: 1, 2, 3, 4).
fn fake_const(i: usize) -> u8 {
    (i & 3) as u8 + 1
}

#[test]
fn a_global_of_an_lz4_or_zstd_compressed_fat_binary_is_restored_and_its_table_read() {
    let Some((_g, tool)) = setup() else { return };
    for how in [Compression::Lz4, Compression::Zstd] {
        let fat = fatbin_compressed(&[
            (1, 90, b"// ptx\0", None),
            (2, 90, &globals_cubin(), Some(how)),
        ]);
        let (decompressed, layout_image) = (count("images_decompressed"), count("layout_image"));
        let before = tool.replayed.load(Ordering::SeqCst);
        let (counter, table_once, rec) = run_globals(&fat, c"opaque_kr_globals", &tool);
        assert_eq!(
            tool.replayed.load(Ordering::SeqCst),
            before + 1,
            "{how:?}: three passes: {rec:?}"
        );
        assert_eq!(
            counter, 1,
            "{how:?}: the global was restored between passes: one execution"
        );
        assert!(table_once, "{how:?}: kr_table equals one execution");
        assert_eq!(count("images_decompressed"), decompressed + 1, "{how:?}");
        assert_eq!(
            count("layout_image"),
            layout_image + 1,
            "{how:?}: the .nv.info table of the decompressed cubin: {}",
            state::state().counters_json()
        );
    }
}

#[test]
fn the_globals_of_a_ptx_image_are_restored() {
    let Some((_g, tool)) = setup() else { return };
    // The fake resolves kr_counter and kr_table by name (kr_hidden, which it does not, is
    // left out of this text; the table and the counter are checked).
    let text = ptx("kr_globals", &[("kr_counter", 8), ("kr_table", 8192)]);
    let before = tool.replayed.load(Ordering::SeqCst);
    let ptx_images = count("images_ptx");
    let (counter, table_once, rec) = run_globals(&text, c"kr_globals", &tool);
    assert_eq!(tool.replayed.load(Ordering::SeqCst), before + 1, "{rec:?}");
    assert_eq!(counter, 1, "restored between passes: one execution");
    assert!(table_once, "kr_table equals one execution");
    assert_eq!(count("images_ptx"), ptx_images + 1);
}

fn assert_declined(rec: &OutcomeRecord) {
    assert_eq!(rec.outcome, Outcome::Declined, "{rec:?}");
    assert_eq!(rec.reason, Reason::UntrackedMemory, "{rec:?}");
}

#[test]
fn a_kernel_of_an_image_whose_globals_are_unknown_declines() {
    let Some((_g, tool)) = setup() else { return };
    let cubin = globals_cubin();
    // A ZSTD entry whose uncompressed size disagrees with its frame.
    let mut bad_zstd = fatbin_compressed(&[(2, 90, &cubin, Some(Compression::Zstd))]);
    bad_zstd[16 + 56..16 + 64].copy_from_slice(&(cubin.len() as u64 + 8).to_le_bytes());
    let unparsable = b".version 8.4\n.target sm_90\n.global .align 8 .u64 kr_counter\0".to_vec();
    let cases: [(&str, Vec<u8>); 3] = [
        ("not a format read", b"image\0".to_vec()),
        ("inconsistent compressed entry", bad_zstd),
        ("PTX that does not parse", unparsable),
    ];
    for (what, image) in cases {
        let declined = count("declined_globals_unknown");
        let replayed = tool.replayed.load(Ordering::SeqCst);
        let (counter, table_once, rec) = run_globals(&image, c"kr_globals", &tool);
        assert_declined(&rec);
        assert_eq!(counter, 1, "{what}: ran once");
        assert!(table_once, "{what}");
        assert_eq!(tool.replayed.load(Ordering::SeqCst), replayed, "{what}");
        assert_eq!(count("declined_globals_unknown"), declined + 1, "{what}");
    }
}

#[test]
fn the_switch_replays_a_kernel_of_an_image_whose_globals_are_unknown() {
    let Some((_g, tool)) = setup() else { return };
    images::globals::set_allow_unknown_globals(true);
    let (m, f) = load_app_function(b"image\0", c"kr_tiny");
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: an intercepted allocation with an out pointer; the fake's memory is host memory
    // at the device address.
    unsafe {
        assert_eq!(intercept::mem_alloc(&mut p, 8), sys::CUresult::CUDA_SUCCESS);
        *(p as *mut u64) = 5;
    }
    let allowed = count("allowed_globals_unknown");
    let replayed = tool.replayed.load(Ordering::SeqCst);
    let mut arg = p;
    // SAFETY: kr_tiny's one pointer parameter, a live argument.
    let r = unsafe { launch_block(f, 1, &mut [(&mut arg as *mut u64).cast()]) };
    images::globals::set_allow_unknown_globals(false);
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(tool.replayed.load(Ordering::SeqCst), replayed + 1);
    assert_eq!(count("allowed_globals_unknown"), allowed + 1);
    // SAFETY: as above.
    let v = unsafe { *(p as *const u64) };
    assert_eq!(v, 16, "one execution of p = 3p + 1");
    // SAFETY: frees the wrapper's allocation.
    unsafe { intercept::mem_free(p) };
    unload(m);
}

#[test]
fn a_function_the_hooks_did_not_see_is_mapped_through_its_module_or_declines() {
    let Some((_g, tool)) = setup() else { return };
    let text = ptx("kr_globals", &[("kr_counter", 8), ("kr_table", 8192)]);
    let (m, _) = load_app_function(&text, c"kr_globals");
    let mut f: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: the driver's own entry (not the wrapper), as an entry the hooks do not see
    // would hand out a function; out pointer to a live local.
    unsafe {
        assert_eq!(
            sys::cuModuleGetFunction(&mut f, m, c"kr_globals".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let (c0, _) = globals_now();
    let replayed = tool.replayed.load(Ordering::SeqCst);
    assert_eq!(launch_globals(f), sys::CUresult::CUDA_SUCCESS);
    let rec = tool.last.lock().clone().unwrap();
    assert_eq!(
        tool.replayed.load(Ordering::SeqCst),
        replayed + 1,
        "{rec:?}"
    );
    assert_eq!(globals_now().0, c0 + 1, "its module's globals restored");
    unload(m);

    // A module loaded outside the hooks: its image, and so its globals, are unknown.
    let (mut m2, mut f2): (sys::CUmodule, sys::CUfunction) =
        (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the driver's own entries, with out pointers to live locals.
    unsafe {
        assert_eq!(
            sys::cuModuleLoadData(&mut m2, text.as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetFunction(&mut f2, m2, c"kr_globals".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let declined = count("declined_image_unknown");
    let (c0, _) = globals_now();
    assert_eq!(launch_globals(f2), sys::CUresult::CUDA_SUCCESS);
    let rec = tool.last.lock().clone().unwrap();
    assert_declined(&rec);
    assert_eq!(globals_now().0, c0 + 1, "ran once");
    assert_eq!(count("declined_image_unknown"), declined + 1);

    // The same module's function fetched through the hook (as of a module that
    // `cuLibraryGetModule` gave): the hook saw the function, not its image.
    let mut f3: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: the intercepted entry with an out pointer to a live local.
    unsafe {
        assert_eq!(
            intercept::module_get_function(&mut f3, m2, c"kr_globals".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let (c0, _) = globals_now();
    assert_eq!(launch_globals(f3), sys::CUresult::CUDA_SUCCESS);
    let rec = tool.last.lock().clone().unwrap();
    assert_declined(&rec);
    assert_eq!(globals_now().0, c0 + 1, "ran once");
    assert_eq!(count("declined_image_unknown"), declined + 2);
    // SAFETY: the driver's own unload of the module loaded above.
    unsafe { sys::cuModuleUnload(m2) };
}

#[test]
fn the_switch_reads_its_environment_value_strictly() {
    use std::ffi::OsStr;
    assert_eq!(images::globals::parse_allow(None), Ok(false));
    for v in ["1", "true", "yes", "on"] {
        assert_eq!(
            images::globals::parse_allow(Some(OsStr::new(v))),
            Ok(true),
            "{v}"
        );
    }
    for v in ["0", "false", "no", "off", ""] {
        assert_eq!(
            images::globals::parse_allow(Some(OsStr::new(v))),
            Ok(false),
            "{v}"
        );
    }
    let e = images::globals::parse_allow(Some(OsStr::new("maybe"))).unwrap_err();
    assert!(
        e.contains(images::globals::ALLOW_UNKNOWN_GLOBALS_ENV),
        "{e}"
    );
}
