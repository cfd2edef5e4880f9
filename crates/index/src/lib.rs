//! Typed collections with secondary indexes that can never drift from their records.
//!
//! A [`Collection<T>`] stores records of a serde type under `[name, "id", primary key...]` and
//! keeps its declared indexes in the **same atomic commit** as each record write:
//! - unique (one-to-one): `[name, "u", index, value...] -> primary key`; a second record with
//!   the same value fails with [`Error::UniqueViolation`] naming the record that has it;
//! - non-unique (one-to-many): `[name, "i", index, value..., primary key...]`;
//! - compound (a value of several parts, queried by any leading parts), multi-entry (one entry
//!   per element, [`CollectionBuilder::multi`]) and optional (no value, no entry);
//! - entries point at the primary key by default, or hold a copy of the record
//!   ([`CollectionBuilder::covering`]): one read per result instead of two, larger writes.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use tuplekv_engine::{Database, ListOptions, key};
//! use tuplekv_index::{Collection, Error};
//!
//! #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
//! struct User { id: u64, email: String, color: String }
//!
//! let users = Collection::builder("users", |u: &User| key![u.id])
//!     .unique("email", |u| Some(key![u.email.clone()]))
//!     .index("color", |u| Some(key![u.color.clone()]))
//!     .open(Database::in_memory())?;
//! users.insert(&User { id: 1, email: "ada@example.com".into(), color: "green".into() })?;
//! let imposter = User { id: 2, email: "ada@example.com".into(), color: "red".into() };
//! assert!(matches!(users.insert(&imposter), Err(Error::UniqueViolation { .. })));
//! let (_, ada) = users.get_by("email", &key!["ada@example.com"])?.expect("indexed");
//! assert_eq!(ada.id, 1);
//! assert_eq!(users.list_by("color", &key!["green"], ListOptions::default())?.items.len(), 1);
//! # Ok::<(), Error>(())
//! ```
//!
//! # Key layout
//! | key | value |
//! |---|---|
//! | `[coll, "id", pk...]` | the record: postcard bytes, or an envelope (*Record evolution*) |
//! | `[coll, "u", index, value...]` | unique entry: `0x00` + encoded pk (pointer; an integer pk is a `U64`, below), or `0x01` + pk length (u32 LE) + encoded pk + record bytes (covering) |
//! | `[coll, "i", index, value..., pk...]` | non-unique entry, same value format |
//! | `[coll, "meta", "index", index]` | `"building"` or `"ready"` |
//! | `[coll, "meta", "schema"]` | the schema (JSON): layout, versions, each version's shape |
//! | `[coll, "meta", "records"]` | `"converting"` (its versionstamp is the conversion's boundary), then `"enveloped"` once records carry envelopes |
//! | `[coll, "meta", "migration"]` | the cursor of an unfinished [`Collection::migrate_records`] |
//!
//! A pointer whose primary key is one integer in `0..2^64` (`key![id]`) is stored as that
//! integer, a `Value::U64`, as Deno's guide stores ids: the value then lives in the engine's
//! version list and needs no buffer of its own. The bytes form of such a pointer is read too,
//! so data written before this form existed stays valid (and is converted as its entries are
//! rewritten). The change is one-way: a build from before it reads a `U64` entry as malformed.
//!
//! A value is a [`Key`](tuplekv_codec::Key), so a compound index is a value of several parts
//! and [`Collection::list_by`] with fewer parts lists by the leading fields; a multi-entry
//! index has one entry per distinct value; an optional index returns `None` (no entry).
//!
//! # Why it cannot drift
//! Every write (`insert`, `upsert`, `update`, `delete`) is **one serializable transaction**
//! ([`tuplekv_engine::Store::transaction_with`]): it reads the record and every unique entry
//! its new version will own or its old one gives up, computes the old entries from the record
//! it read and the new ones from the new record, and commits the record together with every
//! entry delete and set. An old unique entry is deleted only if it points at this record: while
//! an index is being built, another record may hold it.
//! Each read becomes a commit condition ("this key has not changed since my snapshot"), so:
//! - two writers of the same record: the second one's record read is stale, it retries and
//!   computes its deletes from the first one's result; no entry is left behind;
//! - two records taking the same unique value: the second one's read of the (absent) entry is
//!   stale, it retries, sees the holder and fails with [`Error::UniqueViolation`];
//! - non-unique entries end with the primary key, so different records never share one.
//!
//! Conflicts retry with backoff up to a bound (`TRANSACTION_ATTEMPTS_MAX`, 16, or
//! [`CollectionBuilder::max_attempts`]); past it the write fails with
//! `Error::Store(TransactionConflict { attempts })` and has written nothing.
//!
//! We use a transaction rather than a hand-built `atomic()` with versionstamp checks (the
//! guide's pattern) because the checks a write needs are exactly its reads, including the
//! *absence* of unique entries and of the record, and a transaction derives them from what was
//! read, with no second list of checks to keep in step with the code. The commit carries the
//! same conditions a hand-built atomic would (one versionstamp check per key read) plus the
//! mutations, and the engine applies it all or nothing.
//!
//! Two shortcuts keep the layer close to the hand-written pattern without weakening it. First,
//! an insert, update or delete first tries that very commit without a transaction, as the guide
//! writes it: an insert checks that the record and every unique value it claims are absent; an
//! update or delete reads the record's latest version and checks it is unchanged, and reads
//! each unique entry it gives up or claims: an entry is changed only if it is free or the
//! record's, and the commit checks it is still what was read. It writes exactly the entry
//! changes the transaction would. When anything is in the
//! way (or the commit is refused for any reason) nothing was written, and the transaction runs
//! and reports what it finds, with the same errors; the attempt counts toward the retry bound.
//! An update's closure runs once per version of the record it reads: the transaction reuses
//! what the first attempt made if it reads the same version. Second, a unique entry that
//! already holds exactly what a write would set is read and checked but not rewritten.
//!
//! # Reads
//! Queries read one snapshot: a pointer entry and the record it names are read from the same
//! state, so a query never returns a record that no longer has the value it was found by. A
//! covering entry answers from its own copy (one read per result instead of two; every write
//! rewrites the copy). Pages use the engine's list options (`limit`, `reverse`, `cursor`), and
//! a [`Page`] carries the cursor for the next one: Deno's format, taken relative to the
//! collection's unique (`[coll, "u"]`) or non-unique (`[coll, "i"]`) keyspace rather than to
//! the query, so it is never `""` (Deno's "from the start"), even for an exact unique value.
//!
//! # Values
//! Records are serialised with [postcard](https://docs.rs/postcard) and stored as
//! `Value::Bytes`. Postcard is compact (varint integers, no field names, no per-field tags),
//! serde-driven, and its 1.x wire format is specified and frozen, so stored records do not
//! change meaning under a dependency upgrade. The cost: it is not self-describing, so only
//! some changes of `T` read old records without code (next section). `bincode` was the
//! alternative with the same size; its 1.x and 2.x formats and APIs differ, which is what we
//! wanted to avoid. MessagePack (`rmp-serde`) is self-describing, at the price of a type
//! marker per value (and field names in its map mode); [`RecordFormat::Json`] is the
//! self-describing option we offer, for structs that change shape often.
//!
//! # Record evolution
//! Postcard stores no field names: a record's bytes mean something only against the shape of
//! the struct that wrote them. So the collection keeps that shape. At `open` it traces the
//! struct's serde shape (field names, order and types, through its derive, with
//! [serde-reflection](https://docs.rs/serde-reflection)) and compares it with the shape stored
//! for its version in `[coll, "meta", "schema"]`, before any record is read or written:
//! - **free**: a field added at the end with `#[serde(default)]`, a field renamed with
//!   [`CollectionBuilder::renamed`]`("old", "new")`, an integer widened (`u32` to `u64`: the
//!   same varints), an enum variant added at the end;
//! - **refused** with [`Error::Schema`], naming the fields and what to declare: fields
//!   reordered (two `String`s swapped would read each other's values), removed, retyped,
//!   inserted before the end, renamed without the declaration, added at the end without a
//!   default, or added inside a nested struct or variant;
//! - **declared**: any change at all, as a new [`CollectionBuilder::version`] with a
//!   [`CollectionBuilder::migrate`]`(from, |old: OldStruct| ...)` per older version still
//!   stored. The layer reads each old record as `OldStruct` with its own reader (trailing
//!   defaults fill in, whichever format it is in); `OldStruct`'s shape is checked against the
//!   stored one, and `open` converts every old record once without writing, refusing with the
//!   first one that fails and its key. Reads convert old records as they meet them;
//!   [`Collection::migrate_records`] rewrites them in the current version in batches, each
//!   commit carrying its cursor, so a crash resumes where it stopped; then the old versions
//!   are retired (their migrations can go) and the declared indexes repaired (an index this
//!   build no longer declares is left for `drop_index`: an older build may still read it). A
//!   migration that changes an indexed value leaves queries by it stale until then: the old
//!   records' entries were computed from the old struct.
//!
//! [`RecordFormat::Json`] reads by name instead: fields added anywhere (with a default),
//! removed, or renamed with `#[serde(alias)]` need nothing, at about twice postcard's size and
//! a slower read. (`#[serde(alias)]` on a postcard struct hides its field order from the
//! tracer; `open` says to use `renamed` instead.) A type whose deserialisation validates what
//! it reads (a checked newtype, a date parsed from a string) rejects the tracer's made-up
//! values: give [`CollectionBuilder::shape_sample`] a real record.
//!
//! **Who may write.** Every record write checks, in its own commit, that the schema key is
//! what its handle read; a handle whose schema changed reads it again before retrying. Once a
//! newer version is declared, handles of older versions cannot write ([`Error::Schema`]) and
//! an older build cannot open; reads of records of a version a handle has no migration for are
//! [`Error::Incompatible`], never a wrong value. So during a rolling upgrade that declares a
//! version, the old build's servers keep reading their version's records but stop writing;
//! upgrades that only add trailing defaulted fields keep every running handle writing (an
//! older build's handle cannot read the new build's longer records, and is refused if it
//! opens again, since the stored shape has fields its struct lacks).
//!
//! **Layout.** A collection that has never declared a version or a format stores plain
//! postcard, byte for byte what it stored before versioning existed. A versioned record is an
//! envelope: [`ENVELOPE_TAG`] (`0xE7`), a format byte, the version as a varint, then the body.
//! A plain record may start with `0xE7` too, so whether a record is an envelope is never
//! guessed from its bytes: the schema's layout says it. The first handle that writes envelopes
//! sets the layout to *converting* (from then on no plain record can be written: every plain
//! writer's commit checks the schema), wraps every earlier plain record that starts with
//! `0xE7`, and every covering copy of one, byte for byte in an envelope of version 0, and sets
//! it to *enveloped*. While converting, a record is an envelope if it was written after the
//! conversion began (its versionstamp says so: every writer of the schema keeps the stamp of
//! the first one that said *converting*), and a handle that lived through the conversion
//! keeps judging by that stamp, since a snapshot it took before may still hold plain
//! records; a crash during the conversion resumes at the next `open`. A record (or covering
//! copy) within 3 bytes of the value limit that starts with `0xE7` cannot be wrapped: the open
//! that would convert is refused, naming it, before anything changes; one a plain writer
//! commits while that open runs keeps the layout *converting* (where it reads correctly, by
//! its versionstamp) until it is shrunk or deleted, each `open` trying again. The boundary is
//! the versionstamp of the marker `[coll, "meta", "records"] = "converting"`, written in the
//! conversion's first commit, so a copy of the collection into another database that keeps
//! each commit's writes together and in order (a dump loaded elsewhere) keeps it too.
//!
//! **Cost.** `open` traces the struct and reads the schema (one key); while a migration is
//! unfinished it also reads every record. A write carries one more check (the schema key's
//! versionstamp), a transaction one more read. A read of a plain or current record pays one
//! atomic load and a branch on the first byte (in a plain collection, a record that starts
//! with `0xE7` also reads the schema key, in case the layout changed); a versioned record is
//! 3 bytes longer (more for versions past 127); a record of an older version also runs its
//! migration.

