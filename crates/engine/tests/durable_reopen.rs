//! Reopening a durable database: every commit and expiry deadline survives a close and a
//! restart (buffered commits too), stamps continue above the recovered ones, a directory is
//! open in one handle at a time. The model test with reopens and faults is in
//! `durable_model.rs`, the SIGKILL crash test in `crash.rs`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use tuplekv_engine::{Database, Durability, Error, Options, Versionstamp, key};
use tuplekv_testkit::db::{dump, options};

#[test]
fn reopen_keeps_every_commit_and_stamps_continue_above_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    let mut last = Versionstamp::ZERO;
    for i in 0..100u64 {
        last = db.set(&key!["k", i], format!("v{i}").as_bytes()).unwrap();
    }
    assert!(
        db.atomic()
            .sum(&key!["n"], 5)
            .commit()
            .unwrap()
            .is_committed()
    );
    db.delete(&key!["k", 7u64]).unwrap();
    let before = dump(&db);
    db.close().unwrap();

    let db = Database::open(dir.path(), options()).unwrap();
    assert_eq!(dump(&db), before);
    let report = db.recovery_report().unwrap();
    assert_eq!(report.records_replayed, 102);
    assert_eq!(report.truncated, None);
    let next = db.set(&key!["after"], b"x").unwrap();
    assert!(next > last && next > report.last_versionstamp);
}

#[test]
fn second_open_of_an_open_directory_is_refused_until_it_closes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    let clone = db.clone();
    let err = Database::open(dir.path(), options()).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    assert!(err.to_string().contains("already open"));
    drop(db);
    // A clone still holds it.
    assert!(matches!(
        Database::open(dir.path(), options()),
        Err(Error::Locked { .. })
    ));
    drop(clone);
    Database::open(dir.path(), options()).unwrap();
}

#[test]
fn an_open_waits_briefly_for_a_lock_that_is_being_released() {
    // A child process started between a close and the next open holds a copy of the lock
    // file until it execs; the open waits that moment out instead of failing now and then.
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    db.set(&key!["k"], b"v").unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        db.close().unwrap();
    });
    let reopened = Database::open(dir.path(), options()).unwrap();
    closer.join().unwrap();
    assert!(reopened.get(&key!["k"]).unwrap().is_some());
}

#[test]
fn expiry_deadlines_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    let res = db
        .atomic()
        .set_with_expiry(&key!["short"], b"s", Duration::from_millis(30))
        .set_with_expiry(&key!["long"], b"l", Duration::from_secs(3600))
        .commit()
        .unwrap();
    assert!(res.is_committed());
    db.close().unwrap();
    std::thread::sleep(Duration::from_millis(60));
    let db = Database::open(dir.path(), options()).unwrap();
    assert_eq!(db.get(&key!["short"]).unwrap(), None);
    assert!(db.get(&key!["long"]).unwrap().is_some());
    // Also through a checkpoint.
    db.checkpoint().unwrap();
    db.close().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    assert!(db.get(&key!["long"]).unwrap().is_some());
    assert_eq!(db.get(&key!["short"]).unwrap(), None);
}

#[test]
fn buffered_commits_survive_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        durability: Durability::Buffered {
            interval: Duration::from_millis(50),
        },
        ..options()
    };
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    for i in 0..100u64 {
        db.set(&key!["k", i], b"v").unwrap();
    }
    let before = dump(&db);
    drop(db);
    let db = Database::open(dir.path(), opts).unwrap();
    assert_eq!(dump(&db), before);
}
