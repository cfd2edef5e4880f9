//! [`Database`]: the in-memory MVCC store.
//!
//! # Design
//! - Keys live in an ordered map ([`KeyMap`], our own skiplist: lock-free reads, links changed
//!   under a small writer lock) from encoded key
//!   to a *version list*: an immutable, newest-first list of `(version, value or tombstone,
//!   expiry)` behind an epoch-protected pointer ([`ChainCell`]). A writer never edits a list
//!   in place: it builds a new one and swaps it in, so a reader holding the old list keeps a
//!   consistent copy and nobody waits for anybody; the writers free replaced lists once no
//!   pinned reader can hold them ([`Retired`]).
//! - A commit first finds its keys' slots in the map without any lock (a key it writes gets
//!   an empty version list if absent, which reads as absent), so committers search the map in
//!   parallel. Then writers are serialised by one commit mutex, held only to check and swap
//!   version lists: the commit evaluates its checks, stages its mutations (all errors surface
//!   here, before anything is written), writes every new version tagged `last + 1`, and only
//!   then publishes `last + 1` in the atomic `visible` counter. Readers ignore versions above
//!   the version they read at, so a half-written commit is invisible and a commit appears
//!   entirely at once.
//! - A read picks, in each key's list, the newest version at or below its read version. A
//!   single-key read loads the list first and `visible` second, which makes it linearizable
//!   without registering (it skips the second load when the list's newest version is at or
//!   below a `visible` its thread loaded before: see `Inner::latest_of`). Multi-key reads
//!   (snapshots, lists, `get_many`) register their version, so writers keep what they need.
//! - Old versions: a key's list keeps only what some reader can still see: the newest version
//!   at or below the last published one, the newest at or below each open snapshot's
//!   version, and anything not yet published. A durable commit drops the rest as it writes;
//!   an in-memory commit right after publishing (readers of the latest state then read its
//!   versions), when it also removes the keys it deleted, so with no snapshot open a million
//!   overwrites of one key leave one version and a deleted key is gone at once; an old
//!   snapshot pins one version per key, not every version written since. Versions kept for a
//!   snapshot, expired values, and the garbage of durable commits (published later, by the
//!   log) are reclaimed by a background thread (`reclaim.rs`).

use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crossbeam_epoch as epoch;
use parking_lot::Mutex;
use smallvec::SmallVec;
use tuplekv_codec::{ByteRange, Key, Selector};

use crate::atomic::{Atomic, AtomicWrite, CommitResult, Conflict, FailedCheck, MutationKind};
use crate::chain_cell::{ChainCell, Retired};
use crate::durable::fs::{FileSystem, OsFs};
use crate::durable::{self, Durability, LogSink, OpenDir, RecoveryReport, Wal};
use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::limits::*;
use crate::list::{ListIter, ListOptions};
use crate::map::{KeyMap, Slot};
use crate::reclaim::Reclaimer;
use crate::store::{Entry, ReadView, Store};
use crate::transaction::{Transaction, TransactionOptions, run_transaction};
use crate::value::{Value, Versionstamp};

/// One version of one key.
#[derive(Debug, Clone)]
pub(crate) struct Version {
    pub(crate) version: u64,
    /// `None` is a tombstone (the key was deleted at this version).
    pub(crate) value: Option<Value>,
    /// Unix time in milliseconds from which the value is invisible.
    pub(crate) expires_at: Option<u64>,
}

impl Version {
    /// The value, unless this is a tombstone or has expired by `now` (lazily computed).
    fn live_value(&self, now: &mut Option<u64>) -> Option<&Value> {
        let value = self.value.as_ref()?;
        match self.expires_at {
            Some(deadline) if deadline <= *now.get_or_insert_with(now_ms) => None,
            _ => Some(value),
        }
    }
}

/// A key's versions, newest first. Immutable once published.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    pub(crate) versions: SmallVec<[Version; 1]>,
}

/// The newest of `versions` (newest first) at or below `at`.
pub(crate) fn version_at(versions: &[Version], at: u64) -> Option<&Version> {
    versions.iter().find(|v| v.version <= at)
}

/// A published-to-be version list of `versions`, built in `spare` (an empty list allocated
/// before the commit lock) when there is one.
fn chain_of(spare: Option<Box<Chain>>, versions: impl IntoIterator<Item = Version>) -> Box<Chain> {
    match spare {
        Some(mut chain) => {
            chain.versions.clear();
            chain.versions.extend(versions);
            chain
        }
        None => Box::new(Chain {
            versions: versions.into_iter().collect(),
        }),
    }
}

/// Gives a value its shared (reference-counted) form now, next to its version list.
///
/// A `Bytes` made from a `Vec` (what `Value::from` builds) allocates its reference count on
/// its first clone. Left to the first reader, that small allocation lands wherever the
/// reader's allocator happens to be, and every later read of the value misses the cache on
/// it; made here, right after the key's version list is allocated, it usually sits beside
/// that list, which every read touches first (the allocator decides; nothing relies on it).
fn share(value: &Value) {
    if let Value::Bytes(b) | Value::V8(b) = value {
        drop(b.clone());
    }
}

/// The entry `key` shows at version `at`, if live: its newest version at or below `at`.
fn entry_at(key: &KeyBytes, versions: &[Version], at: u64, now: &mut Option<u64>) -> Option<Entry> {
    let version = version_at(versions, at)?;
    version.live_value(now)?;
    entry_of(key, version)
}

