//! `tuplekv import-deno` on a KV file made by the real Deno: when a Deno binary is installed
//! (`TUPLEKV_DENO`, or `$TUPLEKV_TOOLS_DIR/deno-2.9.6/package/deno` as `cargo xtask` installs
//! it) the test runs `tests/fixtures/make_deno_kv.ts` itself; otherwise it imports the
//! committed `tests/fixtures/deno_kv.sqlite3`, made by that script. Every value keeps its
//! encoding and bytes, every versionstamp and deadline is kept, new commits number above
//! Deno's last version; bad input (not SQLite, SQLite but not Deno KV, a value Deno never
//! writes, a missing file, an existing target) gets one line, exit 1, nothing written.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common_cli;

use std::path::{Path, PathBuf};
use std::process::Command;

use common_cli::*;
use rusqlite::Connection;
use tuplekv_engine::codec::encode_key;
use tuplekv_engine::{Database, Key, Options, Value, Versionstamp, key};

/// Ten years, in milliseconds, less a day of slack: the script's `expireIn`.
const NINE_YEARS_MS: u64 = 9 * 365 * 24 * 3600 * 1000;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The Deno binary, if one is installed where the project's tools go (or `TUPLEKV_DENO`).
fn deno() -> Option<PathBuf> {
    tuplekv_harness::clients::installed_deno()
}

/// A Deno KV file in `dir`: made now by real Deno if installed, else a copy of the fixture
/// (copied, so reading it never touches the source tree). Says which.
fn deno_kv_file(dir: &Path) -> PathBuf {
    let file = dir.join("deno_kv.sqlite3");
    match deno() {
        Some(deno) => {
            eprintln!("making the Deno KV file with {}", deno.display());
            let status = Command::new(&deno)
                .args(["run", "--unstable-kv", "-A"])
                .arg(fixtures().join("make_deno_kv.ts"))
                .arg(&file)
                .env("DENO_DIR", dir.join("deno_dir"))
                .env("NO_COLOR", "1")
                .status()
                .unwrap();
            assert!(status.success(), "deno failed: {status}");
        }
        None => {
            eprintln!("no Deno binary: importing the committed fixture");
            std::fs::copy(fixtures().join("deno_kv.sqlite3"), &file).unwrap();
        }
    }
    file
}

/// A row of Deno's `kv` table as Deno stored it: key, value bytes, encoding, version,
/// expiration.
type DenoRow = (Vec<u8>, Vec<u8>, i64, i64, i64);

/// The rows of Deno's `kv` table, in key order.
fn deno_rows(file: &Path) -> Vec<DenoRow> {
    let conn = Connection::open(file).unwrap();
    let mut statement = conn
        .prepare("SELECT k, v, v_encoding, version, expiration_ms FROM kv ORDER BY k")
        .unwrap();
    statement
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn bytes_of(key: &Key) -> Vec<u8> {
    encode_key(key).as_slice().to_vec()
}

#[test]
fn an_import_keeps_every_encoding_stamp_and_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let file = deno_kv_file(tmp.path());
    let target = tmp.path().join("db");
    let out = succeeds(&[&"import-deno", &file, &"--path", &target]);
    assert!(out.starts_with("imported 11 entries"), "{out}");

    let rows = rows_in(&target);
    let from_deno = deno_rows(&file);
    assert_eq!(rows.len(), from_deno.len());
    for ((key, value, stamp, deadline), (k, v, encoding, version, expiry)) in
        rows.iter().zip(&from_deno)
    {
        assert_eq!(key, k, "keys are Deno's bytes");
        let (kind, bytes) = match value {
            Value::V8(b) => (1, b.to_vec()),
            Value::U64(n) => (2, n.to_le_bytes().to_vec()),
            Value::Bytes(b) => (3, b.to_vec()),
        };
        assert_eq!((kind, &bytes), (*encoding, v), "value of {key:?}");
        assert_eq!(stamp.version(), u64::try_from(*version).unwrap());
        assert_eq!(*deadline, u64::try_from(*expiry).ok());
    }

    // What the script wrote, read back by key.
    let db = Database::open(&target, Options::default()).unwrap();
    let get = |key: &Key| db.get(key).unwrap().map(|e| e.value);
    assert_eq!(get(&key!["u64"]), Some(Value::U64(1_234_567_890_123)));
    assert_eq!(get(&key!["u64", "counter"]), Some(Value::U64(11)));
    assert_eq!(
        get(&key!["bytes", &[1u8, 2, 3][..]]),
        Some(Value::Bytes(vec![0, 255, 16].into()))
    );
    let parts = key!["parts", "s", 2.5, -3i64, false, &[0u8][..]];
    for key in [
        key!["str", "hello"],
        key!["num", 1.0],
        key!["big", 1],
        key!["obj"],
        key!["bool", true],
        parts,
        key!["overwritten"],
    ] {
        assert!(
            matches!(get(&key), Some(Value::V8(_))),
            "{key} is a V8 value"
        );
    }
    assert_eq!(get(&key!["deleted"]), None);
    let later = db.get(&key!["expiring"]).unwrap().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    assert!(later.expires_at.unwrap() > u64::try_from(now).unwrap() + NINE_YEARS_MS);
    let last = rows.iter().map(|r| r.2).max().unwrap();
    assert!(db.set(&key!["after"], b"x").unwrap() > last);
    db.close().unwrap();
    assert!(bytes_of(&key!["str", "hello"]).starts_with(&[2]));
}

