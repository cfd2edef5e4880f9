//! The snapshots the server holds for clients of tuplekv's extension (see `tuplekv_wire`):
//! keyed by versionstamp, so every client reading one state shares one engine snapshot;
//! dropped when every hold on it is released, or when idle for
//! [`SNAPSHOT_IDLE_TIMEOUT`](crate::limits::SNAPSHOT_IDLE_TIMEOUT) (a client that died never
//! releases), or, least recently used first, when more than the configured maximum are held.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tuplekv_engine::Versionstamp;

/// Held snapshots of type `T`.
pub(crate) struct Held<T> {
    inner: Mutex<HashMap<Versionstamp, Slot<T>>>,
    max: usize,
    idle: Duration,
}

/// One held snapshot: when it was last used, and how many holds are on it.
struct Slot<T> {
    snapshot: T,
    used: Instant,
    holds: u32,
}

impl<T: Clone> Held<T> {
    pub(crate) fn new(max: usize, idle: Duration) -> Self {
        Held {
            inner: Mutex::new(HashMap::new()),
            max: max.max(1),
            idle,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Versionstamp, Slot<T>>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds `snapshot` at `at` once more (a snapshot already held there stays, fresher).
    pub(crate) fn hold(&self, at: Versionstamp, snapshot: &T) {
        let now = Instant::now();
        let mut map = self.lock();
        if let Some(slot) = map.get_mut(&at) {
            slot.used = now;
            slot.holds = slot.holds.saturating_add(1);
            return;
        }
        if map.len() >= self.max {
            let idle = self.idle;
            map.retain(|_, slot| now.duration_since(slot.used) < idle);
        }
        if map.len() >= self.max
            && let Some(oldest) = map.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| *k)
        {
            map.remove(&oldest);
        }
        map.insert(
            at,
            Slot {
                snapshot: snapshot.clone(),
                used: now,
                holds: 1,
            },
        );
    }

    /// Undoes one hold on the snapshot at `at`; the last one drops it. Unknown ones (dropped
    /// already, or held before a restart) are ignored.
    pub(crate) fn release(&self, at: Versionstamp) {
        let mut map = self.lock();
        if let Some(slot) = map.get_mut(&at) {
            slot.holds = slot.holds.saturating_sub(1);
            if slot.holds == 0 {
                map.remove(&at);
            }
        }
    }

    /// The snapshot held at `at`, if it is still held (and not idle past the timeout); the
    /// read keeps it fresh.
    pub(crate) fn get(&self, at: Versionstamp) -> Option<T> {
        let now = Instant::now();
        let mut map = self.lock();
        let idle = self.idle;
        match map.get_mut(&at) {
            Some(slot) if now.duration_since(slot.used) < idle => {
                slot.used = now;
                Some(slot.snapshot.clone())
            }
            Some(_) => {
                map.remove(&at);
                None
            }
            None => None,
        }
    }

    /// How many are held (idle ones not yet swept included).
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vs(n: u64) -> Versionstamp {
        Versionstamp::from_version(n)
    }

    #[test]
    fn holding_past_the_maximum_drops_the_least_recently_used() {
        let held = Held::new(2, Duration::from_secs(60));
        held.hold(vs(1), &"one");
        held.hold(vs(2), &"two");
        assert_eq!(held.get(vs(1)), Some("one")); // 1 is now fresher than 2
        held.hold(vs(3), &"three");
        assert_eq!(held.len(), 2);
        assert_eq!(held.get(vs(2)), None);
        assert_eq!(held.get(vs(1)), Some("one"));
        assert_eq!(held.get(vs(3)), Some("three"));
    }

    #[test]
    fn a_snapshot_is_dropped_when_its_last_hold_is_released() {
        let held = Held::new(8, Duration::from_secs(60));
        held.hold(vs(1), &1);
        held.hold(vs(1), &1);
        held.release(vs(1));
        assert_eq!(held.get(vs(1)), Some(1));
        held.release(vs(1));
        assert_eq!(held.get(vs(1)), None);
        held.release(vs(7)); // unknown: ignored
        assert_eq!(held.len(), 0);
    }

    #[test]
    fn an_idle_snapshot_is_gone() {
        let held = Held::new(8, Duration::ZERO);
        held.hold(vs(1), &1);
        assert_eq!(held.get(vs(1)), None);
        assert_eq!(held.len(), 0);
    }
}
