//! A power cut during an online migration ([`Collection::migrate_records`]) on the durable
//! engine: the files a cut leaves open as a database whose records all read correctly (old
//! ones through their migration), and a second run resumes from the last batch that reached
//! the disk and finishes, leaving every record in the current version and the indexes whole.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::panic::{AssertUnwindSafe, catch_unwind};

use serde::{Deserialize, Serialize};
use tuplekv_engine::durable::fs::Faults;
use tuplekv_engine::{Database, Durability, ListOptions, key};
use tuplekv_index::{Collection, ENVELOPE_TAG};
use tuplekv_testkit::durable::{BUFFERED, faulty};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Before {
    id: u64,
    email: String,
    name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct After {
    id: u64,
    name: String,
    email: String,
    logins: u32,
}

/// Ids 220..260: 231 is among them, a record whose postcard starts with 0xE7.
const IDS: std::ops::Range<u64> = 220..260;

fn expected(id: u64) -> After {
    After {
        id,
        name: format!("User {id}"),
        email: format!("{id}@example.com"),
        logins: 0,
    }
}

fn after(db: &Database) -> Collection<After, Database> {
    Collection::builder("users", |u: &After| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .version(1)
        .migrate(0, |old: Before| {
            Ok(After {
                id: old.id,
                name: old.name,
                email: old.email,
                logins: 0,
            })
        })
        .open(db.clone())
        .unwrap()
}

/// Runs a migration on a durable database and cuts the power after `batches` batches (each
/// one commit); returns the directory the cut left.
fn cut_during_migration(durability: Durability, batches: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new();
    let db = Database::open(dir.path(), faulty(&faults, durability)).unwrap();
    let before = Collection::builder("users", |u: &Before| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(db.clone())
        .unwrap();
    for id in IDS {
        before
            .insert(&Before {
                id,
                email: format!("{id}@example.com"),
                name: format!("User {id}"),
            })
            .unwrap();
    }
    db.sync().unwrap();
    let users = after(&db);
    let image = tempfile::tempdir().unwrap();
    let mut seen = 0;
    let cut = catch_unwind(AssertUnwindSafe(|| {
        users.migrate_records(7, |_| {
            seen += 1;
            if seen == batches {
                faults.power_cut_image(dir.path(), image.path()).unwrap();
                panic!("the power is cut");
            }
        })
    }));
    assert!(cut.is_err(), "the migration ended before batch {batches}");
    image
}

fn check_all(users: &Collection<After, Database>) {
    for id in IDS {
        assert_eq!(users.get(&key![id]).unwrap(), Some(expected(id)), "id {id}");
    }
    assert_eq!(
        users.list(ListOptions::default()).unwrap().items.len(),
        IDS.count()
    );
    assert!(users.verify().unwrap().is_clean());
}

fn resume_and_finish(image: &tempfile::TempDir) -> u64 {
    let db = Database::open(image.path(), faulty(&Faults::new(), Durability::Sync)).unwrap();
    let users = after(&db);
    check_all(&users);
    let report = users.migrate_records(7, |_| {}).unwrap();
    assert_eq!(report.retired, [0]);
    check_all(&users);
    for id in IDS {
        let raw = db.get(&key!["users", "id", id]).unwrap().unwrap().value;
        assert_eq!(
            &raw.as_bytes().unwrap()[..3],
            &[ENVELOPE_TAG, 0, 1],
            "id {id}"
        );
    }
    // Closed and opened again, it is all still there.
    drop(users);
    db.close().unwrap();
    let db = Database::open(image.path(), faulty(&Faults::new(), Durability::Sync)).unwrap();
    check_all(&after(&db));
    report.migrated
}

#[test]
fn a_power_cut_during_a_synced_migration_resumes_after_the_last_batch() {
    for batches in [1, 2, 5] {
        let image = cut_during_migration(Durability::Sync, batches);
        // Every batch before the cut reached the disk: the rest is what is left.
        let left = resume_and_finish(&image);
        assert_eq!(
            left,
            IDS.count() as u64 - 7 * batches as u64,
            "cut after {batches}"
        );
    }
}

#[test]
fn a_power_cut_that_loses_buffered_batches_redoes_them() {
    for batches in [1, 3] {
        let image = cut_during_migration(BUFFERED, batches);
        // Nothing since the last sync survived: the whole migration runs again.
        let left = resume_and_finish(&image);
        assert_eq!(left, IDS.count() as u64, "cut after {batches}");
    }
}
