//! A key's versions: [`Version`] (a value or tombstone at one version, with its deadline, owned),
//! [`Chain`] (a key's versions, newest first, immutable once published, in one allocation),
//! the borrowed [`Versions`] and [`VersionRef`] readers see, and how a read picks one.
//! Deadlines are wall-clock milliseconds ([`now_ms`]).
//!
//! # Layout
//! A chain whose values are all small ([`VALUE_INLINE_MAX`] bytes or less, numbers and
//! tombstones: nearly every key) is *packed*: one byte buffer holding every version with its
//! value's bytes inline. A key with a 16-byte value then costs one 33-byte allocation for its
//! versions, where a list of `Version`s cost a 72-byte one plus the value's own buffer and, once
//! read, its reference count's. A chain holding a larger value is *general*: a list of
//! [`Version`]s whose values are reference-counted buffers, so reading a 64 KiB value copies
//! nothing. Both start with a tag byte, so one thin pointer can name either (`chain_cell.rs`).
//!
//! A packed buffer, all integers little-endian:
//! - byte 0: the tag [`PACKED`]; bytes 1..5: the buffer's whole length (`u32`);
//! - then each version, newest first: its version (`u64`); a meta byte (the value's kind in
//!   the low bits, [`HAS_DEADLINE`] set if a deadline follows); the deadline (`u64`) if any;
//!   the value: nothing for a tombstone, 8 bytes for a number, else a `u32` length and the
//!   bytes.
//!
//! Buffers are built here only, from versions, so their parsing never meets bad input; it is
//! still written with checked slicing, and a malformed tail reads as the end of the list.

use std::time::{SystemTime, UNIX_EPOCH};

use smallvec::SmallVec;

use crate::key_bytes::KeyBytes;
use crate::store::Entry;
use crate::value::{Value, ValueRef, Versionstamp};

/// Values up to this many bytes are stored inside their key's packed version list, and copied
/// out on each read; larger ones are shared, reference-counted buffers that reads do not copy.
/// Copying a buffer this small costs a reader about what a reference count's two atomic
/// operations do. At 256 bytes, a 100-entry list of 100-byte values took twice as long as
/// with shared buffers (each entry's copy is an allocation and a free); at 32, small records
/// (counters, index entries, short strings) take one allocation per key.
pub(crate) const VALUE_INLINE_MAX: usize = 32;

/// The tag byte of a packed chain.
pub(crate) const PACKED: u8 = 0;
/// The tag byte of a general chain.
pub(crate) const GENERAL: u8 = 1;
/// Bytes before a packed chain's first version: the tag and the length.
const PACKED_HEADER: usize = 5;
/// In a version's meta byte: a deadline follows.
const HAS_DEADLINE: u8 = 0x80;
/// The kinds of a version's value, in the low bits of its meta byte.
const KIND_TOMBSTONE: u8 = 0;
const KIND_BYTES: u8 = 1;
const KIND_V8: u8 = 2;
const KIND_U64: u8 = 3;

/// One version of one key, owned.
#[derive(Debug, Clone)]
pub(crate) struct Version {
    pub(crate) version: u64,
    /// `None` is a tombstone (the key was deleted at this version).
    pub(crate) value: Option<Value>,
    /// Unix time in milliseconds from which the value is invisible.
    pub(crate) expires_at: Option<u64>,
}

impl Version {
    /// This version, borrowed.
    pub(crate) fn as_version_ref(&self) -> VersionRef<'_> {
        VersionRef {
            version: self.version,
            value: self.value.as_ref().map(Stored::Shared),
            expires_at: self.expires_at,
        }
    }
}

