//! What can go wrong in a collection, said plainly.

use thiserror::Error;
use tuplekv_codec::Key;
use tuplekv_engine::limits::KEY_SIZE_MAX_WRITE;

/// Why a collection operation failed. A failed operation writes nothing.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum Error {
    /// Another record already holds this value of a unique index.
    #[error("unique index `{index}` already has {value} (record {existing_primary_key})")]
    UniqueViolation {
        /// The index.
        index: String,
        /// The value both records have.
        value: Key,
        /// The primary key of the record that holds it.
        existing_primary_key: Key,
    },
    /// `insert` of a primary key that exists.
    #[error("a record with primary key {primary_key} already exists")]
    AlreadyExists {
        /// The primary key.
        primary_key: Key,
    },
    /// `update` of a primary key that does not exist.
    #[error("no record with primary key {primary_key}")]
    NotFound {
        /// The primary key.
        primary_key: Key,
    },
    /// An `update` closure changed the record's primary key (delete and insert instead).
    #[error("update changed the primary key from {from} to {to}")]
    PrimaryKeyChanged {
        /// The key the update was for.
        from: Key,
        /// The key the closure's record has.
        to: Key,
    },
    /// A query named an index the collection does not declare.
    #[error("collection `{collection}` has no index `{index}`")]
    UnknownIndex {
        /// The collection.
        collection: String,
        /// The index asked for.
        index: String,
    },
    /// The index is being built from existing records and cannot answer queries yet.
    #[error(
        "index `{index}` is still being built; run `backfill` (it is maintained by writes already)"
    )]
    IndexNotReady {
        /// The index.
        index: String,
    },
    /// The collection's definition is invalid (a duplicate index name, an empty name, a
    /// `covering()` with no index before it).
    #[error("invalid collection definition: {0}")]
    Definition(String),
    /// A write's record key (its primary key is too long) or one of its index entry keys (the
    /// value is too long; a non-unique entry key ends with the primary key too) is longer than
    /// the engine writes, [`KEY_SIZE_MAX_WRITE`] bytes. It is found before the store reads or
    /// writes that key, and nothing is written.
    #[error(
        "collection `{collection}`{}: {} key is {size} bytes, max for write is \
         {KEY_SIZE_MAX_WRITE}",
        .index.as_ref().map(|i| format!(", index `{i}`")).unwrap_or_default(),
        if .index.is_some() { "entry" } else { "record" }
    )]
    KeyTooLargeForWrite {
        /// The collection.
        collection: String,
        /// The index whose entry key is too long, or `None` for the record key.
        index: Option<String>,
        /// The encoded key's length.
        size: usize,
    },
    /// A record could not be serialised, or a stored record could not be read back.
    #[error("record {primary_key}: {message}")]
    Codec {
        /// The record's primary key (empty if unknown).
        primary_key: Key,
        /// What failed.
        message: String,
    },
    /// A stored record does not read as the collection's record type: its struct changed in a
    /// way the format cannot bridge (see the crate's *Record evolution* section), or the
    /// record's [`CollectionBuilder::migrate`](crate::CollectionBuilder::migrate) conversion
    /// failed. Nothing was written.
    #[error(
        "collection `{collection}`, record {primary_key}: stored by version {version} of the \
         record struct, it does not read as this version: {reason}"
    )]
    Incompatible {
        /// The collection.
        collection: String,
        /// The record's primary key.
        primary_key: Key,
        /// The version of the struct the record was stored by (0: before versioning).
        version: u32,
        /// Why it does not read.
        reason: String,
    },
    /// The record struct does not fit what the collection has stored, found at `open` before
    /// a record is read or written: fields reordered, removed, retyped, inserted, or added
    /// without a default, an older version than the one stored, a stored version with no
    /// migration, or a migration that fails on a stored record. A handle of an older
    /// version whose collection moved on gets it for every write. The reason names the fields
    /// and says what to declare; nothing was written.
    #[error("collection `{collection}`: {reason}")]
    Schema {
        /// The collection.
        collection: String,
        /// What does not fit, and what to declare.
        reason: String,
    },
    /// A write was sent to a remote store and the connection failed before its answer came,
    /// so it may or may not have committed (it was not resent: that could write twice). The
    /// collection re-read the record afterwards; `reread` says what it found. An insert or
    /// update that finds exactly what it wrote reports success instead of this.
    #[error(
        "collection `{collection}`: the write of record {primary_key} may or may not have \
         committed ({reason}); re-read, the record {reread}"
    )]
    OutcomeUnknown {
        /// The collection.
        collection: String,
        /// The record's primary key.
        primary_key: Key,
        /// What failed on the way back.
        reason: String,
        /// What the record held when re-read.
        reread: Reread,
    },
    /// The store refused the operation (a limit such as the value size, a bad key) or kept
    /// conflicting past the retry bound.
    #[error(transparent)]
    Store(#[from] tuplekv_engine::Error),
}

/// What a record held when re-read after a write with an unknown outcome
/// ([`Error::OutcomeUnknown`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reread {
    /// Nothing is there: the write did not commit, or it deleted the record, or it is still on
    /// its way (a later write with checks cannot be overtaken by it).
    Absent,
    /// Exactly the bytes the write wrote.
    Written,
    /// Some other version of the record.
    Other,
    /// The re-read failed too.
    Failed(String),
}

impl std::fmt::Display for Reread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reread::Absent => f.write_str("is absent"),
            Reread::Written => f.write_str("holds what the write wrote"),
            Reread::Other => f.write_str("holds another version"),
            Reread::Failed(e) => write!(f, "could not be read ({e})"),
        }
    }
}
