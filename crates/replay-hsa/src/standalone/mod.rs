//! Standalone replay of a captured HSA dispatch (SPEC §13): `kreplay replay DIR` for a
//! capture whose backend is `hsa`, on a runtime whose API table this backend's `OnLoad` has
//! wrapped (the simulated runtime, `replay-hsa-sim`, in this workspace). Layered as CUDA's:
//! [`entries`] reads the application's entries from the table (raw) and calls each one
//! checked; this file is the safe layer, whose values release what they hold on drop.
//!
//! [`prepare`] recreates the dispatch:
//!
//! - **Regions at their captured addresses.** The regions' pages are merged into ranges; each
//!   range is reserved with `hsa_amd_vmem_address_reserve` asking for its captured address
//!   (the one HSA call that places memory at an address, a hint the runtime may not honour),
//!   backed by a handle from the GPU's coarse-grained pool (`hsa_amd_vmem_handle_create`),
//!   mapped (`hsa_amd_vmem_map`) and opened read-write to the GPU (`hsa_amd_vmem_set_access`).
//!   Every range is reserved before the code object is loaded or anything else allocated, so
//!   nothing of the replay's own takes the addresses first. Through the wrapped table, the
//!   mappings are tracked as `VIRTUAL_MAPPING` memory of the GPU: whatever class a region had
//!   when captured, its bytes are what the kernel reads.
//! - **Relocation**, as CUDA's standalone: a range the runtime will not give at its address
//!   is, under [`Relocation::Allow`], recreated wherever the runtime places it; the argument
//!   block's pointer words into it (the capture names each) are rewritten, and the replay
//!   reports the relocation with the count of 8-byte words inside the regions' inputs that
//!   look like pointers into a relocated range ([`Prepared::stored_pointers`]): those are not
//!   rewritten (a data word cannot be told from a pointer). [`Relocation::Refuse`] fails with
//!   [`StandaloneError::Address`], naming the first region of the range and what holds it in
//!   this process (`/proc/self/maps`).
//! - **The code object** as captured, through a code object reader; each named module-variable
//!   region is placed before the load with `hsa_executable_agent_global_variable_define` at
//!   the address its range was recreated at, so the variable is where the capture had it (or
//!   where its range was relocated, with the pointer words rewritten as for any region); after
//!   the load, a variable the loader put elsewhere, or a symbol it does not have, is an
//!   address error naming the region. The kernel symbol is looked up by the captured name
//!   (with the `.kd` suffix of code-object v3 where the name lacks it).
//! - **The argument block** in a fresh block of the CPU's kernarg pool, **the inputs** written
//!   with the application's `hsa_memory_copy`, **the queue** created through the wrapped
//!   `hsa_queue_create` (an intercepting queue, so a replay service set with
//!   [`crate::set_service`] runs its window around [`Prepared::launch`], as under `kreplay
//!   run`).
//!
//! [`Prepared::launch`] submits one kernel-dispatch packet with the captured grid, workgroup
//! and segment sizes and waits for its completion signal; [`Prepared::read`] reads a region
//! back through the runtime's original copy entry, which a tool may call inside a window
//! (PASS EXIT). The GPU is the capture's GPU ordinal ([`crate::agent::GPU_ORDINAL`] in the
//! device description), else the first.

pub mod entries;

use std::ffi::CString;
use std::time::Duration;

use replay_capture::LoadedCapture;

use crate::result::HsaError;
use crate::sys::{self, aql};
pub use entries::App;

/// Why a capture could not be replayed on the HSA runtime.
#[derive(Debug, thiserror::Error)]
pub enum StandaloneError {
    /// A runtime call failed.
    #[error(transparent)]
    Runtime(#[from] HsaError),
    /// A region cannot be had at its captured address, or cannot be recreated at all.
    #[error(
        "region {index} at {base:#x} ({size} bytes) cannot be recreated at its address: {why}"
    )]
    Address {
        /// Region index.
        index: usize,
        /// Its captured base.
        base: u64,
        /// Its size.
        size: u64,
        /// Why.
        why: String,
    },
    /// The capture holds something this replay cannot rebuild, or the runtime lacks
    /// something it needs.
    #[error("{0}")]
    Unsupported(String),
    /// The dispatch did not complete in time.
    #[error("the dispatch did not complete within {0:?}")]
    Timeout(Duration),
}

