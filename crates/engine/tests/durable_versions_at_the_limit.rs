//! Files that claim the last possible version, found by the `recovery` fuzz target (its
//! synthesized mode; a minimal input is `01 00 00 01 ff 76 00 ff ff`, a segment from version 1
//! holding a commit at `u64::MAX`). No real history gets there (it would take 2^64 commits),
//! so such a file is damage or a file from elsewhere with valid checksums, and recovery must
//! refuse it, or at least open a database that refuses the next commit with an error.
//!
//! What broke: recovery accepts any version up to `u64::MAX`, in a checkpoint's name and
//! trailer or in a commit frame, and the version after it is then computed with a plain `+ 1`.
//! A checkpoint at `u64::MAX` with no segment makes `Database::open` itself overflow while
//! naming the segment it starts (`durable/mod.rs`, `last + 1`); a segment whose last commit is
//! at `u64::MAX` opens, and the first commit overflows the version counter (`db.rs`,
//! `try_apply_write`). Debug builds panic; release builds, which do not check overflow, wrap
//! the version to 0 instead (what follows from that is not explored here).
//!
//! Now recovery refuses any version above `limits::VERSION_MAX` as damage, and a commit past
//! it fails with `Error::VersionsExhausted`: tests at the limit and past it below.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::fs;
use std::path::Path;

use tuplekv_engine::limits::VERSION_MAX;
use tuplekv_engine::{Database, Error, key};
use tuplekv_testkit::db::options;
use tuplekv_testkit::recovery::{empty_checkpoint, log_segment};

/// Opens `dir`, where `file` claims the last possible version: the directory is refused as
/// damage naming that file, or the database opens and refuses a commit with an error, and
/// nothing panics.
fn refused_or_takes_no_commit(dir: &Path, file: &Path) {
    match Database::open(dir, options()) {
        Err(Error::Corrupt { path, .. }) => assert_eq!(path, file),
        Err(e) => panic!("expected Corrupt naming {}, got {e}", file.display()),
        Ok(db) => {
            let committed = db.set(&key!["k"], b"v");
            assert!(committed.is_err(), "a commit after u64::MAX: {committed:?}");
        }
    }
}

#[test]
fn a_checkpoint_at_the_last_version_is_refused_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join(format!("checkpoint-{:020}.ckpt", u64::MAX));
    fs::write(&checkpoint, empty_checkpoint(u64::MAX)).unwrap();
    refused_or_takes_no_commit(dir.path(), &checkpoint);
}

#[test]
fn a_log_ending_at_the_last_version_is_refused_or_takes_no_commit() {
    let dir = tempfile::tempdir().unwrap();
    let segment = dir.path().join(format!("wal-{:020}.log", 1));
    fs::write(&segment, log_segment(1, &[1, u64::MAX])).unwrap();
    refused_or_takes_no_commit(dir.path(), &segment);
}

/// A log whose last commit is at `last`, in a fresh directory.
fn log_ending_at(last: u64) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let segment = dir.path().join(format!("wal-{:020}.log", 1));
    fs::write(&segment, log_segment(1, &[1, last])).unwrap();
    (dir, segment)
}

#[test]
fn a_log_ending_at_version_max_opens_and_refuses_the_next_commit_by_name() {
    let (dir, _) = log_ending_at(VERSION_MAX);
    let db = Database::open(dir.path(), options()).unwrap();
    assert_eq!(db.current_versionstamp().version(), VERSION_MAX);
    let err = db.set(&key!["k"], b"v").unwrap_err();
    assert!(
        matches!(err, Error::VersionsExhausted { last } if last == VERSION_MAX),
        "{err}"
    );
    assert_eq!(db.get(&key!["k"]).unwrap(), None, "nothing written");
}

#[test]
fn a_log_ending_one_below_version_max_takes_exactly_one_more_commit() {
    let (dir, _) = log_ending_at(VERSION_MAX - 1);
    let db = Database::open(dir.path(), options()).unwrap();
    assert_eq!(db.set(&key!["a"], b"v").unwrap().version(), VERSION_MAX);
    assert!(matches!(
        db.set(&key!["b"], b"v"),
        Err(Error::VersionsExhausted { .. })
    ));
}

#[test]
fn a_commit_past_version_max_is_corrupt_naming_its_file() {
    let (dir, segment) = log_ending_at(VERSION_MAX + 1);
    match Database::open(dir.path(), options()) {
        Err(Error::Corrupt { path, reason, .. }) => {
            assert_eq!(path, segment);
            assert!(reason.contains("above the last possible"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_checkpoint_named_past_version_max_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir
        .path()
        .join(format!("checkpoint-{:020}.ckpt", VERSION_MAX + 1));
    fs::write(&checkpoint, empty_checkpoint(VERSION_MAX + 1)).unwrap();
    assert!(matches!(
        Database::open(dir.path(), options()),
        Err(Error::Corrupt { path, .. }) if path == checkpoint
    ));
}
