//! The sequence layer's contract on any backend: fast and gapless sequences over the
//! backend's store agree with a locked counter per prefix under random interleavings of
//! threads, handles and restarts, and threads hammering several handles at once never get
//! a number twice, with gapless numbers exactly `1..=n`, each with its record.
//!
//! Handles stand for servers: each is made from its own clone of the store. Sequences read
//! one key per snapshot and commit with key checks, so the properties hold on backends
//! without snapshots too.
//!
//! Sizes come in pairs: the full one for in-process stores (what the sequence crate's own
//! tests ran before this suite), the `_REMOTE` one where each operation is a round trip
//! ([`Backend::cost`]). On in-process stores `SEQUENCE_HAMMER_PER_THREAD` sets the hammer
//! threads' draws for a long run (`cargo xtask soak`).

use std::collections::HashSet;
use std::sync::{Barrier, Mutex, MutexGuard};

use proptest::prelude::*;
use tuplekv_engine::{Entry, ListCursor, ListOptions, ReadView, Selector, Store, Value, key};
use tuplekv_sequence::{Error, FastSequence, GaplessSequence, Mode, SequenceOptions, Sequences};

use super::index::run_cases;
use super::{Backend, Cost, DUMP_MAX};

/// Cases of [`sequences_agree_with_a_locked_counter_per_prefix`].
pub const MODEL_CASES: u32 = 256;
/// [`MODEL_CASES`] on a remote store.
pub const MODEL_CASES_REMOTE: u32 = 12;
/// Most operations of one thread of a model case.
pub const MODEL_OPS_MAX: usize = 60;
/// [`MODEL_OPS_MAX`] on a remote store.
pub const MODEL_OPS_MAX_REMOTE: usize = 30;
/// Threads of a model case.
pub const MODEL_THREADS: usize = 3;
/// Handles of the hammer properties, each used by [`THREADS_PER_HANDLE`] threads.
pub const HANDLES: usize = 3;
/// Threads per handle of the hammer properties.
pub const THREADS_PER_HANDLE: usize = 3;
/// [`THREADS_PER_HANDLE`] on a remote store.
pub const THREADS_PER_HANDLE_REMOTE: usize = 2;
/// Numbers each hammer thread draws per prefix from a fast sequence.
pub const FAST_DRAWS: usize = 3000;
/// [`FAST_DRAWS`] on a remote store.
pub const FAST_DRAWS_REMOTE: usize = 200;
/// Numbers each hammer thread draws per prefix from a gapless sequence (one commit each
/// at worst).
pub const GAPLESS_DRAWS: usize = 150;
/// [`GAPLESS_DRAWS`] on a remote store.
pub const GAPLESS_DRAWS_REMOTE: usize = 15;
/// Environment variable that sets the draws of every hammer thread on in-process stores.
pub const HAMMER_DRAWS_ENV: &str = "SEQUENCE_HAMMER_PER_THREAD";

const FAST: [&str; 2] = ["FA", "FB"];
const GAPLESS: [&str; 2] = ["GA", "GB"];
const PREFIXES: [&str; 2] = ["INFO", "WARN"];

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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The reference: per prefix, the counter of a lock-based generator.
#[derive(Default)]
struct Model {
    /// Gapless: the last number committed.
    gapless: [Mutex<u64>; 2],
    /// Fast: the highest number handed out, and every number handed out.
    fast: [Mutex<(u64, HashSet<u64>)>; 2],
}

/// A fast handle with what the model expects of it.
struct FastHandle<S: Store> {
    seq: FastSequence<S>,
    /// Every number it hands out must be above this (the highest before it was opened).
    floor: u64,
    last: u64,
}

fn open_fast<S: Store + Clone>(seqs: &Sequences<S>, model: &Model, p: usize) -> FastHandle<S> {
    // Opened under the model's lock, so `floor` covers every number handed out before.
    let fast = lock(&model.fast[p]);
    FastHandle {
        seq: seqs.fast(FAST[p]).expect("a fast handle"),
        floor: fast.0,
        last: 0,
    }
}

