//! A small ELF64 symbol-table reader for cubins (SPEC §9.2: module globals come from the
//! loaded image's symbol table, since the driver looks globals up by name only).
//!
//! It reads the section headers, the section-name table and every `SHT_SYMTAB` section, and
//! never panics on malformed input: every offset is bounds-checked and reported as
//! [`ElfError`]. Only little-endian ELF64 is accepted (what NVRTC and `nvcc` produce).
//!
//! Module-scope variables are the `STT_OBJECT` symbols defined in the global data sections:
//! `.nv.global` (zero-initialised, `SHT_NOBITS`) and `.nv.global.init` (initialised), which a
//! kernel may write; and the constant banks `.nv.constant*`, which it cannot (`__constant__`
//! data, reported read-only so the memory layer skips them). Shared and local memory sections
//! (`.nv.shared.*`, `.nv.local.*`) hold no global storage and are ignored.

/// Why an image could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// The image does not start with the ELF magic.
    #[error("not an ELF image (a PTX or fatbinary image has no symbol table to enumerate)")]
    NotElf,
    /// An ELF variant this reader does not handle.
    #[error("unsupported ELF: {0}")]
    Unsupported(&'static str),
    /// A structure lies outside the image.
    #[error(
        "truncated ELF: {what} at offset {offset} ({len} bytes) lies outside the {size}-byte image"
    )]
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Where it should be.
        offset: u64,
        /// Its length.
        len: u64,
        /// The image size.
        size: usize,
    },
    /// A name offset points outside its string table or is not NUL-terminated.
    #[error("bad string offset {0} in a string table")]
    BadString(u32),
}

/// ELF symbol types.
pub const STT_OBJECT: u8 = 1;
/// A function symbol.
pub const STT_FUNC: u8 = 2;
/// A section symbol.
pub const STT_SECTION: u8 = 3;
/// Local binding.
pub const STB_LOCAL: u8 = 0;
/// Global binding.
pub const STB_GLOBAL: u8 = 1;
/// Weak binding.
pub const STB_WEAK: u8 = 2;
/// Symbol table section type.
pub const SHT_SYMTAB: u32 = 2;
/// String table section type.
pub const SHT_STRTAB: u32 = 3;
/// Section without file data (zero-initialised).
pub const SHT_NOBITS: u32 = 8;
const SHN_UNDEF: u16 = 0;
const SHN_LORESERVE: u16 = 0xff00;
const SHN_XINDEX: u16 = 0xffff;

/// One section header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Name from the section-name table.
    pub name: String,
    /// `sh_type`.
    pub kind: u32,
    /// `sh_offset`.
    pub offset: u64,
    /// `sh_size`.
    pub size: u64,
    /// `sh_link`.
    pub link: u32,
    /// `sh_entsize`.
    pub entsize: u64,
}

/// One symbol of a symbol table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Name.
    pub name: String,
    /// `st_value`: for a relocatable or cubin image, the offset inside its section.
    pub value: u64,
    /// `st_size`.
    pub size: u64,
    /// `ELF64_ST_TYPE(st_info)`.
    pub kind: u8,
    /// `ELF64_ST_BIND(st_info)`.
    pub binding: u8,
    /// Index of the defining section; `None` for undefined, absolute or common symbols.
    pub section: Option<usize>,
}

/// A module-scope variable found in the symbol table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalSymbol {
    /// Symbol name (mangled unless declared `extern "C"`), what `cuModuleGetGlobal` takes.
    pub name: String,
    /// Name of the defining section.
    pub section_name: String,
    /// Index of the defining section.
    pub section: usize,
    /// Offset inside that section.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Constant data (`.nv.constant*`).
    pub read_only: bool,
    /// `ELF64_ST_BIND`.
    pub binding: u8,
}

/// A parsed image: its sections and symbols.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfImage {
    /// `e_machine` (190 for CUDA).
    pub machine: u16,
    /// Section headers, in index order.
    pub sections: Vec<Section>,
    /// Symbols of every symbol table, in table order.
    pub symbols: Vec<Symbol>,
}

/// `e_machine` of CUDA images.
pub const EM_CUDA: u16 = 190;

struct Reader<'a> {
    data: &'a [u8],
}

