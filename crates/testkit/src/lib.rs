//! Test support shared by the tuplekv crates, their fuzz targets and benches: proptest
//! strategies that favour the hard cases, loaders for the golden vectors recorded from real
//! Deno (kept in `data/`, copied from the project's shared vectors so a clone is
//! self-contained), a reference model of the engine (`reference`), self-counting buffers for
//! memory tests (`counted`), helpers for tests that drive a database (`db`) or its directory
//! on disk (`durable`), the contract every store backend keeps, written once and run on each
//! (`contract`), a checker thread's rounds for concurrent tests to wait on (`rounds`), a
//! seeded generator (`rng`), a local etcd cluster (`etcd`), the KV Connect test server
//! (`server`) with a raw HTTP client (`kv_connect`) and its TLS variant (`tls`), the app
//! logic and checks the app-servers scenarios share (`app_servers`), and the bodies of the
//! fuzz targets so `cargo test` can replay their corpus.

pub mod app_servers;
pub mod config;
pub mod contract;
pub mod counted;
pub mod db;
pub mod durable;
pub mod engine_ops;
pub mod etcd;
pub mod executor;
pub mod fuzz;
pub mod kv_connect;
pub mod recovery;
pub mod reference;
pub mod rng;
pub mod rounds;
pub mod server;
pub mod strategies;
pub mod tls;
pub mod vectors;
