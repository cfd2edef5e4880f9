//! [`Collection`]: the definition (name, primary key, indexes), the write path that keeps
//! records and index entries in one commit, and the queries.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, RwLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use smallvec::SmallVec;
use tuplekv_codec::{
    ByteRange, Key, KeyPart, Selector, SelectorError, decode_key, encode_key, encode_key_into,
    encode_part_into,
};
use tuplekv_engine::limits::{CHECKS_MAX, KEY_SIZE_MAX_WRITE, MUTATIONS_MAX};
use tuplekv_engine::{
    AtomicWrite, Check, Entry, KeyBytes, ListCursor, ListIter, ListOptions, Mutation, MutationKind,
    ReadView, Store, Transaction, TransactionOptions, Value, Versionstamp,
};

use crate::entry::{self, COVERING, EntryBytes, POINTER, PkBytes, entry_value, stored_matches};
use crate::error::{Error, Reread};
use crate::evolve::{Cache, LAYOUT_PLAIN, MigrationSpec};
use crate::record::{self, RecordFormat};
use crate::schema;

/// Computes a record's values for one index: none (the record is not in it), one, or several
/// (a multi-entry index). A value is a [`Key`], so a compound index is a value of several parts.
pub type Extract<T> = Arc<dyn Fn(&T) -> Values + Send + Sync>;

/// What an [`Extract`] returns: a record's values for one index, inline when there is at most
/// one (every index but a multi-entry one), so planning a write allocates nothing for them.
pub type Values = SmallVec<[Key; 1]>;

/// One declared index.
pub(crate) struct IndexSpec<T> {
    pub(crate) name: String,
    pub(crate) unique: bool,
    pub(crate) covering: bool,
    pub(crate) extract: Extract<T>,
    /// Whether the index is known to be complete (cached once seen).
    pub(crate) ready: AtomicBool,
    /// The encoded `[collection, "u" | "i", name]` every entry key starts with, computed once
    /// by `open` so the write and read paths append bytes instead of encoding names again.
    pub(crate) prefix: Vec<u8>,
}

/// The definition of a collection, shared by its clones.
pub(crate) struct Def<T> {
    pub(crate) name: String,
    pub(crate) primary_key: Arc<dyn Fn(&T) -> Key + Send + Sync>,
    pub(crate) indexes: Vec<IndexSpec<T>>,
    pub(crate) retry: TransactionOptions,
    /// The encoded `[collection, "id"]` every record key starts with (set by `open`).
    pub(crate) record_prefix: Vec<u8>,
    /// The format new records are written in when they are written in an envelope.
    pub(crate) format: RecordFormat,
    /// The version of `T` this handle declares (0: none declared).
    pub(crate) version: u32,
    /// Conversions of records written by older versions of `T`, by version.
    pub(crate) migrations: Vec<MigrationSpec<T>>,
    /// Fields and variants renamed since the stored shape: `(old, new)`.
    pub(crate) renames: Vec<(String, String)>,
    /// `T`'s serde shape (traced by `open`, or by [`CollectionBuilder::shape_sample`]).
    pub(crate) shape: Option<schema::ShapeText>,
    /// The encoded `[collection, "meta", "schema"]` (set by `open`).
    pub(crate) schema_key: Vec<u8>,
    /// The record layout this handle last saw (`LAYOUT_*`), read without a lock on the read
    /// path; the rest of what it knows of the schema is in `cache`.
    pub(crate) layout: AtomicU8,
    /// The schema as this handle last read it: every write checks it is still current.
    pub(crate) cache: RwLock<Cache>,
    /// Whether this handle has seen the layout before it was enveloped (so it keeps telling
    /// plain records by the conversion's boundary).
    pub(crate) lived_through: AtomicBool,
}

impl<T> Def<T> {
    /// Whether this handle's definition asks for envelopes (a version or a non-default format).
    pub(crate) fn wants_envelope(&self) -> bool {
        self.version > 0 || self.format != RecordFormat::Postcard
    }
}

/// Declares a collection: `Collection::builder("users", |u: &User| key![u.id])`, then its
/// indexes, then [`CollectionBuilder::open`] on a store.
pub struct CollectionBuilder<T> {
    def: Def<T>,
    /// The first misuse of the builder, reported by `open` (the builder methods chain, so
    /// they cannot return errors themselves).
    mistake: Option<String>,
}

/// Index states, stored under `[collection, "meta", "index", name]`.
pub(crate) const STATE_READY: &[u8] = b"ready";
pub(crate) const STATE_BUILDING: &[u8] = b"building";

/// The value of the envelope marker, `[collection, "meta", "records"]`: once set, every record
/// that starts with [`ENVELOPE_TAG`] is an envelope.
pub(crate) const RECORDS_ENVELOPED: &[u8] = b"enveloped";

impl<T> CollectionBuilder<T> {
    fn push(mut self, name: &str, unique: bool, extract: Extract<T>) -> Self {
        self.def.indexes.push(IndexSpec {
            name: name.to_owned(),
            unique,
            covering: false,
            extract,
            ready: AtomicBool::new(false),
            prefix: Vec::new(),
        });
        self
    }

    /// A unique (one-to-one) index: `[collection, "u", name, value...] -> primary key`. A
    /// record whose extractor returns `None` has no entry (an optional field).
    pub fn unique(self, name: &str, f: impl Fn(&T) -> Option<Key> + Send + Sync + 'static) -> Self {
        self.push(name, true, Arc::new(move |t| f(t).into_iter().collect()))
    }

    /// A non-unique (one-to-many) index: `[collection, "i", name, value..., primary key...]`.
    pub fn index(self, name: &str, f: impl Fn(&T) -> Option<Key> + Send + Sync + 'static) -> Self {
        self.push(name, false, Arc::new(move |t| f(t).into_iter().collect()))
    }

    /// A non-unique multi-entry index: one entry per value returned (e.g. per tag).
    pub fn multi(self, name: &str, f: impl Fn(&T) -> Vec<Key> + Send + Sync + 'static) -> Self {
        self.push(name, false, Arc::new(move |t| Values::from_vec(f(t))))
    }

    /// Makes the index declared last *covering*: its entries hold a copy of the record, so a
    /// query reads one key per result instead of two, at the price of larger writes. It must
    /// follow the index it applies to.
    ///
    /// # Errors
    /// Called before any index is declared, it makes [`CollectionBuilder::open`] fail with
    /// [`Error::Definition`] rather than silently cover nothing.
    pub fn covering(mut self) -> Self {
        match self.def.indexes.last_mut() {
            Some(last) => last.covering = true,
            None => {
                self.mistake.get_or_insert_with(|| {
                    "covering() must follow the index it applies to, and no index is declared yet"
                        .to_owned()
                });
            }
        }
        self
    }

    /// The format records are written in: [`RecordFormat::Postcard`] (the default) or
    /// [`RecordFormat::Json`] (self-describing: fields can be added anywhere, removed and
    /// renamed without a migration). A format other than the default puts new records in an
    /// envelope (see the crate's *Record evolution* section); records already stored keep
    /// their format and stay readable.
    pub fn format(mut self, format: RecordFormat) -> Self {
        self.def.format = format;
        self
    }

    /// Declares the version of the record struct (default 0). Records written from then on
    /// carry it in an envelope, so a later version can tell them apart and convert them with
    /// [`CollectionBuilder::migrate`]. Records stored before any version was declared are
    /// version 0.
    ///
    /// Declare a new version for any change the collection refuses at `open` without one
    /// (see the crate's *Record evolution* section); a field added at the end with
    /// `#[serde(default)]`, a renamed field ([`CollectionBuilder::renamed`]) and a wider
    /// integer need none.
    pub fn version(mut self, version: u32) -> Self {
        self.def.version = version;
        self
    }

    /// Converts records stored by version `from` of the struct (0: before versioning):
    /// the layer reads each one as `Old`, the struct as that version declared it (with its own
    /// reader: trailing `#[serde(default)]` fields fill in, the stored format is handled), and
    /// `migrate` turns it into the current struct or says why it cannot.
    ///
    /// At `open`, `Old`'s shape is checked against the shape version `from` stored, every
    /// version whose records may still be stored must have a migration, and every such record
    /// is converted once without writing (the first failure is reported with its primary key
    /// and nothing opens). Reads convert old records as they meet them;
    /// [`Collection::migrate_records`] rewrites them all in the current version, in batches,
    /// resuming after a crash. Once it has finished, the migration can be deleted.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, key};
    /// # use tuplekv_index::Collection;
    /// #[derive(Serialize, Deserialize)]
    /// struct UserV0 { id: u64, name: String }
    /// #[derive(Debug, Serialize, Deserialize)]
    /// struct User { id: u64, first: String, last: String }
    ///
    /// let db = Database::in_memory();
    /// Collection::builder("users", |u: &UserV0| key![u.id])
    ///     .open(db.clone())?
    ///     .insert(&UserV0 { id: 1, name: "Ada Lovelace".into() })?;
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .version(1)
    ///     .migrate(0, |old: UserV0| {
    ///         let (first, last) = old.name.split_once(' ').ok_or("no last name")?;
    ///         Ok(User { id: old.id, first: first.into(), last: last.into() })
    ///     })
    ///     .open(db)?;
    /// assert_eq!(users.get(&key![1])?.unwrap().last, "Lovelace");
    /// let report = users.migrate_records(100, |_| {})?;
    /// assert_eq!(report.migrated, 1);
    /// # Ok::<(), tuplekv_index::Error>(())
    /// ```
    ///
    /// # Errors
    /// A `from` not older than the declared [`CollectionBuilder::version`], or declared twice,
    /// makes [`CollectionBuilder::open`] fail with [`Error::Definition`].
    pub fn migrate<Old, F>(mut self, from: u32, migrate: F) -> Self
    where
        Old: DeserializeOwned + 'static,
        F: Fn(Old) -> Result<T, String> + Send + Sync + 'static,
    {
        self.def.migrations.push(MigrationSpec::new(from, migrate));
        self
    }

