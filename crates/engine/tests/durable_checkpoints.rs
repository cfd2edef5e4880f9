//! Checkpoints: they bound the log, recovery starts from the newest one, one runs in the
//! background while commits go on, and an expiry deadline passes through checkpoint and
//! recovery unchanged.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::fs;
use std::path::Path;
use std::time::Duration;

use tuplekv_engine::{Database, Durability, Options, key};
use tuplekv_testkit::db::{dump, options};
use tuplekv_testkit::durable::{files, reopen_unchanged};

/// Unix milliseconds now.
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    u64::try_from(since.unwrap().as_millis()).unwrap()
}

/// Whether the newest checkpoint in `dir` holds a little-endian deadline within `window`.
fn checkpoint_holds_deadline(dir: &Path, window: &std::ops::RangeInclusive<u64>) -> bool {
    let bytes = fs::read(files(dir, "ckpt").pop().unwrap()).unwrap();
    bytes
        .windows(8)
        .any(|w| window.contains(&u64::from_le_bytes(w.try_into().unwrap())))
}

#[test]
fn an_expiry_deadline_survives_checkpoint_and_recovery_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    let hour = 3_600_000;
    let before = now_ms();
    let res = db
        .atomic()
        .set_with_expiry(&key!["long"], b"l", Duration::from_millis(hour))
        .commit()
        .unwrap();
    assert!(res.is_committed());
    let window = before + hour..=now_ms() + hour;
    db.checkpoint().unwrap();
    db.close().unwrap();
    assert!(checkpoint_holds_deadline(dir.path(), &window));
    // Recovered from the checkpoint alone, then checkpointed again: the same deadline.
    let db = Database::open(dir.path(), options()).unwrap();
    assert_eq!(db.recovery_report().unwrap().records_replayed, 0);
    db.set(&key!["other"], b"o").unwrap();
    db.checkpoint().unwrap();
    db.close().unwrap();
    assert!(checkpoint_holds_deadline(dir.path(), &window));
    let db = Database::open(dir.path(), options()).unwrap();
    assert!(db.get(&key!["long"]).unwrap().is_some());
}

#[test]
fn checkpoints_bound_the_log_and_recovery_starts_from_them() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        checkpoint_after_bytes: 16 << 10,
        ..options()
    };
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    // Overwrite 50 keys many times: live data stays small while the log grows.
    for round in 0..40u64 {
        let a = (0..50u64).fold(db.atomic(), |a, i| {
            a.set(&key!["k", i], format!("{round:>40}").as_bytes())
        });
        assert!(a.commit().unwrap().is_committed());
    }
    let stamp = db.checkpoint().unwrap().unwrap();
    db.set(&key!["after-checkpoint"], b"x").unwrap();
    let before = dump(&db);
    db.close().unwrap();

    assert_eq!(files(dir.path(), "ckpt").len(), 1);
    assert!(
        files(dir.path(), "log").len() <= 2,
        "{:?}",
        files(dir.path(), "log")
    );
    let total: u64 = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(total < 64 << 10, "directory holds {total} bytes");

    let db = Database::open(dir.path(), opts).unwrap();
    let report = db.recovery_report().unwrap();
    assert_eq!(report.checkpoint, Some(stamp));
    assert_eq!(report.checkpoint_entries, 50);
    assert_eq!(report.records_replayed, 1);
    assert_eq!(dump(&db), before);
}

#[test]
fn background_checkpoint_runs_while_commits_continue() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        checkpoint_after_bytes: 8 << 10,
        durability: Durability::Buffered {
            interval: Duration::from_millis(5),
        },
        ..options()
    };
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    // Commits go on until the background thread has published a checkpoint, rather than
    // stopping and giving it some milliseconds: so it ran while they continued, however the
    // threads were scheduled. It is woken as soon as the log passes the threshold, so a
    // bounded number of commits must see it.
    let mut i = 0u64;
    while i < 3000 || files(dir.path(), "ckpt").is_empty() {
        assert!(i < 1_000_000, "no background checkpoint after {i} commits");
        db.set(&key!["k", i % 100], format!("{i:>30}").as_bytes())
            .unwrap();
        i += 1;
    }
    reopen_unchanged(db, dir.path(), opts);
}
