//! Atomic operations: checks and mutations committed all-or-nothing under one versionstamp.
//!
//! [`AtomicWrite`] is the plain data of one commit, so any backend can carry it; [`Atomic`] is
//! the builder `Database::atomic()` returns.

use std::time::Duration;

use bytes::Bytes;

use tuplekv_codec::{Key, encode_key};

use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::numbering::Numbering;
use crate::store::Store;
use crate::value::{Value, Versionstamp};

/// A condition on the current state of one key, evaluated at commit time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Check {
    /// The encoded key.
    pub key: KeyBytes,
    /// The versionstamp the key must currently have, or `None` for "must be absent".
    pub versionstamp: Option<Versionstamp>,
}

/// A condition that no key in `[start, end)` changed after `since` (used by transactions to
/// validate what they read). Not counted against the check limit.
///
/// Expiry is a change too: `expires_at` is the earliest deadline among the values the read
/// returned, and a commit at or after it conflicts, because one of them has disappeared since.
/// Carrying the deadline in the check (rather than finding the expired version at commit
/// time) lets reclamation drop expired values without waiting for readers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RangeCheck {
    /// First encoded key of the range (inclusive).
    pub start: KeyBytes,
    /// End of the range (exclusive).
    pub end: KeyBytes,
    /// The snapshot the range was read at.
    pub since: Versionstamp,
    /// The earliest expiry deadline (Unix ms) of the values the read returned, if any expire.
    pub expires_at: Option<u64>,
}

/// When a value set by a mutation stops being visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Expiry {
    /// This long after the commit (one clock reading per commit, so values set together
    /// expire together). At most [`EXPIRE_IN_MAX_MS`](crate::limits::EXPIRE_IN_MAX_MS).
    In(Duration),
    /// At this Unix time in milliseconds (KV Connect's `expire_at_ms`). A deadline already
    /// past leaves the key absent to every read, as if deleted.
    At(u64),
}

/// The operand and bounds of a [`MutationKind::SumBounded`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BoundedSum {
    /// A `U64`, or a V8-serialised number or bigint.
    pub operand: Value,
    /// The smallest allowed result, V8-serialised like the operand (absent or empty: none).
    pub min: Option<Bytes>,
    /// The largest allowed result (absent or empty: none).
    pub max: Option<Bytes>,
    /// Clamp a result outside the bounds rather than fail the commit.
    pub clamp: bool,
}

/// What a mutation does to its key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MutationKind {
    /// Store a value; with an expiry, the value disappears at its deadline.
    Set {
        /// The value.
        value: Value,
        /// When the value stops being visible, if ever.
        expiry: Option<Expiry>,
    },
    /// Store a value at the mutation's key (the *prefix*) followed by one more string part:
    /// the commit's versionstamp as 20 lowercase hex digits (Deno's
    /// `kv.set([...prefix, kv.commitVersionstamp()], value)`), so the key is unique and sorts
    /// in commit order. The prefix counts against the key limits; the written key is 22
    /// bytes longer.
    SetSuffixVersionstampedKey {
        /// The value.
        value: Value,
        /// When the value stops being visible, if ever.
        expiry: Option<Expiry>,
    },
    /// Remove the key (a missing key is fine).
    Delete,
    /// Add to a `U64`, wrapping at 2^64; an absent key becomes the operand.
    Sum(u64),
    /// Add to a JavaScript number or bigint (Deno's sum of V8 values), or to a `U64`, with
    /// optional bounds: see [`sum_numbers`](crate::sum_numbers) for the rules. What KV
    /// Connect's `M_SUM` carries when its operand is not a plain `U64`. Boxed: it is rare,
    /// and every mutation is as large as the largest kind.
    SumBounded(Box<BoundedSum>),
    /// Keep the smaller `U64`; an absent key becomes the operand.
    Min(u64),
    /// Keep the larger `U64`; an absent key becomes the operand.
    Max(u64),
}

impl MutationKind {
    /// The value size this mutation counts for in the limits, if it carries a value (8 for
    /// a `U64` operand).
    pub fn value_size(&self) -> Option<usize> {
        match self {
            MutationKind::Set { value, .. }
            | MutationKind::SetSuffixVersionstampedKey { value, .. } => Some(value.size()),
            MutationKind::Sum(_) | MutationKind::Min(_) | MutationKind::Max(_) => Some(8),
            MutationKind::SumBounded(sum) => Some(sum.operand.size()),
            MutationKind::Delete => None,
        }
    }
}

