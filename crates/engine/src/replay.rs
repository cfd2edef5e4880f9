//! Async operations without async code: a synchronous operation (a transaction closure, a
//! collection write, a sequence's block reservation) run in **rounds** on a [`Replay`], a
//! store that never waits.
//!
//! A store whose reads or commits wait (on the network, on a log sync) offers each of them
//! as a future ([`Store::get_raw_async`], [`Store::scan_async`],
//! [`Store::get_latest_raw_async`], [`Store::snapshot_versionstamp_async`],
//! [`Store::commit_async`]). [`run`] calls the operation with a [`Replay`] of the store. Each
//! read or commit the operation makes is the *n*-th call of its round: the first time it is
//! made, the replay starts the store's future and polls it once. A future that is ready at
//! once (every read of the in-memory [`Database`](crate::Database), and its commits) answers
//! inline, and the operation goes on. One that is not is kept, and every call after it
//! answers [`Error::Suspended`]; the operation soon gives up, its result is discarded, [`run`]
//! awaits the future, and calls the operation again. That round finds every earlier call
//! answered exactly as before, from the replay's record, and goes at least one call further.
//! A round never blocks: the caller's task waits only where a future is awaited, and holds
//! no thread while it does.
//!
//! What makes this sound:
//! - **The operation is a function of what it reads.** Rounds see the same answers in the
//!   same order, so they make the same calls: the same snapshots, reads and writes. A commit
//!   is made once, in the round that first reaches it; later rounds get its result from the
//!   record. Closures a caller passes to an async operation run again each round, so they must
//!   not have side effects (the rule a transaction's closure follows already: it runs again on
//!   conflict); the layers above keep what callers' closures return, so a closure that builds a
//!   record runs once per attempt.
//! - **A call that differs from the record is not answered from it.** Process-wide caches
//!   (a collection's index states) may let a later round skip a read: when a round's call
//!   differs from the recorded one and no commit was recorded after it, the record is cut
//!   there and the round goes on with fresh calls. When a commit was recorded after it, the
//!   operation fails with [`Error::Unsupported`] (the commit stands: read to find out) rather
//!   than answer one call with another's result.
//! - **A discarded round changes nothing.** Once a round is suspended, a commit answers
//!   [`Error::Suspended`] without being made, and a transaction stops at once
//!   ([`Store::interrupted`]); backoff between a transaction's attempts is itself a call
//!   ([`Store::backoff`]), awaited with a timer instead of slept.
//! - **It ends.** Each round answers one more call than the one before, and [`run`] fails with
//!   [`Error::TooManyRounds`] past [`REPLAY_ROUNDS_MAX`].
//!
//! ```
//! use tuplekv_engine::{Database, Store, key, replay};
//!
//! let db = Database::in_memory();
//! db.set(&key!["n"], 1u64)?;
//! // A synchronous operation on a store, awaited: this one reads and writes in one transaction.
//! let n = pollster::block_on(replay::run(&db, |store| {
//!     store.transaction(|tx| {
//!         let n = tx.get(&key!["n"])?.and_then(|e| e.value.as_u64()).unwrap_or(0);
//!         tx.set(&key!["n"], n + 1);
//!         Ok::<_, tuplekv_engine::Error>(n + 1)
//!     })
//! }))?;
//! assert_eq!(n, 2);
//! # Ok::<(), tuplekv_engine::Error>(())
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::Mutex;
use tuplekv_codec::ByteRange;

use crate::atomic::{AtomicWrite, CommitResult};
use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::limits::REPLAY_ROUNDS_MAX;
use crate::store::{Entry, Health, ReadView, Store};
use crate::value::Versionstamp;

/// What a call of a round asked; a later round's call must ask the same to get its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Get {
        snapshot: usize,
        key: KeyBytes,
    },
    Scan {
        snapshot: usize,
        start: KeyBytes,
        end: KeyBytes,
        reverse: bool,
        limit: usize,
    },
    Stamp {
        snapshot: usize,
    },
    Latest {
        key: KeyBytes,
    },
    /// A commit, by a fingerprint of its write (a hash: the write is not kept).
    Commit(u64),
    Backoff,
}

impl Call {
    fn is_commit(&self) -> bool {
        matches!(self, Call::Commit(_))
    }
}

/// What a call got.
#[derive(Debug, Clone)]
enum Answer {
    Entry(Result<Option<Entry>, Error>),
    Entries(Result<Vec<Entry>, Error>),
    Stamp(Result<Versionstamp, Error>),
    Commit(Result<CommitResult, Error>),
    Slept,
}

type Pending = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// The record rounds share.
struct State<S: Store> {
    /// The snapshots the operation took, in the order it took them.
    snapshots: Vec<S::Snapshot>,
    /// Snapshots taken so far in this round.
    snapshots_taken: usize,
    /// Every answered call, in order.
    answers: Vec<(Call, Answer)>,
    /// Calls made so far in this round.
    calls: usize,
    /// The call this round is suspended on, with its future.
    pending: Option<(Call, Pending)>,
    /// The round made a call that differs from one recorded before a recorded commit.
    diverged: bool,
}

