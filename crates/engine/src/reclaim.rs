//! Background reclamation: versions no snapshot needs any more, tombstones, and expired
//! values.
//!
//! Writers prune a key's versions whenever they write it (an in-memory commit again right after
//! publishing); what they cannot prune yet (versions an open snapshot still reads, a durable
//! commit's garbage, values with a deadline) they *mark* here. A
//! background thread wakes when something is marked, when the oldest snapshot closes, at the
//! next expiry deadline, and at least once a second, and prunes the marked keys in small
//! batches under the commit lock, so it never holds writers up for long. Expired values are
//! invisible to reads from their deadline on whether or not they have been reclaimed.
//!
//! The bookkeeping is bounded whatever the write rate: the expiry heap holds one live entry per
//! key (the key's latest deadline; an overwrite leaves the old entry stale, and the heap is
//! rebuilt from the live entries once stale ones outnumber them), and the queue of marked keys
//! holds at most [`QUEUE_MAX`] keys. Past that, marking stops and a pass sweeps every key
//! instead (at most once per [`SWEEP_INTERVAL`]), which is also what happens without a
//! background thread when nothing drains the queue until
//! [`Database::reclaim_now`](crate::Database::reclaim_now).
//!
//! Keys a pass could not prune because an open snapshot still reads their old versions are
//! *parked*, not queued again: they are retried when the oldest snapshot closes, so a long-lived
//! snapshot costs one visit per parked key per close, not a pass over them every few
//! milliseconds. The parked set is bounded like the queue.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crossbeam_epoch as epoch;
use smallvec::SmallVec;

use crate::inner::Inner;
use crate::key_bytes::KeyBytes;
use crate::map::Slot;
use crate::snapshot::Retention;
use crate::version::{Chain, VersionRef, now_ms};

/// Keys pruned per hold of the commit lock.
const BATCH: usize = 256;
/// How long the thread lets marks accumulate before a pass.
const BATCH_WINDOW: Duration = Duration::from_millis(5);
/// Longest sleep between passes.
const IDLE_WAKE: Duration = Duration::from_secs(1);
/// Most keys the queue of marked keys holds. Past it, marking stops and the next pass sweeps
/// the whole map instead.
pub(crate) const QUEUE_MAX: usize = 8192;
/// Shortest time between two background sweeps of the whole map (an explicit `reclaim_now`
/// always sweeps).
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// Stale heap entries tolerated beyond the live ones before the heap is rebuilt.
const EXPIRY_SLACK: usize = 64;

#[derive(Default)]
struct State {
    /// Deadlines by time; an entry whose deadline is not its key's entry in `deadlines` is
    /// stale (the key was written again) and is skipped.
    expiry: BinaryHeap<Reverse<(u64, KeyBytes)>>,
    /// Each key's latest deadline: at most one live heap entry per key.
    deadlines: HashMap<KeyBytes, u64>,
    shutdown: bool,
}

impl State {
    /// Rebuilds the heap from the live deadlines once stale entries outnumber them, so a key
    /// written over and over with an expiry holds O(1) entries, not one per write.
    fn compact(&mut self) {
        if self.expiry.len() > 2 * self.deadlines.len() + EXPIRY_SLACK {
            self.expiry = self
                .deadlines
                .iter()
                .map(|(k, d)| Reverse((*d, k.clone())))
                .collect();
        }
    }
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Keys to prune, in marking order, possibly repeated (a pass sorts and dedups them), at
    /// most [`QUEUE_MAX`]. Apart from the state so marking never waits for the thread's
    /// bookkeeping.
    garbage: Mutex<Vec<KeyBytes>>,
    /// Set when the queue overflowed: marking has stopped and the next pass sweeps every key.
    sweep: AtomicBool,
    /// Set when a key is marked since the last pass.
    marked: AtomicBool,
    /// Set by the marking that found `marked` clear: the next commit wakes the thread, once.
    wake_requested: AtomicBool,
    /// Set when a pass left keys it could not prune yet (an open snapshot needed them), so a
    /// closing snapshot knows whether waking the thread is worth it.
    leftover: AtomicBool,
    /// Keys an open snapshot kept from being pruned, retried once a snapshot closes; at most
    /// [`QUEUE_MAX`] (past it, cleared and a sweep requested for the retry).
    parked: Mutex<Vec<KeyBytes>>,
    /// Set when `parked` overflowed: the retry sweeps every key.
    parked_overflow: AtomicBool,
    /// Set by a closing snapshot: the next pass retries the parked keys.
    retry_parked: AtomicBool,
    /// Bumped by every closing oldest snapshot, so a pass that parks keys can tell whether
    /// one closed while it ran (it then found `leftover` still clear and woke nobody).
    closes: AtomicU64,
    /// When the last background sweep ran, to space them by [`SWEEP_INTERVAL`].
    last_sweep: Mutex<Option<Instant>>,
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

