//! Online index builds: indexes added to a collection that already has records are built in
//! bounded batches while other threads keep inserting, updating and deleting, and end exactly
//! consistent with the records (checked by `verify()` and by a naive filter of the records).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use tuplekv_engine::{Database, ListOptions, key};
use tuplekv_index::{Collection, Error};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    email: String,
    color: u8,
    tags: Vec<u8>,
}

const RECORDS: u64 = 300;
const BATCH: usize = 16;

fn indexed(db: Database) -> Collection<User, Database> {
    Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .index("color", |u| Some(key![u.color]))
        .multi("tags", |u| u.tags.iter().map(|t| key![*t]).collect())
        .covering()
        .max_attempts(1000)
        .open(db)
        .unwrap()
}

#[test]
fn indexes_built_while_writers_run_end_consistent_with_the_records() {
    let db = Database::in_memory();
    let plain = Collection::builder("users", |u: &User| key![u.id])
        .open(db.clone())
        .unwrap();
    for id in 0..RECORDS {
        plain
            .insert(&User {
                id,
                email: format!("{id}@x"),
                color: (id % 3) as u8,
                tags: vec![(id % 4) as u8],
            })
            .unwrap();
    }
    let c = indexed(db.clone());
    assert!(matches!(
        c.count("color", &key![0u8]),
        Err(Error::IndexNotReady { .. })
    ));
    let start = Barrier::new(3);
    let done = AtomicBool::new(false);
    let (report, progress) = std::thread::scope(|s| {
        for t in 0..2u64 {
            let c = c.clone();
            let (start, done) = (&start, &done);
            s.spawn(move || {
                let mut rng = fastrand::Rng::with_seed(t);
                start.wait();
                let mut n = 0u64;
                // Keep writing until the build is over, and at least 200 writes.
                while !done.load(Ordering::Acquire) || n < 200 {
                    n += 1;
                    // Ids past RECORDS are new records; emails are unique per id and generation.
                    let id = rng.u64(0..RECORDS + 40);
                    let u = User {
                        id,
                        email: format!("{id}-{t}-{n}@x"),
                        color: rng.u8(0..3),
                        tags: (0..rng.usize(0..3)).map(|_| rng.u8(0..4)).collect(),
                    };
                    match rng.u8(0..4) {
                        0 => {
                            c.delete(&key![id]).unwrap();
                        }
                        1 => match c.update(&key![id], |mut old| {
                            old.color = u.color;
                            old
                        }) {
                            Ok(_) | Err(Error::NotFound { .. }) => {}
                            Err(e) => panic!("{e}"),
                        },
                        _ => {
                            c.upsert(&u).unwrap();
                        }
                    }
                }
            });
        }
        start.wait();
        let mut progress = Vec::new();
        let report = c.backfill(BATCH, |p| progress.push(p.clone())).unwrap();
        done.store(true, Ordering::Release);
        (report, progress)
    });
    assert!(report.duplicates.is_empty(), "{report:?}");
    let completed: BTreeSet<&str> = report.completed.iter().map(String::as_str).collect();
    assert_eq!(completed, BTreeSet::from(["color", "email", "tags"]));
    // Bounded batches: progress after every batch, never more than BATCH records at a time.
    for index in ["color", "email", "tags"] {
        let steps: Vec<u64> = progress
            .iter()
            .filter(|p| p.index == index)
            .map(|p| p.records)
            .collect();
        // Several batches per index (writers delete some records meanwhile, so not exactly
        // RECORDS / BATCH), each adding between 1 and BATCH records.
        assert!(steps.len() >= 5, "{index}: {steps:?}");
        let mut last = 0;
        for s in steps {
            assert!(
                (1..=BATCH as u64).contains(&(s - last)),
                "{index}: {s} after {last}"
            );
            last = s;
        }
    }
    let verify = c.verify().unwrap();
    assert!(verify.is_clean(), "{verify:?}");
    // Queries equal a naive filter of the records.
    let records: Vec<User> = c
        .list(ListOptions::default())
        .unwrap()
        .items
        .into_iter()
        .map(|(_, u)| u)
        .collect();
    for color in 0..3u8 {
        let got: Vec<u64> = c
            .list_by("color", &key![color], ListOptions::default())
            .unwrap()
            .items
            .iter()
            .map(|(_, u)| u.id)
            .collect();
        let want: Vec<u64> = records
            .iter()
            .filter(|u| u.color == color)
            .map(|u| u.id)
            .collect();
        assert_eq!(got, want);
    }
    for u in &records {
        assert_eq!(
            c.get_by("email", &key![u.email.clone()]).unwrap(),
            Some((key![u.id], u.clone()))
        );
    }
}

/// An update during a build must not delete a unique entry another record holds. Record 10
/// has `y@x` but no entry yet (the build has not reached it); record 1 takes `y@x` (nothing
/// stops it); then record 10 moves from `y@x` to `w@x`. The update used to delete every old
/// unique key, record 1's entry included, so the build went live without it and a third
/// record could take `y@x`.
#[test]
fn an_update_during_a_build_keeps_the_unique_entry_another_record_holds() {
    let db = Database::in_memory();
    let plain = Collection::builder("users", |u: &User| key![u.id])
        .open(db.clone())
        .unwrap();
    let user = |id: u64, email: &str| User {
        id,
        email: email.into(),
        color: 0,
        tags: vec![],
    };
    plain.insert(&user(5, "a@x")).unwrap();
    plain.insert(&user(10, "y@x")).unwrap();
    let c = indexed(db);
    let report = c
        .backfill(1, |p| {
            // After the first batch of the email index: record 5 is indexed, record 10 not.
            if p.index == "email" && p.records == 1 {
                c.insert(&user(1, "y@x")).unwrap();
                c.update(&key![10], |mut u| {
                    u.email = "w@x".into();
                    u
                })
                .unwrap();
            }
        })
        .unwrap();
    assert!(report.duplicates.is_empty(), "{report:?}");
    assert!(report.completed.contains(&"email".to_owned()));
    let verify = c.verify().unwrap();
    assert!(verify.is_clean(), "{verify:?}");
    assert_eq!(c.get_by("email", &key!["y@x"]).unwrap().unwrap().0, key![1]);
    assert_eq!(c.get_by("email", &key!["w@x"]).unwrap().unwrap().0, key![10]);
    assert_eq!(
        c.insert(&user(2, "y@x")),
        Err(Error::UniqueViolation {
            index: "email".into(),
            value: key!["y@x"],
            existing_primary_key: key![1],
        })
    );
}