impl<S: Store> State<S> {
    fn new() -> Self {
        State {
            snapshots: Vec::new(),
            snapshots_taken: 0,
            answers: Vec::new(),
            calls: 0,
            pending: None,
            diverged: false,
        }
    }

    /// The round's next call: its recorded answer, or the answer of `start`'s future if it
    /// is ready when first polled. `None` when the round is suspended (on this call or an
    /// earlier one).
    fn call(&mut self, call: Call, start: impl FnOnce(&Self) -> Pending) -> Option<Answer> {
        if self.pending.is_some() || self.diverged {
            return None;
        }
        let n = self.calls;
        if let Some((recorded, answer)) = self.answers.get(n) {
            if *recorded == call {
                self.calls += 1;
                return Some(answer.clone());
            }
            if self.answers[n..].iter().any(|(c, _)| c.is_commit()) {
                self.diverged = true;
                return None;
            }
            self.answers.truncate(n);
        }
        self.calls += 1;
        let mut future = start(self);
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(answer) => {
                self.answers.push((call, answer.clone()));
                Some(answer)
            }
            Poll::Pending => {
                self.pending = Some((call, future));
                None
            }
        }
    }

    fn suspended(&self) -> bool {
        self.pending.is_some() || self.diverged
    }
}

type Shared<S> = Arc<Mutex<State<S>>>;

/// A store that never waits, over `S` (see the [module](self) docs). [`run`] makes one and
/// hands the operation `&Replay<S>`, which it uses as it would use `S`.
pub struct Replay<'s, S: Store> {
    store: &'s S,
    state: Shared<S>,
}

impl<S: Store> Clone for Replay<'_, S> {
    fn clone(&self) -> Self {
        Replay {
            store: self.store,
            state: Arc::clone(&self.state),
        }
    }
}

impl<S: Store> fmt::Debug for Replay<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Replay")
            .field("answered", &state.answers.len())
            .field("suspended", &state.suspended())
            .finish()
    }
}

impl<'s, S: Store> Replay<'s, S> {
    /// The store underneath.
    pub fn inner(&self) -> &'s S {
        self.store
    }

    /// Registers the round's next snapshot: the recorded one, or `take()`.
    fn next_snapshot(&self, take: impl FnOnce() -> S::Snapshot) -> ReplaySnapshot<S> {
        let mut state = self.state.lock();
        let index = state.snapshots_taken;
        state.snapshots_taken += 1;
        if index == state.snapshots.len() {
            state.snapshots.push(take());
        }
        ReplaySnapshot {
            state: Arc::clone(&self.state),
            index,
        }
    }
}

/// A snapshot of a [`Replay`]: the store's own snapshot, kept across rounds, whose reads are
/// calls of the round.
pub struct ReplaySnapshot<S: Store> {
    state: Shared<S>,
    index: usize,
}

impl<S: Store> Clone for ReplaySnapshot<S> {
    fn clone(&self) -> Self {
        ReplaySnapshot {
            state: Arc::clone(&self.state),
            index: self.index,
        }
    }
}

impl<S: Store> fmt::Debug for ReplaySnapshot<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplaySnapshot")
            .field("index", &self.index)
            .finish()
    }
}

impl<S: Store> ReplaySnapshot<S> {
    fn stamp(&self) -> Result<Versionstamp, Error> {
        let index = self.index;
        let answer = self
            .state
            .lock()
            .call(Call::Stamp { snapshot: index }, |st| {
                boxed(
                    S::snapshot_versionstamp_async(&st.snapshots[index]),
                    Answer::Stamp,
                )
            });
        match answer {
            Some(Answer::Stamp(r)) => r,
            _ => Err(Error::Suspended),
        }
    }
}

impl<S: Store> ReadView for ReplaySnapshot<S> {
    fn get_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        let index = self.index;
        let call = Call::Get {
            snapshot: index,
            key: KeyBytes::from(key),
        };
        let answer = self.state.lock().call(call, |st| {
            boxed(S::get_raw_async(&st.snapshots[index], key), Answer::Entry)
        });
        match answer {
            Some(Answer::Entry(r)) => r,
            _ => Err(Error::Suspended),
        }
    }

    fn scan(&self, range: &ByteRange, reverse: bool, limit: usize) -> Result<Vec<Entry>, Error> {
        let index = self.index;
        let call = Call::Scan {
            snapshot: index,
            start: KeyBytes::from(range.start.as_slice()),
            end: KeyBytes::from(range.end.as_slice()),
            reverse,
            limit,
        };
        let answer = self.state.lock().call(call, |st| {
            boxed(
                S::scan_async(&st.snapshots[index], range, reverse, limit),
                Answer::Entries,
            )
        });
        match answer {
            Some(Answer::Entries(r)) => r,
            _ => Err(Error::Suspended),
        }
    }

    fn reads_one_state(&self) -> bool {
        self.state.lock().snapshots[self.index].reads_one_state()
    }
}

