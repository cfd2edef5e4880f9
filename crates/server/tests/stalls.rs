//! No stall on the traffic real clients send, and none a slow or hostile client can cause:
//! many large writes at once on one HTTP/2 connection (as Deno's client sends them), slow
//! uploads, stalled metadata bodies, idle connections, unread watch streams, and a client
//! that leaves Nagle's algorithm on.

use tuplekv_testkit::kv_connect as common;

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use denokv_proto::datapath as pb;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tuplekv_server::limits::*;

/// How long the tests below allow for work that takes well under a second here: a
/// regression (a stall) fails them instead of hanging.
const STALL_MAX: Duration = Duration::from_secs(60);

/// One write of ten sets of `value_len`-byte values, under keys `[prefix, i]`: the shape of
/// the Deno program that found the stall (ten 60 000-byte `Uint8Array`s per write).
fn large_write(prefix: &str, value_len: usize) -> Vec<u8> {
    let sets = (0..10)
        .map(|i| {
            set(
                &key2(prefix, &i.to_string()),
                bytes_value(&vec![7u8; value_len]),
            )
        })
        .collect();
    write_of(vec![], sets).encode_to_vec()
}

/// A data-path request with `body`, its length declared, as every KV Connect client sends.
fn sized_request(addr: SocketAddr, method: &str, body: Vec<u8>) -> hyper::Request<Full<Bytes>> {
    data_request(addr, method, body.clone())
        .header("content-length", &body.len().to_string())
        .body_bytes()
}

