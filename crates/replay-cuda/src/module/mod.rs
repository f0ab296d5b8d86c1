//! Code objects (SPEC §7.1, §9.2): compiling CUDA C with NVRTC, loading cubin images, and
//! enumerating their module-scope variables for the memory layer.
//!
//! The driver looks globals up by name only (`cuModuleGetGlobal`), so the names come from the
//! image's ELF symbol table ([`elf`]): object symbols in `.nv.global*` (writable) and
//! `.nv.constant*` (read-only) sections. Each is resolved to its device address when the
//! module is loaded; a writable symbol the driver does not resolve by name (a `static`
//! variable, say) gets its address from a resolved symbol of the same section (section base
//! plus symbol offset). A writable symbol that can be resolved neither way makes the module's
//! enumeration incomplete, and a snapshot then declines `untracked_memory` rather than miss
//! it. A PTX or fatbinary image loaded here has no ELF symbol table: its enumeration is
//! incomplete too (load cubins, which is what NVRTC's `nvrtcGetCUBIN` returns for a real
//! architecture). The application's images under interception are read further: a fat
//! binary's entry for the device, decompressed where compressed ([`image`]), and a PTX
//! text's `.global` variables ([`ptx`]).
//!
//! The [`ModuleRegistry`] of an agent is its [`replay_memory::ModuleVariables`]: it lists the
//! variables of every module loaded through it and still alive, at snapshot time. The
//! backend's own modules (the digest kernels) are never registered.

pub mod demangle;
pub mod elf;
pub mod image;
pub mod ptx;
pub mod services;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use cudarc::nvrtc;
use parking_lot::Mutex;
use replay_core::AgentId;
use replay_memory::{ModuleVariable, ModuleVariables};

use crate::device::Device;
use crate::error::{CudaError, CudaResult, NvrtcUnavailable};
use crate::launch::{ParamSlot, MAX_PARAM_BYTES};
use crate::result::{self, DriverCall};
use crate::sys;

static NVRTC: OnceLock<Result<(), NvrtcUnavailable>> = OnceLock::new();

/// `sub` (`lib64`, `bin`) of every CUDA installation this machine may have, in the order a
/// lookup should try them: `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`, then every
/// `/usr/local/cuda-*`, newest version first.
pub fn cuda_install_dirs(sub: &str) -> Vec<std::path::PathBuf> {
    use std::path::PathBuf;
    let mut dirs: Vec<PathBuf> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(v) = std::env::var(var) {
            dirs.push(PathBuf::from(v).join(sub));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda").join(sub));
    if let Ok(rd) = std::fs::read_dir("/usr/local") {
        let mut more: Vec<PathBuf> = rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("cuda-"))
            })
            .map(|p| p.join(sub))
            .collect();
        more.sort();
        more.reverse(); // newest version first
        dirs.extend(more);
    }
    dirs
}

/// Directories searched for libnvrtc by absolute path when the loader path does not find it:
/// `KREPLAY_CUDA_LIB_DIR` (colon-separated), then the installations' `lib64`
/// ([`cuda_install_dirs`]).
pub fn nvrtc_search_dirs() -> Vec<std::path::PathBuf> {
    use std::path::PathBuf;
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(v) = std::env::var("KREPLAY_CUDA_LIB_DIR") {
        dirs.extend(v.split(':').filter(|s| !s.is_empty()).map(PathBuf::from));
    }
    dirs.extend(cuda_install_dirs("lib64"));
    dirs
}

