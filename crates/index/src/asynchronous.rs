//! The collection's operations for async callers: the blocking operation of the same name,
//! run in rounds by [`tuplekv_engine::replay::run`], so a handler awaits the store's reads
//! and commits without holding a runtime worker or a blocking-pool thread.
//!
//! Each method returns what its blocking twin returns, with the same guarantees: it is the
//! same code, run on a [`Replay`] of the store. Over the in-memory
//! [`Database`](tuplekv_engine::Database) it runs inline, in one round; over a durable one
//! it runs inline up to the log's sync, which it awaits; over a
//! [`RemoteStore`](https://docs.rs/tuplekv-remote) or an etcd store it awaits each read and
//! commit. A closure passed to [`Collection::update_async`] is called once per version of the
//! record it is given, as the blocking `update` calls it.

use std::future::Future;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tuplekv_codec::Key;
use tuplekv_engine::replay::{self, Replay};
use tuplekv_engine::{ListOptions, Store};

use crate::collection::{Collection, Page};
use crate::error::Error;

impl<T, S> Collection<T, S>
where
    T: Serialize + DeserializeOwned + Send + Sync,
    S: Store,
{
    /// This collection over a round's replay of its store.
    fn on<'s>(&self, store: &Replay<'s, S>) -> Collection<T, Replay<'s, S>> {
        Collection {
            store: store.clone(),
            def: Arc::clone(&self.def),
        }
    }

    /// [`Collection::insert`], awaited.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use tuplekv_engine::{Database, key};
    /// use tuplekv_index::{Collection, Error};
    ///
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct User { id: u64, email: String }
    ///
    /// # pollster::block_on(async {
    /// let users = Collection::builder("users", |u: &User| key![u.id])
    ///     .unique("email", |u| Some(key![u.email.clone()]))
    ///     .open(Database::in_memory())?;
    /// users.insert_async(&User { id: 1, email: "ada@example.com".into() }).await?;
    /// let imposter = User { id: 2, email: "ada@example.com".into() };
    /// let refused = users.insert_async(&imposter).await;
    /// assert!(matches!(refused, Err(Error::UniqueViolation { .. })));
    /// let (_, ada) = users.get_by_async("email", &key!["ada@example.com"]).await?.expect("indexed");
    /// assert_eq!(ada.id, 1);
    /// # Ok::<(), Error>(())
    /// # })?;
    /// # Ok::<(), tuplekv_index::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Collection::insert`].
    pub fn insert_async<'a>(
        &'a self,
        record: &'a T,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        replay::run(&self.store, move |s| self.on(s).insert(record))
    }

    /// [`Collection::upsert`], awaited.
    ///
    /// # Errors
    /// As [`Collection::upsert`].
    pub fn upsert_async<'a>(
        &'a self,
        record: &'a T,
    ) -> impl Future<Output = Result<Option<T>, Error>> + Send + 'a {
        replay::run(&self.store, move |s| self.on(s).upsert(record))
    }

    /// [`Collection::update`], awaited: `f` gets the current record and returns the new one.
    /// It is called once for each version of the record it is given (again only if a
    /// concurrent write changed the record), however many rounds the update takes.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use tuplekv_engine::{Database, key};
    /// use tuplekv_index::Collection;
    ///
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct Counter { id: u64, hits: u64 }
    ///
    /// # pollster::block_on(async {
    /// let counters = Collection::builder("counters", |c: &Counter| key![c.id])
    ///     .open(Database::in_memory())?;
    /// counters.insert_async(&Counter { id: 7, hits: 0 }).await?;
    /// let after = counters
    ///     .update_async(&key![7], |c| Counter { hits: c.hits + 1, ..c })
    ///     .await?;
    /// assert_eq!(after.hits, 1);
    /// # Ok::<(), tuplekv_index::Error>(())
    /// # })?;
    /// # Ok::<(), tuplekv_index::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Collection::update`].
    pub fn update_async<'a, F>(
        &'a self,
        pk: &'a Key,
        mut f: F,
    ) -> impl Future<Output = Result<T, Error>> + Send + 'a
    where
        T: Clone,
        F: FnMut(T) -> T + Send + 'a,
    {
        // What `f` returned for each record it was given, by the record's bytes: a round
        // that gives it the same record gets the same answer without calling it again.
        let mut made: Vec<(Vec<u8>, T)> = Vec::new();
        replay::run(&self.store, move |s| {
            let on = self.on(s);
            on.update(pk, |old| {
                let Ok(bytes) = on.encode(pk, &old) else {
                    return f(old);
                };
                if let Some((_, new)) = made.iter().find(|(b, _)| *b == bytes) {
                    return new.clone();
                }
                let new = f(old);
                made.push((bytes, new.clone()));
                new
            })
        })
    }

    /// [`Collection::delete`], awaited.
    ///
    /// # Errors
    /// As [`Collection::delete`].
    pub fn delete_async<'a>(
        &'a self,
        pk: &'a Key,
    ) -> impl Future<Output = Result<Option<T>, Error>> + Send + 'a {
        replay::run(&self.store, move |s| self.on(s).delete(pk))
    }

    /// [`Collection::get`], awaited.
    ///
    /// # Errors
    /// As [`Collection::get`].
    pub fn get_async<'a>(
        &'a self,
        pk: &'a Key,
    ) -> impl Future<Output = Result<Option<T>, Error>> + Send + 'a {
        replay::run(&self.store, move |s| self.on(s).get(pk))
    }

    /// [`Collection::get_by`], awaited.
    ///
    /// # Errors
    /// As [`Collection::get_by`].
    pub fn get_by_async<'a>(
        &'a self,
        index: &'a str,
        value: &'a Key,
    ) -> impl Future<Output = Result<Option<(Key, T)>, Error>> + Send + 'a {
        replay::run(&self.store, move |s| self.on(s).get_by(index, value))
    }

    /// [`Collection::list`], awaited.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use tuplekv_engine::{Database, ListOptions, key};
    /// use tuplekv_index::Collection;
    ///
    /// #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    /// struct Item { id: u64 }
    ///
    /// # pollster::block_on(async {
    /// let items = Collection::builder("items", |i: &Item| key![i.id]).open(Database::in_memory())?;
    /// for id in 0..5 {
    ///     items.insert_async(&Item { id }).await?;
    /// }
    /// let first = items.list_async(ListOptions { limit: Some(3), ..Default::default() }).await?;
    /// assert_eq!(first.items.len(), 3);
    /// let rest = ListOptions { cursor: first.cursor, ..Default::default() };
    /// assert_eq!(items.list_async(rest).await?.items.len(), 2);
    /// # Ok::<(), tuplekv_index::Error>(())
    /// # })?;
    /// # Ok::<(), tuplekv_index::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Collection::list`].
    pub fn list_async(
        &self,
        options: ListOptions,
    ) -> impl Future<Output = Result<Page<T>, Error>> + Send + '_ {
        replay::run(&self.store, move |s| self.on(s).list(options.clone()))
    }

    /// [`Collection::list_by`], awaited.
    ///
    /// # Errors
    /// As [`Collection::list_by`].
    pub fn list_by_async<'a>(
        &'a self,
        index: &'a str,
        prefix: &'a Key,
        options: ListOptions,
    ) -> impl Future<Output = Result<Page<T>, Error>> + Send + 'a {
        replay::run(&self.store, move |s| {
            self.on(s).list_by(index, prefix, options.clone())
        })
    }

    /// [`Collection::list_range`], awaited.
    ///
    /// # Errors
    /// As [`Collection::list_range`].
    pub fn list_range_async<'a>(
        &'a self,
        index: &'a str,
        start: &'a Key,
        end: &'a Key,
        options: ListOptions,
    ) -> impl Future<Output = Result<Page<T>, Error>> + Send + 'a {
        replay::run(&self.store, move |s| {
            self.on(s).list_range(index, start, end, options.clone())
        })
    }

    /// [`Collection::count`], awaited.
    ///
    /// # Errors
    /// As [`Collection::count`].
    pub fn count_async<'a>(
        &'a self,
        index: &'a str,
        prefix: &'a Key,
    ) -> impl Future<Output = Result<usize, Error>> + Send + 'a {
        replay::run(&self.store, move |s| self.on(s).count(index, prefix))
    }
}
