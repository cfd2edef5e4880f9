//! The accept loop: HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port, bounded
//! connections, streams and header blocks, and graceful shutdown.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower_service::Service;

use crate::limits::{
    CONNECTIONS_MAX, H1_HEADER_READ_TIMEOUT, H2_KEEP_ALIVE_INTERVAL, H2_KEEP_ALIVE_TIMEOUT,
    H2_STREAMS_PER_CONNECTION_MAX, HEADER_BLOCK_SIZE_MAX, SHUTDOWN_GRACE_MAX,
};
use crate::stats::ServerStats;

/// How long the accept loop pauses after `accept` fails (out of file descriptors, say), so it
/// does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// The smallest HTTP/1.1 read buffer hyper accepts (it panics below it).
const H1_BUF_SIZE_MIN: usize = 8192;

/// Transport limits of [`serve_with`].
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Most connections open at once; one past it is closed as soon as it is accepted.
    /// A number above tokio's `Semaphore::MAX_PERMITS` is lowered to it.
    pub connections_max: usize,
    /// Most concurrent HTTP/2 streams per connection.
    pub h2_streams_per_connection_max: u32,
    /// Largest request header block, in bytes (at least 8192 for HTTP/1.1).
    pub header_block_size_max: usize,
    /// Where connection counts go; share the router's ([`crate::ServerConfig::stats`]) to
    /// see everything in one place and have request counts logged at shutdown.
    pub stats: Arc<ServerStats>,
    /// How long shutdown waits for requests in flight before closing what is left.
    pub shutdown_grace: Duration,
    /// How long a connection may wait before sending its first bytes, and an HTTP/1.1
    /// connection before sending a complete request header block (also between requests on
    /// a kept-alive connection); past it the connection is closed.
    pub h1_header_read_timeout: Duration,
    /// How often an HTTP/2 connection is pinged.
    pub h2_keep_alive_interval: Duration,
    /// How long an HTTP/2 ping may go unacknowledged before the connection is closed.
    pub h2_keep_alive_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            connections_max: CONNECTIONS_MAX,
            h2_streams_per_connection_max: H2_STREAMS_PER_CONNECTION_MAX,
            header_block_size_max: HEADER_BLOCK_SIZE_MAX,
            stats: Arc::default(),
            shutdown_grace: SHUTDOWN_GRACE_MAX,
            h1_header_read_timeout: H1_HEADER_READ_TIMEOUT,
            h2_keep_alive_interval: H2_KEEP_ALIVE_INTERVAL,
            h2_keep_alive_timeout: H2_KEEP_ALIVE_TIMEOUT,
        }
    }
}

/// Tells long-running responses (watch streams) that the server is shutting down. `serve`
/// puts one in every request's extensions; a router served some other way has none.
#[derive(Debug, Clone)]
pub(crate) struct ShutdownSignal(pub(crate) watch::Receiver<bool>);

impl ShutdownSignal {
    /// Resolves once shutdown has begun.
    pub(crate) async fn wait(mut self) {
        // An error means the sender is gone: the server has stopped too.
        let _ = self.0.wait_for(|&closing| closing).await;
    }
}

/// Serves `router` on `listener` with the default [`ServeOptions`] until `shutdown`
/// resolves, then stops accepting, ends watch streams, lets in-flight requests finish (for
/// at most [`SHUTDOWN_GRACE_MAX`]), and returns.
///
/// # Examples
/// ```no_run
/// use std::sync::Arc;
/// use tuplekv_engine::Database;
/// use tuplekv_server::{ServerConfig, router, serve};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = ServerConfig::new("a-long-secret-token")?;
/// let app = router(Arc::new(Database::in_memory()), config);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// serve(listener, app, async {
///     let _ = tokio::signal::ctrl_c().await;
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// None today; the `Result` leaves room for listener failures that cannot be retried.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    serve_with(listener, router, ServeOptions::default(), shutdown).await
}

/// The per-connection protocol settings: both protocols, with the header and stream limits.
fn connection_builder(options: &ServeOptions) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.h1_header_read_timeout)
        .max_buf_size(options.header_block_size_max.max(H1_BUF_SIZE_MIN));
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(options.h2_keep_alive_interval)
        .keep_alive_timeout(options.h2_keep_alive_timeout)
        .max_concurrent_streams(options.h2_streams_per_connection_max)
        // h2 refuses a list whose size reaches the setting (`>=`): one more accepts a list
        // of exactly `header_block_size_max`, as HTTP/1.1 does.
        .max_header_list_size(
            u32::try_from(options.header_block_size_max.saturating_add(1)).unwrap_or(u32::MAX),
        );
    builder
}

/// [`serve`] with explicit transport limits.
///
/// # Errors
/// As [`serve`].
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let builder = Arc::new(connection_builder(&options));
    let (closing_tx, closing_rx) = watch::channel(false);
    let graceful = GracefulShutdown::new();
    // `Semaphore::new` panics above `MAX_PERMITS`; no machine holds that many connections.
    let connections_max = options.connections_max.min(Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(connections_max));
    let first_bytes_timeout = options.h1_header_read_timeout;
    let stats = options.stats;
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            stats.connection_refused();
            tracing::warn!(%peer, max = connections_max, "too many open connections: closing a new one");
            drop(stream);
            continue;
        };
        // Small request/response exchanges: do not wait to fill a segment.
        let _ = stream.set_nodelay(true);
        let open = stats.open_connection();
        let signal = ShutdownSignal(closing_rx.clone());
        let router = router.clone();
        let service = service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(signal.clone());
            let mut router = router.clone();
            async move { router.call(req).await }
        });
        let builder = Arc::clone(&builder);
        let watcher = graceful.watcher();
        let closing = ShutdownSignal(closing_rx.clone());
        tokio::spawn(async move {
            // hyper's protocol detection waits for the first bytes without a timeout: bound
            // it here, so a connection that never sends anything does not hold its slot.
            let mut first = [0u8; 1];
            let first_bytes = tokio::select! {
                peeked = tokio::time::timeout(first_bytes_timeout, stream.peek(&mut first)) => peeked,
                () = closing.wait() => return,
            };
            if !matches!(first_bytes, Ok(Ok(n)) if n > 0) {
                tracing::debug!(%peer, "connection closed before its first request");
                return;
            }
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(open);
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!("shutting down: no new connections; finishing requests in flight");
    let _ = closing_tx.send(true);
    if tokio::time::timeout(options.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            open = stats.open_connections(),
            grace = ?options.shutdown_grace,
            "connections still open after the shutdown grace period: closing them"
        );
    }
    tracing::info!(stats = %stats, "server stopped");
    Ok(())
}
