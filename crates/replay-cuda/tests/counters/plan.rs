//! Metric lists compiled into plans, before any window: which metrics the chip cannot
//! collect and why, range metrics packed into one-pass groups without splitting a ratio, and
//! SASS names mapped to the chip's metrics in a pass of their own. The plan fixes every pass
//! count the window is later asked for, so its mistakes would cost passes or values.

use std::sync::atomic::Ordering;

use replay_cuda::counters::{
    metric_set, parse_metric_list, CounterError, GroupOrder, MetricPlan, Packing, Rollup,
    SassGranularity,
};

use crate::fake::{Fake, CHIP};
use crate::rig::{group_layout, groups_plan, names};

#[test]
fn metrics_the_chip_cannot_collect_are_one_error_naming_each_and_nothing_is_planned() {
    let fake = Fake::default();
    let e = groups_plan(
        &fake,
        CHIP,
        &names(&[
            "dram__bytes_read.sum",
            "dram__bytes_raed.sum",
            "launch__grid_size",
            "launch__nonsense",
            "sm__nothing.avg",
        ]),
    )
    .unwrap_err();
    let CounterError::Metrics { chip, bad } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(chip, CHIP);
    let bad: Vec<&str> = bad.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        bad,
        [
            "dram__bytes_raed.sum",
            "launch__nonsense",
            "sm__nothing.avg"
        ]
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with("metrics cannot be collected on GH100: \"dram__bytes_raed.sum\" (CUPTI_ERROR_INVALID_METRIC_NAME), \"launch__nonsense\""),
        "{msg}"
    );
    // What was compiled for the good metric was given back.
    assert_eq!(fake.released.load(Ordering::SeqCst), 1);
    assert_eq!(
        groups_plan(&fake, CHIP, &[]).unwrap_err(),
        CounterError::Empty
    );
}

#[test]
fn metrics_are_packed_first_fit_into_one_pass_groups_and_a_ratio_keeps_its_counters_in_one_pass() {
    let fake = Fake::default();
    let list = [
        "launch__grid_size",
        "smsp__inst_executed.sum",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "lts__t_sector_hit_rate.pct",
        "lts__t_sectors.sum",
        "l1tex__t_sector_hit_rate.pct",
        "big__two_pass.sum",
        "gpu__time_duration.sum",
    ];
    let plan = groups_plan(&fake, CHIP, &names(&list)).unwrap();
    let groups = group_layout(&plan);
    assert_eq!(
        groups,
        vec![
            // inst, dram_rd, dram_wr fill 3 of 4; the ratio's two counters do not fit beside
            // them, so the ratio opens a group of its own rather than being split, and
            // lts__t_sectors fills the first group's last counter.
            (
                0,
                1,
                vec![
                    "smsp__inst_executed.sum",
                    "dram__bytes_read.sum",
                    "dram__bytes_write.sum",
                    "lts__t_sectors.sum"
                ]
            ),
            (
                1,
                1,
                vec!["lts__t_sector_hit_rate.pct", "l1tex__t_sector_hit_rate.pct"]
            ),
            (2, 2, vec!["big__two_pass.sum"]),
            (4, 1, vec!["gpu__time_duration.sum"]),
        ]
    );
    assert_eq!(plan.passes, 5);
    // The host API's own schedule of the whole list in one image: 14 counters, 4 passes.
    assert_eq!(plan.single_config_passes, 4);
    assert!(plan.passes >= plan.single_config_passes);
    assert_eq!(plan.launch, names(&["launch__grid_size"]));
    // Every metric knows its pass, unit and description, in the order asked.
    let info: Vec<(&str, u32, &str)> = plan
        .metrics
        .iter()
        .map(|m| (m.name.as_str(), m.pass, m.unit.as_str()))
        .collect();
    assert_eq!(info[0], ("launch__grid_size", 0, ""));
    assert_eq!(info[2], ("dram__bytes_read.sum", 0, "byte"));
    assert_eq!(info[5], ("lts__t_sectors.sum", 0, "lts_sector"));
    assert_eq!(info[4], ("lts__t_sector_hit_rate.pct", 1, "%"));
    assert_eq!(info[7], ("big__two_pass.sum", 2, ""));
    assert_eq!(info[8], ("gpu__time_duration.sum", 4, ""));
    assert_eq!(plan.group_at(0), Some((0, 0)));
    assert_eq!(plan.group_at(3), Some((2, 1)));
    assert_eq!(plan.group_at(4), Some((3, 0)));
    assert_eq!(plan.group_at(5), None);
    // Reversed, the same passes hold the groups last first.
    assert_eq!(plan.group_in(0, GroupOrder::Reversed), Some((3, 0, 0)));
    assert_eq!(plan.group_in(1, GroupOrder::Reversed), Some((2, 0, 1)));
    assert_eq!(plan.group_in(3, GroupOrder::Reversed), Some((1, 0, 3)));
    assert_eq!(plan.group_in(4, GroupOrder::Reversed), Some((0, 0, 4)));
    assert_eq!(plan.group_in(5, GroupOrder::Reversed), None);
    assert_eq!(plan.group_in(3, GroupOrder::Planned), Some((2, 1, 2)));
    // Every image the packing tried and dropped was given back.
    assert_eq!(
        fake.compiles.load(Ordering::SeqCst) - fake.released.load(Ordering::SeqCst),
        plan.groups.len() as u32
    );
}

