//! The sequence layer's contract (`tuplekv_testkit::contract::sequence`) on the engine's
//! backends: the in-memory and durable databases, and a store without snapshots.

mod in_memory {
    tuplekv_testkit::sequence_contract_tests!(tuplekv_testkit::contract::backends::InMemory);
}

mod durable {
    tuplekv_testkit::sequence_contract_tests!(tuplekv_testkit::contract::backends::Durable::new());
}

mod no_snapshots {
    tuplekv_testkit::sequence_contract_tests!(tuplekv_testkit::contract::backends::NoSnapshots);
}

mod waiting {
    tuplekv_testkit::sequence_contract_tests!(tuplekv_testkit::contract::backends::WaitingStores);
}
