//! [`GaplessSequence`]: each number commits with the record that uses it, and concurrent
//! requests on one handle share commits.
//!
//! # Combining
//! A request joins the handle's queue. If no thread is leading, it leads: it takes up to
//! [`BATCH_REQUESTS_MAX`] queued requests, numbers them `n, n+1, …` from the counter, calls
//! each one's record closure with its number, and commits everything in one atomic
//! operation: the counter's check (its versionstamp) and new value, and per request its own
//! checks and mutations plus its uniqueness check and key. It then hands the lead to the next
//! queued request, if any, so no caller leads forever. While one commit runs, the next batch
//! queues up: throughput grows with concurrency instead of collapsing to one commit per code.
//!
//! A batch commits as if its requests ran one after another in number order. To keep that
//! true, a request whose checks touch a key an earlier request of the batch writes waits for
//! the next batch, and a batch stays within the engine's per-commit limits.
//!
//! # When a commit fails
//! - The counter's check failed (another handle committed): read it again, renumber, retry.
//! - Some requests' own checks failed: those requests fail with [`Error::Rejected`]; the rest
//!   are renumbered without the gaps and retried, so the committed numbers stay contiguous.
//! - A uniqueness check failed: that request fails with [`Error::Duplicate`] (the counter went
//!   back; a human has to look); the rest are retried.
//! - The engine refused the operation (a limit, a type error): the requests are committed one
//!   by one, so only the culprit gets the error.
//! - The store panicked: the panic reaches the leader's caller, and a guard (`LeadGuard`)
//!   fails the batch's other requests with [`Error::CommitPanicked`] and hands the lead on, so
//!   nobody waits forever for a leader that is gone.

