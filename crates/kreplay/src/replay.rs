//! `kreplay replay DIR`: standalone replay of captured dispatches (SPEC §13).
//!
//! Each capture folder is read and checked ([`replay_capture::read`]: a damaged one is refused
//! naming the file), then replayed on a fresh simulated GPU: the code object is loaded (the
//! simulator's kernels are Rust closures, so the module is found by its name among those this
//! program knows, `kreplay demo`'s, and must match the captured description), every region is
//! recreated at its captured device address (module variables where the load placed them;
//! an address that cannot be had is an error naming the region), the inputs are written, and
//! the kernel is launched with the captured argument block and grid under the replay service,
//! for `--passes` passes restored in between. `verify` compares the outputs of every pass with
//! the captured ones (a region that differs in some passes only is the mark of a
//! non-deterministic kernel); `timing` prints the passes' GPU time on the simulator's clock.
//!
//! A CUDA capture is replayed on this machine's CUDA device by `replay_cuda::standalone`
//! (regions at their captured addresses through the driver's virtual memory calls, the code
//! image loaded as captured, every pass's outputs read back and compared here; `timing` is
//! the CUDA events' time of each launch). An HSA capture taken on the simulated runtime is
//! replayed on a fresh simulated runtime by `crate::replay_hsa` (`replay_hsa::standalone`:
//! regions recreated as virtual-memory mappings at their captured addresses, or relocated,
//! module variables placed by name, the passes run under a replay service as here); one of
//! real GPU code is refused, naming what this machine has.
//!
//! The order of a CUDA replay is fixed, because device addresses share this process's
//! address space with host mappings: every folder is read first; then, before anything loads
//! or initialises the driver (nothing in `kreplay` touches CUDA before `replay_cuda` opens
//! the device), the address ranges of every CUDA capture are held as host placeholders
//! (`replay_cuda::standalone::Placeholders`), so neither the libraries loaded later, nor host
//! allocations, nor the driver's own reservations at `cuInit` and context creation can take
//! them; each range's placeholder is released immediately before the driver is asked for it,
//! and restored after that capture's replay for the captures after it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use replay_capture::{compare_outputs, LoadedCapture, RegionDiff};
use replay_context::Contexts;
use replay_core::{
    AgentId, ContextControl, ContextId, Dim3, MemoryClass, Operation, OutcomeRecord, Phase,
    ReplayPayload, ReplayService, Subscription, UserData,
};
use replay_mock::ModuleSpec;

use crate::cli::ReplayArgs;

/// Why a capture could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The folder holds no capture.
    #[error("{}: no capture here (no manifest.json in it or in its folders)", .0.display())]
    NoCapture(PathBuf),
    /// A folder could not be listed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The folder.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The folder was refused.
    #[error(transparent)]
    Format(#[from] replay_capture::FormatError),
    /// A capture this program cannot replay.
    #[error("{}: {why}", .dir.display())]
    Unsupported {
        /// The capture.
        dir: PathBuf,
        /// Why.
        why: String,
    },
    /// A region's address could not be had.
    #[error("{}: region {index} at {base:#x} ({size} bytes) cannot be recreated at its address: {why}", .dir.display())]
    Address {
        /// The capture.
        dir: PathBuf,
        /// Region index.
        index: usize,
        /// Its base.
        base: u64,
        /// Its size.
        size: u64,
        /// Why.
        why: String,
    },
    /// The simulator failed.
    #[error("{}: simulator: {why}", .dir.display())]
    Sim {
        /// The capture.
        dir: PathBuf,
        /// What failed.
        why: String,
    },
    /// The CUDA replay failed.
    #[error("{}: CUDA: {source}", .dir.display())]
    Cuda {
        /// The capture.
        dir: PathBuf,
        /// What failed.
        source: replay_cuda::standalone::StandaloneError,
    },
    /// The HSA replay failed.
    #[error("{}: HSA: {source}", .dir.display())]
    Hsa {
        /// The capture.
        dir: PathBuf,
        /// What failed.
        source: replay_hsa::standalone::StandaloneError,
    },
    /// Writing the report failed.
    #[error("output: {0}")]
    Output(#[from] std::io::Error),
}

impl ReplayError {
    /// Exit status: 2 for a folder that is not a replayable capture, 1 for a failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Sim { .. } | Self::Output(_) => 1,
            Self::Cuda {
                source: replay_cuda::standalone::StandaloneError::Driver(_),
                ..
            } => 1,
            Self::Hsa {
                source:
                    replay_hsa::standalone::StandaloneError::Runtime(_)
                    | replay_hsa::standalone::StandaloneError::Timeout(_),
                ..
            } => 1,
            _ => 2,
        }
    }
}

