//! A `RemoteStore` on the caller's runtime ([`RemoteStore::connect_async`]): async
//! transactions under concurrency, a current-thread runtime whose only thread never blocks,
//! what blocking calls do from each kind of thread, faults, and the tasks it leaves behind.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tuplekv_engine::{Database, Error, KeyBytes, ReadView, Store, TransactionOptions, key, replay};
use tuplekv_remote::{ConnectError, RemoteOptions, RemoteStore};
use tuplekv_testkit::server::{TOKEN, TestServer};

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn multi_thread(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(server: &TestServer) -> RemoteStore {
    RemoteStore::connect_async(&server.url(), TOKEN, RemoteOptions::default())
        .await
        .unwrap()
}

/// Enough attempts that no increment gives up under the tests' contention (each attempt
/// takes a few replay rounds, within `REPLAY_ROUNDS_MAX`).
fn patient() -> TransactionOptions {
    TransactionOptions {
        max_attempts: 200,
        ..TransactionOptions::default()
    }
}

/// Adds one to `["counter"]` in an async transaction; what it read.
async fn increment(store: &RemoteStore) -> u64 {
    store
        .transaction_with_async(patient(), |tx| {
            let n = tx
                .get(&key!["counter"])?
                .and_then(|e| e.value.as_u64())
                .unwrap_or(0);
            tx.set(&key!["counter"], n + 1);
            Ok::<_, Error>(n)
        })
        .await
        .unwrap()
}

fn counter(db: &Database) -> Option<u64> {
    db.get(&key!["counter"])
        .unwrap()
        .and_then(|e| e.value.as_u64())
}

#[test]
fn transactions_async_from_32_tasks_on_a_2_worker_runtime_lose_no_increment() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    let rt = multi_thread(2);
    let seen = rt.block_on(async {
        let store = connect(&server).await;
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    if i % 2 == 0 {
                        increment(&store).await
                    } else {
                        // The same increment, run by `replay::run` directly.
                        replay::run(&store, |store| {
                            store.transaction_with(&patient(), |tx| {
                                let n = tx
                                    .get(&key!["counter"])?
                                    .and_then(|e| e.value.as_u64())
                                    .unwrap_or(0);
                                tx.set(&key!["counter"], n + 1);
                                Ok::<_, Error>(n)
                            })
                        })
                        .await
                        .unwrap()
                    }
                })
            })
            .collect();
        let mut seen = Vec::new();
        for task in tasks {
            seen.push(task.await.unwrap());
        }
        seen
    });
    drop(rt);
    assert_eq!(counter(&db), Some(32));
    // Each committed increment read a different value: 0..32, once each.
    let mut seen = seen;
    seen.sort_unstable();
    assert_eq!(seen, (0..32).collect::<Vec<u64>>());
    drop(server);
}