impl Reader<'_> {
    fn bytes(&self, what: &'static str, offset: u64, len: u64) -> Result<&[u8], ElfError> {
        let err = || ElfError::Truncated {
            what,
            offset,
            len,
            size: self.data.len(),
        };
        let start = usize::try_from(offset).map_err(|_| err())?;
        let l = usize::try_from(len).map_err(|_| err())?;
        let end = start.checked_add(l).ok_or_else(err)?;
        self.data.get(start..end).ok_or_else(err)
    }

    fn u16(&self, what: &'static str, at: u64) -> Result<u16, ElfError> {
        let b = self.bytes(what, at, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&self, what: &'static str, at: u64) -> Result<u32, ElfError> {
        let b = self.bytes(what, at, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&self, what: &'static str, at: u64) -> Result<u64, ElfError> {
        let b = self.bytes(what, at, 8)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }
}

fn string_at(table: &[u8], off: u32) -> Result<String, ElfError> {
    let start = off as usize;
    let rest = table.get(start..).ok_or(ElfError::BadString(off))?;
    let len = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or(ElfError::BadString(off))?;
    Ok(String::from_utf8_lossy(&rest[..len]).into_owned())
}

/// Parses the section headers and symbol tables of an ELF64 little-endian image.
pub fn parse(image: &[u8]) -> Result<ElfImage, ElfError> {
    let r = Reader { data: image };
    if image.len() < 4 || image[..4] != [0x7f, b'E', b'L', b'F'] {
        return Err(ElfError::NotElf);
    }
    let ident = r.bytes("ELF identification", 0, 16)?;
    if ident[4] != 2 {
        return Err(ElfError::Unsupported("not a 64-bit ELF"));
    }
    if ident[5] != 1 {
        return Err(ElfError::Unsupported("not little-endian"));
    }
    let machine = r.u16("ELF header", 18)?;
    let shoff = r.u64("ELF header", 40)?;
    let shentsize = u64::from(r.u16("ELF header", 58)?);
    let mut shnum = u64::from(r.u16("ELF header", 60)?);
    let mut shstrndx = u32::from(r.u16("ELF header", 62)?);
    if shoff == 0 {
        return Ok(ElfImage {
            machine,
            sections: Vec::new(),
            symbols: Vec::new(),
        });
    }
    if shentsize < 64 {
        return Err(ElfError::Unsupported(
            "section header entries under 64 bytes",
        ));
    }
    // Extended numbering: the real counts live in section 0.
    if shnum == 0 {
        shnum = r.u64("section header 0", shoff + 32)?;
    }
    if shstrndx == u32::from(SHN_XINDEX) {
        shstrndx = r.u32("section header 0", shoff + 40)?;
    }
    // Every header must lie inside the image before anything is allocated for them.
    r.bytes(
        "section header table",
        shoff,
        shnum.checked_mul(shentsize).ok_or(ElfError::Truncated {
            what: "section header table",
            offset: shoff,
            len: u64::MAX,
            size: image.len(),
        })?,
    )?;
    let mut raw = Vec::with_capacity(shnum as usize);
    for i in 0..shnum {
        let at = shoff + i * shentsize;
        raw.push((
            r.u32("section header", at)?,
            Section {
                name: String::new(),
                kind: r.u32("section header", at + 4)?,
                offset: r.u64("section header", at + 24)?,
                size: r.u64("section header", at + 32)?,
                link: r.u32("section header", at + 40)?,
                entsize: r.u64("section header", at + 56)?,
            },
        ));
    }
    let names: &[u8] = match raw.get(shstrndx as usize) {
        Some((_, s)) if s.kind != SHT_NOBITS => r.bytes("section name table", s.offset, s.size)?,
        _ => &[],
    };
    let mut sections = Vec::with_capacity(raw.len());
    for (name_off, mut s) in raw {
        s.name = if names.is_empty() {
            String::new()
        } else {
            string_at(names, name_off)?
        };
        sections.push(s);
    }

    let mut symbols = Vec::new();
    for s in sections.iter().filter(|s| s.kind == SHT_SYMTAB) {
        let entsize = if s.entsize == 0 { 24 } else { s.entsize };
        if entsize < 24 {
            return Err(ElfError::Unsupported("symbol entries under 24 bytes"));
        }
        let table = r.bytes("symbol table", s.offset, s.size)?;
        let strtab = match sections.get(s.link as usize) {
            Some(t) if t.kind == SHT_STRTAB => r.bytes("symbol string table", t.offset, t.size)?,
            _ => return Err(ElfError::Unsupported("symbol table without a string table")),
        };
        let tr = Reader { data: table };
        let count = s.size / entsize;
        for k in 0..count {
            let at = k * entsize;
            let name_off = tr.u32("symbol", at)?;
            let info = tr.bytes("symbol", at + 4, 1)?[0];
            let shndx = tr.u16("symbol", at + 6)?;
            let value = tr.u64("symbol", at + 8)?;
            let size = tr.u64("symbol", at + 16)?;
            let section = match shndx {
                SHN_UNDEF => None,
                SHN_XINDEX => {
                    return Err(ElfError::Unsupported(
                        "extended section indices (SHT_SYMTAB_SHNDX)",
                    ))
                }
                i if i >= SHN_LORESERVE => None,
                i => Some(i as usize),
            };
            symbols.push(Symbol {
                name: string_at(strtab, name_off)?,
                value,
                size,
                kind: info & 0xf,
                binding: info >> 4,
                section,
            });
        }
    }
    Ok(ElfImage {
        machine,
        sections,
        symbols,
    })
}

/// Whether a section holds module-scope storage, and whether that storage is constant.
pub fn classify_section(name: &str) -> Option<bool> {
    if name == ".nv.global" || name.starts_with(".nv.global.") {
        Some(false)
    } else if name.starts_with(".nv.constant") {
        Some(true)
    } else {
        None
    }
}

impl ElfImage {
    /// The module-scope variables: object symbols defined in global data or constant sections.
    pub fn global_symbols(&self) -> Vec<GlobalSymbol> {
        let mut out = Vec::new();
        for s in &self.symbols {
            if s.kind != STT_OBJECT || s.name.is_empty() {
                continue;
            }
            let Some(idx) = s.section else { continue };
            let Some(sec) = self.sections.get(idx) else {
                continue;
            };
            let Some(read_only) = classify_section(&sec.name) else {
                continue;
            };
            out.push(GlobalSymbol {
                name: s.name.clone(),
                section_name: sec.name.clone(),
                section: idx,
                offset: s.value,
                size: s.size,
                read_only,
                binding: s.binding,
            });
        }
        out
    }
}

/// Shorthand: parse and list the module-scope variables.
pub fn global_symbols(image: &[u8]) -> Result<Vec<GlobalSymbol>, ElfError> {
    Ok(parse(image)?.global_symbols())
}

/// Writing small ELF images, for tests of the reader and of module loading (not a general
/// ELF writer: one symbol table, sections laid out in order).
#[doc(hidden)]
pub mod testing {
    use super::*;

    /// Builds a minimal ELF64 little-endian image with the given sections (name, type, data or
    /// NOBITS size) and one symbol table.
    #[derive(Debug, Default)]
    pub struct Builder {
        sections: Vec<(String, u32, Vec<u8>, u64)>,
        symbols: Vec<(String, u8, u16, u64, u64)>,
    }

    impl Builder {
        /// An image without sections.
        pub fn new() -> Self {
            Self::default()
        }

        /// Adds a section; returns its index (index 0 is the null section).
        pub fn section(&mut self, name: &str, kind: u32, data: Vec<u8>, nobits: u64) -> u16 {
            self.sections.push((name.into(), kind, data, nobits));
            self.sections.len() as u16
        }

        /// Adds a symbol (`info` from [`info`], `shndx` a section index or 0 for undefined).
        pub fn symbol(&mut self, name: &str, info: u8, shndx: u16, value: u64, size: u64) {
            self.symbols.push((name.into(), info, shndx, value, size));
        }

        /// The image bytes.
        pub fn build(&self) -> Vec<u8> {
            // Layout: header, section data, then the section header table.
            let mut strtab = vec![0u8];
            let mut symtab = vec![0u8; 24]; // the null symbol
            for (name, info, shndx, value, size) in &self.symbols {
                let off = strtab.len() as u32;
                strtab.extend_from_slice(name.as_bytes());
                strtab.push(0);
                symtab.extend_from_slice(&off.to_le_bytes());
                symtab.push(*info);
                symtab.push(0);
                symtab.extend_from_slice(&shndx.to_le_bytes());
                symtab.extend_from_slice(&value.to_le_bytes());
                symtab.extend_from_slice(&size.to_le_bytes());
            }
            let mut all: Vec<(String, u32, Vec<u8>, u64, u32, u64)> = self
                .sections
                .iter()
                .map(|(n, k, d, nb)| (n.clone(), *k, d.clone(), *nb, 0, 0))
                .collect();
            let strtab_idx = all.len() as u32 + 1;
            all.push((".strtab".into(), SHT_STRTAB, strtab, 0, 0, 0));
            all.push((".symtab".into(), SHT_SYMTAB, symtab, 0, strtab_idx, 24));
            let mut shstr = vec![0u8];
            let mut name_offs = Vec::new();
            for s in &all {
                name_offs.push(shstr.len() as u32);
                shstr.extend_from_slice(s.0.as_bytes());
                shstr.push(0);
            }
            let shstr_name = shstr.len() as u32;
            shstr.extend_from_slice(b".shstrtab\0");
            all.push((".shstrtab".into(), SHT_STRTAB, shstr, 0, 0, 0));
            name_offs.push(shstr_name);

            let mut out = vec![0u8; 64];
            let mut placed = Vec::new();
            for s in &all {
                while out.len() % 8 != 0 {
                    out.push(0);
                }
                let off = out.len() as u64;
                if s.1 != SHT_NOBITS {
                    out.extend_from_slice(&s.2);
                }
                let size = if s.1 == SHT_NOBITS {
                    s.3
                } else {
                    s.2.len() as u64
                };
                placed.push((off, size));
            }
            while out.len() % 8 != 0 {
                out.push(0);
            }
            let shoff = out.len() as u64;
            out.extend_from_slice(&[0u8; 64]); // null section header
            for (i, s) in all.iter().enumerate() {
                let mut h = [0u8; 64];
                h[0..4].copy_from_slice(&name_offs[i].to_le_bytes());
                h[4..8].copy_from_slice(&s.1.to_le_bytes());
                h[24..32].copy_from_slice(&placed[i].0.to_le_bytes());
                h[32..40].copy_from_slice(&placed[i].1.to_le_bytes());
                h[40..44].copy_from_slice(&s.4.to_le_bytes());
                h[56..64].copy_from_slice(&s.5.to_le_bytes());
                out.extend_from_slice(&h);
            }
            let shnum = all.len() as u16 + 1;
            let shstrndx = shnum - 1;
            out[0..4].copy_from_slice(&[0x7f, b'E', b'L', b'F']);
            out[4] = 2; // ELFCLASS64
            out[5] = 1; // little-endian
            out[6] = 1; // EV_CURRENT
            out[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
            out[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
            out[20..24].copy_from_slice(&1u32.to_le_bytes());
            out[40..48].copy_from_slice(&shoff.to_le_bytes());
            out[52..54].copy_from_slice(&64u16.to_le_bytes());
            out[58..60].copy_from_slice(&64u16.to_le_bytes());
            out[60..62].copy_from_slice(&shnum.to_le_bytes());
            out[62..64].copy_from_slice(&shstrndx.to_le_bytes());
            out
        }
    }

    /// `st_info` from binding and type.
    pub const fn info(binding: u8, kind: u8) -> u8 {
        (binding << 4) | kind
    }

    /// A cubin-like image: a kernel, two writable globals (one zero-initialised, one
    /// initialised), a static (local) global, a constant, a shared-memory object and the
    /// section symbols a real cubin carries.
    pub fn sample() -> Vec<u8> {
        let mut b = Builder::new();
        let text = b.section(".text.kr_rmw", 1, vec![0u8; 32], 0);
        let global = b.section(".nv.global", SHT_NOBITS, Vec::new(), 8 + 8192);
        let init = b.section(".nv.global.init", 1, vec![1u8; 16], 0);
        let constant = b.section(".nv.constant3", 1, vec![2u8; 64], 0);
        let shared = b.section(".nv.shared.kr_rmw", SHT_NOBITS, Vec::new(), 256);
        b.symbol(".nv.global", info(STB_LOCAL, STT_SECTION), global, 0, 0);
        b.symbol("kr_rmw", info(STB_GLOBAL, STT_FUNC), text, 0, 32);
        b.symbol("kr_counter", info(STB_GLOBAL, STT_OBJECT), global, 0, 8);
        b.symbol("_ZL8kr_local", info(STB_LOCAL, STT_OBJECT), global, 8, 8192);
        b.symbol("kr_init", info(STB_GLOBAL, STT_OBJECT), init, 0, 16);
        b.symbol("kr_const", info(STB_GLOBAL, STT_OBJECT), constant, 0, 64);
        b.symbol("kr_smem", info(STB_LOCAL, STT_OBJECT), shared, 0, 256);
        b.symbol("kr_extern", info(STB_GLOBAL, STT_OBJECT), 0, 0, 0); // undefined
        b.build()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::sample;
    use super::*;

    #[test]
    fn finds_globals_and_constants_only() {
        let img = parse(&sample()).unwrap();
        assert_eq!(img.machine, EM_CUDA);
        assert!(img.sections.iter().any(|s| s.name == ".nv.global"));
        let g = img.global_symbols();
        let names: Vec<&str> = g.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["kr_counter", "_ZL8kr_local", "kr_init", "kr_const"],
            "functions, section symbols, shared memory and undefined symbols are left out"
        );
        let counter = &g[0];
        assert_eq!(
            (counter.offset, counter.size, counter.read_only),
            (0, 8, false)
        );
        assert_eq!(counter.section_name, ".nv.global");
        let local = &g[1];
        assert_eq!(
            (local.offset, local.size, local.binding),
            (8, 8192, STB_LOCAL)
        );
        assert_eq!(local.section, counter.section);
        assert_eq!(g[2].section_name, ".nv.global.init");
        assert!(!g[2].read_only);
        assert!(g[3].read_only);
    }

    #[test]
    fn symbol_fields_are_decoded() {
        let img = parse(&sample()).unwrap();
        let f = img.symbols.iter().find(|s| s.name == "kr_rmw").unwrap();
        assert_eq!((f.kind, f.binding, f.size), (STT_FUNC, STB_GLOBAL, 32));
        let u = img.symbols.iter().find(|s| s.name == "kr_extern").unwrap();
        assert_eq!(u.section, None);
        assert_eq!(
            img.symbols[0].name, "",
            "the null symbol is kept as table entry 0"
        );
    }

    #[test]
    fn rejects_what_it_cannot_read_without_panicking() {
        assert_eq!(parse(b"").unwrap_err(), ElfError::NotElf);
        assert_eq!(
            parse(b"// PTX\n.version 8.0").unwrap_err(),
            ElfError::NotElf
        );
        let good = sample();
        let mut c32 = good.clone();
        c32[4] = 1;
        assert!(matches!(parse(&c32), Err(ElfError::Unsupported(_))));
        let mut be = good.clone();
        be[5] = 2;
        assert!(matches!(parse(&be), Err(ElfError::Unsupported(_))));
        // Every truncation is an error, never a panic.
        for len in 0..good.len() {
            let _ = parse(&good[..len]);
        }
        assert!(matches!(
            parse(&good[..good.len() - 10]),
            Err(ElfError::Truncated { .. })
        ));
        // Garbage offsets.
        let mut wild = good.clone();
        wild[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(parse(&wild), Err(ElfError::Truncated { .. })));
        // Flipping any single byte never panics.
        for i in 0..good.len() {
            let mut m = good.clone();
            m[i] ^= 0xff;
            let _ = parse(&m);
        }
    }

    #[test]
    fn an_image_without_sections_has_no_globals() {
        let mut img = sample();
        img[40..48].copy_from_slice(&0u64.to_le_bytes());
        assert!(global_symbols(&img).unwrap().is_empty());
    }

    #[test]
    fn section_classes() {
        assert_eq!(classify_section(".nv.global"), Some(false));
        assert_eq!(classify_section(".nv.global.init"), Some(false));
        assert_eq!(classify_section(".nv.constant0.kr_rmw"), Some(true));
        assert_eq!(classify_section(".nv.constant3"), Some(true));
        assert_eq!(classify_section(".nv.shared.kr_rmw"), None);
        assert_eq!(classify_section(".nv.globalfoo"), None);
        assert_eq!(classify_section(".text.kr_rmw"), None);
    }
}
