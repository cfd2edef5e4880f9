//! Stores for the async tests: [`Slow`], a database whose async reads and commits are each
//! answered only after the caller's task was suspended once (as on a network round trip),
//! and which can lose the answers of commits it applied; and helpers to open the stores the
//! tests run over.
#![allow(dead_code, reason = "each test file uses part of it")]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tuplekv_engine::{
    AtomicWrite, ByteRange, CommitResult, Database, Durability, Entry, Error, KeyBytes, Options,
    ReadView, Snapshot, Store, Versionstamp, Watch,
};
use tuplekv_sequence::{Mode, SequenceOptions, Sequences};

/// Resolves to its value on its third poll. A replay round polls a store's future once
/// before it suspends the round and awaits it, so a future ready on its second poll would
/// answer without the task ever being suspended; this one returns `Pending` to the executor
/// once, as a network round trip would.
struct Yields<T>(Option<T>, u8);

impl<T: Unpin> Future for Yields<T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        if self.1 >= 2 {
            Poll::Ready(self.0.take().expect("polled after ready"))
        } else {
            self.1 += 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

fn later<T: Unpin>(value: T) -> Yields<T> {
    Yields(Some(value), 0)
}

/// A database whose async reads and commits each suspend the caller's task once; clones
/// share it.
#[derive(Clone)]
pub(crate) struct Slow {
    pub(crate) db: Database,
    /// This many commits from now are applied and then answer `OutcomeUnknown`.
    lose: Arc<AtomicU64>,
}

impl Slow {
    pub(crate) fn new(db: Database) -> Self {
        Slow {
            db,
            lose: Arc::default(),
        }
    }

    /// The next `n` commits are applied, and then their answer is lost.
    pub(crate) fn lose_answers(&self, n: u64) {
        self.lose.store(n, Ordering::SeqCst);
    }
}

impl Store for Slow {
    type Snapshot = Snapshot;
    type Watch = Watch;

    fn snapshot(&self) -> Snapshot {
        self.db.snapshot()
    }
    fn watch_raw(&self, keys: Vec<KeyBytes>) -> Result<Watch, Error> {
        self.db.watch_raw(keys)
    }
    fn snapshot_versionstamp(snapshot: &Snapshot) -> Versionstamp {
        Database::snapshot_versionstamp(snapshot)
    }
    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error> {
        let lose = self
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let result = self.db.commit(write);
        if lose {
            let _ = result?;
            return Err(Error::outcome_unknown("the answer was lost (on purpose)"));
        }
        result
    }
    fn commit_async(
        &self,
        write: AtomicWrite,
    ) -> impl Future<Output = Result<CommitResult, Error>> + Send + 'static {
        later(self.commit(write))
    }
    fn get_raw_async(
        snapshot: &Snapshot,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<> {
        later(snapshot.get_raw(key))
    }
    fn scan_async(
        snapshot: &Snapshot,
        range: &ByteRange,
        reverse: bool,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Entry>, Error>> + Send + 'static + use<> {
        later(snapshot.scan(range, reverse, limit))
    }
    fn get_latest_raw_async(
        &self,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Entry>, Error>> + Send + 'static + use<> {
        later(self.db.get_latest_raw(key))
    }
}

/// A durable database that syncs every commit, in a fresh directory (kept alive by the
/// returned guard).
pub(crate) fn durable() -> (Database, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let db = Database::open(
        dir.path(),
        Options {
            durability: Durability::Sync,
            ..Options::default()
        },
    )
    .expect("open the durable database");
    (db, dir)
}

/// The sequences of `store`, with `prefix` created in `mode` (width 6).
pub(crate) fn sequences<S: Store + Clone>(store: S, prefix: &str, mode: Mode) -> Sequences<S> {
    let seqs = Sequences::new(store);
    seqs.create(
        prefix,
        SequenceOptions {
            mode,
            width: 6,
            ..SequenceOptions::default()
        },
    )
    .expect("create the sequence");
    seqs
}

/// A multi-thread tokio runtime with two workers.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}
