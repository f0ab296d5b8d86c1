//! `--out` name templates (Nsight Compute's and rocprofv3's): `%p` the process's pid, `%h`
//! the host name, `%q{NAME}` the value of environment variable NAME in the process (empty
//! when unset), `%i` the lowest positive integer that names no existing file, `%rank%` the
//! process's rank (0 without one, as a program without a launcher is rank 0), `%%` a `%`.
//! The processes whose names come out equal share one file: a name without a per-process
//! part merges them all.

use std::path::{Path, PathBuf};

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Pid,
    Host,
    Env(String),
    Seq,
    Rank,
}

/// A parsed `--out` template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

/// What a template is expanded for: one process.
#[derive(Debug, Clone, Default)]
pub struct Subject {
    /// The pid.
    pub pid: u32,
    /// The host.
    pub host: String,
    /// The rank.
    pub rank: Option<u64>,
    /// The values of the variables the template names.
    pub env: Vec<(String, Option<String>)>,
}

impl Template {
    /// Parses `text`; an error names the bad part.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(i) = rest.find('%') {
            lit.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            let (piece, len) = if let Some(a) = after.strip_prefix("q{") {
                let end = a
                    .find('}')
                    .ok_or_else(|| format!("{text:?}: %q{{ without its closing }}"))?;
                let name = &a[..end];
                if name.is_empty() {
                    return Err(format!("{text:?}: %q{{}} names no variable"));
                }
                (Some(Piece::Env(name.to_string())), 3 + end)
            } else if after.starts_with("rank%") {
                (Some(Piece::Rank), 5)
            } else {
                match after.chars().next() {
                    Some('p') => (Some(Piece::Pid), 1),
                    Some('h') => (Some(Piece::Host), 1),
                    Some('i') => (Some(Piece::Seq), 1),
                    Some('%') => {
                        lit.push('%');
                        (None, 1)
                    }
                    _ => {
                        return Err(format!(
                            "{text:?}: unknown %-sequence at {:?} (known: %p %h %q{{NAME}} %i %rank% %%)",
                            &rest[i..]
                        ))
                    }
                }
            };
            if let Some(p) = piece {
                if !lit.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut lit)));
                }
                out.push(p);
            }
            rest = &after[len..];
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            out.push(Piece::Text(lit));
        }
        Ok(Template(out))
    }

    /// The variables `%q{NAME}` names.
    pub fn env_names(&self) -> Vec<String> {
        self.0
            .iter()
            .filter_map(|p| match p {
                Piece::Env(n) => Some(n.clone()),
                _ => None,
            })
            .collect()
    }

    /// Whether the name depends on the process (so processes may get files of their own).
    pub fn per_process(&self) -> bool {
        self.0
            .iter()
            .any(|p| matches!(p, Piece::Pid | Piece::Env(_) | Piece::Rank))
    }

    /// Whether the template has `%i`.
    pub fn has_seq(&self) -> bool {
        self.0.contains(&Piece::Seq)
    }

    fn render(&self, s: &Subject, seq: Option<u64>) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Pid => out.push_str(&s.pid.to_string()),
                Piece::Host => out.push_str(&s.host),
                Piece::Rank => out.push_str(&s.rank.unwrap_or(0).to_string()),
                Piece::Env(n) => out.push_str(
                    s.env
                        .iter()
                        .find(|(k, _)| k == n)
                        .and_then(|(_, v)| v.as_deref())
                        .unwrap_or(""),
                ),
                // Filled in by `expand`.
                Piece::Seq => out.push_str(&seq.map_or_else(|| "%i".into(), |i| i.to_string())),
            }
        }
        out
    }

    /// The name for `s` before `%i` is chosen: equal keys share a file.
    pub fn key(&self, s: &Subject) -> String {
        self.render(s, None)
    }

    /// The path for `s`: `%i` the lowest positive integer for which `taken` says no.
    pub fn expand(&self, s: &Subject, taken: &dyn Fn(&Path) -> bool) -> PathBuf {
        if !self.has_seq() {
            return PathBuf::from(self.render(s, None));
        }
        let mut i = 1;
        loop {
            let p = PathBuf::from(self.render(s, Some(i)));
            if !taken(&p) || i == u64::MAX {
                return p;
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Subject {
        Subject {
            pid: 4242,
            host: "node7".into(),
            rank: Some(3),
            env: vec![
                ("SLURM_JOB_ID".into(), Some("991".into())),
                ("UNSET".into(), None),
            ],
        }
    }

    #[test]
    fn templates_expand_like_nsight_compute_and_rocprofv3() {
        let t = Template::parse("out/%h-%p-r%rank%-%q{SLURM_JOB_ID}%q{UNSET}-100%%.json").unwrap();
        assert!(t.per_process());
        assert_eq!(t.env_names(), vec!["SLURM_JOB_ID", "UNSET"]);
        assert_eq!(
            t.expand(&subject(), &|_| false),
            PathBuf::from("out/node7-4242-r3-991-100%.json")
        );
        let plain = Template::parse("r.csv").unwrap();
        assert!(!plain.per_process() && !plain.has_seq());
        assert_eq!(plain.expand(&subject(), &|_| true), PathBuf::from("r.csv"));
        // Without a rank: 0.
        let r = Template::parse("%rank%.json").unwrap();
        let s = Subject {
            rank: None,
            ..subject()
        };
        assert_eq!(r.expand(&s, &|_| false), PathBuf::from("0.json"));
    }

    #[test]
    fn seq_takes_the_lowest_free_number() {
        let t = Template::parse("rep%i.json").unwrap();
        assert!(t.has_seq() && !t.per_process());
        let taken = |p: &Path| p == Path::new("rep1.json") || p == Path::new("rep2.json");
        assert_eq!(t.expand(&subject(), &taken), PathBuf::from("rep3.json"));
        assert_eq!(t.key(&subject()), "rep%i.json");
    }

    #[test]
    fn a_bad_template_names_its_part() {
        let e = Template::parse("r-%x.json").unwrap_err();
        assert!(e.contains("%x.json") && e.contains("%rank%"), "{e}");
        assert!(Template::parse("%q{HOME").unwrap_err().contains("closing"));
        assert!(Template::parse("%q{}").unwrap_err().contains("no variable"));
        assert!(Template::parse("r%").is_err());
    }
}
