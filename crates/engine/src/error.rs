//! The engine's error type. Messages start with Deno KV's text and add the numbers.

use std::fmt;
use std::io::{self, ErrorKind};
use std::path::PathBuf;
use std::sync::Arc;

use thiserror::Error;
use tuplekv_codec::{DecodeError, SelectorError};

use crate::key_bytes::KeyBytes;
use crate::limits::*;
use crate::sum::SumError;

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
    /// More than [`WATCH_KEYS_MAX`] keys in one watch.
    #[error("Too many keys (max {WATCH_KEYS_MAX}): got {count}")]
    TooManyWatchedKeys {
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
    /// `sum`, `min` or `max` on a key whose current value is not a `U64`. The message is
    /// Deno's, then which mutation failed, as a failed check names its check.
    #[error(
        "Failed to perform '{op}' mutation on a non-U64 value in the database: \
         mutation {index} of the operation, key {key:?}"
    )]
    NotU64 {
        /// `"sum"`, `"min"` or `"max"`.
        op: &'static str,
        /// Position of the mutation in the operation (counting every mutation from 0).
        index: usize,
        /// The mutation's encoded key (its `Debug` shows the decoded tuple).
        key: KeyBytes,
    },
    /// A [`MutationKind::SumBounded`](crate::MutationKind::SumBounded) could not be applied;
    /// the message is Deno's own.
    #[error(transparent)]
    Sum(#[from] SumError),
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
    /// Its [`source`](std::error::Error::source) is the [`io::Error`] itself.
    #[error(transparent)]
    Io(IoError),
    /// The database directory is already open, in this process or another.
    #[error("database directory {} is already open (locked by another handle or process)", path.display())]
    Locked {
        /// The directory.
        path: PathBuf,
    },
    /// A new database directory (a backup's, an import's) was to be written where something
    /// already is: a file, or a directory that is not empty. Nothing was written.
    #[error("{} already exists and is not an empty directory: refusing to write a database over it", path.display())]
    TargetExists {
        /// The target.
        path: PathBuf,
    },
    /// An entry given to [`create_database`](crate::durable::create_database) cannot be in a
    /// database; nothing was written.
    #[error("entry {index}: {reason}")]
    InvalidEntry {
        /// Its position in the input, from 0.
        index: u64,
        /// What is wrong with it.
        reason: String,
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
    /// The database was closed (its last handle is gone) while a commit was still being
    /// retried; nothing was written.
    #[error("the database is closed")]
    Closed,
    /// A remote store could not be reached, or its answer did not arrive: nothing was read,
    /// and a write that meets it was not sent (or was refused before it could commit). Safe to
    /// retry.
    #[error("the store is unavailable: {reason}")]
    Unavailable {
        /// What failed (the transport's own message).
        reason: String,
    },
    /// A write to a remote store was sent, but the connection failed before its answer came:
    /// it may or may not have committed. Never resent blindly; read to find out.
    #[error("the outcome of the write is unknown (it may or may not have committed): {reason}")]
    OutcomeUnknown {
        /// What failed.
        reason: String,
    },
    /// The operation needs something the store does not offer (a remote server without
    /// tuplekv's KV Connect extension, for one). Nothing was read or written.
    #[error("{operation} is not supported by this store: it needs {needs}")]
    Unsupported {
        /// What was asked.
        operation: &'static str,
        /// What the store lacks.
        needs: &'static str,
    },
    /// A read of a snapshot that the store no longer holds (a remote server drops snapshots
    /// that stay idle, and all of them when it restarts). A transaction that meets it runs
    /// again on a fresh snapshot.
    #[error("the snapshot at {versionstamp} is no longer held by the store")]
    SnapshotExpired {
        /// The versionstamp the snapshot read at, as 20 hex digits.
        versionstamp: String,
    },
    /// A remote store refused a request with an error that has no variant of its own.
    #[error("the store refused the request ({status}): {message}")]
    Remote {
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// A commit's numbering ([`crate::numbering`]) breaks a rule or a limit: a slot outside
    /// its target or not on a placeholder of digits, overlapping slots, a counter the commit
    /// also writes, too many counters, numbers or slots. Nothing was written.
    #[error("invalid numbering: {reason}")]
    InvalidNumbering {
        /// The rule or limit, with the numbers.
        reason: String,
    },
    /// A counter a commit takes numbers from holds something other than a `U64`. Nothing
    /// was written.
    #[error("the counter at {key:?} does not hold a U64")]
    CounterNotU64 {
        /// The counter's encoded key.
        key: KeyBytes,
    },
    /// A commit would take numbers past its counter's `max`. Nothing was written and no
    /// number was taken.
    #[error("the counter at {key:?} is exhausted: {count} numbers from {next} pass its max {max}")]
    CounterExhausted {
        /// The counter's encoded key.
        key: KeyBytes,
        /// The counter's next number.
        next: u64,
        /// How many the commit asked for.
        count: u32,
        /// The counter's largest number.
        max: u64,
    },
    /// A number has more digits than a placeholder that may not widen. Nothing was written
    /// and no number was taken.
    #[error("the number {number} has more than the {width} digits its placeholder holds")]
    NumberTooWide {
        /// The number.
        number: u64,
        /// The placeholder's width.
        width: u8,
    },
    /// An async operation's round is suspended on a read or commit not answered yet
    /// ([`crate::replay`]): what a [`Replay`](crate::replay::Replay) answers after that call.
    /// The round is discarded and runs again once the call is answered; an async operation
    /// never returns it.
    #[error("suspended until an earlier read or commit of this async operation is answered")]
    Suspended,
    /// An async operation made more than [`REPLAY_ROUNDS_MAX`] reads and commits in sequence
    /// ([`crate::replay::run`]). Its reads are discarded; commits it made stand.
    #[error("the async operation took more than {rounds} rounds (reads and commits in sequence)")]
    TooManyRounds {
        /// The limit, [`REPLAY_ROUNDS_MAX`].
        rounds: usize,
    },
    /// Every version up to [`VERSION_MAX`](crate::limits::VERSION_MAX) is used: no commit
    /// can be numbered. No history gets there (it takes 2^63 commits).
    #[error("no versionstamp is left: the last one ({last}) is at the limit")]
    VersionsExhausted {
        /// The last version handed out.
        last: u64,
    },
}

impl Error {
    /// Whether the failure is of the moment rather than of the request: the store was
    /// unreachable ([`Error::Unavailable`]) or dropped the snapshot a read needed
    /// ([`Error::SnapshotExpired`]). Nothing was written, and the same request may succeed
    /// later. A transaction whose read met one runs again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Unavailable { .. } | Error::SnapshotExpired { .. }
        )
    }
}