/// A stored value, borrowed: bytes inline in a packed chain, or a general chain's shared
/// buffer (which an owned copy clones rather than copies).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stored<'a> {
    /// Inline in a packed chain.
    Inline(ValueRef<'a>),
    /// A general chain's value.
    Shared(&'a Value),
}

impl<'a> Stored<'a> {
    /// The value, borrowed.
    #[inline]
    pub(crate) fn get(self) -> ValueRef<'a> {
        match self {
            Stored::Inline(v) => v,
            Stored::Shared(v) => v.as_value_ref(),
        }
    }

    /// An owned value: a copy of inline bytes, or another count on a shared buffer.
    #[inline]
    pub(crate) fn to_value(self) -> Value {
        match self {
            Stored::Inline(v) => v.to_value(),
            Stored::Shared(v) => v.clone(),
        }
    }

    /// The value's size in bytes.
    fn len(self) -> usize {
        match self.get() {
            ValueRef::Bytes(b) | ValueRef::V8(b) => b.len(),
            ValueRef::U64(_) => 8,
        }
    }
}

/// One version of one key, borrowed from a chain (or from an owned [`Version`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct VersionRef<'a> {
    pub(crate) version: u64,
    /// `None` is a tombstone.
    pub(crate) value: Option<Stored<'a>>,
    /// Unix time in milliseconds from which the value is invisible.
    pub(crate) expires_at: Option<u64>,
}

impl<'a> VersionRef<'a> {
    /// The value, unless this is a tombstone or has expired by `now` (lazily computed).
    #[inline]
    pub(crate) fn live_value(&self, now: &mut Option<u64>) -> Option<Stored<'a>> {
        let value = self.value?;
        match self.expires_at {
            Some(deadline) if deadline <= *now.get_or_insert_with(now_ms) => None,
            _ => Some(value),
        }
    }

    /// An owned copy.
    pub(crate) fn to_version(self) -> Version {
        Version {
            version: self.version,
            value: self.value.map(Stored::to_value),
            expires_at: self.expires_at,
        }
    }

    /// Whether a packed chain can hold this version.
    fn packs(&self) -> bool {
        self.value.is_none_or(|v| v.len() <= VALUE_INLINE_MAX)
    }

    /// The bytes this version takes in a packed chain.
    fn packed_len(&self) -> usize {
        let deadline = if self.expires_at.is_some() { 8 } else { 0 };
        let value = match self.value.map(Stored::get) {
            None => 0,
            Some(ValueRef::U64(_)) => 8,
            Some(ValueRef::Bytes(b) | ValueRef::V8(b)) => 4 + b.len(),
        };
        8 + 1 + deadline + value
    }

    /// Appends this version to a packed chain being built.
    fn pack_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.version.to_le_bytes());
        let (kind, bytes, number) = match self.value.map(Stored::get) {
            None => (KIND_TOMBSTONE, None, None),
            Some(ValueRef::Bytes(b)) => (KIND_BYTES, Some(b), None),
            Some(ValueRef::V8(b)) => (KIND_V8, Some(b), None),
            Some(ValueRef::U64(n)) => (KIND_U64, None, Some(n)),
        };
        let meta = kind
            | if self.expires_at.is_some() {
                HAS_DEADLINE
            } else {
                0
            };
        out.push(meta);
        if let Some(deadline) = self.expires_at {
            out.extend_from_slice(&deadline.to_le_bytes());
        }
        if let Some(n) = number {
            out.extend_from_slice(&n.to_le_bytes());
        }
        if let Some(b) = bytes {
            // At most VALUE_INLINE_MAX bytes (`packs`).
            out.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_le_bytes());
            out.extend_from_slice(b);
        }
    }
}

/// A general chain: versions whose values are shared buffers. `#[repr(C)]` so that its tag
/// is its first byte, where a packed chain keeps its own.
#[repr(C)]
pub(crate) struct General {
    tag: u8,
    pub(crate) versions: SmallVec<[Version; 1]>,
}

/// A key's versions, newest first, owned; immutable once published (see the module docs).
pub(crate) enum Chain {
    /// Every value inline: one buffer.
    Packed(Box<[u8]>),
    /// Some value too large to copy on each read.
    General(Box<General>),
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.versions().iter()).finish()
    }
}

