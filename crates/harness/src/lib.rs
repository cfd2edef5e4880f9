//! The processes the project's automation starts, shared by `xtask` (conformance, CI) and the
//! bench orchestrator of `tuplekv-benches`: running cargo with its command line echoed
//! ([`cmd`]), a `tuplekv serve` or denokv process on loopback ([`server`]), the pinned real
//! clients installed on demand ([`clients`]: Deno, Node's `@deno/kv`, denokv) and a throw-away
//! `redis-server` ([`redis`]).
//!
//! It depends on the standard library, `anyhow` and `serde_json` only, so that xtask, which
//! must build fast and before anything else, can link it without building the store.

pub mod clients;
pub mod cmd;
pub mod redis;
pub mod server;
