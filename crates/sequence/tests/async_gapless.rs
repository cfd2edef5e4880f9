//! `GaplessSequence::next_async` and its twins: over the in-memory database, a durable one
//! and a store whose async reads and commits wait, async tasks and blocking threads on one
//! handle (and its clones) get exactly the numbers 1..=n, every one with its record; async
//! and blocking requests share batches; an async requester holds no runtime worker while its
//! batch is led; a dropped future's request still commits (no gap); a commit whose answer
//! was lost reports the code its request has in the committed record.
#![allow(clippy::unwrap_used, reason = "tests")]

mod async_support;

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Waker};

use async_support::{Slow, durable, runtime, sequences};
use tuplekv_engine::{
    AtomicWrite, CommitResult, Database, Error as StoreError, ReadView, Snapshot, Store,
    Versionstamp, Watch, key,
};
use tuplekv_sequence::{Error, Mode, Numbering, Sequences};

const TASKS: usize = 8;
const THREADS: usize = 2;
const EACH: usize = 40;

/// Whether `key` holds something in `store`.
fn exists<S: Store>(store: &S, key: &[u8]) -> bool {
    store.snapshot().get_raw(key).unwrap().is_some()
}

/// The record a request writes for `code`.
fn record_key(code: &str) -> Vec<u8> {
    tuplekv_codec::encode_key(&key!["rec", code])
}

/// Every number of `prefix` from 1 to `n` is recorded (its uniqueness key and its record),
/// and `n + 1` is not.
fn assert_gapless<S: Store + Clone>(seqs: &Sequences<S>, prefix: &str, n: u64, format: &str) {
    for i in 1..=n + 1 {
        let used = exists(seqs.store(), &seqs.used_key(prefix, i).unwrap());
        let code = format!("{prefix}{i:0width$}", width = format.len());
        let record = exists(seqs.store(), &record_key(&code));
        if i <= n {
            assert!(used && record, "number {i} ({code}) is not fully recorded");
        } else {
            assert!(
                !used && !record,
                "number {i} is recorded past the {n} issued"
            );
        }
    }
}

/// Async tasks on a two-worker runtime and blocking threads, on clones of one handle: the
/// numbers are exactly 1..=n, each with its record.
fn async_and_blocking_requesters_get_one_to_n<S: Store + Clone + 'static>(store: S) {
    let seqs = sequences(store, "TKT", Mode::Gapless);
    let handle = seqs.gapless("TKT").unwrap();
    let rt = runtime();
    let mut numbers: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let h = handle.clone();
                s.spawn(move || {
                    (0..EACH)
                        .map(|_| {
                            h.next_coded(|code, r| {
                                r.set(&key!["rec", code], b"blocking");
                            })
                            .unwrap()
                            .number()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let h = handle.clone();
                rt.spawn(async move {
                    let mut got = Vec::with_capacity(EACH);
                    for i in 0..EACH {
                        // Both async twins: the coded one and the numbered one.
                        let issued = if (t + i) % 2 == 0 {
                            h.next_coded_async(|code, r| {
                                r.set(&key!["rec", code], b"async");
                            })
                            .await
                        } else {
                            h.next_with_async(|issued, r| {
                                r.set(&key!["rec", issued.code()], b"async");
                            })
                            .await
                        };
                        got.push(issued.unwrap().number());
                    }
                    got
                })
            })
            .collect();
        let mut numbers: Vec<u64> = rt.block_on(async {
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.unwrap());
            }
            all
        });
        for t in threads {
            numbers.extend(t.join().unwrap());
        }
        numbers
    });
    numbers.sort_unstable();
    let n = ((TASKS + THREADS) * EACH) as u64;
    assert_eq!(numbers, (1..=n).collect::<Vec<_>>());
    assert_gapless(&seqs, "TKT", n, "000000");
    let stats = handle.stats();
    assert_eq!(stats.codes, n);
    assert!(stats.commits <= n);
}

#[test]
fn gapless_async_and_blocking_requesters_get_one_to_n_over_the_in_memory_store() {
    async_and_blocking_requesters_get_one_to_n(Database::in_memory());
}

#[test]
fn gapless_async_and_blocking_requesters_get_one_to_n_over_a_durable_store() {
    let (db, _dir) = durable();
    async_and_blocking_requesters_get_one_to_n(db);
}

#[test]
fn gapless_async_and_blocking_requesters_get_one_to_n_over_a_store_that_waits() {
    async_and_blocking_requesters_get_one_to_n(Slow::new(Database::in_memory()));
}

/// A database whose commits wait at a gate while it is closed, counting those waiting.
#[derive(Clone)]
struct Gate {
    db: Database,
    /// Closed, and how many commits wait at it.
    state: Arc<(Mutex<(bool, usize)>, Condvar)>,
}

