//! [`FastSequence`]: numbers from blocks reserved in the store, handed out lock-free.

use std::ops::Range;
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
}

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
#[derive(Debug)]
pub struct FastSequence<S> {
    core: Core<S>,
    alloc: BlockAllocator<Adapt>,
}

impl<S: Store> FastSequence<S> {
    pub(crate) fn new(core: Core<S>) -> Self {
        FastSequence {
            core,
            alloc: BlockAllocator::new(Adapt {
                size: BLOCK_SIZE_MIN,
                last: None,
                reservations: 0,
                reserved: 0,
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
        Ok(Issued::new(self.next_number()?, &self.core.def.format))
    }

    /// The next number, without its code; see [`FastSequence::next`].
    ///
    /// # Errors
    /// As [`FastSequence::next`].
    #[inline]
    pub fn next_number(&self) -> Result<u64, Error> {
        self.alloc.next(|adapt| reserve(&self.core, adapt))
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
        self.core.commit_record(number, record)
    }

    /// The number of a code of this sequence.
    ///
    /// # Errors
    /// [`Error::InvalidCode`].
    pub fn parse(&self, code: &str) -> Result<u64, Error> {
        self.core.parse(code)
    }

    /// The sequence's prefix.
    pub fn prefix(&self) -> &str {
        &self.core.def.prefix
    }

    /// How the sequence writes its codes.
    pub fn format(&self) -> &Format {
        &self.core.def.format
    }

    /// The size the next block will have, before adapting to how fast this one went.
    pub fn block_size(&self) -> u64 {
        self.alloc.with_state(|a| a.size)
    }

    /// How many blocks this handle reserved (one commit each).
    pub fn reservations(&self) -> u64 {
        self.alloc.with_state(|a| a.reservations)
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

/// Reserves the next block, as many numbers as the adaptive size says. Only a reservation that
/// commits changes the handle's state, so failed attempts neither grow the block nor reset its
/// clock.
fn reserve<S: Store>(core: &Core<S>, adapt: &mut Adapt) -> Result<Range<u64>, Error> {
    let now = Instant::now();
    let size = adapted(adapt.size, adapt.last.map(|last| now.duration_since(last)));
    let limit = core.def.limit();
    for _ in 0..COMMIT_ATTEMPTS_MAX {
        let (next, seen) = core.read_counter()?;
        if next < adapt.reserved {
            return Err(Error::CounterWentBack {
                prefix: core.def.prefix.clone(),
                counter: next,
                reserved: adapt.reserved,
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
        let committed = match core.store.commit(write) {
            Ok(res) => res.is_committed(),
            // The reservation may or may not have committed: its block is skipped, never
            // used. The next attempt reads the counter afresh, and its check on the counter's
            // versionstamp fails if the lost write landed after all, so no block is given twice.
            Err(tuplekv_engine::Error::OutcomeUnknown { .. }) => false,
            Err(e) => return Err(e.into()),
        };
        if committed {
            adapt.size = size;
            adapt.last = Some(now);
            adapt.reservations += 1;
            adapt.reserved = end;
            return Ok(next..end);
        }
        std::thread::yield_now();
    }
    Err(Error::Contention {
        prefix: core.def.prefix.clone(),
        attempts: COMMIT_ATTEMPTS_MAX,
    })
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
