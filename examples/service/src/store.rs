//! Which store the service runs on.

use std::path::PathBuf;
use std::time::Duration;

use tuplekv_engine::{Database, Durability, Options};
use tuplekv_remote::{ConnectError, RemoteOptions, RemoteStore};

/// The store a service instance opens.
#[derive(Debug, Clone)]
pub enum StoreChoice {
    /// An embedded [`Database`] in memory.
    Memory,
    /// An embedded durable [`Database`] in this directory, each commit synced
    /// ([`Durability::Sync`]).
    Dir(PathBuf),
    /// A `tuplekv serve` (or any KV Connect server) through a [`RemoteStore`].
    Remote {
        /// Its URL, `http://127.0.0.1:4512`.
        url: String,
        /// Its access token.
        token: String,
        /// [`RemoteOptions::retry_for`]: how long a request waits for an unreachable server
        /// before it fails (and the service answers 503).
        retry_for: Duration,
    },
}

impl StoreChoice {
    /// `memory`, `dir` or `remote`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreChoice::Memory => "memory",
            StoreChoice::Dir(_) => "dir (sync)",
            StoreChoice::Remote { .. } => "remote",
        }
    }

    /// Opens the store. Blocking (a remote store runs its metadata exchange now).
    ///
    /// # Errors
    /// The database's (a directory open elsewhere, damaged files) or the connection's.
    pub fn open(&self) -> Result<AnyStore, StoreError> {
        Ok(match self {
            StoreChoice::Memory => AnyStore::Database(Database::in_memory()),
            StoreChoice::Dir(dir) => {
                let options = Options {
                    durability: Durability::Sync,
                    ..Options::default()
                };
                AnyStore::Database(Database::open(dir, options).map_err(StoreError::Database)?)
            }
            StoreChoice::Remote {
                url,
                token,
                retry_for,
            } => {
                let options = RemoteOptions {
                    retry_for: *retry_for,
                    ..RemoteOptions::default()
                };
                let store =
                    RemoteStore::connect_with(url, token, options).map_err(StoreError::Remote)?;
                AnyStore::Remote(store)
            }
        })
    }
}

/// An opened store: the service is generic over [`tuplekv_engine::Store`], so a caller
/// matches on this once and runs the service on the store inside.
#[derive(Debug, Clone)]
pub enum AnyStore {
    /// Embedded.
    Database(Database),
    /// Remote.
    Remote(RemoteStore),
}

/// Why a store did not open.
#[derive(Debug)]
pub enum StoreError {
    /// The embedded database's error.
    Database(tuplekv_engine::Error),
    /// The remote store's.
    Remote(ConnectError),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Database(e) => write!(f, "opening the database: {e}"),
            StoreError::Remote(e) => write!(f, "connecting to the server: {e}"),
        }
    }
}

impl std::error::Error for StoreError {}
