//! What a sequence does when its store fails under it.
//!
//! - Failed reservations must not stretch the next block. Each failed fast `next` used a
//!   ticket, and the refill used to ask for a block covering every ticket since the last one,
//!   so after many transient errors one block went past `BLOCK_SIZE_MAX` and a crash could
//!   waste more than a block. Now the block starts at the refilling ticket.
//! - A store that panics in a gapless commit used to leave the handle "leading" forever, so
//!   every later request waited for ever. Now the batch fails with `Error::CommitPanicked` and
//!   the lead passes on.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use support::Faulty;
use tuplekv_engine::ReadView;
use tuplekv_sequence::limits::{BLOCK_SIZE_MAX, BLOCK_SIZE_MIN};
use tuplekv_sequence::{Error, GaplessSequence, Mode, SequenceOptions, Sequences};

fn create(store: &Faulty, prefix: &str, mode: Mode) -> Sequences<Faulty> {
    let seqs = Sequences::new(store.clone());
    let options = SequenceOptions {
        mode,
        ..Default::default()
    };
    seqs.create(prefix, options).unwrap();
    seqs
}

/// Fails `failures` fast `next`s, then checks the block reserved next is exactly
/// `BLOCK_SIZE_MIN` numbers, handed out without a gap.
fn check_block_after_failures(failures: u64) {
    let store = Faulty::new();
    let seqs = create(&store, "INFO", Mode::Fast);
    let counter = seqs.counter_key("INFO").unwrap();
    let h = seqs.fast("INFO").unwrap();
    store.fail_commits(failures);
    for _ in 0..failures {
        let err = h.next().unwrap_err();
        assert!(matches!(err, Error::Store(_)), "{err}");
    }
    assert_eq!(store.u64_at(&counter), None, "a failed next wrote nothing");
    let numbers: Vec<u64> = (0..BLOCK_SIZE_MIN)
        .map(|_| h.next().unwrap().number())
        .collect();
    assert_eq!(numbers, (1..=BLOCK_SIZE_MIN).collect::<Vec<_>>());
    assert_eq!(
        store.u64_at(&counter),
        Some(1 + BLOCK_SIZE_MIN),
        "after {failures} failures the block is still BLOCK_SIZE_MIN"
    );
    assert_eq!(h.reservations(), 1);
}

#[test]
fn failed_reservations_do_not_make_the_next_block_larger() {
    check_block_after_failures(1);
    check_block_after_failures(BLOCK_SIZE_MIN * 4);
}

#[test]
fn a_block_stays_within_block_size_max_however_many_reservations_failed() {
    // Past the limit: more failed draws than a block may hold.
    check_block_after_failures(BLOCK_SIZE_MAX + 1);
}

type Seq = Arc<GaplessSequence<Faulty>>;

/// A leader request that holds its record closure until `others` requests are queued behind
/// it, and the `others`; returns the leader's and the others' outcomes (`Err(())`: panicked).
fn leader_and_queue(
    seq: &Seq,
    others: usize,
) -> (thread::Result<u64>, Vec<thread::Result<Result<u64, Error>>>) {
    let held = Arc::new(AtomicBool::new(false));
    let leader = {
        let (seq, held) = (Arc::clone(seq), Arc::clone(&held));
        let watcher = Arc::clone(&seq);
        thread::spawn(move || {
            seq.next_with(move |_, _| {
                held.store(true, Ordering::SeqCst);
                while watcher.pending() < others {
                    thread::yield_now();
                }
            })
            .unwrap()
            .number()
        })
    };
    while !held.load(Ordering::SeqCst) {
        thread::yield_now();
    }
    let joins: Vec<_> = (0..others)
        .map(|_| {
            let seq = Arc::clone(seq);
            thread::spawn(move || seq.next().map(|i| i.number()))
        })
        .collect();
    (leader.join(), joins.into_iter().map(|j| j.join()).collect())
}

fn used_numbers(store: &Faulty, seqs: &Sequences<Faulty>) -> Vec<u64> {
    (1..=20)
        .filter(|n| {
            let key = seqs.used_key("TKT", *n).unwrap();
            store.db.snapshot().get_raw(&key).unwrap().is_some()
        })
        .collect()
}

