//! tuplekv: an ordered, transactional key-value store in the style of Deno KV, and the layers
//! applications put on top of it.
//!
//! This facade re-exports the public API of the workspace crates so that applications depend
//! on one crate:
//! - keys: [`Key`], [`KeyPart`], the [`key!`] macro and the byte codec ([`codec`]);
//! - the store: [`Database`] with atomic operations, snapshots, lists and transactions
//!   ([`engine`]);
//! - typed collections with secondary indexes ([`index`]) and per-prefix code sequences
//!   ([`sequence`]);
//! - a client for a shared store ([`remote`]): [`RemoteStore`] is a [`Store`] on a
//!   `tuplekv serve` (or any KV Connect) server, so collections and sequences run unchanged on
//!   many app servers at once.
//!
//! ```
//! use tuplekv::{Database, ListOptions, Selector, key};
//!
//! let db = Database::in_memory();
//! let ada = key!["users", 1];
//! let email = key!["users_by_email", "ada@example.com"];
//! // Insert a user and its unique email index entry only if neither exists yet.
//! let res = db.atomic().check(&ada, None).check(&email, None).set(&ada, b"Ada").set(&email, b"1").commit()?;
//! assert!(res.is_committed());
//! let users = db.list(&Selector::prefix(&key!["users"]), ListOptions::default())?;
//! assert_eq!(users.count(), 1);
//! # Ok::<(), tuplekv::Error>(())
//! ```

pub use tuplekv_codec as codec;
pub use tuplekv_codec::{
    ByteRange, DecodeError, EncodeError, Key, KeyPart, Selector, SelectorError, decode_key,
    encode_key, key,
};
pub use tuplekv_engine as engine;
pub use tuplekv_engine::{
    CommitResult, Conflict, Database, Entry, Error, FailedCheck, ListCursor, ListOptions, Options,
    ReadView, Snapshot, Store, Transaction, Value, Versionstamp, Watch, WatchUpdate,
};
pub use tuplekv_index as index;
pub use tuplekv_remote as remote;
pub use tuplekv_remote::RemoteStore;
pub use tuplekv_sequence as sequence;

/// The README's example, compiled and run as a doctest so it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctest;
