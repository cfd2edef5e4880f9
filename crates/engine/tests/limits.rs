//! Every limit, at the limit and one past it, with Deno's numbers and messages. A violation is
//! a typed error that names the numbers, and nothing is written.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::time::Duration;

use tuplekv_engine::limits::*;
use tuplekv_engine::{Atomic, Database, Error, Key, ListOptions, Selector, Versionstamp, key};

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

/// `n` distinct raw keys of exactly `len` bytes.
fn raw_keys(tag: u8, n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut k = vec![tag; len];
            let [hi, lo] = u16::try_from(i).unwrap().to_be_bytes();
            k[len - 2] = hi;
            k[len - 1] = lo;
            k
        })
        .collect()
}

#[test]
fn total_key_size_limit_is_81920_bytes_of_value_mutations() {
    // Exactly at the limit: 40 sets of 2048-byte keys (81920 bytes); one more byte of key
    // fails.
    let db = Database::in_memory();
    let keys = raw_keys(b'k', 40, KEY_SIZE_MAX_WRITE);
    assert_eq!(keys.iter().map(Vec::len).sum::<usize>(), TOTAL_KEY_SIZE_MAX);
    let sets = |keys: &[Vec<u8>]| keys.iter().fold(db.atomic(), |a, k| a.set_raw(k, b""));
    assert!(sets(&keys).commit().unwrap().is_committed());
    let mut over = keys.clone();
    over.push(vec![b'z']);
    check_rejected(
        &db,
        sets(&over),
        Error::TotalKeySizeTooLarge {
            size: TOTAL_KEY_SIZE_MAX + 1,
        },
        "Total key size too large (max 81920 bytes)",
    );
    // Sums carry a value, so they count too.
    let sums = |keys: &[Vec<u8>]| keys.iter().fold(db.atomic(), |a, k| a.sum_raw(k, 1));
    assert!(
        sums(&raw_keys(b's', 40, 2048))
            .commit()
            .unwrap()
            .is_committed()
    );
    let mut over = raw_keys(b's', 40, 2048);
    over.push(vec![b'z']);
    check_rejected(
        &db,
        sums(&over),
        Error::TotalKeySizeTooLarge {
            size: TOTAL_KEY_SIZE_MAX + 1,
        },
        "Total key size too large (max 81920 bytes)",
    );
    // Checks and deletes do not (Deno: 60 checks of ~2035-byte keys pass).
    let many = raw_keys(b'c', 60, 2048);
    let checks = many.iter().fold(db.atomic(), |a, k| a.check_raw(k, None));
    assert!(checks.commit().unwrap().is_committed());
    let deletes = many.iter().fold(db.atomic(), |a, k| a.delete_raw(k));
    assert!(deletes.commit().unwrap().is_committed());
}

#[test]
fn total_mutation_size_accounting_matches_deno_per_operation() {
    // Deno's recording (total_mutation_size_accounting): on top of 12 sets of 65536 bytes and
    // one set of x bytes on 12-byte keys (max x = 32456), ten operations on 112-byte keys take
    // these many bytes of the 819200 budget: a check or a delete its key, a sum twice its
    // key plus 8, a set twice its key plus its value.
    let rec = tuplekv_testkit::vectors::load_json("semantics-limits.json");
    let results = rec["total_mutation_size_accounting"]["results"]
        .as_array()
        .unwrap();
    let recorded = |op: &str| {
        results
            .iter()
            .find(|r| r["op"].as_str().unwrap().starts_with(op))
            .unwrap()["bytes"]
            .as_u64()
            .unwrap() as usize
    };
    let key_len = rec["total_mutation_size_accounting"]["key_len"]
        .as_u64()
        .unwrap() as usize;
    let max_x = rec["total_mutation_size"]["max_x"].as_u64().unwrap() as usize;
    let keys = raw_keys(b'o', 10, key_len);
    type Extra = for<'a> fn(Atomic<'a, Database>, &[u8]) -> Atomic<'a, Database>;
    let cases: [(&str, Extra, usize); 4] = [
        ("10 checks", |a, k| a.check_raw(k, None), key_len),
        ("10 deletes", |a, k| a.delete_raw(k), key_len),
        ("10 sums", |a, k| a.sum_raw(k, 1), 2 * key_len + 8),
        (
            "10 sets",
            |a, k| a.set_raw(k, vec![0u8; 100]),
            2 * key_len + 100,
        ),
    ];
    for (name, extra, each) in cases {
        assert_eq!(recorded(name), 10 * each, "{name}");
        let db = Database::in_memory();
        let op = |x: usize| {
            let a = (0..12).fold(db.atomic(), |a, i| {
                a.set(&key!["s", f64::from(i)], vec![0u8; 65536])
            });
            let a = a.set(&key!["s", 99.0], vec![0u8; x]);
            keys.iter().fold(a, |a, k| extra(a, k))
        };
        let fits = max_x - recorded(name);
        assert!(op(fits).commit().unwrap().is_committed(), "{name}");
        check_rejected(
            &db,
            op(fits + 1),
            Error::TotalMutationSizeTooLarge {
                size: TOTAL_MUTATION_SIZE_MAX + 1,
            },
            "Total mutation size too large (max 819200 bytes)",
        );
    }
}

#[test]
fn read_key_size_limit_applies_to_list_bounds_and_get_many() {
    let db = Database::in_memory();
    let at = key_of_len(KEY_SIZE_MAX_READ);
    let past = key_of_len(KEY_SIZE_MAX_READ + 1);
    let too_large = Error::KeyTooLargeForRead {
        size: KEY_SIZE_MAX_READ + 1,
    };
    // A range whose end is 2049 bytes lists; 2050 does not.
    let start = key![vec![b'a']];
    assert_eq!(
        db.list(&Selector::range(&start, &at), ListOptions::default())
            .unwrap()
            .count(),
        0
    );
    let err = db
        .list(&Selector::range(&start, &past), ListOptions::default())
        .err()
        .unwrap();
    assert_eq!(err, too_large);
    // A prefix of 2048 bytes has 2049-byte bounds (prefix ++ 00/ff); 2049 bytes is one past.
    let prefix_at = key_of_len(KEY_SIZE_MAX_READ - 1);
    assert!(
        db.list(&Selector::prefix(&prefix_at), ListOptions::default())
            .is_ok()
    );
    let err = db
        .list(&Selector::prefix(&at), ListOptions::default())
        .err()
        .unwrap();
    assert_eq!(err, too_large);
    // get_many, from the database and from a snapshot.
    assert_eq!(
        db.get_many(&[at.clone(), key!["x"]]).unwrap(),
        vec![None, None]
    );
    assert_eq!(
        db.get_many(&[key!["x"], past.clone()]).unwrap_err(),
        too_large
    );
    let snap = db.snapshot();
    assert_eq!(
        snap.get_many(std::slice::from_ref(&at)).unwrap(),
        vec![None]
    );
    assert_eq!(snap.get_many(&[past]).unwrap_err(), too_large);
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
