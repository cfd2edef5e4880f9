//! A reference model of the engine, written to be obviously right rather than fast: a
//! `BTreeMap` of encoded key to (value, version), one commit at a time, with Deno KV's rules for
//! checks and the `sum`/`min`/`max` mutations, and all-or-nothing commits. Property tests and
//! the `engine_ops` fuzz target run the same operations on it and on `Database` and compare.
//!
//! Expiry is modelled at its two deterministic ends: a set with a zero expiry is invisible from
//! its commit on (to reads, checks and the later mutations of its own commit), so it acts as
//! a delete; any longer expiry is taken to outlive the test. Deadlines in between need time
//! and are tested on their own. Not modelled: range checks (only transactions make them; a
//! single thread never conflicts).

use std::collections::BTreeMap;

use tuplekv_engine::{
    AtomicWrite, CommitResult, Conflict, Error, Expiry, FailedCheck, MutationKind, Value,
    Versionstamp, versionstamped_key,
};

/// The model's state: every live key with its value and the version that wrote it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reference {
    entries: BTreeMap<Vec<u8>, (Value, u64)>,
    version: u64,
}

impl Reference {
    /// An empty store.
    pub fn new() -> Reference {
        Reference::default()
    }

    /// The value and versionstamp at `key`.
    pub fn get(&self, key: &[u8]) -> Option<(Value, Versionstamp)> {
        self.entries
            .get(key)
            .map(|(v, ver)| (v.clone(), Versionstamp::from_version(*ver)))
    }

    /// The entries of `[start, end)`, in order (or reversed), at most `limit`.
    pub fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        reverse: bool,
        limit: usize,
    ) -> Vec<(Vec<u8>, Value, Versionstamp)> {
        if start >= end {
            return Vec::new();
        }
        let range = self.entries.range(start.to_vec()..end.to_vec());
        let map = |(k, (v, ver)): (&Vec<u8>, &(Value, u64))| {
            (k.clone(), v.clone(), Versionstamp::from_version(*ver))
        };
        if reverse {
            range.rev().take(limit).map(map).collect()
        } else {
            range.take(limit).map(map).collect()
        }
    }

    /// The last committed versionstamp.
    pub fn versionstamp(&self) -> Versionstamp {
        Versionstamp::from_version(self.version)
    }

    /// Commits `write` as the engine should: checks first (reporting every failed one), then
    /// the mutations in order on a copy, which replaces the state only if all succeed. Limits
    /// are not re-checked here; callers stay within them.
    ///
    /// # Errors
    /// [`Error::NotU64`] when `sum`, `min` or `max` meets a value that is not a `U64`.
    pub fn commit(&mut self, write: &AtomicWrite) -> Result<CommitResult, Error> {
        // Numbers first: the counters' values now, every placeholder filled.
        tuplekv_engine::numbering::validate(write)?;
        let current: Vec<Option<Value>> = write
            .numbering
            .counters
            .iter()
            .map(|c| self.get(&c.key).map(|(v, _)| v))
            .collect();
        let current: Vec<Option<&Value>> = current.iter().map(Option::as_ref).collect();
        let (resolved, numbers) = tuplekv_engine::numbering::resolve(write.clone(), &current)?;
        let write = &resolved;
        let mut conflict = Conflict::default();
        for (index, check) in write.checks.iter().enumerate() {
            let actual = self.get(&check.key).map(|(_, vs)| vs);
            if actual != check.versionstamp {
                conflict.failed_checks.push(FailedCheck {
                    index,
                    key: check.key.clone(),
                    expected: check.versionstamp,
                    actual,
                });
            }
        }
        if !conflict.failed_checks.is_empty() {
            return Ok(CommitResult::Conflict(conflict));
        }
        let version = self.version + 1;
        let mut next = self.entries.clone();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        for (index, m) in write.mutations.iter().enumerate() {
            let key = match &m.kind {
                MutationKind::SetSuffixVersionstampedKey { .. } => {
                    versionstamped_key(&m.key, Versionstamp::from_version(version)).to_vec()
                }
                _ => m.key.to_vec(),
            };
            let current = next.get(&key).map(|(v, _)| v.clone());
            let u64_op = |op: &'static str, n: u64, f: fn(u64, u64) -> u64| match &current {
                None => Ok(n),
                Some(Value::U64(old)) => Ok(f(*old, n)),
                Some(_) => Err(Error::NotU64 {
                    op,
                    index,
                    key: m.key.clone(),
                }),
            };
            let new = match &m.kind {
                MutationKind::Set { expiry, value }
                | MutationKind::SetSuffixVersionstampedKey { expiry, value } => match expiry {
                    Some(Expiry::In(d)) if d.is_zero() => None,
                    Some(Expiry::At(deadline)) if *deadline <= now => None,
                    _ => Some(value.clone()),
                },
                MutationKind::Delete => None,
                MutationKind::Sum(n) => Some(Value::U64(u64_op("sum", *n, u64::wrapping_add)?)),
                MutationKind::Min(n) => Some(Value::U64(u64_op("min", *n, u64::min)?)),
                MutationKind::SumBounded(sum) => Some(tuplekv_engine::sum_numbers(
                    &sum.operand,
                    sum.min.as_ref(),
                    sum.max.as_ref(),
                    sum.clamp,
                    current.as_ref(),
                )?),
                MutationKind::Max(n) => Some(Value::U64(u64_op("max", *n, u64::max)?)),
            };
            match new {
                Some(v) => {
                    next.insert(key, (v, version));
                }
                None => {
                    next.remove(&key);
                }
            }
        }
        self.entries = next;
        self.version = version;
        Ok(CommitResult::Committed {
            versionstamp: Versionstamp::from_version(version),
            numbers,
        })
    }
}
