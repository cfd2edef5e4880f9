//! A failed `fsync` (or a sync that cannot get a file handle): the commits it covered fail
//! and nothing unacknowledged survives, a power cut afterwards leaves a prefix of the commits
//! with no hole, a commit waiting on rolled-back versions answers, and the final sync of a
//! close or a drop fails safe. These tests state the current policy (the log is rebuilt from
//! memory and writes go on); they were moved here unchanged from `durability.rs`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tuplekv_engine::durable::fs::{Faults, FaultyFs};
use tuplekv_engine::{Database, Durability, Error, Options, key};
use tuplekv_testkit::db::{dump, keys, options};
use tuplekv_testkit::durable::{BUFFERED, faulty, files, newest_segment, reopen_unchanged};

#[test]
fn a_failed_fsync_fails_the_commit_and_nothing_unacknowledged_survives() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let opts = Options {
        fs: Arc::new(FaultyFs::new(Arc::clone(&faults))),
        ..options()
    };
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    let before = dump(&db);
    faults.fail_sync(true);
    assert!(matches!(db.set(&key!["b"], b"2"), Err(Error::Io { .. })));
    assert!(matches!(db.set(&key!["b"], b"2"), Err(Error::Io { .. })));
    assert_eq!(dump(&db), before);
    faults.fail_sync(false);
    db.set(&key!["c"], b"3").unwrap();
    let after = dump(&db);
    db.close().unwrap();
    let db = Database::open(dir.path(), opts).unwrap();
    assert_eq!(dump(&db), after);
    assert_eq!(db.get(&key!["b"]).unwrap(), None);
}

/// Opens what a power cut now would leave of `dir` (in a new directory).
fn after_power_cut(faults: &Faults, dir: &Path) -> (tempfile::TempDir, Database) {
    let image = tempfile::tempdir().unwrap();
    faults.power_cut_image(dir, image.path()).unwrap();
    let db = Database::open(image.path(), options()).unwrap();
    (image, db)
}

#[test]
fn a_failed_buffered_sync_never_leaves_a_hole_after_a_power_cut() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    db.sync().unwrap();
    db.set(&key!["b"], b"2").unwrap();
    db.set(&key!["c"], b"3").unwrap();
    // The sync fails and (as on Linux) drops b and c from the page cache; a retried sync
    // of the same file would succeed without them.
    faults.fail_next_syncs(1);
    let repaired = db.sync();
    db.set(&key!["d"], b"4").unwrap();
    db.sync().unwrap();
    let want = keys(&db);
    assert_eq!(want.len(), 4);
    let (_image, crashed) = after_power_cut(&faults, dir.path());
    assert_eq!(
        keys(&crashed),
        want,
        "acknowledged b and c lost while d survived"
    );
    // The log was rebuilt from memory, so the failed sync cost nothing.
    repaired.unwrap();
}

#[test]
fn power_cuts_between_repeated_failed_syncs_lose_only_unsynced_commits() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    let (mut synced, mut failed) = (0, 0);
    for i in 1..=120u64 {
        db.set(&key!["k", i], b"v").unwrap();
        if i % 7 == 0 {
            if i % 21 == 0 {
                faults.fail_next_syncs(1);
            }
            match db.sync() {
                Ok(()) => synced = i,
                Err(_) => failed += 1,
            }
        }
        if i % 10 == 0 {
            // A power cut now keeps a prefix of the commits: everything synced, no holes.
            let (_image, crashed) = after_power_cut(&faults, dir.path());
            let got: Vec<u64> = (1..=i)
                .take_while(|&j| crashed.get(&key!["k", j]).unwrap().is_some())
                .collect();
            assert!(
                got.len() as u64 >= synced,
                "after {i}: synced {synced}, kept {got:?}"
            );
            assert_eq!(dump(&crashed).len(), got.len(), "after {i}: a hole");
        }
    }
    // Each failed sync was answered by rebuilding the log, so the sync itself succeeded.
    assert_eq!(failed, 0);
}

#[test]
fn a_log_that_cannot_be_repaired_fails_commits_naming_the_sync_failure() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    faults.fail_sync(true);
    assert!(matches!(db.sync(), Err(Error::Io { .. })));
    let err = db.set(&key!["b"], b"2").unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("unusable since") && message.contains("fsync failed (injected)"),
        "{message}"
    );
    assert_eq!(db.get(&key!["b"]).unwrap(), None);
    faults.fail_sync(false);
    db.set(&key!["c"], b"3").unwrap();
    db.sync().unwrap();
    let (_image, crashed) = after_power_cut(&faults, dir.path());
    assert_eq!(keys(&crashed), keys(&db));
    assert!(crashed.get(&key!["a"]).unwrap().is_some());
}

