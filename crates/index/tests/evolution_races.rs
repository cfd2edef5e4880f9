//! Record evolution against what other handles (other processes) do at the worst moments: a
//! snapshot taken before a conversion read after it, a conversion cut short and resumed by
//! other handles, a plain writer racing the check that every record can take an envelope,
//! and a migration that changes an indexed value. A [`Hooked`] store runs another handle's
//! work right after a snapshot is taken, or fails chosen commits as a crash would.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tuplekv_engine::{
    AtomicWrite, CommitResult, Database, Error as StoreError, KeyBytes, ListOptions, MutationKind,
    Snapshot, Store, Value, Versionstamp, Watch, key,
};
use tuplekv_index::{Collection, ENVELOPE_TAG, Error, RecordFormat};

type Hook = Box<dyn FnOnce() + Send>;

/// A [`Database`] whose next snapshot runs a hook once it is taken, and whose commits fail
/// (as a crash would cut them) while `fail` says so for their mutations.
#[derive(Clone)]
struct Hooked {
    db: Database,
    hook: Arc<Mutex<Option<Hook>>>,
    fail: Arc<dyn Fn(&AtomicWrite) -> bool + Send + Sync>,
}

impl Hooked {
    fn new(db: &Database) -> Hooked {
        Hooked {
            db: db.clone(),
            hook: Arc::new(Mutex::new(None)),
            fail: Arc::new(|_| false),
        }
    }

    /// Runs `f` right after the next snapshot is taken.
    fn after_next_snapshot(&self, f: impl FnOnce() + Send + 'static) {
        *self.hook.lock().unwrap() = Some(Box::new(f));
    }
}

impl Store for Hooked {
    type Snapshot = Snapshot;
    type Watch = Watch;

    fn snapshot(&self) -> Snapshot {
        let view = self.db.snapshot();
        let hook = self.hook.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        view
    }

    fn watch_raw(&self, keys: Vec<KeyBytes>) -> Result<Watch, StoreError> {
        self.db.watch_raw(keys)
    }

    fn snapshot_versionstamp(snapshot: &Snapshot) -> Versionstamp {
        Database::snapshot_versionstamp(snapshot)
    }

    fn get_latest_raw(&self, key: &[u8]) -> Result<Option<tuplekv_engine::Entry>, StoreError> {
        self.db.get_latest_raw(key)
    }

    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, StoreError> {
        if (self.fail)(&write) {
            return Err(StoreError::unavailable("the power is cut"));
        }
        self.db.commit(write)
    }
}

/// A record whose postcard bytes always start with the envelope tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Tagged {
    tag: u8,
    id: u32,
    email: String,
    data: Vec<u8>,
}

fn tagged(id: u32, len: usize) -> Tagged {
    Tagged {
        tag: ENVELOPE_TAG,
        id,
        email: format!("u{id}@example.com"),
        data: vec![id as u8; len],
    }
}

fn plain<S: Store>(store: S) -> Collection<Tagged, S> {
    Collection::builder("t", |t: &Tagged| key![t.id])
        .unique("email", |t| Some(key![t.email.clone()]))
        .covering()
        .open(store)
        .unwrap()
}

/// The same struct in JSON: it converts the plain records to envelopes.
fn json<S: Store>(store: S) -> Result<Collection<Tagged, S>, Error> {
    Collection::builder("t", |t: &Tagged| key![t.id])
        .unique("email", |t| Some(key![t.email.clone()]))
        .covering()
        .format(RecordFormat::Json)
        .open(store)
}

/// [`plain`] without the covering index.
fn bare_plain(store: Database) -> Collection<Tagged, Database> {
    Collection::builder("t", |t: &Tagged| key![t.id])
        .unique("email", |t| Some(key![t.email.clone()]))
        .open(store)
        .unwrap()
}

/// Version 1 of the struct (the same fields) without the covering index, migrating version 0.
fn bare_v1<S: Store>(store: S) -> Result<Collection<Tagged, S>, Error> {
    Collection::builder("t", |t: &Tagged| key![t.id])
        .unique("email", |t| Some(key![t.email.clone()]))
        .version(1)
        .migrate(0, |old: Tagged| Ok(old))
        .open(store)
}

fn is_schema_with(write: &AtomicWrite, text: &str) -> bool {
    write.mutations.iter().any(|m| match &m.kind {
        MutationKind::Set {
            value: Value::Bytes(b),
            ..
        } => b.windows(text.len()).any(|w| w == text.as_bytes()),
        _ => false,
    })
}