/// The entry of `key`'s `version` (`None` for a tombstone; expiry is the caller's to check).
fn entry_of(key: &KeyBytes, version: &Version) -> Option<Entry> {
    Some(Entry {
        key: key.clone(),
        value: version.value.clone()?,
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
    fn add(&mut self, version: u64) {
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
    fn remove(&mut self, version: u64) -> bool {
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
    fn versions(&self) -> impl Iterator<Item = u64> + '_ {
        self.counts.iter().map(|&(v, _)| v)
    }
}

/// What readers may still need, taken once per commit or reclaim batch: the last published
/// version (readers of the latest state, unregistered) and every open snapshot's version.
pub(crate) struct Retention {
    visible: u64,
    points: SmallVec<[u64; 4]>,
}

impl Retention {
    /// The versions of a newest-first `chain` some reader needs: every version above
    /// `visible` (a durable batch not yet published), the newest at or below `visible`, and
    /// for each snapshot the newest at or below its version. Versions in between are
    /// invisible to everyone, however long ago the oldest snapshot was taken.
    fn keep<'a>(&'a self, chain: &'a [Version]) -> impl Iterator<Item = &'a Version> + 'a {
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
}

/// Options for a new database.
#[derive(Debug, Clone)]
pub struct Options {
    /// Whether a background thread reclaims expired values, tombstones and versions that
    /// snapshots no longer need (default: yes). Without it, memory is still reclaimed when a key
    /// is written again, and by [`Database::reclaim_now`]; the bookkeeping of what to reclaim
    /// stays bounded meanwhile (see [`Stats::reclaim_queue`]).
    pub background_reclaim: bool,
    /// How commits reach the disk, for [`Database::open`] (default [`Durability::Sync`]).
    /// Ignored in memory.
    pub durability: Durability,
    /// A checkpoint starts once the log has grown by this many bytes since the last one
    /// (default [`CHECKPOINT_AFTER_BYTES_DEFAULT`]). Smaller means faster recovery and less
    /// disk, larger means less checkpoint work.
    pub checkpoint_after_bytes: u64,
    /// The file system a durable database uses (default: the operating system's). A seam for
    /// fault-injection tests; see [`FaultyFs`](crate::durable::fs::FaultyFs).
    pub fs: Arc<dyn FileSystem>,
}

/// Default of [`Options::checkpoint_after_bytes`]: 64 MiB.
pub const CHECKPOINT_AFTER_BYTES_DEFAULT: u64 = 64 << 20;

impl Default for Options {
    fn default() -> Self {
        Options {
            background_reclaim: true,
            durability: Durability::Sync,
            checkpoint_after_bytes: CHECKPOINT_AFTER_BYTES_DEFAULT,
            fs: Arc::new(OsFs),
        }
    }
}

/// The map slots of one operation's keys, found by [`Inner::prepare`] before the commit lock
/// is taken, so two committers search the map in parallel and the lock is held only to check
/// and swap version lists. Indexed like the operation's checks and mutations; a delete's or
/// check's slot is `None` if the key was absent. Refreshed under the lock before use.
pub(crate) struct Slots<'a> {
    checks: SmallVec<[Option<Slot<'a>>; 4]>,
    mutations: SmallVec<[Option<Slot<'a>>; 4]>,
    /// Keys an in-memory commit left with a version readers no longer need once it is
    /// published (or a tombstone): pruned right after publishing, under the commit lock.
    written: SmallVec<[(KeyBytes, Slot<'a>); 2]>,
    /// Empty version lists allocated before the lock, one per key the operation may write:
    /// under the lock a commit fills them in rather than allocate (an allocation that grows
    /// the heap faults pages in, and under the lock every other committer waits for it). A
    /// list of one version needs nothing more; a longer one still allocates its versions.
    spare: SmallVec<[Box<Chain>; 4]>,
}

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
    pub(crate) wal: Option<Arc<Wal>>,
    /// Version lists replaced by writers, freed by writers once no reader can hold them.
    pub(crate) retired: Retired,
}

/// An in-memory, ordered, transactional key-value store with Deno KV's data model.
///
/// `Database` is cheap to clone (an `Arc` inside) and `Send + Sync`: share it between threads
/// by cloning. Reads never block writes and never wait for them.
///
/// ```
/// use tuplekv_engine::{Database, Value, key};
///
/// let db = Database::in_memory();
/// let vs = db.set(&key!["users", 1], b"Ada")?;
/// let entry = db.get(&key!["users", 1])?.expect("present");
/// assert_eq!(entry.value, Value::from(b"Ada"));
/// assert_eq!(entry.versionstamp, vs);
/// # Ok::<(), tuplekv_engine::Error>(())
/// ```
#[derive(Clone)]
pub struct Database {
    /// For a durable database: the directory lock and the log thread, released with the last
    /// handle. Declared before `inner` so it is dropped first: its final sync can then still
    /// rebuild the log from memory if that sync fails.
    open: Option<Arc<OpenDir>>,
    pub(crate) inner: Arc<Inner>,
    /// What recovery found, for a durable database.
    report: Option<Arc<RecoveryReport>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("keys", &self.inner.map.len())
            .field("version", &self.inner.visible.load(Ordering::Relaxed))
            .finish()
    }
}

impl Database {
    /// An empty in-memory database with default options.
    pub fn in_memory() -> Database {
        Database::with_options(Options::default())
    }

    /// An empty in-memory database.
    pub fn with_options(options: Options) -> Database {
        let inner = Arc::new(Inner {
            map: KeyMap::default(),
            commit: Mutex::new(0),
            visible: AtomicU64::new(0),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            snapshots: Mutex::new(Registry::default()),
            reclaimer: Reclaimer::default(),
            wal: None,
            retired: Retired::default(),
        });
        if options.background_reclaim {
            Reclaimer::spawn(&inner);
        }
        Database {
            inner,
            open: None,
            report: None,
        }
    }

    /// Opens the durable database in directory `dir`, creating it if needed: the in-memory
    /// engine, backed by a write-ahead log and checkpoints (see [`durable`](crate::durable)).
    /// Recovery loads the newest checkpoint and replays the log; what it found is in
    /// [`Database::recovery_report`]. Versionstamps continue above everything recovered.
    ///
    /// Only one handle may have a directory open at a time, across processes: clone the
    /// `Database` to share it. The directory is released when the last clone is dropped (or
    /// [`Database::close`]d).
    ///
    /// ```
    /// use tuplekv_engine::{Database, Options, key};
    ///
    /// let dir = std::env::temp_dir().join(format!("tuplekv-doc-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let db = Database::open(&dir, Options::default())?;
    /// let vs = db.set(&key!["users", 1], b"Ada")?;
    /// db.close()?;
    ///
    /// let db = Database::open(&dir, Options::default())?;
    /// assert_eq!(db.get(&key!["users", 1])?.map(|e| e.versionstamp), Some(vs));
    /// assert!(db.set(&key!["users", 2], b"Grace")? > vs);
    /// # db.close()?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Locked`] if the directory is open elsewhere, [`Error::Corrupt`] if a file is
    /// damaged beyond a torn tail (naming the file and offset), [`Error::Io`] for I/O errors.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Database, Error> {
        let recovered = durable::recover(dir.as_ref(), &options)?;
        let map = KeyMap::default();
        let mut expiring = Vec::new();
        for (key, version) in recovered.entries {
            if let Some(deadline) = version.expires_at {
                expiring.push((deadline, key.clone()));
            }
            map.insert(key, ChainCell::new(Box::new(durable::chain_of(version))));
        }
        let inner = Arc::new(Inner {
            map,
            commit: Mutex::new(recovered.last),
            visible: AtomicU64::new(recovered.last),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            snapshots: Mutex::new(Registry::default()),
            reclaimer: Reclaimer::default(),
            wal: Some(recovered.wal),
            retired: Retired::default(),
        });
        for (deadline, key) in expiring {
            inner.reclaimer.schedule_expiry(deadline, key);
        }
        if options.background_reclaim {
            Reclaimer::spawn(&inner);
        }
        durable::start_background(&recovered.open, &inner);
        Ok(Database {
            inner,
            open: Some(recovered.open),
            report: Some(Arc::new(recovered.report)),
        })
    }

    /// What recovery found when this durable database was opened; `None` in memory.
    pub fn recovery_report(&self) -> Option<&RecoveryReport> {
        self.report.as_deref()
    }

    /// Writes a checkpoint now (a durable database writes them in the background as its log
    /// grows) and returns the version it captured; `None` in memory. Waits for a background
    /// checkpoint that is running, then writes its own.
    ///
    /// # Errors
    /// [`Error::Io`] if the checkpoint could not be written; the log is untouched then.
    pub fn checkpoint(&self) -> Result<Option<Versionstamp>, Error> {
        match &self.inner.wal {
            Some(wal) => wal.checkpoint(&self.inner).map(Some),
            None => Ok(None),
        }
    }

    /// Syncs the log now; useful in [`Durability::Buffered`] mode before a planned stop.
    ///
    /// A sync that fails retires the log file and rebuilds the log from memory (a checkpoint
    /// and a fresh segment); when that rebuild succeeds, everything acknowledged is on stable
    /// storage and this returns `Ok`.
    ///
    /// # Errors
    /// [`Error::Io`] if the log could not be made durable: the sync failed and so did the
    /// rebuild (the error names the first failure).
    pub fn sync(&self) -> Result<(), Error> {
        match &self.inner.wal {
            Some(wal) => wal.sync_now(),
            None => Ok(()),
        }
    }

    /// Closes this handle. When it is the last one on a durable database, stops the log
    /// thread, syncs, and releases the directory, reporting a failed final sync (dropping the
    /// last handle does the same, but can only log the error).
    ///
    /// # Errors
    /// [`Error::Io`] if the final sync fails.
    pub fn close(self) -> Result<(), Error> {
        let Database { inner, open, .. } = self;
        // `inner` lives until the final sync is done: if that sync fails, the log is rebuilt
        // from memory, which needs the database.
        let closed = match open.and_then(Arc::into_inner) {
            Some(open) => open.close(),
            None => Ok(()),
        };
        drop(inner);
        closed
    }

    /// The entry at `key`, or `None` if it is absent, deleted or expired.
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForRead`] if the encoded key is over 2049 bytes.
    pub fn get(&self, key: &Key) -> Result<Option<Entry>, Error> {
        ReadView::get(self, key)
    }

    /// Reads up to ten keys from one snapshot; results are in request order.
    ///
    /// # Errors
    /// [`Error::TooManyRanges`] for more than ten keys.
    pub fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Entry>>, Error> {
        Store::get_many(self, keys)
    }

    /// Lists the entries a selector names. The iterator reads one snapshot from start to end,
    /// however many commits happen meanwhile.
    ///
    /// ```
    /// use tuplekv_engine::{Database, ListOptions, Selector, key};
    ///
    /// let db = Database::in_memory();
    /// for i in 0..5 {
    ///     db.set(&key!["users", i], b"x")?;
    /// }
    /// let opts = ListOptions { limit: Some(2), reverse: true, ..Default::default() };
    /// let keys: Vec<_> = db
    ///     .list(&Selector::prefix(&key!["users"]), opts)?
    ///     .map(|e| e.and_then(|e| e.decoded_key()))
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(keys, vec![key!["users", 4], key!["users", 3]]);
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    ///
    /// # Errors
    /// An invalid selector, cursor, limit or batch size.
    pub fn list(
        &self,
        selector: &Selector,
        options: ListOptions,
    ) -> Result<ListIter<Snapshot>, Error> {
        Store::list(self, selector, options)
    }

    /// Sets `key` to `value` in its own commit.
    ///
    /// # Errors
    /// Limits: empty key, key over 2048 bytes, value over 65536 bytes.
    pub fn set(&self, key: &Key, value: impl Into<Value>) -> Result<Versionstamp, Error> {
        committed(self.atomic().set(key, value).commit()?)
    }

    /// [`Database::set`] on an encoded key.
    ///
    /// # Errors
    /// As [`Database::set`].
    pub fn set_raw(&self, key: &[u8], value: impl Into<Value>) -> Result<Versionstamp, Error> {
        committed(self.atomic().set_raw(key, value).commit()?)
    }

    /// Deletes `key` in its own commit.
    ///
    /// # Errors
    /// Limits: empty key, key over 2048 bytes.
    pub fn delete(&self, key: &Key) -> Result<Versionstamp, Error> {
        committed(self.atomic().delete(key).commit()?)
    }

    /// Starts an atomic operation (checks + mutations, all or nothing).
    pub fn atomic(&self) -> Atomic<'_, Database> {
        Atomic::new(self)
    }

    /// A read-only view pinned at the current version: every read through it sees the same
    /// state, whatever is committed meanwhile. Old versions it needs are kept until it drops.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::register(&self.inner)
    }

    /// Runs `f` as a serializable transaction: reads go through a snapshot and are recorded,
    /// writes are buffered, and the commit fails if anything read has changed since; then `f`
    /// runs again, with backoff, up to [`TRANSACTION_ATTEMPTS_MAX`] times.
    ///
    /// ```
    /// use tuplekv_engine::{Database, Error, Value, key};
    ///
    /// let db = Database::in_memory();
    /// db.set(&key!["balance", "a"], 10u64)?;
    /// db.transaction(|tx| {
    ///     let a = tx.get(&key!["balance", "a"])?.and_then(|e| e.value.as_u64()).unwrap_or(0);
    ///     tx.set(&key!["balance", "a"], a - 3);
    ///     tx.set(&key!["balance", "b"], 3u64);
    ///     Ok::<_, Error>(())
    /// })?;
    /// assert_eq!(db.get(&key!["balance", "b"])?.map(|e| e.value), Some(Value::U64(3)));
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    ///
    /// # Errors
    /// What `f` returns, commit errors, or [`Error::TransactionConflict`].
    pub fn transaction<T, E, F>(&self, f: F) -> Result<T, E>
    where
        E: From<Error>,
        F: FnMut(&mut Transaction<'_, Database>) -> Result<T, E>,
    {
        run_transaction(self, &TransactionOptions::default(), f)
    }

    /// [`Database::transaction`] with explicit retry options.
    ///
    /// # Errors
    /// As [`Database::transaction`].
    pub fn transaction_with<T, E, F>(&self, options: &TransactionOptions, f: F) -> Result<T, E>
    where
        E: From<Error>,
        F: FnMut(&mut Transaction<'_, Database>) -> Result<T, E>,
    {
        run_transaction(self, options, f)
    }

    /// The versionstamp of the last commit.
    pub fn current_versionstamp(&self) -> Versionstamp {
        Versionstamp::from_version(self.inner.visible.load(Ordering::Acquire))
    }

    /// Reclaims now what the background thread would: versions no snapshot needs, tombstones
    /// and expired values.
    pub fn reclaim_now(&self) {
        self.inner.reclaim_all();
    }

    /// Statistics about memory use: keys in the map, versions held, and the reclamation
    /// bookkeeping.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tuplekv_engine::{Database, key};
    ///
    /// let db = Database::in_memory();
    /// for i in 0..1000u64 {
    ///     db.atomic().set_with_expiry(&key!["session"], i, Duration::from_secs(86_400)).commit()?;
    /// }
    /// let stats = db.stats();
    /// assert_eq!(stats.keys, 1);
    /// assert!(stats.expiry_queue < 100, "one pending deadline per key, not per write");
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        for entry in self.inner.map.iter() {
            stats.keys += 1;
            stats.versions += entry.cell().load(&epoch::pin()).len();
        }
        (
            stats.reclaim_queue,
            stats.reclaim_parked,
            stats.expiry_queue,
        ) = self.inner.reclaimer.queue_sizes();
        stats.retired_lists = self.inner.retired.len();
        stats
    }
}

/// Counts of what the store holds in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Keys in the map, including deleted ones not yet reclaimed and the empty slots of
    /// commits in flight or of failed commits (queued for reclamation).
    pub keys: usize,
    /// Versions held across all keys.
    pub versions: usize,
    /// Keys queued for reclamation (at most a few thousand, whatever the write rate: past
    /// that, reclamation sweeps every key instead).
    pub reclaim_queue: usize,
    /// Entries of the expiry schedule: at most one live entry per key that has a deadline,
    /// plus a bounded number of stale ones left by overwrites.
    pub expiry_queue: usize,
    /// Keys whose old versions an open snapshot still reads, set aside until a snapshot
    /// closes (bounded like `reclaim_queue`).
    pub reclaim_parked: usize,
    /// Version lists that commits replaced and that are not freed yet: each waits until every
    /// read that was running when it was replaced has finished, then a later commit or the
    /// background pass frees it. Usually a few batches of 64 while writes go on; none after
    /// [`Database::reclaim_now`] once no read is running.
    pub retired_lists: usize,
}

fn committed(result: CommitResult) -> Result<Versionstamp, Error> {
    // A write without checks cannot conflict.
    Ok(result.versionstamp().unwrap_or(Versionstamp::ZERO))
}

fn check_read_key(key: &[u8]) -> Result<(), Error> {
    if key.len() > KEY_SIZE_MAX_READ {
        return Err(Error::KeyTooLargeForRead { size: key.len() });
    }
    Ok(())
}

fn check_write_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if key.len() > KEY_SIZE_MAX_WRITE {
        return Err(Error::KeyTooLargeForWrite { size: key.len() });
    }
    Ok(())
}

