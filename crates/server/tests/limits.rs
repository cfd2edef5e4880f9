//! Every limit of `tuplekv_server::limits`, at the limit and one past it. Past a limit the
//! reply is a 4xx with a message, and nothing is written.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use denokv_proto::datapath as pb;
use http_body_util::Full;
use prost::Message;
use tuplekv_engine::Database;
use tuplekv_server::ServerConfig;
use tuplekv_server::limits::*;

/// A raw key of exactly `len` bytes, distinct for each `i`.
fn raw_key(i: usize, len: usize) -> Vec<u8> {
    let mut k = vec![b'k'; len];
    k[0] = 0x02;
    let tag = (i as u32).to_be_bytes();
    let n = len.min(5) - 1;
    k[1..=n].copy_from_slice(&tag[4 - n..]);
    k
}

#[tokio::test]
async fn read_ranges_at_the_limit_pass_and_one_more_is_refused() {
    let server = TestServer::start().await;
    let mut c = server.h2().await;
    let ranges = |n: usize| read_of((0..n).map(|i| get_range(&raw_key(i, 4))).collect());
    let out: pb::SnapshotReadOutput = c.read(ranges(READ_RANGES_MAX)).await.decode();
    assert_eq!(out.ranges.len(), READ_RANGES_MAX);
    c.read(ranges(READ_RANGES_MAX + 1))
        .await
        .assert_error(400, "Too many read ranges requested in one read request.");
    server.stop().await;
}

#[tokio::test]
async fn read_entries_at_the_limit_pass_and_one_more_is_refused() {
    let server = TestServer::start().await;
    let mut c = server.h2().await;
    let split = |total: i32| {
        read_of(vec![
            prefix_range(&key("a"), total - 400, false),
            prefix_range(&key("b"), 400, true),
        ])
    };
    assert_eq!(c.read(split(READ_ENTRIES_MAX as i32)).await.status, 200);
    c.read(split(READ_ENTRIES_MAX as i32 + 1)).await.assert_error(
        400,
        "The total number of entries requested across read ranges in the read request is too large.",
    );
    for bad in [0, -1, i32::MIN] {
        c.read(read_of(vec![prefix_range(&key("a"), bad, false)]))
            .await
            .assert_error(
                400,
                "The read range limit of the snapshot read request is invalid.",
            );
    }
    server.stop().await;
}

#[tokio::test]
async fn read_keys_at_the_read_limit_pass_and_one_byte_more_is_refused() {
    let server = TestServer::start().await;
    let mut c = server.h2().await;
    let range = |len: usize| pb::ReadRange {
        start: raw_key(0, len),
        end: vec![0xff; len],
        limit: 1,
        reverse: false,
    };
    assert_eq!(
        c.read(read_of(vec![range(READ_KEY_SIZE_MAX)])).await.status,
        200
    );
    c.read(read_of(vec![range(READ_KEY_SIZE_MAX + 1)]))
        .await
        .assert_error(400, "A key exceeds the key size limit.");
    server.stop().await;
}

#[tokio::test]
async fn write_keys_at_the_limit_pass_and_one_byte_more_is_refused() {
    let server = TestServer::start().await;
    let mut c = server.h2().await;
    let k = raw_key(1, WRITE_KEY_SIZE_MAX);
    let out = c
        .commit(write_of(
            vec![check(&k, None)],
            vec![set(&k, bytes_value(b"v"))],
        ))
        .await;
    assert_eq!(out.status, AW_SUCCESS);
    assert!(
        c.get(&k).await.is_some(),
        "a key at the write limit can be read back"
    );
    let long = raw_key(2, WRITE_KEY_SIZE_MAX + 1);
    c.write(write_of(vec![], vec![set(&long, bytes_value(b"v"))]))
        .await
        .assert_error(400, "A key exceeds the key size limit.");
    c.write(write_of(vec![check(&long, None)], vec![]))
        .await
        .assert_error(400, "A key exceeds the key size limit.");
    server.stop().await;
}

