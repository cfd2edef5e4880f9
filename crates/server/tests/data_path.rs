//! The data path: header checks in denokv's order, content types, malformed bodies, and the
//! engine's semantics seen through `snapshot_read` and `atomic_write`.

use tuplekv_testkit::kv_connect as common;

use common::*;
use denokv_proto::datapath as pb;
use prost::Message;
use tuplekv_server::{CommitMode, ServerConfig};

#[tokio::test]
async fn data_path_checks_version_then_token_then_database_id() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let body = read_of(vec![get_range(&key("a"))]).encode_to_vec();
    let req = || data_request(server.addr, "snapshot_read", body.clone());
    let version = "Expected protocol version 2.";
    // A wrong version wins over a wrong token and a wrong id.
    let all_wrong = req()
        .header("x-denokv-version", "4")
        .header("authorization", "Bearer nope")
        .header("x-denokv-database-id", "nope");
    c.call(all_wrong.body_bytes())
        .await
        .assert_error(400, version);
    c.call(req().without("x-denokv-version").body_bytes())
        .await
        .assert_error(400, version);
    // Then the token, before the id.
    let bad_token = req()
        .header("authorization", "Bearer nope")
        .header("x-denokv-database-id", "nope");
    c.call(bad_token.body_bytes())
        .await
        .assert_error(401, "Invalid access token.");
    c.call(req().without("authorization").body_bytes())
        .await
        .assert_error(401, "Malformed authorization header.");
    // Then the id: it must be the nil UUID.
    for id in ["nope", "12345678-1234-1234-1234-123456789abc"] {
        c.call(req().header("x-denokv-database-id", id).body_bytes())
            .await
            .assert_error(400, "Invalid database id.");
    }
    c.call(req().without("x-denokv-database-id").body_bytes())
        .await
        .assert_error(400, "Invalid database id.");
    assert_eq!(
        c.call(req().header("x-denokv-version", "2").body_bytes())
            .await
            .status,
        200
    );
    server.stop().await;
}

#[tokio::test]
async fn data_path_version_1_uses_the_transaction_domain_id() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h1().await;
    let body = read_of(vec![get_range(&key("a"))]).encode_to_vec();
    let v1 = data_request(server.addr, "snapshot_read", body)
        .without("x-denokv-version")
        .without("x-denokv-database-id");
    let ok = v1.header("x-transaction-domain-id", NIL_ID);
    assert_eq!(c.call(ok.body_bytes()).await.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn data_path_accepts_no_content_type_or_protobuf_and_refuses_others_with_415() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let body = read_of(vec![get_range(&key("a"))]).encode_to_vec();
    let req = || data_request(server.addr, "snapshot_read", body.clone());
    assert_eq!(c.call(req().body_bytes()).await.status, 200);
    let proto = req().header("content-type", "application/x-protobuf");
    assert_eq!(c.call(proto.body_bytes()).await.status, 200);
    let json = c
        .call(
            req()
                .header("content-type", "application/json")
                .body_bytes(),
        )
        .await;
    assert_eq!(json.status, 415);
    assert!(
        json.text().contains("application/x-protobuf"),
        "{}",
        json.text()
    );
    server.stop().await;
}

#[tokio::test]
async fn unknown_paths_are_404_resource_not_found() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    for path in ["v2/nope", "v3/snapshot_read", "x"] {
        let req = hyper::Request::post(format!("http://{}/{path}", server.addr))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .expect("request");
        c.call(req).await.assert_error(404, "Resource not found.");
    }
    server.stop().await;
}

#[tokio::test]
async fn malformed_and_truncated_protobuf_is_400_request_protobuf_is_invalid() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let good = write_of(vec![], vec![set(&key("a"), bytes_value(b"v"))]).encode_to_vec();
    for (method, body) in [
        ("atomic_write", good[..good.len() - 2].to_vec()),
        ("atomic_write", vec![0xff, 0xff, 0xff]),
        ("snapshot_read", vec![0x0a, 0x05, 0x01]),
        ("watch", vec![0x0a]),
    ] {
        let reply = c.data(method, body).await;
        assert_eq!(reply.status, 400, "{method}: {}", reply.text());
        assert!(
            reply.text().starts_with("Request protobuf is invalid: ")
                && reply.text().ends_with('.'),
            "{}",
            reply.text()
        );
    }
    assert!(c.get(&key("a")).await.is_none(), "nothing was written");
    server.stop().await;
}

