//! A fake [`DeviceMemory`]: host `Vec`s stand in for device allocations and backing memory,
//! copies and digests really move and hash bytes, fences complete after a configurable latency
//! on a virtual clock, and failures can be injected.

#![allow(dead_code)] // each test binary uses a part

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{
    AgentId, BackendError, BackendErrorKind, BackingId, Clock, CopyOp, DeviceMemory, Digest128,
    DigestKey, DigestOp, Dim3, Dispatch, DispatchId, DispatchInfo, Fence, KernelId, KernelKey,
    MemLoc, MemoryClass, Origin, PointerInfo, QueueId, SubmissionKind, Tier, TierInfo, WaitSpec,
};
use replay_memory::Tracker;

/// Time that moves only when someone sleeps.
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: Mutex<Duration>,
}

impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        *self.now.lock()
    }
    fn sleep(&self, d: Duration) {
        *self.now.lock() += d;
    }
}

pub fn wait(clock: &VirtualClock) -> WaitSpec<'_> {
    WaitSpec {
        clock,
        timeout: Duration::from_secs(2),
        progress: Duration::from_secs(5),
        slice: Duration::from_millis(10),
    }
}

#[derive(Debug)]
struct PendingFence {
    done_at: Duration,
    digests: Option<Vec<Digest128>>,
}

/// Everything the fake holds; tests read and poke it directly.
#[derive(Debug, Default)]
pub struct State {
    /// Application allocations by base.
    pub mem: BTreeMap<u64, Vec<u8>>,
    /// Backing allocations.
    pub backing: HashMap<u64, (Tier, Vec<u8>)>,
    next_id: u64,
    /// Remaining capacity per tier (`None`: no such tier), indexed like `Tier::ALL`.
    pub avail: [Option<u64>; 3],
    /// `alloc_backing` fails for this tier.
    pub fail_alloc: Option<Tier>,
    /// The next this many `submit_copies` calls fail.
    pub fail_next_copies: u32,
    /// Every copy batch touching this device address fails.
    pub fail_copies_at: Option<u64>,
    /// Fences never complete.
    pub stuck: bool,
    /// Time a batch takes.
    pub latency: Duration,
    /// The next this many `submit_digests` calls fail.
    pub fail_next_digests: u32,
    /// What the runtime says about addresses (`query_pointer`): allocations it knows.
    pub pointers: Vec<PointerInfo>,
    /// `query_pointer` fails.
    pub fail_queries: bool,
    /// Every address `query_pointer` was asked about.
    pub queries: Vec<u64>,
    fences: HashMap<u64, PendingFence>,
    next_fence: u64,
    // Counters.
    pub allocs: u32,
    pub frees: u32,
    pub copy_batches: u32,
    pub copy_ops: Vec<CopyOp>,
    pub digest_batches: u32,
    pub abandoned: u32,
    /// Bytes written to application memory by copies.
    pub device_writes: Vec<(u64, u64)>,
}

fn idx(t: Tier) -> usize {
    Tier::ALL.iter().position(|x| *x == t).unwrap()
}

pub struct FakeDevice {
    pub agent: AgentId,
    pub clock: Arc<VirtualClock>,
    pub st: Mutex<State>,
}

impl FakeDevice {
    pub fn new(agent: AgentId, clock: Arc<VirtualClock>, avail: [Option<u64>; 3]) -> Self {
        Self {
            agent,
            clock,
            st: Mutex::new(State {
                avail,
                next_id: 1,
                next_fence: 1,
                ..State::default()
            }),
        }
    }

    fn err(&self, kind: BackendErrorKind, op: &'static str, m: impl Into<String>) -> BackendError {
        BackendError::new(kind, self.agent, op, m)
    }

    /// The application allocates: memory filled with a pattern derived from `base`, reported to
    /// the tracker.
    pub fn app_alloc(&self, tracker: &Tracker, base: u64, size: u64, class: MemoryClass) -> u64 {
        let data = (0..size)
            .map(|i| (base.wrapping_add(i * 7) % 251) as u8)
            .collect();
        self.st.lock().mem.insert(base, data);
        tracker.record_alloc(self.agent, base, size, class)
    }

    /// Memory nobody reports to the tracker (module variables live in code objects).
    pub fn raw_alloc(&self, base: u64, size: u64) {
        let data = (0..size)
            .map(|i| (base.wrapping_add(i * 13) % 241) as u8)
            .collect();
        self.st.lock().mem.insert(base, data);
    }

    /// Memory the runtime knows and the tracker never heard of (`query_pointer` describes it).
    pub fn runtime_alloc(&self, base: u64, size: u64, class: MemoryClass, owner: Option<AgentId>) {
        self.raw_alloc(base, size);
        self.st.lock().pointers.push(PointerInfo {
            base,
            size,
            class,
            owner,
        });
    }

