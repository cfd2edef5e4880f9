//! [`KeyBytes`]: an encoded key stored inline when short.
//!
//! Point reads are bound by memory latency: a skiplist search compares the sought key with a
//! node's key at every step, and a key kept in a separate heap buffer costs a second cache miss
//! per comparison. Keys of up to [`KeyBytes::INLINE`] bytes (nearly all real keys) live inside
//! the node, and copying one into a returned entry needs no allocation: it copies the whole
//! fixed-size buffer, which compiles to a few vector moves instead of a `memcpy` call with a
//! run-time length (a list copies one key per entry).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// An encoded key, inline up to [`KeyBytes::INLINE`] bytes.
///
/// Equality, order and hash are those of the bytes (as `[u8]`), so a `KeyBytes` map can be
/// searched with a borrowed `&[u8]`.
pub struct KeyBytes(Repr);

/// Where the bytes are.
#[derive(Clone)]
enum Repr {
    /// The first `len` bytes of `bytes` (`len <= INLINE`). Copying a key copies this whole
    /// fixed-size buffer: a few vector moves, no call to `memcpy` with a run-time length.
    Inline {
        len: u8,
        bytes: [u8; KeyBytes::INLINE],
    },
    /// A key longer than [`KeyBytes::INLINE`] bytes.
    Heap(Box<[u8]>),
}

impl KeyBytes {
    /// Keys up to this many bytes are stored without a heap allocation.
    pub const INLINE: usize = 48;

    /// The empty key.
    pub(crate) const EMPTY: KeyBytes = KeyBytes(Repr::Inline {
        len: 0,
        bytes: [0; KeyBytes::INLINE],
    });

    /// The key's bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(bytes) => bytes,
        }
    }

    /// Makes this key a copy of `b`, in place: an inline key's bytes are written straight
    /// into its buffer. A read builds each returned entry with a default key and then this,
    /// so the key's bytes go once to where the entry lives; built on the stack and moved
    /// (what `KeyBytes::from` does), its bytes are stored in pieces and loaded back whole
    /// at once, which the processor cannot forward from its store buffer, and that stall
    /// was a quarter of building a list's entries.
    #[inline]
    pub(crate) fn assign(&mut self, b: &[u8]) {
        match (&mut self.0, u8::try_from(b.len())) {
            (Repr::Inline { len, bytes }, Ok(n)) if b.len() <= KeyBytes::INLINE => {
                copy_short(bytes, b);
                *len = n;
            }
            _ => *self = KeyBytes::from(b),
        }
    }

    /// The key, decoded into a tuple.
    ///
    /// # Errors
    /// If the bytes are not a valid tuple (only possible for keys written raw).
    pub fn decode(&self) -> Result<tuplekv_codec::Key, tuplekv_codec::DecodeError> {
        tuplekv_codec::decode_key(self.as_slice())
    }
}

impl Default for KeyBytes {
    /// The empty key.
    fn default() -> Self {
        KeyBytes::EMPTY
    }
}

impl Clone for KeyBytes {
    /// An inline key is copied as its whole fixed-size buffer; keys are cloned into every
    /// returned entry, so this is on the read path.
    #[inline]
    fn clone(&self) -> Self {
        KeyBytes(self.0.clone())
    }
}

impl PartialEq for KeyBytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for KeyBytes {}

impl PartialOrd for KeyBytes {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KeyBytes {
    /// Byte order, compared inline, eight bytes at a time: the skiplist calls this at every step
    /// of a search for a key it inserts.
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        compare(self.as_slice(), other.as_slice())
    }
}

/// `a.cmp(b)` in byte order, compared inline eight bytes at a time: keys are short, and for
/// them a call to `memcmp` costs more than the comparison (a search compares keys some 30
/// times in a map of 100k keys).
#[inline]
pub(crate) fn compare(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    if n >= 8 {
        let mut at = 0;
        while at + 8 < n {
            let (x, y) = (be_word(a, at), be_word(b, at));
            if x != y {
                return x.cmp(&y);
            }
            at += 8;
        }
        // The last eight bytes, overlapping the words already found equal: the first
        // difference in them is the first difference of all.
        let (x, y) = (be_word(a, n - 8), be_word(b, n - 8));
        if x != y {
            return x.cmp(&y);
        }
    } else {
        for (x, y) in a.iter().zip(b) {
            if x != y {
                return x.cmp(y);
            }
        }
    }
    a.len().cmp(&b.len())
}

/// The eight bytes of `s` from `at` as a big-endian number (callers keep `at + 8 <= s.len()`).
#[inline]
fn be_word(s: &[u8], at: usize) -> u64 {
    s.get(at..at + 8)
        .and_then(|w| <[u8; 8]>::try_from(w).ok())
        .map_or(0, u64::from_be_bytes)
}

