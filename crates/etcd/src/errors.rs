//! etcd's failures as tuplekv errors, by gRPC status code.
//!
//! - A refusal made before anything is applied is a definite error: `InvalidArgument` (too
//!   many operations in a transaction, a request over `--max-request-bytes`),
//!   `FailedPrecondition`, `PermissionDenied`, `Unauthenticated`, `NotFound`,
//!   `AlreadyExists`, `Unimplemented`, and `OutOfRange` other than compaction become
//!   [`Error::Remote`] with an HTTP-like status and etcd's message (with a hint for the two
//!   limits the cluster must be started with).
//! - A request refused before it could be proposed, or never sent (no leader, an unhealthy
//!   cluster, too many requests, a connection that could not be made) is
//!   [`Error::Unavailable`]: nothing was written.
//! - Anything else met by a commit after it was handed to the transport (a timeout, a
//!   leader lost while the proposal was in flight, a connection reset) is
//!   [`Error::OutcomeUnknown`]: it may have committed.
//! - A read of a compacted revision (`OutOfRange`, "required revision has been compacted")
//!   is [`Error::SnapshotExpired`]. Every other failed read that is not a refusal is
//!   [`Error::Unavailable`]: reads change nothing, so the snapshot retries them within
//!   [`READ_RETRY_BUDGET`].

use std::time::Duration;

use tuplekv_engine::{Error, Versionstamp};

use crate::TXN_OPS_MAX;

/// How long a read keeps retrying a transient failure (after its first attempt), before it
/// gives [`Error::Unavailable`].
pub const READ_RETRY_BUDGET: Duration = Duration::from_secs(5);

/// The first pause between two attempts at a read; it doubles up to [`READ_RETRY_PAUSE_MAX`].
pub const READ_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two attempts at a read.
pub const READ_RETRY_PAUSE_MAX: Duration = Duration::from_millis(800);

/// etcd's message for a read below the compacted revision (`mvcc.ErrCompacted`).
const COMPACTED_MESSAGE: &str = "required revision has been compacted";

/// Messages of `Unavailable` answers given before a request was proposed or sent: etcd's own
/// refusals (no leader, unhealthy cluster, not capable) and the transport's failure to
/// connect.
const NOT_SENT_MESSAGES: [&str; 7] = [
    "no leader",
    "unhealthy cluster",
    "not capable",
    "error trying to connect",
    "tcp connect error",
    "connection refused",
    "dns error",
];

/// etcd's message for a transaction over `--max-txn-ops`.
const TOO_MANY_OPS_MESSAGE: &str = "too many operations in txn request";

/// etcd's message for a request over `--max-request-bytes`.
const TOO_LARGE_MESSAGE: &str = "request is too large";

/// gRPC's message for a message over the server's receive limit.
const GRPC_TOO_LARGE_MESSAGE: &str = "larger than max";

/// etcd's message when it sheds load before proposing (`ErrTooManyRequests`).
const TOO_MANY_REQUESTS_MESSAGE: &str = "too many requests";

/// The gRPC status codes this module tells apart (gRPC's own numbering; the client crate
/// does not re-export its `Code` type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
    Other,
}

impl Code {
    fn from_grpc(code: i32) -> Code {
        match code {
            1 => Code::Cancelled,
            2 => Code::Unknown,
            3 => Code::InvalidArgument,
            4 => Code::DeadlineExceeded,
            5 => Code::NotFound,
            6 => Code::AlreadyExists,
            7 => Code::PermissionDenied,
            8 => Code::ResourceExhausted,
            9 => Code::FailedPrecondition,
            10 => Code::Aborted,
            11 => Code::OutOfRange,
            12 => Code::Unimplemented,
            13 => Code::Internal,
            14 => Code::Unavailable,
            15 => Code::DataLoss,
            16 => Code::Unauthenticated,
            _ => Code::Other,
        }
    }
}

