//! Device memory of every class, tracker reporting, module variables, host access.

mod common;

use replay_core::{AgentId, MemoryClass};
use replay_memory::ModuleVariables;
use replay_mock::{
    agent_base, agent_of, Kernel, KernelError, MemFaultKind, ModuleSpec, Owner, Pool, SimError,
    AGENT_SPAN,
};

#[test]
fn every_class_is_allocated_and_reported_with_its_class() {
    let rt = common::runtime(2);
    let a = AgentId(0);
    let classes = [
        MemoryClass::DEVICE_COARSE,
        MemoryClass::KERNARG,
        MemoryClass::FINE_GRAINED,
        MemoryClass::MANAGED,
        MemoryClass::PINNED_HOST,
        MemoryClass::IPC_IMPORTED,
        MemoryClass::PEER,
        MemoryClass::VIRTUAL_MAPPING,
    ];
    let mut bases = Vec::new();
    for c in classes {
        let base = rt.alloc(a, 10_000, c).unwrap();
        assert_eq!(base % 4096, 0, "aligned");
        assert_eq!(agent_of(base), Some(a), "inside agent 0's range");
        let r = rt.tracker().lookup(a, base + 9_999).expect("reported");
        assert_eq!((r.base, r.size, r.class), (base, 10_000, c));
        bases.push(base);
    }
    // Non-overlapping.
    let mut sorted = bases.clone();
    sorted.sort();
    for w in sorted.windows(2) {
        assert!(w[0] + 10_000 <= w[1]);
    }
    // Agent 1 lives in its own range.
    let b = rt
        .alloc(AgentId(1), 16, MemoryClass::DEVICE_COARSE)
        .unwrap();
    assert!(b >= agent_base(AgentId(1)) && b < agent_base(AgentId(1)) + AGENT_SPAN);
    assert!(rt.tracker().lookup(a, b).is_none());

    // Tool-owned memory is marked as the tool's.
    let t = rt.alloc(a, 4096, MemoryClass::TOOL_OWNED).unwrap();
    let r = rt.tracker().lookup(a, t).unwrap();
    assert!(r.class.contains(MemoryClass::TOOL_OWNED));
    let info = rt.gpu().allocations(a);
    assert_eq!(
        info.iter().find(|x| x.base == t).unwrap().owner,
        Owner::Tool
    );

    // Unreported memory is invisible to the tracker but real.
    let u = rt
        .alloc_untracked(a, 4096, MemoryClass::VIRTUAL_MAPPING)
        .unwrap();
    assert!(rt.tracker().lookup(a, u).is_none());
    rt.write(u, &[1, 2, 3]).unwrap();
    assert_eq!(rt.read(u, 3).unwrap(), vec![1, 2, 3]);

    // The runtime's kernarg pool is reported as KERNARG.
    assert!(rt
        .tracker()
        .regions(a)
        .iter()
        .any(|r| r.class == MemoryClass::KERNARG && !bases.contains(&r.base)));
}

#[test]
fn free_is_reported_and_reused_addresses_get_a_new_generation() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let x = rt.alloc(a, 8192, MemoryClass::DEVICE_COARSE).unwrap();
    let r1 = rt.tracker().lookup(a, x).unwrap();
    rt.free(a, x).unwrap();
    assert!(rt.tracker().lookup(a, x).is_none());
    assert!(!rt.tracker().is_live(a, &r1));
    assert!(matches!(rt.read(x, 1), Err(SimError::Fault(_))));
    let y = rt.alloc(a, 8192, MemoryClass::DEVICE_COARSE).unwrap();
    assert_eq!(x, y, "first fit reuses the freed address");
    let r2 = rt.tracker().lookup(a, y).unwrap();
    assert_ne!(r1.generation, r2.generation);
    assert!(!rt.tracker().is_live(a, &r1));
    assert!(rt.tracker().is_live(a, &r2));
    assert!(matches!(
        rt.free(a, y + 8),
        Err(SimError::InvalidFree { .. })
    ));
}

#[test]
fn capacity_is_enforced_per_pool() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let cap = 64 << 20;
    let big = rt.alloc(a, cap / 2, MemoryClass::DEVICE_COARSE).unwrap();
    let e = rt
        .alloc(a, cap / 2, MemoryClass::DEVICE_COARSE)
        .unwrap_err();
    assert!(
        matches!(e, SimError::OutOfMemory { pool: "device", .. }),
        "{e}"
    );
    // Pinned memory has its own capacity.
    rt.alloc(a, 16 << 20, MemoryClass::PINNED_HOST).unwrap();
    assert_eq!(rt.gpu().pool_used(a, Pool::Pinned), 16 << 20);
    rt.free(a, big).unwrap();
    rt.alloc(a, cap / 2, MemoryClass::DEVICE_COARSE).unwrap();
}