impl Chain {
    /// A chain of `versions` (newest first): packed if every value is small, in `spare` (a
    /// buffer allocated before the commit lock) when it has exactly the room needed.
    pub(crate) fn build<'v>(
        versions: impl IntoIterator<Item = VersionRef<'v>>,
        spare: Option<Vec<u8>>,
    ) -> Chain {
        let versions: SmallVec<[VersionRef<'v>; 2]> = versions.into_iter().collect();
        if !versions.iter().all(VersionRef::packs) {
            return Chain::General(Box::new(General {
                tag: GENERAL,
                versions: versions.iter().map(|v| v.to_version()).collect(),
            }));
        }
        let len = PACKED_HEADER + versions.iter().map(VersionRef::packed_len).sum::<usize>();
        let mut out = match spare {
            Some(mut buf) if buf.capacity() == len => {
                buf.clear();
                buf
            }
            _ => Vec::with_capacity(len),
        };
        out.push(PACKED);
        out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
        for v in &versions {
            v.pack_into(&mut out);
        }
        debug_assert_eq!(
            out.len(),
            len,
            "a packed chain is exactly as long as computed"
        );
        Chain::Packed(out.into_boxed_slice())
    }

    /// A chain of `new` followed by the `older` versions (newest first), as [`Chain::build`]
    /// makes it, except that a general list takes `new`'s value as it is. A commit's value
    /// usually arrives as a `Vec` turned into `Bytes`: another share of it would first
    /// allocate the buffer's reference count (the `bytes` crate's promotion), a malloc and a
    /// compare-and-swap per large value on the commit path.
    pub(crate) fn with_newest<'v>(
        new: Version,
        older: impl IntoIterator<Item = VersionRef<'v>>,
        spare: Option<Vec<u8>>,
    ) -> Chain {
        let older: SmallVec<[VersionRef<'v>; 2]> = older.into_iter().collect();
        if new.as_version_ref().packs() && older.iter().all(VersionRef::packs) {
            let mut all: SmallVec<[VersionRef<'_>; 3]> = SmallVec::new();
            all.push(new.as_version_ref());
            for v in &older {
                all.push(*v);
            }
            return Chain::build(all, spare);
        }
        let mut versions = SmallVec::with_capacity(1 + older.len());
        versions.push(new);
        versions.extend(older.iter().map(|v| v.to_version()));
        Chain::General(Box::new(General {
            tag: GENERAL,
            versions,
        }))
    }

    /// A chain of the one version `version`.
    #[cfg(test)]
    pub(crate) fn one(version: &Version) -> Chain {
        Chain::build([version.as_version_ref()], None)
    }

    /// An empty buffer with exactly the room a packed chain of the one version `version`
    /// takes (`None` if it would not be packed): allocated before the commit lock, filled
    /// under it by [`Chain::build`].
    pub(crate) fn spare_for(version: &VersionRef<'_>) -> Option<Vec<u8>> {
        version
            .packs()
            .then(|| Vec::with_capacity(PACKED_HEADER + version.packed_len()))
    }

    /// The versions, borrowed.
    pub(crate) fn versions(&self) -> Versions<'_> {
        match self {
            Chain::Packed(buf) => Versions::Packed(buf.get(PACKED_HEADER..).unwrap_or(&[])),
            Chain::General(g) => Versions::General(&g.versions),
        }
    }

    /// The versions of a packed chain whose whole buffer is `buf`.
    #[inline]
    pub(crate) fn packed_versions(buf: &[u8]) -> Versions<'_> {
        Versions::Packed(buf.get(PACKED_HEADER..).unwrap_or(&[]))
    }

    /// The whole length of a packed chain whose first [`PACKED_HEADER`] bytes are `header`.
    #[inline]
    pub(crate) fn packed_len(header: &[u8]) -> usize {
        header
            .get(1..PACKED_HEADER)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, |b| u32::from_le_bytes(b) as usize)
    }

    /// Bytes at the start of a packed chain that say its length.
    pub(crate) const PACKED_HEADER: usize = PACKED_HEADER;
}

