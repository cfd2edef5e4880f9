//! A local etcd cluster for tests and benches: `n` members of the installed `etcd` binary on
//! loopback ports, with data directories in a scratch directory, stopped (SIGKILL) and
//! removed when dropped, or by a watchdog shell once the test process exits (a cluster in
//! a `static` is never dropped).
//!
//! The members run with limits that fit tuplekv's (see [`MAX_TXN_OPS`] and
//! [`MAX_REQUEST_BYTES`]) and with revision-based auto-compaction, as a production cluster
//! for `tuplekv-etcd` should. A test that needs etcd and cannot find it fails with a message
//! saying what to install: it never skips.
//!
//! ```no_run
//! let cluster = tuplekv_testkit::etcd::Cluster::start(3);
//! let urls = cluster.client_urls();
//! let leader = cluster.leader();
//! cluster.kill(leader);
//! cluster.restart(leader);
//! # let _ = urls;
//! ```

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The environment variable naming the `etcd` binary; without it, `etcd` on the `PATH`.
pub const ETCD_BINARY_ENV: &str = "TUPLEKV_ETCD";

/// Most operations in one etcd transaction branch (`--max-txn-ops`): above tuplekv's
/// `MUTATIONS_MAX` + `CHECKS_MAX` plus a commit's marker and the reads of a failed commit's
/// `else` branch (etcd's default, 128, is far below).
pub const MAX_TXN_OPS: usize = 4096;

/// Largest request a member accepts (`--max-request-bytes`): a commit at tuplekv's
/// `TOTAL_MUTATION_SIZE_MAX` with its checks, envelopes and comparisons stays well below it
/// (etcd's default is 1.5 MiB).
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// How many revisions auto-compaction keeps (`--auto-compaction-mode revision`): a snapshot
/// older than that many commits may be compacted away, and its reads then fail.
pub const AUTO_COMPACTION_RETENTION: u64 = 10_000;

/// Longest wait for a member to report itself healthy after it starts.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How often readiness is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The watchdog: waits for process `$1` to end, then SIGKILLs every member whose pid file is
/// in directory `$2`, and removes the directory.
const WATCHDOG: &str = r#"while kill -0 "$1" 2>/dev/null; do sleep 0.5; done
for f in "$2"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
rm -rf "$2""#;

/// Longest wait for one answer of a member's HTTP endpoint.
const HTTP_TIMEOUT: Duration = Duration::from_secs(2);

/// Most members a cluster may have.
pub const MEMBERS_MAX: usize = 7;

/// One member: its ports, and its process while it runs.
struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    process: Option<Child>,
}

/// A running etcd cluster on loopback ports; dropping it kills every member and removes
/// their data.
pub struct Cluster {
    binary: PathBuf,
    dir: tempfile::TempDir,
    token: String,
    members: Mutex<Vec<Member>>,
    /// Kills the members once this process is gone, for a cluster that is never dropped
    /// (one held in a `static` for a whole test binary).
    watchdog: Option<Child>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("client_urls", &self.client_urls())
            .finish_non_exhaustive()
    }
}

/// The `etcd` binary to run.
///
/// # Panics
/// If there is none: the message says to install Debian's `etcd-server`.
pub fn etcd_binary() -> PathBuf {
    if let Some(path) = std::env::var_os(ETCD_BINARY_ENV) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{ETCD_BINARY_ENV}={} does not name a file: point it at an etcd binary, or unset \
             it and install Debian's etcd-server (apt-get install etcd-server)",
            path.display()
        );
        return path;
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("etcd"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "etcd is not installed: this test needs an etcd cluster. Install Debian's \
             etcd-server (apt-get install etcd-server), or set {ETCD_BINARY_ENV} to an etcd \
             binary (3.4 or later)"
        )
    })
}

/// How many ports below the kernel's ephemeral range members are given ports from.
const PORT_SPAN: u16 = 12_000;

/// The fewest ports below the ephemeral range worth drawing from; with fewer (a range that
/// starts near 1024), members take any port the kernel gives.
const PORT_SPAN_MIN: u16 = 1000;

