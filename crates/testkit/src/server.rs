//! A KV Connect server in this process, on a loopback port, for tests of remote clients:
//! started on its own thread and runtime, stopped (gracefully) when dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use tuplekv_engine::Store;
use tuplekv_server::{CommitMode, ServerConfig};

/// The access token every [`TestServer`] accepts.
pub const TEST_TOKEN: &str = "tuplekv-test-token";

/// A running server over a store; dropping it stops the server and waits for its thread.
pub struct TestServer {
    addr: SocketAddr,
    stats: Arc<tuplekv_server::ServerStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Serves `store` on `127.0.0.1` on a free port, with [`TEST_TOKEN`].
    ///
    /// # Panics
    /// If the runtime or the listener cannot be made (a test cannot go on then).
    pub fn start<S: Store + 'static>(store: Arc<S>) -> TestServer
    where
        S::Watch: 'static,
    {
        TestServer::start_with(store, |c| c)
    }

    /// [`TestServer::start`] with a configuration tweaked by `configure`.
    ///
    /// # Panics
    /// As [`TestServer::start`].
    pub fn start_with<S: Store + 'static>(
        store: Arc<S>,
        configure: impl FnOnce(ServerConfig) -> ServerConfig,
    ) -> TestServer
    where
        S::Watch: 'static,
    {
        TestServer::start_at(store, None, configure)
    }

    /// [`TestServer::start_with`] on `addr`, the address of a server that was stopped (to
    /// restart it where its clients look). Binding is retried for a few seconds, in case the
    /// port is briefly still held.
    ///
    /// # Panics
    /// As [`TestServer::start`], or if the port stays taken.
    pub fn start_on<S: Store + 'static>(
        store: Arc<S>,
        addr: SocketAddr,
        configure: impl FnOnce(ServerConfig) -> ServerConfig,
    ) -> TestServer
    where
        S::Watch: 'static,
    {
        TestServer::start_at(store, Some(addr), configure)
    }

    /// [`TestServer::start`], but every `atomic_write` is answered with `status` after the
    /// server has handled it (applied it, if it was valid), as a proxy in front of a server
    /// may answer 502 or 504 after forwarding a request: the client cannot know the outcome.
    ///
    /// # Panics
    /// As [`TestServer::start`].
    pub fn start_answering_writes_with<S: Store + 'static>(store: Arc<S>, status: u16) -> TestServer
    where
        S::Watch: 'static,
    {
        let status = axum::http::StatusCode::from_u16(status).expect("a valid status");
        TestServer::start_layered(
            store,
            None,
            |c| c,
            move |router| {
                router.layer(axum::middleware::map_response(
                    move |uri: axum::http::Uri, response: axum::response::Response| async move {
                        if uri.path().ends_with("/atomic_write") {
                            let mut replaced =
                                axum::response::Response::new(axum::body::Body::empty());
                            *replaced.status_mut() = status;
                            replaced
                        } else {
                            response
                        }
                    },
                ))
            },
        )
    }

    fn start_at<S: Store + 'static>(
        store: Arc<S>,
        at: Option<SocketAddr>,
        configure: impl FnOnce(ServerConfig) -> ServerConfig,
    ) -> TestServer
    where
        S::Watch: 'static,
    {
        TestServer::start_layered(store, at, configure, |r| r)
    }

    fn start_layered<S: Store + 'static>(
        store: Arc<S>,
        at: Option<SocketAddr>,
        configure: impl FnOnce(ServerConfig) -> ServerConfig,
        layer: impl FnOnce(axum::Router) -> axum::Router,
    ) -> TestServer
    where
        S::Watch: 'static,
    {
        let config = configure(
            ServerConfig::new(TEST_TOKEN)
                .expect("the test token is long enough")
                .with_commit_mode(CommitMode::BlockingPool),
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the test server");
        let listener = runtime.block_on(async {
            let Some(addr) = at else {
                return tokio::net::TcpListener::bind("127.0.0.1:0").await;
            };
            let mut tries = 0;
            loop {
                match tokio::net::TcpListener::bind(addr).await {
                    Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 100 => {
                        tries += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                    other => return other,
                }
            }
        });
        let listener = listener.expect("a loopback port");
        let addr = listener.local_addr().expect("the port");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let options = config.serve_options();
        let stats = Arc::clone(config.stats());
        let router = layer(tuplekv_server::router(store, config));
        let thread = std::thread::Builder::new()
            .name("test-server".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let shutdown = async move {
                        let _ = stopped.await;
                    };
                    let _ = tuplekv_server::serve_with(listener, router, options, shutdown).await;
                });
            })
            .expect("the server thread");
        TestServer {
            addr,
            stats,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its request counters.
    pub fn stats(&self) -> &Arc<tuplekv_server::ServerStats> {
        &self.stats
    }

    /// Its URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
