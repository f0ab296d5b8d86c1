//! `kreplay run`: an unmodified CUDA application under replay (SPEC §9.2, §12).
//!
//! ```text
//! kreplay run [--tool verify|timing|counters] [--passes N] [--metrics LIST] [--set NAME]
//!             [--kernel-include P] [--kernel-exclude P] [--dispatch-range R]
//!             [--out FILE.json|FILE.csv] [--library PATH] -- APP ARGS...
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
//! else next to this executable, in its `deps/`, or in `../lib/`), `KREPLAY_CUDA_BUILTIN`,
//! `KREPLAY_CUDA_PASSES` and `KREPLAY_CUDA_OUT` select the built-in tool, and the filter
//! options become the policy's `KREPLAY_KERNEL_*` variables. The tool itself runs inside the
//! application's process (`replay_cuda::tool`); at its exit it writes one record per dispatch
//! (each with its passes) as JSON, which this command prints as a per-kernel table and
//! copies to `--out` (as JSON, or one CSV row per dispatch and pass). When the report holds
//! counters (member `counters`), the counters' table follows and `--out` gets them instead,
//! in the format its extension names (`.csv`, `.json`, `.db`: `replay_report::write_counters`;
//! an unknown extension is refused before the program starts).
//!
//! `kreplay run --list-sass [--metrics LIST] [--set NAME]` starts no program: it prints the
//! first device's chip and the SASS metrics CUPTI's SASS Metrics API has for it (name, id,
//! description; the names `__sass_` metrics are mapped to), and with a list, its plan (which
//! metric runs in which pass, the SASS pass's API names) as JSON. Exit status 0, 2 for a list
//! that cannot be collected, 1 without CUPTI or a GPU.
//!
//! The exit status is the application's (128 + the signal for one killed by a signal). A
//! program without a usable driver gets one clear line (from the library) and runs untouched;
//! one that never reached the driver gets one line from here.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Options of `kreplay run`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunArgs {
    /// `verify`, `timing` or `counters`.
    pub tool: String,
    /// Passes per dispatch.
    pub passes: u64,
    /// Whether `--passes` was given (the counters tool otherwise asks for its plan's).
    pub passes_given: bool,
    /// `--metrics` (counters), split.
    pub metrics: Vec<String>,
    /// `--set` (counters).
    pub set: Option<String>,
    /// `--kernel-include`.
    pub include: Option<String>,
    /// `--kernel-exclude`.
    pub exclude: Option<String>,
    /// `--dispatch-range`.
    pub range: Option<String>,
    /// `--out`.
    pub out: Option<PathBuf>,
    /// `--library`.
    pub library: Option<PathBuf>,
    /// `--list-sass`: print the chip's SASS metrics (and the list's plan) and start nothing.
    pub list_sass: bool,
    /// The program and its arguments.
    pub app: Vec<String>,
}

/// Usage of `kreplay run`.
pub const USAGE: &str = "usage: kreplay run [--tool verify|timing|counters] [--passes N] [--metrics LIST] \
[--set NAME] [--kernel-include P] [--kernel-exclude P] [--dispatch-range R] [--out FILE.json|FILE.csv] \
[--library PATH] -- APP ARGS...
       kreplay run --list-sass [--metrics LIST] [--set NAME]";

