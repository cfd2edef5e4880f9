//! The engine's error type. Messages start with Deno KV's text and add the numbers.

use std::io::ErrorKind;
use std::path::PathBuf;

use thiserror::Error;
use tuplekv_codec::{DecodeError, SelectorError};

use crate::limits::*;

/// Why an operation failed. A failed operation never changes the store.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// A key used by a write is longer than [`KEY_SIZE_MAX_WRITE`].
    #[error("Key too large for write (max {KEY_SIZE_MAX_WRITE} bytes): key is {size} bytes")]
    KeyTooLargeForWrite {
        /// The encoded key's length.
        size: usize,
    },
    /// A key used by a read is longer than [`KEY_SIZE_MAX_READ`].
    #[error("Key too large for read (max {KEY_SIZE_MAX_READ} bytes): key is {size} bytes")]
    KeyTooLargeForRead {
        /// The encoded key's length.
        size: usize,
    },
    /// A write used the empty key `[]`.
    #[error("key cannot be empty")]
    EmptyKey,
    /// A value is larger than [`VALUE_SIZE_MAX`].
    #[error("Value too large (max {VALUE_SIZE_MAX} bytes): value is {size} bytes")]
    ValueTooLarge {
        /// The value's size.
        size: usize,
    },
    /// More than [`CHECKS_MAX`] checks.
    #[error("Too many checks (max {CHECKS_MAX}): got {count}")]
    TooManyChecks {
        /// The number of checks.
        count: usize,
    },
    /// More than [`MUTATIONS_MAX`] mutations.
    #[error("Too many mutations (max {MUTATIONS_MAX}): got {count}")]
    TooManyMutations {
        /// The number of mutations.
        count: usize,
    },
    /// The operation carries more than [`TOTAL_MUTATION_SIZE_MAX`] bytes.
    #[error(
        "Total mutation size too large (max {TOTAL_MUTATION_SIZE_MAX} bytes): got {size} bytes"
    )]
    TotalMutationSizeTooLarge {
        /// The operation's size, counted as Deno counts it.
        size: usize,
    },
    /// The value-carrying mutations' keys add up to more than [`TOTAL_KEY_SIZE_MAX`] bytes.
    #[error("Total key size too large (max {TOTAL_KEY_SIZE_MAX} bytes): got {size} bytes")]
    TotalKeySizeTooLarge {
        /// The sum of the key lengths.
        size: usize,
    },
    /// More than [`GET_MANY_KEYS_MAX`] keys in one `get_many`.
    #[error("Too many ranges (max {GET_MANY_KEYS_MAX}): got {count}")]
    TooManyRanges {
        /// The number of keys.
        count: usize,
    },
    /// A list batch larger than [`LIST_BATCH_SIZE_MAX`].
    #[error("Too many entries (max {LIST_BATCH_SIZE_MAX}): got {count}")]
    TooManyEntries {
        /// The requested batch size.
        count: usize,
    },
    /// A list limit of zero.
    #[error("Limit must be a positive integer: received 0")]
    ZeroLimit,
    /// A list batch size of zero.
    #[error("batchSize must be a positive integer: received 0")]
    ZeroBatchSize,
    /// An expiry longer than [`EXPIRE_IN_MAX_MS`].
    #[error("Invalid mutation: expireIn is too large: {ms}")]
    ExpireInTooLarge {
        /// The requested expiry in milliseconds.
        ms: u128,
    },
    /// `sum`, `min` or `max` on a key whose current value is not a `U64`.
    #[error("Failed to perform '{op}' mutation on a non-U64 value in the database")]
    NotU64 {
        /// `"sum"`, `"min"` or `"max"`.
        op: &'static str,
    },
    /// An invalid selector or cursor.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// A stored key that is not a valid tuple (only from the typed key accessors).
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A transaction kept conflicting with other commits.
    #[error("transaction conflicted on each of its {attempts} attempts")]
    TransactionConflict {
        /// How many times it ran.
        attempts: u32,
    },
    /// A file operation of a durable database failed. The commit that met it was not applied.
    #[error("I/O error {context}: {message}")]
    Io {
        /// What was being done, and to which file.
        context: String,
        /// The operating system's error kind.
        kind: ErrorKind,
        /// The operating system's message.
        message: String,
    },
    /// The database directory is already open, in this process or another.
    #[error("database directory {} is already open (locked by another handle or process)", path.display())]
    Locked {
        /// The directory.
        path: PathBuf,
    },
    /// A durable file is damaged where damage cannot be a torn write from a crash.
    #[error("{} is corrupt at offset {offset}: {reason}", path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// The offset of the first bad byte.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}
