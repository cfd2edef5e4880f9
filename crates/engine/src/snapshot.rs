//! Reading at one version: [`Snapshot`] (a registered read-only view), the [`Registry`] of
//! open snapshots, and [`Retention`], what readers may still need of a key's versions, which
//! is what writers and reclamation keep.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use smallvec::SmallVec;
use tuplekv_codec::{ByteRange, Key, Selector};

use crate::error::Error;
use crate::inner::Inner;
use crate::limits::GET_MANY_KEYS_MAX;
use crate::limits::check_read_key;
use crate::list::{ListIter, ListOptions};
use crate::store::{Entry, EntryRef, ReadView};
use crate::value::Versionstamp;
use crate::version::{VersionRef, Versions};

/// Open snapshots, by the version they read at.
///
/// A sorted vector of `(version, open snapshots)`: nearly every registration is at the newest
/// version (the end), and a vector that keeps its buffer registers and unregisters the
/// snapshot of each list without allocating, where a `BTreeMap` allocated and freed a node
/// whenever it went from empty to one snapshot and back.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    counts: Vec<(u64, usize)>,
}

impl Registry {
    /// Counts one more snapshot at `version`.
    pub(crate) fn add(&mut self, version: u64) {
        if let Some((last, count)) = self.counts.last_mut()
            && *last == version
        {
            *count += 1;
            return;
        }
        match self.counts.binary_search_by_key(&version, |&(v, _)| v) {
            Ok(i) => {
                if let Some((_, count)) = self.counts.get_mut(i) {
                    *count += 1;
                }
            }
            Err(i) => self.counts.insert(i, (version, 1)),
        }
    }

    /// Counts one snapshot fewer at `version`; `true` if that was its last.
    pub(crate) fn remove(&mut self, version: u64) -> bool {
        let Ok(i) = self.counts.binary_search_by_key(&version, |&(v, _)| v) else {
            return false;
        };
        let Some((_, count)) = self.counts.get_mut(i) else {
            return false;
        };
        *count -= 1;
        if *count > 0 {
            return false;
        }
        self.counts.remove(i);
        true
    }

    /// The versions with open snapshots, oldest first.
    pub(crate) fn versions(&self) -> impl Iterator<Item = u64> + '_ {
        self.counts.iter().map(|&(v, _)| v)
    }
}

/// What readers may still need, taken once per commit or reclaim batch: the last published
/// version (readers of the latest state, unregistered) and every open snapshot's version.
pub(crate) struct Retention {
    pub(crate) visible: u64,
    pub(crate) points: SmallVec<[u64; 4]>,
}

impl Retention {
    /// The versions of a newest-first `chain` some reader needs: every version above
    /// `visible` (a durable batch not yet published), the newest at or below `visible`, and
    /// for each snapshot the newest at or below its version. Versions in between are
    /// invisible to everyone, however long ago the oldest snapshot was taken.
    pub(crate) fn keep<'a>(
        &'a self,
        chain: Versions<'a>,
    ) -> impl Iterator<Item = VersionRef<'a>> + 'a {
        let mut newer: Option<u64> = None;
        let mut seen_visible = false;
        chain.iter().filter(move |v| {
            // Above `visible`, or the first at or below it.
            let latest = v.version > self.visible || !seen_visible;
            let needed = latest
                || self
                    .points
                    .iter()
                    .any(|&p| v.version <= p && newer.is_none_or(|n| p < n));
            seen_visible |= v.version <= self.visible;
            newer = Some(v.version);
            needed
        })
    }

    /// Asserts (in debug builds and tests) that a pruned chain reads as the `before` chain
    /// did for every reader `self` names: each version above `visible` is kept, and at
    /// `visible` and at each snapshot the newest version at or below it is the same one, or
    /// was dead (a tombstone, or expired by `now`) and is gone.
    pub(crate) fn debug_assert_kept(
        &self,
        before: Versions<'_>,
        after: &[VersionRef<'_>],
        now: u64,
    ) {
        if !cfg!(debug_assertions) {
            return;
        }
        for v in before.iter().filter(|v| v.version > self.visible) {
            debug_assert!(
                after.iter().any(|a| a.version == v.version),
                "pruning dropped version {} above the visible {}",
                v.version,
                self.visible
            );
        }
        for &at in self.points.iter().chain([&self.visible]) {
            let was = before.iter().find(|v| v.version <= at);
            let is = after.iter().copied().find(|v| v.version <= at);
            let same = match (was, is) {
                (Some(w), Some(i)) => w.version == i.version,
                (Some(w), None) => w.value.is_none() || w.expires_at.is_some_and(|d| d <= now),
                (None, None) => true,
                (None, Some(_)) => false,
            };
            debug_assert!(
                same,
                "pruning changed what a reader at {at} sees: {:?} became {:?}",
                was.map(|v| v.version),
                is.map(|v| v.version)
            );
        }
    }
}

impl Inner {
    /// The oldest version some reader may still need: the oldest open snapshot, or `last`.
    pub(crate) fn retention(&self) -> Retention {
        // Read `visible` under the registry lock: a snapshot registered later reads at a
        // version at least this one, whose newest version is kept (or is above `visible`).
        let registry = self.snapshots.lock();
        Retention {
            visible: self.visible.load(Ordering::Acquire),
            points: registry.versions().collect(),
        }
    }
}

