//! The contract suites of the store, the index layer and the sequence layer
//! (`tuplekv_testkit::contract`) on a `RemoteStore` speaking KV Connect, with tuplekv's
//! extension, to a tuplekv server in this process (a fresh in-memory database on a loopback
//! port per store, stopped when the test ends).
//!
//! Two store properties are left out because the remote store breaks them today (each is a
//! finding to fix in the client or the server, then add back to run the whole
//! `store_contract_tests!`):
//! - `read_key_size_limit_holds_at_and_past_the_limit`: `get` and `get_many` of a key of
//!   exactly `KEY_SIZE_MAX_READ` (2049) bytes fail with `Error::Remote { status: 400, .. }`
//!   ("A key exceeds the key size limit.": the read goes out as the range `[k, k ++ 00)`,
//!   whose end is 2050 bytes), where the engine answers `None`.
//! - `sum_min_max_refuse_non_u64_values`: `sum`/`min`/`max` on a non-`U64` value fail with
//!   `Error::Remote { status: 400, .. }` carrying Deno's text, not `Error::NotU64` with the
//!   mutation's index and key.

use std::sync::{Arc, Mutex, PoisonError};

use tuplekv_engine::Database;
use tuplekv_remote::RemoteStore;
use tuplekv_testkit::contract::Backend;
use tuplekv_testkit::server::{TEST_TOKEN, TestServer};

/// Opens each store on a server of its own; the servers run until the backend is dropped.
#[derive(Default)]
struct Remote {
    servers: Mutex<Vec<TestServer>>,
}

impl Backend for Remote {
    type Store = RemoteStore;

    fn name(&self) -> &str {
        "remote"
    }

    fn open(&self) -> RemoteStore {
        let server = TestServer::start(Arc::new(Database::in_memory()));
        let store = RemoteStore::connect(&server.url(), TEST_TOKEN).expect("the client connects");
        assert!(
            store.has_extension(),
            "a tuplekv server speaks the extension"
        );
        self.servers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(server);
        store
    }
}

mod store {
    tuplekv_testkit::contract_tests!(
        super::Remote::default();
        tuplekv_testkit::contract;
        snapshot_stays_put_while_commits_follow,
        checks_pass_or_fail_with_their_index,
        versionstamps_increase_and_are_never_shared,
        range_checks_rerun_transactions_that_listed_a_changed_range,
        write_key_size_limit_holds_at_and_past_the_limit,
        value_size_limit_holds_at_and_past_the_limit,
        check_count_limit_holds_at_and_past_the_limit,
        mutation_count_limit_holds_at_and_past_the_limit,
        total_mutation_size_limit_holds_at_and_past_the_limit,
        total_key_size_limit_holds_at_and_past_the_limit,
        get_many_limit_holds_at_and_past_the_limit,
        watch_key_limits_hold_at_and_past_the_limit,
        list_limits_hold_at_and_past_the_limit,
        expiry_limit_holds_at_and_past_the_limit,
        transaction_attempts_limit_ends_a_transaction_that_always_conflicts,
        sum_min_max_apply_in_order,
        transactions_under_contention_lose_no_increment,
        read_modify_writes_over_a_listed_range_are_serializable,
        expired_values_vanish_from_reads_and_checks,
        watch_yields_at_once_then_wakes_on_a_commit,
    );
}

mod index {
    tuplekv_testkit::index_contract_tests!(super::Remote::default());
}

mod sequence {
    tuplekv_testkit::sequence_contract_tests!(super::Remote::default());
}
