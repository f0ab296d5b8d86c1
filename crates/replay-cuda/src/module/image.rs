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
//!   (magic `0x466243B1`, version 1) that points to one. Its entries are not documented by
//!   NVIDIA; the layout read here is the one `cuobjdump` reads (public reverse-engineered
//!   readers agree on it): kind (u16, 1 = PTX, 2 = cubin) at 0, header size (u32) at 4,
//!   stored payload size (u32, padded to 8) at 8, compressed size (u32) at 16, SM
//!   architecture (u32) at 28, flags (u64) at 40 and the uncompressed size (u64) at 56. Flag
//!   `0x2000` marks an LZ4 block (older CUDA), `0x8000` a ZSTD frame (CUDA 12.8+
//!   `--compress-mode`): the payload is decompressed ([`decompress`]) into exactly the
//!   uncompressed size the header gives, capped at [`MAX_IMAGE`]; a size that does not match,
//!   both flags, a compressed size past the payload or a decoder error make the image
//!   unreadable, never a panic. The code for the device is the cubin of its exact
//!   architecture, else the newest older one, else (the driver then JIT-compiles) the newest
//!   PTX entry not newer than the device. A cubin payload that is not ELF after decoding is
//!   compressed in a way not read here ([`ImageNote::Compressed`]);
//! - PTX text (JIT-compiled by the driver): its `.global` variables ([`super::ptx`]); it has
//!   no parameter table.
//!
//! Whatever is not read leaves the image's globals *unknown* (an [`ImageNote`]), which the
//! interception treats as a reason to decline its kernels, never as "no globals".
//!
//! `.nv.info.<kernel>` sections are sequences of attributes: format (u8), attribute (u8),
//! then by format nothing (1), one byte (2), two bytes (3) or a u16 length and that many bytes
//! (4). `EIATTR_KPARAM_INFO` (0x17) holds one parameter: index (u32), ordinal (u16), offset
//! (u16), and a word whose bits 18..32 are the size in bytes. A table that is not sane (a
//! zero size, overlapping parameters, a block past the driver's limit) is not used.

use std::borrow::Cow;
use std::collections::HashMap;

use super::elf::{self, ElfImage};
use super::ptx;
use crate::launch::{ParamSlot, MAX_PARAM_BYTES};

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// `FATBIN_MAGIC` of `fatbinary_section.h`.
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// `FATBINC_MAGIC` of `fatbinary_section.h` (the wrapper).
pub const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;
const EIATTR_KPARAM_INFO: u8 = 0x17;
/// The largest image read out of the application's memory, and the largest decompressed
/// entry.
pub const MAX_IMAGE: u64 = 1 << 30;
/// Entry kinds.
const KIND_PTX: u16 = 1;
const KIND_CUBIN: u16 = 2;
/// Entry flags: an LZ4-compressed payload.
pub const FLAG_LZ4: u64 = 0x2000;
/// Entry flags: a ZSTD-compressed payload.
pub const FLAG_ZSTD: u64 = 0x8000;
/// The entry header fields read (up to the uncompressed size at 56).
const ENTRY_HEADER: usize = 64;

/// Why an image gives no (or only part of its) information: its globals stay unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageNote {
    /// PTX text whose globals could not be read.
    #[error("PTX not read: {0}")]
    Ptx(String),
    /// The device's code in the fat binary is compressed in a way not read here.
    #[error("the code for sm_{sm} is compressed in a way not read here (entry flags {flags:#x})")]
    Compressed {
        /// The entry's architecture.
        sm: u32,
        /// The entry's flags.
        flags: u64,
    },
    /// No cubin or PTX for this device's architecture or older.
    #[error("no cubin or PTX for sm_{0} or older in the fat binary")]
    NoCubin(u32),
    /// A compressed entry that did not decompress consistently.
    #[error("compressed code not read: {0}")]
    Decompression(String),
    /// Not a format read here, or malformed.
    #[error("image not readable: {0}")]
    Unreadable(String),
}