    /// Memory the runtime knew is released behind the tracker's back.
    pub fn runtime_free(&self, base: u64) {
        let mut st = self.st.lock();
        st.pointers.retain(|p| p.base != base);
        st.mem.remove(&base);
    }

    /// The application frees: recorded first, then released.
    pub fn app_free(&self, tracker: &Tracker, base: u64) {
        tracker.record_free(self.agent, base);
        self.st.lock().mem.remove(&base);
    }

    pub fn write(&self, addr: u64, bytes: &[u8]) {
        let mut st = self.st.lock();
        let (b, m) = containing(&mut st.mem, addr, bytes.len() as u64).expect("write inside");
        let off = (addr - b) as usize;
        m[off..off + bytes.len()].copy_from_slice(bytes);
    }

    pub fn read(&self, addr: u64, len: u64) -> Vec<u8> {
        let mut st = self.st.lock();
        let (b, m) = containing(&mut st.mem, addr, len).expect("read inside");
        let off = (addr - b) as usize;
        m[off..off + len as usize].to_vec()
    }

    pub fn memory(&self) -> BTreeMap<u64, Vec<u8>> {
        self.st.lock().mem.clone()
    }

    /// Backing bytes allocated and not freed.
    pub fn backing_live(&self) -> usize {
        self.st.lock().backing.len()
    }
}

fn containing(
    mem: &mut BTreeMap<u64, Vec<u8>>,
    addr: u64,
    len: u64,
) -> Option<(u64, &mut Vec<u8>)> {
    let (&b, m) = mem.range_mut(..=addr).next_back()?;
    (addr + len <= b + m.len() as u64).then_some((b, m))
}

impl State {
    fn read_loc(&mut self, loc: MemLoc, len: u64) -> Result<Vec<u8>, String> {
        match loc {
            MemLoc::Device { addr } => {
                let (b, m) = containing(&mut self.mem, addr, len)
                    .ok_or_else(|| format!("read of unallocated device memory {addr:#x}+{len}"))?;
                let o = (addr - b) as usize;
                Ok(m[o..o + len as usize].to_vec())
            }
            MemLoc::Backing { id, offset } => {
                let (_, m) = self.backing.get(&id.0).ok_or("unknown backing")?;
                let o = offset as usize;
                m.get(o..o + len as usize)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| "backing read out of bounds".into())
            }
        }
    }

    fn write_loc(&mut self, loc: MemLoc, data: &[u8]) -> Result<(), String> {
        match loc {
            MemLoc::Device { addr } => {
                let len = data.len() as u64;
                let (b, m) = containing(&mut self.mem, addr, len)
                    .ok_or_else(|| format!("write to unallocated device memory {addr:#x}+{len}"))?;
                let o = (addr - b) as usize;
                m[o..o + data.len()].copy_from_slice(data);
                self.device_writes.push((addr, len));
                Ok(())
            }
            MemLoc::Backing { id, offset } => {
                let (_, m) = self.backing.get_mut(&id.0).ok_or("unknown backing")?;
                let o = offset as usize;
                m.get_mut(o..o + data.len())
                    .ok_or("backing write out of bounds")?
                    .copy_from_slice(data);
                Ok(())
            }
        }
    }
}

fn touches(op: &CopyOp, addr: u64) -> bool {
    [op.src, op.dst].iter().any(|l| match *l {
        MemLoc::Device { addr: a } => a <= addr && addr < a + op.len,
        MemLoc::Backing { .. } => false,
    })
}

impl DeviceMemory for FakeDevice {
    fn agent(&self) -> AgentId {
        self.agent
    }

    fn tier_info(&self, tier: Tier) -> Option<TierInfo> {
        self.st.lock().avail[idx(tier)].map(|a| TierInfo {
            available_bytes: a,
            gbps: 10.0,
        })
    }

    fn alloc_backing(&self, tier: Tier, bytes: u64) -> Result<BackingId, BackendError> {
        let mut st = self.st.lock();
        let avail = st.avail[idx(tier)];
        if st.fail_alloc == Some(tier) || avail.is_none_or(|a| a < bytes) {
            return Err(self.err(
                BackendErrorKind::OutOfMemory,
                "alloc backing",
                "out of memory",
            ));
        }
        st.avail[idx(tier)] = avail.map(|a| a - bytes);
        let id = st.next_id;
        st.next_id += 1;
        st.backing.insert(id, (tier, vec![0xEE; bytes as usize]));
        st.allocs += 1;
        Ok(BackingId(id))
    }

