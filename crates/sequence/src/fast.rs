//! [`FastSequence`]: numbers from blocks reserved in the store, handed out lock-free.
//!
//! # Async callers
//! [`FastSequence::next_async`] takes its number on the same lock-free path as
//! [`FastSequence::next`]. When the block is used up it does not reserve the next one under
//! the allocator's refill mutex (that would hold the mutex, and the caller's thread, while the
//! store commits). Instead, under the mutex and only for as long as it takes to look, it either
//! finds a block an async caller already reserved (`prefetched`), or joins the waiters of a
//! reservation in flight (its task sleeps on a waker, holding nothing), or marks a reservation
//! in flight and makes it itself: the counter raise runs through
//! [`tuplekv_engine::replay::run`], awaiting the store without holding a thread. The block it
//! gets becomes `prefetched`, the waiters are woken, and every caller draws again: the first
//! that finds the block used up hands the allocator the prefetched block instead of reserving.
//!
//! Blocking callers on the same handle take a prefetched block first, and otherwise reserve
//! as before, even while an async reservation is in flight: both raise the counter with a
//! checked commit, so their blocks never overlap. If the blocking one lands a higher block
//! first, the async one's lower block is dropped when it arrives (a gap, never a repeat), so
//! the allocator is only ever given blocks above every block it was given before.
//!
//! The block size adapts as for blocking callers: the async reserver computes the size from the
//! time since the last block *before* the replayed operation (which must not depend on the
//! clock), and records the new size and time after it commits.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use tuplekv_engine::{AtomicWrite, Store, Versionstamp};

use crate::block::BlockAllocator;
use crate::error::Error;
use crate::format::{Format, Issued};
use crate::limits::{
    BLOCK_GROW_WITHIN, BLOCK_SHRINK_AFTER, BLOCK_SIZE_MAX, BLOCK_SIZE_MIN, COMMIT_ATTEMPTS_MAX,
};
use crate::record::Record;
use crate::sequences::Core;

/// What a handle remembers between reservations, kept under the allocator's refill mutex.
#[derive(Debug)]
struct Adapt {
    /// The size of the next block, before adapting it to how fast the last one went.
    size: u64,
    /// When the last block was reserved.
    last: Option<Instant>,
    reservations: u64,
    /// The end of the last block reserved: the counter can never be below it again, unless
    /// someone put it back.
    reserved: u64,
    /// A block an async caller reserved and no caller has handed the allocator yet: the next
    /// refill takes it instead of reserving.
    prefetched: Option<Range<u64>>,
    /// Whether an async caller is reserving a block now.
    in_flight: bool,
    /// The tasks of async callers waiting for that reservation.
    waiters: Vec<Waker>,
}

impl Adapt {
    /// Records a committed reservation of `block`, of `size` numbers, made at `now`.
    fn committed(&mut self, block: &Range<u64>, size: u64, now: Instant) {
        self.size = size;
        self.last = Some(now);
        self.reservations += 1;
        self.reserved = block.end;
    }
}

/// The refill found no prefetched block (an async caller then reserves one).
struct NoBlock;

