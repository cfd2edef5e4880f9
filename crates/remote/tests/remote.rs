//! `RemoteStore` against an in-process tuplekv server: the extension's operations, the plain
//! ones, and what each error says.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use tuplekv_engine::{
    CommitResult, Database, Error, KeyWatch, ListOptions, ReadView, Selector, Store,
    TransactionOptions, key,
};
use tuplekv_remote::{ConnectError, RemoteOptions, RemoteStore};
use tuplekv_testkit::server::{TOKEN, TestServer};

fn served() -> (Arc<Database>, TestServer, RemoteStore) {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    let store = RemoteStore::connect(&server.url(), TOKEN).unwrap();
    (db, server, store)
}

#[test]
fn a_tuplekv_server_agrees_on_the_extension() {
    let (_db, server, store) = served();
    assert!(store.has_extension().unwrap());
    // Debug names the server, never the token.
    let debug = format!("{store:?}");
    assert!(debug.contains(&server.addr.to_string()), "{debug}");
    assert!(!debug.contains(TOKEN), "{debug}");
}

#[test]
fn writes_and_reads_round_trip_with_the_servers_versionstamps() {
    let (db, _server, store) = served();
    let res = store.atomic().set(&key!["a"], 7u64).commit().unwrap();
    let CommitResult::Committed { versionstamp, .. } = res else {
        panic!("{res:?}")
    };
    let local = db.get(&key!["a"]).unwrap().unwrap();
    assert_eq!(local.versionstamp, versionstamp);
    let remote = store.snapshot().get(&key!["a"]).unwrap().unwrap();
    assert_eq!(remote, local);
    assert_eq!(
        store.get_many(&[key!["a"], key!["b"]]).unwrap(),
        vec![Some(local), None]
    );
}

#[test]
fn a_snapshot_stays_put_across_batches_and_commits() {
    let (_db, _server, store) = served();
    for i in 0..25u64 {
        let _ = store.atomic().set(&key!["n", i], i).commit().unwrap();
    }
    let snap = store.snapshot();
    let first = snap.get(&key!["n", 0u64]).unwrap().unwrap();
    for i in 0..25u64 {
        let _ = store.atomic().set(&key!["n", i], 100 + i).commit().unwrap();
    }
    let _ = store
        .atomic()
        .set(&key!["n", 99u64], 0u64)
        .commit()
        .unwrap();
    assert_eq!(snap.get(&key!["n", 0u64]).unwrap().unwrap(), first);
    let listed = tuplekv_engine::ListIter::new(
        snap.clone(),
        Selector::prefix(&key!["n"]),
        ListOptions {
            batch_size: Some(7),
            ..ListOptions::default()
        },
    )
    .unwrap()
    .read_all()
    .unwrap();
    assert_eq!(listed.len(), 25);
    assert!(listed.iter().all(|e| e.value.as_u64().unwrap() < 100));
}

#[test]
fn a_transaction_that_lists_conflicts_with_an_insert_into_its_range() {
    let (_db, _server, store) = served();
    let _ = store
        .atomic()
        .set(&key!["items", 1u64], 1u64)
        .commit()
        .unwrap();
    let mut runs = 0;
    store
        .transaction(|tx| {
            runs += 1;
            let n = tx
                .list(&Selector::prefix(&key!["items"]), ListOptions::default())?
                .len();
            if runs == 1 {
                // Another writer inserts into the listed range before the commit.
                let _ = store.atomic().set(&key!["items", 2u64], 2u64).commit()?;
            }
            tx.set(&key!["count"], n as u64);
            Ok::<_, Error>(())
        })
        .unwrap();
    assert_eq!(runs, 2);
    assert_eq!(
        store
            .snapshot()
            .get(&key!["count"])
            .unwrap()
            .unwrap()
            .value
            .as_u64(),
        Some(2)
    );
}

#[test]
fn commit_async_resolves_with_the_commit() {
    let (db, _server, store) = served();
    let write = store.atomic().set(&key!["x"], 1u64).as_write().clone();
    let res = tuplekv_testkit::executor::block_on(store.commit_async(write)).unwrap();
    assert!(res.is_committed());
    assert!(db.get(&key!["x"]).unwrap().is_some());
}