    /// Declares that the field (or enum variant) `old` of the stored shape is now called
    /// `new`. Postcard stores no names, so the values read correctly; without the declaration
    /// `open` cannot tell a rename from a removed field and an inserted one, and refuses.
    /// The stored shape takes the new name, so the declaration can go once every handle has
    /// opened with it. The name applies in any struct or enum of the record.
    pub fn renamed(mut self, old: &str, new: &str) -> Self {
        self.def.renames.push((old.to_owned(), new.to_owned()));
        self
    }

    /// Traces the struct's shape from `sample`, a real record, instead of from made-up values.
    /// Needed only when `open` says the shape cannot be traced: a type whose deserialisation
    /// validates its input (a checked newtype, a date parsed from a string) rejects the
    /// tracer's empty strings and zeros.
    pub fn shape_sample(mut self, sample: &T) -> Self
    where
        T: Serialize + DeserializeOwned,
    {
        self.def.shape = Some(schema::to_text(schema::trace_sample(sample)));
        self
    }

    /// How often a write retries when concurrent commits conflict with it (default 16).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.def.retry.max_attempts = attempts.max(1);
        self
    }

    /// Opens the collection on `store`. An index declared on a collection that already has
    /// records starts *building*: writes maintain it at once, queries on it return
    /// [`Error::IndexNotReady`] until [`Collection::backfill`] has indexed the existing records.
    /// An index that was declared before, removed and declared again keeps the state it had:
    /// see [`Collection::drop_index`], which a removed index needs.
    ///
    /// # Errors
    /// [`Error::Definition`] for an empty or repeated name or a misplaced
    /// [`CollectionBuilder::covering`], or a store error.
    pub fn open<S: Store>(self, store: S) -> Result<Collection<T, S>, Error>
    where
        T: Serialize + DeserializeOwned,
    {
        let collection = Collection {
            store,
            def: Arc::new(self.definition()?),
        };
        collection.open_in_store()?;
        Ok(collection)
    }

    /// The definition, checked and with its keys and shape filled in: everything of `open`
    /// that does not touch the store.
    pub(crate) fn definition(self) -> Result<Def<T>, Error>
    where
        T: Serialize + DeserializeOwned,
    {
        if let Some(mistake) = self.mistake {
            return Err(Error::Definition(mistake));
        }
        let mut def = self.def;
        if def.name.is_empty() {
            return Err(Error::Definition("the collection name is empty".into()));
        }
        for (i, idx) in def.indexes.iter().enumerate() {
            if idx.name.is_empty() || def.indexes.iter().take(i).any(|o| o.name == idx.name) {
                return Err(Error::Definition(format!(
                    "index name `{}` is empty or repeated",
                    idx.name
                )));
            }
        }
        for (i, m) in def.migrations.iter().enumerate() {
            let from = m.from;
            if from >= def.version || def.migrations.iter().take(i).any(|o| o.from == from) {
                return Err(Error::Definition(format!(
                    "migrate({from}) must come from a version older than the declared \
                     version({}) and be declared once",
                    def.version
                )));
            }
        }
        def.record_prefix = encode_names(&[&def.name, "id"])?;
        def.schema_key = encode_names(&[&def.name, "meta", "schema"])?;
        for idx in &mut def.indexes {
            idx.prefix = encode_names(&[&def.name, kind_of(idx), &idx.name])?;
        }
        if def.shape.is_none() {
            def.shape = Some(schema::to_text(schema::trace::<T>()));
        }
        Ok(def)
    }
}

impl<T, S> Collection<T, S>
where
    T: Serialize + DeserializeOwned,
    S: Store,
{
    /// What `open` does in the store: the schema first (a struct that does not fit the
    /// stored records opens nothing and writes nothing), then each index's state.
    pub(crate) fn open_in_store(&self) -> Result<(), Error> {
        self.open_schema()?;
        for idx in &self.def.indexes {
            let state = self.state_key(&idx.name)?;
            let has_records = !self
                .store
                .snapshot()
                .scan(&self.records_range()?, false, 1)?
                .is_empty();
            let initial = if has_records {
                STATE_BUILDING
            } else {
                STATE_READY
            };
            let _ = self
                .store
                .atomic()
                .check_raw(&state, None)
                .set_raw(&state, initial)
                .commit()?;
            self.refresh_ready(idx)?;
        }
        Ok(())
    }
}

/// One index entry a record should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planned {
    pub(crate) index: usize,
    pub(crate) value: Key,
    pub(crate) key: KeyBytes,
    pub(crate) entry: EntryBytes,
}

/// A page of query results and the cursor to resume after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// Records with their primary keys, in index order.
    pub items: Vec<(Key, T)>,
    /// Where the next page starts, or `None` after the last page. Pass it back to the same
    /// query; it is never empty (see the crate's *Reads* section).
    pub cursor: Option<String>,
}

/// A typed collection of records with secondary indexes, over any [`Store`].
///
/// Every write is one serializable transaction that reads the record and every unique entry
/// it will own or give up, then commits the record and all its index changes together, retrying on
/// conflict up to a bound: two concurrent writers can never leave an entry behind, point one
/// at a stale record, or both take a unique value.
pub struct Collection<T, S: Store> {
    pub(crate) store: S,
    pub(crate) def: Arc<Def<T>>,
}

impl<T, S: Store + Clone> Clone for Collection<T, S> {
    fn clone(&self) -> Self {
        Collection {
            store: self.store.clone(),
            def: Arc::clone(&self.def),
        }
    }
}

fn key_of(parts: Vec<KeyPart>) -> Result<Key, Error> {
    Key::new(parts).map_err(|e| Error::Codec {
        primary_key: Key::empty(),
        message: e.to_string(),
    })
}

impl<T> Collection<T, tuplekv_engine::Database> {
    /// Starts declaring a collection named `name` whose primary key is `primary_key(record)`.
    pub fn builder(
        name: &str,
        primary_key: impl Fn(&T) -> Key + Send + Sync + 'static,
    ) -> CollectionBuilder<T> {
        CollectionBuilder {
            def: Def {
                name: name.to_owned(),
                primary_key: Arc::new(primary_key),
                indexes: Vec::new(),
                retry: TransactionOptions::default(),
                record_prefix: Vec::new(),
                format: RecordFormat::default(),
                version: 0,
                migrations: Vec::new(),
                renames: Vec::new(),
                shape: None,
                schema_key: Vec::new(),
                layout: AtomicU8::new(LAYOUT_PLAIN),
                cache: RwLock::new(Cache::default()),
                lived_through: AtomicBool::new(false),
            },
            mistake: None,
        }
    }
}

