//! Reclamation: the bookkeeping of what to reclaim stays bounded under long write workloads
//! (it once grew by one entry per write with an expiry, and by one per overwrite without the
//! background thread), and the background thread reclaims on its own, with no `reclaim_now`.
//! How many replaced values stay alive is checked in `reclamation_peak.rs`, alone in its
//! process.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::time::{Duration, Instant};

use tuplekv_engine::{Database, ReadView, Stats, Value, key};
use tuplekv_testkit::db::options;
use tuplekv_testkit::rounds::Rounds;

const DAY: Duration = Duration::from_secs(86_400);

fn without_thread() -> Database {
    Database::with_options(options())
}

/// Polls `stats()` until `done` holds, for at most ten seconds; returns the last stats.
fn wait_for(db: &Database, done: impl Fn(&Stats) -> bool) -> Stats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = db.stats();
        if done(&stats) || Instant::now() > deadline {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn refreshing_one_key_with_an_expiry_keeps_constant_bookkeeping() {
    for db in [without_thread(), Database::in_memory()] {
        for i in 0..100_000u64 {
            let a = db.atomic().set_with_expiry(&key!["session"], i, DAY);
            assert!(a.commit().unwrap().is_committed());
        }
        let stats = db.stats();
        assert_eq!(stats.keys, 1, "{stats:?}");
        assert!(stats.versions <= 2, "{stats:?}");
        assert!(stats.expiry_queue <= 100, "one entry per write: {stats:?}");
        assert!(
            stats.reclaim_queue <= 100,
            "one entry per overwrite: {stats:?}"
        );
    }
}

#[test]
fn overwrites_without_the_background_thread_keep_the_queue_bounded() {
    let db = without_thread();
    // Versions a snapshot pins are left to reclamation (a commit prunes the rest itself).
    for i in 0..20_000u64 {
        db.set(&key!["many", i], Value::U64(0)).unwrap();
    }
    db.set(&key!["hot", 0u64], Value::U64(0)).unwrap();
    db.set(&key!["hot", 1u64], Value::U64(0)).unwrap();
    let snapshot = db.snapshot();
    // Two keys alternating defeat the "same key as last time" shortcut.
    for i in 0..100_000u64 {
        db.set(&key!["hot", i % 2], Value::U64(i)).unwrap();
    }
    // The queue is capped at a few thousand entries (deduplicated when full), not 100 000.
    let stats = db.stats();
    assert!(stats.reclaim_queue <= 10_000, "{stats:?}");
    // Many distinct keys, each overwritten: the queue is capped and reclamation sweeps.
    for round in 1..3u64 {
        for i in 0..20_000u64 {
            db.set(&key!["many", i], Value::U64(round)).unwrap();
        }
    }
    let stats = db.stats();
    assert!(stats.reclaim_queue <= 10_000, "{stats:?}");
    assert_eq!(stats.keys, 20_002);
    drop(snapshot);
    db.reclaim_now();
    let stats = db.stats();
    assert_eq!((stats.keys, stats.versions), (20_002, 20_002), "{stats:?}");
    assert_eq!(stats.reclaim_queue, 0, "{stats:?}");
}

#[test]
fn many_keys_refreshed_with_expiries_hold_one_schedule_entry_each() {
    let db = without_thread();
    for round in 0..10u64 {
        for i in 0..1000u64 {
            let a =
                db.atomic()
                    .set_with_expiry(&key!["s", i], round, DAY + Duration::from_secs(round));
            assert!(a.commit().unwrap().is_committed());
        }
    }
    let stats = db.stats();
    assert!(stats.expiry_queue <= 2 * 1000 + 64, "{stats:?}");
    // Overwriting without an expiry, or deleting, drops the key's deadline.
    for i in 0..1000u64 {
        if i % 2 == 0 {
            db.set(&key!["s", i], b"forever").unwrap();
        } else {
            db.delete(&key!["s", i]).unwrap();
        }
    }
    for i in 0..200u64 {
        db.set(&key!["other", i], b"x").unwrap();
    }
    let stats = db.stats();
    assert!(stats.expiry_queue <= 64, "{stats:?}");
}

#[test]
fn the_background_thread_reclaims_old_versions_and_expired_values_on_its_own() {
    let db = Database::in_memory();
    // Old versions pinned by a snapshot, freed when it closes.
    db.set(&key!["hot"], Value::U64(0)).unwrap();
    let snap = db.snapshot();
    for i in 1..=100u64 {
        db.set(&key!["hot"], Value::U64(i)).unwrap();
    }
    assert!(db.stats().versions >= 2);
    drop(snap);
    // Values that expire, and tombstones.
    let a = (0..100u64).fold(db.atomic(), |a, i| {
        a.set_with_expiry(&key!["exp", i], b"v", Duration::from_millis(30))
    });
    assert!(a.commit().unwrap().is_committed());
    db.set(&key!["gone"], b"v").unwrap();
    db.delete(&key!["gone"]).unwrap();
    // Never `reclaim_now`: only the background thread can bring this down to one key.
    let stats = wait_for(&db, |s| s.keys == 1 && s.versions == 1);
    assert_eq!((stats.keys, stats.versions), (1, 1), "{stats:?}");
    assert_eq!(
        db.get(&key!["hot"]).unwrap().map(|e| e.value),
        Some(Value::U64(100))
    );
}

/// Regression: expired values were kept while *any* snapshot registered after them was open,
/// including snapshots taken after the deadline (which can never have seen them live), so a
/// steady stream of lists kept every expired value alive. Only an older snapshot may pin one.
#[test]
fn a_snapshot_taken_after_the_deadline_does_not_keep_an_expired_value() {
    let db = without_thread();
    let a = (0..100u64).fold(db.atomic(), |a, i| {
        a.set_with_expiry(&key!["exp", i], b"v", Duration::from_millis(1))
    });
    assert!(a.commit().unwrap().is_committed());
    let deadline = Instant::now() + Duration::from_millis(1);
    while Instant::now() <= deadline {
        std::hint::spin_loop();
    }
    std::thread::sleep(Duration::from_millis(2));
    let later = db.snapshot();
    assert_eq!(later.get(&key!["exp", 0]).unwrap(), None);
    db.reclaim_now();
    let stats = db.stats();
    assert_eq!((stats.keys, stats.versions), (0, 0), "{stats:?}");
    drop(later);
}

/// Regression: keys an open snapshot kept from being pruned went back on the queue after
/// every pass; past half the queue's capacity that turned every later pass into a sweep of
/// the whole map for as long as the snapshot stayed open. They are parked until a snapshot
/// closes instead, and then reclaimed.
#[test]
fn keys_pinned_by_a_long_snapshot_are_parked_and_reclaimed_when_it_closes() {
    const KEYS: u64 = 3_000; // fewer than the queue holds, so nothing overflows into sweeps
    let db = Database::in_memory();
    for i in 0..KEYS {
        db.set(&key!["k", i], Value::U64(0)).unwrap();
    }
    let pinned = db.snapshot();
    for i in 0..KEYS {
        db.set(&key!["k", i], Value::U64(1)).unwrap();
    }
    // The thread visits the overwritten keys, cannot prune them while `pinned` is open, and
    // parks them: the queue empties and stays empty instead of cycling them pass after pass.
    let stats = wait_for(&db, |s| {
        s.reclaim_queue == 0 && s.reclaim_parked == KEYS as usize
    });
    assert_eq!(
        (stats.reclaim_queue, stats.reclaim_parked),
        (0, KEYS as usize),
        "{stats:?}"
    );
    assert_eq!(
        stats.versions,
        2 * KEYS as usize,
        "the snapshot's versions stay"
    );
    db.set(&key!["unrelated"], b"x").unwrap();
    let stats = wait_for(&db, |s| s.reclaim_queue == 0);
    assert_eq!(stats.reclaim_parked, KEYS as usize, "{stats:?}");
    assert_eq!(
        pinned.get(&key!["k", KEYS - 1]).unwrap().map(|e| e.value),
        Some(Value::U64(0))
    );
    drop(pinned);
    let stats = wait_for(&db, |s| {
        s.versions == KEYS as usize + 1 && s.reclaim_parked == 0
    });
    assert_eq!(
        (stats.versions, stats.reclaim_parked),
        (KEYS as usize + 1, 0),
        "{stats:?}"
    );
}

/// More pinned keys than the parked set holds: the pass stops collecting them (it once held
/// every pinned key of a sweep in memory), and when the snapshot closes, a sweep reclaims them.
#[test]
fn more_pinned_keys_than_the_parked_set_holds_are_swept_once_the_snapshot_closes() {
    const KEYS: u64 = 12_000; // above the queue's 8192
    let db = Database::in_memory();
    for i in 0..KEYS {
        db.set(&key!["k", i], Value::U64(0)).unwrap();
    }
    let pinned = db.snapshot();
    for i in 0..KEYS {
        db.set(&key!["k", i], Value::U64(1)).unwrap();
    }
    db.reclaim_now();
    let stats = db.stats();
    assert!(stats.reclaim_parked <= 8192, "{stats:?}");
    assert_eq!(stats.versions, 2 * KEYS as usize, "{stats:?}");
    drop(pinned);
    let stats = wait_for(&db, |s| s.versions == KEYS as usize);
    assert_eq!(
        (stats.keys, stats.versions),
        (KEYS as usize, KEYS as usize),
        "{stats:?}"
    );
}

/// A commit reserves an empty slot for each key it writes before taking the commit lock. One
/// that then fails (a conflict, a refused mutation) leaves slots that read as absent everywhere
/// and are reclaimed.
#[test]
fn slots_reserved_by_failed_commits_read_as_absent_and_are_reclaimed() {
    let db = without_thread();
    db.set(&key!["guard"], b"x").unwrap();
    db.set(&key!["text"], b"not a number").unwrap();
    for i in 0..100u64 {
        let conflict = db
            .atomic()
            .check(&key!["guard"], None)
            .set(&key!["new", i], b"v")
            .commit()
            .unwrap();
        assert!(!conflict.is_committed());
        let refused = db
            .atomic()
            .set(&key!["other", i], b"v")
            .sum(&key!["text"], 1)
            .commit();
        assert!(refused.is_err());
    }
    let snap = db.snapshot();
    for prefix in ["new", "other"] {
        assert_eq!(db.get(&key![prefix, 7u64]).unwrap(), None);
        assert_eq!(snap.get(&key![prefix, 7u64]).unwrap(), None);
        let listed = db
            .list(
                &tuplekv_engine::Selector::prefix(&key![prefix]),
                Default::default(),
            )
            .unwrap()
            .count();
        assert_eq!(listed, 0);
    }
    drop(snap);
    db.reclaim_now();
    let stats = db.stats();
    assert_eq!(stats.keys, 2, "{stats:?}");
    assert_eq!(stats.versions, 2, "{stats:?}");
}

/// Reclamation removes empty slots under the commit lock while committers reserve slots
/// without it: a committer whose slot was removed meanwhile must write into a fresh one, never
/// into the removed one (its write would be lost).
#[test]
fn commits_racing_reclamation_of_their_reserved_slots_lose_no_write() {
    let db = without_thread();
    db.set(&key!["guard"], b"x").unwrap();
    // The commits start after the reclaimer's first pass and wait halfway for a pass begun
    // there, so passes run among them however the threads are scheduled. The guard stops the
    // reclaimer however the loop ends, so a failed assertion fails the test instead of
    // hanging it.
    let passes = Rounds::default();
    let rounds = 20_000u64;
    let reclaimed = std::thread::scope(|s| {
        let reclaimer = s.spawn(|| passes.run(|| db.reclaim_now()));
        let stop = passes.stop_on_drop();
        passes.wait_for(1);
        for i in 0..rounds {
            if i == rounds / 2 {
                passes.wait_for_fresh();
            }
            // A failed commit reserves the slot and queues it for removal; the next commit
            // of the same key may find it reserved, removed, or gone.
            let lost = db
                .atomic()
                .check(&key!["guard"], None)
                .set(&key!["k", i], b"lost")
                .commit()
                .unwrap();
            assert!(!lost.is_committed());
            let won = db
                .atomic()
                .check(&key!["k", i], None)
                .set(&key!["k", i], i)
                .commit()
                .unwrap();
            assert!(won.is_committed(), "commit {i}: {won:?}");
            assert_eq!(
                db.get(&key!["k", i]).unwrap().map(|e| e.value),
                Some(Value::U64(i)),
                "commit {i}"
            );
        }
        drop(stop);
        reclaimer.join().unwrap()
    });
    assert!(reclaimed >= 2, "{reclaimed} reclaim passes");
    db.reclaim_now();
    assert_eq!(db.stats().keys, 20_001);
}
