//! The contract suites of the store, the index layer and the sequence layer on a
//! `RemoteStore` talking, with tuplekv's extension, to a tuplekv server in this process whose
//! store is an `EtcdStore` on a 3-member etcd cluster: what `tuplekv serve --etcd` offers a
//! Rust app server (held snapshots, range checks, versionstamped keys), end to end. One
//! cluster for the binary; each store is a server of its own under a fresh key prefix.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tuplekv_etcd::EtcdStore;
use tuplekv_remote::RemoteStore;
use tuplekv_server::{CommitMode, ReadMode};
use tuplekv_testkit::contract::{Backend, Cost};
use tuplekv_testkit::etcd::Cluster;
use tuplekv_testkit::server::{TOKEN, TestServer};

/// The cluster every test of this binary uses.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start(3))
}

/// Opens each store as a server of its own on the shared cluster; the servers run until the
/// backend is dropped.
#[derive(Default)]
struct Served {
    servers: Mutex<Vec<TestServer>>,
}

impl Backend for Served {
    type Store = RemoteStore;

    fn name(&self) -> &str {
        "remote-over-etcd"
    }

    fn cost(&self) -> Cost {
        Cost::RoundTrip
    }

    fn open(&self) -> RemoteStore {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("served/{}/{n}/", std::process::id());
        let store = EtcdStore::connect(&cluster().client_urls(), prefix.as_bytes())
            .expect("the store connects to the test cluster");
        // As `tuplekv serve --etcd` runs it: reads and commits off the runtime's workers.
        let server = TestServer::of(Arc::new(store))
            .config(|c| {
                c.with_read_mode(ReadMode::BlockingPool)
                    .with_commit_mode(CommitMode::BlockingPool)
            })
            .start();
        let remote = RemoteStore::connect(&server.url(), TOKEN).expect("the client connects");
        assert!(remote.has_extension().expect("a metadata exchange"));
        self.servers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(server);
        remote
    }
}

mod store {
    tuplekv_testkit::store_contract_tests!(super::Served::default());
}

mod index {
    tuplekv_testkit::index_contract_tests!(super::Served::default());
}

mod sequence {
    tuplekv_testkit::sequence_contract_tests!(super::Served::default());
}
