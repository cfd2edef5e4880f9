//! Online index builds: indexes added to a collection that already has records are built in
//! bounded batches (by records and by the engine's commit limits) while other threads keep
//! inserting, updating and deleting with colliding unique values, refuse queries until built,
//! and end exactly consistent with the records (checked by `verify()` and by a naive filter of
//! the records).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use tuplekv_engine::limits::{MUTATIONS_MAX, TOTAL_MUTATION_SIZE_MAX};
use tuplekv_engine::{Database, ListOptions, key};
use tuplekv_index::{BACKFILL_BATCH_DEFAULT, Collection, Error, Progress};

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

/// The emails writers draw from: a few of the last records' own emails (those the build
/// reaches last, so a writer can take one before its record is indexed) and a few new ones.
fn pooled_email(rng: &mut fastrand::Rng) -> String {
    match rng.u64(0..8) {
        k @ 0..4 => format!("{}@x", RECORDS - 1 - k),
        k => format!("p{k}@x"),
    }
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
    let start = Barrier::new(4);
    // The build pauses after its first batch while a reader checks the indexes refuse.
    let mid = Barrier::new(2);
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
                    // Ids past RECORDS are new records; emails collide.
                    let id = rng.u64(0..RECORDS + 40);
                    let u = User {
                        id,
                        email: pooled_email(&mut rng),
                        color: rng.u8(0..3),
                        tags: (0..rng.usize(0..3)).map(|_| rng.u8(0..4)).collect(),
                    };
                    let res = match rng.u8(0..5) {
                        0 => c.delete(&key![id]).map(|_| ()),
                        1 => c
                            .update(&key![id], |mut old| {
                                old.color = u.color;
                                old
                            })
                            .map(|_| ()),
                        2 => c
                            .update(&key![id], |mut old| {
                                old.email = u.email.clone();
                                old
                            })
                            .map(|_| ()),
                        _ => c.upsert(&u).map(|_| ()),
                    };
                    match res {
                        Ok(()) | Err(Error::NotFound { .. } | Error::UniqueViolation { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
        let reader = c.clone();
        let (start_r, mid_r) = (&start, &mid);
        s.spawn(move || {
            start_r.wait();
            mid_r.wait();
            for index in ["email", "color", "tags"] {
                assert_eq!(
                    reader.count(index, &key![]),
                    Err(Error::IndexNotReady {
                        index: index.into()
                    })
                );
            }
            assert!(matches!(
                reader.get_by("email", &key!["1@x"]),
                Err(Error::IndexNotReady { .. })
            ));
            mid_r.wait();
        });
        start.wait();
        let mut progress: Vec<Progress> = Vec::new();
        let report = c
            .backfill(BATCH, |p| {
                if progress.is_empty() {
                    mid.wait(); // the reader checks now
                    mid.wait(); // and is done
                }
                progress.push(p.clone());
            })
            .unwrap();
        done.store(true, Ordering::Release);
        (report, progress)
    });
    // A writer may take a last record's email before the build reaches that record: the build
    // reports it, names the record holding the entry, and keeps the email index building.
    for d in &report.duplicates {
        assert_eq!(d.index, "email", "{d:?}");
        assert!(
            d.holder.is_some() && d.holder.as_ref() != Some(&d.other),
            "{d:?}"
        );
    }
    let completed: BTreeSet<&str> = report.completed.iter().map(String::as_str).collect();
    let mut want: BTreeSet<&str> = BTreeSet::from(["color", "tags"]);
    if report.duplicates.is_empty() {
        want.insert("email");
    }
    assert_eq!(completed, want, "{report:?}");
    // Bounded batches: progress after every batch, never more than BATCH records at a time.
    for index in ["color", "email", "tags"] {
        let steps: Vec<u64> = progress
            .iter()
            .filter(|p| p.index == index)
            .map(|p| p.records)
            .collect();
        // Several batches per index, each adding between 1 and BATCH records. How many
        // depends on how many records the writers left: they keep deleting while the build
        // runs, and a slow (loaded) machine lets them delete most of the 300, so the count is
        // checked against the records scanned, not against RECORDS / BATCH.
        let scanned = steps.last().copied().unwrap_or(0);
        assert!(
            steps.len() as u64 >= scanned.div_ceil(BATCH as u64).max(1),
            "{index}: {steps:?}"
        );
        let mut last = 0;
        for s in steps {
            assert!(
                (1..=BATCH as u64).contains(&(s - last)),
                "{index}: {s} after {last}"
            );
            last = s;
        }
    }
    // Resolve the duplicates as a person would (delete the record without the entry) and
    // build again: the email index goes live.
    for d in &report.duplicates {
        c.delete(&d.other).unwrap();
    }
    if !report.duplicates.is_empty() {
        let again = c.backfill(BATCH, |_| {}).unwrap();
        assert_eq!(again.completed, ["email"], "{again:?}");
    }
    let verify = c.verify().unwrap();
    assert!(verify.is_clean(), "{verify:?}");
    // Queries equal a naive filter of the records, and emails are held once.
    let records: Vec<User> = c
        .list(ListOptions::default())
        .unwrap()
        .items
        .into_iter()
        .map(|(_, u)| u)
        .collect();
    let emails: BTreeSet<&str> = records.iter().map(|u| u.email.as_str()).collect();
    assert_eq!(emails.len(), records.len(), "an email is held twice");
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

/// A user with no colour or tags.
fn user(id: u64, email: &str) -> User {
    User {
        id,
        email: email.into(),
        color: 0,
        tags: vec![],
    }
}

/// Records 5 (`a@x`) and 10 (`y@x`) stored before the indexes were declared: the indexed
/// collection over them, not yet built.
fn records_5_and_10_before_the_indexes() -> Collection<User, Database> {
    let db = Database::in_memory();
    let plain = Collection::builder("users", |u: &User| key![u.id])
        .open(db.clone())
        .unwrap();
    plain.insert(&user(5, "a@x")).unwrap();
    plain.insert(&user(10, "y@x")).unwrap();
    indexed(db)
}

/// An update during a build must not delete a unique entry another record holds. Record 10
/// has `y@x` but no entry yet (the build has not reached it); record 1 takes `y@x` (nothing
/// stops it); then record 10 moves from `y@x` to `w@x`. The update used to delete every old
/// unique key, record 1's entry included, so the build went live without it and a third
/// record could take `y@x`.
#[test]
fn an_update_during_a_build_keeps_the_unique_entry_another_record_holds() {
    let c = records_5_and_10_before_the_indexes();
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
    assert_eq!(
        c.get_by("email", &key!["w@x"]).unwrap().unwrap().0,
        key![10]
    );
    assert_eq!(
        c.insert(&user(2, "y@x")),
        Err(Error::UniqueViolation {
            index: "email".into(),
            value: key!["y@x"],
            existing_primary_key: key![1],
        })
    );
}

/// An update that keeps a unique value neither reads nor rewrites its entry. During a build
/// the entry may be held by another record that took the value first (record 1 takes `y@x`
/// while record 10, which had it already, is not yet indexed): the update of record 10's other
/// fields succeeds and leaves record 1's entry alone, and the build reports the duplicate,
/// which existed before the update (so the index does not go live).
#[test]
fn an_update_keeping_a_unique_value_during_a_build_leaves_the_holder_and_the_build_reports_it() {
    let c = records_5_and_10_before_the_indexes();
    let report = c
        .backfill(1, |p| {
            if p.index == "email" && p.records == 1 {
                c.insert(&user(1, "y@x")).unwrap();
                let updated = c
                    .update(&key![10], |mut u| {
                        u.color = 7;
                        u
                    })
                    .unwrap();
                assert_eq!(updated.color, 7);
            }
        })
        .unwrap();
    assert_eq!(report.duplicates.len(), 1, "{report:?}");
    let dup = &report.duplicates[0];
    assert_eq!(
        (dup.value.clone(), dup.holder.clone(), dup.other.clone()),
        (key!["y@x"], Some(key![1]), key![10])
    );
    // A build that finds duplicates does not go live.
    assert!(
        !report.completed.contains(&"email".to_owned()),
        "{report:?}"
    );
    assert_eq!(c.get(&key![10]).unwrap().unwrap().color, 7);
}

/// A document for the commit-limit tests: many tags, a large body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Doc {
    id: u32,
    tags: Vec<u32>,
    body: String,
}

/// Stores `docs` without indexes, declares `tags` (multi-entry) and `size` (covering), runs
/// one backfill with the default batch and returns the indexed collection and the progress.
fn build_over(docs: &[Doc]) -> (Collection<Doc, Database>, Vec<Progress>) {
    let db = Database::in_memory();
    let plain = Collection::builder("docs", |d: &Doc| key![d.id])
        .open(db.clone())
        .unwrap();
    for d in docs {
        plain.insert(d).unwrap();
    }
    let c = Collection::builder("docs", |d: &Doc| key![d.id])
        .multi("tags", |d| d.tags.iter().map(|t| key![*t]).collect())
        .index("size", |d| Some(key![d.body.len() as u64]))
        .covering()
        .open(db)
        .unwrap();
    let mut progress = Vec::new();
    let report = c
        .backfill(BACKFILL_BATCH_DEFAULT, |p| progress.push(p.clone()))
        .unwrap();
    assert_eq!(report.completed, ["tags", "size"], "{report:?}");
    let verify = c.verify().unwrap();
    assert!(verify.is_clean(), "{verify:?}");
    (c, progress)
}

/// How many entries each backfill transaction of `index` wrote.
fn entries_per_step(progress: &[Progress], index: &str) -> Vec<u64> {
    let mut last = 0;
    progress
        .iter()
        .filter(|p| p.index == index)
        .map(|p| {
            let step = p.entries - last;
            last = p.entries;
            step
        })
        .collect()
}

/// Batches were bounded by record count only: 200 records of 50 tags is 10,000 entries in one
/// commit, over `MUTATIONS_MAX`, and the same batch failed on every run.
#[test]
fn a_multi_entry_index_with_many_values_per_record_is_built_within_the_mutation_limit() {
    let docs: Vec<Doc> = (0..60)
        .map(|id| Doc {
            id,
            tags: (0..50).map(|t| id * 1000 + t).collect(),
            body: String::new(),
        })
        .collect();
    let (c, progress) = build_over(&docs);
    let steps = entries_per_step(&progress, "tags");
    assert_eq!(steps.iter().sum::<u64>(), 3000);
    assert!(
        steps.iter().all(|&s| s <= MUTATIONS_MAX as u64),
        "{steps:?}"
    );
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert_eq!(c.count("tags", &key![59_049u32]).unwrap(), 1);
}

/// One record with more entries than a commit may carry is indexed across several commits.
#[test]
fn a_record_with_more_entries_than_one_commit_holds_is_indexed_in_parts() {
    let many = Doc {
        id: 1,
        tags: (0..2500).collect(),
        body: String::new(),
    };
    let (c, progress) = build_over(&[many]);
    assert_eq!(entries_per_step(&progress, "tags"), [1000, 1000, 500]);
    // Records count once the whole record is indexed.
    let records: Vec<u64> = progress
        .iter()
        .filter(|p| p.index == "tags")
        .map(|p| p.records)
        .collect();
    assert_eq!(records, [0, 0, 1]);
    assert_eq!(c.count("tags", &key![2499u32]).unwrap(), 1);
}

/// A covering entry copies the record: 200 records of 20 KB in one commit is 4 MB, over
/// `TOTAL_MUTATION_SIZE_MAX` (800 KiB), and the same batch failed on every run.
#[test]
fn a_covering_index_of_large_records_is_built_within_the_commit_size_limit() {
    let docs: Vec<Doc> = (0..100)
        .map(|id| Doc {
            id,
            tags: vec![],
            body: "x".repeat(20_000 + id as usize),
        })
        .collect();
    let (c, progress) = build_over(&docs);
    let steps = entries_per_step(&progress, "size");
    assert_eq!(steps.iter().sum::<u64>(), 100);
    // About 40 copies of 20 KB fit in 800 KiB.
    assert!(steps.len() >= 3, "{steps:?}");
    assert!(
        steps
            .iter()
            .all(|&s| s * 20_000 <= TOTAL_MUTATION_SIZE_MAX as u64),
        "{steps:?}"
    );
    let page = c
        .list_by("size", &key![20_099u64], ListOptions::default())
        .unwrap();
    assert_eq!(page.items[0].1, docs[99]);
}
