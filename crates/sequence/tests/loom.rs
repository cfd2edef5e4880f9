//! Model checks of the lock-free block allocator under loom: every interleaving of the hot
//! path (`fetch_add` a ticket, read the published block under its sequence lock) with block
//! refills (reserve under the mutex, publish) hands out each number at most once, and each
//! thread's numbers increase.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p tuplekv-sequence --test loom --release`
//! (`LOOM_MAX_PREEMPTIONS` bounds the search; the models below are small enough to explore
//! with the default bound of 3 used here).
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
    /// Block size handed out (at least what the allocator needs).
    size: u64,
}

impl Store {
    fn reserve(&self, need: u64) -> Range<u64> {
        let len = need.max(self.size);
        let start = self.high.fetch_add(len + self.gap, Ordering::SeqCst) + self.gap;
        start..start + len
    }
}

/// Runs `threads` threads per handle over `handles` handles, each drawing `draws` numbers, and
/// checks the numbers are distinct and increase per thread.
fn check(handles: usize, threads: usize, draws: usize, size: u64, gap: u64) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(move || {
        let store = Arc::new(Store {
            high: AtomicU64::new(1),
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
                        .map(|_| {
                            alloc
                                .next(|_, need| Ok::<_, ()>(store.reserve(need)))
                                .unwrap()
                        })
                        .collect::<Vec<u64>>()
                }));
            }
        }
        let mut seen = HashSet::new();
        for j in joins {
            let numbers = j.join().unwrap();
            assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
            for n in numbers {
                assert!(seen.insert(n), "number {n} handed out twice");
            }
        }
    });
}

#[test]
fn two_threads_racing_through_one_number_blocks_never_share_a_number() {
    // Every draw after the first refills: the refill race on every call.
    check(1, 2, 2, 1, 0);
}

#[test]
fn three_threads_racing_for_the_first_block_never_share_a_number() {
    check(1, 3, 1, 1, 0);
}

#[test]
fn threads_sharing_a_two_number_block_never_share_a_number() {
    // Hot-path hits and refills interleave.
    check(1, 2, 3, 2, 0);
}

#[test]
fn blocks_with_gaps_between_them_never_hand_out_a_number_twice() {
    // Other servers reserve between this handle's blocks, so its blocks are not contiguous.
    check(1, 2, 2, 1, 5);
}

#[test]
fn two_handles_on_one_store_never_share_a_number() {
    check(2, 1, 2, 1, 0);
}

#[test]
fn a_failed_reservation_is_returned_and_the_next_draw_recovers() {
    loom::model(|| {
        let fail_once = StdArc::new(std::sync::atomic::AtomicBool::new(true));
        let alloc = Arc::new(BlockAllocator::new(0u64));
        let joins: Vec<_> = (0..2)
            .map(|_| {
                let (alloc, fail_once) = (Arc::clone(&alloc), StdArc::clone(&fail_once));
                thread::spawn(move || {
                    let mut reserve = |high: &mut u64, need: u64| {
                        if fail_once.swap(false, std::sync::atomic::Ordering::SeqCst) {
                            return Err("store unavailable");
                        }
                        let start = *high;
                        *high += need;
                        Ok(start..*high)
                    };
                    match alloc.next(&mut reserve) {
                        Ok(n) => vec![n],
                        Err(_) => vec![alloc.next(&mut reserve).unwrap()],
                    }
                })
            })
            .collect();
        let all: Vec<u64> = joins.into_iter().flat_map(|j| j.join().unwrap()).collect();
        assert_ne!(all[0], all[1]);
    });
}
