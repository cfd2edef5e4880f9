//! Serializable transactions over any [`Store`].
//!
//! A transaction reads from one snapshot and records what it read: each key read becomes the
//! check "this key still has the versionstamp it was read with (or is still absent)", each list
//! the condition "no key of the range it covered has a version newer than the snapshot".
//! Writes are buffered and see each other (read-your-writes). At commit, the conditions and the
//! writes go to the store as one atomic operation; if any condition fails, something the
//! transaction read has changed, so the closure runs again on a fresh snapshot, after a
//! randomised exponential backoff. Because every commit is serialised by the store and a
//! transaction only commits if its whole read set is unchanged at that point, transactions are
//! serializable in versionstamp order.
//!
//! A key read is an ordinary versionstamp [`Check`] rather than a one-key range condition:
//! the store looks the key up once for the check and for a write of the same key, and a
//! transaction that read only keys holds no snapshot while it commits, so the versions it
//! overwrites are not kept for it. Versionstamps are never reused, so "the same versionstamp"
//! means "unchanged". Reads that do not fit the check limits (see [`Transaction::get_raw`])
//! stay range conditions.
//!
//! Expiry is a change like any other: a value that was live when read and has expired by the
//! commit makes the commit conflict (a check sees an expired value as absent; a list's condition
//! carries the earliest deadline it returned), so the transaction retries and sees the value
//! gone.

use std::marker::PhantomData;
use std::time::Duration;

use tuplekv_codec::{ByteRange, Key, Selector, encode_key};

use crate::atomic::{AtomicWrite, Check, CommitResult, Expiry, Mutation, MutationKind, RangeCheck};
use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::limits::{
    CHECKS_MAX, KEY_SIZE_MAX_WRITE, TOTAL_MUTATION_SIZE_MAX, TRANSACTION_ATTEMPTS_MAX,
};
use crate::list::{ListIter, ListOptions};
use crate::store::{Entry, ReadView, Store};
use crate::value::{Value, Versionstamp};
use crate::version::now_ms;

/// How a transaction retries.
#[derive(Debug, Clone)]
pub struct TransactionOptions {
    /// Most times the closure runs (at least 1).
    pub max_attempts: u32,
    /// Backoff before the second attempt; it doubles each time, with jitter.
    pub initial_backoff: Duration,
    /// Longest backoff.
    pub max_backoff: Duration,
}

impl Default for TransactionOptions {
    fn default() -> Self {
        TransactionOptions {
            max_attempts: TRANSACTION_ATTEMPTS_MAX,
            initial_backoff: Duration::from_micros(50),
            max_backoff: Duration::from_millis(20),
        }
    }
}

/// A transaction in progress; see `Database::transaction`.
///
/// Values read back from the transaction's own buffered writes carry
/// [`Versionstamp::ZERO`]: they have no commit yet.
pub struct Transaction<'s, S: Store> {
    _store: PhantomData<&'s S>,
    snapshot: S::Snapshot,
    /// A read of the snapshot failed with a transient error ([`Error::is_transient`]): if the
    /// closure gives up, the transaction runs again instead.
    transient: bool,
    reads: Vec<RangeCheck>,
    /// Keys read, each once, with what the snapshot held: checks at commit.
    points: Vec<PointRead>,
    write: AtomicWrite,
}

/// One key a transaction read: its versionstamp then (`None`: absent or expired), and the
/// deadline of the value read, for a read that has to stay a range condition.
struct PointRead {
    key: KeyBytes,
    versionstamp: Option<Versionstamp>,
    expires_at: Option<u64>,
}

impl<'s, S: Store> Transaction<'s, S> {
    fn new(store: &'s S) -> Self {
        let snapshot = store.transaction_snapshot();
        Transaction {
            _store: PhantomData,
            snapshot,
            transient: false,
            reads: Vec::new(),
            points: Vec::new(),
            write: AtomicWrite::default(),
        }
    }

    /// The versionstamp of the snapshot the transaction reads (asked of the store when
    /// needed: a remote store fixes it at the snapshot's first read).
    pub fn snapshot_versionstamp(&self) -> Versionstamp {
        S::snapshot_versionstamp(&self.snapshot)
    }

    /// Notes a read's transient failure (see [`Transaction::transient`]) and passes it on.
    fn noted<T>(&mut self, read: Result<T, Error>) -> Result<T, Error> {
        if let Err(e) = &read {
            self.transient |= e.is_transient();
        }
        read
    }

