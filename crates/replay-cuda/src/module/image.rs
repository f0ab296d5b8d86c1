//! The application's own code images (SPEC §9.2 "Unmodified applications": code): what
//! `cuModuleLoad*` and `cuLibraryLoad*` were given, read in place for kernel names, module globals and
//! the parameter tables of `.nv.info` (the second source of argument layouts after
//! `cuFuncGetParamInfo`).
//!
//! Formats read:
//! - a cubin (ELF, `e_machine` 190): its extent in memory from the ELF header, the section
//!   and program header tables and the sections' ends;
//! - a fat binary (`fatBinaryHeader`, magic `0xBA55ED50`, as `fatbinary_section.h` declares
//!   it: magic, version, header size, size of the rest), or the `__fatBinC_Wrapper_t`
//!   (magic `0x466243B1`) that points to one. Its entries (kind, header size, payload size,
//!   architecture) are not documented by NVIDIA; the layout read here is the one `cuobjdump`
//!   reads: kind (u16, 2 = cubin) at 0, header size (u32) at 4, payload size (u64) at 8,
//!   SM architecture (u32) at 28. The cubin for the device is the one of its exact
//!   architecture, else the newest older one. A payload that does not start with the ELF magic
//!   is compressed (LZ4 or ZSTD, undocumented): it is not decompressed; the image is reported
//!   [`ImageNote::Compressed`] and the launch falls back to the next layout source;
//! - PTX text (JIT-compiled by the driver: no table to read): [`ImageNote::Ptx`].
//!
//! `.nv.info.<kernel>` sections are sequences of attributes: format (u8), attribute (u8),
//! then by format nothing (1), one byte (2), two bytes (3) or a u16 length and that many bytes
//! (4). `EIATTR_KPARAM_INFO` (0x17) holds one parameter: index (u32), ordinal (u16), offset
//! (u16), and a word whose bits 18..32 are the size in bytes. A table that is not sane (a
//! zero size, overlapping parameters, a block past the driver's limit) is not used.

use std::collections::HashMap;

use super::elf::{self, ElfImage};
use crate::launch::{ParamSlot, MAX_PARAM_BYTES};

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// `FATBIN_MAGIC` of `fatbinary_section.h`.
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// `FATBINC_MAGIC` of `fatbinary_section.h` (the wrapper).
pub const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;
const EIATTR_KPARAM_INFO: u8 = 0x17;
/// The largest image read out of the application's memory.
const MAX_IMAGE: u64 = 1 << 30;

