//! Record evolution: records stored by an earlier version of a collection's struct read through
//! the current one (a trailing `#[serde(default)]` field with no code, anything else through a
//! declared migration or the JSON format), and a change that cannot be bridged is
//! `Error::Incompatible` naming the collection and the record.
#![allow(clippy::unwrap_used, reason = "tests")]

use serde::{Deserialize, Serialize};
use tuplekv_engine::{Database, ListOptions, key};
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
        .migrate(0, |bytes| {
            // Version 0 records are whatever the unversioned releases wrote: V1 or V2 (a V1
            // record reads as V2 with its default plan).
            let old: UserV2 = read_unversioned(bytes)?;
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

/// Reads an unversioned record (plain postcard of `UserV2` or of the older `UserV1`) as
/// `UserV2`, as an application's migration would.
fn read_unversioned(bytes: &[u8]) -> Result<UserV2, String> {
    match postcard::from_bytes::<UserV2>(bytes) {
        Ok(u) => Ok(u),
        Err(_) => postcard::from_bytes::<UserV1>(bytes)
            .map(|u| UserV2 {
                id: u.id,
                email: u.email,
                plan: String::new(),
            })
            .map_err(|e| e.to_string()),
    }
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
fn an_incompatible_change_is_the_named_error() {
    let db = Database::in_memory();
    v1(&db)
        .insert(&UserV1 {
            id: 7,
            email: "ada@example.com".into(),
        })
        .unwrap();
    let new = Collection::builder("users", |u: &UserV3| key![u.id])
        .open(db.clone())
        .unwrap();
    let err = new.get(&key![7]).unwrap_err();
    let Error::Incompatible {
        collection,
        primary_key,
        version,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(
        (collection.as_str(), primary_key, *version),
        ("users", &key![7], 0)
    );
    let message = err.to_string();
    assert!(
        message.contains("collection `users`") && message.contains("record [7n]"),
        "{message}"
    );
    // Every read path reports it, and nothing is written by a failed update.
    assert!(matches!(
        new.list(ListOptions::default()),
        Err(Error::Incompatible { .. })
    ));
    assert!(matches!(
        new.update(&key![7], |u| u),
        Err(Error::Incompatible { .. })
    ));
}

#[test]
fn a_type_change_that_leaves_bytes_over_is_the_named_error() {
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
    let narrow = Collection::builder("users", |u: &Narrow| key![u.id])
        .open(db.clone())
        .unwrap();
    match narrow.get(&key![2]) {
        Err(Error::Incompatible { reason, .. }) => {
            assert!(reason.contains("left over"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
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
    // A migration that fails is the named error, with its reason.
    let broken = Collection::builder("users", |u: &UserV3| key![u.id])
        .version(3)
        .migrate(0, |_| Err("no converter for this shape".into()))
        .open(db.clone())
        .unwrap();
    match broken.get(&key![1]) {
        Err(Error::Incompatible {
            reason, version, ..
        }) => {
            assert_eq!(version, 0);
            assert!(reason.contains("no converter"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // An unversioned handle opened after the collection is versioned reads and writes envelopes.
    let old = v1(&db);
    old.insert(&UserV1 {
        id: 4,
        email: "dee@example.com".into(),
    })
    .unwrap();
    assert_eq!(old.get(&key![4]).unwrap().unwrap().email, "dee@example.com");
    assert_eq!(v3.get(&key![4]).unwrap().unwrap().domain, "example.com");
}

#[test]
fn a_plain_record_that_starts_with_the_envelope_tag_is_rewritten_when_versioning_starts() {
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
        Collection::builder("users", |u: &UserV2| key![u.id]).migrate(0, |_| Err(String::new())),
        Collection::builder("users", |u: &UserV2| key![u.id])
            .version(2)
            .migrate(1, |_| Err(String::new()))
            .migrate(1, |_| Err(String::new())),
    ] {
        assert!(matches!(
            builder.open(db.clone()),
            Err(Error::Definition(_))
        ));
    }
}
