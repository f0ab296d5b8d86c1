//! # replay-capture
//!
//! The on-disk format of a captured dispatch (SPEC §13), backend-neutral and versioned: what
//! [`write`] makes of a [`replay_core::Capture`] and what [`read`] gives back, checked.
//!
//! A capture folder holds:
//!
//! | file | content |
//! |---|---|
//! | `manifest.json` | [`Manifest`]: format name and [`FORMAT_VERSION`], backend, device, driver, kernel, launch configuration, the argument block with each pointer word's region, module variables, every region's address, size, class and digests, and the files below with their sizes and digests |
//! | `code.zst` | the code image as loaded (the simulator's module description, an HSA code object, or on CUDA the PTX, cubin or fat binary the driver got) |
//! | `regions/NNNN.in.zst` | a region's bytes as the captured pass began |
//! | `regions/NNNN.out.zst` | its bytes after that pass (one execution) |
//!
//! Every data file is one zstd frame (ruzstd's encoder at its fastest level, without the frame
//! checksum: each file's digest is in the manifest instead); a file's `compression` field says
//! `zstd` or `none`, so a writer may store a file uncompressed. Digests are 128-bit
//! ([`replay_core::digest`]) under the format's fixed key [`FILE_DIGEST_KEY`], so any reader
//! can check them; they detect damage, they are no defence against a forger.
//!
//! [`read`] refuses a folder whose manifest is missing, unparsable, of another format or
//! version, or inconsistent (regions that overlap, a pointer word naming a region that does
//! not exist), and any file that is missing, shorter or longer than the manifest says (named
//! "truncated"), undecodable, of the wrong decoded size, or whose digest differs: every error
//! names the file.
//!
//! Per backend: `launch.grid` counts work-items on every backend (on CUDA, blocks times
//! threads per block: a replay launches `grid / workgroup` blocks), `group_segment_size` is
//! CUDA's dynamic shared memory, `kernel.symbol` the driver's (mangled) name that finds the
//! function again, and `kernel.module` how the capturing run named the image. Addresses are
//! the device addresses of the capturing process: a replay recreates the regions there.
//!
//! A capture holds only the regions of the dispatch's snapshot scope (the window reads nothing
//! else); [`write`] writes a new folder (never into an existing non-empty one) through a
//! temporary sibling renamed into place, so a folder that exists is complete.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use replay_core::{
    ArgLayout, Capture, Digest128, DigestKey, Dim3, LaunchAttribute, MemoryClass, Scope,
};
use serde::{Deserialize, Serialize};

/// The format's name in every manifest.
pub const FORMAT_NAME: &str = "kernel-replay-capture";
/// The format version this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";
/// The fixed digest key of the format (the digest of SPEC §7.4, not keyed per run, so a
/// capture can be checked by any later reader).
pub const FILE_DIGEST_KEY: DigestKey = DigestKey([
    0x6b72_6570_6c61_7963,
    0x6170_7475_7265_2d31,
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
]);

/// A capture folder could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// A file could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The folder to write exists and is not empty.
    #[error("{}: exists and is not empty; a capture is never written over another", .0.display())]
    Exists(PathBuf),
    /// The manifest is not a capture manifest.
    #[error("{}: not a kernel-replay capture manifest: {message}", .path.display())]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The manifest's format version is not this crate's.
    #[error("{}: capture format version {found}, this kernel-replay reads version {supported} only", .path.display())]
    Version {
        /// The manifest.
        path: PathBuf,
        /// Its version.
        found: u32,
        /// The version read here.
        supported: u32,
    },
    /// A data file is shorter or longer than the manifest says.
    #[error("{}: truncated or damaged: {found} bytes on disk, the manifest says {expected}", .path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes the manifest names.
        expected: u64,
        /// Bytes on disk.
        found: u64,
    },
    /// A data file's content is not what the manifest describes.
    #[error("{}: corrupted: {why}", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// How a data file is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// One zstd frame.
    Zstd,
    /// The bytes as they are.
    None,
}

/// A data file of the folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Path relative to the folder.
    pub file: String,
    /// How it is stored.
    pub compression: Compression,
    /// Bytes after decoding.
    pub bytes: u64,
    /// Bytes on disk.
    pub stored_bytes: u64,
    /// Digest of the decoded bytes (hex).
    pub digest: String,
}

