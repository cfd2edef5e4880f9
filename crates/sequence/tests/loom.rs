//! Model checks of the lock-free block allocator under loom: every interleaving of the hot
//! path (`fetch_add` a ticket, read the published block under its sequence lock) with block
//! refills (reserve under the mutex, publish) hands out each number at most once and only from
//! a reserved block, and each thread's numbers increase; a failed reservation neither loses
//! the allocator nor stretches a block.
//!
//! Run with (about a minute in release on two cores)
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p tuplekv-sequence --test loom --release`
//!
//! Each model bounds loom's search with a preemption bound chosen so the whole file runs in
//! about a minute: 2 for the two-thread models (deep enough for a preempted reader to see a
//! refill land between any two of its loads), 1 for the three-thread model (its interesting
//! race, a later ticket refilling before an earlier one, needs one preemption; bound 2 takes
//! many minutes), 3 where that is still quick.
//! `LOOM_MAX_PREEMPTIONS=3` overrides every bound for a longer soak run.
#![cfg(loom)]
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc as StdArc;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use tuplekv_sequence::BlockAllocator;

/// The durable high-water mark, shared by every handle ("server") of the model.
struct Store {
    high: AtomicU64,
    /// Numbers other servers take between two reservations (0: blocks are contiguous).
    gap: u64,
    /// Block size handed out.
    size: u64,
}

impl Store {
    const FIRST: u64 = 1;

    fn reserve(&self) -> Range<u64> {
        let start = self.high.fetch_add(self.size + self.gap, Ordering::SeqCst) + self.gap;
        start..start + self.size
    }

    /// Whether `n` lies in a block this store reserved (not in a gap, not above the mark).
    fn reserved(&self, n: u64) -> bool {
        let high = self.high.load(Ordering::SeqCst);
        n >= Self::FIRST && n < high && (n - Self::FIRST) % (self.size + self.gap) >= self.gap
    }
}

/// Explores `f` with at most `preemptions` preemptions, unless `LOOM_MAX_PREEMPTIONS` is set.
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(preemptions);
    }
    builder.check(f);
}

/// Runs `threads` threads per handle over `handles` handles, each drawing `draws` numbers,
/// exploring interleavings with at most `preemptions` preemptions (unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise), and checks the numbers are distinct, reserved, and
/// increase per thread.
fn check(handles: usize, threads: usize, draws: usize, size: u64, gap: u64, preemptions: usize) {
    model(preemptions, move || {
        let store = Arc::new(Store {
            high: AtomicU64::new(Store::FIRST),
            gap,
            size,
        });
        let mut joins = Vec::new();
        for _ in 0..handles {
            let alloc = Arc::new(BlockAllocator::new(()));
            for _ in 0..threads {
                let (alloc, store) = (Arc::clone(&alloc), Arc::clone(&store));
                joins.push(thread::spawn(move || {
                    (0..draws)
                        .map(|_| alloc.next(|_| Ok::<_, ()>(store.reserve())).unwrap())
                        .collect::<Vec<u64>>()
                }));
            }
        }
        let mut seen = HashSet::new();
        for j in joins {
            let numbers = j.join().unwrap();
            assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
            for n in numbers {
                assert!(store.reserved(n), "number {n} was never reserved");
                assert!(seen.insert(n), "number {n} handed out twice");
            }
        }
    });
}

#[test]
fn two_threads_racing_through_one_number_blocks_never_share_a_number() {
    // Every draw after the first refills: the refill race on every call.
    check(1, 2, 2, 1, 0, 2);
}

#[test]
fn three_threads_racing_for_the_first_block_never_share_a_number() {
    check(1, 3, 1, 1, 0, 1);
}

#[test]
fn threads_sharing_a_two_number_block_never_share_a_number() {
    // Hot-path hits and refills interleave.
    check(1, 2, 3, 2, 0, 2);
}

#[test]
fn blocks_with_gaps_between_them_never_hand_out_a_number_twice() {
    // Other servers reserve between this handle's blocks, so its blocks are not contiguous.
    check(1, 2, 2, 1, 5, 2);
}

#[test]
fn two_handles_on_one_store_never_share_a_number() {
    check(2, 1, 2, 1, 0, 3);
}

#[test]
fn a_failed_reservation_is_returned_and_the_next_draw_recovers() {
    // Blocks of two: the failed draw's ticket and any ticket drawn while it failed must go
    // stale rather than stretch the next block or map past it. (Unbounded, this model takes
    // minutes; bound 3 takes under a second.)
    model(3, || {
        let fail_once = StdArc::new(std::sync::atomic::AtomicBool::new(true));
        let store = Arc::new(Store {
            high: AtomicU64::new(Store::FIRST),
            gap: 0,
            size: 2,
        });
        let alloc = Arc::new(BlockAllocator::new(()));
        let joins: Vec<_> = (0..2)
            .map(|_| {
                let (alloc, store) = (Arc::clone(&alloc), Arc::clone(&store));
                let fail_once = StdArc::clone(&fail_once);
                thread::spawn(move || {
                    let mut reserve = |_: &mut ()| {
                        if fail_once.swap(false, std::sync::atomic::Ordering::SeqCst) {
                            return Err("store unavailable");
                        }
                        Ok(store.reserve())
                    };
                    match alloc.next(&mut reserve) {
                        Ok(n) => n,
                        Err(_) => alloc.next(&mut reserve).unwrap(),
                    }
                })
            })
            .collect();
        let all: Vec<u64> = joins.into_iter().map(|j| j.join().unwrap()).collect();
        assert_ne!(all[0], all[1]);
        for n in all {
            assert!(store.reserved(n), "number {n} was never reserved");
        }
        // At most one more block than a run without the failure: if the failed ticket lies
        // in the block another thread reserved meanwhile, its number is a gap.
        assert!(store.high.load(Ordering::SeqCst) <= Store::FIRST + 2 * 2);
    });
}