/// The capture folders under `dir`: itself, or its folders that hold a manifest, in name order.
fn folders(dir: &Path) -> Result<Vec<PathBuf>, ReplayError> {
    if dir.join(replay_capture::MANIFEST).is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let entries = std::fs::read_dir(dir).map_err(|source| ReplayError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join(replay_capture::MANIFEST).is_file())
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(ReplayError::NoCapture(dir.to_path_buf()));
    }
    Ok(found)
}

/// The simulator modules this program can replay, by name.
fn known_module(name: &str) -> Option<ModuleSpec> {
    let m = crate::demo::demo_module();
    (m.name() == name).then_some(m)
}

/// What one replay did.
pub(crate) struct Replayed {
    pub(crate) record: Option<OutcomeRecord>,
    /// Per pass: the regions whose outputs differ from the captured ones.
    pub(crate) pass_diffs: Vec<Vec<RegionDiff>>,
    /// After the dispatch.
    pub(crate) final_diffs: Vec<RegionDiff>,
    /// Whether every pass left the same bytes (a kernel that does not is non-deterministic).
    pub(crate) passes_agree: bool,
    /// Per pass GPU seconds where the backend measured them outside a record, and the clock's name.
    pub(crate) seconds: Option<(Vec<f64>, &'static str)>,
}

/// Whether every pass's outputs equal the first pass's.
pub(crate) fn passes_agree(outputs: &[Vec<Vec<u8>>]) -> bool {
    outputs.windows(2).all(|w| w[0] == w[1])
}

/// Runs `kreplay replay`; the exit status (0: every output equal, 1: some differ).
pub fn run(args: &ReplayArgs, out: &mut dyn Write) -> Result<u8, ReplayError> {
    let dirs = folders(&args.dir)?;
    // Every folder is checked before any is replayed: a damaged one stops the command.
    let captures = dirs
        .iter()
        .map(|d| replay_capture::read(d))
        .collect::<Result<Vec<_>, _>>()?;
    // The CUDA captures' address ranges are held in this process's address space now, after
    // the manifests are read and before anything loads or initialises the driver (the first
    // `replay_cuda` below opens the device): the shared libraries, host allocations and the
    // driver's own reservations made from here on go elsewhere.
    let cuda: Vec<&replay_capture::Manifest> = captures
        .iter()
        .map(|c| &c.manifest)
        .filter(|m| m.backend == "cuda")
        .collect();
    let mut holds = replay_cuda::standalone::Placeholders::hold(&cuda);
    let mut all_equal = true;
    for c in &captures {
        let r = if c.manifest.backend == "cuda" {
            replay_cuda(c, args.passes, &mut holds, args.exact_addresses)?
        } else if c.manifest.backend == "hsa" {
            crate::replay_hsa::replay(c, args.passes, args.exact_addresses)?
        } else {
            replay_one(c, args.passes)?
        };
        let m = &c.manifest;
        writeln!(
            out,
            "replay {}: kernel {} (captured dispatch {}, pass {}, {} backend, scope {}, {} regions, {} bytes)",
            c.dir.display(),
            m.kernel.name,
            m.dispatch_id,
            m.pass,
            m.backend,
            m.scope.as_str(),
            m.regions.len(),
            m.region_bytes()
        )?;
        let executed = r
            .record
            .as_ref()
            .map_or(r.pass_diffs.len().max(1) as u32, |rec| rec.executed_passes);
        if let Some(rec) = &r.record {
            writeln!(out, "  {rec}")?;
        }
        match args.tool.as_str() {
            "timing" => {
                let (mut t, clock): (Vec<f64>, &str) = match &r.seconds {
                    Some((s, clock)) => (s.clone(), clock),
                    None => (
                        r.record
                            .as_ref()
                            .map(|rec| rec.pass_gpu_seconds.iter().copied().collect())
                            .unwrap_or_default(),
                        "simulator clock",
                    ),
                };
                t.sort_by(f64::total_cmp);
                if t.is_empty() {
                    writeln!(
                        out,
                        "  timing: no pass was timed (one plain execution; ask --passes 2 or more)"
                    )?;
                } else {
                    writeln!(
                        out,
                        "  timing over {} passes: min {:.3} µs, median {:.3} µs, max {:.3} µs ({clock})",
                        t.len(),
                        t[0] * 1e6,
                        t[t.len() / 2] * 1e6,
                        t[t.len() - 1] * 1e6
                    )?;
                }
            }
            _ => {
                let differing: Vec<(usize, &Vec<RegionDiff>)> = r
                    .pass_diffs
                    .iter()
                    .enumerate()
                    .filter(|(_, d)| !d.is_empty())
                    .collect();
                if differing.is_empty() && r.final_diffs.is_empty() {
                    writeln!(
                        out,
                        "  verify: {executed} passes, the outputs of every pass equal to the captured ones"
                    )?;
                } else {
                    all_equal = false;
                    let some_only = (!differing.is_empty() && differing.len() < r.pass_diffs.len())
                        || !r.passes_agree;
                    for (pass, diffs) in &differing {
                        for d in diffs.iter() {
                            writeln!(out, "  verify: pass {pass}: {d}")?;
                        }
                    }
                    for d in &r.final_diffs {
                        writeln!(out, "  verify: after the dispatch: {d}")?;
                    }
                    writeln!(
                        out,
                        "  verify: outputs DIFFER from the captured ones{}",
                        if some_only {
                            " and the passes differ among themselves: the kernel is non-deterministic"
                        } else {
                            ""
                        }
                    )?;
                }
            }
        }
    }
    Ok(if all_equal { 0 } else { 1 })
}

/// The replaying tool: asks for the passes, and reads every region after each pass.
struct VerifyTool {
    rt: replay_mock::WeakRuntime,
    passes: u64,
    regions: Vec<(u64, u64)>,
    outputs: Mutex<Vec<Vec<Vec<u8>>>>,
}

impl VerifyTool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>) {
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                let n = self.passes;
                p.replay_pass_count = Some(Arc::new(move |_, _| n));
            }
            (Operation::Pass, Phase::Exit) => {
                let Some(rt) = self.rt.upgrade() else { return };
                let bytes = self
                    .regions
                    .iter()
                    .map(|&(base, size)| rt.read(base, size as usize).unwrap_or_default())
                    .collect();
                self.outputs.lock().push(bytes);
            }
            _ => {}
        }
    }
}

