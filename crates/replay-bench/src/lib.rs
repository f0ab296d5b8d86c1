//! # replay-bench
//!
//! The GPU bench of the CUDA backend (it checks SPEC §6–§8 and §9.2 on hardware):
//! correctness checks and measurements on a real GPU, reachable as `kreplay bench --backend
//! cuda` and as the `cuda_bench` binary. Both are built on the CPU machine and run on the GPU
//! machine as single binaries that link only glibc (CUDA is loaded at run time).
//!
//! It drives `replay-cuda` through its public API only, as an application in library mode
//! would, and is a crate of its own so that the backend stays the backend: the bench's JSON
//! records (`serde_json`) and its CUDA sources are no part of it.
//!
//! ```text
//! PROG [run] [--cases LIST] [--out FILE] [--big] [--alloc-gib LIST] [--kernel-mib LIST]
//!            [--scopes all,arguments] [--restores full,dirty] [--passes 38] [--layout equal|small]
//!            [--buffers 4] [--tier-gib 16] [--pinned-gib 4] [--pageable-gib 1] [--dirty-gib 4]
//!            [--read-gib 4] [--overhead-passes 1000]
//!            [--skip-all-full-from-gib N] [--ncu PATH|off] [--ncu-timeout 300] [--device 0]
//!            [--log-level warn]
//! PROG check
//! PROG app --alloc-gib N --kernel-mib M [--buffers 4] [--layout equal|small] [--device 0]
//! PROG merge FILE... [--out FILE]
//! PROG multi [--kernel-mib M] [--passes N] [--pooled-dispatches D] [--out FILE]
//! ```
//!
//! where PROG is `kreplay bench --backend cuda` or `cuda_bench`.
//!
//! Cases (`--cases`, comma-separated, default `correctness,ceilings,overhead,tiers,dirty,pass38,ncu`):
//! `correctness` (PASS/FAIL checks), `ceilings`, `overhead`, `tiers`, `dirty`, `pass38`, `ncu`,
//! `defaults` (the 38-pass replay under the default policy, first dispatch included, each
//! footprint followed by Nsight Compute on the same dispatch unless `--ncu off`),
//! `pinning` (`--pinned-gib` of pinned backing pinned both ways the backend can), and `pooled`
//! (not in the default: one `--alloc-gib` allocation with sub-buffers, scope `predicted`,
//! `--pooled-dispatches 20`, then ncu on the same program).
//! `pass38`, `ncu`, `defaults` and `pooled` use `--alloc-gib` (default 1,40; `--big` adds
//! 100,120). `pass38` runs every scope × restore at every footprint unless
//! `--skip-all-full-from-gib` says otherwise. Progress goes to
//! stderr; results to the JSON file after every case (so a killed run keeps what it measured);
//! a table goes to stdout at the end. Exit status 1 when a check failed, 2 on a bad command
//! line or when CUDA is not available.
//!
//! The `ncu` case runs the dispatch in a child process (`PROG app ...`), alone and under Nsight
//! Compute; [`SelfInvocation`] says how the running program invokes itself.

#![warn(missing_docs)]

mod checks;
mod common;
mod multi;
mod ncu;
mod perf;
mod pooled;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use replay_core::policy::LogLevel;
use replay_core::{RestoreMode, Scope, Tier};
use replay_cuda::{BackendConfig, CudaBackend};
use serde_json::{json, Value};
use std::ffi::OsString;

use common::{progress, Bench, Row, GIB};

#[derive(Debug, Clone)]
struct Opts {
    cases: Vec<String>,
    out: PathBuf,
    alloc_gib: Vec<u64>,
    kernel_mib: Vec<u64>,
    scopes: Vec<Scope>,
    restores: Vec<RestoreMode>,
    passes: u64,
    small_first: bool,
    buffers: u64,
    tier_gib: u64,
    pinned_gib: u64,
    pageable_gib: u64,
    dirty_gib: u64,
    read_gib: u64,
    overhead_passes: u64,
    skip_all_full_from_gib: u64,
    ncu: Option<String>,
    ncu_timeout: u64,
    device: i32,
    log_level: LogLevel,
    pooled_dispatches: u64,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            cases: [
                "correctness",
                "ceilings",
                "overhead",
                "tiers",
                "dirty",
                "pass38",
                "ncu",
            ]
            .map(String::from)
            .to_vec(),
            out: PathBuf::from("cuda_bench.json"),
            alloc_gib: vec![1, 40],
            kernel_mib: vec![16],
            scopes: vec![Scope::All, Scope::Arguments],
            restores: vec![RestoreMode::Full, RestoreMode::Dirty],
            passes: 38,
            small_first: false,
            buffers: 4,
            tier_gib: 16,
            pinned_gib: 4,
            pageable_gib: 1,
            dirty_gib: 4,
            read_gib: 4,
            overhead_passes: 1000,
            skip_all_full_from_gib: u64::MAX,
            ncu: None,
            ncu_timeout: 300,
            device: 0,
            log_level: LogLevel::Warn,
            pooled_dispatches: 20,
        }
    }
}

