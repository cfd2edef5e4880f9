//! The router: the metadata exchange (`POST /`), the data path guard (protocol version,
//! token, database id, content type, in denokv's order and with its texts), and the
//! `snapshot_read` and `atomic_write` handlers. `watch` lives in `watch.rs`.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use denokv_proto::datapath as pb;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Body as _;
use prost::Message;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tuplekv_engine::{CommitResult, ReadView, Store, Versionstamp};

use crate::conn::{ConnHandle, PeerAddr};
use crate::error::{ApiError, text};
use crate::limits::{
    METADATA_BODY_MAX, REFUSED_TOKEN_LOG_INTERVAL, REQUEST_BODY_MAX, SMALL_BODY_MAX,
    UNAUTHENTICATED_BODIES_IN_FLIGHT_MAX,
};
use crate::protocol::{
    ExtensionRead, ReadRange, decode_read_mode, decode_snapshot_read, decode_write, encode_entry,
};
use crate::snapshots::Held;
use crate::stats::{Endpoint, ServerStats};
use crate::{AccessTokens, CommitMode, ReadMode, ServerConfig};

/// What every handler shares.
pub(crate) struct AppState<S: Store> {
    pub(crate) store: Arc<S>,
    pub(crate) config: ServerConfig,
    /// Slots for large request bodies being read or held
    /// ([`crate::limits::REQUEST_BODIES_IN_FLIGHT_MAX`] by default).
    body_permits: Arc<Semaphore>,
    /// Slots for metadata-exchange bodies that came without the valid token
    /// ([`UNAUTHENTICATED_BODIES_IN_FLIGHT_MAX`]); never waited for.
    unauthenticated_body_permits: Arc<Semaphore>,
    /// Snapshots held for clients of tuplekv's extension.
    pub(crate) held: Held<S::Snapshot>,
    /// Requests refused for their token, for the rate-limited log line.
    token_refusals: TokenRefusalLog,
}

impl<S: Store> AppState<S> {
    pub(crate) fn stats(&self) -> &Arc<ServerStats> {
        self.config.stats()
    }
}

pub(crate) type Shared<S> = Arc<AppState<S>>;

/// The path of the one data path endpoint the metadata exchange hands out.
const ENDPOINT_PATH: &str = "/v2";
const PROTOBUF: &str = "application/x-protobuf";

pub(crate) fn build<S: Store + 'static>(store: Arc<S>, config: ServerConfig) -> Router
where
    S::Watch: 'static,
{
    let body_permits = Arc::new(Semaphore::new(config.request_bodies_in_flight_max()));
    let (held_max, held_idle) = config.held_snapshots();
    let state: Shared<S> = Arc::new(AppState {
        held: Held::new(held_max, held_idle),
        store,
        config,
        body_permits,
        unauthenticated_body_permits: Arc::new(Semaphore::new(
            UNAUTHENTICATED_BODIES_IN_FLIGHT_MAX,
        )),
        token_refusals: TokenRefusalLog::default(),
    });
    let data_path = Router::new()
        .route("/snapshot_read", post(snapshot_read::<S>))
        .route("/atomic_write", post(atomic_write::<S>))
        .route("/watch", post(crate::watch::watch::<S>))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            data_path_guard::<S>,
        ));
    Router::new()
        .route("/", post(metadata::<S>))
        .route("/healthz", get(crate::health::healthz))
        .route("/readyz", get(crate::health::readyz::<S>))
        .nest(ENDPOINT_PATH, data_path)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            count_refusals::<S>,
        ))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, text::NOT_FOUND)
}

async fn count_refusals<S: Store + 'static>(
    State(state): State<Shared<S>>,
    req: Request,
    next: Next,
) -> Response {
    let route = crate::stats::route_of(req.uri().path());
    let started = std::time::Instant::now();
    let res = next.run(req).await;
    if !res.status().is_success() {
        state.stats().refused();
    }
    state.stats().responded(
        route,
        res.status().as_u16(),
        started.elapsed(),
        res.body().size_hint().exact(),
    );
    res
}

/// A request body read whole, holding its slot of the server's body limit (if it needed
/// one) until dropped.
pub(crate) struct BufferedBody {
    bytes: Bytes,
    _permit: Option<OwnedSemaphorePermit>,
}

impl std::ops::Deref for BufferedBody {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// 413 for a body longer than `max`.
fn body_too_large(max: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("The request body is too large (max {max} bytes)."),
    )
}

