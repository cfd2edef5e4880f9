//! tuplekv's KV Connect extension (`tuplekv_wire`): agreed only when asked for, held
//! snapshots read at their versionstamp, range checks, full failure reports, and each of its
//! limits and refusals.

use tuplekv_testkit::kv_connect as common;

use std::time::Duration;

use common::{TOKEN, TestServer, get_range, key, mutation, read_of, u64_value};
use denokv_proto::datapath as pb;
use prost::Message;
use tuplekv_server::ServerConfig;
use tuplekv_server::limits::{RANGE_CHECKS_MAX, RELEASES_PER_READ_MAX};
use tuplekv_wire::{
    AtomicWriteExtension, AtomicWriteOutputExtension, Hold, RangeCheck, ReadExtension,
    SnapshotReadExtension, SnapshotReadOutputExtension, WriteExtension,
};

fn extended_read(ranges: Vec<pb::ReadRange>, ext: ReadExtension) -> Vec<u8> {
    let mut body = read_of(ranges).encode_to_vec();
    SnapshotReadExtension { tuplekv: Some(ext) }.encode_raw(&mut body);
    body
}

fn hold() -> ReadExtension {
    hold_as(1)
}

fn hold_as(hold_id: u64) -> ReadExtension {
    ReadExtension {
        hold: true,
        hold_id,
        ..ReadExtension::default()
    }
}

fn at(vs: &[u8]) -> ReadExtension {
    ReadExtension {
        at: vs.to_vec(),
        ..ReadExtension::default()
    }
}

fn release(holds: Vec<(Vec<u8>, u64)>) -> ReadExtension {
    ReadExtension {
        release: holds
            .into_iter()
            .map(|(versionstamp, hold_id)| Hold {
                versionstamp,
                hold_id,
            })
            .collect(),
        ..ReadExtension::default()
    }
}

fn set(k: &[u8], n: u64) -> pb::AtomicWrite {
    pb::AtomicWrite {
        mutations: vec![mutation(k, pb::MutationType::MSet, Some(u64_value(n)))],
        ..Default::default()
    }
}

fn extended_write(write: pb::AtomicWrite, range_checks: Vec<RangeCheck>) -> Vec<u8> {
    let mut body = write.encode_to_vec();
    AtomicWriteExtension {
        tuplekv: Some(WriteExtension {
            range_checks,
            numbering: None,
        }),
    }
    .encode_raw(&mut body);
    body
}

/// The read's entries (first range) and the versionstamp the extension reports.
fn read_output(body: &[u8]) -> (Vec<pb::KvEntry>, Vec<u8>) {
    let out = pb::SnapshotReadOutput::decode(body).expect("output");
    let ext = SnapshotReadOutputExtension::decode(body)
        .expect("ext")
        .tuplekv
        .expect("present");
    (
        out.ranges
            .into_iter()
            .next()
            .map(|r| r.values)
            .unwrap_or_default(),
        ext.versionstamp,
    )
}

#[tokio::test]
async fn the_extension_is_agreed_only_with_a_client_that_asks_for_it() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let plain = c
        .metadata(TOKEN, r#"{"supportedVersions":[2,3]}"#)
        .await
        .json();
    assert!(plain.get("tuplekvExtensions").is_none(), "{plain}");
    let asked = c
        .metadata(
            TOKEN,
            r#"{"supportedVersions":[2,3],"tuplekvExtensions":["tuplekv.snapshots.v1","other"]}"#,
        )
        .await
        .json();
    assert_eq!(
        asked["tuplekvExtensions"],
        serde_json::json!(["tuplekv.snapshots.v1"])
    );
    server.stop().await;
}

