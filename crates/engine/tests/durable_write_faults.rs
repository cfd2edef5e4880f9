//! Failed writes (a full disk, a failed rename, a segment that cannot be started): the
//! commit or checkpoint that met the failure fails, memory and disk keep exactly what was
//! acknowledged, and writes resume once the fault is gone, also under concurrent committers.
//! Failed syncs are in `durable_failed_sync.rs`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use tuplekv_engine::durable::fs::{Faults, FaultyFs};
use tuplekv_engine::{Database, Durability, Error, Options, Value, key};
use tuplekv_testkit::db::{dump, options};
use tuplekv_testkit::durable::{faulty, files, reopen_unchanged};

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

/// Six committers run while the disk fills up and frees again, ten times. Each state lasts
/// until the committers have met it (a commit acknowledged while there is space, one refused
/// once the disk is full) rather than for a few milliseconds, which on a loaded machine could
/// pass with no commit at all; and it ends after a bounded number of the other outcome, so a
/// state that never comes fails the test instead of hanging it.
#[test]
fn io_failures_under_concurrent_commits_fail_exactly_the_unacknowledged_ones() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    /// How many commits of the other outcome may pass while a state is awaited.
    const PATIENCE: u64 = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let opts = Options {
        fs: Arc::new(FaultyFs::new(Arc::clone(&faults))),
        ..options()
    };
    let db = Database::open(dir.path(), opts.clone()).unwrap();
    let stop = AtomicBool::new(false);
    let (acked, refused) = (AtomicU64::new(0), AtomicU64::new(0));
    let (ok, failed, stuck) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..6u64)
            .map(|t| {
                let db = db.clone();
                let (stop, acked, refused) = (&stop, &acked, &refused);
                s.spawn(move || {
                    let (mut ok, mut failed) = (0u64, 0u64);
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
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
                                acked.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(Error::Io { .. }) => {
                                failed += 1;
                                refused.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => panic!("unexpected error {e}"),
                        }
                    }
                    (ok, failed)
                })
            })
            .collect();
        // Waits for one more of `want` than `seen`; gives up (with why) when a worker has
        // ended, which only a panic does before `stop`, or `other` grew by PATIENCE.
        let wait = |want: &AtomicU64, other: &AtomicU64, what: &str| -> Result<(), String> {
            let (seen, others) = (want.load(Ordering::SeqCst), other.load(Ordering::SeqCst));
            while want.load(Ordering::SeqCst) == seen {
                if workers.iter().any(|w| w.is_finished()) {
                    return Err("a worker ended early".into());
                }
                if other.load(Ordering::SeqCst) - others > PATIENCE {
                    return Err(format!("no commit {what} in {PATIENCE} attempts"));
                }
                std::thread::yield_now();
            }
            Ok(())
        };
        // Alternate between free space and a full disk (after a few more bytes).
        let mut stuck = None;
        for round in 0..20u64 {
            let met = if round % 2 == 0 {
                wait(&acked, &refused, "acknowledged with space")
            } else {
                wait(&refused, &acked, "refused on a full disk")
            };
            if let Err(why) = met {
                stuck = Some(format!("round {round}: {why}"));
                break;
            }
            if round % 2 == 0 {
                faults.disk_full_after(round * 37 % 500);
            } else {
                faults.disk_has_space();
            }
        }
        faults.disk_has_space();
        stop.store(true, Ordering::Relaxed);
        let (ok, failed) = workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
        (ok, failed, stuck)
    });
    assert_eq!(stuck, None);
    assert!(ok > 0 && failed > 0, "{ok} acknowledged, {failed} failed");
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