/// Leaves the collection as a crash right after its conversion began would: the layout
/// *converting*, no boundary stored yet, nothing wrapped.
fn crash_as_conversion_begins(db: &Database) {
    let cut = Hooked {
        fail: Arc::new(|w| is_schema_with(w, "converted_at")),
        ..Hooked::new(db)
    };
    assert!(json(cut).is_err(), "the cut open fails");
}

fn check_all<S: Store>(c: &Collection<Tagged, S>, ids: &[(u32, usize)]) {
    let items = c.list(ListOptions::default()).unwrap().items;
    let want: Vec<(tuplekv_codec::Key, Tagged)> = ids
        .iter()
        .map(|&(id, len)| (key![id], tagged(id, len)))
        .collect();
    assert_eq!(items, want);
    for &(id, len) in ids {
        assert_eq!(c.get(&key![id]).unwrap(), Some(tagged(id, len)));
        let (_, by_email) = c
            .get_by("email", &key![format!("u{id}@example.com")])
            .unwrap()
            .unwrap();
        assert_eq!(by_email, tagged(id, len));
    }
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn a_snapshot_from_before_a_conversion_reads_its_plain_records_as_plain() {
    let db = Database::in_memory();
    let hooked = Hooked::new(&db);
    let p = plain(hooked.clone());
    let ids = [(1, 3), (2, 30), (3, 228)];
    for (id, len) in ids {
        p.insert(&tagged(id, len)).unwrap();
    }
    // Another process converts the collection right after this list took its snapshot.
    let other = db.clone();
    hooked.after_next_snapshot(move || {
        json(other).unwrap();
    });
    let items = p.list(ListOptions::default()).unwrap().items;
    assert_eq!(
        items,
        ids.iter()
            .map(|&(id, len)| (key![id], tagged(id, len)))
            .collect::<Vec<_>>()
    );
    check_all(&p, &ids);
    check_all(&json(db).unwrap(), &ids);
}

#[test]
fn a_conversion_cut_short_is_finished_correctly_whoever_writes_the_schema_next() {
    let db = Database::in_memory();
    let p = plain(db.clone());
    p.insert(&tagged(1, 5)).unwrap();
    crash_as_conversion_begins(&db);
    // The plain handle now writes envelopes (its commit met the changed schema).
    p.insert(&tagged(2, 228)).unwrap();
    // A build that adds a defaulted field rewrites the schema before any conversion resumes.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Longer {
        tag: u8,
        id: u32,
        email: String,
        data: Vec<u8>,
        #[serde(default)]
        extra: u32,
    }
    let longer = Collection::builder("t", |t: &Longer| key![t.id])
        .unique("email", |t| Some(key![t.email.clone()]))
        .covering()
        .format(RecordFormat::Json)
        .open(db.clone())
        .unwrap();
    for (id, len) in [(1u32, 5usize), (2, 228)] {
        let l = longer.get(&key![id]).unwrap().unwrap();
        assert_eq!(
            (l.tag, l.data, l.extra),
            (ENVELOPE_TAG, vec![id as u8; len], 0)
        );
    }
    assert!(longer.verify().unwrap().is_clean());
    check_all(&p, &[(1, 5), (2, 228)]);
}

#[test]
fn backfill_and_verify_read_plain_records_right_while_converting() {
    let db = Database::in_memory();
    Collection::builder("t", |t: &Tagged| key![t.id])
        .open(db.clone())
        .unwrap()
        .insert(&tagged(1, 2))
        .unwrap();
    // The unique index comes later: building.
    let p = plain(db.clone());
    p.upsert(&tagged(2, 228)).unwrap();
    crash_as_conversion_begins(&db);
    let report = p.backfill(10, |_| {}).unwrap();
    assert_eq!(report.completed, ["email"]);
    check_all(&p, &[(1, 2), (2, 228)]);
    check_all(&json(db).unwrap(), &[(1, 2), (2, 228)]);
}