/// Validates an operation against every limit, in Deno's order. Pure: nothing is read.
pub(crate) fn validate(write: &AtomicWrite) -> Result<(), Error> {
    if write.checks.len() > CHECKS_MAX {
        return Err(Error::TooManyChecks {
            count: write.checks.len(),
        });
    }
    if write.mutations.len() > MUTATIONS_MAX {
        return Err(Error::TooManyMutations {
            count: write.mutations.len(),
        });
    }
    let mut total = 0;
    let mut total_keys = 0;
    for check in &write.checks {
        check_write_key(&check.key)?;
        total += check.key.len();
    }
    for m in &write.mutations {
        check_write_key(&m.key)?;
        total += m.key.len();
        if let Some(size) = m.kind.value_size() {
            if size > VALUE_SIZE_MAX {
                return Err(Error::ValueTooLarge { size });
            }
            total += m.key.len() + size;
            total_keys += m.key.len();
        }
        if let MutationKind::Set {
            expire_in: Some(d), ..
        } = &m.kind
            && d.as_millis() > u128::from(EXPIRE_IN_MAX_MS)
        {
            return Err(Error::ExpireInTooLarge { ms: d.as_millis() });
        }
    }
    if total > TOTAL_MUTATION_SIZE_MAX {
        return Err(Error::TotalMutationSizeTooLarge { size: total });
    }
    if total_keys > TOTAL_KEY_SIZE_MAX {
        return Err(Error::TotalKeySizeTooLarge { size: total_keys });
    }
    for rc in &write.range_checks {
        check_read_key(&rc.start)?;
        // A point read of a key at the read limit covers [key, key ++ 00), one byte longer.
        let point = rc.end.len() == rc.start.len() + 1
            && rc.end.starts_with(&rc.start)
            && rc.end.ends_with(&[0]);
        if !point {
            check_read_key(&rc.end)?;
        }
    }
    Ok(())
}

