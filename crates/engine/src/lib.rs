//! The storage engine of tuplekv: an in-memory MVCC store of ordered keys with Deno KV's data
//! model — versionstamps, atomic checks and mutations (`set`, `delete`, `sum`/`min`/`max` on
//! `U64`, expiry), snapshots, listing with Deno's selectors and cursors — plus serializable
//! transactions.
//!
//! ```
//! use tuplekv_engine::{Database, ListOptions, Selector, key};
//!
//! let db = Database::in_memory();
//! db.set(&key!["users", 1], b"Ada")?;
//! db.set(&key!["users", 2], b"Grace")?;
//! let users = db.list(&Selector::prefix(&key!["users"]), ListOptions::default())?;
//! assert_eq!(users.count(), 2);
//! # Ok::<(), tuplekv_engine::Error>(())
//! ```
//!
//! # Guarantees
//! - A commit is visible entirely or not at all, and its versionstamp order is the
//!   serialization order of commits. A failed commit writes nothing; a check conflict or a
//!   refused write uses no versionstamp, and a durable batch whose log write fails leaves its
//!   stamps unused for good (they are skipped, never handed out again).
//! - Readers never block writers and never wait for them. A single-key `get` takes no lock;
//!   snapshots, lists and `get_many` take the snapshot registry's mutex for a moment to register
//!   (and, when dropped, unregister) their version, never the commit lock, so a reader waits at
//!   most for another reader's or a commit's few-instruction registry update.
//! - A snapshot or list iterator reads one state from start to end.
//! - An expired value is invisible to every read and check from its deadline on.
//! - Memory is reclaimed: old versions once no snapshot can see them (at once when no snapshot
//!   is open), deleted and expired keys in the background.
//!
//! # Costs worth knowing
//! - To get a page of entries into a `Vec`, [`ListIter::read_all`] is the fast way: the batch
//!   read from the snapshot becomes the vector as it is. Collecting the iterator moves each
//!   entry (128 bytes) through it and grows the vector step by step, because a collect into
//!   `Result<Vec<_>, _>` cannot see the iterator's size. In the engine bench (100 entries out
//!   of 100k keys, one thread) `read_all` took 3.96–4.08 µs and collecting 5.88–6.90 µs.
//! - A reverse list pays one map search per entry, because the skiplist links only forward:
//!   about four and a half times a forward list of the same length (100 entries out of 100k
//!   keys, read with `read_all`: 16.3–17.4 µs against 3.5–3.8 µs in one process on the
//!   benchmark machine).
//! - Every entry a list or `get` returns shares its value's buffer: taking the share and,
//!   when the entry is dropped, giving it back are one atomic instruction each, about 8 ns
//!   apiece on the benchmark machine. That is some 40% of a 100-entry list; the walk, the
//!   version lists and the copies of the keys are the rest.
//! - A key costs about 215 bytes of allocator memory besides its value's buffer: the map node
//!   (which holds keys of up to [`KeyBytes::INLINE`] bytes), the version list and the value's
//!   reference count. A workload that keeps adding keys takes fresh memory on most commits.
//!   With glibc, a thread other than the main one then also grows its own heap one page per
//!   `mprotect` call. Fresh-key commits on a spawned thread ran at 402–523k/s with the
//!   defaults and at 468–628k/s (most rounds near 600k/s) with
//!   `GLIBC_TUNABLES=glibc.malloc.arena_max=1`, which puts every thread on the main heap
//!   (that one grows in larger steps) but makes the threads share it: with two committing
//!   threads it was the slower setting (458–529k/s against 630–832k/s). Measure allocator
//!   settings on your own workload.
//! - The allocator is a large part of a commit: a fresh key allocates its map node, its version
//!   list and its value's reference count. Measured with the earlier map (crossbeam's
//!   skiplist), with `mimalloc` as the program's global allocator,
//!   2-check-2-set commits of fresh keys into a 100k-key map (deleted again after each round)
//!   took a median 0.98 µs on one thread and 0.75 µs per commit with two, against 1.47 µs and
//!   0.93 µs with glibc's malloc (rounds after the first, which faults in fresh memory and ran
//!   slower with `mimalloc`). The engine does not pick an allocator for you; the benches use
//!   the system's.
//! - Threads inserting new keys at once share the map's writer lock (held only for the few
//!   stores that link a node: the search for its place runs before, in parallel), the commit
//!   lock, and the nodes around the new keys when they insert next to each other. How much
//!   that costs depends on where the two threads run. On the benchmark VM, a cache line passed
//!   between two threads in 22–33 ns when the host put the two vCPUs on one core and in
//!   194–200 ns when it put them on two, and it switched between the two during a run. In one
//!   engine bench run (23:41–23:55 UTC, 2026-11-23), two threads committing fresh
//!   2-check-2-set pairs took 1.26–1.39 µs per pair of commits in three rounds and 2.49–2.60
//!   µs in two rounds in which the in-memory peers' two-thread rates halved too. Overwrites of
//!   keys already in the map insert nothing and take no writer lock.
//!
//! # Durability
//! [`Database::open`] backs the same engine with a write-ahead log and checkpoints in a
//! directory (module [`durable`]): [`Durability::Sync`] acknowledges a commit once it is on
//! stable storage, with concurrent committers sharing one sync; [`Durability::Buffered`] syncs
//! in the background. Recovery loads the newest checkpoint, replays the log, cuts a torn tail,
//! and refuses mid-log damage with [`Error::Corrupt`]. An I/O error fails the commit that met
//! it and leaves memory as it was.
//!
//! Where Deno differs: an operation whose mutation fails (e.g. `sum` on a non-`U64`) writes
//! nothing here, while Deno keeps the earlier mutations; a failed check is reported with
//! *which* checks failed; expired values disappear at their deadline, not up to a minute later.

mod atomic;
mod chain_cell;
mod db;
pub mod durable;
mod error;
mod key_bytes;
// With `reference-keymap`, `map` is crossbeam's `SkipMap` and the skiplist is compiled only
// for its own tests.
#[cfg_attr(
    feature = "reference-keymap",
    allow(
        dead_code,
        reason = "the reference map replaces it outside its own tests"
    )
)]
mod keymap;
pub mod limits;
mod list;
mod reclaim;
#[cfg(feature = "reference-keymap")]
mod reference_keymap;
mod store;
mod transaction;
mod value;

/// The key map the engine runs on: its own skiplist, or with the test-only feature
/// `reference-keymap` crossbeam's `SkipMap` behind the same interface.
mod map {
    #[cfg(not(feature = "reference-keymap"))]
    pub(crate) use crate::keymap::{KeyMap, Slot};
    #[cfg(feature = "reference-keymap")]
    pub(crate) use crate::reference_keymap::{KeyMap, Slot};
}

pub use atomic::{
    Atomic, AtomicWrite, Check, CommitResult, Conflict, FailedCheck, Mutation, MutationKind,
    RangeCheck,
};
pub use db::{CHECKPOINT_AFTER_BYTES_DEFAULT, Database, Options, Snapshot, Stats};
pub use durable::{Durability, RecoveryReport};
pub use error::Error;
pub use key_bytes::KeyBytes;
pub use list::{ListCursor, ListIter, ListOptions};
pub use store::{Entry, ReadView, Store};
pub use transaction::{Transaction, TransactionOptions};
pub use tuplekv_codec::{ByteRange, Key, KeyPart, Selector, key};
pub use value::{InvalidVersionstamp, Value, Versionstamp};

/// The key codec, re-exported.
pub use tuplekv_codec as codec;
