//! "Restart": every handle is dropped and new ones are opened on the same store (the in-memory
//! engine stands for a reopened durable one; `tests/crash.rs` kills a process on a real one).
//! Numbers after are strictly above every number handed out before, in both modes; a fast
//! handle dropped mid-block leaves at most one block unused.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::thread;

use tuplekv_engine::Database;
use tuplekv_sequence::limits::BLOCK_SIZE_MAX;
use tuplekv_sequence::{Mode, SequenceOptions, Sequences};

const ROUNDS: usize = 4;
const THREADS: usize = 3;

/// Opens fresh handles each round, draws from several threads, drops everything; returns each
/// round's numbers.
fn rounds(db: &Database, mode: Mode, per_thread: usize) -> Vec<Vec<u64>> {
    let options = SequenceOptions {
        mode,
        ..Default::default()
    };
    Sequences::new(db.clone()).create("INFO", options).unwrap();
    (0..ROUNDS)
        .map(|_| {
            let seqs = Sequences::new(db.clone());
            let joins: Vec<_> = (0..THREADS)
                .map(|_| {
                    let seqs = seqs.clone();
                    thread::spawn(move || match mode {
                        Mode::Fast => {
                            let h = seqs.fast("INFO").unwrap();
                            (0..per_thread)
                                .map(|_| h.next().unwrap().number())
                                .collect()
                        }
                        Mode::Gapless => {
                            let h = Arc::new(seqs.gapless("INFO").unwrap());
                            (0..per_thread)
                                .map(|_| h.next().unwrap().number())
                                .collect::<Vec<u64>>()
                        }
                    })
                })
                .collect();
            joins.into_iter().flat_map(|j| j.join().unwrap()).collect()
        })
        .collect()
}

fn assert_each_round_above_the_last(rounds: &[Vec<u64>]) {
    for pair in rounds.windows(2) {
        let before = pair[0].iter().max().unwrap();
        let after = pair[1].iter().min().unwrap();
        assert!(
            after > before,
            "after restart {after} is not above {before}"
        );
    }
}

#[test]
fn fast_numbers_after_a_restart_are_above_all_before() {
    let db = Database::in_memory();
    let rounds = rounds(&db, Mode::Fast, 500);
    assert_each_round_above_the_last(&rounds);
    // Each handle wastes at most the rest of its one block.
    let last = rounds.last().unwrap().iter().max().unwrap();
    let issued = (ROUNDS * THREADS * 500) as u64;
    assert!(*last <= issued + (ROUNDS * THREADS) as u64 * BLOCK_SIZE_MAX);
}

#[test]
fn gapless_numbers_after_a_restart_continue_without_a_gap() {
    let db = Database::in_memory();
    let rounds = rounds(&db, Mode::Gapless, 40);
    assert_each_round_above_the_last(&rounds);
    let mut all: Vec<u64> = rounds.concat();
    all.sort_unstable();
    assert_eq!(
        all,
        (1..=(ROUNDS * THREADS * 40) as u64).collect::<Vec<_>>()
    );
}

#[test]
fn a_dropped_fast_handle_skips_its_unused_block() {
    let db = Database::in_memory();
    let seqs = Sequences::new(db.clone());
    seqs.create("A", SequenceOptions::default()).unwrap();
    let first = seqs.fast("A").unwrap();
    assert_eq!(first.next().unwrap().number(), 1);
    let block = first.block_size();
    drop(first);
    let second = seqs.fast("A").unwrap();
    assert_eq!(second.next().unwrap().number(), 1 + block);
}
