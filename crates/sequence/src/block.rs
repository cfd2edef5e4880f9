//! [`BlockAllocator`]: hands out numbers from reserved blocks with one atomic `fetch_add` on
//! the hot path, and serialises only the refill.
//!
//! # How
//! Callers draw *tickets* from a dense per-handle counter (`fetch_add(1)`). Blocks cover
//! consecutive ticket ranges: block *i* maps tickets `[t_start, t_end)` to the numbers
//! `[base, base + t_end - t_start)` reserved for it. Ticket *t* is worth the number
//! `base + t - t_start` of the one block covering it, so
//! - two draws never get the same number: tickets are unique, ticket ranges are disjoint, and
//!   reserved number ranges are disjoint;
//! - numbers increase with tickets (blocks are reserved in increasing order), so one thread's
//!   numbers increase and a `next` that returns before another starts returns the smaller.
//!
//! The current block is published as three words under a sequence lock: a reader that sees
//! the lock's counter odd or changed does not guess, it takes the slow path. The slow path
//! takes the refill mutex; the thread that finds its ticket past the block reserves the next
//! block and publishes it *starting at its own ticket*. A ticket below the published block's
//! start is *stale*: either its block was replaced before its reader looked, or it was drawn
//! between the old block's end and the refilling ticket (by a draw whose reservation failed,
//! or one still waiting for the mutex). A stale ticket maps to no number of the new block
//! (its old block's number, if any, is a gap, never a duplicate) and its reader draws again.
//!
//! Starting the block at the refilling ticket keeps every block exactly as large as the
//! reservation asked for: however many draws failed or queued before the refill, none of them
//! stretches the block, so a handle never holds more than one reservation's worth of numbers
//! (for a fast sequence, [`BLOCK_SIZE_MAX`](crate::limits::BLOCK_SIZE_MAX)).
//!
//! Orderings: the writer stores the odd counter, then the three words with `Release`, then
//! the even counter with `Release`; the reader loads the counter with `Acquire`, the words with
//! `Acquire` (so the second counter load cannot move before them) and the counter again. A
//! reader that saw any new word therefore sees the odd or a later counter.
//! `tests/loom.rs` checks this under every interleaving loom explores.

use std::ops::Range;

use crate::sync::{AtomicU64, Mutex, Ordering};

/// A value alone on its cache line(s), so the ticket counter's line does not bounce the
/// read-mostly block words out of readers' caches.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

/// The published block.
#[derive(Debug, Default)]
struct Published {
    /// Even when stable, odd while a refill writes.
    seq: AtomicU64,
    t_start: AtomicU64,
    t_end: AtomicU64,
    base: AtomicU64,
}

/// The result of looking a ticket up without the lock.
enum Lookup {
    /// The ticket's number.
    Hit(u64),
    /// The ticket's block was replaced; draw again.
    Stale,
    /// Past the block, or a refill was in progress: take the slow path.
    Miss,
}

/// A lock-free hi/lo allocator: numbers from blocks that the caller reserves.
///
/// `P` is state kept for the reservation callback, guarded by the refill mutex (a fast
/// sequence keeps its adaptive block size there).
///
/// ```
/// use tuplekv_sequence::BlockAllocator;
///
/// let mut high = 100; // stands for the durable high-water mark
/// let alloc = BlockAllocator::new(());
/// let mut reserve = |_: &mut ()| {
///     let block = high..high + 4;
///     high = block.end;
///     Ok::<_, ()>(block)
/// };
/// let numbers: Vec<u64> = (0..6).map(|_| alloc.next(&mut reserve).unwrap()).collect();
/// assert_eq!(numbers, [100, 101, 102, 103, 104, 105]);
/// ```
#[derive(Debug)]
pub struct BlockAllocator<P> {
    tickets: Padded<AtomicU64>,
    block: Padded<Published>,
    refill: Mutex<P>,
}