/// Sends `n` writes of about 600 kB at once on one HTTP/2 connection and returns their
/// statuses.
async fn concurrent_large_writes(addr: SocketAddr, n: usize) -> Vec<u16> {
    let sender = h2_sender::<Full<Bytes>>(addr).await;
    let mut tasks = Vec::new();
    for i in 0..n {
        let mut sender = sender.clone();
        let body = large_write(&format!("w{i}"), 60_000);
        tasks.push(tokio::spawn(async move {
            sender.ready().await.expect("ready");
            let res = sender
                .send_request(sized_request(addr, "atomic_write", body))
                .await
                .expect("a reply");
            let status = res.status().as_u16();
            res.into_body().collect().await.expect("the reply's body");
            status
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.expect("join"));
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_600_kb_writes_on_one_h2_connection_all_commit() {
    let server = TestServer::in_memory().spawn().await;
    let statuses = tokio::time::timeout(STALL_MAX, concurrent_large_writes(server.addr, 100))
        .await
        .expect("100 concurrent large writes on one connection complete");
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let mut c = server.h2().await;
    assert_eq!(
        c.get(&key2("w99", "9"))
            .await
            .expect("the last write")
            .value
            .len(),
        60_000
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_600_kb_writes_on_one_h2_connection_all_commit() {
    let server = TestServer::in_memory().spawn().await;
    let statuses = tokio::time::timeout(STALL_MAX, concurrent_large_writes(server.addr, 200))
        .await
        .expect("200 concurrent large writes on one connection complete");
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(server.stats.body_slots_refused(), 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_writes_past_the_body_slots_on_one_connection_wait_and_then_commit() {
    // Two slots for eight bodies of ~600 kB on one connection: six wait with their bodies
    // unread, and the slot holders' bodies still arrive.
    let config = config().with_request_bodies_in_flight_max(2);
    let server = TestServer::in_memory().with_config(config).spawn().await;
    let statuses = tokio::time::timeout(STALL_MAX, concurrent_large_writes(server.addr, 8))
        .await
        .expect("the writes complete");
    assert_eq!(statuses, vec![200; 8]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_another_connection_is_answered_while_one_client_floods_large_writes() {
    let server = TestServer::in_memory().spawn().await;
    let addr = server.addr;
    let flood = tokio::spawn(concurrent_large_writes(addr, 200));
    wait_until("the flood to start", || {
        server.stats.atomic_write_requests() >= 100
    })
    .await;
    let mut other = server.h2().await;
    let read = tokio::time::timeout(STALL_MAX, other.read(read_of(vec![get_range(&key("a"))])))
        .await
        .expect("a read on another connection is answered during the flood");
    assert_eq!(read.status, 200);
    let statuses = tokio::time::timeout(STALL_MAX, flood)
        .await
        .expect("the flood completes")
        .expect("join");
    assert!(statuses.iter().all(|&s| s == 200));
    server.stop().await;
}

/// Opens a raw HTTP/1.1 connection and sends `head` plus the first `sent` bytes of a body
/// it declares `declared` bytes long; the rest never comes.
async fn stalled_upload(addr: SocketAddr, head: String, sent: usize) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(head.as_bytes()).await.expect("head");
    tcp.write_all(&vec![0u8; sent])
        .await
        .expect("the first bytes");
    tcp
}

/// The head of an `atomic_write` with the token whose body is declared `declared` bytes.
fn upload_head(addr: SocketAddr, declared: usize) -> String {
    format!(
        "POST /v2/atomic_write HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\n\
         x-denokv-version: 3\r\nx-denokv-database-id: {NIL_ID}\r\ncontent-length: {declared}\r\n\r\n"
    )
}

/// The head of a metadata exchange without a token whose body is declared `declared` bytes.
fn stalled_metadata_head(addr: SocketAddr, declared: usize) -> String {
    format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {declared}\r\n\r\n"
    )
}

/// Reads what the server sends on `tcp` until it closes; the status of its reply.
async fn reply_status_then_close(tcp: &mut TcpStream) -> u16 {
    let mut reply = Vec::new();
    tokio::time::timeout(STALL_MAX, tcp.read_to_end(&mut reply))
        .await
        .expect("the server answers and closes")
        .expect("read");
    let text = String::from_utf8_lossy(&reply);
    text.get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {text:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_large_uploads_at_the_slot_limit_never_stop_other_writes_and_time_out_with_408() {
    let read_timeout = Duration::from_millis(1500);
    let config = config().with_body_timeouts(BODY_SLOT_WAIT_MAX, read_timeout);
    let server = TestServer::in_memory().with_config(config).spawn().await;
    // Every large-body slot taken by an upload that sent more than a small body's worth,
    // then stalled; and as many again that sent one byte (they hold no slot).
    let mut holders = Vec::new();
    for _ in 0..REQUEST_BODIES_IN_FLIGHT_MAX {
        let head = upload_head(server.addr, 600_000);
        holders.push(stalled_upload(server.addr, head, SMALL_BODY_MAX + 1).await);
    }
    let mut tricklers = Vec::new();
    for _ in 0..REQUEST_BODIES_IN_FLIGHT_MAX {
        let head = upload_head(server.addr, 600_000);
        tricklers.push(stalled_upload(server.addr, head, 1).await);
    }
    wait_until("the uploads to be read", || {
        server.stats.atomic_write_requests() == 2 * REQUEST_BODIES_IN_FLIGHT_MAX as u64
    })
    .await;
    // A small write from another client goes through at once.
    let mut c = server.h2().await;
    let small = write_of(vec![], vec![set(&key("small"), bytes_value(&[1; 2000]))]);
    assert_eq!(c.commit(small).await.status, AW_SUCCESS);
    // A large one waits for a slot, which the stalled uploads free at their read timeout.
    let large = tokio::time::timeout(
        STALL_MAX,
        c.call(sized_request(
            server.addr,
            "atomic_write",
            large_write("large", 60_000),
        )),
    )
    .await
    .expect("the large write is answered");
    assert_eq!(large.status, 200, "{}", large.text());
    for tcp in holders.iter_mut().chain(tricklers.iter_mut()) {
        assert_eq!(reply_status_then_close(tcp).await, 408);
    }
    assert_eq!(
        server.stats.body_reads_timed_out(),
        2 * REQUEST_BODIES_IN_FLIGHT_MAX as u64
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_that_finds_no_slot_in_time_gets_503_with_retry_after_and_writes_nothing() {
    let config = config()
        .with_request_bodies_in_flight_max(1)
        .with_body_timeouts(Duration::from_millis(300), Duration::from_secs(30));
    let server = TestServer::in_memory().with_config(config).spawn().await;
    let _holder = stalled_upload(
        server.addr,
        upload_head(server.addr, 600_000),
        SMALL_BODY_MAX + 1,
    )
    .await;
    wait_until("the upload to hold the slot", || {
        server.stats.atomic_write_requests() == 1
    })
    .await;
    let mut c = server.h2().await;
    let res = c
        .call(sized_request(
            server.addr,
            "atomic_write",
            large_write("refused", 60_000),
        ))
        .await;
    assert_eq!(res.status, 503, "{}", res.text());
    assert_eq!(
        res.text(),
        format!(
            "The server is busy: every slot for large request bodies stayed taken for {:?}. \
             Nothing was done; try again.",
            Duration::from_millis(300)
        )
    );
    assert_eq!(
        res.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    assert_eq!(server.stats.body_slots_refused(), 1);
    assert!(c.get(&key2("refused", "0")).await.is_none());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_metadata_bodies_without_the_token_fill_their_slots_then_get_503_and_never_stop_clients_with_it()
 {
    let config = config()
        // Long enough that all the stalled bodies still hold their slots when the one past
        // them comes, short enough for the test to see them answered 408.
        .with_body_timeouts(BODY_SLOT_WAIT_MAX, Duration::from_secs(8));
    let server = TestServer::in_memory().with_config(config).spawn().await;
    let mut stalled = Vec::new();
    for _ in 0..UNAUTHENTICATED_BODIES_IN_FLIGHT_MAX {
        let head = stalled_metadata_head(server.addr, METADATA_BODY_MAX);
        stalled.push(stalled_upload(server.addr, head, 1).await);
    }
    wait_until("the stalled bodies to be read", || {
        server.stats.metadata_requests() == UNAUTHENTICATED_BODIES_IN_FLIGHT_MAX as u64
    })
    .await;
    // One more without the token: refused at once.
    let mut past = stalled_upload(
        server.addr,
        stalled_metadata_head(server.addr, METADATA_BODY_MAX),
        1,
    )
    .await;
    assert_eq!(reply_status_then_close(&mut past).await, 503);
    // A client with the token goes through.
    let mut c = server.h2().await;
    let reply = tokio::time::timeout(
        WAIT_MAX,
        c.metadata(TOKEN, r#"{"supportedVersions":[2,3]}"#),
    )
    .await
    .expect("a metadata exchange with the token is served");
    assert_eq!(reply.status, 200, "{}", reply.text());
    // The stalled ones are answered 408 at the read timeout and closed.
    for tcp in &mut stalled {
        assert_eq!(reply_status_then_close(tcp).await, 408);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_at_the_limit_make_room_for_a_new_client_oldest_first() {
    let server = TestServer::in_memory()
        .options(|mut o| {
            o.connections_max = 8;
            o
        })
        .spawn()
        .await;
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    wait_until("the idle connections to be open", || {
        server.stats.open_connections() == 8
    })
    .await;
    let mut c = server.h2().await;
    let out = c
        .commit(write_of(vec![], vec![set(&key("k"), bytes_value(b"v"))]))
        .await;
    assert_eq!(out.status, AW_SUCCESS);
    assert_eq!(server.stats.connections_refused(), 0);
    // The oldest idle connection was closed to make room.
    let n = tokio::time::timeout(WAIT_MAX, idle[0].read(&mut [0u8; 16]))
        .await
        .expect("the oldest idle connection is closed")
        .expect("read");
    assert_eq!(n, 0);
    assert_eq!(server.stats.open_connections(), 8);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_client_commits_while_slow_uploads_stalled_metadata_and_1024_idle_connections_are_held()
 {
    // The default limits, but a read timeout long enough that the slow bodies are surely
    // still held when the new client comes, however loaded the machine.
    let config = config().with_body_timeouts(BODY_SLOT_WAIT_MAX, Duration::from_secs(300));
    let server = TestServer::in_memory().with_config(config).spawn().await;
    let addr = server.addr;
    let mut held = Vec::new();
    for i in 0..CONNECTIONS_MAX {
        held.push(TcpStream::connect(addr).await.unwrap_or_else(|e| {
            panic!("idle connection {i}: {e} (this test needs {CONNECTIONS_MAX}+ descriptors)")
        }));
    }
    wait_until("the idle connections to fill the limit", || {
        server.stats.open_connections() == CONNECTIONS_MAX
    })
    .await;
    for _ in 0..REQUEST_BODIES_IN_FLIGHT_MAX {
        held.push(stalled_upload(addr, upload_head(addr, 600_000), SMALL_BODY_MAX + 1).await);
    }
    for _ in 0..UNAUTHENTICATED_BODIES_IN_FLIGHT_MAX {
        let head = stalled_metadata_head(addr, METADATA_BODY_MAX);
        held.push(stalled_upload(addr, head, 1).await);
    }
    wait_until("the slow bodies to be read", || {
        server.stats.atomic_write_requests() == REQUEST_BODIES_IN_FLIGHT_MAX as u64
            && server.stats.metadata_requests() == UNAUTHENTICATED_BODIES_IN_FLIGHT_MAX as u64
    })
    .await;
    let mut c = server.h2().await;
    let meta = tokio::time::timeout(WAIT_MAX, c.metadata(TOKEN, r#"{"supportedVersions":[3]}"#))
        .await
        .expect("the metadata exchange is served");
    assert_eq!(meta.status, 200, "{}", meta.text());
    let write = write_of(vec![], vec![set(&key("new"), v8_value(&[0xff; 2048]))]);
    let out = tokio::time::timeout(WAIT_MAX, c.commit(write))
        .await
        .expect("the write is served");
    assert_eq!(out.status, AW_SUCCESS);
    assert_eq!(server.stats.connections_refused(), 0);
    assert_eq!(
        server.stats.body_reads_timed_out(),
        0,
        "the slow bodies were still held"
    );
    drop(held);
    server.stop().await;
}

/// A client transport like Deno's: Nagle's algorithm left on, and no vectored writes, so
/// the h2 client writes a request's headers and a body over 1 KiB in two writes.
struct NagleStream(TcpStream);

impl AsyncRead for NagleStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for NagleStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The median of `samples`.
fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// An h2 connection whose transport is like Deno's (Nagle on, no vectored writes) when
/// `nagle`, else one that sends every write at once.
async fn h2_with_nagle(addr: SocketAddr, nagle: bool) -> http2::SendRequest<Full<Bytes>> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(!nagle).expect("TCP_NODELAY");
    let (sender, conn) =
        http2::handshake::<_, _, Full<Bytes>>(TokioExecutor::new(), TokioIo::new(NagleStream(tcp)))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    sender
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_from_a_client_with_nagle_on_take_within_3x_of_the_same_writes_without_it() {
    let server = TestServer::in_memory().spawn().await;
    let mut nagle = h2_with_nagle(server.addr, true).await;
    let mut control = h2_with_nagle(server.addr, false).await;
    let write = |len: usize| {
        write_of(vec![], vec![set(&key("k"), v8_value(&vec![0x22; len]))]).encode_to_vec()
    };
    let sizes = [100, 16 << 10];
    // times[client][size]
    let mut times = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    // Interleaved, so that whatever else the machine does weighs on all alike.
    for _ in 0..25 {
        for (c, sender) in [&mut nagle, &mut control].into_iter().enumerate() {
            for (s, &len) in sizes.iter().enumerate() {
                let started = tokio::time::Instant::now();
                let res = sender
                    .send_request(sized_request(server.addr, "atomic_write", write(len)))
                    .await
                    .expect("a reply");
                assert_eq!(res.status(), 200);
                res.into_body().collect().await.expect("the body");
                times[c][s].push(started.elapsed());
            }
        }
    }
    let [with_nagle, without] = times.map(|per_size| per_size.map(median));
    for (s, len) in sizes.iter().enumerate() {
        assert!(
            with_nagle[s] < without[s] * 3,
            "a {len}-byte write took {:?} (median) with Nagle on, {:?} without: a delayed ACK?",
            with_nagle[s],
            without[s]
        );
    }
    server.stop().await;
}

/// The most keys a watch may watch, and the `watch` request body of them.
fn watch_of_the_most_keys() -> (Vec<Vec<u8>>, Vec<u8>) {
    let keys: Vec<Vec<u8>> = (0..WATCHED_KEYS_MAX)
        .map(|i| key2("watched", &i.to_string()))
        .collect();
    let watch = pb::Watch {
        keys: keys
            .iter()
            .map(|k| pb::WatchKey { key: k.clone() })
            .collect(),
    }
    .encode_to_vec();
    (keys, watch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_watch_stream_whose_client_reads_nothing_is_closed_after_the_send_timeout() {
    let config = config().with_watch_send_timeout(Duration::from_millis(500));
    let server = TestServer::in_memory().with_config(config).spawn().await;
    let (keys, watch) = watch_of_the_most_keys();
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    let head = format!(
        "POST /v2/watch HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {TOKEN}\r\n\
         x-denokv-version: 3\r\nx-denokv-database-id: {NIL_ID}\r\ncontent-length: {}\r\n\r\n",
        server.addr,
        watch.len()
    );
    tcp.write_all(head.as_bytes()).await.expect("head");
    tcp.write_all(&watch).await.expect("body");
    wait_until("the watch stream to open", || {
        server.stats.open_watch_streams() == 1
    })
    .await;
    // Change every watched key, again and again, reading nothing: each state is ten
    // 60 kB values.
    let mut c = server.h2().await;
    let mut round = 0u8;
    let deadline = tokio::time::Instant::now() + STALL_MAX;
    while server.stats.watch_streams_stalled() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the unread stream was never closed"
        );
        round = round.wrapping_add(1);
        let sets = keys
            .iter()
            .map(|k| set(k, bytes_value(&vec![round; 60_000])))
            .collect();
        assert_eq!(c.commit(write_of(vec![], sets)).await.status, AW_SUCCESS);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_until("the stream's slot to be freed", || {
        server.stats.open_watch_streams() == 0
    })
    .await;
    // The connection is closed: reading drains what was sent, then ends.
    let mut sink = Vec::new();
    let drained = tokio::time::timeout(WAIT_MAX, tcp.read_to_end(&mut sink)).await;
    assert!(drained.is_ok(), "the connection is closed");
    // A watch on a connection that reads goes on.
    assert_eq!(c.read(read_of(vec![])).await.status, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_watch_stream_whose_client_reads_stays_open_past_the_send_timeout() {
    let send_timeout = Duration::from_millis(300);
    let config = config().with_watch_send_timeout(send_timeout);
    let server = TestServer::in_memory().with_config(config).spawn().await;
    let (keys, watch) = watch_of_the_most_keys();
    let mut h1 = server.h1().await;
    let res = h1
        .send(sized_request(server.addr, "watch", watch))
        .await
        .expect("the watch stream");
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    // The client reads every frame while the keys change, for several send timeouts.
    let reader = tokio::spawn(async move {
        let mut bytes = 0usize;
        while let Some(frame) = body.frame().await {
            bytes += frame.expect("a frame").into_data().map_or(0, |d| d.len());
        }
        bytes
    });
    let mut c = server.h2().await;
    let until = tokio::time::Instant::now() + send_timeout * 6;
    let mut round = 0u8;
    while tokio::time::Instant::now() < until {
        round = round.wrapping_add(1);
        let sets = keys
            .iter()
            .map(|k| set(k, bytes_value(&vec![round; 60_000])))
            .collect();
        assert_eq!(c.commit(write_of(vec![], sets)).await.status, AW_SUCCESS);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.stats.watch_streams_stalled(), 0);
    assert_eq!(
        server.stats.open_watch_streams(),
        1,
        "the stream is still open"
    );
    assert!(!reader.is_finished(), "the client still reads the stream");
    server.stop().await;
    let received = reader.await.expect("join");
    assert!(
        received > 600_000 * 2,
        "several states arrived ({received} bytes)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_opened_and_reset_streams_never_stops_other_clients() {
    let server = TestServer::in_memory().spawn().await;
    let addr = server.addr;
    // One client opens streams whose bodies never come and cancels each at once (the
    // "rapid reset" pattern), as fast as it can, on as many connections as it needs.
    let flood = tokio::spawn(async move {
        let mut opened = 0u32;
        for _ in 0..8 {
            let sender = h2_sender::<ChannelBody>(addr).await;
            for _ in 0..250 {
                let mut s = sender.clone();
                if s.ready().await.is_err() {
                    break;
                }
                let (_tx, body) = channel_body();
                // Dropped unpolled-to-completion: the client resets the stream.
                let pending = s.send_request(channel_request(addr, "atomic_write", body));
                drop(tokio::time::timeout(Duration::from_micros(50), pending).await);
                opened += 1;
            }
        }
        opened
    });
    let mut other = server.h2().await;
    let mut served = 0;
    while !flood.is_finished() {
        let read = tokio::time::timeout(WAIT_MAX, other.read(read_of(vec![get_range(&key("a"))])))
            .await
            .expect("a read on another connection is answered during the flood");
        assert_eq!(read.status, 200);
        served += 1;
    }
    let opened = flood.await.expect("join");
    assert!(opened >= 250, "the flood opened {opened} streams");
    assert!(served > 0);
    let write = write_of(vec![], vec![set(&key("after"), bytes_value(b"v"))]);
    assert_eq!(server.h2().await.commit(write).await.status, AW_SUCCESS);
    server.stop().await;
}
