//! The accept loop: HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port, or both
//! inside TLS (ALPN `h2` and `http/1.1`); bounded connections, handshakes, streams and
//! header blocks, and graceful shutdown.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower_service::Service;

use crate::conn::{ConnHandle, Connections, PeerAddr, QuickAck};
use crate::limits::{
    CONNECTION_SLOT_WAIT_MAX, CONNECTIONS_MAX, H1_HEADER_READ_TIMEOUT, H2_KEEP_ALIVE_INTERVAL,
    H2_KEEP_ALIVE_TIMEOUT, H2_STREAM_WINDOW, H2_STREAMS_PER_CONNECTION_MAX, HEADER_BLOCK_SIZE_MAX,
    REFUSED_CONNECTION_LOG_INTERVAL, SHUTDOWN_GRACE_MAX, TLS_HANDSHAKE_TIMEOUT,
};
use crate::stats::ServerStats;
use crate::tls::{OverTls, Stream, Tls};

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
    /// Each HTTP/2 stream's receive window, in bytes; the connection's window is this times
    /// `h2_streams_per_connection_max` (see [`H2_STREAM_WINDOW`]).
    pub h2_stream_window: u32,
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
    /// Serve over TLS with this certificate (`None`, the default: plain HTTP/1.1 and h2c).
    /// Each new connection takes the configuration in use when it is accepted, so a
    /// [`Tls::reload`] through a clone reaches the connections that come after it.
    pub tls: Option<Tls>,
    /// How long a TLS handshake may take once the client's first bytes came (see
    /// [`TLS_HANDSHAKE_TIMEOUT`]); past it the connection is closed.
    pub tls_handshake_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            connections_max: CONNECTIONS_MAX,
            h2_streams_per_connection_max: H2_STREAMS_PER_CONNECTION_MAX,
            h2_stream_window: H2_STREAM_WINDOW,
            header_block_size_max: HEADER_BLOCK_SIZE_MAX,
            stats: Arc::default(),
            shutdown_grace: SHUTDOWN_GRACE_MAX,
            h1_header_read_timeout: H1_HEADER_READ_TIMEOUT,
            h2_keep_alive_interval: H2_KEEP_ALIVE_INTERVAL,
            h2_keep_alive_timeout: H2_KEEP_ALIVE_TIMEOUT,
            tls: None,
            tls_handshake_timeout: TLS_HANDSHAKE_TIMEOUT,
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
    let (stream_window, connection_window) = h2_windows(options);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.h1_header_read_timeout)
        .max_buf_size(options.header_block_size_max.max(H1_BUF_SIZE_MIN))
        // Copy response chunks into one write buffer of at most `max_buf_size` (plus the
        // chunk that crosses it) rather than queue up to 16 of them: hyper then stops
        // taking a response body's chunks as soon as a client stops reading, which is how
        // a watch stream's watchdog sees it.
        .writev(false);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(options.h2_keep_alive_interval)
        .keep_alive_timeout(options.h2_keep_alive_timeout)
        .max_concurrent_streams(options.h2_streams_per_connection_max)
        // Every stream's window fits in the connection's, so streams whose bodies nobody
        // reads yet (waiting for a body slot) can never use up the window a stream being
        // read needs: flow control stops a stream, never the connection. No adaptive
        // window, which would grow the streams' windows past that.
        .initial_stream_window_size(stream_window)
        .initial_connection_window_size(connection_window)
        .adaptive_window(false)
        // h2 refuses a list whose size reaches the setting (`>=`): one more accepts a list
        // of exactly `header_block_size_max`, as HTTP/1.1 does.
        .max_header_list_size(
            u32::try_from(options.header_block_size_max.saturating_add(1)).unwrap_or(u32::MAX),
        );
    builder
}

/// The HTTP/2 stream and connection windows: the connection's holds every stream's. Both
/// stay within HTTP/2's largest window (2^31 - 1), and a stream window of zero (which would
/// stop every body) is raised to HTTP/2's initial 65 535.
fn h2_windows(options: &ServeOptions) -> (u32, u32) {
    const WINDOW_MAX: u32 = (1 << 31) - 1;
    const WINDOW_DEFAULT: u32 = 65_535;
    let streams = options.h2_streams_per_connection_max.max(1);
    let stream = match options.h2_stream_window {
        0 => WINDOW_DEFAULT,
        w => w.min(WINDOW_MAX),
    };
    let connection = stream.saturating_mul(streams).min(WINDOW_MAX);
    (stream, connection.max(WINDOW_DEFAULT))
}

