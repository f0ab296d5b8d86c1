//! Host address space held for a standalone replay's regions before the CUDA driver is loaded
//! (SPEC §13).
//!
//! Under unified addressing a device address is also a virtual address of the host process:
//! the driver's reservations, the shared libraries, the host heap and anonymous mappings all
//! share one address space. A fresh `kreplay replay` process lays that space out anew (the
//! loader, the allocator, and the driver itself, which maps its own reservations when libcuda
//! is loaded, at `cuInit` and at context creation), so a range the capturing process had as
//! device memory may already be taken by the time the replay asks `cuMemAddressReserve` for
//! it, and the driver then places the reservation elsewhere.
//!
//! [`Placeholders::hold`], called with the captures' manifests before anything loads the
//! driver, maps every range the regions need as inaccessible anonymous memory (`PROT_NONE`,
//! `MAP_NORESERVE`, `MAP_FIXED_NOREPLACE`: nothing already there is replaced, and the address
//! the kernel returns is checked, which also covers kernels older than 4.17 that take the flag
//! as a mere hint), so later host mappings and the driver's own reservations go elsewhere.
//! [`Placeholders::release`] unmaps a range's placeholder immediately before the driver is
//! asked for that range; [`Placeholders::restore`] maps the placeholders again once a replay
//! freed its reservations, for the next capture of the same command.
//!
//! The driver's granularity cannot be asked before it is loaded, so the ranges are planned on
//! [`PLACEHOLDER_GRANULE`] (the minimum mapping granularity of current NVIDIA GPUs). A range is
//! tried whole, then per region (regions that share a granule stay together, [`plan_pieces`]);
//! a piece that cannot be held is remembered with what holds it ([`holders`], read from
//! `/proc/self/maps`), so an address error can say so.
//!
//! A placeholder is unmapped only where `/proc/self/maps` still shows an anonymous `---p`
//! mapping over it: one that something else replaced since is left alone (decline rather than
//! unmap someone else's memory).

use std::ffi::c_void;
use std::fmt;

use replay_capture::Manifest;
use replay_core::MemoryClass;

/// The granule placeholders are planned on: 2 MiB, the driver's minimum mapping granularity on
/// current NVIDIA GPUs (and a multiple of every host page size).
pub const PLACEHOLDER_GRANULE: u64 = 2 << 20;

/// One line of `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub lo: u64,
    /// One past the last address.
    pub hi: u64,
    /// Permissions as the kernel writes them (`r-xp`, `---p`, ...).
    pub perms: String,
    /// The inode of the file mapped (0 for anonymous memory).
    pub inode: u64,
    /// The path or pseudo-name (`[heap]`, `[stack]`); empty for anonymous memory.
    pub name: String,
}

impl Mapping {
    /// An inaccessible private anonymous mapping: what a placeholder looks like.
    fn is_placeholder_like(&self) -> bool {
        self.perms == "---p" && self.inode == 0 && self.name.is_empty()
    }
}

impl fmt::Display for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name.is_empty() {
            write!(
                f,
                "an anonymous mapping at {:#x}-{:#x} ({}: host memory or the driver's own reservation)",
                self.lo, self.hi, self.perms
            )
        } else {
            write!(
                f,
                "{} at {:#x}-{:#x} ({})",
                self.name, self.lo, self.hi, self.perms
            )
        }
    }
}

/// The mappings of a `/proc/PID/maps` text; lines it cannot read are skipped.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (lo, hi) = f.next()?.split_once('-')?;
            let perms = f.next()?.to_string();
            let _offset = f.next()?;
            let _dev = f.next()?;
            let inode = f.next()?.parse().ok()?;
            // The name is the rest of the line (a path may hold spaces).
            let name = f.collect::<Vec<_>>().join(" ");
            Some(Mapping {
                lo: u64::from_str_radix(lo, 16).ok()?,
                hi: u64::from_str_radix(hi, 16).ok()?,
                perms,
                inode,
                name,
            })
        })
        .collect()
}

/// This process's mappings (empty where `/proc/self/maps` cannot be read).
fn self_maps() -> Vec<Mapping> {
    std::fs::read_to_string("/proc/self/maps")
        .map(|t| parse_maps(&t))
        .unwrap_or_default()
}