/// `body` cut off past `max` bytes, and a buffer for it: 413 at once when its declared length
/// is more than `max`, one allocation when it is declared (every KV Connect client does).
fn limit_body(body: Body, max: usize) -> Result<(Limited<Body>, bytes::BytesMut), ApiError> {
    let declared = body.size_hint().exact();
    if declared.is_some_and(|len| len > max as u64) {
        return Err(body_too_large(max));
    }
    let capacity = declared.map_or(0, |len| usize::try_from(len).unwrap_or(max));
    Ok((
        Limited::new(body, max),
        bytes::BytesMut::with_capacity(capacity),
    ))
}

impl<S: Store> AppState<S> {
    /// Reads a request body of at most `max` bytes, failing as soon as more arrive (or at
    /// once, when its declared length is more).
    ///
    /// The first [`SMALL_BODY_MAX`] bytes are read without a slot: most bodies end there.
    /// A body that goes on takes one of the server's large-body slots, waiting at most the
    /// configured time for one (then 503), and keeps it until the returned body is dropped:
    /// so the server never buffers more than that many large bodies at once, and a client
    /// that sends slowly holds no slot until it has sent a small body's worth. Each part
    /// must arrive within the configured read timeout (then 408), counted from when the
    /// server starts reading it.
    pub(crate) async fn read_body(&self, body: Body, max: usize) -> Result<BufferedBody, ApiError> {
        let (mut body, mut buf) = limit_body(body, max)?;
        let small = SMALL_BODY_MAX.min(max);
        if self.read_until(&mut body, max, &mut buf, small).await? {
            return Ok(BufferedBody {
                bytes: buf.freeze(),
                _permit: None,
            });
        }
        let permit = self.large_body_slot().await?;
        self.read_until(&mut body, max, &mut buf, usize::MAX)
            .await?;
        Ok(BufferedBody {
            bytes: buf.freeze(),
            _permit: Some(permit),
        })
    }

    /// Reads frames of `body` (limited to `max` bytes) into `buf` until it ends (true) or
    /// `buf` holds more than `enough` bytes (false), within the configured read timeout.
    async fn read_until(
        &self,
        body: &mut Limited<Body>,
        max: usize,
        buf: &mut bytes::BytesMut,
        enough: usize,
    ) -> Result<bool, ApiError> {
        let timeout = self.config.body_read_timeout();
        let read = async {
            while buf.len() <= enough {
                match body.frame().await {
                    None => return Ok(true),
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            self.stats().received(data.len());
                            buf.extend_from_slice(&data);
                        }
                    }
                    Some(Err(e)) => return Err(e),
                }
            }
            Ok(false)
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(ended)) => Ok(ended),
            Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
                Err(body_too_large(max))
            }
            Ok(Err(e)) => Err(ApiError::bad_request(format!(
                "The request body could not be read: {e}."
            ))),
            Err(_) => {
                self.stats().body_read_timed_out();
                // The body is dropped unread: hyper closes an HTTP/1.1 connection then, and
                // resets an HTTP/2 stream.
                Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("The request body did not arrive within {timeout:?}."),
                ))
            }
        }
    }

    /// A slot of the server's large-body limit, waited for at most the configured time.
    async fn large_body_slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        if let Ok(permit) = Arc::clone(&self.body_permits).try_acquire_owned() {
            return Ok(permit);
        }
        let _waiting = self.stats().wait_for_body_slot();
        let wait = self.config.body_slot_wait_max();
        match tokio::time::timeout(wait, Arc::clone(&self.body_permits).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            // The semaphore is never closed, so this only fails if that changes.
            Ok(Err(_)) => Err(ApiError::internal()),
            Err(_) => {
                self.stats().body_slot_timed_out();
                Err(ApiError::busy(
                    format!(
                        "The server is busy: every slot for large request bodies stayed taken \
                         for {wait:?}. Nothing was done; try again."
                    ),
                    1,
                ))
            }
        }
    }

    /// [`AppState::read_body`] for the metadata exchange. With the valid token in its
    /// header, the body is read as any small body; without it, it needs one of the slots for
    /// unauthenticated bodies, which is never waited for (503 at once when all are taken).
    async fn read_metadata_body(
        &self,
        body: Body,
        authenticated: bool,
    ) -> Result<BufferedBody, ApiError> {
        if authenticated {
            return self.read_body(body, METADATA_BODY_MAX).await;
        }
        let Ok(permit) = Arc::clone(&self.unauthenticated_body_permits).try_acquire_owned() else {
            self.stats().body_slot_timed_out();
            return Err(ApiError::busy(
                "The server is busy: too many metadata exchanges without a valid access token \
                 are being read. Try again.",
                1,
            ));
        };
        let (mut body, mut buf) = limit_body(body, METADATA_BODY_MAX)?;
        self.read_until(&mut body, METADATA_BODY_MAX, &mut buf, usize::MAX)
            .await?;
        Ok(BufferedBody {
            bytes: buf.freeze(),
            _permit: Some(permit),
        })
    }
}

