//! The capture a C tool asks for in PASS ENTER (SPEC §13, §10): the request slot that
//! `kreplay_request_capture` fills while a PASS ENTER callback runs on this thread, the sink
//! that writes the folder in `replay-capture`'s format when the window hands the capture over,
//! and the table of what became of each request, which `kreplay_capture_result` and
//! `kreplay_capture_message` read.
//!
//! - The slot is thread-local and open only while one PASS ENTER callback runs
//!   ([`CaptureScope`], restored when dropped, also on unwind, so a nested window's callback
//!   has its own). One request per callback: a second is `ALREADY_EXISTS`, the first stays in
//!   force (the C tool cannot see the request it made, so a silent replacement would lose it).
//! - A request is checked when it is made, so the tool hears at once what would only fail
//!   after the pass: an empty path, a folder that exists and is not empty (a capture is never
//!   written over another), a parent folder that does not exist, a folder another request
//!   still waits to write.
//! - The table is process-wide, keyed by the folder's absolute path (a relative `dir` is
//!   resolved against the working directory of each call), and keeps the last [`KEPT`]
//!   requests; older ones are forgotten. An entry is `PENDING` from the request until the
//!   window hands the capture, or why there is none, to the sink: a refusal found as the pass
//!   begins (the bound, the memory, the layout) at once, the rest after the captured pass's
//!   scope check (so still pending in that pass's PASS EXIT); always final by the dispatch's
//!   CONFIG EXIT (and once the application saw the dispatch complete).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::{Capture, CaptureRefused, CaptureRequest, DEFAULT_CAPTURE_MAX_BYTES};

use crate::checked::{Error, ZeroValid};
use crate::sys::*;

/// How many requests the table keeps (the oldest is forgotten first).
pub(crate) const KEPT: usize = 1024;

// SAFETY: integers only.
unsafe impl ZeroValid for kreplay_capture_result_t {}

// ----- The request slot of one PASS ENTER callback -----------------------------------------

/// What `kreplay_request_capture` may fill on this thread now.
struct Slot {
    /// The dispatch of the callback.
    dispatch_id: u64,
    /// Its pass.
    pass: u32,
    /// The folder (absolute) and byte bound asked for.
    asked: Option<(PathBuf, u64)>,
}

thread_local! {
    /// `None` outside a PASS ENTER callback.
    static PASS_CAPTURE: RefCell<Option<Slot>> = const { RefCell::new(None) };
}

/// Opens `kreplay_request_capture` on this thread for one callback (when `open`), restoring
/// what was there before (a nested window's callback) when dropped.
pub(crate) struct CaptureScope(Option<Option<Slot>>);

impl CaptureScope {
    /// Opens the slot for a PASS ENTER callback of `dispatch_id`'s pass `pass`; a closed scope
    /// elsewhere.
    pub(crate) fn enter(open: bool, dispatch_id: u64, pass: u32) -> Self {
        if !open {
            return Self(None);
        }
        let slot = Slot {
            dispatch_id,
            pass,
            asked: None,
        };
        Self(PASS_CAPTURE.try_with(|c| c.replace(Some(slot))).ok())
    }

    /// The request the callback made, as the core takes it.
    pub(crate) fn take(&mut self) -> Option<CaptureRequest> {
        let (dir, max_bytes) = self.take_asked()?;
        Some(capture_request(dir, max_bytes))
    }

    fn take_asked(&mut self) -> Option<(PathBuf, u64)> {
        self.0.as_ref()?;
        PASS_CAPTURE
            .try_with(|c| c.borrow_mut().as_mut().and_then(|s| s.asked.take()))
            .ok()
            .flatten()
    }
}

impl Drop for CaptureScope {
    fn drop(&mut self) {
        // A request never handed to the window (the callback's adapter unwound) is final.
        if let Some((dir, _)) = self.take_asked() {
            finish(
                &dir,
                Done::Refused("the request was not handed to the replay window".into()),
            );
        }
        if let Some(prev) = self.0.take() {
            let _ = PASS_CAPTURE.try_with(|c| c.replace(prev));
        }
    }
}

