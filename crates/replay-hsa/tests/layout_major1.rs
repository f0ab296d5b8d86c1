//! Layout of the major-1 bindings against Debian's `libhsa-runtime-dev` headers (ROCm 5.2).
//!
//! The test writes a small program that prints the size of every bound struct and the offset
//! of every field and table entry the bindings declare (the entry lists come from the bindings
//! themselves, so a name the header lacks fails to compile), plus the values of the constants
//! the backend uses; compiles it against the installed headers; runs it; and compares every
//! line with `size_of` / `offset_of!` / the Rust constants. `hsa_api_trace.h` is C++ (it uses
//! `decltype`), so the program is compiled as C++ (`$CXX`, else `c++`).
//!
//! Without the headers (`/usr/include/hsa/hsa_api_trace.h`) the test skips, unless
//! `KREPLAY_REQUIRE_HSA=1` (CI sets it, and installs the package in `.ci/run`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;

use replay_hsa::sys::{self, v1};

const HEADERS: &str = "/usr/include/hsa";

/// `(label, C expression, Rust value)`.
fn expectations() -> Vec<(String, String, usize)> {
    let mut v: Vec<(String, String, usize)> = Vec::new();
    let mut size = |name: &str, rust: usize| {
        v.push((format!("sizeof {name}"), format!("sizeof({name})"), rust));
    };
    size("ApiTableVersion", size_of::<sys::ApiTableVersion>());
    size("HsaApiTable", size_of::<v1::HsaApiTable>());
    size("CoreApiTable", size_of::<v1::CoreApiTable>());
    size("AmdExtTable", size_of::<v1::AmdExtTable>());
    size("hsa_queue_t", size_of::<sys::hsa_queue_t>());
    size(
        "hsa_kernel_dispatch_packet_t",
        size_of::<sys::hsa_kernel_dispatch_packet_t>(),
    );
    size(
        "hsa_barrier_and_packet_t",
        size_of::<sys::hsa_barrier_and_packet_t>(),
    );
    size(
        "hsa_amd_pointer_info_t",
        size_of::<sys::hsa_amd_pointer_info_t>(),
    );
    size("hsa_signal_t", size_of::<sys::hsa_signal_t>());
    size("hsa_agent_t", size_of::<sys::hsa_agent_t>());
    size("hsa_region_t", size_of::<sys::hsa_region_t>());
    size(
        "hsa_amd_memory_pool_t",
        size_of::<sys::hsa_amd_memory_pool_t>(),
    );
    size("hsa_status_t", size_of::<sys::hsa_status_t>());
    size(
        "hsa_amd_ipc_memory_t",
        size_of::<sys::hsa_amd_ipc_memory_t>(),
    );

    let mut field = |s: &str, c: &str, rust: usize| {
        v.push((
            format!("offsetof {s}.{c}"),
            format!("offsetof({s}, {c})"),
            rust,
        ));
    };
    macro_rules! fields {
        ($s:literal, $t:ty, [$($rust:ident = $c:ident),* $(,)?]) => {
            $(field($s, stringify!($c), offset_of!($t, $rust));)*
        };
    }
    fields!(
        "ApiTableVersion",
        sys::ApiTableVersion,
        [
            major_id = major_id,
            minor_id = minor_id,
            step_id = step_id,
            reserved = reserved,
        ]
    );
    fields!(
        "HsaApiTable",
        v1::HsaApiTable,
        [
            version = version,
            core_ = core_,
            amd_ext_ = amd_ext_,
            finalizer_ext_ = finalizer_ext_,
            image_ext_ = image_ext_,
        ]
    );
    fields!("hsa_queue_t", sys::hsa_queue_t, [
        type_ = type, features = features, base_address = base_address,
        doorbell_signal = doorbell_signal, size = size, reserved1 = reserved1, id = id,
    ]);
    fields!(
        "hsa_kernel_dispatch_packet_t",
        sys::hsa_kernel_dispatch_packet_t,
        [
            header = header,
            setup = setup,
            workgroup_size_x = workgroup_size_x,
            workgroup_size_y = workgroup_size_y,
            workgroup_size_z = workgroup_size_z,
            reserved0 = reserved0,
            grid_size_x = grid_size_x,
            grid_size_y = grid_size_y,
            grid_size_z = grid_size_z,
            private_segment_size = private_segment_size,
            group_segment_size = group_segment_size,
            kernel_object = kernel_object,
            kernarg_address = kernarg_address,
            reserved2 = reserved2,
            completion_signal = completion_signal,
        ]
    );
    fields!(
        "hsa_barrier_and_packet_t",
        sys::hsa_barrier_and_packet_t,
        [
            header = header,
            reserved0 = reserved0,
            reserved1 = reserved1,
            dep_signal = dep_signal,
            reserved2 = reserved2,
            completion_signal = completion_signal,
        ]
    );
    fields!("hsa_amd_pointer_info_t", sys::hsa_amd_pointer_info_t, [
        size = size, type_ = type, agentBaseAddress = agentBaseAddress,
        hostBaseAddress = hostBaseAddress, sizeInBytes = sizeInBytes, userData = userData,
        agentOwner = agentOwner, global_flags = global_flags,
    ]);
    // Every entry of the bound tables, by the name the binding gives it.
    for (s, entries) in [
        ("CoreApiTable", v1::CoreApiTable::entry_offsets()),
        ("AmdExtTable", v1::AmdExtTable::entry_offsets()),
    ] {
        for (name, off) in entries {
            field(s, name, off);
        }
    }

    let mut constant = |c: &str, rust: usize| {
        v.push((format!("value {c}"), format!("(size_t)({c})"), rust));
    };
    macro_rules! constants {
        ($($c:ident),* $(,)?) => { $(constant(stringify!($c), sys::$c as usize);)* };
    }
    constants!(
        HSA_STATUS_SUCCESS,
        HSA_STATUS_INFO_BREAK,
        HSA_STATUS_ERROR,
        HSA_STATUS_ERROR_INVALID_ARGUMENT,
        HSA_STATUS_ERROR_OUT_OF_RESOURCES,
        HSA_STATUS_ERROR_NOT_INITIALIZED,
        HSA_AGENT_INFO_DEVICE,
        HSA_DEVICE_TYPE_CPU,
        HSA_DEVICE_TYPE_GPU,
        HSA_DEVICE_TYPE_DSP,
        HSA_REGION_INFO_SEGMENT,
        HSA_REGION_INFO_GLOBAL_FLAGS,
        HSA_REGION_SEGMENT_GLOBAL,
        HSA_REGION_SEGMENT_READONLY,
        HSA_REGION_SEGMENT_KERNARG,
        HSA_REGION_GLOBAL_FLAG_KERNARG,
        HSA_REGION_GLOBAL_FLAG_FINE_GRAINED,
        HSA_REGION_GLOBAL_FLAG_COARSE_GRAINED,
        HSA_AMD_MEMORY_POOL_INFO_SEGMENT,
        HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
        HSA_AMD_MEMORY_POOL_INFO_SIZE,
        HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
        HSA_AMD_SEGMENT_GLOBAL,
        HSA_AMD_SEGMENT_READONLY,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
        HSA_EXT_POINTER_TYPE_UNKNOWN,
        HSA_EXT_POINTER_TYPE_HSA,
        HSA_EXT_POINTER_TYPE_LOCKED,
        HSA_EXT_POINTER_TYPE_IPC,
        HSA_EXT_POINTER_TYPE_GRAPHICS,
        HSA_PACKET_TYPE_VENDOR_SPECIFIC,
        HSA_PACKET_TYPE_KERNEL_DISPATCH,
        HSA_PACKET_TYPE_BARRIER_AND,
        HSA_PACKET_TYPE_BARRIER_OR,
        HSA_PACKET_HEADER_BARRIER,
        HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE,
        HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE,
        HSA_FENCE_SCOPE_SYSTEM,
        HSA_FENCE_SCOPE_AGENT,
        HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY,
        HSA_SYMBOL_KIND_VARIABLE,
        HSA_SYMBOL_KIND_KERNEL,
        HSA_EXECUTABLE_SYMBOL_INFO_TYPE,
        HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH,
        HSA_EXECUTABLE_SYMBOL_INFO_NAME,
        HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE,
        HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST,
        HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
    );
    v
}

