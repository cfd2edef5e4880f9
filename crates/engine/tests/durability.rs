//! Durability: reopen, checkpoints, torn tails, corruption, fault injection and locking. The
//! model test with reopens and faults is in `durable_model.rs`, the SIGKILL crash test in
//! `crash.rs`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tuplekv_engine::durable::PREALLOCATE_STEP;
use tuplekv_engine::durable::fs::{Faults, FaultyFs};
use tuplekv_engine::{
    ByteRange, Database, Durability, Error, Options, ReadView, Value, Versionstamp, key,
};

fn options() -> Options {
    Options {
        background_reclaim: false,
        ..Options::default()
    }
}

/// Every live entry, in key order: (key bytes, value, versionstamp).
fn dump(db: &Database) -> Vec<(Vec<u8>, Value, Versionstamp)> {
    let all = ByteRange {
        start: vec![],
        end: vec![0xff],
    };
    db.snapshot()
        .scan(&all, false, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| (e.key.to_vec(), e.value, e.versionstamp))
        .collect()
}

/// Closes `db`, opens `dir` again with `opts`, checks that it holds exactly what `db` held
/// (keys, values, versionstamps) and returns it.
fn reopen_unchanged(db: Database, dir: &Path, opts: Options) -> Database {
    let before = dump(&db);
    db.close().unwrap();
    let db = Database::open(dir, opts).unwrap();
    assert_eq!(dump(&db), before);
    db
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

fn newest_segment(dir: &Path) -> PathBuf {
    files(dir, "log").pop().unwrap()
}

/// Flips the bits of `mask` in the byte at `offset` of `file` (offsets from the end when
/// negative).
fn flip(file: &Path, offset: isize, mask: u8) {
    let mut bytes = fs::read(file).unwrap();
    let at = if offset < 0 {
        bytes.len() - offset.unsigned_abs()
    } else {
        offset.unsigned_abs()
    };
    bytes[at] ^= mask;
    fs::write(file, &bytes).unwrap();
}

/// Recovery cut the log's damaged tail, which held commit 2 but not commit 1.
fn assert_second_commit_cut(db: &Database) {
    assert!(db.recovery_report().unwrap().truncated.is_some());
    assert_eq!(db.get(&key!["k", 2u64]).unwrap(), None);
    assert!(db.get(&key!["k", 1u64]).unwrap().is_some());
}

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
    for i in 0..3000u64 {
        db.set(&key!["k", i % 100], format!("{i:>30}").as_bytes())
            .unwrap();
    }
    // Give the background thread a moment to finish a checkpoint; then the log is bounded.
    for _ in 0..200 {
        if !files(dir.path(), "ckpt").is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!files(dir.path(), "ckpt").is_empty());
    reopen_unchanged(db, dir.path(), opts);
}

/// Writes `n` single-key commits and closes; returns the acknowledged stamps.
fn write_commits(dir: &Path, n: u64) -> Vec<Versionstamp> {
    let db = Database::open(dir, options()).unwrap();
    let stamps = (0..n)
        .map(|i| db.set(&key!["k", i], b"some value").unwrap())
        .collect();
    db.close().unwrap();
    stamps
}

