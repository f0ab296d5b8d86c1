//! The rocpd database read back with SQL (SPEC §12): tables and columns of schema 3.0.4, the
//! `counters_collection` view per pass, foreign keys, and the errors.

mod common;

use std::path::{Path, PathBuf};

use replay_report::{guid_and_uuid, write_counters, write_rocpd, Format, ReportError};
use rusqlite::Connection;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("replay-report-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn open(path: &Path) -> Connection {
    let c = Connection::open(path).unwrap();
    c.execute_batch("PRAGMA foreign_keys = ON;").unwrap();
    c
}

fn columns(c: &Connection, table: &str) -> Vec<String> {
    let mut st = c.prepare(&format!("PRAGMA table_info(`{table}`)")).unwrap();
    st.query_map([], |r| r.get::<_, String>(1))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn the_tables_views_and_upstream_columns_exist() {
    let d = dir("tables");
    let db = d.join("run.db");
    let r = common::ncu_head();
    assert_eq!(write_counters(&db, &r).unwrap(), Format::Rocpd);
    let c = open(&db);
    let (guid, uuid) = guid_and_uuid(&r);
    let kinds: Vec<(String, String)> = c
        .prepare("SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view')")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for t in [
        "rocpd_metadata",
        "rocpd_string",
        "rocpd_info_node",
        "rocpd_info_process",
        "rocpd_info_thread",
        "rocpd_info_agent",
        "rocpd_info_queue",
        "rocpd_info_stream",
        "rocpd_info_pmc",
        "rocpd_info_code_object",
        "rocpd_info_kernel_symbol",
        "rocpd_event",
        "rocpd_pmc_event",
        "rocpd_kernel_dispatch",
    ] {
        assert!(
            kinds.contains(&("table".into(), format!("{t}{uuid}"))),
            "table {t}{uuid}"
        );
        assert!(kinds.contains(&("view".into(), t.into())), "view {t}");
    }
    for v in [
        "kernels",
        "pmc_info",
        "pmc_events",
        "counters_collection",
        "kernel_symbols",
        "code_objects",
        "processes",
        "threads",
        "regions",
    ] {
        assert!(kinds.contains(&("view".into(), v.into())), "view {v}");
        // Each view runs.
        c.prepare(&format!("SELECT * FROM {v}"))
            .unwrap()
            .query([])
            .unwrap()
            .next()
            .unwrap();
    }
    let short: Vec<String> = c
        .prepare("SELECT truncated_kernel_name FROM kernel_symbols ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        short,
        [
            "at::vectorized_elementwise_kernel<4, at::FillFunctor<float>, std::array<char *, 1>>",
            "implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, 0, 0, 1>"
        ]
    );
    let (host, command): (String, String) = c
        .query_row("SELECT hostname, command FROM processes", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(
        (host.as_str(), command.as_str()),
        ("127.0.0.1", "python3.12")
    );
    let kd = columns(&c, "rocpd_kernel_dispatch");
    for col in [
        "id",
        "guid",
        "nid",
        "pid",
        "tid",
        "agent_id",
        "kernel_id",
        "dispatch_id",
        "queue_id",
        "stream_id",
        "start",
        "end",
        "private_segment_size",
        "group_segment_size",
        "workgroup_size_x",
        "workgroup_size_y",
        "workgroup_size_z",
        "grid_size_x",
        "grid_size_y",
        "grid_size_z",
        "region_name_id",
        "event_id",
        "replay_pass",
        "extdata",
    ] {
        assert!(
            kd.contains(&col.to_string()),
            "rocpd_kernel_dispatch.{col} in {kd:?}"
        );
    }
    let pmc = columns(&c, "rocpd_pmc_event");
    for col in [
        "id",
        "guid",
        "event_id",
        "sample_id",
        "pmc_id",
        "value",
        "extdata",
    ] {
        assert!(pmc.contains(&col.to_string()), "rocpd_pmc_event.{col}");
    }
    let info = columns(&c, "rocpd_info_pmc");
    for col in [
        "id",
        "nid",
        "pid",
        "agent_id",
        "name",
        "symbol",
        "description",
        "units",
        "block",
    ] {
        assert!(info.contains(&col.to_string()), "rocpd_info_pmc.{col}");
    }
    let ks = columns(&c, "rocpd_info_kernel_symbol");
    for col in ["id", "code_object_id", "kernel_name", "display_name"] {
        assert!(
            ks.contains(&col.to_string()),
            "rocpd_info_kernel_symbol.{col}"
        );
    }
    let meta: Vec<(String, String)> = c
        .prepare("SELECT tag, value FROM rocpd_metadata ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        meta,
        [
            ("schema_version".into(), "3.0.4".into()),
            ("uuid".into(), uuid.clone()),
            ("guid".into(), guid.clone())
        ]
    );
    // Every row is tagged with the database's guid.
    let other: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM rocpd_pmc_event WHERE guid != ?1",
            [&guid],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(other, 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn each_pass_row_of_a_dispatch_has_its_window_phases_and_graph_node_in_extdata() {
    let d = dir("phases");
    let db = d.join("phases.db");
    let mut r = common::repeated_counter();
    r.dispatches[0].graph = Some(4);
    r.dispatches[0].node = Some(2);
    r.dispatches[0].graph_launch = Some(7);
    r.dispatches[0].phases = Some(common::phases());
    write_rocpd(&db, &r).unwrap();
    let c = open(&db);
    let rows: Vec<(i64, f64, f64, f64, i64, i64, i64)> = c
        .prepare(
            "SELECT replay_pass, json_extract(extdata, '$.phases.window'), \
             json_extract(extdata, '$.phases.wait'), \
             json_extract(extdata, '$.phases.drain') + json_extract(extdata, '$.phases.plan') \
             + json_extract(extdata, '$.phases.capture') + json_extract(extdata, '$.phases.launch') \
             + json_extract(extdata, '$.phases.wait') + json_extract(extdata, '$.phases.check') \
             + json_extract(extdata, '$.phases.restore') \
             + json_extract(extdata, '$.phases.callbacks') \
             + json_extract(extdata, '$.phases.finish'), \
             json_extract(extdata, '$.graph'), json_extract(extdata, '$.node'), \
             json_extract(extdata, '$.graph_launch') \
             FROM rocpd_kernel_dispatch ORDER BY replay_pass",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let p = common::phases();
    assert_eq!(rows.len(), 3);
    for (pass, row) in rows.iter().enumerate() {
        assert_eq!(row.0, pass as i64);
        assert_eq!((row.1, row.2), (p.window, p.wait), "pass {pass}");
        assert!((row.3 - row.1).abs() < 1e-12, "the phases add up: {row:?}");
        assert_eq!((row.4, row.5, row.6), (4, 2, 7));
    }
    // The events (whose extdata the counters_collection view shows) name the graph launch too.
    let launches: Vec<i64> = c
        .prepare(
            "SELECT DISTINCT json_extract(extdata, '$.graph_launch'), replay_pass \
             FROM counters_collection ORDER BY replay_pass",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(launches, [7, 7, 7]);
    // A dispatch without phases has none in its extdata.
    write_rocpd(&db, &common::repeated_counter()).unwrap();
    let c = open(&db);
    let none: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM rocpd_kernel_dispatch \
             WHERE json_extract(extdata, '$.phases') IS NOT NULL \
             OR json_extract(extdata, '$.graph') IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(none, 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn counters_collection_returns_each_pass_unsummed() {
    let d = dir("per-pass");
    let db = d.join("repeat.sqlite");
    write_rocpd(&db, &common::repeated_counter()).unwrap();
    let c = open(&db);
    let rows: Vec<(i64, i64, f64, i64, i64)> = c
        .prepare(
            "SELECT dispatch_id, replay_pass, value, start, \"end\" FROM counters_collection \
             WHERE counter_name = 'sm__warps_launched.sum' ORDER BY replay_pass",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows,
        [
            (1, 0, 512.0, 1_000, 1_100),
            (1, 1, 512.0, 2_000, 2_120),
            (1, 2, 512.0, 3_000, 3_090)
        ]
    );
    // The counters only one pass collected keep their pass and value.
    for (pass, name) in [
        "lts__t_sectors.sum",
        "dram__bytes_read.sum",
        "smsp__inst_executed.sum",
    ]
    .iter()
    .enumerate()
    {
        let got: Vec<(i64, f64)> = c
            .prepare("SELECT replay_pass, value FROM counters_collection WHERE counter_name = ?1")
            .unwrap()
            .query_map([name], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got, [(pass as i64, 100.0 * (pass as f64 + 1.0))], "{name}");
    }
    // One dispatch row per pass, all with the dispatch's id; the kernels view sees them.
    let passes: Vec<(i64, i64)> = c
        .prepare("SELECT dispatch_id, replay_pass FROM rocpd_kernel_dispatch ORDER BY replay_pass")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(passes, [(1, 0), (1, 1), (1, 2)]);
    let kernels: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM kernels WHERE dispatch_id = 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kernels, 3);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn foreign_keys_resolve_and_the_rows_join() {
    let d = dir("fk");
    let db = d.join("run.db");
    let r = common::ncu_head();
    write_rocpd(&db, &r).unwrap();
    let c = open(&db);
    let broken: i64 = c
        .query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(broken, 0, "rows whose foreign keys point nowhere");
    // The references the rows actually carry, NOT NULL ones and nullable ones alike.
    let dangling: i64 = c
        .query_row(
            "SELECT \
               (SELECT COUNT(*) FROM rocpd_kernel_dispatch K WHERE \
                  K.event_id NOT IN (SELECT id FROM rocpd_event) \
                  OR K.kernel_id NOT IN (SELECT id FROM rocpd_info_kernel_symbol) \
                  OR K.agent_id NOT IN (SELECT id FROM rocpd_info_agent) \
                  OR K.queue_id NOT IN (SELECT id FROM rocpd_info_queue) \
                  OR K.stream_id NOT IN (SELECT id FROM rocpd_info_stream) \
                  OR K.tid NOT IN (SELECT id FROM rocpd_info_thread) \
                  OR K.region_name_id NOT IN (SELECT id FROM rocpd_string)) \
             + (SELECT COUNT(*) FROM rocpd_pmc_event P WHERE \
                  P.event_id NOT IN (SELECT event_id FROM rocpd_kernel_dispatch) \
                  OR P.pmc_id NOT IN (SELECT id FROM rocpd_info_pmc)) \
             + (SELECT COUNT(*) FROM rocpd_info_kernel_symbol S WHERE \
                  S.code_object_id NOT IN (SELECT id FROM rocpd_info_code_object))",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(dangling, 0);
    // Every sample is one row of the view, with its kernel, agent and unit.
    let n: i64 = c
        .query_row("SELECT COUNT(*) FROM counters_collection", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n as usize, r.samples.len());
    let (kernel, grid, wg, agent, units): (String, i64, i64, i64, String) = c
        .query_row(
            "SELECT C.kernel_name, C.grid_size, C.workgroup_size, C.agent_abs_index, I.units \
             FROM counters_collection C JOIN rocpd_info_pmc I ON I.id = C.counter_id \
             WHERE C.dispatch_id = 8 AND C.counter_name = 'gpu__time_duration.sum'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(kernel, common::KERNEL_CONV);
    assert_eq!(
        (grid, wg, agent),
        (1024 * 64, 64, 0),
        "rocpd sizes are in work-items"
    );
    assert_eq!(units, "ns");
    let mangled: String = c
        .query_row(
            "SELECT S.kernel_name FROM rocpd_info_kernel_symbol S \
             JOIN rocpd_kernel_dispatch K ON K.kernel_id = S.id WHERE K.dispatch_id = 0 LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(mangled, r.dispatches[0].kernel);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn writing_again_replaces_the_file_and_leaves_no_temporary() {
    let d = dir("again");
    let db = d.join("run.db");
    std::fs::write(&db, b"not a database").unwrap();
    let r = common::repeated_counter();
    write_rocpd(&db, &r).unwrap();
    write_rocpd(&db, &r).unwrap();
    let c = open(&db);
    let n: i64 = c
        .query_row("SELECT COUNT(*) FROM rocpd_pmc_event", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n as usize, r.samples.len());
    let names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["run.db"]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn errors_name_the_file_and_write_nothing() {
    let d = dir("errors");
    let r = common::repeated_counter();

    let txt = d.join("out.txt");
    let e = write_counters(&txt, &r).unwrap_err();
    assert!(
        matches!(e, ReportError::UnknownFormat { ref ext, .. } if ext == "txt"),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("out.txt") && msg.contains(".csv, .json, .db"),
        "{msg}"
    );
    let e = write_counters(&d.join("noext"), &r).unwrap_err();
    assert!(matches!(e, ReportError::UnknownFormat { .. }), "{e:?}");

    let missing = d.join("no/such/dir");
    for name in ["run.db", "run.csv", "run.json"] {
        let p = missing.join(name);
        let e = write_counters(&p, &r).unwrap_err();
        assert!(
            matches!(e, ReportError::Sqlite { .. } | ReportError::Io { .. }),
            "{name}: {e:?}"
        );
        assert!(e.to_string().contains(&p.display().to_string()), "{e}");
    }

    let mut bad = r.clone();
    bad.samples
        .push(common::sample(99, 0, "sm__warps_launched.sum", 1.0));
    for name in ["bad.db", "bad.csv", "bad.json"] {
        let e = write_counters(&d.join(name), &bad).unwrap_err();
        assert!(e.to_string().contains("dispatch 99"), "{e}");
    }
    let mut twice = r.clone();
    twice
        .samples
        .push(common::sample(1, 0, "sm__warps_launched.sum", 1.0));
    let e = write_counters(&d.join("twice.db"), &twice).unwrap_err();
    assert!(e.to_string().contains("two values"), "{e}");

    let left: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "written despite the errors: {left:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn csv_and_json_files_hold_what_the_functions_return() {
    let d = dir("files");
    let r = common::ncu_head();
    assert_eq!(write_counters(&d.join("a.CSV"), &r).unwrap(), Format::Csv);
    assert_eq!(
        std::fs::read_to_string(d.join("a.CSV")).unwrap(),
        replay_report::csv(&r)
    );
    assert_eq!(write_counters(&d.join("a.json"), &r).unwrap(), Format::Json);
    let back = replay_report::from_json(&std::fs::read_to_string(d.join("a.json")).unwrap());
    assert_eq!(back.unwrap(), r);
    let _ = std::fs::remove_dir_all(&d);
}