/// The mappings of `maps` that overlap `[lo, hi)`.
fn overlapping(maps: &[Mapping], lo: u64, hi: u64) -> Vec<Mapping> {
    maps.iter()
        .filter(|m| m.lo < hi && lo < m.hi)
        .cloned()
        .collect()
}

/// This process's mappings that overlap `[lo, hi)` now.
pub fn holders(lo: u64, hi: u64) -> Vec<Mapping> {
    overlapping(&self_maps(), lo, hi)
}

/// What holds `[lo, hi)` now, in words.
pub fn describe_holders(lo: u64, hi: u64) -> String {
    let h = holders(lo, hi);
    if h.is_empty() {
        return "nothing in this process maps that range now".into();
    }
    let mut s = String::from("held by ");
    for (i, m) in h.iter().take(3).enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&m.to_string());
    }
    if h.len() > 3 {
        s.push_str(&format!(" and {} more mappings", h.len() - 3));
    }
    s
}

/// The regions' spans on `granule`: (first granule, one past the last, region index), sorted;
/// regions of no bytes are left out.
fn spans(regions: &[(usize, u64, u64)], granule: u64) -> Vec<(u64, u64, usize)> {
    let g = granule.max(1);
    let mut s: Vec<(u64, u64, usize)> = regions
        .iter()
        .filter(|r| r.2 > 0)
        .map(|&(i, base, size)| {
            let lo = base / g * g;
            let hi = base.saturating_add(size).div_ceil(g).saturating_mul(g);
            (lo, hi, i)
        })
        .collect();
    s.sort();
    s
}

fn merge(spans: Vec<(u64, u64, usize)>, touching: bool) -> Vec<(u64, u64, usize)> {
    let mut out: Vec<(u64, u64, usize)> = Vec::new();
    for (lo, hi, i) in spans {
        match out.last_mut() {
            Some(last) if lo < last.1 || (touching && lo == last.1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi, i)),
        }
    }
    out
}

/// The ranges to reserve: each region's granules, merged where they overlap or touch; with
/// the first region of each.
pub fn plan_ranges(regions: &[(usize, u64, u64)], granule: u64) -> Vec<(u64, u64, usize)> {
    merge(spans(regions, granule), true)
}

/// The smaller pieces a range falls back to: each region's granules, merged only where
/// regions share a granule (which one reservation must then cover); with the first region of
/// each.
pub fn plan_pieces(regions: &[(usize, u64, u64)], granule: u64) -> Vec<(u64, u64, usize)> {
    merge(spans(regions, granule), false)
}

/// The regions of `m` recreated at their captured addresses (module variables are placed by
/// the module load): (index, base, size).
pub fn plain_regions(m: &Manifest) -> Vec<(usize, u64, u64)> {
    m.regions
        .iter()
        .filter(|r| !is_named_variable(r))
        .map(|r| (r.index, r.base, r.size))
        .collect()
}

/// Whether `r` is a module variable of the captured kernel's own image (named): the loaded
/// image places it. Another image's variable (no symbol: the kernel reaches it only through a
/// pointer) is recreated at its address like any region.
pub fn is_named_variable(r: &replay_capture::RegionEntry) -> bool {
    r.class.contains(MemoryClass::MODULE_VARIABLE) && r.symbol.is_some()
}

/// `[lo, hi)` less the sorted, disjoint `taken` intervals.
fn gaps(lo: u64, hi: u64, taken: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = lo;
    for &(a, b) in taken {
        if b <= at || a >= hi {
            continue;
        }
        if a > at {
            out.push((at, a));
        }
        at = at.max(b);
    }
    if at < hi {
        out.push((at, hi));
    }
    out
}