/// Makes NVRTC loadable: first by name on the loader path (what cudarc does), else by absolute
/// path from [`nvrtc_search_dirs`]. A library opened by absolute path is kept loaded, and the
/// dynamic loader then satisfies cudarc's open by name through the library's soname, so
/// nothing else changes. `libnvrtc-builtins` from the same directory is preloaded likewise.
pub fn nvrtc_available() -> Result<(), NvrtcUnavailable> {
    NVRTC
        .get_or_init(|| {
            // SAFETY: only tries dlopen on candidate names (and closes them again); loading
            // libnvrtc runs its initialisers, as in any program that uses it.
            if unsafe { nvrtc::sys::is_culib_present() } {
                return Ok(());
            }
            let dirs = nvrtc_search_dirs();
            for dir in &dirs {
                let Ok(rd) = std::fs::read_dir(dir) else {
                    continue;
                };
                let mut names: Vec<String> = rd
                    .filter_map(Result::ok)
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect();
                names.sort();
                let main = names
                    .iter()
                    .find(|n| n.starts_with("libnvrtc.so.") && !n.contains("alt") && n.len() > 12);
                let Some(main) = main else { continue };
                // The builtins first: libnvrtc opens them by soname when it compiles.
                for n in names
                    .iter()
                    .filter(|n| n.starts_with("libnvrtc-builtins.so.") && !n.contains("alt"))
                {
                    preload(&dir.join(n));
                }
                if preload(&dir.join(main)) {
                    // SAFETY: as above.
                    if unsafe { nvrtc::sys::is_culib_present() } {
                        log::debug!("[kernel-replay] NVRTC loaded from {}", dir.display());
                        return Ok(());
                    }
                }
            }
            Err(NvrtcUnavailable {
                tried: cudarc::get_lib_name_candidates("nvrtc"),
                dirs: dirs.iter().map(|d| d.display().to_string()).collect(),
            })
        })
        .clone()
}

/// Opens a library by absolute path, globally, and keeps it loaded for the process.
fn preload(path: &std::path::Path) -> bool {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading a shared library runs its initialisers; these are NVIDIA's NVRTC
    // libraries found in a CUDA installation directory, which is what any NVRTC user loads.
    match unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) } {
        Ok(lib) => {
            // Kept for the life of the process: cudarc's own handle resolves to it by soname.
            std::mem::forget(lib);
            true
        }
        Err(e) => {
            log::debug!("[kernel-replay] could not preload {}: {e}", path.display());
            false
        }
    }
}

/// Compiles CUDA C `source` to a cubin for compute capability `arch` with NVRTC.
/// `extra` options are appended (`--gpu-architecture` and `--std=c++17` are set already).
pub fn compile_cubin(
    source: &str,
    program: &str,
    arch: (i32, i32),
    extra: &[&str],
) -> CudaResult<Vec<u8>> {
    compile_cubin_logged(source, program, arch, extra).map(|(c, _)| c)
}

/// [`compile_cubin`], also returning the compiler's log (warnings, `--ptxas-options=-v`).
pub fn compile_cubin_logged(
    source: &str,
    program: &str,
    arch: (i32, i32),
    extra: &[&str],
) -> CudaResult<(Vec<u8>, String)> {
    nvrtc_available()?;
    let nv = |call: &'static str, e: nvrtc::result::NvrtcError| CudaError::Compile {
        program: program.to_string(),
        message: format!("{call}: {:?}", e.0),
        log: String::new(),
    };
    let src = CString::new(source)
        .map_err(|_| CudaError::InvalidArgument("CUDA source contains a NUL byte".into()))?;
    let name = CString::new(program)
        .map_err(|_| CudaError::InvalidArgument("program name contains a NUL byte".into()))?;
    let prog = nvrtc::result::create_program(&src, Some(&name))
        .map_err(|e| nv("nvrtcCreateProgram", e))?;
    let mut opts = vec![
        format!("--gpu-architecture=sm_{}{}", arch.0, arch.1),
        "--std=c++17".to_string(),
    ];
    opts.extend(extra.iter().map(|s| s.to_string()));
    // SAFETY: `prog` was created above and is destroyed once, below; `src` and `name` outlive
    // it.
    let compiled = unsafe { nvrtc::result::compile_program(prog, &opts) };
    let log = {
        // SAFETY: as above.
        let raw = unsafe { nvrtc::result::get_program_log(prog) }.unwrap_or_default();
        let bytes: Vec<u8> = raw
            .iter()
            .map(|&c| c as u8)
            .take_while(|&b| b != 0)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let out = match compiled {
        Err(e) => Err(CudaError::Compile {
            program: program.to_string(),
            message: format!("{:?}", e.0),
            log,
        }),
        Ok(()) => {
            if !log.trim().is_empty() {
                log::debug!("[kernel-replay] NVRTC log for {program}: {log}");
            }
            let mut size = 0usize;
            // SAFETY: `prog` is a compiled program; the out pointer is a live local.
            let r = unsafe { nvrtc::sys::nvrtcGetCUBINSize(prog, &mut size) };
            match r.result() {
                Err(e) => Err(nv("nvrtcGetCUBINSize", e)),
                Ok(()) if size == 0 => Err(CudaError::Compile {
                    program: program.to_string(),
                    message: "NVRTC produced no cubin (was a virtual architecture asked for?)"
                        .into(),
                    log,
                }),
                Ok(()) => {
                    let mut buf = vec![0u8; size];
                    // SAFETY: `buf` holds `size` bytes, as nvrtcGetCUBINSize reported.
                    let r = unsafe { nvrtc::sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast()) };
                    r.result()
                        .map(|()| (buf, log))
                        .map_err(|e| nv("nvrtcGetCUBIN", e))
                }
            }
        }
    };
    // SAFETY: created above, destroyed once.
    if let Err(e) = unsafe { nvrtc::result::destroy_program(prog) } {
        log::debug!("[kernel-replay] nvrtcDestroyProgram: {e:?}");
    }
    out
}

