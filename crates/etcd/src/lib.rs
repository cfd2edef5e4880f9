//! [`EtcdStore`]: a tuplekv [`Store`] on an etcd v3 cluster, so a store outlives the machine
//! it runs on: etcd replicates every commit through Raft, and a cluster of three keeps
//! serving, with no acknowledged write lost, when one member dies.
//!
//! ```no_run
//! use tuplekv_engine::{Store, key};
//! use tuplekv_etcd::EtcdStore;
//!
//! let store = EtcdStore::connect(&["http://127.0.0.1:2379"], b"app/")?;
//! store.atomic().set(&key!["greeting"], 1u64).commit()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The mapping
//! - A store lives under a key prefix, so one cluster holds several. The prefix may not hold
//!   a zero byte, and one ends it: an encoded tuple key `k` is the etcd key
//!   `prefix ++ 00 ++ "d" ++ k` (etcd orders keys by their bytes, as tuplekv does), so no
//!   store's keys fall among another's, whatever their prefixes (`a` and `a00d…` cannot both
//!   be prefixes). `prefix ++ 00 ++ "m"` is the marker every commit writes: etcd gives a
//!   transaction without a write no revision, and the marker's `mod_revision` is the store's
//!   last commit. `prefix ++ 00 ++ "g"` is the collection fence (module `collect`).
//! - A versionstamp is the etcd revision of the commit (8 bytes big-endian, then two zero
//!   bytes). Revisions count every write to the cluster, so the stamps of one store leave
//!   gaps; they still grow with every commit.
//! - An etcd value is an envelope: the value's deadline, its encoding and its bytes (module
//!   `envelope`). A deletion writes a tombstone, so that a range comparison (a transaction
//!   that listed) sees it; reads and checks take tombstones and values past their deadline
//!   for absent. A background task collects them (module `collect`, [`CollectOptions`]).
//! - A commit is one etcd transaction (module `commit`): checks and range checks are
//!   comparisons, mutations are puts folded per key, sum/min/max are computed here and
//!   guarded by a comparison with a bounded retry, and a failed transaction's `else` branch
//!   reads what it takes to say which checks failed.
//! - A numbered commit ([`AtomicWrite::numbering`]) takes its numbers from the counter's last
//!   state seen and guards the counter in the same transaction; a counter another writer
//!   moved is guessed past (nested branches, one per move the store saw it make lately)
//!   or read again and the commit resent, never surfaced as a conflict, at most
//!   [`NUMBERED_COMMIT_ATTEMPTS_MAX`] transactions. Numbered commits of one store on one counter queue in that counter's lane
//!   and share transactions (the `i`-th at revision `R` has the stamp `R` followed by `i` as
//!   two bytes); [`EtcdStore::numbering_stats`] counts the transactions and the retries.
//! - A snapshot reads at one revision, fixed by its first read. A revision that etcd has
//!   compacted gives [`Error::SnapshotExpired`].
//! - A commit with versionstamped keys ([`MutationKind::SetSuffixVersionstampedKey`]) must
//!   name its versionstamp before etcd assigns a revision, so it claims one: the current
//!   revision followed by `00 01` (or, after numbered commits that shared a transaction, the
//!   two bytes above the highest of theirs), guarded by a comparison of the marker that
//!   fails if any other commit of the store landed meanwhile (then it is tried again, at most
//!   [`STAMPED_COMMIT_ATTEMPTS_MAX`] times). Its values carry the claimed stamp in their
//!   envelopes. Stamps still grow with every commit and are never shared, but such commits
//!   serialize with all others: under a heavy write load they may give
//!   [`Error::TransactionConflict`]. What a claimed stamp does not promise:
//!   - every process writing a store must run a version that writes the marker with every
//!     commit (this one does; none before it was released), and, once numbered commits
//!     share transactions, one that reads the stamp suffixes of their values and the marker;
//!   - a snapshot's (or a watch update's) stamp is its revision. When other writers (another
//!     store on the cluster, the collector) move etcd's revision while a claimed commit is in
//!     flight, a snapshot taken in between can have a stamp above the claimed one without
//!     seeing that commit. Stamps of the store's own commits keep their order; range checks
//!     compare revisions and stay sound; nothing in tuplekv compares an entry's stamp with a
//!     snapshot's;
//!   - a check of a revision's stamp compares the key's `mod_revision`: it would also pass
//!     against a claimed commit that landed at that revision. Only a stamp taken from a
//!     snapshot or a watch, not from an entry, can name such a revision.
//!
//! # The cluster's limits
//! etcd refuses transactions of more than 128 operations and requests over 1.5 MiB by
//! default; run it with `--max-txn-ops` of at least [`TXN_OPS_MAX`] and
//! `--max-request-bytes` of 4 MiB (as `tuplekv_testkit::etcd::Cluster` does). A commit past
//! our own limits is refused before anything is sent.
//!
//! # Errors
//! etcd's answers are told apart by gRPC status code (module `errors`): a refusal made
//! before anything was applied is definite ([`Error::Remote`] with etcd's message, or
//! [`Error::Unavailable`] when the request was never proposed), a commit that failed after
//! it was sent is [`Error::OutcomeUnknown`], and reads retry transient failures within
//! [`READ_RETRY_BUDGET`].
//!
//! # Threads
//! The store runs its own small tokio runtime; the blocking [`Store`] methods wait on it from
//! any thread (never from inside a runtime's task).
//!
//! # Async use
//! Every read and commit also has a future that waits without holding a thread
//! ([`Store::get_raw_async`], [`Store::scan_async`], [`Store::snapshot_versionstamp_async`],
//! [`Store::get_latest_raw_async`], [`Store::commit_async`]): each etcd request runs as a
//! task of the store's runtime, and the caller's task (on any runtime or executor) awaits its
//! answer, so [`Store::get_async`], [`Store::list_async`] and [`Store::transaction_async`]
//! never block it, even on a current-thread runtime. A snapshot's first read fixes its
//! revision whether it is async or blocking. Dropping a read's future aborts its request; a
//! commit, once started, runs to its end.
//!
//! The store does not offer to run on the caller's runtime (yet): `etcd-client`'s channels
//! spawn their connection workers with `tokio::spawn` on whichever runtime connects them,
//! outside the store's reach (it could not abort them with its last handle, only wait for
//! every clone of the client to go), and its blocking methods, which the layers above call,
//! would need the care `tuplekv-remote` takes on such a runtime. The two threads of its own
//! runtime are the cost; the async methods above already never block the caller's.
//!
//! [`MutationKind::SetSuffixVersionstampedKey`]: tuplekv_engine::MutationKind::SetSuffixVersionstampedKey
//! [`AtomicWrite::numbering`]: tuplekv_engine::AtomicWrite::numbering

