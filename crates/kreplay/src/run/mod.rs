//! `kreplay run`: an unmodified application under replay (SPEC §9.1, §9.2, §12), CUDA or HSA.
//!
//! ```text
//! kreplay run [--tool verify|timing|counters] [--passes N] [--metrics LIST] [--set NAME]
//!             [--kernel-include P] [--kernel-exclude P] [--dispatch-range R]
//!             [--out FILE.json|FILE.csv|FILE.html] [--library PATH] [--check-launches] [--ranks LIST]
//!             [--clock-control base|none] [--backend cuda|hsa]
//!             -- APP ARGS...
//! ```
//!
//! `--tool counters` collects hardware metrics (Nsight Compute's names: `--metrics` a comma
//! list, `--set` a built-in set, both together their union) with CUPTI's range profiler
//! (`replay_cuda::counters`). The list is compiled for the first device's chip before the
//! program starts (this command loads the driver and CUPTI's host library to learn the chip
//! and the pass count): a metric that cannot be collected is a usage error naming it (exit
//! status 2) and the program does not start; a set's metrics the chip lacks are left out
//! instead, named on one line (the `basic` set's FFMA count on an H200). The passes asked are the plan's, or `--passes`
//! if given and more (the tool asks for two at least: one pass is no replay); `KREPLAY_CACHE_CONTROL=flush` is set unless the environment sets it (caches
//! invalidated before each pass, as Nsight Compute does). The JSON report's `counters`
//! member is the `replay_report::CounterReport`.
//!
//! Sets up the injection and runs the program: `LD_PRELOAD` and `CUDA_INJECTION64_PATH` name
//! `libkernel_replay.so` (built with its `cuda` feature; `--library`, else `KREPLAY_LIBRARY`,
//! else next to this executable, in its `deps/`, or in `../lib/`), `KREPLAY_CUDA_BUILTIN` and
//! `KREPLAY_CUDA_PASSES` select the built-in tool, and the filter options become the policy's
//! `KREPLAY_KERNEL_*` variables. An injection the environment already names is chained after
//! ours (`KREPLAY_CUDA_CHAIN_INJECTION`), one naming no file refused; the CUPTI cross-check is
//! off (`KREPLAY_CUDA_CUPTI=0`) unless `--check-launches`. The tool itself runs inside each
//! process of the program (`replay_cuda::tool`), which streams its records to a file of its
//! own in a folder of this run (`KREPLAY_CUDA_OUT_DIR`, `replay_cuda::job`) and writes its
//! report there at exit. This command reads those files as they grow ([`crate::collect`]:
//! aggregates per process and kernel, never every record; a progress line on a terminal),
//! then prints the per-kernel table (Nsight Compute's short names, `replay_report::names`) and
//! writes `--out` (a name template, [`crate::template`]: one file per distinct name), as JSON
//! (the processes, their summaries summed, the kernels, then every record with its process
//! and rank, read again from the files) or one CSV row per dispatch and pass. When the reports
//! hold counters (member `counters`), the counters' table follows and `--out` gets them
//! instead, in the format its extension names (`.csv`, `.json`, `.db`, `.html`:
//! `replay_report::write_counters`; an unknown extension is refused before the program
//! starts): the processes' reports merged (`CounterReport::merge`) with each dispatch's
//! process and rank, which every output shows (the CSVs' `Process ID`, `Rank` and `Process
//! Dispatch ID`, the table's block per rank and kernel, the JSON's `origin`, the page's
//! columns); processes whose `--out` names come out equal share a file, as for the records.
//! Each rank of a multi-rank job watches its replay time against the collective timeout in
//! force (`replay_tools::collective`) and warns while it runs; the warnings are said again
//! at the end, naming the process. An `.html` is one self-contained page: the kernels sortable by column,
//! roofline charts, each dispatch's sections (`kreplay report FILE.json --html OUT.html` makes
//! the same page later from a saved `.json`).
//! When sections were asked (`--section`, or `--set` naming one of Nsight Compute's sets), a
//! `.csv` is `replay_report::sections_csv`: each launch's section rows under ncu's display
//! names, `ID` the launch's index from 0 (`replay_cuda::counters::display`), then the raw
//! metrics under the section `raw`; `.json` and `.db` hold the raw metrics either way.
//!
//! `--backend hsa` (the default on a machine with `/dev/kfd` and no NVIDIA driver,
//! [`Backend::detect`]) attaches the same library through the HSA runtime instead:
//! `HSA_TOOLS_LIB` names it, `KREPLAY_HSA_BUILTIN` the tool (`verify` or `timing`; `counters`
//! is CUPTI's and refused), with the same pass count, filters, ranks and records folder; the
//! records, the table and `--out` are as on CUDA, less the CUDA interception's counts
//! (`replay_hsa::tool`: `replay-tools`' tools over the HSA backend's `ToolDevice`).
//!
//! The program runs in a process group of its own, which SIGINT, SIGTERM, SIGHUP and SIGQUIT
//! sent to this command are passed on to (`replay_cuda::signals`); on a terminal the group
//! gets the terminal while it runs. A process that ended without its report (killed) is
//! named with the records it made.
//!
//! `kreplay run --list-sass [--metrics LIST] [--set NAME]` starts no program: it prints the
//! first device's chip and the SASS metrics CUPTI's SASS Metrics API has for it (name, id,
//! description; the names `__sass_` metrics are mapped to), and with a list, its plan (which
//! metric runs in which pass, the SASS pass's API names) as JSON. Exit status 0, 2 for a list
//! that cannot be collected, 1 without CUPTI or a GPU.
//!
//! The exit status is the application's (128 + the signal for one killed by a signal, said
//! in one line: `the program was killed by SIGSEGV after N launches; records up to dispatch
//! K`). A program without a usable driver gets one clear line (from the library) and runs
//! untouched; one that never reached the driver gets one line from here.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use replay_cuda::job;

