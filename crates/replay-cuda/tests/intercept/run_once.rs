//! Launches run once without a window: inside the library, communication, behind a host wait.

use std::sync::atomic::Ordering;
use std::time::Duration;

use replay_cuda::intercept::{self, Internal};
use replay_cuda::state;
use replay_cuda::sys;

use crate::harness::{alloc_filled, launch_rmw, read, rmw_host, setup, APP_PTX};
use crate::support::launch_block;

#[test]
fn inside_the_library_every_wrapper_forwards_without_a_window() {
    let Some((_g, s)) = setup() else { return };
    let a = alloc_filled(5);
    let mut once = read(a);
    rmw_host(&mut once, 11);
    let seen = state::state().counters.launches_seen.load(Ordering::SeqCst);
    {
        let _inside = Internal::enter();
        assert_eq!(launch_rmw(s.func, a, 11), sys::CUresult::CUDA_SUCCESS);
    }
    assert_eq!(read(a), once, "one execution");
    assert_eq!(
        state::state().counters.launches_seen.load(Ordering::SeqCst),
        seen,
        "the library's own launch is not an application launch"
    );
    // SAFETY: frees the wrapper's allocation.
    unsafe { intercept::mem_free(a) };
}

#[test]
fn a_communication_kernel_under_interception_runs_once_counted_by_the_window() {
    let Some((_g, s)) = setup() else { return };
    let svc = state::service().expect("the interception's service");
    let before_policy = svc.policy();
    let mut p = (*before_policy).clone();
    p.filter.communication = vec!["KR_RMW".into()];
    svc.set_policy(p).unwrap();
    let a = alloc_filled(33);
    let mut once = read(a);
    rmw_host(&mut once, 5);
    let replayed = s.tool.replayed.load(Ordering::SeqCst);
    let runs = svc.communication_runs();
    let r = launch_rmw(s.func, a, 5);
    svc.set_policy((*before_policy).clone()).unwrap();
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(a), once, "run once");
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        replayed,
        "not replayed"
    );
    assert_eq!(svc.communication_runs(), runs + 1);
    assert_eq!(
        state::state().counters_json()["communication"],
        serde_json::json!(runs + 1),
        "the report counts it where the window did"
    );
    // SAFETY: frees the wrapper's allocation.
    unsafe { intercept::mem_free(a) };
}

/// A kernel of the communication list that waits on the host (as XLA's autotuning
/// `DelayKernel` spins on a host flag the host sets only after enqueuing the launches it
/// times) is still running: a launch meanwhile runs once, untouched, with no window (a window
/// would drain behind the waiting kernel, and the timed launch would be replayed, changing
/// what the autotuner measures). Once the wait has finished, launches are replayed again.
#[test]
fn a_launch_behind_a_running_host_waiting_kernel_runs_once_without_a_window() {
    let Some((_g, s)) = setup() else { return };
    let svc = state::service().expect("the interception's service");
    let before_policy = svc.policy();
    let mut p = (*before_policy).clone();
    p.filter.communication = vec!["kr_spin".into()];
    svc.set_policy(p).unwrap();
    let mut module: sys::CUmodule = std::ptr::null_mut();
    let mut spin: sys::CUfunction = std::ptr::null_mut();
    let mut flag: sys::CUdeviceptr = 0;
    // SAFETY: the fake driver's module calls and an intercepted allocation, with out pointers
    // to live locals.
    unsafe {
        assert_eq!(
            intercept::module_load_data(&mut module, APP_PTX.as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetFunction(&mut spin, module, c"kr_spin".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            intercept::mem_alloc(&mut flag, 8),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    let a = alloc_filled(19);
    let mut once = read(a);
    rmw_host(&mut once, 4);
    let behind = state::state()
        .counters
        .behind_host_wait
        .load(Ordering::SeqCst);
    // The waiting kernel: keeps the legacy stream busy for 1.5 s.
    let mut ns: u64 = 1_500_000_000;
    let mut fp = flag;
    let mut spin_args: [*mut std::ffi::c_void; 2] =
        [(&mut ns as *mut u64).cast(), (&mut fp as *mut u64).cast()];
    // SAFETY: kr_spin's two 8-byte parameters, live arguments.
    let r = unsafe { launch_block(spin, 1, &mut spin_args) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let communication_record = s.tool.last_record.lock().as_ref().map(|r| r.dispatch_id);
    assert_eq!(launch_rmw(s.func, a, 4), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(read(a), once, "run once");
    assert_eq!(
        state::state()
            .counters
            .behind_host_wait
            .load(Ordering::SeqCst),
        behind + 1,
        "counted as run behind a host wait"
    );
    assert_eq!(
        s.tool.last_record.lock().as_ref().map(|r| r.dispatch_id),
        communication_record,
        "no window opened for it (a window would have drained behind the waiting kernel): {}",
        s.tool.last.lock()
    );
    // Once the wait is over, the next launch is replayed again.
    std::thread::sleep(Duration::from_millis(1600));
    let replayed = s.tool.replayed.load(Ordering::SeqCst);
    rmw_host(&mut once, 4);
    assert_eq!(launch_rmw(s.func, a, 4), sys::CUresult::CUDA_SUCCESS);
    svc.set_policy((*before_policy).clone()).unwrap();
    assert_eq!(read(a), once, "equal to one execution");
    assert_eq!(
        s.tool.replayed.load(Ordering::SeqCst),
        replayed + 1,
        "replayed after the wait: {}",
        s.tool.last.lock()
    );
    // SAFETY: frees the wrapper's allocations.
    unsafe {
        intercept::mem_free(a);
        intercept::mem_free(flag);
    }
}
