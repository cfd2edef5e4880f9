//! The processes the project's automation starts, shared by `xtask` (conformance, CI) and the
//! bench orchestrator of `tuplekv-benches`: running cargo with its command line echoed
//! ([`cmd`]), a `tuplekv serve` or denokv process on loopback ([`server`]), the pinned real
//! clients installed on demand ([`clients`]: Deno, Node's `@deno/kv`, denokv) and a throw-away
//! `redis-server` ([`redis`]), and what `cargo xtask bench` and the bench orchestrator agree on
//! ([`benches`]: the profile, the binaries, where the report to publish is left).
//!
//! It depends on the standard library, `anyhow` and `serde_json` only, so that xtask, which
//! must build fast and before anything else, can link it without building the store.

pub mod benches;
pub mod clients;
pub mod cmd;
pub mod redis;
pub mod server;
