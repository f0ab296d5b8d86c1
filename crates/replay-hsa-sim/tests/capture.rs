//! Capture of one HSA dispatch from PASS ENTER (SPEC §13) on the simulated runtime: the code
//! object the application loaded through a code object reader, the packet's launch
//! configuration, the argument block and the scope's regions, written by `replay-capture` and
//! read back; a kernel whose code object the loader cannot hand over is refused, saying why.

// Not every helper is used here.
#[allow(dead_code)]
mod common;

use std::sync::{Arc, Mutex};

use replay_core::{
    Capture, CaptureRefused, CaptureRequest, MemoryClass, Operation, Phase, Policy, Scope,
};
use replay_hsa::sys;
use replay_hsa_sim::{CodeObject, PoolKind};

use common::*;

type Results = Arc<Mutex<Vec<Result<Capture, CaptureRefused>>>>;

/// The loading entries a HIP runtime calls, as C types: reader from memory, executable
/// create, load for an agent, freeze, symbol by name, symbol info.
type Loading = (
    unsafe extern "C" fn(*const u8, usize, *mut u64) -> u32,
    unsafe extern "C" fn(u32, u32, *const i8, *mut u64) -> u32,
    unsafe extern "C" fn(u64, sys::hsa_agent_t, u64, *const i8, *mut u64) -> u32,
    unsafe extern "C" fn(u64, *const i8) -> u32,
    unsafe extern "C" fn(u64, *const i8, *const sys::hsa_agent_t, *mut u64) -> u32,
    unsafe extern "C" fn(u64, u32, *mut std::ffi::c_void) -> u32,
);

