//! [`EtcdWatch`]: a watch of keys of an [`EtcdStore`], woken by etcd's watch stream.
//!
//! A background task reads the watched keys at one revision `R`, hands over the state, and
//! asks etcd to stream the changes of those keys from `R + 1` (so nothing between the read
//! and the stream is missed), on a connection of the store's kept for watches. After changes
//! (at most one read per [`WATCH_READ_GAP_MIN`]), at the earliest deadline among the values it
//! holds (an expiry writes nothing etcd could report) and, as a safety net, every
//! [`WATCH_RESYNC_INTERVAL`], it reads the keys again and hands over the state if a
//! versionstamp differs. It never waits for the watch's reader: a state not taken yet is
//! replaced by the next, merged, so the task keeps reading etcd's stream and a slow reader
//! never holds up etcd's flow control. When the stream fails or etcd cancels it (its start
//! revision compacted, a member gone or cut off from the leader), it starts over after
//! [`WATCH_RETRY_PAUSE`] with a new read.

use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse, WatchOptions};
use tokio::time::Instant;
use tuplekv_engine::{Entry, KeyBytes, KeyWatch, Versionstamp, WatchUpdate};

use crate::{EtcdStore, envelope, now_ms};

/// How often a watch reads its keys even when etcd reported no change: a safety net for a
/// stream that went quiet without failing.
pub const WATCH_RESYNC_INTERVAL: Duration = Duration::from_secs(10);

/// The pause before a watch whose read or stream failed starts over.
pub const WATCH_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// The shortest time between two reads of one watch's keys: changes reported meanwhile are
/// read together, so a key written thousands of times a second costs each watch at most
/// one read per this interval.
pub const WATCH_READ_GAP_MIN: Duration = Duration::from_millis(50);

/// The keep-alive interval (and timeout) of the watches' connection.
pub const WATCH_KEEP_ALIVE: Duration = Duration::from_secs(5);

/// Where the watch's task leaves the state for its reader: one pending update at most, which
/// a newer state replaces (with the keys changed in either marked changed), so the task never
/// waits for the reader and never stops reading etcd's stream.
#[derive(Default)]
struct Slot {
    pending: Option<WatchUpdate>,
    waker: Option<Waker>,
}