use crate::collect::Collector;

mod args;
mod counters;
mod output;
#[cfg(test)]
mod tests;

use args::{parse, Backend, RunArgs};
pub(crate) use args::{RunOpts, USAGE};
use counters::{list_sass, plan_counters};
use output::report;

const LIB_NAME: &str = "libkernel_replay.so";

fn find_library(a: &RunArgs) -> Option<PathBuf> {
    if let Some(l) = &a.library {
        return Some(l.clone());
    }
    if let Some(l) = std::env::var_os("KREPLAY_LIBRARY") {
        return Some(PathBuf::from(l));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join(LIB_NAME),
        dir.join("deps").join(LIB_NAME),
        dir.join("../lib").join(LIB_NAME),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Runs `kreplay run ARGS`; returns the exit status.
pub fn main(args: &[String]) -> u8 {
    main_with_env(args, &[])
}

/// [`main`], with `env` also set for the program (`kreplay capture`'s variables).
pub fn main_with_env(args: &[String], env: &[(&str, String)]) -> u8 {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            crate::say(format_args!("kreplay run: {e}\n{USAGE}"));
            return 2;
        }
    };
    // A library named explicitly must exist: preloading a missing one would only make the
    // dynamic loader print a warning into the application's stderr.
    let explicit = a
        .library
        .clone()
        .map(|l| ("--library", l))
        .or_else(|| std::env::var_os("KREPLAY_LIBRARY").map(|l| ("KREPLAY_LIBRARY", l.into())));
    if let Some((what, l)) = explicit {
        if !l.is_file() {
            crate::say(format_args!(
                "kreplay run: {what} {}: no such file\n{USAGE}",
                l.display()
            ));
            return 2;
        }
    }
    if a.list_sass {
        return list_sass(&a);
    }
    if let Err(e) = check_out(&a) {
        crate::say(format_args!("kreplay run: {e}\n{USAGE}"));
        return 2;
    }
    // A bad value in the environment is an error before the program starts, not a
    // silent fallback inside it.
    if a.graph_profiling.is_none() {
        if let Err(e) = replay_cuda::state::graph::GraphProfiling::from_env() {
            crate::say(format_args!(
                "kreplay run: {e}; the program was not started"
            ));
            return 2;
        }
    }
    let (passes, metrics) = if a.tool == "counters" {
        match plan_counters(&a) {
            Ok(p) => p,
            Err(code) => return code,
        }
    } else {
        (a.passes, Vec::new())
    };
    let clocks = match lock_clocks(&a, env) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let dir = run_dir();
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        crate::say(format_args!(
            "kreplay run: cannot make the report folder {}: {e}; the program was not started",
            dir.display()
        ));
        return 1;
    }
    let mut cmd = Command::new(&a.app[0]);
    cmd.args(&a.app[1..]);
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    match find_library(&a) {
        Some(lib) => {
            let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
            if a.backend() == Backend::Hsa {
                // The HSA runtime loads the library at `hsa_init` and calls its `OnLoad`.
                cmd.env("HSA_TOOLS_LIB", &lib)
                    .env(replay_hsa::tool::BUILTIN_ENV, &a.tool)
                    .env(replay_tools::PASSES_ENV, passes.to_string())
                    .env(job::OUT_DIR_ENV, &dir)
                    .env_remove(replay_hsa::tool::OUT_ENV)
                    .env_remove(replay_hsa::tool::TOOL_ENV);
            } else {
                let preload = preload_with(&lib, std::env::var("LD_PRELOAD").ok().as_deref());
                if let Err(code) = chain_injection(&mut cmd, &lib) {
                    let _ = std::fs::remove_dir_all(&dir);
                    return code;
                }
                cmd.env("LD_PRELOAD", preload)
                    .env("CUDA_INJECTION64_PATH", &lib)
                    .env("KREPLAY_CUDA_BUILTIN", &a.tool)
                    .env("KREPLAY_CUDA_PASSES", passes.to_string())
                    .env(job::OUT_DIR_ENV, &dir)
                    .env_remove(replay_cuda::tool::OUT_ENV);
                if let Some(g) = &a.graph_profiling {
                    cmd.env(replay_cuda::state::graph::GRAPH_PROFILING_ENV, g);
                }
                if a.tool == "counters" {
                    cmd.env("KREPLAY_CUDA_METRICS", metrics.join(","));
                    // The report says how the clocks ran (what this command holds).
                    let held = if clocks.is_some() { "base" } else { "none" };
                    cmd.env(replay_cuda::counters::clocks::CLOCK_ENV, held);
                    if std::env::var_os("KREPLAY_CACHE_CONTROL").is_none()
                        && std::env::var_os("ROCPROFILER_KERNEL_REPLAY_CACHE_CONTROL").is_none()
                    {
                        cmd.env("KREPLAY_CACHE_CONTROL", "flush");
                    }
                }
            }
            if std::env::var_os("KREPLAY_LOG").is_none() {
                // One outcome line per dispatch is too much for a real program: the table
                // at the end and `--out` have them.
                cmd.env("KREPLAY_LOG", "warn");
            }
            // The cross-check subscribes to CUPTI, which the program's own profiler may need.
            let cupti = replay_cuda::intercept::cupti::CUPTI_ENV;
            if a.check_launches {
                cmd.env(cupti, "1");
            } else if std::env::var_os(cupti).is_none() {
                cmd.env(cupti, "0");
            }
            if let Some(r) = &a.ranks {
                cmd.env(job::RANKS_ENV, r);
            }
            let names = a.out_template().map(|t| t.env_names()).unwrap_or_default();
            if !names.is_empty() {
                cmd.env(job::REPORT_ENV_ENV, names.join(","));
            }
            for (var, v) in [
                ("KREPLAY_KERNEL_INCLUDE", &a.include),
                ("KREPLAY_KERNEL_EXCLUDE", &a.exclude),
                ("KREPLAY_DISPATCH_RANGE", &a.range),
            ] {
                if let Some(v) = v {
                    cmd.env(var, v);
                }
            }
        }
        None => crate::say(format_args!(
            "kreplay run: {LIB_NAME} not found (give --library or KREPLAY_LIBRARY); running the program untouched"
        )),
    }
    // Ranks that replay fall behind the others, which wait for them inside collectives:
    // said before the job starts, with the timeouts that could end it.
    let pass_timeout = replay_core::Policy::from_env()
        .map(|p| p.pass_timeout)
        .unwrap_or_else(|_| replay_core::Policy::default().pass_timeout);
    if let Some(w) = replay_tools::collective::collective_timeout_warning(
        a.app.first().map(String::as_str),
        &|v| std::env::var(v).ok(),
        a.passes,
        pass_timeout,
        a.ranks.as_deref(),
    ) {
        crate::say(format_args!("kreplay run: warning: {w}"));
    }
    // The program gets a process group of its own, which the signals this command gets are
    // passed on to: a scheduler's SIGTERM stops all of it, and this command lives on to
    // report what ran.
    cmd.process_group(0);
    replay_cuda::signals::catch();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            crate::say(format_args!(
                "kreplay run: cannot start {:?}: {e}",
                a.app[0]
            ));
            return 127;
        }
    };
    let pid = child.id();
    replay_cuda::signals::forward_to_group(pid);
    // On a terminal the program, in its own group, gets the terminal while it runs.
    let terminal = replay_cuda::signals::give_terminal(pid);
    let mut col = Collector::new(&dir);
    let status = wait_reading(&mut child, &mut col);
    drop(terminal);
    if let Some(sig) = replay_cuda::signals::caught() {
        crate::say(format_args!(
            "kreplay run: {} passed on to the program (process group {pid})",
            replay_cuda::signals::name(sig)
        ));
    }
    col.finish();
    if let Some(c) = clocks {
        if let Err(e) = c.release() {
            crate::say(format_args!(
                "kreplay run: warning: {e}; reset them with `nvidia-smi -rgc`"
            ));
        }
    }
    let code = match &status {
        Some(s) => exit_code(s),
        None => 1,
    };
    let killed = status
        .as_ref()
        .and_then(std::os::unix::process::ExitStatusExt::signal);
    report(&a, passes, &col, pid, killed);
    let _ = std::fs::remove_dir_all(&dir);
    code
}

