//! The transport: HTTP/1.1 and h2c on one port, many connections at once, graceful shutdown
//! that finishes requests in flight, and durable commits from concurrent requests sharing
//! log syncs; reads that wait on their store kept off the runtime.

use tuplekv_testkit::kv_connect as common;

use std::sync::Arc;

use common::*;
use denokv_proto::datapath as pb;
use prost::Message;
use tuplekv_engine::{Database, Durability, Options};
use tuplekv_server::{CommitMode, ReadMode, ServerConfig};

#[tokio::test]
async fn http1_and_h2c_clients_share_one_port_and_one_store() {
    let server = TestServer::in_memory().spawn().await;
    let mut h1 = server.h1().await;
    let mut h2 = server.h2().await;
    assert_eq!(
        h1.commit(write_of(
            vec![],
            vec![set(&key("from-h1"), bytes_value(b"1"))]
        ))
        .await
        .status,
        AW_SUCCESS
    );
    assert_eq!(
        h2.commit(write_of(
            vec![],
            vec![set(&key("from-h2"), bytes_value(b"2"))]
        ))
        .await
        .status,
        AW_SUCCESS
    );
    assert_eq!(
        h2.get(&key("from-h1")).await.expect("h1's write").value,
        b"1"
    );
    assert_eq!(
        h1.get(&key("from-h2")).await.expect("h2's write").value,
        b"2"
    );
    assert_eq!(server.stats.atomic_write_requests(), 2);
    server.stop().await;
}

#[tokio::test]
async fn many_connections_at_once_are_all_served() {
    const CLIENTS: usize = 200;
    let server = TestServer::in_memory().spawn().await;
    let addr = server.addr;
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            tokio::spawn(async move {
                let mut c = if i % 2 == 0 {
                    Client::h2(addr).await
                } else {
                    Client::h1(addr).await
                };
                let k = key2("conn", &i.to_string());
                let out = c
                    .commit(write_of(
                        vec![check(&k, None)],
                        vec![set(&k, u64_value(i as u64))],
                    ))
                    .await;
                assert_eq!(out.status, AW_SUCCESS);
                assert_eq!(
                    c.get(&k).await.expect("own write").value,
                    (i as u64).to_le_bytes()
                );
                c
            })
        })
        .collect();
    let mut clients = Vec::new();
    for t in tasks {
        clients.push(t.await.expect("client task"));
    }
    assert_eq!(server.stats.open_connections(), CLIENTS);
    assert_eq!(server.stats.connections_accepted(), CLIENTS as u64);
    let out: pb::SnapshotReadOutput = clients[0]
        .read(read_of(vec![prefix_range(&key("conn"), 1000, false)]))
        .await
        .decode();
    assert_eq!(out.ranges[0].values.len(), CLIENTS);
    drop(clients);
    server.stop().await;
}

#[tokio::test]
async fn shutdown_waits_for_a_request_in_flight_and_then_returns() {
    let server = TestServer::in_memory().spawn().await;
    let addr = server.addr;
    let mut sender = h2_sender(addr).await;
    // A write whose body is still arriving when shutdown begins.
    let (tx, body) = channel_body();
    let req = channel_request(addr, "atomic_write", body);
    sender.ready().await.expect("ready");
    let in_flight = tokio::spawn(sender.send_request(req));
    // Wait until the server has the request (its counter moves when the handler starts).
    wait_until("the write to reach its handler", || {
        server.stats.atomic_write_requests() > 0
    })
    .await;
    let stats = Arc::clone(&server.stats);
    let stopping = tokio::spawn(server.stop());
    let write = write_of(vec![], vec![set(&key("late"), bytes_value(b"v"))]).encode_to_vec();
    send_frame(&tx, write).await;
    drop(tx);
    let reply = in_flight
        .await
        .expect("join")
        .expect("the request in flight is answered");
    assert_eq!(reply.status(), 200);
    stopping.await.expect("serve returned");
    assert_eq!(stats.open_connections(), 0);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer accepting"
    );
}

