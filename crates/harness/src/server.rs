//! One KV Connect server process for the tasks that drive real clients (`conformance`,
//! `bench server`): `tuplekv serve` or denokv started on a free 127.0.0.1 port with an access
//! token and a scratch directory, waited for until it listens, and stopped with SIGTERM, then
//! killed if it is still running after [`STOP_TIMEOUT`].
//!
//! `tuplekv serve` is told to bind port 0 and announces its address on standard output
//! (`listening on ADDR`); denokv cannot pick a port, so it gets one that was free a moment ago
//! and is polled until it accepts connections.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};

use crate::cmd;

/// How long a server may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to exit after SIGTERM before it is killed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// How long one connection attempt to a starting denokv may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);
/// The pause between two polls of a starting or stopping process.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// The line `tuplekv serve` prints once it listens, before the address.
const LISTENING_PREFIX: &str = "listening on ";
/// Random bytes in an access token; hex-encoded it is 32 characters (servers want ≥ 12).
pub const TOKEN_BYTES: usize = 16;
/// How many lines of a server's log a start failure shows.
pub const LOG_TAIL_LINES: usize = 20;
/// What the echoed command line shows in place of the access token.
const TOKEN_SHOWN: &str = "<token>";

/// Where a server's standard error goes.
#[derive(Debug, Clone)]
pub enum Stderr {
    /// Ours: the server's messages show up among the task's.
    Inherit,
    /// This file (created or truncated); its last lines are shown if the server fails to start.
    Log(PathBuf),
}

/// How to learn that a server listens.
enum Listen {
    /// Read the `listening on ADDR` line from its standard output.
    Line(ChildStdout),
    /// Connect to this port until it accepts.
    Port(u16),
}

/// A running server, stopped by [`Running::stop`] (and killed if dropped while running).
pub struct Running {
    child: Child,
    addr: SocketAddr,
    name: &'static str,
}

impl Running {
    /// Starts `binary serve SERVE_ARGS --addr 127.0.0.1:0 --access-token TOKEN` and waits
    /// for its `listening on ADDR` line.
    pub fn tuplekv(
        binary: &Path,
        serve_args: &[OsString],
        token: &str,
        stderr: Stderr,
    ) -> Result<Running> {
        let mut command = Command::new(binary);
        command.arg("serve").args(serve_args).args([
            "--addr",
            "127.0.0.1:0",
            "--access-token",
            token,
        ]);
        let mut child = spawn(&mut command, Stdio::piped(), &stderr, token, "tuplekv")?;
        let stdout = child
            .stdout
            .take()
            .context("tuplekv's stdout was not captured")?;
        Running::wait(child, "tuplekv", Listen::Line(stdout), &stderr)
    }

    /// Starts denokv with its SQLite database in `scratch` on a free loopback port and waits
    /// until the port accepts connections.
    pub fn denokv(binary: &Path, scratch: &Path, token: &str, stderr: Stderr) -> Result<Running> {
        let port = free_port()?;
        let mut command = Command::new(binary);
        command
            .arg("--sqlite-path")
            .arg(scratch.join("db.sqlite"))
            .args(["serve", "--access-token", token, "--addr"])
            .arg(format!("127.0.0.1:{port}"));
        let child = spawn(&mut command, Stdio::null(), &stderr, token, "denokv")?;
        Running::wait(child, "denokv", Listen::Port(port), &stderr)
    }

    /// Waits until the spawned `child` listens; on failure the error carries its log's tail.
    fn wait(child: Child, name: &'static str, listen: Listen, stderr: &Stderr) -> Result<Running> {
        let mut running = Running {
            child,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            name,
        };
        let listening = match listen {
            Listen::Line(stdout) => running.wait_for_listening_line(stdout),
            Listen::Port(port) => running.wait_for_port(port),
        };
        match (listening, stderr) {
            (Ok(addr), _) => {
                running.addr = addr;
                Ok(running)
            }
            (Err(e), Stderr::Inherit) => Err(e.context(format!("{name} did not start"))),
            (Err(e), Stderr::Log(log)) => Err(e.context(format!(
                "{name} did not start; the end of its log {}:\n{}",
                log.display(),
                log_tail(log)
            ))),
        }
    }

