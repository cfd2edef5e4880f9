//! HTTP/2 to the server: the metadata exchange (and its renewal), and data path requests with
//! the retry rules of the crate docs. Everything here runs on the store's runtime (its own,
//! or the caller's), whose tasks hyper spawns through the store's [`Spawner`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::TokioTimer;
use serde::{Deserialize, Serialize};
use tokio_rustls::rustls::ClientConfig;
use tuplekv_engine::{Error, Versionstamp};

use crate::RemoteOptions;
use crate::reason::Reason;
use crate::runtime::Spawner;
use crate::tls::{HttpsConnector, TlsFailure};

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
    /// Whether the server also applies numberings (`tuplekv_wire::NUMBERING_EXTENSION`).
    pub(crate) numbering: bool,
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
    NotSent(Reason),
    /// The request may have been sent, and no answer came.
    Unknown(Reason),
    /// The server answered with a non-success status, with what its headers add.
    Status(StatusCode, String, Detail),
    /// The TLS handshake failed in a way retrying cannot fix (an untrusted certificate, a
    /// name mismatch, a server that does not speak TLS): the request never left.
    Tls(String),
}

/// Why a metadata exchange failed: a TLS failure apart, as
/// [`ConnectError::Tls`](crate::ConnectError::Tls) names it at connect.
pub(crate) enum SessionError {
    /// [`Failure::Tls`]'s reason.
    Tls(String),
    /// Any other failure.
    Store(Error),
}

impl SessionError {
    fn into_error(self) -> Error {
        match self {
            SessionError::Tls(reason) => tls_unavailable(reason),
            SessionError::Store(e) => e,
        }
    }
}

/// What a request that met a definite TLS failure gives (it was never sent).
fn tls_unavailable(reason: String) -> Error {
    Error::unavailable(format!("TLS: {reason}"))
}

/// What a refusal's headers add to its status and text.
#[derive(Default)]
struct Detail {
    /// The engine error a tuplekv server named by code (`tuplekv_wire::ERROR_HEADER`).
    error: Option<Box<Error>>,
}

/// The pooled client (one HTTP/2 connection): h2c for `http://`, HTTP/2 over TLS for
/// `https://`. One is chosen when the store is opened; a request only picks the variant.
#[derive(Clone)]
enum HttpClient {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(Client<HttpsConnector, Full<Bytes>>),
}

impl HttpClient {
    fn request(&self, req: Request<Full<Bytes>>) -> ResponseFuture {
        match self {
            HttpClient::Plain(client) => client.request(req),
            HttpClient::Tls(client) => client.request(req),
        }
    }
}

