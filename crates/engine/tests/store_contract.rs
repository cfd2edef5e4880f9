//! The `Store` contract (`tuplekv_testkit::contract`) on the engine's own backends: the
//! in-memory and the durable database, and the engine behind the interface of a store
//! without snapshots (a plain KV Connect server's).

mod in_memory {
    tuplekv_testkit::store_contract_tests!(tuplekv_testkit::contract::backends::InMemory);
}

mod durable {
    tuplekv_testkit::store_contract_tests!(tuplekv_testkit::contract::backends::Durable::new());
}

mod no_snapshots {
    tuplekv_testkit::store_contract_tests!(tuplekv_testkit::contract::backends::NoSnapshots);
}