/// An I/O failure: what was being done (and to which file), and the [`io::Error`] it met,
/// which is the error's [`source`](std::error::Error::source).
///
/// The `io::Error` is shared, so the error stays `Clone` (a failed log sync is reported to
/// every commit that waited for it): clones hold the same `io::Error`. Two `IoError`s are
/// equal when their contexts, kinds and messages are.
///
/// # Examples
/// ```
/// use std::error::Error as _;
/// use std::io;
/// use tuplekv_engine::{Error, IoError};
///
/// let err = Error::Io(IoError::new("syncing the log wal-1.log", io::Error::other("disk gone")));
/// assert_eq!(err.to_string(), "I/O error syncing the log wal-1.log: disk gone");
/// let source = err.source().and_then(|s| s.downcast_ref::<io::Error>()).expect("io::Error");
/// assert_eq!(source.kind(), io::ErrorKind::Other);
/// ```
#[derive(Debug, Clone)]
pub struct IoError {
    context: String,
    error: Arc<io::Error>,
}

impl IoError {
    /// The failure `error`, met while doing `context` (say what, and to which file).
    pub fn new(context: impl Into<String>, error: io::Error) -> Self {
        IoError {
            context: context.into(),
            error: Arc::new(error),
        }
    }

    /// The failure `error`, met while doing `context`, for a caller that only borrows it: an
    /// operating system error is rebuilt from its code (the same kind, message and
    /// `raw_os_error`), any other from its kind and message.
    pub(crate) fn copied(context: impl Into<String>, error: &io::Error) -> Self {
        let copy = match error.raw_os_error() {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(error.kind(), error.to_string()),
        };
        IoError::new(context, copy)
    }

