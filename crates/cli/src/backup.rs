//! `tuplekv backup (--path DIR | --url URL) TARGET`: a consistent copy of a database into a
//! new directory. With `--path`, through
//! [`Database::backup`](tuplekv_engine::Database::backup): one snapshot, synced, renamed
//! into place once whole; the directory must not be open in another process (its lock says
//! so). With `--url`, from a running server (which holds its directory's lock): every entry of
//! one server-held snapshot, read in batches and written with [`create_database`] the same
//! way. Deadlines come over only from a tuplekv server (Deno's KV Connect has no field for
//! them), and a server without tuplekv's snapshot extension can serve only one batch.
//!
//! A server may hand out versionstamps this engine never makes (last two bytes not zero:
//! `tuplekv serve --etcd` after a versionstamped key, or a Deno Deploy style store): then every
//! stamp of the copy is renumbered `1, 2, 3, …` in the order of the server's stamps, the
//! snapshot's own last, and the command says so. Order and equality are kept, the values are
//! not: checks a client made with the old stamps fail against the copy.

use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args};
use tuplekv_engine::durable::create_database;
use tuplekv_engine::limits::{KEY_SIZE_MAX_READ, LIST_BATCH_SIZE_MAX};
use tuplekv_engine::{ByteRange, Entry, ReadView, Store, Versionstamp};
use tuplekv_remote::RemoteStore;

use crate::data_dir::{Create, check_new_target, open_database};
use crate::progress;

/// Arguments of `tuplekv backup`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("source").required(true).args(["path", "url"])))]
pub(crate) struct BackupArgs {
    /// The database directory to back up.
    #[arg(long)]
    path: Option<PathBuf>,
    /// The KV Connect server to back up (`http://host:port`), instead of a directory.
    #[arg(long)]
    url: Option<String>,
    /// The server's access token (with `--url`).
    #[arg(
        long,
        env = "TUPLEKV_ACCESS_TOKEN",
        hide_env_values = true,
        requires = "url"
    )]
    access_token: Option<String>,
    /// The new directory to write the backup into (missing, or an empty directory).
    target: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Writes the backup and prints where and at which versionstamp.
pub(crate) fn run(args: BackupArgs) -> Result<(), String> {
    check_new_target(&args.target)?;
    let (source, at) = match (&args.path, &args.url) {
        (Some(dir), _) => (dir.display().to_string(), backup_dir(dir, &args.target)?),
        (None, Some(url)) => {
            let token = args.access_token.as_deref().ok_or(
                "an access token is required with --url: pass --access-token or set \
                 TUPLEKV_ACCESS_TOKEN",
            )?;
            (url.clone(), backup_url(url, token, &args.target)?)
        }
        (None, None) => return Err("give --path DIR or --url URL".into()),
    };
    if args.json {
        let line = serde_json::json!({
            "backup": args.target.display().to_string(),
            "versionstamp": at.to_string(),
        });
        println!("{line}");
    } else {
        println!(
            "backed up {source} at versionstamp {at} to {}",
            args.target.display()
        );
    }
    Ok(())
}

/// Backs up the database in `dir` with [`tuplekv_engine::Database::backup`].
fn backup_dir(dir: &Path, target: &Path) -> Result<Versionstamp, String> {
    let db = open_database(dir, Create::No)?;
    let spinner = progress::spinner(&format!("backing up {}", dir.display()));
    let written = db.backup(target);
    spinner.finish_and_clear();
    let at = written.map_err(|e| format!("backup failed: {e}"))?;
    db.close()
        .map_err(|e| format!("closing {} failed: {e}", dir.display()))?;
    Ok(at)
}

/// Backs up the server at `url`: one snapshot, read in batches.
fn backup_url(url: &str, token: &str, target: &Path) -> Result<Versionstamp, String> {
    let store = RemoteStore::connect_with(url, token, crate::target::remote_options())
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    let spinner = progress::spinner(&format!("reading {url}"));
    let read = read_all(&store);
    spinner.finish_and_clear();
    let (mut entries, mut at) = read.map_err(|e| format!("reading {url} failed: {e}"))?;
    if renumber(&mut entries, &mut at) {
        eprintln!(
            "note: {url} hands out versionstamps this engine does not make; the copy's are \
             renumbered in the same order"
        );
    }
    create_database(target, at, entries).map_err(|e| format!("backup failed: {e}"))?;
    Ok(at)
}

