//! The engine's error type. Messages start with Deno KV's text and add the numbers.

use std::fmt;
use std::io::{self, ErrorKind};
use std::path::PathBuf;
use std::sync::Arc;

use thiserror::Error;
use tuplekv_codec::{DecodeError, SelectorError};

use crate::class::ErrorClass;
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
    ///
    /// Build it with [`Error::unavailable`] (and [`Error::with_source`]).
    Unavailable {
        /// What failed (the transport's own message).
        reason: String,
        /// The transport's error, when there is one (a refused connection's
        /// [`io::Error`], a TLS or HTTP error): the error's
        /// [`source`](std::error::Error::source). `reason` already says what it says.
        #[source]
        source: Option<Cause>,
    },
    /// A write to a remote store was sent, but the connection failed before its answer came:
    /// it may or may not have committed. Never resent blindly; read to find out.
    #[error("the outcome of the write is unknown (it may or may not have committed): {reason}")]
    ///
    /// Build it with [`Error::outcome_unknown`] (and [`Error::with_source`]).
    OutcomeUnknown {
        /// What failed.
        reason: String,
        /// The transport's error, when there is one: the error's
        /// [`source`](std::error::Error::source). `reason` already says what it says.
        #[source]
        source: Option<Cause>,
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
    /// [`Error::Unavailable`] for `reason`, with no source: add the transport's error with
    /// [`Error::with_source`].
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Error::Unavailable {
            reason: reason.into(),
            source: None,
        }
    }

    /// [`Error::OutcomeUnknown`] for `reason`, with no source: add the transport's error with
    /// [`Error::with_source`].
    pub fn outcome_unknown(reason: impl Into<String>) -> Self {
        Error::OutcomeUnknown {
            reason: reason.into(),
            source: None,
        }
    }

    /// The error with `source` as the cause of an [`Error::Unavailable`] or an
    /// [`Error::OutcomeUnknown`] (what [`source`](std::error::Error::source) returns); any
    /// other error is returned as it is.
    ///
    /// # Examples
    /// ```
    /// use std::error::Error as _;
    /// use std::io;
    ///
    /// let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused");
    /// let err = tuplekv_engine::Error::unavailable("connecting to the server: connection refused")
    ///     .with_source(refused);
    /// let cause = err.source().and_then(|s| s.downcast_ref::<io::Error>()).expect("io::Error");
    /// assert_eq!(cause.kind(), io::ErrorKind::ConnectionRefused);
    /// ```
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        if let Error::Unavailable { source: s, .. } | Error::OutcomeUnknown { source: s, .. } =
            &mut self
        {
            *s = Some(Cause::new(source));
        }
        self
    }

    /// The error's class: what kind of failure it is, for a caller deciding what to answer or
    /// whether to retry. Every variant has one; see [`ErrorClass`] for what each means.
    ///
    /// The predicates ([`is_transient`](Self::is_transient), [`is_conflict`](Self::is_conflict),
    /// [`is_outcome_unknown`](Self::is_outcome_unknown), ...) are [`Classify`](crate::Classify)'s, inherent.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::KeyTooLargeForWrite { .. }
            | Error::KeyTooLargeForRead { .. }
            | Error::EmptyKey
            | Error::ValueTooLarge { .. }
            | Error::TooManyChecks { .. }
            | Error::TooManyMutations { .. }
            | Error::TotalMutationSizeTooLarge { .. }
            | Error::TotalKeySizeTooLarge { .. }
            | Error::TooManyRanges { .. }
            | Error::TooManyWatchedKeys { .. }
            | Error::TooManyEntries { .. }
            | Error::ZeroLimit
            | Error::ZeroBatchSize
            | Error::ExpireInTooLarge { .. }
            | Error::NotU64 { .. }
            | Error::Sum(_)
            | Error::Selector(_)
            | Error::TargetExists { .. }
            | Error::InvalidEntry { .. }
            | Error::InvalidNumbering { .. }
            | Error::CounterNotU64 { .. } => ErrorClass::Invalid,
            Error::TransactionConflict { .. } => ErrorClass::Conflict,
            Error::OutcomeUnknown { .. } => ErrorClass::OutcomeUnknown,
            Error::CounterExhausted { .. }
            | Error::NumberTooWide { .. }
            | Error::VersionsExhausted { .. } => ErrorClass::Exhausted,
            // A snapshot the store dropped: the transaction (or the request) runs again.
            Error::Unavailable { .. } | Error::SnapshotExpired { .. } => ErrorClass::Unavailable,
            Error::Closed => ErrorClass::Closed,
            Error::Unsupported { .. } => ErrorClass::Unsupported,
            Error::Decode(_) | Error::Corrupt { .. } => ErrorClass::Corrupt,
            Error::Io(_) | Error::Locked { .. } | Error::Remote { .. } => ErrorClass::Internal,
            // `Suspended` never leaves an async operation; passing the rounds bound is the
            // operation's code, not its input.
            Error::Suspended | Error::TooManyRounds { .. } => ErrorClass::Internal,
        }
    }
}