/// What a replay does with a range the runtime will not place at its captured address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relocation {
    /// Recreate it wherever the runtime places it, rewrite the argument block's pointer words
    /// into it and report both ([`Prepared::relocated`]): what `kreplay replay` does unless
    /// told `--exact-addresses`.
    Allow,
    /// Fail with [`StandaloneError::Address`].
    Refuse,
}

/// The page size ranges are planned in.
pub const PAGE: u64 = 4096;

/// The regions' pages merged into ranges, in address order: (start, end, first region's
/// position in `regions`). Regions that share a page share a range.
pub fn plan_ranges(regions: &[replay_capture::RegionEntry]) -> Vec<(u64, u64, usize)> {
    let mut spans: Vec<(u64, u64, usize)> = regions
        .iter()
        .enumerate()
        .filter(|(_, r)| r.size > 0)
        .map(|(i, r)| {
            let lo = r.base / PAGE * PAGE;
            let hi = (r.base + r.size).div_ceil(PAGE) * PAGE;
            (lo, hi, i)
        })
        .collect();
    spans.sort();
    let mut out: Vec<(u64, u64, usize)> = Vec::new();
    for (lo, hi, i) in spans {
        match out.last_mut() {
            Some(last) if lo < last.1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi, i)),
        }
    }
    out
}

/// Where `addr` of the capturing run lives here: moved by the relocation whose captured range
/// holds it, else unchanged.
pub fn relocate(addr: u64, relocated: &[(u64, u64, u64)]) -> u64 {
    relocated
        .iter()
        .find(|&&(lo, hi, _)| lo <= addr && addr < hi)
        .map_or(addr, |&(lo, _, at)| at + (addr - lo))
}

/// 8-byte-aligned words of `bytes` whose value falls in a relocated captured range.
pub fn pointer_like_words(bytes: &[u8], relocated: &[(u64, u64, u64)]) -> usize {
    bytes
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .filter(|&v| relocated.iter().any(|&(lo, hi, _)| lo <= v && v < hi))
        .count()
}

/// What holds `[lo, hi)` in this process, from `/proc/self/maps`.
pub fn describe_holders(lo: u64, hi: u64) -> String {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return "the process's mappings cannot be read".into();
    };
    let holders: Vec<String> = maps
        .lines()
        .filter_map(|l| {
            let (range, rest) = l.split_once(' ')?;
            let (a, b) = range.split_once('-')?;
            let (a, b) = (
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            );
            (a < hi && lo < b).then(|| {
                let name = rest.split_whitespace().nth(4).unwrap_or("anonymous memory");
                format!("{a:#x}-{b:#x} {name}")
            })
        })
        .collect();
    if holders.is_empty() {
        "nothing is mapped there now".into()
    } else {
        format!("held by {}", holders.join(", "))
    }
}

/// A reserved range and what backs it; released on drop.
struct Range {
    app: App,
    va: u64,
    size: u64,
    handle: Option<u64>,
    mapped: bool,
}

impl Drop for Range {
    fn drop(&mut self) {
        if self.mapped {
            let _ = self.app.unmap(self.va, self.size);
        }
        if let Some(h) = self.handle {
            let _ = self.app.handle_release(h);
        }
        let _ = self.app.address_free(self.va, self.size);
    }
}

/// A pool of `agent` whose global flags have `want` (and not kernarg-init, unless `want` is).
fn pool_of(agent: sys::hsa_agent_t, want: u32) -> Option<u64> {
    let o = crate::state::backend().originals()?;
    let q = o.queue?;
    unsafe extern "C" fn collect(
        p: sys::hsa_amd_memory_pool_t,
        data: *mut std::ffi::c_void,
    ) -> u32 {
        // SAFETY: `data` is the `Vec` passed below, alive for the iteration.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
            (*data.cast::<Vec<u64>>()).push(p.handle)
        }));
        sys::HSA_STATUS_SUCCESS
    }
    let mut pools: Vec<u64> = Vec::new();
    // SAFETY: the original iteration with a callback of the right type and a live `Vec`.
    unsafe { (q.iterate_pools)(agent, Some(collect), (&mut pools as *mut Vec<u64>).cast()) };
    let u32_of = |p: u64, attr: u32| {
        let mut v = 0u32;
        // SAFETY: the original pool query; segment and flags are 4-byte attributes.
        let st = unsafe {
            (o.pool_get_info)(
                sys::hsa_amd_memory_pool_t { handle: p },
                attr,
                (&mut v as *mut u32).cast(),
            )
        };
        (st == sys::HSA_STATUS_SUCCESS).then_some(v)
    };
    pools.into_iter().find(|&p| {
        u32_of(p, sys::HSA_AMD_MEMORY_POOL_INFO_SEGMENT) == Some(sys::HSA_AMD_SEGMENT_GLOBAL)
            && u32_of(p, sys::HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS).is_some_and(|f| {
                f & want != 0
                    && (want == sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT
                        || f & sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT == 0)
            })
    })
}

