//! What the processes of one `kreplay run` wrote (SPEC §12): each process's records file,
//! read as it grows, and its report, read at the end (`replay_cuda::job` writes both). Only
//! aggregates are kept (per process and kernel), never every record: the records are read
//! again from the files when an output needs them, so memory stays bounded however long the
//! program runs.

use std::collections::BTreeMap;
use std::io::{BufRead, Seek};
use std::path::{Path, PathBuf};

use serde::Serialize;

/// At most this many pass times are kept per kernel for its median (every k-th beyond).
const SAMPLE_CAP: usize = 4096;

/// Pass times of one kernel: exact count, minimum and maximum, and an evenly thinned
/// sample for the median.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    values: Vec<f64>,
    stride: u64,
    seen: u64,
    min: f64,
    max: f64,
}

impl Sample {
    /// Adds one value.
    pub fn push(&mut self, v: f64) {
        if self.seen == 0 {
            self.min = v;
            self.max = v;
            self.stride = 1;
        }
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        if self.seen % self.stride == 0 {
            if self.values.len() == SAMPLE_CAP {
                // Keep every other one and take every other one from now on.
                let mut i = 0;
                self.values.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride *= 2;
            }
            if self.seen % self.stride == 0 {
                self.values.push(v);
            }
        }
        self.seen += 1;
    }

    /// Values seen.
    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.seen
    }

    /// Minimum, median (of the sample), maximum; `None` when empty.
    pub fn min_median_max(&self) -> Option<(f64, f64, f64)> {
        if self.seen == 0 {
            return None;
        }
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        Some((self.min, v[v.len() / 2], self.max))
    }

    /// The sample's values (all of them up to the cap).
    pub fn values(&self) -> &[f64] {
        &self.values
    }
}

/// One kernel's aggregate in one process.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KernelRow {
    /// Dispatches seen by the tool.
    pub dispatches: u64,
    /// Replayed in full.
    pub replayed: u64,
    /// Declined or truncated, by reason.
    pub not_replayed: BTreeMap<String, u64>,
    /// verify: dispatches whose inputs differed between passes.
    pub inputs_differed: u64,
    /// verify: dispatches whose outputs differed between passes.
    pub outputs_differed: u64,
    /// timing: GPU seconds of the passes (a thinned sample beyond a few thousand).
    pub pass_seconds: Vec<f64>,
    #[serde(skip)]
    sample: Sample,
}

impl KernelRow {
    /// The pass times.
    pub fn sample(&self) -> &Sample {
        &self.sample
    }

    fn add(&mut self, r: &serde_json::Value) {
        self.dispatches += 1;
        let outcome = r["outcome"].as_str().unwrap_or("");
        if outcome == "replayed" {
            self.replayed += 1;
        } else {
            *self
                .not_replayed
                .entry(format!("{outcome}:{}", r["reason"].as_str().unwrap_or("")))
                .or_default() += 1;
        }
        if r["inputs_identical"] == false {
            self.inputs_differed += 1;
        }
        if r["outputs_identical"] == false {
            self.outputs_differed += 1;
        }
        for t in r["pass_gpu_seconds"].as_array().into_iter().flatten() {
            if let Some(t) = t.as_f64() {
                self.sample.push(t);
            }
        }
    }

    /// Adds `other`'s counts and pass times into this row.
    pub fn merge(&mut self, other: &KernelRow) {
        self.dispatches += other.dispatches;
        self.replayed += other.replayed;
        for (k, n) in &other.not_replayed {
            *self.not_replayed.entry(k.clone()).or_default() += n;
        }
        self.inputs_differed += other.inputs_differed;
        self.outputs_differed += other.outputs_differed;
        for v in other.sample.values() {
            self.sample.push(*v);
        }
    }

    /// The row with `pass_seconds` filled from the sample, for JSON.
    pub fn for_json(&self) -> KernelRow {
        let mut r = self.clone();
        r.pass_seconds = self.sample.values().to_vec();
        r
    }
}