impl Hash for KeyBytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl Deref for KeyBytes {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for KeyBytes {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for KeyBytes {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl From<&[u8]> for KeyBytes {
    /// Every read copies its keys through here, so an inline key is copied in fixed-size
    /// pieces (see `copy_short`), with no call to `memcpy`.
    #[inline]
    fn from(b: &[u8]) -> Self {
        match u8::try_from(b.len()) {
            Ok(len) if b.len() <= KeyBytes::INLINE => {
                let mut bytes = [0; KeyBytes::INLINE];
                copy_short(&mut bytes, b);
                KeyBytes(Repr::Inline { len, bytes })
            }
            _ => KeyBytes(Repr::Heap(b.into())),
        }
    }
}

/// Copies `src` (at most [`KeyBytes::INLINE`] bytes) to the start of `dst` as a few copies of
/// constant size: up to two 16-byte pieces from the front, then one ending at `src`'s end
/// (overlapping the one before), and 8-, 4- or 1-byte pieces likewise for shorter keys. A copy of a length
/// known only at run time is a call to `memcpy`, which for a key of 10 to 40 bytes costs more
/// than the copy.
#[inline]
fn copy_short(dst: &mut [u8; KeyBytes::INLINE], src: &[u8]) {
    let n = src.len();
    /// Copies `W` bytes of `src` from `at` into `dst` at the same place.
    #[inline(always)]
    fn piece<const W: usize>(dst: &mut [u8], src: &[u8], at: usize) {
        if let (Some(d), Some(s)) = (dst.get_mut(at..at + W), src.get(at..at + W)) {
            d.copy_from_slice(s);
        }
    }
    // `INLINE` is 48, so three 16-byte pieces cover any inline key of 16 bytes or more; no
    // loop, which the compiler would turn back into a call to `memcpy`.
    const _: () = assert!(KeyBytes::INLINE <= 48);
    if n >= 16 {
        piece::<16>(dst, src, 0);
        if n > 32 {
            piece::<16>(dst, src, 16);
        }
        piece::<16>(dst, src, n - 16);
    } else if n >= 8 {
        piece::<8>(dst, src, 0);
        piece::<8>(dst, src, n - 8);
    } else if n >= 4 {
        piece::<4>(dst, src, 0);
        piece::<4>(dst, src, n - 4);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

impl From<Vec<u8>> for KeyBytes {
    fn from(b: Vec<u8>) -> Self {
        if b.len() <= KeyBytes::INLINE {
            KeyBytes::from(b.as_slice())
        } else {
            KeyBytes(Repr::Heap(b.into_boxed_slice()))
        }
    }
}

impl PartialEq<[u8]> for KeyBytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl fmt::Debug for KeyBytes {
    /// Shows the decoded tuple when the bytes are one, else hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.decode() {
            Ok(key) => write!(f, "{key}"),
            Err(_) => {
                f.write_str("0x")?;
                self.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_is_byte_order_for_every_length_and_difference() {
        let samples: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0xff],
            b"abc".to_vec(),
            b"abcdefg".to_vec(),
            b"abcdefgh".to_vec(),
            b"abcdefgh\0".to_vec(),
            b"abcdefgi".to_vec(),
            b"abcdefghijklmnopq".to_vec(),
            b"abcdefghijklmnopr".to_vec(),
            b"abcdefghijklmnop".to_vec(),
            vec![0x7f; 9],
            vec![0x80; 9],
            vec![0xff; 24],
        ];
        for a in &samples {
            for b in &samples {
                assert_eq!(compare(a, b), a.cmp(b), "{a:?} vs {b:?}");
                let (ka, kb) = (KeyBytes::from(a.as_slice()), KeyBytes::from(b.as_slice()));
                assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} vs {b:?} as keys");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn compare_agrees_with_slice_order_on_keys_sharing_a_prefix(
            shared in proptest::collection::vec(proptest::num::u8::ANY, 0..60),
            a in proptest::collection::vec(proptest::num::u8::ANY, 0..12),
            b in proptest::collection::vec(proptest::num::u8::ANY, 0..12),
        ) {
            let a = [shared.as_slice(), &a].concat();
            let b = [shared.as_slice(), &b].concat();
            proptest::prop_assert_eq!(compare(&a, &b), a.cmp(&b));
            proptest::prop_assert_eq!(compare(&b, &a), b.cmp(&a));
        }
    }

    fn is_inline(key: &KeyBytes) -> bool {
        matches!(key.0, Repr::Inline { .. })
    }

    #[test]
    fn an_inline_copy_keeps_every_byte_of_every_length_up_to_the_limit() {
        for n in 0..=KeyBytes::INLINE {
            let bytes: Vec<u8> = (1..=n).map(|i| i as u8).collect();
            let key = KeyBytes::from(bytes.as_slice());
            assert!(is_inline(&key), "{n} bytes");
            assert_eq!(key.as_slice(), bytes.as_slice(), "{n} bytes");
        }
    }

    #[test]
    fn keys_up_to_the_inline_limit_live_inline_and_longer_ones_on_the_heap() {
        for n in [0, 1, KeyBytes::INLINE - 1, KeyBytes::INLINE] {
            let bytes = vec![0xab; n];
            assert!(is_inline(&KeyBytes::from(bytes.as_slice())), "{n} bytes");
            // Spare capacity does not keep a short key on the heap.
            let mut v = Vec::with_capacity(4 * KeyBytes::INLINE);
            v.extend_from_slice(&bytes);
            assert!(is_inline(&KeyBytes::from(v)), "{n} bytes from a roomy vec");
        }
        for n in [KeyBytes::INLINE + 1, 2049] {
            let bytes = vec![0xab; n];
            assert!(!is_inline(&KeyBytes::from(bytes.as_slice())), "{n} bytes");
            assert!(
                !is_inline(&KeyBytes::from(bytes.clone())),
                "{n} bytes from a vec"
            );
            assert_eq!(KeyBytes::from(bytes.clone()).clone().as_slice(), bytes);
        }
    }
}
