//! Group commit: how a durable database's commits reach the log. A committer applies its
//! operation to memory *unpublished* under the commit lock (readers keep reading the last
//! published version; later committers see it, so commits stay serial), queues its frame in
//! the pending batch, releases the lock, and waits on its own [`Waiter`]. A committer that
//! queues while nobody leads becomes the leader: it takes the whole pending batch, has the
//! log write it with one `write` and sync it once, publishes it, wakes exactly the committers
//! of that batch, and hands the lead to the first committer that queued meanwhile. Commits
//! keep being applied and batched while a sync runs, so one `fdatasync` serves every
//! committer that arrived meanwhile. If the write or the sync fails, the batch and every
//! commit applied after it are rolled back from memory and fail.
//!
//! An asynchronous commit ([`commit_async`], behind `Store::commit_async`) is applied and
//! queued the same way on the caller, but never leads: its future is woken with the outcome,
//! and when only such commits are queued the lead goes to the flusher thread, so concurrent
//! async committers hold no thread while their batch is written and synced.
//!
//! A commit whose checks fail (or whose mutation is refused) against versions not yet
//! published waits until they are published, then answers; if they are rolled back instead,
//! it runs again. So an answer never rests on a commit that did not happen, and a loser that
//! reads after its answer sees the winner.
//!
//! Also here, because they need both the store and the log: checkpoints (rotate the log at a
//! batch boundary, pin a snapshot, write it, delete what it replaces) and the background
//! thread (periodic syncs in [`Durability::Buffered`], checkpoints as the log grows) and the
//! flusher thread.
//!
//! Locks, outermost first: `checkpoint_lock`; the store's commit lock; `pending`; then the
//! log's own (`durable/wal.rs`). `background` and each [`Waiter`]'s state are taken alone.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_epoch as epoch;
use parking_lot::{Condvar, Mutex};

use crate::atomic::{AtomicWrite, CommitResult, MutationKind};
use crate::durable::wal::Wal;
use crate::durable::{Durability, checkpoint};
use crate::error::Error;
use crate::inner::Inner;
use crate::key_bytes::KeyBytes;
use crate::pipeline::{LogSink, Slots, validate};
use crate::snapshot::Snapshot;
use crate::value::Versionstamp;
use crate::version::{Version, now_ms, version_at};

/// Where a committer waiting for durability finds its outcome.
type Slot = Arc<Waiter>;

/// A committer waiting for durability: it sleeps on its own condition variable until its
/// outcome arrives or it is handed the lead (to flush the next batch), so a flush wakes
/// exactly the committers it carried, and one more to lead. An asynchronous committer
/// ([`commit_async`]) never leads: it leaves a [`Waker`] instead of sleeping, and the lead
/// goes to the flusher thread, whose own `Waiter` it is handed.
struct Waiter {
    state: Mutex<WaiterState>,
    wake: Condvar,
    /// Whether the lead may be handed to this waiter: a thread sleeps on it.
    leads: bool,
}

#[derive(Default)]
struct WaiterState {
    outcome: Option<Result<(), Error>>,
    lead: bool,
    /// An asynchronous committer's task, woken with the outcome.
    waker: Option<Waker>,
}

/// What wakes a [`Waiter`].
enum Woken {
    /// Its commit is durable and published (`Ok`), or failed and was rolled back.
    Outcome(Result<(), Error>),
    /// It now leads: it flushes the pending batch.
    Lead,
}

impl Default for Waiter {
    fn default() -> Self {
        Waiter::new(true)
    }
}

impl Waiter {
    fn new(leads: bool) -> Waiter {
        Waiter {
            state: Mutex::new(WaiterState::default()),
            wake: Condvar::new(),
            leads,
        }
    }

