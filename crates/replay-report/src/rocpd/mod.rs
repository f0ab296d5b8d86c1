//! The SQLite database in rocprofv3's rocpd layout (SPEC §12), schema 3.0.4: the version
//! upstream proposes for kernel replay, whose `rocpd_kernel_dispatch` has a `replay_pass`
//! column and whose `counters_collection` view groups per execution (per pass), never summing
//! a counter across the passes that collected it (`schema.sql`).
//!
//! What goes where:
//! - one `rocpd_kernel_dispatch` row and one `rocpd_event` row per **pass** of each dispatch
//!   (all with the dispatch's `dispatch_id`, `replay_pass` = the pass; the row id is a
//!   surrogate), timed by the pass's `pass_ns` where the report has it, else by the dispatch's
//!   window (`start_ns`..`end_ns`) on every pass;
//! - per-dispatch data the schema has no column for goes in the `extdata` JSON of each of its
//!   `rocpd_kernel_dispatch` rows (the table's own place for it; read it with
//!   `json_extract(extdata, '$.phases.window')` on the rows of `replay_pass` 0):
//!   `grid_blocks`, `context`, `passes`, `snapshot_bytes`, the CUDA
//!   graph, node and graph launch (`graph`, `node`, `graph_launch`; absent outside a graph)
//!   and the replay window's time by phase (`phases`: `{window, drain, plan, capture,
//!   launch, wait, check, restore, callbacks, finish, config_enter}` in seconds, the
//!   drain-to-finish phases adding up to `window`; the same on every pass's row, as one
//!   window holds all passes; absent where the report has none). Each `rocpd_event`'s
//!   `extdata` (the one the `counters_collection` view shows) has `replay_pass` and the graph members;
//! - one `rocpd_pmc_event` row per sample, on the event of the pass that produced it;
//! - one `rocpd_info_pmc` row per metric and agent (`name` = `symbol` = Nsight Compute's
//!   metric name, `units`, `description`, `block` = the name's unit prefix before `__`,
//!   `value_type` `ABS`, the collecting pass in `extdata`);
//! - one `rocpd_info_kernel_symbol` per kernel and agent (`kernel_name` as launched,
//!   `display_name` demangled, `extdata` with the demangled, formatted and truncated names the
//!   `kernel_symbols` view reads), each under one `rocpd_info_code_object` per agent that stands
//!   for the agent's modules (the report does not name modules);
//! - one `rocpd_info_agent` per device ordinal (`type` `GPU`, `name` the chip, `product_name`
//!   the device), one `rocpd_info_queue` and one `rocpd_info_stream` (same id) per stream,
//!   one node (the report knows the host name only: it is also the `machine_id`), one process
//!   and one thread row (the launching thread is not recorded: the thread row is the
//!   process's main thread), and the strings they name (the category `KERNEL_DISPATCH` of
//!   the events, each kernel's display name as its dispatches' region name).
//!
//! rocpd's sizes are in work-items: `grid_size_*` is CUDA's grid times its block (the grid in
//! blocks is in the row's `extdata` as `grid_blocks`), `workgroup_size_*` the block.
//!
//! The database is written to a temporary file beside the target and renamed over it at the
//! end, so a failure never leaves a half-written database under the asked name, and an
//! existing file is replaced rather than merged into.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection};
use serde_json::json;

use crate::csv::ncu_unit;
use crate::error::ReportError;
use replay_report_types::{CounterDispatch, CounterReport};

/// The schema, with `{{uuid}}` and `{{guid}}` to substitute.
pub const SCHEMA: &str = include_str!("schema.sql");

/// The rocpd schema version written.
pub const SCHEMA_VERSION: &str = "3.0.4";

/// The category string of the kernel-dispatch events (rocprofv3's buffer-tracing kind).
pub const DISPATCH_CATEGORY: &str = "KERNEL_DISPATCH";

