//! Fixed, realistic workloads. They are deterministic so that runs compare.

use num_bigint::BigInt;
use tuplekv_codec::{Key, key};
use tuplekv_engine::Database;

/// The codec mix: the shapes applications actually use, in fixed proportions.
///
/// - 4 index-style keys `["users_by_email", "<email>"]`;
/// - 4 three-part keys with a bigint and a number `["orders", 1234567n, 99.5]`;
/// - 1 key with a long string containing NULs, and bytes;
/// - 1 key with a large (> 8 byte) negative bigint and booleans.
pub fn codec_mix() -> Vec<Key> {
    let mut keys = Vec::new();
    for (i, email) in [
        "ada@example.com",
        "grace@example.org",
        "linus@kernel.example",
        "margaret@nasa.example",
    ]
    .into_iter()
    .enumerate()
    {
        keys.push(key!["users_by_email", email]);
        keys.push(key!["orders", 1_234_567 + i as i64, 99.5 + i as f64]);
    }
    let long: String = (0..200)
        .map(|i| {
            if i % 50 == 49 {
                '\0'
            } else {
                char::from(b'a' + (i % 26) as u8)
            }
        })
        .collect();
    keys.push(key!["docs", long, b"\x00\x01\x02\xff".to_vec()]);
    keys.push(key![-(BigInt::from(3) << 80u32), true, false]);
    keys
}

/// Keys preloaded for the engine workloads (the size PERFORMANCE.md measures peers at).
pub const ENGINE_KEYS: u64 = 100_000;
/// Value size for the engine workloads, in bytes.
pub const VALUE_BYTES: usize = 100;

/// The `i`-th preloaded key: `["users", "by_id", "user_%08d"]`, 29 bytes encoded.
pub fn user_key(i: u64) -> Key {
    key!["users", "by_id", format!("user_{i:08}")]
}

/// The `i`-th key's value: [`VALUE_BYTES`] bytes derived from `i`.
pub fn user_value(i: u64) -> Vec<u8> {
    let seed = i.to_le_bytes();
    (0..VALUE_BYTES).map(|j| seed[j % 8] ^ j as u8).collect()
}

/// Value size for the small-value workloads (`engine/get_small`, `engine/list_100_small`): a
/// counter, an index entry or a short record, as the memory-per-key test stores.
pub const SMALL_VALUE_BYTES: usize = 16;

/// The `i`-th key's small value: [`SMALL_VALUE_BYTES`] bytes derived from `i`.
pub fn small_value(i: u64) -> Vec<u8> {
    let mut v = user_value(i);
    v.truncate(SMALL_VALUE_BYTES);
    v
}

/// The encoded preloaded keys, in order.
pub fn user_keys_encoded() -> Vec<Vec<u8>> {
    (0..ENGINE_KEYS)
        .map(|i| tuplekv_codec::encode_key(&user_key(i)))
        .collect()
}

/// An in-memory database holding `keys` (the encoded preloaded keys), the `i`-th with
/// [`user_value`]`(i)`, committed in chunks of 1000 as the engine bench and its probes load
/// it. Panics unless every chunk committed.
pub fn preloaded_database(keys: &[Vec<u8>]) -> Database {
    preloaded_database_with(keys, user_value)
}

/// [`preloaded_database`] with the `i`-th key's value `value(i)`.
pub fn preloaded_database_with(keys: &[Vec<u8>], value: fn(u64) -> Vec<u8>) -> Database {
    let db = Database::in_memory();
    for (chunk, ks) in keys.chunks(1000).enumerate() {
        let mut a = db.atomic();
        for (j, k) in ks.iter().enumerate() {
            a = a.set_raw(k, value((chunk * 1000 + j) as u64));
        }
        let res = a.commit();
        assert!(
            matches!(res, Ok(ref r) if r.is_committed()),
            "preload: {res:?}"
        );
    }
    db
}

/// A deterministic pseudo-random sequence of key indexes below `n` (xorshift), so every
/// implementation reads the same keys in the same order.
pub fn key_indexes(n: u64, count: usize, seed: u64) -> Vec<usize> {
    let mut x = seed | 1;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            usize::try_from(x % n).unwrap_or(0)
        })
        .collect()
}

/// The end of the byte range holding every key that starts with `prefix` (the prefix's
/// encoding followed by `0xff`).
pub fn prefix_end(prefix: &Key) -> Vec<u8> {
    let mut end = tuplekv_codec::encode_key(prefix);
    end.push(0xff);
    end
}

/// The unique-index insert the engine and durability benches commit: two absence checks and
/// two sets of `value`, as one atomic operation. Panics unless it committed (every key a bench
/// passes is fresh).
pub fn insert_pair(db: &Database, ka: &[u8], kb: &[u8], value: &[u8]) {
    let res = db
        .atomic()
        .check_raw(ka, None)
        .check_raw(kb, None)
        .set_raw(ka, value.to_vec())
        .set_raw(kb, value.to_vec())
        .commit();
    assert!(matches!(res, Ok(ref r) if r.is_committed()), "{res:?}");
}