/// Every load gets a number that is never reused: the `code_object` of the kernels' keys, so
/// the library's memory of a misbehaving kernel cannot carry over to another module loaded at
/// the same address later (SPEC §7.2).
static NEXT_LOAD: AtomicU64 = AtomicU64::new(1);

/// A loaded module.
#[derive(Debug)]
pub struct CudaModule {
    raw: sys::CUmodule,
    device: Arc<Device>,
    load_id: u64,
    name: String,
    /// Module variables with their addresses, or why the enumeration is incomplete.
    variables: Result<Vec<ModuleVariable>, String>,
}

// SAFETY: a CUmodule is a driver handle used only in driver calls, which are thread-safe.
unsafe impl Send for CudaModule {}
// SAFETY: as above.
unsafe impl Sync for CudaModule {}

impl CudaModule {
    /// Loads a cubin (or PTX, whose variables cannot be enumerated) without registering it.
    fn load(device: &Arc<Device>, image: &[u8], name: &str) -> CudaResult<Self> {
        device.bind()?;
        let mut owned;
        let data: &[u8] = if image.first() == Some(&0x7f) || image.last() == Some(&0) {
            image
        } else {
            // PTX text must be NUL-terminated.
            owned = image.to_vec();
            owned.push(0);
            &owned
        };
        // SAFETY: `data` is a complete cubin/PTX image (NUL-terminated when text) that stays
        // alive for the call; the driver copies what it keeps.
        let raw =
            unsafe { result::module::load_data(data.as_ptr().cast()) }.call("cuModuleLoadData")?;
        let variables = match elf::global_symbols(image) {
            Ok(syms) => resolve_variables(raw, syms),
            Err(e) => Err(format!("module {name}: {e}")),
        };
        Ok(Self {
            raw,
            device: Arc::clone(device),
            load_id: NEXT_LOAD.fetch_add(1, Ordering::Relaxed),
            name: name.to_string(),
            variables,
        })
    }

    /// The never-reused load number (the `code_object` of its kernels' keys).
    pub fn load_id(&self) -> u64 {
        self.load_id
    }

    /// The name given at load.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The module's variables, or why they could not all be found.
    pub fn variables(&self) -> Result<&[ModuleVariable], &str> {
        self.variables.as_deref().map_err(String::as_str)
    }

    /// The raw handle.
    pub fn raw(&self) -> sys::CUmodule {
        self.raw
    }

