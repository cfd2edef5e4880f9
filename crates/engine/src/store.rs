//! The traits the layers above the engine are written against, so that other backends
//! (durable, remote, distributed) can plug in without changing them.
//!
//! A [`Store`] gives consistent snapshots ([`ReadView`]s) and atomic commits of
//! [`AtomicWrite`]s. Everything else (typed keys, list iteration with cursors, transactions)
//! is built on those two in this crate, generically.

use tuplekv_codec::{ByteRange, Key, Selector, encode_key};

use crate::atomic::{Atomic, AtomicWrite, CommitResult};
use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::limits::{GET_MANY_KEYS_MAX, KEY_SIZE_MAX_READ};
use crate::list::{ListIter, ListOptions};
use crate::transaction::{Transaction, TransactionOptions, run_transaction};
use crate::value::{Value, Versionstamp};
use crate::watch::KeyWatch;

/// A key with its value and the versionstamp of the commit that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The encoded key.
    pub key: KeyBytes,
    /// The value.
    pub value: Value,
    /// The stamp of the commit that last wrote the key.
    pub versionstamp: Versionstamp,
    /// When the value expires (Unix time in milliseconds), if it was set with an expiry. Reads
    /// never return a value past this deadline.
    pub expires_at: Option<u64>,
}

impl Entry {
    /// The key, decoded into a tuple.
    ///
    /// # Errors
    /// If the stored key is not a valid tuple (only possible for keys written raw).
    pub fn decoded_key(&self) -> Result<Key, Error> {
        Ok(tuplekv_codec::decode_key(&self.key)?)
    }
}

/// Reads of one consistent state of a store.
///
/// The two required methods read encoded keys; the typed ones are built on them.
pub trait ReadView {
    /// The entry at an encoded key, or `None`.
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForRead`].
    fn get_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error>;

    /// Up to `limit` live entries of `range`, in key order or, with `reverse`, from the end.
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForRead`] for a bound over the read limit.
    fn scan(&self, range: &ByteRange, reverse: bool, limit: usize) -> Result<Vec<Entry>, Error>;

    /// Whether every read of this view sees one state of the store (`true` for every view
    /// but a [`Store::transaction_snapshot`] of a store that cannot hold a snapshot, whose
    /// reads each see the latest state). A transaction on such a view is still serializable,
    /// because its commit checks every key it read; see [`Store::transaction_snapshot`].
    fn reads_one_state(&self) -> bool {
        true
    }

    /// The entry at `key`, or `None`.
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForRead`] if the encoded key is over 2049 bytes.
    fn get(&self, key: &Key) -> Result<Option<Entry>, Error> {
        self.get_raw(&encode_key(key))
    }
}

/// Whether a store can serve reads and writes now, as [`Store::health`] reports it.
///
/// ```
/// use tuplekv_engine::{Database, Health, Store};
///
/// assert_eq!(Database::in_memory().health(), Health::Ready);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Health {
    /// Open, and accepting reads and writes.
    Ready,
    /// Not accepting writes (or not reachable): why, in one line for a log or a probe's body.
    NotReady(String),
}

impl Health {
    /// Whether this is [`Health::Ready`].
    pub fn is_ready(&self) -> bool {
        matches!(self, Health::Ready)
    }
}

/// A store: consistent snapshots plus atomic commits.
pub trait Store: Send + Sync {
    /// A consistent read-only view.
    type Snapshot: ReadView + Clone + Send;

    /// A view of the latest committed state that stays the same however many commits follow.
    fn snapshot(&self) -> Self::Snapshot;

    /// The view a [`Transaction`] reads: by default [`Store::snapshot`]. A store that cannot
    /// hold a snapshot (a remote server without tuplekv's extension) may return a view whose
    /// reads each see the latest state ([`ReadView::reads_one_state`] is `false`): the
    /// transaction's commit checks every key it read, so a commit still means all its reads
    /// held at once, and a closure that gives up after such reads has its reads checked
    /// before its error is reported (and runs again if they changed).
    fn transaction_snapshot(&self) -> Self::Snapshot {
        self.snapshot()
    }

    /// What [`Store::watch_raw`] returns.
    type Watch: KeyWatch;

    /// Watches up to [`WATCH_KEYS_MAX`](crate::limits::WATCH_KEYS_MAX) encoded keys: the
    /// watch yields their entries now, then whenever one of them changes (see [`Watch`](crate::Watch)).
    ///
    /// # Errors
    /// [`Error::TooManyWatchedKeys`], or a key over the write limit.
    fn watch_raw(&self, keys: Vec<KeyBytes>) -> Result<Self::Watch, Error>;

    /// The stamp a snapshot reads at.
    fn snapshot_versionstamp(snapshot: &Self::Snapshot) -> Versionstamp;

    /// The stamp a snapshot reads at, or why it cannot be known: a store whose snapshot
    /// fixes its state at its first read (a remote or etcd store) reads to fix it when
    /// nothing has, and that read may fail, where [`Store::snapshot_versionstamp`] can only
    /// answer [`Versionstamp::ZERO`]. The default never fails.
    ///
    /// # Errors
    /// The failure of the read that would fix the snapshot's state.
    fn try_snapshot_versionstamp(snapshot: &Self::Snapshot) -> Result<Versionstamp, Error> {
        Ok(Self::snapshot_versionstamp(snapshot))
    }