/// A handle on a fast sequence: unique, increasing numbers with gaps, at the cost of an atomic
/// increment each.
///
/// The store holds the sequence's high-water mark (the first number no handle has reserved).
/// A handle reserves a block of numbers above it with one atomic commit (check the mark's
/// versionstamp, raise the mark) and hands the block out with one `fetch_add` per number
/// ([`BlockAllocator`]). Block sizes adapt to demand between [`BLOCK_SIZE_MIN`] and
/// [`BLOCK_SIZE_MAX`].
///
/// Guarantees: no two handles (threads, servers sharing the store, restarts) ever hand out the
/// same number; numbers from one handle increase (a `next` that returns before another starts
/// returns the smaller number); numbers reserved but not handed out (a dropped handle, a crash)
/// are never used: a gap of at most one block per handle. A failed `next` (a store error)
/// uses no number and never makes a block larger.
///
/// A handle remembers the end of the last block it reserved: if it finds the counter below
/// that (a stale copy of the store restored under it), it fails with
/// [`Error::CounterWentBack`] instead of handing out numbers again.
///
/// Across a crash of the machine (not only of the process), "never reused" needs the store to
/// keep every acknowledged commit: with `tuplekv_engine::Durability::Sync` (the default) it
/// does; with `Durability::Buffered` an operating-system crash can lose the last block
/// reservation after its numbers were handed out, and a new handle hands them out again (see
/// the crate docs).
///
/// ```
/// use tuplekv_engine::{Database, key};
/// use tuplekv_sequence::{Record, SequenceOptions, Sequences};
///
/// let db = Database::in_memory();
/// let seqs = Sequences::new(db.clone());
/// seqs.create("WARN", SequenceOptions::default())?;
/// let warn = seqs.fast("WARN")?;
/// let issued = warn.next()?;
/// // Record the code together with its uniqueness backstop.
/// let mut record = Record::new();
/// record.set(&key!["logs", issued.code()], b"disk almost full");
/// warn.record(issued.number(), record)?;
/// assert!(db.get(&key!["logs", "WARN001"])?.is_some());
/// # Ok::<(), tuplekv_sequence::Error>(())
/// ```
///
/// # Sharing
/// A handle is cheap to clone: a clone is the same handle (an `Arc` inside), sharing its
/// blocks and its adaptive block size, so there is no need to wrap it in an `Arc`. Open
/// another handle ([`Sequences::fast`](crate::Sequences::fast)) for an independent one.
#[derive(Debug)]
pub struct FastSequence<S> {
    inner: Arc<FastInner<S>>,
}

impl<S> Clone for FastSequence<S> {
    /// The same handle: the clone shares its blocks.
    fn clone(&self) -> Self {
        FastSequence {
            inner: Arc::clone(&self.inner),
        }
    }
}

/// What the clones of a handle share.
#[derive(Debug)]
struct FastInner<S> {
    core: Core<S>,
    alloc: BlockAllocator<Adapt>,
}

impl<S: Store> FastSequence<S> {
    pub(crate) fn new(core: Core<S>) -> Self {
        FastSequence {
            inner: Arc::new(FastInner {
                core,
                alloc: BlockAllocator::new(Adapt {
                    size: BLOCK_SIZE_MIN,
                    last: None,
                    reservations: 0,
                    reserved: 0,
                    prefetched: None,
                    in_flight: false,
                    waiters: Vec::new(),
                }),
            }),
        }
    }