mod collect;
mod commit;
mod envelope;
mod errors;
mod snapshot;
mod watch;

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_client::{Client, ConnectOptions, GetOptions, KvClient, WatchClient};
use tuplekv_engine::limits::{KEY_SIZE_MAX_WRITE, WATCH_KEYS_MAX};
use tuplekv_engine::{
    AtomicWrite, CommitResult, Entry, Error, Health, KeyBytes, Store, Versionstamp,
};

pub use collect::{
    COLLECT_BUSY_PAUSE, COLLECT_INTERVAL_DEFAULT, COLLECT_SCAN_MAX, CollectOptions, Collected,
};
pub use commit::{
    COMBINED_BYTES_MAX, COMBINED_COMMITS_MAX, COMMIT_ATTEMPTS_MAX, COUNTER_GUESSES_MAX,
    COUNTERS_REMEMBERED_MAX, GUESSES_BYTES_MAX, MOVES_FRESH, MOVES_KEPT,
    NUMBERED_COMMIT_ATTEMPTS_MAX, NumberingStats, STAMPED_COMMIT_ATTEMPTS_MAX,
};
pub use errors::{READ_RETRY_BUDGET, READ_RETRY_PAUSE, READ_RETRY_PAUSE_MAX};
pub use snapshot::EtcdSnapshot;
pub use watch::{
    EtcdWatch, WATCH_KEEP_ALIVE, WATCH_READ_GAP_MIN, WATCH_RESYNC_INTERVAL, WATCH_RETRY_PAUSE,
};

