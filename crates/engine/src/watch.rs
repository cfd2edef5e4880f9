//! Watching keys: a [`Watch`] yields the current entries of up to [`WATCH_KEYS_MAX`] keys,
//! then a new state each time one of them changes (Deno's `kv.watch`).
//!
//! A commit that writes a watched key, once published, marks that key's watches *dirty* and
//! wakes them; a watch that wakes reads its keys from a fresh snapshot. So a slow watcher gets
//! the latest state, never a backlog (states in between are collapsed), and a commit's cost is
//! one flag per watch of a key it wrote, never a wait on a watcher. With no watch open, a
//! commit pays one relaxed atomic load. Expiry counts as a change: the background reclaimer
//! wakes the watches of keys whose values reach their deadline (so a database opened without
//! [`background_reclaim`](crate::Options::background_reclaim) reports an expiry only with the
//! next write of the key or [`reclaim_now`](crate::Database::reclaim_now)).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering, fence};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use smallvec::SmallVec;

use crate::error::Error;
use crate::inner::Inner;
use crate::key_bytes::KeyBytes;
use crate::limits::{KEY_SIZE_MAX_WRITE, WATCH_KEYS_MAX};
use crate::snapshot::Snapshot;
use crate::store::{Entry, ReadView};
use crate::value::Versionstamp;

/// What one watch waits on: set dirty by commits, read and cleared by the watch.
#[derive(Default)]
struct Signal {
    state: Mutex<SignalState>,
    wake: Condvar,
}

#[derive(Default)]
struct SignalState {
    /// A watched key changed since the watch last read.
    dirty: bool,
    /// The database was closed: the watch ends.
    closed: bool,
    /// The task awaiting [`KeyWatch::next`], if any.
    waker: Option<Waker>,
}

impl Signal {
    fn raise(&self, close: bool) {
        let waker = {
            let mut state = self.state.lock();
            state.dirty = true;
            state.closed |= close;
            state.waker.take()
        };
        self.wake.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The watches of one database, by key.
#[derive(Default)]
pub(crate) struct Watchers {
    /// Open watches; zero lets commits skip the registry altogether.
    open: AtomicUsize,
    by_key: RwLock<HashMap<KeyBytes, SmallVec<[Arc<Signal>; 1]>>>,
    /// Set once the last handle is gone; later watches end at once.
    closed: Mutex<bool>,
}

impl Watchers {
    /// Whether any watch is open: the one load an in-memory commit makes when nobody
    /// watches. Read under the commit lock, after publishing: a watch registers under that
    /// lock too, so either the commit sees it, or the watch's first read sees the commit.
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.open.load(Ordering::Relaxed) != 0
    }

    /// Wakes the watches of `keys`, which a commit published without the commit lock (a log
    /// flush) or an expiry changed. The fence pairs with the one in [`Watchers::register`]:
    /// either this sees the new watch, or the watch's first read sees what was published.
    pub(crate) fn notify_after_publish<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) {
        fence(Ordering::SeqCst);
        if self.open.load(Ordering::SeqCst) != 0 {
            self.notify(keys);
        }
    }

    /// Wakes the watches of `keys`, which a published commit changed.
    pub(crate) fn notify<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) {
        let by_key = self.by_key.read();
        for key in keys {
            for signal in by_key.get(key).into_iter().flatten() {
                signal.raise(false);
            }
        }
    }

    /// Ends every watch: the last database handle is gone.
    pub(crate) fn close(&self) {
        *self.closed.lock() = true;
        for signal in self.by_key.read().values().flatten() {
            signal.raise(true);
        }
    }

    /// Registers `signal` for `keys`; `false` if the database is closed (the watch is ended
    /// at once). Called with the commit lock held (see [`Watchers::active`]).
    fn register(&self, keys: &[KeyBytes], signal: &Arc<Signal>) -> bool {
        let closed = self.closed.lock();
        if *closed {
            signal.raise(true);
            return false;
        }
        let mut by_key = self.by_key.write();
        for key in keys {
            by_key
                .entry(key.clone())
                .or_default()
                .push(Arc::clone(signal));
        }
        drop(by_key);
        self.open.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence in `notify_after_publish`.
        fence(Ordering::SeqCst);
        drop(closed);
        true
    }

    /// Removes a watch [`Watchers::register`] added.
    fn unregister(&self, keys: &[KeyBytes], signal: &Arc<Signal>) {
        let mut by_key = self.by_key.write();
        for key in keys {
            if let Some(list) = by_key.get_mut(key) {
                if let Some(i) = list.iter().position(|s| Arc::ptr_eq(s, signal)) {
                    list.swap_remove(i);
                }
                if list.is_empty() {
                    by_key.remove(key);
                }
            }
        }
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A new state of a [`Watch`]'s keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchUpdate {
    /// Each watched key's entry (`None` if absent, deleted or expired), in the order the keys
    /// were given, all read from one snapshot.
    pub entries: Vec<Option<Entry>>,
    /// For each key, whether its entry differs from the one the previous update gave (by
    /// versionstamp; every key counts as changed in the first update).
    pub changed: Vec<bool>,
    /// The versionstamp of the snapshot the entries were read at.
    pub versionstamp: Versionstamp,
}