#[tokio::test]
async fn a_held_snapshot_reads_the_same_state_after_later_commits() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    c.commit(set(&key("a"), 1)).await;
    let (first, vs) = read_output(
        &c.data(
            "snapshot_read",
            extended_read(vec![get_range(&key("a"))], hold()),
        )
        .await
        .body,
    );
    assert_eq!(vs.len(), 10);
    c.commit(set(&key("a"), 2)).await;
    let (again, vs2) = read_output(
        &c.data(
            "snapshot_read",
            extended_read(vec![get_range(&key("a"))], at(&vs)),
        )
        .await
        .body,
    );
    assert_eq!(again, first);
    assert_eq!(vs2, vs);
    // A plain read sees the new value, and says nothing of the extension.
    let reply = c.read(read_of(vec![get_range(&key("a"))])).await;
    let ext = SnapshotReadOutputExtension::decode(&reply.body[..]).expect("decode");
    assert!(ext.tuplekv.is_none());
    server.stop().await;
}

#[tokio::test]
async fn a_read_at_a_snapshot_not_held_is_410_gone() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let vs = tuplekv_engine::Versionstamp::from_version(12345);
    let reply = c
        .data(
            "snapshot_read",
            extended_read(vec![get_range(&key("a"))], at(vs.as_bytes())),
        )
        .await;
    assert_eq!(reply.status, 410, "{}", reply.text());
    assert!(reply.text().contains(&vs.to_string()), "{}", reply.text());
    assert_eq!(
        reply.engine_error(),
        Some(tuplekv_engine::Error::SnapshotExpired {
            versionstamp: vs.to_string()
        })
    );
    let bad = c
        .data("snapshot_read", extended_read(vec![], at(&[1, 2, 3])))
        .await;
    bad.assert_error(400, "Invalid versionstamp.");
    server.stop().await;
}

#[tokio::test]
async fn an_idle_held_snapshot_is_dropped() {
    let config = ServerConfig::new(TOKEN)
        .expect("token")
        .with_held_snapshots(8, Duration::ZERO);
    let server = TestServer::in_memory().with_config(config).spawn().await;
    let mut c = server.h2().await;
    let (_, vs) = read_output(
        &c.data("snapshot_read", extended_read(vec![], hold()))
            .await
            .body,
    );
    let reply = c
        .data("snapshot_read", extended_read(vec![], at(&vs)))
        .await;
    assert_eq!(reply.status, 410);
    server.stop().await;
}

#[tokio::test]
async fn a_range_check_fails_when_its_range_changed_and_the_report_says_so() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    c.commit(set(&key("x"), 1)).await;
    let (_, vs) = read_output(
        &c.data("snapshot_read", extended_read(vec![], hold()))
            .await
            .body,
    );
    let check = RangeCheck {
        start: key("a"),
        end: key("z"),
        since: vs.clone(),
        expires_at_ms: 0,
    };
    // Unchanged: commits.
    let out: pb::AtomicWriteOutput = c
        .data(
            "atomic_write",
            extended_write(set(&key("other"), 1), vec![check.clone()]),
        )
        .await
        .decode();
    assert_eq!(out.status, pb::AtomicWriteStatus::AwSuccess as i32);
    // `other` is in the range and changed after the snapshot: the next one fails.
    let reply = c
        .data(
            "atomic_write",
            extended_write(set(&key("y"), 1), vec![check]),
        )
        .await;
    let out: pb::AtomicWriteOutput = reply.decode();
    assert_eq!(out.status, pb::AtomicWriteStatus::AwCheckFailure as i32);
    let ext = AtomicWriteOutputExtension::decode(&reply.body[..])
        .expect("decode")
        .tuplekv
        .expect("report");
    assert!(ext.range_changed);
    assert!(c.get(&key("y")).await.is_none());
    server.stop().await;
}

