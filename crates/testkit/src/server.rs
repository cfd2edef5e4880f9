//! The KV Connect test server every crate's tests start: a `tuplekv_server` router over a
//! store, on a free loopback port, stopped gracefully by [`TestServer::stop`] or when dropped.
//!
//! [`TestServer::of`] (or [`TestServer::in_memory`]) gives a [`Setup`] to adjust; it then
//! runs either on the test's own runtime ([`Setup::spawn`], for async tests that drive raw
//! HTTP clients, as the server's tests do) or on a thread and runtime of its own
//! ([`Setup::start`], for blocking clients such as `RemoteStore`, which must not share a
//! runtime with the server they wait on).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tuplekv_engine::{Database, Store};
use tuplekv_server::{ServeOptions, ServerConfig, ServerStats, router, serve_with};

/// The access token every test server accepts unless its configuration says otherwise.
pub const TOKEN: &str = "test-token-0123456789";

/// How many times [`Setup::at`] retries a port still held by the server that had it, 50 ms
/// apart.
const REBIND_TRIES_MAX: u32 = 100;

/// The default configuration: [`TOKEN`], everything else as `ServerConfig::new` has it.
///
/// # Panics
/// Never: the token is long enough.
pub fn config() -> ServerConfig {
    ServerConfig::new(TOKEN).expect("the test token is long enough")
}

/// A rewrite of the router before it serves (a middleware layer, say).
type Layer = Box<dyn FnOnce(axum::Router) -> axum::Router>;
/// A change to the transport options.
type Options = Box<dyn FnOnce(ServeOptions) -> ServeOptions>;

/// A server about to start: its store, configuration, transport options and address.
pub struct Setup<S> {
    store: Arc<S>,
    config: ServerConfig,
    options: Options,
    layer: Layer,
    at: Option<SocketAddr>,
}

/// A running server; dropping it stops it.
pub struct TestServer {
    /// Where it listens (loopback, a free port unless [`Setup::at`] chose one).
    pub addr: SocketAddr,
    /// Its request counters.
    pub stats: Arc<ServerStats>,
    shutdown: Option<oneshot::Sender<()>>,
    running: Option<Running>,
}

/// Where a server runs, to wait for it when it stops.
enum Running {
    /// A task on the test's runtime ([`Setup::spawn`]).
    Task(tokio::task::JoinHandle<std::io::Result<()>>),
    /// A thread with its own runtime ([`Setup::start`]).
    Thread(std::thread::JoinHandle<std::io::Result<()>>),
}

impl TestServer {
    /// A server over `store` with the default [`config`], to adjust and start.
    pub fn of<S: Store + 'static>(store: Arc<S>) -> Setup<S>
    where
        S::Watch: 'static,
    {
        Setup {
            store,
            config: config(),
            options: Box::new(|o| o),
            layer: Box::new(|r| r),
            at: None,
        }
    }

    /// A server over a fresh in-memory database.
    pub fn in_memory() -> Setup<Database> {
        TestServer::of(Arc::new(Database::in_memory()))
    }

    /// Serves `store` with the default configuration on a thread of its own: the
    /// [`Setup::start`] of [`TestServer::of`].
    ///
    /// # Panics
    /// As [`Setup::start`].
    pub fn start<S: Store + 'static>(store: Arc<S>) -> TestServer
    where
        S::Watch: 'static,
    {
        TestServer::of(store).start()
    }

    /// Its URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// An h2c client (HTTP/2 with prior knowledge) on a new connection.
    pub async fn h2(&self) -> crate::kv_connect::Client {
        crate::kv_connect::Client::h2(self.addr).await
    }

    /// An HTTP/1.1 client on a new connection.
    pub async fn h1(&self) -> crate::kv_connect::Client {
        crate::kv_connect::Client::h1(self.addr).await
    }

    /// Shuts the server down gracefully and waits for it to return.
    ///
    /// # Panics
    /// If the server failed or panicked.
    pub async fn stop(mut self) {
        self.send_shutdown();
        match self.running.take() {
            Some(Running::Task(task)) => {
                task.await.expect("the serve task").expect("serve's result");
            }
            Some(Running::Thread(thread)) => {
                tokio::task::spawn_blocking(move || thread.join())
                    .await
                    .expect("the join")
                    .expect("the server thread")
                    .expect("serve's result");
            }
            None => {}
        }
    }

