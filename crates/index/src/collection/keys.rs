//! Where a collection's keys lie and how its records become bytes: the record, index-entry
//! and state keys under the collection's name, the record's encoding (plain or in its
//! versioned envelope) and decoding, and the plan of index entries a record should have.

use super::*;

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
    pub(super) fn write_record_key(&self, pk: &Key) -> Result<Vec<u8>, Error> {
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
    pub(super) fn record_key_of(&self, pk_bytes: &[u8]) -> Vec<u8> {
        [self.def.record_prefix.as_slice(), pk_bytes].concat()
    }

    /// The encoded primary key at the end of `record_key` (one `record_key` built).
    pub(super) fn pk_bytes<'k>(&self, record_key: &'k [u8]) -> &'k [u8] {
        record_key
            .get(self.def.record_prefix.len()..)
            .unwrap_or_default()
    }

    /// The key of `idx`'s entry for `value`: `[collection, "u", name, value...]`, or for a
    /// non-unique index `[..., value..., primary key...]` (`pk_bytes` already encoded).
    pub(super) fn entry_key(&self, idx: &IndexSpec<T>, value: &Key, pk_bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(idx.prefix.len() + 32 + pk_bytes.len());
        self.entry_key_into(idx, value, pk_bytes, &mut out);
        out
    }

    /// [`Collection::entry_key`], appended to `out`.
    pub(super) fn entry_key_into(
        &self,
        idx: &IndexSpec<T>,
        value: &Key,
        pk_bytes: &[u8],
        out: &mut Vec<u8>,
    ) {
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
    pub(super) fn envelope(&self) -> Option<(RecordFormat, u32)> {
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
    pub(super) fn plan_encoded(
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
    pub(super) fn entry_parts(value: &Value) -> Result<(PkBytes<'_>, Option<&[u8]>), Error> {
        entry::parts(value).map_err(|message| Error::Codec {
            primary_key: Key::empty(),
            message,
        })
    }

    /// The record a unique entry points at, when it is not the one encoded as `pk_bytes`
    /// (`pk`): `None` if the entry is this record's. Equal bytes need no decoding; different
    /// bytes are decoded and compared as keys, as before, so a malformed entry is still an
    /// error and an equal key in another spelling still counts as this record's.
    pub(super) fn other_holder(
        value: &Value,
        pk: &Key,
        pk_bytes: &[u8],
    ) -> Result<Option<Key>, Error> {
        let (held, _) = Self::entry_parts(value)?;
        if *held == *pk_bytes {
            return Ok(None);
        }
        let (holder, _) = Self::parse_entry(value)?;
        Ok((holder != *pk).then_some(holder))
    }
}
