//! The data subcommands as a user runs them: every one of `get`, `set`, `delete`, `list`,
//! `watch`, `stats`, `dump` and `load` on a temporary directory (and over `--url` against a
//! `tuplekv serve`), the dump → load → dump round trip giving the same file, and every bad
//! input (a malformed key, a missing file, a directory that is not a database, a database
//! another process holds, a malformed load line) answered by one line on stderr and a
//! non-zero exit, with nothing written.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};

use assert_cmd::Command;
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_tuplekv");
const TOKEN: &str = "a-long-enough-test-token";

fn tuplekv(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_remove("TUPLEKV_ACCESS_TOKEN");
    cmd
}

/// Runs the command, expects success, returns stdout.
fn ok(args: &[&str]) -> String {
    let out = tuplekv(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Quiet in a pipe: no progress bar, no log lines.
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Runs the command, expects a non-zero exit with exactly one line on stderr (no panic),
/// and returns that line.
fn fails(args: &[&str]) -> String {
    let out = tuplekv(args).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args:?}: not one line: {stderr:?}"
    );
    stderr
}

fn path_of(dir: &Path) -> &str {
    dir.to_str().unwrap()
}

/// A database with a few entries of every value kind, written through the binary.
fn seeded() -> (TempDir, String) {
    let tmp = TempDir::new().unwrap();
    let db = tmp.path().join("db");
    let db = path_of(&db).to_owned();
    ok(&["set", "--path", &db, r#"["users", 1n]"#, "--string", "Ada"]);
    ok(&[
        "set",
        "--path",
        &db,
        r#"["users", 2n]"#,
        "--bytes",
        "4772616365",
    ]);
    ok(&[
        "set",
        "--path",
        &db,
        r#"["users", 3n]"#,
        "--v8-hex",
        "ff0f54",
    ]);
    ok(&[
        "set",
        "--path",
        &db,
        r#"["count"]"#,
        "--u64",
        "18446744073709551615",
    ]);
    ok(&[
        "set",
        "--path",
        &db,
        "[new Uint8Array([1, 2]), -0, NaN, true]",
        "--u64",
        "1",
    ]);
    ok(&[
        "set",
        "--path",
        &db,
        r#"["session", "x"]"#,
        "--u64",
        "5",
        "--expire-in",
        "3600000",
    ]);
    (tmp, db)
}

#[test]
fn set_get_delete_work_on_a_directory() {
    let (_tmp, db) = seeded();
    assert_eq!(
        ok(&["get", "--path", &db, r#"['users', 1n]"#])
            .split("  ")
            .take(2)
            .collect::<Vec<_>>(),
        [r#"["users", 1n]"#, r#"v8 "Ada""#]
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["get", "--path", &db, r#"["users", 2n]"#, "--json"])).unwrap();
    assert_eq!(json["value"]["bytes"], "4772616365");
    assert_eq!(json["parts"][1]["bigint"], "2");
    assert!(ok(&["get", "--path", &db, r#"["count"]"#]).contains("18446744073709551615u64"));
    assert!(ok(&["get", "--path", &db, r#"["users", 3n]"#]).contains("v8 true"));
    // A number key is not the bigint key.
    assert!(ok(&["get", "--path", &db, r#"["users", 1]"#]).contains("(absent)"));
    assert_eq!(
        ok(&["get", "--path", &db, r#"["users", 1]"#, "--json"]).trim(),
        "null"
    );
    let session = ok(&["get", "--path", &db, r#"["session", "x"]"#, "--json"]);
    assert!(session.contains(r#""expires_at":1"#), "{session}");

    assert!(ok(&["delete", "--path", &db, r#"["users", 1n]"#]).starts_with("deleted"));
    assert!(ok(&["get", "--path", &db, r#"["users", 1n]"#]).contains("(absent)"));
}

#[test]
fn list_takes_a_prefix_a_range_a_limit_and_reverse() {
    let (_tmp, db) = seeded();
    let keys = |out: String| -> Vec<String> {
        out.lines()
            .map(|l| l.split("  ").next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        keys(ok(&["list", "--path", &db, r#"["users"]"#])),
        [r#"["users", 1n]"#, r#"["users", 2n]"#, r#"["users", 3n]"#]
    );
    assert_eq!(
        keys(ok(&[
            "list",
            "--path",
            &db,
            r#"["users"]"#,
            "--reverse",
            "--limit",
            "2"
        ])),
        [r#"["users", 3n]"#, r#"["users", 2n]"#]
    );
    assert_eq!(
        keys(ok(&[
            "list",
            "--path",
            &db,
            "--start",
            r#"["users", 2n]"#,
            "--end",
            r#"["users", 3n]"#
        ])),
        [r#"["users", 2n]"#]
    );
    assert_eq!(
        keys(ok(&[
            "list",
            "--path",
            &db,
            r#"["users"]"#,
            "--start",
            r#"["users", 3n]"#
        ])),
        [r#"["users", 3n]"#]
    );
    // Everything, in key order: bytes < string parts.
    let all = keys(ok(&["list", "--path", &db]));
    assert_eq!(all.len(), 6);
    assert_eq!(all[0], r#"[b"\x01\x02", -0, NaN, true]"#);
    for line in ok(&["list", "--path", &db, "--json"]).lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
    let err = fails(&[
        "list",
        "--path",
        &db,
        r#"["users"]"#,
        "--start",
        r#"["other"]"#,
    ]);
    assert!(err.contains("bad list range"), "{err}");
    assert!(fails(&["list", "--path", &db, "--limit", "0"]).contains("--limit"));
}

#[test]
fn stats_counts_entries() {
    let (_tmp, db) = seeded();
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["stats", "--path", &db, "--json"])).unwrap();
    assert_eq!(json["entries"], 6);
    assert_eq!(json["expiring"], 1);
    assert!(ok(&["stats", "--path", &db]).starts_with("entries       6\n"));
    let err = fails(&["stats", "--url", "http://127.0.0.1:1"]);
    assert!(err.contains("--path"), "{err}");
}

#[test]
fn watch_on_a_directory_prints_the_current_state() {
    let (_tmp, db) = seeded();
    let out = ok(&[
        "watch",
        "--path",
        &db,
        r#"["count"]"#,
        r#"["none"]"#,
        "--count",
        "1",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("update at versionstamp "), "{out}");
    assert!(
        lines[1].starts_with(r#"* ["count"]  18446744073709551615u64"#),
        "{out}"
    );
    assert_eq!(lines[2], r#"* ["none"]  (absent)"#);
}

#[test]
fn watch_stops_on_ctrl_c_and_releases_the_directory() {
    let (_tmp, db) = seeded();
    let mut watch = std::process::Command::new(BIN)
        .args(["watch", "--path", &db, r#"["count"]"#])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().starts_with("update at"));
    assert!(lines.next().unwrap().unwrap().contains(r#"["count"]"#));
    let sent = std::process::Command::new("kill")
        .args(["-INT", &watch.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = watch.wait().unwrap();
    assert!(status.success(), "{status:?}");
    ok(&["get", "--path", &db, r#"["count"]"#]);
}

/// Dumps `db` (without versionstamps) to a string.
fn dump_of(db: &str) -> String {
    ok(&["dump", "--path", db, "--omit-versionstamps"])
}

#[test]
fn dump_load_dump_gives_the_same_file() {
    let (tmp, db) = seeded();
    // Overwrites and deletes leave gaps in the versionstamps.
    ok(&["set", "--path", &db, r#"["users", 2n]"#, "--bytes", "00"]);
    ok(&["delete", "--path", &db, r#"["users", 3n]"#]);
    ok(&[
        "set",
        "--path",
        &db,
        r#"["users", "😮\u{0}\n"]"#,
        "--string",
        "two-byte 😮",
    ]);
    let file = tmp.path().join("dump.ndjson");
    ok(&["dump", "--path", &db, "--output", path_of(&file)]);
    let copy = tmp.path().join("copy");
    let loaded = ok(&["load", "--path", path_of(&copy), path_of(&file)]);
    assert_eq!(loaded.trim(), "loaded 6 entries");
    assert_eq!(dump_of(&db), dump_of(path_of(&copy)));
    assert_eq!(dump_of(&db).lines().count(), 6);
    // Deadlines are kept as they were.
    let deadline = |db: &str| {
        let line = ok(&["get", "--path", db, r#"["session", "x"]"#, "--json"]);
        serde_json::from_str::<serde_json::Value>(&line).unwrap()["expires_at"].clone()
    };
    assert_eq!(deadline(&db), deadline(path_of(&copy)));
    // Versionstamps are new, but their order is the original one.
    let stamp_order = |db: &str| {
        let mut entries: Vec<(String, String)> = ok(&["dump", "--path", db])
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["versionstamp"].as_str().unwrap().to_owned(),
                    v["key"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        entries.sort();
        entries.into_iter().map(|(_, k)| k).collect::<Vec<_>>()
    };
    assert_eq!(stamp_order(&db), stamp_order(path_of(&copy)));
    // Loading the same file into the loaded database changes nothing but stamps.
    ok(&["load", "--path", path_of(&copy), path_of(&file)]);
    assert_eq!(dump_of(&db), dump_of(path_of(&copy)));
}

#[test]
fn large_loads_split_into_commits_and_dumps_page_through_the_snapshot() {
    let tmp = TempDir::new().unwrap();
    // 2500 entries: 1500 that shared one commit (more than one commit may hold), then
    // 1000 with a stamp each, then some without a stamp.
    let mut text = String::new();
    for i in 0..2600u32 {
        let stamp = match i {
            0..1500 => Some(format!("{:016x}0000", 7)),
            1500..2500 => Some(format!("{:016x}0000", 100 + i)),
            _ => None,
        };
        let mut line = serde_json::json!({
            "key": format!("[\"k\", {i}n]"),
            "value": { "bytes": "ab".repeat(300) },
        });
        if let Some(stamp) = stamp {
            line["versionstamp"] = stamp.into();
        }
        text.push_str(&format!("{line}\n"));
    }
    let file = tmp.path().join("big.ndjson");
    std::fs::write(&file, text).unwrap();
    let db = tmp.path().join("db");
    assert_eq!(
        ok(&["load", "--path", path_of(&db), path_of(&file)]).trim(),
        "loaded 2600 entries"
    );
    let dumped = ok(&["dump", "--path", path_of(&db)]);
    assert_eq!(dumped.lines().count(), 2600);
    let stamps: Vec<String> = dumped
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["versionstamp"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    // The group of 1500 needed two commits (at most 1000 mutations each); every other
    // entry got its own commit, after them.
    let distinct: std::collections::BTreeSet<&String> = stamps[..1500].iter().collect();
    assert_eq!(distinct.len(), 2);
    assert!(stamps[1500..2500].windows(2).all(|w| w[0] < w[1]));
    assert!(stamps[..1500].iter().all(|s| *s < stamps[1500]));
    // The unstamped ones came last, in commits of their own batch.
    assert!(stamps[2500..].iter().all(|s| *s > stamps[2499]));
    let copy = tmp.path().join("copy");
    let file2 = tmp.path().join("again.ndjson");
    ok(&["dump", "--path", path_of(&db), "-o", path_of(&file2)]);
    ok(&["load", "--path", path_of(&copy), path_of(&file2)]);
    assert_eq!(dump_of(path_of(&db)), dump_of(path_of(&copy)));
}

#[test]
fn a_malformed_load_line_is_refused_with_its_number_and_writes_nothing() {
    let (tmp, db) = seeded();
    let file = tmp.path().join("dump.ndjson");
    ok(&["dump", "--path", &db, "--output", path_of(&file)]);
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("{\"key\":\"[\\\"late\\\"\",\"value\":{\"u64\":\"1\"}}\n");
    std::fs::write(&file, &text).unwrap();

    let fresh = tmp.path().join("fresh");
    let err = fails(&["load", "--path", path_of(&fresh), path_of(&file)]);
    assert!(
        err.contains("dump.ndjson:7: \"key\": malformed key at column"),
        "{err}"
    );
    assert!(!fresh.exists(), "a refused load created the target");
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        2,
        "a temporary was left behind"
    );

    ok(&["delete", "--path", &db, r#"["count"]"#]);
    let err = fails(&["load", "--path", &db, path_of(&file)]);
    assert!(err.contains(":7:"), "{err}");
    assert!(
        !dump_of(&db).contains(r#"["count"]"#),
        "the refused load wrote entries"
    );

    for (line, wanted) in [
        ("not json", "not JSON"),
        (r#"{"key":"[1]","value":{"u64":"x"}}"#, "u64"),
        (r#"{"key":"[]","value":{"u64":"1"}}"#, "empty key"),
        (r#"{"key":"[1]","value":{"bytes":"zz"}}"#, "bad hex"),
        (
            r#"{"key":"[1]","value":{"u64":"1"},"versionstamp":"12"}"#,
            "versionstamp",
        ),
        (
            r#"{"key":"[1]","value":{"u64":"1"},"expires_at":-5}"#,
            "expires_at",
        ),
    ] {
        std::fs::write(&file, format!("{line}\n")).unwrap();
        let err = fails(&["load", "--path", path_of(&fresh), path_of(&file)]);
        assert!(
            err.contains(":1: ") && err.contains(wanted),
            "{line}: {err}"
        );
        assert!(!fresh.exists());
    }
    let big = format!(
        "{{\"key\":\"[1]\",\"value\":{{\"bytes\":\"{}\"}}}}\n",
        "00".repeat(65537)
    );
    std::fs::write(
        &file,
        format!("{{\"key\":\"[1]\",\"value\":{{\"u64\":\"1\"}}}}\n{big}"),
    )
    .unwrap();
    let err = fails(&["load", "--path", path_of(&fresh), path_of(&file)]);
    assert!(err.contains(":2: [1]: Value too large"), "{err}");
    std::fs::write(
        &file,
        "{\"key\":\"[1]\",\"value\":{\"u64\":\"1\"}}\n\n{\"parts\":[{\"number\":\"1\"}],\"value\":{\"u64\":\"2\"}}\n",
    )
    .unwrap();
    let err = fails(&["load", "--path", path_of(&fresh), path_of(&file)]);
    assert!(err.contains(":3: key [1] is already on line 1"), "{err}");
    assert!(!fresh.exists());
}

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let (tmp, db) = seeded();
    let missing = tmp.path().join("missing");
    let err = fails(&["get", "--path", &db, r#"["users", 1n"#]);
    assert!(
        err.starts_with("tuplekv: malformed key at column 13:"),
        "{err}"
    );
    for args in [
        vec!["set", "--path", &db, "[users]", "--u64", "1"],
        vec!["delete", "--path", &db, "['a' 'b']"],
        vec!["list", "--path", &db, "[1x]"],
        vec!["watch", "--path", &db, "[undefined]"],
        vec!["get", "--path", &db, "[new Uint8Array([300])]"],
    ] {
        assert!(fails(&args).contains("malformed key at column"), "{args:?}");
    }
    // A missing database, a missing load file.
    assert!(fails(&["get", "--path", path_of(&missing), "[1]"]).contains("does not exist"));
    assert!(fails(&["dump", "--path", path_of(&missing)]).contains("does not exist"));
    assert!(!missing.exists(), "a read created the directory");
    let err = fails(&[
        "load",
        "--path",
        &db,
        path_of(&tmp.path().join("nope.ndjson")),
    ]);
    assert!(
        err.contains("cannot open") && err.contains("nope.ndjson"),
        "{err}"
    );
    // A directory that is not a database, and a file.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "hello").unwrap();
    for command in ["get", "set", "delete", "list", "watch", "stats", "dump"] {
        let mut args = vec![command, "--path", path_of(&other)];
        if matches!(command, "get" | "set" | "delete" | "watch") {
            args.push("[1]");
        }
        if command == "set" {
            args.extend(["--u64", "1"]);
        }
        let err = fails(&args);
        assert!(
            err.contains("is not a tuplekv database"),
            "{command}: {err}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&other).unwrap().count(),
        1,
        "files were added"
    );
    let file = other.join("notes.txt");
    assert!(fails(&["get", "--path", path_of(&file), "[1]"]).contains("not a database directory"));
    // Bad values and flags.
    assert!(fails(&["set", "--path", &db, "[1]", "--bytes", "xyz"]).contains("bad hex"));
    assert!(fails(&["set", "--path", &db, "[]", "--u64", "1"]).contains("empty"));
    let err = fails(&["get", "--url", "http://127.0.0.1:1", "[1]"]);
    assert!(err.contains("access token"), "{err}");
}

#[test]
fn a_database_another_process_holds_is_one_line() {
    let (_tmp, db) = seeded();
    let held = tuplekv_engine::Database::open(&db, tuplekv_engine::Options::default()).unwrap();
    for args in [
        vec!["get", "--path", &db, "[1]"],
        vec!["set", "--path", &db, "[1]", "--u64", "1"],
        vec!["list", "--path", &db],
        vec!["stats", "--path", &db],
        vec!["dump", "--path", &db],
    ] {
        let err = fails(&args);
        assert!(
            err.contains("is in use by another process"),
            "{args:?}: {err}"
        );
    }
    held.close().unwrap();
    ok(&["get", "--path", &db, "[1]"]);
}

/// A `tuplekv serve` child on a free port, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(dir: &str) -> Server {
        let mut child = std::process::Command::new(BIN)
            .args(["serve", "--addr", "127.0.0.1:0", "--path", dir])
            .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
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

#[test]
fn commands_work_on_a_server_url_and_watch_prints_each_update() {
    let (tmp, db) = seeded();
    let server = Server::start(&db);
    let url = server.url.as_str();
    let remote = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--url", url, "--access-token", TOKEN]);
        ok(&all)
    };
    assert!(remote(&["get", r#"["users", 1n]"#]).contains(r#"v8 "Ada""#));
    remote(&["set", r#"["users", 9n]"#, "--u64", "9"]);
    assert_eq!(remote(&["list", r#"["users"]"#]).lines().count(), 4);
    remote(&["delete", r#"["users", 9n]"#]);
    let dumped = remote(&["dump", "--omit-versionstamps"]);
    assert_eq!(dumped.lines().count(), 6);

    // A watch over the server sees another client's write.
    let mut watch = std::process::Command::new(BIN)
        .args([
            "watch",
            r#"["config"]"#,
            "--count",
            "2",
            "--json",
            "--url",
            url,
        ])
        .env("TUPLEKV_ACCESS_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["entries"][0]["value"], serde_json::Value::Null);
    remote(&["set", r#"["config"]"#, "--string", "on"]);
    let second: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(second["entries"][0]["value"]["v8"], "ff0f22026f6e");
    assert_eq!(second["changed"][0], true);
    assert!(watch.wait().unwrap().success());

    // Load into the server from a file.
    let file = tmp.path().join("in.ndjson");
    std::fs::write(
        &file,
        "{\"key\":\"[\\\"loaded\\\"]\",\"value\":{\"u64\":\"3\"}}\n",
    )
    .unwrap();
    remote(&["load", path_of(&file)]);
    assert!(remote(&["get", r#"["loaded"]"#]).contains("3u64"));
    drop(server);
}