#[tokio::test]
async fn watched_keys_at_the_limits_decode_and_past_them_are_refused() {
    let watch = |n: usize, len: usize| {
        pb::Watch {
            keys: (0..n)
                .map(|i| pb::WatchKey {
                    key: raw_key(i, len),
                })
                .collect(),
        }
        .encode_to_vec()
    };
    let keys = tuplekv_server::protocol::decode_watch(&watch(WATCHED_KEYS_MAX, WRITE_KEY_SIZE_MAX))
        .expect("at the limits");
    assert_eq!(keys.len(), WATCHED_KEYS_MAX);
    let server = TestServer::start().await;
    let mut c = server.h2().await;
    c.data("watch", watch(WATCHED_KEYS_MAX + 1, 4))
        .await
        .assert_error(400, "Too many keys watched in a single watch request.");
    c.data("watch", watch(1, WRITE_KEY_SIZE_MAX + 1))
        .await
        .assert_error(400, "A key exceeds the key size limit.");
    server.stop().await;
}

#[tokio::test]
async fn checks_at_the_limit_pass_and_one_more_is_refused() {
    let server = TestServer::start().await;
    let mut c = server.h2().await;
    let checks = |n: usize| {
        (0..n)
            .map(|i| check(&raw_key(i, 4), None))
            .collect::<Vec<_>>()
    };
    let out = c
        .commit(write_of(
            checks(CHECKS_MAX),
            vec![set(&key("c"), bytes_value(b"v"))],
        ))
        .await;
    assert_eq!(out.status, AW_SUCCESS);
    c.write(write_of(
        checks(CHECKS_MAX + 1),
        vec![set(&key("d"), bytes_value(b"v"))],
    ))
    .await
    .assert_error(400, "Too many checks included in atomic write.");
    assert!(c.get(&key("d")).await.is_none());
    server.stop().await;
}

#[tokio::test]
async fn mutations_at_the_limit_pass_and_one_more_is_refused() {
    let server = TestServer::start().await;
    let mut c = server.h2().await;
    let sets = |n: usize| {
        (0..n)
            .map(|i| set(&raw_key(i, 4), u64_value(1)))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        c.commit(write_of(vec![], sets(MUTATIONS_MAX))).await.status,
        AW_SUCCESS
    );
    c.write(write_of(vec![], sets(MUTATIONS_MAX + 1)))
        .await
        .assert_error(
            400,
            "Too many mutations / enqueues included in atomic write.",
        );
    server.stop().await;
}

#[tokio::test]
async fn values_at_the_limit_pass_and_one_byte_more_is_refused() {
    let server = TestServer::start().await;
    let mut c = server.h2().await;
    let big = vec![7u8; VALUE_SIZE_MAX];
    assert_eq!(
        c.commit(write_of(vec![], vec![set(&key("v"), bytes_value(&big))]))
            .await
            .status,
        AW_SUCCESS
    );
    assert_eq!(c.get(&key("v")).await.expect("v").value, big);
    c.write(write_of(
        vec![],
        vec![set(&key("w"), v8_value(&vec![7u8; VALUE_SIZE_MAX + 1]))],
    ))
    .await
    .assert_error(400, "A value exceeds the value size limit.");
    server.stop().await;
}

#[tokio::test]
async fn total_mutation_size_at_the_limit_passes_and_one_byte_more_is_refused() {
    let server = TestServer::start().await;
    let mut c = server.h2().await;
    // Each set counts twice its 4-byte key plus its value: 12 full values, then the rest.
    let per_full = 2 * 4 + VALUE_SIZE_MAX;
    let rest = TOTAL_MUTATION_SIZE_MAX - 12 * per_full - 2 * 4;
    let write = |last: usize| {
        let mut sets: Vec<_> = (0..12)
            .map(|i| set(&raw_key(i, 4), bytes_value(&vec![1; VALUE_SIZE_MAX])))
            .collect();
        sets.push(set(&raw_key(12, 4), bytes_value(&vec![1; last])));
        write_of(vec![], sets)
    };
    assert_eq!(c.commit(write(rest)).await.status, AW_SUCCESS);
    c.write(write(rest + 1))
        .await
        .assert_error(400, "The total size of the atomic write is too large.");
    server.stop().await;
}

