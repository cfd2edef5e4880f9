//! tuplekv: an ordered, transactional key-value store in the style of Deno KV, and the layers
//! applications put on top of it: typed collections with unique and secondary indexes, and
//! per-prefix code sequences. Data lives in memory, with a write-ahead log on disk when the
//! store is opened on a directory; a [`RemoteStore`] shares one store between app servers.
//!
//! # A collection with a unique index, and codes from a sequence
//! A [`Collection`] stores serde records and keeps their indexes in the record's own commit,
//! so an index can never point at a record that does not have the value, and a second record
//! with a unique value is refused. [`Sequences`] hands out codes (`ORD001`, `ORD002`, ...)
//! that are never handed out twice, across threads, handles and restarts.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use tuplekv::index::{Collection, Error as IndexError};
//! use tuplekv::sequence::{SequenceOptions, Sequences};
//! use tuplekv::{Database, key};
//!
//! #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
//! struct User { id: u64, email: String }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let db = Database::in_memory(); // or Database::open(dir, Options::default())
//! let users = Collection::builder("users", |u: &User| key![u.id])
//!     .unique("email", |u| Some(key![u.email.clone()]))
//!     .open(db.clone())?;
//! users.insert(&User { id: 1, email: "ada@example.com".into() })?;
//!
//! // A second account with Ada's email is refused, and nothing of it is written.
//! let imposter = User { id: 2, email: "ada@example.com".into() };
//! assert!(matches!(users.insert(&imposter), Err(IndexError::UniqueViolation { .. })));
//! let (id, ada) = users.get_by("email", &key!["ada@example.com"])?.expect("indexed");
//! assert_eq!((id, ada.id), (key![1], 1));
//!
//! let seqs = Sequences::new(db);
//! seqs.create("ORD", SequenceOptions::default())?;
//! let orders = seqs.fast("ORD")?; // one handle per process; share it between threads
//! assert_eq!(orders.next()?.code(), "ORD001");
//! assert_eq!(orders.next()?.code(), "ORD002");
//! # Ok(())
//! # }
//! ```
//!
//! # The raw store: atomic operations with checks
//! Underneath, [`Database`] is Deno KV's model: keys are tuples ([`key!`]), and an atomic
//! operation commits its mutations only if every check still holds, all or nothing. This is
//! the pattern a collection writes for you:
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
//!
//! # What is where
//! - keys: [`Key`], [`KeyPart`], the [`key!`] macro and the byte codec ([`codec`]);
//! - the store: [`Database`] (in memory, or durable with [`Database::open`], [`Options`] and
//!   [`Durability`]; [`Database::recovery_report`] says what a restart replayed, as a
//!   [`RecoveryReport`]; [`Database::stats`] gives [`Stats`]), atomic operations, snapshots,
//!   lists ([`ListIter`]), watches and transactions ([`TransactionOptions`]) ([`engine`]);
//! - typed collections with secondary indexes: [`Collection`] ([`index`]), including how
//!   records evolve when their struct changes;
//! - per-prefix code sequences: [`Sequences`] ([`sequence`]);
//! - a client for a shared store ([`remote`]): [`RemoteStore`] is a [`Store`] on a
//!   `tuplekv serve` (or any KV Connect) server, so collections and sequences run unchanged on
//!   many app servers at once;
//! - with the `etcd` feature, a store that outlives its machine (`tuplekv::etcd`):
//!   `EtcdStore` is a [`Store`] on a replicated etcd cluster.

pub use tuplekv_codec as codec;
pub use tuplekv_codec::{
    ByteRange, DecodeError, EncodeError, Key, KeyPart, Selector, SelectorError, decode_key,
    encode_key, key,
};
pub use tuplekv_engine as engine;
pub use tuplekv_engine::limits;
pub use tuplekv_engine::{
    CommitResult, Conflict, Database, Durability, Entry, Error, Expiry, FailedCheck, IoError,
    KeyWatch, ListCursor, ListIter, ListOptions, Options, ReadView, RecoveryReport, Snapshot,
    Stats, Store, Transaction, TransactionOptions, Value, Versionstamp, Watch, WatchUpdate,
};
#[cfg(feature = "etcd")]
pub use tuplekv_etcd as etcd;
#[cfg(feature = "etcd")]
pub use tuplekv_etcd::EtcdStore;
pub use tuplekv_index as index;
pub use tuplekv_index::{Collection, RecordFormat};
pub use tuplekv_remote as remote;
pub use tuplekv_remote::RemoteStore;
pub use tuplekv_sequence as sequence;
pub use tuplekv_sequence::{Mode, SequenceOptions, Sequences};

/// The README's example, compiled and run as a doctest so it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctest;
