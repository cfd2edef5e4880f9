//! `tuplekv backup --path DIR TARGET`: a consistent copy of a database into a new directory,
//! through [`Database::backup`](tuplekv_engine::Database::backup): one snapshot, synced,
//! renamed into place once whole. The database must not be open in another process (the
//! directory lock says so); a running server's application can call `Database::backup`
//! itself.

use std::path::PathBuf;

use clap::Args;

use crate::data_dir::{check_new_target, open_existing};
use crate::progress;

/// Arguments of `tuplekv backup`.
#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    /// The database directory to back up.
    #[arg(long)]
    path: PathBuf,
    /// The new directory to write the backup into (missing, or an empty directory).
    target: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Writes the backup and prints where and at which versionstamp.
pub(crate) fn run(args: BackupArgs) -> Result<(), String> {
    check_new_target(&args.target)?;
    let db = open_existing(&args.path)?;
    let spinner = progress::spinner(&format!("backing up {}", args.path.display()));
    let written = db.backup(&args.target);
    spinner.finish_and_clear();
    let at = written.map_err(|e| format!("backup failed: {e}"))?;
    db.close()
        .map_err(|e| format!("closing {} failed: {e}", args.path.display()))?;
    if args.json {
        let line = serde_json::json!({
            "backup": args.target.display().to_string(),
            "versionstamp": at.to_string(),
        });
        println!("{line}");
    } else {
        println!(
            "backed up {} at versionstamp {at} to {}",
            args.path.display(),
            args.target.display()
        );
    }
    Ok(())
}
