//! Versionstamped keys (`MutationKind::SetSuffixVersionstampedKey`, Deno's
//! `kv.commitVersionstamp()` as a key's last part): the written key is the prefix plus the
//! commit's stamp as a 20-digit hex string, on disk as in memory, and the prefix is what the
//! limits see.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use tuplekv_engine::limits::{KEY_SIZE_MAX_WRITE, VERSIONSTAMPED_KEY_SUFFIX_LEN};
use tuplekv_engine::{
    Database, Error, Expiry, KeyPart, ListOptions, MutationKind, Selector, Value,
    codec::encode_key, key,
};
use tuplekv_testkit::db::options;

fn vs_part(vs: tuplekv_engine::Versionstamp) -> KeyPart {
    KeyPart::String(vs.to_string())
}

#[test]
fn the_written_key_ends_with_the_commit_stamp_as_a_string_part() {
    let db = Database::in_memory();
    let res = db
        .atomic()
        .set_versionstamped(&key!["a"], b"x")
        .set(&key!["other"], b"y")
        .commit()
        .unwrap();
    let vs = res.versionstamp().unwrap();
    let mut expected = key!["a"];
    expected.push(vs_part(vs)).unwrap();
    let entry = db.get(&expected).unwrap().expect("written under the stamp");
    assert_eq!(entry.value, Value::from(b"x"));
    assert_eq!(
        entry.versionstamp, vs,
        "same stamp as the rest of the commit"
    );
    assert_eq!(
        db.get(&key!["a"]).unwrap(),
        None,
        "nothing is written at the prefix itself"
    );
}

#[test]
fn versionstamped_keys_sort_in_commit_order() {
    let db = Database::in_memory();
    let mut stamps = Vec::new();
    for i in 0..5u64 {
        db.set(&key!["noise", i], b"n").unwrap();
        let r = db
            .atomic()
            .set_versionstamped(&key!["log"], i)
            .commit()
            .unwrap();
        stamps.push(r.versionstamp().unwrap());
    }
    let listed: Vec<u64> = db
        .list(&Selector::prefix(&key!["log"]), ListOptions::default())
        .unwrap()
        .map(|e| e.unwrap().value.as_u64().unwrap())
        .collect();
    assert_eq!(listed, vec![0, 1, 2, 3, 4]);
}

#[test]
fn a_versionstamped_set_keeps_its_expiry() {
    let db = Database::in_memory();
    let r = db
        .atomic()
        .mutate_raw(
            &encode_key(&key!["t"]),
            MutationKind::SetSuffixVersionstampedKey {
                value: Value::from(b"gone"),
                expiry: Some(Expiry::At(1)),
            },
        )
        .commit()
        .unwrap();
    assert!(r.is_committed());
    let listed = db
        .list(&Selector::prefix(&key!["t"]), ListOptions::default())
        .unwrap()
        .count();
    assert_eq!(
        listed, 0,
        "a deadline in 1970 is past: the key reads as absent"
    );
}

#[test]
fn the_written_key_prefix_and_stamp_is_held_to_the_write_key_limit() {
    let db = Database::in_memory();
    // A bytes part of n bytes encodes as n + 2 bytes; the stamp part adds
    // VERSIONSTAMPED_KEY_SUFFIX_LEN.
    let room = KEY_SIZE_MAX_WRITE - VERSIONSTAMPED_KEY_SUFFIX_LEN;
    let at_limit = key![vec![7u8; room - 2]];
    let past = key![vec![7u8; room - 1]];
    let r = db
        .atomic()
        .set_versionstamped(&at_limit, b"v")
        .commit()
        .unwrap();
    assert!(
        r.is_committed(),
        "a prefix whose written key is at the limit is accepted"
    );
    let err = db
        .atomic()
        .set_versionstamped(&past, b"v")
        .commit()
        .unwrap_err();
    assert_eq!(
        err,
        Error::KeyTooLargeForWrite {
            size: KEY_SIZE_MAX_WRITE + 1
        }
    );
    // A prefix at the plain write limit would write a key 22 bytes past it.
    let err = db
        .atomic()
        .set_versionstamped(&key![vec![7u8; KEY_SIZE_MAX_WRITE - 2]], b"v")
        .commit()
        .unwrap_err();
    assert_eq!(
        err,
        Error::KeyTooLargeForWrite {
            size: KEY_SIZE_MAX_WRITE + VERSIONSTAMPED_KEY_SUFFIX_LEN
        }
    );
    let err = db
        .atomic()
        .set_versionstamped(&key![], b"v")
        .commit()
        .unwrap_err();
    assert_eq!(
        err,
        Error::EmptyKey,
        "the prefix may not be empty, as in Deno"
    );
}

#[test]
fn versionstamped_keys_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let vs = {
        let db = Database::open(dir.path(), options()).unwrap();
        let r = db
            .atomic()
            .set_versionstamped(&key!["log"], b"x")
            .commit()
            .unwrap();
        r.versionstamp().unwrap()
    };
    let db = Database::open(dir.path(), options()).unwrap();
    let mut k = key!["log"];
    k.push(vs_part(vs)).unwrap();
    let entry = db.get(&k).unwrap().expect("recovered");
    assert_eq!(entry.versionstamp, vs);
}

#[test]
fn a_transaction_sees_its_versionstamped_set_only_after_commit() {
    let db = Database::in_memory();
    let vs = db
        .transaction(|tx| {
            tx.mutate_raw(
                &encode_key(&key!["log"]),
                MutationKind::SetSuffixVersionstampedKey {
                    value: Value::from(b"x"),
                    expiry: None,
                },
            );
            // The key it will write is unknown until the commit: nothing at the prefix.
            assert_eq!(tx.get(&key!["log"]).unwrap(), None);
            let listed = tx
                .list(&Selector::prefix(&key!["log"]), ListOptions::default())
                .unwrap();
            assert!(listed.is_empty());
            Ok::<_, Error>(())
        })
        .map(|()| db.current_versionstamp())
        .unwrap();
    let mut k = key!["log"];
    k.push(vs_part(vs)).unwrap();
    assert!(db.get(&k).unwrap().is_some());
}