#[test]
fn metric_lists_and_the_basic_set() {
    assert_eq!(
        parse_metric_list(" a.sum, ,b.sum,a.sum ,"),
        names(&["a.sum", "b.sum"])
    );
    let basic = metric_set("basic").unwrap();
    for m in [
        "launch__grid_size",
        "launch__registers_per_thread",
        "smsp__inst_executed.sum",
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "lts__t_sectors.sum",
        "gpu__time_duration.sum",
    ] {
        assert!(basic.contains(&m), "{m}");
    }
    assert!(metric_set("nonsense").is_none());
    // The basic set compiles on the fake (every name is one it knows or a launch metric):
    // five counters in two range passes, then the FFMA count's SASS pass.
    let fake = Fake::default();
    let plan = groups_plan(&fake, CHIP, &names(basic)).unwrap();
    assert_eq!(plan.passes, 3);
    assert_eq!(plan.sass.as_ref().map(|s| s.first_pass), Some(2));
}

#[test]
fn multi_pass_metrics_share_an_image_where_it_costs_no_pass_and_one_pass_metrics_never_join_them() {
    let fake = Fake::default();
    let plan = groups_plan(
        &fake,
        CHIP,
        &names(&[
            "big__two_pass.sum",
            "dram__bytes_read.sum",
            "big__shares.sum",
        ]),
    )
    .unwrap();
    let groups = group_layout(&plan);
    assert_eq!(
        groups,
        vec![
            (0, 2, vec!["big__two_pass.sum", "big__shares.sum"]),
            (2, 1, vec!["dram__bytes_read.sum"]),
        ]
    );
    assert_eq!(plan.passes, 3);
}

