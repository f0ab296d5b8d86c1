//! The checked layer: everything between a raw C argument and the core's safe API.
//!
//! - [`Error`]: every way a call can fail, with the status code it maps to and a message for
//!   `kreplay_last_error`.
//! - [`guard`]: runs an entry point's body under `catch_unwind`, turns its result into a status
//!   and records the message; no panic crosses the C boundary.
//! - [`HandleTable`]: opaque handles made of a slot and a generation, so a handle used after
//!   destroy (or a made-up one) is an error, never undefined behaviour.
//! - Pointer helpers (`unsafe`, each with a numbered `# Safety` list): NULL checks, C strings,
//!   versioned structs read and written up to the caller's `size`, strings copied out into
//!   caller buffers.
//! - Conversions between the core's types and the C structs (dispatch info, outcome, summary)
//!   and decoding of enumeration values, out-of-range values being errors.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::fmt;
use std::mem::{align_of, size_of};
use std::panic::{catch_unwind, AssertUnwindSafe};

use replay_context::{OverrideSupport, RegistryError};
use replay_core::{
    ContextError, DispatchInfo, Operation, Outcome, OutcomeRecord, Phase, PolicyError, Reason,
    RestoreMode, RunSummary, Scope, ServiceError, Subscription,
};

use crate::sys::*;

// ----- Errors ------------------------------------------------------------------------------

/// Why a call failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Error {
    /// A required pointer was NULL.
    NullPointer(&'static str),
    /// A struct's `size` below its first version.
    BadSize {
        what: &'static str,
        got: u64,
        min: usize,
    },
    /// An enumeration or flag out of range.
    BadEnum { what: &'static str, value: i64 },
    /// An unknown or stale handle, or a dead outcome pointer.
    InvalidHandle(String),
    /// The service has its owner already.
    AlreadyConfigured,
    /// The service has no owner.
    NotConfigured,
    /// Not allowed inside a callback.
    InCallback,
    /// A context toggle answered.
    Context(ContextError),
    /// A policy value was rejected.
    Policy(PolicyError),
    /// Policy variables of the environment were malformed and not set since through the API.
    EnvPolicy(Vec<PolicyError>),
    /// A malformed argument.
    BadArgument(String),
    /// The caller's buffer is too small.
    BufferTooSmall { required: usize, given: usize },
    /// Exists already.
    AlreadyExists(String),
    /// After shutdown.
    ShutDown,
    /// A bug: a caught panic or an impossible state.
    Internal(String),
    /// The simulated device reported an error (a kernel's memory fault, a refused launch).
    Device(String),
    /// The simulated device is out of memory.
    OutOfMemory(String),
    /// Nothing of that name or id exists.
    NotFound(String),
}

impl Error {
    /// The status code of this error.
    pub(crate) fn status(&self) -> kreplay_status_t {
        match self {
            Self::NullPointer(_) => KREPLAY_STATUS_NULL_POINTER,
            Self::BadSize { .. } => KREPLAY_STATUS_BAD_SIZE,
            Self::BadEnum { .. } => KREPLAY_STATUS_BAD_ENUM,
            Self::InvalidHandle(_) => KREPLAY_STATUS_INVALID_HANDLE,
            Self::AlreadyConfigured => KREPLAY_STATUS_ALREADY_CONFIGURED,
            Self::NotConfigured => KREPLAY_STATUS_NOT_CONFIGURED,
            Self::InCallback => KREPLAY_STATUS_IN_CALLBACK,
            Self::Context(ContextError::ContextError) => KREPLAY_STATUS_CONTEXT_ERROR,
            Self::Context(ContextError::ContextNotStarted(_)) => KREPLAY_STATUS_CONTEXT_NOT_STARTED,
            Self::Context(ContextError::Unsupported(_)) => KREPLAY_STATUS_UNSUPPORTED,
            Self::Context(ContextError::UnknownContext(_)) => KREPLAY_STATUS_INVALID_HANDLE,
            Self::Policy(_) | Self::EnvPolicy(_) => KREPLAY_STATUS_POLICY_ERROR,
            Self::BadArgument(_) => KREPLAY_STATUS_BAD_ARGUMENT,
            Self::BufferTooSmall { .. } => KREPLAY_STATUS_BUFFER_TOO_SMALL,
            Self::AlreadyExists(_) => KREPLAY_STATUS_ALREADY_EXISTS,
            Self::ShutDown => KREPLAY_STATUS_SHUT_DOWN,
            Self::Internal(_) => KREPLAY_STATUS_INTERNAL,
            Self::Device(_) => KREPLAY_STATUS_DEVICE_ERROR,
            Self::OutOfMemory(_) => KREPLAY_STATUS_OUT_OF_MEMORY,
            Self::NotFound(_) => KREPLAY_STATUS_NOT_FOUND,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NullPointer(what) => write!(f, "`{what}` is NULL"),
            Self::BadSize { what, got, min } => write!(
                f,
                "`{what}->size` is {got}, smaller than the first version of the struct ({min} bytes); set it to sizeof"
            ),
            Self::BadEnum { what, value } => write!(f, "`{what}` = {value} is out of range"),
            Self::InvalidHandle(msg) => f.write_str(msg),
            Self::AlreadyConfigured => f.write_str(
                "the replay service is already configured; a process has one owner, even after it stopped or was destroyed",
            ),
            Self::NotConfigured => f.write_str("the replay service has not been configured"),
            Self::InCallback => f.write_str("not allowed from inside a kernel-replay callback"),
            Self::Context(e) => write!(f, "{e}"),
            Self::Policy(e) => write!(f, "{e}"),
            Self::EnvPolicy(errors) => {
                write!(
                    f,
                    "the environment's replay policy has {} malformed variable(s): ",
                    errors.len()
                )?;
                for (i, e) in errors.iter().enumerate() {
                    write!(f, "{}{e}", if i == 0 { "" } else { "; " })?;
                }
                f.write_str(
                    ". Well-formed variables are in force; fix these in the environment, or set each \
                     through kreplay_policy_set (the filter's through kreplay_filter_set), before \
                     configuring replay",
                )
            }
            Self::BadArgument(msg) => f.write_str(msg),
            Self::BufferTooSmall { required, given } => {
                write!(f, "the buffer holds {given} bytes; {required} are needed")
            }
            Self::AlreadyExists(msg) => f.write_str(msg),
            Self::ShutDown => f.write_str("kreplay_shutdown() was called; the library is shut down"),
            Self::Internal(msg) => write!(f, "internal error: {msg}"),
            Self::Device(msg) | Self::OutOfMemory(msg) | Self::NotFound(msg) => f.write_str(msg),
        }
    }
}

impl From<ServiceError> for Error {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::AlreadyConfigured { .. } => Self::AlreadyConfigured,
            ServiceError::NotConfigured => Self::NotConfigured,
            ServiceError::Policy(p) => Self::Policy(p),
        }
    }
}