/// A key's versions, newest first, borrowed: what readers see.
#[derive(Clone, Copy)]
pub(crate) enum Versions<'a> {
    /// The versions of a packed chain (its buffer after the header).
    Packed(&'a [u8]),
    /// A general chain's versions.
    General(&'a [Version]),
}

impl std::fmt::Debug for Versions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> Versions<'a> {
    /// No versions: a key inserted for a write that has not landed.
    pub(crate) const EMPTY: Versions<'static> = Versions::Packed(&[]);

    /// The versions, newest first.
    #[inline]
    pub(crate) fn iter(self) -> VersionIter<'a> {
        match self {
            Versions::Packed(buf) => VersionIter::Packed(buf),
            Versions::General(vs) => VersionIter::General(vs.iter()),
        }
    }

    /// The newest version.
    #[inline]
    pub(crate) fn first(self) -> Option<VersionRef<'a>> {
        self.iter().next()
    }

    /// Whether there are none.
    #[inline]
    pub(crate) fn is_empty(self) -> bool {
        match self {
            Versions::Packed(buf) => buf.is_empty(),
            Versions::General(vs) => vs.is_empty(),
        }
    }

    /// How many there are.
    pub(crate) fn len(self) -> usize {
        match self {
            Versions::Packed(_) => self.iter().count(),
            Versions::General(vs) => vs.len(),
        }
    }
}

/// See [`Versions::iter`].
pub(crate) enum VersionIter<'a> {
    /// What is left of a packed chain.
    Packed(&'a [u8]),
    /// What is left of a general chain.
    General(std::slice::Iter<'a, Version>),
}

/// The `u64` at the start of `buf`, and the rest.
#[inline]
fn take_u64(buf: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = buf.split_first_chunk::<8>()?;
    Some((u64::from_le_bytes(*head), rest))
}

impl<'a> Iterator for VersionIter<'a> {
    type Item = VersionRef<'a>;

    #[inline]
    fn next(&mut self) -> Option<VersionRef<'a>> {
        match self {
            VersionIter::General(it) => it.next().map(Version::as_version_ref),
            VersionIter::Packed(buf) => {
                let (version, rest) = take_u64(buf)?;
                let (&meta, mut rest) = rest.split_first()?;
                let mut expires_at = None;
                if meta & HAS_DEADLINE != 0 {
                    let (deadline, after) = take_u64(rest)?;
                    expires_at = Some(deadline);
                    rest = after;
                }
                let value = match meta & !HAS_DEADLINE {
                    KIND_TOMBSTONE => None,
                    KIND_U64 => {
                        let (n, after) = take_u64(rest)?;
                        rest = after;
                        Some(ValueRef::U64(n))
                    }
                    kind => {
                        let (len, after) = rest.split_first_chunk::<4>()?;
                        let len = u32::from_le_bytes(*len) as usize;
                        let (bytes, after) = after.split_at_checked(len)?;
                        rest = after;
                        Some(if kind == KIND_V8 {
                            ValueRef::V8(bytes)
                        } else {
                            ValueRef::Bytes(bytes)
                        })
                    }
                };
                *buf = rest;
                Some(VersionRef {
                    version,
                    value: value.map(Stored::Inline),
                    expires_at,
                })
            }
        }
    }
}

