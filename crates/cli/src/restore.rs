//! `tuplekv restore BACKUP --path DIR`: makes a database directory from a backup. Copies the
//! backup's files into a temporary directory beside `DIR` (synced), opens it there (recovery
//! checks every checksum), and renames it into place: `DIR` must be missing or empty, so a
//! restore never writes over a database, and a failure leaves nothing under `DIR`. The backup
//! itself is only read.

use std::fs;
use std::path::{Path, PathBuf};

use clap::Args;
use tuplekv_engine::durable::fs::{FileSystem, OsFs};
use tuplekv_engine::{Database, Options};

use crate::data_dir::{Staging, check_new_target, database_files};
use crate::progress;

/// Arguments of `tuplekv restore`.
#[derive(Debug, Args)]
pub(crate) struct RestoreArgs {
    /// The backup directory (made by `tuplekv backup`, or a closed database's directory).
    backup: PathBuf,
    /// The database directory to create (missing, or an empty directory).
    #[arg(long)]
    path: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Restores and prints how many keys the new database holds.
pub(crate) fn run(args: RestoreArgs) -> Result<(), String> {
    let files = database_files(&args.backup)?;
    check_new_target(&args.path)?;
    // A backup that is some process's open database is changing under us: refuse it. Its
    // lock is only taken if it has a lock file, so a backup is never written to.
    let _held = lock_if_present(&args.backup)?;
    let staging = Staging::new(&args.path, "restore")?;
    let bar = progress::bar(files.len() as u64, "copying");
    for name in &files {
        copy_synced(&args.backup.join(name), &staging.path().join(name))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let spinner = progress::spinner("checking the restored database");
    let checked = check_opens(staging.path());
    spinner.finish_and_clear();
    let (keys, at) = checked?;
    staging.publish()?;
    if args.json {
        let line = serde_json::json!({
            "restored": args.path.display().to_string(),
            "keys": keys,
            "versionstamp": at,
        });
        println!("{line}");
    } else {
        println!(
            "restored {} into {}: {keys} keys, last versionstamp {at}",
            args.backup.display(),
            args.path.display()
        );
    }
    Ok(())
}

/// Takes `dir`'s database lock if it has a lock file; refuses a directory open elsewhere.
fn lock_if_present(dir: &Path) -> Result<Option<Box<dyn Send + Sync>>, String> {
    if !dir.join("LOCK").is_file() {
        return Ok(None);
    }
    OsFs.lock_dir(dir).map(Some).map_err(|e| {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            format!(
                "{} is a database open in another process: back it up with `tuplekv backup` \
                 and restore that",
                dir.display()
            )
        } else {
            format!("cannot lock {}: {e}", dir.display())
        }
    })
}

/// Copies `from` to `to` and syncs the copy.
fn copy_synced(from: &Path, to: &Path) -> Result<(), String> {
    fs::copy(from, to)
        .and_then(|_| fs::File::open(to)?.sync_all())
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

/// Opens the copy in `dir` (recovery reads and checks every file) and returns its number of
/// keys and last versionstamp.
fn check_opens(dir: &Path) -> Result<(usize, String), String> {
    let db = Database::open(dir, Options::default())
        .map_err(|e| format!("the backup does not open as a database: {e}"))?;
    let keys = db.stats().keys;
    let at = db.current_versionstamp().to_string();
    db.close()
        .map_err(|e| format!("closing the restored database failed: {e}"))?;
    Ok((keys, at))
}