/// `kreplay_request_capture`: inside a PASS ENTER callback, asks for a capture of this pass
/// into the new folder `dir` with at most `max_bytes` of regions (0: the default bound).
pub(crate) fn request(dir: &str, max_bytes: u64) -> Result<(), Error> {
    if dir.is_empty() {
        return Err(Error::BadArgument("`dir` is empty".into()));
    }
    PASS_CAPTURE
        .try_with(|c| {
            let mut c = c.borrow_mut();
            let Some(slot) = c.as_mut() else {
                return Err(Error::NotInPassEnter("kreplay_request_capture"));
            };
            if let Some((asked, _)) = &slot.asked {
                return Err(Error::AlreadyExists(format!(
                    "a capture into {} is already asked for in this PASS ENTER (one per pass; it stays in force)",
                    asked.display()
                )));
            }
            let path = std::path::absolute(dir)
                .map_err(|e| Error::BadArgument(format!("`dir` {dir:?}: {e}")))?;
            check_folder(&path)?;
            let max_bytes = if max_bytes == 0 {
                DEFAULT_CAPTURE_MAX_BYTES
            } else {
                max_bytes
            };
            record_pending(&path, slot.dispatch_id, slot.pass, max_bytes)?;
            slot.asked = Some((path, max_bytes));
            Ok(())
        })
        .unwrap_or(Err(Error::ShutDown))
}

/// What `replay_capture::write` would refuse, or could not do, refused now.
fn check_folder(path: &Path) -> Result<(), Error> {
    if path.exists() {
        let empty = std::fs::read_dir(path).is_ok_and(|mut d| d.next().is_none());
        if !path.is_dir() || !empty {
            return Err(Error::AlreadyExists(format!(
                "{}: exists and is not an empty folder; a capture is never written over another",
                path.display()
            )));
        }
    }
    match path.parent() {
        Some(parent) if parent.is_dir() => Ok(()),
        Some(parent) => Err(Error::NotFound(format!(
            "{}: the parent folder {} does not exist (it is not created)",
            path.display(),
            parent.display()
        ))),
        None => Err(Error::BadArgument(format!(
            "{}: a capture folder needs a parent folder",
            path.display()
        ))),
    }
}

/// The request a C tool made, as the core takes it: the sink writes the folder, logs what
/// became of it and records that in the table.
fn capture_request(dir: PathBuf, max_bytes: u64) -> CaptureRequest {
    CaptureRequest::new(Arc::new(move |c: Result<Capture, CaptureRefused>| {
        let done = match c {
            Err(e) => Done::Refused(e.to_string()),
            Ok(c) => match replay_capture::write(&dir, &c) {
                Ok(m) => {
                    let message = format!(
                        "captured kernel {:?} (dispatch {}, pass {}) to {}",
                        m.kernel.name,
                        m.dispatch_id,
                        c.pass,
                        dir.display()
                    );
                    log::info!("[kernel-replay] {message}");
                    Done::Written {
                        regions: u32::try_from(c.regions.len()).unwrap_or(u32::MAX),
                        bytes: c.regions.iter().map(|r| r.size).sum(),
                        message,
                    }
                }
                Err(e) => Done::WriteFailed(e.to_string()),
            },
        };
        if let Done::Refused(e) | Done::WriteFailed(e) = &done {
            log::warn!(
                "[kernel-replay] capture to {} not written: {e}",
                dir.display()
            );
        }
        finish(&dir, done);
    }))
    .max_bytes(max_bytes)
}

// ----- What became of each request ---------------------------------------------------------

/// One request, as the table keeps it.
#[derive(Debug, Clone)]
struct Entry {
    dir: PathBuf,
    result: kreplay_capture_result_t,
    message: String,
}

/// How a request ended.
enum Done {
    Written {
        regions: u32,
        bytes: u64,
        message: String,
    },
    Refused(String),
    WriteFailed(String),
}

static RESULTS: Mutex<VecDeque<Entry>> = Mutex::new(VecDeque::new());

/// Records a new request as pending; a folder another request still waits to write is
/// refused.
fn record_pending(dir: &Path, dispatch_id: u64, pass: u32, max_bytes: u64) -> Result<(), Error> {
    let mut table = RESULTS.lock();
    if let Some(i) = table.iter().position(|e| e.dir == dir) {
        if table[i].result.state == KREPLAY_CAPTURE_PENDING {
            return Err(Error::AlreadyExists(format!(
                "{}: a capture asked for in dispatch {} still waits to write this folder",
                dir.display(),
                table[i].result.dispatch_id
            )));
        }
        table.remove(i);
    }
    if table.len() >= KEPT {
        table.pop_front();
    }
    let mut result = kreplay_capture_result_t::zeroed();
    result.size = std::mem::size_of::<kreplay_capture_result_t>() as u64;
    result.dispatch_id = dispatch_id;
    result.max_bytes = max_bytes;
    result.state = KREPLAY_CAPTURE_PENDING;
    result.pass = pass;
    table.push_back(Entry {
        dir: dir.to_path_buf(),
        result,
        message: "pending: the captured pass has not ended".into(),
    });
    Ok(())
}

