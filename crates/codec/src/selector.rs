//! List selectors turned into byte ranges, and Deno's list cursors, exactly as Deno KV does.
//!
//! A selector names a set of keys: every key under a prefix (the prefix itself excluded), a
//! prefix from a start key on or up to an end key, or a plain `[start, end)` range. All ranges
//! are start-inclusive and end-exclusive. Because every encoded part begins with a type code in
//! `01..=27`, the keys strictly under an encoded prefix `P` are exactly `[P ++ 00, P ++ ff)`.
//!
//! A cursor is the URL-safe base64 (with `=` padding) of the boundary key's bytes after the
//! selector's common prefix; resuming excludes the boundary key in both directions.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE;
use thiserror::Error;

use crate::encode::encode_key;
use crate::key::Key;

/// Why a selector or cursor is not usable. The messages are Deno KV's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SelectorError {
    /// `prefix` + `start` where `start` is not strictly under `prefix`.
    #[error("Start key is not in the keyspace defined by prefix")]
    StartNotInPrefix,
    /// `prefix` + `end` where `end` is not strictly under `prefix`.
    #[error("End key is not in the keyspace defined by prefix")]
    EndNotInPrefix,
    /// `start` sorts after `end`.
    #[error("Start key is greater than end key")]
    StartAfterEnd,
    /// `prefix`, `start` and `end` were all given.
    #[error("Selector can not specify both 'start' and 'end' key when specifying 'prefix'")]
    PrefixWithStartAndEnd,
    /// Neither a prefix nor both of start and end were given.
    #[error("Selector must specify either 'prefix' or both 'start' and 'end' key")]
    Incomplete,
    /// The cursor is not padded URL-safe base64.
    #[error("invalid cursor")]
    InvalidCursor,
    /// The cursor points outside the selector's explicit start or end.
    #[error("cursor out of bounds")]
    CursorOutOfBounds,
    /// A cursor was requested for a key that does not start with the selector's common prefix.
    #[error("Invalid boundary key")]
    InvalidBoundaryKey,
}

/// A half-open range of encoded keys, `start <= key < end`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ByteRange {
    /// The first key in the range (inclusive).
    pub start: Vec<u8>,
    /// The key after the range (exclusive).
    pub end: Vec<u8>,
}

impl ByteRange {
    /// Whether `key` is in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.start.as_slice() <= key && key < self.end.as_slice()
    }

    /// Whether no key can be in the range.
    pub fn is_empty(&self) -> bool {
        self.start >= self.end
    }
}

/// Which keys a list reads, over encoded keys.
///
/// Build one from typed keys with [`Selector::prefix`], [`Selector::prefix_start`],
/// [`Selector::prefix_end`], [`Selector::range`] or [`Selector::from_options`], or from
/// encoded keys with the variants directly (for a server passing bytes through).
///
/// ```
/// use tuplekv_codec::{Selector, encode_key, key};
///
/// let users = Selector::prefix(&key!["users"]);
/// let range = users.byte_range()?;
/// assert!(range.contains(&encode_key(&key!["users", 1])));
/// assert!(!range.contains(&encode_key(&key!["users"])));
///
/// // Deno's cursor after ["users", "b"] under the prefix ["users"]:
/// let cursor = users.cursor_for(&encode_key(&key!["users", "b"]))?;
/// assert_eq!(cursor, "AmIA");
/// let rest = users.resume(&cursor, false)?;
/// assert!(!rest.contains(&encode_key(&key!["users", "b"])));
/// assert!(rest.contains(&encode_key(&key!["users", "c"])));
/// # Ok::<(), tuplekv_codec::SelectorError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Selector {
    /// Every key strictly under the prefix.
    Prefix(Vec<u8>),
    /// Keys strictly under `prefix`, from `start` (inclusive) on.
    PrefixStart {
        /// The encoded prefix.
        prefix: Vec<u8>,
        /// The encoded first key; must be strictly under `prefix`.
        start: Vec<u8>,
    },
    /// Keys strictly under `prefix`, up to `end` (exclusive).
    PrefixEnd {
        /// The encoded prefix.
        prefix: Vec<u8>,
        /// The encoded end key; must be strictly under `prefix`.
        end: Vec<u8>,
    },
    /// Keys from `start` (inclusive) to `end` (exclusive).
    Range {
        /// The encoded first key.
        start: Vec<u8>,
        /// The encoded end key.
        end: Vec<u8>,
    },
}

impl Selector {
    /// Every key strictly under `prefix` (`prefix` itself is not included).
    pub fn prefix(prefix: &Key) -> Selector {
        Selector::Prefix(encode_key(prefix))
    }

