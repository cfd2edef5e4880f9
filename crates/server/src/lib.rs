//! A KV Connect server over any tuplekv [`Store`]: the protocol `Deno.openKv("http://…")`
//! (Deno 2.x, HTTP/2 cleartext) and Node's `@deno/kv` (HTTP/1.1) speak to a remote database.
//!
//! [`router`] builds an axum [`Router`] that can be embedded in an existing application;
//! [`serve`] runs it on a listener with HTTP/1.1 and h2c on the same port, bounded
//! connections, and graceful shutdown. With [`ServeOptions::tls`] set to a [`Tls`] it serves
//! `https://` instead (HTTP/2 and HTTP/1.1 chosen by ALPN, TLS 1.3 and 1.2), and the
//! certificate can be reloaded while it runs ([`Tls::reload`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use tuplekv_engine::Database;
//! use tuplekv_server::{ServerConfig, router, serve};
//!
//! # async fn run() -> std::io::Result<()> {
//! let store = Arc::new(Database::in_memory());
//! let config = ServerConfig::new("a-long-secret-token").map_err(std::io::Error::other)?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:4512").await?;
//! serve(listener, router(store, config), async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await
//! # }
//! ```
//!
//! # Health and metrics
//! The router answers `GET /healthz` (alive) and `GET /readyz` (the store accepts writes, as
//! [`Store::health`] says: 503 with the reason after a durable store's fail-stop or while an
//! etcd cluster cannot be reached) without the token. [`metrics::Metrics`] exports the
//! counters of [`ServerStats`] and each store's state as Prometheus text: merge
//! [`metrics::Metrics::router`] (`GET /metrics` behind the token) into the router, or serve
//! [`metrics::Metrics::open_router`] on a listener of its own. Each database served gets a
//! `database` label, and databases may be added while the server runs.
//!
//! Semantics are the engine's: a write commits all of its mutations or none, a failed check
//! is reported with the indexes of every failing check, and expiry is exact at read time.
//! Error texts are denokv's where it has one, because clients show them to their users.
//!
//! # Where this server differs from denokv, on purpose
//! - A write whose mutation fails writes nothing (denokv keeps the mutations before it), and
//!   `failed_checks` is filled in (denokv leaves it empty).
//! - Up to 100 checks per write, Deno's own limit (denokv: 10); sizes are counted as Deno
//!   counts them (a value-carrying mutation's key twice).
//! - An unknown value encoding is a 400 (denokv answers 500, which clients retry forever),
//!   and an LE64 payload that is not 8 bytes is a 400 (denokv panics).
//! - Protocol version 1 is served (with an absolute endpoint URL built from the request's
//!   host, `https://` over TLS, else `http://`); enqueues are refused with a 400 (KV Connect clients never send
//!   them).
//! - Reads never return an expired value (denokv shows it until its expiry pass, up to a
//!   minute later); watches learn of an expiry from the engine's background reclaimer.
//! - Slow and idle clients are cut off (see [`limits`]): a body that does not arrive within
//!   [`limits::REQUEST_BODY_READ_TIMEOUT`] is answered 408; a large body that finds no slot
//!   within [`limits::BODY_SLOT_WAIT_MAX`] 503 with `Retry-After`; at the connection limit an
//!   idle connection that never showed the token is closed to let a new one in. On Linux
//!   every read re-arms `TCP_QUICKACK`, so Deno's Nagle-on client sees no 40 ms delayed ACK.

mod app;
mod conn;
mod databases;
mod error;
mod health;
pub mod limits;
pub mod metrics;
// Public only so the fuzz target (`tuplekv_testkit::fuzz`) can decode bodies as the server
// does; not part of the API.
#[doc(hidden)]
pub mod protocol;
mod serve;
mod snapshots;
mod stats;
mod tls;
mod tokens;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tuplekv_engine::Store;

