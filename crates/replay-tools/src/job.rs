//! The process's place in a job (SPEC §12 "Jobs"), whatever the backend: its rank, whether it
//! replays (`KREPLAY_RANKS`), where it streams its records and writes its report
//! (`KREPLAY_CUDA_OUT_DIR`: the name the CUDA backend gave it first, kept for every backend).
//!
//! Under `kreplay run` every process of the program (a `torchrun` job's workers, an `mpirun`'s
//! ranks) writes files of its own, named after its pid, in the folder `KREPLAY_CUDA_OUT_DIR`
//! names:
//! - `PID.records.jsonl`: a header line (`process`, `rank`, `local_rank`, `host`, `exe`, and
//!   the values of the variables `KREPLAY_CUDA_REPORT_ENV` names), then one JSON line per
//!   dispatch, appended with one `write` as the dispatch's record is made: a process killed
//!   mid-run loses at most the record being made, and no record is kept in memory;
//! - `PID.report.json`: at exit, the report without its records, written to a temporary
//!   file and renamed into place, so a reader never sees a partial one.

use std::io::Write;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::Serialize;

/// Environment variable: the folder each process streams its records and writes its report to.
pub const OUT_DIR_ENV: &str = "KREPLAY_CUDA_OUT_DIR";
/// Environment variable: the ranks that replay (`0,2-3`); the others run untouched.
pub const RANKS_ENV: &str = "KREPLAY_RANKS";
/// Environment variable: names (comma-separated) of variables whose values the records'
/// header keeps (`kreplay run --out` templates' `%q{NAME}`).
pub const REPORT_ENV_ENV: &str = "KREPLAY_CUDA_REPORT_ENV";

/// Variables naming a process's global rank, the first one set wins: PyTorch's launchers,
/// Open MPI, MPICH/PMI, Slurm.
pub const RANK_VARS: &[&str] = &["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"];
/// Variables naming a process's rank on its node.
pub const LOCAL_RANK_VARS: &[&str] = &[
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
];

/// Variables naming how many processes a job has: PyTorch's launchers, Open MPI, MPICH/PMI,
/// Slurm.
pub const WORLD_SIZE_VARS: &[&str] = &[
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
];

/// Launchers whose program is a multi-process job.
pub const LAUNCHERS: &[&str] = &[
    "torchrun",
    "mpirun",
    "mpiexec",
    "srun",
    "deepspeed",
    "accelerate",
    "horovodrun",
    "jsrun",
];

/// Variables that bound how long a collective waits for the slowest rank, with what the
/// program gets when none is set.
pub const COLLECTIVE_TIMEOUT_VARS: &[(&str, &str)] = &[
    (
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
        "PyTorch's NCCL watchdog, default 480 s",
    ),
    (
        "TORCH_NCCL_BLOCKING_WAIT",
        "PyTorch: collectives time out by init_process_group's timeout (default 10 min)",
    ),
    (
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "PyTorch: what a timed-out collective does (default: abort the process)",
    ),
    (
        "NCCL_TIMEOUT",
        "NCCL's own bound where the framework sets none",
    ),
    (
        "NCCL_IB_TIMEOUT",
        "NCCL's InfiniBand retransmission timeout",
    ),
    ("GLOO_TIMEOUT_SECONDS", "gloo collectives"),
];

/// Why a program looks like one rank of several: the launcher it starts (its first word's
/// file name) or a world-size variable above 1. `None` for a single process.
pub fn multi_rank_reason(
    program: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    if let Some(p) = program {
        let name = Path::new(p)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(p);
        if LAUNCHERS.contains(&name) {
            return Some(format!("the program is {name}"));
        }
    }
    WORLD_SIZE_VARS.iter().find_map(|v| {
        let n: u64 = env(v)?.trim().parse().ok()?;
        (n > 1).then(|| format!("{v}={n}"))
    })
}

fn first_number(vars: &[&str], env: &dyn Fn(&str) -> Option<String>) -> Option<u32> {
    vars.iter()
        .find_map(|v| env(v))
        .and_then(|s| s.trim().parse().ok())
}

