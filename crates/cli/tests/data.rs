//! The data subcommands as a user runs them: every one of `get`, `set`, `delete`, `list`,
//! `watch`, `stats`, `dump` and `load` on a temporary directory (and over `--url` against a
//! `tuplekv serve`), the dump → load → dump round trip giving the same file, and every bad
//! input (a malformed key, a missing file, a directory that is not a database, a database
//! another process holds, a malformed load line) answered by one line on stderr and a
//! non-zero exit, with nothing written.

#![allow(clippy::unwrap_used)]

mod common_cli;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use assert_cmd::Command;
use common_cli::{BIN, Server, TOKEN};
use tempfile::TempDir;

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
    // `stats --url` reads a server's /metrics (crates/cli/tests/serve_observability.rs); it
    // needs a token.
    let err = fails(&["stats", "--url", "http://127.0.0.1:1"]);
    assert!(err.contains("access token"), "{err}");
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

/// Dumps `db` whole, versionstamps and all.
fn full_dump_of(db: &str) -> String {
    ok(&["dump", "--path", db])
}

/// The versionstamp of each line of a dump.
fn stamps_of(dump: &str) -> Vec<String> {
    dump.lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["versionstamp"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
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
    // Into a new directory: the same file, versionstamps and deadlines included.
    let dumped = std::fs::read_to_string(&file).unwrap();
    assert_eq!(full_dump_of(path_of(&copy)), dumped);
    assert_eq!(dumped.lines().count(), 6);
    assert!(
        dumped.contains("\"expires_at\":1"),
        "a deadline is compared"
    );
    // New commits number above the loaded ones.
    let set = ok(&["set", "--path", path_of(&copy), "[\"after\"]", "--u64", "1"]);
    let newest = stamps_of(&dumped).into_iter().max().unwrap();
    assert!(
        set.trim().rsplit(' ').next().unwrap() > newest.as_str(),
        "{set}"
    );
    ok(&["delete", "--path", path_of(&copy), "[\"after\"]"]);
    // An empty directory is a new one too.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    ok(&["load", "--path", path_of(&empty), path_of(&file)]);
    assert_eq!(full_dump_of(path_of(&empty)), dumped);

    // Into an existing database: new versionstamps, in the original order.
    let stamp_order = |db: &str| {
        let mut entries: Vec<(String, String)> = full_dump_of(db)
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
    ok(&["load", "--path", path_of(&copy), path_of(&file)]);
    assert_eq!(dump_of(&db), dump_of(path_of(&copy)));
    assert_ne!(full_dump_of(&db), full_dump_of(path_of(&copy)));
    assert_eq!(stamp_order(&db), stamp_order(path_of(&copy)));
}

#[test]
fn large_loads_keep_stamps_in_a_new_directory_and_split_into_commits_in_an_existing_one() {
    let tmp = TempDir::new().unwrap();
    // 2600 entries: 1500 that shared one commit (more than one commit may hold), then
    // 1000 with a stamp each, then 100 without a stamp.
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

    // A new directory keeps every stamp; the unstamped entries get one above them all.
    let db = tmp.path().join("db");
    assert_eq!(
        ok(&["load", "--path", path_of(&db), path_of(&file)]).trim(),
        "loaded 2600 entries"
    );
    let stamps = stamps_of(&full_dump_of(path_of(&db)));
    assert_eq!(stamps.len(), 2600);
    assert!(stamps[..1500].iter().all(|s| s == "00000000000000070000"));
    for (i, stamp) in stamps[1500..2500].iter().enumerate() {
        assert_eq!(*stamp, format!("{:016x}0000", 1600 + i));
    }
    assert!(
        stamps[2500..]
            .iter()
            .all(|s| *s == format!("{:016x}0000", 2600))
    );

    // An existing database: the group of 1500 needs two commits (at most 1000 mutations
    // each); every other stamped entry gets its own commit, after them.
    let existing = tmp.path().join("existing");
    ok(&[
        "set",
        "--path",
        path_of(&existing),
        "[\"first\"]",
        "--u64",
        "1",
    ]);
    ok(&["load", "--path", path_of(&existing), path_of(&file)]);
    let dumped = full_dump_of(path_of(&existing));
    let stamps: Vec<String> = stamps_of(&dumped).into_iter().skip(1).collect();
    let first: serde_json::Value = serde_json::from_str(dumped.lines().next().unwrap()).unwrap();
    assert_eq!(first["key"], r#"["first"]"#);
    let distinct: std::collections::BTreeSet<&String> = stamps[..1500].iter().collect();
    assert_eq!(distinct.len(), 2);
    assert!(stamps[1500..2500].windows(2).all(|w| w[0] < w[1]));
    assert!(stamps[..1500].iter().all(|s| *s < stamps[1500]));
    // The unstamped ones came last, in commits of their own batch.
    assert!(stamps[2500..].iter().all(|s| *s > stamps[2499]));

    // Paging: a dump of more than one scan batch loads back the same.
    let copy = tmp.path().join("copy");
    let file2 = tmp.path().join("again.ndjson");
    ok(&["dump", "--path", path_of(&db), "-o", path_of(&file2)]);
    ok(&["load", "--path", path_of(&copy), path_of(&file2)]);
    assert_eq!(full_dump_of(path_of(&db)), full_dump_of(path_of(&copy)));
}

#[test]
fn a_versionstamp_tuplekv_cannot_make_is_renumbered_with_a_note() {
    let tmp = TempDir::new().unwrap();
    let file = tmp.path().join("foreign.ndjson");
    let line = |key: &str, stamp: &str| {
        format!(
            "{{\"key\":\"[\\\"{key}\\\"]\",\"value\":{{\"u64\":\"1\"}},\"versionstamp\":\"{stamp}\"}}\n"
        )
    };
    std::fs::write(
        &file,
        line("a", "00000000000000090003") + &line("b", "00000000000000050000"),
    )
    .unwrap();
    let db = tmp.path().join("db");
    let out = tuplekv(&["load", "--path", path_of(&db), path_of(&file)])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("tuplekv: note: versionstamps were not kept: line 1's"),
        "{stderr}"
    );
    // In the order of the dumped stamps: b (5) before a (9.3).
    let stamps = stamps_of(&full_dump_of(path_of(&db)));
    assert_eq!(stamps, ["00000000000000020000", "00000000000000010000"]);
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
            err.contains("is open in another process"),
            "{args:?}: {err}"
        );
    }
    held.close().unwrap();
    ok(&["get", "--path", &db, "[1]"]);
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
    assert_eq!(second["entries"][0]["value"]["v8"], "ff1022026f6e");
    assert_eq!(second["entries"][0]["value"]["decoded"], "\"on\"");
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

/// Runs the command, expects clap's refusal: exit 2, nothing on stdout, one line on stderr
/// naming the help to read. Returns that line.
fn usage_error(args: &[&str]) -> String {
    let out = tuplekv(args).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args:?}: not one line: {stderr:?}"
    );
    assert!(stderr.starts_with("tuplekv: "), "{stderr}");
    assert!(
        !stderr.contains("error:") && !stderr.contains("Usage"),
        "{stderr}"
    );
    stderr.trim_end().to_owned()
}