/// What a mutation leaves at its key, before it is written.
type Staged = Option<(Value, Option<u64>)>;

fn apply(
    kind: MutationKind,
    current: Option<&Value>,
    now: &mut Option<u64>,
) -> Result<Staged, Error> {
    let u64_op = |op: &'static str, n: u64, f: fn(u64, u64) -> u64| match current {
        None => Ok(Some((Value::U64(n), None))),
        Some(Value::U64(old)) => Ok(Some((Value::U64(f(*old, n)), None))),
        Some(_) => Err(Error::NotU64 { op }),
    };
    match kind {
        MutationKind::Set { value, expire_in } => {
            let deadline = expire_in.map(|d| {
                // One timestamp per commit, so values set together expire together.
                let now = *now.get_or_insert_with(now_ms);
                now.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            });
            Ok(Some((value, deadline)))
        }
        MutationKind::Delete => Ok(None),
        MutationKind::Sum(n) => u64_op("sum", n, u64::wrapping_add),
        MutationKind::Min(n) => u64_op("min", n, u64::min),
        MutationKind::Max(n) => u64_op("max", n, u64::max),
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
    fn read_latest(&self, key: &[u8]) -> Option<Entry> {
        self.with_latest_version(key, |found| {
            found.and_then(|(key, version)| entry_of(key, version))
        })
    }

    /// [`Inner::read_latest`] borrowed: calls `f` with the live value and its stamp.
    fn with_latest<R>(&self, key: &[u8], f: impl FnOnce(Option<(&Value, Versionstamp)>) -> R) -> R {
        self.with_latest_version(key, |found| {
            f(found.and_then(|(_, v)| {
                let value = v.value.as_ref()?;
                Some((value, Versionstamp::from_version(v.version)))
            }))
        })
    }

    /// Calls `f` with `key` and its live version in the latest state, if any, as
    /// [`Inner::read_latest`] reads it (the list first, then `visible`).
    fn with_latest_version<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<(&KeyBytes, &Version)>) -> R,
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
    fn latest_of<'v>(&self, versions: &'v [Version]) -> Option<&'v Version> {
        let newest = versions.first()?;
        let (id, seen) = SEEN_VISIBLE.get();
        if id == self.id && newest.version <= seen {
            return Some(newest);
        }
        let at = self.visible.load(Ordering::Acquire);
        SEEN_VISIBLE.set((self.id, at));
        version_at(versions, at)
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
                if let Some(version) = version_at(versions, at)
                    && let Some(value) = version.live_value(&mut now)
                {
                    // Built in place: an `Option<Entry>` in between costs a copy of the
                    // whole entry per key.
                    out.push(Entry {
                        key: key.clone(),
                        value: value.clone(),
                        versionstamp: Versionstamp::from_version(version.version),
                        expires_at: version.expires_at,
                    });
                }
                out.len() < limit
            });
        out
    }

    /// The value a key's slot has now, for mutations that read it. Called with the commit
    /// lock held, so every version in the map is published.
    fn current(slot: Option<&Slot<'_>>, now: &mut Option<u64>) -> Option<Value> {
        let guard = epoch::pin();
        slot?.cell().load(&guard).first()?.live_value(now).cloned()
    }

    /// The stamp of the value [`Inner::current`] returns, without copying the value.
    fn current_stamp(slot: Option<&Slot<'_>>, now: &mut Option<u64>) -> Option<Versionstamp> {
        let guard = epoch::pin();
        let newest = slot?.cell().load(&guard).first()?;
        newest.live_value(now)?;
        Some(Versionstamp::from_version(newest.version))
    }

    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error> {
        validate(&write)?;
        // The map searches happen here, before the commit lock: under it, a commit only
        // compares and swaps version lists.
        let mut slots = self.prepare(&write);
        if let Some(wal) = &self.wal {
            return wal.commit(self, write, &mut slots);
        }
        let mut last = self.commit.lock();
        let result = self.apply_write(write, &mut slots, &mut last, None);
        if let Ok(r) = &result
            && r.is_committed()
        {
            self.publish(*last);
            self.prune_written(&mut slots);
        }
        drop(last);
        self.reclaimer.wake_if_pending();
        result
    }

    /// Looks up the map slots of `write`'s keys, without the commit lock. A key the
    /// operation writes (anything but a delete) gets a slot even if absent: an empty version
    /// list, which every read takes for an absent key. See [`Slots`].
    pub(crate) fn prepare(&self, write: &AtomicWrite) -> Slots<'_> {
        // Every key the operation writes, found or inserted (each searched from the head: see
        // `KeyMap::get_or_insert_all`).
        let written: SmallVec<[&KeyBytes; 4]> = write
            .mutations
            .iter()
            .filter(|m| !matches!(m.kind, MutationKind::Delete))
            .map(|m| &m.key)
            .collect();
        let mut written = self.map.get_or_insert_all(&written).into_iter();
        let mutations: SmallVec<[Option<Slot<'_>>; 4]> = write
            .mutations
            .iter()
            .map(|m| match m.kind {
                MutationKind::Delete => self.map.get(m.key.as_slice()),
                _ => written.next(),
            })
            .collect();
        let checks = write
            .checks
            .iter()
            .map(|c| {
                let written = write.mutations.iter().position(|m| m.key == c.key);
                match written.and_then(|i| mutations.get(i)).cloned().flatten() {
                    Some(slot) => Some(slot),
                    None => self.map.get(c.key.as_slice()),
                }
            })
            .collect();
        // Not sized from the key's current list: loading a hot key's list here, while another
        // committer swaps it, costs more than growing the list under the lock.
        let spare = write
            .mutations
            .iter()
            .filter(|m| !matches!(m.kind, MutationKind::Delete))
            .map(|m| {
                let chain = Box::new(Chain::default());
                if let MutationKind::Set { value, .. } = &m.kind {
                    share(value);
                }
                chain
            })
            .collect();
        Slots {
            checks,
            mutations,
            written: SmallVec::new(),
            spare,
        }
    }

    /// Makes a slot found before the commit lock current, with the lock held: a slot that was
    /// absent may exist now, and an empty slot may have been removed by reclamation (which
    /// only removes under the commit lock, so what is found here stays).
    fn refresh<'a>(&'a self, slot: &mut Option<Slot<'a>>, key: &KeyBytes, write: bool) {
        if slot.as_ref().is_none_or(Slot::is_removed) {
            *slot = if write {
                Some(self.map.get_or_insert(key))
            } else {
                self.map.get(key.as_slice())
            };
        }
    }

    /// Right after a commit is published: drops the versions it replaced that no reader can
    /// see any more (readers at the last published version now read the new one), and
    /// removes keys it deleted, unless an open snapshot still reads them. This keeps
    /// overwrites and deletes off the background thread, which then handles only what
    /// snapshots pinned and expiry. Called with the commit lock held.
    fn prune_written(&self, slots: &mut Slots<'_>) {
        if slots.written.is_empty() {
            return;
        }
        // Taken after publishing: a snapshot registered before it is in the registry, and
        // one registered after reads at the new version.
        let retention = self.retention();
        let mut now = None;
        for (key, slot) in slots.written.drain(..) {
            if self.prune_slot(&slot, &retention, &mut now) {
                self.reclaimer.mark(key);
            }
        }
    }

    /// After an operation wrote nothing: queues for removal the empty slots it inserted.
    fn release(&self, slots: &Slots<'_>) {
        for slot in slots.mutations.iter().flatten() {
            if !slot.is_removed() && slot.cell().load(&epoch::pin()).is_empty() {
                self.reclaimer.mark(slot.key().clone());
            }
        }
    }

    /// Makes every version up to `version` visible to readers. Called with the commit lock,
    /// or by the log's only flusher once every version up to `version` is applied.
    pub(crate) fn publish(&self, version: u64) {
        self.visible.store(version, Ordering::Release);
    }

    /// The last published version.
    pub(crate) fn visible_version(&self) -> u64 {
        self.visible.load(Ordering::Acquire)
    }

    /// Removes every version above `published` from `keys` (and keys left with none): undoes
    /// a durable commit batch whose log write failed. Called with the commit lock held, before
    /// anything above `published` was published.
    pub(crate) fn roll_back(&self, keys: &[KeyBytes], published: u64) {
        for key in keys {
            let Some(slot) = self.map.get(key.as_slice()) else {
                continue;
            };
            let guard = epoch::pin();
            let old = slot.cell().load(&guard);
            if old.iter().all(|v| v.version <= published) {
                continue;
            }
            let versions: SmallVec<[Version; 1]> = old
                .iter()
                .filter(|v| v.version <= published)
                .cloned()
                .collect();
            // The rolled-back write may have replaced or cancelled the restored version's
            // deadline: schedule it again, or the expired value is never reclaimed.
            match versions.first().and_then(|v| v.expires_at) {
                Some(deadline) => self.reclaimer.schedule_expiry(deadline, key.clone()),
                None => self.reclaimer.cancel_expiry(key),
            }
            if versions.is_empty() {
                slot.remove();
            } else {
                slot.cell()
                    .store(Some(Box::new(Chain { versions })), &self.retired);
            }
        }
    }

    /// Checks and applies one validated operation at version `*last + 1`, without publishing
    /// it; on success `*last` is that version. With `log`, also appends its log record and
    /// the keys it wrote. Called with the commit lock held (`last` is its guard's value);
    /// `slots` are the operation's slots from [`Inner::prepare`]. An operation that writes
    /// nothing (a conflict, a refused mutation) queues the empty slots it inserted for
    /// removal.
    pub(crate) fn apply_write<'a>(
        &'a self,
        write: AtomicWrite,
        slots: &mut Slots<'a>,
        last: &mut u64,
        log: Option<&mut LogSink>,
    ) -> Result<CommitResult, Error> {
        let result = self.try_apply_write(write, slots, last, log);
        if !result.as_ref().is_ok_and(CommitResult::is_committed) {
            self.release(slots);
        }
        result
    }

    fn try_apply_write<'a>(
        &'a self,
        write: AtomicWrite,
        slots: &mut Slots<'a>,
        last: &mut u64,
        log: Option<&mut LogSink>,
    ) -> Result<CommitResult, Error> {
        let AtomicWrite {
            checks,
            range_checks,
            mutations,
        } = write;
        let mut now = None;

        let mut conflict = Conflict::default();
        for (index, (check, slot)) in checks.iter().zip(slots.checks.iter_mut()).enumerate() {
            self.refresh(slot, &check.key, false);
            let actual = Self::current_stamp(slot.as_ref(), &mut now);
            if actual != check.versionstamp {
                conflict.failed_checks.push(FailedCheck {
                    index,
                    key: check.key.clone(),
                    expected: check.versionstamp,
                    actual,
                });
            }
        }
        for rc in &range_checks {
            let since = rc.since.version();
            // Changed: a value the read returned has expired since (its deadline is in the
            // check), or any key of the range has a version newer than the snapshot.
            if rc
                .expires_at
                .is_some_and(|d| d <= *now.get_or_insert_with(now_ms))
            {
                conflict.range_changed = true;
                break;
            }
            let newer = |versions: &[Version]| versions.first().is_some_and(|v| v.version > since);
            // A transaction's point read is the range [key, key ++ 00): one lookup, no scan.
            let point = rc.end.len() == rc.start.len() + 1
                && rc.end.ends_with(&[0])
                && rc.end.starts_with(&rc.start);
            let changed = if point {
                self.map
                    .read(&rc.start, |_, versions| newer(versions))
                    .unwrap_or(false)
            } else {
                let mut changed = false;
                self.map.scan(&rc.start, &rc.end, false, |_, versions| {
                    changed = newer(versions);
                    !changed
                });
                changed
            };
            if changed {
                conflict.range_changed = true;
                break;
            }
        }
        if !conflict.failed_checks.is_empty() || conflict.range_changed {
            return Ok(CommitResult::Conflict(conflict));
        }

        // Stage every mutation before writing anything, so an error leaves no trace.
        let mut staged: SmallVec<[(KeyBytes, Staged, Option<Slot<'_>>); 4]> =
            SmallVec::with_capacity(mutations.len());
        // Later mutations of a key see earlier ones; index the staged keys once there are many.
        let use_index = mutations.len() >= 16;
        let mut index: HashMap<KeyBytes, usize> = HashMap::new();
        for (m, slot) in mutations.into_iter().zip(slots.mutations.iter_mut()) {
            let at = if use_index {
                index.get(&m.key).copied()
            } else {
                staged.iter().position(|(k, _, _)| *k == m.key)
            };
            if let Some(entry) = at.and_then(|i| staged.get_mut(i)) {
                // An earlier mutation's value is seen unless it has already expired (a set
                // with a zero expiry), as a read would.
                let commit_now = *now.get_or_insert_with(now_ms);
                let earlier = entry
                    .1
                    .as_ref()
                    .filter(|(_, deadline)| deadline.is_none_or(|d| d > commit_now))
                    .map(|(v, _)| v);
                let result = apply(m.kind, earlier, &mut now)?;
                if result.is_some() && entry.2.is_none() {
                    // A delete of an absent key, then a write: the write needs a slot.
                    self.refresh(&mut entry.2, &m.key, true);
                }
                entry.1 = result;
                continue;
            }
            self.refresh(slot, &m.key, !matches!(m.kind, MutationKind::Delete));
            // A set or delete does not depend on what it replaces: no copy of it.
            let current = match m.kind {
                MutationKind::Set { .. } | MutationKind::Delete => None,
                _ => Self::current(slot.as_ref(), &mut now),
            };
            let result = apply(m.kind, current.as_ref(), &mut now)?;
            if use_index {
                index.insert(m.key.clone(), staged.len());
            }
            staged.push((m.key, result, slot.clone()));
        }

        let version = *last + 1;
        let durable = log.is_some();
        if let Some(log) = log {
            log.frames.commit(
                version,
                staged
                    .iter()
                    .map(|(k, s, _)| (k.as_slice(), s.as_ref().map(|(v, e)| (v, *e)))),
            );
            log.touched.extend(staged.iter().map(|(k, _, _)| k.clone()));
        }
        let mut retention = None;
        for (key, result, slot) in staged {
            let (value, expires_at) = match result {
                Some((v, e)) => (Some(v), e),
                None => (None, None),
            };
            let new = Version {
                version,
                value,
                expires_at,
            };
            let now_or_later = durable.then_some(&mut retention);
            let spare = slots.spare.pop();
            if let Some((key, slot)) = self.write_version(key, new, slot, spare, now_or_later) {
                // A durable commit is published by the log's flusher, later: leave its
                // garbage to the background thread.
                if durable {
                    self.reclaimer.mark(key);
                } else {
                    slots.written.push((key, slot));
                }
            }
        }
        *last = version;
        Ok(CommitResult::Committed {
            versionstamp: Versionstamp::from_version(version),
        })
    }

    /// Installs a new version of `key`, whose map slot (if any) is `slot`. Called with the
    /// commit lock held. Returns the key and slot if they hold garbage (an older version, or
    /// a tombstone) once this commit is published. With `retention` (taken at most once per
    /// commit), older versions no reader needs are dropped now; without, all are kept for the
    /// caller to prune after publishing.
    fn write_version<'a>(
        &self,
        key: KeyBytes,
        new: Version,
        slot: Option<Slot<'a>>,
        spare: Option<Box<Chain>>,
        retention: Option<&mut Option<Retention>>,
    ) -> Option<(KeyBytes, Slot<'a>)> {
        let tombstone = new.value.is_none();
        let expiry = new.expires_at;
        let Some(slot) = slot else {
            // Only a delete has no slot, and deleting an absent key leaves nothing to write.
            return None;
        };
        let guard = epoch::pin();
        let old = slot.cell().load(&guard);
        if old.is_empty() {
            // A slot inserted empty by `prepare` (this operation's or another's).
            if tombstone {
                self.reclaimer.mark(key);
                return None;
            }
            if let Some(deadline) = expiry {
                self.reclaimer.schedule_expiry(deadline, key);
            }
            slot.cell()
                .store(Some(chain_of(spare, [new])), &self.retired);
            return None;
        }
        if expiry.is_none() && old.first().is_some_and(|v| v.expires_at.is_some()) {
            // The key's deadline no longer applies; keep the expiry bookkeeping to one entry
            // per key that still has one.
            self.reclaimer.cancel_expiry(&key);
        }
        let kept: SmallVec<[&Version; 2]> = match retention {
            // Pruned once this commit is published (`prune_written`): keep everything until
            // then rather than take the snapshot registry twice.
            None => old.iter().collect(),
            Some(retention) => {
                let retention = retention.get_or_insert_with(|| self.retention());
                retention.keep(old).collect()
            }
        };
        let garbage = tombstone || !kept.is_empty();
        let chain = chain_of(spare, std::iter::once(new).chain(kept.into_iter().cloned()));
        slot.cell().store(Some(chain), &self.retired);
        drop(guard);
        if let Some(deadline) = expiry {
            self.reclaimer.schedule_expiry(deadline, key.clone());
        }
        garbage.then_some((key, slot))
    }

    /// Prunes one key's list to what readers need (`retention`), and removes the key if
    /// nothing live is left. Called with the commit lock held. Returns whether the key still
    /// holds garbage (more than one version, or a dead one).
    pub(crate) fn prune(&self, key: &[u8], retention: &Retention, now: u64) -> bool {
        match self.map.get(key) {
            Some(slot) => self.prune_slot(&slot, retention, &mut Some(now)),
            None => false,
        }
    }

    /// [`Inner::prune`] on a slot already found.
    fn prune_slot(&self, slot: &Slot<'_>, retention: &Retention, now: &mut Option<u64>) -> bool {
        if slot.is_removed() {
            return false;
        }
        let guard = epoch::pin();
        let old = slot.cell().load(&guard);
        let mut versions: SmallVec<[Version; 1]> = retention.keep(old).cloned().collect();
        // A dead version (tombstone or expired) at the end of the list reads the same as no
        // version at all, so drop it, but only once no snapshot older than it is open: a
        // transaction reading at such a snapshot learns from it that the key changed (with
        // the slot gone, its commit-time range check would see nothing). A transaction that
        // read a value while it was live carries the value's deadline in its range check, so
        // expired values need not wait for readers.
        let mut dead = |v: &Version| {
            v.value.is_none()
                || v.expires_at
                    .is_some_and(|d| d <= *now.get_or_insert_with(now_ms))
        };
        let oldest_reader = retention
            .points
            .iter()
            .copied()
            .min()
            .unwrap_or(retention.visible)
            .min(retention.visible);
        while versions
            .last()
            .is_some_and(|last| dead(last) && last.version <= oldest_reader)
        {
            versions.pop();
        }
        if versions.is_empty() {
            slot.remove();
            return false;
        }
        let still_garbage = versions.len() > 1 || versions.iter().any(&mut dead);
        if versions.len() != old.len() {
            slot.cell()
                .store(Some(Box::new(Chain { versions })), &self.retired);
        }
        still_garbage
    }
}

