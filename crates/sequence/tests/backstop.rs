//! The uniqueness backstop: a stale high-water mark written back over the counter (as a Redis
//! replica promoted after a failover hands out an old counter) makes the next code a repeat.
//! The backstop key `[root, "used", prefix, number]`, checked absent in the commit that records
//! the code, turns that into `Error::Duplicate`, and nothing is written.
//!
//! A fast handle that kept running through the restore used to repeat numbers silently when
//! its caller did not record them: now it remembers the end of its last block and fails with
//! `Error::CounterWentBack` when it reads a counter below it.
#![allow(clippy::unwrap_used, reason = "tests")]

use tuplekv_engine::{Database, ListOptions, ReadView, Selector, Value, key};
use tuplekv_sequence::{Error, Mode, Record, SequenceOptions, Sequences};

fn log_count(db: &Database) -> usize {
    db.list(&Selector::prefix(&key!["logs"]), ListOptions::default())
        .unwrap()
        .count()
}

fn log(code: &str) -> Record {
    let mut record = Record::new();
    record.set(&key!["logs", code], b"event");
    record
}

#[test]
fn fast_mode_reports_a_repeated_number_after_a_stale_counter_is_restored() {
    let db = Database::in_memory();
    let seqs = Sequences::new(db.clone());
    seqs.create("INFO", SequenceOptions::default()).unwrap();
    let counter = seqs.counter_key("INFO").unwrap();

    let server = seqs.fast("INFO").unwrap();
    for _ in 0..3 {
        let issued = server.next().unwrap();
        server.record(issued.number(), log(&issued.code())).unwrap();
    }
    // Failover: the counter goes back to what an old replica held before the first code
    // (nothing).
    let restored = db.atomic().delete_raw(&counter).commit().unwrap();
    assert!(restored.is_committed());

    let after = Sequences::new(db.clone()).fast("INFO").unwrap();
    let repeated = after.next().unwrap();
    assert_eq!(repeated.code(), "INFO001");
    let err = after
        .record(repeated.number(), log("INFO001-again"))
        .unwrap_err();
    assert_eq!(
        err,
        Error::Duplicate {
            prefix: "INFO".into(),
            number: 1,
            code: "INFO001".into()
        }
    );
    assert!(err.to_string().contains("duplicate code INFO001"));
    assert_eq!(log_count(&db), 3, "the duplicate's record was not written");
}

#[test]
fn gapless_mode_refuses_to_commit_a_repeated_number() {
    let db = Database::in_memory();
    let seqs = Sequences::new(db.clone());
    let options = SequenceOptions {
        mode: Mode::Gapless,
        ..Default::default()
    };
    seqs.create("ERR", options).unwrap();
    let counter = seqs.counter_key("ERR").unwrap();
    let server = seqs.gapless("ERR").unwrap();
    for _ in 0..5 {
        server
            .next_with(|issued, r| {
                r.set(&key!["logs", issued.code()], b"event");
            })
            .unwrap();
    }
    // A stale high-water mark (3: numbers 3, 4, 5 will repeat) is written back.
    db.set_raw(&counter, Value::U64(3)).unwrap();
    for handle in [&server, &Sequences::new(db.clone()).gapless("ERR").unwrap()] {
        let err = handle
            .next_with(|issued, r| {
                r.set(&key!["logs", issued.code(), "again"], b"event");
            })
            .unwrap_err();
        assert!(matches!(err, Error::Duplicate { number: 3, .. }), "{err}");
    }
    assert_eq!(log_count(&db), 5);
    // Repaired (the counter set past the recorded numbers), codes flow again.
    db.set_raw(&counter, Value::U64(6)).unwrap();
    assert_eq!(server.next().unwrap().code(), "ERR006");
}

#[test]
fn a_fast_handle_refuses_to_hand_out_numbers_again_after_its_counter_went_back() {
    let db = Database::in_memory();
    let seqs = Sequences::new(db.clone());
    seqs.create("INFO", SequenceOptions::default()).unwrap();
    let counter = seqs.counter_key("INFO").unwrap();
    let server = seqs.fast("INFO").unwrap();
    assert_eq!(server.next().unwrap().number(), 1);
    let block = server.block_size();
    // A stale copy comes back: the counter as it was before this handle's block.
    db.set_raw(&counter, Value::U64(1)).unwrap();
    // The rest of the block is this handle's own and still fine to hand out...
    for n in 2..=block {
        assert_eq!(server.next().unwrap().number(), n);
    }
    // ...but the next block would repeat 1, 2, ...: refused, and the counter left alone.
    let err = server.next().unwrap_err();
    assert_eq!(
        err,
        Error::CounterWentBack {
            prefix: "INFO".into(),
            counter: 1,
            reserved: 1 + block,
        }
    );
    assert!(err.to_string().contains("went back to 1"), "{err}");
    assert_eq!(
        db.snapshot().get_raw(&counter).unwrap().unwrap().value,
        Value::U64(1)
    );
    assert!(server.next().is_err(), "still refused until repaired");
    // Repaired (at the handle's own block end), numbers flow again, above the old ones.
    db.set_raw(&counter, Value::U64(1 + block)).unwrap();
    assert_eq!(server.next().unwrap().number(), 1 + block);
}