/// One process of the program.
#[derive(Debug, Clone, Default)]
pub struct Process {
    /// Its pid.
    pub pid: u32,
    /// The header line of its records (`replay_cuda::job::ProcessHeader`).
    pub header: serde_json::Value,
    /// Records read.
    pub records: u64,
    /// Records of replayed dispatches.
    pub replayed: u64,
    /// The last record's dispatch id.
    pub last_dispatch: Option<u64>,
    /// Its report, when it wrote one (it exited normally).
    pub report: Option<serde_json::Value>,
    /// Its kernels, by full name.
    pub kernels: BTreeMap<String, KernelRow>,
    offset: u64,
}

impl Process {
    /// The global rank, if a launcher named one.
    pub fn rank(&self) -> Option<u64> {
        self.header["rank"]
            .as_u64()
            .or_else(|| self.report.as_ref()?["process"]["rank"].as_u64())
    }

    /// The header's or the report's value of a process member (`host`, `exe`).
    pub fn info(&self, key: &str) -> Option<String> {
        self.header[key]
            .as_str()
            .or_else(|| self.report.as_ref()?["process"][key].as_str())
            .map(str::to_owned)
    }

    /// The value of environment variable `name` in the process (when `kreplay run` asked the
    /// library to keep it).
    pub fn env(&self, name: &str) -> Option<String> {
        self.header["env"][name]
            .as_str()
            .or_else(|| self.report.as_ref()?["process"]["env"][name].as_str())
            .map(str::to_owned)
    }

    /// The rank as text: the number, or `-`.
    pub fn rank_text(&self) -> String {
        self.rank().map_or_else(|| "-".into(), |r| r.to_string())
    }
}

/// The processes' files in one folder.
#[derive(Debug)]
pub struct Collector {
    dir: PathBuf,
    /// The processes, by pid.
    pub procs: BTreeMap<u32, Process>,
}

/// The pid a file of `replay_cuda::job` is named after, and whether it is a records file.
fn file_pid(name: &str) -> Option<(u32, bool)> {
    if let Some(p) = name.strip_suffix(".records.jsonl") {
        return p.parse().ok().map(|p| (p, true));
    }
    name.strip_suffix(".report.json")
        .and_then(|p| p.parse().ok())
        .map(|p| (p, false))
}

impl Collector {
    /// A collector of the files in `dir`.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            procs: BTreeMap::new(),
        }
    }

    /// Dispatches seen and replayed so far, over every process.
    pub fn progress(&self) -> (u64, u64) {
        self.procs
            .values()
            .fold((0, 0), |(s, r), p| (s + p.records, r + p.replayed))
    }

    /// Reads what the records files gained since the last call (complete lines only).
    pub fn poll(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some((pid, true)) = file_pid(&name) {
                let p = self.procs.entry(pid).or_insert_with(|| Process {
                    pid,
                    ..Process::default()
                });
                read_new_lines(&e.path(), p);
            }
        }
    }

    /// The last lines, then every process's report.
    pub fn finish(&mut self) {
        self.poll();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some((pid, false)) = file_pid(&name) {
                let report = std::fs::read_to_string(e.path())
                    .ok()
                    .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
                let p = self.procs.entry(pid).or_insert_with(|| Process {
                    pid,
                    ..Process::default()
                });
                if p.header.is_null() {
                    if let Some(h) = report.as_ref().map(|r| r["process"].clone()) {
                        p.header = h;
                    }
                }
                p.report = report;
            }
        }
    }

    /// The records file of process `pid`.
    pub fn records_path(&self, pid: u32) -> PathBuf {
        self.dir.join(format!("{pid}.records.jsonl"))
    }

    /// Calls `f` with every record of process `pid`, in order, read again from its file.
    pub fn for_each_record(
        &self,
        pid: u32,
        mut f: impl FnMut(serde_json::Value) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let Ok(file) = std::fs::File::open(self.records_path(pid)) else {
            return Ok(());
        };
        let mut lines = std::io::BufReader::new(file).lines();
        let _header = lines.next();
        for line in lines {
            let line = line?;
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                f(v)?;
            }
        }
        Ok(())
    }
}