#[test]
fn sass_metrics_get_a_pass_of_their_own_after_the_range_groups_mapped_to_the_chips_names() {
    let fake = Fake::default();
    let plan = groups_plan(
        &fake,
        CHIP,
        &names(&[
            "launch__grid_size",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "smsp__inst_executed.sum",
            "dram__bytes_read.sum",
            "smsp__sass_inst_executed_op_global_ld.sum",
        ]),
    )
    .unwrap();
    // The range profiler's host never saw a SASS name.
    assert!(
        fake.compiled
            .lock()
            .iter()
            .flatten()
            .all(|m| !m.contains("__sass_")),
        "{:?}",
        fake.compiled.lock()
    );
    let groups: Vec<Vec<&str>> = plan
        .groups
        .iter()
        .map(|g| g.config.metrics.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        groups,
        [vec!["smsp__inst_executed.sum", "dram__bytes_read.sum"]]
    );
    let s = plan.sass.as_ref().expect("a SASS pass");
    assert_eq!(s.first_pass, 1);
    assert_eq!(plan.passes, 2, "the SASS pass is counted");
    assert_eq!(plan.single_config_passes, 1, "the range metrics alone");
    let mapped: Vec<(&str, &str, u64, Rollup)> = s
        .metrics
        .iter()
        .map(|m| (m.name.as_str(), m.api_name.as_str(), m.id, m.rollup))
        .collect();
    assert_eq!(
        mapped,
        [
            (
                "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
                "smsp__sass_thread_inst_executed_op_ffma_pred_on",
                12,
                Rollup::Sum
            ),
            (
                "smsp__sass_inst_executed_op_global_ld.sum",
                "smsp__sass_inst_executed_op_global_ld",
                13,
                Rollup::Sum
            ),
        ]
    );
    assert_eq!(s.granularity, SassGranularity::Gpu);
    assert_eq!(s.sentinel, Some(11));
    assert_eq!(s.config().metric_ids, [12, 13, 11]);
    let info: Vec<(&str, u32, &str)> = plan
        .metrics
        .iter()
        .map(|m| (m.name.as_str(), m.pass, m.description.as_str()))
        .collect();
    assert_eq!(
        info[1],
        (
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            1,
            "sass smsp__sass_thread_inst_executed_op_ffma_pred_on"
        )
    );
    assert_eq!(info[3].1, 0);
    let j = plan.summary();
    assert_eq!(j["sass"]["first_pass"], 1);
    assert_eq!(
        j["sass"]["metrics"][0]["api_name"],
        "smsp__sass_thread_inst_executed_op_ffma_pred_on"
    );
    // A list of SASS metrics only: one pass, the SASS one.
    let plan = groups_plan(
        &fake,
        CHIP,
        &names(&["smsp__sass_inst_executed.sum", "launch__grid_size"]),
    )
    .unwrap();
    assert!(plan.groups.is_empty());
    assert_eq!(plan.passes, 1);
    let s = plan.sass.unwrap();
    assert_eq!(
        (s.first_pass, s.granularity, s.metrics[0].rollup),
        (0, SassGranularity::Gpu, Rollup::Sum)
    );
    // The sentinel is the asked metric itself: configured once.
    assert_eq!(s.config().metric_ids, [11]);
}

#[test]
fn sass_names_that_cannot_be_collected_are_named_with_the_reason() {
    let fake = Fake::default();
    let e = groups_plan(
        &fake,
        CHIP,
        &names(&[
            "sm__sass_inst_executed_op_nothing.sum",
            "smsp__sass_inst_executed.pct",
            "smsp__sass_inst_executed.sum.per_second",
            "sm__sass_inst_executed.avg",
            "smsp__sass_inst_executed_op_global_ld.max",
            "l1tex__sass_inst_executed.avg",
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "dram__bytes_raed.sum",
        ]),
    )
    .unwrap_err();
    let CounterError::Metrics { chip, bad } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(chip, CHIP);
    let why = |m: &str| {
        bad.iter()
            .find(|(n, _)| n == m)
            .map(|(_, w)| w.as_str())
            .unwrap_or_else(|| panic!("{m} not named: {bad:?}"))
    };
    assert!(
        why("sm__sass_inst_executed_op_nothing.sum")
            .contains("not among the 3 SASS metrics of the chip"),
        "{bad:?}"
    );
    assert!(
        why("sm__sass_inst_executed_op_nothing.sum").contains("--list-sass"),
        "{bad:?}"
    );
    assert!(
        why("smsp__sass_inst_executed.pct").contains(".sum, .avg, .max or .min, not .pct"),
        "{bad:?}"
    );
    assert!(
        why("smsp__sass_inst_executed.sum.per_second").contains("not .sum.per_second"),
        "{bad:?}"
    );
    // Rollups over SMs are refused: their records do not add up on the hardware.
    for m in [
        "sm__sass_inst_executed.avg",
        "smsp__sass_inst_executed_op_global_ld.max",
        "l1tex__sass_inst_executed.avg",
    ] {
        assert!(why(m).contains("ask for .sum"), "{m}: {bad:?}");
    }
    // The good SASS metric and the range metric the host knows are not named.
    assert_eq!(bad.len(), 7, "{bad:?}");
    assert!(e
        .to_string()
        .contains("sm__sass_inst_executed_op_nothing.sum"));

    // An older libcupti: the SASS metrics are named, the rest of the list plans as before.
    let old = Fake::default();
    old.no_sass_api.store(true, Ordering::SeqCst);
    let e = groups_plan(
        &old,
        CHIP,
        &names(&[
            "dram__bytes_read.sum",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
        ]),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("\"sm__sass_thread_inst_executed_op_ffma_pred_on.sum\" (no SASS Metrics API: libcupti.so lacks cuptiSassMetricsGetNumOfMetrics)"),
        "{msg}"
    );
    assert!(!msg.contains("dram__bytes_read.sum"), "{msg}");
    let plan = groups_plan(&old, CHIP, &names(&["dram__bytes_read.sum"])).unwrap();
    assert!(plan.sass.is_none());
}

