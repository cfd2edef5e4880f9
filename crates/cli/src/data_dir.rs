//! Database directories as every command sees them: what counts as a database, opening one
//! (creating it only where a command may, and refusing a locked one with one line), and the
//! checks and the temporary-name-then-rename dance that keep a new target whole or absent.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use tuplekv_engine::{Database, Error, Options};

/// The lock file every open database holds (the engine's `durable` module): its presence
/// alone marks a database that was opened but never wrote a file of its own yet.
const LOCK_FILE: &str = "LOCK";

/// Whether a command may create the database when the directory is missing or empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Create {
    /// Reads, backups: a missing or empty directory is an error.
    No,
    /// Writes: a missing or empty directory becomes a new database.
    IfMissing,
}

/// What a path holds, as far as these commands care.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DirState {
    /// Nothing is there.
    Missing,
    /// An empty directory.
    Empty,
    /// A database directory; its checkpoint and log files, sorted (none if only its lock
    /// file is there).
    Database(Vec<String>),
}

/// Whether `name` is one of the files of a database directory (a checkpoint or a log
/// segment): what restore copies, and what makes a directory a database.
fn is_database_file(name: &str) -> bool {
    (name.starts_with("checkpoint-") && name.ends_with(".ckpt"))
        || (name.starts_with("wal-") && name.ends_with(".log"))
}

/// Looks at `dir`; an error naming it if it is a file, is a directory that is not a database
/// (so that a typo never scatters a database into an unrelated directory), or cannot be read.
pub(crate) fn dir_state(dir: &Path) -> Result<DirState, String> {
    let shown = dir.display();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(DirState::Missing),
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            return Err(format!("{shown} is a file, not a database directory"));
        }
        Err(e) => return Err(format!("cannot read {shown}: {e}")),
    };
    let (mut empty, mut locked, mut files) = (true, false, Vec::new());
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {shown}: {e}"))?;
        empty = false;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && is_database_file(&name) {
            files.push(name);
        } else if is_file && name == LOCK_FILE {
            locked = true;
        }
    }
    if empty {
        return Ok(DirState::Empty);
    }
    if files.is_empty() && !locked {
        return Err(format!(
            "{shown} is not a tuplekv database (it holds no checkpoint, log or LOCK file)"
        ));
    }
    files.sort();
    Ok(DirState::Database(files))
}

/// The checkpoint and log files of the database in `dir`, sorted; an error naming `dir` if it
/// is missing, not a directory, or holds none (then there is nothing to copy).
pub(crate) fn database_files(dir: &Path) -> Result<Vec<String>, String> {
    match dir_state(dir)? {
        DirState::Database(files) if !files.is_empty() => Ok(files),
        state => Err(not_a_database(dir, &state)),
    }
}

/// The one-line refusal of a path that holds no database.
fn not_a_database(dir: &Path, state: &DirState) -> String {
    let shown = dir.display();
    match state {
        DirState::Missing => format!("no database at {shown}: the directory does not exist"),
        DirState::Empty => format!("{shown} is not a tuplekv database: the directory is empty"),
        DirState::Database(_) => {
            format!("{shown} is not a tuplekv database (it holds no checkpoint or log file)")
        }
    }
}

/// Opens the database in `dir`, after checking that it is one (or, with
/// [`Create::IfMissing`], that it is missing or empty: then it becomes one). A database
/// another process holds is refused with one line.
pub(crate) fn open_database(dir: &Path, create: Create) -> Result<Database, String> {
    match (dir_state(dir)?, create) {
        (DirState::Database(_), _) | (_, Create::IfMissing) => {}
        (state, Create::No) => return Err(not_a_database(dir, &state)),
    }
    Database::open(dir, Options::default()).map_err(|e| match e {
        Error::Locked { .. } => format!(
            "{} is open in another process (a running `tuplekv serve`?): stop it, or use --url",
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
