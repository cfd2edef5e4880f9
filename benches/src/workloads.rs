//! Fixed, realistic workloads. They are deterministic so that runs compare.

use num_bigint::BigInt;
use tuplekv_codec::{Key, key};

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