    /// A kernel of the module by its (lowered) name.
    pub fn function(self: &Arc<Self>, name: &str) -> CudaResult<CudaFunction> {
        self.device.bind()?;
        let cname = CString::new(name)
            .map_err(|_| CudaError::InvalidArgument("kernel name contains a NUL byte".into()))?;
        // SAFETY: the module is loaded for as long as `self` lives.
        let raw =
            unsafe { result::module::get_function(self.raw, cname) }.call("cuModuleGetFunction")?;
        let attr = |a: sys::CUfunction_attribute| -> u32 {
            let mut v = 0i32;
            // SAFETY: `raw` is a function of a loaded module; out pointer to a live local.
            let r = unsafe { sys::cuFuncGetAttribute(&mut v, a, raw) };
            if r.result().is_ok() {
                v.max(0) as u32
            } else {
                0
            }
        };
        use sys::CUfunction_attribute as F;
        Ok(CudaFunction {
            module: Arc::clone(self),
            raw,
            name: name.into(),
            local_bytes: attr(F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
            static_shared_bytes: attr(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
        })
    }

    /// Address and size of a global by name (what `cuModuleGetGlobal` says).
    pub fn global(&self, name: &str) -> CudaResult<(u64, u64)> {
        self.device.bind()?;
        let cname = CString::new(name)
            .map_err(|_| CudaError::InvalidArgument("global name contains a NUL byte".into()))?;
        // SAFETY: the module is loaded for as long as `self` lives.
        let (p, s) =
            unsafe { result::module::get_global(self.raw, cname) }.call("cuModuleGetGlobal")?;
        Ok((p, s as u64))
    }
}

impl Drop for CudaModule {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: loaded once, unloaded once; no function of it is used after this (every
            // `CudaFunction` and pending launch holds an `Arc` to the module).
            if let Err(e) = unsafe { result::module::unload(self.raw) } {
                log::warn!("[kernel-replay] cuModuleUnload({}): {e}", self.name);
            }
        }
    }
}

/// Resolves the image's global symbols to device addresses (see the module docs).
fn resolve_variables(
    module: sys::CUmodule,
    syms: Vec<elf::GlobalSymbol>,
) -> Result<Vec<ModuleVariable>, String> {
    resolve_variables_with(syms, |name: &str| -> Option<(u64, u64)> {
        let c = CString::new(name).ok()?;
        // SAFETY: `module` was just loaded by the caller and is alive.
        unsafe { result::module::get_global(module, c) }
            .ok()
            .map(|(p, s)| (p, s as u64))
    })
}

/// [`resolve_variables`] with any lookup of a global's address and size by name.
fn resolve_variables_with(
    syms: Vec<elf::GlobalSymbol>,
    lookup: impl Fn(&str) -> Option<(u64, u64)>,
) -> Result<Vec<ModuleVariable>, String> {
    resolve_variables_placed(syms, lookup).map(|v| v.into_iter().map(|(v, _)| v).collect())
}

/// A variable and its section's block (base, size), where known.
type Placed = (ModuleVariable, Option<(u64, u64)>);

/// [`resolve_variables_with`], each variable with its section's block (base, the extent of
/// its symbols) where the driver placed it as the symbol table lays the section out.
fn resolve_variables_placed(
    syms: Vec<elf::GlobalSymbol>,
    lookup: impl Fn(&str) -> Option<(u64, u64)>,
) -> Result<Vec<Placed>, String> {
    // Section bases learned from symbols the driver resolved by name, and each section's
    // extent as far as its symbols reach.
    let mut bases: BTreeMap<usize, u64> = BTreeMap::new();
    let mut extent: BTreeMap<usize, u64> = BTreeMap::new();
    let mut resolved: Vec<Option<(u64, u64)>> = Vec::with_capacity(syms.len());
    for s in &syms {
        if s.size > 0 {
            let e = extent.entry(s.section).or_insert(0);
            *e = (*e).max(s.offset.saturating_add(s.size));
        }
        let r = if s.size == 0 { None } else { lookup(&s.name) };
        if let Some((addr, size)) = r {
            if size != s.size {
                log::debug!(
                    "[kernel-replay] global {}: the driver reports {size} bytes, the symbol table {}",
                    s.name,
                    s.size
                );
            }
            if let Some(base) = addr.checked_sub(s.offset) {
                bases.entry(s.section).or_insert(base);
            }
        }
        resolved.push(r);
    }
    let mut out = Vec::with_capacity(syms.len());
    let mut missing = Vec::new();
    for (s, r) in syms.iter().zip(resolved) {
        if s.size == 0 {
            continue;
        }
        let (base, size) = match r {
            Some((a, sz)) => (a, sz.max(s.size)),
            None => match bases.get(&s.section) {
                Some(b) => (b + s.offset, s.size),
                None if s.read_only => continue, // constants are never captured anyway
                None => {
                    missing.push(s.name.clone());
                    continue;
                }
            },
        };
        let section = bases
            .get(&s.section)
            .filter(|&&b| b.wrapping_add(s.offset) == base)
            .map(|&b| (b, extent.get(&s.section).copied().unwrap_or(0)));
        out.push((
            ModuleVariable {
                name: s.name.clone(),
                base,
                size,
                read_only: s.read_only,
            },
            section,
        ));
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(format!(
            "globals {missing:?} could be resolved neither by name nor through their section"
        ))
    }
}

/// A kernel of a loaded module.
#[derive(Debug, Clone)]
pub struct CudaFunction {
    module: Arc<CudaModule>,
    raw: sys::CUfunction,
    name: Arc<str>,
    local_bytes: u32,
    static_shared_bytes: u32,
}

// SAFETY: a CUfunction is a driver handle used only in driver calls.
unsafe impl Send for CudaFunction {}
// SAFETY: as above.
unsafe impl Sync for CudaFunction {}

impl CudaFunction {
    /// The raw handle.
    pub fn raw(&self) -> sys::CUfunction {
        self.raw
    }