/// Logs refused connections at most once per [`REFUSED_CONNECTION_LOG_INTERVAL`], with how
/// many were refused since the last line: a burst of refusals is one line, not one each.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl RefusalLog {
    /// Counts a refusal; whether it was logged.
    fn refused(&mut self, peer: std::net::SocketAddr, max: usize) -> bool {
        self.unlogged += 1;
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < REFUSED_CONNECTION_LOG_INTERVAL)
        {
            return false;
        }
        tracing::warn!(
            %peer,
            max,
            refused = self.unlogged,
            since_last_line = ?self.last.map(|l| now.duration_since(l)),
            "too many open connections, each of which has shown the access token: closing new ones"
        );
        self.last = Some(now);
        self.unlogged = 0;
        true
    }
}

/// Gives a new connection a slot of `permits`: at once when one is free and no connection
/// that made room is still waiting for its slot; else by closing the oldest connection that
/// has not shown the token, whose slot it then waits for (`Ok(None)`). `Err` when neither
/// is possible: every open connection showed the token.
fn connection_slot(
    permits: &Arc<Semaphore>,
    connections: &Connections,
    waiting: &AtomicUsize,
) -> Result<Option<OwnedSemaphorePermit>, ()> {
    // A slot freed for a waiting connection is its, not a newcomer's.
    if waiting.load(Ordering::Acquire) == 0
        && let Ok(permit) = Arc::clone(permits).try_acquire_owned()
    {
        return Ok(Some(permit));
    }
    if connections.close_oldest_unauthenticated() {
        return Ok(None);
    }
    Arc::clone(permits)
        .try_acquire_owned()
        .map(Some)
        .map_err(|_| ())
}

