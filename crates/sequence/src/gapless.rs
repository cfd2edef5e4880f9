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
//! # Gathering
//! Requesters that commit in a loop (app-server threads, each waiting for its code and then
//! asking for the next) come back together: the requests a batch finished return a few
//! microseconds after its commit. A leader that took only what was queued at that moment
//! would split them into two groups that take turns, each code waiting for the other group's
//! commit as well as its own. So a leader first *gathers*: while fewer requests are queued
//! than its handle's previous batch had, it waits for more, at most [`LINGER_SHARE`]-th of
//! the handle's recent commit time and never longer than [`LINGER_MAX`]. A lone requester
//! (the previous batch had one request) never waits, and a caller that stops coming back
//! costs the next batch one bounded wait, after which the handle expects fewer.
//!
//! A batch commits as if its requests ran one after another in number order. To keep that
//! true, a request whose checks touch a key an earlier request of the batch writes waits for
//! the next batch, and a batch stays within the engine's per-commit limits.
//!
//! # Async requesters
//! An async request ([`GaplessSequence::next_async`] and its two twins) joins the same queue
//! as blocking ones, so both kinds are combined into the same batches, and waits for its
//! result with its task's waker: it holds no thread, neither a runtime worker nor a
//! blocking-pool thread, while its batch is led. An async request never leads. When the
//! lead falls to one (the queue was idle, or the request is at its front when a batch ends),
//! it goes to the handle's *leader thread* instead, which leads that batch with the blocking
//! code and passes the lead on as any leader does, to a blocking requester at the front or
//! to itself. The thread is started by the first async request on the handle, holds the
//! handle only while it leads, and ends once the handle (every clone) is dropped; it waits on
//! the store's commits, the way the engine's flusher thread waits on the log's syncs.
//!
//! Why a thread and not the async task: leading means committing and then finishing other
//! requesters' requests, which is a side effect a [`tuplekv_engine::replay`] round cannot
//! have (a round may run again), and a leader future that its caller drops half-way would
//! leave the batch without a leader. A thread that leads with the code blocking leaders
//! run has neither problem, and costs one parked thread per handle that serves async
//! requests.
//!
//! A dropped async future takes nothing back: its request, once queued (at the first poll),
//! is committed with its number in its batch and recorded by its uniqueness key, so the
//! sequence has no gap; only the result is lost, like a response lost on the network. (If
//! the handle is dropped before that batch is led, the request is dropped uncommitted, and
//! uses no number.)
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
//!   nobody waits forever for a leader that is gone. On the leader thread of async requests
//!   the panic is caught, and the thread goes on leading.
//! - The commit's answer was lost ([`tuplekv_engine::Error::OutcomeUnknown`]): each request
//!   fails with [`Error::OutcomeUnknown`], carrying the number and code it has if the batch
//!   committed when the handle numbered the batch itself, so the caller can look its record
//!   up. Nothing is resent.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use tuplekv_engine::limits::NUMBER_SLOTS_MAX;
use tuplekv_engine::numbering::{
    CounterClaim, NumberForm, NumberSlot, Numbering as EngineNumbering, SlotTarget,
};
use tuplekv_engine::{
    AtomicWrite, Check, CommitResult, Conflict, Error as StoreError, KeyBytes, Mutation,
    MutationKind, Store, Value, Versionstamp,
};

use crate::error::Error;
use crate::format::{Format, Issued};
use crate::limits::{BATCH_REQUESTS_MAX, COMMIT_ATTEMPTS_MAX, LINGER_MAX, LINGER_SHARE};
use crate::record::{Budget, Record};
use crate::sequences::Core;
use crate::template::{Hole, holes};

/// The caller's record, built for a given number (possibly more than once).
type Build = Box<dyn FnMut(&Issued<'_>, &mut Record) + Send>;

/// The caller's record, built for a given code (possibly a placeholder, possibly more than
/// once).
type BuildCoded = Box<dyn FnMut(&str, &mut Record) + Send>;

/// How a request builds its record.
enum Builder {
    /// From its number: only the checked path can serve it.
    Numbered(Build),
    /// From its code: the store can fill the number in.
    Coded(BuildCoded),
}

impl Builder {
    fn build(&mut self, issued: &Issued<'_>, record: &mut Record) {
        match self {
            Builder::Numbered(f) => f(issued, record),
            Builder::Coded(f) => f(&issued.code(), record),
        }
    }
}

/// How a gapless handle numbers its commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Numbering {
    /// The store takes the numbers from the counter inside the commit
    /// ([`tuplekv_engine::numbering`]), so commits of one sequence never conflict on the
    /// counter, whichever handle or server sends them. Requests whose record needs its
    /// number rather than its code ([`GaplessSequence::next_with`]), records that do not hold
    /// their code verbatim, and stores that cannot number commits (a plain KV Connect
    /// server) fall back to [`Numbering::Checked`] by themselves.
    #[default]
    Store,
    /// The handle reads the counter, numbers the batch itself and checks the counter's
    /// versionstamp in the commit: commits of one sequence from different handles race, and
    /// all but one of them are refused and retried. Kept for comparison and for stores that
    /// cannot number commits.
    Checked,
}

enum State {
    Waiting,
    /// The requester must lead the next batch.
    Lead,
    Done(Result<u64, Error>),
}

/// One caller's request: its record, and where its result goes. A blocking requester waits on
/// `ready`; an async one leaves its task's waker in `waker`. Whoever changes `state` wakes
/// both ([`Request::notify`]).
struct Request {
    build: Mutex<Builder>,
    state: Mutex<State>,
    ready: Condvar,
    /// The task of an async requester, to wake when its state changes.
    waker: Mutex<Option<Waker>>,
    /// Made by an async requester, which never leads: the lead goes to the handle's leader
    /// thread instead.
    is_async: bool,
}

impl Request {
    fn new(build: Builder, is_async: bool) -> Self {
        Request {
            build: Mutex::new(build),
            state: Mutex::new(State::Waiting),
            ready: Condvar::new(),
            waker: Mutex::new(None),
            is_async,
        }
    }

