//! Record evolution: records stored by an earlier version of a collection's struct read through
//! the current one (a trailing `#[serde(default)]` field with no code, anything else through a
//! declared migration or the JSON format), and a change that cannot be bridged is
//! `Error::Incompatible` naming the collection and the record.
#![allow(clippy::unwrap_used, reason = "tests")]

use serde::{Deserialize, Serialize};
use tuplekv_codec::ByteRange;
use tuplekv_engine::{Database, ListOptions, ReadView, Value, Versionstamp, key};
use tuplekv_index::{Collection, ENVELOPE_TAG, Error, RecordFormat};

/// The struct as the application first shipped it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UserV1 {
    id: u64,
    email: String,
}

/// The next release: a field added at the end, with a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UserV2 {
    id: u64,
    email: String,
    #[serde(default)]
    plan: String,
}

/// A release that split `email` into two fields: not readable without code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UserV3 {
    id: u64,
    user: String,
    domain: String,
    #[serde(default)]
    plan: String,
}

fn v1(db: &Database) -> Collection<UserV1, Database> {
    Collection::builder("users", |u: &UserV1| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(db.clone())
        .unwrap()
}

fn v2(db: &Database) -> Collection<UserV2, Database> {
    Collection::builder("users", |u: &UserV2| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(db.clone())
        .unwrap()
}

fn split_email(email: &str) -> (String, String) {
    let (user, domain) = email.split_once('@').unwrap_or((email, ""));
    (user.to_owned(), domain.to_owned())
}

fn v3_migrating(db: &Database) -> Collection<UserV3, Database> {
    Collection::builder("users", |u: &UserV3| key![u.id])
        .unique("email", |u| Some(key![format!("{}@{}", u.user, u.domain)]))
        .version(3)
        // Version 0 records are whatever the unversioned releases wrote: V1 or V2. The layer
        // reads a V1 record as V2, its trailing `plan` taking its default.
        .migrate(0, |old: UserV2| {
            let (user, domain) = split_email(&old.email);
            Ok(UserV3 {
                id: old.id,
                user,
                domain,
                plan: old.plan,
            })
        })
        .open(db.clone())
        .unwrap()
}

#[test]
fn a_record_written_by_the_old_struct_reads_through_the_new_one() {
    let db = Database::in_memory();
    let old = v1(&db);
    old.insert(&UserV1 {
        id: 1,
        email: "ada@example.com".into(),
    })
    .unwrap();
    let new = v2(&db);
    let expect = UserV2 {
        id: 1,
        email: "ada@example.com".into(),
        plan: String::new(),
    };
    assert_eq!(new.get(&key![1]).unwrap(), Some(expect.clone()));
    assert_eq!(
        new.get_by("email", &key!["ada@example.com"]).unwrap(),
        Some((key![1], expect.clone()))
    );
    assert_eq!(new.list(ListOptions::default()).unwrap().items.len(), 1);
    // Written back by the new struct, it keeps the new field.
    new.update(&key![1], |mut u| {
        u.plan = "pro".into();
        u
    })
    .unwrap();
    assert_eq!(new.get(&key![1]).unwrap().unwrap().plan, "pro");
    // A collection that never declared a version keeps writing plain postcard.
    let stored = db.get(&key!["users", "id", 1]).unwrap().unwrap();
    let bytes = stored.value.as_bytes().unwrap();
    assert_eq!(
        postcard::from_bytes::<UserV2>(bytes).unwrap().plan,
        "pro",
        "unversioned records stay plain postcard"
    );
}

#[test]
fn an_undeclared_incompatible_change_is_refused_at_open_naming_the_fields() {
    let db = Database::in_memory();
    v1(&db)
        .insert(&UserV1 {
            id: 7,
            email: "ada@example.com".into(),
        })
        .unwrap();
    let before = dump(&db);
    let err = Collection::builder("users", |u: &UserV3| key![u.id])
        .open(db.clone())
        .err()
        .expect("refused");
    let Error::Schema { collection, reason } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(collection, "users");
    assert!(
        reason.contains("field 2 was `email` and is `user`")
            && reason.contains(".renamed(\"email\", \"user\")")
            && reason.contains(".version("),
        "{reason}"
    );
    assert_eq!(dump(&db), before, "a refused open writes nothing");
    // The same change declared as a version with a migration opens and reads.
    let v3 = v3_migrating(&db);
    assert_eq!(v3.get(&key![7]).unwrap().unwrap().domain, "example.com");
}

#[test]
fn a_removed_field_is_refused_at_open() {
    #[derive(Debug, Serialize, Deserialize)]
    struct Narrow {
        id: u64,
    }
    let db = Database::in_memory();
    v1(&db)
        .insert(&UserV1 {
            id: 2,
            email: "b@x".into(),
        })
        .unwrap();
    match Collection::builder("users", |u: &Narrow| key![u.id]).open(db.clone()) {
        Err(Error::Schema { reason, .. }) => {
            assert!(
                reason.contains("`email` are stored but not in the struct"),
                "{reason}"
            )
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a removed field opened"),
    }
}

/// Every raw entry of `db`, for "nothing was written" checks.
fn dump(db: &Database) -> Vec<(Vec<u8>, Value, Versionstamp)> {
    let all = ByteRange {
        start: vec![],
        end: vec![0xff],
    };
    db.snapshot()
        .scan(&all, false, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| (e.key.to_vec(), e.value, e.versionstamp))
        .collect()
}

#[test]
fn a_migration_converts_older_records_and_new_ones_carry_their_version() {
    let db = Database::in_memory();
    v1(&db)
        .insert(&UserV1 {
            id: 1,
            email: "ada@example.com".into(),
        })
        .unwrap();
    v2(&db)
        .insert(&UserV2 {
            id: 2,
            email: "bob@example.org".into(),
            plan: "pro".into(),
        })
        .unwrap();
    let v3 = v3_migrating(&db);
    let ada = v3.get(&key![1]).unwrap().unwrap();
    assert_eq!(
        (ada.user.as_str(), ada.domain.as_str()),
        ("ada", "example.com")
    );
    let bob = v3.get(&key![2]).unwrap().unwrap();
    assert_eq!(
        (bob.domain.as_str(), bob.plan.as_str()),
        ("example.org", "pro")
    );
    // The unique index written by the old releases still finds the migrated records.
    assert_eq!(
        v3.get_by("email", &key!["ada@example.com"])
            .unwrap()
            .unwrap()
            .1,
        ada
    );
    // New writes are envelopes of version 3; reads of them do not call the migration.
    v3.insert(&UserV3 {
        id: 3,
        user: "cy".into(),
        domain: "example.net".into(),
        plan: String::new(),
    })
    .unwrap();
    let bytes = db.get(&key!["users", "id", 3]).unwrap().unwrap().value;
    assert_eq!(bytes.as_bytes().unwrap().first(), Some(&ENVELOPE_TAG));
    assert_eq!(v3.get(&key![3]).unwrap().unwrap().user, "cy");
    // A migration that fails on a stored record refuses the open, naming the record.
    let broken = Collection::builder("users", |u: &UserV3| key![u.id])
        .version(3)
        .migrate(0, |_: UserV2| Err("no converter for this shape".into()))
        .open(db.clone());
    match broken {
        Err(Error::Incompatible {
            reason,
            version,
            primary_key,
            ..
        }) => {
            assert_eq!((version, primary_key), (0, key![1]));
            assert!(reason.contains("no converter"), "{reason}");
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a failing migration opened"),
    }
    // The release from before version 3 can neither open nor write any more.
    assert!(matches!(
        Collection::builder("users", |u: &UserV1| key![u.id]).open(db.clone()),
        Err(Error::Schema { .. })
    ));
}

#[test]
fn a_plain_record_that_starts_with_the_envelope_tag_is_wrapped_when_versioning_starts() {
    // Postcard writes id 231 as the varint [0xE7, 0x01]: the record starts with the tag.
    assert_eq!(ENVELOPE_TAG, 0xE7);
    let db = Database::in_memory();
    let old = v1(&db);
    for id in [230, 231, 232] {
        old.insert(&UserV1 {
            id,
            email: format!("{id}@x"),
        })
        .unwrap();
    }
    let plain = db.get(&key!["users", "id", 231]).unwrap().unwrap().value;
    assert_eq!(plain.as_bytes().unwrap().first(), Some(&ENVELOPE_TAG));
    let versioned = Collection::builder("users", |u: &UserV2| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .version(1)
        .migrate(0, |old: UserV2| Ok(old))
        .open(db.clone())
        .unwrap();
    for id in [230, 231, 232] {
        let u = versioned.get(&key![id]).unwrap().unwrap();
        assert_eq!(u.email, format!("{id}@x"));
        assert_eq!(
            versioned
                .get_by("email", &key![format!("{id}@x")])
                .unwrap()
                .unwrap()
                .1,
            u
        );
    }
    assert!(versioned.verify().unwrap().is_clean());
}

#[test]
fn the_json_format_takes_fields_added_anywhere_and_removed() {
    #[derive(Serialize, Deserialize)]
    struct Before {
        id: u64,
        name: String,
        legacy: bool,
    }
    #[derive(Debug, Serialize, Deserialize)]
    struct After {
        id: u64,
        #[serde(default)]
        nickname: Option<String>,
        #[serde(alias = "name")]
        full_name: String,
    }
    let db = Database::in_memory();
    Collection::builder("people", |p: &Before| key![p.id])
        .format(RecordFormat::Json)
        .open(db.clone())
        .unwrap()
        .insert(&Before {
            id: 1,
            name: "Ada".into(),
            legacy: true,
        })
        .unwrap();
    let after = Collection::builder("people", |p: &After| key![p.id])
        .format(RecordFormat::Json)
        .open(db.clone())
        .unwrap();
    let p = after.get(&key![1]).unwrap().unwrap();
    assert_eq!((p.full_name.as_str(), p.nickname), ("Ada", None));
}

#[test]
fn a_migration_from_a_version_not_older_than_the_declared_one_is_a_definition_error() {
    let db = Database::in_memory();
    for builder in [
        Collection::builder("users", |u: &UserV2| key![u.id])
            .migrate(0, |_: UserV1| Err(String::new())),
        Collection::builder("users", |u: &UserV2| key![u.id])
            .version(2)
            .migrate(1, |_: UserV1| Err(String::new()))
            .migrate(1, |_: UserV1| Err(String::new())),
    ] {
        assert!(matches!(
            builder.open(db.clone()),
            Err(Error::Definition(_))
        ));
    }
}

// The two failures of issue 32, and the rules around them.

/// The struct before `display_name` existed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UserOldest {
    id: u64,
    email: String,
}

/// Version 0 as it ended: `display_name` added at the end with a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UserV0 {
    id: u64,
    email: String,
    #[serde(default)]
    display_name: String,
}

/// Version 1: the names split, and the fields in another order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UserNext {
    id: u64,
    display_name: String,
    email: String,
    verified: bool,
}

fn user_next(db: &Database) -> Result<Collection<UserNext, Database>, Error> {
    Collection::builder("users", |u: &UserNext| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .version(1)
        .migrate(0, |old: UserV0| {
            Ok(UserNext {
                id: old.id,
                display_name: old.display_name,
                email: old.email,
                verified: false,
            })
        })
        .open(db.clone())
}

#[test]
fn the_documented_migration_opens_whatever_ids_exist() {
    // Ids 1..=600 include 231, 359 and 487, whose postcard records start with 0xE7; every
    // odd one (those three among them) predates `display_name`, as in the issue.
    let db = Database::in_memory();
    let oldest = Collection::builder("users", |u: &UserOldest| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(db.clone())
        .unwrap();
    let v0 = Collection::builder("users", |u: &UserV0| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(db.clone())
        .unwrap();
    for id in 1..=600u64 {
        let email = format!("u{id}@example.com");
        if !id.is_multiple_of(2) {
            oldest.insert(&UserOldest { id, email }).unwrap();
        } else {
            v0.insert(&UserV0 {
                id,
                email,
                display_name: format!("User {id}"),
            })
            .unwrap();
        }
    }
    for id in [231u64, 359, 487] {
        let raw = db.get(&key!["users", "id", id]).unwrap().unwrap().value;
        assert_eq!(raw.as_bytes().unwrap()[0], ENVELOPE_TAG, "id {id}");
    }
    let next = user_next(&db).unwrap();
    let expect = |id: u64| UserNext {
        id,
        display_name: if !id.is_multiple_of(2) {
            String::new()
        } else {
            format!("User {id}")
        },
        email: format!("u{id}@example.com"),
        verified: false,
    };
    for id in 1..=600u64 {
        assert_eq!(next.get(&key![id]).unwrap(), Some(expect(id)), "id {id}");
    }
    let report = next.migrate_records(64, |_| {}).unwrap();
    assert_eq!((report.migrated, report.retired.clone()), (600, vec![0]));
    let all = next.list(ListOptions::default()).unwrap().items;
    assert_eq!(all.len(), 600);
    for (pk, user) in all {
        assert_eq!(key![user.id], pk);
        assert_eq!(user, expect(user.id));
    }
    assert!(next.verify().unwrap().is_clean());
    // Version 0 is retired: a build without its migration opens.
    Collection::builder("users", |u: &UserNext| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .version(1)
        .open(db.clone())
        .unwrap();
}

#[test]
fn swapping_two_string_fields_is_refused_until_declared_and_then_reads_right() {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Swapped {
        id: u64,
        display_name: String,
        email: String,
    }
    let db = Database::in_memory();
    let v0 = Collection::builder("users", |u: &UserV0| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(db.clone())
        .unwrap();
    v0.insert(&UserV0 {
        id: 1,
        email: "ada@example.com".into(),
        display_name: "Ada".into(),
    })
    .unwrap();
    let before = dump(&db);
    let err = Collection::builder("users", |u: &Swapped| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(db.clone())
        .err()
        .expect("a swap is refused");
    let message = err.to_string();
    assert!(
        message.contains("field `display_name` moved from position 3 to 2")
            && message.contains("`.version(..)`"),
        "{message}"
    );
    assert_eq!(dump(&db), before, "a refused open writes nothing");
    // Declared as a new version with a migration, the swap reads the right values, and the
    // unique index agrees with the records.
    let next = user_next(&db).unwrap();
    let ada = next.get(&key![1]).unwrap().unwrap();
    assert_eq!(
        (ada.email.as_str(), ada.display_name.as_str()),
        ("ada@example.com", "Ada")
    );
    next.insert(&UserNext {
        id: 2,
        display_name: "Ada".into(),
        email: "Ada".into(),
        verified: true,
    })
    .unwrap();
    assert!(matches!(
        next.insert(&UserNext {
            id: 3,
            display_name: "Imposter".into(),
            email: "ada@example.com".into(),
            verified: false,
        }),
        Err(Error::UniqueViolation { .. })
    ));
    assert!(next.verify().unwrap().is_clean());
}

#[test]
fn records_starting_with_every_byte_value_read_back_after_versioning() {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Tagged {
        tag: u8,
        id: u32,
        name: String,
    }
    let open = |db: &Database, version: u32| {
        let mut b = Collection::builder("tags", |t: &Tagged| key![t.id])
            .unique("name", |t| Some(key![t.name.clone()]))
            .covering()
            .version(version);
        for from in 0..version {
            b = b.migrate(from, |old: Tagged| Ok(old));
        }
        b.open(db.clone()).unwrap()
    };
    let db = Database::in_memory();
    let plain = open(&db, 0);
    let record = |i: u8| Tagged {
        tag: i,
        id: u32::from(i) * 7,
        name: format!("n{i}"),
    };
    for i in 0..=255u8 {
        plain.insert(&record(i)).unwrap();
    }
    // Every first byte is there, 0xE7 among them.
    let firsts: std::collections::BTreeSet<u8> = (0..=255u8)
        .map(|i| {
            db.get(&key!["tags", "id", u32::from(i) * 7])
                .unwrap()
                .unwrap()
                .value
                .as_bytes()
                .unwrap()[0]
        })
        .collect();
    assert_eq!(firsts.len(), 256);
    let check = |c: &Collection<Tagged, Database>| {
        for i in 0..=255u8 {
            let id = u32::from(i) * 7;
            assert_eq!(c.get(&key![id]).unwrap(), Some(record(i)), "first byte {i}");
            let (pk, by_name) = c.get_by("name", &key![format!("n{i}")]).unwrap().unwrap();
            assert_eq!((pk, by_name), (key![id], record(i)), "covering copy {i}");
        }
        assert_eq!(c.list(ListOptions::default()).unwrap().items.len(), 256);
        assert!(c.verify().unwrap().is_clean());
    };
    let versioned = open(&db, 1);
    check(&versioned);
    // The handle opened before versioning reads them too (it finds the layout changed).
    check(&plain);
    versioned.migrate_records(50, |_| {}).unwrap();
    check(&versioned);
    let again = open(&db, 2);
    check(&again);
}

#[test]
fn a_handle_opened_before_versioning_writes_envelopes_after_it() {
    let db = Database::in_memory();
    let plain = v2(&db);
    plain
        .insert(&UserV2 {
            id: 1,
            email: "a@x".into(),
            plan: String::new(),
        })
        .unwrap();
    // The same version in JSON: the plain postcard records become envelopes.
    let versioned = Collection::builder("users", |u: &UserV2| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .format(RecordFormat::Json)
        .open(db.clone())
        .unwrap();
    // Id 231 is written as a record starting with 0xE7 by postcard: the stale handle's commit
    // meets the changed schema and writes an envelope instead.
    let late = UserV2 {
        id: 231,
        email: "late@x".into(),
        plan: "pro".into(),
    };
    plain.insert(&late).unwrap();
    assert_eq!(versioned.get(&key![231]).unwrap(), Some(late.clone()));
    assert_eq!(plain.get(&key![231]).unwrap(), Some(late));
    assert!(versioned.verify().unwrap().is_clean());
}

#[test]
fn a_trailing_field_without_a_default_is_refused_at_open() {
    #[derive(Debug, Serialize, Deserialize)]
    struct Required {
        id: u64,
        email: String,
        plan: String,
    }
    let db = Database::in_memory();
    v1(&db)
        .insert(&UserV1 {
            id: 1,
            email: "a@x".into(),
        })
        .unwrap();
    match Collection::builder("users", |u: &Required| key![u.id]).open(db.clone()) {
        Err(Error::Schema { reason, .. }) => assert!(
            reason.contains("adds field(s) `plan`") && reason.contains("#[serde(default)]"),
            "{reason}"
        ),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a required new field opened"),
    }
    // With the default it opens (no version needed) and reads the old record.
    assert_eq!(v2(&db).get(&key![1]).unwrap().unwrap().plan, "");
}

#[test]
fn a_rename_reads_once_declared_and_a_wider_integer_needs_nothing() {
    #[derive(Debug, Serialize, Deserialize)]
    struct Renamed {
        id: u128,
        address: String,
    }
    let db = Database::in_memory();
    v1(&db)
        .insert(&UserV1 {
            id: 9,
            email: "a@x".into(),
        })
        .unwrap();
    let undeclared =
        Collection::builder("users", |u: &Renamed| key![u.id.to_string()]).open(db.clone());
    assert!(
        matches!(&undeclared, Err(Error::Schema { reason, .. }) if reason.contains(".renamed(\"email\", \"address\")")),
        "{:?}",
        undeclared.err()
    );
    let renamed = Collection::builder("users", |u: &Renamed| key![u.id.to_string()])
        .renamed("email", "address")
        .open(db.clone())
        .unwrap();
    let r = renamed.list(ListOptions::default()).unwrap().items;
    assert_eq!((r[0].1.id, r[0].1.address.as_str()), (9, "a@x"));
    // The stored shape took the new name: the declaration can go.
    Collection::builder("users", |u: &Renamed| key![u.id.to_string()])
        .open(db.clone())
        .unwrap();
}

#[test]
fn an_older_build_can_neither_open_nor_write_once_a_newer_version_is_declared() {
    let db = Database::in_memory();
    let old = v1(&db);
    old.insert(&UserV1 {
        id: 1,
        email: "ada@example.com".into(),
    })
    .unwrap();
    let v3 = v3_migrating(&db);
    for attempt in [
        old.insert(&UserV1 {
            id: 2,
            email: "b@x".into(),
        }),
        old.upsert(&UserV1 {
            id: 1,
            email: "c@x".into(),
        })
        .map(|_| ()),
        old.delete(&key![1]).map(|_| ()),
    ] {
        match attempt {
            Err(Error::Schema { reason, .. }) => {
                assert!(reason.contains("version 3"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        Collection::builder("users", |u: &UserV1| key![u.id]).open(db.clone()),
        Err(Error::Schema { .. })
    ));
    // Nothing the old handle tried landed.
    assert_eq!(v3.list(ListOptions::default()).unwrap().items.len(), 1);
}

#[test]
fn migrate_records_reports_progress_resumes_and_retires_old_versions() {
    let db = Database::in_memory();
    let old = v2(&db);
    for id in 0..25u64 {
        old.insert(&UserV2 {
            id,
            email: format!("{id}@example.com"),
            plan: "free".into(),
        })
        .unwrap();
    }
    let v3 = v3_migrating(&db);
    let mut seen = Vec::new();
    // Stopped by an error after two batches, as a crash would stop it.
    let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        v3.migrate_records(10, |p| {
            seen.push(p.clone());
            assert!(seen.len() < 2, "stop");
        })
    }));
    assert!(stopped.is_err());
    assert_eq!(seen[0].migrated, 10);
    let report = v3.migrate_records(10, |p| seen.push(p.clone())).unwrap();
    // The second run started after the two batches that committed with their cursor.
    assert_eq!(
        (report.scanned, report.migrated, report.retired),
        (5, 5, vec![0])
    );
    for id in 0..25u64 {
        let raw = db.get(&key!["users", "id", id]).unwrap().unwrap().value;
        let raw = raw.as_bytes().unwrap();
        assert_eq!(&raw[..3], &[ENVELOPE_TAG, 0, 3], "record {id} is version 3");
    }
    assert!(v3.verify().unwrap().is_clean());
    // Nothing left to do.
    assert_eq!(v3.migrate_records(10, |_| {}).unwrap().migrated, 0);
}

#[test]
fn a_type_that_validates_its_input_traces_with_a_sample() {
    #[derive(Debug, Clone, PartialEq, Serialize)]
    struct NonEmpty(String);
    impl<'de> Deserialize<'de> for NonEmpty {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let s = String::deserialize(d)?;
            if s.is_empty() {
                return Err(serde::de::Error::custom("empty"));
            }
            Ok(NonEmpty(s))
        }
    }
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Account {
        id: u64,
        owner: NonEmpty,
    }
    let db = Database::in_memory();
    let plain = Collection::builder("accounts", |a: &Account| key![a.id]).open(db.clone());
    assert!(
        matches!(&plain, Err(Error::Definition(m)) if m.contains("shape_sample")),
        "{:?}",
        plain.err()
    );
    let sample = Account {
        id: 1,
        owner: NonEmpty("ada".into()),
    };
    let accounts = Collection::builder("accounts", |a: &Account| key![a.id])
        .shape_sample(&sample)
        .open(db)
        .unwrap();
    accounts.insert(&sample).unwrap();
    assert_eq!(accounts.get(&key![1]).unwrap(), Some(sample));
}

#[test]
fn a_type_change_is_refused_at_open_and_reads_once_declared() {
    #[derive(Debug, Serialize, Deserialize)]
    struct NumericEmail {
        id: u64,
        email: u64,
    }
    let db = Database::in_memory();
    v1(&db)
        .insert(&UserV1 {
            id: 3,
            email: "42".into(),
        })
        .unwrap();
    match Collection::builder("users", |u: &NumericEmail| key![u.id]).open(db.clone()) {
        Err(Error::Schema { reason, .. }) => assert!(
            reason.contains("`email`: its type changed from String to u64"),
            "{reason}"
        ),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a retyped field opened"),
    }
    let declared = Collection::builder("users", |u: &NumericEmail| key![u.id])
        .version(1)
        .migrate(0, |old: UserV1| {
            Ok(NumericEmail {
                id: old.id,
                email: old.email.parse().map_err(|e| format!("{e}"))?,
            })
        })
        .open(db)
        .unwrap();
    assert_eq!(declared.get(&key![3]).unwrap().unwrap().email, 42);
}

#[test]
fn migrate_records_splits_batches_that_would_pass_the_commit_limits() {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Doc {
        id: u64,
        tags: Vec<u32>,
        body: String,
    }
    let open = |db: &Database, version: u32| {
        let mut b = Collection::builder("docs", |d: &Doc| key![d.id])
            .multi("tags", |d| d.tags.iter().map(|t| key![*t]).collect())
            .version(version);
        if version > 0 {
            b = b.migrate(0, |old: Doc| Ok(old));
        }
        b.open(db.clone()).unwrap()
    };
    let db = Database::in_memory();
    let v0 = open(&db, 0);
    // 300 entries a record: ten records are 3000 mutations, past MUTATIONS_MAX (1000); and
    // 40 KB bodies: twenty-five of them pass TOTAL_MUTATION_SIZE_MAX (800 KiB).
    for id in 0..10u64 {
        v0.insert(&Doc {
            id,
            tags: (0..300).collect(),
            body: String::new(),
        })
        .unwrap();
    }
    for id in 10..40u64 {
        v0.insert(&Doc {
            id,
            tags: vec![],
            body: "x".repeat(40_000),
        })
        .unwrap();
    }
    let v1 = open(&db, 1);
    let mut batches = 0;
    let report = v1.migrate_records(100, |_| batches += 1).unwrap();
    assert_eq!((report.scanned, report.migrated), (40, 40));
    assert!(batches >= 4, "{batches} batches");
    assert!(v1.verify().unwrap().is_clean());
    assert_eq!(v1.list(ListOptions::default()).unwrap().items.len(), 40);
}

#[test]
fn a_plain_record_too_large_to_wrap_refuses_versioning_before_anything_changes() {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Blob {
        tag: u8,
        id: u32,
        data: Vec<u8>,
    }
    // tag + id (1 byte) + a 3-byte length + the data: `len` bytes in all.
    let blob = |id: u32, len: usize| Blob {
        tag: ENVELOPE_TAG,
        id,
        data: vec![7; len - 5],
    };
    let open = |db: &Database| {
        Collection::builder("blobs", |b: &Blob| key![b.id])
            .version(1)
            .migrate(0, |old: Blob| Ok(old))
            .open(db.clone())
    };
    let limit = tuplekv_engine::limits::VALUE_SIZE_MAX;
    let plain = |db: &Database| {
        Collection::builder("blobs", |b: &Blob| key![b.id])
            .open(db.clone())
            .unwrap()
    };
    // At the limit: a 3-byte envelope header fits exactly.
    let db = Database::in_memory();
    plain(&db).insert(&blob(1, limit - 3)).unwrap();
    let raw = db.get(&key!["blobs", "id", 1]).unwrap().unwrap().value;
    assert_eq!(raw.as_bytes().unwrap().len(), limit - 3);
    assert_eq!(
        open(&db).unwrap().get(&key![1]).unwrap(),
        Some(blob(1, limit - 3))
    );
    // Past it: refused, naming the record, with the store as it was.
    let db = Database::in_memory();
    plain(&db).insert(&blob(2, limit - 2)).unwrap();
    let before = dump(&db);
    match open(&db) {
        Err(Error::Schema { reason, .. }) => {
            assert!(
                reason.contains("record [\"blobs\", \"id\", 2n]"),
                "{reason}"
            );
            assert!(reason.contains("value limit"), "{reason}");
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("an unwrappable record was versioned"),
    }
    assert_eq!(dump(&db), before);
    assert_eq!(plain(&db).get(&key![2]).unwrap(), Some(blob(2, limit - 2)));
}

#[test]
fn a_migration_batch_of_zero_takes_the_default_size() {
    let db = Database::in_memory();
    let old = v2(&db);
    let n = tuplekv_index::MIGRATE_BATCH_DEFAULT as u64 + 50;
    for id in 0..n {
        old.insert(&UserV2 {
            id,
            email: format!("{id}@example.com"),
            plan: String::new(),
        })
        .unwrap();
    }
    let v3 = v3_migrating(&db);
    let mut batches = Vec::new();
    let report = v3.migrate_records(0, |p| batches.push(p.migrated)).unwrap();
    assert_eq!(report.migrated, n);
    assert_eq!(batches, [tuplekv_index::MIGRATE_BATCH_DEFAULT as u64, n]);
}