/// How a fat-binary entry's payload is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// An LZ4 block (flag `0x2000`).
    Lz4,
    /// A ZSTD frame (flag `0x8000`).
    Zstd,
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
        // Text: PTX handed to the driver is NUL-terminated (the driver just read it so).
        // SAFETY: the caller's contract; the terminating NUL lies within the image.
        let text = unsafe { std::ffi::CStr::from_ptr(p.cast()) }.to_bytes();
        if text.len() as u64 > MAX_IMAGE {
            return Err(ImageNote::Unreadable(format!(
                "text image of {} bytes",
                text.len()
            )));
        }
        return Ok(text);
    };
    if magic == FATBIN_WRAPPER_MAGIC {
        // { int magic; int version; const unsigned long long* data; void* filename }
        let version = u32_at(head, 4).unwrap_or(0);
        if version != 1 {
            // Version 2 lists prelinked fat binaries instead: not read.
            return Err(ImageNote::Unreadable(format!(
                "fat-binary wrapper version {version}"
            )));
        }
        // SAFETY: the wrapper is 24 bytes; `data` points to the fat binary.
        let data = unsafe { *(p.add(8) as *const *const u8) };
        if data.is_null() {
            return Err(ImageNote::Unreadable(
                "fat-binary wrapper without data".into(),
            ));
        }
        // SAFETY: as the caller's contract, for the wrapped fat binary.
        if unsafe { *(data as *const u32) } != FATBIN_MAGIC {
            return Err(ImageNote::Unreadable(
                "fat-binary wrapper whose data is not a fat binary".into(),
            ));
        }
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
    Err(ImageNote::Unreadable("unknown image format".into()))
}

/// One fat-binary entry, as its header describes it.
#[derive(Debug, Clone, Copy)]
struct Entry<'a> {
    kind: u16,
    arch: u32,
    flags: u64,
    /// The stored payload (padded).
    stored: &'a [u8],
    compressed_size: u32,
    uncompressed_size: u64,
}

/// The entries of the fat binary `image`, every header inside the image.
fn entries(image: &[u8]) -> Result<Vec<Entry<'_>>, ImageNote> {
    let bad = |why: String| Err(ImageNote::Unreadable(why));
    let hsize = usize::from(u16_at(image, 6).unwrap_or(16));
    let total = u64_at(image, 8).unwrap_or(0);
    let end = (hsize as u64).saturating_add(total);
    if hsize < 16 || end > image.len() as u64 {
        return bad(format!(
            "fat binary of {end} bytes in a {}-byte image",
            image.len()
        ));
    }
    let end = end as usize;
    let mut at = hsize;
    let mut out = Vec::new();
    // A tail too short for a header, or zeros where a header would be, is padding.
    while end - at >= ENTRY_HEADER {
        let field = |o| u64_at(image, at + o).unwrap_or(0);
        let (kind, eh) = (
            u16_at(image, at).unwrap_or(0),
            u32_at(image, at + 4).unwrap_or(0) as usize,
        );
        if kind == 0 && eh == 0 {
            break;
        }
        // The stored size is the u32 at 8 (the u32 at 12 is not part of it).
        let size = u64::from(u32_at(image, at + 8).unwrap_or(0));
        if eh < ENTRY_HEADER || eh > end - at {
            return bad(format!("fat-binary entry header of {eh} bytes at {at}"));
        }
        let start = at + eh;
        if size > (end - start) as u64 {
            return bad(format!(
                "fat-binary entry of {size} bytes at {at} runs past the image"
            ));
        }
        let stop = start + size as usize;
        out.push(Entry {
            kind,
            arch: u32_at(image, at + 28).unwrap_or(0),
            flags: field(40),
            stored: &image[start..stop],
            compressed_size: u32_at(image, at + 16).unwrap_or(0),
            uncompressed_size: field(56),
        });
        at = stop;
    }
    Ok(out)
}

/// The entry's payload, decompressed when its flags say so.
fn payload<'a>(e: &Entry<'a>) -> Result<(Cow<'a, [u8]>, Option<Compression>), ImageNote> {
    let how = match (e.flags & FLAG_LZ4 != 0, e.flags & FLAG_ZSTD != 0) {
        (false, false) => return Ok((Cow::Borrowed(e.stored), None)),
        (true, false) => Compression::Lz4,
        (false, true) => Compression::Zstd,
        (true, true) => {
            return Err(ImageNote::Decompression(format!(
                "entry flags {:#x} name two compressions",
                e.flags
            )))
        }
    };
    let input = e
        .stored
        .get(..e.compressed_size as usize)
        .filter(|i| !i.is_empty())
        .ok_or_else(|| {
            ImageNote::Decompression(format!(
                "compressed size {} of a {}-byte payload",
                e.compressed_size,
                e.stored.len()
            ))
        })?;
    Ok((
        Cow::Owned(decompress(how, input, e.uncompressed_size)?),
        Some(how),
    ))
}