/// A hash of everything a write commits: a later round's commit is taken for the recorded one
/// only if it hashes the same.
fn fingerprint(write: &AtomicWrite) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    write.hash(&mut hasher);
    hasher.finish()
}

/// Boxes a store's future as an answer's.
fn boxed<T: 'static>(
    future: impl Future<Output = T> + Send + 'static,
    wrap: fn(T) -> Answer,
) -> Pending {
    Box::pin(async move { wrap(future.await) })
}

impl<S: Store> Store for Replay<'_, S> {
    type Snapshot = ReplaySnapshot<S>;
    type Watch = S::Watch;

    fn snapshot(&self) -> Self::Snapshot {
        self.next_snapshot(|| self.store.snapshot())
    }

    fn transaction_snapshot(&self) -> Self::Snapshot {
        self.next_snapshot(|| self.store.transaction_snapshot())
    }

    fn watch_raw(&self, keys: Vec<KeyBytes>) -> Result<Self::Watch, Error> {
        self.store.watch_raw(keys)
    }

    /// [`Versionstamp::ZERO`] while the round is suspended (the round is discarded then).
    fn snapshot_versionstamp(snapshot: &Self::Snapshot) -> Versionstamp {
        snapshot.stamp().unwrap_or(Versionstamp::ZERO)
    }

    fn try_snapshot_versionstamp(snapshot: &Self::Snapshot) -> Result<Versionstamp, Error> {
        snapshot.stamp()
    }

    fn get_latest_raw(&self, key: &[u8]) -> Result<Option<Entry>, Error> {
        let call = Call::Latest {
            key: KeyBytes::from(key),
        };
        let answer = self.state.lock().call(call, |_| {
            boxed(self.store.get_latest_raw_async(key), Answer::Entry)
        });
        match answer {
            Some(Answer::Entry(r)) => r,
            _ => Err(Error::Suspended),
        }
    }

    /// Made once, in the first round that reaches it; later rounds get its result. A
    /// suspended round makes no commit.
    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error> {
        let mut state = self.state.lock();
        if state.suspended() {
            return Err(Error::Suspended);
        }
        let call = Call::Commit(fingerprint(&write));
        let answer = state.call(call, |_| {
            boxed(self.store.commit_async(write), Answer::Commit)
        });
        match answer {
            Some(Answer::Commit(r)) => r,
            _ => Err(Error::Suspended),
        }
    }

    fn health(&self) -> Health {
        self.store.health()
    }

    fn interrupted(&self) -> bool {
        self.state.lock().suspended()
    }

    /// A call whose future is a timer: the round is suspended, and [`run`] awaits the pause.
    fn backoff(&self, pause: Duration) {
        let _ = self.state.lock().call(Call::Backoff, |_| {
            Box::pin(async move {
                futures_timer::Delay::new(pause).await;
                Answer::Slept
            })
        });
    }
}

/// Runs the synchronous operation `op` on a [`Replay`] of `store`, in rounds, awaiting what
/// the store waits for between them (see the [module](self) docs), and returns what the
/// round that was not suspended returned.
///
/// `op` runs once per round, so it must not have side effects beyond the store's: it may run
/// a transaction, write a collection, read anything.
///
/// # Errors
/// What `op` returns; [`Error::TooManyRounds`] past [`REPLAY_ROUNDS_MAX`] rounds;
/// [`Error::Unsupported`] when a round's calls differed from the record after a commit was
/// made.
pub async fn run<'s, S, R, E, F>(store: &'s S, mut op: F) -> Result<R, E>
where
    S: Store,
    E: From<Error>,
    F: FnMut(&Replay<'s, S>) -> Result<R, E>,
{
    let replay = Replay {
        store,
        state: Arc::new(Mutex::new(State::new())),
    };
    for _ in 0..REPLAY_ROUNDS_MAX {
        let (call, future) = {
            let out = op(&replay);
            let mut state = replay.state.lock();
            if state.diverged {
                return Err(Error::Unsupported {
                    operation: "an async operation whose calls changed after it committed",
                    needs: "an operation that makes the same calls when given the same answers",
                }
                .into());
            }
            match state.pending.take() {
                None => return out,
                Some(pending) => pending,
            }
        };
        let answer = future.await;
        let mut state = replay.state.lock();
        state.answers.push((call, answer));
        state.calls = 0;
        state.snapshots_taken = 0;
    }
    Err(Error::TooManyRounds {
        rounds: REPLAY_ROUNDS_MAX,
    }
    .into())
}
