//! `POST /v2/watch` (KV Connect v3): a response that never ends on its own, made of frames
//! `u32 little-endian length ++ WatchOutput`. A zero-length frame is a keep-alive, sent as
//! soon as the stream opens and then every [`WATCH_PING_INTERVAL`](crate::limits::WATCH_PING_INTERVAL);
//! each data frame is the current state of every key (`changed = true`, no entry for a
//! missing key): the first at once, each later one after a change of a watched key.
//!
//! The stream owns the engine's watch and a slot of the server's watch-stream count, so a
//! client that goes away frees both once hyper drops the body: at once when an HTTP/2 stream
//! is reset or a connection closes, and over HTTP/1.1 at the latest when the next ping
//! cannot be sent. It ends when the store closes or the server shuts down.
//!
//! A client that keeps an HTTP/1.1 stream open but reads nothing would otherwise keep what
//! the server buffered for it (a state of up to ten 64 KiB values) for ever: a watchdog
//! closes its connection once a frame has stayed untaken for the watch send timeout. Over
//! HTTP/2 the client's flow-control window bounds what is buffered for a stream.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use denokv_proto::datapath as pb;
use prost::Message;
use tokio::time::{Interval, MissedTickBehavior};
use tuplekv_engine::{KeyWatch, Store, WatchUpdate};

use crate::app::{Shared, engine_error};
use crate::conn::ConnHandle;
use crate::error::{ApiError, text};
use crate::limits::REQUEST_BODY_MAX;
use crate::protocol::{decode_watch, encode_entry};
use crate::serve::ShutdownSignal;
use crate::stats::{Endpoint, OpenGuard};

/// The keep-alive frame: a zero length.
const PING_FRAME: [u8; 4] = [0; 4];

/// Everything an open watch stream holds; dropping it frees the watch and the slot.
struct Open<W> {
    /// Whether the first ping (sent before anything else, so a client sees the stream is
    /// alive before the first read) went out.
    pinged: bool,
    watch: W,
    ping: Interval,
    closing: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// When the last frame was handed out and hyper has not asked for the next one since;
    /// read by the watchdog of an HTTP/1.1 stream.
    untaken: Arc<Untaken>,
    _slot: OpenGuard,
}

/// When a frame was handed to hyper that it has not followed by asking for the next: the
/// milliseconds since `start`, plus one; zero while hyper waits for a frame.
struct Untaken {
    start: tokio::time::Instant,
    since_ms: AtomicU64,
}

impl Untaken {
    fn new() -> Self {
        Untaken {
            start: tokio::time::Instant::now(),
            since_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    /// hyper asks for a frame.
    fn asked(&self) {
        self.since_ms.store(0, Ordering::Relaxed);
    }

    /// A frame was handed out.
    fn handed(&self) {
        self.since_ms.store(self.now_ms() + 1, Ordering::Relaxed);
    }

    /// How long the last frame handed out has been waiting for hyper to ask for the next.
    fn waiting(&self) -> Duration {
        match self.since_ms.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            since => Duration::from_millis(self.now_ms().saturating_sub(since - 1)),
        }
    }
}

/// Closes `conn` once a frame of the stream has stayed untaken for `timeout`; ends with the
/// stream (when it holds the last reference to `untaken`).
async fn watchdog(
    untaken: Arc<Untaken>,
    conn: ConnHandle,
    timeout: Duration,
    stats: Arc<crate::ServerStats>,
) {
    let period = (timeout / 4).max(Duration::from_millis(10));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if Arc::strong_count(&untaken) == 1 {
            return;
        }
        if untaken.waiting() > timeout {
            tracing::info!(
                ?timeout,
                "closing an HTTP/1.1 watch stream whose client reads nothing"
            );
            stats.watch_stream_stalled();
            conn.0.close();
            return;
        }
    }
}

