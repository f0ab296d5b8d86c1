//! The runtime's memory calls (SPEC §7.1, §7.3): allocation and free of device memory of
//! every class, reported to the tracker by the runtime itself (a free is recorded before the
//! memory is released), peer mappings, host reads and writes gated on the agent they write,
//! the digest of an agent's application memory, and code objects, whose variables are device
//! memory too. An allocation that fails for lack of device memory releases the memory layer's
//! pools and is retried once.

use replay_core::{AgentId, Digest128, MemoryClass};

use super::{SimRuntime, FINAL_DIGEST_KEY};
use crate::error::SimError;
use crate::heap::{agent_of, Owner};
use crate::module::{Module, ModuleSpec};

impl SimRuntime {
    /// Allocates `size` bytes of `class` on `agent` and reports it to the tracker.
    /// `TOOL_OWNED` memory is marked as the tool's. When the device is full, the memory layer's
    /// pools are released and the allocation retried once.
    pub fn alloc(&self, agent: AgentId, size: u64, class: MemoryClass) -> Result<u64, SimError> {
        self.release_idle(agent);
        match self.shared().alloc_mem(agent, size, class, true, None) {
            Err(SimError::OutOfMemory { .. }) if self.shared().agent_shared(agent).is_some() => {
                self.engine(agent).release_pools();
                self.shared().alloc_mem(agent, size, class, true, None)
            }
            r => r,
        }
    }

    /// Allocates `size` bytes of `class` on `agent` at the address `base` (standalone replay of
    /// a capture, SPEC §13: pointers stored in the data stay valid), reported to the tracker.
    /// An address in use, or one of another agent, is [`SimError::AddressInUse`].
    pub fn alloc_at(
        &self,
        agent: AgentId,
        base: u64,
        size: u64,
        class: MemoryClass,
    ) -> Result<u64, SimError> {
        self.shared()
            .alloc_mem(agent, size, class, true, Some(base))
    }

    /// Allocates memory the backend does not see (never reported to the tracker): a
    /// virtual-memory mapping made through an unwrapped path, a device-side heap. The runtime
    /// still knows it ([`SimMemory`]'s `query_pointer`): an argument into it is captured when it
    /// is fine-grained, managed or pinned, and declines `untracked_memory` otherwise (SPEC
    /// §7.1); memory no argument points into is not restored.
    ///
    /// [`SimMemory`]: crate::SimMemory
    pub fn alloc_untracked(
        &self,
        agent: AgentId,
        size: u64,
        class: MemoryClass,
    ) -> Result<u64, SimError> {
        self.shared().alloc_mem(agent, size, class, false, None)
    }

    /// Frees memory made by [`SimRuntime::alloc`] or [`SimRuntime::alloc_untracked`]; the
    /// tracker hears of it before the memory is released.
    pub fn free(&self, agent: AgentId, base: u64) -> Result<(), SimError> {
        self.shared().free_mem(agent, base)
    }

    /// Makes another agent's allocation at `base` accessible to `agent`: reported to the
    /// tracker for `agent` as `PEER` memory.
    pub fn map_peer(&self, agent: AgentId, base: u64) -> Result<(), SimError> {
        let owner = agent_of(base).ok_or(SimError::InvalidFree { agent, addr: base })?;
        let a = self
            .shared()
            .agent_or_err(owner)?
            .heap
            .get(base)
            .ok_or(SimError::InvalidFree { agent, addr: base })?;
        self.inner
            .tracker
            .record_alloc(agent, base, a.size, MemoryClass::PEER);
        Ok(())
    }

    /// Ends a peer mapping made by [`SimRuntime::map_peer`].
    pub fn unmap_peer(&self, agent: AgentId, base: u64) {
        self.inner.tracker.record_free(agent, base);
    }

    /// Writes device memory from the host (synchronous; read-only memory included). It takes
    /// the reader side of the agent's gate ([`ReplayService::enter_write`]) across the write,
    /// so while a replay window is open on that agent it waits for the window's end, and no
    /// restore undoes it; from inside a tool callback (tool work) it writes at once.
    ///
    /// [`ReplayService::enter_write`]: replay_core::ReplayService::enter_write
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), SimError> {
        let agent = agent_of(addr).unwrap_or_default();
        let _gate = self.write_gate(agent);
        Ok(self.shared().device_write(agent, addr, data, true)?)
    }

    /// Reads device memory to the host (synchronous).
    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, SimError> {
        let agent = agent_of(addr).unwrap_or_default();
        let mut v = vec![0u8; len];
        self.shared().device_read(agent, addr, &mut v, true)?;
        Ok(v)
    }

    /// Writes `u32`s.
    pub fn write_u32s(&self, addr: u64, v: &[u32]) -> Result<(), SimError> {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.write(addr, &b)
    }

    /// Reads `n` `u32`s.
    pub fn read_u32s(&self, addr: u64, n: usize) -> Result<Vec<u32>, SimError> {
        Ok(self
            .read(addr, n * 4)?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Fills `len` bytes with `byte`.
    pub fn fill(&self, addr: u64, len: usize, byte: u8) -> Result<(), SimError> {
        self.write(addr, &vec![byte; len])
    }

    /// Digest of all application memory of an agent: every allocation made through the runtime
    /// (tracked or not) and every module variable, in address order, with base and size; never
    /// the kernarg pool, tool memory or backing memory. Keyed with [`FINAL_DIGEST_KEY`], so
    /// two runtimes holding the same bytes at the same addresses give the same digest.
    pub fn digest_agent_memory(&self, agent: AgentId) -> Digest128 {
        let mut buf = Vec::new();
        if let Some(a) = self.shared().agent_shared(agent) {
            for x in a.heap.all() {
                if matches!(x.owner, Owner::App | Owner::Unreported | Owner::Module) {
                    buf.extend_from_slice(&x.base.to_le_bytes());
                    buf.extend_from_slice(&x.size.to_le_bytes());
                    buf.extend_from_slice(&x.data.read());
                }
            }
        }
        replay_core::digest::digest(FINAL_DIGEST_KEY, &buf)
    }

    // ----- code objects -----

    /// Loads a code object on an agent: allocates its variables, makes its kernels.
    pub fn load_module(&self, agent: AgentId, spec: ModuleSpec) -> Result<Module, SimError> {
        self.shared().load_module(agent, spec)
    }

    /// Unloads a code object: frees its variables and makes the service forget its kernels.
    pub fn unload_module(&self, module: &Module) -> Result<(), SimError> {
        self.shared()
            .unload_module(module.agent, module.code_object)?;
        self.inner
            .tracker
            .record_unload(module.agent, module.code_object);
        if let Some(s) = self.service() {
            s.forget_code_object(module.agent, module.code_object);
        }
        Ok(())
    }
}
