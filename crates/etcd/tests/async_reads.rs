//! `EtcdStore`'s async reads on a one-member etcd cluster on loopback ports (started once
//! for this binary, killed when it ends): they answer what the blocking reads answer, one
//! snapshot reads one revision across both kinds, async transactions lose no increment, a
//! current-thread runtime's only thread is never blocked, and a stopped cluster fails a read
//! while other tasks run.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tuplekv_engine::codec::encode_key;
use tuplekv_engine::{Error, ReadView, Selector, Store, TransactionOptions, key};
use tuplekv_etcd::EtcdStore;
use tuplekv_testkit::etcd::Cluster;

fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start(1))
}

/// A store under a prefix of its own on `cluster`.
fn open(cluster: &Cluster) -> EtcdStore {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let prefix = format!("async/{}/{n}/", std::process::id());
    EtcdStore::connect(&cluster.client_urls(), prefix.as_bytes()).unwrap()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Enough attempts that no increment gives up under the tests' contention.
fn patient() -> TransactionOptions {
    TransactionOptions {
        max_attempts: 200,
        ..TransactionOptions::default()
    }
}

async fn increment(store: &EtcdStore) -> u64 {
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

#[test]
fn async_reads_return_what_blocking_reads_return_and_one_snapshot_reads_one_revision() {
    let store = open(cluster());
    for i in 0..30u64 {
        let _ = store.atomic().set(&key!["n", i], i).commit().unwrap();
    }
    // Tombstones inside the range, which a scan pages past.
    for i in 5..15u64 {
        let _ = store.atomic().delete(&key!["n", i]).commit().unwrap();
    }
    let rt = current_thread();
    rt.block_on(async {
        let k = encode_key(&key!["n", 3u64]);
        let range = Selector::prefix(&key!["n"]).byte_range().unwrap();
        let snapshot = store.snapshot();
        // The first read (async) fixes the revision.
        let stamp = EtcdStore::snapshot_versionstamp_async(&snapshot)
            .await
            .unwrap();
        let entry = EtcdStore::get_raw_async(&snapshot, &k).await.unwrap();
        assert_eq!(entry.as_ref().and_then(|e| e.value.as_u64()), Some(3));
        let listed = EtcdStore::scan_async(&snapshot, &range, false, usize::MAX)
            .await
            .unwrap();
        assert_eq!(listed.len(), 20);
        let reversed = EtcdStore::scan_async(&snapshot, &range, true, 7)
            .await
            .unwrap();
        assert_eq!(reversed.first().and_then(|e| e.value.as_u64()), Some(29));
        assert_eq!(
            store.get_latest_raw_async(&k).await.unwrap(),
            entry,
            "the latest state is the snapshot's so far"
        );

        for round in 0..3u64 {
            // Writes in between, async and blocking.
            let write = store
                .atomic()
                .set(&key!["n", 3u64], 100 + round)
                .as_write()
                .clone();
            let _ = store.commit_async(write).await.unwrap();
            let _ = tokio::task::spawn_blocking({
                let store = store.clone();
                move || {
                    store
                        .atomic()
                        .delete(&key!["n", 20 + round])
                        .commit()
                        .unwrap()
                }
            })
            .await
            .unwrap();

            let (blocking_get, blocking_scan, blocking_reversed, blocking_stamp) =
                tokio::task::spawn_blocking({
                    let (snapshot, k, range) = (snapshot.clone(), k.clone(), range.clone());
                    move || {
                        (
                            snapshot.get_raw(&k).unwrap(),
                            snapshot.scan(&range, false, usize::MAX).unwrap(),
                            snapshot.scan(&range, true, 7).unwrap(),
                            EtcdStore::try_snapshot_versionstamp(&snapshot).unwrap(),
                        )
                    }
                })
                .await
                .unwrap();
            assert_eq!(blocking_get, entry);
            assert_eq!(blocking_scan, listed);
            assert_eq!(blocking_reversed, reversed);
            assert_eq!(blocking_stamp, stamp);
            assert_eq!(
                EtcdStore::get_raw_async(&snapshot, &k).await.unwrap(),
                entry
            );
            assert_eq!(
                EtcdStore::scan_async(&snapshot, &range, false, usize::MAX)
                    .await
                    .unwrap(),
                listed
            );
            assert_eq!(
                EtcdStore::snapshot_versionstamp_async(&snapshot)
                    .await
                    .unwrap(),
                stamp
            );
        }
        // The latest state moved on, async as blocking.
        let latest = store.get_latest_raw_async(&k).await.unwrap();
        assert_eq!(latest.as_ref().and_then(|e| e.value.as_u64()), Some(102));
        let blocking_latest = tokio::task::spawn_blocking({
            let (store, k) = (store.clone(), k.clone());
            move || store.get_latest_raw(&k).unwrap()
        })
        .await
        .unwrap();
        assert_eq!(latest, blocking_latest);
    });
}

#[test]
fn transactions_async_from_32_tasks_on_a_2_worker_runtime_lose_no_increment() {
    let store = open(cluster());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut seen = rt.block_on(async {
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { increment(&store).await })
            })
            .collect();
        let mut seen = Vec::new();
        for task in tasks {
            seen.push(task.await.unwrap());
        }
        seen
    });
    seen.sort_unstable();
    assert_eq!(seen, (0..32).collect::<Vec<u64>>());
    let total = store.snapshot().get(&key!["counter"]).unwrap();
    assert_eq!(total.and_then(|e| e.value.as_u64()), Some(32));
}

#[test]
fn a_current_thread_runtime_runs_64_concurrent_async_reads_and_transactions() {
    let store = open(cluster());
    let _ = store
        .atomic()
        .set(&key!["greeting"], 7u64)
        .commit()
        .unwrap();
    let rt = current_thread();
    rt.block_on(async {
        // All started before any is awaited: one that blocked the runtime's only thread
        // would hold up the rest.
        let barrier = Arc::new(tokio::sync::Barrier::new(64));
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let (store, barrier) = (store.clone(), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    if i % 2 == 0 {
                        let entry = store.get_async(&key!["greeting"]).await.unwrap();
                        assert_eq!(entry.and_then(|e| e.value.as_u64()), Some(7));
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
    let total = store.snapshot().get(&key!["counter"]).unwrap();
    assert_eq!(total.and_then(|e| e.value.as_u64()), Some(32));
}

#[test]
fn an_async_read_with_the_cluster_stopped_fails_unavailable_while_other_tasks_run() {
    // A cluster of this test's own, stopped by it.
    let cluster = Cluster::start(1);
    let store = open(&cluster);
    cluster.kill(0);
    let rt = current_thread();
    rt.block_on(async {
        let ticks = Arc::new(AtomicU64::new(0));
        let ticker = tokio::spawn({
            let ticks = Arc::clone(&ticks);
            async move {
                loop {
                    ticks.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
        });
        tokio::task::yield_now().await;
        let before = ticks.load(Ordering::Relaxed);
        // Retried within READ_RETRY_BUDGET, then given up.
        let err = store.get_async(&key!["k"]).await.unwrap_err();
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
        let after = ticks.load(Ordering::Relaxed);
        assert!(after > before, "{before} → {after}");
        ticker.abort();
    });
    drop(store);
    drop(cluster);
}
