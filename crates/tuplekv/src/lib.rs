//! tuplekv: an ordered, transactional key-value store in the style of Deno KV, and the layers
//! applications put on top of it.
//!
//! This facade re-exports the public API of the workspace crates so that applications depend
//! on one crate:
//! - keys: [`Key`], [`KeyPart`], the [`key!`] macro and the byte codec ([`codec`]);
//! - the store ([`engine`]), typed collections with secondary indexes ([`index`]) and per-prefix
//!   code sequences ([`sequence`]) as their issues land.
//!
//! ```
//! use tuplekv::{Key, decode_key, encode_key, key};
//!
//! let k: Key = key!["users_by_email", "ada@example.com"];
//! assert_eq!(decode_key(&encode_key(&k))?, k);
//! # Ok::<(), tuplekv::DecodeError>(())
//! ```

pub use tuplekv_codec as codec;
pub use tuplekv_codec::{
    ByteRange, DecodeError, EncodeError, Key, KeyPart, Selector, SelectorError, decode_key,
    encode_key, key,
};
pub use tuplekv_engine as engine;
pub use tuplekv_index as index;
pub use tuplekv_sequence as sequence;

/// The README's example, compiled and run as a doctest so it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctest;
