//! Clock control for counter collection (SPEC §12), as Nsight Compute's `--clock-control`:
//! `base` locks every selected GPU's graphics clock to its base (rated TDP) frequency for the
//! run, so times and throughputs do not drift with boost and temperature; `none` leaves the
//! clocks as they are. Done through NVML (`nvmlDeviceSetGpuLockedClocks` with the TDP sentinel,
//! `nvmlDeviceResetGpuLockedClocks` after), which needs root; CUPTI's own clock control
//! (`cuptiClockControlLock`) appeared in CUDA 13.4 and is not used yet.
//!
//! The lock is device-global (every process on the GPU runs at base clock while it is held),
//! so it is taken by `kreplay run` around the application, not by the library inside it, and
//! released when the application ended, whatever way it ended. Layers: the NVML entries
//! (`Entries`, loaded at run time, so nothing links NVIDIA's library), the checked calls
//! (`Nvml`), and the safe guard ([`ClockLock`]).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::fmt;

/// Set by `kreplay run` in the program's environment to what it held (`base` or `none`), so the
/// counter report says how the clocks ran.
pub const CLOCK_ENV: &str = "KREPLAY_CUDA_CLOCK_CONTROL";

/// What `--clock-control` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockControl {
    /// Graphics clocks locked to base for the run (Nsight Compute's default).
    Base,
    /// Clocks left as they are.
    None,
}

impl ClockControl {
    /// `base` or `none`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "base" => Ok(Self::Base),
            "none" => Ok(Self::None),
            other => Err(format!("clock control {other:?} is not one of base, none")),
        }
    }

    /// The name as given on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Base => "base",
            Self::None => "none",
        }
    }
}

/// Why the clocks could not be locked or released.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    /// NVML is not installed (no NVIDIA driver on this machine).
    #[error("NVML ({LIBRARY}) could not be loaded: {0}")]
    Load(String),
    /// An NVML call failed.
    #[error("{call} failed: {message} (NVML error {code}){hint}")]
    Call {
        /// The entry.
        call: &'static str,
        /// NVML's return code.
        code: c_int,
        /// NVML's text for it.
        message: String,
        /// What to do about it, where known.
        hint: &'static str,
    },
    /// `CUDA_VISIBLE_DEVICES` names a device NVML does not know.
    #[error("CUDA_VISIBLE_DEVICES entry {0:?} names no GPU NVML knows")]
    UnknownDevice(String),
}

const LIBRARY: &str = "libnvidia-ml.so.1";
const NVML_SUCCESS: c_int = 0;
const NVML_ERROR_NO_PERMISSION: c_int = 4;
const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
/// `nvmlClockLimitId_t`: the symbolic base (TDP) clock of `nvmlDeviceSetGpuLockedClocks`.
const NVML_CLOCK_LIMIT_ID_TDP: c_uint = 0xffff_ff01;
const UUID_LEN: usize = 96;

type Device = *mut c_void;

/// The NVML entries used, as nvml.h declares them.
struct Entries {
    init: unsafe extern "C" fn() -> c_int,
    shutdown: unsafe extern "C" fn() -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    count: unsafe extern "C" fn(*mut c_uint) -> c_int,
    by_index: unsafe extern "C" fn(c_uint, *mut Device) -> c_int,
    by_uuid: unsafe extern "C" fn(*const c_char, *mut Device) -> c_int,
    uuid: unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_int,
    lock: unsafe extern "C" fn(Device, c_uint, c_uint) -> c_int,
    reset: unsafe extern "C" fn(Device) -> c_int,
    _lib: libloading::Library,
}