/// The GPU a capture names by ordinal in its device description, else the first.
fn pick_gpu(device: &str) -> Result<sys::hsa_agent_t, StandaloneError> {
    let gpus = crate::agent::gpu_agents();
    let ordinal = device
        .split(crate::agent::GPU_ORDINAL)
        .nth(1)
        .and_then(|s| {
            s.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<usize>()
                .ok()
        })
        .unwrap_or(0);
    let a = gpus.get(ordinal).or(gpus.first()).ok_or_else(|| {
        StandaloneError::Unsupported(
            "the runtime reports no GPU agent (or `OnLoad` has not installed the backend)".into(),
        )
    })?;
    Ok(sys::hsa_agent_t { handle: a.handle })
}

/// A capture recreated on the runtime, ready to launch; released on drop (queue, signal,
/// argument block, executable, reader, then the ranges).
pub struct Prepared {
    app: App,
    agent: sys::hsa_agent_t,
    /// Per region (the manifest's order): its address here.
    at: Vec<u64>,
    sizes: Vec<u64>,
    relocated: Vec<(u64, u64, u64)>,
    rewritten_words: usize,
    stored_pointers: usize,
    kernel_object: u64,
    kernarg: u64,
    /// Host blocks of the CPU's fine-grained pool the inputs are written from and the outputs
    /// read into (the runtime copies between its own memory), allocated through the original
    /// entry so no snapshot holds them: (address, size).
    staging: (u64, u64),
    reading: parking_lot::Mutex<(u64, u64)>,
    launch: replay_capture::Launch,
    queue: *mut sys::hsa_queue_t,
    exec: u64,
    reader: u64,
    /// The code object's bytes, which the reader names.
    _code: Vec<u8>,
    ranges: Vec<Range>,
}

// SAFETY: the queue pointer is only handed to the runtime's entries, which are thread-safe;
// nothing here dereferences it outside `launch`, which the runtime's contract allows from any
// thread.
unsafe impl Send for Prepared {}
// SAFETY: as above; `&self` methods only call thread-safe runtime entries.
unsafe impl Sync for Prepared {}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("at", &self.at)
            .field("relocated", &self.relocated)
            .finish_non_exhaustive()
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if !self.queue.is_null() {
            // SAFETY: the replay's own queue, idle (every launch waited for), destroyed once.
            unsafe { self.app.queue_destroy(self.queue) };
        }
        if self.kernarg != 0 {
            let _ = self.app.pool_free(self.kernarg);
        }
        for p in [self.staging.0, self.reading.lock().0] {
            if p != 0 {
                entries::pool_free_original(p);
            }
        }
        if self.exec != 0 {
            let _ = self.app.exec_destroy(self.exec);
        }
        if self.reader != 0 {
            let _ = self.app.reader_destroy(self.reader);
        }
        self.ranges.clear();
    }
}

impl Prepared {
    /// Per region (the manifest's order): its address in this process.
    pub fn addresses(&self) -> &[u64] {
        &self.at
    }

    /// The GPU agent the replay runs on.
    pub fn agent(&self) -> sys::hsa_agent_t {
        self.agent
    }

    /// Ranges recreated elsewhere than captured: (captured start, end, start here).
    pub fn relocated(&self) -> &[(u64, u64, u64)] {
        &self.relocated
    }

    /// Argument-block words rewritten to relocated addresses.
    pub fn rewritten_words(&self) -> usize {
        self.rewritten_words
    }

    /// Words inside the regions' inputs that look like pointers into a relocated range (not
    /// rewritten).
    pub fn stored_pointers(&self) -> usize {
        self.stored_pointers
    }