/// What a [`Store`](crate::Store)'s watch does: yields the state of its keys, then each new
/// state (see [`Watch`], the engine's).
pub trait KeyWatch: Send {
    /// `Ready` with the next state (the current one the first time, then the state after a
    /// watched key changed), `Ready(None)` once the store is closed, or `Pending` with `cx`'s
    /// waker registered.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<WatchUpdate>>;

    /// The next state, as a future (cancel-safe: dropping it loses no change).
    fn next(&mut self) -> impl Future<Output = Option<WatchUpdate>> + Send + '_
    where
        Self: Sized,
    {
        std::future::poll_fn(move |cx| self.poll_next(cx))
    }
}

impl KeyWatch for Watch {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<WatchUpdate>> {
        loop {
            {
                let mut state = self.signal.state.lock();
                if state.closed {
                    return Poll::Ready(None);
                }
                if !state.dirty && self.last.is_some() {
                    state.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                state.dirty = false;
            }
            if let Some(update) = self.read() {
                return Poll::Ready(Some(update));
            }
        }
    }
}

/// A watch of up to [`WATCH_KEYS_MAX`] keys, from
/// [`Store::watch_raw`](crate::Store::watch_raw) or [`Database::watch`](crate::Database::watch).
///
/// The first call of [`KeyWatch::next`] (or [`Watch::next_blocking`] and its kin) returns the current state
/// at once; each later call returns when a watched key has changed, with the latest state.
/// States in between may be skipped. The watch ends (`None`) once the last handle of the
/// database is closed or dropped. Dropping the watch unregisters it.
///
/// ```
/// use tuplekv_engine::{Database, key};
///
/// let db = Database::in_memory();
/// let mut watch = db.watch(&[key!["config"]])?;
/// let first = watch.next_blocking().expect("open");
/// assert_eq!(first.entries, vec![None]);
/// db.set(&key!["config"], b"v2")?;
/// let next = watch.next_blocking().expect("open");
/// assert!(next.changed[0]);
/// assert_eq!(next.entries[0].as_ref().map(|e| e.value.clone()), Some(b"v2".into()));
/// # Ok::<(), tuplekv_engine::Error>(())
/// ```
pub struct Watch {
    inner: Arc<Inner>,
    keys: Vec<KeyBytes>,
    signal: Arc<Signal>,
    /// The stamps the last update gave, `None` before the first.
    last: Option<Vec<Option<Versionstamp>>>,
    /// Whether it is in the registry (not when the database was already closed).
    registered: bool,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("keys", &self.keys).finish()
    }
}

impl Watch {
    /// Registers a watch of `keys` (encoded) on `inner`.
    pub(crate) fn new(inner: &Arc<Inner>, keys: Vec<KeyBytes>) -> Result<Watch, Error> {
        if keys.len() > WATCH_KEYS_MAX {
            return Err(Error::TooManyWatchedKeys { count: keys.len() });
        }
        if let Some(k) = keys.iter().find(|k| k.len() > KEY_SIZE_MAX_WRITE) {
            return Err(Error::KeyTooLargeForWrite { size: k.len() });
        }
        let signal = Arc::new(Signal::default());
        // Under the commit lock, so an in-memory commit either sees this watch when it checks
        // for watches (after publishing, under the lock) or is already published for the
        // watch's first read.
        let registered = {
            let _commit = inner.commit.lock();
            inner.watchers.register(&keys, &signal)
        };
        Ok(Watch {
            inner: Arc::clone(inner),
            keys,
            signal,
            last: None,
            registered,
        })
    }