/// The newest of `versions` (newest first) at or below `at`.
#[inline]
pub(crate) fn version_at(versions: Versions<'_>, at: u64) -> Option<VersionRef<'_>> {
    versions.iter().find(|v| v.version <= at)
}

/// The entry `key` shows at version `at`, if live: its newest version at or below `at`.
pub(crate) fn entry_at(
    key: &[u8],
    versions: Versions<'_>,
    at: u64,
    now: &mut Option<u64>,
) -> Option<Entry> {
    let version = version_at(versions, at)?;
    version.live_value(now)?;
    entry_of(key, version)
}

/// The entry of `key`'s `version` (`None` for a tombstone; expiry is the caller's to check).
#[inline]
pub(crate) fn entry_of(key: &[u8], version: VersionRef<'_>) -> Option<Entry> {
    Some(Entry {
        key: KeyBytes::from(key),
        value: version.value?.to_value(),
        versionstamp: Versionstamp::from_version(version.version),
        expires_at: version.expires_at,
    })
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn v(version: u64, value: Option<Value>, expires_at: Option<u64>) -> Version {
        Version {
            version,
            value,
            expires_at,
        }
    }

    fn round_trip(versions: &[Version]) -> Vec<(u64, Option<Value>, Option<u64>)> {
        let chain = Chain::build(versions.iter().map(Version::as_version_ref), None);
        chain
            .versions()
            .iter()
            .map(|r| (r.version, r.value.map(Stored::to_value), r.expires_at))
            .collect()
    }

    fn owned(versions: &[Version]) -> Vec<(u64, Option<Value>, Option<u64>)> {
        versions
            .iter()
            .map(|v| (v.version, v.value.clone(), v.expires_at))
            .collect()
    }

    #[test]
    fn a_chain_reads_back_every_kind_of_version_it_was_built_from() {
        let versions = [
            v(9, Some(Value::from(&b"abc"[..])), Some(1234)),
            v(8, None, None),
            v(7, Some(Value::U64(u64::MAX)), None),
            v(6, Some(Value::V8(Bytes::from_static(b"\xff\x0f"))), None),
            v(5, Some(Value::from(Vec::new())), Some(0)),
        ];
        assert_eq!(round_trip(&versions), owned(&versions));
        let chain = Chain::build(versions.iter().map(Version::as_version_ref), None);
        assert!(matches!(chain, Chain::Packed(_)));
        assert_eq!(chain.versions().len(), 5);
        assert!(Chain::build([], None).versions().is_empty());
    }

    #[test]
    fn values_up_to_the_inline_limit_are_packed_and_one_byte_more_is_shared() {
        let at = v(1, Some(Value::from(vec![1; VALUE_INLINE_MAX])), None);
        let past = v(2, Some(Value::from(vec![2; VALUE_INLINE_MAX + 1])), None);
        let one = Chain::one(&at);
        assert!(matches!(one, Chain::Packed(_)));
        assert!(
            matches!(
                one.versions().first().and_then(|v| v.value),
                Some(Stored::Inline(_))
            ),
            "copied on read"
        );
        let both = [past.clone(), at.clone()];
        let chain = Chain::build(both.iter().map(Version::as_version_ref), None);
        assert!(
            matches!(chain, Chain::General(_)),
            "one large value makes the chain general"
        );
        assert_eq!(round_trip(&both), owned(&both));
        // A large value is shared, not copied: the same buffer.
        let Some(Stored::Shared(Value::Bytes(b))) = chain.versions().first().and_then(|v| v.value)
        else {
            panic!("shared")
        };
        let Some(Value::Bytes(original)) = &past.value else {
            panic!("bytes")
        };
        assert_eq!(b.as_ptr(), original.as_ptr());
    }

    #[test]
    fn a_spare_buffer_is_used_when_it_has_exactly_the_room_needed() {
        let version = v(3, Some(Value::from(&b"sixteen bytes!!!"[..])), None);
        let spare = Chain::spare_for(&version.as_version_ref()).expect("packed");
        let room = spare.capacity();
        let ptr = spare.as_ptr();
        let Chain::Packed(buf) = Chain::build([version.as_version_ref()], Some(spare)) else {
            panic!("packed")
        };
        assert_eq!(
            (buf.len(), buf.as_ptr()),
            (room, ptr),
            "built in the spare buffer"
        );
        assert_eq!(Chain::packed_len(&buf), buf.len());
        let large = v(3, Some(Value::from(vec![0; VALUE_INLINE_MAX + 1])), None);
        assert!(Chain::spare_for(&large.as_version_ref()).is_none());
    }

    #[test]
    fn version_at_picks_the_newest_at_or_below() {
        let versions = [
            v(9, Some(Value::U64(9)), None),
            v(5, Some(Value::U64(5)), None),
        ];
        let chain = Chain::build(versions.iter().map(Version::as_version_ref), None);
        let at = |n| version_at(chain.versions(), n).map(|v| v.version);
        assert_eq!(
            (at(10), at(9), at(8), at(5), at(4)),
            (Some(9), Some(9), Some(5), Some(5), None)
        );
    }
}
