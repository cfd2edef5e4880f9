//! A blocking driver for `denokv_sqlite`, Deno KV's own SQLite backend, so benches can call it
//! like the other peers. Its API is async and every request hops to one of its worker threads
//! (the write worker for commits); each calling thread here runs its own current-thread tokio
//! runtime, as a Deno isolate would.

use std::num::NonZeroU32;
use std::path::Path;

use denokv_proto::{
    AtomicWrite, Check, Consistency, KvValue, Mutation, MutationKind, ReadRange,
    SnapshotReadOptions,
};
use denokv_sqlite::{Sqlite, SqliteConfig, SqliteNotifier};
use rand::SeedableRng;

/// A value and the versionstamp that wrote it.
pub type Versioned = (Vec<u8>, [u8; 10]);

/// A `denokv_sqlite` database and a runtime to drive it from the current thread.
pub struct DenoSqlite {
    db: Sqlite,
    rt: tokio::runtime::Runtime,
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

impl DenoSqlite {
    /// An in-memory database.
    pub fn in_memory() -> Result<DenoSqlite, String> {
        Self::open_with(rusqlite::Connection::open_in_memory)
    }

    /// A database in the file `path` (WAL journal, SQLite's default `synchronous=FULL`: each
    /// commit is synced).
    pub fn file(path: &Path) -> Result<DenoSqlite, String> {
        let path = path.to_path_buf();
        Self::open_with(move || rusqlite::Connection::open(&path))
    }

    fn open_with(
        mut open: impl FnMut() -> rusqlite::Result<rusqlite::Connection>,
    ) -> Result<DenoSqlite, String> {
        let db = Sqlite::new(
            || {
                let conn = open().map_err(|e| deno_error::JsErrorBox::generic(e.to_string()))?;
                let rng: Box<dyn rand::RngCore + Send> =
                    Box::new(rand::rngs::StdRng::seed_from_u64(7));
                Ok((conn, rng))
            },
            SqliteNotifier::default(),
            SqliteConfig {
                num_workers: 1,
                batch_timeout: None,
            },
        )
        .map_err(|e| e.to_string())?;
        Ok(DenoSqlite { db, rt: runtime()? })
    }

    /// A second handle for another thread (same database, its own runtime).
    pub fn handle(&self) -> Result<DenoSqlite, String> {
        Ok(DenoSqlite {
            db: self.db.clone(),
            rt: runtime()?,
        })
    }

    /// One handle per bench thread.
    ///
    /// # Panics
    /// If a handle cannot be made: a silent fallback would measure fewer threads than the
    /// benchmark's name says.
    pub fn handles(&self, threads: usize) -> Vec<DenoSqlite> {
        (0..threads)
            .map(|_| match self.handle() {
                Ok(h) => h,
                Err(e) => panic!("denokv_sqlite handle: {e}"),
            })
            .collect()
    }

    /// Commits `write`; `Ok(true)` if it committed, `Ok(false)` if a check failed.
    pub fn commit(&self, write: AtomicWrite) -> Result<bool, String> {
        self.rt
            .block_on(self.db.atomic_write(write))
            .map(|r| r.is_some())
            .map_err(|e| e.to_string())
    }

    /// Sets `(key, value)` pairs in one commit.
    pub fn set_many(&self, pairs: &[(Vec<u8>, Vec<u8>)]) -> Result<(), String> {
        let mutations = pairs
            .iter()
            .map(|(k, v)| set(k.clone(), v.clone()))
            .collect();
        self.commit(AtomicWrite {
            checks: vec![],
            mutations,
            enqueues: vec![],
        })
        .map(|_| ())
    }

    /// Reads up to `limit` entries of `[start, end)`; returns their value bytes.
    pub fn range(&self, start: &[u8], end: &[u8], limit: u32) -> Result<Vec<Vec<u8>>, String> {
        let limit = NonZeroU32::new(limit).ok_or("limit must be positive")?;
        let out = self
            .rt
            .block_on(self.db.snapshot_read(
                vec![ReadRange {
                    start: start.to_vec(),
                    end: end.to_vec(),
                    limit,
                    reverse: false,
                }],
                SnapshotReadOptions {
                    consistency: Consistency::Strong,
                },
            ))
            .map_err(|e| e.to_string())?;
        Ok(out
            .into_iter()
            .flat_map(|r| r.entries)
            .map(|e| match e.value {
                KvValue::Bytes(b) | KvValue::V8(b) => b,
                KvValue::U64(n) => n.to_le_bytes().to_vec(),
            })
            .collect())
    }

    /// Reads one key with its versionstamp.
    pub fn get_entry(&self, key: &[u8]) -> Result<Option<Versioned>, String> {
        let mut end = key.to_vec();
        end.push(0);
        let limit = NonZeroU32::MIN;
        let out = self
            .rt
            .block_on(self.db.snapshot_read(
                vec![ReadRange {
                    start: key.to_vec(),
                    end,
                    limit,
                    reverse: false,
                }],
                SnapshotReadOptions {
                    consistency: Consistency::Strong,
                },
            ))
            .map_err(|e| e.to_string())?;
        Ok(out.into_iter().flat_map(|r| r.entries).next().map(|e| {
            let value = match e.value {
                KvValue::Bytes(b) | KvValue::V8(b) => b,
                KvValue::U64(n) => n.to_le_bytes().to_vec(),
            };
            (value, e.versionstamp)
        }))
    }

    /// Reads one key.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let mut end = key.to_vec();
        end.push(0);
        Ok(self.range(key, &end, 1)?.pop())
    }
}

/// A `set` mutation.
pub fn set(key: Vec<u8>, value: Vec<u8>) -> Mutation {
    Mutation {
        key,
        kind: MutationKind::Set(KvValue::Bytes(value)),
        expire_at: None,
    }
}

/// A `sum` of a `u64` on `key`.
pub fn sum(key: Vec<u8>, n: u64) -> Mutation {
    Mutation {
        key,
        kind: MutationKind::Sum {
            value: KvValue::U64(n),
            min_v8: vec![],
            max_v8: vec![],
            clamp: false,
        },
        expire_at: None,
    }
}

/// A check that `key` still has `versionstamp`.
pub fn unchanged(key: Vec<u8>, versionstamp: [u8; 10]) -> Check {
    Check {
        key,
        versionstamp: Some(versionstamp),
    }
}

/// A `delete` mutation.
pub fn delete(key: Vec<u8>) -> Mutation {
    Mutation {
        key,
        kind: MutationKind::Delete,
        expire_at: None,
    }
}

/// An "absent" check on `key`.
pub fn absent(key: Vec<u8>) -> Check {
    Check {
        key,
        versionstamp: None,
    }
}

/// The spec's typical transaction: two absence checks and two sets.
pub fn two_checks_two_sets(a: Vec<u8>, b: Vec<u8>, value: Vec<u8>) -> AtomicWrite {
    AtomicWrite {
        checks: vec![absent(a.clone()), absent(b.clone())],
        mutations: vec![set(a, value.clone()), set(b, value)],
        enqueues: vec![],
    }
}