#[test]
fn a_watch_sees_the_current_state_then_a_change() {
    let (_db, _server, store) = served();
    let k = tuplekv_engine::codec::encode_key(&key!["w"]);
    let mut watch = store.watch_raw(vec![k.into()]).unwrap();
    let first = watch.next_blocking().unwrap();
    assert_eq!(first.entries, vec![None]);
    let _ = store.atomic().set(&key!["w"], 5u64).commit().unwrap();
    let next = watch.next_blocking().unwrap();
    assert_eq!(next.entries[0].as_ref().unwrap().value.as_u64(), Some(5));
    assert_eq!(next.changed, vec![true]);
    let _ = watch.poll_next(&mut std::task::Context::from_waker(std::task::Waker::noop()));
}

#[test]
fn limits_are_refused_before_sending_with_the_engines_errors() {
    let (db, _server, store) = served();
    let big = vec![0u8; tuplekv_engine::limits::VALUE_SIZE_MAX + 1];
    let err = store.atomic().set(&key!["v"], big).commit().unwrap_err();
    assert!(matches!(err, Error::ValueTooLarge { .. }), "{err:?}");
    assert!(db.snapshot().get(&key!["v"]).unwrap().is_none());
}

#[test]
fn a_wrong_token_fails_at_connect_and_a_bad_url_is_named() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(db);
    let err = RemoteStore::connect(&server.url(), "not-the-right-token").unwrap_err();
    assert!(
        matches!(err, ConnectError::Store(Error::Remote { status: 401, .. })),
        "{err:?}"
    );
    let err = RemoteStore::connect("ftp://127.0.0.1:1", TOKEN).unwrap_err();
    assert!(matches!(err, ConnectError::InvalidUrl { .. }), "{err}");
    assert!(err.to_string().contains("http:// or https://"), "{err}");
}

#[test]
fn an_unreachable_server_is_unavailable_after_the_retry_budget() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let options = RemoteOptions {
        retry_for: Duration::from_millis(200),
        ..RemoteOptions::default()
    };
    let err =
        RemoteStore::connect_with(&format!("http://127.0.0.1:{port}"), TOKEN, options).unwrap_err();
    assert!(
        matches!(err, ConnectError::Store(Error::Unavailable { .. })),
        "{err}"
    );
}

#[test]
fn a_refused_connection_keeps_the_io_error_as_the_source_and_classifies_unavailable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let options = RemoteOptions {
        retry_for: Duration::from_millis(50),
        ..RemoteOptions::default()
    };
    let err =
        RemoteStore::connect_with(&format!("http://127.0.0.1:{port}"), TOKEN, options).unwrap_err();
    let ConnectError::Store(err) = err else {
        panic!("not a store error: {err:?}")
    };
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(err.class().http_status(), 503);
    let source = std::error::Error::source(&err).expect("the transport's error is the source");
    // The chain below it reaches the operating system's refusal.
    let mut next = Some(source);
    let mut refused = false;
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            refused |= io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        next = e.source();
    }
    assert!(refused, "no ConnectionRefused io::Error under {source:?}");
}

/// A server that speaks plain KV Connect, as denokv does.
fn plain() -> (Arc<Database>, TestServer, RemoteStore) {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::of(Arc::clone(&db))
        .config(|c| c.with_extension(false))
        .start();
    let store = RemoteStore::connect(&server.url(), TOKEN).unwrap();
    (db, server, store)
}

#[test]
fn without_the_extension_a_snapshot_serves_one_read_and_names_what_a_second_needs() {
    let (_db, _server, store) = plain();
    assert!(!store.has_extension().unwrap());
    let _ = store.atomic().set(&key!["a"], 1u64).commit().unwrap();
    let snap = store.snapshot();
    assert!(snap.get(&key!["a"]).unwrap().is_some());
    let err = snap.get(&key!["a"]).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("tuplekv.snapshots.v1"), "{err}");
    // One-request reads work however many there are.
    assert_eq!(store.get_many(&[key!["a"], key!["b"]]).unwrap().len(), 2);
    assert!(
        store
            .get_latest_raw(&tuplekv_engine::codec::encode_key(&key!["a"]))
            .unwrap()
            .is_some()
    );
}

