//! The end of a run as the user sees it: how each process ended, the per-kernel table and
//! its notes on stderr, and `--out` (the counters' files, or the records as JSON or CSV).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use replay_report::names;

use super::args::{Backend, RunArgs};
use crate::collect::{merge_sum, Collector, KernelRow, Process};
use crate::template::{Subject, Template};

/// The end of the run: how each process ended, the per-kernel table, the counters, `--out`.
pub(super) fn report(a: &RunArgs, passes: u64, col: &Collector, pid: u32, killed: Option<i32>) {
    let signame = killed.map(replay_cuda::signals::name);
    if col.procs.is_empty() {
        match &signame {
            Some(sig) => crate::say(format_args!(
                "kreplay run: the program was killed by {sig} before any dispatch reached the replay tool; no records"
            )),
            None if a.backend() == Backend::Hsa => crate::say(format_args!(
                "kreplay run: no replay report: the program made no dispatch through the HSA runtime (none, or the runtime did not load HSA_TOOLS_LIB); it ran untouched"
            )),
            None => crate::say(format_args!(
                "kreplay run: no replay report: the program made no CUDA launch through the driver (none, or no usable driver); it ran untouched"
            )),
        }
        return;
    }
    let many = col.procs.len() > 1;
    let mut said_killed = false;
    for p in col.procs.values().filter(|p| p.report.is_none()) {
        let upto = p
            .last_dispatch
            .map_or_else(|| "none".into(), |d| format!("dispatch {d}"));
        match &signame {
            Some(sig) if p.pid == pid => {
                said_killed = true;
                crate::say(format_args!(
                    "kreplay run: the program was killed by {sig} after {} launches; records up to {upto}",
                    p.records
                ));
            }
            _ => crate::say(format_args!(
                "kreplay run: {} ended without its report (killed, or it exited without running exit handlers) after {} launches; records up to {upto}",
                if many || p.pid != pid {
                    format!("process {} (rank {})", p.pid, p.rank_text())
                } else {
                    "the program".to_string()
                },
                p.records
            )),
        }
    }
    if let (Some(sig), false) = (&signame, said_killed) {
        crate::say(format_args!("kreplay run: the program was killed by {sig}"));
    }
    let late = collective_lines(col);
    if !late.is_empty() {
        crate::say(format_args!("{}", late.trim_end()));
    }
    crate::say(format_args!("{}", table(a, passes, col).trim_end()));
    let counters: Vec<&Process> = col
        .procs
        .values()
        .filter(|p| {
            p.report
                .as_ref()
                .is_some_and(|r| r.get("counters").is_some())
        })
        .collect();
    let template = a.out_template();
    if !counters.is_empty() {
        counters_report(a, template.as_ref(), &counters);
        return;
    }
    let Some(t) = template else { return };
    // Processes whose names come out equal share a file.
    let mut groups: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for p in col.procs.values() {
        groups.entry(t.key(&subject(p))).or_default().push(p.pid);
    }
    let mut used: Vec<PathBuf> = Vec::new();
    for pids in groups.values() {
        let first = &col.procs[&pids[0]];
        let path = t.expand(&subject(first), &|p| {
            p.exists() || used.iter().any(|u| u == p)
        });
        used.push(path.clone());
        let written = if path.extension().and_then(|e| e.to_str()) == Some("csv") {
            write_csv(&path, col, pids)
        } else {
            write_json(&path, a, passes, col, pids)
        };
        if let Err(e) = written {
            crate::say(format_args!(
                "kreplay run: cannot write {}: {e}",
                path.display()
            ));
        }
    }
}

/// The counters of the processes that collected them, merged with each one's process and
/// rank (`CounterReport::merge`, as the records' outputs have them): one table of them all (a
/// block per rank and kernel when several), and `--out`: the processes whose names the
/// template makes equal share a file, a merged report with process and rank columns.
fn counters_report(a: &RunArgs, t: Option<&Template>, procs: &[&Process]) {
    use replay_report::CounterReport;
    let mut parts: Vec<(&Process, CounterReport)> = Vec::new();
    for p in procs {
        let Some(r) = &p.report else { continue };
        match replay_report::from_tool_report(r) {
            Some(Ok(c)) => parts.push((p, c)),
            Some(Err(e)) => crate::say(format_args!(
                "kreplay run: process {} (rank {}): {e}",
                p.pid,
                p.rank_text()
            )),
            None => {}
        }
    }
    let rank = |p: &Process| p.rank().and_then(|r| u32::try_from(r).ok());
    let merge = |of: &[usize]| {
        CounterReport::merge(
            of.iter()
                .map(|i| (parts[*i].1.clone(), rank(parts[*i].0)))
                .collect(),
        )
    };
    let every: Vec<usize> = (0..parts.len()).collect();
    match merge(&every) {
        Ok(all) => crate::say(format_args!("{}", replay_report::table(&all).trim_end())),
        Err(e) => crate::say(format_args!("kreplay run: {e}")),
    }
    let Some(t) = t else { return };
    if parts.len() > 1 && !t.per_process() {
        crate::say(format_args!(
            "kreplay run: {} processes collected counters: they share the file, merged with process and rank columns (%p or %q{{RANK}} in --out gives each its own)",
            parts.len()
        ));
    }
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, (p, _)) in parts.iter().enumerate() {
        groups.entry(t.key(&subject(p))).or_default().push(i);
    }
    let mut used: Vec<PathBuf> = Vec::new();
    for group in groups.values() {
        let path = t.expand(&subject(parts[group[0]].0), &|p| {
            p.exists() || used.iter().any(|u| u == p)
        });
        used.push(path.clone());
        let written = merge(group)
            .map_err(replay_report::ReportError::from)
            .and_then(|m| write_counters_file(a, &m, &path));
        if let Err(e) = written {
            crate::say(format_args!("kreplay run: {e}"));
        }
    }
}

