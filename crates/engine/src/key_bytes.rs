//! [`KeyBytes`]: an encoded key stored inline when short.
//!
//! Point reads are bound by memory latency: a skiplist search compares the sought key with a
//! node's key at every step, and a key kept in a separate heap buffer costs a second cache miss
//! per comparison. Keys of up to [`KeyBytes::INLINE`] bytes (nearly all real keys) live inside
//! the node, and copying one into a returned entry needs no allocation.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use smallvec::SmallVec;

/// An encoded key, inline up to [`KeyBytes::INLINE`] bytes.
#[derive(Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyBytes(SmallVec<[u8; KeyBytes::INLINE]>);

impl KeyBytes {
    /// Keys up to this many bytes are stored without a heap allocation.
    pub const INLINE: usize = 48;

    /// The key's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }

    /// The key, decoded into a tuple.
    ///
    /// # Errors
    /// If the bytes are not a valid tuple (only possible for keys written raw).
    pub fn decode(&self) -> Result<tuplekv_codec::Key, tuplekv_codec::DecodeError> {
        tuplekv_codec::decode_key(&self.0)
    }
}

impl Clone for KeyBytes {
    /// One copy of the bytes (the derived clone copies byte by byte; keys are cloned into
    /// every returned entry, so this is on the read path).
    fn clone(&self) -> Self {
        KeyBytes(SmallVec::from_slice(&self.0))
    }
}

impl Deref for KeyBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for KeyBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Borrow<[u8]> for KeyBytes {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl From<&[u8]> for KeyBytes {
    fn from(b: &[u8]) -> Self {
        KeyBytes(SmallVec::from_slice(b))
    }
}

impl From<Vec<u8>> for KeyBytes {
    fn from(b: Vec<u8>) -> Self {
        KeyBytes(SmallVec::from_vec(b))
    }
}

impl PartialEq<[u8]> for KeyBytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.0.as_slice() == other
    }
}

impl fmt::Debug for KeyBytes {
    /// Shows the decoded tuple when the bytes are one, else hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.decode() {
            Ok(key) => write!(f, "{key}"),
            Err(_) => {
                f.write_str("0x")?;
                self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
    }
}