/// Parses the arguments after `run`.
pub fn parse(args: &[String]) -> Result<RunArgs, String> {
    let mut a = RunArgs {
        tool: "verify".into(),
        passes: 3,
        passes_given: false,
        metrics: Vec::new(),
        set: None,
        include: None,
        exclude: None,
        range: None,
        out: None,
        library: None,
        list_sass: false,
        app: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--" {
            a.app = it.cloned().collect();
            break;
        }
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut val = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{key} needs a value"))
        };
        match key {
            "--tool" => {
                a.tool = val()?;
                if !["verify", "timing", "counters"].contains(&a.tool.as_str()) {
                    return Err(format!(
                        "--tool {:?}: expected verify, timing or counters",
                        a.tool
                    ));
                }
            }
            "--passes" => {
                let v = val()?;
                a.passes = v.parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    format!("--passes {v:?}: expected a whole number of at least 1")
                })?;
                a.passes_given = true;
            }
            "--metrics" => {
                let v = val()?;
                let m = replay_cuda::counters::parse_metric_list(&v);
                if m.is_empty() {
                    return Err(format!("--metrics {v:?}: no metric names"));
                }
                a.metrics.extend(m);
            }
            "--set" => {
                let v = val()?;
                if replay_cuda::counters::metric_set(&v).is_none() {
                    let sets: Vec<&str> = replay_cuda::counters::METRIC_SETS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect();
                    return Err(format!("--set {v:?}: expected one of {}", sets.join(", ")));
                }
                a.set = Some(v);
            }
            "--kernel-include" => a.include = Some(val()?),
            "--kernel-exclude" => a.exclude = Some(val()?),
            "--dispatch-range" => a.range = Some(val()?),
            "--out" => a.out = Some(PathBuf::from(val()?)),
            "--library" => a.library = Some(PathBuf::from(val()?)),
            "--list-sass" if inline.is_none() => a.list_sass = true,
            _ if a.app.is_empty() && !arg.starts_with('-') => {
                // No `--`: the program starts here.
                a.app.push(arg.clone());
                a.app.extend(it.by_ref().cloned());
                break;
            }
            _ => return Err(format!("unknown option {arg:?}")),
        }
    }
    if a.list_sass {
        if !a.app.is_empty() {
            return Err("--list-sass starts no program".into());
        }
        return Ok(a);
    }
    if a.app.is_empty() {
        return Err("no program given (after --)".into());
    }
    if a.tool == "counters" {
        if a.metrics.is_empty() && a.set.is_none() {
            return Err("--tool counters needs --metrics LIST or --set NAME".into());
        }
    } else if !a.metrics.is_empty() || a.set.is_some() {
        return Err(format!(
            "--metrics and --set are for --tool counters, not {}",
            a.tool
        ));
    }
    Ok(a)
}

impl RunArgs {
    /// The counters tool's metrics: `--set`'s, then `--metrics`', without repeats.
    pub fn metric_list(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .set
            .as_deref()
            .and_then(replay_cuda::counters::metric_set)
            .unwrap_or_default()
            .iter()
            .map(|s| s.to_string())
            .collect();
        for m in &self.metrics {
            if !all.contains(m) {
                all.push(m.clone());
            }
        }
        all
    }
}

/// `--list-sass`: the first device's chip, its SASS metrics on stdout, and the plan of the
/// list if one is given; the exit status.
fn list_sass(a: &RunArgs) -> u8 {
    use replay_cuda::counters::{plan_for_device, sass_metrics_for_device, CounterError};
    let (chip, list) = match sass_metrics_for_device(0) {
        Ok(l) => l,
        Err(e) => {
            crate::say(format_args!("kreplay run: --list-sass: {e}"));
            return 1;
        }
    };
    let mut text = format!(
        "{chip}: {} SASS metrics
",
        list.len()
    );
    for m in &list {
        text.push_str(&format!(
            "{}	{}	{}
",
            m.name, m.id, m.description
        ));
    }
    if !crate::print_out(text.trim_end()) {
        return 1;
    }
    let names = a.metric_list();
    if names.is_empty() {
        return 0;
    }
    match plan_for_device(0, &names) {
        Ok(plan) => {
            let j = serde_json::to_string_pretty(&plan.summary()).unwrap_or_default();
            if crate::print_out(&j) {
                0
            } else {
                1
            }
        }
        Err(e @ (CounterError::Metrics { .. } | CounterError::Empty)) => {
            crate::say(format_args!("kreplay run: {e}"));
            2
        }
        Err(e) => {
            crate::say(format_args!("kreplay run: --list-sass: {e}"));
            1
        }
    }
}

