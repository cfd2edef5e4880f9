//! Failure injection: a write whose commit fails (a conflict on every attempt, a limit error
//! from the store, a concurrent writer changing the record between its read and its commit)
//! leaves records and index entries exactly as they were, byte for byte.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

use serde::{Deserialize, Serialize};
use tuplekv_engine::{
    AtomicWrite, CommitResult, Conflict, Database, Snapshot, Store, Versionstamp, key,
};
use tuplekv_index::{Collection, Error};
use tuplekv_testkit::db::dump;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    email: String,
    color: String,
}

fn user(id: u64, email: &str, color: &str) -> User {
    User {
        id,
        email: email.into(),
        color: color.into(),
    }
}

const PASS: u8 = 0;
const CONFLICT: u8 = 1;
const LIMIT: u8 = 2;
/// The next commit is applied, then its answer is lost (a remote store's connection failed).
const LOST_AFTER: u8 = 3;
/// The next commit is not applied, and its answer is lost.
const LOST_BEFORE: u8 = 4;

/// The in-memory engine with a switch that makes commits fail, and a count of the commits it
/// was asked for.
#[derive(Clone)]
struct Faulty {
    db: Database,
    mode: Arc<AtomicU8>,
    commits: Arc<AtomicU32>,
}

impl Store for Faulty {
    type Snapshot = Snapshot;
    type Watch = tuplekv_engine::Watch;

    fn watch_raw(
        &self,
        keys: Vec<tuplekv_engine::KeyBytes>,
    ) -> Result<Self::Watch, tuplekv_engine::Error> {
        self.db.watch_raw(keys)
    }

    fn snapshot(&self) -> Snapshot {
        self.db.snapshot()
    }

    fn snapshot_versionstamp(snapshot: &Snapshot) -> Versionstamp {
        snapshot.versionstamp()
    }

    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, tuplekv_engine::Error> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        match self.mode.load(Ordering::SeqCst) {
            CONFLICT => Ok(CommitResult::Conflict(Conflict {
                failed_checks: Vec::new(),
                range_changed: true,
            })),
            LIMIT => Err(tuplekv_engine::Error::ValueTooLarge { size: 70_000 }),
            LOST_AFTER | LOST_BEFORE => {
                let applied = self.mode.swap(PASS, Ordering::SeqCst) == LOST_AFTER;
                if applied {
                    let _ = Store::commit(&self.db, write)?;
                }
                Err(tuplekv_engine::Error::outcome_unknown(
                    "the connection closed (on purpose)",
                ))
            }
            _ => Store::commit(&self.db, write),
        }
    }
}

fn open<S: Store>(store: S, attempts: u32) -> Collection<User, S> {
    Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .index("color", |u| Some(key![u.color.clone()]))
        .max_attempts(attempts)
        .open(store)
        .unwrap()
}

fn faulty_with_two_users() -> (Faulty, Collection<User, Faulty>) {
    let store = Faulty {
        db: Database::in_memory(),
        mode: Arc::new(AtomicU8::new(PASS)),
        commits: Arc::new(AtomicU32::new(0)),
    };
    let c = open(store.clone(), 4);
    c.insert(&user(1, "ada@x", "green")).unwrap();
    c.insert(&user(2, "bob@x", "blue")).unwrap();
    (store, c)
}

/// Every kind of write, each changing both indexes.
fn every_write(c: &Collection<User, Faulty>) -> Vec<Result<(), Error>> {
    vec![
        c.insert(&user(3, "cy@x", "green")),
        c.upsert(&user(1, "ada@new", "red")).map(|_| ()),
        c.update(&key![2], |mut u| {
            u.email = "bob@new".into();
            u.color = "red".into();
            u
        })
        .map(|_| ()),
        c.delete(&key![1]).map(|_| ()),
    ]
}

