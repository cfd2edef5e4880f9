//! Transactions: what they read is validated at commit, including expiry (a value read live
//! that expired before the commit once let the commit through) and phantoms in a listed
//! range; `Transaction::list` merges the transaction's own writes; edge limits (a `usize::MAX`
//! list limit once overflowed, a key at the read limit once could be read but not committed);
//! key reads commit as versionstamp checks, and those past the check limit as range checks.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::Barrier;
use std::time::{Duration, Instant};

use tuplekv_engine::limits::{CHECKS_MAX, KEY_SIZE_MAX_READ};
use tuplekv_engine::{Database, Error, Key, ListOptions, Selector, TransactionOptions, Value, key};
use tuplekv_testkit::db::{options, u64_of};

/// How long the values these tests read live stay live: long enough that a busy machine still
/// reads them before the deadline, short enough to wait for.
const LEASE: Duration = Duration::from_millis(250);

/// Waits (bounded) until `key` reads as absent from the database.
fn wait_until_expired(db: &Database, key: &Key) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.get(key).unwrap().is_some() {
        assert!(Instant::now() < deadline, "{key:?} never expired");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The property: a transaction that read a value live, then saw it expire before committing,
/// conflicts and reruns, and its rerun sees the value gone.
fn check_expiry_conflicts(db: &Database, reclaim_meanwhile: bool) {
    let k = key!["lease"];
    let a = db.atomic().set_with_expiry(&k, b"held", LEASE);
    assert!(a.commit().unwrap().is_committed());
    let mut attempts = 0;
    let saw = db
        .transaction(|tx| {
            attempts += 1;
            let present = tx.get(&k)?.is_some();
            if attempts == 1 {
                assert!(present, "read before the deadline");
                wait_until_expired(db, &k);
                if reclaim_meanwhile {
                    db.reclaim_now();
                }
            }
            tx.set(&key!["saw"], Value::U64(u64::from(present)));
            Ok::<_, Error>(present)
        })
        .unwrap();
    assert_eq!(attempts, 2, "the expiry must conflict the first commit");
    assert!(!saw);
    assert_eq!(
        db.get(&key!["saw"]).unwrap().map(|e| e.value),
        Some(Value::U64(0))
    );
}

#[test]
fn a_value_read_live_that_expires_before_commit_conflicts() {
    check_expiry_conflicts(&Database::in_memory(), false);
    let quiet = Database::with_options(options());
    check_expiry_conflicts(&quiet, false);
}

#[test]
fn reclaiming_the_expired_value_does_not_hide_the_conflict() {
    check_expiry_conflicts(&Database::in_memory(), true);
}

#[test]
fn an_expiry_in_a_listed_range_conflicts() {
    let db = Database::in_memory();
    let a = db.atomic().set_with_expiry(&key!["q", 1], b"job", LEASE);
    assert!(a.commit().unwrap().is_committed());
    db.set(&key!["q", 2], b"job").unwrap();
    let mut attempts = 0;
    let counted = db
        .transaction(|tx| {
            attempts += 1;
            let n = tx
                .list(&Selector::prefix(&key!["q"]), ListOptions::default())?
                .len();
            if attempts == 1 {
                wait_until_expired(&db, &key!["q", 1]);
            }
            tx.set(&key!["count"], Value::U64(n as u64));
            Ok::<_, Error>(n)
        })
        .unwrap();
    assert_eq!((attempts, counted), (2, 1));
}

#[test]
fn a_value_already_expired_when_read_does_not_conflict() {
    let db = Database::in_memory();
    let a = db
        .atomic()
        .set_with_expiry(&key!["old"], b"v", Duration::ZERO);
    assert!(a.commit().unwrap().is_committed());
    let mut attempts = 0;
    db.transaction(|tx| {
        attempts += 1;
        assert!(tx.get(&key!["old"])?.is_none());
        tx.set(&key!["x"], b"y");
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(attempts, 1);
}

/// Counts `["items", *]` into `["count"]` while another thread inserts into the prefix between
/// the list and the commit: the count must conflict, rerun, and end right.
#[test]
fn a_phantom_insert_into_a_listed_prefix_conflicts_and_the_count_is_right() {
    let db = Database::in_memory();
    for i in 0..3u64 {
        db.set(&key!["items", i], b"x").unwrap();
    }
    let listed = Barrier::new(2);
    let inserted = Barrier::new(2);
    let mut attempts = 0;
    std::thread::scope(|s| {
        let inserter = s.spawn(|| {
            listed.wait();
            db.set(&key!["items", 10u64], b"x").unwrap();
            inserted.wait();
        });
        let options = TransactionOptions {
            max_attempts: 4,
            ..TransactionOptions::default()
        };
        db.transaction_with(&options, |tx| {
            attempts += 1;
            let n = tx
                .list(&Selector::prefix(&key!["items"]), ListOptions::default())?
                .len() as u64;
            if attempts == 1 {
                listed.wait();
                inserted.wait();
            }
            tx.set(&key!["count"], Value::U64(n));
            Ok::<_, Error>(())
        })
        .unwrap();
        inserter.join().unwrap();
    });
    assert_eq!(attempts, 2, "the phantom must conflict the first commit");
    assert_eq!(u64_of(db.get(&key!["count"]).unwrap().map(|e| e.value)), 4);
}

#[test]
fn a_limited_list_conflicts_only_on_what_it_covered() {
    let db = Database::in_memory();
    for i in 0..5u64 {
        db.set(&key!["p", i], b"x").unwrap();
    }
    // Forward, limit 2: covers up to ["p", 1]. A write past it does not conflict; the rerun is
    // triggered by a write inside.
    for (write, conflicts) in [(key!["p", 4u64], false), (key!["p", 0u64], true)] {
        let mut attempts = 0;
        db.transaction(|tx| {
            attempts += 1;
            let opts = ListOptions {
                limit: Some(2),
                ..ListOptions::default()
            };
            tx.list(&Selector::prefix(&key!["p"]), opts)?;
            if attempts == 1 {
                db.set(&write, b"changed").unwrap();
            }
            tx.set(&key!["out"], b"x");
            Ok::<_, Error>(())
        })
        .unwrap();
        assert_eq!(attempts, 1 + usize::from(conflicts), "{write:?}");
    }
    // Reverse, limit 2: covers from ["p", 3] on.
    for (write, conflicts) in [(key!["p", 0u64], false), (key!["p", 4u64], true)] {
        let mut attempts = 0;
        db.transaction(|tx| {
            attempts += 1;
            let opts = ListOptions {
                limit: Some(2),
                reverse: true,
                ..ListOptions::default()
            };
            tx.list(&Selector::prefix(&key!["p"]), opts)?;
            if attempts == 1 {
                db.set(&write, b"changed").unwrap();
            }
            tx.set(&key!["out"], b"x");
            Ok::<_, Error>(())
        })
        .unwrap();
        assert_eq!(attempts, 1 + usize::from(conflicts), "{write:?}");
    }
}

fn listed(entries: &[tuplekv_engine::Entry]) -> Vec<(Key, Value)> {
    entries
        .iter()
        .map(|e| (e.decoded_key().unwrap(), e.value.clone()))
        .collect()
}

#[test]
fn list_in_a_transaction_sees_its_own_sets_and_deletes() {
    let db = Database::in_memory();
    for i in [1u64, 3, 5, 7] {
        db.set(&key!["r", i], Value::U64(i)).unwrap();
    }
    db.transaction(|tx| {
        tx.delete(&key!["r", 1u64]); // a stored key, deleted
        tx.set(&key!["r", 2u64], Value::U64(20)); // new
        tx.set(&key!["r", 5u64], Value::U64(50)); // overwritten
        tx.set(&key!["r", 9u64], Value::U64(90)); // new, last
        tx.set(&key!["r", 8u64], Value::U64(80));
        tx.delete(&key!["r", 8u64]); // new, then deleted
        tx.sum(&key!["r", 3u64], 100); // read-modify-write of a stored key
        tx.set(&key!["s"], b"outside the prefix");
        let prefix = Selector::prefix(&key!["r"]);
        let all = tx.list(&prefix, ListOptions::default())?;
        let expect = |ks: &[u64]| -> Vec<(Key, Value)> {
            ks.iter()
                .map(|&k| {
                    let v = match k {
                        2 => 20,
                        3 => 103,
                        5 => 50,
                        9 => 90,
                        n => n,
                    };
                    (key!["r", k], Value::U64(v))
                })
                .collect()
        };
        assert_eq!(listed(&all), expect(&[2, 3, 5, 7, 9]));
        for e in &all {
            let own = e.decoded_key().unwrap() != key!["r", 7u64];
            assert_eq!(e.versionstamp.version() == 0, own, "{e:?}");
        }
        // A limit counts merged entries; deletes do not leave the page short.
        let page = |limit, reverse| ListOptions {
            limit: Some(limit),
            reverse,
            ..ListOptions::default()
        };
        assert_eq!(listed(&tx.list(&prefix, page(2, false))?), expect(&[2, 3]));
        assert_eq!(
            listed(&tx.list(&prefix, page(3, true))?),
            expect(&[9, 7, 5])
        );
        assert_eq!(listed(&tx.list(&prefix, page(1, false))?), expect(&[2]));
        // Small batches read the same.
        let batched = ListOptions {
            batch_size: Some(1),
            reverse: true,
            ..ListOptions::default()
        };
        assert_eq!(
            listed(&tx.list(&prefix, batched)?),
            expect(&[9, 7, 5, 3, 2])
        );
        Ok::<_, Error>(())
    })
    .unwrap();
}

#[test]
fn a_list_limit_of_usize_max_means_all() {
    let db = Database::in_memory();
    for i in 0..3u64 {
        db.set(&key!["m", i], b"x").unwrap();
    }
    let n = db
        .transaction(|tx| {
            tx.set(&key!["m", 9u64], b"y");
            tx.delete(&key!["m", 0u64]);
            let all = ListOptions {
                limit: Some(usize::MAX),
                ..ListOptions::default()
            };
            Ok::<_, Error>(tx.list(&Selector::prefix(&key!["m"]), all)?.len())
        })
        .unwrap();
    assert_eq!(n, 3);
}

#[test]
fn a_key_at_the_read_limit_read_in_a_transaction_commits() {
    let db = Database::in_memory();
    let at = key![vec![b'k'; KEY_SIZE_MAX_READ - 2]];
    assert_eq!(at.encode().len(), KEY_SIZE_MAX_READ);
    let found = db
        .transaction(|tx| {
            let found = tx.get(&at)?.is_some();
            tx.set(&key!["after"], b"x");
            Ok::<_, Error>(found)
        })
        .unwrap();
    assert!(!found);
    assert!(db.get(&key!["after"]).unwrap().is_some());
    // One past the limit fails at the read, with the size.
    let past = key![vec![b'k'; KEY_SIZE_MAX_READ - 1]];
    let err = db.transaction(|tx| tx.get(&past).map(|_| ())).unwrap_err();
    assert_eq!(err, Error::KeyTooLargeForRead { size: 2050 });
}

/// The property: a transaction reading `reads` keys, one of which (`changed`) another writer
/// sets after the first attempt read it, conflicts once and commits on its rerun.
fn check_read_conflicts(reads: usize, changed: usize) {
    let db = Database::in_memory();
    let keys: Vec<Key> = (0..reads).map(|i| key!["read", i as u64]).collect();
    let mut attempts = 0;
    db.transaction(|tx| {
        attempts += 1;
        for k in &keys {
            tx.get(k)?;
        }
        if attempts == 1 {
            db.set(&keys[changed], b"meanwhile").unwrap();
        }
        tx.set(&key!["done"], b"x");
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(attempts, 2, "reads={reads} changed={changed}");
}

#[test]
fn reads_past_the_check_limit_commit_and_still_conflict() {
    // Within the limit (a check), and past it (the reads that stay range checks).
    check_read_conflicts(3, 1);
    check_read_conflicts(CHECKS_MAX + 20, 0);
    check_read_conflicts(CHECKS_MAX + 20, CHECKS_MAX + 19);
    // Explicit checks leave less room, and the commit stays within the limit.
    let db = Database::in_memory();
    db.transaction(|tx| {
        for i in 0..CHECKS_MAX as u64 {
            tx.check(&key!["explicit", i], None);
            tx.get(&key!["read", i])?;
        }
        tx.set(&key!["done"], b"x");
        Ok::<_, Error>(())
    })
    .unwrap();
    assert!(db.get(&key!["done"]).unwrap().is_some());
}

/// A store that records the last operation a transaction commits through it.
struct Recording {
    db: Database,
    last: std::sync::Mutex<Option<tuplekv_engine::AtomicWrite>>,
}

impl tuplekv_engine::Store for Recording {
    type Snapshot = tuplekv_engine::Snapshot;
    type Watch = tuplekv_engine::Watch;

    fn watch_raw(
        &self,
        keys: Vec<tuplekv_engine::KeyBytes>,
    ) -> Result<Self::Watch, tuplekv_engine::Error> {
        self.db.watch_raw(keys)
    }

    fn snapshot(&self) -> Self::Snapshot {
        self.db.snapshot()
    }

    fn snapshot_versionstamp(snapshot: &Self::Snapshot) -> tuplekv_engine::Versionstamp {
        snapshot.versionstamp()
    }

    fn commit(
        &self,
        write: tuplekv_engine::AtomicWrite,
    ) -> Result<tuplekv_engine::CommitResult, Error> {
        *self.last.lock().unwrap() = Some(write.clone());
        tuplekv_engine::Store::commit(&self.db, write)
    }
}

/// Key reads reach the store as versionstamp checks (one lookup shared with a write of the
/// same key), what was read absent as an absence check, and a list as a range check.
#[test]
fn key_reads_commit_as_versionstamp_checks_and_lists_as_range_checks() {
    use tuplekv_engine::{KeyBytes, Store};
    let db = Database::in_memory();
    let stamp = db.set(&key!["present"], b"v").unwrap();
    let store = Recording {
        db,
        last: std::sync::Mutex::new(None),
    };
    store
        .transaction(|tx| {
            tx.get(&key!["present"])?;
            tx.get(&key!["absent"])?;
            tx.get(&key!["present"])?; // read twice, checked once
            tx.list(&Selector::prefix(&key!["range"]), ListOptions::default())?;
            tx.set(&key!["present"], b"w");
            Ok::<_, Error>(())
        })
        .unwrap();
    let write = store.last.lock().unwrap().take().unwrap();
    let checks: Vec<(KeyBytes, Option<tuplekv_engine::Versionstamp>)> = write
        .checks
        .iter()
        .map(|c| (c.key.clone(), c.versionstamp))
        .collect();
    assert_eq!(
        checks,
        [
            (
                KeyBytes::from(tuplekv_engine::codec::encode_key(&key!["present"])),
                Some(stamp)
            ),
            (
                KeyBytes::from(tuplekv_engine::codec::encode_key(&key!["absent"])),
                None
            ),
        ]
    );
    assert_eq!(write.range_checks.len(), 1, "{:?}", write.range_checks);
    assert_eq!(write.mutations.len(), 1);
}

#[test]
fn a_transaction_reads_its_own_expiring_set_with_the_deadline_its_commit_will_write() {
    let db = Database::in_memory();
    let k = key!["own", "lease"];
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let expires_at = db
        .transaction(|tx| {
            tx.set_with_expiry(&k, Value::U64(1), Duration::from_secs(60));
            let own = tx.get(&k)?.unwrap();
            assert_eq!(own.value, Value::U64(1));
            Ok::<_, Error>(own.expires_at)
        })
        .unwrap()
        .expect("an expiring set reads with its deadline");
    let lower = u64::try_from(before).unwrap() + 60_000;
    assert!(
        (lower..lower + 60_000).contains(&expires_at),
        "{expires_at} is not about a minute after {before}"
    );
    let stored = db.get(&k).unwrap().unwrap().expires_at.unwrap();
    assert!(stored >= expires_at, "the commit reads the clock later");
}