use std::collections::{HashSet, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use tuplekv_engine::{
    AtomicWrite, CommitResult, Conflict, Error as StoreError, KeyBytes, Store, Versionstamp,
};

use crate::error::Error;
use crate::format::{Format, Issued};
use crate::limits::{BATCH_REQUESTS_MAX, COMMIT_ATTEMPTS_MAX};
use crate::record::{Budget, Record};
use crate::sequences::Core;

/// The caller's record, built for a given number (possibly more than once).
type Build = Box<dyn FnMut(&Issued<'_>, &mut Record) + Send>;

enum State {
    Waiting,
    /// The requester must lead the next batch.
    Lead,
    Done(Result<u64, Error>),
}

struct Request {
    build: Mutex<Build>,
    state: Mutex<State>,
    ready: Condvar,
}

impl Request {
    fn finish(&self, result: Result<u64, Error>) {
        *lock(&self.state) = State::Done(result);
        self.ready.notify_one();
    }
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Arc<Request>>,
    leading: bool,
}

/// Counters of a gapless handle's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GaplessStats {
    /// Numbers committed.
    pub codes: u64,
    /// Successful commits (each carries one or more numbers).
    pub commits: u64,
    /// Commits refused by a check (the counter, or a request's own checks).
    pub conflicts: u64,
}

/// A handle on a gapless sequence: a number exists if and only if its record committed.
///
/// The counter's increment joins the caller's own atomic commit, together with the record
/// that uses the code and the uniqueness check on the code: no gaps, no duplicates, nothing to
/// lose in a crash. Concurrent requests on one handle are combined into one commit (see the
/// module docs); handles on the same store coordinate through the counter's versionstamp.
///
/// ```
/// use tuplekv_engine::{Database, key};
/// use tuplekv_sequence::{Mode, SequenceOptions, Sequences};
///
/// let db = Database::in_memory();
/// let seqs = Sequences::new(db.clone());
/// seqs.create("INV", SequenceOptions { mode: Mode::Gapless, width: 5, ..Default::default() })?;
/// let invoices = seqs.gapless("INV")?;
/// let issued = invoices.next_with(|issued, record| {
///     record.set(&key!["invoices", issued.code()], b"100 EUR");
/// })?;
/// assert_eq!(issued.code(), "INV00001");
/// assert!(db.get(&key!["invoices", "INV00001"])?.is_some());
/// # Ok::<(), tuplekv_sequence::Error>(())
/// ```
pub struct GaplessSequence<S> {
    core: Core<S>,
    queue: Mutex<Queue>,
    /// The counter as the last commit of this handle left it, so a leader need not read it.
    counter: Mutex<Option<(u64, Option<Versionstamp>)>>,
    codes: AtomicU64,
    commits: AtomicU64,
    conflicts: AtomicU64,
}

impl<S> std::fmt::Debug for GaplessSequence<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GaplessSequence")
            .field("prefix", &self.core.def.prefix)
            .field("stats", &self.stats())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One request's part of a batch.
struct Part {
    req: Arc<Request>,
    number: u64,
    write: AtomicWrite,
    /// The index of its first check in the batch's operation.
    first_check: usize,
    /// How many checks it has (its own and its uniqueness check).
    checks: usize,
    /// The index of its uniqueness check in the batch's operation.
    backstop: usize,
}

impl<S> GaplessSequence<S> {
    /// Statistics of this handle.
    pub fn stats(&self) -> GaplessStats {
        GaplessStats {
            codes: self.codes.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
        }
    }

    /// How many requests are queued for a leader right now (for monitoring).
    pub fn pending(&self) -> usize {
        lock(&self.queue).pending.len()
    }

    /// The sequence's prefix.
    pub fn prefix(&self) -> &str {
        &self.core.def.prefix
    }

    /// How the sequence writes its codes.
    pub fn format(&self) -> &Format {
        &self.core.def.format
    }

    /// Puts `leftovers` back at the front of the queue and wakes the next leader, if any.
    fn pass_lead(&self, leftovers: Vec<Arc<Request>>) {
        let mut queue = lock(&self.queue);
        for req in leftovers.into_iter().rev() {
            queue.pending.push_front(req);
        }
        match queue.pending.front() {
            None => queue.leading = false,
            Some(next) => {
                *lock(&next.state) = State::Lead;
                next.ready.notify_one();
            }
        }
    }
}

impl<S: Store> GaplessSequence<S> {
    /// The number of a code of this sequence.
    ///
    /// ```
    /// use tuplekv_engine::Database;
    /// use tuplekv_sequence::{Mode, SequenceOptions, Sequences};
    ///
    /// let seqs = Sequences::new(Database::in_memory());
    /// seqs.create("INV", SequenceOptions { mode: Mode::Gapless, ..Default::default() })?;
    /// let invoices = seqs.gapless("INV")?;
    /// assert_eq!(invoices.parse("INV042")?, 42);
    /// assert!(invoices.parse("INV42").is_err());
    /// # Ok::<(), tuplekv_sequence::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidCode`].
    pub fn parse(&self, code: &str) -> Result<u64, Error> {
        self.core.parse(code)
    }

    pub(crate) fn new(core: Core<S>) -> Self {
        GaplessSequence {
            core,
            queue: Mutex::new(Queue::default()),
            counter: Mutex::new(None),
            codes: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
        }
    }

    /// The next number, committed with its uniqueness key as its only record.
    ///
    /// # Errors
    /// As [`GaplessSequence::next_with`].
    pub fn next(&self) -> Result<Issued<'_>, Error> {
        self.next_with(|_, _| {})
    }

    /// The next number, committed together with the record `build` writes for it.
    ///
    /// `build` may run on another caller's thread (the one leading the batch) and more than
    /// once, with different numbers, if the batch is renumbered; it should only describe the
    /// record of the number it is given. It must not panic (if it does, this request fails
    /// with [`Error::RecordPanicked`]).
    ///
    /// # Errors
    /// [`Error::Rejected`] if the record's own checks failed, [`Error::Duplicate`] if the
    /// uniqueness backstop fired, [`Error::Exhausted`], [`Error::Contention`], or a store error
    /// for a record the engine refuses. In every case nothing of this request is written and
    /// no number is used. [`Error::CommitPanicked`] if the store panicked in a commit another
    /// caller led (whether it committed is unknown).
    ///
    /// # Panics
    /// If the store panics during a commit this call leads (the panic is the store's, passed
    /// on); the other requests of the batch fail with [`Error::CommitPanicked`] and the handle
    /// keeps working.
    pub fn next_with<F>(&self, build: F) -> Result<Issued<'_>, Error>
    where
        F: FnMut(&Issued<'_>, &mut Record) + Send + 'static,
    {
        let req = Arc::new(Request {
            build: Mutex::new(Box::new(build)),
            state: Mutex::new(State::Waiting),
            ready: Condvar::new(),
        });
        {
            let mut queue = lock(&self.queue);
            queue.pending.push_back(Arc::clone(&req));
            if !std::mem::replace(&mut queue.leading, true) {
                *lock(&req.state) = State::Lead;
            }
        }
        loop {
            let mut state = lock(&req.state);
            while matches!(*state, State::Waiting) {
                state = req
                    .ready
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            match std::mem::replace(&mut *state, State::Waiting) {
                State::Done(result) => {
                    return result.map(|n| Issued::new(n, &self.core.def.format));
                }
                State::Lead | State::Waiting => {
                    drop(state);
                    self.lead();
                }
            }
        }
    }

    /// Runs one batch from the front of the queue, then passes the lead on.
    fn lead(&self) {
        let batch: Vec<Arc<Request>> = {
            let mut queue = lock(&self.queue);
            let n = queue.pending.len().min(BATCH_REQUESTS_MAX);
            queue.pending.drain(..n).collect()
        };
        let mut guard = LeadGuard {
            seq: self,
            batch: batch.clone(),
        };
        let leftovers = self.run(batch);
        guard.batch.clear(); // disarmed: every request was finished or is in `leftovers`
        drop(guard);
        self.pass_lead(leftovers);
    }

    /// Commits `batch`, finishing every request it can; returns those left for a later batch.
    fn run(&self, batch: Vec<Arc<Request>>) -> Vec<Arc<Request>> {
        let mut live: VecDeque<Arc<Request>> = batch.into();
        let mut later = Vec::new();
        let mut one_by_one = false;
        let mut attempts = 0;
        let mut counter = lock(&self.counter);
        while !live.is_empty() {
            let (next, seen) = match *counter {
                Some(c) => c,
                None => match self.core.read_counter() {
                    Ok(c) => *counter.insert(c),
                    Err(e) => {
                        live.drain(..).for_each(|r| r.finish(Err(e.clone())));
                        break;
                    }
                },
            };
            let (mut parts, rest, deferred) = self.build(next, &mut live, one_by_one);
            later.extend(deferred);
            if parts.is_empty() {
                debug_assert!(rest.is_empty());
                break;
            }
            let end = next + parts.len() as u64;
            let mut write = AtomicWrite::default();
            let (check, set) = self.core.counter_cas(seen, end);
            write.checks.push(check);
            for p in &mut parts {
                write.checks.append(&mut p.write.checks);
                write.mutations.append(&mut p.write.mutations);
            }
            write.mutations.push(set);
            live = rest;
            match self.core.store.commit(write) {
                Ok(CommitResult::Committed { versionstamp, .. }) => {
                    *counter = Some((end, Some(versionstamp)));
                    self.commits.fetch_add(1, Ordering::Relaxed);
                    self.codes.fetch_add(parts.len() as u64, Ordering::Relaxed);
                    parts.into_iter().for_each(|p| p.req.finish(Ok(p.number)));
                }
                Ok(CommitResult::Conflict(conflict)) => {
                    self.conflicts.fetch_add(1, Ordering::Relaxed);
                    let retry = if conflict.failed_checks.iter().any(|f| f.index == 0) {
                        *counter = None;
                        attempts += 1;
                        parts
                    } else {
                        let before = parts.len();
                        let retry = self.reject(parts, &conflict);
                        if retry.len() == before {
                            // Nothing to blame: treat it as a moved counter.
                            *counter = None;
                            attempts += 1;
                        }
                        retry
                    };
                    if attempts >= COMMIT_ATTEMPTS_MAX {
                        let e = Error::Contention {
                            prefix: self.core.def.prefix.clone(),
                            attempts,
                        };
                        retry.into_iter().for_each(|p| p.req.finish(Err(e.clone())));
                        live.drain(..).for_each(|r| r.finish(Err(e.clone())));
                        break;
                    }
                    requeue(&mut live, retry);
                    if attempts > 0 {
                        std::thread::yield_now();
                    }
                }
                // The store could not be reached, or the write was sent and its answer lost:
                // whether it committed is unknown (or nothing was sent). Resending could commit
                // these records twice under new numbers, so each request fails with the error,
                // and the counter is read afresh next time.
                Err(e @ (StoreError::OutcomeUnknown { .. } | StoreError::Unavailable { .. })) => {
                    *counter = None;
                    parts
                        .into_iter()
                        .for_each(|p| p.req.finish(Err(e.clone().into())));
                }
                Err(e) if parts.len() == 1 => {
                    parts
                        .into_iter()
                        .for_each(|p| p.req.finish(Err(e.clone().into())));
                }
                Err(_) => {
                    one_by_one = true;
                    requeue(&mut live, parts);
                }
            }
        }
        later
    }

    /// Numbers the requests of `live` from `next` and builds their records. Returns the parts
    /// of this commit, the requests for the next round of this batch, and those deferred to
    /// a later batch.
    fn build(
        &self,
        next: u64,
        live: &mut VecDeque<Arc<Request>>,
        one_by_one: bool,
    ) -> (Vec<Part>, VecDeque<Arc<Request>>, Vec<Arc<Request>>) {
        let mut parts: Vec<Part> = Vec::new();
        let mut deferred = Vec::new();
        let mut written: HashSet<KeyBytes> = HashSet::new();
        let mut budget = Budget::default();
        let (check, set) = self.core.counter_cas(None, 0);
        budget.try_add(&AtomicWrite {
            checks: vec![check],
            mutations: vec![set],
            ..AtomicWrite::default()
        });
        let mut offset = 1;
        let limit = self.core.def.limit();
        while let Some(req) = live.pop_front() {
            let number = next + parts.len() as u64;
            if number > limit {
                req.finish(Err(self.core.def.exhausted()));
                continue;
            }
            let mut record = Record::new();
            let issued = Issued::new(number, &self.core.def.format);
            let built = catch_unwind(AssertUnwindSafe(|| {
                (lock(&req.build))(&issued, &mut record)
            }));
            if built.is_err() {
                req.finish(Err(Error::RecordPanicked {
                    prefix: self.core.def.prefix.clone(),
                }));
                continue;
            }
            let mut write = record.into_write();
            let backstop = match self.core.add_backstop(&mut write, number) {
                Ok(i) => offset + i,
                Err(e) => {
                    req.finish(Err(e));
                    continue;
                }
            };
            if !parts.is_empty() {
                // Its checks must not see what an earlier request of this commit writes.
                if write.checks.iter().any(|c| written.contains(&c.key)) {
                    deferred.push(req);
                    continue;
                }
                if !budget.try_add(&write) {
                    live.push_front(req);
                    deferred.extend(live.drain(..));
                    break;
                }
            } else {
                // The first request goes even alone over a limit: the engine says which.
                budget.try_add(&write);
            }
            written.extend(write.mutations.iter().map(|m| m.key.clone()));
            let checks = write.checks.len();
            parts.push(Part {
                req,
                number,
                write,
                first_check: offset,
                checks,
                backstop,
            });
            offset += checks;
            if one_by_one {
                break;
            }
        }
        (parts, std::mem::take(live), deferred)
    }

    /// Fails the requests whose own or uniqueness checks failed; returns the others.
    fn reject(&self, parts: Vec<Part>, conflict: &Conflict) -> Vec<Part> {
        let mut retry = Vec::new();
        for p in parts {
            let range = p.first_check..p.first_check + p.checks;
            let failed: Vec<_> = conflict
                .failed_checks
                .iter()
                .filter(|f| range.contains(&f.index))
                .cloned()
                .collect();
            if failed.is_empty() {
                retry.push(p);
            } else if failed.iter().any(|f| f.index == p.backstop) {
                p.req.finish(Err(self.core.duplicate(p.number)));
            } else {
                let failed_checks = failed
                    .into_iter()
                    .map(|mut f| {
                        f.index -= p.first_check;
                        f
                    })
                    .collect();
                p.req.finish(Err(Error::Rejected(Conflict {
                    failed_checks,
                    range_changed: false,
                })));
            }
        }
        retry
    }
}

/// Armed while a leader runs a batch: if the store panics (the only code in a batch that is
/// not ours, apart from record closures, which are caught), dropping it during the unwind
/// fails every request of the batch that is still waiting and hands the lead on. Without it
/// `leading` would stay set and every later request on the handle would wait forever.
struct LeadGuard<'a, S> {
    seq: &'a GaplessSequence<S>,
    batch: Vec<Arc<Request>>,
}

impl<S> Drop for LeadGuard<'_, S> {
    fn drop(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        // The commit may or may not have applied: forget the cached counter, so the next
        // leader reads it (its versionstamp check would catch a stale cache anyway).
        *lock(&self.seq.counter) = None;
        let prefix = &self.seq.core.def.prefix;
        for req in &self.batch {
            let mut state = lock(&req.state);
            // `Done` is a result its caller has not taken yet; `Waiting` is either a request
            // still waiting or one whose caller took its result and left (then nobody reads
            // this).
            if matches!(*state, State::Waiting) {
                *state = State::Done(Err(Error::CommitPanicked {
                    prefix: prefix.clone(),
                }));
                req.ready.notify_one();
            }
        }
        self.seq.pass_lead(Vec::new());
    }
}

/// Puts `parts`' requests back at the front of `live`, in their order.
fn requeue(live: &mut VecDeque<Arc<Request>>, parts: Vec<Part>) {
    for p in parts.into_iter().rev() {
        live.push_front(p.req);
    }
}
