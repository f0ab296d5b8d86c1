//! Sources and headers speak of SPEC sections and `BENCHMARKS.md`, never of the issue tracker:
//! an issue number in `crates/*/src` or `include/` is a fact that belongs elsewhere and drifts.

use std::path::{Path, PathBuf};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// Every file under `dir`, recursively.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Where `text` names an issue by number ("issue 12", "issues 7 and 15"): the 1-based lines.
fn issue_tags(text: &str) -> Vec<usize> {
    let mut at = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let lower = line.to_ascii_lowercase();
        let mut from = 0;
        while let Some(i) = lower[from..].find("issue").map(|i| from + i) {
            let word_start = !lower[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric());
            let tail = &lower[i + 5..];
            let after = tail.strip_prefix('s').unwrap_or(tail);
            let numbered = after
                .strip_prefix(' ')
                .is_some_and(|d| d.starts_with(|c: char| c.is_ascii_digit()));
            if word_start && numbered {
                at.push(n + 1);
                break;
            }
            from = i + 5;
        }
    }
    at
}

#[test]
fn the_scan_finds_an_issue_number_and_nothing_else() {
    assert_eq!(
        issue_tags("a\n// fixed in issue 12\nissues 7 and 15\n"),
        vec![2, 3]
    );
    assert!(issue_tags("an issue with the driver; issues remain; tissue 4x").is_empty());
}

#[test]
fn no_source_file_or_header_names_an_issue_number() {
    let root = root();
    let mut all = Vec::new();
    files(&root.join("include"), &mut all);
    for c in std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        files(&c.path().join("src"), &mut all);
    }
    assert!(all.len() > 50, "the scan found the sources: {}", all.len());
    let mut found = Vec::new();
    for f in all {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for line in issue_tags(&text) {
            found.push(format!(
                "{}:{line}",
                f.strip_prefix(&root).unwrap_or(&f).display()
            ));
        }
    }
    assert!(
        found.is_empty(),
        "issue numbers in sources:\n{}",
        found.join("\n")
    );
}