#[test]
fn writes_that_conflict_on_every_attempt_give_up_after_the_bound_and_change_nothing() {
    let (store, c) = faulty_with_two_users();
    let before = dump(&store.db);
    store.mode.store(CONFLICT, Ordering::SeqCst);
    let commits_before = store.commits.load(Ordering::SeqCst);
    for res in every_write(&c) {
        assert!(
            matches!(
                res,
                Err(Error::Store(tuplekv_engine::Error::TransactionConflict {
                    attempts: 4
                }))
            ),
            "{res:?}"
        );
    }
    // Four writes, each tried exactly the bound.
    assert_eq!(store.commits.load(Ordering::SeqCst) - commits_before, 16);
    assert_eq!(dump(&store.db), before);
    store.mode.store(PASS, Ordering::SeqCst);
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn writes_whose_commit_fails_with_a_store_error_change_nothing() {
    let (store, c) = faulty_with_two_users();
    let before = dump(&store.db);
    store.mode.store(LIMIT, Ordering::SeqCst);
    for res in every_write(&c) {
        assert!(
            matches!(
                res,
                Err(Error::Store(tuplekv_engine::Error::ValueTooLarge {
                    size: 70_000
                }))
            ),
            "{res:?}"
        );
    }
    assert_eq!(dump(&store.db), before);
    store.mode.store(PASS, Ordering::SeqCst);
    assert!(c.verify().unwrap().is_clean());
    // The same writes go through once the store recovers.
    assert!(every_write(&c).into_iter().all(|r| r.is_ok()));
    assert!(c.verify().unwrap().is_clean());
    assert_eq!(
        c.get_by("email", &key!["bob@new"]).unwrap().unwrap().0,
        key![2]
    );
}

#[test]
fn an_update_raced_by_another_writer_on_every_attempt_leaves_only_the_other_writes() {
    let db = Database::in_memory();
    let c = open(db.clone(), 3);
    let other = open(db.clone(), 3);
    c.insert(&user(1, "ada@x", "green")).unwrap();
    let attempts = AtomicU32::new(0);
    // Between the update's read and its commit, another writer changes the same record (and
    // so moves its index entries): every attempt's commit fails half way through the update.
    let res = c.update(&key![1], |mut u| {
        let n = attempts.fetch_add(1, Ordering::SeqCst);
        other
            .upsert(&user(1, &format!("ada{n}@x"), "blue"))
            .unwrap();
        u.email = "mine@x".into();
        u.color = "red".into();
        u
    });
    assert!(
        matches!(
            res,
            Err(Error::Store(tuplekv_engine::Error::TransactionConflict {
                attempts: 3
            }))
        ),
        "{res:?}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    // Exactly the other writer's last record, with exactly its entries.
    assert_eq!(c.get(&key![1]).unwrap().unwrap(), user(1, "ada2@x", "blue"));
    assert!(c.verify().unwrap().is_clean(), "{:?}", c.verify().unwrap());
    assert_eq!(c.get_by("email", &key!["mine@x"]).unwrap(), None);
    assert_eq!(c.count("color", &key!["red"]).unwrap(), 0);
    assert_eq!(c.count("color", &key!["blue"]).unwrap(), 1);
    let unique: Vec<_> = ["ada@x", "ada0@x", "ada1@x", "ada2@x"]
        .iter()
        .map(|e| c.get_by("email", &key![*e]).unwrap().map(|(pk, _)| pk))
        .collect();
    assert_eq!(unique, [None, None, None, Some(key![1])]);
}

#[test]
fn a_unique_violation_inside_an_update_rolls_back_the_whole_update() {
    let db = Database::in_memory();
    let c = open(db.clone(), 4);
    c.insert(&user(1, "ada@x", "green")).unwrap();
    c.insert(&user(2, "bob@x", "blue")).unwrap();
    let before = dump(&db);
    // The update changes the colour (fine) and the email (taken): neither happens.
    let err = c
        .update(&key![2], |mut u| {
            u.color = "red".into();
            u.email = "ada@x".into();
            u
        })
        .unwrap_err();
    assert_eq!(
        err,
        Error::UniqueViolation {
            index: "email".into(),
            value: key!["ada@x"],
            existing_primary_key: key![1],
        }
    );
    assert_eq!(dump(&db), before);
}

/// A handle that does not declare the index moved a record's value away and back, leaving an
/// entry that already points at the record for the value it claims again: the first attempt
/// reads it as the record's and commits once, as the transaction would.
#[test]
fn claiming_a_value_whose_entry_already_points_at_the_record_commits_once() {
    let (store, c) = faulty_with_two_users();
    let undeclared = Collection::builder("users", |u: &User| key![u.id])
        .open(store.clone())
        .unwrap();
    undeclared
        .update(&key![1], |mut u| {
            u.email = "ada@other".into();
            u
        })
        .unwrap();
    let before = store.commits.load(Ordering::SeqCst);
    c.update(&key![1], |mut u| {
        u.email = "ada@x".into();
        u
    })
    .unwrap();
    assert_eq!(store.commits.load(Ordering::SeqCst) - before, 1);
    assert!(c.verify().unwrap().is_clean());
}

fn unknown(res: &Result<impl std::fmt::Debug, Error>) -> Option<tuplekv_index::Reread> {
    match res {
        Err(Error::OutcomeUnknown { reread, .. }) => Some(reread.clone()),
        _ => None,
    }
}

#[test]
fn an_insert_whose_answer_was_lost_after_it_committed_re_reads_and_succeeds() {
    let (store, c) = faulty_with_two_users();
    store.mode.store(LOST_AFTER, Ordering::SeqCst);
    c.insert(&user(3, "cy@x", "green")).unwrap();
    assert_eq!(c.get(&key![3]).unwrap(), Some(user(3, "cy@x", "green")));
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn an_insert_whose_answer_was_lost_before_it_committed_reports_the_record_absent() {
    let (store, c) = faulty_with_two_users();
    let before = dump(&store.db);
    store.mode.store(LOST_BEFORE, Ordering::SeqCst);
    let res = c.insert(&user(3, "cy@x", "green"));
    assert_eq!(
        unknown(&res),
        Some(tuplekv_index::Reread::Absent),
        "{res:?}"
    );
    assert_eq!(dump(&store.db), before);
    // Inserting again is safe: the checks of the new write decide.
    c.insert(&user(3, "cy@x", "green")).unwrap();
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn an_update_whose_answer_was_lost_after_it_committed_returns_the_new_record() {
    let (store, c) = faulty_with_two_users();
    store.mode.store(LOST_AFTER, Ordering::SeqCst);
    let new = c
        .update(&key![2], |mut u| {
            u.email = "bob@new".into();
            u
        })
        .unwrap();
    assert_eq!(new, user(2, "bob@new", "blue"));
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn a_delete_or_upsert_whose_answer_was_lost_is_reported_with_what_the_re_read_found() {
    let (store, c) = faulty_with_two_users();
    store.mode.store(LOST_AFTER, Ordering::SeqCst);
    let res = c.delete(&key![1]);
    assert_eq!(
        unknown(&res),
        Some(tuplekv_index::Reread::Absent),
        "{res:?}"
    );
    store.mode.store(LOST_AFTER, Ordering::SeqCst);
    let res = c.upsert(&user(2, "bob@up", "red"));
    assert_eq!(unknown(&res), Some(tuplekv_index::Reread::Other), "{res:?}");
    let msg = res.unwrap_err().to_string();
    assert!(msg.contains("may or may not have committed"), "{msg}");
    // Whatever landed, the indexes agree with the records.
    assert!(c.verify().unwrap().is_clean());
    assert_eq!(c.get(&key![1]).unwrap(), None);
}