/// Writes `report` as a rocpd database at `path` (replacing any file there).
pub fn write_rocpd(path: &Path, report: &CounterReport) -> Result<(), ReportError> {
    report.check()?;
    let tmp = temp_beside(path);
    let _ = std::fs::remove_file(&tmp);
    let sql = |source| ReportError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
    let result = (|| {
        let mut conn = Connection::open(&tmp).map_err(sql)?;
        fill(&mut conn, report).map_err(sql)?;
        conn.close().map_err(|(_, e)| sql(e))?;
        std::fs::rename(&tmp, path).map_err(|source| ReportError::Io {
            path: path.to_path_buf(),
            source,
        })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// `DIR/.NAME.tmp-PID`, beside `path` so the final rename stays on one file system.
pub(crate) fn temp_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// The row guid of this report (the same report gives the same guid) and the table suffix
/// derived from it.
pub fn guid_and_uuid(report: &CounterReport) -> (String, String) {
    let mut h = Fnv128::default();
    h.add(report.host_name.as_bytes());
    h.add(&report.process_id.to_le_bytes());
    h.add(report.process_name.as_bytes());
    h.add(&(report.dispatches.len() as u64).to_le_bytes());
    for d in report
        .dispatches
        .iter()
        .take(1)
        .chain(report.dispatches.last())
    {
        h.add(&d.dispatch_id.to_le_bytes());
        h.add(&d.start_ns.to_le_bytes());
        h.add(&d.end_ns.to_le_bytes());
    }
    let x = h.0;
    let hex = format!("{x:032x}");
    let guid = format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    );
    let uuid = format!("_{}", guid.replace('-', "_"));
    (guid, uuid)
}

/// FNV-1a, 128 bits: enough to keep the guids of different runs apart; not a secret.
struct Fnv128(u128);

impl Default for Fnv128 {
    fn default() -> Self {
        Fnv128(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d)
    }
}

impl Fnv128 {
    fn add(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u128::from(*b);
            self.0 = self
                .0
                .wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
        }
    }
}

/// Nsight Compute's unit prefix of a metric name (`dram__bytes_read.sum` -> `dram`).
fn block_of(metric: &str) -> &str {
    metric.split("__").next().unwrap_or(metric)
}

fn i64_of(v: u64) -> i64 {
    // SQLite integers are signed 64-bit; handles above 2^63 keep their bits.
    v as i64
}

fn fill(conn: &mut Connection, r: &CounterReport) -> rusqlite::Result<()> {
    let (guid, uuid) = guid_and_uuid(r);
    let schema = SCHEMA.replace("{{uuid}}", &uuid).replace("{{guid}}", &guid);
    conn.execute_batch(&schema)?;
    let t = |name: &str| format!("`{name}{uuid}`");
    let tx = conn.transaction()?;
    for (tag, value) in [
        ("schema_version", SCHEMA_VERSION),
        ("uuid", uuid.as_str()),
        ("guid", guid.as_str()),
    ] {
        tx.execute(
            &format!(
                "INSERT INTO {} (tag, value) VALUES (?1, ?2)",
                t("rocpd_metadata")
            ),
            params![tag, value],
        )?;
    }

    // Strings: the dispatch category first, then each kernel's display name (region names).
    let mut strings: BTreeMap<String, i64> = BTreeMap::new();
    let mut string_id = |tx: &rusqlite::Transaction<'_>, s: &str| -> rusqlite::Result<i64> {
        if let Some(id) = strings.get(s) {
            return Ok(*id);
        }
        let id = strings.len() as i64 + 1;
        tx.execute(
            &format!(
                "INSERT INTO {} (id, guid, string) VALUES (?1, ?2, ?3)",
                t("rocpd_string")
            ),
            params![id, guid, s],
        )?;
        strings.insert(s.to_owned(), id);
        Ok(id)
    };
    let category = string_id(&tx, DISPATCH_CATEGORY)?;

    let host = if r.host_name.is_empty() {
        "unknown"
    } else {
        &r.host_name
    };
    let mut hh = Fnv128::default();
    hh.add(host.as_bytes());
    tx.execute(
        &format!(
            "INSERT INTO {} (id, guid, hash, machine_id, hostname) \
             VALUES (1, ?1, ?2, ?3, ?4)",
            t("rocpd_info_node")
        ),
        params![guid, hh.0 as u64 as i64, host, r.host_name],
    )?;
    let starts = r
        .dispatches
        .iter()
        .map(|d| d.start_ns)
        .filter(|s| *s > 0)
        .min();
    let ends = r
        .dispatches
        .iter()
        .map(|d| d.end_ns)
        .max()
        .filter(|e| *e > 0);
    tx.execute(
        &format!(
            "INSERT INTO {} (id, guid, nid, pid, start, \"end\", command, extdata) \
             VALUES (1, ?1, 1, ?2, ?3, ?4, ?5, ?6)",
            t("rocpd_info_process")
        ),
        params![
            guid,
            r.process_id,
            starts.map(i64_of),
            ends.map(i64_of),
            r.process_name,
            json!({"producer": "kernel-replay", "passes": r.passes}).to_string()
        ],
    )?;
    tx.execute(
        &format!(
            "INSERT INTO {} (id, guid, nid, pid, tid, name) VALUES (1, ?1, 1, 1, ?2, ?3)",
            t("rocpd_info_thread")
        ),
        params![guid, r.process_id, r.process_name],
    )?;

    // Agents (with the code object standing for their modules), by device ordinal.
    let mut agents: BTreeMap<u32, i64> = BTreeMap::new();
    for d in &r.dispatches {
        let next = agents.len() as i64 + 1;
        agents.entry(d.device).or_insert(next);
    }
    for (device, id) in &agents {
        tx.execute(
            &format!(
                "INSERT INTO {} (id, guid, nid, pid, type, absolute_index, logical_index, \
                 type_index, name, model_name, vendor_name, product_name, user_name, extdata) \
                 VALUES (?1, ?2, 1, 1, 'GPU', ?3, ?3, ?3, ?4, ?5, 'NVIDIA', ?6, ?6, ?7)",
                t("rocpd_info_agent")
            ),
            params![
                id,
                guid,
                device,
                if r.chip.is_empty() {
                    &r.device_name
                } else {
                    &r.chip
                },
                r.chip,
                r.device_name,
                json!({"compute_capability": r.compute_capability}).to_string()
            ],
        )?;
        tx.execute(
            &format!(
                "INSERT INTO {} (id, guid, nid, pid, agent_id, storage_type, extdata) \
                 VALUES (?1, ?2, 1, 1, ?1, 'MEMORY', ?3)",
                t("rocpd_info_code_object")
            ),
            params![
                id,
                guid,
                json!({"note": "stands for the agent's modules; the report does not name them"})
                    .to_string()
            ],
        )?;
    }

    // Metrics per agent.
    let names = r.metric_names();
    let mut pmcs: BTreeMap<(u32, &str), i64> = BTreeMap::new();
    for (device, agent) in &agents {
        for name in &names {
            let id = pmcs.len() as i64 + 1;
            let info = r.metric(name);
            tx.execute(
                &format!(
                    "INSERT INTO {} (id, guid, nid, pid, agent_id, target_arch, name, symbol, \
                     description, long_description, component, units, value_type, block, \
                     is_constant, is_derived, spm_support, extdata) \
                     VALUES (?1, ?2, 1, 1, ?3, 'GPU', ?4, ?4, ?5, '', 'CUPTI', ?6, 'ABS', ?7, \
                     0, 0, 0, ?8)",
                    t("rocpd_info_pmc")
                ),
                params![
                    id,
                    guid,
                    agent,
                    name,
                    info.map(|m| m.description.as_str()).unwrap_or(""),
                    ncu_unit(info.map_or("", |m| m.unit.as_str())),
                    block_of(name),
                    json!({"pass": info.map(|m| m.pass)}).to_string()
                ],
            )?;
            pmcs.insert((*device, name), id);
        }
    }

    // Kernels and streams per agent.
    let mut kernels: BTreeMap<(u32, &str), i64> = BTreeMap::new();
    let mut streams: BTreeMap<(u32, u64), i64> = BTreeMap::new();
    for d in &r.dispatches {
        let agent = agents[&d.device];
        if !kernels.contains_key(&(d.device, d.kernel.as_str())) {
            let id = kernels.len() as i64 + 1;
            let shown = display(d);
            tx.execute(
                &format!(
                    "INSERT INTO {} (id, guid, nid, pid, code_object_id, kernel_name, \
                     display_name, extdata) VALUES (?1, ?2, 1, 1, ?3, ?4, ?5, ?6)",
                    t("rocpd_info_kernel_symbol")
                ),
                params![
                    id,
                    guid,
                    agent,
                    d.kernel,
                    shown,
                    json!({
                        "demangled_kernel_name": shown,
                        "formatted_kernel_name": shown,
                        "truncated_kernel_name": truncated(shown),
                    })
                    .to_string()
                ],
            )?;
            kernels.insert((d.device, d.kernel.as_str()), id);
        }
        if !streams.contains_key(&(d.device, d.stream)) {
            let id = streams.len() as i64 + 1;
            let name = format!("stream {:#x}", d.stream);
            let ext =
                json!({"handle": d.stream, "context": d.context, "device": d.device}).to_string();
            for table in ["rocpd_info_queue", "rocpd_info_stream"] {
                tx.execute(
                    &format!(
                        "INSERT INTO {} (id, guid, nid, pid, name, extdata) \
                         VALUES (?1, ?2, 1, 1, ?3, ?4)",
                        t(table)
                    ),
                    params![id, guid, name, ext],
                )?;
            }
            streams.insert((d.device, d.stream), id);
        }
    }

    // Executions: one event and one dispatch row per pass; then the values on them.
    let mut events: BTreeMap<(u64, u32), i64> = BTreeMap::new();
    let mut last_pass: BTreeMap<u64, u32> = BTreeMap::new();
    for s in &r.samples {
        let e = last_pass.entry(s.dispatch_id).or_insert(0);
        *e = (*e).max(s.pass);
    }
    {
        let mut event = tx.prepare(&format!(
            "INSERT INTO {} (id, guid, category_id, stack_id, parent_stack_id, correlation_id, \
             extdata) VALUES (?1, ?2, ?3, ?4, 0, ?4, ?5)",
            t("rocpd_event")
        ))?;
        let mut dispatch = tx.prepare(&format!(
            "INSERT INTO {} (id, guid, nid, pid, tid, agent_id, kernel_id, dispatch_id, \
             queue_id, stream_id, start, \"end\", workgroup_size_x, workgroup_size_y, \
             workgroup_size_z, grid_size_x, grid_size_y, grid_size_z, region_name_id, \
             event_id, replay_pass, extdata) \
             VALUES (?1, ?2, 1, 1, 1, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, \
             ?15, ?1, ?16, ?17)",
            t("rocpd_kernel_dispatch")
        ))?;
        for d in &r.dispatches {
            let region = string_id(&tx, display(d))?;
            let passes = d
                .passes
                .max(last_pass.get(&d.dispatch_id).map_or(0, |p| p + 1))
                .max(1);
            for pass in 0..passes {
                let id = events.len() as i64 + 1;
                let (start, end) = d
                    .pass_ns
                    .get(pass as usize)
                    .map_or((d.start_ns, d.end_ns), |p| (p[0], p[1]));
                event.execute(params![
                    id,
                    guid,
                    category,
                    i64_of(d.dispatch_id),
                    extdata(d, pass)
                ])?;
                dispatch.execute(params![
                    id,
                    guid,
                    agents[&d.device],
                    kernels[&(d.device, d.kernel.as_str())],
                    i64_of(d.dispatch_id),
                    streams[&(d.device, d.stream)],
                    i64_of(start),
                    i64_of(end),
                    d.block[0],
                    d.block[1],
                    d.block[2],
                    i64::from(d.grid[0]) * i64::from(d.block[0]),
                    i64::from(d.grid[1]) * i64::from(d.block[1]),
                    i64::from(d.grid[2]) * i64::from(d.block[2]),
                    region,
                    pass,
                    dispatch_extdata(d),
                ])?;
                events.insert((d.dispatch_id, pass), id);
            }
        }
        let device_of: BTreeMap<u64, u32> = r
            .dispatches
            .iter()
            .map(|d| (d.dispatch_id, d.device))
            .collect();
        let mut pmc = tx.prepare(&format!(
            "INSERT INTO {} (guid, event_id, pmc_id, value) VALUES (?1, ?2, ?3, ?4)",
            t("rocpd_pmc_event")
        ))?;
        for s in &r.samples {
            let device = device_of[&s.dispatch_id];
            pmc.execute(params![
                guid,
                events[&(s.dispatch_id, s.pass)],
                pmcs[&(device, s.metric.as_str())],
                s.value
            ])?;
        }
    }
    tx.commit()
}