/// How many random ports [`free_port`] tries before it takes any the kernel gives.
const PORT_TRIES: usize = 100;

/// How many times [`Cluster::start`] starts the members again on new ports when one finds
/// its port taken.
const START_ATTEMPTS: usize = 3;

/// The first port of the kernel's ephemeral range (what `bind` to port 0 and outgoing
/// connections take ports from), 32768 when it cannot be read.
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A port on 127.0.0.1 that was free a moment ago, below the ephemeral range: a port from
/// `bind(0)` could be handed to another socket (an outgoing connection of any test, another
/// server started on port 0) between this check and etcd's own bind, or after a member is
/// killed and before it is restarted on the same port; one below the range cannot.
fn free_port() -> SocketAddr {
    static DRAWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let high = ephemeral_start();
    let low = high.saturating_sub(PORT_SPAN).max(1024);
    if high.saturating_sub(low) < PORT_SPAN_MIN {
        // The ephemeral range starts too low to leave room below it: any port, then.
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free loopback port for etcd");
        return listener.local_addr().expect("the listener's address");
    }
    let seed = u64::from(std::process::id()) << 32
        ^ DRAWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::from(d.subsec_nanos()));
    let mut rng = crate::rng::SplitMix64::new(seed);
    for _ in 0..PORT_TRIES {
        let port = low + u16::try_from(rng.below(u64::from(high - low))).unwrap_or(0);
        if let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            return listener.local_addr().expect("the listener's address");
        }
    }
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free loopback port for etcd");
    listener.local_addr().expect("the listener's address")
}