impl Gate {
    fn new(db: Database) -> Self {
        Gate {
            db,
            state: Arc::new((Mutex::new((false, 0)), Condvar::new())),
        }
    }

    fn close(&self) {
        self.state.0.lock().unwrap().0 = true;
    }

    /// Blocks until a commit waits at the gate.
    fn await_commit(&self) {
        let (lock, cv) = &*self.state;
        let mut st = lock.lock().unwrap();
        while st.1 == 0 {
            st = cv.wait(st).unwrap();
        }
    }

    fn open(&self) {
        let (lock, cv) = &*self.state;
        lock.lock().unwrap().0 = false;
        cv.notify_all();
    }
}

impl Store for Gate {
    type Snapshot = Snapshot;
    type Watch = Watch;

    fn snapshot(&self) -> Snapshot {
        self.db.snapshot()
    }
    fn watch_raw(&self, keys: Vec<tuplekv_engine::KeyBytes>) -> Result<Watch, StoreError> {
        self.db.watch_raw(keys)
    }
    fn snapshot_versionstamp(snapshot: &Snapshot) -> Versionstamp {
        Database::snapshot_versionstamp(snapshot)
    }
    fn commit(&self, write: AtomicWrite) -> Result<CommitResult, StoreError> {
        let (lock, cv) = &*self.state;
        let mut st = lock.lock().unwrap();
        st.1 += 1;
        cv.notify_all();
        while st.0 {
            st = cv.wait(st).unwrap();
        }
        st.1 -= 1;
        drop(st);
        self.db.commit(write)
    }
}

/// Waits, yielding to the runtime, until `n` requests are queued on `h`.
async fn until_pending<S>(h: &tuplekv_sequence::GaplessSequence<S>, n: usize) {
    while h.pending() < n {
        tokio::task::yield_now().await;
    }
}

#[test]
fn gapless_async_requesters_do_not_hold_the_worker_of_a_current_thread_runtime() {
    let (db, _dir) = durable();
    let gate = Gate::new(db);
    let seqs = sequences(gate.clone(), "TKT", Mode::Gapless);
    let h = seqs.gapless("TKT").unwrap();
    gate.close();
    std::thread::scope(|s| {
        // A blocking requester leads the first batch, and its commit waits at the gate.
        let leader = s.spawn(|| h.next().unwrap().number());
        gate.await_commit();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut numbers = rt.block_on(async {
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let h = h.clone();
                    tokio::spawn(async move { h.next_async().await.unwrap().number() })
                })
                .collect();
            // All 64 queue up on the one worker: each waits without holding it. (A
            // requester that blocked the worker would stall here with one queued.)
            until_pending(&h, 64).await;
            gate.open();
            let mut numbers = Vec::new();
            for t in tasks {
                numbers.push(t.await.unwrap());
            }
            numbers
        });
        numbers.push(leader.join().unwrap());
        numbers.sort_unstable();
        assert_eq!(numbers, (1..=65).collect::<Vec<_>>());
    });
    // The first batch, then one batch of the 64 async requests.
    assert_eq!(h.stats().commits, 2);
}

#[test]
fn sixty_four_gapless_async_tasks_complete_on_a_current_thread_runtime_over_a_durable_store() {
    let (db, _dir) = durable();
    let seqs = sequences(db, "TKT", Mode::Gapless);
    let h = seqs.gapless("TKT").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut numbers = rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let h = h.clone();
                tokio::spawn(async move {
                    h.next_coded_async(|code, r| {
                        r.set(&key!["rec", code], b"async");
                    })
                    .await
                    .unwrap()
                    .number()
                })
            })
            .collect();
        let mut numbers = Vec::new();
        for t in tasks {
            numbers.push(t.await.unwrap());
        }
        numbers
    });
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=64).collect::<Vec<_>>());
    assert_gapless(&seqs, "TKT", 64, "000000");
}

#[test]
fn gapless_async_and_blocking_requesters_share_one_batch() {
    let gate = Gate::new(Database::in_memory());
    let seqs = sequences(gate.clone(), "TKT", Mode::Gapless);
    let h = seqs.gapless("TKT").unwrap();
    gate.close();
    let rt = runtime();
    std::thread::scope(|s| {
        let first = s.spawn(|| h.next().unwrap().number());
        gate.await_commit();
        // While the first batch commits: 10 async requests and 2 blocking ones queue up.
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let h = h.clone();
                rt.spawn(async move { h.next_async().await.unwrap().number() })
            })
            .collect();
        let blocking: Vec<_> = (0..2)
            .map(|_| s.spawn(|| h.next().unwrap().number()))
            .collect();
        while h.pending() < 12 {
            std::thread::yield_now();
        }
        gate.open();
        let mut numbers: Vec<u64> = rt.block_on(async {
            let mut numbers = Vec::new();
            for t in tasks {
                numbers.push(t.await.unwrap());
            }
            numbers
        });
        numbers.extend(blocking.into_iter().map(|t| t.join().unwrap()));
        numbers.push(first.join().unwrap());
        numbers.sort_unstable();
        assert_eq!(numbers, (1..=13).collect::<Vec<_>>());
    });
    let stats = h.stats();
    assert_eq!(stats.codes, 13);
    assert_eq!(
        stats.commits, 2,
        "the 12 queued requests went in one commit"
    );
}

