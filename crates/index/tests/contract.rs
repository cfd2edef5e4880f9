//! The index layer's contract (`tuplekv_testkit::contract::index`) on the engine's backends:
//! the in-memory and durable databases, and a store without snapshots.

mod in_memory {
    tuplekv_testkit::index_contract_tests!(tuplekv_testkit::contract::backends::InMemory);
}

mod durable {
    tuplekv_testkit::index_contract_tests!(tuplekv_testkit::contract::backends::Durable::new());
}

mod no_snapshots {
    tuplekv_testkit::index_contract_tests!(tuplekv_testkit::contract::backends::NoSnapshots);
}
