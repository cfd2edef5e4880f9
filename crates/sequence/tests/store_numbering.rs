//! Gapless sequences whose numbers the store assigns inside the commit (the engine's
//! numbering: placeholders filled under the commit lock), through `next` and `next_coded`,
//! and the fallbacks to the checked path (read the counter, check its versionstamp): records
//! that do not hold their code verbatim, stores that cannot number commits, a width change.
//!
//! Every test checks what the store holds afterwards: each number's record under its real
//! code, its uniqueness key, the counter, and nothing for the requests that failed.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use tuplekv_engine::codec::encode_key;
use tuplekv_engine::{
    AtomicWrite, CommitResult, Database, KeyBytes, ListOptions, Options, ReadView, Selector, Store,
    Value, Versionstamp, key,
};
use tuplekv_sequence::{
    AtMax, Error, GaplessSequence, GaplessStats, Mode, Numbering, Record, SequenceOptions,
    Sequences,
};

const PREFIX: &str = "INV";

type Seq<S> = Arc<GaplessSequence<S>>;
type Coded = Box<dyn FnMut(&str, &mut Record) + Send>;

fn options() -> SequenceOptions {
    SequenceOptions {
        mode: Mode::Gapless,
        ..Default::default()
    }
}

fn create<S: Store + Clone>(store: &S, options: SequenceOptions) -> Sequences<S> {
    let seqs = Sequences::new(store.clone());
    seqs.create(PREFIX, options).unwrap();
    seqs
}

/// A new handle (one application server) on the sequence.
fn handle<S: Store + Clone>(store: &S) -> Seq<S> {
    Arc::new(Sequences::new(store.clone()).gapless(PREFIX).unwrap())
}

/// The code of `n` at width 3.
fn code(n: u64) -> String {
    format!("{PREFIX}{n:03}")
}

fn json(code: &str) -> Vec<u8> {
    format!(r#"{{"code":"{code}","total":"100 EUR"}}"#).into_bytes()
}

/// The invoice of `code`: its key checked absent, then set to a JSON value holding the code.
fn invoice(code: &str, record: &mut Record) {
    record
        .check(&key!["inv", code], None)
        .set(&key!["inv", code], json(code));
}

fn coded(f: impl FnMut(&str, &mut Record) + Send + 'static) -> Coded {
    Box::new(f)
}

fn invoices(n: usize) -> Vec<Coded> {
    (0..n).map(|_| coded(invoice)).collect()
}

/// The bytes at `key`, if any.
fn bytes_at<S: Store>(store: &S, key: &tuplekv_engine::Key) -> Option<Vec<u8>> {
    store
        .snapshot()
        .get(key)
        .unwrap()
        .map(|e| e.value.as_bytes().unwrap().to_vec())
}

fn counter<S: Store + Clone>(seqs: &Sequences<S>) -> Option<u64> {
    let key = seqs.counter_key(PREFIX).unwrap();
    seqs.store()
        .snapshot()
        .get_raw(&key)
        .unwrap()
        .map(|e| e.value.as_u64().unwrap())
}

fn used<S: Store + Clone>(seqs: &Sequences<S>, n: u64) -> Option<Vec<u8>> {
    let key = seqs.used_key(PREFIX, n).unwrap();
    seqs.store()
        .snapshot()
        .get_raw(&key)
        .unwrap()
        .map(|e| e.value.as_bytes().unwrap().to_vec())
}

/// How many keys there are under `["inv"]`.
fn invoice_count<S: Store>(store: &S) -> usize {
    store
        .list(&Selector::prefix(&key!["inv"]), ListOptions::default())
        .unwrap()
        .count()
}

/// The store holds exactly the invoices of `numbers` (each under its real code, with the code
/// in its value) and their uniqueness keys, and no other invoice.
fn assert_invoices<S: Store + Clone>(seqs: &Sequences<S>, numbers: impl IntoIterator<Item = u64>) {
    let mut count = 0;
    for n in numbers {
        let c = seqs.gapless(PREFIX).unwrap().format().format(n);
        assert_eq!(
            bytes_at(seqs.store(), &key!["inv", c.as_str()]),
            Some(json(&c)),
            "the invoice of {c}"
        );
        assert_eq!(
            used(seqs, n),
            Some(c.clone().into_bytes()),
            "used key of {c}"
        );
        count += 1;
    }
    assert_eq!(invoice_count(seqs.store()), count, "no other invoice");
}

fn sorted_ok(results: &[Result<u64, Error>]) -> Vec<u64> {
    let mut ok: Vec<u64> = results.iter().filter_map(|r| r.clone().ok()).collect();
    ok.sort_unstable();
    ok
}

/// Starts a `next_coded` request that writes an invoice and, the first time its closure runs,
/// holds until `waiting` requests are queued behind it; returns once it is leading.
fn held_leader<S: Store + 'static>(
    seq: &Seq<S>,
    waiting: usize,
) -> thread::JoinHandle<Result<u64, Error>> {
    let started = Arc::new(AtomicBool::new(false));
    let join = {
        let (seq, started) = (Arc::clone(seq), Arc::clone(&started));
        let watcher = Arc::clone(&seq);
        thread::spawn(move || {
            let mut held = false;
            seq.next_coded(move |code, r| {
                if !held {
                    held = true;
                    started.store(true, Ordering::SeqCst);
                    while watcher.pending() < waiting {
                        thread::yield_now();
                    }
                }
                invoice(code, r);
            })
            .map(|i| i.number())
        })
    };
    while !started.load(Ordering::SeqCst) {
        thread::yield_now();
    }
    join
}

