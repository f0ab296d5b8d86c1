//! `kreplay capture --kernel-include P [--dispatch N | --launch-index K] [--out DIR]
//! [--max-bytes B] [--library PATH] -- APP ARGS...` (SPEC §13): runs the program exactly as
//! `kreplay run --tool verify --passes 2` does (the same preload, injection and variables),
//! with the capture armed through `replay_cuda::capture`'s variables. The chosen launch's
//! first pass is written to DIR (default `kreplay-capture`); the program runs and ends as it
//! would. Exit status: the program's when the folder was written, else 1 (and why).

use std::path::PathBuf;

use replay_cuda::capture as cap;

/// Options of `kreplay capture`.
#[derive(Debug, Clone, clap::Args)]
pub struct CaptureOpts {
    /// Capture only kernels whose name matches P (the policy's KREPLAY_KERNEL_INCLUDE).
    #[arg(long = "kernel-include", value_name = "P")]
    pub include: Option<String>,
    /// The dispatch of this id.
    #[arg(long, value_name = "N", conflicts_with = "launch_index")]
    pub dispatch: Option<u64>,
    /// The K-th (from 0) launch of a matching kernel [default: 0].
    #[arg(long = "launch-index", value_name = "K")]
    pub launch_index: Option<u64>,
    /// The capture folder (new, or empty) [default: kreplay-capture].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Bound on the captured bytes [default: 4 GiB].
    #[arg(long = "max-bytes", value_name = "B")]
    pub max_bytes: Option<u64>,
    /// libkernel_replay.so to preload [default: KREPLAY_LIBRARY, else beside kreplay].
    #[arg(long, value_name = "PATH")]
    pub library: Option<PathBuf>,
    /// The program and its arguments (after `--`).
    #[arg(value_name = "APP ARGS", trailing_var_arg = true, num_args = 0..)]
    pub app: Vec<String>,
}

/// Usage of `kreplay capture`.
pub const USAGE: &str = "usage: kreplay capture [--kernel-include P] [--dispatch N | --launch-index K] [--out DIR] [--max-bytes B] [--library PATH] -- APP ARGS...";

#[derive(Debug, clap::Parser)]
#[command(name = "kreplay capture", disable_help_flag = true)]
struct CaptureParser {
    #[command(flatten)]
    opts: CaptureOpts,
}

/// Environment variables set for the program: name and value.
type Vars = Vec<(&'static str, String)>;

/// The `kreplay run` arguments and capture variables `args` stand for.
pub fn plan(args: &[String]) -> Result<(Vec<String>, Vars), String> {
    use clap::Parser;
    let argv = std::iter::once("kreplay capture".to_owned()).chain(args.iter().cloned());
    let o = CaptureParser::try_parse_from(argv)
        .map_err(|e| {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("").to_owned();
            first.trim_start_matches("error: ").to_owned()
        })?
        .opts;
    if o.app.is_empty() {
        return Err("no program given (after --)".into());
    }
    let dir = o.out.unwrap_or_else(|| PathBuf::from("kreplay-capture"));
    if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(format!(
            "{}: exists and is not empty; a capture is never written over another",
            dir.display()
        ));
    }
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    let mut run = vec![
        "--tool".into(),
        "verify".into(),
        "--passes".into(),
        "2".into(),
    ];
    if let Some(p) = o.include {
        run.extend(["--kernel-include".into(), p]);
    }
    if let Some(l) = o.library {
        run.extend(["--library".into(), l.to_string_lossy().into_owned()]);
    }
    run.push("--".into());
    run.extend(o.app);
    let mut env = vec![(cap::DIR_ENV, dir.to_string_lossy().into_owned())];
    if let Some(n) = o.dispatch {
        env.push((cap::DISPATCH_ENV, n.to_string()));
    }
    if let Some(k) = o.launch_index {
        env.push((cap::LAUNCH_INDEX_ENV, k.to_string()));
    }
    if let Some(b) = o.max_bytes {
        env.push((cap::MAX_BYTES_ENV, b.to_string()));
    }
    // What the library will read must parse (it would otherwise only log it in the program).
    cap::CaptureConfig::from_lookup(|v| env.iter().find(|(n, _)| *n == v).map(|(_, s)| s.clone()))
        .map_err(|e| e.to_string())?;
    Ok((run, env))
}

/// Runs `kreplay capture ARGS`; returns the exit status.
pub fn main(args: &[String]) -> u8 {
    let (run, env) = match plan(args) {
        Ok(p) => p,
        Err(e) => {
            crate::say(format_args!("kreplay capture: {e}\n{USAGE}"));
            return 2;
        }
    };
    let dir = PathBuf::from(&env[0].1);
    // The folder is written beside itself and renamed into place: its parent must exist.
    if let Some(parent) = dir.parent() {
        if let Err(e) = std::fs::create_dir_all(parent) {
            crate::say(format_args!(
                "kreplay capture: cannot make {}: {e}; the program was not started",
                parent.display()
            ));
            return 1;
        }
    }
    let refused = cap::refusal_file(&dir);
    let _ = std::fs::remove_file(&refused);
    let code = crate::run::main_with_env(&run, &env);
    if dir.join(replay_capture::MANIFEST).is_file() {
        crate::say(format_args!("kreplay capture: wrote {}", dir.display()));
        return code;
    }
    match std::fs::read_to_string(&refused) {
        Ok(why) => {
            let _ = std::fs::remove_file(&refused);
            crate::say(format_args!(
                "kreplay capture: nothing captured: {}",
                why.trim_end()
            ));
        }
        Err(_) => crate::say(format_args!(
            "kreplay capture: nothing captured: no launch matched (or none reached the window); the program exited with status {code}"
        )),
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn capture_options_become_run_arguments_and_capture_variables() {
        let dir = std::env::temp_dir().join(format!("kreplay-capture-plan-{}", std::process::id()));
        let (run, env) = plan(&s(&[
            "--kernel-include",
            "gemm",
            "--launch-index",
            "3",
            "--out",
            dir.to_str().unwrap(),
            "--",
            "./app",
            "-x",
        ]))
        .unwrap();
        assert_eq!(
            run,
            s(&[
                "--tool",
                "verify",
                "--passes",
                "2",
                "--kernel-include",
                "gemm",
                "--",
                "./app",
                "-x"
            ])
        );
        assert_eq!(env[0], (cap::DIR_ENV, dir.to_string_lossy().into_owned()));
        assert!(env.contains(&(cap::LAUNCH_INDEX_ENV, "3".into())));
        assert!(plan(&s(&["--dispatch", "1", "--launch-index", "2", "--", "a"])).is_err());
        assert!(plan(&s(&["--dispatch", "x", "--", "a"])).is_err());
        let e = plan(&s(&["--out", "d"])).unwrap_err();
        assert!(e.contains("no program"), "{e}");
    }
}