    /// Reads standard output until `listening on ADDR`, then keeps draining it on a thread so
    /// the server never blocks on a full pipe (other lines are shown on our stderr).
    fn wait_for_listening_line(&mut self, stdout: ChildStdout) -> Result<SocketAddr> {
        let (tx, rx) = mpsc::channel();
        let name = self.name;
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match parse_listening(&line) {
                    Some(addr) if !sent => {
                        let _ = tx.send(addr);
                        sent = true;
                    }
                    _ => eprintln!("[{name}] {line}"),
                }
            }
        });
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => Ok(addr),
            Err(_) => {
                let status = self.child.try_wait()?;
                bail!(
                    "no `{LISTENING_PREFIX}ADDR` line on stdout within {START_TIMEOUT:?} \
                     (exit status: {status:?})"
                )
            }
        }
    }

    /// Connects to `port` until it accepts, failing when the server exits first.
    fn wait_for_port(&mut self, port: u16) -> Result<SocketAddr> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("exited with {status} before listening");
            }
            if TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).is_ok() {
                return Ok(addr);
            }
            if Instant::now() >= deadline {
                bail!("nothing listened on {addr} within {START_TIMEOUT:?}");
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's KV Connect URL, `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the exit, killing the server after [`STOP_TIMEOUT`].
    pub fn stop(mut self) -> Result<ExitStatus> {
        let pid = self.child.id().to_string();
        cmd::succeeds_quietly(Command::new("kill").args(["-TERM", &pid]));
        if let Some(status) = wait_with_deadline(&mut self.child, STOP_TIMEOUT)? {
            return Ok(status);
        }
        eprintln!(
            "{} ({pid}) ignored SIGTERM for {STOP_TIMEOUT:?}; killing it",
            self.name
        );
        self.child.kill().context("killing the server")?;
        self.child.wait().context("waiting for the killed server")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Spawns `command` with stdin closed, the given stdout and `stderr`, echoing it with the
/// token hidden.
fn spawn(
    command: &mut Command,
    stdout: Stdio,
    stderr: &Stderr,
    token: &str,
    name: &str,
) -> Result<Child> {
    let stderr = match stderr {
        Stderr::Inherit => Stdio::inherit(),
        Stderr::Log(path) => File::create(path)
            .with_context(|| format!("creating {}", path.display()))?
            .into(),
    };
    eprintln!("$ {}", cmd::display(command).replace(token, TOKEN_SHOWN));
    command
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("could not start {name}"))
}

/// The last [`LOG_TAIL_LINES`] lines of the file at `log`.
pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// The address of a `listening on ADDR` line.
fn parse_listening(line: &str) -> Option<SocketAddr> {
    line.trim()
        .strip_prefix(LISTENING_PREFIX)?
        .trim()
        .parse()
        .ok()
}

/// Waits for `child` to exit until `timeout` has passed; `None` if it is still running.
pub fn wait_with_deadline(child: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// A loopback port that was free a moment ago (bound, read, released; denokv cannot be told
/// to pick one, so it binds this right after).
fn free_port() -> Result<u16> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// A random access token: [`TOKEN_BYTES`] bytes of `/dev/urandom`, hex-encoded.
pub fn generate_token() -> Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom for an access token")?;
    Ok(bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
}

/// A fresh, empty directory `tuplekv-WHAT-PID-NANOS` under the system's temporary directory.
pub fn scratch_dir(what: &str) -> Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("tuplekv-{what}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_listening_line() {
        let addr = |s: &str| s.parse::<SocketAddr>().ok();
        assert_eq!(
            parse_listening("listening on 127.0.0.1:4512"),
            addr("127.0.0.1:4512")
        );
        assert_eq!(parse_listening("listening on [::1]:80\n"), addr("[::1]:80"));
        assert_eq!(
            parse_listening("  listening on  127.0.0.1:1 "),
            addr("127.0.0.1:1")
        );
        assert_eq!(parse_listening("starting"), None);
        assert_eq!(parse_listening("listening on nowhere"), None);
    }

    #[test]
    fn tokens_are_long_and_fresh() {
        let a = generate_token().expect("urandom");
        assert_eq!(a.len(), 2 * TOKEN_BYTES);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, generate_token().expect("urandom"));
    }

    #[test]
    fn free_ports_can_be_bound() {
        // A port free a moment ago can be taken by a listener of a test running beside this
        // one before it is bound again (the race denokv's start lives with, and why it polls):
        // of a few ports, most must still be free.
        const PORTS: usize = 8;
        let bound = (0..PORTS)
            .filter(|_| {
                let port = free_port().expect("a free port");
                assert_ne!(port, 0);
                TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
            })
            .count();
        assert!(
            bound > PORTS / 2,
            "only {bound} of {PORTS} free ports could be bound"
        );
    }

    #[test]
    fn scratch_dirs_are_fresh() {
        let (a, b) = (
            scratch_dir("test").expect("dir"),
            scratch_dir("test").expect("dir"),
        );
        assert!(a.is_dir() && b.is_dir());
        assert_ne!(a, b);
        let _ = std::fs::remove_dir_all(a);
        let _ = std::fs::remove_dir_all(b);
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = scratch_dir("test-log").expect("dir");
        let log = dir.join("server.log");
        let text: String = (0..30).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, text).expect("write");
        let tail = log_tail(&log);
        assert!(
            tail.starts_with("line 10\n") && tail.ends_with("line 29"),
            "{tail}"
        );
        assert_eq!(log_tail(&dir.join("missing")), "");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Writes an executable shell script standing in for `tuplekv` into `dir`.
    fn fake_server(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join("fake-tuplekv");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[test]
    fn starts_on_the_announced_address_and_stops_with_sigterm() {
        use std::os::unix::process::ExitStatusExt as _;
        let dir = scratch_dir("test-start").expect("dir");
        let fake = fake_server(
            &dir,
            "echo starting\necho 'listening on 127.0.0.1:4512'\nexec sleep 60",
        );
        let log = dir.join("server.log");
        let running =
            Running::tuplekv(&fake, &[], "secret-token", Stderr::Log(log)).expect("starts");
        assert_eq!(running.url(), "http://127.0.0.1:4512");
        let status = running.stop().expect("stops");
        assert_eq!(status.signal(), Some(15), "{status}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_server_that_exits_before_listening_is_an_error_with_its_log() {
        let dir = scratch_dir("test-exit").expect("dir");
        let fake = fake_server(&dir, "echo 'bad flag' >&2\nexit 3");
        let log = dir.join("server.log");
        let error = Running::tuplekv(&fake, &[], "secret-token", Stderr::Log(log))
            .err()
            .expect("fails");
        let message = format!("{error:#}");
        assert!(message.contains("did not start"), "{message}");
        assert!(message.contains("bad flag"), "{message}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