pub(crate) async fn watch<S: Store + 'static>(
    State(state): State<Shared<S>>,
    req: Request,
) -> Result<Response, ApiError>
where
    S::Watch: 'static,
{
    state.stats().request(Endpoint::Watch);
    let signal = req.extensions().get::<ShutdownSignal>().cloned();
    // HTTP/1.1 has no flow control of its own: its streams get a watchdog.
    let h1_conn = match req.version() {
        Version::HTTP_2 | Version::HTTP_3 => None,
        _ => req.extensions().get::<ConnHandle>().cloned(),
    };
    let keys = decode_watch(&state.read_body(req.into_body(), REQUEST_BODY_MAX).await?)?;
    let Some(slot) = state
        .stats()
        .try_open_watch(state.config.watch_streams_max())
    else {
        tracing::warn!(
            max = state.config.watch_streams_max(),
            "too many open watch streams"
        );
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            text::TOO_MANY_WATCH_STREAMS,
        ));
    };
    let watch = state.store.watch_raw(keys).map_err(|e| engine_error(&e))?;
    // `interval_at` panics on zero; the configuration never holds one, but stay safe.
    let period = state
        .config
        .watch_ping_interval()
        .max(crate::limits::WATCH_PING_INTERVAL_MIN);
    // The first ping goes out at once (see `next_frame`); the interval gives the later ones.
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let closing: Pin<Box<dyn Future<Output = ()> + Send>> = match signal {
        Some(signal) => Box::pin(signal.wait()),
        None => Box::pin(std::future::pending()),
    };
    let untaken = Arc::new(Untaken::new());
    if let Some(conn) = h1_conn {
        tokio::spawn(watchdog(
            Arc::clone(&untaken),
            conn,
            state.config.watch_send_timeout(),
            Arc::clone(state.stats()),
        ));
    }
    let open = Open {
        pinged: false,
        watch,
        ping,
        closing,
        untaken,
        _slot: slot,
    };
    let frames = futures_util::stream::unfold(open, |mut open| async move {
        open.untaken.asked();
        let frame = next_frame(&mut open).await?;
        open._slot.sent(frame.len());
        open.untaken.handed();
        Some((Ok::<_, Infallible>(frame), open))
    });
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(frames),
    )
        .into_response())
}

/// The next frame to send: a ping when one is due, else the next state with a change;
/// `None` when the stream should end.
async fn next_frame<W: KeyWatch>(open: &mut Open<W>) -> Option<Bytes> {
    if !open.pinged {
        open.pinged = true;
        return Some(Bytes::from_static(&PING_FRAME));
    }
    loop {
        tokio::select! {
            biased;
            () = &mut open.closing => return None,
            _ = open.ping.tick() => return Some(Bytes::from_static(&PING_FRAME)),
            update = open.watch.next() => {
                let update = update?;
                // A watch of no keys has its first (empty) state to send, then nothing.
                if update.changed.is_empty() || update.changed.iter().any(|&c| c) {
                    return Some(encode_frame(&update));
                }
            }
        }
    }
}

/// One length-prefixed `WatchOutput` frame, with every key's current entry.
///
/// Every key is sent as `changed = true`, as denokv does, even when only another key
/// changed: Deno 2.9's client reads an unchanged marker as "no entry" (the conformance case
/// `watch.initial-update-close` shows it), while both clients deduplicate unchanged entries
/// themselves.
fn encode_frame(update: &WatchUpdate) -> Bytes {
    let keys = update
        .entries
        .iter()
        .map(|entry| pb::WatchKeyOutput {
            changed: true,
            entry_if_changed: entry.as_ref().map(encode_entry),
        })
        .collect();
    let message = pb::WatchOutput {
        status: pb::SnapshotReadStatus::SrSuccess.into(),
        keys,
    };
    let len = message.encoded_len();
    let mut frame = Vec::with_capacity(4 + len);
    // A frame is far below 4 GiB: at most 10 entries of a 2 KiB key and a 64 KiB value.
    frame.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
    message.encode_raw(&mut frame);
    Bytes::from(frame)
}
