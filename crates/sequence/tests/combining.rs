//! How a gapless handle combines concurrent requests into one commit, and what happens to a
//! batch when some of its requests cannot commit: the others still commit, without gaps.
//!
//! Each test makes the batches deterministic: the first request (which leads) holds its record
//! closure until the others are queued, so they all land in the next batch together.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use tuplekv_engine::limits::{CHECKS_MAX, VALUE_SIZE_MAX};
use tuplekv_engine::{Database, ReadView, Value, key};
use tuplekv_sequence::limits::BATCH_REQUESTS_MAX;
use tuplekv_sequence::{
    Error, GaplessSequence, GaplessStats, Issued, Mode, Numbering, Record, SequenceOptions,
    Sequences,
};

type Seq = Arc<GaplessSequence<Database>>;
type Build = Box<dyn FnMut(&Issued<'_>, &mut Record) + Send>;

fn gapless(db: &Database) -> Seq {
    let seqs = Sequences::new(db.clone());
    let options = SequenceOptions {
        mode: Mode::Gapless,
        ..Default::default()
    };
    seqs.create("TKT", options).unwrap();
    Arc::new(seqs.gapless("TKT").unwrap())
}

/// Runs a leader request that waits until `others.len()` requests are queued, and the
/// `others` concurrently; returns the leader's and the others' results (numbers or errors).
fn batch(seq: &Seq, others: Vec<Build>) -> (u64, Vec<Result<u64, Error>>) {
    let waiting = others.len();
    let held = Arc::new(AtomicBool::new(false));
    let leader = {
        let (seq, held) = (Arc::clone(seq), Arc::clone(&held));
        let watcher = Arc::clone(&seq);
        thread::spawn(move || {
            seq.next_with(move |_, _| {
                held.store(true, Ordering::SeqCst);
                while watcher.pending() < waiting {
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
    let joins: Vec<_> = others
        .into_iter()
        .map(|build| {
            let seq = Arc::clone(seq);
            thread::spawn(move || seq.next_with(build).map(|i| i.number()))
        })
        .collect();
    let first = leader.join().unwrap();
    (
        first,
        joins.into_iter().map(|j| j.join().unwrap()).collect(),
    )
}

/// Boxes a record closure (naming the closure's argument types once, here).
fn build(f: impl FnMut(&Issued<'_>, &mut Record) + Send + 'static) -> Build {
    Box::new(f)
}

fn plain(n: usize) -> Vec<Build> {
    (0..n).map(|_| build(|_, _| {})).collect()
}

fn sorted_numbers(results: &[Result<u64, Error>]) -> Vec<u64> {
    let mut ok: Vec<u64> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    ok.sort_unstable();
    ok
}

#[test]
fn queued_requests_share_one_commit() {
    let db = Database::in_memory();
    let seq = gapless(&db);
    let (first, rest) = batch(&seq, plain(5));
    assert_eq!(first, 1);
    assert_eq!(sorted_numbers(&rest), [2, 3, 4, 5, 6]);
    // The leader's commit, then one for the five that queued behind it.
    let stats = seq.stats();
    assert_eq!(
        stats,
        GaplessStats {
            codes: 6,
            commits: 2,
            conflicts: 0,
            counter_conflicts: 0,
            store_numbered: 0,
        }
    );
}

#[test]
fn a_batch_holds_at_most_batch_requests_max() {
    let db = Database::in_memory();
    let seq = gapless(&db);
    let (_, rest) = batch(&seq, plain(BATCH_REQUESTS_MAX + 6));
    assert_eq!(
        sorted_numbers(&rest),
        (2..=BATCH_REQUESTS_MAX as u64 + 7).collect::<Vec<_>>()
    );
    assert_eq!(
        seq.stats().commits,
        3,
        "leader, then {BATCH_REQUESTS_MAX}, then 6"
    );
}

#[test]
fn a_batch_stays_within_the_engines_check_limit() {
    let db = Database::in_memory();
    let seq = gapless(&db);
    // Each request has two checks of its own plus its uniqueness check: 3 checks, and the
    // counter's check is one more, so one commit holds (CHECKS_MAX - 1) / 3 requests.
    let per_commit = (CHECKS_MAX - 1) / 3;
    let n = per_commit + 7;
    let builds = (0..n)
        .map(|i| {
            build(move |_, r| {
                r.check(&key!["a", i], None).check(&key!["b", i], None);
            })
        })
        .collect();
    let (_, rest) = batch(&seq, builds);
    assert!(rest.iter().all(Result::is_ok));
    assert_eq!(seq.stats().commits, 3, "leader, then {per_commit}, then 7");
}

#[test]
fn a_rejected_request_leaves_no_gap_and_the_others_commit() {
    let db = Database::in_memory();
    db.set(&key!["taken"], b"x").unwrap();
    let seq = gapless(&db);
    let mut builds = plain(2);
    builds.insert(
        1,
        build(|issued, r| {
            let _ = issued;
            r.check(&key!["taken"], None).set(&key!["taken"], b"mine");
        }),
    );
    let (first, rest) = batch(&seq, builds);
    assert_eq!(first, 1);
    let rejected: Vec<_> = rest.iter().filter(|r| r.is_err()).collect();
    assert_eq!(rejected.len(), 1);
    let Err(Error::Rejected(conflict)) = rejected[0] else {
        panic!("{rejected:?}")
    };
    // The failed check is reported at its index in the caller's own record.
    assert_eq!(conflict.failed_checks.len(), 1);
    assert_eq!(conflict.failed_checks[0].index, 0);
    assert_eq!(sorted_numbers(&rest), [2, 3]);
    assert_eq!(
        db.get(&key!["taken"]).unwrap().unwrap().value,
        Value::from(b"x")
    );
    // The next number follows on without a gap.
    assert_eq!(seq.next().unwrap().number(), 4);
}

#[test]
fn a_record_the_engine_refuses_fails_alone() {
    let db = Database::in_memory();
    let seq = gapless(&db);
    let mut builds = plain(3);
    builds.insert(
        1,
        build(|_, r| {
            r.set(&key!["big"], vec![0u8; VALUE_SIZE_MAX + 1]);
        }),
    );
    let (_, rest) = batch(&seq, builds);
    let errors: Vec<_> = rest.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        matches!(
            errors[..],
            [Error::Store(tuplekv_engine::Error::ValueTooLarge { .. })]
        ),
        "{errors:?}"
    );
    assert_eq!(sorted_numbers(&rest), [2, 3, 4]);
    assert!(db.get(&key!["big"]).unwrap().is_none());
}

#[test]
fn a_panicking_record_fails_alone() {
    let db = Database::in_memory();
    let seq = gapless(&db);
    let mut builds = plain(2);
    builds.insert(0, build(|_, _| panic!("bad record")));
    let (_, rest) = batch(&seq, builds);
    assert!(
        matches!(rest[0], Err(Error::RecordPanicked { .. })),
        "{rest:?}"
    );
    assert_eq!(sorted_numbers(&rest), [2, 3]);
    assert_eq!(seq.next().unwrap().number(), 4);
}

#[test]
fn requests_checking_what_an_earlier_one_writes_wait_for_the_next_commit() {
    let db = Database::in_memory();
    let seq = gapless(&db);
    // Three requests each insert the same unique email if absent: run one after another,
    // exactly one succeeds. A batch must not let all three pass their check at once.
    let builds = (0..3)
        .map(|_| {
            build(|issued, r| {
                r.check(&key!["email", "ada@example.com"], None)
                    .set(&key!["email", "ada@example.com"], issued.code().as_str());
            })
        })
        .collect();
    let (_, rest) = batch(&seq, builds);
    assert_eq!(sorted_numbers(&rest), [2]);
    assert_eq!(
        rest.iter()
            .filter(|r| matches!(r, Err(Error::Rejected(_))))
            .count(),
        2
    );
    let owner = db.get(&key!["email", "ada@example.com"]).unwrap().unwrap();
    assert_eq!(owner.value, Value::from("TKT002"));
}

#[test]
fn a_store_numbered_handle_whose_counter_moved_takes_the_next_number_without_a_conflict() {
    let db = Database::in_memory();
    let a = gapless(&db);
    let b = Sequences::new(db.clone()).gapless("TKT").unwrap();
    assert_eq!(a.next().unwrap().number(), 1);
    assert_eq!(b.next().unwrap().number(), 2);
    assert_eq!(a.next().unwrap().number(), 3);
    assert_eq!(a.stats().conflicts, 0);
    assert_eq!(a.stats().store_numbered, 2);
}

#[test]
fn a_checked_handle_whose_counter_moved_renumbers_and_retries() {
    let db = Database::in_memory();
    drop(gapless(&db)); // creates the sequence
    let a = Sequences::new(db.clone())
        .gapless("TKT")
        .unwrap()
        .with_numbering(Numbering::Checked);
    let b = Sequences::new(db.clone())
        .gapless("TKT")
        .unwrap()
        .with_numbering(Numbering::Checked);
    assert_eq!(a.next().unwrap().number(), 1);
    assert_eq!(b.next().unwrap().number(), 2);
    // `a` cached the counter of its own commit; its check fails once, then it reads again.
    assert_eq!(a.next().unwrap().number(), 3);
    assert_eq!(a.stats().conflicts, 1);
    assert_eq!(a.stats().counter_conflicts, 1);
    assert!(
        db.snapshot()
            .get_raw(&Sequences::new(db.clone()).used_key("TKT", 3).unwrap())
            .unwrap()
            .is_some()
    );
}