impl Entries {
    fn load() -> Result<Self, ClockError> {
        // SAFETY: NVIDIA's management library; loading runs no initialiser that needs a GPU.
        let lib = unsafe { libloading::Library::new(LIBRARY) }
            .map_err(|e| ClockError::Load(e.to_string()))?;
        macro_rules! get {
            ($name:literal) => {{
                // SAFETY: the entry's signature as nvml.h declares it (the field's type).
                let s = unsafe { lib.get($name) }.map_err(|e| ClockError::Load(e.to_string()))?;
                *s
            }};
        }
        Ok(Self {
            init: get!(b"nvmlInit_v2\0"),
            shutdown: get!(b"nvmlShutdown\0"),
            error_string: get!(b"nvmlErrorString\0"),
            count: get!(b"nvmlDeviceGetCount_v2\0"),
            by_index: get!(b"nvmlDeviceGetHandleByIndex_v2\0"),
            by_uuid: get!(b"nvmlDeviceGetHandleByUUID\0"),
            uuid: get!(b"nvmlDeviceGetUUID\0"),
            lock: get!(b"nvmlDeviceSetGpuLockedClocks\0"),
            reset: get!(b"nvmlDeviceResetGpuLockedClocks\0"),
            _lib: lib,
        })
    }
}

/// NVML, initialised; shut down when dropped.
struct Nvml {
    e: Entries,
}

impl Nvml {
    fn open() -> Result<Self, ClockError> {
        let e = Entries::load()?;
        let n = Self { e };
        // SAFETY: no arguments; NVML's own initialisation.
        n.check("nvmlInit_v2", unsafe { (n.e.init)() })?;
        Ok(n)
    }

    fn check(&self, call: &'static str, code: c_int) -> Result<(), ClockError> {
        if code == NVML_SUCCESS {
            return Ok(());
        }
        // SAFETY: NVML returns a static NUL-terminated string for any code.
        let p = unsafe { (self.e.error_string)(code) };
        let message = if p.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        let hint = match code {
            NVML_ERROR_NO_PERMISSION => {
                "; locking clocks needs root: run as root, or pass --clock-control none"
            }
            NVML_ERROR_NOT_SUPPORTED => {
                "; this GPU (or its MIG or virtual partition) cannot lock clocks: pass --clock-control none"
            }
            _ => "",
        };
        Err(ClockError::Call {
            call,
            code,
            message,
            hint,
        })
    }

    fn devices(&self) -> Result<Vec<Device>, ClockError> {
        let mut n: c_uint = 0;
        // SAFETY: `n` is a valid out pointer.
        self.check("nvmlDeviceGetCount_v2", unsafe { (self.e.count)(&mut n) })?;
        (0..n)
            .map(|i| {
                let mut d: Device = std::ptr::null_mut();
                // SAFETY: `i` below the count; `d` a valid out pointer.
                self.check("nvmlDeviceGetHandleByIndex_v2", unsafe {
                    (self.e.by_index)(i, &mut d)
                })?;
                Ok(d)
            })
            .collect()
    }

    fn by_uuid(&self, uuid: &str) -> Result<Device, ClockError> {
        let c = CString::new(uuid).map_err(|_| ClockError::UnknownDevice(uuid.into()))?;
        let mut d: Device = std::ptr::null_mut();
        // SAFETY: `c` NUL-terminated; `d` a valid out pointer.
        let r = unsafe { (self.e.by_uuid)(c.as_ptr(), &mut d) };
        if r != NVML_SUCCESS {
            return Err(ClockError::UnknownDevice(uuid.into()));
        }
        Ok(d)
    }

    fn uuid(&self, d: Device) -> String {
        let mut buf = [0 as c_char; UUID_LEN];
        // SAFETY: `d` a handle NVML gave; the buffer's length passed.
        let r = unsafe { (self.e.uuid)(d, buf.as_mut_ptr(), UUID_LEN as c_uint) };
        if r != NVML_SUCCESS {
            return "unknown".into();
        }
        // SAFETY: NVML wrote a NUL-terminated string into the buffer.
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    fn lock_base(&self, d: Device) -> Result<(), ClockError> {
        // SAFETY: `d` a handle NVML gave; the TDP sentinel on both bounds locks to base.
        self.check("nvmlDeviceSetGpuLockedClocks", unsafe {
            (self.e.lock)(d, NVML_CLOCK_LIMIT_ID_TDP, NVML_CLOCK_LIMIT_ID_TDP)
        })
    }

    fn reset(&self, d: Device) -> Result<(), ClockError> {
        // SAFETY: `d` a handle NVML gave.
        self.check("nvmlDeviceResetGpuLockedClocks", unsafe {
            (self.e.reset)(d)
        })
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: balanced with the successful `nvmlInit_v2` of `open`.
        unsafe { (self.e.shutdown)() };
    }
}

/// Which GPUs the application can use, as NVML should select them: the UUIDs
/// `CUDA_VISIBLE_DEVICES` names, or its indices when `CUDA_DEVICE_ORDER=PCI_BUS_ID` (NVML
/// numbers GPUs in bus order), else every GPU (CUDA's default order is not NVML's, so an index
/// cannot be mapped; locking more GPUs than the one profiled is the safe side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every GPU.
    All,
    /// These NVML indices.
    Indices(Vec<u32>),
    /// These UUIDs (or UUID prefixes, `GPU-…`, `MIG-…`).
    Uuids(Vec<String>),
}

