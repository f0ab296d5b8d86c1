//! The loader extension: executables' symbols report their module variables.

use std::ffi::c_void;

use replay_hsa::sys;
use replay_hsa_sim::client::typed;
use replay_hsa_sim::{SimConfig, SimHsa, VariableSpec};

#[test]
fn loader_extension_and_executable_symbols_report_module_variables() {
    let sim = SimHsa::new(SimConfig::default());
    let vars = [
        VariableSpec {
            name: "table".into(),
            size: 256,
            is_const: false,
        },
        VariableSpec {
            name: "__hip_cuid_abc".into(),
            size: 1,
            is_const: false,
        },
        VariableSpec {
            name: "coeffs".into(),
            size: 64,
            is_const: true,
        },
    ];
    let exec = sim.load_module(1, &vars, &[]);
    let core = sim.core();
    type GetExt = unsafe extern "C" fn(u16, u16, usize, *mut c_void) -> u32;
    // SAFETY: `hsa_system_get_major_extension_table`'s signature.
    let get_ext: GetExt = unsafe { typed(core.hsa_system_get_major_extension_table_fn) };
    let mut loader = std::mem::MaybeUninit::<replay_hsa_sim::LoaderTable>::zeroed();
    // SAFETY: a buffer of the table's size.
    let st = unsafe {
        get_ext(
            0x201,
            1,
            std::mem::size_of::<replay_hsa_sim::LoaderTable>(),
            loader.as_mut_ptr().cast(),
        )
    };
    assert_eq!(st, 0);
    // SAFETY: filled by the call above.
    let loader = unsafe { loader.assume_init() };
    type IterExecs = unsafe extern "C" fn(
        Option<unsafe extern "C" fn(u64, *mut c_void) -> u32>,
        *mut c_void,
    ) -> u32;
    unsafe extern "C" fn collect_exec(e: u64, data: *mut c_void) -> u32 {
        // SAFETY: the test's `Vec`.
        unsafe { (*data.cast::<Vec<u64>>()).push(e) };
        0
    }
    // SAFETY: the loader's `iterate_executables` signature.
    let iter: IterExecs = unsafe { typed(loader.iterate_executables) };
    let mut execs: Vec<u64> = Vec::new();
    assert_eq!(
        // SAFETY: a collecting callback.
        unsafe { iter(Some(collect_exec), (&mut execs as *mut Vec<u64>).cast()) },
        0
    );
    assert_eq!(execs, [exec]);

    type IterSyms = unsafe extern "C" fn(
        u64,
        sys::hsa_agent_t,
        Option<unsafe extern "C" fn(u64, sys::hsa_agent_t, u64, *mut c_void) -> u32>,
        *mut c_void,
    ) -> u32;
    type SymInfo = unsafe extern "C" fn(u64, u32, *mut c_void) -> u32;
    unsafe extern "C" fn collect_sym(
        _e: u64,
        _a: sys::hsa_agent_t,
        s: u64,
        data: *mut c_void,
    ) -> u32 {
        // SAFETY: the test's `Vec`.
        unsafe { (*data.cast::<Vec<u64>>()).push(s) };
        0
    }
    // SAFETY: the entries' signatures.
    let (iter_syms, info): (IterSyms, SymInfo) = unsafe {
        (
            typed(core.hsa_executable_iterate_agent_symbols_fn),
            typed(core.hsa_executable_symbol_get_info_fn),
        )
    };
    let mut syms: Vec<u64> = Vec::new();
    assert_eq!(
        // SAFETY: a collecting callback.
        unsafe {
            iter_syms(
                exec,
                sim.gpu_agents()[1],
                Some(collect_sym),
                (&mut syms as *mut Vec<u64>).cast(),
            )
        },
        0
    );
    assert_eq!(syms.len(), 3);
    let mut other: Vec<u64> = Vec::new();
    // SAFETY: as above, for the other GPU.
    unsafe {
        iter_syms(
            exec,
            sim.gpu_agents()[0],
            Some(collect_sym),
            (&mut other as *mut Vec<u64>).cast(),
        )
    };
    assert!(other.is_empty());
    let mut got = Vec::new();
    for s in syms {
        let (mut len, mut size, mut addr, mut konst) = (0u32, 0u32, 0u64, false);
        // SAFETY: NAME_LENGTH (1), VARIABLE_SIZE (9), VARIABLE_ADDRESS (21), IS_CONST (10).
        unsafe {
            assert_eq!(info(s, 1, (&mut len as *mut u32).cast()), 0);
            assert_eq!(info(s, 9, (&mut size as *mut u32).cast()), 0);
            assert_eq!(info(s, 21, (&mut addr as *mut u64).cast()), 0);
            assert_eq!(info(s, 10, (&mut konst as *mut bool).cast()), 0);
        }
        let mut name = vec![0u8; len as usize];
        // SAFETY: NAME (2) writes `len` bytes.
        assert_eq!(unsafe { info(s, 2, name.as_mut_ptr().cast()) }, 0);
        got.push((String::from_utf8(name).unwrap(), size, konst));
        assert_eq!(Some(addr), sim.variable_address(&got.last().unwrap().0));
    }
    assert_eq!(
        got,
        [
            ("table".to_owned(), 256, false),
            ("__hip_cuid_abc".to_owned(), 1, false),
            ("coeffs".to_owned(), 64, true)
        ]
    );
}
