//! A versionstamp is never handed out twice, across power cuts and reopens, in every
//! durability mode: a client holding a stamp from a commit that a power cut lost must not
//! pass `check(key, stamp)` against a later commit it never saw.
#![allow(clippy::unwrap_used, reason = "tests")]

use tuplekv_engine::durable::VERSIONS_RESERVED_AHEAD;
use tuplekv_engine::durable::fs::Faults;
use tuplekv_engine::{Database, Durability, key};
use tuplekv_testkit::durable::{BUFFERED, faulty};

/// Commits `a` and syncs, then commits `b` unsynced, and returns `b`'s stamp with the
/// database that a power cut now leaves (opened in `after` mode).
fn lose_the_last_commit(
    before: Durability,
    after: Durability,
) -> (tuplekv_engine::Versionstamp, Database, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, before)).unwrap();
    db.set(&key!["a"], 1u64).unwrap();
    db.sync().unwrap();
    let lost = db.set(&key!["b"], 2u64).unwrap();
    let image = tempfile::tempdir().unwrap();
    faults.power_cut_image(dir.path(), image.path()).unwrap();
    drop(db);
    let crashed = Database::open(image.path(), faulty(&Faults::new(), after)).unwrap();
    assert_eq!(
        crashed.get(&key!["b"]).unwrap(),
        None,
        "the unsynced commit is lost (Buffered allows it)"
    );
    (lost, crashed, image)
}

#[test]
fn a_commit_after_a_buffered_power_cut_never_reuses_a_lost_commits_stamp() {
    let (lost, crashed, _image) = lose_the_last_commit(BUFFERED, BUFFERED);
    let next = crashed.set(&key!["c"], 3u64).unwrap();
    assert!(
        next > lost,
        "{next:?} handed out again after {lost:?} was lost"
    );
    // A client that read `b` at the lost stamp cannot pass a check against the new state.
    let stale = crashed
        .atomic()
        .check(&key!["c"], Some(lost))
        .set(&key!["c"], 4u64)
        .commit()
        .unwrap();
    assert!(!stale.is_committed());
}

#[test]
fn a_buffered_log_reopened_in_sync_mode_still_numbers_above_the_lost_stamps() {
    let (lost, crashed, _image) = lose_the_last_commit(BUFFERED, Durability::Sync);
    assert!(crashed.set(&key!["c"], 3u64).unwrap() > lost);
}

/// The reservation moves into each new segment, so a checkpoint that deletes the segment
/// holding it does not forget it; and a reopen with nothing committed since still numbers
/// above it.
#[test]
fn the_reservation_survives_checkpoints_and_empty_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
    db.set(&key!["a"], 1u64).unwrap();
    db.checkpoint().unwrap();
    let lost = db.set(&key!["b"], 2u64).unwrap();
    let image = tempfile::tempdir().unwrap();
    faults.power_cut_image(dir.path(), image.path()).unwrap();
    drop(db);
    let options = || faulty(&Faults::new(), BUFFERED);
    let db = Database::open(image.path(), options()).unwrap();
    assert_eq!(db.get(&key!["b"]).unwrap(), None);
    // Nothing committed: the next open must still know.
    db.checkpoint().unwrap();
    db.close().unwrap();
    let db = Database::open(image.path(), options()).unwrap();
    assert!(db.set(&key!["c"], 3u64).unwrap() > lost);
}

/// In `Sync` mode every acknowledged stamp is durable, so nothing is reserved and a reopen
/// continues right above the last commit.
#[test]
fn sync_mode_reopens_continue_right_after_the_last_commit() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    let last = db.set(&key!["a"], 1u64).unwrap();
    db.close().unwrap();
    let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
    let next = db.set(&key!["b"], 2u64).unwrap();
    assert_eq!(next.version(), last.version() + 1);
}

/// A buffered reopen skips at most the reservation's width.
#[test]
fn a_buffered_reopen_skips_at_most_the_reserved_versions() {
    let (lost, crashed, _image) = lose_the_last_commit(BUFFERED, BUFFERED);
    let next = crashed.set(&key!["c"], 3u64).unwrap();
    assert!(next.version() <= lost.version() + VERSIONS_RESERVED_AHEAD + 1);
}