/// Records on the request's connection (when `serve` runs it) that it showed the token, so
/// the connection is never closed to make room for a new one.
fn mark_authenticated(extensions: &axum::http::Extensions) {
    if let Some(conn) = extensions.get::<ConnHandle>() {
        conn.0.authenticate();
    }
}

/// The token of `authorization` when it is `<scheme> <token>` with scheme `bearer` (any
/// case) and the token one of `tokens` (compared in constant time).
pub(crate) fn authorize<'h>(
    headers: &'h HeaderMap,
    tokens: &AccessTokens,
) -> Result<&'h str, ApiError> {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Err(ApiError::unauthorized(text::MALFORMED_AUTHORIZATION));
    };
    let Some((scheme, token)) = value.split_once(' ') else {
        return Err(ApiError::unauthorized(text::MALFORMED_AUTHORIZATION));
    };
    let token_ok = tokens.accepts(token);
    if !scheme.eq_ignore_ascii_case("bearer") || !token_ok {
        return Err(ApiError::unauthorized(text::INVALID_ACCESS_TOKEN));
    }
    Ok(token)
}

/// [`authorize`], with a refusal logged (rate-limited, see [`TokenRefusalLog`]).
fn authorize_logged<'h, S: Store>(
    state: &AppState<S>,
    headers: &'h HeaderMap,
    extensions: &axum::http::Extensions,
) -> Result<&'h str, ApiError> {
    authorize(headers, state.config.access_tokens()).inspect_err(|_| {
        let peer = extensions.get::<PeerAddr>().map(|p| p.0);
        let why = if headers.contains_key(header::AUTHORIZATION) {
            "wrong access token"
        } else {
            "no access token"
        };
        state.token_refusals.refused(peer, why);
    })
}

/// Logs requests refused for their token at most once per [`REFUSED_TOKEN_LOG_INTERVAL`]
/// (at info, with the peer of the one logged and how many were refused since the last
/// line), so a client retrying a wrong token in a loop writes one line per interval.
#[derive(Debug, Default)]
pub(crate) struct TokenRefusalLog {
    inner: std::sync::Mutex<RefusalCount>,
}

#[derive(Debug, Default)]
struct RefusalCount {
    last: Option<std::time::Instant>,
    unlogged: u64,
}