//! # Limits
//! The engine's limits apply to each commit, and a write past one writes nothing:
//! - a record key (`[coll, "id", pk...]`) and every entry key (`[coll, "u", index,
//!   value...]`, `[coll, "i", index, value..., pk...]`) must fit `KEY_SIZE_MAX_WRITE` (2048
//!   bytes). The collection checks them before the write reads or commits anything and
//!   reports [`Error::KeyTooLargeForWrite`] naming the collection and the index (none for a
//!   too-long primary key), as in ``collection `users`, index `email`: entry key is 2049
//!   bytes, max for write is 2048``. A backfill meeting such a value fails the same way;
//! - the encoded record, and each covering entry (record + primary key + 5 bytes), must fit
//!   `VALUE_SIZE_MAX` (64 KiB): a too-large record is [`Error::Store`] with the engine's
//!   `ValueTooLarge`;
//! - the record and all its entry changes (deletes of old entries included) are one commit,
//!   so at most `MUTATIONS_MAX` (1000) of them: a multi-entry index with thousands of values
//!   per record is refused rather than half written ([`Error::Store`] with
//!   `TooManyMutations`).
//!
//! # Adding an index later
//! An index declared on a collection that already has records starts *building*: writes
//! maintain it at once, queries on it return [`Error::IndexNotReady`], and
//! [`Collection::backfill`] indexes the existing records in bounded batches (each one
//! transaction that re-reads its records, so a record changed meanwhile is indexed as it is at
//! commit, and that closes before its writes would pass the engine's commit limits) with
//! progress reporting while writes continue. Duplicates found while building a
//! unique index are reported in [`BackfillReport::duplicates`] and keep it from going live
//! until resolved. [`Collection::verify`] reports every missing, dangling or wrong entry from
//! one snapshot; [`Collection::repair`] fixes them in transactions that re-read the records,
//! so it never undoes a concurrent write. Entries of a unique value several records want are
//! reported as [`Duplicate`]s naming the record the entry points at, and left alone: which
//! record keeps the value is for a person to decide.
//!
//! The index definitions live in code, not in the store: every handle that writes the
//! collection (every process, every version of the application still running) must declare
//! the new index before `backfill` starts, or its writes will not maintain it. `verify` finds
//! what such a writer left behind and `repair` fixes it.
//!
//! # Removing an index
//! Removing an index from the definition leaves its entries and its *ready* state behind, and
//! writes stop maintaining them. Call [`Collection::drop_index`] (from a handle that no longer
//! declares it) to delete both; an index declared again after that starts *building*. An index
//! declared again without having been dropped would answer from stale entries: drop it first
//! (on a handle that declares it, `drop_index` rebuilds it: building until `backfill`).

mod asynchronous;
mod collection;
mod entry;
mod error;
mod evolve;
mod maintain;
mod record;
mod schema;

pub use collection::{Collection, CollectionBuilder, Extract, Page, Values};
pub use error::{Error, Reread};
pub use evolve::{MIGRATE_BATCH_DEFAULT, MigrationProgress, MigrationReport};
pub use maintain::{
    BACKFILL_BATCH_DEFAULT, BackfillReport, Duplicate, Finding, Problem, Progress, VerifyReport,
};
pub use record::{ENVELOPE_TAG, RecordFormat};