#[test]
fn a_record_too_large_to_wrap_written_during_the_check_keeps_the_collection_usable() {
    let limit = tuplekv_engine::limits::VALUE_SIZE_MAX;
    // tag, id (one byte), email (1 + 15 bytes), a 3-byte length: 20 bytes before the data.
    let big = move |id| tagged(id, limit - 2 - 20);
    // No covering index: a covering copy is larger than the record, and could not be stored.
    let plain = bare_plain;
    let v1 = |store: Database| bare_v1(store);
    let db = Database::in_memory();
    let p = plain(db.clone());
    p.insert(&tagged(1, 4)).unwrap();
    let hooked = Hooked::new(&db);
    // The plain writer commits it right after the versioned open's check took its snapshot.
    let writer = p.clone();
    hooked.after_next_snapshot(move || writer.insert(&big(2)).unwrap());
    let versioned = bare_v1(hooked).unwrap();
    let raw = db.get(&key!["t", "id", 2]).unwrap().unwrap().value;
    assert_eq!(
        raw.as_bytes().unwrap().len(),
        limit - 2,
        "one byte past wrappable"
    );
    // Everything reads as written, by every handle.
    assert_eq!(versioned.get(&key![2]).unwrap(), Some(big(2)));
    assert_eq!(versioned.get(&key![1]).unwrap(), Some(tagged(1, 4)));
    assert_eq!(p.get(&key![2]).unwrap(), Some(big(2)));
    let again = v1(db.clone()).unwrap();
    assert_eq!(again.get(&key![2]).unwrap(), Some(big(2)));
    // Deleted, it no longer holds the conversion open.
    again.delete(&key![2]).unwrap();
    let last = v1(db.clone()).unwrap();
    check_all(&last, &[(1, 4)]);
    last.migrate_records(10, |_| {}).unwrap();
    check_all(&last, &[(1, 4)]);
}

#[test]
fn a_migration_that_changes_an_indexed_value_leaves_the_index_right() {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct User {
        id: u64,
        email: String,
    }
    let open = |db: &Database, version: u32| {
        let mut b = Collection::builder("users", |u: &User| key![u.id])
            .unique("email", |u| Some(key![u.email.clone()]))
            .version(version);
        if version > 0 {
            b = b.migrate(0, |old: User| {
                Ok(User {
                    id: old.id,
                    email: old.email.to_lowercase(),
                })
            });
        }
        b.open(db.clone()).unwrap()
    };
    let db = Database::in_memory();
    let v0 = open(&db, 0);
    for (id, email) in [(1, "Ada@Example.com"), (2, "BOB@example.org")] {
        v0.insert(&User {
            id,
            email: email.into(),
        })
        .unwrap();
    }
    let v1 = open(&db, 1);
    let report = v1.migrate_records(10, |_| {}).unwrap();
    assert_eq!((report.migrated, report.repaired), (2, 4));
    let (pk, ada) = v1
        .get_by("email", &key!["ada@example.com"])
        .unwrap()
        .unwrap();
    assert_eq!((pk, ada.email.as_str()), (key![1], "ada@example.com"));
    assert_eq!(v1.get_by("email", &key!["Ada@Example.com"]).unwrap(), None);
    assert!(v1.verify().unwrap().is_clean());
}

#[test]
fn migrate_records_repairs_entries_an_earlier_update_left_even_with_nothing_to_migrate() {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct User {
        id: u64,
        email: String,
    }
    let db = Database::in_memory();
    let v0 = Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(db.clone())
        .unwrap();
    v0.insert(&User {
        id: 1,
        email: "Ada@Example.com".into(),
    })
    .unwrap();
    let v1 = Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .version(1)
        .migrate(0, |old: User| {
            Ok(User {
                id: old.id,
                email: old.email.to_lowercase(),
            })
        })
        .open(db.clone())
        .unwrap();
    // The update rewrites the record in version 1, planning its old entries from the
    // migrated record: the old value's entry stays behind.
    v1.update(&key![1], |u| u).unwrap();
    let report = v1.migrate_records(10, |_| {}).unwrap();
    assert_eq!((report.migrated, report.retired), (0, vec![0]));
    assert_eq!(report.repaired, 2);
    assert_eq!(v1.get_by("email", &key!["Ada@Example.com"]).unwrap(), None);
    assert_eq!(
        v1.get_by("email", &key!["ada@example.com"])
            .unwrap()
            .unwrap()
            .0,
        key![1]
    );
    assert!(v1.verify().unwrap().is_clean());
}

