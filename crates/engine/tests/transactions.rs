//! Transactions: what they read is validated at commit, including expiry: a value read
//! live that expired before the commit once let the commit through.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::time::{Duration, Instant};

use tuplekv_engine::{Database, Error, Key, ListOptions, Options, Selector, Value, key};

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
    let a = db
        .atomic()
        .set_with_expiry(&k, b"held", Duration::from_millis(30));
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
    let quiet = Database::with_options(Options {
        background_reclaim: false,
        ..Options::default()
    });
    check_expiry_conflicts(&quiet, false);
}

#[test]
fn reclaiming_the_expired_value_does_not_hide_the_conflict() {
    check_expiry_conflicts(&Database::in_memory(), true);
}

#[test]
fn an_expiry_in_a_listed_range_conflicts() {
    let db = Database::in_memory();
    let a = db
        .atomic()
        .set_with_expiry(&key!["q", 1], b"job", Duration::from_millis(30));
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
