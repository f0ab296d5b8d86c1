//! The simulator's state (SPEC §9.1): the process-wide registry of handles (agents, pools,
//! signals, executables, kernel objects), host-backed memory, signals with real waiting, and
//! the per-instance async-events and copy-engine threads.
//!
//! This file gives an instance its life: its creation (agents, pools, threads), its modules
//! and symbols, its shutdown, and its two threads' loops, with the timestamp frequency. Beside
//! it, each with one job, bottom to top: `config` (what a runtime is built with), `memory`
//! (the memory map and the checked accesses to it), `signals`, `events` (work handed to the
//! two threads), `registry` (the handle records and the instances they belong to), `alloc`
//! (pool allocations). This file re-exports what the files above the state use.
//!
//! Below the queues, the vmem entries and the C entries, which call down into it; it names
//! none of them. What they hang on it is typed in this module: a mapping's access record
//! ([`MapAccess`], in `memory`), the queue a doorbell signal rings (`Doorbell`, in `signals`),
//! work a queue hands to the async-events thread (`AsyncEvent::Queue`, in `events`), and the
//! queues an instance stops when it shuts down (a callback of `Instance::shut_down`, here).

mod alloc;
mod config;
mod events;
mod memory;
mod registry;
mod signals;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use replay_hsa::sys;

pub use crate::pool::PoolKind;
pub(crate) use alloc::{allocate, free};
pub use config::{SimConfig, VariableSpec};
pub(crate) use events::{AsyncEvent, AsyncFunction, AsyncHandler, CopyJob};
pub(crate) use memory::{
    copy, find, insert_mapping, map_foreign, remove_mappings, unmap_foreign, with_range,
};
pub use memory::{
    Alloc, Dispatch, KernelFn, MapAccess, MemFault, HSA_ACCESS_PERMISSION_NONE,
    HSA_ACCESS_PERMISSION_RO, HSA_ACCESS_PERMISSION_RW, HSA_ACCESS_PERMISSION_WO,
};
pub(crate) use registry::{current, instance_of_agent, instances, set_current, REG};
pub use registry::{
    next_handle, register_kernel, signal, signal_create, signal_destroy, AgentRec, ExecRec,
    Instance, LoadedRec, PoolRec, SymbolRec,
};
pub use signals::SignalObj;
pub(crate) use signals::{condition, Doorbell};

/// The name of each instance's async-events thread.
pub const ASYNC_THREAD_NAME: &str = "hsa-sim-async-events";
/// The name of each instance's copy-engine thread.
pub const COPY_THREAD_NAME: &str = "hsa-sim-copy-engine";

impl Instance {
    pub(crate) fn new(config: SimConfig) -> Arc<Self> {
        let inst = Arc::new_cyclic(|weak: &Weak<Instance>| {
            let mut agents = Vec::new();
            for (i, (device, name)) in [
                (sys::HSA_DEVICE_TYPE_CPU, "sim-cpu"),
                (sys::HSA_DEVICE_TYPE_GPU, "gfx942-sim0"),
                (sys::HSA_DEVICE_TYPE_GPU, "gfx942-sim1"),
            ]
            .into_iter()
            .enumerate()
            {
                let handle = next_handle();
                let kinds: &[PoolKind] = if device == sys::HSA_DEVICE_TYPE_CPU {
                    &[PoolKind::Kernarg, PoolKind::HostFine]
                } else {
                    &[PoolKind::DeviceCoarse, PoolKind::DeviceFine]
                };
                let mut pools = Vec::new();
                for &kind in kinds {
                    let ph = next_handle();
                    let capacity = if device == sys::HSA_DEVICE_TYPE_CPU {
                        config.host_pool_bytes
                    } else {
                        config.device_pool_bytes
                    };
                    REG.pools.lock().insert(
                        ph,
                        Arc::new(PoolRec {
                            handle: ph,
                            agent: handle,
                            kind,
                            capacity,
                            reserved: if kind == PoolKind::DeviceCoarse {
                                config.device_reserved_bytes.min(capacity)
                            } else {
                                0
                            },
                            used: Mutex::new(0),
                        }),
                    );
                    pools.push(ph);
                }
                let rec = Arc::new(AgentRec {
                    handle,
                    device,
                    name: name.to_owned(),
                    node: i as u32,
                    pools,
                    instance: weak.clone(),
                });
                REG.agents.lock().insert(handle, rec.clone());
                agents.push(rec);
            }
            Instance {
                id: next_handle(),
                config,
                agents,
                executables: Mutex::new(Vec::new()),
                faults: Mutex::new(Vec::new()),
                injected: crate::fault::Faults::default(),
                shutdown: AtomicBool::new(false),
                async_tx: Mutex::new(None),
                copy_tx: Mutex::new(None),
                threads: Mutex::new(Vec::new()),
            }
        });
        REG.instances.lock().push(Arc::downgrade(&inst));
        TIMESTAMP_HZ.store(inst.config.timestamp_hz.max(1), Ordering::SeqCst);
        set_current(&inst);
        let (atx, arx) = mpsc::channel::<AsyncEvent>();
        let (ctx, crx) = mpsc::channel::<CopyJob>();
        let w = Arc::downgrade(&inst);
        let async_thread = std::thread::Builder::new()
            .name(ASYNC_THREAD_NAME.into())
            .spawn(move || async_events_loop(w, arx))
            .expect("spawn the async-events thread");
        let w = Arc::downgrade(&inst);
        let copy_thread = std::thread::Builder::new()
            .name(COPY_THREAD_NAME.into())
            .spawn(move || copy_engine_loop(w, crx))
            .expect("spawn the copy-engine thread");
        *inst.async_tx.lock() = Some(atx);
        *inst.copy_tx.lock() = Some(ctx);
        inst.threads.lock().extend([async_thread, copy_thread]);
        inst
    }