impl<T, S> Collection<T, S>
where
    T: Serialize + DeserializeOwned,
    S: Store,
{
    /// The collection's name.
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// The store underneath.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The encoded key `[collection, head..., tail parts...]`. A tuple's encoding is the
    /// concatenation of its parts' encodings, so the parts are appended as bytes without
    /// building (and cloning into) an intermediate `Key`: every tail is a valid `Key` already.
    pub(crate) fn key(&self, head: &[&str], tail: &[&Key]) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(64);
        for part in std::iter::once(self.def.name.as_str()).chain(head.iter().copied()) {
            encode_part_into(&KeyPart::from(part), &mut out).map_err(|e| Error::Codec {
                primary_key: Key::empty(),
                message: e.to_string(),
            })?;
        }
        for k in tail {
            encode_key_into(k, &mut out);
        }
        Ok(out)
    }

    pub(crate) fn record_key(&self, pk: &Key) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(self.def.record_prefix.len() + 16);
        out.extend_from_slice(&self.def.record_prefix);
        encode_key_into(pk, &mut out);
        Ok(out)
    }

    /// The key of the record `pk` for a write: a primary key whose record key is longer than
    /// the engine writes is refused here, before anything is read.
    fn write_record_key(&self, pk: &Key) -> Result<Vec<u8>, Error> {
        let key = self.record_key(pk)?;
        if key.len() > KEY_SIZE_MAX_WRITE {
            return Err(Error::KeyTooLargeForWrite {
                collection: self.def.name.clone(),
                index: None,
                size: key.len(),
            });
        }
        Ok(key)
    }

    /// The error for the first planned entry whose key is longer than the engine writes.
    pub(crate) fn oversized_entry(&self, plan: &[Planned]) -> Option<Error> {
        let p = plan.iter().find(|p| p.key.len() > KEY_SIZE_MAX_WRITE)?;
        Some(Error::KeyTooLargeForWrite {
            collection: self.def.name.clone(),
            index: self.def.indexes.get(p.index).map(|idx| idx.name.clone()),
            size: p.key.len(),
        })
    }

    /// The record key of the primary key encoded as `pk_bytes` (as an index entry holds it).
    fn record_key_of(&self, pk_bytes: &[u8]) -> Vec<u8> {
        [self.def.record_prefix.as_slice(), pk_bytes].concat()
    }

    /// The encoded primary key at the end of `record_key` (one `record_key` built).
    fn pk_bytes<'k>(&self, record_key: &'k [u8]) -> &'k [u8] {
        record_key
            .get(self.def.record_prefix.len()..)
            .unwrap_or_default()
    }

    /// The key of `idx`'s entry for `value`: `[collection, "u", name, value...]`, or for a
    /// non-unique index `[..., value..., primary key...]` (`pk_bytes` already encoded).
    fn entry_key(&self, idx: &IndexSpec<T>, value: &Key, pk_bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(idx.prefix.len() + 32 + pk_bytes.len());
        self.entry_key_into(idx, value, pk_bytes, &mut out);
        out
    }

    /// [`Collection::entry_key`], appended to `out`.
    fn entry_key_into(&self, idx: &IndexSpec<T>, value: &Key, pk_bytes: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&idx.prefix);
        encode_key_into(value, out);
        if !idx.unique {
            out.extend_from_slice(pk_bytes);
        }
    }

    pub(crate) fn records_range(&self) -> Result<tuplekv_codec::ByteRange, Error> {
        Selector::prefix(&decode_key(&self.key(&["id"], &[])?).map_err(codec_err)?)
            .byte_range()
            .map_err(|e| Error::Store(e.into()))
    }

    pub(crate) fn state_key(&self, index: &str) -> Result<Vec<u8>, Error> {
        self.key(&["meta", "index", index], &[])
    }

    /// The key prefix of one index's entries, followed by `value`'s parts.
    pub(crate) fn index_prefix(&self, idx: &IndexSpec<T>, value: &Key) -> Result<Key, Error> {
        decode_key(&self.key(&[kind_of(idx), &idx.name], &[value])?).map_err(codec_err)
    }

    /// The envelope new records are written in: none while the collection's records are
    /// plain postcard (it has never been versioned), as before versioning existed.
    fn envelope(&self) -> Option<(RecordFormat, u32)> {
        (self.def.layout.load(Ordering::Acquire) != LAYOUT_PLAIN)
            .then_some((self.def.format, self.def.version))
    }

    pub(crate) fn encode(&self, pk: &Key, record: &T) -> Result<Vec<u8>, Error> {
        record::encode(record, self.envelope()).map_err(|e| Error::Codec {
            primary_key: pk.clone(),
            message: format!("cannot serialise: {e}"),
        })
    }

    /// Reads a stored record written at `stamp`: its envelope (if it has one) says the format
    /// and version; a record of another version goes through that version's migration, one
    /// of this version is read as the current struct (trailing `#[serde(default)]` fields
    /// fill in).
    ///
    /// Whether a record starting with [`ENVELOPE_TAG`](crate::ENVELOPE_TAG) is an envelope is
    /// never guessed from its bytes: the collection's layout says it (see
    /// [`Collection::is_envelope`]).
    ///
    /// # Errors
    /// [`Error::Incompatible`] naming the collection, the record and its version.
    pub(crate) fn decode(&self, pk: &Key, bytes: &[u8], stamp: Versionstamp) -> Result<T, Error> {
        let enveloped = bytes.first() == Some(&record::ENVELOPE_TAG) && self.is_envelope(stamp)?;
        self.decode_as(pk, bytes, enveloped)
    }

    pub(crate) fn decode_as(&self, pk: &Key, bytes: &[u8], enveloped: bool) -> Result<T, Error> {
        let incompatible = |version, reason| Error::Incompatible {
            collection: self.def.name.clone(),
            primary_key: pk.clone(),
            version,
            reason,
        };
        let stored = record::split(bytes, enveloped).map_err(|r| incompatible(0, r))?;
        if stored.version != self.def.version {
            let Some(m) = self
                .def
                .migrations
                .iter()
                .find(|m| m.from == stored.version)
            else {
                let why = if stored.version > self.def.version {
                    format!(
                        "a newer build wrote it; this one declares version {} and has no \
                         migration from it",
                        self.def.version
                    )
                } else {
                    format!(
                        "this build declares version {} and no `.migrate({}, ...)`",
                        self.def.version, stored.version
                    )
                };
                return Err(incompatible(stored.version, why));
            };
            return (m.run)(stored.format, stored.body)
                .map_err(|r| incompatible(stored.version, format!("its migration failed: {r}")));
        }
        record::decode_body(stored.format, stored.body).map_err(|reason| {
            incompatible(
                stored.version,
                format!("{reason} (read as {})", record::format_name(stored.format)),
            )
        })
    }

    /// The entries `record` (primary key `pk`, serialised as `bytes`) should have, in index
    /// order, without repeats; `only` restricts them to one index. `bytes` is only copied into
    /// covering entries.
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForWrite`] for an entry key the engine would refuse.
    pub(crate) fn plan(
        &self,
        pk: &Key,
        record: &T,
        bytes: &[u8],
        only: Option<usize>,
    ) -> Result<Vec<Planned>, Error> {
        let plan = self.plan_encoded(&encode_key(pk), record, bytes, only);
        match self.oversized_entry(&plan) {
            Some(e) => Err(e),
            None => Ok(plan),
        }
    }

    /// [`Collection::plan`] with the primary key already encoded.
    fn plan_encoded(
        &self,
        pk_bytes: &[u8],
        record: &T,
        bytes: &[u8],
        only: Option<usize>,
    ) -> Vec<Planned> {
        let mut out: Vec<Planned> = Vec::with_capacity(self.def.indexes.len());
        for (i, idx) in self.def.indexes.iter().enumerate() {
            if only.is_some_and(|o| o != i) {
                continue;
            }
            for value in (idx.extract)(record) {
                let encode = |scratch: &mut Vec<u8>| {
                    scratch.clear();
                    self.entry_key_into(idx, &value, pk_bytes, scratch);
                    KeyBytes::from(scratch.as_slice())
                };
                // The thread's buffer is gone while the thread exits (a write from another
                // thread-local's destructor): encode into a fresh one then.
                let key = ENTRY_KEY
                    .try_with(|scratch| encode(&mut scratch.borrow_mut()))
                    .unwrap_or_else(|_| encode(&mut Vec::new()));
                if out.iter().any(|p| p.key == key) {
                    continue;
                }
                let mut entry = EntryBytes::new();
                if idx.covering {
                    entry.reserve_exact(5 + pk_bytes.len() + bytes.len());
                    entry.push(COVERING);
                    let len = u32::try_from(pk_bytes.len()).unwrap_or(u32::MAX);
                    entry.extend_from_slice(&len.to_le_bytes());
                    entry.extend_from_slice(pk_bytes);
                    entry.extend_from_slice(bytes);
                } else {
                    entry.push(POINTER);
                    entry.extend_from_slice(pk_bytes);
                }
                out.push(Planned {
                    index: i,
                    value,
                    key,
                    entry,
                });
            }
        }
        out
    }

    /// The primary key an entry's value points at, and the record copy of a covering entry.
    pub(crate) fn parse_entry(value: &Value) -> Result<(Key, Option<&[u8]>), Error> {
        let (pk, record) = Self::entry_parts(value)?;
        Ok((decode_key(&pk).map_err(codec_err)?, record))
    }

    /// [`Collection::parse_entry`] without decoding: the encoded primary key (not yet
    /// validated) and the record copy of a covering entry.
    fn entry_parts(value: &Value) -> Result<(PkBytes<'_>, Option<&[u8]>), Error> {
        entry::parts(value).map_err(|message| Error::Codec {
            primary_key: Key::empty(),
            message,
        })
    }

    /// The record a unique entry points at, when it is not the one encoded as `pk_bytes`
    /// (`pk`): `None` if the entry is this record's. Equal bytes need no decoding; different
    /// bytes are decoded and compared as keys, as before, so a malformed entry is still an
    /// error and an equal key in another spelling still counts as this record's.
    fn other_holder(value: &Value, pk: &Key, pk_bytes: &[u8]) -> Result<Option<Key>, Error> {
        let (held, _) = Self::entry_parts(value)?;
        if *held == *pk_bytes {
            return Ok(None);
        }
        let (holder, _) = Self::parse_entry(value)?;
        Ok((holder != *pk).then_some(holder))
    }

    /// Inside a transaction: replaces the record at `record_key` (primary key `pk`), whose
    /// current entries are `old_plan`, by `new` (or deletes it), with every index change,
    /// after checking unique values.
    ///
    /// Every unique entry `new` claims, and every one the old record gives up, is read in the
    /// transaction, so the commit checks it. A unique entry that already holds exactly the
    /// bytes it would be written with is left as it is: the read still checks it, and
    /// rewriting it would only add a version for the store to reclaim.
    ///
    /// A unique entry the old record has and `new` keeps unchanged (same value, same bytes)
    /// is neither read nor written. Once the index is built it points at this record, and
    /// only a commit that also writes this record (checked through the record's read) can
    /// change that. While the index is being built it may be missing, or held by another
    /// record that had the value before: leaving it alone then introduces no duplicate (the
    /// record already had the value) and the build finds any that existed.
    pub(crate) fn put_in(
        &self,
        tx: &mut Transaction<'_, S>,
        pk: &Key,
        record_key: &[u8],
        old_plan: &[Planned],
        new: Option<&T>,
    ) -> Result<(), Error> {
        let pk_bytes = self.pk_bytes(record_key);
        let (new_bytes, mut new_plan) = match new {
            Some(n) => {
                let bytes = self.encode(pk, n)?;
                let plan = self.plan_encoded(pk_bytes, n, &bytes, None);
                if let Some(e) = self.oversized_entry(&plan) {
                    return Err(e);
                }
                (Some(bytes), plan)
            }
            None => (None, Vec::new()),
        };
        // Entries already in place get an empty `entry` (a real one never is): not rewritten.
        let comparable = self.copies_comparable();
        for p in new_plan
            .iter_mut()
            .filter(|p| self.def.indexes[p.index].unique)
        {
            let same_ok = comparable || !self.def.indexes[p.index].covering;
            if same_ok
                && old_plan
                    .iter()
                    .any(|o| o.key == p.key && o.entry == p.entry)
            {
                p.entry.clear();
                continue;
            }
            let Some(existing) = tx.get_raw(&p.key)? else {
                continue;
            };
            if let Some(owner) = Self::other_holder(&existing.value, pk, pk_bytes)? {
                return Err(Error::UniqueViolation {
                    index: self.def.indexes[p.index].name.clone(),
                    value: p.value.clone(),
                    existing_primary_key: owner,
                });
            }
            if same_ok && stored_matches(&existing.value, &p.entry) {
                p.entry.clear();
            }
        }
        for p in old_plan {
            if new_plan.iter().any(|n| n.key == p.key) {
                continue;
            }
            // A non-unique entry ends with this record's primary key, so it is this record's.
            // A unique entry may be held by another record: while a unique index is being
            // built, a record not yet backfilled has no entry, so another record can take its
            // value; deleting that holder's entry here would let a third record take the value
            // too. Delete only what points at this record (the read is a commit condition).
            if self.def.indexes[p.index].unique {
                let Some(existing) = tx.get_raw(&p.key)? else {
                    continue;
                };
                if Self::other_holder(&existing.value, pk, pk_bytes)?.is_some() {
                    continue;
                }
            }
            tx.mutate_raw(&p.key, MutationKind::Delete);
        }
        for p in new_plan {
            if p.entry.is_empty() {
                continue;
            }
            tx.mutate_raw(
                &p.key,
                MutationKind::Set {
                    value: entry_value(p.entry),
                    expiry: None,
                },
            );
        }
        match new_bytes {
            Some(bytes) => tx.mutate_raw(
                record_key,
                MutationKind::Set {
                    value: Value::from(bytes),
                    expiry: None,
                },
            ),
            None => tx.mutate_raw(record_key, MutationKind::Delete),
        }
        Ok(())
    }

    /// Reads the record at `record_key` inside a transaction: decoded, with the entries it
    /// has (planned from the stored bytes, so nothing is serialised again).
    fn read_in(
        &self,
        tx: &mut Transaction<'_, S>,
        pk: &Key,
        record_key: &[u8],
    ) -> Result<Option<(T, Versionstamp, Vec<Planned>)>, Error> {
        let Some(e) = tx.get_raw(record_key)? else {
            return Ok(None);
        };
        let bytes = value_bytes(&e.value)?;
        let record = self.decode(pk, bytes, e.versionstamp)?;
        let plan = self.plan_encoded(self.pk_bytes(record_key), &record, bytes, None);
        Ok(Some((record, e.versionstamp, plan)))
    }

    /// Runs a record write as a transaction that reads the schema first (so its commit
    /// checks it, and a changed schema is loaded before `f` encodes anything).
    fn run<R>(
        &self,
        mut f: impl FnMut(&mut Transaction<'_, S>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        self.store.transaction_with(&self.def.retry, |tx| {
            self.schema_in(tx)?;
            f(tx)
        })
    }

    /// Inserts a new record.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, ListOptions, key};
    /// # use tuplekv_index::{Collection, Error};
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct User { id: u64, email: String }
    ///
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(Database::in_memory())?;
    /// let ada = User { id: 1, email: "ada@example.com".into() };
    /// users.insert(&ada)?;
    /// assert_eq!(users.get(&key![1])?, Some(ada.clone()));
    /// // The same primary key again, or Ada's email on another record: refused, nothing written.
    /// assert!(matches!(users.insert(&ada), Err(Error::AlreadyExists { .. })));
    /// let imposter = User { id: 2, email: "ada@example.com".into() };
    /// let err = users.insert(&imposter).unwrap_err();
    /// assert!(err.is_unique_violation());
    /// assert_eq!(users.get(&key![2])?, None);
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::AlreadyExists`], [`Error::UniqueViolation`], [`Error::KeyTooLargeForWrite`] for
    /// a primary key or an index value too long for the engine's key limit, a store error (a
    /// record too large for the value limit, too many index entries for one commit), or a
    /// conflict past the retry bound. Nothing is written then.
    ///
    /// On a remote store whose connection failed after the insert was sent, the record is
    /// re-read: `Ok` if it holds exactly this record (the insert landed, or an identical record
    /// was there already: either way the store holds what was asked), else
    /// [`Error::OutcomeUnknown`] saying what the re-read found.
    pub fn insert(&self, record: &T) -> Result<(), Error> {
        let pk = (self.def.primary_key)(record);
        let record_key = self.write_record_key(&pk)?;
        let result = self.insert_at(&pk, &record_key, record);
        self.settle(result, &pk, &record_key, || {
            Some((self.encode(&pk, record).ok()?, ()))
        })
    }

    /// [`Collection::insert`] before an unknown outcome is settled.
    fn insert_at(&self, pk: &Key, record_key: &[u8], record: &T) -> Result<(), Error> {
        let (pk, record_key) = (pk.clone(), record_key.to_vec());
        let lost = match self.try_unopposed(|| self.insert_unopposed(&pk, &record_key, record)) {
            Ok(done) => return done,
            Err(lost) => lost,
        };
        self.run_after(lost, |tx| {
            if let Some(e) = tx.get_raw(&record_key)? {
                // Decoded only for its error: a stored record that does not decode says so.
                self.decode(&pk, value_bytes(&e.value)?, e.versionstamp)?;
                return Err(Error::AlreadyExists {
                    primary_key: pk.clone(),
                });
            }
            self.put_in(tx, &pk, &record_key, &[], Some(record))
        })
    }

    /// Runs `attempt`, a write without a transaction, when the retry bound leaves room for
    /// it: `Ok` with its answer if it finished, else `Err` with whether it spent a commit.
    fn try_unopposed<R>(&self, attempt: impl FnOnce() -> Unopposed<R>) -> Result<R, bool> {
        if self.def.retry.max_attempts <= 1 {
            return Err(false);
        }
        match attempt() {
            Unopposed::Done(answer) => Ok(answer),
            Unopposed::Declined => Err(false),
            Unopposed::Lost => Err(true),
        }
    }

    /// Runs `f` as a transaction after a write without one (see [`Collection::try_unopposed`]);
    /// a `lost` attempt counts as one of the bounded attempts, so a write still commits at
    /// most `max_attempts` times.
    fn run_after<R>(
        &self,
        lost: bool,
        mut f: impl FnMut(&mut Transaction<'_, S>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let retry = TransactionOptions {
            max_attempts: self.def.retry.max_attempts - u32::from(lost),
            ..self.def.retry.clone()
        };
        let f = |tx: &mut Transaction<'_, S>| {
            self.schema_in(tx)?;
            f(tx)
        };
        match self.store.transaction_with(&retry, f) {
            Err(Error::Store(tuplekv_engine::Error::TransactionConflict { attempts })) => {
                Err(Error::Store(tuplekv_engine::Error::TransactionConflict {
                    attempts: attempts + u32::from(lost),
                }))
            }
            other => other,
        }
    }

    /// Reads the unique entry at `key` from the latest state, as [`Collection::put_in`] does
    /// in its transaction, and adds to `write` the check that it is still what was read.
    /// `None` if it cannot be read or parsed (the transaction then reports the error).
    fn read_unique(
        &self,
        write: &mut AtomicWrite,
        key: &[u8],
        pk: &Key,
        pk_bytes: &[u8],
        entry: &[u8],
    ) -> Option<Holder> {
        let (holder, stamp) = self
            .store
            .read_latest_raw(key, |found| match found {
                None => Some((Holder::Nobody, None)),
                Some((value, stamp)) => {
                    let holder = match Self::other_holder(value, pk, pk_bytes).ok()? {
                        Some(_) => Holder::Other,
                        None if stored_matches(value, entry) => Holder::Same,
                        None => Holder::Record,
                    };
                    Some((holder, Some(stamp)))
                }
            })
            .ok()??;
        write.checks.push(Check {
            key: KeyBytes::from(key),
            versionstamp: stamp,
        });
        Some(holder)
    }

    /// Adds to `write` what giving up the unique entry at `key` takes: it is deleted if it is
    /// the record's and left alone if another record holds it (possible while an index is
    /// built, or after a writer that does not declare the index). `false` if it cannot be
    /// read.
    fn give_up_unique(
        &self,
        write: &mut AtomicWrite,
        key: KeyBytes,
        pk: &Key,
        pk_bytes: &[u8],
    ) -> bool {
        match self.read_unique(write, &key, pk, pk_bytes, &[]) {
            Some(Holder::Record | Holder::Same) => {
                write.mutations.push(delete_mutation(key));
                true
            }
            Some(Holder::Nobody | Holder::Other) => true,
            None => false,
        }
    }

    /// Commits `write` if it is within the commit limits: `Done` if it committed, `Lost` if
    /// not (a conflict, or an error the transaction will report), `Declined` past a limit.
    ///
    /// A write whose outcome is unknown (a remote store lost the answer) is `Done` with that
    /// error: running the transaction after it could find the write's own record and report
    /// it as someone else's.
    fn commit_unopposed(&self, mut write: AtomicWrite) -> Unopposed<Result<(), Error>> {
        // Encoded with the layout this handle knows: the commit checks it still holds.
        let Ok(schema) = self.schema_check() else {
            return Unopposed::Declined;
        };
        write.checks.push(schema);
        if write.checks.len() > CHECKS_MAX || write.mutations.len() > MUTATIONS_MAX {
            return Unopposed::Declined;
        }
        match self.store.commit(write) {
            Ok(result) if result.is_committed() => Unopposed::Done(Ok(())),
            Err(e @ tuplekv_engine::Error::OutcomeUnknown { .. }) => Unopposed::Done(Err(e.into())),
            _ => Unopposed::Lost,
        }
    }

    /// Settles a write that ended in an unknown outcome: re-reads the record at `record_key`
    /// and returns `Ok` if it holds exactly what `written` gives (the bytes the write stored
    /// and the answer to return then; `None` for
    /// a write whose result cannot be rebuilt from the record), else
    /// [`Error::OutcomeUnknown`] saying what it found. Other results pass through.
    fn settle<R>(
        &self,
        result: Result<R, Error>,
        pk: &Key,
        record_key: &[u8],
        written: impl FnOnce() -> Option<(Vec<u8>, R)>,
    ) -> Result<R, Error> {
        let reason = match result {
            Err(Error::Store(tuplekv_engine::Error::OutcomeUnknown { reason, .. })) => reason,
            other => return other,
        };
        let written = written();
        let reread = match self.store.get_latest_raw(record_key) {
            Ok(None) => Reread::Absent,
            Ok(Some(e)) => match (&written, value_bytes(&e.value)) {
                (Some((bytes, _)), Ok(stored)) if bytes.as_slice() == stored => Reread::Written,
                _ => Reread::Other,
            },
            Err(e) => Reread::Failed(e.to_string()),
        };
        match (reread, written) {
            (Reread::Written, Some((_, answer))) => Ok(answer),
            (reread, _) => Err(Error::OutcomeUnknown {
                collection: self.def.name.clone(),
                primary_key: pk.clone(),
                reason,
                reread,
            }),
        }
    }

    /// The insert when nothing is in its way, in one commit without reads: it checks that the
    /// record and every unique entry it claims are absent, then writes them and the other
    /// entries, as the transaction would. When it does not commit (something is there, a
    /// limit, any error), nothing was written and the transaction runs, reading what is
    /// there, so it reports the error it always did, in the same order.
    fn insert_unopposed(
        &self,
        pk: &Key,
        record_key: &[u8],
        record: &T,
    ) -> Unopposed<Result<(), Error>> {
        let Ok(bytes) = self.encode(pk, record) else {
            return Unopposed::Declined;
        };
        let plan = self.plan_encoded(self.pk_bytes(record_key), record, &bytes, None);
        if self.oversized_entry(&plan).is_some() {
            // The transaction reports it, after the record's existence, as it always does.
            return Unopposed::Declined;
        }
        self.commit_unopposed(self.insert_commit(record_key, plan, bytes))
    }

    /// The commit that inserts a record with nothing in its way: the record and every unique
    /// entry it claims checked absent, then written with the other entries.
    fn insert_commit(&self, record_key: &[u8], plan: Vec<Planned>, bytes: Vec<u8>) -> AtomicWrite {
        let mut write = AtomicWrite::default();
        write.checks.push(Check {
            key: KeyBytes::from(record_key),
            versionstamp: None,
        });
        write.mutations.reserve(plan.len() + 1);
        for p in plan {
            if self.def.indexes[p.index].unique {
                write.checks.push(Check {
                    key: KeyBytes::from(p.key.as_slice()),
                    versionstamp: None,
                });
            }
            write
                .mutations
                .push(set_mutation(p.key, entry_value(p.entry)));
        }
        write
            .mutations
            .push(set_mutation(KeyBytes::from(record_key), Value::from(bytes)));
        write
    }

    /// The one commit that inserts `record` under a new primary key, without committing it:
    /// the record and its unique entries checked absent, every entry written, and the check
    /// that the collection's schema is the one this handle encodes with. For a caller that
    /// commits it with more, above all with a gapless code the store numbers
    /// (`tuplekv_sequence::GaplessSequence::next_coded`, whose record closure appends this
    /// write): a record whose primary key or fields hold its code verbatim then gets the
    /// number the store assigns, in its key, its value and its index entries alike.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use tuplekv_engine::{Database, Store, key};
    /// use tuplekv_index::Collection;
    ///
    /// #[derive(Serialize, Deserialize, Debug, PartialEq)]
    /// struct Invoice { code: String, total: u64 }
    ///
    /// let db = Database::in_memory();
    /// let invoices = Collection::<Invoice, _>::builder("invoices", |i| key![i.code.as_str()])
    ///     .open(db.clone())?;
    /// let write = invoices.insert_write(&Invoice { code: "INV001".into(), total: 100 })?;
    /// assert!(db.commit(write)?.is_committed());
    /// assert_eq!(invoices.get(&key!["INV001"])?.map(|i| i.total), Some(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A commit of it is refused by its checks (`CommitResult::Conflict`, or
    /// `tuplekv_sequence::Error::Rejected`) if the primary key exists, a unique value is
    /// taken, or the schema changed meanwhile (open the collection again); nothing is
    /// written then. [`Collection::insert`] tells these apart.
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForWrite`] for a primary key or an index entry over the engine's
    /// key limit, [`Error::Codec`] for a record that does not serialise, and
    /// [`Error::Schema`] if this handle may not write.
    pub fn insert_write(&self, record: &T) -> Result<AtomicWrite, Error> {
        let pk = (self.def.primary_key)(record);
        let record_key = self.write_record_key(&pk)?;
        let bytes = self.encode(&pk, record)?;
        let plan = self.plan_encoded(self.pk_bytes(&record_key), record, &bytes, None);
        if let Some(e) = self.oversized_entry(&plan) {
            return Err(e);
        }
        let mut write = self.insert_commit(&record_key, plan, bytes);
        write.checks.push(self.schema_check()?);
        Ok(write)
    }

    /// The record at `record_key` as the latest state has it, with its versionstamp, decoded
    /// and planned; `Err` with the answer when there is none, `Ok(None)` when it cannot be
    /// used (a read or decoding error, which the transaction then reports).
    fn read_latest(
        &self,
        pk: &Key,
        record_key: &[u8],
    ) -> Result<Option<(T, Versionstamp, Vec<Planned>)>, ()> {
        // Decoded and planned from the stored bytes in place, without copying the entry.
        let read = self.store.read_latest_raw(record_key, |found| {
            let (value, stamp) = found?;
            let decoded = value_bytes(value).and_then(|bytes| {
                let record = self.decode(pk, bytes, stamp)?;
                let plan = self.plan_encoded(self.pk_bytes(record_key), &record, bytes, None);
                Ok((record, stamp, plan))
            });
            Some(decoded.ok())
        });
        match read {
            Ok(Some(usable)) => Ok(usable),
            Ok(None) => Err(()),
            Err(_) => Ok(None),
        }
    }

    /// The delete without a transaction, as the guide writes it by hand: read the record's
    /// latest version, then one commit that checks it is unchanged and deletes it with its
    /// entries. Unique entries are read first and deleted only if they are the record's
    /// ([`Collection::give_up_unique`]).
    fn delete_unopposed(&self, pk: &Key, record_key: &[u8]) -> Unopposed<Result<Option<T>, Error>> {
        let (old, stamp, plan) = match self.read_latest(pk, record_key) {
            Ok(Some(found)) => found,
            Ok(None) => return Unopposed::Declined,
            Err(()) => return Unopposed::Done(Ok(None)),
        };
        let pk_bytes = self.pk_bytes(record_key);
        let mut write = AtomicWrite::default();
        write.checks.push(Check {
            key: KeyBytes::from(record_key),
            versionstamp: Some(stamp),
        });
        write.mutations.reserve(plan.len() + 1);
        for p in plan {
            if !self.def.indexes[p.index].unique {
                write.mutations.push(delete_mutation(p.key));
            } else if !self.give_up_unique(&mut write, p.key, pk, pk_bytes) {
                return Unopposed::Declined;
            }
        }
        write
            .mutations
            .push(delete_mutation(KeyBytes::from(record_key)));
        self.commit_unopposed(write).map(|r| r.map(|()| Some(old)))
    }

    /// The update without a transaction: read the record's latest version, apply `f`, then one
    /// commit that checks the record is unchanged and writes the entry changes
    /// [`Collection::put_in`] would: unique values the record gives up are read and deleted
    /// only if they are its own ([`Collection::give_up_unique`]); a unique value it newly
    /// claims, or keeps in a covering index, is read and written only if it is free or the
    /// record's ([`Collection::claim_unique`]; held by another record, the transaction runs
    /// and reports the violation); a kept unique pointer entry is left alone; non-unique
    /// entries are all written.
    ///
    /// When this does not finish, the record it read and what `f` made of it are left in
    /// `made`, so the transaction reuses them rather than call `f` again on the same version.
    fn update_unopposed(
        &self,
        pk: &Key,
        record_key: &[u8],
        f: &mut impl FnMut(T) -> T,
        made: &mut Option<(Versionstamp, T)>,
    ) -> Unopposed<Result<T, Error>> {
        let (old, stamp, old_plan) = match self.read_latest(pk, record_key) {
            Ok(Some(found)) => found,
            Ok(None) => return Unopposed::Declined,
            Err(()) => {
                return Unopposed::Done(Err(Error::NotFound {
                    primary_key: pk.clone(),
                }));
            }
        };
        let new = f(old);
        let new_pk = (self.def.primary_key)(&new);
        if new_pk != *pk {
            return Unopposed::Done(Err(Error::PrimaryKeyChanged {
                from: pk.clone(),
                to: new_pk,
            }));
        }
        let bytes = match self.encode(pk, &new) {
            Ok(bytes) => bytes,
            Err(e) => return Unopposed::Done(Err(e)),
        };
        let outcome = match self.update_write(pk, record_key, stamp, &old_plan, &new, bytes) {
            Some(write) => self.commit_unopposed(write),
            None => Unopposed::Declined,
        };
        let lost = match outcome {
            Unopposed::Done(Ok(())) => return Unopposed::Done(Ok(new)),
            Unopposed::Done(Err(e)) => return Unopposed::Done(Err(e)),
            Unopposed::Declined => false,
            Unopposed::Lost => true,
        };
        *made = Some((stamp, new));
        if lost {
            Unopposed::Lost
        } else {
            Unopposed::Declined
        }
    }

    /// The commit of [`Collection::update_unopposed`]: the record at `stamp` (whose entries are
    /// `old_plan`) replaced by `new`, serialised as `bytes`. `None` if a unique entry it
    /// touches is another record's or cannot be read.
    fn update_write(
        &self,
        pk: &Key,
        record_key: &[u8],
        stamp: Versionstamp,
        old_plan: &[Planned],
        new: &T,
        bytes: Vec<u8>,
    ) -> Option<AtomicWrite> {
        let pk_bytes = self.pk_bytes(record_key);
        let new_plan = self.plan_encoded(pk_bytes, new, &bytes, None);
        if self.oversized_entry(&new_plan).is_some() {
            return None; // the transaction reports it
        }
        let mut write = AtomicWrite::default();
        write.checks.push(Check {
            key: KeyBytes::from(record_key),
            versionstamp: Some(stamp),
        });
        for o in old_plan {
            if new_plan.iter().any(|n| n.key == o.key) {
                continue;
            }
            if !self.def.indexes[o.index].unique {
                write.mutations.push(delete_mutation(o.key.clone()));
            } else if !self.give_up_unique(&mut write, o.key.clone(), pk, pk_bytes) {
                return None;
            }
        }
        for n in new_plan {
            if !self.def.indexes[n.index].unique {
                write
                    .mutations
                    .push(set_mutation(n.key, entry_value(n.entry)));
            } else if (self.copies_comparable() || !self.def.indexes[n.index].covering)
                && old_plan
                    .iter()
                    .any(|o| o.key == n.key && o.entry == n.entry)
            {
                // A kept pointer entry (or covering entry whose copy is unchanged): left alone.
            } else if !self.claim_unique(&mut write, n, pk, pk_bytes) {
                // A value the record newly claims, or keeps in a covering index whose copy of
                // the record changed.
                return None;
            }
        }
        write
            .mutations
            .push(set_mutation(KeyBytes::from(record_key), Value::from(bytes)));
        Some(write)
    }

    /// Adds to `write` what writing the unique entry `n` takes: it is written if it is free
    /// or the record's with other bytes, and left as it is if it already holds `n`'s bytes.
    /// `false` if another record holds it or it cannot be read (the transaction then reports
    /// the violation or the error).
    fn claim_unique(&self, write: &mut AtomicWrite, n: Planned, pk: &Key, pk_bytes: &[u8]) -> bool {
        let same_ok = self.copies_comparable() || !self.def.indexes[n.index].covering;
        match self.read_unique(write, &n.key, pk, pk_bytes, &n.entry) {
            Some(Holder::Same) if !same_ok => {
                write
                    .mutations
                    .push(set_mutation(n.key, entry_value(n.entry)));
                true
            }
            Some(Holder::Nobody | Holder::Record) => {
                write
                    .mutations
                    .push(set_mutation(n.key, entry_value(n.entry)));
                true
            }
            Some(Holder::Same) => true,
            Some(Holder::Other) | None => false,
        }
    }

    /// Inserts the record, or replaces the one with its primary key; returns the old one.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, ListOptions, key};
    /// # use tuplekv_index::{Collection, Error};
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct User { id: u64, email: String }
    ///
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(Database::in_memory())?;
    /// let ada = User { id: 1, email: "ada@example.com".into() };
    /// assert_eq!(users.upsert(&ada)?, None); // inserted
    /// let moved = User { id: 1, email: "ada@lovelace.org".into() };
    /// assert_eq!(users.upsert(&moved)?, Some(ada)); // replaced: the old record comes back
    /// // The index follows: the old email is free, the new one finds the record.
    /// assert_eq!(users.get_by("email", &key!["ada@example.com"])?, None);
    /// assert_eq!(users.get_by("email", &key!["ada@lovelace.org"])?, Some((key![1], moved)));
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Collection::insert`], without [`Error::AlreadyExists`].
    pub fn upsert(&self, record: &T) -> Result<Option<T>, Error> {
        let pk = (self.def.primary_key)(record);
        let record_key = self.write_record_key(&pk)?;
        let result = self.run(|tx| {
            let (old, old_plan) = match self.read_in(tx, &pk, &record_key)? {
                Some((old, _, plan)) => (Some(old), plan),
                None => (None, Vec::new()),
            };
            self.put_in(tx, &pk, &record_key, &old_plan, Some(record))?;
            Ok(old)
        });
        // What it replaced cannot be known after the fact: an unknown outcome is reported.
        self.settle(result, &pk, &record_key, || None)
    }

    /// Read-modify-write: replaces the record at `pk` by `f(record)`. `f` runs once for each
    /// version of the record the update reads: again only if a concurrent write changed the
    /// record, or conflicted with the update. Returns the new record.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, key};
    /// # use tuplekv_index::Collection;
    /// #[derive(Clone, Serialize, Deserialize)]
    /// struct Counter { name: String, hits: u64 }
    ///
    /// let counters = Collection::builder("counters", |c: &Counter| key![c.name.clone()])
    ///     .open(Database::in_memory())?;
    /// counters.insert(&Counter { name: "home".into(), hits: 0 })?;
    /// let after = counters.update(&key!["home"], |mut c| { c.hits += 1; c })?;
    /// assert_eq!(after.hits, 1);
    /// # Ok::<(), tuplekv_index::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::PrimaryKeyChanged`] if `f` changes the primary key, and as
    /// [`Collection::insert`].
    pub fn update(&self, pk: &Key, mut f: impl FnMut(T) -> T) -> Result<T, Error>
    where
        T: Clone,
    {
        let record_key = self.write_record_key(pk)?;
        let mut last: Option<T> = None;
        let result = self.update_at(pk, &record_key, &mut |old| {
            let new = f(old);
            last = Some(new.clone());
            new
        });
        self.settle(result, pk, &record_key, || {
            let new = last?;
            Some((self.encode(pk, &new).ok()?, new))
        })
    }

    /// [`Collection::update`] before an unknown outcome is settled.
    fn update_at(&self, pk: &Key, record_key: &[u8], mut f: impl FnMut(T) -> T) -> Result<T, Error>
    where
        T: Clone,
    {
        let record_key = record_key.to_vec();
        let mut made = None;
        let attempt = || self.update_unopposed(pk, &record_key, &mut f, &mut made);
        let lost = match self.try_unopposed(attempt) {
            Ok(done) => return done,
            Err(lost) => lost,
        };
        self.run_after(lost, |tx| {
            // The old record's entries are planned before `f` takes it, so it is not cloned.
            let Some((old, stamp, old_plan)) = self.read_in(tx, pk, &record_key)? else {
                return Err(Error::NotFound {
                    primary_key: pk.clone(),
                });
            };
            // What the first attempt made of this very version, if it read the same one.
            let new = match made.take() {
                Some((read, new)) if read == stamp => new,
                _ => f(old),
            };
            let new_pk = (self.def.primary_key)(&new);
            if new_pk != *pk {
                return Err(Error::PrimaryKeyChanged {
                    from: pk.clone(),
                    to: new_pk,
                });
            }
            self.put_in(tx, pk, &record_key, &old_plan, Some(&new))?;
            Ok(new)
        })
    }

    /// Deletes the record at `pk` and its index entries; returns it.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, ListOptions, key};
    /// # use tuplekv_index::{Collection, Error};
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct User { id: u64, email: String }
    ///
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(Database::in_memory())?;
    /// let ada = User { id: 1, email: "ada@example.com".into() };
    /// users.insert(&ada)?;
    /// assert_eq!(users.delete(&key![1])?, Some(ada.clone()));
    /// assert_eq!(users.delete(&key![1])?, None); // nothing there any more
    /// // Its unique entry went with it: the email is free again.
    /// assert_eq!(users.get_by("email", &key!["ada@example.com"])?, None);
    /// users.insert(&User { id: 2, ..ada })?;
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::KeyTooLargeForWrite`] for a primary key too long for the engine's key limit (no
    /// such record can exist), a store error, or a conflict past the retry bound.
    pub fn delete(&self, pk: &Key) -> Result<Option<T>, Error> {
        let record_key = self.write_record_key(pk)?;
        let result = match self.try_unopposed(|| self.delete_unopposed(pk, &record_key)) {
            Ok(done) => done,
            Err(lost) => self.run_after(lost, |tx| {
                let Some((old, _, old_plan)) = self.read_in(tx, pk, &record_key)? else {
                    return Ok(None);
                };
                self.put_in(tx, pk, &record_key, &old_plan, None)?;
                Ok(Some(old))
            }),
        };
        // An absent record after an unknown outcome may be this delete's doing or not (and
        // what it deleted is unknown): reported either way.
        self.settle(result, pk, &record_key, || None)
    }

    /// The record at `pk`.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, ListOptions, key};
    /// # use tuplekv_index::{Collection, Error};
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct User { id: u64, email: String }
    ///
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(Database::in_memory())?;
    /// let ada = User { id: 1, email: "ada@example.com".into() };
    /// users.insert(&ada)?;
    /// assert_eq!(users.get(&key![1])?, Some(ada));
    /// assert_eq!(users.get(&key![2])?, None);
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// A store error, or a stored record that does not decode.
    pub fn get(&self, pk: &Key) -> Result<Option<T>, Error> {
        match self.store.snapshot().get_raw(&self.record_key(pk)?)? {
            Some(e) => Ok(Some(self.decode(
                pk,
                value_bytes(&e.value)?,
                e.versionstamp,
            )?)),
            None => Ok(None),
        }
    }

    pub(crate) fn index_named(&self, index: &str) -> Result<(usize, &IndexSpec<T>), Error> {
        self.def
            .indexes
            .iter()
            .enumerate()
            .find(|(_, i)| i.name == index)
            .ok_or_else(|| Error::UnknownIndex {
                collection: self.def.name.clone(),
                index: index.to_owned(),
            })
    }

    pub(crate) fn refresh_ready(&self, idx: &IndexSpec<T>) -> Result<bool, Error> {
        if idx.ready.load(Ordering::Acquire) {
            return Ok(true);
        }
        let state = self.store.snapshot().get_raw(&self.state_key(&idx.name)?)?;
        let ready =
            matches!(state.map(|e| e.value), Some(Value::Bytes(b)) if b.as_ref() == STATE_READY);
        if ready {
            idx.ready.store(true, Ordering::Release);
        }
        Ok(ready)
    }

    fn queryable(&self, index: &str) -> Result<&IndexSpec<T>, Error> {
        let (_, idx) = self.index_named(index)?;
        if !self.refresh_ready(idx)? {
            return Err(Error::IndexNotReady {
                index: index.to_owned(),
            });
        }
        Ok(idx)
    }

    /// Resolves one index entry read from `view` into its record. A pointer's record key is
    /// the record prefix followed by the entry's primary key bytes, which the entry holds
    /// encoded already.
    fn resolve(&self, view: &S::Snapshot, entry: &Entry) -> Result<Option<(Key, T)>, Error> {
        self.resolve_with(entry, |key| view.get_raw(key))
    }

    /// [`Collection::resolve`], reading the record with `read`.
    fn resolve_with(
        &self,
        entry: &Entry,
        read: impl FnOnce(&[u8]) -> Result<Option<Entry>, tuplekv_engine::Error>,
    ) -> Result<Option<(Key, T)>, Error> {
        let (pk_bytes, copy) = Self::entry_parts(&entry.value)?;
        let pk = decode_key(&pk_bytes).map_err(codec_err)?;
        let record = match copy {
            Some(bytes) => Some(self.decode(&pk, bytes, entry.versionstamp)?),
            None => match read(&self.record_key_of(&pk_bytes))? {
                Some(e) => Some(self.decode(&pk, value_bytes(&e.value)?, e.versionstamp)?),
                None => None,
            },
        };
        Ok(record.map(|r| (pk, r)))
    }

    /// The record whose unique index `index` has `value`, with its primary key.
    ///
    /// # Examples
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, ListOptions, key};
    /// # use tuplekv_index::{Collection, Error};
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct User { id: u64, email: String }
    ///
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(Database::in_memory())?;
    /// let ada = User { id: 1, email: "ada@example.com".into() };
    /// users.insert(&ada)?;
    /// let found = users.get_by("email", &key!["ada@example.com"])?;
    /// assert_eq!(found, Some((key![1], ada)));
    /// assert_eq!(users.get_by("email", &key!["bob@example.com"])?, None);
    /// // A name the collection does not declare is refused.
    /// assert!(matches!(users.get_by("emial", &key!["x"]), Err(Error::UnknownIndex { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnknownIndex`] (also for a non-unique index), [`Error::IndexNotReady`], or a
    /// store error.
    pub fn get_by(&self, index: &str, value: &Key) -> Result<Option<(Key, T)>, Error> {
        let idx = self.queryable(index)?;
        if !idx.unique {
            return Err(Error::UnknownIndex {
                collection: self.def.name.clone(),
                index: format!("{index} (not unique: use list_by)"),
            });
        }
        let entry_key = self.entry_key(idx, value, &[]);
        if let Some(found) = self.get_by_latest(idx, value, &entry_key)? {
            return Ok(found);
        }
        let view = self.store.snapshot();
        match view.get_raw(&entry_key)? {
            Some(entry) => self.resolve(&view, &entry),
            None => Ok(None),
        }
    }

    /// [`Collection::get_by`] with two single-key reads of the latest state and no snapshot:
    /// the entry, then the record it points at. A writer may move the value between the two
    /// reads; the answer stands if the record read still has the value (the index is built,
    /// so then it is the value's one holder), and is `None` (read again from one snapshot)
    /// if not.
    fn get_by_latest(
        &self,
        idx: &IndexSpec<T>,
        value: &Key,
        entry_key: &[u8],
    ) -> Result<Option<Option<(Key, T)>>, Error> {
        /// What the entry says, read without copying it.
        enum Found<T> {
            Absent,
            /// A pointer: the primary key, and the record's key.
            Pointer(Key, Vec<u8>),
            /// A covering entry's primary key and record copy.
            Covering(Key, T),
        }
        let found = self.store.read_latest_raw(entry_key, |entry| {
            let Some((entry, stamp)) = entry else {
                return Ok::<_, Error>(Found::Absent);
            };
            let (pk_bytes, copy) = Self::entry_parts(entry)?;
            let pk = decode_key(&pk_bytes).map_err(codec_err)?;
            Ok(match copy {
                Some(bytes) => {
                    let record = self.decode(&pk, bytes, stamp)?;
                    Found::Covering(pk, record)
                }
                None => Found::Pointer(pk, self.record_key_of(&pk_bytes)),
            })
        })??;
        let (pk, record) = match found {
            Found::Absent => return Ok(Some(None)),
            Found::Covering(pk, record) => (pk, Some(record)),
            Found::Pointer(pk, record_key) => {
                let record = self
                    .store
                    .read_latest_raw(&record_key, |record| match record {
                        Some((bytes, stamp)) => value_bytes(bytes)
                            .and_then(|b| self.decode(&pk, b, stamp))
                            .map(Some),
                        None => Ok::<_, Error>(None),
                    })??;
                (pk, record)
            }
        };
        // A covering entry carries its record, so it always has the value.
        match record {
            Some(record) if (idx.extract)(&record).contains(value) => Ok(Some(Some((pk, record)))),
            _ => Ok(None),
        }
    }

    /// One page of the index entries in `range` (of the `kind` keyspace, `"u"` or `"i"`),
    /// resolved to records.
    ///
    /// The cursor is Deno's format (URL-safe base64 of the last key after a prefix), taken
    /// relative to `[collection, kind]` rather than to the query's range. Relative to the
    /// range, an exact unique value's entry *is* the common prefix, so its cursor would be
    /// `""`, which means "from the start", and a paging loop would never end. Every entry key
    /// is strictly longer than `[collection, kind]`, so this cursor is never empty.
    fn page(&self, kind: &str, range: ByteRange, options: ListOptions) -> Result<Page<T>, Error> {
        let base = Selector::Prefix(self.key(&[kind], &[])?);
        let range = match options.cursor.as_deref() {
            None | Some("") => range,
            Some(cursor) => {
                let after = base.resume(cursor, options.reverse).map_err(selector_err)?;
                let resumed = if options.reverse {
                    ByteRange {
                        start: range.start.clone(),
                        end: after.end,
                    }
                } else {
                    ByteRange {
                        start: after.start,
                        end: range.end.clone(),
                    }
                };
                if resumed.start < range.start
                    || resumed.end > range.end
                    || resumed.start > resumed.end
                {
                    return Err(selector_err(SelectorError::CursorOutOfBounds));
                }
                resumed
            }
        };
        let view = self.store.snapshot();
        let limit = options.limit;
        let selector = Selector::Range {
            start: range.start,
            end: range.end,
        };
        let options = ListOptions {
            cursor: None,
            ..options
        };
        let mut items = Vec::new();
        let mut seen = 0usize;
        let mut last = None;
        for entry in ListIter::new(view.clone(), selector, options)? {
            let entry = entry?;
            seen += 1;
            if let Some(item) = self.resolve(&view, &entry)? {
                items.push(item);
            }
            last = Some(entry.key);
        }
        let cursor = match last {
            Some(key) if limit.is_some_and(|l| seen >= l) => {
                Some(base.cursor_for(&key).map_err(selector_err)?)
            }
            _ => None,
        };
        Ok(Page { items, cursor })
    }

    /// The byte range of the entries of `idx` whose value starts with `prefix`.
    fn range_for(&self, idx: &IndexSpec<T>, prefix: &Key) -> Result<ByteRange, Error> {
        let exact = encode_key(&self.index_prefix(idx, prefix)?);
        if idx.unique && !prefix.is_empty() {
            // A unique entry's key ends with its value: the exact value is a key itself.
            let mut end = exact.clone();
            end.push(0xff);
            Ok(ByteRange { start: exact, end })
        } else {
            Selector::Prefix(exact).byte_range().map_err(selector_err)
        }
    }

    /// The records whose `index` value starts with `prefix` (all of the value for an exact
    /// match; the leading fields of a compound index; [`Key::empty`] for everything), in index
    /// order, with Deno's list options (`limit`, `reverse`, `cursor`).
    ///
    /// # Examples
    /// A compound index listed by its leading field, two records per page:
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, ListOptions, key};
    /// # use tuplekv_index::Collection;
    /// #[derive(Serialize, Deserialize)]
    /// struct Person { id: u32, city: String, age: u32 }
    ///
    /// let people = Collection::builder("people", |p: &Person| key![p.id])
    ///     .index("city_age", |p| Some(key![p.city.clone(), p.age]))
    ///     .open(Database::in_memory())?;
    /// for (id, city, age) in [(1, "Oslo", 40), (2, "Lima", 30), (3, "Oslo", 20), (4, "Oslo", 30)] {
    ///     people.insert(&Person { id, city: city.into(), age })?;
    /// }
    /// let first = people.list_by("city_age", &key!["Oslo"], ListOptions { limit: Some(2), ..Default::default() })?;
    /// let ages: Vec<u32> = first.items.iter().map(|(_, p)| p.age).collect();
    /// assert_eq!(ages, [20, 30]); // ordered by the next field of the index
    /// let rest = people.list_by("city_age", &key!["Oslo"], ListOptions { cursor: first.cursor, ..Default::default() })?;
    /// assert_eq!(rest.items.len(), 1);
    /// # Ok::<(), tuplekv_index::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnknownIndex`], [`Error::IndexNotReady`], bad options, or a store error.
    pub fn list_by(
        &self,
        index: &str,
        prefix: &Key,
        options: ListOptions,
    ) -> Result<Page<T>, Error> {
        let idx = self.queryable(index)?;
        let range = self.range_for(idx, prefix)?;
        self.page(kind_of(idx), range, options)
    }

    /// The records whose `index` value lies in `[start, end)`.
    ///
    /// # Errors
    /// As [`Collection::list_by`].
    pub fn list_range(
        &self,
        index: &str,
        start: &Key,
        end: &Key,
        options: ListOptions,
    ) -> Result<Page<T>, Error> {
        let idx = self.queryable(index)?;
        let range = Selector::range(
            &self.index_prefix(idx, start)?,
            &self.index_prefix(idx, end)?,
        )
        .byte_range()
        .map_err(selector_err)?;
        self.page(kind_of(idx), range, options)
    }

    /// How many entries of `index` start with `prefix` (records, for a single-valued index).
    ///
    /// # Errors
    /// As [`Collection::list_by`].
    pub fn count(&self, index: &str, prefix: &Key) -> Result<usize, Error> {
        let idx = self.queryable(index)?;
        let range = self.range_for(idx, prefix)?;
        Ok(self.store.snapshot().scan(&range, false, usize::MAX)?.len())
    }

    /// Every record, in primary-key order.
    ///
    /// # Examples
    /// Two records per page, following the cursor:
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use tuplekv_engine::{Database, ListOptions, key};
    /// # use tuplekv_index::{Collection, Error};
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct User { id: u64, email: String }
    ///
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(Database::in_memory())?;
    /// let ada = User { id: 1, email: "ada@example.com".into() };
    /// for id in [3, 1, 2] {
    ///     users.insert(&User { id, email: format!("user{id}@example.com") })?;
    /// }
    /// let first = users.list(ListOptions { limit: Some(2), ..Default::default() })?;
    /// let ids: Vec<u64> = first.items.iter().map(|(_, u)| u.id).collect();
    /// assert_eq!(ids, [1, 2]); // primary-key order
    /// let rest = users.list(ListOptions { cursor: first.cursor, ..Default::default() })?;
    /// assert_eq!(rest.items.len(), 1);
    /// assert!(rest.cursor.is_none()); // no limit: nothing more to page through
    /// # let _ = ada;
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// Bad options or a store error.
    pub fn list(&self, options: ListOptions) -> Result<Page<T>, Error> {
        let prefix = decode_key(&self.key(&["id"], &[])?).map_err(codec_err)?;
        let view = self.store.snapshot();
        let limit = options.limit;
        let mut iter = ListIter::new(view, Selector::prefix(&prefix), options)?;
        let mut items = Vec::new();
        for entry in iter.by_ref() {
            let entry = entry?;
            let pk = pk_of_record_key(&entry.key)?;
            let record = self.decode(&pk, value_bytes(&entry.value)?, entry.versionstamp)?;
            items.push((pk, record));
        }
        let cursor = match iter.cursor() {
            ListCursor::After(c) if limit.is_some_and(|l| items.len() >= l) => Some(c),
            _ => None,
        };
        Ok(Page { items, cursor })
    }
}

