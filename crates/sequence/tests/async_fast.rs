//! `FastSequence::next_async`: over the in-memory database, a durable one and a store whose
//! async reads and commits wait, async tasks and blocking threads on one handle (and its
//! clones) get distinct numbers, above every block reserved before, increasing per caller; a
//! reservation whose answer was lost is skipped; a counter put back is caught; a future
//! dropped while it reserves leaves the handle working.
#![allow(clippy::unwrap_used, reason = "tests")]

mod async_support;

use std::collections::HashSet;
use std::future::Future;
use std::task::{Context, Waker};

use async_support::{Slow, durable, runtime, sequences};
use tuplekv_engine::{Database, ReadView, Store, Value};
use tuplekv_sequence::limits::BLOCK_SIZE_MIN;
use tuplekv_sequence::{Error, Mode, Sequences};

const TASKS: usize = 8;
const THREADS: usize = 2;
const EACH: usize = 300;

/// The counter of `prefix`: the first number no handle reserved.
fn counter<S: Store + Clone>(seqs: &Sequences<S>, prefix: &str) -> u64 {
    let key = seqs.counter_key(prefix).unwrap();
    seqs.store()
        .snapshot()
        .get_raw(&key)
        .unwrap()
        .map_or(1, |e| e.value.as_u64().unwrap())
}

/// Async tasks on a two-worker runtime and blocking threads, on clones of one handle, after
/// another handle reserved a block: every number is distinct, at or above the counter as the
/// earlier handle left it, and each caller's numbers increase.
fn async_and_blocking_callers_get_distinct_increasing_numbers<S: Store + Clone + 'static>(
    store: S,
) {
    let seqs = sequences(store, "INFO", Mode::Fast);
    let earlier = seqs.fast("INFO").unwrap();
    earlier.next().unwrap();
    let floor = counter(&seqs, "INFO");
    assert!(floor > 1, "the earlier handle reserved a block");
    let handle = seqs.fast("INFO").unwrap();
    let rt = runtime();
    let runs: Vec<Vec<u64>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let h = handle.clone();
                s.spawn(move || (0..EACH).map(|_| h.next_number().unwrap()).collect())
            })
            .collect();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let h = handle.clone();
                rt.spawn(async move {
                    let mut got = Vec::with_capacity(EACH);
                    for _ in 0..EACH {
                        got.push(h.next_number_async().await.unwrap());
                    }
                    got
                })
            })
            .collect();
        let mut runs: Vec<Vec<u64>> = rt.block_on(async {
            let mut runs = Vec::new();
            for t in tasks {
                runs.push(t.await.unwrap());
            }
            runs
        });
        runs.extend(threads.into_iter().map(|t| t.join().unwrap()));
        runs
    });
    let mut seen = HashSet::new();
    for run in &runs {
        assert!(
            run.windows(2).all(|w| w[0] < w[1]),
            "a caller's numbers increase"
        );
        for &n in run {
            assert!(
                n >= floor,
                "{n} is in a block reserved before (below {floor})"
            );
            assert!(seen.insert(n), "{n} was handed out twice");
        }
    }
    assert_eq!(seen.len(), (TASKS + THREADS) * EACH);
    // A new handle starts above everything the shared handle reserved.
    let after = counter(&seqs, "INFO");
    let fresh = seqs.fast("INFO").unwrap().next_number().unwrap();
    assert!(fresh >= after && !seen.contains(&fresh));
}

#[test]
fn fast_async_and_blocking_callers_share_one_handle_over_the_in_memory_store() {
    async_and_blocking_callers_get_distinct_increasing_numbers(Database::in_memory());
}

#[test]
fn fast_async_and_blocking_callers_share_one_handle_over_a_durable_store() {
    let (db, _dir) = durable();
    async_and_blocking_callers_get_distinct_increasing_numbers(db);
}

#[test]
fn fast_async_and_blocking_callers_share_one_handle_over_a_store_that_waits() {
    async_and_blocking_callers_get_distinct_increasing_numbers(Slow::new(Database::in_memory()));
}

#[test]
fn a_fast_clone_is_the_same_handle_and_shares_its_block() {
    let seqs = sequences(Database::in_memory(), "INFO", Mode::Fast);
    let h = seqs.fast("INFO").unwrap();
    let c = h.clone();
    assert_eq!(pollster::block_on(h.next_number_async()).unwrap(), 1);
    assert_eq!(c.next_number().unwrap(), 2);
    assert_eq!(
        pollster::block_on(c.next_async()).unwrap().code(),
        "INFO000003"
    );
    assert_eq!(h.reservations(), 1);
    assert_eq!(c.reservations(), 1);
}

#[test]
fn a_fast_async_reservation_whose_answer_was_lost_is_skipped() {
    let store = Slow::new(Database::in_memory());
    let seqs = sequences(store.clone(), "INFO", Mode::Fast);
    let h = seqs.fast("INFO").unwrap();
    store.lose_answers(1);
    // The first block landed but its answer was lost: it is never used, and the next
    // attempt's check on the counter's versionstamp sees the counter it raised.
    let n = pollster::block_on(h.next_number_async()).unwrap();
    assert_eq!(n, 1 + BLOCK_SIZE_MIN);
    assert_eq!(h.reservations(), 1);
}

#[test]
fn a_fast_async_reservation_finds_the_counter_put_back() {
    let store = Slow::new(Database::in_memory());
    let seqs = sequences(store.clone(), "INFO", Mode::Fast);
    let h = seqs.fast("INFO").unwrap();
    for _ in 0..BLOCK_SIZE_MIN {
        pollster::block_on(h.next_number_async()).unwrap();
    }
    // A stale copy restored under the handle.
    let key = seqs.counter_key("INFO").unwrap();
    store.db.set_raw(&key, Value::U64(1)).unwrap();
    let err = pollster::block_on(h.next_number_async()).unwrap_err();
    assert!(
        matches!(err, Error::CounterWentBack { counter: 1, reserved, .. } if reserved == 1 + BLOCK_SIZE_MIN),
        "{err}"
    );
}

#[test]
fn a_fast_next_async_future_dropped_while_it_reserves_leaves_the_handle_working() {
    let store = Slow::new(Database::in_memory());
    let seqs = sequences(store, "INFO", Mode::Fast);
    let h = seqs.fast("INFO").unwrap();
    {
        let mut first = Box::pin(h.next_number_async());
        let mut cx = Context::from_waker(Waker::noop());
        // The store's read waits: the reservation is in flight.
        assert!(first.as_mut().poll(&mut cx).is_pending());
        // A second caller waits for that reservation.
        let mut second = Box::pin(h.next_number_async());
        assert!(second.as_mut().poll(&mut cx).is_pending());
        drop(first);
        // The waiter was woken and now reserves itself.
        let n = pollster::block_on(second).unwrap();
        assert_eq!(n, 1);
    }
    let mut seen: HashSet<u64> = HashSet::from([1]);
    for _ in 0..3 * BLOCK_SIZE_MIN {
        let n = pollster::block_on(h.next_number_async()).unwrap();
        assert!(seen.insert(n));
        assert!(seen.insert(h.next_number().unwrap()));
    }
}
