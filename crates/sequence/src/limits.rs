//! The limits of sequences, each a named constant with a test at it and one past it
//! (`tests/bad_input.rs`, `tests/combining.rs`, `tests/reservation_limits.rs`,
//! `tests/store_errors.rs`, the block sizing rule's unit tests in `fast.rs`, and the
//! gathering rule's unit tests in `gapless.rs`).

use std::time::Duration;

/// Largest number a sequence hands out: 2^53 - 1, the largest integer a JavaScript number holds
/// exactly, so Deno clients reading counters or codes never see a rounded number.
pub const NUMBER_MAX: u64 = (1 << 53) - 1;

/// Longest prefix, in UTF-8 bytes.
pub const PREFIX_SIZE_MAX: usize = 64;

/// Most digits a code pads its number to (`NUMBER_MAX` has 16).
pub const WIDTH_MAX: usize = 16;

/// Longest code format template, in bytes.
pub const FORMAT_SIZE_MAX: usize = 128;

/// Longest encoded root key: the longest key a sequence writes (its uniqueness key for
/// [`NUMBER_MAX`] under a [`PREFIX_SIZE_MAX`]-byte prefix) then still fits the engine's
/// write limit of 2048 bytes. The suffix is `"used"` (6 bytes), the prefix (66) and the
/// bigint number (8).
pub const ROOT_SIZE_MAX: usize = tuplekv_engine::limits::KEY_SIZE_MAX_WRITE - 80;

/// Smallest block a fast sequence reserves (its first block, and the floor it shrinks to).
pub const BLOCK_SIZE_MIN: u64 = 16;

/// Largest block a fast sequence reserves: the most numbers a crash can waste per handle.
pub const BLOCK_SIZE_MAX: u64 = 65_536;

/// A block used up faster than this makes the next one twice as large (up to
/// [`BLOCK_SIZE_MAX`]), so a busy handle commits to the store rarely.
pub const BLOCK_GROW_WITHIN: Duration = Duration::from_millis(100);

/// A block that lasted longer than this makes the next one half as large (down to
/// [`BLOCK_SIZE_MIN`]), so an idle handle wastes little on a crash.
pub const BLOCK_SHRINK_AFTER: Duration = Duration::from_secs(10);

/// Most requests a gapless sequence combines into one commit. The engine's own limits
/// (100 checks, 1000 mutations, sizes) can make a batch smaller.
pub const BATCH_REQUESTS_MAX: usize = 64;

/// Most a gapless leader waits for requesters to come back before it leads a batch
/// (`gapless.rs`, "Gathering"): long beside a thread's return from its last code (tens of
/// microseconds), short beside an etcd commit (milliseconds).
pub const LINGER_MAX: Duration = Duration::from_millis(2);

/// A gapless leader gathers for at most this fraction (one over it) of its handle's recent
/// batch time, so gathering adds at most a quarter to a code's wait.
pub const LINGER_SHARE: u64 = 4;

/// Most times one reservation or batch retries after another handle moved the counter first.
pub const COMMIT_ATTEMPTS_MAX: u32 = 10_000;
