//! Capture of one intercepted launch to a folder (SPEC §13), as `kreplay capture` arms it.
//!
//! The environment names the folder and the launch; the built-in tool asks the window for a
//! capture in the chosen dispatch's first PASS ENTER ([`pass_enter`]), so the capture is that
//! pass's snapshot and the program runs exactly as under `kreplay run`. The folder is written
//! by `replay-capture` from the window's [`replay_core::Capture`]; a refusal is written beside
//! it (`DIR.refused`, one line) for `kreplay capture` to report.
//!
//! - `KREPLAY_CUDA_CAPTURE_DIR=DIR`: arms the capture (the hooks then keep every code image
//!   the application loads, [`crate::state::images`], so the chosen kernel's can be written).
//! - `KREPLAY_CUDA_CAPTURE_DISPATCH=N`: the dispatch whose id is N; or
//! - `KREPLAY_CUDA_CAPTURE_LAUNCH_INDEX=K`: the K-th (from 0) launch that reaches the window
//!   (the policy's kernel filters choose which do); neither: the first.
//! - `KREPLAY_CUDA_CAPTURE_MAX_BYTES=B`: the bound on the captured scope (default 4 GiB).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use replay_core::contract::ReplayPayload;
use replay_core::{Capture, CaptureRefused, CaptureRequest, DEFAULT_CAPTURE_MAX_BYTES};

use crate::sys;

/// Environment variable: the capture folder (arms the capture).
pub const DIR_ENV: &str = "KREPLAY_CUDA_CAPTURE_DIR";
/// Environment variable: the dispatch id to capture.
pub const DISPATCH_ENV: &str = "KREPLAY_CUDA_CAPTURE_DISPATCH";
/// Environment variable: the launch index (from 0) to capture.
pub const LAUNCH_INDEX_ENV: &str = "KREPLAY_CUDA_CAPTURE_LAUNCH_INDEX";
/// Environment variable: the capture's byte bound.
pub const MAX_BYTES_ENV: &str = "KREPLAY_CUDA_CAPTURE_MAX_BYTES";

/// Which launch is captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// The dispatch of this id.
    Dispatch(u64),
    /// The K-th launch reaching the window.
    LaunchIndex(u64),
}

/// An armed capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    /// Where the folder goes.
    pub dir: PathBuf,
    /// Which launch.
    pub select: Selection,
    /// Bound on the scope's bytes.
    pub max_bytes: u64,
}

/// The capture variables are inconsistent or unparsable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A variable is not a number.
    #[error("{var}={value:?} is not a non-negative integer")]
    NotANumber {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// Both selections were given.
    #[error("{DISPATCH_ENV} and {LAUNCH_INDEX_ENV} are both set; give one")]
    Both,
    /// A selection without a folder.
    #[error("{0} is set without {DIR_ENV}")]
    NoDir(&'static str),
}

impl CaptureConfig {
    /// Reads the variables through `get`; `Ok(None)` when no capture is armed.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<CaptureConfig>, ConfigError> {
        let num = |var: &'static str| -> Result<Option<u64>, ConfigError> {
            get(var)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| ConfigError::NotANumber { var, value: v })
                })
                .transpose()
        };
        let dispatch = num(DISPATCH_ENV)?;
        let index = num(LAUNCH_INDEX_ENV)?;
        let max_bytes = num(MAX_BYTES_ENV)?.unwrap_or(DEFAULT_CAPTURE_MAX_BYTES);
        let Some(dir) = get(DIR_ENV).filter(|d| !d.is_empty()) else {
            return match (dispatch, index) {
                (Some(_), _) => Err(ConfigError::NoDir(DISPATCH_ENV)),
                (_, Some(_)) => Err(ConfigError::NoDir(LAUNCH_INDEX_ENV)),
                _ => Ok(None),
            };
        };
        let select = match (dispatch, index) {
            (Some(_), Some(_)) => return Err(ConfigError::Both),
            (Some(n), None) => Selection::Dispatch(n),
            (None, Some(k)) => Selection::LaunchIndex(k),
            (None, None) => Selection::LaunchIndex(0),
        };
        Ok(Some(CaptureConfig {
            dir: PathBuf::from(dir),
            select,
            max_bytes,
        }))
    }
}

/// The process's armed capture (read once; an invalid one is logged and arms nothing).
fn config() -> Option<&'static CaptureConfig> {
    static C: OnceLock<Option<CaptureConfig>> = OnceLock::new();
    C.get_or_init(
        || match CaptureConfig::from_lookup(|v| std::env::var(v).ok()) {
            Ok(c) => c,
            Err(e) => {
                log::error!("[kernel-replay] capture: {e}; nothing is captured");
                None
            }
        },
    )
    .as_ref()
}

