//! [`FastSequence`]: numbers from blocks reserved in the store, handed out lock-free.

use std::ops::Range;
use std::time::Instant;

use tuplekv_engine::{AtomicWrite, Store, Versionstamp};

use crate::block::BlockAllocator;
use crate::error::Error;
use crate::format::{Format, Issued};
use crate::limits::{
    BLOCK_GROW_WITHIN, BLOCK_SHRINK_AFTER, BLOCK_SIZE_MAX, BLOCK_SIZE_MIN, COMMIT_ATTEMPTS_MAX,
};
use crate::record::Record;
use crate::sequences::Core;

/// The adaptive block size, kept under the allocator's refill mutex.
#[derive(Debug)]
struct Adapt {
    size: u64,
    last: Option<Instant>,
    reservations: u64,
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
/// are never used: a gap of at most one block per handle.
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
            }),
        }
    }

    /// The next number and its code.
    ///
    /// # Errors
    /// [`Error::Exhausted`] past the maximum of a sequence that fails there;
    /// [`Error::Contention`] or a store error when reserving a block.
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
        self.alloc
            .next(|adapt, need| reserve(&self.core, adapt, need))
    }

    /// Commits `record` together with the uniqueness backstop of `number`: the key
    /// `[root, "used", prefix, number]` must be absent and is set to the code. This is the
    /// same unique-key mechanism as the index crate's unique indexes.
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

/// Reserves the next block: at least `need` numbers, as many as the adaptive size says.
fn reserve<S: Store>(core: &Core<S>, adapt: &mut Adapt, need: u64) -> Result<Range<u64>, Error> {
    let now = Instant::now();
    if let Some(last) = adapt.last {
        let lasted = now.duration_since(last);
        if lasted < BLOCK_GROW_WITHIN {
            adapt.size = (adapt.size * 2).min(BLOCK_SIZE_MAX);
        } else if lasted > BLOCK_SHRINK_AFTER {
            adapt.size = (adapt.size / 2).max(BLOCK_SIZE_MIN);
        }
    }
    adapt.last = Some(now);
    let want = adapt.size.max(need);
    let limit = core.def.limit();
    for _ in 0..COMMIT_ATTEMPTS_MAX {
        let (next, seen) = core.read_counter()?;
        if next > limit {
            return Err(core.def.exhausted());
        }
        // `limit <= NUMBER_MAX < u64::MAX`, so neither side overflows.
        let end = next + want.min(limit - next + 1);
        let (check, set) = core.counter_cas(seen, end);
        let write = AtomicWrite {
            checks: vec![check],
            mutations: vec![set],
            ..AtomicWrite::default()
        };
        if core.store.commit(write)?.is_committed() {
            adapt.reservations += 1;
            return Ok(next..end);
        }
        std::thread::yield_now();
    }
    Err(Error::Contention {
        prefix: core.def.prefix.clone(),
        attempts: COMMIT_ATTEMPTS_MAX,
    })
}
