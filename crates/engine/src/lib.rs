//! The storage engine of tuplekv: an in-memory MVCC store of ordered byte keys with
//! versionstamps, atomic checks and mutations, snapshots and range listing.
//!
//! This crate is a placeholder until the engine issue lands; it re-exports the key codec so
//! that dependants can already name keys through it.

pub use tuplekv_codec as codec;
