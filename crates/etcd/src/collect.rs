//! The collector: removes what deletions and expiry leave behind in etcd.
//!
//! Each pass examines at most [`COLLECT_SCAN_MAX`] of the store's keys, from where the last
//! pass stopped (wrapping at the end), and:
//! - turns a value past its deadline into a tombstone, with a `mod_revision` comparison so a
//!   concurrent rewrite of the key wins. It becomes a tombstone rather than being removed
//!   because removing it is not sound: a transaction that listed the range at a snapshot
//!   before the value was written saw the key's older state (a live value, say); with the
//!   key gone, its range comparison would find nothing newer than the snapshot and pass,
//!   although the key changed since. A tombstone has a new revision, so the comparison
//!   fails as it must; it is then collected as any tombstone.
//! - removes a tombstone whose revision is at or below the cluster's compaction revision,
//!   again guarded by its `mod_revision`. Reads below the compaction revision already fail
//!   with `SnapshotExpired`, and reads at or above it see no difference between a
//!   tombstone and no key. A range check whose snapshot predates the tombstone would no
//!   longer see it, so before removing any, the pass raises the collection fence (an etcd
//!   key of the store, holding the highest revision it may remove): a commit with range
//!   checks compares the fence's `mod_revision` with what it saw, and conflicts when the
//!   bound is above its snapshot (module `commit`).
//!
//! The compaction revision is found by binary search over revisions with count-only reads
//! (a read below it fails as compacted), starting from the last one found, since it only
//! grows.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, KvClient, Txn, TxnOp};
use tokio::sync::Mutex;
use tuplekv_engine::{Error, Value};

use crate::envelope;
use crate::errors::{is_compacted_error, read_error, write_error};
use crate::{Space, now_ms};

/// Most etcd keys one pass examines (and so most it changes).
pub const COLLECT_SCAN_MAX: usize = 256;

/// How often the background collector runs by default.
pub const COLLECT_INTERVAL_DEFAULT: Duration = Duration::from_secs(30);

/// The pause before the next background pass when the last one changed something and had
/// not reached the end of the store: garbage is collected as fast as it comes (up to
/// [`COLLECT_SCAN_MAX`] keys per pause), while a store without garbage is swept only
/// every interval.
pub const COLLECT_BUSY_PAUSE: Duration = Duration::from_millis(50);

/// How the store collects garbage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectOptions {
    /// The pause between two background passes; `None` runs none (then only
    /// [`EtcdStore::collect_garbage`](crate::EtcdStore::collect_garbage) collects).
    pub interval: Option<Duration>,
}

