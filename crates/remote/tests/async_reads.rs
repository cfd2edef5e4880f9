//! `RemoteStore`'s async reads against an in-process tuplekv server: they return what the
//! blocking reads return, and one snapshot reads one state whichever kind reads it, for a
//! store on its own runtime (its futures spawned there from the test's runtime) and for one
//! on the caller's runtime ([`RemoteStore::connect_async`], its futures run in place).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tuplekv_engine::codec::encode_key;
use tuplekv_engine::{
    Atomic, CommitResult, Database, Entry, Error, ListOptions, ReadView, Selector, Store, key,
};
use tuplekv_remote::{RemoteOptions, RemoteStore};
use tuplekv_testkit::server::{TOKEN, TestServer};

/// Where the store's work runs.
#[derive(Debug, Clone, Copy)]
enum Runtime {
    /// Its own runtime ([`RemoteStore::connect`]).
    Own,
    /// The test's runtime ([`RemoteStore::connect_async`]).
    Callers,
}

const RUNTIMES: [Runtime; 2] = [Runtime::Own, Runtime::Callers];

/// A 2-worker runtime for the test's tasks.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(server: &TestServer, on: Runtime) -> RemoteStore {
    match on {
        Runtime::Own => {
            let url = server.url();
            // Connecting blocks: off the test's workers.
            tokio::task::spawn_blocking(move || RemoteStore::connect(&url, TOKEN).unwrap())
                .await
                .unwrap()
        }
        Runtime::Callers => {
            RemoteStore::connect_async(&server.url(), TOKEN, RemoteOptions::default())
                .await
                .unwrap()
        }
    }
}

/// Runs `test` for each runtime on a fresh server, the store dropped before the server.
fn each_runtime<F, Fut>(test: F)
where
    F: Fn(Arc<Database>, RemoteStore) -> Fut,
    Fut: Future<Output = ()>,
{
    for on in RUNTIMES {
        let db = Arc::new(Database::in_memory());
        let server = TestServer::start(Arc::clone(&db));
        let rt = runtime();
        rt.block_on(async {
            let store = connect(&server, on).await;
            test(db, store).await;
        });
        drop(rt);
        drop(server);
    }
}

/// Runs the blocking `f` on a blocking thread of the test's runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// Commits what `atomic` built, async.
fn commit(
    store: &RemoteStore,
    atomic: Atomic<'_, RemoteStore>,
) -> impl Future<Output = Result<CommitResult, Error>> + Send + 'static {
    store.commit_async(atomic.as_write().clone())
}

fn committed(result: CommitResult) -> tuplekv_engine::Versionstamp {
    match result {
        CommitResult::Committed { versionstamp, .. } => versionstamp,
        other => panic!("{other:?}"),
    }
}

#[test]
fn async_get_and_get_latest_return_what_blocking_reads_return() {
    each_runtime(|_db, store| async move {
        let stamp = committed(
            commit(&store, store.atomic().set(&key!["a"], 7u64))
                .await
                .unwrap(),
        );
        let k = encode_key(&key!["a"]);
        let snapshot = store.snapshot();
        let async_entry = RemoteStore::get_raw_async(&snapshot, &k).await.unwrap();
        let blocking_entry = blocking({
            let (snapshot, k) = (snapshot.clone(), k.clone());
            move || snapshot.get_raw(&k).unwrap()
        })
        .await;
        assert_eq!(async_entry, blocking_entry);
        let entry = async_entry.unwrap();
        assert_eq!(entry.value.as_u64(), Some(7));
        assert_eq!(entry.versionstamp, stamp);

        let latest = store.get_latest_raw_async(&k).await.unwrap();
        let latest_blocking = blocking({
            let (store, k) = (store.clone(), k.clone());
            move || store.get_latest_raw(&k).unwrap()
        })
        .await;
        assert_eq!(latest, latest_blocking);
        assert_eq!(latest, Some(entry.clone()));
        assert_eq!(store.get_async(&key!["a"]).await.unwrap(), Some(entry));

        // Absent keys, and a key over the read limit, answer as the blocking reads do.
        let absent = encode_key(&key!["absent"]);
        assert_eq!(store.get_latest_raw_async(&absent).await.unwrap(), None);
        let long = vec![1u8; tuplekv_engine::limits::KEY_SIZE_MAX_READ + 1];
        let async_err = store.get_latest_raw_async(&long).await.unwrap_err();
        let blocking_err = blocking({
            let store = store.clone();
            move || store.get_latest_raw(&long).unwrap_err()
        })
        .await;
        assert_eq!(async_err.to_string(), blocking_err.to_string());
    });
}

