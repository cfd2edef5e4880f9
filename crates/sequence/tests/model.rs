//! Property test against the trivial code generator of the motivating story: a `Mutex<u64>`
//! counter per prefix ("lock, read, add one"). Three threads, each with its own handles (its
//! "servers") on two fast and two gapless prefixes, run random interleavings of `next` calls,
//! gapless requests whose record is rejected by its own check, and handle restarts.
//!
//! - Gapless: each call runs under its prefix's model lock, so it must return exactly the
//!   model's next number (and a rejected request none, leaving the model as it was); at the
//!   end the committed numbers are exactly `1..=model`.
//! - Fast: the model holds the highest number handed out. A number is never handed out twice,
//!   increases per handle, and is above every number handed out before its handle was opened.
//! - Codes are the prefix and the number padded to three digits, and parse back.
//!
//! Cases: `TUPLEKV_PROPTEST_CASES`; failures persist in `proptest-regressions/model.txt`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::HashSet;
use std::sync::Mutex;

use proptest::prelude::*;
use tuplekv_engine::{Database, ReadView, key};
use tuplekv_sequence::{Error, FastSequence, GaplessSequence, Mode, SequenceOptions, Sequences};
use tuplekv_testkit::config::proptest_config;

const FAST: [&str; 2] = ["FA", "FB"];
const GAPLESS: [&str; 2] = ["GA", "GB"];
const THREADS: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Fast(usize),
    Gapless(usize),
    /// A gapless request whose record checks a key that exists: rejected, no number used.
    Rejected(usize),
    /// Drops this thread's handle on a fast prefix and opens a new one (a server restart).
    RestartFast(usize),
    /// The same for a gapless prefix.
    RestartGapless(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..FAST.len()).prop_map(Op::Fast),
        4 => (0..GAPLESS.len()).prop_map(Op::Gapless),
        1 => (0..GAPLESS.len()).prop_map(Op::Rejected),
        1 => (0..FAST.len()).prop_map(Op::RestartFast),
        1 => (0..GAPLESS.len()).prop_map(Op::RestartGapless),
    ]
}

/// The reference: per prefix, the counter of the lock-based generator.
struct Model {
    /// Gapless: the last number committed.
    gapless: [Mutex<u64>; 2],
    /// Fast: the highest number handed out, and every number handed out.
    fast: [Mutex<(u64, HashSet<u64>)>; 2],
}

/// A fast handle with what the model expects of it.
struct FastHandle {
    seq: FastSequence<Database>,
    /// Every number it hands out must be above this (the highest before it was opened).
    floor: u64,
    last: u64,
}

fn open_fast(seqs: &Sequences<Database>, model: &Model, p: usize) -> FastHandle {
    // Opened under the model's lock, so `floor` covers every number handed out before.
    let fast = model.fast[p].lock().unwrap();
    FastHandle {
        seq: seqs.fast(FAST[p]).unwrap(),
        floor: fast.0,
        last: 0,
    }
}

fn check_code(prefix: &str, number: u64, code: &str, parsed: u64) {
    assert_eq!(code, format!("{prefix}{number:03}"));
    assert_eq!(parsed, number);
}

/// One thread's operations, checked against the model as they go.
fn run_thread(seqs: &Sequences<Database>, model: &Model, ops: &[Op]) {
    let mut fast: Vec<FastHandle> = (0..FAST.len()).map(|p| open_fast(seqs, model, p)).collect();
    let mut gapless: Vec<GaplessSequence<Database>> =
        GAPLESS.iter().map(|p| seqs.gapless(p).unwrap()).collect();
    for op in ops {
        match *op {
            Op::Fast(p) => {
                let h = &fast[p];
                let issued = h.seq.next().unwrap();
                let n = issued.number();
                check_code(
                    FAST[p],
                    n,
                    &issued.code(),
                    h.seq.parse(&issued.code()).unwrap(),
                );
                assert!(
                    n > h.floor,
                    "{n} is not above {} from before its handle",
                    h.floor
                );
                assert!(n > h.last, "{n} after {} from the same handle", h.last);
                let mut m = model.fast[p].lock().unwrap();
                assert!(m.1.insert(n), "{} handed out {n} twice", FAST[p]);
                m.0 = m.0.max(n);
                fast[p].last = n;
            }
            Op::Gapless(p) => {
                let mut m = model.gapless[p].lock().unwrap();
                let h = &gapless[p];
                let issued = h
                    .next_with(|issued, record| {
                        record.set(&key!["records", issued.code()], issued.number());
                    })
                    .unwrap();
                let n = issued.number();
                check_code(
                    GAPLESS[p],
                    n,
                    &issued.code(),
                    h.parse(&issued.code()).unwrap(),
                );
                assert_eq!(n, *m + 1, "{} is not the model's next number", GAPLESS[p]);
                *m = n;
            }
            Op::Rejected(p) => {
                let m = model.gapless[p].lock().unwrap();
                let err = gapless[p]
                    .next_with(|issued, record| {
                        record
                            .check(&key!["taken"], None)
                            .set(&key!["records", issued.code()], 0u64);
                    })
                    .unwrap_err();
                assert!(matches!(err, Error::Rejected(_)), "{err}");
                drop(m);
            }
            Op::RestartFast(p) => fast[p] = open_fast(seqs, model, p),
            Op::RestartGapless(p) => gapless[p] = seqs.gapless(GAPLESS[p]).unwrap(),
        }
    }
}

/// Runs the threads' operations at once and checks the store against the model at the end.
fn check_against_model(ops: &[Vec<Op>]) {
    let db = Database::in_memory();
    db.set(&key!["taken"], b"x").unwrap();
    let seqs = Sequences::new(db.clone());
    for p in FAST {
        seqs.create(p, SequenceOptions::default()).unwrap();
    }
    for p in GAPLESS {
        let options = SequenceOptions {
            mode: Mode::Gapless,
            ..Default::default()
        };
        seqs.create(p, options).unwrap();
    }
    let model = Model {
        gapless: Default::default(),
        fast: Default::default(),
    };
    std::thread::scope(|s| {
        for thread_ops in ops {
            let (seqs, model) = (&seqs, &model);
            s.spawn(move || run_thread(seqs, model, thread_ops));
        }
    });
    let snapshot = db.snapshot();
    for (p, prefix) in GAPLESS.iter().enumerate() {
        let n = *model.gapless[p].lock().unwrap();
        // Exactly 1..=n committed, each with its record; nothing above.
        for number in 1..=n + 1 {
            let used = seqs.used_key(prefix, number).unwrap();
            let code = format!("{prefix}{number:03}");
            let record = snapshot.get(&key!["records", code.as_str()]).unwrap();
            let expected = number <= n;
            assert_eq!(
                snapshot.get_raw(&used).unwrap().is_some(),
                expected,
                "{code}"
            );
            assert_eq!(record.is_some(), expected, "record of {code}");
        }
    }
    let fast_ops = ops
        .iter()
        .flatten()
        .filter(|op| matches!(op, Op::Fast(_)))
        .count();
    let handed_out: usize = model.fast.iter().map(|m| m.lock().unwrap().1.len()).sum();
    assert_eq!(handed_out, fast_ops);
}

proptest! {
    #![proptest_config(proptest_config(256, "model.txt"))]

    #[test]
    fn sequences_agree_with_a_locked_counter_per_prefix(
        ops in prop::collection::vec(prop::collection::vec(op(), 1..60), THREADS)
    ) {
        check_against_model(&ops);
    }
}