impl Selection {
    /// From the application's `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER`.
    pub fn from_env(visible: Option<&str>, order: Option<&str>) -> Self {
        let Some(v) = visible.map(str::trim).filter(|v| !v.is_empty()) else {
            return Self::All;
        };
        // CUDA stops at the first invalid entry; so does this.
        let entries: Vec<&str> = v.split(',').map(str::trim).collect();
        if entries
            .iter()
            .all(|e| e.starts_with("GPU-") || e.starts_with("MIG-"))
        {
            return Self::Uuids(entries.iter().map(|e| e.to_string()).collect());
        }
        let idx: Vec<u32> = entries.iter().map_while(|e| e.parse().ok()).collect();
        if order == Some("PCI_BUS_ID") && !idx.is_empty() {
            return Self::Indices(idx);
        }
        Self::All
    }
}

/// One locked GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedGpu {
    /// NVML's UUID.
    pub uuid: String,
}

/// GPUs whose clocks are locked to base; unlocked when dropped (or by [`ClockLock::release`],
/// which reports a failure).
pub struct ClockLock {
    nvml: Nvml,
    devices: Vec<Device>,
    locked: Vec<LockedGpu>,
}

impl fmt::Debug for ClockLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClockLock")
            .field("locked", &self.locked)
            .finish()
    }
}

impl ClockLock {
    /// Locks the graphics clocks of the GPUs `sel` names to base. All or nothing: a GPU that
    /// refuses undoes the ones locked before it.
    pub fn base(sel: &Selection) -> Result<Self, ClockError> {
        let nvml = Nvml::open()?;
        let devices = match sel {
            Selection::All => nvml.devices()?,
            Selection::Indices(ix) => {
                let all = nvml.devices()?;
                ix.iter()
                    .map(|&i| {
                        all.get(i as usize)
                            .copied()
                            .ok_or_else(|| ClockError::UnknownDevice(i.to_string()))
                    })
                    .collect::<Result<_, _>>()?
            }
            Selection::Uuids(u) => u
                .iter()
                .map(|u| nvml.by_uuid(u))
                .collect::<Result<_, _>>()?,
        };
        let devices = lock_each(&devices, |d| nvml.lock_base(d), |d| nvml.reset(d))?;
        // The clock read back right away is still the boost one: not reported.
        let locked = devices
            .iter()
            .map(|&d| LockedGpu { uuid: nvml.uuid(d) })
            .collect();
        Ok(Self {
            nvml,
            devices,
            locked,
        })
    }

    /// The GPUs locked.
    pub fn locked(&self) -> &[LockedGpu] {
        &self.locked
    }

    /// Unlocks every GPU; the first failure, after trying all.
    pub fn release(mut self) -> Result<(), ClockError> {
        self.reset_all()
    }

    fn reset_all(&mut self) -> Result<(), ClockError> {
        let nvml = &self.nvml;
        reset_each(&std::mem::take(&mut self.devices), |d| nvml.reset(d))
    }
}

/// Locks every device in turn; when one refuses, those locked before it are reset (their own
/// failures logged) and its error returned: all or nothing.
fn lock_each<D: Copy>(
    devices: &[D],
    mut lock: impl FnMut(D) -> Result<(), ClockError>,
    mut reset: impl FnMut(D) -> Result<(), ClockError>,
) -> Result<Vec<D>, ClockError> {
    let mut done = Vec::with_capacity(devices.len());
    for &d in devices {
        if let Err(e) = lock(d) {
            if let Err(r) = reset_each(&done, &mut reset) {
                log::warn!("[kernel-replay] GPU clocks could not be unlocked: {r}");
            }
            return Err(e);
        }
        done.push(d);
    }
    Ok(done)
}