#[test]
fn a_dispatch_is_captured_with_its_code_object_and_an_unknown_code_object_is_refused() {
    let tool = scripted_tool();
    let results: Results = Arc::default();
    let sink = results.clone();
    tool.set_hook(Some(Arc::new(move |op, ph, p, _| {
        if (op, ph, p.current_pass) == (Operation::Pass, Phase::Enter, 0) {
            let s = sink.clone();
            p.request_capture(CaptureRequest::new(Arc::new(move |c| {
                s.lock().unwrap().push(c)
            })));
        }
    })));
    let svc = install_service(
        Policy {
            scope: Scope::All,
            ..Policy::default()
        },
        tool.clone(),
    );
    svc.start().unwrap();
    tool.set_passes(Some(2));
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[0];

    // out[0] = in[0] * factor, factor a module variable.
    sim.define_kernel("scale", |d| {
        let factor = d.read_u64(d.arg(2)?)?;
        let v = d.read_u64(d.arg(0)?)?;
        d.write_u64(d.arg(1)?, v * factor)
    });
    let image: &'static [u8] = Box::leak(
        CodeObject::new()
            .kernel("scale.kd", 24)
            .variable("factor", 8, false)
            .to_bytes()
            .into_boxed_slice(),
    );
    // SAFETY: (each `typed`) the core table's entries with their C signatures.
    let (create_reader, create_exec, load, freeze, by_name, sym_info): Loading = unsafe {
        let c = sim.core();
        (
            typed(c.hsa_code_object_reader_create_from_memory_fn),
            typed(c.hsa_executable_create_alt_fn),
            typed(c.hsa_executable_load_agent_code_object_fn),
            typed(c.hsa_executable_freeze_fn),
            typed(c.hsa_executable_get_symbol_by_name_fn),
            typed(c.hsa_executable_symbol_get_info_fn),
        )
    };
    let (mut reader, mut exec, mut sym, mut object) = (0u64, 0u64, 0u64, 0u64);
    // SAFETY: the simulated entries with live out pointers; the image outlives the program.
    unsafe {
        assert_eq!(create_reader(image.as_ptr(), image.len(), &mut reader), 0);
        assert_eq!(create_exec(1, 0, std::ptr::null(), &mut exec), 0);
        assert_eq!(
            load(exec, gpu, reader, std::ptr::null(), std::ptr::null_mut()),
            0
        );
        assert_eq!(freeze(exec, std::ptr::null()), 0);
        assert_eq!(by_name(exec, c"scale.kd".as_ptr(), &gpu, &mut sym), 0);
        assert_eq!(
            sym_info(
                sym,
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                (&mut object as *mut u64).cast()
            ),
            0
        );
    }
    let factor = sim.variable_address("factor").expect("loaded");
    // SAFETY: the module variable, host-backed simulated memory of 8 bytes.
    unsafe { (factor as *mut u64).write_volatile(7) };
    let input = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 64);
    let output = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 64);
    // SAFETY: live simulated allocations of 64 bytes.
    unsafe { input.cast::<u64>().write_volatile(6) };
    let args = api.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    for (i, w) in [input as u64, output as u64, factor]
        .into_iter()
        .enumerate()
    {
        // SAFETY: the kernarg block of 64 bytes.
        unsafe { args.cast::<u64>().add(i).write_volatile(w) };
    }
    let q = api.queue(gpu);
    let done = api.signal(1);
    let mut packet = dispatch(object, args, done);
    // Launch configuration: grid 64, workgroup 16, group 256 bytes, private 32.
    packet[4..6].copy_from_slice(&16u16.to_le_bytes());
    packet[12..16].copy_from_slice(&64u32.to_le_bytes());
    packet[24..28].copy_from_slice(&32u32.to_le_bytes());
    packet[28..32].copy_from_slice(&256u32.to_le_bytes());
    api.submit(q, packet);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read(output.cast()), 42);

    let c = results.lock().unwrap().remove(0).expect("captured");
    let dir = std::env::temp_dir().join(format!("hsa-capture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    replay_capture::write(&dir, &c).unwrap();
    let back = replay_capture::read(&dir).unwrap();
    let m = &back.manifest;
    assert_eq!(m.backend, "hsa");
    assert_eq!(m.kernel.name, "scale");
    assert_eq!(m.kernel.code_format, "hsa-code-object");
    assert_eq!(back.code, image, "the code object as loaded");
    assert_eq!((m.launch.grid.x, m.launch.workgroup.x), (64, 16));
    assert_eq!(
        (m.launch.private_segment_size, m.launch.group_segment_size),
        (32, 256)
    );
    assert_eq!(&back.kernarg[..24], &args_words(input, output, factor)[..]);
    let region = |base: u64| {
        m.regions
            .iter()
            .position(|r| r.base == base)
            .unwrap_or_else(|| panic!("{base:#x} captured: {:?}", m.regions))
    };
    let (i, o, f) = (region(input as u64), region(output as u64), region(factor));
    assert_eq!(back.data[i].0[..8], 6u64.to_le_bytes());
    assert_eq!(back.data[o].0[..8], 0u64.to_le_bytes());
    assert_eq!(back.data[o].1[..8], 42u64.to_le_bytes());
    assert_eq!(back.data[f].0[..8], 7u64.to_le_bytes());
    assert!(m.regions[f].class.contains(MemoryClass::MODULE_VARIABLE));
    assert!(m.module_variables.contains(&f));
    let pointed: Vec<usize> = m.arguments.pointers.iter().map(|p| p.region).collect();
    assert!(pointed.contains(&i) && pointed.contains(&o) && pointed.contains(&f));
    let _ = std::fs::remove_dir_all(&dir);

    // A module the loader holds no code object for: refused, naming why; the dispatch still
    // ran as it would have.
    sim.load_module(0, &[], &[]);
    let k = sim.register_kernel("bare", move |d| d.write_u64(d.arg(1)?, 5));
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read(output.cast()), 5);
    let got = results.lock().unwrap().remove(0);
    match got {
        Err(CaptureRefused::Backend(why)) => {
            assert!(why.contains("no code object"), "{why}");
            assert!(why.contains("unknown code object"), "{why}");
        }
        other => panic!("refused: {other:?}"),
    }
    svc.stop().unwrap();
}

fn args_words(a: *mut u8, b: *mut u8, c: u64) -> Vec<u8> {
    [a as u64, b as u64, c]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}
