//! tuplekv: an ordered, transactional key-value store in the style of Deno KV, and the layers
//! applications put on top of it: typed collections with unique and secondary indexes, and
//! per-prefix code sequences. Data lives in memory, with a write-ahead log on disk when the
//! store is opened on a directory; with the `remote` feature, a `RemoteStore` shares one store
//! between app servers.
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
//! - async twins of what a handler calls (`get_async`, `list_async`, `transaction_async` on
//!   any [`Store`]; `insert_async`, `get_by_async`, ... on a [`Collection`]; `next_async` on
//!   a sequence), which hold no thread while the store waits: the blocking code run in
//!   rounds ([`replay`]); `docs/async.md` is the guide;
//! - errors a handler can map: every error type here ([`Error`], [`index::Error`],
//!   [`sequence::Error`]) has a [`class`](Error::class), an [`ErrorClass`] with a suggested
//!   [HTTP status](ErrorClass::http_status), and the predicates of [`Classify`]
//!   (`is_transient`, `is_conflict`, `is_outcome_unknown`, `is_unique_violation`, ...);
//! - with the `remote` feature, a client for a shared store (`tuplekv::remote`):
//!   `RemoteStore` is a [`Store`] on a `tuplekv serve` (or any KV Connect) server, so
//!   collections and sequences run unchanged on many app servers at once;
//! - with the `etcd` feature, a store that outlives its machine (`tuplekv::etcd`):
//!   `EtcdStore` is a [`Store`] on a replicated etcd cluster.
//!
//! # Errors in a service
//! One match on the class answers any of them; an outcome that is unknown (a remote commit
//! whose answer was lost) classifies the same whichever crate reports it:
//!
//! ```
//! use tuplekv::{ErrorClass, key};
//! use tuplekv::index::Collection;
//!
//! fn status(class: ErrorClass) -> u16 {
//!     match class {
//!         ErrorClass::UniqueViolation => 409, // "that email is taken"
//!         ErrorClass::OutcomeUnknown => 409,  // read before resending
//!         other => other.http_status(),
//!     }
//! }
//!
//! let users = Collection::builder("users", |u: &(u64, String)| key![u.0])
//!     .unique("email", |u| Some(key![u.1.clone()]))
//!     .open(tuplekv::Database::in_memory())?;
//! users.insert(&(1, "ada@example.com".to_owned()))?;
//! let err = users.insert(&(2, "ada@example.com".to_owned())).unwrap_err();
//! assert_eq!(status(err.class()), 409);
//! let lost = tuplekv::Error::outcome_unknown("connection reset");
//! assert_eq!(tuplekv::index::Error::Store(lost.clone()).class(), ErrorClass::OutcomeUnknown);
//! assert_eq!(tuplekv::sequence::Error::Store(lost).class(), ErrorClass::OutcomeUnknown);
//! # Ok::<(), tuplekv::index::Error>(())
//! ```
//!
//! # Features
//! The defaults are the embedded store alone: no async runtime, no network client.
//!
//! | feature | what it brings | extra crates (`cargo tree -e normal`) |
//! |---|---|---|
//! | (default) | [`Database`] in memory or durable, collections, sequences | none: 46 crates in all |
//! | `remote` | `tuplekv::remote`, `RemoteStore`, `RemoteOptions`: the client of a shared `tuplekv serve` | 91 (tokio, hyper, h2, rustls, prost, denokv_proto, ...) |
//! | `etcd` | `tuplekv::etcd`, `EtcdStore`: the store on an etcd cluster; building it needs `protoc` | 55 (tokio, tonic, prost, etcd-client, ...) |
//!
//! CI's `deps-embedded` step (`cargo xtask ci`) fails if the default build ever pulls in an
//! async runtime or a network crate.

pub use tuplekv_codec as codec;
pub use tuplekv_codec::{
    ByteRange, DecodeError, EncodeError, Key, KeyPart, Selector, SelectorError, decode_key,
    encode_key, key,
};
pub use tuplekv_engine as engine;
pub use tuplekv_engine::limits;
pub use tuplekv_engine::replay;
pub use tuplekv_engine::{
    Atomic, AtomicWrite, Cause, Check, Classify, CommitResult, Conflict, Database, Durability,
    Entry, Error, ErrorClass, Expiry, FailedCheck, Health, IoError, KeyBytes, KeyWatch, ListCursor,
    ListIter, ListOptions, ListPage, Mutation, MutationKind, Options, ReadView, RecoveryReport,
    Snapshot, Stats, Store, Transaction, TransactionOptions, Value, Versionstamp, Watch,
    WatchUpdate,
};
#[cfg(feature = "etcd")]
pub use tuplekv_etcd as etcd;
#[cfg(feature = "etcd")]
pub use tuplekv_etcd::EtcdStore;
pub use tuplekv_index as index;
pub use tuplekv_index::{Collection, IndexName, RecordFormat};
#[cfg(feature = "remote")]
pub use tuplekv_remote as remote;
#[cfg(feature = "remote")]
pub use tuplekv_remote::{RemoteOptions, RemoteStore};
pub use tuplekv_sequence as sequence;
pub use tuplekv_sequence::{Mode, SequenceOptions, Sequences};

/// The README's examples, compiled (and the embedded one run) as doctests so they cannot go
/// stale. One uses `RemoteStore`, so they need the `remote` feature: CI's `facade-features`
/// step runs them (`cargo test -p tuplekv --all-features`).
#[cfg(all(doctest, feature = "remote"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctest;

/// The examples of the guide to sharing a store (`docs/share.md`), compiled as doctests.
#[cfg(all(doctest, feature = "remote"))]
#[doc = include_str!("../../../docs/share.md")]
pub struct ShareGuideDoctest;

/// The key examples of `docs/guarantees.md`, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guarantees.md")]
pub struct GuaranteesDoctest;