/// A `SnapshotRead` of exactly `len` bytes: one small range, padded with an unknown field
/// (which protobuf decoders skip).
fn padded_read(len: usize) -> Vec<u8> {
    let mut body = read_of(vec![get_range(&key("a"))]).encode_to_vec();
    // Field 15, wire type 2: tag 0x7a, then a varint length, then the bytes.
    let room = len - body.len();
    let varint_len = |n: usize| (1..=10).find(|&b| n < 1 << (7 * b)).unwrap_or(10);
    let pad = (0..room)
        .rev()
        .find(|&pad| 1 + varint_len(pad) + pad == room)
        .expect("a padding length fits");
    body.push(0x7a);
    prost::encoding::encode_varint(pad as u64, &mut body);
    body.resize(body.len() + pad, 0);
    assert_eq!(body.len(), len, "padding arithmetic");
    body
}

#[tokio::test]
async fn request_bodies_at_the_limit_pass_and_one_byte_more_is_413() {
    let server = TestServer::start().await;
    let mut c = server.h2().await;
    assert_eq!(
        c.data("snapshot_read", padded_read(REQUEST_BODY_MAX))
            .await
            .status,
        200
    );
    let reply = c
        .data("snapshot_read", padded_read(REQUEST_BODY_MAX + 1))
        .await;
    reply.assert_error(
        413,
        &format!("The request body is too large (max {REQUEST_BODY_MAX} bytes)."),
    );
    let mut h1 = server.h1().await;
    assert_eq!(
        h1.data("snapshot_read", padded_read(REQUEST_BODY_MAX + 1))
            .await
            .status,
        413
    );
    server.stop().await;
}

#[tokio::test]
async fn header_blocks_near_the_limit_pass_and_past_it_are_refused() {
    let server = TestServer::start().await;
    let body = read_of(vec![get_range(&key("a"))]).encode_to_vec();
    let req = |len: usize| {
        data_request(server.addr, "snapshot_read", body.clone())
            .header("x-padding", &"p".repeat(len))
            .body_bytes()
    };
    let mut h1 = server.h1().await;
    assert_eq!(h1.call(req(HEADER_BLOCK_SIZE_MAX - 1024)).await.status, 200);
    let mut h2 = server.h2().await;
    assert_eq!(h2.call(req(HEADER_BLOCK_SIZE_MAX - 1024)).await.status, 200);
    // HTTP/1.1: 431 and the connection closes.
    let mut h1 = server.h1().await;
    let past = h1.send(req(HEADER_BLOCK_SIZE_MAX + 1)).await;
    assert!(
        past.map(|r| r.status().as_u16() == 431).unwrap_or(true),
        "h1 refuses a large header block"
    );
    // HTTP/2: the stream is refused (431 or a reset), never served.
    let mut h2 = server.h2().await;
    let past = h2.send(req(HEADER_BLOCK_SIZE_MAX + 1)).await;
    assert!(
        past.map(|r| r.status().is_client_error()).unwrap_or(true),
        "h2 refuses a large header block"
    );
    server.stop().await;
}

