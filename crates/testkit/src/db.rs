//! Helpers for tests that drive a [`Database`]: the options they open it with, its whole state
//! as plain data to compare, and reads of `U64` counters. Shared by the engine's, the index's
//! and the sequence's tests and by the fuzz bodies, which all used to carry their own copies.

use tuplekv_engine::limits::KEY_SIZE_MAX_READ;
use tuplekv_engine::{ByteRange, Database, Options, ReadView, Value, Versionstamp};

/// The engine's defaults without the background reclaimer, so that what a test counts
/// (versions, keys, the reclaim queue) changes only by its own hand.
///
/// # Examples
/// ```
/// use tuplekv_engine::Database;
/// let db = Database::with_options(tuplekv_testkit::db::options());
/// assert_eq!(db.stats().keys, 0);
/// ```
pub fn options() -> Options {
    Options {
        background_reclaim: false,
        ..Options::default()
    }
}

/// Every live entry, in key order: (key bytes, value, versionstamp). Two databases with the
/// same dump hold the same data written by the same commits. Raw keys count too: the range
/// ends above every key that can be written.
///
/// # Examples
/// ```
/// use tuplekv_engine::{Database, key};
/// use tuplekv_testkit::db::dump;
/// let db = Database::in_memory();
/// let stamp = db.set(&key!["a"], b"1")?;
/// assert_eq!(dump(&db), [(tuplekv_engine::codec::encode_key(&key!["a"]), b"1".into(), stamp)]);
/// # Ok::<(), tuplekv_engine::Error>(())
/// ```
///
/// # Panics
/// If the scan fails, which it cannot for this range.
pub fn dump(db: &Database) -> Vec<(Vec<u8>, Value, Versionstamp)> {
    let all = ByteRange {
        start: vec![],
        end: vec![0xff; KEY_SIZE_MAX_READ],
    };
    db.snapshot()
        .scan(&all, false, usize::MAX)
        .expect("a scan of every key is within the read limits")
        .into_iter()
        .map(|e| (e.key.to_vec(), e.value, e.versionstamp))
        .collect()
}

/// The keys of [`dump`], in order.
pub fn keys(db: &Database) -> Vec<Vec<u8>> {
    dump(db).into_iter().map(|(k, _, _)| k).collect()
}

/// The number in a `U64` value read from the store, with an absent key counting as 0.
///
/// # Examples
/// ```
/// use tuplekv_engine::{Database, Value, key};
/// use tuplekv_testkit::db::u64_of;
/// let db = Database::in_memory();
/// assert_eq!(u64_of(db.get(&key!["n"])?.map(|e| e.value)), 0);
/// db.set(&key!["n"], Value::U64(7))?;
/// assert_eq!(u64_of(db.get(&key!["n"])?.map(|e| e.value)), 7);
/// # Ok::<(), tuplekv_engine::Error>(())
/// ```
///
/// # Panics
/// If the value is not a `U64`: the test wrote something it did not mean to.
pub fn u64_of(v: Option<Value>) -> u64 {
    match v {
        Some(Value::U64(n)) => n,
        None => 0,
        other => panic!("not a u64: {other:?}"),
    }
}
