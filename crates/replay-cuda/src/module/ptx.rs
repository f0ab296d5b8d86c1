//! Module-scope variables of PTX text (SPEC §7.1 module variables, §9.2 code): what a PTX
//! image, JIT-compiled by the driver, declares in the `.global` state space, so its globals
//! are resolved through `cuModuleGetGlobal` like a cubin's symbols.
//!
//! Read here: declarations `[.visible|.weak|.common] .global [.align N] [.attribute(..)]
//! [.vN] .TYPE name[dims] [= init] [, name2 ...];`, anywhere in the text (only module scope
//! declares them; the `.global` of instructions such as `ld.global.u32` is part of one
//! token and never starts a declaration). Skipped: `.extern` (storage of another module),
//! `.const` (read-only), `.shared` / `.local` (no global storage), and the opaque handles
//! `.texref` / `.samplerref` / `.surfref`. A size is the element size times the vector width
//! times the dimensions (an open_dim array takes its initializer's element count); the driver's
//! size wins where it is larger. Text that is not PTX (no `.version` and `.target`
//! directives, not text, an unterminated comment or string, a declaration that does not
//! parse) is an error, so its image's globals count as unknown, never as none.

use super::elf::{GlobalSymbol, STB_GLOBAL, STB_LOCAL};

/// Why PTX text gave no globals.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PtxError {
    /// Not PTX text.
    #[error("not PTX text: {0}")]
    NotPtx(&'static str),
    /// A `.global` declaration that does not parse.
    #[error("PTX declaration not understood near byte {at}: {why}")]
    Declaration {
        /// Byte offset of the declaration.
        at: usize,
        /// What was wrong.
        why: &'static str,
    },
}

/// The section index given to PTX globals: one per variable, counting down from here, so no
/// variable's address is ever derived from another's (PTX has no sections).
const PTX_SECTION_BASE: usize = usize::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    Punct(u8),
}

/// Tokens with their byte offsets: words (`[A-Za-z0-9_.$%]+`) and single punctuation bytes;
/// comments and quoted strings dropped.
fn tokens(text: &str) -> Result<Vec<(usize, Tok<'_>)>, PtxError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let word = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'$' | b'%');
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let end = text[i + 2..]
                .find("*/")
                .ok_or(PtxError::NotPtx("unterminated comment"))?;
            i += 2 + end + 2;
        } else if c == b'"' {
            let end = text[i + 1..]
                .find('"')
                .ok_or(PtxError::NotPtx("unterminated string"))?;
            i += 1 + end + 1;
        } else if word(c) {
            let s = i;
            while i < b.len() && word(b[i]) {
                i += 1;
            }
            out.push((s, Tok::Word(&text[s..i])));
        } else {
            out.push((i, Tok::Punct(c)));
            i += 1;
        }
    }
    Ok(out)
}

/// Whether `bytes` (up to a NUL, if any) look like PTX: text with `.version` and `.target`
/// directives.
pub fn is_ptx(bytes: &[u8]) -> bool {
    text_of(bytes).is_ok_and(|t| {
        tokens(t).is_ok_and(|toks| {
            let has = |d: &str| toks.iter().any(|(_, t)| *t == Tok::Word(d));
            has(".version") && has(".target")
        })
    })
}

fn text_of(bytes: &[u8]) -> Result<&str, PtxError> {
    let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
    std::str::from_utf8(&bytes[..end]).map_err(|_| PtxError::NotPtx("not UTF-8 text"))
}

/// Bytes of one element of a PTX fundamental type, `None` for opaque or unknown types.
fn type_size(t: &str) -> Option<u64> {
    Some(match t {
        ".b8" | ".u8" | ".s8" | ".pred" | ".e4m3" | ".e5m2" => 1,
        ".e4m3x2" | ".e5m2x2" => 2,
        ".b16" | ".u16" | ".s16" | ".f16" | ".bf16" => 2,
        ".b32" | ".u32" | ".s32" | ".f32" | ".f16x2" | ".bf16x2" | ".tf32" => 4,
        ".b64" | ".u64" | ".s64" | ".f64" => 8,
        ".b128" => 16,
        _ => return None,
    })
}