#[test]
fn a_current_thread_runtime_runs_64_concurrent_async_reads_and_transactions() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    db.set(&key!["greeting"], 7u64).unwrap();
    let rt = current_thread();
    rt.block_on(async {
        let store = connect(&server).await;
        // Every task is started before any is awaited: if any of them blocked the runtime's
        // only thread while waiting on the server, none could finish.
        let barrier = Arc::new(tokio::sync::Barrier::new(64));
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let (store, barrier) = (store.clone(), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    if i % 2 == 0 {
                        let entry = store.get_async(&key!["greeting"]).await.unwrap();
                        assert_eq!(entry.and_then(|e| e.value.as_u64()), Some(7));
                        let snapshot = store.snapshot();
                        let k = tuplekv_engine::codec::encode_key(&key!["greeting"]);
                        let again = RemoteStore::get_raw_async(&snapshot, &k).await.unwrap();
                        assert_eq!(again.and_then(|e| e.value.as_u64()), Some(7));
                    } else {
                        let _ = increment(&store).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    drop(rt);
    assert_eq!(counter(&db), Some(32));
    drop(server);
}

#[test]
fn an_async_read_with_the_server_stopped_fails_unavailable_while_other_tasks_run() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    let rt = current_thread();
    rt.block_on(async {
        let options = RemoteOptions {
            retry_for: Duration::from_millis(200),
            ..RemoteOptions::default()
        };
        let store = RemoteStore::connect_async(&server.url(), TOKEN, options)
            .await
            .unwrap();
        assert_eq!(store.get_async(&key!["k"]).await.unwrap(), None);
        // Stopped from a blocking thread, so this runtime goes on answering the server's
        // goodbye on the connection meanwhile.
        tokio::task::spawn_blocking(move || drop(server))
            .await
            .unwrap();

        let ticks = Arc::new(AtomicU64::new(0));
        let ticker = tokio::spawn({
            let ticks = Arc::clone(&ticks);
            async move {
                loop {
                    ticks.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        });
        // Let the ticker start, then note where it stands.
        tokio::task::yield_now().await;
        let before = ticks.load(Ordering::Relaxed);
        let err = store.get_async(&key!["k"]).await.unwrap_err();
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
        let after = ticks.load(Ordering::Relaxed);
        // The runtime's only thread ran the ticker while the read retried.
        assert!(after > before, "{before} → {after}");
        // So did an async transaction's failure (it runs again after a transient one).
        let twice = TransactionOptions {
            max_attempts: 2,
            ..TransactionOptions::default()
        };
        let err = store
            .transaction_with_async(twice, |tx| {
                let _ = tx.get(&key!["k"])?;
                Ok::<_, Error>(())
            })
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
        assert!(ticks.load(Ordering::Relaxed) > after);
        ticker.abort();
    });
}

#[test]
fn blocking_calls_on_the_thread_of_a_current_thread_runtime_fail_instead_of_deadlocking() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    db.set(&key!["k"], 1u64).unwrap();
    let rt = current_thread();
    rt.block_on(async {
        let store = connect(&server).await;
        // In the runtime's own future, and in one of its tasks.
        let err = store.snapshot().get(&key!["k"]).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
        assert!(err.to_string().contains("spawn_blocking"), "{err}");
        let task = tokio::spawn({
            let store = store.clone();
            async move {
                let commit = store.atomic().set(&key!["k"], 2u64).commit();
                assert!(
                    matches!(commit, Err(Error::Unsupported { .. })),
                    "{commit:?}"
                );
                let read = store.get_latest_raw(&tuplekv_engine::codec::encode_key(&key!["k"]));
                assert!(matches!(read, Err(Error::Unsupported { .. })), "{read:?}");
            }
        });
        task.await.unwrap();
        // Nothing was written, and the async methods still work.
        let entry = store.get_async(&key!["k"]).await.unwrap().unwrap();
        assert_eq!(entry.value.as_u64(), Some(1));
    });
    drop(rt);
    drop(server);
}

#[test]
fn blocking_calls_from_a_blocking_thread_of_a_current_thread_runtime_work() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    let rt = current_thread();
    rt.block_on(async {
        let store = connect(&server).await;
        let got = tokio::task::spawn_blocking({
            let store = store.clone();
            move || {
                let _ = store.atomic().set(&key!["k"], 5u64).commit().unwrap();
                let n = store
                    .transaction(|tx| {
                        let n = tx.get(&key!["k"])?.and_then(|e| e.value.as_u64()).unwrap();
                        tx.set(&key!["k"], n + 1);
                        Ok::<_, Error>(n + 1)
                    })
                    .unwrap();
                (n, store.snapshot().get(&key!["k"]).unwrap())
            }
        })
        .await
        .unwrap();
        assert_eq!(got.0, 6);
        assert_eq!(got.1.and_then(|e| e.value.as_u64()), Some(6));
    });
    drop(rt);
    drop(server);
}

#[test]
fn blocking_calls_on_a_multi_thread_runtimes_worker_wait_in_place() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    // One worker: a call that held it while waiting would leave no thread to run the
    // request, unless it hands the worker on (`block_in_place`).
    let rt = multi_thread(1);
    let n = rt.block_on(async {
        let store = connect(&server).await;
        tokio::spawn(async move {
            let _ = store.atomic().set(&key!["k"], 1u64).commit().unwrap();
            let n = store
                .transaction(|tx| {
                    let n = tx.get(&key!["k"])?.and_then(|e| e.value.as_u64()).unwrap();
                    tx.set(&key!["k"], n + 1);
                    Ok::<_, Error>(n + 1)
                })
                .unwrap();
            assert_eq!(
                store
                    .snapshot()
                    .get(&key!["k"])
                    .unwrap()
                    .unwrap()
                    .value
                    .as_u64(),
                Some(n)
            );
            n
        })
        .await
        .unwrap()
    });
    assert_eq!(n, 2);
    drop(rt);
    drop(server);
}

#[test]
fn blocking_calls_from_a_thread_outside_the_runtime_wait_on_it() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    for rt in [current_thread(), multi_thread(2)] {
        let store = rt.block_on(connect(&server));
        // The runtime keeps running (here: its thread waits on the other thread's answer).
        let other = std::thread::spawn({
            let store = store.clone();
            move || {
                let _ = store.atomic().sum(&key!["k"], 1).commit().unwrap();
                store.snapshot().get(&key!["k"]).unwrap()
            }
        });
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = tx.send(other.join());
        });
        let entry = rt.block_on(rx).unwrap().unwrap();
        assert!(entry.is_some());
        drop(store);
        drop(rt);
    }
    assert_eq!(
        db.get(&key!["k"]).unwrap().and_then(|e| e.value.as_u64()),
        Some(2)
    );
    drop(server);
}

#[test]
fn dropping_the_last_handle_stops_the_tasks_on_the_callers_runtime() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    let rt = current_thread();
    rt.block_on(async {
        let metrics = tokio::runtime::Handle::current().metrics();
        let before = metrics.num_alive_tasks();
        let store = connect(&server).await;
        let _ = store.get_async(&key!["k"]).await.unwrap();
        let k = tuplekv_engine::codec::encode_key(&key!["k"]);
        let watch = store.watch_raw(vec![KeyBytes::from(k.as_slice())]).unwrap();
        // The connection (and the watch) run as tasks of this runtime.
        assert!(metrics.num_alive_tasks() > before);
        drop(watch);
        drop(store);
        // Aborted tasks end when the runtime next runs them.
        let mut turns = 0u32;
        while metrics.num_alive_tasks() > before {
            turns += 1;
            assert!(turns < 10_000, "{} tasks left", metrics.num_alive_tasks());
            tokio::task::yield_now().await;
        }
    });
    drop(rt);
    drop(server);
}

#[test]
fn connect_async_outside_a_runtime_says_so() {
    let future = RemoteStore::connect_async("http://127.0.0.1:1", TOKEN, RemoteOptions::default());
    // Polled by a minimal executor of the test's own, on no tokio runtime.
    let err = block_on_plain(future).unwrap_err();
    assert!(matches!(err, ConnectError::NoRuntime), "{err:?}");
}

/// Polls `future` to its end on this thread, outside any tokio runtime.
fn block_on_plain<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}
