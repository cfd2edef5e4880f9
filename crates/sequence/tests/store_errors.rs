//! What a sequence does when its store fails under it.
//!
//! - Failed reservations must not stretch the next block. Each failed fast `next` used a
//!   ticket, and the refill used to ask for a block covering every ticket since the last one,
//!   so after many transient errors one block went past `BLOCK_SIZE_MAX` and a crash could
//!   waste more than a block. Now the block starts at the refilling ticket.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use support::Faulty;
use tuplekv_sequence::limits::{BLOCK_SIZE_MAX, BLOCK_SIZE_MIN};
use tuplekv_sequence::{Error, Mode, SequenceOptions, Sequences};

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