/// Whether a capture is armed (the hooks keep code images only then).
pub fn armed() -> bool {
    config().is_some()
}

/// What a code image is, by its first bytes.
pub fn code_format(bytes: &[u8]) -> &'static str {
    match bytes {
        [0x7f, b'E', b'L', b'F', ..] => "cubin",
        [0x50, 0xed, 0x55, 0xba, ..] => "fatbin",
        _ => "ptx",
    }
}

/// The file beside the folder that says why nothing was captured.
pub fn refusal_file(dir: &std::path::Path) -> PathBuf {
    let mut s = dir.as_os_str().to_os_string();
    s.push(".refused");
    PathBuf::from(s)
}

use crate::sys::CUlaunchAttributeID as Id;

/// The launch attributes a replay can name, and whether it applies them again: those whose
/// value holds no handle or pointer of the capturing process (an event, an access window).
const ATTRIBUTES: &[(Id, &str, bool)] = &[
    (
        Id::CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
        "access_policy_window",
        false,
    ),
    (Id::CU_LAUNCH_ATTRIBUTE_COOPERATIVE, "cooperative", true),
    (
        Id::CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
        "synchronization_policy",
        true,
    ),
    (
        Id::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
        "cluster_dimension",
        true,
    ),
    (
        Id::CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
        "cluster_scheduling_policy_preference",
        true,
    ),
    (
        Id::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        "programmatic_stream_serialization",
        false,
    ),
    (
        Id::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT,
        "programmatic_event",
        false,
    ),
    (Id::CU_LAUNCH_ATTRIBUTE_PRIORITY, "priority", true),
    (
        Id::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
        "mem_sync_domain_map",
        true,
    ),
    (
        Id::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
        "mem_sync_domain",
        true,
    ),
    (
        Id::CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT,
        "launch_completion_event",
        false,
    ),
    (
        Id::CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
        "preferred_shared_memory_carveout",
        true,
    ),
];

/// Words of an attribute's value kept (cluster dimensions are three, most values one).
const VALUE_WORDS: usize = 4;

/// The known attribute of raw id `id`: its enum value and whether a replay applies it.
pub fn known_attribute(id: u32) -> Option<(Id, &'static str, bool)> {
    ATTRIBUTES.iter().copied().find(|(i, _, _)| *i as u32 == id)
}

/// The attributes of `n` `CUlaunchAttribute`s at `attrs`, read as raw words (an id this
/// crate does not know is named by its number, never read as the enum).
///
/// # Safety
/// `attrs` points to `n` attributes (or `n` is 0), alive for the call.
pub unsafe fn read_attributes(
    attrs: *const sys::CUlaunchAttribute,
    n: usize,
) -> Vec<replay_core::LaunchAttribute> {
    if attrs.is_null() {
        return Vec::new();
    }
    let value_at = std::mem::offset_of!(sys::CUlaunchAttribute, value);
    (0..n)
        .map(|i| {
            // SAFETY: attribute `i` of the caller's array; read as bytes, since the id may be
            // one the enum lacks.
            let base = unsafe { attrs.add(i) }.cast::<u8>();
            // SAFETY: the id is the attribute's first field (4 bytes).
            let id = unsafe { std::ptr::read_unaligned(base.cast::<u32>()) };
            let value = (0..VALUE_WORDS)
                .map(|w| {
                    // SAFETY: the value union is 64 bytes, of which the first 16 are read.
                    unsafe { std::ptr::read_unaligned(base.add(value_at + 4 * w).cast::<u32>()) }
                })
                .collect();
            let name = known_attribute(id).map_or_else(|| format!("id {id}"), |a| a.1.into());
            replay_core::LaunchAttribute { name, id, value }
        })
        .collect()
}

/// The attributes of a captured launch, given its relaunch (only `cuLaunchKernelEx` launches
/// have any).
pub(crate) fn attributes_of(
    relaunch: Option<&crate::launch::Relaunch>,
) -> Vec<replay_core::LaunchAttribute> {
    match relaunch.map(|r| &r.how) {
        Some(crate::launch::How::Ex { config, .. }) if !config.is_null() => {
            // SAFETY: the application's launch configuration, alive for its launch call, which
            // the window (and so this capture) runs inside.
            let c = unsafe { &**config };
            // SAFETY: as above: the configuration's own attribute array.
            unsafe { read_attributes(c.attrs, c.numAttrs as usize) }
        }
        _ => Vec::new(),
    }
}