impl TokenRefusalLog {
    /// Counts a refusal; whether it was logged.
    pub(crate) fn refused(&self, peer: Option<std::net::SocketAddr>, why: &str) -> bool {
        let mut count = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        count.unlogged += 1;
        let now = std::time::Instant::now();
        if count
            .last
            .is_some_and(|last| now.duration_since(last) < REFUSED_TOKEN_LOG_INTERVAL)
        {
            return false;
        }
        let peer = peer.map_or_else(|| "unknown".to_owned(), |p| p.to_string());
        tracing::info!(
            %peer,
            refused = count.unlogged,
            since_last_line = ?count.last.map(|l| now.duration_since(l)),
            "refused a request: {why} (401)"
        );
        count.last = Some(now);
        count.unlogged = 0;
        true
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataRequest {
    supported_versions: Vec<u64>,
    /// tuplekv's extensions the client speaks (see `tuplekv_wire`); Deno and Node send none.
    #[serde(default)]
    tuplekv_extensions: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MetadataResponse {
    version: u64,
    database_id: String,
    endpoints: [EndpointInfo; 1],
    token: String,
    expires_at: String,
    /// The extensions agreed: only sent to a client that asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    tuplekv_extensions: Option<Vec<&'static str>>,
}

#[derive(Serialize)]
struct EndpointInfo {
    url: String,
    consistency: &'static str,
}

/// `POST /`: version negotiation first (as denokv does), then the token.
async fn metadata<S: Store + 'static>(
    State(state): State<Shared<S>>,
    uri: Uri,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    state.stats().request(Endpoint::Metadata);
    // The token is judged now only to choose whose slots read the body; a wrong one is
    // reported after the version, as denokv does.
    let authenticated = authorize(&headers, state.config.access_tokens()).is_ok();
    if authenticated {
        mark_authenticated(req.extensions());
    }
    let scheme = if req.extensions().get::<crate::tls::OverTls>().is_some() {
        "https"
    } else {
        "http"
    };
    let (parts, body) = req.into_parts();
    let request_extensions = parts.extensions;
    let body = state.read_metadata_body(body, authenticated).await?;
    let Ok(req) = serde_json::from_slice::<MetadataRequest>(&body) else {
        return Err(ApiError::bad_request(text::MINIMUM_PROTOCOL_VERSION));
    };
    drop(body);
    let asked = state.config.extension() && !req.tuplekv_extensions.is_empty();
    let extensions = asked.then(|| {
        [tuplekv_wire::EXTENSION, tuplekv_wire::NUMBERING_EXTENSION]
            .into_iter()
            .filter(|e| req.tuplekv_extensions.iter().any(|r| r == e))
            .collect::<Vec<_>>()
    });
    let offered = |v| req.supported_versions.contains(&v);
    let version = [3, 2, 1]
        .into_iter()
        .find(|&v| offered(v))
        .ok_or_else(|| ApiError::bad_request(text::NO_MATCHING_PROTOCOL_VERSION))?;
    let token = authorize_logged(&state, &headers, &request_extensions)?.to_owned();
    let url = if version == 1 {
        // Version 1 clients need an absolute endpoint URL.
        let host = uri
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| {
                headers
                    .get(header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_owned)
            })
            .ok_or_else(|| {
                ApiError::bad_request(
                    "Protocol version 1 needs a Host header to build the endpoint URL.",
                )
            })?;
        format!(
            "{scheme}://{host}{}{ENDPOINT_PATH}",
            state.config.base_path()
        )
    } else {
        format!("{}{ENDPOINT_PATH}", state.config.base_path())
    };
    let lifetime = chrono::Duration::from_std(state.config.token_lifetime())
        .map_err(|_| ApiError::internal())?;
    let expires_at =
        (chrono::Utc::now() + lifetime).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let reply = MetadataResponse {
        version,
        database_id: state.config.database_id().hyphenated().to_string(),
        endpoints: [EndpointInfo {
            url,
            consistency: "strong",
        }],
        // The token the client showed: with several valid, each client keeps its own.
        token,
        expires_at,
        tuplekv_extensions: extensions,
    };
    let json = serde_json::to_vec(&reply).map_err(|_| ApiError::internal())?;
    Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response())
}

/// The checks every data path request passes, in denokv's order: protocol version, token,
/// database id; then ours, the content type.
async fn data_path_guard<S: Store + 'static>(
    State(state): State<Shared<S>>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let headers = req.headers();
    // Version 1 clients send `x-transaction-domain-id` and no version header.
    let id_header = match headers.get("x-denokv-version").map(|v| v.to_str()) {
        Some(Ok("2" | "3")) => "x-denokv-database-id",
        None if headers.contains_key("x-transaction-domain-id") => "x-transaction-domain-id",
        _ => return Err(ApiError::bad_request(text::INVALID_PROTOCOL_VERSION)),
    };
    authorize_logged(&state, headers, req.extensions())?;
    mark_authenticated(req.extensions());
    let id_ok = headers
        .get(id_header)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| uuid::Uuid::parse_str(v).ok())
        .is_some_and(|id| id == state.config.database_id());
    if !id_ok {
        return Err(ApiError::bad_request(text::INVALID_DATABASE_ID));
    }
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let essence = ct
            .to_str()
            .ok()
            .and_then(|s| s.split(';').next())
            .map(str::trim);
        if !essence.is_some_and(|e| e.eq_ignore_ascii_case(PROTOBUF)) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "Unsupported content type {ct:?}: data path requests carry {PROTOBUF} (or no content type)."
                ),
            ));
        }
    }
    Ok(next.run(req).await)
}

