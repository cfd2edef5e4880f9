//! The traits the layers above the engine are written against, so that other backends
//! (durable, remote, distributed) can plug in without changing them.
//!
//! A [`Store`] gives consistent snapshots ([`ReadView`]s) and atomic commits of
//! [`AtomicWrite`]s. Everything else (typed keys, list iteration with cursors, transactions)
//! is built on those two in this crate, generically.

use std::ops::ControlFlow;

use tuplekv_codec::{ByteRange, Key, Selector, encode_key};

use crate::atomic::{Atomic, AtomicWrite, CommitResult};
use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::limits::{GET_MANY_KEYS_MAX, KEY_SIZE_MAX_READ};
use crate::list::{ListCursor, ListIter, ListOptions};
use crate::transaction::{Transaction, TransactionOptions, run_transaction};
use crate::value::{Value, ValueRef, Versionstamp};
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
    /// An entry with the empty key and the number 0, which reads fill in place.
    pub(crate) const EMPTY: Entry = Entry {
        key: KeyBytes::EMPTY,
        value: Value::U64(0),
        versionstamp: Versionstamp::ZERO,
        expires_at: None,
    };

    /// The key, decoded into a tuple.
    ///
    /// # Errors
    /// If the stored key is not a valid tuple (only possible for keys written raw).
    pub fn decoded_key(&self) -> Result<Key, Error> {
        Ok(tuplekv_codec::decode_key(&self.key)?)
    }
}

/// An entry borrowed from the store for the length of a call: what a borrowing scan
/// ([`ReadView::scan_with`], [`Store::for_each`]) hands its visitor, with no copy of the key
/// or the value and no reference count taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// The encoded key.
    pub key: &'a [u8],
    /// The value.
    pub value: ValueRef<'a>,
    /// The stamp of the commit that last wrote the key.
    pub versionstamp: Versionstamp,
    /// When the value expires (Unix time in milliseconds), if it was set with an expiry.
    pub expires_at: Option<u64>,
}

impl EntryRef<'_> {
    /// An owned copy of the entry.
    pub fn to_entry(&self) -> Entry {
        Entry {
            key: KeyBytes::from(self.key),
            value: self.value.to_value(),
            versionstamp: self.versionstamp,
            expires_at: self.expires_at,
        }
    }

    /// The key, decoded into a tuple.
    ///
    /// # Errors
    /// If the stored key is not a valid tuple (only possible for keys written raw).
    pub fn decoded_key(&self) -> Result<Key, Error> {
        Ok(tuplekv_codec::decode_key(self.key)?)
    }
}

impl Entry {
    /// The entry borrowed, as a borrowing scan hands it out.
    pub fn as_entry_ref(&self) -> EntryRef<'_> {
        EntryRef {
            key: &self.key,
            value: self.value.as_value_ref(),
            versionstamp: self.versionstamp,
            expires_at: self.expires_at,
        }
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

