//! The built-in tools end to end on the simulated GPU (`replay_mock::SimTools`): `verify`
//! finds a deterministic kernel deterministic and names the region a non-deterministic one
//! changed, `timing` keeps every pass's GPU time, and the report's per-kernel table counts
//! both.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use replay_core::{
    AgentId, ContextId, Dim3, MemoryClass, NoContextControl, Policy, ReplayService, Subscription,
};
use replay_mock::{AgentConfig, KernArgs, Kernel, KernelCtx, KernelError, SimRuntime, SimTools};
use replay_tools::{kernel_rows, BuiltinTool, ToolKind};

const N: usize = 256;

fn runtime() -> SimRuntime {
    SimRuntime::builder()
        .agents(
            1,
            AgentConfig {
                device_bytes: 16 << 20,
                pinned_bytes: 16 << 20,
                pageable_bytes: 16 << 20,
                ..AgentConfig::default()
            },
        )
        .build()
}

fn attach(rt: &SimRuntime, kind: ToolKind, passes: u64) -> Arc<BuiltinTool<SimTools>> {
    let policy = Policy {
        drain_timeout: Duration::from_secs(5),
        pass_timeout: Duration::from_secs(5),
        ..Policy::default()
    };
    let svc = Arc::new(ReplayService::new(
        policy,
        rt.clock(),
        Arc::new(NoContextControl),
    ));
    let tool = Arc::new(BuiltinTool::new(kind, passes, SimTools::new(rt)));
    svc.configure(
        ContextId(1),
        Subscription::CONFIG | Subscription::PASS,
        Arc::clone(&tool) as Arc<dyn replay_core::ReplayTool>,
    )
    .unwrap();
    svc.start().unwrap();
    rt.set_service(Some(svc));
    tool
}

/// `buf[i] = buf[i] * 3 + 1` over the buffer in the first argument word.
fn scale(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let buf = ctx.word(0);
    let v = ctx.read_u32s(buf, N)?;
    let out: Vec<u8> = v
        .iter()
        .flat_map(|x| x.wrapping_mul(3).wrapping_add(1).to_le_bytes())
        .collect();
    ctx.write(buf, &out)?;
    Ok(())
}

/// [`scale`]: the same output from the same input.
fn deterministic() -> Kernel {
    Kernel::new("scale", scale)
}

/// Writes how many times it ran into its second buffer: each pass's output differs.
fn nondeterministic(runs: Arc<AtomicU32>) -> Kernel {
    Kernel::new(
        "racy",
        move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let out = ctx.word(1);
            let n = runs.fetch_add(1, Ordering::SeqCst);
            ctx.write(out, &n.to_le_bytes())?;
            Ok(())
        },
    )
}

fn run(rt: &SimRuntime, k: &Kernel, args: &[u8]) {
    rt.dispatch(rt.queue(AgentId(0), 0), k, args, Dim3::new(N as u32, 1, 1))
        .unwrap()
        .wait()
        .unwrap();
}

#[test]
fn verify_tells_a_deterministic_kernel_from_one_whose_outputs_differ() {
    let rt = runtime();
    let tool = attach(&rt, ToolKind::Verify, 3);
    let a = AgentId(0);
    let buf = rt
        .alloc(a, (N * 4) as u64, MemoryClass::DEVICE_COARSE)
        .unwrap();
    let other = rt.alloc(a, 64, MemoryClass::DEVICE_COARSE).unwrap();
    rt.write_u32s(buf, &vec![5u32; N]).unwrap();
    let args = KernArgs::new().ptr(buf).ptr(other).build();
    run(&rt, &deterministic(), &args);
    run(&rt, &nondeterministic(Arc::default()), &args);
    // Three passes, one execution.
    assert_eq!(rt.read_u32s(buf, 1).unwrap(), vec![16]);

    let records = tool.records();
    assert_eq!(records.len(), 2, "{records:?}");
    let (scale, racy) = (&records[0], &records[1]);
    assert_eq!(scale.kernel, "scale");
    assert_eq!(scale.outcome, "replayed", "{scale:?}");
    assert_eq!(scale.executed_passes, 3);
    assert_eq!(scale.inputs_identical, Some(true));
    assert_eq!(scale.outputs_identical, Some(true));
    assert!(scale.differing_regions.is_empty());
    assert_eq!(scale.digested_bytes, (N * 4) as u64 + 64);

    assert_eq!(racy.kernel, "racy");
    assert_eq!(racy.inputs_identical, Some(true), "{racy:?}");
    assert_eq!(racy.outputs_identical, Some(false), "{racy:?}");
    assert_eq!(racy.differing_regions, vec![(other, 64)]);

    let rows = kernel_rows(&records);
    assert_eq!(rows["scale"].outputs_differed, 0);
    assert_eq!(rows["racy"].outputs_differed, 1);
    let report = tool.report_members();
    assert_eq!(report["tool"], "verify");
    assert_eq!(report["passes"], 3);
    assert_eq!(report["records"].as_array().unwrap().len(), 2);
}