/// The key a [`MutationKind::SetSuffixVersionstampedKey`] on `prefix` writes in the commit
/// stamped `versionstamp`: the prefix, then a string part holding the stamp's 20 hex digits.
///
/// ```
/// use tuplekv_engine::{Versionstamp, codec::encode_key, key, versionstamped_key};
///
/// let vs = Versionstamp::from_version(5);
/// let written = versionstamped_key(&encode_key(&key!["a"]), vs);
/// assert_eq!(written.as_slice(), encode_key(&key!["a", "00000000000000050000"]).as_slice());
/// ```
pub fn versionstamped_key(prefix: &[u8], versionstamp: Versionstamp) -> KeyBytes {
    let hex = versionstamp.to_string();
    let mut key = Vec::with_capacity(prefix.len() + crate::limits::VERSIONSTAMPED_KEY_SUFFIX_LEN);
    key.extend_from_slice(prefix);
    // A string part: its type code, the UTF-8 bytes (hex digits hold no 00 to escape), 00.
    key.push(0x02);
    key.extend_from_slice(hex.as_bytes());
    key.push(0);
    debug_assert_eq!(
        key.len(),
        prefix.len() + crate::limits::VERSIONSTAMPED_KEY_SUFFIX_LEN,
        "the suffix the write limit counts"
    );
    KeyBytes::from(key.as_slice())
}

/// One change to one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mutation {
    /// The encoded key.
    pub key: KeyBytes,
    /// The change.
    pub kind: MutationKind,
}

/// The data of one atomic commit: checks first, then mutations in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AtomicWrite {
    /// Conditions that must all hold, or nothing is written.
    pub checks: Vec<Check>,
    /// Range conditions (transactions' read sets).
    pub range_checks: Vec<RangeCheck>,
    /// Changes, applied in order; later ones see earlier ones.
    pub mutations: Vec<Mutation>,
    /// Numbers the store takes from its counters at commit time and writes into the keys
    /// and values above (empty for a plain commit); see [`crate::numbering`].
    pub numbering: Numbering,
}

impl AtomicWrite {
    /// Checks the write against every limit, in Deno's order, as a commit does before
    /// anything else (a store that sends writes elsewhere refuses them here first, with the
    /// same errors). Pure: nothing is read.
    ///
    /// # Errors
    /// The first limit the write breaks.
    pub fn validate(&self) -> Result<(), Error> {
        crate::pipeline::validate(self)
    }
}

/// A check that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedCheck {
    /// Position of the check in the operation.
    pub index: usize,
    /// The encoded key.
    pub key: KeyBytes,
    /// What the check expected.
    pub expected: Option<Versionstamp>,
    /// What the key had at commit time.
    pub actual: Option<Versionstamp>,
}

impl FailedCheck {
    /// The checked key, decoded.
    ///
    /// # Errors
    /// If the key bytes are not a valid tuple (only possible for raw keys).
    pub fn key(&self) -> Result<Key, Error> {
        Ok(tuplekv_codec::decode_key(&self.key)?)
    }
}

/// Why a commit did not happen although the operation was valid.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Conflict {
    /// Every check that failed (not only the first).
    pub failed_checks: Vec<FailedCheck>,
    /// Whether a transaction's read range changed.
    pub range_changed: bool,
}

/// The result of a valid atomic operation: committed, or rejected by its checks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum CommitResult {
    /// Everything was written under this versionstamp.
    Committed {
        /// The commit's stamp, shared by every mutation in it.
        versionstamp: Versionstamp,
        /// The first number of each of its counter claims ([`AtomicWrite::numbering`]), in
        /// claim order; empty for a commit that took none.
        numbers: Vec<u64>,
    },
    /// A check failed; nothing was written and no versionstamp was used.
    Conflict(Conflict),
}

impl CommitResult {
    /// Whether the operation committed.
    pub fn is_committed(&self) -> bool {
        matches!(self, CommitResult::Committed { .. })
    }

    /// The commit's versionstamp, if it committed.
    pub fn versionstamp(&self) -> Option<Versionstamp> {
        match self {
            CommitResult::Committed { versionstamp, .. } => Some(*versionstamp),
            CommitResult::Conflict(_) => None,
        }
    }

    /// The first number of each counter claim, if it committed (empty if it took none).
    pub fn numbers(&self) -> Option<&[u64]> {
        match self {
            CommitResult::Committed { numbers, .. } => Some(numbers),
            CommitResult::Conflict(_) => None,
        }
    }

    /// A committed result without numbers.
    pub fn committed(versionstamp: Versionstamp) -> CommitResult {
        CommitResult::Committed {
            versionstamp,
            numbers: Vec::new(),
        }
    }

    /// The conflict, if it did not commit.
    pub fn conflict(&self) -> Option<&Conflict> {
        match self {
            CommitResult::Conflict(c) => Some(c),
            CommitResult::Committed { .. } => None,
        }
    }
}

/// Builder of an atomic operation on a store; see `Database::atomic`.
///
/// ```
/// use tuplekv_engine::{Database, key};
///
/// let db = Database::in_memory();
/// let id = key!["users", 1];
/// let email = key!["users_by_email", "ada@example.com"];
/// let res = db.atomic()
///     .check(&id, None)              // both must be absent
///     .check(&email, None)
///     .set(&id, b"Ada")
///     .set(&email, b"1")
///     .commit()?;
/// assert!(res.is_committed());
///
/// // The same insert again conflicts, and says which checks failed.
/// let again = db.atomic().check(&id, None).check(&email, None).set(&id, b"x").commit()?;
/// let conflict = again.conflict().expect("conflict");
/// assert_eq!(conflict.failed_checks.len(), 2);
/// # Ok::<(), tuplekv_engine::Error>(())
/// ```
#[must_use = "an atomic operation does nothing until commit()"]
pub struct Atomic<'s, S: Store + ?Sized> {
    store: &'s S,
    write: AtomicWrite,
}