    fn free_backing(&self, id: BackingId) {
        let mut st = self.st.lock();
        let (tier, m) = st.backing.remove(&id.0).expect("free of a live backing id");
        let i = idx(tier);
        st.avail[i] = st.avail[i].map(|a| a + m.len() as u64);
        st.frees += 1;
    }

    fn submit_copies(&self, ops: &[CopyOp]) -> Result<Fence, BackendError> {
        let mut st = self.st.lock();
        st.copy_batches += 1;
        st.copy_ops.extend_from_slice(ops);
        if st.fail_next_copies > 0 {
            st.fail_next_copies -= 1;
            return Err(self.err(BackendErrorKind::CopyFailed, "submit copies", "injected"));
        }
        if let Some(a) = st.fail_copies_at {
            if ops.iter().any(|o| touches(o, a)) {
                return Err(self.err(
                    BackendErrorKind::CopyFailed,
                    "submit copies",
                    "injected at address",
                ));
            }
        }
        if !st.stuck {
            for op in ops {
                let data = st
                    .read_loc(op.src, op.len)
                    .map_err(|m| self.err(BackendErrorKind::InvalidArgument, "copy", m))?;
                st.write_loc(op.dst, &data)
                    .map_err(|m| self.err(BackendErrorKind::InvalidArgument, "copy", m))?;
            }
        }
        let id = st.next_fence;
        st.next_fence += 1;
        let done_at = self.clock.now() + st.latency;
        st.fences.insert(
            id,
            PendingFence {
                done_at,
                digests: None,
            },
        );
        Ok(Fence(id))
    }

    fn submit_digests(&self, ops: &[DigestOp], key: DigestKey) -> Result<Fence, BackendError> {
        let mut st = self.st.lock();
        st.digest_batches += 1;
        if st.fail_next_digests > 0 {
            st.fail_next_digests -= 1;
            return Err(self.err(BackendErrorKind::CopyFailed, "submit digests", "injected"));
        }
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            let data = st
                .read_loc(op.at, op.len)
                .map_err(|m| self.err(BackendErrorKind::InvalidArgument, "digest", m))?;
            out.push(replay_core::digest::digest(key, &data));
        }
        let id = st.next_fence;
        st.next_fence += 1;
        let done_at = self.clock.now() + st.latency;
        st.fences.insert(
            id,
            PendingFence {
                done_at,
                digests: Some(out),
            },
        );
        Ok(Fence(id))
    }

    fn poll_fence(&self, fence: Fence, budget: Duration) -> Result<bool, BackendError> {
        let (stuck, done_at) = {
            let st = self.st.lock();
            let f = st.fences.get(&fence.0).ok_or_else(|| {
                self.err(
                    BackendErrorKind::InvalidArgument,
                    "poll fence",
                    "unknown fence",
                )
            })?;
            (st.stuck, f.done_at)
        };
        let now = self.clock.now();
        if !stuck && now >= done_at {
            return Ok(true);
        }
        let wait = if stuck {
            budget
        } else {
            budget.min(done_at - now)
        };
        self.clock.sleep(wait);
        Ok(!stuck && self.clock.now() >= done_at)
    }

    fn take_digests(&self, fence: Fence) -> Result<Vec<Digest128>, BackendError> {
        self.st
            .lock()
            .fences
            .remove(&fence.0)
            .and_then(|f| f.digests)
            .ok_or_else(|| {
                self.err(
                    BackendErrorKind::InvalidArgument,
                    "take digests",
                    "no digests",
                )
            })
    }

    fn query_pointer(&self, addr: u64) -> Result<Option<PointerInfo>, BackendError> {
        let mut st = self.st.lock();
        st.queries.push(addr);
        if st.fail_queries {
            return Err(self.err(BackendErrorKind::Other, "query pointer", "injected"));
        }
        Ok(st
            .pointers
            .iter()
            .find(|p| p.base <= addr && addr < p.base + p.size)
            .copied())
    }

    fn abandon_fence(&self, fence: Fence) {
        let mut st = self.st.lock();
        st.fences.remove(&fence.0);
        st.abandoned += 1;
    }
}

pub fn dispatch(agent: AgentId, words: &[u64]) -> Dispatch {
    Dispatch {
        info: DispatchInfo {
            agent,
            queue: QueueId(0),
            dispatch_id: DispatchId(1),
            kernel_id: KernelId(1),
            kernel_name: Arc::from("k"),
            grid: Dim3::new(1, 1, 1),
            workgroup: Dim3::new(1, 1, 1),
            private_segment_size: 0,
            group_segment_size: 0,
        },
        kernel: KernelKey {
            agent,
            code_object: 1,
            symbol: 1,
        },
        kind: SubmissionKind::KernelDispatch,
        kernarg: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        arg_layout: Default::default(),
        origin: Origin::SubmittingThread,
        handle: 0,
    }
}
