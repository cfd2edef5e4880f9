//! The limits of reserving numbers, at and past each: `BLOCK_SIZE_MIN` (the first block),
//! `BLOCK_SIZE_MAX` (a busy handle's blocks stop growing there), and `COMMIT_ATTEMPTS_MAX`
//! (how many times a fast reservation or a gapless batch retries after rivals moved the
//! counter). `BLOCK_GROW_WITHIN` and `BLOCK_SHRINK_AFTER` are durations, tested at and past
//! them on the sizing rule itself (`fast.rs`), since waiting ten seconds has no place here;
//! the shrink floor `BLOCK_SIZE_MIN` is tested there too.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use support::Faulty;
use tuplekv_engine::{Database, ReadView};
use tuplekv_sequence::limits::{BLOCK_SIZE_MAX, BLOCK_SIZE_MIN, COMMIT_ATTEMPTS_MAX};
use tuplekv_sequence::{Error, Mode, Numbering, SequenceOptions, Sequences};

fn create<S: tuplekv_engine::Store + Clone>(store: &S, mode: Mode) -> Sequences<S> {
    let seqs = Sequences::new(store.clone());
    let options = SequenceOptions {
        mode,
        ..Default::default()
    };
    seqs.create("A", options).unwrap();
    seqs
}

fn counter(db: &Database, seqs: &Sequences<Database>) -> u64 {
    let key = seqs.counter_key("A").unwrap();
    db.snapshot()
        .get_raw(&key)
        .unwrap()
        .unwrap()
        .value
        .as_u64()
        .unwrap()
}

#[test]
fn the_first_block_holds_block_size_min_numbers() {
    let db = Database::in_memory();
    let seqs = create(&db, Mode::Fast);
    let h = seqs.fast("A").unwrap();
    for n in 1..=BLOCK_SIZE_MIN {
        assert_eq!(h.next().unwrap().number(), n);
    }
    // At the limit: one reservation served BLOCK_SIZE_MIN numbers; past it, a second.
    assert_eq!(
        (h.reservations(), counter(&db, &seqs)),
        (1, 1 + BLOCK_SIZE_MIN)
    );
    assert_eq!(h.next().unwrap().number(), BLOCK_SIZE_MIN + 1);
    assert_eq!(h.reservations(), 2);
}

#[test]
fn a_busy_handle_grows_its_blocks_to_block_size_max_and_no_further() {
    let db = Database::in_memory();
    let seqs = create(&db, Mode::Fast);
    let h = seqs.fast("A").unwrap();
    // Drawing as fast as possible uses each block up well within BLOCK_GROW_WITHIN, so each
    // next block doubles (a slow moment on a loaded machine only delays that).
    let mut last = 0;
    let mut draw = || {
        let n = h.next().unwrap().number();
        assert_eq!(n, last + 1, "one handle, one thread: no gaps");
        last = n;
        n
    };
    while h.block_size() < BLOCK_SIZE_MAX {
        assert!(draw() < 1 << 30, "never grew to BLOCK_SIZE_MAX");
    }
    // Past the limit: three more blocks' worth, each exactly BLOCK_SIZE_MAX.
    let (before, reserved) = (counter(&db, &seqs), h.reservations());
    for _ in 0..3 * BLOCK_SIZE_MAX {
        draw();
    }
    assert_eq!(h.block_size(), BLOCK_SIZE_MAX);
    let blocks = h.reservations() - reserved;
    assert_eq!(blocks, 3);
    assert_eq!(counter(&db, &seqs), before + blocks * BLOCK_SIZE_MAX);
}

/// Opens a fresh handle after an earlier one made the counter exist, lets rivals move the
/// counter before each of the next `rivals` commits, and draws one number.
fn draw_against_rivals(mode: Mode, rivals: u64) -> (Result<u64, Error>, Faulty) {
    let store = Faulty::new();
    let seqs = create(&store, mode);
    let counter = seqs.counter_key("A").unwrap();
    let first = match mode {
        Mode::Fast => seqs.fast("A").unwrap().next().unwrap().number(),
        Mode::Gapless => seqs.gapless("A").unwrap().next().unwrap().number(),
    };
    assert_eq!(first, 1);
    store.rival_commits(rivals, &counter);
    let result = match mode {
        Mode::Fast => seqs.fast("A").unwrap().next().map(|i| i.number()),
        // Only a handle that numbers its commits itself meets rivals on the counter.
        Mode::Gapless => seqs
            .gapless("A")
            .unwrap()
            .with_numbering(Numbering::Checked)
            .next()
            .map(|i| i.number()),
    };
    (result, store)
}

#[test]
fn commit_attempts_max_bounds_a_fast_reservation() {
    let attempts = u64::from(COMMIT_ATTEMPTS_MAX);
    // At the limit: the last attempt wins.
    let (result, _) = draw_against_rivals(Mode::Fast, attempts - 1);
    assert_eq!(result, Ok(1 + BLOCK_SIZE_MIN));
    // Past it: gives up, having reserved nothing.
    let (result, store) = draw_against_rivals(Mode::Fast, attempts);
    let err = result.unwrap_err();
    assert_eq!(
        err,
        Error::Contention {
            prefix: "A".into(),
            attempts: COMMIT_ATTEMPTS_MAX
        }
    );
    assert!(err.to_string().contains("after 10000 attempts"), "{err}");
    let counter = Sequences::new(store.clone()).counter_key("A").unwrap();
    assert_eq!(store.u64_at(&counter), Some(1 + BLOCK_SIZE_MIN));
}

#[test]
fn commit_attempts_max_bounds_a_gapless_batch() {
    let attempts = u64::from(COMMIT_ATTEMPTS_MAX);
    let (result, _) = draw_against_rivals(Mode::Gapless, attempts - 1);
    assert_eq!(result, Ok(2));
    let (result, store) = draw_against_rivals(Mode::Gapless, attempts);
    assert_eq!(
        result,
        Err(Error::Contention {
            prefix: "A".into(),
            attempts: COMMIT_ATTEMPTS_MAX
        })
    );
    let counter = Sequences::new(store.clone()).counter_key("A").unwrap();
    assert_eq!(store.u64_at(&counter), Some(2), "number 2 is still free");
}
