//! The checked layer of the C ABI (SPEC §10): everything between a raw C argument and the
//! core's safe API, one area per file, with no file using one that uses it:
//!
//! - `error`: every way a call can fail, with the status code it maps to and a message for
//!   `kreplay_last_error`.
//! - `boundary`: the entry guard, which runs an entry point's body under `catch_unwind`, turns
//!   its result into a status and records the message; no panic crosses the C boundary.
//! - `handle`: opaque handles made of a slot and a generation (and a tag per handle type), so
//!   a handle used after destroy (or a made-up one) is an error, never undefined behaviour.
//! - `pointer`: pointer and string helpers (`unsafe`, each with a numbered `# Safety` list):
//!   NULL checks, C strings, versioned structs read and written up to the caller's `size`,
//!   strings copied out into caller buffers.
//! - `enums`: decoding of enumeration values (out-of-range values are errors) and the C value
//!   of each core enumeration.
//! - `view`: the core's dispatch info, outcome and summary in C layout.
//!
//! Order (each uses only those before it): `error`, `pointer`, `boundary`, `handle`, `enums`,
//! `view`. The rest of the crate names the items through this module.

mod boundary;
mod enums;
mod error;
mod handle;
mod pointer;
mod view;

pub(crate) use boundary::*;
pub(crate) use enums::*;
pub(crate) use error::*;
pub(crate) use handle::*;
pub(crate) use pointer::*;
pub(crate) use view::*;
