//! Typed key tuples and their order-preserving byte encoding, byte-for-byte compatible with
//! Deno KV (a subset of the FoundationDB tuple layer).
//!
//! A [`Key`] is a tuple of [`KeyPart`]s: bytes, strings, bigints, numbers (`f64`) and booleans.
//! [`encode_key`] turns it into bytes whose plain `memcmp` order equals the tuple order of
//! [`Key`]'s `Ord`, so a store can keep keys as opaque ordered byte strings. [`decode_key`]
//! turns bytes back into a key and rejects anything that is not the canonical encoding of one,
//! so `Key` equality and byte equality are the same thing.
//!
//! The crate also owns the parts of Deno KV's key space that are pure byte arithmetic:
//! a zero-copy decoder for hot paths ([`decode_parts`], [`validate_key`]), the translation of
//! list selectors into byte ranges ([`Selector`]), and Deno's list cursor format.
//!
//! ```
//! use tuplekv_codec::{decode_key, encode_key, key};
//!
//! let k = key!["users", 42, true];
//! assert_eq!(k.to_string(), r#"["users", 42n, true]"#);
//! let bytes = encode_key(&k);
//! assert_eq!(bytes, b"\x02users\x00\x15\x2a\x27");
//! assert_eq!(decode_key(&bytes)?, k);
//! assert!(encode_key(&key!["users"]) < bytes); // a prefix sorts first
//! # Ok::<(), tuplekv_codec::DecodeError>(())
//! ```
//!
//! # Where real Deno differs from its documentation
//! This crate follows what the Deno binary writes, not what its manual says:
//! - bigints sort **before** numbers (`[1n] < [1]`), because their type codes are lower;
//! - NaN payloads are canonicalised (the sign is kept): every `+NaN` encodes as
//!   `21 fff8000000000000` and every `-NaN` as `21 0007ffffffffffff`;
//! - `-0.0` and `+0.0` are distinct keys, and `-0.0` sorts just before `+0.0`.

mod decode;
mod encode;
mod fmt;
mod key;
mod part;
mod selector;
mod tags;

pub use decode::{
    BigIntRef, DecodeError, DecodeErrorKind, KeyPartRef, NonCanonical, PartType, Parts, decode_key,
    decode_parts, validate_key,
};
pub use encode::{EncodeError, encode_key, encode_key_into, encode_part_into, encoded_len};
pub use key::Key;
pub use part::KeyPart;
pub use selector::{ByteRange, Selector, SelectorError};

/// The largest bigint magnitude a key part can hold, in bytes (Deno's limit: the long form
/// stores the length in one byte).
pub const BIGINT_MAGNITUDE_MAX_BYTES: usize = 255;

/// Re-exported so callers can build [`KeyPart::BigInt`] without naming the dependency.
pub use num_bigint::BigInt;