#[test]
fn an_import_reports_json_and_numbers_above_denos_last_version() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a dir #1 with 100% odd? names");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("kv.sqlite3");
    std::fs::copy(fixtures().join("deno_kv.sqlite3"), &file).unwrap();
    let target = tmp.path().join("db");
    let out = succeeds(&[&"import-deno", &"--json", &file, &"--path", &target]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["imported"], 11);
    assert_eq!(
        names_in(&dir),
        ["kv.sqlite3"],
        "reading leaves no side files"
    );
    let conn = Connection::open(&file).unwrap();
    let last: i64 = conn
        .query_row("SELECT version FROM data_version WHERE k = 0", [], |r| {
            r.get(0)
        })
        .unwrap();
    let last = Versionstamp::from_version(u64::try_from(last).unwrap());
    assert_eq!(json["last_versionstamp"], last.to_string());
    let db = Database::open(&target, Options::default()).unwrap();
    assert!(db.set(&key!["after"], b"x").unwrap() > last);
    db.close().unwrap();
}

/// A SQLite file with Deno's `kv` table holding one row, whose encoding is `encoding`.
fn deno_like(path: &Path, encoding: i64, value: &[u8]) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE kv (k blob primary key, v blob not null, v_encoding integer not null, \
         version integer not null, seq integer not null default 0, \
         expiration_ms integer not null default -1) without rowid",
    )
    .unwrap();
    conn.execute(
        "INSERT INTO kv (k, v, v_encoding, version) VALUES (?1, ?2, ?3, 1)",
        rusqlite::params![bytes_of(&key!["a", 1]), value, encoding],
    )
    .unwrap();
    conn
}

#[test]
fn an_import_reads_commits_still_in_the_write_ahead_log_of_an_open_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("live.sqlite3");
    let conn = deno_like(&file, 3, b"first");
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;")
        .unwrap();
    conn.execute(
        "INSERT INTO kv (k, v, v_encoding, version) VALUES (?1, ?2, 3, 2)",
        rusqlite::params![bytes_of(&key!["b"]), b"in the log".as_slice()],
    )
    .unwrap();
    assert!(
        tmp.path().join("live.sqlite3-wal").exists(),
        "the row is in the log"
    );
    let target = tmp.path().join("db");
    succeeds(&[&"import-deno", &file, &"--path", &target]);
    drop(conn);
    let rows = rows_in(&target);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].1, Value::Bytes(b"in the log".to_vec().into()));
}

#[test]
fn queued_messages_are_not_imported_and_a_note_counts_them() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("queued.sqlite3");
    let conn = deno_like(&file, 3, b"kept");
    // Deno's queue tables hold more columns; the import only counts their rows.
    conn.execute_batch(
        "CREATE TABLE queue (ts integer, id text, data blob); \
         CREATE TABLE queue_running (deadline integer, id text, data blob); \
         INSERT INTO queue VALUES (1, 'a', x'00'), (2, 'b', x'00'); \
         INSERT INTO queue_running VALUES (3, 'c', x'00');",
    )
    .unwrap();
    drop(conn);
    let target = tmp.path().join("db");
    let output = run(&[&"import-deno", &"--json", &file, &"--path", &target]);
    assert!(output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr,
        "tuplekv: note: 3 queued messages (kv.enqueue) were not imported: tuplekv has no \
         queue\n"
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["queued_not_imported"], 3);
    assert_eq!(json["imported"], 1);
    assert_eq!(rows_in(&target).len(), 1);
}

#[test]
fn an_import_refuses_bad_input_in_one_line_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let target = dir.join("db");
    let text = dir.join("notes.txt");
    std::fs::write(
        &text,
        "not a database, and long enough to have a header".repeat(20),
    )
    .unwrap();
    fails_with(
        &[&"import-deno", &text, &"--path", &target],
        "not a readable SQLite file",
    );

    let other = dir.join("other.sqlite3");
    Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE notes (body text)")
        .unwrap();
    fails_with(
        &[&"import-deno", &other, &"--path", &target],
        "not a Deno KV database: it has no `kv` table",
    );

    let odd = dir.join("odd.sqlite3");
    deno_like(&odd, 9, b"x");
    fails_with(
        &[&"import-deno", &odd, &"--path", &target],
        "key [\"a\", 1n]: unknown value encoding 9",
    );
    let short_u64 = dir.join("short.sqlite3");
    deno_like(&short_u64, 2, b"1234");
    fails_with(
        &[&"import-deno", &short_u64, &"--path", &target],
        "a u64 value of 4 bytes, not 8",
    );

    let missing = dir.join("missing.sqlite3");
    fails_with(
        &[&"import-deno", &missing, &"--path", &target],
        "no such file",
    );

    let fixture = dir.join("kv.sqlite3");
    std::fs::copy(fixtures().join("deno_kv.sqlite3"), &fixture).unwrap();
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep"), b"mine").unwrap();
    fails_with(
        &[&"import-deno", &fixture, &"--path", &target],
        "already exists",
    );
    assert_eq!(names_in(&target), ["keep"]);
    let names: Vec<String> = names_in(dir)
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(names.is_empty(), "no temporary directory left: {names:?}");
}
