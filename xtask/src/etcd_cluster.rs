//! `cargo xtask etcd-cluster`: a local etcd cluster on loopback ports for a user trying
//! `tuplekv serve --etcd`, and the cluster `conformance --etcd` runs its scripts on.
//!
//! The cluster is the test harness's (`tuplekv_testkit::etcd::Cluster`, with its flags and
//! limits), run as a process of its own by testkit's `etcd_cluster` binary: xtask uses only
//! std and anyhow, so it does not link the harness. The binary is told to stop when its
//! standard input ends, which xtask holds: however xtask ends (Ctrl-C included), the cluster
//! stops with it and its data is removed.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cmd;
use crate::server_process::wait_with_deadline;

/// Help for `cargo xtask etcd-cluster`.
pub(crate) const ABOUT: &str = "\
Starts a local etcd cluster of N members (default 3, at most 7) on free 127.0.0.1 ports, with
the flags tuplekv needs (the test harness's: --max-txn-ops, --max-request-bytes, revision
auto-compaction), data in a scratch directory. Prints the client URLs and a
`tuplekv serve --etcd ...` line to copy, then runs until Ctrl-C, which stops every member
and removes the data. Needs `etcd` on the PATH (Debian: apt-get install etcd-server) or
TUPLEKV_ETCD naming the binary.";

/// Members when `--members` is not given.
pub(crate) const MEMBERS_DEFAULT: usize = 3;
/// Most members (the harness's own limit).
const MEMBERS_MAX: usize = 7;
/// How long the cluster may take to start (the harness waits up to 60 s per member).
const START_TIMEOUT: Duration = Duration::from_secs(240);
/// How long the cluster may take to stop once asked.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// The line the `etcd_cluster` binary announces the cluster with, before the URLs.
const URLS_PREFIX: &str = "etcd client urls: ";
/// The testkit binary that runs the cluster.
const CLUSTER_BIN: &str = "etcd_cluster";

/// Options of `cargo xtask etcd-cluster`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub(crate) struct EtcdClusterArgs {
    /// Members of the cluster.
    #[arg(
        long,
        default_value_t = MEMBERS_DEFAULT,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MEMBERS_MAX as u64),
    )]
    pub(crate) members: usize,
}

/// Runs `cargo xtask etcd-cluster`: until Ctrl-C (or until the cluster process ends).
pub(crate) fn run(members: usize) -> Result<()> {
    let mut cluster = EtcdCluster::start(members)?;
    let urls = cluster.urls().join(",");
    println!("etcd cluster of {members} member(s) running; client URLs:");
    for url in cluster.urls() {
        println!("    {url}");
    }
    println!();
    println!("Serve tuplekv on it (any number of servers, each on its own --addr):");
    println!(
        "    TUPLEKV_ACCESS_TOKEN=change-me-please cargo run -p tuplekv-cli -- serve --etcd {urls}"
    );
    println!();
    println!("Ctrl-C stops the cluster and removes its data.");
    // Ctrl-C reaches the cluster process too (same process group): it stops the members,
    // removes their data and exits 0. Where xtask outlives the signal, say so and end.
    let status = cluster
        .child
        .wait()
        .context("waiting for the cluster process")?;
    if !status.success() {
        bail!("the cluster process failed ({status})");
    }
    eprintln!("xtask: the etcd cluster stopped");
    Ok(())
}

/// A cluster run by testkit's `etcd_cluster` binary; stopped by [`EtcdCluster::stop`], or
/// when dropped.
pub(crate) struct EtcdCluster {
    child: Child,
    /// The binary's standard input, held apart from `child` (whose `wait` would close it):
    /// closing it stops the cluster.
    stdin: Option<ChildStdin>,
    urls: Vec<String>,
}

impl EtcdCluster {
    /// Builds the `etcd_cluster` binary, starts a cluster of `members` and waits until every
    /// member is healthy.
    pub(crate) fn start(members: usize) -> Result<EtcdCluster> {
        let binary = cluster_binary()?;
        let mut command = Command::new(&binary);
        command
            .args(["--members", &members.to_string(), "--until-stdin-closes"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        eprintln!("$ {}", cmd::display(&command));
        let mut child = command
            .spawn()
            .with_context(|| format!("could not start {}", binary.display()))?;
        let stdout = child
            .stdout
            .take()
            .context("the cluster's stdout was not captured")?;
        let stdin = child.stdin.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match line.strip_prefix(URLS_PREFIX) {
                    Some(urls) if !sent => {
                        let _ = tx.send(urls.split(',').map(str::to_owned).collect::<Vec<_>>());
                        sent = true;
                    }
                    _ => eprintln!("[etcd_cluster] {line}"),
                }
            }
        });
        let mut cluster = EtcdCluster {
            child,
            stdin,
            urls: Vec::new(),
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(urls) => cluster.urls = urls,
            Err(_) => {
                let status = cluster.child.try_wait()?;
                bail!(
                    "the etcd cluster did not start within {START_TIMEOUT:?} (exit status of \
                     {CLUSTER_BIN}: {status:?}; its reason is above)"
                );
            }
        }
        Ok(cluster)
    }

    /// The members' client URLs.
    pub(crate) fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Stops every member (by closing the binary's standard input) and waits until the data
    /// is removed, killing the binary after [`STOP_TIMEOUT`] (its members then die with
    /// the harness's watchdog).
    pub(crate) fn stop(mut self) -> Result<()> {
        drop(self.stdin.take());
        if wait_with_deadline(&mut self.child, STOP_TIMEOUT)?.is_none() {
            eprintln!("xtask: {CLUSTER_BIN} did not stop within {STOP_TIMEOUT:?}; killing it");
            self.child.kill().context("killing the cluster process")?;
            self.child
                .wait()
                .context("waiting for the cluster process")?;
        }
        Ok(())
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        // Closing stdin asks the binary to stop; give it the time to do so.
        drop(self.stdin.take());
        if matches!(wait_with_deadline(&mut self.child, STOP_TIMEOUT), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// testkit's `etcd_cluster` binary, built with `cargo build -p tuplekv-testkit`.
fn cluster_binary() -> Result<PathBuf> {
    cmd::run(cmd::cargo().args(["build", "-p", "tuplekv-testkit", "--bin", CLUSTER_BIN]))?;
    let binary = cmd::target_dir().join("debug").join(CLUSTER_BIN);
    if !binary.is_file() {
        bail!("cargo built no {}", binary.display());
    }
    Ok(binary)
}
