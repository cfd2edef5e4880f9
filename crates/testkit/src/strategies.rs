//! proptest strategies for keys that favour the cases where encoders go wrong: shared
//! prefixes, NUL and 0xff bytes, signed zeros, NaNs with odd payloads, bigints at the
//! short/long form boundary and at the 255-byte magnitude limit.

use num_bigint::{BigInt, Sign};
use proptest::prelude::*;
use tuplekv_codec::{BIGINT_MAGNITUDE_MAX_BYTES, Key, KeyPart};

/// Bytes that matter to the encoding, mixed with arbitrary ones.
fn tricky_byte() -> impl Strategy<Value = u8> {
    prop_oneof![Just(0x00), Just(0xff), Just(0x01), Just(0x02), any::<u8>()]
}

/// A bytes part, short and dense in NULs.
pub fn bytes_part() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(tricky_byte(), 0..8)
}

/// A string part from characters whose UTF-8 forms cover one to four bytes, plus NUL.
pub fn string_part() -> impl Strategy<Value = String> {
    let chars = prop_oneof![
        Just('\0'),
        Just('a'),
        Just('b'),
        Just('\u{7f}'),
        Just('\u{80}'),
        Just('é'),
        Just('\u{ffff}'),
        Just('😮'),
        any::<char>(),
    ];
    prop::collection::vec(chars, 0..6).prop_map(|cs| cs.into_iter().collect())
}

/// A number, often one of the special values.
pub fn number_part() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(-0.0),
        Just(f64::NAN),
        Just(-f64::NAN),
        // NaNs with arbitrary payloads and signs: all must canonicalise.
        (any::<bool>(), 1u64..(1 << 52)).prop_map(|(neg, payload)| f64::from_bits(
            (u64::from(neg) << 63) | 0x7ff0_0000_0000_0000 | payload
        )),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(f64::MIN_POSITIVE),
        Just(-f64::MIN_POSITIVE),
        Just(f64::from_bits(1)),
        Just(-f64::from_bits(1)),
        Just(f64::MAX),
        Just(f64::MIN),
        (-3i32..3).prop_map(f64::from),
        any::<f64>(),
    ]
}

/// A bigint: around zero, at the one/eight/nine-byte boundaries, arbitrary, and huge.
pub fn bigint_part() -> impl Strategy<Value = BigInt> {
    let boundary = prop_oneof![
        Just(0u32),
        Just(8),
        Just(56),
        Just(64),
        Just(72),
        Just(8 * 255 - 1)
    ];
    prop_oneof![
        (-300i64..300).prop_map(BigInt::from),
        any::<i64>().prop_map(BigInt::from),
        any::<i128>().prop_map(BigInt::from),
        // ±(2^k) and ±(2^k - 1) around the length boundaries.
        (boundary, any::<bool>(), any::<bool>()).prop_map(|(k, neg, minus_one)| {
            let mut v = BigInt::from(1u8) << k;
            if minus_one {
                v -= 1u8;
            }
            if neg { -v } else { v }
        }),
        (
            any::<bool>(),
            prop::collection::vec(any::<u8>(), 0..=BIGINT_MAGNITUDE_MAX_BYTES)
        )
            .prop_map(|(neg, mag)| BigInt::from_bytes_be(
                if neg { Sign::Minus } else { Sign::Plus },
                &mag
            )),
    ]
}

/// Any encodable key part.
pub fn key_part() -> impl Strategy<Value = KeyPart> {
    prop_oneof![
        bytes_part().prop_map(KeyPart::Bytes),
        string_part().prop_map(KeyPart::String),
        number_part().prop_map(KeyPart::Number),
        bigint_part().prop_map(KeyPart::BigInt),
        any::<bool>().prop_map(KeyPart::Bool),
    ]
}

/// A list of up to `max` parts.
fn parts(max: usize) -> impl Strategy<Value = Vec<KeyPart>> {
    prop::collection::vec(key_part(), 0..=max)
}

fn to_key(parts: Vec<KeyPart>) -> Key {
    Key::new(parts).expect("strategies only generate encodable parts")
}

/// Any key of up to five parts.
pub fn key() -> impl Strategy<Value = Key> {
    parts(5).prop_map(to_key)
}

/// Pairs of keys, most of them sharing a prefix so that comparisons reach deep parts, some
/// differing only in one part, and some where one is a prefix of the other.
pub fn key_pair() -> impl Strategy<Value = (Key, Key)> {
    prop_oneof![
        (key(), key()),
        (parts(3), parts(3), parts(3)).prop_map(|(common, a, b)| {
            let join = |tail: Vec<KeyPart>| to_key(common.iter().cloned().chain(tail).collect());
            (join(a), join(b))
        }),
        (parts(3), key_part(), key_part(), parts(2)).prop_map(|(common, x, y, tail)| {
            let join = |p: KeyPart| {
                to_key(
                    common
                        .iter()
                        .cloned()
                        .chain([p])
                        .chain(tail.iter().cloned())
                        .collect(),
                )
            };
            (join(x), join(y))
        }),
        (key(), parts(2)).prop_map(|(a, tail)| {
            let b = to_key(a.parts().iter().cloned().chain(tail).collect());
            (a, b)
        }),
    ]
}
