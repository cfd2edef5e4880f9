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

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_epoch as epoch;
use tuplekv_codec::{ByteRange, Key, Selector, encode_key};

use crate::atomic::{Atomic, AtomicWrite, CommitResult};
use crate::chain_cell::ChainCell;
use crate::durable::fs::{FileSystem, OsFs};
use crate::durable::recover::{self, LogOptions};
use crate::durable::{Durability, RecoveryReport};
use crate::error::Error;
use crate::group_commit::{GroupCommit, OpenDir};
use crate::inner::Inner;
use crate::key_bytes::KeyBytes;
use crate::limits::*;
use crate::list::{ListIter, ListOptions};
use crate::map::KeyMap;
use crate::reclaim::Reclaimer;
pub(crate) use crate::snapshot::Snapshot;
use crate::store::{Entry, EntryRef, Health, ReadView, Store};
use crate::transaction::{Transaction, TransactionOptions, run_transaction};
use crate::value::{Value, Versionstamp};
use crate::version::Chain;
use crate::watch::Watch;

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
    /// handle (which syncs the log).
    open: Option<Arc<OpenDir>>,
    pub(crate) inner: Arc<Inner>,
    /// What recovery found, for a durable database.
    report: Option<Arc<RecoveryReport>>,
    /// Shared by the handles (not by snapshots or watches): when the last handle goes, the
    /// database's watches end.
    handles: Arc<Handles>,
}

/// Dropped with the last [`Database`] handle: ends the watches.
struct Handles(Arc<Inner>);