/// Makes the pending request for `dir` final (a request forgotten since is not recorded).
fn finish(dir: &Path, done: Done) {
    let mut table = RESULTS.lock();
    let Some(e) = table
        .iter_mut()
        .find(|e| e.dir == dir && e.result.state == KREPLAY_CAPTURE_PENDING)
    else {
        return;
    };
    match done {
        Done::Written {
            regions,
            bytes,
            message,
        } => {
            e.result.state = KREPLAY_CAPTURE_WRITTEN;
            e.result.region_count = regions;
            e.result.captured_bytes = bytes;
            e.message = message;
        }
        Done::Refused(why) => {
            e.result.state = KREPLAY_CAPTURE_REFUSED;
            e.message = why;
        }
        Done::WriteFailed(why) => {
            e.result.state = KREPLAY_CAPTURE_WRITE_FAILED;
            e.message = why;
        }
    }
}

/// What became of the last request for the folder `dir`, and its message.
pub(crate) fn result(dir: &str) -> Result<(kreplay_capture_result_t, String), Error> {
    if dir.is_empty() {
        return Err(Error::BadArgument("`dir` is empty".into()));
    }
    let path =
        std::path::absolute(dir).map_err(|e| Error::BadArgument(format!("`dir` {dir:?}: {e}")))?;
    let table = RESULTS.lock();
    table
        .iter()
        .find(|e| e.dir == path)
        .map(|e| (e.result, e.message.clone()))
        .ok_or_else(|| {
            Error::NotFound(format!(
                "{}: no capture was asked for into this folder (or it is older than the last {KEPT} requests)",
                path.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("kreplay-ffi-unit-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_request_outside_pass_enter_is_refused_and_one_inside_is_pending_then_final() {
        let d = scratch("pending");
        let s = d.to_str().unwrap();
        assert_eq!(
            request(s, 0).unwrap_err().status(),
            KREPLAY_STATUS_CONTEXT_ERROR
        );
        {
            let mut scope = CaptureScope::enter(true, 7, 1);
            request(s, 0).unwrap();
            let again = request(s, 0).unwrap_err();
            assert_eq!(again.status(), KREPLAY_STATUS_ALREADY_EXISTS, "{again}");
            let (r, m) = result(s).unwrap();
            assert_eq!(
                (r.state, r.dispatch_id, r.pass),
                (KREPLAY_CAPTURE_PENDING, 7, 1)
            );
            assert_eq!(r.max_bytes, DEFAULT_CAPTURE_MAX_BYTES);
            assert!(m.contains("pending"), "{m}");
            let req = scope.take().expect("the request");
            (req.sink)(Err(CaptureRefused::UnknownLayout));
        }
        let (r, m) = result(s).unwrap();
        assert_eq!(r.state, KREPLAY_CAPTURE_REFUSED);
        assert!(m.contains("layout"), "{m}");
        assert!(!d.exists());
        assert_eq!(
            request(s, 0).unwrap_err().status(),
            KREPLAY_STATUS_CONTEXT_ERROR,
            "the scope closed"
        );
    }

    #[test]
    fn a_request_dropped_unhanded_is_final_and_bad_folders_are_refused_at_once() {
        let d = scratch("dropped");
        let s = d.to_str().unwrap();
        {
            let _scope = CaptureScope::enter(true, 9, 0);
            request(s, 12).unwrap();
        }
        let (r, _) = result(s).unwrap();
        assert_eq!((r.state, r.max_bytes), (KREPLAY_CAPTURE_REFUSED, 12));

        let full = scratch("full");
        std::fs::create_dir_all(&full).unwrap();
        std::fs::write(full.join("x"), b"x").unwrap();
        let orphan = scratch("orphan").join("a").join("b");
        let _scope = CaptureScope::enter(true, 10, 0);
        let e = request(full.to_str().unwrap(), 0).unwrap_err();
        assert_eq!(e.status(), KREPLAY_STATUS_ALREADY_EXISTS, "{e}");
        let e = request(orphan.to_str().unwrap(), 0).unwrap_err();
        assert_eq!(e.status(), KREPLAY_STATUS_NOT_FOUND, "{e}");
        assert_eq!(
            request("", 0).unwrap_err().status(),
            KREPLAY_STATUS_BAD_ARGUMENT
        );
        assert_eq!(
            result(orphan.to_str().unwrap()).unwrap_err().status(),
            KREPLAY_STATUS_NOT_FOUND
        );
        let _ = std::fs::remove_dir_all(&full);
    }
}
