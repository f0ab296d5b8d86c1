//! The peer: Nsight Compute's kernel replay on the same dispatch. `PROG app` (see
//! [`super::SelfInvocation`]) allocates
//! the footprint and runs the kernel once without replay; the bench times it alone and under
//! `ncu --replay-mode kernel --set full --clock-control none -k regex:kr_rmw -c 1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use super::common::{progress, Row, GIB, MIB};

/// Where `ncu` is: `--ncu PATH`, else PATH, then the CUDA installations' `bin`
/// (`replay_cuda::module::cuda_install_dirs`).
pub fn find_ncu(explicit: Option<&str>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(replay_cuda::module::cuda_install_dirs("bin"));
    dirs.into_iter()
        .map(|d| d.join("ncu"))
        .find(|p| p.is_file())
}

/// Runs `cmd` with a deadline; output goes to `log`. Returns (seconds, exit code or None on
/// timeout).
fn run_timed(
    mut cmd: Command,
    log: &Path,
    timeout: Duration,
) -> Result<(f64, Option<i32>), String> {
    let f = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let f2 = f.try_clone().map_err(|e| e.to_string())?;
    cmd.stdout(Stdio::from(f))
        .stderr(Stdio::from(f2))
        .stdin(Stdio::null());
    let t = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
    loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) => return Ok((t.elapsed().as_secs_f64(), status.code())),
            None if t.elapsed() > timeout => {
                // Only the child we started, by its own handle.
                let _ = child.kill();
                let _ = child.wait();
                return Ok((t.elapsed().as_secs_f64(), None));
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// What ncu printed that matters.
fn scan_log(log: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let passes = text
        .lines()
        .filter_map(|l| {
            let i = l.find(" passes")?;
            let head = &l[..i];
            let start = head
                .rfind(|c: char| !c.is_ascii_digit())
                .map_or(0, |p| p + 1);
            head[start..].parse::<u64>().ok()
        })
        .next_back();
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("==ERROR=="))
        .take(5)
        .collect();
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("==WARNING=="))
        .take(5)
        .collect();
    let app: Vec<&str> = text.lines().filter(|l| l.starts_with("app:")).collect();
    json!({ "passes": passes, "errors": errors, "warnings": warnings, "app_lines": app })
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    rows: &mut Vec<Row>,
    ncu: Option<&str>,
    alloc_gib: &[u64],
    kernel_mib: &[u64],
    small_first: bool,
    buffers: u64,
    out_dir: &Path,
    timeout: Duration,
    me: &super::SelfInvocation,
) {
    let Some(ncu) = find_ncu(ncu) else {
        progress("ncu: not found (PATH, $CUDA_HOME/bin, /usr/local/cuda*/bin); skipped");
        rows.push(Row::measure("ncu", "not_found", json!({ "found": false })));
        return;
    };
    progress(&format!("ncu: {}", ncu.display()));
    for &gib in alloc_gib {
        for &kmib in kernel_mib {
            let name = format!("{gib}gib/{kmib}mib");
            let app_args = |c: &mut Command| {
                c.arg("app")
                    .arg("--alloc-gib")
                    .arg(gib.to_string())
                    .arg("--kernel-mib")
                    .arg(kmib.to_string())
                    .arg("--buffers")
                    .arg(buffers.to_string());
                if small_first {
                    c.arg("--layout").arg("small");
                }
            };
            let base_log = out_dir.join(format!("app-{gib}gib-{kmib}mib.log"));
            let mut c = me.command();
            app_args(&mut c);
            progress(&format!("ncu {name}: the app alone"));
            let base = run_timed(c, &base_log, timeout);
            let ncu_log = out_dir.join(format!("ncu-{gib}gib-{kmib}mib.log"));
            let mut c = Command::new(&ncu);
            c.args([
                "--replay-mode",
                "kernel",
                "--set",
                "full",
                "--clock-control",
                "none",
                "-k",
                "regex:kr_rmw",
                "-c",
                "1",
            ])
            .arg(&me.exe)
            .args(&me.prefix);
            app_args(&mut c);
            let cmdline = format!(
                "{} --replay-mode kernel --set full --clock-control none -k regex:kr_rmw -c 1 {} app --alloc-gib {gib} --kernel-mib {kmib} --buffers {buffers}{}",
                // Names, not paths: the command is recorded in results that get committed.
                ncu.file_name().unwrap_or(ncu.as_os_str()).to_string_lossy(),
                me.program_name(),
                if small_first { " --layout small" } else { "" }
            );
            progress(&format!("ncu {name}: {cmdline}"));
            let prof = run_timed(c, &ncu_log, timeout);
            let data = match (base, prof) {
                (Ok((bs, bc)), Ok((ps, pc))) => {
                    let scan = scan_log(&ncu_log);
                    let ok = pc == Some(0) && scan["errors"].as_array().is_none_or(Vec::is_empty);
                    progress(&format!(
                        "ncu {name}: app {bs:.2} s (exit {bc:?}), under ncu {ps:.2} s (exit {pc:?}), ncu's cost {:.2} s, passes {}",
                        ps - bs,
                        scan["passes"]
                    ));
                    json!({
                        "alloc_gib": gib,
                        "kernel_mib": kmib,
                        "app_s": bs,
                        "app_exit": bc,
                        "ncu_s": ps,
                        "ncu_exit": pc,
                        "timed_out": pc.is_none(),
                        "ncu_cost_s": ps - bs,
                        "profiled": ok,
                        "scan": scan,
                        "command": cmdline,
                        "log": ncu_log
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned()),
                    })
                }
                (b, p) => json!({ "error": format!("app: {b:?}; ncu: {p:?}") }),
            };
            rows.push(Row::measure("ncu", name, data));
        }
    }
}