    fn coded(&self) -> bool {
        matches!(*lock(&self.build), Builder::Coded(_))
    }

    fn finish(&self, result: Result<u64, Error>) {
        *lock(&self.state) = State::Done(result);
        self.notify();
    }

    /// Wakes the requester after its state changed (set with the state's lock, released
    /// since). An async requester stores its waker while it holds the state's lock, after
    /// looking at the state, so either it saw the change or its waker is there to take.
    fn notify(&self) {
        self.ready.notify_one();
        let waker = lock(&self.waker).take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Arc<Request>>,
    leading: bool,
    /// How many requests the previous batch took: how many a leader gathers before it leads
    /// (see the module docs).
    expect: usize,
    /// A leader is gathering: a new request wakes it.
    gathering: bool,
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
    /// Of those, the commits refused because the counter had moved (another handle
    /// committed first): only commits the handle numbered itself ([`Numbering::Checked`],
    /// or a fallback) can be.
    pub counter_conflicts: u64,
    /// Successful commits whose numbers the store assigned ([`Numbering::Store`]).
    pub store_numbered: u64,
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
///
/// # Sharing
/// A handle is cheap to clone: a clone is the same handle (an `Arc` inside), whose requests
/// join the same queue and share batches, so there is no need to wrap it in an `Arc`. Open
/// another handle ([`Sequences::gapless`](crate::Sequences::gapless)) for an independent one.
///
/// # Async requesters
/// [`GaplessSequence::next_async`], [`GaplessSequence::next_with_async`] and
/// [`GaplessSequence::next_coded_async`] join the same queue as blocking requests and are
/// combined with them into the same batches; see the [crate docs](crate#async-services).
pub struct GaplessSequence<S> {
    inner: Arc<GaplessInner<S>>,
}

impl<S> Clone for GaplessSequence<S> {
    /// The same handle: the clone's requests join the same batches.
    fn clone(&self) -> Self {
        GaplessSequence {
            inner: Arc::clone(&self.inner),
        }
    }
}

/// What the clones of a handle share.
struct GaplessInner<S> {
    core: Core<S>,
    queue: Mutex<Queue>,
    /// Wakes a gathering leader when a request joins the queue.
    arrived: Condvar,
    /// How long this handle's batches took lately, in nanoseconds (a moving average).
    batch_nanos: AtomicU64,
    /// The longest a leader gathers, in nanoseconds ([`LINGER_MAX`]; tests set others).
    linger_max: AtomicU64,
    /// Batches whose leader gathered (waited for requests) before leading.
    gathered: AtomicU64,
    /// The counter as the last commit of this handle left it, so a leader need not read it.
    counter: Mutex<Option<(u64, Option<Versionstamp>)>>,
    codes: AtomicU64,
    commits: AtomicU64,
    conflicts: AtomicU64,
    counter_conflicts: AtomicU64,
    store_numbered: AtomicU64,
    /// Set when the handle numbers its commits itself ([`Numbering::Checked`]).
    checked: AtomicBool,
    /// Cleared once the store answered a numbered commit with `Unsupported`.
    store_numbers: AtomicBool,
    /// Itself, for the leader thread, which must not keep the handle alive.
    me: Weak<GaplessInner<S>>,
    /// The leader thread of async requests, started by the first (`None`: it could not be
    /// started, and async requests lead in place).
    leader: OnceLock<Option<Arc<Leader>>>,
}

/// How a handle wakes its leader thread.
#[derive(Default)]
struct Leader {
    state: Mutex<LeaderState>,
    wake: Condvar,
}

#[derive(Default)]
struct LeaderState {
    /// The lead is the thread's: the queue's front request is an async one.
    lead: bool,
    /// The handle is gone.
    stop: bool,
}

impl Leader {
    fn signal(&self, change: impl FnOnce(&mut LeaderState)) {
        change(&mut lock(&self.state));
        self.wake.notify_one();
    }
}

impl<S> Drop for GaplessInner<S> {
    fn drop(&mut self) {
        if let Some(Some(leader)) = self.leader.get() {
            leader.signal(|st| st.stop = true);
        }
    }
}

/// The leader thread's loop: leads a batch each time the lead is handed to it, until the
/// handle is dropped. It holds the handle only while it leads.
fn lead_async_batches<S: Store>(seq: &Weak<GaplessInner<S>>, leader: &Leader) {
    loop {
        {
            let mut st = lock(&leader.state);
            while !st.lead && !st.stop {
                st = leader.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            if st.stop {
                return;
            }
            st.lead = false;
        }
        let Some(seq) = seq.upgrade() else {
            return;
        };
        // A panicking store: `LeadGuard` failed the batch's requests with `CommitPanicked`
        // and passed the lead on; the thread keeps leading.
        let _ = catch_unwind(AssertUnwindSafe(|| seq.lead()));
    }
}

impl<S> std::fmt::Debug for GaplessSequence<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GaplessSequence")
            .field("prefix", &self.inner.core.def.prefix)
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
    /// Statistics of this handle (shared by its clones).
    pub fn stats(&self) -> GaplessStats {
        self.inner.stats()
    }

    /// How this handle numbers its commits.
    pub fn numbering(&self) -> Numbering {
        if self.inner.checked.load(Ordering::Relaxed) {
            Numbering::Checked
        } else {
            Numbering::Store
        }
    }

    /// This handle, numbering its commits as `numbering` says (by default
    /// [`Numbering::Store`]). Its clones, which are the same handle, number theirs the same
    /// way.
    #[must_use]
    pub fn with_numbering(self, numbering: Numbering) -> Self {
        self.inner
            .checked
            .store(numbering == Numbering::Checked, Ordering::Relaxed);
        self
    }

    /// How many requests are queued for a leader right now (for monitoring).
    pub fn pending(&self) -> usize {
        lock(&self.inner.queue).pending.len()
    }

    /// The sequence's prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.core.def.prefix
    }

    /// How the sequence writes its codes.
    pub fn format(&self) -> &Format {
        &self.inner.core.def.format
    }
}

impl<S> GaplessInner<S> {
    fn stats(&self) -> GaplessStats {
        GaplessStats {
            codes: self.codes.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
            counter_conflicts: self.counter_conflicts.load(Ordering::Relaxed),
            store_numbered: self.store_numbered.load(Ordering::Relaxed),
        }
    }