    /// Keys strictly under `prefix`, from `start` on.
    pub fn prefix_start(prefix: &Key, start: &Key) -> Selector {
        Selector::PrefixStart {
            prefix: encode_key(prefix),
            start: encode_key(start),
        }
    }

    /// Keys strictly under `prefix`, before `end`.
    pub fn prefix_end(prefix: &Key, end: &Key) -> Selector {
        Selector::PrefixEnd {
            prefix: encode_key(prefix),
            end: encode_key(end),
        }
    }

    /// Keys from `start` (inclusive) to `end` (exclusive).
    pub fn range(start: &Key, end: &Key) -> Selector {
        Selector::Range {
            start: encode_key(start),
            end: encode_key(end),
        }
    }

    /// Builds a selector from optional parts, as Deno's `list({prefix, start, end})` accepts
    /// them.
    ///
    /// # Errors
    /// [`SelectorError::PrefixWithStartAndEnd`] for all three, [`SelectorError::Incomplete`]
    /// for no prefix and not both of start and end.
    pub fn from_options(
        prefix: Option<&Key>,
        start: Option<&Key>,
        end: Option<&Key>,
    ) -> Result<Selector, SelectorError> {
        match (prefix, start, end) {
            (Some(_), Some(_), Some(_)) => Err(SelectorError::PrefixWithStartAndEnd),
            (Some(p), None, None) => Ok(Selector::prefix(p)),
            (Some(p), Some(s), None) => Ok(Selector::prefix_start(p, s)),
            (Some(p), None, Some(e)) => Ok(Selector::prefix_end(p, e)),
            (None, Some(s), Some(e)) => Ok(Selector::range(s, e)),
            (None, _, _) => Err(SelectorError::Incomplete),
        }
    }

    /// The byte range the selector covers.
    ///
    /// # Errors
    /// [`SelectorError::StartNotInPrefix`], [`SelectorError::EndNotInPrefix`] or
    /// [`SelectorError::StartAfterEnd`] when the keys do not fit together.
    pub fn byte_range(&self) -> Result<ByteRange, SelectorError> {
        let under = |prefix: &[u8], key: &[u8]| key.len() > prefix.len() && key.starts_with(prefix);
        match self {
            Selector::Prefix(prefix) => Ok(ByteRange {
                start: with_byte(prefix, 0x00),
                end: with_byte(prefix, 0xff),
            }),
            Selector::PrefixStart { prefix, start } => {
                if !under(prefix, start) {
                    return Err(SelectorError::StartNotInPrefix);
                }
                Ok(ByteRange {
                    start: start.clone(),
                    end: with_byte(prefix, 0xff),
                })
            }
            Selector::PrefixEnd { prefix, end } => {
                if !under(prefix, end) {
                    return Err(SelectorError::EndNotInPrefix);
                }
                Ok(ByteRange {
                    start: with_byte(prefix, 0x00),
                    end: end.clone(),
                })
            }
            Selector::Range { start, end } => {
                if start > end {
                    return Err(SelectorError::StartAfterEnd);
                }
                Ok(ByteRange {
                    start: start.clone(),
                    end: end.clone(),
                })
            }
        }
    }

    /// The bytes every key of the selector starts with, which cursors leave out: the prefix,
    /// or the longest common byte prefix of `start` and `end`.
    pub fn common_prefix(&self) -> &[u8] {
        match self {
            Selector::Prefix(prefix)
            | Selector::PrefixStart { prefix, .. }
            | Selector::PrefixEnd { prefix, .. } => prefix,
            Selector::Range { start, end } => {
                let n = start.iter().zip(end).take_while(|(a, b)| a == b).count();
                start.get(..n).unwrap_or_default()
            }
        }
    }

    /// Deno's cursor for resuming after `boundary_key` (an encoded key this selector listed).
    ///
    /// # Errors
    /// [`SelectorError::InvalidBoundaryKey`] if the key does not start with
    /// [`Selector::common_prefix`].
    pub fn cursor_for(&self, boundary_key: &[u8]) -> Result<String, SelectorError> {
        let rest = boundary_key
            .strip_prefix(self.common_prefix())
            .ok_or(SelectorError::InvalidBoundaryKey)?;
        Ok(URL_SAFE.encode(rest))
    }