impl Cluster {
    /// Starts a cluster of `members` members and waits until each reports itself healthy.
    ///
    /// # Panics
    /// If etcd is not installed, `members` is 0 or over [`MEMBERS_MAX`], or a member is not
    /// healthy within [`READY_TIMEOUT`] (the message holds the end of its log).
    pub fn start(members: usize) -> Cluster {
        assert!(
            (1..=MEMBERS_MAX).contains(&members),
            "a cluster has 1 to {MEMBERS_MAX} members, not {members}"
        );
        let binary = etcd_binary();
        let dir = tempfile::tempdir().expect("a scratch directory for etcd's data");
        let members: Vec<Member> = (0..members)
            .map(|i| Member {
                name: format!("m{i}"),
                client: free_port(),
                peer: free_port(),
                process: None,
            })
            .collect();
        let token = format!(
            "tuplekv-test-{}-{}",
            std::process::id(),
            dir.path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        );
        let watchdog = Command::new("sh")
            .args(["-c", WATCHDOG, "tuplekv-etcd-watchdog"])
            .arg(std::process::id().to_string())
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        let cluster = Cluster {
            binary,
            dir,
            token,
            members: Mutex::new(members),
            watchdog,
        };
        let count = cluster.members().len();
        for attempt in 1..=START_ATTEMPTS {
            for i in 0..count {
                cluster.spawn(i, "new");
            }
            match (0..count).try_for_each(|i| cluster.try_wait_healthy(i)) {
                Ok(()) => return cluster,
                // Another process took a port between our check and etcd's bind: start
                // afresh on new ports.
                Err(e) if e.contains("address already in use") && attempt < START_ATTEMPTS => {
                    cluster.reset_on_new_ports();
                }
                Err(e) => panic!("{e}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Kills every member, removes their data and logs, and gives them new ports.
    fn reset_on_new_ports(&self) {
        let mut members = self.members();
        for member in members.iter_mut() {
            if let Some(mut child) = member.process.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            let _ = std::fs::remove_dir_all(self.dir.path().join(&member.name));
            let _ = std::fs::remove_file(self.log_path(&member.name));
            let _ = std::fs::remove_file(self.pid_path(&member.name));
            member.client = free_port();
            member.peer = free_port();
        }
    }

    fn members(&self) -> std::sync::MutexGuard<'_, Vec<Member>> {
        self.members.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`Cluster::start`] for the processes that run a cluster outside a test (the bench
    /// orchestrator, the `etcd_cluster` launcher): the reason it did not start (etcd missing,
    /// a member that does not become healthy, a member count out of range) is an error, not a
    /// panic. The panic hook is left as it is (swapping it would silence other threads'
    /// panics meanwhile), so the reason is also printed as the harness's panic.
    ///
    /// # Errors
    /// The message [`Cluster::start`] would have panicked with.
    pub fn try_start(members: usize) -> Result<Cluster, String> {
        std::panic::catch_unwind(move || Cluster::start(members)).map_err(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "the etcd cluster did not start".to_owned())
        })
    }

    /// The client URLs of every member (`http://127.0.0.1:PORT`), in member order.
    pub fn client_urls(&self) -> Vec<String> {
        self.members()
            .iter()
            .map(|m| format!("http://{}", m.client))
            .collect()
    }

    /// How many members the cluster has (running or not).
    pub fn len(&self) -> usize {
        self.members().len()
    }

    /// Whether the cluster has no members (never: [`Cluster::start`] refuses 0).
    pub fn is_empty(&self) -> bool {
        self.members().is_empty()
    }

    fn pid_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.pid"))
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    fn initial_cluster(members: &[Member]) -> String {
        members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts member `i`'s process (`state`: `new` at first, `existing` on a restart).
    fn spawn(&self, i: usize, state: &str) {
        let mut members = self.members();
        let initial = Self::initial_cluster(&members);
        let member = members.get_mut(i).expect("a member of the cluster");
        assert!(member.process.is_none(), "member {i} is already running");
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path(&member.name))
            .expect("etcd's log file");
        let log_err = log.try_clone().expect("etcd's log file");
        let client = format!("http://{}", member.client);
        let peer = format!("http://{}", member.peer);
        let data = self.dir.path().join(&member.name);
        let child = Command::new(&self.binary)
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-token", &self.token])
            .args(["--initial-cluster-state", state])
            .args(["--max-txn-ops", &MAX_TXN_OPS.to_string()])
            .args(["--max-request-bytes", &MAX_REQUEST_BYTES.to_string()])
            .args(["--auto-compaction-mode", "revision"])
            .args([
                "--auto-compaction-retention",
                &AUTO_COMPACTION_RETENTION.to_string(),
            ])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {}: {e}", self.binary.display()));
        let _ = std::fs::write(self.pid_path(&member.name), child.id().to_string());
        member.process = Some(child);
    }

    /// Waits until member `i` answers its health endpoint with `"health":"true"`.
    ///
    /// # Panics
    /// As [`Cluster::try_wait_healthy`] fails.
    fn wait_healthy(&self, i: usize) {
        if let Err(e) = self.try_wait_healthy(i) {
            panic!("{e}");
        }
    }

    /// [`Cluster::wait_healthy`], saying why instead of panicking: the member exited (with
    /// the end of its log) or was not healthy within [`READY_TIMEOUT`].
    fn try_wait_healthy(&self, i: usize) -> Result<(), String> {
        let (name, client) = {
            let members = self.members();
            let m = members.get(i).expect("a member of the cluster");
            (m.name.clone(), m.client)
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.exit_status(i) {
                return Err(format!(
                    "etcd member {name} exited ({status}) before it was healthy; its log \
                     ends:\n{}",
                    self.log_tail(&name)
                ));
            }
            if http(client, "GET", "/health", None).is_some_and(|b| b.contains("\"true\"")) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "etcd member {name} at {client} was not healthy within {READY_TIMEOUT:?}; \
                     its log ends:\n{}",
                    self.log_tail(&name)
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn exit_status(&self, i: usize) -> Option<std::process::ExitStatus> {
        let mut members = self.members();
        let process = members.get_mut(i)?.process.as_mut()?;
        process.try_wait().ok().flatten()
    }

    fn log_tail(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.log_path(name)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Kills member `i` with SIGKILL and waits for it to exit; its data stays for a
    /// [`Cluster::restart`].
    ///
    /// # Panics
    /// If `i` is not a running member.
    pub fn kill(&self, i: usize) {
        let mut members = self.members();
        let member = members.get_mut(i).expect("a member of the cluster");
        let mut child = member
            .process
            .take()
            .unwrap_or_else(|| panic!("member {i} is not running"));
        // `Child::kill` is SIGKILL on Unix: no graceful shutdown, as a crash.
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(self.pid_path(&member.name));
    }

    /// Restarts member `i` (killed before) on its data and ports, and waits until it is
    /// healthy.
    ///
    /// # Panics
    /// As [`Cluster::start`], or if the member is running.
    pub fn restart(&self, i: usize) {
        self.spawn(i, "existing");
        self.wait_healthy(i);
    }

    /// The index of the member that is the leader now, asked of the running members.
    ///
    /// # Panics
    /// If no running member names a leader that is a running member within
    /// [`READY_TIMEOUT`].
    pub fn leader(&self) -> usize {
        self.leader_within(READY_TIMEOUT).unwrap_or_else(|| {
            panic!("no etcd member reported itself leader within {READY_TIMEOUT:?}")
        })
    }

    /// The index of the leader, asked of the running members until one names a running
    /// member, or `None` once `timeout` has passed (for callers that report it as an error).
    pub fn leader_within(&self, timeout: Duration) -> Option<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.try_leader() {
                return Some(i);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn try_leader(&self) -> Option<usize> {
        let running: Vec<(usize, SocketAddr)> = self
            .members()
            .iter()
            .enumerate()
            .filter(|(_, m)| m.process.is_some())
            .map(|(i, m)| (i, m.client))
            .collect();
        running.into_iter().find_map(|(i, client)| {
            let body = http(client, "POST", "/v3/maintenance/status", Some("{}"))?;
            let status: serde_json::Value = serde_json::from_str(&body).ok()?;
            let member = status.pointer("/header/member_id")?;
            let leader = status.get("leader")?;
            (member == leader).then_some(i)
        })
    }

    /// Compacts the history of the cluster up to its current revision (physically), as
    /// auto-compaction does later: reads of a snapshot older than now fail afterwards.
    /// Returns the revision compacted to.
    ///
    /// # Panics
    /// If no running member answers.
    pub fn compact(&self) -> i64 {
        let clients: Vec<SocketAddr> = self
            .members()
            .iter()
            .filter(|m| m.process.is_some())
            .map(|m| m.client)
            .collect();
        for client in clients {
            let Some(body) = http(client, "POST", "/v3/kv/range", Some(r#"{"key":"AA=="}"#)) else {
                continue;
            };
            let Some(revision) = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.pointer("/header/revision")?.as_str()?.parse::<i64>().ok())
            else {
                continue;
            };
            let request = format!(r#"{{"revision":"{revision}","physical":true}}"#);
            if http(client, "POST", "/v3/kv/compaction", Some(&request)).is_some() {
                return revision;
            }
        }
        panic!("no etcd member answered a compaction")
    }

    /// The cluster's scratch directory (data directories and logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for member in self.members().iter_mut() {
            if let Some(mut child) = member.process.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// One HTTP/1.0 request to a member's client port; the body of a 200 answer, or `None`.
fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT)).ok()?;
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_owned())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ports_come_from_below_the_ephemeral_range() {
        let start = ephemeral_start();
        if start < 1024 + PORT_SPAN_MIN {
            // No room below the range on this machine: members take any port (by design).
            return;
        }
        for _ in 0..20 {
            let port = free_port().port();
            assert!(port < start && port >= 1024, "{port} vs {start}");
        }
    }

    #[test]
    fn a_cluster_starts_elects_a_leader_and_survives_losing_it() {
        let cluster = Cluster::start(3);
        assert_eq!(cluster.client_urls().len(), 3);
        let leader = cluster.leader();
        cluster.kill(leader);
        let next = cluster.leader();
        assert_ne!(next, leader, "a killed member cannot lead");
        cluster.restart(leader);
        let _ = cluster.leader();
        assert!(cluster.compact() > 0);
    }
}