fn replay_one(c: &LoadedCapture, passes: u64) -> Result<Replayed, ReplayError> {
    let m = &c.manifest;
    let dir = c.dir.clone();
    let unsupported = |why: String| ReplayError::Unsupported {
        dir: dir.clone(),
        why,
    };
    if m.backend != "sim" || m.kernel.code_format != "sim-module" {
        return Err(unsupported(format!(
            "a {} capture ({} code); this kreplay replays captures of the simulated GPU only",
            m.backend, m.kernel.code_format
        )));
    }
    let spec = known_module(&m.kernel.module).ok_or_else(|| {
        unsupported(format!(
            "module {:?} is not one this program knows (the simulator's kernels are closures; kreplay knows `kreplay demo`'s demo.co)",
            m.kernel.module
        ))
    })?;
    if spec.describe().as_bytes() != c.code.as_slice() {
        return Err(unsupported(format!(
            "module {:?} differs from the captured code image (code.zst)",
            m.kernel.module
        )));
    }
    let sim = |e: String| ReplayError::Sim {
        dir: dir.clone(),
        why: e,
    };
    let rt = crate::demo::runtime();
    let agent = AgentId(m.agent);
    if !rt.agents().contains(&agent) {
        return Err(unsupported(format!(
            "agent {agent} does not exist on the simulated GPU"
        )));
    }
    let address = |r: &replay_capture::RegionEntry, why: String| ReplayError::Address {
        dir: dir.clone(),
        index: r.index,
        base: r.base,
        size: r.size,
        why,
    };
    // The regions first, at their addresses; then the module, whose variables the simulator's
    // first-fit loader places where the captured run had them (it loaded them first, at the
    // lowest free addresses, which no captured region holds).
    for r in &m.regions {
        if !r.class.contains(MemoryClass::MODULE_VARIABLE) {
            rt.alloc_at(agent, r.base, r.size, r.class)
                .map_err(|e| address(r, e.to_string()))?;
        }
    }
    let module = rt
        .load_module(agent, spec)
        .map_err(|e| sim(e.to_string()))?;
    let kernel = module.kernel(&m.kernel.symbol).ok_or_else(|| {
        unsupported(format!(
            "module {:?} has no kernel {:?}",
            m.kernel.module, m.kernel.symbol
        ))
    })?;
    for (r, (input, _)) in m.regions.iter().zip(&c.data) {
        if r.class.contains(MemoryClass::MODULE_VARIABLE)
            && !module
                .variables()
                .iter()
                .any(|v| v.base == r.base && v.size == r.size)
        {
            return Err(address(
                r,
                format!("no variable of {:?} was loaded there", m.kernel.module),
            ));
        }
        rt.write(r.base, input).map_err(|e| sim(e.to_string()))?;
    }

    let policy = crate::demo::demo_defaults();
    let contexts = Arc::new(Contexts::new());
    const OWNER: ContextId = ContextId(1);
    contexts
        .register_context(OWNER)
        .and_then(|()| contexts.activate(OWNER))
        .map_err(|e| sim(e.to_string()))?;
    let svc = Arc::new(ReplayService::new(
        policy,
        rt.clock(),
        contexts as Arc<dyn ContextControl>,
    ));
    let regions: Vec<(u64, u64)> = m.regions.iter().map(|r| (r.base, r.size)).collect();
    let tool = Arc::new(VerifyTool {
        rt: rt.downgrade(),
        passes,
        regions: regions.clone(),
        outputs: Mutex::default(),
    });
    let t2 = Arc::clone(&tool);
    svc.configure(
        OWNER,
        Subscription::CONFIG | Subscription::PASS,
        Arc::new(
            move |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData| {
                t2.callback(op, ph, p)
            },
        ),
    )
    .map_err(|e| sim(e.to_string()))?;
    svc.start().map_err(|e| sim(e.to_string()))?;
    let records: Arc<Mutex<Vec<OutcomeRecord>>> = Arc::default();
    let sink = Arc::clone(&records);
    svc.set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
        sink.lock().push(r.clone())
    })));
    rt.set_service(Some(svc));
    let g = m.launch.grid;
    let done = rt
        .dispatch(
            rt.queue(agent, 0),
            &kernel,
            &c.kernarg,
            Dim3::new(g.x, g.y, g.z),
        )
        .map_err(|e| e.to_string())
        .and_then(|c| c.wait().map_err(|e| e.to_string()));
    rt.wait_idle();
    rt.set_service(None);
    done.map_err(sim)?;
    let after: Vec<Vec<u8>> = regions
        .iter()
        .map(|&(base, size)| rt.read(base, size as usize))
        .collect::<Result<_, _>>()
        .map_err(|e| sim(e.to_string()))?;
    rt.shutdown();
    let pass_diffs = tool
        .outputs
        .lock()
        .iter()
        .map(|o| compare_outputs(c, o))
        .collect();
    let record = records.lock().first().cloned();
    let agree = passes_agree(&tool.outputs.lock());
    Ok(Replayed {
        record,
        pass_diffs,
        final_diffs: compare_outputs(c, &after),
        passes_agree: agree,
        seconds: None,
    })
}

