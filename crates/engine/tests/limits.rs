//! Every limit, at the limit and one past it, with Deno's numbers and messages. A violation is
//! a typed error that names the numbers, and nothing is written.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::time::Duration;

use tuplekv_engine::limits::*;
use tuplekv_engine::{Atomic, Database, Error, Key, Versionstamp, key};

/// A key whose encoding is exactly `len` bytes (a bytes part: tag + payload + terminator).
fn key_of_len(len: usize) -> Key {
    key![vec![b'k'; len - 2]]
}

/// The property every rejected operation must have: the error, and no trace in the store.
fn check_rejected(db: &Database, op: Atomic<'_, Database>, expected: Error, deno_text: &str) {
    let before = db.current_versionstamp();
    let keys_before = db.stats().keys;
    let err = op.commit().unwrap_err();
    assert_eq!(err, expected);
    assert!(err.to_string().starts_with(deno_text), "{err}");
    assert_eq!(db.current_versionstamp(), before, "no versionstamp used");
    assert_eq!(db.stats().keys, keys_before, "nothing written");
}

#[test]
fn write_key_size_limit_is_2048_bytes() {
    let db = Database::in_memory();
    assert!(db.set(&key_of_len(KEY_SIZE_MAX_WRITE), b"v").is_ok());
    let over = key_of_len(KEY_SIZE_MAX_WRITE + 1);
    check_rejected(
        &db,
        db.atomic().set(&key!["ok"], b"v").set(&over, b"v"),
        Error::KeyTooLargeForWrite { size: 2049 },
        "Key too large for write (max 2048 bytes)",
    );
    check_rejected(
        &db,
        db.atomic().check(&over, None),
        Error::KeyTooLargeForWrite { size: 2049 },
        "Key too large for write (max 2048 bytes)",
    );
    assert!(
        Error::KeyTooLargeForWrite { size: 2049 }
            .to_string()
            .contains("2049")
    );
}

#[test]
fn read_key_size_limit_is_2049_bytes() {
    let db = Database::in_memory();
    assert_eq!(db.get(&key_of_len(KEY_SIZE_MAX_READ)).unwrap(), None);
    let err = db.get(&key_of_len(KEY_SIZE_MAX_READ + 1)).unwrap_err();
    assert_eq!(err, Error::KeyTooLargeForRead { size: 2050 });
    assert!(
        err.to_string()
            .starts_with("Key too large for read (max 2049 bytes)")
    );
}

#[test]
fn empty_key_cannot_be_written_but_can_be_read() {
    let db = Database::in_memory();
    check_rejected(
        &db,
        db.atomic().set(&key![], b"v"),
        Error::EmptyKey,
        "key cannot be empty",
    );
    check_rejected(
        &db,
        db.atomic().check(&key![], None),
        Error::EmptyKey,
        "key cannot be empty",
    );
    assert_eq!(db.get(&key![]).unwrap(), None);
}

#[test]
fn value_size_limit_is_65536_bytes() {
    let db = Database::in_memory();
    assert!(db.set(&key!["v"], vec![0u8; VALUE_SIZE_MAX]).is_ok());
    check_rejected(
        &db,
        db.atomic().set(&key!["w"], vec![0u8; VALUE_SIZE_MAX + 1]),
        Error::ValueTooLarge { size: 65537 },
        "Value too large (max 65536 bytes)",
    );
}

#[test]
fn check_count_limit_is_100() {
    let db = Database::in_memory();
    let with_checks = |n: usize| (0..n).fold(db.atomic(), |a, i| a.check(&key!["c", i], None));
    assert!(with_checks(CHECKS_MAX).commit().unwrap().is_committed());
    check_rejected(
        &db,
        with_checks(CHECKS_MAX + 1),
        Error::TooManyChecks { count: 101 },
        "Too many checks (max 100)",
    );
}

#[test]
fn mutation_count_limit_is_1000() {
    let db = Database::in_memory();
    let with_sets = |n: usize| (0..n).fold(db.atomic(), |a, i| a.set(&key!["m", i], b"v"));
    assert!(with_sets(MUTATIONS_MAX).commit().unwrap().is_committed());
    let db2 = Database::in_memory();
    let over = (0..MUTATIONS_MAX + 1).fold(db2.atomic(), |a, i| a.set(&key!["m", i], b"v"));
    check_rejected(
        &db2,
        over,
        Error::TooManyMutations { count: 1001 },
        "Too many mutations (max 1000)",
    );
}

