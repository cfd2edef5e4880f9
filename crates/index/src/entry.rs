//! How an index entry's value is stored: a pointer to the record (its primary key), or a
//! covering copy of it.
//!
//! The planned form of an entry is always bytes ([`EntryBytes`]): `0x00` + the encoded primary
//! key for a pointer, `0x01` + the key's length (u32 LE) + the key + the record for a covering
//! entry. The stored form is the same bytes, except a pointer to a primary key that is one
//! non-negative integer below 2^64 (`[42n]`, the shape of most ids), which is stored as that
//! integer, a `Value::U64`, as Deno's secondary-index guide stores ids. Such a value sits in
//! the engine's version list itself: a read of the entry does not follow a pointer to a
//! separate buffer, and a write allocates nothing for it. Both stored forms of a pointer are
//! read, so entries written as bytes by earlier versions stay valid.

use std::ops::Deref;

use smallvec::SmallVec;
use tuplekv_engine::Value;

/// First byte of a pointer entry's bytes.
pub(crate) const POINTER: u8 = 0;
/// First byte of a covering entry's bytes.
pub(crate) const COVERING: u8 = 1;

/// The encoding tag of the integer 0 in a key; `INT_ZERO + n` is a positive integer of `n`
/// big-endian bytes, `n` in 1..=8 (the tuple layer's integer encoding).
const INT_ZERO: u8 = 0x14;

/// An index entry's planned bytes, inline when short: a pointer entry nearly always is. Most
/// entries a write plans are unchanged and never stored, so they should not allocate.
pub(crate) type EntryBytes = SmallVec<[u8; 48]>;

/// The value stored for the planned entry `entry`.
pub(crate) fn entry_value(entry: EntryBytes) -> Value {
    match pointer_int(&entry) {
        Some(id) => Value::U64(id),
        None => Value::from(entry.into_vec()),
    }
}

/// Whether the stored `value` is the planned entry `entry` (in either stored form).
pub(crate) fn stored_matches(value: &Value, entry: &[u8]) -> bool {
    match value {
        Value::Bytes(b) => **b == *entry,
        Value::U64(id) => pointer_int(entry) == Some(*id),
        Value::V8(_) => false,
    }
}

/// The integer `n` if `entry` is a pointer to the primary key `[n]` with `0 <= n < 2^64`,
/// encoded canonically (as the codec encodes it).
fn pointer_int(entry: &[u8]) -> Option<u64> {
    match entry.split_first() {
        Some((&POINTER, pk)) => pk_int(pk),
        _ => None,
    }
}

/// The integer `n` if `pk` is the canonical encoding of the key `[n]`, `0 <= n < 2^64`.
fn pk_int(pk: &[u8]) -> Option<u64> {
    let (&tag, magnitude) = pk.split_first()?;
    let len = usize::from(tag.checked_sub(INT_ZERO)?);
    if len > 8 || magnitude.len() != len || magnitude.first() == Some(&0) {
        return None;
    }
    let mut be = [0u8; 8];
    be.get_mut(8 - len..)?.copy_from_slice(magnitude);
    Some(u64::from_be_bytes(be))
}

/// A pointer entry's primary key, encoded: borrowed from a stored bytes entry, or rebuilt
/// from a stored integer.
pub(crate) enum PkBytes<'a> {
    /// Borrowed from the stored entry.
    Stored(&'a [u8]),
    /// The encoding of an integer key, `len` bytes of `buf`.
    Int { buf: [u8; 9], len: usize },
}

impl PkBytes<'_> {
    /// The encoded key `[id]`.
    fn int(id: u64) -> Self {
        let mut buf = [0u8; 9];
        let len = 8 - (id.leading_zeros() / 8) as usize;
        // `len` is at most 8, so the tag fits and the slices are in bounds.
        buf[0] = INT_ZERO + u8::try_from(len).unwrap_or(0);
        if let (Some(dst), Some(src)) = (buf.get_mut(1..=len), id.to_be_bytes().get(8 - len..)) {
            dst.copy_from_slice(src);
        }
        PkBytes::Int { buf, len: len + 1 }
    }
}