/// Resets every device, whatever the others answer; the first failure.
fn reset_each<D: Copy>(
    devices: &[D],
    mut reset: impl FnMut(D) -> Result<(), ClockError>,
) -> Result<(), ClockError> {
    let mut first = None;
    for &d in devices {
        if let Err(e) = reset(d) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

impl Drop for ClockLock {
    fn drop(&mut self) {
        if let Err(e) = self.reset_all() {
            log::warn!("[kernel-replay] GPU clocks could not be unlocked: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_name_themselves() {
        assert_eq!(ClockControl::parse("base"), Ok(ClockControl::Base));
        assert_eq!(ClockControl::parse("none").unwrap().as_str(), "none");
        let e = ClockControl::parse("boost").unwrap_err();
        assert!(e.contains("\"boost\"") && e.contains("base, none"), "{e}");
    }

    #[test]
    fn the_selection_follows_cuda_visible_devices() {
        assert_eq!(Selection::from_env(None, None), Selection::All);
        assert_eq!(Selection::from_env(Some(" "), None), Selection::All);
        // CUDA's default order is not NVML's: every GPU.
        assert_eq!(Selection::from_env(Some("1,0"), None), Selection::All);
        assert_eq!(
            Selection::from_env(Some("1, 0"), Some("PCI_BUS_ID")),
            Selection::Indices(vec![1, 0])
        );
        // CUDA stops at the first entry it cannot read.
        assert_eq!(
            Selection::from_env(Some("2,x,0"), Some("PCI_BUS_ID")),
            Selection::Indices(vec![2])
        );
        assert_eq!(
            Selection::from_env(Some("GPU-8f1c,MIG-77"), None),
            Selection::Uuids(vec!["GPU-8f1c".into(), "MIG-77".into()])
        );
    }

    fn refused(call: &'static str) -> ClockError {
        ClockError::Call {
            call,
            code: NVML_ERROR_NO_PERMISSION,
            message: "Insufficient Permissions".into(),
            hint: "",
        }
    }

    #[test]
    fn a_gpu_that_refuses_the_lock_unlocks_those_locked_before_it() {
        let mut reset = Vec::new();
        let r = lock_each(
            &[0, 1, 2, 3],
            |d| if d == 2 { Err(refused("lock")) } else { Ok(()) },
            |d| {
                reset.push(d);
                Ok(())
            },
        );
        assert_eq!(r, Err(refused("lock")));
        assert_eq!(reset, [0, 1], "all or nothing");
        let mut reset = Vec::new();
        let all = lock_each(
            &[5, 6],
            |_| Ok(()),
            |d| {
                reset.push(d);
                Ok(())
            },
        );
        assert_eq!(all, Ok(vec![5, 6]));
        assert!(reset.is_empty());
    }

    #[test]
    fn unlocking_tries_every_gpu_and_answers_the_first_failure() {
        let mut tried = Vec::new();
        let r = reset_each(&[0, 1, 2], |d| {
            tried.push(d);
            if d == 0 {
                Ok(())
            } else {
                Err(refused(if d == 1 { "first" } else { "second" }))
            }
        });
        assert_eq!(tried, [0, 1, 2]);
        assert_eq!(r, Err(refused("first")));
    }

    #[test]
    fn without_nvml_opening_it_names_the_library() {
        // Opening only: a test never locks a GPU's clocks (they are device-global). The CI
        // machine has no NVIDIA driver; on a GPU machine NVML opens and lists its GPUs.
        match Nvml::open() {
            Err(e @ ClockError::Load(_)) => {
                assert!(e.to_string().contains(LIBRARY), "{e}");
            }
            Err(e) => panic!("NVML loaded but did not initialise: {e}"),
            Ok(n) => {
                let _ = n.devices().expect("NVML lists its GPUs");
            }
        }
    }
}