    /// The byte range left to list after the boundary key a `cursor` names, forward or in
    /// `reverse`. An empty cursor means "from the beginning", as in Deno.
    ///
    /// # Errors
    /// The selector's own errors (see [`Selector::byte_range`]), [`SelectorError::InvalidCursor`]
    /// for text that is not padded URL-safe base64, and [`SelectorError::CursorOutOfBounds`]
    /// when the cursor lies before an explicit start or after an explicit end.
    pub fn resume(&self, cursor: &str, reverse: bool) -> Result<ByteRange, SelectorError> {
        let mut range = self.byte_range()?;
        if cursor.is_empty() {
            return Ok(range);
        }
        let suffix = URL_SAFE
            .decode(cursor)
            .map_err(|_| SelectorError::InvalidCursor)?;
        let mut boundary = self.common_prefix().to_vec();
        boundary.extend_from_slice(&suffix);
        if reverse {
            range.end = boundary;
        } else {
            boundary.push(0x00);
            range.start = boundary;
        }
        let (explicit_start, explicit_end) = match self {
            Selector::Prefix(_) => (None, None),
            Selector::PrefixStart { start, .. } => (Some(start), None),
            Selector::PrefixEnd { end, .. } => (None, Some(end)),
            Selector::Range { start, end } => (Some(start), Some(end)),
        };
        if explicit_start.is_some_and(|s| range.start < *s)
            || explicit_end.is_some_and(|e| range.end > *e)
        {
            return Err(SelectorError::CursorOutOfBounds);
        }
        Ok(range)
    }
}

fn with_byte(prefix: &[u8], byte: u8) -> Vec<u8> {
    let mut v = Vec::with_capacity(prefix.len() + 1);
    v.extend_from_slice(prefix);
    v.push(byte);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key;

    #[test]
    fn prefix_of_empty_key_covers_every_key() {
        let r = Selector::prefix(&key![]).byte_range().unwrap();
        assert_eq!(
            r,
            ByteRange {
                start: vec![0],
                end: vec![0xff]
            }
        );
    }

    #[test]
    fn selector_validation_matches_deno_messages() {
        let a = key!["a"];
        let err = Selector::prefix_start(&a, &a).byte_range().unwrap_err();
        assert_eq!(
            err.to_string(),
            "Start key is not in the keyspace defined by prefix"
        );
        let err = Selector::prefix_end(&a, &key!["b"])
            .byte_range()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "End key is not in the keyspace defined by prefix"
        );
        let err = Selector::range(&key!["b"], &a).byte_range().unwrap_err();
        assert_eq!(err, SelectorError::StartAfterEnd);
        assert!(Selector::range(&a, &a).byte_range().unwrap().is_empty());
        assert_eq!(
            Selector::from_options(Some(&a), Some(&a), Some(&a)),
            Err(SelectorError::PrefixWithStartAndEnd)
        );
        assert_eq!(
            Selector::from_options(None, Some(&a), None),
            Err(SelectorError::Incomplete)
        );
    }

    #[test]
    fn cursors_match_deno_vectors() {
        let sel = Selector::prefix(&key!["a"]);
        assert_eq!(sel.cursor_for(&key!["a", "b"].encode()).unwrap(), "AmIA");
        assert_eq!(
            sel.cursor_for(&key!["a", "hello"].encode()).unwrap(),
            "AmhlbGxvAA=="
        );
        assert_eq!(sel.cursor_for(&key!["a", 1].encode()).unwrap(), "FQE=");
        let range = Selector::range(&key!["a", "b"], &key!["a", "z"]);
        assert_eq!(range.common_prefix(), b"\x02a\x00\x02");
        assert_eq!(range.cursor_for(&key!["a", "c"].encode()).unwrap(), "YwA=");
        assert_eq!(
            sel.cursor_for(&key!["b"].encode()),
            Err(SelectorError::InvalidBoundaryKey)
        );
    }

    #[test]
    fn unpadded_or_garbage_cursors_are_invalid() {
        let sel = Selector::prefix(&key![]);
        assert_eq!(sel.resume("AA", false), Err(SelectorError::InvalidCursor));
        assert_eq!(sel.resume("!!!", false), Err(SelectorError::InvalidCursor));
        assert_eq!(sel.resume("", false), sel.byte_range());
    }

    #[test]
    fn cursor_before_explicit_start_is_out_of_bounds() {
        let sel = Selector::range(&key!["a", 5], &key!["a", 9]);
        let early = Selector::prefix(&key!["a"])
            .cursor_for(&key!["a", 1].encode())
            .unwrap();
        // The range's common prefix is shorter than ["a"], so re-encode against it.
        let early_here = sel.cursor_for(&key!["a", 1].encode()).unwrap();
        assert_ne!(early, early_here);
        assert_eq!(
            sel.resume(&early_here, false),
            Err(SelectorError::CursorOutOfBounds)
        );
        let late = sel.cursor_for(&key!["a", 10].encode()).unwrap();
        assert_eq!(
            sel.resume(&late, true),
            Err(SelectorError::CursorOutOfBounds)
        );
    }
}