fn list<T>(v: &str, f: impl Fn(&str) -> Option<T>) -> Result<Vec<T>, String> {
    v.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| f(s.trim()).ok_or_else(|| format!("bad list item {s:?}")))
        .collect()
}

fn parse(args: &[String]) -> Result<(String, Opts, Vec<String>), String> {
    let mut o = Opts::default();
    let mut mode = "run".to_string();
    let mut rest = Vec::new();
    let mut big = false;
    let mut alloc_given = false;
    let mut i = 0;
    let take = |i: &mut usize| -> Result<String, String> {
        *i += 1;
        args.get(*i)
            .cloned()
            .ok_or_else(|| format!("{} needs a value", args[*i - 1]))
    };
    // A numeric option's value, the error naming the option.
    fn num<T: std::str::FromStr>(args: &[String], i: &mut usize) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        let flag = &args[*i];
        *i += 1;
        let v = args
            .get(*i)
            .ok_or_else(|| format!("{flag} needs a value"))?;
        v.parse().map_err(|e| format!("{flag}: {e}"))
    }
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "run" | "app" | "merge" | "check" | "multi" if i == 0 => mode = a.to_string(),
            "--cases" => o.cases = list(&take(&mut i)?, |s| Some(s.to_string()))?,
            "--out" => o.out = PathBuf::from(take(&mut i)?),
            "--big" => big = true,
            "--alloc-gib" => {
                o.alloc_gib = list(&take(&mut i)?, |s| s.parse().ok())?;
                alloc_given = true;
            }
            "--kernel-mib" => o.kernel_mib = list(&take(&mut i)?, |s| s.parse().ok())?,
            "--scopes" => {
                o.scopes = list(&take(&mut i)?, |s| match s {
                    "all" => Some(Scope::All),
                    "arguments" => Some(Scope::Arguments),
                    "predicted" => Some(Scope::Predicted),
                    _ => None,
                })?
            }
            "--restores" => {
                o.restores = list(&take(&mut i)?, |s| match s {
                    "full" => Some(RestoreMode::Full),
                    "dirty" => Some(RestoreMode::Dirty),
                    _ => None,
                })?
            }
            "--passes" => o.passes = num(args, &mut i)?,
            "--layout" => {
                o.small_first = match take(&mut i)?.as_str() {
                    "small" => true,
                    "equal" => false,
                    v => return Err(format!("--layout {v}: expected equal or small")),
                }
            }
            "--buffers" => o.buffers = num(args, &mut i)?,
            "--pinned-gib" => o.pinned_gib = num(args, &mut i)?,
            "--tier-gib" => o.tier_gib = num(args, &mut i)?,
            "--pageable-gib" => o.pageable_gib = num(args, &mut i)?,
            "--read-gib" => o.read_gib = num(args, &mut i)?,
            "--dirty-gib" => o.dirty_gib = num(args, &mut i)?,
            "--overhead-passes" => o.overhead_passes = num(args, &mut i)?,
            "--skip-all-full-from-gib" => o.skip_all_full_from_gib = num(args, &mut i)?,
            "--ncu" => o.ncu = Some(take(&mut i)?),
            "--ncu-timeout" => o.ncu_timeout = num(args, &mut i)?,
            "--device" => o.device = num(args, &mut i)?,
            "--pooled-dispatches" => o.pooled_dispatches = num(args, &mut i)?,
            "--log-level" => {
                let v = take(&mut i)?;
                o.log_level = LogLevel::parse(&v).ok_or_else(|| format!("--log-level {v}"))?
            }
            "-h" | "--help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s => rest.push(s.to_string()),
        }
        i += 1;
    }
    if big && !alloc_given {
        o.alloc_gib.extend([100, 120]);
    }
    if mode == "check" {
        mode = "run".into();
        o.cases = vec!["correctness".into()];
    }
    for c in &o.cases {
        if ![
            "correctness",
            "ceilings",
            "overhead",
            "tiers",
            "dirty",
            "pass38",
            "ncu",
            "pooled",
            "defaults",
            "pinning",
        ]
        .contains(&c.as_str())
        {
            return Err(format!("unknown case {c}"));
        }
    }
    Ok((mode, o, rest))
}