/// Maps `[lo, hi)` as a placeholder; why not, naming what holds the range.
fn map_placeholder(lo: u64, hi: u64) -> Result<(), String> {
    let len = usize::try_from(hi - lo).map_err(|_| format!("{} bytes", hi - lo))?;
    let want = usize::try_from(lo).map_err(|_| format!("address {lo:#x}"))?;
    // SAFETY: asks for fresh private anonymous memory that cannot be accessed; with
    // MAP_FIXED_NOREPLACE the kernel never replaces an existing mapping (it fails with EEXIST
    // instead), so no memory of this process changes; a kernel that does not know the flag
    // takes the address as a hint, and a mapping placed elsewhere is unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::without_provenance_mut::<c_void>(want),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE
                | libc::MAP_ANONYMOUS
                | libc::MAP_NORESERVE
                | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::EEXIST) {
            describe_holders(lo, hi)
        } else {
            format!("{e}; {}", describe_holders(lo, hi))
        });
    }
    if p.addr() != want {
        let why = format!(
            "the kernel placed it at {:#x}; {}",
            p.addr(),
            describe_holders(lo, hi)
        );
        // SAFETY: the mapping just made, of `len` bytes, that nothing else knows of.
        unsafe { libc::munmap(p, len) };
        return Err(why);
    }
    Ok(())
}

/// Unmaps `[lo, hi)` of ours, where `maps` still shows placeholder-like memory over all of it;
/// `false` (nothing unmapped) otherwise.
fn unmap_placeholder(maps: &[Mapping], lo: u64, hi: u64) -> bool {
    let covered = gaps(
        lo,
        hi,
        &maps
            .iter()
            .filter(|m| m.is_placeholder_like())
            .map(|m| (m.lo, m.hi))
            .collect::<Vec<_>>(),
    )
    .is_empty();
    if !covered {
        log::warn!(
            "[kernel-replay] replay: the placeholder at {lo:#x}-{hi:#x} was replaced ({}); left alone",
            describe_holders(lo, hi)
        );
        return false;
    }
    // SAFETY: `[lo, hi)` is part of a placeholder this process mapped (page-aligned: on the
    // placeholder granule) and still is inaccessible anonymous memory, which no Rust object
    // lives in.
    unsafe {
        libc::munmap(
            std::ptr::without_provenance_mut::<c_void>(lo as usize),
            (hi - lo) as usize,
        )
    };
    true
}

/// A range that could not be held when the placeholders were made, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// First address.
    pub lo: u64,
    /// One past the last address.
    pub hi: u64,
    /// Why, naming what held it.
    pub why: String,
}

/// The host address ranges held for the regions of some captures; unmapped on drop.
#[derive(Debug, Default)]
pub struct Placeholders {
    /// The ranges (or pieces) planned, sorted.
    wanted: Vec<(u64, u64)>,
    /// Those mapped by us now: sorted and disjoint.
    held: Vec<(u64, u64)>,
    /// Those that could not be had, with why.
    refused: Vec<Refused>,
}

impl Placeholders {
    /// None held (a replay that asks the driver without placeholders).
    pub fn none() -> Self {
        Self::default()
    }

    /// Holds the ranges of every plain region of `manifests`. Call it before anything loads
    /// the driver: the driver's own reservations then go elsewhere too.
    pub fn hold(manifests: &[&Manifest]) -> Self {
        let regions: Vec<(usize, u64, u64)> =
            manifests.iter().flat_map(|m| plain_regions(m)).collect();
        Self::hold_regions(&regions)
    }

    /// Holds the ranges of `regions` (index, base, size): each range whole, else each of its
    /// pieces ([`plan_pieces`]) that can be had.
    pub fn hold_regions(regions: &[(usize, u64, u64)]) -> Self {
        let mut p = Self::default();
        let pieces = plan_pieces(regions, PLACEHOLDER_GRANULE);
        for (lo, hi, _) in plan_ranges(regions, PLACEHOLDER_GRANULE) {
            if map_placeholder(lo, hi).is_ok() {
                p.wanted.push((lo, hi));
                p.held.push((lo, hi));
                continue;
            }
            for &(a, b, _) in pieces.iter().filter(|s| lo <= s.0 && s.1 <= hi) {
                p.wanted.push((a, b));
                match map_placeholder(a, b) {
                    Ok(()) => p.held.push((a, b)),
                    Err(why) => p.refused.push(Refused { lo: a, hi: b, why }),
                }
            }
        }
        p
    }

    /// The ranges mapped as placeholders now (sorted, disjoint).
    pub fn held(&self) -> &[(u64, u64)] {
        &self.held
    }

    /// The ranges that could not be had when the placeholders were made.
    pub fn refused(&self) -> &[Refused] {
        &self.refused
    }

    /// Why a part of `[lo, hi)` could not be held when the placeholders were made, if it could
    /// not.
    pub fn refusal(&self, lo: u64, hi: u64) -> Option<&Refused> {
        self.refused.iter().find(|r| r.lo < hi && lo < r.hi)
    }

