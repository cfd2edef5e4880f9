//! A failed `fsync` (or a sync that cannot get a file handle) stops the database from
//! accepting writes (fail-stop): the commits it covered fail, every later write fails naming
//! it, reads go on, and a reopen (or a power cut) recovers exactly what was synced, with no
//! hole. A commit waiting on rolled-back versions still answers, and the final sync of a close
//! or a drop fails safe.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::fs;
use std::path::Path;
use std::time::Duration;

use tuplekv_engine::durable::fs::Faults;
use tuplekv_engine::{Database, Durability, Error, Health, Store, key};
use tuplekv_testkit::db::{dump, keys, options};
use tuplekv_testkit::durable::{BUFFERED, faulty, newest_segment};

/// Fail-stop: after a failed fsync every write fails, also once syncs work again, and reads
/// go on; a reopen recovers exactly what was acknowledged.
#[test]
fn a_failed_fsync_stops_writes_until_a_reopen_recovers_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let opts = faulty(&faults, Durability::Sync);
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    let before = dump(&db);
    faults.fail_sync(true);
    assert!(matches!(db.set(&key!["b"], b"2"), Err(Error::Io { .. })));
    faults.fail_sync(false);
    let err = db.set(&key!["c"], b"3").unwrap_err();
    assert!(
        err.to_string().contains("stopped accepting writes"),
        "{err}"
    );
    assert!(db.sync().is_err());
    assert_eq!(dump(&db), before, "reads go on, and see no failed commit");
    assert!(db.close().is_err(), "closing reports the stop");
    let db = Database::open(dir.path(), opts).unwrap();
    assert_eq!(dump(&db), before);
    db.set(&key!["d"], b"4").unwrap();
    assert_eq!(db.get(&key!["b"]).unwrap(), None);
}

/// `health` reports the fail-stop: ready while the log runs, not ready (with the error writes
/// get) once a sync failed, also after syncs work again, and ready after a reopen.
#[test]
fn health_is_not_ready_after_a_failed_fsync_until_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let opts = faulty(&faults, Durability::Sync);
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    assert_eq!(db.health(), Health::Ready);
    faults.fail_sync(true);
    assert!(db.set(&key!["b"], b"2").is_err());
    faults.fail_sync(false);
    let Health::NotReady(reason) = db.health() else {
        panic!("ready after a failed sync");
    };
    assert!(reason.contains("stopped accepting writes"), "{reason}");
    assert!(!reason.contains('\n'), "one line: {reason}");
    let _ = db.close();
    let db = Database::open(dir.path(), opts).unwrap();
    assert!(db.health().is_ready(), "a reopen recovers");
    assert_eq!(Database::in_memory().health(), Health::Ready);
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
    // of the same file would succeed without them. The log stops instead.
    faults.fail_next_syncs(1);
    assert!(db.sync().is_err());
    assert!(
        db.set(&key!["d"], b"4").is_err(),
        "no commit after a failed sync"
    );
    let (_image, crashed) = after_power_cut(&faults, dir.path());
    assert_eq!(keys(&crashed), keys_of(&["a"]));
    drop(db);
    // A reopen without a power cut recovers the same: the file was cut back to what was
    // durable, so nothing read from the page cache can sit below later durable commits.
    let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    assert_eq!(keys(&db), keys_of(&["a"]));
    db.set(&key!["e"], b"5").unwrap();
    db.sync().unwrap();
    let (_image, crashed) = after_power_cut(&faults, dir.path());
    assert_eq!(keys(&crashed), keys_of(&["a", "e"]));
}

/// The encoded keys `["<name>"]` of `names`, sorted.
fn keys_of(names: &[&str]) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = names.iter().map(|n| key![*n].encode()).collect();
    keys.sort();
    keys
}

