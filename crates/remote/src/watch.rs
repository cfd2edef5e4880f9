//! [`RemoteWatch`]: a KV Connect watch stream, reopened after a network fault.

use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use denokv_proto::datapath as pb;
use http_body_util::BodyExt;
use prost::Message;
use tuplekv_engine::{Entry, Error, KeyBytes, KeyWatch, Versionstamp, WatchUpdate};

use crate::transport::{Transport, versionstamp};

/// Longest silence on a watch stream before it is taken for dead and reopened: the server
/// pings every 5 s by default.
pub const WATCH_SILENCE_MAX: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Shared {
    latest: Option<Vec<Option<Entry>>>,
    /// What the last yielded update held, to compute `changed`.
    yielded: Option<Vec<Option<Entry>>>,
    fresh: bool,
    closed: bool,
    waker: Option<Waker>,
}

/// A watch of keys of a [`RemoteStore`](crate::RemoteStore): the current entries, then the
/// latest state after each change (a slow reader gets the latest, never a backlog). The stream
/// is reopened after a network fault or a server restart; ends (`None`) only when the server
/// refuses the watch. A watch keeps the store's connection (and runtime) alive: it outlives
/// the [`RemoteStore`](crate::RemoteStore) it came from.
pub struct RemoteWatch {
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::AbortHandle,
    /// Keeps the runtime the watch's task runs on.
    _store: crate::RemoteStore,
}

impl Drop for RemoteWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for RemoteWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteWatch").finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl KeyWatch for RemoteWatch {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<WatchUpdate>> {
        let mut s = lock(&self.shared);
        if s.fresh {
            s.fresh = false;
            let entries = s.latest.clone().unwrap_or_default();
            let changed: Vec<bool> = match &s.yielded {
                None => vec![true; entries.len()],
                Some(prev) => entries
                    .iter()
                    .zip(prev)
                    .map(|(a, b)| {
                        a.as_ref().map(|e| e.versionstamp) != b.as_ref().map(|e| e.versionstamp)
                    })
                    .collect(),
            };
            // A reopened stream starts with the whole state again: not a change.
            if s.yielded.is_some() && !changed.contains(&true) {
                if s.closed {
                    return Poll::Ready(None);
                }
                s.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            s.yielded = Some(entries.clone());
            let versionstamp = entries
                .iter()
                .flatten()
                .map(|e| e.versionstamp)
                .max()
                .unwrap_or(Versionstamp::ZERO);
            return Poll::Ready(Some(WatchUpdate {
                entries,
                changed,
                versionstamp,
            }));
        }
        if s.closed {
            return Poll::Ready(None);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl RemoteWatch {
    /// The next state, waiting on this thread (see [`KeyWatch::next`] for async callers).
    /// `None` once the watch has ended.
    pub fn next_blocking(&mut self) -> Option<WatchUpdate> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let waker = Waker::from(Arc::new(ChannelWaker(Mutex::new(tx))));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(update) = self.poll_next(&mut cx) {
                return update;
            }
            if rx.recv().is_err() {
                return None;
            }
        }
    }

    pub(crate) fn start(store: &crate::RemoteStore, keys: Vec<KeyBytes>) -> Self {
        let transport = Arc::clone(&store.inner.transport);
        let shared = Arc::new(Mutex::new(Shared::default()));
        let body = Bytes::from(
            pb::Watch {
                keys: keys
                    .iter()
                    .map(|k| pb::WatchKey { key: k.to_vec() })
                    .collect(),
            }
            .encode_to_vec(),
        );
        let task = store
            .inner
            .tasks
            .spawn(run(transport, body, keys.len(), Arc::clone(&shared)));
        RemoteWatch {
            shared,
            task,
            _store: store.clone(),
        }
    }
}

struct ChannelWaker(Mutex<std::sync::mpsc::SyncSender<()>>);

impl std::task::Wake for ChannelWaker {
    fn wake(self: Arc<Self>) {
        let _ = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_send(());
    }
}

fn publish(shared: &Mutex<Shared>, entries: Vec<Option<Entry>>) {
    let waker = {
        let mut s = lock(shared);
        s.latest = Some(entries);
        s.fresh = true;
        s.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}

fn close(shared: &Mutex<Shared>) {
    let waker = {
        let mut s = lock(shared);
        s.closed = true;
        s.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}

/// Opens the stream and reads it; reopens it after faults, until refused.
async fn run(transport: Arc<Transport>, body: Bytes, keys: usize, shared: Arc<Mutex<Shared>>) {
    let mut backoff = Duration::from_millis(10);
    loop {
        match stream(&transport, body.clone(), keys, &shared).await {
            Err(Error::Remote { status, message })
                if (400..500).contains(&status) && status != 401 =>
            {
                tracing::warn!(status, %message, "the server refused a watch");
                close(&shared);
                return;
            }
            Err(e) => tracing::debug!(error = %e, "watch stream interrupted; reopening"),
            Ok(()) => tracing::debug!("watch stream ended; reopening"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

async fn stream(
    transport: &Transport,
    body: Bytes,
    keys: usize,
    shared: &Mutex<Shared>,
) -> Result<(), Error> {
    let resp = transport.open_stream("watch", body).await?;
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    // Entries as the stream has told them (a frame lists only what changed).
    let mut current: Vec<Option<Entry>> = vec![None; keys];
    loop {
        let frame = tokio::time::timeout(WATCH_SILENCE_MAX, body.frame())
            .await
            .map_err(|_| Error::unavailable("the watch stream went silent"))?;
        let Some(frame) = frame else {
            return Ok(());
        };
        let frame = frame.map_err(|e| Error::unavailable(e.to_string()).with_source(e))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while buf.len() >= 4 {
            let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() < 4 + len {
                break;
            }
            buf.advance(4);
            let msg = buf.split_to(len);
            if len == 0 {
                continue; // a keep-alive
            }
            let out = pb::WatchOutput::decode(&msg[..]).map_err(|e| Error::Remote {
                status: 200,
                message: format!("a malformed watch frame: {e}"),
            })?;
            for (slot, k) in current.iter_mut().zip(out.keys) {
                if !k.changed {
                    continue;
                }
                *slot = match k.entry_if_changed {
                    None => None,
                    Some(e) => Some(Entry {
                        key: KeyBytes::from(e.key),
                        value: tuplekv_wire::decode_value(e.encoding, e.value).map_err(|e| {
                            Error::Remote {
                                status: 200,
                                message: e.to_string(),
                            }
                        })?,
                        versionstamp: versionstamp(&e.versionstamp)?,
                        expires_at: None,
                    }),
                };
            }
            publish(shared, current.clone());
        }
    }
}
