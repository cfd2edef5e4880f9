//! One classification for every tuplekv error: [`ErrorClass`] and the [`Classify`] trait.
//!
//! A service handler that calls a collection, a sequence and the store meets three error
//! types ([`crate::Error`], `tuplekv_index::Error`, `tuplekv_sequence::Error`), the last two
//! wrapping the first. Each implements [`Classify`] (and has the same methods inherent, so no
//! import is needed), and an error classifies the same whichever type carries it: a remote
//! commit whose answer was lost is [`ErrorClass::OutcomeUnknown`] as an engine error, as an
//! index error and as a sequence error wrapping the engine's.

use std::fmt;

/// What kind of failure an error is, for a caller that must decide what to do with it: answer
/// the client, retry, or find out what happened. Every variant of every tuplekv error type has
/// exactly one class.
///
/// [`ErrorClass::http_status`] suggests an HTTP status for each.
///
/// # Examples
/// ```
/// use tuplekv_engine::{Error, ErrorClass};
///
/// let err = Error::unavailable("connection refused");
/// assert_eq!(err.class(), ErrorClass::Unavailable);
/// assert!(err.is_transient());
/// assert_eq!(err.class().http_status(), 503);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// The request is wrong and fails again unchanged: bad input (an empty key, a bad cursor,
    /// text that is not a code), a limit passed (a key, a value or a commit too large), a
    /// definition that cannot work. Nothing was written.
    Invalid,
    /// What the request names does not exist: the record an update is for, a sequence.
    NotFound,
    /// What the request creates exists already: a record's primary key, a sequence defined
    /// with other options.
    AlreadyExists,
    /// Another record already holds a value of a unique index. Nothing was written.
    UniqueViolation,
    /// Concurrent writes won: a transaction kept conflicting past its retries, a sequence's
    /// counter kept moving, or the caller's own checks failed. Nothing was written; the
    /// request may succeed if run again on fresh data.
    Conflict,
    /// A write was sent but its answer was lost: it may or may not have committed. Do not
    /// resend it blindly; read to find out.
    OutcomeUnknown,
    /// A counter or a sequence has no number left (past its maximum, or wider than its
    /// placeholder). Nothing was written; it fails again until an operator acts.
    Exhausted,
    /// The store cannot be reached now, or dropped a snapshot the read needed, or an index is
    /// still being built. Nothing was written; the same request may succeed later.
    Unavailable,
    /// The store was closed while the operation waited. Nothing was written.
    Closed,
    /// The store does not offer what the operation needs (a KV Connect server without
    /// tuplekv's extension). It fails again on this store.
    Unsupported,
    /// Stored data is damaged, or not what tuplekv writes (a sequence's counter went back, a
    /// stored key that is not a tuple).
    Corrupt,
    /// A fault of the program, its deployment or its machine: a file operation failed, the
    /// directory is locked by another process, a record struct does not fit what is stored,
    /// a panic in a closure, a remote refusal with no class of its own.
    Internal,
}

impl ErrorClass {
    /// A suggested HTTP status for a service to answer with. It is a suggestion, not a
    /// protocol: map the classes yourself where your API says otherwise.
    ///
    /// | class | status | why |
    /// |---|---|---|
    /// | [`Invalid`](Self::Invalid) | 400 Bad Request | the client's request is wrong |
    /// | [`NotFound`](Self::NotFound) | 404 Not Found | |
    /// | [`AlreadyExists`](Self::AlreadyExists) | 409 Conflict | |
    /// | [`UniqueViolation`](Self::UniqueViolation) | 409 Conflict | |
    /// | [`Conflict`](Self::Conflict) | 409 Conflict | the client may retry on fresh data |
    /// | [`OutcomeUnknown`](Self::OutcomeUnknown) | 409 Conflict | never a 5xx: clients and proxies resend those blindly, and the write may have committed |
    /// | [`Exhausted`](Self::Exhausted) | 500 Internal Server Error | an operator must act |
    /// | [`Unavailable`](Self::Unavailable) | 503 Service Unavailable | retry later (send `Retry-After`) |
    /// | [`Closed`](Self::Closed) | 503 Service Unavailable | the service is shutting down |
    /// | [`Unsupported`](Self::Unsupported) | 501 Not Implemented | the deployment's store lacks a feature |
    /// | [`Corrupt`](Self::Corrupt) | 500 Internal Server Error | |
    /// | [`Internal`](Self::Internal) | 500 Internal Server Error | |
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorClass::Invalid => 400,
            ErrorClass::NotFound => 404,
            ErrorClass::AlreadyExists
            | ErrorClass::UniqueViolation
            | ErrorClass::Conflict
            | ErrorClass::OutcomeUnknown => 409,
            ErrorClass::Unavailable | ErrorClass::Closed => 503,
            ErrorClass::Unsupported => 501,
            ErrorClass::Exhausted | ErrorClass::Corrupt | ErrorClass::Internal => 500,
        }
    }

    /// The class in `snake_case` (`"outcome_unknown"`), for a log field or a metric label.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Invalid => "invalid",
            ErrorClass::NotFound => "not_found",
            ErrorClass::AlreadyExists => "already_exists",
            ErrorClass::UniqueViolation => "unique_violation",
            ErrorClass::Conflict => "conflict",
            ErrorClass::OutcomeUnknown => "outcome_unknown",
            ErrorClass::Exhausted => "exhausted",
            ErrorClass::Unavailable => "unavailable",
            ErrorClass::Closed => "closed",
            ErrorClass::Unsupported => "unsupported",
            ErrorClass::Corrupt => "corrupt",
            ErrorClass::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error that has an [`ErrorClass`]. Implemented by the engine's, the index's and the