fn check_code(prefix: &str, number: u64, code: &str, parsed: Result<u64, Error>) {
    assert_eq!(code, format!("{prefix}{number:03}"));
    assert_eq!(parsed.expect("a code parses back"), number);
}

/// One thread's operations, checked against the model as they go.
fn run_thread<S: Store + Clone + 'static>(seqs: &Sequences<S>, model: &Model, ops: &[Op]) {
    let mut fast: Vec<FastHandle<S>> = (0..FAST.len()).map(|p| open_fast(seqs, model, p)).collect();
    let mut gapless: Vec<GaplessSequence<S>> = GAPLESS
        .iter()
        .map(|p| seqs.gapless(p).expect("a gapless handle"))
        .collect();
    for op in ops {
        match *op {
            Op::Fast(p) => {
                let h = &mut fast[p];
                let issued = h.seq.next().expect("a fast number");
                let n = issued.number();
                check_code(FAST[p], n, &issued.code(), h.seq.parse(&issued.code()));
                assert!(
                    n > h.floor,
                    "{n} is not above {} from before its handle",
                    h.floor
                );
                assert!(n > h.last, "{n} after {} from the same handle", h.last);
                h.last = n;
                let mut m = lock(&model.fast[p]);
                assert!(m.1.insert(n), "{} handed out {n} twice", FAST[p]);
                m.0 = m.0.max(n);
            }
            Op::Gapless(p) => {
                let mut m = lock(&model.gapless[p]);
                let h = &gapless[p];
                // Numbered by the store, beside `Rejected`'s checked requests on the same
                // sequences.
                let issued = h
                    .next_coded(|code, record| {
                        record.set(&key!["records", code], code);
                    })
                    .expect("a gapless number");
                let n = issued.number();
                check_code(GAPLESS[p], n, &issued.code(), h.parse(&issued.code()));
                assert_eq!(n, *m + 1, "{} is not the model's next number", GAPLESS[p]);
                *m = n;
            }
            Op::Rejected(p) => {
                let m = lock(&model.gapless[p]);
                let err = gapless[p]
                    .next_with(|issued, record| {
                        record
                            .check(&key!["taken"], None)
                            .set(&key!["records", issued.code()], 0u64);
                    })
                    .expect_err("a record whose check fails is rejected");
                assert!(matches!(err, Error::Rejected(_)), "{err}");
                drop(m);
            }
            Op::RestartFast(p) => fast[p] = open_fast(seqs, model, p),
            Op::RestartGapless(p) => {
                gapless[p] = seqs.gapless(GAPLESS[p]).expect("a gapless handle");
            }
        }
    }
}

/// Runs the threads' operations at once on a fresh store and checks it against the model.
fn check_against_model<B: Backend>(backend: &B, ops: &[Vec<Op>])
where
    B::Store: Clone,
{
    let store = backend.open();
    assert!(
        store
            .atomic()
            .set(&key!["taken"], "x")
            .commit()
            .expect("a commit")
            .is_committed()
    );
    let seqs = Sequences::new(store.clone());
    for p in FAST {
        seqs.create(p, SequenceOptions::default()).expect("created");
    }
    for p in GAPLESS {
        let options = SequenceOptions {
            mode: Mode::Gapless,
            ..SequenceOptions::default()
        };
        seqs.create(p, options).expect("created");
    }
    let model = Model::default();
    std::thread::scope(|s| {
        for thread_ops in ops {
            let (model, store) = (&model, &store);
            s.spawn(move || run_thread(&Sequences::new(store.clone()), model, thread_ops));
        }
    });
    for (p, prefix) in GAPLESS.iter().enumerate() {
        let n = *lock(&model.gapless[p]);
        // Exactly 1..=n committed, each with its record; nothing above.
        for number in 1..=n + 1 {
            let used = seqs.used_key(prefix, number).expect("a used key");
            let code = format!("{prefix}{number:03}");
            let expected = number <= n;
            let record = store
                .snapshot()
                .get(&key!["records", code.as_str()])
                .expect("a read");
            let used = store.snapshot().get_raw(&used).expect("a read");
            assert_eq!(used.is_some(), expected, "{code} used");
            assert_eq!(record.is_some(), expected, "record of {code}");
        }
    }
    let fast_ops = ops
        .iter()
        .flatten()
        .filter(|op| matches!(op, Op::Fast(_)))
        .count();
    let handed_out: usize = model.fast.iter().map(|m| lock(m).1.len()).sum();
    assert_eq!(handed_out, fast_ops);
}