/// A held leader (writing an invoice), then `others` queued behind it, which its successor
/// runs as one batch. Returns the leader's and the others' results, in the others' order.
fn batch<S: Store + 'static>(
    seq: &Seq<S>,
    others: Vec<Coded>,
) -> (Result<u64, Error>, Vec<Result<u64, Error>>) {
    let leader = held_leader(seq, others.len());
    let joins: Vec<_> = others
        .into_iter()
        .map(|build| {
            let seq = Arc::clone(seq);
            thread::spawn(move || seq.next_coded(build).map(|i| i.number()))
        })
        .collect();
    let first = leader.join().unwrap();
    (
        first,
        joins.into_iter().map(|j| j.join().unwrap()).collect(),
    )
}

/// `threads` threads per handle, all started together, each issuing `per_thread` invoices;
/// every issued number with the code the handle returned.
fn issue_invoices<S: Store + 'static>(
    handles: &[Seq<S>],
    threads: usize,
    per_thread: usize,
) -> Vec<(u64, String)> {
    let barrier = Arc::new(Barrier::new(handles.len() * threads));
    let joins: Vec<_> = handles
        .iter()
        .flat_map(|h| std::iter::repeat_n(h, threads))
        .map(|h| {
            let (h, barrier) = (Arc::clone(h), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                (0..per_thread)
                    .map(|_| {
                        let issued = h.next_coded(invoice).unwrap();
                        (issued.number(), issued.code())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    joins.into_iter().flat_map(|j| j.join().unwrap()).collect()
}

/// The numbers are exactly `1..=n` and each code is its number's.
fn assert_exactly_one_to_n(issued: &[(u64, String)], n: u64) {
    let mut numbers: Vec<u64> = issued.iter().map(|(n, _)| *n).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=n).collect::<Vec<_>>());
    for (n, c) in issued {
        assert_eq!(*c, code(*n));
    }
}

#[test]
fn a_coded_record_commits_with_its_real_code_in_keys_values_and_checks() {
    let db = Database::in_memory();
    let seqs = create(&db, options());
    let h = handle(&db);
    for n in 1..=3 {
        let issued = h
            .next_coded(|code, r| {
                // The code in a check, in two keys (last part and middle part) and a value.
                r.check(&key!["inv", code], None)
                    .set(&key!["inv", code], json(code))
                    .set(&key!["by_customer", "ada", code, "lines"], code);
            })
            .unwrap();
        assert_eq!(issued.number(), n);
        assert_eq!(issued.code(), code(n));
        assert_eq!(
            bytes_at(&db, &key!["by_customer", "ada", code(n).as_str(), "lines"]),
            Some(code(n).into_bytes())
        );
        assert_eq!(
            h.stats(),
            GaplessStats {
                codes: n,
                commits: n,
                conflicts: 0,
                counter_conflicts: 0,
                store_numbered: n,
            }
        );
    }
    assert_invoices(&seqs, 1..=3);
    // No placeholder leaked into the store.
    for placeholder in ["INV000", "INV999"] {
        assert_eq!(bytes_at(&db, &key!["inv", placeholder]), None);
    }
    assert_eq!(counter(&seqs), Some(4));
}

#[test]
fn many_threads_on_one_handle_get_one_to_n_with_their_records_in_combined_commits() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 40;
    let db = Database::in_memory();
    let seqs = create(&db, options());
    let h = handle(&db);
    // The first request holds until every thread's first request queued behind it, so at
    // least one commit carries THREADS numbers.
    let leader = held_leader(&h, THREADS);
    let mut issued = issue_invoices(std::slice::from_ref(&h), THREADS, PER_THREAD);
    let first = leader.join().unwrap().unwrap();
    issued.push((first, code(first)));
    let n = (THREADS * PER_THREAD + 1) as u64;
    assert_exactly_one_to_n(&issued, n);
    assert_invoices(&seqs, 1..=n);
    assert_eq!(counter(&seqs), Some(n + 1));
    let stats = h.stats();
    assert_eq!(stats.codes, n);
    assert_eq!(stats.counter_conflicts, 0);
    assert_eq!(stats.conflicts, 0);
    assert_eq!(
        stats.store_numbered, stats.commits,
        "every commit store-numbered"
    );
    assert!(
        stats.commits <= n - (THREADS as u64 - 1),
        "requests were combined: {stats:?}"
    );
}

#[test]
fn several_handles_standing_for_servers_get_one_to_n_without_counter_conflicts() {
    const HANDLES: usize = 4;
    const THREADS: usize = 3;
    const PER_THREAD: usize = 30;
    let db = Database::in_memory();
    let seqs = create(&db, options());
    let handles: Vec<_> = (0..HANDLES).map(|_| handle(&db)).collect();
    let issued = issue_invoices(&handles, THREADS, PER_THREAD);
    let n = (HANDLES * THREADS * PER_THREAD) as u64;
    assert_exactly_one_to_n(&issued, n);
    assert_invoices(&seqs, 1..=n);
    assert_eq!(counter(&seqs), Some(n + 1));
    let mut codes = 0;
    for h in &handles {
        let stats = h.stats();
        assert_eq!(stats.counter_conflicts, 0, "{stats:?}");
        assert_eq!(stats.conflicts, 0, "{stats:?}");
        assert_eq!(stats.store_numbered, stats.commits, "{stats:?}");
        codes += stats.codes;
    }
    assert_eq!(codes, n);
}

/// The number of a code, parsed back (what a record that is not a template does).
fn number_of(code: &str) -> u64 {
    code[PREFIX.len()..].parse().unwrap()
}

fn hash_of(code: &str) -> u64 {
    let mut h = DefaultHasher::new();
    code.hash(&mut h);
    h.finish()
}

#[test]
fn records_that_do_not_hold_their_code_verbatim_fall_back_to_the_checked_path() {
    let db = Database::in_memory();
    let seqs = create(&db, options());
    let h = handle(&db);
    // Verbatim: store-numbered.
    assert_eq!(h.next_coded(invoice).unwrap().number(), 1);
    assert_eq!(h.stats().store_numbered, 1);
    // The number parsed back and stored as a u64.
    let issued = h
        .next_coded(|code, r| {
            r.set(&key!["inv", code], number_of(code).to_be_bytes().to_vec());
        })
        .unwrap();
    assert_eq!(issued.number(), 2);
    assert_eq!(
        bytes_at(&db, &key!["inv", "INV002"]),
        Some(2u64.to_be_bytes().to_vec())
    );
    assert_eq!((h.stats().commits, h.stats().store_numbered), (2, 1));
    // A hash of the code.
    let issued = h
        .next_coded(|code, r| {
            r.set(&key!["hash", code], hash_of(code).to_be_bytes().to_vec());
        })
        .unwrap();
    assert_eq!(issued.number(), 3);
    assert_eq!(
        bytes_at(&db, &key!["hash", "INV003"]),
        Some(hash_of("INV003").to_be_bytes().to_vec())
    );
    assert_eq!((h.stats().commits, h.stats().store_numbered), (3, 1));
    // A branch on the code (an extra key for codes ending in 9): another shape per code.
    let issued = h
        .next_coded(|code, r| {
            r.set(&key!["branch", code], code);
            if code.ends_with('9') {
                r.set(&key!["nines"], code);
            }
        })
        .unwrap();
    assert_eq!(issued.number(), 4);
    assert_eq!(
        bytes_at(&db, &key!["branch", "INV004"]),
        Some(b"INV004".to_vec())
    );
    assert_eq!(bytes_at(&db, &key!["nines"]), None);
    assert_eq!((h.stats().commits, h.stats().store_numbered), (4, 1));
    // Verbatim again: store-numbered again.
    assert_eq!(h.next_coded(invoice).unwrap().number(), 5);
    assert_eq!((h.stats().commits, h.stats().store_numbered), (5, 2));
    assert_eq!(h.stats().counter_conflicts, 0);
    for n in 1..=5 {
        assert_eq!(used(&seqs, n), Some(code(n).into_bytes()));
    }
    assert_eq!(used(&seqs, 6), None);
    assert_eq!(counter(&seqs), Some(6));
}

#[test]
fn a_batch_mixing_verbatim_and_parsed_records_numbers_both_without_gaps() {
    let db = Database::in_memory();
    let seqs = create(&db, options());
    let h = handle(&db);
    let others: Vec<Coded> = (0..6)
        .map(|i| {
            if i % 2 == 0 {
                coded(invoice)
            } else {
                coded(|code, r| {
                    r.set(&key!["num", code], number_of(code).to_be_bytes().to_vec());
                })
            }
        })
        .collect();
    let (first, rest) = batch(&h, others);
    assert_eq!(first.unwrap(), 1);
    assert_eq!(sorted_ok(&rest), (2..=7).collect::<Vec<_>>());
    for (i, r) in rest.iter().enumerate() {
        let n = *r.as_ref().unwrap();
        let c = code(n);
        if i % 2 == 0 {
            assert_eq!(bytes_at(&db, &key!["inv", c.as_str()]), Some(json(&c)));
        } else {
            assert_eq!(
                bytes_at(&db, &key!["num", c.as_str()]),
                Some(n.to_be_bytes().to_vec())
            );
        }
        assert_eq!(used(&seqs, n), Some(c.into_bytes()));
    }
    assert_eq!(
        invoice_count(&db),
        4,
        "the leader's and three verbatim ones"
    );
    assert_eq!(counter(&seqs), Some(8));
    assert_eq!(h.stats().codes, 7);
    assert_eq!(h.stats().counter_conflicts, 0);
    assert!(h.stats().store_numbered >= 2, "{:?}", h.stats());
}

/// The engine behind a store that cannot number commits (as a plain KV Connect server):
/// every commit with a numbering is refused with `Unsupported`; everything else goes through.
#[derive(Debug, Clone)]
struct NoNumbering {
    db: Database,
    refused: Arc<AtomicU64>,
}

impl Store for NoNumbering {
    type Snapshot = <Database as Store>::Snapshot;
    type Watch = <Database as Store>::Watch;

    fn watch_raw(&self, keys: Vec<KeyBytes>) -> Result<Self::Watch, tuplekv_engine::Error> {
        self.db.watch_raw(keys)
    }

    fn snapshot(&self) -> Self::Snapshot {
        self.db.snapshot()
    }

    fn snapshot_versionstamp(snapshot: &Self::Snapshot) -> Versionstamp {
        <Database as Store>::snapshot_versionstamp(snapshot)
    }

    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, tuplekv_engine::Error> {
        if !write.numbering.is_empty() {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(tuplekv_engine::Error::Unsupported {
                operation: "a numbered commit",
                needs: "store-side numbering",
            });
        }
        self.db.commit(write)
    }
}

#[test]
fn a_store_that_cannot_number_commits_still_gets_one_to_n_through_the_checked_path() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 20;
    let store = NoNumbering {
        db: Database::in_memory(),
        refused: Arc::default(),
    };
    let seqs = create(&store, options());
    let handles = [handle(&store), handle(&store)];
    let issued = issue_invoices(&handles, THREADS, PER_THREAD);
    let n = (2 * THREADS * PER_THREAD) as u64;
    assert_exactly_one_to_n(&issued, n);
    assert_invoices(&seqs, 1..=n);
    // `next` without a record, on both handles.
    assert_eq!(handles[0].next().unwrap().number(), n + 1);
    assert_eq!(handles[1].next().unwrap().number(), n + 2);
    assert_eq!(used(&seqs, n + 2), Some(code(n + 2).into_bytes()));
    assert_eq!(counter(&seqs), Some(n + 3));
    for h in &handles {
        assert_eq!(h.stats().store_numbered, 0, "{:?}", h.stats());
    }
    assert_eq!(handles.iter().map(|h| h.stats().codes).sum::<u64>(), n + 2);
    // Each handle tried once, then numbered its commits itself.
    assert_eq!(store.refused.load(Ordering::SeqCst), 2);
}

#[test]
fn a_batch_across_the_width_change_writes_each_code_at_its_own_width() {
    let db = Database::in_memory();
    let seqs = create(&db, options()); // width 3, AtMax::Widen
    let counter_key = seqs.counter_key(PREFIX).unwrap();
    db.set_raw(&counter_key, Value::U64(995)).unwrap();
    let h = handle(&db);
    let (first, rest) = batch(&h, invoices(9));
    let mut numbers = sorted_ok(&rest);
    numbers.insert(0, first.unwrap());
    assert_eq!(numbers, (995..=1004).collect::<Vec<_>>());
    for n in 995..=1004 {
        let c = code(n);
        assert_eq!(bytes_at(&db, &key!["inv", c.as_str()]), Some(json(&c)));
        assert_eq!(used(&seqs, n), Some(c.into_bytes()));
    }
    assert_eq!(
        bytes_at(&db, &key!["inv", "INV999"]),
        Some(json("INV999")),
        "the last code at width 3"
    );
    assert_eq!(
        bytes_at(&db, &key!["inv", "INV1000"]),
        Some(json("INV1000")),
        "the first wider code"
    );
    assert_eq!(invoice_count(&db), 10);
    assert_eq!(counter(&seqs), Some(1005));
    assert_eq!(h.stats().counter_conflicts, 0);
}

#[test]
fn a_stale_width_guess_is_corrected_when_the_counter_jumped_past_the_width() {
    let db = Database::in_memory();
    let seqs = create(&db, options());
    let h = handle(&db);
    assert_eq!(h.next_coded(invoice).unwrap().number(), 1);
    // The handle believes the next number is 2 (three digits); an operator moved it to 1000.
    let counter_key = seqs.counter_key(PREFIX).unwrap();
    db.set_raw(&counter_key, Value::U64(1000)).unwrap();
    let issued = h.next_coded(invoice).unwrap();
    assert_eq!(issued.code(), "INV1000");
    assert_eq!(
        bytes_at(&db, &key!["inv", "INV1000"]),
        Some(json("INV1000"))
    );
    assert_eq!(used(&seqs, 1000), Some(b"INV1000".to_vec()));
    assert_eq!(invoice_count(&db), 2);
    assert_eq!(counter(&seqs), Some(1001));
    assert_eq!(h.stats().counter_conflicts, 0);
}

#[test]
fn at_max_error_commits_up_to_max_and_the_rest_are_exhausted_with_nothing_written() {
    let db = Database::in_memory();
    let seqs = create(
        &db,
        SequenceOptions {
            at_max: AtMax::Error,
            max: Some(5),
            ..options()
        },
    );
    let h = handle(&db);
    // Eight concurrent requests: the leader, and seven in one batch behind it.
    let (first, rest) = batch(&h, invoices(7));
    let mut results = rest;
    results.push(first);
    assert_eq!(sorted_ok(&results), [1, 2, 3, 4, 5]);
    let exhausted = Error::Exhausted {
        prefix: PREFIX.into(),
        max: 5,
    };
    let errors: Vec<_> = results.iter().filter_map(|r| r.clone().err()).collect();
    assert_eq!(errors, vec![exhausted.clone(); 3]);
    assert_invoices(&seqs, 1..=5);
    assert_eq!(used(&seqs, 6), None);
    assert_eq!(counter(&seqs), Some(6));
    // Still exhausted, still nothing written.
    assert_eq!(h.next_coded(invoice).map(|i| i.number()), Err(exhausted));
    assert_eq!(counter(&seqs), Some(6));
    assert_eq!(invoice_count(&db), 5);
}

#[test]
fn a_request_whose_own_check_fails_is_rejected_at_its_own_index_and_leaves_no_gap() {
    let db = Database::in_memory();
    db.set(&key!["taken"], b"x").unwrap();
    let seqs = create(&db, options());
    let h = handle(&db);
    let mut others = invoices(3);
    others.insert(
        1,
        coded(|code, r| {
            r.check(&key!["taken"], None)
                .set(&key!["taken"], code)
                .set(&key!["inv", code], json(code));
        }),
    );
    let (first, rest) = batch(&h, others);
    assert_eq!(first.unwrap(), 1);
    let Err(Error::Rejected(conflict)) = &rest[1] else {
        panic!("{rest:?}")
    };
    assert_eq!(conflict.failed_checks.len(), 1, "{conflict:?}");
    assert_eq!(conflict.failed_checks[0].index, 0);
    assert_eq!(
        conflict.failed_checks[0].key,
        KeyBytes::from(encode_key(&key!["taken"]).as_slice())
    );
    assert_eq!(sorted_ok(&rest), [2, 3, 4]);
    assert_invoices(&seqs, 1..=4);
    assert_eq!(bytes_at(&db, &key!["taken"]), Some(b"x".to_vec()));
    assert_eq!(counter(&seqs), Some(5));
    assert_eq!(h.next_coded(invoice).unwrap().number(), 5);
    assert_invoices(&seqs, 1..=5);
}

#[test]
fn a_counter_set_back_makes_the_backstop_fail_with_duplicate_and_nothing_is_written() {
    let db = Database::in_memory();
    let seqs = create(&db, options());
    let h = handle(&db);
    for n in 1..=3 {
        assert_eq!(h.next_coded(invoice).unwrap().number(), n);
    }
    let counter_key = seqs.counter_key(PREFIX).unwrap();
    db.set_raw(&counter_key, Value::U64(2)).unwrap();
    let err = h
        .next_coded(|code, r| {
            r.set(&key!["inv", code], b"second".to_vec())
                .set(&key!["attempt"], code);
        })
        .unwrap_err();
    assert_eq!(
        err,
        Error::Duplicate {
            prefix: PREFIX.into(),
            number: 2,
            code: "INV002".into(),
        }
    );
    // Nothing of it was written, and it took no number.
    assert_eq!(bytes_at(&db, &key!["attempt"]), None);
    assert_invoices(&seqs, 1..=3);
    assert_eq!(counter(&seqs), Some(2));
    // Repaired, the sequence goes on.
    db.set_raw(&counter_key, Value::U64(4)).unwrap();
    assert_eq!(h.next_coded(invoice).unwrap().number(), 4);
    assert_invoices(&seqs, 1..=4);
    assert_eq!(counter(&seqs), Some(5));
}

#[test]
fn a_panicking_record_closure_fails_alone_and_uses_no_number() {
    let db = Database::in_memory();
    let seqs = create(&db, options());
    let h = handle(&db);
    let panicked = Error::RecordPanicked {
        prefix: PREFIX.into(),
    };
    assert_eq!(h.next_coded(invoice).unwrap().number(), 1);
    let err = h.next_coded(|_, _| panic!("bad record (on purpose)"));
    assert_eq!(err.map(|i| i.number()), Err(panicked.clone()));
    // Panicking only for the second placeholder (all nines).
    let err = h.next_coded(|code, r| {
        assert!(!code.ends_with("999"), "bad record (on purpose)");
        invoice(code, r);
    });
    assert_eq!(err.map(|i| i.number()), Err(panicked.clone()));
    assert_eq!(h.next_coded(invoice).unwrap().number(), 2);
    // In a batch.
    let mut others = invoices(2);
    others.insert(1, coded(|_, _| panic!("bad record (on purpose)")));
    let (first, rest) = batch(&h, others);
    assert_eq!(first.unwrap(), 3);
    assert_eq!(rest[1], Err(panicked));
    assert_eq!(sorted_ok(&rest), [4, 5]);
    assert_eq!(h.next_coded(invoice).unwrap().number(), 6);
    assert_invoices(&seqs, 1..=6);
    assert_eq!(counter(&seqs), Some(7));
}

#[test]
fn checked_and_store_numbered_handles_on_one_sequence_get_one_to_n_together() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 30;
    let db = Database::in_memory();
    let seqs = create(&db, options());
    let checked = Arc::new(
        Sequences::new(db.clone())
            .gapless(PREFIX)
            .unwrap()
            .with_numbering(Numbering::Checked),
    );
    let stored = handle(&db);
    assert_eq!(checked.numbering(), Numbering::Checked);
    assert_eq!(stored.numbering(), Numbering::Store);
    let barrier = Arc::new(Barrier::new(2 * THREADS));
    let joins: Vec<_> = (0..2 * THREADS)
        .map(|t| {
            let is_checked = t % 2 == 0;
            let h = Arc::clone(if is_checked { &checked } else { &stored });
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                (0..PER_THREAD)
                    .map(|i| {
                        // The checked handle mixes `next_with` in; the store-numbered one
                        // only sends coded requests (a batch holding a `next_with` request is
                        // numbered the checked way, and may meet a moved counter).
                        let issued = if !is_checked || i % 2 == 0 {
                            h.next_coded(invoice).unwrap()
                        } else {
                            h.next_with(|issued, r| invoice(&issued.code(), r)).unwrap()
                        };
                        (issued.number(), issued.code())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let issued: Vec<_> = joins.into_iter().flat_map(|j| j.join().unwrap()).collect();
    let n = (2 * THREADS * PER_THREAD) as u64;
    assert_exactly_one_to_n(&issued, n);
    assert_invoices(&seqs, 1..=n);
    assert_eq!(counter(&seqs), Some(n + 1));
    assert_eq!(checked.stats().store_numbered, 0);
    assert_eq!(checked.stats().codes + stored.stats().codes, n);
    let s = stored.stats();
    assert_eq!((s.counter_conflicts, s.conflicts), (0, 0), "{s:?}");
    assert_eq!(s.store_numbered, s.commits, "{s:?}");
}

#[test]
fn store_numbered_codes_survive_a_reopen_and_a_new_handle_continues_at_n_plus_one() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 75;
    let dir = tempfile::tempdir().unwrap();
    let n = (THREADS * PER_THREAD) as u64;
    {
        let db = Database::open(dir.path(), Options::default()).unwrap();
        let seqs = create(&db, options());
        let h = handle(&db);
        let issued = issue_invoices(std::slice::from_ref(&h), THREADS, PER_THREAD);
        assert_exactly_one_to_n(&issued, n);
        assert!(h.stats().store_numbered > 0);
        drop((h, seqs));
        db.close().unwrap();
    }
    let db = Database::open(dir.path(), Options::default()).unwrap();
    let seqs = Sequences::new(db.clone());
    assert_invoices(&seqs, 1..=n);
    assert_eq!(counter(&seqs), Some(n + 1));
    let h = handle(&db);
    let issued = h.next_coded(invoice).unwrap();
    assert_eq!(issued.number(), n + 1);
    assert_eq!(h.stats().store_numbered, 1);
    assert_invoices(&seqs, 1..=n + 1);
    drop((h, seqs));
    db.close().unwrap();
}