#[tokio::test]
async fn set_get_list_and_check_round_trip_values_byte_for_byte() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let v8 = [0xff, 0x0f, 0x22, 0x02, b'h', b'i'];
    let out = c
        .commit(write_of(
            vec![check(&key2("p", "a"), None)],
            vec![
                set(&key2("p", "a"), v8_value(&v8)),
                set(&key2("p", "b"), bytes_value(b"raw")),
                set(&key2("p", "c"), u64_value(7)),
            ],
        ))
        .await;
    assert_eq!(out.status, AW_SUCCESS);
    assert_eq!(out.versionstamp.len(), 10);
    let a = c.get(&key2("p", "a")).await.expect("a");
    assert_eq!(
        (a.value.as_slice(), a.encoding),
        (&v8[..], pb::ValueEncoding::VeV8 as i32)
    );
    assert_eq!(a.versionstamp, out.versionstamp);
    let n = c.get(&key2("p", "c")).await.expect("c");
    assert_eq!(
        (n.value, n.encoding),
        (
            7u64.to_le_bytes().to_vec(),
            pb::ValueEncoding::VeLe64 as i32
        )
    );
    // A list, forward and reverse with a limit, and a get of a missing key, in one snapshot.
    let out: pb::SnapshotReadOutput = c
        .read(read_of(vec![
            prefix_range(&key("p"), 10, false),
            prefix_range(&key("p"), 2, true),
            get_range(&key("missing")),
        ]))
        .await
        .decode();
    assert_eq!(out.status, pb::SnapshotReadStatus::SrSuccess as i32);
    assert!(out.read_is_strongly_consistent && !out.read_disabled);
    let keys = |r: &pb::ReadRangeOutput| r.values.iter().map(|e| e.key.clone()).collect::<Vec<_>>();
    assert_eq!(
        keys(&out.ranges[0]),
        vec![key2("p", "a"), key2("p", "b"), key2("p", "c")]
    );
    assert_eq!(keys(&out.ranges[1]), vec![key2("p", "c"), key2("p", "b")]);
    assert!(out.ranges[2].values.is_empty());
    // The check now fails: the key exists.
    let again = c
        .commit(write_of(
            vec![check(&key2("p", "a"), None)],
            vec![set(&key2("p", "a"), bytes_value(b"x"))],
        ))
        .await;
    assert_eq!(again.status, AW_CHECK_FAILURE);
    // With its versionstamp it passes.
    let cas = c
        .commit(write_of(
            vec![check(&key2("p", "a"), Some(&a.versionstamp))],
            vec![set(&key2("p", "a"), bytes_value(b"x"))],
        ))
        .await;
    assert_eq!(cas.status, AW_SUCCESS);
    assert!(cas.versionstamp > out_versionstamp(&a));
    server.stop().await;
}

fn out_versionstamp(e: &pb::KvEntry) -> Vec<u8> {
    e.versionstamp.clone()
}

#[tokio::test]
async fn failed_checks_lists_the_index_of_every_failing_check() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    c.commit(write_of(
        vec![],
        vec![
            set(&key("x"), bytes_value(b"1")),
            set(&key("z"), bytes_value(b"1")),
        ],
    ))
    .await;
    let out = c
        .commit(write_of(
            vec![
                check(&key("x"), None),           // fails: exists
                check(&key("y"), None),           // holds
                check(&key("z"), Some(&[0; 10])), // fails: other stamp
            ],
            vec![set(&key("y"), bytes_value(b"2"))],
        ))
        .await;
    assert_eq!(out.status, AW_CHECK_FAILURE);
    assert_eq!(out.failed_checks, vec![0, 2]);
    assert!(out.versionstamp.is_empty());
    assert!(c.get(&key("y")).await.is_none(), "nothing was written");
    server.stop().await;
}

#[tokio::test]
async fn a_failing_sum_writes_nothing_of_its_atomic_write() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    c.commit(write_of(
        vec![],
        vec![set(&key("s"), bytes_value(b"not a number"))],
    ))
    .await;
    let reply = c
        .write(write_of(
            vec![],
            vec![
                set(&key("before"), bytes_value(b"1")),
                mutation(&key("s"), pb::MutationType::MSum, Some(u64_value(1))),
            ],
        ))
        .await;
    reply.assert_error(
        400,
        "Failed to perform 'sum' mutation on a non-U64 value in the database",
    );
    // tuplekv's client reads which mutation failed from the header, not the text.
    assert_eq!(
        reply.engine_error(),
        Some(tuplekv_engine::Error::NotU64 {
            op: "sum",
            index: 1,
            key: tuplekv_engine::KeyBytes::default(),
        })
    );
    assert!(
        c.get(&key("before")).await.is_none(),
        "the earlier set was not kept"
    );
    server.stop().await;
}

