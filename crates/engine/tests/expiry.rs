//! Expiry: a value is invisible to every read, list and check from its deadline on (Deno
//! leaves it visible for up to a minute), overwrites and u64 operations clear the deadline,
//! and expired values are reclaimed.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::time::Duration;

use tuplekv_engine::{Database, ListOptions, Selector, Value, key};
use tuplekv_testkit::db::options;

const NOW: Duration = Duration::ZERO;
const LATER: Duration = Duration::from_secs(3600);

#[test]
fn expired_value_is_invisible_to_get_list_and_checks_at_once() {
    let db = Database::in_memory();
    let k = key!["exp", 1];
    let vs = db
        .atomic()
        .set_with_expiry(&k, b"v", NOW)
        .commit()
        .unwrap()
        .versionstamp();
    assert!(
        db.atomic()
            .set_with_expiry(&key!["exp", 2], b"w", LATER)
            .commit()
            .unwrap()
            .is_committed()
    );
    assert_eq!(db.get(&k).unwrap(), None);
    let listed: Vec<_> = db
        .list(&Selector::prefix(&key!["exp"]), ListOptions::default())
        .unwrap()
        .collect();
    assert_eq!(listed.len(), 1, "only the unexpired key is listed");
    assert!(
        db.atomic().check(&k, None).commit().unwrap().is_committed(),
        "expired reads as absent"
    );
    assert!(!db.atomic().check(&k, vs).commit().unwrap().is_committed());
    assert!(db.snapshot().get_many(std::slice::from_ref(&k)).unwrap()[0].is_none());
}

#[test]
fn u64_ops_on_an_expired_value_start_from_the_operand() {
    // Deno still sees the expired 5 and stores 6; for us the value is gone.
    let db = Database::in_memory();
    let k = key!["counter"];
    assert!(
        db.atomic()
            .set_with_expiry(&k, 5u64, NOW)
            .commit()
            .unwrap()
            .is_committed()
    );
    let _ = db.atomic().sum(&k, 1).commit().unwrap();
    assert_eq!(db.get(&k).unwrap().unwrap().value, Value::U64(1));
}

#[test]
fn overwrite_and_sum_clear_the_deadline() {
    let db = Database::in_memory();
    let k = key!["k"];
    assert!(
        db.atomic()
            .set_with_expiry(&k, b"old", NOW)
            .commit()
            .unwrap()
            .is_committed()
    );
    db.set(&k, b"new").unwrap();
    assert_eq!(db.get(&k).unwrap().unwrap().value, Value::from(b"new"));
    db.reclaim_now();
    assert_eq!(
        db.get(&k).unwrap().unwrap().value,
        Value::from(b"new"),
        "reclaim keeps it"
    );

    let c = key!["c"];
    assert!(
        db.atomic()
            .set_with_expiry(&c, 1u64, LATER)
            .commit()
            .unwrap()
            .is_committed()
    );
    let _ = db.atomic().sum(&c, 1).commit().unwrap();
    db.reclaim_now();
    assert_eq!(db.get(&c).unwrap().unwrap().value, Value::U64(2));
}

#[test]
fn expired_values_are_reclaimed() {
    let db = Database::with_options(options());
    let a = (0..1000).fold(db.atomic(), |a, i| {
        a.set_with_expiry(&key!["e", i], b"v", NOW)
    });
    assert!(a.commit().unwrap().is_committed());
    db.set(&key!["stays"], b"v").unwrap();
    assert_eq!(db.stats().keys, 1001);
    db.reclaim_now();
    assert_eq!(db.stats().keys, 1);
    assert_eq!(db.stats().versions, 1);
}

#[test]
fn a_snapshot_keeps_seeing_a_value_that_expires_later_but_not_after_its_deadline() {
    let db = Database::in_memory();
    let k = key!["k"];
    assert!(
        db.atomic()
            .set_with_expiry(&k, b"v", LATER)
            .commit()
            .unwrap()
            .is_committed()
    );
    let snap = db.snapshot();
    db.delete(&k).unwrap();
    db.reclaim_now();
    assert!(tuplekv_engine::ReadView::get(&snap, &k).unwrap().is_some());
    assert!(db.get(&k).unwrap().is_none());
}

