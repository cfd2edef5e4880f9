//! What a crash leaves at the end of the log is cut or ignored, never refused: a torn last
//! record at any length or with a flipped bit, a torn record or a hole before preallocated
//! zeros, the zeros themselves, and a segment whose header was cut short. The records before
//! it are kept, and the cut is reported.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::fs;

use tuplekv_engine::durable::PREALLOCATE_STEP;
use tuplekv_engine::{Database, Value, key};
use tuplekv_testkit::db::{dump, options};
use tuplekv_testkit::durable::{
    copy_files, flip, log_len, newest_segment, reopen_unchanged, write_commits,
};

/// Recovery cut the log's damaged tail, which held commit 2 but not commit 1.
fn assert_second_commit_cut(db: &Database) {
    assert!(db.recovery_report().unwrap().truncated.is_some());
    assert_eq!(db.get(&key!["k", 2u64]).unwrap(), None);
    assert!(db.get(&key!["k", 1u64]).unwrap().is_some());
}

#[test]
fn a_torn_tail_is_cut_at_every_possible_length() {
    let dir = tempfile::tempdir().unwrap();
    write_commits(dir.path(), 3);
    let seg = newest_segment(dir.path());
    let whole = fs::read(&seg).unwrap();
    // The last record starts where the log of two commits ends.
    let two = log_len(2);
    // The last batch is a `synced` mark, then the commit. A cut right after the mark leaves
    // whole frames only: nothing is torn there, and the mark, which holds no data, stays.
    let mut clean_cuts = Vec::new();
    // Where the last whole frame ends: after two commits, or after the mark.
    let mut good = two;
    for cut in two + 1..whole.len() {
        fs::write(&seg, &whole[..cut]).unwrap();
        let db = Database::open(dir.path(), options()).unwrap();
        assert_eq!(db.get(&key!["k", 2u64]).unwrap(), None, "cut at {cut}");
        assert!(db.get(&key!["k", 1u64]).unwrap().is_some());
        let truncated = db.recovery_report().unwrap().truncated.clone();
        db.close().unwrap();
        match truncated {
            Some((path, offset, dropped)) => {
                assert_eq!(
                    (path, offset, dropped),
                    (seg.clone(), good as u64, (cut - good) as u64)
                );
                // The cut is persistent: the file now ends at the last good record.
                assert_eq!(fs::read(&seg).unwrap().len(), good);
            }
            None => {
                clean_cuts.push(cut);
                good = cut;
                assert_eq!(fs::read(&seg).unwrap().len(), cut);
            }
        }
    }
    assert_eq!(clean_cuts.len(), 1, "{clean_cuts:?}");
}

#[test]
fn a_bit_flip_in_the_last_record_is_cut_as_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    write_commits(dir.path(), 3);
    flip(&newest_segment(dir.path()), -3, 0x10);
    let db = Database::open(dir.path(), options()).unwrap();
    assert_second_commit_cut(&db);
}

#[test]
fn a_short_segment_header_left_by_a_crash_is_started_again() {
    let dir = tempfile::tempdir().unwrap();
    write_commits(dir.path(), 3);
    let db = Database::open(dir.path(), options()).unwrap();
    let before = dump(&db);
    db.close().unwrap();
    // A crash while the next segment was created: its name, and part of its header.
    let next = dir.path().join(format!("wal-{:020}.log", 4));
    fs::write(&next, &b"TKVLOG01"[..5]).unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    assert_eq!(dump(&db), before);
    db.set(&key!["more"], b"x").unwrap();
    reopen_unchanged(db, dir.path(), options());
}

/// A segment is filled with zeros ahead of its records, so syncing a commit overwrites
/// allocated blocks instead of growing the file. A crash leaves the zeros on disk: recovery
/// reads them as the log's unused end (nothing reported, nothing lost), appends continue where
/// the records end, and closing trims the zeros.
#[test]
fn a_preallocated_tail_left_by_a_crash_is_unused_space_not_damage() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    for i in 0..10u64 {
        db.set(&key!["k", i], b"v").unwrap();
    }
    let before = dump(&db);
    let crashed = tempfile::tempdir().unwrap();
    copy_files(dir.path(), crashed.path());
    db.close().unwrap();

    let seg = newest_segment(crashed.path());
    let bytes = fs::read(&seg).unwrap();
    assert!(
        bytes.len() as u64 >= PREALLOCATE_STEP,
        "{} bytes",
        bytes.len()
    );
    assert!(bytes.ends_with(&[0; 4096]));
    let db = Database::open(crashed.path(), options()).unwrap();
    assert_eq!(dump(&db), before);
    assert_eq!(db.recovery_report().unwrap().truncated, None);
    db.set(&key!["after"], b"x").unwrap();
    db.close().unwrap();
    let trimmed = fs::read(&seg).unwrap();
    assert!(trimmed.len() < 4096, "{} bytes", trimmed.len());
    assert_ne!(trimmed.last(), Some(&0));
    let db = Database::open(crashed.path(), options()).unwrap();
    assert!(db.get(&key!["after"]).unwrap().is_some());
    assert_eq!(
        db.get(&key!["k", 9u64]).unwrap().map(|e| e.value),
        Some(Value::from(b"v"))
    );
}

/// A torn last record followed by preallocated zeros is still a torn tail: cut and reported,
/// with the records before it kept.
#[test]
fn a_torn_record_before_preallocated_zeros_is_cut_as_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    let mut ends = Vec::new();
    for i in 0..3u64 {
        db.set(&key!["k", i], b"some value").unwrap();
        ends.push(
            fs::read(newest_segment(dir.path()))
                .unwrap()
                .iter()
                .rposition(|&b| b != 0),
        );
    }
    let crashed = tempfile::tempdir().unwrap();
    copy_files(dir.path(), crashed.path());
    db.close().unwrap();
    let last = ends[2].unwrap() - 2;
    flip(
        &newest_segment(crashed.path()),
        isize::try_from(last).unwrap(),
        0x10,
    );
    let db = Database::open(crashed.path(), options()).unwrap();
    assert_second_commit_cut(&db);
}

/// A write over preallocated space can reach the disk page by page in any order, so a crash
/// can leave a hole before frames that did land. With no `synced` mark after the hole saying
/// it had been durable, that is a torn tail: cut and reported, not refused as damage.
#[test]
fn a_hole_before_frames_that_reached_the_disk_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    write_commits(dir.path(), 3);
    let seg = newest_segment(dir.path());
    let mut bytes = fs::read(&seg).unwrap();
    let two = log_len(2);
    // The last batch's first page never landed: its `synced` mark reads as zeros, its commit
    // frame is whole.
    bytes[two..two + 12].fill(0);
    fs::write(&seg, &bytes).unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    assert_eq!(
        db.recovery_report().unwrap().truncated,
        Some((seg.clone(), two as u64, (bytes.len() - two) as u64))
    );
    assert_eq!(db.get(&key!["k", 2u64]).unwrap(), None);
    assert!(db.get(&key!["k", 1u64]).unwrap().is_some());
    db.close().unwrap();
    assert_eq!(fs::read(&seg).unwrap().len(), two);
}