crate::__impl_classify!(Error);

/// The error a transport failure carries as its [`source`](std::error::Error::source)
/// ([`Error::Unavailable`], [`Error::OutcomeUnknown`]), shared so that [`Error`](enum@Error) stays `Clone`.
///
/// It dereferences to the error itself, which is what `source()` returns: downcast that to
/// the transport's type (`std::io::Error`, say). Two causes are equal when their messages are.
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Cause {
    /// Wraps `error`.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Cause(Arc::new(error))
    }

    /// Wraps an error that is already shared.
    pub fn from_arc(error: Arc<dyn std::error::Error + Send + Sync + 'static>) -> Self {
        Cause(error)
    }
}

impl std::ops::Deref for Cause {
    type Target = dyn std::error::Error + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for Cause {}

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

    /// The class each variant must have, decided variant by variant: a new variant does not
    /// compile here until it has one (and a sample in `one_of_each`).
    fn expected_class(e: &Error) -> ErrorClass {
        use ErrorClass as C;
        match e {
            Error::KeyTooLargeForWrite { .. } => C::Invalid,
            Error::KeyTooLargeForRead { .. } => C::Invalid,
            Error::EmptyKey => C::Invalid,
            Error::ValueTooLarge { .. } => C::Invalid,
            Error::TooManyChecks { .. } => C::Invalid,
            Error::TooManyMutations { .. } => C::Invalid,
            Error::TotalMutationSizeTooLarge { .. } => C::Invalid,
            Error::TotalKeySizeTooLarge { .. } => C::Invalid,
            Error::TooManyRanges { .. } => C::Invalid,
            Error::TooManyWatchedKeys { .. } => C::Invalid,
            Error::TooManyEntries { .. } => C::Invalid,
            Error::ZeroLimit => C::Invalid,
            Error::ZeroBatchSize => C::Invalid,
            Error::ExpireInTooLarge { .. } => C::Invalid,
            Error::NotU64 { .. } => C::Invalid,
            Error::Sum(_) => C::Invalid,
            Error::Selector(_) => C::Invalid,
            Error::Decode(_) => C::Corrupt,
            Error::TransactionConflict { .. } => C::Conflict,
            Error::Io(_) => C::Internal,
            Error::Locked { .. } => C::Internal,
            Error::TargetExists { .. } => C::Invalid,
            Error::InvalidEntry { .. } => C::Invalid,
            Error::Corrupt { .. } => C::Corrupt,
            Error::Closed => C::Closed,
            Error::Unavailable { .. } => C::Unavailable,
            Error::OutcomeUnknown { .. } => C::OutcomeUnknown,
            Error::Unsupported { .. } => C::Unsupported,
            Error::SnapshotExpired { .. } => C::Unavailable,
            Error::Remote { .. } => C::Internal,
            Error::InvalidNumbering { .. } => C::Invalid,
            Error::CounterNotU64 { .. } => C::Invalid,
            Error::CounterExhausted { .. } => C::Exhausted,
            Error::NumberTooWide { .. } => C::Exhausted,
            Error::VersionsExhausted { .. } => C::Exhausted,
            Error::Suspended => C::Internal,
            Error::TooManyRounds { .. } => C::Internal,
        }
    }

