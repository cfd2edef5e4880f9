//! [`ApiError`]: an HTTP status and the plain-text body a KV Connect client shows its user.
//! Where denokv has a text for the situation, the text is denokv's, because the clients copy it
//! into the error they throw.

use std::fmt;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tuplekv_engine::Error;

/// Why a request failed: the status and the exact body text.
///
/// # Examples
/// ```
/// use tuplekv_server::ApiError;
///
/// let e = ApiError::bad_request("Invalid versionstamp.");
/// assert_eq!(e.status().as_u16(), 400);
/// assert_eq!(e.message(), "Invalid versionstamp.");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    /// The engine error behind the refusal, by code (`tuplekv_wire::error_header`): sent as
    /// `tuplekv_wire::ERROR_HEADER`, so tuplekv's client gives the same error a local store
    /// gives without reading the text.
    engine_error: Option<String>,
    /// For a request refused because the server is at a limit it will leave soon: the
    /// seconds to wait, sent as `Retry-After`. Such refusals are logged at `debug` (they are
    /// counted), not as server errors.
    retry_after_secs: Option<u32>,
}

use tuplekv_wire::{ERROR_HEADER, error_header};

/// denokv's texts, for the errors both servers have.
pub(crate) mod text {
    pub(crate) const NOT_FOUND: &str = "Resource not found.";
    pub(crate) const MALFORMED_AUTHORIZATION: &str = "Malformed authorization header.";
    /// A commit whose outcome the store does not know (409).
    pub(crate) const OUTCOME_UNKNOWN: &str = "The outcome of the write is unknown: it may or \
        may not have been applied. Read the keys it writes before writing again.";
    pub(crate) const INVALID_ACCESS_TOKEN: &str = "Invalid access token.";
    pub(crate) const INVALID_DATABASE_ID: &str = "Invalid database id.";
    pub(crate) const INVALID_PROTOCOL_VERSION: &str = "Expected protocol version 2.";
    pub(crate) const KEY_TOO_LONG: &str = "A key exceeds the key size limit.";
    pub(crate) const VALUE_TOO_LONG: &str = "A value exceeds the value size limit.";
    pub(crate) const READ_RANGE_TOO_LARGE: &str = "The total number of entries requested across read ranges in the read request is too large.";
    pub(crate) const ATOMIC_WRITE_TOO_LARGE: &str =
        "The total size of the atomic write is too large.";
    pub(crate) const TOO_MANY_READ_RANGES: &str =
        "Too many read ranges requested in one read request.";
    pub(crate) const TOO_MANY_WATCHED_KEYS: &str =
        "Too many keys watched in a single watch request.";
    pub(crate) const TOO_MANY_CHECKS: &str = "Too many checks included in atomic write.";
    pub(crate) const TOO_MANY_MUTATIONS: &str =
        "Too many mutations / enqueues included in atomic write.";
    pub(crate) const INVALID_READ_RANGE_LIMIT: &str =
        "The read range limit of the snapshot read request is invalid.";
    pub(crate) const INTERNAL: &str = "An internal server error occurred.";
    /// denokv's text (its spelling) for a store that is closed.
    pub(crate) const UNAVAILABLE: &str =
        "The server is temporarially unavailable, try again later.";
    pub(crate) const INVALID_VERSIONSTAMP: &str = "Invalid versionstamp.";
    pub(crate) const INVALID_MUTATION_KIND: &str = "Invalid mutation kind or arguments.";
    pub(crate) const INVALID_MUTATION_EXPIRE_AT: &str = "Invalid mutation expire at.";
    pub(crate) const MINIMUM_PROTOCOL_VERSION: &str =
        "The server requires at least protocol version 2. Use Deno 1.38.0 or newer.";
    pub(crate) const NO_MATCHING_PROTOCOL_VERSION: &str = "The server could not negotiate a protocol version. The server requires protocol version 2 or 3.";
    pub(crate) const TOO_MANY_WATCH_STREAMS: &str =
        "Too many watch streams are open on this server; try again later.";
    /// Ours: a write carrying range checks or a numbering in tuplekv's extension field, sent
    /// to a server that does not offer the extension (which would otherwise commit it
    /// without them).
    pub(crate) const EXTENSION_NOT_OFFERED: &str = "This server does not offer tuplekv's \
        extension, so it cannot apply the write's range checks or numbering. Nothing was \
        written; connect again to agree on what the server offers.";
    /// Ours: KV Connect clients never send enqueues, so denokv has no text for refusing them.
    pub(crate) const ENQUEUE_UNSUPPORTED: &str =
        "Enqueues are not supported by this server (KV Connect clients do not send them).";
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            engine_error: None,
            retry_after_secs: None,
        }
    }

    /// A 503 for a request refused at a limit that frees up on its own (a body slot, say):
    /// nothing was done, and `Retry-After` says when to try again. Deno's and tuplekv's
    /// clients retry a 503.
    pub(crate) fn busy(message: impl Into<String>, retry_after_secs: u32) -> Self {
        ApiError {
            retry_after_secs: Some(retry_after_secs),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
        }
    }

    /// A 400 Bad Request with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The body text.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn unauthorized(message: &str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
    }

    pub(crate) fn invalid_protobuf(e: &prost::DecodeError) -> Self {
        Self::bad_request(format!("Request protobuf is invalid: {e}."))
    }

    pub(crate) fn internal() -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, text::INTERNAL)
    }

    /// The error a commit or read of the engine maps to: limit violations and type errors
    /// are the client's (400, with denokv's text where it has one); anything else (I/O
    /// failures, say) is ours: 500 `An internal server error occurred.`, as denokv answers.
    /// With it goes the engine error by code (`tuplekv_wire::ERROR_HEADER`), where it has one.
    pub fn from_engine(e: &Error) -> Self {
        Self::text_for_engine(e).with_engine_error(e)
    }

    /// `self`, carrying `e` by code in `tuplekv_wire::ERROR_HEADER` (nothing if `e` has no
    /// code).
    pub(crate) fn with_engine_error(self, e: &Error) -> Self {
        ApiError {
            engine_error: error_header(e),
            ..self
        }
    }

    /// The status and text for `e`.
    fn text_for_engine(e: &Error) -> Self {
        match e {
            Error::KeyTooLargeForWrite { .. } | Error::KeyTooLargeForRead { .. } => {
                Self::bad_request(text::KEY_TOO_LONG)
            }
            Error::ValueTooLarge { .. } => Self::bad_request(text::VALUE_TOO_LONG),
            Error::TooManyChecks { .. } => Self::bad_request(text::TOO_MANY_CHECKS),
            Error::TooManyMutations { .. } => Self::bad_request(text::TOO_MANY_MUTATIONS),
            Error::TotalMutationSizeTooLarge { .. } | Error::TotalKeySizeTooLarge { .. } => {
                Self::bad_request(text::ATOMIC_WRITE_TOO_LARGE)
            }
            Error::TooManyRanges { .. } => Self::bad_request(text::TOO_MANY_READ_RANGES),
            Error::TooManyEntries { .. } => Self::bad_request(text::READ_RANGE_TOO_LARGE),
            Error::ZeroLimit | Error::ZeroBatchSize => {
                Self::bad_request(text::INVALID_READ_RANGE_LIMIT)
            }
            Error::NotU64 { op, .. } => Self::bad_request(format!(
                "Failed to perform '{op}' mutation on a non-U64 value in the database"
            )),
            // The engine's texts for these are denokv's (`SumError`'s `Display`).
            Error::Sum(sum) => Self::bad_request(sum.to_string()),
            Error::InvalidNumbering { reason } => {
                Self::bad_request(format!("Invalid numbering: {reason}."))
            }
            Error::CounterNotU64 { key } => Self::bad_request(format!(
                "The counter {key:?} the write takes numbers from does not hold a U64. Nothing \
                 was written."
            )),
            Error::CounterExhausted {
                key,
                next,
                count,
                max,
            } => Self::bad_request(format!(
                "The counter {key:?} is exhausted: {count} numbers from {next} pass its max \
                 {max}. Nothing was written."
            )),
            Error::NumberTooWide { number, width } => Self::bad_request(format!(
                "The number {number} has more than the {width} digits its placeholder holds, \
                 and the placeholder may not widen. Nothing was written."
            )),
            Error::TooManyWatchedKeys { .. } => Self::bad_request(text::TOO_MANY_WATCHED_KEYS),
            Error::EmptyKey => Self::bad_request("key cannot be empty"),
            Error::ExpireInTooLarge { .. } => Self::bad_request(text::INVALID_MUTATION_EXPIRE_AT),
            Error::Closed => Self::new(StatusCode::SERVICE_UNAVAILABLE, text::UNAVAILABLE),
            // What a store behind the server (an etcd cluster, say) cannot do: the client's
            // request, refused with the store's reason. A 5xx here would make Deno's client
            // retry it for ever.
            Error::Unsupported { .. } => Self::bad_request(e.to_string()),
            // Nothing was done and the request may succeed later.
            Error::Unavailable { .. } => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, text::UNAVAILABLE)
            }
            // The store lost its answer after the commit was sent (an etcd member died with
            // it): it may have been applied. Never a 5xx, which Deno's client resends blindly
            // (a sum would be added twice); 409 says so, and `RemoteStore` reads it as
            // `Error::OutcomeUnknown` again.
            Error::OutcomeUnknown { .. } => {
                Self::new(StatusCode::CONFLICT, text::OUTCOME_UNKNOWN.to_owned())
            }
            // A read at a snapshot the store no longer keeps (an etcd cluster compacted it):
            // as for a snapshot the server dropped, 410, never a 5xx Deno would retry.
            Error::SnapshotExpired { versionstamp } => Self::new(
                StatusCode::GONE,
                format!("The snapshot at {versionstamp} is no longer kept by the store."),
            ),
            _ => Self::internal(),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.retry_after_secs.is_some() {
            // A client can cause these as fast as it likes, and they say nothing is wrong.
            tracing::debug!(status = self.status.as_u16(), message = %self.message, "request refused for now");
        } else if self.status.is_server_error() {
            tracing::error!(status = self.status.as_u16(), message = %self.message, "request failed");
        } else {
            // Any client can cause these, as fast as it likes: at `info` they would flood the
            // log. They are counted in `ServerStats::refused_requests`.
            tracing::debug!(status = self.status.as_u16(), message = %self.message, "request refused");
        }
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.message,
        )
            .into_response();
        if let Some(secs) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        if let Some(value) = self
            .engine_error
            .and_then(|v| header::HeaderValue::from_str(&v).ok())
        {
            response.headers_mut().insert(ERROR_HEADER, value);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use tuplekv_engine::{IoError, KeyBytes};

    use super::*;

    fn mapped(e: Error) -> (u16, String) {
        let api = ApiError::from_engine(&e);
        (api.status().as_u16(), api.message().to_owned())
    }

    #[test]
    fn engine_type_errors_map_to_400_with_denokvs_text() {
        let not_u64 = Error::NotU64 {
            op: "max",
            index: 3,
            key: KeyBytes::from(&b"\x02k\x00"[..]),
        };
        assert_eq!(
            mapped(not_u64),
            (
                400,
                "Failed to perform 'max' mutation on a non-U64 value in the database".to_owned()
            )
        );
        assert_eq!(
            mapped(Error::KeyTooLargeForWrite { size: 2049 }),
            (400, text::KEY_TOO_LONG.to_owned())
        );
        assert_eq!(
            mapped(Error::TotalKeySizeTooLarge { size: 90_000 }),
            (400, text::ATOMIC_WRITE_TOO_LARGE.to_owned())
        );
    }

    #[test]
    fn numbering_refusals_are_400s_that_carry_the_engines_error() {
        let key = KeyBytes::from(&b"\x02next\x00"[..]);
        for e in [
            Error::CounterNotU64 { key: key.clone() },
            Error::CounterExhausted {
                key: key.clone(),
                next: 10,
                count: 2,
                max: 10,
            },
            Error::NumberTooWide {
                number: 100,
                width: 2,
            },
        ] {
            let api = ApiError::from_engine(&e);
            assert_eq!(api.status().as_u16(), 400);
            assert!(api.message().ends_with("Nothing was written."), "{api}");
            let response = api.into_response();
            let header = response.headers()[ERROR_HEADER].to_str().unwrap();
            assert_eq!(tuplekv_wire::error_from_header(header), Some(e));
        }
        let invalid = Error::InvalidNumbering {
            reason: "counter 0 takes no number (count 0)".into(),
        };
        assert_eq!(
            mapped(invalid),
            (
                400,
                "Invalid numbering: counter 0 takes no number (count 0).".to_owned()
            )
        );
    }

    #[test]
    fn a_closed_store_is_denokvs_503() {
        assert_eq!(mapped(Error::Closed), (503, text::UNAVAILABLE.to_owned()));
    }

    #[test]
    fn a_commit_with_an_unknown_outcome_is_409_never_a_retried_5xx() {
        let unknown = Error::outcome_unknown("etcd commit failed: request timed out");
        assert_eq!(mapped(unknown), (409, text::OUTCOME_UNKNOWN.to_owned()));
    }

    #[test]
    fn an_unreachable_store_is_503_and_an_unsupported_operation_400() {
        // Clients retry a 5xx: a store that cannot be reached now is worth retrying, an
        // operation it can never do (Deno retries a 500 for ever) is not.
        let unavailable = Error::unavailable("no leader");
        assert_eq!(mapped(unavailable), (503, text::UNAVAILABLE.to_owned()));
        let unsupported = Error::Unsupported {
            operation: "a second read of one snapshot",
            needs: "snapshots held by the server",
        };
        let (status, message) = mapped(unsupported);
        assert_eq!(status, 400);
        assert!(
            message.contains("a second read of one snapshot"),
            "{message}"
        );
    }

    #[test]
    fn engine_io_failures_are_the_servers_500() {
        let io = Error::Io(IoError::new(
            "syncing the log",
            std::io::Error::other("disk gone"),
        ));
        assert_eq!(mapped(io), (500, text::INTERNAL.to_owned()));
    }
}
