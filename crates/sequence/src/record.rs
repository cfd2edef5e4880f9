//! [`Record`]: the caller's part of the commit that uses a code (the record itself and its own
//! checks), which a sequence commits together with its counter and uniqueness key.

use std::time::Duration;

use tuplekv_codec::{Key, encode_key};
use tuplekv_engine::limits::{
    CHECKS_MAX, MUTATIONS_MAX, TOTAL_KEY_SIZE_MAX, TOTAL_MUTATION_SIZE_MAX,
};
use tuplekv_engine::{
    AtomicWrite, Check, Expiry, KeyBytes, Mutation, MutationKind, Value, Versionstamp,
};

/// Checks and mutations to commit together with a number, built like an atomic operation.
///
/// ```
/// use tuplekv_sequence::Record;
/// use tuplekv_engine::key;
///
/// let mut record = Record::new();
/// record.check(&key!["orders", 42], None).set(&key!["orders", 42], b"INFO001");
/// assert_eq!(record.as_write().checks.len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    write: AtomicWrite,
}

impl Record {
    /// An empty record.
    pub fn new() -> Record {
        Record::default()
    }

    /// Requires `key` to have `versionstamp` (or, with `None`, to be absent).
    pub fn check(&mut self, key: &Key, versionstamp: Option<Versionstamp>) -> &mut Self {
        self.check_raw(&encode_key(key), versionstamp)
    }

    /// [`Record::check`] on an encoded key.
    pub fn check_raw(&mut self, key: &[u8], versionstamp: Option<Versionstamp>) -> &mut Self {
        self.write.checks.push(Check {
            key: KeyBytes::from(key),
            versionstamp,
        });
        self
    }

    /// Sets `key` to `value`.
    pub fn set(&mut self, key: &Key, value: impl Into<Value>) -> &mut Self {
        self.set_raw(&encode_key(key), value)
    }

    /// [`Record::set`] on an encoded key.
    pub fn set_raw(&mut self, key: &[u8], value: impl Into<Value>) -> &mut Self {
        self.mutate_raw(
            key,
            MutationKind::Set {
                value: value.into(),
                expiry: None,
            },
        )
    }

    /// Sets `key` to `value`, which disappears `expire_in` after the commit.
    pub fn set_with_expiry(
        &mut self,
        key: &Key,
        value: impl Into<Value>,
        expire_in: Duration,
    ) -> &mut Self {
        self.mutate_raw(
            &encode_key(key),
            MutationKind::Set {
                value: value.into(),
                expiry: Some(Expiry::In(expire_in)),
            },
        )
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: &Key) -> &mut Self {
        self.mutate_raw(&encode_key(key), MutationKind::Delete)
    }

    /// Adds `n` to the `U64` at `key`.
    pub fn sum(&mut self, key: &Key, n: u64) -> &mut Self {
        self.mutate_raw(&encode_key(key), MutationKind::Sum(n))
    }

    /// Any mutation on an encoded key.
    pub fn mutate_raw(&mut self, key: &[u8], kind: MutationKind) -> &mut Self {
        self.write.mutations.push(Mutation {
            key: KeyBytes::from(key),
            kind,
        });
        self
    }

    /// Appends the checks and mutations of `write`, a commit built elsewhere (such as
    /// `tuplekv_index::Collection::insert_write`'s), so the code's commit carries it.
    ///
    /// # Errors
    /// [`RecordError`] if `write` has range checks or a numbering of its own, which a
    /// record cannot carry; nothing is appended then.
    pub fn append(&mut self, write: AtomicWrite) -> Result<&mut Self, RecordError> {
        if !write.range_checks.is_empty() || !write.numbering.is_empty() {
            return Err(RecordError);
        }
        let AtomicWrite {
            mut checks,
            mut mutations,
            ..
        } = write;
        self.write.checks.append(&mut checks);
        self.write.mutations.append(&mut mutations);
        Ok(self)
    }

    /// The checks and mutations so far.
    pub fn as_write(&self) -> &AtomicWrite {
        &self.write
    }

    pub(crate) fn into_write(self) -> AtomicWrite {
        self.write
    }
}

/// A write [`Record::append`] cannot carry: one with range checks (a transaction's reads)
/// or a numbering of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a record carries checks and mutations only, not range checks or a numbering")]
pub struct RecordError;

/// How much of the engine's per-commit limits a batch has used, counted as the engine counts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Budget {
    checks: usize,
    mutations: usize,
    size: usize,
    key_size: usize,
}

impl Budget {
    /// Adds `write`'s cost; `false` (and no change) if the sum would pass a limit.
    pub(crate) fn try_add(&mut self, write: &AtomicWrite) -> bool {
        let mut next = *self;
        next.checks += write.checks.len();
        next.mutations += write.mutations.len();
        for c in &write.checks {
            next.size += c.key.len();
        }
        for m in &write.mutations {
            next.size += m.key.len();
            if let Some(v) = m.kind.value_size() {
                next.size += m.key.len() + v;
                next.key_size += m.key.len();
            }
        }
        let fits = next.checks <= CHECKS_MAX
            && next.mutations <= MUTATIONS_MAX
            && next.size <= TOTAL_MUTATION_SIZE_MAX
            && next.key_size <= TOTAL_KEY_SIZE_MAX;
        if fits {
            *self = next;
        }
        fits
    }
}