/// The plan's passes, one line each: the range groups, then the SASS pass.
fn plan_lines(plan: &replay_cuda::counters::MetricPlan) -> Vec<String> {
    let mut lines: Vec<String> = plan
        .groups
        .iter()
        .map(|g| {
            format!(
                "pass {}{}: {}",
                g.first_pass,
                if g.config.passes > 1 {
                    format!("-{}", g.first_pass + g.config.passes - 1)
                } else {
                    String::new()
                },
                g.config.metrics.join(",")
            )
        })
        .collect();
    if let Some(s) = &plan.sass {
        let m: Vec<String> = s
            .metrics
            .iter()
            .map(|m| format!("{} (SASS {})", m.name, m.api_name))
            .collect();
        lines.push(format!("pass {}: {}", s.first_pass, m.join(",")));
    }
    lines
}

/// Compiles the counters tool's list before the program starts: the passes to ask for, or
/// the exit status (2: a metric cannot be collected; 1: no CUPTI or no driver).
/// A set is a convenience over what chips offer: the metrics of `--set` that the chip cannot
/// collect (`bad`) are left out, one line naming them, as long as every one of them came
/// from the set (a metric asked for by name is an error) and some metric remains. `None`:
/// nothing to leave out that way.
fn without_unavailable_set_metrics(
    a: &RunArgs,
    names: &[String],
    chip: &str,
    bad: &[(String, String)],
) -> Option<Vec<String>> {
    let set = a.set.as_deref()?;
    if bad.is_empty() || bad.iter().any(|(m, _)| a.metrics.contains(m)) {
        return None;
    }
    let rest: Vec<String> = names
        .iter()
        .filter(|n| !bad.iter().any(|(m, _)| m == *n))
        .cloned()
        .collect();
    if rest.is_empty() {
        return None;
    }
    crate::say(format_args!(
        "kreplay run: --set {set}: left out, not collectable on {chip}: {}",
        bad.iter()
            .map(|(m, why)| format!("{m} ({why})"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Some(rest)
}

/// Compiles the counters' list for device 0 before the program starts: the passes to ask for
/// and the list to collect (a set's metrics the chip lacks left out), or the exit status.
fn plan_counters(a: &RunArgs) -> Result<(u64, Vec<String>), u8> {
    use replay_cuda::counters::{plan_for_device, CounterError};
    let mut names = a.metric_list();
    let mut planned = plan_for_device(0, &names);
    if let Err(CounterError::Metrics { chip, bad }) = &planned {
        if let Some(rest) = without_unavailable_set_metrics(a, &names, chip, bad) {
            names = rest;
            planned = plan_for_device(0, &names);
        }
    }
    match planned {
        Ok(plan) => {
            let groups = plan_lines(&plan);
            crate::say(format_args!(
                "kreplay run: counters: {} metrics on {} in {} passes (the host API's single configuration: {}); {}",
                names.len(),
                plan.chip,
                plan.passes,
                plan.single_config_passes,
                groups.join("; ")
            ));
            let given = if a.passes_given { a.passes } else { 1 };
            Ok((given.max(u64::from(plan.passes)), names))
        }
        Err(e @ (CounterError::Metrics { .. } | CounterError::Empty)) => {
            crate::say(format_args!("kreplay run: {e}\n{USAGE}"));
            Err(2)
        }
        Err(e) => {
            crate::say(format_args!(
                "kreplay run: counters cannot be collected here: {e}; the program was not started"
            ));
            Err(1)
        }
    }
}

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
    let (passes, metrics) = if a.tool == "counters" {
        match plan_counters(&a) {
            Ok(p) => p,
            Err(code) => return code,
        }
    } else {
        (a.passes, Vec::new())
    };
    let mut cmd = Command::new(&a.app[0]);
    cmd.args(&a.app[1..]);
    let report = std::env::temp_dir().join(format!("kreplay-run-{}.json", std::process::id()));
    match find_library(&a) {
        Some(lib) => {
            let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
            let preload = match std::env::var("LD_PRELOAD") {
                Ok(p) if !p.is_empty() => format!("{}:{p}", lib.display()),
                _ => lib.display().to_string(),
            };
            cmd.env("LD_PRELOAD", preload)
                .env("CUDA_INJECTION64_PATH", &lib)
                .env("KREPLAY_CUDA_BUILTIN", &a.tool)
                .env("KREPLAY_CUDA_PASSES", passes.to_string())
                .env("KREPLAY_CUDA_OUT", &report);
            if a.tool == "counters" {
                cmd.env("KREPLAY_CUDA_METRICS", metrics.join(","));
                if std::env::var_os("KREPLAY_CACHE_CONTROL").is_none()
                    && std::env::var_os("ROCPROFILER_KERNEL_REPLAY_CACHE_CONTROL").is_none()
                {
                    cmd.env("KREPLAY_CACHE_CONTROL", "flush");
                }
            }
            if std::env::var_os("KREPLAY_LOG").is_none() {
                // One outcome line per dispatch is too much for a real program: the table
                // at the end and `--out` have them.
                cmd.env("KREPLAY_LOG", "warn");
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
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => {
            crate::say(format_args!(
                "kreplay run: cannot start {:?}: {e}",
                a.app[0]
            ));
            return 127;
        }
    };
    let code = exit_code(&status);
    match std::fs::read_to_string(&report) {
        Ok(text) => {
            let _ = std::fs::remove_file(&report);
            match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(v) => {
                    crate::say(format_args!("{}", (table(&v)).trim_end()));
                    match replay_report::counters_output(&v, a.out.as_deref()) {
                        Some(Ok(o)) => {
                            crate::say(format_args!("{}", o.table.trim_end()));
                            if let Some(Err(e)) = o.written {
                                crate::say(format_args!("kreplay run: {e}"));
                            }
                        }
                        Some(Err(e)) => crate::say(format_args!("kreplay run: {e}")),
                        None => {
                            if let Some(out) = &a.out {
                                if let Err(e) = write_out(out, &v) {
                                    crate::say(format_args!("kreplay run: cannot write {}: {e}", out.display()));
                                }
                            }
                        }
                    }
                }
                Err(e) => crate::say(format_args!("kreplay run: the library's report is not JSON: {e}")),
            }
        }
        Err(_) => crate::say(format_args!(
            "kreplay run: no replay report: the program made no CUDA launch through the driver (none, or no usable driver); it ran untouched"
        )),
    }
    code
}

/// The counter tool's `--out` must name a format the counters can be written in; checked
/// before the program runs, not after.
fn check_out(a: &RunArgs) -> Result<(), replay_report::ReportError> {
    match &a.out {
        Some(out) if a.tool == "counters" => replay_report::Format::of(out).map(drop),
        _ => Ok(()),
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

fn write_out(path: &Path, v: &serde_json::Value) -> std::io::Result<()> {
    if path.extension().and_then(|e| e.to_str()) == Some("csv") {
        let mut s = String::from(
            "dispatch_id,kernel,outcome,reason,scope,layout,pass,gpu_seconds,inputs_identical,outputs_identical\n",
        );
        for r in v["records"].as_array().into_iter().flatten() {
            let passes = r["pass_gpu_seconds"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let rows = passes.len().max(1);
            for p in 0..rows {
                s.push_str(&format!(
                    "{},\"{}\",{},{},{},{},{},{},{},{}\n",
                    r["dispatch_id"],
                    r["kernel"].as_str().unwrap_or("").replace('"', "\"\""),
                    r["outcome"].as_str().unwrap_or(""),
                    r["reason"].as_str().unwrap_or(""),
                    r["scope"].as_str().unwrap_or(""),
                    r["layout"].as_str().unwrap_or(""),
                    p,
                    passes.get(p).map(|x| x.to_string()).unwrap_or_default(),
                    r["inputs_identical"],
                    r["outputs_identical"],
                ));
            }
        }
        std::fs::write(path, s)
    } else {
        std::fs::write(path, serde_json::to_string_pretty(v).unwrap_or_default())
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

/// The per-kernel table printed at the end.
pub fn table(v: &serde_json::Value) -> String {
    let mut s = format!(
        "\nkreplay run: tool {} with {} passes\n{:<48} {:>6} {:>8} {:>9} {:>9}  {}\n",
        v["tool"].as_str().unwrap_or("?"),
        v["passes"],
        "kernel",
        "seen",
        "replayed",
        "in-diff",
        "out-diff",
        "gpu us/pass min/median/max, not replayed"
    );
    if let Some(k) = v["kernels"].as_object() {
        for (name, row) in k {
            let mut t: Vec<f64> = row["pass_seconds"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_f64())
                .collect();
            let (lo, hi) = (
                t.iter().copied().fold(f64::INFINITY, f64::min),
                t.iter().copied().fold(0.0, f64::max),
            );
            let med = median(&mut t);
            let short: String = name.chars().take(48).collect();
            let times = if t.is_empty() {
                "-".to_string()
            } else {
                format!("{:.1}/{:.1}/{:.1}", lo * 1e6, med * 1e6, hi * 1e6)
            };
            let not: Vec<String> = row["not_replayed"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(r, n)| format!("{r}={n}"))
                .collect();
            s.push_str(&format!(
                "{:<48} {:>6} {:>8} {:>9} {:>9}  {} {}\n",
                short,
                row["dispatches"].as_u64().unwrap_or(0),
                row["replayed"].as_u64().unwrap_or(0),
                row["inputs_differed"].as_u64().unwrap_or(0),
                row["outputs_differed"].as_u64().unwrap_or(0),
                times,
                not.join(" ")
            ));
        }
    }
    let sm = &v["summary"];
    s.push_str(&format!(
        "summary: {}\ninterception: {}\n",
        serde_json::to_string(sm).unwrap_or_default(),
        serde_json::to_string(&v["interception"]).unwrap_or_default()
    ));
    s.push_str(&cupti_line(&v["cupti"]));
    s
}

/// What the CUPTI cross-check found: launches that did not pass through a wrapper, or why
/// it did not run.
fn cupti_line(c: &serde_json::Value) -> String {
    match c["status"].as_str() {
        Some("subscribed") => {
            let outside = c["outside"].as_u64().unwrap_or(0);
            if outside == 0 {
                format!(
                    "cupti: every launch the driver ran passed through a wrapper ({} launch calls seen)\n",
                    c["inside"]
                )
            } else {
                format!(
                    "cupti: {outside} launches did NOT pass through a wrapper (not replayed, not gated): {}\n",
                    serde_json::to_string(&c["outside_by_entry"]).unwrap_or_default()
                )
            }
        }
        Some(status) => format!(
            "cupti: no cross-check ({status}: {}); launches that bypass the wrappers are not counted\n",
            c["detail"].as_str().unwrap_or("")
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_table_reports_the_cupti_cross_check() {
        let v = |c: serde_json::Value| table(&serde_json::json!({ "cupti": c }));
        let t = v(
            serde_json::json!({"status": "subscribed", "inside": 9, "outside": 2,
            "outside_by_entry": {"cuLaunchGrid": 2}}),
        );
        assert!(t.contains("cupti: 2 launches did NOT pass"), "{t}");
        assert!(t.contains("cuLaunchGrid"), "{t}");
        let t = v(serde_json::json!({"status": "subscribed", "inside": 9, "outside": 0}));
        assert!(
            t.contains("every launch the driver ran passed through a wrapper"),
            "{t}"
        );
        let t = v(serde_json::json!({"status": "unavailable", "detail": "no libcupti found"}));
        assert!(
            t.contains("cupti: no cross-check (unavailable: no libcupti found)"),
            "{t}"
        );
    }

    #[test]
    fn the_counter_tools_out_needs_a_known_extension() {
        let mut a = parse(&s(&["--out", "c.xlsx", "--", "app"])).unwrap();
        assert!(check_out(&a).is_ok(), "other tools keep their own --out");
        a.tool = "counters".into();
        let e = check_out(&a).unwrap_err().to_string();
        assert!(
            e.contains("c.xlsx") && e.contains(".csv, .json, .db"),
            "{e}"
        );
        for ok in ["c.csv", "c.json", "c.db"] {
            a.out = Some(PathBuf::from(ok));
            assert!(check_out(&a).is_ok(), "{ok}");
        }
    }

    #[test]
    fn parses_the_counters_options() {
        let a = parse(&s(&[
            "--tool",
            "counters",
            "--set",
            "basic",
            "--metrics",
            "dram__bytes_read.sum, l1tex__t_sectors.sum",
            "--",
            "app",
        ]))
        .unwrap();
        let m = a.metric_list();
        assert_eq!(m[0], "launch__grid_size");
        assert_eq!(m.iter().filter(|x| *x == "dram__bytes_read.sum").count(), 1);
        assert_eq!(m.last().unwrap(), "l1tex__t_sectors.sum");
        let e = parse(&s(&["--tool", "counters", "--", "app"])).unwrap_err();
        assert!(e.contains("needs --metrics LIST or --set NAME"), "{e}");
        let e = parse(&s(&["--tool", "counters", "--set", "all", "--", "app"])).unwrap_err();
        assert!(e.contains("expected one of basic"), "{e}");
        let e = parse(&s(&["--metrics", "a.sum", "--", "app"])).unwrap_err();
        assert!(e.contains("for --tool counters, not verify"), "{e}");
        assert!(parse(&s(&["--tool", "counters", "--metrics", " , ", "--", "app"])).is_err());
    }

    #[test]
    fn a_sets_metrics_the_chip_lacks_are_left_out_and_named_ones_are_not() {
        let ffma = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum";
        let bad = vec![(
            ffma.to_string(),
            "not among the chip's SASS metrics".to_string(),
        )];
        let set = parse(&s(&["--tool", "counters", "--set", "basic", "--", "app"])).unwrap();
        let names = set.metric_list();
        let rest = without_unavailable_set_metrics(&set, &names, "GH100", &bad).unwrap();
        assert_eq!(rest.len(), names.len() - 1);
        assert!(!rest.iter().any(|m| m == ffma));
        // Asked for by name (too): an error, as without a set.
        let named = parse(&s(&[
            "--tool",
            "counters",
            "--set",
            "basic",
            "--metrics",
            ffma,
            "--",
            "app",
        ]))
        .unwrap();
        let names = named.metric_list();
        assert_eq!(
            without_unavailable_set_metrics(&named, &names, "GH100", &bad),
            None
        );
        let list = parse(&s(&["--tool", "counters", "--metrics", ffma, "--", "app"])).unwrap();
        assert_eq!(
            without_unavailable_set_metrics(&list, &list.metric_list(), "GH100", &bad),
            None
        );
        // Nothing would remain: an error.
        let all_bad: Vec<(String, String)> = set
            .metric_list()
            .into_iter()
            .map(|m| (m, "no".to_string()))
            .collect();
        assert_eq!(
            without_unavailable_set_metrics(&set, &set.metric_list(), "GH100", &all_bad),
            None
        );
    }

    #[test]
    fn list_sass_starts_no_program_and_a_mixed_list_parses() {
        let a = parse(&s(&["--list-sass"])).unwrap();
        assert!(a.list_sass && a.app.is_empty());
        let a = parse(&s(&[
            "--list-sass",
            "--metrics",
            "smsp__inst_executed.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
        ]))
        .unwrap();
        assert_eq!(a.metric_list().len(), 2);
        let e = parse(&s(&["--list-sass", "--", "app"])).unwrap_err();
        assert!(e.contains("starts no program"), "{e}");
        assert!(parse(&s(&["--list-sass=1"])).is_err());
        // A mixed list (range and SASS metrics) is one --metrics list.
        let a = parse(&s(&[
            "--tool",
            "counters",
            "--metrics",
            "dram__bytes_read.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "--",
            "app",
        ]))
        .unwrap();
        assert_eq!(
            a.metric_list(),
            s(&[
                "dram__bytes_read.sum",
                "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
            ])
        );
        // Without CUPTI (CI) the listing is one line and status 1.
        if replay_cuda::counters::CuptiProfiler::global().is_err() {
            assert_eq!(list_sass(&parse(&s(&["--list-sass"])).unwrap()), 1);
        }
    }

    #[test]
    fn the_plan_lines_name_the_sass_pass_and_its_api_metrics_after_the_range_groups() {
        use replay_cuda::counters::{
            Config, Group, MetricPlan, Rollup, SassGranularity, SassGroup, SassMetric,
        };
        let plan = MetricPlan {
            chip: "GH100".into(),
            metrics: Vec::new(),
            launch: Vec::new(),
            groups: vec![Group {
                config: Config {
                    metrics: s(&["dram__bytes_read.sum"]),
                    image: Vec::new(),
                    passes: 2,
                    handle: 0,
                },
                first_pass: 0,
            }],
            sass: Some(SassGroup {
                first_pass: 2,
                metrics: vec![SassMetric {
                    name: "sm__sass_thread_inst_executed_op_ffma_pred_on.sum".into(),
                    api_name: "smsp__sass_thread_inst_executed_op_ffma_pred_on".into(),
                    id: 7,
                    rollup: Rollup::Sum,
                }],
                granularity: SassGranularity::Gpu,
                sentinel: None,
            }),
            passes: 3,
            single_config_passes: 2,
        };
        assert_eq!(
            plan_lines(&plan),
            s(&[
                "pass 0-1: dram__bytes_read.sum",
                "pass 2: sm__sass_thread_inst_executed_op_ffma_pred_on.sum (SASS smsp__sass_thread_inst_executed_op_ffma_pred_on)"
            ])
        );
    }

    /// Runs `kreplay run --tool counters --metrics METRICS -- sh -c 'touch MARKER'` in a
    /// fresh directory named after `tag`: the exit status and whether the program started.
    fn run_counters_touching_a_marker(tag: &str, metrics: &str) -> (u8, bool) {
        let dir = std::env::temp_dir().join(format!("kreplay-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("started");
        let code = main(&s(&[
            "--tool",
            "counters",
            "--metrics",
            metrics,
            "--",
            "sh",
            "-c",
            &format!("touch {}", marker.display()),
        ]));
        let started = marker.exists();
        let _ = std::fs::remove_dir_all(&dir);
        (code, started)
    }

    #[test]
    fn a_mixed_counter_list_is_compiled_before_the_program_starts() {
        // A SASS metric an H200 has (GH100's SASS Metrics API has no per-opcode thread counts).
        let (code, started) = run_counters_touching_a_marker(
            "mixed",
            "smsp__inst_executed.sum,smsp__sass_inst_executed.sum",
        );
        // Here (no GPU) CUPTI or the driver is missing: 1 and no start; with them the list
        // compiles (a range group and the SASS pass) and the program runs.
        match code {
            1 => assert!(!started, "the program must not start"),
            0 => assert!(started),
            c => panic!("exit status {c}: the list was refused"),
        }
    }

    #[test]
    fn a_counter_list_that_cannot_be_compiled_never_starts_the_program() {
        let (code, started) = run_counters_touching_a_marker("counters", "no__such_metric.sum");
        // Here (no GPU) CUPTI or the driver is missing: 1; with them the metric is unknown: 2.
        assert!(code == 1 || code == 2, "{code}");
        assert!(!started, "the program must not start");
    }

    #[test]
    fn parses_options_and_program() {
        let a = parse(&s(&[
            "--tool",
            "timing",
            "--passes=5",
            "--out",
            "r.csv",
            "--",
            "app",
            "-x",
        ]))
        .unwrap();
        assert_eq!(a.tool, "timing");
        assert_eq!(a.passes, 5);
        assert_eq!(a.out, Some(PathBuf::from("r.csv")));
        assert_eq!(a.app, s(&["app", "-x"]));
        assert!(parse(&s(&["--tool", "nonsense", "--", "app"])).is_err());
        assert!(parse(&s(&["--passes", "0", "--", "app"])).is_err());
        assert!(parse(&s(&["--tool", "verify"])).is_err());
    }
}