/// Why an image gives no (or only part of its) information.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageNote {
    /// PTX: compiled by the driver, no parameter table or symbol table to read.
    #[error("PTX image (no cubin to read)")]
    Ptx,
    /// The device's cubin in the fat binary is compressed (undocumented format).
    #[error("the cubin for sm_{0} is compressed (not decompressed: the format is undocumented)")]
    Compressed(u32),
    /// No cubin for this device's architecture or older.
    #[error("no cubin for sm_{0} or older in the fat binary")]
    NoCubin(u32),
    /// Not a format read here, or malformed.
    #[error("image not readable: {0}")]
    Unreadable(String),
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The image at `p` in the application's memory, in place (nothing is copied: fat binaries
/// of the math libraries are large): a cubin, a fat binary or a fat-binary wrapper, by its own
/// header's sizes.
///
/// # Safety
/// `p` is the image the driver just loaded successfully from (so its headers are valid and
/// the sizes they give are readable), and it stays unchanged and alive for `'a`.
pub unsafe fn image_at<'a>(p: *const u8) -> Result<&'a [u8], ImageNote> {
    if p.is_null() {
        return Err(ImageNote::Unreadable("null image".into()));
    }
    let read = |at: u64, len: u64| -> &'a [u8] {
        // SAFETY: the caller's contract: the image's headers describe readable memory.
        unsafe { std::slice::from_raw_parts(p.add(at as usize), len as usize) }
    };
    // Four bytes first: a PTX image may be shorter than any header.
    let magic = u32_at(read(0, 4), 0).unwrap_or(0);
    let head = if magic == FATBIN_MAGIC || magic == FATBIN_WRAPPER_MAGIC || magic == 0x464c_457f {
        read(0, 16)
    } else {
        return Err(ImageNote::Ptx);
    };
    if magic == FATBIN_WRAPPER_MAGIC {
        // { int magic; int version; const unsigned long long* data; void* filename }
        // SAFETY: the wrapper is 24 bytes; `data` points to the fat binary.
        let data = unsafe { *(p.add(8) as *const *const u8) };
        // SAFETY: as the caller's contract, for the wrapped fat binary.
        return unsafe { image_at(data) };
    }
    if magic == FATBIN_MAGIC {
        let hsize = u64::from(u16_at(head, 6).unwrap_or(16));
        let rest = u64_at(head, 8).unwrap_or(0);
        let total = hsize.saturating_add(rest);
        if total > MAX_IMAGE {
            return Err(ImageNote::Unreadable(format!(
                "fat binary of {total} bytes"
            )));
        }
        return Ok(read(0, total));
    }
    if head[..4] == *ELF_MAGIC {
        let h = read(0, 64);
        let field = |at| u64_at(h, at).unwrap_or(0);
        let (phoff, shoff) = (field(0x20), field(0x28));
        let phsz =
            u64::from(u16_at(h, 0x36).unwrap_or(0)) * u64::from(u16_at(h, 0x38).unwrap_or(0));
        let shentsize = u64::from(u16_at(h, 0x3a).unwrap_or(0));
        let shnum = u64::from(u16_at(h, 0x3c).unwrap_or(0));
        let mut end = 64u64.max(phoff + phsz).max(shoff + shentsize * shnum);
        if end > MAX_IMAGE || shentsize < 64 && shnum > 0 {
            return Err(ImageNote::Unreadable("ELF header out of range".into()));
        }
        let table = read(shoff, shentsize * shnum);
        for i in 0..shnum as usize {
            let s = i * shentsize as usize;
            let kind = u32_at(table, s + 4).unwrap_or(0);
            if kind == 8 {
                continue; // NOBITS: no bytes in the file
            }
            let off = u64_at(table, s + 0x18).unwrap_or(0);
            let size = u64_at(table, s + 0x20).unwrap_or(0);
            end = end.max(off.saturating_add(size));
        }
        if end > MAX_IMAGE {
            return Err(ImageNote::Unreadable("ELF sections out of range".into()));
        }
        return Ok(read(0, end));
    }
    Err(ImageNote::Ptx)
}

/// The cubin of `image` (a cubin itself, or a fat binary's entry) for `sm` (e.g. 90).
pub fn cubin_for(image: &[u8], sm: u32) -> Result<&[u8], ImageNote> {
    if image.starts_with(ELF_MAGIC) {
        return Ok(image);
    }
    if u32_at(image, 0) != Some(FATBIN_MAGIC) {
        return Err(ImageNote::Ptx);
    }
    let hsize = usize::from(u16_at(image, 6).unwrap_or(16));
    let end = image.len();
    let mut at = hsize;
    // (arch, payload) of the best cubin so far.
    let mut best: Option<(u32, &[u8])> = None;
    while at + 32 <= end {
        let (Some(kind), Some(eh), Some(size), Some(arch)) = (
            u16_at(image, at),
            u32_at(image, at + 4),
            u64_at(image, at + 8),
            u32_at(image, at + 28),
        ) else {
            break;
        };
        if eh == 0 {
            break;
        }
        let start = at + eh as usize;
        let stop = start.saturating_add(size as usize).min(end);
        if kind == 2 && arch <= sm && best.is_none_or(|(a, _)| arch > a) {
            if let Some(p) = image.get(start..stop) {
                best = Some((arch, p));
            }
        }
        at = stop;
    }
    match best {
        Some((_, p)) if p.starts_with(ELF_MAGIC) => Ok(p),
        Some((arch, _)) => Err(ImageNote::Compressed(arch)),
        None => Err(ImageNote::NoCubin(sm)),
    }
}

/// What one cubin says: parameter tables by kernel name, and the module-scope variables.
#[derive(Debug, Clone, Default)]
pub struct CubinInfo {
    /// `EIATTR_KPARAM_INFO` layouts, by kernel name (only sane tables).
    pub layouts: HashMap<String, Vec<ParamSlot>>,
    /// The module-scope variables of its symbol table.
    pub globals: Vec<elf::GlobalSymbol>,
}