    /// Region `index`'s bytes now, through the runtime's original copy (callable inside a
    /// window).
    pub fn read(&self, index: usize) -> Result<Vec<u8>, StandaloneError> {
        let len = self.sizes[index];
        let reading = self.reading.lock();
        let (block, size) = *reading;
        if len > size {
            return Err(StandaloneError::Unsupported(format!(
                "region {index} ({len} bytes) is larger than the read block ({size} bytes)"
            )));
        }
        entries::copy_original(block, self.at[index], len as usize)?;
        let mut out = vec![0u8; len as usize];
        // SAFETY: `block` is a live host block of the CPU's pool of `size` >= `len` bytes,
        // host-accessible, which only this replay touches, under the lock held.
        unsafe {
            std::ptr::copy_nonoverlapping(block as *const u8, out.as_mut_ptr(), len as usize)
        };
        Ok(out)
    }

    /// Every region's bytes now, in the manifest's order.
    pub fn read_all(&self) -> Result<Vec<Vec<u8>>, StandaloneError> {
        (0..self.at.len()).map(|i| self.read(i)).collect()
    }

    /// Writes `bytes` to `dst` through the staging block (the application's copy: outside
    /// any window).
    fn write(&self, dst: u64, bytes: &[u8]) -> Result<(), StandaloneError> {
        let (block, size) = self.staging;
        if bytes.len() as u64 > size {
            return Err(StandaloneError::Unsupported(format!(
                "{} bytes are more than the staging block's {size}",
                bytes.len()
            )));
        }
        // SAFETY: `block` is a live host block of the CPU's pool of `size` bytes (checked
        // above), host-accessible, which only this replay touches, from `&self` calls made
        // before the launch.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), block as *mut u8, bytes.len()) };
        self.app.copy(dst, block, bytes.len())?;
        Ok(())
    }

    /// Writes the captured inputs of every region (outside any window).
    pub fn write_inputs(&self, c: &LoadedCapture) -> Result<(), StandaloneError> {
        for (i, (input, _)) in c.data.iter().enumerate() {
            self.write(self.at[i], input)?;
        }
        Ok(())
    }

    /// One kernel dispatch with the captured configuration on the replay's queue, waited for
    /// up to `timeout` (a replay service set on the backend runs its window around it).
    pub fn launch(&self, timeout: Duration) -> Result<(), StandaloneError> {
        let l = &self.launch;
        let done = self.app.signal_create(1)?;
        let dims = if l.grid.z > 1 || l.workgroup.z > 1 {
            3
        } else if l.grid.y > 1 || l.workgroup.y > 1 {
            2
        } else {
            1
        };
        let narrow = |v: u32| u16::try_from(v.max(1)).unwrap_or(u16::MAX);
        let p = sys::hsa_kernel_dispatch_packet_t {
            header: aql::header(sys::HSA_PACKET_TYPE_KERNEL_DISPATCH, true, 2, 2),
            setup: dims,
            workgroup_size_x: narrow(l.workgroup.x),
            workgroup_size_y: narrow(l.workgroup.y),
            workgroup_size_z: narrow(l.workgroup.z),
            grid_size_x: l.grid.x.max(1),
            grid_size_y: l.grid.y.max(1),
            grid_size_z: l.grid.z.max(1),
            private_segment_size: l.private_segment_size,
            group_segment_size: l.group_segment_size,
            kernel_object: self.kernel_object,
            kernarg_address: self.kernarg,
            completion_signal: done,
            ..Default::default()
        };
        // SAFETY: a 64-byte plain-integer struct.
        let packet =
            unsafe { std::mem::transmute::<sys::hsa_kernel_dispatch_packet_t, [u8; 64]>(p) };
        // SAFETY: the replay's own live queue, idle between launches (one packet at a time).
        unsafe { self.app.submit(self.queue, packet) };
        let hint = crate::state::backend()
            .originals()
            .and_then(|o| o.queue)
            .map_or(timeout.as_nanos() as u64, |q| q.timeout_hint(timeout));
        let left = self.app.wait_zero(done, hint);
        if left != 0 {
            // The device may still decrement it: leaked, not destroyed.
            return Err(StandaloneError::Timeout(timeout));
        }
        self.app.signal_destroy(done);
        Ok(())
    }
}