impl From<RegistryError> for Error {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::UnknownContext(_) => Self::InvalidHandle(e.to_string()),
            RegistryError::AlreadyExists(_) | RegistryError::DuplicateParticipant { .. } => {
                Self::AlreadyExists(e.to_string())
            }
        }
    }
}

// ----- Last error and the entry guard ------------------------------------------------------

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `msg` as this thread's last error (NUL bytes are replaced).
pub(crate) fn set_last_error(msg: &str) {
    let c = lossy_cstring(msg);
    // At thread teardown the slot may be gone; the message is then dropped.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

/// Clears this thread's last error.
pub(crate) fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|e| {
        let mut e = e.borrow_mut();
        if !e.as_bytes().is_empty() {
            *e = CString::default();
        }
    });
}

/// This thread's last error; valid until the next call that sets or clears it.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Runs an entry point's body: catches panics, maps the result to a status, records the error
/// message (prefixed with the function's name) or clears it.
pub(crate) fn guard(
    name: &'static str,
    body: impl FnOnce() -> Result<(), Error>,
) -> kreplay_status_t {
    let result = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with a non-string payload".to_owned());
        log::error!("[kernel-replay] {name}: caught a panic: {msg}");
        Err(Error::Internal(format!("a panic was caught: {msg}")))
    });
    match result {
        Ok(()) => {
            clear_last_error();
            KREPLAY_STATUS_OK
        }
        Err(e) => {
            set_last_error(&format!("{name}: {e}"));
            e.status()
        }
    }
}

// ----- Handles -----------------------------------------------------------------------------

/// Most live handles per table; beyond, `insert` refuses.
pub(crate) const MAX_SLOTS: usize = 1 << 20;

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Bits of a handle's low word that hold the slot index; the byte above holds the table's tag.
const SLOT_BITS: u32 = 24;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;

/// Values addressed by opaque `u64` handles: slot index in the low 24 bits, the table's tag in
/// the next 8 (0 for contexts; each handle type has its own, so a handle of one type is never
/// taken for another), generation in the high 32. A slot's generation starts at 1 and grows on
/// every removal, so a handle is never 0 and a stale handle never matches a reused slot; a slot
/// whose generation would wrap is retired instead of reused.
#[derive(Debug)]
pub(crate) struct HandleTable<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    live: usize,
    max_slots: usize,
    tag: u8,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        Self::with_max_slots(MAX_SLOTS)
    }
}

impl<T> HandleTable<T> {
    /// An empty table that holds at most `max_slots` slots.
    pub(crate) fn with_max_slots(max_slots: usize) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            max_slots: max_slots.min(SLOT_MASK as usize + 1),
            tag: 0,
        }
    }

    /// An empty table whose handles carry `tag`.
    pub(crate) fn tagged(tag: u8) -> Self {
        Self {
            tag,
            ..Self::default()
        }
    }

    fn encode(&self, slot: u32, generation: u32) -> u64 {
        (u64::from(generation) << 32) | (u64::from(self.tag) << SLOT_BITS) | u64::from(slot)
    }

    /// Slot and generation of a handle of this table; `None` for another table's tag.
    fn decode(&self, handle: u64) -> Option<(usize, u32)> {
        let low = handle & 0xffff_ffff;
        ((low >> SLOT_BITS) as u8 == self.tag)
            .then_some(((low & SLOT_MASK) as usize, (handle >> 32) as u32))
    }

    /// Stores `value`; its handle, or `Err(value)` when the table is full.
    pub(crate) fn insert(&mut self, value: T) -> Result<u64, T> {
        if let Some(slot) = self.free.pop() {
            let s = &mut self.slots[slot as usize];
            debug_assert!(s.value.is_none());
            s.value = Some(value);
            let generation = s.generation;
            self.live += 1;
            return Ok(self.encode(slot, generation));
        }
        if self.slots.len() >= self.max_slots {
            return Err(value);
        }
        let slot = self.slots.len() as u32;
        self.slots.push(Slot {
            generation: 1,
            value: Some(value),
        });
        self.live += 1;
        Ok(self.encode(slot, 1))
    }

    /// The value of a live handle.
    pub(crate) fn get(&self, handle: u64) -> Option<&T> {
        let (slot, generation) = self.decode(handle)?;
        let s = self.slots.get(slot)?;
        (s.generation == generation && generation != 0)
            .then_some(s.value.as_ref())
            .flatten()
    }

    /// Removes a live handle's value; the handle (and every copy of it) becomes stale.
    pub(crate) fn remove(&mut self, handle: u64) -> Option<T> {
        let (slot, generation) = self.decode(handle)?;
        let s = self.slots.get_mut(slot)?;
        if s.generation != generation || generation == 0 {
            return None;
        }
        s.value.as_ref()?;
        Some(self.take_slot(slot))
    }

    /// Takes the value of an occupied slot and makes its handles stale.
    fn take_slot(&mut self, slot: usize) -> T {
        let s = &mut self.slots[slot];
        let value = s.value.take().expect("the slot is occupied");
        self.live -= 1;
        match s.generation.checked_add(1) {
            Some(g) => {
                s.generation = g;
                self.free.push(slot as u32);
            }
            // Retired: no generation is left that no old handle carries.
            None => s.generation = 0,
        }
        value
    }

    /// Removes every value for which `pred` holds (their handles become stale) and returns
    /// them.
    pub(crate) fn remove_where(&mut self, mut pred: impl FnMut(&T) -> bool) -> Vec<T> {
        let hit: Vec<usize> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.value.as_ref().is_some_and(&mut pred))
            .map(|(i, _)| i)
            .collect();
        hit.into_iter().map(|i| self.take_slot(i)).collect()
    }

    /// Live values.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live
    }
}

