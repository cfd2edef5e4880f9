//! HTTP/2 to the server: the metadata exchange (and its renewal), and data path requests with
//! the retry rules of the crate docs. Everything here runs on the store's own runtime.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::{Deserialize, Serialize};
use tuplekv_engine::{Error, Versionstamp};

use crate::RemoteOptions;

/// The protocol versions this client speaks (version 1 is older than watch).
const SUPPORTED_VERSIONS: [u64; 2] = [2, 3];
const PROTOBUF: &str = "application/x-protobuf";
/// Renew the metadata this long before its token expires.
const RENEW_BEFORE: Duration = Duration::from_secs(60);
/// The first pause between attempts; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest pause between attempts.
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// What the metadata exchange agreed.
#[derive(Debug)]
pub(crate) struct Session {
    /// The data path endpoint, without a trailing slash.
    base: String,
    token: String,
    database_id: String,
    version: u64,
    /// Whether the server speaks tuplekv's extension.
    pub(crate) extension: bool,
    renew_at: Instant,
}

/// Whether a request may have reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A read: resent freely.
    Read,
    /// A write: resent only when it cannot have been sent.
    Write,
}

/// A successful response: headers and the whole body.
pub(crate) struct Reply {
    pub(crate) body: Bytes,
}

/// Why one attempt failed.
enum Failure {
    /// The request never left (the connection could not be made).
    NotSent(String),
    /// The request may have been sent, and no answer came.
    Unknown(String),
    /// The server answered with a non-success status (and, for a 400 about a mutation, the
    /// mutation's index).
    Status(StatusCode, String, Option<usize>),
}