/// A gRPC status: its code and message.
#[derive(Debug)]
struct Status<'m> {
    code: Code,
    message: &'m str,
}

impl Status<'_> {
    fn code(&self) -> Code {
        self.code
    }

    fn message(&self) -> &str {
        self.message
    }
}

/// Whether `status` is etcd's answer to a read of a compacted revision.
fn is_compacted(status: &Status<'_>) -> bool {
    status.code() == Code::OutOfRange && status.message().contains(COMPACTED_MESSAGE)
}

/// Whether `e` is etcd's answer to a read of a compacted revision.
pub(crate) fn is_compacted_error(e: &etcd_client::Error) -> bool {
    status(e).is_some_and(|s| is_compacted(&s))
}

/// The status inside a client error, if it is one.
fn status(e: &etcd_client::Error) -> Option<Status<'_>> {
    match e {
        etcd_client::Error::GRpcStatus(s) => Some(Status {
            code: Code::from_grpc(i32::from(s.code())),
            message: s.message(),
        }),
        _ => None,
    }
}

/// A definite refusal (nothing applied, nothing to retry as is), or `None`.
fn refusal(s: &Status<'_>) -> Option<Error> {
    let http = match s.code() {
        Code::InvalidArgument => 400,
        Code::Unauthenticated => 401,
        Code::PermissionDenied => 403,
        Code::NotFound => 404,
        Code::AlreadyExists => 409,
        Code::FailedPrecondition => 412,
        Code::OutOfRange if !is_compacted(s) => 416,
        Code::ResourceExhausted if !s.message().contains(TOO_MANY_REQUESTS_MESSAGE) => 413,
        Code::Unimplemented => 501,
        _ => return None,
    };
    let message = s.message();
    let hint = if message.contains(TOO_MANY_OPS_MESSAGE) {
        format!("; run the cluster with --max-txn-ops of at least {TXN_OPS_MAX}")
    } else if message.contains(TOO_LARGE_MESSAGE) || message.contains(GRPC_TOO_LARGE_MESSAGE) {
        "; run the cluster with --max-request-bytes of at least 4 MiB".to_owned()
    } else {
        String::new()
    };
    Some(Error::Remote {
        status: http,
        message: format!("etcd refused the request ({:?}): {message}{hint}", s.code()),
    })
}

/// Whether `s` says the request was refused before it was proposed, or never sent.
fn not_sent(s: &Status<'_>) -> bool {
    let message = s.message().to_ascii_lowercase();
    match s.code() {
        Code::Unavailable => NOT_SENT_MESSAGES.iter().any(|m| message.contains(m)),
        Code::ResourceExhausted => message.contains(TOO_MANY_REQUESTS_MESSAGE),
        _ => false,
    }
}

/// A failed read at `revision` (0: the latest) as our error.
pub(crate) fn read_error(e: etcd_client::Error, revision: i64) -> Error {
    let out = match status(&e) {
        Some(s) => read_status(&s, revision),
        None => Error::unavailable(e.to_string()),
    };
    // A transport failure keeps the client's error as its source.
    out.with_source(e)
}

fn read_status(s: &Status<'_>, revision: i64) -> Error {
    if is_compacted(s) {
        return Error::SnapshotExpired {
            versionstamp: Versionstamp::from_version(u64::try_from(revision).unwrap_or(0))
                .to_string(),
        };
    }
    refusal(s).unwrap_or_else(|| {
        Error::unavailable(format!(
            "etcd read failed ({:?}): {}",
            s.code(),
            s.message()
        ))
    })
}

/// A failed commit as our error: a refusal or a request never sent is definite, anything
/// else is [`Error::OutcomeUnknown`].
pub(crate) fn write_error(e: etcd_client::Error) -> Error {
    let out = match status(&e) {
        Some(s) => write_status(&s),
        // The transport failed before a call (connecting): nothing was sent.
        None if matches!(e, etcd_client::Error::TransportError(_)) => {
            Error::unavailable(e.to_string())
        }
        None => Error::outcome_unknown(e.to_string()),
    };
    // A transport failure keeps the client's error as its source.
    out.with_source(e)
}

