//! Threads on several independent handles (standing for several servers) hammering `next()` on
//! the same store: every number is handed out once, and in gapless mode the committed numbers
//! are exactly `1..=N` per prefix, each with its record.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::thread;

use tuplekv_engine::{Database, ListOptions, Selector, Value, key};
use tuplekv_sequence::{Mode, SequenceOptions, Sequences};

const HANDLES: usize = 3;
const THREADS_PER_HANDLE: usize = 3;
const PREFIXES: [&str; 2] = ["INFO", "WARN"];

fn per_thread(default: usize) -> usize {
    std::env::var("SEQUENCE_HAMMER_PER_THREAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `HANDLES × THREADS_PER_HANDLE` threads, each calling `draw(handle, prefix index)`
/// `n` times per prefix; returns, per prefix, every thread's numbers in draw order.
fn hammer<H: Send + Sync + 'static>(
    handles: Vec<H>,
    n: usize,
    draw: fn(&H, usize) -> u64,
) -> Vec<Vec<Vec<u64>>> {
    let handles: Vec<Arc<H>> = handles.into_iter().map(Arc::new).collect();
    let barrier = Arc::new(Barrier::new(HANDLES * THREADS_PER_HANDLE));
    let mut joins = Vec::new();
    for h in &handles {
        for _ in 0..THREADS_PER_HANDLE {
            let (h, barrier) = (Arc::clone(h), Arc::clone(&barrier));
            joins.push(thread::spawn(move || {
                barrier.wait();
                let mut out = vec![Vec::with_capacity(n); PREFIXES.len()];
                for _ in 0..n {
                    for (p, numbers) in out.iter_mut().enumerate() {
                        numbers.push(draw(&h, p));
                    }
                }
                out
            }));
        }
    }
    let results: Vec<Vec<Vec<u64>>> = joins.into_iter().map(|j| j.join().unwrap()).collect();
    (0..PREFIXES.len())
        .map(|p| results.iter().map(|r| r[p].clone()).collect())
        .collect()
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

fn create(db: &Database, mode: Mode) {
    let seqs = Sequences::new(db.clone());
    for p in PREFIXES {
        let options = SequenceOptions {
            mode,
            ..Default::default()
        };
        seqs.create(p, options).unwrap();
    }
}

#[test]
fn fast_handles_on_one_store_never_hand_out_a_number_twice() {
    let db = Database::in_memory();
    create(&db, Mode::Fast);
    let handles: Vec<_> = (0..HANDLES)
        .map(|_| {
            let seqs = Sequences::new(db.clone());
            PREFIXES.map(|p| seqs.fast(p).unwrap())
        })
        .collect();
    let n = per_thread(3000);
    let results = hammer(handles, n, |h, p| h[p].next().unwrap().number());
    for per_thread in &results {
        let all = assert_distinct_and_increasing_per_thread(per_thread);
        assert_eq!(all.len(), HANDLES * THREADS_PER_HANDLE * n);
        assert!(all.iter().all(|&x| x >= 1));
    }
}

#[test]
fn gapless_handles_commit_exactly_one_to_n_with_their_records() {
    let db = Database::in_memory();
    create(&db, Mode::Gapless);
    let handles: Vec<_> = (0..HANDLES)
        .map(|_| {
            let seqs = Sequences::new(db.clone());
            PREFIXES.map(|p| seqs.gapless(p).unwrap())
        })
        .collect();
    let n = per_thread(150);
    let results = hammer(handles, n, |h, p| {
        let issued = h[p]
            .next_with(move |issued, record| {
                record.set(
                    &key!["logs", PREFIXES[p], issued.number()],
                    issued.code().as_str(),
                );
            })
            .unwrap();
        issued.number()
    });
    let total = HANDLES * THREADS_PER_HANDLE * n;
    for (p, per_thread) in results.iter().enumerate() {
        let all = assert_distinct_and_increasing_per_thread(per_thread);
        let expected: HashSet<u64> = (1..=total as u64).collect();
        assert_eq!(
            all, expected,
            "{}: committed numbers are not 1..={total}",
            PREFIXES[p]
        );
        // Every number has its record, written in the same commit, holding its own code.
        let logs: Vec<_> = db
            .list(
                &Selector::prefix(&key!["logs", PREFIXES[p]]),
                ListOptions::default(),
            )
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(logs.len(), total);
        for (i, entry) in logs.iter().enumerate() {
            let code = format!("{}{:03}", PREFIXES[p], i + 1);
            assert_eq!(entry.value, Value::from(code.as_str()));
        }
    }
}
