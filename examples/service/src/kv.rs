//! An in-process `tuplekv serve`: the KV Connect server that the remote runs of the test and
//! the benchmark share, on a loopback port and a runtime of its own, stopped abruptly (every
//! connection dropped, the port closed) like a killed server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tuplekv_engine::Database;
use tuplekv_server::{CommitMode, ServerConfig};

/// The access token of [`KvServer`].
pub const TOKEN: &str = "example-service-token";

/// A KV Connect server over a [`Database`], on `127.0.0.1`.
#[derive(Debug)]
pub struct KvServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KvServer {
    /// Serves `db` on `127.0.0.1:port` (0: a free port) with [`TOKEN`].
    ///
    /// # Errors
    /// If the runtime cannot start or the port cannot be bound.
    pub fn start(db: Database, port: u16) -> std::io::Result<KvServer> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("example-kv-server")
            .enable_all()
            .build()?;
        // Bound here (std), handed to tokio on the server's thread: this may be called from
        // inside another runtime, where `block_on` is not allowed.
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let config = ServerConfig::new(TOKEN)
            .map_err(std::io::Error::other)?
            // An in-memory database's commit never waits: run it on the request's task.
            .with_commit_mode(CommitMode::Inline);
        let options = config.serve_options();
        let router = tuplekv_server::router(Arc::new(db), config);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("example-kv-server".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let serve = tuplekv_server::serve_with(
                        listener,
                        router,
                        options,
                        std::future::pending::<()>(),
                    );
                    tokio::select! {
                        _ = serve => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime drops the listener and every connection's task.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        Ok(KvServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops it at once: connections are dropped mid-request, new ones refused.
    pub fn kill(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for KvServer {
    fn drop(&mut self) {
        self.shut_down();
    }
}
