//! Keeping indexes whole: building an index over existing records while writes go on
//! ([`Collection::backfill`]), and checking and fixing entries ([`Collection::verify`],
//! [`Collection::repair`]).

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tuplekv_codec::{ByteRange, Key, Selector, decode_key};
use tuplekv_engine::{ListOptions, MutationKind, ReadView, Store, Value};

use crate::collection::{Collection, Planned, STATE_READY, codec_err, value_bytes};
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
    /// The record that holds the entry.
    pub holder: Key,
    /// The record that could not get it.
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
    /// Unique values wanted by more than one record (not fixable by `repair`).
    pub duplicates: Vec<Duplicate>,
}

impl VerifyReport {
    /// Whether the indexes match the records exactly.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty() && self.duplicates.is_empty()
    }
}

/// What the indexes should hold: entry key -> planned entry, the unique values wanted twice,
/// and entry key -> the record that should own it.
type Expected = (
    BTreeMap<Vec<u8>, Planned>,
    Vec<Duplicate>,
    BTreeMap<Vec<u8>, Key>,
);

/// Records read per backfill transaction.
pub const BACKFILL_BATCH_DEFAULT: usize = 200;
/// Entries fixed per repair transaction (well under the engine's mutation limit).
const REPAIR_BATCH: usize = 200;

