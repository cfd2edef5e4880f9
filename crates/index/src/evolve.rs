//! Record evolution at run time: the schema a handle checks at `open` and keeps checking with
//! every write, the conversion of plain records to envelopes, and the online migration of
//! records stored by older versions ([`Collection::migrate_records`]).
//!
//! Invariants:
//! - every record write of a handle commits only if the schema key is unchanged since the
//!   handle read it; a changed schema is read again before the write is retried, so no write
//!   lands on a layout or a version its handle does not know;
//! - once the layout leaves *plain*, no plain record is written (every plain writer's commit
//!   checks the schema), so a record starting with [`ENVELOPE_TAG`] and written after the
//!   conversion began (a versionstamp above its boundary) is an envelope; the conversion
//!   rewrites every older one (and every covering copy of one) as an envelope of version 0,
//!   byte for byte inside it, before the layout becomes *enveloped*;
//! - once a newer version is declared, handles of older versions cannot write, so a migration
//!   pass that reached the end has seen every record of an older version.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tuplekv_codec::{Key, Selector, decode_key};
use tuplekv_engine::limits::{CHECKS_MAX, MUTATIONS_MAX, TOTAL_MUTATION_SIZE_MAX, VALUE_SIZE_MAX};
use tuplekv_engine::{
    AtomicWrite, Check, Entry, KeyBytes, Mutation, MutationKind, ReadView, Store, Transaction,
    Value, Versionstamp,
};

use crate::collection::{Collection, RECORDS_ENVELOPED, pk_of_record_key, value_bytes};
use crate::entry::{self, COVERING};
use crate::error::Error;
use crate::maintain::CommitBudget;
use crate::record::{self, ENVELOPE_TAG, RecordFormat};
use crate::schema::{self, Fit, Layout, Schema, Shape, VersionShape, stamp_text};

/// [`Layout::Plain`], as the handle's atomic holds it.
pub(crate) const LAYOUT_PLAIN: u8 = 0;
/// [`Layout::Converting`], as the handle's atomic holds it.
pub(crate) const LAYOUT_CONVERTING: u8 = 1;
/// [`Layout::Enveloped`], as the handle's atomic holds it.
pub(crate) const LAYOUT_ENVELOPED: u8 = 2;

/// The marker's value while a conversion is under way; its versionstamp is the boundary.
const RECORDS_CONVERTING: &[u8] = b"converting";

/// Most times `open` reads the schema again after a concurrent open changed it first.
pub(crate) const SCHEMA_ATTEMPTS_MAX: u32 = 64;

/// Most entries one conversion commit rewrites (each is also a check, so at most
/// `CHECKS_MAX`).
const CONVERT_BATCH_MAX: usize = 64;

/// Records a [`Collection::migrate_records`] transaction reads when the caller passes 0.
pub const MIGRATE_BATCH_DEFAULT: usize = 100;

/// The schema as a handle last read it.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    /// The schema key's versionstamp (`None`: not stored yet, only during `open`).
    pub(crate) stamp: Option<Versionstamp>,
    /// Where the conversion to envelopes began, while it is under way.
    pub(crate) boundary: Option<Versionstamp>,
    /// Why this handle may not write, if it may not (a newer version is declared).
    pub(crate) refused: Option<String>,
}

/// Reads a body of a migration's version (in its format) as the old struct and converts it.
type Convert<T> = Arc<dyn Fn(RecordFormat, &[u8]) -> Result<T, String> + Send + Sync>;

/// Reads a postcard body as a migration's old struct only.
type ReadOld = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// A declared migration: from which version, the old struct's shape, and the conversion.
pub(crate) struct MigrationSpec<T> {
    pub(crate) from: u32,
    pub(crate) shape: schema::ShapeText,
    /// Reads a body of that version (in its format) as the old struct and converts it.
    pub(crate) run: Convert<T>,
    /// Reads a body as the old struct only, without converting it.
    pub(crate) read: ReadOld,
}

impl<T> MigrationSpec<T> {
    pub(crate) fn new<Old, F>(from: u32, f: F) -> Self
    where
        Old: DeserializeOwned + 'static,
        F: Fn(Old) -> Result<T, String> + Send + Sync + 'static,
    {
        MigrationSpec {
            from,
            shape: schema::to_text(schema::trace::<Old>()),
            run: Arc::new(move |format, body| f(record::decode_body::<Old>(format, body)?)),
            read: Arc::new(|body| {
                record::decode_body::<Old>(RecordFormat::Postcard, body).map(|_| ())
            }),
        }
    }
}

/// Progress of [`Collection::migrate_records`], reported after each batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationProgress {
    /// The version records are migrated to.
    pub to: u32,
    /// Records looked at so far (this run).
    pub scanned: u64,
    /// Records rewritten in the current version so far (this run).
    pub migrated: u64,
}