#[test]
fn migrate_records_leaves_the_entries_of_an_index_it_does_not_declare() {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct User {
        id: u64,
        email: String,
    }
    let db = Database::in_memory();
    Collection::builder("users", |u: &User| key![u.id])
        .index("domain", |u| u.email.split_once('@').map(|(_, d)| key![d]))
        .open(db.clone())
        .unwrap()
        .insert(&User {
            id: 1,
            email: "ada@example.com".into(),
        })
        .unwrap();
    let v1 = Collection::builder("users", |u: &User| key![u.id])
        .version(1)
        .migrate(0, |old: User| Ok(old))
        .open(db.clone())
        .unwrap();
    v1.migrate_records(10, |_| {}).unwrap();
    // The older build may still read through it: only `drop_index` removes it.
    assert!(
        db.get(&key!["users", "i", "domain", "example.com", 1])
            .unwrap()
            .is_some()
    );
}

#[test]
fn two_versioned_opens_at_once_both_open() {
    let db = Database::in_memory();
    let p = bare_plain(db.clone());
    for id in 1..=3 {
        p.insert(&tagged(id, 6)).unwrap();
    }
    let hooked = Hooked::new(&db);
    // Another process's open converts the records while this one checks them.
    let other = db.clone();
    hooked.after_next_snapshot(move || {
        bare_v1(other).unwrap().upsert(&tagged(9, 3)).unwrap();
    });
    let mine = bare_v1(hooked).unwrap();
    for (id, len) in [(1, 6), (2, 6), (3, 6), (9, 3)] {
        assert_eq!(mine.get(&key![id]).unwrap(), Some(tagged(id, len)));
    }
    assert!(mine.verify().unwrap().is_clean());
}

#[test]
fn verify_finds_nothing_wrong_with_plain_copies_while_converting() {
    let db = Database::in_memory();
    let p = plain(db.clone());
    p.insert(&tagged(1, 5)).unwrap();
    crash_as_conversion_begins(&db);
    let report = p.verify().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert!(p.repair().unwrap().is_clean());
    check_all(&p, &[(1, 5)]);
}

/// Copies the collection `t` of `from` into a fresh database, one commit per source commit,
/// in order, as a dump of it loaded elsewhere does: the versionstamps are new (and smaller:
/// the source's other commits are not copied), their order is kept.
fn copy_commits(from: &Database) -> Database {
    let all = tuplekv_codec::Selector::prefix(&key!["t"])
        .byte_range()
        .unwrap();
    let mut entries =
        tuplekv_engine::ReadView::scan(&from.snapshot(), &all, false, usize::MAX).unwrap();
    entries.sort_by_key(|e| e.versionstamp);
    let to = Database::in_memory();
    // A commit first that the source never had: the copy's stamps all differ.
    to.set(&key!["unrelated"], 1u64).unwrap();
    let mut i = 0;
    while i < entries.len() {
        let stamp = entries[i].versionstamp;
        let mut write = to.atomic();
        while i < entries.len() && entries[i].versionstamp == stamp {
            write = write.set_raw(&entries[i].key, entries[i].value.clone());
            i += 1;
        }
        assert!(write.commit().unwrap().is_committed());
    }
    to
}

#[test]
fn a_copy_made_while_converting_reads_and_finishes_the_conversion() {
    let limit = tuplekv_engine::limits::VALUE_SIZE_MAX;
    let big = move |id| tagged(id, limit - 2 - 20);
    let db = Database::in_memory();
    // Pad the source's versionstamps so the copy's are far from them.
    for n in 0..50u64 {
        db.set(&key!["pad", n], n).unwrap();
    }
    let p = bare_plain(db.clone());
    p.insert(&tagged(1, 4)).unwrap();
    let hooked = Hooked::new(&db);
    let writer = p.clone();
    hooked.after_next_snapshot(move || writer.insert(&big(2)).unwrap());
    let versioned = bare_v1(hooked).unwrap();
    versioned.insert(&tagged(3, 4)).unwrap();
    // The conversion is held open by the unwrappable record; copy the store now.
    let copy = copy_commits(&db);
    let there = bare_v1(copy.clone()).unwrap();
    for (id, want) in [(1, tagged(1, 4)), (2, big(2)), (3, tagged(3, 4))] {
        assert_eq!(there.get(&key![id]).unwrap(), Some(want), "id {id}");
    }
    there.delete(&key![2]).unwrap();
    let finished = bare_v1(copy).unwrap();
    for (id, len) in [(1, 4), (3, 4)] {
        assert_eq!(finished.get(&key![id]).unwrap(), Some(tagged(id, len)));
        assert_eq!(there.get(&key![id]).unwrap(), Some(tagged(id, len)));
    }
    assert!(finished.verify().unwrap().is_clean());
}
