//! `tuplekv backup` and `tuplekv restore` on temporary directories: a backup restores to the
//! same entries (values, versionstamps, deadlines) and the restored database commits above
//! them; every bad input (a missing or non-database source, a database another process
//! holds, an existing target, a damaged backup) gets one line, exit 1, and leaves nothing
//! written.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common_cli;

use std::path::Path;
use std::time::Duration;

use common_cli::*;
use tuplekv_engine::{Database, Options, Value, key};

/// A closed database in `dir` with every value kind, a deadline, an overwrite and a delete.
fn make_database(dir: &Path) -> Vec<Row> {
    let db = Database::open(dir, Options::default()).unwrap();
    db.set(&key!["users", 1], b"Ada").unwrap();
    db.set(&key!["users", 2], b"Grace").unwrap();
    db.set(&key!["users", 2], b"Grace Hopper").unwrap();
    db.set(&key!["count"], 7u64).unwrap();
    let v8 = Value::V8(vec![0xff, 0x0f, 0x22, 0x01, b'x'].into());
    assert!(
        db.atomic()
            .set(&key!["v8"], v8)
            .commit()
            .unwrap()
            .is_committed()
    );
    let day = Duration::from_secs(86_400);
    let session = db.atomic().set_with_expiry(&key!["session"], b"s", day);
    assert!(session.commit().unwrap().is_committed());
    db.set(&key!["gone"], b"x").unwrap();
    db.delete(&key!["gone"]).unwrap();
    let rows = rows_of(&db);
    db.close().unwrap();
    rows
}

#[test]
fn a_backup_restores_to_the_same_entries_and_commits_continue_above() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, backup, restored) = (
        tmp.path().join("db"),
        tmp.path().join("backup"),
        tmp.path().join("restored"),
    );
    let rows = make_database(&db);
    assert!(rows.iter().any(|r| r.3.is_some()), "a deadline is tested");

    let out = succeeds(&[&"backup", &"--path", &db, &backup]);
    assert!(out.starts_with("backed up "), "{out}");
    let out = succeeds(&[&"restore", &backup, &"--path", &restored]);
    assert!(out.contains("5 keys"), "{out}");
    assert_eq!(rows_in(&restored), rows);
    assert_eq!(rows_in(&backup), rows, "the backup opens too");
    assert_eq!(rows_in(&db), rows, "the source is unchanged");

    let reopened = Database::open(&restored, Options::default()).unwrap();
    let last = rows.iter().map(|r| r.2).max().unwrap();
    assert!(reopened.set(&key!["after"], b"x").unwrap() > last);
    reopened.close().unwrap();
    assert_eq!(names_in(tmp.path()), ["backup", "db", "restored"]);
}

#[test]
fn backup_and_restore_report_json_and_accept_an_empty_target_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, backup, restored) = (
        tmp.path().join("db"),
        tmp.path().join("backup"),
        tmp.path().join("restored"),
    );
    let rows = make_database(&db);
    std::fs::create_dir(&backup).unwrap();
    std::fs::create_dir(&restored).unwrap();
    let out = succeeds(&[&"backup", &"--json", &"--path", &db, &backup]);
    let backed_up: serde_json::Value = serde_json::from_str(&out).unwrap();
    let newest = rows.iter().map(|r| r.2).max().unwrap().to_string();
    let at = backed_up["versionstamp"].as_str().unwrap();
    assert!(at >= newest.as_str(), "{at} is the database's last commit");
    let out = succeeds(&[&"restore", &"--json", &backup, &"--path", &restored]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["keys"], 5);
    assert_eq!(
        json["versionstamp"], at,
        "the restored database is at the backup's stamp"
    );
    assert_eq!(rows_in(&restored), rows);
}