/// Failed syncs now and then, each followed by a reopen (the database stops writing after
/// one), with power cuts between: every power cut keeps a prefix of the commits that holds
/// everything synced, never a hole.
#[test]
fn power_cuts_between_failed_syncs_and_reopens_lose_only_unsynced_commits() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let mut db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    let (mut synced, mut failed) = (0, 0);
    // The commits the database holds: after a failed sync and a reopen, the unsynced ones
    // are gone and are committed again.
    let mut i = 1u64;
    while i <= 120 {
        db.set(&key!["k", i], b"v").unwrap();
        if i.is_multiple_of(7) {
            if i.is_multiple_of(21) {
                faults.fail_next_syncs(1);
            }
            match db.sync() {
                Ok(()) => synced = i,
                Err(_) => {
                    failed += 1;
                    drop(db);
                    db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
                    let kept = dump(&db).len() as u64;
                    assert!(kept >= synced, "after {i}: synced {synced}, kept {kept}");
                    i = kept + 1;
                    continue;
                }
            }
        }
        if i.is_multiple_of(10) {
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
        i += 1;
    }
    assert!(failed >= 3, "{failed} failed syncs");
}

#[test]
fn after_a_failed_sync_every_write_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    db.sync().unwrap();
    db.set(&key!["b"], b"2").unwrap();
    faults.fail_sync(true);
    assert!(matches!(db.sync(), Err(Error::Io { .. })));
    let err = db.set(&key!["c"], b"3").unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("stopped accepting writes") && message.contains("fsync failed (injected)"),
        "{message}"
    );
    assert_eq!(db.get(&key!["c"]).unwrap(), None);
    assert!(db.checkpoint().is_err());
    faults.fail_sync(false);
    assert!(
        db.set(&key!["c"], b"3").is_err(),
        "syncs work again, the stop stays"
    );
    let (_image, crashed) = after_power_cut(&faults, dir.path());
    assert_eq!(keys(&crashed), keys_of(&["a"]));
}

#[test]
fn a_failed_fsync_cuts_the_failed_batch_off_and_a_reopen_recovers_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    let failed_on = newest_segment(dir.path());
    let durable = fs::metadata(&failed_on).unwrap().len();
    faults.fail_next_syncs(1);
    let err = db.set(&key!["b"], b"2").unwrap_err();
    assert!(err.to_string().contains("fsync failed (injected)"), "{err}");
    assert!(
        fs::metadata(&failed_on).unwrap().len() <= durable,
        "the failed frame is cut off"
    );
    assert!(db.set(&key!["c"], b"3").is_err());
    let (_image, crashed) = after_power_cut(&faults, dir.path());
    assert_eq!(keys(&crashed), keys_of(&["a"]));
    drop(db);
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    assert_eq!(keys(&db), keys_of(&["a"]));
    db.set(&key!["c"], b"3").unwrap();
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

/// A sync that could not get a second handle on the segment once reported success with
/// nothing synced. Nothing failed on the file, so the log goes on.
#[test]
fn a_sync_that_cannot_get_a_file_handle_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    // The first commit reserves versions, which syncs; the second stays unsynced.
    db.set(&key!["a"], b"1").unwrap();
    db.set(&key!["b"], b"2").unwrap();
    faults.fail_clone(true);
    let err = db.sync().unwrap_err();
    assert!(err.to_string().contains("too many open files"), "{err}");
    faults.fail_clone(false);
    db.sync().unwrap();
    let (_image, crashed) = after_power_cut(&faults, dir.path());
    assert_eq!(keys(&crashed), keys(&db));
}

/// Commits, makes the final sync fail, ends the handle with `end`, and checks that what
/// survives is a prefix holding everything synced, after a power cut and after a reopen.
fn final_sync_failure_keeps_a_synced_prefix(end: impl FnOnce(Database)) {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    db.sync().unwrap();
    db.set(&key!["b"], b"2").unwrap();
    faults.fail_next_syncs(1);
    end(db);
    let (_image, crashed) = after_power_cut(&faults, dir.path());
    assert_eq!(keys(&crashed), keys_of(&["a"]));
    let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    assert_eq!(keys(&db), keys_of(&["a"]));
}

#[test]
fn close_reports_a_failed_final_sync_and_a_reopen_keeps_what_was_synced() {
    final_sync_failure_keeps_a_synced_prefix(|db| {
        let err = db.close().unwrap_err();
        assert!(err.to_string().contains("fsync failed (injected)"), "{err}");
    });
}

/// Dropping the last handle without `close` runs the same final sync.
#[test]
fn dropping_the_database_after_a_failed_final_sync_keeps_what_was_synced() {
    final_sync_failure_keeps_a_synced_prefix(drop);
}