#[test]
fn async_scans_return_the_batches_blocking_scans_return() {
    each_runtime(|_db, store| async move {
        // More entries than one batch of the wire (LIST_BATCH_SIZE_MAX), in two commits.
        let n = tuplekv_engine::limits::LIST_BATCH_SIZE_MAX as u64 + 200;
        for chunk in (0..n).collect::<Vec<_>>().chunks(600) {
            let mut atomic = store.atomic();
            for &i in chunk {
                atomic = atomic.set(&key!["n", i], i);
            }
            let _ = commit(&store, atomic).await.unwrap();
        }
        let range = Selector::prefix(&key!["n"]).byte_range().unwrap();
        let snapshot = store.snapshot();
        for (reverse, limit) in [
            (false, usize::MAX),
            (true, usize::MAX),
            (false, 5),
            (true, 1001),
        ] {
            let async_batch = RemoteStore::scan_async(&snapshot, &range, reverse, limit)
                .await
                .unwrap();
            let blocking_batch = blocking({
                let (snapshot, range) = (snapshot.clone(), range.clone());
                move || snapshot.scan(&range, reverse, limit).unwrap()
            })
            .await;
            assert_eq!(
                async_batch, blocking_batch,
                "reverse {reverse}, limit {limit}"
            );
            assert_eq!(async_batch.len() as u64, n.min(limit as u64));
            let first = if reverse { n - 1 } else { 0 };
            assert_eq!(async_batch[0].value.as_u64(), Some(first));
        }
        // list_async pages as the blocking list does.
        let options = ListOptions {
            limit: Some(10),
            batch_size: Some(3),
            ..ListOptions::default()
        };
        let selector = Selector::prefix(&key!["n"]);
        let page = store.list_async(&selector, options.clone()).await.unwrap();
        let listed: Vec<Entry> = blocking({
            let store = store.clone();
            move || store.list(&selector, options).unwrap().read_all().unwrap()
        })
        .await;
        assert_eq!(page.entries, listed);
    });
}

#[test]
fn a_snapshots_versionstamp_is_the_same_async_and_blocking() {
    each_runtime(|_db, store| async move {
        let stamp = committed(
            commit(&store, store.atomic().set(&key!["v"], 1u64))
                .await
                .unwrap(),
        );
        // Asked first, async: it fixes the snapshot's state with a read of its own.
        let snapshot = store.snapshot();
        let async_stamp = RemoteStore::snapshot_versionstamp_async(&snapshot)
            .await
            .unwrap();
        assert_eq!(async_stamp, stamp);
        assert_eq!(snapshot.versionstamp(), Some(stamp));
        let blocking_stamp = blocking({
            let snapshot = snapshot.clone();
            move || RemoteStore::try_snapshot_versionstamp(&snapshot).unwrap()
        })
        .await;
        assert_eq!(blocking_stamp, stamp);

        // Asked first, blocking: the async answer is the same.
        let later = committed(
            commit(&store, store.atomic().set(&key!["v"], 2u64))
                .await
                .unwrap(),
        );
        let snapshot = store.snapshot();
        let blocking_stamp = blocking({
            let snapshot = snapshot.clone();
            move || RemoteStore::try_snapshot_versionstamp(&snapshot).unwrap()
        })
        .await;
        assert_eq!(blocking_stamp, later);
        let async_stamp = RemoteStore::snapshot_versionstamp_async(&snapshot)
            .await
            .unwrap();
        assert_eq!(async_stamp, later);
    });
}