// ----- Pointer helpers ---------------------------------------------------------------------

/// Fails with `NullPointer(what)` when `p` is NULL.
pub(crate) fn non_null<T>(p: *const T, what: &'static str) -> Result<(), Error> {
    if p.is_null() {
        Err(Error::NullPointer(what))
    } else {
        Ok(())
    }
}

/// Writes `value` through an out-parameter after checking it.
///
/// # Safety
///
/// 1. `p` is NULL or valid for a write of one `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, what: &'static str, value: T) -> Result<(), Error> {
    non_null(p, what)?;
    if p as usize % align_of::<T>() != 0 {
        return Err(Error::BadArgument(format!("`{what}` is misaligned")));
    }
    // SAFETY: non-null and aligned (checked above); valid for writes (caller, item 1).
    unsafe { p.write(value) };
    Ok(())
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
///
/// 1. `p` is NULL or points to a NUL-terminated string that stays unchanged for `'a`.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, what: &'static str) -> Result<&'a str, Error> {
    non_null(p, what)?;
    // SAFETY: non-null (checked above); NUL-terminated and unchanged for 'a (caller, item 1).
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|e| Error::BadArgument(format!("`{what}` is not valid UTF-8: {e}")))
}

/// Struct types whose all-zero bit pattern is a valid value (integers, raw pointers,
/// `Option` of function pointers, arrays of those).
///
/// # Safety
///
/// Implement only for types where every field accepts the all-zero bit pattern.
pub(crate) unsafe trait ZeroValid: Copy {
    /// The all-zero value.
    fn zeroed() -> Self {
        // SAFETY: the implementor guarantees all-zero is a valid value of Self.
        unsafe { std::mem::MaybeUninit::<Self>::zeroed().assume_init() }
    }
}

// SAFETY: integers and raw pointers only.
unsafe impl ZeroValid for kreplay_kernel_filter_t {}
// SAFETY: integers, a float and arrays of integers only.
unsafe impl ZeroValid for kreplay_summary_t {}

/// Checks a versioned struct pointer without copying it: NULL, alignment, and `size` (at
/// least `first_version`).
///
/// # Safety
///
/// 1. `p` is NULL or points to a struct whose first 8 bytes are its `size` (u64), readable.
pub(crate) unsafe fn check_versioned<T>(
    p: *const T,
    what: &'static str,
    first_version: usize,
) -> Result<(), Error> {
    non_null(p, what)?;
    if p as usize % align_of::<T>() != 0 || p as usize % align_of::<u64>() != 0 {
        return Err(Error::BadArgument(format!("`{what}` is misaligned")));
    }
    // SAFETY: non-null and aligned for u64 (checked); the first 8 bytes are readable
    // (caller, item 1).
    let size = unsafe { p.cast::<u64>().read() };
    if size < first_version as u64 {
        return Err(Error::BadSize {
            what,
            got: size,
            min: first_version,
        });
    }
    Ok(())
}

/// Reads a versioned struct the caller passes in: checks NULL, alignment and `size` (at least
/// `first_version` bytes), and copies `min(size, size_of::<T>())` bytes; fields the caller's
/// version lacks stay zero.
///
/// # Safety
///
/// 1. `p` is NULL or points to a readable struct whose first 8 bytes are its `size` (u64) and
///    whose `size` bytes are readable.
pub(crate) unsafe fn read_versioned<T: ZeroValid>(
    p: *const T,
    what: &'static str,
    first_version: usize,
) -> Result<T, Error> {
    non_null(p, what)?;
    if p as usize % align_of::<T>() != 0 {
        return Err(Error::BadArgument(format!("`{what}` is misaligned")));
    }
    // SAFETY: non-null and aligned for T, whose alignment is at least u64's (its first field);
    // the first 8 bytes are readable (caller, item 1).
    let size = unsafe { p.cast::<u64>().read() };
    if size < first_version as u64 {
        return Err(Error::BadSize {
            what,
            got: size,
            min: first_version,
        });
    }
    let n = size.min(size_of::<T>() as u64) as usize;
    let mut value = T::zeroed();
    // SAFETY: `n` bytes are readable at `p` (n <= size, caller item 1) and writable at `value`
    // (n <= size_of::<T>()); the regions are distinct; the bytes come from a struct of the
    // same C layout, so every field is a valid value.
    unsafe {
        std::ptr::copy_nonoverlapping(p.cast::<u8>(), (&mut value as *mut T).cast::<u8>(), n)
    };
    Ok(value)
}

