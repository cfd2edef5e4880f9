//! Reopening a durable database: every commit and expiry deadline survives a close and a
//! restart (buffered commits too), stamps continue above the recovered ones, a directory is
//! open in one handle at a time, and a model test with reopen and checkpoint steps. The
//! SIGKILL crash test is in `crash.rs`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use proptest::prelude::*;
use tuplekv_engine::{Database, Durability, Error, Options, Versionstamp, key};
use tuplekv_testkit::config::proptest_config;
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

/// One step of the model test.
#[derive(Debug, Clone)]
enum Step {
    Set(u8, u8),
    Delete(u8),
    Sum(u8, u64),
    CheckedSet(u8, u8),
    Reopen,
    Checkpoint,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..12, any::<u8>()).prop_map(|(k, v)| Step::Set(k, v)),
        2 => (0u8..12).prop_map(Step::Delete),
        2 => (0u8..12, 0u64..5).prop_map(|(k, n)| Step::Sum(k, n)),
        2 => (0u8..12, any::<u8>()).prop_map(|(k, v)| Step::CheckedSet(k, v)),
        1 => Just(Step::Reopen),
        1 => Just(Step::Checkpoint),
    ]
}

/// Runs a step on a database; returns its outcome in a comparable form.
fn run(db: &Database, step: &Step) -> String {
    match step {
        Step::Set(k, v) => format!("{:?}", db.set(&key!["k", *k], vec![*v]).map(|_| ())),
        Step::Delete(k) => format!("{:?}", db.delete(&key!["k", *k]).map(|_| ())),
        Step::Sum(k, n) => format!(
            "{:?}",
            db.atomic()
                .sum(&key!["k", *k], *n)
                .commit()
                .map(|r| r.is_committed())
        ),
        Step::CheckedSet(k, v) => {
            let key = key!["k", *k];
            let seen = db.get(&key).unwrap().map(|e| e.versionstamp);
            format!(
                "{:?}",
                db.atomic()
                    .check(&key, seen)
                    .set(&key, vec![*v])
                    .commit()
                    .map(|r| r.is_committed())
            )
        }
        Step::Reopen | Step::Checkpoint => String::new(),
    }
}

proptest! {
    #![proptest_config(proptest_config(24, "durable_reopen.txt"))]

    /// Random operations with reopens and checkpoints interleaved, against the in-memory
    /// engine as the reference: after every step both hold the same entries and stamps.
    #[test]
    fn durable_database_matches_the_in_memory_engine_across_reopens(
        steps in proptest::collection::vec(step(), 1..60)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let model = Database::with_options(options());
        let mut db = Some(Database::open(dir.path(), options()).unwrap());
        for s in &steps {
            match s {
                Step::Reopen => {
                    db.take().unwrap().close().unwrap();
                    db = Some(Database::open(dir.path(), options()).unwrap());
                }
                Step::Checkpoint => {
                    db.as_ref().unwrap().checkpoint().unwrap();
                }
                other => {
                    let got = run(db.as_ref().unwrap(), other);
                    let want = run(&model, other);
                    prop_assert_eq!(got, want, "step {:?}", other);
                }
            }
            prop_assert_eq!(dump(db.as_ref().unwrap()), dump(&model), "after {:?}", s);
        }
    }
}