    /// Puts `leftovers` back at the front of the queue and wakes the next leader, if any.
    fn pass_lead(&self, leftovers: Vec<Arc<Request>>) {
        let mut queue = lock(&self.queue);
        for req in leftovers.into_iter().rev() {
            queue.pending.push_front(req);
        }
        match queue.pending.front() {
            None => queue.leading = false,
            Some(next) if next.is_async => self.signal_leader(),
            Some(next) => {
                *lock(&next.state) = State::Lead;
                next.notify();
            }
        }
    }

    /// Hands the lead to the leader thread (started before any async request was queued).
    fn signal_leader(&self) {
        if let Some(Some(leader)) = self.leader.get() {
            leader.signal(|st| st.lead = true);
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
        self.inner.core.parse(code)
    }

    pub(crate) fn new(core: Core<S>) -> Self {
        GaplessSequence {
            inner: Arc::new_cyclic(|me| GaplessInner {
                core,
                queue: Mutex::new(Queue::default()),
                arrived: Condvar::new(),
                batch_nanos: AtomicU64::new(0),
                linger_max: AtomicU64::new(nanos(LINGER_MAX)),
                gathered: AtomicU64::new(0),
                counter: Mutex::new(None),
                codes: AtomicU64::new(0),
                commits: AtomicU64::new(0),
                conflicts: AtomicU64::new(0),
                counter_conflicts: AtomicU64::new(0),
                store_numbered: AtomicU64::new(0),
                checked: AtomicBool::new(false),
                store_numbers: AtomicBool::new(true),
                me: me.clone(),
                leader: OnceLock::new(),
            }),
        }
    }

    fn issued(&self, number: u64) -> Issued<'_> {
        Issued::new(number, &self.inner.core.def.format)
    }

    /// The next number, committed with its uniqueness key as its only record.
    ///
    /// # Errors
    /// As [`GaplessSequence::next_with`].
    pub fn next(&self) -> Result<Issued<'_>, Error> {
        self.next_coded(|_, _| {})
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
        let n = self.inner.request(Builder::Numbered(Box::new(build)))?;
        Ok(self.issued(n))
    }

    /// The next number, committed together with the record `build` writes for its code;
    /// the store writes the number in at commit ([`Numbering::Store`]), so concurrent
    /// commits of this sequence, from this handle or any other, never refuse each other.
    ///
    /// `build` is called with placeholder codes (the code's digits all `0`, then all `9`),
    /// and must put the code into the record verbatim: in keys (a string part, as the last
    /// part or anywhere), in raw values, in serialised strings (a `String` field of a
    /// postcard, JSON or V8 record). The store replaces the placeholder's digits with the
    /// number's. A record that uses the code any other way (parses the number back, hashes
    /// it, branches on it) is found out by comparing the two calls, and the request is then
    /// committed the checked way, `build` called with its real code. So is every request on
    /// a store that cannot number commits. A commit stays below the next width change (a
    /// code inside a value cannot change length), so codes that widen past their width stay
    /// numbered by the store. `build` may run on another
    /// caller's thread and more than once; it must not panic ([`Error::RecordPanicked`]).
    ///
    /// ```
    /// use tuplekv_engine::{Database, key};
    /// use tuplekv_sequence::{Mode, SequenceOptions, Sequences};
    ///
    /// let db = Database::in_memory();
    /// let seqs = Sequences::new(db.clone());
    /// seqs.create("INV", SequenceOptions { mode: Mode::Gapless, width: 5, ..Default::default() })?;
    /// let invoices = seqs.gapless("INV")?;
    /// let issued = invoices.next_coded(|code, record| {
    ///     let json = format!(r#"{{"code":"{code}","total":"100 EUR"}}"#);
    ///     record.check(&key!["invoices", code], None).set(&key!["invoices", code], json.into_bytes());
    /// })?;
    /// assert_eq!(issued.code(), "INV00001");
    /// let stored = db.get(&key!["invoices", "INV00001"])?.expect("committed with its code");
    /// assert_eq!(stored.value.as_bytes(), Some(&br#"{"code":"INV00001","total":"100 EUR"}"#[..]));
    /// assert_eq!(invoices.stats().store_numbered, 1);
    /// # Ok::<(), tuplekv_sequence::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`GaplessSequence::next_with`].
    ///
    /// # Panics
    /// As [`GaplessSequence::next_with`].
    pub fn next_coded<F>(&self, build: F) -> Result<Issued<'_>, Error>
    where
        F: FnMut(&str, &mut Record) + Send + 'static,
    {
        let n = self.inner.request(Builder::Coded(Box::new(build)))?;
        Ok(self.issued(n))
    }
}