    /// Records that `[start, end)` was read and returned values expiring at `expires_at` at
    /// the earliest. A range read twice keeps the earlier deadline (the reads saw one snapshot,
    /// so they agree; this only guards against a caller-visible difference).
    fn record_read(&mut self, start: Vec<u8>, end: Vec<u8>, expires_at: Option<u64>) {
        let (start, end) = (KeyBytes::from(start), KeyBytes::from(end));
        let since = self.snapshot_versionstamp();
        match self
            .reads
            .iter_mut()
            .find(|r| r.start == start && r.end == end)
        {
            Some(read) => read.expires_at = earliest(read.expires_at, expires_at),
            None => self.reads.push(RangeCheck {
                start,
                end,
                since,
                expires_at,
            }),
        }
    }

    /// Reads `key`, seeing this transaction's own writes.
    ///
    /// # Errors
    /// A key over the read limit, or `sum`/`min`/`max` buffered on a non-`U64` value
    /// ([`Error::NotU64`], naming the buffered mutation's index and its key).
    pub fn get(&mut self, key: &Key) -> Result<Option<Entry>, Error> {
        self.get_raw(&encode_key(key))
    }

    /// [`Transaction::get`] on an encoded key.
    ///
    /// The read commits as a versionstamp check on `key`, which does not count against the
    /// caller's [`CHECKS_MAX`]: past that many checks in all, or for a key too long to write
    /// (a read may be one byte longer), or when the checks' bytes would push the commit over
    /// [`TOTAL_MUTATION_SIZE_MAX`], the read is checked as the range `[key, key ++ 00)`
    /// instead, which means the same.
    ///
    /// # Errors
    /// As [`Transaction::get`].
    pub fn get_raw(&mut self, key: &[u8]) -> Result<Option<Entry>, Error> {
        let base = self.snapshot.get_raw(key);
        let base = self.noted(base)?;
        // The snapshot does not change, so a second read of a key finds what the first did.
        if !self.points.iter().any(|p| p.key.as_slice() == key) {
            self.points.push(PointRead {
                key: KeyBytes::from(key),
                versionstamp: base.as_ref().map(|e| e.versionstamp),
                expires_at: base.as_ref().and_then(|e| e.expires_at),
            });
        }
        self.overlay(key, base)
    }

    /// Applies this transaction's buffered mutations of `key` to what the snapshot holds.
    fn overlay(&self, key: &[u8], base: Option<Entry>) -> Result<Option<Entry>, Error> {
        let mut current = base;
        // One clock reading for the buffered writes, as their commit takes one.
        let mut now = None;
        for (index, m) in self
            .write
            .mutations
            .iter()
            .enumerate()
            .filter(|(_, m)| m.key.as_slice() == key && writes_own_key(m))
        {
            let value = current.as_ref().map(|e| &e.value);
            let next = crate::mutate::apply(
                m.kind.clone(),
                value,
                || *now.get_or_insert_with(now_ms),
                index,
                &m.key,
            )?;
            // A value set with a deadline already past is gone, as its commit would leave it.
            let live = next.filter(|(_, deadline)| {
                deadline.is_none_or(|d| d > *now.get_or_insert_with(now_ms))
            });
            current = live.map(|(value, expires_at)| Entry {
                key: KeyBytes::from(key),
                value,
                versionstamp: Versionstamp::ZERO,
                expires_at,
            });
        }
        Ok(current)
    }

    /// Lists like `Database::list`, from the transaction's snapshot plus its own writes, and
    /// returns every entry (the transaction must know what it read).
    ///
    /// # Errors
    /// An invalid selector, cursor or option.
    pub fn list(&mut self, selector: &Selector, options: ListOptions) -> Result<Vec<Entry>, Error> {
        if !self.snapshot.reads_one_state() {
            // Its commit would need a range check, which such a store cannot make.
            return Err(Error::Unsupported {
                operation: "a list inside a transaction",
                needs: "a store whose reads see one state (a remote server with tuplekv's extension)",
            });
        }
        let limit = options.limit;
        let reverse = options.reverse;
        let range = selector.resume(options.cursor.as_deref().unwrap_or(""), reverse)?;
        // Read enough that buffered deletes cannot leave the page short.
        let buffered: Vec<KeyBytes> = self
            .write
            .mutations
            .iter()
            .filter(|m| range.contains(&m.key) && writes_own_key(m))
            .map(|m| m.key.clone())
            .collect();
        // Saturating: `limit: Some(usize::MAX)` means "all" and must not overflow.
        let read_limit = limit.map(|l| l.saturating_add(buffered.len()));
        let read_options = ListOptions {
            limit: read_limit,
            cursor: None,
            ..options
        };
        let exact = Selector::Range {
            start: range.start.clone(),
            end: range.end.clone(),
        };
        let read = ListIter::new(self.snapshot.clone(), exact, read_options)
            .and_then(|mut it| it.read_all());
        let mut entries: Vec<Entry> = self.noted(read)?;
        // What was read: the whole range, or up to the last entry when the limit stopped it.
        let full = read_limit.is_none_or(|l| entries.len() < l);
        let covered = match (full, entries.last()) {
            (false, Some(last)) if reverse => ByteRange {
                start: last.key.to_vec(),
                end: range.end.clone(),
            },
            (false, Some(last)) => {
                let mut end = last.key.to_vec();
                end.push(0);
                ByteRange {
                    start: range.start.clone(),
                    end,
                }
            }
            _ => range.clone(),
        };
        let expires_at = entries.iter().filter_map(|e| e.expires_at).reduce(u64::min);
        self.record_read(covered.start.clone(), covered.end.clone(), expires_at);
        // Merge in this transaction's own writes.
        let mut keys: Vec<KeyBytes> = buffered;
        keys.sort();
        keys.dedup();
        for key in keys.into_iter().filter(|k| covered.contains(k)) {
            let base = entries.iter().position(|e| e.key == key);
            let merged = self.overlay(&key, base.and_then(|i| entries.get(i).cloned()))?;
            match (base, merged) {
                (Some(i), Some(e)) => {
                    if let Some(slot) = entries.get_mut(i) {
                        *slot = e;
                    }
                }
                (Some(i), None) => {
                    entries.remove(i);
                }
                (None, Some(e)) => entries.push(e),
                (None, None) => {}
            }
        }
        entries.sort_by(|a, b| {
            if reverse {
                b.key.cmp(&a.key)
            } else {
                a.key.cmp(&b.key)
            }
        });
        if let Some(l) = limit {
            entries.truncate(l);
        }
        Ok(entries)
    }

