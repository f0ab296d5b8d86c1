//! An HSA tool library under test, driven the way the runtime and a HIP application drive it:
//! the library is opened with `dlopen`, its `OnLoad` gets the simulated runtime's
//! (`replay-hsa-sim`) API table, and the client then reads its entries back from that table
//! (wrapped or not, as the tool left them) to create a queue, allocate from pools, write a
//! kernel-dispatch packet, ring the doorbell and wait on the completion signal.
//!
//! Shared by the example's test (`libhsa_rust_tool.so`) and replay-ffi's C++ tool test
//! (`libkernel_replay.so` + `KREPLAY_HSA_TOOL`), which includes this file by path, so both
//! tools are checked by the same client.

use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use replay_hsa_sim::SimHsa;

/// The simulator's HIP-like client: entries read back from the table after `OnLoad`.
pub use replay_hsa_sim::client::{dispatch, Client};

/// The directory of the shared object `name` that cargo built for this test run: the test
/// executable is in `target/<profile>/deps`, and cargo builds the package's cdylib there (and
/// uplifts a copy to the parent) before its integration tests.
pub fn library_dir(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let deps = exe.parent().expect("the test executable is in a directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        if dir.join(name).exists() {
            return dir.to_path_buf();
        }
    }
    panic!("{name} was not found in {} or its parent", deps.display());
}

type OnLoadFn = unsafe extern "C" fn(*mut c_void, u64, u64, *const *const c_char) -> bool;
type OnUnloadFn = unsafe extern "C" fn();
type JsonFn = unsafe extern "C" fn(*mut c_char, usize, *mut usize) -> i32;

/// A tool library opened as the HSA runtime opens it (`HSA_TOOLS_LIB`).
pub struct ToolLibrary {
    on_load: OnLoadFn,
    on_unload: OnUnloadFn,
    state_json: JsonFn,
    /// Kept open: the entries above point into it.
    pub lib: libloading::Library,
}

impl ToolLibrary {
    /// Opens `path`, which must export `OnLoad`, `OnUnload` and `kreplay_hsa_state_json`.
    pub fn open(path: &Path) -> Self {
        // SAFETY: a library this test run built; its initialisers are Rust's (and C++'s).
        let lib = unsafe { libloading::Library::new(path) }
            .unwrap_or_else(|e| panic!("dlopen {}: {e}", path.display()));
        // SAFETY: the signatures of include/kernel_replay_hsa.h.
        unsafe {
            Self {
                on_load: *lib.get::<OnLoadFn>(b"OnLoad").expect(
                    "OnLoad is not exported: a libkernel_replay.so without replay-ffi's `hsa` \
                     feature? (cargo writes the cdylib of every feature set to the same path: \
                     touch crates/replay-ffi/src/lib.rs to relink it)",
                ),
                on_unload: *lib.get::<OnUnloadFn>(b"OnUnload").expect("OnUnload"),
                state_json: *lib
                    .get::<JsonFn>(b"kreplay_hsa_state_json")
                    .expect("kreplay_hsa_state_json"),
                lib,
            }
        }
    }

    /// The runtime's `OnLoad(table, runtime_version, 0, NULL)` with the sim's table.
    pub fn on_load(&self, sim: &mut SimHsa, runtime_version: u64) -> bool {
        // SAFETY: the sim's table, alive and not used by other threads during the call.
        unsafe { (self.on_load)(sim.table().cast(), runtime_version, 0, std::ptr::null()) }
    }

    /// The runtime's `OnUnload()`.
    pub fn on_unload(&self) {
        // SAFETY: no preconditions.
        unsafe { (self.on_unload)() }
    }

    /// `kreplay_hsa_state_json`: what the backend installed, the attached tool, regions.
    pub fn state(&self) -> serde_json::Value {
        let mut required = 0usize;
        // SAFETY: asking for the size with no buffer.
        unsafe { (self.state_json)(std::ptr::null_mut(), 0, &mut required) };
        let mut buf = vec![0u8; required];
        // SAFETY: a buffer of `required` bytes.
        let st = unsafe { (self.state_json)(buf.as_mut_ptr().cast(), buf.len(), &mut required) };
        assert_eq!(st, 0, "kreplay_hsa_state_json");
        let text = CStr::from_bytes_until_nul(&buf).unwrap().to_str().unwrap();
        serde_json::from_str(text).unwrap()
    }
}

/// `x = 3x + 1`: a read-modify-write, so a replay that did not restore memory between passes
/// shows in the result and in the inputs later passes see.
pub fn rmw(x: u64) -> u64 {
    x.wrapping_mul(3).wrapping_add(1)
}

/// Registers the `rmw` kernel on the `u64` at kernarg 0; every execution appends the value it
/// read to `inputs`.
pub fn rmw_kernel(sim: &SimHsa, inputs: Arc<Mutex<Vec<u64>>>) -> u64 {
    sim.register_kernel("rmw", move |d| {
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        inputs.lock().unwrap().push(v);
        Ok(())
    })
}

/// A coarse device buffer on GPU 0 holding `init`, and a kernarg block pointing at it.
pub fn buffer_and_args(sim: &SimHsa, client: &Client, init: u64) -> (*mut u64, *mut u8) {
    client.buffer_and_args(sim, 0, init)
}

/// The `u64` at `p`.
pub fn read(p: *const u64) -> u64 {
    // SAFETY: a live simulated allocation.
    unsafe { std::ptr::read_volatile(p) }
}

/// One application dispatch of `rmw` on `buf` (holding `init`), through an intercepted queue
/// on GPU 0: returns (value after completion, inputs the executions saw, the completion
/// signal's value a while after it reached 0).
pub fn run_rmw_dispatch(sim: &SimHsa, client: &Client, init: u64) -> (u64, Vec<u64>, i64) {
    let inputs = Arc::new(Mutex::new(Vec::new()));
    let kernel = rmw_kernel(sim, inputs.clone());
    let q = client.queue(sim.gpu_agents()[0]);
    let (buf, args) = buffer_and_args(sim, client, init);
    let done = client.signal(1);
    client.submit(q, dispatch(kernel, args, done));
    assert_eq!(client.wait_zero(done), 0, "the dispatch completed");
    // A second decrement (a pass completing the application's signal) would land after the
    // first: give it time to show.
    std::thread::sleep(Duration::from_millis(50));
    let after = client.load(done);
    client.destroy(q);
    let seen = inputs.lock().unwrap().clone();
    (read(buf), seen, after)
}