    /// Kernel name.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Its module.
    pub fn module(&self) -> &Arc<CudaModule> {
        &self.module
    }

    /// Local (private) memory bytes per thread.
    pub fn local_bytes(&self) -> u32 {
        self.local_bytes
    }

    /// Static shared memory bytes per block.
    pub fn static_shared_bytes(&self) -> u32 {
        self.static_shared_bytes
    }

    /// The kernel's parameter layout as the driver reports it (`cuFuncGetParamInfo`, CUDA
    /// 12.4 and later): what an intercepted launch's argument block is captured with
    /// ([`crate::ArgBlock::capture`]).
    pub fn param_layout(&self) -> CudaResult<Vec<ParamSlot>> {
        self.module.device.bind()?;
        let mut out = Vec::new();
        for i in 0..MAX_PARAM_BYTES {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: `raw` is a function of a loaded module; out pointers to live locals.
            let r = unsafe { sys::cuFuncGetParamInfo(self.raw, i, &mut offset, &mut size) };
            match r {
                sys::CUresult::CUDA_SUCCESS => out.push(ParamSlot {
                    offset: offset as u32,
                    size: size as u32,
                }),
                // Past the last parameter.
                sys::CUresult::CUDA_ERROR_INVALID_VALUE => break,
                other => return other.call("cuFuncGetParamInfo").map(|()| Vec::new()),
            }
        }
        Ok(out)
    }
}

/// The modules of one agent, and their variables for the memory layer: the library's own
/// modules, and the application's images the interception read (by the application's handle,
/// with a load number of their own).
#[derive(Debug)]
pub struct ModuleRegistry {
    agent: AgentId,
    device: Arc<Device>,
    modules: Mutex<BTreeMap<u64, Weak<CudaModule>>>,
    foreign: Mutex<BTreeMap<usize, Foreign>>,
    /// The application images' variables by address: base -> (end, load number, the
    /// allocation holding it as the driver names it). The memory layer asks per region before
    /// every restore; applications hold thousands of globals.
    by_address: Mutex<BTreeMap<u64, Indexed>>,
    /// Bumped by every registration and removal (with the library's live modules, the
    /// [`ModuleVariables::generation`] answer).
    changes: AtomicU64,
}

/// One application variable in the address index.
#[derive(Debug, Clone, Copy)]
struct Indexed {
    end: u64,
    load_id: u64,
    allocation: Option<(u64, u64)>,
}

/// An application image's variables.
#[derive(Debug)]
struct Foreign {
    load_id: u64,
    variables: Result<Vec<ModuleVariable>, String>,
}

impl ModuleRegistry {
    /// An empty registry for `agent`.
    pub fn new(agent: AgentId, device: Arc<Device>) -> Self {
        Self {
            agent,
            device,
            modules: Mutex::new(BTreeMap::new()),
            foreign: Mutex::new(BTreeMap::new()),
            by_address: Mutex::new(BTreeMap::new()),
            changes: AtomicU64::new(0),
        }
    }

