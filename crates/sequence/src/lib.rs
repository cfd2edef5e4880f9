//! Per-prefix code generation (`INFO001`, `INFO002`, …) that never hands out a duplicate.
//!
//! This crate is a placeholder until the sequence issue lands.

pub use tuplekv_codec as codec;