/// Decompresses `input` into exactly `size` bytes (at most [`MAX_IMAGE`]); anything else
/// (a decoder error, another size, a decoder panic) is [`ImageNote::Decompression`].
pub fn decompress(how: Compression, input: &[u8], size: u64) -> Result<Vec<u8>, ImageNote> {
    if size == 0 || size > MAX_IMAGE {
        return Err(ImageNote::Decompression(format!(
            "uncompressed size {size} out of range"
        )));
    }
    // The decoders are not expected to panic on any input; if one does, the image is
    // unreadable rather than the application's load call unwinding.
    let decoded = std::panic::catch_unwind(|| match how {
        Compression::Lz4 => {
            // An LZ4 block expands at most about 255-fold: a larger claim is refused before
            // the output is allocated.
            let bound = (input.len() as u64).saturating_mul(255).saturating_add(64);
            if size > bound {
                return Err(format!("{} bytes cannot hold {size}", input.len()));
            }
            let mut out = Vec::new();
            out.try_reserve_exact(size as usize)
                .map_err(|e| format!("{size} bytes for the output: {e}"))?;
            out.resize(size as usize, 0);
            let n = lz4_flex::block::decompress_into(input, &mut out).map_err(|e| e.to_string())?;
            out.truncate(n);
            Ok(out)
        }
        Compression::Zstd => {
            // Streamed into a growing buffer: memory follows what the frame really holds, up
            // to one byte past the claim (which then fails the size check).
            use std::io::Read;
            let dec = ruzstd::decoding::StreamingDecoder::new(input).map_err(|e| e.to_string())?;
            let mut out = Vec::new();
            dec.take(size + 1)
                .read_to_end(&mut out)
                .map_err(|e| e.to_string())?;
            Ok(out)
        }
    })
    .unwrap_or_else(|_| Err("decoder panicked".into()))
    .map_err(|e| ImageNote::Decompression(format!("{how:?} decompression failed: {e}")))?;
    let written = decoded.len();
    if written as u64 != size {
        return Err(ImageNote::Decompression(format!(
            "{how:?} entry decompressed to {written} bytes, its header says {size}"
        )));
    }
    Ok(decoded)
}

/// The format of an image's code for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeFormat {
    /// A cubin (ELF).
    Cubin,
    /// PTX text.
    Ptx,
}

/// An image's code for the device: its format, its bytes, and how its entry was compressed.
pub type Code<'a> = (CodeFormat, Cow<'a, [u8]>, Option<Compression>);

/// The code of `image` (a cubin, PTX, or a fat binary's entry, decompressed) for `sm` (e.g.
/// 90), with how it was stored.
pub fn code_for(image: &[u8], sm: u32) -> Result<Code<'_>, ImageNote> {
    if image.starts_with(ELF_MAGIC) {
        return Ok((CodeFormat::Cubin, Cow::Borrowed(image), None));
    }
    if u32_at(image, 0) != Some(FATBIN_MAGIC) {
        return if ptx::is_ptx(image) {
            Ok((CodeFormat::Ptx, Cow::Borrowed(image), None))
        } else {
            Err(ImageNote::Unreadable(
                "neither a cubin, a fat binary nor PTX text".into(),
            ))
        };
    }
    let all = entries(image)?;
    let newest = |kind: u16| {
        all.iter()
            .filter(|e| e.kind == kind && e.arch <= sm)
            .max_by_key(|e| e.arch)
    };
    let (format, e) = match (newest(KIND_CUBIN), newest(KIND_PTX)) {
        (Some(e), _) => (CodeFormat::Cubin, e),
        (None, Some(e)) => (CodeFormat::Ptx, e),
        (None, None) => return Err(ImageNote::NoCubin(sm)),
    };
    let (bytes, how) = payload(e)?;
    let expected = match format {
        CodeFormat::Cubin => bytes.starts_with(ELF_MAGIC),
        CodeFormat::Ptx => ptx::is_ptx(&bytes),
    };
    match (expected, how) {
        (true, _) => Ok((format, bytes, how)),
        // Stored as given, yet not what its kind says: a compression not read here.
        (false, None) => Err(ImageNote::Compressed {
            sm: e.arch,
            flags: e.flags,
        }),
        (false, Some(how)) => Err(ImageNote::Decompression(format!(
            "the {how:?}-decompressed {format:?} entry for sm_{} is not {format:?}",
            e.arch
        ))),
    }
}