/// `POST /v2/snapshot_read`: every range from one snapshot, in request order. With tuplekv's
/// extension, the snapshot may be a held one, may be held for later reads, and the output
/// says its versionstamp.
async fn snapshot_read<S: Store + 'static>(
    State(state): State<Shared<S>>,
    body: Body,
) -> Result<Response, ApiError> {
    state.stats().request(Endpoint::SnapshotRead);
    let body = state.read_body(body, REQUEST_BODY_MAX).await?;
    let ranges = decode_snapshot_read(&body)?;
    let mode = match state.config.extension() {
        true => decode_read_mode(&body)?,
        false => None,
    };
    drop(body);
    let bytes = match state.config.read_mode() {
        ReadMode::Inline => read_ranges(&state, &ranges, mode.as_ref())?,
        ReadMode::BlockingPool => {
            let state = Arc::clone(&state);
            tokio::task::spawn_blocking(move || read_ranges(&state, &ranges, mode.as_ref()))
                .await
                .map_err(|e| {
                    tracing::error!(error = %e, "read task failed");
                    ApiError::internal()
                })??
        }
    };
    Ok(protobuf_bytes(bytes))
}

/// Reads `ranges` from one snapshot (a held one, or one to hold, as `mode` says) and
/// encodes the output. The snapshot's versionstamp is asked for after the scans, which fix
/// it in a store whose snapshot fixes its state at its first read, and a new snapshot is held
/// only once every scan has succeeded.
fn read_ranges<S: Store>(
    state: &AppState<S>,
    ranges: &[ReadRange],
    mode: Option<&ExtensionRead>,
) -> Result<Vec<u8>, ApiError> {
    if let Some(m) = mode {
        m.release
            .iter()
            .for_each(|&(v, id)| state.held.release(v, id));
    }
    let snapshot = match mode.and_then(|m| m.at) {
        Some(at) => state.held.get(at).ok_or_else(|| snapshot_gone(at))?,
        None => state.store.snapshot(),
    };
    let mut out = Vec::with_capacity(ranges.len());
    let mut expires_at_ms = Vec::new();
    for r in ranges {
        let entries = snapshot
            .scan(&r.range, r.reverse, r.limit)
            .map_err(|e| engine_error(&e))?;
        if mode.is_some() {
            expires_at_ms.extend(entries.iter().map(|e| e.expires_at.unwrap_or(0)));
        }
        out.push(pb::ReadRangeOutput {
            values: entries.iter().map(encode_entry).collect(),
        });
    }
    let mut bytes = pb::SnapshotReadOutput {
        ranges: out,
        read_disabled: false,
        read_is_strongly_consistent: true,
        status: pb::SnapshotReadStatus::SrSuccess.into(),
    }
    .encode_to_vec();
    if let Some(m) = mode {
        let versionstamp = S::try_snapshot_versionstamp(&snapshot).map_err(|e| engine_error(&e))?;
        if m.hold {
            state.held.hold(versionstamp, m.hold_id, &snapshot);
        }
        state.stats().set_held_snapshots(state.held.len());
        tuplekv_wire::SnapshotReadOutputExtension {
            tuplekv: Some(tuplekv_wire::ReadOutputExtension {
                versionstamp: versionstamp.as_bytes().to_vec(),
                expires_at_ms,
            }),
        }
        .encode(&mut bytes)
        .map_err(|_| ApiError::internal())?;
    }
    Ok(bytes)
}

/// 410 Gone: the snapshot at `at` is no longer held.
fn snapshot_gone(at: Versionstamp) -> ApiError {
    ApiError::new(
        StatusCode::GONE,
        format!("The snapshot at {at} is no longer held (idle too long, or the server restarted)."),
    )
    .with_engine_error(&tuplekv_engine::Error::SnapshotExpired {
        versionstamp: at.to_string(),
    })
}

/// `POST /v2/atomic_write`: one commit, run where [`ServerConfig::commit_mode`] says: by
/// default off the runtime's worker threads (a durable commit waits for an fsync, which
/// concurrent commits share through the engine's group commit), or awaited on the request's
/// task through [`Store::commit_async`]. With tuplekv's extension the write may carry range
/// checks, each against a snapshot the server holds (kept while the commit runs, so the
/// versions the check compares with stay), and a numbering; a failure is reported in full, and
/// a numbered commit reports the first number of each claim.
async fn atomic_write<S: Store + 'static>(
    State(state): State<Shared<S>>,
    body: Body,
) -> Result<Response, ApiError> {
    state.stats().request(Endpoint::AtomicWrite);
    let body = state.read_body(body, REQUEST_BODY_MAX).await?;
    let (write, extended) = decode_write(&body, state.config.extension())?;
    drop(body);
    let mut pinned = Vec::new();
    for rc in &write.range_checks {
        if !pinned.iter().any(|(at, _)| *at == rc.since) {
            let snapshot = state
                .held
                .get(rc.since)
                .ok_or_else(|| snapshot_gone(rc.since))?;
            pinned.push((rc.since, snapshot));
        }
    }
    let result = match state.config.commit_mode() {
        CommitMode::Inline => state.store.commit_async(write).await,
        CommitMode::BlockingPool => {
            let store = Arc::clone(&state.store);
            tokio::task::spawn_blocking(move || store.commit(write))
                .await
                .map_err(|e| {
                    tracing::error!(error = %e, "commit task failed");
                    ApiError::internal()
                })?
        }
    }
    .map_err(|e| engine_error(&e))?;
    drop(pinned);
    state
        .stats()
        .commit_outcome(matches!(result, CommitResult::Committed { .. }));
    let (out, outcome) = write_output(result);
    let mut bytes = out.encode_to_vec();
    if extended {
        tuplekv_wire::AtomicWriteOutputExtension { tuplekv: outcome }
            .encode(&mut bytes)
            .map_err(|_| ApiError::internal())?;
    }
    Ok(protobuf_bytes(bytes))
}