pub use databases::{
    ADMIN_PATH, DatabaseHost, DatabaseName, DatabaseNameError, Databases, RESERVED_NAMES,
    router_with_databases,
};
pub use error::ApiError;
pub use serve::{ServeOptions, serve, serve_with};
pub use stats::ServerStats;
pub use tls::{Tls, TlsError};
pub use tokens::{AccessTokens, check_tokens, parse_tokens_file, read_tokens_file};
/// Database ids ([`ServerConfig::with_database`]) are UUIDs, as KV Connect's are.
pub use uuid::Uuid;

/// Where the server runs a store's commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CommitMode {
    /// On tokio's blocking pool, so a commit that waits (for an `fdatasync`, or for the
    /// group commit's leader) never holds a runtime worker thread. Right for any store.
    #[default]
    BlockingPool,
    /// Awaited on the request's own task through [`Store::commit_async`]: no thread hop per
    /// commit. Only for a store whose `commit_async` never blocks the caller on I/O or on
    /// another commit's I/O (`Database`, in memory or durable: its future waits for the
    /// group commit without holding a thread); a commit that blocks here stalls every
    /// request on the same worker thread.
    Inline,
}

/// Where the server runs a store's snapshot reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReadMode {
    /// On the request's own task: right for a store whose reads are memory reads
    /// (`Database`, in memory or durable), where a hop to another thread would cost more
    /// than the read.
    #[default]
    Inline,
    /// On tokio's blocking pool: for a store whose reads wait on the network (an
    /// `EtcdStore`, whose read waits a round trip to the cluster), so a slow read never
    /// holds a runtime worker thread that other requests need.
    BlockingPool,
}