static LAUNCHES: AtomicU64 = AtomicU64::new(0);
static TAKEN: AtomicBool = AtomicBool::new(false);

/// In PASS ENTER: asks for the capture when this is the chosen launch's first pass.
pub fn pass_enter(p: &mut ReplayPayload<'_>) {
    let Some(c) = config() else { return };
    if p.current_pass != 0 || TAKEN.load(Ordering::Acquire) {
        return;
    }
    let index = LAUNCHES.fetch_add(1, Ordering::AcqRel);
    let chosen = match c.select {
        Selection::Dispatch(n) => p.dispatch_info.dispatch_id.0 == n,
        Selection::LaunchIndex(k) => index == k,
    };
    if !chosen || TAKEN.swap(true, Ordering::AcqRel) {
        return;
    }
    let dir = c.dir.clone();
    let kernel = p.dispatch_info.kernel_name.to_string();
    let sink = Arc::new(move |r: Result<Capture, CaptureRefused>| {
        let result = r.map_err(|e| e.to_string()).and_then(|cap| {
            replay_capture::write(&dir, &cap)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        match result {
            Ok(()) => log::info!("[kernel-replay] captured {kernel} to {}", dir.display()),
            Err(why) => {
                log::warn!("[kernel-replay] capture of {kernel}: {why}");
                let _ = std::fs::write(refusal_file(&dir), format!("{kernel}: {why}\n"));
            }
        }
    });
    p.request_capture(CaptureRequest::new(sink).max_bytes(c.max_bytes));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<Option<CaptureConfig>, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        CaptureConfig::from_lookup(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn the_capture_variables_select_one_launch_or_say_what_is_wrong() {
        assert_eq!(parse(&[]), Ok(None));
        let c = parse(&[(DIR_ENV, "caps/c")]).unwrap().unwrap();
        assert_eq!(c.select, Selection::LaunchIndex(0));
        assert_eq!(c.max_bytes, DEFAULT_CAPTURE_MAX_BYTES);
        let c = parse(&[(DIR_ENV, "d"), (DISPATCH_ENV, "12"), (MAX_BYTES_ENV, "99")])
            .unwrap()
            .unwrap();
        assert_eq!((c.select, c.max_bytes), (Selection::Dispatch(12), 99));
        assert_eq!(
            parse(&[(DIR_ENV, "d"), (DISPATCH_ENV, "1"), (LAUNCH_INDEX_ENV, "2")]),
            Err(ConfigError::Both)
        );
        let e = parse(&[(DIR_ENV, "d"), (LAUNCH_INDEX_ENV, "two")]).unwrap_err();
        assert!(
            e.to_string().contains("KREPLAY_CUDA_CAPTURE_LAUNCH_INDEX"),
            "{e}"
        );
        assert_eq!(
            parse(&[(DISPATCH_ENV, "3")]),
            Err(ConfigError::NoDir(DISPATCH_ENV))
        );
    }

    #[test]
    fn launch_attributes_are_read_as_words_and_named() {
        // SAFETY: zeroed attributes are valid (an id of 0 and a value of zero bytes).
        let mut a: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
        a[0].id = Id::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        a[0].value.clusterDim.x = 2;
        a[0].value.clusterDim.y = 1;
        a[0].value.clusterDim.z = 1;
        a[1].id = Id::CU_LAUNCH_ATTRIBUTE_PRIORITY;
        a[1].value.priority = -3;
        // SAFETY: two attributes, alive for the call.
        let got = unsafe { read_attributes(a.as_ptr(), 2) };
        assert_eq!(got[0].name, "cluster_dimension");
        assert_eq!(got[0].id, 4);
        assert_eq!(got[0].value[..3], [2, 1, 1]);
        assert_eq!(got[1].name, "priority");
        assert_eq!(got[1].value[0] as i32, -3);
        assert!(known_attribute(4).is_some_and(|a| a.2));
        assert!(
            known_attribute(7).is_some_and(|a| !a.2),
            "an event is never applied again"
        );
        assert!(known_attribute(9999).is_none());
        // SAFETY: a null array.
        assert!(unsafe { read_attributes(std::ptr::null(), 3) }.is_empty());
    }

    #[test]
    fn code_images_are_named_by_their_magic() {
        assert_eq!(code_format(b"\x7fELF\x02"), "cubin");
        assert_eq!(code_format(&[0x50, 0xed, 0x55, 0xba, 1, 0]), "fatbin");
        assert_eq!(code_format(b".version 8.4"), "ptx");
    }
}