/// Reads a cubin's parameter tables and globals.
pub fn read_cubin(cubin: &[u8]) -> Result<CubinInfo, ImageNote> {
    let img: ElfImage = elf::parse(cubin).map_err(|e| ImageNote::Unreadable(e.to_string()))?;
    let mut layouts = HashMap::new();
    for s in &img.sections {
        let Some(kernel) = s.name.strip_prefix(".nv.info.") else {
            continue;
        };
        let Some(data) = cubin.get(s.offset as usize..(s.offset + s.size) as usize) else {
            continue;
        };
        if let Some(l) = kparam_table(data) {
            layouts.insert(kernel.to_owned(), l);
        }
    }
    Ok(CubinInfo {
        layouts,
        globals: img.global_symbols(),
    })
}

/// The parameter layout of one `.nv.info.<kernel>` section, when it has a sane one.
pub fn kparam_table(data: &[u8]) -> Option<Vec<ParamSlot>> {
    let mut params: Vec<(u16, ParamSlot)> = Vec::new();
    let mut at = 0usize;
    while at + 2 <= data.len() {
        let (fmt, attr) = (data[at], data[at + 1]);
        at += 2;
        let len = match fmt {
            1 => 0,
            2 => 1,
            3 => 2,
            4 => {
                let l = usize::from(u16_at(data, at)?);
                at += 2;
                l
            }
            _ => return None,
        };
        let value = data.get(at..at + len)?;
        at += len;
        if fmt == 4 && attr == EIATTR_KPARAM_INFO && len >= 12 {
            let ordinal = u16_at(value, 4)?;
            let offset = u16_at(value, 6)?;
            let size = (u32_at(value, 8)? >> 18) & 0x3fff;
            params.push((
                ordinal,
                ParamSlot {
                    offset: u32::from(offset),
                    size,
                },
            ));
        }
    }
    if params.is_empty() {
        return None;
    }
    params.sort_by_key(|(o, _)| *o);
    let ordinals_dense = params
        .iter()
        .enumerate()
        .all(|(i, (o, _))| usize::from(*o) == i);
    let mut by_offset: Vec<ParamSlot> = params.iter().map(|(_, p)| *p).collect();
    by_offset.sort_by_key(|p| p.offset);
    let sane = ordinals_dense
        && by_offset.iter().all(|p| p.size > 0)
        && by_offset
            .windows(2)
            .all(|w| w[0].offset + w[0].size <= w[1].offset)
        && by_offset
            .last()
            .is_some_and(|p| (p.offset + p.size) as usize <= MAX_PARAM_BYTES);
    sane.then(|| params.into_iter().map(|(_, p)| p).collect())
}

/// Test helpers: the sections a compiler writes, for tests of this module and of the
/// interception.
#[doc(hidden)]
pub mod testing {
    use super::*;

    /// An `.nv.info.<kernel>` section body with one `EIATTR_KPARAM_INFO` per `(offset, size)`,
    /// in reverse ordinal order (as compilers write them), between two other attributes.
    pub fn nv_info(params: &[(u16, u32)]) -> Vec<u8> {
        let mut v = vec![0x04, 0x0a, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]; // EIATTR_PARAM_CBANK
        for (i, (offset, size)) in params.iter().enumerate().rev() {
            v.extend_from_slice(&[0x04, EIATTR_KPARAM_INFO, 12, 0]);
            v.extend_from_slice(&0u32.to_le_bytes());
            v.extend_from_slice(&(i as u16).to_le_bytes());
            v.extend_from_slice(&offset.to_le_bytes());
            v.extend_from_slice(&((size << 18) | 0x1f000).to_le_bytes());
        }
        v.extend_from_slice(&[0x03, 0x1b, 0xff, 0x00]); // EIATTR_MAXREG_COUNT
        v
    }

