//! Async operations run in rounds (`tuplekv_engine::replay`): over a store whose every read
//! and commit is answered only after the caller's task was suspended once, they return what
//! the blocking operation returns, make each commit once, and stop at their limits.

use std::sync::atomic::{AtomicUsize, Ordering};

use tuplekv_engine::limits::REPLAY_ROUNDS_MAX;
use tuplekv_engine::replay::{self, Replay};
use tuplekv_engine::{
    Database, Entry, Error, ListCursor, ListOptions, ReadView, Selector, Store, TransactionOptions,
    key,
};
use tuplekv_testkit::contract::backends::Waiting;

/// An in-memory database whose async reads and commits each wait once.
type Slow = Waiting;

fn slow() -> Slow {
    Waiting::new(Database::in_memory())
}

fn counter(store: &Slow) -> u64 {
    store
        .database()
        .get(&key!["n"])
        .expect("read")
        .and_then(|e| e.value.as_u64())
        .unwrap_or(0)
}

fn increment<S: Store>(tx: &mut tuplekv_engine::Transaction<'_, S>) -> Result<u64, Error> {
    let n = tx
        .get(&key!["n"])?
        .and_then(|e| e.value.as_u64())
        .unwrap_or(0);
    tx.set(&key!["n"], n + 1);
    Ok(n + 1)
}

#[test]
fn an_async_transaction_over_a_waiting_store_reads_commits_once_and_returns_its_value() {
    let store = slow();
    store.database().set(&key!["n"], 41u64).expect("seed");
    let out = pollster::block_on(store.transaction_async(increment));
    assert_eq!(out, Ok(42));
    assert_eq!(counter(&store), 42);
    assert_eq!(store.commits(), 1, "one commit, made in one round");
}

#[test]
fn async_transactions_from_many_threads_serialize_like_blocking_ones() {
    let store = slow();
    let threads = 4;
    let each = 50;
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..each {
                    let options = TransactionOptions {
                        max_attempts: 16,
                        ..TransactionOptions::default()
                    };
                    pollster::block_on(store.transaction_with_async(options, increment))
                        .expect("commits within 16 attempts");
                }
            });
        }
    });
    assert_eq!(
        counter(&store),
        (threads * each) as u64,
        "no increment lost"
    );
}

#[test]
fn get_async_and_list_async_return_what_the_blocking_reads_return() {
    let store = slow();
    for i in 0..7u64 {
        store.database().set(&key!["k", i], i).expect("seed");
    }
    let got = pollster::block_on(store.get_async(&key!["k", 3u64])).expect("read");
    assert_eq!(got, store.database().get(&key!["k", 3u64]).expect("read"));
    let missing = pollster::block_on(store.get_async(&key!["nope"])).expect("read");
    assert_eq!(missing, None);

    let selector = Selector::prefix(&key!["k"]);
    let options = ListOptions {
        limit: Some(5),
        batch_size: Some(2),
        ..ListOptions::default()
    };
    let page = pollster::block_on(store.list_async(&selector, options.clone())).expect("list");
    let blocking: Vec<Entry> = store
        .database()
        .list(&selector, options)
        .expect("list")
        .collect::<Result<_, _>>()
        .expect("list");
    assert_eq!(page.entries, blocking, "three batches of one snapshot");
    let ListCursor::After(cursor) = page.cursor else {
        panic!("stopped at the limit: {:?}", page.cursor)
    };
    let rest = ListOptions {
        cursor: Some(cursor),
        ..ListOptions::default()
    };
    let rest = pollster::block_on(store.list_async(&selector, rest)).expect("list");
    assert_eq!(rest.entries.len(), 2);
    assert_eq!(rest.cursor, ListCursor::Exhausted);

    let keys = [key!["k", 1u64], key!["none"], key!["k", 6u64]];
    let many = pollster::block_on(store.get_many_async(&keys)).expect("get_many");
    assert_eq!(many, store.database().get_many(&keys).expect("get_many"));
}

#[test]
fn an_oversized_key_is_refused_by_get_async_without_a_read() {
    let store = slow();
    let big = key![vec![0u8; 3000]];
    let err = pollster::block_on(store.get_async(&big)).expect_err("too large");
    assert!(matches!(err, Error::KeyTooLargeForRead { .. }), "{err:?}");
}