/// Writes a versioned struct into the caller's: checks NULL, alignment and `size` (at least
/// `first_version`), then copies `min(size, size_of::<T>())` bytes of `value`, whose `size`
/// field is first set to that number.
///
/// # Safety
///
/// 1. `p` is NULL or points to a struct whose first 8 bytes are its `size` (u64), readable,
///    and whose `size` bytes are writable.
/// 2. `T`'s first field is its `size` (u64).
pub(crate) unsafe fn write_versioned<T: ZeroValid>(
    p: *mut T,
    what: &'static str,
    first_version: usize,
    mut value: T,
) -> Result<(), Error> {
    non_null(p, what)?;
    if p as usize % align_of::<T>() != 0 {
        return Err(Error::BadArgument(format!("`{what}` is misaligned")));
    }
    // SAFETY: non-null, aligned, first 8 bytes readable (caller, item 1).
    let size = unsafe { p.cast::<u64>().read() };
    if size < first_version as u64 {
        return Err(Error::BadSize {
            what,
            got: size,
            min: first_version,
        });
    }
    let n = size.min(size_of::<T>() as u64);
    // SAFETY: T's first field is a u64 (caller, item 2); `value` is a local of type T.
    unsafe { (&mut value as *mut T).cast::<u64>().write(n) };
    // SAFETY: `n` bytes are readable from `value` (n <= size_of::<T>()) and writable at `p`
    // (n <= size, caller item 1); the regions are distinct.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&value as *const T).cast::<u8>(),
            p.cast::<u8>(),
            n as usize,
        )
    };
    Ok(())
}

/// Copies `s` with a NUL into the caller's buffer; `*required` always receives the bytes
/// needed. A too small buffer is left untouched.
///
/// # Safety
///
/// 1. `buffer` is NULL or valid for writes of `buffer_size` bytes.
/// 2. `required` is NULL or valid for a write of one `usize`.
pub(crate) unsafe fn copy_out_str(
    s: &str,
    buffer: *mut c_char,
    buffer_size: usize,
    required: *mut usize,
) -> Result<(), Error> {
    non_null(required, "required")?;
    if buffer.is_null() && buffer_size > 0 {
        return Err(Error::NullPointer("buffer (with buffer_size > 0)"));
    }
    let bytes = s.as_bytes();
    let needed = bytes.len() + 1;
    // SAFETY: `required` is non-null (checked) and valid for writes (caller, item 2).
    unsafe { write_out(required, "required", needed)? };
    if buffer_size < needed {
        return Err(Error::BufferTooSmall {
            required: needed,
            given: buffer_size,
        });
    }
    // SAFETY: `buffer` is non-null (buffer_size >= needed > 0, checked above) and valid for
    // `buffer_size >= needed` bytes (caller, item 1); `bytes` is a distinct Rust allocation.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buffer, bytes.len());
        buffer.add(bytes.len()).write(0);
    }
    Ok(())
}

/// A C string from Rust text; interior NUL bytes become U+FFFD.
pub(crate) fn lossy_cstring(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| {
        CString::new(s.replace('\0', "\u{fffd}")).expect("no NUL bytes are left")
    })
}

// ----- Enumerations ------------------------------------------------------------------------

/// Decodes a subscription: non-zero, known bits only.
pub(crate) fn decode_subscription(bits: u32) -> Result<Subscription, Error> {
    match Subscription::from_bits(bits) {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(Error::BadEnum {
            what: "subscription",
            value: i64::from(bits),
        }),
    }
}

/// Decodes a participant's override support.
pub(crate) fn decode_support(v: u32) -> Result<OverrideSupport, Error> {
    match v {
        KREPLAY_OVERRIDES_HONOURED => Ok(OverrideSupport::Honours),
        KREPLAY_OVERRIDES_UNSUPPORTED => Ok(OverrideSupport::CannotHonour),
        _ => Err(Error::BadEnum {
            what: "support",
            value: i64::from(v),
        }),
    }
}

/// The C value of an operation.
pub(crate) fn operation_code(op: Operation) -> kreplay_operation_t {
    match op {
        Operation::Config => KREPLAY_OPERATION_CONFIG,
        Operation::Pass => KREPLAY_OPERATION_PASS,
    }
}

/// The C value of a phase.
pub(crate) fn phase_code(phase: Phase) -> kreplay_phase_t {
    match phase {
        Phase::Enter => KREPLAY_PHASE_ENTER,
        Phase::Exit => KREPLAY_PHASE_EXIT,
    }
}

/// The C value of an outcome.
pub(crate) fn outcome_code(o: Outcome) -> kreplay_outcome_kind_t {
    match o {
        Outcome::Replayed => KREPLAY_OUTCOME_REPLAYED,
        Outcome::Declined => KREPLAY_OUTCOME_DECLINED,
        Outcome::Truncated => KREPLAY_OUTCOME_TRUNCATED,
        Outcome::NotRequested => KREPLAY_OUTCOME_NOT_REQUESTED,
    }
}

