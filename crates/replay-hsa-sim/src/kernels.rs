//! Kernel bodies known by name (SPEC §13): the simulated runtime's kernels are Rust closures,
//! so a code object loaded in another process (a standalone replay of a capture, `kreplay
//! replay`) finds its kernels only where that process defined the same bodies under the same
//! names. These are the ones every program of the workspace can define ([`define`]): the tests
//! that capture use them, and `kreplay replay` defines them before it loads a captured code
//! object.
//!
//! Each body reads its arguments as 8-byte words of the argument block (`Dispatch::arg`) and
//! reaches memory only through the checked accessors:
//!
//! | name | arguments | what it does |
//! |---|---|---|
//! | `scale` | `in`, `out`, `factor` | `*out = *in * *factor` |
//! | `rmw` | `x` | `*x = 3 * *x + 1` (read-modify-write: a replay that does not restore shows) |
//! | `add` | `a`, `b`, `out` | `*out = *a + *b` |
//! | `follow` | `table`, `out` | `*out = **table` (follows a pointer stored in memory) |
//! | `count` | `x` | `*x += 1` |

use std::sync::Arc;

use crate::state::{Dispatch, KernelFn, MemFault};
use crate::SimHsa;

fn scale(d: &mut Dispatch<'_>) -> Result<(), MemFault> {
    let factor = d.read_u64(d.arg(2)?)?;
    let v = d.read_u64(d.arg(0)?)?;
    d.write_u64(d.arg(1)?, v.wrapping_mul(factor))
}

fn rmw(d: &mut Dispatch<'_>) -> Result<(), MemFault> {
    let p = d.arg(0)?;
    let v = d.read_u64(p)?;
    d.write_u64(p, v.wrapping_mul(3).wrapping_add(1))
}

fn add(d: &mut Dispatch<'_>) -> Result<(), MemFault> {
    let a = d.read_u64(d.arg(0)?)?;
    let b = d.read_u64(d.arg(1)?)?;
    d.write_u64(d.arg(2)?, a.wrapping_add(b))
}

fn follow(d: &mut Dispatch<'_>) -> Result<(), MemFault> {
    let at = d.read_u64(d.arg(0)?)?;
    let v = d.read_u64(at)?;
    d.write_u64(d.arg(1)?, v)
}

fn count(d: &mut Dispatch<'_>) -> Result<(), MemFault> {
    let p = d.arg(0)?;
    let v = d.read_u64(p)?;
    d.write_u64(p, v.wrapping_add(1))
}

/// The bodies, by name (without the `.kd` suffix a code object's kernel symbol carries).
pub fn library() -> Vec<(&'static str, KernelFn)> {
    vec![
        ("scale", Arc::new(scale) as KernelFn),
        ("rmw", Arc::new(rmw)),
        ("add", Arc::new(add)),
        ("follow", Arc::new(follow)),
        ("count", Arc::new(count)),
    ]
}

/// The names [`library`] defines.
pub fn names() -> Vec<&'static str> {
    library().into_iter().map(|(n, _)| n).collect()
}

/// Defines every body of [`library`] on `sim` ([`SimHsa::define_kernel`], process-wide).
pub fn define(sim: &SimHsa) {
    for (name, body) in library() {
        sim.define_kernel(name, move |d| body(d));
    }
}

/// Whether `symbol` (a code object's kernel symbol, `.kd` suffix or not) has a body here.
pub fn knows(symbol: &str) -> bool {
    let key = symbol.strip_suffix(".kd").unwrap_or(symbol);
    names().contains(&key)
}