/// Recreates capture `c` on the runtime whose application entries are `app` (a table `OnLoad`
/// wrapped), with `relocation` for a range that cannot be had at its address; the module
/// documentation says how. The capture must be an HSA code-object capture.
pub fn prepare(
    app: App,
    c: &LoadedCapture,
    relocation: Relocation,
) -> Result<Prepared, StandaloneError> {
    let m = &c.manifest;
    if m.backend != "hsa" || m.kernel.code_format != "hsa-code-object" {
        return Err(StandaloneError::Unsupported(format!(
            "a {} capture of {} code is not an HSA code-object capture",
            m.backend, m.kernel.code_format
        )));
    }
    let agent = pick_gpu(&m.device)?;
    let device_pool = pool_of(agent, sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED)
        .ok_or_else(|| {
            StandaloneError::Unsupported(
                "the GPU has no coarse-grained pool to back regions".into(),
            )
        })?;
    let cpu = crate::state::backend()
        .agents
        .all()
        .into_iter()
        .find(|a| a.is_cpu())
        .map(|a| sys::hsa_agent_t { handle: a.handle });
    let kernarg_pool = cpu
        .and_then(|a| pool_of(a, sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT))
        .ok_or_else(|| StandaloneError::Unsupported("the runtime has no kernarg pool".into()))?;
    let host_pool = cpu
        .and_then(|a| pool_of(a, sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED))
        .ok_or_else(|| {
            StandaloneError::Unsupported("the runtime has no fine-grained host pool".into())
        })?;

    let mut out = Prepared {
        app,
        agent,
        at: Vec::new(),
        sizes: m.regions.iter().map(|r| r.size).collect(),
        relocated: Vec::new(),
        rewritten_words: 0,
        stored_pointers: 0,
        kernel_object: 0,
        kernarg: 0,
        staging: (0, 0),
        reading: parking_lot::Mutex::new((0, 0)),
        launch: m.launch.clone(),
        queue: std::ptr::null_mut(),
        exec: 0,
        reader: 0,
        _code: c.code.clone(),
        ranges: Vec::new(),
    };
    let address = |i: usize, why: String| {
        let r = &m.regions[i];
        StandaloneError::Address {
            index: r.index,
            base: r.base,
            size: r.size,
            why,
        }
    };

    // The addresses first, before the code object or any allocation of ours can take them.
    for (lo, hi, first) in plan_ranges(&m.regions) {
        let size = hi - lo;
        let got = app
            .reserve(size, lo)
            .map_err(|e| address(first, format!("reserving {size} bytes at {lo:#x}: {e}")))?;
        let mut range = Range {
            app,
            va: got,
            size,
            handle: None,
            mapped: false,
        };
        if got != lo {
            drop(range);
            let why = format!(
                "the runtime reserved {size} bytes at {got:#x}, not at {lo:#x} (that range is taken in this process: {})",
                describe_holders(lo, hi)
            );
            if relocation == Relocation::Refuse {
                return Err(address(first, why));
            }
            let got = app.reserve(size, 0)?;
            log::info!(
                "[kernel-replay] replay: region {}'s range {lo:#x}-{hi:#x} relocated to {got:#x} ({why})",
                m.regions[first].index
            );
            out.relocated.push((lo, hi, got));
            range = Range {
                app,
                va: got,
                size,
                handle: None,
                mapped: false,
            };
        }
        let back = |range: &mut Range| -> Result<(), HsaError> {
            range.handle = Some(app.handle_create(device_pool, size)?);
            app.map(range.va, size, range.handle.unwrap_or_default())?;
            range.mapped = true;
            app.set_access(range.va, size, agent)
        };
        back(&mut range).map_err(|e| address(first, format!("backing its range: {e}")))?;
        out.ranges.push(range);
    }
    out.at = m
        .regions
        .iter()
        .map(|r| relocate(r.base, &out.relocated))
        .collect();

    // The code object, its captured variables placed where their ranges are.
    out.reader = app.reader_create(&out._code)?;
    out.exec = app.exec_create()?;
    let named: Vec<(usize, CString)> = m
        .regions
        .iter()
        .enumerate()
        .filter(|(_, r)| r.class.contains(replay_core::MemoryClass::MODULE_VARIABLE))
        .filter_map(|(i, r)| Some((i, CString::new(r.symbol.clone()?).ok()?)))
        .collect();
    for (i, name) in &named {
        app.variable_define(out.exec, agent, name, out.at[*i])
            .map_err(|e| address(*i, format!("module variable {name:?}: {e}")))?;
    }
    app.load(out.exec, agent, out.reader).map_err(|e| {
        StandaloneError::Unsupported(format!(
            "the captured code object ({} bytes) does not load: {e}",
            out._code.len()
        ))
    })?;
    for (i, name) in &named {
        let placed = app
            .symbol(out.exec, name, agent)
            .and_then(|s| app.symbol_u64(s, sys::HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS))
            .map_err(|e| {
                address(
                    *i,
                    format!("module variable {name:?} is not in the loaded code object: {e}"),
                )
            })?;
        if placed != out.at[*i] {
            return Err(address(
                *i,
                format!(
                    "module variable {name:?} was loaded at {placed:#x}, not at {:#x}",
                    out.at[*i]
                ),
            ));
        }
    }
    let symbol = &m.kernel.symbol;
    let kd = format!("{symbol}.kd");
    let kernel = [symbol.as_str(), kd.as_str()]
        .into_iter()
        .filter_map(|n| CString::new(n).ok())
        .find_map(|n| app.symbol(out.exec, &n, agent).ok())
        .ok_or_else(|| {
            StandaloneError::Unsupported(format!(
                "the captured code object has no kernel symbol {symbol:?} (nor {kd:?})"
            ))
        })?;
    out.kernel_object = app.symbol_u64(kernel, sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT)?;

    // The argument block, its pointer words into relocated ranges following them.
    let mut kernarg = c.kernarg.clone();
    for w in &m.arguments.pointers {
        let moved = relocate(w.value, &out.relocated);
        let o = w.offset as usize;
        if moved != w.value && o + 8 <= kernarg.len() {
            kernarg[o..o + 8].copy_from_slice(&moved.to_le_bytes());
            out.rewritten_words += 1;
        }
    }
    if !out.relocated.is_empty() {
        out.stored_pointers = c
            .data
            .iter()
            .map(|(input, _)| pointer_like_words(input, &out.relocated))
            .sum();
    }
    let largest = m
        .regions
        .iter()
        .map(|r| r.size)
        .chain([kernarg.len() as u64, 64])
        .max()
        .unwrap_or(64);
    out.staging = (
        entries::pool_allocate_original(host_pool, largest)?,
        largest,
    );
    *out.reading.lock() = (
        entries::pool_allocate_original(host_pool, largest)?,
        largest,
    );
    out.kernarg = app.pool_allocate(kernarg_pool, (kernarg.len() as u64).max(64))?;
    out.write(out.kernarg, &kernarg)?;
    out.write_inputs(c)?;
    out.queue = app.queue_create(agent, 64)?;
    Ok(out)
}

