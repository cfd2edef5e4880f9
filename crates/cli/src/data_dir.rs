//! Database directories as the backup, restore and import commands see them: what counts as
//! a database, opening one that must exist (never creating it by accident), and the checks and
//! the temporary-name-then-rename dance that keep a target whole or absent.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use tuplekv_engine::{Database, Error, Options};

/// Whether `name` is one of the files of a database directory (a checkpoint or a log
/// segment): what restore copies, and what makes a directory a database.
pub(crate) fn is_database_file(name: &str) -> bool {
    (name.starts_with("checkpoint-") && name.ends_with(".ckpt"))
        || (name.starts_with("wal-") && name.ends_with(".log"))
}

/// The database files in `dir`, sorted; an error naming `dir` if it is missing, not a
/// directory, or holds none (then it is not a database).
pub(crate) fn database_files(dir: &Path) -> Result<Vec<String>, String> {
    let entries = fs::read_dir(dir).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => format!("no database at {}: it does not exist", dir.display()),
        io::ErrorKind::NotADirectory => {
            format!(
                "{} is not a database directory: it is a file",
                dir.display()
            )
        }
        _ => format!("cannot read {}: {e}", dir.display()),
    })?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_database_file(&name) && entry.file_type().is_ok_and(|t| t.is_file()) {
            names.push(name);
        }
    }
    if names.is_empty() {
        return Err(format!(
            "{} is not a tuplekv database (it holds no checkpoint or log file)",
            dir.display()
        ));
    }
    names.sort();
    Ok(names)
}

/// Opens the existing database at `dir`; refuses a directory that is not one rather than
/// creating a database there.
pub(crate) fn open_existing(dir: &Path) -> Result<Database, String> {
    database_files(dir)?;
    Database::open(dir, Options::default()).map_err(|e| match e {
        Error::Locked { .. } => format!(
            "the database at {} is open in another process (a running `tuplekv serve`?)",
            dir.display()
        ),
        e => format!("cannot open the database at {}: {e}", dir.display()),
    })
}

/// Refuses a `target` that exists and is not an empty directory: these commands never write
/// over anything.
pub(crate) fn check_new_target(target: &Path) -> Result<(), String> {
    let refuse = || {
        format!(
            "{} already exists and is not an empty directory: refusing to write over it",
            target.display()
        )
    };
    match fs::read_dir(target) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(refuse()),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(_) if target.exists() => Err(refuse()),
        Err(e) => Err(format!("cannot read {}: {e}", target.display())),
    }
}

/// A directory beside `target` that becomes `target` by [`Staging::publish`], or is removed
/// when dropped unpublished: a failure never leaves anything under `target`'s name.
pub(crate) struct Staging {
    tmp: PathBuf,
    target: PathBuf,
    published: bool,
}

impl Staging {
    /// Creates the hidden temporary directory `.<name>.<what>-<pid>` beside `target` (and
    /// `target`'s missing parents).
    pub(crate) fn new(target: &Path, what: &str) -> Result<Staging, String> {
        let parent = parent_of(target);
        fs::create_dir_all(&parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        let name = target
            .file_name()
            .map_or_else(|| "db".into(), |n| n.to_string_lossy().into_owned());
        let tmp = parent.join(format!(".{name}.{what}-{}", std::process::id()));
        // Left by an earlier run of this process id that was killed: ours to replace.
        if tmp.exists() {
            fs::remove_dir_all(&tmp)
                .map_err(|e| format!("cannot remove {}: {e}", tmp.display()))?;
        }
        fs::create_dir(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        Ok(Staging {
            tmp,
            target: target.to_path_buf(),
            published: false,
        })
    }

    /// The temporary directory.
    pub(crate) fn path(&self) -> &Path {
        &self.tmp
    }

    /// Syncs the temporary directory, renames it to the target and syncs the parent.
    pub(crate) fn publish(mut self) -> Result<(), String> {
        sync_dir(&self.tmp)?;
        fs::rename(&self.tmp, &self.target).map_err(|e| {
            if e.kind() == io::ErrorKind::DirectoryNotEmpty || self.target.is_file() {
                format!(
                    "{} appeared meanwhile and is not empty: refusing to write over it",
                    self.target.display()
                )
            } else {
                format!(
                    "cannot rename {} to {}: {e}",
                    self.tmp.display(),
                    self.target.display()
                )
            }
        })?;
        self.published = true;
        sync_dir(&parent_of(&self.target))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.published
            && let Err(e) = fs::remove_dir_all(&self.tmp)
        {
            eprintln!("tuplekv: could not remove {}: {e}", self.tmp.display());
        }
    }
}

/// Makes `dir`'s entries durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), String> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("cannot sync {}: {e}", dir.display()))
}

/// The directory `target` is in (`.` for a bare name).
fn parent_of(target: &Path) -> PathBuf {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}
