//! The backends of the engine itself, for the contract suites: the in-memory and the durable
//! [`Database`], and [`NoSnapshots`], the engine behind the interface of a plain KV Connect
//! server (no snapshot serves two reads, no range checks), so the suites' paths for such
//! stores run without a network, and [`WaitingStores`], whose async calls wait as a
//! network's do.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tuplekv_engine::{
    AtomicWrite, ByteRange, CommitResult, Database, Entry, Error, Key, KeyBytes, Options, ReadView,
    Store, Versionstamp, Watch,
};

use super::{Backend, Cost};

/// Fresh [`Database::in_memory`] stores.
#[derive(Debug, Default, Clone, Copy)]
pub struct InMemory;

impl Backend for InMemory {
    type Store = Database;

    fn name(&self) -> &str {
        "in-memory"
    }

    fn open(&self) -> Database {
        Database::in_memory()
    }
}

/// Fresh durable databases ([`Database::open`] with the default options, so every commit is
/// synced), each in its own directory under one scratch directory that lives as long as the
/// backend.
#[derive(Debug)]
pub struct Durable {
    root: tempfile::TempDir,
    opened: AtomicUsize,
}

impl Durable {
    /// A backend with a new scratch directory.
    ///
    /// # Panics
    /// If the scratch directory cannot be made.
    pub fn new() -> Durable {
        Durable {
            root: tempfile::tempdir().expect("a scratch directory"),
            opened: AtomicUsize::new(0),
        }
    }

    fn next_dir(&self) -> PathBuf {
        let n = self.opened.fetch_add(1, Ordering::Relaxed);
        self.root.path().join(format!("db-{n}"))
    }
}

impl Default for Durable {
    fn default() -> Self {
        Durable::new()
    }
}

impl Backend for Durable {
    type Store = Database;

    fn name(&self) -> &str {
        "durable"
    }

    /// # Panics
    /// If the database cannot be opened.
    fn open(&self) -> Database {
        Database::open(self.next_dir(), Options::default()).expect("a durable database opens")
    }

    fn cost(&self) -> Cost {
        Cost::Disk
    }
}

/// Fresh [`LatestOnly`] stores: the engine as a store without snapshots.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoSnapshots;

impl Backend for NoSnapshots {
    type Store = LatestOnly;

    fn name(&self) -> &str {
        "no-snapshots"
    }

    fn open(&self) -> LatestOnly {
        LatestOnly {
            db: Database::in_memory(),
        }
    }

    fn has_snapshots(&self) -> bool {
        false
    }
}

/// An in-memory database behind the interface of a KV Connect server without tuplekv's
/// extension: a snapshot answers its first read from the latest state and refuses later ones
/// with [`Error::Unsupported`] (it cannot promise they see the same state), a transaction's
/// view reads the latest state each time, and a commit with range checks is refused.
#[derive(Debug, Clone)]
pub struct LatestOnly {
    db: Database,
}

impl LatestOnly {
    /// The database underneath.
    pub fn database(&self) -> &Database {
        &self.db
    }

    fn view(&self, one_state: bool) -> LatestView {
        LatestView {
            db: self.db.clone(),
            at: self.db.current_versionstamp(),
            one_state,
            read: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// A [`LatestOnly`] snapshot or transaction view.
#[derive(Debug, Clone)]
pub struct LatestView {
    db: Database,
    at: Versionstamp,
    /// A snapshot (one read) rather than a transaction's view (reads of the latest state).
    one_state: bool,
    /// Whether the snapshot has served its read (shared by clones, like a remote snapshot).
    read: Arc<AtomicBool>,
}

impl LatestView {
    fn admit(&self) -> Result<(), Error> {
        if self.one_state && self.read.swap(true, Ordering::AcqRel) {
            return Err(Error::Unsupported {
                operation: "a second read of one snapshot",
                needs: "snapshots held by the server",
            });
        }
        Ok(())
    }
}

impl ReadView for LatestView {
    fn get_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        self.admit()?;
        self.db.get_latest_raw(key)
    }

    fn scan(&self, range: &ByteRange, reverse: bool, limit: usize) -> Result<Vec<Entry>, Error> {
        self.admit()?;
        ReadView::scan(&self.db, range, reverse, limit)
    }

    fn reads_one_state(&self) -> bool {
        self.one_state
    }
}

impl Store for LatestOnly {
    type Snapshot = LatestView;
    type Watch = Watch;

    fn snapshot(&self) -> LatestView {
        self.view(true)
    }

    fn transaction_snapshot(&self) -> LatestView {
        self.view(false)
    }

    fn watch_raw(&self, keys: Vec<KeyBytes>) -> Result<Watch, Error> {
        self.db.watch_raw(keys)
    }

    fn snapshot_versionstamp(snapshot: &LatestView) -> Versionstamp {
        snapshot.at
    }

    fn get_latest_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        self.db.get_latest_raw(key)
    }

    /// One request reads every key from one state, as KV Connect's `snapshot_read` does.
    fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Entry>>, Error> {
        self.db.get_many(keys)
    }

    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error> {
        write.validate()?;
        if !write.range_checks.is_empty() {
            return Err(Error::Unsupported {
                operation: "a range check",
                needs: "range checks in the server's commits",
            });
        }
        self.db.commit(write)
    }
}

/// Fresh in-memory databases behind [`Waiting`]: every async read and commit waits once, as
/// over a network, so each async operation of the suites runs in many rounds
/// (`tuplekv_engine::replay`) while its blocking twin runs as on [`InMemory`].
#[derive(Debug, Default, Clone, Copy)]
pub struct WaitingStores;

impl Backend for WaitingStores {
    type Store = Waiting;

