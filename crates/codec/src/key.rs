//! [`Key`], a tuple of [`KeyPart`]s that is always encodable, and the [`key!`](crate::key!)
//! macro.

use std::fmt;

use crate::encode::{EncodeError, check_part};
use crate::part::KeyPart;

/// A key: a tuple of [`KeyPart`]s.
///
/// A `Key` always has an encoding: construction rejects a bigint whose magnitude needs more
/// than [`BIGINT_MAGNITUDE_MAX_BYTES`](crate::BIGINT_MAGNITUDE_MAX_BYTES) bytes, which is the
/// only part that cannot be encoded. That is why [`encode_key`](crate::encode_key) cannot fail.
/// Size limits (2048 bytes for a write, 2049 for a read) belong to the store, not to the key.
///
/// `Ord` is the tuple order of Deno KV: part by part, and a proper prefix sorts first. It
/// equals the `memcmp` order of the encodings. `Eq` and `Hash` agree with it.
///
/// # Examples
/// ```
/// use tuplekv_codec::{Key, KeyPart, key};
///
/// let mut k = Key::new(vec![KeyPart::from("users")])?;
/// k.push(42)?;
/// assert_eq!(k, key!["users", 42]);
/// assert!(k.starts_with(&key!["users"]));
/// assert!(key!["users"] < k);
/// # Ok::<(), tuplekv_codec::EncodeError>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    parts: Vec<KeyPart>,
}

impl Key {
    /// Builds a key from its parts.
    ///
    /// # Errors
    /// [`EncodeError::BigIntTooLarge`] if a bigint's magnitude needs more than 255 bytes.
    pub fn new(parts: Vec<KeyPart>) -> Result<Key, EncodeError> {
        parts.iter().try_for_each(check_part)?;
        Ok(Key { parts })
    }

    /// The empty key `[]`. It sorts before every other key and encodes to zero bytes.
    pub const fn empty() -> Key {
        Key { parts: Vec::new() }
    }

    /// Builds a key from parts already known to be encodable (the decoder's output).
    pub(crate) fn from_checked_parts(parts: Vec<KeyPart>) -> Key {
        Key { parts }
    }

    /// The parts of the key, in order.
    pub fn parts(&self) -> &[KeyPart] {
        &self.parts
    }

    /// Consumes the key and returns its parts.
    pub fn into_parts(self) -> Vec<KeyPart> {
        self.parts
    }

    /// The number of parts.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether this is the empty key `[]`.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Appends a part.
    ///
    /// # Errors
    /// [`EncodeError::BigIntTooLarge`] if the part is a bigint whose magnitude needs more than
    /// 255 bytes; the key is left unchanged.
    pub fn push(&mut self, part: impl Into<KeyPart>) -> Result<(), EncodeError> {
        let part = part.into();
        check_part(&part)?;
        self.parts.push(part);
        Ok(())
    }

    /// Removes and returns the last part.
    pub fn pop(&mut self) -> Option<KeyPart> {
        self.parts.pop()
    }

    /// Whether `prefix`'s parts are the first parts of this key (every key starts with `[]`
    /// and with itself).
    pub fn starts_with(&self, prefix: &Key) -> bool {
        self.parts.starts_with(&prefix.parts)
    }

    /// This key with one more part appended, leaving `self` as it is.
    ///
    /// # Errors
    /// As [`Key::push`].
    pub fn child(&self, part: impl Into<KeyPart>) -> Result<Key, EncodeError> {
        let mut child = self.clone();
        child.push(part)?;
        Ok(child)
    }

    /// The encoded bytes of this key; the same as [`encode_key`](crate::encode_key).
    pub fn encode(&self) -> Vec<u8> {
        crate::encode_key(self)
    }

    /// Used by [`key!`](crate::key!); not public API.
    ///
    /// # Panics
    /// If a bigint part's magnitude needs more than 255 bytes.
    #[doc(hidden)]
    #[track_caller]
    pub fn __from_macro(parts: Vec<KeyPart>) -> Key {
        match Key::new(parts) {
            Ok(key) => key,
            Err(e) => panic!("key![..]: {e}; use Key::new to handle this as an error"),
        }
    }
}

impl<'a> IntoIterator for &'a Key {
    type Item = &'a KeyPart;
    type IntoIter = std::slice::Iter<'a, KeyPart>;

    fn into_iter(self) -> Self::IntoIter {
        self.parts.iter()
    }
}

impl TryFrom<Vec<KeyPart>> for Key {
    type Error = EncodeError;

    fn try_from(parts: Vec<KeyPart>) -> Result<Self, Self::Error> {
        Key::new(parts)
    }
}

impl From<Key> for Vec<KeyPart> {
    fn from(key: Key) -> Self {
        key.parts
    }
}

impl fmt::Display for Key {
    /// Shows the key as a person writes it in JavaScript: `["users", 42n, true]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            fmt::Display::fmt(part, f)?;
        }
        f.write_str("]")
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Builds a [`Key`] from values convertible into [`KeyPart`]s.
///
/// Rust integers become bigints, floats become numbers (see [`KeyPart`]'s conversion table).
///
/// ```
/// use tuplekv_codec::key;
///
/// let k = key!["users_by_email", "ada@example.com"];
/// assert_eq!(k.to_string(), r#"["users_by_email", "ada@example.com"]"#);
/// assert_eq!(key![].len(), 0);
/// assert_eq!(key![b"\x01", 2.5, false].to_string(), r#"[b"\x01", 2.5, false]"#);
/// ```
///
/// # Panics
/// If a bigint part's magnitude needs more than 255 bytes. Use [`Key::new`] to get that as an
/// error instead, for example for bigints that come from outside the program.
#[macro_export]
macro_rules! key {
    () => {
        $crate::Key::empty()
    };
    ($($part:expr),+ $(,)?) => {
        $crate::Key::__from_macro(::std::vec![$($crate::KeyPart::from($part)),+])
    };
}
