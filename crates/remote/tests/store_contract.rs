//! The contract suites of the store, the index layer and the sequence layer
//! (`tuplekv_testkit::contract`) on a `RemoteStore` speaking KV Connect, with tuplekv's
//! extension, to a tuplekv server in this process (a fresh in-memory database on a loopback
//! port per store, stopped when the test ends).
//!
//! The same suites also run against a tuplekv server with the extension turned off, which
//! speaks plain KV Connect as denokv does: the client's paths without snapshots, over the
//! network.

use std::sync::{Arc, Mutex, PoisonError};

use tuplekv_engine::Database;
use tuplekv_remote::RemoteStore;
use tuplekv_testkit::contract::{Backend, Cost};
use tuplekv_testkit::server::{TOKEN, TestServer};

/// Opens each store on a server of its own; the servers run until the backend is dropped.
struct Remote {
    servers: Mutex<Vec<TestServer>>,
    /// Whether the servers offer tuplekv's extension.
    extension: bool,
}

impl Default for Remote {
    fn default() -> Self {
        Remote {
            servers: Mutex::default(),
            extension: true,
        }
    }
}

impl Backend for Remote {
    type Store = RemoteStore;

    fn name(&self) -> &str {
        if self.extension {
            "remote"
        } else {
            "remote-plain"
        }
    }

    fn has_snapshots(&self) -> bool {
        self.extension
    }

    fn cost(&self) -> Cost {
        Cost::RoundTrip
    }

    fn open(&self) -> RemoteStore {
        let extension = self.extension;
        let server = TestServer::of(Arc::new(Database::in_memory()))
            .config(|c| c.with_extension(extension))
            .start();
        let store = RemoteStore::connect(&server.url(), TOKEN).expect("the client connects");
        assert_eq!(
            store.has_extension().expect("a metadata exchange"),
            extension
        );
        self.servers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(server);
        store
    }
}

mod store {
    tuplekv_testkit::store_contract_tests!(super::Remote::default());
}

mod index {
    tuplekv_testkit::index_contract_tests!(super::Remote::default());
}

mod sequence {
    tuplekv_testkit::sequence_contract_tests!(super::Remote::default());
}

mod plain {
    use super::Remote;

    fn plain() -> Remote {
        Remote {
            extension: false,
            ..Remote::default()
        }
    }

    mod store {
        tuplekv_testkit::store_contract_tests!(super::plain());
    }

    mod index {
        tuplekv_testkit::index_contract_tests!(super::plain());
    }

    mod sequence {
        tuplekv_testkit::sequence_contract_tests!(super::plain());
    }
}
