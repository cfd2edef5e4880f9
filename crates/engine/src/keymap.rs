//! [`KeyMap`]: the ordered map from encoded key to version list, with guard-scoped reads.
//!
//! The map is crossbeam's lock-free skiplist. Its convenience wrapper (`SkipMap`) hands out
//! reference-counted entries and pins the epoch at every step, so a scan of `n` keys costs
//! about `3n` atomic read-modify-writes on the nodes it passes (count up, count down, pin),
//! and two readers of the same keys fight over those cache lines. Here reads pin the epoch
//! once and borrow nodes, and the version lists they point to ([`ChainCell`]), under that pin
//! ([`KeyMap::read`], [`KeyMap::scan`]): a reader writes no shared memory. Only writers,
//! which keep a key's place across the commit lock, take a counted handle ([`Slot`]).

use std::ops::Bound;

use crossbeam_epoch as epoch;
use crossbeam_skiplist::base::{RefEntry, RefIter, SkipList};

use crate::chain_cell::ChainCell;
use crate::db::Version;
use crate::key_bytes::{KeyBytes, KeySlice, compare};

type List = SkipList<KeyBytes, ChainCell>;

/// Encoded key → version list, ordered by key bytes.
pub(crate) struct KeyMap {
    list: List,
}

/// A counted handle on one key's node: it stays valid (readable, possibly marked removed)
/// until dropped, whatever happens to the map meanwhile.
pub(crate) struct Slot<'a> {
    /// Always `Some` until dropped (`Drop` takes it out to release it).
    entry: Option<RefEntry<'a, KeyBytes, ChainCell>>,
}

impl<'a> Slot<'a> {
    fn new(entry: RefEntry<'a, KeyBytes, ChainCell>) -> Self {
        Slot { entry: Some(entry) }
    }

    fn entry(&self) -> &RefEntry<'a, KeyBytes, ChainCell> {
        match &self.entry {
            Some(entry) => entry,
            None => unreachable!("a slot's entry is only taken when it is dropped"),
        }
    }

    /// The key.
    pub(crate) fn key(&self) -> &KeyBytes {
        self.entry().key()
    }

    /// The key's version list.
    pub(crate) fn cell(&self) -> &ChainCell {
        self.entry().value()
    }

    /// Whether the node has been removed from the map.
    pub(crate) fn is_removed(&self) -> bool {
        self.entry().is_removed()
    }

    /// Removes the node from the map; `false` if it was already removed.
    pub(crate) fn remove(&self) -> bool {
        self.entry().remove(&epoch::pin())
    }
}

impl Clone for Slot<'_> {
    fn clone(&self) -> Self {
        Slot::new(self.entry().clone())
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            entry.release_with_pin(epoch::pin);
        }
    }
}

impl Default for KeyMap {
    fn default() -> Self {
        KeyMap {
            list: SkipList::new(epoch::default_collector().clone()),
        }
    }
}