fn read_new_lines(path: &Path, p: &mut Process) {
    let Ok(mut file) = std::fs::File::open(path) else {
        return;
    };
    if file.seek(std::io::SeekFrom::Start(p.offset)).is_err() {
        return;
    }
    let mut reader = std::io::BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            // A line still being written: read again next time.
            Ok(_) if line.last() != Some(&b'\n') => return,
            Ok(n) => {
                p.offset += n as u64;
                let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line) else {
                    continue;
                };
                if p.header.is_null() && v.get("dispatch_id").is_none() {
                    p.header = v;
                    continue;
                }
                p.records += 1;
                if v["outcome"] == "replayed" {
                    p.replayed += 1;
                }
                p.last_dispatch = v["dispatch_id"].as_u64().or(p.last_dispatch);
                let kernel = v["kernel"].as_str().unwrap_or("").to_owned();
                p.kernels.entry(kernel).or_default().add(&v);
            }
        }
    }
}

/// `a` with `b` added into it: numbers summed, objects merged member by member, anything
/// else kept from `a` (or taken from `b` where `a` has none).
pub fn merge_sum(a: &mut serde_json::Value, b: &serde_json::Value) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in y {
                match x.get_mut(k) {
                    Some(mine) => merge_sum(mine, v),
                    None => {
                        x.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (a @ Value::Number(_), Value::Number(n)) => {
            let sum = match (a.as_u64(), n.as_u64()) {
                (Some(x), Some(y)) => serde_json::json!(x.saturating_add(y)),
                _ => serde_json::json!(a.as_f64().unwrap_or(0.0) + n.as_f64().unwrap_or(0.0)),
            };
            *a = sum;
        }
        (a @ Value::Null, b) => *a = b.clone(),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_stays_bounded_and_keeps_min_and_max_exact() {
        let mut s = Sample::default();
        for i in 0..100_000u32 {
            s.push(f64::from(i));
        }
        assert_eq!(s.count(), 100_000);
        assert!(s.values().len() <= SAMPLE_CAP, "{}", s.values().len());
        let (lo, med, hi) = s.min_median_max().unwrap();
        assert_eq!((lo, hi), (0.0, 99_999.0));
        assert!((med - 50_000.0).abs() < 1_000.0, "{med}");
    }

    #[test]
    fn sums_merge_member_by_member() {
        let mut a = serde_json::json!({"replayed": 2, "x": {"n": 1}, "s": "a"});
        merge_sum(
            &mut a,
            &serde_json::json!({"replayed": 3, "x": {"n": 4, "m": 1}, "s": "b", "t": 1}),
        );
        assert_eq!(
            a,
            serde_json::json!({"replayed": 5, "x": {"n": 5, "m": 1}, "s": "a", "t": 1})
        );
    }

    #[test]
    fn records_are_read_as_they_grow_and_partial_lines_wait() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("kreplay-collect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("41.records.jsonl");
        let mut f = std::fs::File::create(&path).unwrap();
        writeln!(f, "{{\"process\":41,\"rank\":1}}").unwrap();
        writeln!(f, "{{\"dispatch_id\":0,\"kernel\":\"k\",\"outcome\":\"replayed\",\"pass_gpu_seconds\":[1e-6]}}").unwrap();
        write!(f, "{{\"dispatch_id\":1,\"kernel\":\"k\",\"outc").unwrap();
        f.flush().unwrap();
        let mut c = Collector::new(&dir);
        c.poll();
        assert_eq!(c.progress(), (1, 1));
        writeln!(f, "ome\":\"declined\",\"reason\":\"capture\"}}").unwrap();
        c.poll();
        assert_eq!(c.progress(), (2, 1));
        let p = &c.procs[&41];
        assert_eq!(p.rank(), Some(1));
        assert_eq!(p.last_dispatch, Some(1));
        assert_eq!(p.kernels["k"].not_replayed["declined:capture"], 1);
        c.finish();
        assert!(c.procs[&41].report.is_none());
        let mut n = 0;
        c.for_each_record(41, |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