/// The folder the processes write their files to: one per `kreplay run`.
fn run_dir() -> PathBuf {
    std::env::temp_dir().join(format!("kreplay-run-{}", std::process::id()))
}

/// An injection library the environment already names (another tool's: Nsight Systems',
/// a profiler's) is chained after ours, never dropped: ours calls its `InitializeInjection`.
/// One that names no file is refused (exit status 2).
fn chain_injection(cmd: &mut Command, ours: &Path) -> Result<(), u8> {
    let Some(theirs) = std::env::var_os("CUDA_INJECTION64_PATH").filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let theirs = PathBuf::from(theirs);
    if std::fs::canonicalize(&theirs).ok().as_deref() == Some(ours) {
        return Ok(());
    }
    if !theirs.is_file() {
        crate::say(format_args!(
            "kreplay run: CUDA_INJECTION64_PATH {} names no file; it cannot be chained after ours and is not dropped silently: unset it or fix it (the program was not started)",
            theirs.display()
        ));
        return Err(2);
    }
    crate::say(format_args!(
        "kreplay run: CUDA_INJECTION64_PATH {} is chained: ours initialises first, then it",
        theirs.display()
    ));
    cmd.env(job::CHAIN_ENV, &theirs);
    Ok(())
}

/// Waits for the program, reading the records as they come and showing a progress line on a
/// terminal. `None` when waiting failed.
fn wait_reading(
    child: &mut std::process::Child,
    col: &mut Collector,
) -> Option<std::process::ExitStatus> {
    use std::io::{IsTerminal, Write};
    let tty = std::io::stderr().is_terminal();
    let mut shown = false;
    let mut tick = 0u32;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(e) => {
                crate::say(format_args!("kreplay run: waiting for the program: {e}"));
                break child.wait().ok();
            }
        }
        // Short waits first, so a short program is not held up.
        std::thread::sleep(std::time::Duration::from_millis(if tick < 20 {
            10
        } else {
            100
        }));
        tick = tick.saturating_add(1);
        if tick % 5 == 0 {
            col.poll();
            let (seen, replayed) = col.progress();
            if tty && seen > 0 {
                let mut e = std::io::stderr().lock();
                let _ = write!(
                    e,
                    "\rkreplay run: {seen} dispatches seen, {replayed} replayed ({} processes)",
                    col.procs.len()
                );
                let _ = e.flush();
                shown = true;
            }
        }
    };
    if shown {
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[K");
        let _ = e.flush();
    }
    status
}