impl KeyMap {
    /// The number of keys (including empty slots not yet reclaimed).
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// A counted handle on `key`'s node, if present.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Slot<'_>> {
        let guard = epoch::pin();
        loop {
            let entry = self.list.get(KeySlice::new(key), &guard)?;
            // `pin` fails only for a node whose count already reached zero (being unlinked):
            // search again.
            if let Some(entry) = entry.pin() {
                return Some(Slot::new(entry));
            }
        }
    }

    /// A counted handle on `key`'s node, inserting `value()` first if the key is absent.
    pub(crate) fn get_or_insert_with(
        &self,
        key: KeyBytes,
        value: impl FnOnce() -> ChainCell,
    ) -> Slot<'_> {
        let guard = epoch::pin();
        Slot::new(self.list.get_or_insert_with(key, value, &guard))
    }

    /// Inserts `key`, replacing any node it had.
    pub(crate) fn insert(&self, key: KeyBytes, value: ChainCell) {
        let guard = epoch::pin();
        self.list.insert(key, value, &guard).release(&guard);
    }

    /// Calls `f` with `key` and its versions, if present, under one epoch pin and without
    /// counting.
    pub(crate) fn read<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(&KeyBytes, &[Version]) -> R,
    ) -> Option<R> {
        self.with(key, |found| found.map(|(key, versions)| f(key, versions)))
    }

    /// Calls `f` with `key` and its versions (`None` if absent) under one epoch pin, without
    /// counting. The versions are loaded before `f` runs.
    pub(crate) fn with<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<(&KeyBytes, &[Version])>) -> R,
    ) -> R {
        let guard = epoch::pin();
        let entry = self.list.get(KeySlice::new(key), &guard);
        f(entry.as_ref().map(|e| (e.key(), e.value().load(&guard))))
    }

    /// Visits the keys in `[start, end)` with their versions, ascending or descending, under
    /// one epoch pin and without counting, until `visit` returns `false`.
    pub(crate) fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        reverse: bool,
        mut visit: impl FnMut(&KeyBytes, &[Version]) -> bool,
    ) {
        let guard = epoch::pin();
        if reverse {
            let bounds = (
                Bound::Included(KeySlice::new(start)),
                Bound::Excluded(KeySlice::new(end)),
            );
            let mut range = self.list.range::<KeySlice, _>(bounds, &guard);
            while let Some(entry) = range.next_back() {
                if !visit(entry.key(), entry.value().load(&guard)) {
                    break;
                }
            }
            return;
        }
        // Forward, the walk follows the bottom-level links itself rather than through
        // crossbeam's `Range`, and checks each key against the end bound once, inline: about
        // 47 instructions fewer per entry when measured (while `Range` still compared through
        // `memcmp`; it now searches by `KeySlice` too). Removed nodes are skipped as `Range`
        // skips them: `next` steps over marked successors.
        let mut next = self
            .list
            .lower_bound(Bound::Included(KeySlice::new(start)), &guard);
        while let Some(entry) = next {
            if !bytes_below(entry.key().as_slice(), end)
                || !visit(entry.key(), entry.value().load(&guard))
            {
                break;
            }
            next = entry.next();
        }
    }

    /// Up to `n` keys after `after` (from the first key without it), in order.
    pub(crate) fn keys_after(&self, after: Option<&[u8]>, n: usize) -> Vec<KeyBytes> {
        let guard = epoch::pin();
        let lower = after.map_or(Bound::Unbounded, |a| Bound::Excluded(KeySlice::new(a)));
        self.list
            .range::<KeySlice, _>((lower, Bound::Unbounded), &guard)
            .take(n)
            .map(|entry| entry.key().clone())
            .collect()
    }

    /// Every node in key order, each a counted handle, with the epoch pinned only per step (so
    /// a long walk, such as a checkpoint, does not hold back memory reclamation).
    pub(crate) fn iter(&self) -> Iter<'_> {
        Iter {
            inner: self.list.ref_iter(),
        }
    }
}

/// `a < b` in byte order (inline, see [`compare`]).
#[inline]
fn bytes_below(a: &[u8], b: &[u8]) -> bool {
    compare(a, b).is_lt()
}

/// See [`KeyMap::iter`].
pub(crate) struct Iter<'a> {
    inner: RefIter<'a, KeyBytes, ChainCell>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Slot<'a>;

    fn next(&mut self) -> Option<Slot<'a>> {
        let guard = epoch::pin();
        self.inner.next(&guard).map(Slot::new)
    }
}

