//! The `module` role (code objects, SPEC §7.1): the simulated code-object loader and its
//! module-scope variables, exposed to the memory layer through
//! [`replay_memory::ModuleVariables`].
//!
//! Application allocations and frees are reported by the device itself
//! ([`crate::SimRuntime::alloc`], [`crate::SimRuntime::free`]: the free is recorded *before*
//! the memory is released). Module variables are not reported as allocations: like
//! `__device__` globals they are found by enumerating the loaded code objects at snapshot time.
//! Their storage is device memory of class `MODULE_VARIABLE` (`| READ_ONLY` for constants,
//! which kernels cannot store to). A code object's handle is never reused, so it is the load
//! generation the memory layer re-checks before a restore; an unload removes the code object
//! inside [`replay_memory::Tracker::release_with`], so it waits for a restore in flight.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use replay_core::{AgentId, MemoryClass};
use replay_memory::{ModuleVariable, ModuleVariables};

use crate::error::SimError;
use crate::fault::Fault;
use crate::heap::{Area, Owner, Pool};
use crate::kernel::{next_symbol, Kernel, KernelBody, KernelCtx, KernelError};
use crate::state::{GpuShared, Loaded};

static NEXT_CODE_OBJECT: AtomicU64 = AtomicU64::new(1);

/// A variable of a code object to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariableSpec {
    /// Symbol name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// A constant (`__constant__`): kernels cannot store to it; the snapshot skips it.
    pub read_only: bool,
    /// Initial bytes (zero-filled up to `size`).
    pub init: Vec<u8>,
}

/// A code object to load: variables and kernels.
#[derive(Clone, Default)]
pub struct ModuleSpec {
    name: String,
    variables: Vec<VariableSpec>,
    kernels: Vec<(String, KernelBody, Option<Duration>)>,
}

impl std::fmt::Debug for ModuleSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleSpec")
            .field("name", &self.name)
            .field("variables", &self.variables)
            .field(
                "kernels",
                &self.kernels.iter().map(|k| &k.0).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl ModuleSpec {
    /// An empty code object.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            ..Self::default()
        }
    }

    /// A zero-initialised writable variable (any size: a large one is fine).
    pub fn variable(mut self, name: &str, size: u64) -> Self {
        self.variables.push(VariableSpec {
            name: name.into(),
            size,
            read_only: false,
            init: Vec::new(),
        });
        self
    }

    /// A writable variable with initial bytes.
    pub fn variable_init(mut self, name: &str, init: &[u8]) -> Self {
        self.variables.push(VariableSpec {
            name: name.into(),
            size: init.len() as u64,
            read_only: false,
            init: init.to_vec(),
        });
        self
    }

    /// A read-only constant.
    pub fn constant(mut self, name: &str, init: &[u8]) -> Self {
        self.variables.push(VariableSpec {
            name: name.into(),
            size: init.len() as u64,
            read_only: true,
            init: init.to_vec(),
        });
        self
    }

    /// The code object's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The simulator's stand-in for a code image (a capture's `code` file, SPEC §13): the
    /// module's name, kernels and variables (with initial bytes) as text, one per line.
    /// Kernels are Rust closures, so a replay finds them by name in a module the replaying
    /// program provides, and this text says whether that module is the one captured.
    pub fn describe(&self) -> String {
        use std::fmt::Write as _;
        let mut s = format!("sim-module {}\n", self.name);
        for (k, _, d) in &self.kernels {
            let _ = writeln!(s, "kernel {k} {}", d.map_or(0, |d| d.as_nanos()));
        }
        for v in &self.variables {
            let init: String = v.init.iter().map(|b| format!("{b:02x}")).collect();
            let ro = if v.read_only { "constant" } else { "variable" };
            let _ = writeln!(s, "{ro} {} {} {init}", v.name, v.size);
        }
        s
    }

    /// A kernel of this code object.
    pub fn kernel(
        mut self,
        name: &str,
        body: impl Fn(&mut KernelCtx<'_>) -> Result<(), KernelError> + Send + Sync + 'static,
    ) -> Self {
        self.kernels.push((name.into(), Arc::new(body), None));
        self
    }

    /// A kernel with a modelled run time.
    pub fn kernel_timed(
        mut self,
        name: &str,
        duration: Duration,
        body: impl Fn(&mut KernelCtx<'_>) -> Result<(), KernelError> + Send + Sync + 'static,
    ) -> Self {
        self.kernels
            .push((name.into(), Arc::new(body), Some(duration)));
        self
    }
}

/// A loaded code object.
#[derive(Debug, Clone)]
pub struct Module {
    /// Agent it is loaded on.
    pub agent: AgentId,
    /// Its handle (the `code_object` of its kernels' keys).
    pub code_object: u64,
    /// Its name.
    pub name: String,
    variables: Vec<ModuleVariable>,
    kernels: Vec<Kernel>,
}

impl Module {
    /// Device address of a variable.
    pub fn variable(&self, name: &str) -> Option<u64> {
        self.variables
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.base)
    }

    /// Every variable.
    pub fn variables(&self) -> &[ModuleVariable] {
        &self.variables
    }

    /// A kernel by name.
    pub fn kernel(&self, name: &str) -> Option<Kernel> {
        self.kernels.iter().find(|k| &*k.name == name).cloned()
    }

    /// Every kernel.
    pub fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }
}