impl ReadView for Database {
    fn get_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        check_read_key(key)?;
        Ok(self.inner.read_latest(key))
    }

    fn scan(&self, range: &ByteRange, reverse: bool, limit: usize) -> Result<Vec<Entry>, Error> {
        Snapshot::register(&self.inner).scan(range, reverse, limit)
    }
}

impl Store for Database {
    type Snapshot = Snapshot;

    fn snapshot(&self) -> Snapshot {
        Snapshot::register(&self.inner)
    }

    fn snapshot_versionstamp(snapshot: &Snapshot) -> Versionstamp {
        snapshot.versionstamp()
    }

    fn get_latest_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        ReadView::get_raw(self, key)
    }

    fn read_latest_raw<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<(&Value, Versionstamp)>) -> R,
    ) -> Result<R, Error> {
        check_read_key(key)?;
        Ok(self.inner.with_latest(key, f))
    }

    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error> {
        self.inner.commit(write)
    }
}

/// A read-only view of a [`Database`] pinned at one version; see [`Database::snapshot`].
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
}

#[cfg(test)]
mod tests {
    use super::{Chain, Database, Registry, Value, Version};
    use crate::key_bytes::KeyBytes;
    use crate::store::ReadView;

    /// Installs `versions` as `key`'s list in `db` without publishing anything: what a commit
    /// in progress (or a durable batch not yet logged) leaves for readers to see.
    fn install(db: &Database, key: &[u8], versions: &[(u64, &[u8])]) {
        let inner = &db.inner;
        let slot = inner.map.get_or_insert(&KeyBytes::from(key));
        let versions = versions
            .iter()
            .map(|&(version, value)| Version {
                version,
                value: Some(Value::from(value)),
                expires_at: None,
            })
            .collect();
        slot.cell()
            .store(Some(Box::new(Chain { versions })), &inner.retired);
    }