impl Drop for Iter<'_> {
    fn drop(&mut self) {
        self.inner.drop_impl(&epoch::pin());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain_cell::Retired;
    use crate::db::Chain;

    fn map_of(keys: &[&[u8]]) -> KeyMap {
        let map = KeyMap::default();
        for key in keys {
            map.insert(KeyBytes::from(*key), ChainCell::empty());
        }
        map
    }

    fn scanned(map: &KeyMap, start: &[u8], end: &[u8], reverse: bool, n: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        map.scan(start, end, reverse, |key, _| {
            out.push(key.to_vec());
            out.len() < n
        });
        out
    }

    #[test]
    fn scan_visits_the_half_open_range_in_either_direction_until_told_to_stop() {
        let map = map_of(&[b"a", b"b", b"c", b"d"]);
        assert_eq!(scanned(&map, b"b", b"d", false, 10), [b"b", b"c"]);
        assert_eq!(scanned(&map, b"b", b"d", true, 10), [b"c", b"b"]);
        assert_eq!(scanned(&map, b"a", b"z", false, 2), [b"a", b"b"]);
        assert_eq!(scanned(&map, b"a", b"z", true, 1), [b"d"]);
        assert!(scanned(&map, b"x", b"z", false, 10).is_empty());
    }

    #[test]
    fn a_forward_scan_stops_at_the_end_bound_and_never_past_it() {
        let map = map_of(&[b"p\x01a", b"p\x01b", b"p\x02", b"p\xff", b"q"]);
        assert_eq!(
            scanned(&map, b"p\x01", b"p\x02", false, 10),
            [b"p\x01a", b"p\x01b"]
        );
        assert_eq!(scanned(&map, b"p\x01b", b"p\xff", false, 10).len(), 2);
        assert_eq!(scanned(&map, b"p", b"p\xff\x00", false, 10).len(), 4);
        assert!(scanned(&map, b"p\x03", b"p\x04", false, 10).is_empty());
        assert!(scanned(&map, b"r", b"s", false, 10).is_empty());
    }

    #[test]
    fn a_slot_stays_readable_after_its_node_is_removed() {
        let map = map_of(&[b"a"]);
        let slot = map.get(b"a").expect("present");
        let other = slot.clone();
        assert!(slot.remove());
        assert!(!other.remove(), "already removed");
        assert!(other.is_removed());
        assert_eq!(other.key().as_slice(), b"a");
        assert!(other.cell().load(&epoch::pin()).is_empty());
        assert!(map.get(b"a").is_none());
        assert!(map.read(b"a", |_, _| ()).is_none());
        assert_eq!(map.len(), 0);
    }

    #[test]
    fn get_or_insert_returns_the_existing_node() {
        let map = KeyMap::default();
        let retired = Retired::default();
        let first = map.get_or_insert_with(KeyBytes::from(&b"k"[..]), ChainCell::empty);
        let second = map.get_or_insert_with(KeyBytes::from(&b"k"[..]), || {
            unreachable!("the key is present")
        });
        let version = Version {
            version: 7,
            value: None,
            expires_at: None,
        };
        first.cell().store(
            Some(Box::new(Chain {
                versions: smallvec::smallvec![version],
            })),
            &retired,
        );
        let guard = epoch::pin();
        let seen: Vec<u64> = second
            .cell()
            .load(&guard)
            .iter()
            .map(|v| v.version)
            .collect();
        assert_eq!(seen, [7], "both handles name the same node");
        assert_eq!(map.len(), 1);
    }

    #[test]
    fn iter_and_keys_after_walk_every_key_in_order() {
        let map = map_of(&[b"c", b"a", b"b"]);
        let all: Vec<Vec<u8>> = map.iter().map(|slot| slot.key().to_vec()).collect();
        assert_eq!(all, [b"a", b"b", b"c"]);
        let first: Vec<Vec<u8>> = map.keys_after(None, 2).iter().map(|k| k.to_vec()).collect();
        assert_eq!(first, [b"a", b"b"]);
        let rest: Vec<Vec<u8>> = map
            .keys_after(Some(b"b"), 2)
            .iter()
            .map(|k| k.to_vec())
            .collect();
        assert_eq!(rest, [b"c"]);
    }
}