impl GpuShared {
    pub(crate) fn load_module(&self, agent: AgentId, spec: ModuleSpec) -> Result<Module, SimError> {
        let a = self.agent_or_err(agent)?;
        let code_object = NEXT_CODE_OBJECT.fetch_add(1, Ordering::Relaxed);
        let mut variables = Vec::with_capacity(spec.variables.len());
        for v in &spec.variables {
            let mut class = MemoryClass::MODULE_VARIABLE;
            if v.read_only {
                class |= MemoryClass::READ_ONLY;
            }
            let alloc = match a.heap.alloc(
                v.size,
                class,
                Owner::Module,
                Area::Device,
                Pool::Device,
                None,
            ) {
                Ok(x) => x,
                Err(e) => {
                    for done in &variables {
                        let done: &ModuleVariable = done;
                        a.heap.remove(done.base);
                    }
                    return Err(e);
                }
            };
            if !v.init.is_empty() {
                let n = v.init.len().min(v.size as usize);
                alloc.data.write()[..n].copy_from_slice(&v.init[..n]);
            }
            variables.push(ModuleVariable {
                name: v.name.clone(),
                base: alloc.base,
                size: v.size,
                read_only: v.read_only,
            });
        }
        let kernels = spec
            .kernels
            .iter()
            .map(|(name, body, duration)| {
                let mut k = Kernel::from_body(name, Arc::clone(body));
                k.code_object = code_object;
                k.symbol = next_symbol();
                k.duration = *duration;
                k
            })
            .collect();
        self.modules.loaded.write().push(Loaded {
            agent,
            code_object,
            variables: variables.clone(),
            name: spec.name.clone(),
            image: spec.describe(),
        });
        Ok(Module {
            agent,
            code_object,
            name: spec.name,
            variables,
            kernels,
        })
    }

    pub(crate) fn unload_module(&self, agent: AgentId, code_object: u64) -> Result<(), SimError> {
        let a = self.agent_or_err(agent)?;
        let ranges: Vec<(u64, u64)> = self
            .modules
            .loaded
            .read()
            .iter()
            .filter(|m| m.agent == agent && m.code_object == code_object)
            .flat_map(|m| m.variables.iter().map(|v| (v.base, v.size)))
            .collect();
        // SPEC §7.1: an unload of captured variables waits for a restore in flight; once the
        // code object leaves the table, every later liveness check of its variables fails.
        let removed = self.tracker.release_with(agent, &ranges, || {
            let mut l = self.modules.loaded.write();
            let i = l
                .iter()
                .position(|m| m.agent == agent && m.code_object == code_object)
                .ok_or_else(|| {
                    SimError::Invalid(format!(
                        "code object {code_object} is not loaded on agent {agent}"
                    ))
                })?;
            Ok::<_, SimError>(l.remove(i))
        })?;
        for v in removed.variables {
            a.heap.remove(v.base);
        }
        Ok(())
    }

    /// The code object (its handle is never reused) whose variable holds `addr` on `agent`.
    fn module_load_of(&self, agent: AgentId, addr: u64) -> Option<u64> {
        self.modules
            .loaded
            .read()
            .iter()
            .find(|m| {
                m.agent == agent
                    && m.variables
                        .iter()
                        .any(|v| v.base <= addr && addr < v.base + v.size.max(1))
            })
            .map(|m| m.code_object)
    }

    fn enumerate_modules(&self, agent: AgentId) -> Result<Vec<ModuleVariable>, String> {
        if let Some(f) = self.take_fault(agent, |f| *f == Fault::IncompleteModuleEnumeration) {
            return Err(format!(
                "injected {f}: a code object's symbol table could not be iterated"
            ));
        }
        Ok(self
            .modules
            .loaded
            .read()
            .iter()
            .filter(|m| m.agent == agent)
            .flat_map(|m| m.variables.iter().cloned())
            .collect())
    }
}

/// The simulated loader's module variables, as the memory layer enumerates them.
pub struct SimModuleVariables {
    pub(crate) gpu: Arc<GpuShared>,
}

impl std::fmt::Debug for SimModuleVariables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimModuleVariables").finish_non_exhaustive()
    }
}

impl ModuleVariables for SimModuleVariables {
    fn enumerate(&self, agent: AgentId) -> Result<Vec<ModuleVariable>, String> {
        self.gpu.enumerate_modules(agent)
    }

    fn load_generation(&self, agent: AgentId, addr: u64) -> Option<u64> {
        self.gpu.module_load_of(agent, addr)
    }
}
