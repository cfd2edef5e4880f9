//! The open connections: what each has shown (the access token or not), a way to close one
//! from outside its task, and the choice of which to close when a new connection needs a
//! slot. `serve` registers every connection here and puts its [`ConnHandle`] in each of its
//! requests' extensions; a router served some other way sees none and skips what needs one.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// What one connection's requests share.
#[derive(Debug, Default)]
pub(crate) struct ConnState {
    /// Whether a request on it carried the valid access token.
    authenticated: AtomicBool,
    /// Set once the connection was told to close (so it is not chosen twice).
    closing: AtomicBool,
    /// Wakes the connection's task to close it.
    close: Notify,
}

impl ConnState {
    /// Records that a request on this connection carried the valid token.
    pub(crate) fn authenticate(&self) {
        self.authenticated.store(true, Ordering::Relaxed);
    }

    /// Whether a request on this connection carried the valid token.
    pub(crate) fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Relaxed)
    }

    /// Tells the connection's task to drop the connection (its socket is closed, its
    /// requests in flight end). Idempotent.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
        // `notify_one` keeps the wake-up for a task that is not waiting yet.
        self.close.notify_one();
    }

    /// Resolves once [`ConnState::close`] was called.
    pub(crate) async fn closed(&self) {
        self.close.notified().await;
    }
}

/// A connection's state, as its requests find it in their extensions.
#[derive(Debug, Clone)]
pub(crate) struct ConnHandle(pub(crate) Arc<ConnState>);

/// The address of a request's peer, as `serve` puts it in each request's extensions (for
/// log lines about the request).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub(crate) std::net::SocketAddr);

/// Every open connection, by id.
#[derive(Debug, Default)]
pub(crate) struct Connections {
    open: Mutex<HashMap<u64, (Instant, Arc<ConnState>)>>,
    next_id: AtomicU64,
}

/// Removes a connection from [`Connections`] when dropped.
#[derive(Debug)]
pub(crate) struct Registered {
    connections: Arc<Connections>,
    id: u64,
    pub(crate) state: Arc<ConnState>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.connections.lock().remove(&self.id);
    }
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Instant, Arc<ConnState>)>> {
        // The map stays consistent whatever panicked while holding it (one insert or remove).
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a new connection; it stays listed until the guard is dropped.
    pub(crate) fn register(self: &Arc<Self>) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::default());
        self.lock().insert(id, (Instant::now(), Arc::clone(&state)));
        Registered {
            connections: Arc::clone(self),
            id,
            state,
        }
    }

    /// Closes the oldest connection that has not shown the access token and is not closing
    /// already; whether there was one.
    pub(crate) fn close_oldest_unauthenticated(&self) -> bool {
        let open = self.lock();
        let victim = open
            .values()
            .filter(|(_, s)| !s.is_authenticated() && !s.closing.load(Ordering::Relaxed))
            .min_by_key(|(opened, _)| *opened);
        match victim {
            Some((_, state)) => {
                state.close();
                true
            }
            None => false,
        }
    }
}

/// A TCP connection that acknowledges what it receives at once (Linux's `TCP_QUICKACK`,
/// re-armed after every read that returns data, because the kernel drops back to delayed
/// acknowledgements on its own).
///
/// Why: a client with Nagle's algorithm on (Deno's, for one) sends a request's last segment
/// only once its first is acknowledged; a server that acknowledges late (Linux delays up to
/// 40 ms when it has nothing to send back yet) then adds that delay to every request longer
/// than one write. Elsewhere than Linux this is a plain `TcpStream`: macOS and the BSDs
/// have no per-socket switch (their delayed acknowledgement is a system setting).
#[derive(Debug)]
pub(crate) struct QuickAck(pub(crate) TcpStream);

impl QuickAck {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn rearm(&self) {
        // Best effort: a socket that refuses the option still works, only slower.
        let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn rearm(&self) {}
}

impl AsyncRead for QuickAck {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.0).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.rearm();
        }
        polled
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_connection_without_the_token_is_closed_first_and_only_once() {
        let connections = Arc::new(Connections::default());
        let a = connections.register();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = connections.register();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let c = connections.register();
        a.state.authenticate();
        assert!(connections.close_oldest_unauthenticated());
        assert!(
            b.state.closing.load(Ordering::Relaxed),
            "b is the oldest without the token"
        );
        assert!(!c.state.closing.load(Ordering::Relaxed));
        assert!(connections.close_oldest_unauthenticated());
        assert!(c.state.closing.load(Ordering::Relaxed));
        assert!(
            !connections.close_oldest_unauthenticated(),
            "a showed the token: nothing left to close"
        );
        assert!(!a.state.closing.load(Ordering::Relaxed));
        drop((b, c));
        assert_eq!(
            connections.lock().len(),
            1,
            "dropped connections are unlisted"
        );
    }
}