impl<S: Store + 'static> GaplessSequence<S> {
    /// [`GaplessSequence::next`] for async callers: the same number, committed the same way,
    /// in the same batches as blocking requests, without holding a thread while the batch is
    /// led (see the [crate docs](crate#async-services)).
    ///
    /// The request is queued when the future is first polled. Dropping the future after
    /// that does not take the request back: it is committed with its number in its batch
    /// like any other (a number is used, and its uniqueness key records it: no gap), and
    /// only its result is lost, as a lost response would be. Dropping it before the first
    /// poll does nothing. If the handle itself (every clone) is dropped before such an
    /// orphaned request's batch is led, the request is dropped with it, uncommitted: it uses
    /// no number either.
    ///
    /// ```
    /// use tuplekv_engine::Database;
    /// use tuplekv_sequence::{Mode, SequenceOptions, Sequences};
    ///
    /// let seqs = Sequences::new(Database::in_memory());
    /// seqs.create("TKT", SequenceOptions { mode: Mode::Gapless, ..Default::default() })?;
    /// let tickets = seqs.gapless("TKT")?;
    /// let issued = pollster::block_on(tickets.next_async())?;
    /// assert_eq!(issued.code(), "TKT001");
    /// assert_eq!(tickets.next()?.number(), 2); // blocking and async requests share the handle
    /// # Ok::<(), tuplekv_sequence::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`GaplessSequence::next_with`]. A store panic in a batch is reported to every
    /// request of the batch as [`Error::CommitPanicked`] (the leader thread keeps going).
    pub fn next_async(&self) -> impl Future<Output = Result<Issued<'_>, Error>> + Send + '_ {
        self.next_coded_async(|_, _| {})
    }

    /// [`GaplessSequence::next_with`] for async callers; see
    /// [`GaplessSequence::next_async`]. `build` runs on whichever thread leads the batch.
    ///
    /// ```
    /// use tuplekv_engine::{Database, key};
    /// use tuplekv_sequence::{Mode, SequenceOptions, Sequences};
    ///
    /// let db = Database::in_memory();
    /// let seqs = Sequences::new(db.clone());
    /// seqs.create("INV", SequenceOptions { mode: Mode::Gapless, ..Default::default() })?;
    /// let invoices = seqs.gapless("INV")?;
    /// let issued = pollster::block_on(invoices.next_with_async(|issued, record| {
    ///     record.set(&key!["invoices", issued.number()], b"100 EUR");
    /// }))?;
    /// assert_eq!(issued.code(), "INV001");
    /// assert!(db.get(&key!["invoices", 1u64])?.is_some());
    /// # Ok::<(), tuplekv_sequence::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`GaplessSequence::next_async`].
    pub fn next_with_async<F>(
        &self,
        build: F,
    ) -> impl Future<Output = Result<Issued<'_>, Error>> + Send + '_
    where
        F: FnMut(&Issued<'_>, &mut Record) + Send + 'static,
    {
        let build = Builder::Numbered(Box::new(build));
        async move {
            let n = self.inner.request_async(build).await?;
            Ok(self.issued(n))
        }
    }

    /// [`GaplessSequence::next_coded`] for async callers; see
    /// [`GaplessSequence::next_async`]. `build` runs on whichever thread leads the batch.
    ///
    /// ```
    /// use tuplekv_engine::{Database, key};
    /// use tuplekv_sequence::{Mode, SequenceOptions, Sequences};
    ///
    /// let db = Database::in_memory();
    /// let seqs = Sequences::new(db.clone());
    /// seqs.create("INV", SequenceOptions { mode: Mode::Gapless, ..Default::default() })?;
    /// let invoices = seqs.gapless("INV")?;
    /// let issued = pollster::block_on(invoices.next_coded_async(|code, record| {
    ///     record.set(&key!["invoices", code], b"100 EUR");
    /// }))?;
    /// assert_eq!(issued.code(), "INV001");
    /// assert!(db.get(&key!["invoices", "INV001"])?.is_some());
    /// # Ok::<(), tuplekv_sequence::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`GaplessSequence::next_async`].
    pub fn next_coded_async<F>(
        &self,
        build: F,
    ) -> impl Future<Output = Result<Issued<'_>, Error>> + Send + '_
    where
        F: FnMut(&str, &mut Record) + Send + 'static,
    {
        let build = Builder::Coded(Box::new(build));
        async move {
            let n = self.inner.request_async(build).await?;
            Ok(self.issued(n))
        }
    }
}