    /// A fat binary holding `entries` (kind, sm, payload).
    pub fn fatbin(entries: &[(u16, u32, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, sm, payload) in entries {
            let mut e = vec![0u8; 64];
            e[0..2].copy_from_slice(&kind.to_le_bytes());
            e[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
            e[4..8].copy_from_slice(&64u32.to_le_bytes());
            let padded = payload.len().next_multiple_of(8);
            e[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
            e[28..32].copy_from_slice(&sm.to_le_bytes());
            body.extend_from_slice(&e);
            body.extend_from_slice(payload);
            body.resize(body.len() + padded - payload.len(), 0);
        }
        let mut v = Vec::new();
        v.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&16u16.to_le_bytes());
        v.extend_from_slice(&(body.len() as u64).to_le_bytes());
        v.extend_from_slice(&body);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{fatbin, nv_info};
    use super::*;
    use crate::module::elf::testing::{info, Builder};

    fn cubin(kernel: &str, params: &[(u16, u32)]) -> Vec<u8> {
        let mut b = Builder::new();
        b.section(
            &format!(".nv.info.{kernel}"),
            0x7000_0000,
            nv_info(params),
            0,
        );
        let g = b.section(".nv.global", 8, Vec::new(), 64);
        b.symbol("kr_counter", info(1, 1), g, 0, 8);
        b.build()
    }

    #[test]
    fn a_kernels_parameter_table_reads_in_ordinal_order() {
        let c = cubin("kr_rmw", &[(0, 8), (8, 4), (16, 8)]);
        let i = read_cubin(&c).unwrap();
        let l = &i.layouts["kr_rmw"];
        assert_eq!(
            l.iter().map(|p| (p.offset, p.size)).collect::<Vec<_>>(),
            vec![(0, 8), (8, 4), (16, 8)]
        );
        assert_eq!(i.globals.len(), 1);
        assert_eq!(i.globals[0].name, "kr_counter");
    }

    #[test]
    fn an_insane_table_is_not_used() {
        assert!(
            kparam_table(&nv_info(&[(0, 8), (4, 8)])).is_none(),
            "overlap"
        );
        assert!(kparam_table(&nv_info(&[(0, 0)])).is_none(), "zero size");
        assert!(
            kparam_table(&nv_info(&[(0, 8), (40000, 8)])).is_none(),
            "past the limit"
        );
        assert!(kparam_table(&[0x04, 0x17, 12]).is_none(), "truncated");
        assert!(kparam_table(&nv_info(&[])).is_none(), "no parameters");
    }

    #[test]
    fn the_fat_binary_gives_the_cubin_for_the_device_or_says_why_not() {
        let c80 = cubin("k80", &[(0, 8)]);
        let c90 = cubin("k90", &[(0, 8)]);
        let f = fatbin(&[
            (1, 90, b"ptx\0"),
            (2, 80, &c80),
            (2, 90, &c90),
            (2, 100, &c80),
        ]);
        assert_eq!(cubin_for(&f, 90).unwrap(), &c90[..]);
        assert_eq!(cubin_for(&f, 89).unwrap(), &c80[..]);
        assert_eq!(cubin_for(&f, 75), Err(ImageNote::NoCubin(75)));
        let z = fatbin(&[(2, 90, &[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3, 4])]);
        assert_eq!(cubin_for(&z, 90), Err(ImageNote::Compressed(90)));
        assert_eq!(
            cubin_for(b"// ptx\n.version 8.0\0", 90),
            Err(ImageNote::Ptx)
        );
        assert_eq!(cubin_for(&c90, 90).unwrap(), &c90[..]);
    }

    #[test]
    fn images_are_read_by_their_own_sizes() {
        let c = cubin("k", &[(0, 8)]);
        let f = fatbin(&[(2, 90, &c)]);
        let mut padded = f.clone();
        padded.extend_from_slice(&[0xee; 64]); // what follows in memory is not copied
                                               // SAFETY: the images are complete in these buffers.
        unsafe {
            assert_eq!(image_at(padded.as_ptr()).unwrap(), &f[..]);
            let mut pc = c.clone();
            pc.extend_from_slice(&[0xee; 64]);
            assert_eq!(image_at(pc.as_ptr()).unwrap(), &c[..]);
            #[repr(C)]
            struct Wrapper(u32, u32, *const u8, *const u8);
            let w = Wrapper(FATBIN_WRAPPER_MAGIC, 1, f.as_ptr(), std::ptr::null());
            assert_eq!(image_at((&w as *const Wrapper).cast()).unwrap(), &f[..]);
            assert_eq!(image_at(c"// ptx".as_ptr().cast()), Err(ImageNote::Ptx));
        }
    }
}