#[test]
fn a_failed_fsync_retires_the_segment_and_rebuilds_the_log_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    let failed_on = newest_segment(dir.path());
    faults.fail_next_syncs(1);
    let err = db.set(&key!["b"], b"2").unwrap_err();
    assert!(err.to_string().contains("fsync failed (injected)"), "{err}");
    // Nothing is written to (or synced on) that file again.
    assert!(!failed_on.exists(), "{} still in use", failed_on.display());
    assert_eq!(files(dir.path(), "ckpt").len(), 1);
    db.set(&key!["c"], b"3").unwrap();
    let (_image, crashed) = after_power_cut(&faults, dir.path());
    assert_eq!(keys(&crashed), keys(&db));
    assert_eq!(crashed.get(&key!["b"]).unwrap(), None);
}

/// Runs `f` on another thread and waits at most ten seconds for it: a hang fails the test
/// instead of stalling the run.
fn within_seconds<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("still waiting after 10 s: hung")
}

/// After a rolled-back commit the commit counter stays above the published version; a
/// commit whose check then failed waited for that version to be published, forever.
#[test]
fn a_failing_check_after_a_rolled_back_commit_answers_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    faults.fail_next_syncs(1);
    db.set(&key!["b"], b"2").unwrap_err();
    let (checked, refused) = within_seconds(move || {
        let checked = db
            .atomic()
            .check(&key!["a"], None)
            .set(&key!["a"], b"x")
            .commit();
        let refused = db.atomic().sum(&key!["a"], 1).commit();
        (checked, refused)
    });
    assert!(!checked.unwrap().is_committed());
    assert!(refused.is_err());
}

/// A sync that could not get a second handle on the segment poisons nothing, so there was
/// nothing to repair, and the sync reported success with nothing synced.
#[test]
fn a_sync_that_cannot_get_a_file_handle_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    faults.fail_clone(true);
    let err = db.sync().unwrap_err();
    assert!(err.to_string().contains("too many open files"), "{err}");
    faults.fail_clone(false);
    db.sync().unwrap();
    let (_image, crashed) = after_power_cut(&faults, dir.path());
    assert_eq!(keys(&crashed), keys(&db));
}

/// Commits, makes the final sync fail, ends the handle with `end`, and checks that a power
/// cut after it loses nothing: the failed sync must rebuild the log from memory.
fn final_sync_failure_loses_nothing(end: impl FnOnce(Database)) {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    db.set(&key!["b"], b"2").unwrap();
    let want = keys(&db);
    faults.fail_next_syncs(1);
    end(db);
    let (_image, crashed) = after_power_cut(&faults, dir.path());
    assert_eq!(keys(&crashed), want);
}

/// `close` let go of the database before its final sync, so a failed sync could not
/// rebuild the log from memory and the close failed, with acknowledged commits unsynced.
#[test]
fn close_rebuilds_the_log_when_its_final_sync_fails() {
    final_sync_failure_loses_nothing(|db| db.close().unwrap());
}

/// Dropping the last handle without `close` runs the same final sync; it used to run after
/// the in-memory state was freed, so a failed final sync could not rebuild the log.
#[test]
fn dropping_the_database_rebuilds_the_log_when_its_final_sync_fails() {
    final_sync_failure_loses_nothing(drop);
}

/// A rebuild that could not delete the segments it replaced forgot them, so they stayed on
/// disk until the next open.
#[test]
fn segments_a_rebuild_could_not_remove_go_with_the_next_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let opts = faulty(&faults, Durability::Sync);
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    faults.fail_remove(true);
    faults.fail_next_syncs(1);
    db.set(&key!["b"], b"2").unwrap_err();
    assert_eq!(files(dir.path(), "log").len(), 2);
    faults.fail_remove(false);
    db.set(&key!["c"], b"3").unwrap();
    db.checkpoint().unwrap();
    assert_eq!(
        files(dir.path(), "log").len(),
        1,
        "a replaced segment is left"
    );
    reopen_unchanged(db, dir.path(), opts);
}
