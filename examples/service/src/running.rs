//! A service instance on a runtime of its own, as a separate process would run it.

use std::net::SocketAddr;
use std::time::Duration;

use crate::{App, ServiceStore};

/// A service serving on a loopback port from its own thread and tokio runtime; stopped by
/// [`RunningService::stop`] or when dropped.
#[derive(Debug)]
pub struct RunningService {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunningService {
    /// Serves `app` on `addr` (port 0: a free one) with a runtime of `worker_threads`
    /// workers (the blocking pool is tokio's default).
    ///
    /// # Errors
    /// If the runtime cannot start or the address cannot be bound.
    pub fn start<S: ServiceStore>(
        app: App<S>,
        addr: SocketAddr,
        worker_threads: usize,
    ) -> std::io::Result<RunningService> {
        Self::start_opening(async move { Ok(app) }, addr, worker_threads)
    }

    /// [`RunningService::start`] with the app opened on the service's own runtime by `open`:
    /// for a [`RemoteStore`](tuplekv_remote::RemoteStore) made with `connect_async`, whose
    /// connection then runs on the service's workers, as it would in a service's `main`.
    ///
    /// # Errors
    /// If the runtime cannot start, the address cannot be bound, or `open` fails.
    pub fn start_opening<S, F>(
        open: F,
        addr: SocketAddr,
        worker_threads: usize,
    ) -> std::io::Result<RunningService>
    where
        S: ServiceStore,
        F: std::future::Future<Output = Result<App<S>, String>> + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(worker_threads.max(1))
            .thread_name("example-service")
            .enable_all()
            .build()?;
        // Bound here (std), handed to tokio on the service's thread: this may be called from
        // inside another runtime, where `block_on` is not allowed.
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (opened_tx, opened) = std::sync::mpsc::channel::<Result<(), String>>();
        let thread = std::thread::Builder::new()
            .name("example-service".into())
            .spawn(move || {
                let shutdown = async move {
                    let _ = stopped.await;
                };
                let served = runtime.block_on(async move {
                    let app = match open.await {
                        Ok(app) => {
                            let _ = opened_tx.send(Ok(()));
                            app
                        }
                        Err(e) => {
                            let _ = opened_tx.send(Err(e));
                            return Ok(());
                        }
                    };
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    crate::serve(app, listener, shutdown).await
                });
                if let Err(e) = served {
                    eprintln!("example service stopped: {e}");
                }
                // Blocking tasks still waiting on an unreachable store are left to finish.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        match opened.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(std::io::Error::other(e));
            }
            Err(_) => {
                let _ = thread.join();
                return Err(std::io::Error::other(
                    "the service thread stopped while opening",
                ));
            }
        }
        Ok(RunningService {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it serves on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, waits for the requests in flight, and stops the runtime.
    pub fn stop(mut self) {
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

impl Drop for RunningService {
    fn drop(&mut self) {
        self.shut_down();
    }
}
