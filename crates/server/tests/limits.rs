//! Every limit of `tuplekv_server::limits`, at the limit and one past it. Past a limit the
//! reply is a 4xx with a message (or a 503 with `Retry-After` for a slot that frees up), and
//! nothing is written. The slots and timeouts that guard against slow and hostile clients
//! are tested at their limits in `stalls.rs`.

use tuplekv_testkit::kv_connect as common;
mod numbered;

use bytes::Bytes;
use common::*;
use denokv_proto::datapath as pb;
use http_body_util::Full;
use numbered::{claim, digits, numbered_body, outcome};
use prost::Message;
use tuplekv_engine::Error;
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
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let ranges = |n: usize| read_of((0..n).map(|i| get_range(&raw_key(i, 4))).collect());
    let out: pb::SnapshotReadOutput = c.read(ranges(READ_RANGES_MAX)).await.decode();
    assert_eq!(out.ranges.len(), READ_RANGES_MAX);
    c.read(ranges(READ_RANGES_MAX + 1))
        .await
        .assert_engine_error(
            400,
            "Too many read ranges requested in one read request.",
            &Error::TooManyRanges {
                count: READ_RANGES_MAX + 1,
            },
        );
    server.stop().await;
}

#[tokio::test]
async fn read_entries_at_the_limit_pass_and_one_more_is_refused() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let split = |total: i32| {
        read_of(vec![
            prefix_range(&key("a"), total - 400, false),
            prefix_range(&key("b"), 400, true),
        ])
    };
    assert_eq!(c.read(split(READ_ENTRIES_MAX as i32)).await.status, 200);
    c.read(split(READ_ENTRIES_MAX as i32 + 1))
        .await
        .assert_engine_error(
            400,
            "The total number of entries requested across read ranges in the read request is too large.",
            &Error::TooManyEntries {
                count: READ_ENTRIES_MAX + 1,
            },
        );
    let invalid_limit = "The read range limit of the snapshot read request is invalid.";
    c.read(read_of(vec![prefix_range(&key("a"), 0, false)]))
        .await
        .assert_engine_error(400, invalid_limit, &Error::ZeroLimit);
    for negative in [-1, i32::MIN] {
        let reply = c
            .read(read_of(vec![prefix_range(&key("a"), negative, false)]))
            .await;
        reply.assert_error(400, invalid_limit);
        assert!(
            reply.engine_error().is_none(),
            "a negative limit is the protocol's error, not the engine's"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn read_keys_at_the_read_limit_pass_and_one_byte_more_is_refused() {
    let server = TestServer::in_memory().spawn().await;
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
        .assert_engine_error(
            400,
            "A key exceeds the key size limit.",
            &Error::KeyTooLargeForRead {
                size: READ_KEY_SIZE_MAX + 1,
            },
        );
    server.stop().await;
}

#[tokio::test]
async fn write_keys_at_the_limit_pass_and_one_byte_more_is_refused() {
    let server = TestServer::in_memory().spawn().await;
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
    let too_large = Error::KeyTooLargeForWrite {
        size: WRITE_KEY_SIZE_MAX + 1,
    };
    c.write(write_of(vec![], vec![set(&long, bytes_value(b"v"))]))
        .await
        .assert_engine_error(400, "A key exceeds the key size limit.", &too_large);
    c.write(write_of(vec![check(&long, None)], vec![]))
        .await
        .assert_engine_error(400, "A key exceeds the key size limit.", &too_large);
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
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    c.data("watch", watch(WATCHED_KEYS_MAX + 1, 4))
        .await
        .assert_engine_error(
            400,
            "Too many keys watched in a single watch request.",
            &Error::TooManyWatchedKeys {
                count: WATCHED_KEYS_MAX + 1,
            },
        );
    c.data("watch", watch(1, WRITE_KEY_SIZE_MAX + 1))
        .await
        .assert_engine_error(
            400,
            "A key exceeds the key size limit.",
            &Error::KeyTooLargeForWrite {
                size: WRITE_KEY_SIZE_MAX + 1,
            },
        );
    server.stop().await;
}

#[tokio::test]
async fn checks_at_the_limit_pass_and_one_more_is_refused() {
    let server = TestServer::in_memory().spawn().await;
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
    .assert_engine_error(
        400,
        "Too many checks included in atomic write.",
        &Error::TooManyChecks {
            count: CHECKS_MAX + 1,
        },
    );
    assert!(c.get(&key("d")).await.is_none());
    server.stop().await;
}

#[tokio::test]
async fn mutations_at_the_limit_pass_and_one_more_is_refused() {
    let server = TestServer::in_memory().spawn().await;
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
        .assert_engine_error(
            400,
            "Too many mutations / enqueues included in atomic write.",
            &Error::TooManyMutations {
                count: MUTATIONS_MAX + 1,
            },
        );
    server.stop().await;
}

/// A key `[0x02, tag, i (4 bytes), "0000", 0x00]`: four one-digit placeholders at bytes 6 to 9.
fn placeholder_key(tag: u8, i: usize) -> Vec<u8> {
    let mut k = vec![0x02, tag];
    k.extend((i as u32).to_be_bytes());
    k.extend(b"0000\x00");
    k
}

#[tokio::test]
async fn counters_per_commit_at_the_limit_pass_and_one_more_is_refused() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let numbering = |n: usize| tuplekv_wire::Numbering {
        counters: (0..n).map(|i| claim(&raw_key(i, 4), 10, 2)).collect(),
        slots: Vec::new(),
    };
    let write = || write_of(vec![], vec![set(&key("c"), bytes_value(b"v"))]);
    let reply = c
        .data(
            "atomic_write",
            numbered_body(write(), numbering(COUNTERS_PER_COMMIT_MAX)),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        outcome(&reply).expect("a report").numbers,
        vec![10; COUNTERS_PER_COMMIT_MAX]
    );
    for i in 0..COUNTERS_PER_COMMIT_MAX {
        let counter = c.get(&raw_key(i, 4)).await.expect("a counter");
        assert_eq!(counter.value, 12u64.to_le_bytes());
    }
    c.data(
        "atomic_write",
        numbered_body(write(), numbering(COUNTERS_PER_COMMIT_MAX + 1)),
    )
    .await
    .assert_error(
        400,
        &format!(
            "Invalid numbering: {} counters in one write (max {COUNTERS_PER_COMMIT_MAX}).",
            COUNTERS_PER_COMMIT_MAX + 1
        ),
    );
    let counter = c.get(&raw_key(0, 4)).await.expect("a counter");
    assert_eq!(
        counter.value,
        12u64.to_le_bytes(),
        "a refused write took numbers"
    );
    server.stop().await;
}

#[tokio::test]
async fn number_slots_at_the_limit_pass_and_one_more_is_refused() {
    use tuplekv_wire::SlotTargetKind::{CheckKey, MutationKey, MutationValue};
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    // Every check key, mutation key and value holds four one-digit placeholders, all taking
    // the one number the write claims: NUMBER_SLOTS_MAX is exactly that many.
    assert_eq!(NUMBER_SLOTS_MAX, 4 * (CHECKS_MAX + 2 * MUTATIONS_MAX));
    let write = write_of(
        (0..CHECKS_MAX)
            .map(|i| check(&placeholder_key(b'c', i), None))
            .collect(),
        (0..MUTATIONS_MAX)
            .map(|i| set(&placeholder_key(b'm', i), bytes_value(b"0000")))
            .collect(),
    );
    let four = |target, index: usize, from: u64| {
        (0..4).map(move |k| digits(0, 0, target, index as u64, from + k, 1, false))
    };
    let mut slots: Vec<_> = (0..CHECKS_MAX).flat_map(|i| four(CheckKey, i, 6)).collect();
    for i in 0..MUTATIONS_MAX {
        slots.extend(four(MutationKey, i, 6));
        slots.extend(four(MutationValue, i, 0));
    }
    assert_eq!(slots.len(), NUMBER_SLOTS_MAX);
    let counter = key("counter");
    let numbering = |slots: Vec<tuplekv_wire::NumberSlot>| tuplekv_wire::Numbering {
        counters: vec![claim(&counter, 7, 1)],
        slots,
    };
    let mut past = slots.clone();
    past.push(slots[0].clone());
    let reply = c
        .data(
            "atomic_write",
            numbered_body(write.clone(), numbering(slots)),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(outcome(&reply).expect("a report").numbers, vec![7]);
    let last = c
        .get(
            &placeholder_key(b'm', MUTATIONS_MAX - 1)
                .iter()
                .map(|&b| if b == b'0' { b'7' } else { b })
                .collect::<Vec<_>>(),
        )
        .await
        .expect("the last mutation, numbered");
    assert_eq!(last.value, b"7777");
    c.data("atomic_write", numbered_body(write, numbering(past)))
        .await
        .assert_error(
            400,
            &format!(
                "Invalid numbering: {} number slots in one write (max {NUMBER_SLOTS_MAX}).",
                NUMBER_SLOTS_MAX + 1
            ),
        );
    let counter = c.get(&counter).await.expect("the counter");
    assert_eq!(
        counter.value,
        8u64.to_le_bytes(),
        "a refused write took a number"
    );
    server.stop().await;
}

#[tokio::test]
async fn values_at_the_limit_pass_and_one_byte_more_is_refused() {
    let server = TestServer::in_memory().spawn().await;
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
    .assert_engine_error(
        400,
        "A value exceeds the value size limit.",
        &Error::ValueTooLarge {
            size: VALUE_SIZE_MAX + 1,
        },
    );
    server.stop().await;
}

#[tokio::test]
async fn total_mutation_size_at_the_limit_passes_and_one_byte_more_is_refused() {
    let server = TestServer::in_memory().spawn().await;
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
    c.write(write(rest + 1)).await.assert_engine_error(
        400,
        "The total size of the atomic write is too large.",
        &Error::TotalMutationSizeTooLarge {
            size: TOTAL_MUTATION_SIZE_MAX + 1,
        },
    );
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
    let server = TestServer::in_memory().spawn().await;
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

/// A raw HTTP/1.1 `snapshot_read` whose head (request line, headers, blank line) is exactly
/// `len` bytes, padded by an `x-padding` header, followed by its body.
fn h1_request_of_head_size(addr: std::net::SocketAddr, len: usize) -> Vec<u8> {
    let body = read_of(vec![get_range(&key("a"))]).encode_to_vec();
    let head = |pad: usize| {
        format!(
            "POST /v2/snapshot_read HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\n\
             x-denokv-version: 3\r\nx-denokv-database-id: {NIL_ID}\r\ncontent-length: {}\r\n\
             x-padding: {}\r\n\r\n",
            body.len(),
            "p".repeat(pad)
        )
    };
    let mut req = head(len - head(0).len()).into_bytes();
    assert_eq!(req.len(), len, "head arithmetic");
    req.extend_from_slice(&body);
    req
}

/// Sends raw `bytes` on a new connection; the reply's status, or the I/O error that ended
/// the exchange.
async fn h1_raw_status(addr: std::net::SocketAddr, bytes: &[u8]) -> std::io::Result<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.write_all(bytes).await?;
        let mut reply = Vec::new();
        let mut buf = [0u8; 1024];
        while !reply.windows(2).any(|w| w == b"\r\n") {
            let n = tcp.read(&mut buf).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            reply.extend_from_slice(&buf[..n]);
        }
        let line = String::from_utf8_lossy(&reply).into_owned();
        Ok(line[9..12].parse().expect("a status code"))
    };
    tokio::time::timeout(WAIT_MAX, exchange)
        .await
        .expect("the server answers or closes")
}

/// The size h2 counts for a request's header list: every field, pseudo-headers included, as
/// name + value + 32 bytes (RFC 9113 §6.5.2).
fn h2_header_list_size<B>(req: &hyper::Request<B>) -> usize {
    let uri = req.uri();
    let pseudo = [
        (":method", req.method().as_str().len()),
        (":scheme", uri.scheme_str().expect("scheme").len()),
        (
            ":authority",
            uri.authority().expect("authority").as_str().len(),
        ),
        (":path", uri.path().len()),
    ];
    let pseudo: usize = pseudo.iter().map(|(n, v)| n.len() + v + 32).sum();
    let fields: usize = req
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 32)
        .sum();
    pseudo + fields
}