const USAGE: &str = include_str!("usage.txt");

/// How messages name the program (`kreplay bench` or `cuda_bench`), set by [`main_with_args`].
static PROGRAM: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn prog() -> &'static str {
    PROGRAM.get().map_or("cuda_bench", String::as_str)
}

/// How the running program invokes the bench in a child process (the `ncu` case runs
/// `EXE PREFIX... app --alloc-gib N ...`, alone and under Nsight Compute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfInvocation {
    /// The executable: normally [`std::env::current_exe`].
    pub exe: PathBuf,
    /// Arguments before the bench's own (`["bench", "--backend", "cuda"]` for `kreplay`,
    /// none for `cuda_bench`).
    pub prefix: Vec<OsString>,
}

impl SelfInvocation {
    /// The current executable with `prefix` before the bench's arguments. Falls back to
    /// `argv[0]` where the executable's path cannot be read.
    pub fn current(prefix: &[&str]) -> Self {
        let exe = std::env::current_exe()
            .ok()
            .or_else(|| std::env::args_os().next().map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("cuda_bench"));
        Self {
            exe,
            prefix: prefix.iter().map(OsString::from).collect(),
        }
    }

    /// A command that runs the bench with `args` after the prefix.
    pub fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(&self.exe);
        c.args(&self.prefix);
        c
    }

    /// The command line as text, `EXE PREFIX...`, for logs and the JSON record.
    pub fn display(&self) -> String {
        std::iter::once(self.exe.display().to_string())
            .chain(self.prefix.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// How the usage text and the recorded results name the program: the executable's file
    /// name and the prefix (never its path).
    pub(crate) fn program_name(&self) -> String {
        std::iter::once(
            self.exe
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "cuda_bench".into()),
        )
        .chain(self.prefix.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ")
    }
}

/// The usage text, with `program` (e.g. `kreplay bench --backend cuda`) as the command.
pub fn usage(program: &str) -> String {
    USAGE.replace("PROG", program)
}

/// Runs the bench with `args` (without the program name or prefix): `run` (the default),
/// `check`, `app` or `merge`, as in the module documentation. Returns the exit status: 0, 1
/// when a check failed, 2 on a bad command line or when CUDA is not available (the reason is
/// printed), 3 to 5 when `app` failed. Never exits the process itself.
pub fn main_with_args(args: Vec<String>, me: SelfInvocation) -> i32 {
    let _ = PROGRAM.set(if me.prefix.is_empty() {
        "cuda_bench".to_string()
    } else {
        me.program_name()
    });
    let (mode, o, rest) = match parse(&args) {
        Ok(x) => x,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("{}: {e}", prog());
            }
            eprintln!("{}", usage(&me.program_name()));
            return 2;
        }
    };
    if !replay_core::log_sink::install(o.log_level) {
        // The program installed the sink already (kreplay does): the bench's level wins.
        replay_core::log_sink::set_level(o.log_level);
    }
    match mode.as_str() {
        "app" => ncu::app(
            o.device,
            o.alloc_gib.first().copied().unwrap_or(1),
            o.kernel_mib.first().copied().unwrap_or(16),
            o.buffers,
            o.small_first,
        ),
        "merge" => merge(&rest, &o.out),
        "multi" => multi::multi(
            multi::Multi {
                bytes: o.kernel_mib.first().copied().unwrap_or(16) << 20,
                dispatches: o.pooled_dispatches.max(1),
                passes: o.passes.max(2),
            },
            &o.out,
        ),
        _ => run(&o, &args, &me),
    }
}

