//! # replay-hsa-sim
//!
//! A simulated HSA runtime (SPEC §9.1): an `HsaApiTable` of the **current major**
//! (root 3, core 2, AMD extension 2, bound by [`replay_hsa::sys::v2`]) whose entries are
//! `extern "C"` Rust functions over a simulated GPU, so that `replay-hsa`'s `OnLoad` and its
//! wrappers can be driven the way a HIP runtime drives the real one, on a machine without an
//! AMD GPU.
//!
//! What is simulated ([`SimHsa::new`] builds one instance):
//! - **Agents**: one CPU agent and two GPU agents (`hsa_iterate_agents`, `hsa_agent_get_info`).
//! - **Memory pools** ([`PoolKind`]): per GPU a coarse-grained and a fine-grained device pool;
//!   on the CPU a kernarg pool (kernarg-init flag) and a fine-grained (pinned host) pool. Regions
//!   mirror the pools (same handles) for `hsa_memory_allocate`. Allocations are real host
//!   memory, so the application writes kernarg buffers and packets through plain pointers as
//!   it would on an APU; kernels reach memory only through checked accessors ([`Dispatch`]):
//!   an address outside every live allocation is a memory fault. As with the real allocators,
//!   a freed block is reused by the next allocation of its size from its pool (same address,
//!   new allocation).
//! - **Signals** with real waiting (a mutex and a condition variable per signal; the timeout
//!   hint of `hsa_signal_wait_*` is read in timestamp ticks).
//! - **User-mode queues** ([`queue`]): a ring of 64-byte AQL packets, read and write indices,
//!   a doorbell signal and a packet-processor thread per queue that runs kernel-dispatch
//!   packets (the kernel object names a Rust closure registered with [`SimHsa::register_kernel`])
//!   and barrier-AND packets, honours the barrier bit, and decrements completion signals. The
//!   read index moves when a packet is consumed (launched), not when it completes.
//! - **Intercepting queues** with the real runtime's threading: interceptors are called under
//!   the queue's lock, most recently registered first, on the thread that rang the doorbell;
//!   `writer` passes packets down the chain and at the bottom copies them into the hardware
//!   ring and rings its doorbell on the calling thread, parking them silently when the ring is
//!   full; a doorbell rung from inside an interceptor is deferred to the single async-events
//!   thread ([`ASYNC_THREAD_NAME`]), which also retries parked packets.
//! - The **async-events thread** also runs `hsa_amd_signal_async_handler` handlers (re-armed
//!   while they answer true) and `hsa_amd_async_function` callbacks, so work a client launches
//!   from a completion callback reaches the interceptors on that thread, as in the real runtime.
//! - The **copy engine** (`hsa_amd_memory_async_copy`, `_on_engine`): a thread per instance
//!   ([`COPY_THREAD_NAME`]) that waits for the dependency signals, copies and decrements the
//!   completion signal.
//! - The **loader extension** (`hsa_ven_amd_loader` 1.03, for `hsa_ven_amd_loader_iterate_executables`)
//!   and executable symbols (`hsa_executable_iterate_agent_symbols`,
//!   `hsa_executable_symbol_get_info`, a kernel's argument block size included:
//!   [`SimHsa::set_kernarg_segment_size`]) backed by modules loaded with [`SimHsa::load_module`].
//! - **Code objects as an application loads them** ([`code_object`]):
//!   `hsa_code_object_reader_create_from_memory`, `hsa_executable_create_alt`,
//!   `hsa_executable_load_agent_code_object`, `hsa_executable_freeze`,
//!   `hsa_executable_get_symbol_by_name`, and `hsa_executable_agent_global_variable_define`
//!   (a variable of the code objects loaded next placed at an address the application gives,
//!   neither allocated nor freed by the loader); a simulated code object names its kernels, whose
//!   bodies are the closures defined by name with [`SimHsa::define_kernel`], and its
//!   variables; the loader extension reports each loaded code object and the memory it was
//!   read from (`hsa_ven_amd_loader_loaded_code_object_get_info`), as the real loader does.
//! - **Memory the tool may never have seen**: `hsa_amd_pointer_info` answers from the memory
//!   map (type `HSA` for pool blocks, `LOCKED`, `IPC`, `UNKNOWN` elsewhere; base, size, owner,
//!   the pool's global flags); `hsa_amd_memory_lock` / `_lock_to_pool` / `_unlock` map host
//!   memory the application owns (a `LOCKED` block of the CPU agent at the same address);
//!   `hsa_amd_ipc_memory_create` / `_attach` / `_detach` give an `IPC` block (a block of its
//!   own holding the exporter's bytes: the simulator is one process); `hsa_amd_memory_fill`
//!   fills synchronously.
//! - **Virtual memory** ([`vmem`]): the `hsa_amd_vmem_*` entries (reserved ranges, handles
//!   from GPU pools, map / unmap, access per agent enforced on kernels, a reservation at the
//!   address asked for where that host range is free, retain, export /
//!   import, handle properties); `hsa_amd_pointer_info` answers `RESERVED_ADDR` and
//!   `HSA_VMEM`.
//! - **Kernel bodies known by name** ([`kernels`]): the ones every program of the workspace can
//!   define, so a code object captured in one process loads in another (`kreplay replay`).
//!
//! [`client::Client`] drives it the way the HIP runtime would (queues, pools, AQL packets,
//! doorbells, completion signals, async copies), for tests of HSA tools.
//!
//! Entries that are not simulated are present (never NULL where the real runtime has one) and
//! answer [`STATUS_NOT_SIMULATED`] (`HSA_STATUS_ERROR`).
//!
//! ## Design
//!
//! - The C entries carry no context pointer, so handles are process-wide: agents, pools,
//!   signals, queues, executables and kernel objects live in one registry ([`state`]) and the
//!   instance is found from the handle. `hsa_iterate_agents` and the loader's executable
//!   iteration (which take no handle) use the calling thread's instance: the one it created
//!   last, or the one owning the simulator thread it runs on; otherwise the last created.
//! - Memory is host memory, not `replay-mock`'s: the simulated GPU of `replay-mock` places
//!   device memory at fake addresses the host cannot dereference, while an HSA client writes
//!   kernel arguments and AQL packets through plain pointers (kernarg and queue memory are
//!   host-visible on real systems too). So allocations here are real, zeroed, page-aligned host
//!   blocks recorded in a map (pool, owner agent, size), pointer info answers from that map, and
//!   kernels (closures over [`Dispatch`], not `replay_mock::Kernel`) reach memory only through
//!   checked accessors that hold the map's read lock. A free takes the write lock, so a kernel
//!   never touches freed memory.
//! - Timeout hints are timestamp ticks, as in the real runtime: `hsa_system_get_info` reports
//!   [`SimConfig::timestamp_hz`] (1 GHz by default, so ticks are nanoseconds); the frequency is
//!   process-wide (signal entries carry no instance), set by the instance created last.
//! - **Faults** ([`fault`], [`SimHsa::inject`]): pools that run out, refused async copies, a
//!   stalled copy engine, failing `hsa_memory_copy`, `hsa_signal_create`, loader iteration and
//!   `hsa_amd_agents_allow_access` and `hsa_amd_pointer_info`,
//!   so that each fault path of a tool is reached through the runtime's own entries.
//! - A faulting kernel (memory fault, panic, unknown kernel object) calls the queue's error
//!   callback with `HSA_STATUS_ERROR_EXCEPTION`, is listed in [`SimHsa::faults`], and its
//!   completion signal is not decremented (as on hardware, where the queue goes into error).
//! - `unsafe` only at the C boundary: every `extern "C"` entry catches panics and answers an
//!   error status (value-returning signal entries answer `-1`, and a panic is logged).
//! - Threads end when their instance is dropped or their queue destroyed; every wait inside the
//!   simulator has a bounded poll interval, so shutdown never hangs.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod client;
pub mod code_object;
pub mod entries;
pub mod fault;
pub mod kernels;
pub mod pool;
pub mod queue;
pub mod state;
pub mod table;
pub mod vmem;