#[tokio::test]
async fn connections_at_the_limit_are_served_and_one_more_is_closed() {
    let server = TestServer::start_with(
        Arc::new(Database::in_memory()),
        ServerConfig::new(TOKEN),
        |mut o| {
            o.connections_max = 2;
            o
        },
    )
    .await;
    let mut a = server.h2().await;
    let mut b = server.h1().await;
    assert_eq!(a.read(read_of(vec![])).await.status, 200);
    assert_eq!(b.read(read_of(vec![])).await.status, 200);
    assert_eq!(server.stats.open_connections(), 2);
    let tcp = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("tcp connect");
    let third = hyper::client::conn::http2::handshake::<_, _, Full<Bytes>>(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await;
    // The handshake itself may succeed (the preface is written before the server's close is
    // seen); a request on it must fail.
    if let Ok((mut sender, conn)) = third {
        tokio::spawn(conn);
        let req = data_request(server.addr, "snapshot_read", vec![]).body_bytes();
        assert!(
            sender.send_request(req).await.is_err(),
            "the third connection is closed"
        );
    }
    assert_eq!(server.stats.connections_refused(), 1);
    drop(b);
    // The freed slot takes a new connection once the server has seen the close.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.stats.open_connections() > 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "connection not freed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let mut c = server.h2().await;
    assert_eq!(c.read(read_of(vec![])).await.status, 200);
    assert_eq!(a.read(read_of(vec![])).await.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn h2_streams_at_the_limit_run_and_one_more_waits_for_a_free_stream() {
    let server = TestServer::start_with(
        Arc::new(Database::in_memory()),
        ServerConfig::new(TOKEN),
        |mut o| {
            o.h2_streams_per_connection_max = 2;
            o
        },
    )
    .await;
    let tcp = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("handshake");
    tokio::spawn(conn);
    // One exchange first, so the client has the server's SETTINGS (its stream limit).
    let (warm_tx, warm_rx) = tokio::sync::mpsc::channel(1);
    let warm = data_request(server.addr, "snapshot_read", vec![])
        .body_bytes()
        .map(|_| http_body_util::StreamBody::new(tokio_stream_of(warm_rx)));
    drop(warm_tx);
    let mut s = sender.clone();
    s.ready().await.expect("ready");
    assert_eq!(s.send_request(warm).await.expect("warm-up").status(), 200);
    // Two requests whose bodies stay open hold both streams.
    let mut holders = Vec::new();
    let mut body_senders = Vec::new();
    for _ in 0..2 {
        let (tx, rx) = tokio::sync::mpsc::channel::<
            Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
        >(1);
        let body = http_body_util::StreamBody::new(tokio_stream_of(rx));
        let req = data_request(server.addr, "snapshot_read", vec![])
            .body_bytes()
            .map(|_| body);
        let mut s = sender.clone();
        s.ready().await.expect("ready");
        holders.push(tokio::spawn(async move { s.send_request(req).await }));
        body_senders.push(tx);
    }
    let mut third_sender = sender.clone();
    // The third stream cannot start while two are open: it gets no reply.
    let (tx3, rx3) = tokio::sync::mpsc::channel(1);
    let body3 = http_body_util::StreamBody::new(tokio_stream_of(rx3));
    let req3 = data_request(server.addr, "snapshot_read", vec![])
        .body_bytes()
        .map(|_| body3);
    tx3.send(Ok(hyper::body::Frame::data(Bytes::from(
        read_of(vec![]).encode_to_vec(),
    ))))
    .await
    .expect("send");
    drop(tx3);
    let third = tokio::spawn(async move {
        third_sender.ready().await?;
        third_sender.send_request(req3).await
    });
    let early = tokio::time::timeout(std::time::Duration::from_millis(300), async {
        while !third.is_finished() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    if early.is_ok() {
        panic!("a third stream ran while two were open: {:?}", third.await);
    }
    // Finishing one held request frees a stream for it.
    let empty = read_of(vec![]).encode_to_vec();
    let tx = body_senders.remove(0);
    tx.send(Ok(hyper::body::Frame::data(Bytes::from(empty))))
        .await
        .expect("send");
    drop(tx);
    let first = holders.remove(0).await.expect("join").expect("reply");
    assert_eq!(first.status(), 200);
    let third = third.await.expect("join").expect("reply");
    assert_eq!(third.status(), 200);
    drop(body_senders);
    server.stop().await;
}

/// A stream over an mpsc receiver (what `tokio_stream::wrappers::ReceiverStream` does).
fn tokio_stream_of<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + Sync + Unpin {
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}