/// Every reason with its C value.
pub(crate) const REASONS: [(Reason, kreplay_reason_t); 14] = [
    (Reason::None, KREPLAY_REASON_NONE),
    (Reason::UntrackedMemory, KREPLAY_REASON_UNTRACKED_MEMORY),
    (Reason::FootprintBudget, KREPLAY_REASON_FOOTPRINT_BUDGET),
    (Reason::SnapshotFailed, KREPLAY_REASON_SNAPSHOT_FAILED),
    (Reason::QueueDrainStuck, KREPLAY_REASON_QUEUE_DRAIN_STUCK),
    (Reason::AgentDrainStuck, KREPLAY_REASON_AGENT_DRAIN_STUCK),
    (Reason::CopyFenceStuck, KREPLAY_REASON_COPY_FENCE_STUCK),
    (Reason::ReentrantDispatch, KREPLAY_REASON_REENTRANT_DISPATCH),
    (Reason::CallbackFailed, KREPLAY_REASON_CALLBACK_FAILED),
    (Reason::PassDrainStuck, KREPLAY_REASON_PASS_DRAIN_STUCK),
    (Reason::PassLimit, KREPLAY_REASON_PASS_LIMIT),
    (
        Reason::WriteOutsideScope,
        KREPLAY_REASON_WRITE_OUTSIDE_SCOPE,
    ),
    (Reason::SubmitFailed, KREPLAY_REASON_SUBMIT_FAILED),
    (Reason::ScopeCheckFailed, KREPLAY_REASON_SCOPE_CHECK_FAILED),
];

/// The C value of a reason.
pub(crate) fn reason_code(r: Reason) -> kreplay_reason_t {
    // Exhaustive on purpose: a reason added to the core must get a C value here.
    match r {
        Reason::None => KREPLAY_REASON_NONE,
        Reason::UntrackedMemory => KREPLAY_REASON_UNTRACKED_MEMORY,
        Reason::FootprintBudget => KREPLAY_REASON_FOOTPRINT_BUDGET,
        Reason::SnapshotFailed => KREPLAY_REASON_SNAPSHOT_FAILED,
        Reason::QueueDrainStuck => KREPLAY_REASON_QUEUE_DRAIN_STUCK,
        Reason::AgentDrainStuck => KREPLAY_REASON_AGENT_DRAIN_STUCK,
        Reason::CopyFenceStuck => KREPLAY_REASON_COPY_FENCE_STUCK,
        Reason::ReentrantDispatch => KREPLAY_REASON_REENTRANT_DISPATCH,
        Reason::CallbackFailed => KREPLAY_REASON_CALLBACK_FAILED,
        Reason::PassDrainStuck => KREPLAY_REASON_PASS_DRAIN_STUCK,
        Reason::PassLimit => KREPLAY_REASON_PASS_LIMIT,
        Reason::WriteOutsideScope => KREPLAY_REASON_WRITE_OUTSIDE_SCOPE,
        Reason::SubmitFailed => KREPLAY_REASON_SUBMIT_FAILED,
        Reason::ScopeCheckFailed => KREPLAY_REASON_SCOPE_CHECK_FAILED,
    }
}

/// The C value of a reason named as in logs and JSON.
pub(crate) fn reason_code_by_name(name: &str) -> Option<kreplay_reason_t> {
    REASONS
        .iter()
        .find(|(r, _)| r.as_str() == name)
        .map(|&(_, c)| c)
}

/// The C value of a scope.
pub(crate) fn scope_code(s: Scope) -> kreplay_scope_t {
    match s {
        Scope::All => KREPLAY_SCOPE_ALL,
        Scope::Arguments => KREPLAY_SCOPE_ARGUMENTS,
        Scope::Auto => KREPLAY_SCOPE_AUTO,
    }
}

/// The C value of a restore mode.
pub(crate) fn restore_code(r: RestoreMode) -> kreplay_restore_t {
    match r {
        RestoreMode::Full => KREPLAY_RESTORE_FULL,
        RestoreMode::Dirty => KREPLAY_RESTORE_DIRTY,
        RestoreMode::Auto => KREPLAY_RESTORE_AUTO,
    }
}

// ----- C views of core values --------------------------------------------------------------

/// A dispatch info in C layout with the storage its kernel name points into.
#[derive(Debug)]
pub(crate) struct CDispatchInfo {
    info: kreplay_dispatch_info_t,
    _name: CString,
}

// SAFETY: the only pointer inside, `info.kernel_name`, points into `_name`, which this value
// owns and never changes after construction; sharing or sending it cannot race.
unsafe impl Send for CDispatchInfo {}
// SAFETY: as above; the value is immutable after construction.
unsafe impl Sync for CDispatchInfo {}

impl CDispatchInfo {
    /// The C view of `info`.
    pub(crate) fn new(info: &DispatchInfo) -> Self {
        let name = lossy_cstring(&info.kernel_name);
        let dim = |d: replay_core::Dim3| kreplay_dim3_t {
            x: d.x,
            y: d.y,
            z: d.z,
        };
        Self {
            info: kreplay_dispatch_info_t {
                size: size_of::<kreplay_dispatch_info_t>() as u64,
                agent_id: info.agent.0,
                queue_id: info.queue.0,
                dispatch_id: info.dispatch_id.0,
                kernel_id: info.kernel_id.0,
                // The CString's heap buffer does not move when the CString does.
                kernel_name: name.as_ptr(),
                grid: dim(info.grid),
                workgroup: dim(info.workgroup),
                private_segment_size: info.private_segment_size,
                group_segment_size: info.group_segment_size,
            },
            _name: name,
        }
    }

    /// The pointer handed to C; valid while `self` lives.
    pub(crate) fn as_ptr(&self) -> *const kreplay_dispatch_info_t {
        &self.info
    }
}

