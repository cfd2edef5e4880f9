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