    fn finish(&self, outcome: Result<(), Error>) {
        let waker = {
            let mut state = self.state.lock();
            state.outcome = Some(outcome);
            state.waker.take()
        };
        self.wake.notify_one();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn hand_lead(&self) {
        debug_assert!(
            self.leads,
            "the lead was handed to an asynchronous committer"
        );
        self.state.lock().lead = true;
        self.wake.notify_one();
    }

    fn wait(&self) -> Woken {
        let mut state = self.state.lock();
        loop {
            if let Some(outcome) = state.outcome.take() {
                return Woken::Outcome(outcome);
            }
            if std::mem::take(&mut state.lead) {
                return Woken::Lead;
            }
            self.wake.wait(&mut state);
        }
    }

    /// The outcome if it has arrived; otherwise `cx`'s waker is kept to be woken with it.
    fn poll_outcome(&self, cx: &Context<'_>) -> Poll<Result<(), Error>> {
        let mut state = self.state.lock();
        match state.outcome.take() {
            Some(outcome) => Poll::Ready(outcome),
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// For the flusher thread: waits until it is handed the lead (true) or told to stop
    /// (false). A lead handed before the stop is taken first, so no batch is left behind.
    fn wait_for_lead(&self) -> bool {
        let mut state = self.state.lock();
        loop {
            if std::mem::take(&mut state.lead) {
                return true;
            }
            if state.outcome.is_some() {
                return false;
            }
            self.wake.wait(&mut state);
        }
    }
}

/// Commits applied to memory (unpublished) whose frames are not yet handed to a flusher.
#[derive(Default)]
struct Pending {
    /// Their frames and the keys they wrote.
    sink: LogSink,
    /// Their versions and their committers' slots, in version order.
    waiters: Vec<(u64, Slot)>,
    /// Whether someone leads: gathers and writes a batch, or rotates the segment. A leader
    /// that finishes hands the lead straight to the first queued committer, if any.
    flushing: bool,
    /// Callers of [`GroupCommit::exclusively`] waiting for the lead: while there are any, a leader
    /// that finishes releases the lead instead of handing it on, so they are not starved.
    exclusive_wanted: usize,
    /// Asynchronous committers settling (see [`GroupCommit::settle`]), woken at the end of
    /// every flush as `flushed` wakes the threads.
    settle_wakers: Vec<Waker>,
}

/// A batch taken from [`Pending`] by a flusher.
struct Batch {
    sink: LogSink,
    waiters: Vec<(u64, Slot)>,
}

/// What [`GroupCommit::apply_and_queue`] did.
struct Queued {
    result: Result<CommitResult, Error>,
    /// The commit counter it saw, and the rollback count then: what a retry settles against.
    seen: u64,
    rollbacks: u64,
    /// A copy of the write, if its answer rests on versions not yet published.
    retry: Option<AtomicWrite>,
    /// Whether the committer now leads.
    lead: bool,
}

/// Commits `write` to `inner` without waiting on the caller's thread for anything but the
/// commit's short locks: the operation is applied and queued there, and the returned future
/// resolves once the batch holding it is durable and published (or failed and rolled back).
/// The log write and its sync run on whichever thread leads: a committer thread of
/// [`GroupCommit::commit`] if one is queued, otherwise the flusher thread. A database in
/// memory, or one whose flusher thread could not start, commits before returning.
pub(crate) fn commit_async(inner: &Arc<Inner>, write: AtomicWrite) -> CommitFuture {
    let log = match &inner.log {
        Some(log) if log.flusher_running.load(Ordering::Acquire) => log,
        _ => return CommitFuture(State::Done(Some(inner.commit(write)))),
    };
    if let Err(e) = validate(&write) {
        return CommitFuture(State::Done(Some(Err(e))));
    }
    let mut slots = inner.prepare(&write);
    let slot: Slot = Arc::new(Waiter::new(false));
    let queued = log.apply_and_queue(inner, write, &mut slots, &slot);
    drop(slots);
    let inner = Arc::clone(inner);
    CommitFuture(match (queued.result, queued.retry) {
        (Ok(result), _) if result.is_committed() => State::Durable {
            inner,
            slot,
            result: Some(result),
        },
        (result, Some(write)) => State::Settling {
            inner,
            write: Some(write),
            seen: queued.seen,
            rollbacks: queued.rollbacks,
            result: Some(result),
        },
        (result, None) => State::Done(Some(result)),
    })
}

/// The future [`commit_async`] returns. Dropping it does not cancel the commit: once
/// applied, it is made durable (or rolled back) with its batch all the same.
pub(crate) struct CommitFuture(State);

enum State {
    Done(Option<Result<CommitResult, Error>>),
    /// Committed in memory, waiting for its batch to be durable.
    Durable {
        inner: Arc<Inner>,
        slot: Slot,
        result: Option<CommitResult>,
    },
    /// Answered against unpublished versions: waits until they are published (the answer
    /// stands) or rolled back (the write runs again), as [`GroupCommit::commit`] does.
    Settling {
        inner: Arc<Inner>,
        write: Option<AtomicWrite>,
        seen: u64,
        rollbacks: u64,
        result: Option<Result<CommitResult, Error>>,
    },
}

/// The answer of a future polled after it returned one.
fn polled_again() -> Error {
    Error::Io(crate::error::IoError::new(
        "commit future",
        std::io::Error::other("polled after it completed"),
    ))
}

impl Future for CommitFuture {
    type Output = Result<CommitResult, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let next = match &mut self.0 {
                State::Done(result) => {
                    return Poll::Ready(result.take().unwrap_or_else(|| Err(polled_again())));
                }
                State::Durable {
                    inner,
                    slot,
                    result,
                } => {
                    let outcome = std::task::ready!(slot.poll_outcome(cx));
                    inner.reclaimer.wake_if_pending();
                    // Answered: a later poll gets `polled_again`, not a wait for ever.
                    State::Done(Some(match outcome {
                        Ok(()) => result.take().ok_or_else(polled_again),
                        Err(e) => Err(e),
                    }))
                }
                State::Settling {
                    inner,
                    write,
                    seen,
                    rollbacks,
                    result,
                } => {
                    let Some(log) = &inner.log else {
                        unreachable!("only a durable database settles")
                    };
                    if std::task::ready!(log.poll_settle(inner, *seen, *rollbacks, cx)) {
                        return Poll::Ready(result.take().unwrap_or_else(|| Err(polled_again())));
                    }
                    // Rolled back: the answer rested on a commit that did not happen.
                    match write.take() {
                        Some(again) => commit_async(inner, again).0,
                        None => State::Done(Some(Err(polled_again()))),
                    }
                }
            };
            self.0 = next;
        }
    }
}

#[derive(Default)]
struct Background {
    shutdown: bool,
    checkpoint_wanted: bool,
}

/// A durable database's path to its log: the pending batch, the leader hand-off, rollback
/// bookkeeping, checkpoints and the background thread.
pub(crate) struct GroupCommit {
    pub(crate) wal: Wal,
    pending: Mutex<Pending>,
    flushed: Condvar,
    /// Bumped (under the commit lock) whenever a failed batch is rolled back.
    rollbacks: AtomicU64,
    /// The commit counter when a failed batch was last rolled back (written under the commit
    /// lock). Versions above the published one and at most this one were removed from
    /// memory, and will never be published: a commit checked against them waits for nothing.
    rolled_back_to: AtomicU64,
    /// Committers waiting for the unpublished versions their checks failed against.
    pub(crate) settling: AtomicUsize,
    background: Mutex<Background>,
    background_wake: Condvar,
    /// One checkpoint at a time.
    pub(crate) checkpoint_lock: Mutex<()>,
    /// The flusher thread's waiter: it is handed the lead when only asynchronous committers
    /// are queued, and finished to stop the thread.
    flusher: Waiter,
    /// Whether the flusher thread runs; without it, [`commit_async`] commits synchronously.
    flusher_running: AtomicBool,
    /// Set (under `pending`) once the database is closed: a commit still being retried by
    /// a future that outlived the last handle fails with [`Error::Closed`] instead of
    /// writing to a log whose directory lock is released.
    closed: AtomicBool,
}

/// Whether the outcome of `write` depends on what it finds: checks, and mutations that read
/// the current value (and fail on a value of the wrong type).
fn depends_on_state(write: &AtomicWrite) -> bool {
    !write.checks.is_empty()
        || !write.range_checks.is_empty()
        || !write.numbering.is_empty()
        || write
            .mutations
            .iter()
            .any(|m| !matches!(m.kind, MutationKind::Set { .. } | MutationKind::Delete))
}

impl GroupCommit {
    /// The group commit of `wal`.
    pub(crate) fn new(wal: Wal) -> GroupCommit {
        GroupCommit {
            wal,
            pending: Mutex::new(Pending::default()),
            flushed: Condvar::new(),
            rollbacks: AtomicU64::new(0),
            rolled_back_to: AtomicU64::new(0),
            settling: AtomicUsize::new(0),
            background: Mutex::new(Background::default()),
            background_wake: Condvar::new(),
            checkpoint_lock: Mutex::new(()),
            flusher: Waiter::new(true),
            flusher_running: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// Commits one validated operation: applies it to memory unpublished under the commit
    /// lock, queues its frame, and waits until a flusher (possibly this thread) has made it
    /// durable and published it, or has failed it and rolled it back.
    ///
    /// A commit whose checks fail (or whose mutations are refused) against versions not yet
    /// published does not answer at once: those versions may still be rolled back. It waits
    /// until they are published (the answer is then final) or rolled back (it then runs
    /// again), so a loser never sees the old value after being told it lost, and is never
    /// blamed on a commit that did not happen.
    pub(crate) fn commit<'a>(
        &self,
        inner: &'a Inner,
        write: AtomicWrite,
        slots: &mut Slots<'a>,
    ) -> Result<CommitResult, Error> {
        let slot: Slot = Arc::default();
        let mut write = Some(write);
        loop {
            let Some(this) = write.take() else {
                unreachable!("a write is put back before every retry")
            };
            let queued = self.apply_and_queue(inner, this, slots, &slot);
            if queued.result.as_ref().is_ok_and(CommitResult::is_committed) {
                self.await_durable(inner, &slot, queued.lead)?;
                inner.reclaimer.wake_if_pending();
                return queued.result;
            }
            // A conflict (or a refused mutation) wrote nothing.
            match queued.retry {
                Some(again) if !self.settle(inner, queued.seen, queued.rollbacks) => {
                    write = Some(again);
                }
                _ => return queued.result,
            }
        }
    }

    /// The part of a commit under the commit lock: applies `this` to memory unpublished and,
    /// if it committed, queues it with `slot` in the pending batch. If nobody leads, the
    /// committer leads (`lead` in the answer) when `slot` can, otherwise the flusher thread
    /// is handed the lead here.
    fn apply_and_queue<'a>(
        &self,
        inner: &'a Inner,
        this: AtomicWrite,
        slots: &mut Slots<'a>,
        slot: &Slot,
    ) -> Queued {
        let mut last = inner.commit.lock();
        let seen = *last;
        let rollbacks = self.rollbacks.load(Ordering::Acquire);
        // Checked against unpublished versions: keep a copy to run again should they be
        // rolled back. Without contention nothing is unpublished and nothing is copied, nor
        // for blind writes, which cannot fail on what they find. Versions already rolled back
        // are not in memory and never will be published: waiting for them would wait forever.
        let settled = inner
            .visible_version()
            .max(self.rolled_back_to.load(Ordering::Acquire));
        let retry = (seen > settled && depends_on_state(&this)).then(|| this.clone());
        let mut pending = self.pending.lock();
        if self.closed.load(Ordering::Acquire) {
            return Queued {
                result: Err(Error::Closed),
                seen,
                rollbacks,
                retry: None,
                lead: false,
            };
        }
        let result = inner.apply_write(this, slots, &mut last, Some(&mut pending.sink));
        let mut lead = false;
        if let Ok(r) = &result
            && r.is_committed()
        {
            // The queue is in version order (a flush publishes its last, as its newest).
            debug_assert!(
                pending.waiters.last().is_none_or(|(v, _)| *v < *last),
                "a commit queued below one queued before it"
            );
            pending.waiters.push((*last, Arc::clone(slot)));
            // Nobody leads: this committer does (or, if it cannot, the flusher thread),
            // unless an exclusive writer (a checkpoint, an explicit sync) is waiting for the
            // lead; the leader flushes this batch and hands the lead on after.
            if !pending.flushing && pending.exclusive_wanted == 0 {
                pending.flushing = true;
                if slot.leads {
                    lead = true;
                } else {
                    self.flusher.hand_lead();
                }
            }
        }
        Queued {
            result,
            seen,
            rollbacks,
            retry,
            lead,
        }
    }

