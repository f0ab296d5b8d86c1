//! Queue interception: pass-through, repeated writes, chains, a full ring, the async thread.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use replay_hsa::sys;
use replay_hsa_sim::client::typed;
use replay_hsa_sim::{SimConfig, SimHsa, ASYNC_THREAD_NAME};

use crate::harness::{
    add_kernel, api, barrier_and, buffer_and_args, dispatch, read_u64, Api, Writer,
};

struct Seen {
    calls: AtomicU64,
    writes: u64,
    threads: Mutex<Vec<(String, std::thread::ThreadId)>>,
    /// For the deferred-doorbell test: a packet to submit from inside the first call.
    inner: Mutex<Option<(Api, *mut sys::hsa_queue_t, [u8; 64])>>,
}

// SAFETY: the raw queue pointer is only used through the simulator's thread-safe entries.
unsafe impl Send for Seen {}

// SAFETY: as above.
unsafe impl Sync for Seen {}

impl Seen {
    fn new(writes: u64) -> Self {
        Seen {
            calls: AtomicU64::new(0),
            writes,
            threads: Mutex::new(Vec::new()),
            inner: Mutex::new(None),
        }
    }
}

unsafe extern "C" fn interceptor(
    pkts: *const c_void,
    count: u64,
    _user_index: u64,
    data: *mut c_void,
    writer: Writer,
) {
    // SAFETY: `data` is the test's `Seen`, alive for the queue's life.
    let seen = unsafe { &*data.cast::<Seen>() };
    seen.calls.fetch_add(1, Ordering::SeqCst);
    let t = std::thread::current();
    seen.threads
        .lock()
        .unwrap()
        .push((t.name().unwrap_or("").to_owned(), t.id()));
    for _ in 0..seen.writes {
        // SAFETY: the runtime's writer with the packets it gave.
        unsafe { writer.unwrap()(pkts, count) };
    }
    let inner = seen.inner.lock().unwrap().take();
    if let Some((api, q, p)) = inner {
        // Tool work from inside the interceptor: its doorbell is deferred.
        api.submit(q, p, true);
    }
}

fn intercepted(api: &Api, sim: &SimHsa, size: u32, seen: &Seen) -> *mut sys::hsa_queue_t {
    let q = api.queue(sim.gpu_agents()[0], size, true);
    // SAFETY: a live intercepting queue; `seen` outlives it in each test.
    let st = unsafe {
        (api.intercept_register)(
            q,
            Some(interceptor),
            (seen as *const Seen).cast_mut().cast(),
        )
    };
    assert_eq!(st, 0);
    q
}

#[test]
fn pass_through_interceptor_runs_the_packet_on_the_ringing_thread() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(1);
    let q = intercepted(&api, &sim, 64, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 5);
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done, false), true);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 5);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        seen.threads.lock().unwrap()[0].1,
        std::thread::current().id()
    );
    // SAFETY: a live queue (the proxy's read index moved when intercepted).
    assert_eq!(unsafe { (api.load_read_index)(q) }, 1);
    // SAFETY: a live queue.
    assert_eq!(unsafe { (api.queue_destroy)(q) }, 0);
}

#[test]
fn interceptor_writing_twice_runs_the_packet_twice() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(2);
    let q = intercepted(&api, &sim, 64, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 3);
    let done = api.signal(2);
    api.submit(q, dispatch(k, args, done, false), true);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 6);
}

#[test]
fn interceptors_chain_most_recent_first() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let first = Seen::new(1);
    let second = Seen::new(2);
    let q = intercepted(&api, &sim, 64, &first);
    // SAFETY: a live intercepting queue; `second` outlives it.
    unsafe {
        (api.intercept_register)(
            q,
            Some(interceptor),
            (&second as *const Seen).cast_mut().cast(),
        )
    };
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let done = api.signal(2);
    api.submit(q, dispatch(k, args, done, false), true);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 2);
    assert_eq!(
        second.calls.load(Ordering::SeqCst),
        1,
        "the most recent sees it first"
    );
    assert_eq!(
        first.calls.load(Ordering::SeqCst),
        2,
        "once per write of the one above"
    );
}