/// What [`Collection::migrate_records`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationReport {
    /// The version every record is in now.
    pub to: u32,
    /// Records looked at (this run; a resumed run starts where the last one stopped).
    pub scanned: u64,
    /// Records rewritten.
    pub migrated: u64,
    /// Versions whose records are gone now (their migrations can be deleted).
    pub retired: Vec<u32>,
    /// Index entries fixed afterwards ([`Collection::repair`]): a migration that changes an
    /// indexed value leaves the old value's entries behind until then.
    pub repaired: u64,
}

/// The stored progress of a migration, `[coll, "meta", "migration"]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
struct Cursor {
    /// The version records are migrated to.
    to: u32,
    /// The last record key done (a list cursor), `None` before the first batch.
    after: Option<String>,
}

impl<T, S> Collection<T, S>
where
    T: Serialize + DeserializeOwned,
    S: Store,
{
    pub(crate) fn schema_err(&self, reason: impl Into<String>) -> Error {
        Error::Schema {
            collection: self.def.name.clone(),
            reason: reason.into(),
        }
    }

    fn my_shape(&self) -> Result<Shape, Error> {
        match self.def.shape.as_ref().map(schema::from_text) {
            Some(Ok(shape)) => Ok(shape),
            Some(Err(e)) => Err(Error::Definition(format!(
                "cannot trace the serde shape of the record struct of `{}`: {e}; {}",
                self.def.name,
                untraced_hint(&e)
            ))),
            None => Err(Error::Definition("the record struct was not traced".into())),
        }
    }

    /// The struct's shape when the collection needs it: a JSON collection reads by name and
    /// needs none unless postcard records of its version are stored.
    fn shape_if_needed(&self) -> Result<Option<Shape>, Error> {
        match self.my_shape() {
            Ok(shape) => Ok(Some(shape)),
            Err(_) if self.def.format == RecordFormat::Json => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Checks the struct against the stored schema, records what is new, and opens the
    /// collection's layout (converting plain records to envelopes when this handle writes
    /// them). Refuses, having written nothing, a struct that does not fit.
    pub(crate) fn open_schema(&self) -> Result<(), Error> {
        let mine = self.shape_if_needed()?;
        let mut opened = false;
        for _ in 0..SCHEMA_ATTEMPTS_MAX {
            // One read per snapshot: some stores (a remote one without held snapshots) answer
            // only the first read of a snapshot.
            let found = self.store.get_latest_raw(&self.def.schema_key)?;
            let (old, stamp) = match &found {
                Some(e) => (
                    Schema::from_bytes(value_bytes(&e.value)?).map_err(|r| self.schema_err(r))?,
                    Some(e.versionstamp),
                ),
                None => (self.adopt()?, None),
            };
            let mut new = self.evolve(&old, mine.as_ref())?;
            fill_boundary(&old, stamp, &mut new);
            // What this handle will see once the schema is committed; the dry run reads
            // with it. A conversion starting now has every stored record before it.
            let boundary = match (old.layout, new.layout) {
                (Layout::Converting, _) => match stamp {
                    Some(stamp) => Some(self.converting_boundary(&old, stamp)?),
                    None => old.boundary(),
                },
                (_, Layout::Converting) => Some(Versionstamp::from_bytes(STAMP_MAX)),
                _ => None,
            };
            self.set_cache(&new, stamp, boundary);
            let mut checked = Ok(());
            if old.layout == Layout::Plain && new.layout == Layout::Converting {
                // Refused before the conversion begins, rather than half way.
                checked = self.check_wrappable();
            }
            let others = new.present.iter().any(|v| *v != self.def.version);
            if checked.is_ok() && (found.is_none() || others) {
                checked = self.dry_run();
            }
            if let Err(e) = checked {
                // Judged with this schema: if another open changed it meanwhile (converted
                // the records, say), judge again with the new one.
                let now = self.store.get_latest_raw(&self.def.schema_key)?;
                if now.map(|e| e.versionstamp) != stamp {
                    continue;
                }
                return Err(e);
            }
            if found.is_some() && new == old {
                opened = true;
                break;
            }
            let mut write = self
                .store
                .atomic()
                .check_raw(&self.def.schema_key, stamp)
                .set_raw(&self.def.schema_key, new.to_bytes());
            if old.layout == Layout::Plain && new.layout == Layout::Converting {
                // Written in the conversion's first commit: its own versionstamp is the
                // boundary, which a copy that keeps commits together and in order keeps.
                write = write.set_raw(&self.marker_key()?, RECORDS_CONVERTING);
            }
            let committed = write.commit()?;
            if committed.is_committed() {
                opened = true;
                break;
            }
        }
        if !opened {
            return Err(
                self.schema_err("its schema kept changing under concurrent opens; open it again")
            );
        }
        self.reload()?;
        if self.def.layout.load(Ordering::Acquire) == LAYOUT_CONVERTING {
            self.convert()?;
        }
        Ok(())
    }

    /// The schema of a collection that has none stored: empty, or written by a build from
    /// before schemas. Its records' versions are read from their envelopes (the marker a
    /// versioned build of then left says whether there are any); their shapes are taken from
    /// the declarations (the struct for its own version, the old structs of migrations), and
    /// the dry run that follows reads every record with them.
    fn adopt(&self) -> Result<Schema, Error> {
        let marker = self.store.get_latest_raw(&self.marker_key()?)?;
        let enveloped = matches!(marker.map(|e| e.value), Some(Value::Bytes(b)) if b.as_ref() == RECORDS_ENVELOPED);
        let mut present = std::collections::BTreeSet::new();
        let mut versions = std::collections::BTreeMap::new();
        let mut any = false;
        let view = self.store.snapshot();
        for e in view.scan(&self.records_range()?, false, usize::MAX)? {
            any = true;
            let bytes = value_bytes(&e.value)?;
            let tagged = enveloped && bytes.first() == Some(&ENVELOPE_TAG);
            let stored = record::split(bytes, tagged).map_err(|r| Error::Incompatible {
                collection: self.def.name.clone(),
                primary_key: pk_of_record_key(&e.key).unwrap_or_else(|_| Key::empty()),
                version: 0,
                reason: r,
            })?;
            present.insert(stored.version);
            let postcard = stored.format == RecordFormat::Postcard;
            let shape = if stored.version == self.def.version {
                self.shape_if_needed()?
            } else if let Some(Ok(shape)) = self
                .def
                .migrations
                .iter()
                .find(|m| m.from == stored.version)
                .map(|m| schema::from_text(&m.shape))
            {
                Some(shape)
            } else {
                // No declaration for it: `evolve` refuses it with the missing migration.
                continue;
            };
            let slot: &mut VersionShape = versions
                .entry(stored.version)
                .or_insert(VersionShape { shape, postcard });
            slot.postcard |= postcard;
        }
        let layout = match (enveloped, any || self.def.wants_envelope()) {
            (true, _) => Layout::Enveloped,
            // An empty collection that will hold envelopes needs no conversion.
            (false, _) if !any && self.def.wants_envelope() => Layout::Enveloped,
            _ => Layout::Plain,
        };
        Ok(Schema {
            layout,
            converted_at: None,
            current: present.iter().copied().max().unwrap_or(0),
            present,
            versions,
        })
    }

    /// The schema once this handle is open on it, or why it cannot open.
    fn evolve(&self, old: &Schema, mine: Option<&Shape>) -> Result<Schema, Error> {
        let version = self.def.version;
        if version < old.current {
            return Err(self.schema_err(format!(
                "version {} of the record struct is declared (by a newer build); this build \
                 declares version {version} and cannot read that version's records: run the \
                 newer build",
                old.current
            )));
        }
        let mut new = old.clone();
        let postcard = self.def.format == RecordFormat::Postcard;
        let stored = old.versions.get(&version);
        if let Some(VersionShape {
            shape: Some(stored),
            postcard: true,
        }) = stored
        {
            let mine = match mine {
                Some(mine) => mine,
                None => {
                    self.my_shape()?;
                    return Err(self.schema_err("the record struct's shape cannot be traced"));
                }
            };
            self.fit(stored, mine, &format!("version {version}"), |bytes| {
                record::decode_body::<T>(RecordFormat::Postcard, bytes).map(|_| ())
            })?;
        }
        let was_postcard = stored.is_some_and(|v| v.postcard);
        new.versions.insert(
            version,
            VersionShape {
                shape: mine.cloned(),
                postcard: postcard || was_postcard,
            },
        );
        for m in &self.def.migrations {
            let Some(VersionShape {
                shape: Some(stored),
                postcard: true,
            }) = old.versions.get(&m.from)
            else {
                continue;
            };
            let shape = schema::from_text(&m.shape).map_err(|e| {
                Error::Definition(format!(
                    "cannot trace the serde shape of the old struct of `.migrate({}, ..)`: {e}; {}",
                    m.from,
                    untraced_hint(&e)
                ))
            })?;
            {
                let read = Arc::clone(&m.read);
                self.fit(
                    stored,
                    &shape,
                    &format!("the old struct of `.migrate({}, ..)`", m.from),
                    move |bytes| read(bytes),
                )?;
            }
        }
        new.present.insert(version);
        for v in &new.present {
            if *v != version && !self.def.migrations.iter().any(|m| m.from == *v) {
                return Err(self.schema_err(format!(
                    "records of version {v} of the record struct may still be stored (no \
                     migration from it has finished); declare `.migrate({v}, |old: OldStruct| \
                     ...)` with that version's struct, and run `migrate_records` to retire it"
                )));
            }
        }
        new.current = version;
        if self.def.wants_envelope() && new.layout == Layout::Plain {
            new.layout = Layout::Converting;
        }
        Ok(new)
    }

    /// Checks that `current` reads records of `stored`'s shape: `Err` names every field that
    /// does not line up. Fields added at the end must take a default: `read` must accept a
    /// record of the stored shape.
    fn fit(
        &self,
        stored: &Shape,
        current: &Shape,
        what: &str,
        read: impl Fn(&[u8]) -> Result<(), String>,
    ) -> Result<(), Error> {
        match schema::compare(stored, current, &self.def.renames) {
            Err(problems) => Err(self.schema_err(format!(
                "{what} of the record struct does not read the records stored by it: {}",
                problems.join("; ")
            ))),
            Ok(Fit::Same) => Ok(()),
            Ok(Fit::Extended(added)) => {
                let Some(old) = schema::zero_record(stored) else {
                    return Ok(());
                };
                match read(&old) {
                    Err(e) if e.contains("a field this struct requires") => {
                        Err(self.schema_err(format!(
                            "{what} adds field(s) {} that stored records lack: give them \
                             `#[serde(default)]`, or declare a new `.version(..)` with a \
                             `.migrate(..)`",
                            added
                                .iter()
                                .map(|a| format!("`{a}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )))
                    }
                    _ => Ok(()),
                }
            }
        }
    }

    /// Reads every record of `view` as this handle will, without writing: the first that does
    /// not read (a migration that fails on it, a record the struct cannot read) refuses the
    /// open with its primary key.
    fn dry_run(&self) -> Result<(), Error> {
        let view = self.store.snapshot();
        for e in view.scan(&self.records_range()?, false, usize::MAX)? {
            let pk = pk_of_record_key(&e.key)?;
            self.decode(&pk, value_bytes(&e.value)?, e.versionstamp)?;
        }
        Ok(())
    }

    fn marker_key(&self) -> Result<Vec<u8>, Error> {
        self.key(&["meta", "records"], &[])
    }

    fn migration_key(&self) -> Result<Vec<u8>, Error> {
        self.key(&["meta", "migration"], &[])
    }

    /// Sets what the handle knows of the schema. A handle that has seen the layout before it
    /// was enveloped keeps the conversion's boundary: a snapshot it took then may still hold
    /// plain records, which their versionstamps tell apart.
    fn set_cache(&self, s: &Schema, stamp: Option<Versionstamp>, boundary: Option<Versionstamp>) {
        if s.layout != Layout::Enveloped {
            self.def.lived_through.store(true, Ordering::Release);
        }
        let refused = (s.current > self.def.version).then(|| {
            format!(
                "version {} of the record struct is declared; this handle declares version {} \
                 and cannot write: open it with the newer build",
                s.current, self.def.version
            )
        });
        let layout = match s.layout {
            Layout::Plain => LAYOUT_PLAIN,
            Layout::Converting => LAYOUT_CONVERTING,
            Layout::Enveloped => LAYOUT_ENVELOPED,
        };
        if let Ok(mut cache) = self.def.cache.write() {
            *cache = Cache {
                stamp,
                boundary,
                refused,
            };
        }
        self.def.layout.store(layout, Ordering::Release);
    }

    /// Loads the schema from `entry` (the schema key as read).
    fn load(&self, entry: &Entry) -> Result<(), Error> {
        let s = Schema::from_bytes(value_bytes(&entry.value)?).map_err(|r| self.schema_err(r))?;
        let boundary = match s.layout {
            Layout::Converting => Some(self.converting_boundary(&s, entry.versionstamp)?),
            Layout::Enveloped if self.def.lived_through.load(Ordering::Acquire) => s.boundary(),
            _ => None,
        };
        self.set_cache(&s, Some(entry.versionstamp), boundary);
        Ok(())
    }

    /// Reads the schema again from the latest state.
    fn reload(&self) -> Result<(), Error> {
        match self.store.get_latest_raw(&self.def.schema_key)? {
            Some(e) => self.load(&e),
            None => Err(self.schema_err("its schema is gone from the store")),
        }
    }

    /// Whether a record (or covering copy) starting with [`ENVELOPE_TAG`], written at
    /// `stamp`, is an envelope: never guessed from its bytes.
    pub(crate) fn is_envelope(&self, stamp: Versionstamp) -> Result<bool, Error> {
        match self.def.layout.load(Ordering::Acquire) {
            // A handle opened on an enveloped collection never saw a plain record; one that
            // lived through the conversion may read a snapshot from before it.
            LAYOUT_ENVELOPED if !self.def.lived_through.load(Ordering::Acquire) => Ok(true),
            LAYOUT_ENVELOPED => Ok(self.boundary().is_none_or(|b| stamp > b)),
            LAYOUT_CONVERTING => Ok(self.boundary().is_none_or(|b| stamp > b)),
            _ => {
                // The handle saw plain records; the collection may have been converted since.
                // Its schema says where the conversion began, and what this handle read
                // before that is plain. An unchanged schema key (one lookup, no snapshot)
                // still says plain.
                let known = self.def.cache.read().ok().and_then(|c| c.stamp);
                let stamp_now = self
                    .store
                    .read_latest_raw(&self.def.schema_key, |found| found.map(|(_, s)| s))?;
                if stamp_now.is_some() && stamp_now == known {
                    return Ok(false);
                }
                let Some(e) = self.store.get_latest_raw(&self.def.schema_key)? else {
                    return Ok(false);
                };
                let s =
                    Schema::from_bytes(value_bytes(&e.value)?).map_err(|r| self.schema_err(r))?;
                if s.layout == Layout::Plain {
                    return Ok(false);
                }
                // What this handle read may predate the conversion: the boundary decides.
                let boundary = match s.layout {
                    Layout::Converting => Some(self.converting_boundary(&s, e.versionstamp)?),
                    _ => s.boundary(),
                };
                self.load(&e)?;
                Ok(boundary.is_none_or(|b| stamp > b))
            }
        }
    }

    /// A stored record's bytes as a covering copy written now must hold them: a plain
    /// record that starts with [`ENVELOPE_TAG`], copied once the layout has left *plain*,
    /// is wrapped as the conversion wraps it (a new copy's versionstamp says "envelope").
    pub(crate) fn stored_bytes(&self, bytes: &[u8], stamp: Versionstamp) -> Result<Vec<u8>, Error> {
        let plain_tagged = bytes.first() == Some(&ENVELOPE_TAG) && !self.is_envelope(stamp)?;
        Ok(
            if plain_tagged && self.def.layout.load(Ordering::Acquire) != LAYOUT_PLAIN {
                record::wrap_plain(bytes)
            } else {
                bytes.to_vec()
            },
        )
    }

    /// Whether the stored covering entry `value`, written at `stamp`, is the planned `entry`
    /// once its copy is read as what it is: a plain copy from before a conversion equals the
    /// planned (wrapped) copy of the same plain record.
    pub(crate) fn plain_copy_matches(
        &self,
        value: &Value,
        stamp: Versionstamp,
        entry: &[u8],
    ) -> bool {
        let Ok((pk, Some(copy))) = entry::parts(value) else {
            return false;
        };
        if copy.first() != Some(&ENVELOPE_TAG) || self.is_envelope(stamp).unwrap_or(true) {
            return false;
        }
        let wrapped = record::wrap_plain(copy);
        let mut out = Vec::with_capacity(5 + pk.len() + wrapped.len());
        out.push(COVERING);
        out.extend_from_slice(&u32::try_from(pk.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&pk);
        out.extend_from_slice(&wrapped);
        out == entry
    }

    /// Whether covering copies of equal bytes may be taken as equal: not while converting,
    /// when the same bytes can mean a plain record in an old copy and an envelope in a new
    /// record, so a copy is always rewritten then.
    pub(crate) fn copies_comparable(&self) -> bool {
        self.def.layout.load(Ordering::Acquire) != LAYOUT_CONVERTING
    }

    /// Where the conversion under way began: the versionstamp of the marker its first commit
    /// wrote (what a copy of the collection keeps), else the one the schema recorded, else
    /// that of the schema entry read (`schema_stamp`: no writer has rewritten it yet).
    fn converting_boundary(
        &self,
        s: &Schema,
        schema_stamp: Versionstamp,
    ) -> Result<Versionstamp, Error> {
        let marker = self.store.get_latest_raw(&self.marker_key()?)?;
        Ok(match marker {
            Some(m) if matches!(&m.value, Value::Bytes(b) if b.as_ref() == RECORDS_CONVERTING) => {
                m.versionstamp
            }
            _ => s.boundary().unwrap_or(schema_stamp),
        })
    }

    fn boundary(&self) -> Option<Versionstamp> {
        self.def.cache.read().ok().and_then(|c| c.boundary)
    }

    /// The check every write's commit carries: the schema is what this handle read. `Err` if
    /// this handle may not write.
    pub(crate) fn schema_check(&self) -> Result<Check, Error> {
        let cache = self
            .def
            .cache
            .read()
            .map_err(|_| self.schema_err("its schema cache is poisoned"))?;
        if let Some(why) = &cache.refused {
            return Err(self.schema_err(why.clone()));
        }
        Ok(Check {
            key: KeyBytes::from(self.def.schema_key.as_slice()),
            versionstamp: cache.stamp,
        })
    }

    /// Reads the schema inside a write's transaction (so the commit checks it), loading it
    /// again if it changed; `Err` if this handle may not write.
    pub(crate) fn schema_in(&self, tx: &mut Transaction<'_, S>) -> Result<(), Error> {
        let found = tx.get_raw(&self.def.schema_key)?;
        let known = self.def.cache.read().ok().and_then(|c| c.stamp);
        match &found {
            Some(e) if Some(e.versionstamp) != known => self.load(e)?,
            None => return Err(self.schema_err("its schema is gone from the store")),
            _ => {}
        }
        match self.def.cache.read().ok().and_then(|c| c.refused.clone()) {
            Some(why) => Err(self.schema_err(why)),
            None => Ok(()),
        }
    }

    /// Rewrites every plain record written before the conversion began that starts with
    /// [`ENVELOPE_TAG`] (and every covering copy of one) as an envelope of version 0 holding
    /// its bytes unchanged, then marks the layout enveloped. Runs again from the start after a
    /// crash: what it rewrote has a newer versionstamp and is left alone.
    fn convert(&self) -> Result<(), Error> {
        for _ in 0..SCHEMA_ATTEMPTS_MAX {
            let Some(e) = self.store.get_latest_raw(&self.def.schema_key)? else {
                return Err(self.schema_err("its schema is gone from the store"));
            };
            let mut s =
                Schema::from_bytes(value_bytes(&e.value)?).map_err(|r| self.schema_err(r))?;
            if s.layout != Layout::Converting {
                return self.load(&e);
            }
            if s.converted_at.is_none() {
                // The first schema that said "converting" is where the conversion began.
                s.converted_at = Some(stamp_text(e.versionstamp));
                let _ = self
                    .store
                    .atomic()
                    .check_raw(&self.def.schema_key, Some(e.versionstamp))
                    .set_raw(&self.def.schema_key, s.to_bytes())
                    .commit()?;
                continue;
            }
            self.load(&e)?;
            let boundary = self.converting_boundary(&s, e.versionstamp)?;
            let mut complete = true;
            for (prefix, records) in self.spaces()? {
                complete &= self.wrap_range(&prefix, records, boundary)?;
            }
            if !complete {
                // A value too large to wrap (written by a plain writer after `open` checked):
                // the layout stays converting, where every record's versionstamp says how to
                // read it, and the next open tries again.
                return Ok(());
            }
            s.layout = Layout::Enveloped;
            // The boundary as this database has it (a copy renumbers versionstamps), for the
            // handles that lived through the conversion.
            s.converted_at = Some(stamp_text(boundary));
            let done = self
                .store
                .atomic()
                .check_raw(&self.def.schema_key, Some(e.versionstamp))
                .set_raw(&self.def.schema_key, s.to_bytes())
                .set_raw(&self.marker_key()?, RECORDS_ENVELOPED)
                .commit()?;
            if done.is_committed() {
                return self.reload();
            }
        }
        Err(self.schema_err(
            "the conversion of its records to envelopes kept conflicting with schema changes",
        ))
    }

    /// Wraps the plain values under `prefix` written before `boundary`: records (`records`),
    /// or covering index entries' copies. A page whose commit met a concurrent write (which
    /// wrote an envelope) is read and wrapped again.
    fn wrap_range(
        &self,
        prefix: &Key,
        records: bool,
        boundary: Versionstamp,
    ) -> Result<bool, Error> {
        let mut cursor: Option<String> = None;
        let mut complete = true;
        loop {
            let (page, next) = self.list_page(prefix, CONVERT_BATCH_MAX * 4, cursor.clone())?;
            let mut writes = vec![AtomicWrite::default()];
            let mut size = 0usize;
            let mut unwrappable = false;
            for e in &page {
                let wrapped = match self.wrapped(e, records, boundary) {
                    Wrap::Keep => continue,
                    Wrap::TooLarge(_) => {
                        // Left plain: its versionstamp keeps it readable as plain.
                        unwrappable = true;
                        continue;
                    }
                    Wrap::Into(v) => v,
                };
                let len = e.key.len() * 2 + wrapped.size();
                let full = writes.last().is_some_and(|w| {
                    w.checks.len() + 1 > CONVERT_BATCH_MAX.min(CHECKS_MAX)
                        || w.mutations.len() + 1 > MUTATIONS_MAX
                        || size + len > TOTAL_MUTATION_SIZE_MAX
                });
                if full {
                    writes.push(AtomicWrite::default());
                    size = 0;
                }
                let Some(write) = writes.last_mut() else {
                    continue;
                };
                write.checks.push(Check {
                    key: e.key.clone(),
                    versionstamp: Some(e.versionstamp),
                });
                write.mutations.push(Mutation {
                    key: e.key.clone(),
                    kind: MutationKind::Set {
                        value: wrapped,
                        expiry: None,
                    },
                });
                size += len;
            }
            let mut all = true;
            for write in writes.into_iter().filter(|w| !w.mutations.is_empty()) {
                all &= self.store.commit(write)?.is_committed();
            }
            if !all {
                continue; // the same page again
            }
            complete &= !unwrappable;
            cursor = next;
            if cursor.is_none() {
                return Ok(complete);
            }
        }
    }

    /// Fails, naming it, on the first plain value the conversion could not wrap.
    fn check_wrappable(&self) -> Result<(), Error> {
        let boundary = Versionstamp::from_bytes(STAMP_MAX);
        for (prefix, records) in self.spaces()? {
            let range = Selector::prefix(&prefix)
                .byte_range()
                .map_err(|e| Error::Store(e.into()))?;
            for e in self.store.snapshot().scan(&range, false, usize::MAX)? {
                if let Wrap::TooLarge(why) = self.wrapped(&e, records, boundary) {
                    return Err(self.schema_err(why));
                }
            }
        }
        Ok(())
    }

    /// The key prefixes of the collection's records (`true`) and index entries.
    fn spaces(&self) -> Result<Vec<(Key, bool)>, Error> {
        ["id", "u", "i"]
            .into_iter()
            .map(|space| {
                let prefix =
                    decode_key(&self.key(&[space], &[])?).map_err(crate::collection::codec_err)?;
                Ok((prefix, space == "id"))
            })
            .collect()
    }

    /// The wrapped form of `e` if it holds a plain value starting with [`ENVELOPE_TAG`] written
    /// before `boundary`.
    fn wrapped(&self, e: &Entry, records: bool, boundary: Versionstamp) -> Wrap {
        if e.versionstamp > boundary {
            return Wrap::Keep;
        }
        let too_large = |what: &str| {
            Wrap::TooLarge(format!(
                "{what} {} is within 3 bytes of the value limit ({VALUE_SIZE_MAX} bytes) and \
                 starts with the envelope tag: it cannot be put in an envelope; shrink or \
                 delete it, then open again",
                e.decoded_key().map(|k| k.to_string()).unwrap_or_default()
            ))
        };
        if records {
            let Value::Bytes(b) = &e.value else {
                return Wrap::Keep;
            };
            if b.first() != Some(&ENVELOPE_TAG) {
                return Wrap::Keep;
            }
            let out = record::wrap_plain(b);
            if out.len() > VALUE_SIZE_MAX {
                return too_large("record");
            }
            return Wrap::Into(Value::from(out));
        }
        let Ok((pk, Some(copy))) = entry::parts(&e.value) else {
            return Wrap::Keep;
        };
        if copy.first() != Some(&ENVELOPE_TAG) {
            return Wrap::Keep;
        }
        let wrapped = record::wrap_plain(copy);
        let mut out = Vec::with_capacity(5 + pk.len() + wrapped.len());
        out.push(COVERING);
        out.extend_from_slice(&u32::try_from(pk.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&pk);
        out.extend_from_slice(&wrapped);
        if out.len() > VALUE_SIZE_MAX {
            return too_large("covering entry");
        }
        Wrap::Into(Value::from(out))
    }

    /// Rewrites every record stored by an older version of the struct in the current one,
    /// at most `batch` records per transaction (0: [`MIGRATE_BATCH_DEFAULT`]), calling
    /// `progress` after each; reads and writes go on meanwhile. Each batch re-reads its
    /// records inside its transaction and records how far it got in the same commit, so a run
    /// cut short (a crash, a power cut, an error) resumes where it stopped. When every record
    /// is in the current version, older versions are retired: their migrations can be deleted,
    /// and `open` stops reading every record to check them. Then the indexes are repaired
    /// ([`Collection::repair`]): entries are computed from the current struct, and an old
    /// record's entries were computed from the old one, so a migration that changes an indexed
    /// value (say, lower-cases emails) leaves queries by that value stale until this runs.
    ///
    /// # Errors
    /// A record whose migration fails ([`Error::Incompatible`], with its key), a write limit
    /// (a migrated record too large), a store error or a conflict past the retry bound; what
    /// was migrated stays, and running it again continues.
    pub fn migrate_records(
        &self,
        batch: usize,
        mut progress: impl FnMut(&MigrationProgress),
    ) -> Result<MigrationReport, Error> {
        let batch = if batch == 0 {
            MIGRATE_BATCH_DEFAULT
        } else {
            batch.min(MUTATIONS_MAX)
        };
        let to = self.def.version;
        let key = self.migration_key()?;
        let prefix = decode_key(&self.key(&["id"], &[])?).map_err(crate::collection::codec_err)?;
        let mut done = MigrationProgress {
            to,
            ..MigrationProgress::default()
        };
        loop {
            // Where the last batch (of this run or an earlier one) stopped.
            let after = match self.store.get_latest_raw(&key)? {
                Some(e) => {
                    let c: Cursor = serde_json::from_slice(value_bytes(&e.value)?)
                        .map_err(|e| self.schema_err(format!("its migration cursor: {e}")))?;
                    if c.to == to { c.after } else { None }
                }
                None => None,
            };
            let (page, _) = self.list_page(&prefix, batch, after.clone())?;
            let pks = page
                .iter()
                .map(|e| pk_of_record_key(&e.key))
                .collect::<Result<Vec<_>, _>>()?;
            let selector = Selector::prefix(&prefix);
            let (migrated, reached, stopped) =
                self.store.transaction_with(&self.def.retry, |tx| {
                    self.schema_in(tx)?;
                    let mut budget = CommitBudget::default();
                    let mut migrated = 0u64;
                    let mut reached: Option<Vec<u8>> = None;
                    let mut stopped = false;
                    for pk in &pks {
                        let record_key = self.record_key(pk)?;
                        let Some(e) = tx.get_raw(&record_key)? else {
                            reached = Some(record_key);
                            continue;
                        };
                        let bytes = value_bytes(&e.value)?;
                        let enveloped = bytes.first() == Some(&ENVELOPE_TAG)
                            && self.is_envelope(e.versionstamp)?;
                        let version = record::split(bytes, enveloped)
                            .map(|s| s.version)
                            .unwrap_or(0);
                        if version == to {
                            reached = Some(record_key);
                            continue;
                        }
                        let record = self.decode(pk, bytes, e.versionstamp)?;
                        let old_plan = self.plan(pk, &record, bytes, None)?;
                        let new_bytes = self.encode(pk, &record)?;
                        let new_plan = self.plan(pk, &record, &new_bytes, None)?;
                        // The commit closes before the engine's limits would refuse it; a
                        // record alone past them is refused by the engine, naming the limit.
                        let mut trial = budget.clone();
                        let fits = trial.admit_set(record_key.len(), new_bytes.len())
                            && new_plan
                                .iter()
                                .all(|p| trial.admit_set(p.key.len(), p.entry.len()))
                            && old_plan.iter().all(|p| trial.admit_delete(p.key.len()));
                        if !fits && migrated > 0 {
                            stopped = true;
                            break;
                        }
                        budget = trial;
                        self.put_in(tx, pk, &record_key, &old_plan, Some(&record))?;
                        migrated += 1;
                        reached = Some(record_key);
                    }
                    let after = match &reached {
                        Some(k) => {
                            Some(selector.cursor_for(k).map_err(|e| Error::Store(e.into()))?)
                        }
                        None => after.clone(),
                    };
                    let cursor = Cursor { to, after };
                    tx.mutate_raw(
                        &key,
                        MutationKind::Set {
                            value: Value::from(serde_json::to_vec(&cursor).unwrap_or_default()),
                            expiry: None,
                        },
                    );
                    Ok::<_, Error>((migrated, reached, stopped))
                })?;
            let scanned = match &reached {
                Some(k) => pks
                    .iter()
                    .position(|pk| self.record_key(pk).is_ok_and(|rk| rk == *k))
                    .map_or(0, |i| i + 1),
                None => 0,
            };
            done.scanned += scanned as u64;
            done.migrated += migrated;
            progress(&done);
            if pks.len() < batch && !stopped {
                break;
            }
        }
        let retired = self.retire()?;
        // The old records' entries were written by the old build's extractors from the old
        // struct; a migration that changes an indexed value leaves them behind (and the new
        // value unindexed). Repair makes every index match the migrated records.
        // Every run repairs (an earlier one may have been cut short before it did, and an
        // update through this handle plans an old record's entries from the migrated one),
        // but only the declared indexes: an older build may still read one this build
        // dropped, which `drop_index` removes when it is time.
        let repaired = self
            .repair_where(|f| self.def.indexes.iter().any(|i| i.name == f.index))?
            .findings
            .len() as u64;
        Ok(MigrationReport {
            to,
            scanned: done.scanned,
            migrated: done.migrated,
            retired,
            repaired,
        })
    }

    /// Marks every version but the current one gone, once a migration pass has reached the
    /// end, and resets the cursor for the next migration.
    fn retire(&self) -> Result<Vec<u32>, Error> {
        let key = self.migration_key()?;
        self.store.transaction_with(&self.def.retry, |tx| {
            let Some(e) = tx.get_raw(&self.def.schema_key)? else {
                return Err(self.schema_err("its schema is gone from the store"));
            };
            let mut s =
                Schema::from_bytes(value_bytes(&e.value)?).map_err(|r| self.schema_err(r))?;
            if s.current != self.def.version {
                return Err(self.schema_err(format!(
                    "version {} was declared while records were migrated to {}",
                    s.current, self.def.version
                )));
            }
            let read = s.clone();
            fill_boundary(&read, Some(e.versionstamp), &mut s);
            let retired: Vec<u32> = s
                .present
                .iter()
                .copied()
                .filter(|v| *v != s.current)
                .collect();
            tx.mutate_raw(&key, MutationKind::Delete);
            if !retired.is_empty() || s != read {
                s.present.retain(|v| *v == s.current);
                tx.mutate_raw(
                    &self.def.schema_key,
                    MutationKind::Set {
                        value: Value::from(s.to_bytes()),
                        expiry: None,
                    },
                );
            }
            Ok(retired)
        })
    }
}

/// Keeps the conversion's boundary where it began: a schema rewritten while it says
/// *converting* without a boundary takes the versionstamp of the one it read, which by
/// induction is the first that said *converting*.
fn fill_boundary(read: &Schema, read_stamp: Option<Versionstamp>, new: &mut Schema) {
    if read.layout == Layout::Converting && read.converted_at.is_none() {
        new.converted_at = read_stamp.map(stamp_text);
    }
}

/// What the conversion does with one stored value.
enum Wrap {
    /// Nothing: an envelope already, not tagged, or written after the conversion began.
    Keep,
    /// Rewrite it as this.
    Into(Value),
    /// It cannot take an envelope's 3 bytes: why, naming it.
    TooLarge(String),
}

/// What to do about a struct whose shape does not trace.
fn untraced_hint(e: &str) -> &'static str {
    if e.contains("Incomplete tracing") {
        "a `#[serde(alias)]` hides the field order from the tracer: postcard stores no names, so \
         declare `.renamed(old, new)` instead of an alias (or use `RecordFormat::Json`)"
    } else {
        "if one of its types checks what it deserialises (a validated newtype, a date read from \
         a string), give `.shape_sample(&record)` a real record"
    }
}

/// The largest versionstamp: a boundary no stored record is past.
const STAMP_MAX: [u8; 10] = [0xff; 10];
