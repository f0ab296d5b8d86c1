//! Device-side services a kernel's code calls whose effects no snapshot sees (SPEC §9.2
//! "Writes the snapshot cannot see"), read from the symbols of the loaded image.
//!
//! A cubin that calls the device heap (`malloc`, `free`), device `printf` (`vprintf`) or
//! launches a graph from the device (`cudaGraphLaunch` of the device runtime) names those
//! functions in its symbol table (undefined: the driver links them at load time); a PTX
//! image declares them `.extern .func`. The heap lives in memory only the driver knows (each
//! pass would allocate again, and a pass's `free` of a block the snapshot restored frees it
//! twice), `printf`'s buffer is printed once per pass, and a device-launched graph's kernels
//! write wherever their own arguments point. The image, not the kernel, is the unit: which of
//! its kernels reach the call (through device functions) is not worked out, so every kernel
//! of such an image declines.

use serde::Serialize;

/// A device-side service whose effects no snapshot sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceService {
    /// The device-side heap (`malloc` / `free` in kernels).
    Heap,
    /// Device `printf` (`vprintf`).
    Printf,
    /// A graph launched from the device (`cudaGraphLaunch` in device code).
    GraphLaunch,
}

impl DeviceService {
    /// Name in logs and counters.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Heap => "device_heap",
            Self::Printf => "device_printf",
            Self::GraphLaunch => "device_graph_launch",
        }
    }

    /// What a decline says about it.
    pub const fn why(self) -> &'static str {
        match self {
            Self::Heap => "calls the device-side heap (malloc/free), which no snapshot restores",
            Self::Printf => "calls device printf, which would print once per pass",
            Self::GraphLaunch => {
                "launches a graph from the device, whose kernels write memory the scope does not see"
            }
        }
    }

    /// The service a function of this name is, if any.
    pub fn of_name(name: &str) -> Option<Self> {
        match name {
            "malloc" | "free" | "__nv_aligned_device_malloc" => Some(Self::Heap),
            "vprintf" => Some(Self::Printf),
            n if n.starts_with("cudaGraphLaunch") => Some(Self::GraphLaunch),
            _ => None,
        }
    }
}

/// The services named among `names` (a cubin's symbols), sorted, each once.
pub fn of_symbols<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<DeviceService> {
    let mut v: Vec<DeviceService> = names
        .into_iter()
        .filter_map(DeviceService::of_name)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The services a PTX text declares as external functions (`.extern .func ... vprintf(`).
pub fn of_ptx(text: &[u8]) -> Vec<DeviceService> {
    let text = String::from_utf8_lossy(text);
    let mut names = Vec::new();
    // A declaration may span lines (its return parameter first): join them up to the `;`.
    for decl in text.split(';') {
        let Some(at) = decl.find(".extern") else {
            continue;
        };
        let d = &decl[at..];
        if !d.contains(".func") {
            continue;
        }
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
        names.extend(d.split(|c: char| !ident(c)).filter(|t| !t.is_empty()));
    }
    of_symbols(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_services() {
        assert_eq!(
            of_symbols(["kr_rmw", "vprintf", "malloc", "free", "vprintf"]),
            vec![DeviceService::Heap, DeviceService::Printf]
        );
        assert_eq!(
            of_symbols(["cudaGraphLaunch_ptsz"]),
            vec![DeviceService::GraphLaunch]
        );
        assert!(of_symbols(["kr_free_list", "mallocx", "printf"]).is_empty());
    }

    #[test]
    fn ptx_external_declarations_are_read() {
        let ptx = b".version 8.4\n.target sm_90\n.address_size 64\n\
            .extern .func  (.param .b32 func_retval0) vprintf\n(\n\t.param .b64 vprintf_param_0,\n\t.param .b64 vprintf_param_1\n)\n;\n\
            .visible .entry k()\n{\n\tret;\n}\n";
        assert_eq!(of_ptx(ptx), vec![DeviceService::Printf]);
        // A kernel that merely mentions the word is not a declaration.
        let plain = b".version 8.4\n.visible .entry malloc_free_test()\n{\n\tret;\n}\n";
        assert!(of_ptx(plain).is_empty());
    }
}
