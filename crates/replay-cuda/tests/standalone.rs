//! Standalone replay of CUDA captures (`replay_cuda::standalone`) against the fake driver
//! (`tests/fake_driver/fake_cuda*.c`, whose kernels run on the host at the device addresses):
//! a region recreated at its captured address, a module variable the load placed elsewhere,
//! and one an argument points into; the address ranges held before the driver's own
//! reservations could take them, a range taken before the replay named in its error, and a
//! range the driver will not place whole reserved per region. Skipped without a C compiler.

use std::path::PathBuf;

use replay_core::{
    AgentId, ArgLayout, Capture, CapturedRegion, CodeImage, DeviceDescription, Dim3, DispatchId,
    DispatchInfo, KernelId, KernelKey, MemoryClass, QueueId, Scope,
};
use replay_cuda::standalone::{
    replay, replay_relocating, replay_with, Placeholders, Relocation, StandaloneError,
};

mod support;
use support::{load_fake, Fake};

/// A captured address no mapping of a test process is near (2 MiB-aligned).
const BASE: u64 = 0x5a5a_0000_0000;
const WORDS: usize = 512;
/// The driver's mapping granule (the fake's, as the real one's).
const G: u64 = 2 << 20;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "replay-cuda-standalone-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn words(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn capture(kernel: &str, kernarg: Vec<u8>, regions: Vec<CapturedRegion>) -> Capture {
    Capture {
        info: DispatchInfo::new(
            AgentId(0),
            QueueId(0),
            KernelId(1),
            kernel,
            Dim3::new(64, 1, 1),
            Dim3::new(64, 1, 1),
        )
        .with_dispatch_id(DispatchId(1)),
        kernel: KernelKey {
            agent: AgentId(0),
            code_object: 1,
            symbol: 1,
        },
        kernarg,
        arg_layout: ArgLayout::Known,
        scope: Scope::All,
        pass: 0,
        device: DeviceDescription {
            backend: "cuda".into(),
            device: "fake".into(),
            driver: "fake".into(),
        },
        code: CodeImage {
            format: "ptx".into(),
            module: "test".into(),
            symbol: kernel.into(),
            bytes: b".version 8.4\n".to_vec(),
            launch_attributes: Vec::new(),
            variables: Vec::new(),
        },
        regions,
    }
}

fn written(name: &str, c: &Capture) -> replay_capture::LoadedCapture {
    let d = scratch(name);
    replay_capture::write(&d, c).expect("write");
    replay_capture::read(&d).expect("read")
}

#[test]
fn a_region_is_recreated_at_its_captured_address_and_replays_equal() {
    if load_fake(Fake::Library).is_none() {
        return;
    }
    let input: Vec<u64> = (0..WORDS as u64).map(|i| i * 7 + 1).collect();
    let k = 5u64;
    // kr_rmw: p[i] = p[i] * 6364136223846793005 + (k ^ i).
    let output: Vec<u64> = input
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.wrapping_mul(6364136223846793005)
                .wrapping_add(k ^ i as u64)
        })
        .collect();
    // The argument points inside the region, not at its base: the recreated address must be
    // exactly the captured one.
    let at = BASE + 4096;
    let kernarg = words(&[at, WORDS as u64, k]);
    let mut region_in = vec![0u8; 4096];
    region_in.extend(words(&input));
    let mut region_out = vec![0u8; 4096];
    region_out.extend(words(&output));
    let c = written(
        "rmw",
        &capture(
            "kr_rmw",
            kernarg,
            vec![CapturedRegion {
                base: BASE,
                size: region_in.len() as u64,
                class: MemoryClass::DEVICE_COARSE,
                symbol: None,
                input: region_in,
                output: region_out,
            }],
        ),
    );
    let r = replay(&c, 3).expect("replay");
    assert_eq!(r.outputs.len(), 3);
    assert_eq!(r.seconds.len(), 3);
    for o in &r.outputs {
        assert!(replay_capture::compare_outputs(&c, o).is_empty());
    }
    // Released afterwards: a second replay reserves the same address again.
    assert!(replay(&c, 1).is_ok());
    let _ = std::fs::remove_dir_all(&c.dir);
}