    /// Queues `key` for pruning. A key marked twice in a row is queued once; a full queue is
    /// deduplicated, and if that does not halve it, dropped in favour of a sweep.
    pub(crate) fn mark(&self, key: KeyBytes) {
        if !self.shared.sweep.load(Ordering::Acquire) {
            let mut garbage = self.shared.garbage.lock();
            if garbage.last() != Some(&key) {
                enqueue(&self.shared, &mut garbage, std::iter::once(key));
            }
        }
        if !self.shared.marked.swap(true, Ordering::AcqRel) {
            self.shared.wake_requested.store(true, Ordering::Release);
        }
    }

    /// Queues `key` for pruning at `deadline` (Unix ms), replacing its earlier deadline.
    pub(crate) fn schedule_expiry(&self, deadline: u64, key: KeyBytes) {
        let mut state = self.shared.state.lock();
        if state.deadlines.insert(key.clone(), deadline) == Some(deadline) {
            return; // its heap entry is already there
        }
        let earliest = state
            .expiry
            .peek()
            .is_none_or(|Reverse((d, _))| deadline < *d);
        state.expiry.push(Reverse((deadline, key)));
        state.compact();
        if earliest {
            self.shared.wake.notify_one();
        }
    }

    /// Forgets `key`'s deadline: it was written again without one (or deleted). Its heap
    /// entry goes stale; the versions it leaves behind are marked as usual.
    pub(crate) fn cancel_expiry(&self, key: &KeyBytes) {
        let mut state = self.shared.state.lock();
        if state.deadlines.remove(key).is_some() {
            state.compact();
        }
    }