/// The slot of `permits` that a closed connection frees, waited for at most `wait`.
async fn freed_slot(permits: Arc<Semaphore>, wait: Duration) -> Option<OwnedSemaphorePermit> {
    tokio::time::timeout(wait, permits.acquire_owned())
        .await
        .ok()?
        .ok()
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
    let connections = Arc::new(Connections::default());
    // New connections waiting for the slot of one closed to make room for them.
    let waiting = Arc::new(AtomicUsize::new(0));
    let mut refusals = RefusalLog::default();
    let first_bytes_timeout = options.h1_header_read_timeout;
    let handshake_timeout = options.tls_handshake_timeout;
    let tls = options.tls;
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
        let Ok(permit) = connection_slot(&permits, &connections, &waiting) else {
            stats.connection_refused();
            refusals.refused(peer, connections_max);
            drop(stream);
            continue;
        };
        if permit.is_none() {
            waiting.fetch_add(1, Ordering::AcqRel);
        }
        // Small request/response exchanges: do not wait to fill a segment.
        let _ = stream.set_nodelay(true);
        let registered = connections.register();
        let conn = ConnHandle(Arc::clone(&registered.state));
        let signal = ShutdownSignal(closing_rx.clone());
        let router = router.clone();
        // The configuration in use now: a reload reaches the connections after it.
        let acceptor = tls.as_ref().map(Tls::acceptor);
        let over_tls = acceptor.is_some();
        let service = service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(signal.clone());
            req.extensions_mut().insert(conn.clone());
            req.extensions_mut().insert(PeerAddr(peer));
            if over_tls {
                req.extensions_mut().insert(OverTls);
            }
            let mut router = router.clone();
            async move { router.call(req).await }
        });
        let builder = Arc::clone(&builder);
        let watcher = graceful.watcher();
        let closing = ShutdownSignal(closing_rx.clone());
        let permits = Arc::clone(&permits);
        let waiting = Arc::clone(&waiting);
        let stats = Arc::clone(&stats);
        tokio::spawn(async move {
            let state = Arc::clone(&registered.state);
            let permit = match permit {
                Some(permit) => permit,
                None => {
                    let freed = freed_slot(permits, CONNECTION_SLOT_WAIT_MAX).await;
                    waiting.fetch_sub(1, Ordering::AcqRel);
                    let Some(permit) = freed else {
                        stats.connection_refused();
                        tracing::debug!(%peer, "no connection slot freed in time: closing a new connection");
                        return;
                    };
                    permit
                }
            };
            let open = stats.open_connection();
            // hyper's protocol detection waits for the first bytes without a timeout: bound
            // it here, so a connection that never sends anything does not hold its slot.
            let mut first = [0u8; 1];
            let first_bytes = tokio::select! {
                peeked = tokio::time::timeout(first_bytes_timeout, stream.peek(&mut first)) => peeked,
                () = closing.clone().wait() => return,
                () = state.closed() => {
                    tracing::debug!(%peer, "closing a connection that sent nothing, to make room");
                    return;
                }
            };
            if !matches!(first_bytes, Ok(Ok(n)) if n > 0) {
                tracing::debug!(%peer, "connection closed before its first request");
                return;
            }
            let stream = match acceptor {
                None => Stream::Plain(QuickAck(stream)),
                Some(acceptor) => {
                    // Bounded too: a client that starts a handshake and stops mid-way
                    // must not hold its slot.
                    let handshake = acceptor.accept(QuickAck(stream));
                    let shaken = tokio::select! {
                        shaken = tokio::time::timeout(handshake_timeout, handshake) => shaken,
                        () = closing.wait() => return,
                        () = state.closed() => {
                            tracing::debug!(%peer, "closing a connection in its TLS handshake, to make room");
                            return;
                        }
                    };
                    match shaken {
                        Ok(Ok(tls)) => {
                            let session = tls.get_ref().1;
                            tracing::debug!(
                                %peer,
                                alpn = %session.alpn_protocol().map(String::from_utf8_lossy).unwrap_or_default(),
                                version = ?session.protocol_version(),
                                "TLS handshake done"
                            );
                            Stream::Tls(Box::new(tls))
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, timeout = ?handshake_timeout, "TLS handshake not finished in time: closing");
                            return;
                        }
                    }
                }
            };
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            tokio::select! {
                served = watcher.watch(conn) => if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                },
                () = state.closed() => tracing::debug!(%peer, "connection closed by the server"),
            }
            drop(open);
            drop(permit);
            drop(registered);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_refused_connections_is_one_log_line() {
        let peer = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
        let mut log = RefusalLog::default();
        assert!(log.refused(peer, 1), "the first refusal is logged");
        let logged = (0..1000).filter(|_| log.refused(peer, 1)).count();
        assert_eq!(logged, 0, "the next ones wait for the interval");
        assert_eq!(log.unlogged, 1000, "and are counted for the next line");
        log.last = log
            .last
            .and_then(|l| l.checked_sub(REFUSED_CONNECTION_LOG_INTERVAL));
        assert!(
            log.refused(peer, 1),
            "a refusal the interval after the last line is logged"
        );
        assert_eq!(log.unlogged, 0, "with the count it reports");
    }

    #[tokio::test]
    async fn a_new_connection_takes_a_slot_freed_within_the_wait_and_none_past_it() {
        let permits = Arc::new(Semaphore::new(1));
        let held = Arc::clone(&permits)
            .try_acquire_owned()
            .expect("the one slot");
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(held);
        });
        assert!(
            freed_slot(Arc::clone(&permits), Duration::from_secs(10))
                .await
                .is_some(),
            "a slot freed within the wait is taken"
        );
        release.await.expect("join");
        let _taken = Arc::clone(&permits)
            .try_acquire_owned()
            .expect("free again");
        let started = Instant::now();
        assert!(
            freed_slot(Arc::clone(&permits), Duration::from_millis(100))
                .await
                .is_none(),
            "no slot freed: refused"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "after the wait"
        );
    }

    #[test]
    fn every_h2_stream_window_fits_in_the_connection_window() {
        let default = ServeOptions::default();
        let (stream, connection) = h2_windows(&default);
        assert_eq!(stream, H2_STREAM_WINDOW);
        assert_eq!(connection, H2_STREAM_WINDOW * H2_STREAMS_PER_CONNECTION_MAX);
        let huge = ServeOptions {
            h2_streams_per_connection_max: u32::MAX,
            h2_stream_window: u32::MAX,
            ..ServeOptions::default()
        };
        assert_eq!(h2_windows(&huge), ((1 << 31) - 1, (1 << 31) - 1));
        let zero = ServeOptions {
            h2_streams_per_connection_max: 0,
            h2_stream_window: 0,
            ..ServeOptions::default()
        };
        assert_eq!(h2_windows(&zero), (65_535, 65_535));
    }
}