/// A demangled name without its parameter list and return type, as rocprofv3 truncates
/// (`void k<int>(float*)` -> `k<int>`).
fn truncated(name: &str) -> &str {
    // The parameter list is the last top-level `(...)`; template arguments may hold parens.
    let mut depth = 0i32;
    let mut end = name.len();
    for (i, c) in name.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    end = i;
                    break;
                }
            }
            _ => {}
        }
    }
    let head = &name[..end];
    // The return type ends at the last space outside template brackets.
    let mut angle = 0i32;
    let mut start = 0;
    for (i, c) in head.char_indices() {
        match c {
            '<' => angle += 1,
            '>' => angle -= 1,
            ' ' if angle == 0 => start = i + 1,
            _ => {}
        }
    }
    &head[start..]
}

fn display(d: &CounterDispatch) -> &str {
    if d.kernel_demangled.is_empty() {
        &d.kernel
    } else {
        &d.kernel_demangled
    }
}

/// The CUDA graph, node and graph launch a dispatch ran from, into `v` (absent outside a
/// graph).
fn add_graph(v: &mut serde_json::Value, d: &CounterDispatch) {
    if let Some(g) = d.graph {
        v["graph"] = g.into();
    }
    if let Some(n) = d.node {
        v["node"] = n.into();
    }
    if let Some(l) = d.graph_launch {
        v["graph_launch"] = l.into();
    }
}