fn merge(files: &[String], out: &PathBuf) -> i32 {
    let mut runs = Vec::new();
    let mut results = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let v: Value = match std::fs::read_to_string(f)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        {
            Ok(v) => v,
            Err(e) => {
                eprintln!("{} merge: {f}: {e}", prog());
                return 2;
            }
        };
        if let Some(rs) = v.get("results").and_then(Value::as_array) {
            for r in rs {
                let mut r = r.clone();
                r["run"] = json!(i);
                results.push(r);
            }
        }
        let mut meta = v.clone();
        if let Some(m) = meta.as_object_mut() {
            m.remove("results");
        }
        meta["file"] = json!(f);
        runs.push(meta);
    }
    let merged = json!({ "tool": "cuda_bench", "merged": true, "runs": runs, "results": results });
    let text = serde_json::to_string_pretty(&merged).unwrap_or_default();
    if let Err(e) = std::fs::write(out, text) {
        eprintln!("{} merge: {}: {e}", prog(), out.display());
        return 2;
    }
    eprintln!(
        "{} merge: {} results from {} runs into {}",
        prog(),
        results.len(),
        runs.len(),
        out.display()
    );
    0
}

fn write_json(o: &Opts, meta: &Value, rows: &[Row]) {
    let mut v = meta.clone();
    v["results"] = Value::Array(rows.iter().map(Row::to_json).collect());
    v["checks_passed"] = json!(rows.iter().filter(|r| r.pass == Some(true)).count());
    v["checks_failed"] = json!(rows.iter().filter(|r| r.pass == Some(false)).count());
    let text = serde_json::to_string_pretty(&v).unwrap_or_default();
    if let Err(e) = std::fs::write(&o.out, text) {
        eprintln!("{}: writing {}: {e}", prog(), o.out.display());
    }
}

