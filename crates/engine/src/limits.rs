//! The limits of one operation, with Deno KV's numbers. Every limit has a test at the limit
//! and one past it (`tests/limits.rs`).

use crate::error::Error;

/// Largest encoded key a write (set, delete, sum/min/max, check) may use.
pub const KEY_SIZE_MAX_WRITE: usize = 2048;
/// What a versionstamped set adds to its prefix: a string part holding the commit's
/// versionstamp in 20 hex digits (type code, digits, terminator). The written key must fit
/// [`KEY_SIZE_MAX_WRITE`] like any other, so a prefix may be at most this much shorter (a
/// longer one would store a key that no get could name).
pub const VERSIONSTAMPED_KEY_SUFFIX_LEN: usize = 22;
/// Largest encoded key a read (get, list bounds) may use. One more than the write limit,
/// because range bounds may carry a `00`/`ff` suffix.
pub const KEY_SIZE_MAX_READ: usize = 2049;
/// Largest value, by [`Value::size`](crate::Value::size).
pub const VALUE_SIZE_MAX: usize = 65536;
/// Most checks in one atomic operation.
pub const CHECKS_MAX: usize = 100;
/// Most mutations in one atomic operation.
pub const MUTATIONS_MAX: usize = 1000;
/// Most bytes one atomic operation may carry: each check and delete counts its key, each
/// set/sum/min/max counts twice its key plus its value (8 for a `U64`).
pub const TOTAL_MUTATION_SIZE_MAX: usize = 819_200;
/// Most key bytes of the value-carrying mutations (set/sum/min/max) of one atomic operation.
pub const TOTAL_KEY_SIZE_MAX: usize = 81_920;
/// Most keys in one `get_many`.
pub const GET_MANY_KEYS_MAX: usize = 10;
/// Most keys one watch may watch.
pub const WATCH_KEYS_MAX: usize = 10;
/// Most entries one list batch may read.
pub const LIST_BATCH_SIZE_MAX: usize = 1000;
/// The list batch size when none is given: the limit, capped at this.
pub const LIST_BATCH_SIZE_DEFAULT_MAX: usize = 500;
/// Longest expiry, in milliseconds (2^53 - 1, the largest integer a JavaScript number holds).
pub const EXPIRE_IN_MAX_MS: u64 = (1 << 53) - 1;
/// The largest version a commit may have. Recovery refuses a file claiming a version above it
/// as damage, which leaves room above it for the versions a durable log reserves.
pub const VERSION_MAX: u64 = u64::MAX >> 1;
/// Most attempts a transaction makes before reporting a conflict.
pub const TRANSACTION_ATTEMPTS_MAX: u32 = 16;
/// Most counters one commit takes numbers from ([`crate::numbering`]).
pub const COUNTERS_PER_COMMIT_MAX: usize = 16;
/// Most numbers one commit takes, over all its counters: as many as it may write mutations.
pub const NUMBERS_PER_COMMIT_MAX: usize = MUTATIONS_MAX;
/// Most places one commit writes numbers into: every check key, mutation key and value
/// could hold a few.
pub const NUMBER_SLOTS_MAX: usize = 4 * (CHECKS_MAX + 2 * MUTATIONS_MAX);
/// Widest digit placeholder: the digits of `u64::MAX`.
pub const NUMBER_WIDTH_MAX: usize = 20;

/// Checks `key` against the read limit, [`KEY_SIZE_MAX_READ`].
pub(crate) fn check_read_key(key: &[u8]) -> Result<(), Error> {
    if key.len() > KEY_SIZE_MAX_READ {
        return Err(Error::KeyTooLargeForRead { size: key.len() });
    }
    Ok(())
}

/// Checks `key` against the write limits: not empty, at most [`KEY_SIZE_MAX_WRITE`] bytes.
pub(crate) fn check_write_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::EmptyKey);
    }
    check_write_key_len(key.len())
}

/// Checks a written key's length, `len`, against [`KEY_SIZE_MAX_WRITE`].
pub(crate) fn check_write_key_len(len: usize) -> Result<(), Error> {
    if len > KEY_SIZE_MAX_WRITE {
        return Err(Error::KeyTooLargeForWrite { size: len });
    }
    Ok(())
}

/// Most rounds an async operation ([`crate::replay::run`]) may take: each round answers at
/// least one more of the operation's reads or commits that had to wait, so this bounds how
/// many such calls one async operation makes in sequence. Rounds replay the calls before
/// them from a record, so an operation of `n` waiting calls costs about `n * n / 2`
/// recorded answers: the bound also keeps that cost in check.
pub const REPLAY_ROUNDS_MAX: usize = 1024;

/// Keys a borrowing scan ([`ReadView::scan_with`](crate::ReadView::scan_with)) visits under
/// one epoch pin before it renews the pin: a scan of the whole map would otherwise hold back
/// the freeing of every list replaced meanwhile for as long as it runs.
pub const SCAN_PIN_ENTRIES: usize = 1024;

/// Replaced version lists per sealed batch of the writers' retirement (see the design notes in
/// the crate's `chain_cell` module): one deferred marker, and one flush of the thread's
/// deferred functions, per this many stores over an existing list. A replaced list waits in
/// its batch until the epoch has moved on twice past the seal, so in a process whose only
/// pinning thread is the writer, at most the lists of the last commit plus about three
/// batches are waiting at any time (`tests/reclamation_peak.rs` checks it).
pub const RETIRE_BATCH: usize = 64;