    /// Waits until every version up to `seen` is published (true: an answer computed against
    /// them is final) or a rollback since `rollbacks` removed some of them (false).
    fn settle(&self, inner: &Inner, seen: u64, rollbacks: u64) -> bool {
        let mut pending = self.pending.lock();
        self.settling.fetch_add(1, Ordering::AcqRel);
        let settled = loop {
            // A rollback first: `visible` skips past rolled-back versions, so a later batch
            // can publish above `seen` although the versions this answer rests on are gone.
            // A needless retry after an unrelated rollback is harmless.
            if self.rollbacks.load(Ordering::Acquire) != rollbacks {
                break false;
            }
            if inner.visible_version() >= seen {
                break true;
            }
            // Committers of those versions are waiting for durability: one of them flushes,
            // and every flush ends with `flushed` notified under this lock.
            self.flushed.wait(&mut pending);
        };
        self.settling.fetch_sub(1, Ordering::AcqRel);
        settled
    }

    /// Waits for the outcome in `slot`; while this committer leads (`lead`, or handed the
    /// lead meanwhile), flushes the pending batch first, which carries its own commit.
    fn await_durable(&self, inner: &Inner, slot: &Slot, mut lead: bool) -> Result<(), Error> {
        loop {
            if lead {
                let batch = {
                    let mut pending = self.pending.lock();
                    Batch {
                        sink: std::mem::take(&mut pending.sink),
                        waiters: std::mem::take(&mut pending.waiters),
                    }
                };
                // The outcome reaches every committer of the batch through its slot.
                let _ = self.flush(inner, batch);
                self.pass_lead();
            }
            match slot.wait() {
                Woken::Outcome(outcome) => return outcome,
                Woken::Lead => lead = true,
            }
        }
    }

