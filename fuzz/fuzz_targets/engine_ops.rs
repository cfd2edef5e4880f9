//! Fuzz target `engine_ops`: the input is decoded into a sequence of store operations (commits
//! with checks and every mutation kind, reads, lists, pagination, snapshots, transactions) run
//! on the engine and on the reference model; they must agree and nothing may panic. The body
//! is `tuplekv_testkit::fuzz::engine_ops_target`, replayed by `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tuplekv_testkit::fuzz::engine_ops_target(data));