/// The process's global rank from the launcher's variables, if any.
pub fn rank_from(env: &dyn Fn(&str) -> Option<String>) -> Option<u32> {
    first_number(RANK_VARS, env)
}

/// This process's global rank.
pub fn rank() -> Option<u32> {
    rank_from(&|v| std::env::var(v).ok())
}

/// This process's rank on its node.
pub fn local_rank() -> Option<u32> {
    first_number(LOCAL_RANK_VARS, &|v| std::env::var(v).ok())
}

/// A rank list (`0`, `0,2`, `1-3,8`): inclusive ranges; an error naming the bad part.
pub fn parse_ranks(list: &str) -> Result<Vec<(u32, u32)>, String> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim) {
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("{part:?} is not a rank or a range of ranks (0, 1-3)"))
        };
        let range = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(part)?;
                (n, n)
            }
        };
        if range.0 > range.1 {
            return Err(format!("{part:?}: the range is empty"));
        }
        out.push(range);
    }
    Ok(out)
}

/// Whether a process of rank `rank` replays under the list `ranks` (none: every rank). A
/// process without a rank variable is rank 0, as a launcher-less program is; a list that does
/// not parse selects nothing (it is said once): a bad list never replays where it was not
/// asked for.
pub fn selected(ranks: Option<&str>, rank: Option<u32>) -> bool {
    let Some(list) = ranks else { return true };
    match parse_ranks(list) {
        Ok(r) => {
            let me = rank.unwrap_or(0);
            r.iter().any(|(a, b)| (*a..=*b).contains(&me))
        }
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!("[kernel-replay] {RANKS_ENV}: {e}; this process runs untouched");
            });
            false
        }
    }
}

/// Whether this process replays (`KREPLAY_RANKS` and its rank).
pub fn this_process_selected() -> bool {
    selected(std::env::var(RANKS_ENV).ok().as_deref(), rank())
}

/// The header line of a process's records.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessHeader {
    /// The pid.
    pub process: u32,
    /// The global rank, if a launcher named one.
    pub rank: Option<u32>,
    /// The rank on the node.
    pub local_rank: Option<u32>,
    /// The host name.
    pub host: String,
    /// The executable's file name.
    pub exe: String,
    /// The variables `KREPLAY_CUDA_REPORT_ENV` names, with their values (unset: absent).
    pub env: std::collections::BTreeMap<String, String>,
}

/// This process's header.
pub fn header() -> ProcessHeader {
    let env = std::env::var(REPORT_ENV_ENV)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .filter_map(|n| std::env::var(n).ok().map(|v| (n.to_string(), v)))
        .collect();
    ProcessHeader {
        process: std::process::id(),
        rank: rank(),
        local_rank: local_rank(),
        host: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        exe: std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default(),
        env,
    }
}

/// The folder of the per-process files, if streaming.
pub fn out_dir() -> Option<PathBuf> {
    std::env::var_os(OUT_DIR_ENV)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// The records file of process `pid` in `dir`.
pub fn records_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.records.jsonl"))
}

/// The report file of process `pid` in `dir`.
pub fn report_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.report.json"))
}

struct Stream {
    pid: u32,
    file: std::fs::File,
    records: u64,
    last_dispatch: Option<u64>,
}

static STREAM: Mutex<Option<Stream>> = Mutex::new(None);

/// How many records this process streamed, and the last one's dispatch id.
pub fn streamed() -> (u64, Option<u64>) {
    match &*STREAM.lock() {
        Some(s) if s.pid == std::process::id() => (s.records, s.last_dispatch),
        _ => (0, None),
    }
}

