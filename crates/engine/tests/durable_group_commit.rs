//! Group commit: committers that queue behind a running sync share the next one, and
//! concurrent committers each get their own stamp and are all durable.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use tuplekv_engine::durable::fs::{Faults, FaultyFs};
use tuplekv_engine::{Database, Options, Value, Versionstamp, key};
use tuplekv_testkit::db::{dump, options};

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
fn stats_count_the_log_syncs_that_made_commits_durable() {
    assert_eq!(
        Database::in_memory().stats().log_syncs,
        0,
        "no log in memory"
    );
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    let before = db.stats().log_syncs;
    for i in 0..3u64 {
        db.set(&key!["k", i], i).unwrap();
    }
    assert_eq!(
        db.stats().log_syncs - before,
        3,
        "one sync per sequential Sync-mode commit"
    );
}
