//! `KeyBytes` behaves exactly like the bytes it holds, on both sides of its inline limit:
//! equality, order and hash agree with `[u8]` (the map is searched with borrowed slices, so
//! any disagreement would lose keys), and clones and conversions keep the bytes.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use proptest::prelude::*;
use tuplekv_engine::KeyBytes;
use tuplekv_testkit::config::proptest_config;

fn hash_of<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Byte strings around the inline limit, sharing prefixes often so that order is decided
/// late, as it is for tuple keys under one prefix.
fn key() -> impl Strategy<Value = Vec<u8>> {
    let limit = KeyBytes::INLINE;
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..=limit + 16),
        (limit - 2..=limit + 2).prop_map(|n| vec![7u8; n]),
        (0..=limit + 8, any::<u8>()).prop_map(|(n, last)| {
            let mut v = vec![1u8; n];
            v.push(last);
            v
        }),
    ]
}

proptest! {
    #![proptest_config(proptest_config(512, "key_bytes.txt"))]

    #[test]
    fn equality_order_and_hash_are_those_of_the_bytes(a in key(), b in key()) {
        let (ka, kb) = (KeyBytes::from(a.as_slice()), KeyBytes::from(b.clone()));
        prop_assert_eq!(ka.as_slice(), a.as_slice());
        prop_assert_eq!(kb.as_slice(), b.as_slice());
        prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        prop_assert_eq!(ka == kb, a == b);
        prop_assert_eq!(hash_of(&ka), hash_of(a.as_slice()));
        prop_assert_eq!(hash_of(&kb), hash_of(b.as_slice()));
    }

    #[test]
    fn clones_and_both_conversions_keep_the_bytes(a in key()) {
        let from_slice = KeyBytes::from(a.as_slice());
        let from_vec = KeyBytes::from(a.clone());
        let cloned = from_slice.clone();
        prop_assert_eq!(cloned.as_slice(), a.as_slice());
        prop_assert_eq!(&from_slice, &from_vec);
        prop_assert_eq!(from_vec.to_vec(), a);
    }
}

#[test]
fn a_short_key_from_a_vec_with_spare_capacity_keeps_its_bytes() {
    let mut v = Vec::with_capacity(4 * KeyBytes::INLINE);
    v.extend_from_slice(b"\x02users\x00");
    let key = KeyBytes::from(v);
    assert_eq!(key.as_slice(), b"\x02users\x00");
    assert_eq!(KeyBytes::default().as_slice(), b"");
}