#[test]
fn without_the_extension_transactions_that_read_keys_work_and_ones_that_list_are_refused() {
    let (_db, _server, store) = plain();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || {
                // Four threads on two keys conflict a lot: the bound on attempts is raised so
                // that only a livelock (not bad luck under load) could exhaust it.
                let retry = TransactionOptions {
                    max_attempts: 10_000,
                    ..TransactionOptions::default()
                };
                for _ in 0..25 {
                    store
                        .transaction_with(&retry, |tx| {
                            let n = tx
                                .get(&key!["n"])?
                                .and_then(|e| e.value.as_u64())
                                .unwrap_or(0);
                            let m = tx
                                .get(&key!["m"])?
                                .and_then(|e| e.value.as_u64())
                                .unwrap_or(0);
                            tx.set(&key!["n"], n + 1);
                            tx.set(&key!["m"], m + 2);
                            Ok::<_, Error>(())
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(
        store
            .get_many(&[key!["n"], key!["m"]])
            .unwrap()
            .iter()
            .map(|e| e.as_ref().unwrap().value.as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![100, 200]
    );
    let err = store
        .transaction(|tx| {
            let n = tx
                .list(&Selector::prefix(&key!["x"]), ListOptions::default())?
                .len();
            tx.set(&key!["count"], n as u64);
            Ok::<_, Error>(())
        })
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
}

#[test]
fn the_client_renews_its_token_before_it_expires() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::of(db)
        .config(|c| c.with_token_lifetime(Duration::from_millis(400)))
        .start();
    let stats = Arc::clone(&server.stats);
    let store = RemoteStore::connect(&server.url(), TOKEN).unwrap();
    assert_eq!(stats.metadata_requests(), 1);
    // Half the lifetime is the renewal margin for a short token: after it, the next request
    // runs the exchange again first.
    std::thread::sleep(Duration::from_millis(250));
    let _ = store.get_latest_raw(&[2, b'a', 0]).unwrap();
    assert_eq!(stats.metadata_requests(), 2);
}

#[test]
fn a_watch_carries_on_across_a_server_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::open(dir.path(), tuplekv_engine::Options::default()).unwrap());
    let server = TestServer::start(Arc::clone(&db));
    let addr = server.addr;
    let store = RemoteStore::connect(&server.url(), TOKEN).unwrap();
    let k = tuplekv_engine::codec::encode_key(&key!["w"]);
    let mut watch = store.watch_raw(vec![k.into()]).unwrap();
    assert_eq!(watch.next_blocking().unwrap().entries, vec![None]);
    drop(server);
    drop(db);
    let db = Arc::new(Database::open(dir.path(), tuplekv_engine::Options::default()).unwrap());
    let _server = TestServer::of(Arc::clone(&db))
        .at(addr)
        .config(|c| c)
        .start();
    let _ = store.atomic().set(&key!["w"], 9u64).commit().unwrap();
    let update = watch.next_blocking().unwrap();
    assert_eq!(update.entries[0].as_ref().unwrap().value.as_u64(), Some(9));
}

#[test]
fn a_dropped_snapshot_is_released_on_the_server_with_the_next_read() {
    let (_db, server, store) = served();
    let stats = Arc::clone(&server.stats);
    let snap = store.snapshot();
    let _ = snap.get(&key!["a"]).unwrap();
    let clone = snap.clone();
    drop(snap);
    let _ = clone.get(&key!["a"]).unwrap(); // a clone keeps it held
    assert_eq!(stats.held_snapshots(), 1);
    drop(clone);
    // A commit, so the next snapshot holds another state: had the release not been sent,
    // two would be held.
    let _ = store.atomic().set(&key!["a"], 1u64).commit().unwrap();
    let other = store.snapshot();
    let _ = other.get(&key!["a"]).unwrap(); // carries the release, and holds its own
    assert_eq!(stats.held_snapshots(), 1);
    assert_ne!(other.versionstamp(), None);
}

#[test]
fn a_watch_outlives_the_store_it_came_from() {
    let (_db, _server, store) = served();
    let k = tuplekv_engine::codec::encode_key(&key!["w"]);
    let mut watch = store.watch_raw(vec![k.into()]).unwrap();
    let writer = store.clone();
    drop(store);
    assert_eq!(watch.next_blocking().unwrap().entries, vec![None]);
    let _ = writer.atomic().set(&key!["w"], 1u64).commit().unwrap();
    drop(writer);
    let update = watch.next_blocking().unwrap();
    assert_eq!(update.entries[0].as_ref().unwrap().value.as_u64(), Some(1));
}

#[test]
fn a_write_answered_with_a_gateway_error_has_an_unknown_outcome_and_is_not_resent() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::of(Arc::clone(&db))
        .answering_writes_with(502)
        .start();
    let stats = Arc::clone(&server.stats);
    let store = RemoteStore::connect(&server.url(), TOKEN).unwrap();
    let err = store.atomic().set(&key!["k"], 1u64).commit().unwrap_err();
    assert!(matches!(err, Error::OutcomeUnknown { .. }), "{err:?}");
    assert_eq!(stats.atomic_write_requests(), 1, "never resent");
    // It did commit: only a read can tell.
    assert_eq!(db.get(&key!["k"]).unwrap().unwrap().value.as_u64(), Some(1));
}

#[test]
fn a_write_answered_409_by_a_server_that_lost_its_stores_answer_has_an_unknown_outcome() {
    // A server over etcd answers 409 when its store lost the answer to a commit.
    let db = Arc::new(Database::in_memory());
    let server = TestServer::of(Arc::clone(&db))
        .answering_writes_with(409)
        .start();
    let stats = Arc::clone(&server.stats);
    let store = RemoteStore::connect(&server.url(), TOKEN).unwrap();
    let err = store.atomic().sum(&key!["n"], 1).commit().unwrap_err();
    assert!(matches!(err, Error::OutcomeUnknown { .. }), "{err:?}");
    assert_eq!(stats.atomic_write_requests(), 1, "never resent");
    assert_eq!(db.get(&key!["n"]).unwrap().unwrap().value.as_u64(), Some(1));
}

#[test]
fn releasing_one_snapshot_keeps_another_clients_hold_on_the_same_state() {
    let (_db, server, store) = served();
    let stats = Arc::clone(&server.stats);
    let a = store.snapshot();
    let b = store.snapshot();
    let _ = a.get(&key!["x"]).unwrap();
    let _ = b.get(&key!["x"]).unwrap();
    assert_eq!(a.versionstamp(), b.versionstamp());
    drop(a);
    let _ = store.atomic().set(&key!["x"], 1u64).commit().unwrap();
    let c = store.snapshot();
    let _ = c.get(&key!["x"]).unwrap(); // carries a's release, holds a second state
    // b's hold (its own id) is still there: b reads its state, not the new one.
    assert_eq!(b.get(&key!["x"]).unwrap(), None);
    assert_eq!(stats.held_snapshots(), 2);
    drop((b, c));
    let _ = store.atomic().set(&key!["x"], 2u64).commit().unwrap();
    let d = store.snapshot();
    let _ = d.get(&key!["x"]).unwrap(); // carries both releases
    assert_eq!(stats.held_snapshots(), 1);
}

#[test]
fn options_out_of_range_are_brought_within_bounds() {
    let (_db, server, _store) = served();
    let options = RemoteOptions {
        request_timeout: Duration::ZERO,
        connect_timeout: Duration::ZERO,
        retry_for: Duration::ZERO,
        keep_alive_interval: Duration::ZERO,
        io_threads: 0,
        ca_certs: Vec::new(),
    };
    // Zero timeouts are raised to DURATION_MIN: a loopback exchange may or may not fit in a
    // millisecond, but nothing panics, and a sane configuration works.
    let _ = RemoteStore::connect_with(&server.url(), TOKEN, options);
    let sane = RemoteOptions {
        io_threads: 10_000,
        ..RemoteOptions::default()
    };
    let store = RemoteStore::connect_with(&server.url(), TOKEN, sane).unwrap();
    assert!(store.get_many(&[key!["a"]]).unwrap()[0].is_none());
}

#[test]
fn a_versionstamped_set_whose_written_key_passes_the_write_limit_is_refused_and_writes_nothing() {
    let (db, _server, store) = served();
    // A prefix of 2027 bytes plus the 22-byte stamp part would make a 2049-byte key.
    let prefix = key![String::from_utf8(vec![b'p'; 2025]).unwrap()];
    assert_eq!(tuplekv_engine::codec::encode_key(&prefix).len(), 2027);
    let err = store
        .atomic()
        .set(&key!["other"], 1u64)
        .set_versionstamped(&prefix, 7u64)
        .commit()
        .unwrap_err();
    assert_eq!(
        err,
        tuplekv_engine::Error::KeyTooLargeForWrite {
            size: tuplekv_engine::limits::KEY_SIZE_MAX_WRITE + 1
        }
    );
    let stored = db
        .snapshot()
        .scan(
            &tuplekv_engine::ByteRange {
                start: vec![0],
                end: vec![0xff],
            },
            false,
            10,
        )
        .unwrap();
    assert!(stored.is_empty(), "nothing was written: {stored:?}");
    // Such keys may still exist in stores written before the limit held (or by denokv): a get
    // of a key at the read limit is a valid read, and one that cannot exist reads as absent.
    let mut long = tuplekv_engine::codec::encode_key(&prefix);
    long.extend_from_slice(b"\x0200000000000000010000\x00");
    long.truncate(tuplekv_engine::limits::KEY_SIZE_MAX_READ);
    assert_eq!(store.snapshot().get_raw(&long).unwrap(), None);
    *long.last_mut().unwrap() = 1;
    assert_eq!(store.snapshot().get_raw(&long).unwrap(), None);
}

#[test]
fn concurrent_threads_share_one_connection() {
    let (_db, server, store) = served();
    let stats = Arc::clone(&server.stats);
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let store = &store;
            s.spawn(move || {
                for i in 0..20u64 {
                    let _ = store.atomic().set(&key!["t", t, i], i).commit().unwrap();
                    assert!(store.get_many(&[key!["t", t, i]]).unwrap()[0].is_some());
                }
            });
        }
    });
    assert_eq!(stats.connections_accepted(), 1);
}