    /// Ends a lead: hands it to the first queued committer, or releases it if none is queued
    /// or an exclusive writer waits for it.
    fn pass_lead(&self) {
        let mut pending = self.pending.lock();
        debug_assert!(
            pending.flushing,
            "the lead passed by someone not holding it"
        );
        if pending.waiters.is_empty() || pending.exclusive_wanted > 0 {
            pending.flushing = false;
        } else {
            // A committer thread that queued first leads; with only asynchronous committers
            // queued, the flusher thread does.
            match pending.waiters.iter().find(|(_, w)| w.leads) {
                Some((_, next)) => next.hand_lead(),
                None => self.flusher.hand_lead(),
            }
        }
        self.flushed.notify_all();
        let wakers = std::mem::take(&mut pending.settle_wakers);
        // Woken with no lock held: a waker may run code that commits.
        drop(pending);
        for waker in wakers {
            waker.wake();
        }
    }

    /// [`GroupCommit::settle`] for an asynchronous committer: `Ready` as `settle` would
    /// return, or `Pending` with `cx`'s waker kept until the end of the next flush.
    fn poll_settle(
        &self,
        inner: &Inner,
        seen: u64,
        rollbacks: u64,
        cx: &Context<'_>,
    ) -> Poll<bool> {
        let mut pending = self.pending.lock();
        // In `settle`'s order, for its reason.
        if self.rollbacks.load(Ordering::Acquire) != rollbacks {
            return Poll::Ready(false);
        }
        if inner.visible_version() >= seen {
            return Poll::Ready(true);
        }
        // One registration per task, however often it is polled before the next flush.
        if !pending
            .settle_wakers
            .iter()
            .any(|w| w.will_wake(cx.waker()))
        {
            pending.settle_wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// The flusher thread: leads whenever it is handed the lead (only asynchronous
    /// committers were queued), until [`OpenDir::close`] stops it.
    fn run_flusher(&self, inner: &Weak<Inner>) {
        while self.flusher.wait_for_lead() {
            // A lead is handed only by a commit or a flush, which need the store alive.
            let Some(inner) = inner.upgrade() else { return };
            let batch = {
                let mut pending = self.pending.lock();
                Batch {
                    sink: std::mem::take(&mut pending.sink),
                    waiters: std::mem::take(&mut pending.waiters),
                }
            };
            // The outcome reaches every committer of the batch through its slot.
            let _ = self.flush(&inner, batch);
            self.pass_lead();
        }
    }

    /// Writes (and syncs) one batch, whose newest version is `newest`, then publishes it; on
    /// failure rolls back the batch and every commit applied after it. Called with `flushing`
    /// set, so flushes never overlap.
    fn flush(&self, inner: &Inner, batch: Batch) -> Result<(), Error> {
        let Some(&(newest, _)) = batch.waiters.last() else {
            return Ok(());
        };
        debug_assert!(
            newest > inner.visible_version(),
            "a batch of versions already published"
        );
        let error = match self.wal.append(&batch.sink.frames.buf, newest) {
            Ok(checkpoint_due) => {
                inner.publish(newest);
                inner
                    .watchers
                    .notify_after_publish(batch.sink.touched.iter().map(KeyBytes::as_slice));
                if checkpoint_due {
                    self.want_checkpoint();
                }
                for (_, slot) in &batch.waiters {
                    slot.finish(Ok(()));
                }
                return Ok(());
            }
            Err(e) => e,
        };
        // Commits applied since this batch was taken were checked against its state, so they
        // fail with it. Stop new commits while memory is put back.
        let later = {
            let commit = inner.commit.lock();
            let mut pending = self.pending.lock();
            let published = inner.visible_version();
            inner.roll_back(&batch.sink.touched, published);
            inner.roll_back(&pending.sink.touched, published);
            self.rolled_back_to.store(*commit, Ordering::Release);
            self.rollbacks.fetch_add(1, Ordering::AcqRel);
            pending.sink = LogSink::default();
            std::mem::take(&mut pending.waiters)
        };
        for (_, slot) in batch.waiters.iter().chain(&later) {
            slot.finish(Err(error.clone()));
        }
        Err(error)
    }

    /// Runs `f` as the only writer of the log: waits for a running flush, flushes what is
    /// pending, then calls `f` before any later batch is written. If that flush fails, `f`
    /// does not run and its error is returned.
    fn exclusively<T>(
        &self,
        inner: &Inner,
        f: impl FnOnce() -> Result<T, Error>,
    ) -> Result<T, Error> {
        let mut pending = self.pending.lock();
        pending.exclusive_wanted += 1;
        while pending.flushing {
            self.flushed.wait(&mut pending);
        }
        pending.exclusive_wanted -= 1;
        pending.flushing = true;
        let batch = Batch {
            sink: std::mem::take(&mut pending.sink),
            waiters: std::mem::take(&mut pending.waiters),
        };
        drop(pending);
        let out = self.flush(inner, batch).and_then(|()| f());
        // Committers that queued meanwhile wait for a leader.
        self.pass_lead();
        out
    }

    /// Asks the background thread for a checkpoint.
    fn want_checkpoint(&self) {
        let mut bg = self.background.lock();
        if !bg.checkpoint_wanted {
            bg.checkpoint_wanted = true;
            self.background_wake.notify_all();
        }
    }

    /// Makes everything acknowledged durable (see [`Wal::sync`]).
    pub(crate) fn sync_now(&self) -> Result<(), Error> {
        self.wal.sync()
    }

    /// Writes a checkpoint of the current state and deletes what it replaces. Waits for a
    /// checkpoint already running, then writes its own.
    pub(crate) fn checkpoint(&self, inner: &Arc<Inner>) -> Result<Versionstamp, Error> {
        let _one_at_a_time = self.checkpoint_lock.lock();
        self.checkpoint_locked(inner)
    }

    /// [`GroupCommit::checkpoint`], with `checkpoint_lock` held.
    fn checkpoint_locked(&self, inner: &Arc<Inner>) -> Result<Versionstamp, Error> {
        // Start a new segment at a batch boundary, as the log's only writer: everything in the
        // older segments is then published, so a snapshot taken next covers all of it.
        let started = self.exclusively(inner, || {
            // Everything written so far is published (flushes publish before they return).
            let first = inner.visible_version() + 1;
            let replaced = self.wal.start_segment(first)?;
            let snapshot = Snapshot::register(inner);
            // The checkpoint covers exactly what the segments it replaces hold: every
            // version below the new segment's first, all published.
            debug_assert_eq!(
                snapshot.versionstamp().version() + 1,
                first,
                "a checkpoint at another version than its segment boundary"
            );
            Ok((snapshot, replaced))
        });
        self.background.lock().checkpoint_wanted = false;
        let (snapshot, replaced): (Snapshot, Vec<PathBuf>) = started?;
        let version = snapshot.versionstamp().version();
        let fs = self.wal.fs.as_ref();
        let written = checkpoint::write(fs, &self.wal.dir, version, live_at(inner, version));
        drop(snapshot);
        written?;
        // The checkpoint is durable: what it replaces can go.
        checkpoint::remove_replaced(fs, &self.wal.dir, version, &replaced)?;
        self.wal.forget_older(&replaced);
        Ok(Versionstamp::from_version(version))
    }

    /// The background thread: periodic syncs (buffered mode) and checkpoints.
    fn run_background(self: &Arc<GroupCommit>, inner: &Weak<Inner>) {
        let tick = match self.wal.durability() {
            Durability::Buffered { interval } => interval.max(Duration::from_millis(1)),
            Durability::Sync => Duration::from_secs(1),
        };
        // Set while an explicit checkpoint holds `checkpoint_lock`: the wanted checkpoint is
        // left to it, and the thread waits a tick as usual instead of spinning on the flag.
        let mut deferred = false;
        loop {
            let checkpoint = {
                let mut bg = self.background.lock();
                if !bg.shutdown && (!bg.checkpoint_wanted || deferred) {
                    self.background_wake.wait_for(&mut bg, tick);
                }
                if bg.shutdown {
                    return;
                }
                bg.checkpoint_wanted
            };
            if let Err(e) = self.sync_now() {
                log::error!("tuplekv: background sync failed: {e}");
            }
            if checkpoint {
                let Some(inner) = inner.upgrade() else { return };
                let one_at_a_time = self.checkpoint_lock.try_lock();
                deferred = one_at_a_time.is_none(); // an explicit one is running
                let result = match one_at_a_time {
                    Some(_one_at_a_time) => self.checkpoint_locked(&inner).map(|_| ()),
                    None => Ok(()),
                };
                if let Err(e) = result {
                    log::error!("tuplekv: checkpoint failed (will retry): {e}");
                    // Retry on a later tick, not in a tight loop.
                    self.background.lock().checkpoint_wanted = false;
                    self.wal.postpone_checkpoint();
                }
            }
        }
    }
}

/// The live entries of `inner` at `version` (registered by a snapshot), in key order, each
/// map step under its own epoch pin so a long checkpoint does not hold back reclamation.
pub(crate) fn live_at(
    inner: &Inner,
    version: u64,
) -> impl Iterator<Item = (KeyBytes, Version)> + '_ {
    let now = now_ms();
    inner.map.iter().filter_map(move |slot| {
        let guard = epoch::pin();
        let v = version_at(slot.cell().load(&guard), version)?;
        let live = v.value.is_some() && v.expires_at.is_none_or(|d| d > now);
        live.then(|| (KeyBytes::from(slot.key()), v.to_version()))
    })
}

/// Keeps a database directory open: the lock, and the background thread. Dropped with the
/// last [`Database`](crate::Database) handle; it stops the thread, syncs, and unlocks.
pub(crate) struct OpenDir {
    group: Arc<GroupCommit>,
    thread: Mutex<Option<JoinHandle<()>>>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    _lock: Box<dyn Send + Sync>,
}

impl OpenDir {
    /// Keeps `group`'s directory open (`lock`) and starts its background thread for `inner`.
    pub(crate) fn start(
        group: &Arc<GroupCommit>,
        lock: Box<dyn Send + Sync>,
        inner: &Arc<Inner>,
    ) -> OpenDir {
        let open = OpenDir {
            group: Arc::clone(group),
            thread: Mutex::new(None),
            flusher: Mutex::new(None),
            _lock: lock,
        };
        let runner = Arc::clone(group);
        let weak = Arc::downgrade(inner);
        match std::thread::Builder::new()
            .name("tuplekv-wal".into())
            .spawn(move || runner.run_background(&weak))
        {
            Ok(handle) => *open.thread.lock() = Some(handle),
            Err(e) => log::error!("tuplekv: could not start the log thread: {e}"),
        }
        let runner = Arc::clone(group);
        let weak = Arc::downgrade(inner);
        match std::thread::Builder::new()
            .name("tuplekv-flush".into())
            .spawn(move || runner.run_flusher(&weak))
        {
            Ok(handle) => {
                *open.flusher.lock() = Some(handle);
                group.flusher_running.store(true, Ordering::Release);
            }
            // Asynchronous commits then commit synchronously.
            Err(e) => log::error!("tuplekv: could not start the flusher thread: {e}"),
        }
        open
    }