/// What a replay did.
#[derive(Debug, Clone, Default)]
pub struct Replayed {
    /// Per pass, per region (the manifest's order): the bytes after the pass.
    pub outputs: Vec<Vec<Vec<u8>>>,
    /// Every region's bytes after the dispatch.
    pub after: Vec<Vec<u8>>,
    /// The window's record of the dispatch (none when no window ran).
    pub record: Option<replay_core::OutcomeRecord>,
    /// Ranges recreated elsewhere than captured ([`Relocation`]): (captured start, end,
    /// start here).
    pub relocated: Vec<(u64, u64, u64)>,
    /// Argument-block words rewritten to the relocated addresses.
    pub rewritten_words: usize,
    /// Words inside the regions' inputs that look like pointers into a relocated range, not
    /// rewritten: the outputs may differ where the kernel follows them.
    pub stored_pointers: usize,
}

/// How long the replay's dispatch, drains and passes may take.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// Replays `c` for `passes` passes (at least one) on the runtime of `app`: [`prepare`], then
/// one launch under a replay service of this process's own (set with [`crate::set_service`]
/// for the launch, the one before it set again after), whose tool asks for the passes and
/// reads every region after each (PASS EXIT); the policy is the default one with the
/// capture's scope.
pub fn replay(
    app: App,
    c: &LoadedCapture,
    passes: u64,
    relocation: Relocation,
) -> Result<Replayed, StandaloneError> {
    use parking_lot::Mutex;
    use replay_core::{
        ContextId, NoContextControl, Operation, OutcomeRecord, Phase, Policy, ReplayPayload,
        ReplayService, Subscription, SystemClock, UserData,
    };
    use std::sync::Arc;

    let prepared = Arc::new(prepare(app, c, relocation)?);
    let policy = Policy {
        scope: c.manifest.scope,
        drain_timeout: TIMEOUT,
        pass_timeout: TIMEOUT,
        ..Policy::default()
    };
    let service = Arc::new(ReplayService::new(
        policy,
        Arc::new(SystemClock::new()),
        Arc::new(NoContextControl),
    ));
    let outputs: Arc<Mutex<Vec<Vec<Vec<u8>>>>> = Arc::default();
    let read_error: Arc<Mutex<Option<String>>> = Arc::default();
    let (p, o, e) = (
        Arc::clone(&prepared),
        Arc::clone(&outputs),
        Arc::clone(&read_error),
    );
    let n = passes.max(1);
    let tool = move |op: Operation, ph: Phase, pl: &mut ReplayPayload<'_>, _: &mut UserData| match (
        op, ph,
    ) {
        (Operation::Config, Phase::Enter) => pl.replay_pass_count = Some(Arc::new(move |_, _| n)),
        (Operation::Pass, Phase::Exit) => match p.read_all() {
            Ok(bytes) => o.lock().push(bytes),
            Err(err) => *e.lock() = Some(err.to_string()),
        },
        _ => {}
    };
    let setup = |e: replay_core::ServiceError| {
        StandaloneError::Unsupported(format!("the replay service: {e}"))
    };
    service
        .configure(
            ContextId(1),
            Subscription::CONFIG | Subscription::PASS,
            Arc::new(tool),
        )
        .map_err(setup)?;
    service.start().map_err(setup)?;
    let records: Arc<Mutex<Vec<OutcomeRecord>>> = Arc::default();
    let sink = Arc::clone(&records);
    service.set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
        sink.lock().push(r.clone())
    })));
    let before = crate::state::service();
    crate::state::set_service(Arc::clone(&service));
    let launched = prepared.launch(TIMEOUT);
    match before {
        Some(s) => crate::state::set_service(s),
        None => {
            let _ = service.stop();
        }
    }
    launched?;
    if let Some(why) = read_error.lock().take() {
        return Err(StandaloneError::Unsupported(format!(
            "reading the outputs of a pass: {why}"
        )));
    }
    let after = prepared.read_all()?;
    let mut outputs = std::mem::take(&mut *outputs.lock());
    if outputs.is_empty() {
        // No window ran (one plain execution): the bytes after it are its pass.
        outputs.push(after.clone());
    }
    let record = records.lock().first().cloned();
    Ok(Replayed {
        outputs,
        after,
        record,
        relocated: prepared.relocated().to_vec(),
        rewritten_words: prepared.rewritten_words(),
        stored_pointers: prepared.stored_pointers(),
    })
}