/// A read-only view of a [`Database`](crate::Database) pinned at one version; see
/// [`Database::snapshot`](crate::Database::snapshot).
///
/// ```
/// use tuplekv_engine::{Database, ReadView, key};
///
/// let db = Database::in_memory();
/// db.set(&key!["a"], b"1")?;
/// let snap = db.snapshot();
/// db.set(&key!["a"], b"2")?;
/// assert_eq!(snap.get(&key!["a"])?.map(|e| e.value), Some(b"1".into()));
/// assert_eq!(db.get(&key!["a"])?.map(|e| e.value), Some(b"2".into()));
/// # Ok::<(), tuplekv_engine::Error>(())
/// ```
pub struct Snapshot {
    inner: Arc<Inner>,
    version: u64,
}

impl Snapshot {
    pub(crate) fn register(inner: &Arc<Inner>) -> Snapshot {
        let mut registry = inner.snapshots.lock();
        // Read the version under the registry lock, so no writer can compute a watermark
        // above it between the read and the registration.
        let version = inner.visible.load(Ordering::Acquire);
        registry.add(version);
        Snapshot {
            inner: Arc::clone(inner),
            version,
        }
    }

    /// The versionstamp this snapshot reads at.
    pub fn versionstamp(&self) -> Versionstamp {
        Versionstamp::from_version(self.version)
    }

    /// Lists from this snapshot.
    ///
    /// # Errors
    /// An invalid selector, cursor, limit or batch size.
    pub fn list(
        &self,
        selector: &Selector,
        options: ListOptions,
    ) -> Result<ListIter<Snapshot>, Error> {
        ListIter::new(self.clone(), selector.clone(), options)
    }

    /// Reads up to ten keys.
    ///
    /// # Errors
    /// [`Error::TooManyRanges`] for more than ten keys.
    pub fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Entry>>, Error> {
        if keys.len() > GET_MANY_KEYS_MAX {
            return Err(Error::TooManyRanges { count: keys.len() });
        }
        keys.iter().map(|k| ReadView::get(self, k)).collect()
    }
}

impl Clone for Snapshot {
    fn clone(&self) -> Self {
        self.inner.snapshots.lock().add(self.version);
        Snapshot {
            inner: Arc::clone(&self.inner),
            version: self.version,
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let mut registry = self.inner.snapshots.lock();
        if registry.remove(self.version) {
            // Versions kept for this snapshot may now be reclaimable. Retry the parked keys
            // only when the oldest snapshot closes: that is what pins nearly all of them, and
            // short snapshots closing above a long one would otherwise make every pass
            // revisit them.
            let oldest = registry.versions().next().is_none_or(|v| v > self.version);
            drop(registry);
            if oldest {
                self.inner.reclaimer.wake_if_leftover();
            }
        }
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshot({})", self.versionstamp())
    }
}

impl ReadView for Snapshot {
    fn get_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        check_read_key(key)?;
        Ok(self.inner.read_at(key, self.version))
    }

    fn scan(&self, range: &ByteRange, reverse: bool, limit: usize) -> Result<Vec<Entry>, Error> {
        check_read_key(&range.start)?;
        check_read_key(&range.end)?;
        Ok(self.inner.scan_at(range, reverse, limit, self.version))
    }

    /// Entries straight from the map, borrowed under an epoch pin renewed every
    /// [`SCAN_PIN_ENTRIES`](crate::limits::SCAN_PIN_ENTRIES) entries (so a long scan does not hold back the freeing of
    /// replaced lists); the snapshot's registration keeps every version it reads.
    fn scan_with(
        &self,
        range: &ByteRange,
        reverse: bool,
        limit: usize,
        visit: &mut dyn FnMut(EntryRef<'_>) -> ControlFlow<()>,
    ) -> Result<usize, Error> {
        check_read_key(&range.start)?;
        check_read_key(&range.end)?;
        Ok(self
            .inner
            .visit_at(range, reverse, limit, self.version, visit))
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use smallvec::smallvec;

    use super::*;
    use crate::value::Value;
    use crate::version::{Chain, Version};

    fn version(version: u64, value: Option<u64>) -> Version {
        Version {
            version,
            value: value.map(Value::U64),
            expires_at: None,
        }
    }

    /// Versions 9 (above visible), 7, 5 and a tombstone at 3; visible 8, a snapshot at 6.
    fn chain() -> Chain {
        let owned = [
            version(9, Some(9)),
            version(7, Some(7)),
            version(5, Some(5)),
            version(3, None),
        ];
        Chain::build(owned.iter().map(Version::as_version_ref), None)
    }

    fn retention() -> Retention {
        Retention {
            visible: 8,
            points: smallvec![6],
        }
    }

    #[test]
    fn keeping_what_readers_need_passes_the_pruning_assertion() {
        let chain = chain();
        let r = retention();
        let kept: Vec<VersionRef<'_>> = r.keep(chain.versions()).collect();
        assert_eq!(
            kept.iter().map(|v| v.version).collect::<Vec<_>>(),
            [9, 7, 5]
        );
        r.debug_assert_kept(chain.versions(), &kept, 0);
    }

    #[test]
    #[should_panic(expected = "pruning changed what a reader at 6 sees")]
    fn dropping_a_snapshot_s_version_fails_the_pruning_assertion() {
        let chain = chain();
        let kept: Vec<VersionRef<'_>> = chain.versions().iter().take(2).collect();
        retention().debug_assert_kept(chain.versions(), &kept, 0);
    }

    #[test]
    #[should_panic(expected = "pruning dropped version 9 above the visible 8")]
    fn dropping_an_unpublished_version_fails_the_pruning_assertion() {
        let chain = chain();
        let kept: Vec<VersionRef<'_>> = chain.versions().iter().skip(1).collect();
        retention().debug_assert_kept(chain.versions(), &kept, 0);
    }
}