#[test]
fn total_mutation_size_counts_like_deno() {
    // Deno's recording: 12 sets of 65536-byte values on ["s", i] keys (12 bytes encoded; the
    // recording's note says 11, but its own arithmetic, 13 * 2 * 12, uses 12) plus one set of
    // x bytes; the largest x that fits is 32456 (each set costs 2 * key + value).
    let db = Database::in_memory();
    let op = |x: usize| {
        let a = (0..12).fold(db.atomic(), |a, i| {
            a.set(&key!["s", f64::from(i)], vec![0u8; 65536])
        });
        a.set(&key!["s", 99.0], vec![0u8; x])
    };
    assert_eq!(key!["s", 1.0].encode().len(), 12);
    assert!(op(32456).commit().unwrap().is_committed());
    let db2 = Database::in_memory();
    let over = (0..12)
        .fold(db2.atomic(), |a, i| {
            a.set(&key!["s", f64::from(i)], vec![0u8; 65536])
        })
        .set(&key!["s", 99.0], vec![0u8; 32457]);
    check_rejected(
        &db2,
        over,
        Error::TotalMutationSizeTooLarge {
            size: TOTAL_MUTATION_SIZE_MAX + 1,
        },
        "Total mutation size too large (max 819200 bytes)",
    );
}

#[test]
fn total_key_size_limit_is_81920_bytes_of_value_mutations() {
    // Deno: 40 sets of 2035-byte keys pass, 41 fail; checks do not count.
    let db = Database::in_memory();
    let sets = |n: usize| (1..=n).fold(db.atomic(), |a, i| a.set(&key![vec![b'k'; 2028], i], b""));
    assert_eq!(key![vec![b'k'; 2028], 1].encode().len(), 2032);
    assert!(sets(40).commit().unwrap().is_committed());
    let size = 41 * 2032;
    assert!(size > TOTAL_KEY_SIZE_MAX);
    check_rejected(
        &db,
        sets(41),
        Error::TotalKeySizeTooLarge { size },
        "Total key size too large (max 81920 bytes)",
    );
    let checks = (0..60).fold(db.atomic(), |a, i| {
        a.check(&key![vec![b'c'; 2028], i], None)
    });
    assert!(checks.commit().unwrap().is_committed());
}

#[test]
fn get_many_limit_is_10_keys() {
    let db = Database::in_memory();
    let keys: Vec<Key> = (0..11).map(|i| key!["g", i]).collect();
    assert_eq!(db.get_many(&keys[..GET_MANY_KEYS_MAX]).unwrap().len(), 10);
    let err = db.get_many(&keys).unwrap_err();
    assert_eq!(err, Error::TooManyRanges { count: 11 });
    assert!(err.to_string().starts_with("Too many ranges (max 10)"));
}

#[test]
fn expiry_limit_is_2_pow_53_minus_1_ms() {
    let db = Database::in_memory();
    let at = Duration::from_millis(EXPIRE_IN_MAX_MS);
    assert!(
        db.atomic()
            .set_with_expiry(&key!["e"], b"v", at)
            .commit()
            .is_ok()
    );
    check_rejected(
        &db,
        db.atomic()
            .set_with_expiry(&key!["f"], b"v", at + Duration::from_millis(1)),
        Error::ExpireInTooLarge { ms: 1 << 53 },
        "Invalid mutation: expireIn is too large: 9007199254740992",
    );
}

#[test]
fn stale_check_fails_commit_and_uses_no_versionstamp() {
    let db = Database::in_memory();
    let vs = db.set(&key!["a"], b"1").unwrap();
    db.set(&key!["a"], b"2").unwrap();
    let before = db.current_versionstamp();
    let res = db
        .atomic()
        .check(&key!["a"], Some(vs))
        .set(&key!["b"], b"x")
        .commit()
        .unwrap();
    assert!(!res.is_committed());
    assert_eq!(db.current_versionstamp(), before);
    assert_eq!(db.get(&key!["b"]).unwrap(), None);
    assert!(Versionstamp::ZERO < before);
}