impl<'s, S: Store + ?Sized> Atomic<'s, S> {
    /// An empty operation on `store`.
    pub fn new(store: &'s S) -> Self {
        Atomic {
            store,
            write: AtomicWrite::default(),
        }
    }

    /// Requires `key` to have `versionstamp` (or, with `None`, to be absent) at commit time.
    pub fn check(self, key: &Key, versionstamp: Option<Versionstamp>) -> Self {
        self.check_raw(&encode_key(key), versionstamp)
    }

    /// [`Atomic::check`] on an encoded key.
    pub fn check_raw(mut self, key: &[u8], versionstamp: Option<Versionstamp>) -> Self {
        self.write.checks.push(Check {
            key: KeyBytes::from(key),
            versionstamp,
        });
        self
    }

    /// Sets `key` to `value`, clearing any expiry.
    pub fn set(self, key: &Key, value: impl Into<Value>) -> Self {
        self.mutate_raw(
            &encode_key(key),
            MutationKind::Set {
                value: value.into(),
                expiry: None,
            },
        )
    }

    /// Sets `key` to `value`, which becomes invisible `expire_in` after the commit.
    pub fn set_with_expiry(self, key: &Key, value: impl Into<Value>, expire_in: Duration) -> Self {
        self.mutate_raw(
            &encode_key(key),
            MutationKind::Set {
                value: value.into(),
                expiry: Some(Expiry::In(expire_in)),
            },
        )
    }

    /// [`Atomic::set`] on an encoded key.
    pub fn set_raw(self, key: &[u8], value: impl Into<Value>) -> Self {
        self.mutate_raw(
            key,
            MutationKind::Set {
                value: value.into(),
                expiry: None,
            },
        )
    }

    /// Sets the key `[...prefix, "<commit versionstamp>"]` to `value`: Deno's
    /// `set([...prefix, kv.commitVersionstamp()], value)`. The key's last part is the commit's
    /// versionstamp as a 20-digit hex string, so keys written this way are unique and sort in
    /// commit order.
    ///
    /// ```
    /// use tuplekv_engine::{Database, KeyPart, Selector, ListOptions, key};
    ///
    /// let db = Database::in_memory();
    /// let vs = db.atomic().set_versionstamped(&key!["log"], b"first").commit()?;
    /// let vs = vs.versionstamp().expect("committed");
    /// let entry = db.get(&key!["log", vs.to_string().as_str()])?.expect("written");
    /// assert_eq!(entry.versionstamp, vs);
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    pub fn set_versionstamped(self, prefix: &Key, value: impl Into<Value>) -> Self {
        self.mutate_raw(
            &encode_key(prefix),
            MutationKind::SetSuffixVersionstampedKey {
                value: value.into(),
                expiry: None,
            },
        )
    }

    /// Deletes `key`.
    pub fn delete(self, key: &Key) -> Self {
        self.mutate_raw(&encode_key(key), MutationKind::Delete)
    }

    /// [`Atomic::delete`] on an encoded key.
    pub fn delete_raw(self, key: &[u8]) -> Self {
        self.mutate_raw(key, MutationKind::Delete)
    }

    /// Adds `n` to the `U64` at `key` (wrapping); an absent key becomes `n`.
    pub fn sum(self, key: &Key, n: u64) -> Self {
        self.mutate_raw(&encode_key(key), MutationKind::Sum(n))
    }

    /// [`Atomic::sum`] on an encoded key.
    pub fn sum_raw(self, key: &[u8], n: u64) -> Self {
        self.mutate_raw(key, MutationKind::Sum(n))
    }

    /// Keeps the smaller of the `U64` at `key` and `n`; an absent key becomes `n`.
    pub fn min(self, key: &Key, n: u64) -> Self {
        self.mutate_raw(&encode_key(key), MutationKind::Min(n))
    }

    /// Keeps the larger of the `U64` at `key` and `n`; an absent key becomes `n`.
    pub fn max(self, key: &Key, n: u64) -> Self {
        self.mutate_raw(&encode_key(key), MutationKind::Max(n))
    }

    /// Adds a mutation on an encoded key.
    pub fn mutate_raw(mut self, key: &[u8], kind: MutationKind) -> Self {
        self.write.mutations.push(Mutation {
            key: KeyBytes::from(key),
            kind,
        });
        self
    }

    /// The operation built so far.
    pub fn as_write(&self) -> &AtomicWrite {
        &self.write
    }

    /// Commits: if every check holds, applies every mutation under one new versionstamp.
    ///
    /// # Errors
    /// A limit violation, an empty key, or `sum`/`min`/`max` on a value that is not a `U64`
    /// ([`Error::NotU64`], naming the mutation's index in the operation and its key); in
    /// every case nothing is written and no versionstamp is used.
    pub fn commit(self) -> Result<CommitResult, Error> {
        self.store.commit(self.write)
    }
}