impl Deref for PkBytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            PkBytes::Stored(b) => b,
            PkBytes::Int { buf, len } => buf.get(..*len).unwrap_or_default(),
        }
    }
}

/// Why a stored entry cannot be read.
pub(crate) fn malformed(message: &str) -> String {
    format!("index entry: {message}")
}

/// A stored entry's parts: the encoded primary key (not yet validated) and, for a covering
/// entry, the record copy.
///
/// # Errors
/// A message for a value that is no entry of either kind.
pub(crate) fn parts(value: &Value) -> Result<(PkBytes<'_>, Option<&[u8]>), String> {
    let b = match value {
        Value::U64(id) => return Ok((PkBytes::int(*id), None)),
        Value::Bytes(b) => b,
        Value::V8(_) => return Err(malformed("not a bytes or u64 value")),
    };
    match b.split_first() {
        Some((&POINTER, pk)) => Ok((PkBytes::Stored(pk), None)),
        Some((&COVERING, rest)) => {
            let (len, rest) = rest.split_first_chunk::<4>().ok_or_else(|| {
                malformed(&format!(
                    "covering entry is {} bytes, shorter than its 5-byte header",
                    b.len()
                ))
            })?;
            let len = usize::try_from(u32::from_le_bytes(*len)).unwrap_or(usize::MAX);
            let (pk, record) = rest.split_at_checked(len).ok_or_else(|| {
                malformed(&format!(
                    "covering entry names a {len}-byte primary key but has {} bytes left",
                    rest.len()
                ))
            })?;
            Ok((PkBytes::Stored(pk), Some(record)))
        }
        _ => Err(malformed("unknown format")),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use tuplekv_codec::{encode_key, key};

    use super::*;

    fn pointer_to(pk: &[u8]) -> EntryBytes {
        let mut entry = EntryBytes::new();
        entry.push(POINTER);
        entry.extend_from_slice(pk);
        entry
    }

    proptest! {
        #![proptest_config(tuplekv_testkit::config::proptest_config(256, "entry.txt"))]

        #[test]
        fn an_integer_id_round_trips_through_its_u64_form(id in any::<u64>()) {
            let pk = encode_key(&key![id]);
            let entry = pointer_to(&pk);
            let stored = entry_value(entry.clone());
            prop_assert_eq!(&stored, &Value::U64(id));
            prop_assert!(stored_matches(&stored, &entry));
            let (read, copy) = parts(&stored).map_err(TestCaseError::fail)?;
            prop_assert_eq!(&*read, pk.as_slice());
            prop_assert!(copy.is_none());
        }
    }

    #[test]
    fn other_primary_keys_are_stored_as_bytes() {
        for pk in [
            key![-1],
            key!["user-1"],
            key![1, 2],
            key![1.5],
            key![u128::from(u64::MAX) + 1],
        ] {
            let entry = pointer_to(&encode_key(&pk));
            let stored = entry_value(entry.clone());
            assert!(matches!(stored, Value::Bytes(_)), "{pk:?} stays bytes");
            assert!(stored_matches(&stored, &entry));
        }
    }

    #[test]
    fn both_stored_forms_of_an_integer_pointer_match_and_read_the_same() {
        let pk = encode_key(&key![7u64]);
        let entry = pointer_to(&pk);
        let as_bytes = Value::from(entry.to_vec());
        assert!(stored_matches(&as_bytes, &entry));
        assert!(stored_matches(&Value::U64(7), &entry));
        assert!(!stored_matches(&Value::U64(8), &entry));
        let (from_bytes, _) = parts(&as_bytes).expect("bytes form");
        let (from_int, _) = parts(&Value::U64(7)).expect("u64 form");
        assert_eq!(&*from_bytes, &*from_int);
    }

    #[test]
    fn a_non_canonical_integer_is_not_compacted() {
        // A leading zero byte in the magnitude: decodes as 7, but is not how 7 is encoded.
        let entry = pointer_to(&[INT_ZERO + 2, 0, 7]);
        assert!(matches!(entry_value(entry), Value::Bytes(_)));
    }
}
