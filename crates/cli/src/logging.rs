//! The server's logs on stderr: `--log-format text|json`, `--log-level LEVEL`, and the
//! transport crates kept quiet.
//!
//! The filter is `RUST_LOG` when it is set (and not empty): it names levels per crate, so it
//! wins over `--log-level`, which sets the one level of everything when `RUST_LOG` is unset
//! (default `info`). Either way, the HTTP crates (`h2`, `hyper`, `hyper_util`), which log every
//! frame at debug, stay at [`QUIET_LEVEL`] unless the filter names them itself (e.g.
//! `RUST_LOG=debug,h2=debug`).

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// The crates whose debug logs are the transport's frames, and the level they are held at
/// when the filter does not name them.
const QUIET_CRATES: [&str; 3] = ["h2", "hyper", "hyper_util"];
/// See [`QUIET_CRATES`].
pub(crate) const QUIET_LEVEL: &str = "info";

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// For people: one line per event, colored on a terminal.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields`), for log
    /// collectors.
    Json,
}

/// The level of `--log-level`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogLevel {
    /// Nothing.
    Off,
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// The default: what the server does (start, recovery, stop).
    #[default]
    Info,
    /// Each connection's end, and more.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    fn directive(self) -> &'static str {
        match self {
            LogLevel::Off => "off",
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// The filter's directives: `rust_log` if given and not blank, else `level`; then
/// `CRATE=info` for each of [`QUIET_CRATES`] that they do not name.
pub(crate) fn directives(rust_log: Option<&str>, level: LogLevel) -> String {
    let base = match rust_log.map(str::trim) {
        Some(given) if !given.is_empty() => given.to_owned(),
        _ => level.directive().to_owned(),
    };
    let named = |krate: &str| {
        base.split(',').any(|d| {
            let target = d.split(['=', '[']).next().unwrap_or_default().trim();
            target == krate || target.starts_with(&format!("{krate}::"))
        })
    };
    let mut out = base.clone();
    for krate in QUIET_CRATES.into_iter().filter(|k| !named(k)) {
        out.push_str(&format!(",{krate}={QUIET_LEVEL}"));
    }
    out
}

/// Installs the subscriber: stderr, in `format`, filtered as the module says.
///
/// # Errors
/// A `RUST_LOG` that is not a valid filter (nothing is logged then: the command stops).
pub(crate) fn init(format: LogFormat, level: LogLevel) -> Result<(), String> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = EnvFilter::try_new(directives(rust_log.as_deref(), level))
        .map_err(|e| format!("RUST_LOG is not a valid log filter: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // Another subscriber (a test's) may be installed already: keep it.
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_crates_stay_quiet_unless_the_filter_names_them() {
        assert_eq!(
            directives(None, LogLevel::Debug),
            "debug,h2=info,hyper=info,hyper_util=info"
        );
        assert_eq!(
            directives(Some("  "), LogLevel::Warn),
            "warn,h2=info,hyper=info,hyper_util=info",
            "a blank RUST_LOG is unset"
        );
        assert_eq!(
            directives(Some("trace,h2=debug,hyper::proto=trace"), LogLevel::Info),
            "trace,h2=debug,hyper::proto=trace,hyper_util=info",
            "RUST_LOG wins over --log-level, and names its own levels"
        );
        assert!(EnvFilter::try_new(directives(Some("warn"), LogLevel::Info)).is_ok());
    }
}