#[tokio::test]
async fn sum_min_and_max_on_le64_wrap_and_compare_unsigned() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let op = |kind, n| mutation(&key("n"), kind, Some(u64_value(n)));
    c.commit(write_of(
        vec![],
        vec![
            op(pb::MutationType::MSum, u64::MAX),
            op(pb::MutationType::MSum, 10),
        ],
    ))
    .await;
    assert_eq!(c.get(&key("n")).await.expect("n").value, 9u64.to_le_bytes());
    c.commit(write_of(
        vec![],
        vec![
            op(pb::MutationType::MMax, 100),
            op(pb::MutationType::MMin, 50),
        ],
    ))
    .await;
    assert_eq!(
        c.get(&key("n")).await.expect("n").value,
        50u64.to_le_bytes()
    );
    let reply = c
        .write(write_of(
            vec![],
            vec![mutation(
                &key("n"),
                pb::MutationType::MMax,
                Some(v8_value(&[0xff, 0x0f, 0x49, 0x02])),
            )],
        ))
        .await;
    reply.assert_error(400, "Failed to perform 'max' mutation on a non-U64 operand");
    server.stop().await;
}

#[tokio::test]
async fn versionstamped_key_is_the_prefix_plus_the_commit_stamp_as_a_string() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let out = c
        .commit(write_of(
            vec![],
            vec![mutation(
                &key("log"),
                pb::MutationType::MSetSuffixVersionstampedKey,
                Some(bytes_value(b"e")),
            )],
        ))
        .await;
    assert_eq!(out.status, AW_SUCCESS);
    let hex: String = out
        .versionstamp
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let written = c.get(&key2("log", &hex)).await.expect("versionstamped key");
    assert_eq!(written.value, b"e");
    server.stop().await;
}

#[tokio::test]
async fn expire_at_in_the_past_hides_the_value_and_below_minus_one_is_invalid() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let mut m = set(&key("t"), bytes_value(b"v"));
    m.expire_at_ms = 1;
    assert_eq!(
        c.commit(write_of(vec![], vec![m.clone()])).await.status,
        AW_SUCCESS
    );
    assert!(c.get(&key("t")).await.is_none());
    m.expire_at_ms = -2;
    c.write(write_of(vec![], vec![m.clone()]))
        .await
        .assert_error(400, "Invalid mutation expire at.");
    m.expire_at_ms = -1;
    assert_eq!(c.commit(write_of(vec![], vec![m])).await.status, AW_SUCCESS);
    assert!(c.get(&key("t")).await.is_some());
    server.stop().await;
}