    /// The same `io::Error`, shared, under another context.
    pub(crate) fn with_context(&self, context: impl Into<String>) -> Self {
        IoError {
            context: context.into(),
            error: Arc::clone(&self.error),
        }
    }

    /// What was being done, and to which file.
    pub fn context(&self) -> &str {
        &self.context
    }

    /// The operating system's error kind.
    pub fn kind(&self) -> ErrorKind {
        self.error.kind()
    }

    /// The `io::Error` (also the error's `source`).
    pub fn io_error(&self) -> &io::Error {
        &self.error
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "I/O error {}: {}", self.context, self.error)
    }
}

impl std::error::Error for IoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.error)
    }
}

impl PartialEq for IoError {
    fn eq(&self, other: &Self) -> bool {
        self.context == other.context
            && (Arc::ptr_eq(&self.error, &other.error)
                || (self.error.kind() == other.error.kind()
                    && self.error.to_string() == other.error.to_string()))
    }
}

impl Eq for IoError {}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    fn io_source(err: &Error) -> &io::Error {
        err.source()
            .and_then(|s| s.downcast_ref::<io::Error>())
            .expect("the source is the io::Error")
    }

    #[test]
    fn an_io_error_is_the_source_and_clones_share_it() {
        let err = Error::Io(IoError::new(
            "appending to the log /db/wal.log",
            io::Error::new(ErrorKind::StorageFull, "No space left on device"),
        ));
        assert_eq!(io_source(&err).kind(), ErrorKind::StorageFull);
        assert_eq!(
            err.to_string(),
            "I/O error appending to the log /db/wal.log: No space left on device"
        );
        let copy = err.clone();
        assert!(std::ptr::eq(io_source(&err), io_source(&copy)));
        assert_eq!(copy, err);
        let Error::Io(io) = &err else {
            unreachable!("built as Io")
        };
        assert_eq!(io.kind(), ErrorKind::StorageFull);
        assert_eq!(io.context(), "appending to the log /db/wal.log");
        assert!(std::ptr::eq(io.io_error(), io_source(&err)));
    }

    #[test]
    fn io_errors_are_equal_by_context_kind_and_message() {
        let a = IoError::new("syncing f", io::Error::other("gone"));
        assert_eq!(a, IoError::new("syncing f", io::Error::other("gone")));
        assert_ne!(a, IoError::new("syncing g", io::Error::other("gone")));
        assert_ne!(a, IoError::new("syncing f", io::Error::other("lost")));
        assert_ne!(
            a,
            IoError::new("syncing f", io::Error::new(ErrorKind::StorageFull, "gone"))
        );
        let moved = a.with_context("repairing f");
        assert!(std::ptr::eq(moved.io_error(), a.io_error()));
        assert_eq!(moved.context(), "repairing f");
    }

    #[test]
    fn a_borrowed_io_error_is_copied_with_its_kind_message_and_code() {
        let os = io::Error::from_raw_os_error(28);
        let copy = IoError::copied("writing f", &os);
        assert_eq!(copy.io_error().raw_os_error(), Some(28));
        assert_eq!(copy.kind(), os.kind());
        assert_eq!(copy.io_error().to_string(), os.to_string());
        let injected = io::Error::new(ErrorKind::StorageFull, "disk full (injected)");
        let copy = IoError::copied("writing f", &injected);
        assert_eq!(copy.kind(), ErrorKind::StorageFull);
        assert_eq!(copy.io_error().to_string(), "disk full (injected)");
    }
}