#[test]
fn a_dropped_gapless_next_async_future_still_commits_its_number_and_leaves_no_gap() {
    let gate = Gate::new(Database::in_memory());
    let seqs = sequences(gate.clone(), "TKT", Mode::Gapless);
    let h = seqs.gapless("TKT").unwrap();
    gate.close();
    std::thread::scope(|s| {
        let first = s.spawn(|| {
            h.next_coded(|code, r| {
                r.set(&key!["rec", code], b"first");
            })
            .unwrap()
            .number()
        });
        gate.await_commit();
        {
            let mut dropped = Box::pin(h.next_coded_async(|code, r| {
                r.set(&key!["rec", code], b"dropped");
            }));
            // The first poll queues the request.
            assert!(
                dropped
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()))
                    .is_pending()
            );
            assert_eq!(h.pending(), 1);
        }
        gate.open();
        assert_eq!(first.join().unwrap(), 1);
    });
    // The dropped request went into the next batch; the one after it gets 3.
    let third = h
        .next_coded(|code, r| {
            r.set(&key!["rec", code], b"third");
        })
        .unwrap();
    assert_eq!(third.number(), 3);
    assert_gapless(&seqs, "TKT", 3, "000000");
}

#[test]
fn a_gapless_clone_is_the_same_handle() {
    let seqs = sequences(Database::in_memory(), "TKT", Mode::Gapless);
    let h = seqs.gapless("TKT").unwrap();
    let c = h.clone().with_numbering(Numbering::Checked);
    assert_eq!(
        h.numbering(),
        Numbering::Checked,
        "a clone shares its numbering"
    );
    assert_eq!(pollster::block_on(h.next_async()).unwrap().number(), 1);
    assert_eq!(c.next().unwrap().number(), 2);
    assert_eq!(h.stats(), c.stats());
    assert_eq!(c.stats().codes, 2);
}

/// A request of a batch whose commit was applied and its answer lost: the error carries the
/// code the request has in the committed record.
fn lost_answer_carries_the_committed_code(is_async: bool) {
    let store = Slow::new(Database::in_memory());
    let seqs = sequences(store.clone(), "TKT", Mode::Gapless);
    let h = seqs.gapless("TKT").unwrap();
    assert_eq!(h.next().unwrap().number(), 1);
    store.lose_answers(1);
    let build = |issued: &tuplekv_sequence::Issued<'_>, r: &mut tuplekv_sequence::Record| {
        r.set(&key!["rec", issued.code()], b"lost answer");
    };
    let err = if is_async {
        pollster::block_on(h.next_with_async(build)).unwrap_err()
    } else {
        h.next_with(build).unwrap_err()
    };
    let Error::OutcomeUnknown {
        number: Some(number),
        code: Some(code),
        ..
    } = err
    else {
        panic!("not an outcome-unknown with its code: {err:?}");
    };
    assert_eq!((number, code.as_str()), (2, "TKT000002"));
    // The code's record is there: the commit was applied.
    assert!(exists(&store, &record_key(&code)));
    assert!(exists(&store, &seqs.used_key("TKT", number).unwrap()));
    // Nothing was resent: the next request gets 3.
    assert_eq!(h.next().unwrap().number(), 3);
}

#[test]
fn a_gapless_outcome_unknown_carries_the_code_of_the_committed_record() {
    lost_answer_carries_the_committed_code(false);
}

#[test]
fn a_gapless_async_outcome_unknown_carries_the_code_of_the_committed_record() {
    lost_answer_carries_the_committed_code(true);
}

#[test]
fn a_store_numbered_gapless_outcome_unknown_says_its_number_is_not_known() {
    let store = Slow::new(Database::in_memory());
    let seqs = sequences(store.clone(), "TKT", Mode::Gapless);
    let h = seqs.gapless("TKT").unwrap();
    store.lose_answers(1);
    let err = pollster::block_on(h.next_async()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutcomeUnknown {
                number: None,
                code: None,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(exists(&store, &seqs.used_key("TKT", 1).unwrap()));
    assert_eq!(h.next().unwrap().number(), 2);
}