/// An outcome record in C layout with the storage its pointers point into.
#[derive(Debug)]
pub(crate) struct COutcome {
    c: kreplay_outcome_t,
    _kernel: CString,
    _gpu_seconds: Box<[f64]>,
    _restored: Box<[u64]>,
    _compared: Box<[u64]>,
    record: OutcomeRecord,
}

// SAFETY: the pointers inside `c` point into the boxed slices and the CString this value owns
// and never changes after construction; sharing or sending it cannot race.
unsafe impl Send for COutcome {}
// SAFETY: as above; the value is immutable after construction.
unsafe impl Sync for COutcome {}

impl COutcome {
    /// The C view of `r`.
    pub(crate) fn new(r: &OutcomeRecord) -> Self {
        let kernel = lossy_cstring(&r.kernel);
        let secs: Box<[f64]> = r.pass_gpu_seconds.iter().copied().collect();
        let restored: Box<[u64]> = r.pass_restored_bytes.iter().copied().collect();
        let compared: Box<[u64]> = r.pass_compared_bytes.iter().copied().collect();
        let c = kreplay_outcome_t {
            size: size_of::<kreplay_outcome_t>() as u64,
            dispatch_id: r.dispatch_id.0,
            agent_id: r.agent.0,
            kernel: kernel.as_ptr(),
            outcome: outcome_code(r.outcome),
            reason: reason_code(r.reason),
            requested_passes: r.requested_passes,
            executed_passes: r.executed_passes,
            scope: scope_code(r.scope),
            restore: restore_code(r.restore),
            captured_regions: r.captured_regions,
            tracked_bytes: r.tracked_bytes,
            captured_bytes: r.captured_bytes,
            tier_device_bytes: r.tier_bytes.device,
            tier_pinned_bytes: r.tier_bytes.pinned,
            tier_pageable_bytes: r.tier_bytes.pageable,
            untracked_bytes: r.untracked_bytes,
            untracked_regions: r.untracked_regions,
            reentrancy: u32::from(r.reentrancy),
            snap_seconds: r.snap_seconds,
            restore_seconds: r.restore_seconds,
            compared_bytes: r.compared_bytes,
            restored_bytes: r.restored_bytes,
            // Boxed slices keep their heap address when the box moves; an empty one gives a
            // dangling but aligned, non-null pointer with count 0.
            pass_gpu_seconds: secs.as_ptr(),
            pass_gpu_seconds_count: secs.len() as u64,
            pass_restored_bytes: restored.as_ptr(),
            pass_restored_bytes_count: restored.len() as u64,
            pass_compared_bytes: compared.as_ptr(),
            pass_compared_bytes_count: compared.len() as u64,
        };
        Self {
            c,
            _kernel: kernel,
            _gpu_seconds: secs,
            _restored: restored,
            _compared: compared,
            record: r.clone(),
        }
    }

    /// The pointer handed to C; valid while `self` lives (and `self` does not move: keep it
    /// boxed or behind an `Arc`).
    pub(crate) fn as_ptr(&self) -> *const kreplay_outcome_t {
        &self.c
    }

    /// The record as JSON.
    pub(crate) fn json(&self) -> String {
        self.record.to_json()
    }
}