use std::mem::ManuallyDrop;
use std::sync::Arc;

pub use client::Client;
pub use code_object::CodeObject;
pub use entries::{LoaderTable, STATUS_NOT_SIMULATED};
pub use fault::{FaultId, FaultMode, SimFault};
pub use pool::PoolKind;
pub use queue::PROCESSOR_THREAD_PREFIX;
pub use state::{
    Dispatch, KernelFn, MemFault, SimConfig, VariableSpec, ASYNC_THREAD_NAME, COPY_THREAD_NAME,
};

use replay_hsa::sys::{self, v2};

/// One simulated HSA runtime: its agents, pools, threads, and its API table.
///
/// The tables are never freed (as the real runtime's live as long as the process): a tool that
/// kept the address of a slot never reads freed memory after the instance is dropped.
pub struct SimHsa {
    inner: Arc<state::Instance>,
    root: ManuallyDrop<Box<v2::HsaApiTable>>,
    core: ManuallyDrop<Box<v2::CoreApiTable>>,
    amd: ManuallyDrop<Box<v2::AmdExtTable>>,
}

impl std::fmt::Debug for SimHsa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimHsa")
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

impl SimHsa {
    /// A runtime with one CPU agent and two GPU agents, the pools of [`PoolKind`], its
    /// async-events and copy-engine threads, and a fresh API table. The calling thread's
    /// current instance becomes this one.
    pub fn new(config: SimConfig) -> Self {
        let inner = state::Instance::new(config);
        let mut core = Box::new(entries::core_table());
        let mut amd = Box::new(entries::amd_table());
        let root = Box::new(v2::HsaApiTable {
            version: sys::ApiTableVersion {
                major_id: 3,
                minor_id: std::mem::size_of::<v2::HsaApiTable>() as u32,
                step_id: 0,
                reserved: 0,
            },
            core_: &mut *core,
            amd_ext_: &mut *amd,
            finalizer_ext_: std::ptr::null_mut(),
            image_ext_: std::ptr::null_mut(),
            tools_: std::ptr::null_mut(),
            pc_sampling_ext_: std::ptr::null_mut(),
        });
        Self {
            inner,
            root: ManuallyDrop::new(root),
            core: ManuallyDrop::new(core),
            amd: ManuallyDrop::new(amd),
        }
    }