/// Launch configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// Grid (work-items on HSA and the simulator, blocks on CUDA).
    pub grid: Dim3,
    /// Workgroup (block) size.
    pub workgroup: Dim3,
    /// Private segment bytes per work-item.
    pub private_segment_size: u32,
    /// Group segment (shared memory) bytes per workgroup.
    pub group_segment_size: u32,
    /// Launch attributes (CUDA: cluster dimensions, priority, ...); absent when none, so
    /// version 1 manifests without it read as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<LaunchAttribute>,
}

/// One 8-byte-aligned word of the argument block that points into a captured region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointerWord {
    /// Byte offset in the argument block.
    pub offset: u64,
    /// The word.
    pub value: u64,
    /// Index of the region it points into.
    pub region: usize,
}

/// The argument block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arguments {
    /// Its layout (always `known`: a capture refuses an unknown one).
    pub layout: ArgLayout,
    /// Its bytes, hidden arguments included (hex).
    pub bytes: String,
    /// The words that point into captured regions.
    pub pointers: Vec<PointerWord>,
}

/// The kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelEntry {
    /// Name as tools saw it.
    pub name: String,
    /// The code object's name as loaded.
    pub module: String,
    /// The symbol in it.
    pub symbol: String,
    /// What the code image is (`sim-module`, `hsa-code-object`, `ptx`, `cubin`, `fatbin`).
    pub code_format: String,
    /// The code image.
    pub code: FileEntry,
}

/// One captured region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionEntry {
    /// Index (the file names' number).
    pub index: usize,
    /// Device address.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
    /// Class (SPEC §7.1).
    pub class: MemoryClass,
    /// A module variable's symbol, where known.
    pub symbol: Option<String>,
    /// Bytes as the pass began.
    pub input: FileEntry,
    /// Bytes after the pass.
    pub output: FileEntry,
}

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// Backend: `sim`, `hsa`, `cuda`.
    pub backend: String,
    /// Device name.
    pub device: String,
    /// Driver or runtime version.
    pub driver: String,
    /// Agent (device index) the dispatch ran on.
    pub agent: u64,
    /// The dispatch id in the captured run.
    pub dispatch_id: u64,
    /// The pass that was captured.
    pub pass: u32,
    /// The snapshot scope that ran (the regions below are exactly that scope).
    pub scope: Scope,
    /// The kernel and its code image.
    pub kernel: KernelEntry,
    /// Launch configuration.
    pub launch: Launch,
    /// The argument block.
    pub arguments: Arguments,
    /// Indices of the regions that are module variables.
    pub module_variables: Vec<usize>,
    /// Every captured region, in address order.
    pub regions: Vec<RegionEntry>,
}

impl Manifest {
    /// Bytes of every region (inputs; the outputs are as many again).
    pub fn region_bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.size).sum()
    }
}

/// A capture read back and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedCapture {
    /// The folder.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// The code image.
    pub code: Vec<u8>,
    /// The argument block.
    pub kernarg: Vec<u8>,
    /// Per region (in the manifest's order): input and output bytes.
    pub data: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A region whose bytes after a replay differ from the captured outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionDiff {
    /// Index of the region.
    pub index: usize,
    /// Its base.
    pub base: u64,
    /// Bytes that differ.
    pub differing_bytes: u64,
    /// Offset of the first.
    pub first_offset: u64,
}

impl std::fmt::Display for RegionDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "region {} at {:#x}: {} bytes differ, the first at offset {}",
            self.index, self.base, self.differing_bytes, self.first_offset
        )
    }
}

