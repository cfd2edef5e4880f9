//! What is particular to the etcd mapping, beyond the shared contract: a compacted snapshot
//! is an error rather than newer data, deletions stay visible to range comparisons but not
//! to reads, a commit without mutations still gets a revision of its own, and versionstamped
//! keys are refused with a reason.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tuplekv_engine::{Error, ReadView, Store, key};
use tuplekv_etcd::EtcdStore;
use tuplekv_testkit::etcd::Cluster;

fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start(3))
}

fn open() -> EtcdStore {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = format!("mapping/{}/", NEXT.fetch_add(1, Ordering::Relaxed));
    EtcdStore::connect(&cluster().client_urls(), prefix.as_bytes()).expect("a store")
}

#[test]
fn a_snapshot_older_than_the_compacted_revision_is_an_error_not_newer_data() {
    let store = open();
    let _ = store
        .atomic()
        .set(&key!["k"], 1u64)
        .commit()
        .expect("a commit");
    let snapshot = store.snapshot();
    assert!(snapshot.get(&key!["k"]).expect("a read").is_some());
    let _ = store
        .atomic()
        .set(&key!["k"], 2u64)
        .commit()
        .expect("a commit");
    cluster().compact();
    match snapshot.get(&key!["k"]) {
        Err(e @ Error::SnapshotExpired { .. }) => assert!(e.is_transient()),
        other => panic!("a read of a compacted snapshot gave {other:?}"),
    }
}

#[test]
fn a_deleted_key_is_absent_to_reads_and_checks() {
    let store = open();
    let _ = store
        .atomic()
        .set(&key!["k"], 1u64)
        .commit()
        .expect("a commit");
    let _ = store
        .atomic()
        .delete(&key!["k"])
        .commit()
        .expect("a commit");
    assert_eq!(store.snapshot().get(&key!["k"]).expect("a read"), None);
    let listed = store
        .snapshot()
        .scan(
            &tuplekv_engine::ByteRange {
                start: vec![],
                end: vec![0xff],
            },
            false,
            10,
        )
        .expect("a scan");
    assert!(listed.is_empty(), "a tombstone was listed: {listed:?}");
    let res = store
        .atomic()
        .check(&key!["k"], None)
        .set(&key!["k"], 3u64)
        .commit()
        .expect("a commit");
    assert!(
        res.is_committed(),
        "a check for absence failed on a tombstone"
    );
}

#[test]
fn a_commit_without_mutations_gets_a_new_versionstamp() {
    let store = open();
    let a = store.atomic().commit().expect("a commit").versionstamp();
    let b = store.atomic().commit().expect("a commit").versionstamp();
    assert!(a.is_some() && b > a, "{a:?} then {b:?}");
}

#[test]
fn a_versionstamped_key_is_refused_with_a_reason() {
    let store = open();
    match store
        .atomic()
        .set_versionstamped(&key!["log"], 1u64)
        .commit()
    {
        Err(Error::Unsupported { operation, .. }) => assert!(operation.contains("versionstamp")),
        other => panic!("a versionstamped key gave {other:?}"),
    }
}

#[test]
fn a_key_written_twice_in_one_commit_is_folded() {
    let store = open();
    let res = store
        .atomic()
        .set(&key!["n"], 5u64)
        .sum(&key!["n"], 2)
        .max(&key!["n"], 6)
        .commit()
        .expect("one etcd put for the key");
    assert!(res.is_committed());
    let n = store
        .snapshot()
        .get(&key!["n"])
        .expect("a read")
        .expect("set");
    assert_eq!(n.value.as_u64(), Some(7));
}