#[test]
fn a_module_variable_loaded_elsewhere_is_written_there_unless_an_argument_points_into_it() {
    if load_fake(Fake::Library).is_none() {
        return;
    }
    // kr_globals(k): kr_table[i] = kr_table[i] * 3 + k + kr_const[i & 3] (kr_const 1..4).
    let k = 9u64;
    let input: Vec<u64> = (0..1024u64).map(|i| i ^ 0x55).collect();
    let output: Vec<u64> = input
        .iter()
        .enumerate()
        .map(|(i, v)| v.wrapping_mul(3) + k + (i as u64 & 3) + 1)
        .collect();
    let table = |kernarg: Vec<u8>| {
        capture(
            "kr_globals",
            kernarg,
            vec![CapturedRegion {
                base: BASE,
                size: 8192,
                class: MemoryClass::MODULE_VARIABLE,
                symbol: Some("kr_table".into()),
                input: words(&input),
                output: words(&output),
            }],
        )
    };
    let c = written("globals", &table(words(&[k])));
    let r = replay(&c, 2).expect("replay");
    assert_eq!(
        r.moved_variables.len(),
        1,
        "the fake's kr_table is elsewhere"
    );
    assert_ne!(r.moved_variables[0].1, BASE);
    for o in &r.outputs {
        assert!(replay_capture::compare_outputs(&c, o).is_empty());
    }
    let _ = std::fs::remove_dir_all(&c.dir);

    // An argument word pointing into it would dangle there: refused naming it.
    let mut kernarg = words(&[k]);
    kernarg.extend(words(&[BASE + 8]));
    let c = written("globals-pointed", &table(kernarg));
    match replay(&c, 1) {
        Err(StandaloneError::Address {
            index, base, why, ..
        }) => {
            assert_eq!((index, base), (0, BASE));
            assert!(
                why.contains("kr_table") && why.contains("points into it"),
                "{why}"
            );
        }
        other => panic!("expected an address error, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&c.dir);
}

/// A kr_rmw capture of one region at `at` (`pad` bytes before the words the kernel writes),
/// with `more` regions of untouched bytes after it.
fn rmw_capture(name: &str, at: u64, more: &[(u64, u64)]) -> replay_capture::LoadedCapture {
    let input: Vec<u64> = (0..WORDS as u64).map(|i| i * 3 + 2).collect();
    let k = 11u64;
    let output: Vec<u64> = input
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.wrapping_mul(6364136223846793005)
                .wrapping_add(k ^ i as u64)
        })
        .collect();
    let mut regions = vec![CapturedRegion {
        base: at,
        size: (WORDS * 8) as u64,
        class: MemoryClass::DEVICE_COARSE,
        symbol: None,
        input: words(&input),
        output: words(&output),
    }];
    for &(base, size) in more {
        let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        regions.push(CapturedRegion {
            base,
            size,
            class: MemoryClass::DEVICE_COARSE,
            symbol: None,
            input: bytes.clone(),
            output: bytes,
        });
    }
    written(
        name,
        &capture("kr_rmw", words(&[at, WORDS as u64, k]), regions),
    )
}

