//! Fuzz target `server_request`: the first byte picks a KV Connect request (snapshot_read,
//! atomic_write or watch) and the rest is its protobuf body. Decoding must not panic, what it
//! accepts must be within the server's limits, and running it on an in-memory store must not
//! fail with a server-side error or write anything when refused. The body is
//! `tuplekv_testkit::fuzz::server_request_target`, replayed by `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tuplekv_testkit::fuzz::server_request_target(data));