    /// Posts work to the async-events thread.
    pub(crate) fn post_async(&self, ev: AsyncEvent) {
        if let Some(tx) = self.async_tx.lock().as_ref() {
            let _ = tx.send(ev);
        }
    }

    /// Submits a copy to the copy engine.
    pub(crate) fn submit_copy(&self, job: CopyJob) -> bool {
        self.copy_tx
            .lock()
            .as_ref()
            .is_some_and(|tx| tx.send(job).is_ok())
    }

    pub(crate) fn pool_handle(&self, gpu: usize, kind: PoolKind) -> u64 {
        let agent = match kind {
            PoolKind::Kernarg | PoolKind::HostFine => &self.agents[0],
            _ => &self.agents[1 + gpu.min(1)],
        };
        let pools = REG.pools.lock();
        agent
            .pools
            .iter()
            .copied()
            .find(|p| pools.get(p).is_some_and(|r| r.kind == kind))
            .unwrap_or(0)
    }

    pub(crate) fn load_module(
        &self,
        gpu: usize,
        variables: &[VariableSpec],
        kernels: &[(&str, KernelFn)],
    ) -> u64 {
        let agent = self.agents[1 + gpu.min(1)].handle;
        let kernels: Vec<(String, KernelFn)> = kernels
            .iter()
            .map(|(n, b)| ((*n).to_owned(), b.clone()))
            .collect();
        let (symbols, _) = self.define_symbols(agent, variables, &kernels, &[]);
        let exec = next_handle();
        REG.executables.lock().insert(
            exec,
            ExecRec {
                symbols,
                defined: Vec::new(),
            },
        );
        self.executables.lock().push(exec);
        exec
    }

    /// Adds the symbols of `variables` (allocated from the agent's coarse-grained pool,
    /// zeroed, unless `defined` names the variable's address for this agent: then it is
    /// there, in the application's memory) and `kernels` (each registered as a new kernel
    /// object) for agent `agent`; the symbol handles, and each kernel's object in order.
    pub(crate) fn define_symbols(
        &self,
        agent: u64,
        variables: &[VariableSpec],
        kernels: &[(String, KernelFn)],
        defined: &[(String, u64, u64)],
    ) -> (Vec<u64>, Vec<u64>) {
        let gpu = self.agents[1..]
            .iter()
            .position(|a| a.handle == agent)
            .unwrap_or(0);
        let handle = self.pool_handle(gpu, PoolKind::DeviceCoarse);
        let pool = REG
            .pools
            .lock()
            .get(&handle)
            .cloned()
            .expect("the coarse pool exists");
        let mut symbols = Vec::new();
        let mut objects = Vec::new();
        for v in variables {
            let placed = defined
                .iter()
                .find(|(n, a, _)| *n == v.name && *a == agent)
                .map(|&(_, _, at)| at);
            let address = placed
                .or_else(|| allocate(&pool, v.size.max(1) as usize))
                .unwrap_or(0);
            let h = next_handle();
            REG.symbols.lock().insert(
                h,
                SymbolRec {
                    name: v.name.clone(),
                    agent,
                    is_kernel: false,
                    address,
                    size: v.size,
                    is_const: v.is_const,
                    external: placed.is_some(),
                },
            );
            symbols.push(h);
        }
        for (name, body) in kernels {
            let object = register_kernel(name, body.clone());
            let h = next_handle();
            REG.symbols.lock().insert(
                h,
                SymbolRec {
                    name: name.clone(),
                    agent,
                    is_kernel: true,
                    address: object,
                    size: 0,
                    is_const: false,
                    external: false,
                },
            );
            symbols.push(h);
            objects.push(object);
        }
        (symbols, objects)
    }

    /// Lists `exec` among this instance's executables (the loader extension reports it).
    pub(crate) fn add_executable(&self, exec: u64) {
        let mut execs = self.executables.lock();
        if !execs.contains(&exec) {
            execs.push(exec);
        }
    }

    pub(crate) fn kernel_object(&self, name: &str) -> Option<u64> {
        self.symbol(name, true)
    }

    pub(crate) fn variable_address(&self, name: &str) -> Option<u64> {
        self.symbol(name, false)
    }