#[test]
fn peer_mapping_is_reported_as_peer() {
    let rt = common::runtime(2);
    let owned = rt
        .alloc(AgentId(1), 4096, MemoryClass::DEVICE_COARSE)
        .unwrap();
    rt.map_peer(AgentId(0), owned).unwrap();
    let r = rt.tracker().lookup(AgentId(0), owned).unwrap();
    assert_eq!(r.class, MemoryClass::PEER);
    rt.unmap_peer(AgentId(0), owned);
    assert!(rt.tracker().lookup(AgentId(0), owned).is_none());
}

#[test]
fn module_variables_are_enumerated_not_reported() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let m = rt
        .load_module(
            a,
            ModuleSpec::new("m")
                .variable("small", 64)
                .variable("large", 48 << 20)
                .constant("table", &[9, 8, 7, 6])
                .kernel("k", |_| Ok(())),
        )
        .unwrap();
    let vars = rt.module_variables().enumerate(a).unwrap();
    assert_eq!(vars.len(), 3);
    let large = vars.iter().find(|v| v.name == "large").unwrap();
    assert_eq!(large.size, 48 << 20);
    assert!(vars.iter().find(|v| v.name == "table").unwrap().read_only);
    for v in &vars {
        assert!(
            rt.tracker().lookup(a, v.base).is_none(),
            "found by enumeration only"
        );
    }
    assert_eq!(
        rt.read(m.variable("table").unwrap(), 4).unwrap(),
        vec![9, 8, 7, 6]
    );
    assert_eq!(m.kernel("k").unwrap().code_object, m.code_object);
    // The large variable counts against device memory.
    assert!(rt.gpu().pool_used(a, Pool::Device) >= 48 << 20);

    rt.unload_module(&m).unwrap();
    assert!(rt.module_variables().enumerate(a).unwrap().is_empty());
    assert!(rt.read(m.variable("small").unwrap(), 1).is_err());
}

#[test]
fn kernel_faults_are_reported_not_panics() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let q = rt.queue(a, 0);
    let m = rt
        .load_module(a, ModuleSpec::new("m").constant("c", &[1, 2, 3, 4]))
        .unwrap();
    let c = m.variable("c").unwrap();

    let store_const = Kernel::new("store_const", |ctx| {
        let addr = ctx.word(0);
        ctx.write_u32(addr, 5)?;
        Ok(())
    });
    let err = rt
        .dispatch(q, &store_const, &common::args(c, 0), common::grid(1))
        .unwrap()
        .wait()
        .unwrap_err();
    match err {
        KernelError::Fault(f) => assert_eq!(f.kind, MemFaultKind::ReadOnly),
        e => panic!("unexpected {e}"),
    }
    assert_eq!(
        rt.read(c, 4).unwrap(),
        vec![1, 2, 3, 4],
        "constant unchanged"
    );

    let wild = Kernel::new("wild", |ctx| {
        ctx.read_u64(0xdead_0000)?;
        Ok(())
    });
    let err = rt
        .dispatch(q, &wild, &[], common::grid(1))
        .unwrap()
        .wait()
        .unwrap_err();
    assert!(err.to_string().contains("address not mapped"), "{err}");

    let buf = rt.alloc(a, 16, MemoryClass::DEVICE_COARSE).unwrap();
    let past_end = Kernel::new("past_end", |ctx| {
        let b = ctx.word(0);
        ctx.read_vec(b, 32)?;
        Ok(())
    });
    let err = rt
        .dispatch(q, &past_end, &common::args(buf, 0), common::grid(1))
        .unwrap()
        .wait()
        .unwrap_err();
    assert!(
        matches!(err, KernelError::Fault(ref f) if matches!(f.kind, MemFaultKind::OutOfBounds { .. })),
        "{err}"
    );

    let panics = Kernel::new("panics", |_| panic!("boom"));
    let err = rt
        .dispatch(q, &panics, &[], common::grid(1))
        .unwrap()
        .wait()
        .unwrap_err();
    assert!(err.to_string().contains("boom"), "{err}");

    // The worker survived all of that.
    let ok = Kernel::new("ok", |ctx| {
        let b = ctx.word(0);
        ctx.write_u32(b, 42).map_err(KernelError::from)
    });
    rt.dispatch(q, &ok, &common::args(buf, 0), common::grid(1))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(rt.read_u32s(buf, 1).unwrap(), vec![42]);
}

#[test]
fn final_digest_is_comparable_across_runtimes() {
    let make = |v: u32| {
        let rt = common::runtime(1);
        let b = rt
            .alloc(AgentId(0), 64, MemoryClass::DEVICE_COARSE)
            .unwrap();
        rt.write_u32s(b, &[v; 16]).unwrap();
        // Tool memory does not count.
        let t = rt.alloc(AgentId(0), 64, MemoryClass::TOOL_OWNED).unwrap();
        rt.write_u32s(t, &[v + 100; 16]).unwrap();
        rt.digest_agent_memory(AgentId(0))
    };
    assert_eq!(make(1), make(1));
    assert_ne!(make(1), make(2));
}