    /// Registers the globals of an application image (`handle`: its module or library
    /// handle), resolved through `lookup` (`cuModuleGetGlobal` or `cuLibraryGetGlobal`);
    /// `allocation_at` names the allocation holding an address where the driver can tell.
    /// Returns whether every writable one was resolved; if not, the enumeration fails (and
    /// replays on this agent decline) until the image is removed.
    pub fn add_foreign(
        &self,
        handle: usize,
        syms: Vec<elf::GlobalSymbol>,
        lookup: impl Fn(&str) -> Option<(u64, u64)>,
        allocation_at: impl Fn(u64) -> Option<(u64, u64)>,
    ) -> bool {
        let variables = resolve_variables_placed(syms, lookup)
            .map_err(|why| format!("application image {handle:#x}: {why}"));
        let ok = variables.is_ok();
        if let Err(why) = &variables {
            log::warn!(
                "[kernel-replay] {why}; replays on agent {} decline while it is loaded",
                self.agent
            );
        }
        let load_id = NEXT_LOAD.fetch_add(1, Ordering::Relaxed);
        if let Ok(vars) = &variables {
            // The block holding each variable: the allocation the driver's pointer attributes
            // name (one query per allocation: sorted by address, the variables of one
            // allocation are neighbours), else its section (each section of the image is
            // loaded as one block), when the driver placed it where the symbol table says.
            let mut sorted: Vec<_> = vars.iter().filter(|(v, _)| v.size > 0).collect();
            sorted.sort_by_key(|(v, _)| v.base);
            let mut last: Option<(u64, u64)> = None;
            let mut idx = self.by_address.lock();
            for (v, section) in sorted {
                let end = v.base.saturating_add(v.size);
                let inside = |a: (u64, u64)| a.0 <= v.base && end <= a.0.saturating_add(a.1);
                let from_driver = match last.filter(|&a| inside(a)) {
                    Some(a) => Some(a),
                    None => allocation_at(v.base).filter(|&a| inside(a)),
                };
                if from_driver.is_some() {
                    last = from_driver;
                }
                let allocation = from_driver.or(section.filter(|&a| inside(a)));
                idx.insert(
                    v.base,
                    Indexed {
                        end,
                        load_id,
                        allocation,
                    },
                );
            }
        }
        let variables = variables.map(|v| v.into_iter().map(|(v, _)| v).collect());
        let old = self
            .foreign
            .lock()
            .insert(handle, Foreign { load_id, variables });
        if let Some(old) = old {
            self.unindex(&old);
        }
        self.changes.fetch_add(1, Ordering::Release);
        ok
    }

    /// The address ranges of an application image's variables (what an unload releases).
    pub fn foreign_ranges(&self, handle: usize) -> Vec<(u64, u64)> {
        self.foreign
            .lock()
            .get(&handle)
            .and_then(|f| f.variables.as_ref().ok())
            .map(|v| v.iter().map(|v| (v.base, v.size)).collect())
            .unwrap_or_default()
    }

    /// An application image's writable variables where its load placed them (a capture
    /// names the kernel's own module variables with them).
    pub fn foreign_variables(&self, handle: usize) -> Vec<ModuleVariable> {
        self.foreign
            .lock()
            .get(&handle)
            .and_then(|f| f.variables.as_ref().ok())
            .map(|v| v.iter().filter(|v| !v.read_only).cloned().collect())
            .unwrap_or_default()
    }

    /// Removes an application image (call inside the tracker's `release_with`).
    pub fn remove_foreign(&self, handle: usize) -> bool {
        let gone = self.foreign.lock().remove(&handle);
        self.changes.fetch_add(1, Ordering::Release);
        if let Some(f) = &gone {
            self.unindex(f);
        }
        gone.is_some()
    }

