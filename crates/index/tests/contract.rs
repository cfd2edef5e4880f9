//! The index layer's contract (`tuplekv_testkit::contract::index`) on the engine's backends:
//! the in-memory and durable databases, a store without snapshots, and a store whose async
//! calls wait (so async operations run in many rounds).

mod in_memory {
    tuplekv_testkit::index_contract_tests!(tuplekv_testkit::contract::backends::InMemory);
}

mod durable {
    tuplekv_testkit::index_contract_tests!(tuplekv_testkit::contract::backends::Durable::new());
}

mod no_snapshots {
    tuplekv_testkit::index_contract_tests!(tuplekv_testkit::contract::backends::NoSnapshots);
}

mod waiting {
    tuplekv_testkit::index_contract_tests!(tuplekv_testkit::contract::backends::WaitingStores);
}