impl<S: Store + 'static> GaplessInner<S> {
    /// The leader thread, started on the first call (`None` if it could not be started).
    fn leader(&self) -> Option<&Arc<Leader>> {
        self.leader
            .get_or_init(|| {
                let leader = Arc::new(Leader::default());
                let (seq, signal) = (self.me.clone(), Arc::clone(&leader));
                std::thread::Builder::new()
                    .name(format!("tuplekv-gapless-{}", self.core.def.prefix))
                    .spawn(move || lead_async_batches(&seq, &signal))
                    .ok()
                    .map(|_| leader)
            })
            .as_ref()
    }

    /// Queues an async request and waits, holding no thread, for its result.
    async fn request_async(&self, build: Builder) -> Result<u64, Error> {
        if self.leader().is_none() {
            // No thread to lead: lead in place, as a blocking requester would.
            return self.request(build);
        }
        let req = Arc::new(Request::new(build, true));
        {
            let mut queue = lock(&self.queue);
            queue.pending.push_back(Arc::clone(&req));
            if !std::mem::replace(&mut queue.leading, true) {
                self.signal_leader();
            } else if queue.gathering {
                self.arrived.notify_one();
            }
        }
        std::future::poll_fn(|cx| {
            let mut state = lock(&req.state);
            match std::mem::replace(&mut *state, State::Waiting) {
                State::Done(result) => Poll::Ready(result),
                // An async request is never handed the lead (`pass_lead` wakes the leader
                // thread instead), so it only ever waits.
                State::Lead | State::Waiting => {
                    *lock(&req.waker) = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }
}

impl<S: Store> GaplessInner<S> {
    fn request(&self, build: Builder) -> Result<u64, Error> {
        let req = Arc::new(Request::new(build, false));
        {
            let mut queue = lock(&self.queue);
            queue.pending.push_back(Arc::clone(&req));
            if !std::mem::replace(&mut queue.leading, true) {
                *lock(&req.state) = State::Lead;
            } else if queue.gathering {
                self.arrived.notify_one();
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
                State::Done(result) => return result,
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
            let mut queue = self.gather(lock(&self.queue));
            let n = queue.pending.len().min(BATCH_REQUESTS_MAX);
            queue.expect = n;
            queue.pending.drain(..n).collect()
        };
        let mut guard = LeadGuard {
            seq: self,
            batch: batch.clone(),
        };
        let started = Instant::now();
        let leftovers = self.run(batch);
        self.took(started.elapsed());
        guard.batch.clear(); // disarmed: every request was finished or is in `leftovers`
        drop(guard);
        self.pass_lead(leftovers);
    }

    /// Waits, with the queue's lock released, until as many requests are queued as the
    /// previous batch took or the gathering time is up (see the module docs); the queue,
    /// locked again.
    fn gather<'q>(&self, mut queue: MutexGuard<'q, Queue>) -> MutexGuard<'q, Queue> {
        let want = queue.expect.min(BATCH_REQUESTS_MAX);
        if queue.pending.len() >= want {
            return queue;
        }
        let linger = linger(
            self.batch_nanos.load(Ordering::Relaxed),
            Duration::from_nanos(self.linger_max.load(Ordering::Relaxed)),
        );
        if linger.is_zero() {
            return queue;
        }
        let Some(deadline) = Instant::now().checked_add(linger) else {
            return queue;
        };
        self.gathered.fetch_add(1, Ordering::Relaxed);
        queue.gathering = true;
        while queue.pending.len() < want {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            queue = self
                .arrived
                .wait_timeout(queue, left)
                .map_or_else(|e| e.into_inner().0, |(q, _)| q);
        }
        queue.gathering = false;
        queue
    }

    /// Counts a batch that took `elapsed` into the handle's recent batch time.
    fn took(&self, elapsed: Duration) {
        let old = self.batch_nanos.load(Ordering::Relaxed);
        self.batch_nanos
            .store(average(old, nanos(elapsed)), Ordering::Relaxed);
    }

    /// Commits `batch`, finishing every request it can; returns those left for a later batch.
    fn run(&self, batch: Vec<Arc<Request>>) -> Vec<Arc<Request>> {
        let in_store = !self.checked.load(Ordering::Relaxed)
            && self.store_numbers.load(Ordering::Relaxed)
            && batch.iter().all(|r| r.coded());
        if !in_store {
            return self.run_checked(batch.into());
        }
        let (mut later, checked) = self.run_in_store(batch.into());
        if !checked.is_empty() {
            later.extend(self.run_checked(checked));
        }
        later
    }

    /// Commits `live` numbering it itself, checking the counter's versionstamp.
    fn run_checked(&self, mut live: VecDeque<Arc<Request>>) -> Vec<Arc<Request>> {
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
                        self.counter_conflicts.fetch_add(1, Ordering::Relaxed);
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
                    for p in parts {
                        p.req.finish(Err(self.unanswered(&e, Some(p.number))));
                    }
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
                lock(&req.build).build(&issued, &mut record);
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

    /// The error of a request whose batch's commit got no answer: for a lost answer
    /// ([`Error::OutcomeUnknown`]), with `number`, the number it has if the batch committed
    /// (when the handle numbered the batch); otherwise the store's error.
    fn unanswered(&self, e: &StoreError, number: Option<u64>) -> Error {
        match e {
            StoreError::OutcomeUnknown { .. } => Error::OutcomeUnknown {
                prefix: self.core.def.prefix.clone(),
                number,
                code: number.map(|n| self.core.def.format.format(n)),
                cause: Box::new(e.clone()),
            },
            e => e.clone().into(),
        }
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

/// One request's part of a commit the store numbers.
struct StorePart {
    req: Arc<Request>,
    /// Its number is the claim's first plus this.
    ordinal: u32,
    /// The index of its first check in the batch's operation.
    first_check: usize,
    /// How many checks it has (its own and its uniqueness check).
    checks: usize,
    /// The index of its uniqueness check in the batch's operation.
    backstop: usize,
}

/// What building a store-numbered batch gave.
struct StoreBatch {
    parts: Vec<StorePart>,
    write: AtomicWrite,
    /// Whether a part's value holds its code (so a wider number refuses the commit).
    fixed_width: bool,
}

/// A store-numbered commit (if any request went in), the requests deferred to a later
/// batch, those for the next round of this batch, and those only the checked path serves.
type Built = (
    Option<StoreBatch>,
    Vec<Arc<Request>>,
    VecDeque<Arc<Request>>,
    Vec<Arc<Request>>,
);

/// What a request's record closure gave for the placeholders.
enum Template {
    /// The record's write (for the all-`0` placeholder) and where its code's digits sit.
    Holes(AtomicWrite, Vec<Hole>),
    /// The record does not hold its code verbatim: the checked path serves it.
    Checked,
    /// The closure panicked.
    Panicked,
}

impl<S: Store> GaplessInner<S> {
    /// Commits `live` with numbers the store assigns. Returns the requests left for a later
    /// batch, and those the checked path must serve (records the store cannot fill, a batch
    /// across a width change, a store that cannot number).
    fn run_in_store(
        &self,
        mut live: VecDeque<Arc<Request>>,
    ) -> (Vec<Arc<Request>>, VecDeque<Arc<Request>>) {
        let mut later = Vec::new();
        let mut checked = VecDeque::new();
        let mut one_by_one = false;
        let mut attempts = 0;
        // A guess of the next number, for the width of the placeholders: the counter only
        // grows, so a stale guess is low, and a code it makes too narrow is refused by the
        // store (`NumberTooWide`) rather than written.
        let mut guess = lock(&self.counter).map(|(n, _)| n);
        while !live.is_empty() {
            let next = match guess {
                Some(n) => n,
                None => match self.core.read_counter() {
                    Ok((n, _)) => *guess.insert(n),
                    Err(e) => {
                        live.drain(..).for_each(|r| r.finish(Err(e.clone())));
                        break;
                    }
                },
            };
            let digits = self.core.def.format.digits(next);
            // A commit stays below the next width change: a code inside a value cannot
            // change length, so the numbers of one commit have one width.
            let room = u32::try_from(digits)
                .ok()
                .and_then(|d| 10u64.checked_pow(d))
                .map_or(u64::MAX, |wider| wider - next);
            let most = if one_by_one {
                1
            } else {
                usize::try_from(room).unwrap_or(usize::MAX)
            };
            let (batch, deferred, rest, unfit) = self.build_in_store(&mut live, digits, most);
            later.extend(deferred);
            checked.extend(unfit);
            live = rest;
            let Some(StoreBatch {
                parts,
                write,
                fixed_width,
            }) = batch
            else {
                continue;
            };
            match self.core.store.commit(write) {
                Ok(CommitResult::Committed {
                    versionstamp,
                    numbers,
                }) => {
                    let Some(&first) = numbers.first() else {
                        // A store that ignored the numbering: nothing is known about it.
                        let e = Error::Corrupt {
                            prefix: self.core.def.prefix.clone(),
                            reason: "the store committed a numbered write without numbers".into(),
                        };
                        parts.into_iter().for_each(|p| p.req.finish(Err(e.clone())));
                        *lock(&self.counter) = None;
                        break;
                    };
                    let end = first + parts.len() as u64;
                    *lock(&self.counter) = Some((end, Some(versionstamp)));
                    guess = Some(end);
                    self.commits.fetch_add(1, Ordering::Relaxed);
                    self.store_numbered.fetch_add(1, Ordering::Relaxed);
                    self.codes.fetch_add(parts.len() as u64, Ordering::Relaxed);
                    for p in parts {
                        p.req.finish(Ok(first + u64::from(p.ordinal)));
                    }
                }
                Ok(CommitResult::Conflict(conflict)) => {
                    self.conflicts.fetch_add(1, Ordering::Relaxed);
                    let before = parts.len();
                    let retry = self.reject_in_store(parts, &conflict);
                    if retry.len() == before {
                        // Nothing to blame (no check of ours failed): count it, and give up
                        // after as many tries as a moved counter gets.
                        attempts += 1;
                    }
                    if attempts >= COMMIT_ATTEMPTS_MAX {
                        let e = Error::Contention {
                            prefix: self.core.def.prefix.clone(),
                            attempts,
                        };
                        retry.into_iter().for_each(|r| r.finish(Err(e.clone())));
                        live.drain(..).for_each(|r| r.finish(Err(e.clone())));
                        break;
                    }
                    requeue_requests(&mut live, retry);
                }
                Err(StoreError::Unsupported { .. }) => {
                    // A store that cannot number commits (a plain KV Connect server): from
                    // now on this handle numbers its commits itself.
                    self.store_numbers.store(false, Ordering::Relaxed);
                    requeue_requests(&mut live, parts.into_iter().map(|p| p.req).collect());
                    checked.extend(live.drain(..));
                    break;
                }
                Err(StoreError::NumberTooWide { .. }) if fixed_width => {
                    // The guess was stale across a width change: read the counter.
                    attempts += 1;
                    guess = None;
                    requeue_requests(&mut live, parts.into_iter().map(|p| p.req).collect());
                }
                Err(StoreError::CounterExhausted { next, max, .. }) => {
                    // Those within the limit go again; the others can never be numbered.
                    let room =
                        usize::try_from((max + 1).saturating_sub(next)).unwrap_or(usize::MAX);
                    let mut parts = parts;
                    let over = parts.split_off(room.min(parts.len()));
                    let e = self.core.def.exhausted();
                    over.into_iter().for_each(|p| p.req.finish(Err(e.clone())));
                    guess = Some(next);
                    requeue_requests(&mut live, parts.into_iter().map(|p| p.req).collect());
                    if room == 0 {
                        live.drain(..).for_each(|r| r.finish(Err(e.clone())));
                    }
                }
                // Sent and unanswered, or not sent: see `run_checked`. No number is known to
                // be taken, and none is resent.
                Err(e @ (StoreError::OutcomeUnknown { .. } | StoreError::Unavailable { .. })) => {
                    *lock(&self.counter) = None;
                    guess = None;
                    for p in parts {
                        p.req.finish(Err(self.unanswered(&e, None)));
                    }
                }
                Err(e) if parts.len() == 1 => {
                    parts
                        .into_iter()
                        .for_each(|p| p.req.finish(Err(e.clone().into())));
                }
                Err(_) => {
                    one_by_one = true;
                    requeue_requests(&mut live, parts.into_iter().map(|p| p.req).collect());
                }
            }
        }
        (later, checked)
    }

    /// The record of `req` for the placeholder codes of `digits` digits.
    fn template(&self, req: &Request, digits: usize) -> Template {
        let format = &self.core.def.format;
        let mut writes = Vec::with_capacity(2);
        for fill in ['0', '9'] {
            let (code, _) = format.sample(digits, fill);
            let mut record = Record::new();
            let built = catch_unwind(AssertUnwindSafe(|| match &mut *lock(&req.build) {
                Builder::Coded(f) => {
                    f(&code, &mut record);
                    true
                }
                Builder::Numbered(_) => false,
            }));
            match built {
                Ok(true) => writes.push(record.into_write()),
                Ok(false) => return Template::Checked,
                Err(_) => return Template::Panicked,
            }
        }
        let (Some(nines), Some(zeros)) = (writes.pop(), writes.pop()) else {
            return Template::Checked;
        };
        match holes(&zeros, &nines, digits) {
            Some(h) => Template::Holes(zeros, h),
            None => Template::Checked,
        }
    }

    /// Builds one store-numbered commit from the front of `live`. Returns it (if any request
    /// went in), the requests deferred to a later batch, those for the next round of this
    /// batch, and those only the checked path can serve.
    fn build_in_store(
        &self,
        live: &mut VecDeque<Arc<Request>>,
        digits: usize,
        most: usize,
    ) -> Built {
        let format = &self.core.def.format;
        let width = u8::try_from(digits).unwrap_or(u8::MAX);
        let (code, head) = format.sample(digits, '0');
        let head = u32::try_from(head).unwrap_or(u32::MAX);
        let used_len = u32::try_from(self.core.used.len()).unwrap_or(u32::MAX);
        let mut write = AtomicWrite::default();
        let mut slots = Vec::new();
        let mut parts: Vec<StorePart> = Vec::new();
        let mut deferred = Vec::new();
        let mut unfit = Vec::new();
        let mut written: HashSet<KeyBytes> = HashSet::new();
        let mut budget = Budget::default();
        let mut fixed_width = false;
        while let Some(req) = live.pop_front() {
            let (mut own, holes) = match self.template(&req, digits) {
                Template::Holes(w, h) => (w, h),
                Template::Checked => {
                    unfit.push(req);
                    continue;
                }
                Template::Panicked => {
                    req.finish(Err(Error::RecordPanicked {
                        prefix: self.core.def.prefix.clone(),
                    }));
                    continue;
                }
            };
            // The record's own checks and mutations (the uniqueness key follows them).
            let (own_checks, own_mutations) = (own.checks.len(), own.mutations.len());
            // The uniqueness key: `used + number` checked absent, set to the code.
            let used = KeyBytes::from(self.core.used.as_slice());
            own.checks.push(Check {
                key: used.clone(),
                versionstamp: None,
            });
            own.mutations.push(Mutation {
                key: used,
                kind: MutationKind::Set {
                    value: Value::from(code.clone().into_bytes()),
                    expiry: None,
                },
            });
            let literal = |target: SlotTarget| !holes.iter().any(|h| h.target == target);
            if !parts.is_empty() {
                // Its checks must not see what an earlier request of this commit writes (keys
                // holding a code differ between requests: only literal keys can meet).
                let meets = own.checks[..own_checks].iter().enumerate().any(|(i, c)| {
                    literal(SlotTarget::CheckKey(u32::try_from(i).unwrap_or(u32::MAX)))
                        && written.contains(&c.key)
                });
                let slots_after = slots.len() + holes.len() + 2;
                if meets {
                    deferred.push(req);
                    continue;
                }
                if slots_after > NUMBER_SLOTS_MAX || !budget.try_add(&own) {
                    live.push_front(req);
                    deferred.extend(live.drain(..));
                    break;
                }
            } else {
                budget.try_add(&own);
            }
            for (i, m) in own.mutations[..own_mutations].iter().enumerate() {
                if literal(SlotTarget::MutationKey(
                    u32::try_from(i).unwrap_or(u32::MAX),
                )) {
                    written.insert(m.key.clone());
                }
            }
            let ordinal = u32::try_from(parts.len()).unwrap_or(u32::MAX);
            let first_check = write.checks.len();
            let first_mutation = write.mutations.len();
            let shift = |t: SlotTarget| {
                let (c, m) = (
                    u32::try_from(first_check).unwrap_or(u32::MAX),
                    u32::try_from(first_mutation).unwrap_or(u32::MAX),
                );
                match t {
                    SlotTarget::CheckKey(i) => SlotTarget::CheckKey(c + i),
                    SlotTarget::MutationKey(i) => SlotTarget::MutationKey(m + i),
                    SlotTarget::MutationValue(i) => SlotTarget::MutationValue(m + i),
                }
            };
            for h in &holes {
                let value = matches!(h.target, SlotTarget::MutationValue(_));
                fixed_width |= value;
                slots.push(NumberSlot {
                    counter: 0,
                    ordinal,
                    target: shift(h.target),
                    offset: h.offset,
                    form: NumberForm::Digits {
                        width,
                        widen: !value,
                    },
                });
            }
            let backstop_check = own.checks.len() - 1;
            let backstop_set = own.mutations.len() - 1;
            let check_target = shift(SlotTarget::CheckKey(
                u32::try_from(backstop_check).unwrap_or(u32::MAX),
            ));
            let set_target = shift(SlotTarget::MutationKey(
                u32::try_from(backstop_set).unwrap_or(u32::MAX),
            ));
            let value_target = shift(SlotTarget::MutationValue(
                u32::try_from(backstop_set).unwrap_or(u32::MAX),
            ));
            for target in [check_target, set_target] {
                slots.push(NumberSlot {
                    counter: 0,
                    ordinal,
                    target,
                    offset: used_len,
                    form: NumberForm::KeyPart,
                });
            }
            // The uniqueness key's value is the bare code: it may widen.
            slots.push(NumberSlot {
                counter: 0,
                ordinal,
                target: value_target,
                offset: head,
                form: NumberForm::Digits { width, widen: true },
            });
            let checks = own.checks.len();
            write.checks.append(&mut own.checks);
            write.mutations.append(&mut own.mutations);
            parts.push(StorePart {
                req,
                ordinal,
                first_check,
                checks,
                backstop: first_check + backstop_check,
            });
            if parts.len() >= most {
                break;
            }
        }
        if parts.is_empty() {
            return (None, deferred, std::mem::take(live), unfit);
        }
        write.numbering = EngineNumbering {
            counters: vec![CounterClaim {
                key: KeyBytes::from(self.core.counter.as_slice()),
                start: self.core.def.start,
                count: u32::try_from(parts.len()).unwrap_or(u32::MAX),
                max: self.core.def.limit(),
            }],
            slots,
        };
        (
            Some(StoreBatch {
                parts,
                write,
                fixed_width,
            }),
            deferred,
            std::mem::take(live),
            unfit,
        )
    }

    /// Fails the requests of a store-numbered commit whose own or uniqueness checks failed;
    /// returns the others, to go again (the store numbers them afresh).
    fn reject_in_store(&self, parts: Vec<StorePart>, conflict: &Conflict) -> Vec<Arc<Request>> {
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
                retry.push(p.req);
            } else if let Some(f) = failed.iter().find(|f| f.index == p.backstop) {
                // The counter went back: the failed key says which number repeated.
                let number = self.core.number_of_used_key(&f.key).unwrap_or(0);
                p.req.finish(Err(self.core.duplicate(number)));
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

/// Puts `reqs` back at the front of `live`, in their order.
fn requeue_requests(live: &mut VecDeque<Arc<Request>>, reqs: Vec<Arc<Request>>) {
    for r in reqs.into_iter().rev() {
        live.push_front(r);
    }
}

/// Armed while a leader runs a batch: if the store panics (the only code in a batch that is
/// not ours, apart from record closures, which are caught), dropping it during the unwind
/// fails every request of the batch that is still waiting and hands the lead on. Without it
/// `leading` would stay set and every later request on the handle would wait forever.
struct LeadGuard<'a, S> {
    seq: &'a GaplessInner<S>,
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
                drop(state);
                req.notify();
            }
        }
        self.seq.pass_lead(Vec::new());
    }
}

/// `duration` in whole nanoseconds, saturating at `u64::MAX` (about 584 years).
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// How long a leader gathers when its handle's batches took `batch_nanos` lately: a
/// [`LINGER_SHARE`]-th of that, and at most `max`.
fn linger(batch_nanos: u64, max: Duration) -> Duration {
    Duration::from_nanos(batch_nanos / LINGER_SHARE).min(max)
}

/// The moving average of batch times after a batch that took `nanos`, when it was `old`:
/// one eighth of the new time, seven eighths of the old; the first batch (`old` 0) sets it.
fn average(old: u64, nanos: u64) -> u64 {
    if old == 0 {
        nanos
    } else {
        old - old / 8 + nanos / 8
    }
}

/// Puts `parts`' requests back at the front of `live`, in their order.
fn requeue(live: &mut VecDeque<Arc<Request>>, parts: Vec<Part>) {
    for p in parts.into_iter().rev() {
        live.push_front(p.req);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    //! Gathering, made deterministic: each test sets the handle's previous batch size, its
    //! recent batch time and its longest wait, and waits for the leader's `gathering` flag
    //! instead of for time to pass.
    use std::thread;

    use tuplekv_engine::Database;

    use super::*;
    use crate::{Mode, SequenceOptions, Sequences};

    const HOUR: Duration = Duration::from_secs(3600);

    /// A gapless handle whose previous batch took `expect` requests in `batch` lately and
    /// whose leaders gather for at most `linger_max`.
    fn handle(linger_max: Duration, expect: usize, batch: Duration) -> GaplessSequence<Database> {
        let seqs = Sequences::new(Database::in_memory());
        let options = SequenceOptions {
            mode: Mode::Gapless,
            ..Default::default()
        };
        seqs.create("TKT", options).unwrap();
        let seq = seqs.gapless("TKT").unwrap();
        seq.inner
            .linger_max
            .store(nanos(linger_max), Ordering::Relaxed);
        seq.inner.batch_nanos.store(nanos(batch), Ordering::Relaxed);
        lock(&seq.inner.queue).expect = expect;
        seq
    }

    /// Waits until a leader of `seq` is gathering.
    fn until_gathering(seq: &GaplessSequence<Database>) {
        while !lock(&seq.inner.queue).gathering {
            thread::yield_now();
        }
    }

    #[test]
    fn leader_gathers_until_as_many_requests_as_its_previous_batch_are_queued() {
        let seq = handle(HOUR, 2, 4 * HOUR);
        let first = {
            let seq = seq.clone();
            thread::spawn(move || seq.next().unwrap().number())
        };
        until_gathering(&seq);
        let second = {
            let seq = seq.clone();
            thread::spawn(move || seq.next().unwrap().number())
        };
        let mut numbers = vec![first.join().unwrap(), second.join().unwrap()];
        numbers.sort_unstable();
        assert_eq!(numbers, [1, 2]);
        let stats = seq.stats();
        assert_eq!((stats.commits, stats.codes), (1, 2), "{stats:?}");
        assert_eq!(seq.inner.gathered.load(Ordering::Relaxed), 1);
        assert!(!lock(&seq.inner.queue).gathering);
    }

    #[test]
    fn async_request_wakes_a_gathering_blocking_leader_and_joins_its_batch() {
        let seq = handle(HOUR, 2, 4 * HOUR);
        let blocking = {
            let seq = seq.clone();
            thread::spawn(move || seq.next().unwrap().number())
        };
        until_gathering(&seq);
        let from_async = {
            let seq = seq.clone();
            thread::spawn(move || pollster::block_on(seq.next_async()).unwrap().number())
        };
        let mut numbers = vec![blocking.join().unwrap(), from_async.join().unwrap()];
        numbers.sort_unstable();
        assert_eq!(numbers, [1, 2]);
        let stats = seq.stats();
        assert_eq!((stats.commits, stats.codes), (1, 2), "{stats:?}");
    }

    #[test]
    fn lone_sequential_requester_never_gathers() {
        // A leader that waited would wait the whole five seconds for nobody.
        let seq = handle(Duration::from_secs(5), 0, 4 * HOUR);
        for expected in 1..=20 {
            assert_eq!(seq.next().unwrap().number(), expected);
        }
        assert_eq!(seq.inner.gathered.load(Ordering::Relaxed), 0);
        assert_eq!(lock(&seq.inner.queue).expect, 1);
        assert_eq!(seq.stats().commits, 20);
    }

    #[test]
    fn gathering_ends_at_its_longest_wait_when_nobody_comes() {
        let seq = handle(Duration::from_millis(1), 2, 4 * HOUR);
        assert_eq!(seq.next().unwrap().number(), 1);
        assert_eq!(seq.inner.gathered.load(Ordering::Relaxed), 1);
        assert_eq!(
            lock(&seq.inner.queue).expect,
            1,
            "the handle now expects fewer"
        );
        assert_eq!(seq.next().unwrap().number(), 2);
        assert_eq!(seq.inner.gathered.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn first_batch_of_a_handle_never_gathers() {
        // No batch time yet: nothing to take a share of, even when more are expected.
        let seq = handle(HOUR, 2, Duration::ZERO);
        assert_eq!(seq.next().unwrap().number(), 1);
        assert_eq!(seq.inner.gathered.load(Ordering::Relaxed), 0);
        assert!(seq.inner.batch_nanos.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn linger_is_a_share_of_the_batch_time_up_to_linger_max() {
        let share = u64::try_from(LINGER_MAX.as_nanos()).unwrap() * LINGER_SHARE;
        assert_eq!(linger(0, LINGER_MAX), Duration::ZERO);
        assert_eq!(
            linger(share - LINGER_SHARE, LINGER_MAX),
            LINGER_MAX - Duration::from_nanos(1),
            "just below the limit: the share"
        );
        assert_eq!(linger(share, LINGER_MAX), LINGER_MAX, "at the limit");
        assert_eq!(
            linger(share + LINGER_SHARE, LINGER_MAX),
            LINGER_MAX,
            "past it"
        );
        assert_eq!(linger(u64::MAX, LINGER_MAX), LINGER_MAX, "far past it");
    }

    #[test]
    fn batch_time_average_moves_an_eighth_per_batch_and_never_overflows() {
        assert_eq!(average(0, 800), 800, "the first batch sets it");
        assert_eq!(average(800, 800), 800);
        assert_eq!(average(800, 1600), 900);
        assert_eq!(average(800, 0), 700);
        assert_eq!(average(u64::MAX, u64::MAX), u64::MAX);
        assert_eq!(nanos(Duration::MAX), u64::MAX);
    }
}
