//! The kernel filter the variables build: names, dispatch ranges, skip and count.

use replay_core::filter::FilterState;
use replay_core::{AgentId, Dim3, DispatchId, DispatchInfo, KernelId, QueueId};

use crate::harness::from_map;

fn info(name: &str, id: u64) -> DispatchInfo {
    DispatchInfo::new(
        AgentId(0),
        QueueId(0),
        KernelId(1),
        name,
        Dim3::new(1, 1, 1),
        Dim3::new(1, 1, 1),
    )
    .with_dispatch_id(DispatchId(id))
}

#[test]
fn filter_include_exclude_lists() {
    let p = from_map(&[
        ("KREPLAY_KERNEL_INCLUDE", "gemm, conv*"),
        ("KREPLAY_KERNEL_EXCLUDE", "*slow*,naive"),
    ])
    .unwrap();
    let f = &p.filter;
    assert!(
        f.matches(&info("ampere_gemm_kernel", 1)),
        "substring include"
    );
    assert!(f.matches(&info("conv2d_fwd", 2)), "glob include");
    assert!(!f.matches(&info("my_conv2d", 3)), "glob is anchored");
    assert!(!f.matches(&info("softmax", 4)), "not included");
    assert!(!f.matches(&info("gemm_slow_path", 5)), "excluded by glob");
    assert!(!f.matches(&info("naive_gemm", 6)), "excluded by substring");
    assert!(!f.matches(&info("conv_slow", 7)), "exclusion wins");

    // Only an exclude list: every other name is admitted.
    let p = from_map(&[("KREPLAY_KERNEL_EXCLUDE", "memset")]).unwrap();
    assert!(p.filter.matches(&info("anything", 1)));
    assert!(!p.filter.matches(&info("__amd_rocclr_memset", 2)));

    // No filter variables: everything is admitted, without counting.
    let p = from_map(&[]).unwrap();
    let st = FilterState::default();
    assert!((0..100).all(|i| p.filter.admit(&info("k", i), &st)));
}

#[test]
fn filter_dispatch_range() {
    let p = from_map(&[("KREPLAY_DISPATCH_RANGE", "10-20")]).unwrap();
    let admitted: Vec<u64> = (0..30)
        .filter(|&i| p.filter.matches(&info("k", i)))
        .collect();
    assert_eq!(admitted, (10..=20).collect::<Vec<_>>());

    let p = from_map(&[("KREPLAY_DISPATCH_RANGE", "25-")]).unwrap();
    assert!(!p.filter.matches(&info("k", 24)));
    assert!(p.filter.matches(&info("k", 25)));
    assert!(p.filter.matches(&info("k", u64::MAX)));

    let p = from_map(&[("KREPLAY_DISPATCH_RANGE", "7")]).unwrap();
    let admitted: Vec<u64> = (0..30)
        .filter(|&i| p.filter.matches(&info("k", i)))
        .collect();
    assert_eq!(admitted, [7]);
}

#[test]
fn filter_skip_and_count() {
    let p = from_map(&[
        ("KREPLAY_KERNEL_INCLUDE", "gemm"),
        ("KREPLAY_KERNEL_SKIP", "1"),
        ("KREPLAY_KERNEL_COUNT", "2"),
    ])
    .unwrap();
    let st = FilterState::default();
    let names = [
        "gemm", "relu", "gemm", "relu", "gemm", "gemm", "relu", "gemm",
    ];
    let admitted: Vec<bool> = names
        .iter()
        .enumerate()
        .map(|(i, n)| p.filter.admit(&info(n, i as u64), &st))
        .collect();
    // Non-matching names do not count against skip or count: the first gemm is skipped, the
    // next two are admitted, later ones are not.
    assert_eq!(
        admitted,
        [false, false, true, false, true, false, false, false]
    );

    // Count alone.
    let p = from_map(&[("ROCPROFILER_KERNEL_REPLAY_KERNEL_COUNT", "3")]).unwrap();
    let st = FilterState::default();
    let n = (0..10)
        .filter(|&i| p.filter.admit(&info("k", i), &st))
        .count();
    assert_eq!(n, 3);

    // Skip alone.
    let p = from_map(&[("KREPLAY_KERNEL_SKIP", "4")]).unwrap();
    let st = FilterState::default();
    let admitted: Vec<u64> = (0..10)
        .filter(|&i| p.filter.admit(&info("k", i), &st))
        .collect();
    assert_eq!(admitted, (4..10).collect::<Vec<_>>());
}

#[test]
fn filter_range_combines_with_names_and_count() {
    let p = from_map(&[
        ("KREPLAY_DISPATCH_RANGE", "100-"),
        ("KREPLAY_KERNEL_EXCLUDE", "copy"),
        ("KREPLAY_KERNEL_COUNT", "2"),
    ])
    .unwrap();
    let st = FilterState::default();
    let seq = [
        ("k", 50),
        ("k", 99),
        ("copy_buffer", 100),
        ("k", 101),
        ("k", 102),
        ("k", 103),
    ];
    let admitted: Vec<u64> = seq
        .iter()
        .filter(|(n, i)| p.filter.admit(&info(n, *i), &st))
        .map(|(_, i)| *i)
        .collect();
    assert_eq!(admitted, [101, 102]);
}
