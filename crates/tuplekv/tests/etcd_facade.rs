//! The facade with its `etcd` feature: `tuplekv::EtcdStore` carries a typed collection with a
//! unique index and a code sequence unchanged, on a 3-member etcd cluster the test starts on
//! loopback ports and stops. CI runs it with `cargo test -p tuplekv --all-features`.
#![cfg(feature = "etcd")]

use serde::{Deserialize, Serialize};
use tuplekv::index::{self, Collection};
use tuplekv::sequence::{SequenceOptions, Sequences};
use tuplekv::{EtcdStore, key};
use tuplekv_testkit::etcd::Cluster;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    email: String,
}

#[test]
fn a_collection_and_a_sequence_run_unchanged_on_etcd_through_the_facade() {
    let cluster = Cluster::start(3);
    let store = EtcdStore::connect(&cluster.client_urls(), b"facade/").expect("connects");

    let seqs = Sequences::new(store.clone());
    seqs.create("INFO", SequenceOptions::default())
        .expect("creates");
    let info = seqs.fast("INFO").expect("opens");
    let codes: Vec<String> = (0..3)
        .map(|_| info.next().expect("a code").code().to_owned())
        .collect();
    assert_eq!(codes, ["INFO001", "INFO002", "INFO003"]);

    let users = Collection::builder("users", |u: &User| key![u.id])
        .unique("email", |u| Some(key![u.email.clone()]))
        .open(store.clone())
        .expect("opens");
    let ada = User {
        id: 1,
        email: "ada@example.com".into(),
    };
    users.insert(&ada).expect("inserts");
    let clash = users.insert(&User {
        id: 2,
        email: "ada@example.com".into(),
    });
    assert!(
        matches!(clash, Err(index::Error::UniqueViolation { .. })),
        "{clash:?}"
    );
    assert_eq!(users.get(&key![1u64]).expect("reads"), Some(ada));
    assert!(users.verify().expect("verifies").is_clean());
}
