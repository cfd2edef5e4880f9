//! The borrowing scan (`Store::for_each`, `ReadView::scan_with`): it visits exactly what the
//! list iterator yields, in the same order and from one snapshot, whatever the options, and
//! stops when told.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::ops::ControlFlow;
use std::time::Duration;

use proptest::prelude::*;
use tuplekv_engine::limits::SCAN_PIN_ENTRIES;
use tuplekv_engine::{Database, Entry, Error, ListOptions, ReadView, Selector, Value, key};

/// Everything `for_each` visits, as owned entries.
fn visited(db: &Database, selector: &Selector, options: ListOptions) -> Result<Vec<Entry>, Error> {
    let mut out = Vec::new();
    let n = db.for_each(selector, options, |e| {
        out.push(e.to_entry());
        ControlFlow::Continue(())
    })?;
    assert_eq!(n, out.len(), "the count is the entries visited");
    Ok(out)
}

fn listed(db: &Database, selector: &Selector, options: ListOptions) -> Vec<Entry> {
    db.list(selector, options).unwrap().read_all().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// On random maps, with random limits, directions and cursors, the borrowing scan visits
    /// the list iterator's entries exactly.
    #[test]
    fn for_each_visits_exactly_what_list_yields(
        keys in proptest::collection::btree_set(0u32..400, 0..120),
        deleted in proptest::collection::vec(0u32..400, 0..20),
        limit in proptest::option::of(1usize..150),
        reverse in any::<bool>(),
        resume_after in proptest::option::of(0usize..60),
        value_len in 0usize..600,
    ) {
        let db = Database::in_memory();
        for &k in &keys {
            let value = if k % 3 == 0 { Value::U64(u64::from(k)) } else { Value::from(vec![k as u8; value_len]) };
            db.set(&key!["p", k], value).unwrap();
        }
        db.set(&key!["q", 1], b"outside").unwrap();
        for k in deleted {
            db.delete(&key!["p", k]).unwrap();
        }
        let selector = Selector::prefix(&key!["p"]);
        let mut options = ListOptions { limit, reverse, ..ListOptions::default() };
        if let Some(after) = resume_after {
            let mut first = db.list(&selector, ListOptions { reverse, ..ListOptions::default() }).unwrap();
            if first.by_ref().take(after + 1).count() == after + 1 {
                options.cursor = Some(first.cursor().as_deno_str().to_owned());
            }
        }
        prop_assert_eq!(visited(&db, &selector, options.clone()).unwrap(), listed(&db, &selector, options));
    }
}

#[test]
fn for_each_stops_at_the_first_break_and_counts_the_entry_that_broke() {
    let db = Database::in_memory();
    for i in 0..10u64 {
        db.set(&key!["k", i], i).unwrap();
    }
    let mut seen = Vec::new();
    let n = db
        .for_each(&Selector::prefix(&key!["k"]), ListOptions::default(), |e| {
            seen.push(e.value.as_u64().unwrap());
            if seen.len() == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!((n, seen), (3, vec![0, 1, 2]));
}

#[test]
fn for_each_refuses_a_zero_limit_and_a_bad_cursor_before_visiting_anything() {
    let db = Database::in_memory();
    db.set(&key!["k", 1], b"v").unwrap();
    let selector = Selector::prefix(&key!["k"]);
    let mut calls = 0;
    let zero = ListOptions {
        limit: Some(0),
        ..ListOptions::default()
    };
    assert!(matches!(
        db.for_each(&selector, zero, |_| {
            calls += 1;
            ControlFlow::Continue(())
        }),
        Err(Error::ZeroLimit)
    ));
    let bad = ListOptions {
        cursor: Some("not a cursor!".into()),
        ..ListOptions::default()
    };
    assert!(
        db.for_each(&selector, bad, |_| {
            calls += 1;
            ControlFlow::Continue(())
        })
        .is_err()
    );
    assert_eq!(calls, 0);
}

#[test]
fn for_each_skips_expired_values_as_list_does() {
    let db = Database::in_memory();
    assert!(
        db.atomic()
            .set_with_expiry(&key!["k", 1], b"gone", Duration::from_millis(1))
            .set(&key!["k", 2], b"stays")
            .commit()
            .unwrap()
            .is_committed()
    );
    std::thread::sleep(Duration::from_millis(5));
    let all = visited(&db, &Selector::prefix(&key!["k"]), ListOptions::default()).unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].value, Value::from(b"stays"));
}