    /// The root API table, as `OnLoad` receives it. Valid while `self` lives.
    pub fn table(&mut self) -> *mut v2::HsaApiTable {
        &mut **self.root
    }

    /// The core table (read the entries from here, after a tool may have replaced them).
    pub fn core(&self) -> &v2::CoreApiTable {
        &self.core
    }

    /// The AMD extension table.
    pub fn amd(&self) -> &v2::AmdExtTable {
        &self.amd
    }

    /// Makes this instance the calling thread's current one (for `hsa_iterate_agents`).
    pub fn enter(&self) {
        state::set_current(&self.inner);
    }

    /// The CPU agent.
    pub fn cpu_agent(&self) -> sys::hsa_agent_t {
        sys::hsa_agent_t {
            handle: self.inner.agents[0].handle,
        }
    }

    /// The GPU agents (two).
    pub fn gpu_agents(&self) -> Vec<sys::hsa_agent_t> {
        self.inner.agents[1..]
            .iter()
            .map(|a| sys::hsa_agent_t { handle: a.handle })
            .collect()
    }

    /// The pool of `kind` (on the CPU agent for the host kinds, on GPU `gpu` for the device
    /// kinds).
    pub fn pool(&self, gpu: usize, kind: PoolKind) -> sys::hsa_amd_memory_pool_t {
        sys::hsa_amd_memory_pool_t {
            handle: self.inner.pool_handle(gpu, kind),
        }
    }

