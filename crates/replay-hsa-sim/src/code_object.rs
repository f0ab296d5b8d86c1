//! The simulated runtime's code objects (SPEC §9.1, §13): what an application hands to
//! `hsa_code_object_reader_create_from_memory` and loads with
//! `hsa_executable_load_agent_code_object`, as bytes.
//!
//! A real code object is an ELF holding machine code; the simulator's kernels are Rust
//! closures, so its code object is a short text naming them: each kernel symbol (with its
//! argument block size) and each module variable (with its size and whether it is
//! `__constant__`). Loading it looks every kernel up by name among the bodies defined with
//! [`crate::SimHsa::define_kernel`] (process-wide), so a later process that defines the same
//! bodies loads the same bytes again. The format:
//!
//! ```text
//! hsa-sim-code-object 1
//! kernel NAME KERNARG_BYTES
//! variable NAME SIZE rw|const
//! ```

use crate::state::VariableSpec;

/// The first line of every simulated code object.
pub const MAGIC: &str = "hsa-sim-code-object 1";

/// A kernel symbol of a code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSpec {
    /// The symbol's name (as the executable reports it; code-object v3+ names end in `.kd`).
    pub name: String,
    /// Its argument block size in bytes, hidden arguments included.
    pub kernarg_size: u32,
}

/// A simulated code object: its kernel symbols and module variables.
#[derive(Debug, Clone, Default)]
pub struct CodeObject {
    /// Kernel symbols.
    pub kernels: Vec<KernelSpec>,
    /// Module variables.
    pub variables: Vec<VariableSpec>,
}

impl CodeObject {
    /// An empty code object.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a kernel symbol.
    pub fn kernel(mut self, name: &str, kernarg_size: u32) -> Self {
        self.kernels.push(KernelSpec {
            name: name.into(),
            kernarg_size,
        });
        self
    }

    /// Adds a module variable.
    pub fn variable(mut self, name: &str, size: u32, is_const: bool) -> Self {
        self.variables.push(VariableSpec {
            name: name.into(),
            size,
            is_const,
        });
        self
    }

    /// The bytes an application loads.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut s = format!("{MAGIC}\n");
        for k in &self.kernels {
            s.push_str(&format!("kernel {} {}\n", k.name, k.kernarg_size));
        }
        for v in &self.variables {
            let access = if v.is_const { "const" } else { "rw" };
            s.push_str(&format!("variable {} {} {access}\n", v.name, v.size));
        }
        s.into_bytes()
    }

    /// Parses loaded bytes; `None` when they are not a simulated code object.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let mut co = Self::new();
        for line in lines.filter(|l| !l.trim().is_empty()) {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["kernel", name, size] => co = co.kernel(name, size.parse().ok()?),
                ["variable", name, size, access @ ("rw" | "const")] => {
                    co = co.variable(name, size.parse().ok()?, *access == "const")
                }
                _ => return None,
            }
        }
        Some(co)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_object_reads_back_as_written_and_other_bytes_are_refused() {
        let co = CodeObject::new()
            .kernel("scale.kd", 24)
            .variable("factor", 8, false)
            .variable("table", 64, true);
        let back = CodeObject::parse(&co.to_bytes()).unwrap();
        assert_eq!(back.kernels, co.kernels);
        assert_eq!(
            back.variables
                .iter()
                .map(|v| (v.name.as_str(), v.size, v.is_const))
                .collect::<Vec<_>>(),
            vec![("factor", 8, false), ("table", 64, true)]
        );
        assert!(CodeObject::parse(b"\x7fELF\x02\x01").is_none());
        assert!(CodeObject::parse(format!("{MAGIC}\nkernel k x\n").as_bytes()).is_none());
    }
}