    /// Forgets `f`'s variables in the address index (entries of a later load kept).
    fn unindex(&self, f: &Foreign) {
        if let Ok(vars) = &f.variables {
            let mut idx = self.by_address.lock();
            for v in vars {
                if idx.get(&v.base).is_some_and(|i| i.load_id == f.load_id) {
                    idx.remove(&v.base);
                }
            }
        }
    }

    /// Loads an image and registers it: its variables take part in every snapshot while it is
    /// alive.
    pub fn load(&self, image: &[u8], name: &str) -> CudaResult<Arc<CudaModule>> {
        let m = Arc::new(CudaModule::load(&self.device, image, name)?);
        if let Err(why) = &m.variables {
            log::warn!(
                "[kernel-replay] module {name}: variables cannot be enumerated ({why}); replays on agent {} will decline while it is loaded",
                self.agent
            );
        }
        self.modules.lock().insert(m.load_id, Arc::downgrade(&m));
        self.changes.fetch_add(1, Ordering::Release);
        Ok(m)
    }

    /// Compiles CUDA C for this device with NVRTC, then loads and registers it.
    pub fn compile_and_load(
        &self,
        source: &str,
        name: &str,
        extra: &[&str],
    ) -> CudaResult<Arc<CudaModule>> {
        let cubin = compile_cubin(source, name, self.device.info().compute_capability, extra)?;
        self.load(&cubin, name)
    }

    /// Loads a module that belongs to the tool or the library: never enumerated.
    pub fn load_private(&self, image: &[u8], name: &str) -> CudaResult<Arc<CudaModule>> {
        Ok(Arc::new(CudaModule::load(&self.device, image, name)?))
    }

    /// Number of live registered modules.
    pub fn len(&self) -> usize {
        let mut m = self.modules.lock();
        m.retain(|_, w| w.strong_count() > 0);
        m.len()
    }

    /// Whether no registered module is alive.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ModuleVariables for ModuleRegistry {
    fn enumerate(&self, agent: AgentId) -> Result<Vec<ModuleVariable>, String> {
        if agent != self.agent {
            return Ok(Vec::new());
        }
        let live: Vec<Arc<CudaModule>> = {
            let mut m = self.modules.lock();
            m.retain(|_, w| w.strong_count() > 0);
            m.values().filter_map(Weak::upgrade).collect()
        };
        let mut out = Vec::new();
        for m in live {
            match &m.variables {
                Ok(v) => out.extend(v.iter().cloned()),
                Err(why) => return Err(why.clone()),
            }
        }
        for f in self.foreign.lock().values() {
            match &f.variables {
                Ok(v) => out.extend(v.iter().cloned()),
                Err(why) => return Err(why.clone()),
            }
        }
        Ok(out)
    }

    /// An application image's variables answer with their image's load number, so a restore
    /// after its unload skips them; every other address keeps the default rule.
    fn load_generation(&self, agent: AgentId, addr: u64) -> Option<u64> {
        if agent == self.agent {
            let idx = self.by_address.lock();
            if let Some((_, i)) = idx.range(..=addr).next_back() {
                if addr < i.end {
                    return Some(i.load_id);
                }
            }
        }
        Some(0)
    }

    /// Registrations and removals so far, with the library's modules still loaded (a module
    /// dropped unloads itself without telling the registry: its count changes the answer).
    fn generation(&self, agent: AgentId) -> Option<u64> {
        if agent != self.agent {
            return Some(0);
        }
        let live = {
            let mut m = self.modules.lock();
            m.retain(|_, w| w.strong_count() > 0);
            m.len() as u64
        };
        Some(
            self.changes
                .load(Ordering::Acquire)
                .wrapping_shl(32)
                .wrapping_add(live),
        )
    }

    /// An application image's variables answer with the allocation the driver named when the
    /// image was registered; the library's own modules cannot tell (their variables are
    /// joined only across padding).
    fn allocation_of(&self, agent: AgentId, addr: u64) -> Option<(u64, u64)> {
        if agent != self.agent {
            return None;
        }
        let idx = self.by_address.lock();
        let (_, i) = idx.range(..=addr).next_back()?;
        (addr < i.end).then_some(i.allocation).flatten()
    }
}