/// [`MODEL_THREADS`] threads, each with its own handles on two fast and two gapless
/// prefixes, run random interleavings of `next`, gapless requests rejected by their own
/// check, and handle restarts. Gapless numbers are exactly the model's next ones, and the
/// committed ones are `1..=n` with their records; fast numbers are never repeated, increase
/// per handle and are above everything handed out before their handle opened.
pub fn sequences_agree_with_a_locked_counter_per_prefix<B: Backend>(backend: &B)
where
    B::Store: Clone,
{
    let cost = backend.cost();
    let thread = prop::collection::vec(op(), 1..cost.pick(MODEL_OPS_MAX, MODEL_OPS_MAX_REMOTE));
    run_cases(
        cost.pick(MODEL_CASES, MODEL_CASES_REMOTE),
        "contract-sequence-model.txt",
        backend.name(),
        prop::collection::vec(thread, MODEL_THREADS),
        |ops| {
            check_against_model(backend, &ops);
            Ok(())
        },
    );
}

/// How a hammer property runs: threads per handle and draws per thread and prefix.
#[derive(Debug, Clone, Copy)]
struct Hammer {
    threads_per_handle: usize,
    draws: usize,
}

impl Hammer {
    /// The hammer's size on a backend of `cost`, drawing `draws` numbers per thread on an
    /// in-process store (or `$SEQUENCE_HAMMER_PER_THREAD`, in memory only) and `draws_remote`
    /// on a remote one.
    fn sized(cost: Cost, draws: usize, draws_remote: usize) -> Hammer {
        let draws = match cost {
            Cost::InProcess => std::env::var(HAMMER_DRAWS_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(draws),
            Cost::Disk => draws,
            Cost::RoundTrip => draws_remote,
        };
        Hammer {
            threads_per_handle: cost.pick(THREADS_PER_HANDLE, THREADS_PER_HANDLE_REMOTE),
            draws,
        }
    }

    /// How many numbers all threads draw per prefix.
    fn total(self) -> usize {
        HANDLES * self.threads_per_handle * self.draws
    }

    /// Runs `threads_per_handle` threads per handle, each calling `draw(handle, prefix
    /// index)` `draws` times per prefix; returns, per prefix, every thread's numbers in
    /// draw order.
    fn run<H: Sync>(
        self,
        handles: &[H],
        draw: impl Fn(&H, usize) -> u64 + Sync,
    ) -> Vec<Vec<Vec<u64>>> {
        let n = self.draws;
        let barrier = Barrier::new(handles.len() * self.threads_per_handle);
        let results: Vec<Vec<Vec<u64>>> = std::thread::scope(|s| {
            let joins: Vec<_> = handles
                .iter()
                .flat_map(|h| std::iter::repeat_n(h, self.threads_per_handle))
                .map(|h| {
                    let (barrier, draw) = (&barrier, &draw);
                    s.spawn(move || {
                        barrier.wait();
                        let mut out = vec![Vec::with_capacity(n); PREFIXES.len()];
                        for _ in 0..n {
                            for (p, numbers) in out.iter_mut().enumerate() {
                                numbers.push(draw(h, p));
                            }
                        }
                        out
                    })
                })
                .collect();
            joins
                .into_iter()
                .map(|j| j.join().expect("a drawing thread"))
                .collect()
        });
        (0..PREFIXES.len())
            .map(|p| results.iter().map(|r| r[p].clone()).collect())
            .collect()
    }
}

fn assert_distinct_and_increasing_per_thread(per_thread: &[Vec<u64>]) -> HashSet<u64> {
    let mut all = HashSet::new();
    for numbers in per_thread {
        assert!(
            numbers.windows(2).all(|w| w[0] < w[1]),
            "a thread's numbers went down"
        );
        for &n in numbers {
            assert!(all.insert(n), "number {n} handed out twice");
        }
    }
    all
}

/// A fresh store with both [`PREFIXES`] created in `mode`, and [`HANDLES`] handles on them
/// (servers), each opened by `open` from a clone of the store of its own.
fn open_handles<B: Backend, H>(
    backend: &B,
    mode: Mode,
    open: impl Fn(&Sequences<B::Store>, &str) -> H,
) -> (B::Store, Vec<[H; 2]>)
where
    B::Store: Clone,
{
    let store = backend.open();
    let seqs = Sequences::new(store.clone());
    for p in PREFIXES {
        let options = SequenceOptions {
            mode,
            ..SequenceOptions::default()
        };
        seqs.create(p, options).expect("created");
    }
    let handles = (0..HANDLES)
        .map(|_| {
            let seqs = Sequences::new(store.clone());
            PREFIXES.map(|p| open(&seqs, p))
        })
        .collect();
    (store, handles)
}

/// Threads on [`HANDLES`] handles (servers) draw from two fast sequences at once: no number
/// is handed out twice, and each thread's numbers increase.
pub fn fast_handles_never_hand_out_a_number_twice<B: Backend>(backend: &B)
where
    B::Store: Clone,
{
    let (_, handles) = open_handles(backend, Mode::Fast, |seqs, p| {
        seqs.fast(p).expect("a fast handle")
    });
    let size = Hammer::sized(backend.cost(), FAST_DRAWS, FAST_DRAWS_REMOTE);
    let results = size.run(&handles, |h, p| {
        h[p].next().expect("a fast number").number()
    });
    for per_thread in &results {
        let all = assert_distinct_and_increasing_per_thread(per_thread);
        assert_eq!(all.len(), size.total());
        assert!(all.iter().all(|&x| x >= 1));
    }
}

/// Threads on [`HANDLES`] handles draw from two gapless sequences at once, each number
/// committed with a record: the numbers are exactly `1..=n` per prefix, and each record holds
/// its own code.
pub fn gapless_handles_commit_exactly_one_to_n_with_their_records<B: Backend>(backend: &B)
where
    B::Store: Clone,
{
    let (store, handles) = open_handles(backend, Mode::Gapless, |seqs, p| {
        seqs.gapless(p).expect("a gapless handle")
    });
    let size = Hammer::sized(backend.cost(), GAPLESS_DRAWS, GAPLESS_DRAWS_REMOTE);
    let results = size.run(&handles, |h, p| {
        h[p].next_with(move |issued, record| {
            record.set(
                &key!["logs", PREFIXES[p], issued.number()],
                issued.code().as_str(),
            );
        })
        .expect("a gapless number")
        .number()
    });
    let total = size.total();
    for (p, per_thread) in results.iter().enumerate() {
        let all = assert_distinct_and_increasing_per_thread(per_thread);
        let expected: HashSet<u64> = (1..=total as u64).collect();
        assert_eq!(
            all, expected,
            "{}: the committed numbers are not 1..={total}",
            PREFIXES[p]
        );
        let logs = read_in_batches(&store, &Selector::prefix(&key!["logs", PREFIXES[p]]));
        assert_eq!(logs.len(), total);
        for (i, entry) in logs.iter().enumerate() {
            let code = format!("{}{:03}", PREFIXES[p], i + 1);
            assert_eq!(entry.value, Value::from(code.as_str()));
        }
    }
}

/// Whether the next draw of the mixed properties below goes through the async API: every
/// other one, across all threads, so async and blocking callers share handles and batches.
fn next_is_async(flip: &std::sync::atomic::AtomicUsize) -> bool {
    flip.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        .is_multiple_of(2)
}

/// [`fast_handles_never_hand_out_a_number_twice`] with every other draw through
/// `next_async` (awaited on the drawing thread): async and blocking callers of one handle
/// never get one number twice, and each thread's numbers still increase.
pub fn fast_handles_mixing_async_and_blocking_draws_never_hand_out_a_number_twice<B: Backend>(
    backend: &B,
) where
    B::Store: Clone,
{
    let (_, handles) = open_handles(backend, Mode::Fast, |seqs, p| {
        seqs.fast(p).expect("a fast handle")
    });
    let size = Hammer::sized(backend.cost(), FAST_DRAWS, FAST_DRAWS_REMOTE);
    let flip = std::sync::atomic::AtomicUsize::new(0);
    let results = size.run(&handles, |h, p| {
        let issued = if next_is_async(&flip) {
            crate::executor::block_on(h[p].next_async())
        } else {
            h[p].next()
        };
        issued.expect("a fast number").number()
    });
    for per_thread in &results {
        let all = assert_distinct_and_increasing_per_thread(per_thread);
        assert_eq!(all.len(), size.total());
    }
}

/// [`gapless_handles_commit_exactly_one_to_n_with_their_records`] with every other request
/// through `next_with_async`: async and blocking requesters share batches, and the numbers
/// are still exactly `1..=n` per prefix, each record holding its own code.
pub fn gapless_handles_mixing_async_and_blocking_requests_commit_one_to_n<B: Backend>(backend: &B)
where
    B::Store: Clone,
{
    let (store, handles) = open_handles(backend, Mode::Gapless, |seqs, p| {
        seqs.gapless(p).expect("a gapless handle")
    });
    let size = Hammer::sized(backend.cost(), GAPLESS_DRAWS, GAPLESS_DRAWS_REMOTE);
    let flip = std::sync::atomic::AtomicUsize::new(0);
    let results = size.run(&handles, |h, p| {
        let build = move |issued: &tuplekv_sequence::Issued<'_>,
                          record: &mut tuplekv_sequence::Record| {
            record.set(
                &key!["logs", PREFIXES[p], issued.number()],
                issued.code().as_str(),
            );
        };
        let issued = if next_is_async(&flip) {
            crate::executor::block_on(h[p].next_with_async(build))
        } else {
            h[p].next_with(build)
        };
        issued.expect("a gapless number").number()
    });
    let total = size.total();
    for (p, per_thread) in results.iter().enumerate() {
        let all = assert_distinct_and_increasing_per_thread(per_thread);
        let expected: HashSet<u64> = (1..=total as u64).collect();
        assert_eq!(all, expected, "{}: not 1..={total}", PREFIXES[p]);
        let logs = read_in_batches(&store, &Selector::prefix(&key!["logs", PREFIXES[p]]));
        assert_eq!(logs.len(), total);
    }
}

/// Whether `store` assigns numbers at commit time (a plain KV Connect server does not).
fn numbers_in_store<S: Store>(store: &S) -> bool {
    use tuplekv_engine::numbering::{CounterClaim, Numbering};
    let counter = tuplekv_codec::encode_key(&key!["__probe", "counter"]);
    let write = tuplekv_engine::AtomicWrite {
        numbering: Numbering {
            counters: vec![CounterClaim {
                key: counter.as_slice().into(),
                start: 1,
                count: 1,
                max: u64::MAX,
            }],
            slots: Vec::new(),
        },
        ..Default::default()
    };
    match store.commit(write) {
        Ok(result) => {
            assert_eq!(
                result.numbers().map(<[u64]>::len),
                Some(1),
                "one claim, one number"
            );
            true
        }
        Err(tuplekv_engine::Error::Unsupported { .. }) => false,
        Err(e) => panic!("a numbered commit failed: {e}"),
    }
}

/// Threads on [`HANDLES`] handles draw from two gapless sequences with records that hold
/// their code in a key and in a JSON value (`next_coded`): the numbers are exactly `1..=n`
/// per prefix, each record holds its own code, and where the store numbers commits, no
/// commit was refused because the counter moved.
pub fn coded_gapless_handles_commit_one_to_n_without_counter_conflicts<B: Backend>(backend: &B)
where
    B::Store: Clone,
{
    let (store, handles) = open_handles(backend, Mode::Gapless, |seqs, p| {
        seqs.gapless(p).expect("a gapless handle")
    });
    let in_store = numbers_in_store(&store);
    let size = Hammer::sized(backend.cost(), GAPLESS_DRAWS, GAPLESS_DRAWS_REMOTE);
    let results = size.run(&handles, |h, p| {
        h[p].next_coded(move |code, record| {
            let key = key!["invoices", PREFIXES[p], code];
            record
                .check(&key, None)
                .set(&key, format!("{{\"code\":\"{code}\"}}").into_bytes());
        })
        .expect("a gapless number")
        .number()
    });
    let total = size.total();
    for (p, per_thread) in results.iter().enumerate() {
        let all = assert_distinct_and_increasing_per_thread(per_thread);
        let expected: HashSet<u64> = (1..=total as u64).collect();
        assert_eq!(all, expected, "{}: not 1..={total}", PREFIXES[p]);
        let records = read_in_batches(&store, &Selector::prefix(&key!["invoices", PREFIXES[p]]));
        assert_eq!(records.len(), total);
        // Codes widen past 999, so key order is not number order: look each one up.
        let by_key: std::collections::HashMap<_, _> = records
            .iter()
            .map(|e| (e.decoded_key().expect("a tuple"), &e.value))
            .collect();
        for n in 1..=total {
            let code = format!("{}{n:03}", PREFIXES[p]);
            let value = by_key
                .get(&key!["invoices", PREFIXES[p], code.as_str()])
                .unwrap_or_else(|| panic!("no record for {code}"));
            assert_eq!(
                **value,
                Value::from(format!("{{\"code\":\"{code}\"}}").into_bytes())
            );
        }
    }
    let stats: Vec<_> = handles
        .iter()
        .flatten()
        .map(GaplessSequence::stats)
        .collect();
    let counter_conflicts: u64 = stats.iter().map(|s| s.counter_conflicts).sum();
    let store_numbered: u64 = stats.iter().map(|s| s.store_numbered).sum();
    if in_store {
        assert_eq!(
            counter_conflicts, 0,
            "no commit refused by the counter: {stats:?}"
        );
        assert_eq!(store_numbered, stats.iter().map(|s| s.commits).sum::<u64>());
    } else {
        assert_eq!(
            store_numbered, 0,
            "a store without numbering numbers nothing"
        );
    }
}

/// Every entry under `selector`, [`DUMP_MAX`] at a time, each batch read by a list of its
/// own (one read each, so a store without snapshots serves it too).
fn read_in_batches<S: Store>(store: &S, selector: &Selector) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let options = ListOptions {
            limit: Some(DUMP_MAX),
            batch_size: Some(DUMP_MAX),
            cursor,
            ..ListOptions::default()
        };
        let mut list = store.list(selector, options).expect("a list");
        let batch = list.read_all().expect("a batch of entries");
        let full = batch.len() == DUMP_MAX;
        out.extend(batch);
        match list.cursor() {
            ListCursor::After(next) if full => cursor = Some(next),
            _ => return out,
        }
    }
}

/// One `#[test]` per property of the sequence layer's contract, on the backend `$backend`
/// (whose store must be `Clone`: each handle gets its own clone).
#[macro_export]
macro_rules! sequence_contract_tests {
    ($backend:expr) => {
        $crate::contract_tests!(
            $backend;
            $crate::contract::sequence;
            sequences_agree_with_a_locked_counter_per_prefix,
            fast_handles_never_hand_out_a_number_twice,
            fast_handles_mixing_async_and_blocking_draws_never_hand_out_a_number_twice,
            gapless_handles_commit_exactly_one_to_n_with_their_records,
            gapless_handles_mixing_async_and_blocking_requests_commit_one_to_n,
            coded_gapless_handles_commit_one_to_n_without_counter_conflicts,
        );
    };
}