/// A commit's result as the protocol's output, and the extension's full report of it (for a
/// failure, or a commit that took numbers).
fn write_output(
    result: CommitResult,
) -> (pb::AtomicWriteOutput, Option<tuplekv_wire::WriteOutcome>) {
    match result {
        CommitResult::Committed {
            versionstamp,
            numbers,
        } => (
            pb::AtomicWriteOutput {
                status: pb::AtomicWriteStatus::AwSuccess.into(),
                versionstamp: versionstamp.as_bytes().to_vec(),
                failed_checks: Vec::new(),
            },
            (!numbers.is_empty()).then(|| tuplekv_wire::WriteOutcome {
                numbers,
                ..tuplekv_wire::WriteOutcome::default()
            }),
        ),
        CommitResult::Conflict(c) => {
            let failed: Vec<_> = c
                .failed_checks
                .iter()
                .filter_map(|f| Some((u32::try_from(f.index).ok()?, f.actual)))
                .collect();
            let outcome = tuplekv_wire::WriteOutcome {
                actual: failed
                    .iter()
                    .map(|(_, a)| a.map(|v| v.as_bytes().to_vec()).unwrap_or_default())
                    .collect(),
                range_changed: c.range_changed,
                numbers: Vec::new(),
            };
            (
                pb::AtomicWriteOutput {
                    status: pb::AtomicWriteStatus::AwCheckFailure.into(),
                    versionstamp: Vec::new(),
                    failed_checks: failed.iter().map(|(i, _)| *i).collect(),
                },
                Some(outcome),
            )
        }
    }
}

/// Protobuf bytes as a response.
fn protobuf_bytes(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, PROTOBUF)], bytes).into_response()
}

/// Maps an engine error, logging the engine's own text when the fault is ours.
pub(crate) fn engine_error(e: &tuplekv_engine::Error) -> ApiError {
    let api = ApiError::from_engine(e);
    if api.status().is_server_error() {
        tracing::error!(error = %e, "store operation failed");
    }
    api
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_refused_tokens_is_one_log_line_per_interval() {
        let log = TokenRefusalLog::default();
        let peer = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 9)));
        assert!(
            log.refused(peer, "wrong access token"),
            "the first is logged"
        );
        let logged = (0..500)
            .filter(|_| log.refused(peer, "wrong access token"))
            .count();
        assert_eq!(logged, 0, "the rest wait for the interval");
        {
            let mut count = log.inner.lock().expect("lock");
            assert_eq!(count.unlogged, 500, "and are counted for the next line");
            count.last = count
                .last
                .and_then(|l| l.checked_sub(REFUSED_TOKEN_LOG_INTERVAL));
        }
        assert!(
            log.refused(None, "no access token"),
            "logged again after it"
        );
        assert_eq!(log.inner.lock().expect("lock").unlogged, 0);
    }

    #[test]
    fn authorize_returns_the_token_shown_when_it_is_one_of_the_set() {
        let tokens = AccessTokens::new(["first-token-0001", "second-token-002"]).expect("valid");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            "bearer second-token-002".parse().expect("header"),
        );
        assert_eq!(authorize(&headers, &tokens).ok(), Some("second-token-002"));
        headers.insert(
            header::AUTHORIZATION,
            "Basic second-token-002".parse().expect("header"),
        );
        assert!(
            authorize(&headers, &tokens).is_err(),
            "only the bearer scheme"
        );
        headers.remove(header::AUTHORIZATION);
        assert!(authorize(&headers, &tokens).is_err());
    }
}
