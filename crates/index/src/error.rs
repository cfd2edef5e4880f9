//! What can go wrong in a collection, said plainly.

use thiserror::Error;
use tuplekv_codec::Key;
use tuplekv_engine::ErrorClass;
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

impl Error {
    /// The error's class: what kind of failure it is, for a caller deciding what to answer or
    /// whether to retry (see [`ErrorClass`] for each, and [`ErrorClass::http_status`]). A
    /// store error ([`Error::Store`]) has the engine error's class, so a lost commit answer
    /// is [`ErrorClass::OutcomeUnknown`] whether it comes as [`Error::OutcomeUnknown`] or
    /// wrapped.
    ///
    /// The predicates ([`is_unique_violation`](Self::is_unique_violation),
    /// [`is_not_found`](Self::is_not_found), [`is_transient`](Self::is_transient), ...) are
    /// [`Classify`](tuplekv_engine::Classify)'s, inherent.
    ///
    /// # Examples
    /// ```
    /// use tuplekv_index::{Collection, Error};
    /// use tuplekv_engine::{Database, ErrorClass, key};
    ///
    /// # fn main() -> Result<(), Error> {
    /// let users = Collection::builder("users", |u: &(u64, String)| key![u.0])
    ///     .unique("email", |u| Some(key![u.1.clone()]))
    ///     .open(Database::in_memory())?;
    /// users.insert(&(1, "ada@example.com".to_owned()))?;
    /// let err = users.insert(&(2, "ada@example.com".to_owned())).unwrap_err();
    /// assert!(err.is_unique_violation());
    /// assert_eq!(err.class(), ErrorClass::UniqueViolation);
    /// assert_eq!(err.class().http_status(), 409);
    /// # Ok(())
    /// # }
    /// ```
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::UniqueViolation { .. } => ErrorClass::UniqueViolation,
            Error::AlreadyExists { .. } => ErrorClass::AlreadyExists,
            Error::NotFound { .. } => ErrorClass::NotFound,
            Error::PrimaryKeyChanged { .. }
            | Error::UnknownIndex { .. }
            | Error::Definition(_)
            | Error::KeyTooLargeForWrite { .. } => ErrorClass::Invalid,
            // It answers once `backfill` has run: later, not never.
            Error::IndexNotReady { .. } => ErrorClass::Unavailable,
            // A record that does not serialise is the program's; one stored by a struct this
            // one cannot read, the deployment's.
            Error::Codec { .. } | Error::Incompatible { .. } | Error::Schema { .. } => {
                ErrorClass::Internal
            }
            Error::OutcomeUnknown { .. } => ErrorClass::OutcomeUnknown,
            Error::Store(e) => e.class(),
        }
    }
}

tuplekv_engine::__impl_classify!(Error);

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

#[cfg(test)]
mod tests {
    use tuplekv_codec::key;

    use super::*;

    /// The class each variant must have, decided variant by variant: a new variant does not
    /// compile here until it has one (and a sample in `one_of_each`).
    fn expected_class(e: &Error) -> ErrorClass {
        use ErrorClass as C;
        match e {
            Error::UniqueViolation { .. } => C::UniqueViolation,
            Error::AlreadyExists { .. } => C::AlreadyExists,
            Error::NotFound { .. } => C::NotFound,
            Error::PrimaryKeyChanged { .. } => C::Invalid,
            Error::UnknownIndex { .. } => C::Invalid,
            Error::IndexNotReady { .. } => C::Unavailable,
            Error::Definition(_) => C::Invalid,
            Error::KeyTooLargeForWrite { .. } => C::Invalid,
            Error::Codec { .. } => C::Internal,
            Error::Incompatible { .. } => C::Internal,
            Error::Schema { .. } => C::Internal,
            Error::OutcomeUnknown { .. } => C::OutcomeUnknown,
            Error::Store(e) => e.class(),
        }
    }

    fn one_of_each() -> Vec<Error> {
        vec![
            Error::UniqueViolation {
                index: "email".into(),
                value: key!["ada@example.com"],
                existing_primary_key: key![1],
            },
            Error::AlreadyExists {
                primary_key: key![1],
            },
            Error::NotFound {
                primary_key: key![1],
            },
            Error::PrimaryKeyChanged {
                from: key![1],
                to: key![2],
            },
            Error::UnknownIndex {
                collection: "users".into(),
                index: "emial".into(),
            },
            Error::IndexNotReady {
                index: "email".into(),
            },
            Error::Definition("duplicate index".into()),
            Error::KeyTooLargeForWrite {
                collection: "users".into(),
                index: None,
                size: 3000,
            },
            Error::Codec {
                primary_key: key![1],
                message: "bad".into(),
            },
            Error::Incompatible {
                collection: "users".into(),
                primary_key: key![1],
                version: 2,
                reason: "no field".into(),
            },
            Error::Schema {
                collection: "users".into(),
                reason: "reordered".into(),
            },
            Error::OutcomeUnknown {
                collection: "users".into(),
                primary_key: key![1],
                reason: "connection reset".into(),
                reread: Reread::Absent,
            },
            Error::Store(tuplekv_engine::Error::EmptyKey),
        ]
    }

    #[test]
    fn every_variant_has_its_decided_class_and_the_predicates_follow_it() {
        let samples = one_of_each();
        let mut kinds: Vec<_> = samples.iter().map(std::mem::discriminant).collect();
        kinds.dedup();
        assert_eq!(kinds.len(), samples.len(), "one sample per variant");
        for e in &samples {
            let class = e.class();
            assert_eq!(class, expected_class(e), "{e:?}");
            assert_eq!(tuplekv_engine::Classify::class(e), class);
            assert_eq!(
                e.is_unique_violation(),
                class == ErrorClass::UniqueViolation
            );
            assert_eq!(e.is_not_found(), class == ErrorClass::NotFound);
            assert_eq!(e.is_transient(), class == ErrorClass::Unavailable, "{e:?}");
            assert_eq!(e.is_outcome_unknown(), class == ErrorClass::OutcomeUnknown);
        }
    }

    #[test]
    fn a_wrapped_store_error_classifies_as_the_store_error_does() {
        let lost = tuplekv_engine::Error::outcome_unknown("connection reset");
        assert_eq!(Error::Store(lost.clone()).class(), lost.class());
        assert_eq!(lost.class(), ErrorClass::OutcomeUnknown);
        assert!(Error::Store(lost).is_outcome_unknown());
        let conflict = Error::Store(tuplekv_engine::Error::TransactionConflict { attempts: 10 });
        assert!(conflict.is_conflict());
        let down = Error::Store(tuplekv_engine::Error::unavailable("no route"));
        assert!(down.is_transient());
        assert_eq!(down.class().http_status(), 503);
    }
}
