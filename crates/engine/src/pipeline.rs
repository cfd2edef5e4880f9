//! The commit pipeline of the in-memory store: an operation is validated, its keys' map
//! slots are found without any lock ([`Inner::prepare`]), then under the commit lock its
//! checks are evaluated, its mutations staged (every error surfaces here, before anything is
//! written) and its versions written at `last + 1` ([`Inner::apply_write`]), and finally
//! `last + 1` is published ([`Inner::publish`]). An in-memory database publishes at once,
//! under the commit lock; a durable one hands the applied, unpublished commit to the group
//! commit (`group_commit.rs`), which publishes it once the log has it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use crossbeam_epoch as epoch;
use smallvec::SmallVec;

use crate::atomic::{
    AtomicWrite, Check, CommitResult, Conflict, Expiry, FailedCheck, Mutation, MutationKind,
    RangeCheck, versionstamped_key,
};
use crate::durable::record::FrameWriter;
use crate::error::Error;
use crate::inner::Inner;
use crate::key_bytes::KeyBytes;
use crate::limits::*;
use crate::limits::{check_read_key, check_write_key};
use crate::map::Slot;
use crate::mutate::{Staged, apply};
use crate::numbering::{SlotTarget, numbered_key};
use crate::snapshot::Retention;
use crate::value::{Value, Versionstamp};
use crate::version::{Chain, Version, VersionRef, Versions, now_ms};

/// Written into by [`Inner::apply_write`] when a commit is logged: its frame and the keys it
/// wrote (to roll back if the batch's log write fails).
#[derive(Default)]
pub(crate) struct LogSink {
    pub(crate) frames: FrameWriter,
    pub(crate) touched: Vec<KeyBytes>,
}