#[tokio::test]
async fn a_failed_key_check_reports_the_keys_actual_versionstamp() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let done = c.commit(set(&key("k"), 1)).await;
    let mut write = set(&key("k"), 2);
    write.checks.push(pb::Check {
        key: key("k"),
        versionstamp: Vec::new(),
    });
    let reply = c
        .data("atomic_write", extended_write(write, Vec::new()))
        .await;
    let ext = AtomicWriteOutputExtension::decode(&reply.body[..])
        .expect("decode")
        .tuplekv
        .expect("report");
    assert_eq!(ext.actual, vec![done.versionstamp]);
    assert!(!ext.range_changed);
    server.stop().await;
}

#[tokio::test]
async fn range_checks_are_limited_and_need_a_held_snapshot() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let (_, vs) = read_output(
        &c.data("snapshot_read", extended_read(vec![], hold()))
            .await
            .body,
    );
    let check = |since: &[u8]| RangeCheck {
        start: key("a"),
        end: key("b"),
        since: since.to_vec(),
        expires_at_ms: 0,
    };
    let at_limit = vec![check(&vs); RANGE_CHECKS_MAX];
    let out: pb::AtomicWriteOutput = c
        .data("atomic_write", extended_write(set(&key("q"), 1), at_limit))
        .await
        .decode();
    assert_eq!(out.status, pb::AtomicWriteStatus::AwSuccess as i32);
    let past = vec![check(&vs); RANGE_CHECKS_MAX + 1];
    let reply = c
        .data("atomic_write", extended_write(set(&key("q"), 2), past))
        .await;
    reply.assert_error(
        400,
        &format!("Too many range checks (max {RANGE_CHECKS_MAX})."),
    );
    let unheld = tuplekv_engine::Versionstamp::from_version(999_999);
    let reply = c
        .data(
            "atomic_write",
            extended_write(set(&key("q"), 3), vec![check(unheld.as_bytes())]),
        )
        .await;
    assert_eq!(reply.status, 410);
    let entry = c.get(&key("q")).await.expect("q");
    assert_eq!(entry.value, 1u64.to_le_bytes().to_vec());
    server.stop().await;
}

#[tokio::test]
async fn a_released_snapshot_is_dropped_when_its_last_hold_goes() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let read = |ext| extended_read(vec![], ext);
    let (_, vs) = read_output(&c.data("snapshot_read", read(hold_as(1))).await.body);
    // A second client holds the same state (reading at it with a hold of its own).
    let (_, same) = read_output(
        &c.data(
            "snapshot_read",
            read(ReadExtension {
                at: vs.clone(),
                ..hold_as(2)
            }),
        )
        .await
        .body,
    );
    assert_eq!(same, vs);
    assert_eq!(server.stats.held_snapshots(), 1);
    // The first client's release, sent twice (a retried request), removes only its hold.
    for _ in 0..2 {
        let _ = c
            .data("snapshot_read", read(release(vec![(vs.clone(), 1)])))
            .await;
    }
    assert_eq!(
        c.data("snapshot_read", read(at(&vs))).await.status,
        200,
        "the second hold is left"
    );
    let _ = c
        .data("snapshot_read", read(release(vec![(vs.clone(), 2)])))
        .await;
    assert_eq!(c.data("snapshot_read", read(at(&vs))).await.status, 410);
    assert_eq!(server.stats.held_snapshots(), 0);
    server.stop().await;
}

#[tokio::test]
async fn releases_are_limited_per_read() {
    let server = TestServer::in_memory().spawn().await;
    let mut c = server.h2().await;
    let v = tuplekv_engine::Versionstamp::from_version(5)
        .as_bytes()
        .to_vec();
    let ok = c
        .data(
            "snapshot_read",
            extended_read(vec![], release(vec![(v.clone(), 1); RELEASES_PER_READ_MAX])),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let past = c
        .data(
            "snapshot_read",
            extended_read(vec![], release(vec![(v, 1); RELEASES_PER_READ_MAX + 1])),
        )
        .await;
    past.assert_error(
        400,
        &format!("Too many snapshot releases (max {RELEASES_PER_READ_MAX})."),
    );
    server.stop().await;
}
