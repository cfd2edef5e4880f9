//! Keeping indexes whole: building an index over existing records while writes go on
//! ([`Collection::backfill`]), and checking and fixing entries ([`Collection::verify`],
//! [`Collection::repair`]).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tuplekv_codec::{ByteRange, Key, Selector, decode_key};
use tuplekv_engine::limits::{MUTATIONS_MAX, TOTAL_KEY_SIZE_MAX, TOTAL_MUTATION_SIZE_MAX};
use tuplekv_engine::{
    ListOptions, MutationKind, ReadView, Store, Transaction, Value, Versionstamp,
};

use crate::collection::{
    Collection, IndexSpec, Planned, STATE_BUILDING, STATE_READY, codec_err, pk_of_record_key,
    value_bytes,
};
use crate::error::Error;

/// Progress of a backfill, reported after each batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// The index being built.
    pub index: String,
    /// Records scanned so far.
    pub records: u64,
    /// Entries written so far.
    pub entries: u64,
}

/// Two records that want the same value of a unique index.
#[derive(Debug, Clone, PartialEq)]
pub struct Duplicate {
    /// The index.
    pub index: String,
    /// The value.
    pub value: Key,
    /// The record the stored entry points at (`None` when there is no entry). It may be
    /// neither of the records that want the value, if the entry is stale.
    pub holder: Option<Key>,
    /// A record that wants the value but does not hold the entry.
    pub other: Key,
}

/// What a backfill did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackfillReport {
    /// Indexes that were building and are ready now.
    pub completed: Vec<String>,
    /// Records scanned.
    pub records: u64,
    /// Entries written.
    pub entries: u64,
    /// Unique values wanted by more than one record. An index with duplicates stays
    /// *building* (it would answer wrongly) until they are resolved and backfill runs again.
    pub duplicates: Vec<Duplicate>,
}

/// What is wrong with an index entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A record lacks this entry.
    Missing,
    /// The entry belongs to no record (or to one that no longer has this value).
    Dangling,
    /// The entry exists but says something else (another primary key, a stale copy).
    Wrong,
}

/// One problem found by [`Collection::verify`].
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The index.
    pub index: String,
    /// The entry's key.
    pub key: Key,
    /// What is wrong.
    pub problem: Problem,
}

/// The result of [`Collection::verify`] or [`Collection::repair`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VerifyReport {
    /// Records checked.
    pub records: u64,
    /// Entries checked.
    pub entries: u64,
    /// Every missing, dangling or wrong entry.
    pub findings: Vec<Finding>,
    /// Unique values wanted by more than one record. Their entries are not in `findings`
    /// and `repair` leaves them as they are: which record keeps the value is for a person to
    /// decide (change or delete the others, then run `repair` or `backfill`).
    pub duplicates: Vec<Duplicate>,
}

impl VerifyReport {
    /// Whether the indexes match the records exactly.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty() && self.duplicates.is_empty()
    }
}

/// What the indexes should hold for one snapshot's records: entry key -> planned entry for
/// the keys one record wants, entry key -> (planned entry, every record that wants it) for
/// the unique keys several records want, and entry key -> the record that should own it.
struct Expected {
    entries: BTreeMap<Vec<u8>, Planned>,
    contested: BTreeMap<Vec<u8>, (Planned, Vec<Key>)>,
    owners: BTreeMap<Vec<u8>, Key>,
}

/// What `repair` should leave at a key, judged inside its transaction.
enum Want {
    /// This entry.
    Entry(crate::entry::EntryBytes),
    /// No entry: no record wants the key.
    Nothing,
    /// Several records want the key (a duplicate that appeared since `verify`): leave it.
    Contested,
}

/// Most records a backfill transaction reads. A transaction also closes early, before its
/// writes would pass the engine's commit limits (`MUTATIONS_MAX`, `TOTAL_MUTATION_SIZE_MAX`,
/// `TOTAL_KEY_SIZE_MAX`), so a multi-entry index with many values per record or a covering
/// index of large records is built in more, smaller transactions.
pub const BACKFILL_BATCH_DEFAULT: usize = 200;

/// Where a backfill transaction starts: a record of the listed page, and how many of that
/// record's planned entries are done already.
#[derive(Debug, Clone, Copy, Default)]
struct Resume {
    record: usize,
    entry: usize,
}