    /// Stops the background thread and syncs the log.
    pub(crate) fn close(&self) -> Result<(), Error> {
        {
            let mut bg = self.group.background.lock();
            bg.shutdown = true;
            self.group.background_wake.notify_all();
        }
        if let Some(thread) = self.thread.lock().take()
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
        // No handle is left to commit, and a future still retrying one now fails in
        // `apply_and_queue`: no lead can reach the flusher after this.
        {
            let _pending = self.group.pending.lock();
            self.group.closed.store(true, Ordering::Release);
        }
        self.group.flusher_running.store(false, Ordering::Release);
        self.group.flusher.finish(Ok(()));
        if let Some(thread) = self.flusher.lock().take()
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
        self.group.wal.close()
    }
}

impl Drop for OpenDir {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("tuplekv: closing {}: {e}", self.group.wal.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    //! Orderings of the log's threads that need its internals to set up. A committer whose
    //! checks fail against a batch that is not yet durable must not answer before that batch
    //! is final (it once answered at once, and could then read the old value, or lose to a
    //! commit that was later rolled back). Each later test says what broke.
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use std::time::Instant;

    use crate::durable::fs::{Faults, FaultyFs};
    use crate::{Database, Options, key};

    /// Holds the sync of a first commit setting `k`, runs a second commit that requires `k`
    /// absent until it waits for that batch, then lets the sync fail (`fail`) or succeed.
    /// Returns the second commit's result and what it read of `k` right after.
    fn race_with_unpublished(fail: bool) -> (Result<CommitResult, Error>, Option<crate::Value>) {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
        let wal = Arc::clone(db.inner.log.as_ref().unwrap());
        faults.hold_syncs();
        std::thread::scope(|s| {
            let first = s.spawn(|| db.set(&key!["k"], 1u64));
            faults.wait_for_held_syncs(1);
            let second = s.spawn(|| {
                let result = db
                    .atomic()
                    .check(&key!["k"], None)
                    .set(&key!["k"], 2u64)
                    .commit();
                (result, db.get(&key!["k"]).unwrap().map(|e| e.value))
            });
            while wal.settling.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
            if fail {
                faults.fail_next_syncs(1);
            }
            faults.release_syncs();
            assert_eq!(first.join().unwrap().is_err(), fail);
            second.join().unwrap()
        })
    }

    /// A checkpoint whose flush of the pending batch fails returns that error instead of
    /// going on to start a segment as if the log were fine.
    #[test]
    fn a_checkpoint_after_a_failed_flush_fails_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
        let inner = &db.inner;
        let wal = inner.log.as_ref().unwrap();
        // A commit applied and queued, as a committer leaves it before it flushes.
        let slot: Slot = Arc::default();
        {
            let write = db.atomic().set(&key!["k"], 1u64).as_write().clone();
            let mut slots = inner.prepare(&write);
            let mut last = inner.commit.lock();
            let mut pending = wal.pending.lock();
            let result = inner
                .apply_write(write, &mut slots, &mut last, Some(&mut pending.sink))
                .unwrap();
            assert!(result.is_committed());
            pending.waiters.push((*last, Arc::clone(&slot)));
        }
        faults.fail_next_syncs(1);
        let err = wal.checkpoint(inner).unwrap_err();
        assert!(err.to_string().contains("fsync failed (injected)"), "{err}");
        assert!(matches!(slot.wait(), Woken::Outcome(Err(_))));
        assert_eq!(db.get(&key!["k"]).unwrap(), None);
    }