/// Most operations (comparisons, or writes, or reads) one commit's etcd transaction may
/// hold: the cluster must run with `--max-txn-ops` at least this.
pub const TXN_OPS_MAX: usize = 4096;

/// Longest wait for one etcd request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest wait for [`Store::health`]'s read of the cluster: a probe must answer quickly,
/// and a cluster that takes longer than this for a count-only read is not ready.
pub const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long [`Store::health`] reuses its last answer, so that probes (several servers, several
/// probers) do not each send the cluster a read.
pub const HEALTH_CACHE_TTL: Duration = Duration::from_secs(1);

/// Longest wait for a connection to a member.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Largest answer the client accepts: a list batch of `LIST_BATCH_SIZE_MAX` values of
/// `VALUE_SIZE_MAX` bytes, with room for keys.
pub const RESPONSE_BYTES_MAX: usize = 128 * 1024 * 1024;

/// Threads of the store's runtime.
const IO_THREADS: usize = 2;

/// The current Unix time in milliseconds, the clock deadlines are read against.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Why [`EtcdStore::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// No endpoint was given.
    #[error("no etcd endpoint given")]
    NoEndpoints,
    /// The client's runtime could not start.
    #[error("could not start the client's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The key prefix holds a zero byte, which ends a prefix in etcd's keys.
    #[error("an etcd key prefix may not hold a zero byte")]
    PrefixHasZeroByte,
    /// The cluster could not be reached.
    #[error(transparent)]
    Store(#[from] Error),
}

/// Where a store's keys live in etcd.
#[derive(Debug, Clone)]
pub(crate) struct Space {
    /// The store's prefix and the zero byte that ends it: the start of every key it owns.
    prefix: Arc<[u8]>,
    /// The last state seen of the collection fence ([`Space::fence`]): its `mod_revision`
    /// and the bound it holds, (0, 0) before any was seen.
    fence_seen: Arc<Mutex<(i64, u64)>>,
}

impl Space {
    /// The etcd key of tuplekv key `key`.
    pub(crate) fn data(&self, key: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix.len() + 1 + key.len());
        out.extend_from_slice(&self.prefix);
        out.push(b'd');
        out.extend_from_slice(key);
        out
    }

    /// The tuplekv key of etcd key `key`, if it is one of this store's.
    pub(crate) fn user_key<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        key.strip_prefix(&*self.prefix)?.strip_prefix(b"d")
    }

    /// The first etcd key after this store's data keys.
    pub(crate) fn data_end(&self) -> Vec<u8> {
        let mut out = self.prefix.to_vec();
        out.push(b'e');
        out
    }

    /// The collection fence: the highest revision of a tombstone the collector may have
    /// removed (module `collect`). A commit with range checks compares its `mod_revision`.
    pub(crate) fn fence(&self) -> Vec<u8> {
        let mut out = self.prefix.to_vec();
        out.push(b'g');
        out
    }

    /// The last state seen of the fence: `(mod_revision, bound)`.
    pub(crate) fn fence_seen(&self) -> (i64, u64) {
        *self
            .fence_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a state seen of the fence, unless a newer one was.
    pub(crate) fn saw_fence(&self, mod_revision: i64, bound: u64) {
        let mut seen = self
            .fence_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if mod_revision >= seen.0 {
            *seen = (mod_revision, bound);
        }
    }

    /// The marker: every commit writes it, so its `mod_revision` is the store's last commit
    /// (and a commit without mutations still gets a revision).
    pub(crate) fn marker(&self) -> Vec<u8> {
        let mut out = self.prefix.to_vec();
        out.push(b'm');
        out
    }
}