    /// Sizes of the bookkeeping: (keys queued for pruning, keys parked until a snapshot
    /// closes, expiry heap entries).
    pub(crate) fn queue_sizes(&self) -> (usize, usize, usize) {
        let queued = self.shared.garbage.lock().len();
        let parked = self.shared.parked.lock().len();
        (queued, parked, self.shared.state.lock().expiry.len())
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

    /// Wakes the thread to retry the parked keys if a pass left keys an open snapshot needed
    /// (the oldest snapshot closed).
    pub(crate) fn wake_if_leftover(&self) {
        self.shared.closes.fetch_add(1, Ordering::AcqRel);
        if self.shared.leftover.swap(false, Ordering::AcqRel) {
            self.shared.retry_parked.store(true, Ordering::Release);
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

/// Appends `keys` to the queue, keeping it at most [`QUEUE_MAX`]: a full queue is sorted and
/// deduplicated, and if it is still over half full, it is dropped and a sweep requested.
fn enqueue(shared: &Shared, queue: &mut Vec<KeyBytes>, keys: impl IntoIterator<Item = KeyBytes>) {
    for key in keys {
        if queue.len() >= QUEUE_MAX {
            queue.sort_unstable();
            queue.dedup();
            if queue.len() > QUEUE_MAX / 2 {
                queue.clear();
                queue.shrink_to(QUEUE_MAX);
                shared.sweep.store(true, Ordering::Release);
                return;
            }
        }
        queue.push(key);
    }
}

/// Drops `leftover` once it holds more than [`QUEUE_MAX`] keys; says whether it did.
fn cap(leftover: &mut Vec<KeyBytes>) -> bool {
    if leftover.len() > QUEUE_MAX {
        leftover.clear();
        leftover.shrink_to(QUEUE_MAX);
        return true;
    }
    false
}

/// Adds `keys` to the parked set, keeping it at most [`QUEUE_MAX`] like [`enqueue`]: past it,
/// the set is dropped and the retry sweeps instead.
fn park(shared: &Shared, keys: Vec<KeyBytes>) {
    let mut parked = shared.parked.lock();
    parked.extend(keys);
    if parked.len() > QUEUE_MAX {
        parked.sort_unstable();
        parked.dedup();
        if parked.len() > QUEUE_MAX / 2 {
            parked.clear();
            parked.shrink_to(QUEUE_MAX);
            shared.parked_overflow.store(true, Ordering::Release);
        }
    }
}

impl Inner {
    /// Prunes every marked key and every key whose expiry is due, or with `all` (or after
    /// the queue overflowed) every key in the map (`Database::reclaim_now`). Either way only
    /// what no reader needs is dropped.
    pub(crate) fn reclaim_pass(&self, all: bool) {
        let shared = &self.reclaimer.shared;
        let _one_pass_at_a_time = shared.pass.lock();
        let now = now_ms();
        let closes = shared.closes.load(Ordering::Acquire);
        let mut keys: Vec<KeyBytes> = std::mem::take(&mut *shared.garbage.lock());
        let mut sweep_wanted = shared.sweep.swap(false, Ordering::AcqRel);
        if all || shared.retry_parked.swap(false, Ordering::AcqRel) {
            keys.append(&mut shared.parked.lock());
            sweep_wanted |= shared.parked_overflow.swap(false, Ordering::AcqRel);
        }
        let sweep = all || (sweep_wanted && self.sweep_due());
        if sweep_wanted && !sweep {
            // Too soon after the last sweep: keep the request for a later pass (the thread
            // wakes at least every IDLE_WAKE), and meanwhile prune what was queued.
            shared.sweep.store(true, Ordering::Release);
        }
        let queued = keys.len();
        {
            let mut state = shared.state.lock();
            while let Some(Reverse((deadline, _))) = state.expiry.peek() {
                if *deadline > now {
                    break;
                }
                if let Some(Reverse((deadline, key))) = state.expiry.pop()
                    && state.deadlines.get(&key) == Some(&deadline)
                {
                    state.deadlines.remove(&key);
                    keys.push(key);
                }
            }
        }
        // A value reaching its deadline is a change its watches report.
        if let Some(expired) = keys.get(queued..) {
            self.watchers
                .notify_after_publish(expired.iter().map(KeyBytes::as_slice));
        }
        let mut leftover = Vec::new();
        // Past QUEUE_MAX leftover keys (a long snapshot pins much of the map), stop collecting
        // them: the retry sweeps instead, and the pass never holds more than that in memory.
        let mut overflow = false;
        if sweep {
            // Every key is visited, so the queue and the due deadlines need no separate pass.
            let mut after: Option<KeyBytes> = None;
            loop {
                let batch = self.map.keys_after(after.as_deref(), BATCH);
                let Some(last) = batch.last().cloned() else {
                    break;
                };
                self.prune_batch(&batch, now, &mut leftover);
                overflow |= cap(&mut leftover);
                after = Some(last);
            }
        } else {
            keys.sort_unstable();
            keys.dedup();
            for batch in keys.chunks(BATCH) {
                self.prune_batch(batch, now, &mut leftover);
                overflow |= cap(&mut leftover);
            }
        }
        // Lists replaced by overwrites are not marked; free the ones readers have let go, so
        // an idle database does not keep them until its next writes.
        self.retired.collect();
        if overflow {
            shared.parked_overflow.store(true, Ordering::Release);
        }
        if !leftover.is_empty() || overflow {
            park(shared, leftover);
            shared.leftover.store(true, Ordering::Release);
            // An oldest snapshot that closed during this pass found `leftover` clear: retry
            // at once rather than wait for the next close.
            if shared.closes.load(Ordering::Acquire) != closes {
                self.reclaimer.wake_if_leftover();
            }
        }
    }

    /// Whether a background sweep may run now; if so, records that it does.
    fn sweep_due(&self) -> bool {
        let mut last = self.reclaimer.shared.last_sweep.lock();
        let due = last.is_none_or(|t| t.elapsed() >= SWEEP_INTERVAL);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    /// Prunes `batch` under one hold of the commit lock; keys still holding garbage (an open
    /// snapshot needs them) go to `leftover`.
    fn prune_batch(&self, batch: &[KeyBytes], now: u64, leftover: &mut Vec<KeyBytes>) {
        let _commit = self.commit.lock();
        let retention = self.retention();
        for key in batch {
            if self.prune(key, &retention, now) {
                leftover.push(key.clone());
            }
        }
    }

    /// Everything reclaimable now.
    pub(crate) fn reclaim_all(&self) {
        self.reclaim_pass(true);
        // Replaced version lists are freed once the epoch has moved on past every reader
        // that could hold them: a few collections do it when no other thread stays pinned.
        for _ in 0..16 {
            if self.retired.len() == 0 {
                break;
            }
            self.retired.collect();
            std::thread::yield_now();
        }
    }

    /// Prunes one key's list to what readers need (`retention`), and removes the key if
    /// nothing live is left. Called with the commit lock held. Returns whether the key still
    /// holds garbage (more than one version, or a dead one).
    pub(crate) fn prune(&self, key: &[u8], retention: &Retention, now: u64) -> bool {
        match self.map.get(key) {
            Some(slot) => self.prune_slot(&slot, retention, &mut Some(now)),
            None => false,
        }
    }

    /// [`Inner::prune`] on a slot already found.
    pub(crate) fn prune_slot(
        &self,
        slot: &Slot<'_>,
        retention: &Retention,
        now: &mut Option<u64>,
    ) -> bool {
        if slot.is_removed() {
            return false;
        }
        let guard = epoch::pin();
        let old = slot.cell().load(&guard);
        let mut versions: SmallVec<[VersionRef<'_>; 1]> = retention.keep(old).collect();
        // A dead version (tombstone or expired) at the end of the list reads the same as no
        // version at all, so drop it, but only once no snapshot older than it is open: a
        // transaction reading at such a snapshot learns from it that the key changed (with
        // the slot gone, its commit-time range check would see nothing). A transaction that
        // read a value while it was live carries the value's deadline in its range check, so
        // expired values need not wait for readers.
        let mut dead = |v: &VersionRef<'_>| {
            v.value.is_none()
                || v.expires_at
                    .is_some_and(|d| d <= *now.get_or_insert_with(now_ms))
        };
        let oldest_reader = retention
            .points
            .iter()
            .copied()
            .min()
            .unwrap_or(retention.visible)
            .min(retention.visible);
        while versions
            .last()
            .is_some_and(|last| dead(last) && last.version <= oldest_reader)
        {
            versions.pop();
        }
        if versions.is_empty() {
            slot.remove();
            return false;
        }
        let still_garbage = versions.len() > 1 || versions.iter().any(&mut dead);
        if cfg!(debug_assertions) {
            retention.debug_assert_kept(old, &versions, *now.get_or_insert_with(now_ms));
        }
        if versions.len() != old.len() {
            slot.cell()
                .store(Some(Chain::build(versions, None)), &self.retired);
        }
        still_garbage
    }
}
