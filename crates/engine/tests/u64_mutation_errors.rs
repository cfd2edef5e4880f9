//! A `sum`, `min` or `max` that meets a value other than a `U64` fails the whole operation with
//! Deno's message followed by the mutation's index in the operation and its key, as a failed
//! check names its check; nothing is written and no versionstamp is used.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use tuplekv_engine::{
    Atomic, ByteRange, Database, Error, KeyBytes, ReadView, Value, Versionstamp, key,
};

/// Every live entry, in key order (raw keys up to `0xff 0xff` included).
fn dump(db: &Database) -> Vec<(Vec<u8>, Value, Versionstamp)> {
    let all = ByteRange {
        start: vec![],
        end: vec![0xff; 3],
    };
    db.snapshot()
        .scan(&all, false, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| (e.key.to_vec(), e.value, e.versionstamp))
        .collect()
}

/// Commits `op`, which must fail on mutation `index` (an `op` on `key`), changing nothing, and
/// returns the error's message.
fn check_names_mutation(
    db: &Database,
    op: Atomic<'_, Database>,
    expected: (&'static str, usize, &[u8]),
) -> String {
    let (name, index, key) = expected;
    let before = db.current_versionstamp();
    let entries_before = dump(db);
    let err = op.commit().unwrap_err();
    assert_eq!(
        err,
        Error::NotU64 {
            op: name,
            index,
            key: KeyBytes::from(key),
        }
    );
    assert_eq!(db.current_versionstamp(), before, "no versionstamp used");
    assert_eq!(dump(db), entries_before, "nothing written");
    err.to_string()
}

#[test]
fn a_failed_max_names_its_index_and_key_after_checks_and_other_mutations() {
    let db = Database::in_memory();
    let text = key!["text"];
    db.set(&text, b"not a number").unwrap();
    let op = db
        .atomic()
        .check(&key!["a"], None)
        .set(&key!["a"], 1u64)
        .delete(&key!["b"])
        .max(&text, 7);
    let message = check_names_mutation(&db, op, ("max", 2, &text.encode()));
    assert_eq!(
        message,
        "Failed to perform 'max' mutation on a non-U64 value in the database: \
         mutation 2 of the operation, key [\"text\"]"
    );
}

#[test]
fn a_mutation_failing_on_an_earlier_mutation_of_its_key_is_the_one_named() {
    let db = Database::in_memory();
    let k = key!["n"];
    let op = db.atomic().sum(&k, 1).set(&k, b"bytes").min(&k, 3);
    let message = check_names_mutation(&db, op, ("min", 2, &k.encode()));
    assert!(
        message.ends_with("mutation 2 of the operation, key [\"n\"]"),
        "{message}"
    );
}

#[test]
fn the_index_counts_every_mutation_of_a_large_operation() {
    // From 16 mutations on, the commit finds earlier mutations of a key through a map.
    let db = Database::in_memory();
    let op = (0..20u64).fold(db.atomic(), |a, i| a.set(&key!["k", i], b"v"));
    let op = op.sum(&key!["k", 5u64], 1);
    let message = check_names_mutation(&db, op, ("sum", 20, &key!["k", 5u64].encode()));
    assert!(message.ends_with("key [\"k\", 5n]"), "{message}");
}

#[test]
fn a_raw_key_that_is_no_tuple_is_shown_in_hex() {
    let db = Database::in_memory();
    let raw = [0xff, 0x01];
    let _ = db.atomic().set_raw(&raw, b"x").commit().unwrap();
    let op = db.atomic().sum_raw(&raw, 1);
    let message = check_names_mutation(&db, op, ("sum", 0, &raw));
    assert!(message.ends_with("key 0xff01"), "{message}");
}

#[test]
fn a_transaction_names_the_buffered_mutation_on_read_and_on_commit() {
    let db = Database::in_memory();
    let k = key!["n"];
    db.set(&k, Value::from(b"bytes".to_vec())).unwrap();
    // Reading its own buffered sum on a non-U64 value fails, naming the mutation.
    let err = db
        .transaction(|tx| {
            tx.set(&key!["other"], 1u64);
            tx.sum(&k, 1);
            tx.get(&k)
        })
        .unwrap_err();
    assert!(
        matches!(&err, Error::NotU64 { op: "sum", index: 1, key } if key.as_slice() == k.encode()),
        "{err}"
    );
    // Not reading it, the commit fails the same way.
    let err = db
        .transaction(|tx| {
            tx.set(&key!["other"], 1u64);
            tx.max(&k, 1);
            Ok::<_, Error>(())
        })
        .unwrap_err();
    assert!(
        matches!(&err, Error::NotU64 { op: "max", index: 1, key } if key.as_slice() == k.encode()),
        "{err}"
    );
    assert_eq!(db.get(&key!["other"]).unwrap(), None);
}
