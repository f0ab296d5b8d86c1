//! Simulated memory through the C ABI (SPEC §10): allocations of every class, host writes and
//! reads, and the digest of an agent's application memory.

use std::ffi::c_void;

use super::convert::{agent_of, check_bytes, decode_memory, sim_error, MAX_BYTES};
use super::state::runtime;
use crate::checked::{guard, non_null, write_out, Error};
use crate::state::library;
use crate::sys::*;

/// Allocates simulated memory of a class.
///
/// # Safety
///
/// 1. `address` is NULL (refused) or valid for a write of a `u64`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_alloc(
    sim: kreplay_sim_t,
    agent: u32,
    size: u64,
    memory: kreplay_sim_memory_t,
    address: *mut u64,
) -> kreplay_status_t {
    guard("kreplay_sim_alloc", || {
        library()?;
        non_null(address, "address")?;
        let (class, tracked) = decode_memory(memory)?;
        if size == 0 {
            return Err(Error::BadArgument("`size` is 0".to_owned()));
        }
        if size > MAX_BYTES {
            return Err(Error::OutOfMemory(format!(
                "{size} bytes requested; one simulated allocation holds at most {MAX_BYTES} bytes"
            )));
        }
        let rt = runtime(sim)?;
        let agent = agent_of(&rt, agent)?;
        let base = if tracked {
            rt.alloc(agent, size, class)
        } else {
            rt.alloc_untracked(agent, size, class)
        }
        .map_err(sim_error)?;
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(address, "address", base) }
    })
}

/// Frees simulated memory.
///
/// # Safety
///
/// No preconditions (the handle and the address are checked).
#[no_mangle]
pub extern "C" fn kreplay_sim_free(sim: kreplay_sim_t, address: u64) -> kreplay_status_t {
    guard("kreplay_sim_free", || {
        let rt = runtime(sim)?;
        let agent = replay_mock::agent_of(address).ok_or_else(|| {
            Error::BadArgument(format!("{address:#x} is not a simulated device address"))
        })?;
        rt.free(agent, address).map_err(sim_error)
    })
}

/// Copies host bytes into simulated memory.
///
/// # Safety
///
/// 1. `data` is NULL (refused unless `size` is 0) or valid for reads of `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_write(
    sim: kreplay_sim_t,
    address: u64,
    data: *const c_void,
    size: usize,
) -> kreplay_status_t {
    guard("kreplay_sim_write", || {
        library()?;
        if size > 0 {
            non_null(data, "data")?;
        }
        check_bytes("size", size as u64)?;
        let rt = runtime(sim)?;
        let bytes: &[u8] = if size == 0 {
            &[]
        } else {
            // SAFETY: non-null (checked) and readable for `size` bytes (caller, item 1);
            // size <= MAX_BYTES fits in isize.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }
        };
        rt.write(address, bytes).map_err(sim_error)
    })
}

/// Copies simulated memory into host bytes.
///
/// # Safety
///
/// 1. `data` is NULL (refused unless `size` is 0) or valid for writes of `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_read(
    sim: kreplay_sim_t,
    address: u64,
    data: *mut c_void,
    size: usize,
) -> kreplay_status_t {
    guard("kreplay_sim_read", || {
        library()?;
        if size > 0 {
            non_null(data, "data")?;
        }
        check_bytes("size", size as u64)?;
        let rt = runtime(sim)?;
        let bytes = rt.read(address, size).map_err(sim_error)?;
        if size > 0 {
            // SAFETY: `data` is non-null (checked) and writable for `size` bytes (caller,
            // item 1); `bytes` holds `size` bytes in a distinct Rust allocation.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.cast::<u8>(), size) };
        }
        Ok(())
    })
}

/// A digest of all application memory of an agent.
///
/// # Safety
///
/// 1. `digest` is NULL (refused) or valid for a write of a `kreplay_sim_digest_t`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_sim_digest(
    sim: kreplay_sim_t,
    agent: u32,
    digest: *mut kreplay_sim_digest_t,
) -> kreplay_status_t {
    guard("kreplay_sim_digest", || {
        library()?;
        non_null(digest, "digest")?;
        let rt = runtime(sim)?;
        let d = rt.digest_agent_memory(agent_of(&rt, agent)?).0;
        let value = kreplay_sim_digest_t {
            lo: d as u64,
            hi: (d >> 64) as u64,
        };
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(digest, "digest", value) }
    })
}