/// Compares `actual` (per region, in the manifest's order) with the captured outputs.
pub fn compare_outputs(capture: &LoadedCapture, actual: &[Vec<u8>]) -> Vec<RegionDiff> {
    let mut diffs = Vec::new();
    for (i, (r, (_, want))) in capture
        .manifest
        .regions
        .iter()
        .zip(&capture.data)
        .enumerate()
    {
        let got = actual.get(i).map(Vec::as_slice).unwrap_or(&[]);
        let mut differing = want.len().abs_diff(got.len()) as u64;
        let mut first = (got.len() != want.len()).then_some(want.len().min(got.len()) as u64);
        for (off, (a, b)) in want.iter().zip(got).enumerate() {
            if a != b {
                differing += 1;
                first = Some(first.map_or(off as u64, |f| f.min(off as u64)));
            }
        }
        if let Some(first_offset) = first {
            diffs.push(RegionDiff {
                index: r.index,
                base: r.base,
                differing_bytes: differing,
                first_offset,
            });
        }
    }
    diffs
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FormatError + '_ {
    move |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn digest_hex(data: &[u8]) -> String {
    replay_core::digest::digest(FILE_DIGEST_KEY, data).to_string()
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

/// Writes one data file, zstd-compressed.
fn put(dir: &Path, name: &str, data: &[u8]) -> Result<FileEntry, FormatError> {
    let stored =
        ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest);
    let path = dir.join(name);
    fs::write(&path, &stored).map_err(io(&path))?;
    Ok(FileEntry {
        file: name.to_string(),
        compression: Compression::Zstd,
        bytes: data.len() as u64,
        stored_bytes: stored.len() as u64,
        digest: digest_hex(data),
    })
}

/// Reads and checks one data file.
fn get(dir: &Path, e: &FileEntry) -> Result<Vec<u8>, FormatError> {
    // Names come from the manifest: only plain relative paths inside the folder.
    let path = dir.join(&e.file);
    if Path::new(&e.file)
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(FormatError::Corrupt {
            path,
            why: "the manifest names a file outside the capture folder".into(),
        });
    }
    let stored = fs::read(&path).map_err(io(&path))?;
    if stored.len() as u64 != e.stored_bytes {
        return Err(FormatError::Truncated {
            path,
            expected: e.stored_bytes,
            found: stored.len() as u64,
        });
    }
    let data = match e.compression {
        Compression::None => stored,
        Compression::Zstd => {
            let mut out = Vec::new();
            let mut dec =
                ruzstd::decoding::StreamingDecoder::new(stored.as_slice()).map_err(|err| {
                    FormatError::Corrupt {
                        path: path.clone(),
                        why: format!("not a zstd frame: {err}"),
                    }
                })?;
            // Never more than the manifest names (plus one byte, to see an overlong frame).
            (&mut dec)
                .take(e.bytes.saturating_add(1))
                .read_to_end(&mut out)
                .map_err(|err| FormatError::Corrupt {
                    path: path.clone(),
                    why: format!("zstd frame does not decode: {err}"),
                })?;
            out
        }
    };
    if data.len() as u64 != e.bytes {
        return Err(FormatError::Corrupt {
            path,
            why: format!(
                "decodes to {} bytes, the manifest says {}",
                data.len(),
                e.bytes
            ),
        });
    }
    if digest_hex(&data) != e.digest {
        return Err(FormatError::Corrupt {
            path,
            why: "its digest differs from the manifest's".into(),
        });
    }
    Ok(data)
}

/// The region of `regions` (sorted by base) that holds `addr`.
fn region_of(regions: &[RegionEntry], addr: u64) -> Option<usize> {
    let i = regions.partition_point(|r| r.base <= addr).checked_sub(1)?;
    let r = &regions[i];
    (addr < r.base.saturating_add(r.size)).then_some(i)
}

/// Writes `capture` to the new folder `dir` (its parent must exist). Returns the manifest.
pub fn write(dir: &Path, capture: &Capture) -> Result<Manifest, FormatError> {
    if let Ok(mut entries) = fs::read_dir(dir) {
        if entries.next().is_some() {
            return Err(FormatError::Exists(dir.to_path_buf()));
        }
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "capture".into());
    let tmp = dir.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    let r = write_into(&tmp, capture).and_then(|m| {
        // An empty folder of that name is replaced; a non-empty one was refused above.
        let _ = fs::remove_dir(dir);
        fs::rename(&tmp, dir).map_err(io(dir))?;
        Ok(m)
    });
    if r.is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    r
}