fn run(o: &Opts, args: &[String], me: &SelfInvocation) -> i32 {
    let started = Instant::now();
    let n = match replay_cuda::is_available() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("{}: CUDA is not available: {e}", prog());
            return 2;
        }
    };
    progress(&format!("{n} CUDA device(s); using device {}", o.device));
    let backend = match CudaBackend::new(
        o.device,
        Arc::new(replay_memory::Tracker::new()),
        BackendConfig::default(),
    ) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            eprintln!("{}: {e}", prog());
            return 2;
        }
    };
    let info = backend.device().info().clone();
    let (free, total) = backend.device().mem_info().unwrap_or((0, 0));
    progress(&format!(
        "{} (sm_{}{}, {} SMs), {:.1} GiB free of {:.1} GiB, driver {}, host MemAvailable {:.1} GiB, device digests {}",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.multiprocessors,
        free as f64 / GIB as f64,
        total as f64 / GIB as f64,
        info.driver_version,
        replay_cuda::memory::host_mem_available().unwrap_or(0) as f64 / GIB as f64,
        backend.memory().device_digests()
    ));
    let bench = match Bench::new(Arc::clone(&backend)) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{}: {e}", prog());
            return 2;
        }
    };
    let out_dir = o
        .out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    let meta = json!({
        "tool": "cuda_bench",
        "version": 1,
        "args": args,
        // The file name, not the path: results are committed, paths are the machine's.
        "program": me.program_name(),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "device": info,
        "device_free_bytes": free,
        "host_mem_available_bytes": replay_cuda::memory::host_mem_available(),
        "device_digests": backend.memory().device_digests(),
        "digest_target_blocks": replay_cuda::kernels::TARGET_BLOCKS,
    });
    let mut rows: Vec<Row> = Vec::new();
    let has = |c: &str| o.cases.iter().any(|x| x == c);
    let mut ceilings = None;
    let step = |name: &str, rows: &mut Vec<Row>, r: Result<(), String>| {
        if let Err(e) = r {
            rows.push(Row::check("run", name.to_string(), Err(e)));
        }
        write_json(o, &meta, rows);
        progress(&format!(
            "-- {name} done at {:.1} s",
            started.elapsed().as_secs_f64()
        ));
        perf::settle();
    };
    if has("correctness") {
        progress("== correctness");
        checks::run_all(&bench, &mut rows);
        step("correctness", &mut rows, Ok(()));
    }
    if has("ceilings") || has("tiers") {
        progress("== ceilings");
        let r = perf::ceilings(&bench, &mut rows, o.read_gib).map(|c| {
            ceilings = Some(c);
        });
        step("ceilings", &mut rows, r);
    }
    if has("overhead") {
        progress("== overhead");
        let r = perf::overhead(&bench, &mut rows, o.overhead_passes.max(2));
        step("overhead", &mut rows, r);
    }
    if has("tiers") {
        progress("== tiers");
        let r = match &ceilings {
            Some(c) => perf::tiers(
                &bench,
                &mut rows,
                c,
                &[
                    (Tier::Device, o.tier_gib * GIB),
                    (Tier::PinnedHost, o.pinned_gib * GIB),
                    (Tier::PageableHost, o.pageable_gib * GIB),
                ],
            ),
            None => Err("no ceilings measured".into()),
        };
        step("tiers", &mut rows, r);
    }
    if has("dirty") {
        progress("== dirty");
        let r = perf::dirty(&bench, &mut rows, o.dirty_gib * GIB, 8);
        step("dirty", &mut rows, r);
    }
    if has("pass38") {
        progress("== pass38");
        let p = perf::Pass38 {
            alloc_gib: o.alloc_gib.clone(),
            kernel_mib: o.kernel_mib.clone(),
            scopes: o.scopes.clone(),
            restores: o.restores.clone(),
            passes: o.passes,
            small_first: o.small_first,
            buffers: o.buffers,
            skip_all_full_from_gib: o.skip_all_full_from_gib,
        };
        let r = perf::pass38(&bench, &mut rows, &p);
        step("pass38", &mut rows, r);
    }
    if has("pooled") {
        progress("== pooled");
        for &gib in &o.alloc_gib {
            let p = pooled::Pooled {
                alloc_gib: gib,
                kernel_mib: o.kernel_mib.first().copied().unwrap_or(16),
                dispatches: o.pooled_dispatches.max(1),
                passes: o.passes,
            };
            let r = pooled::pooled(&bench, &mut rows, &p);
            step("pooled", &mut rows, r);
            // Nsight Compute on the same program: one allocation, the kernel over its start.
            ncu::run(
                &mut rows,
                o.ncu.as_deref(),
                &[gib],
                &[p.kernel_mib],
                false,
                1,
                &out_dir,
                Duration::from_secs(o.ncu_timeout),
                me,
            );
            step("pooled ncu", &mut rows, Ok(()));
        }
    }
    if has("pinning") {
        progress("== pinning");
        let r = perf::pinning(&bench, &mut rows, o.pinned_gib);
        step("pinning", &mut rows, r);
    }
    if has("defaults") {
        progress("== defaults");
        let d = perf::Defaults {
            alloc_gib: o.alloc_gib.clone(),
            kernel_mib: o.kernel_mib.clone(),
            passes: o.passes,
            small_first: o.small_first,
            buffers: o.buffers,
        };
        let with_ncu = o.ncu.as_deref() != Some("off");
        let r = perf::defaults(&bench, &mut rows, &d, |rows, gib, kmib| {
            if with_ncu {
                ncu::run(
                    rows,
                    o.ncu.as_deref(),
                    &[gib],
                    &[kmib],
                    o.small_first,
                    o.buffers,
                    &out_dir,
                    Duration::from_secs(o.ncu_timeout),
                    me,
                );
            }
        });
        step("defaults", &mut rows, r);
    }
    if has("ncu") {
        progress("== ncu");
        // Free what this process pools before ncu's processes need the device.
        bench.backend.release_backing();
        ncu::run(
            &mut rows,
            o.ncu.as_deref(),
            &o.alloc_gib,
            &o.kernel_mib,
            o.small_first,
            o.buffers,
            &out_dir,
            Duration::from_secs(o.ncu_timeout),
            me,
        );
        step("ncu", &mut rows, Ok(()));
    }
    write_json(o, &meta, &rows);
    print_table(&rows);
    let failed = rows.iter().filter(|r| r.pass == Some(false)).count();
    println!(
        "\n{} checks passed, {failed} failed; {:.1} s; results in {}",
        rows.iter().filter(|r| r.pass == Some(true)).count(),
        started.elapsed().as_secs_f64(),
        o.out.display()
    );
    i32::from(failed > 0)
}