/// The writable module-scope variables PTX `text` declares (see the module docs).
pub fn globals(bytes: &[u8]) -> Result<Vec<GlobalSymbol>, PtxError> {
    let text = text_of(bytes)?;
    let toks = tokens(text)?;
    {
        let has = |d: &str| toks.iter().any(|(_, t)| *t == Tok::Word(d));
        if !has(".version") || !has(".target") {
            return Err(PtxError::NotPtx("no .version and .target directives"));
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let (off, t) = toks[i];
        // A standalone `.global` starts a declaration (module directives such as `.version`
        // end at a newline, not a `;`), except a pointer parameter's state space
        // (`.param .u64 .ptr .global .align 4 p`).
        let before = |back: usize| i.checked_sub(back).map(|k| toks[k].1);
        if t != Tok::Word(".global") || before(1) == Some(Tok::Word(".ptr")) {
            i += 1;
            continue;
        }
        let mut linkage = None;
        let mut back = 1;
        while let Some(Tok::Word(w)) = before(back) {
            if matches!(w, ".visible" | ".weak" | ".extern" | ".common") {
                linkage.get_or_insert(w);
                back += 1;
            } else {
                break;
            }
        }
        // The statement runs to the `;` outside braces.
        let mut end = i + 1;
        let mut depth = 0i32;
        while let Some((_, t)) = toks.get(end) {
            match t {
                Tok::Punct(b'{') => depth += 1,
                Tok::Punct(b'}') => depth -= 1,
                Tok::Punct(b';') if depth == 0 => break,
                _ => {}
            }
            if depth < 0 {
                return Err(PtxError::Declaration {
                    at: off,
                    why: "unbalanced braces",
                });
            }
            end += 1;
        }
        if end >= toks.len() {
            return Err(PtxError::Declaration {
                at: off,
                why: "no terminating `;`",
            });
        }
        if linkage != Some(".extern") {
            declaration(&toks[i + 1..end], off, linkage, &mut out)?;
        }
        i = end + 1;
    }
    Ok(out)
}

/// One `.global` declaration's variables (`toks`: after `.global`, before `;`).
fn declaration(
    toks: &[(usize, Tok<'_>)],
    at: usize,
    linkage: Option<&str>,
    out: &mut Vec<GlobalSymbol>,
) -> Result<(), PtxError> {
    let err = |why| PtxError::Declaration { at, why };
    let mut k = 0;
    let mut vector = 1u64;
    let mut elem = None;
    // Qualifiers, then the type.
    while let Some((_, t)) = toks.get(k) {
        match *t {
            Tok::Word(".align") => k += 2,
            Tok::Word(".attribute") => {
                // `.attribute(.managed)`, `.attribute(.unified(a, b))`
                let mut depth = 0i32;
                loop {
                    k += 1;
                    match toks.get(k).map(|t| t.1) {
                        None => return Err(err("unterminated .attribute")),
                        Some(Tok::Punct(b'(')) => depth += 1,
                        Some(Tok::Punct(b')')) => {
                            depth -= 1;
                            if depth <= 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                k += 1;
            }
            Tok::Word(".v2") => (vector, k) = (2, k + 1),
            Tok::Word(".v4") => (vector, k) = (4, k + 1),
            Tok::Word(".v8") => (vector, k) = (8, k + 1),
            Tok::Word(".texref" | ".samplerref" | ".surfref") => return Ok(()),
            Tok::Word(w) if w.starts_with('.') => {
                elem = Some(type_size(w).ok_or(err("unknown type"))?);
                k += 1;
                break;
            }
            _ => return Err(err("no type")),
        }
    }
    let elem = elem.ok_or(err("no type"))? * vector;
    // Variables: name [dims] [= init], separated by commas outside brackets and braces.
    loop {
        let name = match toks.get(k) {
            Some((_, Tok::Word(w))) if !w.starts_with('.') => *w,
            _ => return Err(err("no variable name")),
        };
        k += 1;
        let mut count = 1u64;
        let mut open_dim = false;
        while toks.get(k).map(|t| t.1) == Some(Tok::Punct(b'[')) {
            match (toks.get(k + 1).map(|t| t.1), toks.get(k + 2).map(|t| t.1)) {
                (Some(Tok::Word(n)), Some(Tok::Punct(b']'))) => {
                    let n = parse_int(n).ok_or(err("array dimension"))?;
                    count = count.checked_mul(n).ok_or(err("array too large"))?;
                    k += 3;
                }
                (Some(Tok::Punct(b']')), _) => {
                    open_dim = true;
                    k += 2;
                }
                _ => return Err(err("array dimension")),
            }
        }
        let mut init_elems = 0u64;
        if toks.get(k).map(|t| t.1) == Some(Tok::Punct(b'=')) {
            k += 1;
            let mut depth = 0i32;
            let mut any = false;
            while let Some((_, t)) = toks.get(k) {
                match t {
                    Tok::Punct(b'{') => depth += 1,
                    Tok::Punct(b'}') => depth -= 1,
                    Tok::Punct(b',') if depth == 0 => break,
                    Tok::Punct(b',') => {}
                    _ => {
                        if !any || matches!(toks[k - 1].1, Tok::Punct(b',' | b'{')) {
                            init_elems += 1;
                        }
                        any = true;
                    }
                }
                k += 1;
            }
        }
        if open_dim {
            // The initializer's leaf elements (a vector's components each) are the whole
            // array.
            count = count.max(init_elems.div_ceil(vector));
        }
        let size = elem.checked_mul(count).ok_or(err("variable too large"))?;
        let index = PTX_SECTION_BASE - out.len();
        out.push(GlobalSymbol {
            name: name.to_owned(),
            section_name: ".global (PTX)".into(),
            section: index,
            offset: 0,
            size: size.max(1),
            read_only: false,
            binding: if linkage.is_some() {
                STB_GLOBAL
            } else {
                STB_LOCAL
            },
        });
        match toks.get(k).map(|t| t.1) {
            None => return Ok(()),
            Some(Tok::Punct(b',')) => k += 1,
            Some(_) => return Err(err("unexpected token after a variable")),
        }
    }
}

fn parse_int(s: &str) -> Option<u64> {
    let s = s.strip_suffix('U').unwrap_or(s);
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: &str = r#"//
// Generated by NVIDIA NVVM Compiler
.version 8.4
.target sm_90
.address_size 64

	// .globl	kr_globals
.extern .global .align 4 .u32 elsewhere;
.const .align 4 .b8 kr_const[32];
.global .align 8 .u64 kr_counter;
.visible .global .align 4 .b8 _Z8kr_tableIiE[8192];
.weak .global .align 4 .v4 .f32 kr_vec[2];
.global .align 1 .b8 $str[6] = {104, 101, 108, 108, 111, 0};
.global .align 4 .u32 kr_init[] = {1, 2, 3};
.visible .global .attribute(.managed) .align 8 .u64 kr_managed, kr_two[3];
.global .attribute(.unified(0x1234, 0x5678)) .align 4 .u32 kr_unified;
.global .align 8 .v2 .u32 kr_pairs[] = {{1, 2}, {3, 4}, {5, 6}};
.global .texref kr_tex;
.shared .align 4 .b8 kr_smem[64];
/* .global .u32 commented_out; */

.visible .entry kr_globals(
	.param .u64 kr_globals_param_0,
	.param .u64 .ptr .global .align 8 kr_globals_param_1
)
{
	.reg .b64 	%rd<4>;
	ld.param.u64 	%rd1, [kr_globals_param_0];
	ld.global.u64 	%rd2, [kr_counter];
	add.s64 	%rd3, %rd2, %rd1;
	st.global.u64 	[kr_counter], %rd3;
	ret;
}
"#;

    #[test]
    fn globals_are_read_from_the_text() {
        assert!(is_ptx(KERNEL.as_bytes()));
        let g = globals(KERNEL.as_bytes()).unwrap();
        let got: Vec<(&str, u64)> = g.iter().map(|s| (s.name.as_str(), s.size)).collect();
        assert_eq!(
            got,
            [
                ("kr_counter", 8),
                ("_Z8kr_tableIiE", 8192),
                ("kr_vec", 32),
                ("$str", 6),
                ("kr_init", 12),
                ("kr_managed", 8),
                ("kr_two", 24),
                ("kr_unified", 4),
                ("kr_pairs", 24),
            ],
            ".extern, .const, .shared, texture handles, comments and instructions left out"
        );
        assert_eq!(g[0].binding, STB_LOCAL);
        assert_eq!(g[1].binding, STB_GLOBAL);
        let sections: std::collections::HashSet<usize> = g.iter().map(|s| s.section).collect();
        assert_eq!(sections.len(), g.len(), "no two variables share a base");
    }

    #[test]
    fn text_that_is_not_ptx_or_does_not_parse_is_an_error() {
        assert!(!is_ptx(b"image\0"));
        assert!(matches!(globals(b"image\0"), Err(PtxError::NotPtx(_))));
        assert!(matches!(
            globals(b"\xff\xfe.version 8.0 .target sm_90"),
            Err(PtxError::NotPtx(_))
        ));
        let bad = ".version 8.0\n.target sm_90\n.global .align 8 .u64 kr_counter";
        assert!(matches!(
            globals(bad.as_bytes()),
            Err(PtxError::Declaration { .. })
        ));
        let odd = ".version 8.0\n.target sm_90\n.global .weird x;";
        assert!(globals(odd.as_bytes()).is_err());
        let open = ".version 8.0\n.target sm_90\n/* never closed";
        assert!(globals(open.as_bytes()).is_err());
        // No globals is an answer, not an error.
        let none = ".version 8.0\n.target sm_90\n.address_size 64\n";
        assert_eq!(globals(none.as_bytes()).unwrap(), Vec::new());
    }

    #[test]
    fn hostile_text_never_panics() {
        let base = KERNEL.as_bytes();
        for len in 0..base.len() {
            let _ = globals(&base[..len]);
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut m = base.to_vec();
            let at = (seed as usize) % m.len();
            m[at] = b"{}[];,=.()x0 "[(seed >> 32) as usize % 13];
            let _ = globals(&m);
        }
    }
}
