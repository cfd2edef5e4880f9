//! Background reclamation: versions no snapshot needs any more, tombstones, and expired
//! values.
//!
//! Writers prune a key's versions whenever they write it; what they cannot prune yet (versions
//! an open snapshot still reads, tombstones, values with a deadline) they *mark* here. A
//! background thread wakes when something is marked, when the oldest snapshot closes, at the
//! next expiry deadline, and at least once a second, and prunes the marked keys in small
//! batches under the commit lock, so it never holds writers up for long. Expired values are
//! invisible to reads from their deadline on whether or not they have been reclaimed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::db::{Inner, now_ms};
use crate::key_bytes::KeyBytes;

/// Keys pruned per hold of the commit lock.
const BATCH: usize = 256;
/// How long the thread lets marks accumulate before a pass.
const BATCH_WINDOW: Duration = Duration::from_millis(5);
/// Longest sleep between passes.
const IDLE_WAKE: Duration = Duration::from_secs(1);

#[derive(Default)]
struct State {
    expiry: BinaryHeap<Reverse<(u64, KeyBytes)>>,
    shutdown: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Keys to prune, in marking order, possibly repeated (a pass sorts and dedups them).
    /// Apart from the state so marking never waits for the thread's bookkeeping.
    garbage: Mutex<Vec<KeyBytes>>,
    /// Set when a key is marked since the last pass.
    marked: AtomicBool,
    /// Set by the marking that found `marked` clear: the next commit wakes the thread, once.
    wake_requested: AtomicBool,
    /// Set when a pass left keys it could not prune yet (an open snapshot needed them), so a
    /// closing snapshot knows whether waking the thread is worth it.
    leftover: AtomicBool,
    /// Held for a whole pass, so `reclaim_now` waits for a background pass that has taken
    /// keys out of the queue before it runs its own.
    pass: Mutex<()>,
}

/// The reclamation queue of one database, and the handle of its background thread.
#[derive(Default)]
pub(crate) struct Reclaimer {
    shared: Arc<Shared>,
}

impl Reclaimer {
    /// Starts the background thread. It holds only a weak reference to the database, and
    /// stops when the database is dropped.
    pub(crate) fn spawn(inner: &Arc<Inner>) {
        let shared = Arc::clone(&inner.reclaimer.shared);
        let weak: Weak<Inner> = Arc::downgrade(inner);
        // Without the thread, memory is still reclaimed when keys are written again and by
        // `Database::reclaim_now`, so a failed spawn is not an error.
        let _ = std::thread::Builder::new()
            .name("tuplekv-reclaim".into())
            .spawn(move || {
                loop {
                    {
                        let mut state = shared.state.lock();
                        if state.shutdown {
                            return;
                        }
                        if !shared.marked.load(Ordering::Acquire) {
                            let now = now_ms();
                            let until_expiry =
                                state.expiry.peek().map_or(IDLE_WAKE, |Reverse((d, _))| {
                                    Duration::from_millis(d.saturating_sub(now)).min(IDLE_WAKE)
                                });
                            shared.wake.wait_for(&mut state, until_expiry);
                        }
                        if state.shutdown {
                            return;
                        }
                        // Let marks accumulate briefly, so a busy writer pays for one pass per
                        // window instead of one per commit.
                        if shared.marked.load(Ordering::Acquire) {
                            shared.wake.wait_for(&mut state, BATCH_WINDOW);
                            if state.shutdown {
                                return;
                            }
                        }
                    }
                    shared.marked.store(false, Ordering::Release);
                    let Some(inner) = weak.upgrade() else { return };
                    inner.reclaim_pass(false);
                }
            });
    }

    /// Queues `key` for pruning.
    pub(crate) fn mark(&self, key: KeyBytes) {
        self.shared.garbage.lock().push(key);
        if !self.shared.marked.swap(true, Ordering::AcqRel) {
            self.shared.wake_requested.store(true, Ordering::Release);
        }
    }

    /// Queues `key` for pruning at `deadline` (Unix ms).
    pub(crate) fn schedule_expiry(&self, deadline: u64, key: KeyBytes) {
        let mut state = self.shared.state.lock();
        let earliest = state
            .expiry
            .peek()
            .is_none_or(|Reverse((d, _))| deadline < *d);
        state.expiry.push(Reverse((deadline, key)));
        if earliest {
            self.shared.wake.notify_one();
        }
    }

    /// Wakes the thread if a key was marked since its last pass and nobody has woken it for
    /// that yet (at most one wake-up per pass, whatever the commit rate).
    pub(crate) fn wake_if_pending(&self) {
        if self.shared.wake_requested.load(Ordering::Acquire)
            && self.shared.wake_requested.swap(false, Ordering::AcqRel)
        {
            let _state = self.shared.state.lock();
            self.shared.wake.notify_one();
        }
    }

    /// Wakes the thread if its last pass left keys an open snapshot needed (a snapshot closed).
    pub(crate) fn wake_if_leftover(&self) {
        if self.shared.leftover.swap(false, Ordering::AcqRel) {
            let _state = self.shared.state.lock();
            self.shared.marked.store(true, Ordering::Release);
            self.shared.wake.notify_one();
        }
    }

    fn shutdown(&self) {
        self.shared.state.lock().shutdown = true;
        self.shared.wake.notify_one();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.reclaimer.shutdown();
    }
}

impl Inner {
    /// Prunes every marked key and every key whose expiry is due. With `all`, also keys whose
    /// deadline has not come (used by tests and `Database::reclaim_now`, which still only
    /// drop what is dead).
    pub(crate) fn reclaim_pass(&self, all: bool) {
        let _one_pass_at_a_time = self.reclaimer.shared.pass.lock();
        let now = now_ms();
        let keys: Vec<KeyBytes> = {
            let mut keys: Vec<KeyBytes> =
                std::mem::take(&mut *self.reclaimer.shared.garbage.lock());
            let mut state = self.reclaimer.shared.state.lock();
            while let Some(Reverse((deadline, _))) = state.expiry.peek() {
                if *deadline > now && !all {
                    break;
                }
                if let Some(Reverse((deadline, key))) = state.expiry.pop() {
                    if deadline > now {
                        // Not due: keep it scheduled.
                        keys.push(key.clone());
                        state.expiry.push(Reverse((deadline, key)));
                        break;
                    }
                    keys.push(key);
                }
            }
            keys.sort_unstable_by(|a, b| a.as_slice().cmp(b.as_slice()));
            keys.dedup_by(|a, b| a.as_slice() == b.as_slice());
            keys
        };
        let mut leftover = Vec::new();
        for batch in keys.chunks(BATCH) {
            let _commit = self.commit.lock();
            let retention = self.retention();
            for key in batch {
                if self.prune(key, &retention, now) {
                    leftover.push(key.clone());
                }
            }
        }
        if !leftover.is_empty() {
            self.reclaimer.shared.garbage.lock().extend(leftover);
            self.reclaimer
                .shared
                .leftover
                .store(true, Ordering::Release);
        }
    }

    /// Everything reclaimable now.
    pub(crate) fn reclaim_all(&self) {
        self.reclaim_pass(true);
    }
}