/// A CUDA capture on this machine's device: each pass's outputs compared here.
fn replay_cuda(
    c: &LoadedCapture,
    passes: u64,
    holds: &mut replay_cuda::standalone::Placeholders,
    exact: bool,
) -> Result<Replayed, ReplayError> {
    use replay_cuda::standalone::Relocation;
    let relocation = if exact {
        Relocation::Refuse
    } else {
        Relocation::Allow
    };
    let r = replay_cuda::standalone::replay_relocating(c, passes, holds, relocation).map_err(
        |source| ReplayError::Cuda {
            dir: c.dir.clone(),
            source,
        },
    )?;
    if !r.skipped_attributes.is_empty() {
        log::warn!(
            "[kernel-replay] replay {}: launch attributes not applied again (they hold handles of the capturing process): {}",
            c.dir.display(),
            r.skipped_attributes.join(", ")
        );
    }
    warn_relocated(c, &r.relocated, r.rewritten_words, r.stored_pointers);
    for (index, addr) in &r.moved_variables {
        log::info!(
            "[kernel-replay] replay {}: module variable region {index} was loaded at {addr:#x}",
            c.dir.display()
        );
    }
    let pass_diffs: Vec<Vec<RegionDiff>> =
        r.outputs.iter().map(|o| compare_outputs(c, o)).collect();
    Ok(Replayed {
        record: None,
        final_diffs: Vec::new(),
        pass_diffs,
        passes_agree: passes_agree(&r.outputs),
        seconds: Some((r.seconds, "CUDA events")),
    })
}

/// The warning of a replay that relocated ranges (CUDA's and HSA's alike): which ranges moved
/// where, the argument words rewritten, and the words inside the regions that look like
/// pointers into them and were not.
pub(crate) fn warn_relocated(
    c: &LoadedCapture,
    relocated: &[(u64, u64, u64)],
    rewritten_words: usize,
    stored_pointers: usize,
) {
    if relocated.is_empty() {
        return;
    }
    let ranges: Vec<String> = relocated
        .iter()
        .map(|(lo, hi, at)| format!("{lo:#x}-{hi:#x} to {at:#x}"))
        .collect();
    log::warn!(
        "[kernel-replay] replay {}: {} range(s) could not be had at their captured addresses and were relocated ({}); {} argument word(s) rewritten; {} word(s) inside the regions look like pointers into them and were not rewritten{}",
        c.dir.display(),
        relocated.len(),
        ranges.join(", "),
        rewritten_words,
        stored_pointers,
        if stored_pointers > 0 {
            " (outputs may differ where the kernel follows them; --exact-addresses refuses instead)"
        } else {
            ""
        }
    );
}