/// Appends `record` (of dispatch `dispatch_id`) to this process's records file, the header
/// first; `false` when not streaming. The line goes out in one `write` on an unbuffered file
/// opened for appending, so it is on disk (in the kernel's hands) when this returns. A forked
/// child gets a file of its own.
pub fn stream_record<T: Serialize>(dispatch_id: u64, record: &T) -> bool {
    let Some(dir) = out_dir() else { return false };
    let pid = std::process::id();
    let mut guard = STREAM.lock();
    if guard.as_ref().is_none_or(|s| s.pid != pid) {
        let path = records_path(&dir, pid);
        let opened = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| {
                let mut line = serde_json::to_vec(&header()).map_err(std::io::Error::other)?;
                line.push(b'\n');
                f.write_all(&line).map(|()| f)
            });
        match opened {
            Ok(file) => {
                *guard = Some(Stream {
                    pid,
                    file,
                    records: 0,
                    last_dispatch: None,
                })
            }
            Err(e) => {
                eprintln!("[kernel-replay] cannot write {}: {e}", path.display());
                return true;
            }
        }
    }
    let Some(s) = guard.as_mut() else { return true };
    let Ok(mut line) = serde_json::to_vec(record) else {
        return true;
    };
    line.push(b'\n');
    if s.file.write_all(&line).is_ok() {
        s.records += 1;
        s.last_dispatch = Some(dispatch_id);
    }
    true
}

/// Writes `text` to `path` through a temporary file beside it and a rename: a reader sees
/// the whole file or none.
pub fn write_atomically(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let r = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// Writes this process's report at its end: under `kreplay run` ([`out_dir`] set) to its
/// report file, without the records and the per-kernel table (they are in the records file)
/// and with the process's header and the count of records streamed; otherwise to `path` when
/// given. Each failure is one line on stderr.
pub fn write_exit_report(mut json: serde_json::Value, path: Option<&Path>) {
    let (path, json) = if let Some(dir) = out_dir() {
        let (records, last) = streamed();
        if let Some(o) = json.as_object_mut() {
            o.remove("records");
            o.remove("kernels");
            o.insert("process".into(), serde_json::json!(header()));
            o.insert("records_written".into(), records.into());
            o.insert("last_dispatch".into(), serde_json::json!(last));
        }
        (report_path(&dir, std::process::id()), json)
    } else if let Some(p) = path {
        (p.to_path_buf(), json)
    } else {
        return;
    };
    if let Err(e) = write_atomically(&path, json.to_string().as_bytes()) {
        eprintln!("[kernel-replay] cannot write {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_come_from_the_launchers_variables_in_order() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |v: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == v)
                    .map(|(_, x)| x.to_string())
            }
        };
        assert_eq!(
            rank_from(&env(&[("RANK", "3"), ("PMI_RANK", "1")])),
            Some(3)
        );
        assert_eq!(rank_from(&env(&[("OMPI_COMM_WORLD_RANK", "5")])), Some(5));
        assert_eq!(rank_from(&env(&[("PMI_RANK", "2")])), Some(2));
        assert_eq!(rank_from(&env(&[("SLURM_PROCID", "7")])), Some(7));
        assert_eq!(rank_from(&env(&[])), None);
    }

    #[test]
    fn a_rank_list_selects_its_ranks_and_a_bad_one_selects_none() {
        assert_eq!(parse_ranks("0,2-3").unwrap(), vec![(0, 0), (2, 3)]);
        assert!(parse_ranks("1,x").unwrap_err().contains("\"x\""));
        assert!(parse_ranks("3-1").unwrap_err().contains("empty"));
        assert!(parse_ranks("").is_err());
        assert!(selected(None, Some(9)));
        assert!(selected(Some("0,2-3"), Some(3)));
        assert!(!selected(Some("0,2-3"), Some(1)));
        // Without a launcher the process is rank 0.
        assert!(selected(Some("0"), None));
        assert!(!selected(Some("1"), None));
        assert!(!selected(Some("nonsense"), Some(0)));
    }

    #[test]
    fn an_atomic_write_leaves_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("kr-job-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("r.json");
        write_atomically(&p, b"{}").unwrap();
        write_atomically(&p, b"{\"a\":1}").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\":1}");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
