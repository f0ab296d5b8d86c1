//! A user's tool library loaded by path (`KREPLAY_CUDA_TOOL`, `KREPLAY_HSA_TOOL`): what a
//! backend keeps of it, and the one loader that opens it. The loader is registered by the
//! shared object (`replay-ffi`, which owns the C boundary: `dlopen`, the tool's
//! `kreplay_tool_init` and `kreplay_tool_fini`), so the backends, which find the variable,
//! share one implementation and this crate stays free of unsafe code.

use std::any::Any;
use std::ffi::OsStr;
use std::sync::OnceLock;

use crate::ToolError;

/// The symbol a tool library must export: `int kreplay_tool_init(uint64_t version)`.
pub const TOOL_INIT_SYMBOL: &str = "kreplay_tool_init";
/// The optional symbol called at the runtime's end: `void kreplay_tool_fini(void)`.
pub const TOOL_FINI_SYMBOL: &str = "kreplay_tool_fini";

/// A tool library whose init ran.
pub struct LoadedLibrary {
    /// What its `kreplay_tool_init` returned (0: configured).
    pub init_status: i32,
    /// Its `kreplay_tool_fini`, if it exports one.
    pub fini: Option<unsafe extern "C" fn()>,
    /// The handle keeping it loaded (dropping it may unload the library).
    pub handle: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for LoadedLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedLibrary")
            .field("init_status", &self.init_status)
            .field("fini", &self.fini.is_some())
            .finish_non_exhaustive()
    }
}

/// Opens the library at a path and calls its init with the runtime's version.
pub type LibraryLoader = fn(&OsStr, u64) -> Result<LoadedLibrary, ToolError>;

static LOADER: OnceLock<LibraryLoader> = OnceLock::new();

/// Registers the loader (the first registration wins: there is one per process).
pub fn register_loader(loader: LibraryLoader) {
    let _ = LOADER.set(loader);
}

/// Loads the tool library at `path` and calls its init with `version`, through the
/// registered loader.
pub fn load(path: &OsStr, version: u64) -> Result<LoadedLibrary, ToolError> {
    let loader = LOADER.get().ok_or(ToolError::NoLoader)?;
    loader(path, version)
}
