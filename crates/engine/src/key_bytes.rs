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

    /// The key's bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(bytes) => bytes,
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
        KeyBytes(Repr::Inline {
            len: 0,
            bytes: [0; KeyBytes::INLINE],
        })
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
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Hash for KeyBytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl Deref for KeyBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for KeyBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for KeyBytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl From<&[u8]> for KeyBytes {
    fn from(b: &[u8]) -> Self {
        match u8::try_from(b.len()) {
            Ok(len) if b.len() <= KeyBytes::INLINE => {
                let mut bytes = [0; KeyBytes::INLINE];
                bytes[..b.len()].copy_from_slice(b);
                KeyBytes(Repr::Inline { len, bytes })
            }
            _ => KeyBytes(Repr::Heap(b.into())),
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

    fn is_inline(key: &KeyBytes) -> bool {
        matches!(key.0, Repr::Inline { .. })
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
