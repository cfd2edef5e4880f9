//! Damage recovery refuses with `Error::Corrupt`, naming the file (and offset): a flipped
//! bit in the middle of the log, a damaged checkpoint, a hole a later `synced` mark calls
//! durable, a missing segment or checkpoint, a segment named as starting at version 0. And
//! the segments that are all there (left by failed checkpoints) are all replayed.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::fs;
use std::path::{Path, PathBuf};

use tuplekv_engine::durable::fs::Faults;
use tuplekv_engine::{Database, Durability, Error, key};
use tuplekv_testkit::db::{dump, options};
use tuplekv_testkit::durable::{faulty, files, flip, log_len, newest_segment, write_commits};

#[test]
fn a_bit_flip_in_the_middle_of_the_log_is_an_error_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    write_commits(dir.path(), 10);
    let seg = newest_segment(dir.path());
    let middle = fs::metadata(&seg).unwrap().len() / 2;
    flip(&seg, isize::try_from(middle).unwrap(), 0x01);
    let damaged = fs::read(&seg).unwrap();
    let err = Database::open(dir.path(), options()).unwrap_err();
    let Error::Corrupt { path, offset, .. } = &err else {
        panic!("expected Corrupt, got {err}");
    };
    assert_eq!(path, &seg);
    assert!(*offset <= middle && *offset >= 16, "{err}");
    assert!(err.to_string().contains("corrupt at offset"), "{err}");
    // Nothing was changed: the file is as it was.
    assert_eq!(fs::read(&seg).unwrap(), damaged);
}

#[test]
fn a_damaged_checkpoint_is_an_error_not_an_empty_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    for i in 0..20u64 {
        db.set(&key!["k", i], b"v").unwrap();
    }
    db.checkpoint().unwrap();
    db.close().unwrap();
    let ckpt = files(dir.path(), "ckpt").pop().unwrap();
    flip(&ckpt, 40, 0x80);
    let err = Database::open(dir.path(), options()).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { path, .. } if *path == ckpt),
        "{err}"
    );
}

/// The same hole in a batch that a later batch's mark says was durable is real damage.
#[test]
fn a_hole_in_a_batch_a_later_mark_calls_durable_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write_commits(dir.path(), 3);
    let seg = newest_segment(dir.path());
    let mut bytes = fs::read(&seg).unwrap();
    let one = log_len(1);
    bytes[one..one + 12].fill(0);
    fs::write(&seg, &bytes).unwrap();
    let err = Database::open(dir.path(), options()).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { path, offset, .. } if *path == seg && *offset == one as u64),
        "{err}"
    );
}

/// A segment named as starting at version 0 underflowed recovery's bookkeeping: a panic in
/// debug builds, and a skipped check for missing segments in release builds.
#[test]
fn a_segment_named_version_zero_is_corrupt_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    write_commits(dir.path(), 3);
    let zero = dir.path().join(format!("wal-{:020}.log", 0));
    fs::rename(newest_segment(dir.path()), &zero).unwrap();
    let err = Database::open(dir.path(), options()).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { path, .. } if *path == zero),
        "{err}"
    );
}

/// Writes commits across three segments (checkpoints that fail to publish still start new
/// segments) and closes; returns the segments.
fn three_segments(dir: &Path) -> Vec<PathBuf> {
    let faults = Faults::new();
    let opts = faulty(&faults, Durability::Sync);
    let db = Database::open(dir, opts).unwrap();
    faults.fail_rename(true);
    for round in 0..3u64 {
        for i in 0..5u64 {
            db.set(&key!["k", round, i], b"v").unwrap();
        }
        if round < 2 {
            assert!(db.checkpoint().is_err());
        }
    }
    db.close().unwrap();
    let segments = files(dir, "log");
    assert_eq!(segments.len(), 3, "{segments:?}");
    segments
}

#[test]
fn segments_left_by_failed_checkpoints_are_all_replayed() {
    let dir = tempfile::tempdir().unwrap();
    three_segments(dir.path());
    let db = Database::open(dir.path(), options()).unwrap();
    assert_eq!(dump(&db).len(), 15);
}

#[test]
fn a_missing_middle_segment_is_an_error_naming_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let segments = three_segments(dir.path());
    fs::remove_file(&segments[1]).unwrap();
    let err = Database::open(dir.path(), options()).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { path, .. } if *path == segments[2]),
        "{err}"
    );
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn a_missing_checkpoint_is_an_error_not_a_replay_from_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    for i in 0..10u64 {
        db.set(&key!["k", i], b"v").unwrap();
    }
    db.checkpoint().unwrap();
    db.set(&key!["after"], b"v").unwrap();
    db.close().unwrap();
    fs::remove_file(files(dir.path(), "ckpt").pop().unwrap()).unwrap();
    let err = Database::open(dir.path(), options()).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { path, .. } if *path == newest_segment(dir.path())),
        "{err}"
    );
}

/// A checkpoint of 20 keys in `dir`, written by a database that is closed again.
fn write_checkpoint(dir: &Path) -> PathBuf {
    let db = Database::open(dir, options()).unwrap();
    for i in 0..20u64 {
        db.set(&key!["k", i], b"v").unwrap();
    }
    db.checkpoint().unwrap();
    db.close().unwrap();
    files(dir, "ckpt").pop().unwrap()
}

#[test]
fn a_damaged_checkpoint_header_is_reported_at_the_damaged_byte() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = write_checkpoint(dir.path());
    let intact = fs::read(&ckpt).unwrap();
    // Bytes 0..8 are the magic, 8..16 the checkpoint's version (the trailer repeats it,
    // under a checksum, and the damaged byte is where the two first differ).
    for at in 0..16 {
        for mask in [0x01, 0x80] {
            flip(&ckpt, at, mask);
            let err = Database::open(dir.path(), options()).unwrap_err();
            let Error::Corrupt { path, offset, .. } = &err else {
                panic!("byte {at}: expected Corrupt, got {err}");
            };
            assert_eq!(
                (path, *offset),
                (&ckpt, u64::try_from(at).unwrap()),
                "{err}"
            );
            let message = err.to_string();
            let expected = if at < 8 {
                "bad checkpoint header: magic is"
            } else {
                "header says version"
            };
            assert!(message.contains(expected), "{message}");
            flip(&ckpt, at, mask);
        }
    }
    assert_eq!(fs::read(&ckpt).unwrap(), intact);
    Database::open(dir.path(), options()).unwrap();
}

#[test]
fn a_checkpoint_shorter_than_its_header_is_reported_where_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = write_checkpoint(dir.path());
    let bytes = fs::read(&ckpt).unwrap();
    fs::write(&ckpt, &bytes[..10]).unwrap();
    let err = Database::open(dir.path(), options()).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { path, offset: 10, .. } if *path == ckpt),
        "{err}"
    );
    assert!(
        err.to_string().contains("shorter than its 16-byte header"),
        "{err}"
    );
}