/// A `snapshot_read` whose h2 header list is exactly `len` bytes.
fn h2_request_of_header_list_size(
    addr: std::net::SocketAddr,
    len: usize,
) -> hyper::Request<Full<Bytes>> {
    let body = read_of(vec![get_range(&key("a"))]).encode_to_vec();
    let req = |pad: usize| {
        data_request(addr, "snapshot_read", body.clone())
            // Set here so the client adds nothing the size does not count.
            .header("content-length", &body.len().to_string())
            .header("x-padding", &"p".repeat(pad))
            .body_bytes()
    };
    let req = req(len - h2_header_list_size(&req(0)));
    assert_eq!(h2_header_list_size(&req), len, "header list arithmetic");
    req
}

#[tokio::test]
async fn h1_header_blocks_at_the_limit_pass_and_one_byte_more_is_431() {
    let server = TestServer::in_memory().spawn().await;
    let at = h1_raw_status(
        server.addr,
        &h1_request_of_head_size(server.addr, HEADER_BLOCK_SIZE_MAX),
    )
    .await;
    assert_eq!(at.expect("a reply"), 200);
    let past = h1_raw_status(
        server.addr,
        &h1_request_of_head_size(server.addr, HEADER_BLOCK_SIZE_MAX + 1),
    )
    .await;
    // The server answers 431 and closes; the close may reset the connection before the
    // client reads the answer (it has unread bytes of ours).
    match past {
        Ok(status) => assert_eq!(status, 431),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    server.stop().await;
}

#[tokio::test]
async fn h2_header_lists_at_the_limit_pass_and_one_byte_more_is_431() {
    let server = TestServer::in_memory().spawn().await;
    let mut h2 = server.h2().await;
    let at = h2_request_of_header_list_size(server.addr, HEADER_BLOCK_SIZE_MAX);
    assert_eq!(h2.call(at).await.status, 200);
    let past = h2_request_of_header_list_size(server.addr, HEADER_BLOCK_SIZE_MAX + 1);
    let reply = h2.call(past).await;
    reply.assert_error(431, "");
    // The connection goes on serving.
    assert_eq!(h2.read(read_of(vec![])).await.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn connections_at_the_limit_that_showed_the_token_are_served_and_one_more_is_closed() {
    // Both open connections show the token, so neither is closed to make room (see
    // `stalls.rs` for connections that did not).
    let server = TestServer::in_memory()
        .options(|mut o| {
            o.connections_max = 2;
            o
        })
        .spawn()
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

/// The server's first SETTINGS frame on a new h2c connection, as (identifier, value) pairs.
async fn server_h2_settings(addr: std::net::SocketAddr) -> Vec<(u16, u32)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const SETTINGS: u8 = 0x4;
    let exchange = async {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .expect("preface");
        // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
        tcp.write_all(&[0, 0, 0, SETTINGS, 0, 0, 0, 0, 0])
            .await
            .expect("settings");
        let mut head = [0u8; 9];
        tcp.read_exact(&mut head).await.expect("a frame header");
        assert_eq!(head[3], SETTINGS, "the server's first frame is SETTINGS");
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        tcp.read_exact(&mut payload).await.expect("the settings");
        payload
            .chunks_exact(6)
            .map(|e| {
                (
                    u16::from_be_bytes([e[0], e[1]]),
                    u32::from_be_bytes([e[2], e[3], e[4], e[5]]),
                )
            })
            .collect::<Vec<_>>()
    };
    tokio::time::timeout(WAIT_MAX, exchange)
        .await
        .expect("the server's SETTINGS")
}

const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

#[tokio::test]
async fn h2_connections_advertise_the_stream_and_header_limits() {
    let server = TestServer::in_memory().spawn().await;
    let settings = server_h2_settings(server.addr).await;
    assert!(
        settings.contains(&(
            SETTINGS_MAX_CONCURRENT_STREAMS,
            H2_STREAMS_PER_CONNECTION_MAX
        )),
        "{settings:?}"
    );
    assert!(
        settings
            .iter()
            .any(|&(id, v)| id == SETTINGS_MAX_HEADER_LIST_SIZE
                && v as usize > HEADER_BLOCK_SIZE_MAX),
        "a header list of HEADER_BLOCK_SIZE_MAX is accepted: {settings:?}"
    );
    assert!(
        settings.contains(&(SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW)),
        "{settings:?}"
    );
    server.stop().await;
    let configured = TestServer::in_memory()
        .options(|mut o| {
            o.h2_streams_per_connection_max = 2;
            o
        })
        .spawn()
        .await;
    let settings = server_h2_settings(configured.addr).await;
    assert!(
        settings.contains(&(SETTINGS_MAX_CONCURRENT_STREAMS, 2)),
        "{settings:?}"
    );
    configured.stop().await;
}

/// A metadata exchange body of exactly `len` bytes (JSON padded with spaces).
fn metadata_body(len: usize) -> String {
    let json = r#"{"supportedVersions":[2,3]}"#;
    format!("{json}{}", " ".repeat(len - json.len()))
}

#[tokio::test]
async fn metadata_bodies_at_the_limit_pass_and_one_byte_more_is_413() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let at = c.metadata(TOKEN, &metadata_body(METADATA_BODY_MAX)).await;
    assert_eq!(at.status, 200, "{}", at.text());
    c.metadata(TOKEN, &metadata_body(METADATA_BODY_MAX + 1))
        .await
        .assert_error(
            413,
            &format!("The request body is too large (max {METADATA_BODY_MAX} bytes)."),
        );
    // Without a valid token too: the body is cut off while it is read.
    let mut h1 = server.h1().await;
    assert_eq!(
        h1.metadata("not-the-token", &metadata_body(METADATA_BODY_MAX + 1))
            .await
            .status,
        413
    );
    server.stop().await;
}

#[tokio::test]
async fn a_large_request_body_past_the_in_flight_limit_waits_for_a_free_slot() {
    let config = ServerConfig::new(TOKEN)
        .expect("a long enough token")
        .with_request_bodies_in_flight_max(1);
    let server = TestServer::in_memory().with_config(config).spawn().await;
    // With the slot free, large bodies are served one after the other.
    let mut c = server.h2().await;
    assert_eq!(
        c.data("snapshot_read", padded_read(SMALL_BODY_MAX + 1))
            .await
            .status,
        200
    );
    assert_eq!(
        c.data("snapshot_read", padded_read(SMALL_BODY_MAX + 1))
            .await
            .status,
        200
    );
    // A large body still arriving holds the one slot (taken once it is past a small body).
    let mut sender = h2_sender::<ChannelBody>(server.addr).await;
    let (tx, body) = channel_body();
    sender.ready().await.expect("ready");
    let holder =
        tokio::spawn(sender.send_request(channel_request(server.addr, "snapshot_read", body)));
    let large = padded_read(SMALL_BODY_MAX + 2);
    send_frame(&tx, large[..=SMALL_BODY_MAX].to_vec()).await;
    wait_until("the first body to take the slot", || {
        server.stats.snapshot_read_requests() == 3
    })
    .await;
    // Another large body waits for the slot instead of failing.
    let mut other = server.h1().await;
    let waiting = tokio::spawn(async move {
        other
            .data("snapshot_read", padded_read(SMALL_BODY_MAX + 1))
            .await
    });
    wait_until("the second body to wait", || {
        server.stats.request_bodies_waiting() == 1
    })
    .await;
    assert!(!waiting.is_finished(), "served while the slot was taken");
    // A small body needs no slot: served at once.
    assert_eq!(c.read(read_of(vec![])).await.status, 200);
    send_frame(&tx, large[SMALL_BODY_MAX + 1..].to_vec()).await;
    drop(tx);
    let first = holder.await.expect("join").expect("reply");
    assert_eq!(first.status(), 200);
    let second = tokio::time::timeout(WAIT_MAX, waiting)
        .await
        .expect("served once the slot is free")
        .expect("join");
    assert_eq!(second.status, 200);
    assert_eq!(server.stats.request_bodies_waiting(), 0);
    server.stop().await;
}

#[tokio::test]
async fn bodies_of_a_small_bodys_size_need_no_slot_and_one_byte_more_does() {
    let config = ServerConfig::new(TOKEN)
        .expect("a long enough token")
        .with_request_bodies_in_flight_max(1)
        .with_body_timeouts(
            std::time::Duration::from_millis(200),
            REQUEST_BODY_READ_TIMEOUT,
        );
    let server = TestServer::in_memory().with_config(config).spawn().await;
    // The one slot, held by a body that stalls past a small body's size.
    let mut sender = h2_sender::<ChannelBody>(server.addr).await;
    let (tx, body) = channel_body();
    sender.ready().await.expect("ready");
    let _holder =
        tokio::spawn(sender.send_request(channel_request(server.addr, "snapshot_read", body)));
    send_frame(&tx, vec![0; SMALL_BODY_MAX + 1]).await;
    wait_until("the stalled body to hold the slot", || {
        server.stats.snapshot_read_requests() == 1
    })
    .await;
    let mut c = server.h2().await;
    assert_eq!(
        c.data("snapshot_read", padded_read(SMALL_BODY_MAX))
            .await
            .status,
        200,
        "a body of exactly SMALL_BODY_MAX bytes is read without a slot"
    );
    let past = c
        .data("snapshot_read", padded_read(SMALL_BODY_MAX + 1))
        .await;
    assert_eq!(
        past.status, 503,
        "one byte more waits for the slot, then 503"
    );
    assert_eq!(
        past.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    drop(tx);
    server.stop().await;
}

#[tokio::test]
async fn idle_http1_connections_are_closed_after_the_header_read_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::in_memory()
        .options(|mut o| {
            o.h1_header_read_timeout = std::time::Duration::from_millis(200);
            o
        })
        .spawn()
        .await;
    // A connection that never sends a byte.
    let mut silent = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let n = tokio::time::timeout(WAIT_MAX, silent.read(&mut [0u8; 16]))
        .await
        .expect("the server closes a silent connection")
        .expect("read");
    assert_eq!(n, 0);
    // A kept-alive connection after its request is answered.
    let mut idle = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let req = h1_request_of_head_size(server.addr, 1024);
    idle.write_all(&req).await.expect("request");
    let mut reply = Vec::new();
    tokio::time::timeout(WAIT_MAX, idle.read_to_end(&mut reply))
        .await
        .expect("the server closes an idle kept-alive connection")
        .expect("read");
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    wait_until("both connections to be freed", || {
        server.stats.open_connections() == 0
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn a_connection_limit_past_the_semaphore_maximum_is_lowered_not_a_panic() {
    let server = TestServer::in_memory()
        .options(|mut o| {
            o.connections_max = usize::MAX;
            o
        })
        .spawn()
        .await;
    assert_eq!(server.h2().await.read(read_of(vec![])).await.status, 200);
    server.stop().await;
}

#[test]
fn access_tokens_of_the_least_length_are_accepted_and_one_shorter_refused() {
    let at = "t".repeat(ACCESS_TOKEN_LEN_MIN);
    assert!(ServerConfig::new(at).is_ok());
    let short = "t".repeat(ACCESS_TOKEN_LEN_MIN - 1);
    let err = ServerConfig::new(short).expect_err("a short token");
    assert_eq!(
        err.to_string(),
        format!(
            "the access token is {} characters; it must have at least {ACCESS_TOKEN_LEN_MIN}",
            ACCESS_TOKEN_LEN_MIN - 1
        )
    );
    assert!(ServerConfig::new("").is_err(), "an empty token");
}

#[test]
fn a_zero_body_slot_limit_is_raised_to_one() {
    let config = ServerConfig::new(TOKEN)
        .expect("a long enough token")
        .with_request_bodies_in_flight_max(0);
    assert!(format!("{config:?}").contains("request_bodies_in_flight_max: 1"));
}