/// An event's `extdata`: its pass, and the CUDA graph, node and graph launch it ran from, if
/// any.
fn extdata(d: &CounterDispatch, pass: u32) -> String {
    let mut v = json!({"replay_pass": pass});
    add_graph(&mut v, d);
    v.to_string()
}

/// A `rocpd_kernel_dispatch` row's `extdata`: the grid in blocks, the context, the passes, the
/// snapshot's bytes, the graph, node and graph launch (outside a graph: absent), and the
/// replay window's time by phase (`phases`, seconds by [`crate::WindowPhases`]' names; absent
/// when the report has none), and in a merged report its `origin` (process, rank, its own
/// dispatch id). One window holds every pass, so each pass's row has the same.
fn dispatch_extdata(d: &CounterDispatch) -> String {
    let mut v = json!({
        "grid_blocks": d.grid,
        "context": d.context,
        "passes": d.passes,
        "snapshot_bytes": d.snapshot_bytes,
    });
    add_graph(&mut v, d);
    if let Some(p) = &d.phases {
        v["phases"] = serde_json::to_value(p).unwrap_or_default();
    }
    // A report merged from processes: the dispatch's process, rank and its own id there.
    if let Some(o) = &d.origin {
        v["origin"] = serde_json::to_value(o).unwrap_or_default();
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::truncated;

    #[test]
    fn truncated_names_drop_return_type_and_parameters() {
        assert_eq!(truncated("saxpy"), "saxpy");
        assert_eq!(truncated("saxpy(float, float*)"), "saxpy");
        assert_eq!(
            truncated("void at::vectorized_elementwise_kernel<4, at::FillFunctor<float>, std::array<char *, 1>>(int, T2, T3)"),
            "at::vectorized_elementwise_kernel<4, at::FillFunctor<float>, std::array<char *, 1>>"
        );
        assert_eq!(truncated("void k<(int)3>(float)"), "k<(int)3>");
    }
}
