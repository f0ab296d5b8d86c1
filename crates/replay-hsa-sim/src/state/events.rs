//! Work handed to an instance's two threads (SPEC §9.1): the async-events thread's events
//! (queue work, handlers armed by `hsa_amd_signal_async_handler`, functions queued by
//! `hsa_amd_async_function`) and the copy engine's jobs.

/// Work a queue hands to the async-events thread (a doorbell rung from inside an interceptor,
/// a retry of packets parked on a full ring). It answers whether the thread then polls its
/// armed handlers, as it does after every other event (a retry that is still waiting for its
/// barrier, and posted itself again, does not).
pub(crate) type QueueJob = Box<dyn FnOnce() -> bool + Send>;

/// Work for the async-events thread.
pub(crate) enum AsyncEvent {
    /// Work of an intercepting queue.
    Queue(QueueJob),
    /// `hsa_amd_signal_async_handler`: call `handler(value, arg)` when the condition holds;
    /// it stays armed while the handler answers true.
    Handler(AsyncHandler),
    /// `hsa_amd_async_function`: call `f(arg)` once.
    Function(AsyncFunction),
}

/// A handler armed by `hsa_amd_signal_async_handler`.
pub(crate) struct AsyncHandler {
    pub(crate) signal: u64,
    pub(crate) cond: u32,
    pub(crate) value: i64,
    pub(crate) handler: unsafe extern "C" fn(i64, *mut std::ffi::c_void) -> bool,
    pub(crate) arg: usize,
}

/// A function queued by `hsa_amd_async_function`.
pub(crate) struct AsyncFunction {
    pub(crate) f: unsafe extern "C" fn(*mut std::ffi::c_void),
    pub(crate) arg: usize,
}

/// An asynchronous copy.
pub(crate) struct CopyJob {
    pub(crate) dst: u64,
    pub(crate) src: u64,
    pub(crate) len: usize,
    pub(crate) deps: Vec<u64>,
    pub(crate) completion: u64,
}
