//! Reports the writers' tests share.

#![allow(dead_code)]

use replay_report::{CounterDispatch, CounterReport, CounterSample, MetricInfo};

pub const KERNEL_FILL: &str =
    "void at::vectorized_elementwise_kernel<4, at::FillFunctor<float>, std::array<char *, 1>>(int, T2, T3)";
pub const KERNEL_CONV: &str = "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, 0, 0, 1>(int, int, int, const T1 *, int, T2 *, const T1 *, kernel_conv_params, unsigned long long, int, float, float, int, const T2 *, const T2 *, bool, bool, int, int)";

pub fn metric(name: &str, unit: &str, pass: u32) -> MetricInfo {
    MetricInfo {
        name: name.into(),
        unit: unit.into(),
        description: format!("{name} described"),
        pass,
    }
}

pub fn dispatch(
    id: u64,
    kernel: &str,
    grid: [u32; 3],
    block: [u32; 3],
    passes: u32,
) -> CounterDispatch {
    CounterDispatch {
        dispatch_id: id,
        kernel: format!("mangled_{id}_{}", kernel.len()),
        kernel_demangled: kernel.into(),
        device: 0,
        context: 1,
        stream: 7,
        grid,
        block,
        passes,
        snapshot_bytes: 4096,
        start_ns: 1_000 * (id + 1),
        end_ns: 1_000 * (id + 1) + 500,
        pass_ns: Vec::new(),
        graph: None,
        node: None,
        graph_launch: None,
        phases: None,
        origin: None,
    }
}

/// A window's phases whose drain-to-finish add up to its window exactly (binary fractions).
pub fn phases() -> replay_report::WindowPhases {
    replay_report::WindowPhases {
        window: 0.015625,
        drain: 0.000_976_562_5,
        plan: 0.000_488_281_25,
        capture: 0.001953_125,
        launch: 0.000_244_140_625,
        wait: 0.0078125,
        check: 0.000_488_281_25,
        restore: 0.001953_125,
        callbacks: 0.000_976_562_5,
        finish: 0.000_732_421_875,
        config_enter: 0.000_122_070_312_5,
    }
}

pub fn sample(dispatch_id: u64, pass: u32, metric: &str, value: f64) -> CounterSample {
    CounterSample {
        dispatch_id,
        pass,
        metric: metric.into(),
        value,
    }
}

/// Launches 0 and 8 of Nsight Compute 2025.3's CSV of the CNN step on the H200
/// (`fixtures/ncu_2025.3_h200_head.csv`), as our collector would report them: same process,
/// context and stream ids, metrics listed in the order asked (not ncu's sorted order), time in
/// the metrics API's `nsecond`, and `profiler__replayer_bytes_mem_backed_up` without a value
/// (ncu printed `n/a`).
pub fn ncu_head() -> CounterReport {
    let mut fill = dispatch(0, KERNEL_FILL, [1, 1, 1], [128, 1, 1], 3);
    fill.kernel = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEE".into();
    let mut conv = dispatch(8, KERNEL_CONV, [1024, 1, 1], [8, 8, 1], 3);
    conv.kernel =
        "_Z23implicit_convolve_sgemmIffLi1024ELi5ELi5ELi3ELi3ELi3ELi1ELb0ELb0ELb1EEv".into();
    let metrics = vec![
        metric("launch__grid_size", "", 0),
        metric("launch__registers_per_thread", "register/thread", 0),
        metric("smsp__inst_executed.sum", "inst", 1),
        metric(
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "inst",
            1,
        ),
        metric("dram__bytes_read.sum", "byte", 2),
        metric("dram__bytes_write.sum", "byte", 2),
        metric("lts__t_sectors.sum", "sector", 1),
        metric("gpu__time_duration.sum", "nsecond", 0),
        metric("profiler__replayer_passes", "pass", 0),
        metric("profiler__replayer_bytes_mem_backed_up", "", 1),
    ];
    let values: [(u64, [f64; 9]); 2] = [
        (0, [1.0, 16.0, 207.0, 0.0, 4096.0, 0.0, 4580.0, 2144.0, 3.0]),
        (
            8,
            [
                1024.0,
                64.0,
                3_308_736.0,
                33_554_432.0,
                424_192.0,
                0.0,
                471_331.0,
                9696.0,
                3.0,
            ],
        ),
    ];
    let mut samples = Vec::new();
    for (id, v) in values {
        for (m, value) in metrics.iter().zip(v) {
            samples.push(sample(id, m.pass, &m.name, value));
        }
    }
    CounterReport {
        process_id: 1654,
        process_name: "python3.12".into(),
        host_name: "127.0.0.1".into(),
        device_name: "NVIDIA H200".into(),
        compute_capability: "9.0".into(),
        chip: "GH100".into(),
        clock_control: String::new(),
        passes: 3,
        metrics,
        dispatches: vec![fill, conv],
        samples,
    }
}

/// One dispatch replayed in three passes that all collected `sm__warps_launched.sum` (512
/// each), plus one metric unique to each pass: the case a per-dispatch sum gets wrong (1536).
pub fn repeated_counter() -> CounterReport {
    let mut d = dispatch(
        1,
        "saxpy(float, float const*, float*)",
        [64, 1, 1],
        [256, 1, 1],
        3,
    );
    d.pass_ns = vec![[1_000, 1_100], [2_000, 2_120], [3_000, 3_090]];
    let unique = [
        "lts__t_sectors.sum",
        "dram__bytes_read.sum",
        "smsp__inst_executed.sum",
    ];
    let mut metrics = vec![metric("sm__warps_launched.sum", "warp", 0)];
    let mut samples = Vec::new();
    for (pass, name) in unique.iter().enumerate() {
        let pass = pass as u32;
        metrics.push(metric(name, "", pass));
        samples.push(sample(1, pass, "sm__warps_launched.sum", 512.0));
        samples.push(sample(1, pass, name, 100.0 * f64::from(pass + 1)));
    }
    CounterReport {
        process_id: 42,
        process_name: "saxpy".into(),
        host_name: "node-a".into(),
        device_name: "NVIDIA H200".into(),
        compute_capability: "9.0".into(),
        chip: "GH100".into(),
        clock_control: String::new(),
        passes: 3,
        metrics,
        dispatches: vec![d],
        samples,
    }
}