/// A TCP proxy that forwards until frozen, then swallows everything (a server that stopped
/// answering without closing its connections).
struct FreezingProxy {
    addr: std::net::SocketAddr,
    frozen: Arc<std::sync::atomic::AtomicBool>,
    /// Its connections to the server, closed when the proxy is dropped (so the server's
    /// graceful shutdown does not wait for them).
    upstream: Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        for s in self.upstream.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl FreezingProxy {
    fn start(to: std::net::SocketAddr) -> FreezingProxy {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&frozen);
        let upstream = Arc::new(std::sync::Mutex::new(Vec::new()));
        let streams = Arc::clone(&upstream);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(to) else {
                    return;
                };
                streams.lock().unwrap().push(server.try_clone().unwrap());
                for (mut from, mut into) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let flag = Arc::clone(&flag);
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 << 10];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            if !flag.load(Ordering::SeqCst) && into.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    });
                }
            }
        });
        FreezingProxy {
            addr,
            frozen,
            upstream,
        }
    }
}

#[test]
fn a_server_that_stops_answering_bounds_writes_and_reads_by_their_timeouts() {
    let db = Arc::new(Database::in_memory());
    let server = TestServer::start(Arc::clone(&db));
    let proxy = FreezingProxy::start(server.addr);
    let options = RemoteOptions {
        request_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(300),
        retry_for: Duration::from_millis(600),
        ..RemoteOptions::default()
    };
    let store =
        RemoteStore::connect_with(&format!("http://{}", proxy.addr), TOKEN, options).unwrap();
    let _ = store.atomic().set(&key!["a"], 1u64).commit().unwrap();
    proxy
        .frozen
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let err = store.atomic().set(&key!["a"], 2u64).commit().unwrap_err();
    assert!(matches!(err, Error::OutcomeUnknown { .. }), "{err:?}");
    let err = store.get_many(&[key!["a"]]).unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    drop(proxy);
}
