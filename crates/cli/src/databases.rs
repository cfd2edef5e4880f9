//! The named databases of `tuplekv serve` (`http://host:port/NAME`): where they live and how
//! they are made, shared by the server's hosts and by `tuplekv db`.
//!
//! Under a data root (`--databases ROOT`) each database is a directory:
//!
//! ```text
//! ROOT/NAME/database.json   {"id": "<uuid>", "created_at": "<RFC 3339>"}, written last on create
//! ROOT/NAME/store/          the durable store (checkpoints, log segments, LOCK)
//! ROOT/NAME/tokens          optional: the database's own tokens, one per line
//! ```
//!
//! A database with a `tokens` file accepts only those tokens (the server's own do not open
//! it; they still reach the admin endpoints), read when it is opened and again on SIGHUP.
//!
//! A directory without `database.json` is not a database (a create that died half-way);
//! creating the name again completes it. Without a data root, `--create-databases` keeps
//! named databases in memory: they die with the process.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use serde_json::json;
use tuplekv_engine::{Database, Options};
use tuplekv_server::metrics::{Metrics, database_sampler};
use tuplekv_server::{
    AccessTokens, DatabaseHost, DatabaseName, ServerConfig, Uuid, read_tokens_file, router,
};

/// The file that makes a directory under the data root a database.
pub(crate) const META_FILE: &str = "database.json";
/// The store's directory inside a database's directory.
pub(crate) const STORE_DIR: &str = "store";
/// The optional file of a database's own access tokens.
pub(crate) const TOKENS_FILE: &str = "tokens";
/// How long dropping a database waits for the requests and watches still using it to end.
pub(crate) const DROP_WAIT_MAX: Duration = Duration::from_secs(5);
/// How often a drop looks again whether the database is free.
const DROP_POLL: Duration = Duration::from_millis(10);

/// A database's directory under `root`.
pub(crate) fn database_dir(root: &Path, name: &DatabaseName) -> PathBuf {
    root.join(name.as_str())
}