    /// Registers a kernel; the returned value is the kernel object a dispatch packet names.
    pub fn register_kernel(
        &self,
        name: &str,
        body: impl Fn(&mut Dispatch<'_>) -> Result<(), MemFault> + Send + Sync + 'static,
    ) -> u64 {
        state::register_kernel(name, Arc::new(body))
    }

    /// Defines the body of the kernel `name` (without a `.kd` suffix) for the code objects
    /// loaded from now on that name it ([`code_object`]); process-wide, like kernel objects.
    pub fn define_kernel(
        &self,
        name: &str,
        body: impl Fn(&mut Dispatch<'_>) -> Result<(), MemFault> + Send + Sync + 'static,
    ) {
        state::REG
            .library
            .lock()
            .insert(name.to_owned(), Arc::new(body));
    }

    /// Loads a module on GPU `gpu`: its variables are allocated from that agent's
    /// coarse-grained pool (zeroed), its kernels registered. The executable is reported by
    /// the loader extension and its symbols by `hsa_executable_iterate_agent_symbols`.
    pub fn load_module(
        &self,
        gpu: usize,
        variables: &[VariableSpec],
        kernels: &[(&str, KernelFn)],
    ) -> u64 {
        self.inner.load_module(gpu, variables, kernels)
    }

    /// Sets the argument block size (`HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE`)
    /// the kernel symbol of `kernel_object` reports; unset, it reports
    /// [`entries::DEFAULT_KERNARG_SEGMENT_SIZE`].
    pub fn set_kernarg_segment_size(&self, kernel_object: u64, bytes: u32) {
        entries::KERNARG_SIZES.lock().insert(kernel_object, bytes);
    }

    /// The kernel object of the kernel symbol `name` of this instance's executables.
    pub fn kernel_object(&self, name: &str) -> Option<u64> {
        self.inner.kernel_object(name)
    }

    /// The address of the module variable `name` of this instance's executables.
    pub fn variable_address(&self, name: &str) -> Option<u64> {
        self.inner.variable_address(name)
    }

    /// Packets parked because a hardware ring was full, on the intercepting queue `queue`.
    pub fn parked(&self, queue: *const sys::hsa_queue_t) -> usize {
        queue::parked(queue)
    }

    /// Arms an injected fault ([`SimFault`]) on this instance.
    pub fn inject(&self, fault: SimFault, mode: FaultMode) -> FaultId {
        self.injector().inject(fault, mode)
    }

    /// [`SimHsa::inject`], firing only after `skip` occasions passed untouched.
    pub fn inject_after(&self, fault: SimFault, mode: FaultMode, skip: u32) -> FaultId {
        self.injector().inject_after(fault, mode, skip)
    }

    /// Disarms an injected fault (a stalled copy engine resumes).
    pub fn clear(&self, id: FaultId) {
        self.injector().clear(id);
    }

    /// How often the injected fault named `name` ([`SimFault::name`]) fired.
    pub fn fired(&self, name: &str) -> u64 {
        self.injector().fired(name)
    }

    /// A handle that arms faults on this instance from any thread (a tool callback, a kernel).
    pub fn injector(&self) -> Injector {
        Injector(self.inner.clone())
    }

    /// Faults the packet processors reported (kernel memory faults), as text.
    pub fn faults(&self) -> Vec<String> {
        self.inner.faults.lock().clone()
    }
}

/// Arms and clears faults of one instance; `Send + Sync`, cheap to clone. Holding one does not
/// keep the instance running: dropping its [`SimHsa`] shuts it down.
#[derive(Clone)]
pub struct Injector(Arc<state::Instance>);

impl std::fmt::Debug for Injector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Injector").field(&self.0.id).finish()
    }
}

impl Injector {
    /// Arms `fault`.
    pub fn inject(&self, fault: SimFault, mode: FaultMode) -> FaultId {
        self.0.injected.arm(fault, mode, 0)
    }

    /// Arms `fault` to fire only after `skip` occasions passed untouched (the second copy of a
    /// batch, say).
    pub fn inject_after(&self, fault: SimFault, mode: FaultMode, skip: u32) -> FaultId {
        self.0.injected.arm(fault, mode, skip)
    }

    /// Disarms a fault.
    pub fn clear(&self, id: FaultId) {
        self.0.injected.clear(id);
    }

    /// How often the fault named `name` fired.
    pub fn fired(&self, name: &str) -> u64 {
        self.0.injected.fired(name)
    }
}

impl Drop for SimHsa {
    fn drop(&mut self) {
        self.inner.shut_down(queue::destroy_instance_queues);
    }
}