    fn faulty(faults: &Arc<Faults>, durability: Durability) -> Options {
        Options {
            fs: Arc::new(FaultyFs::new(Arc::clone(faults))),
            durability,
            background_reclaim: false,
            ..Options::default()
        }
    }

    const BUFFERED: Durability = Durability::Buffered {
        interval: Duration::from_secs(3600),
    };

    /// A sync failed while a checkpoint, having found the log sound, waited to rotate the
    /// segment. The rotation once dropped the failure with the old segment still needed, so
    /// the failed sync was then forgotten and a later sync reported success for commits
    /// whose pages the failed fsync had dropped. Now the log stops: the checkpoint, every
    /// later sync and write fail, and a reopen recovers a prefix of what was acknowledged.
    #[test]
    fn a_sync_failing_before_a_rotation_stops_the_log_and_is_never_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let db = Database::open(dir.path(), faulty(&faults, BUFFERED)).unwrap();
        let wal = Arc::clone(db.inner.log.as_ref().unwrap());
        db.set(&key!["a"], 1u64).unwrap();
        db.sync().unwrap();
        db.set(&key!["b"], 2u64).unwrap();
        faults.hold_syncs();
        let synced = std::thread::scope(|s| {
            let sync = s.spawn(|| db.sync());
            faults.wait_for_held_syncs(1);
            let checkpoint = s.spawn(|| db.checkpoint());
            // The checkpoint found nothing wrong and waits for the held sync to rotate.
            while wal.wal.rotations_started.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
            faults.fail_next_syncs(1);
            faults.release_syncs();
            assert!(checkpoint.join().unwrap().is_err());
            sync.join().unwrap()
        });
        assert!(synced.is_err(), "a failed sync reported success");
        let later = db.sync().unwrap_err();
        assert!(
            later.to_string().contains("stopped accepting writes"),
            "{later}"
        );
        assert!(db.set(&key!["c"], 3u64).is_err());
        assert!(db.checkpoint().is_err());
        assert_eq!(
            db.get(&key!["b"]).unwrap().map(|e| e.value),
            Some(crate::Value::U64(2)),
            "reads go on"
        );
        let image = tempfile::tempdir().unwrap();
        faults.power_cut_image(dir.path(), image.path()).unwrap();
        drop(db);
        let crashed = Database::open(image.path(), Options::default()).unwrap();
        assert_eq!(
            crashed.get(&key!["a"]).unwrap().map(|e| e.value),
            Some(crate::Value::U64(1)),
            "synced before the failure"
        );
        assert_eq!(crashed.get(&key!["c"]).unwrap(), None, "refused");
    }