/// sequence crate's errors, which also have these methods inherent; the trait is for code
/// generic over them (`fn status(e: &impl Classify) -> u16`).
///
/// # Examples
/// ```
/// use tuplekv_engine::{Classify, Error, ErrorClass};
///
/// fn status(e: &impl Classify) -> u16 {
///     e.class().http_status()
/// }
/// assert_eq!(status(&Error::EmptyKey), 400);
/// assert!(Error::TransactionConflict { attempts: 5 }.is_conflict());
/// ```
pub trait Classify {
    /// The error's class.
    fn class(&self) -> ErrorClass;

    /// Whether the failure is of the moment (`ErrorClass::Unavailable`): nothing was
    /// written and the same request may succeed later.
    fn is_transient(&self) -> bool {
        self.class() == ErrorClass::Unavailable
    }

    /// Whether concurrent writes won (`ErrorClass::Conflict`). A unique violation is not a
    /// conflict: see [`Classify::is_unique_violation`].
    fn is_conflict(&self) -> bool {
        self.class() == ErrorClass::Conflict
    }

    /// Whether a write may or may not have committed (`ErrorClass::OutcomeUnknown`).
    fn is_outcome_unknown(&self) -> bool {
        self.class() == ErrorClass::OutcomeUnknown
    }

    /// Whether a unique index refused a value another record holds
    /// (`ErrorClass::UniqueViolation`).
    fn is_unique_violation(&self) -> bool {
        self.class() == ErrorClass::UniqueViolation
    }

    /// Whether what the request names does not exist (`ErrorClass::NotFound`).
    fn is_not_found(&self) -> bool {
        self.class() == ErrorClass::NotFound
    }

    /// Whether the request itself is wrong (`ErrorClass::Invalid`).
    fn is_invalid(&self) -> bool {
        self.class() == ErrorClass::Invalid
    }
}

/// Implements [`Classify`] for an error type by its inherent `class` method, and gives it the
/// trait's predicates as inherent methods too, so a caller needs no import. For the tuplekv
/// crates' own error types; not part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! __impl_classify {
    ($ty:ty) => {
        impl $crate::Classify for $ty {
            fn class(&self) -> $crate::ErrorClass {
                <$ty>::class(self)
            }
        }

        impl $ty {
            /// Whether the failure is of the moment (`ErrorClass::Unavailable`): nothing
            /// was written and the same request may succeed later.
            pub fn is_transient(&self) -> bool {
                $crate::Classify::is_transient(self)
            }

            /// Whether concurrent writes won (`ErrorClass::Conflict`); a unique violation
            /// is not a conflict.
            pub fn is_conflict(&self) -> bool {
                $crate::Classify::is_conflict(self)
            }

            /// Whether a write may or may not have committed
            /// (`ErrorClass::OutcomeUnknown`): read to find out before resending it.
            pub fn is_outcome_unknown(&self) -> bool {
                $crate::Classify::is_outcome_unknown(self)
            }

            /// Whether a unique index refused a value another record holds
            /// (`ErrorClass::UniqueViolation`).
            pub fn is_unique_violation(&self) -> bool {
                $crate::Classify::is_unique_violation(self)
            }

            /// Whether what the request names does not exist (`ErrorClass::NotFound`).
            pub fn is_not_found(&self) -> bool {
                $crate::Classify::is_not_found(self)
            }

            /// Whether the request itself is wrong (`ErrorClass::Invalid`).
            pub fn is_invalid(&self) -> bool {
                $crate::Classify::is_invalid(self)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [ErrorClass; 12] = [
        ErrorClass::Invalid,
        ErrorClass::NotFound,
        ErrorClass::AlreadyExists,
        ErrorClass::UniqueViolation,
        ErrorClass::Conflict,
        ErrorClass::OutcomeUnknown,
        ErrorClass::Exhausted,
        ErrorClass::Unavailable,
        ErrorClass::Closed,
        ErrorClass::Unsupported,
        ErrorClass::Corrupt,
        ErrorClass::Internal,
    ];

    #[test]
    fn only_unavailable_and_closed_suggest_a_retryable_5xx_and_outcome_unknown_never_does() {
        for class in ALL {
            let status = class.http_status();
            assert!((400..600).contains(&status), "{class}");
            let retry = status == 503;
            assert_eq!(
                retry,
                matches!(class, ErrorClass::Unavailable | ErrorClass::Closed),
                "{class}"
            );
        }
        assert!(ErrorClass::OutcomeUnknown.http_status() < 500);
    }

    #[test]
    fn class_names_are_distinct_snake_case() {
        let mut names: Vec<&str> = ALL.iter().map(|c| c.as_str()).collect();
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        );
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert_eq!(ErrorClass::OutcomeUnknown.to_string(), "outcome_unknown");
    }
}
