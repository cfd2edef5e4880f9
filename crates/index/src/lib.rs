//! Typed collections with unique and non-unique secondary indexes, written in the same atomic
//! commit as their record so they can never drift apart.
//!
//! This crate is a placeholder until the index issue lands.

pub use tuplekv_codec as codec;