impl Drop for Handles {
    fn drop(&mut self) {
        self.0.watchers.close();
    }
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
        let inner = Arc::new(Inner::new(KeyMap::default(), 0, None));
        if options.background_reclaim {
            Reclaimer::spawn(&inner);
        }
        Database {
            handles: Arc::new(Handles(Arc::clone(&inner))),
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
    /// [`Error::Locked`] if the directory is still open elsewhere after a second's wait,
    /// [`Error::Corrupt`] if a file is damaged beyond a torn tail (naming the file and offset), [`Error::Io`] for I/O errors.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Database, Error> {
        let log_options = LogOptions {
            fs: Arc::clone(&options.fs),
            durability: options.durability,
            checkpoint_after: options.checkpoint_after_bytes,
        };
        let recovered = recover::recover(dir.as_ref(), &log_options)?;
        let group = Arc::new(GroupCommit::new(recovered.wal));
        let map = KeyMap::default();
        let mut expiring = Vec::new();
        for (key, version) in recovered.entries {
            if let Some(deadline) = version.expires_at {
                expiring.push((deadline, key.clone()));
            }
            map.insert(&key, ChainCell::new(Chain::with_newest(version, [], None)));
        }
        let inner = Arc::new(Inner::new(map, recovered.last, Some(Arc::clone(&group))));
        for (deadline, key) in expiring {
            inner.reclaimer.schedule_expiry(deadline, key);
        }
        if options.background_reclaim {
            Reclaimer::spawn(&inner);
        }
        let open = OpenDir::start(&group, recovered.lock, &inner);
        Ok(Database {
            handles: Arc::new(Handles(Arc::clone(&inner))),
            inner,
            open: Some(Arc::new(open)),
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
        match &self.inner.log {
            Some(wal) => wal.checkpoint(&self.inner).map(Some),
            None => Ok(None),
        }
    }

    /// Writes a consistent copy of this database into the new directory `target` while
    /// writers go on, and returns the versionstamp of the state it holds. The copy is one
    /// checkpoint of one snapshot (every live key with its value, versionstamp and deadline),
    /// synced with its directory; it opens with [`Database::open`], and its new commits number
    /// above the returned versionstamp. Works in memory too: that makes a durable copy.
    ///
    /// The copy is written in a temporary directory beside `target` and renamed into place
    /// once synced, so a crash never leaves half a backup under `target`'s name. A snapshot
    /// costs writers nothing but memory: the versions it reads are kept until the copy ends.
    ///
    /// Copying a live database directory by hand (`cp -r`) is not safe; the
    /// [`durable`](crate::durable) module docs say why.
    ///
    /// ```
    /// use tuplekv_engine::{Database, Options, key};
    ///
    /// let db = Database::in_memory();
    /// let vs = db.set(&key!["users", 1], b"Ada")?;
    /// let dir = std::env::temp_dir().join(format!("tuplekv-backup-doc-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// assert_eq!(db.backup(&dir)?, vs);
    ///
    /// let copy = Database::open(&dir, Options::default())?;
    /// assert_eq!(copy.get(&key!["users", 1])?.map(|e| e.versionstamp), Some(vs));
    /// # copy.close()?;
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::TargetExists`] if `target` exists and is not an empty directory (nothing is
    /// written); [`Error::Io`] if the copy could not be written (nothing is left under
    /// `target`).
    pub fn backup(&self, target: impl AsRef<Path>) -> Result<Versionstamp, Error> {
        let fs: Arc<dyn FileSystem> = match &self.inner.log {
            Some(log) => Arc::clone(&log.wal.fs),
            None => Arc::new(OsFs),
        };
        let snapshot = Snapshot::register(&self.inner);
        let version = snapshot.versionstamp().version();
        let written = crate::durable::backup::write_dir(
            fs.as_ref(),
            target.as_ref(),
            version,
            crate::group_commit::live_at(&self.inner, version),
        );
        // The snapshot keeps the versions `live_at` reads until the copy is written.
        drop(snapshot);
        written.map(|()| Versionstamp::from_version(version))
    }

    /// Syncs the log now; useful in [`Durability::Buffered`] mode before a planned stop.
    ///
    /// A sync that fails stops the database from accepting writes (reads go on) until it is
    /// reopened: after a failed `fdatasync` the unsynced pages may be gone, and nothing later
    /// may be made durable around them.
    ///
    /// # Errors
    /// [`Error::Io`] if the log could not be made durable: this sync failed, or an earlier
    /// one did (the error names it).
    pub fn sync(&self) -> Result<(), Error> {
        match &self.inner.log {
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
        let Database {
            inner,
            open,
            handles,
            ..
        } = self;
        let closed = match open.and_then(Arc::into_inner) {
            Some(open) => open.close(),
            None => Ok(()),
        };
        // Watches end once the store is closed, with every write they could report made.
        drop(handles);
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

    /// Visits what [`Database::list`] would yield, each entry borrowed straight from the map
    /// (no copy, no reference count): see [`Store::for_each`].
    ///
    /// # Errors
    /// Invalid options, selector or cursor.
    pub fn for_each(
        &self,
        selector: &Selector,
        options: ListOptions,
        visit: impl FnMut(EntryRef<'_>) -> ControlFlow<()>,
    ) -> Result<usize, Error> {
        Store::for_each(self, selector, options, visit)
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

    /// Watches up to [`WATCH_KEYS_MAX`](crate::limits::WATCH_KEYS_MAX) keys: the [`Watch`]
    /// yields their entries now, then a new state whenever one of them changes (by a commit,
    /// or by reaching its expiry), until the last handle of the database is closed. A slow
    /// watcher gets the latest state, never a backlog, and never slows a commit.
    ///
    /// # Errors
    /// [`Error::TooManyWatchedKeys`], or a key over the write limit.
    pub fn watch(&self, keys: &[Key]) -> Result<Watch, Error> {
        let keys = keys
            .iter()
            .map(|k| KeyBytes::from(encode_key(k).as_slice()))
            .collect();
        Watch::new(&self.inner, keys)
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
        stats.log_syncs = self.inner.log.as_ref().map_or(0, |log| log.wal.syncs());
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
    /// Syncs of the write-ahead log that made commits durable since the database was opened
    /// (0 in memory). Concurrent committers share syncs, so under load this grows far more
    /// slowly than the number of commits.
    pub log_syncs: u64,
}

fn committed(result: CommitResult) -> Result<Versionstamp, Error> {
    // A write without checks cannot conflict.
    Ok(result.versionstamp().unwrap_or(Versionstamp::ZERO))
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
    type Watch = Watch;

    /// [`Health::NotReady`] once the log has stopped accepting writes (after a failed sync:
    /// the fail-stop; reads go on until the database is reopened), with the error writes get.
    fn health(&self) -> Health {
        match self.inner.log.as_ref().and_then(|log| log.wal.stopped()) {
            Some(e) => Health::NotReady(e.to_string()),
            None => Health::Ready,
        }
    }

    fn watch_raw(&self, keys: Vec<KeyBytes>) -> Result<Watch, Error> {
        Watch::new(&self.inner, keys)
    }

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

    /// Applies `write` on the caller and returns a future that resolves once it is durable:
    /// the group commit's leader (a committer thread, or the log's flusher thread) writes and
    /// syncs its batch, so waiting for it holds no thread. In memory it commits at once.
    fn commit_async(
        &self,
        write: AtomicWrite,
    ) -> impl Future<Output = Result<CommitResult, Error>> + Send + 'static {
        crate::group_commit::commit_async(&self.inner, write)
    }
}

#[cfg(test)]
mod tests {
    use super::{Chain, Database, Value};
    use crate::key_bytes::KeyBytes;
    use crate::snapshot::Registry;
    use crate::store::ReadView;
    use crate::version::Version;

    /// Installs `versions` as `key`'s list in `db` without publishing anything: what a commit
    /// in progress (or a durable batch not yet logged) leaves for readers to see.
    fn install(db: &Database, key: &[u8], versions: &[(u64, &[u8])]) {
        let inner = &db.inner;
        let slot = inner.map.get_or_insert(&KeyBytes::from(key));
        let versions: Vec<Version> = versions
            .iter()
            .map(|&(version, value)| Version {
                version,
                value: Some(Value::from(value)),
                expires_at: None,
            })
            .collect();
        let chain = Chain::build(versions.iter().map(Version::as_version_ref), None);
        slot.cell().store(Some(chain), &inner.retired);
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