impl Default for CollectOptions {
    fn default() -> Self {
        CollectOptions {
            interval: Some(COLLECT_INTERVAL_DEFAULT),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Collected {
    /// Keys examined.
    pub scanned: usize,
    /// Expired values turned into tombstones.
    pub expired: usize,
    /// Tombstones removed.
    pub tombstones: usize,
    /// Changes lost to a concurrent write of the same key (left as they are).
    pub skipped: usize,
    /// Whether the pass reached the end of the store (the next starts from the beginning).
    pub wrapped: bool,
}

/// Where passes resume, and the last compaction revision found.
#[derive(Debug, Default)]
struct State {
    cursor: Option<Vec<u8>>,
    compacted: i64,
}

/// One store's collector; clones share the state, so passes never overlap.
#[derive(Clone)]
pub(crate) struct Collector {
    kv: KvClient,
    space: Space,
    state: Arc<Mutex<State>>,
}

/// How long the background collector waits after a pass that ended with `last`: briefly
/// while passes find garbage before the end of the store, else `interval` (also after a
/// failed pass, which is tried again then).
fn next_pause(last: &Result<Collected, Error>, interval: Duration) -> Duration {
    match last {
        Ok(c) if !c.wrapped && c.expired + c.tombstones > 0 => COLLECT_BUSY_PAUSE.min(interval),
        _ => interval,
    }
}

/// A key the pass may change: its etcd key and `mod_revision`.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(crate) key: Vec<u8>,
    pub(crate) mod_revision: i64,
}

impl Collector {
    pub(crate) fn new(kv: KvClient, space: Space) -> Collector {
        Collector {
            kv,
            space,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// Runs passes forever (the store aborts it with its last handle): the next after
    /// [`COLLECT_BUSY_PAUSE`] while passes find garbage before the end of the store, else
    /// after `interval`.
    pub(crate) async fn run(self, interval: Duration) {
        let mut pause = interval;
        loop {
            tokio::time::sleep(pause).await;
            pause = next_pause(&self.pass().await, interval);
        }
    }

    /// One pass: see the module docs.
    pub(crate) async fn pass(&self) -> Result<Collected, Error> {
        let mut state = self.state.lock().await;
        let mut kv = self.kv.clone();
        let start = state.cursor.clone().unwrap_or_else(|| self.space.data(&[]));
        let options = GetOptions::new()
            .with_range(self.space.data_end())
            .with_limit(i64::try_from(COLLECT_SCAN_MAX).unwrap_or(i64::MAX));
        let response = kv
            .get(start, Some(options))
            .await
            .map_err(|e| read_error(e, 0))?;
        let current = response.header().map_or(0, |h| h.revision());
        let now = now_ms();
        let mut expired = Vec::new();
        let mut tombstones = Vec::new();
        for kv in response.kvs() {
            let Ok(stored) = envelope::decode(kv.key(), kv.value()) else {
                continue; // Not ours to judge: reads report it.
            };
            let candidate = Candidate {
                key: kv.key().to_vec(),
                mod_revision: kv.mod_revision(),
            };
            if stored.value.is_none() {
                tombstones.push(candidate);
            } else if stored.live(now).is_none() {
                expired.push(candidate);
            }
        }
        let mut out = Collected {
            scanned: response.kvs().len(),
            wrapped: !response.more(),
            ..Collected::default()
        };
        state.cursor = match response.kvs().last() {
            Some(last) if response.more() => {
                let mut next = last.key().to_vec();
                next.push(0);
                Some(next)
            }
            _ => None,
        };
        for c in &expired {
            if self.bury(c).await? {
                out.expired += 1;
            } else {
                out.skipped += 1;
            }
        }
        if !tombstones.is_empty() {
            let compacted = compaction_revision(&mut kv, state.compacted, current).await?;
            state.compacted = compacted;
            tombstones.retain(|c| c.mod_revision <= compacted);
            let highest = tombstones.iter().map(|c| c.mod_revision).max();
            if let Some(highest) = highest
                && self
                    .raise_fence(u64::try_from(highest).unwrap_or(0))
                    .await?
            {
                for c in &tombstones {
                    if self.remove(c).await? {
                        out.tombstones += 1;
                    } else {
                        out.skipped += 1;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Turns the expired value `c` into a tombstone unless it was rewritten; whether it did.
    pub(crate) async fn bury(&self, c: &Candidate) -> Result<bool, Error> {
        let txn = Txn::new()
            .when([Compare::mod_revision(
                c.key.clone(),
                CompareOp::Equal,
                c.mod_revision,
            )])
            .and_then([TxnOp::put(c.key.clone(), envelope::tombstone(), None)]);
        let mut kv = self.kv.clone();
        Ok(kv.txn(txn).await.map_err(write_error)?.succeeded())
    }

    /// Removes the tombstone `c` unless it was rewritten; whether it did.
    pub(crate) async fn remove(&self, c: &Candidate) -> Result<bool, Error> {
        let txn = Txn::new()
            .when([Compare::mod_revision(
                c.key.clone(),
                CompareOp::Equal,
                c.mod_revision,
            )])
            .and_then([TxnOp::delete(c.key.clone(), None)]);
        let mut kv = self.kv.clone();
        Ok(kv.txn(txn).await.map_err(write_error)?.succeeded())
    }

    /// Makes the fence's bound at least `bound`; whether it is (false when another writer
    /// moved the fence meanwhile: the next pass tries again).
    async fn raise_fence(&self, bound: u64) -> Result<bool, Error> {
        let fence = self.space.fence();
        let mut kv = self.kv.clone();
        let response = kv
            .get(fence.clone(), None)
            .await
            .map_err(|e| read_error(e, 0))?;
        let (seen, old) = match response.kvs().first() {
            None => (0, 0),
            Some(kv) => match envelope::decode(kv.key(), kv.value())?.value {
                Some(Value::U64(old)) => (kv.mod_revision(), old),
                _ => (kv.mod_revision(), 0),
            },
        };
        if old >= bound {
            return Ok(true);
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(fence.clone(), CompareOp::Equal, seen)])
            .and_then([TxnOp::put(
                fence,
                envelope::encode(&Value::U64(bound), None, envelope::Stamp::Revision),
                None,
            )]);
        let response = kv.txn(txn).await.map_err(write_error)?;
        if let Some(h) = response.header()
            && response.succeeded()
        {
            self.space.saw_fence(h.revision(), bound);
        }
        Ok(response.succeeded())
    }
}

/// The cluster's compaction revision: the lowest revision in `[from, current]` that can
/// still be read (1 when nothing was compacted).
async fn compaction_revision(kv: &mut KvClient, from: i64, current: i64) -> Result<i64, Error> {
    let (mut lo, mut hi) = (from.max(1), current.max(1));
    // Invariant: revisions below `lo` are compacted (or not revisions), `hi` can be read.
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let probe = GetOptions::new().with_revision(mid).with_count_only();
        match kv.get(vec![0u8], Some(probe)).await {
            Ok(_) => hi = mid,
            Err(e) if is_compacted_error(&e) => lo = mid + 1,
            Err(e) => return Err(read_error(e, mid)),
        }
    }
    Ok(lo)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tuplekv_engine::{ReadView, Store, key};
    use tuplekv_testkit::etcd::Cluster;

    use super::*;
    use crate::EtcdStore;

    #[test]
    fn passes_follow_each_other_quickly_only_while_they_find_garbage_before_the_end() {
        let interval = Duration::from_secs(30);
        let pass = |expired, tombstones, wrapped| -> Result<Collected, Error> {
            Ok(Collected {
                scanned: COLLECT_SCAN_MAX,
                expired,
                tombstones,
                skipped: 0,
                wrapped,
            })
        };
        assert_eq!(next_pause(&pass(3, 0, false), interval), COLLECT_BUSY_PAUSE);
        assert_eq!(next_pause(&pass(0, 9, false), interval), COLLECT_BUSY_PAUSE);
        assert_eq!(next_pause(&pass(0, 0, false), interval), interval);
        assert_eq!(next_pause(&pass(5, 5, true), interval), interval);
        let failed = Err(Error::unavailable("no leader"));
        assert_eq!(next_pause(&failed, interval), interval);
        let short = Duration::from_millis(10);
        assert_eq!(next_pause(&pass(1, 0, false), short), short);
    }

    /// The etcd key and `mod_revision` of tuplekv key `k`, read now.
    fn candidate(store: &EtcdStore, k: &tuplekv_engine::Key) -> Candidate {
        let key = store.space().data(&tuplekv_engine::codec::encode_key(k));
        let mut kv = store.kv();
        let target = key.clone();
        let mod_revision = store
            .block_on(async move {
                let r = kv.get(target, None).await.map_err(|e| read_error(e, 0))?;
                Ok(r.kvs().first().map_or(0, |kv| kv.mod_revision()))
            })
            .expect("a read");
        Candidate { key, mod_revision }
    }

    #[test]
    fn a_rewrite_between_the_scan_and_the_change_wins() {
        let cluster = Cluster::start(1);
        let options = CollectOptions { interval: None };
        let store =
            EtcdStore::connect_with(&cluster.client_urls(), b"race/", &options).expect("a store");
        let collector = store.inner.collect.clone();

        // An expired value, seen by the collector, rewritten before it is buried.
        let _ = store
            .atomic()
            .set_with_expiry(&key!["e"], 1u64, Duration::from_millis(1))
            .commit()
            .expect("a commit");
        std::thread::sleep(Duration::from_millis(20));
        let seen = candidate(&store, &key!["e"]);
        let _ = store
            .atomic()
            .set(&key!["e"], 2u64)
            .commit()
            .expect("a commit");
        let c = collector.clone();
        let buried = store
            .block_on(async move { c.bury(&seen).await })
            .expect("an answer");
        assert!(!buried, "a stale expired value was buried over a rewrite");
        let e = store
            .snapshot()
            .get(&key!["e"])
            .expect("a read")
            .expect("kept");
        assert_eq!(e.value.as_u64(), Some(2));

        // A tombstone, seen by the collector, rewritten before it is removed.
        let _ = store
            .atomic()
            .delete(&key!["t"])
            .commit()
            .expect("a commit");
        let seen = candidate(&store, &key!["t"]);
        let _ = store
            .atomic()
            .set(&key!["t"], 3u64)
            .commit()
            .expect("a commit");
        let c = collector.clone();
        let removed = store
            .block_on(async move { c.remove(&seen).await })
            .expect("an answer");
        assert!(!removed, "a stale tombstone was removed over a rewrite");
        let t = store
            .snapshot()
            .get(&key!["t"])
            .expect("a read")
            .expect("kept");
        assert_eq!(t.value.as_u64(), Some(3));

        // With nothing in between, both go through.
        let seen = candidate(&store, &key!["t"]);
        let c = collector.clone();
        assert!(
            store
                .block_on(async move { c.bury(&seen).await })
                .expect("an answer")
        );
        assert_eq!(store.snapshot().get(&key!["t"]).expect("a read"), None);
    }

    #[test]
    fn the_background_task_collects_and_stops_with_the_last_handle() {
        let cluster = Cluster::start(1);
        let options = CollectOptions {
            interval: Some(Duration::from_millis(50)),
        };
        let store =
            EtcdStore::connect_with(&cluster.client_urls(), b"bg/", &options).expect("a store");
        let _ = store
            .atomic()
            .set_with_expiry(&key!["e"], 1u64, Duration::from_millis(1))
            .commit()
            .expect("a commit");
        let seen = candidate(&store, &key!["e"]);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while candidate(&store, &key!["e"]).mod_revision == seen.mod_revision {
            assert!(
                std::time::Instant::now() < deadline,
                "the background collector never buried the expired value"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let task = store.inner.collector.clone().expect("a background task");
        drop(store);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !task.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "the collector outlived the store"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