/// A watch of up to `WATCH_KEYS_MAX` keys of an [`EtcdStore`]: the current entries at once,
/// then a new state after a watched key changed (states the reader did not take in time are
/// merged). It keeps the store's runtime alive, and stops watching when dropped.
pub struct EtcdWatch {
    slot: Arc<Mutex<Slot>>,
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
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.pending.take() {
            Some(update) => Poll::Ready(Some(update)),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl EtcdWatch {
    pub(crate) fn start(store: &EtcdStore, keys: Vec<KeyBytes>) -> EtcdWatch {
        let slot = Arc::new(Mutex::new(Slot::default()));
        let task = store.spawn(run(store.clone(), keys, Arc::clone(&slot)));
        EtcdWatch {
            slot,
            task,
            _store: store.clone(),
        }
    }
}

/// Each key's versionstamp in a state (`None`: absent).
type Stamps = Vec<Option<Versionstamp>>;

/// Leaves `entries` (read at `revision`) for the reader if their stamps differ from `last`
/// (the last state left), merging with a state the reader has not taken yet.
fn offer(slot: &Mutex<Slot>, last: &mut Option<Stamps>, entries: &[Option<Entry>], revision: i64) {
    let stamps: Stamps = entries
        .iter()
        .map(|e| e.as_ref().map(|e| e.versionstamp))
        .collect();
    if last.as_ref() == Some(&stamps) {
        return;
    }
    let mut changed: Vec<bool> = match last.as_ref() {
        None => vec![true; stamps.len()],
        Some(prev) => stamps.iter().zip(prev).map(|(a, b)| a != b).collect(),
    };
    let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(untaken) = slot.pending.take() {
        for (c, was) in changed.iter_mut().zip(&untaken.changed) {
            *c |= *was;
        }
    }
    slot.pending = Some(WatchUpdate {
        entries: entries.to_vec(),
        changed,
        versionstamp: Versionstamp::from_version(u64::try_from(revision).unwrap_or(0)),
    });
    if let Some(waker) = slot.waker.take() {
        waker.wake();
    }
    *last = Some(stamps);
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

/// Watches `keys` until the watch is dropped (which aborts this task): see the module docs.
async fn run(store: EtcdStore, keys: Vec<KeyBytes>, slot: Arc<Mutex<Slot>>) {
    let mut last: Option<Stamps> = None;
    loop {
        watch_once(&store, &keys, &slot, &mut last).await;
        tokio::time::sleep(WATCH_RETRY_PAUSE).await;
    }
}

/// One read and one etcd watch stream, until the read or the stream fails.
async fn watch_once(
    store: &EtcdStore,
    keys: &[KeyBytes],
    slot: &Mutex<Slot>,
    last: &mut Option<Stamps>,
) {
    let Ok((mut entries, revision)) = read(store, keys).await else {
        return;
    };
    offer(slot, last, &entries, revision);
    let mut last_read = Instant::now();
    let space = store.space();
    let options = || Some(WatchOptions::new().with_start_revision(revision.saturating_add(1)));
    let Ok(mut client) = store.watch_client().await else {
        return;
    };
    let first = keys
        .first()
        .map_or_else(|| space.data(&[]), |k| space.data(k));
    let Ok(mut stream) = client.watch(first, options()).await else {
        return;
    };
    for key in keys.iter().skip(1) {
        if stream.watch(space.data(key), options()).await.is_err() {
            return;
        }
    }
    // Whether etcd reported a change not read yet.
    let mut dirty = false;
    loop {
        let wake = if dirty {
            last_read + WATCH_READ_GAP_MIN
        } else {
            Instant::now() + until_next_deadline(&entries)
        };
        tokio::select! {
            message = stream.message() => match message {
                Ok(Some(response)) if response.canceled() || response.compact_revision() > 0 => {
                    return;
                }
                Ok(Some(response)) => dirty |= !response.events().is_empty(),
                // The stream ended or failed: start over.
                Ok(None) | Err(_) => return,
            },
            () = tokio::time::sleep_until(wake) => {
                let Ok((now, revision)) = read(store, keys).await else {
                    return;
                };
                entries = now;
                last_read = Instant::now();
                dirty = false;
                offer(slot, last, &entries, revision);
            }
        }
    }
}

/// The entries of `keys` at one revision, and the revision.
async fn read(store: &EtcdStore, keys: &[KeyBytes]) -> Result<(Vec<Option<Entry>>, i64), ()> {
    let space = store.space();
    let gets: Vec<TxnOp> = keys
        .iter()
        .map(|k| TxnOp::get(space.data(k), None::<GetOptions>))
        .collect();
    let response = store
        .kv()
        .txn(Txn::new().and_then(gets))
        .await
        .map_err(|_| ())?;
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
    // An answer without its revision is no state to start a stream from.
    let revision = response
        .header()
        .map(etcd_client::ResponseHeader::revision)
        .filter(|r| *r > 0)
        .ok_or(())?;
    Ok((entries, revision))
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

    fn stamped(version: u64) -> Option<Entry> {
        Some(Entry {
            key: KeyBytes::from(vec![1u8]),
            value: Value::U64(version),
            versionstamp: Versionstamp::from_version(version),
            expires_at: None,
        })
    }

    #[test]
    fn states_the_reader_has_not_taken_are_merged_never_queued() {
        let slot = Mutex::new(Slot::default());
        let mut last = None;
        offer(&slot, &mut last, &[stamped(1), None], 1);
        let first = slot
            .lock()
            .unwrap()
            .pending
            .take()
            .expect("the first state");
        assert_eq!(first.changed, [true, true]);
        // Unchanged stamps leave nothing.
        offer(&slot, &mut last, &[stamped(1), None], 2);
        assert!(slot.lock().unwrap().pending.is_none());
        // Two states before the reader looks: the last one, with both keys' changes marked.
        offer(&slot, &mut last, &[stamped(3), None], 3);
        offer(&slot, &mut last, &[stamped(3), stamped(4)], 4);
        let merged = slot.lock().unwrap().pending.take().expect("one state");
        assert_eq!(merged.changed, [true, true]);
        assert_eq!(merged.entries, [stamped(3), stamped(4)]);
        assert_eq!(merged.versionstamp, Versionstamp::from_version(4));
        assert!(
            slot.lock().unwrap().pending.is_none(),
            "never more than one"
        );
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
