//! `etcd_cluster`: runs the test harness's local etcd cluster
//! ([`tuplekv_testkit::etcd::Cluster`], with its flags and limits) as a process of its own,
//! for `cargo xtask etcd-cluster` (a user trying `tuplekv serve --etcd`) and
//! `cargo xtask conformance --etcd`.
//!
//! ```text
//! etcd_cluster [--members N] [--until-stdin-closes]
//! ```
//!
//! Once every member is healthy it prints one line, `etcd client urls: URL,URL,...`, then
//! runs until SIGINT or SIGTERM (or, with `--until-stdin-closes`, until its standard input
//! ends: a parent that dies takes the cluster with it), stops every member and removes their
//! data.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::mpsc;

use tuplekv_testkit::etcd::{Cluster, MEMBERS_MAX};

/// Members when `--members` is not given.
const MEMBERS_DEFAULT: usize = 3;

/// What the line announcing the cluster starts with (the URLs follow, comma-separated).
const URLS_PREFIX: &str = "etcd client urls: ";

/// The command's usage, printed with `--help` and after a bad argument.
const USAGE: &str = "usage: etcd_cluster [--members N] [--until-stdin-closes]";

/// The parsed arguments.
struct Args {
    members: usize,
    until_stdin_closes: bool,
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let mut out = Args {
        members: MEMBERS_DEFAULT,
        until_stdin_closes: false,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (arg.as_str(), None),
        };
        match flag {
            "-h" | "--help" => return Ok(None),
            "--members" => {
                let value = inline
                    .or_else(|| args.next().cloned())
                    .ok_or("`--members` needs a value")?;
                out.members = match value.parse::<usize>() {
                    Ok(n) if (1..=MEMBERS_MAX).contains(&n) => n,
                    _ => {
                        return Err(format!(
                            "`--members` takes a number from 1 to {MEMBERS_MAX}, not `{value}`"
                        ));
                    }
                };
            }
            "--until-stdin-closes" => out.until_stdin_closes = true,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(Some(out))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&args) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("etcd_cluster: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("etcd_cluster: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let (stop_tx, stop_rx) = mpsc::channel::<&'static str>();
    // Watched before the cluster starts: a signal sent while it starts still stops it
    // cleanly (members that got the terminal's SIGINT too are gone already; the rest are
    // killed, and the data removed, when the cluster is dropped).
    let signals = watch_signals(stop_tx.clone())?;
    let members = args.members;
    // The harness reports a failed start (etcd missing, a member that does not become
    // healthy) by panicking with the reason; say it as an error instead (the default hook
    // would print it as a crash first).
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = std::panic::catch_unwind(move || Cluster::start(members));
    std::panic::set_hook(hook);
    let cluster = started.map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "the etcd cluster did not start".to_owned())
    })?;
    if let Ok(reason) = stop_rx.try_recv() {
        drop(cluster);
        return Err(format!("stopped by {reason} while the cluster started"));
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{URLS_PREFIX}{}", cluster.client_urls().join(","))
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write to stdout: {e}"))?;
    drop(stdout);
    if args.until_stdin_closes {
        std::thread::spawn(move || {
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin().lock();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = stop_tx.send("the end of standard input");
        });
    }
    let reason = stop_rx.recv().unwrap_or("a lost signal watcher");
    eprintln!("etcd_cluster: {reason}: stopping the cluster");
    drop(cluster);
    drop(signals);
    eprintln!("etcd_cluster: stopped, data removed");
    Ok(())
}

/// Sends the name of the first SIGINT or SIGTERM to `stop`; the handlers are installed when
/// this returns. The returned runtime runs the watcher.
fn watch_signals(stop: mpsc::Sender<&'static str>) -> Result<tokio::runtime::Runtime, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime for the signal handlers: {e}"))?;
    let _entered = runtime.enter();
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    let mut int =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot watch SIGINT: {e}"))?;
    runtime.spawn(async move {
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        let _ = stop.send(which);
    });
    Ok(runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> Result<Option<(usize, bool)>, String> {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        parse(&args).map(|a| a.map(|a| (a.members, a.until_stdin_closes)))
    }

    #[test]
    fn parses_arguments() {
        assert_eq!(parsed(""), Ok(Some((MEMBERS_DEFAULT, false))));
        assert_eq!(
            parsed("--members 5 --until-stdin-closes"),
            Ok(Some((5, true)))
        );
        assert_eq!(parsed("--members=1"), Ok(Some((1, false))));
        assert_eq!(parsed("-h"), Ok(None));
        for bad in [
            "--members",
            "--members 0",
            "--members 8",
            "--members x",
            "3",
        ] {
            assert!(parsed(bad).is_err(), "{bad}");
        }
    }
}