    /// [`ReadView::scan`] borrowed: calls `visit` with each of up to `limit` live entries of
    /// `range`, in key order (or from the end with `reverse`), until it returns
    /// [`ControlFlow::Break`]; returns how many entries it visited. The engine's views hand
    /// out entries straight from the map, with no copy and no reference count per entry;
    /// other views read a batch and lend its entries.
    ///
    /// # Errors
    /// As [`ReadView::scan`]; `visit` has been called for the entries read before the error.
    fn scan_with(
        &self,
        range: &ByteRange,
        reverse: bool,
        limit: usize,
        visit: &mut dyn FnMut(EntryRef<'_>) -> ControlFlow<()>,
    ) -> Result<usize, Error> {
        let mut visited = 0;
        let mut range = range.clone();
        while visited < limit {
            let want = (limit - visited).min(crate::limits::LIST_BATCH_SIZE_MAX);
            let batch = self.scan(&range, reverse, want)?;
            let done = batch.len() < want;
            for entry in batch.iter().take(want) {
                visited += 1;
                if visit(entry.as_entry_ref()).is_break() {
                    return Ok(visited);
                }
            }
            match batch.last() {
                Some(last) if !done => {
                    if reverse {
                        range.end = last.key.to_vec();
                    } else {
                        let mut next = last.key.to_vec();
                        next.push(0);
                        range.start = next;
                    }
                }
                _ => break,
            }
        }
        Ok(visited)
    }

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

/// One page of [`Store::list_async`]: the entries, and where the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    /// The entries, in the selector's order.
    pub entries: Vec<Entry>,
    /// Where the list stands after the last entry ([`ListIter::cursor`]): pass an
    /// [`ListCursor::After`] string as [`ListOptions::cursor`] for the next page.
    pub cursor: ListCursor,
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

    /// [`ReadView::get_raw`] of `snapshot` for async callers: a store whose reads wait on the
    /// network overrides it to wait without holding a thread. The default reads at once.
    /// Async operations ([`crate::replay`]) read through it.
    ///
    /// # Errors
    /// As [`ReadView::get_raw`].
    fn get_raw_async(
        snapshot: &Self::Snapshot,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<Self>
    where
        Self: Sized,
    {
        std::future::ready(snapshot.get_raw(key))
    }

    /// [`ReadView::scan`] of `snapshot` for async callers, as [`Store::get_raw_async`].
    ///
    /// # Errors
    /// As [`ReadView::scan`].
    fn scan_async(
        snapshot: &Self::Snapshot,
        range: &ByteRange,
        reverse: bool,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Entry>, Error>> + Send + 'static + use<Self>
    where
        Self: Sized,
    {
        std::future::ready(snapshot.scan(range, reverse, limit))
    }

    /// [`Store::try_snapshot_versionstamp`] for async callers, as [`Store::get_raw_async`].
    ///
    /// # Errors
    /// As [`Store::try_snapshot_versionstamp`].
    fn snapshot_versionstamp_async(
        snapshot: &Self::Snapshot,
    ) -> impl Future<Output = Result<Versionstamp, Error>> + Send + 'static + use<Self>
    where
        Self: Sized,
    {
        std::future::ready(Self::try_snapshot_versionstamp(snapshot))
    }

    /// [`Store::get_latest_raw`] for async callers, as [`Store::get_raw_async`].
    ///
    /// # Errors
    /// As [`Store::get_latest_raw`].
    fn get_latest_raw_async(
        &self,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<Self>
    where
        Self: Sized,
    {
        std::future::ready(self.get_latest_raw(key))
    }

    /// Whether an operation on this store should stop at once and report what it has: `true`
    /// only for a [`Replay`](crate::replay::Replay) whose round is suspended, where anything
    /// more the operation does is discarded. Transactions ask it after each attempt.
    fn interrupted(&self) -> bool {
        false
    }

    /// Waits `pause` between a transaction's attempts. The default sleeps; a
    /// [`Replay`](crate::replay::Replay) suspends its round on a timer instead.
    fn backoff(&self, pause: std::time::Duration) {
        std::thread::sleep(pause);
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

    /// What [`Store::list`] yields, borrowed: calls `visit` with each entry `selector` and
    /// `options` name (limit, direction, cursor; the batch size is ignored), from one
    /// snapshot, until it returns [`ControlFlow::Break`]. Returns how many entries it visited.
    ///
    /// This is the hot path for reading many entries: the engine hands each entry out
    /// straight from its map, with no copy of the key or value and no atomic operation per
    /// entry, where the list iterator must give each entry its own key and value.
    ///
    /// ```
    /// use std::ops::ControlFlow;
    /// use tuplekv_engine::{Database, ListOptions, Selector, Store, key};
    ///
    /// let db = Database::in_memory();
    /// for i in 0..5u64 {
    ///     db.set(&key!["scores", i], i * 10)?;
    /// }
    /// let mut total = 0;
    /// let visited = db.for_each(&Selector::prefix(&key!["scores"]), ListOptions::default(), |e| {
    ///     total += e.value.as_u64().unwrap_or(0);
    ///     ControlFlow::Continue(())
    /// })?;
    /// assert_eq!((visited, total), (5, 100));
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    ///
    /// # Errors
    /// Invalid options, selector or cursor, and what a read meets.
    fn for_each(
        &self,
        selector: &Selector,
        options: ListOptions,
        mut visit: impl FnMut(EntryRef<'_>) -> ControlFlow<()>,
    ) -> Result<usize, Error>
    where
        Self: Sized,
    {
        let (range, reverse, limit) = crate::list::resolve(selector, &options)?;
        self.snapshot()
            .scan_with(&range, reverse, limit.unwrap_or(usize::MAX), &mut visit)
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

    /// [`ReadView::get`] for async callers: the entry at `key` in the latest committed state, read
    /// without holding a thread while the store waits.
    ///
    /// ```
    /// use tuplekv_engine::{Database, Store, key};
    ///
    /// let db = Database::in_memory();
    /// db.set(&key!["n"], 7u64)?;
    /// let entry = pollster::block_on(db.get_async(&key!["n"]))?;
    /// assert_eq!(entry.and_then(|e| e.value.as_u64()), Some(7));
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForRead`], or what the store's read meets.
    fn get_async(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Entry>, Error>> + Send + 'static
    where
        Self: Sized,
    {
        let key = encode_key(key);
        let read = (key.len() <= KEY_SIZE_MAX_READ).then(|| self.get_latest_raw_async(&key));
        async move {
            match read {
                Some(read) => read.await,
                None => Err(Error::KeyTooLargeForRead { size: key.len() }),
            }
        }
    }

    /// [`Store::get_many`]'s async twin: up to ten keys from one snapshot, in request order.
    ///
    /// # Errors
    /// As [`Store::get_many`].
    fn get_many_async<'a>(
        &'a self,
        keys: &'a [Key],
    ) -> impl Future<Output = Result<Vec<Option<Entry>>, Error>> + Send + 'a
    where
        Self: Sized,
    {
        crate::replay::run(self, move |store| store.get_many(keys))
    }

    /// The entries a selector names, read as [`Store::list`] reads them (from one snapshot,
    /// in batches), all collected, without holding a thread while the store waits. Set
    /// [`ListOptions::limit`] for a page, and pass its [`ListPage::cursor`] back for the next.
    ///
    /// ```
    /// use tuplekv_engine::{Database, ListOptions, Selector, Store, key};
    ///
    /// let db = Database::in_memory();
    /// for i in 0..5u64 {
    ///     db.set(&key!["users", i], i)?;
    /// }
    /// let options = ListOptions { limit: Some(3), ..ListOptions::default() };
    /// let page = pollster::block_on(db.list_async(&Selector::prefix(&key!["users"]), options))?;
    /// assert_eq!(page.entries.len(), 3);
    /// assert!(matches!(page.cursor, tuplekv_engine::ListCursor::After(_)));
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Store::list`], and what a read meets.
    fn list_async<'a>(
        &'a self,
        selector: &'a Selector,
        options: ListOptions,
    ) -> impl Future<Output = Result<ListPage, Error>> + Send + 'a
    where
        Self: Sized,
    {
        crate::replay::run(self, move |store| {
            let mut list = store.list(selector, options.clone())?;
            let entries = list.read_all()?;
            let cursor = list.cursor();
            Ok(ListPage { entries, cursor })
        })
    }

    /// [`Store::transaction`]'s async twin: runs `f`, the same synchronous closure, as a
    /// serializable transaction, without holding a thread while the store reads or commits.
    ///
    /// `f` runs on a [`Replay`](crate::replay::Replay) of this store: it is called again each
    /// time it reads something the store has not answered yet, with every earlier read
    /// answered as before (see [`crate::replay`]). So, as for a transaction that retries on
    /// conflict, it must not have side effects.
    ///
    /// ```
    /// use tuplekv_engine::{Database, Store, key};
    ///
    /// let db = Database::in_memory();
    /// let balance = pollster::block_on(db.transaction_async(|tx| {
    ///     let old = tx.get(&key!["balance"])?.and_then(|e| e.value.as_u64()).unwrap_or(0);
    ///     tx.set(&key!["balance"], old + 10);
    ///     Ok::<_, tuplekv_engine::Error>(old + 10)
    /// }))?;
    /// assert_eq!(balance, 10);
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Store::transaction`].
    fn transaction_async<'a, T, E, F>(
        &'a self,
        f: F,
    ) -> impl Future<Output = Result<T, E>> + Send + 'a
    where
        Self: Sized,
        E: From<Error> + 'a,
        T: 'a,
        F: FnMut(&mut Transaction<'_, crate::replay::Replay<'a, Self>>) -> Result<T, E> + Send + 'a,
    {
        self.transaction_with_async(TransactionOptions::default(), f)
    }

    /// [`Store::transaction_async`] with explicit retry options.
    ///
    /// # Errors
    /// As [`Store::transaction`].
    fn transaction_with_async<'a, T, E, F>(
        &'a self,
        options: TransactionOptions,
        mut f: F,
    ) -> impl Future<Output = Result<T, E>> + Send + 'a
    where
        Self: Sized,
        E: From<Error> + 'a,
        T: 'a,
        F: FnMut(&mut Transaction<'_, crate::replay::Replay<'a, Self>>) -> Result<T, E> + Send + 'a,
    {
        crate::replay::run(self, move |store| store.transaction_with(&options, &mut f))
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
