//! [`EtcdWatch`]: a watch of keys of an [`EtcdStore`], by polling.
//!
//! A background task reads the watched keys at one revision every
//! [`WATCH_POLL_INTERVAL`] and hands over a new state when a versionstamp differs. Polling
//! is the simple first cut: etcd's own watch stream would wake it without the reads.

use std::task::{Context, Poll};
use std::time::Duration;

use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse};
use tokio::sync::mpsc;
use tuplekv_engine::{Entry, KeyBytes, KeyWatch, Versionstamp, WatchUpdate};

use crate::{EtcdStore, envelope, now_ms};

/// How often a watch reads its keys.
pub const WATCH_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A watch of up to `WATCH_KEYS_MAX` keys of an [`EtcdStore`]: the current entries at once,
/// then a new state after a watched key changed. It keeps the store's runtime alive, and
/// stops reading when dropped.
pub struct EtcdWatch {
    updates: mpsc::Receiver<WatchUpdate>,
    task: tokio::task::AbortHandle,
    _store: EtcdStore,
}

impl std::fmt::Debug for EtcdWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdWatch").finish_non_exhaustive()
    }
}

impl Drop for EtcdWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KeyWatch for EtcdWatch {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<WatchUpdate>> {
        self.updates.poll_recv(cx)
    }
}

impl EtcdWatch {
    pub(crate) fn start(store: &EtcdStore, keys: Vec<KeyBytes>) -> EtcdWatch {
        let (tx, updates) = mpsc::channel(1);
        let task = store.spawn(poll(store.clone(), keys, tx));
        EtcdWatch {
            updates,
            task,
            _store: store.clone(),
        }
    }
}

/// Reads `keys` until the watch is dropped, sending each state whose stamps differ from the
/// last sent.
async fn poll(store: EtcdStore, keys: Vec<KeyBytes>, tx: mpsc::Sender<WatchUpdate>) {
    let mut last: Option<Vec<Option<Versionstamp>>> = None;
    loop {
        if let Ok((entries, revision)) = read(&store, &keys).await {
            let stamps: Vec<Option<Versionstamp>> = entries
                .iter()
                .map(|e| e.as_ref().map(|e| e.versionstamp))
                .collect();
            if last.as_ref() != Some(&stamps) {
                let changed = match &last {
                    None => vec![true; stamps.len()],
                    Some(prev) => stamps.iter().zip(prev).map(|(a, b)| a != b).collect(),
                };
                let update = WatchUpdate {
                    entries,
                    changed,
                    versionstamp: Versionstamp::from_version(u64::try_from(revision).unwrap_or(0)),
                };
                if tx.send(update).await.is_err() {
                    return;
                }
                last = Some(stamps);
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(WATCH_POLL_INTERVAL).await;
    }
}

/// The entries of `keys` at one revision, and the revision.
async fn read(
    store: &EtcdStore,
    keys: &[KeyBytes],
) -> Result<(Vec<Option<Entry>>, i64), etcd_client::Error> {
    let space = store.space();
    let gets: Vec<TxnOp> = keys
        .iter()
        .map(|k| TxnOp::get(space.data(k), None::<GetOptions>))
        .collect();
    let response = store.kv().txn(Txn::new().and_then(gets)).await?;
    let now = now_ms();
    let entries = response
        .op_responses()
        .iter()
        .zip(keys)
        .map(|(r, key)| {
            let TxnOpResponse::Get(get) = r else {
                return None;
            };
            let kv = get.kvs().first()?;
            let stored = envelope::decode(kv.key(), kv.value()).ok()?;
            let value = stored.live(now)?.clone();
            Some(Entry {
                key: key.clone(),
                value,
                versionstamp: stored.versionstamp(kv.mod_revision()),
                expires_at: stored.expires_at(),
            })
        })
        .collect();
    Ok((entries, response.header().map_or(0, |h| h.revision())))
}
