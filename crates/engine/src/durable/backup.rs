//! New database directories written whole: [`Database::backup`](crate::Database::backup) (a
//! copy of a live database at one snapshot) and [`create_database`] (a directory built from
//! entries, for importers). Both write one checkpoint into a temporary directory beside the
//! target, sync it, and rename it into place, so the target is either absent (or the empty
//! directory it was) or a whole database: never half a copy. Knows nothing of the in-memory
//! store: it is fed an iterator of live entries.
//!
//! Why copying a live directory by hand is not the same is in the [module docs](super).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::fs::FileSystem;
use super::{checkpoint, io_error};
use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::limits::{KEY_SIZE_MAX_WRITE, VALUE_SIZE_MAX, VERSION_MAX};
use crate::store::Entry;
use crate::value::Versionstamp;
use crate::version::Version;

/// Makes each temporary directory's name unique within the process.
static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes a new database directory at `target` holding `entries` (the live entries at
/// `version`), through a temporary directory renamed into place. `target` may be missing
/// (its parents are created) or an empty directory; anything else is refused before any work.
pub(crate) fn write_dir(
    fs: &dyn FileSystem,
    target: &Path,
    version: u64,
    entries: impl Iterator<Item = (KeyBytes, Version)>,
) -> Result<(), Error> {
    check_target(target)?;
    let parent = parent_of(target);
    fs.create_dir_all(&parent)
        .map_err(|e| io_error("creating directory", &parent, &e))?;
    let tmp = tmp_path(&parent, target);
    let written = write_tmp(fs, &tmp, version, entries).and_then(|()| {
        fs.rename(&tmp, target)
            .map_err(|e| rename_error(target, &e))
            .and_then(|()| {
                fs.sync_dir(&parent)
                    .map_err(|e| io_error("syncing directory", &parent, &e))
            })
    });
    if written.is_err()
        && tmp.exists()
        && let Err(e) = std::fs::remove_dir_all(&tmp)
    {
        log::warn!("tuplekv: removing {}: {e}", tmp.display());
    }
    written
}

/// Creates the temporary directory and writes the checkpoint into it (synced, with the
/// directory).
fn write_tmp(
    fs: &dyn FileSystem,
    tmp: &Path,
    version: u64,
    entries: impl Iterator<Item = (KeyBytes, Version)>,
) -> Result<(), Error> {
    std::fs::create_dir(tmp).map_err(|e| io_error("creating directory", tmp, &e))?;
    checkpoint::write(fs, tmp, version, entries)
}

/// Refuses a `target` that exists and is not an empty directory.
fn check_target(target: &Path) -> Result<(), Error> {
    match std::fs::read_dir(target) {
        Ok(mut names) => {
            if names.next().is_some() {
                return Err(Error::TargetExists {
                    path: target.to_path_buf(),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) if target.exists() => Err(Error::TargetExists {
            path: target.to_path_buf(),
        }),
        Err(e) => Err(io_error("reading", target, &e)),
    }
}

/// A rename onto the target fails with "directory not empty" when something appeared there
/// meanwhile: that is the refusal, not an I/O failure.
fn rename_error(target: &Path, e: &std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::DirectoryNotEmpty || target.is_file() {
        Error::TargetExists {
            path: target.to_path_buf(),
        }
    } else {
        io_error("renaming a new database to", target, e)
    }
}

/// The directory `target` is in (`.` for a bare name).
fn parent_of(target: &Path) -> PathBuf {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A fresh hidden name beside `target`: `.<name>.tmp-<pid>-<nanos>-<n>`.
fn tmp_path(parent: &Path, target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map_or_else(|| "db".into(), |n| n.to_string_lossy().into_owned());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    parent.join(format!(".{name}.tmp-{}-{nanos}-{n}", std::process::id()))
}

/// Writes a new database directory at `target` holding exactly `entries`, whose new commits
/// number above `last`: how an importer (`tuplekv import-deno`, a load of a dump) moves data
/// in with its versionstamps and deadlines kept. The directory then opens with
/// [`Database::open`](crate::Database::open).
///
/// Written like a backup: one checkpoint, synced, in a temporary directory beside `target`
/// that is renamed into place, so a failure leaves no partial database under `target`.
/// Entries already expired are dropped.
///
/// ```
/// use tuplekv_engine::{Database, Entry, KeyBytes, Options, Value, Versionstamp, key};
/// use tuplekv_engine::durable::create_database;
///
/// let dir = tempfile_dir();
/// let entry = Entry {
///     key: KeyBytes::from(tuplekv_engine::codec::encode_key(&key!["users", 1]).as_slice()),
///     value: Value::from(b"Ada"),
///     versionstamp: Versionstamp::from_version(7),
///     expires_at: None,
/// };
/// create_database(&dir, Versionstamp::from_version(9), [entry])?;
/// let db = Database::open(&dir, Options::default())?;
/// let got = db.get(&key!["users", 1])?.expect("imported");
/// assert_eq!(got.versionstamp, Versionstamp::from_version(7));
/// assert!(db.set(&key!["users", 2], b"Grace")? > Versionstamp::from_version(9));
/// # db.close()?;
/// # std::fs::remove_dir_all(&dir).ok();
/// # fn tempfile_dir() -> std::path::PathBuf {
/// #     std::env::temp_dir().join(format!("tuplekv-create-doc-{}", std::process::id()))
/// # }
/// # Ok::<(), tuplekv_engine::Error>(())
/// ```
///
/// # Errors
/// [`Error::TargetExists`] if `target` exists and is not an empty directory;
/// [`Error::InvalidEntry`] for an entry out of key order (keys must be strictly ascending),
/// with a versionstamp of zero, above `last`, or not one this engine makes (its last two bytes
/// non-zero), or a `last` above [`VERSION_MAX`]; [`Error::KeyTooLargeForWrite`],
/// [`Error::EmptyKey`] or [`Error::ValueTooLarge`] for an entry no commit could write;
/// [`Error::Io`] for I/O errors. Nothing is left under `target` then.
pub fn create_database(
    target: impl AsRef<Path>,
    last: Versionstamp,
    entries: impl IntoIterator<Item = Entry>,
) -> Result<(), Error> {
    let version = last.version();
    if last != Versionstamp::from_version(version) || version > VERSION_MAX {
        return Err(Error::InvalidEntry {
            index: 0,
            reason: format!("the last versionstamp {last} is not one this engine makes"),
        });
    }
    // Validated up front: the checkpoint writer consumes an iterator and cannot fail on an
    // entry halfway; validating first also keeps a refused import from writing anything.
    let mut checked: Vec<(KeyBytes, Version)> = Vec::new();
    for (index, entry) in entries.into_iter().enumerate() {
        check_entry(
            index as u64,
            &entry,
            checked.last().map(|(k, _)| k),
            version,
        )?;
        let Entry {
            key,
            value,
            versionstamp,
            expires_at,
        } = entry;
        let v = Version {
            version: versionstamp.version(),
            value: Some(value),
            expires_at,
        };
        checked.push((key, v));
    }
    let now = crate::version::now_ms();
    let live = checked
        .into_iter()
        .filter(move |(_, v)| v.expires_at.is_none_or(|d| d > now));
    write_dir(&super::fs::OsFs, target.as_ref(), version, live)
}

/// Checks entry number `index` of an import against the one before it (`previous`) and the
/// checkpoint's `version`.
fn check_entry(
    index: u64,
    entry: &Entry,
    previous: Option<&KeyBytes>,
    version: u64,
) -> Result<(), Error> {
    let invalid = |reason: String| Error::InvalidEntry { index, reason };
    let key = entry.key.as_slice();
    if key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if key.len() > KEY_SIZE_MAX_WRITE {
        return Err(Error::KeyTooLargeForWrite { size: key.len() });
    }
    if entry.value.size() > VALUE_SIZE_MAX {
        return Err(Error::ValueTooLarge {
            size: entry.value.size(),
        });
    }
    if previous.is_some_and(|p| p.as_slice() >= key) {
        return Err(invalid("keys are not in strictly ascending order".into()));
    }
    let vs = entry.versionstamp;
    let v = vs.version();
    if vs != Versionstamp::from_version(v) {
        return Err(invalid(format!(
            "versionstamp {vs} is not one this engine makes (its last two bytes are not zero)"
        )));
    }
    if v == 0 {
        return Err(invalid("versionstamp is zero".into()));
    }
    if v > version {
        return Err(invalid(format!(
            "versionstamp {vs} is above the last one, {}",
            Versionstamp::from_version(version)
        )));
    }
    Ok(())
}