/// What one image gives: parameter tables by kernel name, the module-scope variables, and
/// how its code was stored.
#[derive(Debug, Clone)]
pub struct ImageInfo {
    /// What the code says.
    pub code: CubinInfo,
    /// Its format.
    pub format: CodeFormat,
    /// How the fat-binary entry was compressed, if it was.
    pub compression: Option<Compression>,
}

/// Reads the code of `image` for `sm`: a cubin's tables and symbols, or a PTX text's globals.
pub fn read_image(image: &[u8], sm: u32) -> Result<ImageInfo, ImageNote> {
    let (format, bytes, compression) = code_for(image, sm)?;
    let code = match format {
        CodeFormat::Cubin => read_cubin(&bytes)?,
        CodeFormat::Ptx => CubinInfo {
            layouts: HashMap::new(),
            globals: ptx::globals(&bytes).map_err(|e| ImageNote::Ptx(e.to_string()))?,
            services: super::services::of_ptx(&bytes),
        },
    };
    Ok(ImageInfo {
        code,
        format,
        compression,
    })
}

/// What one cubin says: parameter tables by kernel name, and the module-scope variables.
#[derive(Debug, Clone, Default)]
pub struct CubinInfo {
    /// `EIATTR_KPARAM_INFO` layouts, by kernel name (only sane tables).
    pub layouts: HashMap<String, Vec<ParamSlot>>,
    /// The module-scope variables of its symbol table.
    pub globals: Vec<elf::GlobalSymbol>,
    /// Device-side services its code calls whose effects no snapshot sees.
    pub services: Vec<super::services::DeviceService>,
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
        services: super::services::of_symbols(img.symbols.iter().map(|s| s.name.as_str())),
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

    /// A fat binary holding `entries` (kind, sm, payload), stored uncompressed.
    pub fn fatbin(entries: &[(u16, u32, &[u8])]) -> Vec<u8> {
        let e: Vec<(u16, u32, &[u8], Option<Compression>)> =
            entries.iter().map(|&(k, sm, p)| (k, sm, p, None)).collect();
        fatbin_compressed(&e)
    }

    /// `payload` compressed as a fat-binary entry stores it (an LZ4 block, a ZSTD frame).
    pub fn compress(how: Compression, payload: &[u8]) -> Vec<u8> {
        match how {
            Compression::Lz4 => {
                let mut out = vec![0u8; lz4_flex::block::get_maximum_output_size(payload.len())];
                let n = lz4_flex::block::compress_into(payload, &mut out).expect("sized above");
                out.truncate(n);
                out
            }
            Compression::Zstd => ruzstd::encoding::compress_to_vec(
                payload,
                ruzstd::encoding::CompressionLevel::Fastest,
            ),
        }
    }