/// What one commit carries so far, counted as the engine counts it against its limits (see
/// `tuplekv_engine::limits`): a set counts its key twice plus its value, a delete its key, and
/// the keys of sets add up separately.
#[derive(Debug, Default, Clone)]
pub(crate) struct CommitBudget {
    mutations: usize,
    size: usize,
    set_keys: usize,
}

impl CommitBudget {
    /// Counts a set of a `key`-byte key to a `value`-byte value if it fits; the first
    /// mutation always fits (if it alone is over a limit, the commit reports which).
    pub(crate) fn admit_set(&mut self, key: usize, value: usize) -> bool {
        self.admit(1, 2 * key + value, key)
    }

    /// Counts a delete of a `key`-byte key if it fits.
    pub(crate) fn admit_delete(&mut self, key: usize) -> bool {
        self.admit(1, key, 0)
    }

    fn admit(&mut self, mutations: usize, size: usize, set_keys: usize) -> bool {
        let next = CommitBudget {
            mutations: self.mutations + mutations,
            size: self.size + size,
            set_keys: self.set_keys + set_keys,
        };
        let fits = next.mutations <= MUTATIONS_MAX
            && next.size <= TOTAL_MUTATION_SIZE_MAX
            && next.set_keys <= TOTAL_KEY_SIZE_MAX;
        if fits || self.mutations == 0 {
            *self = next;
            true
        } else {
            false
        }
    }
}