#[test]
fn major1_bindings_match_debians_headers() {
    if !Path::new(HEADERS).join("hsa_api_trace.h").exists() {
        assert!(
            std::env::var_os("KREPLAY_REQUIRE_HSA").is_none(),
            "KREPLAY_REQUIRE_HSA is set but {HEADERS}/hsa_api_trace.h is missing (apt-get install libhsa-runtime-dev)"
        );
        eprintln!("{HEADERS}/hsa_api_trace.h is missing; skipping (install libhsa-runtime-dev)");
        return;
    }
    let expected = expectations();
    let mut src = String::from(
        "// Generated by crates/replay-hsa/tests/layout_major1.rs.\n\
         #define AMD_INTERNAL_BUILD 1\n#include <hsa_api_trace.h>\n#include <cstddef>\n#include <cstdio>\n\
         int main() {\n",
    );
    for (label, expr, _) in &expected {
        writeln!(
            src,
            "  std::printf(\"%s %zu\\n\", \"{label}\", (size_t)({expr}));"
        )
        .unwrap();
    }
    src.push_str("  return 0;\n}\n");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay-hsa-layout");
    std::fs::create_dir_all(&dir).unwrap();
    let cpp = dir.join("layout_major1.cpp");
    let exe = dir.join("layout_major1");
    std::fs::write(&cpp, &src).unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        .args([
            "-std=c++17",
            "-Wall",
            "-Wno-deprecated-declarations",
            "-I",
            HEADERS,
        ])
        .arg(&cpp)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("could not run {cxx}: {e}"));
    assert!(
        out.status.success(),
        "compiling {} against {HEADERS} failed:\n{}",
        cpp.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let printed: BTreeMap<String, usize> = String::from_utf8_lossy(&run.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect();
    let mismatches: Vec<String> = expected
        .iter()
        .filter(|(label, _, rust)| printed.get(label) != Some(rust))
        .map(|(label, _, rust)| format!("{label}: header {:?}, Rust {rust}", printed.get(label)))
        .collect();
    assert!(
        mismatches.is_empty(),
        "layout mismatches:\n{}",
        mismatches.join("\n")
    );
    assert!(expected.len() > 250, "too few checks: {}", expected.len());
    println!(
        "{} sizes, offsets and values match {HEADERS}",
        expected.len()
    );
}
