//! A second [`KeyMap`], over crossbeam's `SkipMap`, compiled in place of the engine's own
//! skiplist (`keymap.rs`) with the test-only feature `reference-keymap`.
//!
//! It has the crate-internal interface of `keymap.rs` (the same names, signatures and
//! guarantees, listed there) and no `unsafe` of its own, so the engine's model test
//! (`tests/model.rs`) can run on both maps: a case that fails on the skiplist and passes here
//! points at the skiplist, one that fails on both at the rest of the engine.
//!
//! What the engine relies on holds for `SkipMap` too: an [`Entry`] is counted, so a [`Slot`]
//! stays readable after its key is removed; a removed entry's value, the [`ChainCell`], is
//! dropped only in the node's epoch-deferred destructor, which keeps version lists loaded
//! under a pin valid until that pin ends (`chain_cell.rs`'s invariant). Reads here count
//! references where the skiplist's do not: this map is for checking, not for speed.

use std::ops::Bound;

use crossbeam_epoch as epoch;
use crossbeam_skiplist::SkipMap;
use crossbeam_skiplist::map::Entry;
use smallvec::SmallVec;

use crate::chain_cell::ChainCell;
use crate::key_bytes::KeyBytes;
use crate::version::Versions;

/// Encoded key → version list, ordered by key bytes.
#[derive(Default)]
pub(crate) struct KeyMap {
    entries: SkipMap<KeyBytes, ChainCell>,
}

/// A counted handle on one key's entry: it stays valid (readable, possibly removed) until
/// dropped, whatever happens to the map meanwhile.
#[derive(Clone)]
pub(crate) struct Slot<'a>(Entry<'a, KeyBytes, ChainCell>);

impl Slot<'_> {
    /// The key.
    pub(crate) fn key(&self) -> &[u8] {
        self.0.key().as_slice()
    }

    /// The key's version list.
    pub(crate) fn cell(&self) -> &ChainCell {
        self.0.value()
    }

    /// Whether the entry has been removed from the map.
    pub(crate) fn is_removed(&self) -> bool {
        self.0.is_removed()
    }

    /// Removes the entry from the map; `false` if it was already removed.
    pub(crate) fn remove(&self) -> bool {
        self.0.remove()
    }
}

impl KeyMap {
    /// The number of keys (including empty slots not yet reclaimed).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// A counted handle on `key`'s entry, if present.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Slot<'_>> {
        self.entries.get(key).map(Slot)
    }

    /// A counted handle on `key`'s entry, inserting it with an empty cell first if absent.
    pub(crate) fn get_or_insert(&self, key: &[u8]) -> Slot<'_> {
        Slot(
            self.entries
                .get_or_insert_with(KeyBytes::from(key), ChainCell::empty),
        )
    }

    /// Counted handles on `keys`' entries, one per key in order, inserting each absent key
    /// with an empty cell first.
    pub(crate) fn get_or_insert_all<K: AsRef<[u8]>>(&self, keys: &[K]) -> SmallVec<[Slot<'_>; 4]> {
        keys.iter()
            .map(|key| self.get_or_insert(key.as_ref()))
            .collect()
    }

    /// Inserts `key`, replacing any entry it had.
    pub(crate) fn insert(&self, key: &[u8], value: ChainCell) {
        self.entries.insert(KeyBytes::from(key), value);
    }

    /// Calls `f` with `key` and its versions, if present, under one epoch pin.
    pub(crate) fn read<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(&[u8], Versions<'_>) -> R,
    ) -> Option<R> {
        self.with(key, |found| found.map(|(key, versions)| f(key, versions)))
    }

    /// Calls `f` with `key` and its versions (`None` if absent) under one epoch pin. The
    /// versions are loaded before `f` runs.
    pub(crate) fn with<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<(&[u8], Versions<'_>)>) -> R,
    ) -> R {
        let guard = epoch::pin();
        let entry = self.entries.get(key);
        f(entry
            .as_ref()
            .map(|e| (e.key().as_slice(), e.value().load(&guard))))
    }

    /// Visits the keys in `[start, end)` with their versions, ascending or descending, under
    /// one epoch pin, until `visit` returns `false`.
    pub(crate) fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        reverse: bool,
        mut visit: impl FnMut(&[u8], Versions<'_>) -> bool,
    ) {
        let guard = epoch::pin();
        let range = self
            .entries
            .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)));
        let entries: Box<dyn Iterator<Item = Entry<'_, KeyBytes, ChainCell>>> = if reverse {
            Box::new(range.rev())
        } else {
            Box::new(range)
        };
        for e in entries {
            if !visit(e.key().as_slice(), e.value().load(&guard)) {
                break;
            }
        }
    }

    /// Up to `n` keys after `after` (from the first key without it), in order.
    pub(crate) fn keys_after(&self, after: Option<&[u8]>, n: usize) -> Vec<KeyBytes> {
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.entries
            .range::<[u8], _>((lower, Bound::Unbounded))
            .take(n)
            .map(|e| e.key().clone())
            .collect()
    }

    /// Every entry in key order, each a counted handle, with the epoch pinned only per step.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Slot<'_>> {
        self.entries.iter().map(Slot)
    }
}
