//! Helpers for the tests that run the `tuplekv` binary on temporary directories: run a command,
//! expect success or the one-line failure, and read a database back through the engine.
#![allow(dead_code, reason = "each test file uses its own part")]

use std::path::Path;
use std::process::{Command, Output};

use assert_cmd::prelude::*;
use tuplekv_engine::{Database, ListOptions, Options, Selector, Value, Versionstamp, key};

/// The binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_tuplekv");

/// Runs `tuplekv args…` with stdin and stdout not terminals (so no progress is drawn).
pub(crate) fn run(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut cmd = Command::new(BIN);
    for arg in args {
        cmd.arg(arg);
    }
    cmd.env_remove("TUPLEKV_ACCESS_TOKEN");
    cmd.output().expect("run tuplekv")
}

/// Runs `tuplekv args…`, expects exit 0, and returns its stdout.
pub(crate) fn succeeds(args: &[&dyn AsRef<std::ffi::OsStr>]) -> String {
    let output = run(args);
    let assert = output.clone().assert().success();
    drop(assert);
    assert!(
        output.stderr.is_empty(),
        "no stderr on success, got {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 stdout")
}

/// Runs `tuplekv args…` and expects exit code 1, nothing on stdout, and exactly one line on
/// stderr: `tuplekv: …` containing `needle`. Returns that line.
pub(crate) fn fails_with(args: &[&dyn AsRef<std::ffi::OsStr>], needle: &str) -> String {
    let output = run(args);
    output.clone().assert().code(1);
    assert!(output.stdout.is_empty(), "nothing on stdout on failure");
    let stderr = String::from_utf8(output.stderr).expect("utf-8 stderr");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got {stderr:?}");
    assert!(lines[0].starts_with("tuplekv: "), "{stderr:?}");
    assert!(
        lines[0].contains(needle),
        "{stderr:?} should say {needle:?}"
    );
    assert!(!stderr.contains("panicked"), "{stderr:?}");
    lines[0].to_owned()
}

/// One entry as the tests compare them: key bytes, value, versionstamp, deadline.
pub(crate) type Row = (Vec<u8>, Value, Versionstamp, Option<u64>);

/// Every live entry of `db`, in key order.
pub(crate) fn rows_of(db: &Database) -> Vec<Row> {
    db.list(&Selector::prefix(&key![]), ListOptions::default())
        .expect("list everything")
        .map(|e| {
            let e = e.expect("list entry");
            (
                e.key.as_slice().to_vec(),
                e.value,
                e.versionstamp,
                e.expires_at,
            )
        })
        .collect()
}

/// The entries of the database in `dir`, opened and closed again.
pub(crate) fn rows_in(dir: &Path) -> Vec<Row> {
    let db = Database::open(dir, Options::default()).expect("open the database");
    let rows = rows_of(&db);
    db.close().expect("close");
    rows
}

/// The names in `dir`, sorted: a failed command leaves no temporary directory behind.
pub(crate) fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// The access token the test servers take.
pub(crate) const TOKEN: &str = "a-long-enough-test-token";

/// A `tuplekv serve` child on a free loopback port over `dir`, killed when dropped.
pub(crate) struct Server {
    child: std::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub(crate) url: String,
}

impl Server {
    /// Starts the server and waits for its `listening on` line.
    pub(crate) fn start(dir: impl AsRef<std::ffi::OsStr>) -> Server {
        use std::io::BufRead;
        let mut child = Command::new(BIN)
            .args(["serve", "--addr", "127.0.0.1:0", "--path"])
            .arg(dir)
            .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start tuplekv serve");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("read the listening line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .expect("a listening line")
            .to_owned();
        Server {
            child,
            url: format!("http://{addr}"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