/// The keyspace of an index's entries: `"u"` (unique) or `"i"`.
fn kind_of<T>(idx: &IndexSpec<T>) -> &'static str {
    if idx.unique { "u" } else { "i" }
}

/// The encoding of a key made of `names`.
fn encode_names(names: &[&str]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(32);
    for name in names {
        encode_part_into(&KeyPart::from(*name), &mut out).map_err(|e| Error::Codec {
            primary_key: Key::empty(),
            message: e.to_string(),
        })?;
    }
    Ok(out)
}

fn selector_err(e: SelectorError) -> Error {
    Error::Store(e.into())
}

/// The primary key in a record's key `[collection, "id", pk...]`.
pub(crate) fn pk_of_record_key(key: &[u8]) -> Result<Key, Error> {
    let key = decode_key(key).map_err(codec_err)?;
    let pk = key.parts().get(2..).ok_or_else(|| Error::Codec {
        primary_key: Key::empty(),
        message: format!(
            "record key {key} has {} parts, not [collection, \"id\", primary key...]",
            key.parts().len()
        ),
    })?;
    key_of(pk.to_vec())
}

pub(crate) fn codec_err(e: tuplekv_codec::DecodeError) -> Error {
    Error::Codec {
        primary_key: Key::empty(),
        message: e.to_string(),
    }
}