#[test]
fn timing_keeps_every_passs_gpu_time_and_digests_nothing() {
    let rt = runtime();
    let tool = attach(&rt, ToolKind::Timing, 4);
    let a = AgentId(0);
    let buf = rt
        .alloc(a, (N * 4) as u64, MemoryClass::DEVICE_COARSE)
        .unwrap();
    let k = deterministic().with_duration(Duration::from_micros(30));
    run(&rt, &k, &KernArgs::new().ptr(buf).build());
    let records = tool.records();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r.executed_passes, 4);
    assert_eq!(r.pass_gpu_seconds.len(), 4, "{r:?}");
    assert!(r.pass_gpu_seconds.iter().all(|&s| s > 0.0), "{r:?}");
    assert_eq!(r.inputs_identical, None);
    assert_eq!(r.digested_bytes, 0);
    assert_eq!(kernel_rows(&records)["scale"].pass_seconds.len(), 4);
}

#[test]
fn verify_never_reads_memory_another_thread_freed_during_the_window() {
    // The application frees memory on another thread while a window runs (PyTorch's
    // `empty_cache` beside a worker's kernels): `verify`'s digests must skip it, since a device
    // read of freed memory faults the context, and compare the region only while it lived.
    let rt = runtime();
    let tool = attach(&rt, ToolKind::Verify, 3);
    let a = AgentId(0);
    let buf = rt
        .alloc(a, (N * 4) as u64, MemoryClass::DEVICE_COARSE)
        .unwrap();
    let victim = rt.alloc(a, 4096, MemoryClass::DEVICE_COARSE).unwrap();
    rt.write_u32s(buf, &vec![5u32; N]).unwrap();
    let freed = Arc::new(AtomicU32::new(0));
    let (f, r) = (Arc::clone(&freed), rt.clone());
    // The first execution has another thread free `victim` and waits for it.
    let k = Kernel::new(
        "scale_and_free",
        move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            scale(ctx)?;
            if f.fetch_add(1, Ordering::SeqCst) == 0 {
                let r = r.clone();
                std::thread::spawn(move || r.free(AgentId(0), victim).unwrap())
                    .join()
                    .unwrap();
            }
            Ok(())
        },
    );
    run(&rt, &k, &KernArgs::new().ptr(buf).build());
    assert_eq!(freed.load(Ordering::SeqCst), 3, "three passes");
    assert_eq!(rt.read_u32s(buf, 1).unwrap(), vec![16], "one execution");
    assert!(rt.read(victim, 4).is_err(), "the free happened");
    let records = tool.records();
    let rec = &records[0];
    assert_eq!(rec.outcome, "replayed", "{rec:?}");
    assert_eq!(rec.inputs_identical, Some(true), "{rec:?}");
    assert_eq!(rec.outputs_identical, Some(true), "{rec:?}");
    assert_eq!(rec.freed_regions, 1, "{rec:?}");
    assert!(rec.differing_regions.is_empty(), "{rec:?}");
}