#[test]
fn a_conflicting_async_transaction_backs_off_and_runs_again() {
    let store = slow();
    let interfered = AtomicUsize::new(0);
    let out = pollster::block_on(store.transaction_async(|tx| {
        let n = increment(tx)?;
        // The first attempt's read is made stale behind its back: its commit conflicts.
        if interfered.fetch_add(1, Ordering::SeqCst) == 0 {
            store.database().set(&key!["n"], 100u64).expect("interfere");
        }
        Ok::<_, Error>(n)
    }));
    assert_eq!(
        out,
        Ok(101),
        "the second attempt read the interfering write"
    );
    assert_eq!(counter(&store), 101);
}

#[test]
fn an_operation_that_reads_at_the_round_limit_succeeds_and_one_past_it_is_refused() {
    let store = slow();
    // Each read is a round of its own; the last round answers nothing new.
    let reads = |n: usize| {
        move |s: &Replay<'_, Slow>| -> Result<usize, Error> {
            let snapshot = s.snapshot();
            for i in 0..n {
                snapshot.get(&key!["r", i as u64])?;
            }
            Ok(n)
        }
    };
    let at = pollster::block_on(replay::run(&store, reads(REPLAY_ROUNDS_MAX - 1)));
    assert_eq!(at, Ok(REPLAY_ROUNDS_MAX - 1));
    let past = pollster::block_on(replay::run(&store, reads(REPLAY_ROUNDS_MAX)));
    assert_eq!(
        past,
        Err(Error::TooManyRounds {
            rounds: REPLAY_ROUNDS_MAX
        })
    );
}

#[test]
fn a_round_that_skips_a_recorded_read_before_any_commit_goes_on_with_fresh_calls() {
    let store = slow();
    store.database().set(&key!["a"], 1u64).expect("seed");
    let rounds = AtomicUsize::new(0);
    let out = pollster::block_on(replay::run(&store, |s| -> Result<u64, Error> {
        // A process-wide cache would do this: the first round reads `a`, later ones do not.
        let first = rounds.fetch_add(1, Ordering::SeqCst) == 0;
        if first {
            s.get_latest_raw(&tuplekv_engine::codec::encode_key(&key!["a"]))?;
        }
        let mut tx_write = s.atomic();
        tx_write = tx_write.set(&key!["b"], 2u64);
        let _ = tx_write.commit()?;
        Ok(2)
    }));
    assert_eq!(out, Ok(2));
    assert_eq!(
        store
            .database()
            .get(&key!["b"])
            .expect("read")
            .map(|e| e.value.as_u64()),
        Some(Some(2))
    );
    assert_eq!(store.commits(), 1);
}

#[test]
fn a_round_whose_calls_change_after_a_commit_fails_instead_of_reusing_its_answer() {
    let store = slow();
    let rounds = AtomicUsize::new(0);
    let out = pollster::block_on(replay::run(&store, |s| -> Result<(), Error> {
        let round = rounds.fetch_add(1, Ordering::SeqCst);
        // Not a function of what it read: each round writes something else.
        let _ = s.atomic().set(&key!["k"], round as u64).commit()?;
        s.get_latest_raw(&tuplekv_engine::codec::encode_key(&key!["k"]))?;
        Ok(())
    }));
    assert!(matches!(out, Err(Error::Unsupported { .. })), "{out:?}");
    assert_eq!(store.commits(), 1, "never made twice");
}

#[test]
fn over_the_in_memory_database_an_async_operation_takes_one_round() {
    let db = Database::in_memory();
    let rounds = AtomicUsize::new(0);
    let out = pollster::block_on(replay::run(&db, |s| {
        rounds.fetch_add(1, Ordering::SeqCst);
        s.transaction(increment)
    }));
    assert_eq!(out, Ok(1));
    assert_eq!(
        rounds.load(Ordering::SeqCst),
        1,
        "every call answered inline"
    );
}

#[test]
fn async_operations_are_send_so_a_multi_threaded_runtime_can_spawn_them() {
    fn assert_send<T: Send>(_: &T) {}
    let store = slow();
    let selector = Selector::prefix(&key!["k"]);
    let keys = [key!["k"]];
    assert_send(&store.transaction_async(increment));
    assert_send(&store.get_async(&key!["k"]));
    assert_send(&store.list_async(&selector, ListOptions::default()));
    assert_send(&store.get_many_async(&keys));
    assert_send(&replay::run(&store, |s| s.get_many(&keys)));
}
