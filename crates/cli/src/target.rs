//! Where a data command works: `--path DIR` (a durable database opened in this process) or
//! `--url URL` (a server, through [`RemoteStore`]), and the one-line errors for a directory
//! that is missing, is not a database, or is held by another process.

use std::path::{Path, PathBuf};

use clap::Args;
use tuplekv_engine::{Database, Error, Options};
use tuplekv_remote::RemoteStore;

/// The files that mark a directory as a tuplekv database (see the engine's `durable`
/// module): its lock file, log segments and checkpoints.
const DATABASE_FILE_PREFIXES: [&str; 3] = ["LOCK", "wal-", "checkpoint-"];

/// `--path DIR` or `--url URL`, shared by the data commands.
#[derive(Debug, Args)]
pub(crate) struct TargetArgs {
    /// Directory of a durable tuplekv database.
    #[arg(long, required_unless_present = "url", conflicts_with = "url")]
    pub(crate) path: Option<PathBuf>,
    /// URL of a tuplekv (or other KV Connect) server, e.g. `http://127.0.0.1:4512`.
    #[arg(long)]
    pub(crate) url: Option<String>,
    /// The server's access token (with `--url`).
    #[arg(long, env = "TUPLEKV_ACCESS_TOKEN", hide_env_values = true)]
    pub(crate) access_token: Option<String>,
}

/// Whether a command may create the database when the directory is missing or empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Create {
    /// Reads: a missing directory is an error.
    No,
    /// Writes: a missing or empty directory becomes a new database.
    IfMissing,
}

/// An opened store.
pub(crate) enum Opened {
    /// A durable database in a directory.
    Local(Database),
    /// A server.
    Remote(RemoteStore),
}

/// Runs `$body` with `$s` bound to the opened store, whichever kind it is (the commands are
/// generic over [`tuplekv_engine::Store`]).
macro_rules! with_store {
    ($opened:expr, |$s:ident| $body:expr) => {
        match $opened {
            $crate::target::Opened::Local($s) => $body,
            $crate::target::Opened::Remote($s) => $body,
        }
    };
}
pub(crate) use with_store;

impl Opened {
    /// Closes a local database (its final sync can fail); a remote store just disconnects.
    pub(crate) fn close(self) -> Result<(), String> {
        match self {
            Opened::Local(db) => db
                .close()
                .map_err(|e| format!("closing the database failed: {e}")),
            Opened::Remote(_) => Ok(()),
        }
    }
}

impl TargetArgs {
    /// Opens the store these arguments name.
    pub(crate) fn open(&self, create: Create) -> Result<Opened, String> {
        match (&self.path, &self.url) {
            (Some(dir), None) => open_dir(dir, create).map(Opened::Local),
            (None, Some(url)) => {
                let token = self.access_token.as_deref().ok_or(
                    "--url needs an access token: pass --access-token or set TUPLEKV_ACCESS_TOKEN",
                )?;
                RemoteStore::connect(url, token)
                    .map(Opened::Remote)
                    .map_err(|e| format!("cannot connect to {url}: {e}"))
            }
            _ => Err("pass exactly one of --path DIR and --url URL".into()),
        }
    }

    /// `--path`, for the commands that only work on a directory.
    pub(crate) fn require_path(&self, command: &str) -> Result<&Path, String> {
        match (&self.path, &self.url) {
            (Some(dir), None) => Ok(dir),
            _ => Err(format!(
                "`{command}` works on a data directory: pass --path DIR"
            )),
        }
    }
}

/// Opens the database in `dir`, after checking that it is one (or, with
/// [`Create::IfMissing`], that it is missing or empty).
pub(crate) fn open_dir(dir: &Path, create: Create) -> Result<Database, String> {
    check_database_dir(dir, create)?;
    Database::open(dir, Options::default()).map_err(|e| match e {
        Error::Locked { .. } => format!(
            "{} is in use by another process (a running `tuplekv serve`?); stop it or use --url",
            dir.display()
        ),
        e => format!("cannot open the database at {}: {e}", dir.display()),
    })
}

/// Refuses a path that is not a database directory, so that a typo never scatters a new
/// database into an unrelated directory.
pub(crate) fn check_database_dir(dir: &Path, create: Create) -> Result<(), String> {
    let shown = dir.display();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return match create {
                Create::IfMissing => Ok(()),
                Create::No => Err(format!(
                    "no database at {shown}: the directory does not exist"
                )),
            };
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(format!("{shown} is a file, not a database directory"));
        }
        Err(e) => return Err(format!("cannot read {shown}: {e}")),
    };
    let mut empty = true;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {shown}: {e}"))?;
        empty = false;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if DATABASE_FILE_PREFIXES.iter().any(|p| name.starts_with(p)) {
            return Ok(());
        }
    }
    match (empty, create) {
        (true, Create::IfMissing) => Ok(()),
        (true, Create::No) => Err(format!("no database at {shown}: the directory is empty")),
        (false, _) => Err(format!(
            "{shown} is not a tuplekv database (it holds no LOCK, wal-* or checkpoint-* file)"
        )),
    }
}