#[test]
fn backup_refuses_bad_sources_and_targets_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    make_database(&db);
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("keep"), b"mine").unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, b"a file").unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let target = tmp.path().join("target");

    fails_with(&[&"backup", &"--path", &db, &full], "already exists");
    fails_with(&[&"backup", &"--path", &db, &file], "already exists");
    let missing = tmp.path().join("missing");
    fails_with(&[&"backup", &"--path", &missing, &target], "does not exist");
    fails_with(
        &[&"backup", &"--path", &empty, &target],
        "not a tuplekv database",
    );
    fails_with(
        &[&"backup", &"--path", &file, &target],
        "not a database directory",
    );

    let open = Database::open(&db, Options::default()).unwrap();
    fails_with(
        &[&"backup", &"--path", &db, &target],
        "open in another process",
    );
    open.close().unwrap();

    assert_eq!(std::fs::read(full.join("keep")).unwrap(), b"mine");
    assert_eq!(std::fs::read(&file).unwrap(), b"a file");
    assert!(!missing.exists(), "a missing source is not created");
    assert_eq!(
        names_in(&empty),
        Vec::<String>::new(),
        "nor made a database"
    );
    assert_eq!(names_in(tmp.path()), ["db", "empty", "file", "full"]);
}

#[test]
fn restore_never_writes_over_a_database_and_refuses_bad_backups() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, backup) = (tmp.path().join("db"), tmp.path().join("backup"));
    let rows = make_database(&db);
    succeeds(&[&"backup", &"--path", &db, &backup]);
    let other = tmp.path().join("other");
    let other_rows = make_database(&other);
    let target = tmp.path().join("target");

    fails_with(&[&"restore", &backup, &"--path", &other], "already exists");
    assert_eq!(
        rows_in(&other),
        other_rows,
        "the existing database is untouched"
    );

    let missing = tmp.path().join("missing");
    fails_with(
        &[&"restore", &missing, &"--path", &target],
        "does not exist",
    );
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    fails_with(
        &[&"restore", &empty, &"--path", &target],
        "not a tuplekv database",
    );

    let open = Database::open(&db, Options::default()).unwrap();
    fails_with(
        &[&"restore", &db, &"--path", &target],
        "open in another process",
    );
    open.close().unwrap();

    // A damaged backup: one byte of its checkpoint flipped.
    let damaged = tmp.path().join("damaged");
    succeeds(&[&"backup", &"--path", &db, &damaged]);
    let checkpoint = names_in(&damaged)
        .into_iter()
        .find(|n| n.ends_with(".ckpt"));
    let checkpoint = damaged.join(checkpoint.unwrap());
    let mut bytes = std::fs::read(&checkpoint).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&checkpoint, bytes).unwrap();
    fails_with(
        &[&"restore", &damaged, &"--path", &target],
        "does not open as a database",
    );

    assert!(!target.exists(), "no half-written target");
    assert_eq!(
        names_in(tmp.path()),
        ["backup", "damaged", "db", "empty", "other"]
    );
    succeeds(&[&"restore", &backup, &"--path", &target]);
    assert_eq!(rows_in(&target), rows);
}

#[test]
fn a_backup_over_a_url_copies_a_running_servers_database_with_its_deadlines() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, backup) = (tmp.path().join("db"), tmp.path().join("backup"));
    make_database(&db);
    // More than one list batch (1000 entries) to read over the wire.
    let more = Database::open(&db, Options::default()).unwrap();
    for chunk in 0..5u64 {
        let mut atomic = more.atomic();
        for i in 0..500 {
            atomic = atomic.set(&key!["many", chunk * 500 + i], i);
        }
        assert!(atomic.commit().unwrap().is_committed());
    }
    let rows = rows_of(&more);
    assert_eq!(rows.len(), 2505);
    more.close().unwrap();
    let server = Server::start(&db);
    fails_with(
        &[&"backup", &"--path", &db, &backup],
        "open in another process",
    );
    let out = succeeds(&[
        &"backup",
        &"--url",
        &server.url,
        &"--access-token",
        &TOKEN,
        &backup,
    ]);
    assert!(out.contains(&server.url), "{out}");
    assert_eq!(rows_in(&backup), rows, "values, stamps and deadlines");

    let wrong = tmp.path().join("wrong");
    fails_with(
        &[
            &"backup",
            &"--url",
            &server.url,
            &"--access-token",
            &"not-the-token-at-all",
            &wrong,
        ],
        "cannot connect",
    );
    drop(server);
    assert_eq!(names_in(tmp.path()), ["backup", "db"]);
}