#[tokio::test]
async fn bad_values_and_kinds_are_400_not_500() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let unknown = pb::KvValue {
        data: b"x".to_vec(),
        encoding: 0,
    };
    c.write(write_of(vec![], vec![set(&key("a"), unknown)]))
        .await
        .assert_error(400, "The value encoding 0 is unknown.");
    let short = pb::KvValue {
        data: vec![1; 7],
        encoding: pb::ValueEncoding::VeLe64 as i32,
    };
    assert_eq!(
        c.write(write_of(vec![], vec![set(&key("a"), short)]))
            .await
            .status,
        400
    );
    c.write(write_of(
        vec![],
        vec![mutation(&key("a"), pb::MutationType::MSet, None)],
    ))
    .await
    .assert_error(400, "Invalid mutation kind or arguments.");
    c.write(write_of(vec![check(&key("a"), Some(&[1; 5]))], vec![]))
        .await
        .assert_error(400, "Invalid versionstamp.");
    let enqueue = pb::AtomicWrite {
        enqueues: vec![pb::Enqueue {
            payload: b"m".to_vec(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let reply = c.write(enqueue).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.text().contains("Enqueues are not supported"),
        "{}",
        reply.text()
    );
    c.write(write_of(vec![], vec![set(&[], bytes_value(b"v"))]))
        .await
        .assert_error(400, "key cannot be empty");
    server.stop().await;
}

/// A V8-serialised double (`FF 0F`, tag `N`, 8 bytes little-endian).
fn v8_number(x: f64) -> Vec<u8> {
    let mut v = vec![0xff, 0x0f, b'N'];
    v.extend_from_slice(&x.to_le_bytes());
    v
}

#[tokio::test]
async fn sum_with_a_v8_operand_uses_the_engines_bounded_sum_and_its_texts() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    c.commit(write_of(vec![], vec![set(&key("u"), u64_value(5))]))
        .await;
    let reply = c
        .write(write_of(
            vec![],
            vec![mutation(
                &key("u"),
                pb::MutationType::MSum,
                Some(v8_value(&v8_number(1.0))),
            )],
        ))
        .await;
    reply.assert_error(400, "Cannot sum KvU64 with Number");
    assert_eq!(
        reply.engine_error(),
        Some(tuplekv_engine::Error::Sum(
            tuplekv_engine::SumError::KindMismatch {
                stored: "KvU64",
                operand: "Number"
            }
        ))
    );
    // Number + Number, clamped to the max.
    c.commit(write_of(
        vec![],
        vec![set(&key("f"), v8_value(&v8_number(1.5)))],
    ))
    .await;
    let mut sum = mutation(
        &key("f"),
        pb::MutationType::MSum,
        Some(v8_value(&v8_number(2.0))),
    );
    sum.sum_max = v8_number(3.0);
    sum.sum_clamp = true;
    assert_eq!(
        c.commit(write_of(vec![], vec![sum.clone()])).await.status,
        AW_SUCCESS
    );
    let f = c.get(&key("f")).await.expect("f");
    assert_eq!(f.encoding, pb::ValueEncoding::VeV8 as i32);
    assert_eq!(f.value, v8_number(3.0));
    // Without clamp, out of range is an error and nothing changes.
    sum.sum_clamp = false;
    c.write(write_of(vec![], vec![sum])).await.assert_error(
        400,
        "The result of a Sum operation would exceed its range limit",
    );
    // LE64 operand with bounds is not allowed.
    let mut bounded = mutation(&key("u"), pb::MutationType::MSum, Some(u64_value(1)));
    bounded.sum_max = 10u64.to_le_bytes().to_vec();
    assert_eq!(c.write(write_of(vec![], vec![bounded])).await.status, 400);
    server.stop().await;
}

/// The same writes, answered by a server that commits on the blocking pool and by one that
/// commits inline: `(status, failed checks, versionstamp)` of each, or the error reply.
async fn answers_of_writes(mode: CommitMode) -> Vec<(u16, Vec<u32>, Vec<u8>, String)> {
    let store = std::sync::Arc::new(tuplekv_engine::Database::in_memory());
    let server = TestServer::of(store)
        .with_config(
            ServerConfig::new(TOKEN)
                .expect("a long enough token")
                .with_commit_mode(mode),
        )
        .spawn()
        .await;
    let mut c = server.h2().await;
    let writes = [
        write_of(
            vec![check(&key("a"), None)],
            vec![set(&key("a"), u64_value(1))],
        ),
        write_of(
            vec![check(&key("a"), None)],
            vec![set(&key("a"), u64_value(2))],
        ),
        write_of(
            vec![],
            vec![mutation(
                &key("a"),
                pb::MutationType::MSum,
                Some(u64_value(5)),
            )],
        ),
        write_of(vec![], vec![set(&key("b"), bytes_value(b"x"))]),
        write_of(
            vec![],
            vec![mutation(
                &key("b"),
                pb::MutationType::MSum,
                Some(u64_value(5)),
            )],
        ),
    ];
    let mut answers = Vec::new();
    for w in writes {
        let reply = c.write(w).await;
        let answer = if reply.status == 200 {
            let out: pb::AtomicWriteOutput = reply.decode();
            (200, out.failed_checks, out.versionstamp, String::new())
        } else {
            (reply.status.as_u16(), Vec::new(), Vec::new(), reply.text())
        };
        answers.push(answer);
    }
    let sum = c.get(&key("a")).await.expect("a");
    answers.push((0, Vec::new(), sum.value, String::new()));
    server.stop().await;
    answers
}

#[tokio::test]
async fn inline_commits_answer_exactly_as_commits_on_the_blocking_pool() {
    let pool = answers_of_writes(CommitMode::BlockingPool).await;
    let inline = answers_of_writes(CommitMode::Inline).await;
    assert_eq!(pool, inline);
    let statuses: Vec<u16> = inline.iter().map(|a| a.0).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 400, 0]);
    assert_eq!(inline[1].1, [0], "the second write's check failed");
    assert_eq!(inline[5].2, 6u64.to_le_bytes(), "1 + 5");
}