pub(crate) struct Transport {
    /// The pooled client (one HTTP/2 connection); replaced, connection and all, after a
    /// request met a fault that leaves the connection suspect.
    client: Mutex<HttpClient>,
    /// For an `https://` store, the TLS configuration every connection shakes hands with.
    tls: Option<Arc<ClientConfig>>,
    /// Spawns the client's tasks among the store's.
    spawner: Spawner,
    metadata_url: Uri,
    access_token: String,
    pub(crate) options: RemoteOptions,
    session: Mutex<Option<Arc<Session>>>,
    /// Holds of snapshots dropped since the last read told the server: (snapshot, hold id).
    releases: Mutex<Vec<(Versionstamp, u64)>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MetadataRequest<'a> {
    supported_versions: [u64; 2],
    tuplekv_extensions: [&'a str; 2],
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
    /// A transport to `metadata_url`, over TLS with `tls` when it is an `https://` URL,
    /// whose client spawns its tasks with `spawner`.
    pub(crate) fn new(
        metadata_url: Uri,
        access_token: String,
        options: RemoteOptions,
        tls: Option<Arc<ClientConfig>>,
        spawner: Spawner,
    ) -> Self {
        Transport {
            client: Mutex::new(build_client(&options, tls.as_ref(), &spawner)),
            tls,
            spawner,
            metadata_url,
            access_token,
            options,
            session: Mutex::new(None),
            releases: Mutex::new(Vec::new()),
        }
    }

    fn client(&self) -> HttpClient {
        self.client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Drops the connection (a new one is made for the next request): after a request met a
    /// fault with no answer, the connection may be silently dead, and reusing it would only
    /// make the next writes' outcomes unknown too.
    fn reset_connection(&self) {
        *self.client.lock().unwrap_or_else(PoisonError::into_inner) =
            build_client(&self.options, self.tls.as_ref(), &self.spawner);
    }

    /// The metadata URL the store was opened with.
    pub(crate) fn url(&self) -> String {
        self.metadata_url.to_string()
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
    pub(crate) fn release(&self, at: Versionstamp, hold_id: u64) {
        let mut releases = self.releases.lock().unwrap_or_else(PoisonError::into_inner);
        if releases.len() >= tuplekv_wire::RELEASES_PER_READ_MAX {
            releases.remove(0);
        }
        releases.push((at, hold_id));
    }

    /// The releases to send with a read (taken: a read that fails loses them, and the server's
    /// idle timeout drops those snapshots instead; a retried read sends them again, which
    /// removes nothing more, as each names its hold).
    pub(crate) fn take_releases(&self) -> Vec<tuplekv_wire::Hold> {
        let mut releases = self.releases.lock().unwrap_or_else(PoisonError::into_inner);
        releases
            .drain(..)
            .map(|(v, hold_id)| tuplekv_wire::Hold {
                versionstamp: v.as_bytes().to_vec(),
                hold_id,
            })
            .collect()
    }

    /// The current session: cached, or from a metadata exchange (retried on transport
    /// faults within the retry budget).
    pub(crate) async fn session(&self) -> Result<Arc<Session>, Error> {
        self.establish().await.map_err(SessionError::into_error)
    }

    /// [`Transport::session`], with a definite TLS failure told apart.
    pub(crate) async fn establish(&self) -> Result<Arc<Session>, SessionError> {
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
                    return Err(SessionError::Store(Error::Remote {
                        status: status.as_u16(),
                        message,
                    }));
                }
                Err(Failure::Tls(reason)) => return Err(SessionError::Tls(reason)),
                Err(Failure::NotSent(reason) | Failure::Unknown(reason)) => {
                    self.reset_connection();
                    if started.elapsed() + backoff > self.options.retry_for {
                        return Err(SessionError::Store(reason.unavailable()));
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
            tuplekv_extensions: [tuplekv_wire::EXTENSION, tuplekv_wire::NUMBERING_EXTENSION],
        })
        .map_err(|e| Failure::NotSent(e.to_string().into()))?;
        let req = Request::builder()
            .method(Method::POST)
            .uri(self.metadata_url.clone())
            .header(AUTHORIZATION, format!("Bearer {}", self.access_token))
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Failure::NotSent(e.to_string().into()))?;
        let body = self.round_trip(req).await?;
        let meta: MetadataResponse = serde_json::from_slice(&body).map_err(|e| {
            refused(format!(
                "the metadata exchange answered something that is not metadata: {e}"
            ))
        })?;
        self.session_from(meta)
    }

    /// The session a metadata answer describes, if this client can use it.
    fn session_from(&self, meta: MetadataResponse) -> Result<Session, Failure> {
        if !SUPPORTED_VERSIONS.contains(&meta.version) {
            return Err(refused(format!(
                "the server chose protocol version {}, which this client does not speak",
                meta.version
            )));
        }
        let endpoint = meta
            .endpoints
            .iter()
            .find(|e| e.consistency == "strong")
            .or_else(|| meta.endpoints.first())
            .ok_or_else(|| refused("the metadata lists no endpoint".into()))?;
        let base = self.resolve(&endpoint.url);
        let scheme = self.metadata_url.scheme_str().unwrap_or("http");
        if !base.starts_with(&format!("{scheme}://")) {
            // Over https, following it to http:// would send the token in clear text; over
            // http, the connection this client holds cannot carry https://.
            return Err(refused(format!(
                "the metadata names the endpoint {base}, whose scheme is not the metadata \
                 URL's ({scheme}://): this client does not change schemes"
            )));
        }
        let usable = HeaderValue::from_str(&format!("Bearer {}", meta.token)).is_ok()
            && HeaderValue::from_str(&meta.database_id).is_ok()
            && base.parse::<Uri>().is_ok();
        if !usable {
            return Err(refused(
                "the metadata exchange gave a token, database id or endpoint that cannot be sent"
                    .into(),
            ));
        }
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
        let listed = |name: &str| meta.tuplekv_extensions.iter().any(|e| e == name);
        let extension = listed(tuplekv_wire::EXTENSION);
        Ok(Session {
            base,
            token: meta.token,
            database_id: meta.database_id,
            version: meta.version,
            extension,
            // Numberings travel in the extension's field: no use without it.
            numbering: extension && listed(tuplekv_wire::NUMBERING_EXTENSION),
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
            let resp = self.client().request(req).await.map_err(classify)?;
            let status = resp.status();
            let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok());
            let detail = Detail {
                error: header(tuplekv_wire::ERROR_HEADER)
                    .and_then(tuplekv_wire::error_from_header)
                    .map(Box::new),
            };
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| Failure::Unknown(format!("reading the answer: {e}").into()))?
                .to_bytes();
            if status.is_success() {
                Ok(body)
            } else {
                Err(Failure::Status(
                    status,
                    String::from_utf8_lossy(&body).trim().to_owned(),
                    detail,
                ))
            }
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Failure::Unknown(
                format!("no answer within {} ms", timeout.as_millis()).into(),
            )),
        }
    }

    fn data_request(
        &self,
        session: &Session,
        path: &str,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, Error> {
        Request::builder()
            .method(Method::POST)
            .uri(format!("{}/{path}", session.base))
            .header(AUTHORIZATION, format!("Bearer {}", session.token))
            .header(CONTENT_TYPE, PROTOBUF)
            .header("x-denokv-database-id", session.database_id.as_str())
            .header("x-denokv-version", session.version)
            .body(Full::new(body))
            .map_err(|e| Error::Remote {
                status: StatusCode::BAD_GATEWAY.as_u16(),
                message: format!("the metadata exchange gave an unusable endpoint or token: {e}"),
            })
    }

    /// Opens a streaming data path request (a watch): the response, its body unread.
    pub(crate) async fn open_stream(
        &self,
        path: &'static str,
        body: Bytes,
    ) -> Result<Response<Incoming>, Error> {
        let session = self.session().await?;
        let req = self.data_request(&session, path, body)?;
        let resp = tokio::time::timeout(self.options.request_timeout, self.client().request(req))
            .await
            .map_err(|_| Error::unavailable("no answer to the watch request"))?
            .map_err(|e| Error::unavailable(error_chain(&e)).with_source(e))?;
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
            Detail::default(),
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
            let req = self.data_request(&session, path, body.clone())?;
            let reason = match self.round_trip(req).await {
                Ok(body) => return Ok((session, Reply { body })),
                Err(Failure::Status(StatusCode::UNAUTHORIZED, _, _)) if !renewed => {
                    // The token may have been renewed under us: exchange again, once.
                    renewed = true;
                    self.forget(&session);
                    continue;
                }
                // tuplekv's 503 (the store is closing) comes before the write is applied.
                Err(Failure::Status(StatusCode::SERVICE_UNAVAILABLE, message, _)) => message.into(),
                // tuplekv's 409: its store lost the answer to the commit (a server over etcd).
                Err(Failure::Status(StatusCode::CONFLICT, message, _)) if kind == Kind::Write => {
                    return Err(Error::outcome_unknown(format!(
                        "the server does not know the outcome: {message}"
                    )));
                }
                // Any other 5xx to a write may come after it was applied (a proxy's 502 or 504
                // after forwarding it, a server failing after its commit): unknown.
                Err(Failure::Status(status, message, _))
                    if kind == Kind::Write && status.is_server_error() =>
                {
                    return Err(Error::outcome_unknown(format!(
                        "the server answered {status}: {message}"
                    )));
                }
                Err(Failure::Status(
                    status @ (StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT),
                    message,
                    _,
                )) => format!("{status}: {message}").into(),
                Err(Failure::Status(status, message, detail)) => {
                    return Err(status_error(status, message, detail));
                }
                Err(Failure::NotSent(reason)) => reason,
                // Definite, and never sent (even a write): retrying cannot help.
                Err(Failure::Tls(reason)) => return Err(tls_unavailable(reason)),
                Err(Failure::Unknown(reason)) if kind == Kind::Write => {
                    self.reset_connection();
                    return Err(reason.outcome_unknown());
                }
                Err(Failure::Unknown(reason)) => {
                    self.reset_connection();
                    reason
                }
            };
            self.forget(&session);
            if started.elapsed() + backoff > self.options.retry_for {
                return Err(reason.unavailable());
            }
            tracing::debug!(%reason, path, "retrying a request that did not reach the store");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// A metadata answer this client cannot use: definite, not retried.
fn refused(message: String) -> Failure {
    Failure::Status(StatusCode::BAD_GATEWAY, message, Detail::default())
}

/// A client that speaks HTTP/2 only, with this store's timeouts: h2c, or over TLS with
/// `tls` (the handshake within [`RemoteOptions::connect_timeout`] too), spawning its tasks
/// with `spawner`.
fn build_client(
    options: &RemoteOptions,
    tls: Option<&Arc<ClientConfig>>,
    spawner: &Spawner,
) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(options.connect_timeout));
    let mut builder = Client::builder(spawner.clone());
    builder
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_only(true)
        .http2_keep_alive_interval(Some(options.keep_alive_interval))
        .http2_keep_alive_timeout(options.request_timeout);
    match tls {
        None => HttpClient::Plain(builder.build(connector)),
        Some(config) => HttpClient::Tls(builder.build(HttpsConnector::new(
            connector,
            Arc::clone(config),
            options.connect_timeout,
        ))),
    }
}

/// The error for a non-success status: the engine error a tuplekv server named by code
/// (`Error::NotU64` comes with an empty key, which the caller fills in from its write), a
/// snapshot the server dropped for a 410 without one, and otherwise `Error::Remote` with
/// the status and text. The text is never parsed: it is denokv's, written for people.
fn status_error(status: StatusCode, message: String, detail: Detail) -> Error {
    if let Some(e) = detail.error {
        return *e;
    }
    if status.as_u16() == tuplekv_wire::SNAPSHOT_GONE_STATUS {
        return Error::SnapshotExpired {
            versionstamp: "unknown".to_owned(),
        };
    }
    Error::Remote {
        status: status.as_u16(),
        message,
    }
}

/// Whether a client error means the request never left, or is a definite TLS failure.
fn classify(e: hyper_util::client::legacy::Error) -> Failure {
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        if let Some(tls) = s.downcast_ref::<TlsFailure>()
            && tls.definite
        {
            return Failure::Tls(tls.reason.clone());
        }
        source = s.source();
    }
    if e.is_connect() {
        Failure::NotSent(Reason::caused_by(error_chain(&e), e))
    } else {
        Failure::Unknown(Reason::caused_by(error_chain(&e), e))
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