/// Owns the runtime; dropped with the last handle, snapshot or watch.
struct Inner {
    runtime: Option<tokio::runtime::Runtime>,
    /// The background collector, stopped with the last handle.
    collector: Option<tokio::task::AbortHandle>,
    collect: collect::Collector,
    handle: tokio::runtime::Handle,
    kv: KvClient,
    /// The cluster's client URLs, for the watches' own connection.
    endpoints: Vec<String>,
    /// Watches' client, on a connection of its own (made at the first watch): a watch
    /// stream's flow control can then never hold up reads and commits.
    watch: tokio::sync::OnceCell<WatchClient>,
    space: Space,
    /// Numbered commits' lanes, the counters' last states seen, and their counts.
    counters: Arc<commit::Counters>,
    /// [`Store::health`]'s last answer and when it was found; held while a check runs, so
    /// concurrent probes share one read.
    health: Mutex<Option<(Instant, Health)>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(collector) = self.collector.take() {
            collector.abort();
        }
        // Never blocks, so the last handle may be dropped anywhere (even on a runtime).
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A [`Store`] on an etcd cluster: cheap to clone (clones share one client).
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &String::from_utf8_lossy(self.prefix()))
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to the cluster at `endpoints` (client URLs such as `http://127.0.0.1:2379`)
    /// and opens the store under key `prefix`, collecting garbage in the background every
    /// [`COLLECT_INTERVAL_DEFAULT`]. Reads once, so an unreachable cluster fails here.
    ///
    /// # Errors
    /// [`ConnectError`].
    pub fn connect<E: AsRef<str>>(
        endpoints: &[E],
        prefix: &[u8],
    ) -> Result<EtcdStore, ConnectError> {
        EtcdStore::connect_with(endpoints, prefix, &CollectOptions::default())
    }

    /// As [`EtcdStore::connect`], with the background collector set by `collect`.
    ///
    /// # Errors
    /// [`ConnectError`].
    pub fn connect_with<E: AsRef<str>>(
        endpoints: &[E],
        prefix: &[u8],
        collect: &CollectOptions,
    ) -> Result<EtcdStore, ConnectError> {
        if endpoints.is_empty() {
            return Err(ConnectError::NoEndpoints);
        }
        if prefix.contains(&0) {
            return Err(ConnectError::PrefixHasZeroByte);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(IO_THREADS)
            .thread_name("tuplekv-etcd")
            .enable_all()
            .build()
            .map_err(ConnectError::Runtime)?;
        let handle = runtime.handle().clone();
        let endpoints: Vec<String> = endpoints.iter().map(|e| e.as_ref().to_owned()).collect();
        let watch_endpoints = endpoints.clone();
        let options = ConnectOptions::new()
            .with_timeout(REQUEST_TIMEOUT)
            .with_connect_timeout(CONNECT_TIMEOUT);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        handle.spawn(async move {
            let _ = tx.send(Client::connect(endpoints, Some(options)).await);
        });
        let client = rx
            .recv()
            .map_err(|_| Error::unavailable("the client's runtime stopped"))?
            .map_err(|e| Error::unavailable(format!("could not connect to etcd: {e}")))?;
        let kv = client
            .kv_client()
            .max_decoding_message_size(RESPONSE_BYTES_MAX);
        let space = Space {
            prefix: Arc::from([prefix, &[0]].concat()),
            fence_seen: Arc::new(Mutex::new((0, 0))),
        };
        let collector = collect::Collector::new(kv.clone(), space.clone());
        // The task holds the client, never a handle: it stops when the last handle drops.
        let background = collect
            .interval
            .map(|interval| handle.spawn(collector.clone().run(interval)).abort_handle());
        let store = EtcdStore {
            inner: Arc::new(Inner {
                runtime: Some(runtime),
                collector: background,
                collect: collector,
                handle,
                kv,
                endpoints: watch_endpoints,
                watch: tokio::sync::OnceCell::new(),
                space,
                counters: Arc::default(),
                health: Mutex::new(None),
            }),
        };
        store.get_latest_raw(b"\x01")?;
        Ok(store)
    }

    /// Runs one pass of the collector now (as the background task does every interval):
    /// examines at most [`COLLECT_SCAN_MAX`] keys from where the last pass stopped, turns
    /// expired values into tombstones and removes tombstones at or below the cluster's
    /// compaction revision.
    ///
    /// # Errors
    /// [`Error::Unavailable`] and the other errors of a read or commit; what was done before
    /// the error stays done.
    pub fn collect_garbage(&self) -> Result<Collected, Error> {
        let collector = self.inner.collect.clone();
        self.block_on(async move { collector.pass().await })
    }

    /// The etcd key prefix this store lives under, as given to [`EtcdStore::connect`] (its
    /// keys begin with it and a zero byte).
    pub fn prefix(&self) -> &[u8] {
        let owned = &self.inner.space.prefix;
        owned
            .get(..owned.len().saturating_sub(1))
            .unwrap_or_default()
    }

    /// Counts of this store's numbered commits (over all its clones, since it connected):
    /// how many committed, the etcd transactions they took, how many of those a counter
    /// moved by another writer refused (each retried without a conflict reaching the
    /// caller), how many landed on a later guess of the counter and how many guesses they
    /// carried, and how many commits shared a transaction. See module `commit` for the
    /// transactions.
    pub fn numbering_stats(&self) -> NumberingStats {
        self.inner.counters.stats()
    }

    /// [`Store::health`] with a given timeout and cache lifetime.
    fn health_within(&self, timeout: Duration, ttl: Duration) -> Health {
        let mut cached = self
            .inner
            .health
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((at, health)) = &*cached
            && at.elapsed() < ttl
        {
            return health.clone();
        }
        let mut kv = self.kv();
        let marker = self.space().marker();
        let checked = self
            .block_on(async move {
                let read = kv.get(marker, Some(GetOptions::new().with_count_only()));
                Ok(match tokio::time::timeout(timeout, read).await {
                    Ok(Ok(_)) => Health::Ready,
                    Ok(Err(e)) => Health::NotReady(format!("the etcd cluster refused a read: {e}")),
                    Err(_) => Health::NotReady(format!(
                        "the etcd cluster did not answer a read within {timeout:?}"
                    )),
                })
            })
            .unwrap_or_else(|e| Health::NotReady(e.to_string()));
        *cached = Some((Instant::now(), checked.clone()));
        checked
    }

    pub(crate) fn kv(&self) -> KvClient {
        self.inner.kv.clone()
    }

    pub(crate) fn space(&self) -> Space {
        self.inner.space.clone()
    }

    fn counters(&self) -> Arc<commit::Counters> {
        Arc::clone(&self.inner.counters)
    }

    /// The watches' client, connecting it at the first call. Its connection requires a
    /// leader (a member cut off from the quorum ends its watch streams instead of going
    /// quiet) and sends keep-alives (a member that froze is noticed).
    pub(crate) async fn watch_client(&self) -> Result<WatchClient, etcd_client::Error> {
        let endpoints = self.inner.endpoints.clone();
        self.inner
            .watch
            .get_or_try_init(|| async move {
                let options = ConnectOptions::new()
                    .with_connect_timeout(CONNECT_TIMEOUT)
                    .with_require_leader(true)
                    .with_keep_alive(WATCH_KEEP_ALIVE, WATCH_KEEP_ALIVE);
                let client = Client::connect(endpoints, Some(options)).await?;
                Ok(client
                    .watch_client()
                    .max_decoding_message_size(RESPONSE_BYTES_MAX))
            })
            .await
            .cloned()
    }

    pub(crate) fn spawn(
        &self,
        fut: impl Future<Output = ()> + Send + 'static,
    ) -> tokio::task::AbortHandle {
        self.inner.handle.spawn(fut).abort_handle()
    }

    /// Runs `fut` on the store's runtime and waits for it on this thread.
    pub(crate) fn block_on<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, Error>> + Send + 'static,
    ) -> Result<T, Error> {
        self.block_on_or(fut, || Error::unavailable("the client's runtime stopped"))
    }

    fn block_on_or<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, Error>> + Send + 'static,
        lost: impl FnOnce() -> Error,
    ) -> Result<T, Error> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.inner.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().unwrap_or_else(|_| Err(lost()))
    }

    /// Runs `fut` as a task of the store's runtime, and answers it without holding a thread
    /// (on any executor); dropping the answer's future aborts the task. Holds the store (and
    /// its runtime) until the task is done; the task itself never holds the store.
    pub(crate) fn run_async<T, F>(
        &self,
        fut: F,
    ) -> impl Future<Output = Result<T, Error>> + Send + 'static + use<T, F>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
    {
        self.run_async_or(fut, || Error::unavailable("the client's runtime stopped"))
    }

    /// [`EtcdStore::run_async`] with the error to give if the task is lost.
    fn run_async_or<T, F, L>(
        &self,
        fut: F,
        lost: L,
    ) -> impl Future<Output = Result<T, Error>> + Send + 'static + use<T, F, L>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
        L: FnOnce() -> Error + Send + 'static,
    {
        let task = AbortOnDrop(self.inner.handle.spawn(fut));
        let inner = Arc::clone(&self.inner);
        async move {
            let out = match task.await {
                Ok(out) => out,
                Err(_) => Err(lost()),
            };
            // Dropped here, off the store's runtime (see `Inner`).
            drop(inner);
            out
        }
    }
}