#[test]
fn full_ring_parks_packets_until_there_is_room() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(1);
    let q = intercepted(&api, &sim, 4, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let dep = api.signal(1);
    let b = api.signal(1);
    let done = api.signal(3);
    // A barrier that blocks the hardware ring, then two dispatches: three of the ring's four
    // slots are taken, and the runtime keeps the last one for its retry barrier.
    api.submit(q, barrier_and(&[dep], b), false);
    for _ in 0..2 {
        api.submit(q, dispatch(k, args, done, false), false);
    }
    api.ring(q);
    assert_eq!(sim.parked(q), 0);
    // One more: one slot free is not more than one packet, so `writer` parks it silently and
    // the retry barrier takes the last slot.
    api.submit(q, dispatch(k, args, done, false), true);
    assert_eq!(sim.parked(q), 1);
    assert_eq!(
        seen.calls.load(Ordering::SeqCst),
        4,
        "one interceptor call per packet"
    );
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(read_u64(buf), 0);
    // SAFETY: a live signal.
    unsafe { (api.signal_store_screlease)(dep, 0) };
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 3);
    assert_eq!(sim.parked(q), 0);
}

#[test]
fn the_runtime_hands_interceptors_one_packet_per_call_in_order() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(1);
    let q = intercepted(&api, &sim, 64, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let done = api.signal(3);
    // Three packets written, one doorbell: three calls, as `InterceptQueue::StoreRelaxed`
    // loops over the valid packets.
    for _ in 0..3 {
        api.submit(q, dispatch(k, args, done, false), false);
    }
    api.ring(q);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 3);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 3);
}

#[test]
fn doorbell_rung_inside_an_interceptor_runs_on_the_async_thread() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(1);
    let q = intercepted(&api, &sim, 64, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let outer = api.signal(1);
    let inner = api.signal(1);
    *seen.inner.lock().unwrap() = Some((api, q, dispatch(k, args, inner, false)));
    api.submit(q, dispatch(k, args, outer, false), true);
    assert_eq!(api.wait_zero(outer), 0);
    assert_eq!(api.wait_zero(inner), 0);
    assert_eq!(read_u64(buf), 2);
    let threads = seen.threads.lock().unwrap().clone();
    assert_eq!(threads.len(), 2);
    assert_eq!(
        threads[0].1,
        std::thread::current().id(),
        "first on the ringing thread"
    );
    assert_eq!(
        threads[1].0, ASYNC_THREAD_NAME,
        "the deferred doorbell on the async thread"
    );
    assert_ne!(threads[1].1, std::thread::current().id());
}

struct Launch {
    api: Api,
    q: *mut sys::hsa_queue_t,
    packet: [u8; 64],
    handler_thread: Mutex<Option<String>>,
}

unsafe extern "C" fn launch_from_callback(value: i64, arg: *mut c_void) -> bool {
    // SAFETY: `arg` is the test's `Launch`, alive until the test ends.
    let l = unsafe { &*arg.cast::<Launch>() };
    assert_eq!(value, 0);
    *l.handler_thread.lock().unwrap() = std::thread::current().name().map(str::to_owned);
    l.api.submit(l.q, l.packet, true);
    false
}

#[test]
fn work_launched_from_an_async_handler_reaches_the_interceptor_on_the_async_thread() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let seen = Seen::new(1);
    let q = intercepted(&api, &sim, 64, &seen);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let first = api.signal(1);
    let second = api.signal(1);
    let launch = Launch {
        api,
        q,
        packet: dispatch(k, args, second, false),
        handler_thread: Mutex::new(None),
    };
    type AsyncHandler = unsafe extern "C" fn(
        sys::hsa_signal_t,
        u32,
        i64,
        Option<unsafe extern "C" fn(i64, *mut c_void) -> bool>,
        *mut c_void,
    ) -> u32;
    // SAFETY: `hsa_amd_signal_async_handler`'s signature.
    let register: AsyncHandler = unsafe { typed(sim.amd().hsa_amd_signal_async_handler_fn) };
    // SAFETY: a live signal; `launch` outlives the handler (it runs before `second` fires).
    let st = unsafe {
        register(
            first,
            0,
            0,
            Some(launch_from_callback),
            (&launch as *const Launch).cast_mut().cast(),
        )
    };
    assert_eq!(st, 0);
    api.submit(q, dispatch(k, args, first, false), true);
    assert_eq!(api.wait_zero(first), 0);
    assert_eq!(api.wait_zero(second), 0);
    assert_eq!(read_u64(buf), 2);
    assert_eq!(
        launch.handler_thread.lock().unwrap().as_deref(),
        Some(ASYNC_THREAD_NAME)
    );
    let threads = seen.threads.lock().unwrap().clone();
    assert_eq!(threads.len(), 2);
    assert_eq!(threads[1].0, ASYNC_THREAD_NAME, "tool work from a callback");
}
