//! The default log sink (SPEC §8): the CLI and the C ABI install it so a tool that routes
//! nothing still sees the `[kernel-replay]` lines; an embedding tool that installs its own
//! `log` logger first keeps it.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::policy::LogLevel;

struct StderrSink {
    level: AtomicU8,
}

static SINK: StderrSink = StderrSink {
    level: AtomicU8::new(3),
};

static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this stderr sink is the process's logger.
pub fn is_installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

fn to_u8(l: log::LevelFilter) -> u8 {
    l as u8
}

impl log::Log for StderrSink {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        (metadata.level() as u8) <= self.level.load(Ordering::Relaxed)
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let msg = record.args().to_string();
        let mut err = std::io::stderr().lock();
        // Outcome lines already carry the prefix; other messages get level and prefix.
        let _ = if msg.starts_with("[kernel-replay]") && record.level() == log::Level::Info {
            writeln!(err, "{msg}")
        } else if msg.starts_with("[kernel-replay]") {
            writeln!(
                err,
                "{}: {msg}",
                record.level().as_str().to_ascii_lowercase()
            )
        } else {
            writeln!(
                err,
                "[kernel-replay] {}: {msg}",
                record.level().as_str().to_ascii_lowercase()
            )
        };
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// Installs the stderr sink at `level`. Returns `false` when another logger was installed
/// first (the embedding tool's); the level is then left to that tool.
pub fn install(level: LogLevel) -> bool {
    SINK.level
        .store(to_u8(level.to_filter()), Ordering::Relaxed);
    let installed = log::set_logger(&SINK).is_ok();
    if installed {
        INSTALLED.store(true, Ordering::Relaxed);
        log::set_max_level(level.to_filter());
    }
    installed
}

/// Changes the sink's level after installation.
pub fn set_level(level: LogLevel) {
    SINK.level
        .store(to_u8(level.to_filter()), Ordering::Relaxed);
    log::set_max_level(level.to_filter());
}
