//! A collection's reads: `get` by primary key, `get_by`, `list_by`, `list_range` and `count`
//! on an index (an index being built answers only once ready), `list` in key order, and the
//! pages and cursors they return.

use super::*;

impl<T, S> Collection<T, S>
where
    T: Serialize + DeserializeOwned,
    S: Store,
{
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

    pub(super) fn queryable(&self, index: &str) -> Result<&IndexSpec<T>, Error> {
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
    pub(super) fn resolve(
        &self,
        view: &S::Snapshot,
        entry: &Entry,
    ) -> Result<Option<(Key, T)>, Error> {
        self.resolve_with(entry, |key| view.get_raw(key))
    }

    /// [`Collection::resolve`], reading the record with `read`.
    pub(super) fn resolve_with(
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
    pub(super) fn get_by_latest(
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
    pub(super) fn page(
        &self,
        kind: &str,
        range: ByteRange,
        options: ListOptions,
    ) -> Result<Page<T>, Error> {
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
    pub(super) fn range_for(&self, idx: &IndexSpec<T>, prefix: &Key) -> Result<ByteRange, Error> {
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