/// The map slots of one operation's keys, found by [`Inner::prepare`] before the commit lock
/// is taken, so two committers search the map in parallel and the lock is held only to check
/// and swap version lists. Indexed like the operation's checks and mutations; a delete's or
/// check's slot is `None` if the key was absent. Refreshed under the lock before use.
pub(crate) struct Slots<'a> {
    checks: SmallVec<[Option<Slot<'a>>; 4]>,
    mutations: SmallVec<[Option<Slot<'a>>; 4]>,
    /// Keys an in-memory commit left with a version readers no longer need once it is
    /// published (or a tombstone): pruned right after publishing, under the commit lock.
    written: SmallVec<[(KeyBytes, Slot<'a>); 2]>,
    /// Empty buffers allocated before the lock, one per key the operation may write, each
    /// with the room a packed list of its new version alone takes: under the lock a commit
    /// fills them in rather than allocate (an allocation that grows the heap faults pages in,
    /// and under the lock every other committer waits for it). A list that keeps older
    /// versions, or holds a large value, still allocates under the lock.
    spare: SmallVec<[Option<Vec<u8>>; 4]>,
}

/// Gives a value its shared (reference-counted) form now, next to its version list.
///
/// A `Bytes` made from a `Vec` (what `Value::from` builds) allocates its reference count on
/// its first clone. Left to the first reader, that small allocation lands wherever the
/// reader's allocator happens to be, and every later read of the value misses the cache on
/// it; made here, right after the key's version list is allocated, it usually sits beside
/// that list, which every read touches first (the allocator decides; nothing relies on it).
fn share(value: &Value) {
    if let Value::Bytes(b) | Value::V8(b) = value {
        drop(b.clone());
    }
}

/// The spare buffer (see [`Slots::spare`]) with exactly the room a packed list of `new` alone
/// takes, if one was allocated.
fn take_spare(spares: &mut SmallVec<[Option<Vec<u8>>; 4]>, new: &Version) -> Option<Vec<u8>> {
    let room = Chain::spare_for(&new.as_version_ref())?.capacity();
    let at = spares
        .iter()
        .position(|s| s.as_ref().is_some_and(|b| b.capacity() == room))?;
    spares.swap_remove(at)
}

/// Validates an operation against every limit, in Deno's order. Pure: nothing is read.
pub(crate) fn validate(write: &AtomicWrite) -> Result<(), Error> {
    if write.checks.len() > CHECKS_MAX {
        return Err(Error::TooManyChecks {
            count: write.checks.len(),
        });
    }
    if write.mutations.len() > MUTATIONS_MAX {
        return Err(Error::TooManyMutations {
            count: write.mutations.len(),
        });
    }
    let mut total = 0;
    let mut total_keys = 0;
    for check in &write.checks {
        check_write_key(&check.key)?;
        total += check.key.len();
    }
    for m in &write.mutations {
        check_write_key(&m.key)?;
        if matches!(m.kind, MutationKind::SetSuffixVersionstampedKey { .. }) {
            // The key it writes, not only its prefix, must fit the write limit.
            check_write_key_len(m.key.len() + VERSIONSTAMPED_KEY_SUFFIX_LEN)?;
        }
        total += m.key.len();
        if let Some(size) = m.kind.value_size() {
            if size > VALUE_SIZE_MAX {
                return Err(Error::ValueTooLarge { size });
            }
            total += m.key.len() + size;
            total_keys += m.key.len();
        }
        if let MutationKind::Set {
            expiry: Some(Expiry::In(d)),
            ..
        }
        | MutationKind::SetSuffixVersionstampedKey {
            expiry: Some(Expiry::In(d)),
            ..
        } = &m.kind
            && d.as_millis() > u128::from(EXPIRE_IN_MAX_MS)
        {
            return Err(Error::ExpireInTooLarge { ms: d.as_millis() });
        }
    }
    if total > TOTAL_MUTATION_SIZE_MAX {
        return Err(Error::TotalMutationSizeTooLarge { size: total });
    }
    if total_keys > TOTAL_KEY_SIZE_MAX {
        return Err(Error::TotalKeySizeTooLarge { size: total_keys });
    }
    for rc in &write.range_checks {
        check_read_key(&rc.start)?;
        // A point read of a key at the read limit covers [key, key ++ 00), one byte longer.
        let point = rc.end.len() == rc.start.len() + 1
            && rc.end.starts_with(&rc.start)
            && rc.end.ends_with(&[0]);
        if !point {
            check_read_key(&rc.end)?;
        }
    }
    crate::numbering::validate(write)
}

/// `i` as a slot target's index (operations are far below `u32::MAX` mutations).
fn index_u32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// `mutations` with each versionstamped set turned into a plain set of its final key, for a
/// commit at `version`, rewritten in place.
fn with_versionstamped_keys(mut mutations: Vec<Mutation>, version: u64) -> Vec<Mutation> {
    for m in &mut mutations {
        if let MutationKind::SetSuffixVersionstampedKey { value, expiry } = &mut m.kind {
            m.kind = MutationKind::Set {
                value: std::mem::replace(value, Value::U64(0)),
                expiry: *expiry,
            };
            m.key = versionstamped_key(&m.key, Versionstamp::from_version(version));
        }
    }
    mutations
}

/// A key an operation writes: what it leaves there, and its slot.
type StagedKey<'a> = (KeyBytes, Staged, Option<Slot<'a>>);

impl Inner {
    /// The value a key's slot has now, for mutations that read it. Called with the commit
    /// lock held, so every version in the map is published.
    fn current(slot: Option<&Slot<'_>>, now: &mut Option<u64>) -> Option<Value> {
        let guard = epoch::pin();
        slot?
            .cell()
            .load(&guard)
            .first()?
            .live_value(now)
            .map(|v| v.to_value())
    }

    /// The stamp of the value [`Inner::current`] returns, without copying the value.
    fn current_stamp(slot: Option<&Slot<'_>>, now: &mut Option<u64>) -> Option<Versionstamp> {
        let guard = epoch::pin();
        let newest = slot?.cell().load(&guard).first()?;
        newest.live_value(now)?;
        Some(Versionstamp::from_version(newest.version))
    }

    pub(crate) fn commit(&self, write: AtomicWrite) -> Result<CommitResult, Error> {
        validate(&write)?;
        // The map searches happen here, before the commit lock: under it, a commit only
        // compares and swaps version lists.
        let mut slots = self.prepare(&write);
        if let Some(log) = &self.log {
            return log.commit(self, write, &mut slots);
        }
        let mut last = self.commit.lock();
        let result = self.apply_write(write, &mut slots, &mut last, None);
        let committed = matches!(&result, Ok(r) if r.is_committed());
        if committed {
            self.publish(*last);
            self.prune_written(&mut slots);
        }
        // Checked after publishing and under the lock watches register under: with nobody
        // watching, this load is all a commit pays.
        let notify = committed && self.watchers.active();
        drop(last);
        if notify {
            // A delete of an absent key has no slot, and changed nothing.
            self.watchers
                .notify(slots.mutations.iter().flatten().map(|slot| slot.key()));
        }
        self.reclaimer.wake_if_pending();
        result
    }

    /// Looks up the map slots of `write`'s keys, without the commit lock. A key the
    /// operation writes (anything but a delete) gets a slot even if absent: an empty version
    /// list, which every read takes for an absent key. See [`Slots`].
    pub(crate) fn prepare(&self, write: &AtomicWrite) -> Slots<'_> {
        // Every key the operation writes, found or inserted (each searched from the head: see
        // `KeyMap::get_or_insert_all`).
        // A versionstamped key is known only under the lock, where its slot is inserted.
        // So is a key holding a number's placeholder.
        let numbered =
            |target| !write.numbering.is_empty() && numbered_key(&write.numbering, target);
        let later = |i: usize, m: &Mutation| {
            matches!(m.kind, MutationKind::SetSuffixVersionstampedKey { .. })
                || numbered(SlotTarget::MutationKey(index_u32(i)))
        };
        let written: SmallVec<[&[u8]; 4]> = write
            .mutations
            .iter()
            .enumerate()
            .filter(|(i, m)| !matches!(m.kind, MutationKind::Delete) && !later(*i, m))
            .map(|(_, m)| m.key.as_slice())
            .collect();
        let mut written = self.map.get_or_insert_all(&written).into_iter();
        let mutations: SmallVec<[Option<Slot<'_>>; 4]> = write
            .mutations
            .iter()
            .enumerate()
            .map(|(i, m)| match m.kind {
                _ if later(i, m) => None,
                MutationKind::Delete => self.map.get(m.key.as_slice()),
                _ => written.next(),
            })
            .collect();
        let checks = write
            .checks
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if numbered(SlotTarget::CheckKey(index_u32(i))) {
                    return None;
                }
                let written = write.mutations.iter().position(|m| m.key == c.key);
                match written.and_then(|i| mutations.get(i)).cloned().flatten() {
                    Some(slot) => Some(slot),
                    None => self.map.get(c.key.as_slice()),
                }
            })
            .collect();
        // Not sized from the key's current list: loading a hot key's list here, while another
        // committer swaps it, costs more than growing the list under the lock.
        let spare = write
            .mutations
            .iter()
            .filter(|m| !matches!(m.kind, MutationKind::Delete))
            .map(|m| match &m.kind {
                MutationKind::Set { value, expiry }
                | MutationKind::SetSuffixVersionstampedKey { value, expiry } => {
                    let version = VersionRef {
                        version: 0,
                        value: Some(crate::version::Stored::Shared(value)),
                        expires_at: expiry.map(|_| 0),
                    };
                    let spare = Chain::spare_for(&version);
                    if spare.is_none() {
                        share(value);
                    }
                    spare
                }
                _ => Chain::spare_for(&VersionRef {
                    version: 0,
                    value: Some(crate::version::Stored::Inline(crate::value::ValueRef::U64(
                        0,
                    ))),
                    expires_at: None,
                }),
            })
            .collect();
        Slots {
            checks,
            mutations,
            written: SmallVec::new(),
            spare,
        }
    }

    /// Makes a slot found before the commit lock current, with the lock held: a slot that was
    /// absent may exist now, and an empty slot may have been removed by reclamation (which
    /// only removes under the commit lock, so what is found here stays).
    fn refresh<'a>(&'a self, slot: &mut Option<Slot<'a>>, key: &KeyBytes, write: bool) {
        if slot.as_ref().is_none_or(Slot::is_removed) {
            *slot = if write {
                Some(self.map.get_or_insert(key.as_slice()))
            } else {
                self.map.get(key.as_slice())
            };
        }
    }

    /// Right after a commit is published: drops the versions it replaced that no reader can
    /// see any more (readers at the last published version now read the new one), and
    /// removes keys it deleted, unless an open snapshot still reads them. This keeps
    /// overwrites and deletes off the background thread, which then handles only what
    /// snapshots pinned and expiry. Called with the commit lock held.
    fn prune_written(&self, slots: &mut Slots<'_>) {
        if slots.written.is_empty() {
            return;
        }
        // Taken after publishing: a snapshot registered before it is in the registry, and
        // one registered after reads at the new version.
        let retention = self.retention();
        let mut now = None;
        for (key, slot) in slots.written.drain(..) {
            if self.prune_slot(&slot, &retention, &mut now) {
                self.reclaimer.mark(key);
            }
        }
    }

    /// After an operation wrote nothing: queues for removal the empty slots it inserted.
    fn release(&self, slots: &Slots<'_>) {
        for slot in slots.mutations.iter().flatten() {
            if !slot.is_removed() && slot.cell().load(&epoch::pin()).is_empty() {
                self.reclaimer.mark(KeyBytes::from(slot.key()));
            }
        }
    }

    /// Makes every version up to `version` visible to readers. Called with the commit lock,
    /// or by the log's only flusher once every version up to `version` is applied.
    pub(crate) fn publish(&self, version: u64) {
        debug_assert!(
            version >= self.visible.load(Ordering::Relaxed),
            "the visible version never moves back (to {version})"
        );
        self.visible.store(version, Ordering::Release);
    }

    /// The last published version.
    pub(crate) fn visible_version(&self) -> u64 {
        self.visible.load(Ordering::Acquire)
    }

    /// Removes every version above `published` from `keys` (and keys left with none): undoes
    /// a durable commit batch whose log write failed. Called with the commit lock held, before
    /// anything above `published` was published.
    pub(crate) fn roll_back(&self, keys: &[KeyBytes], published: u64) {
        debug_assert!(
            self.visible_version() <= published,
            "a rolled-back batch above {published} was never published"
        );
        for key in keys {
            let Some(slot) = self.map.get(key.as_slice()) else {
                continue;
            };
            let guard = epoch::pin();
            let old = slot.cell().load(&guard);
            if old.iter().all(|v| v.version <= published) {
                continue;
            }
            let versions: SmallVec<[VersionRef<'_>; 1]> =
                old.iter().filter(|v| v.version <= published).collect();
            // The rolled-back write may have replaced or cancelled the restored version's
            // deadline: schedule it again, or the expired value is never reclaimed.
            match versions.first().and_then(|v| v.expires_at) {
                Some(deadline) => self.reclaimer.schedule_expiry(deadline, key.clone()),
                None => self.reclaimer.cancel_expiry(key),
            }
            if versions.is_empty() {
                slot.remove();
            } else {
                slot.cell()
                    .store(Some(Chain::build(versions, None)), &self.retired);
            }
        }
    }

    /// Checks and applies one validated operation at version `*last + 1`, without publishing
    /// it; on success `*last` is that version. With `log`, also appends its log record and
    /// the keys it wrote. Called with the commit lock held (`last` is its guard's value);
    /// `slots` are the operation's slots from [`Inner::prepare`]. An operation that writes
    /// nothing (a conflict, a refused mutation) queues the empty slots it inserted for
    /// removal.
    pub(crate) fn apply_write<'a>(
        &'a self,
        write: AtomicWrite,
        slots: &mut Slots<'a>,
        last: &mut u64,
        log: Option<&mut LogSink>,
    ) -> Result<CommitResult, Error> {
        let result = self.try_apply_write(write, slots, last, log);
        if !result.as_ref().is_ok_and(CommitResult::is_committed) {
            self.release(slots);
        }
        result
    }

    fn try_apply_write<'a>(
        &'a self,
        write: AtomicWrite,
        slots: &mut Slots<'a>,
        last: &mut u64,
        log: Option<&mut LogSink>,
    ) -> Result<CommitResult, Error> {
        let mut now = None;
        let (write, numbers) = if write.numbering.is_empty() {
            (write, Vec::new())
        } else {
            self.resolve_numbering(write, slots, &mut now)?
        };
        let AtomicWrite {
            checks,
            range_checks,
            mutations,
            numbering: _,
        } = write;
        let conflict = self.check(&checks, &range_checks, slots, &mut now);
        if !conflict.failed_checks.is_empty() || conflict.range_changed {
            return Ok(CommitResult::Conflict(conflict));
        }
        if *last >= VERSION_MAX {
            return Err(Error::VersionsExhausted { last: *last });
        }
        let version = *last + 1;
        debug_assert!(
            version > self.visible_version(),
            "a new version {version} is above every published one"
        );
        let mutations = with_versionstamped_keys(mutations, version);
        let staged = self.stage(mutations, slots, &mut now)?;
        self.write_staged(staged, version, slots, log);
        *last = version;
        Ok(CommitResult::Committed {
            versionstamp: Versionstamp::from_version(version),
            numbers,
        })
    }

    /// Takes a commit's numbers from its counters (read here, under the commit lock, so no
    /// other commit moves them meanwhile) and fills them in; the keys that held placeholders
    /// lose their slots, found again under the lock, and the counters' sets get theirs.
    fn resolve_numbering<'a>(
        &'a self,
        write: AtomicWrite,
        slots: &mut Slots<'a>,
        now: &mut Option<u64>,
    ) -> Result<(AtomicWrite, Vec<u64>), Error> {
        let current: SmallVec<[Option<Value>; 2]> = write
            .numbering
            .counters
            .iter()
            .map(|c| Self::current(self.map.get(c.key.as_slice()).as_ref(), now))
            .collect();
        let current: SmallVec<[Option<&Value>; 2]> = current.iter().map(Option::as_ref).collect();
        for s in &write.numbering.slots {
            match s.target {
                SlotTarget::CheckKey(i) => {
                    if let Some(slot) = slots.checks.get_mut(i as usize) {
                        *slot = None;
                    }
                }
                SlotTarget::MutationKey(i) => {
                    if let Some(slot) = slots.mutations.get_mut(i as usize) {
                        *slot = None;
                    }
                }
                SlotTarget::MutationValue(_) => {}
            }
        }
        let claims = write.numbering.counters.len();
        let resolved = crate::numbering::resolve(write, &current)?;
        slots.mutations.extend(std::iter::repeat_n(None, claims));
        Ok(resolved)
    }

    /// Evaluates an operation's key checks (each failure reported) and range checks (the
    /// first change found). Called with the commit lock held.
    fn check<'a>(
        &'a self,
        checks: &[Check],
        range_checks: &[RangeCheck],
        slots: &mut Slots<'a>,
        now: &mut Option<u64>,
    ) -> Conflict {
        let mut conflict = Conflict::default();
        for (index, (check, slot)) in checks.iter().zip(slots.checks.iter_mut()).enumerate() {
            self.refresh(slot, &check.key, false);
            let actual = Self::current_stamp(slot.as_ref(), now);
            if actual != check.versionstamp {
                conflict.failed_checks.push(FailedCheck {
                    index,
                    key: check.key.clone(),
                    expected: check.versionstamp,
                    actual,
                });
            }
        }
        conflict.range_changed = range_checks.iter().any(|rc| self.range_changed(rc, now));
        conflict
    }

    /// Whether `rc`'s range changed since its snapshot: a value the read returned has
    /// expired since (its deadline is in the check), or a key of the range has a newer
    /// version.
    fn range_changed(&self, rc: &RangeCheck, now: &mut Option<u64>) -> bool {
        if rc
            .expires_at
            .is_some_and(|d| d <= *now.get_or_insert_with(now_ms))
        {
            return true;
        }
        let since = rc.since.version();
        let newer = |versions: Versions<'_>| versions.first().is_some_and(|v| v.version > since);
        // A transaction's point read is the range [key, key ++ 00): one lookup, no scan.
        let point = rc.end.len() == rc.start.len() + 1
            && rc.end.ends_with(&[0])
            && rc.end.starts_with(&rc.start);
        if point {
            return self
                .map
                .read(&rc.start, |_, versions| newer(versions))
                .unwrap_or(false);
        }
        let mut changed = false;
        self.map.scan(&rc.start, &rc.end, false, |_, versions| {
            changed = newer(versions);
            !changed
        });
        changed
    }

    /// Stages every mutation before anything is written, so an error leaves no trace: what
    /// each key is left with, and its slot. Later mutations of a key see earlier ones.
    fn stage<'a>(
        &'a self,
        mutations: Vec<Mutation>,
        slots: &mut Slots<'a>,
        now: &mut Option<u64>,
    ) -> Result<SmallVec<[StagedKey<'a>; 4]>, Error> {
        let mut staged: SmallVec<[StagedKey<'a>; 4]> = SmallVec::with_capacity(mutations.len());
        // Index the staged keys once there are many.
        let use_index = mutations.len() >= 16;
        let mut index: HashMap<KeyBytes, usize> = HashMap::new();
        for (i, (m, slot)) in mutations
            .into_iter()
            .zip(slots.mutations.iter_mut())
            .enumerate()
        {
            let at = if use_index {
                index.get(&m.key).copied()
            } else {
                staged.iter().position(|(k, _, _)| *k == m.key)
            };
            if let Some(entry) = at.and_then(|at| staged.get_mut(at)) {
                self.stage_again(entry, m, i, now)?;
                continue;
            }
            self.refresh(slot, &m.key, !matches!(m.kind, MutationKind::Delete));
            // A set or delete does not depend on what it replaces: no copy of it.
            let current = match m.kind {
                MutationKind::Set { .. }
                | MutationKind::SetSuffixVersionstampedKey { .. }
                | MutationKind::Delete => None,
                _ => Self::current(slot.as_ref(), now),
            };
            let result = apply(
                m.kind,
                current.as_ref(),
                || *now.get_or_insert_with(now_ms),
                i,
                &m.key,
            )?;
            if use_index {
                index.insert(m.key.clone(), staged.len());
            }
            staged.push((m.key, result, slot.clone()));
        }
        Ok(staged)
    }

    /// Stages mutation `m` (number `index`) of a key an earlier mutation of the same operation staged
    /// (`entry`): it sees the earlier value unless that has already expired (a set with a
    /// zero expiry), as a read would.
    fn stage_again<'a>(
        &'a self,
        entry: &mut StagedKey<'a>,
        m: Mutation,
        index: usize,
        now: &mut Option<u64>,
    ) -> Result<(), Error> {
        let commit_now = *now.get_or_insert_with(now_ms);
        let earlier = entry
            .1
            .as_ref()
            .filter(|(_, deadline)| deadline.is_none_or(|d| d > commit_now))
            .map(|(v, _)| v);
        let result = apply(
            m.kind,
            earlier,
            || *now.get_or_insert_with(now_ms),
            index,
            &m.key,
        )?;
        if result.is_some() && entry.2.is_none() {
            // A delete of an absent key, then a write: the write needs a slot.
            self.refresh(&mut entry.2, &m.key, true);
        }
        entry.1 = result;
        Ok(())
    }

    /// Writes the staged keys at `version` (and, with `log`, their frame and keys). Called
    /// with the commit lock held.
    fn write_staged<'a>(
        &'a self,
        staged: SmallVec<[StagedKey<'a>; 4]>,
        version: u64,
        slots: &mut Slots<'a>,
        log: Option<&mut LogSink>,
    ) {
        let durable = log.is_some();
        if let Some(log) = log {
            log.frames.commit(
                version,
                staged
                    .iter()
                    .map(|(k, s, _)| (k.as_slice(), s.as_ref().map(|(v, e)| (v, *e)))),
            );
            log.touched.extend(staged.iter().map(|(k, _, _)| k.clone()));
        }
        let mut retention = None;
        for (key, result, slot) in staged {
            let (value, expires_at) = match result {
                Some((v, e)) => (Some(v), e),
                None => (None, None),
            };
            let new = Version {
                version,
                value,
                expires_at,
            };
            let now_or_later = durable.then_some(&mut retention);
            let spare = take_spare(&mut slots.spare, &new);
            if let Some((key, slot)) = self.write_version(key, new, slot, spare, now_or_later) {
                // A durable commit is published by the log's flusher, later: leave its
                // garbage to the background thread.
                if durable {
                    self.reclaimer.mark(key);
                } else {
                    slots.written.push((key, slot));
                }
            }
        }
    }

    /// Installs a new version of `key`, whose map slot (if any) is `slot`. Called with the
    /// commit lock held. Returns the key and slot if they hold garbage (an older version, or
    /// a tombstone) once this commit is published. With `retention` (taken at most once per
    /// commit), older versions no reader needs are dropped now; without, all are kept for the
    /// caller to prune after publishing.
    fn write_version<'a>(
        &self,
        key: KeyBytes,
        new: Version,
        slot: Option<Slot<'a>>,
        spare: Option<Vec<u8>>,
        retention: Option<&mut Option<Retention>>,
    ) -> Option<(KeyBytes, Slot<'a>)> {
        let tombstone = new.value.is_none();
        let expiry = new.expires_at;
        let Some(slot) = slot else {
            // Only a delete has no slot, and deleting an absent key leaves nothing to write.
            return None;
        };
        let guard = epoch::pin();
        let old = slot.cell().load(&guard);
        if old.is_empty() {
            // A slot inserted empty by `prepare` (this operation's or another's).
            if tombstone {
                self.reclaimer.mark(key);
                return None;
            }
            if let Some(deadline) = expiry {
                self.reclaimer.schedule_expiry(deadline, key);
            }
            slot.cell()
                .store(Some(Chain::with_newest(new, [], spare)), &self.retired);
            return None;
        }
        if expiry.is_none() && old.first().is_some_and(|v| v.expires_at.is_some()) {
            // The key's deadline no longer applies; keep the expiry bookkeeping to one entry
            // per key that still has one.
            self.reclaimer.cancel_expiry(&key);
        }
        let kept: SmallVec<[VersionRef<'_>; 2]> = match retention {
            // Pruned once this commit is published (`prune_written`): keep everything until
            // then rather than take the snapshot registry twice.
            None => old.iter().collect(),
            Some(retention) => {
                let retention = retention.get_or_insert_with(|| self.retention());
                let kept: SmallVec<[VersionRef<'_>; 2]> = retention.keep(old).collect();
                // Keeping drops no dead version, so no deadline matters (`now` 0).
                retention.debug_assert_kept(old, &kept, 0);
                kept
            }
        };
        debug_assert!(
            old.first().is_none_or(|v| v.version < new.version),
            "a key's versions are newest first, each above the one before"
        );
        let garbage = tombstone || !kept.is_empty();
        let chain = Chain::with_newest(new, kept, spare);
        slot.cell().store(Some(chain), &self.retired);
        drop(guard);
        if let Some(deadline) = expiry {
            self.reclaimer.schedule_expiry(deadline, key.clone());
        }
        garbage.then_some((key, slot))
    }
}
