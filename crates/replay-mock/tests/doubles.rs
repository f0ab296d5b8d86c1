//! The shared test doubles (`replay_mock::double`) do what the tests built on them assert: the
//! instant agent counts and hooks its submissions, the scripted tool logs each callback in the
//! format the window test reads and follows its script, the fake device memory really copies
//! and completes its fences on the fake clock.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{
    Agent, AgentId, Clock, ContextId, CopyOp, DeviceMemory, Dim3, Dispatch, DispatchInfo, KernelId,
    KernelKey, MemLoc, MemoryClass, NoContextControl, Operation, Origin, Outcome, Phase, Policy,
    QueueId, ReplayService, SubmissionKind, Subscription, Tier,
};
use replay_memory::Tracker;
use replay_mock::double::{
    at, FakeClock, FakeDeviceMemory, InstantAgent, ScriptedTool, ToolScript,
};
use replay_mock::instant::InstantSnapshotter;

fn dispatch(kernel: u64) -> Dispatch {
    Dispatch {
        info: DispatchInfo::new(
            AgentId(0),
            QueueId(0),
            KernelId(kernel),
            "k",
            Dim3::new(1, 1, 1),
            Dim3::new(1, 1, 1),
        ),
        kernel: KernelKey {
            agent: AgentId(0),
            code_object: 1,
            symbol: kernel,
        },
        kind: SubmissionKind::KernelDispatch,
        kernarg: Default::default(),
        origin: Origin::SubmittingThread,
        handle: 0,
        arg_layout: Default::default(),
    }
}

#[test]
fn a_window_over_the_instant_agent_and_the_scripted_tool_logs_every_callback_in_order() {
    let clock = Arc::new(FakeClock::default());
    let svc = ReplayService::new(Policy::default(), clock, Arc::new(NoContextControl));
    let tool = ScriptedTool::new(
        Arc::default(),
        ToolScript {
            passes: Some(3),
            continue_answers: Some(vec![1, 0]),
            ..Default::default()
        },
    );
    tool.set_kernel_passes(9, 2);
    let hooked: Arc<Mutex<Vec<u32>>> = Arc::default();
    let h = hooked.clone();
    tool.add_hook(at(Operation::Pass, Phase::Exit, move |pass| {
        h.lock().push(pass)
    }));
    svc.configure(
        ContextId(1),
        Subscription::CONFIG | Subscription::PASS,
        tool.clone(),
    )
    .unwrap();
    svc.start().unwrap();
    let submitted: Arc<Mutex<Vec<Option<u32>>>> = Arc::default();
    let s = submitted.clone();
    let agent = InstantAgent::new(AgentId(0))
        .pass_seconds(0.5)
        .on_submit(move |_, pass| s.lock().push(pass));
    let rec = svc
        .submit(&agent, &InstantSnapshotter::default(), dispatch(1))
        .unwrap()
        .record
        .unwrap();
    // The continue callback stops after pass 1.
    assert_eq!((rec.outcome, rec.executed_passes), (Outcome::Replayed, 2));
    assert_eq!(rec.pass_gpu_seconds.as_slice(), &[0.5, 1.0][..]);
    assert_eq!(
        *tool.log().lock(),
        [
            "CONFIG ENTER",
            "PASS ENTER 0",
            "PASS EXIT 0",
            "continue? 0",
            "PASS ENTER 1",
            "PASS EXIT 1",
            "continue? 1",
            "CONFIG EXIT replayed none",
        ]
    );
    assert_eq!(*hooked.lock(), [0, 1]);
    assert_eq!(*submitted.lock(), [Some(0), Some(1)]);
    assert_eq!(
        (agent.passes(), agent.ordinary(), agent.completions()),
        (2, 0, 1)
    );
    assert_eq!(tool.count("PASS EXIT"), 2);
    assert_eq!(tool.config_kernels(), ["k"]);
    // Kernel 9 asks for its own count; the continue answers still apply.
    tool.set_script(ToolScript {
        passes: None,
        ..Default::default()
    });
    tool.set_kernel_passes(9, 2);
    let rec = svc
        .submit(&agent, &InstantSnapshotter::default(), dispatch(9))
        .unwrap()
        .record
        .unwrap();
    assert_eq!(rec.executed_passes, 2);
    assert_eq!(tool.outcomes_of(KernelId(9)).len(), 1);
    assert_eq!(tool.outcomes().len(), 2);
    // No pass count: one ordinary run.
    tool.reset(ToolScript::default());
    let rec = svc
        .submit(&agent, &InstantSnapshotter::default(), dispatch(1))
        .unwrap()
        .record
        .unwrap();
    assert_eq!(rec.executed_passes, 1);
    assert_eq!(agent.ordinary(), 1);
    assert_eq!(submitted.lock().last(), Some(&None));
}

#[test]
fn the_fake_device_memory_copies_bytes_and_completes_fences_on_the_fake_clock() {
    let clock = Arc::new(FakeClock::default());
    let dev = FakeDeviceMemory::new(AgentId(2), clock.clone(), [Some(1 << 20), None, None]);
    let tracker = Tracker::new();
    dev.app_alloc(&tracker, 0x1000, 16, MemoryClass::DEVICE_COARSE);
    assert_eq!(dev.tier_info(Tier::Device).unwrap().gbps, 10.0);
    assert!(dev.tier_info(Tier::PinnedHost).is_none());
    let b = dev.alloc_backing(Tier::Device, 16).unwrap();
    dev.st.lock().latency = Duration::from_millis(30);
    let f = dev
        .submit_copies(&[CopyOp {
            src: MemLoc::Device { addr: 0x1000 },
            dst: MemLoc::Backing { id: b, offset: 0 },
            len: 16,
        }])
        .unwrap();
    assert!(!dev.poll_fence(f, Duration::from_millis(10)).unwrap());
    assert!(dev.poll_fence(f, Duration::from_millis(50)).unwrap());
    assert_eq!(clock.now(), Duration::from_millis(30));
    let before = dev.read(0x1000, 16);
    dev.write(0x1000, &[0; 16]);
    let f = dev
        .submit_copies(&[CopyOp {
            src: MemLoc::Backing { id: b, offset: 0 },
            dst: MemLoc::Device { addr: 0x1000 },
            len: 16,
        }])
        .unwrap();
    assert!(dev.poll_fence(f, Duration::from_secs(1)).unwrap());
    assert_eq!(dev.read(0x1000, 16), before);
    assert_eq!(dev.st.lock().device_writes, [(0x1000, 16)]);
    dev.st.lock().fail_next_copies = 1;
    let e = dev.submit_copies(&[]).unwrap_err();
    assert_eq!(e.agent, AgentId(2));
    dev.free_backing(b);
    assert_eq!(dev.backing_live(), 0);
}

#[test]
fn the_fake_clock_moves_only_when_slept_and_runs_its_hook_once() {
    let clock = FakeClock::default();
    let ran: Arc<Mutex<u32>> = Arc::default();
    let r = ran.clone();
    clock.on_sleep(move || *r.lock() += 1);
    assert_eq!(clock.now(), Duration::ZERO);
    clock.sleep(Duration::from_millis(3));
    clock.sleep(Duration::from_millis(4));
    assert_eq!(clock.now(), Duration::from_millis(7));
    assert_eq!(*ran.lock(), 1);
    let _ = Agent::id(&InstantAgent::default());
}