/// Writes `report` to `path` in the format its extension names: with sections asked (`--set
/// full`, `--section X`), a `.csv` and an `.html` get their rows under Nsight Compute's
/// display names (`replay_cuda::counters::display`), then the raw metrics.
pub(super) fn write_counters_file(
    a: &RunArgs,
    report: &replay_report::CounterReport,
    path: &Path,
) -> Result<replay_report::Format, replay_report::ReportError> {
    let resolved = a.resolved_sections();
    let rows = (!resolved.sections.is_empty())
        .then(|| replay_cuda::counters::display::section_rows(report, &resolved.sections));
    replay_report::write_counters_with(path, report, rows.as_ref())
}

/// The counters' table and `--out` of one process's own report (not merged).
#[cfg(test)]
pub(super) fn counters_output(
    a: &RunArgs,
    tool_report: &serde_json::Value,
    out: Option<&Path>,
) -> Option<Result<replay_report::RunOutput, replay_report::ReportError>> {
    let report = match replay_report::from_tool_report(tool_report)? {
        Ok(r) => r,
        Err(e) => return Some(Err(e)),
    };
    Some(Ok(replay_report::RunOutput {
        table: replay_report::table(&report),
        written: out.map(|p| write_counters_file(a, &report, p)),
    }))
}

/// The template's subject for process `p`.
fn subject(p: &Process) -> Subject {
    let names: Vec<String> = p.header["env"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    Subject {
        pid: p.pid,
        host: p.info("host").unwrap_or_else(hostname),
        rank: p.rank(),
        env: names.iter().map(|n| (n.clone(), p.env(n))).collect(),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The `member` of the reports of `pids`, summed.
fn merged(col: &Collector, pids: &[u32], member: &str) -> serde_json::Value {
    let mut v = serde_json::Value::Null;
    for p in pids {
        if let Some(r) = &col.procs[p].report {
            merge_sum(&mut v, &r[member]);
        }
    }
    v
}

/// The processes of `pids`, for the outputs.
fn process_rows(col: &Collector, pids: &[u32]) -> Vec<serde_json::Value> {
    pids.iter()
        .map(|pid| {
            let p = &col.procs[pid];
            let r = p.report.as_ref();
            serde_json::json!({
                "process": p.pid,
                "rank": p.rank(),
                "local_rank": p.header["local_rank"],
                "host": p.info("host"),
                "exe": p.info("exe"),
                "records": p.records,
                "last_dispatch": p.last_dispatch,
                "report": r.is_some(),
                "summary": r.map(|r| r["summary"].clone()),
                "interception": r.map(|r| r["interception"].clone()),
                "cupti": r.map(|r| r["cupti"].clone()),
            })
        })
        .collect()
}

/// Writes what `body` writes through a temporary file beside `path` and a rename.
fn atomically(
    path: &Path,
    body: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let r = std::fs::File::create(&tmp)
        .and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            body(&mut w)?;
            std::io::Write::flush(&mut w)
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// The JSON output of the processes `pids`: their reports' summaries summed, the processes,
/// the kernels (merged by name), then every record with its process and rank, streamed from
/// the records files.
fn write_json(
    path: &Path,
    a: &RunArgs,
    passes: u64,
    col: &Collector,
    pids: &[u32],
) -> std::io::Result<()> {
    let mut kernels: BTreeMap<String, KernelRow> = BTreeMap::new();
    for pid in pids {
        for (name, row) in &col.procs[pid].kernels {
            kernels.entry(name.clone()).or_default().merge(row);
        }
    }
    let head = serde_json::json!({
        "tool": a.tool,
        "passes": passes,
        "processes": process_rows(col, pids),
        "summary": merged(col, pids, "summary"),
        "interception": merged(col, pids, "interception"),
        "cupti": merged(col, pids, "cupti"),
        "kernels": kernels.iter().map(|(k, r)| (k.clone(), r.for_json())).collect::<BTreeMap<_, _>>(),
    });
    let head = serde_json::to_string(&head).map_err(std::io::Error::other)?;
    atomically(path, |w| {
        w.write_all(&head.as_bytes()[..head.len() - 1])?;
        w.write_all(b",\"records\":[")?;
        let mut first = true;
        for pid in pids {
            let rank = col.procs[pid].rank();
            col.for_each_record(*pid, |mut r| {
                if let Some(o) = r.as_object_mut() {
                    o.insert("process".into(), (*pid).into());
                    o.insert("rank".into(), serde_json::json!(rank));
                }
                if !first {
                    w.write_all(b",")?;
                }
                first = false;
                serde_json::to_writer(&mut *w, &r).map_err(std::io::Error::other)
            })?;
        }
        w.write_all(b"]}")
    })
}

/// The CSV output: one row per dispatch and pass, with its process and rank; the kernel
/// named as Nsight Compute names it.
fn write_csv(path: &Path, col: &Collector, pids: &[u32]) -> std::io::Result<()> {
    atomically(path, |w| {
        w.write_all(b"process,rank,dispatch_id,kernel,outcome,reason,scope,layout,pass,gpu_seconds,inputs_identical,outputs_identical,graph,node,launch_seconds,wait_seconds,window_seconds\n")?;
        for pid in pids {
            let rank = col.procs[pid]
                .rank()
                .map(|r| r.to_string())
                .unwrap_or_default();
            col.for_each_record(*pid, |r| {
                let passes = r["pass_gpu_seconds"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let kernel =
                    names::ncu_demangled(r["kernel"].as_str().unwrap_or("")).replace('"', "\"\"");
                let per = |k: &str, p: usize| {
                    r[k].get(p)
                        .and_then(serde_json::Value::as_f64)
                        .map(|x| x.to_string())
                        .unwrap_or_default()
                };
                for p in 0..passes.len().max(1) {
                    writeln!(
                        w,
                        "{pid},{rank},{},\"{kernel}\",{},{},{},{},{},{},{},{},{},{},{},{},{}",
                        r["dispatch_id"],
                        r["outcome"].as_str().unwrap_or(""),
                        r["reason"].as_str().unwrap_or(""),
                        r["scope"].as_str().unwrap_or(""),
                        r["layout"].as_str().unwrap_or(""),
                        p,
                        passes.get(p).map(|x| x.to_string()).unwrap_or_default(),
                        r["inputs_identical"],
                        r["outputs_identical"],
                        r["graph"]
                            .as_u64()
                            .map(|g| g.to_string())
                            .unwrap_or_default(),
                        r["node"]
                            .as_u64()
                            .map(|n| n.to_string())
                            .unwrap_or_default(),
                        per("pass_launch_seconds", p),
                        per("pass_wait_seconds", p),
                        r["phases"]["window"].as_f64().unwrap_or(0.0),
                    )?;
                }
                Ok(())
            })?;
        }
        Ok(())
    })
}

/// The per-kernel table printed at the end: one row per process and kernel, the kernel by
/// its short name (Nsight Compute's function name, longer only where two kernels would read
/// the same; the outputs have the full names).
fn table(a: &RunArgs, passes: u64, col: &Collector) -> String {
    let short = names::short_names(
        col.procs
            .values()
            .flat_map(|p| p.kernels.keys().map(String::as_str)),
    );
    let w = short
        .values()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    let mut s = format!(
        "\nkreplay run: tool {} with {passes} passes{}\n{:>5} {:>8} {:<w$} {:>6} {:>8} {:>9} {:>9}  {}\n",
        a.tool,
        if col.procs.len() > 1 {
            format!(", {} processes", col.procs.len())
        } else {
            String::new()
        },
        "rank",
        "pid",
        "kernel",
        "seen",
        "replayed",
        "in-diff",
        "out-diff",
        "gpu us/pass min/median/max, not replayed"
    );
    for p in col.procs.values() {
        for (name, row) in &p.kernels {
            let times = match row.sample().min_median_max() {
                None => "-".to_string(),
                Some((lo, med, hi)) => format!("{:.1}/{:.1}/{:.1}", lo * 1e6, med * 1e6, hi * 1e6),
            };
            let not: Vec<String> = row
                .not_replayed
                .iter()
                .map(|(r, n)| format!("{r}={n}"))
                .collect();
            s.push_str(&format!(
                "{:>5} {:>8} {:<w$} {:>6} {:>8} {:>9} {:>9}  {} {}\n",
                p.rank_text(),
                p.pid,
                short.get(name).map(String::as_str).unwrap_or(name),
                row.dispatches,
                row.replayed,
                row.inputs_differed,
                row.outputs_differed,
                times,
                not.join(" ")
            ));
        }
    }
    let pids: Vec<u32> = col.procs.keys().copied().collect();
    s.push_str(&format!(
        "summary: {}\n",
        serde_json::to_string(&merged(col, &pids, "summary")).unwrap_or_default()
    ));
    // The CUDA interception's counts (the HSA backend has none).
    let interception = merged(col, &pids, "interception");
    if !interception.is_null() {
        s.push_str(&format!(
            "interception: {}\n",
            serde_json::to_string(&interception).unwrap_or_default()
        ));
    }
    s.push_str(&phase_line(&merged(col, &pids, "summary")));
    s.push_str(&cupti_line(&merged(col, &pids, "cupti")));
    s.push_str(&interception_notes(&merged(col, &pids, "interception")));
    s
}

/// Where the replay windows' time went, from the summary's `phases` (seconds summed over
/// every window): one line, each phase in ms and as a share of the windows' time.
pub(super) fn phase_line(summary: &serde_json::Value) -> String {
    let p = &summary["phases"];
    let window = p["window"].as_f64().unwrap_or(0.0);
    if window <= 0.0 {
        return String::new();
    }
    let parts: Vec<String> = [
        "drain",
        "plan",
        "capture",
        "launch",
        "wait",
        "check",
        "restore",
        "callbacks",
        "finish",
    ]
    .iter()
    .map(|k| {
        let v = p[*k].as_f64().unwrap_or(0.0);
        format!("{k} {:.3} ms ({:.0}%)", v * 1e3, 100.0 * v / window)
    })
    .collect();
    format!("replay time {:.3} ms: {}\n", window * 1e3, parts.join(", "))
}

/// What the user must know of launches the interception ran once without a window: those
/// behind a kernel that waits on the host (an autotuner's timing) and those beside another
/// thread's stream capture.
pub(super) fn interception_notes(i: &serde_json::Value) -> String {
    let mut s = String::new();
    let behind = i["behind_host_wait"].as_u64().unwrap_or(0);
    if behind > 0 {
        s.push_str(&format!(
            "note: {behind} launches ran once, untouched, behind a kernel that waits on the host or \
             on peers (XLA's autotuner times its candidates behind such a kernel). An autotuner \
             that times kernels can still choose differently than in a plain run (XLA's does \
             even between plain runs): pin its choices (XLA_FLAGS=--xla_gpu_autotune_level=0, \
             or a persisted autotune cache) when results must match a plain run bit for bit\n"
        ));
    }
    let beside = i["beside_capture"].as_u64().unwrap_or(0);
    if beside > 0 {
        s.push_str(&format!(
            "note: {beside} launches ran once, untouched, beside a stream capture on another \
             thread (no window runs beside a live capture)\n"
        ));
    }
    // Graph launches that ran once, by reason (an unrolled graph's kernels are records).
    if let Some(once) = i["graph_run_once"].as_object() {
        let mut why: Vec<String> = once
            .iter()
            .filter_map(|(k, v)| v.as_u64().filter(|n| *n > 0).map(|n| format!("{k} {n}")))
            .collect();
        if !why.is_empty() {
            why.sort();
            s.push_str(&format!(
                "note: graph launches ran once, untouched: {}\n",
                why.join(", ")
            ));
        }
    }
    s
}

/// What the CUPTI cross-check found: launches that did not pass through a wrapper, or why
/// it did not run.
pub(super) fn cupti_line(c: &serde_json::Value) -> String {
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
        Some("off") => "cupti: no cross-check (off; --check-launches turns it on); launches that bypass the wrappers are not counted\n".to_string(),
        Some(status) => format!(
            "cupti: no cross-check ({status}: {}); launches that bypass the wrappers are not counted\n",
            c["detail"].as_str().unwrap_or("")
        ),
        None => String::new(),
    }
}

/// The warnings each process gave while it ran of its replay time against the collective
/// timeout in force (`replay_tools::collective`), again at the end: a launcher may have kept
/// the program's stderr in a log of its own. One line per warning, naming the process.
pub(super) fn collective_lines(col: &Collector) -> String {
    let mut s = String::new();
    for p in col.procs.values() {
        let Some(r) = &p.report else { continue };
        let warnings = r["collective_timeout"]["warnings"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for w in warnings.iter().filter_map(|w| w.as_str()) {
            s.push_str(&format!(
                "kreplay run: warning: process {} (rank {}): {w}\n",
                p.pid,
                p.rank_text()
            ));
        }
    }
    s
}