#[test]
fn a_later_mutation_in_the_same_commit_does_not_see_a_value_set_to_expire_at_once() {
    // The value's deadline is the commit's own time, so it is expired for the sum that follows
    // it, as it would be for a read: the sum starts from its operand, and a type mismatch
    // with the expired bytes is no error.
    let db = Database::in_memory();
    let k = key!["k"];
    let res = db
        .atomic()
        .set_with_expiry(&k, 5u64, NOW)
        .sum(&k, 1)
        .commit()
        .unwrap();
    assert!(res.is_committed());
    assert_eq!(db.get(&k).unwrap().unwrap().value, Value::U64(1));
    let res = db
        .atomic()
        .set_with_expiry(&k, b"bytes", NOW)
        .max(&k, 7)
        .commit()
        .unwrap();
    assert!(res.is_committed());
    assert_eq!(db.get(&k).unwrap().unwrap().value, Value::U64(7));
}

/// Reads report a value's deadline, so callers (and transactions, which turn it into a
/// conflict once it passes) know when what they read disappears.
#[test]
fn entries_carry_the_deadline_of_their_value() {
    let db = Database::in_memory();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let a = db
        .atomic()
        .set_with_expiry(&key!["e", "later"], b"v", LATER)
        .set(&key!["e", "forever"], b"w");
    assert!(a.commit().unwrap().is_committed());
    let later = db.get(&key!["e", "later"]).unwrap().unwrap();
    let deadline = later.expires_at.unwrap();
    assert!(deadline >= before + LATER.as_millis() as u64, "{deadline}");
    assert_eq!(
        db.get(&key!["e", "forever"]).unwrap().unwrap().expires_at,
        None
    );
    let listed: Vec<Option<u64>> = db
        .list(&Selector::prefix(&key!["e"]), ListOptions::default())
        .unwrap()
        .map(|e| e.unwrap().expires_at)
        .collect();
    assert_eq!(listed, [None, Some(deadline)]);
}

#[test]
fn borrowed_latest_reads_agree_with_copied_ones_for_live_expired_deleted_and_absent_keys() {
    use tuplekv_engine::Store;
    use tuplekv_engine::codec::encode_key;
    use tuplekv_engine::limits::KEY_SIZE_MAX_READ;

    let db = Database::in_memory();
    db.set(&key!["live"], b"v").unwrap();
    assert!(
        db.atomic()
            .set_with_expiry(&key!["expired"], b"x", NOW)
            .commit()
            .unwrap()
            .is_committed()
    );
    db.set(&key!["deleted"], b"d").unwrap();
    db.delete(&key!["deleted"]).unwrap();
    for k in [
        key!["live"],
        key!["expired"],
        key!["deleted"],
        key!["absent"],
    ] {
        let raw = encode_key(&k);
        let copied = db
            .get_latest_raw(&raw)
            .unwrap()
            .map(|e| (e.value, e.versionstamp));
        let borrowed = db
            .read_latest_raw(&raw, |e| e.map(|(v, stamp)| (v.clone(), stamp)))
            .unwrap();
        assert_eq!(borrowed, copied, "{k}");
        assert_eq!(borrowed.is_some(), k == key!["live"], "{k}");
    }
    let too_long = vec![0u8; KEY_SIZE_MAX_READ + 1];
    assert!(db.read_latest_raw(&too_long, |_| ()).is_err());
}

#[test]
fn an_absolute_deadline_expires_the_value_at_that_unix_millisecond() {
    use tuplekv_engine::{Expiry, MutationKind, codec::encode_key};
    let db = Database::in_memory();
    let now_ms = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let set_at = |k: &tuplekv_engine::Key, deadline: u64| {
        db.atomic()
            .mutate_raw(
                &encode_key(k),
                MutationKind::Set {
                    value: Value::from(b"v"),
                    expiry: Some(Expiry::At(deadline)),
                },
            )
            .commit()
            .unwrap()
    };
    assert!(set_at(&key!["at", "past"], now_ms - 1).is_committed());
    assert!(set_at(&key!["at", "future"], now_ms + 3_600_000).is_committed());
    assert_eq!(db.get(&key!["at", "past"]).unwrap(), None, "already past");
    let future = db.get(&key!["at", "future"]).unwrap().expect("not yet");
    assert_eq!(future.expires_at, Some(now_ms + 3_600_000), "kept exactly");
}