/// What this machine offers for an HSA capture of real GPU code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RealRuntime {
    /// No HSA runtime library could be loaded.
    None,
    /// The runtime library loads, but there is no AMD GPU (`/dev/kfd` is absent).
    WithoutGpu(String),
    /// The runtime library and an AMD GPU.
    WithGpu(String),
}

/// The runtime library names looked for.
pub const RUNTIME_LIBRARIES: &[&str] = &["libhsa-runtime64.so.1", "libhsa-runtime64.so"];

/// Looks for a real HSA runtime (the library, loadable) and an AMD GPU (`/dev/kfd`). Loading
/// the library runs no initialisation (`hsa_init` is never called).
pub fn real_runtime() -> RealRuntime {
    let found = RUNTIME_LIBRARIES.iter().find(|name| {
        // SAFETY: loading the runtime library runs its static constructors only, which
        // initialise nothing of the GPU (that is `hsa_init`'s); it is unloaded at once.
        unsafe { libloading::Library::new(**name) }.is_ok()
    });
    match found {
        None => RealRuntime::None,
        Some(name) if std::path::Path::new("/dev/kfd").exists() => {
            RealRuntime::WithGpu((*name).into())
        }
        Some(name) => RealRuntime::WithoutGpu((*name).into()),
    }
}
