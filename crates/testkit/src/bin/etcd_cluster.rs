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

use clap::Parser;
use tuplekv_testkit::etcd::{Cluster, MEMBERS_MAX};

/// Members when `--members` is not given.
const MEMBERS_DEFAULT: usize = 3;

/// What the line announcing the cluster starts with (the URLs follow, comma-separated).
const URLS_PREFIX: &str = "etcd client urls: ";

/// The command line.
#[derive(Debug, PartialEq, Eq, Parser)]
#[command(
    name = "etcd_cluster",
    about = "Runs the test harness's local etcd cluster until SIGINT or SIGTERM."
)]
struct Args {
    /// Members of the cluster.
    #[arg(
        long,
        default_value_t = MEMBERS_DEFAULT,
        value_parser = members_in_range,
    )]
    members: usize,
    /// Also stop when standard input ends (a parent that dies takes the cluster with it).
    #[arg(long)]
    until_stdin_closes: bool,
}

/// `--members`: a number from 1 to [`MEMBERS_MAX`].
fn members_in_range(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if (1..=MEMBERS_MAX).contains(&n) => Ok(n),
        _ => Err(format!("a number from 1 to {MEMBERS_MAX}, not `{value}`")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
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
    // The harness reports a failed start by panicking with the reason; this process says it
    // as an error instead, so it silences the hook meanwhile (nothing else here panics).
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = Cluster::try_start(args.members);
    std::panic::set_hook(hook);
    let cluster = started?;
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

    fn parsed(line: &str) -> Result<(usize, bool), clap::error::ErrorKind> {
        let args = std::iter::once("etcd_cluster").chain(line.split_whitespace());
        Args::try_parse_from(args)
            .map(|a| (a.members, a.until_stdin_closes))
            .map_err(|e| e.kind())
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Args::command().debug_assert();
    }

    #[test]
    fn takes_one_to_seven_members_and_the_stdin_flag() {
        assert_eq!(parsed(""), Ok((MEMBERS_DEFAULT, false)));
        assert_eq!(parsed("--members 5 --until-stdin-closes"), Ok((5, true)));
        assert_eq!(parsed("--members=1"), Ok((1, false)));
        assert_eq!(
            parsed(&format!("--members {MEMBERS_MAX}")),
            Ok((MEMBERS_MAX, false))
        );
        assert_eq!(parsed("-h"), Err(clap::error::ErrorKind::DisplayHelp));
        for bad in [
            "--members",
            "--members 0",
            "--members 8",
            "--members x",
            "3",
            "--fast",
        ] {
            assert!(parsed(bad).is_err(), "{bad}");
        }
    }
}