/// Why a [`ServerConfig`] or an [`AccessTokens`] set could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// An access token has fewer than [`limits::ACCESS_TOKEN_LEN_MIN`] characters.
    AccessTokenTooShort {
        /// The token's length, in characters.
        len: usize,
    },
    /// An access token has more than [`limits::ACCESS_TOKEN_LEN_MAX`] bytes.
    AccessTokenTooLong {
        /// The token's length, in bytes.
        len: usize,
    },
    /// An access token holds a control or a non-ASCII character, or starts or ends with a
    /// space: it could not travel as `Authorization: Bearer <token>`.
    AccessTokenNotPrintable,
    /// No access token was given.
    NoAccessToken,
    /// More than [`limits::ACCESS_TOKENS_MAX`] distinct tokens were given.
    TooManyAccessTokens {
        /// The limit.
        max: usize,
    },
    /// A tokens file could not be read or holds a bad token.
    TokensFile {
        /// What is wrong, with the file and line.
        reason: String,
    },
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::AccessTokenTooShort { len } => write!(
                f,
                "the access token is {len} characters; it must have at least {}",
                limits::ACCESS_TOKEN_LEN_MIN
            ),
            ConfigError::AccessTokenTooLong { len } => write!(
                f,
                "the access token is {len} bytes; it may have at most {}",
                limits::ACCESS_TOKEN_LEN_MAX
            ),
            ConfigError::AccessTokenNotPrintable => f.write_str(
                "the access token holds a control or a non-ASCII character, or a space at one \
                 end; use printable ASCII only",
            ),
            ConfigError::NoAccessToken => f.write_str("no access token was given"),
            ConfigError::TooManyAccessTokens { max } => {
                write!(f, "more than {max} access tokens were given")
            }
            ConfigError::TokensFile { reason } => write!(f, "tokens file: {reason}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// What a server needs besides its store.
///
/// Its `Debug` output leaves the access tokens out (it shows how many there are).
#[derive(Clone)]
pub struct ServerConfig {
    tokens: Arc<AccessTokens>,
    watch_ping_interval: Duration,
    watch_streams_max: usize,
    request_bodies_in_flight_max: usize,
    body_slot_wait_max: Duration,
    body_read_timeout: Duration,
    watch_send_timeout: Duration,
    commit_mode: CommitMode,
    read_mode: ReadMode,
    snapshots_held_max: usize,
    snapshot_idle_timeout: Duration,
    token_lifetime: Duration,
    extension: bool,
    stats: Arc<ServerStats>,
    base_path: String,
    database_id: Uuid,
}

impl ServerConfig {
    /// A configuration that accepts `access_token`, with the default limits.
    ///
    /// # Examples
    /// ```
    /// use tuplekv_server::{ConfigError, ServerConfig};
    ///
    /// assert!(ServerConfig::new("a-long-secret-token").is_ok());
    /// assert_eq!(
    ///     ServerConfig::new("short").unwrap_err(),
    ///     ConfigError::AccessTokenTooShort { len: 5 }
    /// );
    /// ```
    ///
    /// # Errors
    /// [`ConfigError::AccessTokenTooShort`] when the token has fewer than
    /// [`limits::ACCESS_TOKEN_LEN_MIN`] characters (an empty token would otherwise match
    /// `Authorization: Bearer `); [`ConfigError::AccessTokenTooLong`] past
    /// [`limits::ACCESS_TOKEN_LEN_MAX`] bytes; [`ConfigError::AccessTokenNotPrintable`] for a
    /// control or non-ASCII character, or a space at either end.
    pub fn new(access_token: impl Into<String>) -> Result<Self, ConfigError> {
        Ok(Self::with_access_tokens(Arc::new(AccessTokens::new([
            access_token.into(),
        ])?)))
    }

    /// A configuration that accepts every token of `tokens`, now and after each
    /// [`AccessTokens::replace`] (keep a clone of the `Arc` to rotate tokens while the
    /// server runs), with the default limits.
    pub fn with_access_tokens(tokens: Arc<AccessTokens>) -> Self {
        ServerConfig {
            tokens,
            watch_ping_interval: limits::WATCH_PING_INTERVAL,
            watch_streams_max: limits::WATCH_STREAMS_MAX,
            request_bodies_in_flight_max: limits::REQUEST_BODIES_IN_FLIGHT_MAX,
            body_slot_wait_max: limits::BODY_SLOT_WAIT_MAX,
            body_read_timeout: limits::REQUEST_BODY_READ_TIMEOUT,
            watch_send_timeout: limits::WATCH_SEND_TIMEOUT,
            commit_mode: CommitMode::default(),
            read_mode: ReadMode::default(),
            snapshots_held_max: limits::SNAPSHOTS_HELD_MAX,
            snapshot_idle_timeout: limits::SNAPSHOT_IDLE_TIMEOUT,
            token_lifetime: limits::METADATA_TOKEN_LIFETIME,
            extension: true,
            stats: Arc::default(),
            base_path: String::new(),
            database_id: Uuid::nil(),
        }
    }

    /// This configuration for the named database `name` with id `id`, served at
    /// `/NAME` by [`router_with_databases`]: the same tokens and limits, its own counters
    /// (a fresh [`ServerStats`]). The metadata exchange then hands out the endpoint
    /// `/NAME/v2` and the data path accepts only `id` as the database id. (The root
    /// database's id is the nil UUID, as denokv's is.)
    #[must_use]
    pub fn with_database(&self, name: &DatabaseName, id: Uuid) -> Self {
        ServerConfig {
            base_path: name.base_path(),
            database_id: id,
            stats: Arc::default(),
            ..self.clone()
        }
    }

    /// This configuration accepting only `tokens` (for a named database with tokens of its
    /// own: the server's tokens then do not open it).
    #[must_use]
    pub fn with_tokens(mut self, tokens: Arc<AccessTokens>) -> Self {
        self.tokens = tokens;
        self
    }

    /// The URL path this configuration's database is served at (`""` for the root).
    pub fn base_path(&self) -> &str {
        &self.base_path
    }

    /// The database id the metadata exchange hands out.
    pub fn database_id(&self) -> Uuid {
        self.database_id
    }

    /// Sets how often idle watch streams get a keep-alive frame (default
    /// [`limits::WATCH_PING_INTERVAL`]). An interval below [`limits::WATCH_PING_INTERVAL_MIN`]
    /// (zero, say) is raised to it.
    #[must_use]
    pub fn with_watch_ping_interval(mut self, interval: Duration) -> Self {
        self.watch_ping_interval = interval.max(limits::WATCH_PING_INTERVAL_MIN);
        self
    }

    /// Sets how many large request bodies (longer than [`limits::SMALL_BODY_MAX`]) may be
    /// read and held at once across the server (default
    /// [`limits::REQUEST_BODIES_IN_FLIGHT_MAX`]); a request past it waits for a free slot.
    /// Zero is raised to 1, and a number above tokio's `Semaphore::MAX_PERMITS` lowered to it.
    #[must_use]
    pub fn with_request_bodies_in_flight_max(mut self, max: usize) -> Self {
        self.request_bodies_in_flight_max = max.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        self
    }

    /// Sets how long a large body waits for a slot before its request is answered 503
    /// (default [`limits::BODY_SLOT_WAIT_MAX`]) and how long any body may take to arrive
    /// before its request is answered 408 (default [`limits::REQUEST_BODY_READ_TIMEOUT`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tuplekv_server::ServerConfig;
    ///
    /// let config = ServerConfig::new("a-long-secret-token")
    ///     .expect("a long enough token")
    ///     .with_body_timeouts(Duration::from_secs(2), Duration::from_secs(5));
    /// assert_eq!(config.body_read_timeout(), Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn with_body_timeouts(mut self, slot_wait_max: Duration, read_timeout: Duration) -> Self {
        self.body_slot_wait_max = slot_wait_max;
        self.body_read_timeout = read_timeout;
        self
    }

    /// Sets how long an HTTP/1.1 watch stream may leave a frame untaken before its
    /// connection is closed (default [`limits::WATCH_SEND_TIMEOUT`]).
    #[must_use]
    pub fn with_watch_send_timeout(mut self, timeout: Duration) -> Self {
        self.watch_send_timeout = timeout;
        self
    }

    /// How long a large body waits for a slot.
    pub fn body_slot_wait_max(&self) -> Duration {
        self.body_slot_wait_max
    }

    /// How long a body may take to arrive.
    pub fn body_read_timeout(&self) -> Duration {
        self.body_read_timeout
    }

    /// Sets how many watch streams may be open at once (default [`limits::WATCH_STREAMS_MAX`]).
    #[must_use]
    pub fn with_watch_streams_max(mut self, max: usize) -> Self {
        self.watch_streams_max = max;
        self
    }

    /// Sets where commits run (default [`CommitMode::BlockingPool`]).
    ///
    /// ```
    /// use tuplekv_server::{CommitMode, ServerConfig};
    ///
    /// // An in-memory store's commit never waits: run it on the request's task.
    /// let config = ServerConfig::new("a-long-secret-token")
    ///     .expect("a long enough token")
    ///     .with_commit_mode(CommitMode::Inline);
    /// assert_eq!(config.commit_mode(), CommitMode::Inline);
    /// ```
    #[must_use]
    pub fn with_commit_mode(mut self, mode: CommitMode) -> Self {
        self.commit_mode = mode;
        self
    }

    /// Sets where snapshot reads run (default [`ReadMode::Inline`]).
    ///
    /// ```
    /// use tuplekv_server::{ReadMode, ServerConfig};
    ///
    /// // A store whose reads wait on the network: keep them off the runtime's workers.
    /// let config = ServerConfig::new("a-long-secret-token")
    ///     .expect("a long enough token")
    ///     .with_read_mode(ReadMode::BlockingPool);
    /// assert_eq!(config.read_mode(), ReadMode::BlockingPool);
    /// ```
    #[must_use]
    pub fn with_read_mode(mut self, mode: ReadMode) -> Self {
        self.read_mode = mode;
        self
    }

    /// Sets how many snapshots the server holds for clients of tuplekv's extension (default
    /// [`limits::SNAPSHOTS_HELD_MAX`]; zero is raised to 1) and how long one stays after its
    /// last read (default [`limits::SNAPSHOT_IDLE_TIMEOUT`]).
    #[must_use]
    pub fn with_held_snapshots(mut self, max: usize, idle_timeout: Duration) -> Self {
        self.snapshots_held_max = max.max(1);
        self.snapshot_idle_timeout = idle_timeout;
        self
    }

    /// Sets how long a metadata exchange's token is valid (the reply's `expiresAt`; default
    /// [`limits::METADATA_TOKEN_LIFETIME`]). Clients run the exchange again before it ends.
    #[must_use]
    pub fn with_token_lifetime(mut self, lifetime: Duration) -> Self {
        self.token_lifetime = lifetime;
        self
    }

    /// Sets whether the server offers tuplekv's KV Connect extension (default: yes). Without
    /// it the server speaks plain KV Connect, as denokv does: for testing clients against
    /// what such a server offers.
    #[must_use]
    pub fn with_extension(mut self, offered: bool) -> Self {
        self.extension = offered;
        self
    }

    /// Where commits run.
    pub fn commit_mode(&self) -> CommitMode {
        self.commit_mode
    }

    /// Where snapshot reads run.
    pub fn read_mode(&self) -> ReadMode {
        self.read_mode
    }

    /// The tokens clients may present (shared by every clone of this configuration).
    pub fn access_tokens(&self) -> &Arc<AccessTokens> {
        &self.tokens
    }

    /// The counters the router updates (shared by every clone of this configuration).
    pub fn stats(&self) -> &Arc<ServerStats> {
        &self.stats
    }

    /// [`ServeOptions`] with the default limits and this configuration's counters.
    pub fn serve_options(&self) -> ServeOptions {
        ServeOptions {
            stats: Arc::clone(&self.stats),
            ..ServeOptions::default()
        }
    }

    pub(crate) fn watch_ping_interval(&self) -> Duration {
        self.watch_ping_interval
    }

    pub(crate) fn watch_streams_max(&self) -> usize {
        self.watch_streams_max
    }

    pub(crate) fn watch_send_timeout(&self) -> Duration {
        self.watch_send_timeout
    }

    pub(crate) fn request_bodies_in_flight_max(&self) -> usize {
        self.request_bodies_in_flight_max
    }

    pub(crate) fn extension(&self) -> bool {
        self.extension
    }

    pub(crate) fn token_lifetime(&self) -> Duration {
        self.token_lifetime
    }

    pub(crate) fn held_snapshots(&self) -> (usize, Duration) {
        (self.snapshots_held_max, self.snapshot_idle_timeout)
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("access_tokens", &self.tokens.len())
            .field("watch_ping_interval", &self.watch_ping_interval)
            .field("watch_streams_max", &self.watch_streams_max)
            .field(
                "request_bodies_in_flight_max",
                &self.request_bodies_in_flight_max,
            )
            .field("body_slot_wait_max", &self.body_slot_wait_max)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("watch_send_timeout", &self.watch_send_timeout)
            .field("commit_mode", &self.commit_mode)
            .field("read_mode", &self.read_mode)
            .field("snapshots_held_max", &self.snapshots_held_max)
            .field("snapshot_idle_timeout", &self.snapshot_idle_timeout)
            .field("token_lifetime", &self.token_lifetime)
            .field("extension", &self.extension)
            .field("base_path", &self.base_path)
            .field("database_id", &self.database_id)
            .finish_non_exhaustive()
    }
}

/// The KV Connect endpoints over `store`: `POST /` (metadata exchange), and
/// `POST /v2/snapshot_read`, `/v2/atomic_write` and `/v2/watch`; and the probes, answered
/// without the token: `GET /healthz` (200 `ok`) and `GET /readyz` (200 `ready` while the
/// store accepts writes, else 503 with the reason on one line; see [`Store::health`]). Any
/// other path gets 404 `Resource not found.`. For `GET /metrics`, merge in
/// [`metrics::Metrics::router`].
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use tuplekv_engine::Database;
/// use tuplekv_server::{ServerConfig, router};
///
/// let config = ServerConfig::new("a-long-secret-token").expect("a long enough token");
/// // An axum `Router`: nest it, add layers, or hand it to `serve`.
/// let app = router(Arc::new(Database::in_memory()), config);
/// # let _ = app;
/// ```
pub fn router<S: Store + 'static>(store: Arc<S>, config: ServerConfig) -> Router
where
    S::Watch: 'static,
{
    app::build(store, config)
}