pub(crate) struct Transport {
    client: Client<HttpConnector, Full<Bytes>>,
    metadata_url: Uri,
    access_token: String,
    pub(crate) options: RemoteOptions,
    session: Mutex<Option<Arc<Session>>>,
    /// Held snapshots dropped since the last read told the server.
    releases: Mutex<Vec<Versionstamp>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MetadataRequest<'a> {
    supported_versions: [u64; 2],
    tuplekv_extensions: [&'a str; 1],
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataResponse {
    version: u64,
    database_id: String,
    endpoints: Vec<Endpoint>,
    token: String,
    expires_at: String,
    #[serde(default)]
    tuplekv_extensions: Vec<String>,
}

#[derive(Deserialize)]
struct Endpoint {
    url: String,
    consistency: String,
}

impl Transport {
    pub(crate) fn new(metadata_url: Uri, access_token: String, options: RemoteOptions) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(options.connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_only(true)
            .http2_keep_alive_interval(Some(options.keep_alive_interval))
            .http2_keep_alive_timeout(options.request_timeout)
            .build(connector);
        Transport {
            client,
            metadata_url,
            access_token,
            options,
            session: Mutex::new(None),
            releases: Mutex::new(Vec::new()),
        }
    }

    /// The session, if one is current (no request is made).
    pub(crate) fn cached(&self) -> Option<Arc<Session>> {
        let guard = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        guard
            .as_ref()
            .filter(|s| Instant::now() < s.renew_at)
            .cloned()
    }

    fn forget(&self, stale: &Arc<Session>) {
        let mut guard = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.as_ref().is_some_and(|s| Arc::ptr_eq(s, stale)) {
            *guard = None;
        }
    }

    /// Notes that the held snapshot at `at` is no longer read; the next read tells the server.
    /// Past [`tuplekv_wire::RELEASES_PER_READ_MAX`] waiting, the oldest is forgotten (the
    /// server drops it when it has been idle long enough).
    pub(crate) fn release(&self, at: Versionstamp) {
        let mut releases = self.releases.lock().unwrap_or_else(PoisonError::into_inner);
        if releases.len() >= tuplekv_wire::RELEASES_PER_READ_MAX {
            releases.remove(0);
        }
        releases.push(at);
    }

    /// The releases to send with a read (taken: a read that fails loses them, and the server's
    /// idle timeout drops those snapshots instead).
    pub(crate) fn take_releases(&self) -> Vec<Vec<u8>> {
        let mut releases = self.releases.lock().unwrap_or_else(PoisonError::into_inner);
        releases.drain(..).map(|v| v.as_bytes().to_vec()).collect()
    }

    /// The current session: cached, or from a metadata exchange (retried on transport
    /// faults within the retry budget).
    pub(crate) async fn session(&self) -> Result<Arc<Session>, Error> {
        if let Some(s) = self.cached() {
            return Ok(s);
        }
        let started = Instant::now();
        let mut backoff = BACKOFF_MIN;
        loop {
            match self.exchange().await {
                Ok(session) => {
                    let session = Arc::new(session);
                    *self.session.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(Arc::clone(&session));
                    return Ok(session);
                }
                Err(Failure::Status(status, message, _)) => {
                    return Err(Error::Remote {
                        status: status.as_u16(),
                        message,
                    });
                }
                Err(Failure::NotSent(reason) | Failure::Unknown(reason)) => {
                    if started.elapsed() + backoff > self.options.retry_for {
                        return Err(Error::Unavailable { reason });
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }

    async fn exchange(&self) -> Result<Session, Failure> {
        let body = serde_json::to_vec(&MetadataRequest {
            supported_versions: SUPPORTED_VERSIONS,
            tuplekv_extensions: [tuplekv_wire::EXTENSION],
        })
        .map_err(|e| Failure::NotSent(e.to_string()))?;
        let req = Request::builder()
            .method(Method::POST)
            .uri(self.metadata_url.clone())
            .header(AUTHORIZATION, format!("Bearer {}", self.access_token))
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Failure::NotSent(e.to_string()))?;
        let body = self.round_trip(req).await?;
        let meta: MetadataResponse = serde_json::from_slice(&body).map_err(|e| {
            Failure::Status(
                StatusCode::BAD_GATEWAY,
                format!("the metadata exchange answered something that is not metadata: {e}"),
                None,
            )
        })?;
        if !SUPPORTED_VERSIONS.contains(&meta.version) {
            return Err(Failure::Status(
                StatusCode::BAD_GATEWAY,
                format!(
                    "the server chose protocol version {}, which this client does not speak",
                    meta.version
                ),
                None,
            ));
        }
        let endpoint = meta
            .endpoints
            .iter()
            .find(|e| e.consistency == "strong")
            .or_else(|| meta.endpoints.first())
            .ok_or_else(|| {
                Failure::Status(
                    StatusCode::BAD_GATEWAY,
                    "the metadata lists no endpoint".into(),
                    None,
                )
            })?;
        let base = self.resolve(&endpoint.url);
        let lifetime = chrono::DateTime::parse_from_rfc3339(&meta.expires_at)
            .ok()
            .and_then(|at| {
                (at.with_timezone(&chrono::Utc) - chrono::Utc::now())
                    .to_std()
                    .ok()
            })
            .unwrap_or(Duration::ZERO);
        // Renew a minute early, or half way through a short lifetime.
        let early = RENEW_BEFORE.min(lifetime / 2);
        Ok(Session {
            base,
            token: meta.token,
            database_id: meta.database_id,
            version: meta.version,
            extension: meta
                .tuplekv_extensions
                .iter()
                .any(|e| e == tuplekv_wire::EXTENSION),
            renew_at: Instant::now() + lifetime.saturating_sub(early),
        })
    }

    /// An endpoint URL from the metadata, made absolute against the metadata URL.
    fn resolve(&self, url: &str) -> String {
        let url = url.trim_end_matches('/');
        if url.starts_with("http://") || url.starts_with("https://") {
            return url.to_owned();
        }
        let scheme = self.metadata_url.scheme_str().unwrap_or("http");
        let authority = self
            .metadata_url
            .authority()
            .map(|a| a.as_str())
            .unwrap_or("");
        if url.starts_with('/') {
            format!("{scheme}://{authority}{url}")
        } else {
            let path = self.metadata_url.path();
            let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
            format!("{scheme}://{authority}{dir}{url}")
        }
    }

    /// Sends `req` and reads the whole answer, within the request timeout.
    async fn round_trip(&self, req: Request<Full<Bytes>>) -> Result<Bytes, Failure> {
        let timeout = self.options.request_timeout;
        let attempt = async {
            let resp = self.client.request(req).await.map_err(classify)?;
            let status = resp.status();
            let mutation_index = resp
                .headers()
                .get(tuplekv_wire::MUTATION_INDEX_HEADER)
                .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| Failure::Unknown(format!("reading the answer: {e}")))?
                .to_bytes();
            if status.is_success() {
                Ok(body)
            } else {
                Err(Failure::Status(
                    status,
                    String::from_utf8_lossy(&body).trim().to_owned(),
                    mutation_index,
                ))
            }
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Failure::Unknown(format!(
                "no answer within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    fn data_request(&self, session: &Session, path: &str, body: Bytes) -> Request<Full<Bytes>> {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(format!("{}/{path}", session.base))
            .header(AUTHORIZATION, format!("Bearer {}", session.token))
            .header(CONTENT_TYPE, PROTOBUF)
            .header("x-denokv-database-id", session.database_id.as_str());
        if let Ok(v) = HeaderValue::from_str(&session.version.to_string()) {
            builder = builder.header("x-denokv-version", v);
        }
        builder
            .body(Full::new(body))
            .unwrap_or_else(|_| Request::new(Full::new(Bytes::new())))
    }

    /// Opens a streaming data path request (a watch): the response, its body unread.
    pub(crate) async fn open_stream(
        &self,
        path: &'static str,
        body: Bytes,
    ) -> Result<Response<Incoming>, Error> {
        let session = self.session().await?;
        let req = self.data_request(&session, path, body);
        let resp = tokio::time::timeout(self.options.request_timeout, self.client.request(req))
            .await
            .map_err(|_| Error::Unavailable {
                reason: "no answer to the watch request".into(),
            })?
            .map_err(|e| Error::Unavailable {
                reason: error_chain(&e),
            })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        if status == StatusCode::UNAUTHORIZED {
            self.forget(&session);
        }
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        Err(status_error(
            status,
            String::from_utf8_lossy(&body).trim().to_owned(),
            None,
        ))
    }

    /// Sends a data path request, retrying as the crate docs say: a read on any transport
    /// fault, a write only when it cannot have been sent; both after a 401 (once, with a
    /// fresh metadata exchange) and a 503, within [`RemoteOptions::retry_for`].
    pub(crate) async fn call(
        &self,
        path: &'static str,
        body: Bytes,
        kind: Kind,
    ) -> Result<(Arc<Session>, Reply), Error> {
        let started = Instant::now();
        let mut backoff = BACKOFF_MIN;
        let mut renewed = false;
        loop {
            let session = self.session().await?;
            let req = self.data_request(&session, path, body.clone());
            let reason = match self.round_trip(req).await {
                Ok(body) => return Ok((session, Reply { body })),
                Err(Failure::Status(StatusCode::UNAUTHORIZED, _, _)) if !renewed => {
                    // The token may have been renewed under us: exchange again, once.
                    renewed = true;
                    self.forget(&session);
                    continue;
                }
                Err(Failure::Status(StatusCode::SERVICE_UNAVAILABLE, message, _)) => message,
                Err(Failure::Status(status, message, index)) => {
                    return Err(status_error(status, message, index));
                }
                Err(Failure::NotSent(reason)) => reason,
                Err(Failure::Unknown(reason)) if kind == Kind::Write => {
                    // The connection is suspect: the next request makes a new one.
                    self.forget(&session);
                    return Err(Error::OutcomeUnknown { reason });
                }
                Err(Failure::Unknown(reason)) => reason,
            };
            self.forget(&session);
            if started.elapsed() + backoff > self.options.retry_for {
                return Err(Error::Unavailable { reason });
            }
            tracing::debug!(%reason, path, "retrying a request that did not reach the store");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// The error for a non-success status. A 400 about a mutation that failed on a non-U64 value
/// (with its index, from a tuplekv server) is `Error::NotU64` with an empty key, which the
/// caller fills in from its write.
fn status_error(status: StatusCode, message: String, mutation_index: Option<usize>) -> Error {
    if let Some(index) = mutation_index
        && status == StatusCode::BAD_REQUEST
        && let Some(op) = ["sum", "min", "max"].into_iter().find(|op| {
            message.starts_with(&format!("Failed to perform '{op}' mutation on a non-U64"))
        })
    {
        return Error::NotU64 {
            op,
            index,
            key: tuplekv_engine::KeyBytes::default(),
        };
    }
    if status.as_u16() == tuplekv_wire::SNAPSHOT_GONE_STATUS {
        let versionstamp = message
            .split_whitespace()
            .find(|w| w.len() == 20 && w.bytes().all(|b| b.is_ascii_hexdigit()))
            .unwrap_or("unknown")
            .to_owned();
        return Error::SnapshotExpired { versionstamp };
    }
    Error::Remote {
        status: status.as_u16(),
        message,
    }
}

/// Whether a client error means the request never left.
fn classify(e: hyper_util::client::legacy::Error) -> Failure {
    if e.is_connect() {
        Failure::NotSent(error_chain(&e))
    } else {
        Failure::Unknown(error_chain(&e))
    }
}

/// An error and its sources, joined.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// A versionstamp from 10 wire bytes.
pub(crate) fn versionstamp(bytes: &[u8]) -> Result<Versionstamp, Error> {
    let bytes: [u8; 10] = bytes.try_into().map_err(|_| Error::Remote {
        status: 200,
        message: format!("the server sent a versionstamp of {} bytes", bytes.len()),
    })?;
    Ok(Versionstamp::from_bytes(bytes))
}