/// Values too large to be stored inline (over 32 bytes) take the list's shared-value path: an
/// expired one is skipped, a live one keeps its deadline, a deleted one is gone, and a
/// snapshot taken before an overwrite lists the older value; `for_each` agrees throughout.
#[test]
fn list_of_shared_values_skips_expired_and_deleted_ones_and_reads_at_its_snapshot() {
    let large = |c: u8| vec![c; 100];
    let db = Database::in_memory();
    let written = db
        .atomic()
        .set_with_expiry(&key!["k", 1], large(1), Duration::from_millis(1))
        .set_with_expiry(&key!["k", 2], large(2), Duration::from_secs(3600))
        .set(&key!["k", 3], large(3))
        .set(&key!["k", 4], large(4))
        .commit()
        .unwrap();
    assert!(written.is_committed());
    db.delete(&key!["k", 4]).unwrap();
    let before = db.snapshot();
    db.set(&key!["k", 3], large(33)).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let selector = Selector::prefix(&key!["k"]);
    let now = listed(&db, &selector, ListOptions::default());
    let values: Vec<Value> = now.iter().map(|e| e.value.clone()).collect();
    assert_eq!(values, vec![Value::from(large(2)), Value::from(large(33))]);
    assert!(
        now[0].expires_at.is_some(),
        "a live value keeps its deadline"
    );
    assert_eq!(now[1].expires_at, None);
    assert_eq!(
        visited(&db, &selector, ListOptions::default()).unwrap(),
        now
    );
    let then: Vec<Value> = before
        .list(&selector, ListOptions::default())
        .unwrap()
        .map(|e| e.unwrap().value)
        .collect();
    assert_eq!(then, vec![Value::from(large(2)), Value::from(large(3))]);
}

/// A scan longer than one pin's budget resumes under a new pin where it stopped, in both
/// directions, and still reads one state: writes made while it runs (from the visitor
/// itself) are not seen.
#[test]
fn a_scan_across_several_pins_reads_one_snapshot_without_skipping_or_repeating_keys() {
    let db = Database::in_memory();
    let n = (SCAN_PIN_ENTRIES * 3 + 17) as u64;
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut a = db.atomic();
        for &i in chunk {
            a = a.set(&key!["k", i], i);
        }
        assert!(a.commit().unwrap().is_committed());
    }
    let selector = Selector::prefix(&key!["k"]);
    for reverse in [false, true] {
        let mut seen = Vec::new();
        db.for_each(
            &selector,
            ListOptions {
                reverse,
                ..ListOptions::default()
            },
            |e| {
                let i = e.value.as_u64().unwrap();
                seen.push(i);
                // Overwrites and deletes ahead of the scan, and a new key inside its range.
                db.set(&key!["k", (i + 700) % n], u64::MAX).unwrap();
                db.delete(&key!["k", (i + 1300) % n]).unwrap();
                db.set(&key!["k", i, "new"], 1u64).unwrap();
                ControlFlow::Continue(())
            },
        )
        .unwrap();
        let mut expected: Vec<u64> = (0..n).collect();
        if reverse {
            expected.reverse();
        }
        assert_eq!(seen, expected, "reverse: {reverse}");
        // Put the map back for the other direction.
        for i in 0..n {
            db.set(&key!["k", i], i).unwrap();
            db.delete(&key!["k", i, "new"]).unwrap();
        }
    }
}

/// A snapshot's borrowing scan reads at the snapshot's version.
#[test]
fn a_snapshots_scan_with_reads_at_its_version() {
    let db = Database::in_memory();
    db.set(&key!["k", 1], b"old").unwrap();
    let snap = db.snapshot();
    db.set(&key!["k", 1], b"new").unwrap();
    db.set(&key!["k", 2], b"later").unwrap();
    let range = Selector::prefix(&key!["k"]).byte_range().unwrap();
    let mut seen = Vec::new();
    snap.scan_with(&range, false, usize::MAX, &mut |e| {
        seen.push(e.value.to_value());
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(seen, vec![Value::from(b"old")]);
}
