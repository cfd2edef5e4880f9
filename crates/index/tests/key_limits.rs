//! A primary key or an index value whose record or entry key would be longer than the engine
//! writes (`KEY_SIZE_MAX_WRITE`) is refused by the collection with an error naming the
//! collection and the index, at the limit it is written, and a refused write changes nothing.
#![allow(clippy::unwrap_used, reason = "tests")]

use serde::{Deserialize, Serialize};
use tuplekv_engine::limits::KEY_SIZE_MAX_WRITE;
use tuplekv_engine::{ByteRange, Database, Key, ReadView, Value, Versionstamp, key};
use tuplekv_index::{BACKFILL_BATCH_DEFAULT, Collection, Error};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Doc {
    id: String,
    email: String,
    color: String,
}

fn doc(id: &str, email: &str, color: &str) -> Doc {
    Doc {
        id: id.into(),
        email: email.into(),
        color: color.into(),
    }
}

fn docs(db: Database) -> Collection<Doc, Database> {
    Collection::builder("docs", |d: &Doc| key![d.id.clone()])
        .unique("email", |d| Some(key![d.email.clone()]))
        .index("color", |d| Some(key![d.color.clone()]))
        .open(db)
        .unwrap()
}

/// A string that makes `key_with(s)` exactly `len` bytes long once encoded (a string part is
/// its bytes between a tag and a terminator).
fn filler(len: usize, key_with: impl Fn(&str) -> Key) -> String {
    let base = key_with("").encode().len();
    let s = "x".repeat(len - base);
    assert_eq!(key_with(&s).encode().len(), len);
    s
}

/// Every entry of the store, with the last versionstamp.
fn everything(db: &Database) -> (Vec<(Vec<u8>, Value)>, Versionstamp) {
    let all = ByteRange {
        start: vec![],
        end: vec![0xff],
    };
    let entries = db
        .snapshot()
        .scan(&all, false, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| (e.key.to_vec(), e.value))
        .collect();
    (entries, db.current_versionstamp())
}

/// Runs `write`, which must fail with `KeyTooLargeForWrite` for `index` and `size` bytes, and
/// checks that it changed nothing.
fn check_refused<R: std::fmt::Debug>(
    db: &Database,
    index: Option<&str>,
    size: usize,
    write: impl FnOnce() -> Result<R, Error>,
) {
    let before = everything(db);
    let err = write().unwrap_err();
    assert_eq!(
        err,
        Error::KeyTooLargeForWrite {
            collection: "docs".into(),
            index: index.map(str::to_owned),
            size,
        }
    );
    let named = index.map_or(String::new(), |i| format!(", index `{i}`"));
    let kind = if index.is_some() { "entry" } else { "record" };
    assert_eq!(
        err.to_string(),
        format!(
            "collection `docs`{named}: {kind} key is {size} bytes, max for write is \
             {KEY_SIZE_MAX_WRITE}"
        )
    );
    assert_eq!(everything(db), before, "{err} changed the store");
}