    /// A fat binary holding `entries` (kind, sm, payload, compression): a compressed entry
    /// has its flag, compressed and uncompressed sizes set as `nvcc` sets them.
    pub fn fatbin_compressed(entries: &[(u16, u32, &[u8], Option<Compression>)]) -> Vec<u8> {
        let mut body = Vec::new();
        for &(kind, sm, payload, how) in entries {
            let stored = match how {
                Some(h) => compress(h, payload),
                None => payload.to_vec(),
            };
            let mut e = vec![0u8; 64];
            e[0..2].copy_from_slice(&kind.to_le_bytes());
            e[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
            e[4..8].copy_from_slice(&64u32.to_le_bytes());
            let padded = stored.len().next_multiple_of(8);
            e[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
            e[28..32].copy_from_slice(&sm.to_le_bytes());
            // 64-bit, Linux host; the compression flag and sizes when compressed.
            let mut flags = 0x11u64;
            if let Some(h) = how {
                flags |= match h {
                    Compression::Lz4 => FLAG_LZ4,
                    Compression::Zstd => FLAG_ZSTD,
                };
                e[16..20].copy_from_slice(&(stored.len() as u32).to_le_bytes());
                e[56..64].copy_from_slice(&(payload.len() as u64).to_le_bytes());
            }
            e[40..48].copy_from_slice(&flags.to_le_bytes());
            body.extend_from_slice(&e);
            body.extend_from_slice(&stored);
            body.resize(body.len() + padded - stored.len(), 0);
        }
        let mut v = Vec::new();
        v.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&16u16.to_le_bytes());
        v.extend_from_slice(&(body.len() as u64).to_le_bytes());
        v.extend_from_slice(&body);
        v
    }

    /// Minimal PTX text declaring `globals` (`(name, bytes)`, as `.b8` arrays) and one entry
    /// `kernel`, NUL-terminated as the driver takes it.
    pub fn ptx(kernel: &str, globals: &[(&str, u32)]) -> Vec<u8> {
        let mut t = String::from(
            "//\n// Generated by NVIDIA NVVM Compiler\n.version 8.4\n.target sm_90\n.address_size 64\n\n",
        );
        for (name, bytes) in globals {
            t.push_str(&format!(".visible .global .align 8 .b8 {name}[{bytes}];\n"));
        }
        t.push_str(&format!(
            "\n.visible .entry {kernel}(\n\t.param .u64 {kernel}_param_0\n)\n{{\n\tret;\n}}\n"
        ));
        let mut v = t.into_bytes();
        v.push(0);
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

    fn cubin_of(image: &[u8], sm: u32) -> Result<Vec<u8>, ImageNote> {
        code_for(image, sm).map(|(_, c, _)| c.into_owned())
    }

    #[test]
    fn the_fat_binary_gives_the_code_for_the_device_or_says_why_not() {
        let c80 = cubin("k80", &[(0, 8)]);
        let c90 = cubin("k90", &[(0, 8)]);
        let f = fatbin(&[
            (1, 90, b"// ptx\0"),
            (2, 80, &c80),
            (2, 90, &c90),
            (2, 100, &c80),
        ]);
        assert_eq!(cubin_of(&f, 90).unwrap(), c90);
        assert_eq!(cubin_of(&f, 89).unwrap(), c80);
        assert_eq!(cubin_of(&f, 75), Err(ImageNote::NoCubin(75)));
        // A payload that is not ELF and carries no known compression flag.
        let z = fatbin(&[(2, 90, &[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3, 4])]);
        assert_eq!(
            cubin_of(&z, 90),
            Err(ImageNote::Compressed {
                sm: 90,
                flags: 0x11
            })
        );
        assert_eq!(cubin_of(&c90, 90).unwrap(), c90);
        // Zero padding after the last entry (inside the header's size) is not an entry.
        let mut padded = f.clone();
        padded.extend_from_slice(&[0; 72]);
        let rest = (padded.len() - 16) as u64;
        padded[8..16].copy_from_slice(&rest.to_le_bytes());
        assert_eq!(cubin_of(&padded, 90).unwrap(), c90);
        // An entry whose payload runs past the fat binary.
        let mut long = f.clone();
        long[16 + 8..16 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(code_for(&long, 90), Err(ImageNote::Unreadable(_))));
        // Only PTX for the device: the driver JIT-compiles it.
        let p = testing::ptx("k", &[("kr_g", 16)]);
        let only_ptx = fatbin(&[(1, 80, &p)]);
        let (format, code, how) = code_for(&only_ptx, 90).unwrap();
        assert_eq!((format, how), (CodeFormat::Ptx, None));
        assert_eq!(&code[..p.len()], &p[..]);
    }

    #[test]
    fn compressed_entries_are_decompressed_and_read() {
        let c90 = cubin("kr_rmw", &[(0, 8), (8, 8), (16, 8)]);
        for how in [Compression::Lz4, Compression::Zstd] {
            let f =
                testing::fatbin_compressed(&[(1, 90, b"// ptx\0", None), (2, 90, &c90, Some(how))]);
            let (format, code, got) = code_for(&f, 90).unwrap();
            assert_eq!((format, got), (CodeFormat::Cubin, Some(how)));
            assert_eq!(&code[..], &c90[..], "{how:?}");
            let i = read_image(&f, 90).unwrap();
            assert_eq!(i.code.globals[0].name, "kr_counter", "{how:?}");
            assert_eq!(i.code.layouts["kr_rmw"].len(), 3, "{how:?}");
            // PTX entries may be compressed too.
            let p = testing::ptx("k", &[("kr_g", 16)]);
            let fp = testing::fatbin_compressed(&[(1, 90, &p, Some(how))]);
            let i = read_image(&fp, 90).unwrap();
            assert_eq!((i.format, i.compression), (CodeFormat::Ptx, Some(how)));
            assert_eq!(i.code.globals[0].name, "kr_g");
        }
    }

    /// Byte offsets of the first entry's header fields in a `fatbin_compressed` image.
    const E: usize = 16;

    #[test]
    fn an_inconsistent_compressed_entry_is_unreadable() {
        let c90 = cubin("k", &[(0, 8)]);
        for how in [Compression::Lz4, Compression::Zstd] {
            let f = testing::fatbin_compressed(&[(2, 90, &c90, Some(how))]);
            let unreadable = |m: &dyn Fn(&mut Vec<u8>)| {
                let mut g = f.clone();
                m(&mut g);
                matches!(code_for(&g, 90), Err(ImageNote::Decompression(_)))
            };
            let size = c90.len() as u64;
            assert!(unreadable(
                &|g| g[E + 56..E + 64].copy_from_slice(&(size + 1).to_le_bytes())
            ));
            assert!(unreadable(
                &|g| g[E + 56..E + 64].copy_from_slice(&(size - 1).to_le_bytes())
            ));
            assert!(unreadable(
                &|g| g[E + 56..E + 64].copy_from_slice(&(MAX_IMAGE + 1).to_le_bytes())
            ));
            // A claim the payload cannot hold is refused before the output is allocated.
            assert!(unreadable(
                &|g| g[E + 56..E + 64].copy_from_slice(&MAX_IMAGE.to_le_bytes())
            ));
            assert!(unreadable(
                &|g| g[E + 16..E + 20].copy_from_slice(&u32::MAX.to_le_bytes())
            ));
            assert!(unreadable(
                &|g| g[E + 16..E + 20].copy_from_slice(&0u32.to_le_bytes())
            ));
            assert!(unreadable(&|g| {
                let both = 0x11 | FLAG_LZ4 | FLAG_ZSTD;
                g[E + 40..E + 48].copy_from_slice(&both.to_le_bytes())
            }));
            assert!(unreadable(&|g| g[E + 64 + 4] ^= 0x5a) || how == Compression::Lz4);
        }
    }

    /// A small deterministic generator (no dependency for a fuzz-ish loop).
    fn xorshift(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn random_bytes_and_truncations_never_panic() {
        let c90 = cubin("k", &[(0, 8)]);
        let p = testing::ptx("k", &[("kr_g", 16)]);
        let images = [
            testing::fatbin_compressed(&[(2, 90, &c90, Some(Compression::Lz4))]),
            testing::fatbin_compressed(&[(2, 90, &c90, Some(Compression::Zstd))]),
            testing::fatbin_compressed(&[(1, 90, &p, Some(Compression::Zstd))]),
            fatbin(&[(1, 90, &p), (2, 90, &c90)]),
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for img in &images {
            for len in 0..img.len() {
                let _ = read_image(&img[..len], 90);
            }
            for _ in 0..3000 {
                let mut m = img.clone();
                for _ in 0..1 + xorshift(&mut seed) % 4 {
                    let at = (xorshift(&mut seed) as usize) % m.len();
                    m[at] = xorshift(&mut seed) as u8;
                }
                let _ = read_image(&m, 90);
            }
        }
        for _ in 0..2000 {
            let len = (xorshift(&mut seed) % 512) as usize;
            let mut r: Vec<u8> = (0..len).map(|_| xorshift(&mut seed) as u8).collect();
            let _ = read_image(&r, 90);
            for how in [Compression::Lz4, Compression::Zstd] {
                let _ = decompress(how, &r, 1 + xorshift(&mut seed) % 4096);
            }
            // The same bytes behind a fat-binary header and a compressed entry header.
            if r.len() > 8 {
                r[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
                let _ = read_image(&r, 90);
            }
        }
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
            let w2 = Wrapper(FATBIN_WRAPPER_MAGIC, 2, f.as_ptr(), std::ptr::null());
            assert!(matches!(
                image_at((&w2 as *const Wrapper).cast()),
                Err(ImageNote::Unreadable(_))
            ));
            assert_eq!(image_at(c"// ptx".as_ptr().cast()).unwrap(), b"// ptx");
        }
    }

    #[test]
    fn text_that_is_not_ptx_is_unreadable_not_an_image_without_globals() {
        assert!(matches!(
            read_image(b"image", 90),
            Err(ImageNote::Unreadable(_))
        ));
        let p = testing::ptx("k", &[("kr_a", 8), ("kr_b", 24)]);
        let i = read_image(&p, 90).unwrap();
        assert_eq!(i.format, CodeFormat::Ptx);
        let g: Vec<(&str, u64)> = i
            .code
            .globals
            .iter()
            .map(|g| (g.name.as_str(), g.size))
            .collect();
        assert_eq!(g, [("kr_a", 8), ("kr_b", 24)]);
    }
}