    /// Buffers a set.
    pub fn set(&mut self, key: &Key, value: impl Into<Value>) {
        self.push(
            key,
            MutationKind::Set {
                value: value.into(),
                expiry: None,
            },
        );
    }

    /// Buffers a set with expiry.
    pub fn set_with_expiry(&mut self, key: &Key, value: impl Into<Value>, expire_in: Duration) {
        self.push(
            key,
            MutationKind::Set {
                value: value.into(),
                expiry: Some(Expiry::In(expire_in)),
            },
        );
    }

    /// Buffers a delete.
    pub fn delete(&mut self, key: &Key) {
        self.push(key, MutationKind::Delete);
    }

    /// Buffers a wrapping `U64` sum.
    pub fn sum(&mut self, key: &Key, n: u64) {
        self.push(key, MutationKind::Sum(n));
    }

    /// Buffers a `U64` min.
    pub fn min(&mut self, key: &Key, n: u64) {
        self.push(key, MutationKind::Min(n));
    }

    /// Buffers a `U64` max.
    pub fn max(&mut self, key: &Key, n: u64) {
        self.push(key, MutationKind::Max(n));
    }

    /// Adds an explicit check (rarely needed: reads are checked already).
    pub fn check(&mut self, key: &Key, versionstamp: Option<Versionstamp>) {
        self.write.checks.push(Check {
            key: KeyBytes::from(encode_key(key)),
            versionstamp,
        });
    }

    /// Buffers a mutation on an encoded key.
    pub fn mutate_raw(&mut self, key: &[u8], kind: MutationKind) {
        self.write.mutations.push(Mutation {
            key: KeyBytes::from(key),
            kind,
        });
    }

    fn push(&mut self, key: &Key, kind: MutationKind) {
        self.write.mutations.push(Mutation {
            key: KeyBytes::from(encode_key(key)),
            kind,
        });
    }

    /// Whether the keys this transaction read may have changed since, when its reads were
    /// not all of one state ([`ReadView::reads_one_state`]): then what a closure that gave up
    /// saw may never have been true at once. Asked of the store with commits of the key
    /// checks alone, [`CHECKS_MAX`] at a time (nothing is written); if every chunk holds,
    /// every key still had the value read when the first chunk committed, so the reads were
    /// all true then. A check commit that fails for another reason answers "no".
    fn reads_changed(&self, store: &S) -> bool {
        if self.snapshot.reads_one_state() || self.points.is_empty() {
            return false;
        }
        self.points.chunks(CHECKS_MAX).any(|chunk| {
            let write = AtomicWrite {
                checks: chunk
                    .iter()
                    .map(|p| Check {
                        key: p.key.clone(),
                        versionstamp: p.versionstamp,
                    })
                    .collect(),
                ..AtomicWrite::default()
            };
            matches!(store.commit(write), Ok(CommitResult::Conflict(_)))
        })
    }