#[test]
fn a_primary_key_at_the_key_limit_is_written_and_one_byte_more_is_refused() {
    let db = Database::in_memory();
    // No non-unique index: its entry keys end with the primary key, so they would be longer.
    let c = Collection::builder("docs", |d: &Doc| key![d.id.clone()])
        .unique("email", |d| Some(key![d.email.clone()]))
        .open(db.clone())
        .unwrap();
    let id_of = |len| filler(len, |s| key!["docs", "id", s]);
    let at = id_of(KEY_SIZE_MAX_WRITE);
    c.insert(&doc(&at, "a@x", "green")).unwrap();
    assert_eq!(c.get(&key![at.clone()]).unwrap().unwrap().email, "a@x");
    c.update(&key![at.clone()], |d| Doc {
        email: "b@x".into(),
        ..d
    })
    .unwrap();
    assert!(c.delete(&key![at.clone()]).unwrap().is_some());

    let past = id_of(KEY_SIZE_MAX_WRITE + 1);
    let size = KEY_SIZE_MAX_WRITE + 1;
    let d = doc(&past, "c@x", "green");
    check_refused(&db, None, size, || c.insert(&d));
    check_refused(&db, None, size, || c.upsert(&d));
    check_refused(&db, None, size, || c.update(&key![past.clone()], |d| d));
    check_refused(&db, None, size, || c.delete(&key![past.clone()]));
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn a_unique_value_at_the_key_limit_is_written_and_one_byte_more_is_refused() {
    let db = Database::in_memory();
    let c = docs(db.clone());
    let email_of = |len| filler(len, |s| key!["docs", "u", "email", s]);
    let at = email_of(KEY_SIZE_MAX_WRITE);
    c.insert(&doc("a", &at, "green")).unwrap();
    assert_eq!(
        c.get_by("email", &key![at.clone()]).unwrap().unwrap().0,
        key!["a"]
    );

    let past = email_of(KEY_SIZE_MAX_WRITE + 1);
    let size = KEY_SIZE_MAX_WRITE + 1;
    check_refused(&db, Some("email"), size, || {
        c.insert(&doc("b", &past, "red"))
    });
    check_refused(&db, Some("email"), size, || {
        c.upsert(&doc("a", &past, "red"))
    });
    check_refused(&db, Some("email"), size, || {
        c.update(&key!["a"], |d| Doc {
            email: past.clone(),
            ..d
        })
    });
    assert_eq!(c.get(&key!["a"]).unwrap().unwrap(), doc("a", &at, "green"));
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn a_non_unique_value_at_the_key_limit_is_written_and_one_byte_more_is_refused() {
    let db = Database::in_memory();
    let c = docs(db.clone());
    // A non-unique entry key ends with the primary key.
    let color_of = |len| filler(len, |s| key!["docs", "i", "color", s, "a"]);
    let at = color_of(KEY_SIZE_MAX_WRITE);
    c.insert(&doc("a", "a@x", &at)).unwrap();
    assert_eq!(c.count("color", &key![at.clone()]).unwrap(), 1);

    let past = color_of(KEY_SIZE_MAX_WRITE + 1);
    let size = KEY_SIZE_MAX_WRITE + 1;
    check_refused(&db, Some("color"), size, || {
        c.insert(&doc("b", "b@x", &past))
    });
    check_refused(&db, Some("color"), size, || {
        c.upsert(&doc("a", "b@x", &past))
    });
    check_refused(&db, Some("color"), size, || {
        c.update(&key!["a"], |d| Doc {
            color: past.clone(),
            ..d
        })
    });
    // The same value under a longer primary key is too long as well.
    check_refused(&db, Some("color"), size, || {
        c.insert(&doc("ab", "b@x", &at))
    });
    assert_eq!(c.get(&key!["a"]).unwrap().unwrap(), doc("a", "a@x", &at));
    assert!(c.verify().unwrap().is_clean());
}

#[test]
fn a_write_refused_with_one_attempt_changes_nothing_either() {
    // With one attempt the write goes straight to its transaction.
    let db = Database::in_memory();
    let c = Collection::builder("docs", |d: &Doc| key![d.id.clone()])
        .unique("email", |d| Some(key![d.email.clone()]))
        .max_attempts(1)
        .open(db.clone())
        .unwrap();
    let past = filler(KEY_SIZE_MAX_WRITE + 1, |s| key!["docs", "u", "email", s]);
    let size = KEY_SIZE_MAX_WRITE + 1;
    check_refused(&db, Some("email"), size, || {
        c.insert(&doc("a", &past, "red"))
    });
}

#[test]
fn backfilling_a_value_past_the_key_limit_names_the_index() {
    let db = Database::in_memory();
    let v1 = Collection::builder("docs", |d: &Doc| key![d.id.clone()])
        .open(db.clone())
        .unwrap();
    let past = filler(KEY_SIZE_MAX_WRITE + 1, |s| key!["docs", "u", "email", s]);
    v1.insert(&doc("a", &past, "red")).unwrap();
    let v2 = docs(db.clone());
    check_refused(&db, Some("email"), KEY_SIZE_MAX_WRITE + 1, || {
        v2.backfill(BACKFILL_BATCH_DEFAULT, |_| {})
    });
}
