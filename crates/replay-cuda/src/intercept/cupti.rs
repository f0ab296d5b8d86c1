//! The cross-check of the launch wrappers (SPEC §9.2 "Unmodified applications"): a launch
//! the driver ran that did not pass through a wrapper is counted and reported, never silent.
//!
//! Where CUPTI is found at run time (one the process already loaded, else `libcupti.so*` on
//! the loader path, in
//! `KREPLAY_CUDA_LIB_DIR`, or beside the CUDA installation: `lib64/` and
//! `extras/CUPTI/lib64/`), the library subscribes CUPTI's driver-API callbacks for the launch
//! entries only ([`LAUNCH_ENTRIES`]). The callback makes no driver call (CUPTI forbids them
//! there): at each entry's ENTER site it counts whether the calling thread was inside a
//! wrapper or the library ([`Internal::active`]): every pass of a replayed launch and the
//! library's own kernels are *inside*; an application launch that reached the driver by a
//! path no wrapper covers is *outside*, counted per entry. Without CUPTI, or when another
//! subscriber holds it (CUPTI allows one), the report says so and nothing is counted.
//!
//! CUPTI takes one subscriber and the program's own profiler (PyTorch's Kineto, Nsight
//! Systems) may need it, so the cross-check runs only when asked for: `KREPLAY_CUDA_CUPTI=1`
//! (`kreplay run --check-launches`); unset or `0` it is off. Its subscription is given up
//! when the report is written at exit ([`unsubscribe`]), and at once when the program
//! subscribes itself: the library exports `cuptiSubscribe`, which steps aside
//! ([`step_aside`]: unsubscribes ours, the report says `stepped_aside` with the counts up to
//! then) before the program's call goes on to CUPTI.
//!
//! Subscribing runs at the first intercepted launch (outside `cuInit`), so launches before
//! it are not cross-checked.
//!
//! No multi-subscriber mode is used: CUPTI 13.0 (API version 130001, the H200's) has
//! `cuptiSubscribe_v2`, but its `CUpti_SubscriberParams` only names subscribers (one at a
//! time still); `allowMultipleSubscribers` is documented from CUPTI 13.2 on.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;
use serde::Serialize;

use super::internal::Internal;

/// Environment variable: `1` turns the CUPTI cross-check on (default off).
pub const CUPTI_ENV: &str = "KREPLAY_CUDA_CUPTI";

/// Whether the cross-check was asked for: the variable's value `1` (or `true`, `on`, `yes`).
pub fn wanted(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "on" | "yes"
        )
    })
}

/// CUPTI's driver-API callback domain (`CUPTI_CB_DOMAIN_DRIVER_API`).
pub const DOMAIN_DRIVER_API: u32 = 1;
/// `CUPTI_API_ENTER`.
pub const SITE_ENTER: u32 = 0;

/// The launch entries cross-checked: (`CUPTI_DRIVER_TRACE_CBID_*`, entry). The legacy
/// `cuLaunch*Grid*` and multi-device forms have no wrapper: any of them is counted outside.
pub const LAUNCH_ENTRIES: &[(u32, &str)] = &[
    (115, "cuLaunch"),
    (116, "cuLaunchGrid"),
    (117, "cuLaunchGridAsync"),
    (307, "cuLaunchKernel"),
    (442, "cuLaunchKernel_ptsz"),
    (477, "cuLaunchCooperativeKernel"),
    (478, "cuLaunchCooperativeKernel_ptsz"),
    (480, "cuLaunchCooperativeKernelMultiDevice"),
    (514, "cuGraphLaunch"),
    (515, "cuGraphLaunch_ptsz"),
    (652, "cuLaunchKernelEx"),
    (653, "cuLaunchKernelEx_ptsz"),
];

const N: usize = LAUNCH_ENTRIES.len();

/// The counts of launch entries CUPTI reported.
#[derive(Debug, Default)]
pub struct Census {
    inside: AtomicU64,
    outside: [AtomicU64; N],
}