impl<T, S> Collection<T, S>
where
    T: Serialize + DeserializeOwned,
    S: Store,
{
    /// Every record in primary-key order from one snapshot: (pk, bytes, record).
    fn all_records(&self, view: &S::Snapshot) -> Result<Vec<(Key, Vec<u8>, T)>, Error> {
        let range = self.records_range()?;
        let mut out = Vec::new();
        for e in view.scan(&range, false, usize::MAX)? {
            let key = decode_key(&e.key).map_err(codec_err)?;
            let pk = Key::new(key.parts()[2..].to_vec()).map_err(|err| Error::Codec {
                primary_key: Key::empty(),
                message: err.to_string(),
            })?;
            let bytes = value_bytes(&e.value)?.to_vec();
            let record = self.decode(&pk, &bytes)?;
            out.push((pk, bytes, record));
        }
        Ok(out)
    }

    /// Builds every index that is still *building* from the existing records, `batch` records
    /// per transaction, calling `progress` after each. Writes continue meanwhile (they already
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
    /// A store error or a conflict past the retry bound; the work done so far stays (it is
    /// correct), and running backfill again continues.
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
                let mut iter = self.store.list(
                    &Selector::prefix(&prefix),
                    ListOptions {
                        limit: Some(batch),
                        cursor: cursor.clone(),
                        ..ListOptions::default()
                    },
                )?;
                let mut pks = Vec::new();
                for e in iter.by_ref() {
                    let key = decode_key(&e?.key).map_err(codec_err)?;
                    pks.push(
                        Key::new(key.parts()[2..].to_vec()).map_err(|err| Error::Codec {
                            primary_key: Key::empty(),
                            message: err.to_string(),
                        })?,
                    );
                }
                if pks.is_empty() {
                    break;
                }
                let (written, dups) = self.store.transaction_with(&self.def.retry, |tx| {
                    let mut written = 0u64;
                    let mut dups = Vec::new();
                    for pk in &pks {
                        let Some(e) = tx.get_raw(&self.record_key(pk)?)? else {
                            continue; // deleted meanwhile
                        };
                        let bytes = value_bytes(&e.value)?.to_vec();
                        let record = self.decode(pk, &bytes)?;
                        for p in self.plan(pk, &record, &bytes, Some(i))? {
                            if idx.unique
                                && let Some(existing) = tx.get_raw(&p.key)?
                            {
                                let (holder, _) = Self::parse_entry(&existing.value)?;
                                if holder != *pk {
                                    dups.push(Duplicate {
                                        index: idx.name.clone(),
                                        value: p.value.clone(),
                                        holder,
                                        other: pk.clone(),
                                    });
                                    continue;
                                }
                            }
                            tx.mutate_raw(
                                &p.key,
                                MutationKind::Set {
                                    value: Value::from(p.entry),
                                    expire_in: None,
                                },
                            );
                            written += 1;
                        }
                    }
                    Ok::<_, Error>((written, dups))
                })?;
                done.records += pks.len() as u64;
                done.entries += written;
                duplicates.extend(dups);
                progress(&done);
                let last_page = pks.len() < batch;
                cursor = match iter.cursor() {
                    tuplekv_engine::ListCursor::After(c) if !last_page => Some(c),
                    _ => None,
                };
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

    /// What the indexes should hold (entry key -> (index, entry)) for the records of one
    /// snapshot, and the unique values wanted twice.
    fn expected(&self, records: &[(Key, Vec<u8>, T)]) -> Result<Expected, Error> {
        let mut expected: BTreeMap<Vec<u8>, Planned> = BTreeMap::new();
        let mut owners: BTreeMap<Vec<u8>, Key> = BTreeMap::new();
        let mut duplicates = Vec::new();
        for (pk, bytes, record) in records {
            for p in self.plan(pk, record, bytes, None)? {
                if let Some(holder) = owners.get(&p.key) {
                    duplicates.push(Duplicate {
                        index: self.def.indexes[p.index].name.clone(),
                        value: p.value.clone(),
                        holder: holder.clone(),
                        other: pk.clone(),
                    });
                    continue;
                }
                owners.insert(p.key.clone(), pk.clone());
                expected.insert(p.key.clone(), p);
            }
        }
        Ok((expected, duplicates, owners))
    }

    /// Checks every index entry against the records, from one snapshot: entries a record
    /// lacks, entries no record accounts for, entries with the wrong contents, and unique
    /// values two records want.
    ///
    /// # Errors
    /// A store error, or a record that does not decode.
    pub fn verify(&self) -> Result<VerifyReport, Error> {
        self.verify_with_owners().map(|(report, _)| report)
    }

    /// [`Collection::verify`], plus which record should own each expected entry.
    fn verify_with_owners(&self) -> Result<(VerifyReport, BTreeMap<Vec<u8>, Key>), Error> {
        let view = self.store.snapshot();
        let records = self.all_records(&view)?;
        let (expected, duplicates, owners) = self.expected(&records)?;
        let mut report = VerifyReport {
            records: records.len() as u64,
            duplicates,
            ..VerifyReport::default()
        };
        let mut actual: BTreeMap<Vec<u8>, Value> = BTreeMap::new();
        for kind in ["u", "i"] {
            let prefix = decode_key(&self.key(&[kind], &[])?).map_err(codec_err)?;
            let range: ByteRange = Selector::prefix(&prefix)
                .byte_range()
                .map_err(|e| Error::Store(e.into()))?;
            for e in view.scan(&range, false, usize::MAX)? {
                actual.insert(e.key.to_vec(), e.value);
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
                Some(Value::Bytes(b)) if b.as_ref() == p.entry.as_slice() => None,
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
        for key in actual.keys().filter(|k| !expected.contains_key(*k)) {
            let (index, k) = index_of(key)?;
            // An entry held by the other record of a reported duplicate is not dangling.
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
    /// A store error or a conflict past the retry bound; running it again continues.
    pub fn repair(&self) -> Result<VerifyReport, Error> {
        let (report, owners) = self.verify_with_owners()?;
        let keys: Vec<Vec<u8>> = report.findings.iter().map(|f| f.key.encode()).collect();
        for chunk in keys.chunks(REPAIR_BATCH) {
            self.store.transaction_with(&self.def.retry, |tx| {
                for key in chunk {
                    // Recompute, inside the transaction, what this entry should be, from the
                    // record verify expected to own it and the one it points at.
                    let current = tx.get_raw(key)?;
                    let mut candidates: Vec<Key> = owners.get(key).cloned().into_iter().collect();
                    if let Some(e) = &current
                        && let Ok((pk, _)) = Self::parse_entry(&e.value)
                    {
                        candidates.push(pk);
                    }
                    let want = self.wanted_entry(tx, key, &candidates)?;
                    match (want, current) {
                        (Some(entry), Some(cur)) if cur.value == Value::from(entry.clone()) => {}
                        (Some(entry), _) => tx.mutate_raw(
                            key,
                            MutationKind::Set {
                                value: Value::from(entry),
                                expire_in: None,
                            },
                        ),
                        (None, Some(_)) => tx.mutate_raw(key, MutationKind::Delete),
                        (None, None) => {}
                    }
                }
                Ok::<_, Error>(())
            })?;
        }
        Ok(report)
    }

    /// What the entry at `key` should hold now, judged from the records that could own it.
    fn wanted_entry(
        &self,
        tx: &mut tuplekv_engine::Transaction<'_, S>,
        key: &[u8],
        candidates: &[Key],
    ) -> Result<Option<Vec<u8>>, Error> {
        for pk in candidates {
            let Some(e) = tx.get_raw(&self.record_key(pk)?)? else {
                continue;
            };
            let bytes = value_bytes(&e.value)?.to_vec();
            let record = self.decode(pk, &bytes)?;
            if let Some(p) = self
                .plan(pk, &record, &bytes, None)?
                .into_iter()
                .find(|p| p.key == key)
            {
                return Ok(Some(p.entry));
            }
        }
        Ok(None)
    }
}
