//! [`Collection`]: the definition (name, primary key, indexes) and its builder, here; where
//! the keys lie and how records are encoded (`keys`), the write path that keeps records and
//! index entries in one commit (`writes`), and the queries (`queries`).

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

mod keys;
mod queries;
mod writes;

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