/// An inaccessible mapping of `len` bytes with `at` as a hint, as the driver makes its own
/// reservations; where it went.
fn driver_like_reservation(at: u64, len: u64) -> u64 {
    // SAFETY: fresh anonymous memory at an address of the kernel's choosing (a hint only:
    // nothing is replaced).
    let p = unsafe {
        libc::mmap(
            std::ptr::without_provenance_mut(at as usize),
            len as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p.addr() as u64
}

fn unmap(at: u64, len: u64) {
    // SAFETY: a mapping this test made, of `len` bytes, that no Rust object lives in.
    unsafe { libc::munmap(std::ptr::without_provenance_mut(at as usize), len as usize) };
}

#[test]
fn ranges_held_before_the_drivers_own_reservations_are_recreated_at_their_addresses() {
    if load_fake(Fake::Library).is_none() {
        return;
    }
    let at = BASE + (1 << 32);
    let c = rmw_capture("held", at, &[]);
    // Held first; a reservation of the driver's made after it goes elsewhere...
    let mut holds = Placeholders::hold(&[&c.manifest]);
    assert_eq!(holds.held(), &[(at, at + G)]);
    let theirs = driver_like_reservation(at, G);
    assert_ne!(theirs, at, "the placeholder holds the range");
    // ...and the replay has the range at its address, its placeholder released just before.
    let r = replay_with(&c, 2, &mut holds).expect("replay");
    for o in &r.outputs {
        assert!(replay_capture::compare_outputs(&c, o).is_empty());
    }
    // Restored for a next capture once the replay freed its reservation.
    assert_eq!(holds.held(), &[(at, at + G)]);
    drop(holds);
    unmap(theirs, G);

    // Without the placeholder, the driver's reservation takes the range, and the replay
    // cannot have it: an error naming what holds it.
    let theirs = driver_like_reservation(at, G);
    assert_eq!(theirs, at, "the range is free again");
    match replay_with(&c, 1, &mut Placeholders::none()) {
        Err(StandaloneError::Address {
            index, base, why, ..
        }) => {
            assert_eq!((index, base), (0, at));
            assert!(
                why.contains("taken in this process") && why.contains("anonymous mapping"),
                "{why}"
            );
        }
        other => panic!("expected an address error, got {other:?}"),
    }
    unmap(theirs, G);
    let _ = std::fs::remove_dir_all(&c.dir);
}

#[test]
fn a_range_a_file_holds_before_the_replay_is_an_error_naming_the_file() {
    if load_fake(Fake::Library).is_none() {
        return;
    }
    use std::os::fd::AsRawFd;
    let at = BASE + (2 << 32);
    let c = rmw_capture("file", at, &[]);
    let path = scratch("holder.bin");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.set_len(4096).unwrap();
    // SAFETY: a shared read-only mapping of the test's own file where nothing is mapped
    // (MAP_FIXED_NOREPLACE replaces nothing).
    let q = unsafe {
        libc::mmap(
            std::ptr::without_provenance_mut((at + 8192) as usize),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE,
            f.as_raw_fd(),
            0,
        )
    };
    assert_eq!(q.addr() as u64, at + 8192);
    match replay(&c, 1) {
        Err(StandaloneError::Address {
            index, base, why, ..
        }) => {
            assert_eq!((index, base), (0, at));
            let name = path.file_name().unwrap().to_str().unwrap();
            assert!(why.contains(name), "{why}");
            assert!(
                why.contains("already taken when the replay started"),
                "{why}"
            );
        }
        other => panic!("expected an address error, got {other:?}"),
    }
    // The file's mapping is left as it was.
    // SAFETY: reads the first byte of the test's own readable mapping.
    assert_eq!(unsafe { *q.cast::<u8>() }, 0);
    // SAFETY: the test's own mapping, unmapped once.
    unsafe { libc::munmap(q, 4096) };
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&c.dir);
}

/// Runs `f` while the fake driver places reservations of more than `bytes` elsewhere than
/// asked (as a driver does that cannot place one across two of its own chunks).
fn placing_at_most<T>(bytes: u64, f: impl FnOnce() -> T) -> T {
    let this = libloading::os::unix::Library::this();
    // SAFETY: the fake driver is loaded globally and exports this setter.
    let limit = unsafe { this.get::<unsafe extern "C" fn(u64)>(b"fake_cuda_max_placed_reserve\0") }
        .expect("a fake driver export");
    // SAFETY: sets a limit under the fake's lock (the other tests reserve one granule at most).
    unsafe { limit(bytes) };
    let r = f();
    // SAFETY: as above; no limit again.
    unsafe { limit(0) };
    r
}

#[test]
fn a_range_the_driver_will_not_place_whole_is_reserved_per_region() {
    if load_fake(Fake::Library).is_none() {
        return;
    }
    // Two regions in adjacent granules: one range of two granules, which the driver places
    // elsewhere; each region's granule is placed where asked.
    let at = BASE + (3 << 32);
    let c = rmw_capture("pieces", at, &[(at + G, 4096)]);
    let r = placing_at_most(G, || replay(&c, 2));
    let r = r.expect("replay per region");
    for o in &r.outputs {
        assert!(replay_capture::compare_outputs(&c, o).is_empty());
    }
    // A region that shares a granule with another cannot be split off: one piece, refused.
    let c2 = rmw_capture("one-piece", at, &[(at + G - 8, 16)]);
    let r = placing_at_most(G, || replay(&c2, 1));
    match r {
        Err(StandaloneError::Address { index, why, .. }) => {
            assert_eq!(
                index, 0,
                "the piece of two granules starts with region 0: {why}"
            );
            assert!(why.contains("not at"), "{why}");
        }
        other => panic!("expected an address error, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&c.dir);
    let _ = std::fs::remove_dir_all(&c2.dir);
}

/// A range the driver will not place at its captured address, under `Relocation::Allow`: it
/// is recreated where the driver puts it, the argument block's pointer into it is rewritten,
/// and the replay equals the captured outputs; a word inside a region that points into the
/// relocated range is counted, not rewritten. Under `Refuse` the same capture is an address
/// error.
#[test]
fn a_range_the_driver_will_not_place_is_relocated_with_its_argument_pointers_rewritten() {
    if load_fake(Fake::Library).is_none() {
        return;
    }
    let at = BASE + (5 << 32);
    // Region 1 shares region 0's granule pair (one piece of two granules), and holds a word
    // pointing into region 0: a pointer stored in memory.
    let c = rmw_capture("relocated", at, &[(at + G - 8, 16)]);
    let mut c = c;
    c.data[1].0[..8].copy_from_slice(&(at + 64).to_le_bytes());
    c.data[1].1[..8].copy_from_slice(&(at + 64).to_le_bytes());
    let (refused, moved) = placing_at_most(G, || {
        (
            replay_relocating(&c, 1, &mut Placeholders::none(), Relocation::Refuse),
            replay_relocating(&c, 2, &mut Placeholders::none(), Relocation::Allow),
        )
    });
    assert!(
        matches!(refused, Err(StandaloneError::Address { index: 0, .. })),
        "{refused:?}"
    );
    let r = moved.expect("relocated replay");
    assert_eq!(r.relocated.len(), 1, "{:?}", r.relocated);
    let (lo, hi, there) = r.relocated[0];
    assert_eq!((lo, hi), (at, at + 2 * G));
    assert_ne!(there, at, "placed elsewhere");
    assert_eq!(r.rewritten_words, 1, "the kernel's pointer argument");
    assert_eq!(r.stored_pointers, 1, "region 1's word into region 0");
    assert_eq!(r.outputs.len(), 2);
    for o in &r.outputs {
        assert!(
            replay_capture::compare_outputs(&c, o).is_empty(),
            "the kernel wrote the relocated words as it wrote the captured ones"
        );
    }
    let _ = std::fs::remove_dir_all(&c.dir);
}
