//! For a launcher (`kreplay run`): the termination signals it receives passed on to the
//! process group of the program it started (SPEC §9.2 "Unmodified applications"), so a
//! scheduler's or `timeout`'s SIGINT or SIGTERM stops the program, not only its launcher,
//! and the launcher lives on to wait for it and write the report of what ran.
//!
//! Where this process owns the terminal, the terminal is handed to the program's group
//! while it runs ([`give_terminal`]), so it reads its input and gets Ctrl-C as it would
//! without a launcher. Linux only (the signal numbers are Linux's). The handler is async-signal-safe: it only
//! reads and stores atomics and calls `kill(2)`.

use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};

/// The signals passed on: number and name.
pub const FORWARDED: [(i32, &str); 4] = [
    (2, "SIGINT"),
    (15, "SIGTERM"),
    (1, "SIGHUP"),
    (3, "SIGQUIT"),
];

static GROUP: AtomicI32 = AtomicI32::new(0);
static LAST: AtomicI32 = AtomicI32::new(0);

extern "C" {
    fn signal(sig: c_int, handler: usize) -> usize;
    fn kill(pid: c_int, sig: c_int) -> c_int;
    fn isatty(fd: c_int) -> c_int;
    fn tcgetpgrp(fd: c_int) -> c_int;
    fn tcsetpgrp(fd: c_int, pgrp: c_int) -> c_int;
    fn getpgrp() -> c_int;
}

const SIG_IGN: usize = 1;
const SIGTTOU: c_int = 22;
const SIGCONT: i32 = 18;

/// The terminal handed to the program's process group; dropping it takes the terminal back.
#[derive(Debug)]
pub struct Terminal {
    ours: c_int,
}

/// When standard input is the terminal and this process owns it (the foreground), hands it to
/// process group `pgid`, so the program, started in a group of its own, can still read it
/// and gets the terminal's Ctrl-C itself; `None` otherwise. A program stopped for reading
/// before it got the terminal is continued.
pub fn give_terminal(pgid: u32) -> Option<Terminal> {
    let g = i32::try_from(pgid).ok().filter(|g| *g > 0)?;
    // SAFETY: plain queries of file descriptor 0 and of this process.
    let (tty, fg, ours) = unsafe { (isatty(0) == 1, tcgetpgrp(0), getpgrp()) };
    if !tty || fg != ours {
        return None;
    }
    // SAFETY: SIGTTOU ignored while the terminal changes hands (a background group calling
    // tcsetpgrp would be stopped by it); then handed over, and the group continued.
    unsafe {
        let before = signal(SIGTTOU, SIG_IGN);
        let handed = tcsetpgrp(0, g) == 0;
        signal(SIGTTOU, before);
        if !handed {
            return None;
        }
        kill(-g, SIGCONT);
    }
    Some(Terminal { ours })
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // SAFETY: as in `give_terminal`: the terminal taken back with SIGTTOU ignored.
        unsafe {
            let before = signal(SIGTTOU, SIG_IGN);
            tcsetpgrp(0, self.ours);
            signal(SIGTTOU, before);
        }
    }
}

extern "C" fn forward(sig: c_int) {
    LAST.store(sig, Ordering::SeqCst);
    let g = GROUP.load(Ordering::SeqCst);
    if g > 0 {
        // SAFETY: kill(2) is async-signal-safe; a negative pid names the process group.
        unsafe { kill(-g, sig) };
    }
}

/// Installs the handlers (before the program starts, so a signal in between is not lost:
/// it is kept and passed on by [`forward_to_group`]).
pub fn catch() {
    for (s, _) in FORWARDED {
        // SAFETY: `forward` is an `extern "C" fn(c_int)` that only touches atomics and calls
        // kill(2); glibc's signal() keeps it installed and restarts interrupted calls.
        unsafe { signal(s, forward as extern "C" fn(c_int) as usize) };
    }
}

/// From now on the caught signals go to process group `pgid` (the program's, started with
/// its own group); one caught before is passed on now.
pub fn forward_to_group(pgid: u32) {
    let Ok(g) = i32::try_from(pgid) else { return };
    GROUP.store(g, Ordering::SeqCst);
    let pending = LAST.load(Ordering::SeqCst);
    if pending != 0 {
        send_group(pgid, pending);
    }
}

/// Sends `sig` to process group `pgid`; `false` when it could not be sent.
pub fn send_group(pgid: u32, sig: i32) -> bool {
    let Ok(g) = i32::try_from(pgid) else {
        return false;
    };
    if g <= 0 {
        return false;
    }
    // SAFETY: kill(2) with a negative pid (a process group) and a signal number.
    unsafe { kill(-g, sig) == 0 }
}

/// The last signal caught, if any.
pub fn caught() -> Option<i32> {
    match LAST.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// A signal's name (`SIGSEGV`), or `signal N`.
pub fn name(sig: i32) -> String {
    let n = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return format!("signal {sig}"),
    };
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named() {
        assert_eq!(name(11), "SIGSEGV");
        assert_eq!(name(2), "SIGINT");
        assert_eq!(name(64), "signal 64");
        assert!(!send_group(0, 15), "group 0 is never signalled");
    }
}
