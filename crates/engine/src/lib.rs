//! The storage engine of tuplekv: an in-memory MVCC store of ordered keys with Deno KV's data
//! model — versionstamps, atomic checks and mutations (`set`, `delete`, `sum`/`min`/`max` on
//! `U64`, expiry), snapshots, listing with Deno's selectors and cursors, watches — plus
//! serializable transactions.
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
//! - A [`Watch`] sees every change of its keys once it is published (and every expiry): it
//!   yields the latest state after each, collapsing states in between, and never holds a
//!   commit up.
//! - Memory is reclaimed: old versions once no snapshot can see them (at once when no snapshot
//!   is open), deleted and expired keys in the background.
//!
//! # Costs worth knowing
//! One sentence per trade-off; what they cost on the benchmark machine is measured in
//! `docs/performance.md`.
//! - [`ListIter::read_all`] hands the batch it read over as the caller's vector; collecting
//!   the iterator instead copies every entry once more.
//! - A reverse list costs one map search per entry: the skiplist links only forward.
//! - Every entry a list or `get` returns owns its value: a copy of a value of up to 32 bytes
//!   (stored inline in its key's version list), or a share of a larger one's buffer (one
//!   atomic increment, and one decrement when it is dropped). [`Store::for_each`] hands out
//!   borrowed entries instead, with neither.
//! - A key is two allocations, its map node (with the key's bytes) and its version list (with
//!   small values inline); the README gives the figure. The whole dataset lives in memory.
//! - A commit of fresh keys allocates a map node and a version list per key, so the allocator
//!   is a large part of it; the engine does not choose one for you.
//! - Threads inserting new keys at once share the map's writer lock (held only to link a
//!   node; the search for its place runs before, in parallel), the commit lock, and the cache
//!   lines of the nodes around keys inserted next to each other. Overwrites of keys already
//!   in the map take no writer lock.
//!
//! # Locks
//! The engine's mutexes, outermost first. A thread holding one takes only locks listed
//! below it.
//! 1. `GroupCommit::checkpoint_lock` (one checkpoint at a time) or `Reclaimer::pass` (one
//!    reclamation pass at a time); never both.
//! 2. `Inner::commit`, the commit lock: it serialises commits and holds the last version.
//! 3. `GroupCommit::pending`, the batch a durable database's committers are gathering.
//! 4. Leaves, taken under the above and holding no other lock: the snapshot registry
//!    (`Inner::snapshots`), the key map's writer lock, the reclaimer's queues, the
//!    `Retired` lists, and the watch registry (`Watchers::closed`, then `Watchers::by_key`;
//!    a new watch registers under the commit lock, commits notify after releasing it).
//! 5. The log's own, `Wal::sync_lock` then `Wal::segment`, taken with nothing above held
//!    but `checkpoint_lock`: a flush takes its batch from `pending` and lets go before it
//!    writes.
//!
//! `GroupCommit::background`, each committer's `Waiter` (the log's flusher thread, which
//! leads batches of asynchronous committers, has one too) and each watch's signal are taken
//! alone. Readers take
//! none of these but the registry, for a moment, to register a snapshot.
//!
//! # Durability
//! [`Database::open`] backs the same engine with a write-ahead log and checkpoints in a
//! directory (module [`durable`]): [`Durability::Sync`] acknowledges a commit once it is on
//! stable storage, with concurrent committers sharing one sync; [`Durability::Buffered`] syncs
//! in the background. Recovery loads the newest checkpoint, replays the log, cuts a torn tail,
//! and refuses mid-log damage with [`Error::Corrupt`]. A failed write (a full disk) fails the
//! commit that met it and leaves memory as it was; a failed sync stops the database from
//! accepting writes until it is reopened.
//!
//! Where Deno differs: an operation whose mutation fails (e.g. `sum` on a non-`U64`) writes
//! nothing here, while Deno keeps the earlier mutations; a failed check is reported with
//! *which* checks failed; expired values disappear at their deadline, not up to a minute later.

mod atomic;
mod chain_cell;
mod class;
mod db;
pub mod durable;
mod error;
mod group_commit;
mod inner;
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
pub mod mutate;
pub mod numbering;
mod pipeline;
mod reclaim;
#[cfg(feature = "reference-keymap")]
mod reference_keymap;
pub mod replay;
mod snapshot;
mod store;
mod sum;
mod transaction;
mod value;
mod version;
mod watch;

/// The key map the engine runs on: its own skiplist, or with the test-only feature
/// `reference-keymap` crossbeam's `SkipMap` behind the same interface.
mod map {
    #[cfg(not(feature = "reference-keymap"))]
    pub(crate) use crate::keymap::{KeyMap, Slot};
    #[cfg(feature = "reference-keymap")]
    pub(crate) use crate::reference_keymap::{KeyMap, Slot};
}

pub use atomic::{
    Atomic, AtomicWrite, BoundedSum, Check, CommitResult, Conflict, Expiry, FailedCheck, Mutation,
    MutationKind, RangeCheck, versionstamped_key,
};
pub use class::{Classify, ErrorClass};
pub use db::{CHECKPOINT_AFTER_BYTES_DEFAULT, Database, Options, Stats};
pub use durable::{Durability, RecoveryReport};
pub use error::{Cause, Error, IoError};
pub use key_bytes::KeyBytes;
pub use list::{ListCursor, ListIter, ListOptions};
pub use snapshot::Snapshot;
pub use store::{Entry, EntryRef, Health, ListPage, ReadView, Store};
pub use sum::{SumError, sum_numbers};
pub use transaction::{Transaction, TransactionOptions};
pub use tuplekv_codec::{ByteRange, Key, KeyPart, Selector, key};
pub use value::{InvalidVersionstamp, Value, ValueRef, Versionstamp};
pub use watch::{KeyWatch, Watch, WatchUpdate};

/// The key codec, re-exported.
pub use tuplekv_codec as codec;
