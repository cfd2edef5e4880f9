//! The engine under concurrent use: serializable transactions (bank transfers, counters),
//! exactly one winner of a unique-insert race, snapshots and list iterators that see one state
//! while writers commit, unique increasing versionstamps, and bounded memory under long write
//! workloads. Thread counts and rounds are modest for CI; `TUPLEKV_STRESS=N` multiplies them.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tuplekv_engine::{
    Database, Error, Key, ListOptions, Selector, TransactionOptions, Value, Versionstamp, key,
};
use tuplekv_testkit::db::{options, u64_of};
use tuplekv_testkit::rounds::Rounds;

fn stress() -> u64 {
    std::env::var("TUPLEKV_STRESS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

const ACCOUNTS: u64 = 8;
const OPENING: u64 = 1000;

fn total_in(entries: impl Iterator<Item = Result<tuplekv_engine::Entry, Error>>) -> (u64, usize) {
    entries.fold((0, 0), |(sum, n), e| {
        (sum + u64_of(Some(e.unwrap().value)), n + 1)
    })
}

/// Transfers move money between accounts in transactions while an auditor checks, in
/// snapshots and in list iterators, that the total never changes. The auditor does not rely on
/// the scheduler to run while the money moves (it once audited nothing in 3 runs of 25 under
/// load): the transfers start after its first audit, and the first transfer thread waits
/// halfway for an audit that begins there.
#[test]
fn bank_transfers_preserve_the_total_in_every_snapshot() {
    let db = Database::in_memory();
    for a in 0..ACCOUNTS {
        db.set(&key!["acct", a], Value::U64(OPENING)).unwrap();
    }
    let audits = Rounds::default();
    let options = TransactionOptions {
        max_attempts: 64,
        ..TransactionOptions::default()
    };
    let per_thread = 150 * stress();
    std::thread::scope(|s| {
        let transfers: Vec<_> = (0..4u64)
            .map(|t| {
                let (db, options, audits) = (db.clone(), options.clone(), &audits);
                s.spawn(move || {
                    let mut rng = fastrand::Rng::with_seed(t);
                    audits.wait_for(1);
                    for i in 0..per_thread {
                        if t == 0 && i == per_thread / 2 {
                            audits.wait_for_fresh();
                        }
                        let (from, to) = (rng.u64(0..ACCOUNTS), rng.u64(0..ACCOUNTS));
                        let amount = rng.u64(1..50);
                        db.transaction_with(&options, |tx| {
                            let a = u64_of(tx.get(&key!["acct", from])?.map(|e| e.value));
                            let b = u64_of(tx.get(&key!["acct", to])?.map(|e| e.value));
                            if from == to || a < amount {
                                return Ok::<_, Error>(false);
                            }
                            tx.set(&key!["acct", from], Value::U64(a - amount));
                            tx.set(&key!["acct", to], Value::U64(b + amount));
                            Ok(true)
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        // The auditor: every snapshot and every list iterator sees the whole money.
        let auditor = s.spawn(|| {
            let audit = || {
                let snap = db.snapshot();
                let list = snap
                    .list(&Selector::prefix(&key!["acct"]), ListOptions::default())
                    .unwrap();
                assert_eq!(total_in(list), (ACCOUNTS * OPENING, ACCOUNTS as usize));
                // A list iterator straight from the database, in small batches.
                let list = db
                    .list(
                        &Selector::prefix(&key!["acct"]),
                        ListOptions {
                            batch_size: Some(2),
                            ..ListOptions::default()
                        },
                    )
                    .unwrap();
                assert_eq!(total_in(list), (ACCOUNTS * OPENING, ACCOUNTS as usize));
            };
            audits.run(audit)
        });
        let stop = audits.stop_on_drop();
        for t in transfers {
            t.join().unwrap();
        }
        drop(stop);
        let audits = auditor.join().unwrap();
        println!("bank transfers: {audits} audits");
        // One before the transfers, one begun halfway through them.
        assert!(audits >= 2, "{audits} audits");
    });
    let list = db
        .list(&Selector::prefix(&key!["acct"]), ListOptions::default())
        .unwrap();
    assert_eq!(total_in(list), (ACCOUNTS * OPENING, ACCOUNTS as usize));
}

#[test]
fn a_unique_insert_race_has_exactly_one_winner_and_losers_learn_who() {
    for round in 0..20 * stress() {
        let db = Database::in_memory();
        let threads = 8;
        let barrier = Barrier::new(threads);
        let key = key!["users_by_email", "ada@example.com"];
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads as u64)
                .map(|t| {
                    let (db, barrier, key) = (&db, &barrier, &key);
                    s.spawn(move || {
                        barrier.wait();
                        db.atomic()
                            .check(key, None)
                            .set(key, Value::U64(t))
                            .commit()
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<_> = results.iter().filter(|r| r.is_committed()).collect();
        assert_eq!(winners.len(), 1, "round {round}");
        let stamp = winners[0].versionstamp();
        for loser in results.iter().filter(|r| !r.is_committed()) {
            let conflict = loser.conflict().unwrap();
            assert_eq!(conflict.failed_checks.len(), 1);
            assert_eq!(conflict.failed_checks[0].index, 0);
            assert_eq!(conflict.failed_checks[0].actual, stamp);
        }
    }
}

#[test]
fn versionstamps_are_unique_across_threads_and_increase_within_each() {
    let db = Database::in_memory();
    let per: Vec<Vec<Versionstamp>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let db = db.clone();
                s.spawn(move || {
                    (0..500 * stress())
                        .map(|i| db.set(&key!["t", t, i], b"x").unwrap())
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for stamps in &per {
        assert!(stamps.windows(2).all(|w| w[0] < w[1]));
    }
    let mut all: Vec<Versionstamp> = per.into_iter().flatten().collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "a versionstamp was handed out twice");
    assert_eq!(db.current_versionstamp(), all[n - 1]);
}

#[test]
fn counter_transactions_lose_no_update() {
    let db = Database::in_memory();
    let options = TransactionOptions {
        max_attempts: 1000,
        ..TransactionOptions::default()
    };
    let threads = 4u64;
    let per = 100 * stress();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (db, options) = (db.clone(), options.clone());
            s.spawn(move || {
                for _ in 0..per {
                    db.transaction_with(&options, |tx| {
                        let n = u64_of(tx.get(&key!["counter"])?.map(|e| e.value));
                        tx.set(&key!["counter"], Value::U64(n + 1));
                        Ok::<_, Error>(())
                    })
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(
        u64_of(db.get(&key!["counter"]).unwrap().map(|e| e.value)),
        threads * per
    );
}

/// A commit prunes what it replaced right after publishing it: with no snapshot open, a hot
/// key holds one version and a deleted key is gone, with no background thread and no
/// `reclaim_now`.
#[test]
fn overwrites_and_deletes_without_snapshots_are_reclaimed_by_the_commit_itself() {
    let db = Database::with_options(options());
    let n = 200_000 * stress();
    for i in 0..n {
        db.set(&key!["hot"], Value::U64(i)).unwrap();
    }
    let stats = db.stats();
    assert_eq!((stats.keys, stats.versions), (1, 1), "{stats:?}");
    for i in 0..1000u64 {
        db.set(&key!["gone", i], b"x").unwrap();
        db.atomic().sum(&key!["gone", i], 1).commit().unwrap_err();
        db.delete(&key!["gone", i]).unwrap();
    }
    let stats = db.stats();
    assert_eq!((stats.keys, stats.versions), (1, 1), "{stats:?}");
    assert_eq!(stats.reclaim_queue, 0, "{stats:?}");
}

#[test]
fn a_held_snapshot_keeps_its_version_until_dropped() {
    let db = Database::with_options(options());
    db.set(&key!["k"], Value::U64(0)).unwrap();
    let snap = db.snapshot();
    for i in 1..=1000u64 {
        db.set(&key!["k"], Value::U64(i)).unwrap();
    }
    // The snapshot's version and the newest two are kept; nothing in between.
    assert!(db.stats().versions <= 3, "{:?}", db.stats());
    // A second snapshot in the middle pins one more version, not all since the first.
    let middle = db.snapshot();
    for i in 1001..=2000u64 {
        db.set(&key!["k"], Value::U64(i)).unwrap();
    }
    assert!(db.stats().versions <= 4, "{:?}", db.stats());
    assert_eq!(
        tuplekv_engine::ReadView::get(&middle, &key!["k"])
            .unwrap()
            .map(|e| e.value),
        Some(Value::U64(1000))
    );
    drop(middle);
    assert_eq!(
        tuplekv_engine::ReadView::get(&snap, &key!["k"])
            .unwrap()
            .map(|e| e.value),
        Some(Value::U64(0))
    );
    drop(snap);
    db.reclaim_now();
    assert_eq!(db.stats().versions, 1);
}

#[test]
fn a_long_write_workload_with_deletes_keeps_memory_bounded() {
    let db = Database::in_memory();
    // A sliding window of 100 live keys over many inserts and deletes, a reader holding short
    // snapshots meanwhile: the writes start after its first one, and wait halfway for one
    // taken there, so some are held while the window slides however the threads are run.
    let snapshots = Rounds::default();
    let writes = 20_000 * stress();
    let held = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            snapshots.run(|| {
                let snap = db.snapshot();
                std::thread::sleep(Duration::from_micros(200));
                drop(snap);
            })
        });
        let stop = snapshots.stop_on_drop();
        snapshots.wait_for(1);
        for i in 0..writes {
            if i == writes / 2 {
                snapshots.wait_for_fresh();
            }
            let a = db.atomic().set(&key!["w", i], b"v");
            let a = if i >= 100 {
                a.delete(&key!["w", i - 100])
            } else {
                a
            };
            assert!(a.commit().unwrap().is_committed());
        }
        drop(stop);
        reader.join().unwrap()
    });
    assert!(held >= 2, "{held} snapshots held");
    db.reclaim_now();
    let stats = db.stats();
    assert_eq!(stats.keys, 100, "{stats:?}");
    assert_eq!(stats.versions, 100, "{stats:?}");
}

#[test]
fn expired_entries_are_invisible_at_once_and_reclaimed() {
    let db = Database::in_memory();
    let a = (0..100u64).fold(db.atomic(), |a, i| {
        a.set_with_expiry(&key!["e", i], b"v", Duration::from_millis(20))
    });
    assert!(a.commit().unwrap().is_committed());
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(db.get(&key!["e", 5u64]).unwrap(), None);
    let listed = db
        .list(&Selector::prefix(&key!["e"]), ListOptions::default())
        .unwrap()
        .count();
    assert_eq!(listed, 0);
    // A check sees it as absent too.
    assert!(
        db.atomic()
            .check(&key!["e", 5u64], None)
            .commit()
            .unwrap()
            .is_committed()
    );
    db.reclaim_now();
    assert_eq!(db.stats().keys, 0);
}

/// One operation of the recorded history: when it was invoked and when it returned (ticks of
/// one global counter), and the versionstamp it wrote or read.
#[derive(Debug, Clone, Copy)]
struct Event {
    start: u64,
    end: u64,
    write: bool,
    key: u64,
    stamp: Versionstamp,
}

/// Records a history of sets and gets from several threads on a few keys and checks it is
/// linearizable. Each write returns its versionstamp and each read returns the stamp of the
/// write it saw, so the write order is known and the check is direct: a write that finished
/// before another started has the smaller stamp; a read sees a write that finished before it
/// started, or a later one, never an older one; a read never sees a write that started after
/// it finished; a read that starts after another read of the same key finished sees the same
/// write or a later one (no going back in time between readers); and a read sees a stamp some
/// write of that key actually returned.
#[test]
fn a_recorded_history_of_sets_and_gets_is_linearizable() {
    use std::sync::atomic::AtomicU64;
    let seed: u64 = std::env::var("TUPLEKV_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let db = Database::in_memory();
    let clock = AtomicU64::new(0);
    let keys = 3u64;
    for k in 0..keys {
        db.set(&key!["reg", k], b"init").unwrap();
    }
    let history: Vec<Event> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let (db, clock) = (db.clone(), &clock);
                s.spawn(move || {
                    let mut rng = fastrand::Rng::with_seed(seed * 100 + t);
                    let mut events = Vec::new();
                    for _ in 0..400 * stress() {
                        let k = rng.u64(0..keys);
                        let write = rng.bool();
                        let start = clock.fetch_add(1, Ordering::SeqCst);
                        let stamp = if write {
                            db.set(&key!["reg", k], vec![t as u8]).unwrap()
                        } else {
                            db.get(&key!["reg", k]).unwrap().unwrap().versionstamp
                        };
                        let end = clock.fetch_add(1, Ordering::SeqCst);
                        events.push(Event {
                            start,
                            end,
                            write,
                            key: k,
                            stamp,
                        });
                    }
                    events
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let writes: Vec<&Event> = history.iter().filter(|e| e.write).collect();
    let initial = Versionstamp::from_version(keys);
    for a in &writes {
        for b in &writes {
            if a.end < b.start {
                assert!(
                    a.stamp < b.stamp,
                    "real-time order broken: {a:?} then {b:?}"
                );
            }
        }
    }
    let reads: Vec<&Event> = history.iter().filter(|e| !e.write).collect();
    for r1 in &reads {
        for r2 in reads
            .iter()
            .filter(|r2| r2.key == r1.key && r1.end < r2.start)
        {
            assert!(
                r2.stamp >= r1.stamp,
                "a later read went back in time: {r1:?} then {r2:?}"
            );
        }
    }
    for r in history.iter().filter(|e| !e.write) {
        let known =
            r.stamp <= initial || writes.iter().any(|w| w.key == r.key && w.stamp == r.stamp);
        assert!(known, "read of a stamp no write returned: {r:?}");
        for w in writes.iter().filter(|w| w.key == r.key) {
            if w.end < r.start {
                assert!(r.stamp >= w.stamp, "stale read: {r:?} after {w:?}");
            }
            if r.end < w.start {
                assert!(
                    r.stamp < w.stamp,
                    "read from the future: {r:?} before {w:?}"
                );
            }
        }
    }
}

/// One snapshot and one list iterator, held while writers commit: re-reading the snapshot
/// always gives the same entries, and the iterator, advanced one batch of one at a time
/// between commits, yields exactly what the snapshot held when it was created.
#[test]
fn a_held_snapshot_and_list_iterator_read_one_state_while_writers_commit() {
    use std::sync::atomic::AtomicU64;
    let db = Database::in_memory();
    for i in 0..50u64 {
        db.set(&key!["s", i], Value::U64(i)).unwrap();
    }
    let selector = Selector::prefix(&key!["s"]);
    let read_all = |snap: &tuplekv_engine::Snapshot| -> Vec<tuplekv_engine::Entry> {
        snap.list(&selector, ListOptions::default())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let snap = db.snapshot();
    let mut iter = db
        .list(
            &selector,
            ListOptions {
                batch_size: Some(1),
                ..ListOptions::default()
            },
        )
        .unwrap();
    let first = read_all(&snap);
    let points: Vec<Key> = (0..10u64).map(|i| key!["s", i * 5]).collect();
    let first_points = snap.get_many(&points).unwrap();
    assert_eq!(first.len(), 50);

    let commits = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let start = Barrier::new(3);
    let mut yielded = Vec::new();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (db, commits, done, start) = (db.clone(), &commits, &done, &start);
            s.spawn(move || {
                start.wait();
                let mut rng = fastrand::Rng::with_seed(t);
                while !done.load(Ordering::Acquire) {
                    let k = key!["s", rng.u64(0..60)];
                    let a = if rng.bool() {
                        db.atomic().set(&k, Value::U64(rng.u64(..)))
                    } else {
                        db.atomic().delete(&k)
                    };
                    assert!(a.commit().unwrap().is_committed());
                    commits.fetch_add(1, Ordering::Release);
                }
            });
        }
        start.wait();
        let mut rounds = 0u64;
        let mut advanced_at = 0;
        // Advance the iterator once per few commits, until it is drained and the writers have
        // committed plenty meanwhile.
        loop {
            let seen = commits.load(Ordering::Acquire);
            if seen >= advanced_at + 5 {
                advanced_at = seen;
                match iter.next() {
                    Some(entry) => yielded.push(entry.unwrap()),
                    None if seen >= 500 * stress() => break,
                    None => {}
                }
            }
            assert_eq!(read_all(&snap), first, "round {rounds}, {seen} commits in");
            assert_eq!(snap.get_many(&points).unwrap(), first_points);
            rounds += 1;
        }
        done.store(true, Ordering::Release);
    });
    assert_eq!(yielded, first);
    assert!(db.current_versionstamp() > snap.versionstamp());
}