    /// The background thread once spun (syncing each round) while an explicit checkpoint held
    /// the checkpoint lock and a background one was wanted. Commits go on for a while to give
    /// a spinning thread something to sync; a waiting one syncs once.
    #[test]
    fn the_background_thread_waits_while_an_explicit_checkpoint_runs() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let options = Options {
            checkpoint_after_bytes: 1,
            ..faulty(&faults, BUFFERED)
        };
        let db = Database::open(dir.path(), options).unwrap();
        let wal = Arc::clone(db.inner.log.as_ref().unwrap());
        // The first commit reserves versions, which syncs once: not the background thread's.
        db.set(&key!["first"], 0u64).unwrap();
        let explicit = wal.checkpoint_lock.lock();
        let before = faults.syncs();
        let until = Instant::now() + Duration::from_millis(100);
        let mut i = 0u64;
        while Instant::now() < until {
            db.set(&key!["k", i], i).unwrap();
            i += 1;
            std::thread::yield_now();
        }
        let syncs = faults.syncs() - before;
        drop(explicit);
        assert!(syncs <= 1, "{syncs} background syncs during {i} commits");
    }

    /// A write that replaced (here: cancelled) a key's deadline was rolled back, and the
    /// restored value's deadline was no longer scheduled: the expired value stayed in memory.
    #[test]
    fn a_rolled_back_write_leaves_the_restored_deadline_scheduled() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let db = Database::open(dir.path(), faulty(&faults, Durability::Sync)).unwrap();
        let expire_in = Duration::from_millis(300);
        let set = db
            .atomic()
            .set_with_expiry(&key!["k"], 1u64, expire_in)
            .commit()
            .unwrap();
        assert!(set.is_committed());
        faults.fail_next_syncs(1);
        db.set(&key!["k"], 2u64).unwrap_err();
        let k = key!["k"].encode();
        // The pass the failed write asked for: the value is live and stays.
        db.inner.reclaim_pass(false);
        assert!(db.inner.map.get(&k[..]).is_some());
        std::thread::sleep(expire_in + Duration::from_millis(50));
        db.inner.reclaim_pass(false);
        assert!(
            db.inner.map.get(&k[..]).is_none(),
            "the expired value was never reclaimed"
        );
    }

    #[test]
    fn a_loser_answers_only_once_the_winner_is_durable_and_then_reads_it() {
        let (result, read) = race_with_unpublished(false);
        assert!(!result.unwrap().is_committed());
        assert_eq!(read, Some(crate::Value::U64(1)));
    }

    /// The loser's check ran against a batch whose sync then failed: it is evaluated again
    /// rather than answered against a commit that did not happen, and the log has stopped, so
    /// it fails with the stop.
    #[test]
    fn a_check_against_a_batch_whose_sync_fails_gets_the_stop_not_a_conflict() {
        let (result, read) = race_with_unpublished(true);
        let err = result.unwrap_err();
        assert!(
            err.to_string().contains("stopped accepting writes"),
            "{err}"
        );
        assert_eq!(read, None);
    }
}