/// The length of the segment [`write_commits`] leaves for `n` commits: where commit `n + 1`
/// starts in a longer log written the same way.
fn log_len(n: u64) -> usize {
    let probe = tempfile::tempdir().unwrap();
    write_commits(probe.path(), n);
    fs::read(newest_segment(probe.path())).unwrap().len()
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

#[test]
fn a_full_disk_fails_the_commit_changes_nothing_and_writes_resume_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let opts = Options {
        fs: Arc::new(FaultyFs::new(Arc::clone(&faults))),
        ..options()
    };
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    let good = db.set(&key!["a"], b"1").unwrap();
    let before = dump(&db);
    // A short write: some bytes of the record reach the file, then ENOSPC.
    faults.disk_full_after(10);
    let err = db.set(&key!["b"], b"2").unwrap_err();
    assert!(
        matches!(&err, Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull),
        "{err}"
    );
    // The operating system's error is the source, for callers that walk the chain.
    let source = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<std::io::Error>());
    assert_eq!(
        source.map(std::io::Error::kind),
        Some(std::io::ErrorKind::StorageFull),
        "{err}"
    );
    let err = db
        .atomic()
        .check(&key!["a"], Some(good))
        .sum(&key!["n"], 1)
        .commit()
        .unwrap_err();
    assert!(matches!(err, Error::Io { .. }));
    // Memory does not show the failed commits; reads work.
    assert_eq!(dump(&db), before);
    assert_eq!(db.get(&key!["b"]).unwrap(), None);
    faults.disk_has_space();
    let later = db.set(&key!["c"], b"3").unwrap();
    assert!(later > good);
    let after = dump(&db);
    db.close().unwrap();
    let db = Database::open(dir.path(), opts).unwrap();
    assert_eq!(dump(&db), after);
    assert_eq!(db.recovery_report().unwrap().truncated, None);
}

/// Fail-stop: after a failed fsync every write fails, also once syncs work again, and reads
/// go on; a reopen recovers exactly what was acknowledged.
#[test]
fn a_failed_fsync_stops_writes_until_a_reopen_recovers_what_was_acknowledged() {
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

#[test]
fn a_failed_checkpoint_leaves_the_log_and_data_intact() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let opts = Options {
        fs: Arc::new(FaultyFs::new(Arc::clone(&faults))),
        ..options()
    };
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    for i in 0..10u64 {
        db.set(&key!["k", i], b"v").unwrap();
    }
    faults.fail_rename(true);
    assert!(matches!(db.checkpoint(), Err(Error::Io { .. })));
    // The temporary file is removed at once, not at the next open.
    assert!(files(dir.path(), "tmp").is_empty());
    db.set(&key!["k", 99u64], b"v").unwrap();
    faults.fail_rename(false);
    reopen_unchanged(db, dir.path(), opts);
    // The interrupted checkpoint's temporary file was cleaned up.
    assert!(files(dir.path(), "tmp").is_empty());
}

#[test]
fn committers_queued_behind_a_sync_share_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let opts = Options {
        fs: Arc::new(FaultyFs::new(Arc::clone(&faults))),
        ..options()
    };
    let db = Database::open(dir.path(), opts).unwrap();
    let before = faults.syncs();
    faults.hold_syncs();
    std::thread::scope(|s| {
        let first = s.spawn(|| db.set(&key!["t", 0u64], b"x").unwrap());
        faults.wait_for_held_syncs(1);
        let rest: Vec<_> = (1..8u64)
            .map(|t| {
                let db = db.clone();
                s.spawn(move || db.set(&key!["t", t], b"x").unwrap())
            })
            .collect();
        // Every commit is applied (unpublished) and queued behind the held sync. Count
        // versions, not keys: a commit reserves its key's slot (an empty version list, counted
        // as a key) before it takes the commit lock, applies and queues its log record.
        while db.stats().versions < 8 {
            std::thread::yield_now();
        }
        faults.release_syncs();
        first.join().unwrap();
        for r in rest {
            r.join().unwrap();
        }
    });
    assert_eq!(
        faults.syncs() - before,
        2,
        "one sync for the first, one for the seven"
    );
}

