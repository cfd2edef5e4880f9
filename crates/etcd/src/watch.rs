//! [`EtcdWatch`]: a watch of keys of an [`EtcdStore`], woken by etcd's watch stream.
//!
//! A background task reads the watched keys at one revision `R`, hands over the state, and
//! asks etcd to stream the changes of those keys from `R + 1` (so nothing between the read
//! and the stream is missed). Each change, the earliest deadline among the values it holds
//! (an expiry writes nothing etcd could report) and, as a safety net, every
//! [`WATCH_RESYNC_INTERVAL`], it reads the keys again and hands over the state if a
//! versionstamp differs. When the stream fails or etcd cancels it (its start revision
//! compacted, a member gone), it starts over after [`WATCH_RETRY_PAUSE`] with a new read.

use std::task::{Context, Poll};
use std::time::Duration;

use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse, WatchOptions};
use tokio::sync::mpsc;
use tuplekv_engine::{Entry, KeyBytes, KeyWatch, Versionstamp, WatchUpdate};

use crate::{EtcdStore, envelope, now_ms};

/// How often a watch reads its keys even when etcd reported no change: a safety net for a
/// stream that went quiet without failing.
pub const WATCH_RESYNC_INTERVAL: Duration = Duration::from_secs(10);

/// The pause before a watch whose read or stream failed starts over.
pub const WATCH_RETRY_PAUSE: Duration = Duration::from_millis(200);

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
        let task = store.spawn(run(store.clone(), keys, tx));
        EtcdWatch {
            updates,
            task,
            _store: store.clone(),
        }
    }
}

/// Reads `keys` until the watch is dropped, sending each state whose stamps differ from the
/// last sent.
/// What a watch last handed over: each key's versionstamp (`None`: absent).
type Stamps = Vec<Option<Versionstamp>>;

/// Reads `keys` and hands the state over if its stamps differ from `last`; the entries
/// read, or `None` when the watch was dropped. A failed read is `Some(Err)`.
async fn refresh(
    store: &EtcdStore,
    keys: &[KeyBytes],
    tx: &mpsc::Sender<WatchUpdate>,
    last: &mut Option<Stamps>,
) -> Option<Result<(Vec<Option<Entry>>, i64), etcd_client::Error>> {
    let (entries, revision) = match read(store, keys).await {
        Ok(read) => read,
        Err(e) => return Some(Err(e)),
    };
    let stamps: Stamps = entries
        .iter()
        .map(|e| e.as_ref().map(|e| e.versionstamp))
        .collect();
    if last.as_ref() != Some(&stamps) {
        let changed = match last.as_ref() {
            None => vec![true; stamps.len()],
            Some(prev) => stamps.iter().zip(prev).map(|(a, b)| a != b).collect(),
        };
        let update = WatchUpdate {
            entries: entries.clone(),
            changed,
            versionstamp: Versionstamp::from_version(u64::try_from(revision).unwrap_or(0)),
        };
        tx.send(update).await.ok()?;
        *last = Some(stamps);
    }
    Some(Ok((entries, revision)))
}

/// How long until the earliest deadline among `entries` passes (then the value is gone
/// without a change etcd would report), at most [`WATCH_RESYNC_INTERVAL`].
fn until_next_deadline(entries: &[Option<Entry>]) -> Duration {
    let now = now_ms();
    entries
        .iter()
        .flatten()
        .filter_map(|e| e.expires_at)
        .map(|d| Duration::from_millis(d.saturating_sub(now).saturating_add(1)))
        .min()
        .unwrap_or(WATCH_RESYNC_INTERVAL)
        .min(WATCH_RESYNC_INTERVAL)
}

/// Watches `keys` until the watch is dropped: see the module docs.
async fn run(store: EtcdStore, keys: Vec<KeyBytes>, tx: mpsc::Sender<WatchUpdate>) {
    let mut last: Option<Stamps> = None;
    loop {
        if let Some(()) = watch_once(&store, &keys, &tx, &mut last).await {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(WATCH_RETRY_PAUSE) => {}
            () = tx.closed() => return,
        }
    }
}

/// One read and one etcd watch stream, until the stream fails (`None`: start over) or the
/// watch is dropped (`Some`).
async fn watch_once(
    store: &EtcdStore,
    keys: &[KeyBytes],
    tx: &mpsc::Sender<WatchUpdate>,
    last: &mut Option<Stamps>,
) -> Option<()> {
    let (mut entries, revision) = match refresh(store, keys, tx, last).await {
        None => return Some(()),
        Some(Err(_)) => return None,
        Some(Ok(read)) => read,
    };
    let space = store.space();
    let options = || Some(WatchOptions::new().with_start_revision(revision.saturating_add(1)));
    let mut client = store.watch_client();
    let first = keys
        .first()
        .map_or_else(|| space.data(&[]), |k| space.data(k));
    let mut stream = client.watch(first, options()).await.ok()?;
    for key in keys.iter().skip(1) {
        stream.watch(space.data(key), options()).await.ok()?;
    }
    loop {
        tokio::select! {
            message = stream.message() => match message {
                Ok(Some(response)) if response.canceled() || response.compact_revision() > 0 => {
                    return None;
                }
                Ok(Some(response)) if response.events().is_empty() => continue,
                Ok(Some(_)) => {}
                // The stream ended or failed: start over.
                Ok(None) | Err(_) => return None,
            },
            () = tokio::time::sleep(until_next_deadline(&entries)) => {}
            () = tx.closed() => return Some(()),
        }
        match refresh(store, keys, tx, last).await {
            None => return Some(()),
            Some(Err(_)) => return None,
            Some(Ok((now, _))) => entries = now,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tuplekv_engine::Value;

    fn expiring_at(deadline: Option<u64>) -> Option<Entry> {
        Some(Entry {
            key: KeyBytes::from(vec![1u8]),
            value: Value::U64(1),
            versionstamp: Versionstamp::from_version(1),
            expires_at: deadline,
        })
    }

    #[test]
    fn a_watch_wakes_at_the_earliest_deadline_of_its_values_or_to_resync() {
        assert_eq!(
            until_next_deadline(&[None, expiring_at(None)]),
            WATCH_RESYNC_INTERVAL
        );
        let now = now_ms();
        let soon = until_next_deadline(&[
            expiring_at(Some(now + 60_000)),
            None,
            expiring_at(Some(now + 500)),
        ]);
        assert!(
            soon <= Duration::from_millis(501) && soon > Duration::ZERO,
            "{soon:?}"
        );
        let past = until_next_deadline(&[expiring_at(Some(now.saturating_sub(5)))]);
        assert_eq!(
            past,
            Duration::from_millis(1),
            "a deadline passed: read again now"
        );
        let far = until_next_deadline(&[expiring_at(Some(now + 3_600_000))]);
        assert_eq!(far, WATCH_RESYNC_INTERVAL);
    }
}