/// A task's handle that aborts the task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Polls `future` to its end on this thread, parking between polls: for the blocking reads,
/// whose futures only wait for tasks of the store's runtime.
pub(crate) fn wait<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

impl Store for EtcdStore {
    type Snapshot = EtcdSnapshot;
    type Watch = EtcdWatch;

    fn snapshot(&self) -> EtcdSnapshot {
        EtcdSnapshot::new(self.clone(), false)
    }

    fn watch_raw(&self, keys: Vec<KeyBytes>) -> Result<EtcdWatch, Error> {
        if keys.len() > WATCH_KEYS_MAX {
            return Err(Error::TooManyWatchedKeys { count: keys.len() });
        }
        if let Some(k) = keys.iter().find(|k| k.len() > KEY_SIZE_MAX_WRITE) {
            return Err(Error::KeyTooLargeForWrite { size: k.len() });
        }
        Ok(EtcdWatch::start(self, keys))
    }

    /// The snapshot's revision as a stamp, fixed by a read when no read fixed it yet;
    /// [`Versionstamp::ZERO`] if that read fails ([`Store::try_snapshot_versionstamp`] says
    /// why).
    fn snapshot_versionstamp(snapshot: &EtcdSnapshot) -> Versionstamp {
        snapshot.try_versionstamp().unwrap_or(Versionstamp::ZERO)
    }