#[test]
fn concurrent_committers_are_all_durable() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let opts = Options {
        fs: Arc::new(FaultyFs::new(Arc::clone(&faults))),
        ..options()
    };
    let db = Database::open(dir.path(), opts).unwrap();
    let syncs = faults.syncs();
    let stamps: Vec<Vec<Versionstamp>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8u64)
            .map(|t| {
                let db = db.clone();
                s.spawn(move || {
                    (0..50u64)
                        .map(|i| {
                            db.atomic()
                                .sum(&key!["total"], 1)
                                .set(&key!["t", t, i], b"x")
                                .commit()
                                .unwrap()
                                .versionstamp()
                                .unwrap()
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<Versionstamp> = stamps.into_iter().flatten().collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 400, "every commit got its own stamp");
    let syncs = faults.syncs() - syncs;
    assert!(syncs < 400, "{syncs} syncs for 400 commits");
    db.close().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    assert_eq!(
        db.get(&key!["total"]).unwrap().unwrap().value,
        Value::U64(400)
    );
    assert_eq!(dump(&db).len(), 401);
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

fn faulty(faults: &Arc<Faults>, durability: Durability) -> Options {
    Options {
        fs: Arc::new(FaultyFs::new(Arc::clone(faults))),
        durability,
        ..options()
    }
}

const BUFFERED: Durability = Durability::Buffered {
    interval: Duration::from_secs(3600),
};

/// Opens what a power cut now would leave of `dir` (in a new directory).
fn after_power_cut(faults: &Faults, dir: &Path) -> (tempfile::TempDir, Database) {
    let image = tempfile::tempdir().unwrap();
    faults.power_cut_image(dir, image.path()).unwrap();
    let db = Database::open(image.path(), options()).unwrap();
    (image, db)
}

fn keys(db: &Database) -> Vec<Vec<u8>> {
    dump(db).into_iter().map(|(k, _, _)| k).collect()
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

#[test]
fn a_segment_that_cannot_be_started_is_removed_and_the_database_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let opts = faulty(&faults, Durability::Sync);
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    db.set(&key!["a"], b"1").unwrap();
    // The checkpoint's new segment gets 5 bytes of its 16-byte header, then ENOSPC.
    faults.disk_full_after(5);
    assert!(matches!(db.checkpoint(), Err(Error::Io { .. })));
    assert_eq!(
        files(dir.path(), "log").len(),
        1,
        "the partial segment was left behind"
    );
    faults.disk_has_space();
    db.set(&key!["b"], b"2").unwrap();
    db.checkpoint().unwrap();
    db.set(&key!["c"], b"3").unwrap();
    reopen_unchanged(db, dir.path(), opts);
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

#[test]
fn io_failures_under_concurrent_commits_fail_exactly_the_unacknowledged_ones() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let opts = Options {
        fs: Arc::new(FaultyFs::new(Arc::clone(&faults))),
        ..options()
    };
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (ok, failed) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..6u64)
            .map(|t| {
                let db = db.clone();
                let stop = &stop;
                s.spawn(move || {
                    let (mut ok, mut failed) = (0u64, 0u64);
                    let mut i = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let res = db
                            .atomic()
                            .sum(&key!["total"], 1)
                            .set(&key!["t", t, i], b"x")
                            .commit();
                        match res {
                            Ok(r) => {
                                assert!(r.is_committed());
                                ok += 1;
                                i += 1;
                            }
                            Err(Error::Io { .. }) => failed += 1,
                            Err(e) => panic!("unexpected error {e}"),
                        }
                    }
                    (ok, failed)
                })
            })
            .collect();
        // Alternate between a full disk (after a few more bytes) and free space.
        for round in 0..20u64 {
            std::thread::sleep(Duration::from_millis(5));
            if round % 2 == 0 {
                faults.disk_full_after(round * 37 % 500);
            } else {
                faults.disk_has_space();
            }
        }
        faults.disk_has_space();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
    });
    assert!(ok > 0);
    println!("{ok} commits acknowledged, {failed} failed with an I/O error");
    // Memory holds exactly the acknowledged commits...
    let total = |db: &Database| match db.get(&key!["total"]).unwrap().map(|e| e.value) {
        Some(Value::U64(n)) => n,
        other => panic!("total is {other:?}"),
    };
    assert_eq!(total(&db), ok);
    assert_eq!(dump(&db).len() as u64, ok + 1);
    let before = dump(&db);
    db.close().unwrap();
    // ...and so does the disk.
    let db = Database::open(dir.path(), opts).unwrap();
    assert_eq!(dump(&db), before);
    assert_eq!(total(&db), ok);
}

/// Copies the database files of `from` into `to` as they are now: what a crash (of the
/// process or the machine, everything synced) would leave.
fn copy_files(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if name != "LOCK" {
            fs::copy(&path, to.join(name)).unwrap();
        }
    }
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