impl<T, S> Collection<T, S>
where
    T: Serialize + DeserializeOwned,
    S: Store,
{
    /// One page of at most `limit` entries under `prefix` after `cursor`, from a snapshot,
    /// and the cursor after it when the page is full (`None`: it was the last).
    pub(crate) fn list_page(
        &self,
        prefix: &Key,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<tuplekv_engine::Entry>, Option<String>), Error> {
        let mut iter = self.store.list(
            &Selector::prefix(prefix),
            ListOptions {
                limit: Some(limit),
                cursor,
                ..ListOptions::default()
            },
        )?;
        let mut page = Vec::new();
        for e in iter.by_ref() {
            page.push(e?);
        }
        let next = match iter.cursor() {
            tuplekv_engine::ListCursor::After(c) if page.len() >= limit => Some(c),
            _ => None,
        };
        Ok((page, next))
    }

    /// Every record in primary-key order from one snapshot: (pk, bytes, record).
    fn all_records(&self, view: &S::Snapshot) -> Result<Vec<(Key, Vec<u8>, T)>, Error> {
        let range = self.records_range()?;
        let mut out = Vec::new();
        for e in view.scan(&range, false, usize::MAX)? {
            let pk = pk_of_record_key(&e.key)?;
            let raw = value_bytes(&e.value)?;
            let record = self.decode(&pk, raw, e.versionstamp)?;
            // Copies are written (and compared) in the layout the schema says.
            let bytes = self.stored_bytes(raw, e.versionstamp)?;
            out.push((pk, bytes, record));
        }
        Ok(out)
    }

    /// Builds every index that is still *building* from the existing records, at most `batch`
    /// records per transaction (fewer when their entries would pass the engine's commit
    /// limits), calling `progress` after each. Writes continue meanwhile (they already
    /// maintain the index); each batch re-reads its records inside its transaction, so a
    /// record changed concurrently is indexed as it is at commit. When an index is complete
    /// and has no duplicates it becomes ready for queries.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, key};
    /// # use tuplekv_index::{BACKFILL_BATCH_DEFAULT, Collection, Error};
    /// #[derive(Serialize, Deserialize)]
    /// struct User { id: u32, email: String }
    ///
    /// let db = Database::in_memory();
    /// let v1 = Collection::builder("users", |u: &User| key![u.id]).open(db.clone())?;
    /// v1.insert(&User { id: 1, email: "ada@x".into() })?;
    /// // Version 2 of the application adds an index to the existing records.
    /// let v2 = Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(db)?;
    /// assert!(matches!(v2.get_by("email", &key!["ada@x"]), Err(Error::IndexNotReady { .. })));
    /// let report = v2.backfill(BACKFILL_BATCH_DEFAULT, |p| println!("{}: {} records", p.index, p.records))?;
    /// assert_eq!(report.completed, ["email"]);
    /// assert!(v2.get_by("email", &key!["ada@x"])?.is_some());
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForWrite`] for a record whose value for the index makes an entry
    /// key too long for the engine, a store error or a conflict past the retry bound; the
    /// work done so far stays (it is correct), and running backfill again continues.
    pub fn backfill(
        &self,
        batch: usize,
        mut progress: impl FnMut(&Progress),
    ) -> Result<BackfillReport, Error> {
        let batch = batch.max(1);
        let mut report = BackfillReport::default();
        for (i, idx) in self.def.indexes.iter().enumerate() {
            if self.refresh_ready(idx)? {
                continue;
            }
            let mut done = Progress {
                index: idx.name.clone(),
                records: 0,
                entries: 0,
            };
            let mut duplicates: Vec<Duplicate> = Vec::new();
            let prefix = decode_key(&self.key(&["id"], &[])?).map_err(codec_err)?;
            let mut cursor: Option<String> = None;
            loop {
                // The primary keys of the next batch, from a snapshot.
                let (page, next) = self.list_page(&prefix, batch, cursor.take())?;
                let pks = page
                    .iter()
                    .map(|e| pk_of_record_key(&e.key))
                    .collect::<Result<Vec<_>, _>>()?;
                if pks.is_empty() {
                    break;
                }
                // One or more transactions per page: each closes before its writes would
                // pass the engine's commit limits (a record's entries may even be split).
                let mut at = Resume::default();
                while at.record < pks.len() {
                    let from = at;
                    let (written, dups, reached) =
                        self.store.transaction_with(&self.def.retry, |tx| {
                            // Covering copies are written in the layout the schema says.
                            self.schema_in(tx)?;
                            self.backfill_step(tx, i, idx, &pks, from)
                        })?;
                    done.records += (reached.record - from.record) as u64;
                    done.entries += written;
                    duplicates.extend(dups);
                    progress(&done);
                    at = reached;
                }
                cursor = next;
                if cursor.is_none() {
                    break;
                }
            }
            report.records += done.records;
            report.entries += done.entries;
            if duplicates.is_empty() {
                let state = self.state_key(&idx.name)?;
                let res = self.store.atomic().set_raw(&state, STATE_READY).commit()?;
                debug_assert!(res.is_committed());
                self.refresh_ready(idx)?;
                report.completed.push(idx.name.clone());
            } else {
                report.duplicates.extend(duplicates);
            }
        }
        Ok(report)
    }

    /// One backfill transaction for index `i`: indexes `pks` from `from` on, re-reading each
    /// record, until they are done or the next entry would not fit the commit. Returns the
    /// entries written, the duplicates found and where the next transaction starts.
    fn backfill_step(
        &self,
        tx: &mut Transaction<'_, S>,
        i: usize,
        idx: &IndexSpec<T>,
        pks: &[Key],
        from: Resume,
    ) -> Result<(u64, Vec<Duplicate>, Resume), Error> {
        let mut budget = CommitBudget::default();
        let mut written = 0u64;
        let mut dups = Vec::new();
        let mut at = from;
        while let Some(pk) = pks.get(at.record) {
            let next_record = Resume {
                record: at.record + 1,
                entry: 0,
            };
            let Some(e) = tx.get_raw(&self.record_key(pk)?)? else {
                at = next_record; // deleted meanwhile
                continue;
            };
            let raw = value_bytes(&e.value)?;
            let record = self.decode(pk, raw, e.versionstamp)?;
            // Copies are written (and compared) in the layout the schema says.
            let bytes = self.stored_bytes(raw, e.versionstamp)?;
            // Resuming inside a record: if it changed since the last transaction, the writer
            // that changed it wrote all its new entries, so skipping some is harmless.
            for p in self
                .plan(pk, &record, &bytes, Some(i))?
                .into_iter()
                .skip(at.entry)
            {
                if idx.unique
                    && let Some(existing) = tx.get_raw(&p.key)?
                {
                    let (holder, _) = Self::parse_entry(&existing.value)?;
                    if holder != *pk {
                        dups.push(Duplicate {
                            index: idx.name.clone(),
                            value: p.value.clone(),
                            holder: Some(holder),
                            other: pk.clone(),
                        });
                        at.entry += 1;
                        continue;
                    }
                }
                if !budget.admit_set(p.key.len(), p.entry.len()) {
                    return Ok((written, dups, at));
                }
                tx.mutate_raw(
                    &p.key,
                    MutationKind::Set {
                        value: crate::entry::entry_value(p.entry),
                        expiry: None,
                    },
                );
                written += 1;
                at.entry += 1;
            }
            at = next_record;
        }
        Ok((written, dups, at))
    }

    /// Deletes every entry of `index` and its stored state.
    ///
    /// The index definitions live in code: removing an index from a collection's definition
    /// leaves its entries and its *ready* state in the store, and writes from then on no longer
    /// maintain them, so they go stale. Declaring the index again would find it ready and
    /// answer from those stale entries. So when an index is removed, call `drop_index` from a
    /// handle that no longer declares it (its writes are the ones that stop maintaining it);
    /// declaring it again later then starts it *building*, and [`Collection::backfill`] makes
    /// it ready. An index that was removed without `drop_index` must be dropped before it is
    /// declared again, or [`Collection::verify`] will find its stale entries.
    ///
    /// On a handle that declares `index`, it rebuilds the index: the index is *building*
    /// (queries return [`Error::IndexNotReady`]) from before the first entry is deleted until
    /// `backfill` has run. Writes keep maintaining it meanwhile; a unique value taken twice
    /// while its entry was gone is reported by `backfill` as a duplicate. Other handles that
    /// saw the index ready keep answering from it until they are opened again.
    ///
    /// Returns the number of entries deleted.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, key};
    /// # use tuplekv_index::{BACKFILL_BATCH_DEFAULT, Collection, Error};
    /// #[derive(Serialize, Deserialize)]
    /// struct User { id: u32, email: String }
    ///
    /// let db = Database::in_memory();
    /// let with_email = |db| Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(db);
    /// with_email(db.clone())?.insert(&User { id: 1, email: "ada@x".into() })?;
    /// // The next version removes the index, and drops it.
    /// let without = Collection::builder("users", |u: &User| key![u.id]).open(db.clone())?;
    /// assert_eq!(without.drop_index("email")?, 1);
    /// without.upsert(&User { id: 1, email: "ada@new".into() })?;
    /// // Declared again, it is built afresh.
    /// let again = with_email(db)?;
    /// assert!(matches!(again.get_by("email", &key!["ada@new"]), Err(Error::IndexNotReady { .. })));
    /// again.backfill(BACKFILL_BATCH_DEFAULT, |_| {})?;
    /// assert!(again.get_by("email", &key!["ada@new"])?.is_some());
    /// assert!(again.get_by("email", &key!["ada@x"])?.is_none());
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Definition`] for an empty name, or a store error; running it again continues.
    pub fn drop_index(&self, index: &str) -> Result<u64, Error> {
        if index.is_empty() {
            return Err(Error::Definition("the index name is empty".into()));
        }
        let state = self.state_key(index)?;
        let declared = self.def.indexes.iter().find(|i| i.name == index);
        if let Some(idx) = declared {
            let res = self
                .store
                .atomic()
                .set_raw(&state, STATE_BUILDING)
                .commit()?;
            debug_assert!(res.is_committed());
            idx.ready.store(false, Ordering::Release);
        }
        let mut deleted = 0u64;
        // The index's name decides its keys, not its kind: an undeclared index may have been
        // unique or not.
        for kind in ["u", "i"] {
            let prefix = decode_key(&self.key(&[kind, index], &[])?).map_err(codec_err)?;
            let range = Selector::prefix(&prefix)
                .byte_range()
                .map_err(|e| Error::Store(e.into()))?;
            loop {
                let keys = self.store.snapshot().scan(&range, false, MUTATIONS_MAX)?;
                if keys.is_empty() {
                    break;
                }
                let mut budget = CommitBudget::default();
                let mut write = self.store.atomic();
                for e in &keys {
                    if !budget.admit_delete(e.key.len()) {
                        break;
                    }
                    write = write.delete_raw(&e.key);
                    deleted += 1;
                }
                let res = write.commit()?;
                debug_assert!(res.is_committed());
            }
        }
        if declared.is_none() {
            let res = self.store.atomic().delete_raw(&state).commit()?;
            debug_assert!(res.is_committed());
        }
        Ok(deleted)
    }

    /// What the indexes should hold for the records of one snapshot.
    fn expected(&self, records: &[(Key, Vec<u8>, T)]) -> Result<Expected, Error> {
        let mut wanted: BTreeMap<Vec<u8>, (Planned, Vec<Key>)> = BTreeMap::new();
        for (pk, bytes, record) in records {
            for p in self.plan(pk, record, bytes, None)? {
                wanted
                    .entry(p.key.to_vec())
                    .or_insert_with(|| (p, Vec::new()))
                    .1
                    .push(pk.clone());
            }
        }
        let mut out = Expected {
            entries: BTreeMap::new(),
            contested: BTreeMap::new(),
            owners: BTreeMap::new(),
        };
        for (key, (p, wanters)) in wanted {
            match wanters.as_slice() {
                [owner] => {
                    out.owners.insert(key.clone(), owner.clone());
                    out.entries.insert(key, p);
                }
                _ => {
                    out.contested.insert(key, (p, wanters));
                }
            }
        }
        Ok(out)
    }

    /// Checks every index entry against the records, from one snapshot: entries a record
    /// lacks, entries no record accounts for, entries with the wrong contents, and unique
    /// values two records want.
    ///
    /// # Errors
    /// A store error, a record that does not decode, or [`Error::KeyTooLargeForWrite`] for a
    /// record whose entry key for some index would be too long to write (only possible in an
    /// index declared after the record was written; its backfill fails the same way).
    pub fn verify(&self) -> Result<VerifyReport, Error> {
        self.verify_with_owners().map(|(report, _)| report)
    }

    /// [`Collection::verify`], plus which record should own each expected entry.
    fn verify_with_owners(&self) -> Result<(VerifyReport, BTreeMap<Vec<u8>, Key>), Error> {
        let view = self.store.snapshot();
        let records = self.all_records(&view)?;
        let Expected {
            entries: expected,
            contested,
            owners,
        } = self.expected(&records)?;
        let mut report = VerifyReport {
            records: records.len() as u64,
            ..VerifyReport::default()
        };
        let mut actual: BTreeMap<Vec<u8>, (Value, Versionstamp)> = BTreeMap::new();
        for kind in ["u", "i"] {
            let prefix = decode_key(&self.key(&[kind], &[])?).map_err(codec_err)?;
            let range: ByteRange = Selector::prefix(&prefix)
                .byte_range()
                .map_err(|e| Error::Store(e.into()))?;
            for e in view.scan(&range, false, usize::MAX)? {
                actual.insert(e.key.to_vec(), (e.value, e.versionstamp));
            }
        }
        report.entries = actual.len() as u64;
        let index_of = |key: &[u8]| -> Result<(String, Key), Error> {
            let k = decode_key(key).map_err(codec_err)?;
            let name = match k.parts().get(2) {
                Some(tuplekv_codec::KeyPart::String(s)) => s.clone(),
                _ => String::new(),
            };
            Ok((name, k))
        };
        for (key, p) in &expected {
            let problem = match actual.get(key) {
                None => Some(Problem::Missing),
                Some((v, _)) if crate::entry::stored_matches(v, &p.entry) => None,
                // A plain copy from before a conversion, of a record that has not changed.
                Some((v, stamp)) if self.plain_copy_matches(v, *stamp, &p.entry) => None,
                Some(_) => Some(Problem::Wrong),
            };
            if let Some(problem) = problem {
                let (index, key) = index_of(key)?;
                report.findings.push(Finding {
                    index,
                    key,
                    problem,
                });
            }
        }
        // A contested key is reported with the record its entry really points at, and left
        // out of the findings, so `repair` does not pick a winner.
        for (key, (p, wanters)) in &contested {
            let holder = actual
                .get(key)
                .and_then(|(v, _)| Self::parse_entry(v).ok())
                .map(|(pk, _)| pk);
            let index = self
                .def
                .indexes
                .get(p.index)
                .map(|idx| idx.name.clone())
                .unwrap_or_default();
            for other in wanters.iter().filter(|w| holder.as_ref() != Some(*w)) {
                report.duplicates.push(Duplicate {
                    index: index.clone(),
                    value: p.value.clone(),
                    holder: holder.clone(),
                    other: other.clone(),
                });
            }
        }
        let unaccounted = actual
            .keys()
            .filter(|k| !expected.contains_key(*k) && !contested.contains_key(*k));
        for key in unaccounted {
            let (index, k) = index_of(key)?;
            report.findings.push(Finding {
                index,
                key: k,
                problem: Problem::Dangling,
            });
        }
        Ok((report, owners))
    }

    /// Fixes what [`Collection::verify`] finds: writes missing and wrong entries, deletes
    /// dangling ones, in transactions that re-read the owning records, so concurrent writes
    /// are never undone. Duplicates are reported, not fixed (a person has to choose).
    /// Returns the report of what was found (and fixed).
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, key};
    /// # use tuplekv_index::{Collection, Problem};
    /// #[derive(Serialize, Deserialize)]
    /// struct User { id: u32, color: String }
    ///
    /// let db = Database::in_memory();
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .index("color", |u| Some(key![u.color.clone()]))
    ///     .open(db.clone())?;
    /// users.insert(&User { id: 1, color: "green".into() })?;
    /// // Someone deletes the index entry behind the collection's back.
    /// db.delete(&key!["users", "i", "color", "green", 1])?;
    /// let found = users.verify()?;
    /// assert_eq!(found.findings[0].problem, Problem::Missing);
    /// users.repair()?;
    /// assert!(users.verify()?.is_clean());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Collection::verify`], or a conflict past the retry bound; running it again
    /// continues.
    pub fn repair(&self) -> Result<VerifyReport, Error> {
        self.repair_where(|_| true)
    }

    /// [`Collection::repair`] of the findings `keep` selects (the others are left out of the
    /// report too).
    pub(crate) fn repair_where(
        &self,
        keep: impl Fn(&Finding) -> bool,
    ) -> Result<VerifyReport, Error> {
        let (mut report, owners) = self.verify_with_owners()?;
        report.findings.retain(|f| keep(f));
        let keys: Vec<Vec<u8>> = report.findings.iter().map(|f| f.key.encode()).collect();
        let mut from = 0;
        while from < keys.len() {
            // Each transaction fixes keys from `from` on until the next fix would not fit the
            // commit (covering entries can be large).
            from = self.store.transaction_with(&self.def.retry, |tx| {
                // Covering copies are written in the layout the schema says.
                self.schema_in(tx)?;
                let mut budget = CommitBudget::default();
                let mut at = from;
                while let Some(key) = keys.get(at) {
                    // Recompute, inside the transaction, what this entry should be, from the
                    // record verify expected to own it and the one it points at.
                    let current = tx.get_raw(key)?;
                    let mut candidates: Vec<Key> = owners.get(key).cloned().into_iter().collect();
                    if let Some(e) = &current
                        && let Ok((pk, _)) = Self::parse_entry(&e.value)
                        && !candidates.contains(&pk)
                    {
                        candidates.push(pk);
                    }
                    match (self.wanted_entry(tx, key, &candidates)?, current) {
                        (Want::Contested, _) | (Want::Nothing, None) => {}
                        (Want::Entry(entry), Some(cur))
                            if crate::entry::stored_matches(&cur.value, &entry) => {}
                        (Want::Entry(entry), _) => {
                            if !budget.admit_set(key.len(), entry.len()) {
                                break;
                            }
                            tx.mutate_raw(
                                key,
                                MutationKind::Set {
                                    value: crate::entry::entry_value(entry),
                                    expiry: None,
                                },
                            );
                        }
                        (Want::Nothing, Some(_)) => {
                            if !budget.admit_delete(key.len()) {
                                break;
                            }
                            tx.mutate_raw(key, MutationKind::Delete);
                        }
                    }
                    at += 1;
                }
                Ok::<_, Error>(at)
            })?;
        }
        Ok(report)
    }

    /// What the entry at `key` should hold now, judged from the records that could own it.
    fn wanted_entry(
        &self,
        tx: &mut Transaction<'_, S>,
        key: &[u8],
        candidates: &[Key],
    ) -> Result<Want, Error> {
        let mut want = Want::Nothing;
        for pk in candidates {
            let Some(e) = tx.get_raw(&self.record_key(pk)?)? else {
                continue;
            };
            let raw = value_bytes(&e.value)?;
            let record = self.decode(pk, raw, e.versionstamp)?;
            // Copies are written (and compared) in the layout the schema says.
            let bytes = self.stored_bytes(raw, e.versionstamp)?;
            if let Some(p) = self
                .plan(pk, &record, &bytes, None)?
                .into_iter()
                .find(|p| *p.key == *key)
            {
                if matches!(want, Want::Entry(_)) {
                    return Ok(Want::Contested);
                }
                want = Want::Entry(p.entry);
            }
        }
        Ok(want)
    }
}