#[test]
fn sass_names_map_by_the_api_name_itself_and_by_other_spellings_of_the_unit() {
    let fake = Fake::default();
    // The API's own base name is its `.sum`; an unknown bare name is not guessed at.
    let plan = groups_plan(
        &fake,
        CHIP,
        &names(&["smsp__sass_inst_executed_op_global_ld"]),
    )
    .unwrap();
    let m = &plan.sass.unwrap().metrics[0];
    assert_eq!((m.id, m.rollup), (13, Rollup::Sum));
    assert!(groups_plan(
        &fake,
        CHIP,
        &names(&["sm__sass_inst_executed_op_global_ld"])
    )
    .is_err());
    // A chip that spells the unit otherwise: `sm__sass_x.sum` still finds `sass__x`, and
    // without `smsp__sass_inst_executed` there is no sentinel.
    *fake.sass_list.lock() = Some(vec![
        (21, "sass__thread_inst_executed_op_ffma_pred_on"),
        (22, "sm__sass_inst_executed_op_global_ld"),
    ]);
    let plan = groups_plan(
        &fake,
        CHIP,
        &names(&[
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "smsp__sass_inst_executed_op_global_ld.sum",
        ]),
    )
    .unwrap();
    let s = plan.sass.unwrap();
    let got: Vec<(&str, u64)> = s
        .metrics
        .iter()
        .map(|m| (m.api_name.as_str(), m.id))
        .collect();
    assert_eq!(
        got,
        [
            ("sass__thread_inst_executed_op_ffma_pred_on", 21),
            ("sm__sass_inst_executed_op_global_ld", 22)
        ]
    );
    assert_eq!(s.sentinel, None);
    assert_eq!(s.config().metric_ids, [21, 22]);
}

#[test]
fn a_sectors_unit_is_the_counters_own_whatever_the_host_api_labels_it() {
    let fake = Fake::default();
    let l1 = groups_plan(&fake, CHIP, &names(&["l1tex__t_sectors.sum"])).unwrap();
    assert_eq!(l1.metrics[0].unit, "l1tex_sector");
}

#[test]
fn single_packing_is_the_host_apis_one_configuration_of_the_whole_list() {
    let fake = Fake::default();
    let list = names(&[
        "launch__grid_size",
        "smsp__inst_executed.sum",
        "dram__bytes_read.sum",
        "lts__t_sector_hit_rate.pct",
        "big__two_pass.sum",
        "gpu__time_duration.sum",
    ]);
    let groups = MetricPlan::compile_packed(&fake, CHIP, &list, Packing::Groups).unwrap();
    let single = MetricPlan::compile_packed(&fake, CHIP, &list, Packing::Single).unwrap();
    assert!(groups.groups.len() > 1);
    assert_eq!(
        group_layout(&single),
        vec![(
            0,
            single.single_config_passes,
            vec![
                "smsp__inst_executed.sum",
                "dram__bytes_read.sum",
                "lts__t_sector_hit_rate.pct",
                "big__two_pass.sum",
                "gpu__time_duration.sum"
            ]
        )]
    );
    assert_eq!(single.passes, single.single_config_passes);
    assert!(single.passes <= groups.passes);
    assert!(single.metrics.iter().all(|m| m.pass == 0));
    assert_eq!(single.launch, names(&["launch__grid_size"]));
    // Only the configuration kept is alive: every other image was given back.
    assert_eq!(
        fake.compiles.load(Ordering::SeqCst) - fake.released.load(Ordering::SeqCst),
        (groups.groups.len() + 1) as u32
    );
    assert_eq!(Packing::parse(" groups"), Ok(Packing::Groups));
    assert_eq!(Packing::parse(""), Ok(Packing::Single));
    assert_eq!(Packing::default(), Packing::Single);
    let e = Packing::parse("one").unwrap_err();
    assert!(
        e.contains("KREPLAY_CUDA_COUNTER_PACKING=\"one\"") && e.contains("single or groups"),
        "{e}"
    );
}