    fn try_snapshot_versionstamp(snapshot: &EtcdSnapshot) -> Result<Versionstamp, Error> {
        snapshot.try_versionstamp()
    }

    fn get_latest_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        tuplekv_engine::ReadView::get_raw(&EtcdSnapshot::new(self.clone(), true), key)
    }

    fn get_raw_async(
        snapshot: &EtcdSnapshot,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<> {
        snapshot.get_raw_async(key)
    }

    fn scan_async(
        snapshot: &EtcdSnapshot,
        range: &tuplekv_engine::ByteRange,
        reverse: bool,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Entry>, Error>> + Send + 'static + use<> {
        snapshot.scan_async(range, reverse, limit)
    }

    fn snapshot_versionstamp_async(
        snapshot: &EtcdSnapshot,
    ) -> impl Future<Output = Result<Versionstamp, Error>> + Send + 'static + use<> {
        snapshot.try_versionstamp_async()
    }

    fn get_latest_raw_async(
        &self,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<> {
        EtcdSnapshot::new(self.clone(), true).get_raw_async(key)
    }

    /// A count-only, linearizable read of the store's marker (so a cluster without a quorum
    /// is not ready), bounded by [`HEALTH_CHECK_TIMEOUT`]; its answer is reused for
    /// [`HEALTH_CACHE_TTL`]. Blocks the calling thread (never call it from a runtime's task).
    fn health(&self) -> Health {
        self.health_within(HEALTH_CHECK_TIMEOUT, HEALTH_CACHE_TTL)
    }

    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error> {
        let task = commit::commit(self.kv(), self.space(), self.counters(), write);
        self.block_on_or(task, || {
            Error::outcome_unknown("the client's runtime stopped during the commit")
        })
    }

    fn commit_async(
        &self,
        write: AtomicWrite,
    ) -> impl Future<Output = Result<CommitResult, Error>> + Send + 'static {
        let task = self.inner.handle.spawn(commit::commit(
            self.kv(),
            self.space(),
            self.counters(),
            write,
        ));
        // Keeps the runtime alive until the commit is done. Not aborted if the future is
        // dropped: a commit that was sent runs to its end.
        let inner = Arc::clone(&self.inner);
        async move {
            let out = task.await.unwrap_or_else(|e| {
                Err(Error::outcome_unknown(format!(
                    "the commit task stopped: {e}"
                )))
            });
            drop(inner);
            out
        }
    }
}
