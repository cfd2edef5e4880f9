//! Helpers for tests of the durable engine ([`Database::open`]): the files of a database
//! directory, byte surgery on them, what a crash leaves behind, options that inject faults,
//! and a reopen that checks nothing changed. The engine's `durable_*` test files and the
//! recovery fuzz body share them.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tuplekv_engine::durable::fs::{Faults, FaultyFs};
use tuplekv_engine::{Database, Durability, Options, Versionstamp, key};

use crate::db::{dump, options};

/// Buffered durability whose background sync never comes during a test: only an explicit
/// [`Database::sync`], a checkpoint or closing makes commits durable.
pub const BUFFERED: Durability = Durability::Buffered {
    interval: Duration::from_secs(3600),
};

/// [`options`] with `durability`, on a [`FaultyFs`] driven by `faults`.
pub fn faulty(faults: &Arc<Faults>, durability: Durability) -> Options {
    Options {
        fs: Arc::new(FaultyFs::new(Arc::clone(faults))),
        durability,
        ..options()
    }
}

/// Closes `db`, opens `dir` again with `opts`, checks that it holds exactly what `db` held
/// (keys, values, versionstamps) and returns it.
///
/// # Panics
/// If closing or opening fails, or the reopened database differs.
pub fn reopen_unchanged(db: Database, dir: &Path, opts: Options) -> Database {
    let before = dump(&db);
    db.close().expect("the database closes");
    let db = Database::open(dir, opts).expect("the database opens again");
    assert_eq!(dump(&db), before);
    db
}

/// The files of `dir` with extension `ext` (`log`, `ckpt`, `tmp`), sorted by name, which for
/// segments and checkpoints is by version.
///
/// # Panics
/// If `dir` cannot be listed.
pub fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .expect("the database directory can be listed")
        .map(|e| e.expect("a directory entry can be read").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// The newest log segment of `dir`: the one recovery may cut a torn tail from.
///
/// # Panics
/// If `dir` holds no segment.
pub fn newest_segment(dir: &Path) -> PathBuf {
    files(dir, "log")
        .pop()
        .expect("the directory has a segment")
}

/// Flips the bits of `mask` in the byte at `offset` of `file` (offsets from the end when
/// negative).
///
/// # Panics
/// If the file cannot be read or written, or is shorter than `offset`.
pub fn flip(file: &Path, offset: isize, mask: u8) {
    let mut bytes = fs::read(file).expect("the file can be read");
    let at = if offset < 0 {
        bytes.len() - offset.unsigned_abs()
    } else {
        offset.unsigned_abs()
    };
    bytes[at] ^= mask;
    fs::write(file, &bytes).expect("the file can be written");
}

/// Writes `n` single-key commits (`["k", i]`) to a database in `dir` and closes it; returns
/// the acknowledged stamps.
///
/// # Panics
/// If opening, a commit or closing fails.
pub fn write_commits(dir: &Path, n: u64) -> Vec<Versionstamp> {
    let db = Database::open(dir, options()).expect("the database opens");
    let stamps = (0..n)
        .map(|i| {
            db.set(&key!["k", i], b"some value")
                .expect("the commit succeeds")
        })
        .collect();
    db.close().expect("the database closes");
    stamps
}

/// The length of the segment [`write_commits`] leaves for `n` commits: where commit `n + 1`
/// starts in a longer log written the same way.
///
/// # Panics
/// If the scratch directory cannot be made or written.
pub fn log_len(n: u64) -> usize {
    let probe = tempfile::tempdir().expect("a scratch directory");
    write_commits(probe.path(), n);
    fs::read(newest_segment(probe.path()))
        .expect("the segment can be read")
        .len()
}

/// Copies the database files of `from` into `to` as they are now: what a crash (of the
/// process or the machine, everything synced) would leave.
///
/// # Panics
/// If a file cannot be listed or copied.
pub fn copy_files(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).expect("the database directory can be listed") {
        let path = entry.expect("a directory entry can be read").path();
        let name = path.file_name().expect("a listed file has a name");
        if name != "LOCK" {
            fs::copy(&path, to.join(name)).expect("the file can be copied");
        }
    }
}