#[tokio::test]
async fn concurrent_durable_writes_over_the_network_share_log_syncs() {
    concurrent_durable_writes_share_log_syncs(CommitMode::BlockingPool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_durable_writes_committed_inline_share_log_syncs() {
    concurrent_durable_writes_share_log_syncs(CommitMode::Inline).await;
}

/// 64 concurrent durable writes on one h2 connection, committed as `mode` says: all
/// acknowledged, in fewer syncs than writes.
async fn concurrent_durable_writes_share_log_syncs(mode: CommitMode) {
    const WRITERS: usize = 64;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        durability: Durability::Sync,
        ..Options::default()
    };
    let db = Arc::new(Database::open(dir.path(), options).expect("open"));
    let config = ServerConfig::new(TOKEN)
        .expect("a long enough token")
        .with_commit_mode(mode);
    let server = TestServer::of(Arc::clone(&db))
        .with_config(config)
        .spawn()
        .await;
    let before = db.stats().log_syncs;
    // One h2 connection, 64 concurrent streams: what Deno's client does under load.
    let sender = h2_sender::<http_body_util::Full<bytes::Bytes>>(server.addr).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(WRITERS));
    let tasks: Vec<_> = (0..WRITERS)
        .map(|i| {
            let mut sender = sender.clone();
            let barrier = Arc::clone(&barrier);
            let addr = server.addr;
            tokio::spawn(async move {
                let k = key2("durable", &i.to_string());
                let body = write_of(vec![], vec![set(&k, u64_value(i as u64))]).encode_to_vec();
                let req = data_request(addr, "atomic_write", body).body_bytes();
                barrier.wait().await;
                sender.ready().await.expect("ready");
                let res = sender.send_request(req).await.expect("reply");
                assert_eq!(res.status(), 200);
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("writer");
    }
    let syncs = db.stats().log_syncs - before;
    assert!(syncs >= 1, "durable commits were synced");
    assert!(
        syncs < WRITERS as u64,
        "{WRITERS} concurrent writes took {syncs} syncs: no sharing"
    );
    println!("{WRITERS} concurrent durable writes took {syncs} log syncs");
    server.stop().await;
}

/// An in-memory database whose snapshot reads wait at a gate the test opens, as a store
/// whose reads wait on the network does.
#[derive(Clone)]
struct GatedReads {
    db: Database,
    gate: Arc<Gate>,
}

/// Opened once; reads wait for it at most [`GATE_WAIT_MAX`].
#[derive(Default)]
struct Gate {
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    /// Reads that reached the gate.
    waiting: std::sync::atomic::AtomicUsize,
}

/// How long a gated read waits before it fails (so a broken test fails, never hangs).
const GATE_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

impl Gate {
    fn pass(&self) -> Result<(), tuplekv_engine::Error> {
        self.waiting
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let open = self.open.lock().expect("gate lock");
        let (open, _) = self
            .opened
            .wait_timeout_while(open, GATE_WAIT_MAX, |open| !*open)
            .expect("gate lock");
        match *open {
            true => Ok(()),
            false => Err(tuplekv_engine::Error::unavailable("the gate never opened")),
        }
    }

    fn open(&self) {
        *self.open.lock().expect("gate lock") = true;
        self.opened.notify_all();
    }
}

/// A [`GatedReads`] snapshot.
#[derive(Clone)]
struct GatedSnapshot {
    inner: tuplekv_engine::Snapshot,
    gate: Arc<Gate>,
}

impl tuplekv_engine::ReadView for GatedSnapshot {
    fn get_raw(&self, key: &[u8]) -> Result<Option<tuplekv_engine::Entry>, tuplekv_engine::Error> {
        self.gate.pass()?;
        self.inner.get_raw(key)
    }

    fn scan(
        &self,
        range: &tuplekv_engine::ByteRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<tuplekv_engine::Entry>, tuplekv_engine::Error> {
        self.gate.pass()?;
        self.inner.scan(range, reverse, limit)
    }
}

impl tuplekv_engine::Store for GatedReads {
    type Snapshot = GatedSnapshot;
    type Watch = tuplekv_engine::Watch;

    fn snapshot(&self) -> GatedSnapshot {
        GatedSnapshot {
            inner: self.db.snapshot(),
            gate: Arc::clone(&self.gate),
        }
    }

    fn watch_raw(
        &self,
        keys: Vec<tuplekv_engine::KeyBytes>,
    ) -> Result<tuplekv_engine::Watch, tuplekv_engine::Error> {
        self.db.watch_raw(keys)
    }

    fn snapshot_versionstamp(snapshot: &GatedSnapshot) -> tuplekv_engine::Versionstamp {
        Database::snapshot_versionstamp(&snapshot.inner)
    }

    fn commit(
        &self,
        write: tuplekv_engine::AtomicWrite,
    ) -> Result<tuplekv_engine::CommitResult, tuplekv_engine::Error> {
        self.db.commit(write)
    }
}

/// On a runtime with one thread, a read that waits on its store (the gate) must leave the
/// runtime free: a commit on another connection is answered while the read waits, and the
/// read is answered once the gate opens. (Run inline, the read holds the only thread until
/// the gate gives up, and is answered 503.)
#[tokio::test(flavor = "current_thread")]
async fn a_waiting_read_on_the_blocking_pool_leaves_the_runtime_to_other_requests() {
    let store = Arc::new(GatedReads {
        db: Database::in_memory(),
        gate: Arc::default(),
    });
    let config = ServerConfig::new(TOKEN)
        .expect("a long enough token")
        .with_read_mode(ReadMode::BlockingPool);
    let server = TestServer::of(Arc::clone(&store))
        .with_config(config)
        .spawn()
        .await;
    let mut reader = server.h2().await;
    let read = tokio::spawn(async move { reader.read(read_of(vec![get_range(&key("k"))])).await });
    while store.gate.waiting.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let mut writer = server.h2().await;
    let out = writer
        .commit(write_of(vec![], vec![set(&key("k"), bytes_value(b"v"))]))
        .await;
    assert_eq!(out.status, AW_SUCCESS, "the commit waited for the read");
    store.gate.open();
    let reply = read.await.expect("the read task");
    assert_eq!(reply.status, 200, "{}", reply.text());
    server.stop().await;
}