#[test]
fn bad_arguments_are_one_line_and_exit_2() {
    let (_tmp, db) = seeded();
    let err = usage_error(&["get", "--path", &db]);
    assert_eq!(
        err,
        "tuplekv: the following required arguments were not provided: <KEY> \
         (see `tuplekv get --help`)"
    );
    let err = usage_error(&["get", "--path", &db, "--url", "http://127.0.0.1:1", "[1]"]);
    assert!(
        err.contains("'--path <PATH>' cannot be used with '--url <URL>'"),
        "{err}"
    );
    assert!(err.ends_with("(see `tuplekv get --help`)"), "{err}");
    let err = usage_error(&["list", "--path", &db, "--nope"]);
    assert!(err.contains("unexpected argument '--nope' found"), "{err}");
    assert!(err.ends_with("(see `tuplekv list --help`)"), "{err}");
    let err = usage_error(&["set", "--path", &db, "[1]"]);
    assert!(
        err.contains("required arguments were not provided"),
        "{err}"
    );
    let err = usage_error(&["set", "--path", &db, "[1]", "--u64", "x"]);
    assert!(err.contains("invalid value 'x' for '--u64 <N>'"), "{err}");
    let err = usage_error(&["frobnicate"]);
    assert!(
        err.contains("unrecognized subcommand 'frobnicate'"),
        "{err}"
    );
    assert!(err.ends_with("(see `tuplekv --help`)"), "{err}");
    // No subcommand at all: clap's help, on stderr, exit 2.
    let bare = tuplekv(&[]).output().unwrap();
    assert_eq!(bare.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bare.stderr).contains("Usage: tuplekv <COMMAND>"));
    usage_error(&["restore", "--path", &db]);

    // Help and version print as usual and succeed.
    for args in [vec!["--help"], vec!["get", "--help"], vec!["help", "load"]] {
        let out = ok(&args);
        assert!(out.contains("Usage: tuplekv"), "{args:?}: {out}");
    }
    assert!(ok(&["--version"]).starts_with("tuplekv "));
    assert!(ok(&["load", "--help"]).contains("keeps every entry's versionstamp"));
}
