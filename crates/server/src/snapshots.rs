//! The snapshots the server holds for clients of tuplekv's extension (see `tuplekv_wire`):
//! keyed by versionstamp, so every client reading one state shares one engine snapshot;
//! dropped when every hold on it is released, or when idle for
//! [`SNAPSHOT_IDLE_TIMEOUT`](crate::limits::SNAPSHOT_IDLE_TIMEOUT) (a client that died never
//! releases), or, least recently used first, when more than the configured maximum are held.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tuplekv_engine::Versionstamp;

use crate::limits::{HOLDS_PER_SNAPSHOT_MAX, SNAPSHOT_AGE_MAX};

/// Held snapshots of type `T`.
pub(crate) struct Held<T> {
    inner: Mutex<HashMap<Versionstamp, Slot<T>>>,
    max: usize,
    idle: Duration,
}

/// One held snapshot: when it was taken and last used, and the holds on it.
struct Slot<T> {
    snapshot: T,
    taken: Instant,
    used: Instant,
    holds: HashSet<u64>,
    /// Past [`HOLDS_PER_SNAPSHOT_MAX`] holds: releases no longer drop it.
    overflowed: bool,
}

impl<T> Slot<T> {
    fn live(&self, now: Instant, idle: Duration) -> bool {
        now.duration_since(self.used) < idle && now.duration_since(self.taken) < SNAPSHOT_AGE_MAX
    }
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

    /// Holds `snapshot` at `at` under `id` (a snapshot already held there stays, fresher;
    /// holding under the same id twice is one hold).
    pub(crate) fn hold(&self, at: Versionstamp, id: u64, snapshot: &T) {
        let now = Instant::now();
        let mut map = self.lock();
        let idle = self.idle;
        if let Some(slot) = map.get_mut(&at).filter(|s| s.live(now, idle)) {
            slot.used = now;
            if slot.holds.len() < HOLDS_PER_SNAPSHOT_MAX {
                slot.holds.insert(id);
            } else {
                slot.overflowed = true;
            }
            return;
        }
        if map.len() >= self.max {
            map.retain(|_, slot| slot.live(now, idle));
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
                taken: now,
                used: now,
                holds: HashSet::from([id]),
                overflowed: false,
            },
        );
    }

    /// Removes the hold `id` on the snapshot at `at`; the last one drops it. Unknown ones
    /// (released already, or held before a restart) are ignored.
    pub(crate) fn release(&self, at: Versionstamp, id: u64) {
        let mut map = self.lock();
        if let Some(slot) = map.get_mut(&at) {
            slot.holds.remove(&id);
            if slot.holds.is_empty() && !slot.overflowed {
                map.remove(&at);
            }
        }
    }

    /// The snapshot held at `at`, if it is still held (not idle past the timeout, not older
    /// than [`SNAPSHOT_AGE_MAX`]); the read keeps it fresh.
    pub(crate) fn get(&self, at: Versionstamp) -> Option<T> {
        let now = Instant::now();
        let mut map = self.lock();
        let idle = self.idle;
        match map.get_mut(&at) {
            Some(slot) if slot.live(now, idle) => {
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
        held.hold(vs(1), 1, &"one");
        held.hold(vs(2), 1, &"two");
        assert_eq!(held.get(vs(1)), Some("one")); // 1 is now fresher than 2
        held.hold(vs(3), 1, &"three");
        assert_eq!(held.len(), 2);
        assert_eq!(held.get(vs(2)), None);
        assert_eq!(held.get(vs(1)), Some("one"));
        assert_eq!(held.get(vs(3)), Some("three"));
    }

    #[test]
    fn a_snapshot_is_dropped_when_its_last_hold_is_released() {
        let held = Held::new(8, Duration::from_secs(60));
        held.hold(vs(1), 10, &1);
        held.hold(vs(1), 10, &1); // the same hold again (a retried request)
        held.hold(vs(1), 20, &1);
        held.release(vs(1), 10);
        held.release(vs(1), 10); // released twice: still one hold left
        assert_eq!(held.get(vs(1)), Some(1));
        held.release(vs(1), 20);
        assert_eq!(held.get(vs(1)), None);
        held.release(vs(7), 1); // unknown: ignored
        assert_eq!(held.len(), 0);
    }

    #[test]
    fn a_snapshot_older_than_the_age_limit_is_gone_however_often_it_is_read() {
        let held = Held::new(8, Duration::from_secs(3600));
        held.hold(vs(1), 1, &1);
        let long_ago = Instant::now()
            .checked_sub(SNAPSHOT_AGE_MAX + Duration::from_secs(1))
            .expect("the clock is past the age limit");
        held.lock().get_mut(&vs(1)).expect("held").taken = long_ago;
        assert_eq!(held.get(vs(1)), None);
        // Just under the limit it is still there.
        held.hold(vs(2), 1, &2);
        let recent = Instant::now()
            .checked_sub(SNAPSHOT_AGE_MAX - Duration::from_secs(5))
            .expect("the clock is past the age limit");
        held.lock().get_mut(&vs(2)).expect("held").taken = recent;
        assert_eq!(held.get(vs(2)), Some(2));
    }

    #[test]
    fn holds_past_the_limit_are_served_but_pin_the_snapshot_until_idle() {
        let held = Held::new(8, Duration::from_secs(60));
        for id in 0..HOLDS_PER_SNAPSHOT_MAX as u64 {
            held.hold(vs(1), id, &1);
        }
        held.hold(vs(1), u64::MAX, &1); // one past the limit
        for id in 0..HOLDS_PER_SNAPSHOT_MAX as u64 {
            held.release(vs(1), id);
        }
        // Every recorded hold is gone, but the unrecorded one may still read it.
        assert_eq!(held.get(vs(1)), Some(1));
    }

    #[test]
    fn an_idle_snapshot_is_gone() {
        let held = Held::new(8, Duration::ZERO);
        held.hold(vs(1), 1, &1);
        assert_eq!(held.get(vs(1)), None);
        assert_eq!(held.len(), 0);
    }
}