#[test]
fn a_panicking_commit_fails_its_batch_and_hands_the_lead_on() {
    let store = Faulty::new();
    let seqs = create(&store, "TKT", Mode::Gapless);
    let seq: Seq = Arc::new(seqs.gapless("TKT").unwrap());
    // The leader's commit goes through; the batch of the five queued behind it panics.
    store.panic_on_commit(2);
    let (leader, others) = leader_and_queue(&seq, 5);
    assert_eq!(leader.unwrap(), 1);
    let panicked = others.iter().filter(|r| r.is_err()).count();
    assert_eq!(
        panicked, 1,
        "the thread leading the batch gets the store's panic"
    );
    for r in others.into_iter().flatten() {
        assert_eq!(
            r,
            Err(Error::CommitPanicked {
                prefix: "TKT".into()
            })
        );
    }
    // The handle still works, and the panicked commit did not apply.
    assert_eq!(seq.next().unwrap().number(), 2);
    assert_eq!(seq.next().unwrap().number(), 3);
    assert_eq!(used_numbers(&store, &seqs), [1, 2, 3]);
}

#[test]
fn a_leader_whose_commit_panics_hands_the_lead_to_the_queue() {
    let store = Faulty::new();
    let seqs = create(&store, "TKT", Mode::Gapless);
    let seq: Seq = Arc::new(seqs.gapless("TKT").unwrap());
    // The leader's own commit panics; the four queued behind it were not in its batch.
    store.panic_on_commit(1);
    let (leader, others) = leader_and_queue(&seq, 4);
    assert!(leader.is_err(), "the leader gets the store's panic");
    let mut numbers: Vec<u64> = others.into_iter().map(|r| r.unwrap().unwrap()).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [1, 2, 3, 4]);
    assert_eq!(used_numbers(&store, &seqs), [1, 2, 3, 4]);
}

#[test]
fn a_fast_reservation_whose_answer_was_lost_after_it_committed_is_skipped_never_reused() {
    let store = Faulty::new();
    let seqs = create(&store, "INFO", Mode::Fast);
    let counter = seqs.counter_key("INFO").unwrap();
    let h = seqs.fast("INFO").unwrap();
    store.lose_answers(1, true);
    // The lost reservation took 1..=BLOCK_SIZE_MIN; the handle reads the counter again and
    // reserves the next block instead of using a block it cannot know is its own.
    let first = h.next().unwrap().number();
    assert_eq!(first, BLOCK_SIZE_MIN + 1);
    assert_eq!(store.u64_at(&counter), Some(2 * BLOCK_SIZE_MIN + 1));
    assert_eq!(h.reservations(), 1);
}

#[test]
fn a_fast_reservation_whose_answer_was_lost_before_it_committed_reserves_afresh() {
    let store = Faulty::new();
    let seqs = create(&store, "INFO", Mode::Fast);
    let h = seqs.fast("INFO").unwrap();
    store.lose_answers(1, false);
    // Nothing landed, so the fresh reservation starts at 1; had the lost write landed later,
    // the fresh one's check on the counter's versionstamp would have failed instead.
    assert_eq!(h.next().unwrap().number(), 1);
    let other = seqs.fast("INFO").unwrap();
    assert_eq!(other.next().unwrap().number(), BLOCK_SIZE_MIN + 1);
}

#[test]
fn a_gapless_commit_whose_answer_was_lost_fails_its_requests_and_the_numbers_stay_contiguous() {
    let store = Faulty::new();
    let seqs = create(&store, "TKT", Mode::Gapless);
    let h = seqs.gapless("TKT").unwrap();
    assert_eq!(h.next().unwrap().number(), 1);
    store.lose_answers(1, true);
    let err = h.next().unwrap_err();
    // The store numbered the batch, and its answer (with the numbers) was lost.
    assert!(
        matches!(
            err,
            Error::OutcomeUnknown {
                number: None,
                code: None,
                ..
            }
        ),
        "{err}"
    );
    // Number 2 landed with its record; the handle forgot its cached counter and reads it
    // again, so the next number is 3, and nothing was committed twice.
    assert_eq!(h.next().unwrap().number(), 3);
    assert_eq!(used_numbers(&store, &seqs), vec![1, 2, 3]);
    store.lose_answers(1, false);
    assert!(h.next().is_err());
    assert_eq!(h.next().unwrap().number(), 4);
    assert_eq!(used_numbers(&store, &seqs), vec![1, 2, 3, 4]);
}