impl<P> BlockAllocator<P> {
    /// An allocator with no block yet; the first `next` reserves one.
    pub fn new(state: P) -> Self {
        BlockAllocator {
            tickets: Padded(AtomicU64::new(0)),
            block: Padded(Published::default()),
            refill: Mutex::new(state),
        }
    }

    /// The next number.
    ///
    /// `reserve(state)` is called, under the refill mutex, when the current block is used up.
    /// It must return a non-empty range of numbers, all above every range it returned before,
    /// or an error, which `next` returns (the block stays used up, and the failed draw's ticket
    /// is never worth a number). The new block holds exactly the range returned.
    ///
    /// # Errors
    /// What `reserve` returns.
    ///
    /// # Panics
    /// If `reserve` returns an empty range (a bug in the caller: no draw could be served).
    #[inline]
    pub fn next<E>(
        &self,
        mut reserve: impl FnMut(&mut P) -> Result<Range<u64>, E>,
    ) -> Result<u64, E> {
        loop {
            let ticket = self.tickets.0.fetch_add(1, Ordering::Relaxed);
            match self.lookup(ticket) {
                Lookup::Hit(n) => return Ok(n),
                Lookup::Stale => continue,
                Lookup::Miss => {}
            }
            if let Some(n) = self.refill(ticket, &mut reserve)? {
                return Ok(n);
            }
        }
    }

    /// Runs `f` on the refill state (under the refill mutex).
    pub fn with_state<T>(&self, f: impl FnOnce(&mut P) -> T) -> T {
        let mut state = self
            .refill
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut state)
    }

    #[inline]
    fn lookup(&self, ticket: u64) -> Lookup {
        let b = &self.block.0;
        let s1 = b.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return Lookup::Miss;
        }
        let start = b.t_start.load(Ordering::Acquire);
        let end = b.t_end.load(Ordering::Acquire);
        let base = b.base.load(Ordering::Acquire);
        if b.seq.load(Ordering::Relaxed) != s1 {
            return Lookup::Miss;
        }
        classify(ticket, start, end, base)
    }

    /// The slow path: under the mutex, find the ticket's number, or reserve a block that starts
    /// at the ticket. `None` means the ticket went stale.
    #[cold]
    fn refill<E>(
        &self,
        ticket: u64,
        reserve: &mut impl FnMut(&mut P) -> Result<Range<u64>, E>,
    ) -> Result<Option<u64>, E> {
        let mut state = self
            .refill
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let b = &self.block.0;
        // Only refills store these, and they hold the mutex we hold.
        let start = b.t_start.load(Ordering::Relaxed);
        let end = b.t_end.load(Ordering::Relaxed);
        let base = b.base.load(Ordering::Relaxed);
        match classify(ticket, start, end, base) {
            Lookup::Hit(n) => return Ok(Some(n)),
            Lookup::Stale => return Ok(None),
            Lookup::Miss => {}
        }
        let numbers = reserve(&mut state)?;
        let len = numbers.end.saturating_sub(numbers.start);
        assert!(len > 0, "reserve returned the empty range {numbers:?}");
        // Tickets in `end..ticket` (draws whose reservation failed, or that wait for the mutex
        // behind us) fall below the new start: stale, so they draw again instead of
        // stretching this block.
        let seq = b.seq.load(Ordering::Relaxed);
        b.seq.store(seq + 1, Ordering::Relaxed);
        b.t_start.store(ticket, Ordering::Release);
        b.t_end.store(ticket + len, Ordering::Release);
        b.base.store(numbers.start, Ordering::Release);
        b.seq.store(seq + 2, Ordering::Release);
        Ok(Some(numbers.start))
    }
}

#[inline]
fn classify(ticket: u64, start: u64, end: u64, base: u64) -> Lookup {
    if ticket < start {
        Lookup::Stale
    } else if ticket < end {
        Lookup::Hit(base + (ticket - start))
    } else {
        Lookup::Miss
    }
}