    fn symbol(&self, name: &str, kernel: bool) -> Option<u64> {
        let execs = self.executables.lock().clone();
        let ex = REG.executables.lock();
        let syms = REG.symbols.lock();
        execs
            .iter()
            .filter_map(|e| ex.get(e))
            .flat_map(|e| e.symbols.iter())
            .filter_map(|s| syms.get(s))
            .find(|s| s.is_kernel == kernel && s.name == name)
            .map(|s| s.address)
    }

    /// Shuts the instance down: marks it stopping, lets `stop_queues` stop the queues of this
    /// instance's id (the queues live above this file), then ends and joins its threads.
    pub(crate) fn shut_down(&self, stop_queues: impl FnOnce(u64)) {
        self.shutdown.store(true, Ordering::SeqCst);
        stop_queues(self.id);
        *self.async_tx.lock() = None;
        *self.copy_tx.lock() = None;
        let threads: Vec<_> = self.threads.lock().drain(..).collect();
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

/// The timestamp frequency of the instance created last (signal entries carry no instance).
static TIMESTAMP_HZ: AtomicU64 = AtomicU64::new(1_000_000_000);

/// The system timestamp frequency, Hz.
pub(crate) fn timestamp_hz() -> u64 {
    TIMESTAMP_HZ.load(Ordering::SeqCst)
}

/// A duration in timestamp ticks (saturating below `u64::MAX`, which means "no timeout").
pub(crate) fn duration_to_ticks(d: Duration) -> u64 {
    let t = d.as_nanos().saturating_mul(u128::from(timestamp_hz())) / 1_000_000_000;
    u64::try_from(t).unwrap_or(u64::MAX).min(u64::MAX - 1)
}

/// A timeout hint in timestamp ticks as a duration (`u64::MAX`: none).
pub(crate) fn ticks_to_duration(ticks: u64) -> Option<Duration> {
    if ticks == u64::MAX {
        return None;
    }
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(timestamp_hz());
    Some(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
}

/// The async-events thread: queue work (deferred doorbells, retries of parked packets),
/// signal handlers and async functions.
fn async_events_loop(inst: Weak<Instance>, rx: mpsc::Receiver<AsyncEvent>) {
    if let Some(i) = inst.upgrade() {
        set_current(&i);
    }
    let mut armed: Vec<AsyncHandler> = Vec::new();
    loop {
        let ev = if armed.is_empty() {
            match rx.recv() {
                Ok(ev) => Some(ev),
                Err(_) => return,
            }
        } else {
            match rx.recv_timeout(Duration::from_micros(500)) {
                Ok(ev) => Some(ev),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        };
        // Whether the armed handlers are polled after this event (a queue's job says).
        let poll = match ev {
            None => true,
            Some(AsyncEvent::Queue(job)) => job(),
            Some(AsyncEvent::Handler(h)) => {
                armed.push(h);
                true
            }
            Some(AsyncEvent::Function(f)) => {
                let call = std::panic::AssertUnwindSafe(|| {
                    // SAFETY: the function and argument given to `hsa_amd_async_function`,
                    // called once on this thread as the runtime does.
                    unsafe { (f.f)(f.arg as *mut c_void) }
                });
                if std::panic::catch_unwind(call).is_err() {
                    log::error!("hsa-sim: an async function panicked");
                }
                true
            }
        };
        if !poll {
            continue;
        }
        armed.retain(|h| {
            let Some(sig) = signal(h.signal) else {
                return false;
            };
            let v = sig.load();
            if !condition(h.cond, v, h.value) {
                return true;
            }
            let call = std::panic::AssertUnwindSafe(|| {
                // SAFETY: the handler and argument given to `hsa_amd_signal_async_handler`,
                // called on this thread with the value that satisfied its condition.
                unsafe { (h.handler)(v, h.arg as *mut c_void) }
            });
            std::panic::catch_unwind(call).unwrap_or(false)
        });
    }
}

fn copy_engine_loop(inst: Weak<Instance>, rx: mpsc::Receiver<CopyJob>) {
    if let Some(i) = inst.upgrade() {
        set_current(&i);
    }
    while let Ok(job) = rx.recv() {
        if let Some(i) = inst.upgrade() {
            let stall = crate::fault::SimFault::CopyEngineStalled;
            if i.injected.armed(stall) {
                i.injected.count(stall);
                while i.injected.armed(stall) && !i.shutdown.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        for d in &job.deps {
            if let Some(s) = signal(*d) {
                loop {
                    if s.wait(|v| v == 0, Some(Duration::from_millis(20))) == 0 {
                        break;
                    }
                    if inst
                        .upgrade()
                        .is_none_or(|i| i.shutdown.load(Ordering::SeqCst))
                    {
                        return;
                    }
                }
            }
        }
        if let Err(e) = copy(job.dst, job.src, job.len) {
            if let Some(i) = inst.upgrade() {
                i.faults.lock().push(format!("async copy: {e}"));
            }
        }
        if let Some(s) = signal(job.completion) {
            s.update(|v| v - 1);
        }
    }
}