fn write_into(dir: &Path, c: &Capture) -> Result<Manifest, FormatError> {
    let regions_dir = dir.join("regions");
    fs::create_dir_all(&regions_dir).map_err(io(&regions_dir))?;
    let code = put(dir, "code.zst", &c.code.bytes)?;
    let mut sorted: Vec<&replay_core::CapturedRegion> = c.regions.iter().collect();
    sorted.sort_by_key(|r| r.base);
    let mut regions = Vec::with_capacity(sorted.len());
    for (index, r) in sorted.iter().enumerate() {
        let input = put(dir, &format!("regions/{index:04}.in.zst"), &r.input)?;
        let output = put(dir, &format!("regions/{index:04}.out.zst"), &r.output)?;
        regions.push(RegionEntry {
            index,
            base: r.base,
            size: r.size,
            class: r.class,
            symbol: r.symbol.clone(),
            input,
            output,
        });
    }
    let pointers = c
        .kernarg
        .chunks_exact(8)
        .enumerate()
        .filter_map(|(i, w)| {
            let value = u64::from_le_bytes(w.try_into().ok()?);
            region_of(&regions, value).map(|region| PointerWord {
                offset: 8 * i as u64,
                value,
                region,
            })
        })
        .collect();
    let module_variables = regions
        .iter()
        .filter(|r| r.class.contains(MemoryClass::MODULE_VARIABLE))
        .map(|r| r.index)
        .collect();
    let m = Manifest {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        backend: c.device.backend.clone(),
        device: c.device.device.clone(),
        driver: c.device.driver.clone(),
        agent: c.info.agent.0,
        dispatch_id: c.info.dispatch_id.0,
        pass: c.pass,
        scope: c.scope,
        kernel: KernelEntry {
            name: c.info.kernel_name.to_string(),
            module: c.code.module.clone(),
            symbol: c.code.symbol.clone(),
            code_format: c.code.format.clone(),
            code,
        },
        launch: Launch {
            grid: c.info.grid,
            workgroup: c.info.workgroup,
            private_segment_size: c.info.private_segment_size,
            group_segment_size: c.info.group_segment_size,
            attributes: c.code.launch_attributes.clone(),
        },
        arguments: Arguments {
            layout: c.arg_layout,
            bytes: hex(&c.kernarg),
            pointers,
        },
        module_variables,
        regions,
    };
    let path = dir.join(MANIFEST);
    let text = serde_json::to_string_pretty(&m).map_err(|e| FormatError::Manifest {
        path: path.clone(),
        message: e.to_string(),
    })?;
    fs::write(&path, text).map_err(io(&path))?;
    Ok(m)
}

/// Reads the capture folder `dir`, checking every file against the manifest.
pub fn read(dir: &Path) -> Result<LoadedCapture, FormatError> {
    let path = dir.join(MANIFEST);
    let text = fs::read(&path).map_err(io(&path))?;
    let bad = |message: String| FormatError::Manifest {
        path: path.clone(),
        message,
    };
    // The format and version first, so a newer manifest says so rather than failing to parse.
    let head: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    if head.get("format").and_then(|f| f.as_str()) != Some(FORMAT_NAME) {
        return Err(bad(format!("its \"format\" is not {FORMAT_NAME:?}")));
    }
    let found = head
        .get("version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| bad("no \"version\"".into()))?;
    if found != u64::from(FORMAT_VERSION) {
        return Err(FormatError::Version {
            path,
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: FORMAT_VERSION,
        });
    }
    let manifest: Manifest = serde_json::from_value(head).map_err(|e| bad(e.to_string()))?;
    let kernarg = unhex(&manifest.arguments.bytes)
        .ok_or_else(|| bad("the argument bytes are not hex".into()))?;
    if manifest.arguments.layout != ArgLayout::Known {
        return Err(bad("the argument layout is not known".into()));
    }
    for (i, r) in manifest.regions.iter().enumerate() {
        if r.index != i {
            return Err(bad(format!("region {i} has index {}", r.index)));
        }
        if r.input.bytes != r.size || r.output.bytes != r.size {
            return Err(bad(format!(
                "region {i}'s files do not hold {} bytes",
                r.size
            )));
        }
        if let Some(next) = manifest.regions.get(i + 1) {
            if r.base.saturating_add(r.size) > next.base {
                return Err(bad(format!(
                    "regions {i} and {} overlap or are out of order",
                    i + 1
                )));
            }
        }
    }
    for p in &manifest.arguments.pointers {
        let ok = region_of(&manifest.regions, p.value) == Some(p.region)
            && kernarg.get(p.offset as usize..p.offset as usize + 8)
                == Some(&p.value.to_le_bytes()[..]);
        if !ok {
            return Err(bad(format!(
                "the pointer word at offset {} does not match the argument block and region {}",
                p.offset, p.region
            )));
        }
    }
    let code = get(dir, &manifest.kernel.code)?;
    let mut data = Vec::with_capacity(manifest.regions.len());
    for r in &manifest.regions {
        data.push((get(dir, &r.input)?, get(dir, &r.output)?));
    }
    Ok(LoadedCapture {
        dir: dir.to_path_buf(),
        manifest,
        code,
        kernarg,
        data,
    })
}

/// Digest of bytes under the format's key (what the manifest's `digest` fields hold).
pub fn file_digest(data: &[u8]) -> Digest128 {
    replay_core::digest::digest(FILE_DIGEST_KEY, data)
}