fn f(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

fn print_table(rows: &[Row]) {
    let mut case = "";
    for r in rows {
        if r.case != case {
            case = r.case;
            println!("\n== {case}");
        }
        let d = &r.data;
        match (r.case, r.pass) {
            (_, Some(p)) => println!(
                "{} {:<40} {}",
                if p { "PASS" } else { "FAIL" },
                r.name,
                d.get("error").and_then(Value::as_str).unwrap_or("")
            ),
            ("ceilings", None) if r.name == "copies" => {
                for k in [
                    "d2d_gbps",
                    "pinned_h2d_gbps",
                    "pinned_d2h_gbps",
                    "pageable_h2d_gbps",
                    "pageable_d2h_gbps",
                    "read_gbps",
                    "rmw_kernel_gbps",
                ] {
                    println!("{k:<24} {:>10.1} GB/s", f(d, k));
                }
            }
            ("ceilings", None) => {
                if let Some(m) = d.as_object() {
                    for (k, v) in m {
                        println!(
                            "digest {k:<20} {:>10.1} GB/s  {:>5.0}% of read",
                            f(v, "gbps"),
                            100.0 * f(v, "of_read")
                        );
                    }
                }
            }
            ("overhead", None) => println!(
                "{:<36} per pass {:>7.1} us  raw {:>6.1} us  added {:>6.1} us ({} {:>6.1}, core {:>6.1})  target < 50 us: {}  < 5 us: {}",
                r.name,
                f(d, "per_pass_us"),
                f(d, "raw_round_trip_us"),
                f(d, "added_per_pass_us"),
                if d["restore_is_enqueue_time"] == true {
                    "restore enqueue"
                } else {
                    "restore"
                },
                f(d, "restore_per_pass_us"),
                f(d, "core_and_callbacks_per_pass_us"),
                d["meets_target"],
                d["meets_issue15_target"]
            ),
            ("tiers", None) => println!(
                "{:<22} snapshot {:>8.1} GB/s ({:>4.0}%)  restore {:>8.1} GB/s ({:>4.0}%)  warm-up {:.2} s",
                r.name,
                f(d, "snapshot_gbps"),
                100.0 * f(d, "snapshot_of_ceiling"),
                f(d, "restore_gbps"),
                100.0 * f(d, "restore_of_ceiling"),
                f(d, "warmup_wall_s")
            ),
            ("dirty", None) => println!(
                "{:<22} restore {:>9.3} ms/pass  per pass {:>9.3} ms  restored {:>9.1} MiB/pass  compared {:>9.1} MiB total",
                r.name,
                f(d, "restore_per_pass_ms"),
                f(d, "per_pass_ms"),
                f(d, "restored_per_pass_bytes") / (1 << 20) as f64,
                f(d, "compared_bytes") / (1 << 20) as f64
            ),
            ("pass38", None) => println!(
                "{:<34} {:<9} steady {:>8.3} s  snap {:>7.3} s  restore {:>8.3} ms/pass  pool warm-up +{:>7.3} s  tiers d/p/h {:.1}/{:.1}/{:.1} GiB",
                r.name,
                d["outcome"].as_str().unwrap_or("?"),
                f(d, "wall_s"),
                f(d, "snap_s"),
                f(d, "restore_per_pass_ms"),
                f(d, "pool_warmup_s"),
                d["tier_bytes"]["device"].as_f64().unwrap_or(0.0) / GIB as f64,
                d["tier_bytes"]["pinned"].as_f64().unwrap_or(0.0) / GIB as f64,
                d["tier_bytes"]["pageable"].as_f64().unwrap_or(0.0) / GIB as f64,
            ),
            ("pooled", None) => println!("{}", pooled::table_line(&r.name, d)),
            ("defaults", None) => println!(
                "{:<18} {:<9} {}+{:<6} first dispatch {:>8.3} s (snap {:>7.3} s)  steady {:>8.3} s  per pass {:>8.3} ms  compared {:>8.1} GiB",
                r.name,
                d["outcome"].as_str().unwrap_or("?"),
                d["scope"].as_str().unwrap_or("?"),
                d["restore"].as_str().unwrap_or("?"),
                f(d, "first_dispatch_s"),
                d["first"]["snap_s"].as_f64().unwrap_or(f64::NAN),
                f(d, "steady_s"),
                f(d, "per_pass_ms"),
                f(d, "compared_bytes") / GIB as f64,
            ),
            ("pinning", None) => {
                if let Some(m) = d.as_object() {
                    for (k, v) in m {
                        println!(
                            "pinning {:<8} {k:<22} {:>8.2} s  {:>6.2} GB/s",
                            r.name,
                            f(v, "seconds"),
                            f(v, "gbps")
                        );
                    }
                }
            }
            ("ncu", None) => println!(
                "{:<20} app {:>7.2} s  under ncu {:>8.2} s (exit {})  ncu cost {:>8.2} s  passes {}  {}",
                r.name,
                f(d, "app_s"),
                f(d, "ncu_s"),
                d["ncu_exit"],
                f(d, "ncu_cost_s"),
                d["scan"]["passes"],
                d.get("error").and_then(Value::as_str).unwrap_or("")
            ),
            _ => println!("{:<40} {}", r.name, d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn self_invocation_puts_the_prefix_before_the_bench_arguments() {
        let me = SelfInvocation {
            exe: PathBuf::from("/opt/kreplay"),
            prefix: ["bench", "--backend", "cuda"].map(OsString::from).to_vec(),
        };
        let mut c = me.command();
        c.arg("app");
        assert_eq!(c.get_program(), "/opt/kreplay");
        assert_eq!(
            c.get_args().collect::<Vec<_>>(),
            ["bench", "--backend", "cuda", "app"]
        );
        assert_eq!(me.display(), "/opt/kreplay bench --backend cuda");
        assert_eq!(me.program_name(), "kreplay bench --backend cuda");
        assert!(usage(&me.program_name()).contains("  kreplay bench --backend cuda check"));
        let plain = SelfInvocation::current(&[]);
        assert!(plain.prefix.is_empty());
        assert!(plain.exe.is_absolute() || plain.exe.components().count() > 0);
    }

    #[test]
    fn options() {
        let (m, o, _) = parse(&args("")).unwrap();
        assert_eq!(m, "run");
        assert_eq!(o.alloc_gib, vec![1, 40]);
        let (_, o, _) = parse(&args("--big")).unwrap();
        assert_eq!(o.alloc_gib, vec![1, 40, 100, 120]);
        let (_, o, _) = parse(&args("run --cases pass38,ncu --alloc-gib 100,120 --big --scopes arguments --restores dirty --out x.json")).unwrap();
        assert_eq!(o.alloc_gib, vec![100, 120]);
        assert_eq!(o.cases, vec!["pass38", "ncu"]);
        assert_eq!(o.scopes, vec![Scope::Arguments]);
        assert_eq!(o.restores, vec![RestoreMode::Dirty]);
        assert_eq!(o.out, PathBuf::from("x.json"));
        let (m, o, _) = parse(&args("app --alloc-gib 40 --kernel-mib 16 --layout small")).unwrap();
        assert_eq!(
            (m.as_str(), o.alloc_gib[0], o.kernel_mib[0], o.small_first),
            ("app", 40, 16, true)
        );
        let (m, o, _) = parse(&args("check")).unwrap();
        assert_eq!(
            (m.as_str(), o.cases.clone()),
            ("run", vec!["correctness".to_string()])
        );
        let (m, _, rest) = parse(&args("merge a.json b.json --out all.json")).unwrap();
        assert_eq!(
            (m.as_str(), rest),
            ("merge", vec!["a.json".to_string(), "b.json".to_string()])
        );
        let (_, o, _) = parse(&args("run --cases pooled --alloc-gib 100")).unwrap();
        assert_eq!(
            (o.cases, o.alloc_gib, o.pooled_dispatches),
            (vec!["pooled".to_string()], vec![100], 20)
        );
        assert!(parse(&args("--cases bogus")).is_err());
        let (_, o, _) = parse(&args("--cases defaults --alloc-gib 100 --kernel-mib 16")).unwrap();
        assert_eq!(o.cases, vec!["defaults"]);
        // Scope all with full restore runs at every footprint unless told otherwise.
        assert_eq!(o.skip_all_full_from_gib, u64::MAX);
        assert!(parse(&args("--passes")).is_err());
        assert!(parse(&args("--wat")).is_err());
    }
}