    /// The commit, and the snapshot it read from if the commit has range checks. The caller
    /// keeps that snapshot registered until the commit is done: while it is, the store keeps
    /// every version (tombstones included) that tells the commit's range checks a key changed
    /// since. Checks compare with the newest version, so they need no snapshot.
    fn into_write(self) -> (AtomicWrite, Option<S::Snapshot>) {
        let mut write = self.write;
        write.range_checks = self.reads;
        // Key reads become checks while the commit stays within the limits `validate` applies
        // to checks, counted the way it counts them, so a commit that fails validation fails
        // with the same error and numbers as without them.
        let mut room = CHECKS_MAX.saturating_sub(write.checks.len());
        let mut total = write_size(&write);
        for p in self.points {
            let size = p.key.len();
            if room > 0
                && size > 0
                && size <= KEY_SIZE_MAX_WRITE
                && total.saturating_add(size) <= TOTAL_MUTATION_SIZE_MAX
            {
                room -= 1;
                total += size;
                write.checks.push(Check {
                    key: p.key,
                    versionstamp: p.versionstamp,
                });
            } else {
                let mut end = Vec::with_capacity(size + 1);
                end.extend_from_slice(&p.key);
                end.push(0);
                write.range_checks.push(RangeCheck {
                    start: p.key,
                    end: KeyBytes::from(end),
                    since: S::snapshot_versionstamp(&self.snapshot),
                    expires_at: p.expires_at,
                });
            }
        }
        let snapshot = if write.range_checks.is_empty() {
            None
        } else {
            Some(self.snapshot)
        };
        (write, snapshot)
    }
}

/// The bytes `validate` counts against [`TOTAL_MUTATION_SIZE_MAX`]: check keys, mutation keys,
/// and each value with its key again.
fn write_size(write: &AtomicWrite) -> usize {
    let checks: usize = write.checks.iter().map(|c| c.key.len()).sum();
    let mutations: usize = write
        .mutations
        .iter()
        .map(|m| match m.kind.value_size() {
            Some(size) => 2 * m.key.len() + size,
            None => m.key.len(),
        })
        .sum();
    checks.saturating_add(mutations)
}

/// Runs `f` until its commit succeeds, with backoff, at most `options.max_attempts` times.
pub(crate) fn run_transaction<S, T, E, F>(
    store: &S,
    options: &TransactionOptions,
    mut f: F,
) -> Result<T, E>
where
    S: Store,
    E: From<Error>,
    F: FnMut(&mut Transaction<'_, S>) -> Result<T, E>,
{
    let attempts = options.max_attempts.max(1);
    let mut backoff = options.initial_backoff;
    for attempt in 1..=attempts {
        let mut tx = Transaction::new(store);
        let out = match f(&mut tx) {
            // An async round is suspended: what follows would be discarded.
            Err(e) if store.interrupted() => return Err(e),
            Ok(out) => out,
            // A read failed for the moment: run again, or report it after the last attempt.
            Err(e) if tx.transient => {
                if attempt < attempts {
                    pause(store, &mut backoff, options);
                    continue;
                }
                return Err(e);
            }
            // The closure gave up on reads that were not of one state and are no longer
            // current: its reason may never have been true; run again, or report a conflict.
            Err(e) if tx.reads_changed(store) => {
                drop(e);
                if attempt < attempts {
                    pause(store, &mut backoff, options);
                    continue;
                }
                return Err(Error::TransactionConflict { attempts }.into());
            }
            Err(e) => return Err(e),
        };
        let (write, snapshot) = tx.into_write();
        let result = store.commit(write);
        drop(snapshot);
        if store.interrupted() {
            return Err(result.err().unwrap_or(Error::Suspended).into());
        }
        let result = match result {
            // Nothing was written (the store was unreachable, or dropped the snapshot the
            // range checks compare with): run again on a fresh snapshot.
            Err(e) if e.is_transient() && attempt < attempts => {
                pause(store, &mut backoff, options);
                continue;
            }
            result => result?,
        };
        match result {
            CommitResult::Committed { .. } => return Ok(out),
            CommitResult::Conflict(_) if attempt < attempts => pause(store, &mut backoff, options),
            CommitResult::Conflict(_) => {}
        }
    }
    Err(Error::TransactionConflict { attempts }.into())
}

/// Waits `backoff` with jitter ([`Store::backoff`]), then doubles it up to the options'
/// maximum.
fn pause<S: Store>(store: &S, backoff: &mut Duration, options: &TransactionOptions) {
    let jitter = backoff.mul_f64(fastrand::f64());
    store.backoff(*backoff / 2 + jitter);
    *backoff = (*backoff * 2).min(options.max_backoff);
}

/// The earlier of two optional deadlines (`None`: never).
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether `m` writes the key it names: a versionstamped set names its key's prefix, and its
/// key is known only once it commits, so a transaction's own reads cannot see it.
fn writes_own_key(m: &Mutation) -> bool {
    !matches!(m.kind, MutationKind::SetSuffixVersionstampedKey { .. })
}