fn write_status(s: &Status<'_>) -> Error {
    if let Some(refused) = refusal(s) {
        refused
    } else if not_sent(s) {
        Error::unavailable(format!(
            "etcd refused the commit ({:?}): {}",
            s.code(),
            s.message()
        ))
    } else {
        Error::outcome_unknown(format!(
            "etcd commit failed ({:?}): {}",
            s.code(),
            s.message()
        ))
    }
}

/// Runs the read `attempt` until it succeeds, fails with an error that is not
/// [`Error::Unavailable`], or [`READ_RETRY_BUDGET`] is spent.
pub(crate) async fn retry_read<T, F, Fut>(mut attempt: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let start = tokio::time::Instant::now();
    let mut pause = READ_RETRY_PAUSE;
    loop {
        match attempt().await {
            Err(Error::Unavailable { reason, source }) => {
                if start.elapsed() + pause > READ_RETRY_BUDGET {
                    return Err(Error::Unavailable {
                        reason: format!("{reason} (still failing after {READ_RETRY_BUDGET:?})"),
                        source,
                    });
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(READ_RETRY_PAUSE_MAX);
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grpc(code: Code, message: &str) -> (Code, &str) {
        (code, message)
    }

    fn write_error((code, message): (Code, &str)) -> Error {
        write_status(&Status { code, message })
    }

    fn read_error((code, message): (Code, &str), revision: i64) -> Error {
        read_status(&Status { code, message }, revision)
    }

    #[test]
    fn refusals_are_definite_and_ambiguous_failures_unknown() {
        let too_many = write_error(grpc(
            Code::InvalidArgument,
            "etcdserver: too many operations in txn request",
        ));
        assert!(
            matches!(&too_many, Error::Remote { status: 400, message } if message.contains("--max-txn-ops")),
            "{too_many:?}"
        );
        for code in [
            Code::FailedPrecondition,
            Code::PermissionDenied,
            Code::Unauthenticated,
        ] {
            assert!(matches!(
                write_error(grpc(code, "no")),
                Error::Remote { .. }
            ));
        }
        for (code, message) in [
            (Code::Unavailable, "etcdserver: no leader"),
            (Code::Unavailable, "etcdserver: unhealthy cluster"),
            (Code::ResourceExhausted, "etcdserver: too many requests"),
            (
                Code::Unavailable,
                "error trying to connect: tcp connect error",
            ),
        ] {
            assert!(
                matches!(write_error(grpc(code, message)), Error::Unavailable { .. }),
                "{message}"
            );
        }
        for (code, message) in [
            (Code::Unavailable, "etcdserver: request timed out"),
            (Code::Unavailable, "etcdserver: leader changed"),
            (Code::Cancelled, "Timeout expired"),
            (Code::Unknown, "transport error"),
            (Code::DeadlineExceeded, "deadline"),
        ] {
            assert!(
                matches!(
                    write_error(grpc(code, message)),
                    Error::OutcomeUnknown { .. }
                ),
                "{message}"
            );
        }
    }

    #[test]
    fn compaction_is_recognised_by_code_and_message() {
        let compacted = grpc(
            Code::OutOfRange,
            "etcdserver: mvcc: required revision has been compacted",
        );
        assert!(matches!(
            read_error(compacted, 5),
            Error::SnapshotExpired { .. }
        ));
        let future = grpc(
            Code::OutOfRange,
            "etcdserver: mvcc: required revision is a future revision",
        );
        assert!(matches!(
            read_error(future, 5),
            Error::Remote { status: 416, .. }
        ));
        // The words alone, under another code, are not a compaction.
        let other = grpc(Code::Unknown, "required revision has been compacted");
        assert!(matches!(read_error(other, 5), Error::Unavailable { .. }));
    }
}
