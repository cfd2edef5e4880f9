//! Property tests of the encoding against the tuple order written from the rules
//! (`Ord for Key`): byte order equals tuple order, decoding inverts encoding, and byte
//! prefixes are tuple prefixes. Failures print the failing keys and are saved under
//! `proptest-regressions/` (commit those files).

use std::cmp::Ordering;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use proptest::prelude::*;
use tuplekv_codec::{Key, Selector, decode_key, encode_key, encoded_len, validate_key};
use tuplekv_testkit::config::proptest_config;
use tuplekv_testkit::strategies::{key, key_pair};

/// The central property: comparing encodings compares keys.
fn check_order(a: &Key, b: &Key) -> Result<(), TestCaseError> {
    let (ea, eb) = (encode_key(a), encode_key(b));
    prop_assert_eq!(ea.cmp(&eb), a.cmp(b), "{} vs {}", a, b);
    prop_assert_eq!(ea == eb, a == b);
    Ok(())
}

fn hash_of(k: &Key) -> u64 {
    let mut h = DefaultHasher::new();
    k.hash(&mut h);
    h.finish()
}

proptest! {
    #![proptest_config(proptest_config(512, "order.txt"))]

    #[test]
    fn byte_order_equals_tuple_order((a, b) in key_pair()) {
        check_order(&a, &b)?;
        check_order(&b, &a)?;
    }

    #[test]
    fn decode_inverts_encode(k in key()) {
        let bytes = encode_key(&k);
        prop_assert_eq!(encoded_len(&k), bytes.len());
        prop_assert_eq!(validate_key(&bytes), Ok(k.len()));
        prop_assert_eq!(decode_key(&bytes), Ok(k));
    }

    #[test]
    fn tuple_prefix_iff_byte_prefix_followed_by_whole_parts((a, b) in key_pair()) {
        // A byte prefix alone is not enough: `[b""]` is `01 00` and `[b"\0"]` is
        // `01 00 ff 00`. The rest must also decode as whole parts, which an escape (`ff`) never
        // starts.
        let (ea, eb) = (encode_key(&a), encode_key(&b));
        let byte_prefix = eb.starts_with(&ea) && validate_key(&eb[ea.len()..]).is_ok();
        prop_assert_eq!(byte_prefix, b.starts_with(&a), "{} / {}", a, b);
        if b.starts_with(&a) {
            prop_assert!(eb.starts_with(&ea));
        }
    }

    #[test]
    fn equal_keys_hash_equal((a, b) in key_pair()) {
        if a == b {
            prop_assert_eq!(hash_of(&a), hash_of(&b));
        }
        prop_assert_eq!(a.clone(), a.clone());
        prop_assert_eq!(hash_of(&a), hash_of(&a.clone()));
    }

    #[test]
    fn prefix_range_holds_exactly_the_strict_descendants((a, b) in key_pair()) {
        let range = Selector::prefix(&a).byte_range().unwrap();
        let strict_child = b.starts_with(&a) && b.len() > a.len();
        prop_assert_eq!(range.contains(&encode_key(&b)), strict_child, "{} under {}", b, a);
    }

    #[test]
    fn ord_is_a_total_order((a, b) in key_pair(), c in key()) {
        prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
        if a <= b && b <= c {
            prop_assert!(a <= c);
        }
        prop_assert_eq!(a.cmp(&a), Ordering::Equal);
    }
}

/// The case that first broke the naive "byte prefix means tuple prefix" property, kept as a
/// plain test: it was found by a random seed before failures were persisted.
#[test]
fn escaped_nul_after_empty_bytes_is_a_byte_prefix_but_not_a_tuple_prefix() {
    let a = tuplekv_codec::key![b"".to_vec()];
    let b = tuplekv_codec::key![b"\0".to_vec()];
    let (ea, eb) = (encode_key(&a), encode_key(&b));
    assert!(eb.starts_with(&ea));
    assert!(!b.starts_with(&a));
    assert!(validate_key(&eb[ea.len()..]).is_err());
}

/// NaNs with different payloads are one key: equal, hashed alike, encoded alike, and the sign
/// still separates them. `-0.0` and `0.0` are two keys, as in Deno.
#[test]
fn nans_with_different_payloads_are_equal_keys_and_signed_zeros_are_not() {
    use tuplekv_codec::key;
    let quiet = key![f64::NAN];
    let payload = key![f64::from_bits(0x7ff8_0000_0000_0001)];
    let signalling = key![f64::from_bits(0x7ff0_0000_0000_0001)];
    for other in [&payload, &signalling] {
        assert_eq!(&quiet, other);
        assert_eq!(quiet.cmp(other), Ordering::Equal);
        assert_eq!(hash_of(&quiet), hash_of(other));
        assert_eq!(encode_key(&quiet), encode_key(other));
    }
    let neg = key![-f64::NAN];
    let neg_payload = key![f64::from_bits(0xfff8_0000_0000_0001)];
    assert_eq!(neg, neg_payload);
    assert_eq!(hash_of(&neg), hash_of(&neg_payload));
    assert_eq!(encode_key(&neg), encode_key(&neg_payload));
    assert!(neg < quiet, "the sign of a NaN is kept");

    let (zero, neg_zero) = (key![0.0], key![-0.0]);
    assert_ne!(zero, neg_zero);
    assert!(neg_zero < zero);
    assert!(encode_key(&neg_zero) < encode_key(&zero));
}

/// Bigints with a 255-byte magnitude (the most one length byte can say) round-trip in both
/// signs, and every truncation of their encoding is an error, not a panic.
#[test]
fn bigints_at_the_magnitude_limit_round_trip_and_truncations_are_errors() {
    use num_bigint::BigInt;
    use tuplekv_codec::{BIGINT_MAGNITUDE_MAX_BYTES, KeyPart};
    let max: BigInt = (BigInt::from(1u8) << (8 * BIGINT_MAGNITUDE_MAX_BYTES)) - 1u8;
    for value in [max.clone(), -max] {
        let k = Key::new(vec![KeyPart::BigInt(value)]).unwrap();
        let bytes = encode_key(&k);
        assert_eq!(bytes.len(), 2 + BIGINT_MAGNITUDE_MAX_BYTES);
        assert_eq!(decode_key(&bytes), Ok(k.clone()));
        for cut in 0..bytes.len() {
            assert!(
                decode_key(&bytes[..cut]).is_err() || cut == 0,
                "cut at {cut}"
            );
        }
        let mut long = bytes.clone();
        long.push(0x00);
        assert!(decode_key(&long).is_err(), "a trailing byte is not a part");
    }
}