/// Whether `stamp` is one this engine makes: a version, then two zero bytes.
fn is_engine_stamp(stamp: Versionstamp) -> bool {
    stamp == Versionstamp::from_version(stamp.version())
}

/// When a stamp of `entries` or `at` is not one this engine makes, renumbers all of them to
/// `1, 2, 3, …` in their order (equal stamps stay equal; `at`, the snapshot's, is at least
/// every entry's) and returns `true`; otherwise changes nothing.
fn renumber(entries: &mut [Entry], at: &mut Versionstamp) -> bool {
    if is_engine_stamp(*at) && entries.iter().all(|e| is_engine_stamp(e.versionstamp)) {
        return false;
    }
    let mut stamps: Vec<Versionstamp> = entries.iter().map(|e| e.versionstamp).collect();
    stamps.push(*at);
    stamps.sort_unstable();
    stamps.dedup();
    let new = |old: Versionstamp| {
        let rank = stamps.binary_search(&old).unwrap_or_else(|i| i);
        Versionstamp::from_version(rank as u64 + 1)
    };
    for e in entries.iter_mut() {
        e.versionstamp = new(e.versionstamp);
    }
    // The snapshot read every entry, so its stamp is the largest; never below one anyway.
    *at = new(*at).max(Versionstamp::from_version(stamps.len() as u64));
    true
}

/// Every entry of one snapshot of `store`, in key order, and the snapshot's versionstamp.
fn read_all<S: Store>(store: &S) -> Result<(Vec<Entry>, Versionstamp), tuplekv_engine::Error> {
    let snapshot = store.snapshot();
    let mut range = ByteRange {
        start: Vec::new(),
        end: vec![0xff; KEY_SIZE_MAX_READ],
    };
    let mut entries = Vec::new();
    loop {
        let batch = snapshot.scan(&range, false, LIST_BATCH_SIZE_MAX)?;
        let Some(last) = batch.last() else { break };
        range.start = last.key.as_slice().to_vec();
        range.start.push(0);
        let full = batch.len() == LIST_BATCH_SIZE_MAX;
        entries.extend(batch);
        if !full {
            break;
        }
    }
    Ok((entries, S::snapshot_versionstamp(&snapshot)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuplekv_engine::{KeyBytes, Value};

    fn entry(stamp: [u8; 10]) -> Entry {
        Entry {
            key: KeyBytes::from(vec![1u8]),
            value: Value::U64(1),
            versionstamp: Versionstamp::from_bytes(stamp),
            expires_at: None,
        }
    }

    #[test]
    fn engine_stamps_are_kept_and_foreign_ones_renumbered_in_order() {
        let plain = |v: u8| [0, 0, 0, 0, 0, 0, 0, v, 0, 0];
        let mut entries = vec![entry(plain(3)), entry(plain(9))];
        let mut at = Versionstamp::from_bytes(plain(12));
        assert!(!renumber(&mut entries, &mut at));
        assert_eq!(at, Versionstamp::from_version(12));
        assert_eq!(entries[1].versionstamp, Versionstamp::from_version(9));

        // A claimed stamp between 5 and 6, two entries of one commit, the snapshot at 9.
        let claimed = [0, 0, 0, 0, 0, 0, 0, 5, 0, 1];
        let mut entries = vec![
            entry(plain(7)),
            entry(claimed),
            entry(plain(2)),
            entry(claimed),
        ];
        let mut at = Versionstamp::from_bytes(plain(9));
        assert!(renumber(&mut entries, &mut at));
        let got: Vec<u64> = entries.iter().map(|e| e.versionstamp.version()).collect();
        assert_eq!(got, [3, 2, 1, 2], "order and equality kept");
        assert!(entries.iter().all(|e| is_engine_stamp(e.versionstamp)));
        assert_eq!(at, Versionstamp::from_version(4));
    }
}