#[test]
fn one_snapshot_reads_one_state_across_async_and_blocking_reads_while_writes_happen() {
    each_runtime(|_db, store| async move {
        for i in 0..10u64 {
            let _ = commit(&store, store.atomic().set(&key!["s", i], i))
                .await
                .unwrap();
        }
        let range = Selector::prefix(&key!["s"]).byte_range().unwrap();
        let k = encode_key(&key!["s", 0u64]);
        let snapshot = store.snapshot();
        // The first read (async) fixes the state.
        let first = RemoteStore::get_raw_async(&snapshot, &k).await.unwrap();
        let listed = RemoteStore::scan_async(&snapshot, &range, false, usize::MAX)
            .await
            .unwrap();
        let stamp = snapshot.versionstamp().unwrap();
        for round in 0..5u64 {
            // Writes in between, async and blocking.
            let _ = commit(
                &store,
                store
                    .atomic()
                    .set(&key!["s", 0u64], 100 + round)
                    .set(&key!["s", 100 + round], round),
            )
            .await
            .unwrap();
            let _ = blocking({
                let store = store.clone();
                move || {
                    store
                        .atomic()
                        .delete(&key!["s", round + 1])
                        .commit()
                        .unwrap()
                }
            })
            .await;
            assert_eq!(
                RemoteStore::get_raw_async(&snapshot, &k).await.unwrap(),
                first
            );
            let (blocking_get, blocking_scan) = blocking({
                let (snapshot, k, range) = (snapshot.clone(), k.clone(), range.clone());
                move || {
                    (
                        snapshot.get_raw(&k).unwrap(),
                        snapshot.scan(&range, false, usize::MAX).unwrap(),
                    )
                }
            })
            .await;
            assert_eq!(blocking_get, first);
            assert_eq!(blocking_scan, listed);
            assert_eq!(
                RemoteStore::scan_async(&snapshot, &range, false, usize::MAX)
                    .await
                    .unwrap(),
                listed
            );
            assert_eq!(
                RemoteStore::snapshot_versionstamp_async(&snapshot)
                    .await
                    .unwrap(),
                stamp
            );
        }
        // A fresh snapshot sees the writes.
        let fresh = store.snapshot();
        let now = RemoteStore::get_raw_async(&fresh, &k)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(now.value.as_u64(), Some(104));
    });
}

#[test]
fn concurrent_first_reads_of_one_snapshot_async_and_blocking_agree_on_one_state() {
    each_runtime(|_db, store| async move {
        let _ = commit(&store, store.atomic().set(&key!["c"], 0u64))
            .await
            .unwrap();
        let k = encode_key(&key!["c"]);
        for _ in 0..5 {
            let snapshot = store.snapshot();
            // A writer moves the key on while the first reads are in flight.
            let writer = tokio::spawn({
                let store = store.clone();
                async move {
                    for i in 1..=20u64 {
                        let _ = commit(&store, store.atomic().set(&key!["c"], i))
                            .await
                            .unwrap();
                    }
                }
            });
            let mut reads = Vec::new();
            for i in 0..16 {
                let (snapshot, k) = (snapshot.clone(), k.clone());
                reads.push(if i % 2 == 0 {
                    tokio::spawn(async move { RemoteStore::get_raw_async(&snapshot, &k).await })
                } else {
                    tokio::task::spawn_blocking(move || snapshot.get_raw(&k))
                });
            }
            let mut seen = Vec::new();
            for read in reads {
                seen.push(read.await.unwrap().unwrap().unwrap());
            }
            writer.await.unwrap();
            assert!(seen.iter().all(|e| *e == seen[0]), "{seen:?}");
            assert_eq!(snapshot.versionstamp(), Some(seen[0].versionstamp));
        }
    });
}