/// The id of database `name` under `root`, `None` when it does not exist.
///
/// # Errors
/// When its `database.json` cannot be read or holds no valid id.
pub(crate) fn read_id(root: &Path, name: &DatabaseName) -> Result<Option<Uuid>, String> {
    let path = database_dir(root, name).join(META_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    json.get("id")
        .and_then(|id| id.as_str())
        .and_then(|id| Uuid::parse_str(id).ok())
        .map(Some)
        .ok_or_else(|| format!("{} holds no database id", path.display()))
}

/// Creates database `name` under `root` (the root too, if missing) and returns its id; an
/// existing one is left as it is and its id returned, with `false`.
///
/// # Errors
/// When a directory or file cannot be written.
pub(crate) fn create(root: &Path, name: &DatabaseName) -> Result<(Uuid, bool), String> {
    if let Some(id) = read_id(root, name)? {
        return Ok((id, false));
    }
    let dir = database_dir(root, name);
    fs::create_dir_all(dir.join(STORE_DIR))
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let id = Uuid::new_v4();
    let meta = json!({
        "id": id.hyphenated().to_string(),
        "created_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    });
    // Written under a temporary name, synced, then renamed: the name exists whole or not.
    let tmp = dir.join(format!("{META_FILE}.tmp"));
    let write = || -> io::Result<()> {
        let mut file = fs::File::create(&tmp)?;
        io::Write::write_all(&mut file, meta.to_string().as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, dir.join(META_FILE))?;
        fs::File::open(&dir)?.sync_all()
    };
    write().map_err(|e| format!("cannot write {}: {e}", dir.join(META_FILE).display()))?;
    Ok((id, true))
}

/// The databases under `root`, in name order (directories with a `database.json` whose
/// name is a valid database name; anything else there is ignored).
///
/// # Errors
/// When `root` cannot be read (a missing root holds no database).
pub(crate) fn list(root: &Path) -> Result<Vec<DatabaseName>, String> {
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", root.display())),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", root.display()))?;
        let Some(name) = entry
            .file_name()
            .to_str()
            .and_then(|n| DatabaseName::new(n).ok())
        else {
            continue;
        };
        if entry.path().join(META_FILE).is_file() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Deletes database `name` under `root`, which no process may have open: its store is
/// opened first, so a running server's lock refuses the drop. `Ok(false)` when there is none.
///
/// # Errors
/// When it is open elsewhere or cannot be deleted.
pub(crate) fn drop_offline(root: &Path, name: &DatabaseName) -> Result<bool, String> {
    if read_id(root, name)?.is_none() {
        return Ok(false);
    }
    let dir = database_dir(root, name);
    let store = Database::open(dir.join(STORE_DIR), Options::default()).map_err(|e| {
        format!("cannot drop database {name}: its store cannot be opened (a running server may have it open; drop it through the server with --url): {e}")
    })?;
    store
        .close()
        .map_err(|e| format!("cannot close database {name}: {e}"))?;
    remove(&dir)?;
    Ok(true)
}

/// Removes a database directory: `database.json` first, so a drop that dies half-way
/// leaves no database behind, only files a later create reuses.
fn remove(dir: &Path) -> Result<(), String> {
    match fs::remove_file(dir.join(META_FILE)) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot delete {}: {e}", dir.display())),
    }
    fs::remove_dir_all(dir).map_err(|e| format!("cannot delete {}: {e}", dir.display()))
}

/// Takes the only handle of `store` back, waiting up to [`DROP_WAIT_MAX`] for requests
/// and watches to let go; `Err` gives it back when they do not.
fn take_back(mut store: Arc<Database>) -> Result<Database, Arc<Database>> {
    let started = Instant::now();
    loop {
        match Arc::try_unwrap(store) {
            Ok(db) => return Ok(db),
            Err(shared) if started.elapsed() >= DROP_WAIT_MAX => return Err(shared),
            Err(shared) => {
                store = shared;
                std::thread::sleep(DROP_POLL);
            }
        }
    }
}

/// Why database `name` could not be dropped: `store` is still held by others.
fn still_in_use(name: &DatabaseName, store: &Arc<Database>) -> String {
    let users = Arc::strong_count(store) - 1;
    format!(
        "database {name} is still in use by {users} request(s) or watch(es) after \
         {DROP_WAIT_MAX:?}; try again once they end"
    )
}

/// Named databases in directories under a data root, durable.
pub(crate) struct DirHost {
    root: PathBuf,
    options: Options,
    config: ServerConfig,
    metrics: Metrics,
    /// The open stores, each with the configuration (and so the counters) all its routers
    /// share.
    open: Mutex<HashMap<DatabaseName, (Arc<Database>, ServerConfig)>>,
    /// The own tokens of the open databases that have a tokens file.
    tokens: Mutex<HashMap<DatabaseName, Arc<AccessTokens>>>,
}

impl DirHost {
    /// The databases under `root`, opened with `options`, served with `config`'s tokens
    /// and limits, each registered in `metrics` while it is open.
    pub(crate) fn new(
        root: PathBuf,
        options: Options,
        config: ServerConfig,
        metrics: Metrics,
    ) -> Self {
        DirHost {
            root,
            options,
            config,
            metrics,
            open: Mutex::default(),
            tokens: Mutex::default(),
        }
    }

    fn lock_tokens(&self) -> std::sync::MutexGuard<'_, HashMap<DatabaseName, Arc<AccessTokens>>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The own tokens of database `name` (its tokens file, if it has one), shared with its
    /// routers so a reload reaches them.
    fn own_tokens(&self, name: &DatabaseName) -> Result<Option<Arc<AccessTokens>>, String> {
        let file = database_dir(&self.root, name).join(TOKENS_FILE);
        if !file.exists() {
            self.lock_tokens().remove(name);
            return Ok(None);
        }
        let read = read_tokens_file(&file).map_err(|e| e.to_string())?;
        let mut all = self.lock_tokens();
        match all.get(name) {
            Some(tokens) => {
                tokens.replace(read).map_err(|e| e.to_string())?;
                Ok(Some(Arc::clone(tokens)))
            }
            None => {
                let tokens = Arc::new(AccessTokens::new(read).map_err(|e| e.to_string())?);
                all.insert(name.clone(), Arc::clone(&tokens));
                Ok(Some(tokens))
            }
        }
    }

    /// Reads the tokens file of every open database that has one again (on SIGHUP); a file
    /// that fails to parse keeps that database's tokens. What it did, for the log.
    pub(crate) fn reload_tokens(&self) -> Result<String, String> {
        let names: Vec<_> = self.lock_tokens().keys().cloned().collect();
        let mut failed = Vec::new();
        for name in &names {
            let file = database_dir(&self.root, name).join(TOKENS_FILE);
            let reloaded = read_tokens_file(&file)
                .map_err(|e| e.to_string())
                .and_then(|read| {
                    let tokens = self.lock_tokens().get(name).cloned();
                    match tokens {
                        Some(tokens) => tokens.replace(read).map(|_| ()).map_err(|e| e.to_string()),
                        None => Ok(()),
                    }
                });
            if let Err(e) = reloaded {
                failed.push(format!("{name}: {e}"));
            }
        }
        if failed.is_empty() {
            Ok(format!(
                "reloaded the own tokens of {} named database(s)",
                names.len()
            ))
        } else {
            Err(format!(
                "named databases' tokens files refused, their previous tokens stay valid: {}",
                failed.join("; ")
            ))
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<DatabaseName, (Arc<Database>, ServerConfig)>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Syncs and closes every open database (at shutdown, once the server has stopped).
    pub(crate) fn close_all(&self) -> Result<(), String> {
        let open: Vec<_> = self.lock().drain().collect();
        let mut failed = Vec::new();
        for (name, (store, _)) in open {
            self.metrics.remove_database(name.as_str());
            let closed = match take_back(store) {
                Ok(db) => db.close().map_err(|e| e.to_string()),
                Err(_) => Err("still in use".to_owned()),
            };
            if let Err(e) = closed {
                failed.push(format!("{name}: {e}"));
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(format!("closing databases failed: {}", failed.join("; ")))
        }
    }
}

impl DatabaseHost for DirHost {
    fn open(&self, name: &DatabaseName, create_it: bool) -> Result<Option<Router>, String> {
        let id = match read_id(&self.root, name)? {
            Some(id) => id,
            None if create_it => create(&self.root, name)?.0,
            None => return Ok(None),
        };
        // Before the store: a tokens file that does not parse opens nothing.
        let own_tokens = self.own_tokens(name)?;
        let mut open = self.lock();
        let (store, config) = match open.get(name) {
            Some((store, config)) => (Arc::clone(store), config.clone()),
            None => {
                let dir = database_dir(&self.root, name).join(STORE_DIR);
                let store = Arc::new(
                    Database::open(&dir, self.options.clone())
                        .map_err(|e| format!("cannot open {}: {e}", dir.display()))?,
                );
                let mut config = self.config.with_database(name, id);
                if let Some(tokens) = own_tokens {
                    config = config.with_tokens(tokens);
                }
                // A name is registered once: a stale entry (none should be) is replaced.
                self.metrics.remove_database(name.as_str());
                self.metrics
                    .add_database(
                        name.as_str(),
                        Arc::clone(config.stats()),
                        Some(database_sampler(&store)),
                    )
                    .map_err(|e| e.to_string())?;
                open.insert(name.clone(), (Arc::clone(&store), config.clone()));
                (store, config)
            }
        };
        drop(open);
        Ok(Some(router(store, config)))
    }

    fn list(&self) -> Result<Vec<DatabaseName>, String> {
        list(&self.root)
    }

    fn drop_database(&self, name: &DatabaseName) -> Result<bool, String> {
        let Some((store, config)) = self.lock().remove(name) else {
            return drop_offline(&self.root, name);
        };
        let db = take_back(store).map_err(|store| {
            let busy = still_in_use(name, &store);
            self.lock().insert(name.clone(), (store, config));
            busy
        })?;
        db.close()
            .map_err(|e| format!("cannot close database {name}: {e}"))?;
        self.lock_tokens().remove(name);
        self.metrics.remove_database(name.as_str());
        remove(&database_dir(&self.root, name))?;
        Ok(true)
    }
}

/// Named databases in memory, made on demand: they die with the process.
pub(crate) struct MemoryHost {
    config: ServerConfig,
    metrics: Metrics,
    open: Mutex<HashMap<DatabaseName, (ServerConfig, Arc<Database>)>>,
}

impl MemoryHost {
    /// In-memory databases served with `config`'s tokens and limits, each registered in
    /// `metrics` while it exists.
    pub(crate) fn new(config: ServerConfig, metrics: Metrics) -> Self {
        MemoryHost {
            config,
            metrics,
            open: Mutex::default(),
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<DatabaseName, (ServerConfig, Arc<Database>)>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl DatabaseHost for MemoryHost {
    fn open(&self, name: &DatabaseName, create_it: bool) -> Result<Option<Router>, String> {
        let mut open = self.lock();
        let (config, store) = match open.get(name) {
            Some((config, store)) => (config.clone(), Arc::clone(store)),
            None if create_it => {
                let config = self.config.with_database(name, Uuid::new_v4());
                let store = Arc::new(Database::in_memory());
                self.metrics.remove_database(name.as_str());
                self.metrics
                    .add_database(
                        name.as_str(),
                        Arc::clone(config.stats()),
                        Some(database_sampler(&store)),
                    )
                    .map_err(|e| e.to_string())?;
                open.insert(name.clone(), (config.clone(), Arc::clone(&store)));
                (config, store)
            }
            None => return Ok(None),
        };
        Ok(Some(router(store, config)))
    }

    fn list(&self) -> Result<Vec<DatabaseName>, String> {
        let mut names: Vec<_> = self.lock().keys().cloned().collect();
        names.sort();
        Ok(names)
    }

    fn drop_database(&self, name: &DatabaseName) -> Result<bool, String> {
        let Some((config, store)) = self.lock().remove(name) else {
            return Ok(false);
        };
        // Dropped when the last request lets go; waited for so that a new database of the
        // same name never shares a moment with the old one's requests.
        match take_back(store) {
            Ok(db) => {
                drop(db);
                self.metrics.remove_database(name.as_str());
                Ok(true)
            }
            Err(store) => {
                let busy = still_in_use(name, &store);
                self.lock().insert(name.clone(), (config, store));
                Err(busy)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> DatabaseName {
        DatabaseName::new(s).expect("a valid name")
    }

    #[test]
    fn a_created_database_is_listed_keeps_its_id_and_is_dropped_whole() {
        let root = tempfile::tempdir().expect("temp dir");
        assert_eq!(list(root.path()), Ok(vec![]));
        let (id, created) = create(root.path(), &name("db2")).expect("create");
        assert!(created);
        assert_eq!(create(root.path(), &name("db2")), Ok((id, false)));
        create(root.path(), &name("a1")).expect("create");
        // A directory that is not a database, and a name that is not valid: ignored.
        fs::create_dir_all(root.path().join("half-made")).expect("mkdir");
        fs::create_dir_all(root.path().join("Not_Valid")).expect("mkdir");
        assert_eq!(list(root.path()), Ok(vec![name("a1"), name("db2")]));
        assert_eq!(read_id(root.path(), &name("db2")), Ok(Some(id)));
        assert_eq!(drop_offline(root.path(), &name("db2")), Ok(true));
        assert_eq!(drop_offline(root.path(), &name("db2")), Ok(false));
        assert!(!root.path().join("db2").exists());
        assert_eq!(list(root.path()), Ok(vec![name("a1")]));
    }

    #[test]
    fn an_offline_drop_is_refused_while_the_store_is_open() {
        let root = tempfile::tempdir().expect("temp dir");
        create(root.path(), &name("busy")).expect("create");
        let held = Database::open(
            database_dir(root.path(), &name("busy")).join(STORE_DIR),
            Options::default(),
        )
        .expect("open");
        let err = drop_offline(root.path(), &name("busy")).expect_err("locked");
        assert!(err.contains("running server"), "{err}");
        assert_eq!(list(root.path()), Ok(vec![name("busy")]), "nothing deleted");
        held.close().expect("close");
    }
}