/// The counter tool's `--out` must name a format the counters can be written in; checked
/// before the program runs, not after.
fn check_out(a: &RunArgs) -> Result<(), replay_report::ReportError> {
    match &a.out {
        Some(out) if a.tool == "counters" => replay_report::Format::of(out).map(drop),
        _ => Ok(()),
    }
}

/// Locks the GPUs' clocks to base when `--clock-control` (or the counters tool's default) asks,
/// before the program starts; the guard unlocks them. A lock that was asked for and cannot be
/// had is an error before the program starts (exit status 2); the default's is a warning, and
/// the program runs with clocks as they are.
fn lock_clocks(
    a: &RunArgs,
    env: &[(&str, String)],
) -> Result<Option<replay_cuda::counters::clocks::ClockLock>, u8> {
    use replay_cuda::counters::clocks::{ClockControl, ClockLock, Selection};
    let (mode, given) = a.clock_control();
    if mode == ClockControl::None {
        return Ok(None);
    }
    let var = |k: &str| {
        env.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(k).ok())
    };
    let sel = Selection::from_env(
        var("CUDA_VISIBLE_DEVICES").as_deref(),
        var("CUDA_DEVICE_ORDER").as_deref(),
    );
    match ClockLock::base(&sel) {
        Ok(lock) => {
            let gpus: Vec<String> = lock.locked().iter().map(|g| g.uuid.clone()).collect();
            crate::say(format_args!(
                "kreplay run: clock control base: graphics clocks locked to base for the run on {}",
                gpus.join(", ")
            ));
            Ok(Some(lock))
        }
        Err(e) if given => {
            crate::say(format_args!(
                "kreplay run: --clock-control base: {e}; the program was not started"
            ));
            Err(2)
        }
        Err(e) => {
            crate::say(format_args!(
                "kreplay run: warning: clock control base (the counters default) not possible: {e}; clocks left as they are (--clock-control none says so)"
            ));
            Ok(None)
        }
    }
}

fn exit_code(status: &std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.wrapping_add(s as u8),
        _ => 1,
    }
}
/// `LD_PRELOAD` for the program: the library first, before what the environment preloads,
/// except sanitizer runtimes (ASan, TSan, UBSan, LSan, MSan, HWASan, GCC's or clang's), which
/// must come first of all or refuse to start.
fn preload_with(lib: &std::path::Path, existing: Option<&str>) -> String {
    const SANITIZERS: [&str; 7] = [
        "libasan",
        "libtsan",
        "libubsan",
        "liblsan",
        "libmsan",
        "libhwasan",
        "libclang_rt.",
    ];
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    for p in existing
        .unwrap_or("")
        .split([':', ' '])
        .filter(|p| !p.is_empty())
    {
        let file = p.rsplit('/').next().unwrap_or(p);
        if SANITIZERS.iter().any(|s| file.starts_with(s)) {
            first.push(p);
        } else {
            rest.push(p);
        }
    }
    let lib = lib.display().to_string();
    first
        .into_iter()
        .chain(std::iter::once(lib.as_str()))
        .chain(rest)
        .collect::<Vec<_>>()
        .join(":")
}