    fn send_shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.send_shutdown();
        // A task stops on its own once told; a thread is waited for, so a test that drops
        // its server and restarts one on the same port finds the port free.
        if let Some(Running::Thread(thread)) = self.running.take() {
            let _ = thread.join();
        }
    }
}

impl<S: Store + 'static> Setup<S>
where
    S::Watch: 'static,
{
    /// The configuration changed by `configure`.
    pub fn config(mut self, configure: impl FnOnce(ServerConfig) -> ServerConfig) -> Self {
        self.config = configure(self.config);
        self
    }

    /// `config` instead of the default one.
    pub fn with_config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// The transport options (from the configuration's) changed by `adjust`.
    pub fn options(mut self, adjust: impl FnOnce(ServeOptions) -> ServeOptions + 'static) -> Self {
        self.options = Box::new(adjust);
        self
    }

    /// Listens on `addr`, the address of a server that was stopped, so its clients find the
    /// new one where they look. Binding is retried for a few seconds in case the port is
    /// briefly still held.
    pub fn at(mut self, addr: SocketAddr) -> Self {
        self.at = Some(addr);
        self
    }

    /// Every `atomic_write` is answered with `status` after the server has handled it
    /// (applied it, if it was valid), as a proxy in front of a server may answer 502 or 504
    /// after forwarding a request: the client cannot know the outcome.
    ///
    /// # Panics
    /// If `status` is not an HTTP status code.
    pub fn answering_writes_with(mut self, status: u16) -> Self {
        let status = axum::http::StatusCode::from_u16(status).expect("a valid status");
        self.layer = Box::new(move |router| {
            router.layer(axum::middleware::map_response(
                move |uri: axum::http::Uri, response: axum::response::Response| async move {
                    if uri.path().ends_with("/atomic_write") {
                        let mut replaced = axum::response::Response::new(axum::body::Body::empty());
                        *replaced.status_mut() = status;
                        replaced
                    } else {
                        response
                    }
                },
            ))
        });
        self
    }

    /// Serves on the test's own runtime.
    ///
    /// # Panics
    /// If no loopback port can be bound.
    pub async fn spawn(self) -> TestServer {
        let at = self.at;
        let (addr, stats, shutdown, serve) = self.prepare(bind(at).await);
        TestServer {
            addr,
            stats,
            shutdown: Some(shutdown),
            running: Some(Running::Task(tokio::spawn(serve))),
        }
    }

    /// Serves on a thread with a runtime of its own (two workers).
    ///
    /// # Panics
    /// If the runtime, the thread or a loopback port cannot be made.
    pub fn start(self) -> TestServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the test server");
        let listener = runtime.block_on(bind(self.at));
        let (addr, stats, shutdown, serve) = self.prepare(listener);
        let thread = std::thread::Builder::new()
            .name("test-server".into())
            .spawn(move || runtime.block_on(serve))
            .expect("the server thread");
        TestServer {
            addr,
            stats,
            shutdown: Some(shutdown),
            running: Some(Running::Thread(thread)),
        }
    }

    /// The server's parts: its address, counters, shutdown switch and serve future.
    fn prepare(
        self,
        listener: TcpListener,
    ) -> (
        SocketAddr,
        Arc<ServerStats>,
        oneshot::Sender<()>,
        impl Future<Output = std::io::Result<()>> + Send + 'static,
    ) {
        let addr = listener.local_addr().expect("the bound address");
        let stats = Arc::clone(self.config.stats());
        let options = (self.options)(self.config.serve_options());
        let app = (self.layer)(router(self.store, self.config));
        let (shutdown, stopped) = oneshot::channel::<()>();
        let serve = serve_with(listener, app, options, async move {
            let _ = stopped.await;
        });
        (addr, stats, shutdown, serve)
    }
}

/// A listener on `at`, or on a free loopback port.
async fn bind(at: Option<SocketAddr>) -> TcpListener {
    let Some(addr) = at else {
        return TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free loopback port");
    };
    let mut tries = 0;
    loop {
        match TcpListener::bind(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < REBIND_TRIES_MAX => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other.expect("the stopped server's port"),
        }
    }
}
