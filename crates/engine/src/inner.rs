//! [`Inner`]: the state a [`Database`](crate::Database) shares with its snapshots, watches,
//! log thread and reclaimer (the key map, the commit lock, the visible version, the snapshot
//! registry, the log, the retired version lists and the watchers), and its reads at a
//! version, here. The rest of its behaviour lives with its concept: the commit path in
//! `pipeline.rs`, reclamation in `reclaim.rs`, snapshot registration in `snapshot.rs`.
//! `db.rs`'s module docs give the design.

use std::cell::Cell;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tuplekv_codec::ByteRange;

use crate::chain_cell::Retired;
use crate::group_commit::GroupCommit;
use crate::limits::*;
use crate::map::KeyMap;
use crate::reclaim::Reclaimer;
use crate::snapshot::Registry;
use crate::store::{Entry, EntryRef};
use crate::value::{Value, Versionstamp};
use crate::version::{Stored, VersionRef, Versions};
use crate::version::{entry_at, entry_of, now_ms, version_at};
use crate::watch::Watchers;

/// The next [`Inner::id`]; 0 is never one, so the empty cache names no database.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The `visible` this thread last loaded in a latest-state read, with the id of its
    /// database (see [`Inner::latest_of`]).
    static SEEN_VISIBLE: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

pub(crate) struct Inner {
    pub(crate) map: KeyMap,
    /// Serialises commits; holds the last committed version.
    pub(crate) commit: Mutex<u64>,
    /// The last version whose writes are all in place.
    pub(crate) visible: AtomicU64,
    /// This database's number, unique in the process (see [`Inner::latest_of`]).
    id: u64,
    pub(crate) snapshots: Mutex<Registry>,
    pub(crate) reclaimer: Reclaimer,
    /// The write-ahead log, for a durable database.
    pub(crate) log: Option<Arc<GroupCommit>>,
    /// Version lists replaced by writers, freed by writers once no reader can hold them.
    pub(crate) retired: Retired,
    /// The open watches, woken by the commits (and expiries) of their keys.
    pub(crate) watchers: Watchers,
}

impl Inner {
    /// The state of a database whose last committed (and visible) version is `last`, over
    /// `map`, with `log` for a durable one; no snapshot, watch or reclaimer thread yet.
    pub(crate) fn new(map: KeyMap, last: u64, log: Option<Arc<GroupCommit>>) -> Inner {
        Inner {
            map,
            commit: Mutex::new(last),
            visible: AtomicU64::new(last),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            snapshots: Mutex::new(Registry::default()),
            reclaimer: Reclaimer::default(),
            log,
            retired: Retired::default(),
            watchers: Watchers::default(),
        }
    }

    /// Reads `key` at version `at` (which must be registered or be the latest published).
    pub(crate) fn read_at(&self, key: &[u8], at: u64) -> Option<Entry> {
        self.map
            .read(key, |key, versions| entry_at(key, versions, at, &mut None))
            .flatten()
    }

    /// Reads the latest state of one key without registering: load the list, then the visible
    /// version. Whatever list was loaded, it holds the newest version at or below any version
    /// published after it was loaded, because writers only drop versions below the last
    /// published one.
    pub(crate) fn read_latest(&self, key: &[u8]) -> Option<Entry> {
        self.with_latest_version(key, |found| {
            found.and_then(|(key, version)| entry_of(key, version))
        })
    }

