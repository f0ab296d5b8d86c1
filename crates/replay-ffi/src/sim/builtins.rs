//! The built-in kernels a C or C++ tool can launch on the simulator, by name.
//!
//! Kernels are Rust closures in the simulator; C cannot pass one, so the C ABI offers a small
//! fixed set, enough for a tool to show a real replay: an idempotent store, a read-modify-write
//! (whose replay is only correct because memory is restored between passes), an atomic
//! increment (also of module variables), and a reduction into a running total.
//!
//! Each argument block is a sequence of 8-byte little-endian words (pointers and counts),
//! as SPEC §7.2 reads argument blocks. Counts are in elements; a kernel refuses (traps) a
//! count whose byte size exceeds [`MAX_KERNEL_BYTES`] rather than allocate it on the host.

use std::sync::Arc;

use replay_mock::{KernelBody, KernelCtx, KernelError};

/// Most bytes one built-in kernel touches in one buffer.
pub(crate) const MAX_KERNEL_BYTES: u64 = 256 << 20;

/// The names of the built-in kernels, in the order the header documents them.
pub(crate) const NAMES: [&str; 4] = ["fill_u32", "axpy_rmw", "increment_u64", "reduce_sum_u32"];

/// The byte size of `count` u32 elements, or a trap.
fn u32_bytes(ctx: &KernelCtx<'_>, word: usize) -> Result<usize, KernelError> {
    let count = ctx.word(word);
    match count.checked_mul(4) {
        Some(b) if b <= MAX_KERNEL_BYTES => Ok(b as usize),
        _ => Err(KernelError::Trap(format!(
            "element count {count} exceeds the built-in kernels' limit of {} bytes",
            MAX_KERNEL_BYTES
        ))),
    }
}

fn u32_at(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// `fill_u32(dst, count, value)`: `dst[i] = value` for `i < count`.
fn fill_u32(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (dst, value) = (ctx.word(0), ctx.word(2) as u32);
    let n = u32_bytes(ctx, 1)?;
    let bytes: Vec<u8> = std::iter::repeat_n(value.to_le_bytes(), n / 4)
        .flatten()
        .collect();
    ctx.instructions((n / 4) as u64);
    ctx.write(dst, &bytes)?;
    Ok(())
}

/// `axpy_rmw(x, y, count, a)`: `y[i] = a * x[i] + y[i]` (u32, wrapping) for `i < count`.
fn axpy_rmw(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (x, y, a) = (ctx.word(0), ctx.word(1), ctx.word(3) as u32);
    let n = u32_bytes(ctx, 2)?;
    let xs = ctx.read_vec(x, n)?;
    ctx.instructions(2 * (n / 4) as u64);
    ctx.update(y, n, |ys| {
        for (yw, xw) in ys.chunks_exact_mut(4).zip(xs.chunks_exact(4)) {
            let v = a.wrapping_mul(u32_at(xw)).wrapping_add(u32_at(yw));
            yw.copy_from_slice(&v.to_le_bytes());
        }
    })?;
    Ok(())
}

/// `increment_u64(ptr, delta)`: `*ptr += delta` (atomic, u64). Atomics run once per pass, so
/// only the restore between passes keeps the result equal to one execution.
fn increment_u64(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (p, delta) = (ctx.word(0), ctx.word(1));
    ctx.atomic_add_u64(p, delta)?;
    Ok(())
}

/// `reduce_sum_u32(src, count, out)`: `*out += src[0] + ... + src[count - 1]` (u64).
fn reduce_sum_u32(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (src, out) = (ctx.word(0), ctx.word(2));
    let n = u32_bytes(ctx, 1)?;
    let xs = ctx.read_vec(src, n)?;
    let sum: u64 = xs.chunks_exact(4).map(|w| u64::from(u32_at(w))).sum();
    ctx.instructions((n / 4) as u64);
    ctx.atomic_add_u64(out, sum)?;
    Ok(())
}

/// The body of the built-in kernel `name`.
pub(crate) fn body(name: &str) -> Option<KernelBody> {
    let f: KernelBody = match name {
        "fill_u32" => Arc::new(fill_u32),
        "axpy_rmw" => Arc::new(axpy_rmw),
        "increment_u64" => Arc::new(increment_u64),
        "reduce_sum_u32" => Arc::new(reduce_sum_u32),
        _ => return None,
    };
    Some(f)
}

/// The error for an unknown name.
pub(crate) fn unknown(name: &str) -> crate::checked::Error {
    crate::checked::Error::BadArgument(format!(
        "{name:?} is not a built-in kernel; the built-in kernels are {}",
        NAMES.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_core::{AgentId, Dim3, MemoryClass};
    use replay_mock::{KernArgs, Kernel, SimRuntime};

    fn run(rt: &SimRuntime, name: &str, args: Vec<u8>) -> Result<(), KernelError> {
        let k = Kernel::from_body(name, body(name).unwrap());
        rt.dispatch(rt.queue(AgentId(0), 0), &k, &args, Dim3::new(4, 1, 1))
            .unwrap()
            .wait()
    }

    #[test]
    fn every_name_has_a_body_and_the_kernels_compute_what_they_document() {
        for n in NAMES {
            assert!(body(n).is_some(), "{n}");
        }
        assert!(body("nope").is_none());
        let rt = SimRuntime::new();
        let a0 = AgentId(0);
        let x = rt.alloc(a0, 16, MemoryClass::DEVICE_COARSE).unwrap();
        let y = rt.alloc(a0, 16, MemoryClass::DEVICE_COARSE).unwrap();
        let out = rt.alloc(a0, 8, MemoryClass::DEVICE_COARSE).unwrap();
        run(
            &rt,
            "fill_u32",
            KernArgs::new().ptr(x).u64(4).u64(3).build(),
        )
        .unwrap();
        assert_eq!(rt.read_u32s(x, 4).unwrap(), vec![3; 4]);
        rt.write_u32s(y, &[1, 2, 3, 4]).unwrap();
        let axpy = KernArgs::new().ptr(x).ptr(y).u64(4).u64(2).build();
        run(&rt, "axpy_rmw", axpy).unwrap();
        assert_eq!(rt.read_u32s(y, 4).unwrap(), vec![7, 8, 9, 10]);
        run(
            &rt,
            "reduce_sum_u32",
            KernArgs::new().ptr(y).u64(4).ptr(out).build(),
        )
        .unwrap();
        run(
            &rt,
            "increment_u64",
            KernArgs::new().ptr(out).u64(5).build(),
        )
        .unwrap();
        assert_eq!(rt.read(out, 8).unwrap(), 39u64.to_le_bytes());
        // Too large a count traps instead of allocating; a bad pointer faults.
        let e = run(&rt, "fill_u32", KernArgs::new().ptr(x).u64(1 << 40).build()).unwrap_err();
        assert!(matches!(e, KernelError::Trap(_)), "{e}");
        let e = run(&rt, "increment_u64", KernArgs::new().u64(8).u64(1).build()).unwrap_err();
        assert!(matches!(e, KernelError::Fault(_)), "{e}");
        rt.shutdown();
    }
}