    /// The next number and its code.
    ///
    /// # Errors
    /// [`Error::Exhausted`] past the maximum of a sequence that fails there;
    /// [`Error::CounterWentBack`] if the stored counter is below a block this handle reserved;
    /// [`Error::Contention`] or a store error when reserving a block. No number is used.
    #[inline]
    pub fn next(&self) -> Result<Issued<'_>, Error> {
        Ok(Issued::new(
            self.next_number()?,
            &self.inner.core.def.format,
        ))
    }

    /// The next number, without its code; see [`FastSequence::next`].
    ///
    /// # Errors
    /// As [`FastSequence::next`].
    #[inline]
    pub fn next_number(&self) -> Result<u64, Error> {
        let inner = &*self.inner;
        inner.alloc.next(|adapt| match adapt.prefetched.take() {
            Some(block) => Ok(block),
            None => reserve(&inner.core, adapt),
        })
    }

    /// [`FastSequence::next`] for async callers: the same numbers, with the same guarantees,
    /// but a block reservation is awaited without holding a thread (see the
    /// [crate docs](crate#async-services)). Most calls take a number from the current block
    /// and are ready at once; one call per block waits for the store's commit, and the calls
    /// that find the block used up meanwhile wait for that one reservation instead of making
    /// their own.
    ///
    /// Dropping the future while it waits uses no number; a reservation it was making is
    /// abandoned (if it committed, its block is skipped: a gap, never a repeat), and another
    /// caller reserves the next block.
    ///
    /// ```
    /// use tuplekv_engine::Database;
    /// use tuplekv_sequence::{SequenceOptions, Sequences};
    ///
    /// let seqs = Sequences::new(Database::in_memory());
    /// seqs.create("REQ", SequenceOptions::default())?;
    /// let requests = seqs.fast("REQ")?;
    /// let issued = pollster::block_on(requests.next_async())?;
    /// assert_eq!(issued.code(), "REQ001");
    /// // Async and blocking callers share the handle's blocks.
    /// assert_eq!(requests.next()?.number(), 2);
    /// # Ok::<(), tuplekv_sequence::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`FastSequence::next`]; also [`tuplekv_engine::Error::TooManyRounds`] (as
    /// [`Error::Store`]) if one reservation attempt needed more rounds than
    /// [`tuplekv_engine::replay`] allows.
    #[expect(
        clippy::manual_async_fn,
        reason = "the signature promises a `Send` future, which callers spawn on runtimes"
    )]
    pub fn next_async(&self) -> impl Future<Output = Result<Issued<'_>, Error>> + Send + '_ {
        async move {
            let n = self.next_number_async().await?;
            Ok(Issued::new(n, &self.inner.core.def.format))
        }
    }

    /// The next number for async callers, without its code; see
    /// [`FastSequence::next_async`].
    ///
    /// ```
    /// use tuplekv_engine::Database;
    /// use tuplekv_sequence::{SequenceOptions, Sequences};
    ///
    /// let seqs = Sequences::new(Database::in_memory());
    /// seqs.create("REQ", SequenceOptions::default())?;
    /// let requests = seqs.fast("REQ")?;
    /// assert_eq!(pollster::block_on(requests.next_number_async())?, 1);
    /// # Ok::<(), tuplekv_sequence::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`FastSequence::next_async`].
    #[expect(
        clippy::manual_async_fn,
        reason = "the signature promises a `Send` future, which callers spawn on runtimes"
    )]
    pub fn next_number_async(&self) -> impl Future<Output = Result<u64, Error>> + Send + '_ {
        async move {
            loop {
                let took = self
                    .inner
                    .alloc
                    .next(|adapt| adapt.prefetched.take().ok_or(NoBlock));
                if let Ok(n) = took {
                    return Ok(n);
                }
                // The block is used up and none is prefetched: a failed draw uses no number.
                // Boxed: the reservation's state (a replay) is large, and keeping it out of
                // this future keeps the lock-free path's future small.
                Box::pin(self.reserve_async()).await?;
            }
        }
    }

    /// Makes sure a block is prefetched, or that the reservation that was to prefetch one has
    /// ended: waits for the reservation in flight, or makes one.
    async fn reserve_async(&self) -> Result<(), Error> {
        let inner = &*self.inner;
        let start = std::future::poll_fn(|cx| {
            inner.alloc.with_state(|a| {
                if a.prefetched.is_some() {
                    return Poll::Ready(None);
                }
                if a.in_flight {
                    if !a.waiters.iter().any(|w| w.will_wake(cx.waker())) {
                        a.waiters.push(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
                a.in_flight = true;
                // The clock is read here, outside the replayed operation.
                let now = Instant::now();
                let size = adapted(a.size, a.last.map(|last| now.duration_since(last)));
                Poll::Ready(Some((now, size, a.reserved)))
            })
        })
        .await;
        let Some((now, size, reserved)) = start else {
            return Ok(());
        };
        let mut flight = InFlight {
            alloc: &inner.alloc,
            armed: true,
        };
        let core = &inner.core;
        let mut result = Err(Error::Contention {
            prefix: core.def.prefix.clone(),
            attempts: COMMIT_ATTEMPTS_MAX,
        });
        for _ in 0..COMMIT_ATTEMPTS_MAX {
            // One attempt per run: a read and a commit, at most two rounds.
            match tuplekv_engine::replay::run(&core.store, |s| raise(core, s, size, reserved)).await
            {
                Ok(None) => {}
                Ok(Some(block)) => {
                    result = Ok(block);
                    break;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        flight.armed = false;
        let waiters = inner.alloc.with_state(|a| {
            if let Ok(block) = &result {
                if block.start >= a.reserved {
                    a.committed(block, size, now);
                    a.prefetched = Some(block.clone());
                } else {
                    // A blocking caller reserved a higher block meanwhile: handing this one
                    // out after it would break the order, so it is skipped (a gap).
                    a.reservations += 1;
                }
            }
            a.in_flight = false;
            std::mem::take(&mut a.waiters)
        });
        waiters.into_iter().for_each(Waker::wake);
        result.map(|_| ())
    }

    /// Commits `record` together with the uniqueness backstop of `number`: the key
    /// `[root, "used", prefix, number]` must be absent and is set to the code. That is what a
    /// unique index on `(prefix, number)` would write, written directly (the crate docs say
    /// why), so no two records committed this way can hold one number.
    ///
    /// # Errors
    /// [`Error::Duplicate`] if the number is already recorded (its counter went back),
    /// [`Error::Rejected`] if the record's own checks failed, or a store error; nothing is
    /// written in every case.
    pub fn record(&self, number: u64, record: Record) -> Result<Versionstamp, Error> {
        self.inner.core.commit_record(number, record)
    }

    /// The number of a code of this sequence.
    ///
    /// # Errors
    /// [`Error::InvalidCode`].
    pub fn parse(&self, code: &str) -> Result<u64, Error> {
        self.inner.core.parse(code)
    }

    /// The sequence's prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.core.def.prefix
    }

    /// How the sequence writes its codes.
    pub fn format(&self) -> &Format {
        &self.inner.core.def.format
    }

    /// The size the next block will have, before adapting to how fast this one went.
    pub fn block_size(&self) -> u64 {
        self.inner.alloc.with_state(|a| a.size)
    }

    /// How many blocks this handle reserved (one commit each).
    pub fn reservations(&self) -> u64 {
        self.inner.alloc.with_state(|a| a.reservations)
    }
}

/// The size of the block after one of `size` that lasted `lasted` (`None`: the first block).
///
/// Both bounds are strict: a block used up in exactly [`BLOCK_GROW_WITHIN`] does not grow the
/// next, and one that lasted exactly [`BLOCK_SHRINK_AFTER`] does not shrink it.
fn adapted(size: u64, lasted: Option<Duration>) -> u64 {
    match lasted {
        Some(d) if d < BLOCK_GROW_WITHIN => size.saturating_mul(2).min(BLOCK_SIZE_MAX),
        Some(d) if d > BLOCK_SHRINK_AFTER => (size / 2).max(BLOCK_SIZE_MIN),
        _ => size,
    }
}

/// Armed while an async caller reserves a block: if its future is dropped mid-way, clears the
/// reservation in flight and wakes its waiters, so one of them reserves instead.
struct InFlight<'a> {
    alloc: &'a BlockAllocator<Adapt>,
    armed: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let waiters = self.alloc.with_state(|a| {
            a.in_flight = false;
            std::mem::take(&mut a.waiters)
        });
        waiters.into_iter().for_each(Waker::wake);
    }
}

/// Reserves the next block, as many numbers as the adaptive size says. Only a reservation that
/// commits changes the handle's state, so failed attempts neither grow the block nor reset its
/// clock.
fn reserve<S: Store>(core: &Core<S>, adapt: &mut Adapt) -> Result<Range<u64>, Error> {
    let now = Instant::now();
    let size = adapted(adapt.size, adapt.last.map(|last| now.duration_since(last)));
    for _ in 0..COMMIT_ATTEMPTS_MAX {
        if let Some(block) = raise(core, &core.store, size, adapt.reserved)? {
            adapt.committed(&block, size, now);
            return Ok(block);
        }
        std::thread::yield_now();
    }
    Err(Error::Contention {
        prefix: core.def.prefix.clone(),
        attempts: COMMIT_ATTEMPTS_MAX,
    })
}

/// One attempt at raising the counter of `core` by `size` through `store` (the core's store,
/// or a replay of it): the block reserved, or `None` if the attempt lost (another handle moved
/// the counter first, or the commit's outcome is unknown). `reserved` is the end of the last
/// block the handle reserved. It reads no clock and has no effect but the commit, so an async
/// caller can run it in rounds.
fn raise<S: Store, T: Store>(
    core: &Core<S>,
    store: &T,
    size: u64,
    reserved: u64,
) -> Result<Option<Range<u64>>, Error> {
    let limit = core.def.limit();
    let (next, seen) = core.read_counter_in(store)?;
    if next < reserved {
        return Err(Error::CounterWentBack {
            prefix: core.def.prefix.clone(),
            counter: next,
            reserved,
        });
    }
    if next > limit {
        return Err(core.def.exhausted());
    }
    // `limit <= NUMBER_MAX < u64::MAX`, so neither side overflows.
    let end = next + size.min(limit - next + 1);
    let (check, set) = core.counter_cas(seen, end);
    let write = AtomicWrite {
        checks: vec![check],
        mutations: vec![set],
        ..AtomicWrite::default()
    };
    match store.commit(write) {
        Ok(res) if res.is_committed() => Ok(Some(next..end)),
        Ok(_) => Ok(None),
        // The reservation may or may not have committed: its block is skipped, never
        // used. The next attempt reads the counter afresh, and its check on the counter's
        // versionstamp fails if the lost write landed after all, so no block is given twice.
        Err(tuplekv_engine::Error::OutcomeUnknown { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_nanos(1);

    #[test]
    fn the_first_block_has_block_size_min() {
        assert_eq!(adapted(BLOCK_SIZE_MIN, None), BLOCK_SIZE_MIN);
    }

    #[test]
    fn a_block_used_up_within_block_grow_within_doubles_the_next() {
        assert_eq!(adapted(64, Some(Duration::ZERO)), 128);
        assert_eq!(adapted(64, Some(BLOCK_GROW_WITHIN - TICK)), 128);
        // At the bound and past it: unchanged.
        assert_eq!(adapted(64, Some(BLOCK_GROW_WITHIN)), 64);
        assert_eq!(adapted(64, Some(BLOCK_GROW_WITHIN + TICK)), 64);
    }

    #[test]
    fn a_block_that_lasted_past_block_shrink_after_halves_the_next() {
        assert_eq!(adapted(64, Some(BLOCK_SHRINK_AFTER)), 64);
        assert_eq!(adapted(64, Some(BLOCK_SHRINK_AFTER + TICK)), 32);
        assert_eq!(adapted(64, Some(Duration::MAX)), 32);
    }

    #[test]
    fn blocks_grow_up_to_block_size_max_and_no_further() {
        assert_eq!(adapted(BLOCK_SIZE_MAX / 2, Some(TICK)), BLOCK_SIZE_MAX);
        assert_eq!(adapted(BLOCK_SIZE_MAX, Some(TICK)), BLOCK_SIZE_MAX);
        let mut size = BLOCK_SIZE_MIN;
        for _ in 0..64 {
            size = adapted(size, Some(TICK));
            assert!(size <= BLOCK_SIZE_MAX);
        }
        assert_eq!(size, BLOCK_SIZE_MAX);
    }

    #[test]
    fn blocks_shrink_down_to_block_size_min_and_no_further() {
        let long = Some(BLOCK_SHRINK_AFTER + TICK);
        assert_eq!(adapted(BLOCK_SIZE_MIN * 2, long), BLOCK_SIZE_MIN);
        assert_eq!(adapted(BLOCK_SIZE_MIN, long), BLOCK_SIZE_MIN);
        let mut size = BLOCK_SIZE_MAX;
        for _ in 0..64 {
            size = adapted(size, long);
            assert!(size >= BLOCK_SIZE_MIN);
        }
        assert_eq!(size, BLOCK_SIZE_MIN);
    }
}