    /// [`Inner::read_latest`] borrowed: calls `f` with the live value and its stamp.
    pub(crate) fn with_latest<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<(&Value, Versionstamp)>) -> R,
    ) -> R {
        self.with_latest_version(key, |found| {
            let Some((_, v)) = found else {
                return f(None);
            };
            let stamp = Versionstamp::from_version(v.version);
            match v.value {
                None => f(None),
                Some(Stored::Shared(value)) => f(Some((value, stamp))),
                // A packed value has no `Value` to lend: a copy of a few bytes.
                Some(Stored::Inline(value)) => f(Some((&value.to_value(), stamp))),
            }
        })
    }

    /// Calls `f` with `key` and its live version in the latest state, if any, as
    /// [`Inner::read_latest`] reads it (the list first, then `visible`).
    fn with_latest_version<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<(&[u8], VersionRef<'_>)>) -> R,
    ) -> R {
        // `with` loads the list (acquire) before calling this closure, which then loads
        // `visible` (acquire) if it needs it: the order the paragraph above relies on.
        self.map.with(key, |found| {
            let live = found.and_then(|(key, versions)| {
                let version = self.latest_of(versions)?;
                version.live_value(&mut None)?;
                Some((key, version))
            });
            f(live)
        })
    }

    /// The newest of a just-loaded list's `versions` at or below `visible`, mostly without
    /// loading `visible`.
    ///
    /// `visible` is written by every commit, so a read that loads it beside a running writer
    /// misses the cache on it nearly every time. But `visible` only grows: a value this
    /// thread loaded before is a lower bound of it now. So when the list's newest version is
    /// at or below the value this thread last loaded (nearly always: a key is rarely read
    /// right after a write to it), that version is published, no newer one is installed, and
    /// it is exactly what a fresh load would pick. Only a list whose newest version is above
    /// the cached value loads `visible` (and caches it). The cache is per thread and names its
    /// database by [`Inner::id`], never by address: a database dropped and another allocated
    /// in its place must not inherit its versions.
    #[inline]
    fn latest_of<'v>(&self, versions: Versions<'v>) -> Option<VersionRef<'v>> {
        let newest = versions.first()?;
        let (id, seen) = SEEN_VISIBLE.get();
        if id == self.id && newest.version <= seen {
            return Some(newest);
        }
        let at = self.visible.load(Ordering::Acquire);
        SEEN_VISIBLE.set((self.id, at));
        version_at(versions, at)
    }

    /// Calls `visit` with up to `limit` live entries of `range` at version `at` (which must
    /// be registered), borrowed from the map, until it breaks; returns how many it visited.
    /// The epoch is pinned for at most [`SCAN_PIN_ENTRIES`] keys at a time: the scan then
    /// resumes after the last key it visited, under a new pin.
    pub(crate) fn visit_at(
        &self,
        range: &ByteRange,
        reverse: bool,
        limit: usize,
        at: u64,
        visit: &mut dyn FnMut(EntryRef<'_>) -> ControlFlow<()>,
    ) -> usize {
        let mut visited = 0;
        if range.is_empty() || limit == 0 {
            return visited;
        }
        let (mut start, mut end) = (range.start.clone(), range.end.clone());
        let mut now = None;
        loop {
            let mut seen = 0;
            let mut stopped = false;
            let mut last: Option<Vec<u8>> = None;
            self.map.scan(&start, &end, reverse, |key, versions| {
                seen += 1;
                if seen > SCAN_PIN_ENTRIES {
                    last = Some(key.to_vec());
                    return false;
                }
                if let Some(version) = version_at(versions, at)
                    && let Some(value) = version.live_value(&mut now)
                {
                    visited += 1;
                    let entry = EntryRef {
                        key,
                        value: value.get(),
                        versionstamp: Versionstamp::from_version(version.version),
                        expires_at: version.expires_at,
                    };
                    if visit(entry).is_break() || visited == limit {
                        stopped = true;
                        return false;
                    }
                }
                true
            });
            // Resume at the key the pin's budget stopped at (not yet visited).
            match last {
                Some(key) if !stopped => {
                    if reverse {
                        key.clone_into(&mut end);
                        end.push(0);
                    } else {
                        start = key;
                    }
                }
                _ => return visited,
            }
        }
    }

    pub(crate) fn scan_at(
        &self,
        range: &ByteRange,
        reverse: bool,
        limit: usize,
        at: u64,
    ) -> Vec<Entry> {
        let mut out = Vec::with_capacity(limit.min(128));
        if range.is_empty() || limit == 0 {
            return out;
        }
        let mut now = None;
        self.map
            .scan(&range.start, &range.end, reverse, |key, versions| {
                if let Versions::General(list) = versions {
                    // A list of shared values: the value is cloned straight from the owned
                    // version, with no borrowed form in between.
                    if let Some(v) = list.iter().find(|v| v.version <= at)
                        && let Some(value) = &v.value
                        && v.expires_at
                            .is_none_or(|d| d > *now.get_or_insert_with(now_ms))
                    {
                        push_entry(&mut out, key, || value.clone(), v.version, v.expires_at);
                    }
                } else if let Some(version) = version_at(versions, at)
                    && let Some(value) = version.live_value(&mut now)
                {
                    push_entry(
                        &mut out,
                        key,
                        || value.to_value(),
                        version.version,
                        version.expires_at,
                    );
                }
                out.len() < limit
            });
        out
    }
}

/// Appends a read's entry to `out`, filled in where it lives. Built whole and pushed, the
/// entry is assembled on the stack and copied, and its key's bytes, stored in pieces and
/// loaded back at once, stall on store forwarding (see `KeyBytes::assign`): that was a
/// quarter of building a list's entries. The value is made once its place exists (`value`):
/// made before and moved in, it costs a dozen more instructions an entry.
#[inline]
fn push_entry(
    out: &mut Vec<Entry>,
    key: &[u8],
    value: impl FnOnce() -> Value,
    version: u64,
    expires_at: Option<u64>,
) {
    out.push(Entry::EMPTY);
    if let Some(e) = out.last_mut() {
        e.key.assign(key);
        e.value = value();
        e.versionstamp = Versionstamp::from_version(version);
        e.expires_at = expires_at;
    }
}