    /// The entry at an encoded key in the latest committed state: one linearizable read,
    /// which a store may serve without registering a snapshot. The default reads through a
    /// fresh snapshot.
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForRead`].
    fn get_latest_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        self.snapshot().get_raw(key)
    }

    /// [`Store::get_latest_raw`] without a copy: calls `f` with the value and versionstamp of
    /// the entry at `key` in the latest committed state (`None` if absent), borrowed from the
    /// store, and returns what `f` returns. A store may answer without copying the entry or
    /// touching the value's reference count; the default calls [`Store::get_latest_raw`].
    ///
    /// ```
    /// use tuplekv_engine::{Database, Store, Value, key};
    ///
    /// let db = Database::in_memory();
    /// db.set(&key!["n"], 7u64)?;
    /// let k = tuplekv_engine::codec::encode_key(&key!["n"]);
    /// let n = db.read_latest_raw(&k, |e| e.and_then(|(v, _)| v.as_u64()))?;
    /// assert_eq!(n, Some(7));
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForRead`].
    fn read_latest_raw<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<(&Value, Versionstamp)>) -> R,
    ) -> Result<R, Error>
    where
        Self: Sized,
    {
        let entry = self.get_latest_raw(key)?;
        Ok(f(entry.as_ref().map(|e| (&e.value, e.versionstamp))))
    }

    /// Commits `write` if its checks hold.
    ///
    /// What the layers above (transactions, indexes, sequences) rely on: commits are
    /// serialised in versionstamp order; a versionstamp is never given to two commits (so "the
    /// same versionstamp" means "unchanged"); checks and range checks see a value past its
    /// deadline as absent; and a commit applies all of its mutations or none.
    ///
    /// # Errors
    /// Limit violations and type errors; nothing is written then.
    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error>;

    /// [`Store::commit`] for async callers: the returned future resolves with what `commit`
    /// would return. A store overrides it when it can wait for durability without holding a
    /// thread; [`Database`](crate::Database) does, applying the write on the caller (short
    /// locks only) and leaving the log write and its sync to the group commit. The default
    /// commits on the caller's thread before returning, so a caller on an async runtime must
    /// know its store's commit never blocks, or use [`Store::commit`] on a blocking thread.
    ///
    /// ```
    /// use tuplekv_engine::{Database, Store, key};
    ///
    /// let db = Database::in_memory();
    /// let write = db.atomic().set(&key!["k"], 1u64).as_write().clone();
    /// let future = db.commit_async(write);
    /// # let _ = future;
    /// ```
    ///
    /// # Errors
    /// As [`Store::commit`].
    fn commit_async(
        &self,
        write: AtomicWrite,
    ) -> impl Future<Output = Result<CommitResult, Error>> + Send + 'static
    where
        Self: Sized,
    {
        std::future::ready(self.commit(write))
    }

    /// Whether the store accepts writes now: for a readiness probe, so it must be cheap
    /// (a store that asks a remote backend bounds the wait and may cache the answer briefly).
    /// The default is always [`Health::Ready`]; a store that can stop accepting writes (a
    /// durable [`Database`](crate::Database) after a failed log sync, a cluster that cannot
    /// be reached) overrides it.
    fn health(&self) -> Health {
        Health::Ready
    }

    /// Starts an atomic operation.
    fn atomic(&self) -> Atomic<'_, Self>
    where
        Self: Sized,
    {
        Atomic::new(self)
    }

    /// Lists the entries a selector names, from one snapshot however long iteration takes.
    ///
    /// # Errors
    /// Invalid options, selector or cursor.
    fn list(
        &self,
        selector: &Selector,
        options: ListOptions,
    ) -> Result<ListIter<Self::Snapshot>, Error>
    where
        Self: Sized,
    {
        ListIter::new(self.snapshot(), selector.clone(), options)
    }

    /// Reads up to ten keys from one snapshot, in request order.
    ///
    /// # Errors
    /// [`Error::TooManyRanges`] for more than ten keys, or a key over the read limit.
    fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Entry>>, Error>
    where
        Self: Sized,
    {
        if keys.len() > GET_MANY_KEYS_MAX {
            return Err(Error::TooManyRanges { count: keys.len() });
        }
        let encoded: Vec<Vec<u8>> = keys.iter().map(encode_key).collect();
        if let Some(k) = encoded.iter().find(|k| k.len() > KEY_SIZE_MAX_READ) {
            return Err(Error::KeyTooLargeForRead { size: k.len() });
        }
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let snapshot = self.snapshot();
        encoded.iter().map(|k| snapshot.get_raw(k)).collect()
    }

    /// Runs `f` as a serializable transaction, retrying on conflict (see [`Transaction`]).
    ///
    /// # Errors
    /// What `f` returns, commit errors, or [`Error::TransactionConflict`] when every attempt
    /// conflicted.
    fn transaction<T, E, F>(&self, f: F) -> Result<T, E>
    where
        Self: Sized,
        E: From<Error>,
        F: FnMut(&mut Transaction<'_, Self>) -> Result<T, E>,
    {
        run_transaction(self, &TransactionOptions::default(), f)
    }

    /// [`Store::transaction`] with explicit retry options.
    ///
    /// # Errors
    /// As [`Store::transaction`].
    fn transaction_with<T, E, F>(&self, options: &TransactionOptions, f: F) -> Result<T, E>
    where
        Self: Sized,
        E: From<Error>,
        F: FnMut(&mut Transaction<'_, Self>) -> Result<T, E>,
    {
        run_transaction(self, options, f)
    }
}
