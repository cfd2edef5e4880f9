//! A collection's writes: `insert`, `upsert`, `update` and `delete`, each one serializable
//! transaction that reads the record and every unique entry it will own or give up, first
//! tried as one unopposed commit, and the building blocks they share (the transaction runner,
//! unique claims, the commit of a record with its entries).

use super::*;

impl<T, S> Collection<T, S>
where
    T: Serialize + DeserializeOwned,
    S: Store,
{
    /// Inside a transaction: replaces the record at `record_key` (primary key `pk`), whose
    /// current entries are `old_plan`, by `new` (or deletes it), with every index change,
    /// after checking unique values.
    ///
    /// Every unique entry `new` claims, and every one the old record gives up, is read in the
    /// transaction, so the commit checks it. A unique entry that already holds exactly the
    /// bytes it would be written with is left as it is: the read still checks it, and
    /// rewriting it would only add a version for the store to reclaim.
    ///
    /// A unique entry the old record has and `new` keeps unchanged (same value, same bytes)
    /// is neither read nor written. Once the index is built it points at this record, and
    /// only a commit that also writes this record (checked through the record's read) can
    /// change that. While the index is being built it may be missing, or held by another
    /// record that had the value before: leaving it alone then introduces no duplicate (the
    /// record already had the value) and the build finds any that existed.
    pub(crate) fn put_in(
        &self,
        tx: &mut Transaction<'_, S>,
        pk: &Key,
        record_key: &[u8],
        old_plan: &[Planned],
        new: Option<&T>,
    ) -> Result<(), Error> {
        let pk_bytes = self.pk_bytes(record_key);
        let (new_bytes, mut new_plan) = match new {
            Some(n) => {
                let bytes = self.encode(pk, n)?;
                let plan = self.plan_encoded(pk_bytes, n, &bytes, None);
                if let Some(e) = self.oversized_entry(&plan) {
                    return Err(e);
                }
                (Some(bytes), plan)
            }
            None => (None, Vec::new()),
        };
        // Entries already in place get an empty `entry` (a real one never is): not rewritten.
        let comparable = self.copies_comparable();
        for p in new_plan
            .iter_mut()
            .filter(|p| self.def.indexes[p.index].unique)
        {
            let same_ok = comparable || !self.def.indexes[p.index].covering;
            if same_ok
                && old_plan
                    .iter()
                    .any(|o| o.key == p.key && o.entry == p.entry)
            {
                p.entry.clear();
                continue;
            }
            let Some(existing) = tx.get_raw(&p.key)? else {
                continue;
            };
            if let Some(owner) = Self::other_holder(&existing.value, pk, pk_bytes)? {
                return Err(Error::UniqueViolation {
                    index: self.def.indexes[p.index].name.clone(),
                    value: p.value.clone(),
                    existing_primary_key: owner,
                });
            }
            if same_ok && stored_matches(&existing.value, &p.entry) {
                p.entry.clear();
            }
        }
        for p in old_plan {
            if new_plan.iter().any(|n| n.key == p.key) {
                continue;
            }
            // A non-unique entry ends with this record's primary key, so it is this record's.
            // A unique entry may be held by another record: while a unique index is being
            // built, a record not yet backfilled has no entry, so another record can take its
            // value; deleting that holder's entry here would let a third record take the value
            // too. Delete only what points at this record (the read is a commit condition).
            if self.def.indexes[p.index].unique {
                let Some(existing) = tx.get_raw(&p.key)? else {
                    continue;
                };
                if Self::other_holder(&existing.value, pk, pk_bytes)?.is_some() {
                    continue;
                }
            }
            tx.mutate_raw(&p.key, MutationKind::Delete);
        }
        for p in new_plan {
            if p.entry.is_empty() {
                continue;
            }
            tx.mutate_raw(
                &p.key,
                MutationKind::Set {
                    value: entry_value(p.entry),
                    expiry: None,
                },
            );
        }
        match new_bytes {
            Some(bytes) => tx.mutate_raw(
                record_key,
                MutationKind::Set {
                    value: Value::from(bytes),
                    expiry: None,
                },
            ),
            None => tx.mutate_raw(record_key, MutationKind::Delete),
        }
        Ok(())
    }

    /// Reads the record at `record_key` inside a transaction: decoded, with the entries it
    /// has (planned from the stored bytes, so nothing is serialised again).
    pub(super) fn read_in(
        &self,
        tx: &mut Transaction<'_, S>,
        pk: &Key,
        record_key: &[u8],
    ) -> Result<Option<(T, Versionstamp, Vec<Planned>)>, Error> {
        let Some(e) = tx.get_raw(record_key)? else {
            return Ok(None);
        };
        let bytes = value_bytes(&e.value)?;
        let record = self.decode(pk, bytes, e.versionstamp)?;
        let plan = self.plan_encoded(self.pk_bytes(record_key), &record, bytes, None);
        Ok(Some((record, e.versionstamp, plan)))
    }

    /// Runs a record write as a transaction that reads the schema first (so its commit
    /// checks it, and a changed schema is loaded before `f` encodes anything).
    pub(super) fn run<R>(
        &self,
        mut f: impl FnMut(&mut Transaction<'_, S>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        self.store.transaction_with(&self.def.retry, |tx| {
            self.schema_in(tx)?;
            f(tx)
        })
    }

    /// Inserts a new record.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, ListOptions, key};
    /// # use tuplekv_index::{Collection, Error};
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct User { id: u64, email: String }
    ///
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(Database::in_memory())?;
    /// let ada = User { id: 1, email: "ada@example.com".into() };
    /// users.insert(&ada)?;
    /// assert_eq!(users.get(&key![1])?, Some(ada.clone()));
    /// // The same primary key again, or Ada's email on another record: refused, nothing written.
    /// assert!(matches!(users.insert(&ada), Err(Error::AlreadyExists { .. })));
    /// let imposter = User { id: 2, email: "ada@example.com".into() };
    /// let err = users.insert(&imposter).unwrap_err();
    /// assert!(err.is_unique_violation());
    /// assert_eq!(users.get(&key![2])?, None);
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::AlreadyExists`], [`Error::UniqueViolation`], [`Error::KeyTooLargeForWrite`] for
    /// a primary key or an index value too long for the engine's key limit, a store error (a
    /// record too large for the value limit, too many index entries for one commit), or a
    /// conflict past the retry bound. Nothing is written then.
    ///
    /// On a remote store whose connection failed after the insert was sent, the record is
    /// re-read: `Ok` if it holds exactly this record (the insert landed, or an identical record
    /// was there already: either way the store holds what was asked), else
    /// [`Error::OutcomeUnknown`] saying what the re-read found.
    pub fn insert(&self, record: &T) -> Result<(), Error> {
        let pk = (self.def.primary_key)(record);
        let record_key = self.write_record_key(&pk)?;
        let result = self.insert_at(&pk, &record_key, record);
        self.settle(result, &pk, &record_key, || {
            Some((self.encode(&pk, record).ok()?, ()))
        })
    }

    /// [`Collection::insert`] before an unknown outcome is settled.
    pub(super) fn insert_at(&self, pk: &Key, record_key: &[u8], record: &T) -> Result<(), Error> {
        let (pk, record_key) = (pk.clone(), record_key.to_vec());
        let lost = match self.try_unopposed(|| self.insert_unopposed(&pk, &record_key, record)) {
            Ok(done) => return done,
            Err(lost) => lost,
        };
        self.run_after(lost, |tx| {
            if let Some(e) = tx.get_raw(&record_key)? {
                // Decoded only for its error: a stored record that does not decode says so.
                self.decode(&pk, value_bytes(&e.value)?, e.versionstamp)?;
                return Err(Error::AlreadyExists {
                    primary_key: pk.clone(),
                });
            }
            self.put_in(tx, &pk, &record_key, &[], Some(record))
        })
    }

    /// Runs `attempt`, a write without a transaction, when the retry bound leaves room for
    /// it: `Ok` with its answer if it finished, else `Err` with whether it spent a commit.
    pub(super) fn try_unopposed<R>(
        &self,
        attempt: impl FnOnce() -> Unopposed<R>,
    ) -> Result<R, bool> {
        if self.def.retry.max_attempts <= 1 {
            return Err(false);
        }
        match attempt() {
            Unopposed::Done(answer) => Ok(answer),
            Unopposed::Declined => Err(false),
            Unopposed::Lost => Err(true),
        }
    }

    /// Runs `f` as a transaction after a write without one (see [`Collection::try_unopposed`]);
    /// a `lost` attempt counts as one of the bounded attempts, so a write still commits at
    /// most `max_attempts` times.
    pub(super) fn run_after<R>(
        &self,
        lost: bool,
        mut f: impl FnMut(&mut Transaction<'_, S>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let retry = TransactionOptions {
            max_attempts: self.def.retry.max_attempts - u32::from(lost),
            ..self.def.retry.clone()
        };
        let f = |tx: &mut Transaction<'_, S>| {
            self.schema_in(tx)?;
            f(tx)
        };
        match self.store.transaction_with(&retry, f) {
            Err(Error::Store(tuplekv_engine::Error::TransactionConflict { attempts })) => {
                Err(Error::Store(tuplekv_engine::Error::TransactionConflict {
                    attempts: attempts + u32::from(lost),
                }))
            }
            other => other,
        }
    }

    /// Reads the unique entry at `key` from the latest state, as [`Collection::put_in`] does
    /// in its transaction, and adds to `write` the check that it is still what was read.
    /// `None` if it cannot be read or parsed (the transaction then reports the error).
    pub(super) fn read_unique(
        &self,
        write: &mut AtomicWrite,
        key: &[u8],
        pk: &Key,
        pk_bytes: &[u8],
        entry: &[u8],
    ) -> Option<Holder> {
        let (holder, stamp) = self
            .store
            .read_latest_raw(key, |found| match found {
                None => Some((Holder::Nobody, None)),
                Some((value, stamp)) => {
                    let holder = match Self::other_holder(value, pk, pk_bytes).ok()? {
                        Some(_) => Holder::Other,
                        None if stored_matches(value, entry) => Holder::Same,
                        None => Holder::Record,
                    };
                    Some((holder, Some(stamp)))
                }
            })
            .ok()??;
        write.checks.push(Check {
            key: KeyBytes::from(key),
            versionstamp: stamp,
        });
        Some(holder)
    }

    /// Adds to `write` what giving up the unique entry at `key` takes: it is deleted if it is
    /// the record's and left alone if another record holds it (possible while an index is
    /// built, or after a writer that does not declare the index). `false` if it cannot be
    /// read.
    pub(super) fn give_up_unique(
        &self,
        write: &mut AtomicWrite,
        key: KeyBytes,
        pk: &Key,
        pk_bytes: &[u8],
    ) -> bool {
        match self.read_unique(write, &key, pk, pk_bytes, &[]) {
            Some(Holder::Record | Holder::Same) => {
                write.mutations.push(delete_mutation(key));
                true
            }
            Some(Holder::Nobody | Holder::Other) => true,
            None => false,
        }
    }

    /// Commits `write` if it is within the commit limits: `Done` if it committed, `Lost` if
    /// not (a conflict, or an error the transaction will report), `Declined` past a limit.
    ///
    /// A write whose outcome is unknown (a remote store lost the answer) is `Done` with that
    /// error: running the transaction after it could find the write's own record and report
    /// it as someone else's.
    pub(super) fn commit_unopposed(&self, mut write: AtomicWrite) -> Unopposed<Result<(), Error>> {
        // Encoded with the layout this handle knows: the commit checks it still holds.
        let Ok(schema) = self.schema_check() else {
            return Unopposed::Declined;
        };
        write.checks.push(schema);
        if write.checks.len() > CHECKS_MAX || write.mutations.len() > MUTATIONS_MAX {
            return Unopposed::Declined;
        }
        match self.store.commit(write) {
            Ok(result) if result.is_committed() => Unopposed::Done(Ok(())),
            Err(e @ tuplekv_engine::Error::OutcomeUnknown { .. }) => Unopposed::Done(Err(e.into())),
            _ => Unopposed::Lost,
        }
    }

    /// Settles a write that ended in an unknown outcome: re-reads the record at `record_key`
    /// and returns `Ok` if it holds exactly what `written` gives (the bytes the write stored
    /// and the answer to return then; `None` for
    /// a write whose result cannot be rebuilt from the record), else
    /// [`Error::OutcomeUnknown`] saying what it found. Other results pass through.
    pub(super) fn settle<R>(
        &self,
        result: Result<R, Error>,
        pk: &Key,
        record_key: &[u8],
        written: impl FnOnce() -> Option<(Vec<u8>, R)>,
    ) -> Result<R, Error> {
        let reason = match result {
            Err(Error::Store(tuplekv_engine::Error::OutcomeUnknown { reason, .. })) => reason,
            other => return other,
        };
        let written = written();
        let reread = match self.store.get_latest_raw(record_key) {
            Ok(None) => Reread::Absent,
            Ok(Some(e)) => match (&written, value_bytes(&e.value)) {
                (Some((bytes, _)), Ok(stored)) if bytes.as_slice() == stored => Reread::Written,
                _ => Reread::Other,
            },
            Err(e) => Reread::Failed(e.to_string()),
        };
        match (reread, written) {
            (Reread::Written, Some((_, answer))) => Ok(answer),
            (reread, _) => Err(Error::OutcomeUnknown {
                collection: self.def.name.clone(),
                primary_key: pk.clone(),
                reason,
                reread,
            }),
        }
    }

    /// The insert when nothing is in its way, in one commit without reads: it checks that the
    /// record and every unique entry it claims are absent, then writes them and the other
    /// entries, as the transaction would. When it does not commit (something is there, a
    /// limit, any error), nothing was written and the transaction runs, reading what is
    /// there, so it reports the error it always did, in the same order.
    pub(super) fn insert_unopposed(
        &self,
        pk: &Key,
        record_key: &[u8],
        record: &T,
    ) -> Unopposed<Result<(), Error>> {
        let Ok(bytes) = self.encode(pk, record) else {
            return Unopposed::Declined;
        };
        let plan = self.plan_encoded(self.pk_bytes(record_key), record, &bytes, None);
        if self.oversized_entry(&plan).is_some() {
            // The transaction reports it, after the record's existence, as it always does.
            return Unopposed::Declined;
        }
        self.commit_unopposed(self.insert_commit(record_key, plan, bytes))
    }

    /// The commit that inserts a record with nothing in its way: the record and every unique
    /// entry it claims checked absent, then written with the other entries.
    pub(super) fn insert_commit(
        &self,
        record_key: &[u8],
        plan: Vec<Planned>,
        bytes: Vec<u8>,
    ) -> AtomicWrite {
        let mut write = AtomicWrite::default();
        write.checks.push(Check {
            key: KeyBytes::from(record_key),
            versionstamp: None,
        });
        write.mutations.reserve(plan.len() + 1);
        for p in plan {
            if self.def.indexes[p.index].unique {
                write.checks.push(Check {
                    key: KeyBytes::from(p.key.as_slice()),
                    versionstamp: None,
                });
            }
            write
                .mutations
                .push(set_mutation(p.key, entry_value(p.entry)));
        }
        write
            .mutations
            .push(set_mutation(KeyBytes::from(record_key), Value::from(bytes)));
        write
    }

    /// The one commit that inserts `record` under a new primary key, without committing it:
    /// the record and its unique entries checked absent, every entry written, and the check
    /// that the collection's schema is the one this handle encodes with. For a caller that
    /// commits it with more, above all with a gapless code the store numbers
    /// (`tuplekv_sequence::GaplessSequence::next_coded`, whose record closure appends this
    /// write): a record whose primary key or fields hold its code verbatim then gets the
    /// number the store assigns, in its key, its value and its index entries alike.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use tuplekv_engine::{Database, Store, key};
    /// use tuplekv_index::Collection;
    ///
    /// #[derive(Serialize, Deserialize, Debug, PartialEq)]
    /// struct Invoice { code: String, total: u64 }
    ///
    /// let db = Database::in_memory();
    /// let invoices = Collection::<Invoice, _>::builder("invoices", |i| key![i.code.as_str()])
    ///     .open(db.clone())?;
    /// let write = invoices.insert_write(&Invoice { code: "INV001".into(), total: 100 })?;
    /// assert!(db.commit(write)?.is_committed());
    /// assert_eq!(invoices.get(&key!["INV001"])?.map(|i| i.total), Some(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A commit of it is refused by its checks (`CommitResult::Conflict`, or
    /// `tuplekv_sequence::Error::Rejected`) if the primary key exists, a unique value is
    /// taken, or the schema changed meanwhile (open the collection again); nothing is
    /// written then. [`Collection::insert`] tells these apart.
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForWrite`] for a primary key or an index entry over the engine's
    /// key limit, [`Error::Codec`] for a record that does not serialise, and
    /// [`Error::Schema`] if this handle may not write.
    pub fn insert_write(&self, record: &T) -> Result<AtomicWrite, Error> {
        let pk = (self.def.primary_key)(record);
        let record_key = self.write_record_key(&pk)?;
        let bytes = self.encode(&pk, record)?;
        let plan = self.plan_encoded(self.pk_bytes(&record_key), record, &bytes, None);
        if let Some(e) = self.oversized_entry(&plan) {
            return Err(e);
        }
        let mut write = self.insert_commit(&record_key, plan, bytes);
        write.checks.push(self.schema_check()?);
        Ok(write)
    }

    /// The record at `record_key` as the latest state has it, with its versionstamp, decoded
    /// and planned; `Err` with the answer when there is none, `Ok(None)` when it cannot be
    /// used (a read or decoding error, which the transaction then reports).
    pub(super) fn read_latest(
        &self,
        pk: &Key,
        record_key: &[u8],
    ) -> Result<Option<(T, Versionstamp, Vec<Planned>)>, ()> {
        // Decoded and planned from the stored bytes in place, without copying the entry.
        let read = self.store.read_latest_raw(record_key, |found| {
            let (value, stamp) = found?;
            let decoded = value_bytes(value).and_then(|bytes| {
                let record = self.decode(pk, bytes, stamp)?;
                let plan = self.plan_encoded(self.pk_bytes(record_key), &record, bytes, None);
                Ok((record, stamp, plan))
            });
            Some(decoded.ok())
        });
        match read {
            Ok(Some(usable)) => Ok(usable),
            Ok(None) => Err(()),
            Err(_) => Ok(None),
        }
    }

    /// The delete without a transaction, as the guide writes it by hand: read the record's
    /// latest version, then one commit that checks it is unchanged and deletes it with its
    /// entries. Unique entries are read first and deleted only if they are the record's
    /// ([`Collection::give_up_unique`]).
    pub(super) fn delete_unopposed(
        &self,
        pk: &Key,
        record_key: &[u8],
    ) -> Unopposed<Result<Option<T>, Error>> {
        let (old, stamp, plan) = match self.read_latest(pk, record_key) {
            Ok(Some(found)) => found,
            Ok(None) => return Unopposed::Declined,
            Err(()) => return Unopposed::Done(Ok(None)),
        };
        let pk_bytes = self.pk_bytes(record_key);
        let mut write = AtomicWrite::default();
        write.checks.push(Check {
            key: KeyBytes::from(record_key),
            versionstamp: Some(stamp),
        });
        write.mutations.reserve(plan.len() + 1);
        for p in plan {
            if !self.def.indexes[p.index].unique {
                write.mutations.push(delete_mutation(p.key));
            } else if !self.give_up_unique(&mut write, p.key, pk, pk_bytes) {
                return Unopposed::Declined;
            }
        }
        write
            .mutations
            .push(delete_mutation(KeyBytes::from(record_key)));
        self.commit_unopposed(write).map(|r| r.map(|()| Some(old)))
    }

    /// The update without a transaction: read the record's latest version, apply `f`, then one
    /// commit that checks the record is unchanged and writes the entry changes
    /// [`Collection::put_in`] would: unique values the record gives up are read and deleted
    /// only if they are its own ([`Collection::give_up_unique`]); a unique value it newly
    /// claims, or keeps in a covering index, is read and written only if it is free or the
    /// record's ([`Collection::claim_unique`]; held by another record, the transaction runs
    /// and reports the violation); a kept unique pointer entry is left alone; non-unique
    /// entries are all written.
    ///
    /// When this does not finish, the record it read and what `f` made of it are left in
    /// `made`, so the transaction reuses them rather than call `f` again on the same version.
    pub(super) fn update_unopposed(
        &self,
        pk: &Key,
        record_key: &[u8],
        f: &mut impl FnMut(T) -> T,
        made: &mut Option<(Versionstamp, T)>,
    ) -> Unopposed<Result<T, Error>> {
        let (old, stamp, old_plan) = match self.read_latest(pk, record_key) {
            Ok(Some(found)) => found,
            Ok(None) => return Unopposed::Declined,
            Err(()) => {
                return Unopposed::Done(Err(Error::NotFound {
                    primary_key: pk.clone(),
                }));
            }
        };
        let new = f(old);
        let new_pk = (self.def.primary_key)(&new);
        if new_pk != *pk {
            return Unopposed::Done(Err(Error::PrimaryKeyChanged {
                from: pk.clone(),
                to: new_pk,
            }));
        }
        let bytes = match self.encode(pk, &new) {
            Ok(bytes) => bytes,
            Err(e) => return Unopposed::Done(Err(e)),
        };
        let outcome = match self.update_write(pk, record_key, stamp, &old_plan, &new, bytes) {
            Some(write) => self.commit_unopposed(write),
            None => Unopposed::Declined,
        };
        let lost = match outcome {
            Unopposed::Done(Ok(())) => return Unopposed::Done(Ok(new)),
            Unopposed::Done(Err(e)) => return Unopposed::Done(Err(e)),
            Unopposed::Declined => false,
            Unopposed::Lost => true,
        };
        *made = Some((stamp, new));
        if lost {
            Unopposed::Lost
        } else {
            Unopposed::Declined
        }
    }

    /// The commit of [`Collection::update_unopposed`]: the record at `stamp` (whose entries are
    /// `old_plan`) replaced by `new`, serialised as `bytes`. `None` if a unique entry it
    /// touches is another record's or cannot be read.
    pub(super) fn update_write(
        &self,
        pk: &Key,
        record_key: &[u8],
        stamp: Versionstamp,
        old_plan: &[Planned],
        new: &T,
        bytes: Vec<u8>,
    ) -> Option<AtomicWrite> {
        let pk_bytes = self.pk_bytes(record_key);
        let new_plan = self.plan_encoded(pk_bytes, new, &bytes, None);
        if self.oversized_entry(&new_plan).is_some() {
            return None; // the transaction reports it
        }
        let mut write = AtomicWrite::default();
        write.checks.push(Check {
            key: KeyBytes::from(record_key),
            versionstamp: Some(stamp),
        });
        for o in old_plan {
            if new_plan.iter().any(|n| n.key == o.key) {
                continue;
            }
            if !self.def.indexes[o.index].unique {
                write.mutations.push(delete_mutation(o.key.clone()));
            } else if !self.give_up_unique(&mut write, o.key.clone(), pk, pk_bytes) {
                return None;
            }
        }
        for n in new_plan {
            if !self.def.indexes[n.index].unique {
                write
                    .mutations
                    .push(set_mutation(n.key, entry_value(n.entry)));
            } else if (self.copies_comparable() || !self.def.indexes[n.index].covering)
                && old_plan
                    .iter()
                    .any(|o| o.key == n.key && o.entry == n.entry)
            {
                // A kept pointer entry (or covering entry whose copy is unchanged): left alone.
            } else if !self.claim_unique(&mut write, n, pk, pk_bytes) {
                // A value the record newly claims, or keeps in a covering index whose copy of
                // the record changed.
                return None;
            }
        }
        write
            .mutations
            .push(set_mutation(KeyBytes::from(record_key), Value::from(bytes)));
        Some(write)
    }

    /// Adds to `write` what writing the unique entry `n` takes: it is written if it is free
    /// or the record's with other bytes, and left as it is if it already holds `n`'s bytes.
    /// `false` if another record holds it or it cannot be read (the transaction then reports
    /// the violation or the error).
    pub(super) fn claim_unique(
        &self,
        write: &mut AtomicWrite,
        n: Planned,
        pk: &Key,
        pk_bytes: &[u8],
    ) -> bool {
        let same_ok = self.copies_comparable() || !self.def.indexes[n.index].covering;
        match self.read_unique(write, &n.key, pk, pk_bytes, &n.entry) {
            Some(Holder::Same) if !same_ok => {
                write
                    .mutations
                    .push(set_mutation(n.key, entry_value(n.entry)));
                true
            }
            Some(Holder::Nobody | Holder::Record) => {
                write
                    .mutations
                    .push(set_mutation(n.key, entry_value(n.entry)));
                true
            }
            Some(Holder::Same) => true,
            Some(Holder::Other) | None => false,
        }
    }

    /// Inserts the record, or replaces the one with its primary key; returns the old one.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, ListOptions, key};
    /// # use tuplekv_index::{Collection, Error};
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct User { id: u64, email: String }
    ///
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(Database::in_memory())?;
    /// let ada = User { id: 1, email: "ada@example.com".into() };
    /// assert_eq!(users.upsert(&ada)?, None); // inserted
    /// let moved = User { id: 1, email: "ada@lovelace.org".into() };
    /// assert_eq!(users.upsert(&moved)?, Some(ada)); // replaced: the old record comes back
    /// // The index follows: the old email is free, the new one finds the record.
    /// assert_eq!(users.get_by("email", &key!["ada@example.com"])?, None);
    /// assert_eq!(users.get_by("email", &key!["ada@lovelace.org"])?, Some((key![1], moved)));
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Collection::insert`], without [`Error::AlreadyExists`].
    pub fn upsert(&self, record: &T) -> Result<Option<T>, Error> {
        let pk = (self.def.primary_key)(record);
        let record_key = self.write_record_key(&pk)?;
        let result = self.run(|tx| {
            let (old, old_plan) = match self.read_in(tx, &pk, &record_key)? {
                Some((old, _, plan)) => (Some(old), plan),
                None => (None, Vec::new()),
            };
            self.put_in(tx, &pk, &record_key, &old_plan, Some(record))?;
            Ok(old)
        });
        // What it replaced cannot be known after the fact: an unknown outcome is reported.
        self.settle(result, &pk, &record_key, || None)
    }

    /// Read-modify-write: replaces the record at `pk` by `f(record)`. `f` runs once for each
    /// version of the record the update reads: again only if a concurrent write changed the
    /// record, or conflicted with the update. Returns the new record.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, key};
    /// # use tuplekv_index::Collection;
    /// #[derive(Clone, Serialize, Deserialize)]
    /// struct Counter { name: String, hits: u64 }
    ///
    /// let counters = Collection::builder("counters", |c: &Counter| key![c.name.clone()])
    ///     .open(Database::in_memory())?;
    /// counters.insert(&Counter { name: "home".into(), hits: 0 })?;
    /// let after = counters.update(&key!["home"], |mut c| { c.hits += 1; c })?;
    /// assert_eq!(after.hits, 1);
    /// # Ok::<(), tuplekv_index::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::PrimaryKeyChanged`] if `f` changes the primary key, and as
    /// [`Collection::insert`].
    pub fn update(&self, pk: &Key, mut f: impl FnMut(T) -> T) -> Result<T, Error>
    where
        T: Clone,
    {
        let record_key = self.write_record_key(pk)?;
        let mut last: Option<T> = None;
        let result = self.update_at(pk, &record_key, &mut |old| {
            let new = f(old);
            last = Some(new.clone());
            new
        });
        self.settle(result, pk, &record_key, || {
            let new = last?;
            Some((self.encode(pk, &new).ok()?, new))
        })
    }

    /// [`Collection::update`] before an unknown outcome is settled.
    pub(super) fn update_at(
        &self,
        pk: &Key,
        record_key: &[u8],
        mut f: impl FnMut(T) -> T,
    ) -> Result<T, Error>
    where
        T: Clone,
    {
        let record_key = record_key.to_vec();
        let mut made = None;
        let attempt = || self.update_unopposed(pk, &record_key, &mut f, &mut made);
        let lost = match self.try_unopposed(attempt) {
            Ok(done) => return done,
            Err(lost) => lost,
        };
        self.run_after(lost, |tx| {
            // The old record's entries are planned before `f` takes it, so it is not cloned.
            let Some((old, stamp, old_plan)) = self.read_in(tx, pk, &record_key)? else {
                return Err(Error::NotFound {
                    primary_key: pk.clone(),
                });
            };
            // What the first attempt made of this very version, if it read the same one.
            let new = match made.take() {
                Some((read, new)) if read == stamp => new,
                _ => f(old),
            };
            let new_pk = (self.def.primary_key)(&new);
            if new_pk != *pk {
                return Err(Error::PrimaryKeyChanged {
                    from: pk.clone(),
                    to: new_pk,
                });
            }
            self.put_in(tx, pk, &record_key, &old_plan, Some(&new))?;
            Ok(new)
        })
    }

    /// Deletes the record at `pk` and its index entries; returns it.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, ListOptions, key};
    /// # use tuplekv_index::{Collection, Error};
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct User { id: u64, email: String }
    ///
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(Database::in_memory())?;
    /// let ada = User { id: 1, email: "ada@example.com".into() };
    /// users.insert(&ada)?;
    /// assert_eq!(users.delete(&key![1])?, Some(ada.clone()));
    /// assert_eq!(users.delete(&key![1])?, None); // nothing there any more
    /// // Its unique entry went with it: the email is free again.
    /// assert_eq!(users.get_by("email", &key!["ada@example.com"])?, None);
    /// users.insert(&User { id: 2, ..ada })?;
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForWrite`] for a primary key too long for the engine's key limit (no
    /// such record can exist), a store error, or a conflict past the retry bound.
    pub fn delete(&self, pk: &Key) -> Result<Option<T>, Error> {
        let record_key = self.write_record_key(pk)?;
        let result = match self.try_unopposed(|| self.delete_unopposed(pk, &record_key)) {
            Ok(done) => done,
            Err(lost) => self.run_after(lost, |tx| {
                let Some((old, _, old_plan)) = self.read_in(tx, pk, &record_key)? else {
                    return Ok(None);
                };
                self.put_in(tx, pk, &record_key, &old_plan, None)?;
                Ok(Some(old))
            }),
        };
        // An absent record after an unknown outcome may be this delete's doing or not (and
        // what it deleted is unknown): reported either way.
        self.settle(result, pk, &record_key, || None)
    }
}
