//! The contract suites of the store, the index layer and the sequence layer
//! (`tuplekv_testkit::contract`) on `EtcdStore` over a 3-member etcd cluster on loopback
//! ports, started once for this test binary (and killed when the process ends); each store
//! opens under a fresh key prefix, so stores share nothing but the cluster.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tuplekv_etcd::EtcdStore;
use tuplekv_testkit::contract::{Backend, Cost};
use tuplekv_testkit::etcd::Cluster;

/// Members of the test cluster.
const MEMBERS: usize = 3;

/// The cluster every test of this binary uses.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start(MEMBERS))
}

/// Opens each store under a prefix of its own on the shared cluster.
#[derive(Default)]
struct Etcd;

impl Backend for Etcd {
    type Store = EtcdStore;

    fn name(&self) -> &str {
        "etcd"
    }

    fn cost(&self) -> Cost {
        Cost::RoundTrip
    }

    fn open(&self) -> EtcdStore {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("test/{}/{n}/", std::process::id());
        EtcdStore::connect(&cluster().client_urls(), prefix.as_bytes())
            .expect("the store connects to the test cluster")
    }
}

mod store {
    tuplekv_testkit::store_contract_tests!(super::Etcd);
}

mod index {
    tuplekv_testkit::index_contract_tests!(super::Etcd);
}

mod sequence {
    tuplekv_testkit::sequence_contract_tests!(super::Etcd);
}