    fn value_of(db: &Database, key: &[u8]) -> Option<Value> {
        db.get_raw(key).ok().flatten().map(|e| e.value)
    }

    #[test]
    fn a_latest_read_skips_a_version_above_the_visible_one_it_cached() {
        let db = Database::in_memory();
        db.set_raw(b"k", b"one").expect("set");
        assert_eq!(
            value_of(&db, b"k"),
            Some(Value::from(b"one")),
            "caches visible = 1"
        );
        install(&db, b"k", &[(2, b"two"), (1, b"one")]);
        assert_eq!(value_of(&db, b"k"), Some(Value::from(b"one")));
        db.inner.publish(2);
        assert_eq!(value_of(&db, b"k"), Some(Value::from(b"two")));
    }

    #[test]
    fn a_visible_version_cached_from_one_database_is_never_used_for_another() {
        let busy = Database::in_memory();
        for i in 0..50u64 {
            busy.set_raw(b"k", &i.to_be_bytes()).expect("set");
        }
        let fresh = Database::in_memory();
        fresh.set_raw(b"k", b"published").expect("set");
        install(&fresh, b"k", &[(2, b"in flight"), (1, b"published")]);
        for _ in 0..3 {
            assert!(
                value_of(&busy, b"k").is_some(),
                "caches busy's visible = 50"
            );
            assert_eq!(
                value_of(&fresh, b"k"),
                Some(Value::from(b"published")),
                "version 2 is at or below busy's 50, but not published in fresh"
            );
        }
    }

    #[test]
    fn the_registry_counts_snapshots_per_version_in_order() {
        let mut registry = Registry::default();
        for version in [5, 5, 3, 9, 5, 7] {
            registry.add(version);
        }
        assert_eq!(registry.versions().collect::<Vec<_>>(), [3, 5, 7, 9]);
        assert!(!registry.remove(5), "two more at 5");
        assert!(!registry.remove(4), "none at 4");
        assert!(registry.remove(3), "the only one at 3");
        assert!(!registry.remove(3), "already gone");
        assert!(!registry.remove(5));
        assert!(registry.remove(5));
        assert_eq!(registry.versions().collect::<Vec<_>>(), [7, 9]);
        assert!(registry.remove(9) && registry.remove(7));
        assert_eq!(registry.versions().next(), None);
    }
}