/// Who a unique entry belongs to, as [`Collection::read_unique`] found it.
enum Holder {
    /// The entry is absent.
    Nobody,
    /// The record being written, with exactly the bytes it would be written with.
    Same,
    /// The record being written, with other bytes.
    Record,
    /// Another record.
    Other,
}

/// How a write without a transaction went (see [`Collection::try_unopposed`]).
enum Unopposed<R> {
    /// It finished: committed, or found the answer the transaction would give.
    Done(R),
    /// It did not try to commit (something it relies on is not known).
    Declined,
    /// Its commit did not go through (a conflict, or an error the transaction reports).
    Lost,
}

impl<R> Unopposed<R> {
    fn map<U>(self, f: impl FnOnce(R) -> U) -> Unopposed<U> {
        match self {
            Unopposed::Done(r) => Unopposed::Done(f(r)),
            Unopposed::Declined => Unopposed::Declined,
            Unopposed::Lost => Unopposed::Lost,
        }
    }
}

fn set_mutation(key: KeyBytes, value: Value) -> Mutation {
    Mutation {
        key,
        kind: MutationKind::Set {
            value,
            expiry: None,
        },
    }
}

fn delete_mutation(key: KeyBytes) -> Mutation {
    Mutation {
        key,
        kind: MutationKind::Delete,
    }
}

thread_local! {
    /// Where index entry keys are encoded before they are copied into a `KeyBytes` (inline
    /// when short): one buffer per thread rather than an allocation per entry.
    static ENTRY_KEY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub(crate) fn value_bytes(value: &Value) -> Result<&[u8], Error> {
    match value {
        Value::Bytes(b) => Ok(b),
        _ => Err(Error::Codec {
            primary_key: Key::empty(),
            message: "a record is not a bytes value".into(),
        }),
    }
}