    fn one_of_each() -> Vec<Error> {
        let key = KeyBytes::from(&b"\x02k\x00"[..]);
        vec![
            Error::KeyTooLargeForWrite { size: 2049 },
            Error::KeyTooLargeForRead { size: 2050 },
            Error::EmptyKey,
            Error::ValueTooLarge { size: 70_000 },
            Error::TooManyChecks { count: 101 },
            Error::TooManyMutations { count: 1001 },
            Error::TotalMutationSizeTooLarge { size: 900_000 },
            Error::TotalKeySizeTooLarge { size: 90_000 },
            Error::TooManyRanges { count: 11 },
            Error::TooManyWatchedKeys { count: 11 },
            Error::TooManyEntries { count: 1001 },
            Error::ZeroLimit,
            Error::ZeroBatchSize,
            Error::ExpireInTooLarge { ms: u128::MAX },
            Error::NotU64 {
                op: "sum",
                index: 0,
                key: key.clone(),
            },
            Error::Sum(SumError::OutOfRange),
            Error::Selector(SelectorError::StartAfterEnd),
            Error::Decode(
                KeyBytes::from(&[0x99u8][..])
                    .decode()
                    .expect_err("0x99 is no type code"),
            ),
            Error::TransactionConflict { attempts: 10 },
            Error::Io(IoError::new("syncing f", io::Error::other("gone"))),
            Error::Locked { path: "/db".into() },
            Error::TargetExists { path: "/db".into() },
            Error::InvalidEntry {
                index: 0,
                reason: "empty key".into(),
            },
            Error::Corrupt {
                path: "/db/wal".into(),
                offset: 7,
                reason: "bad crc".into(),
            },
            Error::Closed,
            Error::unavailable("connection refused"),
            Error::outcome_unknown("connection reset"),
            Error::Unsupported {
                operation: "watch",
                needs: "the extension",
            },
            Error::SnapshotExpired {
                versionstamp: "0".repeat(20),
            },
            Error::Remote {
                status: 500,
                message: "boom".into(),
            },
            Error::InvalidNumbering {
                reason: "overlap".into(),
            },
            Error::CounterNotU64 { key: key.clone() },
            Error::CounterExhausted {
                key,
                next: 9,
                count: 2,
                max: 9,
            },
            Error::NumberTooWide {
                number: 1000,
                width: 3,
            },
            Error::VersionsExhausted { last: u64::MAX },
            Error::Suspended,
            Error::TooManyRounds { rounds: 10_000 },
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
            assert_eq!(crate::Classify::class(e), class);
            assert_eq!(e.is_transient(), class == ErrorClass::Unavailable, "{e:?}");
            assert_eq!(e.is_conflict(), class == ErrorClass::Conflict, "{e:?}");
            assert_eq!(e.is_outcome_unknown(), class == ErrorClass::OutcomeUnknown);
            assert_eq!(
                e.is_unique_violation(),
                class == ErrorClass::UniqueViolation
            );
            assert_eq!(e.is_not_found(), class == ErrorClass::NotFound);
            assert_eq!(e.is_invalid(), class == ErrorClass::Invalid, "{e:?}");
        }
    }

    #[test]
    fn a_transport_cause_is_the_source_survives_clone_and_does_not_change_the_message() {
        let refused = io::Error::new(ErrorKind::ConnectionRefused, "connection refused");
        let err = Error::unavailable("connecting to h: connection refused").with_source(refused);
        assert_eq!(
            err.to_string(),
            "the store is unavailable: connecting to h: connection refused"
        );
        let copy = err.clone();
        for e in [&err, &copy] {
            let cause = e.source().and_then(|s| s.downcast_ref::<io::Error>());
            assert_eq!(
                cause.map(io::Error::kind),
                Some(ErrorKind::ConnectionRefused)
            );
        }
        assert_eq!(copy, err);
        assert_ne!(
            err,
            Error::unavailable("connecting to h: connection refused")
        );
        assert!(Error::unavailable("x").source().is_none());
        let unknown = Error::outcome_unknown("reset").with_source(io::Error::other("reset"));
        assert!(unknown.source().is_some());
        // Only the transport variants carry a cause.
        assert_eq!(
            Error::Closed.with_source(io::Error::other("x")),
            Error::Closed
        );
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
