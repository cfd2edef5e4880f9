//! Typed collections with secondary indexes that can never drift from their records.
//!
//! A [`Collection<T>`] stores records of a serde type under `[name, "id", primary key...]` and
//! keeps its declared indexes in the **same atomic commit** as each record write:
//! - unique (one-to-one): `[name, "u", index, value...] -> primary key`; a second record with
//!   the same value fails with [`Error::UniqueViolation`] naming the record that has it;
//! - non-unique (one-to-many): `[name, "i", index, value..., primary key...]`;
//! - compound (a value of several parts, queried by any leading parts), multi-entry (one entry
//!   per element, [`CollectionBuilder::multi`]) and optional (no value, no entry);
//! - entries point at the primary key by default, or hold a copy of the record
//!   ([`CollectionBuilder::covering`]): one read per result instead of two, larger writes.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use tuplekv_engine::{Database, ListOptions, key};
//! use tuplekv_index::{Collection, Error};
//!
//! #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
//! struct User { id: u64, email: String, color: String }
//!
//! let users = Collection::builder("users", |u: &User| key![u.id])
//!     .unique("email", |u| Some(key![u.email.clone()]))
//!     .index("color", |u| Some(key![u.color.clone()]))
//!     .open(Database::in_memory())?;
//! users.insert(&User { id: 1, email: "ada@example.com".into(), color: "green".into() })?;
//! let imposter = User { id: 2, email: "ada@example.com".into(), color: "red".into() };
//! assert!(matches!(users.insert(&imposter), Err(Error::UniqueViolation { .. })));
//! let (_, ada) = users.get_by("email", &key!["ada@example.com"])?.expect("indexed");
//! assert_eq!(ada.id, 1);
//! assert_eq!(users.list_by("color", &key!["green"], ListOptions::default())?.items.len(), 1);
//! # Ok::<(), Error>(())
//! ```
//!
//! # Why it cannot drift
//! Every write is one serializable transaction ([`tuplekv_engine::Store::transaction_with`]):
//! it reads the record and every unique entry it is about to own, then commits the record with
//! all entry sets and deletes. Reads are validated at commit, so a concurrent writer of the
//! same record or the same unique value makes one of the two retry (up to a bound, then
//! [`Error::Store`] with the conflict), and the retry sees the other's result. A failed write
//! (a unique violation, a record over the value limit, too many entries for one commit)
//! writes nothing. We use a transaction rather than hand-built versionstamp checks because the
//! absence of a unique value must be checked too, and a transaction checks exactly what it
//! read, without a second code path to keep right.
//!
//! # Values
//! Records are serialised with [postcard](https://docs.rs/postcard): compact (varints, no
//! field names), serde-driven, with a stable, specified wire format. Stored as
//! `Value::Bytes`, so the engine's 64 KiB value limit applies to the encoded record.
//!
//! # Adding an index later
//! An index declared on a collection that already has records starts *building*: writes
//! maintain it at once, queries on it return [`Error::IndexNotReady`], and
//! [`Collection::backfill`] indexes the existing records in bounded batches with progress
//! reporting while writes continue. Duplicates found while building a unique index are
//! reported and keep it from going live. [`Collection::verify`] reports every missing,
//! dangling or wrong entry; [`Collection::repair`] fixes them.

mod collection;
mod error;
mod maintain;

pub use collection::{Collection, CollectionBuilder, Extract, Page};
pub use error::Error;
pub use maintain::{
    BACKFILL_BATCH_DEFAULT, BackfillReport, Duplicate, Finding, Problem, Progress, VerifyReport,
};