    /// Unmaps the placeholders' parts over `[lo, hi)`: call it immediately before the driver
    /// is asked for that range.
    pub fn release(&mut self, lo: u64, hi: u64) {
        if !self.held.iter().any(|&(a, b)| a < hi && lo < b) {
            return;
        }
        let maps = self_maps();
        let mut kept = Vec::with_capacity(self.held.len() + 1);
        for &(a, b) in &self.held {
            let (x, y) = (a.max(lo), b.min(hi));
            if x >= y {
                kept.push((a, b));
                continue;
            }
            // Ours no longer either way: unmapped now, or replaced by someone else.
            unmap_placeholder(&maps, x, y);
            if a < x {
                kept.push((a, x));
            }
            if y < b {
                kept.push((y, b));
            }
        }
        self.held = kept;
    }

    /// Maps the placeholders again where they were released and nothing took the range since
    /// (after a replay freed its reservations, for the next capture).
    pub fn restore(&mut self) {
        let mut added = Vec::new();
        for &(lo, hi) in &self.wanted {
            for (a, b) in gaps(lo, hi, &self.held) {
                if !added.iter().any(|&(x, y)| x < b && a < y) && map_placeholder(a, b).is_ok() {
                    added.push((a, b));
                }
            }
        }
        self.held.extend(added);
        self.held.sort_unstable();
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let maps = self_maps();
        for &(a, b) in &self.held {
            unmap_placeholder(&maps, a, b);
        }
        self.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = PLACEHOLDER_GRANULE;

    /// A 2 MiB-aligned address far from where a test process maps anything, distinct per test.
    fn far(n: u64) -> u64 {
        0x5c00_0000_0000 + n * (1 << 32)
    }

    /// Maps `[lo, hi)` read-write from a file named `name` (so /proc/self/maps names it).
    fn map_file(lo: u64, len: u64, name: &str) -> (std::path::PathBuf, *mut c_void) {
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(len).unwrap();
        // SAFETY: a fresh shared mapping of our own file at an address nothing of this test
        // process uses (MAP_FIXED_NOREPLACE replaces nothing).
        let p = unsafe {
            libc::mmap(
                std::ptr::without_provenance_mut(lo as usize),
                len as usize,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE,
                f.as_raw_fd(),
                0,
            )
        };
        assert_eq!(p.addr(), lo as usize, "{}", std::io::Error::last_os_error());
        (path, p)
    }

    /// Whether an anonymous mapping at `lo` lands there (then it is unmapped again).
    fn free_at(lo: u64, len: u64) -> bool {
        map_placeholder(lo, lo + len).is_ok() && {
            unmap_placeholder(&self_maps(), lo, lo + len);
            true
        }
    }

    #[test]
    fn regions_sharing_a_granule_are_one_range_and_one_piece_touching_ones_one_range_only() {
        let regions = [
            (0, 10 * G + 512, 1024),
            (1, 10 * G + 4096, 100),
            (2, 11 * G - 8, 16),
            (3, 12 * G, G),
            (4, 20 * G, G),
            (5, 30 * G, 0),
        ];
        assert_eq!(
            plan_ranges(&regions, G),
            vec![(10 * G, 13 * G, 0), (20 * G, 21 * G, 4)]
        );
        assert_eq!(
            plan_pieces(&regions, G),
            vec![
                (10 * G, 12 * G, 0),
                (12 * G, 13 * G, 3),
                (20 * G, 21 * G, 4)
            ]
        );
    }

    #[test]
    fn gaps_are_what_the_intervals_leave() {
        assert_eq!(gaps(0, 10, &[]), vec![(0, 10)]);
        assert_eq!(gaps(0, 10, &[(2, 4), (6, 12)]), vec![(0, 2), (4, 6)]);
        assert_eq!(gaps(3, 5, &[(0, 10)]), vec![]);
    }

    #[test]
    fn maps_lines_are_read_with_their_names() {
        let m = parse_maps(
            "7fbc29800000-7fbc29c00000 r-xp 00000000 08:01 1234 /usr/lib/lib x.so\n\
             7fbc2a000000-7fbc2a400000 ---p 00000000 00:00 0 \n\
             garbage\n\
             55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0 [heap]\n",
        );
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].name, "/usr/lib/lib x.so");
        assert_eq!(
            (m[0].lo, m[0].hi, m[0].inode),
            (0x7fbc29800000, 0x7fbc29c00000, 1234)
        );
        assert!(m[1].is_placeholder_like() && !m[0].is_placeholder_like());
        assert_eq!(m[2].name, "[heap]");
        assert!(m[1].to_string().contains("anonymous"), "{}", m[1]);
        assert_eq!(
            overlapping(&m, 0x7fbc29c00000, 0x7fbc2a000001),
            vec![m[1].clone()]
        );
    }

    #[test]
    fn a_placeholder_over_a_free_range_blocks_later_mappings_there_until_released() {
        let lo = far(1);
        assert!(free_at(lo, 2 * G), "the test's range is free");
        let mut p = Placeholders::hold_regions(&[(0, lo + 100, G)]);
        assert_eq!(p.held(), &[(lo, lo + 2 * G)]);
        assert!(p.refused().is_empty());
        // Held: a mapping asked for there cannot have it, and maps shows ours.
        assert!(map_placeholder(lo, lo + G).is_err());
        assert!(holders(lo, lo + 2 * G)
            .iter()
            .all(|m| m.is_placeholder_like()));
        // Released for the driver: the first granule is free again, the second still held.
        p.release(lo, lo + G);
        assert_eq!(p.held(), &[(lo + G, lo + 2 * G)]);
        assert!(free_at(lo, G));
        assert!(map_placeholder(lo + G, lo + 2 * G).is_err());
        // Restored once the driver let go; dropped: all free.
        p.restore();
        assert_eq!(p.held(), &[(lo, lo + G), (lo + G, lo + 2 * G)]);
        assert!(map_placeholder(lo, lo + G).is_err());
        drop(p);
        assert!(free_at(lo, 2 * G));
    }

    #[test]
    fn a_range_already_mapped_is_refused_naming_the_mapping_and_its_other_pieces_are_held() {
        let lo = far(2);
        assert!(free_at(lo, 4 * G), "the test's range is free");
        // Region 0 in [lo, lo+G), region 1 in [lo+G, lo+3G), a file mapped over lo+2G.
        let (path, q) = map_file(lo + 2 * G, 4096, "kr-placeholder-holder");
        let p = Placeholders::hold_regions(&[(0, lo, G), (1, lo + G, 2 * G)]);
        assert_eq!(p.held(), &[(lo, lo + G)], "{:?}", p.refused());
        let r = p.refusal(lo + G, lo + 3 * G).expect("refused");
        assert_eq!((r.lo, r.hi), (lo + G, lo + 3 * G));
        assert!(r.why.contains("kr-placeholder-holder"), "{}", r.why);
        assert!(describe_holders(lo + G, lo + 3 * G).contains("kr-placeholder-holder"));
        // The file's mapping is untouched by the drop.
        drop(p);
        assert!(holders(lo + 2 * G, lo + 2 * G + 4096)
            .iter()
            .any(|m| m.name.contains("kr-placeholder-holder")));
        // SAFETY: the test's own mapping, unmapped once.
        unsafe { libc::munmap(q, 4096) };
        let _ = std::fs::remove_file(path);
        assert!(free_at(lo, 4 * G));
    }

    #[test]
    fn a_placeholder_something_replaced_is_not_unmapped() {
        let lo = far(3);
        assert!(free_at(lo, G), "the test's range is free");
        let mut p = Placeholders::hold_regions(&[(0, lo, G)]);
        // Something maps over it with MAP_FIXED, as a careless driver could.
        // SAFETY: replaces only our own placeholder, which no Rust object lives in.
        let q = unsafe {
            libc::mmap(
                std::ptr::without_provenance_mut(lo as usize),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        assert_eq!(q.addr(), lo as usize);
        p.release(lo, lo + G);
        assert!(p.held().is_empty());
        // Still mapped read-write: the release declined to unmap it.
        assert!(holders(lo, lo + 4096).iter().any(|m| m.perms == "rw-p"));
        // SAFETY: the test's own mappings (the replacement and the placeholder's rest).
        unsafe { libc::munmap(q, G as usize) };
        assert!(free_at(lo, G));
    }
}