/// The C view of a run summary.
pub(crate) fn summary_to_c(s: &RunSummary) -> kreplay_summary_t {
    let mut c = kreplay_summary_t::zeroed();
    c.size = size_of::<kreplay_summary_t>() as u64;
    c.dispatches = s.dispatches;
    c.replayed = s.replayed;
    c.declined = s.declined_total();
    c.truncated = s.truncated_total();
    c.not_requested = s.not_requested;
    c.passes = s.passes;
    c.captured_bytes = s.captured_bytes;
    c.compared_bytes = s.compared_bytes;
    c.restored_bytes = s.restored_bytes;
    c.peak_pooled_bytes = s.peak_pooled_bytes;
    c.replay_seconds = s.replay_seconds;
    for (map, out) in [
        (&s.declined, &mut c.declined_by_reason),
        (&s.truncated, &mut c.truncated_by_reason),
    ] {
        for (name, n) in map {
            match reason_code_by_name(name) {
                Some(code) if (code as usize) < out.len() => {
                    out[code as usize] = out[code as usize].saturating_add(*n)
                }
                _ => log::warn!("[kernel-replay] summary reason {name:?} has no C value"),
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_never_zero_and_carry_slot_and_generation() {
        let mut t = HandleTable::default();
        let a = t.insert("a").unwrap();
        let b = t.insert("b").unwrap();
        assert_ne!(a, 0);
        assert_eq!(a & 0xffff_ffff, 0);
        assert_eq!(b & 0xffff_ffff, 1);
        assert_eq!(a >> 32, 1);
        assert_eq!(t.get(a), Some(&"a"));
        assert_eq!(t.get(b), Some(&"b"));
        assert_eq!(t.get(0), None);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_removed_handle_is_stale_even_when_its_slot_is_reused() {
        let mut t = HandleTable::default();
        let a = t.insert(1).unwrap();
        assert_eq!(t.remove(a), Some(1));
        assert_eq!(t.get(a), None);
        assert_eq!(t.remove(a), None, "a second destroy is refused");
        let c = t.insert(2).unwrap();
        assert_eq!(c & 0xffff_ffff, a & 0xffff_ffff, "the slot is reused");
        assert_ne!(c, a, "with a new generation");
        assert_eq!(c >> 32, 2);
        assert_eq!(t.get(a), None, "the old handle stays stale");
        assert_eq!(t.get(c), Some(&2));
    }

    #[test]
    fn made_up_handles_are_refused() {
        let mut t = HandleTable::default();
        let a = t.insert(1).unwrap();
        for h in [
            0,
            u64::MAX,
            a + 1,
            a ^ (1 << 40),
            a & 0xffff_ffff,
            7 << 32 | 9,
        ] {
            assert_eq!(t.get(h), None, "{h:#x}");
            assert_eq!(t.remove(h), None, "{h:#x}");
        }
        assert_eq!(t.get(a), Some(&1));
    }

    #[test]
    fn a_slot_whose_generation_would_wrap_is_retired() {
        let mut t = HandleTable::default();
        let a = t.insert(1).unwrap();
        t.slots[0].generation = u32::MAX;
        let h = t.encode(0, u32::MAX);
        assert_eq!(t.remove(h), Some(1));
        assert_eq!(t.slots[0].generation, 0);
        let b = t.insert(2).unwrap();
        assert_eq!(b & 0xffff_ffff, 1, "a fresh slot, not the retired one");
        assert_eq!(t.get(a), None);
        assert_eq!(t.get(h), None);
        assert_eq!(t.get(0), None, "generation 0 never matches");
    }

    #[test]
    fn a_handle_of_another_table_is_refused() {
        let mut contexts = HandleTable::default();
        let mut sims = HandleTable::tagged(1);
        let c = contexts.insert("context").unwrap();
        let s = sims.insert("sim").unwrap();
        assert_eq!(c & 0xffff_ffff, 0, "context handles keep tag 0");
        assert_eq!((s >> 24) & 0xff, 1);
        assert_eq!(s & 0xff_ffff, c & 0xff_ffff, "same slot and generation");
        assert_eq!(s >> 32, c >> 32);
        assert_eq!(contexts.get(s), None);
        assert_eq!(sims.get(c), None);
        assert_eq!(sims.remove(c), None);
        assert_eq!(sims.get(s), Some(&"sim"));
    }

    #[test]
    fn remove_where_makes_the_removed_handles_stale() {
        let mut t = HandleTable::tagged(3);
        let hs: Vec<u64> = (0..5).map(|i| t.insert(i).unwrap()).collect();
        let mut gone = t.remove_where(|v| v % 2 == 0);
        gone.sort_unstable();
        assert_eq!(gone, vec![0, 2, 4]);
        assert_eq!(t.len(), 2);
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(t.get(*h).is_some(), i % 2 == 1, "{i}");
        }
        let again = t.insert(9).unwrap();
        assert!(!hs.contains(&again), "a reused slot has a new generation");
    }

    #[test]
    fn a_full_table_refuses_until_a_slot_is_freed() {
        let mut t = HandleTable::with_max_slots(2);
        let a = t.insert(1).unwrap();
        let _b = t.insert(2).unwrap();
        assert_eq!(t.insert(3), Err(3));
        assert_eq!(t.remove(a), Some(1));
        let c = t.insert(3).unwrap();
        assert_ne!(c, a);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn read_versioned_checks_null_size_and_alignment() {
        let mut f = kreplay_kernel_filter_t::zeroed();
        // SAFETY: NULL is allowed by the contract.
        let r = unsafe { read_versioned::<kreplay_kernel_filter_t>(std::ptr::null(), "filter", 8) };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_NULL_POINTER);

        f.size = 4;
        // SAFETY: `f` is a valid, aligned filter.
        let r = unsafe { read_versioned(&f, "filter", first_version::KERNEL_FILTER) };
        let e = r.unwrap_err();
        assert_eq!(e.status(), KREPLAY_STATUS_BAD_SIZE);
        assert!(e.to_string().contains("`filter->size` is 4"), "{e}");

        f.size = first_version::KERNEL_FILTER as u64;
        f.skip = 5;
        // SAFETY: as above.
        let r = unsafe { read_versioned(&f, "filter", first_version::KERNEL_FILTER) }.unwrap();
        assert_eq!(r.skip, 5);

        // A misaligned pointer is refused before anything is read.
        let bytes = [0u64; 16];
        let p = (bytes.as_ptr() as *const u8).wrapping_add(1) as *const kreplay_kernel_filter_t;
        // SAFETY: the pointer is refused on alignment before it is dereferenced.
        let r = unsafe { read_versioned(p, "filter", first_version::KERNEL_FILTER) };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_BAD_ARGUMENT);
    }

    #[test]
    fn read_versioned_copies_only_what_the_caller_version_has() {
        // A caller built against a longer (future) struct: only our size is read.
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Longer {
            f: kreplay_kernel_filter_t,
            extra: u64,
        }
        let mut l = Longer {
            f: kreplay_kernel_filter_t::zeroed(),
            extra: 99,
        };
        l.f.size = size_of::<Longer>() as u64;
        l.f.count = 3;
        // SAFETY: `l` is readable for its full size, which its `size` field states.
        let r = unsafe { read_versioned(&l.f, "filter", first_version::KERNEL_FILTER) }.unwrap();
        assert_eq!(r.count, 3);
    }

    #[test]
    fn write_versioned_writes_up_to_the_callers_size() {
        let mut s = kreplay_summary_t::zeroed();
        s.size = 8;
        // SAFETY: `s` is a valid summary.
        let r = unsafe {
            write_versioned(
                &mut s,
                "summary",
                first_version::SUMMARY,
                summary_to_c(&RunSummary::default()),
            )
        };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_BAD_SIZE);

        let mut rs = RunSummary {
            dispatches: 4,
            replayed: 1,
            ..RunSummary::default()
        };
        rs.declined.insert("footprint_budget".into(), 2);
        rs.truncated.insert("pass_limit".into(), 1);
        s.size = size_of::<kreplay_summary_t>() as u64 + 64;
        // SAFETY: the caller states a larger size than it has here, but only our size is
        // written, which `s` holds.
        unsafe { write_versioned(&mut s, "summary", first_version::SUMMARY, summary_to_c(&rs)) }
            .unwrap();
        assert_eq!(s.size, size_of::<kreplay_summary_t>() as u64);
        assert_eq!(s.dispatches, 4);
        assert_eq!(s.declined, 2);
        assert_eq!(s.truncated, 1);
        assert_eq!(
            s.declined_by_reason[KREPLAY_REASON_FOOTPRINT_BUDGET as usize],
            2
        );
        assert_eq!(s.truncated_by_reason[KREPLAY_REASON_PASS_LIMIT as usize], 1);
    }

    #[test]
    fn summary_counters_saturate_instead_of_wrapping() {
        use replay_core::{AgentId, DispatchId};
        let mut rs = RunSummary {
            dispatches: u64::MAX,
            restored_bytes: u64::MAX - 1,
            ..RunSummary::default()
        };
        rs.declined.insert("footprint_budget".into(), u64::MAX);
        rs.declined.insert("snapshot_failed".into(), 3);
        let mut r = OutcomeRecord::new(DispatchId(1), AgentId(0), "k");
        r.outcome = Outcome::Declined;
        r.reason = Reason::FootprintBudget;
        r.restored_bytes = 10;
        rs.add(&r, 0.0);
        assert_eq!(rs.dispatches, u64::MAX);
        assert_eq!(rs.restored_bytes, u64::MAX);
        assert_eq!(rs.declined["footprint_budget"], u64::MAX);
        let c = summary_to_c(&rs);
        assert_eq!(c.declined, u64::MAX, "the total saturates too");
        assert_eq!(
            c.declined_by_reason[KREPLAY_REASON_FOOTPRINT_BUDGET as usize],
            u64::MAX
        );
        assert_eq!(
            c.declined_by_reason[KREPLAY_REASON_SNAPSHOT_FAILED as usize],
            3
        );
    }

    #[test]
    fn copy_out_reports_the_required_size() {
        let mut need = 0usize;
        // SAFETY: NULL buffer with size 0 is allowed; `need` is writable.
        let r = unsafe { copy_out_str("abc", std::ptr::null_mut(), 0, &mut need) };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_BUFFER_TOO_SMALL);
        assert_eq!(need, 4);
        let mut buf = [0x55 as c_char; 4];
        // SAFETY: `buf` holds 4 bytes.
        unsafe { copy_out_str("abc", buf.as_mut_ptr(), 3, &mut need) }.unwrap_err();
        assert_eq!(buf[0], 0x55, "a too small buffer is untouched");
        // SAFETY: as above.
        unsafe { copy_out_str("abc", buf.as_mut_ptr(), 4, &mut need) }.unwrap();
        // SAFETY: the buffer now holds a NUL-terminated string.
        assert_eq!(unsafe { CStr::from_ptr(buf.as_ptr()) }, c"abc");
        // SAFETY: NULL pointers are refused before use.
        let r = unsafe { copy_out_str("abc", std::ptr::null_mut(), 4, &mut need) };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_NULL_POINTER);
        // SAFETY: as above.
        let r = unsafe { copy_out_str("abc", buf.as_mut_ptr(), 4, std::ptr::null_mut()) };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_NULL_POINTER);
    }

    #[test]
    fn strings_and_enums_are_checked() {
        // SAFETY: NULL is refused before use; the literals are NUL-terminated.
        unsafe {
            assert_eq!(
                c_str(std::ptr::null(), "name").unwrap_err().status(),
                KREPLAY_STATUS_NULL_POINTER
            );
            assert_eq!(c_str(c"ok".as_ptr(), "name").unwrap(), "ok");
            assert_eq!(
                c_str(c"\xff".as_ptr(), "name").unwrap_err().status(),
                KREPLAY_STATUS_BAD_ARGUMENT
            );
        }
        assert!(decode_subscription(0).is_err());
        assert!(decode_subscription(4).is_err());
        assert_eq!(
            decode_subscription(3).unwrap(),
            Subscription::CONFIG | Subscription::PASS
        );
        assert_eq!(
            decode_support(2).unwrap_err().status(),
            KREPLAY_STATUS_BAD_ENUM
        );
        assert_eq!(lossy_cstring("a\0b").as_bytes(), "a\u{fffd}b".as_bytes());
        for (r, c) in REASONS {
            assert_eq!(reason_code(r), c);
            assert_eq!(reason_code_by_name(r.as_str()), Some(c));
            assert!(c < KREPLAY_REASON_CAPACITY);
        }
    }

    #[test]
    fn the_guard_turns_panics_into_internal_and_records_messages() {
        let s = guard("kreplay_test", || panic!("boom"));
        assert_eq!(s, KREPLAY_STATUS_INTERNAL);
        // SAFETY: the last error is a NUL-terminated string owned by this thread.
        let msg = unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_str()
            .unwrap()
            .to_owned();
        assert!(msg.starts_with("kreplay_test: internal error"), "{msg}");
        assert!(msg.contains("boom"), "{msg}");
        let s = guard("kreplay_test", || Err(Error::NullPointer("out")));
        assert_eq!(s, KREPLAY_STATUS_NULL_POINTER);
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(msg, "kreplay_test: `out` is NULL");
        assert_eq!(guard("kreplay_test", || Ok(())), KREPLAY_STATUS_OK);
        // SAFETY: as above.
        assert_eq!(unsafe { CStr::from_ptr(last_error_ptr()) }, c"");
    }
}