    fn name(&self) -> &str {
        "waiting"
    }

    fn open(&self) -> Waiting {
        Waiting::new(Database::in_memory())
    }
}

/// A [`Database`] whose async reads and commits ([`Store::get_raw_async`],
/// [`Store::scan_async`], [`Store::get_latest_raw_async`], [`Store::commit_async`]) are
/// answered only after the task awaiting them was suspended once; the blocking ones answer
/// at once. It counts the commits made through it, and can lose the answer of its next
/// commit ([`Waiting::lose_next_answer`]), as a remote store does when its connection fails
/// after the write was sent.
#[derive(Debug, Clone)]
pub struct Waiting {
    db: Database,
    commits: Arc<AtomicUsize>,
    lose_next: Arc<AtomicBool>,
}

impl Waiting {
    /// `db` behind waiting async calls.
    pub fn new(db: Database) -> Waiting {
        Waiting {
            db,
            commits: Arc::new(AtomicUsize::new(0)),
            lose_next: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The next commit that commits is made, then reported as [`Error::OutcomeUnknown`].
    pub fn lose_next_answer(&self) {
        self.lose_next.store(true, Ordering::SeqCst);
    }

    /// The database underneath.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// How many commits were made through this store (blocking or async).
    pub fn commits(&self) -> usize {
        self.commits.load(Ordering::SeqCst)
    }
}

/// Resolves to its value on its second poll, waking its task after the first.
struct YieldOnce<T>(Option<T>, bool);

impl<T: Unpin> std::future::Future for YieldOnce<T> {
    type Output = T;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<T> {
        if self.1 {
            match self.0.take() {
                Some(value) => std::task::Poll::Ready(value),
                None => std::task::Poll::Pending,
            }
        } else {
            self.1 = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    }
}

fn later<T: Unpin>(value: T) -> YieldOnce<T> {
    YieldOnce(Some(value), false)
}

impl Store for Waiting {
    type Snapshot = tuplekv_engine::Snapshot;
    type Watch = Watch;

    fn snapshot(&self) -> Self::Snapshot {
        self.db.snapshot()
    }

    fn watch_raw(&self, keys: Vec<KeyBytes>) -> Result<Watch, Error> {
        self.db.watch_raw(keys)
    }

    fn snapshot_versionstamp(snapshot: &Self::Snapshot) -> Versionstamp {
        Database::snapshot_versionstamp(snapshot)
    }

    fn get_latest_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        self.db.get_latest_raw(key)
    }

    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        match self.db.commit(write) {
            Ok(CommitResult::Committed { .. }) if self.lose_next.swap(false, Ordering::SeqCst) => {
                Err(Error::outcome_unknown(
                    "the connection failed before the commit's answer came",
                ))
            }
            other => other,
        }
    }

    fn commit_async(
        &self,
        write: AtomicWrite,
    ) -> impl std::future::Future<Output = Result<CommitResult, Error>> + Send + 'static {
        later(self.commit(write))
    }

    fn get_raw_async(
        snapshot: &Self::Snapshot,
        key: &[u8],
    ) -> impl std::future::Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<>
    {
        later(snapshot.get_raw(key))
    }

    fn scan_async(
        snapshot: &Self::Snapshot,
        range: &ByteRange,
        reverse: bool,
        limit: usize,
    ) -> impl std::future::Future<Output = Result<Vec<Entry>, Error>> + Send + 'static + use<> {
        later(snapshot.scan(range, reverse, limit))
    }

    fn get_latest_raw_async(
        &self,
        key: &[u8],
    ) -> impl std::future::Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<>
    {
        later(self.db.get_latest_raw(key))
    }
}
