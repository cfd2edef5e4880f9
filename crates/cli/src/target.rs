//! Where a data command works: `--path DIR` (a durable database opened in this process,
//! through `data_dir.rs`, which owns what counts as one) or `--url URL` (a server, through
//! [`RemoteStore`]).

use std::path::{Path, PathBuf};

use clap::Args;
use tuplekv_engine::Database;
use tuplekv_remote::{RemoteOptions, RemoteStore};

use crate::data_dir::{Create, open_database};

/// How the CLI connects to a server: the defaults, trusting the extra CA certificates of
/// `DENO_CERT` (Deno's variable, so one setting serves the app and the CLI) for `https://`.
pub(crate) fn remote_options() -> RemoteOptions {
    RemoteOptions::default().with_deno_cert_env()
}

/// `--path DIR` or `--url URL`, shared by the data commands.
#[derive(Debug, Args)]
pub(crate) struct TargetArgs {
    /// Directory of a durable tuplekv database.
    #[arg(long, required_unless_present = "url", conflicts_with = "url")]
    pub(crate) path: Option<PathBuf>,
    /// URL of a tuplekv (or other KV Connect) server, e.g. `http://127.0.0.1:4512`.
    #[arg(long)]
    pub(crate) url: Option<String>,
    /// The server's access token (with `--url`); without it, `TUPLEKV_ACCESS_TOKEN`, then
    /// `DENO_KV_ACCESS_TOKEN` (what a Deno app already has).
    #[arg(long, env = "TUPLEKV_ACCESS_TOKEN", hide_env_values = true)]
    pub(crate) access_token: Option<String>,
}

/// The environment variable Deno's KV Connect client reads its token from, read when neither
/// `--access-token` nor `TUPLEKV_ACCESS_TOKEN` gives one.
const DENO_TOKEN_ENV: &str = "DENO_KV_ACCESS_TOKEN";

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
            (Some(dir), None) => open_database(dir, create).map(Opened::Local),
            (None, Some(url)) => {
                let from_deno = std::env::var(DENO_TOKEN_ENV).ok().filter(|t| !t.is_empty());
                // An empty token (`TUPLEKV_ACCESS_TOKEN=`) counts as none.
                let given = self.access_token.clone().filter(|t| !t.is_empty());
                let token = given.or(from_deno).ok_or(
                    "--url needs an access token: pass --access-token or set \
                     TUPLEKV_ACCESS_TOKEN (or DENO_KV_ACCESS_TOKEN)",
                )?;
                RemoteStore::connect_with(url, &token, remote_options())
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