impl Census {
    /// Counts one callback: a launch entry's ENTER site of the driver domain counts inside or
    /// outside (`inside`: the calling thread was in a wrapper or the library); anything else
    /// is ignored. Returns whether it counted.
    pub fn count(&self, domain: u32, cbid: u32, site: u32, inside: bool) -> bool {
        if domain != DOMAIN_DRIVER_API || site != SITE_ENTER {
            return false;
        }
        let Some(i) = LAUNCH_ENTRIES.iter().position(|(c, _)| *c == cbid) else {
            return false;
        };
        if inside {
            self.inside.fetch_add(1, Ordering::Relaxed);
        } else {
            self.outside[i].fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Launch entries inside a wrapper or the library.
    pub fn inside(&self) -> u64 {
        self.inside.load(Ordering::Relaxed)
    }

    /// Launch entries outside every wrapper, in all.
    pub fn outside(&self) -> u64 {
        self.outside.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Launch entries outside every wrapper, by entry (only those seen).
    pub fn outside_by_entry(&self) -> Vec<(&'static str, u64)> {
        LAUNCH_ENTRIES
            .iter()
            .zip(&self.outside)
            .map(|((_, n), c)| (*n, c.load(Ordering::Relaxed)))
            .filter(|(_, c)| *c > 0)
            .collect()
    }
}

/// What the report says of the cross-check.
#[derive(Debug, Clone, Serialize)]
pub struct CuptiReport {
    /// `subscribed`, `off`, `unavailable`, `not_started` (no launch was intercepted),
    /// `stepped_aside` (the program subscribed; counts up to then) or `unsubscribed` (at exit).
    pub status: &'static str,
    /// Why not subscribed, or the library subscribed with.
    pub detail: String,
    /// Launch entries inside a wrapper or the library (every pass counts).
    pub inside: u64,
    /// Application launches that did not pass through a wrapper.
    pub outside: u64,
    /// `outside` by entry.
    pub outside_by_entry: std::collections::BTreeMap<String, u64>,
}

static CENSUS: OnceLock<Census> = OnceLock::new();
static STATE: Mutex<Option<(&'static str, String)>> = Mutex::new(None);

type Unsubscribe = unsafe extern "C" fn(*mut c_void) -> c_int;

/// The live subscription: its handle and CUPTI's `cuptiUnsubscribe`.
struct Live {
    handle: *mut c_void,
    unsubscribe: Unsubscribe,
}

// SAFETY: a CUPTI subscriber handle is an opaque value CUPTI accepts from any thread.
unsafe impl Send for Live {}

static LIVE: Mutex<Option<Live>> = Mutex::new(None);

/// Gives up the subscription, if one is live, and says why in the report (`status`).
fn give_up(status: &'static str, why: &str) -> bool {
    let Some(live) = LIVE.lock().take() else {
        return false;
    };
    // SAFETY: the handle cuptiSubscribe gave, unsubscribed once (taken out above).
    let r = unsafe { (live.unsubscribe)(live.handle) };
    let mut st = STATE.lock();
    let detail = st.as_ref().map(|(_, d)| d.clone()).unwrap_or_default();
    *st = Some((
        status,
        format!("{why} ({detail}; cuptiUnsubscribe returned {r})"),
    ));
    true
}

/// The program subscribes to CUPTI itself: ours goes first, so its profiler gets the one
/// subscription CUPTI allows. Returns whether one was given up. No driver call.
pub fn step_aside() -> bool {
    let gave = give_up("stepped_aside", "the program subscribed to CUPTI");
    if gave {
        log::info!(
            "[kernel-replay] CUPTI cross-check stepped aside: the program subscribes to CUPTI"
        );
    }
    gave
}

/// The address of CUPTI's entry `name` in a CUPTI the process already loaded (by soname,
/// whatever scope it was loaded in), without loading one.
pub fn loaded_entry(name: &str) -> Option<usize> {
    let sym = std::ffi::CString::new(name).ok()?;
    ["libcupti.so.13", "libcupti.so.12", "libcupti.so"]
        .iter()
        .find_map(|lib| {
            use libloading::os::unix::{Library, RTLD_NOW};
            const RTLD_NOLOAD: c_int = 4;
            // SAFETY: RTLD_NOLOAD only finds a library already loaded; nothing runs.
            let l = unsafe { Library::open(Some(*lib), RTLD_NOW | RTLD_NOLOAD) }.ok()?;
            // SAFETY: read as an address only.
            let f = unsafe { l.get::<*mut c_void>(sym.as_bytes_with_nul()) }.ok()?;
            // Loaded before this call: dropping this handle leaves it loaded.
            Some(*f as usize).filter(|p| *p != 0)
        })
}

/// Gives up the subscription at exit (the report's writer calls it first).
pub fn unsubscribe() {
    give_up("unsubscribed", "given up at exit");
}

fn census() -> &'static Census {
    CENSUS.get_or_init(Census::default)
}

/// The cross-check's report.
pub fn report() -> CuptiReport {
    let c = census();
    let (status, detail) = STATE
        .lock()
        .clone()
        .unwrap_or(("not_started", "no launch was intercepted".into()));
    CuptiReport {
        status,
        detail,
        inside: c.inside(),
        outside: c.outside(),
        outside_by_entry: c
            .outside_by_entry()
            .into_iter()
            .map(|(n, v)| (n.to_owned(), v))
            .collect(),
    }
}

/// The callback CUPTI calls (`CUpti_CallbackFunc`). No driver call; no panic leaves it.
unsafe extern "C" fn callback(_: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: for the driver domain `data` is a `CUpti_CallbackData`, whose first member is
    // the 32-bit `callbackSite`.
    let site = unsafe { *(data as *const u32) };
    let _ = std::panic::catch_unwind(|| census().count(domain, cbid, site, Internal::active()));
}

/// Candidate CUPTI libraries: by name on the loader path, then by absolute path.
fn candidates() -> Vec<std::path::PathBuf> {
    use std::path::PathBuf;
    let mut out: Vec<PathBuf> = ["libcupti.so", "libcupti.so.13", "libcupti.so.12"]
        .iter()
        .map(PathBuf::from)
        .collect();
    out.extend(crate::counters::sys::files_in(
        &crate::counters::sys::search_dirs(),
        "libcupti",
    ));
    out
}

type Subscribe = unsafe extern "C" fn(
    *mut *mut c_void,
    unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void),
    *mut c_void,
) -> c_int;
type EnableCallback = unsafe extern "C" fn(u32, *mut c_void, u32, u32) -> c_int;
type ResultString = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;

static SUBSCRIBED: OnceLock<()> = OnceLock::new();

/// Subscribes the cross-check once (the first intercepted launch calls it, with
/// [`Internal`] held, so CUPTI's own driver calls go straight to the driver).
pub fn subscribe() {
    SUBSCRIBED.get_or_init(|| {
        let r = try_subscribe();
        if let Err((status, why)) = &r {
            log::info!("[kernel-replay] CUPTI cross-check {status}: {why}");
        }
        *STATE.lock() = Some(r.unwrap_or_else(|e| e));
    });
}

fn try_subscribe() -> Result<(&'static str, String), (&'static str, String)> {
    if !wanted(std::env::var(CUPTI_ENV).ok().as_deref()) {
        return Err((
            "off",
            format!("not asked for ({CUPTI_ENV}=1, kreplay run --check-launches)"),
        ));
    }
    let mut tried = Vec::new();
    let mut found = None;
    // A CUPTI the process already loaded (PyTorch's, say) first: a second copy of another
    // version beside it would not see the same driver callbacks.
    for name in ["libcupti.so.13", "libcupti.so.12", "libcupti.so"] {
        use libloading::os::unix::{Library, RTLD_NOW};
        const RTLD_NOLOAD: std::ffi::c_int = 4;
        // SAFETY: RTLD_NOLOAD only finds a library already loaded; nothing is initialised.
        if let Ok(lib) = unsafe { Library::open(Some(name), RTLD_NOW | RTLD_NOLOAD) } {
            found = Some((
                libloading::Library::from(lib),
                std::path::PathBuf::from(name),
            ));
            break;
        }
    }
    for path in candidates().into_iter().filter(|_| found.is_none()) {
        // SAFETY: loading NVIDIA's CUPTI library runs its initialisers, as in any profiler.
        match unsafe { libloading::Library::new(&path) } {
            Ok(lib) => {
                found = Some((lib, path));
                break;
            }
            Err(_) => tried.push(path.display().to_string()),
        }
    }
    let Some((lib, path)) = found else {
        return Err((
            "unavailable",
            format!("no libcupti found (tried {})", tried.join(", ")),
        ));
    };
    // SAFETY: CUPTI's documented entries with their documented signatures.
    let (sub, unsub, enable, rstr) = unsafe {
        (
            lib.get::<Subscribe>(b"cuptiSubscribe\0").map(|f| *f),
            lib.get::<Unsubscribe>(b"cuptiUnsubscribe\0").map(|f| *f),
            lib.get::<EnableCallback>(b"cuptiEnableCallback\0")
                .map(|f| *f),
            lib.get::<ResultString>(b"cuptiGetResultString\0")
                .map(|f| *f)
                .ok(),
        )
    };
    let (Ok(sub), Ok(unsub), Ok(enable)) = (sub, unsub, enable) else {
        return Err((
            "unavailable",
            format!(
                "{} lacks cuptiSubscribe/cuptiUnsubscribe/cuptiEnableCallback",
                path.display()
            ),
        ));
    };
    let why = |code: c_int| -> String {
        let mut p: *const c_char = std::ptr::null();
        match rstr {
            // SAFETY: CUPTI writes a pointer to a static NUL-terminated string.
            Some(f) if unsafe { f(code, &mut p) } == 0 && !p.is_null() => {
                // SAFETY: as above.
                unsafe { std::ffi::CStr::from_ptr(p) }
                    .to_string_lossy()
                    .into_owned()
            }
            _ => format!("CUPTI error {code}"),
        }
    };
    let mut handle: *mut c_void = std::ptr::null_mut();
    // SAFETY: an out pointer to a live local and a callback that lives as long as the process.
    let r = unsafe { sub(&mut handle, callback, std::ptr::null_mut()) };
    if r != 0 {
        return Err(("unavailable", format!("cuptiSubscribe: {}", why(r))));
    }
    for (cbid, name) in LAUNCH_ENTRIES {
        // SAFETY: the subscriber just created; a driver-domain callback id.
        let r = unsafe { enable(1, handle, DOMAIN_DRIVER_API, *cbid) };
        if r != 0 {
            log::debug!("[kernel-replay] CUPTI: {name} not enabled: {}", why(r));
        }
    }
    *LIVE.lock() = Some(Live {
        handle,
        unsubscribe: unsub,
    });
    // Kept loaded: the callback may still run on another thread while it is given up.
    std::mem::forget(lib);
    Ok(("subscribed", path.display().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cross_check_runs_only_when_asked_for() {
        assert!(!wanted(None));
        for v in ["0", "", "off", "no", "2"] {
            assert!(!wanted(Some(v)), "{v:?}");
        }
        for v in ["1", "true", "ON", " yes "] {
            assert!(wanted(Some(v)), "{v:?}");
        }
    }

    #[test]
    fn counts_launch_entries_inside_and_outside_by_entry_and_ignores_the_rest() {
        let c = Census::default();
        // A replayed launch: its three passes reach the driver inside the wrapper.
        for _ in 0..3 {
            assert!(c.count(DOMAIN_DRIVER_API, 307, SITE_ENTER, true));
        }
        // An application launch that bypassed the wrappers, by two entries.
        assert!(c.count(DOMAIN_DRIVER_API, 652, SITE_ENTER, false));
        assert!(c.count(DOMAIN_DRIVER_API, 652, SITE_ENTER, false));
        assert!(c.count(DOMAIN_DRIVER_API, 116, SITE_ENTER, false));
        // Exit sites, other domains and other entries are not launches to count.
        assert!(!c.count(DOMAIN_DRIVER_API, 652, 1, false));
        assert!(!c.count(2, 307, SITE_ENTER, false));
        assert!(!c.count(DOMAIN_DRIVER_API, 305, SITE_ENTER, false));
        assert_eq!(c.inside(), 3);
        assert_eq!(c.outside(), 3);
        assert_eq!(
            c.outside_by_entry(),
            vec![("cuLaunchGrid", 1), ("cuLaunchKernelEx", 2)]
        );
    }
}