/// `PROG app`: allocate `alloc_gib` in `buffers` buffers, fill them, run kr_rmw once over
/// `kernel_mib` of the first, wait, free. No replay service.
pub fn app(device: i32, alloc_gib: u64, kernel_mib: u64, buffers: u64, small_first: bool) -> i32 {
    use replay_cuda::{BackendConfig, CudaBackend};
    let t = Instant::now();
    let backend = match CudaBackend::new(
        device,
        std::sync::Arc::new(replay_memory::Tracker::new()),
        BackendConfig::default(),
    ) {
        Ok(b) => std::sync::Arc::new(b),
        Err(e) => {
            eprintln!("app: {e}");
            return 2;
        }
    };
    let bench = match super::common::Bench::new(backend) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("app: {e}");
            return 2;
        }
    };
    let kbytes = kernel_mib * MIB;
    let sizes = super::perf::layout(alloc_gib * GIB, kbytes, small_first, buffers);
    let mut bufs = Vec::new();
    for s in sizes {
        match bench.alloc(s) {
            Ok(a) => bufs.push(a),
            Err(e) => {
                eprintln!("app: {e}");
                return 3;
            }
        }
    }
    let setup = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for (i, a) in bufs.iter().enumerate() {
        if let Err(e) = bench.fill(a, 100 + i as u64) {
            eprintln!("app: fill: {e}");
            return 4;
        }
    }
    if let Err(e) = bench.sync() {
        eprintln!("app: {e}");
        return 4;
    }
    let fill = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let words = kbytes.min(bufs[0].len()) / 8;
    if let Err(e) = bench
        .rmw_plain(bufs[0].ptr(), words, 11)
        .and_then(|()| bench.sync())
    {
        eprintln!("app: kernel: {e}");
        return 5;
    }
    let kernel = t.elapsed().as_secs_f64();
    println!(
        "app: alloc {alloc_gib} GiB in {} buffers, kernel {kernel_mib} MiB: setup {setup:.3} s, fill {fill:.3} s, kernel (with any profiler) {kernel:.3} s",
        bufs.len()
    );
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_ncu_output() {
        let dir = std::env::temp_dir().join(format!("cuda_bench_scan_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("ncu.log");
        std::fs::write(
            &log,
            "==PROF== Connected to process 123\n\
             ==PROF== Profiling \"kr_rmw\": 0%....50%....100% - 38 passes\n\
             ==WARNING== Backing up device memory in system memory.\n\
             app: alloc 100 GiB in 4 buffers\n",
        )
        .unwrap();
        let v = scan_log(&log);
        assert_eq!(v["passes"], 38);
        assert_eq!(v["warnings"].as_array().unwrap().len(), 1);
        assert!(v["errors"].as_array().unwrap().is_empty());
        assert_eq!(v["app_lines"].as_array().unwrap().len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