    /// The watched keys, encoded.
    pub fn keys(&self) -> &[KeyBytes] {
        &self.keys
    }

    /// Whether the database was closed: every next state is `None` from now on.
    pub fn is_closed(&self) -> bool {
        self.signal.state.lock().closed
    }

    /// The next state, blocking the thread: at once the first time, then once a watched key
    /// changes; `None` when the database is closed. (In async code, use
    /// [`KeyWatch::next`].)
    pub fn next_blocking(&mut self) -> Option<WatchUpdate> {
        self.wait(None).flatten()
    }

    /// [`Watch::next_blocking`] giving up after `timeout`: `Err(())` if nothing changed in
    /// time.
    ///
    /// # Errors
    /// `Err(())` when the timeout passed first.
    #[allow(clippy::result_unit_err, reason = "the only failure is the timeout")]
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<WatchUpdate>, ()> {
        self.wait(Some(Instant::now() + timeout)).ok_or(())
    }

    /// The next state if one is ready now (a change since the last), without waiting.
    pub fn try_next(&mut self) -> Option<WatchUpdate> {
        self.wait(Some(Instant::now())).flatten()
    }

    /// Waits for a change (until `deadline`, if any): `None` on timeout, `Some(None)` once
    /// closed.
    fn wait(&mut self, deadline: Option<Instant>) -> Option<Option<WatchUpdate>> {
        loop {
            {
                let mut state = self.signal.state.lock();
                while !state.closed && !state.dirty && self.last.is_some() {
                    match deadline {
                        None => self.signal.wake.wait(&mut state),
                        Some(d) => {
                            if self.signal.wake.wait_until(&mut state, d).timed_out() {
                                return None;
                            }
                        }
                    }
                }
                if state.closed {
                    return Some(None);
                }
                state.dirty = false;
            }
            if let Some(update) = self.read() {
                return Some(Some(update));
            }
        }
    }

    /// Reads the keys from a fresh snapshot; `None` if no stamp differs from the last update
    /// (a change undone, or a wake-up for a state already reported).
    fn read(&mut self) -> Option<WatchUpdate> {
        let snapshot = Snapshot::register(&self.inner);
        let entries: Vec<Option<Entry>> = self
            .keys
            .iter()
            // Keys were checked against the write limit, below the read limit.
            .map(|k| snapshot.get_raw(k).ok().flatten())
            .collect();
        let stamps: Vec<Option<Versionstamp>> = entries
            .iter()
            .map(|e| e.as_ref().map(|e| e.versionstamp))
            .collect();
        let changed: Vec<bool> = match &self.last {
            None => vec![true; stamps.len()],
            Some(last) => last.iter().zip(&stamps).map(|(a, b)| a != b).collect(),
        };
        if self.last.is_some() && !changed.iter().any(|c| *c) {
            return None;
        }
        self.last = Some(stamps);
        Some(WatchUpdate {
            entries,
            changed,
            versionstamp: snapshot.versionstamp(),
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.registered {
            self.inner.watchers.unregister(&self.keys, &self.signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Database, key};

    #[test]
    fn dropping_the_last_watch_leaves_commits_nothing_to_look_up() {
        let db = Database::in_memory();
        assert!(!db.inner.watchers.active());
        let a = db.watch(&[key!["a"], key!["b"]]).expect("watch");
        let b = db.watch(&[key!["a"]]).expect("watch");
        assert!(db.inner.watchers.active());
        drop(a);
        assert!(db.inner.watchers.active(), "one is still open");
        assert_eq!(
            db.inner.watchers.by_key.read().len(),
            1,
            "only key a is left"
        );
        drop(b);
        assert!(!db.inner.watchers.active());
        assert!(db.inner.watchers.by_key.read().is_empty());
    }

    #[test]
    fn a_watch_of_no_keys_is_unregistered_when_dropped() {
        let db = Database::in_memory();
        let w = db.watch(&[]).expect("watch");
        assert!(db.inner.watchers.active());
        drop(w);
        assert!(
            !db.inner.watchers.active(),
            "commits stop looking for watches"
        );
    }
}
